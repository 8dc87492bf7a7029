//! The prepare phase: everything a switch can check or record before the machine changes.
//!
//! 1. every blob to write is read and checked against its name (a corrupted one stops the
//!    switch with nothing done);
//! 2. the root's space and writability are checked;
//! 3. content the mesh did not write is recorded in the store and the host store (durably)
//!    before anything replaces or removes it;
//! 4. the journal names every path about to change and the service actions that follow.
//!
//! Dry run: nothing of it runs (the plan is what a dry run prints).
//! Crash points: `originals-recorded`, `journal-written`.

use std::collections::BTreeMap;

use mesh_lib::model::{FileState, UnitTrigger};
use mesh_lib::secret::Zeroizing;
use mesh_lib::{BlobHash, Generation, GenerationId, TargetPath};

use crate::journal::{Act, Before, Journal, JournalOp, Pending};
use crate::observe::{at_secret_path, Observations};
use crate::ActivateError;
use crate::Activator;
use mesh_node::host::{HostStore, Kept};
use mesh_node::io_err;
use mesh_node::plan::{Action, Plan, Reason};
use mesh_node::root::Observed;
use mesh_systemd::services::ServicePlan;

/// The blobs a switch writes, read and checked (zeroed when dropped: some are the plaintexts
/// of secrets).
pub(crate) type Blobs = BTreeMap<BlobHash, Zeroizing<Vec<u8>>>;

impl Activator {
    /// Reads and checks every blob the plan writes (a secret's plaintext is among
    /// `plaintexts`, never in the store), and checks that the root has room for them and is
    /// writable.
    pub(crate) fn check(
        &self,
        plan: &Plan,
        mut plaintexts: crate::secrets::Plaintexts,
    ) -> Result<Blobs, ActivateError> {
        let mut blobs = Blobs::new();
        for action in &plan.actions {
            if let Action::Write { blob, .. } = action {
                if !blobs.contains_key(blob) {
                    let bytes = match plaintexts.remove(blob) {
                        Some(plain) => plain,
                        None => {
                            let stored = Zeroizing::new(self.store.blob(blob)?);
                            // A content found at a secret's path is kept wrapped: its
                            // content is what goes back.
                            match self.digests.unwrap(&stored) {
                                Some(content) => Zeroizing::new(content.to_vec()),
                                None => stored,
                            }
                        }
                    };
                    blobs.insert(*blob, bytes);
                }
            }
        }
        if plan.changes_machine() {
            let (free, read_only) = self
                .root
                .space()
                .map_err(io_err("inspecting", self.root.path()))?;
            if read_only {
                return Err(ActivateError::ReadOnly {
                    root: self.root.path().to_owned(),
                });
            }
            let need: u64 = plan
                .actions
                .iter()
                .filter_map(|a| match a {
                    Action::Write { blob, .. } => Some(blobs[blob].len() as u64 + 4096),
                    _ => None,
                })
                .sum();
            if need > free {
                return Err(ActivateError::NoSpace {
                    root: self.root.path().to_owned(),
                    need,
                    free,
                });
            }
        }
        Ok(blobs)
    }

    /// Records in the store, durably, what the mesh did not write and is about to replace or
    /// remove (the plan's keeps), and in the host store where it came from; what was at a
    /// secret's path of `target` (the target as switched to: its secret files keep their
    /// `secret`), wrapped.
    pub(crate) fn record_originals(
        &self,
        target: &Generation,
        plan: &Plan,
        seen: &Observations,
        host: &mut HostStore,
    ) -> Result<(), ActivateError> {
        let (observed, contents) = seen;
        let keeps: Vec<(&TargetPath, BlobHash, mesh_node::host::Why)> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Keep { path, hash, why } => Some((path, *hash, *why)),
                _ => None,
            })
            .collect();
        if !keeps.is_empty() {
            // What was at a secret's path is known by its keyed digest (see `observe`): kept
            // wrapped, private, so that digest names the blob.
            let keyed: Vec<bool> = keeps
                .iter()
                .map(|(path, _, _)| at_secret_path(target, host, path))
                .collect();
            let wrapped: Vec<Option<Zeroizing<Vec<u8>>>> = keeps
                .iter()
                .zip(&keyed)
                .map(|((path, _, _), keyed)| keyed.then(|| self.digests.wrap(&contents[*path])))
                .collect();
            let mut batch = Vec::new();
            for (((path, _, _), keyed), wrapped) in keeps.iter().zip(&keyed).zip(&wrapped) {
                let private = match &observed[*path] {
                    Observed::File(f) => *keyed || !f.mode.world_readable(),
                    _ => true,
                };
                let bytes = wrapped.as_deref().unwrap_or(&contents[*path]);
                batch.push((bytes.as_slice(), private));
            }
            self.store.put_blobs(batch)?;
            for ((path, hash, why), keyed) in keeps.iter().zip(keyed) {
                if let Observed::File(f) = &observed[*path] {
                    host.keep(
                        path,
                        Kept {
                            hash: *hash,
                            keyed,
                            mode: f.mode,
                            uid: f.uid,
                            gid: f.gid,
                            why: *why,
                        },
                    );
                }
            }
            host.save(&self.state)?;
            mesh_lib::crash::point("originals-recorded");
        }
        // The generation and its blobs were written by a build without waiting for the disk.
        self.store.sync()?;
        Ok(())
    }

    /// Writes the journal of a switch to `target` again, now with the paths the plan changes and
    /// the service actions that follow (when systemd is driven). Nothing of them to journal: the
    /// journal of what the switch does stays as it was written before it began. The journal as
    /// it stands.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_journal(
        &self,
        target: &Generation,
        id: GenerationId,
        act: &Act,
        plan: &Plan,
        services: &ServicePlan,
        seen: &Observations,
        secret_paths: &std::collections::BTreeSet<&TargetPath>,
    ) -> Result<Journal, ActivateError> {
        let before = |path: &TargetPath| match seen.0.get(path) {
            Some(Observed::File(f)) => Some(Before::File(f.hash)),
            Some(Observed::Absent) => Some(Before::Absent),
            // Not observed, or not a file: recovery leaves the step to the next switch.
            _ => None,
        };
        let ops: Vec<JournalOp> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Write {
                    path,
                    blob,
                    reason,
                    mode,
                    uid,
                    gid,
                } => Some(JournalOp {
                    path: path.clone(),
                    hash: Some(*blob),
                    restore: *reason == Reason::Restore,
                    units: managed_triggers(target, path),
                    write: Some((*mode, *uid, *gid)),
                    before: before(path),
                    secret: secret_paths.contains(path),
                }),
                Action::Remove { path } => Some(JournalOp {
                    path: path.clone(),
                    hash: None,
                    restore: false,
                    units: Vec::new(),
                    write: None,
                    before: before(path),
                    secret: false,
                }),
                _ => None,
            })
            .collect();
        let pending = (services.not_driven.is_none() && !services.is_empty()).then(|| Pending {
            plan: services.clone(),
            in_force: services.in_force.clone(),
        });
        let journal = Journal {
            target: id,
            act: act.clone(),
            ops,
            services: pending,
        };
        if journal.ops.is_empty() && journal.services.is_none() {
            return Ok(journal);
        }
        self.save_journal(&journal)?;
        mesh_lib::crash::point("journal-written");
        Ok(journal)
    }
}

/// The units a file of `target` configures, when the mesh writes it managed (what the host
/// store keeps, so that removing the file later reloads or restarts them).
pub(crate) fn managed_triggers(target: &Generation, path: &TargetPath) -> Vec<UnitTrigger> {
    target
        .files
        .get(path)
        .filter(|f| f.state == FileState::Managed)
        .map(|f| f.units.clone())
        .unwrap_or_default()
}
