//! What `mesh import` reads of a live machine, and how a declared item is checked against it:
//! pure data and pure comparisons, no effect on the machine (the activator reads the engine and
//! the files; the fleet writes the Nickel).
//!
//! A container is compared by what it *is* once created: its declared spec merged with its
//! image's defaults (the engine adds the image's environment, labels, command and entrypoint
//! to what a create gives), against the live container's inspect data. Both sides become an
//! [`Effective`] spec, and its digest is the container's *spec hash* here: equal digests, equal
//! containers — a take keeps the found container in place instead of recreating it.
//!
//! Invariants: a credential's value is never in a [`Difference`] or a [`Gap`] (both name the
//! variable only); nothing here reads the machine.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{format_duration, ContainerEntry, ContainerNetwork, Healthcheck, Protocol};
use crate::options::ContainerOptions;

mod options;

use options::is_zero as is_empty;
pub use options::{normalized, shared_with, volumes_from, Around, EngineFacts, DEFAULT_SHM_SIZE};

/// The labels the mesh puts on the containers it creates: never part of a compared spec.
const MESH_LABELS: [&str; 4] = ["mesh.module", "mesh.generation", "mesh.spec", "mesh.owner"];

/// What a container's image gives a container created from it, unless the create says otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageDefaults {
    /// The image's id (`sha256:…`) the reference names now.
    pub id: String,
    /// `Config.Cmd`.
    pub command: Vec<String>,
    /// `Config.Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Config.Env`.
    pub environment: BTreeMap<String, String>,
    /// `Config.Labels`.
    pub labels: BTreeMap<String, String>,
    /// `Config.WorkingDir`.
    pub working_dir: String,
    /// `Config.User`.
    pub user: String,
    /// `RepoDigests`: the digests a registry knows it by (`REPO@sha256:…`).
    #[serde(default)]
    pub repo_digests: Vec<String>,
    /// `Config.Healthcheck`.
    #[serde(default)]
    pub healthcheck: Option<Healthcheck>,
    /// `Config.ExposedPorts` (`80/tcp`), sorted.
    #[serde(default)]
    pub exposed: Vec<String>,
    /// `Config.StopSignal`.
    #[serde(default)]
    pub stop_signal: String,
    /// `Config.Shell`.
    #[serde(default)]
    pub shell: Vec<String>,
    /// `Os`, `Architecture` and `Variant`: the platform it is for (`linux/amd64`).
    #[serde(default)]
    pub os_arch: Vec<String>,
}

impl ImageDefaults {
    /// From `docker image inspect` data.
    pub fn from_inspect(image: &Value) -> Self {
        let c = &image["Config"];
        Self {
            id: str_of(&image["Id"]),
            command: strings(&c["Cmd"]),
            entrypoint: strings(&c["Entrypoint"]),
            environment: env_map(&c["Env"]),
            labels: string_map(&c["Labels"]),
            working_dir: str_of(&c["WorkingDir"]),
            user: str_of(&c["User"]),
            repo_digests: strings(&image["RepoDigests"]),
            healthcheck: healthcheck_of(&c["Healthcheck"]),
            exposed: {
                let mut p: Vec<String> = c["ExposedPorts"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(p, _)| crate::options::exposed_port(p).unwrap_or_else(|_| p.clone()))
                    .collect();
                p.sort();
                p
            },
            stop_signal: str_of(&c["StopSignal"]),
            shell: strings(&c["Shell"]),
            os_arch: ["Os", "Architecture", "Variant"]
                .iter()
                .map(|k| str_of(&image[k]))
                .filter(|v| !v.is_empty())
                .collect(),
        }
    }

    /// The platform it is for (`linux/amd64`, `linux/arm/v7`), when its inspect data says it.
    pub fn platform(&self) -> Option<String> {
        (self.os_arch.len() >= 2).then(|| self.os_arch.join("/"))
    }
}

/// A health check as the engine's inspect data says it (`Config.Healthcheck`): a zero is a
/// field not given. `None` when there is none.
fn healthcheck_of(h: &Value) -> Option<Healthcheck> {
    if !h.is_object() {
        return None;
    }
    let nanos = |v: &Value| v.as_u64().filter(|n| *n > 0);
    let check = Healthcheck {
        test: strings(&h["Test"]),
        interval: nanos(&h["Interval"]),
        timeout: nanos(&h["Timeout"]),
        retries: nanos(&h["Retries"]).and_then(|r| u32::try_from(r).ok()),
        start_period: nanos(&h["StartPeriod"]),
    };
    (check != Healthcheck::default()).then_some(check)
}

impl Healthcheck {
    /// `given` over `image`'s, field by field, as the engine merges a create's check with its
    /// image's: a field not given is the image's.
    pub fn merged(given: Option<&Healthcheck>, image: Option<&Healthcheck>) -> Option<Healthcheck> {
        let Some(given) = given else {
            return image.cloned();
        };
        let Some(image) = image else {
            return Some(given.clone());
        };
        Some(Healthcheck {
            test: if given.test.is_empty() {
                image.test.clone()
            } else {
                given.test.clone()
            },
            interval: given.interval.or(image.interval),
            timeout: given.timeout.or(image.timeout),
            retries: given.retries.or(image.retries),
            start_period: given.start_period.or(image.start_period),
        })
    }

    /// For people: `CMD-SHELL "curl -f localhost" every 30s, 3 retries`.
    pub fn describe(&self) -> String {
        let mut out = if self.test.is_empty() {
            "(the image's test)".to_owned()
        } else {
            format!("{:?}", self.test)
        };
        for (what, d) in [
            ("interval", self.interval),
            ("timeout", self.timeout),
            ("start_period", self.start_period),
        ] {
            if let Some(d) = d {
                out.push_str(&format!(" {what} {}", format_duration(d)));
            }
        }
        if let Some(r) = self.retries {
            out.push_str(&format!(" retries {r}"));
        }
        out
    }
}

/// A published port of a live container.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LivePort {
    /// The host port.
    pub host_port: u16,
    /// The port inside the container.
    pub container_port: u16,
    /// TCP or UDP.
    pub protocol: Protocol,
    /// The host address (`0.0.0.0` when the engine says every one).
    pub host_ip: String,
}

/// A host port a container publishes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Published {
    /// The container's name.
    pub container: String,
    /// The host address (`0.0.0.0` or `::` for every one).
    pub host_ip: String,
    /// The host port.
    pub port: u16,
    /// TCP or UDP.
    pub protocol: Protocol,
}

/// A mount of a live container.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LiveMount {
    /// `volume` or `bind` (another kind is a [`Gap`]).
    pub kind: String,
    /// The volume's name, or the host path as a declared path names it (under the root).
    pub source: String,
    /// The path inside the container.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// A volume the engine named (`docker run -v /data`): its name is the engine's id.
    pub anonymous: bool,
    /// A bind's propagation, when it is not the engine's `rprivate`.
    #[serde(default)]
    pub propagation: Option<String>,
    /// A volume not filled from the image (`nocopy`).
    #[serde(default)]
    pub nocopy: bool,
    /// Its SELinux relabelling (`z`, `Z`).
    #[serde(default)]
    pub selinux: Option<String>,
}

impl LiveMount {
    /// Its options beyond read-only, as a bind's third part says them (`rslave,z`).
    fn mode(&self) -> String {
        let mut v = crate::model::Volume::new("", "", false);
        v.propagation = self.propagation.clone();
        v.nocopy = self.nocopy;
        v.selinux = self.selinux.clone();
        v.mode()
    }
}

/// Something of a live container that a declaration cannot say: it is named, never dropped
/// silently.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Gap {
    /// What it is (`networks`, `entrypoint`, …).
    pub what: String,
    /// What the container has.
    pub found: String,
    /// Why the declaration cannot carry it.
    pub why: String,
}

/// A port the firewall in force lets someone reach, as `mesh import` declares it: an opening
/// per source, on the paths its publishers take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundOpening {
    /// TCP or UDP.
    pub protocol: Protocol,
    /// The port.
    pub port: u16,
    /// `incoming` (a socket on the node, a redirect), `forwarded` (a DNAT, a container).
    pub paths: BTreeSet<crate::model::TrafficPath>,
    /// Who may reach it, as an opening's `from` says it: `anywhere` or IPv4 ranges. Empty when
    /// no one outside reaches it now (nothing to declare; the number is in use), or when no
    /// opening can say it (see `gaps`).
    pub from: Vec<String>,
    /// A name for its setting: the process listening, else the container, else `port_N`.
    pub name: String,
    /// The containers an engine says publish it.
    pub containers: Vec<String>,
    /// What publishes it, said for a comment (`sshd (pid 12) on 0.0.0.0`, `a DNAT in ip nat to
    /// 172.30.0.2:5432`).
    pub held_by: Vec<String>,
    /// Who reaches it now, said for a comment.
    pub reach: String,
    /// What an opening cannot say of it.
    pub gaps: Vec<Gap>,
}

/// A container as `docker inspect` says it is, read for `mesh import`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveContainer {
    /// Its name (without the engine's leading `/`).
    pub name: String,
    /// Its id.
    pub id: String,
    /// Whether it runs.
    pub running: bool,
    /// The image reference it was created from (`Config.Image`).
    pub image: String,
    /// The image it runs (`Image`, an id).
    pub image_id: String,
    /// `Config.Cmd`.
    pub command: Vec<String>,
    /// `Config.Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Config.Env`.
    pub environment: BTreeMap<String, String>,
    /// `Config.Labels`, the mesh's own aside.
    pub labels: BTreeMap<String, String>,
    /// Published ports, sorted.
    pub ports: Vec<LivePort>,
    /// Mounts, sorted.
    pub mounts: Vec<LiveMount>,
    /// `Config.StopTimeout`.
    pub stop_timeout: Option<u32>,
    /// The restart policy (`always`, `unless-stopped`, `on-failure[:N]`), `None` for `no`.
    pub restart: Option<String>,
    /// The networks it is on other than the default bridge, sorted, with the aliases it was
    /// given there.
    #[serde(default)]
    pub networks: Vec<ContainerNetwork>,
    /// Its health check (`Config.Healthcheck`: the image's, merged with what its create gave).
    #[serde(default)]
    pub healthcheck: Option<Healthcheck>,
    /// Every other option it runs with, less what its image and engine give by themselves:
    /// what a declaration says.
    #[serde(default)]
    pub options: ContainerOptions,
    /// Its engine's defaults, which a declaration compared with it is normalized against.
    #[serde(default)]
    pub engine: EngineFacts,
    /// What its image gives, when the engine still has it.
    pub image_defaults: Option<ImageDefaults>,
    /// What a declaration cannot say about it.
    pub gaps: Vec<Gap>,
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn env_map(v: &Value) -> BTreeMap<String, String> {
    strings(v)
        .into_iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (kv, String::new()),
        })
        .collect()
}

/// A host path as a declared path under `root` names it, or `None` when it is not under it.
pub fn under_root(path: &str, root: &Path) -> Option<String> {
    if root == Path::new("/") {
        return Some(path.to_owned());
    }
    let rel = Path::new(path).strip_prefix(root).ok()?;
    Some(format!("/{}", rel.display()))
}

impl LiveContainer {
    /// From `docker inspect` data, its image's (`None` when the engine no longer has it), and
    /// what [`Around`] it: where declared paths are (a bind mount's source is named as a
    /// declared path), the engine's defaults, the names of the containers it shares
    /// namespaces or volumes with.
    pub fn from_inspect(inspect: &Value, image: Option<&Value>, around: &Around<'_>) -> Self {
        let root = around.root;
        let c = &inspect["Config"];
        let h = &inspect["HostConfig"];
        let mut gaps = Vec::new();
        let mut ports = Vec::new();
        if let Some(bindings) = h["PortBindings"].as_object() {
            for (key, list) in bindings {
                let (port, proto) = key.split_once('/').unwrap_or((key, "tcp"));
                let protocol = match proto {
                    "tcp" => Protocol::Tcp,
                    "udp" => Protocol::Udp,
                    other => {
                        gaps.push(Gap {
                            what: "published port".into(),
                            found: key.clone(),
                            why: format!(
                                "a declaration publishes TCP and UDP ports only, not {other}"
                            ),
                        });
                        continue;
                    }
                };
                for b in list.as_array().into_iter().flatten() {
                    let host_port = str_of(&b["HostPort"]).parse().unwrap_or(0);
                    let Ok(container_port) = port.parse::<u16>() else {
                        continue;
                    };
                    if host_port == 0 {
                        gaps.push(Gap {
                            what: "published port".into(),
                            found: format!("{key} on a port the engine chose"),
                            why: "a declaration publishes on a port setting, a number".into(),
                        });
                        continue;
                    }
                    let ip = str_of(&b["HostIp"]);
                    ports.push(LivePort {
                        host_port,
                        container_port,
                        protocol,
                        host_ip: if ip.is_empty() { "0.0.0.0".into() } else { ip },
                    });
                }
            }
        }
        ports.sort();
        ports.dedup();
        let mut options = options::read(inspect, around);
        let mut mounts = Vec::new();
        for m in inspect["Mounts"].as_array().into_iter().flatten() {
            let kind = str_of(&m["Type"]);
            let target = str_of(&m["Destination"]);
            if around.inherited.contains(&target) {
                // Its `volumes_from` gives it.
                continue;
            }
            let read_only = !m["RW"].as_bool().unwrap_or(true);
            let mode: Vec<String> = str_of(&m["Mode"]).split(',').map(str::to_owned).collect();
            let propagation =
                Some(str_of(&m["Propagation"])).filter(|p| !p.is_empty() && p != "rprivate");
            // The engine relabels a named volume `z` unless told otherwise: not a choice.
            let selinux = mode
                .iter()
                .find(|o| *o == "Z" || (*o == "z" && kind != "volume"))
                .cloned();
            let nocopy = mode.iter().any(|o| o == "nocopy")
                || h["Mounts"].as_array().into_iter().flatten().any(|hm| {
                    str_of(&hm["Target"]) == target
                        && hm["VolumeOptions"]["NoCopy"].as_bool() == Some(true)
                });
            let mount = |source: String, anonymous: bool| LiveMount {
                kind: kind.clone(),
                source,
                target: target.clone(),
                read_only,
                anonymous,
                propagation: propagation.clone(),
                nocopy,
                selinux: selinux.clone(),
            };
            match kind.as_str() {
                "volume" => {
                    let name = str_of(&m["Name"]);
                    let anonymous = name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit());
                    mounts.push(mount(name, anonymous));
                }
                "bind" => {
                    let source = str_of(&m["Source"]);
                    match under_root(&source, root) {
                        Some(source) => mounts.push(mount(source, false)),
                        None => gaps.push(Gap {
                            what: "bind mount".into(),
                            found: format!("{source}:{target}"),
                            why: format!(
                                "its source is not under the root {}, where a declared path is",
                                root.display()
                            ),
                        }),
                    }
                }
                // Read into the options' `tmpfs`.
                "tmpfs" if options.tmpfs.contains_key(&target) => {}
                other => gaps.push(Gap {
                    what: format!("{other} mount"),
                    found: target,
                    why: "a declaration mounts named volumes, host paths and tmpfs only".into(),
                }),
            }
        }
        mounts.sort();
        let restart = {
            let name = str_of(&h["RestartPolicy"]["Name"]);
            let retries = h["RestartPolicy"]["MaximumRetryCount"]
                .as_u64()
                .unwrap_or(0);
            match name.as_str() {
                "" | "no" => None,
                "on-failure" if retries > 0 => Some(format!("on-failure:{retries}")),
                _ => Some(name),
            }
        };
        let image_defaults = image.map(ImageDefaults::from_inspect);
        let labels = string_map(&c["Labels"])
            .into_iter()
            .filter(|(k, _)| !MESH_LABELS.contains(&k.as_str()))
            .collect();
        for (name, endpoint) in inspect["NetworkSettings"]["Networks"]
            .as_object()
            .into_iter()
            .flatten()
        {
            // A MAC address the engine made is 02:42 and the IPv4 address's bytes (before API
            // 1.44); one given is not declared: the engine client cannot give one there.
            let mac = str_of(&endpoint["MacAddress"]);
            let ip: Option<std::net::Ipv4Addr> = str_of(&endpoint["IPAddress"]).parse().ok();
            if let Some(ip) = ip.filter(|_| !mac.is_empty() && around.engine.makes_mac_from_ip()) {
                let [a, b, c, d] = ip.octets();
                if !mac.eq_ignore_ascii_case(&format!("02:42:{a:02x}:{b:02x}:{c:02x}:{d:02x}")) {
                    gaps.push(Gap {
                        what: format!("mac_address on {name}"),
                        found: mac.clone(),
                        why: "a declared container gets the MAC address its engine makes".into(),
                    });
                }
            }
        }
        let network = str_of(&h["NetworkMode"]);
        let mut networks = Vec::new();
        if options.network_mode.is_none() {
            let id = str_of(&inspect["Id"]);
            for (name, endpoint) in inspect["NetworkSettings"]["Networks"]
                .as_object()
                .into_iter()
                .flatten()
            {
                if name == "bridge" && matches!(network.as_str(), "" | "default" | "bridge") {
                    continue;
                }
                // An engine before API 1.45 adds the container's short id itself.
                let mut aliases: Vec<String> = strings(&endpoint["Aliases"])
                    .into_iter()
                    .filter(|a| a.len() < 12 || !id.starts_with(a.as_str()))
                    .collect();
                aliases.sort();
                aliases.dedup();
                let ipam = &endpoint["IPAMConfig"];
                let mut joined = ContainerNetwork::new(name.clone(), aliases);
                let address = |field: &str| Some(str_of(&ipam[field])).filter(|a| !a.is_empty());
                for (field, what) in [
                    ("IPv4Address", "IPv4 address"),
                    ("IPv6Address", "IPv6 address"),
                ] {
                    let Some(a) = address(field) else { continue };
                    let read = match field {
                        "IPv4Address" => a.parse().map(|a| joined.ipv4_address = Some(a)),
                        _ => a.parse().map(|a| joined.ipv6_address = Some(a)),
                    };
                    if read.is_err() {
                        gaps.push(Gap {
                            what: format!("{what} on {name}"),
                            found: a,
                            why: "not an address a declaration can give".into(),
                        });
                    }
                }
                for (key, value) in endpoint.as_object().into_iter().flatten() {
                    let given = match key.as_str() {
                        "Links" | "DriverOpts" => !is_empty(value),
                        "IPAMConfig" => !strings(&value["LinkLocalIPs"]).is_empty(),
                        _ => false,
                    };
                    if given {
                        gaps.push(Gap {
                            what: format!("{key} on {name}"),
                            found: value.to_string(),
                            why: "a declared network says its aliases and fixed addresses only"
                                .into(),
                        });
                    }
                }
                networks.push(joined);
            }
            networks.sort();
        }
        let defaults = image_defaults.clone().unwrap_or_default();
        gaps.extend(options::unread(inspect, &defaults));
        if let Some(every) = c["Healthcheck"]["StartInterval"]
            .as_u64()
            .filter(|n| *n > 0)
        {
            gaps.push(Gap {
                what: "healthcheck start_interval".into(),
                found: format_duration(every),
                why: "the Container contract has no healthcheck start_interval".into(),
            });
        }
        if image.is_none() {
            gaps.push(Gap {
                what: "image".into(),
                found: str_of(&c["Image"]),
                why: "the engine no longer has the image: its defaults (environment, command, labels) cannot be told from what was given".into(),
            });
        }
        let published = published_ports(&ports);
        options = options::normalized(&options, &defaults, around.engine, &published);
        gaps.sort();
        Self {
            name: str_of(&inspect["Name"]).trim_start_matches('/').to_owned(),
            id: str_of(&inspect["Id"]),
            running: inspect["State"]["Running"].as_bool().unwrap_or(false),
            image: str_of(&c["Image"]),
            image_id: str_of(&inspect["Image"]),
            command: strings(&c["Cmd"]),
            entrypoint: strings(&c["Entrypoint"]),
            environment: env_map(&c["Env"]),
            labels,
            ports,
            mounts,
            stop_timeout: c["StopTimeout"]
                .as_u64()
                .and_then(|t| u32::try_from(t).ok()),
            restart,
            networks,
            healthcheck: healthcheck_of(&c["Healthcheck"]),
            options,
            engine: around.engine.clone(),
            image_defaults,
            gaps,
        }
    }

    /// What a declaration needs to say: the environment and labels its image does not give
    /// already, the command unless it is the image's.
    pub fn declared_part(&self) -> DeclaredPart {
        let d = self.image_defaults.clone().unwrap_or_default();
        let command = (self.command != d.command).then(|| self.command.clone());
        // What a map holds beyond what the image gives.
        let beyond = |given: &BTreeMap<String, String>, image: &BTreeMap<String, String>| {
            given
                .iter()
                .filter(|(k, v)| image.get(*k) != Some(*v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let environment = beyond(&self.environment, &d.environment);
        let labels = beyond(&self.labels, &d.labels);
        let healthcheck = (self.healthcheck != d.healthcheck)
            .then(|| self.healthcheck.clone().unwrap_or_default());
        DeclaredPart {
            command,
            environment,
            labels,
            healthcheck,
        }
    }

    /// Its image reference pinned by the digest a registry knows the running image by
    /// (`app:1@sha256:…`): when its reference still names the image it runs and that image has
    /// exactly one digest for the reference's repository. `None` for an image no registry gave
    /// (built or imported here), or one already pinned.
    pub fn pinned_image(&self) -> Option<String> {
        let defaults = self.image_defaults.as_ref()?;
        let reference = crate::image::ImageRef::parse(&self.image).ok()?;
        if reference.digest().is_some() || defaults.id.is_empty() || defaults.id != self.image_id {
            return None;
        }
        let mut digests = defaults.repo_digests.iter().filter_map(|e| {
            let (name, digest) = e.split_once('@')?;
            let theirs = crate::image::ImageRef::parse(name).ok()?;
            (theirs.familiar() == reference.familiar()).then_some(digest)
        });
        let digest = digests.next()?;
        if digests.next().is_some() {
            return None;
        }
        crate::image::ImageDigest::try_from(digest).ok()?;
        Some(format!("{}@{digest}", self.image))
    }

    /// Its spec as it is.
    pub fn effective(&self) -> Effective {
        Effective {
            image: self.image.clone(),
            command: self.command.clone(),
            environment: self.environment.clone(),
            labels: self.labels.clone(),
            ports: self.ports.clone(),
            volumes: self
                .mounts
                .iter()
                .map(|m| (m.source.clone(), m.target.clone(), m.read_only))
                .collect(),
            mount_options: self
                .mounts
                .iter()
                .map(|m| (m.target.clone(), m.mode()))
                .filter(|(_, mode)| !mode.is_empty())
                .collect(),
            stop_timeout: self.stop_timeout,
            restart: self.restart.clone(),
            networks: networks_of(&self.networks),
            addresses: addresses_of(&self.networks),
            healthcheck: self.healthcheck.clone(),
            options: self.options.clone(),
        }
    }
}

/// Networks as a compared spec holds them: name → aliases.
fn networks_of(networks: &[ContainerNetwork]) -> BTreeMap<String, BTreeSet<String>> {
    networks
        .iter()
        .map(|n| (n.name.clone(), n.aliases.iter().cloned().collect()))
        .collect()
}

/// The fixed addresses on networks: name → `IPV4 IPV6` (those given).
fn addresses_of(networks: &[ContainerNetwork]) -> BTreeMap<String, String> {
    networks
        .iter()
        .filter_map(|n| {
            let given: Vec<String> = n
                .ipv4_address
                .map(|a| a.to_string())
                .into_iter()
                .chain(n.ipv6_address.map(|a| a.to_string()))
                .collect();
            (!given.is_empty()).then(|| (n.name.clone(), given.join(" ")))
        })
        .collect()
}

/// The container ports published (`80/tcp`): exposed by being published, so never an
/// `expose` of its own.
fn published_ports(ports: &[LivePort]) -> BTreeSet<String> {
    ports
        .iter()
        .map(|p| format!("{}/{}", p.container_port, p.protocol))
        .collect()
}

/// What a declaration of a live container says: what it was given beyond its image's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredPart {
    /// The command, unless it is the image's.
    pub command: Option<Vec<String>>,
    /// The environment the image does not give.
    pub environment: BTreeMap<String, String>,
    /// The labels the image does not give.
    pub labels: BTreeMap<String, String>,
    /// The health check, when it is not the image's (all of it; a test of `["NONE"]` when the
    /// image has one and the container none).
    pub healthcheck: Option<Healthcheck>,
}

/// A container's spec once created: what a create gives merged with its image's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Effective {
    /// The image reference.
    pub image: String,
    /// The command it runs (the image's when none is given).
    pub command: Vec<String>,
    /// Its environment.
    pub environment: BTreeMap<String, String>,
    /// Its labels, the mesh's own aside.
    pub labels: BTreeMap<String, String>,
    /// Published ports, sorted.
    pub ports: Vec<LivePort>,
    /// (source, target, read-only), sorted.
    pub volumes: BTreeSet<(String, String, bool)>,
    /// Seconds to stop.
    pub stop_timeout: Option<u32>,
    /// Restart policy.
    pub restart: Option<String>,
    /// Networks beside the default bridge, with their aliases (not encoded when none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub networks: BTreeMap<String, BTreeSet<String>>,
    /// The health check (not encoded when none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthcheck: Option<Healthcheck>,
    /// Each mount's options beyond read-only, by its target (not encoded when none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub mount_options: BTreeMap<String, String>,
    /// The fixed addresses on networks (not encoded when none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub addresses: BTreeMap<String, String>,
    /// Every other option, less what the image and the engine give (not encoded when none).
    #[serde(skip_serializing_if = "ContainerOptions::is_empty")]
    pub options: ContainerOptions,
}

impl Effective {
    /// The declared container's, created from an image with `defaults` on an engine with
    /// `engine`'s.
    pub fn of_declared(
        entry: &ContainerEntry,
        defaults: &ImageDefaults,
        engine: &EngineFacts,
    ) -> Self {
        let ports: Vec<LivePort> = entry
            .ports
            .iter()
            .map(|p| LivePort {
                host_port: p.host_port.get(),
                container_port: p.container_port.get(),
                protocol: p.protocol,
                host_ip: p.host_ip.to_string(),
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let options = normalized(&entry.options, defaults, engine, &published_ports(&ports));
        let mut environment = defaults.environment.clone();
        environment.extend(entry.environment.clone());
        let mut labels = defaults.labels.clone();
        labels.extend(entry.labels.clone());
        Effective {
            image: entry.image.clone(),
            command: if entry.command.is_empty() {
                defaults.command.clone()
            } else {
                entry.command.clone()
            },
            environment,
            labels,
            ports,
            volumes: entry
                .volumes
                .iter()
                .map(|v| (v.source.clone(), v.target.clone(), v.read_only))
                .collect(),
            mount_options: entry
                .volumes
                .iter()
                .map(|v| {
                    let mut mode = v.clone();
                    mode.read_only = false;
                    // A named volume is relabelled `z` by the engine anyway (see the reading).
                    if !v.source.starts_with('/') && v.selinux.as_deref() == Some("z") {
                        mode.selinux = None;
                    }
                    (v.target.clone(), mode.mode())
                })
                .filter(|(_, mode)| !mode.is_empty())
                .collect(),
            stop_timeout: entry.stop_timeout,
            restart: entry.restart.clone(),
            networks: networks_of(&entry.networks),
            addresses: addresses_of(&entry.networks),
            healthcheck: Healthcheck::merged(
                entry.healthcheck.as_ref(),
                defaults.healthcheck.as_ref(),
            ),
            options,
        }
    }

    /// Its digest: the spec hash `mesh import --check` compares (`b3:…`).
    pub fn digest(&self) -> String {
        let bytes = crate::canonical::to_canonical_json(self).unwrap_or_default();
        format!("b3:{}", blake3::hash(&bytes).to_hex())
    }
}

/// One field in which a declared container differs from the live one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// The field (`image`, `environment NAME`, `ports`, …).
    pub field: String,
    /// What the declaration gives (a credential's value never: `(a credential)`).
    pub declared: String,
    /// What runs.
    pub found: String,
}

/// Every field in which the declared container (created from the live one's image) differs
/// from the live one, and the image: a reference that names another image now than the one
/// the container runs is a difference, since a create would run the other. Values of variables
/// that look like credentials are not shown.
pub fn compare(entry: &ContainerEntry, live: &LiveContainer) -> Vec<Difference> {
    compare_hiding(entry, live, &BTreeSet::new())
}

/// [`compare`], showing the value of no environment variable `hidden` names (those a
/// declaration gives as secrets): `(a secret)`.
pub fn compare_hiding(
    entry: &ContainerEntry,
    live: &LiveContainer,
    hidden: &BTreeSet<String>,
) -> Vec<Difference> {
    let defaults = live.image_defaults.clone().unwrap_or_default();
    let d = declared_effective(entry, live);
    let l = live.effective();
    let mut out = Vec::new();
    let mut differ = |field: String, declared: String, found: String| {
        if declared != found {
            out.push(Difference {
                field,
                declared,
                found,
            });
        }
    };
    differ("image".into(), d.image.clone(), l.image.clone());
    if d.image == l.image && !defaults.id.is_empty() && defaults.id != live.image_id {
        differ(
            "image id".into(),
            format!("{} (what {} names now)", short(&defaults.id), d.image),
            short(&live.image_id),
        );
    }
    differ(
        "command".into(),
        format!("{:?}", d.command),
        format!("{:?}", l.command),
    );
    let keys: BTreeSet<&String> = d.environment.keys().chain(l.environment.keys()).collect();
    for k in keys {
        let hide = |v: Option<&String>| match v {
            None => "(unset)".to_owned(),
            Some(_) if hidden.contains(k.as_str()) => "(a secret)".to_owned(),
            Some(v) if looks_like_credential(k, v).is_some() => "(a credential)".to_owned(),
            Some(v) => format!("{v:?}"),
        };
        if d.environment.get(k) != l.environment.get(k) {
            out.push(Difference {
                field: format!("environment {k}"),
                declared: hide(d.environment.get(k)),
                found: hide(l.environment.get(k)),
            });
        }
    }
    let mut differ = |field: String, declared: String, found: String| {
        if declared != found {
            out.push(Difference {
                field,
                declared,
                found,
            });
        }
    };
    let keys: BTreeSet<&String> = d.labels.keys().chain(l.labels.keys()).collect();
    for k in keys {
        let show = |v: Option<&String>| v.map_or("(unset)".to_owned(), |v| format!("{v:?}"));
        differ(
            format!("label {k}"),
            show(d.labels.get(k)),
            show(l.labels.get(k)),
        );
    }
    let ports = |p: &[LivePort]| {
        p.iter()
            .map(|p| {
                format!(
                    "{}:{}->{}/{}",
                    p.host_ip, p.host_port, p.container_port, p.protocol
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    differ("ports".into(), ports(&d.ports), ports(&l.ports));
    let volumes = |v: &BTreeSet<(String, String, bool)>| {
        v.iter()
            .map(|(s, t, ro)| format!("{s}:{t}{}", if *ro { ":ro" } else { "" }))
            .collect::<Vec<_>>()
            .join(", ")
    };
    differ("volumes".into(), volumes(&d.volumes), volumes(&l.volumes));
    let opt = |v: Option<String>| v.unwrap_or_else(|| "(unset)".into());
    differ(
        "stop_timeout".into(),
        opt(d.stop_timeout.map(|t| t.to_string())),
        opt(l.stop_timeout.map(|t| t.to_string())),
    );
    differ("restart".into(), opt(d.restart), opt(l.restart));
    let networks = |n: &BTreeMap<String, BTreeSet<String>>| {
        if n.is_empty() {
            return "(the default bridge)".to_owned();
        }
        n.iter()
            .map(|(name, aliases)| {
                if aliases.is_empty() {
                    name.clone()
                } else {
                    let aliases: Vec<&str> = aliases.iter().map(String::as_str).collect();
                    format!("{name} as {}", aliases.join(", "))
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    differ(
        "networks".into(),
        networks(&d.networks),
        networks(&l.networks),
    );
    let check = |h: &Option<Healthcheck>| {
        h.as_ref()
            .map_or("(none)".to_owned(), Healthcheck::describe)
    };
    differ(
        "healthcheck".into(),
        check(&d.healthcheck),
        check(&l.healthcheck),
    );
    let targets: BTreeSet<&String> = d
        .mount_options
        .keys()
        .chain(l.mount_options.keys())
        .collect();
    for t in targets {
        let show = |m: &BTreeMap<String, String>| m.get(t).cloned().unwrap_or_default();
        differ(
            format!("volume {t} options"),
            show(&d.mount_options),
            show(&l.mount_options),
        );
    }
    let named: BTreeSet<&String> = d.addresses.keys().chain(l.addresses.keys()).collect();
    for n in named {
        let show = |m: &BTreeMap<String, String>| {
            m.get(n)
                .cloned()
                .unwrap_or_else(|| "(the network's choice)".into())
        };
        differ(
            format!("address on {n}"),
            show(&d.addresses),
            show(&l.addresses),
        );
    }
    for (name, declared, found) in option_differences(&d.options, &l.options) {
        differ(name.into(), declared, found);
    }
    out
}

/// Each option `a` and `b` set otherwise: (its name, `a`'s value, `b`'s), for people (`(unset)`
/// for one not set), in [`crate::options::FIELDS`]' order.
pub fn option_differences(
    a: &ContainerOptions,
    b: &ContainerOptions,
) -> Vec<(&'static str, String, String)> {
    let (a, b) = (a.fields(), b.fields());
    let value = |set: &[(&'static str, Value)], name: &str| {
        set.iter()
            .find(|(n, _)| *n == name)
            .map_or("(unset)".to_owned(), |(n, v)| {
                crate::options::describe(n, v)
            })
    };
    crate::options::FIELDS
        .iter()
        .map(|f| (f.name, value(&a, f.name), value(&b, f.name)))
        .filter(|(_, x, y)| x != y)
        .collect()
}

/// The declared container's spec once created, from the live one's image. A declared image
/// pinned by digest (by hand or by the image lock) that is the very image the live container
/// runs — the image its reference names is the one running, and a registry knows it by that
/// digest — is the live reference: `app:1@sha256:…` declared for a container created from
/// `app:1` is the same container, not one to recreate.
pub fn declared_effective(entry: &ContainerEntry, live: &LiveContainer) -> Effective {
    let defaults = live.image_defaults.clone().unwrap_or_default();
    let mut d = Effective::of_declared(entry, &defaults, &live.engine);
    if runs_pinned(entry, live, &defaults) {
        d.image = live.image.clone();
    }
    d
}

fn runs_pinned(entry: &ContainerEntry, live: &LiveContainer, defaults: &ImageDefaults) -> bool {
    let (Some(_), Ok(declared), Ok(found)) = (
        entry.digest.as_ref(),
        crate::image::ImageRef::parse(&entry.image),
        crate::image::ImageRef::parse(&live.image),
    ) else {
        return false;
    };
    !defaults.id.is_empty()
        && defaults.id == live.image_id
        && declared.familiar() == found.familiar()
        && defaults
            .repo_digests
            .iter()
            .any(|e| declared.matches_repo_digest(e))
}

/// Whether the declared container is the live one as it is: no difference and nothing the
/// declaration cannot say. A take keeps such a container in place.
pub fn is_equal(entry: &ContainerEntry, live: &LiveContainer) -> bool {
    live.gaps.is_empty() && compare(entry, live).is_empty()
}

fn short(id: &str) -> String {
    let hex = id.trim_start_matches("sha256:");
    format!("sha256:{}", &hex[..hex.len().min(12)])
}

/// The labels compose puts on a project's containers: the project, its folder, its files.
pub const COMPOSE_PROJECT: &str = "com.docker.compose.project";
const COMPOSE_WORKING_DIR: &str = "com.docker.compose.project.working_dir";
const COMPOSE_CONFIG_FILES: &str = "com.docker.compose.project.config_files";

impl LiveContainer {
    /// The compose files its project was started from, as host paths (compose v1 writes them
    /// relative to the project's folder, v2 absolute); none for a container compose did not
    /// start.
    pub fn compose_files(&self) -> Vec<std::path::PathBuf> {
        let Some(files) = self.labels.get(COMPOSE_CONFIG_FILES) else {
            return Vec::new();
        };
        let folder = self
            .labels
            .get(COMPOSE_WORKING_DIR)
            .map(Path::new)
            .unwrap_or(Path::new("/"));
        files
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(|f| folder.join(f).components().collect())
            .collect()
    }
}

/// The environment files a compose file names: each service's `env_file` (a path, a list of
/// paths, or of `{ path, required }`), as paths from the compose file's `folder`. An error
/// when it is not a compose file's YAML.
pub fn compose_env_files(
    text: &str,
    folder: &Path,
) -> Result<BTreeSet<std::path::PathBuf>, String> {
    let doc: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    let mut out = BTreeSet::new();
    let Some(services) = doc.get("services") else {
        return Ok(out);
    };
    let services = services
        .as_mapping()
        .ok_or("its `services` is not a map of services")?;
    for service in services.values() {
        let named = match service.get("env_file") {
            None => continue,
            Some(serde_yaml::Value::Sequence(list)) => list.clone(),
            Some(one) => vec![one.clone()],
        };
        for entry in named {
            let path = match &entry {
                serde_yaml::Value::String(p) => p.clone(),
                other => other
                    .get("path")
                    .and_then(serde_yaml::Value::as_str)
                    .ok_or("an `env_file` entry is neither a path nor { path }")?
                    .to_owned(),
            };
            // `./c.env` is `c.env`: a path's components drop an inner `.`.
            out.insert(folder.join(path).components().collect());
        }
    }
    Ok(out)
}

/// Whether a found container's recorded spec (canonical JSON with an `Env` list of
/// `NAME=VALUE`) gives a variable whose value looks like a credential.
pub fn spec_holds_credential(spec: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<Value>(spec) else {
        return false;
    };
    env_map(&v["Env"])
        .iter()
        .any(|(k, v)| looks_like_credential(k, v).is_some())
}

/// Why an environment variable looks like a credential (`by name`, `by entropy`), if it does:
/// its value is then never written in clear.
pub fn looks_like_credential(name: &str, value: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    const WORDS: [&str; 9] = [
        "PASSWORD",
        "PASSWD",
        "SECRET",
        "TOKEN",
        "CREDENTIAL",
        "PRIVATE",
        "APIKEY",
        "ACCESSKEY",
        "PASSPHRASE",
    ];
    const SEGMENTS: [&str; 6] = ["KEY", "PASS", "PWD", "SALT", "AUTH", "DSN"];
    let squashed: String = upper.chars().filter(|c| *c != '_' && *c != '-').collect();
    if WORDS.iter().any(|w| squashed.contains(w))
        || upper.split(['_', '-', '.']).any(|s| SEGMENTS.contains(&s))
    {
        return Some("by name");
    }
    // A URL with a password in it (`postgres://u:p@db/x`).
    if let Some((_, rest)) = value.split_once("://") {
        let authority = rest.split('/').next().unwrap_or_default();
        if authority
            .split_once('@')
            .is_some_and(|(user, _)| user.contains(':'))
        {
            return Some("by entropy");
        }
        return None;
    }
    if high_entropy(value) {
        return Some("by entropy");
    }
    None
}

/// A value long, varied and random enough to be a key or a token: at least 16 characters, no
/// space, not a path, of at least two kinds of character, and over 3.5 bits of entropy per
/// character.
fn high_entropy(value: &str) -> bool {
    if value.len() < 16 || value.contains(char::is_whitespace) || value.starts_with('/') {
        return false;
    }
    let kinds = [
        value.bytes().any(|b| b.is_ascii_lowercase()),
        value.bytes().any(|b| b.is_ascii_uppercase()),
        value.bytes().any(|b| b.is_ascii_digit()),
        value.bytes().any(|b| !b.is_ascii_alphanumeric()),
    ]
    .iter()
    .filter(|k| **k)
    .count();
    if kinds < 2 {
        return false;
    }
    let mut counts: BTreeMap<u8, usize> = BTreeMap::new();
    for b in value.bytes() {
        *counts.entry(b).or_default() += 1;
    }
    let n = value.len() as f64;
    let entropy: f64 = counts
        .values()
        .map(|c| {
            let p = *c as f64 / n;
            -p * p.log2()
        })
        .sum();
    entropy > 3.5
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `inspect` and its image's read under the root `/`, on an engine as it ships.
    fn read_at(inspect: &Value, image: Option<&Value>) -> LiveContainer {
        let (engine, names, inherited) = (EngineFacts::default(), BTreeMap::new(), BTreeSet::new());
        let around = Around {
            root: Path::new("/"),
            engine: &engine,
            names: &names,
            inherited: &inherited,
        };
        LiveContainer::from_inspect(inspect, image, &around)
    }

    fn inspect() -> Value {
        json!({
            "Name": "/web",
            "Id": "c0ffee",
            "Image": "sha256:aaaa",
            "State": {"Running": true},
            "Config": {
                "Image": "busy:1",
                "Cmd": ["httpd", "-f"],
                "Entrypoint": null,
                "Env": ["MODE=prod", "PATH=/bin", "DB_PASSWORD=hunter2"],
                "Labels": {"team": "web", "from.image": "x"},
                "StopTimeout": 3,
            },
            "HostConfig": {
                "PortBindings": {"80/tcp": [{"HostIp": "", "HostPort": "8080"}]},
                "RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0},
                "NetworkMode": "bridge",
            },
            "Mounts": [{"Type": "volume", "Name": "data", "Destination": "/data", "RW": true}],
        })
    }

    fn image() -> Value {
        json!({"Id": "sha256:aaaa", "Config": {"Env": ["PATH=/bin"], "Labels": {"from.image": "x"}, "Cmd": ["sh"]}})
    }

    fn declared() -> ContainerEntry {
        serde_json::from_value(json!({
            "module": "web",
            "image": "busy:1",
            "command": ["httpd", "-f"],
            "environment": {"MODE": "prod", "DB_PASSWORD": "hunter2"},
            "ports": [{"host_ip": "0.0.0.0", "host_port": 8080, "container_port": 80, "protocol": "tcp"}],
            "volumes": [{"source": "data", "target": "/data", "read_only": false}],
            "labels": {"team": "web"},
            "stop_timeout": 3,
            "restart": "unless-stopped",
            "state": {"kind": "managed"},
        }))
        .unwrap()
    }

    /// A declaration that says what the container was given (not what its image gives) is
    /// equal to it: same spec hash.
    #[test]
    fn declared_part_merged_with_the_image_is_the_live_container() {
        let live = read_at(&inspect(), Some(&image()));
        assert!(live.gaps.is_empty(), "{:?}", live.gaps);
        let part = live.declared_part();
        assert_eq!(part.command, Some(vec!["httpd".into(), "-f".into()]));
        assert!(!part.environment.contains_key("PATH"));
        assert!(!part.labels.contains_key("from.image"));
        assert_eq!(compare(&declared(), &live), vec![]);
        assert!(is_equal(&declared(), &live));
        assert_eq!(
            Effective::of_declared(
                &declared(),
                live.image_defaults.as_ref().unwrap(),
                &live.engine
            )
            .digest(),
            live.effective().digest()
        );
    }

    /// A difference is named by its field, and a credential's value is never shown.
    #[test]
    fn a_difference_is_named_and_a_credential_hidden() {
        let live = read_at(&inspect(), Some(&image()));
        let mut d = declared();
        d.environment.insert("DB_PASSWORD".into(), "other".into());
        d.restart = None;
        let diffs = compare(&d, &live);
        let fields: Vec<&str> = diffs.iter().map(|d| d.field.as_str()).collect();
        assert_eq!(fields, ["environment DB_PASSWORD", "restart"]);
        assert!(!format!("{diffs:?}").contains("hunter2"));
    }

    /// A tag that names another image now than the one the container runs is a difference.
    #[test]
    fn a_moved_tag_is_a_difference() {
        let mut img = image();
        img["Id"] = json!("sha256:bbbb");
        let live = read_at(&inspect(), Some(&img));
        assert_eq!(compare(&declared(), &live)[0].field, "image id");
    }

    /// An image pinned by digest (the lock's or by hand) for a container created from its tag
    /// is the same container when the image running is the one a registry knows by that digest;
    /// another digest, or another repository, is a difference.
    #[test]
    fn a_pinned_image_is_the_container_its_tag_created() {
        let digest = format!("sha256:{}", "d".repeat(64));
        let mut img = image();
        img["RepoDigests"] = json!([format!("busy@{digest}")]);
        let live = read_at(&inspect(), Some(&img));
        let mut d = declared();
        d.image = format!("busy:1@{digest}");
        d.digest = Some(crate::image::ImageDigest::try_from(digest.as_str()).unwrap());
        assert_eq!(
            live.pinned_image(),
            Some(d.image.clone()),
            "what an import writes"
        );
        assert_eq!(compare(&d, &live), vec![]);
        assert_eq!(
            declared_effective(&d, &live).digest(),
            live.effective().digest()
        );
        let other = format!("sha256:{}", "e".repeat(64));
        let mut moved = d.clone();
        moved.image = format!("busy:1@{other}");
        moved.digest = Some(crate::image::ImageDigest::try_from(other.as_str()).unwrap());
        assert_eq!(compare(&moved, &live)[0].field, "image");
        let mut elsewhere = d.clone();
        elsewhere.image = format!("other/busy:1@{digest}");
        assert_eq!(compare(&elsewhere, &live)[0].field, "image");
    }

    /// A container on a network of its own (a compose project's), with aliases and a health
    /// check beside its image's, is declared with both and equal; another alias, another
    /// network, or another interval is a difference, named.
    #[test]
    fn networks_and_a_healthcheck_are_declared_and_compared() {
        let mut i = inspect();
        i["Id"] = json!(format!("c0ffee012345{}", "9".repeat(52)));
        i["HostConfig"]["NetworkMode"] = json!("proj_default");
        i["NetworkSettings"] = json!({"Networks": {
            "proj_default": {"Aliases": ["web", "proj-web-1", "c0ffee012345"], "IPAMConfig": null},
            "back": {"Aliases": null},
        }});
        i["Config"]["Healthcheck"] = json!({
            "Test": ["CMD-SHELL", "wget -q localhost"], "Interval": 5_000_000_000u64,
            "Timeout": 0, "Retries": 3,
        });
        let mut img = image();
        img["Config"]["Healthcheck"] = json!({"Test": ["CMD", "true"], "Retries": 3});
        let live = read_at(&i, Some(&img));
        assert!(live.gaps.is_empty(), "{:?}", live.gaps);
        assert_eq!(
            live.networks,
            vec![
                ContainerNetwork::new("back", vec![]),
                ContainerNetwork::new("proj_default", vec!["proj-web-1".into(), "web".into()]),
            ],
            "the short id an older engine adds is not an alias"
        );
        let part = live.declared_part();
        let check = part.healthcheck.clone().expect("not the image's");
        assert_eq!(check.test, ["CMD-SHELL", "wget -q localhost"]);
        let mut d = declared();
        d.networks = live.networks.clone();
        d.healthcheck = Some(check);
        assert_eq!(compare(&d, &live), vec![]);
        assert_eq!(
            declared_effective(&d, &live).digest(),
            live.effective().digest()
        );
        // Given the interval alone, the test and the retries are the image's.
        let mut interval_only = d.clone();
        interval_only.healthcheck = Some(Healthcheck {
            test: vec![],
            interval: Some(5_000_000_000),
            timeout: None,
            retries: None,
            start_period: None,
        });
        let fields = |d: &ContainerEntry| -> Vec<String> {
            compare(d, &live).into_iter().map(|x| x.field).collect()
        };
        assert_eq!(fields(&interval_only), ["healthcheck"]);
        let mut alias = d.clone();
        alias.networks[1].aliases.pop();
        assert_eq!(fields(&alias), ["networks"]);
        let mut bridge = d.clone();
        bridge.networks.clear();
        let differences = compare(&bridge, &live);
        assert_eq!(differences[0].declared, "(the default bridge)");
        let mut none = d.clone();
        none.healthcheck = None;
        assert_eq!(
            fields(&none),
            ["healthcheck"],
            "the image's is another check"
        );
        // On the default bridge, no network is declared.
        let plain = read_at(&inspect(), Some(&image()));
        assert!(plain.networks.is_empty());
        // A fixed address on a network is declared, and compared.
        i["NetworkSettings"]["Networks"]["back"]["IPAMConfig"] = json!({"IPv4Address": "10.5.0.9"});
        let fixed = read_at(&i, Some(&img));
        assert!(fixed.gaps.is_empty(), "{:?}", fixed.gaps);
        assert_eq!(fixed.networks[0].ipv4_address, Some([10, 5, 0, 9].into()));
        assert_eq!(
            compare(&d, &fixed)
                .into_iter()
                .map(|x| (x.field, x.declared))
                .collect::<Vec<_>>(),
            [(
                "address on back".to_owned(),
                "(the network's choice)".to_owned()
            )]
        );
        let mut at = d.clone();
        at.networks[0].ipv4_address = Some([10, 5, 0, 9].into());
        assert!(is_equal(&at, &fixed));
    }

    /// A mount's options are read as a declaration gives them: a bind's propagation and SELinux
    /// label, a volume's `nocopy`; the `z` the engine gives every named volume is none of them.
    #[test]
    fn a_mounts_options_and_the_engines_own() {
        let mut i = inspect();
        i["Mounts"] = json!([
            {"Type": "volume", "Name": "data", "Destination": "/data", "Mode": "z", "RW": true},
            {"Type": "volume", "Name": "keep", "Destination": "/keep", "Mode": "nocopy", "RW": true},
            {"Type": "bind", "Source": "/srv/b", "Destination": "/b", "Mode": "ro,rslave,z",
                "RW": false, "Propagation": "rslave"},
        ]);
        let live = read_at(&i, Some(&image()));
        let modes: Vec<String> = live.mounts.iter().map(LiveMount::mode).collect();
        assert_eq!(modes, ["rslave,z", "", "nocopy"], "{:?}", live.mounts);
        let mut d = declared();
        d.volumes = vec![
            crate::model::Volume::new("data", "/data", false),
            crate::model::Volume {
                nocopy: true,
                ..crate::model::Volume::new("keep", "/keep", false)
            },
            crate::model::Volume {
                propagation: Some("rslave".into()),
                selinux: Some("z".into()),
                ..crate::model::Volume::new("/srv/b", "/b", true)
            },
        ];
        assert_eq!(compare(&d, &live), vec![]);
        // `z` said of the named volume is what the engine does anyway: equal too.
        d.volumes[0].selinux = Some("z".into());
        assert_eq!(compare(&d, &live), vec![]);
        d.volumes[2].propagation = None;
        assert_eq!(compare(&d, &live)[0].field, "volume /b options");
    }

    /// A compose file's environment files, in each form compose reads, from its folder; the
    /// project's files from its labels, as v1 (relative) and v2 (absolute) write them.
    #[test]
    fn a_compose_projects_files() {
        let text = "services:\n  a:\n    env_file: a.env\n  b:\n    env_file: [b.env, /etc/shared.env]\n  c:\n    env_file:\n      - path: ./c.env\n        required: false\n  d:\n    image: x\n";
        let files = compose_env_files(text, Path::new("/srv/app")).unwrap();
        let files: Vec<&str> = files.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(
            files,
            [
                "/etc/shared.env",
                "/srv/app/a.env",
                "/srv/app/b.env",
                "/srv/app/c.env"
            ]
        );
        assert!(compose_env_files("services: [1, 2]", Path::new("/")).is_err());
        assert!(compose_env_files(": : :", Path::new("/")).is_err());
        let mut live = read_at(&inspect(), Some(&image()));
        live.labels
            .insert(COMPOSE_WORKING_DIR.into(), "/srv/app".into());
        live.labels.insert(
            COMPOSE_CONFIG_FILES.into(),
            "docker-compose.yml,/srv/o.yml".into(),
        );
        assert_eq!(
            live.compose_files(),
            [
                Path::new("/srv/app/docker-compose.yml"),
                Path::new("/srv/o.yml")
            ]
        );
    }

    /// What a declaration cannot say (a network, an entrypoint of its own) is a gap, named.
    #[test]
    fn what_cannot_be_declared_is_a_gap() {
        let mut i = inspect();
        i["HostConfig"]["NetworkMode"] = json!("host");
        i["HostConfig"]["AutoRemove"] = json!(true);
        i["HostConfig"]["CpusetMems"] = json!("0");
        i["Config"]["Entrypoint"] = json!(["/init"]);
        let live = read_at(&i, Some(&image()));
        let what: Vec<&str> = live.gaps.iter().map(|g| g.what.as_str()).collect();
        assert_eq!(what, ["HostConfig.AutoRemove", "HostConfig.CpusetMems"]);
        // What a declaration can say, it says: then only the gaps keep it from being equal.
        let mut d = declared();
        d.options.network_mode = Some("host".into());
        d.options.entrypoint = Some(vec!["/init".into()]);
        assert_eq!(compare(&d, &live), vec![]);
        assert!(!is_equal(&d, &live));
        let fields: Vec<String> = compare(&declared(), &live)
            .into_iter()
            .map(|x| x.field)
            .collect();
        assert_eq!(fields, ["entrypoint", "network_mode"]);
    }

    /// Credentials are told by name and by entropy; plain settings are not.
    #[test]
    fn credentials_by_name_and_by_entropy() {
        assert_eq!(looks_like_credential("DB_PASSWORD", "x"), Some("by name"));
        assert_eq!(looks_like_credential("API_KEY", "x"), Some("by name"));
        assert_eq!(looks_like_credential("GITHUB_TOKEN", ""), Some("by name"));
        assert_eq!(
            looks_like_credential("UPSTREAM", "aK8s9Qz2LmP4xR7vT1wB"),
            Some("by entropy")
        );
        assert_eq!(
            looks_like_credential("DATABASE_URL", "postgres://app:s3cret@db/app"),
            Some("by entropy")
        );
        assert_eq!(looks_like_credential("MODE", "production"), None);
        assert_eq!(looks_like_credential("KEYBOARD", "us"), None);
        assert_eq!(
            looks_like_credential("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin"),
            None
        );
        assert_eq!(
            looks_like_credential("URL", "https://example.org/a/b"),
            None
        );
    }
}
