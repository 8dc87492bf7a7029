//! A fleet past one deployer: generations published to a real OCI registry (Debian's
//! `docker-registry`, the Distribution registry, started here in the deployer's namespace,
//! plain HTTP, its storage in a temporary folder), nodes in namespaces of their own pulling,
//! verifying and switching by themselves, and rollouts in waves (see `sshlab.rs` for the
//! nodes).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::node_fixture::{snapshot, Snapshot};
use crate::sshlab::{node_decl, Lab, LabNode};
use crate::support::have_root_tools;
use crate::trust::keygen;

use crate::registry_lab::{Registry, PORT, REGISTRY, REPO};

pub(crate) fn tools() -> bool {
    let here = have_root_tools(&["ssh-keygen", "ip", "nft", "tc", "curl", "sshd"]);
    if here && !Path::new(REGISTRY).exists() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("this test needs {REGISTRY} (Debian's docker-registry), and CI must run it");
        }
        eprintln!("NOT RUN outside CI: this test needs {REGISTRY}");
        return false;
    }
    here
}

/// `REGISTRY/REPO` as node `n` reaches it: the deployer's end of its link.
fn target_for(n: &LabNode) -> String {
    let last: u8 = n.address.rsplit('.').next().unwrap().parse().unwrap();
    format!("198.51.100.{}:{PORT}/{REPO}", last - 1)
}

fn local_target() -> String {
    format!("127.0.0.1:{PORT}/{REPO}")
}

/// `mesh ARGS` on node `n`, inside its namespace (where the registry is reached).
pub(crate) fn on_node(n: &LabNode, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &n.netns, env!("CARGO_BIN_EXE_mesh")])
        .env("MESH_STATE_DIR", n.state())
        .env("MESH_ROOT", n.root())
        .env("MESH_NETNS", &n.netns)
        .env("MESH_SETTLE", "1")
        .env("NO_COLOR", "1")
        .args(args);
    c
}

/// `mesh pull` on node `n`: its exit code and its JSON answer.
pub(crate) fn pull(n: &LabNode, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let target = target_for(n);
    let mut args = vec!["pull", &target, "--node", &n.name, "--insecure", "--json"];
    args.extend_from_slice(extra);
    let out = on_node(n, &args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let v = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_default();
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A pull on `n` is refused (exit 2) for a reason that says `why`, with `in_force` still in
/// force and its root as the snapshot `root` says.
fn refused(n: &LabNode, why: &str, in_force: &str, root: &Snapshot) {
    let (code, v, err) = pull(n, &[]);
    assert_eq!(code, 2, "{v} {err}");
    assert_eq!(v["result"], "refused", "{v}");
    assert!(v["reason"].as_str().unwrap().contains(why), "{v}");
    assert_eq!(n.current().as_deref(), Some(in_force));
    assert_eq!(&snapshot(&n.root()), root, "nothing changed on the machine");
}

/// A signer's key, made here, that every node of the lab trusts: its folder (kept while the
/// test runs) and the key's path.
pub(crate) fn trusted_signer(lab: &Lab) -> (tempfile::TempDir, std::path::PathBuf) {
    let keys = tempfile::tempdir().unwrap();
    let ci = keygen(keys.path(), "ci");
    for n in &lab.nodes {
        n.trust(&ci);
    }
    (keys, ci)
}

/// `mesh push` from the deployer, signed with `key`: its JSON answer.
pub(crate) fn push(lab: &Lab, key: &Path, extra: &[&str]) -> serde_json::Value {
    let target = local_target();
    let mut args = vec![
        "push",
        &target,
        "--insecure",
        "--sign",
        "--key",
        key.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = lab.mesh(&args);
    assert!(
        out.status.success(),
        "mesh push: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn line<'a>(pushed: &'a serde_json::Value, node: &str) -> &'a serde_json::Value {
    pushed["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["node"] == node)
        .unwrap()
}

/// What a pull must not touch when it changes nothing: the root and the state directory, byte
/// for byte, with their modes, owners and times.
pub(crate) fn untouched(n: &LabNode) -> impl PartialEq + std::fmt::Debug {
    (snapshot(&n.root()), snapshot(&n.state()))
}

/// Five nodes, each in its own namespace with its own state directory, pull their own
/// generation from the registry, check its signature and switch; a pull that finds its
/// generation in force changes nothing and writes nothing. A second push, of one changed file
/// on one node, sends that file, its generation and its signature — nothing of the other nodes
/// — and that node fetches the generation and the one file.
#[test]
fn push_then_pull_on_five_nodes_sends_only_what_changed() {
    if !tools() {
        return;
    }
    let lab = Lab::new("pull", 5, |n| node_decl(n, &format!("{n} v1\\n"), true));
    let registry = Registry::start(&lab);
    let (_keys, ci) = trusted_signer(&lab);
    let first = push(&lab, &ci, &[]);
    for n in &lab.nodes {
        let l = line(&first, &n.name);
        assert!(l["error"].is_null(), "{l}");
        assert_eq!(l["tag_moved"], true);
    }
    // node4 changes before it ever pulled: its artifact keeps the first push's generation as
    // its keyframe (not sent again) with a delta from it, and node4, which has neither, fetches
    // both and gets the generation the new signature vouches for.
    lab.declare("node4", &node_decl("node4", "node4 v1b\\n", true));
    let again = push(&lab, &ci, &["--node", "node4"]);
    assert_eq!(
        line(&again, "node4")["sent"]["blobs"],
        3,
        "the file, the delta from the keyframe, the signature: {again}"
    );
    let mut first = first;
    for l in first["nodes"].as_array_mut().unwrap() {
        if l["node"] == "node4" {
            *l = line(&again, "node4").clone();
        }
    }
    for n in &lab.nodes {
        let (code, v, err) = pull(n, &[]);
        assert_eq!(code, 0, "{}: {v} {err}", n.name);
        assert_eq!(v["result"], "confirmed", "{v}");
        let id = line(&first, &n.name)["generation"].as_str().unwrap();
        assert_eq!(
            n.current().as_deref(),
            Some(id),
            "{} runs its generation",
            n.name
        );
        assert_eq!(
            std::fs::read_to_string(n.root().join("etc/motd")).unwrap(),
            if n.name == "node4" {
                "node4 v1b\n".to_owned()
            } else {
                format!("{} v1\n", n.name)
            }
        );
    }

    // In force: nothing done, nothing written.
    let before = untouched(&lab.nodes[1]);
    let (code, v, _) = pull(&lab.nodes[1], &[]);
    assert_eq!((code, v["result"].as_str()), (0, Some("up-to-date")), "{v}");
    assert_eq!(
        untouched(&lab.nodes[1]),
        before,
        "a pull in force writes nothing"
    );

    // One file changes on one node.
    lab.declare("node0", &node_decl("node0", "node0 v2\\n", true));
    let second = push(&lab, &ci, &[]);
    let changed = line(&second, "node0");
    assert_eq!(changed["sent"]["objects"], 1, "the one file: {changed}");
    assert_eq!(
        changed["sent"]["blobs"], 3,
        "the file, the generation as a delta from its keyframe (the first push's), its \
         signature: {changed}"
    );
    assert_eq!(changed["tag_moved"], true);
    for n in &lab.nodes[1..] {
        let l = line(&second, &n.name);
        assert_eq!(
            (l["sent"]["blobs"].as_u64(), l["tag_moved"].as_bool()),
            (Some(0), Some(false)),
            "{l}"
        );
        assert_eq!(l["sent"]["objects"], 0, "{l}");
    }
    let total = second["bytes"].as_u64().unwrap();
    assert!(total < 8 * 1024, "{total} bytes sent for one changed file");
    // While another pull runs there (a timer's, say), one more does nothing and records
    // nothing, naming the other.
    let n0 = &lab.nodes[0];
    let other = mesh_node::lock::StateLock::take_file(&n0.state(), "pull.lock").unwrap();
    let before = untouched(n0);
    let (code, v, err) = pull(n0, &[]);
    assert_eq!((code, v["result"].as_str()), (2, Some("busy")), "{v} {err}");
    assert_eq!(v["pid"], std::process::id().to_string(), "{v}");
    assert!(err.contains("another mesh pull"), "{err}");
    drop(other);
    assert_eq!(
        untouched(n0),
        before,
        "a pull that found another running changed nothing"
    );
    let (code, v, err) = pull(&lab.nodes[0], &[]);
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(v["objects"], 2, "the generation and the one file: {v}");
    assert_eq!(
        std::fs::read_to_string(lab.nodes[0].root().join("etc/motd")).unwrap(),
        "node0 v2\n"
    );
    let received = v["bytes"].as_u64().unwrap();
    assert!(
        received < 17 * 1024,
        "{received} bytes received by the node"
    );
    drop(registry);
}

/// A pull under way says so; one whose process was killed (mid-switch, waiting on its health
/// check) reads as failed, interrupted, naming it — not as the pull before it.
#[test]
fn a_pull_killed_midway_reads_as_interrupted() {
    if !tools() {
        return;
    }
    let mut lab = Lab::new("pullkill", 1, |n| node_decl(n, "one v1\\n", true));
    let registry = Registry::start(&lab);
    let (_keys, ci) = trusted_signer(&lab);
    push(&lab, &ci, &[]);
    assert_eq!(pull(&lab.nodes[0], &[]).0, 0);
    lab.declare("node0", &node_decl("node0", "one v2\\n", true));
    let second = push(&lab, &ci, &[]);
    let v2 = line(&second, "node0")["generation"]
        .as_str()
        .unwrap()
        .to_owned();
    let n = &lab.nodes[0];
    let target = target_for(n);
    let mut child = on_node(
        n,
        &[
            "pull",
            &target,
            "--node",
            "node0",
            "--insecure",
            "--check",
            "sleep 30",
            "--health-within",
            "40",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let status = |n: &LabNode| -> serde_json::Value {
        serde_json::from_slice(&n.mesh(&["status", "--json"]).stdout).unwrap()
    };
    let mut seen = serde_json::Value::Null;
    for _ in 0..200 {
        seen = status(n);
        if n.current().as_deref() == Some(v2.as_str()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        n.current().as_deref(),
        Some(v2.as_str()),
        "switched: {seen}"
    );
    let now = status(n);
    assert_eq!(now["last_pull"]["result"], "running", "{now}");
    assert_eq!(now["last_pull"]["pid"], child.id(), "{now}");
    child.kill().unwrap();
    child.wait().unwrap();
    let after = status(n);
    assert_eq!(after["last_pull"]["result"], "failed", "{after}");
    let reason = after["last_pull"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("interrupted") && reason.contains(&child.id().to_string()),
        "{after}"
    );
    // Its deploy's agent goes on waiting for a confirmation that never comes: stopped here.
    lab.nodes[0].crash();
    drop(registry);
}

/// A blob whose bytes the registry's storage changed, and a tag whose artifact carries no
/// signature, are refused: the node stays in its generation, its files as they were, and the
/// pull says why.
#[test]
fn a_tampered_blob_and_an_unsigned_tag_are_refused() {
    if !tools() {
        return;
    }
    let lab = Lab::new("pullbad", 1, |n| node_decl(n, "v1\\n", true));
    let registry = Registry::start(&lab);
    let (_keys, ci) = trusted_signer(&lab);
    let n = &lab.nodes[0];
    push(&lab, &ci, &[]);
    assert_eq!(pull(n, &[]).0, 0);
    let v1 = n.current().unwrap();

    lab.declare(
        "node0",
        &node_decl("node0", "v2, tampered on the way\\n", true),
    );
    push(&lab, &ci, &[]);
    let stored = registry.blobs_holding(b"v2, tampered on the way\n");
    assert_eq!(stored.len(), 1, "the file is one blob, stored as it is");
    let mut bytes = std::fs::read(&stored[0]).unwrap();
    // The registry keeps a blob under its digest: `blobs/sha256/AB/ABCD…/data`.
    let named = stored[0]
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    bytes[0] ^= 0x20;
    std::fs::write(&stored[0], &bytes).unwrap();
    let root = snapshot(&n.root());
    // One sentence, naming what was expected and what came.
    refused(
        n,
        &format!(
            "does not match what names it: expected sha256:{named}, got {}; it was not stored",
            mesh_registry::sha256(&bytes)
        ),
        &v1,
        &root,
    );

    // The artifact without its signature, under the node's tag.
    let mut manifest = registry.manifest("node0");
    manifest["layers"]
        .as_array_mut()
        .unwrap()
        .retain(|l| l["mediaType"] != "application/vnd.mesh.signature.v1");
    registry.put_manifest("node0", &manifest);
    refused(n, "no signature", &v1, &root);
}

/// The registry goes away while a node fetches: the node stays in its old generation, keeps
/// the objects that arrived whole, and the next pull (the registry back) finishes, fetching
/// only the rest.
#[test]
fn a_registry_gone_mid_pull_leaves_the_old_generation() {
    if !tools() {
        return;
    }
    let lab = Lab::new("pullcut", 1, |n| {
        crate::sshlab::decl_with_data(n, "v1\\n", 40)
    });
    crate::sshlab::write_data(&lab, "node0", 40, 32 * 1024, "one");
    let mut registry = Registry::start(&lab);
    let (_keys, ci) = trusted_signer(&lab);
    let n = &lab.nodes[0];
    push(&lab, &ci, &[]);
    assert_eq!(pull(n, &[]).0, 0);
    let v1 = n.current().unwrap();

    let old_file = std::fs::read(n.root().join("etc/data/f000")).unwrap();
    crate::sshlab::write_data(&lab, "node0", 40, 32 * 1024, "two");
    push(&lab, &ci, &[]);
    // About 1.3 MB at 2 Mbit/s: some five seconds; the registry goes after two.
    lab.throttle("node0", "2mbit");
    let target = target_for(n);
    let child = on_node(
        n,
        &[
            "pull",
            &target,
            "--node",
            "node0",
            "--insecure",
            "--json",
            "--registry-timeout",
            "5",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    registry.down();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        n.current().as_deref(),
        Some(v1.as_str()),
        "the old generation"
    );
    assert_eq!(
        std::fs::read(n.root().join("etc/data/f000")).unwrap(),
        old_file,
        "the old generation's files"
    );
    lab.unthrottle("node0");
    registry.up();
    let (code, v, err) = pull(n, &[]);
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(v["result"], "confirmed");
    let fetched = v["objects"].as_u64().unwrap();
    assert!(
        fetched < 41,
        "only what the cut pull did not keep: {fetched} of 41"
    );
    assert_ne!(n.current().as_deref(), Some(v1.as_str()));
}

/// A rollout whose unhealthy wave holds a node whose tag named nothing before (it ran what a
/// deploy over SSH put there) cannot put that tag back: it withdraws it (the tag names no
/// generation) and says so, naming the node; a pull then does nothing, and `fleet status`
/// says the tag is withdrawn.
#[test]
fn a_stopped_rollout_withdraws_a_tag_that_named_nothing_before() {
    if !tools() {
        return;
    }
    let lab = Lab::new("putback", 1, |n| node_decl(n, "good v1\\n", true));
    with_rollout(&lab, r#"[["node0"]]"#, 20);
    let registry = Registry::start(&lab);
    let (_keys, ci) = trusted_signer(&lab);
    let n = &lab.nodes[0];
    let key = ci.to_str().unwrap();
    let deployed = lab.mesh(&["deploy", "--confirm-timeout", "20", "--sign", "--key", key]);
    assert!(
        deployed.status.success(),
        "{}",
        String::from_utf8_lossy(&deployed.stdout)
    );
    let follower = Follower::start(n);
    lab.declare("node0", &node_decl("node0", "bad v2\\n", true));
    let out = rollout(&lab, &ci, &[]);
    drop(follower);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("withdrawn where they had named nothing before: node0"),
        "{stderr}"
    );
    let before = n.current();
    let (code, v, err) = pull(n, &[]);
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(v["result"], "withdrawn", "{v}");
    assert_eq!(n.current(), before, "nothing pulled");
    let board = lab.mesh(&[
        "fleet",
        "status",
        "--json",
        "--registry",
        &local_target(),
        "--insecure",
    ]);
    let board: serde_json::Value = serde_json::from_slice(&board.stdout).unwrap();
    assert_eq!(board["nodes"][0]["withdrawn"], true, "{board}");
    assert!(board["nodes"][0]["desired"].is_null(), "{board}");
    drop(registry);
}

/// A background `mesh follow` on a node, stopped when dropped.
struct Follower(Child);

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Follower {
    /// `mesh follow` on `n` every second, healthy only while its motd says "good".
    fn start(n: &LabNode) -> Self {
        let target = target_for(n);
        let check = format!("grep -q good {}/etc/motd", n.root().display());
        Follower(
            on_node(
                n,
                &[
                    "follow",
                    &target,
                    "--node",
                    &n.name,
                    "--insecure",
                    "--interval",
                    "1",
                    "--check",
                    &check,
                    "--health-within",
                    "2",
                ],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        )
    }
}

/// The lab's fleet file with `rollout = { waves = WAVES, within = WITHIN }`.
fn with_rollout(lab: &Lab, waves: &str, within: u64) {
    let fleet = std::fs::read_to_string(lab.fleet()).unwrap().replace(
        "  nodes = {",
        &format!("  rollout = {{ waves = {waves}, within = {within} }},\n  nodes = {{"),
    );
    std::fs::write(lab.fleet(), fleet).unwrap();
}

/// `mesh rollout` to the registry, signed with `key`, its nodes read every second, with
/// `extra` arguments.
fn rollout(lab: &Lab, key: &Path, extra: &[&str]) -> std::process::Output {
    let target = local_target();
    let mut args = vec![
        "rollout",
        &target,
        "--insecure",
        "--sign",
        "--key",
        key.to_str().unwrap(),
        "--every",
        "1",
    ];
    args.extend_from_slice(extra);
    lab.mesh(&args)
}

/// `mesh fleet status --registry` from the deployer, which must succeed: its JSON board.
fn board(lab: &Lab) -> serde_json::Value {
    let out = lab.mesh(&[
        "fleet",
        "status",
        "--registry",
        &local_target(),
        "--insecure",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A rollout in waves whose canary does not get healthy (its health check fails after the
/// switch, so it goes back by itself and records why) stops there: it names the node and why,
/// the canary's tag is put back, and the nodes of the later waves are untouched — their tags,
/// their generation.
#[test]
fn a_wave_whose_canary_fails_stops_the_rollout() {
    if !tools() {
        return;
    }
    let lab = Lab::new("rollout", 3, |n| node_decl(n, "good v1\\n", true));
    with_rollout(&lab, r#"[["node0"], ["node1"]]"#, 30);
    let registry = Registry::start(&lab);
    let (_keys, ci) = trusted_signer(&lab);
    let first = push(&lab, &ci, &[]);
    for n in &lab.nodes {
        assert_eq!(pull(n, &[]).0, 0);
    }
    let v1: Vec<String> = lab.nodes.iter().map(|n| n.current().unwrap()).collect();
    let tags_before: Vec<serde_json::Value> = lab
        .nodes
        .iter()
        .map(|n| registry.manifest(&n.name))
        .collect();

    let followers: Vec<Follower> = lab.nodes.iter().map(Follower::start).collect();
    for n in &lab.nodes {
        lab.declare(&n.name, &node_decl(&n.name, "bad v2\\n", true));
    }
    let out = rollout(&lab, &ci, &[]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("stopped at wave 1")
            && stderr.contains("node0")
            && stderr.contains("unhealthy after the switch"),
        "{stderr}"
    );
    assert!(stderr.contains("node1, node2"), "{stderr}");
    drop(followers);
    // The canary went back by itself, and says why.
    assert_eq!(lab.nodes[0].current().as_deref(), Some(v1[0].as_str()));
    let status: serde_json::Value =
        serde_json::from_slice(&lab.nodes[0].mesh(&["status", "--json"]).stdout).unwrap();
    assert_eq!(status["last_pull"]["result"], "reverted", "{status}");
    assert!(
        status["last_pull"]["reason"]
            .as_str()
            .unwrap()
            .contains("grep -q good"),
        "{status}"
    );
    // Every tag names what it named before the rollout; the later nodes never moved. The
    // canary's is put back under a new statement — the old one is older than the one the
    // canary accepted in the wave, and a node refuses an old statement replayed.
    for (i, n) in lab.nodes.iter().enumerate() {
        let now = registry.manifest(&n.name);
        if i == 0 {
            let (mut was, mut is) = (tags_before[i].clone(), now.clone());
            let sequence = |m: &serde_json::Value| {
                let signed: serde_json::Value =
                    serde_json::from_str(m["annotations"]["dev.mesh.statement"].as_str().unwrap())
                        .unwrap();
                let text = signed["statement"].as_str().unwrap().to_owned();
                let seq: u64 = text
                    .lines()
                    .find_map(|l| l.strip_prefix("sequence "))
                    .unwrap()
                    .parse()
                    .unwrap();
                (seq, text)
            };
            let ((before, _), (after, text)) = (sequence(&was), sequence(&is));
            assert!(after > before, "a new statement puts it back: {text}");
            assert!(text.contains(&format!("generation {}\n", v1[0])), "{text}");
            was["annotations"]
                .as_object_mut()
                .unwrap()
                .remove("dev.mesh.statement");
            is["annotations"]
                .as_object_mut()
                .unwrap()
                .remove("dev.mesh.statement");
            assert_eq!(is, was, "the same artifact otherwise");
        } else {
            assert_eq!(now, tags_before[i], "{}'s tag", n.name);
        }
        assert_eq!(n.current().as_deref(), Some(v1[i].as_str()), "{}", n.name);
    }
    // The canary takes the put-back statement (a newer one naming the generation it runs):
    // nothing to switch, nothing refused.
    let (code, v, _) = pull(&lab.nodes[0], &[]);
    assert_eq!((code, v["result"].as_str()), (0, Some("up-to-date")), "{v}");
    assert!(first["nodes"].as_array().unwrap().len() == 3);
    // The board: desired (the tag), in force, the last pull and its result.
    let board = board(&lab);
    let canary = &board["nodes"][0];
    assert_eq!(canary["desired"].as_str(), Some(v1[0].as_str()), "{canary}");
    assert_eq!(canary["current"].as_str(), Some(v1[0].as_str()), "{canary}");
    assert_eq!(canary["last_pull"]["result"], "reverted", "{canary}");
}

/// A rollout whose waves all get healthy — a canary, then half the fleet (by share), then the
/// rest — moves every tag, wave after wave: each node pulls, switches and confirms its new
/// generation by itself, a wave's nodes only after every node of the wave before confirmed;
/// the rollout exits 0, and the board shows every node where its tag points.
#[test]
fn a_healthy_rollout_moves_every_tag_wave_after_wave() {
    if !tools() {
        return;
    }
    let lab = Lab::new("waves", 4, |n| node_decl(n, "good v1\\n", true));
    with_rollout(&lab, r#"[["node0"], "50%"]"#, 30);
    let registry = Registry::start(&lab);
    let (_keys, ci) = trusted_signer(&lab);
    push(&lab, &ci, &[]);
    for n in &lab.nodes {
        assert_eq!(pull(n, &[]).0, 0);
    }
    let v1: Vec<String> = lab.nodes.iter().map(|n| n.current().unwrap()).collect();

    let followers: Vec<Follower> = lab.nodes.iter().map(Follower::start).collect();
    for n in &lab.nodes {
        lab.declare(&n.name, &node_decl(&n.name, "good v2\\n", true));
    }
    let out = rollout(&lab, &ci, &["--json"]);
    drop(followers);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let waves: Vec<Vec<&str>> = report["waves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            assert_eq!(w["healthy"], true, "{w}");
            w["wave"]["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(
        waves,
        [vec!["node0"], vec!["node1", "node2"], vec!["node3"]],
        "{report}"
    );
    assert_eq!(report["untouched"], serde_json::json!([]), "{report}");

    // Every node runs what its tag names now, new, and its pull of it was confirmed.
    let mut when = Vec::new();
    for (i, n) in lab.nodes.iter().enumerate() {
        let tag = registry.manifest(&n.name);
        let desired = tag["annotations"]["dev.mesh.generation"].as_str().unwrap();
        let current = n.current().unwrap();
        assert_eq!(current, desired, "{}", n.name);
        assert_ne!(current, v1[i], "{} got a new generation", n.name);
        let status: serde_json::Value =
            serde_json::from_slice(&n.mesh(&["status", "--json"]).stdout).unwrap();
        assert_eq!(status["last_pull"]["result"], "confirmed", "{status}");
        assert_eq!(status["last_pull"]["generation"], desired, "{status}");
        when.push(status["last_pull"]["at"].as_str().unwrap().to_owned());
    }
    // Wave after wave: a node of a wave pulled only after the wave before it was confirmed.
    assert!(
        when[0] < when[1] && when[0] < when[2],
        "the canary first: {when:?}"
    );
    assert!(
        when[1] < when[3] && when[2] < when[3],
        "the rest last: {when:?}"
    );

    // The board: each node's desired generation (its tag) in force.
    for row in board(&lab)["nodes"].as_array().unwrap() {
        assert_eq!(row["desired"], row["current"], "{row}");
        assert_eq!(row["last_pull"]["result"], "confirmed", "{row}");
    }
}

/// The repository's tags, as the registry lists them.
fn tags(registry: &Registry) -> Vec<String> {
    let out = registry.curl(&[
        "-sf",
        &format!("http://127.0.0.1:{PORT}/v2/{REPO}/tags/list"),
    ]);
    assert!(out.status.success(), "GET tags/list");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut tags: Vec<String> = listed["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect();
    tags.sort();
    tags
}

/// `mesh prune` on the lab's registry: its JSON answer.
fn prune(lab: &Lab, extra: &[&str]) -> serde_json::Value {
    let target = local_target();
    let mut args = vec!["prune", &target, "--insecure", "--json"];
    args.extend_from_slice(extra);
    let out = lab.mesh(&args);
    assert!(
        out.status.success(),
        "mesh prune: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Objects that no node's tag needs any more go, and nothing else: a file replaced by a second
/// push is deleted (after a dry run that only names it), the objects the tags' generations
/// reference and the node tags stay, every node (none pulled before) still pulls its
/// generation — node0's through its keyframe — and a second prune finds nothing to delete.
#[test]
fn prune_deletes_the_objects_no_node_tag_needs() {
    if !tools() {
        return;
    }
    let lab = Lab::new("prune", 2, |n| node_decl(n, &format!("{n} v1\\n"), true));
    let registry = Registry::start(&lab);
    let (_keys, ci) = trusted_signer(&lab);
    push(&lab, &ci, &[]);
    lab.declare("node0", &node_decl("node0", "node0 v2\\n", true));
    push(&lab, &ci, &[]);
    let old = format!("b3-{}", mesh_lib::BlobHash::of(b"node0 v1\n").hex());
    let new = format!("b3-{}", mesh_lib::BlobHash::of(b"node0 v2\n").hex());
    let before = tags(&registry);
    assert!(before.contains(&old) && before.contains(&new), "{before:?}");

    let dry = prune(&lab, &["--dry-run"]);
    assert_eq!(dry["pruned"]["removed"], serde_json::json!([old]), "{dry}");
    assert_eq!(dry["pruned"]["dry_run"], true);
    assert_eq!(tags(&registry), before, "a dry run deletes nothing");

    let done = prune(&lab, &[]);
    assert_eq!(
        done["pruned"]["removed"],
        serde_json::json!([old]),
        "{done}"
    );
    assert_eq!(
        done["pruned"]["nodes"],
        serde_json::json!(["node0", "node1"])
    );
    let after = tags(&registry);
    let expected: Vec<String> = before.iter().filter(|t| **t != old).cloned().collect();
    assert_eq!(after, expected, "only the replaced file went");
    assert_eq!(
        done["pruned"]["kept"].as_u64().unwrap() as usize,
        after.iter().filter(|t| t.starts_with("b3-")).count()
    );

    for n in &lab.nodes {
        let (code, v, err) = pull(n, &[]);
        assert_eq!(code, 0, "{}: {v} {err}", n.name);
        assert_eq!(v["result"], "confirmed", "{v}");
    }
    assert_eq!(
        std::fs::read_to_string(lab.nodes[0].root().join("etc/motd")).unwrap(),
        "node0 v2\n"
    );
    let again = prune(&lab, &[]);
    assert_eq!(again["pruned"]["removed"], serde_json::json!([]), "{again}");

    // A node tag whose generation cannot be read (its annotation names one the artifact does
    // not carry) stops the prune with nothing deleted: node0's v2, replaced by v3, stays.
    lab.declare("node0", &node_decl("node0", "node0 v3\n", true));
    push(&lab, &ci, &[]);
    let mut bad = registry.manifest("node1");
    bad["annotations"]["dev.mesh.generation"] = format!("b3:{}", "0".repeat(64)).into();
    registry.put_manifest("node1", &bad);
    let before = tags(&registry);
    assert!(before.contains(&new));
    let target = local_target();
    let out = lab.mesh(&["prune", &target, "--insecure"]);
    assert!(
        !out.status.success(),
        "a prune that cannot read node1 fails"
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("the prune stopped"), "{said}");
    assert_eq!(tags(&registry), before, "nothing deleted");
    drop(registry);
}

/// The statement a tag's manifest carries: its text.
fn statement_of(manifest: &serde_json::Value) -> String {
    let signed: serde_json::Value = serde_json::from_str(
        manifest["annotations"]["dev.mesh.statement"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    signed["statement"].as_str().unwrap().to_owned()
}

/// A pull on `n` refused (exit 2) for a reason that says `why`, with nothing written: its root
/// and its state directory byte for byte as they were.
fn refused_untouched(n: &LabNode, why: &str) {
    let before = untouched(n);
    let (code, v, err) = pull(n, &[]);
    assert_eq!(code, 2, "{v} {err}");
    assert_eq!(v["result"], "refused", "{v}");
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.contains(why), "{reason}");
    assert_eq!(untouched(n), before, "a refusal changes nothing: {reason}");
}

/// Whoever holds the registry can serve what it has seen: each is refused, exit 2, the node's
/// root and state byte for byte as they were — an old manifest replayed (validly signed, but
/// its statement's sequence is below the one the node accepted), a node's tag re-pointed at
/// another node's artifact (its statement names the other node; also on a node that never
/// pulled and knows no name but its tag), an unsigned withdrawal put over a tag (it would
/// freeze the node: every pull "nothing to do"), a statement whose generation is not the
/// artifact's. Going back is a new statement: a push of the old declaration is pulled.
#[test]
fn a_registry_cannot_replay_point_sideways_or_freeze() {
    if !tools() {
        return;
    }
    let lab = Lab::new("replay", 3, |n| node_decl(n, "v1\\n", true));
    let registry = Registry::start(&lab);
    let (_keys, ci) = trusted_signer(&lab);
    let (n0, n1, fresh) = (&lab.nodes[0], &lab.nodes[1], &lab.nodes[2]);
    push(&lab, &ci, &[]);
    assert_eq!(pull(n0, &[]).0, 0);
    assert_eq!(pull(n1, &[]).0, 0);
    let v1 = n0.current().unwrap();
    let old = registry.manifest("node0");
    lab.declare("node0", &node_decl("node0", "v2\\n", true));
    push(&lab, &ci, &[]);
    assert_eq!(pull(n0, &[]).0, 0);
    let v2 = n0.current().unwrap();
    assert_ne!(v1, v2);
    let new = registry.manifest("node0");

    // The old manifest, replayed.
    registry.put_manifest("node0", &old);
    refused_untouched(n0, "is not above");
    assert_eq!(n0.current().as_deref(), Some(v2.as_str()));

    // Another node's artifact under this node's tag; and under the tag of a node that never
    // pulled (no record, no generation, no statement: its tag is its name).
    let other = registry.manifest("node1");
    registry.put_manifest("node0", &other);
    refused_untouched(n0, "for node node1, not for node0");
    registry.put_manifest("node2", &other);
    // Its state directory laid out (as any command of the mesh lays it out) before the pull.
    assert!(fresh.mesh(&["status"]).status.success());
    refused_untouched(fresh, "for node node1, not for node2");
    assert!(
        fresh.current().is_none(),
        "the fresh node did not become node1"
    );

    // An unsigned withdrawal over the tag.
    let withdrawal = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.mesh.withdrawn.v1",
        "config": old["config"],
        "layers": [old["config"]],
    });
    registry.put_manifest("node0", &withdrawal);
    refused_untouched(n0, "carries no statement");

    // The new artifact's statement on the old artifact: it names another generation.
    let mut mixed = old.clone();
    mixed["annotations"]["dev.mesh.statement"] = new["annotations"]["dev.mesh.statement"].clone();
    registry.put_manifest("node0", &mixed);
    refused_untouched(n0, &format!("names {v2}, not {v1}"));

    // The registry's own tag back: the same statement again is no news, nothing to do.
    registry.put_manifest("node0", &new);
    let (code, v, _) = pull(n0, &[]);
    assert_eq!((code, v["result"].as_str()), (0, Some("up-to-date")), "{v}");

    // Going back is a new statement, signed: a push of the old declaration.
    lab.declare("node0", &node_decl("node0", "v1\\n", true));
    push(&lab, &ci, &[]);
    let back = statement_of(&registry.manifest("node0"));
    assert!(back.contains(&format!("generation {v1}\n")), "{back}");
    let (code, v, err) = pull(n0, &[]);
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(n0.current().as_deref(), Some(v1.as_str()));
}

/// A statement holds until its expiry: a node whose newest statement expired says so loudly
/// (`mesh status`, its `--json`, `mesh fleet status --registry`) and refuses it when it is
/// served again (exit 2, nothing written) — a registry that withholds every new statement
/// freezes the node visibly, not silently. A new push signs a fresh one, which it takes.
#[test]
fn an_expired_statement_is_refused_and_said() {
    if !tools() {
        return;
    }
    let lab = Lab::new("expiry", 1, |n| node_decl(n, "v1\\n", true));
    let registry = Registry::start(&lab);
    let (_keys, ci) = trusted_signer(&lab);
    let n = &lab.nodes[0];
    push(&lab, &ci, &["--valid-for", "3s"]);
    let (code, v, err) = pull(n, &[]);
    assert_eq!(code, 0, "{v} {err}");
    assert!(
        v["expires"].as_str().is_some(),
        "the pull's record says it: {v}"
    );
    let status: serde_json::Value =
        serde_json::from_slice(&n.mesh(&["status", "--json"]).stdout).unwrap();
    assert_eq!(status["statement"]["expired"], false, "{status}");
    std::thread::sleep(Duration::from_secs(4));

    let status: serde_json::Value =
        serde_json::from_slice(&n.mesh(&["status", "--json"]).stdout).unwrap();
    assert_eq!(status["statement"]["expired"], true, "{status}");
    let text = String::from_utf8_lossy(&n.mesh(&["status"]).stdout).into_owned();
    assert!(text.contains("STATEMENT EXPIRED"), "{text}");
    refused_untouched(n, "expired at");
    let board = lab.mesh(&[
        "fleet",
        "status",
        "--json",
        "--registry",
        &local_target(),
        "--insecure",
    ]);
    let board: serde_json::Value = serde_json::from_slice(&board.stdout).unwrap();
    assert_eq!(
        board["nodes"][0]["tag_statement"]["expired"], true,
        "{board}"
    );
    assert_eq!(board["nodes"][0]["statement"]["expired"], true, "{board}");
    drop(registry.manifest("node0"));

    // Signed again (nothing else changed): taken, the same generation in force.
    let before = n.current();
    let again = push(&lab, &ci, &[]);
    assert_eq!(line(&again, "node0")["tag_moved"], true, "{again}");
    let (code, v, err) = pull(n, &[]);
    assert_eq!(
        (code, v["result"].as_str()),
        (0, Some("up-to-date")),
        "{v} {err}"
    );
    assert_eq!(n.current(), before);
    let status: serde_json::Value =
        serde_json::from_slice(&n.mesh(&["status", "--json"]).stdout).unwrap();
    assert_eq!(status["statement"]["expired"], false, "{status}");
}
