//! Containers, through the Docker engine at `DOCKER_HOST` (default: the local socket), with
//! bollard. The mesh's own containers carry the labels [`LABEL_MODULE`], [`LABEL_GENERATION`],
//! [`LABEL_SPEC`] and [`LABEL_OWNER`]: those labels are the host store's record for containers.
//! A container under a declared name without them is *found*, and is never removed: a take
//! stops it and keeps it as `NAME.found`. The mesh removes a container of its own that is no
//! longer declared only when its owner label names this node's state.
//!
//! A plan's steps run concurrently across containers ([`Engine::apply`]): each container's own
//! calls in their order, every container's letting go (a stop, a removal, a rename away from its
//! name) before any container takes a name or a port (a create, a start). The letting go is
//! asked of every container at once — a stop is the engine waiting out the container's stop
//! timeout, not work — and the taking runs at most `jobs` containers at a time. A switch of N
//! containers costs about its slowest stop, not their sum, nor a stop per `jobs` containers.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{
    ContainerCreateBody, EndpointSettings, HealthConfig, HostConfig, NetworkCreateRequest,
    NetworkingConfig, PortBinding, RestartPolicy, RestartPolicyNameEnum,
};
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

/// The values of containers' secret environment variables, by their keyed digest (the
/// `ciphertext` a switch's resolved generation names them by): zeroed when dropped.
pub type SecretValues = BTreeMap<mesh_lib::BlobHash, mesh_lib::secret::Zeroizing<String>>;

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

/// What a person is shown while the container phase runs: the binary draws it (a bar on a
/// terminal), the activator only reports.
pub trait Progress: Send + Sync {
    /// The phase begins: `total` containers have calls to make.
    fn begin(&self, total: usize);
    /// Called every quarter of a second while it runs, and when a container is done: how many
    /// are done, and the containers whose calls are in flight.
    fn update(&self, done: usize, in_flight: &[&str]);
    /// The phase is over.
    fn end(&self);
    /// A switch's images begin to be fetched (see [`crate::images`]), before anything changes.
    fn fetch_begin(&self, _images: &[&str]) {}
    /// Where one image's fetch is.
    fn fetching(&self, _image: &str, _state: crate::images::Fetching) {}
    /// The images are fetched, or one failed.
    fn fetch_end(&self) {}
}

/// Shows nothing.
pub struct Quiet;

impl Progress for Quiet {
    fn begin(&self, _total: usize) {}
    fn update(&self, _done: usize, _in_flight: &[&str]) {}
    fn end(&self) {}
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
    /// The networks known to be on the engine (asked, or created, by this engine's calls): a
    /// switch creating sixty containers on one network asks for it once.
    networks: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

/// The digest of a declared container's spec (its state aside): equal digests, equal containers.
///
/// A secret environment variable counts by its value's keyed digest alone (a switch names it
/// so): a secret re-encrypted to other recipients, or moved, with the same value recreates
/// nothing; a new value recreates the container.
pub fn spec_digest(entry: &ContainerEntry) -> String {
    let mut e = entry.clone();
    e.state = ContainerState::Managed;
    for r in e.secret_environment.values_mut() {
        r.file.clear();
        r.recipients.clear();
    }
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
            networks: std::sync::Mutex::default(),
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
        self.runtime.block_on(self.call_async(what, name, f))
    }

    async fn call_async<T>(
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

    /// The container under `name` as it is, with its image's defaults (when the engine still
    /// has the image): what `mesh import` writes and checks, and what tells a take that the
    /// found container already is the declared one. Reads only.
    pub fn live(
        &self,
        name: &str,
        root: &std::path::Path,
    ) -> Result<mesh_lib::import::LiveContainer, DockerError> {
        let inspect = self.call("inspect", name, self.docker.inspect_container(name, None))?;
        let inspect = serde_json::to_value(&inspect).unwrap_or_default();
        let image_ref = inspect["Config"]["Image"].as_str().unwrap_or_default();
        let image = match self.call(
            "inspect image",
            image_ref,
            self.docker.inspect_image(image_ref),
        ) {
            Ok(i) => Some(serde_json::to_value(&i).unwrap_or_default()),
            Err(e) if status(&e) == Some(404) => None,
            Err(e) => return Err(e),
        };
        Ok(mesh_lib::import::LiveContainer::from_inspect(
            &inspect,
            image.as_ref(),
            root,
        ))
    }

    /// When the container last started (Docker's `State.StartedAt`) and its id.
    pub fn started(&self, name: &str) -> Result<(String, String), DockerError> {
        let inspect = self.call("inspect", name, self.docker.inspect_container(name, None))?;
        let started = inspect.state.and_then(|s| s.started_at).unwrap_or_default();
        Ok((inspect.id.unwrap_or_default(), started))
    }

    /// Creates the container `name` as `entry` declares it, labelled with the mesh's labels; a
    /// volume whose source is an absolute path is that path under `root`, where the mesh writes
    /// declared files. Its secret environment variables are given their values from `values`.
    async fn create_async(
        &self,
        name: &str,
        entry: &ContainerEntry,
        ctx: &Context<'_>,
    ) -> Result<(), DockerError> {
        let (generation, owner, root) = (ctx.generation, ctx.owner, ctx.root);
        for network in &entry.networks {
            self.ensure_network(name, &network.name, owner).await?;
        }
        let body = create_body(entry, generation, owner, root, ctx.values).map_err(|var| {
            DockerError::Unopened {
                name: name.to_owned(),
                var,
            }
        })?;
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        match self
            .call_async(
                "create",
                name,
                self.docker.create_container(Some(options), body),
            )
            .await
        {
            Ok(_) => Ok(()),
            // A create a killed switch had sent may have ended after this switch listed the
            // engine: the container under the name is then this very one.
            Err(e) if status(&e) == Some(409) && self.is_created(name, entry, owner).await => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Creates the network `network` the container `name` joins when the engine lacks it: a
    /// bridge network labelled with `owner`. One that is there, whoever made it, is used as it
    /// is; none is ever removed (another container, the mesh's or not, may be on it).
    async fn ensure_network(
        &self,
        name: &str,
        network: &str,
        owner: &str,
    ) -> Result<(), DockerError> {
        let known = || {
            self.networks
                .lock()
                .expect("not poisoned")
                .insert(network.to_owned());
        };
        if self
            .networks
            .lock()
            .expect("not poisoned")
            .contains(network)
        {
            return Ok(());
        }
        match self
            .call_async(
                "network inspect for",
                name,
                self.docker.inspect_network(network, None),
            )
            .await
        {
            Ok(_) => {
                known();
                return Ok(());
            }
            Err(e) if status(&e) == Some(404) => {}
            Err(e) => return Err(e),
        }
        let request = NetworkCreateRequest {
            name: network.to_owned(),
            driver: Some("bridge".into()),
            labels: Some([(LABEL_OWNER.to_owned(), owner.to_owned())].into()),
            ..NetworkCreateRequest::default()
        };
        match self
            .call_async(
                "network create for",
                name,
                self.docker.create_network(request),
            )
            .await
        {
            // Another container of the same switch created it meanwhile.
            Err(e) if status(&e) != Some(409) => Err(e),
            _ => {
                known();
                Ok(())
            }
        }
    }

    /// Whether the container under `name` is the mesh's, for `owner`, of `entry`'s spec.
    async fn is_created(&self, name: &str, entry: &ContainerEntry, owner: &str) -> bool {
        let Ok(inspect) = self
            .call_async("inspect", name, self.docker.inspect_container(name, None))
            .await
        else {
            return false;
        };
        let labels = inspect.config.and_then(|c| c.labels).unwrap_or_default();
        labels.get(LABEL_SPEC) == Some(&spec_digest(entry))
            && labels.get(LABEL_OWNER).map(String::as_str) == Some(owner)
    }

    /// Starts a container.
    pub fn start(&self, name: &str) -> Result<(), DockerError> {
        self.runtime.block_on(self.start_async(name))
    }

    async fn start_async(&self, name: &str) -> Result<(), DockerError> {
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

    async fn stop_async(&self, name: &str) -> Result<(), DockerError> {
        self.call_async("stop", name, self.docker.stop_container(name, None))
            .await
            .or_else(not_modified)
    }

    /// Renames a container.
    pub fn rename(&self, name: &str, to: &str) -> Result<(), DockerError> {
        self.runtime.block_on(self.rename_async(name, to))
    }

    async fn rename_async(&self, name: &str, to: &str) -> Result<(), DockerError> {
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
    async fn exists(&self, name: &str) -> bool {
        self.call_async("inspect", name, self.docker.inspect_container(name, None))
            .await
            .is_ok()
    }

    /// Restarts a container (stopped within its own stop timeout, then started): a bind mount
    /// of a file is made again, so the container sees the file now at the path.
    pub fn restart(&self, name: &str) -> Result<(), DockerError> {
        self.runtime.block_on(self.restart_async(name))
    }

    async fn restart_async(&self, name: &str) -> Result<(), DockerError> {
        self.call_async("restart", name, self.docker.restart_container(name, None))
            .await
    }

    /// Removes one of the mesh's containers (its volumes stay), killing it if it still runs: the
    /// switch stops it first.
    pub fn remove(&self, name: &str) -> Result<(), DockerError> {
        self.runtime.block_on(self.remove_async(name))
    }

    async fn remove_async(&self, name: &str) -> Result<(), DockerError> {
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
    async fn gone(&self, name: &str, e: DockerError) -> Result<(), DockerError> {
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

/// What the engine is asked to create for a declared container: its spec, the mesh's labels,
/// path volumes under `root`.
fn create_body(
    entry: &ContainerEntry,
    generation: &mesh_lib::GenerationId,
    owner: &str,
    root: &std::path::Path,
    values: &SecretValues,
) -> Result<ContainerCreateBody, String> {
    let mut env: Vec<String> = entry
        .environment
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for (k, r) in &entry.secret_environment {
        let value = values.get(&r.ciphertext).ok_or_else(|| k.clone())?;
        env.push(format!("{k}={}", value.as_str()));
    }
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
    Ok(ContainerCreateBody {
        image: Some(entry.image.clone()),
        cmd: (!entry.command.is_empty()).then(|| entry.command.clone()),
        env: Some(env),
        labels: Some(labels),
        stop_timeout: entry.stop_timeout.map(i64::from),
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
            restart_policy: entry.restart.as_deref().map(restart_policy),
            network_mode: entry.networks.first().map(|n| n.name.clone()),
            ..HostConfig::default()
        }),
        networking_config: (!entry.networks.is_empty()).then(|| NetworkingConfig {
            endpoints_config: Some(
                entry
                    .networks
                    .iter()
                    .map(|n| {
                        let settings = EndpointSettings {
                            aliases: (!n.aliases.is_empty()).then(|| n.aliases.clone()),
                            ..EndpointSettings::default()
                        };
                        (n.name.clone(), settings)
                    })
                    .collect(),
            ),
        }),
        healthcheck: entry.healthcheck.as_ref().map(|h| {
            let nanos = |d: Option<u64>| d.map(|d| i64::try_from(d).unwrap_or(i64::MAX));
            HealthConfig {
                test: (!h.test.is_empty()).then(|| h.test.clone()),
                interval: nanos(h.interval),
                timeout: nanos(h.timeout),
                retries: h.retries.map(i64::from),
                start_period: nanos(h.start_period),
                start_interval: None,
            }
        }),
        ..ContainerCreateBody::default()
    })
}

/// The engine's restart policy for a declared one (`always`, `unless-stopped`, `on-failure`,
/// `on-failure:N`; the compiler let no other through).
fn restart_policy(declared: &str) -> RestartPolicy {
    let (name, retries) = declared.split_once(':').unwrap_or((declared, ""));
    let name = match name {
        "always" => RestartPolicyNameEnum::ALWAYS,
        "unless-stopped" => RestartPolicyNameEnum::UNLESS_STOPPED,
        "on-failure" => RestartPolicyNameEnum::ON_FAILURE,
        _ => RestartPolicyNameEnum::NO,
    };
    RestartPolicy {
        name: Some(name),
        maximum_retry_count: retries.parse().ok(),
    }
}

/// The HTTP status the engine answered a failed call with.
fn status(e: &DockerError) -> Option<u16> {
    match e {
        DockerError::Call {
            source: bollard::errors::Error::DockerResponseServerError { status_code, .. },
            ..
        } => Some(*status_code),
        _ => None,
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

/// The container steps from the target generation to what is on the engine. A found container
/// the generation does not hold is refused on an adopted node, by name.
pub fn plan(
    containers: &BTreeMap<ContainerName, ContainerEntry>,
    present: &BTreeMap<String, Present>,
    found: &BTreeMap<ContainerName, mesh_lib::record::FoundContainer>,
    adopted: bool,
    owner: &str,
    equal: &std::collections::BTreeSet<String>,
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
                Some(p) if same_spec && p.running => steps.push(Step::Stop { name }),
                Some(_) if same_spec => {}
                Some(_) => {
                    steps.push(Step::Remove { name: name.clone() });
                    steps.push(Step::Stage { name });
                }
                None => steps.push(Step::Stage { name }),
            },
            ContainerState::Managed => match here {
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

/// One call that changes the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
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
struct Calls {
    name: String,
    release: Vec<Call>,
    acquire: Vec<Call>,
}

/// The calls of `steps`, per container, in the order the containers first appear. `present` is
/// the engine's listing the steps were planned from: a rollback removes the mesh's container
/// under a restored name only if there is one.
fn calls_of(steps: &[Step], present: &BTreeMap<String, Present>) -> Vec<Calls> {
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
            Step::Keep { start: true, .. } => c.acquire.push(Call::Start(name)),
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

/// The mesh's container goes: stopped first, within the stop timeout its declaration gives (a
/// database flushes its files on SIGTERM; a removal alone would kill it), then removed.
fn stop_and_remove(name: &str) -> [Call; 2] {
    [Call::Stop(name.to_owned()), Call::Remove(name.to_owned())]
}

/// What one container's calls need to know of the switch.
struct Context<'a> {
    containers: &'a BTreeMap<ContainerName, ContainerEntry>,
    values: &'a SecretValues,
    generation: &'a mesh_lib::GenerationId,
    owner: &'a str,
    root: &'a std::path::Path,
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
    /// timeout, not for one per wave of `jobs`), the taking at most `jobs` containers at a time.
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
            self.wave(acquire, jobs, &ctx, &tally, progress).await
        });
        progress.end();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(StepsFailed(failed))
        }
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
            crate::crash::point("container-changed");
            tally.called(container);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use mesh_lib::model::{ContainerEntry, ContainerName, ContainerState, ModuleName};
    use mesh_lib::record::FoundContainer;
    use mesh_lib::BlobHash;

    use super::*;

    fn entry(state: ContainerState) -> ContainerEntry {
        ContainerEntry {
            module: ModuleName::new("m").unwrap(),
            image: "img".into(),
            digest: None,
            command: vec![],
            environment: BTreeMap::new(),
            secret_environment: Default::default(),
            ports: vec![],
            volumes: vec![],
            labels: BTreeMap::new(),
            stop_timeout: None,
            restart: None,
            networks: Vec::new(),
            healthcheck: None,
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
        let steps = plan(&managed, &running, &none, true, "me", &equal).unwrap();
        assert_eq!(steps, keep(false));
        assert_eq!(calls_of(&steps, &running), vec![]);
        let stopped = BTreeMap::from([("c".to_string(), present(None, false))]);
        let steps = plan(&managed, &stopped, &none, true, "me", &equal).unwrap();
        assert_eq!(steps, keep(true));
        assert_eq!(
            calls_of(&steps, &stopped)[0].acquire,
            [Call::Start("c".into())]
        );
        assert_eq!(
            plan(&managed, &running, &none, true, "me", &BTreeSet::new()).unwrap()[0],
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
            plan(&one(held()), &found, &none, true, "me", &BTreeSet::new()).unwrap(),
            vec![Step::Hold { name: "c".into() }]
        );
        assert_eq!(
            plan(
                &one(ContainerState::Staged),
                &found,
                &none,
                true,
                "me",
                &BTreeSet::new()
            )
            .unwrap_err(),
            "c"
        );
        assert_eq!(
            plan(
                &one(ContainerState::Staged),
                &BTreeMap::new(),
                &none,
                true,
                "me",
                &BTreeSet::new()
            )
            .unwrap(),
            vec![Step::Stage { name: "c".into() }]
        );
        assert_eq!(
            plan(
                &one(ContainerState::Managed),
                &found,
                &none,
                true,
                "me",
                &BTreeSet::new()
            )
            .unwrap(),
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
            plan(
                &one(ContainerState::Managed),
                &ours,
                &none,
                false,
                "me",
                &BTreeSet::new()
            )
            .unwrap(),
            vec![]
        );
        let stale = BTreeMap::from([("old".to_string(), present(Some(&managed), true))]);
        assert_eq!(
            plan(
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
            plan(
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
            plan(
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
            plan(
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
        let none = BTreeMap::new();
        let staged = entry(ContainerState::Staged);
        let running = BTreeMap::from([("c".to_string(), present(Some(&staged), true))]);
        assert_eq!(
            plan(
                &one(ContainerState::Staged),
                &running,
                &none,
                true,
                "me",
                &BTreeSet::new()
            )
            .unwrap(),
            vec![Step::Stop { name: "c".into() }]
        );
        let created = BTreeMap::from([("c".to_string(), present(Some(&staged), false))]);
        assert_eq!(
            plan(
                &one(ContainerState::Staged),
                &created,
                &none,
                true,
                "me",
                &BTreeSet::new()
            )
            .unwrap(),
            vec![]
        );
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
            super::Present {
                id: "x".into(),
                labels: BTreeMap::from([(LABEL_MODULE.to_string(), "m".to_string())]),
                running: true,
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
