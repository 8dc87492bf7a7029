//! The node's side of a pull (`mesh pull`), once the generation is in the store and its
//! signature judged: a switch armed like a deploy's — its agent, its deadline, its way back —
//! which the node confirms *itself* once the switch's settle window passed without a failed
//! unit and its health checks pass, or rejects, naming the check and why, so that the agent
//! goes back at once and records it.
//!
//! The last pull's outcome is kept in `STATE/pull.json` (atomically), for `mesh status` and
//! `mesh fleet status`: where from, which generation, how it ended and why. A pull that finds
//! its generation in force writes nothing, this record included.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_lib::{atomic, GenerationId};
use serde::{Deserialize, Serialize};

use super::agent::{self, Place, Spawner, StartError};
use super::health::{self, Check};
use super::{Deploy, DeployState};
use crate::node::Node;

/// How a pull ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PullResult {
    /// Switched, healthy, confirmed.
    Confirmed,
    /// Switched, then back: a unit failed, or a health check did (see the reason).
    Reverted,
    /// Not trusted, not what it claims, or the node is busy: nothing changed.
    Refused,
    /// The registry, the store or the switch failed: the node is in its old generation.
    Failed,
    /// Under way (its `pid` runs it). One whose process is gone reads as failed: interrupted.
    Running,
}

impl PullResult {
    /// Its word.
    pub fn word(self) -> &'static str {
        match self {
            PullResult::Confirmed => "confirmed",
            PullResult::Reverted => "reverted",
            PullResult::Refused => "refused",
            PullResult::Failed => "failed",
            PullResult::Running => "running",
        }
    }
}

/// The last pull's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastPull {
    /// `REGISTRY/REPOSITORY:TAG`.
    pub from: String,
    /// The generation the tag named (`None`: it could not be read).
    pub generation: Option<GenerationId>,
    /// The source revision it was published from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// How it ended.
    pub result: PullResult,
    /// Why, unless confirmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Objects fetched, and their bytes as the registry sent them.
    pub objects: usize,
    /// Bytes received.
    pub bytes: u64,
    /// When it ended (RFC 3339, UTC).
    pub at: String,
    /// The deploy that carried its switch, if it got that far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy: Option<String>,
    /// The process of a pull under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// Where the last pull's record is.
pub fn record_path(state: &Path) -> PathBuf {
    state.join("pull.json")
}

impl LastPull {
    /// The last pull's record, if there was a pull. One under way whose process is gone (killed,
    /// the node restarted) reads as failed, interrupted: its deploy's agent settles the switch
    /// by itself (see `mesh deploys`).
    pub fn load(state: &Path) -> Option<Self> {
        let mut record: Self =
            serde_json::from_slice(&std::fs::read(record_path(state)).ok()?).ok()?;
        if record.result == PullResult::Running
            && !record
                .pid
                .and_then(|p| i32::try_from(p).ok())
                .is_some_and(crate::lock::runs)
        {
            record.result = PullResult::Failed;
            record.reason = Some(format!(
                "interrupted: the pull (pid {}) ended before it recorded how; its deploy, if it \
                 got that far, settles by itself (`mesh deploys`)",
                record.pid.map_or("?".to_owned(), |p| p.to_string())
            ));
        }
        Some(record)
    }

    /// Writes it, atomically, stamped now.
    pub fn save(&mut self, state: &Path) -> std::io::Result<()> {
        self.at = super::now();
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        atomic::write_file(&record_path(state), &bytes, 0o600)
    }
}

/// How a pull's switch is guarded.
#[derive(Debug, Clone)]
pub struct Guard {
    /// The health checks that must pass once switched.
    pub checks: Vec<Check>,
    /// How long they have to pass.
    pub within: Duration,
}

/// Switches to `target` (in the store, its signature there and judged) under a deploy's guard,
/// and confirms it when its checks pass, or rejects it with their reason: the deploy as it
/// ended.
pub fn switch(
    place: &Place,
    spawner: &dyn Spawner,
    node: &Node,
    target: GenerationId,
    guard: &Guard,
) -> Result<Deploy, StartError> {
    // The agent's deadline: the switch, its settle window, the checks, and a margin.
    let seconds = 60 + place.settle.as_secs() + guard.within.as_secs();
    let deploy = agent::start(place, spawner, node, target, seconds)?;
    let io = |e: std::io::Error| StartError::Io(format!("the deploy's record: {e}"));
    let switched = agent::switch_done(&place.state, &deploy.token).map_err(io)?;
    if switched.state != DeployState::Switched {
        return Ok(switched);
    }
    match health::all_pass(&guard.checks, guard.within) {
        Ok(()) => Deploy::confirm(&place.state, &deploy.token).map_err(io)?,
        Err(why) => Deploy::reject(
            &place.state,
            &deploy.token,
            &format!("unhealthy after the switch: {why}"),
        )
        .map_err(io)?,
    }
    agent::settled(&place.state, &deploy.token).map_err(io)
}
