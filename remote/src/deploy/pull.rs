//! The node's side of a pull (`mesh pull`, [`pull`]): the node's tag read from the registry,
//! its signatures judged before anything else is fetched, then only the objects the store lacks,
//! each checked against its name; then a switch armed like a deploy's — its agent, its
//! deadline, its way back — which the node confirms *itself* once the switch's settle window
//! passed without a failed unit and its health checks pass, or rejects, naming the check and
//! why, so that the agent goes back at once and records it ([`switch`]).
//!
//! The last pull's outcome is kept in `STATE/pull.json` (atomically), for `mesh status` and
//! `mesh fleet status`: where from, which generation, how it ended and why. A pull that finds
//! its generation in force writes nothing, this record included.
//!
//! A stage (`mesh pull --stage`, [`Request::stage`]) goes as far as a pull goes before its
//! switch — the tag read, its statement and signatures judged, the objects the store lacks
//! fetched — then stages the generation ([`mesh_switch::stage`]: its images fetched, its
//! secrets decrypted to check them) and changes nothing in force. It keeps the signatures but
//! not the statement, and writes no pull record: the floor of sequences stays where it was, so
//! the later pull of the same tag judges the same statement afresh (an expiry passed meanwhile
//! refuses it then), finds every object and image present and switches.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_lib::{atomic, GenerationId};
use serde::{Deserialize, Serialize};

use mesh_registry::{Registry, RegistryError};

use super::agent::{self, Place, Spawner, StartError};
use super::health::{self, Check};
use super::{Deploy, DeployState};
use mesh_node::lock::{LockError, StateLock};
use mesh_switch::ActivateError;
use mesh_switch::Activator;

/// How a pull ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PullResult {
    /// Switched, healthy, confirmed.
    Confirmed,
    /// Switched, then back: a unit failed, or a health check did (see the reason).
    Reverted,
    /// Not trusted, not what it claims, the registry denied access (the docker config's
    /// credentials, or their absence), or the node is busy: nothing changed.
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
    /// When the statement that named it expires (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
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
                .is_some_and(mesh_node::lock::runs)
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
    node: &Activator,
    target: GenerationId,
    guard: &Guard,
) -> Result<Deploy, StartError> {
    // The agent's deadline: the switch, its settle window, the checks, and a margin.
    let seconds = 60 + place.settle.as_secs() + guard.within.as_secs();
    let deploy = agent::start(
        place,
        spawner,
        node,
        target,
        seconds,
        agent::Asked::FromElsewhere,
    )?;
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

/// Stages `id` (fetched, its signatures judged and kept) under the node's lock: staged, or
/// how it ended (refused: a lock held, a secret this node cannot read, an image whose digest
/// its registry does not have; failed: a registry down), nothing written but fetched images.
fn staged(place: &Place, mut record: LastPull, id: GenerationId) -> Result<Pulled, PullError> {
    let staged = Activator::open(&place.state, &place.root, place.netns.clone()).and_then(|node| {
        let generation = node.store.generation(&id)?;
        node.stage(id, &generation)
    });
    match staged {
        Ok(s) => {
            record.at = super::now();
            Ok(Pulled::Staged(record, s))
        }
        Err(e) => {
            record.result = if super::refusal(&e) {
                PullResult::Refused
            } else {
                PullResult::Failed
            };
            record.reason = Some(format!("{e}; nothing in force was changed"));
            record.at = super::now();
            Ok(Pulled::Done(record))
        }
    }
}

/// Judges the statement the tag carries (`statement`: none, one that is not a statement's
/// form, or one) for this node, fetched under `tag`, naming what `artifact` carries (`None`: a
/// withdrawal): fit, or refused — exit 2, nothing written.
fn judge(
    node: &Activator,
    tag: &str,
    statement: Option<Result<mesh_lib::statement::Signed, String>>,
    artifact: Option<&mesh_registry::Artifact>,
) -> Result<crate::statement::Fit, PullError> {
    use mesh_lib::statement::{naming, StatementError};
    let refused = |e: StatementError| PullError::Node(ActivateError::Statement(e));
    let what = artifact.map_or_else(
        || format!("the withdrawal of {tag}"),
        |a| format!("{tag}'s generation {}", a.generation),
    );
    let signed = match statement {
        None => {
            return Err(refused(StatementError::Malformed(format!(
                "{what} carries no statement: nothing from a registry is acted on unless a \
                 signer this node trusts stated it, for this node, with a sequence and an expiry"
            ))))
        }
        Some(Err(why)) => return Err(refused(StatementError::Malformed(format!("{what}: {why}")))),
        Some(Ok(s)) => s,
    };
    let fit = match crate::statement::judge(node, &signed, Some(tag), std::time::SystemTime::now())?
    {
        Some(fit) => fit,
        None => {
            return Err(PullError::Node(ActivateError::Signers {
                path: crate::trust::signers_path(node)?,
                why: "there is no such file: a pull switches only to a generation a signer the \
                      node trusts signed"
                    .into(),
            }))
        }
    };
    let offered = artifact.map(|a| a.generation);
    if fit.statement().generation != offered {
        return Err(refused(StatementError::Elsewhere {
            stated: naming(fit.statement().generation),
            offered: naming(offered),
        }));
    }
    Ok(fit)
}

/// How one pull went, for its caller (`mesh pull` prints it, `mesh follow` goes on).
#[derive(Debug)]
pub enum Pulled {
    /// The tag's generation is in force: nothing done, nothing written.
    UpToDate(GenerationId),
    /// The tag's generation went back here before: not tried again (unless retried).
    NotAgain(LastPull),
    /// Fetched and switched (or not), as recorded (a stage that failed or was refused: as it
    /// would be recorded, but not written).
    Done(LastPull),
    /// Fetched and staged: nothing in force changed, no pull recorded.
    Staged(LastPull, mesh_switch::stage::Staged),
    /// Another pull (this pid) is running here: nothing done, nothing recorded.
    Busy(String),
    /// The tag is withdrawn (a rollout stopped): nothing done, nothing recorded.
    Withdrawn(String),
    /// What the tag says is not to be acted on — its statement old, another node's, expired,
    /// unsigned, or missing: nothing fetched beyond it, nothing changed, nothing recorded.
    Refused(String),
}

/// Why a pull could not even be tried (a pull that was tried and failed is a [`Pulled::Done`]
/// whose record says why).
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// No tag was named, and no generation in force names the node.
    #[error("no generation is in force here to tell this node's name: give it with --node")]
    NoName,
    /// The node's state could not be read.
    #[error(transparent)]
    Node(#[from] ActivateError),
    /// The store.
    #[error(transparent)]
    Store(#[from] mesh_lib::store::StoreError),
    /// The pull's lock or its record.
    #[error("{0}")]
    Io(String),
}

/// What a pull is asked.
pub struct Request<'a> {
    /// The tag to read (default: the node's name, as its generation in force says).
    pub tag: Option<&'a str>,
    /// Whether to try again a generation that went back here.
    pub retry: bool,
    /// The guard of its switch.
    pub guard: &'a Guard,
    /// Stage the generation instead of switching to it (see the module's doc).
    pub stage: bool,
}

/// Pulls what the node's tag in `registry` names onto the node at `place` (its agent started
/// by `spawner`; see the module's doc): nothing when it is in force, and never a generation no
/// signer the node trusts vouches for. One pull at a time on a node; one under way is recorded
/// as `running` (its pid), so that one killed reads as interrupted.
pub fn pull(
    place: &Place,
    spawner: &dyn Spawner,
    registry: &Registry,
    request: &Request<'_>,
) -> Result<Pulled, PullError> {
    let state = place.state.as_path();
    let node = Activator::inspect(state, &place.root, place.netns.clone())?;
    let current = node.current().map_err(ActivateError::from)?;
    let tag = match (request.tag, &current) {
        (Some(n), _) => n.to_owned(),
        (None, Some((_, _, g))) => g.node.to_string(),
        (None, None) => return Err(PullError::NoName),
    };
    let mut record = LastPull {
        from: format!("{}:{tag}", registry.name()),
        generation: None,
        revision: None,
        expires: None,
        result: PullResult::Failed,
        reason: None,
        objects: 0,
        bytes: 0,
        at: String::new(),
        deploy: None,
        pid: None,
    };
    // A stage records nothing: the record is of what a pull put in force.
    let save = |record: &mut LastPull| {
        if request.stage {
            record.at = super::now();
            return Ok(());
        }
        record
            .save(state)
            .map_err(|e| PullError::Io(format!("recording the pull: {e}")))
    };
    let ended = |mut record: LastPull, result: PullResult, why: String| {
        record.result = result;
        record.reason = Some(why);
        save(&mut record)?;
        Ok(Pulled::Done(record))
    };
    let (artifact, statement) = match registry.artifact(&tag) {
        Ok(a) => {
            let statement = a.statement();
            (Ok(a), statement)
        }
        Err(RegistryError::Withdrawn {
            reference,
            statement,
        }) => {
            let said = RegistryError::Withdrawn {
                reference,
                statement: None,
            };
            let statement = statement.as_deref().map(mesh_registry::parse_statement);
            (Err(said.to_string()), statement)
        }
        Err(
            e @ (RegistryError::Invalid { .. }
            | RegistryError::NoTag(_)
            | RegistryError::Denied { .. }),
        ) => return ended(record, PullResult::Refused, e.to_string()),
        Err(e) => return ended(record, PullResult::Failed, e.to_string()),
    };
    // The statement first, judged before anything else is fetched — and a refusal writes
    // nothing: an old statement replayed, another node's, an expired one, an unsigned
    // withdrawal leave the node as they found it.
    let fit = match judge(&node, &tag, statement, artifact.as_ref().ok()) {
        Ok(fit) => fit,
        Err(PullError::Node(e)) if e.kind() == mesh_switch::Kind::Refused => {
            return Ok(Pulled::Refused(e.to_string()))
        }
        Err(e) => return Err(e),
    };
    let artifact = match artifact {
        Ok(a) => a,
        Err(withdrawn) => {
            crate::statement::keep(&node, &fit)?;
            return Ok(Pulled::Withdrawn(withdrawn));
        }
    };
    let id = artifact.generation;
    record.generation = Some(id);
    record.revision = artifact.revision().map(str::to_owned);
    record.expires = Some(fit.statement().expires_stamp());
    record.bytes = artifact.bytes.len() as u64;
    let waiting = agent::waiting(state, &id).is_some();
    if current.as_ref().map(|(_, c, _)| *c) == Some(id) && !waiting {
        // A newer statement of what is in force (signed again, to renew it) is kept — by a
        // pull, not a stage.
        if !request.stage {
            crate::statement::keep(&node, &fit)?;
        }
        return Ok(Pulled::UpToDate(id));
    }
    if !request.retry {
        if let Some(last) = LastPull::load(state) {
            if last.generation == Some(id) && last.result == PullResult::Reverted {
                return Ok(Pulled::NotAgain(last));
            }
        }
    }
    // One pull at a time past here (a timer's and one by hand): the second does nothing and
    // records nothing. Taken once there is something to do: a pull in force writes nothing.
    let _pulling = match StateLock::take_file(state, "pull.lock") {
        Ok(lock) => lock,
        Err(LockError::Held { pid }) => return Ok(Pulled::Busy(pid)),
        Err(e) => return Err(PullError::Io(e.to_string())),
    };
    // The pull that held it may have just put the generation in force.
    if node
        .current()
        .map_err(ActivateError::from)?
        .map(|(_, c, _)| c)
        == Some(id)
        && agent::waiting(state, &id).is_none()
    {
        return Ok(Pulled::UpToDate(id));
    }
    // Under way, for `mesh status` and the rollout: every end below writes over it, and one
    // that never comes (the process killed) reads as interrupted.
    if !request.stage {
        let mut running = record.clone();
        running.result = PullResult::Running;
        running.pid = Some(std::process::id());
        save(&mut running)?;
    }
    // The signatures first, judged before anything else is fetched.
    let (signatures, bytes) = match registry.signatures(&artifact) {
        Ok(s) => s,
        Err(e @ RegistryError::Denied { .. }) => {
            return ended(record, PullResult::Refused, e.to_string())
        }
        Err(e) => return ended(record, PullResult::Failed, e.to_string()),
    };
    record.bytes += bytes;
    if let Err(e) = crate::trust::judge_offer(&node, &id, &signatures) {
        return ended(record, PullResult::Refused, e.to_string());
    }
    let fetched = match registry.fetch(&node.store, &artifact) {
        Ok(f) => f,
        Err(
            e @ (RegistryError::Mismatch { .. }
            | RegistryError::Invalid { .. }
            | RegistryError::Denied { .. }),
        ) => {
            return ended(
                record,
                PullResult::Refused,
                format!("{e}, and nothing was changed"),
            )
        }
        Err(e) => {
            return ended(
                record,
                PullResult::Failed,
                format!("{e}; the objects that arrived whole are kept, nothing was switched"),
            )
        }
    };
    record.objects = fetched.objects;
    record.bytes += fetched.bytes;
    for text in &signatures {
        if let Ok(sig) = mesh_lib::trust::Signature::parse(text) {
            if sig.verify(&id).is_ok() {
                node.store.put_signature(&id, sig.armored())?;
            }
        }
    }
    if request.stage {
        return staged(place, record, id);
    }
    if let Err(e) = crate::statement::keep(&node, &fit) {
        return ended(record, PullResult::Failed, e.to_string());
    }
    let deploy = match switch(place, spawner, &node, id, request.guard) {
        Ok(d) => d,
        Err(StartError::Refused(e)) => return ended(record, PullResult::Refused, e.to_string()),
        Err(StartError::Io(e)) => return ended(record, PullResult::Failed, e),
    };
    record.deploy = Some(deploy.token.clone());
    let reason = deploy.reason.clone().unwrap_or_default();
    match deploy.state {
        DeployState::Confirmed => {
            record.result = PullResult::Confirmed;
            save(&mut record)?;
            Ok(Pulled::Done(record))
        }
        DeployState::Reverted => ended(record, PullResult::Reverted, reason),
        other => ended(
            record,
            PullResult::Failed,
            format!("its deploy {} is {other:?}: {reason}", deploy.token),
        ),
    }
}
