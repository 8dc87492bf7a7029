//! The journal of a switch: written before the switch changes anything — the generation it puts
//! in force, the one in force before, how the containers its steps touch stood — then again,
//! before any declared path changes, naming every path about to change and what it will hold;
//! removed once the generation is in force with its record. While it is there, a command was
//! cut short (`mesh status` says so).
//!
//! The next command that changes the node reads it first ([`Activator::recover`]): the file
//! steps are finished (temp files go, each rename done where the path still holds what it
//! held, the host store told), the service actions run again; then either the switch had
//! committed (the profile names its generation), and only the record is left to follow it, or
//! it had not, and the journal stays, its file steps done, for the command that runs now: the
//! same switch finishes it, another one goes elsewhere from where it stands — with what the
//! journal says of the containers before, so a found container the cut-short switch stopped
//! runs again if it is held again — and `mesh rollback` goes back to the generation in force
//! before it (never one further).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mesh_containers::plan::Was;
use mesh_lib::model::{FileMode, UnitName, UnitTrigger};
use mesh_lib::{atomic, BlobHash, Generation, GenerationId, TargetPath};
use serde::{Deserialize, Serialize};

use crate::units::UnitFailure;
use crate::ActivateError;
use crate::Activator;
use mesh_node::host::{HostStore, UnitInForce, Written};
use mesh_node::io_err;
use mesh_node::root::Observed;
use mesh_systemd::services::ServicePlan;

/// One path the journal says is changing, and what it will hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JournalOp {
    pub(crate) path: TargetPath,
    /// The content it will hold; `None` for a removal.
    pub(crate) hash: Option<BlobHash>,
    /// Whether that content is a found original coming back (then it is not the mesh's).
    pub(crate) restore: bool,
    /// The units the file configures, when the mesh writes it managed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) units: Vec<UnitTrigger>,
    /// How the content is written: mode, owner and group ids (for a write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) write: Option<(FileMode, u32, u32)>,
    /// What the path held when the switch was planned. Recovery finishes the step only while
    /// the path still holds it: content another hand put there since is never overwritten.
    /// (`None` in a journal of an older mesh, whose steps recovery does not finish.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) before: Option<Before>,
    /// Whether the content is a secret's plaintext: not in the store, so recovery leaves the
    /// step to the next switch, which decrypts it again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) secret: bool,
}

/// What a path held when a switch was planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Before {
    /// Nothing.
    Absent,
    /// A file with this content.
    File(BlobHash),
}

/// What the services do after the files, and the units in force once they did it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Pending {
    pub(crate) plan: ServicePlan,
    pub(crate) in_force: BTreeMap<UnitName, UnitInForce>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Journal {
    pub(crate) target: GenerationId,
    /// What the switch was doing, from before it changed anything.
    #[serde(flatten)]
    pub(crate) act: Act,
    #[serde(default)]
    pub(crate) ops: Vec<JournalOp>,
    /// The service actions still to run (`None` when there are none, or systemd is not driven).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) services: Option<Pending>,
}

/// What a switch was doing, as its journal says from before it changed anything: what a command
/// that comes after it, cut short, needs of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Act {
    /// What asked for the switch (`mesh rollback`, a take…): a rollback cut short is finished by
    /// rolling back again; anything else cut short is undone by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<mesh_node::profile::Trigger>,
    /// The generation in force before the switch (its number and id; `None` before the node's
    /// first, or in the journal of an older mesh): where `mesh rollback` goes after it. Kept
    /// from the first of several switches cut short one after another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<(u64, GenerationId)>,
    /// How the engine had each container the switch's steps touch (under its name, or kept
    /// as `NAME.found`) before the switch: its id and whether it ran. Kept from the first of
    /// several switches cut short one after another.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub containers: BTreeMap<String, Was>,
    /// The containers the switch asks the engine to stop, by engine name, with the seconds
    /// each is given to stop: written as its container phase begins. A stop asked of the
    /// engine goes on when the switch is killed, so the next command waits for it to end
    /// before it looks at the engine.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stopping: BTreeMap<String, u32>,
}

impl Act {
    /// `self`, kept from an earlier switch cut short, with what `later` knows that it does not:
    /// the earliest facts win.
    pub(crate) fn then(mut self, later: Act) -> Act {
        // What asks now is what was cut short, if this one is cut short in turn.
        self.trigger = later.trigger;
        if self.previous.is_none() {
            self.previous = later.previous;
        }
        for (name, was) in later.containers {
            self.containers.entry(name).or_insert(was);
        }
        // What the later switch stops is its own to wait for.
        self.stopping = later.stopping;
        self
    }
}

/// What finishing an interrupted switch did.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Whether a switch was interrupted.
    pub interrupted: bool,
    /// The units that failed when its service actions ran again.
    pub failed: Vec<UnitFailure>,
    /// The switch cut short, when it had not committed: the generation it was putting in force
    /// and what it was doing (its journal stays until a switch commits).
    pub unfinished: Option<(GenerationId, Act)>,
}

/// Where the journal of an interrupted switch is: its being there says a switch was cut short.
pub fn journal_path(state: &Path) -> PathBuf {
    state.join("journal.json")
}

impl Activator {
    /// Finishes a switch a crash interrupted: removes its temp files, puts in place each file
    /// it had not renamed yet (or removes it) where nothing else changed the path since,
    /// records in the host store what is written, and runs its service actions again (stops,
    /// disables, daemon-reload, enables, jobs, container restarts: each is a step that may be
    /// done twice — a unit already stopped, already gone or already disabled is a step done —
    /// and missing one is not harmless).
    pub fn recover(&self) -> Result<Recovered, ActivateError> {
        let Some(journal) = self.read_journal()? else {
            return Ok(Recovered::default());
        };
        // A stop the cut-short switch asked of the engine goes on without it: ended (or past
        // its time) before anything looks at the engine.
        if !journal.act.stopping.is_empty() {
            if let Ok(engine) = mesh_containers::Engine::connect() {
                engine.wait_stopped(&journal.act.stopping)?;
            }
        }
        let mut host = HostStore::load(&self.state)?;
        for op in &journal.ops {
            self.root.remove_leftover(&op.path)?;
            let (mut observed, _) = self.observe_op(op)?;
            if self.finish_op(op, &observed)? {
                observed = self.observe_op(op)?.0;
            }
            match (op.hash, observed) {
                (Some(hash), Observed::File(f)) if f.hash == hash => {
                    if op.restore {
                        host.unset_written(&op.path);
                    } else {
                        let mut written = Written::from(&f);
                        written.keyed = op.secret;
                        written.units = op.units.clone();
                        host.set_written(&op.path, written);
                    }
                }
                (None, Observed::Absent) => {
                    host.unset_written(&op.path);
                }
                _ => {}
            }
        }
        let mut failed = Vec::new();
        if let Some(pending) = &journal.services {
            failed = self.stop_services(&pending.plan)?;
            failed.extend(self.apply_services(&pending.plan)?);
            if !pending.plan.restarts.is_empty() {
                let engine = mesh_containers::Engine::connect()?;
                for r in &pending.plan.restarts {
                    engine.restart(&r.name)?;
                }
            }
            host.set_units(pending.in_force.clone());
        }
        host.save(&self.state)?;
        self.profile
            .repair_log()
            .map_err(io_err("repairing the log in", &self.state))?;
        let committed = self
            .profile
            .current()
            .map_err(io_err("reading the profile in", &self.state))?
            .is_some_and(|(_, id)| id == journal.target);
        let unfinished = if committed {
            // In force already: only the record is left to follow it.
            let target = self.store.generation(&journal.target)?;
            self.follow(&target)?;
            self.drop_journal()?;
            None
        } else {
            // Its file steps done: the journal says what it was doing, no more.
            self.save_journal(&Journal {
                target: journal.target,
                act: journal.act.clone(),
                ops: Vec::new(),
                services: None,
            })?;
            Some((journal.target, journal.act))
        };
        Ok(Recovered {
            interrupted: true,
            failed,
            unfinished,
        })
    }

    /// The journal, if a switch left one.
    pub(crate) fn read_journal(&self) -> Result<Option<Journal>, ActivateError> {
        let path = journal_path(&self.state);
        match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(j) => Ok(Some(j)),
                // Cut short by the crash before it was renamed into place cannot happen (it is
                // written atomically); anything else unreadable is not ours to guess at.
                Err(e) => {
                    Err(io_err("reading the journal", &path)(std::io::Error::other(e)).into())
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("reading", &path)(e).into()),
        }
    }

    /// The switch a command cut short, as its journal says: the generation it was putting in
    /// force and what it was doing (`None`: no switch was cut short, or it had committed and
    /// only its record was left to follow).
    pub fn unfinished(&self) -> Result<Option<(GenerationId, Act)>, ActivateError> {
        let Some(journal) = self.read_journal()? else {
            return Ok(None);
        };
        let committed = self
            .profile
            .current()
            .map_err(io_err("reading the profile in", &self.state))?
            .is_some_and(|(_, id)| id == journal.target);
        Ok((!committed).then_some((journal.target, journal.act)))
    }

    /// Writes `journal` (atomically, durably).
    pub(crate) fn save_journal(&self, journal: &Journal) -> Result<(), ActivateError> {
        let path = journal_path(&self.state);
        let bytes = serde_json::to_vec(journal)
            .map_err(|e| io_err("encoding", &path)(std::io::Error::other(e)))?;
        atomic::write_file(&path, &bytes, 0o600).map_err(io_err("writing", &path))?;
        Ok(())
    }

    /// Removes the journal, durably: the switch is done.
    pub(crate) fn drop_journal(&self) -> Result<(), ActivateError> {
        let path = journal_path(&self.state);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("removing", &path)(e).into()),
        }
        atomic::sync_dir(&self.state).map_err(io_err("syncing", &self.state))?;
        Ok(())
    }

    /// The node record as `generation`, in force, says it is (mode, taken modules): saved when
    /// it said otherwise. A node never adopted has none.
    pub(crate) fn follow(&self, generation: &Generation) -> Result<(), ActivateError> {
        if let Some(record) = self.record()? {
            let following = record.following(generation);
            if following != record {
                self.save_record(&following)?;
            }
        }
        Ok(())
    }

    /// What is at an op's path; at a secret's path, known by its keyed digest as the journal
    /// names it.
    fn observe_op(&self, op: &JournalOp) -> Result<(Observed, Option<Vec<u8>>), ActivateError> {
        let (mut observed, bytes) = self.root.observe(&op.path)?;
        if let (true, Observed::File(f), Some(b)) = (op.secret, &mut observed, &bytes) {
            f.hash = self.digests.digest(b);
        }
        Ok((observed, bytes))
    }

    /// Puts an interrupted step in place when the path still holds what it held when the
    /// switch was planned; whether it did.
    fn finish_op(&self, op: &JournalOp, observed: &Observed) -> Result<bool, ActivateError> {
        let now = match observed {
            Observed::File(f) => Before::File(f.hash),
            Observed::Absent => Before::Absent,
            _ => return Ok(false),
        };
        let done = match op.hash {
            Some(hash) => now == Before::File(hash),
            None => now == Before::Absent,
        };
        if done || op.before != Some(now) || op.secret {
            return Ok(false);
        }
        match (op.hash, op.write) {
            (Some(hash), Some((mode, uid, gid))) => {
                let bytes = self.store.blob(&hash)?;
                self.root.write(&op.path, &bytes, mode, uid, gid)?;
            }
            (None, _) => self.root.remove(&op.path, true)?,
            (Some(_), None) => return Ok(false),
        }
        Ok(true)
    }
}
