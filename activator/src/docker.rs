//! Containers, through the Docker engine at `DOCKER_HOST` (default: the local socket), with
//! bollard. The mesh's own containers carry the labels [`LABEL_MODULE`], [`LABEL_GENERATION`],
//! [`LABEL_SPEC`] and [`LABEL_OWNER`]: those labels are the host store's record for containers.
//! A container under a declared name without them is *found*, and is never removed: a take
//! stops it and keeps it as `NAME.found`. The mesh removes a container of its own that is no
//! longer declared only when its owner label names this node's state.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{ContainerCreateBody, HostConfig, PortBinding};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
    RenameContainerOptionsBuilder,
};
use bollard::Docker;
use mesh_lib::model::{ContainerEntry, ContainerName, ContainerState};
use serde_json::{json, Value};

/// The label naming the module of a container the mesh created.
pub const LABEL_MODULE: &str = "mesh.module";
/// The label naming the generation that created a container of the mesh's.
pub const LABEL_GENERATION: &str = "mesh.generation";
/// The label holding the digest of the declared spec a container was created from.
pub const LABEL_SPEC: &str = "mesh.spec";
/// The label naming the state directory whose switch created a container of the mesh's (a
/// digest of its path): only that state removes it when it is no longer declared, so a second
/// state on the same engine (a trial with `--state-dir`, a test) never removes a node's
/// containers.
pub const LABEL_OWNER: &str = "mesh.owner";
/// The suffix a found container is renamed with when its module is taken.
pub const FOUND_SUFFIX: &str = ".found";

/// A Docker failure.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// The engine does not answer.
    #[error("the Docker engine is not reachable{}: {source}", .host.as_ref().map(|h| format!(" at {h}")).unwrap_or_default())]
    Unreachable {
        /// `DOCKER_HOST`, if set.
        host: Option<String>,
        /// The cause.
        #[source]
        source: bollard::errors::Error,
    },
    /// An operation on a container failed.
    #[error("docker {what} {name}: {source}")]
    Call {
        /// What was asked.
        what: &'static str,
        /// The container.
        name: String,
        /// The cause.
        #[source]
        source: bollard::errors::Error,
    },
    /// The runtime for the calls could not start.
    #[error("cannot start the runtime for Docker calls: {0}")]
    Runtime(#[from] std::io::Error),
}

/// A host port a container publishes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Published {
    /// The container's name.
    pub container: String,
    /// The host address (`0.0.0.0` or `::` for every one).
    pub host_ip: String,
    /// The host port.
    pub port: u16,
    /// TCP or UDP.
    pub protocol: mesh_lib::model::Protocol,
}

/// A container on the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Present {
    /// Its id.
    pub id: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Whether it runs.
    pub running: bool,
}

impl Present {
    /// Whether the mesh created it.
    pub fn is_ours(&self) -> bool {
        self.labels.contains_key(LABEL_MODULE)
    }

    /// Whether the mesh created it for the state `owner` names.
    pub fn is_owned_by(&self, owner: &str) -> bool {
        self.is_ours() && self.labels.get(LABEL_OWNER).map(String::as_str) == Some(owner)
    }
}

/// The engine, and a runtime to call it from synchronous code.
pub struct Engine {
    docker: Docker,
    runtime: tokio::runtime::Runtime,
    calls: std::sync::atomic::AtomicUsize,
}

/// The digest of a declared container's spec (its state aside): equal digests, equal containers.
pub fn spec_digest(entry: &ContainerEntry) -> String {
    let mut e = entry.clone();
    e.state = ContainerState::Managed;
    blake3::hash(&mesh_lib::canonical::to_canonical_json(&e).unwrap_or_default())
        .to_hex()
        .to_string()
}

impl Engine {
    /// Connects to the engine and checks that it answers.
    pub fn connect() -> Result<Self, DockerError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let host = std::env::var("DOCKER_HOST").ok();
        let unreachable = |source| DockerError::Unreachable {
            host: host.clone(),
            source,
        };
        let docker = Docker::connect_with_local_defaults().map_err(unreachable)?;
        let docker = runtime.block_on(async {
            let docker = docker.negotiate_version().await?;
            docker.ping().await?;
            Ok::<_, bollard::errors::Error>(docker)
        });
        // Version negotiation and the ping are two calls.
        Ok(Self {
            docker: docker.map_err(unreachable)?,
            runtime,
            calls: std::sync::atomic::AtomicUsize::new(2),
        })
    }

    /// How many Docker API calls this engine made.
    pub fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn call<T>(
        &self,
        what: &'static str,
        name: &str,
        f: impl std::future::Future<Output = Result<T, bollard::errors::Error>>,
    ) -> Result<T, DockerError> {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.runtime
            .block_on(f)
            .map_err(|source| DockerError::Call {
                what,
                name: name.to_owned(),
                source,
            })
    }

    /// Every container, by name (without Docker's leading `/`).
    pub fn containers(&self) -> Result<BTreeMap<String, Present>, DockerError> {
        let options = ListContainersOptionsBuilder::default().all(true).build();
        let list = self.call(
            "list",
            "containers",
            self.docker.list_containers(Some(options)),
        )?;
        let mut out = BTreeMap::new();
        for c in list {
            let running = matches!(
                c.state,
                Some(bollard::models::ContainerSummaryStateEnum::RUNNING)
            );
            let labels: BTreeMap<String, String> =
                c.labels.unwrap_or_default().into_iter().collect();
            for name in c.names.unwrap_or_default() {
                let present = Present {
                    id: c.id.clone().unwrap_or_default(),
                    labels: labels.clone(),
                    running,
                };
                out.insert(name.trim_start_matches('/').to_owned(), present);
            }
        }
        Ok(out)
    }

    /// The images of `steps` that create a container and that the engine does not have: the
    /// mesh does not pull, and creating would fail after the files were switched.
    pub fn missing_images(
        &self,
        containers: &BTreeMap<ContainerName, ContainerEntry>,
        steps: &[Step],
    ) -> Result<Vec<String>, DockerError> {
        let wanted: std::collections::BTreeSet<&str> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Stage { name } | Step::Run { name, .. } => Some(name),
                _ => None,
            })
            .filter_map(|name| containers.iter().find(|(n, _)| n.as_str() == name))
            .map(|(_, e)| e.image.as_str())
            .collect();
        let mut missing = Vec::new();
        for image in wanted {
            match self.call("inspect image", image, self.docker.inspect_image(image)) {
                Ok(_) => {}
                Err(DockerError::Call {
                    source:
                        bollard::errors::Error::DockerResponseServerError {
                            status_code: 404, ..
                        },
                    ..
                }) => missing.push(image.to_owned()),
                Err(e) => return Err(e),
            }
        }
        Ok(missing)
    }

    /// Every host port a container publishes, once (the engine lists a port once per host
    /// address family).
    pub fn published(&self) -> Result<Vec<Published>, DockerError> {
        let options = ListContainersOptionsBuilder::default().all(false).build();
        let list = self.call(
            "list",
            "containers",
            self.docker.list_containers(Some(options)),
        )?;
        let mut out = Vec::new();
        for c in list {
            let name = c
                .names
                .unwrap_or_default()
                .first()
                .map(|n| n.trim_start_matches('/').to_owned())
                .unwrap_or_default();
            for p in c.ports.unwrap_or_default() {
                let Some(port) = p.public_port else { continue };
                let protocol = match p.typ {
                    Some(bollard::models::PortSummaryTypeEnum::UDP) => {
                        mesh_lib::model::Protocol::Udp
                    }
                    _ => mesh_lib::model::Protocol::Tcp,
                };
                out.push(Published {
                    container: name.clone(),
                    host_ip: p.ip.unwrap_or_default(),
                    port,
                    protocol,
                });
            }
        }
        out.sort();
        out.dedup_by(|a, b| {
            a.container == b.container && a.port == b.port && a.protocol == b.protocol
        });
        Ok(out)
    }

    /// The parts of a container's inspect data that say what it is — image, command,
    /// environment, published ports, mounts, labels — as canonical JSON: a found container's
    /// recorded original.
    pub fn spec_of(&self, name: &str) -> Result<Vec<u8>, DockerError> {
        let inspect = self.call("inspect", name, self.docker.inspect_container(name, None))?;
        let v = serde_json::to_value(&inspect).unwrap_or_default();
        let spec = json!({
            "Name": v["Name"],
            "Image": v["Config"]["Image"],
            "Cmd": v["Config"]["Cmd"],
            "Entrypoint": v["Config"]["Entrypoint"],
            "Env": v["Config"]["Env"],
            "Labels": v["Config"]["Labels"],
            "PortBindings": v["HostConfig"]["PortBindings"],
            "Binds": v["HostConfig"]["Binds"],
            "Mounts": v["Mounts"].as_array().map(|m| m.iter().map(|m| json!({
                "Type": m["Type"], "Name": m["Name"], "Source": m["Source"], "Destination": m["Destination"], "RW": m["RW"],
            })).collect::<Vec<Value>>()),
        });
        Ok(mesh_lib::canonical::to_canonical_pretty(&spec).unwrap_or_default())
    }

    /// When the container last started (Docker's `State.StartedAt`) and its id.
    pub fn started(&self, name: &str) -> Result<(String, String), DockerError> {
        let inspect = self.call("inspect", name, self.docker.inspect_container(name, None))?;
        let started = inspect.state.and_then(|s| s.started_at).unwrap_or_default();
        Ok((inspect.id.unwrap_or_default(), started))
    }

    /// Creates (not starts) the declared container under `name`, labelled as the mesh's. A
    /// volume whose source is an absolute path is that path under `root`, where the mesh writes
    /// declared files.
    pub fn create(
        &self,
        name: &str,
        entry: &ContainerEntry,
        generation: &mesh_lib::GenerationId,
        owner: &str,
        root: &std::path::Path,
    ) -> Result<(), DockerError> {
        let mut labels: HashMap<String, String> = entry.labels.clone().into_iter().collect();
        labels.insert(LABEL_OWNER.into(), owner.to_owned());
        labels.insert(LABEL_MODULE.into(), entry.module.to_string());
        labels.insert(LABEL_SPEC.into(), spec_digest(entry));
        labels.insert(LABEL_GENERATION.into(), generation.to_string());
        let mut bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
        for p in &entry.ports {
            bindings
                .entry(format!("{}/{}", p.container_port, p.protocol))
                .or_insert_with(|| Some(Vec::new()))
                .get_or_insert_with(Vec::new)
                .push(PortBinding {
                    host_ip: Some(p.host_ip.to_string()),
                    host_port: Some(p.host_port.to_string()),
                });
        }
        let body = ContainerCreateBody {
            image: Some(entry.image.clone()),
            cmd: (!entry.command.is_empty()).then(|| entry.command.clone()),
            env: Some(
                entry
                    .environment
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect(),
            ),
            labels: Some(labels),
            exposed_ports: Some(bindings.keys().cloned().collect()),
            host_config: Some(HostConfig {
                port_bindings: Some(bindings),
                binds: Some(
                    entry
                        .volumes
                        .iter()
                        .map(|v| {
                            let source = match v.source.strip_prefix('/') {
                                Some(rel) => root.join(rel).display().to_string(),
                                None => v.source.clone(),
                            };
                            format!(
                                "{}:{}{}",
                                source,
                                v.target,
                                if v.read_only { ":ro" } else { "" }
                            )
                        })
                        .collect(),
                ),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        };
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        self.call(
            "create",
            name,
            self.docker.create_container(Some(options), body),
        )
        .map(|_| ())
    }

    /// Starts a container.
    pub fn start(&self, name: &str) -> Result<(), DockerError> {
        self.call("start", name, self.docker.start_container(name, None))
            .or_else(not_modified)
    }

    /// Stops a container, giving it the time to stop its own configuration asks for (`docker
    /// run --stop-timeout`, 10 s unless set) before it is killed. One that does not run is no
    /// error.
    pub fn stop(&self, name: &str) -> Result<(), DockerError> {
        self.call("stop", name, self.docker.stop_container(name, None))
            .or_else(not_modified)
    }

    /// Renames a container.
    pub fn rename(&self, name: &str, to: &str) -> Result<(), DockerError> {
        let options = RenameContainerOptionsBuilder::default().name(to).build();
        self.call("rename", name, self.docker.rename_container(name, options))
    }

    /// Restarts a container (stopped within its own stop timeout, then started): a bind mount
    /// of a file is made again, so the container sees the file now at the path.
    pub fn restart(&self, name: &str) -> Result<(), DockerError> {
        self.call("restart", name, self.docker.restart_container(name, None))
    }

    /// Removes one of the mesh's containers (its volumes stay).
    pub fn remove(&self, name: &str) -> Result<(), DockerError> {
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(false)
            .build();
        self.call(
            "remove",
            name,
            self.docker.remove_container(name, Some(options)),
        )
    }
}

/// Docker's "not modified" (304): the container already is started, or stopped.
fn not_modified(e: DockerError) -> Result<(), DockerError> {
    match e {
        DockerError::Call {
            source:
                bollard::errors::Error::DockerResponseServerError {
                    status_code: 304, ..
                },
            ..
        } => Ok(()),
        other => Err(other),
    }
}

/// One step for one declared container, or one of the mesh's no longer declared.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum Step {
    /// A found container stays as it is, running or not.
    Hold {
        /// Its name.
        name: String,
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
    /// Create (after removing the mesh's container of another spec) and start.
    Run {
        /// Its name.
        name: String,
        /// Whether the mesh's container of an older spec goes first.
        replace: bool,
    },
    /// Start the mesh's container of the same spec that does not run.
    Start {
        /// Its name.
        name: String,
    },
    /// Rollback across a take: the mesh's container goes, the found one comes back under its
    /// name, started if it ran when it was found.
    Restore {
        /// Its name.
        name: String,
        /// Whether it ran when found.
        start: bool,
    },
    /// Remove one of the mesh's containers no longer declared.
    Remove {
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
            | Step::Stage { name }
            | Step::Retire { name }
            | Step::Run { name, .. }
            | Step::Start { name }
            | Step::Restore { name, .. }
            | Step::Remove { name }
            | Step::Restart { name, .. } => name,
        }
    }
}

/// The container steps from the target generation to what is on the engine. A found container
/// the generation does not hold is refused on an adopted node, by name.
pub fn plan(
    containers: &BTreeMap<ContainerName, ContainerEntry>,
    present: &BTreeMap<String, Present>,
    found: &BTreeMap<ContainerName, mesh_lib::record::FoundContainer>,
    adopted: bool,
    owner: &str,
) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    for (name, entry) in containers {
        let name = name.to_string();
        let here = present.get(&name);
        let found_kept = present.get(&format!("{name}{FOUND_SUFFIX}"));
        let same_spec = here.is_some_and(|p| p.labels.get(LABEL_SPEC) == Some(&spec_digest(entry)));
        match entry.state {
            ContainerState::Held { .. } => match here {
                Some(p) if !p.is_ours() => steps.push(Step::Hold { name }),
                _ if found_kept.is_some() => {
                    let start = found
                        .iter()
                        .find(|(n, _)| n.as_str() == name)
                        .is_none_or(|(_, f)| f.running);
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
                Some(_) if same_spec => {}
                Some(_) => {
                    steps.push(Step::Remove { name: name.clone() });
                    steps.push(Step::Stage { name });
                }
                None => steps.push(Step::Stage { name }),
            },
            ContainerState::Managed => match here {
                Some(p) if !p.is_ours() => {
                    steps.push(Step::Retire { name: name.clone() });
                    steps.push(Step::Run {
                        name,
                        replace: false,
                    });
                }
                Some(p) if same_spec && p.running => {}
                Some(_) if same_spec => steps.push(Step::Start { name }),
                Some(_) => steps.push(Step::Run {
                    name,
                    replace: true,
                }),
                None => steps.push(Step::Run {
                    name,
                    replace: false,
                }),
            },
        }
    }
    for (name, p) in present {
        let declared = containers.keys().any(|n| n.as_str() == name);
        if p.is_owned_by(owner) && !declared && !name.ends_with(FOUND_SUFFIX) {
            steps.push(Step::Remove { name: name.clone() });
        }
    }
    Ok(steps)
}

impl Engine {
    /// Carries out `steps` for `containers`, creating containers labelled for `owner` whose
    /// path volumes are under `root`.
    pub fn apply(
        &self,
        containers: &BTreeMap<ContainerName, ContainerEntry>,
        steps: &[Step],
        generation: &mesh_lib::GenerationId,
        owner: &str,
        root: &std::path::Path,
    ) -> Result<(), DockerError> {
        let entry = |name: &str| {
            containers
                .iter()
                .find(|(n, _)| n.as_str() == name)
                .map(|(_, e)| e)
                .expect("planned from it")
        };
        // Every change is one engine call, and each leaves a state the plan converges from if
        // the process stops right after it (the crash test stops after each in turn): a found
        // container renamed `NAME.found` is retired whether or not the mesh's is created yet;
        // ours created but not running is started. So a rollback starts the found container
        // before it gets its name back: once it has its name it is held, and held is never
        // started.
        let changed = || crate::crash::point("container-changed");
        for step in steps {
            match step {
                Step::Hold { .. } => {}
                Step::Stage { name } => {
                    self.create(name, entry(name), generation, owner, root)?;
                    changed();
                }
                Step::Retire { name } => {
                    self.stop(name)?;
                    changed();
                    self.rename(name, &format!("{name}{FOUND_SUFFIX}"))?;
                    changed();
                }
                Step::Run { name, replace } => {
                    if *replace {
                        self.remove(name)?;
                        changed();
                    }
                    self.create(name, entry(name), generation, owner, root)?;
                    changed();
                    self.start(name)?;
                    changed();
                }
                Step::Start { name } => {
                    self.start(name)?;
                    changed();
                }
                Step::Restore { name, start } => {
                    if self.containers()?.get(name).is_some_and(Present::is_ours) {
                        self.remove(name)?;
                        changed();
                    }
                    let kept = format!("{name}{FOUND_SUFFIX}");
                    if *start {
                        self.start(&kept)?;
                        changed();
                    }
                    self.rename(&kept, name)?;
                    changed();
                }
                Step::Remove { name } => {
                    self.remove(name)?;
                    changed();
                }
                Step::Restart { name, .. } => {
                    self.restart(name)?;
                    changed();
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use mesh_lib::model::{ContainerEntry, ContainerName, ContainerState, ModuleName};
    use mesh_lib::record::FoundContainer;
    use mesh_lib::BlobHash;

    use super::*;

    fn entry(state: ContainerState) -> ContainerEntry {
        ContainerEntry {
            module: ModuleName::new("m").unwrap(),
            image: "img".into(),
            command: vec![],
            environment: BTreeMap::new(),
            ports: vec![],
            volumes: vec![],
            labels: BTreeMap::new(),
            state,
        }
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
        }
    }

    fn one(state: ContainerState) -> BTreeMap<ContainerName, ContainerEntry> {
        BTreeMap::from([(ContainerName::new("c").unwrap(), entry(state))])
    }

    fn held() -> ContainerState {
        ContainerState::Held {
            original: BlobHash::of(b"the found spec"),
        }
    }

    /// Held is held; a found one the generation does not hold is refused on an adopted node; the
    /// take retires the found one; an equal running container of ours is left alone; ours not
    /// declared goes, if this state made it.
    #[test]
    fn steps_from_states() {
        let none = BTreeMap::new();
        let found = BTreeMap::from([("c".to_string(), present(None, true))]);
        assert_eq!(
            plan(&one(held()), &found, &none, true, "me").unwrap(),
            vec![Step::Hold { name: "c".into() }]
        );
        assert_eq!(
            plan(&one(ContainerState::Staged), &found, &none, true, "me").unwrap_err(),
            "c"
        );
        assert_eq!(
            plan(
                &one(ContainerState::Staged),
                &BTreeMap::new(),
                &none,
                true,
                "me"
            )
            .unwrap(),
            vec![Step::Stage { name: "c".into() }]
        );
        assert_eq!(
            plan(&one(ContainerState::Managed), &found, &none, true, "me").unwrap(),
            vec![
                Step::Retire { name: "c".into() },
                Step::Run {
                    name: "c".into(),
                    replace: false
                }
            ]
        );
        let managed = entry(ContainerState::Managed);
        let ours = BTreeMap::from([("c".to_string(), present(Some(&managed), true))]);
        assert_eq!(
            plan(&one(ContainerState::Managed), &ours, &none, false, "me").unwrap(),
            vec![]
        );
        let stale = BTreeMap::from([("old".to_string(), present(Some(&managed), true))]);
        assert_eq!(
            plan(&BTreeMap::new(), &stale, &none, false, "me").unwrap(),
            vec![Step::Remove { name: "old".into() }]
        );
        // Another state's container is not this node's to remove.
        assert_eq!(
            plan(&BTreeMap::new(), &stale, &none, false, "someone else").unwrap(),
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
            plan(&one(held()), &after_take, &stopped, true, "me").unwrap(),
            vec![Step::Restore {
                name: "c".into(),
                start: false
            }]
        );
        assert_eq!(
            plan(&one(held()), &after_take, &BTreeMap::new(), true, "me").unwrap(),
            vec![Step::Restore {
                name: "c".into(),
                start: true
            }]
        );
    }
}
