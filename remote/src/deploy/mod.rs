//! A deploy on the node: a switch armed with a deadline, which the deployer confirms over a new
//! connection — or the node switches back by itself to the generation that was in force.
//!
//! The node keeps one record per deploy, `STATE/deploys/TOKEN.json` (written atomically), naming
//! the generation switched to, the one in force before, the deadline and how it ended; the
//! deployer's confirmation is a marker file beside it, `TOKEN.confirmed`. The process that
//! switches and waits (the agent) is detached from the connection that started it, so a dropped
//! connection changes nothing: without a confirmation in time, it reverts.
//!
//! States: `starting` → `switching` → `switched` (waiting for the confirmation) → `confirmed`
//! or `reverted`; `failed` when the switch did not happen (nothing to revert).
//!
//! The deadline is armed with the deploy, before the switch starts: a switch still running at
//! it is stopped and the node brought back, and the confirmation must come before it. The
//! record names the agent that carries the deploy (its pid, its start, the boot), so that what
//! runs at boot ([`agent::settle`], from `mesh reconcile`) finds a deploy whose agent is gone
//! — the node restarted — and settles it: back to the generation before once the deadline has
//! passed, or a new agent for the time that is left.

pub mod agent;
pub mod health;
pub mod pull;
pub mod serve;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use mesh_lib::{atomic, GenerationId};
use serde::{Deserialize, Serialize};

/// How a deploy stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeployState {
    /// Armed; the agent has not started the switch yet.
    Starting,
    /// The switch is running.
    Switching,
    /// Switched; waiting for the deployer's confirmation until the deadline.
    Switched,
    /// Confirmed in time: the new generation stays.
    Confirmed,
    /// Switched back to the generation in force before (see `reason`).
    Reverted,
    /// The switch did not happen, or reverting failed (see `reason`).
    Failed,
}

impl DeployState {
    /// Whether nothing more will happen to it.
    pub fn settled(self) -> bool {
        matches!(
            self,
            DeployState::Confirmed | DeployState::Reverted | DeployState::Failed
        )
    }
}

/// One deploy's record on the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deploy {
    /// Its token.
    pub token: String,
    /// The generation switched to.
    pub target: GenerationId,
    /// The generation in force before (`None` on a node's first switch).
    pub previous: Option<GenerationId>,
    /// Seconds the deployer has to confirm once switched.
    pub confirm_within: u64,
    /// How it stands.
    pub state: DeployState,
    /// Why it ended as it did, for a revert or a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the switch changed, in a few counts (files, firewall, units, containers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<serde_json::Value>,
    /// When it was armed and when it last changed (RFC 3339, UTC, to the microsecond).
    pub armed: String,
    /// When it last changed.
    pub updated: String,
    /// By when the switch must be done and confirmed (RFC 3339, UTC): `armed` plus
    /// `confirm_within`. (Absent in a record of an older mesh: then from the switch's end.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// The process that carries it, while it is not settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentId>,
}

/// A process, told apart from a later one that got its pid and from one of an earlier boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentId {
    /// Its pid.
    pub pid: u32,
    /// When it started, in clock ticks since the boot (`/proc/PID/stat`'s 22nd field).
    pub start: u64,
    /// The boot it runs in (`/proc/sys/kernel/random/boot_id`).
    pub boot: String,
}

impl AgentId {
    /// The process `pid`, as it is now (`None` when there is none).
    pub fn of(pid: u32) -> Option<Self> {
        Some(Self {
            pid,
            start: start_time(pid)?,
            boot: boot_id(),
        })
    }

    /// This process.
    pub fn this() -> Option<Self> {
        Self::of(std::process::id())
    }

    /// Whether the process still runs: the same pid, started at the same time, in this boot.
    pub fn alive(&self) -> bool {
        self.boot == boot_id() && start_time(self.pid) == Some(self.start)
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// A process's start time, in clock ticks since the boot; `None` when it does not run (or is
/// a zombie: its work is over).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's name (in parentheses, which may hold anything): state, then the
    // fields from the 4th on; the start time is the 22nd.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Now, to the microsecond: two deploys armed within one second (a deploy and the next, on a
/// fast link) still sort by when they were armed. The text has a fixed width, so it sorts as
/// the time does.
pub(crate) fn now() -> String {
    stamp(SystemTime::now())
}

fn stamp(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

/// The folder of the deploys' records.
pub fn folder(state: &Path) -> PathBuf {
    state.join("deploys")
}

fn record_path(state: &Path, token: &str) -> PathBuf {
    folder(state).join(format!("{token}.json"))
}

fn marker_path(state: &Path, token: &str) -> PathBuf {
    folder(state).join(format!("{token}.confirmed"))
}

fn rejection_path(state: &Path, token: &str) -> PathBuf {
    folder(state).join(format!("{token}.rejected"))
}

/// What came of the wait for a deploy's confirmation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Confirmed in time.
    Confirmed,
    /// Rejected, for this reason (a pull whose health checks failed): go back now.
    Rejected(String),
    /// Nothing came in time.
    TimedOut,
}

/// The agent's log of a deploy: what its switch and its revert said.
pub fn log_path(state: &Path, token: &str) -> PathBuf {
    folder(state).join(format!("{token}.log"))
}

/// A token is 32 lowercase hex digits: never a path.
pub fn valid_token(token: &str) -> bool {
    token.len() == 32
        && token
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// A new, unguessable token.
pub fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())?;
    Ok(hex::encode(bytes))
}

impl Deploy {
    /// Arms a deploy of `target` (a new record, `starting`).
    pub fn arm(
        state: &Path,
        target: GenerationId,
        previous: Option<GenerationId>,
        confirm_within: u64,
    ) -> std::io::Result<Self> {
        atomic::create_dir_all(&folder(state))?;
        let armed = SystemTime::now();
        let deploy = Self {
            token: new_token()?,
            target,
            previous,
            confirm_within,
            state: DeployState::Starting,
            reason: None,
            changed: None,
            armed: stamp(armed),
            updated: stamp(armed),
            deadline: Some(stamp(armed + Duration::from_secs(confirm_within))),
            agent: None,
        };
        deploy.save(state)?;
        Ok(deploy)
    }

    /// Reads a deploy's record.
    pub fn load(state: &Path, token: &str) -> std::io::Result<Self> {
        if !valid_token(token) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "`{}` is not a deploy token (32 hex digits)",
                    mesh_lib::text::escape(token)
                ),
            ));
        }
        let bytes = std::fs::read(record_path(state, token))?;
        serde_json::from_slice(&bytes).map_err(std::io::Error::other)
    }

    /// The tokens of the deploys recorded on the node (their records' names), unread.
    fn tokens(state: &Path) -> std::io::Result<Vec<String>> {
        let entries = match std::fs::read_dir(folder(state)) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut tokens = Vec::new();
        for entry in entries {
            let name = entry?.file_name();
            if let Some(token) = name.to_str().and_then(|n| n.strip_suffix(".json")) {
                tokens.push(token.to_owned());
            }
        }
        Ok(tokens)
    }

    /// Every deploy recorded on the node, the newest first.
    pub fn all(state: &Path) -> std::io::Result<Vec<Self>> {
        let mut out: Vec<Self> = Self::tokens(state)?
            .iter()
            .filter_map(|token| Self::load(state, token).ok())
            .collect();
        out.sort_by(|a, b| b.armed.cmp(&a.armed).then(b.token.cmp(&a.token)));
        Ok(out)
    }

    /// Once there are more than twice `keep` deploys, removes the settled ones past the newest
    /// `keep` (their records, logs and markers): a node's deploys are read on every deploy
    /// (which one waits, whether the generation in force was deployed), so they stay a bounded
    /// few, not one per deploy ever made; and below that bound only the folder is listed, not
    /// every record read. One not settled is never removed. How many went.
    pub fn prune(state: &Path, keep: usize) -> std::io::Result<usize> {
        if Self::tokens(state)?.len() <= 2 * keep {
            return Ok(0);
        }
        let mut removed = 0;
        for d in Self::all(state)?
            .into_iter()
            .filter(|d| d.state.settled())
            .skip(keep)
        {
            // The record last: a prune cut short leaves it, and the next one finishes.
            for path in [log_path, marker_path, rejection_path, record_path] {
                match std::fs::remove_file(path(state, &d.token)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            removed += 1;
        }
        Ok(removed)
    }

    /// Writes the record, atomically.
    pub fn save(&self, state: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        atomic::write_file(&record_path(state, &self.token), &bytes, 0o600)
    }

    /// Moves it to `state`, with a reason, and saves it.
    pub fn set(
        &mut self,
        dir: &Path,
        state: DeployState,
        reason: Option<String>,
    ) -> std::io::Result<()> {
        self.state = state;
        self.reason = reason;
        self.updated = now();
        self.save(dir)
    }

    /// The deployer's confirmation: the marker the agent waits for.
    pub fn confirm(state: &Path, token: &str) -> std::io::Result<()> {
        // Only a deploy the node knows is confirmed.
        Self::load(state, token)?;
        atomic::write_file(&marker_path(state, token), b"confirmed\n", 0o600)
    }

    /// Whether the deployer confirmed it.
    pub fn confirmed(&self, state: &Path) -> bool {
        marker_path(state, &self.token).exists()
    }

    /// The switch is not to stay, for `why` (a health check that failed after a pull's
    /// switch): the marker the agent goes back on, at once, recording why.
    pub fn reject(state: &Path, token: &str, why: &str) -> std::io::Result<()> {
        Self::load(state, token)?;
        atomic::write_file(&rejection_path(state, token), why.as_bytes(), 0o600)
    }

    /// Why it was rejected, if it was.
    pub fn rejected(&self, state: &Path) -> Option<String> {
        std::fs::read(rejection_path(state, &self.token))
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// The deadline, when the record has one.
    pub fn deadline(&self) -> Option<SystemTime> {
        let at = self.deadline.as_deref()?;
        humantime::parse_rfc3339(at).ok()
    }

    /// How long until the deadline (zero once it passed).
    pub fn left(&self) -> Duration {
        self.deadline()
            .and_then(|d| d.duration_since(SystemTime::now()).ok())
            .unwrap_or_default()
    }

    /// Waits until the deployer confirms or rejects it, or `within` passes.
    pub fn wait_for_confirmation(&self, state: &Path, within: Duration) -> Verdict {
        let until = Instant::now() + within;
        loop {
            if self.confirmed(state) {
                return Verdict::Confirmed;
            }
            if let Some(why) = self.rejected(state) {
                return Verdict::Rejected(why);
            }
            if Instant::now() >= until {
                return Verdict::TimedOut;
            }
            // A look is a stat and an open that fails: cheap enough to answer a confirmation
            // within milliseconds.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Whether the node refused (nothing moved) rather than failed: a generation it does not trust
/// or cannot decrypt, a lock held.
pub fn refusal(e: &mesh_switch::ActivateError) -> bool {
    matches!(e, mesh_switch::ActivateError::Secret { .. }) || e.kind() == mesh_switch::Kind::Refused
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deploy is armed, found again by its token, confirmed by its marker; a token that is
    /// not one is refused before any path is made of it.
    #[test]
    fn armed_confirmed_and_listed() {
        let dir = tempfile::tempdir().unwrap();
        let target = GenerationId::of(b"g");
        let mut d = Deploy::arm(dir.path(), target, None, 30).unwrap();
        assert!(valid_token(&d.token));
        assert_eq!(Deploy::load(dir.path(), &d.token).unwrap(), d);
        assert_eq!(
            d.wait_for_confirmation(dir.path(), Duration::from_millis(60)),
            Verdict::TimedOut
        );
        Deploy::confirm(dir.path(), &d.token).unwrap();
        assert_eq!(
            d.wait_for_confirmation(dir.path(), Duration::from_secs(5)),
            Verdict::Confirmed
        );
        d.set(dir.path(), DeployState::Confirmed, None).unwrap();
        assert_eq!(
            Deploy::all(dir.path()).unwrap()[0].state,
            DeployState::Confirmed
        );
        assert!(Deploy::load(dir.path(), "../../etc/passwd").is_err());
        let other = Deploy::arm(dir.path(), target, None, 30).unwrap();
        Deploy::reject(dir.path(), &other.token, "a check failed").unwrap();
        assert_eq!(
            other.wait_for_confirmation(dir.path(), Duration::from_secs(5)),
            Verdict::Rejected("a check failed".into())
        );
    }

    /// Pruning waits for twice the deploys it keeps, then keeps the newest settled deploys and
    /// every one not settled, however old, and takes a pruned deploy's log and markers with its
    /// record.
    #[test]
    fn pruning_keeps_the_newest_settled_and_every_unsettled() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let mut oldest_waiting = Deploy::arm(state, GenerationId::of(b"w"), None, 30).unwrap();
        oldest_waiting
            .set(state, DeployState::Switched, None)
            .unwrap();
        let mut settled = Vec::new();
        for n in 0..8u8 {
            std::thread::sleep(Duration::from_millis(2));
            let mut d = Deploy::arm(state, GenerationId::of(&[n]), None, 30).unwrap();
            std::fs::write(log_path(state, &d.token), "switched\n").unwrap();
            Deploy::confirm(state, &d.token).unwrap();
            d.set(state, DeployState::Confirmed, None).unwrap();
            settled.push(d.token);
        }
        // 9 records (the one waiting counts): not past twice 5, nothing goes...
        assert_eq!(Deploy::prune(state, 5).unwrap(), 0);
        assert_eq!(Deploy::all(state).unwrap().len(), 9);
        // ...past twice 4: down to the newest 4 settled, and the one waiting.
        assert_eq!(Deploy::prune(state, 4).unwrap(), 4);
        let listed: Vec<String> = Deploy::all(state)
            .unwrap()
            .into_iter()
            .map(|d| d.token)
            .collect();
        let mut kept: Vec<String> = settled[4..].iter().rev().cloned().collect();
        kept.push(oldest_waiting.token.clone());
        assert_eq!(listed, kept);
        for gone in &settled[..4] {
            for path in [record_path, log_path, marker_path] {
                assert!(
                    !path(state, gone).exists(),
                    "{}",
                    path(state, gone).display()
                );
            }
        }
        assert!(log_path(state, &settled[4]).exists());
        // Nothing more to prune: nothing goes.
        assert_eq!(Deploy::prune(state, 4).unwrap(), 0);
    }

    /// Deploys armed within the same second are listed newest first, whatever their random
    /// tokens: `mesh status` shows the last one.
    #[test]
    fn the_newest_is_first_within_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let mut armed = Vec::new();
        for n in 0..8u8 {
            let d = Deploy::arm(dir.path(), GenerationId::of(&[n]), None, 30).unwrap();
            armed.push(d.token);
            std::thread::sleep(Duration::from_millis(2));
        }
        let listed: Vec<String> = Deploy::all(dir.path())
            .unwrap()
            .into_iter()
            .map(|d| d.token)
            .collect();
        armed.reverse();
        assert_eq!(listed, armed);
    }
}
