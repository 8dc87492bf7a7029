//! A node with a real systemd as PID 1: a Docker container made from a tiny image (`docker
//! import` of a rootfs holding `/etc`: os-release, passwd, group, the host's systemd and D-Bus
//! configuration without its enabled units, and the `bin lib lib64 sbin -> usr/…` links), the
//! host's `/usr` mounted read-only, the `mesh` binary under test mounted at `/opt/mesh/mesh`, and
//! a folder of the test's mounted at `/srv/t` (declarations, the state directory, counters the
//! units write). The mesh runs inside, as on a node: root `/`, systemd on the system bus, the
//! firewall in the container's own network namespace. The container and the image go when the
//! fixture is dropped, also when the test fails. The services bench uses it too. As a fleet of
//! one ([`SshFleet`]), `mesh deploy` reaches it over real OpenSSH: an `sshd -i` inside per
//! connection.
#![allow(dead_code)] // the bench uses a part

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// What a command inside said.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub struct SystemdNode {
    pub name: String,
    image: String,
    pub dir: tempfile::TempDir,
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs")
}

fn must(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The image's root: what systemd and D-Bus need from `/etc`, the host's `/usr` comes at run
/// time.
fn rootfs(at: &Path) {
    let etc = at.join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    for dir in [
        "run", "tmp", "var/lib", "var/log", "root", "proc", "sys", "dev", "opt", "srv/t",
    ] {
        std::fs::create_dir_all(at.join(dir)).unwrap();
    }
    for link in ["bin", "lib", "lib64", "sbin"] {
        std::os::unix::fs::symlink(format!("usr/{link}"), at.join(link)).unwrap();
    }
    for file in [
        "os-release",
        "passwd",
        "group",
        "nsswitch.conf",
        "protocols",
        "services",
    ] {
        // /etc/os-release is a link into /usr on Debian: its content is what counts.
        std::fs::copy(Path::new("/etc").join(file), etc.join(file))
            .unwrap_or_else(|e| panic!("/etc/{file}: {e}"));
    }
    std::fs::write(etc.join("hostname"), "node\n").unwrap();
    std::fs::write(etc.join("machine-id"), "").unwrap();
    // systemd's and D-Bus's configuration; firewalld's and ufw's, as the packages install them
    // (the found firewalls of tests/it/firewall_daemons.rs), with the alternatives that name
    // which iptables ufw runs.
    for tree in [
        "systemd",
        "dbus-1",
        "firewalld",
        "ufw",
        "default",
        "alternatives",
    ] {
        let from = Path::new("/etc").join(tree);
        if !from.exists() {
            continue;
        }
        for entry in walkdir::WalkDir::new(&from) {
            let entry = entry.unwrap();
            let rel = entry.path().strip_prefix("/etc").unwrap();
            // The host's enabled units (docker, ssh, …) would start, and fail, inside.
            let name = rel.to_string_lossy();
            if name.contains(".wants") || name.contains(".requires") {
                continue;
            }
            let dest = etc.join(rel);
            let kind = entry.path().symlink_metadata().unwrap().file_type();
            if kind.is_dir() {
                std::fs::create_dir_all(&dest).unwrap();
            } else if kind.is_file() {
                std::fs::copy(entry.path(), &dest).unwrap();
            } else if kind.is_symlink() && tree != "systemd" {
                // An enabled unit's link under systemd/ would start it inside.
                let to = std::fs::read_link(entry.path()).unwrap();
                std::os::unix::fs::symlink(to, &dest).unwrap();
            }
        }
    }
}

impl SystemdNode {
    /// Boots one: fails (in CI) unless systemd is running inside within 30 s.
    pub fn boot(tag: &str) -> Self {
        Self::start(tag, true)
    }

    /// The same image with no systemd: PID 1 is `sleep`, nothing answers on a bus.
    pub fn without_systemd(tag: &str) -> Self {
        Self::start(tag, false)
    }

    fn start(tag: &str, systemd: bool) -> Self {
        let name = format!("meshtest{}sd{tag}", std::process::id());
        let image = format!("{name}-image:1");
        let root = tempfile::tempdir().unwrap();
        rootfs(root.path());
        super::images_made::docker_import(root.path(), &image);
        let dir = tempfile::tempdir().unwrap();
        let node = Self {
            name: name.clone(),
            image: image.clone(),
            dir,
        };
        let bin = env!("CARGO_BIN_EXE_mesh");
        let mounts = [
            "/usr:/usr:ro".to_owned(),
            format!("{bin}:/opt/mesh/mesh:ro"),
            format!("{}:/srv/t", node.dir.path().display()),
        ];
        let mut args = vec![
            "run",
            "-d",
            "--name",
            &name,
            "--cap-add",
            "SYS_ADMIN",
            "--cap-add",
            "NET_ADMIN",
            "--cgroupns=private",
            "--tmpfs",
            "/run",
            "--tmpfs",
            "/run/lock",
        ];
        for m in &mounts {
            args.extend(["-v", m.as_str()]);
        }
        args.push(&image);
        if systemd {
            args.push("/usr/lib/systemd/systemd");
        } else {
            args.extend(["/usr/bin/sleep", "infinity"]);
        }
        must(&args);
        if systemd {
            let start = Instant::now();
            loop {
                let state = node.sh("systemctl is-system-running || true").stdout;
                match state.trim() {
                    "running" | "degraded" => break,
                    other => assert!(
                        start.elapsed() < Duration::from_secs(30),
                        "systemd in {name} is `{other}` after 30 s"
                    ),
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        }
        node
    }

    /// A shell command inside.
    pub fn sh(&self, script: &str) -> Out {
        let out = docker(&["exec", &self.name, "/bin/sh", "-c", script]);
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// A shell command inside, which must succeed; its output.
    pub fn ok_sh(&self, script: &str) -> String {
        let ran = self.sh(script);
        assert_eq!(ran.code, 0, "{script}: {}{}", ran.stdout, ran.stderr);
        ran.stdout
    }

    /// `mesh ARGS` inside, with the state directory in the test's folder.
    pub fn mesh(&self, args: &[&str]) -> Out {
        self.mesh_env(&[], args)
    }

    /// `mesh ARGS` inside, with `env` set.
    pub fn mesh_env(&self, env: &[(&str, &str)], args: &[&str]) -> Out {
        let mut c = Command::new("docker");
        c.args([
            "exec",
            "-e",
            "NO_COLOR=1",
            "-e",
            "MESH_STATE_DIR=/srv/t/state",
        ]);
        for (k, v) in env {
            c.arg("-e").arg(format!("{k}={v}"));
        }
        c.arg(&self.name).arg("/opt/mesh/mesh").args(args);
        let out = c.output().expect("docker exec runs");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `mesh ARGS`, which must succeed.
    pub fn ok(&self, args: &[&str]) -> Out {
        let ran = self.mesh(args);
        assert_eq!(
            ran.code, 0,
            "mesh {args:?} failed:\n{}{}",
            ran.stdout, ran.stderr
        );
        ran
    }

    /// Writes a declaration into the test's folder; its path inside.
    pub fn declare(&self, name: &str, text: &str) -> String {
        std::fs::write(self.dir.path().join(name), text).unwrap();
        format!("/srv/t/{name}")
    }

    /// A file of the test's folder, as the host sees it.
    pub fn here(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// How many lines a unit appended to `/srv/t/NAME`.
    pub fn count(&self, name: &str) -> usize {
        std::fs::read_to_string(self.here(name))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// Its address on Docker's bridge: where packets from outside its namespace reach it.
    pub fn address(&self) -> String {
        must(&[
            "inspect",
            "-f",
            "{{.NetworkSettings.IPAddress}}",
            &self.name,
        ])
    }

    /// A unit's property, as systemctl shows it.
    pub fn property(&self, unit: &str, property: &str) -> String {
        self.ok_sh(&format!("systemctl show -P {property} {unit}"))
            .trim()
            .to_owned()
    }

    /// The generation in force: its id.
    pub fn current(&self) -> String {
        let out = self.ok(&["generations", "--json"]).stdout;
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        v["generations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["current"] == true)
            .map(|g| g["id"].as_str().unwrap().to_owned())
            .expect("a current generation")
    }
}

/// A fleet of one node, `sd`: a [`SystemdNode`] that `mesh deploy` reaches over real OpenSSH,
/// each connection an `sshd -i` inside the container (the ssh config's `ProxyCommand` is a
/// `docker exec`), with a host key and a client key made here. The fleet's folder — the fleet
/// file, `nodes/sd.ncl`, the ssh config, the known hosts, the deployer's state — is on this
/// side, outside the node; it goes when dropped.
pub struct SshFleet {
    pub dir: tempfile::TempDir,
}

fn keygen(path: &Path) {
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .expect("ssh-keygen runs");
    assert!(made.status.success(), "ssh-keygen {}", path.display());
}

impl SystemdNode {
    /// This node as the fleet's one node `sd`, declared by `declaration`, its mesh state in
    /// the test's folder.
    pub fn fleet(&self, declaration: &str) -> SshFleet {
        let fleet = SshFleet {
            dir: tempfile::tempdir().unwrap(),
        };
        let here = fleet.dir.path();
        let keys = self.here("ssh");
        std::fs::create_dir_all(&keys).unwrap();
        keygen(&keys.join("host_key"));
        keygen(&here.join("client_key"));
        std::fs::copy(here.join("client_key.pub"), keys.join("authorized_keys")).unwrap();
        std::fs::write(
            keys.join("sshd_config"),
            "HostKey /srv/t/ssh/host_key\nAuthorizedKeysFile /srv/t/ssh/authorized_keys\nUsePAM no\nStrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n",
        )
        .unwrap();
        // sshd's privilege separation folder, and root's shadow entry: with none, sshd takes
        // the account to be locked.
        self.ok_sh(
            "mkdir -p /run/sshd && printf 'root:*:19000:0:99999:7:::\\n' > /etc/shadow && chmod 600 /etc/shadow",
        );
        let host_key = std::fs::read_to_string(keys.join("host_key.pub")).unwrap();
        let mut words = host_key.split_whitespace();
        let (kind, body) = (words.next().unwrap(), words.next().unwrap());
        std::fs::write(here.join("known_hosts"), format!("sd {kind} {body}\n")).unwrap();
        // `ProxyUseFdpass no` said outright: the mesh's own ssh configuration, read after
        // this one, says `yes` for its own proxy, and ssh would take it for this one too.
        std::fs::write(
            here.join("ssh_config"),
            format!(
                "Host sd\n  User root\n  HostKeyAlias sd\n  IdentityFile {}\n  IdentitiesOnly yes\n  UserKnownHostsFile {}\n  StrictHostKeyChecking yes\n  ProxyCommand docker exec -i {} /usr/sbin/sshd -i -f /srv/t/ssh/sshd_config -E /srv/t/ssh/sshd.log\n  ProxyUseFdpass no\n",
                here.join("client_key").display(),
                here.join("known_hosts").display(),
                self.name,
            ),
        )
        .unwrap();
        std::fs::create_dir_all(here.join("nodes")).unwrap();
        std::fs::write(here.join("nodes/sd.ncl"), declaration).unwrap();
        std::fs::write(
            here.join("fleet.ncl"),
            "let mesh = import \"mesh.ncl\" in\nmesh.fleet {\n  ssh_config = \"ssh_config\",\n  nodes = {\n    sd = { declaration = \"nodes/sd.ncl\", ssh = { destination = \"sd\" }, remote = { mesh = \"/opt/mesh/mesh\", state_dir = \"/srv/t/state\" } },\n  },\n}\n",
        )
        .unwrap();
        fleet
    }
}

impl SshFleet {
    /// Declares the node anew.
    pub fn declare(&self, declaration: &str) {
        std::fs::write(self.dir.path().join("nodes/sd.ncl"), declaration).unwrap();
    }

    /// `mesh ARGS` on the deployer's side, with the fleet file.
    pub fn mesh(&self, args: &[&str]) -> Out {
        let out = Command::new(env!("CARGO_BIN_EXE_mesh"))
            .env("MESH_STATE_DIR", self.dir.path().join("deployer-state"))
            .env("MESH_FLEET", self.dir.path().join("fleet.ncl"))
            .env("NO_COLOR", "1")
            .env_remove("MESH_ROOT")
            .env_remove("MESH_NETNS")
            .args(args)
            .output()
            .expect("mesh runs");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Drop for SystemdNode {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.name]);
        let _ = docker(&["rmi", "-f", &self.image]);
    }
}
