//! Trust: a node with trusted signers switches only to generations signed by one of them —
//! checked before anything changes, interoperable with `ssh-keygen -Y` — and a deploy key
//! restricted to `mesh serve` deploys, and does nothing else (over real OpenSSH servers, one
//! per network namespace, see `sshlab.rs`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::node_fixture::{declaration, snapshot, Fixture, MOTD};
use crate::sshlab::{node_decl, Lab};
use crate::support::have_root_tools;

fn tools() -> bool {
    have_root_tools(&["ssh-keygen", "ssh-agent", "ssh-add", "ip", "nft"])
}

/// A new ed25519 key in `dir`, commented `name`: its private key's path.
pub(crate) fn keygen(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    crate::support::ssh_keygen(&key, name);
    key
}

fn public(key: &Path) -> String {
    std::fs::read_to_string(key.with_extension("pub"))
        .unwrap()
        .trim()
        .to_owned()
}

/// Writes the node's trusted signers: a `NAME KEY` line each.
fn trust(f: &Fixture, signers: &[(&str, &Path)]) {
    let text: String = signers
        .iter()
        .map(|(name, key)| format!("{name} {}\n", public(key)))
        .collect();
    std::fs::create_dir_all(f.at("/etc/mesh")).unwrap();
    std::fs::write(f.at("/etc/mesh/trusted-signers"), text).unwrap();
}

/// Builds `decl` into the node's store: its id.
fn built(f: &Fixture, name: &str, motd: &str) -> String {
    f.write_decl(name, &declaration(motd, false));
    let ran = f.ok(&["build", f.decl(name).to_str().unwrap()]);
    ran.stdout.lines().last().unwrap().trim().to_owned()
}

fn profile(f: &Fixture) -> String {
    f.ok(&["generations", "--json"]).stdout
}

/// A node with trusted signers refuses, with nothing changed (files, profile, firewall), a
/// generation that has no signature, one signed by a key it does not trust, and one whose
/// signature is over another id or cut short; it accepts one a trusted signer signed (by key
/// file, or through the ssh-agent, checked by `ssh-keygen -Y verify` too). A rollback across a
/// change of the trusted signers needs no new signature.
#[test]
fn only_a_trusted_signers_generation_is_switched_to() {
    if !tools() {
        return;
    }
    let f = Fixture::new();
    let keys = tempfile::tempdir().unwrap();
    let (ci, stranger, next) = (
        keygen(keys.path(), "ci"),
        keygen(keys.path(), "stranger"),
        keygen(keys.path(), "next"),
    );
    let a = built(&f, "a.ncl", "a\\n");
    f.ok(&["switch", f.decl("a.ncl").to_str().unwrap()]);
    trust(&f, &[("ci", &ci)]);
    let b = built(&f, "b.ncl", "b\\n");

    let before = (f.snapshot(), profile(&f));
    let firewall = f.ok(&["reconcile", "--dry-run", "--json"]).stdout;
    let refused = |why: &str| {
        let ran = f.mesh(&["switch", "--generation", &b]);
        assert_eq!(ran.code, 2, "{why}: {}{}", ran.stdout, ran.stderr);
        assert!(
            ran.stderr.contains(&b[..12]) && ran.stderr.contains("this node trusts: ci (SHA256:"),
            "{why}: {}",
            ran.stderr
        );
        assert_eq!(
            (f.snapshot(), profile(&f)),
            before,
            "{why}: nothing changed"
        );
        assert_eq!(f.ok(&["reconcile", "--dry-run", "--json"]).stdout, firewall);
        ran.stderr
    };
    assert!(refused("unsigned").contains("it has no signature"));

    f.ok(&["sign", &b, "--key", stranger.to_str().unwrap()]);
    assert!(refused("a stranger's").contains("a key it does not trust"));

    // A signature by the trusted key over another generation, put beside this one.
    let other = tempfile::tempdir().unwrap();
    f.ok(&[
        "sign",
        &a,
        "--key",
        ci.to_str().unwrap(),
        "--out",
        other.path().to_str().unwrap(),
    ]);
    let hex = |id: &str| id.trim_start_matches("b3:").to_owned();
    let over_a = std::fs::read_to_string(other.path().join(format!("{}.sig", hex(&a)))).unwrap();
    let dir = f.state().join("store/signatures").join(hex(&b));
    let put = |text: &str| {
        std::fs::create_dir_all(&dir).unwrap();
        let name = mesh_lib::BlobHash::of(text.as_bytes()).hex().to_owned();
        std::fs::write(dir.join(format!("{name}.sig")), text).unwrap();
    };
    put(&over_a);
    assert!(refused("over another id").contains("not valid over"));
    put(&over_a[..over_a.len() / 2]);
    refused("cut short");

    // Signed through the agent: ssh-keygen signs with the key the agent holds.
    let agent = keys.path().join("agent.sock");
    let mut running = Command::new("ssh-agent")
        .args(["-D", "-a"])
        .arg(&agent)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let added = Command::new("ssh-add")
        .arg(&ci)
        .env("SSH_AUTH_SOCK", &agent)
        .output()
        .unwrap();
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let out = tempfile::tempdir().unwrap();
    let mut sign = f.command(&[
        "sign",
        &b,
        "--key",
        ci.with_extension("pub").to_str().unwrap(),
        "--out",
        out.path().to_str().unwrap(),
    ]);
    sign.env("SSH_AUTH_SOCK", &agent);
    let signed = crate::support::run(sign);
    let _ = running.kill();
    let _ = running.wait();
    assert_eq!(signed.code, 0, "{}", signed.stderr);

    // Any tool checks it: ssh-keygen -Y verify, with the trusted signers file as it is.
    let mut verify = Command::new("ssh-keygen")
        .args(["-Y", "verify", "-f"])
        .arg(f.at("/etc/mesh/trusted-signers"))
        .args(["-I", "ci", "-n", "mesh-generation", "-s"])
        .arg(out.path().join(format!("{}.sig", hex(&b))))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    verify
        .stdin
        .take()
        .unwrap()
        .write_all(b.as_bytes())
        .unwrap();
    let verified = verify.wait_with_output().unwrap();
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );

    let ran = f.ok(&["switch", "--generation", &b]);
    assert_eq!(f.read(MOTD).as_deref(), Some("b\n"), "{}", ran.stdout);

    // The signers change: what was in force before goes back without a new signature; a new
    // generation signed by the old key does not pass.
    trust(&f, &[("next", &next)]);
    f.ok(&["rollback"]);
    assert_eq!(f.read(MOTD).as_deref(), Some("a\n"));
    f.ok(&["switch", "--generation", &b]);
    let c = built(&f, "c.ncl", "c\\n");
    f.ok(&["sign", &c, "--key", ci.to_str().unwrap()]);
    let ran = f.mesh(&["switch", "--generation", &c]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("this node trusts: next"),
        "{}",
        ran.stderr
    );
}

/// The authorized_keys line of a key restricted to `mesh serve` for `node`.
fn restricted_line(lab: &Lab, key: &Path) -> String {
    let n = &lab.nodes[0];
    format!(
        "command=\"{} --state-dir {} --root {} serve\",restrict {}\n",
        env!("CARGO_BIN_EXE_mesh"),
        n.state().display(),
        n.root().display(),
        public(key)
    )
}

/// Over SSH: a node with trusted signers refuses an unsigned deploy, with nothing changed, and
/// accepts one the deployer signs; a deploy key restricted to `mesh serve`
/// (`command="mesh serve",restrict`) deploys unchanged, and cannot read a file, open a shell or
/// forward a port.
#[test]
fn a_restricted_deploy_key_deploys_signed_generations_only() {
    if !tools() || !have_root_tools(&["sshd", "ssh"]) {
        return;
    }
    let lab = Lab::new("trust", 1, |n| node_decl(n, "one\\n", true));
    let key = lab.dir.path().join("client_key");
    std::fs::write(
        lab.dir.path().join("authorized_keys"),
        restricted_line(&lab, &key),
    )
    .unwrap();
    let signer = keygen(lab.dir.path(), "ci");
    let n = &lab.nodes[0];
    n.trust(&signer);

    let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "20"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(2), "{json}");
    let r = &json["nodes"][0];
    assert_eq!(r["result"], "refused", "{json}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("signed by no key this node trusts"),
        "{r}"
    );
    assert!(n.current().is_none(), "nothing switched");

    let out = lab.mesh(&[
        "deploy",
        "--json",
        "--confirm-timeout",
        "20",
        "--sign",
        "--key",
        signer.to_str().unwrap(),
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["nodes"][0]["result"], "confirmed", "{json}");
    assert_eq!(
        std::fs::read_to_string(n.root().join("etc/motd")).unwrap(),
        "one\n"
    );

    // The same key, for anything else.
    let shadow = lab.ssh("node0", "cat /etc/shadow");
    assert!(!shadow.status.success());
    assert!(!String::from_utf8_lossy(&shadow.stdout).contains("root:"));
    assert!(
        String::from_utf8_lossy(&shadow.stderr).contains("this key deploys only"),
        "{}",
        String::from_utf8_lossy(&shadow.stderr)
    );
    let shell = lab.ssh("node0", "");
    assert!(!shell.status.success(), "no shell");
    let other = lab.ssh(
        "node0",
        &format!("{} gc --keep 0", env!("CARGO_BIN_EXE_mesh")),
    );
    assert!(!other.status.success(), "no other mesh command");
    // A port forwarded through it: sshd refuses the channel.
    let forward = Command::new("ip")
        .args(["netns", "exec", &lab.deployer, "ssh", "-F"])
        .arg(lab.dir.path().join("ssh_config"))
        .args([
            "-o",
            "BatchMode=yes",
            "-o",
            "ExitOnForwardFailure=yes",
            "-W",
            "127.0.0.1:22",
            "node0",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!forward.status.success(), "forwarding refused");
    assert!(
        String::from_utf8_lossy(&forward.stderr).contains("administratively prohibited")
            || String::from_utf8_lossy(&forward.stderr).contains("open failed"),
        "{}",
        String::from_utf8_lossy(&forward.stderr)
    );
}

/// `mesh deploy --json` from the lab's deployer: its exit code and its node's row.
fn deploy_row(lab: &Lab, extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut args = vec!["deploy", "--json", "--confirm-timeout", "20"];
    args.extend_from_slice(extra);
    let out = lab.mesh(&args);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (out.status.code(), json["nodes"][0].clone())
}

/// Over a deploy key (`mesh serve`), a node switches only to what a signer it trusts *now*
/// vouches for, stated for it: a generation deployed before the node trusted any signer (never
/// signed), and one signed only by a signer since removed, are refused — exit 2, the node's
/// root and state byte for byte as they were — although each was in force before; so is a
/// dry run of one. The root operator's own `mesh rollback` on the node still goes back. A
/// deploy the node refuses on receipt says `refused` (exit 2) and sent none of its objects.
/// And no `MESH_*` variable a client sends (`SetEnv`, which this sshd accepts) moves `mesh
/// serve` off its own command line: not its namespace, not its host key.
#[test]
fn a_deploy_key_switches_only_to_what_a_signer_trusted_now_states() {
    if !tools() || !have_root_tools(&["sshd", "ssh"]) {
        return;
    }
    let mut lab = Lab::new("revoked", 1, |n| node_decl(n, "v0\\n", true));
    let key = lab.dir.path().join("client_key");
    let authorized = lab.dir.path().join("authorized_keys");
    std::fs::write(&authorized, restricted_line(&lab, &key)).unwrap();
    let (old, new) = (keygen(lab.dir.path(), "old"), keygen(lab.dir.path(), "new"));
    let (code, row) = deploy_row(&lab, &[]);
    assert_eq!(
        (code, row["result"].as_str()),
        (Some(0), Some("confirmed")),
        "{row}"
    );
    let v0 = lab.nodes[0].current().unwrap();

    // The node trusts `old` from now on; it signs v1 and v2.
    lab.nodes[0].trust(&old);
    let signed_by_old = ["--sign", "--key", old.to_str().unwrap()];
    lab.declare("node0", &node_decl("node0", "v1\\n", true));
    let (code, row) = deploy_row(&lab, &signed_by_old);
    assert_eq!(
        (code, row["result"].as_str()),
        (Some(0), Some("confirmed")),
        "{row}"
    );
    let v1 = lab.nodes[0].current().unwrap();

    // A deploy the node refuses (unsigned, to a node that trusts signers): refused, and not
    // one of its objects sent.
    lab.declare("node0", &node_decl("node0", "v-unsigned\\n", true));
    let (code, row) = deploy_row(&lab, &[]);
    assert_eq!(
        (code, row["result"].as_str()),
        (Some(2), Some("refused")),
        "{row}"
    );
    let store = mesh_lib::Store::open(&lab.nodes[0].state()).unwrap();
    let to: mesh_lib::GenerationId = row["to"].as_str().unwrap().parse().unwrap();
    assert!(
        !store.has_generation(&to),
        "its generation was not sent: {row}"
    );
    assert!(
        !store.has_blob(&mesh_lib::BlobHash::of(b"v-unsigned\n")),
        "nor its file"
    );

    lab.declare("node0", &node_decl("node0", "v2\\n", true));
    let (code, row) = deploy_row(&lab, &signed_by_old);
    assert_eq!(
        (code, row["result"].as_str()),
        (Some(0), Some("confirmed")),
        "{row}"
    );
    let v2 = lab.nodes[0].current().unwrap();

    // `old` is revoked: the node trusts `new` only.
    lab.nodes[0].trust(&new);
    let n = &lab.nodes[0];
    // The root and the state directory as they are, but for the state's lock (each command
    // that takes it writes its pid there).
    let lockless = |n: &crate::sshlab::LabNode| {
        let lock = n.state().join("lock");
        let mut state = snapshot(&n.state());
        state.retain(|entry| entry.0 != lock.display().to_string());
        (snapshot(&n.root()), state)
    };
    let before = lockless(n);
    for (id, why) in [
        (&v1, "signed by no key this node trusts"),
        (&v0, "it has no signature"),
    ] {
        for request in [
            format!("mesh switch --generation {id} --confirm-within 60 --json"),
            format!("mesh switch --generation {id} --dry-run --json"),
        ] {
            let out = lab.ssh("node0", &request);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{request}: {stderr}");
            assert!(stderr.contains(why), "{request}: {stderr}");
            assert_eq!(n.current().as_deref(), Some(v2.as_str()));
            assert!(lockless(n) == before, "{request} changed nothing");
        }
    }
    // The operator, root on the node, goes back as ever.
    let back = n.mesh(&["rollback"]);
    assert!(
        back.status.success(),
        "{}",
        String::from_utf8_lossy(&back.stderr)
    );
    assert_eq!(n.current().as_deref(), Some(v1.as_str()));

    // What a client sends with SetEnv reaches the forced command's environment (checked
    // with a key whose forced command prints it)...
    lab.nodes[0].sshd_option("AcceptEnv MESH_*");
    lab.ssh_option("SetEnv MESH_NETNS=mesh-no-such-netns MESH_HOST_KEY=/nonexistent/evil-key MESH_ROOT=/nonexistent/evil-root");
    std::fs::write(
        &authorized,
        format!("command=\"env\",restrict {}\n", public(&key)),
    )
    .unwrap();
    let env = lab.ssh("node0", "");
    assert!(
        String::from_utf8_lossy(&env.stdout).contains("MESH_HOST_KEY=/nonexistent/evil-key"),
        "sshd passes the client's variables: {}",
        String::from_utf8_lossy(&env.stderr)
    );
    // ... and `mesh serve` reads none of them.
    std::fs::write(&authorized, restricted_line(&lab, &key)).unwrap();
    let out = lab.ssh("node0", "mesh status --json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = &lab.nodes[0];
    assert_eq!(
        status["host_key"]["path"].as_str(),
        Some(
            n.root()
                .join("etc/ssh/ssh_host_ed25519_key")
                .to_str()
                .unwrap()
        ),
        "{status}"
    );
    assert_eq!(
        status["current"]["id"].as_str(),
        Some(v1.as_str()),
        "{status}"
    );
}
