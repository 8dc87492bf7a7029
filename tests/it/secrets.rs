//! Secrets: age files of the fleet's tree, encrypted to the node's SSH host key (made here with
//! `ssh-keygen`) and an operator's, decrypted only on the node at switch time. After every
//! test, the plaintexts appear in no file of the state directory and in no output.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::node_fixture::Fixture;
use crate::support::{have_root_tools, mesh, run, Ran};

const V1: &str = "hunter2-first-value-9f3a";
const V2: &str = "hunter2-second-value-7c1e";

/// Makes an ed25519 key pair at `path` (and `path.pub`); the public key's line.
pub(crate) fn keygen(path: &Path) -> String {
    crate::support::ssh_keygen(path, "test")
}

/// A node with a secret: its host key under the root, an operator's key, `secrets.ncl`
/// declaring `readers` of `secrets/db.age`, and the declaration `s.ncl`.
struct Lab {
    f: Fixture,
    operator: PathBuf,
    host_pub: String,
    operator_pub: String,
    /// Every output of every command, to grep for plaintexts.
    outputs: std::cell::RefCell<String>,
}

impl Lab {
    fn new(readers: &str) -> Self {
        let f = Fixture::new();
        let host_pub = keygen(&f.at("/etc/ssh/ssh_host_ed25519_key"));
        let operator = f.dir.path().join("keys/operator");
        let operator_pub = keygen(&operator);
        let lab = Self {
            f,
            operator,
            host_pub,
            operator_pub,
            outputs: Default::default(),
        };
        lab.rules(readers);
        lab.f.write_decl("s.ncl", &declaration());
        lab
    }

    fn rules(&self, readers: &str) {
        write_rules(
            self.f.dir.path(),
            &[("n1", &self.host_pub)],
            &[("op", &self.operator_pub)],
            &[("secrets/db.age", readers)],
        );
    }

    fn keep(&self, ran: Ran) -> Ran {
        let mut all = self.outputs.borrow_mut();
        all.push_str(&ran.stdout);
        all.push_str(&ran.stderr);
        ran
    }

    fn mesh(&self, args: &[&str]) -> Ran {
        self.keep(self.f.mesh(args))
    }

    fn ok(&self, args: &[&str]) -> Ran {
        let ran = self.mesh(args);
        assert_eq!(ran.code, 0, "mesh {args:?}:\n{}{}", ran.stdout, ran.stderr);
        ran
    }

    /// `mesh secret edit secrets/db.age` with an editor that writes `value`.
    fn edit(&self, value: &str) {
        let ran = self.keep(seal(
            self.f.dir.path(),
            &self.f.state(),
            &self.operator,
            "secrets/db.age",
            value,
        ));
        assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    }

    fn decl(&self) -> String {
        self.f.decl("s.ncl").display().to_string()
    }

    /// Neither plaintext anywhere: not in the fleet's tree (which holds the state directory and
    /// the root), except in the files the secrets are for, nor in any output so far.
    fn assert_never_shown(&self) {
        let targets: Vec<PathBuf> = ["/etc/app/db.pass", "/etc/app/app.conf"]
            .iter()
            .map(|p| self.f.at(p))
            .collect();
        assert_nowhere(
            &[V1, V2],
            &[self.f.dir.path()],
            &targets,
            &self.outputs.borrow(),
        );
    }
}

/// Writes the tree's `secrets.ncl`: the nodes' and operators' keys by name, and each secret
/// file's readers (Nickel text, e.g. `"n1", "op"`).
pub(crate) fn write_rules(
    tree: &Path,
    nodes: &[(&str, &str)],
    operators: &[(&str, &str)],
    files: &[(&str, &str)],
) {
    let keys = |list: &[(&str, &str)]| {
        list.iter()
            .map(|(name, key)| format!("{name} = \"{key}\", "))
            .collect::<String>()
    };
    let files: String = files
        .iter()
        .map(|(file, readers)| format!("\"{file}\" = [{readers}], "))
        .collect();
    std::fs::write(
        tree.join("secrets.ncl"),
        format!(
            "let mesh = import \"mesh.ncl\" in\nmesh.secrets {{\n  nodes = {{ {} }},\n  operators = {{ {} }},\n  files = {{ {files} }},\n}}\n",
            keys(nodes),
            keys(operators)
        ),
    )
    .unwrap();
}

/// `mesh secret edit FILE` in the fleet's `tree` (run here, as an operator would, with the
/// operator's key), with an editor that writes `value`: the secret encrypted to the readers
/// `secrets.ncl` declares. The value is given to the editor through a file in a folder of its
/// own, removed before this returns.
pub(crate) fn seal(tree: &Path, state: &Path, operator: &Path, file: &str, value: &str) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let editor = dir.path().join("editor.sh");
    std::fs::write(&editor, "#!/bin/sh\ncat \"$MESH_TEST_VALUE\" > \"$1\"\n").unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let value_file = dir.path().join("value");
    std::fs::write(&value_file, value).unwrap();
    let mut c = mesh(state);
    c.current_dir(tree)
        .env("EDITOR", &editor)
        .env("MESH_TEST_VALUE", &value_file)
        .args(["secret", "edit", file, "-i"])
        .arg(operator);
    let ran = run(c);
    drop(dir);
    ran
}

/// The hostile grep: none of `values` in any file under `places` (but the files in `except`,
/// which the secrets are for), nor in `outputs` (every output and log the test saw).
pub(crate) fn assert_nowhere(values: &[&str], places: &[&Path], except: &[PathBuf], outputs: &str) {
    for v in values {
        assert!(!outputs.contains(v), "a plaintext in an output:\n{outputs}");
        for place in places {
            for entry in walkdir::WalkDir::new(place) {
                let entry = entry.unwrap();
                if !entry.file_type().is_file() || except.iter().any(|e| e == entry.path()) {
                    continue;
                }
                let bytes = std::fs::read(entry.path()).unwrap();
                assert!(
                    !bytes.windows(v.len()).any(|w| w == v.as_bytes()),
                    "a plaintext in {}",
                    entry.path().display()
                );
            }
        }
    }
}

fn declaration() -> String {
    r#"let mesh = import "mesh.ncl" in
mesh.node {
  name = "n1",
  settings = {
    ports = { store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820 },
    private_network = { range = "10.77.0.0/24", address = "10.77.0.5" },
  },
  modules = [
    { name = "app", config = fun s => { files = [
      { path = "/etc/app/db.pass", secret = "secrets/db.age" },
      { path = "/etc/app/app.conf", content = "user=app\npassword={{secret.db}}\n", secrets = { db = "secrets/db.age" } },
    ] } },
  ],
}
"#
    .into()
}

/// A secret is decrypted at switch time, owner-only, whole or placed into a template; a new
/// value is switched to, `mesh diff` says "secret changed" and never the value, and a rollback
/// brings the old value back byte for byte. The build needs no key: a state directory without
/// any, and no host key, builds the same id.
#[test]
fn a_secret_is_decrypted_at_switch_and_rolled_back() {
    if !have_root_tools(&["ip", "ssh-keygen"]) {
        return;
    }
    let lab = Lab::new(r#""n1", "op""#);
    lab.edit(V1);
    let armored = std::fs::read_to_string(lab.f.dir.path().join("secrets/db.age")).unwrap();
    assert!(armored.starts_with("-----BEGIN AGE ENCRYPTED FILE-----"));

    // The same id without any key: another state directory, no host key, no operator key.
    let elsewhere = tempfile::tempdir().unwrap();
    let mut c = mesh(elsewhere.path());
    c.env_remove("HOME").args(["build", &lab.decl()]);
    let keyless = lab.keep(run(c));
    assert_eq!(keyless.code, 0, "{}", keyless.stderr);
    let built = lab.ok(&["build", &lab.decl()]);
    assert_eq!(keyless.last_line(), built.last_line());
    // The store holds the ciphertext.
    let store = mesh_lib::Store::open(&lab.f.state()).unwrap();
    assert!(store
        .blob(&mesh_lib::BlobHash::of(armored.as_bytes()))
        .is_ok());

    lab.ok(&["switch", &lab.decl()]);
    assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), V1);
    assert_eq!(
        lab.f.read("/etc/app/app.conf").unwrap(),
        format!("user=app\npassword={V1}\n")
    );
    assert_eq!(lab.f.meta("/etc/app/db.pass"), (0o400, 0, 0));
    assert_eq!(lab.f.meta("/etc/app/app.conf"), (0o400, 0, 0));
    // Switching again changes nothing: the plaintext on the machine is what is declared.
    let again = lab.ok(&["switch", &lab.decl(), "--dry-run"]);
    assert!(!again.stdout.contains("update"), "{}", again.stdout);

    lab.edit(V2);
    let dry = lab.ok(&["switch", &lab.decl(), "--dry-run"]);
    assert!(dry.stdout.contains("secret changed"), "{}", dry.stdout);
    lab.ok(&["switch", &lab.decl()]);
    assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), V2);
    let diff = lab.ok(&["diff"]);
    assert!(diff.stdout.contains("secret changed"), "{}", diff.stdout);
    assert!(!diff.stdout.contains("BEGIN AGE"), "{}", diff.stdout);
    lab.ok(&["show", built.last_line()]);
    lab.ok(&["status", "--json"]);

    lab.ok(&["rollback"]);
    assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), V1);
    assert_eq!(
        lab.f.read("/etc/app/app.conf").unwrap(),
        format!("user=app\npassword={V1}\n")
    );
    // gc keeps the ciphertexts of the generations it keeps: the newer value comes back.
    lab.ok(&["gc", "--keep", "2"]);
    lab.ok(&["rollback"]);
    assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), V2);

    // The host key elsewhere: not found under the root, found where MESH_HOST_KEY says.
    let moved = lab.f.dir.path().join("keys/host");
    std::fs::rename(lab.f.at("/etc/ssh/ssh_host_ed25519_key"), &moved).unwrap();
    let lost = lab.mesh(&["switch", &lab.decl()]);
    assert_eq!(lost.code, 3, "{}", lost.stderr);
    let mut c = lab.f.command(&["switch", &lab.decl()]);
    c.env("MESH_HOST_KEY", &moved);
    let found = lab.keep(run(c));
    assert_eq!(found.code, 0, "{}", found.stderr);
    assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), V2);

    // The recipients, said without a key.
    let who = lab.ok(&[
        "secret",
        "recipients",
        &lab.f
            .dir
            .path()
            .join("secrets/db.age")
            .display()
            .to_string(),
    ]);
    assert!(
        who.stdout.contains("n1") && who.stdout.contains("can read"),
        "{}",
        who.stdout
    );
    lab.assert_never_shown();
}

/// A node that is not among a secret's recipients is refused by the build, naming the secret
/// and the node; a node whose host key is not the one the secret is encrypted to refuses the
/// switch before anything changes, naming the secret and its recipients.
#[test]
fn a_node_that_cannot_read_a_secret_is_refused_with_nothing_changed() {
    if !have_root_tools(&["ip", "ssh-keygen"]) {
        return;
    }
    let lab = Lab::new(r#""op""#);
    lab.edit(V1);
    let refused = lab.mesh(&["build", &lab.decl()]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("secrets/db.age")
            && refused
                .stderr
                .contains("node n1 is not among its recipients"),
        "{}",
        refused.stderr
    );

    // Declared a reader, and encrypted to the declared key; but the machine's key is another.
    lab.rules(r#""n1", "op""#);
    lab.edit(V2);
    std::fs::remove_file(lab.f.at("/etc/ssh/ssh_host_ed25519_key")).unwrap();
    std::fs::remove_file(lab.f.at("/etc/ssh/ssh_host_ed25519_key.pub")).unwrap();
    keygen(&lab.f.at("/etc/ssh/ssh_host_ed25519_key"));
    let before = lab.f.snapshot();
    let switched = lab.mesh(&["switch", &lab.decl()]);
    assert_eq!(switched.code, 1, "{}{}", switched.stdout, switched.stderr);
    assert!(
        switched.stderr.contains("secrets/db.age")
            && switched.stderr.contains("n1, op")
            && switched.stderr.contains("nothing was changed"),
        "{}",
        switched.stderr
    );
    assert_eq!(before, lab.f.snapshot(), "nothing changed under the root");

    // No key at all: refused the same way.
    std::fs::remove_file(lab.f.at("/etc/ssh/ssh_host_ed25519_key")).unwrap();
    let keyless = lab.mesh(&["switch", &lab.decl()]);
    assert_eq!(keyless.code, 3, "{}", keyless.stderr);
    assert!(keyless.stderr.contains("host key"), "{}", keyless.stderr);
    assert_eq!(before.len(), lab.f.snapshot().len() + 1);
    lab.assert_never_shown();
}

/// A declaration whose container takes an environment variable from a secret: [`declaration`]'s
/// node and settings, its module the container's.
fn container_declaration(environment: &str) -> String {
    let node = declaration();
    let head = &node[..node.find("  modules = [").unwrap()];
    format!(
        r#"{head}  modules = [
    {{ name = "app", config = fun s => {{ containers = [
      {{ name = "web", image = "busybox:1", {environment}secret_environment = {{ DB_PASSWORD = "secrets/db.age" }} }},
    ] }} }},
  ],
}}
"#
    )
}

/// A container's secret environment is a secret as a file's is: a build refuses a node not
/// among its recipients, naming the container and the variable; a variable given both in
/// clear and as a secret is refused; the build needs no key (the same id without one) and
/// `mesh show` names the secret's file, never its value; a switch whose node cannot decrypt
/// it is refused before anything changes (the engine is never asked).
#[test]
fn a_containers_secret_environment_is_refused_as_a_files_secret_is() {
    if !have_root_tools(&["ip", "ssh-keygen"]) {
        return;
    }
    let lab = Lab::new(r#""op""#);
    lab.f.write_decl("s.ncl", &container_declaration(""));
    lab.edit(V1);
    let refused = lab.mesh(&["build", &lab.decl()]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("container web, environment variable DB_PASSWORD: secret secrets/db.age")
            && refused
                .stderr
                .contains("node n1 is not among its recipients"),
        "{}",
        refused.stderr
    );

    lab.rules(r#""n1", "op""#);
    lab.edit(V2);
    lab.f.write_decl(
        "s.ncl",
        &container_declaration(r#"environment = { DB_PASSWORD = "x" }, "#),
    );
    let twice = lab.mesh(&["build", &lab.decl()]);
    assert_eq!(twice.code, 1, "{}", twice.stderr);
    assert!(
        twice
            .stderr
            .contains("DB_PASSWORD is given in `environment` and in `secret_environment`"),
        "{}",
        twice.stderr
    );

    lab.f.write_decl("s.ncl", &container_declaration(""));
    let built = lab.ok(&["build", &lab.decl()]);
    let elsewhere = tempfile::tempdir().unwrap();
    let mut c = mesh(elsewhere.path());
    c.env_remove("HOME").args(["build", &lab.decl()]);
    let keyless = lab.keep(run(c));
    assert_eq!(keyless.code, 0, "{}", keyless.stderr);
    assert_eq!(keyless.last_line(), built.last_line());
    let shown = lab.ok(&["show", built.last_line()]);
    assert!(
        shown
            .stdout
            .contains("secret  environment DB_PASSWORD from secrets/db.age (for n1, op)"),
        "{}",
        shown.stdout
    );

    // The machine's host key is not the one the secret is encrypted to.
    std::fs::remove_file(lab.f.at("/etc/ssh/ssh_host_ed25519_key")).unwrap();
    std::fs::remove_file(lab.f.at("/etc/ssh/ssh_host_ed25519_key.pub")).unwrap();
    keygen(&lab.f.at("/etc/ssh/ssh_host_ed25519_key"));
    let before = lab.f.snapshot();
    let mut c = lab.f.command(&["switch", &lab.decl()]);
    // An engine that would not answer: the refusal comes before it is asked.
    c.env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
    let switched = lab.keep(run(c));
    assert_eq!(switched.code, 1, "{}{}", switched.stdout, switched.stderr);
    assert!(
        switched
            .stderr
            .contains("container web, environment variable DB_PASSWORD: cannot decrypt secret")
            && switched.stderr.contains("nothing was changed"),
        "{}",
        switched.stderr
    );
    assert_eq!(before, lab.f.snapshot(), "nothing changed under the root");
    lab.assert_never_shown();
}

/// A declaration that imports a secret file as text gets its ciphertext, never its plaintext.
#[test]
fn importing_a_secret_as_text_gets_ciphertext() {
    if !have_root_tools(&["ip", "ssh-keygen"]) {
        return;
    }
    let lab = Lab::new(r#""n1", "op""#);
    lab.edit(V1);
    lab.f.write_decl(
        "s.ncl",
        &declaration().replace(
            r#"{ path = "/etc/app/db.pass", secret = "secrets/db.age" },"#,
            r#"{ path = "/etc/app/db.pass", content = import "secrets/db.age" as 'Text },"#,
        ),
    );
    lab.ok(&["switch", &lab.decl()]);
    let text = lab.f.read("/etc/app/db.pass").unwrap();
    assert!(
        text.starts_with("-----BEGIN AGE ENCRYPTED FILE-----"),
        "{text}"
    );
    assert!(!text.contains(V1));
    lab.assert_never_shown();
}

/// On a real systemd (PID 1 in a container, see `systemd_node.rs`): a secret file reloads the
/// unit it configures and a template of it restarts its unit, when the secret's plaintext
/// changes; a rollback brings the old value back byte for byte and calls the same reload and
/// restart; a secret re-encrypted to more recipients (`mesh secret rekey`, the same plaintext)
/// is a new generation that calls nothing. Neither plaintext is anywhere on the node but in
/// the two files: not in the state directory, `/etc`, `/var`, `/run`, `/tmp`, the journal, or
/// any output.
#[test]
fn a_changed_secret_reloads_its_units_and_a_rekeyed_one_nothing_on_systemd() {
    if !crate::services::tools() || !have_root_tools(&["ssh-keygen"]) {
        return;
    }
    let node = crate::systemd_node::SystemdNode::boot("secret");
    crate::services::predecessor_unit(&node, "pred");
    crate::services::predecessor_unit(&node, "other");
    // The node's host key, made here and put where sshd keeps it; the operator's key stays here.
    let keys = tempfile::tempdir().unwrap();
    let host_pub = keygen(&keys.path().join("host"));
    let operator = keys.path().join("operator");
    let operator_pub = keygen(&operator);
    node.ok_sh("mkdir -p /etc/ssh");
    let copied = Command::new("docker")
        .arg("cp")
        .arg(keys.path().join("host"))
        .arg(format!("{}:/etc/ssh/ssh_host_ed25519_key", node.name))
        .status()
        .unwrap();
    assert!(copied.success());
    node.ok_sh(
        "chown 0:0 /etc/ssh/ssh_host_ed25519_key && chmod 0600 /etc/ssh/ssh_host_ed25519_key",
    );

    let tree = node.dir.path();
    let here_state = keys.path().join("operator-state");
    let outputs = std::cell::RefCell::new(String::new());
    let keep = |stdout: &str, stderr: &str| {
        let mut all = outputs.borrow_mut();
        all.push_str(stdout);
        all.push_str(stderr);
    };
    let seal_as = |value: &str| {
        let ran = seal(tree, &here_state, &operator, "secrets/db.age", value);
        keep(&ran.stdout, &ran.stderr);
        assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    };
    let ok = |args: &[&str]| {
        let ran = node.mesh(args);
        keep(&ran.stdout, &ran.stderr);
        assert_eq!(ran.code, 0, "mesh {args:?}:\n{}{}", ran.stdout, ran.stderr);
        ran.stdout
    };
    write_rules(
        tree,
        &[("sd", &host_pub)],
        &[("op", &operator_pub)],
        &[("secrets/db.age", r#""sd", "op""#)],
    );
    let v = node.declare(
        "v.ncl",
        &crate::services::decl(
            r#"    { name = "app", config = fun s => { files = [
      { path = "/etc/pred/db.pass", secret = "secrets/db.age", reloads = ["pred.service"] },
      { path = "/etc/other/app.conf", content = "password={{secret.db}}\n", secrets = { db = "secrets/db.age" }, restarts = ["other.service"] },
    ] } },"#,
        ),
    );
    let counts = || (node.count("pred-reloads"), node.count("other-starts"));
    let values = |value: &str| {
        assert_eq!(node.ok_sh("cat /etc/pred/db.pass"), value);
        assert_eq!(
            node.ok_sh("cat /etc/other/app.conf"),
            format!("password={value}\n")
        );
        assert_eq!(
            node.ok_sh("stat -c '%a %u %g' /etc/pred/db.pass /etc/other/app.conf"),
            "400 0 0\n400 0 0\n"
        );
    };

    seal_as(V1);
    let ran = ok(&["switch", &v]);
    assert!(
        ran.contains("reload   pred.service: /etc/pred/db.pass created")
            && ran.contains("restart  other.service: /etc/other/app.conf created"),
        "{ran}"
    );
    values(V1);
    assert_eq!(counts(), (1, 2));

    seal_as(V2);
    let dry = ok(&["switch", &v, "--dry-run"]);
    assert!(dry.contains("secret changed"), "{dry}");
    assert_eq!(counts(), (1, 2), "a dry run calls nothing");
    ok(&["switch", &v]);
    values(V2);
    assert_eq!(counts(), (2, 3));

    let back = ok(&["rollback"]);
    values(V1);
    assert_eq!(
        counts(),
        (3, 4),
        "the rollback reloads and restarts: {back}"
    );

    ok(&["switch", &v]);
    values(V2);
    assert_eq!(counts(), (4, 5));
    let before = node.current();

    // Re-encrypted to one more operator: another ciphertext, the same plaintext.
    let ciphertext = std::fs::read(tree.join("secrets/db.age")).unwrap();
    let next_pub = keygen(&keys.path().join("next"));
    write_rules(
        tree,
        &[("sd", &host_pub)],
        &[("op", &operator_pub), ("next", &next_pub)],
        &[("secrets/db.age", r#""sd", "op", "next""#)],
    );
    let mut c = crate::support::mesh(&here_state);
    c.current_dir(tree)
        .args(["secret", "rekey", "-i"])
        .arg(&operator);
    let rekeyed = run(c);
    keep(&rekeyed.stdout, &rekeyed.stderr);
    assert_eq!(rekeyed.code, 0, "{}", rekeyed.stderr);
    assert!(
        rekeyed
            .stdout
            .contains("secrets/db.age: re-encrypted to next, op, sd"),
        "{}",
        rekeyed.stdout
    );
    assert_ne!(
        ciphertext,
        std::fs::read(tree.join("secrets/db.age")).unwrap()
    );
    let json = ok(&["switch", &v, "--json"]);
    let out: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert!(out["services"].get("jobs").is_none(), "{out}");
    assert_ne!(node.current(), before, "a new generation");
    values(V2);
    assert_eq!(counts(), (4, 5), "the same plaintext calls nothing");

    // The hostile grep: the node's files and its journal, the test's folder, every output.
    let found = node.sh(&format!(
        "grep -rlF -D skip -e {V1} -e {V2} /etc /var /run /tmp /root | grep -vx -e /etc/pred/db.pass -e /etc/other/app.conf"
    ));
    assert!(
        found.stdout.trim().is_empty(),
        "a plaintext in: {}",
        found.stdout
    );
    let journal = node.ok_sh("journalctl --no-pager -o cat 2>/dev/null || true");
    keep(&journal, "");
    assert_nowhere(&[V1, V2], &[tree, keys.path()], &[], &outputs.borrow());
}

/// `mesh fleet status --json`'s line for the lab's one node.
fn fleet_status(
    lab: &crate::sshlab::Lab,
    keep: &dyn Fn(&std::process::Output),
) -> serde_json::Value {
    let out = lab.mesh(&["fleet", "status", "--json"]);
    keep(&out);
    let board: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    board["nodes"][0].clone()
}

/// A lab node's declaration with the secret: whole in one file, placed into another's text.
fn lab_decl(name: &str) -> String {
    crate::sshlab::node_decl(name, "one\\n", true).replace(
        "  modules = [\n",
        r#"  modules = [
    { name = "app", config = fun s => { files = [
      { path = "/etc/app/db.pass", secret = "secrets/db.age" },
      { path = "/etc/app/app.conf", content = "user=app\npassword={{secret.db}}\n", secrets = { db = "secrets/db.age" } },
    ] } },
"#,
    )
}

/// An operator's key (with a state folder of its own), and the lab's one node made by `mesh
/// genesis --host-key` with the key its sshd serves with, under its root where the record says
/// it is.
struct Keyed {
    keys: tempfile::TempDir,
    operator: PathBuf,
    operator_pub: String,
    operator_state: PathBuf,
    host_pub: String,
    /// What `mesh genesis --json` printed.
    genesis: std::process::Output,
}

fn keyed(lab: &crate::sshlab::Lab) -> Keyed {
    let n = &lab.nodes[0];
    let keys = tempfile::tempdir().unwrap();
    let operator = keys.path().join("operator");
    let operator_pub = keygen(&operator);
    let operator_state = keys.path().join("state");
    let host_pub = std::fs::read_to_string(n.dir.join("host_key.pub"))
        .unwrap()
        .trim()
        .to_owned();
    std::fs::create_dir_all(n.root().join("etc/mesh")).unwrap();
    std::fs::hard_link(n.dir.join("host_key"), n.root().join("etc/mesh/host_key")).unwrap();
    let plain = keys.path().join("plain.ncl");
    std::fs::write(&plain, crate::sshlab::node_decl(&n.name, "one\\n", true)).unwrap();
    let genesis = n.mesh(&[
        "genesis",
        plain.to_str().unwrap(),
        "--host-key",
        "/etc/mesh/host_key",
        "--json",
    ]);
    assert!(
        genesis.status.success(),
        "{}",
        String::from_utf8_lossy(&genesis.stderr)
    );
    Keyed {
        keys,
        operator,
        operator_pub,
        operator_state,
        host_pub,
        genesis,
    }
}

/// Over SSH (real OpenSSH servers, see `sshlab.rs`): the node's host key is the one its sshd
/// was made with, where `mesh genesis --host-key` recorded it; `mesh deploy` sends the
/// ciphertext and the node decrypts it with that key. A node the secret is not encrypted to
/// is refused before the deploy is armed — the row names the secret and its recipients,
/// nothing on the node changed, nothing was reverted; a node `secrets.ncl` does not name
/// among the readers is refused by the deployer's build. `mesh fleet status` says whether the
/// node's host key (as the node reports it) can read its secrets. No plaintext in the lab's folders
/// (the nodes' roots but the two files, their state, their logs, the deployer's) or outputs,
/// and nothing in the node's state directory, deploys' logs included, readable by its group or
/// others.
#[test]
fn a_deploy_decrypts_with_the_nodes_host_key_and_refuses_a_node_that_cannot() {
    if !have_root_tools(&["sshd", "ssh", "ssh-keygen", "ip", "nft", "ss"]) {
        return;
    }
    let lab = crate::sshlab::Lab::new("secret", 1, lab_decl);
    let n = &lab.nodes[0];
    let tree = lab.dir.path();
    let Keyed {
        keys,
        operator,
        operator_pub,
        operator_state,
        host_pub,
        genesis,
    } = keyed(&lab);
    // With --json, standard output is one JSON object; what it said on the way is on stderr.
    serde_json::from_slice::<serde_json::Value>(&genesis.stdout).unwrap_or_else(|e| {
        panic!(
            "not one JSON object ({e}): {}",
            String::from_utf8_lossy(&genesis.stdout)
        )
    });
    assert!(
        String::from_utf8_lossy(&genesis.stderr).contains("the node's host key is at"),
        "{}",
        String::from_utf8_lossy(&genesis.stderr)
    );

    let outputs = std::cell::RefCell::new(String::new());
    let keep = |out: &std::process::Output| {
        let mut all = outputs.borrow_mut();
        all.push_str(&String::from_utf8_lossy(&out.stdout));
        all.push_str(&String::from_utf8_lossy(&out.stderr));
    };
    let seal_as = |value: &str| {
        let ran = seal(tree, &operator_state, &operator, "secrets/db.age", value);
        outputs
            .borrow_mut()
            .push_str(&(ran.stdout.clone() + &ran.stderr));
        assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    };
    let rekey = || {
        let mut c = crate::support::mesh(&operator_state);
        c.current_dir(tree)
            .args(["secret", "rekey", "-i"])
            .arg(&operator);
        let ran = run(c);
        outputs
            .borrow_mut()
            .push_str(&(ran.stdout.clone() + &ran.stderr));
        assert_eq!(ran.code, 0, "{}", ran.stderr);
    };
    let deploy = || {
        let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "20"]);
        keep(&out);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), json["nodes"][0].clone())
    };
    let values = |value: &str| {
        assert_eq!(
            std::fs::read_to_string(n.root().join("etc/app/db.pass")).unwrap(),
            value
        );
        assert_eq!(
            std::fs::read_to_string(n.root().join("etc/app/app.conf")).unwrap(),
            format!("user=app\npassword={value}\n")
        );
    };

    write_rules(
        tree,
        &[("node0", &host_pub)],
        &[("op", &operator_pub)],
        &[("secrets/db.age", r#""node0", "op""#)],
    );
    seal_as(V1);
    let (code, row) = deploy();
    assert_eq!(
        (code, &row["result"]),
        (Some(0), &"confirmed".into()),
        "{row}"
    );
    values(V1);
    let meta = std::fs::metadata(n.root().join("etc/app/db.pass")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777,
        0o400
    );
    seal_as(V2);
    let (code, row) = deploy();
    assert_eq!(
        (code, &row["result"]),
        (Some(0), &"confirmed".into()),
        "{row}"
    );
    values(V2);
    let board = fleet_status(&lab, &keep);
    assert_eq!(
        board["secrets"],
        serde_json::json!({ "readable": true, "count": 1 }),
        "{board}"
    );

    // secrets.ncl gives another key for node0: encrypted to it, the node cannot read it.
    let in_force = n.current();
    let deploys = |n: &crate::sshlab::LabNode| {
        let out = n.mesh(&["deploys", "--json"]);
        keep(&out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let before = (deploys(n), crate::node_fixture::snapshot(&n.root()));
    let impostor = keygen(&keys.path().join("impostor"));
    write_rules(
        tree,
        &[("node0", &impostor)],
        &[("op", &operator_pub)],
        &[("secrets/db.age", r#""node0", "op""#)],
    );
    rekey();
    let board = fleet_status(&lab, &keep);
    assert_eq!(
        board["secrets"],
        serde_json::json!({ "readable": false, "count": 1, "unreadable": ["secrets/db.age"] }),
        "{board}"
    );
    let text = lab.mesh(&["fleet", "status"]);
    keep(&text);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("1 NOT readable")
            && text.contains("not encrypted to its host key: secrets/db.age"),
        "{text}"
    );
    let (code, row) = deploy();
    assert_eq!(code, Some(2), "{row}");
    assert_eq!(row["result"], "refused", "{row}");
    let reason = row["reason"].as_str().unwrap();
    assert!(
        reason.contains("secrets/db.age")
            && reason.contains("node0, op")
            && reason.contains("nothing was changed"),
        "{reason}"
    );
    assert_eq!(n.current(), in_force);
    assert_eq!(
        (deploys(n), crate::node_fixture::snapshot(&n.root())),
        before,
        "nothing armed, nothing changed"
    );

    // Not among its readers: the deployer's build refuses it, naming the secret and the node.
    write_rules(
        tree,
        &[("node0", &host_pub)],
        &[("op", &operator_pub)],
        &[("secrets/db.age", r#""op""#)],
    );
    rekey();
    let (code, row) = deploy();
    assert_ne!(code, Some(0), "{row}");
    let reason = row["reason"].as_str().unwrap();
    assert!(
        reason.contains("secrets/db.age")
            && reason.contains("node node0 is not among its recipients"),
        "{reason}"
    );
    assert_eq!(n.current(), in_force);
    assert_eq!(
        (deploys(n), crate::node_fixture::snapshot(&n.root())),
        before
    );

    let targets = [
        n.root().join("etc/app/db.pass"),
        n.root().join("etc/app/app.conf"),
    ];
    assert_nowhere(&[V1, V2], &[tree, keys.path()], &targets, &outputs.borrow());
    // The node's state after its deploys — their records, markers and agents' logs — is its
    // owner's only.
    assert_eq!(not_owner_only(&n.state()), Vec::<String>::new());
}

/// On an adopted node a file found at a secret's path is held like any found file — left as it
/// is, with its original in the store, owner-only — until its module is taken; the take writes
/// the secret, and a rollback brings the original back byte for byte. The found original,
/// a credential too, is never shown: not by `diff`, `status`, the take or the rollback.
#[test]
fn a_found_file_at_a_secrets_path_is_held_and_its_original_kept_owner_only() {
    if !have_root_tools(&["ip", "ssh-keygen"]) {
        return;
    }
    const OLD: &str = "old-credential-found-5d2b";
    let lab = Lab::new(r#""n1", "op""#);
    lab.edit(V1);
    std::fs::create_dir_all(lab.f.at("/etc/app")).unwrap();
    std::fs::write(lab.f.at("/etc/app/db.pass"), OLD).unwrap();
    std::fs::set_permissions(
        lab.f.at("/etc/app/db.pass"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();

    lab.ok(&["adopt", &lab.decl()]);
    assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), OLD, "held");
    assert_eq!(lab.f.meta("/etc/app/db.pass").0, 0o644);
    let status: serde_json::Value =
        serde_json::from_str(lab.ok(&["status", "--json"]).stdout.trim()).unwrap();
    assert_eq!(status["files"]["held"], 1, "{status}");
    // The original, in the store (wrapped, named by its keyed digest: see
    // `no_plain_digest_of_a_secret_or_a_found_credential_anywhere`), owner-only.
    let store = mesh_lib::Store::open(&lab.f.state()).unwrap();
    let original: mesh_lib::BlobHash = lab.f.record()["found"]["files"]["/etc/app/db.pass"]["hash"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(original, mesh_lib::BlobHash::of(OLD.as_bytes()));
    let at = match store
        .locate(&original)
        .unwrap()
        .expect("the original is kept")
    {
        mesh_lib::store::Location::Loose(p) => p,
        mesh_lib::store::Location::Packed { pack, .. } => pack,
    };
    let mode = |p: &Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
            & 0o777
    };
    assert_eq!(mode(&at) & 0o077, 0, "{} is owner-only", at.display());
    assert_eq!(mode(&lab.f.state()), 0o700);

    lab.ok(&["take", "app"]);
    assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), V1);
    assert_eq!(lab.f.meta("/etc/app/db.pass"), (0o400, 0, 0));
    lab.ok(&["diff"]);
    lab.ok(&["status"]);

    lab.ok(&["rollback"]);
    assert_eq!(
        lab.f.read("/etc/app/db.pass").unwrap(),
        OLD,
        "the original back"
    );
    assert_eq!(lab.f.meta("/etc/app/db.pass").0, 0o644);
    lab.ok(&["diff"]);
    lab.assert_never_shown();
    let outputs = lab.outputs.borrow();
    assert!(
        !outputs.contains(OLD),
        "the found original shown:\n{outputs}"
    );
}

/// The plain blake3 digests of `contents`, as a full `b3:` digest shows them and as the 12
/// digits of a short one: what must appear nowhere.
fn plain_digests(contents: &[&str]) -> Vec<String> {
    contents
        .iter()
        .flat_map(|c| {
            let hex = mesh_lib::BlobHash::of(c.as_bytes()).hex();
            [format!("b3:{hex}"), hex[..12].to_owned()]
        })
        .collect()
}

/// Every file and folder under `dir` whose mode lets its group or others in (symlinks, whose
/// mode means nothing, aside), with its mode.
fn not_owner_only(dir: &Path) -> Vec<String> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| !e.path_is_symlink())
        .filter_map(|e| {
            let mode =
                std::os::unix::fs::PermissionsExt::mode(&e.metadata().unwrap().permissions())
                    & 0o7777;
            (mode & 0o077 != 0).then(|| format!("{:04o} {}", mode, e.path().display()))
        })
        .collect()
}

/// A short secret (`hunter2`) and a credential found at a secret's path leave no plain digest
/// to guess them against: neither `b3:` and the hex of their blake3 nor the 12 digits a short
/// form shows — of the plaintext, of the template it is placed in, of the found file, of a
/// value written there behind the mesh's back — in any file under the state directory (nor in
/// a file's name), in the outputs, for people and `--json`, of adopt, build, switch, status,
/// show, diff, take and rollback, or in `mesh record export`. The node still tells what it
/// wrote from what changed: a switch again (the files re-read) changes nothing, a changed
/// secret is drift, and a rollback brings the found original back byte for byte.
#[test]
fn no_plain_digest_of_a_secret_or_a_found_credential_anywhere() {
    if !have_root_tools(&["ip", "ssh-keygen"]) {
        return;
    }
    const SHORT: &str = "hunter2";
    const FOUND: &str = "s3cret";
    const CHANGED: &str = "hunter3";
    let template = format!("user=app\npassword={SHORT}\n");
    let lab = Lab::new(r#""n1", "op""#);
    lab.edit(SHORT);
    std::fs::create_dir_all(lab.f.at("/etc/app")).unwrap();
    std::fs::write(lab.f.at("/etc/app/db.pass"), FOUND).unwrap();
    let decl = lab.decl();
    let both = |args: &[&str]| {
        let mut json = args.to_vec();
        json.push("--json");
        lab.ok(&json);
        lab.ok(args)
    };

    lab.ok(&["adopt", &decl]);
    assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), FOUND, "held");
    assert_eq!(lab.f.read("/etc/app/app.conf").unwrap(), template);
    let id = both(&["build", &decl]).last_line().to_owned();
    both(&["switch", &decl, "--dry-run"]);
    both(&["show", &id]);
    both(&["status"]);
    lab.ok(&["record", "export"]);

    let taken: serde_json::Value =
        serde_json::from_str(lab.ok(&["take", "app", "--json"]).stdout.trim()).unwrap();
    let taken = taken["id"].as_str().expect("the take's id").to_owned();
    assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), SHORT);
    both(&["diff"]);
    both(&["generations"]);
    // Re-read (a new ctime: the stamps no longer vouch): what the mesh wrote is still its.
    for p in ["/etc/app/db.pass", "/etc/app/app.conf"] {
        let mode = std::fs::metadata(lab.f.at(p)).unwrap().permissions();
        std::fs::set_permissions(lab.f.at(p), mode).unwrap();
    }
    let again = lab.ok(&["switch", &decl, "--dry-run"]);
    assert!(!again.stdout.contains("update"), "{}", again.stdout);
    lab.ok(&["switch", &decl, "--json"]);

    // Changed behind the mesh's back: drift, and the next switch keeps the value it replaces.
    std::fs::write(lab.f.at("/etc/app/db.pass"), CHANGED).unwrap();
    let status: serde_json::Value =
        serde_json::from_str(lab.ok(&["status", "--json"]).stdout.trim()).unwrap();
    assert!(
        status["drift"].to_string().contains("/etc/app/db.pass"),
        "{status}"
    );
    lab.ok(&["status"]);
    lab.ok(&["switch", &decl]);
    assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), SHORT);

    let back = lab.ok(&["rollback", "--json"]);
    assert_eq!(
        lab.f.read("/etc/app/db.pass").unwrap(),
        FOUND,
        "the found original back: {}",
        back.stdout
    );
    lab.ok(&["switch", "--generation", &taken]);
    assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), SHORT);
    lab.ok(&["rollback"]);
    assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), FOUND);
    both(&["diff"]);
    both(&["status"]);
    let export = lab.ok(&["record", "export"]);
    assert!(
        export.stdout.contains("/etc/app/db.pass"),
        "{}",
        export.stdout
    );

    let forbidden = plain_digests(&[SHORT, FOUND, CHANGED, &template]);
    let forbidden: Vec<&str> = forbidden.iter().map(String::as_str).collect();
    assert_nowhere(&forbidden, &[&lab.f.state()], &[], &lab.outputs.borrow());
    for entry in walkdir::WalkDir::new(lab.f.state()) {
        let name = entry.unwrap().path().display().to_string();
        assert!(
            !forbidden.iter().any(|d| name.contains(d)),
            "a plain digest names {name}"
        );
    }
    lab.assert_never_shown();
}

/// After a switch with a secret, a rollback, a status and a gc, nothing in the state directory
/// — store, record, host store and its log, profile, journal, keys, caches — is readable or
/// enterable by the group or others: every file `0600` at most, every folder `0700`.
#[test]
fn the_state_directory_is_owner_only_after_a_switch_with_a_secret() {
    if !have_root_tools(&["ip", "ssh-keygen"]) {
        return;
    }
    let lab = Lab::new(r#""n1", "op""#);
    lab.edit(V1);
    lab.ok(&["switch", &lab.decl()]);
    lab.edit(V2);
    lab.ok(&["switch", &lab.decl()]);
    lab.ok(&["rollback"]);
    lab.ok(&["status", "--json"]);
    lab.ok(&["gc", "--keep", "2"]);
    assert_eq!(not_owner_only(&lab.f.state()), Vec::<String>::new());
}

/// `mesh secret edit` puts the plaintext in a folder of its own, owner-only (`0700`, the file
/// `0600`), in memory: `$XDG_RUNTIME_DIR` when set, else `/dev/shm`. When mesh gets SIGINT,
/// SIGTERM or SIGHUP while the editor runs, it stops the editor, and the plaintext and its
/// folder are gone and mesh exits with 128 + the signal's number; when the editor is killed,
/// the same, exit 1. The ciphertext is unchanged every time.
#[test]
fn a_killed_edit_leaves_no_plaintext_behind() {
    use rustix::process::{kill_process, Pid, Signal};
    use std::os::unix::fs::PermissionsExt;
    if !have_root_tools(&["ip", "ssh-keygen"]) {
        return;
    }
    let lab = Lab::new(r#""n1", "op""#);
    lab.edit(V1);
    let age = lab.f.dir.path().join("secrets/db.age");
    let ciphertext = std::fs::read(&age).unwrap();
    let runtime = tempfile::tempdir().unwrap();
    std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let cases = [
        ("SIGINT to mesh", Some(Signal::INT), 130, true),
        ("SIGTERM to mesh", Some(Signal::TERM), 143, true),
        ("SIGHUP to mesh", Some(Signal::HUP), 129, false),
        ("the editor killed", None, 1, false),
    ];
    for (what, signal, code, xdg) in cases {
        let rec = tempfile::tempdir().unwrap();
        let editor = rec.path().join("editor.sh");
        // Says where its file is and its own pid (the `sleep` it becomes), then waits.
        std::fs::write(
            &editor,
            "#!/bin/sh\necho \"$1\" > \"$REC/path\"\necho $$ > \"$REC/pid.new\"\nmv \"$REC/pid.new\" \"$REC/pid\"\nexec sleep 60\n",
        )
        .unwrap();
        std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = mesh(&lab.f.state());
        c.current_dir(lab.f.dir.path())
            .env("EDITOR", &editor)
            .env("REC", rec.path())
            .env_remove("VISUAL")
            .args(["secret", "edit", "secrets/db.age", "-i"])
            .arg(&lab.operator)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        if xdg {
            c.env("XDG_RUNTIME_DIR", runtime.path());
        } else {
            c.env_remove("XDG_RUNTIME_DIR");
        }
        let mut child = c.spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !rec.path().join("pid").exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: the editor never ran"
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "{what}: mesh ended before the editor ran"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let plain = PathBuf::from(
            std::fs::read_to_string(rec.path().join("path"))
                .unwrap()
                .trim(),
        );
        let folder = plain.parent().unwrap().to_owned();
        let expected_base = if xdg {
            runtime.path()
        } else {
            Path::new("/dev/shm")
        };
        assert_eq!(folder.parent().unwrap(), expected_base, "{what}: where");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&folder), mode(&plain)), (0o700, 0o600), "{what}");
        assert_eq!(std::fs::read_to_string(&plain).unwrap(), V1, "{what}");

        match signal {
            Some(s) => kill_process(Pid::from_raw(child.id() as i32).unwrap(), s).unwrap(),
            None => {
                let pid: i32 = std::fs::read_to_string(rec.path().join("pid"))
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                kill_process(Pid::from_raw(pid).unwrap(), Signal::KILL).unwrap();
            }
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("{what}: mesh did not end");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        lab.outputs.borrow_mut().push_str(&said);
        assert_eq!(status.code(), Some(code), "{what}: {said}");
        assert!(!plain.exists(), "{what}: {} is left", plain.display());
        assert!(!folder.exists(), "{what}: {} is left", folder.display());
        assert_eq!(std::fs::read(&age).unwrap(), ciphertext, "{what}");
    }
    lab.assert_never_shown();
}

/// A switch that writes a secret over a credential found at its path, crashed at each point
/// between recording the credential and committing, leaves no plain digest in the state
/// directory (its journal included), and the next switch finishes it: the secret in place, the
/// mesh's own file known as its (a switch again changes nothing), still no plain digest.
#[test]
fn a_crashed_secret_switch_leaves_no_plain_digest_and_is_finished() {
    if !have_root_tools(&["ip", "ssh-keygen"]) || !crate::support::crash_points_here() {
        return;
    }
    const SHORT: &str = "hunter2";
    const FOUND: &str = "s3cret";
    let forbidden = plain_digests(&[SHORT, FOUND, &format!("user=app\npassword={SHORT}\n")]);
    let forbidden: Vec<&str> = forbidden.iter().map(String::as_str).collect();
    for at in [
        "originals-recorded",
        "journal-written",
        "file-applied",
        "host-store-written",
    ] {
        let lab = Lab::new(r#""n1", "op""#);
        lab.edit(SHORT);
        std::fs::create_dir_all(lab.f.at("/etc/app")).unwrap();
        std::fs::write(lab.f.at("/etc/app/db.pass"), FOUND).unwrap();
        let crashed = crate::support::crashes_at(
            lab.f.command(&["switch", &lab.decl()]),
            at,
            &format!("a secret switch crashed at {at}"),
        );
        assert!(crashed, "{at} is reached");
        assert_nowhere(&forbidden, &[&lab.f.state()], &[], "");
        lab.ok(&["switch", &lab.decl()]);
        assert_eq!(lab.f.read("/etc/app/db.pass").unwrap(), SHORT, "{at}");
        let again = lab.ok(&["switch", &lab.decl(), "--dry-run"]);
        assert!(
            !again.stdout.contains("update") && !again.stdout.contains("record"),
            "{at}: {}",
            again.stdout
        );
        assert_nowhere(&forbidden, &[&lab.f.state()], &[], &lab.outputs.borrow());
    }
}

/// Over SSH (real OpenSSH servers, see `sshlab.rs`) to a node whose engine runs the
/// container: `mesh deploy` sends the ciphertext of a container's secret environment with the
/// generation, the node decrypts it with its host key and gives the container the value; a
/// new value is deployed as a recreated container; `mesh fleet status` counts the secret as
/// one the node can read. No value in the lab's folders (the fleet's tree, the deployer's
/// state) or in an output.
#[test]
fn a_deploy_gives_a_container_its_secret_environment() {
    if !crate::containers::docker_here()
        || !have_root_tools(&["sshd", "ssh", "ssh-keygen", "ip", "nft", "ss"])
    {
        return;
    }
    let _turn = crate::containers::take_turn();
    let made = crate::containers::Made::new("sdep");
    let app = format!("{}-app", made.prefix);
    let with_app = |name: &str| {
        crate::sshlab::node_decl(name, "one\\n", true).replace(
            "  modules = [\n",
            &format!(
                r#"  modules = [
    {{ name = "app", config = fun s => {{ containers = [
      {{ name = "{app}", image = "{}", command = ["/bin/busybox", "sleep", "100000"],
        environment = {{ MODE = "prod" }}, secret_environment = {{ DB_PASSWORD = "secrets/db.age" }} }},
    ], files = [
      # A template whose one secret no other file is: its ciphertext travels too.
      {{ path = "/etc/app/app.conf", content = "token={{{{secret.t}}}}\n", secrets = {{ t = "secrets/tpl.age" }} }},
    ] }} }},
"#,
                made.image
            ),
        )
    };
    let lab = crate::sshlab::Lab::new("sdep", 1, |n| crate::sshlab::node_decl(n, "one\\n", true));
    let n = &lab.nodes[0];
    let tree = lab.dir.path();
    let Keyed {
        keys,
        operator,
        operator_pub,
        operator_state,
        host_pub,
        ..
    } = keyed(&lab);
    write_rules(
        tree,
        &[("node0", &host_pub)],
        &[("op", &operator_pub)],
        &[
            ("secrets/db.age", r#""node0", "op""#),
            ("secrets/tpl.age", r#""node0", "op""#),
        ],
    );
    lab.declare("node0", &with_app("node0"));
    const TOKEN: &str = "tpl-token-5d1e9c";
    let sealed = seal(tree, &operator_state, &operator, "secrets/tpl.age", TOKEN);
    assert_eq!(sealed.code, 0, "{}{}", sealed.stdout, sealed.stderr);

    let outputs = std::cell::RefCell::new(String::new());
    let seal_as = |value: &str| {
        let ran = seal(tree, &operator_state, &operator, "secrets/db.age", value);
        outputs
            .borrow_mut()
            .push_str(&(ran.stdout.clone() + &ran.stderr));
        assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    };
    let deploy = || {
        let out = lab.mesh(&["deploy", "--json", "--confirm-timeout", "20"]);
        let mut all = outputs.borrow_mut();
        all.push_str(&String::from_utf8_lossy(&out.stdout));
        all.push_str(&String::from_utf8_lossy(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(
            (out.status.code(), &json["nodes"][0]["result"]),
            (Some(0), &"confirmed".into()),
            "{json}"
        );
    };
    let given = || crate::containers::docker(&["inspect", "-f", "{{json .Config.Env}}", &app]);

    seal_as(&format!("{V1}\n"));
    deploy();
    let env = given();
    assert!(env.contains(&format!("\"DB_PASSWORD={V1}\"")), "{env}");
    assert_eq!(
        std::fs::read_to_string(n.root().join("etc/app/app.conf")).unwrap(),
        format!("token={TOKEN}\n")
    );
    assert!(env.contains("\"MODE=prod\""), "{env}");
    let first = crate::containers::docker(&["inspect", "-f", "{{.Id}}", &app]);

    seal_as(V2);
    deploy();
    assert!(given().contains(&format!("\"DB_PASSWORD={V2}\"")));
    assert_ne!(
        crate::containers::docker(&["inspect", "-f", "{{.Id}}", &app]),
        first,
        "a new value recreates the container"
    );
    let board = lab.mesh(&["fleet", "status", "--json"]);
    outputs
        .borrow_mut()
        .push_str(&String::from_utf8_lossy(&board.stdout));
    let board: serde_json::Value = serde_json::from_slice(&board.stdout).unwrap();
    assert_eq!(
        board["nodes"][0]["secrets"],
        serde_json::json!({ "readable": true, "count": 2 }),
        "{board}"
    );
    let labels = crate::containers::docker(&["inspect", "-f", "{{json .Config.Labels}}", &app]);
    assert!(!labels.contains(V1) && !labels.contains(V2), "{labels}");
    assert_nowhere(
        &[V1, V2],
        &[tree, keys.path(), &n.state()],
        &[],
        &outputs.borrow(),
    );
}
