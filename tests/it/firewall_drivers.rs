//! The nftables driver speaks nft two ways: through libnftables in process (what a node uses)
//! and through the `nft` command (its fallback where the library cannot be opened). Both must
//! leave the kernel with the same ruleset, converge idempotently, and fail with nft's own
//! message, changing nothing.

use std::collections::BTreeSet;

use mesh_lib::firewall::{base_ruleset, guard_ruleset};
use mesh_lib::model::{Opening, Port, PrivateNetwork, Protocol, Settings, Source, TrafficPath};
use mesh_reach::firewall::{Dump, Firewall, Kernel, Want};

use crate::support::{feed, have_root_tools, Netns};

const PREDECESSOR: &str = "flush ruleset
table inet pred {
  chain input { type filter hook input priority 0; policy drop; tcp dport 80 accept; }
  chain forward { type filter hook forward priority 0; policy drop; }
}
";

fn settings() -> Settings {
    Settings {
        ports: [("bus", 4222), ("registry", 5000), ("hub", 51820)]
            .into_iter()
            .map(|(n, p)| (n.to_owned(), Port::new(p).unwrap()))
            .collect(),
        private_network: PrivateNetwork {
            range: "10.77.0.0/24".parse().unwrap(),
            address: "10.77.0.1".parse().unwrap(),
            hub: false,
        },
    }
}

fn openings() -> Vec<Opening> {
    let both = BTreeSet::from([TrafficPath::Incoming, TrafficPath::Forwarded]);
    vec![
        Opening {
            module: "bus".into(),
            setting: "bus".into(),
            port: Port::new(4222).unwrap(),
            protocol: Protocol::Tcp,
            paths: both.clone(),
            from: Source::Anywhere,
        },
        Opening {
            module: "registry".into(),
            setting: "registry".into(),
            port: Port::new(5000).unwrap(),
            protocol: Protocol::Tcp,
            paths: both,
            from: Source::Private,
        },
        Opening {
            module: "hub".into(),
            setting: "hub".into(),
            port: Port::new(51820).unwrap(),
            protocol: Protocol::Udp,
            paths: BTreeSet::from([TrafficPath::Incoming]),
            from: Source::Anywhere,
        },
    ]
}

/// Runs `with` on what an adopted node with [`openings`] wants.
fn adopted<T>(with: impl FnOnce(&Want<'_>) -> T) -> T {
    adopted_restoring(None, with)
}

/// Runs `with` on what an adopted node with [`openings`] wants, its found firewall recorded as
/// `found`.
fn adopted_restoring<T>(found: Option<&Dump>, with: impl FnOnce(&Want<'_>) -> T) -> T {
    let (settings, openings) = (settings(), openings());
    let guard = guard_ruleset(&settings);
    with(&Want {
        guard: &guard,
        base: None,
        settings: &settings,
        openings: &openings,
        remove_tables: &[],
        empty_inputs: &[],
        restore: found,
        daemon: None,
    })
}

/// Runs `with` on what a managed node with [`openings`] wants.
fn managed<T>(with: impl FnOnce(&Want<'_>) -> T) -> T {
    let (settings, openings) = (settings(), openings());
    let guard = guard_ruleset(&settings);
    let base = base_ruleset(&settings, &openings);
    with(&Want {
        guard: &guard,
        base: Some(&base),
        settings: &settings,
        openings: &openings,
        remove_tables: &[],
        empty_inputs: &[],
        restore: None,
        daemon: None,
    })
}

fn nft(ns: &Netns, args: &[&str], input: &str) -> String {
    let mut full = vec!["nft"];
    full.extend_from_slice(args);
    feed(ns.exec(&full), input, &format!("nft {args:?}"))
}

/// What a converge through `driver` leaves in the kernel, starting from the predecessor alone.
fn converged(ns: &Netns, driver: &Kernel) -> String {
    nft(ns, &["-f", "-"], PREDECESSOR);
    let (done, again) = adopted(|want| {
        (
            driver.converge(want).unwrap(),
            driver.converge(want).unwrap(),
        )
    });
    // bus and registry on both paths of both chains, hub on the incoming chain only.
    assert_eq!((done.guard, done.inserted, done.removed), (true, 5, 0));
    assert_eq!(
        (again.guard, again.inserted, again.removed),
        (false, 0, 0),
        "a second converge changes nothing"
    );
    nft(ns, &["list", "ruleset"], "")
}

#[test]
fn library_and_command_put_the_same_ruleset_in_force() {
    if !have_root_tools(&["nft", "ip"]) {
        return;
    }
    let ns = Netns::new("drivers");
    let library = Kernel::new(Some(ns.name.clone()));
    assert!(
        library.in_process(),
        "libnftables.so.1 (package libnftables1, a dependency of nftables) can be opened"
    );
    let command = Kernel::with_command(Some(ns.name.clone()));
    assert!(!command.in_process());

    let by_library = converged(&ns, &library);
    let by_command = converged(&ns, &command);
    assert_eq!(by_library, by_command);
    assert!(by_library.contains("comment \"mesh: hub hub 51820/udp from anywhere\""));
    assert!(by_library.contains("table inet mesh_guard"));

    // nft refuses a found table loaded back across the flip: both report nft's own message,
    // and the ruleset is as it was (the base ruleset still in force).
    let broken = Dump {
        tables: [(
            "inet broken".to_owned(),
            "table inet broken { chain c { type filter hook nowhere priority 0; } }\n".to_owned(),
        )]
        .into(),
        ..Dump::default()
    };
    for driver in [&library, &command] {
        managed(|want| driver.converge(want).unwrap());
        let flipped = nft(&ns, &["list", "ruleset"], "");
        assert!(flipped.contains("table inet mesh_base"));
        let err = adopted_restoring(Some(&broken), |want| driver.converge(want))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Error:") && err.contains("nowhere"),
            "nft's own message: {err}"
        );
        assert_eq!(nft(&ns, &["list", "ruleset"], ""), flipped);
    }

    // A namespace that does not exist is an error, not the machine's own ruleset.
    let missing = Kernel::new(Some(format!("{}-gone", ns.name)));
    let err = missing.ruleset().unwrap_err().to_string();
    assert!(
        err.starts_with("cannot enter network namespace") && err.contains("-gone"),
        "{err}"
    );
}

/// A predecessor written per address family (`table ip …` and `table ip6 …`, as older scripts
/// do) gets the openings in each: those from the private network (IPv4) only in the IPv4 one.
#[test]
fn openings_go_into_ip_and_ip6_tables() {
    if !have_root_tools(&["nft", "ip"]) {
        return;
    }
    let ns = Netns::new("families");
    nft(
        &ns,
        &["-f", "-"],
        "table ip four {
  chain input { type filter hook input priority 0; policy drop; }
  chain forward { type filter hook forward priority 0; policy drop; }
}
table ip6 six {
  chain input { type filter hook input priority 0; policy drop; }
}
",
    );
    let kernel = Kernel::new(Some(ns.name.clone()));
    let (done, again) = adopted(|want| {
        (
            kernel.converge(want).unwrap(),
            kernel.converge(want).unwrap(),
        )
    });
    // ip: bus, registry, hub incoming + bus, registry forwarded; ip6: bus and hub incoming
    // (the registry is open to the private network, an IPv4 range).
    assert_eq!(done.inserted, 7, "{done:?}");
    assert_eq!(again.inserted, 0);
    let four = nft(&ns, &["list", "table", "ip", "four"], "");
    let six = nft(&ns, &["list", "table", "ip6", "six"], "");
    assert!(
        four.contains("ip saddr 10.77.0.0/24 tcp dport 5000 accept"),
        "{four}"
    );
    assert!(four.contains("ct original proto-dst 4222 accept"), "{four}");
    assert!(
        six.contains("tcp dport 4222 accept") && !six.contains("5000"),
        "{six}"
    );
    assert!(six.contains("udp dport 51820 accept"), "{six}");
}
