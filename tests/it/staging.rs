//! Stage now, apply later, from elsewhere: `mesh deploy --stage` over real OpenSSH servers (see
//! `sshlab.rs`) and `mesh pull --stage` from a real Distribution registry (see
//! `registry_lab.rs`), each node's images fetched by the real Docker engine from a second
//! registry of its own (see `images.rs`), which the tests stop before the switch. A stage from
//! elsewhere is judged as strictly as a switch, changes nothing in force, and leaves the later
//! deploy or pull of the same generation nothing to send or fetch.

use std::path::Path;

use crate::containers::take_turn;
use crate::images::{container, has_image, lab_here, Made, Registry as ImageRegistry};
use crate::node_fixture::snapshot;
use crate::sshlab::{node_decl, Lab, LabNode};
use crate::support::have_root_tools;
use crate::trust::keygen;

/// `node_decl` with a module `app` running one container of `image`, sleeping.
fn with_container(node: &str, motd: &str, name: &str, image: &str) -> String {
    node_decl(node, motd, true).replace(
        "{ name = \"motd\"",
        &format!(
            "{{ name = \"app\", config = fun s => {{ containers = [{{ name = \"{name}\", image = \"{image}\", command = [\"/bin/busybox\", \"sleep\", \"1000\"], stop_timeout = 0 }}] }} }},\n    {{ name = \"motd\""
        ),
    )
}

/// `mesh deploy --json` from the lab's deployer, with `extra`: its exit code and its node's
/// row.
fn deploy(lab: &Lab, extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut args = vec!["deploy", "--json", "--confirm-timeout", "30"];
    args.extend_from_slice(extra);
    let out = lab.mesh(&args);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let row = json["nodes"][0].clone();
    assert!(
        row.is_object(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), row)
}

/// The node's root and state directory, byte for byte with their modes and times, but for the
/// state's lock (each command that takes it writes its pid there).
fn lockless(n: &LabNode) -> impl PartialEq + std::fmt::Debug {
    let lock = n.state().join("lock");
    let mut state = snapshot(&n.state());
    state.retain(|entry| entry.0 != lock.display().to_string());
    (snapshot(&n.root()), state)
}

/// The bytes of a file in the node's state directory (empty: there is none).
fn state_file(n: &LabNode, name: &str) -> Vec<u8> {
    std::fs::read(n.state().join(name)).unwrap_or_default()
}

/// The names in the node's folder of deploy records.
fn deploy_records(n: &LabNode) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = std::fs::read_dir(n.state().join("deploys"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// `mesh status --json` on the node.
fn status(n: &LabNode) -> serde_json::Value {
    let out = n.mesh(&["status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `mesh deploy --stage` is judged before anything is sent: unsigned, or signed by a key the
/// node does not trust, it is refused (exit 2) with the node's root and state byte for byte
/// as they were; an image whose digest its registry does not have refuses it too (exit 2,
/// naming the image) with nothing in force changed and nothing staged. Signed by a trusted
/// key it stages: its objects sent, its image fetched on the node, nothing in force changed
/// (root, generation, container, the node's newest statement), `staged` in the table and in
/// `mesh status`. The later deploy of the same generation — the image registry stopped —
/// sends no object and switches: the container runs from the staged image.
#[test]
fn a_deploy_staged_switches_later_with_the_image_registry_gone() {
    if !lab_here(false) || !have_root_tools(&["ssh-keygen", "ip", "nft", "sshd", "ssh"]) {
        return;
    }
    let _turn = take_turn();
    let mut images = ImageRegistry::start(None);
    let mut made = Made::new("ds");
    let (repository, digest) = made.pushed(&images, "busy", "1", "deploy");
    let image = format!("{repository}:1@{digest}");
    let name = format!("{}-app", made.prefix);

    let lab = Lab::new("stage", 1, |n| node_decl(n, "v0\\n", true));
    let n = &lab.nodes[0];
    let (ci, stranger) = (
        keygen(lab.dir.path(), "ci"),
        keygen(lab.dir.path(), "stranger"),
    );
    n.trust(&ci);
    let by = |key: &Path| {
        [
            "--sign".to_owned(),
            "--key".to_owned(),
            key.display().to_string(),
        ]
    };
    let signed = by(&ci);
    let signed: Vec<&str> = signed.iter().map(String::as_str).collect();
    let (code, row) = deploy(&lab, &signed);
    assert_eq!(
        (code, row["result"].as_str()),
        (Some(0), Some("confirmed")),
        "{row}"
    );
    let v0 = n.current().unwrap();

    // Refused before anything is sent: unsigned, and signed by a key the node does not trust.
    lab.declare("node0", &with_container("node0", "v1\\n", &name, &image));
    let before = lockless(n);
    let strange = by(&stranger);
    let strange: Vec<&str> = strange.iter().map(String::as_str).collect();
    for (extra, why) in [
        (vec!["--stage"], "unsigned"),
        (
            [&["--stage"][..], &strange].concat(),
            "signed by a stranger",
        ),
    ] {
        let (code, row) = deploy(&lab, &extra);
        assert_eq!(
            (code, row["result"].as_str()),
            (Some(2), Some("refused")),
            "{why}: {row}"
        );
        assert_eq!(row["objects_sent"], 0, "{why}: {row}");
        assert!(lockless(n) == before, "{why}: the node changed");
        assert!(
            !has_image(&format!("{repository}@{digest}")),
            "{why}: fetched"
        );
    }

    // An image whose digest its registry does not have: refused, naming it; nothing staged,
    // nothing in force changed, the node's newest statement as it was.
    let missing = format!("{repository}:1@sha256:{}", "0".repeat(64));
    lab.declare("node0", &with_container("node0", "v1\\n", &name, &missing));
    let (root, statement) = (snapshot(&n.root()), state_file(n, "statement.json"));
    let (code, row) = deploy(&lab, &[&["--stage"][..], &signed].concat());
    assert_eq!(
        (code, row["result"].as_str()),
        (Some(2), Some("refused")),
        "{row}"
    );
    assert!(row["reason"].as_str().unwrap().contains(&missing), "{row}");
    assert_eq!(snapshot(&n.root()), root);
    assert_eq!(state_file(n, "statement.json"), statement);
    assert!(!n.state().join("staged.json").exists());
    assert_eq!(n.current().as_deref(), Some(v0.as_str()));

    // Staged: everything on the node, nothing in force changed.
    lab.declare("node0", &with_container("node0", "v1\\n", &name, &image));
    let deploys = deploy_records(n);
    let (code, row) = deploy(&lab, &[&["--stage"][..], &signed].concat());
    assert_eq!(
        (code, row["result"].as_str()),
        (Some(0), Some("staged")),
        "{row}"
    );
    let v1 = row["to"].as_str().unwrap().to_owned();
    assert_ne!(v1, v0);
    assert!(row["objects_sent"].as_u64().unwrap() > 0, "{row}");
    assert_eq!(row["staged"]["id"], v1.as_str(), "{row}");
    assert_eq!(row["staged"]["images"][0]["image"], image.as_str(), "{row}");
    assert!(
        has_image(&format!("{repository}@{digest}")),
        "the image was fetched"
    );
    assert_eq!(container(&name), None, "a container was made");
    assert_eq!(snapshot(&n.root()), root, "the root changed");
    assert_eq!(n.current().as_deref(), Some(v0.as_str()));
    assert_eq!(
        state_file(n, "statement.json"),
        statement,
        "the stage kept its statement: the floor of sequences moved"
    );
    assert_eq!(deploy_records(n), deploys, "a deploy was armed");
    assert_eq!(status(n)["staged_generation"], v1.as_str());
    // The table says it too.
    let text = lab.mesh(&["deploy", "--stage", "--sign", "--key", ci.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&text.stdout);
    assert!(text.status.success() && said.contains("staged"), "{said}");

    // The image registry gone: the deploy sends nothing and switches to what was staged.
    images.down();
    let (code, row) = deploy(&lab, &signed);
    assert_eq!(
        (code, row["result"].as_str()),
        (Some(0), Some("confirmed")),
        "{row}"
    );
    assert_eq!(row["to"], v1.as_str(), "{row}");
    assert_eq!(row["objects_sent"], 0, "{row}");
    assert_eq!(n.current().as_deref(), Some(v1.as_str()));
    assert_eq!(
        container(&name).map(|c| c.0),
        Some(true),
        "the container runs"
    );
    assert_eq!(
        std::fs::read_to_string(n.root().join("etc/motd")).unwrap(),
        "v1\n"
    );
    assert!(status(n).get("staged_generation").is_none());
    drop(made);
}

/// `mesh pull --stage` judges the tag's statement and signatures as a pull does — one signed
/// by a key the node does not trust is refused (exit 2), the node's root and state untouched —
/// then fetches the objects and the image and stages the generation: nothing in force changed,
/// the node's newest statement and its pull record as they were, `mesh status` naming it. The
/// later `mesh pull` of the same tag (the same statement, judged again) — the registry that
/// serves the image stopped — fetches no object and switches: the container runs. A stage of
/// an older statement put back at the tag is refused (exit 2), nothing written.
#[test]
fn a_pull_staged_switches_later_with_the_image_registry_gone() {
    if !lab_here(false) || !crate::pull::tools() {
        return;
    }
    let _turn = take_turn();
    let mut images = ImageRegistry::start(None);
    let mut made = Made::new("ps");
    let (repository, digest) = made.pushed(&images, "busy", "1", "pull");
    let image = format!("{repository}:1@{digest}");
    let name = format!("{}-app", made.prefix);

    let lab = Lab::new("pstage", 1, |n| node_decl(n, "v0\\n", true));
    let registry = crate::registry_lab::Registry::start(&lab);
    let (_keys, ci) = crate::pull::trusted_signer(&lab);
    let n = &lab.nodes[0];
    crate::pull::push(&lab, &ci, &[]);
    let (code, v, err) = crate::pull::pull(n, &[]);
    assert_eq!(
        (code, v["result"].as_str()),
        (0, Some("confirmed")),
        "{v} {err}"
    );
    let v0 = n.current().unwrap();
    let tag_of_v0 = registry.manifest("node0");

    // Signed by a key the node does not trust: refused, nothing written.
    lab.declare(
        "node0",
        &with_container("node0", "stranger\\n", &name, &image),
    );
    let stranger = keygen(lab.dir.path(), "stranger");
    crate::pull::push(&lab, &stranger, &[]);
    let before = crate::pull::untouched(n);
    let (code, v, err) = crate::pull::pull(n, &["--stage"]);
    assert_eq!(
        (code, v["result"].as_str()),
        (2, Some("refused")),
        "{v} {err}"
    );
    assert!(
        crate::pull::untouched(n) == before,
        "a refused stage changed the node"
    );
    assert!(!has_image(&format!("{repository}@{digest}")), "fetched");

    // Staged.
    lab.declare("node0", &with_container("node0", "v1\\n", &name, &image));
    crate::pull::push(&lab, &ci, &[]);
    let (root, statement, last) = (
        snapshot(&n.root()),
        state_file(n, "statement.json"),
        state_file(n, "pull.json"),
    );
    let (code, v, err) = crate::pull::pull(n, &["--stage"]);
    assert_eq!(
        (code, v["result"].as_str()),
        (0, Some("staged")),
        "{v} {err}"
    );
    let v1 = v["generation"].as_str().unwrap().to_owned();
    assert_ne!(v1, v0);
    assert!(v["objects"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["staged"]["images"][0]["image"], image.as_str(), "{v}");
    assert!(
        has_image(&format!("{repository}@{digest}")),
        "the image was fetched"
    );
    assert_eq!(container(&name), None, "a container was made");
    assert_eq!(snapshot(&n.root()), root, "the root changed");
    assert_eq!(n.current().as_deref(), Some(v0.as_str()));
    assert_eq!(
        state_file(n, "statement.json"),
        statement,
        "the statement was kept"
    );
    assert_eq!(state_file(n, "pull.json"), last, "a stage recorded a pull");
    assert_eq!(status(n)["staged_generation"], v1.as_str());

    // The image registry gone: the pull of the same tag fetches nothing and switches.
    images.down();
    let (code, v, err) = crate::pull::pull(n, &[]);
    assert_eq!(
        (code, v["result"].as_str()),
        (0, Some("confirmed")),
        "{v} {err}"
    );
    assert_eq!(v["generation"], v1.as_str(), "{v}");
    assert_eq!(v["objects"], 0, "{v}");
    assert_eq!(n.current().as_deref(), Some(v1.as_str()));
    assert_eq!(
        container(&name).map(|c| c.0),
        Some(true),
        "the container runs"
    );
    assert_ne!(
        state_file(n, "statement.json"),
        statement,
        "the switch kept it"
    );

    // v0's tag put back, its older statement with it: a stage of it is refused as old, with
    // nothing written.
    registry.put_manifest("node0", &tag_of_v0);
    let before = crate::pull::untouched(n);
    let (code, v, err) = crate::pull::pull(n, &["--stage"]);
    assert_eq!(
        (code, v["result"].as_str()),
        (2, Some("refused")),
        "{v} {err}"
    );
    assert!(
        v["reason"].as_str().unwrap_or("").contains("sequence"),
        "{v}"
    );
    assert!(
        crate::pull::untouched(n) == before,
        "a refused stage changed the node"
    );
    drop(made);
}
