//! The journal of a switch: written before any declared path changes, naming every path about
//! to change and what it will hold, and removed at the commit. A switch a crash interrupted is
//! finished from it by the next command that changes the node ([`Activator::recover`]): temp files go,
//! and the host store records what had been written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mesh_lib::model::{FileMode, UnitName, UnitTrigger};
use mesh_lib::{atomic, BlobHash, GenerationId, TargetPath};
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
    pub(crate) ops: Vec<JournalOp>,
    /// The service actions still to run (`None` when there are none, or systemd is not driven).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) services: Option<Pending>,
}

/// What finishing an interrupted switch did.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Whether a switch was interrupted.
    pub interrupted: bool,
    /// The units that failed when its service actions ran again.
    pub failed: Vec<UnitFailure>,
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
        let path = journal_path(&self.state);
        let journal: Journal = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(j) => j,
                // Cut short by the crash before it was renamed into place cannot happen (it is
                // written atomically); anything else unreadable is not ours to guess at.
                Err(e) => {
                    return Err(
                        io_err("reading the journal", &path)(std::io::Error::other(e)).into(),
                    )
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Recovered::default()),
            Err(e) => return Err(io_err("reading", &path)(e).into()),
        };
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
        std::fs::remove_file(&path).map_err(io_err("removing", &path))?;
        atomic::sync_dir(&self.state).map_err(io_err("syncing", &self.state))?;
        self.profile
            .repair_log()
            .map_err(io_err("repairing the log in", &self.state))?;
        Ok(Recovered {
            interrupted: true,
            failed,
        })
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
