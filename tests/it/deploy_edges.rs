//! Deploys at the edges, over real OpenSSH servers one per network namespace (see `sshlab.rs`):
//! a node that restarts in its confirm window, a switch that hangs past the deadline, a copy
//! that stalls or is cut, a deploy with nothing to do, the rows a script reads, a generation
//! switched by hand, and what travels for one changed file.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::sshlab::{decl_with_data, node_decl, write_data, Lab};
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

/// A first deploy of the lab's nodes, which must go through.
fn deployed(lab: &Lab) -> serde_json::Value {
    let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "20"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    json_of(&out)
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
    deployed(&lab);
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
    deployed(&lab);
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
}

/// A copy cut halfway (the link slowed, then its packets dropped): the deploy fails within
/// the I/O timeout with the right reason — the copy stalled, nothing switched — counting the
/// bytes that went; the node is in its old generation, and keeps the objects that arrived
/// whole, so the next deploy sends only the rest.
#[test]
fn a_copy_cut_halfway_is_said_and_resumed() {
    if !tools() {
        return;
    }
    let lab = Lab::new("cut", 1, |n| node_decl(n, "one\\n", true));
    deployed(&lab);
    let before = lab.nodes[0].current().unwrap();

    write_data(&lab, "node0", 40, 100_000, "cut");
    lab.declare("node0", &decl_with_data("node0", "two\\n", 40));
    lab.throttle("node0", "2mbit");
    let deployer = deploy_in_background(&lab, &["--confirm-timeout", "20", "--io-timeout", "3"]);
    std::thread::sleep(Duration::from_secs(4));
    lab.cut("node0");
    let cut_at = Instant::now();
    let out = deployer.wait_with_output().unwrap();
    let verdict = cut_at.elapsed();
    let json = json_of(&out);
    let r = row(&json, "node0");
    assert_eq!(r["result"], "failed", "{json}");
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.contains("the copy failed or stalled") && reason.contains("nothing was switched"),
        "{reason}"
    );
    let first_bytes = r["bytes_sent"].as_u64().unwrap();
    assert!(
        first_bytes > 200_000,
        "the bytes that went are counted: {r}"
    );
    assert!(
        verdict < Duration::from_secs(15),
        "the verdict took {verdict:?}"
    );
    assert_eq!(lab.nodes[0].current().unwrap(), before, "nothing switched");

    // The node's end gives up on its own (its I/O timeout) and keeps what arrived whole.
    std::thread::sleep(Duration::from_secs(5));
    lab.uncut("node0");
    lab.unthrottle("node0");
    let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "20"]);
    let json = json_of(&out);
    let r = row(&json, "node0");
    assert_eq!(r["result"], "confirmed", "{json}");
    let sent = r["objects_sent"].as_u64().unwrap();
    assert!(
        sent < 41,
        "only what had not arrived is sent again ({sent} of 41 objects): {r}"
    );
    assert_eq!(
        std::fs::read_to_string(lab.nodes[0].root().join("etc/motd")).unwrap(),
        "two\n"
    );
}

/// A copy whose receiving process on the node is killed (not the link: the node's `mesh store
/// serve`, with what it had read in memory) resumes: what it had checked was written down as
/// it came, the next deploy's question of what the node lacks stores it first, and only the
/// rest is sent — no more than what the node lacks and a quarter MiB.
#[test]
fn a_copy_whose_receiver_is_killed_sends_only_the_rest_again() {
    if !tools() {
        return;
    }
    let lab = Lab::new("kill", 1, |n| node_decl(n, "one\\n", true));
    deployed(&lab);
    write_data(&lab, "node0", 40, 100_000, "kill");
    lab.declare("node0", &decl_with_data("node0", "two\\n", 40));
    lab.throttle("node0", "2mbit");
    let deployer = deploy_in_background(&lab, &["--confirm-timeout", "20", "--io-timeout", "3"]);
    std::thread::sleep(Duration::from_secs(6));
    let killed = kill_in(&lab.nodes[0].netns, &["store", "serve"]);
    assert!(
        killed > 0,
        "the node's receiving process was found and killed"
    );
    let out = deployer.wait_with_output().unwrap();
    assert_eq!(row(&json_of(&out), "node0")["result"], "failed");
    lab.unthrottle("node0");

    // What the node holds of the data now, as its store answers the next deploy's question.
    let data: Vec<mesh_lib::transfer::Object> = (0..40)
        .map(|i| {
            let path = lab.dir.path().join(format!("nodes/data/node0-{i:03}"));
            mesh_lib::transfer::Object::Blob(mesh_lib::BlobHash::of(&std::fs::read(path).unwrap()))
        })
        .collect();
    let store = mesh_lib::Store::open(&lab.nodes[0].state()).unwrap();
    let lacking = mesh_lib::transfer::missing(&store, &data).len();
    assert!(
        lacking < 40,
        "what arrived before the kill was kept: {lacking} of 40 still lacking"
    );

    let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "20"]);
    let json = json_of(&out);
    let r = row(&json, "node0");
    assert_eq!(r["result"], "confirmed", "{json}");
    // What the node received, as it said, and what was handed to ssh: each at most what it
    // lacked and 256 KiB.
    for field in ["bytes_received", "bytes_sent"] {
        let bytes = r[field].as_u64().unwrap();
        assert!(
            bytes <= lacking as u64 * 100_000 + 256 * 1024,
            "only what the node lacked went again: {field} {bytes} for {lacking} objects of 100 kB: {r}"
        );
    }
    assert!(
        r["bytes_received"].as_u64().unwrap() >= lacking as u64 * 100_000 / 2,
        "the node received what it lacked: {r}"
    );
}

/// Kills (-9) every process in network namespace `ns` whose command line has all of `words`:
/// how many.
fn kill_in(ns: &str, words: &[&str]) -> usize {
    let out = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .unwrap();
    let mut killed = 0;
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if words.iter().all(|w| args.iter().any(|a| a == w)) {
            let _ = Command::new("kill").args(["-9", pid]).status();
            killed += 1;
        }
    }
    killed
}

/// A deploy to a node that already runs the generation: `unchanged`, nothing switched, no
/// second connection, exit 0 — and the row says the generation in force, as the node said it.
#[test]
fn a_deploy_with_nothing_to_do_switches_nothing() {
    if !tools() {
        return;
    }
    let lab = Lab::new("same", 1, |n| node_decl(n, "one\\n", true));
    let json = deployed(&lab);
    assert_eq!(
        row(&json, "node0")["in_force"],
        row(&json, "node0")["to"],
        "{json}"
    );
    let generations = lab.nodes[0].mesh(&["generations", "--json"]).stdout;
    let logins = lab.logins("node0");
    let json = deployed(&lab);
    let r = row(&json, "node0");
    assert_eq!(r["result"], "unchanged", "{json}");
    assert_eq!(r["in_force"], r["to"], "{json}");
    assert_eq!(
        lab.logins("node0"),
        logins + 1,
        "one connection, no confirmation's"
    );
    assert_eq!(
        lab.nodes[0].mesh(&["generations", "--json"]).stdout,
        generations,
        "no switch, not even a no-op one"
    );
    let text = String::from_utf8_lossy(&lab.mesh(&["deploy", "--confirm-timeout", "20"]).stdout)
        .into_owned();
    assert!(text.contains("unchanged"), "{text}");
}

/// The confirmation's connection prefers the classical key exchange — it carries a one-time
/// token, nothing to hide for years — while the deploy's own keeps ssh's post-quantum default;
/// a node whose sshd takes only the post-quantum exchange still gets its confirmation.
#[test]
fn the_confirmation_prefers_a_classical_key_exchange() {
    if !tools() {
        return;
    }
    let mut lab = Lab::new("kex", 2, |n| node_decl(n, "one\\n", true));
    lab.nodes[0].sshd_option("LogLevel DEBUG1");
    lab.nodes[1].sshd_option("LogLevel DEBUG1");
    lab.nodes[1].sshd_option("KexAlgorithms sntrup761x25519-sha512@openssh.com");
    let seen: Vec<usize> = lab.nodes.iter().map(|n| n.key_exchanges().len()).collect();
    let json = deployed(&lab);
    for n in ["node0", "node1"] {
        assert_eq!(row(&json, n)["result"], "confirmed", "{json}");
    }
    let node0 = lab.nodes[0].key_exchanges()[seen[0]..].to_vec();
    assert!(
        node0.len() == 2
            && node0[0].starts_with("sntrup761x25519")
            && node0[1] == "curve25519-sha256",
        "the deploy's connection (ssh's post-quantum default), then the confirmation's: {node0:?}"
    );
    assert_eq!(
        lab.nodes[1].key_exchanges()[seen[1]..],
        [
            "sntrup761x25519-sha512@openssh.com",
            "sntrup761x25519-sha512@openssh.com"
        ],
        "a server that takes only the post-quantum exchange gets it"
    );
}

/// The mesh's connections read the operator's ssh configuration first, then open through the
/// mesh's own proxy (the TCP connection with `TCP_NODELAY`, handed to ssh): ssh itself says so
/// (`ssh -G`). A `ProxyCommand` of the operator's wins over it — here one that notes each
/// connection and then hands over to the mesh's proxy, so both connections of a deploy (its
/// own and the confirmation's) go through it and the descriptor passing works. The shell ssh
/// runs the proxy with reads no start-up file.
#[test]
fn connections_read_the_operator_s_config_first_then_open_without_nagle() {
    if !tools() {
        return;
    }
    let lab = Lab::new("nodelay", 1, |n| node_decl(n, "one\\n", true));
    assert_eq!(row(&deployed(&lab), "node0")["result"], "confirmed");
    let wrapper = lab.deployer_state().join("ssh/config");
    let text = std::fs::read_to_string(&wrapper).unwrap();
    let mesh = env!("CARGO_BIN_EXE_mesh");
    let lab_config = lab.dir.path().join("ssh_config");
    assert!(
        text.contains(&format!("Include \"{}\"", lab_config.display())),
        "{text}"
    );
    let effective = std::process::Command::new("ssh")
        .arg("-F")
        .arg(&wrapper)
        .args(["-G", "node0"])
        .output()
        .unwrap();
    let effective = String::from_utf8_lossy(&effective.stdout).into_owned();
    assert!(
        effective.contains(&format!("proxycommand '{mesh}' __mesh-ssh-proxy %h %p"))
            && effective.contains("proxyusefdpass yes")
            && effective.contains("user root"),
        "the operator's settings, then the mesh's proxy: {effective}"
    );

    // ssh runs the proxy through the user's shell, its input a socket: bash so started with
    // SHLVL unset (a timer's, a CI job's) took itself for a command sshd ran and read
    // ~/.bashrc, on every connection of every node.
    let home = tempfile::tempdir().unwrap();
    let sourced = home.path().join("sourced");
    std::fs::write(
        home.path().join(".bashrc"),
        format!("echo read >> '{}'\n", sourced.display()),
    )
    .unwrap();
    lab.declare("node0", &node_decl("node0", "rc\n", true));
    let mut c = lab.command(&["deploy", "--json", "--confirm-timeout", "20"]);
    c.env("HOME", home.path())
        .env("SHELL", "/bin/bash")
        .env_remove("SHLVL");
    let out = c.output().unwrap();
    assert_eq!(row(&json_of(&out), "node0")["result"], "confirmed");
    assert!(
        !sourced.exists(),
        "the proxy's shell read ~/.bashrc: {:?}",
        std::fs::read_to_string(&sourced)
    );

    let marker = lab.dir.path().join("proxied");
    lab.ssh_option(&format!(
        "ProxyCommand sh -c 'echo %h >> {}; exec {mesh} __mesh-ssh-proxy %h %p'\n  ProxyUseFdpass yes",
        marker.display()
    ));
    lab.declare("node0", &node_decl("node0", "two\\n", true));
    assert_eq!(row(&deployed(&lab), "node0")["result"], "confirmed");
    let proxied = std::fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(
        proxied.lines().count(),
        2,
        "the deploy's connection and the confirmation's, through the operator's proxy: {proxied:?}"
    );
}

/// An operator's `ProxyCommand` that relays bytes (here busybox's `nc`, as `ssh -W` would)
/// never passes a descriptor: the mesh's `ProxyUseFdpass` must not reach it. It did, as
/// the mesh's own configuration names it under `Host *`, and ssh waited for a descriptor
/// ("proxy dialer did not pass back a connection") on every connection of such a node.
#[test]
fn an_operator_s_relaying_proxy_is_used_as_it_is() {
    if !tools() {
        return;
    }
    let lab = Lab::new("relay", 1, |n| node_decl(n, "one\n", true));
    let marker = lab.dir.path().join("relayed");
    lab.ssh_option(&format!(
        "ProxyCommand sh -c 'echo %h >> {}; exec /bin/busybox nc %h %p'",
        marker.display()
    ));
    assert_eq!(row(&deployed(&lab), "node0")["result"], "confirmed");
    let relayed = std::fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(
        relayed.lines().count(),
        2,
        "the deploy's connection and the confirmation's, through the operator's relay: {relayed:?}"
    );
    let status = lab
        .command(&["fleet", "status", "--json"])
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().lines().count(),
        3,
        "status reached the node through the relay too"
    );
}

/// The deployer keeps the record each node said last and builds with it while ssh connects;
/// that build is used only when the node says the same record: one that differs (here, a
/// cached record the node never had, which does not even parse) is set aside, and the node
/// gets the generation built with what it says.
#[test]
fn a_build_made_while_connecting_counts_only_for_the_record_the_node_says() {
    if !tools() {
        return;
    }
    let lab = Lab::new("guess", 1, |n| node_decl(n, "one\\n", true));
    deployed(&lab);
    let seen = lab.deployer_state().join("deploy/records/node0.record");
    assert_eq!(
        std::fs::read(&seen).unwrap(),
        b"",
        "the node said it has no record"
    );
    std::fs::write(&seen, b"{ not a record").unwrap();
    lab.declare("node0", &node_decl("node0", "two\\n", true));
    let json = deployed(&lab);
    let r = row(&json, "node0");
    assert_eq!(r["result"], "confirmed", "{json}");
    let built = lab.mesh(&["fleet", "build", "--json"]);
    let built: serde_json::Value = serde_json::from_slice(&built.stdout).unwrap();
    assert_eq!(
        built["nodes"][0]["id"], r["to"],
        "the generation the node's own record builds: {built}"
    );
    assert_eq!(
        std::fs::read(&seen).unwrap(),
        b"",
        "the cache says it again"
    );
}

/// The fingerprint ssh-keygen gives a public key file.
fn fingerprint(key: &std::path::Path) -> String {
    let out = Command::new("ssh-keygen")
        .arg("-lf")
        .arg(key)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_owned()
}

/// Rows a script can trust: a refused host key names the pinned fingerprint and the one
/// offered; a reverted node's row carries the last lines of the node's log of it and the
/// generation in force after, read from the node.
#[test]
fn rows_say_fingerprints_logs_and_what_is_in_force() {
    if !tools() {
        return;
    }
    let mut lab = Lab::new("rows", 2, |n| node_decl(n, "one\\n", true));
    deployed(&lab);
    let pinned = fingerprint(&lab.nodes[1].dir.join("host_key.pub"));
    lab.nodes[1].change_host_key();
    let offered = fingerprint(&lab.nodes[1].dir.join("host_key.pub"));
    lab.declare("node0", &node_decl("node0", "closed\\n", false));
    let before = lab.nodes[0].current().unwrap();
    let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "5"]);
    let json = json_of(&out);
    let refused = row(&json, "node1");
    assert_eq!(refused["result"], "host-key-refused", "{json}");
    let reason = refused["reason"].as_str().unwrap();
    assert!(
        reason.contains(&pinned) && reason.contains(&offered),
        "pinned {pinned}, offered {offered}: {reason}"
    );
    let reverted = row(&json, "node0");
    assert_eq!(reverted["result"], "reverted", "{json}");
    assert_eq!(reverted["in_force"], before.as_str(), "{reverted}");
    let log = reverted["log"].as_array().expect("the node's log lines");
    assert!(!log.is_empty(), "{reverted}");
}

/// A generation switched to by hand on a node, which the fleet did not build: `fleet status`
/// flags it `foreign`, and `mesh deploy` leaves it as it is (exit 2) unless told
/// `--replace-foreign`.
#[test]
fn a_generation_switched_by_hand_is_foreign() {
    if !tools() {
        return;
    }
    let lab = Lab::new("hand", 1, |n| node_decl(n, "one\\n", true));
    deployed(&lab);
    let by_hand = lab.dir.path().join("by-hand.ncl");
    std::fs::write(&by_hand, node_decl("node0", "by hand\\n", true)).unwrap();
    let ran = lab.nodes[0].mesh(&["switch", by_hand.to_str().unwrap()]);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let hand = lab.nodes[0].current().unwrap();

    let board = json_of(&lab.mesh(&["fleet", "status", "--json"]));
    assert_eq!(board["nodes"][0]["foreign"], true, "{board}");
    let text = String::from_utf8_lossy(&lab.mesh(&["fleet", "status"]).stdout).into_owned();
    assert!(text.contains("foreign"), "{text}");

    let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "20"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let json = json_of(&out);
    assert_eq!(row(&json, "node0")["result"], "foreign", "{json}");
    assert_eq!(lab.nodes[0].current().unwrap(), hand, "left as it is");

    let out = lab.mesh(&[
        "deploy",
        "--json",
        "--confirm-timeout",
        "20",
        "--replace-foreign",
    ]);
    let json = json_of(&out);
    assert_eq!(row(&json, "node0")["result"], "confirmed", "{json}");
    let board = json_of(&lab.mesh(&["fleet", "status", "--json"]));
    assert_eq!(board["nodes"][0]["foreign"], false, "{board}");
}

/// A node keeps only its newest deploys' records (it prunes the others as it arms a new one):
/// a generation a deploy put in force long ago, and the operator went back to by hand, is
/// still the fleet's — the profile's log says a deploy put it there — so the next deploy
/// replaces it without `--replace-foreign`.
#[test]
fn a_rollback_to_a_deployed_generation_whose_record_was_pruned_is_not_foreign() {
    if !tools() {
        return;
    }
    let lab = Lab::new("pruned", 1, |n| node_decl(n, "one\\n", true));
    deployed(&lab);
    let first = lab.nodes[0].current().unwrap();
    lab.declare("node0", &node_decl("node0", "two\\n", true));
    deployed(&lab);
    // The records of both deploys gone, as after many more deploys.
    let records = lab.nodes[0].state().join("deploys");
    for e in std::fs::read_dir(&records).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    let ran = lab.nodes[0].mesh(&["rollback"]);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert_eq!(lab.nodes[0].current().unwrap(), first);

    let board = json_of(&lab.mesh(&["fleet", "status", "--json"]));
    assert_eq!(board["nodes"][0]["foreign"], false, "{board}");
    let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "20"]);
    let json = json_of(&out);
    assert_eq!(row(&json, "node0")["result"], "confirmed", "{json}");
    assert_ne!(lab.nodes[0].current().unwrap(), first);
}

/// One changed file in a node of 201 files: the generation travels as a delta from the one in
/// force and the content compressed — far less than the generation's own encoding — and on
/// the wire (both SSH connections) less than the rsync + ssh loop a user would otherwise run.
#[test]
fn one_changed_file_sends_a_delta() {
    if !tools() {
        return;
    }
    let lab = Lab::new("delta", 1, |n| node_decl(n, "one\\n", true));
    write_data(&lab, "node0", 199, 200, "delta");
    lab.declare("node0", &decl_with_data("node0", "one\\n", 199));
    deployed(&lab);
    lab.declare("node0", &decl_with_data("node0", "two\\n", 199));
    let wire = lab.wire("node0");
    let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "20"]);
    let on_wire = lab.wire("node0") - wire;
    let json = json_of(&out);
    let r = row(&json, "node0");
    assert_eq!(r["result"], "confirmed", "{json}");
    assert_eq!(r["objects_sent"], 2, "{r}");
    let store = mesh_lib::Store::open(&lab.deployer_state()).unwrap();
    let id: mesh_lib::GenerationId = r["to"].as_str().unwrap().parse().unwrap();
    let encoded = store
        .generation(&id)
        .unwrap()
        .canonical_bytes()
        .unwrap()
        .len() as u64;
    let sent = r["bytes_sent"].as_u64().unwrap();
    assert!(
        sent * 5 < encoded,
        "{sent} bytes sent for a generation of {encoded}"
    );
    assert!(on_wire < 17_000, "{on_wire} bytes on the wire");
}

/// An operator's `ProxyCommand` that leaves a process behind holding ssh's stderr (here a
/// `sleep` started in the background) does not hold the deploy until that process ends: the
/// confirmation's `ssh` has exited, its answer read, and what it said on stderr is read on
/// for a moment only. The deploy used to wait for the `sleep` (60.5 s) before confirming.
#[test]
fn a_proxy_leaving_a_process_behind_does_not_hold_the_deploy() {
    if !tools() {
        return;
    }
    let lab = Lab::new("linger", 1, |n| node_decl(n, "one\n", true));
    let mesh = env!("CARGO_BIN_EXE_mesh");
    let marker = lab.dir.path().join("lingered");
    lab.ssh_option(&format!(
        "ProxyCommand sh -c 'echo %h >> {}; (exec sleep 60.5 > /dev/null < /dev/null &); exec {mesh} __mesh-ssh-proxy %h %p'\n  ProxyUseFdpass yes",
        marker.display()
    ));
    lab.declare("node0", &node_decl("node0", "two\\n", true));
    let started = std::time::Instant::now();
    let out = lab
        .command(&["deploy", "--json", "--confirm-timeout", "40"])
        .output()
        .unwrap();
    let took = started.elapsed();
    let lingering = std::process::Command::new("pkill")
        .args(["-f", "^sleep 60.5$"])
        .status();
    assert_eq!(
        row(&json_of(&out), "node0")["result"],
        "confirmed",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let proxied = std::fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(
        proxied.lines().count(),
        2,
        "both connections proxied: {proxied:?}"
    );
    // Not a speed measure: a bound far below the 60.5 s the left-behind process lives.
    assert!(
        took < std::time::Duration::from_secs(30),
        "the deploy waited {took:?} for what the proxy left behind ({lingering:?})"
    );
}

/// The story issue 51 tells, on a node reached over SSH: adopted, its modules taken, flipped,
/// rolled back to the adoption, then forward by `mesh switch --generation` of the flip's
/// generation. The node's record says managed, as the generation in force does: `mesh fleet
/// status` builds what runs (not foreign), and a deploy is not refused.
#[test]
fn a_node_switched_by_id_across_the_flip_is_not_foreign() {
    if !tools() {
        return;
    }
    let lab = Lab::new("across", 1, |n| node_decl(n, "one\\n", true));
    let node = &lab.nodes[0];
    let decl = lab.dir.path().join("nodes/node0.ncl");
    let ok = |args: &[&str]| {
        let ran = node.mesh(args);
        assert!(
            ran.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&ran.stderr)
        );
    };
    ok(&["adopt", decl.to_str().unwrap()]);
    ok(&["take", "ssh", "motd"]);
    ok(&["flip", "--force"]);
    let flipped = node.current().unwrap();
    ok(&["rollback", "--to", "1"]);
    let board = json_of(&lab.mesh(&["fleet", "status", "--json"]));
    assert_eq!(board["nodes"][0]["mode"], "adopted", "{board}");

    ok(&["switch", "--generation", &flipped]);
    assert_eq!(node.current().unwrap(), flipped);
    let board = json_of(&lab.mesh(&["fleet", "status", "--json"]));
    let line = &board["nodes"][0];
    assert_eq!(line["mode"], "managed", "{board}");
    assert_eq!(line["current"], flipped.as_str(), "{board}");
    assert_eq!(
        line["built"],
        flipped.as_str(),
        "the fleet builds what runs: {board}"
    );
    assert_eq!(line["foreign"], false, "{board}");
    let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "20"]);
    let json = json_of(&out);
    assert!(out.status.success(), "{json}");
    assert_ne!(row(&json, "node0")["result"], "foreign", "{json}");
    assert_eq!(
        node.current().unwrap(),
        flipped,
        "nothing else to put in force"
    );
}
