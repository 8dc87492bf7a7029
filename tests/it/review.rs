//! Diffs a person can approve: `mesh switch --dry-run` and `mesh diff` show each changed file's
//! content as a unified diff — never the content of a file others may not read — the
//! firewall's change as nft lines added and removed, and `--json` carries the same.

use crate::node_fixture::{declaration, Fixture, ORIGINAL_SSH, SSH};
use crate::support::have_root_tools;

/// The dry run shows the content it would write against what is on the machine; the take's
/// diff names the held file as changed without a line of it (mode 0640: not readable by
/// others), and a port's move shows in the firewall's nft lines.
#[test]
fn dry_run_and_diff_show_content_and_firewall_lines() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    f.ok(&["adopt", f.decl("a.ncl").to_str().unwrap()]);
    std::fs::write(f.at("/etc/motd"), "hello\nsecond line\n").unwrap();
    f.write_decl("c.ncl", &declaration("hello again\\nsecond line\\n", true));
    let dry = f.ok(&["switch", f.decl("c.ncl").to_str().unwrap(), "--dry-run"]);
    assert!(
        dry.stdout.contains(
            "    --- a/etc/motd\n    +++ b/etc/motd\n    @@ -1,2 +1,2 @@\n    -hello\n    +hello again\n     second line\n"
        ),
        "{}",
        dry.stdout
    );
    let json: serde_json::Value = serde_json::from_str(
        f.ok(&[
            "switch",
            f.decl("c.ncl").to_str().unwrap(),
            "--dry-run",
            "--json",
        ])
        .last_line(),
    )
    .unwrap();
    let contents = json["review"]["contents"].as_array().unwrap();
    assert_eq!(contents.len(), 1, "{json}");
    assert!(contents[0]["unified"]
        .as_str()
        .unwrap()
        .contains("+hello again\n"));
    assert_eq!(
        f.read("/etc/motd").unwrap(),
        "hello\nsecond line\n",
        "a dry run"
    );

    // The take: the found drop-in (0640) is replaced; its content is never shown.
    f.ok(&["take", "ssh"]);
    let diff = f.ok(&["diff"]);
    assert!(
        diff.stdout.contains(&format!(
            "~ {SSH}: content, held -> managed\n    {SSH}: content not shown: not readable by others (mode 0640)\n"
        )),
        "{}",
        diff.stdout
    );
    let json = f.ok(&["diff", "--json"]).stdout;
    for text in [&diff.stdout, &json] {
        assert!(
            !text.contains("PasswordAuthentication"),
            "no line of a file others may not read: {text}"
        );
    }
    assert!(!ORIGINAL_SSH.is_empty());

    // The bus moves: the openings' nft lines, one removed, one added.
    f.write_decl(
        "d.ncl",
        &declaration("hello again\\nsecond line\\n", true).replace("bus = 4222", "bus = 4223"),
    );
    f.ok(&["switch", f.decl("d.ncl").to_str().unwrap()]);
    let diff = f.ok(&["diff"]).stdout;
    for line in [
        "setting ports.bus: 4222 -> 4223",
        "firewall (nft lines added and removed):",
        "    -insert into the found input chains: tcp dport 4222 accept comment \"mesh: foundation bus 4222/tcp from anywhere\"",
        "    +insert into the found input chains: tcp dport 4223 accept comment \"mesh: foundation bus 4223/tcp from anywhere\"",
    ] {
        assert!(diff.contains(line), "{line}\nnot in:\n{diff}");
    }
    let json: serde_json::Value =
        serde_json::from_str(f.ok(&["diff", "--json"]).last_line()).unwrap();
    assert!(
        json["diff"]["firewall"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l
                .as_str()
                .unwrap()
                .starts_with("+insert into the found input chains: tcp dport 4223")),
        "{json}"
    );
    assert_eq!(
        json["diff"]["settings"],
        serde_json::json!([{"name": "bus", "before": 4222, "after": 4223}])
    );
}

/// `mesh diff` between two built generations shows a container's spec field by field, in text
/// and in JSON (no engine is asked: it compares generations).
#[test]
fn diff_shows_a_container_field_by_field() {
    let state = tempfile::tempdir().unwrap();
    let decl = |image: &str, level: &str| {
        format!(
            r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "n1",
  settings = {{
    ports = {{ store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820 }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.5" }},
  }},
  modules = [
    {{ name = "web", config = fun s => {{ containers = [{{ name = "web", image = "{image}", environment = {{ LEVEL = "{level}" }} }}] }} }},
  ],
}}
"#
        )
    };
    let build = |text: &str, name: &str| {
        let path = state.path().join(name);
        std::fs::write(&path, text).unwrap();
        crate::support::build_json(&state.path().join("state"), &path, None)["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let a = build(&decl("web:1", "info"), "a.ncl");
    let b = build(&decl("web:2", "debug"), "b.ncl");
    let mut c = crate::support::mesh(&state.path().join("state"));
    c.args(["diff", &a, &b]);
    let ran = crate::support::run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        ran.stdout.contains(
            "container web: spec changed\n    image: web:1 -> web:2\n    environment.LEVEL: info -> debug\n"
        ),
        "{}",
        ran.stdout
    );
    let mut c = crate::support::mesh(&state.path().join("state"));
    c.args(["diff", &a, &b, "--json"]);
    let json: serde_json::Value = serde_json::from_str(crate::support::run(c).last_line()).unwrap();
    assert_eq!(
        json["diff"]["containers"][0]["fields"][0],
        serde_json::json!({"field": "image", "before": "web:1", "after": "web:2"})
    );
}
