//! At the seed's scale: a node whose predecessor runs dozens of containers, each with its data
//! in a volume of its own and a short stop timeout (1 s, so that the sum of the stops and their
//! maximum differ visibly and the suite stays quick). Adopted (nothing restarted), taken ten at
//! a time in one generation, rolled back across and forward again; and killed in the middle of
//! a concurrent container phase, then recovered. Every container, volume and image carries the
//! test's prefix and is removed afterwards.

use std::collections::BTreeMap;
use std::process::Command;

use crate::containers::{docker, docker_here, take_turn, Made};
use crate::node_fixture::Fixture;

/// The predecessor's app `i`: on its first start it writes its data, then it sleeps as PID 1,
/// which ignores SIGTERM, so a stop waits its whole timeout (1 s).
fn app(made: &Made, i: usize) -> String {
    format!("{}-app{i}", made.prefix)
}

/// Runs `n` predecessor apps, a few at a time; their ids, in order.
fn run_predecessors(made: &Made, n: usize) -> Vec<String> {
    let ids: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..8)
            .map(|w| {
                s.spawn(move || {
                    (0..n)
                        .filter(|i| i % 8 == w)
                        .map(|i| {
                            let id = docker(&[
                                "run",
                                "-d",
                                "--name",
                                &app(made, i),
                                "--stop-timeout",
                                "1",
                                "-v",
                                &format!("{}-vol{i}:/data", made.prefix),
                                &made.image,
                                "/bin/busybox",
                                "sh",
                                "-c",
                                &format!(
                                    "[ -f /data/hello ] || echo app-{i} > /data/hello; exec /bin/busybox sleep 100000"
                                ),
                            ]);
                            (i, id)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<(usize, String)> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        all.sort();
        all.into_iter().map(|(_, id)| id).collect()
    });
    // Each wrote its data before anything is asked of the mesh.
    for i in 0..n {
        for _ in 0..50 {
            if data(&app(made, i)).as_deref() == Some(format!("app-{i}").as_str()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    ids
}

/// A node assigning one module per app (`app0`, `app1`, …), each declaring its container on
/// the app's volume.
fn declaration(made: &Made, n: usize) -> String {
    let modules: String = (0..n)
        .map(|i| {
            format!(
                r#"    {{ name = "app{i}", config = fun s => {{ containers = [{{ name = "{name}", image = "{image}", command = ["/bin/busybox", "sleep", "100000"], volumes = [{{ source = "{p}-vol{i}", target = "/data" }}] }}] }} }},
"#,
                name = app(made, i),
                image = made.image,
                p = made.prefix
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

/// What the container holds at /data/hello (`None` if it does not run).
fn data(name: &str) -> Option<String> {
    let out = Command::new("docker")
        .args(["exec", name, "/bin/busybox", "cat", "/data/hello"])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Every container of the test by name: its id, whether it runs, whether it is the mesh's.
fn engine(made: &Made) -> BTreeMap<String, (String, bool, bool)> {
    let out = docker(&[
        "ps",
        "-a",
        "--no-trunc",
        "--filter",
        &format!("name={}", made.prefix),
        "--format",
        "{{.Names}} {{.ID}} {{.State}} {{.Label \"mesh.module\"}}",
    ]);
    out.lines()
        .map(|l| {
            let mut w = l.split(' ');
            let name = w.next().unwrap_or_default().to_owned();
            let id = w.next().unwrap_or_default().to_owned();
            let running = w.next() == Some("running");
            let ours = w.next().is_some_and(|m| !m.is_empty());
            (name, (id, running, ours))
        })
        .collect()
}

/// `(id, StartedAt)` of each app under its name.
fn started(made: &Made, n: usize) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| app(made, i)).collect();
    let mut args = vec!["inspect", "-f", "{{.Id}} {{.State.StartedAt}}"];
    args.extend(names.iter().map(String::as_str));
    docker(&args).lines().map(str::to_owned).collect()
}

/// The container steps of a `--json` switch, counted by action.
fn counts(out: &str) -> BTreeMap<String, usize> {
    let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let mut out = BTreeMap::new();
    for step in v["containers"].as_array().unwrap() {
        *out.entry(step["action"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    out
}

fn count_map(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// Sixty found containers, like the control-node's apps: `mesh adopt` holds them all without
/// restarting one; `mesh take` of ten modules is one generation whose stops run together (they
/// end within a second or two of each other, not ten seconds apart); a rollback across it puts
/// the same ten containers (same ids) back under their names, their data intact, and forward
/// again takes them again. The held fifty are never restarted, and each command's output
/// counts what it did.
#[test]
fn sixty_found_containers_adopted_taken_ten_at_once_rolled_back_and_forward() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let n = 60;
    let made = Made::new("sixty");
    let found = run_predecessors(&made, n);
    let before = started(&made, n);
    let f = Fixture::new();
    f.write_decl("n.ncl", &declaration(&made, n));
    let decl = f.decl("n.ncl").display().to_string();

    let adopted = f.ok(&["adopt", &decl]);
    assert!(
        adopted.stdout.contains("containers: 60 held"),
        "{}",
        adopted.stdout
    );
    assert_eq!(
        f.record()["found"]["containers"]
            .as_object()
            .map(|o| o.len()),
        Some(n)
    );
    assert_eq!(started(&made, n), before, "adopt restarted nothing");

    let ten: Vec<String> = (0..10).map(|i| format!("app{i}")).collect();
    let mut take: Vec<&str> = vec!["take"];
    take.extend(ten.iter().map(String::as_str));
    take.push("--json");
    let taken = f.ok(&take);
    let v: serde_json::Value = serde_json::from_str(taken.last_line()).unwrap();
    assert_eq!(v["number"], 2, "one generation for the ten");
    assert_eq!(
        counts(&taken.stdout),
        count_map(&[("hold", 50), ("retire", 10), ("run", 10)])
    );
    let now = engine(&made);
    for (i, id) in found.iter().enumerate().take(10) {
        let name = app(&made, i);
        let (_, running, ours) = &now[&name];
        assert!(*running && *ours, "{name}: the mesh's runs");
        assert_eq!(now[&format!("{name}.found")], (id.clone(), false, false));
        assert_eq!(data(&name), Some(format!("app-{i}")), "{name}: same volume");
    }
    // The ten stops ran together: each waited its 1 s timeout, at about the same time.
    let mut finished: Vec<String> = (0..10)
        .map(|i| {
            docker(&[
                "inspect",
                "-f",
                "{{.State.FinishedAt}}",
                &format!("{}.found", app(&made, i)),
            ])
        })
        .collect();
    finished.sort();
    let seconds = |t: &str| -> f64 {
        // 2025-01-01T12:34:56.123456789Z: the seconds of the day are enough here.
        let time = t.split('T').nth(1).unwrap().trim_end_matches('Z');
        let mut parts = time.split(':');
        let h: f64 = parts.next().unwrap().parse().unwrap();
        let m: f64 = parts.next().unwrap().parse().unwrap();
        let s: f64 = parts.next().unwrap().parse().unwrap();
        h * 3600.0 + m * 60.0 + s
    };
    let spread = seconds(&finished[9]) - seconds(&finished[0]);
    assert!(
        (0.0..4.0).contains(&spread),
        "the found containers stopped {spread:.1} s apart: not concurrently ({finished:?})"
    );
    assert_eq!(
        started(&made, n)[10..],
        before[10..],
        "the held fifty were not restarted"
    );

    let back = f.ok(&["rollback"]);
    assert!(
        back.stdout.contains("containers: 50 held, 10 restored"),
        "{}",
        back.stdout
    );
    let now = engine(&made);
    for (i, id) in found.iter().enumerate() {
        let name = app(&made, i);
        assert_eq!(
            now[&name],
            (id.clone(), true, false),
            "{name}: the found one, back"
        );
        assert!(!now.contains_key(&format!("{name}.found")), "{name}.found");
    }
    for i in 0..10 {
        assert_eq!(
            data(&app(&made, i)),
            Some(format!("app-{i}")),
            "data intact"
        );
    }
    assert_eq!(started(&made, n)[10..], before[10..]);

    let forward = f.ok(&["rollback", "--to", "2", "--json"]);
    assert_eq!(
        counts(&forward.stdout),
        count_map(&[("hold", 50), ("retire", 10), ("run", 10)])
    );
    let now = engine(&made);
    for (i, id) in found.iter().enumerate().take(10) {
        let name = app(&made, i);
        assert!(
            now[&name].1 && now[&name].2,
            "{name}: the mesh's runs again"
        );
        assert_eq!(now[&format!("{name}.found")].0, *id);
        assert_eq!(data(&name), Some(format!("app-{i}")));
    }
    assert_eq!(started(&made, n)[10..], before[10..]);
    let status: serde_json::Value =
        serde_json::from_str(&f.ok(&["status", "--json"]).stdout).unwrap();
    assert_eq!(
        status["taken"].as_array().map(Vec::len),
        Some(10),
        "{status}"
    );
}

/// A take and a rollback of twenty containers killed (abort, as a power cut stops a process)
/// in the middle of their concurrent container phase — early among the stops, between the
/// stops and the starts, late among the starts — then run again: every container ends the old
/// or the new one, no found container is lost at any point, and none is left as `NAME.found`
/// after the rollback.
#[test]
fn a_concurrent_container_phase_killed_midway_recovers() {
    if !docker_here() {
        return;
    }
    if !crate::support::crash_points_here() {
        return;
    }
    let _turn = take_turn();
    let n = 20;
    let made = Made::new("crash20");
    let found = run_predecessors(&made, n);
    let f = Fixture::new();
    f.write_decl("n.ncl", &declaration(&made, n));
    let decl = f.decl("n.ncl").display().to_string();
    f.ok(&["adopt", &decl]);
    let modules: Vec<String> = (0..n).map(|i| format!("app{i}")).collect();
    let mut take: Vec<&str> = vec!["take"];
    take.extend(modules.iter().map(String::as_str));

    // The found containers are never removed: each is still on the engine, by its id, and
    // once the calls the killed run had in flight have ended (the engine finishes them), it is
    // under its name or kept as NAME.found.
    let none_lost = |context: &str| {
        for (i, id) in found.iter().enumerate() {
            let name = app(&made, i);
            let mut at = String::new();
            for _ in 0..100 {
                let out = Command::new("docker")
                    .args(["inspect", "-f", "{{.Name}}", id])
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{context}: the found {name} ({id}) is lost"
                );
                at = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                if at == format!("/{name}") || at == format!("/{name}.found") {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            assert!(
                at == format!("/{name}") || at == format!("/{name}.found"),
                "{context}: the found {name} is under {at}"
            );
        }
    };
    // A take is 80 changes (20 stops and renames, then 20 creates and starts), a rollback 60
    // (20 removals, then 20 starts and renames back).
    let mut crashed = 0;
    for (at_take, at_rollback) in [(7, 4), (40, 25), (67, 52)] {
        let context = format!("take stopped after engine change {at_take}");
        if crate::support::crashes_at(
            f.command(&take),
            &format!("container-changed:{at_take}"),
            &context,
        ) {
            crashed += 1;
        }
        none_lost(&context);
        f.ok(&take);
        let now = engine(&made);
        for (i, id) in found.iter().enumerate() {
            let name = app(&made, i);
            assert!(
                now[&name].1 && now[&name].2,
                "{context}: {name} is the mesh's, running"
            );
            assert_eq!(
                now[&format!("{name}.found")],
                (id.clone(), false, false),
                "{context}: the found {name} kept, stopped"
            );
        }

        let context = format!("rollback stopped after engine change {at_rollback}");
        if crate::support::crashes_at(
            f.command(&["rollback"]),
            &format!("container-changed:{at_rollback}"),
            &context,
        ) {
            crashed += 1;
        }
        none_lost(&context);
        f.ok(&["rollback"]);
        let now = engine(&made);
        for (i, id) in found.iter().enumerate() {
            let name = app(&made, i);
            assert_eq!(now[&name], (id.clone(), true, false), "{context}: {name}");
        }
        assert!(
            !now.keys().any(|k| k.ends_with(".found")),
            "{context}: a found container left renamed: {now:#?}"
        );
        assert!(!f.state().join("journal.json").exists(), "{context}");
        for i in [0, n - 1] {
            assert_eq!(data(&app(&made, i)), Some(format!("app-{i}")), "{context}");
        }
    }
    assert_eq!(crashed, 6, "every run was stopped where it was asked to");
}
