//! The files phase: every new file is staged beside its target under the root (temp file, final
//! mode and owner), made durable with one sync of the filesystem instead of an fsync per file
//! and folder, and only then renamed into place; removals follow; a second sync makes the renames
//! durable. If one step fails, what had changed is put back.
//!
//! Dry run: the plan's writes, removals, holds and claims (`mesh switch --dry-run`).
//! Crash points: `file-written-before-rename`, `file-applied`, `file-removed`.

use std::collections::BTreeMap;

use mesh_lib::TargetPath;

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
                // No declared path changed: the generation in force is put back whole.
                self.back_in_force()?;
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
                let (put_back, not_put_back) = self.put_back(&applied, seen);
                if !not_put_back.is_empty() {
                    return Err(ActivateError::Interrupted {
                        source,
                        put_back,
                        not_put_back,
                    });
                }
                self.back_in_force()?;
                return Err(ActivateError::RolledBack { source });
            }
            applied.push(action);
        }
        // The renames and removals, durable.
        self.root.sync()?;
        Ok(stamps)
    }

    /// After a files phase that changed no declared path in the end (none, or each put back):
    /// the firewall of the generation in force is put back in force, and the journal goes —
    /// the node is at that generation, as the error says.
    fn back_in_force(&self) -> Result<(), ActivateError> {
        if let Some((_, _, current)) = self.current()? {
            self.converge_firewall(&current)?;
        }
        self.drop_journal()
    }

    /// Puts back what `applied` changed, each path in turn whatever the others did: the content
    /// observed before, or nothing where there was nothing. The paths put back, and those that
    /// could not be, with why.
    fn put_back(
        &self,
        applied: &[&Action],
        seen: &Observations,
    ) -> (Vec<TargetPath>, Vec<(TargetPath, String)>) {
        let (observed, contents) = seen;
        let (mut back, mut not) = (Vec::new(), Vec::new());
        for action in applied.iter().rev() {
            let path = action.path();
            let done = match observed.get(path) {
                Some(Observed::File(f)) => {
                    // Not read when its stamp showed it unchanged: the store has its content.
                    match contents.get(path) {
                        Some(b) => self.root.write(path, b, f.mode, f.uid, f.gid).map(drop),
                        None => match self.store.blob(&f.hash) {
                            Ok(stored) => self
                                .root
                                .write(path, &stored, f.mode, f.uid, f.gid)
                                .map(drop),
                            Err(e) => Err(RootError::Io {
                                op: "reading what to put back at",
                                path: path.clone(),
                                source: std::io::Error::other(e),
                            }),
                        },
                    }
                }
                Some(Observed::Absent) | None => self.root.remove(path, true),
                Some(_) => Ok(()),
            };
            match done {
                Ok(()) => back.push(path.clone()),
                Err(e) => not.push((path.clone(), e.to_string())),
            }
        }
        (back, not)
    }
}
