//! `mesh genesis`: the foundation's ports are checked free on the machine (in the test's own
//! network namespace), a taken one is refused naming its holder and a free alternative, free
//! ones are pinned in the node record and never move on later builds, except by `--repin`.

use std::net::TcpListener;

use crate::netlab::in_ns;
use crate::node_fixture::Fixture;
use crate::support::have_root_tools;

fn declaration(store: u16) -> String {
    format!(
        r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "n1",
  settings = {{
    ports = {{ store = {store}, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820 }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.1" }},
  }},
  modules = [],
}}
"#
    )
}

/// A port held by a process is refused (exit 2) with the holder and a free port named; with the
/// ports free they are pinned, and a later change of the declaration's port does not move them.
#[test]
fn genesis_checks_and_pins_the_foundation_ports() {
    if !have_root_tools(&["ip"]) {
        return;
    }
    let f = Fixture::new();
    f.write_decl("n.ncl", &declaration(5432));
    // Something already listens on the registry's port, on loopback only: still taken.
    let holder = in_ns(&f.netns, || TcpListener::bind("127.0.0.1:5001").unwrap());
    let ran = f.mesh(&["genesis", f.decl("n.ncl").to_str().unwrap()]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    let pid = format!("(pid {})", std::process::id());
    assert!(
        ran.stderr.contains("port 5001/tcp (registry) is taken by") && ran.stderr.contains(&pid),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("5002 is free"), "{}", ran.stderr);
    assert!(!f.state().join("record.json").exists(), "nothing pinned");
    drop(holder);

    let ran = f.ok(&["genesis", f.decl("n.ncl").to_str().unwrap(), "--json"]);
    let out: serde_json::Value = serde_json::from_str(ran.last_line()).unwrap();
    assert_eq!(
        out["pinned"],
        serde_json::json!({"broker_management": 15672, "bus": 4222, "hub": 51820, "registry": 5001, "store": 5432})
    );

    // The declaration now prefers another store port: the pinned one stays, everywhere.
    f.write_decl("n.ncl", &declaration(6543));
    let show = f.ok(&[
        "show",
        f.decl("n.ncl").to_str().unwrap(),
        "--record",
        f.state().join("record.json").to_str().unwrap(),
        "--json",
    ]);
    let g: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(g["settings"]["ports"]["store"], 5432);
    let again = f.ok(&["genesis", f.decl("n.ncl").to_str().unwrap()]);
    assert!(again.stdout.contains("already pinned"), "{}", again.stdout);
    assert_eq!(f.record()["pinned"]["store"], 5432);

    // Changing a pinned port is an explicit act.
    f.ok(&["genesis", f.decl("n.ncl").to_str().unwrap(), "--repin"]);
    assert_eq!(f.record()["pinned"]["store"], 6543);
}
