//! Kills and faults on what a node mostly is — containers and the firewall — held to the
//! standard files are held to: a take, a rollback across takes and a flip killed (abort, as a
//! power cut stops a process) at every step, then the next command run, against the real
//! engine and real nftables in a namespace. After it the node is exactly in one generation:
//! each container of it (name, id, running or not), no found container running beside its
//! replacement, the record saying what is in force — and `mesh rollback` after a command cut
//! short goes back to the generation that was in force before that command, never one further.
//! And two faults in the middle of a switch: the root turning read-only, the lock file removed.

use std::process::Command;

use crate::containers::{docker, docker_here, take_turn, Made};
use crate::node_fixture::Fixture;
use crate::support::{crash_points_here, crashes_at, have_root_tools, Paused};

/// How many found containers the container scenarios adopt, each its own module.
const APPS: usize = 4;

/// A node running `APPS` found containers and, at `/etc/app0.conf`, a found file: each app's
/// module declares its container (with a label the found one lacks, so a take replaces it)
/// and app0's its file too.
fn apps_declaration(made: &Made) -> String {
    let modules: String = (0..APPS)
        .map(|i| {
            let file = if i == 0 {
                r#"files = [{ path = "/etc/app0.conf", content = "the mesh's\n" }], "#
            } else {
                ""
            };
            format!(
                r#"{{ name = "app{i}", config = fun s => {{ {file}containers = [{{ name = "{p}-app{i}", image = "{img}", command = ["/bin/busybox", "sleep", "100000"], labels = {{ taken = "yes" }}, stop_timeout = 1 }}] }} }},
"#,
                p = made.prefix,
                img = made.image
            )
        })
        .collect();
    format!(
        r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "n1",
  settings = {{
    ports = {{ store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820 }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.1" }},
  }},
  modules = [
{modules}  ],
}}
"#
    )
}

/// How the engine has a container: its id, whether it runs, whether it is the mesh's.
type Seen = Option<(String, bool, bool)>;

fn seen(name: &str) -> Seen {
    let out = Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{.Id}} {{.State.Running}} {{index .Config.Labels \"mesh.module\"}}",
            name,
        ])
        .output()
        .unwrap();
    out.status.success().then(|| {
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let mut words = text.splitn(3, ' ');
        let id = words.next().unwrap_or_default().to_owned();
        let running = words.next() == Some("true");
        let ours = words
            .next()
            .is_some_and(|m| !m.is_empty() && m != "<no value>");
        (id, running, ours)
    })
}

/// The apps' found containers, started afresh (any left by an earlier round removed): their ids.
fn run_found(made: &Made) -> Vec<String> {
    (0..APPS)
        .map(|i| {
            let name = format!("{}-app{i}", made.prefix);
            for n in [name.clone(), format!("{name}.found")] {
                let _ = Command::new("docker").args(["rm", "-f", &n]).output();
            }
            docker(&[
                "run",
                "-d",
                "--name",
                &name,
                "--stop-timeout",
                "1",
                &made.image,
                "/bin/busybox",
                "sleep",
                "100000",
            ])
        })
        .collect()
}

/// A fresh node with the found containers running and the found file, adopted, app0 taken:
/// the fixture, the found ids, the generation in force (the one before the later takes).
fn adopted_with_app0_taken(made: &Made) -> (Fixture, Vec<String>, String) {
    let found = run_found(made);
    let f = Fixture::new();
    std::fs::create_dir_all(f.at("/etc")).unwrap();
    std::fs::write(f.at("/etc/app0.conf"), "found\n").unwrap();
    f.write_decl("apps.ncl", &apps_declaration(made));
    f.ok(&["adopt", f.decl("apps.ncl").to_str().unwrap()]);
    f.ok(&["take", "app0"]);
    let before = f.current_id();
    (f, found, before)
}

/// The node is exactly the generation with app0 taken and the others held: app0 the mesh's,
/// running, its found one kept stopped as `.found`, its file the mesh's; every other found
/// container under its name, the same one, running; nothing left of the later takes; the
/// record and `mesh status` say so.
fn assert_app0_only_taken(f: &Fixture, made: &Made, found: &[String], context: &str) {
    let app0 = format!("{}-app0", made.prefix);
    let (_, running, ours) = seen(&app0).unwrap_or_else(|| panic!("{context}: app0 is there"));
    assert!(running && ours, "{context}: app0 is the mesh's, running");
    assert_eq!(
        seen(&format!("{app0}.found")),
        Some((found[0].clone(), false, false)),
        "{context}: app0's found one kept, stopped"
    );
    for (i, id) in found.iter().enumerate().skip(1) {
        let name = format!("{}-app{i}", made.prefix);
        assert_eq!(
            seen(&name),
            Some((id.clone(), true, false)),
            "{context}: app{i} is the found one, running"
        );
        assert_eq!(
            seen(&format!("{name}.found")),
            None,
            "{context}: app{i} has no .found"
        );
    }
    assert_eq!(
        std::fs::read_to_string(f.at("/etc/app0.conf")).unwrap(),
        "the mesh's\n",
        "{context}"
    );
    assert_eq!(
        f.record()["taken"],
        serde_json::json!(["app0"]),
        "{context}: the record says what is in force"
    );
    let status: serde_json::Value =
        serde_json::from_str(f.ok(&["status", "--json"]).last_line()).unwrap();
    assert_eq!(status["interrupted"], false, "{context}: {status}");
    assert!(
        !f.state().join("journal.json").exists(),
        "{context}: the journal is done"
    );
}

/// A take of three modules (three containers and their found ones) killed after each change
/// on the engine, then `mesh rollback`: back to the generation in force before the take (app0
/// taken) — not one further (app0 held again), and each found container running as before,
/// even one the take had stopped and not yet renamed.
#[test]
fn a_take_killed_anywhere_then_rollback_is_back_before_the_take() {
    if !docker_here() || !crash_points_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("kt");
    let mut crashed = Vec::new();
    // (No file changes in this take: the journal is written once, before anything.)
    for point in ["journal-begun", "firewall-converged"]
        .into_iter()
        .map(str::to_owned)
        .chain((1..).map(|k| format!("container-changed:{k}")))
    {
        let (f, found, before) = adopted_with_app0_taken(&made);
        let context = format!("take app1 app2 app3 killed at {point}");
        let killed = crashes_at(
            f.command(&["take", "app1", "app2", "app3"]),
            &point,
            &context,
        );
        if killed {
            crashed.push(point.clone());
            let status = f.ok(&["status"]);
            assert!(
                status.stdout.contains("interrupted: a switch to")
                    && status.stdout.contains(&format!(
                        "`mesh rollback` undoes it (back to {})",
                        &before[..15]
                    )),
                "{context}: {}",
                status.stdout
            );
        }
        f.ok(&["rollback"]);
        assert_eq!(
            f.current_id(),
            before,
            "{context}: back to the generation before"
        );
        assert_app0_only_taken(&f, &made, &found, &context);
        if !killed && point.starts_with("container-changed") {
            break;
        }
    }
    // A take of three is twelve changes: stop, rename, create, start each.
    assert_eq!(crashed.len(), 2 + 12, "{crashed:#?}");
}

/// A rollback across a take of three modules killed after each change on the engine (some
/// found containers started again, some of the mesh's already removed), then the switch forward
/// to the taken generation again: each service runs once — the mesh's container, its found one
/// kept stopped as `.found`, never both running.
#[test]
fn a_rollback_killed_anywhere_then_forward_runs_each_service_once() {
    if !docker_here() || !crash_points_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("kr");
    let mut crashed = 0;
    for k in 1.. {
        let (f, found, before) = adopted_with_app0_taken(&made);
        f.ok(&["take", "app1", "app2", "app3"]);
        let taken = f.current_id();
        let context = format!("rollback to {before} killed after engine change {k}");
        let first = f.ok(&["generations", "--json"]);
        let first: serde_json::Value = serde_json::from_str(&first.stdout).unwrap();
        let number = first["generations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["id"] == before.as_str())
            .unwrap()["number"]
            .to_string();
        let killed = crashes_at(
            f.command(&["rollback", "--to", &number]),
            &format!("container-changed:{k}"),
            &context,
        );
        f.ok(&["switch", "--generation", &taken]);
        assert_eq!(f.current_id(), taken, "{context}");
        for (i, id) in found.iter().enumerate() {
            let name = format!("{}-app{i}", made.prefix);
            let (_, running, ours) = seen(&name).unwrap();
            assert!(running && ours, "{context}: app{i} is the mesh's, running");
            assert_eq!(
                seen(&format!("{name}.found")),
                Some((id.clone(), false, false)),
                "{context}: app{i}'s found one kept, stopped"
            );
        }
        assert_eq!(
            f.record()["taken"],
            serde_json::json!(["app0", "app1", "app2", "app3"]),
            "{context}"
        );
        assert!(!f.state().join("journal.json").exists(), "{context}");
        if !killed {
            break;
        }
        crashed += 1;
    }
    // A rollback of three is twelve changes: stop, remove, start, rename each.
    assert_eq!(crashed, 12);
}

/// A switch whose root turns read-only in its middle (after its first file is in place): it
/// fails saying which files were put back and which were not, the journal stays, `mesh status`
/// says the switch was cut short; once the root is writable again, the same switch finishes,
/// and the node is exactly its generation.
#[test]
fn a_root_turned_read_only_mid_switch_is_said_and_finished_later() {
    if !have_root_tools(&["mount", "umount", "ip"]) || !crash_points_here() {
        return;
    }
    let f = Fixture::new();
    // A root of its own to turn read-only (a managed node: nothing found in it).
    let mount = Mounted::tmpfs(&f.root());
    let a = f.decl("a.ncl").display().to_string();
    let b = f.decl("b.ncl").display().to_string();
    f.ok(&["switch", &a]);
    let paused = Paused::at(f.command(&["switch", &b]), "file-applied:1", "switch to b")
        .expect("the switch writes a file");
    mount.remount("ro");
    let failed = paused.resume();
    assert_eq!(failed.code, 3, "{}", failed.stderr);
    assert!(
        failed.stderr.contains("Read-only file system")
            && failed.stderr.contains("not put back:")
            && failed.stderr.contains("run the switch again"),
        "{}",
        failed.stderr
    );
    assert!(f.state().join("journal.json").exists(), "the journal stays");
    let status = f.ok(&["status"]);
    assert!(status.stdout.contains("interrupted"), "{}", status.stdout);
    mount.remount("rw");
    f.ok(&["switch", &b]);
    assert_eq!(
        std::fs::read_to_string(f.at(crate::node_fixture::MOTD)).unwrap(),
        "hello again\n"
    );
    assert!(!f.at(crate::node_fixture::EXTRA).exists());
    assert!(!f.state().join("journal.json").exists());
    let status: serde_json::Value =
        serde_json::from_str(f.ok(&["status", "--json"]).last_line()).unwrap();
    assert_eq!(status["interrupted"], false);
    assert!(status["drift"].as_array().unwrap().is_empty(), "{status}");
}

/// The lock holds whatever happens to its file: removed while a switch runs, a second switch
/// is still refused (exit 2, naming the holder), and the first one finishes.
#[test]
fn a_removed_lock_file_lets_no_second_switch_in() {
    if !have_root_tools(&["ip"]) || !crash_points_here() {
        return;
    }
    let f = Fixture::new();
    let a = f.decl("a.ncl").display().to_string();
    let paused = Paused::at(f.command(&["switch", &a]), "journal-begun", "switch")
        .expect("the switch begins");
    std::fs::remove_file(f.state().join("lock")).unwrap();
    let second = f.mesh(&["switch", &a]);
    assert_eq!(second.code, 2, "{}", second.stderr);
    assert!(second.stderr.contains("another mesh"), "{}", second.stderr);
    let first = paused.resume();
    assert_eq!(first.code, 0, "{}", first.stderr);
    f.ok(&["switch", &a]);
}

/// A tmpfs mounted at a folder for one test, unmounted when dropped (also when it fails).
struct Mounted(std::path::PathBuf);

impl Mounted {
    fn tmpfs(at: &std::path::Path) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
            .arg(at)
            .status()
            .unwrap();
        assert!(ok.success(), "mount tmpfs at {}", at.display());
        Self(at.to_owned())
    }

    fn remount(&self, how: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,{how}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(ok.success(), "remount {how} {}", self.0.display());
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A flip killed at every step of its switch, then `mesh rollback`: back to the generation in
/// force before the flip (the store taken, not one further back), the found firewall in force
/// as it was — every port reaches whom it reached before the flip, the base ruleset gone — and
/// the record adopted. Every port reachable when the rollback starts that is reachable after it
/// answers all through it: the found firewall comes back in the transaction that removes the
/// base ruleset, never beside it.
#[test]
fn a_flip_killed_anywhere_then_rollback_closes_nothing_on_the_way() {
    use crate::firewall_adopted::{declaration, matrix, open_in};
    use crate::netlab::{Lab, PREDECESSOR};
    if !have_root_tools(&["ip", "nft"]) || !crash_points_here() {
        return;
    }
    let mut crashed = Vec::new();
    for point in mesh_lib::crash::POINTS {
        let lab = Lab::new();
        lab.nft(&format!("flush ruleset\n{PREDECESSOR}"));
        for port in [80, 4222, 5432, 15672] {
            Lab::serve(&lab.node, port);
        }
        for port in [5432, 5000] {
            Lab::serve(&lab.ctr, port);
        }
        let f = Fixture::in_netns(&lab.node.name);
        f.write_decl("fw.ncl", &declaration(true));
        f.ok(&["adopt", f.decl("fw.ncl").to_str().unwrap()]);
        f.ok(&["take", "store"]);
        let before = f.current_id();
        let before_flip = open_in(&matrix(&lab));
        let context = format!("flip killed at {point}");
        if crashes_at(f.command(&["flip", "--force"]), point, &context) {
            crashed.push(*point);
        }
        // What answers now, and the probe that keeps asking through the rollback.
        let open_now: Vec<u16> = [80u16, 4222]
            .into_iter()
            .filter(|p| Lab::reaches(&lab.outside, "192.0.2.1", *p))
            .collect();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let refused = std::thread::scope(|s| {
            let probe = s.spawn(|| probe_until(&lab, &open_now, &stop));
            let back = f.mesh(&["rollback"]);
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            assert_eq!(back.code, 0, "{context}: {}", back.stderr);
            probe.join().unwrap()
        });
        let after = open_in(&matrix(&lab));
        assert_eq!(
            after, before_flip,
            "{context}: the found firewall as it was"
        );
        let closed: Vec<&u16> = refused
            .iter()
            .filter(|p| after.contains(&format!("outside v4:{p}")))
            .collect();
        assert!(
            closed.is_empty(),
            "{context}: ports open before and after the rollback were refused during it: {closed:?}"
        );
        assert_eq!(f.current_id(), before, "{context}: the store still taken");
        assert_eq!(f.record()["mode"], "adopted", "{context}");
        let ruleset = lab.node.exec(&["nft", "list", "ruleset"]).output().unwrap();
        let ruleset = String::from_utf8_lossy(&ruleset.stdout);
        assert!(
            !ruleset.contains("mesh_base") && ruleset.contains("table inet pred"),
            "{context}: {ruleset}"
        );
    }
    // (This flip writes no file: the points of the files phase are passed over.) Killed
    // before its firewall changed, after, and after each step of its commit.
    for reached in [
        "journal-begun",
        "firewall-converged",
        "current-switched",
        "record-followed",
    ] {
        assert!(crashed.contains(&reached), "{reached}: {crashed:?}");
    }
}

/// Connects from outside to each of `ports` again and again until `stop`: the ports that
/// refused (timed out) at least once.
fn probe_until(
    lab: &crate::netlab::Lab,
    ports: &[u16],
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<u16> {
    let mut refused = std::collections::BTreeSet::new();
    crate::netlab::in_ns(&lab.outside.name, || {
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            for port in ports {
                let target = std::net::SocketAddr::from(([192, 0, 2, 1], *port));
                if std::net::TcpStream::connect_timeout(
                    &target,
                    std::time::Duration::from_millis(300),
                )
                .is_err()
                {
                    refused.insert(*port);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    });
    refused.into_iter().collect()
}
