//! A plan's steps carried out: concurrently across containers, each container's own calls in
//! their order, every container's letting go before any container's taking.

use std::collections::BTreeMap;

use mesh_lib::model::{ContainerEntry, ContainerName};

use crate::create::Context;
use crate::engine::{DockerError, Engine, Present};
use crate::plan::Step;
use crate::progress::Progress;
use crate::{SecretValues, FOUND_SUFFIX};

/// The container steps that failed, each naming its container and the engine's message. When
/// one failed no other container's step was started; those already running were waited for.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct StepsFailed(pub Vec<DockerError>);

/// How many containers are created and started at once, unless `--container-jobs`
/// (`MESH_CONTAINER_JOBS`) says otherwise: few enough not to flood a small machine's engine with
/// creates and starts. Stops, removals and renames away are not bounded by it: they are all
/// asked at once.
pub const DEFAULT_JOBS: usize = 32;

/// One call that changes the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    Stop(String),
    Rename(String, String),
    Create(String),
    Start(String),
    Remove(String),
    Restart(String),
}

/// One container's calls: first those that let go of a name or a port (stops, removals,
/// renames away), then those that take one (creates, starts, a restart, a found container
/// renamed back). Every step's letting go comes before its taking, so each container's calls
/// stay in their order.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Calls {
    pub(crate) name: String,
    pub(crate) release: Vec<Call>,
    pub(crate) acquire: Vec<Call>,
}

/// The calls of `steps`, per container, in the order the containers first appear. `present` is
/// the engine's listing the steps were planned from: a rollback removes the mesh's container
/// under a restored name only if there is one.
pub(crate) fn calls_of(steps: &[Step], present: &BTreeMap<String, Present>) -> Vec<Calls> {
    let mut out: Vec<Calls> = Vec::new();
    for step in steps {
        let name = step.name().to_owned();
        let at = match out.iter().position(|c| c.name == name) {
            Some(at) => at,
            None => {
                out.push(Calls {
                    name: name.clone(),
                    ..Calls::default()
                });
                out.len() - 1
            }
        };
        let c = &mut out[at];
        match step {
            Step::Hold { .. } | Step::Keep { start: false, .. } => {}
            Step::Keep { start: true, .. } | Step::Resume { .. } => {
                c.acquire.push(Call::Start(name))
            }
            Step::StopFound { .. } => c.release.push(Call::Stop(format!("{name}{FOUND_SUFFIX}"))),
            Step::Stage { .. } => c.acquire.push(Call::Create(name)),
            Step::Retire { .. } => {
                c.release.push(Call::Stop(name.clone()));
                c.release
                    .push(Call::Rename(name.clone(), format!("{name}{FOUND_SUFFIX}")));
            }
            Step::Run { replace, .. } => {
                if *replace {
                    c.release.extend(stop_and_remove(&name));
                }
                c.acquire.push(Call::Create(name.clone()));
                c.acquire.push(Call::Start(name));
            }
            Step::Start { .. } => c.acquire.push(Call::Start(name)),
            // The found container is started before it gets its name back: once it has it, it
            // is held, and held is never started (a crash between the two is finished by the
            // next run).
            Step::Restore { start, .. } => {
                if present.get(&name).is_some_and(Present::is_ours) {
                    c.release.extend(stop_and_remove(&name));
                }
                let kept = format!("{name}{FOUND_SUFFIX}");
                if *start {
                    c.acquire.push(Call::Start(kept.clone()));
                }
                c.acquire.push(Call::Rename(kept, name));
            }
            Step::Remove { .. } => c.release.extend(stop_and_remove(&name)),
            Step::Stop { .. } => c.release.push(Call::Stop(name)),
            Step::Restart { .. } => c.acquire.push(Call::Restart(name)),
        }
    }
    out.retain(|c| !c.release.is_empty() || !c.acquire.is_empty());
    out
}

/// The containers a declared container needs before it is created and started: the one whose
/// network, process or IPC namespace it joins (`container:NAME`), those it links to, those
/// whose volumes it mounts. The engine refuses to start it while they do not run.
fn needs(entry: &ContainerEntry) -> Vec<&str> {
    let o = &entry.options;
    needed([&o.network_mode, &o.pid, &o.ipc], &o.links, &o.volumes_from)
}

/// The containers named by namespace modes (`container:X`), links (`X:alias`, or as the engine
/// records them, `/X:/it/alias`) and volumes-from (`X:ro`): a declaration's or what the engine
/// recorded of a container (see [`crate::engine::joined`]).
pub(crate) fn needed<'a>(
    modes: [&'a Option<String>; 3],
    links: impl IntoIterator<Item = &'a String>,
    volumes_from: impl IntoIterator<Item = &'a String>,
) -> Vec<&'a str> {
    let joined = modes
        .into_iter()
        .flatten()
        .filter_map(|mode| mode.strip_prefix("container:"));
    let links = links.into_iter().map(|l| l.trim_start_matches('/'));
    let named = links
        .chain(volumes_from.into_iter().map(String::as_str))
        .filter_map(|v| v.split(':').next());
    joined.chain(named).filter(|n| !n.is_empty()).collect()
}

/// The container a reference the engine recorded names (a name, with or without its
/// `.found`, or an id or a prefix of one, as `docker run --network container:X` takes), by the
/// name its calls go under; `None` when it is not on the engine.
fn named<'p>(reference: &str, present: &'p BTreeMap<String, Present>) -> Option<&'p str> {
    let name = match present.get_key_value(reference) {
        Some((name, _)) => name.as_str(),
        None if reference.len() >= 12 => present
            .iter()
            .find(|(_, p)| p.id.starts_with(reference))
            .map(|(name, _)| name.as_str())?,
        None => return None,
    };
    Some(name.strip_suffix(FOUND_SUFFIX).unwrap_or(name))
}

/// `acquire` in levels: first the containers that need none of the others (`waits_on`: for a
/// declared container see [`needs`]; a found one, what the engine recorded), then those that
/// need only the first, and so on, each level in the order given. A circle (which the engine
/// could not start either) ends in the last level.
fn in_order<'w>(
    acquire: Vec<(&'w str, &'w [Call])>,
    waits_on: &BTreeMap<&str, Vec<String>>,
) -> Vec<Vec<(&'w str, &'w [Call])>> {
    let names: Vec<&str> = acquire.iter().map(|(n, _)| *n).collect();
    let waits_on: BTreeMap<&str, Vec<&str>> = names
        .iter()
        .map(|name| {
            let on = waits_on
                .get(name)
                .into_iter()
                .flatten()
                .map(String::as_str)
                .filter(|d| d != name && names.contains(d))
                .collect();
            (*name, on)
        })
        .collect();
    let mut level: BTreeMap<&str, usize> = names.iter().map(|n| (*n, 0)).collect();
    for _ in 0..names.len() {
        let mut changed = false;
        for name in &names {
            let l = waits_on[name]
                .iter()
                .map(|d| level[d] + 1)
                .max()
                .unwrap_or(0)
                .min(names.len());
            if level[name] != l {
                level.insert(name, l);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let deepest = level.values().copied().max().unwrap_or(0);
    (0..=deepest)
        .map(|l| {
            acquire
                .iter()
                .filter(|(n, _)| level[n] == l)
                .copied()
                .collect::<Vec<_>>()
        })
        .filter(|wave| !wave.is_empty())
        .collect()
}

/// The containers `steps` ask the engine to stop, by engine name, with the seconds each is given
/// to stop: a declared one's `stop_timeout`, or the engine's default; a found one's, as it was
/// created (asked of the engine).
pub fn stopping(
    engine: &Engine,
    steps: &[Step],
    containers: &BTreeMap<ContainerName, ContainerEntry>,
    present: &BTreeMap<String, Present>,
) -> Result<BTreeMap<String, u32>, DockerError> {
    let mut out = BTreeMap::new();
    for calls in calls_of(steps, present) {
        for call in calls.release.iter().chain(&calls.acquire) {
            let Call::Stop(name) = call else { continue };
            let ours = present.get(name).is_none_or(Present::is_ours);
            let declared = containers
                .iter()
                .find(|(n, _)| n.as_str() == name)
                .and_then(|(_, e)| e.stop_timeout);
            let seconds = match (ours, declared) {
                (true, Some(s)) => s,
                (true, None) => crate::engine::DEFAULT_STOP_SECONDS,
                (false, _) => engine.stop_timeout(name)?,
            };
            out.insert(name.clone(), seconds);
        }
    }
    Ok(out)
}

/// The mesh's container goes: stopped first, within the stop timeout its declaration gives (a
/// database flushes its files on SIGTERM; a removal alone would kill it), then removed.
fn stop_and_remove(name: &str) -> [Call; 2] {
    [Call::Stop(name.to_owned()), Call::Remove(name.to_owned())]
}

/// Where the phase stands, for [`Progress`].
struct Tally {
    /// Calls left per container.
    left: std::sync::Mutex<BTreeMap<String, usize>>,
    done: std::sync::atomic::AtomicUsize,
}

impl Tally {
    fn called(&self, name: &str) {
        let mut left = self.left.lock().unwrap_or_else(|e| e.into_inner());
        let finished = left.get_mut(name).is_some_and(|n| {
            *n = n.saturating_sub(1);
            *n == 0
        });
        if finished {
            self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn done(&self) -> usize {
        self.done.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Engine {
    /// Carries out `steps` for `containers` (planned from the listing `present`), creating
    /// containers labelled for `owner` whose path volumes are under `root`: each container's
    /// calls in order, every container's letting go before any container's taking; the letting
    /// go of every container at once (a rollback of sixty containers waits for one stop
    /// timeout, not for one per wave of `jobs`), the taking at most `jobs` containers at a time,
    /// a container after those whose namespaces, links or volumes it needs.
    /// When a call fails, no other container's calls start; those in flight are waited for, and
    /// every failure is returned, naming its container and the engine's message.
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &self,
        containers: &BTreeMap<ContainerName, ContainerEntry>,
        values: &SecretValues,
        steps: &[Step],
        present: &BTreeMap<String, Present>,
        generation: &mesh_lib::GenerationId,
        owner: &str,
        root: &std::path::Path,
        jobs: usize,
        progress: &dyn Progress,
    ) -> Result<(), StepsFailed> {
        let work = calls_of(steps, present);
        if work.is_empty() {
            return Ok(());
        }
        let ctx = Context {
            containers,
            values,
            generation,
            owner,
            root,
        };
        let tally = Tally {
            left: std::sync::Mutex::new(
                work.iter()
                    .map(|c| (c.name.clone(), c.release.len() + c.acquire.len()))
                    .collect(),
            ),
            done: std::sync::atomic::AtomicUsize::new(0),
        };
        progress.begin(work.len());
        let jobs = jobs.max(1);
        let failed = self.runtime.block_on(async {
            let release: Vec<(&str, &[Call])> = work
                .iter()
                .filter(|c| !c.release.is_empty())
                .map(|c| (c.name.as_str(), c.release.as_slice()))
                .collect();
            // Every stop at once: the engine waits out each container's stop timeout side by
            // side, and nothing is bound to the order a stop ends in.
            let all = release.len();
            let failed = self.wave(release, all, &ctx, &tally, progress).await;
            if !failed.is_empty() {
                return failed;
            }
            let acquire: Vec<(&str, &[Call])> = work
                .iter()
                .filter(|c| !c.acquire.is_empty())
                .map(|c| (c.name.as_str(), c.acquire.as_slice()))
                .collect();
            // A container that joins another's namespaces, links to it or mounts its volumes
            // is created and started once that one is: a wave per level of what waits on what.
            let waits_on = match self.waits_on(&acquire, containers, present).await {
                Ok(w) => w,
                Err(e) => return vec![e],
            };
            for level in in_order(acquire, &waits_on) {
                let failed = self.wave(level, jobs, &ctx, &tally, progress).await;
                if !failed.is_empty() {
                    return failed;
                }
            }
            Vec::new()
        });
        progress.end();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(StepsFailed(failed))
        }
    }

    /// What each container of `acquire` needs running first, by the names calls go under: a
    /// declared container what it declares ([`needs`]); a found one started again (a rollback
    /// across its take) what the engine recorded when it was created, which the declaration
    /// need not say — asked of the engine for those alone, all at once.
    async fn waits_on<'w>(
        &self,
        acquire: &[(&'w str, &'w [Call])],
        containers: &BTreeMap<ContainerName, ContainerEntry>,
        present: &BTreeMap<String, Present>,
    ) -> Result<BTreeMap<&'w str, Vec<String>>, DockerError> {
        use futures_util::future::try_join_all;
        let found = acquire.iter().filter_map(|(name, calls)| {
            let started = calls.iter().find_map(|call| match call {
                Call::Start(s) if s.ends_with(FOUND_SUFFIX) => Some(s.as_str()),
                _ => None,
            })?;
            Some(async move { Ok::<_, DockerError>((*name, self.joined_async(started).await?)) })
        });
        let mut out: BTreeMap<&str, Vec<String>> = try_join_all(found)
            .await?
            .into_iter()
            .map(|(name, joined)| {
                let on = joined
                    .iter()
                    .filter_map(|r| named(r, present))
                    .map(str::to_owned)
                    .collect();
                (name, on)
            })
            .collect();
        for (name, _) in acquire {
            if out.contains_key(name) {
                continue;
            }
            let declared = containers
                .iter()
                .find(|(n, _)| n.as_str() == *name)
                .map(|(_, e)| needs(e).into_iter().map(str::to_owned).collect())
                .unwrap_or_default();
            out.insert(name, declared);
        }
        Ok(out)
    }

    /// Runs each container's `calls`, at most `jobs` containers at once; after a failure starts
    /// no more, and waits for those in flight.
    async fn wave(
        &self,
        work: Vec<(&str, &[Call])>,
        jobs: usize,
        ctx: &Context<'_>,
        tally: &Tally,
        progress: &dyn Progress,
    ) -> Vec<DockerError> {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let mut queue = work.into_iter();
        let mut running = FuturesUnordered::new();
        let mut in_flight: Vec<&str> = Vec::new();
        let mut failed = Vec::new();
        let mut ticker = tokio::time::interval(std::time::Duration::from_millis(250));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            while failed.is_empty() && running.len() < jobs {
                let Some((name, calls)) = queue.next() else {
                    break;
                };
                in_flight.push(name);
                running.push(async move { (name, self.run(name, calls, ctx, tally).await) });
            }
            if running.is_empty() {
                break;
            }
            tokio::select! {
                Some((name, result)) = running.next() => {
                    in_flight.retain(|n| *n != name);
                    if let Err(e) = result {
                        failed.push(e);
                    }
                    progress.update(tally.done(), &in_flight);
                }
                _ = ticker.tick() => progress.update(tally.done(), &in_flight),
            }
        }
        failed
    }

    /// One container's calls, in order. Each is one change on the engine, and each leaves a
    /// state the plan converges from if the process stops right after it (the crash tests stop
    /// after each in turn): a found container renamed `NAME.found` is retired whether or not
    /// the mesh's is created yet; ours created but not running is started.
    async fn run(
        &self,
        container: &str,
        calls: &[Call],
        ctx: &Context<'_>,
        tally: &Tally,
    ) -> Result<(), DockerError> {
        for call in calls {
            match call {
                Call::Stop(name) => self.stop_async(name).await?,
                Call::Rename(name, to) => self.rename_async(name, to).await?,
                Call::Create(name) => {
                    let entry = ctx
                        .containers
                        .iter()
                        .find(|(n, _)| n.as_str() == name)
                        .map(|(_, e)| e)
                        .expect("planned from it");
                    self.create_async(name, entry, ctx).await?
                }
                Call::Start(name) => self.start_async(name).await?,
                Call::Remove(name) => self.remove_async(name).await?,
                Call::Restart(name) => self.restart_async(name).await?,
            }
            mesh_lib::crash::point("container-changed");
            tally.called(container);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LABEL_MODULE;

    /// A container that joins another's network, links to one or mounts one's volumes starts
    /// in a later wave than that one; the others in the first, in their order; a circle in
    /// the last.
    #[test]
    fn what_waits_on_another_starts_after_it() {
        use mesh_lib::model::{ContainerState, ModuleName};
        let mut containers = BTreeMap::new();
        let mut add = |name: &str, set: &dyn Fn(&mut ContainerEntry)| {
            let mut e = ContainerEntry::new(
                ModuleName::new("m").unwrap(),
                "busybox",
                ContainerState::Managed,
            );
            set(&mut e);
            containers.insert(ContainerName::new(name).unwrap(), e);
        };
        add("db", &|_| {});
        add("app", &|e| {
            e.options.network_mode = Some("container:db".into())
        });
        add("side", &|e| e.options.pid = Some("container:app".into()));
        add("web", &|e| e.options.links = vec!["app:api".into()]);
        add("copy", &|e| e.options.volumes_from = vec!["db:ro".into()]);
        add("alone", &|e| {
            e.options.network_mode = Some("container:gone".into())
        });
        add("x", &|e| e.options.ipc = Some("container:y".into()));
        add("y", &|e| e.options.ipc = Some("container:x".into()));
        let calls: Vec<Call> = vec![Call::Start("n".into())];
        let names = ["side", "web", "app", "copy", "db", "alone", "x", "y"];
        let acquire: Vec<(&str, &[Call])> = names.iter().map(|n| (*n, calls.as_slice())).collect();
        let waits_on: BTreeMap<&str, Vec<String>> = containers
            .iter()
            .map(|(n, e)| {
                (
                    n.as_str(),
                    needs(e).into_iter().map(str::to_owned).collect(),
                )
            })
            .collect();
        let waves: Vec<Vec<&str>> = in_order(acquire, &waits_on)
            .into_iter()
            .map(|w| w.into_iter().map(|(n, _)| n).collect())
            .collect();
        assert_eq!(waves[0], ["db", "alone"]);
        assert_eq!(waves[1], ["app", "copy"]);
        assert_eq!(waves[2], ["side", "web"]);
        assert_eq!(waves.last().unwrap(), &["x", "y"]);
        assert_eq!(waves.concat().len(), names.len(), "each once");
    }

    /// A reference the engine recorded in a found container (a name, that name since kept as
    /// `.found`, an id or a prefix of one) is the name that container's calls go under; one
    /// not on the engine, or too short a prefix to be sure, is none.
    #[test]
    fn an_engine_reference_names_the_container_its_calls_go_under() {
        let id = "4f1c2a9d8e7b6a5f4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b";
        let present = BTreeMap::from([
            (
                "db.found".to_string(),
                Present {
                    id: id.into(),
                    labels: BTreeMap::new(),
                    running: false,
                    network: None,
                },
            ),
            (
                "web".to_string(),
                Present {
                    id: "0123456789ab0123".into(),
                    labels: BTreeMap::new(),
                    running: true,
                    network: None,
                },
            ),
        ]);
        assert_eq!(named(id, &present), Some("db"));
        assert_eq!(named(&id[..12], &present), Some("db"));
        assert_eq!(named("db.found", &present), Some("db"));
        assert_eq!(named("web", &present), Some("web"));
        assert_eq!(named("4f1c", &present), None, "a short prefix is no one");
        assert_eq!(named("gone", &present), None);
    }

    /// What the engine records of a container's namespaces, links and volumes is what it
    /// needs running: `container:X` of each namespace, a link's target, a volume's source.
    #[test]
    fn what_the_engine_recorded_is_what_a_found_container_needs() {
        let host = bollard::models::HostConfig {
            network_mode: Some("container:4f1c2a9d8e7b".into()),
            pid_mode: Some("host".into()),
            ipc_mode: Some("container:db".into()),
            links: Some(vec!["/cache:/web/redis".into()]),
            volumes_from: Some(vec!["files:ro".into(), "logs".into()]),
            ..Default::default()
        };
        assert_eq!(
            crate::engine::joined(&host),
            ["4f1c2a9d8e7b", "db", "cache", "files", "logs"]
        );
        assert!(crate::engine::joined(&bollard::models::HostConfig::default()).is_empty());
    }

    /// Each container's calls keep their order; every letting go (stop, removal, rename away)
    /// is in the first wave, every taking (create, start, rename back) in the second; a
    /// rollback removes the mesh's container only if the listing shows one, and stops it (within
    /// its stop timeout) before it removes it.
    #[test]
    fn calls_per_container_let_go_before_they_take() {
        let steps = vec![
            Step::Retire { name: "a".into() },
            Step::Run {
                name: "a".into(),
                replace: false,
                joins: None,
            },
            Step::Hold { name: "h".into() },
            Step::Restore {
                name: "b".into(),
                start: true,
            },
            Step::Restore {
                name: "c".into(),
                start: false,
            },
            Step::Remove { name: "d".into() },
            Step::Stop { name: "e".into() },
        ];
        let present = BTreeMap::from([(
            "b".to_string(),
            Present {
                id: "x".into(),
                labels: BTreeMap::from([(LABEL_MODULE.to_string(), "m".to_string())]),
                running: true,
                network: None,
            },
        )]);
        let calls = calls_of(&steps, &present);
        let want = vec![
            Calls {
                name: "a".into(),
                release: vec![
                    Call::Stop("a".into()),
                    Call::Rename("a".into(), "a.found".into()),
                ],
                acquire: vec![Call::Create("a".into()), Call::Start("a".into())],
            },
            Calls {
                name: "b".into(),
                release: vec![Call::Stop("b".into()), Call::Remove("b".into())],
                acquire: vec![
                    Call::Start("b.found".into()),
                    Call::Rename("b.found".into(), "b".into()),
                ],
            },
            Calls {
                name: "c".into(),
                release: vec![],
                acquire: vec![Call::Rename("c.found".into(), "c".into())],
            },
            Calls {
                name: "d".into(),
                release: vec![Call::Stop("d".into()), Call::Remove("d".into())],
                acquire: vec![],
            },
            Calls {
                name: "e".into(),
                release: vec![Call::Stop("e".into())],
                acquire: vec![],
            },
        ];
        assert_eq!(calls, want);
    }
}
