//! `mesh flip --preview` tells the truth: on a node like the control-node — the predecessor's
//! default-deny firewall with its own DNAT'd store and a redirect, a container runtime's
//! chains publishing a container (DNAT for IPv4, a proxy's IPv6-only socket), sockets dual-stack,
//! IPv4-only and loopback-only — every published port is listed, whoever wrote its DNAT, and
//! for each the preview's verdict, now and after the flip, is what real packets find: from
//! outside over IPv4 and IPv6, from the private network and over loopback, before and after
//! `mesh flip`. Ports it does not list answer no one outside, before or after.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::{IpAddr, TcpListener};

use serde_json::Value;

use crate::netlab::{in_ns, Lab};
use crate::node_fixture::Fixture;
use crate::support::{have_root_tools, Netns};

/// The node's declaration: the store reachable from the private network, the runtime's
/// container (web, published as 18080) declared on the forwarded path; the foundation's bus,
/// registry and hub open to anywhere.
const DECLARATION: &str = r#"let mesh = import "mesh.ncl" in
mesh.node {
  name = "n1",
  settings = {
    ports = { store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820, web = 18080 },
    private_network = { range = "10.77.0.0/24", address = "10.77.0.1" },
  },
  modules = [
    { name = "store", config = fun s => { openings = [{ port = s.ports.store, from = "private", paths = ['incoming] }] } },
    { name = "web", config = fun s => { openings = [{ port = s.ports.web, paths = ['forwarded] }] } },
  ],
}
"#;

/// The predecessor in nft's own tables: 80 and the proxy's 18080 to anywhere, its store to the
/// private network, 8022 to 192.0.2.0/24 only; its store published as 15432 by its own DNAT,
/// the registry's port DNAT'd to the container, 8081 redirected to 80.
const PRED_NFT: &str = r#"
table inet pred {
  chain input {
    type filter hook input priority 0; policy drop;
    ct state established,related accept
    iif lo accept
    meta l4proto ipv6-icmp accept
    tcp dport { 80, 18080 } accept
    ip saddr 10.77.0.0/24 tcp dport 5432 accept
    ip saddr 192.0.2.0/24 tcp dport 8022 accept
  }
  chain forward {
    type filter hook forward priority 0; policy drop;
    ct state established,related accept
    ct status dnat tcp dport 5432 accept
  }
}
table ip natrt {
  chain pre {
    type nat hook prerouting priority dstnat;
    tcp dport 15432 dnat to 172.30.0.2:5432
    tcp dport 5001 dnat to 172.30.0.2:5000
    tcp dport 8081 redirect to :80
  }
}
"#;

/// Docker's chains for the container at 172.30.0.2 publishing 8080 as 18080 on the lab's
/// `br-…` bridge, with the predecessor's own accept for its DNAT'd store in DOCKER-USER (Docker's
/// FORWARD drops everything else). `{INPUT}` and `{FORWARD}` take the predecessor's rules where
/// it shares the table; `{NAT}` its DNATs.
const DOCKER_V4: &str = "*filter
:INPUT {POLICY} [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
:DOCKER-ISOLATION-STAGE-1 - [0:0]
:DOCKER-USER - [0:0]
{INPUT}-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-ISOLATION-STAGE-1
-A FORWARD -o br-+ -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -o br-+ -j DOCKER
-A FORWARD -i br-+ ! -o br-+ -j ACCEPT
{FORWARD}-A DOCKER -d 172.30.0.2/32 ! -i br-+ -o br-+ -p tcp -m tcp --dport 8080 -j ACCEPT
-A DOCKER-ISOLATION-STAGE-1 -j RETURN
-A DOCKER-USER -p tcp -m conntrack --ctstate DNAT --ctorigdstport 15432 -j ACCEPT
-A DOCKER-USER -j RETURN
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:DOCKER - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
{NAT}-A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -s 172.30.0.0/24 ! -o br-+ -j MASQUERADE
-A DOCKER -i br-+ -j RETURN
-A DOCKER ! -i br-+ -p tcp -m tcp --dport 18080 -j DNAT --to-destination 172.30.0.2:8080
COMMIT
";

/// The same predecessor written with iptables into the tables Docker shares.
const PRED_INPUT_V4: &str = "-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p tcp -m multiport --dports 80,18080 -j ACCEPT
-A INPUT -s 10.77.0.0/24 -p tcp -m tcp --dport 5432 -j ACCEPT
-A INPUT -s 192.0.2.0/24 -p tcp -m tcp --dport 8022 -j ACCEPT
";
const PRED_FORWARD_V4: &str =
    "-A FORWARD -p tcp -m conntrack --ctstate DNAT -m tcp --dport 5432 -j ACCEPT\n";
const PRED_NAT_V4: &str =
    "-A PREROUTING -p tcp -m tcp --dport 15432 -j DNAT --to-destination 172.30.0.2:5432
-A PREROUTING -p tcp -m tcp --dport 5001 -j DNAT --to-destination 172.30.0.2:5000
-A PREROUTING -p tcp -m tcp --dport 8081 -j REDIRECT --to-ports 80
";
const PRED_V6: &str = "*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p ipv6-icmp -j ACCEPT
-A INPUT -p tcp -m multiport --dports 80,18080 -j ACCEPT
COMMIT
";

/// Listens on TCP `port` at `address` in `ns` (IPv6-only when `v6only`), answering `hi`.
fn serve_at(ns: &Netns, address: IpAddr, port: u16, v6only: bool) {
    let listener = in_ns(&ns.name, || {
        use rustix::net::{bind, listen, socket, sockopt, AddressFamily, SocketType};
        let family = if address.is_ipv6() {
            AddressFamily::INET6
        } else {
            AddressFamily::INET
        };
        let fd = socket(family, SocketType::STREAM, None).unwrap();
        if address.is_ipv6() {
            sockopt::set_ipv6_v6only(&fd, v6only).unwrap();
        }
        sockopt::set_socket_reuseaddr(&fd, true).unwrap();
        bind(&fd, &std::net::SocketAddr::new(address, port)).unwrap();
        listen(&fd, 16).unwrap();
        TcpListener::from(fd)
    });
    std::thread::spawn(move || {
        for mut c in listener.incoming().flatten() {
            let _ = c.write_all(b"hi\n");
        }
    });
}

/// A client: where it is, and the node's address it talks to.
struct Client<'a> {
    who: &'static str,
    ns: &'a Netns,
    saddr: Option<IpAddr>,
    daddrs: &'static [&'static str],
}

fn clients(lab: &Lab) -> Vec<Client<'_>> {
    vec![
        Client {
            who: "outside v4",
            ns: &lab.outside,
            saddr: Some("192.0.2.2".parse().unwrap()),
            daddrs: &["192.0.2.1"],
        },
        Client {
            who: "outside v6",
            ns: &lab.outside,
            saddr: Some("2001:db8:1::2".parse().unwrap()),
            daddrs: &["2001:db8:1::1"],
        },
        Client {
            who: "private",
            ns: &lab.private,
            saddr: Some("10.77.0.2".parse().unwrap()),
            daddrs: &["10.77.0.1"],
        },
        // Loopback, either family: reached when one of them is.
        Client {
            who: "loopback",
            ns: &lab.node,
            saddr: None,
            daddrs: &["127.0.0.1", "::1"],
        },
    ]
}

/// What the preview says a client finds at a port, from one side (`now` or `after`) of its
/// entry.
fn said(reach: &Value, client: &Client<'_>) -> bool {
    let Some(saddr) = client.saddr else {
        return reach["loopback"] == true;
    };
    let who = if saddr.is_ipv4() {
        &reach["ipv4"]
    } else {
        &reach["ipv6"]
    };
    match who["from"].as_str().unwrap() {
        "anywhere" => true,
        "closed" => false,
        "only" => who["ranges"].as_array().unwrap().iter().any(|r| {
            r.as_str()
                .unwrap()
                .parse::<ipnet::IpNet>()
                .unwrap()
                .contains(&saddr)
        }),
        other => panic!("the preview is {other} about {reach}"),
    }
}

/// Every (client, port) probe at once: (client, port/proto, reached).
pub(crate) fn probe_all(lab: &Lab, ports: &[(u16, &str)]) -> BTreeSet<(String, String, bool)> {
    let clients = clients(lab);
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for c in &clients {
            for (port, proto) in ports {
                handles.push(s.spawn(move || {
                    let reached = c.daddrs.iter().any(|addr| match *proto {
                        "udp" => Lab::reaches_udp(c.ns, addr, *port),
                        _ => Lab::reaches(c.ns, addr, *port),
                    });
                    (c.who.to_owned(), format!("{port}/{proto}"), reached)
                }));
            }
        }
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// What the preview says every client finds at every listed port, on `side`; unlisted ports
/// answer no one outside (loopback may reach a socket bound there only: see
/// [`outside_only`]).
fn predicted(
    lab: &Lab,
    preview: &Value,
    side: &str,
    unlisted: &[(u16, &str)],
) -> BTreeSet<(String, String, bool)> {
    let mut out = BTreeSet::new();
    for c in clients(lab) {
        for p in preview["ports"].as_array().unwrap() {
            let key = format!("{}/{}", p["port"], p["protocol"].as_str().unwrap());
            out.insert((c.who.to_owned(), key, said(&p[side], &c)));
        }
        for (port, proto) in unlisted {
            if c.saddr.is_some() {
                out.insert((c.who.to_owned(), format!("{port}/{proto}"), false));
            }
        }
    }
    out
}

/// The probes, without loopback's at unlisted ports (a socket on loopback only is not
/// published, and the flip leaves loopback alone).
fn outside_only(
    probes: &BTreeSet<(String, String, bool)>,
    unlisted: &[(u16, &str)],
) -> BTreeSet<(String, String, bool)> {
    probes
        .iter()
        .filter(|(who, port, _)| {
            !(who == "loopback"
                && unlisted
                    .iter()
                    .any(|(p, proto)| *port == format!("{p}/{proto}")))
        })
        .cloned()
        .collect()
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    Nftables,
    IptablesNft,
}

fn load(lab: &Lab, kind: Kind) {
    match kind {
        Kind::Nftables => {
            lab.nft(&format!("flush ruleset\n{PRED_NFT}"));
            lab.restore(
                "iptables-nft-restore",
                &DOCKER_V4
                    .replace("{POLICY}", "ACCEPT")
                    .replace("{INPUT}", "")
                    .replace("{FORWARD}", "")
                    .replace("{NAT}", ""),
            );
        }
        Kind::IptablesNft => {
            lab.nft("flush ruleset\n");
            lab.restore(
                "iptables-nft-restore",
                &DOCKER_V4
                    .replace("{POLICY}", "DROP")
                    .replace("{INPUT}", PRED_INPUT_V4)
                    .replace("{FORWARD}", PRED_FORWARD_V4)
                    .replace("{NAT}", PRED_NAT_V4),
            );
            lab.restore("ip6tables-nft-restore", PRED_V6);
        }
    }
}

/// The predecessor in nft's own tables beside Docker's iptables-nft chains.
#[test]
fn flip_preview_is_what_the_flip_does_beside_nftables() {
    if !have_root_tools(&["ip", "nft", "iptables-nft-restore"]) {
        return;
    }
    story(Kind::Nftables);
}

/// The predecessor written with iptables-nft into the tables Docker shares (INPUT, FORWARD,
/// PREROUTING), and its own IPv6 table.
#[test]
fn flip_preview_is_what_the_flip_does_beside_iptables_nft() {
    if !have_root_tools(&["ip", "nft", "iptables-nft-restore", "ip6tables-nft-restore"]) {
        return;
    }
    story(Kind::IptablesNft);
}

/// The control node's test bed: the predecessor's rules of `kind` loaded, and what listens —
/// sockets dual-stack (80, 4222, 5432, 8022), IPv4-only (15672), IPv6-only (the runtime's proxy
/// at 18080), loopback-only (9999), UDP (51820), and the container's 5432, 5000 and 8080.
pub(crate) fn control_node(kind: Kind) -> Lab {
    let lab = Lab::new();
    load(&lab, kind);
    let any6: IpAddr = "::".parse().unwrap();
    for port in [80, 4222, 5432, 8022] {
        Lab::serve(&lab.node, port);
    }
    serve_at(&lab.node, "0.0.0.0".parse().unwrap(), 15672, false);
    // The runtime's proxy for IPv6 clients of the published container.
    serve_at(&lab.node, any6, 18080, true);
    serve_at(&lab.node, "127.0.0.1".parse().unwrap(), 9999, false);
    Lab::serve_udp(&lab.node, 51820);
    for port in [5432, 5000, 8080] {
        Lab::serve(&lab.ctr, port);
    }
    lab
}

fn story(kind: Kind) {
    let lab = control_node(kind);

    let f = Fixture::in_netns(&lab.node.name);
    f.write_decl("node.ncl", DECLARATION);
    f.ok(&["adopt", f.decl("node.ncl").to_str().unwrap()]);

    // The machine's own Docker engine (other tests' containers) is not this node's.
    let preview_of = |args: &[&str]| {
        let mut command = f.command(args);
        command.env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
        let ran = crate::support::run(command);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        ran.stdout
    };
    let ran = preview_of(&["flip", "--preview", "--json"]);
    let preview: Value = serde_json::from_str(ran.lines().last().unwrap()).unwrap();
    let listed: Vec<(u16, String)> = preview["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["port"].as_u64().unwrap() as u16,
                p["protocol"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let tcp = |ports: &[u16]| -> Vec<(u16, String)> {
        ports.iter().map(|p| (*p, "tcp".to_owned())).collect()
    };
    let mut expected = tcp(&[80, 4222, 5001, 5432, 8022, 8081, 15432, 15672, 18080]);
    expected.push((51820, "udp".to_owned()));
    expected.sort();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(
        sorted, expected,
        "every published port, the predecessor's own DNATs and redirect included: {preview:#}"
    );
    // What publishes the predecessor's store: its own DNAT, named with its table.
    let store = preview["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == 15432)
        .unwrap();
    let nat_table = match kind {
        Kind::Nftables => "ip natrt",
        Kind::IptablesNft => "ip nat",
    };
    assert_eq!(store["held_by"][0]["table"], nat_table, "{store:#}");
    assert_eq!(store["held_by"][0]["to"], "172.30.0.2:5432", "{store:#}");
    assert_eq!(store["change"], "closes", "{store:#}");

    let mut ports: Vec<(u16, &str)> = listed
        .iter()
        .map(|(p, proto)| (*p, proto.as_str()))
        .collect();
    let unlisted = [(9999, "tcp"), (6000, "tcp")];
    ports.extend(unlisted);

    let before = probe_all(&lab, &ports);
    assert_eq!(
        outside_only(&before, &unlisted),
        predicted(&lab, &preview, "now", &unlisted),
        "what the preview says is reachable now is what is: {preview:#}"
    );
    assert!(
        before.contains(&("loopback".into(), "9999/tcp".into(), true)),
        "the loopback-only socket answers loopback"
    );

    // The text says the same, one verdict per port.
    let text = preview_of(&["flip", "--preview"]);
    for line in [
        "80/tcp  now reachable from anywhere  ->  after closed (from loopback only)   [the flip closes it]",
        "15432/tcp  now reachable from anywhere over IPv4, closed over IPv6 (not from loopback)  ->  after closed   [the flip closes it]",
        "5432/tcp  now reachable from 10.77.0.0/24 only over IPv4, closed over IPv6  ->  after reachable from 10.77.0.0/24 only over IPv4, closed over IPv6   [stays]",
        "18080/tcp  now reachable from anywhere  ->  after reachable from anywhere over IPv4, closed over IPv6   [the flip narrows it]",
        "8022/tcp  now reachable from 192.0.2.0/24 only over IPv4, closed over IPv6  ->  after closed (from loopback only)   [the flip closes it]",
    ] {
        assert!(text.contains(line), "{line}\nnot in:\n{text}");
    }
    assert!(
        text.contains("4 port(s) reachable now would be closed, 1 narrowed, 0 opened wider; 5 stay as they are; nothing was changed"),
        "{text}"
    );

    f.ok(&["flip", "--force"]);
    let after = probe_all(&lab, &ports);
    assert_eq!(
        outside_only(&after, &unlisted),
        predicted(&lab, &preview, "after", &unlisted),
        "what the preview said the flip leaves reachable is what is: {preview:#}"
    );
    assert!(
        after.contains(&("loopback".into(), "9999/tcp".into(), true)),
        "loopback is left alone"
    );
}
