//! Deploys at the edges, over real OpenSSH servers one per network namespace (see `sshlab.rs`):
//! a node that restarts in its confirm window, a switch that hangs past the deadline, a copy
//! that stalls or is cut, a deploy with nothing to do, the rows a script reads, a generation
//! switched by hand, and what travels for one changed file.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::sshlab::{node_decl, Lab};
use crate::support::have_root_tools;

fn tools() -> bool {
    have_root_tools(&["sshd", "ssh", "ssh-keygen", "ip", "nft", "ss"])
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn row<'a>(json: &'a serde_json::Value, node: &str) -> &'a serde_json::Value {
    json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["node"] == node)
        .unwrap_or_else(|| panic!("no row for {node}: {json}"))
}

/// A deploy started in the background: `mesh deploy --json ARGS`.
fn deploy_in_background(lab: &Lab, args: &[&str]) -> Child {
    let mut all = vec!["deploy", "--json"];
    all.extend_from_slice(args);
    lab.command(&all)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mesh deploy starts")
}

/// The node's deploys, the newest first, as its `mesh deploys --json` says.
fn deploys(node: &crate::sshlab::LabNode) -> Vec<serde_json::Value> {
    let out = node.mesh(&["deploys", "--json"]);
    json_of(&out)["deploys"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Waits until the node's newest deploy is in `state`.
fn wait_for_state(
    node: &crate::sshlab::LabNode,
    state: &str,
    within: Duration,
) -> serde_json::Value {
    let until = Instant::now() + within;
    loop {
        if let Some(d) = deploys(node).first() {
            if d["state"] == state {
                return d.clone();
            }
        }
        assert!(
            Instant::now() < until,
            "the deploy never got to {state}: {:?}",
            deploys(node)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A node restarts in the confirm window of a generation that closes port 22: what runs at boot
/// (`mesh reconcile`, then sshd) re-arms the deploy for the time that is left — its agent puts
/// the generation in force again and waits — and, no confirmation getting through, the node
/// goes back by itself at the deadline: the old generation in force, SSH answering, the deploy
/// `reverted`. Restarted after the deadline instead, the boot reverts it at once.
#[test]
fn a_restart_in_the_confirm_window_never_strands_the_node() {
    if !tools() {
        return;
    }
    let mut lab = Lab::new("boot", 1, |n| node_decl(n, "open\\n", true));
    let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "20"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let before = lab.nodes[0].current().unwrap();

    // Restarted before the deadline.
    lab.declare("node0", &node_decl("node0", "closed\\n", false));
    let deployer = deploy_in_background(&lab, &["--confirm-timeout", "20"]);
    let armed = wait_for_state(&lab.nodes[0], "switched", Duration::from_secs(30));
    lab.nodes[0].crash();
    let booted = lab.nodes[0].boot();
    let said = String::from_utf8_lossy(&booted.stdout).into_owned();
    assert!(
        booted.status.success() && said.contains("armed again"),
        "{said}{}",
        String::from_utf8_lossy(&booted.stderr)
    );
    let rearmed = deploys(&lab.nodes[0])[0].clone();
    assert_eq!(rearmed["token"], armed["token"]);
    assert_ne!(rearmed["agent"], armed["agent"], "a new agent carries it");
    // Reconcile again: the generation waiting is not reconcile's to put in force.
    let again = lab.nodes[0].mesh(&["reconcile"]);
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("waits for the confirmation")
            || String::from_utf8_lossy(&again.stderr).contains("is changing this node"),
        "{}{}",
        String::from_utf8_lossy(&again.stdout),
        String::from_utf8_lossy(&again.stderr)
    );
    let out = deployer.wait_with_output().unwrap();
    let json = json_of(&out);
    let r = row(&json, "node0");
    assert_eq!(r["result"], "reverted", "{json}");
    let ended = wait_for_state(&lab.nodes[0], "reverted", Duration::from_secs(30));
    assert!(
        ended["reason"]
            .as_str()
            .unwrap()
            .contains("no confirmation"),
        "{ended}"
    );
    assert_eq!(lab.nodes[0].current().unwrap(), before, "back where it was");
    let answer = lab.ssh("node0", "true");
    assert!(answer.status.success(), "SSH answers again");

    // Restarted, and booted only after the deadline: reverted at boot, at once.
    lab.declare("node0", &node_decl("node0", "closed again\\n", false));
    let deployer = deploy_in_background(&lab, &["--confirm-timeout", "6"]);
    wait_for_state(&lab.nodes[0], "switched", Duration::from_secs(30));
    lab.nodes[0].crash();
    std::thread::sleep(Duration::from_secs(7));
    let booted = lab.nodes[0].boot();
    let said = String::from_utf8_lossy(&booted.stdout).into_owned();
    assert!(
        said.contains("switched back: its deadline passed"),
        "{said}"
    );
    assert_eq!(lab.nodes[0].current().unwrap(), before);
    let ended = deploys(&lab.nodes[0])[0].clone();
    assert_eq!(ended["state"], "reverted", "{ended}");
    assert!(lab.ssh("node0", "true").status.success());
    let _ = deployer.wait_with_output();

    // A generation that keeps SSH open survives the restart: confirmed over a new connection.
    lab.declare("node0", &node_decl("node0", "kept\\n", true));
    let deployer = deploy_in_background(&lab, &["--confirm-timeout", "30"]);
    wait_for_state(&lab.nodes[0], "switched", Duration::from_secs(30));
    lab.nodes[0].crash();
    lab.nodes[0].boot();
    let out = deployer.wait_with_output().unwrap();
    let json = json_of(&out);
    assert_eq!(row(&json, "node0")["result"], "confirmed", "{json}");
    assert_eq!(
        std::fs::read_to_string(lab.nodes[0].root().join("etc/motd")).unwrap(),
        "kept\n"
    );
    let status = lab.nodes[0].mesh(&["reconcile", "--dry-run", "--json"]);
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        status.contains("would_change") && !status.contains("waiting"),
        "the generation confirmed is reconcile's again: {status}"
    );
}

/// A listener that accepts connections and never answers: an engine that hangs.
fn hanging_engine(path: &std::path::Path) {
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming() {
            held.push(c);
        }
    });
}

/// A switch that hangs (its container engine never answers) is stopped at the deploy's
/// deadline and the node left in — here, kept in — the generation in force before; the deploy
/// says the switch did not finish, the deployer gives its verdict within a margin of the
/// deadline, and the node's lock is free again.
#[test]
fn a_hung_switch_ends_at_the_deadline() {
    if !tools() {
        return;
    }
    let lab = Lab::new("hang", 1, |n| node_decl(n, "one\\n", true));
    let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "20"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let before = lab.nodes[0].current().unwrap();

    // The node's mesh, with an engine that never answers.
    let socket = lab.dir.path().join("hang.sock");
    hanging_engine(&socket);
    let wrapper = lab.dir.path().join("mesh-hung");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nDOCKER_HOST=unix://{} exec {} \"$@\"\n",
            socket.display(),
            env!("CARGO_BIN_EXE_mesh")
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fleet = std::fs::read_to_string(lab.fleet()).unwrap();
    std::fs::write(
        lab.fleet(),
        fleet.replace(env!("CARGO_BIN_EXE_mesh"), wrapper.to_str().unwrap()),
    )
    .unwrap();
    let decl = node_decl("node0", "two\\n", true).replace(
        "{ name = \"motd\"",
        "{ name = \"app\", config = fun s => { containers = [{ name = \"app\", image = \"busybox\" }] } },\n    { name = \"motd\"",
    );
    lab.declare("node0", &decl);

    let started = Instant::now();
    let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "8"]);
    let took = started.elapsed();
    let json = json_of(&out);
    let r = row(&json, "node0");
    assert_ne!(r["result"], "confirmed", "{json}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap_or("")
            .contains("did not finish"),
        "{json}"
    );
    assert!(
        took < Duration::from_secs(8 + 20),
        "the verdict took {took:?}"
    );
    assert_eq!(lab.nodes[0].current().unwrap(), before);
    let d = deploys(&lab.nodes[0])[0].clone();
    assert!(d["state"] == "reverted" || d["state"] == "failed", "{d}");
    assert!(
        d["reason"].as_str().unwrap().contains("did not finish"),
        "{d}"
    );
    // The lock is free: a command that needs it runs.
    let status = lab.nodes[0].mesh(&["reconcile"]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let _ = Command::new("true").status();
}
