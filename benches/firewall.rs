//! `sudo cargo bench --bench firewall`: putting the guard and 100 openings in force through each
//! driver, against loading the equivalent rules with one `nft -f` of a text file (the floor a
//! user knows), and the cost of a no-op `mesh reconcile`. Everything runs inside a network
//! namespace the bench creates and removes (it re-runs itself there, so nft is called directly,
//! as on a node); medians of several runs.
//!
//! Targets (issue 4): nftables native within 1.5x of `nft -f`; a no-op reconcile under 20 ms.

use std::collections::BTreeSet;
mod common;
use common::{feed, median, ms};

use std::process::Command;
use std::time::Instant;

use mesh_lib::firewall::{guard_ruleset, opening_comment};
use mesh_lib::model::{Opening, Port, PrivateNetwork, Protocol, Settings, Source, TrafficPath};
use mesh_reach::firewall::{Firewall, Kernel, Want};

const NFT_PREDECESSOR: &str = "flush ruleset
table inet pred {
  chain input { type filter hook input priority 0; policy drop; ct state established,related accept; tcp dport 80 accept; }
  chain forward { type filter hook forward priority 0; policy drop; ct state established,related accept; }
}
";

const IPT_PREDECESSOR: &str = "*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT
COMMIT
";

fn settings() -> Settings {
    let mut ports: std::collections::BTreeMap<String, Port> = [
        ("store", 5432),
        ("bus", 4222),
        ("registry", 5000),
        ("broker_management", 15672),
        ("hub", 51820),
    ]
    .into_iter()
    .map(|(n, p)| (n.to_string(), Port::new(p).unwrap()))
    .collect();
    for i in 0..100 {
        ports.insert(format!("app{i}"), Port::new(20000 + i).unwrap());
    }
    Settings {
        ports,
        private_network: PrivateNetwork {
            range: "10.77.0.0/24".parse().unwrap(),
            address: "10.77.0.1".parse().unwrap(),
            hub: false,
        },
    }
}

fn openings() -> Vec<Opening> {
    (0..100)
        .map(|i| Opening {
            module: format!("app{i}"),
            setting: format!("app{i}"),
            port: Port::new(20000 + i).unwrap(),
            protocol: Protocol::Tcp,
            paths: BTreeSet::from([TrafficPath::Incoming, TrafficPath::Forwarded]),
            from: Source::Anywhere,
        })
        .collect()
}

/// The same rules as a text file for `nft -f`: the guard table and 200 inserted rules.
fn reference_text(settings: &Settings, openings: &[Opening]) -> String {
    let mut text = mesh_lib::firewall::render_nft(&guard_ruleset(settings));
    for o in openings {
        let c = opening_comment(o);
        text.push_str(&format!(
            "insert rule inet pred input tcp dport {} accept comment \"{c}\"\n",
            o.port
        ));
        text.push_str(&format!("insert rule inet pred forward meta l4proto tcp ct original proto-dst {} accept comment \"{c}\"\n", o.port));
    }
    text
}

fn main() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("the firewall bench needs root (network namespaces)");
        return;
    }
    // The bench re-runs itself inside a namespace of its own, so that every nft call — the
    // reference's and the mesh's — runs there directly, as on a node, without `ip netns exec`.
    if std::env::var_os("MESH_BENCH_NETNS").is_none() {
        let ns = format!("mesh-bench-fw-{}", std::process::id());
        let netns = common::Netns::add(ns.clone());
        let me = std::env::current_exe().unwrap();
        let status = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(me)
            .env("MESH_BENCH_NETNS", &ns)
            .status();
        drop(netns);
        assert!(status.unwrap().success());
        return;
    }
    let (settings, openings) = (settings(), openings());
    let guard = guard_ruleset(&settings);
    let nft = Kernel::new(None);
    let want = Want {
        guard: &guard,
        base: None,
        settings: &settings,
        openings: &openings,
        remove_tables: &[],
        empty_inputs: &[],
        restore: None,
        daemon: None,
    };
    let runs = 9;

    let reference = median(
        (0..runs)
            .map(|_| {
                feed(&["nft", "-f", "-"], NFT_PREDECESSOR);
                let text = reference_text(&settings, &openings);
                let t = Instant::now();
                feed(&["nft", "-f", "-"], &text);
                t.elapsed()
            })
            .collect(),
    );
    // The native driver as a node runs it (libnftables in process) and as it falls back when
    // the library cannot be opened (the `nft` command).
    let command = Kernel::with_command(None);
    assert!(nft.in_process(), "libnftables.so.1 cannot be opened here");
    let first = |driver: &Kernel| {
        median(
            (0..runs)
                .map(|_| {
                    feed(&["nft", "-f", "-"], NFT_PREDECESSOR);
                    let t = Instant::now();
                    let done = driver.converge(&want).unwrap();
                    let d = t.elapsed();
                    assert_eq!(done.inserted, 200);
                    d
                })
                .collect(),
        )
    };
    let noop = |driver: &Kernel| {
        median(
            (0..runs)
                .map(|_| {
                    let t = Instant::now();
                    assert_eq!(driver.converge(&want).unwrap().inserted, 0);
                    t.elapsed()
                })
                .collect(),
        )
    };
    let native = first(&nft);
    let noop_native = noop(&nft);
    let native_command = first(&command);
    let noop_command = noop(&command);
    let iptables = median(
        (0..runs)
            .map(|_| {
                feed(&["nft", "flush", "ruleset"], "");
                feed(&["iptables-nft-restore"], IPT_PREDECESSOR);
                let t = Instant::now();
                let done = nft.converge(&want).unwrap();
                let d = t.elapsed();
                assert_eq!(done.inserted, 200);
                d
            })
            .collect(),
    );
    // With the iptables-nft predecessor's rules and the openings in force.
    let noop_iptables = noop(&nft);
    feed(&["nft", "flush", "ruleset"], "");

    // A no-op `mesh reconcile` of a node adopted with those 100 openings, as a user runs it.
    let dir = tempfile::tempdir().unwrap();
    let modules: String = (0..100)
        .map(|i| format!("{{ name = \"app{i}\", config = fun s => {{ openings = [{{ port = s.ports.app{i} }}] }} }},"))
        .collect();
    let ports: String = (0..100)
        .map(|i| format!("app{i} = {}, ", 20000 + i))
        .collect();
    let decl = dir.path().join("node.ncl");
    std::fs::write(
        &decl,
        format!("let mesh = import \"mesh.ncl\" in\nmesh.node {{ name = \"fw\", settings = {{ ports = {{ store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820, {ports} }}, private_network = {{ range = \"10.77.0.0/24\", address = \"10.77.0.1\" }} }}, modules = [{modules}] }}\n"),
    )
    .unwrap();
    feed(&["nft", "-f", "-"], NFT_PREDECESSOR);
    // The bench runs inside its namespace: no MESH_NETNS.
    let mesh = |args: &[&str]| common::mesh(&dir.path().join("state"), dir.path(), None, args);
    mesh(&["adopt", decl.to_str().unwrap()]);
    let noop_cli = median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                mesh(&["reconcile"]);
                t.elapsed()
            })
            .collect(),
    );

    println!(
        "\nthe guard and 100 openings (200 rules: incoming and forwarded), in a fresh namespace"
    );
    println!("{:<44} {:>10} {:>10}", "", "time", "ratio");
    println!(
        "{:<44} {:>10} {:>10}",
        "nft -f of the same rules as text (reference)",
        ms(reference),
        "1.00x"
    );
    let row = |name: &str, d: std::time::Duration| {
        println!(
            "{:<44} {:>10} {:>9.2}x",
            name,
            ms(d),
            d.as_secs_f64() / reference.as_secs_f64()
        )
    };
    row("mesh, nftables native (libnftables)", native);
    row("mesh, nftables native (nft command)", native_command);
    row("mesh, iptables-nft driver", iptables);
    println!("\nno-op reconcile (everything already in force)");
    println!(
        "  in process, libnftables (list + compare): {:>10}",
        ms(noop_native)
    );
    println!(
        "  in process, nft command (list + compare): {:>10}",
        ms(noop_command)
    );
    println!(
        "  in process, iptables-nft predecessor:     {:>10}",
        ms(noop_iptables)
    );
    println!(
        "  `mesh reconcile`, whole command:          {:>10}",
        ms(noop_cli)
    );
    println!("\ntargets: nftables native <= 1.5x nft -f; no-op reconcile < 20 ms");
}
