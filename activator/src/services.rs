//! The service plan: which systemd units and containers pick up what a switch changes. A pure
//! function of the target generation, the file plan, the host store, the node record and the
//! units' states as systemd has them.
//!
//! The rules (README, "Services follow their configuration"):
//! - a file the switch writes, takes, restores or removes reloads or restarts the units it says
//!   it configures (`reloads`, `restarts`) — when they run; one that does not run reads the file
//!   when it starts. A file of a module not taken (staged) triggers nothing;
//! - a declared unit whose file changes outside `[Install]` is restarted (or reloaded, or left,
//!   as its `on_change` says) when it runs; a change of `[Install]` alone enables it again and
//!   restarts nothing; a unit declared started that does not run is started; one no longer
//!   declared, or staged again (back across its take), is stopped and disabled;
//! - a held unit (found, its module not taken) is never enabled, disabled, started, stopped,
//!   reloaded or restarted — except back across a take, where the found unit returns as it was
//!   found (running or not, enabled or not);
//! - a managed container restarts when a file it mounts (a volume whose source is the file or
//!   a folder holding it) changed;
//! - any unit file under `/etc/systemd/system` that changes, and any enable or disable, makes
//!   systemd read its unit files again (daemon-reload) before any job.
//!
//! One action per unit, the strongest asked: stop, then start (a unit starting reads everything
//! anew), restart, reload. The switch runs them after the files: stops, reloads, restarts,
//! starts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use mesh_lib::model::{
    ContainerState, FileState, OnChange, PickUp, UnitName, UnitState, UnitTrigger, UNIT_DIR,
};
use mesh_lib::{Generation, NodeRecord, TargetPath};
use serde::{Deserialize, Serialize};

use crate::host::{HostStore, UnitInForce};
use crate::plan::{Action, Plan, Reason};
use crate::systemd::{UnitNow, Verb};

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

/// What the services do after the files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServicePlan {
    /// Unit files that change: systemd reads its unit files again first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unit_files: Vec<TargetPath>,
    /// Units enabled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enable: Vec<UnitFile>,
    /// Units disabled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disable: Vec<UnitFile>,
    /// Jobs, in the order they run: stops, reloads, restarts, starts.
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
    /// The units' states, as systemd has them; `None` when systemd is not asked (then every
    /// unit the mesh did not start is taken to run, so the plan shows what would be done).
    pub now: Option<&'a BTreeMap<UnitName, UnitNow>>,
}

/// The units whose state the plan needs: the target's declared units, the ones the mesh has in
/// force, and the ones the changed files configure.
pub fn units_to_observe<'a>(
    target: &'a Generation,
    files: &'a Plan,
    host: &'a HostStore,
) -> BTreeSet<&'a UnitName> {
    let mut out: BTreeSet<&UnitName> = target.units.keys().chain(host.units.keys()).collect();
    for action in &files.actions {
        for t in triggers_of(action, target, host)
            .map(|(t, _)| t)
            .into_iter()
            .flatten()
        {
            out.insert(&t.unit);
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
            Some((&host.written.get(path)?.units, format!("{path} removed")))
        }
        _ => None,
    }
}

fn strength(verb: Verb) -> u8 {
    match verb {
        Verb::Reload => 1,
        Verb::Restart => 2,
        Verb::Start => 3,
        Verb::Stop => 4,
    }
}

/// Makes the service plan.
pub fn plan(input: &ServiceInput<'_>) -> ServicePlan {
    let target = input.target;
    let host = input.host;
    let mut out = ServicePlan::default();
    // Per unit: the strongest job asked, and every cause with the job it asked for.
    let mut jobs: BTreeMap<UnitName, (Verb, Vec<(Verb, String)>)> = BTreeMap::new();
    let mut ask = |unit: &UnitName, verb: Verb, because: String| {
        let entry = jobs
            .entry(unit.clone())
            .or_insert_with(|| (verb, Vec::new()));
        if strength(verb) > strength(entry.0) {
            entry.0 = verb;
        }
        if !entry.1.iter().any(|(_, b)| *b == because) {
            entry.1.push((verb, because));
        }
    };
    let now = |unit: &UnitName| input.now.and_then(|n| n.get(unit));
    // Unknown (not asked): taken to run, so the plan shows what a change would do.
    let running = |unit: &UnitName| input.now.is_none() || now(unit).is_some_and(UnitNow::running);
    let state_of =
        |unit: &UnitName| now(unit).map_or_else(|| "unknown".to_owned(), |n| n.active.clone());

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
        for t in triggers {
            let declared = target.units.get(&t.unit);
            let held = declared.is_some_and(|u| u.state != UnitState::Managed);
            let ours = declared.is_some_and(|u| u.state == UnitState::Managed);
            if ours && !running(&t.unit) {
                // A declared unit that does not run yet: its own rules start it (or not), and
                // a start reads every file anew.
                continue;
            }
            if held && !restore {
                out.idle.push(Idle {
                    unit: t.unit.clone(),
                    because: format!("{said}, but its module is not taken"),
                });
            } else if input.now.is_some() && !now(&t.unit).is_some_and(UnitNow::known) {
                out.idle.push(Idle {
                    unit: t.unit.clone(),
                    because: format!("{said}, but systemd does not know it"),
                });
            } else if !running(&t.unit) {
                out.idle.push(Idle {
                    unit: t.unit.clone(),
                    because: format!("{said}; it does not run, and reads it when it starts"),
                });
            } else {
                let verb = match t.how {
                    PickUp::Reload => Verb::Reload,
                    PickUp::Restart => Verb::Restart,
                };
                ask(&t.unit, verb, said.clone());
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
    for (name, unit) in &target.units {
        let prev = host.units.get(name);
        match unit.state {
            UnitState::Managed => {
                let changed = match prev {
                    Some(p) => p.body != unit.body,
                    // New to the mesh: created, or taken from what ran before.
                    None => written(&name.file()),
                };
                if unit.enabled && prev.is_none_or(|p| !p.enabled || p.install != unit.install) {
                    let because = match prev {
                        Some(p) if p.enabled => {
                            // The links the old [Install] asked for go first.
                            out.disable.push(UnitFile {
                                unit: name.clone(),
                                because: "its [Install] section changed".into(),
                            });
                            "its [Install] section changed"
                        }
                        _ => "declared enabled",
                    };
                    out.enable.push(UnitFile {
                        unit: name.clone(),
                        because: because.into(),
                    });
                }
                if !unit.enabled && prev.is_some_and(|p| p.enabled) {
                    out.disable.push(UnitFile {
                        unit: name.clone(),
                        because: "declared not enabled".into(),
                    });
                }
                // Not asked: a unit the mesh did not start yet is taken not to run.
                let runs = match input.now {
                    Some(_) => running(name),
                    None => prev.is_some_and(|p| p.started),
                };
                if unit.started && !runs {
                    ask(
                        name,
                        Verb::Start,
                        format!("declared started; it is {}", state_of(name)),
                    );
                } else if runs && changed {
                    let said = if prev.is_some() {
                        "its unit file changed".to_owned()
                    } else {
                        "its unit file is the mesh's now".to_owned()
                    };
                    match unit.on_change {
                        OnChange::Restart => ask(name, Verb::Restart, said),
                        OnChange::Reload => ask(name, Verb::Reload, said),
                        OnChange::Leave => out.idle.push(Idle {
                            unit: name.clone(),
                            because: format!(
                                "{said}; left running, as declared (on_change = 'leave)"
                            ),
                        }),
                    }
                }
                if !unit.started && runs && prev.is_some_and(|p| p.started) {
                    ask(name, Verb::Stop, "declared not started".into());
                }
                out.in_force.insert(
                    name.clone(),
                    UnitInForce {
                        body: unit.body,
                        install: unit.install,
                        enabled: unit.enabled,
                        started: unit.started,
                    },
                );
            }
            UnitState::Staged => {
                if let Some(p) = prev {
                    let said = "its module is not taken: a staged unit does not run";
                    if running(name) {
                        ask(name, Verb::Stop, said.into());
                    }
                    if p.enabled {
                        out.disable.push(UnitFile {
                            unit: name.clone(),
                            because: said.into(),
                        });
                    }
                }
            }
            UnitState::Held => {
                let Some(p) = prev else { continue };
                // Back across the take: the found unit returns as it was found.
                let found = input.record.found.units.get(name);
                let (active, enabled) = found.map_or((true, p.enabled), |f| (f.active, f.enabled));
                match (active, running(name)) {
                    (true, true) => ask(name, Verb::Restart, "the found unit is back".into()),
                    (true, false) => ask(name, Verb::Start, "it ran when it was found".into()),
                    (false, true) => {
                        ask(name, Verb::Stop, "it did not run when it was found".into())
                    }
                    (false, false) => {}
                }
                if enabled {
                    out.enable.push(UnitFile {
                        unit: name.clone(),
                        because: "it was enabled when it was found".into(),
                    });
                } else if p.enabled {
                    out.disable.push(UnitFile {
                        unit: name.clone(),
                        because: "it was not enabled when it was found".into(),
                    });
                }
            }
        }
    }
    // Units the mesh had in force that are no longer declared.
    for (name, p) in &host.units {
        if target.units.contains_key(name) {
            continue;
        }
        if running(name) {
            ask(name, Verb::Stop, "no longer declared".into());
        }
        if p.enabled {
            out.disable.push(UnitFile {
                unit: name.clone(),
                because: "no longer declared".into(),
            });
        }
    }

    // The causes of the job done: a restart answers what asked for a reload too; a start or a
    // stop only what asked for it.
    let mut jobs: Vec<UnitJob> = jobs
        .into_iter()
        .map(|(unit, (verb, asked))| UnitJob {
            unit,
            verb,
            because: asked
                .into_iter()
                .filter(|(v, _)| *v == verb || (verb == Verb::Restart && *v == Verb::Reload))
                .map(|(_, b)| b)
                .collect(),
        })
        .collect();
    jobs.sort_by(|a, b| (a.verb, &a.unit).cmp(&(b.verb, &b.unit)));
    out.jobs = jobs;
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use mesh_lib::model::{
        ContainerEntry, ContainerName, FileEntry, FileMode, FirewallRules, Mode, ModuleName,
        ModuleState, NodeName, PrivateNetwork, Settings, UnitEntry, Volume,
    };
    use mesh_lib::record::FoundUnit;
    use mesh_lib::BlobHash;

    use super::*;
    use crate::host::Written;

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
                    UnitNow {
                        load: "loaded".into(),
                        active: (*active).into(),
                    },
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
        }
    }

    fn run(
        g: &Generation,
        actions: Vec<Action>,
        host: &HostStore,
        record: &NodeRecord,
        now: &BTreeMap<UnitName, UnitNow>,
    ) -> ServicePlan {
        plan(&ServiceInput {
            target: g,
            files: &Plan { actions },
            host,
            record,
            now: Some(now),
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
            &record(),
            &states(&[("ssh.service", "active")]),
        );
        assert_eq!(jobs(&plan), [("ssh.service".into(), Verb::Reload)]);
        assert_eq!(plan.jobs[0].because, ["/etc/ssh/x.conf changed"]);
        assert!(!plan.daemon_reload());
        let idle = run(
            &g,
            actions,
            &host,
            &record(),
            &states(&[("ssh.service", "inactive")]),
        );
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
            &record(),
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
            &record(),
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
            &record(),
            &states(&[]),
        );
        assert!(fresh.daemon_reload());
        assert_eq!(fresh.enable.len(), 1);
        assert_eq!(jobs(&fresh), [("w.service".into(), Verb::Start)]);

        let mut host = HostStore::default();
        host.units.insert(u("w.service"), in_force(b"v0"));
        let running = states(&[("w.service", "active")]);
        let changed = run(
            &g,
            vec![write(&path, Reason::Update)],
            &host,
            &record(),
            &running,
        );
        assert_eq!(jobs(&changed), [("w.service".into(), Verb::Restart)]);
        assert!(changed.enable.is_empty());

        g.units.get_mut(&u("w.service")).unwrap().on_change = OnChange::Reload;
        let reloaded = run(
            &g,
            vec![write(&path, Reason::Update)],
            &host,
            &record(),
            &running,
        );
        assert_eq!(jobs(&reloaded), [("w.service".into(), Verb::Reload)]);
        g.units.get_mut(&u("w.service")).unwrap().on_change = OnChange::Leave;
        let left = run(
            &g,
            vec![write(&path, Reason::Update)],
            &host,
            &record(),
            &running,
        );
        assert!(left.jobs.is_empty());
        assert_eq!(left.idle.len(), 1);

        host.units.insert(u("w.service"), in_force(b"v1"));
        host.units.get_mut(&u("w.service")).unwrap().install = BlobHash::of(b"[Install] old");
        let install = run(
            &g,
            vec![write(&path, Reason::Update)],
            &host,
            &record(),
            &running,
        );
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
        let plan = run(&g, Vec::new(), &host, &record(), &states(&running));
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
        let plan = run(&g, Vec::new(), &host, &record(), &now);
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
            &record(),
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
        let back = run(&g, Vec::new(), &host, &rec, &now);
        assert_eq!(jobs(&back), [("h.service".into(), Verb::Restart)]);
        assert_eq!(back.disable.len(), 1);
        rec.found.units.get_mut(&u("h.service")).unwrap().active = false;
        let stopped = run(&g, Vec::new(), &host, &rec, &now);
        assert_eq!(jobs(&stopped), [("h.service".into(), Verb::Stop)]);
    }

    /// A managed container that mounts a changed file (or its folder) restarts.
    #[test]
    fn containers_restart_when_a_mounted_file_changes() {
        let mut g = generation();
        file(&mut g, "/etc/wiki/app.env", FileState::Managed, &[]);
        let entry = |source: &str| ContainerEntry {
            module: ModuleName::new("m").unwrap(),
            image: "i".into(),
            command: Vec::new(),
            environment: BTreeMap::new(),
            ports: Vec::new(),
            volumes: vec![Volume {
                source: source.into(),
                target: "/x".into(),
                read_only: true,
            }],
            labels: BTreeMap::new(),
            stop_timeout: None,
            state: ContainerState::Managed,
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
            &record(),
            &states(&[]),
        );
        let names: Vec<&str> = plan.restarts.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["folder", "wiki"]);
        assert_eq!(plan.restarts[1].because, ["mounts /etc/wiki/app.env"]);
    }
}
