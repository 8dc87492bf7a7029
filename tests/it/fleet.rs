//! The fleet over real OpenSSH servers, one per network namespace (see `sshlab.rs`): nodes
//! deployed in parallel, a second deploy sending only the changed objects, a generation that
//! closes port 22 reverted by the node itself, the deployer killed mid-switch, an unreachable
//! node reported while the others go on, a changed host key refused; and the fleet's builds,
//! records and status.

use std::time::{Duration, Instant};

use crate::sshlab::{node_decl, path_of, Lab};
use crate::support::have_root_tools;

fn tools() -> bool {
    have_root_tools(&["sshd", "ssh", "ssh-keygen", "ip", "nft", "ss"])
}

fn deploy(lab: &Lab, args: &[&str]) -> (i32, serde_json::Value, String) {
    let mut all = vec!["deploy", "--json"];
    all.extend_from_slice(args);
    let out = lab.mesh(&all);
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "deploy said no JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (
        out.status.code().unwrap_or(-1),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn row<'a>(json: &'a serde_json::Value, node: &str) -> &'a serde_json::Value {
    json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["node"] == node)
        .unwrap_or_else(|| panic!("no row for {node}: {json}"))
}

/// Five nodes deployed in parallel, each confirmed and in the generation the fleet builds; a
/// second deploy after one file changed sends each node only the new generation and the new
/// content; `mesh fleet status` says every node is up to date.
#[test]
fn five_nodes_in_parallel_then_only_what_changed() {
    if !tools() {
        return;
    }
    let lab = Lab::new("five", 5, |n| node_decl(n, "one\\n", true));
    let (code, json, err) = deploy(&lab, &["--parallel", "5", "--confirm-timeout", "20"]);
    assert_eq!(code, 0, "{json}\n{err}");
    for n in &lab.nodes {
        let r = row(&json, &n.name);
        assert_eq!(r["result"], "confirmed", "{r}");
        assert_eq!(n.current().as_deref(), r["to"].as_str(), "{}", n.name);
        assert_eq!(
            std::fs::read_to_string(n.root().join("etc/motd")).unwrap(),
            "one\n"
        );
    }
    for n in &lab.nodes {
        let r = row(&json, &n.name);
        assert_eq!(
            r["objects_sent"], 3,
            "the generation and its two contents: {r}"
        );
        assert!(
            r["bytes_sent"].as_u64().unwrap() < 65536 / 4,
            "64 KiB of repeated text travel compressed: {r}"
        );
    }

    for n in &lab.nodes {
        lab.declare(&n.name, &node_decl(&n.name, "two\\n", true));
    }
    let (code, json, err) = deploy(&lab, &["--parallel", "5", "--confirm-timeout", "20"]);
    assert_eq!(code, 0, "{json}\n{err}");
    for n in &lab.nodes {
        let r = row(&json, &n.name);
        assert_eq!(r["result"], "confirmed", "{r}");
        assert_eq!(
            r["objects_sent"], 2,
            "the generation and the one new content: {r}"
        );
        assert_eq!(r["changed"]["files"], 1, "{r}");
        assert_ne!(r["from"], r["to"]);
        assert_eq!(
            std::fs::read_to_string(n.root().join("etc/motd")).unwrap(),
            "two\n"
        );
    }
    for n in &lab.nodes {
        let r = row(&json, &n.name);
        assert!(
            r["bytes_sent"].as_u64().unwrap() < 65536 / 4,
            "the unchanged 64 KiB are not sent again: {r}"
        );
    }

    let status = lab.mesh(&["fleet", "status", "--json"]);
    let board: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    for line in board["nodes"].as_array().unwrap() {
        assert_eq!(line["reachable"], true, "{line}");
        assert_eq!(line["current"], line["built"], "{line}");
    }
    let text = String::from_utf8_lossy(&lab.mesh(&["fleet", "status"]).stdout).into_owned();
    assert!(
        text.lines().count() == 6 && text.contains("node4"),
        "{text}"
    );
}

/// A generation that closes port 22 (a managed node's base ruleset without an ssh opening):
/// the switch happens, no new connection gets through to confirm it, and the node switches back
/// by itself within the deadline — then it answers SSH again; the deploy says "reverted" and
/// exits non-zero, and the node's generations show the revert.
#[test]
fn a_node_that_closes_ssh_reverts_by_itself() {
    if !tools() {
        return;
    }
    let lab = Lab::new("lock", 2, |n| node_decl(n, "open\\n", true));
    let (code, json, err) = deploy(&lab, &["--confirm-timeout", "20"]);
    assert_eq!(code, 0, "{json}\n{err}");
    let before = lab.nodes[1].current().unwrap();

    lab.declare("node1", &node_decl("node1", "closed\\n", false));
    let started = Instant::now();
    let (code, json, err) = deploy(&lab, &["--confirm-timeout", "4"]);
    assert_eq!(code, 2, "reverted is a refusal: {json}\n{err}");
    assert_eq!(
        row(&json, "node0")["result"],
        "unchanged",
        "node0's generation did not change"
    );
    let r = row(&json, "node1");
    assert_eq!(r["result"], "reverted", "{r}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(lab.nodes[1].current().unwrap(), before, "back where it was");
    let answer = lab.ssh("node1", "true");
    assert!(
        answer.status.success(),
        "node1 answers SSH again: {}",
        String::from_utf8_lossy(&answer.stderr)
    );
    let generations =
        String::from_utf8_lossy(&lab.nodes[1].mesh(&["generations"]).stdout).into_owned();
    assert!(generations.contains("revert"), "{generations}");
    let deploys = String::from_utf8_lossy(&lab.nodes[1].mesh(&["deploys"]).stdout).into_owned();
    assert!(
        deploys.contains("reverted: no confirmation within 4 s"),
        "{deploys}"
    );
    let status: serde_json::Value =
        serde_json::from_slice(&lab.nodes[1].mesh(&["status", "--json"]).stdout).unwrap();
    assert_eq!(status["last_deploy"]["state"], "reverted", "{status}");
}

/// An unreachable node (its packets dropped on the way) is reported as such while the others
/// are deployed; a node whose host key changed is refused, as ssh refuses it.
#[test]
fn unreachable_and_changed_host_keys_are_reported_and_the_rest_goes_on() {
    if !tools() {
        return;
    }
    let mut lab = Lab::new("part", 3, |n| node_decl(n, "one\\n", true));
    lab.cut("node1");
    lab.nodes[2].change_host_key();
    let mut c = lab.command(&["deploy", "--json", "--confirm-timeout", "20"]);
    c.env("MESH_SSH_TIMEOUT", "2");
    let out = c.output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(3), "{json}");
    assert_eq!(row(&json, "node0")["result"], "confirmed", "{json}");
    assert_eq!(row(&json, "node1")["result"], "unreachable", "{json}");
    assert_eq!(row(&json, "node2")["result"], "host-key-refused", "{json}");
    assert!(lab.nodes[1].current().is_none() && lab.nodes[2].current().is_none());
}

/// The deployer killed once the nodes have switched and before it confirms: every node ends in
/// its old or its new generation — here the old, since no confirmation came — and its files
/// are that generation's.
#[test]
fn a_deployer_killed_mid_deploy_leaves_every_node_old_or_new() {
    if !tools() {
        return;
    }
    let lab = Lab::new("kill", 3, |n| node_decl(n, "old\\n", true));
    let (code, json, err) = deploy(&lab, &["--confirm-timeout", "20"]);
    assert_eq!(code, 0, "{json}\n{err}");
    let old: Vec<String> = lab.nodes.iter().map(|n| n.current().unwrap()).collect();
    for n in &lab.nodes {
        lab.declare(&n.name, &node_decl(&n.name, "new\\n", true));
    }
    let mut deployer = lab
        .command(&[
            "deploy",
            "--json",
            "--parallel",
            "3",
            "--confirm-timeout",
            "3",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed the moment any node has switched (before it can confirm it).
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let switched = lab.nodes.iter().any(|n| {
            String::from_utf8_lossy(&n.mesh(&["deploys", "--json"]).stdout).contains("\"switched\"")
        });
        if switched {
            break;
        }
        assert!(Instant::now() < until, "no node switched");
        std::thread::sleep(Duration::from_millis(20));
    }
    // `ip netns exec` runs mesh as its child: the whole group goes.
    let _ = std::process::Command::new("pkill")
        .args(["-9", "-P", &deployer.id().to_string()])
        .status();
    let _ = deployer.kill();
    let _ = deployer.wait();
    std::thread::sleep(Duration::from_secs(6));
    for (n, old) in lab.nodes.iter().zip(&old) {
        let deploys = String::from_utf8_lossy(&n.mesh(&["deploys", "--json"]).stdout).into_owned();
        assert!(
            !deploys.contains("\"switching\"") && !deploys.contains("\"switched\""),
            "{}: still in a deploy: {deploys}",
            n.name
        );
        let now = n.current().unwrap();
        let motd = std::fs::read_to_string(n.root().join("etc/motd")).unwrap();
        if now == *old {
            assert_eq!(motd, "old\n", "{}", n.name);
        } else {
            assert_eq!(
                motd, "new\n",
                "{}: a new generation must be confirmed",
                n.name
            );
            assert!(deploys.contains("confirmed"), "{}", n.name);
        }
        let status: serde_json::Value =
            serde_json::from_slice(&n.mesh(&["status", "--json"]).stdout).unwrap();
        assert_eq!(
            status["drift"].as_array().map(Vec::len),
            Some(0),
            "{}",
            n.name
        );
    }
}

/// `mesh fleet build` builds every node as the fleet says, in parallel, with the records
/// `mesh fleet records` fetched (none for a node never adopted), and `--check` gates it.
#[test]
fn fleet_build_records_and_the_ci_gate() {
    if !tools() {
        return;
    }
    let lab = Lab::new("ci", 2, |n| node_decl(n, "ci\\n", true));
    let records = lab.mesh(&["fleet", "records"]);
    assert!(
        records.status.success(),
        "{}",
        String::from_utf8_lossy(&records.stderr)
    );
    assert!(String::from_utf8_lossy(&records.stdout).contains("none (never adopted)"));
    let built = lab.mesh(&["fleet", "build", "--json"]);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&built.stdout).unwrap();
    let ids: Vec<(String, String)> = json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["node"].as_str().unwrap().to_owned(),
                r["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(ids.len(), 2);
    // The same id a single build of the node gives.
    let single = lab.mesh(&["build", path_of(&lab.dir.path().join("nodes/node0.ncl"))]);
    assert_eq!(
        String::from_utf8_lossy(&single.stdout)
            .lines()
            .last()
            .unwrap(),
        ids[0].1
    );
    let check = lab.dir.path().join("ids.txt");
    std::fs::write(
        &check,
        ids.iter()
            .map(|(n, i)| format!("{n} {i}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let ok = lab.mesh(&["fleet", "build", "--check", path_of(&check)]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    lab.declare("node1", &node_decl("node1", "changed\\n", true));
    let gate = lab.mesh(&["fleet", "build", "--check", path_of(&check)]);
    assert_eq!(gate.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&gate.stderr).contains("node1: builds to"));

    // A dry run sends what a node lacks and shows its plan; it switches nothing.
    let (code, json, err) = deploy(&lab, &["--dry-run"]);
    assert_eq!(code, 0, "{json}\n{err}");
    for n in &lab.nodes {
        let r = row(&json, &n.name);
        assert_eq!(r["result"], "planned", "{r}");
        assert_eq!(r["changed"]["files"], 2, "{r}");
        assert!(n.current().is_none(), "a dry run switches nothing");
    }
}
