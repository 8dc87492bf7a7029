//! What a container is run with beyond its image, command, environment, ports, volumes, labels,
//! stop timeout, restart policy, networks and health check: every other option a `docker run`
//! gives and a compose service sets — limits, security, devices and kernel, DNS and hosts,
//! logging, process and namespaces, tmpfs mounts, the network mode.
//!
//! Invariants:
//! - a value at its default is absent (`None`, `false`, empty), so a container that sets none of
//!   these options encodes exactly as before they existed (its entry's `options` is not encoded:
//!   no generation id moves);
//! - every value is held in one canonical form — capabilities as `CAP_NAME`, sizes in bytes,
//!   CPUs in billionths, sets sorted — so equal containers have equal encodings and a spec
//!   digest changes only when what the engine is given changes;
//! - each field's name is the compose key a declaration writes (`mem_limit`, `cap_add`), and
//!   [`FIELDS`] says where `docker inspect` shows it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

fn is_false(b: &bool) -> bool {
    !*b
}

/// A device the container is given (`docker run --device HOST:CONTAINER:PERMISSIONS`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// The device's path on the host.
    pub source: String,
    /// Its path inside the container.
    pub target: String,
    /// The cgroup permissions: some of `r`, `w`, `m` (`rwm` unless given).
    pub permissions: String,
}

impl Device {
    /// From compose's and `docker run`'s form, `HOST[:CONTAINER[:PERMISSIONS]]`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("device `{text}`: {why}");
        let mut parts = text.split(':');
        let source = parts.next().unwrap_or_default().to_owned();
        let mut target = source.clone();
        let mut permissions = "rwm".to_owned();
        match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => {}
            (Some(p), None, _) if is_permissions(p) => permissions = p.to_owned(),
            (Some(t), None, _) => target = t.to_owned(),
            (Some(t), Some(p), None) => {
                target = t.to_owned();
                permissions = p.to_owned();
            }
            _ => return Err(bad("write HOST[:CONTAINER[:PERMISSIONS]]")),
        }
        if !source.starts_with('/') || !target.starts_with('/') {
            return Err(bad("its paths are absolute"));
        }
        if !is_permissions(&permissions) {
            return Err(bad("its permissions are some of r, w and m"));
        }
        Ok(Device {
            source,
            target,
            permissions,
        })
    }

    /// Compose's form, `HOST:CONTAINER:PERMISSIONS`.
    pub fn compose(&self) -> String {
        format!("{}:{}:{}", self.source, self.target, self.permissions)
    }
}

fn is_permissions(p: &str) -> bool {
    !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b"rwm".contains(&b))
}

/// A resource limit (`docker run --ulimit NAME=SOFT:HARD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ulimit {
    /// The soft limit.
    pub soft: i64,
    /// The hard limit.
    pub hard: i64,
}

/// Where the container's output goes (`docker run --log-driver --log-opt`, compose's
/// `logging`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Logging {
    /// The engine's logging driver (`json-file`, `local`, `syslog`, `none`, …).
    pub driver: String,
    /// The driver's options (`max-size`, `max-file`, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
}

/// Block I/O's share (compose's `blkio_config`): only its `weight` is declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlkioConfig {
    /// The relative weight, 10 to 1000.
    pub weight: u16,
}

/// Every option of a container beyond the fields [`crate::model::ContainerEntry`] has of its
/// own. See the module's invariants: a default is absent, a value canonical.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerOptions {
    // Process.
    /// The entrypoint, instead of the image's (an empty one clears it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// The user (and group) it runs as, instead of the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Its working folder, instead of the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Its host name (the engine's default: its short id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Its domain name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domainname: Option<String>,
    /// An init process reaps its children (`--init`); unset, the engine's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<bool>,
    /// A terminal (`-t`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub tty: bool,
    /// Its standard input kept open (`-i`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub stdin_open: bool,
    /// The signal that stops it, instead of the image's (or SIGTERM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
    /// Ports exposed without being published, beyond the image's (`8080/tcp`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose: Vec<String>,
    /// The runtime's annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The OCI runtime, instead of the engine's default (`runc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// The platform its image is chosen for (`linux/amd64`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,

    // Namespaces.
    /// The process namespace: `host`, or `container:NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<String>,
    /// The IPC namespace: `host`, `none`, `private`, `shareable`, or `container:NAME`; unset,
    /// the engine's default (`private`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipc: Option<String>,
    /// The UTS namespace: `host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uts: Option<String>,
    /// The user namespace: `host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userns_mode: Option<String>,
    /// The cgroup namespace: `host` or `private`; unset, the engine's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The parent cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_parent: Option<String>,

    // Security.
    /// Every privilege of the host (`--privileged`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub privileged: bool,
    /// Its root filesystem read-only.
    #[serde(default, skip_serializing_if = "is_false")]
    pub read_only: bool,
    /// Capabilities added (`CAP_NAME`, or `ALL`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_add: Vec<String>,
    /// Capabilities dropped (`CAP_NAME`, or `ALL`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_drop: Vec<String>,
    /// Security options (`no-new-privileges`, `seccomp=…`, `apparmor=…`, `label=…`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_opt: Vec<String>,
    /// Groups its user joins beyond its own, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_add: Vec<String>,

    // Devices and kernel.
    /// Devices it is given, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    /// Device cgroup rules (`c 1:3 rwm`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_cgroup_rules: Vec<String>,
    /// Kernel parameters of its namespaces.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctls: BTreeMap<String, String>,
    /// Resource limits, by name (`nofile`, `nproc`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ulimits: BTreeMap<String, Ulimit>,
    /// The storage driver's options (`size`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub storage_opt: BTreeMap<String, String>,

    // Limits.
    /// Memory, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_limit: Option<i64>,
    /// Memory's soft limit, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_reservation: Option<i64>,
    /// Memory and swap together, in bytes (-1: swap unlimited); unset, twice the memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memswap_limit: Option<i64>,
    /// How readily its pages are swapped, 0 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_swappiness: Option<i64>,
    /// The kernel's OOM killer spares it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub oom_kill_disable: bool,
    /// Its OOM score adjustment, -1000 to 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i64>,
    /// CPUs, in billionths of a CPU (`--cpus 0.5` is 500000000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<i64>,
    /// Its relative CPU share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_shares: Option<i64>,
    /// The CPUs it may run on (`0-3`, `0,2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuset: Option<String>,
    /// Its CPU time per period, in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_quota: Option<i64>,
    /// The CPU period, in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_period: Option<i64>,
    /// Block I/O's weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blkio_config: Option<BlkioConfig>,
    /// How many processes it may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<i64>,
    /// `/dev/shm`'s size, in bytes; unset, the engine's (64 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm_size: Option<i64>,

    // DNS and hosts.
    /// Name servers, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    /// Search domains, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_search: Vec<String>,
    /// Resolver options (`ndots:2`), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_opt: Vec<String>,
    /// Lines of its `/etc/hosts`, `HOST:ADDRESS`, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_hosts: Vec<String>,

    // Logging.
    /// Its logging driver and options, instead of the engine's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<Logging>,

    // Networks.
    /// `host`, `none`, `bridge` or `container:NAME`, instead of the default bridge (and of
    /// `networks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_mode: Option<String>,
    /// Containers it reaches by name on the default bridge, `NAME:ALIAS`, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<String>,

    // Mounts.
    /// Containers whose volumes it mounts too, `NAME` or `NAME:ro`, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes_from: Vec<String>,
    /// tmpfs mounts: the path inside → the mount's options (`size=67108864,mode=1777`; empty
    /// for none), each option's value canonical (see [`tmpfs_options`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tmpfs: BTreeMap<String, String>,
}

impl ContainerOptions {
    /// Whether every option is at its default: nothing to encode.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Each option set, by its name, as JSON (sizes in bytes, CPUs in billionths): what a
    /// comparison and a diff go through field by field, in [`FIELDS`]' order.
    pub fn fields(&self) -> Vec<(&'static str, Value)> {
        let Ok(Value::Object(mut set)) = serde_json::to_value(self) else {
            return Vec::new();
        };
        FIELDS
            .iter()
            .filter_map(|f| set.remove(f.name).map(|v| (f.name, v)))
            .collect()
    }

    /// Every string `mesh show` prints, free of control characters.
    pub fn check_printable(&self) -> Result<(), String> {
        for (name, value) in self.fields() {
            check_printable_value(name, &value)?;
        }
        Ok(())
    }
}

fn check_printable_value(name: &str, v: &Value) -> Result<(), String> {
    match v {
        Value::String(s) => crate::text::check_printable(name, s),
        Value::Array(items) => items
            .iter()
            .try_for_each(|i| check_printable_value(name, i)),
        Value::Object(map) => map.iter().try_for_each(|(k, v)| {
            crate::text::check_printable(name, k)?;
            check_printable_value(name, v)
        }),
        _ => Ok(()),
    }
}

/// How an option's value is written for a person and in a declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// As its JSON says.
    Plain,
    /// Bytes, written as compose writes a size (`64m`) when it is a whole number of a unit.
    Size,
    /// Billionths of a CPU, written as a number of CPUs (`0.5`).
    Cpus,
}

/// One declared option: its name (the compose key), where `docker inspect` shows it, its
/// family, and how it is written.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The compose key, and the declaration's.
    pub name: &'static str,
    /// Where `docker inspect` shows it.
    pub inspect: &'static str,
    /// Its family (`limits`, `security`, …), as the manual lists them (docs/src/containers.md).
    pub family: &'static str,
    /// How its value is written.
    pub shape: Shape,
}

const fn field(
    name: &'static str,
    inspect: &'static str,
    family: &'static str,
    shape: Shape,
) -> Field {
    Field {
        name,
        inspect,
        family,
        shape,
    }
}

/// Every option of [`ContainerOptions`], in the order it is compared, shown and written.
pub const FIELDS: &[Field] = &[
    field("entrypoint", "Config.Entrypoint", "process", Shape::Plain),
    field("user", "Config.User", "process", Shape::Plain),
    field("working_dir", "Config.WorkingDir", "process", Shape::Plain),
    field("hostname", "Config.Hostname", "process", Shape::Plain),
    field("domainname", "Config.Domainname", "process", Shape::Plain),
    field("init", "HostConfig.Init", "process", Shape::Plain),
    field("tty", "Config.Tty", "process", Shape::Plain),
    field("stdin_open", "Config.OpenStdin", "process", Shape::Plain),
    field("stop_signal", "Config.StopSignal", "process", Shape::Plain),
    field("expose", "Config.ExposedPorts", "process", Shape::Plain),
    field(
        "annotations",
        "HostConfig.Annotations",
        "process",
        Shape::Plain,
    ),
    field("runtime", "HostConfig.Runtime", "process", Shape::Plain),
    field(
        "platform",
        "the image's Os/Architecture",
        "process",
        Shape::Plain,
    ),
    field("pid", "HostConfig.PidMode", "namespaces", Shape::Plain),
    field("ipc", "HostConfig.IpcMode", "namespaces", Shape::Plain),
    field("uts", "HostConfig.UTSMode", "namespaces", Shape::Plain),
    field(
        "userns_mode",
        "HostConfig.UsernsMode",
        "namespaces",
        Shape::Plain,
    ),
    field(
        "cgroup",
        "HostConfig.CgroupnsMode",
        "namespaces",
        Shape::Plain,
    ),
    field(
        "cgroup_parent",
        "HostConfig.CgroupParent",
        "namespaces",
        Shape::Plain,
    ),
    field(
        "privileged",
        "HostConfig.Privileged",
        "security",
        Shape::Plain,
    ),
    field(
        "read_only",
        "HostConfig.ReadonlyRootfs",
        "security",
        Shape::Plain,
    ),
    field("cap_add", "HostConfig.CapAdd", "security", Shape::Plain),
    field("cap_drop", "HostConfig.CapDrop", "security", Shape::Plain),
    field(
        "security_opt",
        "HostConfig.SecurityOpt",
        "security",
        Shape::Plain,
    ),
    field("group_add", "HostConfig.GroupAdd", "security", Shape::Plain),
    field(
        "devices",
        "HostConfig.Devices",
        "devices and kernel",
        Shape::Plain,
    ),
    field(
        "device_cgroup_rules",
        "HostConfig.DeviceCgroupRules",
        "devices and kernel",
        Shape::Plain,
    ),
    field(
        "sysctls",
        "HostConfig.Sysctls",
        "devices and kernel",
        Shape::Plain,
    ),
    field(
        "ulimits",
        "HostConfig.Ulimits",
        "devices and kernel",
        Shape::Plain,
    ),
    field(
        "storage_opt",
        "HostConfig.StorageOpt",
        "devices and kernel",
        Shape::Plain,
    ),
    field("mem_limit", "HostConfig.Memory", "limits", Shape::Size),
    field(
        "mem_reservation",
        "HostConfig.MemoryReservation",
        "limits",
        Shape::Size,
    ),
    field(
        "memswap_limit",
        "HostConfig.MemorySwap",
        "limits",
        Shape::Size,
    ),
    field(
        "mem_swappiness",
        "HostConfig.MemorySwappiness",
        "limits",
        Shape::Plain,
    ),
    field(
        "oom_kill_disable",
        "HostConfig.OomKillDisable",
        "limits",
        Shape::Plain,
    ),
    field(
        "oom_score_adj",
        "HostConfig.OomScoreAdj",
        "limits",
        Shape::Plain,
    ),
    field("cpus", "HostConfig.NanoCpus", "limits", Shape::Cpus),
    field("cpu_shares", "HostConfig.CpuShares", "limits", Shape::Plain),
    field("cpuset", "HostConfig.CpusetCpus", "limits", Shape::Plain),
    field("cpu_quota", "HostConfig.CpuQuota", "limits", Shape::Plain),
    field("cpu_period", "HostConfig.CpuPeriod", "limits", Shape::Plain),
    field(
        "blkio_config",
        "HostConfig.BlkioWeight",
        "limits",
        Shape::Plain,
    ),
    field("pids_limit", "HostConfig.PidsLimit", "limits", Shape::Plain),
    field("shm_size", "HostConfig.ShmSize", "limits", Shape::Size),
    field("dns", "HostConfig.Dns", "DNS and hosts", Shape::Plain),
    field(
        "dns_search",
        "HostConfig.DnsSearch",
        "DNS and hosts",
        Shape::Plain,
    ),
    field(
        "dns_opt",
        "HostConfig.DnsOptions",
        "DNS and hosts",
        Shape::Plain,
    ),
    field(
        "extra_hosts",
        "HostConfig.ExtraHosts",
        "DNS and hosts",
        Shape::Plain,
    ),
    field("logging", "HostConfig.LogConfig", "logging", Shape::Plain),
    field(
        "network_mode",
        "HostConfig.NetworkMode",
        "networks",
        Shape::Plain,
    ),
    field("links", "HostConfig.Links", "networks", Shape::Plain),
    field(
        "volumes_from",
        "HostConfig.VolumesFrom",
        "mounts",
        Shape::Plain,
    ),
    field(
        "tmpfs",
        "HostConfig.Tmpfs (or its Mounts)",
        "mounts",
        Shape::Plain,
    ),
];

/// The [`Field`] named `name`.
pub fn field_named(name: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.name == name)
}

/// An option's value for a person: a size as `64m`, CPUs as `0.5`, a string as it is, the rest
/// as compact JSON.
pub fn describe(name: &str, value: &Value) -> String {
    let shape = field_named(name).map_or(Shape::Plain, |f| f.shape);
    match (shape, value) {
        (Shape::Size, Value::Number(n)) => n.as_i64().map_or(n.to_string(), format_size),
        (Shape::Cpus, Value::Number(n)) => n.as_i64().map_or(n.to_string(), format_cpus),
        (_, Value::String(s)) => s.clone(),
        (_, v) => v.to_string(),
    }
}

/// The units of a size, as `docker run --memory` and compose read them (powers of 1024).
const SIZE_UNITS: [(char, i64); 5] = [
    ('t', 1 << 40),
    ('g', 1 << 30),
    ('m', 1 << 20),
    ('k', 1 << 10),
    ('b', 1),
];

/// A size as compose and `docker run` write one (`512m`, `1g`, `1.5g`, `1024`, `64MiB`), in
/// bytes: the engine's own reading (`units.RAMInBytes`), powers of 1024.
pub fn parse_size(text: &str) -> Result<i64, String> {
    let bad = || format!("`{text}` is not a size such as 512m, 1g or 1048576");
    let t = text.trim();
    let digits = t
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'.')
        .count();
    let (number, unit) = t.split_at(digits);
    let unit = unit.trim_start().to_ascii_lowercase();
    let unit = unit
        .strip_suffix('b')
        .map(|u| u.strip_suffix('i').unwrap_or(u))
        .unwrap_or(&unit);
    let scale = match unit.chars().next() {
        None => 1,
        Some(c) if unit.len() == 1 => SIZE_UNITS
            .iter()
            .find(|(u, _)| *u == c)
            .map(|(_, s)| *s)
            .ok_or_else(bad)?,
        Some(_) => return Err(bad()),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
        return Err(bad());
    }
    let whole: i64 = whole.parse().map_err(|_| bad())?;
    let mut bytes = whole.checked_mul(scale).ok_or_else(bad)?;
    if !fraction.is_empty() {
        // The engine truncates a fraction of a byte.
        let digits: u32 = fraction.len().try_into().map_err(|_| bad())?;
        let denominator = 10i128.checked_pow(digits).ok_or_else(bad)?;
        let part: i128 = fraction.parse().map_err(|_| bad())?;
        let extra = i64::try_from(part * i128::from(scale) / denominator).map_err(|_| bad())?;
        bytes = bytes.checked_add(extra).ok_or_else(bad)?;
    }
    Ok(bytes)
}

/// `bytes` as compose writes a size: the largest unit it is a whole number of (`64m`), or the
/// number of bytes.
pub fn format_size(bytes: i64) -> String {
    for (unit, scale) in SIZE_UNITS {
        if unit != 'b' && bytes != 0 && bytes % scale == 0 {
            return format!("{}{unit}", bytes / scale);
        }
    }
    bytes.to_string()
}

/// A number of CPUs (`0.5`, `"1.25"`) in billionths of a CPU, as the engine holds it: at most
/// nine decimals, more than zero.
pub fn parse_cpus(text: &str) -> Result<i64, String> {
    let bad = || format!("`{text}` is not a number of CPUs such as 0.5 or 2 (at most 9 decimals)");
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
        || fraction.len() > 9
    {
        return Err(bad());
    }
    let whole: i64 = whole.parse().map_err(|_| bad())?;
    let fraction: i64 = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<9}").parse().map_err(|_| bad())?
    };
    let nanos = whole
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(fraction))
        .ok_or_else(bad)?;
    if nanos == 0 {
        return Err(bad());
    }
    Ok(nanos)
}

/// Billionths of a CPU as a number of CPUs (`0.5`, `2`).
pub fn format_cpus(nanos: i64) -> String {
    let (whole, fraction) = (nanos / 1_000_000_000, nanos % 1_000_000_000);
    if fraction == 0 {
        return whole.to_string();
    }
    let fraction = format!("{fraction:09}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

/// A capability as the engine names it in inspect data: upper case, `CAP_` before it
/// (`net_admin` and `NET_ADMIN` are `CAP_NET_ADMIN`); `ALL` as it is.
pub fn capability(name: &str) -> String {
    let upper = name.trim().to_ascii_uppercase();
    if upper == "ALL" || upper.starts_with("CAP_") {
        upper
    } else {
        format!("CAP_{upper}")
    }
}

/// Whether `name` can be a capability's name (letters and `_`, `CAP_` or not, or `ALL`).
pub fn is_capability(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_')
}

/// A tmpfs mount's options in their canonical form: each `size=` in bytes, each `mode=` in
/// octal without leading zeros, the options sorted (the kernel reads them as a set).
pub fn tmpfs_options(text: &str) -> Result<String, String> {
    let mut out: Vec<String> = Vec::new();
    for o in text.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        let canonical = match o.split_once('=') {
            Some(("size", v)) => format!("size={}", parse_size(v)?),
            Some(("mode", v)) => {
                let mode = u32::from_str_radix(v, 8)
                    .ok()
                    .filter(|m| *m <= 0o7777)
                    .ok_or_else(|| format!("tmpfs mode `{v}` is not an octal mode"))?;
                format!("mode={mode:o}")
            }
            _ => o.to_owned(),
        };
        out.push(canonical);
    }
    out.sort();
    out.dedup();
    Ok(out.join(","))
}

/// A port exposed without being published, canonical: `PORT/PROTOCOL` (`8080` is `8080/tcp`).
pub fn exposed_port(text: &str) -> Result<String, String> {
    let (port, protocol) = text.split_once('/').unwrap_or((text, "tcp"));
    let ok = port.parse::<u16>().is_ok_and(|p| p > 0)
        && matches!(
            protocol.to_ascii_lowercase().as_str(),
            "tcp" | "udp" | "sctp"
        );
    if ok {
        Ok(format!("{port}/{}", protocol.to_ascii_lowercase()))
    } else {
        Err(format!(
            "`{text}` is not a port to expose such as 8080 or 53/udp"
        ))
    }
}

/// `NAME[:ALIAS]` in its canonical form `NAME:ALIAS` (a link's alias is its name unless given).
pub fn link(text: &str) -> String {
    match text.split_once(':') {
        Some((name, alias)) => format!("{name}:{alias}"),
        None => format!("{text}:{text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes read as the engine reads them, and written back the way compose writes them.
    #[test]
    fn sizes_as_the_engine_reads_them() {
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64 MB"), Ok(64 << 20));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("100b"), Ok(100));
        for bad in [
            "",
            "m",
            "1x",
            "1.m",
            "1..5m",
            "-1m",
            "1mm",
            "9999999999999g",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(format_size(512 << 20), "512m");
        assert_eq!(format_size(1 << 30), "1g");
        assert_eq!(format_size(3 << 29), "1536m");
        assert_eq!(format_size(1000), "1000");
        assert_eq!(format_size(0), "0");
        for n in [1i64, 1023, 1024, 1 << 40, 12_345_678] {
            assert_eq!(parse_size(&format_size(n)), Ok(n));
        }
    }

    /// CPUs in billionths, exactly; more than nine decimals or none at all is refused.
    #[test]
    fn cpus_in_billionths() {
        assert_eq!(parse_cpus("0.5"), Ok(500_000_000));
        assert_eq!(parse_cpus("2"), Ok(2_000_000_000));
        assert_eq!(parse_cpus("1.000000001"), Ok(1_000_000_001));
        for bad in ["0", "0.0", "1.0000000001", "-1", ".5", "1e3", "", "a"] {
            assert!(parse_cpus(bad).is_err(), "{bad}");
        }
        assert_eq!(format_cpus(500_000_000), "0.5");
        assert_eq!(format_cpus(2_000_000_000), "2");
        assert_eq!(format_cpus(1_250_000_000), "1.25");
    }

    /// Devices in each form compose and `docker run` accept.
    #[test]
    fn devices_in_each_form() {
        let d = Device::parse("/dev/fuse").unwrap();
        assert_eq!(d.compose(), "/dev/fuse:/dev/fuse:rwm");
        assert_eq!(
            Device::parse("/dev/fuse:rw").unwrap().compose(),
            "/dev/fuse:/dev/fuse:rw"
        );
        assert_eq!(
            Device::parse("/dev/a:/dev/b").unwrap().compose(),
            "/dev/a:/dev/b:rwm"
        );
        for bad in ["fuse", "/dev/a:/dev/b:x", "/dev/a:b", "/a:/b:r:w", ""] {
            assert!(Device::parse(bad).is_err(), "{bad}");
        }
    }

    /// Canonical forms: a capability, a tmpfs's options, a port exposed, a link.
    #[test]
    fn canonical_forms() {
        assert_eq!(capability("net_admin"), "CAP_NET_ADMIN");
        assert_eq!(capability("CAP_SYS_TIME"), "CAP_SYS_TIME");
        assert_eq!(capability("all"), "ALL");
        assert_eq!(
            tmpfs_options("size=16m,mode=01777,noexec").unwrap(),
            "mode=1777,noexec,size=16777216"
        );
        assert_eq!(tmpfs_options("").unwrap(), "");
        assert!(tmpfs_options("mode=9").is_err());
        assert_eq!(exposed_port("9000").unwrap(), "9000/tcp");
        assert_eq!(exposed_port("53/UDP").unwrap(), "53/udp");
        assert!(exposed_port("0").is_err());
        assert_eq!(link("db"), "db:db");
        assert_eq!(link("db:database"), "db:database");
    }

    /// A container that sets no option has nothing to encode; every option has its field, and
    /// every field names one option (the table and the struct say the same).
    #[test]
    fn nothing_set_nothing_encoded_and_the_table_is_whole() {
        let none = ContainerOptions::default();
        assert!(none.is_empty());
        assert_eq!(serde_json::to_value(&none).unwrap(), serde_json::json!({}));
        let all: ContainerOptions = serde_json::from_str(
            r#"{
            "entrypoint": [], "user": "u", "working_dir": "/w", "hostname": "h",
            "domainname": "d", "init": true, "tty": true, "stdin_open": true,
            "stop_signal": "SIGINT", "expose": ["1/tcp"], "annotations": {"a": "b"},
            "runtime": "r", "platform": "linux/amd64", "pid": "host", "ipc": "host",
            "uts": "host", "userns_mode": "host", "cgroup": "private", "cgroup_parent": "p",
            "privileged": true, "read_only": true, "cap_add": ["CAP_A"], "cap_drop": ["CAP_B"],
            "security_opt": ["no-new-privileges"], "group_add": ["10"],
            "devices": [{"source": "/dev/a", "target": "/dev/a", "permissions": "r"}],
            "device_cgroup_rules": ["c 1:3 r"], "sysctls": {"a": "1"},
            "ulimits": {"nofile": {"soft": 1, "hard": 2}}, "storage_opt": {"size": "1g"},
            "mem_limit": 1, "mem_reservation": 1, "memswap_limit": 1, "mem_swappiness": 1,
            "oom_kill_disable": true, "oom_score_adj": 1, "cpus": 1, "cpu_shares": 1,
            "cpuset": "0", "cpu_quota": 1, "cpu_period": 1, "blkio_config": {"weight": 10},
            "pids_limit": 1, "shm_size": 1, "dns": ["1.1.1.1"], "dns_search": ["a"],
            "dns_opt": ["ndots:1"], "extra_hosts": ["a:1.2.3.4"],
            "logging": {"driver": "none"}, "network_mode": "host",
            "links": ["a:a"], "volumes_from": ["a"], "tmpfs": {"/t": ""}
            }"#,
        )
        .unwrap();
        let names: Vec<&str> = all.fields().iter().map(|(n, _)| *n).collect();
        let table: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
        assert_eq!(names, table);
        assert_eq!(
            serde_json::to_value(&all)
                .unwrap()
                .as_object()
                .unwrap()
                .len(),
            FIELDS.len()
        );
    }
}
