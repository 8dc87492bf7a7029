//! What the root package's benches share: a network namespace of their own (a switch puts the
//! firewall in force, and no bench touches the machine's ruleset), medians, milliseconds.
#![allow(dead_code)] // each bench uses a part

use std::process::Command;
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
