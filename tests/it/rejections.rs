//! Every rejection SPEC.md lists: exit code 1, and a message naming the file and the offending
//! value, or both modules where there are two sides.

use crate::support::{mesh, run, Ran};

pub(crate) const PORTS: &str =
    "store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820, web = 80";

pub(crate) fn node(ports: &str, modules: &str) -> String {
    format!(
        r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "n",
  settings = {{
    ports = {{ {ports} }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.5" }},
  }},
  modules = [
{modules}
  ],
}}
"#
    )
}

pub(crate) fn module(name: &str, body: &str) -> String {
    format!("    {{ name = \"{name}\", config = fun s => {{ {body} }} }},\n")
}

pub(crate) fn file(path: &str) -> String {
    format!("files = [{{ path = \"{path}\", content = \"x\" }}]")
}

/// Builds `text` as `bad-node.ncl` (with an optional record) and expects a rejection.
pub(crate) fn rejected(text: &str, record: Option<serde_json::Value>) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad-node.ncl");
    std::fs::write(&path, text).unwrap();
    let mut c = mesh(state.path());
    c.current_dir(dir.path()).arg("build").arg("bad-node.ncl");
    if let Some(r) = record {
        std::fs::write(
            dir.path().join("bad-record.json"),
            serde_json::to_vec(&r).unwrap(),
        )
        .unwrap();
        c.arg("--record").arg("bad-record.json");
    }
    let ran = run(c);
    assert_eq!(
        ran.code, 1,
        "expected a rejection (exit 1), got {}:\n{}{}",
        ran.code, ran.stdout, ran.stderr
    );
    assert!(
        ran.stdout.is_empty(),
        "a rejection prints no id: {}",
        ran.stdout
    );
    ran
}

pub(crate) fn assert_says(ran: &Ran, needles: &[&str]) {
    for n in needles {
        assert!(ran.stderr.contains(n), "expected {n:?} in:\n{}", ran.stderr);
    }
}

/// Two modules declaring one path: both modules named, both declarations pointed at.
#[test]
fn same_path_in_two_modules() {
    let path = "/etc/ssh/sshd_config.d/10-mesh.conf";
    let ran = rejected(
        &node(
            PORTS,
            &(module("ssh", &file(path)) + &module("hardening", &file(path))),
        ),
        None,
    );
    assert_says(
        &ran,
        &[
            &format!("{path} is declared by modules ssh and hardening"),
            "bad-node.ncl:10:",
            "declared by ssh",
        ],
    );
}

/// Two modules declaring one container name.
#[test]
fn same_container_in_two_modules() {
    let c = r#"containers = [{ name = "store", image = "busybox" }]"#;
    let ran = rejected(&node(PORTS, &(module("a", c) + &module("b", c))), None);
    assert_says(
        &ran,
        &[
            "container store is declared by modules a and b",
            "bad-node.ncl:10:",
        ],
    );
}

/// A stop timeout out of 0 to 3600 seconds, pointed at; a string is the contract's to refuse.
#[test]
fn stop_timeout_out_of_range() {
    for t in ["-1", "3601"] {
        let c =
            format!(r#"containers = [{{ name = "db", image = "busybox", stop_timeout = {t} }}]"#);
        let ran = rejected(&node(PORTS, &module("db", &c)), None);
        assert_says(
            &ran,
            &[
                &format!("container db: stop_timeout {t} is not 0 to 3600 seconds"),
                "bad-node.ncl:9:",
            ],
        );
    }
    let c = r#"containers = [{ name = "db", image = "busybox", stop_timeout = "5" }]"#;
    let ran = rejected(&node(PORTS, &module("db", c)), None);
    assert_says(&ran, &["stop_timeout"]);
}

/// A health check's test of another form, a duration compose would not read, retries out of
/// range, a network joined twice: each pointed at, nothing written.
#[test]
fn bad_healthchecks_and_networks() {
    for (field, says) in [
        (
            r#"healthcheck = { test = ["curl", "-f", "x"] }"#,
            r#"container db: a healthcheck test is ["CMD", ARG…], ["CMD-SHELL", COMMAND] or ["NONE"]"#,
        ),
        (
            r#"healthcheck = { test = ["CMD-SHELL", "a", "b"] }"#,
            "a healthcheck test is",
        ),
        (
            r#"healthcheck = { test = ["CMD", "true"], retries = 1001 }"#,
            "container db: healthcheck retries 1001 is not 0 to 1000",
        ),
        (
            r#"networks = [{ name = "back" }, { name = "back", aliases = ["db"] }]"#,
            "container db: network back is listed twice",
        ),
    ] {
        let c = format!(r#"containers = [{{ name = "db", image = "busybox", {field} }}]"#);
        let ran = rejected(&node(PORTS, &module("db", &c)), None);
        assert_says(&ran, &[says, "bad-node.ncl:9:"]);
    }
    // A duration compose would not read is the contract's to refuse.
    for d in ["30", "1.5s", "30 s", "1d"] {
        let c = format!(
            r#"containers = [{{ name = "db", image = "busybox", healthcheck = {{ interval = "{d}" }} }}]"#
        );
        let ran = rejected(&node(PORTS, &module("db", &c)), None);
        assert_says(&ran, &["interval"]);
    }
}

/// Instances only for a template (`NAME@.TYPE`), each one an instance name, each once.
#[test]
fn unit_instances_only_for_a_template() {
    let unit = |name: &str, instances: &str| {
        format!(
            r#"units = [{{ name = "{name}", text = "[Service]\nExecStart=/bin/true\n", instances = [{instances}] }}]"#
        )
    };
    let ran = rejected(
        &node(PORTS, &module("u", &unit("plain.service", "\"one\""))),
        None,
    );
    assert_says(
        &ran,
        &["unit plain.service is not a template", "bad-node.ncl:9:"],
    );
    let ran = rejected(
        &node(PORTS, &module("u", &unit("e@.service", "\"a/b\""))),
        None,
    );
    assert_says(&ran, &["e@a/b.service", "bad-node.ncl:9:"]);
    let ran = rejected(
        &node(PORTS, &module("u", &unit("e@.service", "\"one\", \"one\""))),
        None,
    );
    assert_says(&ran, &["names instance one twice"]);
}

/// Two modules publishing one host port.
#[test]
fn same_host_port_in_two_modules() {
    let a = r#"containers = [{ name = "proxy", image = "busybox", publish = [{ host_port = s.ports.web, container_port = 80 }] }]"#;
    let b = r#"containers = [{ name = "other", image = "busybox", publish = [{ host_port = s.ports.web, container_port = 8080 }] }]"#;
    let ran = rejected(
        &node(PORTS, &(module("proxy", a) + &module("other", b))),
        None,
    );
    assert_says(
        &ran,
        &[
            "host port 80/tcp is published by modules proxy and other",
            "bad-node.ncl:",
        ],
    );
}

/// Each hostile path form: relative, `..`, `.`, `//`, NUL, under the store.
#[test]
fn hostile_paths() {
    for (path, says) in [
        ("etc/motd", "`etc/motd` is relative"),
        (
            "/etc/../shadow",
            "`/etc/../shadow` contains a `..` component",
        ),
        ("/etc/./motd", "`/etc/./motd` contains a `.` component"),
        ("/etc//motd", "`/etc//motd` contains `//`"),
        ("/etc/mo\\u{0}td", "`/etc/mo\\0td` contains a NUL byte"),
        (
            "/var/lib/mesh/store/blobs/x",
            "`/var/lib/mesh/store/blobs/x` lies under the mesh's store",
        ),
    ] {
        let ran = rejected(&node(PORTS, &module("m", &file(path))), None);
        assert_says(&ran, &[says, "module m", "bad-node.ncl:9:"]);
    }
}

/// A port outside 1–65535, in the settings, points at the number where it is written.
#[test]
fn port_out_of_range() {
    for bad in ["70000", "0", "-1"] {
        let ports = PORTS.replace("web = 80", &format!("web = {bad}"));
        let ran = rejected(&node(&ports, ""), None);
        assert_says(
            &ran,
            &[
                &format!("setting ports.web: {bad} is not a port"),
                "bad-node.ncl:5:",
            ],
        );
    }
    // A container port is checked too.
    let c = r#"containers = [{ name = "c", image = "busybox", publish = [{ host_port = s.ports.web, container_port = 99999 }] }]"#;
    let ran = rejected(&node(PORTS, &module("m", c)), None);
    assert_says(
        &ran,
        &["container c: 99999 is not a port", "bad-node.ncl:9:"],
    );
}

/// A take of a module that is not assigned names the record and the module.
#[test]
fn take_of_unassigned_module() {
    let record =
        serde_json::json!({ "format": 1, "node": "n", "mode": "adopted", "taken": ["forge"] });
    let ran = rejected(
        &node(PORTS, &module("ssh", &file("/etc/motd"))),
        Some(record),
    );
    assert_says(
        &ran,
        &["bad-record.json takes module forge, which is not assigned to node n"],
    );
}

/// An opening whose port is not a setting, and a published port that is not one.
#[test]
fn opening_port_not_a_setting() {
    let ran = rejected(
        &node(PORTS, &module("app", "openings = [{ port = 8080 }]")),
        None,
    );
    assert_says(
        &ran,
        &[
            "module app opens port 8080, which is not a setting",
            "bad-node.ncl:9:",
            "settings.ports",
        ],
    );
    let c = r#"containers = [{ name = "c", image = "busybox", publish = [{ host_port = 8081, container_port = 80 }] }]"#;
    let ran = rejected(&node(PORTS, &module("app", c)), None);
    assert_says(
        &ran,
        &["container c of module app publishes host port 8081, which is not a setting"],
    );
}

/// A Nickel syntax error and a contract error are shown with file, line and column.
#[test]
fn nickel_errors_point_at_the_source() {
    let ran = rejected(
        &node(
            PORTS,
            "    { name = \"m\", config = fun s => { files = [ }\n",
        ),
        None,
    );
    assert_says(
        &ran,
        &["the declaration does not evaluate", "bad-node.ncl:9:"],
    );
    let ran = rejected(
        &node(
            PORTS,
            &module("m", r#"files = [{ path = "/etc/motd", content = 42 }]"#),
        ),
        None,
    );
    assert_says(
        &ran,
        &[
            "contract broken by the value of `content`",
            "bad-node.ncl:9:",
        ],
    );
}

/// Bad input changes nothing: a rejected build writes no generation.
#[test]
fn rejection_writes_no_generation() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.ncl");
    std::fs::write(&path, node(PORTS, &module("m", &file("etc/motd")))).unwrap();
    let mut c = mesh(state.path());
    c.arg("build").arg(&path);
    assert_eq!(run(c).code, 1);
    let generations = state.path().join("store/generations");
    assert_eq!(std::fs::read_dir(generations).unwrap().count(), 0);
}

/// A record that is not a record, or of a newer format, is a clear user error.
#[test]
fn bad_record() {
    let ran = rejected(
        &node(PORTS, ""),
        Some(serde_json::json!({ "format": 9, "node": "n", "mode": "adopted" })),
    );
    assert_says(&ran, &["bad-record.json", "record format 9"]);
    let ran = rejected(
        &node(PORTS, ""),
        Some(serde_json::json!({ "format": 1, "node": "other", "mode": "adopted" })),
    );
    assert_says(&ran, &["record of node `other`", "node `n`"]);
}

/// `mesh follow --stage` is refused at once, nothing asked of any registry: a stage keeps no
/// record of what it staged, so each round would fetch and check the whole generation again.
#[test]
fn follow_refuses_to_stage_every_round() {
    let state = tempfile::tempdir().unwrap();
    let mut c = mesh(state.path());
    c.args([
        "follow",
        "127.0.0.1:9/fleet/n",
        "--node",
        "n",
        "--stage",
        "--interval",
        "1",
    ]);
    let ran = run(c);
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("mesh pull --stage"), "{}", ran.stderr);
    assert!(
        std::fs::read_dir(state.path()).unwrap().next().is_none(),
        "nothing written in the state"
    );
}
