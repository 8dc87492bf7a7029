//! A fleet of real OpenSSH servers, one per network namespace: each node a namespace with its
//! own `sshd` (host key made here), its own root and state directory, reached from a deployer
//! namespace over a veth pair (198.51.100.0/24, TEST-NET-2); an `ssh_config` naming the nodes,
//! a client key, a strict `known_hosts`, and a fleet file beside them. `mesh deploy` runs in
//! the deployer's namespace; the nodes' `mesh` is the binary under test. Namespaces, servers and
//! folders go when the lab is dropped, also when the test fails. The fleet bench uses it too.
#![allow(dead_code)] // the bench uses a part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use std::time::{Duration, Instant};

fn run(c: &mut Command) -> Output {
    let out = c.output().expect("runs");
    assert!(
        out.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ip(args: &[&str]) {
    run(Command::new("ip").args(args));
}

/// A node of the lab.
pub struct LabNode {
    pub name: String,
    pub netns: String,
    pub address: String,
    pub dir: PathBuf,
    sshd: Option<Child>,
    /// Whether its sessions' shell reads this machine's `/root/.bashrc` (see [`Lab::new`]).
    machine_rc: bool,
}

impl LabNode {
    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// `mesh ARGS` on the node, run here with its state, root and namespace.
    pub fn mesh(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_mesh"))
            .env("MESH_STATE_DIR", self.state())
            .env("MESH_ROOT", self.root())
            .env("MESH_NETNS", &self.netns)
            .env("NO_COLOR", "1")
            .args(args)
            .output()
            .expect("mesh runs")
    }

    /// The generation in force on the node.
    pub fn current(&self) -> Option<String> {
        let out = self.mesh(&["generations", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        v["generations"]
            .as_array()?
            .iter()
            .find(|g| g["current"] == true)
            .and_then(|g| g["id"].as_str().map(str::to_owned))
    }

    /// The node trusts the key `key` (its `.pub` beside it) under the name `ci`: its trusted
    /// signers file is that one line.
    pub fn trust(&self, key: &Path) {
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let dir = self.root().join("etc/mesh");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("trusted-signers"), format!("ci {public}")).unwrap();
    }

    /// The process id of the node's `sshd` (what every connection to it forks from).
    pub fn sshd_pid(&self) -> Option<u32> {
        self.sshd.as_ref().map(Child::id)
    }

    fn start_sshd(&mut self) {
        let config = self.dir.join("sshd_config");
        let sshd = format!(
            "exec ip netns exec {} /usr/sbin/sshd -D -f {} -E {}",
            self.netns,
            config.display(),
            self.dir.join("sshd.log").display()
        );
        // sshd runs every command through root's shell, and bash reads ~/.bashrc when sshd runs
        // it: a node's root has its own, not this machine's (here, a pyenv set-up that costs a
        // tenth of a second of CPU per command). In a mount namespace of its own, an empty one
        // stands in for it.
        let rc = Path::new("/root/.bashrc");
        let script = if self.machine_rc || !rc.exists() {
            sshd
        } else {
            format!("mount --bind /dev/null {} && {sshd}", rc.display())
        };
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sshd starts");
        self.sshd = Some(child);
    }

    /// A restart, as a test can make one: every process in the node's namespace killed (its
    /// sshd, a deploy's agent), its ruleset flushed. [`LabNode::boot`] then runs what runs at
    /// boot.
    pub fn crash(&mut self) {
        if let Some(mut old) = self.sshd.take() {
            let _ = old.kill();
            let _ = old.wait();
        }
        let out = Command::new("ip")
            .args(["netns", "pids", &self.netns])
            .output()
            .expect("ip runs");
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("kill").args(["-9", pid]).output();
        }
        run(Command::new("ip").args(["netns", "exec", &self.netns, "nft", "flush", "ruleset"]));
    }

    /// What runs at boot, in its order (examples/systemd): `mesh reconcile`, then sshd. What
    /// reconcile said.
    pub fn boot(&mut self) -> Output {
        let reconciled = self.mesh(&["reconcile"]);
        self.start_sshd();
        wait_listening(&self.netns, &self.address);
        reconciled
    }

    /// Adds `option` (e.g. `LogLevel DEBUG1`) to the node's sshd_config and restarts its sshd.
    pub fn sshd_option(&mut self, option: &str) {
        let path = self.dir.join("sshd_config");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&format!("{option}\n"));
        std::fs::write(path, text).unwrap();
        if let Some(mut old) = self.sshd.take() {
            let _ = old.kill();
            let _ = old.wait();
        }
        self.start_sshd();
        wait_listening(&self.netns, &self.address);
    }

    /// The key exchanges the node's sshd agreed, in order (its log at `LogLevel DEBUG1`).
    pub fn key_exchanges(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("sshd.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split("kex: algorithm: ").nth(1))
            .map(|k| k.trim().trim_end_matches("[preauth]").trim().to_owned())
            .collect()
    }

    /// A new host key, and sshd told to read it: a client with the old known_hosts refuses it.
    pub fn change_host_key(&mut self) {
        let key = self.dir.join("host_key");
        let _ = std::fs::remove_file(&key);
        let _ = std::fs::remove_file(key.with_extension("pub"));
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key));
        if let Some(mut old) = self.sshd.take() {
            let _ = old.kill();
            let _ = old.wait();
        }
        self.start_sshd();
        wait_listening(&self.netns, &self.address);
    }
}

impl Drop for LabNode {
    fn drop(&mut self) {
        if let Some(mut c) = self.sshd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // What a deploy left running in the namespace (a detached agent) goes with it.
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.netns])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).output();
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}

fn wait_listening(netns: &str, address: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                netns,
                "ss",
                "-Hltn",
                &format!("src {address}:22"),
            ])
            .output()
            .expect("ss runs");
        if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("sshd in {netns} does not listen on {address}:22");
}

/// The lab.
pub struct Lab {
    pub dir: tempfile::TempDir,
    pub deployer: String,
    pub nodes: Vec<LabNode>,
}

impl Lab {
    /// `count` nodes, each with the declaration `decl(name)`. Their root's shell reads no
    /// start-up file of this machine's (see [`LabNode::start_sshd`]).
    pub fn new(tag: &str, count: usize, decl: impl Fn(&str) -> String) -> Self {
        Self::build(tag, &Self::numbered(count), decl, false)
    }

    /// [`Lab::new`] with nodes of the given names (the guide's `web-1`, `web-2`), in order.
    pub fn named(tag: &str, names: &[&str], decl: impl Fn(&str) -> String) -> Self {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        Self::build(tag, &names, decl, false)
    }

    /// [`Lab::new`], the nodes' root shell reading this machine's `/root/.bashrc` as it is.
    pub fn with_machine_rc(tag: &str, count: usize, decl: impl Fn(&str) -> String) -> Self {
        Self::build(tag, &Self::numbered(count), decl, true)
    }

    /// `node0`, `node1`, …: the names of `count` nodes.
    fn numbered(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("node{i}")).collect()
    }

    fn build(tag: &str, names: &[String], decl: impl Fn(&str) -> String, machine_rc: bool) -> Self {
        static SERIAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let id = format!("{:x}{serial}", std::process::id() % 0xfff);
        let dir = tempfile::tempdir().unwrap();
        let deployer = format!("mesh-{tag}-dep-{id}");
        ip(&["netns", "add", &deployer]);
        ip(&["-n", &deployer, "link", "set", "lo", "up"]);
        std::fs::create_dir_all("/run/sshd").unwrap();
        let client_key = dir.path().join("client_key");
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&client_key));
        std::fs::copy(
            client_key.with_extension("pub"),
            dir.path().join("authorized_keys"),
        )
        .unwrap();
        let mut lab = Self {
            dir,
            deployer,
            nodes: Vec::new(),
        };
        std::fs::create_dir_all(lab.dir.path().join("nodes")).unwrap();
        for (i, name) in names.iter().enumerate() {
            let name = name.clone();
            let netns = format!("mesh-{tag}-{i}-{id}");
            let ndir = lab.dir.path().join(&name);
            std::fs::create_dir_all(ndir.join("root")).unwrap();
            std::fs::create_dir_all(ndir.join("state")).unwrap();
            ip(&["netns", "add", &netns]);
            // The node is put in the lab first, so that a failure below still removes it.
            lab.nodes.push(LabNode {
                name: name.clone(),
                netns: netns.clone(),
                address: format!("198.51.100.{}", 4 * i + 2),
                dir: ndir.clone(),
                sshd: None,
                machine_rc,
            });
            let (here, there) = (format!("md{id}x{i}"), format!("mn{id}x{i}"));
            let near = format!("198.51.100.{}/30", 4 * i + 1);
            let far = format!("198.51.100.{}/30", 4 * i + 2);
            ip(&[
                "link",
                "add",
                &here,
                "netns",
                &lab.deployer,
                "type",
                "veth",
                "peer",
                "name",
                &there,
                "netns",
                &netns,
            ]);
            ip(&["-n", &lab.deployer, "addr", "add", &near, "dev", &here]);
            ip(&["-n", &lab.deployer, "link", "set", &here, "up"]);
            ip(&["-n", &netns, "addr", "add", &far, "dev", &there]);
            ip(&["-n", &netns, "link", "set", &there, "up"]);
            ip(&["-n", &netns, "link", "set", "lo", "up"]);
            let key = ndir.join("host_key");
            run(Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(&key));
            let address = lab.nodes[i].address.clone();
            std::fs::write(
                ndir.join("sshd_config"),
                format!(
                    "ListenAddress {address}:22\nHostKey {}\nPidFile {}\nAuthorizedKeysFile {}\nUsePAM no\nStrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n",
                    key.display(),
                    ndir.join("sshd.pid").display(),
                    lab.dir.path().join("authorized_keys").display()
                ),
            )
            .unwrap();
            lab.nodes[i].start_sshd();
            wait_listening(&netns, &address);
            std::fs::write(
                lab.dir.path().join(format!("nodes/{name}.ncl")),
                decl(&name),
            )
            .unwrap();
        }
        lab.write_known_hosts();
        lab.write_ssh_config();
        lab.write_fleet();
        lab
    }

    /// The known hosts: every node's key as it is now.
    pub fn write_known_hosts(&self) {
        let mut text = String::new();
        for n in &self.nodes {
            let key = std::fs::read_to_string(n.dir.join("host_key.pub")).unwrap();
            let mut words = key.split_whitespace();
            let (kind, body) = (words.next().unwrap(), words.next().unwrap());
            text.push_str(&format!("{} {kind} {body}\n", n.address));
        }
        std::fs::write(self.dir.path().join("known_hosts"), text).unwrap();
    }

    fn write_ssh_config(&self) {
        let mut text = String::new();
        for n in &self.nodes {
            text.push_str(&format!(
                "Host {}\n  HostName {}\n  User root\n  IdentityFile {}\n  IdentitiesOnly yes\n  UserKnownHostsFile {}\n  StrictHostKeyChecking yes\n\n",
                n.name,
                n.address,
                self.dir.path().join("client_key").display(),
                self.dir.path().join("known_hosts").display()
            ));
        }
        std::fs::write(self.dir.path().join("ssh_config"), text).unwrap();
    }

    /// Adds `option` (e.g. `KexAlgorithms curve25519-sha256`) for every node to the deployer's
    /// `ssh_config`.
    pub fn ssh_option(&self, option: &str) {
        let path = self.dir.path().join("ssh_config");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&format!("Host *\n  {option}\n"));
        std::fs::write(path, text).unwrap();
    }

    fn write_fleet(&self) {
        let mut nodes = String::new();
        for n in &self.nodes {
            nodes.push_str(&format!(
                "    {name} = {{ declaration = \"nodes/{name}.ncl\", ssh = {{ destination = \"{name}\" }}, remote = {{ mesh = \"{bin}\", state_dir = \"{state}\", root = \"{root}\" }} }},\n",
                name = n.name,
                bin = env!("CARGO_BIN_EXE_mesh"),
                state = n.state().display(),
                root = n.root().display(),
            ));
        }
        std::fs::write(
            self.fleet(),
            format!(
                "let mesh = import \"mesh.ncl\" in\nmesh.fleet {{\n  ssh_config = \"ssh_config\",\n  nodes = {{\n{nodes}  }},\n}}\n"
            ),
        )
        .unwrap();
    }

    /// The fleet file.
    pub fn fleet(&self) -> PathBuf {
        self.dir.path().join("fleet.ncl")
    }

    /// Rewrites node `name`'s declaration.
    pub fn declare(&self, name: &str, text: &str) {
        std::fs::write(self.dir.path().join(format!("nodes/{name}.ncl")), text).unwrap();
    }

    /// The deployer's state directory.
    pub fn deployer_state(&self) -> PathBuf {
        self.dir.path().join("deployer-state")
    }

    /// `mesh ARGS` in the deployer's namespace, with the lab's fleet file.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.deployer, env!("CARGO_BIN_EXE_mesh")])
            .env("MESH_STATE_DIR", self.deployer_state())
            .env("MESH_FLEET", self.fleet())
            .env("NO_COLOR", "1")
            .env_remove("MESH_ROOT")
            .env_remove("MESH_NETNS")
            .args(args);
        c
    }

    /// `mesh ARGS` in the deployer's namespace.
    pub fn mesh(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("mesh runs")
    }

    /// `ssh NODE COMMAND` from the deployer's namespace, over a new connection.
    pub fn ssh(&self, node: &str, command: &str) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.deployer, "ssh", "-F"])
            .arg(self.dir.path().join("ssh_config"))
            .args([
                "-o",
                "ConnectTimeout=3",
                "-o",
                "BatchMode=yes",
                node,
                command,
            ])
            .output()
            .expect("ssh runs")
    }

    /// Makes `node` unreachable from the deployer: its packets are dropped on the way (a
    /// connection times out, as on a real network), its sshd keeps running.
    pub fn cut(&self, node: &str) {
        let n = self.nodes.iter().find(|n| n.name == node).unwrap();
        let rules = self.dir.path().join(format!("cut-{node}.nft"));
        std::fs::write(
            &rules,
            format!(
                "table inet cut_{node} {{\n chain out {{\n type filter hook output priority 0;\n ip daddr {} drop\n }}\n}}\n",
                n.address
            ),
        )
        .unwrap();
        run(Command::new("ip")
            .args(["netns", "exec", &self.deployer, "nft", "-f"])
            .arg(&rules));
    }
}

impl Lab {
    /// The deployer's end of `node`'s link.
    fn near_end(&self, node: &str) -> String {
        let i = self.nodes.iter().position(|n| n.name == node).unwrap();
        let suffix = format!("x{i}");
        let out = Command::new("ip")
            .args(["-n", &self.deployer, "-o", "link", "show"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                l.split(':')
                    .nth(1)
                    .map(|n| n.trim().split('@').next().unwrap_or("").to_owned())
            })
            .find(|n| n.starts_with("md") && n.ends_with(&suffix))
            .expect("the node's link")
    }

    /// Makes `node` reachable again after [`Lab::cut`].
    pub fn uncut(&self, node: &str) {
        run(Command::new("ip").args([
            "netns",
            "exec",
            &self.deployer,
            "nft",
            "delete",
            "table",
            "inet",
            &format!("cut_{node}"),
        ]));
    }

    /// Slows what the deployer sends `node` to `rate` (tc's words, e.g. `4mbit`).
    pub fn throttle(&self, node: &str, rate: &str) {
        let dev = self.near_end(node);
        self.tc(&[
            "add", "dev", &dev, "root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms",
        ]);
    }

    /// Lifts [`Lab::throttle`].
    pub fn unthrottle(&self, node: &str) {
        let dev = self.near_end(node);
        self.tc(&["del", "dev", &dev, "root"]);
    }

    /// `tc qdisc ARGS` in the deployer's namespace.
    fn tc(&self, args: &[&str]) {
        run(Command::new("ip")
            .args(["netns", "exec", &self.deployer, "tc", "qdisc"])
            .args(args));
    }

    /// Bytes the deployer sent `node` over its link so far, everything on the wire (SSH's).
    pub fn wire(&self, node: &str) -> u64 {
        let dev = self.near_end(node);
        let out = Command::new("ip")
            .args([
                "-n",
                &self.deployer,
                "-j",
                "-s",
                "link",
                "show",
                "dev",
                &dev,
            ])
            .output()
            .unwrap();
        let links: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        links[0]["stats64"]["tx"]["bytes"]
            .as_u64()
            .expect("tx bytes")
    }

    /// How many connections `node`'s sshd accepted so far.
    pub fn logins(&self, node: &str) -> usize {
        let n = self.nodes.iter().find(|n| n.name == node).unwrap();
        std::fs::read_to_string(n.dir.join("sshd.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("Accepted publickey"))
            .count()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.deployer])
            .output();
    }
}

/// A node declaration: a managed node with the ssh port opened (`ssh_open`), a file whose text is
/// `motd`; its private address its own in the lab's fleet (`nodeN`: 10.77.0.(5 + N)).
pub fn node_decl(name: &str, motd: &str, ssh_open: bool) -> String {
    let index: u8 = name
        .trim_start_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap_or(0);
    let address = format!("10.77.0.{}", 5 + index);
    let ssh = if ssh_open {
        "{ name = \"ssh\", config = fun s => { openings = [{ port = s.ports.ssh, paths = ['incoming] }] } },"
    } else {
        ""
    };
    let big = "0123456789abcdef".repeat(4096);
    format!(
        r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "{name}",
  settings = {{
    ports = {{ store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820, ssh = 22 }},
    private_network = {{ range = "10.77.0.0/24", address = "{address}" }},
  }},
  modules = [
    {ssh}
    {{ name = "motd", config = fun s => {{ files = [
      {{ path = "/etc/motd", content = "{motd}" }},
      # 64 KiB that never change: a deploy sends them once.
      {{ path = "/etc/big", content = "{big}" }},
    ] }} }},
  ],
}}
"#
    )
}

pub fn path_of(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A node with `count` files of its own beside the usual two, their contents in
/// `nodes/data/NAME-I` (imported as text).
pub fn decl_with_data(name: &str, motd: &str, count: usize) -> String {
    let files: String = (0..count)
        .map(|i| {
            format!(
                "      {{ path = \"/etc/data/f{i:03}\", content = import \"data/{name}-{i:03}\" as 'Text }},\n"
            )
        })
        .collect();
    node_decl(name, motd, true).replace(
        "      # 64 KiB that never change: a deploy sends them once.",
        &format!("{files}      # 64 KiB that never change: a deploy sends them once."),
    )
}

/// Writes `count` data files for `name`, each `size` bytes of text that does not compress
/// much (hex of a hash chain), different for each `seed`.
pub fn write_data(lab: &Lab, name: &str, count: usize, size: usize, seed: &str) {
    let dir = lab.dir.path().join("nodes/data");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..count {
        let mut text = String::with_capacity(size);
        let mut h = mesh_lib::BlobHash::of(format!("{seed} {name} {i}").as_bytes()).to_string();
        while text.len() < size {
            text.push_str(&h[3..]);
            h = mesh_lib::BlobHash::of(h.as_bytes()).to_string();
        }
        text.truncate(size);
        std::fs::write(dir.join(format!("{name}-{i:03}")), text).unwrap();
    }
}
