//! The deploy's agent: the process that carries one deploy on the node, detached from the
//! connection that armed it. It takes the state directory's lock and keeps it until the deploy
//! is settled (nothing else switches the node meanwhile), runs the switch in a process of its
//! own — so that a switch still running at the deadline (an engine that never answers) is
//! stopped, never waited for — then waits for the deployer's confirmation until the deadline,
//! or goes back to the generation in force before, in a bounded process of its own too.
//!
//! [`settle`] is what runs at boot (from `mesh reconcile`): a deploy whose agent is gone — the
//! node restarted — is settled there: a switch cut short is finished from its journal and
//! reverted; a switched deploy not confirmed is reverted once its deadline has passed, or gets
//! a new agent for the time that is left, which puts its generation in force again (the restart
//! emptied the ruleset) and waits for the confirmation over a new connection as before.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::deploy::{AgentId, Deploy, DeployState, Verdict};
use mesh_node::lock::{LockError, StateLock};
use mesh_node::profile::Trigger;
use mesh_switch::Activator;
use mesh_switch::{ActivateError, Switched, UnitFailure};

/// How long going back may take, beyond the deadline, before it is given up as hung.
pub const REVERT_BOUND: Duration = Duration::from_secs(120);

/// A step of a deploy, run in a process of its own under the agent's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Switch to the deploy's generation.
    Switch,
    /// Finish what a switch left (its journal), then go back to the generation in force before.
    Revert,
}

impl Step {
    /// Its word on the command line.
    pub fn word(self) -> &'static str {
        match self {
            Step::Switch => "switch",
            Step::Revert => "revert",
        }
    }
}

/// How the binary runs the agent and the steps: the commands, the node's options set.
pub trait Spawner: Send + Sync {
    /// The command that runs the agent of deploy `token`.
    fn agent(&self, token: &str) -> Command;
    /// The command that runs `step` of deploy `token` (it prints a [`StepOutcome`]).
    fn step(&self, token: &str, step: Step) -> Command;
}

/// What a step's process prints: one JSON line on its standard output.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StepOutcome {
    /// Whether it did what it was for.
    pub ok: bool,
    /// What the switch changed, in counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<serde_json::Value>,
    /// The units that failed after the switch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    /// Why it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Why an agent could not carry its deploy.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The deploy's record.
    #[error("the deploy's record: {0}")]
    Record(#[from] std::io::Error),
    /// The node's lock stayed held by another process.
    #[error("the node stays locked: {0}")]
    Locked(#[from] LockError),
}

/// What a switch changed, in counts: for a deploy's record and the deployer's table.
pub fn changed(s: &Switched) -> serde_json::Value {
    serde_json::json!({
        "files": s.plan.actions.iter().filter(|a| a.changes_machine()).count(),
        "firewall": s.firewall.as_ref().is_some_and(|f| *f != Default::default()),
        "units": s.services.jobs.len(),
        "containers": s.containers.iter().filter(|c| !matches!(c, mesh_containers::Step::Hold { .. } | mesh_containers::Step::Keep { start: false, .. })).count(),
    })
}

/// Where a node is, for the steps: its state directory, root, namespace and settle window.
#[derive(Debug, Clone)]
pub struct Place {
    /// The state directory.
    pub state: PathBuf,
    /// The root files go under.
    pub root: PathBuf,
    /// The network namespace.
    pub netns: Option<String>,
    /// The settle window of its switches.
    pub settle: Duration,
}

impl Place {
    /// The node, under the lock the agent holds.
    fn node(&self) -> Result<Activator, ActivateError> {
        Ok(
            Activator::open_under(&self.state, &self.root, self.netns.clone())?
                .with_settle(self.settle),
        )
    }
}

/// Runs `step` of deploy `token`, here (the step's own process): what it says.
pub fn run_step(place: &Place, token: &str, step: Step) -> StepOutcome {
    let failed = |e: String| StepOutcome {
        error: Some(e),
        ..StepOutcome::default()
    };
    let deploy = match Deploy::load(&place.state, token) {
        Ok(d) => d,
        Err(e) => return failed(format!("the deploy's record: {e}")),
    };
    let node = match place.node() {
        Ok(n) => n,
        Err(e) => return failed(mesh_lib::text::chain(&e)),
    };
    let done = match step {
        Step::Switch => switch_step(&node, &deploy),
        Step::Revert => revert_step(&node, &deploy),
    };
    done.unwrap_or_else(|e| failed(mesh_lib::text::chain(&e)))
}

fn switch_step(node: &Activator, deploy: &Deploy) -> Result<StepOutcome, ActivateError> {
    // Checked when it was armed; again here, where it counts.
    crate::trust::check(node, &deploy.target)?;
    let generation = node.store.generation(&deploy.target)?;
    let mut switched = node.switch(deploy.target, &generation, Trigger::Deploy, None, false)?;
    if switched.firewall.is_none() {
        // Already in force (a deploy armed again after a restart): its files are, but the
        // restart emptied the ruleset, which a switch with nothing to do does not look at.
        switched.firewall = Some(node.converge_firewall(&generation)?);
    }
    Ok(StepOutcome {
        ok: true,
        changed: Some(changed(&switched)),
        failed: switched.failed.iter().map(UnitFailure::to_string).collect(),
        error: None,
    })
}

fn revert_step(node: &Activator, deploy: &Deploy) -> Result<StepOutcome, ActivateError> {
    node.recover()?;
    let in_force = node.current()?.map(|(_, id, _)| id);
    match deploy.previous {
        Some(previous) if in_force != Some(previous) => {
            let generation = node.store.generation(&previous)?;
            node.go_back(previous, &generation, false, Trigger::Revert)?;
        }
        _ => {}
    }
    Ok(StepOutcome {
        ok: true,
        ..StepOutcome::default()
    })
}

/// How a step's process ended.
enum Ran {
    Said(StepOutcome),
    /// It was still running at its bound, and was stopped.
    Stopped,
}

/// Runs `step` in a process of its own, stopped (with everything it started) if it is still
/// running at `until`.
fn bounded(spawner: &dyn Spawner, token: &str, step: Step, until: Instant) -> Ran {
    use std::os::unix::process::CommandExt;
    let mut command = spawner.step(token, step);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Ran::Said(StepOutcome {
                error: Some(format!("starting its {} step: {e}", step.word())),
                ..StepOutcome::default()
            })
        }
    };
    let mut out = child.stdout.take().expect("piped");
    // Read while it runs: its answer is one line, but a full pipe must never stop it. The end
    // of its output (it exited, or closed it) wakes the wait at once.
    let (ended, end) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        let _ = ended.send(());
        text
    });
    let mut output_ended = false;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() >= until => {
                let pgid = rustix::process::Pid::from_raw(child.id() as i32);
                if let Some(pgid) = pgid {
                    let _ =
                        rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                return Ran::Stopped;
            }
            Ok(None) if output_ended => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let left = until.saturating_duration_since(Instant::now());
                output_ended = end
                    .recv_timeout(left.min(Duration::from_millis(20)))
                    .is_ok();
            }
            Err(_) => break,
        }
    }
    let text = reader.join().unwrap_or_default();
    let said = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<StepOutcome>(l).ok());
    Ran::Said(said.unwrap_or_else(|| StepOutcome {
        error: Some(format!(
            "its {} step ended without an answer (see the deploy's log)",
            step.word()
        )),
        ..StepOutcome::default()
    }))
}

/// The instant `deadline` (wall clock) falls at, on the monotonic clock.
fn instant_of(deadline: Option<SystemTime>) -> Instant {
    let left = deadline
        .and_then(|d| d.duration_since(SystemTime::now()).ok())
        .unwrap_or_default();
    Instant::now() + left
}

/// Takes the node's lock, waiting up to `within` for a holder that is finishing (the
/// `mesh reconcile` that started this agent lets it go as it ends).
fn lock_within(state: &Path, within: Duration) -> Result<StateLock, LockError> {
    let until = Instant::now() + within;
    loop {
        match StateLock::take(state) {
            Err(LockError::Held { .. }) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// Carries deploy `token`: switches (or, for a deploy switched before the node restarted, puts
/// its generation in force again), waits for the confirmation until the deadline, or goes back.
pub fn run(place: &Place, spawner: &dyn Spawner, token: &str) -> Result<(), AgentError> {
    let state = place.state.as_path();
    if Deploy::load(state, token)?.state.settled() {
        return Ok(());
    }
    let _lock = lock_within(state, Duration::from_secs(30))?;
    // Read again under the lock: a `mesh reconcile` may have settled it meanwhile.
    let mut deploy = Deploy::load(state, token)?;
    if deploy.state.settled() {
        return Ok(());
    }
    deploy.agent = AgentId::this();
    if deploy.deadline.is_none() {
        // A record of an older mesh: the deadline from now.
        deploy.deadline = Some(super::stamp(
            SystemTime::now() + Duration::from_secs(deploy.confirm_within),
        ));
    }
    // A deploy armed again after a restart keeps what its first switch changed.
    let resumed = deploy.changed.is_some();
    let until = instant_of(deploy.deadline());
    deploy.set(state, DeployState::Switching, None)?;
    say(&format!(
        "{} {} (deadline {})",
        if resumed {
            "putting in force again, after a restart:"
        } else {
            "switching to"
        },
        deploy.target,
        deploy.deadline.as_deref().unwrap_or("?")
    ));

    let reason = match bounded(spawner, token, Step::Switch, until) {
        Ran::Stopped => format!(
            "the switch did not finish within {} s (the deploy's deadline): it was stopped",
            deploy.confirm_within
        ),
        Ran::Said(s) if !s.ok => {
            let why = s.error.unwrap_or_else(|| "the switch failed".into());
            if !moved(place, &deploy) {
                // Nothing changed: nothing to go back from.
                deploy.agent = None;
                deploy.set(state, DeployState::Failed, Some(why))?;
                return Ok(());
            }
            why
        }
        Ran::Said(s) if !s.failed.is_empty() => {
            deploy.changed = s.changed.or(deploy.changed.take());
            format!("units failed after the switch: {}", s.failed.join("; "))
        }
        Ran::Said(s) => {
            if !resumed {
                deploy.changed = s.changed;
            }
            deploy.set(state, DeployState::Switched, None)?;
            say("switched: waiting for the deployer's confirmation over a new connection");
            match deploy.wait_for_confirmation(state, deploy.left()) {
                Verdict::Confirmed => {
                    deploy.agent = None;
                    deploy.set(state, DeployState::Confirmed, None)?;
                    say("confirmed");
                    return Ok(());
                }
                Verdict::Rejected(why) => why,
                Verdict::TimedOut => format!(
                    "no confirmation within {} s of the deploy",
                    deploy.confirm_within
                ),
            }
        }
    };
    revert(place, spawner, &mut deploy, reason)
}

/// Whether the node moved from the generation in force before the deploy (a switch that
/// failed after it changed something, or a journal to finish).
fn moved(place: &Place, deploy: &Deploy) -> bool {
    let journal = mesh_switch::journal::journal_path(&place.state).exists();
    let in_force = place
        .node()
        .ok()
        .and_then(|n| n.current().ok().flatten())
        .map(|(_, id, _)| id);
    journal || in_force != deploy.previous
}

/// Goes back to the generation in force before the deploy, in a bounded process, and records
/// how the deploy ended.
fn revert(
    place: &Place,
    spawner: &dyn Spawner,
    deploy: &mut Deploy,
    reason: String,
) -> Result<(), AgentError> {
    let state = place.state.as_path();
    deploy.agent = AgentId::this();
    if deploy.previous.is_none() {
        deploy.agent = None;
        deploy.set(
            state,
            DeployState::Failed,
            Some(format!(
                "{reason}; there was no other generation to switch back to"
            )),
        )?;
        return Ok(());
    }
    say(&format!(
        "{reason}: switching back to {}",
        deploy
            .previous
            .map_or_else(|| "(none)".to_owned(), |p| p.to_string())
    ));
    let until = Instant::now() + REVERT_BOUND.max(Duration::from_secs(deploy.confirm_within));
    let (end, why) = match bounded(spawner, &deploy.token, Step::Revert, until) {
        Ran::Said(s) if s.ok => (DeployState::Reverted, reason),
        Ran::Said(s) => (
            DeployState::Failed,
            format!(
                "{reason}; switching back failed: {}",
                s.error.unwrap_or_default()
            ),
        ),
        Ran::Stopped => (
            DeployState::Failed,
            format!(
                "{reason}; switching back did not finish within {} s either",
                until.saturating_duration_since(Instant::now()).as_secs()
            ),
        ),
    };
    say(&match end {
        DeployState::Reverted => "switched back".to_owned(),
        _ => why.clone(),
    });
    deploy.agent = None;
    deploy.set(state, end, Some(why))?;
    Ok(())
}

/// A line of the deploy's log (the agent's standard error is its log), stamped.
fn say(line: &str) {
    eprintln!("{} {line}", super::now());
}

/// What [`settle`] did with a deploy whose agent was gone.
#[derive(Debug, Clone, Serialize)]
pub struct Settled {
    /// The deploy.
    pub token: String,
    /// How it stands now.
    pub state: DeployState,
    /// What was done, in words.
    pub what: String,
}

/// A deploy is left to its agent for this long after it was armed before a missing agent is
/// taken for gone (the agent records itself as it starts).
const AGENT_START: Duration = Duration::from_secs(30);

/// Settles every deploy whose agent is gone (the node restarted, or the agent was killed):
/// see the module's documentation. Deploys whose agent runs are left to it.
pub fn settle(place: &Place, spawner: &dyn Spawner) -> Result<Vec<Settled>, AgentError> {
    let state = place.state.as_path();
    let mut out = Vec::new();
    for d in Deploy::all(state)? {
        if d.state.settled() {
            continue;
        }
        let gone = match &d.agent {
            Some(agent) => !agent.alive(),
            None => humantime::parse_rfc3339(&d.armed)
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|e| e > AGENT_START),
        };
        if !gone {
            continue;
        }
        // A switch, a rollback or another settling holds the node: the next round will see.
        let lock = match StateLock::take(state) {
            Ok(l) => l,
            Err(LockError::Held { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let mut deploy = Deploy::load(state, &d.token)?;
        if deploy.state.settled() {
            continue;
        }
        let settled = match deploy.state {
            DeployState::Starting => {
                deploy.agent = None;
                deploy.set(
                    state,
                    DeployState::Failed,
                    Some("its agent was gone before the switch started (the node restarted?): nothing changed".into()),
                )?;
                "failed: the switch never started".to_owned()
            }
            DeployState::Switched if deploy.confirmed(state) => {
                deploy.agent = None;
                deploy.set(state, DeployState::Confirmed, None)?;
                "confirmed before its agent was gone".to_owned()
            }
            DeployState::Switched if !deploy.left().is_zero() => {
                // The time that is left: a new agent puts the generation in force again (the
                // restart emptied the ruleset) and waits. It takes the lock as this one lets
                // it go; what runs next at boot (sshd) waits until the generation is in force
                // again, so that no confirmation comes through a ruleset the restart emptied.
                let left = deploy.left();
                deploy.state = DeployState::Switching;
                deploy.save(state)?;
                let agent = spawn_agent(place, spawner, &deploy.token)?;
                deploy.agent = AgentId::of(agent);
                deploy.save(state)?;
                drop(lock);
                let until = Instant::now() + left + Duration::from_secs(5);
                let now = loop {
                    let d = Deploy::load(state, &deploy.token)?;
                    if d.state != DeployState::Switching || Instant::now() >= until {
                        break d;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                };
                out.push(Settled {
                    token: deploy.token.clone(),
                    state: now.state,
                    what: match now.state {
                        DeployState::Switched => format!(
                            "armed again for the {} s left: {} is in force again and waits for the confirmation",
                            left.as_secs(),
                            deploy.target.short()
                        ),
                        other => format!(
                            "armed again, then {}{}",
                            serde_json::to_value(other)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_default(),
                            now.reason.map(|r| format!(": {r}")).unwrap_or_default()
                        ),
                    },
                });
                continue;
            }
            DeployState::Switched => {
                let reason = format!(
                    "no confirmation within {} s of the deploy (the node restarted meanwhile)",
                    deploy.confirm_within
                );
                revert(place, spawner, &mut deploy, reason)?;
                "switched back: its deadline passed".to_owned()
            }
            _ => {
                let reason = "the switch was cut short (the node restarted during it)".to_owned();
                revert(place, spawner, &mut deploy, reason)?;
                "switched back: its switch was cut short".to_owned()
            }
        };
        drop(lock);
        let now = Deploy::load(state, &deploy.token)?;
        out.push(Settled {
            token: now.token,
            state: now.state,
            what: settled,
        });
    }
    Ok(out)
}

/// Starts the agent of deploy `token`, detached (a process group of its own, its output to the
/// deploy's log): its pid.
pub fn spawn_agent(place: &Place, spawner: &dyn Spawner, token: &str) -> Result<u32, AgentError> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::process::CommandExt;
    let log = super::log_path(&place.state, token);
    // Owner-only, as everything in the state directory: an agent's output names paths,
    // generations and errors of the node.
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log)?;
    let err = out.try_clone()?;
    let child = spawner
        .agent(token)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()?;
    Ok(child.id())
}

/// The deploy waiting for its confirmation with `id` as its generation, if there is one: a
/// generation that waits is its agent's to put in force, never `mesh reconcile`'s.
pub fn waiting(state: &Path, id: &mesh_lib::GenerationId) -> Option<Deploy> {
    Deploy::all(state)
        .ok()?
        .into_iter()
        .find(|d| !d.state.settled() && d.target == *id)
}

/// Why a deploy could not be armed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The node refused it before anything (a generation it cannot read or does not trust).
    #[error(transparent)]
    Refused(#[from] ActivateError),
    /// Arming it, or starting its agent.
    #[error("{0}")]
    Io(String),
}

/// Arms a deploy of `target` on `node` and starts its agent: the deploy, as armed. The
/// generation is checked first — the store gives it whole, a signer the node trusts vouches
/// for it, the node can decrypt its secrets — so that a refusal changes nothing. Both `mesh deploy` (the node's side of it) and
/// `mesh pull` start their switches here.
pub fn start(
    place: &Place,
    spawner: &dyn Spawner,
    node: &Activator,
    target: mesh_lib::GenerationId,
    seconds: u64,
    asked: Asked,
) -> Result<Deploy, StartError> {
    let generation = node
        .store
        .generation(&target)
        .map_err(ActivateError::from)?;
    match asked {
        Asked::Here => {
            crate::trust::check(node, &target)?;
        }
        Asked::FromElsewhere => {
            crate::trust::check_now(node, &target)?;
            crate::statement::check_stated(node, &target, generation.node.as_str())?;
        }
    }
    // A secret this node cannot decrypt (not encrypted to its host key, the key missing):
    // refused before the deploy is armed, so nothing moves and nothing is reverted.
    node.check_secrets(&generation)?;
    let previous = node
        .current()
        .map_err(ActivateError::from)?
        .map(|(_, id, _)| id);
    let mut deploy = Deploy::arm(&place.state, target, previous, seconds)
        .map_err(|e| StartError::Io(format!("arming the deploy: {e}")))?;
    let pid = spawn_agent(place, spawner, &deploy.token)
        .map_err(|e| StartError::Io(format!("starting the deploy's agent: {e}")))?;
    // Named now, so that a restart before the agent records itself is seen for what it is.
    deploy.agent = AgentId::of(pid);
    deploy
        .save(&place.state)
        .map_err(|e| StartError::Io(format!("the deploy's record: {e}")))?;
    // Failing to prune fails nothing: the records are read all the same.
    let _pruned = Deploy::prune(&place.state, KEPT_DEPLOYS);
    Ok(deploy)
}

/// Settled deploys a node keeps, the newest (with their logs), once it has more than twice as
/// many; every one not settled stays. Their history is also in the profile's log.
const KEPT_DEPLOYS: usize = 32;

/// Who asks for a deploy's switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// The node's own operator (`mesh switch --generation ID --confirm-within N` run on it):
    /// a generation in force before needs no new signature, as for `mesh switch`.
    Here,
    /// A deploy key (`mesh serve`, a deploy's connection) or a registry (a pull): on a node
    /// that trusts signers, a signer it trusts now must vouch for the generation, and the newest
    /// statement the node accepted must name it ([`crate::statement::check_stated`]).
    FromElsewhere,
}

/// Arms a deploy of the generation `id` names (an id or its prefix, as the store resolves
/// it) on the node at `place`, and starts its agent ([`start`]): the deploy, as armed.
pub fn arm(
    place: &Place,
    spawner: &dyn Spawner,
    id: &str,
    seconds: u64,
    asked: Asked,
) -> Result<Deploy, StartError> {
    let node = Activator::inspect(&place.state, &place.root, place.netns.clone())?;
    let target = node
        .store
        .resolve_generation(id)
        .map_err(ActivateError::from)?;
    start(place, spawner, &node, target, seconds, asked)
}

/// The deploy's record once its switch is done (switched, failed or reverted), or as it stands
/// a margin past its deadline (its agent stops a switch still running at the deadline, and
/// going back is bounded too).
pub fn switch_done(state: &Path, token: &str) -> std::io::Result<Deploy> {
    wait_while(state, token, |s| {
        matches!(s, DeployState::Starting | DeployState::Switching)
    })
}

/// Confirms deploy `token` (`mesh confirm`; one already settled is left as it is) and waits up
/// to 10 s for its agent to settle it, which it does within milliseconds: the record as it then
/// stands.
pub fn confirm(state: &Path, token: &str) -> std::io::Result<Deploy> {
    if !Deploy::load(state, token)?.state.settled() {
        Deploy::confirm(state, token)?;
    }
    poll(
        state,
        token,
        Instant::now() + Duration::from_secs(10),
        |s| !s.settled(),
    )
}

/// The deploy's record once it is settled (confirmed, reverted or failed), or as it stands a
/// margin past its deadline.
pub fn settled(state: &Path, token: &str) -> std::io::Result<Deploy> {
    wait_while(state, token, |s| !s.settled())
}

fn wait_while(
    state: &Path,
    token: &str,
    going: impl Fn(DeployState) -> bool,
) -> std::io::Result<Deploy> {
    let first = Deploy::load(state, token)?;
    poll(
        state,
        token,
        Instant::now() + first.left() + REVERT_BOUND,
        going,
    )
}

/// The deploy's record once it is no longer `going`, or as it stands at `until`.
fn poll(
    state: &Path,
    token: &str,
    until: Instant,
    going: impl Fn(DeployState) -> bool,
) -> std::io::Result<Deploy> {
    // Read often at first, where the answer usually is, then every 20 ms.
    let mut pause = Duration::from_millis(1);
    loop {
        let d = Deploy::load(state, token)?;
        if !going(d.state) || Instant::now() >= until {
            return Ok(d);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}
