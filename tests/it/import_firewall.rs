//! `mesh import` of the firewall in force, on flip_preview's test bed (the control-node's: the
//! predecessor's default-deny nft table with its own DNAT and redirect, a container runtime's
//! iptables-nft chains publishing a container, sockets dual-stack, IPv4-only, IPv6-only and
//! loopback-only): the import reads only (the ruleset is byte-identical after it), writes an
//! opening for every port someone outside reaches, from whom it is reached; `mesh import
//! --check` finds every port equal — who reaches it now is who would after the flip; and after
//! `mesh adopt` and `mesh flip`, real packets find every port exactly as before.

use serde_json::Value;

use crate::flip_preview::{control_node, probe_all, Kind};
use crate::node_fixture::Fixture;
use crate::support::have_root_tools;

/// The predecessor in nft's own tables beside Docker's iptables-nft chains.
#[test]
fn imported_openings_keep_every_port_as_reachable_through_the_flip() {
    if !have_root_tools(&["ip", "nft", "iptables-nft-restore"]) {
        return;
    }
    story(Kind::Nftables);
}

/// The predecessor written with iptables-nft into the tables Docker shares, and its own IPv6
/// table.
#[test]
fn imported_openings_beside_iptables_nft_keep_every_port_through_the_flip() {
    if !have_root_tools(&["ip", "nft", "iptables-nft-restore", "ip6tables-nft-restore"]) {
        return;
    }
    story(Kind::IptablesNft);
}

fn story(kind: Kind) {
    let lab = control_node(kind);
    let ports: Vec<(u16, &str)> = [80, 4222, 5001, 5432, 8022, 8081, 9999, 15432, 15672, 18080]
        .into_iter()
        .map(|p| (p, "tcp"))
        .chain([(51820, "udp")])
        .collect();
    let before = probe_all(&lab, &ports);
    // The test bed answers as the predecessor's rules say (the bed itself, checked).
    for (who, port, reached) in [
        ("outside v4", "80/tcp", true),
        ("outside v4", "8022/tcp", true),
        ("outside v4", "15432/tcp", true),
        ("outside v4", "5432/tcp", false),
        ("private", "5432/tcp", true),
        ("outside v4", "4222/tcp", false),
    ] {
        assert!(
            before.contains(&(who.to_owned(), port.to_owned(), reached)),
            "{who} {port} {reached}: {before:?}"
        );
    }

    let f = Fixture::in_netns(&lab.node.name);
    let ruleset = || {
        let out = lab.node.exec(&["nft", "list", "ruleset"]).output().unwrap();
        assert!(out.status.success());
        out.stdout
    };
    let ruleset_before = ruleset();
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().to_str().unwrap();
    // The machine's own Docker engine (other tests' containers) is not this node's.
    let mesh = |args: &[&str]| {
        let mut c = f.command(args);
        c.env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
        crate::support::run(c)
    };
    let imported = mesh(&[
        "import",
        "--out",
        out_dir,
        "--node",
        "n1",
        "--no-containers",
        "--json",
    ]);
    assert_eq!(imported.code, 0, "{}{}", imported.stdout, imported.stderr);
    assert_eq!(ruleset(), ruleset_before, "the import changed the ruleset");
    let v: Value = serde_json::from_str(imported.last_line()).unwrap();
    assert_eq!(v["modules"], serde_json::json!(["firewall"]), "{v:#}");
    let module = std::fs::read_to_string(out.path().join("catalogue/firewall.ncl")).unwrap();
    // The predecessor's range-only port is opened to that range only, its private store to the
    // private network, its DNAT'd store on the forwarded path; closed ports get nothing.
    let node = std::fs::read_to_string(out.path().join("nodes/n1.ncl")).unwrap();
    let setting = |port: u16| -> String {
        node.lines()
            .find_map(|l| {
                let (name, value) = l.trim().trim_end_matches(',').split_once(" = ")?;
                (value == port.to_string()).then(|| name.to_owned())
            })
            .unwrap_or_else(|| panic!("no setting for {port} in:\n{node}"))
    };
    for line in [
        format!(
            "{{ port = s.ports.{}, paths = ['incoming], from = \"192.0.2.0/24\" }},",
            setting(8022)
        ),
        format!(
            "{{ port = s.ports.{}, paths = ['incoming], from = \"10.77.0.0/24\" }},",
            setting(5432)
        ),
        format!(
            "{{ port = s.ports.{}, paths = ['forwarded], from = \"anywhere\" }},",
            setting(15432)
        ),
    ] {
        assert!(module.contains(&line), "{line}\nnot in:\n{module}");
    }
    assert!(
        !module.contains("4222/tcp") && !module.contains("9999"),
        "a port no one outside reaches gets no opening:\n{module}"
    );
    // The foundation's defaults are moved past the numbers in use here.
    assert!(node.contains("bus = 4223,"), "{node}");
    assert!(node.contains("store = 5433,"), "{node}");

    let decl = out.path().join("nodes/n1.ncl");
    let decl = decl.to_str().unwrap();
    let check = |when: &str| {
        let ran = mesh(&["import", "--check", decl, "--json"]);
        let v: Value = serde_json::from_str(ran.last_line())
            .unwrap_or_else(|_| panic!("{when}: {}{}", ran.stdout, ran.stderr));
        assert_eq!(ran.code, 0, "{when}: {v:#}\n{}", ran.stderr);
        let openings: Vec<&Value> = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["kind"] == "opening")
            .collect();
        assert!(
            openings.len() >= 6 && openings.iter().all(|i| i["verdict"] == "equal"),
            "{when}: {v:#}"
        );
    };
    check("before adoption");
    assert_eq!(ruleset(), ruleset_before, "the check changed the ruleset");

    // A declaration without the range-only opening: the check names the port it would close.
    let narrowed = module.replace("from = \"192.0.2.0/24\"", "from = \"198.51.100.0/24\"");
    std::fs::write(out.path().join("catalogue/firewall.ncl"), &narrowed).unwrap();
    let ran = mesh(&["import", "--check", decl]);
    assert_eq!(ran.code, 2, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout
            .contains("differs      opening 8022/tcp (module firewall)")
            && ran.stdout.contains("reachable after the flip: declared"),
        "{}",
        ran.stdout
    );
    std::fs::write(out.path().join("catalogue/firewall.ncl"), &module).unwrap();

    f.ok(&["adopt", decl]);
    check("adopted");
    f.ok(&["flip", "--force"]);
    let after = probe_all(&lab, &ports);
    assert_eq!(
        after, before,
        "after the flip every port answers whom it answered before"
    );
}
