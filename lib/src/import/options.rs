//! A live container's [`ContainerOptions`] read back from `docker inspect`: what a declaration
//! has to say for a create to give the same container — each value neither its engine nor its
//! image gives by itself — and, named as a [`Gap`], every setting in effect that no declaration
//! can say.
//!
//! Invariants: both sides of a comparison go through [`normalized`] against the same image and
//! engine defaults, so a value a declaration writes out and the default it equals compare
//! equal; every key of the inspect data's `Config` and `HostConfig` is either read here, read
//! by [`super::LiveContainer::from_inspect`], known to carry nothing a create gives, or — when it
//! is not at its zero value — a gap. Nothing in effect is dropped silently.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{str_of, string_map, strings, Gap, ImageDefaults};
use crate::options::{
    capability, exposed_port, tmpfs_options, BlkioConfig, ContainerOptions, Device, Logging, Ulimit,
};

/// `/dev/shm`'s size when a create does not say it.
pub const DEFAULT_SHM_SIZE: i64 = 64 << 20;

/// What the engine gives a container whose create does not say otherwise (from `docker info`),
/// and the name of the host it runs on (a container on the host's network has it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineFacts {
    /// The default OCI runtime (`runc`).
    pub runtime: String,
    /// The default cgroup namespace: `host` under cgroup v1, `private` under v2.
    pub cgroupns: String,
    /// The default logging driver (`json-file`).
    pub log_driver: String,
    /// The host's name.
    #[serde(default)]
    pub host_name: String,
    /// The API version spoken with it (`1.41`), when known.
    #[serde(default)]
    pub api_version: String,
}

impl Default for EngineFacts {
    /// An engine as it ships, on cgroup v2.
    fn default() -> Self {
        Self {
            runtime: "runc".into(),
            cgroupns: "private".into(),
            log_driver: "json-file".into(),
            host_name: String::new(),
            api_version: String::new(),
        }
    }
}

impl EngineFacts {
    /// From `docker info` data.
    pub fn from_info(info: &Value) -> Self {
        let or = |v: &Value, default: &str| {
            Some(str_of(v))
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| default.to_owned())
        };
        Self {
            runtime: or(&info["DefaultRuntime"], "runc"),
            cgroupns: if str_of(&info["CgroupVersion"]) == "1" {
                "host".into()
            } else {
                "private".into()
            },
            log_driver: or(&info["LoggingDriver"], "json-file"),
            host_name: str_of(&info["Name"]),
            api_version: String::new(),
        }
    }

    /// Whether the engine makes a container's MAC address from its IPv4 address (02:42 and the
    /// address's bytes), as engines before API 1.44 do: then a MAC address that is not so was
    /// given.
    pub fn makes_mac_from_ip(&self) -> bool {
        let mut parts = self.api_version.split('.').map(|p| p.parse::<u32>());
        matches!((parts.next(), parts.next()), (Some(Ok(1)), Some(Ok(minor))) if minor < 44)
    }
}

/// What reading a container needs beyond its own inspect data and its image's.
#[derive(Debug, Clone, Copy)]
pub struct Around<'a> {
    /// Where declared paths are (a bind mount's source is named as a declared path).
    pub root: &'a std::path::Path,
    /// The engine's defaults.
    pub engine: &'a EngineFacts,
    /// Containers its namespaces are shared with, by id (`container:ID`, as the engine keeps
    /// them) → their names, as a declaration names them.
    pub names: &'a BTreeMap<String, String>,
    /// The mount targets it has from the containers of its `VolumesFrom` (not its own).
    pub inherited: &'a BTreeSet<String>,
}

/// The keys of `Config` and `HostConfig` that carry nothing a create gives or that are read
/// elsewhere: never a gap. Every other key not at its zero value and not read into
/// [`ContainerOptions`] is one.
const KNOWN: &[&str] = &[
    // Read by `LiveContainer::from_inspect`.
    "Config.Image",
    "Config.Cmd",
    "Config.Env",
    "Config.Labels",
    "Config.StopTimeout",
    "Config.Healthcheck",
    "HostConfig.PortBindings",
    "HostConfig.RestartPolicy",
    "HostConfig.Binds",
    "HostConfig.NetworkMode",
    "HostConfig.Mounts",
    // The image's, or the mounts already read.
    "Config.Volumes",
    "Config.OnBuild",
    "Config.ArgsEscaped",
    // How a client attached when it ran it, not what runs.
    "Config.AttachStdin",
    "Config.AttachStdout",
    "Config.AttachStderr",
    "HostConfig.ContainerIDFile",
    "HostConfig.ConsoleSize",
    // Filled by the engine from the privileges and security options (`systempaths=`).
    "HostConfig.MaskedPaths",
    "HostConfig.ReadonlyPaths",
    // Compared with the image's below.
    "Config.Shell",
];

/// The keys read into [`ContainerOptions`] by [`read`].
const READ: &[&str] = &[
    "Config.Entrypoint",
    "Config.User",
    "Config.WorkingDir",
    "Config.Hostname",
    "Config.Domainname",
    "Config.Tty",
    "Config.OpenStdin",
    "Config.StopSignal",
    "Config.ExposedPorts",
    "HostConfig.Annotations",
    "HostConfig.Runtime",
    "HostConfig.PidMode",
    "HostConfig.IpcMode",
    "HostConfig.UTSMode",
    "HostConfig.UsernsMode",
    "HostConfig.CgroupnsMode",
    "HostConfig.CgroupParent",
    "HostConfig.Privileged",
    "HostConfig.ReadonlyRootfs",
    "HostConfig.CapAdd",
    "HostConfig.CapDrop",
    "HostConfig.SecurityOpt",
    "HostConfig.GroupAdd",
    "HostConfig.Devices",
    "HostConfig.DeviceCgroupRules",
    "HostConfig.Sysctls",
    "HostConfig.Ulimits",
    "HostConfig.StorageOpt",
    "HostConfig.Memory",
    "HostConfig.MemoryReservation",
    "HostConfig.MemorySwap",
    "HostConfig.MemorySwappiness",
    "HostConfig.OomScoreAdj",
    "HostConfig.NanoCpus",
    "HostConfig.CpuShares",
    "HostConfig.CpusetCpus",
    "HostConfig.CpuQuota",
    "HostConfig.CpuPeriod",
    "HostConfig.BlkioWeight",
    "HostConfig.PidsLimit",
    "HostConfig.ShmSize",
    "HostConfig.Dns",
    "HostConfig.DnsSearch",
    "HostConfig.DnsOptions",
    "HostConfig.ExtraHosts",
    "HostConfig.LogConfig",
    "HostConfig.Links",
    "HostConfig.VolumesFrom",
    "HostConfig.Tmpfs",
    "HostConfig.OomKillDisable",
    "HostConfig.Init",
];

/// Whether a value says nothing: null, false, zero, empty.
pub(super) fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty() || o.values().all(is_zero),
    }
}

/// Every setting of `Config` and `HostConfig` in effect that neither [`read`] nor the rest of
/// the reading takes: a gap each (`HostConfig.CpusetMems`, `Config.StdinOnce`).
pub(super) fn unread(inspect: &Value, image: &ImageDefaults) -> Vec<Gap> {
    let mut gaps = Vec::new();
    for section in ["Config", "HostConfig"] {
        for (key, value) in inspect[section].as_object().into_iter().flatten() {
            let what = format!("{section}.{key}");
            if KNOWN.contains(&what.as_str()) || READ.contains(&what.as_str()) || is_zero(value) {
                continue;
            }
            gaps.push(Gap {
                what,
                found: compact(value),
                why:
                    "no declaration says it: a container the mesh creates has the engine's default"
                        .into(),
            });
        }
    }
    // A mount's options beyond what a volume or a tmpfs declares.
    for m in inspect["HostConfig"]["Mounts"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let beyond: Vec<String> = m
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| !is_zero(v) && !declared_in_a_mount(k, v))
            .map(|(k, v)| format!("{k} {}", compact(v)))
            .collect();
        if !beyond.is_empty() {
            gaps.push(Gap {
                what: "HostConfig.Mounts".into(),
                found: format!("{}: {}", str_of(&m["Target"]), beyond.join("; ")),
                why: "a declared volume says its source, target, read-only, propagation, nocopy and SELinux label only".into(),
            });
        }
    }
    // A shell of its own (the image's is what a create gets).
    let shell = strings(&inspect["Config"]["Shell"]);
    if !shell.is_empty() && shell != image.shell {
        gaps.push(Gap {
            what: "Config.Shell".into(),
            found: shell.join(" "),
            why: "no declaration says it: a container the mesh creates has its image's".into(),
        });
    }
    gaps
}

/// Whether a field of a `HostConfig.Mounts` entry says what a declared volume or tmpfs says
/// too: its kind, source, target, read-only, a bind's propagation, a volume's `nocopy`, a
/// tmpfs's size and mode.
fn declared_in_a_mount(key: &str, value: &Value) -> bool {
    let only = |allowed: &[&str]| {
        value.as_object().is_some_and(|o| {
            o.iter()
                .all(|(k, v)| allowed.contains(&k.as_str()) || is_zero(v))
        })
    };
    match key {
        "Type" | "Source" | "Target" | "ReadOnly" | "TmpfsOptions" => true,
        "BindOptions" => only(&["Propagation"]),
        "VolumeOptions" => only(&["NoCopy"]),
        _ => false,
    }
}

fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A namespace mode as a declaration names it: `container:ID` → `container:NAME` when the
/// engine knows the id (else as it is), an empty one `None`.
fn mode(v: &Value, names: &BTreeMap<String, String>) -> Option<String> {
    let m = str_of(v);
    if m.is_empty() {
        return None;
    }
    Some(match m.strip_prefix("container:") {
        Some(id) => format!(
            "container:{}",
            names
                .get(id)
                .map_or(id, String::as_str)
                .trim_start_matches('/')
        ),
        None => m,
    })
}

/// The containers a container names by id in its namespace modes (`container:ID`), for the
/// engine to name.
pub fn shared_with(inspect: &Value) -> Vec<String> {
    ["NetworkMode", "PidMode", "IpcMode"]
        .iter()
        .filter_map(|k| {
            str_of(&inspect["HostConfig"][k])
                .strip_prefix("container:")
                .map(str::to_owned)
        })
        .collect()
}

/// The containers whose volumes a container mounts too (`VolumesFrom`), by name.
pub fn volumes_from(inspect: &Value) -> Vec<String> {
    strings(&inspect["HostConfig"]["VolumesFrom"])
        .into_iter()
        .map(|v| v.split(':').next().unwrap_or_default().to_owned())
        .collect()
}

fn positive(v: &Value) -> Option<i64> {
    v.as_i64().filter(|n| *n > 0)
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}

/// The options of the container `inspect` says, as they are in effect; [`normalized`] then
/// drops what its image and engine give by themselves.
pub(super) fn read(inspect: &Value, around: &Around<'_>) -> ContainerOptions {
    let c = &inspect["Config"];
    let h = &inspect["HostConfig"];
    let text = |v: &Value| Some(str_of(v)).filter(|s| !s.is_empty());
    let network_mode = mode(&h["NetworkMode"], around.names)
        .filter(|m| m == "host" || m == "none" || m.starts_with("container:"));
    // The engine's own host name: the short id, the host's on its network, the donor's on
    // another container's.
    let id = str_of(&inspect["Id"]);
    let hostname = text(&c["Hostname"]).filter(|name| {
        let engine_gave = (name.len() == 12 && id.starts_with(name.as_str()))
            || (network_mode.as_deref() == Some("host") && *name == around.engine.host_name)
            || network_mode
                .as_deref()
                .is_some_and(|m| m.starts_with("container:"));
        !engine_gave
    });
    let mut tmpfs = BTreeMap::new();
    for (target, options) in string_map(&h["Tmpfs"]) {
        tmpfs.insert(target, tmpfs_options(&options).unwrap_or(options));
    }
    for m in h["Mounts"].as_array().into_iter().flatten() {
        if str_of(&m["Type"]) != "tmpfs" {
            continue;
        }
        let o = &m["TmpfsOptions"];
        let mut options = Vec::new();
        if let Some(mode) = o["Mode"].as_u64().filter(|m| *m > 0) {
            options.push(format!("mode={mode:o}"));
        }
        if let Some(size) = positive(&o["SizeBytes"]) {
            options.push(format!("size={size}"));
        }
        tmpfs.insert(str_of(&m["Target"]), options.join(","));
    }
    ContainerOptions {
        entrypoint: Some(strings(&c["Entrypoint"])),
        user: Some(str_of(&c["User"])),
        working_dir: Some(str_of(&c["WorkingDir"])),
        hostname,
        domainname: text(&c["Domainname"]),
        init: h["Init"].as_bool(),
        tty: c["Tty"].as_bool().unwrap_or(false),
        stdin_open: c["OpenStdin"].as_bool().unwrap_or(false),
        stop_signal: text(&c["StopSignal"]),
        expose: sorted(
            c["ExposedPorts"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(p, _)| exposed_port(p).unwrap_or_else(|_| p.clone()))
                .collect(),
        ),
        annotations: string_map(&h["Annotations"]),
        runtime: text(&h["Runtime"]),
        platform: None,
        pid: mode(&h["PidMode"], around.names),
        ipc: mode(&h["IpcMode"], around.names),
        uts: text(&h["UTSMode"]),
        userns_mode: text(&h["UsernsMode"]),
        cgroup: text(&h["CgroupnsMode"]),
        cgroup_parent: text(&h["CgroupParent"]),
        privileged: h["Privileged"].as_bool().unwrap_or(false),
        read_only: h["ReadonlyRootfs"].as_bool().unwrap_or(false),
        cap_add: sorted(
            strings(&h["CapAdd"])
                .iter()
                .map(|c| capability(c))
                .collect(),
        ),
        cap_drop: sorted(
            strings(&h["CapDrop"])
                .iter()
                .map(|c| capability(c))
                .collect(),
        ),
        security_opt: sorted(strings(&h["SecurityOpt"])),
        group_add: sorted(strings(&h["GroupAdd"])),
        devices: {
            let mut d: Vec<Device> = h["Devices"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|d| Device {
                    source: str_of(&d["PathOnHost"]),
                    target: str_of(&d["PathInContainer"]),
                    permissions: str_of(&d["CgroupPermissions"]),
                })
                .collect();
            d.sort();
            d
        },
        device_cgroup_rules: sorted(strings(&h["DeviceCgroupRules"])),
        sysctls: string_map(&h["Sysctls"]),
        ulimits: h["Ulimits"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|u| {
                let soft = u["Soft"].as_i64().unwrap_or(0);
                let hard = u["Hard"].as_i64().unwrap_or(soft);
                (str_of(&u["Name"]), Ulimit { soft, hard })
            })
            .collect(),
        storage_opt: string_map(&h["StorageOpt"]),
        mem_limit: positive(&h["Memory"]),
        mem_reservation: positive(&h["MemoryReservation"]),
        memswap_limit: h["MemorySwap"].as_i64().filter(|n| *n != 0),
        mem_swappiness: h["MemorySwappiness"].as_i64().filter(|n| *n >= 0),
        oom_kill_disable: h["OomKillDisable"].as_bool().unwrap_or(false),
        oom_score_adj: h["OomScoreAdj"].as_i64().filter(|n| *n != 0),
        cpus: positive(&h["NanoCpus"]),
        cpu_shares: positive(&h["CpuShares"]),
        cpuset: text(&h["CpusetCpus"]),
        cpu_quota: positive(&h["CpuQuota"]),
        cpu_period: positive(&h["CpuPeriod"]),
        blkio_config: h["BlkioWeight"]
            .as_u64()
            .and_then(|w| u16::try_from(w).ok())
            .filter(|w| *w > 0)
            .map(|weight| BlkioConfig { weight }),
        pids_limit: positive(&h["PidsLimit"]),
        shm_size: positive(&h["ShmSize"]),
        dns: strings(&h["Dns"]),
        dns_search: strings(&h["DnsSearch"]),
        dns_opt: strings(&h["DnsOptions"]),
        extra_hosts: strings(&h["ExtraHosts"]),
        logging: text(&h["LogConfig"]["Type"]).map(|driver| Logging {
            driver,
            options: string_map(&h["LogConfig"]["Config"]),
        }),
        network_mode,
        // The engine keeps a link as `/NAME:/THIS/ALIAS`.
        links: sorted(
            strings(&h["Links"])
                .iter()
                .map(|l| {
                    let (name, alias) = l.split_once(':').unwrap_or((l, l));
                    let alias = alias.rsplit('/').next().unwrap_or(alias);
                    format!("{}:{alias}", name.trim_start_matches('/'))
                })
                .collect(),
        ),
        volumes_from: strings(&h["VolumesFrom"]),
        tmpfs,
    }
}

/// `options` less what a container gets without saying it: its image's entrypoint, user,
/// working folder, stop signal and exposed ports, the ports it publishes (exposed by
/// publishing them), the engine's runtime, cgroup namespace, IPC mode, logging driver and
/// `/dev/shm` size, a swap limit of twice the memory, the `label=disable` it adds to a
/// container on the host's namespaces. Each side of a comparison is normalized
/// alike, so `user = "app"` declared for an image whose user is `app` is equal to it.
pub fn normalized(
    options: &ContainerOptions,
    image: &ImageDefaults,
    engine: &EngineFacts,
    published: &BTreeSet<String>,
) -> ContainerOptions {
    let mut o = options.clone();
    if o.entrypoint.as_ref() == Some(&image.entrypoint) {
        o.entrypoint = None;
    }
    let not = |value: &mut Option<String>, defaults: &[&str]| {
        if value
            .as_deref()
            .is_some_and(|v| v.is_empty() || defaults.contains(&v))
        {
            *value = None;
        }
    };
    not(&mut o.user, &[&image.user]);
    not(&mut o.working_dir, &[&image.working_dir]);
    match image.stop_signal.as_str() {
        "" => not(&mut o.stop_signal, &["SIGTERM", "TERM", "15"]),
        theirs => not(&mut o.stop_signal, &[theirs]),
    }
    o.expose
        .retain(|p| !image.exposed.contains(p) && !published.contains(p));
    not(&mut o.runtime, &[&engine.runtime]);
    not(&mut o.cgroup, &[&engine.cgroupns]);
    not(&mut o.ipc, &["private"]);
    not(&mut o.network_mode, &["bridge", "default"]);
    if let Some(platform) = &o.platform {
        if image.platform().is_some_and(|p| p == *platform) {
            o.platform = None;
        }
    }
    if o.logging
        .as_ref()
        .is_some_and(|l| l.driver == engine.log_driver && l.options.is_empty())
    {
        o.logging = None;
    }
    if o.shm_size == Some(DEFAULT_SHM_SIZE) {
        o.shm_size = None;
    }
    if let (Some(memory), Some(swap)) = (o.mem_limit, o.memswap_limit) {
        if memory.checked_mul(2) == Some(swap) {
            o.memswap_limit = None;
        }
    }
    // The engine adds `label=disable` itself to a container on the host's process or IPC
    // namespace, or privileged, unless a `label=` option was given.
    let host_ns = o.pid.as_deref() == Some("host") || o.ipc.as_deref() == Some("host");
    let labels = o
        .security_opt
        .iter()
        .filter(|s| s.starts_with("label="))
        .count();
    if (host_ns || o.privileged) && labels == 1 {
        o.security_opt.retain(|s| s != "label=disable");
    }
    for v in &mut o.volumes_from {
        if let Some(name) = v.strip_suffix(":rw") {
            *v = name.to_owned();
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn around<'a>(
        engine: &'a EngineFacts,
        names: &'a BTreeMap<String, String>,
        inherited: &'a BTreeSet<String>,
    ) -> Around<'a> {
        Around {
            root: std::path::Path::new("/"),
            engine,
            names,
            inherited,
        }
    }

    /// What `docker run` with many options shows in inspect data (as this engine showed it):
    /// each read back in its canonical form, and the engine's own values (its short id as the
    /// host name, twice the memory as the swap limit, its runtime) left out.
    #[test]
    fn options_as_the_engine_shows_them() {
        let inspect = json!({
            "Id": "fd8e6320526e296ca7407383cf076808ff52bb4ced811f73c4295eee69e29c9b",
            "Config": {
                "Hostname": "fd8e6320526e", "Domainname": "d.example", "User": "1000:1000",
                "Tty": true, "OpenStdin": true, "StopSignal": "SIGINT",
                "ExposedPorts": {"9000/tcp": {}, "80/tcp": {}}, "WorkingDir": "/tmp",
                "Entrypoint": ["/bin/busybox"],
            },
            "HostConfig": {
                "LogConfig": {"Type": "json-file", "Config": {"max-file": "2", "max-size": "1m"}},
                "NetworkMode": "default", "CapAdd": ["SYS_TIME"], "CapDrop": ["CAP_NET_RAW"],
                "CgroupnsMode": "host", "Dns": ["9.9.9.9"], "DnsOptions": ["ndots:2"],
                "DnsSearch": ["example.org"], "ExtraHosts": ["db.local:10.1.2.3"],
                "GroupAdd": ["10"], "IpcMode": "shareable", "OomScoreAdj": 100, "PidMode": "",
                "ReadonlyRootfs": true, "SecurityOpt": ["no-new-privileges"],
                "Tmpfs": {"/run": "size=16m,mode=1777", "/tmp": ""}, "ShmSize": 33554432,
                "Sysctls": {"net.ipv4.ip_forward": "1"}, "Runtime": "runc", "CpuShares": 512,
                "Memory": 67108864, "NanoCpus": 500000000, "BlkioWeight": 0, "CpusetCpus": "0",
                "Devices": [{"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse", "CgroupPermissions": "rw"}],
                "DeviceCgroupRules": ["c 1:3 rwm"], "MemoryReservation": 33554432,
                "MemorySwap": 134217728, "MemorySwappiness": 10, "OomKillDisable": false,
                "PidsLimit": 100, "Init": true,
                "Ulimits": [{"Name": "nofile", "Hard": 2048, "Soft": 1024}],
                "Links": ["/db:/web/database"],
            },
        });
        let engine = EngineFacts {
            cgroupns: "host".into(),
            ..EngineFacts::default()
        };
        let (names, inherited) = (BTreeMap::new(), BTreeSet::new());
        let image = ImageDefaults {
            exposed: vec!["80/tcp".into()],
            ..ImageDefaults::default()
        };
        let o = normalized(
            &read(&inspect, &around(&engine, &names, &inherited)),
            &image,
            &engine,
            &BTreeSet::new(),
        );
        let expected: ContainerOptions = serde_json::from_value(json!({
            "entrypoint": ["/bin/busybox"], "user": "1000:1000", "working_dir": "/tmp",
            "domainname": "d.example", "init": true, "tty": true, "stdin_open": true,
            "stop_signal": "SIGINT", "expose": ["9000/tcp"], "ipc": "shareable",
            "read_only": true, "cap_add": ["CAP_SYS_TIME"], "cap_drop": ["CAP_NET_RAW"],
            "security_opt": ["no-new-privileges"], "group_add": ["10"],
            "devices": [{"source": "/dev/fuse", "target": "/dev/fuse", "permissions": "rw"}],
            "device_cgroup_rules": ["c 1:3 rwm"], "sysctls": {"net.ipv4.ip_forward": "1"},
            "ulimits": {"nofile": {"soft": 1024, "hard": 2048}},
            "mem_limit": 67108864, "mem_reservation": 33554432, "mem_swappiness": 10,
            "oom_score_adj": 100, "cpus": 500000000, "cpu_shares": 512, "cpuset": "0",
            "pids_limit": 100, "shm_size": 33554432, "dns": ["9.9.9.9"],
            "dns_search": ["example.org"], "dns_opt": ["ndots:2"],
            "extra_hosts": ["db.local:10.1.2.3"],
            "logging": {"driver": "json-file", "options": {"max-file": "2", "max-size": "1m"}},
            "links": ["db:database"],
            "tmpfs": {"/run": "mode=1777,size=16777216", "/tmp": ""},
        }))
        .unwrap();
        assert_eq!(o, expected);
        assert!(unread(&inspect, &image).is_empty());
    }

    /// Another container's namespaces are named by its name, not the id the engine keeps; the
    /// host name it has from there is not its own.
    #[test]
    fn a_shared_namespace_is_named_by_name() {
        let id = "7f473ca8e7fd6f2bc09abcb250371fc7e54768287165be20099fce144c4f1da2";
        let inspect = json!({
            "Id": "6180b4c096c9",
            "Config": {"Hostname": "7f473ca8e7fd"},
            "HostConfig": {"NetworkMode": format!("container:{id}"), "PidMode": "host",
                "IpcMode": format!("container:{id}")},
        });
        assert_eq!(shared_with(&inspect), [id, id]);
        let names = BTreeMap::from([(id.to_owned(), "/db".to_owned())]);
        let engine = EngineFacts::default();
        let inherited = BTreeSet::new();
        let o = read(&inspect, &around(&engine, &names, &inherited));
        assert_eq!(o.network_mode.as_deref(), Some("container:db"));
        assert_eq!(o.ipc.as_deref(), Some("container:db"));
        assert_eq!(o.pid.as_deref(), Some("host"));
        assert_eq!(o.hostname, None);
    }

    /// A tmpfs given by `--mount type=tmpfs` is the tmpfs a declaration's `tmpfs` gives.
    #[test]
    fn a_tmpfs_mount_is_a_tmpfs() {
        let inspect = json!({"HostConfig": {"Mounts": [{"Type": "tmpfs", "Target": "/t",
            "TmpfsOptions": {"SizeBytes": 1048576, "Mode": 448}}]}});
        let (engine, names, inherited) = (EngineFacts::default(), BTreeMap::new(), BTreeSet::new());
        let o = read(&inspect, &around(&engine, &names, &inherited));
        assert_eq!(
            o.tmpfs,
            BTreeMap::from([("/t".to_owned(), tmpfs_options("size=1m,mode=0700").unwrap())])
        );
    }

    /// What no declaration says is a gap, named by where inspect shows it; what carries nothing
    /// a create gives (a client's attach, the engine's masked paths) is not.
    #[test]
    fn what_is_not_read_is_a_gap() {
        let inspect = json!({
            "Config": {"AttachStdout": true, "StdinOnce": true, "Shell": ["/bin/ash", "-c"]},
            "HostConfig": {"AutoRemove": true, "CpusetMems": "0", "ConsoleSize": [24, 80],
                "MaskedPaths": ["/proc/kcore"], "PublishAllPorts": false, "KernelMemory": 0,
                "BlkioDeviceReadBps": [], "Isolation": ""},
        });
        let gaps: Vec<String> = unread(&inspect, &ImageDefaults::default())
            .into_iter()
            .map(|g| format!("{} {}", g.what, g.found))
            .collect();
        assert_eq!(
            gaps,
            [
                "Config.StdinOnce true",
                "HostConfig.AutoRemove true",
                "HostConfig.CpusetMems 0",
                "Config.Shell /bin/ash -c"
            ]
        );
    }

    /// Normalization drops what the image and the engine give, on either side.
    #[test]
    fn defaults_are_dropped() {
        let image = ImageDefaults {
            user: "app".into(),
            working_dir: "/srv".into(),
            entrypoint: vec!["/init".into()],
            ..ImageDefaults::default()
        };
        let engine = EngineFacts::default();
        let given = ContainerOptions {
            user: Some("app".into()),
            working_dir: Some("/srv".into()),
            entrypoint: Some(vec!["/init".into()]),
            stop_signal: Some("SIGTERM".into()),
            runtime: Some("runc".into()),
            cgroup: Some("private".into()),
            ipc: Some("private".into()),
            shm_size: Some(DEFAULT_SHM_SIZE),
            mem_limit: Some(1 << 20),
            memswap_limit: Some(2 << 20),
            expose: vec!["80/tcp".into()],
            logging: Some(Logging {
                driver: "json-file".into(),
                options: BTreeMap::new(),
            }),
            volumes_from: vec!["db:rw".into()],
            pid: Some("host".into()),
            security_opt: vec!["label=disable".into(), "no-new-privileges".into()],
            ..ContainerOptions::default()
        };
        let published = BTreeSet::from(["80/tcp".to_owned()]);
        let n = normalized(&given, &image, &engine, &published);
        assert_eq!(
            n,
            ContainerOptions {
                mem_limit: Some(1 << 20),
                volumes_from: vec!["db".into()],
                pid: Some("host".into()),
                security_opt: vec!["no-new-privileges".into()],
                ..ContainerOptions::default()
            }
        );
    }
}
