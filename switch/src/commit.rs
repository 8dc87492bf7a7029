//! The commit phase: the host store records what the mesh wrote (and what is no longer its own),
//! the profile's `current` moves atomically to the new generation, the node record follows it
//! (its mode, its taken modules: whatever put the generation in force), and the journal goes.
//!
//! Dry run: nothing. Crash points: `host-store-written`, then the profile's
//! (`profile-link-created`, `current-switched`, `log-appended`), then `record-followed`.

use std::path::Path;

use mesh_lib::{Generation, GenerationId};

use crate::files::Stamps;
use crate::observe::{at_secret_path, Observations};
use crate::prepare::managed_triggers;
use crate::ActivateError;
use crate::Activator;
use mesh_node::host::{HostStore, Written};
use mesh_node::io_err;
use mesh_node::plan::{Action, Plan, Reason};
use mesh_node::profile::Trigger;
use mesh_node::root::Observed;
use mesh_systemd::services::ServicePlan;

/// What the commit needs to know of the switch.
pub(crate) struct Commit<'a> {
    pub(crate) id: GenerationId,
    pub(crate) target: &'a Generation,
    pub(crate) services: &'a ServicePlan,
    pub(crate) plan: &'a Plan,
    pub(crate) seen: &'a Observations,
    pub(crate) stamps: &'a Stamps,
    /// Whether `id` already is the current generation (nothing to add to the profile).
    pub(crate) already: bool,
    pub(crate) trigger: Trigger,
    pub(crate) declaration: Option<&'a Path>,
}

impl Activator {
    /// Commits a switch; its number in the profile (`None` when it already was current).
    pub(crate) fn commit(
        &self,
        host: &mut HostStore,
        c: Commit<'_>,
    ) -> Result<Option<u64>, ActivateError> {
        let (observed, _) = c.seen;
        for action in &c.plan.actions {
            match action {
                Action::Write {
                    path,
                    reason: Reason::Restore,
                    ..
                }
                | Action::Remove { path } => {
                    host.unset_written(path);
                }
                Action::Write {
                    path,
                    blob,
                    mode,
                    uid,
                    gid,
                    ..
                } => {
                    host.set_written(
                        path,
                        Written {
                            hash: *blob,
                            keyed: c.target.files.get(path).is_some_and(|f| f.secret.is_some()),
                            mode: *mode,
                            uid: *uid,
                            gid: *gid,
                            stamp: c.stamps.get(path).copied(),
                            units: managed_triggers(c.target, path),
                        },
                    );
                }
                Action::Claim { path } => {
                    if let Observed::File(f) = &observed[path] {
                        let keyed = at_secret_path(c.target, host, path);
                        host.set_written(
                            path,
                            Written {
                                keyed,
                                ..Written::from(f)
                            },
                        );
                    }
                }
                Action::Keep { .. } | Action::Hold { .. } => {}
            }
        }
        // The units each file of the mesh's configures, as the generation now says (a file
        // unchanged whose `reloads` or `restarts` changed).
        let stale: Vec<_> = c
            .target
            .files
            .keys()
            .filter_map(|path| {
                let w = host.written.get(path)?;
                let units = managed_triggers(c.target, path);
                (w.units != units).then(|| (path.clone(), Written { units, ..w.clone() }))
            })
            .collect();
        for (path, w) in stale {
            host.set_written(&path, w);
        }
        if c.services.not_driven.is_none() {
            host.set_units(c.services.in_force.clone());
        }
        host.save(&self.state)?;
        mesh_lib::crash::point("host-store-written");

        let number = if c.already {
            None
        } else {
            Some(
                self.profile
                    .commit(c.id, c.trigger, c.declaration)
                    .map_err(io_err("committing the profile in", &self.state))?,
            )
        };
        // The record says what is in force; then the switch is done.
        self.follow(c.target)?;
        mesh_lib::crash::point("record-followed");
        self.drop_journal()?;
        Ok(number)
    }
}
