//! `mesh import` on the real engine, with an image the test makes by `docker import` of the
//! static busybox: a predecessor's containers started by `docker run` (published port,
//! environment with a credential, a named volume and a bind mount, a command, labels, restart
//! policies, a stop timeout) and a file tree under the node's root are imported; the written
//! declaration builds once the credential is supplied, `mesh import --check` finds every item
//! equal, `mesh adopt` holds them all, and `mesh take` of a container's module keeps the very
//! container (same id, not restarted). Import itself changes nothing on the machine. Every
//! container, volume and image the test makes carries its unique prefix and is removed
//! afterwards, also when the test fails (the `Made` guard).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::containers::{docker, docker_here, free_ports, hello_volume, take_turn, Made};
use crate::node_fixture::Fixture;

/// The body of `GET /hello` from 127.0.0.1:`port`, trying for 3 s.
fn hello(port: u16) -> Option<String> {
    for _ in 0..30 {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.write_all(b"GET /hello HTTP/1.0\r\n\r\n");
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

/// Each container's id, start time and state: what "not restarted, not recreated" means.
fn engine_facts(names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| {
            docker(&[
                "inspect",
                "-f",
                "{{.Id}} {{.State.StartedAt}} {{.State.Running}} {{.RestartCount}}",
                n,
            ])
        })
        .collect()
}

/// `mesh import --json` of the containers `names` (or patterns) into `out` as node `n1` (no
/// firewall read), as it ran.
fn import_into(f: &Fixture, out: &Path, names: &[&str]) -> crate::support::Ran {
    let mut args = vec![
        "import",
        "--no-firewall",
        "--out",
        out.to_str().unwrap(),
        "--node",
        "n1",
    ];
    for n in names {
        args.extend(["--container", n]);
    }
    args.push("--json");
    f.mesh(&args)
}

/// [`import_into`], which must succeed: its result. Every Nickel file it wrote passes
/// `nickel format`.
fn import_named(f: &Fixture, out: &Path, names: &[&str]) -> serde_json::Value {
    let ran = import_into(f, out, names);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    passes_nickel_format(out, &[]);
    serde_json::from_str(ran.last_line()).unwrap()
}

/// Each `.ncl` under `dir` (but those the test wrote itself, `except`) is what `nickel format`
/// (nickel-lang-core's own formatter) writes: formatting it changes nothing.
pub(crate) fn passes_nickel_format(dir: &Path, except: &[&str]) {
    let mut seen = 0;
    for (path, text) in texts(dir) {
        if !path.ends_with(".ncl") || except.contains(&path.as_str()) {
            continue;
        }
        let mut formatted = Vec::new();
        nickel_lang_core::format::format(text.as_bytes(), &mut formatted)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(
            String::from_utf8_lossy(&formatted),
            text,
            "{path} is changed by nickel format"
        );
        seen += 1;
    }
    assert!(seen > 0, "no Nickel under {}", dir.display());
}

/// Every file's bytes under `dir`, by relative path, in order.
fn all_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            (
                e.path().strip_prefix(dir).unwrap().display().to_string(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// Every written file's text under `dir`, by relative path (empty for one that is not text).
fn texts(dir: &Path) -> Vec<(String, String)> {
    all_bytes(dir)
        .into_iter()
        .map(|(p, b)| (p, String::from_utf8(b).unwrap_or_default()))
        .collect()
}

/// Import → build → `--check` equal → adopt holds all → take keeps the container (same id);
/// the credential never written; the port number written once; the machine unchanged by import.
#[test]
fn imported_containers_and_files_check_equal_are_held_and_taken_in_place() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("imp");
    let port = free_ports(1);
    let (web, worker) = (
        format!("{}-web", made.prefix),
        format!("{}-worker", made.prefix),
    );
    let f = Fixture::new();
    // The file tree the predecessor wrote, owned by its user.
    std::fs::create_dir_all(f.at("/etc/app/conf.d")).unwrap();
    std::fs::write(
        f.at("/etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/srv/app:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(f.at("/etc/group"), "root:x:0:\napp:x:1000:\n").unwrap();
    std::fs::write(
        f.at("/etc/app/app.conf"),
        "listen = 8080\nname = \"%{not nickel}\"\n",
    )
    .unwrap();
    std::fs::set_permissions(
        f.at("/etc/app/app.conf"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::os::unix::fs::chown(f.at("/etc/app/app.conf"), Some(1000), Some(1000)).unwrap();
    std::fs::write(f.at("/etc/app/conf.d/extra.conf"), "extra\n").unwrap();

    // The predecessor's containers, as `docker run` started them.
    hello_volume(&made);
    let conf = format!("{}:/conf:ro", f.at("/etc/app").display());
    docker(&[
        "run",
        "-d",
        "--name",
        &web,
        "--restart",
        "unless-stopped",
        "--stop-timeout",
        "1",
        "-p",
        &format!("127.0.0.1:{port}:8080"),
        "-e",
        "MODE=prod",
        "-e",
        "DB_PASSWORD=hunter2-not-in-clear",
        "-l",
        "team=web",
        "-v",
        &format!("{}-data:/data", made.prefix),
        "-v",
        &conf,
        &made.image,
        "/bin/busybox",
        "httpd",
        "-f",
        "-p",
        "8080",
        "-h",
        "/data",
    ]);
    docker(&[
        "run",
        "-d",
        "--name",
        &worker,
        "--restart",
        "on-failure:3",
        "-e",
        "INTERVAL=5",
        &made.image,
        "/bin/busybox",
        "sleep",
        "100000",
    ]);
    assert_eq!(hello(port).as_deref(), Some("hello\n"));
    let before = (engine_facts(&[&web, &worker]), f.snapshot());
    let state_before = tree_bytes(&f.state());

    // The import: read-only.
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().join("fleet");
    let import_args = [
        "import",
        "--no-firewall",
        "--out",
        out_dir.to_str().unwrap(),
        "--node",
        "n1",
        "--container",
        &web,
        "--container",
        &worker,
        "--file",
        "/etc/app/app.conf",
        "--file",
        "/etc/app/conf.d/extra.conf",
        "--json",
    ];
    let imported = f.ok(&import_args);
    let result: serde_json::Value = serde_json::from_str(imported.last_line()).unwrap();
    assert_eq!(
        (engine_facts(&[&web, &worker]), f.snapshot()),
        before,
        "import changed the machine"
    );
    assert_eq!(
        tree_bytes(&f.state()),
        state_before,
        "import changed the mesh's state folder"
    );
    passes_nickel_format(&out_dir, &[]);
    // The credential is listed, on stderr and in --json, and written nowhere.
    let credentials = result["credentials"].as_array().unwrap();
    assert!(
        credentials
            .iter()
            .any(|c| c["item"] == web.as_str() && c["variable"] == "DB_PASSWORD"),
        "{result}"
    );
    assert!(
        imported.stderr.contains("DB_PASSWORD"),
        "{}",
        imported.stderr
    );
    let written = texts(&out_dir);
    assert!(written.iter().all(|(_, t)| !t.contains("hunter2")));
    // The published port is one setting, its number written once: in the node's declaration.
    let web_module = format!("{}_web", made.prefix);
    assert_eq!(result["ports"][&web_module], port, "{result}");
    let number = port.to_string();
    let mentions: Vec<&String> = written
        .iter()
        .filter(|(p, _)| p.ends_with(".ncl"))
        .flat_map(|(p, t)| t.matches(number.as_str()).map(move |_| p))
        .collect();
    assert_eq!(mentions, [&"nodes/n1.ncl".to_owned()], "{written:?}");
    let module_text = &written
        .iter()
        .find(|(p, _)| *p == format!("catalogue/{web_module}.ncl"))
        .unwrap()
        .1;
    assert!(
        module_text.contains(&format!("s.ports.{web_module}")),
        "{module_text}"
    );
    assert!(
        module_text.contains("# from docker inspect:"),
        "{module_text}"
    );

    // A path with no file, a container not on the engine: refused (exit 1), nothing written.
    let elsewhere = out.path().join("elsewhere");
    for (flag, value) in [
        ("--file", "/etc/app/none"),
        ("--container", "no-such-container"),
    ] {
        let ran = f.mesh(&[
            "import",
            "--no-firewall",
            "--out",
            elsewhere.to_str().unwrap(),
            "--node",
            "n1",
            "--container",
            &web,
            flag,
            value,
        ]);
        assert_eq!(ran.code, 1, "{flag}: {}", ran.stderr);
        assert!(ran.stderr.contains(value), "{}", ran.stderr);
        assert!(!elsewhere.exists());
    }

    // The same machine again: nothing to write, nothing written.
    let again = f.mesh(&import_args);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let again: serde_json::Value = serde_json::from_str(again.last_line()).unwrap();
    assert_eq!(again["written"], serde_json::json!([]), "{again}");
    assert_eq!(texts(&out_dir), written);
    // Written over nothing that says another thing: a file the operator edited is refused,
    // and every file is left as it is.
    let node_file = out_dir.join("nodes/n1.ncl");
    let edited = format!("# edited\n{}", std::fs::read_to_string(&node_file).unwrap());
    std::fs::write(&node_file, &edited).unwrap();
    let refused = f.mesh(&import_args);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("nodes/n1.ncl"),
        "{}",
        refused.stderr
    );
    assert_eq!(std::fs::read_to_string(&node_file).unwrap(), edited);
    std::fs::write(&node_file, edited.trim_start_matches("# edited\n")).unwrap();
    assert_eq!(texts(&out_dir), written);

    // Until the credential is supplied, the declaration does not build.
    let decl = out_dir.join("nodes/n1.ncl");
    let decl = decl.to_str().unwrap();
    let unsupplied = f.mesh(&["build", decl]);
    assert_eq!(unsupplied.code, 1, "{}", unsupplied.stderr);
    let creds_path = out_dir.join("nodes/n1.credentials.ncl");
    let creds = std::fs::read_to_string(&creds_path).unwrap();
    assert!(creds.contains("DB_PASSWORD | String,"), "{creds}");
    std::fs::write(
        &creds_path,
        creds.replace(
            "DB_PASSWORD | String,",
            "DB_PASSWORD | String = \"hunter2-not-in-clear\",",
        ),
    )
    .unwrap();
    f.ok(&["build", decl]);

    // Checked exact: every container and file equal.
    let check = |f: &Fixture| -> serde_json::Value {
        let ran = f.mesh(&["import", "--no-firewall", "--check", decl, "--json"]);
        let v: serde_json::Value = serde_json::from_str(ran.last_line()).unwrap();
        assert_eq!(ran.code, 0, "{v:#}\n{}", ran.stderr);
        v
    };
    let checked = check(&f);
    let items = checked["items"].as_array().unwrap();
    assert_eq!(items.len(), 4, "{checked:#}");
    assert!(items.iter().all(|i| i["verdict"] == "equal"), "{checked:#}");
    assert!(items
        .iter()
        .filter(|i| i["kind"] == "container")
        .all(|i| i["declared"] == i["found"]));

    // Adopt holds every imported item, in force, not restarted.
    let adopted = f.ok(&["adopt", decl]);
    for item in [
        format!("hold     container {web}"),
        format!("hold     container {worker}"),
        "hold     /etc/app/app.conf".to_owned(),
        "hold     /etc/app/conf.d/extra.conf".to_owned(),
    ] {
        assert!(
            adopted.stdout.contains(&item),
            "{item}:\n{}",
            adopted.stdout
        );
    }
    assert_eq!(engine_facts(&[&web, &worker]), before.0, "adopt restarted");
    let status: serde_json::Value =
        serde_json::from_str(&f.ok(&["status", "--json"]).stdout).unwrap();
    assert_eq!(
        status["take_would_retire"],
        serde_json::json!([]),
        "{status:#}"
    );
    assert_eq!(
        status["take_would_keep"].as_array().unwrap().len(),
        2,
        "{status:#}"
    );
    assert_eq!(f.snapshot(), before.1);
    check(&f);

    // The take of the web module recreates nothing: the spec hash is equal.
    let taken = f.ok(&["take", &web_module, decl]);
    assert!(
        taken.stdout.contains(&format!("keep     container {web}")),
        "{}",
        taken.stdout
    );
    assert_eq!(
        engine_facts(&[&web]),
        engine_facts_of(&before.0, 0),
        "take recreated"
    );
    assert!(!std::process::Command::new("docker")
        .args(["inspect", &format!("{web}.found")])
        .output()
        .unwrap()
        .status
        .success());
    assert_eq!(hello(port).as_deref(), Some("hello\n"));
    let status: serde_json::Value =
        serde_json::from_str(&f.ok(&["status", "--json"]).stdout).unwrap();
    assert_eq!(
        status["containers"],
        serde_json::json!({"held": 1, "staged": 0, "managed": 1})
    );
    check(&f);

    // A declaration that differs is told, field by field, and exits 2.
    let module_path = out_dir.join(format!("catalogue/{web_module}.ncl"));
    std::fs::write(
        &module_path,
        module_text.replace("MODE = \"prod\"", "MODE = \"staging\""),
    )
    .unwrap();
    let differs = f.mesh(&["import", "--no-firewall", "--check", decl, "--json"]);
    assert_eq!(differs.code, 2, "{}", differs.stderr);
    let v: serde_json::Value = serde_json::from_str(differs.last_line()).unwrap();
    let web_item = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == web.as_str())
        .unwrap();
    assert_eq!(web_item["verdict"], "differs");
    assert_eq!(web_item["differences"][0]["field"], "environment MODE");
    assert_ne!(web_item["declared"], web_item["found"]);
}

fn engine_facts_of(facts: &[String], i: usize) -> Vec<String> {
    vec![facts[i].clone()]
}

/// What a declaration cannot say is never dropped silently: a container whose memory nodes are
/// set (`--cpuset-mems`) and whose exposed ports the engine publishes where it likes
/// (`--publish-all`) is imported with each gap named (a `NOT DECLARED` comment, stderr,
/// `--json`); `--check` says it is `not comparable`, naming each (exit 2). A take that would
/// recreate it without them is refused (exit 2) naming the container and each gap, with nothing
/// changed — the same container, the module not taken; accepting one gap is not enough; with
/// both accepted (one by the declaration's `accept_gaps`, the other by `--accept-gap`) the take
/// retires it as NAME.found and runs the declared one.
#[test]
fn what_cannot_be_declared_is_named_and_never_equal() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("gap");
    let name = format!("{}-odd", made.prefix);
    docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--cpuset-mems",
        "0",
        "--publish-all",
        "--network",
        "none",
        &made.image,
        "/bin/busybox",
        "sleep",
        "100000",
    ]);
    let before = engine_facts(&[&name]);
    let f = Fixture::new();
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().join("fleet");
    let imported = import_into(&f, &out_dir, &[&name]);
    assert_eq!(imported.code, 0, "{}", imported.stderr);
    let result: serde_json::Value = serde_json::from_str(imported.last_line()).unwrap();
    let gaps: Vec<&str> = result["gaps"][&name]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["what"].as_str().unwrap())
        .collect();
    const CPUSET: &str = "HostConfig.CpusetMems";
    const PUBLISH_ALL: &str = "HostConfig.PublishAllPorts";
    assert_eq!(gaps, [CPUSET, PUBLISH_ALL], "{result}");
    for gap in [CPUSET, PUBLISH_ALL] {
        assert!(
            imported
                .stderr
                .contains(&format!("not declared: {name} {gap}")),
            "{}",
            imported.stderr
        );
    }
    let module = format!("{}_odd", made.prefix);
    let module_file = out_dir.join(format!("catalogue/{module}.ncl"));
    let text = std::fs::read_to_string(&module_file).unwrap();
    assert!(
        text.contains(&format!("# NOT DECLARED ({CPUSET})")),
        "{text}"
    );
    assert!(
        text.contains(&format!("# NOT DECLARED ({PUBLISH_ALL})")),
        "{text}"
    );
    assert!(
        text.contains(r#"network_mode = "none","#),
        "what it can say, it says: {text}"
    );

    let decl = out_dir.join("nodes/n1.ncl");
    let decl = decl.to_str().unwrap();
    let checked = f.mesh(&["import", "--no-firewall", "--check", decl, "--json"]);
    assert_eq!(checked.code, 2, "{}", checked.stderr);
    let v: serde_json::Value = serde_json::from_str(checked.last_line()).unwrap();
    assert_eq!(v["equal"], false);
    assert_eq!(v["items"][0]["verdict"], "not comparable", "{v:#}");
    assert_eq!(v["items"][0]["differences"], serde_json::json!([]), "{v:#}");
    assert_eq!(v["items"][0]["gaps"].as_array().unwrap().len(), 2, "{v:#}");
    let text_check = f.mesh(&["import", "--no-firewall", "--check", decl]);
    for gap in [CPUSET, PUBLISH_ALL] {
        assert!(
            text_check
                .stdout
                .contains(&format!("not comparable: {gap}")),
            "{}",
            text_check.stdout
        );
    }
    assert!(
        !text_check.stdout.contains("equal "),
        "{}",
        text_check.stdout
    );
    assert_eq!(engine_facts(&[&name]), before, "import or check changed it");

    // The take would lose both: refused, nothing changed.
    f.ok(&["adopt", decl]);
    let refused = f.mesh(&["take", &module, decl]);
    assert_eq!(refused.code, 2, "{}{}", refused.stdout, refused.stderr);
    for said in [name.as_str(), CPUSET, PUBLISH_ALL, "--accept-gap"] {
        assert!(refused.stderr.contains(said), "{said}: {}", refused.stderr);
    }
    assert_eq!(
        engine_facts(&[&name]),
        before,
        "the refused take changed it"
    );
    assert_eq!(
        f.record()["taken"],
        serde_json::json!([]),
        "the module not taken"
    );
    // One gap accepted, the other still refused.
    let half = f.mesh(&[
        "take",
        &module,
        decl,
        "--accept-gap",
        &format!("{name}:{CPUSET}"),
    ]);
    assert_eq!(half.code, 2, "{}{}", half.stdout, half.stderr);
    assert!(half.stderr.contains(PUBLISH_ALL), "{}", half.stderr);
    assert!(!half.stderr.contains(CPUSET), "{}", half.stderr);
    assert_eq!(engine_facts(&[&name]), before);

    // Both accepted: one in the declaration, one on the command line.
    std::fs::write(
        &module_file,
        text.replacen(
            &format!("name = \"{name}\","),
            &format!("name = \"{name}\",\n          accept_gaps = [\"{PUBLISH_ALL}\"],"),
            1,
        ),
    )
    .unwrap();
    let taken = f.ok(&[
        "take",
        &module,
        decl,
        "--accept-gap",
        &format!("{name}:{CPUSET}"),
    ]);
    assert!(
        taken.stdout.contains(&format!("retire   container {name}")),
        "{}",
        taken.stdout
    );
    assert_eq!(
        docker(&["inspect", "-f", "{{.Id}}", &format!("{name}.found")]),
        before[0].split(' ').next().unwrap()
    );
    assert_eq!(
        docker(&[
            "inspect",
            "-f",
            "{{.HostConfig.CpusetMems}} {{.HostConfig.PublishAllPorts}}",
            &name
        ]),
        "false",
        "the declared one, without what was accepted lost (docker trims the empty set)"
    );
}

/// Containers a compose project grouped (its `com.docker.compose.project` label) are one
/// module: imported (chosen by a pattern over their names; one matching none is bad input),
/// checked equal, and taken together, each kept as it is (same ids).
#[test]
fn a_compose_project_is_one_module_taken_in_place() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("cmp");
    let project = format!("{}proj", made.prefix);
    let names: Vec<String> = ["api", "db"]
        .iter()
        .map(|s| format!("{}-{s}", made.prefix))
        .collect();
    for (i, name) in names.iter().enumerate() {
        docker(&[
            "run",
            "-d",
            "--name",
            name,
            "-l",
            &format!("com.docker.compose.project={project}"),
            "-l",
            &format!("com.docker.compose.service=s{i}"),
            "-e",
            &format!("ROLE=r{i}"),
            &made.image,
            "/bin/busybox",
            "sleep",
            "100000",
        ]);
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let before = engine_facts(&refs);
    let f = Fixture::new();
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().join("fleet");
    // Named by a pattern: the project's containers, no other.
    let pattern = format!("{}-*", made.prefix);
    let nothing = import_into(&f, &out_dir, &[&format!("{}-nothing-*", made.prefix)]);
    assert_eq!(nothing.code, 1, "{}", nothing.stderr);
    assert!(
        nothing.stderr.contains("no container matching"),
        "{}",
        nothing.stderr
    );
    assert!(!out_dir.exists(), "nothing written");
    let result = import_named(&f, &out_dir, &[&pattern]);
    assert_eq!(result["modules"], serde_json::json!([project]), "{result}");
    let decl = out_dir.join("nodes/n1.ncl");
    let decl = decl.to_str().unwrap();
    f.ok(&["import", "--no-firewall", "--check", decl]);
    f.ok(&["adopt", decl]);
    let taken = f.ok(&["take", &project, decl]);
    for n in &refs {
        assert!(
            taken.stdout.contains(&format!("keep     container {n}")),
            "{}",
            taken.stdout
        );
    }
    assert_eq!(engine_facts(&refs), before, "the take recreated");
    f.ok(&["import", "--no-firewall", "--check", decl]);
}

/// `docker-compose -p PROJECT ARGS` in the project's folder `dir`, which must succeed: what
/// it said on stderr (where compose says what it did).
pub(crate) fn docker_compose(dir: &Path, project: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("docker-compose")
        .current_dir(dir)
        .args(["-p", project])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docker-compose {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What the client container gets from the server by its alias on their network, trying for
/// 5 s: the name `api` asked of the engine's DNS, then `GET /` of ADDRESS:8080 over `nc` (the
/// static busybox's own resolver and socket: its wget, through glibc linked statically, crashes).
fn reached(client: &str) -> String {
    let fetch = "ip=$(/bin/busybox nslookup api 127.0.0.11 \
                 | /bin/busybox sed -n 's/^Address: \\([0-9.]*\\)$/\\1/p' | /bin/busybox head -n 1) \
                 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 2 $ip 8080 | /bin/busybox tail -n 1";
    let mut got = String::new();
    for _ in 0..25 {
        let out = std::process::Command::new("docker")
            .args(["exec", client, "/bin/busybox", "sh", "-c", fetch])
            .output()
            .unwrap();
        got = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    got
}

/// `docker inspect -f {{.State.Health.Status}}` of `name` once it is `healthy`, trying for 15 s.
fn healthy(name: &str) -> String {
    let mut status = String::new();
    for _ in 0..75 {
        status = docker(&["inspect", "-f", "{{.State.Health.Status}}", name]);
        if status == "healthy" {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    status
}

/// A predecessor's containers on a network of their own, reaching each other by alias (as a
/// compose project's do), each with a health check its image does not have: imported with
/// their networks, aliases and checks written, checked equal, adopted and taken in place (same
/// ids, never restarted) while the client reaches the server by its alias throughout. Then a
/// declaration naming a network the engine lacks: the switch creates it (a bridge network,
/// labelled `mesh.owner`) and the container is on it under its alias with its check, equal to
/// its declaration by `--check`.
#[test]
fn networks_and_healthchecks_are_imported_equal_and_taken_in_place() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("nwh");
    let network = format!("{}-net", made.prefix);
    let (api, client) = (
        format!("{}-api", made.prefix),
        format!("{}-client", made.prefix),
    );
    docker(&["network", "create", &network]);
    // The image is the static busybox alone: a shell check (`CMD-SHELL`) needs its /bin/sh.
    let serve = "/bin/busybox ln -sf /bin/busybox /bin/sh && mkdir -p /www && echo ok > /www/index.html && exec /bin/busybox httpd -f -p 8080 -h /www";
    let idle = "/bin/busybox ln -sf /bin/busybox /bin/sh && exec /bin/busybox sleep 100000";
    docker(&[
        "run",
        "-d",
        "--name",
        &api,
        "--network",
        &network,
        "--network-alias",
        "api",
        "--health-cmd",
        "test -f /www/index.html || exit 1",
        "--health-interval",
        "1s",
        "--health-retries",
        "2",
        "--health-start-period",
        "1m30s",
        &made.image,
        "/bin/busybox",
        "sh",
        "-c",
        serve,
    ]);
    docker(&[
        "run",
        "-d",
        "--name",
        &client,
        "--network",
        &network,
        "--network-alias",
        "client",
        "--network-alias",
        "probe",
        "--health-cmd",
        "true",
        "--health-interval",
        "500ms",
        &made.image,
        "/bin/busybox",
        "sh",
        "-c",
        idle,
    ]);
    assert_eq!(healthy(&api), "healthy");
    assert_eq!(reached(&client), "ok");
    let names = [api.as_str(), client.as_str()];
    let before = engine_facts(&names);

    let f = Fixture::new();
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().join("fleet");
    let result = import_named(&f, &out_dir, &names);
    assert_eq!(result["gaps"], serde_json::json!({}), "{result}");
    assert_eq!(engine_facts(&names), before, "the import changed nothing");
    let written: String = texts(&out_dir.join("catalogue"))
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    for expected in [
        format!(r#"{{ name = "{network}", aliases = ["api"] }},"#),
        format!(r#"{{ name = "{network}", aliases = ["client", "probe"] }},"#),
        r#"healthcheck = { test = ["CMD-SHELL", "test -f /www/index.html || exit 1"], interval = "1s", start_period = "1m30s", retries = 2 }"#.to_owned(),
        r#"healthcheck = { test = ["CMD-SHELL", "true"], interval = "500ms" }"#.to_owned(),
    ] {
        assert!(written.contains(&expected), "{expected} not in:\n{written}");
    }
    let decl = out_dir.join("nodes/n1.ncl");
    let decl = decl.to_str().unwrap();
    f.ok(&["import", "--no-firewall", "--check", decl]);
    f.ok(&["adopt", decl]);
    for module in result["modules"].as_array().unwrap() {
        let taken = f.ok(&["take", module.as_str().unwrap(), decl]);
        assert!(
            taken.stdout.contains("keep     container"),
            "{}",
            taken.stdout
        );
        assert_eq!(
            reached(&client),
            "ok",
            "the server answers by its alias throughout"
        );
    }
    assert_eq!(
        engine_facts(&names),
        before,
        "the take recreated or restarted"
    );
    assert_eq!(healthy(&api), "healthy");

    // A network the engine lacks is created by the switch, and the container joins it.
    let fresh = format!("{}-fresh", made.prefix);
    let name = format!("{}-new", made.prefix);
    let g = Fixture::new();
    g.write_decl(
        "n.ncl",
        &crate::rejections::node(
            "store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820",
            &crate::rejections::module(
                "fresh",
                &format!(
                    r#"containers = [{{
        name = "{name}",
        image = "{i}",
        command = ["/bin/busybox", "sh", "-c", "{serve}"],
        networks = [{{ name = "{fresh}", aliases = ["api", "again"] }}],
        healthcheck = {{ test = ["CMD-SHELL", "test -f /www/index.html"], interval = "1s" }},
    }}]"#,
                    i = made.image
                ),
            ),
        ),
    );
    let decl = g.decl("n.ncl");
    let decl = decl.to_str().unwrap();
    g.ok(&["adopt", decl]);
    g.ok(&["take", "fresh"]);
    assert!(
        !docker(&[
            "network",
            "inspect",
            "-f",
            "{{index .Labels \"mesh.owner\"}}",
            &fresh
        ])
        .is_empty(),
        "the network the switch created carries the mesh's label"
    );
    let aliases: Vec<String> = serde_json::from_str(&docker(&[
        "inspect",
        "-f",
        &format!("{{{{json (index .NetworkSettings.Networks \"{fresh}\").Aliases}}}}"),
        &name,
    ]))
    .unwrap();
    let id = docker(&["inspect", "-f", "{{.Id}}", &name]);
    let aliases: Vec<&str> = aliases
        .iter()
        .map(String::as_str)
        .filter(|a| !id.starts_with(a))
        .collect();
    assert_eq!(
        aliases,
        ["again", "api"],
        "besides the short id the engine may add"
    );
    assert_eq!(
        healthy(&name),
        "healthy",
        "its declared check runs, through its alias"
    );
    g.ok(&["import", "--no-firewall", "--check", decl]);
}

/// A real compose project (`docker-compose up`): a server with an environment file, a
/// published port, a named volume, a health check, a restart policy and a stop grace period,
/// and a worker on a second network of the project's; each reaches the other by its service
/// name. Imported by its compose file (`--compose`) as one module with every network, alias and
/// check, and the compose file, its environment file and its `.env` as files; checked equal
/// (containers and files), adopted and taken in place: no container recreated or restarted,
/// the server answering on its port and by its name throughout.
#[test]
fn a_compose_project_with_networks_and_healthchecks_is_taken_in_place() {
    if !docker_here() || !crate::support::have_root_tools(&["docker-compose"]) {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("dcp");
    let port = free_ports(1);
    let project = format!("{}proj", made.prefix);
    // The project's folder is on the node, under its root: its files are imported too.
    let f = Fixture::new();
    let dir = f.at("/srv/app");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("api.env"), "MODE=prod\nLEVEL=3\n").unwrap();
    std::fs::write(dir.join(".env"), "UNUSED=1\n").unwrap();
    std::fs::write(
        dir.join("docker-compose.yml"),
        format!(
            r#"version: "3.8"
services:
  api:
    image: {image}
    command: ["/bin/busybox", "sh", "-c", "echo ok > /www/index.html && echo hello > /www/hello && exec /bin/busybox httpd -f -p 8080 -h /www"]
    env_file: [api.env]
    environment: {{ ROLE: api }}
    ports: ["127.0.0.1:{port}:8080"]
    volumes: ["www:/www"]
    restart: unless-stopped
    stop_grace_period: 2s
    healthcheck:
      test: ["CMD", "/bin/busybox", "test", "-f", "/www/index.html"]
      interval: 1s
      retries: 3
  client:
    image: {image}
    command: ["/bin/busybox", "sleep", "100000"]
    networks: [default, back]
networks:
  back: {{}}
volumes:
  www: {{}}
"#,
            image = made.image
        ),
    )
    .unwrap();
    let compose = |args: &[&str]| docker_compose(&dir, &project, args);
    compose(&["up", "-d"]);
    let (api, client) = (format!("{project}_api_1"), format!("{project}_client_1"));
    assert_eq!(healthy(&api), "healthy");
    assert_eq!(reached(&client), "ok");
    assert_eq!(hello(port).as_deref(), Some("hello\n"));
    let names = [api.as_str(), client.as_str()];
    let before = engine_facts(&names);

    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().join("fleet");
    let import = |compose: &str| {
        f.mesh(&[
            "import",
            "--no-firewall",
            "--out",
            out_dir.to_str().unwrap(),
            "--node",
            "n1",
            "--compose",
            compose,
            "--json",
        ])
    };
    // A compose file that started nothing is bad input, and nothing is written.
    std::fs::write(dir.join("other.yml"), "services: {}\n").unwrap();
    let refused = import("/srv/app/other.yml");
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("no container on the engine was started from /srv/app/other.yml"),
        "{}",
        refused.stderr
    );
    assert!(!out_dir.exists(), "nothing written");
    // The project by its compose file: its containers, the file, its env file and its .env.
    let imported = import("/srv/app/docker-compose.yml");
    assert_eq!(imported.code, 0, "{}", imported.stderr);
    let result: serde_json::Value = serde_json::from_str(imported.last_line()).unwrap();
    assert_eq!(result["skipped"], serde_json::json!([]), "{result}");
    let files = std::fs::read_to_string(out_dir.join("catalogue/files.ncl")).unwrap();
    for path in [
        "/srv/app/docker-compose.yml",
        "/srv/app/api.env",
        "/srv/app/.env",
    ] {
        assert!(
            files.contains(&format!("path = \"{path}\"")),
            "{path} not in:\n{files}"
        );
    }
    assert!(!files.contains("other.yml"), "{files}");
    assert_eq!(
        result["modules"],
        serde_json::json!([project, "files"]),
        "{result}"
    );
    assert_eq!(result["gaps"], serde_json::json!({}), "{result}");
    let module = std::fs::read_to_string(out_dir.join(format!("catalogue/{project}.ncl"))).unwrap();
    for expected in [
        format!(r#"{{ name = "{project}_back", aliases = ["client"] }},"#),
        format!(r#"{{ name = "{project}_default", aliases = ["api"] }},"#),
        r#"healthcheck = { test = ["CMD", "/bin/busybox", "test", "-f", "/www/index.html"], interval = "1s", retries = 3 }"#.to_owned(),
        "MODE = \"prod\"".to_owned(),
        "stop_timeout = 2".to_owned(),
    ] {
        assert!(module.contains(&expected), "{expected} not in:\n{module}");
    }
    passes_nickel_format(&out_dir, &[]);
    let decl = out_dir.join("nodes/n1.ncl");
    let decl = decl.to_str().unwrap();
    f.ok(&["import", "--no-firewall", "--check", decl]);
    f.ok(&["adopt", decl]);
    let taken = f.ok(&["take", &project, "files", decl]);
    for n in names {
        assert!(
            taken.stdout.contains(&format!("keep     container {n}")),
            "{}",
            taken.stdout
        );
    }
    assert_eq!(
        engine_facts(&names),
        before,
        "the take recreated or restarted"
    );
    assert_eq!(hello(port).as_deref(), Some("hello\n"));
    assert_eq!(reached(&client), "ok");
    f.ok(&["import", "--no-firewall", "--check", decl]);
    compose(&["down", "-v"]);
}

/// The seed's control node at its scale: sixty containers as a predecessor started them — twelve
/// compose projects of three services and twenty-four on their own, with published ports,
/// environments, labels, restart policies, stop timeouts and volumes — imported whole: one
/// module per project or container, every port a setting written once; `--check` finds all
/// sixty equal; `mesh adopt` holds them and `mesh take` of every module keeps every container
/// (same id, same start, not restarted).
#[test]
fn sixty_containers_imported_checked_equal_and_taken_in_place() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("imp60");
    let base = free_ports(60);
    let name = |i: usize| format!("{}-c{i:02}", made.prefix);
    let indexes: Vec<usize> = (0..60).collect();
    std::thread::scope(|s| {
        for w in 0..6 {
            let (made, indexes) = (&made, &indexes);
            s.spawn(move || {
                for &i in indexes.iter().filter(|i| *i % 6 == w) {
                    let n = name(i);
                    let port = format!("127.0.0.1:{}:8080", base + i as u16);
                    let env = format!("APP_ID=a{i}");
                    let volume = format!("{}-v{i}:/data", made.prefix);
                    let label = format!("team=t{}", i % 5);
                    let mut args = vec!["run", "-d", "--name", &n, "-e", &env, "-l", &label];
                    let (project, service);
                    if i < 36 {
                        project = format!("com.docker.compose.project={}-p{}", made.prefix, i / 3);
                        service = format!("com.docker.compose.service=s{}", i % 3);
                        args.extend(["-l", &project, "-l", &service]);
                    }
                    if i % 2 == 0 {
                        args.extend(["-p", &port]);
                    }
                    if i % 3 == 0 {
                        args.extend(["-v", &volume]);
                    }
                    args.extend(match i % 4 {
                        0 => vec!["--restart", "unless-stopped"],
                        1 => vec!["--restart", "on-failure:2", "--stop-timeout", "1"],
                        2 => vec!["--restart", "always"],
                        _ => vec![],
                    });
                    args.extend([made.image.as_str(), "/bin/busybox", "sleep", "100000"]);
                    docker(&args);
                }
            });
        }
    });
    let names: Vec<String> = indexes.iter().map(|&i| name(i)).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let before = engine_facts(&refs);

    let f = Fixture::new();
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().join("fleet");
    let result = import_named(&f, &out_dir, &refs);
    let modules = result["modules"].as_array().unwrap();
    assert_eq!(modules.len(), 12 + 24, "{result}");
    assert_eq!(result["ports"].as_object().unwrap().len(), 30, "{result}");
    assert_eq!(
        engine_facts(&refs),
        before,
        "the import changed a container"
    );
    let node = std::fs::read_to_string(out_dir.join("nodes/n1.ncl")).unwrap();
    for i in (0..60).step_by(2) {
        let port = format!(" = {},", base + i as u16);
        assert_eq!(node.matches(&port).count(), 1, "{port} once:\n{node}");
    }

    let decl = out_dir.join("nodes/n1.ncl");
    let decl = decl.to_str().unwrap();
    let checked = f.mesh(&["import", "--no-firewall", "--check", decl, "--json"]);
    let v: serde_json::Value = serde_json::from_str(checked.last_line()).unwrap();
    assert_eq!(checked.code, 0, "{v:#}");
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 60, "{v:#}");
    assert!(items.iter().all(|i| i["verdict"] == "equal"), "{v:#}");

    f.ok(&["adopt", decl]);
    let module_names: Vec<String> = modules
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect();
    let mut take = vec!["take"];
    take.extend(module_names.iter().map(String::as_str));
    take.push(decl);
    let taken = f.ok(&take);
    assert_eq!(
        taken.stdout.matches("keep     container ").count(),
        60,
        "{}",
        taken.stdout
    );
    assert_eq!(
        engine_facts(&refs),
        before,
        "the take recreated or restarted"
    );
}

/// Every file under `dir` with the hash of its bytes: what "nothing changed there" means for a
/// node's state and root.
fn tree_bytes(dir: &Path) -> Vec<(String, String)> {
    walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| {
            (
                e.path().display().to_string(),
                mesh_lib::BlobHash::of(&std::fs::read(e.path()).unwrap_or_default()).to_string(),
            )
        })
        .collect()
}

/// `mesh fleet import` over real OpenSSH servers, one node after the other, into the fleet's
/// tree: a container both nodes run alike is one module the second node shares (written once);
/// a compose project that runs otherwise on the second node is a module of that node's own
/// (NAME_node1), the first node's left as it was — unless both nodes are imported at once:
/// then it is one module, their containers' names and values each node's; each node's
/// written declaration is checked equal on its node. Nothing changes on a node: its containers and root stay as they were,
/// its state holds no record nor generation. A node's declaration that is there already is written over only with `--force`.
#[test]
fn a_fleet_imported_over_ssh_shares_what_its_nodes_run_alike() {
    if !docker_here()
        || !crate::support::have_root_tools(&["sshd", "ssh", "ssh-keygen", "ip", "nft", "ss"])
    {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("fim");
    let (common, app_a, app_b) = (
        format!("{}-common", made.prefix),
        format!("{}-app-a", made.prefix),
        format!("{}-app-b", made.prefix),
    );
    let project = format!("{}app", made.prefix);
    docker(&[
        "run",
        "-d",
        "--name",
        &common,
        "-e",
        "LEVEL=2",
        "-l",
        "team=ops",
        &made.image,
        "/bin/busybox",
        "sleep",
        "100000",
    ]);
    // Each app publishes a port of its own and labels its build: what two machines running
    // the same project differ in beside names and environment values.
    let port = free_ports(2);
    for (name, role, port) in [(&app_a, "a", port), (&app_b, "b", port + 1)] {
        docker(&[
            "run",
            "-d",
            "--name",
            name,
            "-l",
            &format!("com.docker.compose.project={project}"),
            "-l",
            "com.docker.compose.service=app",
            "-l",
            &format!("build=v-{role}"),
            "-p",
            &format!("127.0.0.1:{port}:8080"),
            "-e",
            &format!("ROLE={role}"),
            &made.image,
            "/bin/busybox",
            "sleep",
            "100000",
        ]);
    }
    let names = [common.as_str(), app_a.as_str(), app_b.as_str()];
    let before = engine_facts(&names);
    let lab = crate::sshlab::Lab::new("fim", 2, |n| crate::sshlab::node_decl(n, "x\\n", true));
    let nodes_before: Vec<_> = lab.nodes.iter().map(|n| tree_bytes(&n.root())).collect();
    let states_before: Vec<_> = lab.nodes.iter().map(|n| tree_bytes(&n.state())).collect();
    let import = |node: &str, app: &str, force: bool| {
        let mut args = vec![
            "fleet",
            "import",
            "--node",
            node,
            "--container",
            &common,
            "--container",
            app,
            "--no-firewall",
            "--json",
        ];
        if force {
            args.push("--force");
        }
        lab.mesh(&args)
    };
    // node0 is the fleet's hub; node1 is a machine that joins: no declaration yet.
    let node0_decl = crate::sshlab::node_decl("node0", "x\\n", true);
    lab.declare(
        "node0",
        &node0_decl.replace(
            "address = \"10.77.0.5\" }",
            "address = \"10.77.0.5\", hub = true }",
        ),
    );
    std::fs::remove_file(lab.dir.path().join("nodes/node1.ncl")).unwrap();
    // The lab's fleet has a declaration for node0 already: not written over unasked.
    let refused = import("node0", &app_a, false);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(String::from_utf8_lossy(&refused.stderr).contains("nodes/node0.ncl"));

    let first = import("node0", &app_a, true);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let first = first["nodes"][0].clone();
    // The modules in the order of the containers' names (app before common).
    let (app_module, common_module) = (
        first["modules"][0].as_str().unwrap().to_owned(),
        first["modules"][1].as_str().unwrap().to_owned(),
    );
    assert!(common_module.ends_with("common"), "{first}");
    assert_eq!(first["shared"], serde_json::json!([]), "{first}");
    // Written again, node0 keeps its place on the private network.
    assert_eq!(
        (
            &first["private_network"]["address"],
            &first["private_network"]["hub"]
        ),
        (&serde_json::json!("10.77.0.5"), &serde_json::json!(true)),
        "{first}"
    );
    assert!(
        first["private_network"]["why"]
            .as_str()
            .unwrap()
            .starts_with("kept"),
        "{first}"
    );
    let catalogue = lab.dir.path().join("catalogue");
    let app_text = std::fs::read(catalogue.join(format!("{app_module}.ncl"))).unwrap();

    let second = import("node1", &app_b, true);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let second: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    let second = second["nodes"][0].clone();
    let own = format!("{app_module}_node1");
    assert_eq!(
        second["modules"],
        serde_json::json!([own, common_module]),
        "{second}"
    );
    assert_eq!(
        second["shared"],
        serde_json::json!([common_module]),
        "{second}"
    );
    assert!(second["renamed"][&own].is_string(), "{second}");
    // The node that joins gets the first free address of the fleet's range, and not the hub's
    // role, which node0 has: the fleet built as a whole is consistent.
    assert_eq!(
        second["private_network"],
        serde_json::json!({
            "range": "10.77.0.0/24",
            "address": "10.77.0.1",
            "hub": false,
            "why": "the first address of the fleet's range 10.77.0.0/24 no node has; not the hub (node0 is)",
        }),
        "{second}"
    );
    let built = lab.mesh(&["fleet", "build"]);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let written: Vec<&str> = second["written"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(
        !written.contains(&format!("catalogue/{common_module}.ncl").as_str()),
        "the shared module is not written again: {written:?}"
    );
    assert_eq!(
        std::fs::read(catalogue.join(format!("{app_module}.ncl"))).unwrap(),
        app_text,
        "the first node's module is left as it was"
    );
    let node1 = std::fs::read_to_string(lab.dir.path().join("nodes/node1.ncl")).unwrap();
    assert!(
        node1.contains(&format!("catalogue/{common_module}.ncl")),
        "{node1}"
    );
    assert!(node1.contains(&format!("catalogue/{own}.ncl")), "{node1}");

    // Nothing changed on the nodes: the engine, the root, the mesh's state folder (not even
    // opened: no store, no key made in it).
    assert_eq!(engine_facts(&names), before);
    for ((n, root), state) in lab.nodes.iter().zip(&nodes_before).zip(&states_before) {
        assert_eq!(&tree_bytes(&n.root()), root, "{}'s root", n.name);
        assert_eq!(&tree_bytes(&n.state()), state, "{}'s state", n.name);
    }
    // Each node's declaration is what runs there.
    checked_equal_on_each(&lab);
    // A node the fleet does not name is bad input; one that cannot be reached is named with
    // why, the others still imported, and the command fails (exit 3).
    let unknown = lab.mesh(&["fleet", "import", "--node", "nowhere", "--no-firewall"]);
    assert_eq!(unknown.status.code(), Some(1));
    lab.cut("node1");
    let cut = lab.mesh(&[
        "fleet",
        "import",
        "--node",
        "node0",
        "--node",
        "node1",
        "--container",
        &common,
        "--container",
        &app_a,
        "--no-firewall",
        "--json",
    ]);
    lab.uncut("node1");
    assert_eq!(
        cut.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&cut.stderr)
    );
    let cut: serde_json::Value = serde_json::from_slice(&cut.stdout).unwrap();
    assert_eq!(cut["nodes"][0]["node"], "node0", "{cut}");
    assert_eq!(
        cut["nodes"][0]["written"],
        serde_json::json!([]),
        "the same again: {cut}"
    );
    assert_eq!(cut["failed"][0]["node"], "node1", "{cut}");
    assert!(cut["failed"][0]["problem"].is_string(), "{cut}");

    // Both nodes in one import: the project they run alike but for its container's name and
    // ROLE is one module naming neither, each node's passed by its declaration. (The lab's
    // nodes share one engine: a wrapper narrows each node's mesh to its own app container, as
    // two machines would have it.)
    let fleet_text = std::fs::read_to_string(lab.fleet()).unwrap();
    let mut narrowed = fleet_text.clone();
    for (n, app) in lab.nodes.iter().zip([&app_a, &app_b]) {
        let wrapper = lab.dir.path().join(format!("mesh-{}", n.name));
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexec {} \"$@\" --container {app}\n",
                env!("CARGO_BIN_EXE_mesh")
            ),
        )
        .unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        narrowed = narrowed
            .lines()
            .map(|l| {
                if l.trim_start().starts_with(&format!("{} = ", n.name)) {
                    l.replace(env!("CARGO_BIN_EXE_mesh"), wrapper.to_str().unwrap())
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
    }
    std::fs::write(lab.fleet(), narrowed).unwrap();
    let narrowed_import = |nodes: &[&str], force: bool| {
        let mut args = vec!["fleet", "import"];
        for n in nodes {
            args.extend(["--node", n]);
        }
        args.extend(["--container", &common, "--no-firewall", "--json"]);
        if force {
            args.push("--force");
        }
        lab.mesh(&args)
    };
    let both = narrowed_import(&["node0", "node1"], true);
    // node1 alone, later: it reads the shared module's `values` from its text and shares it;
    // nothing is written (the same again).
    let alone = narrowed_import(&["node1"], false);
    std::fs::write(lab.fleet(), fleet_text).unwrap();
    assert!(
        alone.status.success(),
        "{}",
        String::from_utf8_lossy(&alone.stderr)
    );
    let alone: serde_json::Value = serde_json::from_slice(&alone.stdout).unwrap();
    assert!(
        both.status.success(),
        "{}",
        String::from_utf8_lossy(&both.stderr)
    );
    let both: serde_json::Value = serde_json::from_slice(&both.stdout).unwrap();
    // The catalogue's module of the name is node0's from before (naming its container): the
    // one both share now is node0's own, written by it and shared by node1.
    let alike = both["nodes"][0]["modules"][0].as_str().unwrap().to_owned();
    assert!(alike.starts_with(&app_module), "{both}");
    for (i, n) in [(0, "node0"), (1, "node1")] {
        assert_eq!(both["nodes"][i]["node"], n, "{both}");
        assert_eq!(
            both["nodes"][i]["modules"],
            serde_json::json!([alike, common_module]),
            "{both}"
        );
        assert_eq!(
            both["nodes"][i]["parametrized"],
            serde_json::json!([alike]),
            "{both}"
        );
    }
    assert!(
        both["nodes"][1]["shared"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(alike)),
        "{both}"
    );
    assert_eq!(
        std::fs::read(catalogue.join(format!("{app_module}.ncl"))).unwrap(),
        app_text,
        "the catalogue's module is left as it was"
    );
    assert_eq!(
        alone["nodes"][0]["shared"],
        serde_json::json!([alike, common_module]),
        "{alone}"
    );
    assert_eq!(
        alone["nodes"][0]["written"],
        serde_json::json!([]),
        "{alone}"
    );
    let shared = std::fs::read_to_string(catalogue.join(format!("{alike}.ncl"))).unwrap();
    let ports = [port.to_string(), (port + 1).to_string()];
    for absent in [
        app_a.as_str(),
        app_b.as_str(),
        "\"a\"",
        "\"b\"",
        "v-a",
        "v-b",
        &ports[0],
        &ports[1],
    ] {
        assert!(!shared.contains(absent), "{absent} in:\n{shared}");
    }
    for (n, app, role, port) in [
        ("node0", &app_a, "a", &ports[0]),
        ("node1", &app_b, "b", &ports[1]),
    ] {
        let decl = std::fs::read_to_string(lab.dir.path().join(format!("nodes/{n}.ncl"))).unwrap();
        assert!(decl.contains(&format!("name = \"{app}\"")), "{decl}");
        assert!(decl.contains(&format!("ROLE = \"{role}\"")), "{decl}");
        assert!(decl.contains(&format!("build = \"v-{role}\"")), "{decl}");
        assert_eq!(decl.matches(port.as_str()).count(), 1, "{decl}");
    }
    passes_nickel_format(&catalogue, &[]);

    // Each node's declaration, its values passed to the module both share, is what runs there.
    checked_equal_on_each(&lab);
    assert_eq!(engine_facts(&names), before);
}

/// Each lab node's written declaration (`nodes/NODE.ncl`) checks equal on the node.
fn checked_equal_on_each(lab: &crate::sshlab::Lab) {
    for n in &lab.nodes {
        let decl = lab.dir.path().join(format!("nodes/{}.ncl", n.name));
        let checked = n.mesh(&["import", "--no-firewall", "--check", decl.to_str().unwrap()]);
        assert!(
            checked.status.success(),
            "{}: {}{}",
            n.name,
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
    }
}

/// A file holding a credential, imported into a fleet whose `secrets.ncl` names the node's
/// readers (a folder rule, `"secrets/n1/"`): written encrypted to them, never in clear; the
/// declaration builds as written, and `--check` on the node decrypts it with the host key and
/// finds it equal — by keyed digests, never a plain one — and a changed file `differs`. A
/// second import keeps the secret already there; adopt and take leave the file as it is.
#[test]
fn a_credential_file_is_written_encrypted_to_the_readers_secrets_ncl_names() {
    if !crate::support::have_root_tools(&["ssh-keygen"]) {
        return;
    }
    const TOKEN: &str = "tok-5f1c9e2a7b3d4e6f8a0b";
    let f = Fixture::new();
    let host_pub = crate::secrets::keygen(&f.at("/etc/ssh/ssh_host_ed25519_key"));
    let operator_pub = crate::secrets::keygen(&f.dir.path().join("keys/operator"));
    std::fs::create_dir_all(f.at("/etc/app")).unwrap();
    let env = format!("MODE=prod\nAPI_TOKEN={TOKEN}\n");
    std::fs::write(f.at("/etc/app/app.env"), &env).unwrap();
    std::fs::set_permissions(
        f.at("/etc/app/app.env"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let tree = out.path().join("fleet");
    std::fs::create_dir_all(&tree).unwrap();
    crate::secrets::write_rules(
        &tree,
        &[("n1", &host_pub)],
        &[("op", &operator_pub)],
        &[("secrets/n1/", r#""n1", "op""#)],
    );
    let import = [
        "import",
        "--no-containers",
        "--no-firewall",
        "--out",
        tree.to_str().unwrap(),
        "--node",
        "n1",
        "--file",
        "/etc/app/app.env",
        "--json",
    ];
    let first = f.ok(&import);
    let result: serde_json::Value = serde_json::from_str(first.last_line()).unwrap();
    let secret = "secrets/n1/etc/app/app.env.age";
    assert_eq!(result["secrets"][0]["secret"], secret, "{result}");
    assert_eq!(
        result["secrets"][0]["readers"],
        serde_json::json!(["n1", "op"]),
        "{result}"
    );
    assert_eq!(result["credentials"], serde_json::json!([]), "{result}");
    assert!(
        first.stderr.contains("written encrypted"),
        "{}",
        first.stderr
    );
    let ciphertext = std::fs::read(tree.join(secret)).unwrap();
    assert!(ciphertext.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----"));
    let plain = mesh_lib::BlobHash::of(env.as_bytes()).to_string();
    for (path, text) in texts(&tree) {
        assert!(!text.contains(TOKEN), "{path} holds the credential");
        assert!(
            !text.contains(&plain[3..15]),
            "{path} holds its plain digest"
        );
    }
    assert!(!first.stdout.contains(TOKEN) && !first.stderr.contains(TOKEN));
    passes_nickel_format(&tree, &["secrets.ncl"]);

    // Checked on the node: decrypted with its host key, compared by keyed digests.
    let decl = tree.join("nodes/n1.ncl");
    let decl = decl.to_str().unwrap();
    let check = ["import", "--no-firewall", "--check", decl, "--json"];
    let checked = f.ok(&check);
    let items: serde_json::Value = serde_json::from_str(checked.last_line()).unwrap();
    let item = items["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "/etc/app/app.env")
        .cloned()
        .unwrap_or_else(|| panic!("{items}"));
    assert_eq!(item["verdict"], "equal", "{item}");
    assert_eq!(item["declared"], item["found"], "{item}");
    assert_ne!(item["found"].as_str().unwrap(), plain, "a keyed digest");
    assert!(
        !checked.stdout.contains(&plain[3..15]),
        "{}",
        checked.stdout
    );
    // Another value on the node: differs, by content, the value never shown.
    std::fs::write(f.at("/etc/app/app.env"), "MODE=prod\nAPI_TOKEN=other\n").unwrap();
    let differs = f.mesh(&check);
    assert_eq!(differs.code, 2, "{}{}", differs.stdout, differs.stderr);
    assert!(
        differs.stdout.contains("\"field\":\"content\""),
        "{}",
        differs.stdout
    );
    assert!(!differs.stdout.contains("other"), "{}", differs.stdout);
    std::fs::write(f.at("/etc/app/app.env"), &env).unwrap();

    // The folder's readers changed: `mesh secret rekey` finds the secret under the folder and
    // re-encrypts it to them (with the operator's key); the node still reads it.
    crate::secrets::write_rules(
        &tree,
        &[("n1", &host_pub)],
        &[("op", &operator_pub)],
        &[("secrets/n1/", r#""n1""#)],
    );
    let mut rekey = crate::support::mesh(&f.state());
    rekey
        .current_dir(&tree)
        .args(["secret", "rekey", "-i"])
        .arg(f.dir.path().join("keys/operator"));
    let rekeyed = crate::support::run(rekey);
    assert_eq!(rekeyed.code, 0, "{}{}", rekeyed.stdout, rekeyed.stderr);
    assert!(
        rekeyed
            .stdout
            .contains(&format!("{secret}: re-encrypted to n1")),
        "{}",
        rekeyed.stdout
    );
    let ciphertext = std::fs::read(tree.join(secret)).unwrap();
    f.ok(&check);

    // Imported again: the secret there is kept, byte for byte.
    let again = f.ok(&import);
    let result: serde_json::Value = serde_json::from_str(again.last_line()).unwrap();
    assert_eq!(result["kept"], serde_json::json!([secret]), "{result}");
    assert_eq!(std::fs::read(tree.join(secret)).unwrap(), ciphertext);

    // Adopted, then taken: the file as it was, and still equal.
    f.ok(&["adopt", decl]);
    f.ok(&["take", "files", decl]);
    assert_eq!(f.read("/etc/app/app.env").unwrap(), env);
    assert_eq!(f.meta("/etc/app/app.env").0, 0o600);
    f.ok(&check);
}

/// A credential in a container's environment, imported into a fleet whose `secrets.ncl` names
/// the node among the readers of its environment secrets, is written encrypted, as `mesh
/// secret edit` would, and declared as a secret of the container's environment: the
/// declaration builds as written, `--check` decrypts it on the node and finds the container
/// equal (spec hashes keyed, never plain), the take keeps the very container, a rekey
/// recreates nothing, and a new value recreates it with that value. The value is nowhere in
/// the tree, an output, a generation or the container's labels.
#[test]
fn an_environments_credential_is_written_as_a_secret_and_given_at_create() {
    if !docker_here() || !crate::support::have_root_tools(&["ssh-keygen"]) {
        return;
    }
    const VALUE: &str = "pw-3f9a7c1e5b2d8a6c";
    const NEW: &str = "pw-new-71c2e9a4d6b3f805";
    let _turn = take_turn();
    let made = Made::new("imps");
    let port = free_ports(1);
    let web = format!("{}-web", made.prefix);
    let f = Fixture::new();
    let host_pub = crate::secrets::keygen(&f.at("/etc/ssh/ssh_host_ed25519_key"));
    let operator = f.dir.path().join("keys/operator");
    let operator_pub = crate::secrets::keygen(&operator);
    hello_volume(&made);
    docker(&[
        "run",
        "-d",
        "--name",
        &web,
        "--stop-timeout",
        "1",
        "-p",
        &format!("127.0.0.1:{port}:8080"),
        "-e",
        "MODE=prod",
        "-e",
        &format!("DB_PASSWORD={VALUE}"),
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
    ]);
    assert_eq!(hello(port).as_deref(), Some("hello\n"));
    let before = engine_facts(&[&web]);

    let out = tempfile::tempdir().unwrap();
    let tree = out.path().join("fleet");
    std::fs::create_dir_all(&tree).unwrap();
    crate::secrets::write_rules(
        &tree,
        &[("n1", &host_pub)],
        &[("op", &operator_pub)],
        &[("secrets/n1/", r#""n1", "op""#)],
    );
    let imported = import_into(&f, &tree, &[&web]);
    assert_eq!(imported.code, 0, "{}", imported.stderr);
    passes_nickel_format(&tree, &["secrets.ncl"]);
    let result: serde_json::Value = serde_json::from_str(imported.last_line()).unwrap();
    let module = format!("{}_web", made.prefix);
    let secret = format!("secrets/n1/environment/{module}/DB_PASSWORD.age");
    assert_eq!(result["credentials"], serde_json::json!([]), "{result}");
    assert_eq!(result["secrets"][0]["item"], web.as_str(), "{result}");
    assert_eq!(result["secrets"][0]["variable"], "DB_PASSWORD", "{result}");
    assert_eq!(result["secrets"][0]["secret"], secret.as_str(), "{result}");
    assert!(
        imported
            .stderr
            .contains(&format!("written encrypted: {web} DB_PASSWORD")),
        "{}",
        imported.stderr
    );
    let ciphertext = std::fs::read(tree.join(&secret)).unwrap();
    assert!(ciphertext.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----"));
    let module_text =
        std::fs::read_to_string(tree.join(format!("catalogue/{module}.ncl"))).unwrap();
    assert!(
        module_text.contains("secret_environment = {")
            && module_text.contains("DB_PASSWORD = credentials.DB_PASSWORD"),
        "{module_text}"
    );
    let node_text = std::fs::read_to_string(tree.join("nodes/n1.ncl")).unwrap();
    assert!(
        node_text.contains(&format!("{{ DB_PASSWORD = \"{secret}\" }}")),
        "{node_text}"
    );
    assert!(!tree.join("nodes/n1.credentials.ncl").exists());
    let mut outputs = format!("{}{}", imported.stdout, imported.stderr);

    // Built as written; checked equal on the node, by keyed spec hashes.
    let decl = tree.join("nodes/n1.ncl");
    let decl = decl.to_str().unwrap();
    let check = ["import", "--no-firewall", "--check", decl, "--json"];
    let checked = f.ok(&check);
    outputs.push_str(&checked.stdout);
    let items: serde_json::Value = serde_json::from_str(checked.last_line()).unwrap();
    let item = &items["items"][0];
    assert_eq!(
        (item["name"].as_str(), item["verdict"].as_str()),
        (Some(web.as_str()), Some("equal")),
        "{items}"
    );
    assert_eq!(item["declared"], item["found"], "{item}");
    let shown = f.ok(&["show", decl]);
    assert!(
        shown.stdout.contains(&format!(
            "secret  environment DB_PASSWORD from {secret} (for n1, op)"
        )),
        "{}",
        shown.stdout
    );
    outputs.push_str(&shown.stdout);

    // Adopted, then taken: the very container, not recreated. Before the take, status says
    // the take keeps it (its secret decrypted to compare it).
    outputs.push_str(&f.ok(&["adopt", decl]).stdout);
    let status = f.ok(&["status", "--json"]);
    outputs.push_str(&status.stdout);
    let status: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(
        status["take_would_keep"][0]["container"],
        web.as_str(),
        "{status:#}"
    );
    assert_eq!(
        status["take_would_retire"],
        serde_json::json!([]),
        "{status:#}"
    );
    let taken = f.ok(&["take", &module, decl]);
    assert!(
        taken.stdout.contains(&format!("keep     container {web}")),
        "{}",
        taken.stdout
    );
    outputs.push_str(&taken.stdout);
    assert_eq!(engine_facts(&[&web]), before, "take recreated");
    f.ok(&check);

    // Re-encrypted to other readers, the same value: a switch recreates nothing.
    let other_pub = crate::secrets::keygen(&f.dir.path().join("keys/other"));
    crate::secrets::write_rules(
        &tree,
        &[("n1", &host_pub)],
        &[("op", &operator_pub), ("other", &other_pub)],
        &[("secrets/n1/", r#""n1", "op", "other""#)],
    );
    let mut rekey = crate::support::mesh(&f.state());
    rekey
        .current_dir(&tree)
        .args(["secret", "rekey", "-i"])
        .arg(&operator);
    let rekeyed = crate::support::run(rekey);
    assert_eq!(rekeyed.code, 0, "{}{}", rekeyed.stdout, rekeyed.stderr);
    assert_ne!(std::fs::read(tree.join(&secret)).unwrap(), ciphertext);
    let switched = f.ok(&["switch", decl]);
    outputs.push_str(&switched.stdout);
    assert_eq!(
        engine_facts(&[&web]),
        before,
        "a rekey recreated the container"
    );
    f.ok(&check);

    // A new value: the container is recreated with it, and answers.
    let sealed = crate::secrets::seal(&tree, &f.state(), &operator, &secret, &format!("{NEW}\n"));
    assert_eq!(sealed.code, 0, "{}{}", sealed.stdout, sealed.stderr);
    let switched = f.ok(&["switch", decl]);
    outputs.push_str(&switched.stdout);
    assert!(
        switched.stdout.contains(&format!("container {web}")),
        "{}",
        switched.stdout
    );
    assert_ne!(engine_facts(&[&web]), before, "not recreated");
    let env = docker(&["inspect", "-f", "{{json .Config.Env}}", &web]);
    assert!(env.contains(&format!("\"DB_PASSWORD={NEW}\"")), "{env}");
    assert!(env.contains("\"MODE=prod\""), "{env}");
    let labels = docker(&["inspect", "-f", "{{json .Config.Labels}}", &web]);
    assert!(!labels.contains(NEW) && !labels.contains(VALUE), "{labels}");
    assert_eq!(hello(port).as_deref(), Some("hello\n"));
    let rechecked = f.ok(&check);
    outputs.push_str(&rechecked.stdout);
    let items: serde_json::Value = serde_json::from_str(rechecked.last_line()).unwrap();
    assert_eq!(items["items"][0]["verdict"], "equal", "{items}");
    let diff = f.ok(&["diff"]);
    assert!(
        diff.stdout.contains("secret_environment.DB_PASSWORD"),
        "{}",
        diff.stdout
    );
    outputs.push_str(&diff.stdout);

    // Rolled back after a gc that keeps two generations: the old ciphertext is kept with its
    // generation, and the container is recreated with the old value.
    f.ok(&["gc", "--keep", "2"]);
    outputs.push_str(&f.ok(&["rollback"]).stdout);
    let env = docker(&["inspect", "-f", "{{json .Config.Env}}", &web]);
    assert!(
        env.contains(&format!("\"DB_PASSWORD={VALUE}\"")),
        "a rollback: {env}"
    );
    assert_eq!(hello(port).as_deref(), Some("hello\n"));

    // Nowhere in clear: not the tree, not the state (generations, store, records), not an
    // output, nor as a plain digest of the bare value. The one exception is what adopt found
    // running, kept for the record: the store holds it wrapped (recorded by its keyed digest,
    // see `spec_holds_credential`), owner-only like all of the state.
    let holds = |bytes: &[u8], what: &str| bytes.windows(what.len()).any(|w| w == what.as_bytes());
    let mut wrapped = 0;
    for v in [VALUE, NEW] {
        let plain = mesh_lib::BlobHash::of(v.as_bytes()).to_string();
        for (path, bytes) in all_bytes(&tree).into_iter().chain(all_bytes(&f.state())) {
            if holds(&bytes, v)
                && path.starts_with("store/blobs/")
                && bytes.starts_with(b"mesh keyed content v1\n")
            {
                wrapped += 1;
                continue;
            }
            assert!(!holds(&bytes, v), "{path} holds the value");
            assert!(!holds(&bytes, &plain[3..]), "{path} holds its plain digest");
        }
        assert!(
            !outputs.contains(v),
            "an output holds the value:\n{outputs}"
        );
    }
    assert_eq!(wrapped, 1, "the found container's spec, wrapped");
}

/// The import's edges. A node's name — given, or the root's /etc/hostname — is one safe name:
/// `../../evil`, `a/b`, an empty one, a hostname with a NUL are bad input (exit 1) and nothing
/// is written anywhere. An import makes no state folder. A file over `--max-file-size` (1 MiB
/// unless said) is a named gap, its content not copied; under a larger limit it is imported.
/// A `--container` pattern that matches nothing is bad input (exit 1).
#[test]
fn the_imports_edges() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let state = dir.path().join("never/state");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::create_dir_all(root.join("srv")).unwrap();
    std::fs::write(root.join("srv/small.conf"), "small\n").unwrap();
    std::fs::write(root.join("srv/big.bin"), vec![b'x'; (1 << 20) + 1]).unwrap();
    let out = dir.path().join("a/b/fleet");
    let import = |args: &[&str]| {
        let mut c = crate::support::mesh(&state);
        c.env("MESH_ROOT", &root)
            .args(["import", "--no-firewall", "--no-containers", "--out"])
            .arg(&out)
            .args(args);
        crate::support::run(c)
    };
    let everything = |d: &Path| -> Vec<String> {
        walkdir::WalkDir::new(d)
            .into_iter()
            .filter_map(Result::ok)
            .map(|e| e.path().display().to_string())
            .collect()
    };
    let before = everything(dir.path());
    for bad in ["../../evil", "a/b", "", ".hidden", "-rf"] {
        let ran = import(&[&format!("--node={bad}"), "--file", "/srv/small.conf"]);
        assert_eq!(ran.code, 1, "--node {bad:?}: {}", ran.stderr);
        assert!(ran.stderr.contains("nothing was written"), "{}", ran.stderr);
        assert_eq!(everything(dir.path()), before, "--node {bad:?} wrote");
    }
    for hostname in ["../evil\n", "bad\0name\n"] {
        std::fs::write(root.join("etc/hostname"), hostname).unwrap();
        let ran = import(&["--file", "/srv/small.conf"]);
        assert_eq!(ran.code, 1, "{hostname:?}: {}", ran.stderr);
        assert!(ran.stderr.contains("/etc/hostname"), "{}", ran.stderr);
        assert!(!out.exists() && !dir.path().join("a/b/evil.ncl").exists());
    }
    std::fs::write(root.join("etc/hostname"), "n1\n").unwrap();

    // The default limit: the big file is a gap, named, not copied; the small one imported.
    let ran = import(&[
        "--file",
        "/srv/small.conf",
        "--file",
        "/srv/big.bin",
        "--json",
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(!state.exists(), "an import made a state folder");
    assert!(
        !dir.path().join("never").exists(),
        "an import made a state folder"
    );
    let v: serde_json::Value = serde_json::from_str(ran.last_line()).unwrap();
    assert_eq!(v["node"], "n1");
    let gap = &v["gaps"]["/srv/big.bin"][0];
    assert_eq!(gap["what"], "content", "{v}");
    assert_eq!(gap["found"], format!("{} bytes", (1 << 20) + 1), "{v}");
    assert!(
        ran.stderr.contains("not declared: /srv/big.bin content"),
        "{}",
        ran.stderr
    );
    let files = std::fs::read_to_string(out.join("catalogue/files.ncl")).unwrap();
    assert!(files.contains("/srv/small.conf"), "{files}");
    assert!(!files.contains("big.bin"), "{files}");
    let copied: u64 = walkdir::WalkDir::new(&out)
        .into_iter()
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    assert!(
        copied < 1 << 20,
        "{copied} bytes written: the big file copied"
    );
    // A larger limit imports it.
    let bigger = dir.path().join("bigger");
    let mut c = crate::support::mesh(&state);
    c.env("MESH_ROOT", &root)
        .args(["import", "--no-firewall", "--no-containers", "--out"])
        .arg(&bigger)
        .args(["--file", "/srv/big.bin", "--max-file-size", "2m", "--json"]);
    let ran = crate::support::run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let v: serde_json::Value = serde_json::from_str(ran.last_line()).unwrap();
    assert_eq!(v["gaps"], serde_json::json!({}), "{v}");
    assert!(!state.exists(), "an import made a state folder");

    // A pattern that matches nothing, on the real engine.
    if docker_here() {
        let mut c = crate::support::mesh(&state);
        c.env("MESH_ROOT", &root)
            .args(["import", "--no-firewall", "--out"])
            .arg(dir.path().join("none"))
            .args(["--container", "meshtest-no-such-container-*"]);
        let ran = crate::support::run(c);
        assert_eq!(ran.code, 1, "{}", ran.stderr);
        assert!(
            ran.stderr.contains("no container matching"),
            "{}",
            ran.stderr
        );
        assert!(!dir.path().join("none").exists(), "nothing written");
    }
}

/// Nodes imported one by one into a fleet's tree each get what is free on its private network:
/// the first the fleet's range, its first address and the hub's role; each next the first
/// address no node has, and the hub's role only while no node has it. A node written again
/// keeps its place; a range with no address left is refused, nothing written. The import says
/// where each node stands and why, and each declaration builds.
#[test]
fn nodes_imported_into_a_fleet_each_get_a_free_address_and_one_is_the_hub() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let state = dir.path().join("state");
    std::fs::create_dir_all(root.join("srv")).unwrap();
    std::fs::write(root.join("srv/app.conf"), "app\n").unwrap();
    let import = |out: &Path, node: &str, extra: &[&str]| {
        let mut c = crate::support::mesh(&state);
        c.env("MESH_ROOT", &root)
            .args(["import", "--no-firewall", "--no-containers", "--out"])
            .arg(out)
            .args(["--node", node, "--file", "/srv/app.conf", "--json"])
            .args(extra);
        crate::support::run(c)
    };
    let out = dir.path().join("fleet");
    let placed = |node: &str, extra: &[&str]| {
        let ran = import(&out, node, extra);
        assert_eq!(ran.code, 0, "{node}: {}", ran.stderr);
        let v: serde_json::Value = serde_json::from_str(ran.last_line()).unwrap();
        let p = v["private_network"].clone();
        let declaration = std::fs::read_to_string(out.join(format!("nodes/{node}.ncl"))).unwrap();
        let line = format!(
            "private_network = {{ range = {}, address = {}, hub = {} }}",
            p["range"], p["address"], p["hub"]
        );
        assert!(declaration.contains(&line), "{line} not in:\n{declaration}");
        (
            p["address"].as_str().unwrap().to_owned(),
            p["hub"].as_bool().unwrap(),
            p["why"].as_str().unwrap().to_owned(),
        )
    };
    let (address, hub, why) = placed("a", &[]);
    assert_eq!((address.as_str(), hub), ("10.77.0.1", true), "{why}");
    assert!(why.contains("first node"), "{why}");
    let (address, hub, why) = placed("b", &[]);
    assert_eq!((address.as_str(), hub), ("10.77.0.2", false), "{why}");
    assert!(why.ends_with("not the hub (a is)"), "{why}");
    // Written again, a keeps its place.
    let (address, hub, why) = placed("a", &["--force"]);
    assert_eq!((address.as_str(), hub), ("10.77.0.1", true), "{why}");
    assert!(why.starts_with("kept"), "{why}");
    // With no hub left in the fleet, the next node to join takes the role.
    let a = out.join("nodes/a.ncl");
    let text = std::fs::read_to_string(&a).unwrap();
    std::fs::write(&a, text.replace("hub = true", "hub = false")).unwrap();
    let (address, hub, why) = placed("c", &[]);
    assert_eq!((address.as_str(), hub), ("10.77.0.3", true), "{why}");
    assert!(why.contains("no node of the fleet is"), "{why}");
    // Each declaration builds, with the place it was given.
    for node in ["a", "b", "c"] {
        let mut c = crate::support::mesh(&state);
        c.arg("build").arg(out.join(format!("nodes/{node}.ncl")));
        let ran = crate::support::run(c);
        assert_eq!(ran.code, 0, "{node}: {}", ran.stderr);
    }

    // A range with no address left: refused, nothing written.
    let full = dir.path().join("full");
    std::fs::create_dir_all(full.join("nodes")).unwrap();
    for (node, address) in [("x", "10.9.0.1"), ("y", "10.9.0.2")] {
        std::fs::write(
            full.join(format!("nodes/{node}.ncl")),
            format!("private_network = {{ range = \"10.9.0.0/30\", address = \"{address}\" }}\n"),
        )
        .unwrap();
    }
    let before = texts(&full);
    let ran = import(&full, "z", &[]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("10.9.0.0/30 has no free address"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("nothing was written"), "{}", ran.stderr);
    assert_eq!(texts(&full), before, "a refused import wrote");
}
