//! A node to switch: a root with the predecessor's files, a state directory, and declarations.
//! Every switch test works in folders it creates and cleans up (they are temp dirs).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{mesh, run, Netns, Ran};

pub const SSH: &str = "/etc/ssh/sshd_config.d/10-mesh.conf";
pub const MOTD: &str = "/etc/motd";
pub const EXTRA: &str = "/etc/extra/extra.conf";
/// The predecessor's drop-in, found on the machine.
pub const ORIGINAL_SSH: &str = "# the predecessor's\nPasswordAuthentication yes\n";

/// A declaration with `ssh` (its path found on the machine), `motd` and, optionally, `extra`.
pub fn declaration(motd: &str, extra: bool) -> String {
    let extra = if extra {
        r#"{ name = "extra", config = fun s => { files = [{ path = "/etc/extra/extra.conf", content = "extra\n" }] } },"#
    } else {
        ""
    };
    format!(
        r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "n1",
  settings = {{
    ports = {{ store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820 }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.5" }},
  }},
  modules = [
    {{ name = "ssh", config = fun s => {{ files = [{{ path = "{SSH}", content = "PasswordAuthentication no\n", mode = "0600" }}] }} }},
    {{ name = "motd", config = fun s => {{ files = [{{ path = "{MOTD}", content = "{motd}" }}] }} }},
    {extra}
  ],
}}
"#
    )
}

pub struct Fixture {
    pub dir: tempfile::TempDir,
    /// The network namespace the node's firewall goes into: the test's own, never the machine's.
    pub netns: String,
    _own_netns: Option<Netns>,
}

impl Fixture {
    /// A machine with the predecessor's ssh drop-in (mode 0640, owned by 1000:1000), and a
    /// network namespace of its own for the firewall.
    pub fn new() -> Self {
        let ns = Netns::new("fx");
        let mut f = Self::in_netns(&ns.name.clone());
        f._own_netns = Some(ns);
        f
    }

    /// The same machine, its firewall in an existing namespace (a lab's node).
    pub fn in_netns(netns: &str) -> Self {
        let f = Self {
            dir: tempfile::tempdir().unwrap(),
            netns: netns.to_owned(),
            _own_netns: None,
        };
        std::fs::create_dir_all(f.root().join("etc/ssh/sshd_config.d")).unwrap();
        std::fs::create_dir_all(f.state()).unwrap();
        let ssh = f.at(SSH);
        std::fs::write(&ssh, ORIGINAL_SSH).unwrap();
        std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o640)).unwrap();
        std::os::unix::fs::chown(&ssh, Some(1000), Some(1000)).unwrap();
        f.write_decl("a.ncl", &declaration("hello\\n", true));
        f.write_decl("b.ncl", &declaration("hello again\\n", false));
        f
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn decl(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write_decl(&self, name: &str, text: &str) {
        std::fs::write(self.decl(name), text).unwrap();
    }

    /// Where a declared path is under the root.
    pub fn at(&self, path: &str) -> PathBuf {
        self.root().join(path.trim_start_matches('/'))
    }

    /// `mesh ARGS` on this node.
    pub fn mesh(&self, args: &[&str]) -> Ran {
        run(self.command(args))
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = mesh(&self.state());
        c.env("MESH_ROOT", self.root())
            .env("MESH_NETNS", &self.netns)
            .args(args);
        c
    }

    /// The id of the generation in force, as `mesh generations --json` says it.
    pub fn current_id(&self) -> String {
        let g: serde_json::Value =
            serde_json::from_str(&self.ok(&["generations", "--json"]).stdout).unwrap();
        g["generations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["current"] == true)
            .expect("a current generation")["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// `mesh ARGS`, which must succeed.
    pub fn ok(&self, args: &[&str]) -> Ran {
        let ran = self.mesh(args);
        assert_eq!(
            ran.code, 0,
            "mesh {args:?} failed:\n{}{}",
            ran.stdout, ran.stderr
        );
        ran
    }

    pub fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.at(path)).ok()
    }

    /// (mode, uid, gid) of a declared path.
    pub fn meta(&self, path: &str) -> (u32, u32, u32) {
        let m = std::fs::metadata(self.at(path)).unwrap();
        (m.mode() & 0o7777, m.uid(), m.gid())
    }

    pub fn record(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.state().join("record.json")).unwrap()).unwrap()
    }

    /// Every file and folder under the root with its content, mode, owner and (for files) mtime:
    /// to compare before and after.
    pub fn snapshot(&self) -> Snapshot {
        snapshot(&self.root())
    }
}

/// Every file under a root: its path, bytes, mode, owner, group and modification time.
pub type Snapshot = Vec<(PathBuf, Vec<u8>, u32, u32, u32, i64)>;

pub fn snapshot(root: &Path) -> Snapshot {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(root).sort_by_file_name() {
        let entry = entry.unwrap();
        let m = entry.path().symlink_metadata().unwrap();
        let bytes = if m.is_file() {
            std::fs::read(entry.path()).unwrap()
        } else {
            Vec::new()
        };
        // A folder's mtime moves when a temp file comes and goes in it; a file's must not.
        let mtime = if m.is_file() {
            m.mtime_nsec() + m.mtime() * 1_000_000_000
        } else {
            0
        };
        out.push((
            entry.path().to_owned(),
            bytes,
            m.mode(),
            m.uid(),
            m.gid(),
            mtime,
        ));
    }
    out
}
