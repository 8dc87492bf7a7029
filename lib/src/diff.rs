//! What changes from one generation to another, for `mesh diff`.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::model::{
    ContainerEntry, FileEntry, FileMode, FileState, Generation, Mode, ModuleState, PickUp,
    UnitState,
};

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

/// A port setting that changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettingChange {
    /// The setting's name.
    pub name: String,
    /// Its port before (`None`: not set).
    pub before: Option<u16>,
    /// Its port after.
    pub after: Option<u16>,
}

/// A module assigned, unassigned or taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleChange {
    /// The module.
    pub name: String,
    /// `assigned` or `taken` before (`None`: not assigned).
    pub before: Option<String>,
    /// After.
    pub after: Option<String>,
}

/// How one path changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathChange {
    /// The path.
    pub path: String,
    /// How.
    #[serde(flatten)]
    pub change: FileChange,
}

/// One field of a container's spec that changes, its values as they are declared (JSON for a
/// list); `None` where it is not set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldChange {
    /// `image`, `command`, `environment.NAME`, `secret_environment.NAME`, `labels.NAME`,
    /// `ports`, `volumes`, `state`.
    pub field: String,
    /// Before.
    pub before: Option<String>,
    /// After.
    pub after: Option<String>,
}

/// A container added, removed or changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerChange {
    /// Its name.
    pub name: String,
    /// In words: `added (staged)`, `removed`, `held -> managed`, `spec changed`.
    pub what: String,
    /// Field by field, for one declared in both.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldChange>,
}

/// An opening added or removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpeningChange {
    /// `added` or `removed`.
    pub change: &'static str,
    /// Its rule comment (`mesh: MODULE SETTING PORT/PROTO from SOURCE`).
    pub opening: String,
}

/// What happens to a unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnitChange {
    /// The unit.
    pub unit: String,
    /// What a switch does to it, and why.
    pub what: String,
}

/// The node's mode before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ModeChange {
    /// Before.
    pub before: Mode,
    /// After.
    pub after: Mode,
}

/// The differences between two generations, for a person to approve: every field named (the
/// JSON of `mesh diff --json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Diff {
    /// The node's mode, when it changes.
    pub mode: Option<ModeChange>,
    /// Port settings that change.
    pub settings: Vec<SettingChange>,
    /// Modules that are assigned, unassigned, or taken.
    pub modules: Vec<ModuleChange>,
    /// Files that change.
    pub files: Vec<PathChange>,
    /// Each changed file's content, as a unified diff where it may be shown (filled by
    /// [`content_diff`] from the store, where the caller has one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub contents: Vec<ContentDiff>,
    /// Containers that are added, removed or change, field by field.
    pub containers: Vec<ContainerChange>,
    /// Openings added or removed.
    pub openings: Vec<OpeningChange>,
    /// Whether the guard changes.
    pub guard: bool,
    /// What happens to the base ruleset: `loaded`, `removed` or `changed`.
    pub base: Option<String>,
    /// The firewall's change as nft lines, a unified diff of [`firewall_text`] (empty when it
    /// does not change).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub firewall: Vec<String>,
    /// Declared units that are added, removed or change, and the units the changed files
    /// configure: unit and what a switch does to it (when it runs; `mesh switch --dry-run`
    /// asks systemd).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<UnitChange>,
}

impl Diff {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        *self == Diff::default()
    }
}

/// A file's content change for a person: a unified diff, or why it is not shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContentDiff {
    /// The path.
    pub path: String,
    /// The unified diff (`--- a/PATH`, `+++ b/PATH`, its hunks), control characters escaped;
    /// `None` when the content is not shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unified: Option<String>,
    /// Why the content is not shown: a side others may not read, binary content, content the
    /// store does not have.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hidden: Option<String>,
}

/// One side of a file's change: its bytes, its mode; or what is not known of it.
#[derive(Debug, Clone, Copy)]
pub enum Side<'a> {
    /// No file there.
    Absent,
    /// This content, with this mode.
    File(&'a [u8], FileMode),
    /// A file whose content cannot be had (not in the store): why.
    Unknown(&'a str),
    /// A file made from secrets (their files and recipients, described): never shown, on
    /// either side, whatever its mode.
    Secret(&'a str),
}

/// The unified diff of a file from `old` to `new`. A file others may not read (no `o+r` on
/// either side) is shown as changed, never its content: `mesh diff` and a dry run are read by
/// whoever may run them, and the store keeps such content private too. Binary content (a NUL,
/// or not UTF-8) is named with its sizes. Lines are escaped as anything from outside.
pub fn content_diff(path: &str, old: Side<'_>, new: Side<'_>) -> ContentDiff {
    let hide = |why: String| ContentDiff {
        path: path.to_owned(),
        unified: None,
        hidden: Some(why),
    };
    let secrets: Vec<&str> = [old, new]
        .iter()
        .filter_map(|s| match s {
            Side::Secret(what) => Some(*what),
            _ => None,
        })
        .collect();
    if let Some(what) = secrets.last() {
        return hide(format!("secret changed: {what}"));
    }
    for side in [old, new] {
        match side {
            Side::File(_, mode) if !mode.world_readable() => {
                return hide(format!(
                    "content not shown: not readable by others (mode {mode})"
                ))
            }
            Side::Unknown(why) => return hide(format!("content not shown: {why}")),
            _ => {}
        }
    }
    let bytes = |s: Side<'_>| match s {
        Side::File(b, _) => b.to_vec(),
        _ => Vec::new(),
    };
    let (a, b) = (bytes(old), bytes(new));
    let text = |v: &[u8]| {
        std::str::from_utf8(v)
            .ok()
            .filter(|t| !t.contains('\0'))
            .map(str::to_owned)
    };
    let (Some(x), Some(y)) = (text(&a), text(&b)) else {
        return hide(format!("binary content, {} -> {} bytes", a.len(), b.len()));
    };
    let (from, to) = (
        match old {
            Side::Absent => "/dev/null".to_owned(),
            _ => format!("a{path}"),
        },
        match new {
            Side::Absent => "/dev/null".to_owned(),
            _ => format!("b{path}"),
        },
    );
    let unified = similar::TextDiff::from_lines(&x, &y)
        .unified_diff()
        .context_radius(3)
        .header(&from, &to)
        .to_string();
    ContentDiff {
        path: path.to_owned(),
        unified: Some(crate::text::escape_keeping_lines(&unified).into_owned()),
        hidden: None,
    }
}

/// A generation's firewall as nft text, one rule a line: the guard, the base ruleset on a
/// managed node, and on an adopted one the openings as they go into the found firewall's
/// chains. What [`Diff::firewall`] compares.
pub fn firewall_text(g: &Generation) -> String {
    let mut out = crate::firewall::render_nft(&g.firewall.guard);
    match &g.firewall.base {
        Some(base) => out.push_str(&crate::firewall::render_nft(base)),
        None => {
            for o in &g.openings {
                for path in &o.paths {
                    let (chain, path) = match path {
                        crate::model::TrafficPath::Incoming => ("input", *path),
                        crate::model::TrafficPath::Forwarded => ("forward", *path),
                    };
                    if let Some(rule) = crate::firewall::opening_rule(
                        o,
                        &g.settings,
                        path,
                        nftables::types::NfFamily::INet,
                    ) {
                        out.push_str(&format!(
                            "insert into the found {chain} chains: {}\n",
                            crate::firewall::render_rule(
                                &rule,
                                Some(&crate::firewall::opening_comment(o))
                            )
                        ));
                    }
                }
            }
        }
    }
    out
}

/// The lines of a unified diff of two texts, without its `---`/`+++` header.
fn line_diff(a: &str, b: &str) -> Vec<String> {
    if a == b {
        return Vec::new();
    }
    similar::TextDiff::from_lines(a, b)
        .unified_diff()
        .context_radius(2)
        .to_string()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A container's spec field by field.
fn container_fields(a: &ContainerEntry, b: &ContainerEntry) -> Vec<FieldChange> {
    let mut out = Vec::new();
    let mut field = |name: String, x: Option<String>, y: Option<String>| {
        if x != y {
            out.push(FieldChange {
                field: name,
                before: x,
                after: y,
            });
        }
    };
    field("image".into(), Some(a.image.clone()), Some(b.image.clone()));
    field(
        "command".into(),
        Some(json(&a.command)),
        Some(json(&b.command)),
    );
    for (map, x, y) in [
        ("environment", &a.environment, &b.environment),
        ("labels", &a.labels, &b.labels),
    ] {
        let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
        for k in keys {
            field(format!("{map}.{k}"), x.get(k).cloned(), y.get(k).cloned());
        }
    }
    // A secret by its file and ciphertext: never a value.
    let keys: BTreeSet<&String> = a
        .secret_environment
        .keys()
        .chain(b.secret_environment.keys())
        .collect();
    for k in keys {
        let of = |e: &ContainerEntry| {
            e.secret_environment
                .get(k)
                .map(|r| format!("secret {} (ciphertext {})", r.file, r.ciphertext))
        };
        field(format!("secret_environment.{k}"), of(a), of(b));
    }
    field("ports".into(), Some(json(&a.ports)), Some(json(&b.ports)));
    field(
        "volumes".into(),
        Some(json(&a.volumes)),
        Some(json(&b.volumes)),
    );
    field(
        "stop_timeout".into(),
        a.stop_timeout.map(|t| t.to_string()),
        b.stop_timeout.map(|t| t.to_string()),
    );
    field("restart".into(), a.restart.clone(), b.restart.clone());
    field(
        "networks".into(),
        (!a.networks.is_empty()).then(|| json(&a.networks)),
        (!b.networks.is_empty()).then(|| json(&b.networks)),
    );
    field(
        "healthcheck".into(),
        a.healthcheck.as_ref().map(json),
        b.healthcheck.as_ref().map(json),
    );
    for (name, x, y) in crate::import::option_differences(&a.options, &b.options) {
        let given = |v: String| (v != "(unset)").then_some(v);
        field(name.into(), given(x), given(y));
    }
    field(
        "accept_gaps".into(),
        (!a.accept_gaps.is_empty()).then(|| json(&a.accept_gaps)),
        (!b.accept_gaps.is_empty()).then(|| json(&b.accept_gaps)),
    );
    field(
        "module".into(),
        Some(a.module.to_string()),
        Some(b.module.to_string()),
    );
    field("state".into(), Some(json(&a.state)), Some(json(&b.state)));
    out
}

/// A value shown as its compact JSON.
fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn module_word(s: ModuleState) -> String {
    match s {
        ModuleState::Assigned => "assigned".into(),
        ModuleState::Taken => "taken".into(),
    }
}

/// From `a` to `b`, or from nothing (a node's first switch: everything is added).
pub fn diff_from(a: Option<&Generation>, b: &Generation) -> Diff {
    match a {
        Some(a) => diff(a, b),
        None => {
            let nothing = Generation {
                settings: crate::model::Settings {
                    ports: Default::default(),
                    ..b.settings.clone()
                },
                modules: Default::default(),
                files: Default::default(),
                containers: Default::default(),
                openings: Vec::new(),
                firewall: crate::model::FirewallRules {
                    guard: nftables::schema::Nftables {
                        objects: Default::default(),
                    },
                    base: None,
                },
                units: Default::default(),
                ..b.clone()
            };
            diff(&nothing, b)
        }
    }
}

/// From `a` to `b`.
pub fn diff(a: &Generation, b: &Generation) -> Diff {
    let mut d = Diff {
        mode: (a.mode != b.mode).then_some(ModeChange {
            before: a.mode,
            after: b.mode,
        }),
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
            d.settings.push(SettingChange {
                name: name.clone(),
                before: x,
                after: y,
            });
        }
    }
    let modules: BTreeSet<_> = a.modules.keys().chain(b.modules.keys()).collect();
    for m in modules {
        let (x, y) = (
            a.modules.get(m).copied().map(module_word),
            b.modules.get(m).copied().map(module_word),
        );
        if x != y {
            d.modules.push(ModuleChange {
                name: m.to_string(),
                before: x,
                after: y,
            });
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
                // The declared content, or the content in force (a take, a restore).
                if x.secret.is_some() || y.secret.is_some() {
                    if x.blob != y.blob || in_effect(x) != in_effect(y) || x.secret != y.secret {
                        let described = y.secret.as_ref().or(x.secret.as_ref());
                        what.push(format!(
                            "secret changed: {}",
                            described.map(|s| s.describe()).unwrap_or_default()
                        ));
                    }
                } else if x.blob != y.blob || in_effect(x) != in_effect(y) {
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
            d.files.push(PathChange {
                path: p.to_string(),
                change: c,
            });
        }
    }
    let names: BTreeSet<_> = a.containers.keys().chain(b.containers.keys()).collect();
    for n in names {
        let (x, y) = (a.containers.get(n), b.containers.get(n));
        let what = match (x, y) {
            (None, Some(c)) => Some(format!("added ({})", c.state.word())),
            (Some(_), None) => Some("removed".to_string()),
            (Some(x), Some(y)) if x.state.word() != y.state.word() => {
                Some(format!("{} -> {}", x.state.word(), y.state.word()))
            }
            (Some(x), Some(y)) if x != y => Some("spec changed".to_string()),
            _ => None,
        };
        if let Some(w) = what {
            let fields = match (x, y) {
                (Some(x), Some(y)) => container_fields(x, y),
                _ => Vec::new(),
            };
            d.containers.push(ContainerChange {
                name: n.to_string(),
                what: w,
                fields,
            });
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
        .map(|c| OpeningChange {
            change: "removed",
            opening: c.clone(),
        })
        .chain(after.difference(&before).map(|c| OpeningChange {
            change: "added",
            opening: c.clone(),
        }))
        .collect();
    d.units = units(a, b);
    d.guard = a.firewall.guard != b.firewall.guard;
    d.base = match (&a.firewall.base, &b.firewall.base) {
        (None, Some(_)) => Some("loaded".into()),
        (Some(_), None) => Some("removed".into()),
        (Some(x), Some(y)) if x != y => Some("changed".into()),
        _ => None,
    };
    d.firewall = line_diff(&firewall_text(a), &firewall_text(b));
    d
}

/// Whether a file's content in effect differs from `a` to `b` (a take or a restore changes
/// what is in force without the declared content changing): the paths whose content diff a
/// person is shown, with the content in effect on each side and the original's hash for a
/// held one.
pub fn content_changes(
    a: &Generation,
    b: &Generation,
) -> Vec<(String, Option<ContentIn>, Option<ContentIn>)> {
    let paths: BTreeSet<_> = a.files.keys().chain(b.files.keys()).collect();
    let side = |f: Option<&FileEntry>| {
        f.map(|f| ContentIn {
            blob: in_effect(f),
            mode: f.mode,
            held: matches!(f.state, FileState::Held { .. }),
            secret: f
                .secret
                .as_ref()
                .filter(|_| !matches!(f.state, FileState::Held { .. }))
                .map(|s| s.describe()),
        })
    };
    paths
        .into_iter()
        .filter_map(|p| {
            let (x, y) = (side(a.files.get(p)), side(b.files.get(p)));
            let changed =
                x.as_ref().map(|c| (c.blob, &c.secret)) != y.as_ref().map(|c| (c.blob, &c.secret));
            changed.then(|| (p.to_string(), x.clone(), y.clone()))
        })
        .collect()
}

/// The content a file holds on the machine in a generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentIn {
    /// For a file made from secrets (not held), their files and recipients: its content is
    /// never shown.
    pub secret: Option<String>,
    /// Its content.
    pub blob: crate::BlobHash,
    /// The declared mode (a held original's own is in the node record).
    pub mode: FileMode,
    /// Whether it is a held original.
    pub held: bool,
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
fn units(a: &Generation, b: &Generation) -> Vec<UnitChange> {
    let mut out: Vec<UnitChange> = Vec::new();
    let names: BTreeSet<_> = a.units.keys().chain(b.units.keys()).collect();
    for n in names {
        let what = match (a.units.get(n), b.units.get(n)) {
            (None, Some(u)) => Some(format!(
                "added ({}{}{}{})",
                u.state.word(),
                if u.enabled { ", enabled" } else { "" },
                if u.started && u.state == UnitState::Managed {
                    ", started"
                } else {
                    ""
                },
                if u.instances.is_empty() {
                    String::new()
                } else {
                    format!("; instances {}", u.instances.join(", "))
                }
            )),
            (Some(_), None) => Some("removed: stopped and disabled".to_owned()),
            (Some(x), Some(y)) if x.state != y.state => {
                Some(format!("{} -> {}", x.state.word(), y.state.word()))
            }
            (Some(x), Some(y)) if x.body != y.body && y.state == UnitState::Managed => {
                Some(format!("its unit file changes: {}", on_change_word(n, y)))
            }
            (Some(x), Some(y)) if x.instances != y.instances => Some(format!(
                "instances {} (was {})",
                listed(&y.instances),
                listed(&x.instances)
            )),
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
            out.push(UnitChange {
                unit: n.to_string(),
                what: w,
            });
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
            out.push(UnitChange {
                unit: t.unit.to_string(),
                what: format!("{verb} if it runs: {said}"),
            });
        }
    }
    out
}

/// What a change of a unit's own file does to it, by its kind (the service plan's rules).
fn on_change_word(name: &crate::model::UnitName, u: &crate::model::UnitEntry) -> &'static str {
    use crate::model::OnChange;
    match (name.kind(), u.on_change) {
        (_, OnChange::Leave) => "left running",
        ("slice", _) => "read by systemd, nothing in it restarted",
        ("target", _) => "read by systemd, not restarted",
        ("socket", _) => "its running service stopped, the socket restarted",
        ("mount", _) => "remounted (options alone) or mounted again, if mounted",
        (_, OnChange::Reload) => "reloaded if it runs",
        (_, OnChange::Restart) if name.is_template() => "its running instances restarted",
        (_, OnChange::Restart) => "restarted if it runs",
    }
}

fn listed(list: &[String]) -> String {
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContainerState, ModuleName};

    fn mode(m: &str) -> FileMode {
        FileMode::parse(m).unwrap()
    }

    /// A unified diff of text others may read; a file others may not read, on either side, is
    /// named, never shown; binary content is sized; a control character is escaped.
    #[test]
    fn content_diffs_show_only_what_others_may_read() {
        let d = content_diff(
            "/etc/motd",
            Side::File(b"hello\n", mode("0644")),
            Side::File(b"hello again\n\x1b[2J\n", mode("0644")),
        );
        assert_eq!(
            d.unified.unwrap(),
            "--- a/etc/motd\n+++ b/etc/motd\n@@ -1 +1,2 @@\n-hello\n+hello again\n+\\u{1b}[2J\n"
        );
        let d = content_diff(
            "/etc/app.env",
            Side::File(b"TOKEN=old\n", mode("0600")),
            Side::File(b"TOKEN=new\n", mode("0644")),
        );
        assert_eq!(d.unified, None);
        assert_eq!(
            d.hidden.unwrap(),
            "content not shown: not readable by others (mode 0600)"
        );
        let d = content_diff(
            "/etc/new",
            Side::Absent,
            Side::File(b"secret\n", mode("0640")),
        );
        assert!(d.unified.is_none() && !format!("{d:?}").contains("secret"));
        let d = content_diff(
            "/bin/x",
            Side::File(b"\x00\x01", mode("0755")),
            Side::Absent,
        );
        assert_eq!(d.hidden.unwrap(), "binary content, 2 -> 0 bytes");
        let d = content_diff("/etc/new", Side::Absent, Side::File(b"a\n", mode("0644")));
        assert_eq!(
            d.unified.unwrap(),
            "--- /dev/null\n+++ b/etc/new\n@@ -0,0 +1 @@\n+a\n"
        );
    }

    /// A container's spec, field by field: the image, one environment variable, each option
    /// (a size as compose writes it), the state.
    #[test]
    fn containers_change_field_by_field() {
        let mut a = ContainerEntry::new(
            ModuleName::new("web").unwrap(),
            "web:1",
            ContainerState::Staged,
        );
        a.environment = [("A".into(), "1".into()), ("B".into(), "2".into())].into();
        let mut b = a.clone();
        b.image = "web:2".into();
        b.environment.remove("B");
        b.environment.insert("A".into(), "3".into());
        b.options.mem_limit = Some(64 << 20);
        b.options.cap_drop = vec!["CAP_NET_RAW".into()];
        b.state = ContainerState::Managed;
        let fields: Vec<(String, Option<String>, Option<String>)> = container_fields(&a, &b)
            .into_iter()
            .map(|f| (f.field, f.before, f.after))
            .collect();
        assert_eq!(
            fields,
            [
                ("image".into(), Some("web:1".into()), Some("web:2".into())),
                ("environment.A".into(), Some("1".into()), Some("3".into())),
                ("environment.B".into(), Some("2".into()), None),
                ("cap_drop".into(), None, Some(r#"["CAP_NET_RAW"]"#.into())),
                ("mem_limit".into(), None, Some("64m".into())),
                (
                    "state".into(),
                    Some(r#"{"kind":"staged"}"#.into()),
                    Some(r#"{"kind":"managed"}"#.into())
                ),
            ]
        );
    }
}
