//! Found firewalls kept by a daemon, on the systemd test node (tests/it/systemd_node.rs: a real
//! systemd as PID 1, the machine's own network namespace being the container's): firewalld,
//! spoken to over its D-Bus API, and ufw. Packets come from outside the node's namespace (this
//! side of Docker's bridge). For each: adoption keeps every port the found firewall allows
//! reachable and refuses the guarded store port; an opening is reachable and the firewall's own
//! tools show it; the firewall's own reload leaves it reachable (firewalld: put back by
//! `mesh reconcile --watch` on its `Reloaded` signal); the flip stops and disables the daemon
//! and loads the base ruleset; a rollback across the flip gives the found firewall back exactly
//! as its own tools show it.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::support::have_root_tools;
use crate::systemd_node::SystemdNode;

/// The node: the store (guarded: the private network and loopback only), and the foundation's
/// bus port 4222 opened to anyone.
const DECLARATION: &str = r#"let mesh = import "mesh.ncl" in
mesh.node {
  name = "n1",
  settings = {
    ports = { store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820 },
    private_network = { range = "10.77.0.0/24", address = "10.77.0.1" },
  },
  modules = [
    { name = "store", config = fun s => { openings = [{ port = s.ports.store, from = "private", paths = ['incoming] }] } },
  ],
}
"#;

/// The ports served inside: the predecessor's 8081, the store's 5432 (which the predecessor
/// allowed to everyone), the bus's 4222 (which it did not), and 8082, which nobody opens.
const PORTS: [u16; 4] = [8081, 5432, 4222, 8082];

fn serve(node: &SystemdNode) {
    for port in PORTS {
        node.ok_sh(&format!(
            "nohup /usr/bin/python3 -m http.server {port} --bind 0.0.0.0 >/dev/null 2>&1 &"
        ));
    }
    let start = Instant::now();
    while !PORTS.iter().all(|p| {
        node.sh(&format!(
            "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {p}), 1)'"
        ))
        .code
            == 0
    }) {
        assert!(start.elapsed() < Duration::from_secs(20), "servers inside");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Which of [`PORTS`] answer from outside the node's namespace.
fn reachable(address: &str) -> Vec<u16> {
    PORTS
        .iter()
        .copied()
        .filter(|port| reaches(address, *port))
        .collect()
}

fn reaches(address: &str, port: u16) -> bool {
    let at: SocketAddr = format!("{address}:{port}").parse().unwrap();
    TcpStream::connect_timeout(&at, Duration::from_millis(700)).is_ok()
}

/// Waits (at most `bound`) until `port` answers; how long it took.
fn until_reachable(address: &str, port: u16, bound: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < bound {
        if reaches(address, port) {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out.trim().lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// A listing without what the mesh adds: its marked rules, and counters.
fn without_mesh(listing: &str) -> String {
    listing
        .lines()
        .filter(|l| !l.contains("mesh: "))
        .map(|l| match l.rfind(" [") {
            Some(at) if l.starts_with(':') => &l[..at],
            _ => l,
        })
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The flip (every module taken): the base ruleset alone, the daemon's `unit` stopped and
/// disabled; then a rollback across it: the unit running and enabled again, the predecessor's
/// port and the opening answering.
fn flip_and_back(node: &SystemdNode, unit: &str, address: &str) {
    let flipped = node.ok(&["flip", "--force"]);
    assert!(
        flipped.stdout.contains(&format!("{unit} stopped")),
        "{}",
        flipped.stdout
    );
    assert_eq!(node.property(unit, "ActiveState"), "inactive");
    let enabled = || node.sh(&format!("systemctl is-enabled {unit}")).stdout;
    assert_eq!(enabled().trim(), "disabled");
    assert_eq!(reachable(address), [4222], "the base ruleset alone");
    if unit == "firewalld.service" {
        assert!(!node.ok_sh("nft list tables").contains("firewalld"));
    }

    let back = node.ok(&["rollback"]);
    assert!(
        back.stdout.contains(&format!("{unit} started")),
        "{}",
        back.stdout
    );
    assert_eq!(node.property(unit, "ActiveState"), "active");
    assert_eq!(enabled().trim(), "enabled");
    assert_eq!(reachable(address), [8081, 4222]);
    assert!(!node.ok_sh("nft list tables").contains("mesh_base"));
}

fn needs() -> bool {
    have_root_tools(&["docker", "firewalld", "ufw"])
}

/// Adoption, the opening, the reload, the flip and the rollback with firewalld running.
#[test]
fn adopted_node_through_firewalld() {
    if !needs() {
        return;
    }
    let node = SystemdNode::boot("fwd");
    // The predecessor: firewalld, its default zone allowing 8081 and 5432, permanently, and
    // 8083 in its runtime configuration alone (`firewall-cmd` without `--permanent`).
    node.ok_sh(
        "systemctl enable --now firewalld.service >/dev/null 2>&1; firewall-cmd --state && firewall-cmd --permanent --add-port=8081/tcp --add-port=5432/tcp && firewall-cmd --reload && firewall-cmd --add-port=8083/tcp",
    );
    serve(&node);
    let address = node.address();
    assert_eq!(reachable(&address), [8081, 5432], "firewalld alone");
    let zones = || node.ok_sh("firewall-cmd --list-all-zones");
    let found_zones = zones();
    assert!(found_zones.contains("8083/tcp"), "{found_zones}");
    let permanent = node.ok_sh("cat /etc/firewalld/zones/public.xml");

    let decl = node.declare("n1.ncl", DECLARATION);
    let adopted = json(&node.ok(&["adopt", &decl, "--json"]).stdout);
    assert_eq!(adopted["found_firewall"], "firewalld", "{adopted}");
    assert_eq!(
        reachable(&address),
        [8081, 4222],
        "the predecessor's port as before; the store refused by the guard; the bus opened"
    );
    // The opening is firewalld's own rich rule, marked as the mesh's, in the runtime
    // configuration only.
    let listed = node.ok_sh("firewall-cmd --list-all");
    assert!(
        listed.contains("port port=\"4222\" protocol=\"tcp\" log prefix=\"mesh: foundation bus 4222/tcp from anywhere\""),
        "{listed}"
    );
    assert_eq!(
        node.ok_sh("cat /etc/firewalld/zones/public.xml"),
        permanent,
        "the permanent configuration is not written"
    );
    assert!(
        !node
            .ok_sh("nft list table inet firewalld")
            .contains("comment \"mesh: "),
        "nothing is inserted behind firewalld's back"
    );
    // Idempotent.
    let again = json(&node.ok(&["reconcile", "--json"]).stdout);
    assert_eq!(again["converged"]["inserted"], 0, "{again}");
    assert_eq!(again["converged"]["removed"], 0, "{again}");

    // firewalld's own reload drops runtime rules; `mesh reconcile --watch` (a period far longer
    // than the test) puts them back on its `Reloaded` signal.
    node.ok_sh("nohup /opt/mesh/mesh --state-dir /srv/t/state reconcile --watch 3600 >/srv/t/watch.log 2>&1 &");
    std::thread::sleep(Duration::from_millis(500));
    node.ok_sh("firewall-cmd --reload");
    let back = until_reachable(&address, 4222, Duration::from_secs(10));
    eprintln!("an opening back after firewalld's reload in {back:?}");
    assert!(
        back.is_some_and(|d| d <= Duration::from_secs(1)),
        "the opening back within a second of the reload: {back:?}; {}",
        node.ok_sh("cat /srv/t/watch.log; firewall-cmd --list-rich-rules")
    );
    // A restart of firewalld (as a boot starts it) starts from its permanent configuration:
    // the opening is back once it answers on the bus.
    node.ok_sh("systemctl restart firewalld.service");
    let back = until_reachable(&address, 4222, Duration::from_secs(10));
    eprintln!("an opening back after firewalld's restart in {back:?}");
    assert!(
        back.is_some_and(|d| d <= Duration::from_secs(1)),
        "the opening back within a second of the restart: {back:?}; {}",
        node.ok_sh("cat /srv/t/watch.log; firewall-cmd --list-rich-rules")
    );
    // It stops between two rounds: waited for, so that it holds no lock.
    node.ok_sh("pkill -f 'reconcile --watc[h]'; while pgrep -f 'reconcile --watc[h]' >/dev/null; do sleep 0.05; done");

    // The flip preview reads what firewalld enforces: its 8081 closes.
    node.ok(&["take", "store"]);
    let preview = json(&node.ok(&["flip", "--preview", "--json"]).stdout);
    let closes: Vec<u64> = preview["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["change"] == "closes")
        .filter_map(|p| p["port"].as_u64())
        .collect();
    assert!(closes.contains(&8081), "{preview}");

    // The flip: the base ruleset, firewalld stopped and disabled, its table gone; back across
    // it, firewalld running and enabled again, as it was found — its runtime configuration too
    // (8083, which its files do not hold and its reload above dropped).
    flip_and_back(&node, "firewalld.service", &address);
    assert_eq!(without_mesh(&zones()), without_mesh(&found_zones));
}

/// The same story with ufw: the openings at the top of INPUT, outside ufw's own chains, which
/// `ufw reload` rewrites and INPUT it does not.
#[test]
fn adopted_node_through_ufw() {
    if !needs() {
        return;
    }
    let node = SystemdNode::boot("ufw");
    node.ok_sh(
        "ufw default deny incoming >/dev/null && ufw allow 8081/tcp >/dev/null && ufw allow 5432/tcp >/dev/null && ufw --force enable >/dev/null && systemctl enable ufw.service 2>/dev/null",
    );
    serve(&node);
    let address = node.address();
    assert_eq!(reachable(&address), [8081, 5432], "ufw alone");
    let saves = || {
        format!(
            "{}\n{}",
            node.ok_sh("iptables-save -t filter"),
            node.ok_sh("ip6tables-save -t filter")
        )
    };
    let found = saves();
    let status = node.ok_sh("ufw status verbose");

    let decl = node.declare("n1.ncl", DECLARATION);
    let adopted = json(&node.ok(&["adopt", &decl, "--json"]).stdout);
    assert_eq!(adopted["found_firewall"], "ufw", "{adopted}");
    assert_eq!(reachable(&address), [8081, 4222]);
    assert_eq!(
        node.ok_sh("ufw status verbose"),
        status,
        "ufw's rules and files are not rewritten"
    );
    let raw = node.ok_sh("ufw show raw");
    assert!(
        raw.contains("/* mesh: foundation bus 4222/tcp from anywhere */"),
        "ufw's own listing of what is in force shows the opening: {raw}"
    );

    // ufw's own reload, and a restart of its unit: the opening stays.
    node.ok_sh("ufw reload >/dev/null");
    assert_eq!(reachable(&address), [8081, 4222], "after `ufw reload`");
    node.ok_sh("systemctl restart ufw.service");
    assert_eq!(reachable(&address), [8081, 4222], "after a restart of ufw");
    let again = json(&node.ok(&["reconcile", "--json"]).stdout);
    assert_eq!(again["converged"]["inserted"], 0, "{again}");

    node.ok(&["take", "store"]);
    flip_and_back(&node, "ufw.service", &address);
    assert_eq!(without_mesh(&saves()), without_mesh(&found));
    assert_eq!(node.ok_sh("ufw status verbose"), status);
}
