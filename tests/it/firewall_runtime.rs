//! A node that runs Docker: the container runtime's iptables-nft tables (`DOCKER`,
//! `DOCKER-USER`, `DOCKER-ISOLATION-STAGE-1` chains, FORWARD policy drop, the DNAT of a
//! published port) sit beside the predecessor's firewall or share its `ip filter` table. They
//! are the runtime's, not the predecessor's: the flip must leave them in force (Docker could
//! no longer publish a port otherwise), and a rollback must not load an old copy over them.
//! Real rules in namespaces the test creates, real packets; the runtime's rules are loaded as
//! Docker writes them, since a real dockerd works in the machine's own namespace.

use crate::firewall_adopted::open_in;
use crate::netlab::{Lab, PREDECESSOR};
use crate::node_fixture::Fixture;
use crate::support::{have_root_tools, Netns};

/// Docker's filter chains for a container at 172.30.0.2 publishing 5432 as 15432, as
/// `iptables-nft-save` shows them on a Docker host.
const DOCKER_FILTER: &str = ":DOCKER - [0:0]
:DOCKER-ISOLATION-STAGE-1 - [0:0]
:DOCKER-USER - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-ISOLATION-STAGE-1
-A FORWARD -d 172.30.0.0/24 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -d 172.30.0.0/24 -j DOCKER
-A FORWARD -s 172.30.0.0/24 -j ACCEPT
-A DOCKER -d 172.30.0.2/32 -p tcp -m tcp --dport 5432 -j ACCEPT
-A DOCKER-ISOLATION-STAGE-1 -j RETURN
-A DOCKER-USER -j RETURN
";

const DOCKER_NAT: &str = "*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:DOCKER - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -s 172.30.0.0/24 -j MASQUERADE
-A DOCKER -p tcp -m tcp --dport 15432 -j DNAT --to-destination 172.30.0.2:5432
COMMIT
";

/// The predecessor's INPUT, written with iptables (as ufw does), in the table Docker shares.
const SHARED_INPUT: &str = "-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT
";

/// The container's published port is declared (forwarded), so it stays reachable after the
/// flip.
const DECLARATION: &str = r#"let mesh = import "mesh.ncl" in
mesh.node {
  name = "n1",
  settings = {
    ports = { store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820, pg = 15432 },
    private_network = { range = "10.77.0.0/24", address = "10.77.0.1" },
  },
  modules = [
    { name = "pg", config = fun s => { openings = [{ port = s.ports.pg, paths = ['forwarded] }] } },
  ],
}
"#;

fn reachable(lab: &Lab) -> Vec<String> {
    open_in(&Lab::probe(&[
        ("outside", &lab.outside, "192.0.2.1", 80),
        ("outside", &lab.outside, "192.0.2.1", 4222),
        ("outside", &lab.outside, "192.0.2.1", 15432),
    ]))
}

/// `iptables-nft-save` of the node without counters, comments and the mesh's own rules: what
/// the runtime (and, where `with_input`, the predecessor's INPUT) has in force.
fn saved(node: &Netns, with_input: bool) -> Vec<String> {
    let out = node.exec(&["iptables-nft-save"]).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.contains("mesh: "))
        .filter(|l| with_input || !(l.starts_with(":INPUT") || l.starts_with("-A INPUT")))
        .map(|l| match l.find(" [") {
            Some(i) if l.starts_with(':') => l[..i].to_owned(),
            _ => l.to_owned(),
        })
        .collect()
}

fn tables(node: &Netns) -> String {
    let out = node.exec(&["nft", "list", "tables"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// The predecessor in `inet pred` (nftables), Docker in `ip filter` and `ip nat`.
#[test]
fn flip_beside_docker_removes_only_the_predecessor() {
    if !have_root_tools(&["ip", "nft", "iptables-nft-restore"]) {
        return;
    }
    let lab = Lab::new();
    let pred = &PREDECESSOR[..PREDECESSOR.find("table ip natrt").unwrap()];
    lab.nft(&format!("flush ruleset\n{pred}"));
    lab.restore(
        "iptables-nft-restore",
        &format!("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n{DOCKER_FILTER}COMMIT\n{DOCKER_NAT}"),
    );
    story(&lab, "nftables");
}

/// The predecessor's rules in INPUT of the `ip filter` table Docker writes its chains into.
#[test]
fn flip_in_a_table_shared_with_docker_empties_only_input() {
    if !have_root_tools(&["ip", "nft", "iptables-nft-restore"]) {
        return;
    }
    let lab = Lab::new();
    lab.nft("flush ruleset\n");
    lab.restore(
        "iptables-nft-restore",
        &format!("*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n{DOCKER_FILTER}{SHARED_INPUT}COMMIT\n{DOCKER_NAT}"),
    );
    story(&lab, "iptables-nft");
}

fn story(lab: &Lab, kind: &str) {
    for port in [80, 4222] {
        Lab::serve(&lab.node, port);
    }
    Lab::serve(&lab.ctr, 5432);
    assert_eq!(
        reachable(lab),
        ["outside:80", "outside:15432"],
        "the predecessor and Docker alone"
    );
    let runtime = saved(&lab.node, false);
    let input = saved(&lab.node, true);

    let f = Fixture::in_netns(&lab.node.name);
    f.write_decl("node.ncl", DECLARATION);
    f.ok(&["adopt", f.decl("node.ncl").to_str().unwrap()]);
    assert_eq!(f.record()["found"]["firewall"]["kind"], kind);
    let adopted = reachable(lab);
    assert_eq!(adopted, ["outside:80", "outside:4222", "outside:15432"]);

    f.ok(&["flip", "--force"]);
    assert_eq!(
        reachable(lab),
        ["outside:4222", "outside:15432"],
        "the base ruleset decides: declared ports answer, 80 does not; the container is still reached through Docker's chains"
    );
    assert!(
        !tables(&lab.node).contains("table inet pred"),
        "the predecessor's own table went"
    );
    assert_eq!(
        saved(&lab.node, false),
        runtime,
        "Docker's chains, FORWARD policy and DNAT untouched"
    );
    let listed = lab
        .node
        .exec(&["iptables-nft", "-S", "INPUT"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        "-P INPUT ACCEPT\n",
        "the predecessor's INPUT emptied, the base ruleset in charge of what comes in"
    );
    // Docker still finds its chains: publishing another container works.
    let added = lab
        .node
        .exec(&[
            "iptables-nft",
            "-A",
            "DOCKER",
            "-d",
            "172.30.0.3/32",
            "-p",
            "tcp",
            "--dport",
            "6000",
            "-j",
            "ACCEPT",
        ])
        .status()
        .unwrap();
    assert!(
        added.success(),
        "Docker can still write its chain after the flip"
    );
    let runtime = saved(&lab.node, false);
    // A reconcile keeps it so (the runtime's new rule stays, nothing comes back).
    f.ok(&["reconcile"]);
    assert_eq!(saved(&lab.node, false), runtime);

    // Back across the flip: the predecessor's firewall as found, Docker's as it is now (its
    // new rule kept, not replaced by the copy taken at adoption).
    f.ok(&["rollback"]);
    assert_eq!(reachable(lab), adopted);
    assert_eq!(saved(&lab.node, false), runtime);
    if kind == "iptables-nft" {
        let back: Vec<String> = saved(&lab.node, true)
            .into_iter()
            .filter(|l| l.starts_with(":INPUT") || l.starts_with("-A INPUT"))
            .collect();
        let found: Vec<String> = input
            .into_iter()
            .filter(|l| l.starts_with(":INPUT") || l.starts_with("-A INPUT"))
            .collect();
        assert_eq!(back, found, "the predecessor's INPUT as found");
    } else {
        assert!(tables(&lab.node).contains("table inet pred"));
    }
}
