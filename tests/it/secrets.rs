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
fn keygen(path: &Path) -> String {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "test", "-f"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(path.with_extension("pub"))
        .unwrap()
        .trim()
        .to_owned()
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
        let editor = lab.f.dir.path().join("editor.sh");
        std::fs::write(&editor, "#!/bin/sh\ncat \"$MESH_TEST_VALUE\" > \"$1\"\n").unwrap();
        std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        lab
    }

    fn rules(&self, readers: &str) {
        std::fs::write(
            self.f.dir.path().join("secrets.ncl"),
            format!(
                r#"let mesh = import "mesh.ncl" in
mesh.secrets {{
  nodes = {{ n1 = "{}" }},
  operators = {{ op = "{}" }},
  files = {{ "secrets/db.age" = [{readers}] }},
}}
"#,
                self.host_pub, self.operator_pub
            ),
        )
        .unwrap();
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
        let value_file = self.f.dir.path().join("value");
        std::fs::write(&value_file, value).unwrap();
        let mut c = mesh(&self.f.state());
        c.current_dir(self.f.dir.path())
            .env("EDITOR", self.f.dir.path().join("editor.sh"))
            .env("MESH_TEST_VALUE", &value_file)
            .args(["secret", "edit", "secrets/db.age", "-i"])
            .arg(&self.operator);
        let ran = self.keep(run(c));
        std::fs::remove_file(&value_file).unwrap();
        assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    }

    fn decl(&self) -> String {
        self.f.decl("s.ncl").display().to_string()
    }

    /// Neither plaintext in any file of the state directory, nor in any output so far.
    fn assert_never_shown(&self) {
        let all = self.outputs.borrow();
        for v in [V1, V2] {
            assert!(!all.contains(v), "a plaintext in an output:\n{all}");
            for entry in walkdir::WalkDir::new(self.f.state()) {
                let entry = entry.unwrap();
                if entry.file_type().is_file() {
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
