//! What the root package's benches share: a network namespace of their own (a switch puts the
//! firewall in force, and no bench touches the machine's ruleset), running `mesh` and other
//! commands, medians, milliseconds.
#![allow(dead_code)] // each bench uses a part

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

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
