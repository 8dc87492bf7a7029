//! The rendered guard and base rulesets: snapshots of the nft text, and `nft -c` (check mode, in a
//! throw-away network namespace) accepting the JSON the generation carries and the text.

use std::io::Write;

use crate::support::{build_json, have_root_tools, mesh, repo, run, Netns};

fn generation(node: &str, record: Option<&str>) -> serde_json::Value {
    let state = tempfile::tempdir().unwrap();
    let nodes = repo().join("examples/nodes");
    let id = build_json(
        state.path(),
        &nodes.join(format!("{node}.ncl")),
        record.map(|r| nodes.join(r)).as_deref(),
    )["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut c = mesh(state.path());
    c.arg("show").arg(&id).arg("--json");
    let ran = run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    serde_json::from_str(&ran.stdout).unwrap()
}

fn ruleset(v: &serde_json::Value) -> nftables::schema::Nftables<'static> {
    serde_json::from_value(v.clone()).unwrap()
}

/// The guard of the control-node and the base ruleset of the fresh node, as nft text.
#[test]
fn rendered_rulesets_snapshot() {
    let control = generation("control-node", Some("control-node.record.json"));
    insta::assert_snapshot!(
        "control_node_guard",
        mesh_lib::firewall::render_nft(&ruleset(&control["firewall"]["guard"]))
    );
    assert!(
        control["firewall"]["base"].is_null(),
        "no base ruleset on an adopted node"
    );
    let fresh = generation("fresh-node", None);
    insta::assert_snapshot!(
        "fresh_node_base",
        mesh_lib::firewall::render_nft(&ruleset(&fresh["firewall"]["base"]))
    );
}

fn nft_check(ns: &Netns, args: &[&str], input: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules");
    std::fs::File::create(&file)
        .unwrap()
        .write_all(input)
        .unwrap();
    let mut full: Vec<&str> = vec!["nft"];
    full.extend_from_slice(args);
    full.push(file.to_str().unwrap());
    let out = ns.exec(&full).output().unwrap();
    assert!(
        out.status.success(),
        "nft {args:?} rejected:\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(input)
    );
}

/// `nft -c` accepts the guard and the base ruleset, as JSON and as text, and applying the JSON in
/// the namespace lists back the same text.
#[test]
fn nft_accepts_the_rendered_rulesets() {
    if !have_root_tools(&["nft", "ip"]) {
        return;
    }
    let ns = Netns::new("nftc");
    let fresh = generation("fresh-node", None);
    for which in ["guard", "base"] {
        let v = &fresh["firewall"][which];
        nft_check(&ns, &["-j", "-c", "-f"], &serde_json::to_vec(v).unwrap());
        let text = mesh_lib::firewall::render_nft(&ruleset(v));
        nft_check(&ns, &["-c", "-f"], text.as_bytes());
    }
    // Applied for real inside the namespace, the kernel lists the guard as we render it.
    nft_check(
        &ns,
        &["-j", "-f"],
        &serde_json::to_vec(&fresh["firewall"]["guard"]).unwrap(),
    );
    let listed = ns
        .exec(&["nft", "list", "table", "inet", "mesh_guard"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    let rendered = mesh_lib::firewall::render_nft(&ruleset(&fresh["firewall"]["guard"]));
    // The same text, but for indentation.
    let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(norm(&listed), norm(&rendered));
}

/// nft takes a rule comment of 128 bytes at most, and the mesh knows its rules by their
/// comments: a module and a setting of 63 characters each, opened from a range, are loaded by
/// the switch, and a reconcile right after finds nothing to repair.
#[test]
fn the_longest_names_fit_nfts_comments() {
    if !have_root_tools(&["ip", "nft"]) {
        return;
    }
    let f = crate::node_fixture::Fixture::new();
    let (module, setting) = ("m".repeat(63), "s".repeat(63));
    f.write_decl(
        "long.ncl",
        &format!(
            r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "n1",
  settings = {{
    ports = {{ store = 5432, bus = 4222, registry = 5001, broker_management = 15672, hub = 51820, {setting} = 8080 }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.1" }},
  }},
  modules = [
    {{ name = "{module}", config = fun s => {{ openings = [{{ port = s.ports.{setting}, paths = ['incoming], from = "203.0.113.128/25" }}] }} }},
  ],
}}
"#
        ),
    );
    f.ok(&["switch", f.decl("long.ncl").to_str().unwrap()]);
    let listed = std::process::Command::new("ip")
        .args(["netns", "exec", &f.netns, "nft", "list", "ruleset"])
        .output()
        .unwrap();
    let rules = String::from_utf8_lossy(&listed.stdout);
    let ours: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.split_once("comment \"mesh: ").map(|(_, c)| c))
        .filter(|c| c.starts_with(&module))
        .collect();
    assert!(!ours.is_empty(), "the opening's rule is loaded:\n{rules}");
    for c in &ours {
        assert!(c.len() < 128, "{c}");
    }
    let repaired = f.ok(&["reconcile", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&repaired.stdout).unwrap();
    let converged = &v["converged"];
    assert_eq!(converged["inserted"], 0, "{v}");
    assert_eq!(converged["removed"], 0, "{v}");
    assert_eq!(converged["guard"], false, "{v}");
}
