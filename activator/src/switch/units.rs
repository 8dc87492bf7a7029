//! The units phase, after the files: systemd reads its unit files again when one changed
//! (daemon-reload), units are enabled and disabled, then the jobs run — stops, reloads, restarts,
//! starts — each group queued at once and every job waited for within the bound. What a change
//! calls for is decided by [`crate::services`], purely.
//!
//! systemd is driven only when the root is `/` (this machine's systemd reads this machine's unit
//! files): under another root the plan says what would be done, and nothing is asked. When no
//! systemd answers on `/`, a generation whose units the mesh must run is refused before anything
//! changes; one that only names units its files configure goes on with the files, and says so.
//!
//! The plan is in the journal before the first file changes, so a crash between the renames and
//! the jobs is finished by the next switch or rollback ([`Node::recover`] runs it again: a second
//! reload or restart is harmless, a lost one is not).
//!
//! Dry run: the unit files that change, the enables and disables, and each job with its cause.
//! Crash points: `services-reloaded` (after daemon-reload, enables and disables),
//! `service-jobs-done` (after each group of jobs).

use std::path::Path;
use std::time::Duration;

use mesh_lib::model::UnitState;
use mesh_lib::{Generation, NodeRecord};
use serde::Serialize;

use crate::host::HostStore;
use crate::node::Node;
use crate::plan::Plan;
use crate::services::{self, ServiceInput, ServicePlan};
use crate::switch::ActivateError;
use crate::systemd::{Systemd, Verb};

/// How long the jobs of one switch may take, all together, unless `MESH_JOB_TIMEOUT` (seconds)
/// says otherwise.
pub const JOB_BOUND: Duration = Duration::from_secs(120);

/// How many lines of a failed unit's log are reported.
const LOG_LINES: usize = 10;

/// A unit whose job failed, or that failed once its job was done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnitFailure {
    /// The unit.
    pub unit: String,
    /// The job.
    pub verb: Verb,
    /// systemd's result (`failed`, `timeout`, `dependency`, …), `not finished` when the bound
    /// passed, or `failed after it started` when the job was done but the unit failed.
    pub result: String,
    /// The last lines of its log.
    pub log: Vec<String>,
}

/// The job bound: `MESH_JOB_TIMEOUT` seconds, or [`JOB_BOUND`].
fn bound() -> Duration {
    std::env::var("MESH_JOB_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(JOB_BOUND, Duration::from_secs)
}

impl Node {
    /// Plans what the units and containers do after the files of `files` change.
    pub(crate) fn plan_services(
        &self,
        target: &Generation,
        files: &Plan,
        host: &HostStore,
        record: &NodeRecord,
    ) -> Result<ServicePlan, ActivateError> {
        let names = services::units_to_observe(target, files, host);
        let input = |now| ServiceInput {
            target,
            files,
            host,
            record,
            now,
        };
        if names.is_empty() {
            // No unit to ask about: what is left is the containers' remounts.
            return Ok(services::plan(&input(None)));
        }
        if self.root.path() != Path::new("/") {
            let mut plan = services::plan(&input(None));
            plan.not_driven = Some(format!(
                "the root is {}, not /: this machine's systemd does not read its unit files",
                self.root.path().display()
            ));
            return Ok(plan);
        }
        let systemd = match self.systemd() {
            Ok(s) => s,
            Err(e) => {
                let runs_units = target.units.values().any(|u| u.state == UnitState::Managed)
                    || !host.units.is_empty();
                if runs_units {
                    return Err(ActivateError::NoSystemd(e));
                }
                let mut plan = services::plan(&input(None));
                plan.not_driven = Some(e.to_string());
                return Ok(plan);
            }
        };
        let list: Vec<&_> = names.into_iter().collect();
        let now = systemd.units(&list)?;
        Ok(services::plan(&input(Some(&now))))
    }

    /// Carries out the systemd part of `plan`; the units that failed.
    pub(crate) fn apply_services(
        &self,
        plan: &ServicePlan,
    ) -> Result<Vec<UnitFailure>, ActivateError> {
        if plan.not_driven.is_some() || !plan.asks_systemd() {
            return Ok(Vec::new());
        }
        let systemd = self.systemd().map_err(ActivateError::NoSystemd)?;
        systemd.disable(&unit_names(&plan.disable))?;
        systemd.enable(&unit_names(&plan.enable))?;
        if plan.daemon_reload() {
            systemd.daemon_reload()?;
        }
        crate::crash::point("services-reloaded");
        let bound = bound();
        let mut failed = Vec::new();
        for verb in [Verb::Stop, Verb::Reload, Verb::Restart, Verb::Start] {
            let jobs: Vec<_> = plan
                .jobs
                .iter()
                .filter(|j| j.verb == verb)
                .map(|j| (&j.unit, j.verb))
                .collect();
            if jobs.is_empty() {
                continue;
            }
            for outcome in systemd.run(&jobs, bound)? {
                if !outcome.ok() {
                    failed.push(UnitFailure {
                        log: systemd.log_tail(&outcome.unit, LOG_LINES),
                        unit: outcome.unit.to_string(),
                        verb: outcome.verb,
                        result: outcome.result,
                    });
                }
            }
            crate::crash::point("service-jobs-done");
        }
        // A job done is not a unit that stays up: one that failed right after is reported too.
        let ran: Vec<_> = plan
            .jobs
            .iter()
            .filter(|j| j.verb != Verb::Stop && !failed.iter().any(|f| f.unit == j.unit.as_str()))
            .collect();
        let list: Vec<_> = ran.iter().map(|j| &j.unit).collect();
        let now = systemd.units(&list)?;
        for job in ran {
            if now.get(&job.unit).is_some_and(|n| n.active == "failed") {
                failed.push(UnitFailure {
                    unit: job.unit.to_string(),
                    verb: job.verb,
                    result: "failed after its job was done".into(),
                    log: systemd.log_tail(&job.unit, LOG_LINES),
                });
            }
        }
        Ok(failed)
    }

    /// How many jobs this node queued on systemd.
    pub(crate) fn systemd_jobs(&self) -> usize {
        self.systemd.get().map_or(0, |s| s.jobs())
    }

    /// systemd, connected on first use.
    pub(crate) fn systemd(&self) -> Result<&dyn Systemd, crate::systemd::SystemdError> {
        if let Some(s) = self.systemd.get() {
            return Ok(s.as_ref());
        }
        let bus = crate::systemd::Bus::connect()?;
        Ok(self.systemd.get_or_init(|| Box::new(bus)).as_ref())
    }
}

fn unit_names(list: &[services::UnitFile]) -> Vec<&mesh_lib::model::UnitName> {
    list.iter().map(|u| &u.unit).collect()
}
