//! The journal of a switch: written before any declared path changes, naming every path about
//! to change and what it will hold, and removed at the commit. A switch a crash interrupted is
//! finished from it by the next command that changes the node ([`Node::recover`]): temp files go,
//! and the host store records what had been written.

use std::path::{Path, PathBuf};

use mesh_lib::{atomic, BlobHash, GenerationId, TargetPath};
use serde::{Deserialize, Serialize};

use crate::host::{HostStore, Written};
use crate::node::Node;
use crate::root::Observed;
use crate::switch::error::io_err;
use crate::switch::ActivateError;

/// One path the journal says is changing, and what it will hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JournalOp {
    pub(crate) path: TargetPath,
    /// The content it will hold; `None` for a removal.
    pub(crate) hash: Option<BlobHash>,
    /// Whether that content is a found original coming back (then it is not the mesh's).
    pub(crate) restore: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Journal {
    pub(crate) target: GenerationId,
    pub(crate) ops: Vec<JournalOp>,
}

pub(crate) fn journal_path(state: &Path) -> PathBuf {
    state.join("journal.json")
}

impl Node {
    /// Finishes the bookkeeping of a switch a crash interrupted: removes its temp files and
    /// records in the host store what it had written. Says whether there was one.
    pub fn recover(&self) -> Result<bool, ActivateError> {
        let path = journal_path(&self.state);
        let journal: Journal = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(j) => j,
                // Cut short by the crash before it was renamed into place cannot happen (it is
                // written atomically); anything else unreadable is not ours to guess at.
                Err(e) => {
                    return Err(io_err("reading the journal", &path)(std::io::Error::other(
                        e,
                    )))
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err("reading", &path)(e)),
        };
        let mut host = HostStore::load(&self.state)?;
        for op in &journal.ops {
            self.root.remove_leftover(&op.path)?;
            let (observed, _) = self.root.observe(&op.path)?;
            match (op.hash, observed) {
                (Some(hash), Observed::File(f)) if f.hash == hash => {
                    if op.restore {
                        host.unset_written(&op.path);
                    } else {
                        host.set_written(&op.path, Written::from(&f));
                    }
                }
                (None, Observed::Absent) => {
                    host.unset_written(&op.path);
                }
                _ => {}
            }
        }
        host.save(&self.state)?;
        std::fs::remove_file(&path).map_err(io_err("removing", &path))?;
        atomic::sync_dir(&self.state).map_err(io_err("syncing", &self.state))?;
        self.profile
            .repair_log()
            .map_err(io_err("repairing the log in", &self.state))?;
        Ok(true)
    }
}
