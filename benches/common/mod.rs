//! What the root package's benches share: a network namespace of their own (a switch puts the
//! firewall in force, and no bench touches the machine's ruleset), running `mesh` and other
//! commands, medians, milliseconds.
#![allow(dead_code)] // each bench uses a part

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

pub mod cpu;
#[path = "../../tests/it/images_made.rs"]
pub mod images_made;

/// A network namespace, deleted when dropped (also when the bench panics).
pub struct Netns(pub String);

impl Netns {
    /// `ip netns add NAME`.
    pub fn add(name: String) -> Self {
        assert!(
            Command::new("ip")
                .args(["netns", "add", &name])
                .status()
                .unwrap()
                .success(),
            "ip netns add {name}"
        );
        Self(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Runs `work` on `width` threads, each taking the next item; how long it took.
pub fn at_a_time<T: Sync>(width: usize, items: &[T], work: impl Fn(&T) + Sync) -> Duration {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..width {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(item) = items.get(i) else { break };
                work(item);
            });
        }
    });
    t.elapsed()
}

/// The median of the runs.
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Milliseconds, one decimal.
pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Runs the `mesh` binary with its state in `state`, files under `root` and the firewall in
/// `netns` (`None`: the namespace the bench runs in); its stdout. Panics unless it succeeds.
pub fn mesh(state: &Path, root: &Path, netns: Option<&str>, args: &[&str]) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mesh"));
    c.env("MESH_STATE_DIR", state).env("MESH_ROOT", root);
    match netns {
        Some(ns) => c.env("MESH_NETNS", ns),
        None => c.env_remove("MESH_NETNS"),
    };
    let out = c.args(args).output().unwrap();
    assert!(
        out.status.success(),
        "mesh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `args` with `input` on its stdin; panics unless it succeeds.
pub fn feed(args: &[&str], input: &str) {
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "{args:?}");
}

/// Whether a Docker engine answers; says why not when it does not.
pub fn docker_here() -> bool {
    let ok = Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("this bench needs a Docker engine");
    }
    ok
}

/// Writes `DIR/node.ncl`: the node of the container benches, with `modules` (Nickel module
/// records, each followed by a comma); its path.
pub fn container_node(dir: &Path, modules: &str) -> std::path::PathBuf {
    let decl = dir.join("node.ncl");
    std::fs::write(
        &decl,
        format!("let mesh = import \"mesh.ncl\" in\nmesh.node {{ name = \"c60\", settings = {{ ports = {{ store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820 }}, private_network = {{ range = \"10.77.0.0/24\", address = \"10.77.0.1\" }} }}, modules = [\n{modules}] }}\n"),
    )
    .unwrap();
    decl
}

/// Imports `image`: a root of busybox alone, made with `docker import`.
pub fn import_busybox(image: &str) {
    import_busybox_with(image, None);
}

/// Imports `image`: a root of busybox and, with `extra`, a file `/extra` of that text (which
/// makes the image other bytes), made with `docker import`.
pub fn import_busybox_with(image: &str, extra: Option<&str>) {
    images_made::import_busybox(image, extra.map(|text| ("extra", text)));
}

/// Removes, when dropped, the containers and volumes whose names hold `.0`, and the image `.1`.
pub struct DockerCleanup(pub String, pub String);

impl Drop for DockerCleanup {
    fn drop(&mut self) {
        if let Ok(out) = Command::new("docker")
            .args(["ps", "-aq", "--filter", &format!("name={}", self.0)])
            .output()
        {
            let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect();
            if !ids.is_empty() {
                let _ = Command::new("docker")
                    .arg("rm")
                    .arg("-f")
                    .args(&ids)
                    .output();
            }
        }
        if let Ok(out) = Command::new("docker")
            .args([
                "volume",
                "ls",
                "-q",
                "--filter",
                &format!("name={}", self.0),
            ])
            .output()
        {
            for v in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("docker")
                    .args(["volume", "rm", "-f", v])
                    .output();
            }
        }
        let _ = Command::new("docker").args(["rmi", "-f", &self.1]).output();
    }
}

/// A group of processes whose CPU time is counted by the kernel, whatever else the machine
/// runs: a cgroup (v1's `cpuacct`, or v2's `cpu.stat`) of the bench's own, removed when
/// dropped. Processes forked by a member are members too, also once they leave their parent.
pub struct CpuGroup {
    dir: std::path::PathBuf,
    v2: bool,
}

impl CpuGroup {
    /// A new group named `name`; `None` where this machine has no cgroup file system to count in.
    pub fn new(name: &str) -> Option<Self> {
        let v1 = Path::new("/sys/fs/cgroup/cpuacct");
        let (base, v2) = if v1.join("cpuacct.usage").exists() {
            (v1.to_path_buf(), false)
        } else if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            (Path::new("/sys/fs/cgroup").to_path_buf(), true)
        } else {
            return None;
        };
        let dir = base.join(format!("mesh-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        Some(Self { dir, v2 })
    }

    /// Moves process `pid` (and what it forks from now on) into the group.
    pub fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", self.dir.display()));
    }

    /// The CPU time the group's processes used so far, those gone included.
    pub fn used(&self) -> Duration {
        if self.v2 {
            let stat = std::fs::read_to_string(self.dir.join("cpu.stat")).unwrap();
            let usec = stat
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            Duration::from_micros(usec)
        } else {
            let ns = std::fs::read_to_string(self.dir.join("cpuacct.usage")).unwrap();
            Duration::from_nanos(ns.trim().parse().unwrap_or(0))
        }
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // Whatever is left goes back to the root group: a group is removed empty.
        let root = self.dir.parent().unwrap().join("cgroup.procs");
        if let Ok(pids) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in pids.split_whitespace() {
                let _ = std::fs::write(&root, pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
