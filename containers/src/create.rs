//! What a declared container is created with: its spec, the mesh's labels, path volumes under
//! the root, its secret environment's values; and the digest of its spec that tells a container
//! of the mesh's whether it still is the declared one.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HealthConfig, HostConfig,
    NetworkConnectRequest, NetworkCreateRequest, NetworkingConfig, PortBinding, RestartPolicy,
    RestartPolicyNameEnum,
};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use mesh_lib::model::{ContainerEntry, ContainerName, ContainerState};

use crate::engine::{status, DockerError, Engine};
use crate::{SecretValues, LABEL_GENERATION, LABEL_MODULE, LABEL_OWNER, LABEL_SPEC};

mod options;

/// The engine API version from which a create joins several networks at once (before it, the
/// container is created on its first and connected to the others).
const NETWORKS_AT_CREATE_FROM: (u32, u32) = (1, 44);

/// What one container's calls need to know of the switch.
pub(crate) struct Context<'a> {
    pub(crate) containers: &'a BTreeMap<ContainerName, ContainerEntry>,
    pub(crate) values: &'a SecretValues,
    pub(crate) generation: &'a mesh_lib::GenerationId,
    pub(crate) owner: &'a str,
    pub(crate) root: &'a std::path::Path,
}

/// The digest of a declared container's spec (its state aside): equal digests, equal containers.
///
/// A secret environment variable counts by its value's keyed digest alone (a switch names it
/// so): a secret re-encrypted to other recipients, or moved, with the same value recreates
/// nothing; a new value recreates the container. The gaps it accepts are no part of it:
/// accepting a loss changes nothing created.
pub fn spec_digest(entry: &ContainerEntry) -> String {
    let mut e = entry.clone();
    e.state = ContainerState::Managed;
    e.accept_gaps.clear();
    for r in e.secret_environment.values_mut() {
        r.file.clear();
        r.recipients.clear();
    }
    blake3::hash(&mesh_lib::canonical::to_canonical_json(&e).unwrap_or_default())
        .to_hex()
        .to_string()
}

impl Engine {
    /// Creates the container `name` as `entry` declares it, labelled with the mesh's labels; a
    /// volume whose source is an absolute path is that path under `root`, where the mesh writes
    /// declared files. Its secret environment variables are given their values from `values`.
    pub(crate) async fn create_async(
        &self,
        name: &str,
        entry: &ContainerEntry,
        ctx: &Context<'_>,
    ) -> Result<(), DockerError> {
        let (generation, owner, root) = (ctx.generation, ctx.owner, ctx.root);
        let api = self.api_version();
        if !entry.options.annotations.is_empty() && api < options::ANNOTATIONS_FROM {
            // The engine would drop them in silence.
            return Err(DockerError::Unsupported {
                name: name.to_owned(),
                what: "annotations",
                needs: options::ANNOTATIONS_FROM,
                has: api,
            });
        }
        for network in &entry.networks {
            self.ensure_network(name, &network.name, owner).await?;
        }
        let mut body = create_body(entry, generation, owner, root, ctx.values).map_err(|var| {
            DockerError::Unopened {
                name: name.to_owned(),
                var,
            }
        })?;
        // An older engine joins one network at create; the others are connected after.
        let mut later = Vec::new();
        if api < NETWORKS_AT_CREATE_FROM {
            if let Some(endpoints) = body
                .networking_config
                .as_mut()
                .and_then(|n| n.endpoints_config.as_mut())
            {
                let first = entry.networks.first().map(|n| n.name.clone());
                let others: Vec<String> = endpoints
                    .keys()
                    .filter(|k| Some(*k) != first.as_ref())
                    .cloned()
                    .collect();
                for n in others {
                    if let Some(settings) = endpoints.remove(&n) {
                        later.push((n, settings));
                    }
                }
            }
        }
        let mut options = CreateContainerOptionsBuilder::default().name(name);
        if let Some(platform) = &entry.options.platform {
            options = options.platform(platform);
        }
        match self
            .call_async(
                "create",
                name,
                self.docker.create_container(Some(options.build()), body),
            )
            .await
        {
            Ok(_) => {}
            // A create a killed switch had sent may have ended after this switch listed the
            // engine: the container under the name is then this very one.
            Err(e) if status(&e) == Some(409) && self.is_created(name, entry, owner).await => {}
            Err(e) => return Err(e),
        }
        for (network, settings) in later {
            let request = NetworkConnectRequest {
                container: name.to_owned(),
                endpoint_config: Some(settings),
            };
            match self
                .call_async(
                    "network connect for",
                    name,
                    self.docker.connect_network(&network, request),
                )
                .await
            {
                // Connected already (by the killed switch this one finishes).
                Err(e) if status(&e) == Some(403) || status(&e) == Some(409) => {}
                other => other?,
            }
        }
        Ok(())
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
    let o = &entry.options;
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
    let mut body = ContainerCreateBody {
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
                        match v.mode() {
                            mode if mode.is_empty() => format!("{source}:{}", v.target),
                            mode => format!("{source}:{}:{mode}", v.target),
                        }
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
                        let fixed = n.ipv4_address.is_some() || n.ipv6_address.is_some();
                        let settings = EndpointSettings {
                            aliases: (!n.aliases.is_empty()).then(|| n.aliases.clone()),
                            ipam_config: fixed.then(|| EndpointIpamConfig {
                                ipv4_address: n.ipv4_address.map(|a| a.to_string()),
                                ipv6_address: n.ipv6_address.map(|a| a.to_string()),
                                link_local_ips: None,
                            }),
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
    };
    options::config(&mut body, o);
    if let Some(h) = body.host_config.as_mut() {
        options::host_config(h, o);
    }
    Ok(body)
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
