//! The units phase, in two parts around the files. Before them, while systemd still has the
//! definitions the units run with: the disables, then the stops (timers, sockets, paths and
//! automounts first, so that none starts what is going away). After them: systemd reads its unit
//! files again (daemon-reload) when one changed, units are enabled, then the jobs run —
//! reloads, restarts, starts — each group queued at once and every job waited for within the
//! bound; then a settle window, in which a unit that dies soon after it started is reported as
//! a failed job is (one that waits for its `Restart=` after its process exited cleanly did not
//! die: systemd's `Result` says which). What a change calls for is decided by
//! [`mesh_systemd::services`], purely.
//!
//! systemd is driven only when the root is `/` (this machine's systemd reads this machine's unit
//! files): under another root the plan says what would be done, and nothing is asked. When no
//! systemd answers on `/`, a generation whose units the mesh must run is refused before anything
//! changes; one that only names units its files configure goes on with the files, and says so.
//!
//! The plan is in the journal before the first unit is stopped, so a crash anywhere in the
//! phase is finished by the next switch or rollback ([`Activator::recover`] runs it again, the files
//! put in place first). Every step is one that may be done twice: a unit already stopped or gone
//! is stopped, one whose file is gone has nothing to disable, a restart restarts what runs, and
//! a job already done is done again harmlessly.
//!
//! Dry run: the unit files that change, the enables and disables, and each job with its cause.
//! Crash points: `services-stopped` (after the stops and disables, before the files),
//! `services-reloaded` (after daemon-reload and enables), `service-jobs-done` (after each group
//! of jobs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use mesh_lib::model::{UnitName, UnitState};
use mesh_lib::{Generation, NodeRecord};
use serde::Serialize;

use crate::ActivateError;
use crate::Activator;
use mesh_node::host::HostStore;
use mesh_node::plan::Plan;
use mesh_systemd::services::{self, ServiceInput, ServicePlan, UnitJob};
use mesh_systemd::{Systemd, UnitNow, Verb};

/// How long the jobs of one switch may take, all together, unless `MESH_JOB_TIMEOUT` (seconds)
/// says otherwise.
pub const JOB_BOUND: Duration = Duration::from_secs(120);

/// How long a switch watches the units it started, restarted or reloaded before it calls them
/// up, unless told otherwise (`--settle`, `MESH_SETTLE`).
pub const SETTLE: Duration = Duration::from_secs(3);

/// How many lines of a failed unit's log are reported.
const LOG_LINES: usize = 10;

/// A unit whose job failed, or that failed once its job was done (within the settle window),
/// or that the switch left failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnitFailure {
    /// The unit.
    pub unit: String,
    /// The job, when it had one.
    pub verb: Option<Verb>,
    /// systemd's result (`failed`, `timeout`, `dependency`, …), `not finished` when the bound
    /// passed, `failed after its job was done` when the job was done but the unit failed
    /// within the settle window (with how its main process ended, when systemd says), or why
    /// it could not be enabled.
    pub result: String,
    /// The last lines of its log.
    pub log: Vec<String>,
}

impl std::fmt::Display for UnitFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.verb {
            Some(v) => write!(f, "{} {}: {}", v.word(), self.unit, self.result),
            None => write!(f, "{}: {}", self.unit, self.result),
        }
    }
}

/// The job bound: `MESH_JOB_TIMEOUT` seconds, or [`JOB_BOUND`].
fn bound() -> Duration {
    std::env::var("MESH_JOB_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(JOB_BOUND, Duration::from_secs)
}

impl Activator {
    /// Plans what the units and containers do around the files of `files`.
    pub(crate) fn plan_services(
        &self,
        target: &Generation,
        files: &Plan,
        host: &HostStore,
        record: &NodeRecord,
    ) -> Result<ServicePlan, ActivateError> {
        let names = services::units_to_observe(target, files, host);
        let (activates, options_only) = (BTreeMap::new(), self.mounts_options_only(target, host));
        let input = |now, activates| ServiceInput {
            target,
            files,
            host,
            record,
            now,
            activates,
            options_only: &options_only,
        };
        if names.is_empty() {
            // No unit to ask about: what is left is the containers' remounts.
            return Ok(services::plan(&input(None, &activates)));
        }
        if self.root.path() != Path::new("/") {
            let mut plan = services::plan(&input(None, &activates));
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
                let mut plan = services::plan(&input(None, &activates));
                plan.not_driven = Some(e.to_string());
                return Ok(plan);
            }
        };
        let now = observe(systemd, &names)?;
        // What each running socket activates: stopped before the socket listens anew.
        let mut activates = BTreeMap::new();
        for (name, n) in &now {
            if name.kind() == "socket" && n.running() {
                activates.insert(name.clone(), systemd.triggers(name)?);
            }
        }
        let mut now = now;
        let services: Vec<&UnitName> = activates
            .values()
            .flatten()
            .filter(|s| !now.contains_key(*s))
            .collect();
        now.extend(systemd.units(&services)?);
        Ok(services::plan(&input(Some(&now), &activates)))
    }

    /// The declared mounts in force whose file changes in its options alone (their old and new
    /// texts read from the store; one that cannot be read is taken to change otherwise).
    fn mounts_options_only(&self, target: &Generation, host: &HostStore) -> BTreeSet<UnitName> {
        let text = |hash| {
            self.store
                .blob(hash)
                .ok()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        };
        target
            .units
            .iter()
            .filter(|(name, u)| {
                name.kind() == "mount" && host.units.get(*name).is_some_and(|p| p.body != u.body)
            })
            .filter_map(|(name, _)| {
                let path = name.file();
                let old = text(&host.written.get(&path)?.hash)?;
                let new = text(&target.files.get(&path)?.blob)?;
                services::mount_options_only(&old, &new).then(|| name.clone())
            })
            .collect()
    }

    /// Carries out the part of `plan` that comes before the files: the disables, then the
    /// stops, triggers first. What it stopped, for a switch whose files fail to start again.
    pub(crate) fn stop_services(
        &self,
        plan: &ServicePlan,
    ) -> Result<Vec<UnitFailure>, ActivateError> {
        let Some(systemd) = self.asked(plan)? else {
            return Ok(Vec::new());
        };
        systemd.disable(&plan.disable.iter().map(|u| &u.unit).collect::<Vec<_>>())?;
        let mut failed = Vec::new();
        for wave in plan.stops() {
            failed.extend(run_jobs(systemd, &wave, bound())?);
        }
        mesh_lib::crash::point("services-stopped");
        Ok(failed)
    }

    /// After a switch's files failed and were put back: the units it stopped run again, and
    /// the ones it disabled are enabled again (best effort: the switch's own error is what is
    /// reported).
    pub(crate) fn restart_stopped(&self, plan: &ServicePlan) {
        let Ok(Some(systemd)) = self.asked(plan) else {
            return;
        };
        let disabled: Vec<&UnitName> = plan.disable.iter().map(|u| &u.unit).collect();
        let _best_effort = systemd.enable(&disabled);
        let _best_effort = systemd.daemon_reload();
        let stopped: Vec<(&UnitName, Verb)> = plan
            .jobs
            .iter()
            .filter(|j| {
                j.verb == Verb::Stop && plan.before.get(&j.unit).is_some_and(UnitNow::running)
            })
            .map(|j| (&j.unit, Verb::Start))
            .collect();
        let _best_effort = systemd.run(&stopped, bound());
    }

    /// Carries out the part of `plan` that comes after the files: daemon-reload, enables, the
    /// jobs, the settle window; the units that failed.
    pub(crate) fn apply_services(
        &self,
        plan: &ServicePlan,
    ) -> Result<Vec<UnitFailure>, ActivateError> {
        let Some(systemd) = self.asked(plan)? else {
            return Ok(Vec::new());
        };
        let mut failed = Vec::new();
        // Enabling reads the unit files from the disk: done first, so that one daemon-reload
        // reads the new files and the links together.
        let enable: Vec<&UnitName> = plan.enable.iter().map(|u| &u.unit).collect();
        for (unit, why) in systemd.enable(&enable)? {
            failed.push(UnitFailure {
                unit: unit.to_string(),
                verb: None,
                result: format!("cannot be enabled: {why}"),
                log: Vec::new(),
            });
        }
        if plan.daemon_reload() {
            systemd.daemon_reload()?;
        }
        mesh_lib::crash::point("services-reloaded");
        let bound = bound();
        for verb in [Verb::Reload, Verb::Restart, Verb::Start] {
            let jobs: Vec<&UnitJob> = plan.jobs.iter().filter(|j| j.verb == verb).collect();
            if jobs.is_empty() {
                continue;
            }
            failed.extend(run_jobs(systemd, &jobs, bound)?);
            mesh_lib::crash::point("service-jobs-done");
        }
        failed.extend(settle(systemd, plan, &failed, self.settle)?);
        Ok(failed)
    }

    /// How many jobs this node queued on systemd.
    pub(crate) fn systemd_jobs(&self) -> usize {
        self.systemd.get().map_or(0, |s| s.jobs())
    }

    /// systemd, when `plan` asks anything of it on a node where the mesh drives it (`None`
    /// otherwise); connected on first use, and refused when it does not answer.
    fn asked(&self, plan: &ServicePlan) -> Result<Option<&dyn Systemd>, ActivateError> {
        if plan.not_driven.is_some() || !plan.asks_systemd() {
            return Ok(None);
        }
        self.systemd().map(Some).map_err(ActivateError::NoSystemd)
    }

    /// systemd, connected on first use.
    pub(crate) fn systemd(&self) -> Result<&dyn Systemd, mesh_systemd::SystemdError> {
        if let Some(s) = self.systemd.get() {
            return Ok(s.as_ref());
        }
        let bus = mesh_systemd::Bus::connect()?;
        Ok(self.systemd.get_or_init(|| Box::new(bus)).as_ref())
    }
}

/// The settle window: when the switch started, restarted or reloaded a unit, it watches them
/// for `window`; then every unit the switch had a job for or looked at that is failing now, or
/// was within the window, and was not before is reported (a timer whose service vanished, a
/// service that died two seconds after its start), with how its main process ended when
/// systemd says. systemd's `Result` judges a service waiting for its `Restart=`: one whose
/// process failed (a non-zero status, a signal, a watchdog, a timeout) is failing, one whose
/// process ended cleanly (periodic work done, a status its `SuccessExitStatus=` lists) is not
/// (see [`UnitNow::failing`]).
fn settle(
    systemd: &dyn Systemd,
    plan: &ServicePlan,
    failed: &[UnitFailure],
    window: Duration,
) -> Result<Vec<UnitFailure>, ActivateError> {
    let reported = |u: &UnitName| failed.iter().any(|f| f.unit == u.as_str());
    let mut watch: BTreeMap<&UnitName, Option<Verb>> = BTreeMap::new();
    for (name, before) in &plan.before {
        if !name.is_template() && !before.failing() {
            watch.insert(name, None);
        }
    }
    for job in plan.jobs.iter().filter(|j| j.verb != Verb::Stop) {
        watch.insert(&job.unit, Some(job.verb));
    }
    watch.retain(|u, _| !reported(u));
    if watch.is_empty() {
        return Ok(Vec::new());
    }
    let list: Vec<&UnitName> = watch.keys().copied().collect();
    // Each unit seen failing, as it was seen last.
    let mut failing: BTreeMap<UnitName, UnitNow> = BTreeMap::new();
    let look = |failing: &mut BTreeMap<UnitName, UnitNow>| -> Result<(), ActivateError> {
        for (name, now) in systemd.units(&list)? {
            if now.failing() {
                failing.insert(name, now);
            }
        }
        Ok(())
    };
    if plan.starts_anything() && !window.is_zero() {
        let until = Instant::now() + window;
        while Instant::now() < until {
            look(&mut failing)?;
            std::thread::sleep(Duration::from_millis(200).min(until - Instant::now()));
        }
    }
    look(&mut failing)?;
    Ok(failing
        .into_iter()
        .map(|(unit, now)| {
            let verb = watch.get(&unit).copied().flatten();
            let mut result = match verb {
                Some(_) => "failed after its job was done".to_owned(),
                None => "left failed by the switch".to_owned(),
            };
            if let Some(exit) = &now.exit {
                result.push_str(&format!(": {exit}"));
            }
            if now.waits_to_restart() {
                result.push_str(" (it waits to be restarted)");
            }
            UnitFailure {
                log: systemd.log_tail(&unit, LOG_LINES),
                result,
                unit: unit.to_string(),
                verb,
            }
        })
        .collect())
}

/// The units' states: the ones named, and each template's loaded instances (systemd has no unit
/// of a template's name to ask about).
fn observe(
    systemd: &dyn Systemd,
    names: &BTreeSet<UnitName>,
) -> Result<BTreeMap<UnitName, UnitNow>, ActivateError> {
    let (templates, plain): (Vec<&UnitName>, Vec<&UnitName>) =
        names.iter().partition(|n| n.is_template());
    let mut now = systemd.units(&plain)?;
    for t in templates {
        for (name, state) in systemd.instances(t)? {
            now.entry(name).or_insert(state);
        }
    }
    Ok(now)
}

/// Runs `jobs` at once and waits for them; the ones that failed. A reload of a unit that no
/// longer runs is done (it reads its configuration when it starts).
fn run_jobs(
    systemd: &dyn Systemd,
    jobs: &[&UnitJob],
    bound: Duration,
) -> Result<Vec<UnitFailure>, ActivateError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let list: Vec<_> = jobs.iter().map(|j| (&j.unit, j.verb)).collect();
    let outcomes = systemd.run(&list, bound)?;
    let reloads: Vec<&UnitName> = outcomes
        .iter()
        .filter(|o| !o.ok() && o.verb == Verb::Reload)
        .map(|o| &o.unit)
        .collect();
    let stopped: BTreeSet<UnitName> = systemd
        .units(&reloads)?
        .into_iter()
        .filter(|(_, n)| !n.running())
        .map(|(u, _)| u)
        .collect();
    Ok(outcomes
        .into_iter()
        .filter(|o| {
            let reload_of_stopped = o.verb == Verb::Reload && stopped.contains(&o.unit);
            !o.ok() && !reload_of_stopped
        })
        .map(|o| UnitFailure {
            log: systemd.log_tail(&o.unit, LOG_LINES),
            unit: o.unit.to_string(),
            verb: Some(o.verb),
            result: o.result,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use mesh_systemd::{Exit, Recording};

    fn u(name: &str) -> UnitName {
        UnitName::new(name).unwrap()
    }

    fn exit(result: &str, code: i32, status: i32) -> Exit {
        Exit {
            result: result.into(),
            code,
            status,
        }
    }

    /// Waits for its `Restart=` (a `Restart=always` service between two runs), its main
    /// process having ended as `exit` says.
    fn restarting(exit: Exit) -> UnitNow {
        UnitNow::new("loaded", "activating", "auto-restart").ended(exit)
    }

    /// A plan that starts each of `units`.
    fn starts(units: &[&str]) -> ServicePlan {
        ServicePlan {
            jobs: units
                .iter()
                .map(|n| UnitJob {
                    unit: u(n),
                    verb: Verb::Start,
                    because: vec!["declared".into()],
                })
                .collect(),
            ..ServicePlan::default()
        }
    }

    /// What the settle window reports (as `unit: result`) when systemd has the units as
    /// `table` says once their jobs are done.
    fn reported(plan: &ServicePlan, table: &[(&str, UnitNow)]) -> Vec<String> {
        let systemd = Arc::new(Recording::default());
        *systemd.units.lock().unwrap() = table.iter().map(|(n, s)| (u(n), s.clone())).collect();
        settle(&systemd, plan, &[], Duration::ZERO)
            .unwrap()
            .iter()
            .map(|f| format!("{}: {}", f.unit, f.result))
            .collect()
    }

    /// A service waiting for its `Restart=` after its main process exited cleanly — status 0,
    /// or a status its `SuccessExitStatus=` lists (systemd's `Result` is `success` either way)
    /// — is not a failure; one whose process failed (a non-zero status, a signal, a watchdog)
    /// is, named with how it ended; one whose end systemd did not say is taken to have failed,
    /// as a unit that stopped (`failed`) is.
    #[test]
    fn a_unit_waiting_for_its_restart_is_judged_by_how_its_process_ended() {
        let running = UnitNow::new("loaded", "active", "running");
        let table = [
            ("periodic.service", restarting(exit("success", 1, 0))),
            ("listed.service", restarting(exit("success", 1, 3))),
            ("stopped.service", restarting(exit("success", 2, 15))),
            ("up.service", running),
            ("exits.service", restarting(exit("exit-code", 1, 1))),
            ("killed.service", restarting(exit("signal", 2, 9))),
            ("watched.service", restarting(exit("watchdog", 2, 6))),
            (
                "unknown.service",
                UnitNow::new("loaded", "activating", "auto-restart"),
            ),
            (
                "dead.service",
                UnitNow::new("loaded", "failed", "failed").ended(exit("exit-code", 1, 2)),
            ),
        ];
        let plan = starts(&table.iter().map(|(n, _)| *n).collect::<Vec<_>>());
        assert_eq!(
            reported(&plan, &table),
            [
                "dead.service: failed after its job was done: \
                 its main process exited with status 2",
                "exits.service: failed after its job was done: \
                 its main process exited with status 1 (it waits to be restarted)",
                "killed.service: failed after its job was done: \
                 its main process was killed by SIGKILL (it waits to be restarted)",
                "unknown.service: failed after its job was done (it waits to be restarted)",
                "watched.service: failed after its job was done: \
                 watchdog, its main process was killed by SIGABRT (it waits to be restarted)",
            ]
        );
    }

    /// A unit the switch only looked at is watched when it waited for its `Restart=` after a
    /// clean exit before the switch (it was not failing), and reported when its next run
    /// fails; one that had failed before is not the switch's doing and is not reported.
    #[test]
    fn a_clean_wait_before_the_switch_is_watched_a_failed_one_is_not() {
        let mut plan = starts(&["job.service"]);
        plan.before = [
            ("cycles.service", restarting(exit("success", 1, 0))),
            ("broken.service", restarting(exit("exit-code", 1, 1))),
        ]
        .into_iter()
        .map(|(n, s)| (u(n), s))
        .collect();
        let running = UnitNow::new("loaded", "active", "running");
        let after = [
            ("job.service", running),
            ("cycles.service", restarting(exit("exit-code", 1, 4))),
            ("broken.service", restarting(exit("exit-code", 1, 1))),
        ];
        assert_eq!(
            reported(&plan, &after),
            ["cycles.service: left failed by the switch: \
              its main process exited with status 4 (it waits to be restarted)"]
        );
        let calm = [
            ("job.service", UnitNow::new("loaded", "active", "running")),
            ("cycles.service", restarting(exit("success", 1, 0))),
            ("broken.service", restarting(exit("exit-code", 1, 1))),
        ];
        assert!(reported(&plan, &calm).is_empty());
    }
}
