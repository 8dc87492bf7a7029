//! The container steps of a switch: a pure function of the generation's containers, what is on
//! the engine, the node record's found containers, which found containers already are the
//! declared ones, and how the containers stood before a switch that was cut short.
//!
//! Whatever the engine holds — a generation's containers, or any mix a switch cut short left —
//! the steps bring each declared container to what the generation says: a held one is the
//! found container under its name (running again if the cut-short switch had stopped it), a
//! taken one is the mesh's, running, and its found container kept as `NAME.found`, stopped —
//! never the service twice.

use std::collections::BTreeMap;

use mesh_lib::model::{ContainerEntry, ContainerName, ContainerState};

use crate::engine::Present;
use crate::{spec_digest, FOUND_SUFFIX, LABEL_SPEC};

/// One step for one declared container, or one of the mesh's no longer declared.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum Step {
    /// A found container stays as it is, running or not.
    Hold {
        /// Its name.
        name: String,
    },
    /// A found container that a switch cut short had stopped runs again: it is held, as it
    /// was before that switch.
    Resume {
        /// Its name.
        name: String,
    },
    /// The found container kept as `NAME.found` is stopped: it runs beside the mesh's (a
    /// rollback across the take was cut short after starting it).
    StopFound {
        /// The declared container's name.
        name: String,
    },
    /// The found container already is the declared one (the same spec once created, nothing
    /// a declaration cannot say): the module's as it is, not recreated; started if it does not
    /// run.
    Keep {
        /// Its name.
        name: String,
        /// Whether it is started (it did not run).
        start: bool,
    },
    /// Create it, not started.
    Stage {
        /// Its name.
        name: String,
    },
    /// The take: stop the found container and keep it as `NAME.found`.
    Retire {
        /// Its name.
        name: String,
    },
    /// Create (after stopping and removing the mesh's container of another spec) and start.
    Run {
        /// Its name.
        name: String,
        /// Whether the mesh's container of an older spec goes first.
        replace: bool,
        /// The container whose network namespace it joins, when it is made anew because that
        /// one is another container now (see [`rejoin`]), not because its own spec changed.
        #[serde(skip_serializing_if = "Option::is_none")]
        joins: Option<String>,
    },
    /// Start the mesh's container of the same spec that does not run.
    Start {
        /// Its name.
        name: String,
    },
    /// Rollback across a take: the mesh's container is stopped and goes, the found one comes
    /// back under its name, started if it ran when it was found.
    Restore {
        /// Its name.
        name: String,
        /// Whether it ran when found.
        start: bool,
    },
    /// Stop and remove one of the mesh's containers no longer declared.
    Remove {
        /// Its name.
        name: String,
    },
    /// Stop the mesh's container that runs while the generation says staged (it ran after a
    /// take a rollback went back across): a staged container runs in no generation.
    Stop {
        /// Its name.
        name: String,
    },
    /// Restart the mesh's container: a file it mounts changed.
    Restart {
        /// Its name.
        name: String,
        /// Why (`mounts /etc/wiki/app.env`).
        because: Vec<String>,
    },
}

impl Step {
    /// The container it is about.
    pub fn name(&self) -> &str {
        match self {
            Step::Hold { name }
            | Step::Resume { name }
            | Step::StopFound { name }
            | Step::Keep { name, .. }
            | Step::Stage { name }
            | Step::Retire { name }
            | Step::Run { name, .. }
            | Step::Start { name }
            | Step::Restore { name, .. }
            | Step::Remove { name }
            | Step::Stop { name }
            | Step::Restart { name, .. } => name,
        }
    }
}

/// How the engine had a container before a switch (under its name, or kept as `NAME.found`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Was {
    /// Its id.
    pub id: String,
    /// Whether it ran.
    pub running: bool,
}

/// What the steps are planned from.
pub struct Input<'a> {
    /// The generation's containers.
    pub containers: &'a BTreeMap<ContainerName, ContainerEntry>,
    /// What is on the engine, by name.
    pub present: &'a BTreeMap<String, Present>,
    /// The node record's found containers.
    pub found: &'a BTreeMap<ContainerName, mesh_lib::record::FoundContainer>,
    /// Whether the node is adopted (a found container the generation does not hold is refused).
    pub adopted: bool,
    /// This node's owner label: only its containers are removed when no longer declared.
    pub owner: &'a str,
    /// The found containers that already are the declared ones (kept in place by a take).
    pub equal: &'a std::collections::BTreeSet<String>,
    /// How the containers a switch cut short touched stood before it, by engine name: a found
    /// container it stopped runs again when held. Empty when no switch was cut short.
    pub was: &'a BTreeMap<String, Was>,
}

/// The container steps from the target generation to what is on the engine. A found container
/// the generation does not hold is refused on an adopted node, by name.
pub fn plan(input: &Input<'_>) -> Result<Vec<Step>, String> {
    let Input {
        containers,
        present,
        found,
        adopted,
        owner,
        equal,
        was,
    } = *input;
    // The container under `name` before the switch cut short, if it is `p` (same id).
    let was_this = |name: &str, p: &Present| was.get(name).filter(|w| w.id == p.id);
    let mut steps = Vec::new();
    for (name, entry) in containers {
        let name = name.to_string();
        let here = present.get(&name);
        let found_kept = present.get(&format!("{name}{FOUND_SUFFIX}"));
        let same_spec = here.is_some_and(|p| p.labels.get(LABEL_SPEC) == Some(&spec_digest(entry)));
        match entry.state {
            ContainerState::Held { .. } => match (here, found_kept) {
                (Some(p), _) if !p.is_ours() => {
                    if !p.running && was_this(&name, p).is_some_and(|w| w.running) {
                        steps.push(Step::Resume { name });
                    } else {
                        steps.push(Step::Hold { name });
                    }
                }
                (_, Some(kept)) => {
                    // Running as it ran before the take a switch cut short, or else as it ran
                    // when it was found.
                    let start = match was_this(&name, kept) {
                        Some(w) => w.running,
                        None => found
                            .iter()
                            .find(|(n, _)| n.as_str() == name)
                            .is_none_or(|(_, f)| f.running),
                    };
                    steps.push(Step::Restore { name, start })
                }
                _ => steps.push(Step::Hold { name }),
            },
            ContainerState::Staged => match here {
                Some(p) if !p.is_ours() => {
                    if adopted {
                        return Err(name);
                    }
                    steps.push(Step::Retire { name: name.clone() });
                    steps.push(Step::Stage { name });
                }
                Some(p) if same_spec && p.running => steps.push(Step::Stop { name }),
                Some(_) if same_spec => {}
                Some(_) => {
                    steps.push(Step::Remove { name: name.clone() });
                    steps.push(Step::Stage { name });
                }
                None => steps.push(Step::Stage { name }),
            },
            ContainerState::Managed => {
                if found_kept.is_some_and(|k| k.running) {
                    steps.push(Step::StopFound { name: name.clone() });
                }
                match here {
                    // The found container already is the declared one (the same spec once
                    // created, nothing a declaration cannot say): it is the module's as it is,
                    // not recreated.
                    Some(p) if !p.is_ours() && equal.contains(&name) => steps.push(Step::Keep {
                        name,
                        start: !p.running,
                    }),
                    Some(p) if !p.is_ours() => {
                        steps.push(Step::Retire { name: name.clone() });
                        steps.push(Step::Run {
                            name,
                            replace: false,
                            joins: None,
                        });
                    }
                    Some(p) if same_spec && p.running => {}
                    Some(_) if same_spec => steps.push(Step::Start { name }),
                    Some(_) => steps.push(Step::Run {
                        name,
                        replace: true,
                        joins: None,
                    }),
                    None => steps.push(Step::Run {
                        name,
                        replace: false,
                        joins: None,
                    }),
                }
            }
        }
    }
    rejoin(containers, present, &mut steps);
    for (name, p) in present {
        let declared = containers.keys().any(|n| n.as_str() == name);
        if p.is_owned_by(owner) && !declared && !name.ends_with(FOUND_SUFFIX) {
            steps.push(Step::Remove { name: name.clone() });
        }
    }
    Ok(steps)
}

/// The engine keeps a container's `network_mode = "container:X"` as X's id when it creates it:
/// once X is another container (made anew, or a found one back under its name), a container
/// that joined it would be left in a namespace no container holds. Each such declared
/// container the generation manages that no step makes anew is made anew (after X, see
/// [`crate::apply`]; a found one kept as the module's is taken: kept aside as `NAME.found`),
/// joining the X there is now, or becomes in this switch — also when a switch cut short had
/// already made X anew. (A held found container that joined X is the predecessor's as it is.)
fn rejoin(
    containers: &BTreeMap<ContainerName, ContainerEntry>,
    present: &BTreeMap<String, Present>,
    steps: &mut Vec<Step>,
) {
    let made_anew = |steps: &[Step], name: &str| {
        steps
            .iter()
            .any(|s| s.name() == name && matches!(s, Step::Run { .. } | Step::Restore { .. }))
    };
    // A chain (c joins b joins a) settles in as many rounds as it is long.
    for _ in 0..containers.len() {
        let mut changed = false;
        for (name, entry) in containers {
            let name = name.as_str();
            let Some(joined) = entry
                .options
                .network_mode
                .as_deref()
                .and_then(|m| m.strip_prefix("container:"))
            else {
                continue;
            };
            let Some(p) = present.get(name) else {
                continue;
            };
            if entry.state != ContainerState::Managed || made_anew(steps, name) {
                continue;
            }
            let recorded = p
                .network
                .as_deref()
                .and_then(|m| m.strip_prefix("container:"));
            let now = present.get(joined).map(|j| j.id.as_str());
            let moved = match (recorded, now) {
                (Some(id), Some(now)) => !now.starts_with(id) && id != joined,
                _ => false,
            };
            if moved || made_anew(steps, joined) {
                steps.retain(|s| {
                    !(s.name() == name && matches!(s, Step::Start { .. } | Step::Keep { .. }))
                });
                // A found container kept as the module's is taken as any other: kept aside
                // as `NAME.found`, the declared one made.
                if !p.is_ours() {
                    steps.push(Step::Retire {
                        name: name.to_owned(),
                    });
                }
                steps.push(Step::Run {
                    name: name.to_owned(),
                    replace: p.is_ours(),
                    joins: Some(joined.to_owned()),
                });
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use mesh_lib::model::{ContainerEntry, ContainerName, ContainerState, ModuleName};
    use mesh_lib::record::FoundContainer;
    use mesh_lib::BlobHash;

    use super::*;
    use crate::apply::{calls_of, Call};
    use crate::{LABEL_MODULE, LABEL_OWNER};

    fn entry(state: ContainerState) -> ContainerEntry {
        ContainerEntry::new(ModuleName::new("m").unwrap(), "img", state)
    }

    fn present(ours: Option<&ContainerEntry>, running: bool) -> Present {
        let mut labels = BTreeMap::new();
        if let Some(e) = ours {
            labels.insert(LABEL_MODULE.to_string(), "m".to_string());
            labels.insert(LABEL_SPEC.to_string(), spec_digest(e));
            labels.insert(LABEL_OWNER.to_string(), "me".to_string());
        }
        Present {
            id: "id".into(),
            labels,
            running,
            network: None,
        }
    }

    fn one(state: ContainerState) -> BTreeMap<ContainerName, ContainerEntry> {
        BTreeMap::from([(ContainerName::new("c").unwrap(), entry(state))])
    }

    /// The steps for one container `c` in `state`, what the engine has being `present`, with no
    /// found container recorded and none known to be the declared one.
    fn steps(
        state: ContainerState,
        present: &BTreeMap<String, Present>,
        adopted: bool,
    ) -> Result<Vec<Step>, String> {
        planned(
            &one(state),
            present,
            &BTreeMap::new(),
            adopted,
            "me",
            &BTreeSet::new(),
        )
    }

    /// The steps, no switch having been cut short before.
    fn planned(
        containers: &BTreeMap<ContainerName, ContainerEntry>,
        present: &BTreeMap<String, Present>,
        found: &BTreeMap<ContainerName, FoundContainer>,
        adopted: bool,
        owner: &str,
        equal: &BTreeSet<String>,
    ) -> Result<Vec<Step>, String> {
        plan(&Input {
            containers,
            present,
            found,
            adopted,
            owner,
            equal,
            was: &BTreeMap::new(),
        })
    }

    fn held() -> ContainerState {
        ContainerState::Held {
            original: BlobHash::of(b"the found spec"),
        }
    }

    /// A container of the mesh's that joins another's network is made anew when that one is
    /// (its spec changed), and when a switch cut short had already made it anew (the id it
    /// joined is gone); left alone while the one it joined is the same container.
    #[test]
    fn a_container_in_anothers_network_is_made_anew_with_it() {
        let managed = entry(ContainerState::Managed);
        let mut joins = entry(ContainerState::Managed);
        joins.options.network_mode = Some("container:a".into());
        let containers = BTreeMap::from([
            (ContainerName::new("a").unwrap(), managed.clone()),
            (ContainerName::new("b").unwrap(), joins.clone()),
        ]);
        let at = |id: &str, of: &ContainerEntry, network: Option<&str>| Present {
            id: id.into(),
            network: network.map(str::to_owned),
            ..present(Some(of), true)
        };
        let plan_of = |a: Present, b: Present| {
            let present = BTreeMap::from([("a".to_string(), a), ("b".to_string(), b)]);
            planned(
                &containers,
                &present,
                &BTreeMap::new(),
                false,
                "me",
                &BTreeSet::new(),
            )
            .unwrap()
        };
        let remade = |name: &str| Step::Run {
            name: name.into(),
            replace: true,
            joins: (name == "b").then(|| "a".to_owned()),
        };
        let joined = Some("container:aaaa1111");
        // Nothing changed: nothing to do.
        assert_eq!(
            plan_of(at("aaaa1111", &managed, None), at("bbbb", &joins, joined)),
            []
        );
        // `a` of another spec: made anew, and `b` after it.
        let mut older = managed.clone();
        older.image = "img:older".into();
        assert_eq!(
            plan_of(at("aaaa1111", &older, None), at("bbbb", &joins, joined)),
            [remade("a"), remade("b")]
        );
        // A switch cut short made `a` anew already: `b` still joins the one gone.
        assert_eq!(
            plan_of(at("cccc2222", &managed, None), at("bbbb", &joins, joined)),
            [remade("b")]
        );
        // Not running either: made anew, not started in the namespace gone.
        let stopped = Present {
            running: false,
            ..at("bbbb", &joins, joined)
        };
        assert_eq!(
            plan_of(at("cccc2222", &managed, None), stopped),
            [remade("b")]
        );
    }

    /// A take keeps a found container that already is the declared one (the spec hash
    /// decides): no step when it runs, a start when it does not; one that differs is retired.
    #[test]
    fn a_found_container_equal_to_the_declared_one_is_kept() {
        let none = BTreeMap::new();
        let equal = BTreeSet::from(["c".to_string()]);
        let running = BTreeMap::from([("c".to_string(), present(None, true))]);
        let managed = one(ContainerState::Managed);
        let keep = |start| {
            vec![Step::Keep {
                name: "c".into(),
                start,
            }]
        };
        let steps = planned(&managed, &running, &none, true, "me", &equal).unwrap();
        assert_eq!(steps, keep(false));
        assert_eq!(calls_of(&steps, &running), vec![]);
        let stopped = BTreeMap::from([("c".to_string(), present(None, false))]);
        let steps = planned(&managed, &stopped, &none, true, "me", &equal).unwrap();
        assert_eq!(steps, keep(true));
        assert_eq!(
            calls_of(&steps, &stopped)[0].acquire,
            [Call::Start("c".into())]
        );
        assert_eq!(
            planned(&managed, &running, &none, true, "me", &BTreeSet::new()).unwrap()[0],
            Step::Retire { name: "c".into() }
        );
    }

    /// Held is held; a found one the generation does not hold is refused on an adopted node; the
    /// take retires the found one; an equal running container of ours is left alone; ours not
    /// declared goes, if this state made it.
    #[test]
    fn steps_from_states() {
        let none = BTreeMap::new();
        let found = BTreeMap::from([("c".to_string(), present(None, true))]);
        assert_eq!(
            steps(held(), &found, true).unwrap(),
            vec![Step::Hold { name: "c".into() }]
        );
        assert_eq!(
            steps(ContainerState::Staged, &found, true).unwrap_err(),
            "c"
        );
        assert_eq!(
            steps(ContainerState::Staged, &BTreeMap::new(), true).unwrap(),
            vec![Step::Stage { name: "c".into() }]
        );
        assert_eq!(
            steps(ContainerState::Managed, &found, true).unwrap(),
            vec![
                Step::Retire { name: "c".into() },
                Step::Run {
                    name: "c".into(),
                    replace: false,
                    joins: None,
                }
            ]
        );
        let managed = entry(ContainerState::Managed);
        let ours = BTreeMap::from([("c".to_string(), present(Some(&managed), true))]);
        assert_eq!(
            steps(ContainerState::Managed, &ours, false).unwrap(),
            vec![]
        );
        let stale = BTreeMap::from([("old".to_string(), present(Some(&managed), true))]);
        assert_eq!(
            planned(
                &BTreeMap::new(),
                &stale,
                &none,
                false,
                "me",
                &BTreeSet::new()
            )
            .unwrap(),
            vec![Step::Remove { name: "old".into() }]
        );
        // Another state's container is not this node's to remove.
        assert_eq!(
            planned(
                &BTreeMap::new(),
                &stale,
                &none,
                false,
                "someone else",
                &BTreeSet::new()
            )
            .unwrap(),
            vec![]
        );
    }

    /// Back across a take, the found container is started again only if it ran when found.
    #[test]
    fn restore_starts_only_what_ran() {
        let managed = entry(ContainerState::Managed);
        let after_take = BTreeMap::from([
            ("c".to_string(), present(Some(&managed), true)),
            (format!("c{FOUND_SUFFIX}"), present(None, false)),
        ]);
        let stopped = BTreeMap::from([(
            ContainerName::new("c").unwrap(),
            FoundContainer {
                spec: BlobHash::of(b"s"),
                running: false,
            },
        )]);
        assert_eq!(
            planned(
                &one(held()),
                &after_take,
                &stopped,
                true,
                "me",
                &BTreeSet::new()
            )
            .unwrap(),
            vec![Step::Restore {
                name: "c".into(),
                start: false
            }]
        );
        assert_eq!(
            planned(
                &one(held()),
                &after_take,
                &BTreeMap::new(),
                true,
                "me",
                &BTreeSet::new()
            )
            .unwrap(),
            vec![Step::Restore {
                name: "c".into(),
                start: true
            }]
        );
    }

    /// A staged container of the mesh's that runs (it ran after a take a rollback went back
    /// across) is stopped: a staged container runs in no generation. One that does not run is
    /// left alone.
    #[test]
    fn a_staged_container_that_runs_is_stopped() {
        let staged = entry(ContainerState::Staged);
        let running = BTreeMap::from([("c".to_string(), present(Some(&staged), true))]);
        assert_eq!(
            steps(ContainerState::Staged, &running, true).unwrap(),
            vec![Step::Stop { name: "c".into() }]
        );
        let created = BTreeMap::from([("c".to_string(), present(Some(&staged), false))]);
        assert_eq!(
            steps(ContainerState::Staged, &created, true).unwrap(),
            vec![]
        );
    }
}
