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

/// `ip` inside the fixture's namespace, which must succeed.
fn ip_in(f: &Fixture, args: &[&str]) {
    let mut all = vec!["netns", "exec", &f.netns, "ip"];
    all.extend_from_slice(args);
    let out = std::process::Command::new("ip")
        .args(&all)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A predecessor's tunnel holding an address in the private network's range (a tun link, as a
/// userspace wireguard's) is refused at genesis (exit 2), naming the interface and its
/// range, with nothing pinned; so is a route into the range through another link. The private
/// network's own interface (the node's address with the range) is not in the way; and a switch
/// that moves the range onto a container runtime's bridge is refused with nothing changed.
#[test]
fn genesis_refuses_a_private_range_the_node_already_uses() {
    if !have_root_tools(&["ip"]) {
        return;
    }
    let f = Fixture::new();
    f.write_decl("n.ncl", &declaration(5432));
    ip_in(&f, &["tuntap", "add", "wg-pred", "mode", "tun"]);
    ip_in(&f, &["addr", "add", "10.77.0.9/24", "dev", "wg-pred"]);
    ip_in(&f, &["link", "set", "wg-pred", "up"]);
    let ran = f.mesh(&["genesis", f.decl("n.ncl").to_str().unwrap()]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("the private network 10.77.0.0/24 (this node 10.77.0.1) overlaps")
            && ran
                .stderr
                .contains("interface wg-pred has address 10.77.0.9/24 (range 10.77.0.0/24)"),
        "{}",
        ran.stderr
    );
    assert!(!f.state().join("record.json").exists(), "nothing pinned");

    // A route into the range through a tunnel-like link, without an address in it.
    ip_in(&f, &["link", "del", "wg-pred"]);
    ip_in(&f, &["tuntap", "add", "tun-pred", "mode", "tun"]);
    ip_in(&f, &["link", "set", "tun-pred", "up"]);
    ip_in(&f, &["route", "add", "10.77.0.0/16", "dev", "tun-pred"]);
    let ran = f.mesh(&["genesis", f.decl("n.ncl").to_str().unwrap()]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("interface tun-pred is routed 10.77.0.0/16"),
        "{}",
        ran.stderr
    );
    ip_in(&f, &["link", "del", "tun-pred"]);

    // The private network's own interface: the node's address, the declared range.
    ip_in(&f, &["tuntap", "add", "mesh-hub", "mode", "tun"]);
    ip_in(&f, &["addr", "add", "10.77.0.1/24", "dev", "mesh-hub"]);
    ip_in(&f, &["link", "set", "mesh-hub", "up"]);
    // A runtime's bridge elsewhere.
    ip_in(&f, &["link", "add", "br-runtime", "type", "bridge"]);
    ip_in(&f, &["addr", "add", "10.88.0.1/16", "dev", "br-runtime"]);
    ip_in(&f, &["link", "set", "br-runtime", "up"]);
    f.ok(&["genesis", f.decl("n.ncl").to_str().unwrap()]);
    f.ok(&["switch", f.decl("n.ncl").to_str().unwrap()]);

    // The range moves onto the bridge's: the switch is refused, the generation stays.
    let before = f.ok(&["generations", "--json"]).stdout;
    f.write_decl(
        "n.ncl",
        &declaration(5432).replace(
            r#"range = "10.77.0.0/24", address = "10.77.0.1""#,
            r#"range = "10.88.5.0/24", address = "10.88.5.1""#,
        ),
    );
    let ran = f.mesh(&["switch", f.decl("n.ncl").to_str().unwrap()]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("interface br-runtime has address 10.88.0.1/16 (range 10.88.0.0/16)")
            && ran.stderr.contains("nothing was changed"),
        "{}",
        ran.stderr
    );
    assert_eq!(f.ok(&["generations", "--json"]).stdout, before);
    // Clear of it, the range may move.
    f.write_decl(
        "n.ncl",
        &declaration(5432).replace(
            r#"range = "10.77.0.0/24", address = "10.77.0.1""#,
            r#"range = "10.99.0.0/24", address = "10.99.0.1""#,
        ),
    );
    f.ok(&["switch", f.decl("n.ncl").to_str().unwrap()]);
}
