//! The files phase: every new file is staged beside its target under the root (temp file, final
//! mode and owner), made durable with one sync of the filesystem instead of an fsync per file
//! and folder, and only then renamed into place; removals follow; a second sync makes the renames
//! durable. If one step fails, what had changed is put back.
//!
//! Dry run: the plan's writes, removals, holds and claims (`mesh switch --dry-run`).
//! Crash points: `file-written-before-rename`, `file-applied`, `file-removed`.

use std::collections::BTreeMap;

use mesh_lib::TargetPath;

use crate::journal::journal_path;
use crate::observe::Observations;
use crate::prepare::Blobs;
use crate::ActivateError;
use crate::Activator;
use mesh_node::plan::{Action, Plan};
use mesh_node::root::{Observed, RootError, Stamp};

/// The stamp of each file the phase wrote, for the host store.
pub(crate) type Stamps = BTreeMap<TargetPath, Stamp>;

impl Activator {
    /// Stages, syncs and renames every write of `plan`, then removes; puts back what changed if
    /// a step fails (and then, the firewall of the generation in force).
    pub(crate) fn apply_files(
        &self,
        plan: &Plan,
        blobs: &Blobs,
        seen: &Observations,
    ) -> Result<Stamps, ActivateError> {
        let journal = journal_path(&self.state);
        let writes: Vec<&Action> = plan
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Write { .. }))
            .collect();
        for (i, action) in writes.iter().enumerate() {
            let Action::Write {
                path,
                blob,
                mode,
                uid,
                gid,
                ..
            } = action
            else {
                unreachable!()
            };
            if let Err(source) = self
                .root
                .stage(path, &blobs[blob], *mode, *uid, *gid, false)
            {
                for staged in &writes[..i] {
                    let _best_effort = self.root.remove_leftover(staged.path());
                }
                let _done = std::fs::remove_file(&journal);
                return Err(ActivateError::NotStarted { source });
            }
        }
        self.root.sync()?;
        mesh_lib::crash::point("file-written-before-rename");

        let mut applied: Vec<&Action> = Vec::new();
        let mut stamps = Stamps::new();
        for action in &plan.actions {
            let result = match action {
                Action::Write { path, .. } => self.root.commit(path).map(|stamp| {
                    stamps.insert(path.clone(), stamp);
                    mesh_lib::crash::point("file-applied");
                }),
                Action::Remove { path } => self.root.remove(path, false).map(|()| {
                    mesh_lib::crash::point("file-removed");
                }),
                _ => continue,
            };
            if let Err(source) = result {
                for w in &writes {
                    let _best_effort = self.root.remove_leftover(w.path());
                }
                return Err(match self.put_back(&applied, seen) {
                    Ok(()) => {
                        let _done = std::fs::remove_file(&journal);
                        if let Ok(Some((_, _, current))) = self.current() {
                            let _best_effort = self.converge_firewall(&current);
                        }
                        ActivateError::RolledBack { source }
                    }
                    Err(undo) => ActivateError::Interrupted { source, undo },
                });
            }
            applied.push(action);
        }
        // The renames and removals, durable.
        self.root.sync()?;
        Ok(stamps)
    }

    /// Puts back what `applied` changed: the content observed before, or nothing where there was
    /// nothing.
    fn put_back(&self, applied: &[&Action], seen: &Observations) -> Result<(), RootError> {
        let (observed, contents) = seen;
        for action in applied.iter().rev() {
            let path = action.path();
            match observed.get(path) {
                Some(Observed::File(f)) => {
                    // Not read when its stamp showed it unchanged: the store has its content.
                    let stored;
                    let bytes = match contents.get(path) {
                        Some(b) => b,
                        None => {
                            stored = self.store.blob(&f.hash).map_err(|e| RootError::Io {
                                op: "reading what to put back at",
                                path: path.clone(),
                                source: std::io::Error::other(e),
                            })?;
                            &stored
                        }
                    };
                    self.root.write(path, bytes, f.mode, f.uid, f.gid)?;
                }
                Some(Observed::Absent) | None => self.root.remove(path, true)?,
                Some(_) => {}
            }
        }
        Ok(())
    }
}
