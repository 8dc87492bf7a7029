//! Helpers: running the `mesh` binary with a private state directory, copying the examples,
//! and the rule that a test needing root tools fails rather than skips in CI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A `mesh` command with `state` as its state directory and a predictable environment.
pub fn mesh(state: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mesh"));
    c.env("MESH_STATE_DIR", state)
        .env("NO_COLOR", "1")
        .env_remove("MESH_ROOT")
        .env_remove("MESH_NETNS")
        .env_remove("MESH_FLEET")
        .env_remove("MESH_TREE");
    c
}

/// Runs `c` with `input` on its stdin; panics, naming `what` and the input, unless it succeeds.
/// Its stdout.
pub fn feed(mut c: Command, input: &str, what: &str) -> String {
    use std::io::Write;
    let mut child = c
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what}: {}\n{input}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether the binary was built with the crash-injection points a test needs (in CI their
/// absence is a failure).
pub fn crash_points_here() -> bool {
    if cfg!(feature = "crash-points") {
        return true;
    }
    let why = "this test needs the crash-points feature (cargo test --features crash-points)";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("NOT RUN outside CI: {why}");
    false
}

/// Runs `c` with `MESH_CRASH_AT=at`; whether it crashed there (aborted). A run that did not
/// reach the point must succeed; any other death is a failure, named with `context`.
pub fn crashes_at(mut c: Command, at: &str, context: &str) -> bool {
    use std::os::unix::process::ExitStatusExt;
    let out = c.env("MESH_CRASH_AT", at).output().unwrap();
    match out.status.signal() {
        Some(6) => true,
        Some(s) => panic!("{context}: killed by signal {s}"),
        None => {
            assert!(
                out.status.success(),
                "{context}: not reached, and the run failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            false
        }
    }
}

/// What a finished command said.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn last_line(&self) -> &str {
        self.stdout.lines().last().unwrap_or("")
    }
}

pub fn run(mut c: Command) -> Ran {
    let Output {
        status,
        stdout,
        stderr,
    } = c.output().expect("the mesh binary runs");
    Ran {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// `mesh build NODE [--record R] --json` in `state`; the parsed JSON, or a panic with stderr.
pub fn build_json(state: &Path, node: &Path, record: Option<&Path>) -> serde_json::Value {
    let mut c = mesh(state);
    c.arg("build").arg(node).arg("--json");
    if let Some(r) = record {
        c.arg("--record").arg(r);
    }
    let ran = run(c);
    assert_eq!(
        ran.code,
        0,
        "build of {} failed:\n{}",
        node.display(),
        ran.stderr
    );
    serde_json::from_str(ran.last_line()).expect("--json prints one JSON object")
}

/// Copies a folder tree.
pub fn copy_tree(from: &Path, to: &Path) {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.unwrap();
        let rel = entry.path().strip_prefix(from).unwrap();
        let dest = to.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

/// Whether the tools a test needs (root and the named commands) are here. In CI (`CI=true`)
/// their absence is a failure, never a skip.
pub fn have_root_tools(tools: &[&str]) -> bool {
    let root = rustix::process::geteuid().is_root();
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !on_path(t)).collect();
    let ok = root && missing.is_empty();
    if !ok {
        let why = format!("needs root (have: {root}) and {missing:?} on PATH");
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("this test {why}, and CI must run it");
        }
        eprintln!("NOT RUN outside CI: this test {why}");
    }
    ok
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
                .any(|d| d.join(tool).is_file())
        })
        .unwrap_or(false)
}

/// A network namespace for one test, deleted when dropped (also when the test fails).
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> Self {
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("mesh-{tag}-{}-{n}", std::process::id());
        let status = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .expect("ip runs");
        assert!(status.success(), "ip netns add {name}");
        Self { name }
    }

    /// Runs a command inside the namespace.
    pub fn exec(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).args(args);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A new ed25519 key at `path` (its folder made), without a passphrase, commented `comment`:
/// its public half, one line.
pub fn ssh_keygen(path: &Path, comment: &str) -> String {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
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

/// A command stopped at a crash point (`MESH_PAUSE_AT`), waiting for the test to do what a
/// fault would do in its middle, then to let it go on.
pub struct Paused {
    child: Option<std::process::Child>,
}

impl Paused {
    /// Starts `c` with `MESH_PAUSE_AT=at` and waits (up to a minute) until it has stopped
    /// itself there; `None` when it ended without reaching the point (its output then asserts
    /// success, naming `context`).
    pub fn at(mut c: Command, at: &str, context: &str) -> Option<Self> {
        let mut child = c
            .env("MESH_PAUSE_AT", at)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stat = format!("/proc/{}/stat", child.id());
        for _ in 0..6000 {
            if let Some(status) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                assert!(
                    status.success(),
                    "{context}: not paused, and the run failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                return None;
            }
            // The state is the field after the command's name (which is in parentheses).
            let stopped = std::fs::read_to_string(&stat).is_ok_and(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('T'))
            });
            if stopped {
                return Some(Self { child: Some(child) });
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("{context}: neither paused nor ended in a minute");
    }

    /// Lets it go on, and waits for its end.
    pub fn resume(mut self) -> Ran {
        let child = self.child.take().expect("not resumed yet");
        let pid = child.id().to_string();
        let cont = Command::new("kill").args(["-CONT", &pid]).status().unwrap();
        assert!(cont.success(), "kill -CONT {pid}");
        let Output {
            status,
            stdout,
            stderr,
        } = child.wait_with_output().unwrap();
        Ran {
            code: status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }
}

impl Drop for Paused {
    /// A test that failed before letting it go on leaves no stopped process behind.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub use crate::images_made::import_busybox;
