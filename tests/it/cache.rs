//! The evaluation cache: an unchanged build is answered from it; any change to a file the
//! evaluation read (an import, a text import) or to the record misses it.

use std::path::Path;

use crate::support::{build_json, copy_tree, repo};

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.contains(from),
        "{} does not contain {from:?}",
        path.display()
    );
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// A rebuild of unchanged inputs is a cache hit with the same id; editing an imported catalogue
/// file, or a file imported as text, misses and gives a new id.
#[test]
fn changed_import_misses_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    copy_tree(&repo().join("examples"), &dir.path().join("examples"));
    std::fs::create_dir(dir.path().join(".git")).unwrap(); // a checkout: the imports' tree
    let node = dir.path().join("examples/nodes/fresh-node.ncl");

    let cold = build_json(state.path(), &node, None);
    assert_eq!(cold["cached"], false);
    let warm = build_json(state.path(), &node, None);
    assert_eq!(warm["cached"], true);
    assert_eq!(warm["id"], cold["id"]);

    // An imported Nickel file, two imports away from the declaration.
    edit(
        &dir.path().join("examples/catalogue/apps.ncl"),
        "gitea/gitea:1.22",
        "gitea/gitea:1.23",
    );
    let after_import = build_json(state.path(), &node, None);
    assert_eq!(after_import["cached"], false);
    assert_ne!(after_import["id"], cold["id"]);

    // A file imported as text.
    edit(
        &dir.path().join("examples/catalogue/files/ssh/10-mesh.conf"),
        "X11Forwarding no",
        "X11Forwarding yes",
    );
    let after_text = build_json(state.path(), &node, None);
    assert_eq!(after_text["cached"], false);
    assert_ne!(after_text["id"], after_import["id"]);
    assert_eq!(build_json(state.path(), &node, None)["cached"], true);
}

/// A different record is a different key.
#[test]
fn changed_record_misses_the_cache() {
    let state = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let nodes = repo().join("examples/nodes");
    let node = nodes.join("worker-1.ncl");
    let first = build_json(
        state.path(),
        &node,
        Some(&nodes.join("worker-1.record.json")),
    );
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(nodes.join("worker-1.record.json")).unwrap())
            .unwrap();
    record["taken"] = serde_json::json!(["ssh"]);
    let changed = dir.path().join("record.json");
    std::fs::write(&changed, serde_json::to_vec(&record).unwrap()).unwrap();
    let second = build_json(state.path(), &node, Some(&changed));
    assert_eq!(second["cached"], false);
    assert_ne!(second["id"], first["id"]);
}
