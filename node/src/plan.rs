//! The plan: a pure function of the target generation, the host store, the node record and what
//! was observed at each path. It says, per path, what a switch will do — and refuses before
//! anything is done when the machine is not in a state the switch may touch.
//!
//! Invariants:
//! - a held file (found, its module not taken) is never written: it is held, or — when the mesh's
//!   own content stands in its place after a take — restored to the original;
//! - before content the mesh did not write is replaced or removed, a [`Action::Keep`] records it;
//! - a found file the generation does not hold is never overwritten on an adopted node.

use std::collections::BTreeMap;

use std::fmt;

use mesh_lib::model::{FileMode, FileState, Mode};
use mesh_lib::{BlobHash, Generation, NodeRecord, TargetPath};
use serde::Serialize;

use crate::host::{HostStore, Why};
use crate::root::{FileFacts, Observed};
use crate::users::Ids;

/// Why a file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// Nothing was there.
    Create,
    /// The mesh's own content is replaced.
    Update,
    /// A found file is replaced by the declared one (its module is taken).
    Take,
    /// A found original comes back in place of the mesh's content (rollback across a take).
    Restore,
}

/// One step of a switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum Action {
    /// Record the content now at `path` in the store before anything changes.
    Keep {
        /// The path.
        path: TargetPath,
        /// Its content hash.
        hash: BlobHash,
        /// Why it is recorded.
        why: Why,
    },
    /// Write `blob` at `path`.
    Write {
        /// The path.
        path: TargetPath,
        /// The content.
        blob: BlobHash,
        /// Permission bits.
        mode: FileMode,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
        /// Why.
        reason: Reason,
    },
    /// Remove the mesh's file at `path`.
    Remove {
        /// The path.
        path: TargetPath,
    },
    /// A found file stays as it is.
    Hold {
        /// The path.
        path: TargetPath,
    },
    /// The file already is as declared; the host store records it as the mesh's.
    Claim {
        /// The path.
        path: TargetPath,
    },
}

impl Action {
    /// The path the step concerns.
    pub fn path(&self) -> &TargetPath {
        match self {
            Action::Keep { path, .. }
            | Action::Write { path, .. }
            | Action::Remove { path }
            | Action::Hold { path }
            | Action::Claim { path } => path,
        }
    }

    /// Whether the step changes the machine.
    pub fn changes_machine(&self) -> bool {
        matches!(self, Action::Write { .. } | Action::Remove { .. })
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Keep { path, hash, why } => write!(
                f,
                "record   {path}  ({} content {})",
                match why {
                    Why::Found => "found",
                    Why::Drift => "drifted",
                },
                hash.short()
            ),
            Action::Write {
                path,
                blob,
                mode,
                uid,
                gid,
                reason,
            } => write!(
                f,
                "{:<8} {path}  {} {mode} {uid}:{gid}",
                match reason {
                    Reason::Create => "create",
                    Reason::Update => "update",
                    Reason::Take => "take",
                    Reason::Restore => "restore",
                },
                blob.short()
            ),
            Action::Remove { path } => write!(f, "remove   {path}"),
            Action::Hold { path } => write!(f, "hold     {path}  (found, module not taken)"),
            Action::Claim { path } => write!(f, "claim    {path}  (already as declared)"),
        }
    }
}

/// A plan that cannot be made: the switch is refused before it changes anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A found file the generation does not hold would be overwritten.
    #[error("{path} was found on this adopted node and the generation does not hold it: switching would overwrite it (adopt it with `mesh switch NODE.ncl`, which records and holds it, or take its module)")]
    FoundNotHeld {
        /// The path.
        path: TargetPath,
    },
    /// A symlink at or above a declared path.
    #[error("{path}: a symlink is in the way (at the path or in one of its folders); the mesh never writes through a symlink")]
    Symlink {
        /// The path.
        path: TargetPath,
    },
    /// A folder, socket or device where a file is declared.
    #[error("{path}: {what} is where a file is declared")]
    InTheWay {
        /// The path.
        path: TargetPath,
        /// What is there.
        what: &'static str,
    },
    /// An owner or group the root does not know.
    #[error("{path}: {kind} `{name}` is not in the /etc/passwd and /etc/group of the root the files are written under")]
    UnknownId {
        /// The path.
        path: TargetPath,
        /// `owner` or `group`.
        kind: &'static str,
        /// The name.
        name: String,
    },
}

/// What a plan is made from.
pub struct PlanInput<'a> {
    /// The generation to switch to.
    pub target: &'a Generation,
    /// What the mesh wrote and kept.
    pub host: &'a HostStore,
    /// The node record (the found originals' metadata).
    pub record: &'a NodeRecord,
    /// What is at every path of the target and of the host store.
    pub observed: &'a BTreeMap<TargetPath, Observed>,
    /// Owner and group names.
    pub ids: &'a Ids,
}

/// The plan of a switch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The steps, in order: every keep first, then per path.
    pub actions: Vec<Action>,
}

impl Plan {
    /// Whether applying it changes the machine.
    pub fn changes_machine(&self) -> bool {
        self.actions.iter().any(Action::changes_machine)
    }
}

/// The paths whose state a plan needs observed, sorted, each once: the target's, and every one
/// the host store says the mesh wrote (the only ones it may remove). Both are sorted maps, so
/// they are merged, not collected into a set.
pub fn paths_to_observe<'a>(target: &'a Generation, host: &'a HostStore) -> Vec<&'a TargetPath> {
    merge(target.files.keys().collect(), host.written.keys())
}

fn merge<'a>(
    a: Vec<&'a TargetPath>,
    b: impl Iterator<Item = &'a TargetPath>,
) -> Vec<&'a TargetPath> {
    let mut out = Vec::with_capacity(a.len());
    let mut a = a.into_iter().peekable();
    let mut b = b.peekable();
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x < y => a.next(),
            (Some(x), Some(y)) if x > y => b.next(),
            (Some(_), Some(_)) => {
                b.next();
                a.next()
            }
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

fn ids_for(
    ids: &Ids,
    path: &TargetPath,
    owner: &str,
    group: &str,
) -> Result<(u32, u32), PlanError> {
    let uid = ids.uid(owner).ok_or_else(|| PlanError::UnknownId {
        path: path.clone(),
        kind: "owner",
        name: owner.into(),
    })?;
    let gid = ids.gid(group).ok_or_else(|| PlanError::UnknownId {
        path: path.clone(),
        kind: "group",
        name: group.into(),
    })?;
    Ok((uid, gid))
}

/// Makes the plan.
pub fn plan(input: &PlanInput<'_>) -> Result<Plan, PlanError> {
    let mut keeps = Vec::new();
    let mut steps = Vec::new();
    let absent = Observed::Absent;
    for (path, want) in &input.target.files {
        let observed = input.observed.get(path).unwrap_or(&absent);
        let facts = match observed {
            Observed::Absent => None,
            Observed::File(f) => Some(f),
            Observed::Symlink => return Err(PlanError::Symlink { path: path.clone() }),
            Observed::Folder => {
                return Err(PlanError::InTheWay {
                    path: path.clone(),
                    what: "a folder",
                })
            }
            Observed::Special => {
                return Err(PlanError::InTheWay {
                    path: path.clone(),
                    what: "a special file",
                })
            }
        };
        let written = input.host.written.get(path);
        let ours = |f: &FileFacts| written.is_some_and(|w| w.hash == f.hash);
        match want.state {
            FileState::Held { original } => {
                let restore = match facts {
                    Some(f) if f.hash == original => false,
                    Some(f) if ours(f) => true,
                    Some(_) => false, // the predecessor changed its own file: still its
                    None => true,
                };
                if restore {
                    let found = input.record.found.files.get(path);
                    let (mode, uid, gid) = match found {
                        Some(fm) => {
                            // The original's own ids where the record has them (names may
                            // not resolve the same way any more).
                            let (uid, gid) = match (fm.uid, fm.gid) {
                                (Some(uid), Some(gid)) => (uid, gid),
                                _ => ids_for(input.ids, path, &fm.owner, &fm.group)?,
                            };
                            (fm.mode, uid, gid)
                        }
                        None => {
                            let (uid, gid) = ids_for(input.ids, path, &want.owner, &want.group)?;
                            (want.mode, uid, gid)
                        }
                    };
                    steps.push(Action::Write {
                        path: path.clone(),
                        blob: original,
                        mode,
                        uid,
                        gid,
                        reason: Reason::Restore,
                    });
                } else {
                    steps.push(Action::Hold { path: path.clone() });
                }
            }
            FileState::Managed | FileState::Staged => {
                let (uid, gid) = ids_for(input.ids, path, &want.owner, &want.group)?;
                let write = |reason| Action::Write {
                    path: path.clone(),
                    blob: want.blob,
                    mode: want.mode,
                    uid,
                    gid,
                    reason,
                };
                match facts {
                    None => steps.push(write(Reason::Create)),
                    Some(f) => {
                        let as_declared = f.hash == want.blob
                            && f.mode == want.mode
                            && f.uid == uid
                            && f.gid == gid;
                        let found_here = written.is_none();
                        if found_here {
                            let recorded = input.record.found.files.get(path);
                            if recorded.is_none()
                                && input.record.mode == Mode::Adopted
                                && !as_declared
                            {
                                return Err(PlanError::FoundNotHeld { path: path.clone() });
                            }
                            if recorded.is_none_or(|r| r.hash != f.hash) && f.hash != want.blob {
                                keeps.push(Action::Keep {
                                    path: path.clone(),
                                    hash: f.hash,
                                    why: Why::Found,
                                });
                            }
                            steps.push(if as_declared {
                                Action::Claim { path: path.clone() }
                            } else {
                                write(Reason::Take)
                            });
                        } else if as_declared {
                            if written.is_some_and(|w| {
                                w.hash != f.hash
                                    || w.mode != f.mode
                                    || w.uid != f.uid
                                    || w.gid != f.gid
                            }) {
                                steps.push(Action::Claim { path: path.clone() });
                            }
                        } else {
                            if !ours(f) {
                                keeps.push(Action::Keep {
                                    path: path.clone(),
                                    hash: f.hash,
                                    why: Why::Drift,
                                });
                            }
                            steps.push(write(Reason::Update));
                        }
                    }
                }
            }
        }
    }
    // Paths the target no longer declares: the mesh's own files go; anything else stays.
    let gone = input
        .host
        .written
        .keys()
        .filter(|p| !input.target.files.contains_key(*p));
    for path in gone {
        let Some(written) = input.host.written.get(path) else {
            continue;
        };
        match input.observed.get(path).unwrap_or(&absent) {
            Observed::File(f) => {
                if f.hash != written.hash {
                    keeps.push(Action::Keep {
                        path: path.clone(),
                        hash: f.hash,
                        why: Why::Drift,
                    });
                }
                steps.push(Action::Remove { path: path.clone() });
            }
            Observed::Absent => steps.push(Action::Remove { path: path.clone() }),
            // Not a file any more: not the mesh's to remove.
            _ => {}
        }
    }
    keeps.extend(steps);
    Ok(Plan { actions: keeps })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use mesh_lib::model::{FileEntry, FileMode, FileState, Mode, ModuleName, NodeName};
    use mesh_lib::record::FoundFile;
    use mesh_lib::{BlobHash, NodeRecord, TargetPath};

    use super::*;
    use crate::host::{HostStore, Written};
    use crate::root::{FileFacts, Observed};

    fn path() -> TargetPath {
        TargetPath::new("/etc/x.conf").unwrap()
    }

    fn generation(state: FileState, content: &[u8]) -> Generation {
        let settings = mesh_lib::model::Settings {
            ports: BTreeMap::new(),
            private_network: mesh_lib::model::PrivateNetwork {
                range: "10.0.0.0/24".parse().unwrap(),
                address: "10.0.0.1".parse().unwrap(),
                hub: false,
            },
        };
        let entry = FileEntry {
            module: ModuleName::new("m").unwrap(),
            blob: BlobHash::of(content),
            size: content.len() as u64,
            mode: FileMode::parse("0644").unwrap(),
            owner: "0".into(),
            group: "0".into(),
            special_mode: false,
            secret: None,
            state,
            units: Vec::new(),
        };
        Generation {
            format: 1,
            node: NodeName::new("n").unwrap(),
            mode: Mode::Adopted,
            firewall: mesh_lib::model::FirewallRules {
                guard: mesh_lib::firewall::guard_ruleset(&settings),
                base: None,
            },
            settings,
            modules: BTreeMap::new(),
            files: BTreeMap::from([(path(), entry)]),
            containers: BTreeMap::new(),
            openings: Vec::new(),
            units: BTreeMap::new(),
        }
    }

    /// A host store saying the mesh wrote `content` at [`path`], mode 0644, root's.
    fn wrote(content: &[u8]) -> HostStore {
        let mut host = HostStore::default();
        host.written.insert(
            path(),
            Written {
                hash: BlobHash::of(content),
                keyed: false,
                mode: FileMode::parse("0644").unwrap(),
                uid: 0,
                gid: 0,
                stamp: None,
                units: Vec::new(),
            },
        );
        host
    }

    fn file(content: &[u8]) -> Observed {
        Observed::File(FileFacts {
            hash: BlobHash::of(content),
            mode: FileMode::parse("0640").unwrap(),
            uid: 7,
            gid: 7,
            size: 1,
            stamp: Default::default(),
        })
    }

    fn adopted(found: Option<&[u8]>) -> NodeRecord {
        let mut r = NodeRecord::managed(NodeName::new("n").unwrap());
        r.mode = Mode::Adopted;
        if let Some(c) = found {
            r.found.files.insert(
                path(),
                FoundFile {
                    hash: BlobHash::of(c),
                    mode: FileMode::parse("0640").unwrap(),
                    owner: "7".into(),
                    group: "7".into(),
                    uid: None,
                    gid: None,
                },
            );
        }
        r
    }

    fn plan_of(
        target: &Generation,
        host: &HostStore,
        record: &NodeRecord,
        observed: Observed,
    ) -> Result<Plan, PlanError> {
        plan(&PlanInput {
            target,
            host,
            record,
            observed: &BTreeMap::from([(path(), observed)]),
            ids: &Ids::default(),
        })
    }

    /// A held file whose original is in place is held: no write, no record.
    #[test]
    fn held_original_is_held() {
        let g = generation(
            FileState::Held {
                original: BlobHash::of(b"orig"),
            },
            b"new",
        );
        let p = plan_of(
            &g,
            &HostStore::default(),
            &adopted(Some(b"orig")),
            file(b"orig"),
        )
        .unwrap();
        assert_eq!(p.actions, vec![Action::Hold { path: path() }]);
    }

    /// Rolling back across a take: the mesh's content is replaced by the original, with the
    /// original's mode and owner.
    #[test]
    fn held_with_mesh_content_is_restored() {
        let g = generation(
            FileState::Held {
                original: BlobHash::of(b"orig"),
            },
            b"new",
        );
        let host = wrote(b"new");
        let p = plan_of(&g, &host, &adopted(Some(b"orig")), file(b"new")).unwrap();
        assert_eq!(
            p.actions,
            vec![Action::Write {
                path: path(),
                blob: BlobHash::of(b"orig"),
                mode: FileMode::parse("0640").unwrap(),
                uid: 7,
                gid: 7,
                reason: Reason::Restore
            }]
        );
    }

    /// A restore writes back the original's own ids where the record has them, whatever its
    /// owner's name resolves to now (here: to nothing).
    #[test]
    fn restore_uses_the_recorded_ids() {
        let g = generation(
            FileState::Held {
                original: BlobHash::of(b"orig"),
            },
            b"new",
        );
        let host = wrote(b"new");
        let mut record = adopted(Some(b"orig"));
        let found = record.found.files.get_mut(&path()).unwrap();
        (found.owner, found.group) = ("gone".into(), "gone".into());
        (found.uid, found.gid) = (Some(4242), Some(4243));
        let p = plan_of(&g, &host, &record, file(b"new")).unwrap();
        assert!(
            matches!(
                p.actions[..],
                [Action::Write {
                    uid: 4242,
                    gid: 4243,
                    reason: Reason::Restore,
                    ..
                }]
            ),
            "{:?}",
            p.actions
        );
    }

    /// A take replaces the recorded original without recording it again.
    #[test]
    fn take_replaces_a_recorded_original() {
        let g = generation(FileState::Managed, b"new");
        let p = plan_of(
            &g,
            &HostStore::default(),
            &adopted(Some(b"orig")),
            file(b"orig"),
        )
        .unwrap();
        assert!(
            matches!(
                p.actions.as_slice(),
                [Action::Write {
                    reason: Reason::Take,
                    ..
                }]
            ),
            "{:?}",
            p.actions
        );
    }

    /// On an adopted node, a found file the generation does not hold is never overwritten.
    #[test]
    fn found_not_held_is_refused() {
        let g = generation(FileState::Staged, b"new");
        let err = plan_of(&g, &HostStore::default(), &adopted(None), file(b"theirs")).unwrap_err();
        assert_eq!(err, PlanError::FoundNotHeld { path: path() });
    }

    /// On a managed node, a found file is recorded before it is replaced.
    #[test]
    fn managed_node_keeps_found_content_first() {
        let g = generation(FileState::Managed, b"new");
        let record = NodeRecord::managed(NodeName::new("n").unwrap());
        let p = plan_of(&g, &HostStore::default(), &record, file(b"theirs")).unwrap();
        assert!(
            matches!(
                p.actions.as_slice(),
                [
                    Action::Keep {
                        why: Why::Found,
                        ..
                    },
                    Action::Write { .. }
                ]
            ),
            "{:?}",
            p.actions
        );
    }

    /// A drifted file of the mesh's is recorded before it is updated.
    #[test]
    fn drift_is_kept_before_update() {
        let g = generation(FileState::Managed, b"new");
        let host = wrote(b"old");
        let p = plan_of(&g, &host, &adopted(None), file(b"edited")).unwrap();
        assert!(
            matches!(
                p.actions.as_slice(),
                [
                    Action::Keep {
                        why: Why::Drift,
                        ..
                    },
                    Action::Write {
                        reason: Reason::Update,
                        ..
                    }
                ]
            ),
            "{:?}",
            p.actions
        );
    }

    /// A symlink or a folder in the way refuses the plan.
    #[test]
    fn symlink_and_folder_refuse() {
        let g = generation(FileState::Managed, b"new");
        let r = adopted(None);
        assert_eq!(
            plan_of(&g, &HostStore::default(), &r, Observed::Symlink).unwrap_err(),
            PlanError::Symlink { path: path() }
        );
        assert!(matches!(
            plan_of(&g, &HostStore::default(), &r, Observed::Folder),
            Err(PlanError::InTheWay { .. })
        ));
    }
}
