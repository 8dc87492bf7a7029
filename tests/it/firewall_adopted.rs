//! The firewall on an adopted node, with real packets in namespaces the test creates: the guard
//! refuses the store and the broker's management port to everyone but the private network and
//! loopback (IPv4 and IPv6); the openings are inserted into the predecessor's own chains, on the
//! incoming and the forwarded path; every predecessor port answers exactly as before; a reload
//! of the predecessor's firewall is repaired by `mesh reconcile`.

use crate::netlab::{Lab, PREDECESSOR};
use crate::node_fixture::Fixture;
use crate::support::have_root_tools;
use std::process::Command;

pub(crate) fn declaration(with_broker: bool) -> String {
    let broker = if with_broker {
        r#"{ name = "broker", config = fun s => { openings = [{ port = s.ports.broker_management, from = "private", paths = ['incoming] }] } },"#
    } else {
        ""
    };
    format!(
        r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "n1",
  settings = {{
    ports = {{ store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820 }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.1" }},
  }},
  modules = [
    {{ name = "store", config = fun s => {{ openings = [{{ port = s.ports.store, from = "private", paths = ['incoming] }}] }} }},
    {broker}
  ],
}}
"#
    )
}

/// Which of the ports each client reaches: outside over IPv4 and IPv6, the private network,
/// and the node itself over loopback.
pub(crate) fn matrix(lab: &Lab) -> Vec<(String, u16, bool)> {
    let mut probes: Vec<(&str, &crate::support::Netns, &str, u16)> = Vec::new();
    for port in [80, 15432, 4222, 5001, 5432, 15672] {
        probes.push(("outside v4", &lab.outside, "192.0.2.1", port));
    }
    for port in [80, 4222, 5432, 15672] {
        probes.push(("outside v6", &lab.outside, "2001:db8:1::1", port));
    }
    for port in [4222, 5432, 15672] {
        probes.push(("private", &lab.private, "10.77.0.1", port));
    }
    for port in [5432, 15672] {
        probes.push(("loopback", &lab.node, "127.0.0.1", port));
    }
    Lab::probe(&probes)
}

pub fn open_in(m: &[(String, u16, bool)]) -> Vec<String> {
    m.iter()
        .filter(|(_, _, open)| *open)
        .map(|(who, port, _)| format!("{who}:{port}"))
        .collect()
}

/// The predecessor, in one of the two kinds the mesh speaks.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Nftables,
    IptablesNft,
    IptablesLegacy,
}

impl Kind {
    /// Loads the predecessor's firewall as its own tooling would (a reload flushes it first).
    fn load(self, lab: &Lab) {
        match self {
            Kind::Nftables => lab.nft(&format!("flush ruleset\n{PREDECESSOR}")),
            Kind::IptablesNft => {
                lab.restore("iptables-nft-restore", IPTABLES_V4);
                lab.restore("ip6tables-nft-restore", IPTABLES_V6);
            }
            Kind::IptablesLegacy => {
                lab.restore("iptables-legacy-restore", IPTABLES_V4);
                lab.restore("ip6tables-legacy-restore", IPTABLES_V6);
            }
        }
    }

    /// What legacy iptables holds now, each family's save without its comments and counters:
    /// what a rollback across the flip must give back exactly.
    fn legacy_saves(lab: &Lab) -> Vec<String> {
        ["iptables-legacy-save", "ip6tables-legacy-save"]
            .iter()
            .map(|tool| {
                let out = lab.node.exec(&[tool]).output().unwrap();
                assert!(out.status.success(), "{tool}");
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .map(|l| match l.rfind(" [") {
                        Some(at) if l.starts_with(':') => &l[..at],
                        _ => l,
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect()
    }

    fn word(self) -> &'static str {
        match self {
            Kind::Nftables => "nftables",
            Kind::IptablesNft => "iptables-nft",
            Kind::IptablesLegacy => "iptables-legacy",
        }
    }
}

/// The nftables predecessor of [`PREDECESSOR`], written with iptables (as ufw does).
const IPTABLES_V4: &str = "*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 5432 -j ACCEPT
-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -p tcp -m conntrack --ctstate DNAT -m tcp --dport 5432 -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -p tcp -m tcp --dport 15432 -j DNAT --to-destination 172.30.0.2:5432
-A PREROUTING -p tcp -m tcp --dport 5001 -j DNAT --to-destination 172.30.0.2:5000
COMMIT
";

const IPTABLES_V6: &str = "*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p ipv6-icmp -j ACCEPT
-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 5432 -j ACCEPT
COMMIT
";

/// The whole story on an nftables-native predecessor.
#[test]
fn adopted_node_through_nftables() {
    if !have_root_tools(&["ip", "nft"]) {
        return;
    }
    story(Kind::Nftables);
}

/// The whole story on a predecessor written with iptables on its nft backend: the openings
/// are spoken through iptables.
#[test]
fn adopted_node_through_iptables_nft() {
    if !have_root_tools(&["ip", "nft", "iptables-nft-restore"]) {
        return;
    }
    story(Kind::IptablesNft);
}

/// The whole story on a predecessor written with legacy iptables (x_tables, which nft does not
/// see): the openings go through its own chains by `iptables-legacy`, the guard (nftables) is
/// final beside it, the flip empties it and a rollback gives back its save exactly.
#[test]
fn adopted_node_through_legacy_iptables() {
    if !have_root_tools(&["ip", "nft", "iptables-legacy-restore"]) {
        return;
    }
    story(Kind::IptablesLegacy);
}

fn story(kind: Kind) {
    let lab = Lab::new();
    kind.load(&lab);
    let found_saves = if kind == Kind::IptablesLegacy {
        Kind::legacy_saves(&lab)
    } else {
        Vec::new()
    };
    for port in [80, 4222, 5432, 15672] {
        Lab::serve(&lab.node, port);
    }
    for port in [5432, 5000] {
        Lab::serve(&lab.ctr, port);
    }
    // The hub: the private network's port, UDP, open to anywhere (a node enrols before it has a
    // private address).
    Lab::serve_udp(&lab.node, 51820);
    assert!(
        !Lab::reaches_udp(&lab.outside, "192.0.2.1", 51820),
        "the predecessor drops it"
    );
    let before = matrix(&lab);
    assert_eq!(
        open_in(&before),
        [
            "outside v4:80",
            "outside v4:15432",
            "outside v4:5432",
            "outside v6:80",
            "outside v6:5432",
            "private:5432",
            "loopback:5432",
            "loopback:15672"
        ],
        "the predecessor alone (the mesh's store port is open to the world)"
    );

    let f = Fixture::in_netns(&lab.node.name);
    f.write_decl("fw.ncl", &declaration(true));
    let netns = lab.node.name.clone();
    // Adopting records the found firewall, then switches, and a switch puts the firewall in
    // force first.
    let adopted = f.ok(&["adopt", f.decl("fw.ncl").to_str().unwrap()]);
    assert!(
        adopted
            .stdout
            .contains("  firewall guard loaded; openings through the found chains:"),
        "{}",
        adopted.stdout
    );
    let found = f.record()["found"]["firewall"].clone();
    assert_eq!(found["kind"], kind.word());
    assert!(
        adopted.stdout.contains(&format!(
            "  firewall found in force and recorded: {}",
            kind.word()
        )),
        "{}",
        adopted.stdout
    );
    let dump: mesh_lib::BlobHash = found["dump"].as_str().unwrap().parse().unwrap();
    let dump = String::from_utf8(
        mesh_lib::Store::open(&f.state())
            .unwrap()
            .blob(&dump)
            .unwrap(),
    )
    .unwrap();
    let tables: &[&str] = match kind {
        Kind::Nftables => &["table inet pred", "table ip natrt"],
        Kind::IptablesNft => &["table ip filter", "table ip nat", "table ip6 filter"],
        Kind::IptablesLegacy => &[
            "\"legacy\"",
            ":INPUT DROP",
            "--to-destination 172.30.0.2:5432",
        ],
    };
    assert!(
        tables.iter().all(|t| dump.contains(t)) && !dump.contains("mesh_guard"),
        "{dump}"
    );

    let after = matrix(&lab);
    assert!(
        Lab::reaches_udp(&lab.outside, "192.0.2.1", 51820),
        "the hub's port is open over IPv4"
    );
    assert!(
        Lab::reaches_udp(&lab.outside, "2001:db8:1::1", 51820),
        "and over IPv6"
    );
    assert_eq!(
        open_in(&after),
        [
            "outside v4:80",
            "outside v4:15432",
            "outside v4:4222",
            "outside v4:5001",
            "outside v6:80",
            "outside v6:4222",
            "private:4222",
            "private:5432",
            "private:15672",
            "loopback:5432",
            "loopback:15672"
        ],
        "predecessor ports as before; bus and registry open on the incoming and the forwarded path; store and broker management refused from outside (v4 and v6), reachable from the private network and loopback"
    );
    for (who, port, open) in &before {
        if [80u16, 15432].contains(port) {
            assert!(
                after.contains(&(who.clone(), *port, *open)),
                "{who}:{port} changed"
            );
        }
    }

    // Idempotent: nothing to do the second time, one copy of each rule.
    let again = f.ok(&["reconcile", "--netns", &netns, "--json"]);
    let done: serde_json::Value = serde_json::from_str(again.last_line()).unwrap();
    assert_eq!(
        done["converged"],
        serde_json::json!({"base": null, "guard": false, "inserted": 0, "removed": 0, "removed_tables": 0, "emptied_inputs": 0})
    );
    let listing = match kind {
        Kind::Nftables => lab
            .node
            .exec(&["nft", "list", "chain", "inet", "pred", "input"])
            .output()
            .unwrap(),
        Kind::IptablesNft => lab
            .node
            .exec(&["iptables-nft", "-S", "INPUT"])
            .output()
            .unwrap(),
        Kind::IptablesLegacy => lab
            .node
            .exec(&["iptables-legacy", "-S", "INPUT"])
            .output()
            .unwrap(),
    };
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert_eq!(
        listing
            .matches("mesh: foundation bus 4222/tcp from anywhere")
            .count(),
        1,
        "{listing}"
    );

    // The predecessor reloads its own firewall: the openings are gone (and, with nft's
    // `flush ruleset`, the guard too) until reconcile puts them back.
    kind.load(&lab);
    assert!(!Lab::reaches(&lab.outside, "192.0.2.1", 4222));
    if kind == Kind::Nftables {
        assert!(
            Lab::reaches(&lab.outside, "192.0.2.1", 5432),
            "the guard went with the flush"
        );
    }
    // The drift is seen before it is repaired, and a dry run changes nothing.
    let status = f.ok(&["status"]);
    assert!(
        status.stdout.contains("firewall: drifted — ")
            && status.stdout.contains("(`mesh reconcile` puts it back)"),
        "{}",
        status.stdout
    );
    let would: serde_json::Value =
        serde_json::from_str(f.ok(&["reconcile", "--dry-run", "--json"]).last_line()).unwrap();
    assert!(
        would["would_change"]["inserted"].as_u64() > Some(0),
        "{would}"
    );
    assert!(!Lab::reaches(&lab.outside, "192.0.2.1", 4222));
    f.ok(&["reconcile", "--netns", &netns]);
    assert_eq!(open_in(&matrix(&lab)), open_in(&after));
    assert!(f
        .ok(&["status"])
        .stdout
        .contains("firewall: in force as the generation says"));

    // An opening no longer declared is removed by the switch that drops it.
    f.write_decl("fw.ncl", &declaration(false));
    f.ok(&["switch", f.decl("fw.ncl").to_str().unwrap()]);
    let diff = f.ok(&["diff"]);
    assert!(
        diff.stdout
            .contains("- opening broker broker_management 15672/tcp from "),
        "{}",
        diff.stdout
    );
    assert!(!Lab::reaches(&lab.private, "10.77.0.1", 15672));
    assert!(Lab::reaches(&lab.private, "10.77.0.1", 5432));

    // The flip, previewed from what is actually published (sockets, the predecessor's DNATs):
    // exactly the ports reachable now that the flip closes (tests/it/flip_preview.rs probes
    // every verdict).
    let preview = f.ok(&["flip", "--preview", "--json"]);
    let preview: serde_json::Value = serde_json::from_str(preview.last_line()).unwrap();
    let closed: Vec<String> = preview["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["change"] == "closes")
        .map(|s| format!("{}/{}", s["port"], s["protocol"].as_str().unwrap()))
        .collect();
    assert_eq!(closed, ["80/tcp", "15432/tcp"], "{preview}");
    // It refuses while a module is not taken.
    let refused = f.mesh(&["flip"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("modules not taken yet: store"),
        "{}",
        refused.stderr
    );

    let before_flip = matrix(&lab);
    f.ok(&["flip", "--force"]);
    assert_eq!(f.record()["mode"], "managed");
    let diff = f.ok(&["diff"]);
    assert!(
        diff.stdout.contains("mode: adopted -> managed")
            && diff.stdout.contains("the base ruleset: loaded"),
        "{}",
        diff.stdout
    );
    assert_eq!(
        open_in(&matrix(&lab)),
        [
            "outside v4:4222",
            "outside v4:5001",
            "outside v6:4222",
            "private:4222",
            "private:5432",
            "loopback:5432",
            "loopback:15672"
        ],
        "declared ports answer, undeclared ones (80, the predecessor's 15432) do not"
    );
    // Containers reach out through their bridge (br-…, a user-defined network's), which the
    // predecessor's forward chain did not allow.
    Lab::serve(&lab.outside, 8443);
    assert!(
        Lab::reaches(&lab.ctr, "192.0.2.2", 8443),
        "a container reaches the outside after the flip"
    );

    // Adopting a managed node would drop its base ruleset: refused, nothing changed.
    let readopt = f.mesh(&["adopt", f.decl("fw.ncl").to_str().unwrap()]);
    assert_eq!(readopt.code, 2, "{}", readopt.stderr);
    assert!(
        readopt.stderr.contains("this node is managed"),
        "{}",
        readopt.stderr
    );
    assert_eq!(f.record()["mode"], "managed");

    // Back across the flip: the found firewall from its dump, the base ruleset gone.
    let back = f.ok(&["rollback"]);
    let restored = match kind {
        Kind::Nftables => "inet pred",
        Kind::IptablesNft => "ip filter",
        Kind::IptablesLegacy => "ip iptables-legacy",
    };
    assert!(
        back.stdout.contains(&format!(
            "the found firewall loaded back from its dump: {restored}"
        )) && back.stdout.contains("base ruleset removed"),
        "{}",
        back.stdout
    );
    assert_eq!(f.record()["mode"], "adopted");
    assert_eq!(open_in(&matrix(&lab)), open_in(&before_flip));
    if kind == Kind::IptablesLegacy {
        // Its own save, as found, but for the mesh's openings back in it.
        let without_mesh = |saves: Vec<String>| -> Vec<String> {
            saves
                .into_iter()
                .map(|s| {
                    s.lines()
                        .filter(|l| !l.contains("--comment \"mesh: "))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .collect()
        };
        assert_eq!(without_mesh(Kind::legacy_saves(&lab)), found_saves);
    }
}

/// A generated ruleset that nft rejects (here: a guard rule naming a set that does not exist)
/// leaves the kernel's ruleset and every file unchanged, and the switch fails with nft's own
/// message.
#[test]
fn nft_refusal_changes_nothing() {
    if !have_root_tools(&["ip", "nft"]) {
        return;
    }
    let f = Fixture::new();
    f.write_decl("fw.ncl", &declaration(true));
    f.ok(&["switch", f.decl("fw.ncl").to_str().unwrap()]);
    // A generation whose guard nft will refuse, as a build by another mesh could make it.
    let store = mesh_lib::Store::open(&f.state()).unwrap();
    let built: mesh_lib::GenerationId = f
        .ok(&["build", f.decl("a.ncl").to_str().unwrap()])
        .last_line()
        .parse()
        .unwrap();
    let mut g = store.generation(&built).unwrap();
    let mut objects = g.firewall.guard.objects.to_vec();
    let mut bad: serde_json::Value = serde_json::to_value(objects.last().unwrap()).unwrap();
    bad["rule"]["expr"][0] = serde_json::json!({"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": "@no_such_set"}});
    objects.push(serde_json::from_value(bad).unwrap());
    g.firewall.guard.objects = objects.into();
    let id = store.put_generation(&g).unwrap();

    let list = || {
        String::from_utf8(
            Command::new("ip")
                .args(["netns", "exec", &f.netns, "nft", "list", "ruleset"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
    };
    let (ruleset, files) = (list(), f.snapshot());
    let ran = f.mesh(&["switch", "--generation", &id.to_string()]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("nft loading the base ruleset and the guard failed")
            && ran.stderr.contains("Error: No such file or directory"),
        "nft's own message: {}",
        ran.stderr
    );
    assert!(ran.stderr.contains("no file was changed"), "{}", ran.stderr);
    assert_eq!(list(), ruleset, "the kernel's ruleset is unchanged");
    assert_eq!(f.snapshot(), files);
}

/// `mesh reconcile --watch` puts back, within a round, what a predecessor's reload removed, and
/// stops cleanly on SIGTERM.
#[test]
fn reconcile_watch_repairs_and_stops_on_sigterm() {
    if !have_root_tools(&["ip", "nft"]) {
        return;
    }
    let f = Fixture::new();
    let load = |text: &str| {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &f.netns, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
        assert!(child.wait().unwrap().success());
    };
    load(PREDECESSOR);
    f.write_decl("fw.ncl", &declaration(true));
    f.ok(&["adopt", f.decl("fw.ncl").to_str().unwrap()]);
    let ours = || {
        let out = Command::new("ip")
            .args([
                "netns", "exec", &f.netns, "nft", "list", "chain", "inet", "pred", "input",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .matches("mesh: foundation bus")
            .count()
    };
    assert_eq!(ours(), 1);

    let mut watch = f.command(&["reconcile", "--watch", "1", "--json"]);
    let mut child = watch
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    load(&format!("flush ruleset\n{PREDECESSOR}"));
    assert_eq!(ours(), 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while ours() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(ours(), 1, "the watch put the opening back");

    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "reconcile --watch did not stop on SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    assert!(status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("\"inserted\":") && !l.contains("\"inserted\":0")),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("reconcile: stopped"));
}

/// Legacy iptables reloaded by its own tool (`iptables-legacy-restore`, as a predecessor's
/// service does at boot or on a change) while adopted: `mesh reconcile --watch 1` puts the
/// openings back into its chains within its round.
#[test]
fn reconcile_watch_repairs_a_legacy_iptables_reload() {
    if !have_root_tools(&["ip", "nft", "iptables-legacy-restore"]) {
        return;
    }
    let f = Fixture::new();
    let restore = |tool: &str, text: &str| {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &f.netns, tool])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
        assert!(child.wait().unwrap().success(), "{tool}");
    };
    let reload = || {
        restore("iptables-legacy-restore", IPTABLES_V4);
        restore("ip6tables-legacy-restore", IPTABLES_V6);
    };
    reload();
    f.write_decl("fw.ncl", &declaration(true));
    let adopted = f.ok(&["adopt", f.decl("fw.ncl").to_str().unwrap(), "--json"]);
    let adopted: serde_json::Value = serde_json::from_str(adopted.last_line()).unwrap();
    assert_eq!(adopted["found_firewall"], "iptables-legacy", "{adopted}");
    let ours = || {
        let out = Command::new("ip")
            .args(["netns", "exec", &f.netns, "iptables-legacy", "-S", "INPUT"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .matches("mesh: foundation bus")
            .count()
    };
    assert_eq!(ours(), 1);

    let mut child = f
        .command(&["reconcile", "--watch", "1", "--json"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    reload();
    let reloaded = std::time::Instant::now();
    assert_eq!(ours(), 0, "the reload took the opening");
    while ours() == 0 && reloaded.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(ours(), 1, "the watch put the opening back");
}
