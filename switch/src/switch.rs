//! The switch itself: the phases below, one after another, and what it did ([`Switched`]).

use std::path::Path;

use mesh_lib::{Generation, GenerationId};
use serde::Serialize;

use crate::error::ActivateError;
use crate::journal::{Act, Journal, Recovered};
use crate::units::UnitFailure;
use crate::{commit, Activator};
use mesh_node::host::HostStore;
use mesh_node::io_err;
use mesh_node::plan::{self, Action, Plan, PlanInput};
use mesh_node::profile::Trigger;

/// What a switch did, or would do.
#[derive(Debug, Serialize)]
pub struct Switched {
    /// The generation switched to.
    pub id: GenerationId,
    /// Its number in the profile (`None` for a dry run or when it already was current).
    pub number: Option<u64>,
    /// The plan.
    pub plan: Plan,
    /// The target generation's files, containers and units by state: what a summary counts
    /// (a rollback across a take restores files that are held again).
    pub states: crate::states::States,
    /// What the units and containers do after the files, and why.
    pub services: mesh_systemd::services::ServicePlan,
    /// The units that failed: their jobs failed, or they failed once started. The switch is
    /// committed all the same (the files are the new generation's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<UnitFailure>,
    /// The generation in force before the switch (the one to go back to).
    pub previous: Option<GenerationId>,
    /// The container steps.
    pub containers: Vec<mesh_containers::Step>,
    /// The images pinned by digest the engine lacked, fetched before anything changed (for a
    /// dry run: those it would fetch).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<mesh_containers::images::Wanted>,
    /// How many Docker API calls the switch made.
    pub docker_calls: usize,
    /// How many systemd jobs the switch queued.
    pub systemd_jobs: usize,
    /// What putting the firewall in force changed (`None` when the switch changed nothing).
    pub firewall: Option<mesh_reach::firewall::Converged>,
    /// The found firewall's tables (`family name`) loaded back from the dump before the switch:
    /// a rollback across the flip.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restored: Vec<String>,
    /// Whether it was only planned.
    pub dry_run: bool,
    /// For a dry run, what a person reviews before approving it: the diff from the generation
    /// in force, each written or removed file's content diff from what is on the machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review: Option<mesh_lib::diff::Diff>,
    /// For an adoption, the kind of firewall found in force and recorded (`None`: none was,
    /// or this is no adoption).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found_firewall: Option<mesh_lib::record::FirewallKind>,
}

impl Activator {
    /// Switches to `target` (or only plans it, for a dry run) and commits it as the next
    /// generation of the profile.
    pub fn switch(
        &self,
        id: GenerationId,
        target: &Generation,
        trigger: Trigger,
        declaration: Option<&Path>,
        dry_run: bool,
    ) -> Result<Switched, ActivateError> {
        target
            .validate()
            .map_err(|why| ActivateError::InvalidGeneration { id, why })?;
        let recovered = if dry_run {
            Recovered::default()
        } else {
            self.recover()?
        };
        // The record as it is once the target is in force: a take's, a flip's, a rollback's.
        let record = self.record_for(id, target)?.following(target);
        // A switch cut short before this one: how the containers it touched stood before.
        let was = recovered
            .unfinished
            .as_ref()
            .map(|(_, act)| act.containers.clone())
            .unwrap_or_default();

        // Observe. The plan needs the host store, not the generation in force: every file the
        // mesh may remove is one the host store says it wrote.
        let in_force = self
            .profile
            .current()
            .map_err(io_err("reading the profile in", &self.state))?;
        // A new private network must be clear of the node's other networks.
        // (One the store cannot give back is not compared: the switch may be what repairs it.)
        let before = in_force
            .filter(|(_, cid)| *cid != id)
            .and_then(|(_, cid)| self.store.generation(&cid).ok());
        if let Some(before) = before.as_ref().map(|g| &g.settings.private_network) {
            let after = &target.settings.private_network;
            if (before.range, before.address) != (after.range, after.address) {
                self.check_private_network(after, Some(before))?;
            }
        }
        // Secrets: decrypted with the host key before anything changes (a secret this node
        // cannot read refuses the switch here); the switch goes on with each secret file as
        // its plaintext. `declared` is the generation as built, for what a person is shown.
        let declared = target;
        let (resolved, mut opened) = match self.open_secrets(target)? {
            Some((resolved, opened)) => (Some(resolved), opened),
            None => (None, Default::default()),
        };
        let target = resolved.as_ref().unwrap_or(target);
        let mut host = HostStore::load(&self.state)?;
        self.check_reach(target.files.keys().chain(host.written.keys()))?;
        let seen = self.observe_all(target, &host)?;

        // Plan: files, then containers (the engine must answer before anything changes).
        let plan = plan::plan(&PlanInput {
            target,
            host: &host,
            record: &record,
            observed: &seen.0,
            ids: &self.ids,
        })?;
        let services = self.plan_services(target, &plan, &host, &record)?;
        let containers =
            self.plan_containers(target, &record, &services.restarts, &opened.values, &was)?;
        let previous = in_force.map(|(_, cid)| cid);
        let already = previous == Some(id);
        let bookkeeping = plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::Claim { .. } | Action::Keep { .. }))
            || (services.not_driven.is_none() && services.in_force != host.units);
        // After a switch cut short, the firewall it may have changed is put in force too.
        let nothing_to_do = already
            && recovered.unfinished.is_none()
            && !plan.changes_machine()
            && !bookkeeping
            && !services.asks_systemd()
            && !containers.busy();
        if dry_run || nothing_to_do {
            let review = if dry_run {
                // From the generation in force (itself, for a dry run to where the node is).
                let loaded;
                let from = match &before {
                    Some(g) => Some(g),
                    None => {
                        loaded = in_force.and_then(|(_, cid)| self.store.generation(&cid).ok());
                        loaded.as_ref()
                    }
                };
                Some(self.review(from, declared, &plan, &seen))
            } else {
                None
            };
            return Ok(Switched {
                review,
                found_firewall: None,
                id,
                number: None,
                states: crate::states::States::of(target),
                docker_calls: containers.calls(),
                systemd_jobs: self.systemd_jobs(),
                plan,
                services,
                failed: recovered.failed,
                previous,
                images: containers.fetch,
                containers: containers.steps,
                firewall: None,
                restored: Vec::new(),
                dry_run,
            });
        }

        // Prepare: everything that will be written, read and checked before anything changes;
        // the images the containers need and the engine lacks, fetched.
        let blobs = self.check(&plan, std::mem::take(&mut opened.files))?;
        self.fetch_images(&containers, &id)?;

        // Apply, journaled from before the first change: the generation in force before (the
        // first cut-short switch's, if this one follows such), and how the containers stood.
        let recovering = recovered.unfinished.is_some();
        let act = recovered
            .unfinished
            .map(|(_, act)| act)
            .unwrap_or_default()
            .then(Act {
                trigger: Some(trigger),
                previous: in_force,
                containers: containers.touched(),
                ..Act::default()
            });
        self.save_journal(&Journal {
            target: id,
            act: act.clone(),
            ops: Vec::new(),
            services: None,
        })?;
        mesh_lib::crash::point("journal-begun");
        // The firewall first, in one transaction; then what the mesh did not write is recorded
        // and the journal written with the file steps; then the files, then the containers.
        let firewall = self.converge_firewall(target)?;
        mesh_lib::crash::point("firewall-converged");
        self.record_originals(target, &plan, &seen, &mut host)?;
        let secret_paths = declared
            .files
            .iter()
            .filter(|(_, f)| f.secret.is_some())
            .map(|(p, _)| p)
            .collect();
        let mut journal =
            self.write_journal(target, id, &act, &plan, &services, &seen, &secret_paths)?;
        // The units that stop do so with the definitions they run, before their files change.
        let mut failed = recovered.failed;
        failed.extend(self.stop_services(&services)?);
        let stamps = match self.apply_files(&plan, &blobs, &seen) {
            Ok(stamps) => stamps,
            Err(e) => {
                if matches!(
                    e,
                    ActivateError::RolledBack { .. } | ActivateError::NotStarted { .. }
                ) {
                    self.restart_stopped(&services);
                }
                return Err(e);
            }
        };
        failed.extend(self.apply_services(&services)?);
        // The engine's stops, journaled before they are asked (they go on if this is killed).
        if let (Some(engine), true) = (&containers.engine, containers.busy()) {
            journal.act.stopping = mesh_containers::stopping(
                engine,
                &containers.steps,
                &target.containers,
                &containers.present,
            )?;
            if !journal.act.stopping.is_empty() {
                self.save_journal(&journal)?;
            }
        }
        self.apply_containers(&containers, target, &opened.values, id, previous)?;
        if recovering {
            // After a switch cut short, what the engine did of its asking since it was listed
            // is met once more: whatever it ended as, each container as the target says.
            let again = self.plan_containers(target, &record, &[], &opened.values, &was)?;
            if again.busy() {
                self.apply_containers(&again, target, &opened.values, id, previous)?;
            }
        }

        // Commit.
        let number = self.commit(
            &mut host,
            commit::Commit {
                id,
                target,
                services: &services,
                plan: &plan,
                seen: &seen,
                stamps: &stamps,
                already,
                trigger,
                declaration,
            },
        )?;
        Ok(Switched {
            id,
            number,
            states: crate::states::States::of(target),
            docker_calls: containers.calls(),
            systemd_jobs: self.systemd_jobs(),
            plan,
            services,
            failed,
            previous,
            images: containers.fetch,
            containers: containers.steps,
            restored: firewall.restored.clone(),
            firewall: Some(firewall),
            dry_run: false,
            review: None,
            found_firewall: None,
        })
    }
}
