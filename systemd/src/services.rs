//! The service plan: which systemd units and containers pick up what a switch changes. A pure
//! function of the target generation, the file plan, the host store, the node record and the
//! units' states as systemd has them.
//!
//! The rules (the manual, docs/src/services.md, "Services follow their configuration"):
//! - a file the switch writes, takes, restores or removes reloads or restarts the units it says
//!   it configures (`reloads`, `restarts`) — when they run; one that does not run reads the file
//!   when it starts. A file of a module not taken (staged) triggers nothing. A drop-in
//!   (`/etc/systemd/system/NAME.d/*.conf`) configures its unit as the unit's own file does;
//! - a unit named by an alias is the unit systemd runs (`sshd.service` is `ssh.service`), and a
//!   template (`getty@.service`) is its running instances: one job per unit;
//! - a declared unit whose file changes outside `[Install]` picks the change up as its kind
//!   calls for, when it runs: a service, timer, path, swap or automount is restarted (or
//!   reloaded, or left, as its `on_change` says); a mount whose options alone changed is
//!   remounted (reloaded), one whose source or type changed is mounted again (restarted); a
//!   socket is restarted, the services it activates stopped first (a socket that listens
//!   elsewhere cannot be restarted while its service holds it) and started again when
//!   declared started, else left to activation; a slice or a target is not restarted (systemd
//!   applies a slice's resources when it reads its files again, and restarting a target would
//!   restart what is bound to it). A template's change reaches every running instance;
//! - a change of `[Install]` alone enables the unit again and restarts nothing; a unit declared
//!   started that does not run is started; one no longer declared, or staged again (back across
//!   its take), is stopped and disabled;
//! - a held unit (found, its module not taken) is never enabled, disabled, started, stopped,
//!   reloaded or restarted — except back across a take, where the found unit returns as it was
//!   found (running or not, enabled or not);
//! - a managed container restarts when a file it mounts (a volume whose source is the file or
//!   a folder holding it) changed;
//! - any unit file under `/etc/systemd/system` that changes, and any enable or disable, makes
//!   systemd read its unit files again (daemon-reload) before the jobs after the files.
//!
//! One action per unit, the strongest asked: stop, then stop-and-start, start (a unit starting
//! reads everything anew), restart, reload. The stops run **before** the files change, while
//! systemd still has the definition the unit runs with (its `ExecStop=` is the one that knows
//! how to stop it), triggers first (a timer or socket stopped before its service, so it starts
//! nothing that is going away); so do the disables (while the unit's file says what to
//! remove). After the files: daemon-reload, enables, then reloads, restarts, starts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use mesh_lib::model::{
    ContainerState, FileState, OnChange, PickUp, UnitName, UnitState, UnitTrigger, UNIT_DIR,
};
use mesh_lib::{Generation, NodeRecord, TargetPath};
use serde::{Deserialize, Serialize};

use crate::{UnitNow, Verb};
use mesh_node::host::{HostStore, UnitInForce};
use mesh_node::plan::{Action, Plan, Reason};

/// A job on a unit and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitJob {
    /// The unit.
    pub unit: UnitName,
    /// What is done to it.
    pub verb: Verb,
    /// Why, in words (`/etc/ssh/sshd_config.d/10-mesh.conf changed`).
    pub because: Vec<String>,
}

/// A unit enabled or disabled, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitFile {
    /// The unit.
    pub unit: UnitName,
    /// Why.
    pub because: String,
}

/// A container restarted because a file it mounts changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remount {
    /// The container.
    pub name: String,
    /// The changed files it mounts, in words.
    pub because: Vec<String>,
}

/// A unit a change names that is left alone, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Idle {
    /// The unit.
    pub unit: UnitName,
    /// Why nothing is done to it.
    pub because: String,
}

/// What the services do around the files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServicePlan {
    /// Unit files that change: systemd reads its unit files again after the files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unit_files: Vec<TargetPath>,
    /// Units enabled (after the files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enable: Vec<UnitFile>,
    /// Units disabled (before the files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disable: Vec<UnitFile>,
    /// Jobs, in the order they run: stops (before the files), then reloads, restarts, starts.
    /// A unit stopped with the definition it runs and started with its new one is here twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<UnitJob>,
    /// Containers restarted (in the containers phase).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restarts: Vec<Remount>,
    /// Units a change names that are left alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idle: Vec<Idle>,
    /// The declared units the mesh has in force once it is done.
    #[serde(skip)]
    pub in_force: BTreeMap<UnitName, UnitInForce>,
    /// The units' states when the switch was planned: a unit that fails after the switch and
    /// did not before is reported, whatever its kind, with or without a job of its own.
    #[serde(skip)]
    pub before: BTreeMap<UnitName, UnitNow>,
    /// Why systemd is not driven by this switch, when it is not: the actions above are what it
    /// would do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_driven: Option<String>,
}

impl ServicePlan {
    /// Whether systemd reads its unit files again.
    pub fn daemon_reload(&self) -> bool {
        !self.unit_files.is_empty() || !self.enable.is_empty() || !self.disable.is_empty()
    }

    /// Whether systemd has anything to do.
    pub fn asks_systemd(&self) -> bool {
        self.daemon_reload() || !self.jobs.is_empty()
    }

    /// Whether there is anything to do at all (systemd or containers).
    pub fn is_empty(&self) -> bool {
        !self.asks_systemd() && self.restarts.is_empty()
    }

    /// The jobs that run before the files change: the stops, triggers first (in the first
    /// list) and the rest after them.
    pub fn stops(&self) -> [Vec<&UnitJob>; 2] {
        let stops = self.jobs.iter().filter(|j| j.verb == Verb::Stop);
        let (triggers, rest) = stops.partition(|j| j.unit.triggers_others());
        [triggers, rest]
    }

    /// Whether a unit is started, restarted or reloaded after the files: what the settle
    /// window watches.
    pub fn starts_anything(&self) -> bool {
        self.jobs.iter().any(|j| j.verb != Verb::Stop)
    }
}

impl fmt::Display for UnitJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<8} {}: {}",
            self.verb.word(),
            self.unit,
            self.because.join("; ")
        )
    }
}

/// What the service plan is made from.
pub struct ServiceInput<'a> {
    /// The generation switched to.
    pub target: &'a Generation,
    /// The file plan.
    pub files: &'a Plan,
    /// What the mesh wrote and the units it has in force.
    pub host: &'a HostStore,
    /// The node record (what was found).
    pub record: &'a NodeRecord,
    /// The units' states, as systemd has them (a template's loaded instances among them);
    /// `None` when systemd is not asked (then every unit the mesh did not start is taken to
    /// run, so the plan shows what would be done).
    pub now: Option<&'a BTreeMap<UnitName, UnitNow>>,
    /// What each running socket activates, as systemd has it loaded.
    pub activates: &'a BTreeMap<UnitName, Vec<UnitName>>,
    /// The declared mounts whose file changed in their options alone (a remount does).
    pub options_only: &'a BTreeSet<UnitName>,
}

/// The unit a drop-in configures: `/etc/systemd/system/NAME.d/FILE.conf` → `NAME`.
pub fn drop_in_of(path: &TargetPath) -> Option<UnitName> {
    let rest = path.as_str().strip_prefix(UNIT_DIR)?.strip_prefix('/')?;
    let (folder, file) = rest.split_once('/')?;
    if file.contains('/') || !file.ends_with(".conf") {
        return None;
    }
    UnitName::new(folder.strip_suffix(".d")?).ok()
}

/// The units whose state the plan needs: the target's declared units, the ones the mesh has in
/// force, the ones the changed files configure (a drop-in's unit among them), and the instances
/// a template declares. A template is in the list by its name: its loaded instances are asked
/// for apart (systemd has no unit of a template's name).
pub fn units_to_observe<'a>(
    target: &'a Generation,
    files: &'a Plan,
    host: &'a HostStore,
) -> BTreeSet<UnitName> {
    let mut out: BTreeSet<UnitName> = BTreeSet::new();
    for (name, u) in &target.units {
        out.insert(name.clone());
        out.extend(u.runs_as(name));
    }
    for (name, u) in &host.units {
        out.insert(name.clone());
        out.extend(u.runs_as(name));
    }
    for action in &files.actions {
        if let Some((triggers, _)) = triggers_of(action, target, host) {
            out.extend(triggers.iter().map(|t| t.unit.clone()));
        }
        if let Some(unit) = drop_in_of(action.path()) {
            out.insert(unit);
        }
    }
    out
}

/// The units a file change configures and how the change is said: `None` when the change
/// triggers nothing (a staged file, or a step that changes nothing).
fn triggers_of<'a>(
    action: &Action,
    target: &'a Generation,
    host: &'a HostStore,
) -> Option<(&'a [UnitTrigger], String)> {
    match action {
        Action::Write { path, reason, .. } => {
            let entry = target.files.get(path)?;
            let said = match (reason, entry.state) {
                (Reason::Restore, _) => format!("{path} is back as it was found"),
                (_, FileState::Staged | FileState::Held { .. }) => return None,
                (Reason::Take, _) => format!("{path} taken"),
                (Reason::Create, _) => format!("{path} created"),
                (Reason::Update, _) => format!("{path} changed"),
            };
            Some((&entry.units, said))
        }
        Action::Remove { path } => {
            let units = host.written.get(path).map_or(&[][..], |w| &w.units[..]);
            Some((units, format!("{path} removed")))
        }
        _ => None,
    }
}

/// What is asked of a unit; of several asks the strongest is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ask {
    Reload,
    Restart,
    Start,
    /// Stopped before the files (with the definition it runs), started after them.
    Cycle,
    Stop,
}

/// The asks gathered: per unit the strongest, and every cause with what it asked.
#[derive(Default)]
struct Asks(BTreeMap<UnitName, (Ask, Vec<(Ask, String)>)>);

impl Asks {
    fn ask(&mut self, unit: &UnitName, what: Ask, because: String) {
        let entry = self
            .0
            .entry(unit.clone())
            .or_insert_with(|| (what, Vec::new()));
        entry.0 = entry.0.max(what);
        if !entry.1.iter().any(|(_, b)| *b == because) {
            entry.1.push((what, because));
        }
    }

    /// The jobs, in the order they run. The causes of the job done: a restart answers what
    /// asked for a reload too; a start or a stop only what asked for it.
    fn jobs(self) -> Vec<UnitJob> {
        let mut out = Vec::new();
        for (unit, (done, asked)) in self.0 {
            let because: Vec<String> = asked
                .into_iter()
                .filter(|(a, _)| *a == done || (done == Ask::Restart && *a == Ask::Reload))
                .map(|(_, b)| b)
                .collect();
            let verbs: &[Verb] = match done {
                Ask::Reload => &[Verb::Reload],
                Ask::Restart => &[Verb::Restart],
                Ask::Start => &[Verb::Start],
                Ask::Cycle => &[Verb::Stop, Verb::Start],
                Ask::Stop => &[Verb::Stop],
            };
            for verb in verbs {
                out.push(UnitJob {
                    unit: unit.clone(),
                    verb: *verb,
                    because: because.clone(),
                });
            }
        }
        // Within a group, the units that activate others first: a socket listening before its
        // service starts (each job is queued on its own, so systemd orders only what it sees).
        out.sort_by(|a, b| {
            let key = |j: &UnitJob| (j.verb, !j.unit.triggers_others(), j.unit.clone());
            key(a).cmp(&key(b))
        });
        out
    }
}

/// How systemd has the units: what the plan reads of `now`.
struct Now<'a> {
    now: Option<&'a BTreeMap<UnitName, UnitNow>>,
}

impl Now<'_> {
    fn get(&self, unit: &UnitName) -> Option<&UnitNow> {
        self.now.and_then(|n| n.get(unit))
    }

    /// Whether it runs. Unknown (not asked): taken to run, so the plan shows what a change
    /// would do.
    fn running(&self, unit: &UnitName) -> bool {
        self.now.is_none() || self.get(unit).is_some_and(UnitNow::running)
    }

    fn known(&self, unit: &UnitName) -> bool {
        self.now.is_none() || self.get(unit).is_some_and(UnitNow::known)
    }

    fn state(&self, unit: &UnitName) -> String {
        self.get(unit)
            .map_or_else(|| "unknown".to_owned(), |n| n.active.clone())
    }

    /// The unit systemd runs under `unit`'s name: itself, or the unit an alias names.
    fn resolve(&self, unit: &UnitName) -> UnitName {
        self.get(unit)
            .filter(|n| !n.id.is_empty())
            .and_then(|n| UnitName::new(&n.id).ok())
            .unwrap_or_else(|| unit.clone())
    }

    /// A template's running instances; not asked, the ones `declared` names.
    fn instances(&self, template: &UnitName, declared: &[UnitName]) -> Vec<UnitName> {
        match self.now {
            None => declared.to_vec(),
            Some(now) => now
                .iter()
                .filter(|(n, u)| n.template().as_ref() == Some(template) && u.running())
                .map(|(n, _)| n.clone())
                .collect(),
        }
    }
}

/// Makes the service plan.
pub fn plan(input: &ServiceInput<'_>) -> ServicePlan {
    let target = input.target;
    let host = input.host;
    let mut out = ServicePlan::default();
    let mut asks = Asks::default();
    let now = Now { now: input.now };
    // The instances a template runs as, declared now or put in force before.
    let declared_instances = |template: &UnitName| -> Vec<UnitName> {
        let mut list: Vec<UnitName> = target
            .units
            .get(template)
            .map(|u| u.runs_as(template))
            .unwrap_or_default();
        if let Some(p) = host.units.get(template) {
            list.extend(p.runs_as(template));
        }
        list.sort();
        list.dedup();
        list
    };
    // The declaration of a unit by its name, or of its template for an instance.
    let declared = |unit: &UnitName| {
        target
            .units
            .get(unit)
            .or_else(|| unit.template().and_then(|t| target.units.get(&t)))
    };

    // What the changed files configure.
    let mut remounts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for action in &input.files.actions {
        let Some((triggers, said)) = triggers_of(action, target, host) else {
            continue;
        };
        let path = action.path();
        if path.as_str().starts_with(&format!("{UNIT_DIR}/")) {
            out.unit_files.push(path.clone());
        }
        let restore = matches!(
            action,
            Action::Write {
                reason: Reason::Restore,
                ..
            }
        );
        // The units named, with how each picks the change up (`None`: as its own file's change,
        // for the unit a drop-in configures).
        let mut named: Vec<(&UnitName, Option<PickUp>)> =
            triggers.iter().map(|t| (&t.unit, Some(t.how))).collect();
        let drop_in = drop_in_of(path);
        if let Some(unit) = &drop_in {
            named.push((unit, None));
        }
        for (unit, how) in named {
            let d = declared(unit);
            let held = d.is_some_and(|u| u.state != UnitState::Managed);
            let ours = d.is_some_and(|u| u.state == UnitState::Managed);
            // The units systemd runs for the name: a template's running instances.
            let runs: Vec<UnitName> = if unit.is_template() {
                now.instances(unit, &declared_instances(unit))
            } else {
                vec![unit.clone()]
            };
            if ours && !unit.is_template() && !now.running(unit) {
                // A declared unit that does not run yet: its own rules start it (or not), and
                // a start reads every file anew.
                continue;
            }
            let idle = |because: String| Idle {
                unit: unit.clone(),
                because,
            };
            if held && !restore {
                out.idle
                    .push(idle(format!("{said}, but its module is not taken")));
            } else if unit.is_template() && runs.is_empty() {
                out.idle.push(idle(format!(
                    "{said}; no instance runs, and each reads it when it starts"
                )));
            } else if !unit.is_template() && input.now.is_some() && !now.known(unit) {
                out.idle
                    .push(idle(format!("{said}, but systemd does not know it")));
            } else if !unit.is_template() && !now.running(unit) {
                out.idle.push(idle(format!(
                    "{said}; it does not run, and reads it when it starts"
                )));
            } else {
                for r in runs {
                    let resolved = now.resolve(&r);
                    match how {
                        Some(PickUp::Reload) => asks.ask(&resolved, Ask::Reload, said.clone()),
                        Some(PickUp::Restart) => asks.ask(&resolved, Ask::Restart, said.clone()),
                        None => {
                            let on_change = d.map_or(OnChange::Restart, |u| u.on_change);
                            if let Some(why) =
                                changed_unit(input, &now, &mut asks, &resolved, on_change, &said)
                            {
                                out.idle.push(Idle {
                                    unit: resolved.clone(),
                                    because: why,
                                });
                            }
                        }
                    }
                }
            }
        }
        for (name, c) in &target.containers {
            if c.state != ContainerState::Managed {
                continue;
            }
            let mounts = c.volumes.iter().any(|v| {
                v.source == path.as_str() || path.as_str().starts_with(&format!("{}/", v.source))
            });
            if mounts {
                remounts
                    .entry(name.to_string())
                    .or_default()
                    .push(format!("mounts {path}"));
            }
        }
    }
    out.restarts = remounts
        .into_iter()
        .map(|(name, because)| Remount { name, because })
        .collect();

    // The declared units.
    let written = |path: &TargetPath| {
        input.files.actions.iter().any(|a| {
            matches!(a, Action::Write { path: p, reason, .. } if p == path && *reason != Reason::Restore)
        })
    };
    let enable = |out: &mut ServicePlan, unit: &UnitName, because: &str| {
        out.enable.push(UnitFile {
            unit: unit.clone(),
            because: because.into(),
        })
    };
    let disable = |out: &mut ServicePlan, unit: &UnitName, because: &str| {
        out.disable.push(UnitFile {
            unit: unit.clone(),
            because: because.into(),
        })
    };
    for (name, unit) in &target.units {
        let prev = host.units.get(name);
        // What systemd runs for it: a template's instances (never the template), or itself.
        let runs_as = unit.runs_as(name);
        let ran_as = prev.map(|p| p.runs_as(name)).unwrap_or_default();
        match unit.state {
            UnitState::Managed => {
                let changed = match prev {
                    Some(p) => p.body != unit.body,
                    // New to the mesh: created, or taken from what ran before.
                    None => written(&name.file()),
                };
                let said_changed = if prev.is_some() {
                    "its unit file changed"
                } else {
                    "its unit file is the mesh's now"
                };
                // Instances no longer declared go as a unit no longer declared does.
                for gone in ran_as.iter().filter(|i| !runs_as.contains(i)) {
                    if now.running(gone) {
                        asks.ask(gone, Ask::Stop, "no longer a declared instance".into());
                    }
                    if prev.is_some_and(|p| p.enabled) {
                        disable(&mut out, gone, "no longer a declared instance");
                    }
                }
                for x in &runs_as {
                    let new_here = !ran_as.contains(x);
                    if unit.enabled
                        && (new_here
                            || prev.is_none_or(|p| !p.enabled || p.install != unit.install))
                    {
                        let because = match prev {
                            Some(p) if p.enabled && !new_here => {
                                // The links the old [Install] asked for go first.
                                disable(&mut out, x, "its [Install] section changed");
                                "its [Install] section changed"
                            }
                            _ => "declared enabled",
                        };
                        enable(&mut out, x, because);
                    }
                    if !unit.enabled && !new_here && prev.is_some_and(|p| p.enabled) {
                        disable(&mut out, x, "declared not enabled");
                    }
                    // Not asked: a unit the mesh did not start yet is taken not to run.
                    let runs = match input.now {
                        Some(_) => now.running(x),
                        None => !new_here && prev.is_some_and(|p| p.started),
                    };
                    if unit.started && !runs {
                        asks.ask(
                            x,
                            Ask::Start,
                            format!("declared started; it is {}", now.state(x)),
                        );
                    }
                    if !unit.started && runs && !new_here && prev.is_some_and(|p| p.started) {
                        asks.ask(x, Ask::Stop, "declared not started".into());
                    }
                }
                if changed {
                    // Every running unit of it picks the change up: a template's running
                    // instances, declared or not.
                    let running: Vec<UnitName> = if name.is_template() {
                        now.instances(name, &runs_as)
                    } else if match input.now {
                        Some(_) => now.running(name),
                        None => prev.is_some_and(|p| p.started),
                    } {
                        vec![name.clone()]
                    } else {
                        Vec::new()
                    };
                    for x in running {
                        if let Some(why) =
                            changed_unit(input, &now, &mut asks, &x, unit.on_change, said_changed)
                        {
                            out.idle.push(Idle {
                                unit: x.clone(),
                                because: why,
                            });
                        }
                    }
                }
                out.in_force.insert(
                    name.clone(),
                    UnitInForce {
                        body: unit.body,
                        install: unit.install,
                        enabled: unit.enabled,
                        started: unit.started,
                        instances: unit.instances.clone(),
                    },
                );
            }
            UnitState::Staged => {
                if let Some(p) = prev {
                    let said = "its module is not taken: a staged unit does not run";
                    for x in stopped_as(name, &ran_as, &now) {
                        asks.ask(&x, Ask::Stop, said.into());
                    }
                    if p.enabled {
                        for x in &ran_as {
                            disable(&mut out, x, said);
                        }
                    }
                }
            }
            UnitState::Held => {
                let Some(p) = prev else { continue };
                // Back across the take: the found unit returns as it was found. The mesh's is
                // stopped with its own definition, before the found file is back.
                let found = input.record.found.units.get(name);
                let (active, enabled) = found.map_or((true, p.enabled), |f| (f.active, f.enabled));
                match (active, now.running(name)) {
                    (true, true) => asks.ask(name, Ask::Cycle, "the found unit is back".into()),
                    (true, false) => asks.ask(name, Ask::Start, "it ran when it was found".into()),
                    (false, true) => {
                        asks.ask(name, Ask::Stop, "it did not run when it was found".into())
                    }
                    (false, false) => {}
                }
                if enabled {
                    enable(&mut out, name, "it was enabled when it was found");
                } else if p.enabled {
                    disable(&mut out, name, "it was not enabled when it was found");
                }
            }
        }
    }
    // Units the mesh had in force that are no longer declared.
    for (name, p) in &host.units {
        if target.units.contains_key(name) {
            continue;
        }
        let ran_as = p.runs_as(name);
        for x in stopped_as(name, &ran_as, &now) {
            asks.ask(&x, Ask::Stop, "no longer declared".into());
        }
        if p.enabled {
            for x in &ran_as {
                disable(&mut out, x, "no longer declared");
            }
        }
    }

    out.jobs = asks.jobs();
    if let Some(n) = input.now {
        out.before = n.clone();
    }
    out
}

/// The running units of a unit that goes (no longer declared, or staged again): itself, or a
/// template's instances that run, declared or not (their definition goes with it).
fn stopped_as(name: &UnitName, ran_as: &[UnitName], now: &Now<'_>) -> Vec<UnitName> {
    if name.is_template() {
        let mut all = now.instances(name, ran_as);
        if now.now.is_none() {
            all.retain(|x| ran_as.contains(x));
        }
        all
    } else if now.running(name) {
        vec![name.clone()]
    } else {
        Vec::new()
    }
}

/// Asks what a running unit whose own definition changed (its file, or a drop-in) does, by its
/// kind; the reason when it is left alone.
fn changed_unit(
    input: &ServiceInput<'_>,
    now: &Now<'_>,
    asks: &mut Asks,
    unit: &UnitName,
    on_change: OnChange,
    said: &str,
) -> Option<String> {
    if on_change == OnChange::Leave {
        return Some(format!(
            "{said}; left running, as declared (on_change = 'leave)"
        ));
    }
    match unit.kind() {
        "slice" => Some(format!(
            "{said}; a slice is not restarted: systemd applies its resources when it reads its files again"
        )),
        "target" => Some(format!(
            "{said}; a target is not restarted (what is bound to it would be)"
        )),
        "mount" if input.options_only.contains(unit) => {
            asks.ask(unit, Ask::Reload, format!("{said}: its options (remounted)"));
            None
        }
        "socket" => {
            // Its services hold the sockets it listens on: stopped first, then started again
            // when declared started, else left to activation.
            for service in input.activates.get(unit).into_iter().flatten() {
                if now.running(service) {
                    let declared = input
                        .target
                        .units
                        .get(service)
                        .is_some_and(|u| u.state == UnitState::Managed && u.started);
                    let what = if declared { Ask::Cycle } else { Ask::Stop };
                    asks.ask(
                        service,
                        what,
                        format!("{unit} listens anew ({said}); its service holds the old sockets"),
                    );
                }
            }
            asks.ask(unit, Ask::Restart, said.to_owned());
            None
        }
        _ => {
            let ask = match on_change {
                OnChange::Reload => Ask::Reload,
                _ => Ask::Restart,
            };
            asks.ask(unit, ask, said.to_owned());
            None
        }
    }
}

/// Whether a mount unit's file changed in its `Options=` alone (every other line the same):
/// then a remount picks the change up, without unmounting.
pub fn mount_options_only(old: &str, new: &str) -> bool {
    fn lines(text: &str) -> (Vec<(String, String)>, Vec<String>) {
        let mut section = String::new();
        let (mut rest, mut options) = (Vec::new(), Vec::new());
        for line in text.lines() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
                continue;
            }
            if t.starts_with('[') && t.ends_with(']') {
                section = t.to_owned();
                continue;
            }
            let (key, value) = t.split_once('=').unwrap_or((t, ""));
            if section == "[Mount]" && key.trim() == "Options" {
                options.push(value.trim().to_owned());
            } else {
                rest.push((section.clone(), format!("{}={}", key.trim(), value.trim())));
            }
        }
        (rest, options)
    }
    let (old_rest, old_options) = lines(old);
    let (new_rest, new_options) = lines(new);
    old_rest == new_rest && old_options != new_options
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use mesh_lib::model::{
        ContainerEntry, ContainerName, FileEntry, FileMode, FirewallRules, Mode, ModuleName,
        ModuleState, NodeName, PrivateNetwork, Settings, UnitEntry, Volume,
    };
    use mesh_lib::record::FoundUnit;
    use mesh_lib::BlobHash;

    use super::*;
    use mesh_node::host::Written;

    fn p(s: &str) -> TargetPath {
        TargetPath::new(s).unwrap()
    }

    fn u(s: &str) -> UnitName {
        UnitName::new(s).unwrap()
    }

    fn generation() -> Generation {
        let settings = Settings {
            ports: BTreeMap::new(),
            private_network: PrivateNetwork {
                range: "10.0.0.0/24".parse().unwrap(),
                address: "10.0.0.1".parse().unwrap(),
                hub: false,
            },
        };
        Generation {
            format: 1,
            node: NodeName::new("n").unwrap(),
            mode: Mode::Adopted,
            firewall: FirewallRules {
                guard: mesh_lib::firewall::guard_ruleset(&settings),
                base: None,
            },
            settings,
            modules: [
                (ModuleName::new("m").unwrap(), ModuleState::Taken),
                (ModuleName::new("held").unwrap(), ModuleState::Assigned),
            ]
            .into(),
            files: BTreeMap::new(),
            containers: BTreeMap::new(),
            openings: Vec::new(),
            units: BTreeMap::new(),
        }
    }

    fn file(g: &mut Generation, path: &str, state: FileState, units: &[(&str, PickUp)]) {
        g.files.insert(
            p(path),
            FileEntry {
                module: ModuleName::new(if state == FileState::Managed {
                    "m"
                } else {
                    "held"
                })
                .unwrap(),
                blob: BlobHash::of(path.as_bytes()),
                size: 1,
                mode: FileMode::parse("0644").unwrap(),
                owner: "root".into(),
                group: "root".into(),
                special_mode: false,
                secret: None,
                state,
                units: units
                    .iter()
                    .map(|(n, how)| UnitTrigger {
                        unit: u(n),
                        how: *how,
                    })
                    .collect(),
            },
        );
    }

    fn unit(g: &mut Generation, name: &str, state: UnitState, body: &[u8], on_change: OnChange) {
        let module = if state == UnitState::Managed {
            "m"
        } else {
            "held"
        };
        file(
            g,
            &format!("{UNIT_DIR}/{name}"),
            if state == UnitState::Managed {
                FileState::Managed
            } else {
                FileState::Staged
            },
            &[],
        );
        g.units.insert(
            u(name),
            UnitEntry {
                module: ModuleName::new(module).unwrap(),
                enabled: true,
                started: true,
                on_change,
                body: BlobHash::of(body),
                install: BlobHash::of(b"[Install]"),
                state,
                instances: Vec::new(),
            },
        );
    }

    fn write(path: &str, reason: Reason) -> Action {
        Action::Write {
            path: p(path),
            blob: BlobHash::of(path.as_bytes()),
            mode: FileMode::parse("0644").unwrap(),
            uid: 0,
            gid: 0,
            reason,
        }
    }

    fn states(list: &[(&str, &str)]) -> BTreeMap<UnitName, UnitNow> {
        list.iter()
            .map(|(n, active)| {
                (
                    u(n),
                    UnitNow::new(
                        "loaded",
                        active,
                        if *active == "active" {
                            "running"
                        } else {
                            "dead"
                        },
                    ),
                )
            })
            .collect()
    }

    fn in_force(body: &[u8]) -> UnitInForce {
        UnitInForce {
            body: BlobHash::of(body),
            install: BlobHash::of(b"[Install]"),
            enabled: true,
            started: true,
            instances: Vec::new(),
        }
    }

    /// The service plan of an adopted node for `actions` on `g`, systemd saying `now`.
    fn run(
        g: &Generation,
        actions: Vec<Action>,
        host: &HostStore,
        now: &BTreeMap<UnitName, UnitNow>,
    ) -> ServicePlan {
        run_with(
            g,
            actions,
            host,
            now,
            &BTreeMap::new(),
            &BTreeSet::new(),
            &record(),
        )
    }

    fn run_with(
        g: &Generation,
        actions: Vec<Action>,
        host: &HostStore,
        now: &BTreeMap<UnitName, UnitNow>,
        activates: &BTreeMap<UnitName, Vec<UnitName>>,
        options_only: &BTreeSet<UnitName>,
        record: &NodeRecord,
    ) -> ServicePlan {
        plan(&ServiceInput {
            target: g,
            files: &Plan { actions },
            host,
            record,
            now: Some(now),
            activates,
            options_only,
        })
    }

    fn jobs(plan: &ServicePlan) -> Vec<(String, Verb)> {
        plan.jobs
            .iter()
            .map(|j| (j.unit.to_string(), j.verb))
            .collect()
    }

    fn record() -> NodeRecord {
        let mut r = NodeRecord::managed(NodeName::new("n").unwrap());
        r.mode = Mode::Adopted;
        r
    }

    /// A changed file reloads the running unit it configures, naming itself as the cause; a
    /// unit that does not run is left to read it when it starts.
    #[test]
    fn a_changed_file_reloads_what_runs() {
        let mut g = generation();
        file(
            &mut g,
            "/etc/ssh/x.conf",
            FileState::Managed,
            &[("ssh.service", PickUp::Reload)],
        );
        let actions = vec![write("/etc/ssh/x.conf", Reason::Update)];
        let host = HostStore::default();
        let plan = run(
            &g,
            actions.clone(),
            &host,
            &states(&[("ssh.service", "active")]),
        );
        assert_eq!(jobs(&plan), [("ssh.service".into(), Verb::Reload)]);
        assert_eq!(plan.jobs[0].because, ["/etc/ssh/x.conf changed"]);
        assert!(!plan.daemon_reload());
        let idle = run(&g, actions, &host, &states(&[("ssh.service", "inactive")]));
        assert!(idle.jobs.is_empty());
        assert_eq!(idle.idle.len(), 1);
    }

    /// A file of a module not taken (staged) triggers nothing; a restored original (back across
    /// a take) does.
    #[test]
    fn staged_files_trigger_nothing_restores_do() {
        let mut g = generation();
        file(
            &mut g,
            "/etc/a.conf",
            FileState::Staged,
            &[("a.service", PickUp::Restart)],
        );
        file(
            &mut g,
            "/etc/b.conf",
            FileState::Held {
                original: BlobHash::of(b"orig"),
            },
            &[("b.service", PickUp::Reload)],
        );
        let now = states(&[("a.service", "active"), ("b.service", "active")]);
        let plan = run(
            &g,
            vec![
                write("/etc/a.conf", Reason::Create),
                write("/etc/b.conf", Reason::Restore),
            ],
            &HostStore::default(),
            &now,
        );
        assert_eq!(jobs(&plan), [("b.service".into(), Verb::Reload)]);
        assert_eq!(
            plan.jobs[0].because,
            ["/etc/b.conf is back as it was found"]
        );
    }

    /// Removing a file of the mesh's triggers what it configured when it was written.
    #[test]
    fn a_removed_file_triggers_what_it_configured() {
        let g = generation();
        let mut host = HostStore::default();
        host.written.insert(
            p("/etc/gone.conf"),
            Written {
                hash: BlobHash::of(b"x"),
                keyed: false,
                mode: FileMode::parse("0644").unwrap(),
                uid: 0,
                gid: 0,
                stamp: None,
                units: vec![UnitTrigger {
                    unit: u("gone.service"),
                    how: PickUp::Restart,
                }],
            },
        );
        let plan = run(
            &g,
            vec![Action::Remove {
                path: p("/etc/gone.conf"),
            }],
            &host,
            &states(&[("gone.service", "active")]),
        );
        assert_eq!(jobs(&plan), [("gone.service".into(), Verb::Restart)]);
    }

    /// A new declared unit: its file makes systemd reload, it is enabled and started. Then a
    /// change of its body restarts it (or reloads, or leaves it, as declared); a change of
    /// [Install] alone enables it again and restarts nothing.
    #[test]
    fn declared_units_follow_their_file() {
        let mut g = generation();
        unit(
            &mut g,
            "w.service",
            UnitState::Managed,
            b"v1",
            OnChange::Restart,
        );
        let path = format!("{UNIT_DIR}/w.service");
        let fresh = run(
            &g,
            vec![write(&path, Reason::Create)],
            &HostStore::default(),
            &states(&[]),
        );
        assert!(fresh.daemon_reload());
        assert_eq!(fresh.enable.len(), 1);
        assert_eq!(jobs(&fresh), [("w.service".into(), Verb::Start)]);

        let mut host = HostStore::default();
        host.units.insert(u("w.service"), in_force(b"v0"));
        let running = states(&[("w.service", "active")]);
        let changed = run(&g, vec![write(&path, Reason::Update)], &host, &running);
        assert_eq!(jobs(&changed), [("w.service".into(), Verb::Restart)]);
        assert!(changed.enable.is_empty());

        g.units.get_mut(&u("w.service")).unwrap().on_change = OnChange::Reload;
        let reloaded = run(&g, vec![write(&path, Reason::Update)], &host, &running);
        assert_eq!(jobs(&reloaded), [("w.service".into(), Verb::Reload)]);
        g.units.get_mut(&u("w.service")).unwrap().on_change = OnChange::Leave;
        let left = run(&g, vec![write(&path, Reason::Update)], &host, &running);
        assert!(left.jobs.is_empty());
        assert_eq!(left.idle.len(), 1);

        host.units.insert(u("w.service"), in_force(b"v1"));
        host.units.get_mut(&u("w.service")).unwrap().install = BlobHash::of(b"[Install] old");
        let install = run(&g, vec![write(&path, Reason::Update)], &host, &running);
        assert!(install.jobs.is_empty(), "{:?}", install.jobs);
        assert_eq!(install.enable[0].because, "its [Install] section changed");
    }

    /// Nothing changed and every declared unit runs: nothing to do, not even a daemon-reload.
    #[test]
    fn a_no_op_asks_nothing() {
        let mut g = generation();
        let mut host = HostStore::default();
        let mut running = Vec::new();
        let names: Vec<String> = (0..100).map(|i| format!("u{i}.service")).collect();
        for n in &names {
            unit(&mut g, n, UnitState::Managed, b"v1", OnChange::Restart);
            host.units.insert(u(n), in_force(b"v1"));
            running.push((n.as_str(), "active"));
        }
        let plan = run(&g, Vec::new(), &host, &states(&running));
        assert!(plan.is_empty(), "{plan:?}");
        assert_eq!(plan.in_force, host.units);
    }

    /// A unit no longer declared is stopped and disabled; one staged again (back across its
    /// take) too: a staged unit runs in no generation.
    #[test]
    fn units_that_go_are_stopped_and_disabled() {
        let mut g = generation();
        unit(
            &mut g,
            "s.service",
            UnitState::Staged,
            b"v1",
            OnChange::Restart,
        );
        let mut host = HostStore::default();
        host.units.insert(u("gone.service"), in_force(b"v1"));
        host.units.insert(u("s.service"), in_force(b"v1"));
        let now = states(&[("gone.service", "active"), ("s.service", "active")]);
        let plan = run(&g, Vec::new(), &host, &now);
        assert_eq!(
            jobs(&plan),
            [
                ("gone.service".into(), Verb::Stop),
                ("s.service".into(), Verb::Stop)
            ]
        );
        assert_eq!(plan.disable.len(), 2);
        assert!(plan.in_force.is_empty());
    }

    /// A held unit is never touched, whatever changes around it; back across its take, the
    /// found unit returns as it was found.
    #[test]
    fn held_units_are_untouched_until_they_come_back() {
        let mut g = generation();
        unit(
            &mut g,
            "h.service",
            UnitState::Held,
            b"v1",
            OnChange::Restart,
        );
        file(
            &mut g,
            "/etc/h.conf",
            FileState::Managed,
            &[("h.service", PickUp::Restart)],
        );
        let now = states(&[("h.service", "active")]);
        let plan = run(
            &g,
            vec![write("/etc/h.conf", Reason::Update)],
            &HostStore::default(),
            &now,
        );
        assert!(plan.jobs.is_empty() && plan.enable.is_empty(), "{plan:?}");

        let mut host = HostStore::default();
        host.units.insert(u("h.service"), in_force(b"mesh"));
        let mut rec = record();
        rec.found.units.insert(
            u("h.service"),
            FoundUnit {
                fragment: "/usr/lib/systemd/system/h.service".into(),
                active: true,
                enabled: false,
            },
        );
        let back = run_with(
            &g,
            Vec::new(),
            &host,
            &now,
            &BTreeMap::new(),
            &BTreeSet::new(),
            &rec,
        );
        assert_eq!(
            jobs(&back),
            [
                ("h.service".into(), Verb::Stop),
                ("h.service".into(), Verb::Start)
            ],
            "stopped with the mesh's definition, started with the found one"
        );
        assert_eq!(back.disable.len(), 1);
        rec.found.units.get_mut(&u("h.service")).unwrap().active = false;
        let stopped = run_with(
            &g,
            Vec::new(),
            &host,
            &now,
            &BTreeMap::new(),
            &BTreeSet::new(),
            &rec,
        );
        assert_eq!(jobs(&stopped), [("h.service".into(), Verb::Stop)]);
    }

    /// A managed container that mounts a changed file (or its folder) restarts.
    #[test]
    fn containers_restart_when_a_mounted_file_changes() {
        let mut g = generation();
        file(&mut g, "/etc/wiki/app.env", FileState::Managed, &[]);
        let entry = |source: &str| ContainerEntry {
            volumes: vec![Volume::new(source, "/x", true)],
            ..ContainerEntry::new(ModuleName::new("m").unwrap(), "i", ContainerState::Managed)
        };
        g.containers.insert(
            ContainerName::new("wiki").unwrap(),
            entry("/etc/wiki/app.env"),
        );
        g.containers
            .insert(ContainerName::new("folder").unwrap(), entry("/etc/wiki"));
        g.containers
            .insert(ContainerName::new("other").unwrap(), entry("/etc/wikis"));
        let plan = run(
            &g,
            vec![write("/etc/wiki/app.env", Reason::Update)],
            &HostStore::default(),
            &states(&[]),
        );
        let names: Vec<&str> = plan.restarts.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["folder", "wiki"]);
        assert_eq!(plan.restarts[1].because, ["mounts /etc/wiki/app.env"]);
    }

    /// A timer and its service that go together are both stopped before their files go, the
    /// timer in the first wave: nothing is left to trigger what vanished.
    #[test]
    fn a_timer_stops_before_its_service() {
        let g = generation();
        let mut host = HostStore::default();
        host.units.insert(u("tick.timer"), in_force(b"t"));
        host.units.insert(u("tick.service"), in_force(b"s"));
        let now = states(&[("tick.timer", "active"), ("tick.service", "active")]);
        let plan = run(&g, Vec::new(), &host, &now);
        let [first, then] = plan.stops();
        let names = |wave: Vec<&UnitJob>| -> Vec<String> {
            wave.iter().map(|j| j.unit.to_string()).collect()
        };
        assert_eq!(names(first), ["tick.timer"]);
        assert_eq!(names(then), ["tick.service"]);
        assert_eq!(plan.disable.len(), 2);
    }

    /// Two files naming one unit, one by an alias: one job on the unit systemd runs, the
    /// strongest asked, with both causes.
    #[test]
    fn an_alias_and_its_unit_are_one_job() {
        let mut g = generation();
        file(
            &mut g,
            "/etc/a.conf",
            FileState::Managed,
            &[("nick.service", PickUp::Reload)],
        );
        file(
            &mut g,
            "/etc/b.conf",
            FileState::Managed,
            &[("real.service", PickUp::Restart)],
        );
        let mut now = states(&[("real.service", "active"), ("nick.service", "active")]);
        now.get_mut(&u("nick.service")).unwrap().id = "real.service".into();
        let plan = run(
            &g,
            vec![
                write("/etc/a.conf", Reason::Update),
                write("/etc/b.conf", Reason::Update),
            ],
            &HostStore::default(),
            &now,
        );
        assert_eq!(jobs(&plan), [("real.service".into(), Verb::Restart)]);
        assert_eq!(
            plan.jobs[0].because,
            ["/etc/a.conf changed", "/etc/b.conf changed"]
        );
    }

    /// A template is never enabled or started itself: its declared instances are; a change of
    /// the template restarts every running instance, declared or not; an instance no longer
    /// declared is stopped and disabled.
    #[test]
    fn a_template_runs_as_its_instances() {
        let mut g = generation();
        unit(
            &mut g,
            "e@.service",
            UnitState::Managed,
            b"v1",
            OnChange::Restart,
        );
        g.units.get_mut(&u("e@.service")).unwrap().instances = vec!["one".into(), "two".into()];
        let path = format!("{UNIT_DIR}/e@.service");
        let fresh = run(
            &g,
            vec![write(&path, Reason::Create)],
            &HostStore::default(),
            &states(&[]),
        );
        let enabled: Vec<String> = fresh.enable.iter().map(|e| e.unit.to_string()).collect();
        assert_eq!(enabled, ["e@one.service", "e@two.service"]);
        assert_eq!(
            jobs(&fresh),
            [
                ("e@one.service".into(), Verb::Start),
                ("e@two.service".into(), Verb::Start)
            ]
        );
        assert_eq!(fresh.in_force[&u("e@.service")].instances, ["one", "two"]);

        let mut host = HostStore::default();
        let mut before = in_force(b"v0");
        before.instances = vec!["one".into(), "two".into()];
        host.units.insert(u("e@.service"), before);
        let running = states(&[
            ("e@one.service", "active"),
            ("e@two.service", "active"),
            ("e@three.service", "active"),
        ]);
        let changed = run(&g, vec![write(&path, Reason::Update)], &host, &running);
        assert_eq!(
            jobs(&changed),
            [
                ("e@one.service".into(), Verb::Restart),
                ("e@three.service".into(), Verb::Restart),
                ("e@two.service".into(), Verb::Restart)
            ]
        );
        assert!(changed.enable.is_empty());

        g.units.get_mut(&u("e@.service")).unwrap().instances = vec!["one".into()];
        host.units.get_mut(&u("e@.service")).unwrap().body = BlobHash::of(b"v1");
        let fewer = run(&g, Vec::new(), &host, &running);
        assert_eq!(jobs(&fewer), [("e@two.service".into(), Verb::Stop)]);
        let disabled: Vec<String> = fewer.disable.iter().map(|e| e.unit.to_string()).collect();
        assert_eq!(disabled, ["e@two.service"]);
    }

    /// A drop-in configures its unit as the unit's own file does: one for an instance restarts
    /// that instance only, and systemd reads its files again first.
    #[test]
    fn a_drop_in_restarts_its_unit_only() {
        let mut g = generation();
        file(
            &mut g,
            &format!("{UNIT_DIR}/e@one.service.d/10-x.conf"),
            FileState::Managed,
            &[],
        );
        let running = states(&[("e@one.service", "active"), ("e@two.service", "active")]);
        let plan = run(
            &g,
            vec![write(
                &format!("{UNIT_DIR}/e@one.service.d/10-x.conf"),
                Reason::Update,
            )],
            &HostStore::default(),
            &running,
        );
        assert_eq!(jobs(&plan), [("e@one.service".into(), Verb::Restart)]);
        assert!(plan.daemon_reload());
        assert_eq!(
            drop_in_of(&p("/etc/systemd/system/x.service.d/a.conf")),
            Some(u("x.service"))
        );
        assert_eq!(
            drop_in_of(&p("/etc/systemd/system/x.service.d/a.txt")),
            None
        );
        assert_eq!(drop_in_of(&p("/etc/systemd/system/x.service")), None);
    }

    /// Each kind picks up a change of its file as systemd users expect: a slice and a target
    /// are not restarted; a socket's service is stopped first and started again after the
    /// socket when declared started; a mount whose options alone changed is remounted, one
    /// whose source changed is mounted again.
    #[test]
    fn each_kind_picks_up_its_change() {
        let mut g = generation();
        for name in [
            "s.slice",
            "t.target",
            "k.socket",
            "k.service",
            "m1.mount",
            "m2.mount",
        ] {
            unit(&mut g, name, UnitState::Managed, b"v1", OnChange::Restart);
        }
        let mut host = HostStore::default();
        for name in [
            "s.slice",
            "t.target",
            "k.socket",
            "k.service",
            "m1.mount",
            "m2.mount",
        ] {
            host.units.insert(u(name), in_force(b"v0"));
        }
        // The service's own file is unchanged: only the socket's is.
        host.units.insert(u("k.service"), in_force(b"v1"));
        let now = states(&[
            ("s.slice", "active"),
            ("t.target", "active"),
            ("k.socket", "active"),
            ("k.service", "active"),
            ("m1.mount", "active"),
            ("m2.mount", "active"),
        ]);
        let activates = [(u("k.socket"), vec![u("k.service")])].into();
        let options_only = [u("m1.mount")].into();
        let actions = ["s.slice", "t.target", "k.socket", "m1.mount", "m2.mount"]
            .iter()
            .map(|n| write(&format!("{UNIT_DIR}/{n}"), Reason::Update))
            .collect();
        let plan = run_with(
            &g,
            actions,
            &host,
            &now,
            &activates,
            &options_only,
            &record(),
        );
        assert_eq!(
            jobs(&plan),
            [
                ("k.service".into(), Verb::Stop),
                ("m1.mount".into(), Verb::Reload),
                ("k.socket".into(), Verb::Restart),
                ("m2.mount".into(), Verb::Restart),
                ("k.service".into(), Verb::Start),
            ]
        );
        assert!(plan.daemon_reload());
        let idle: Vec<String> = plan.idle.iter().map(|i| i.unit.to_string()).collect();
        assert_eq!(idle, ["s.slice", "t.target"]);

        // Declared not started, the socket's service is left to activation.
        g.units.get_mut(&u("k.service")).unwrap().started = false;
        host.units.get_mut(&u("k.service")).unwrap().started = false;
        let actions = vec![write(&format!("{UNIT_DIR}/k.socket"), Reason::Update)];
        let plan = run_with(
            &g,
            actions,
            &host,
            &now,
            &activates,
            &options_only,
            &record(),
        );
        let socket: Vec<_> = jobs(&plan)
            .into_iter()
            .filter(|(n, _)| n.starts_with("k."))
            .collect();
        assert_eq!(
            socket,
            [
                ("k.service".into(), Verb::Stop),
                ("k.socket".into(), Verb::Restart)
            ]
        );
    }

    /// Options alone: every other line the same, comments and blank lines aside.
    #[test]
    fn mount_options_only_compares_every_other_line() {
        let a = "[Unit]\nDescription=x\n[Mount]\nWhat=tmpfs\nWhere=/mnt/x\nType=tmpfs\nOptions=size=1m\n";
        let b = a.replace("size=1m", "size=2m");
        assert!(mount_options_only(a, &b));
        assert!(
            !mount_options_only(a, a),
            "no change is not an options change"
        );
        assert!(!mount_options_only(
            a,
            &b.replace("What=tmpfs", "What=other")
        ));
        assert!(mount_options_only(a, &format!("# a comment\n{b}")));
        assert!(!mount_options_only(
            a,
            &b.replace("Description=x", "Description=y")
        ));
    }
}
