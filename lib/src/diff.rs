//! What changes from one generation to another, for `mesh diff`.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::model::{FileEntry, FileState, Generation, Mode, ModuleState, PickUp, UnitState};

/// How one path changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "lowercase")]
pub enum FileChange {
    /// Declared only in the newer generation.
    Added {
        /// Its state there.
        state: String,
    },
    /// Declared only in the older one.
    Removed,
    /// Declared in both; content, metadata or state differ.
    Changed {
        /// What differs, in words (`content`, `mode 0644 -> 0600`, `held -> managed`).
        what: Vec<String>,
    },
}

/// The differences between two generations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Diff {
    /// The node's mode, when it changes.
    pub mode: Option<(Mode, Mode)>,
    /// Port settings that change: name, before, after.
    pub settings: Vec<(String, Option<u16>, Option<u16>)>,
    /// Modules that are assigned, unassigned, or taken: name, before, after.
    pub modules: Vec<(String, Option<String>, Option<String>)>,
    /// Files that change.
    pub files: Vec<(String, FileChange)>,
    /// Containers that are added, removed or change.
    pub containers: Vec<(String, String)>,
    /// Openings added (`+`) or removed (`-`), each as its rule comment
    /// (`mesh: MODULE SETTING PORT/PROTO from SOURCE`).
    pub openings: Vec<(char, String)>,
    /// Whether the guard changes.
    pub guard: bool,
    /// What happens to the base ruleset: `loaded`, `removed` or `changed`.
    pub base: Option<String>,
    /// Declared units that are added, removed or change, and the units the changed files
    /// configure: unit and what a switch does to it (when it runs; `mesh switch --dry-run`
    /// asks systemd).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<(String, String)>,
}

impl Diff {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        *self == Diff::default()
    }
}

fn module_word(s: ModuleState) -> String {
    match s {
        ModuleState::Assigned => "assigned".into(),
        ModuleState::Taken => "taken".into(),
    }
}

/// From `a` to `b`.
pub fn diff(a: &Generation, b: &Generation) -> Diff {
    let mut d = Diff {
        mode: (a.mode != b.mode).then_some((a.mode, b.mode)),
        ..Diff::default()
    };
    let names: BTreeSet<&String> = a
        .settings
        .ports
        .keys()
        .chain(b.settings.ports.keys())
        .collect();
    for name in names {
        let (x, y) = (
            a.settings.ports.get(name).map(|p| p.get()),
            b.settings.ports.get(name).map(|p| p.get()),
        );
        if x != y {
            d.settings.push((name.clone(), x, y));
        }
    }
    let modules: BTreeSet<_> = a.modules.keys().chain(b.modules.keys()).collect();
    for m in modules {
        let (x, y) = (
            a.modules.get(m).copied().map(module_word),
            b.modules.get(m).copied().map(module_word),
        );
        if x != y {
            d.modules.push((m.to_string(), x, y));
        }
    }
    let paths: BTreeSet<_> = a.files.keys().chain(b.files.keys()).collect();
    for p in paths {
        let change = match (a.files.get(p), b.files.get(p)) {
            (None, Some(f)) => Some(FileChange::Added {
                state: f.state.word().into(),
            }),
            (Some(_), None) => Some(FileChange::Removed),
            (Some(x), Some(y)) => {
                let mut what = Vec::new();
                if x.blob != y.blob {
                    what.push("content".to_string());
                }
                if x.mode != y.mode {
                    what.push(format!("mode {} -> {}", x.mode, y.mode));
                }
                if (&x.owner, &x.group) != (&y.owner, &y.group) {
                    what.push(format!(
                        "owner {}:{} -> {}:{}",
                        x.owner, x.group, y.owner, y.group
                    ));
                }
                if x.state.word() != y.state.word() {
                    what.push(format!("{} -> {}", x.state.word(), y.state.word()));
                }
                (!what.is_empty()).then_some(FileChange::Changed { what })
            }
            (None, None) => None,
        };
        if let Some(c) = change {
            d.files.push((p.to_string(), c));
        }
    }
    let names: BTreeSet<_> = a.containers.keys().chain(b.containers.keys()).collect();
    for n in names {
        let what = match (a.containers.get(n), b.containers.get(n)) {
            (None, Some(c)) => Some(format!("added ({})", c.state.word())),
            (Some(_), None) => Some("removed".to_string()),
            (Some(x), Some(y)) if x.state.word() != y.state.word() => {
                Some(format!("{} -> {}", x.state.word(), y.state.word()))
            }
            (Some(x), Some(y)) if x != y => Some("spec changed".to_string()),
            _ => None,
        };
        if let Some(w) = what {
            d.containers.push((n.to_string(), w));
        }
    }
    let comments = |g: &Generation| -> BTreeSet<String> {
        g.openings
            .iter()
            .map(crate::firewall::opening_comment)
            .collect()
    };
    let (before, after) = (comments(a), comments(b));
    d.openings = before
        .difference(&after)
        .map(|c| ('-', c.clone()))
        .chain(after.difference(&before).map(|c| ('+', c.clone())))
        .collect();
    d.units = units(a, b);
    d.guard = a.firewall.guard != b.firewall.guard;
    d.base = match (&a.firewall.base, &b.firewall.base) {
        (None, Some(_)) => Some("loaded".into()),
        (Some(_), None) => Some("removed".into()),
        (Some(x), Some(y)) if x != y => Some("changed".into()),
        _ => None,
    };
    d
}

/// The content a file holds on the machine in a generation: its original while held.
fn in_effect(f: &FileEntry) -> crate::BlobHash {
    match f.state {
        FileState::Held { original } => original,
        _ => f.blob,
    }
}

/// What happens to units from `a` to `b`: declared units added, removed, changed; and the
/// reloads and restarts the files that change call for (the rules of the service plan, without
/// what systemd says runs).
fn units(a: &Generation, b: &Generation) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let names: BTreeSet<_> = a.units.keys().chain(b.units.keys()).collect();
    for n in names {
        let what = match (a.units.get(n), b.units.get(n)) {
            (None, Some(u)) => Some(format!(
                "added ({}{}{})",
                u.state.word(),
                if u.enabled { ", enabled" } else { "" },
                if u.started && u.state == UnitState::Managed {
                    ", started"
                } else {
                    ""
                }
            )),
            (Some(_), None) => Some("removed: stopped and disabled".to_owned()),
            (Some(x), Some(y)) if x.state != y.state => {
                Some(format!("{} -> {}", x.state.word(), y.state.word()))
            }
            (Some(x), Some(y)) if x.body != y.body && y.state == UnitState::Managed => Some(
                format!("its unit file changes: {} if it runs", on_change_word(y)),
            ),
            (Some(x), Some(y)) if x.install != y.install && y.state == UnitState::Managed => {
                Some("its [Install] section changes: enabled again, not restarted".to_owned())
            }
            (Some(x), Some(y)) if (x.enabled, x.started) != (y.enabled, y.started) => {
                Some(format!(
                    "now {}, {}",
                    if y.enabled { "enabled" } else { "not enabled" },
                    if y.started { "started" } else { "not started" }
                ))
            }
            _ => None,
        };
        if let Some(w) = what {
            out.push((n.to_string(), w));
        }
    }
    let paths: BTreeSet<_> = a.files.keys().chain(b.files.keys()).collect();
    for p in paths {
        let (x, y) = (a.files.get(p), b.files.get(p));
        let (triggers, said) = match (x, y) {
            (_, Some(y)) if x.is_none_or(|x| in_effect(x) != in_effect(y)) => match y.state {
                FileState::Managed => (&y.units, format!("{p} changes")),
                FileState::Held { .. } if x.is_some_and(|x| x.state == FileState::Managed) => {
                    (&y.units, format!("{p} is back as it was found"))
                }
                _ => continue,
            },
            (Some(x), None) if x.state == FileState::Managed => (&x.units, format!("{p} removed")),
            _ => continue,
        };
        for t in triggers {
            let held = b
                .units
                .get(&t.unit)
                .is_some_and(|u| u.state != UnitState::Managed);
            if held && y.is_some_and(|y| y.state == FileState::Managed) {
                continue;
            }
            let verb = match t.how {
                PickUp::Reload => "reload",
                PickUp::Restart => "restart",
            };
            out.push((t.unit.to_string(), format!("{verb} if it runs: {said}")));
        }
    }
    out
}

fn on_change_word(u: &crate::model::UnitEntry) -> &'static str {
    match u.on_change {
        crate::model::OnChange::Restart => "restarted",
        crate::model::OnChange::Reload => "reloaded",
        crate::model::OnChange::Leave => "left running",
    }
}
