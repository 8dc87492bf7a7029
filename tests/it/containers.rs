//! Containers through a real Docker engine, with an image the test makes by `docker import` of
//! the static busybox: a predecessor's container is held (not restarted) when its module is
//! assigned, the take keeps it as `NAME.found` and runs the mesh's on the same volume, a
//! rollback brings it back (same id, data intact). Every container, volume and image the test
//! makes carries its unique prefix and is removed afterwards, also when the test fails.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use crate::node_fixture::Fixture;
use crate::support::have_root_tools;

pub(crate) fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The first of `n` consecutive TCP ports free on 127.0.0.1 now, for a container to publish:
/// below the kernel's ephemeral range (32768 and up by default), where no connection's local
/// port is ever taken from — a fixed port there could meet any socket of a concurrent test —
/// and disjoint from the ports any other test of this process was given.
pub(crate) fn free_ports(n: u16) -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = 10_000 + (std::process::id() % 100) as u16 * 200;
    loop {
        let base = start + NEXT.fetch_add(n, Ordering::SeqCst);
        assert!(base + n < 32_768, "no free ports below the ephemeral range");
        if (base..base + n).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
}

/// What the test made on the engine; all of it goes when dropped.
pub(crate) struct Made {
    pub(crate) prefix: String,
    pub(crate) image: String,
}

impl Made {
    /// Names start `meshtest<pid><tag>`: tests running at once need tags that are not
    /// prefixes of one another (Docker's name filter matches substrings).
    pub(crate) fn new(tag: &str) -> Self {
        let prefix = format!("meshtest{}{tag}", std::process::id());
        let image = format!("{prefix}-busybox:1");
        crate::support::import_busybox(&image, None);
        Self { prefix, image }
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        let Ok(names) = Command::new("docker")
            .args(["ps", "-aq", "--filter", &format!("name={}", self.prefix)])
            .output()
        else {
            return;
        };
        for id in String::from_utf8_lossy(&names.stdout).split_whitespace() {
            let _ = Command::new("docker").args(["rm", "-f", id]).output();
        }
        for (kind, remove) in [("volume", ["rm", "-f"].as_slice()), ("network", &["rm"])] {
            let Ok(listed) = Command::new("docker")
                .args([
                    kind,
                    "ls",
                    "-q",
                    "--filter",
                    &format!("name={}", self.prefix),
                ])
                .output()
            else {
                continue;
            };
            for id in String::from_utf8_lossy(&listed.stdout).split_whitespace() {
                let _ = Command::new("docker")
                    .arg(kind)
                    .args(remove)
                    .arg(id)
                    .output();
            }
        }
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.image])
            .output();
    }
}

fn get(port: u16) -> Option<String> {
    fetch(port, "/hello")
}

/// The body of `GET path` from 127.0.0.1:`port`, trying for 3 s.
fn fetch(port: u16, path: &str) -> Option<String> {
    for _ in 0..30 {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes());
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            if let Some(body) = out.split("\r\n\r\n").nth(1) {
                return Some(body.to_owned());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

fn declaration(made: &Made, port: u16, with_cache: bool) -> String {
    let cache = if with_cache {
        format!(
            r#"{{ name = "cache", config = fun s => {{ containers = [{{ name = "{p}-cache", image = "{i}", command = ["/bin/busybox", "sleep", "1000"] }}] }} }},"#,
            p = made.prefix,
            i = made.image
        )
    } else {
        String::new()
    };
    format!(
        r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "n1",
  settings = {{
    ports = {{ store = {port}, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820 }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.1" }},
  }},
  modules = [
    {{ name = "store", config = fun s => {{ containers = [{{
        name = "{p}-store",
        image = "{i}",
        command = ["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/data"],
        publish = [{{ host_port = s.ports.store, container_port = 8080, host_ip = "127.0.0.1" }}],
        volumes = [{{ source = "{p}-data", target = "/data" }}],
    }}] }} }},
    {cache}
  ],
}}
"#,
        p = made.prefix,
        i = made.image
    )
}

/// The engine is one per node, and the mesh removes every container of its own that the
/// generation in force does not declare: tests that switch containers on it take turns.
static ENGINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) fn take_turn() -> std::sync::MutexGuard<'static, ()> {
    ENGINE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether root, docker and a Docker engine are here (in CI their absence is a failure).
pub(crate) fn docker_here() -> bool {
    if !have_root_tools(&["docker", "tar"]) {
        return false;
    }
    if Command::new("docker")
        .arg("info")
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        let why = "no Docker engine answers";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{why}, and CI must run this test");
        }
        eprintln!("NOT RUN outside CI: {why}");
        return false;
    }
    true
}

/// The named volume `PREFIX-data`, holding `hello` for busybox httpd to serve.
pub(crate) fn hello_volume(made: &Made) {
    docker(&[
        "run",
        "--rm",
        "-v",
        &format!("{}-data:/data", made.prefix),
        &made.image,
        "/bin/busybox",
        "sh",
        "-c",
        "echo hello > /data/hello",
    ]);
}

/// The predecessor's store: busybox httpd serving the `hello` in its named volume on
/// 127.0.0.1:`port`; stopped within a second (`--stop-timeout`). Returns its id.
fn run_predecessor(made: &Made, port: u16) -> String {
    hello_volume(made);
    docker(&[
        "run",
        "-d",
        "--name",
        &format!("{}-store", made.prefix),
        "--stop-timeout",
        "1",
        "-p",
        &format!("127.0.0.1:{port}:8080"),
        "-v",
        &format!("{}-data:/data", made.prefix),
        &made.image,
        "/bin/busybox",
        "httpd",
        "-f",
        "-p",
        "8080",
        "-h",
        "/data",
    ])
}

/// Held while assigned, taken on the same volume, restored by a rollback, taken again.
#[test]
fn predecessor_container_is_held_taken_and_restored() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("a");
    let port = free_ports(1);
    let store = format!("{}-store", made.prefix);
    // The predecessor's store, its data in a named volume.
    run_predecessor(&made, port);
    assert_eq!(get(port).as_deref(), Some("hello\n"));
    let (id, started) = (
        docker(&["inspect", "-f", "{{.Id}}", &store]),
        docker(&["inspect", "-f", "{{.State.StartedAt}}", &store]),
    );

    let f = Fixture::new();
    f.write_decl("n.ncl", &declaration(&made, port, true));
    // Genesis on the store's port: the predecessor's container publishes it.
    let genesis = f.mesh(&["genesis", f.decl("n.ncl").to_str().unwrap()]);
    assert_eq!(genesis.code, 2, "{}", genesis.stderr);
    assert!(
        genesis.stderr.contains(&format!(
            "port {port}/tcp (store) is taken by container {store}"
        )),
        "{}",
        genesis.stderr
    );

    let adopted = f.ok(&["adopt", f.decl("n.ncl").to_str().unwrap()]);
    assert!(
        adopted
            .stdout
            .contains(&format!("hold     container {store}")),
        "{}",
        adopted.stdout
    );
    assert!(f.record()["found"]["containers"][&store]["spec"].is_string());
    assert_eq!(
        docker(&["inspect", "-f", "{{.Id}} {{.State.StartedAt}}", &store]),
        format!("{id} {started}"),
        "not restarted"
    );
    assert_eq!(get(port).as_deref(), Some("hello\n"));
    // The flip preview lists the port the engine says the container publishes (in the
    // machine's namespace, not the node's: closed there, now and after).
    let preview: serde_json::Value =
        serde_json::from_str(f.ok(&["flip", "--preview", "--json"]).last_line()).unwrap();
    let listed = preview["ports"].as_array().unwrap();
    assert!(
        listed.iter().any(|p| p["port"] == port
            && p["held_by"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["kind"] == "container" && h["name"] == store.as_str())
            && p["after"]["ipv4"]["from"] == "closed"),
        "{preview}"
    );
    // The cache collides with nothing: staged, created but not running.
    let cache = format!("{}-cache", made.prefix);
    assert_eq!(
        docker(&["inspect", "-f", "{{.State.Status}}", &cache]),
        "created"
    );

    let status: serde_json::Value =
        serde_json::from_str(&f.ok(&["status", "--json"]).stdout).unwrap();
    assert_eq!(
        status["containers"],
        serde_json::json!({"held": 1, "staged": 1, "managed": 0})
    );
    assert_eq!(
        status["take_would_retire"],
        serde_json::json!([{"module": "store", "container": store}])
    );

    // The take: the predecessor's stops and is kept; the mesh's serves the same data.
    f.ok(&["take", "store"]);
    assert_eq!(
        docker(&[
            "inspect",
            "-f",
            "{{.Id}} {{.State.Running}}",
            &format!("{store}.found")
        ]),
        format!("{id} false")
    );
    assert_eq!(
        docker(&[
            "inspect",
            "-f",
            "{{index .Config.Labels \"mesh.module\"}}",
            &store
        ]),
        "store"
    );
    assert_eq!(get(port).as_deref(), Some("hello\n"));

    // Rollback: the predecessor's container is back under its name, same id, data intact.
    f.ok(&["rollback"]);
    assert_eq!(
        docker(&["inspect", "-f", "{{.Id}} {{.State.Running}}", &store]),
        format!("{id} true")
    );
    assert!(
        Command::new("docker")
            .args(["inspect", &format!("{store}.found")])
            .output()
            .unwrap()
            .status
            .code()
            != Some(0)
    );
    assert_eq!(get(port).as_deref(), Some("hello\n"));

    // Forward again: taken again.
    f.ok(&["rollback", "--to", "2"]);
    assert_eq!(
        docker(&[
            "inspect",
            "-f",
            "{{index .Config.Labels \"mesh.module\"}}",
            &store
        ]),
        "store"
    );
    assert!(docker(&[
        "inspect",
        "-f",
        "{{index .Config.Labels \"mesh.generation\"}}",
        &store
    ])
    .starts_with("b3:"));
    assert_eq!(get(port).as_deref(), Some("hello\n"));

    // A switch to what is in force restarts nothing; a changed spec recreates the container.
    let ours = docker(&["inspect", "-f", "{{.Id}} {{.State.StartedAt}}", &store]);
    f.ok(&["switch", f.decl("n.ncl").to_str().unwrap()]);
    assert_eq!(
        docker(&["inspect", "-f", "{{.Id}} {{.State.StartedAt}}", &store]),
        ours,
        "equal spec: left alone"
    );
    f.write_decl(
        "n.ncl",
        &declaration(&made, port, true).replacen(
            r#"image = "#,
            r#"environment = { GREETING = "hi" }, image = "#,
            1,
        ),
    );
    let ran = f.ok(&["switch", f.decl("n.ncl").to_str().unwrap()]);
    assert!(
        ran.stdout.contains(&format!(
            "run      container {store}  (recreated: its spec changed)"
        )),
        "{}",
        ran.stdout
    );
    assert_ne!(
        docker(&["inspect", "-f", "{{.Id}}", &store]),
        ours.split(' ').next().unwrap()
    );
    assert!(docker(&["inspect", "-f", "{{.Config.Env}}", &store]).contains("GREETING=hi"));
    assert_eq!(get(port).as_deref(), Some("hello\n"));
}

/// With no engine answering, a switch that declares containers is a clear error and changes
/// nothing.
#[test]
fn docker_unreachable_changes_nothing() {
    if !have_root_tools(&[]) {
        return;
    }
    let made_prefix = format!("meshtest{}x", std::process::id());
    let f = Fixture::new();
    f.write_decl(
        "n.ncl",
        &declaration(&Made { prefix: made_prefix, image: "none".into() }, 20999, false).replace("modules = [", "modules = [ { name = \"motd\", config = fun s => { files = [{ path = \"/etc/motd\", content = \"hi\" }] } },"),
    );
    let before = f.snapshot();
    let mut c = f.command(&["switch", f.decl("n.ncl").to_str().unwrap()]);
    c.env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
    let ran = crate::support::run(c);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("the Docker engine is not reachable at unix:///nonexistent/docker.sock"),
        "{}",
        ran.stderr
    );
    assert_eq!(f.snapshot(), before);
}

/// A container under the store's name: its id, whether it runs, whether it is the mesh's.
type Named = Option<(String, bool, bool)>;
/// The one kept as `NAME.found`: its id, whether it runs.
type Kept = Option<(String, bool)>;

/// Where the engine stands for the store.
fn engine_state(store: &str) -> (Named, Kept) {
    let inspect = |name: &str| {
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
    };
    (
        inspect(store),
        inspect(&format!("{store}{}", ".found")).map(|(id, running, _)| (id, running)),
    )
}

/// A take and a rollback stopped (abort, as a power cut stops a process) right after each
/// change on the engine — a stop, a rename, a create, a start, a removal — then run again: the
/// engine ends as the generation in force says, the found container never lost, and the
/// service answers with the same data.
#[test]
fn container_steps_survive_a_crash_after_each_change() {
    if !docker_here() {
        return;
    }
    if !crate::support::crash_points_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("c");
    let port = free_ports(1);
    let store = format!("{}-store", made.prefix);
    let mut crashed = Vec::new();
    for rollback in [false, true] {
        for k in 1.. {
            let found = run_predecessor(&made, port);
            let f = Fixture::new();
            f.write_decl("n.ncl", &declaration(&made, port, false));
            let decl = f.decl("n.ncl").display().to_string();
            f.ok(&["adopt", &decl]);
            if rollback {
                f.ok(&["take", "store"]);
            }
            let act: &[&str] = if rollback {
                &["rollback"]
            } else {
                &["take", "store"]
            };
            let context = format!("{act:?} stopped after engine change {k}");
            let stopped = crate::support::crashes_at(
                f.command(act),
                &format!("container-changed:{k}"),
                &context,
            );
            if stopped {
                crashed.push(context.clone());
                // The same command again finishes what it began.
                f.ok(act);
            }
            let (named, kept) = engine_state(&store);
            if rollback {
                assert_eq!(
                    (named, kept),
                    (Some((found.clone(), true, false)), None),
                    "{context}: the found container back under its name, running"
                );
            } else {
                let (id, running, ours) = named.expect("a container under the store's name");
                assert!(ours && running && id != found, "{context}: the mesh's runs");
                assert_eq!(
                    kept,
                    Some((found.clone(), false)),
                    "{context}: the found one kept, stopped"
                );
            }
            assert_eq!(get(port).as_deref(), Some("hello\n"), "{context}");
            assert!(
                !f.state().join("journal.json").exists(),
                "{context}: the journal was not finished"
            );
            for name in [store.clone(), format!("{store}.found")] {
                let _ = Command::new("docker").args(["rm", "-f", &name]).output();
            }
            if !stopped {
                break;
            }
        }
    }
    println!("{} crashed runs: {crashed:#?}", crashed.len());
    // A take is four changes (stop, rename, create, start), a rollback four (stop, remove,
    // start, rename): each was stopped after.
    assert_eq!(crashed.len(), 8, "{crashed:#?}");
}

/// A declaration with a file (`/etc/motd`, `motd`) and, optionally, the store container.
fn with_motd(made: &Made, port: u16, motd: &str, store: bool) -> String {
    let decl = declaration(made, port, false).replace(
        "modules = [",
        &format!(
            "modules = [ {{ name = \"motd\", config = fun s => {{ files = [{{ path = \"/etc/motd\", content = \"{motd}\" }}] }} }},"
        ),
    );
    if store {
        decl
    } else {
        let start = decl.find("    { name = \"store\"").unwrap();
        let end = decl[start..].find("}] } },").unwrap() + start + "}] } },".len();
        format!("{}{}", &decl[..start], &decl[end..])
    }
}

/// An image the engine does not have is refused before anything changes: the mesh does not
/// pull, and a create would fail only after the files were switched.
#[test]
fn missing_image_is_refused_before_anything_changes() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let absent = Made {
        prefix: format!("meshtest{}m", std::process::id()),
        image: format!("meshtest{}m-absent:1", std::process::id()),
    };
    let f = Fixture::new();
    f.write_decl("n.ncl", &with_motd(&absent, 20998, "hi", true));
    let before = f.snapshot();
    let ran = f.mesh(&["switch", f.decl("n.ncl").to_str().unwrap()]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains(&format!(
            "image is not on the Docker engine: {}",
            absent.image
        )) && ran.stderr.contains("nothing was changed"),
        "{}",
        ran.stderr
    );
    assert_eq!(f.snapshot(), before);
    assert_eq!(
        engine_state(&format!("{}-store", absent.prefix)),
        (None, None)
    );
}

/// A container that cannot start (its host port is taken) fails the switch after the files
/// were put in place: the error says so and names the generation still in force, and going back
/// to it puts back its files and removes the container the failed switch created.
#[test]
fn container_failure_after_the_files_names_the_way_back() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("u");
    let f = Fixture::new();
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    f.write_decl("one.ncl", &with_motd(&made, port, "one", false));
    f.write_decl("two.ncl", &with_motd(&made, port, "two", true));
    f.ok(&["switch", f.decl("one.ncl").to_str().unwrap()]);
    let one = f.current_id();

    let ran = f.mesh(&["switch", f.decl("two.ncl").to_str().unwrap()]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    let short = &one[..15];
    assert!(
        ran.stderr
            .contains("a container step failed after the files of")
            && ran
                .stderr
                .contains(&format!("{short} is still the generation in force"))
            && ran
                .stderr
                .contains(&format!("mesh switch --generation {short}")),
        "{}",
        ran.stderr
    );
    assert_eq!(f.current_id(), one);
    assert_eq!(std::fs::read_to_string(f.at("/etc/motd")).unwrap(), "two");

    f.ok(&["switch", "--generation", short]);
    assert_eq!(std::fs::read_to_string(f.at("/etc/motd")).unwrap(), "one");
    assert_eq!(
        engine_state(&format!("{}-store", made.prefix)),
        (None, None)
    );
    drop(holder);
}

/// A container that mounts a declared file is restarted when a switch changes the file: a bind
/// mount holds the file it found, so without the restart it would serve the old one. Derived
/// from the volume, nothing to declare; the container is the same one (restarted, not
/// recreated).
#[test]
fn a_container_restarts_when_a_file_it_mounts_changes() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("m");
    let f = Fixture::new();
    let port = free_ports(1);
    let decl = |page: &str| {
        format!(
            r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "n1",
  settings = {{
    ports = {{ store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820, web = {port} }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.1" }},
  }},
  modules = [
    {{ name = "web", config = fun s => {{
        files = [{{ path = "/etc/web/index.html", content = "{page}" }}],
        containers = [{{
          name = "{p}-web",
          image = "{i}",
          command = ["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/www"],
          publish = [{{ host_port = s.ports.web, container_port = 8080, host_ip = "127.0.0.1" }}],
          volumes = [{{ source = "/etc/web/index.html", target = "/www/index.html", read_only = true }}],
        }}],
    }} }},
  ],
}}
"#,
            p = made.prefix,
            i = made.image
        )
    };
    let get_page = || fetch(port, "/index.html");
    f.write_decl("v1.ncl", &decl("one\\n"));
    f.ok(&["switch", f.decl("v1.ncl").to_str().unwrap()]);
    assert_eq!(get_page().as_deref(), Some("one\n"));
    let name = format!("{}-web", made.prefix);
    let before = docker(&["inspect", "-f", "{{.Id}} {{.State.StartedAt}}", &name]);

    f.write_decl("v2.ncl", &decl("two\\n"));
    let ran = f.ok(&["switch", f.decl("v2.ncl").to_str().unwrap()]);
    assert!(
        ran.stdout.contains(&format!(
            "restart  container {name}: mounts /etc/web/index.html"
        )),
        "{}",
        ran.stdout
    );
    assert_eq!(
        get_page().as_deref(),
        Some("two\n"),
        "the new file is served"
    );
    let after = docker(&["inspect", "-f", "{{.Id}} {{.State.StartedAt}}", &name]);
    let (id_before, started_before) = before.split_once(' ').unwrap();
    let (id_after, started_after) = after.split_once(' ').unwrap();
    assert_eq!(id_before, id_after, "restarted, not recreated");
    assert_ne!(started_before, started_after, "restarted");

    let again = f.ok(&["switch", f.decl("v2.ncl").to_str().unwrap()]);
    assert!(!again.stdout.contains("restart"), "{}", again.stdout);
}

/// Containers' steps run concurrently, and a failure stops the phase cleanly: with one job at a
/// time, the first container that cannot start (its host port is taken) stops the phase before
/// any other is launched; with many, every container in flight is waited for and every failure
/// is named with the engine's message. Either way the next switch converges once the cause is
/// gone.
#[test]
fn container_failures_are_all_named_and_the_next_switch_converges() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("f");
    let held_a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let held_b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let ports = [
        held_a.local_addr().unwrap().port(),
        held_b.local_addr().unwrap().port(),
        free(),
        free(),
    ];
    let names = ["a", "b", "c", "d"].map(|n| format!("{}-{n}", made.prefix));
    let modules: String = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            format!(
                r#"{{ name = "m{i}", config = fun s => {{ containers = [{{ name = "{name}", image = "{image}", command = ["/bin/busybox", "httpd", "-f", "-p", "8080"], publish = [{{ host_port = s.ports.p{i}, container_port = 8080, host_ip = "127.0.0.1" }}] }}] }} }},
"#,
                image = made.image
            )
        })
        .collect();
    let settings: String = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("p{i} = {p}, "))
        .collect();
    let f = Fixture::new();
    f.write_decl(
        "n.ncl",
        &format!(
            r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "n1",
  settings = {{
    ports = {{ store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820, {settings} }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.1" }},
  }},
  modules = [
{modules}  ],
}}
"#
        ),
    );
    let decl = f.decl("n.ncl").display().to_string();
    let running = |name: &str| {
        let out = Command::new("docker")
            .args(["inspect", "-f", "{{.State.Running}}", name])
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim() == "true")
    };

    // One at a time: the first failure launches nothing more.
    let mut one = f.command(&["switch", &decl]);
    one.env("MESH_CONTAINER_JOBS", "1");
    let ran = crate::support::run(one);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(
        ran.stderr.contains(&format!("docker start {}", names[0]))
            && ran
                .stderr
                .contains("a container step failed after the files of"),
        "{}",
        ran.stderr
    );
    assert_eq!(running(&names[0]), Some(false), "created, not started");
    for name in &names[1..] {
        assert_eq!(
            running(name),
            None,
            "{name} was not launched after the failure"
        );
    }

    // Many at a time: every failure named, the others done.
    let ran = f.mesh(&["switch", &decl]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(
        ran.stderr.contains(&format!("docker start {}", names[0]))
            && ran.stderr.contains(&format!("docker start {}", names[1]))
            && ran.stderr.contains("2 container steps failed:")
            && ran.stderr.contains("they failed after the files of"),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr.matches("address already in use").count() >= 2
            || ran.stderr.matches("port is already allocated").count() >= 2,
        "the engine's message, for each: {}",
        ran.stderr
    );
    assert_eq!(running(&names[2]), Some(true));
    assert_eq!(running(&names[3]), Some(true));

    // The cause gone, the next switch converges.
    drop((held_a, held_b));
    f.ok(&["switch", &decl]);
    for name in &names {
        assert_eq!(running(name), Some(true), "{name}");
    }
}

/// Issue 12, item 3: a staged container runs in no generation. After a take ran the mesh's
/// container of a module that found nothing, a rollback to a generation where that module is
/// only assigned (its container staged) stops it, and `mesh status` agrees; switching forward
/// runs it again.
#[test]
fn a_rollback_to_a_staged_container_stops_it() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("s");
    let name = format!("{}-worker", made.prefix);
    let decl = format!(
        r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "n1",
  settings = {{
    ports = {{ store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820 }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.1" }},
  }},
  modules = [
    {{ name = "worker", config = fun s => {{ containers = [{{
        name = "{name}",
        image = "{i}",
        command = ["/bin/busybox", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
    }}] }} }},
  ],
}}
"#,
        i = made.image
    );
    let f = Fixture::new();
    f.write_decl("n.ncl", &decl);
    f.ok(&["adopt", f.decl("n.ncl").to_str().unwrap()]);
    let state = || docker(&["inspect", "-f", "{{.State.Status}}", &name]);
    assert_eq!(state(), "created", "staged: created, not started");
    f.ok(&["take", "worker"]);
    assert_eq!(state(), "running");
    let id = docker(&["inspect", "-f", "{{.Id}}", &name]);

    let back = f.ok(&["rollback", "--to", "1"]);
    assert!(
        back.stdout.contains(&format!("stop     container {name}")),
        "{}",
        back.stdout
    );
    assert_ne!(
        state(),
        "running",
        "a staged container runs in no generation"
    );
    assert_eq!(
        docker(&["inspect", "-f", "{{.Id}}", &name]),
        id,
        "stopped, not recreated"
    );
    let status: serde_json::Value =
        serde_json::from_str(&f.ok(&["status", "--json"]).stdout).unwrap();
    assert_eq!(staged_count(&status["containers"]), 1, "{status}");
    // Nothing more to do: the next switch to it leaves it as it is.
    let again = f.ok(&["switch", "--generation", &f.current_id()]);
    assert!(
        !again.stdout.contains(&format!("container {name}")),
        "{}",
        again.stdout
    );

    f.ok(&["rollback", "--to", "2"]);
    assert_eq!(state(), "running", "taken again: it runs");
}

/// A rollback across a take stops the mesh's container within the stop timeout its declaration
/// gives before it removes it: a database flushes on SIGTERM. The mesh's container here writes
/// `flushed` to its volume on SIGTERM; after the rollback the predecessor's container, back
/// under its name on the same volume, reads it. (Removed without a stop, it would be killed.)
#[test]
fn a_rollback_stops_the_mesh_container_before_it_goes() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("g");
    let name = format!("{}-db", made.prefix);
    let volume = format!("{}-vol", made.prefix);
    docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "-v",
        &format!("{volume}:/data"),
        &made.image,
        "/bin/busybox",
        "sleep",
        "100000",
    ]);
    let decl = crate::rejections::node(
        "store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820",
        &crate::rejections::module(
            "db",
            &format!(
                r#"containers = [{{
        name = "{name}",
        image = "{i}",
        command = ["/bin/busybox", "sh", "-c", "rm -f /data/flushed; trap 'echo flushed > /data/flushed; exit 0' TERM; while true; do sleep 1; done"],
        volumes = [{{ source = "{volume}", target = "/data" }}],
        stop_timeout = 7,
    }}]"#,
                i = made.image
            ),
        ),
    );
    let f = Fixture::new();
    f.write_decl("n.ncl", &decl);
    f.ok(&["adopt", f.decl("n.ncl").to_str().unwrap()]);
    let found = docker(&["inspect", "-f", "{{.Id}}", &name]);
    f.ok(&["take", "db"]);
    assert_ne!(docker(&["inspect", "-f", "{{.Id}}", &name]), found);
    assert_eq!(
        docker(&["inspect", "-f", "{{.Config.StopTimeout}}", &name]),
        "7",
        "the declared stop timeout is the container's"
    );
    // Its shell has set its trap before the rollback sends SIGTERM.
    std::thread::sleep(Duration::from_millis(500));

    f.ok(&["rollback", "--to", "1"]);
    assert_eq!(docker(&["inspect", "-f", "{{.Id}}", &name]), found);
    assert_eq!(
        docker(&["exec", &name, "/bin/busybox", "cat", "/data/flushed"]),
        "flushed",
        "the mesh's container was stopped (SIGTERM), not killed"
    );
}

/// Found containers that share a namespace come back in the order the engine needs: `app` was
/// found in `net`'s network namespace (`--network container:`, which the engine records by id)
/// and is declared on its own network, so only the engine says what it joins. A rollback across
/// the take of both starts `net`'s found container before `app`'s — one container job at a
/// time, `app` first by name: started first, the engine would refuse it.
#[test]
fn a_rollback_starts_a_found_container_after_the_one_whose_network_it_joins() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("j");
    let (net, app) = (
        format!("{}-net", made.prefix),
        format!("{}-app", made.prefix),
    );
    let sleep = ["/bin/busybox", "sleep", "100000"];
    let run = |name: &str, options: &[&str]| {
        let mut args = vec!["run", "-d", "--name", name, "--stop-timeout", "1"];
        args.extend(options);
        args.push(&made.image);
        args.extend(sleep);
        docker(&args)
    };
    let net_id = run(&net, &[]);
    let app_id = run(&app, &["--network", &format!("container:{net}")]);
    let container = |name: &str| {
        format!(
            r#"{{ name = "{name}", image = "{}", command = ["/bin/busybox", "sleep", "100000"], stop_timeout = 1, labels = {{ taken = "yes" }} }}"#,
            made.image
        )
    };
    let decl = crate::rejections::node(
        "store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820",
        &crate::rejections::module(
            "pair",
            &format!("containers = [{}, {}]", container(&app), container(&net)),
        ),
    );
    let f = Fixture::new();
    f.write_decl("n.ncl", &decl);
    let one_job = |args: &[&str]| {
        let mut c = f.command(args);
        c.env("MESH_CONTAINER_JOBS", "1");
        let ran = crate::support::run(c);
        assert_eq!(ran.code, 0, "{args:?}: {}{}", ran.stdout, ran.stderr);
    };
    one_job(&["adopt", f.decl("n.ncl").to_str().unwrap()]);
    one_job(&["take", "pair"]);
    for (name, id) in [(&net, &net_id), (&app, &app_id)] {
        assert_ne!(
            docker(&["inspect", "-f", "{{.Id}}", name]),
            *id,
            "{name} taken"
        );
    }
    one_job(&["rollback", "--to", "1"]);
    for (name, id) in [(&net, &net_id), (&app, &app_id)] {
        assert_eq!(
            docker(&["inspect", "-f", "{{.Id}} {{.State.Running}}", name]),
            format!("{id} true"),
            "{name}: the found container is back and runs"
        );
    }
    assert_eq!(
        docker(&["inspect", "-f", "{{.HostConfig.NetworkMode}}", &app]),
        docker(&["inspect", "-f", "container:{{.Id}}", &net]),
        "in the network namespace of the found one it joined"
    );
}

/// A container of the mesh's in another's network namespace (`network_mode = "container:a"`,
/// which the engine keeps as `a`'s id) is made anew with `a`: after a switch that changes `a`
/// and after the rollback, `b` is in the namespace of the `a` there is, and runs.
#[test]
fn a_container_in_anothers_network_is_made_anew_with_it() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("rj");
    let (a, b) = (format!("{}-a", made.prefix), format!("{}-b", made.prefix));
    let declaration = |label: &str| {
        crate::rejections::node(
            "store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820",
            &crate::rejections::module(
                "pair",
                &format!(
                    r#"containers = [
        {{ name = "{a}", image = "{i}", command = ["/bin/busybox", "sleep", "100000"], stop_timeout = 1, labels = {{ v = "{label}" }} }},
        {{ name = "{b}", image = "{i}", command = ["/bin/busybox", "sleep", "100000"], stop_timeout = 1, network_mode = "container:{a}" }},
    ]"#,
                    i = made.image
                ),
            ),
        )
    };
    let f = Fixture::new();
    let joins = || {
        let a = docker(&["inspect", "-f", "{{.Id}}", &a]);
        assert_eq!(
            docker(&[
                "inspect",
                "-f",
                "{{.HostConfig.NetworkMode}} {{.State.Running}}",
                &b
            ]),
            format!("container:{a} true"),
            "b in the namespace of the a there is"
        );
    };
    f.write_decl("n.ncl", &declaration("1"));
    f.ok(&["switch", f.decl("n.ncl").to_str().unwrap()]);
    joins();
    f.write_decl("n.ncl", &declaration("2"));
    let switched = f.ok(&["switch", f.decl("n.ncl").to_str().unwrap()]);
    assert!(
        switched.stdout.contains(&format!(
            "run      container {b}  (made anew: {a}, whose network it joins, is another container now)"
        )),
        "{}",
        switched.stdout
    );
    joins();
    f.ok(&["rollback"]);
    joins();
}

/// The number of staged containers in `mesh status --json` (as `[held, staged, managed]` or,
/// named, `{ held, staged, managed }`).
fn staged_count(containers: &serde_json::Value) -> u64 {
    containers
        .get("staged")
        .or_else(|| containers.get(1))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or_else(|| panic!("no staged count in {containers}"))
}

/// Issue 23, item 5: the stops of a switch are asked all at once, whatever bounds its creates
/// and starts. Four of the mesh's containers that ignore SIGTERM (busybox `sleep` as PID 1), each
/// declaring a stop timeout of 3 s, rolled back with one container job: in waves the rollback
/// would wait 12 s; all at once it waits about one stop timeout.
#[test]
fn a_rollback_asks_every_stop_at_once() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("w");
    let names: Vec<String> = (0..4).map(|i| format!("{}-app{i}", made.prefix)).collect();
    for name in &names {
        docker(&[
            "run",
            "-d",
            "--name",
            name,
            "--stop-timeout",
            "1",
            &made.image,
            "/bin/busybox",
            "sleep",
            "100000",
        ]);
    }
    let modules: String = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            format!(
                r#"{{ name = "app{i}", config = fun s => {{ containers = [{{ name = "{name}", image = "{image}", command = ["/bin/busybox", "sleep", "100000"], stop_timeout = 3 }}] }} }},
"#,
                image = made.image
            )
        })
        .collect();
    let decl = crate::rejections::node(
        "store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820",
        &modules,
    );
    let f = Fixture::new();
    f.write_decl("n.ncl", &decl);
    let one_job = |args: &[&str]| {
        let mut c = f.command(args);
        c.env("MESH_CONTAINER_JOBS", "1");
        let t = std::time::Instant::now();
        let ran = crate::support::run(c);
        assert_eq!(ran.code, 0, "{args:?}: {}", ran.stderr);
        t.elapsed()
    };
    one_job(&["adopt", f.decl("n.ncl").to_str().unwrap()]);
    one_job(&["take", "app0", "app1", "app2", "app3"]);
    let back = one_job(&["rollback", "--to", "1"]);
    for name in &names {
        assert_eq!(
            docker(&["inspect", "-f", "{{.Config.StopTimeout}}", name]),
            "1",
            "{name}: the found container is back under its name"
        );
    }
    assert!(
        back >= Duration::from_secs(3),
        "the mesh's containers were stopped within their timeout, not killed: {back:?}"
    );
    assert!(
        back < Duration::from_secs(7),
        "four stops of 3 s took {back:?}: they were not asked at once"
    );
}
