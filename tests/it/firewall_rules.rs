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
