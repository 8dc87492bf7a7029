//! The engine: a connection to the Docker engine and a runtime to call it from synchronous
//! code; every call counted (a switch reports how many it made). Each call names what it asked
//! and of which container when it fails.

use std::collections::BTreeMap;

use bollard::query_parameters::{
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder, RenameContainerOptionsBuilder,
};
use bollard::Docker;
use serde_json::{json, Value};

use crate::LABEL_MODULE;
use crate::LABEL_OWNER;

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
    /// A container declares what its engine's API cannot keep (it would drop it in silence):
    /// it is not created without it.
    #[error("docker create {name}: its {what} need an engine of API {}.{} or later; this one speaks {}.{}: not created", .needs.0, .needs.1, .has.0, .has.1)]
    Unsupported {
        /// The container.
        name: String,
        /// What it declares.
        what: &'static str,
        /// The API version that keeps it.
        needs: (u32, u32),
        /// The engine's.
        has: (u32, u32),
    },
    /// A container to create has a secret environment variable whose value the switch did not
    /// decrypt (a fault of the mesh, not of the declaration): it is not created without it.
    #[error("docker create {name}: the value of its secret environment variable {var} was not decrypted; not created")]
    Unopened {
        /// The container.
        name: String,
        /// The variable.
        var: String,
    },
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
    /// Its network mode as the engine recorded it (`container:ID` when it joined another's
    /// network namespace), when the listing says it.
    pub network: Option<String>,
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

/// The engine's own stop timeout, for a container created without one.
pub const DEFAULT_STOP_SECONDS: u32 = 10;

/// The engine, and a runtime to call it from synchronous code.
pub struct Engine {
    pub(crate) docker: Docker,
    pub(crate) runtime: tokio::runtime::Runtime,
    calls: std::sync::atomic::AtomicUsize,
    /// The networks known to be on the engine (asked, or created, by this engine's calls): a
    /// switch creating sixty containers on one network asks for it once.
    pub(crate) networks: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// The engine's defaults, asked once (`docker info`) when a container is first read.
    facts: std::sync::OnceLock<mesh_lib::import::EngineFacts>,
    /// The images read for [`Engine::live`], by reference: sixty containers of one image ask
    /// for it once. An engine lives for one command, during which a reference names one image.
    images: std::sync::Mutex<BTreeMap<String, Option<Value>>>,
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
            networks: std::sync::Mutex::default(),
            facts: std::sync::OnceLock::new(),
            images: std::sync::Mutex::default(),
        })
    }

    /// The API version spoken with the engine, (major, minor).
    pub(crate) fn api_version(&self) -> (u32, u32) {
        let v = self.docker.client_version();
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        (narrow(v.major_version), narrow(v.minor_version))
    }

    /// How many Docker API calls this engine made.
    pub fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn call<T>(
        &self,
        what: &'static str,
        name: &str,
        f: impl std::future::Future<Output = Result<T, bollard::errors::Error>>,
    ) -> Result<T, DockerError> {
        self.runtime.block_on(self.call_async(what, name, f))
    }

    pub(crate) async fn call_async<T>(
        &self,
        what: &'static str,
        name: &str,
        f: impl std::future::Future<Output = Result<T, bollard::errors::Error>>,
    ) -> Result<T, DockerError> {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f.await.map_err(|source| DockerError::Call {
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
                    network: c.host_config.as_ref().and_then(|h| h.network_mode.clone()),
                };
                out.insert(name.trim_start_matches('/').to_owned(), present);
            }
        }
        Ok(out)
    }

    /// The client, for the calls of [`crate::images`] (each counted with [`Engine::counted`]).
    pub(crate) fn api(&self) -> &Docker {
        &self.docker
    }

    /// Runs `f` on the engine's runtime.
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// Counts one API call made through [`Engine::api`].
    pub(crate) fn counted(&self) {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the engine has `image` (a reference or an id).
    pub(crate) fn has_image(&self, image: &str) -> Result<bool, DockerError> {
        Ok(self.image_repo_digests(image)?.is_some())
    }

    /// The `RepoDigests` of `image`, or `None` when the engine does not have it.
    pub(crate) fn image_repo_digests(
        &self,
        image: &str,
    ) -> Result<Option<Vec<String>>, DockerError> {
        self.runtime.block_on(self.image_repo_digests_async(image))
    }

    /// [`Engine::image_repo_digests`], from async code.
    pub(crate) async fn image_repo_digests_async(
        &self,
        image: &str,
    ) -> Result<Option<Vec<String>>, DockerError> {
        match self
            .call_async("inspect image", image, self.docker.inspect_image(image))
            .await
        {
            Ok(inspect) => Ok(Some(inspect.repo_digests.unwrap_or_default())),
            Err(DockerError::Call {
                source:
                    bollard::errors::Error::DockerResponseServerError {
                        status_code: 404, ..
                    },
                ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every host port a container publishes, once (the engine lists a port once per host
    /// address family).
    pub fn published(&self) -> Result<Vec<mesh_lib::import::Published>, DockerError> {
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
                out.push(mesh_lib::import::Published {
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
    /// environment, published ports, mounts, labels, and every other option it was given
    /// (`Config`, `HostConfig`) — as canonical JSON: a found container's recorded original.
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
            "Config": v["Config"],
            "HostConfig": v["HostConfig"],
        });
        Ok(mesh_lib::canonical::to_canonical_pretty(&spec).unwrap_or_default())
    }

    /// What the engine gives a container whose create does not say otherwise (its runtime,
    /// cgroup namespace, logging driver) and its host's name: asked once.
    pub fn facts(&self) -> Result<mesh_lib::import::EngineFacts, DockerError> {
        self.runtime.block_on(self.facts_async())
    }

    async fn facts_async(&self) -> Result<mesh_lib::import::EngineFacts, DockerError> {
        if let Some(f) = self.facts.get() {
            return Ok(f.clone());
        }
        let info = self
            .call_async("info", "the engine", self.docker.info())
            .await?;
        let mut facts = mesh_lib::import::EngineFacts::from_info(
            &serde_json::to_value(&info).unwrap_or_default(),
        );
        let (major, minor) = self.api_version();
        facts.api_version = format!("{major}.{minor}");
        Ok(self.facts.get_or_init(|| facts).clone())
    }

    /// The container under `name` as it is, with its image's defaults (when the engine still
    /// has the image) and the engine's: what `mesh import` writes and checks, and what tells a
    /// take that the found container already is the declared one. The containers it shares a
    /// namespace with are named (the engine keeps their ids), and the mounts it has from the
    /// containers of its `volumes_from` are theirs, not its own. Reads only.
    pub fn live(
        &self,
        name: &str,
        root: &std::path::Path,
    ) -> Result<mesh_lib::import::LiveContainer, DockerError> {
        self.runtime.block_on(self.live_async(name, root))
    }

    /// Each container `names` names, as [`Engine::live`] reads it, in that order: read 16 at
    /// once (the engine answers them side by side), after the first alone, whose image the
    /// others most often share and then find read.
    pub fn live_all(
        &self,
        names: &[String],
        root: &std::path::Path,
    ) -> Vec<Result<mesh_lib::import::LiveContainer, DockerError>> {
        use futures_util::stream::{self, StreamExt};
        let Some((first, rest)) = names.split_first() else {
            return Vec::new();
        };
        self.runtime.block_on(async {
            let mut out = vec![self.live_async(first, root).await];
            out.extend(
                stream::iter(rest)
                    .map(|n| self.live_async(n, root))
                    .buffered(16)
                    .collect::<Vec<_>>()
                    .await,
            );
            out
        })
    }

    async fn live_async(
        &self,
        name: &str,
        root: &std::path::Path,
    ) -> Result<mesh_lib::import::LiveContainer, DockerError> {
        let inspect = self
            .call_async("inspect", name, self.docker.inspect_container(name, None))
            .await?;
        let inspect = serde_json::to_value(&inspect).unwrap_or_default();
        let image_ref = inspect["Config"]["Image"].as_str().unwrap_or_default();
        let known = self
            .images
            .lock()
            .expect("not poisoned")
            .get(image_ref)
            .cloned();
        let image = match known {
            Some(image) => image,
            None => {
                let image = match self
                    .call_async(
                        "inspect image",
                        image_ref,
                        self.docker.inspect_image(image_ref),
                    )
                    .await
                {
                    Ok(i) => Some(serde_json::to_value(&i).unwrap_or_default()),
                    Err(e) if status(&e) == Some(404) => None,
                    Err(e) => return Err(e),
                };
                // One the engine lacks is asked again: a switch may fetch it meanwhile.
                if image.is_some() {
                    self.images
                        .lock()
                        .expect("not poisoned")
                        .insert(image_ref.to_owned(), image.clone());
                }
                image
            }
        };
        let engine = self.facts_async().await?;
        let mut names = BTreeMap::new();
        for id in mesh_lib::import::shared_with(&inspect) {
            if let Ok(other) = self
                .call_async("inspect", name, self.docker.inspect_container(&id, None))
                .await
            {
                names.insert(id, other.name.unwrap_or_default());
            }
        }
        let mut inherited = std::collections::BTreeSet::new();
        for donor in mesh_lib::import::volumes_from(&inspect) {
            let other = self
                .call_async("inspect", name, self.docker.inspect_container(&donor, None))
                .await?;
            inherited.extend(
                other
                    .mounts
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|m| m.destination),
            );
        }
        let around = mesh_lib::import::Around {
            root,
            engine: &engine,
            names: &names,
            inherited: &inherited,
        };
        Ok(mesh_lib::import::LiveContainer::from_inspect(
            &inspect,
            image.as_ref(),
            &around,
        ))
    }

    /// When the container last started (Docker's `State.StartedAt`) and its id.
    pub fn started(&self, name: &str) -> Result<(String, String), DockerError> {
        let inspect = self.call("inspect", name, self.docker.inspect_container(name, None))?;
        let started = inspect.state.and_then(|s| s.started_at).unwrap_or_default();
        Ok((inspect.id.unwrap_or_default(), started))
    }

    /// Waits until each container of `stopping` (by name, with the seconds it is given to stop)
    /// that runs has stopped, or its time and a little more has passed: a stop another process
    /// asked for before it was killed goes on in the engine. One that is gone, or does not run,
    /// is not waited for.
    pub fn wait_stopped(&self, stopping: &BTreeMap<String, u32>) -> Result<(), DockerError> {
        let Some(longest) = stopping.values().max() else {
            return Ok(());
        };
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_secs(u64::from(*longest) + 3);
        loop {
            let present = self.containers()?;
            let running = stopping
                .keys()
                .any(|name| present.get(name).is_some_and(|p| p.running));
            if !running || std::time::Instant::now() >= deadline {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// The seconds container `name` is given to stop (`docker run --stop-timeout`; the engine's
    /// default when it was created without).
    pub fn stop_timeout(&self, name: &str) -> Result<u32, DockerError> {
        let inspect = self.call("inspect", name, self.docker.inspect_container(name, None))?;
        Ok(inspect
            .config
            .and_then(|c| c.stop_timeout)
            .and_then(|s| u32::try_from(s).ok())
            .unwrap_or(DEFAULT_STOP_SECONDS))
    }

    /// The containers container `name` needs running before it starts, as the engine recorded
    /// them when it was created (see [`joined`]): for a found container, which the declaration
    /// does not describe.
    pub(crate) async fn joined_async(&self, name: &str) -> Result<Vec<String>, DockerError> {
        let inspect = self
            .call_async("inspect", name, self.docker.inspect_container(name, None))
            .await?;
        Ok(inspect.host_config.as_ref().map(joined).unwrap_or_default())
    }

    /// Starts a container.
    pub fn start(&self, name: &str) -> Result<(), DockerError> {
        self.runtime.block_on(self.start_async(name))
    }

    pub(crate) async fn start_async(&self, name: &str) -> Result<(), DockerError> {
        self.call_async("start", name, self.docker.start_container(name, None))
            .await
            .or_else(not_modified)
    }

    /// Stops a container, giving it the time to stop its own configuration asks for (`docker
    /// run --stop-timeout`, 10 s unless set) before it is killed. One that does not run is no
    /// error.
    pub fn stop(&self, name: &str) -> Result<(), DockerError> {
        self.runtime.block_on(self.stop_async(name))
    }

    pub(crate) async fn stop_async(&self, name: &str) -> Result<(), DockerError> {
        self.call_async("stop", name, self.docker.stop_container(name, None))
            .await
            .or_else(not_modified)
    }

    /// Renames a container.
    pub fn rename(&self, name: &str, to: &str) -> Result<(), DockerError> {
        self.runtime.block_on(self.rename_async(name, to))
    }

    pub(crate) async fn rename_async(&self, name: &str, to: &str) -> Result<(), DockerError> {
        let options = RenameContainerOptionsBuilder::default().name(to).build();
        match self
            .call_async("rename", name, self.docker.rename_container(name, options))
            .await
        {
            // A rename a killed switch had sent ended after this switch listed the engine.
            Err(e) if status(&e) == Some(404) && self.exists(to).await => Ok(()),
            other => other,
        }
    }

    /// Whether a container is under `name`.
    pub(crate) async fn exists(&self, name: &str) -> bool {
        self.call_async("inspect", name, self.docker.inspect_container(name, None))
            .await
            .is_ok()
    }

    /// Restarts a container (stopped within its own stop timeout, then started): a bind mount
    /// of a file is made again, so the container sees the file now at the path.
    pub fn restart(&self, name: &str) -> Result<(), DockerError> {
        self.runtime.block_on(self.restart_async(name))
    }

    pub(crate) async fn restart_async(&self, name: &str) -> Result<(), DockerError> {
        self.call_async("restart", name, self.docker.restart_container(name, None))
            .await
    }

    /// Removes one of the mesh's containers (its volumes stay), killing it if it still runs: the
    /// switch stops it first.
    pub fn remove(&self, name: &str) -> Result<(), DockerError> {
        self.runtime.block_on(self.remove_async(name))
    }

    pub(crate) async fn remove_async(&self, name: &str) -> Result<(), DockerError> {
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(false)
            .build();
        match self
            .call_async(
                "remove",
                name,
                self.docker.remove_container(name, Some(options)),
            )
            .await
        {
            Ok(()) => Ok(()),
            // Gone already: what the removal was for.
            Err(e) if status(&e) == Some(404) => Ok(()),
            // A removal a killed switch had asked for is still under way: wait for its end.
            Err(e) if status(&e) == Some(409) && e.to_string().contains("already in progress") => {
                self.gone(name, e).await
            }
            Err(e) => Err(e),
        }
    }

    /// Waits (up to a minute) until no container is under `name`; `e` if one still is.
    pub(crate) async fn gone(&self, name: &str, e: DockerError) -> Result<(), DockerError> {
        for _ in 0..600 {
            match self
                .call_async("inspect", name, self.docker.inspect_container(name, None))
                .await
            {
                Err(gone) if status(&gone) == Some(404) => return Ok(()),
                _ => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
        Err(e)
    }
}

impl DockerError {
    /// Whether the engine said the container (or image) is not there: one listed a moment ago
    /// and removed since, by someone else.
    pub fn is_gone(&self) -> bool {
        status(self) == Some(404)
    }
}

/// The HTTP status the engine answered a failed call with.
pub(crate) fn status(e: &DockerError) -> Option<u16> {
    match e {
        DockerError::Call {
            source: bollard::errors::Error::DockerResponseServerError { status_code, .. },
            ..
        } => Some(*status_code),
        _ => None,
    }
}

/// Docker's "not modified" (304): the container already is started, or stopped.
pub(crate) fn not_modified(e: DockerError) -> Result<(), DockerError> {
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

/// The containers a container created with `host` needs running before it starts, as the engine
/// names them (a name or an id): the one whose network, process or IPC namespace it joins
/// (`container:X`), those it links to (`/X:/it/alias`), those whose volumes it mounts (`X:ro`).
pub(crate) fn joined(host: &bollard::models::HostConfig) -> Vec<String> {
    crate::apply::needed(
        [&host.network_mode, &host.pid_mode, &host.ipc_mode],
        host.links.iter().flatten(),
        host.volumes_from.iter().flatten(),
    )
    .into_iter()
    .map(str::to_owned)
    .collect()
}
