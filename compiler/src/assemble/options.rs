//! A declared container's options beyond its image, command, environment, ports, volumes and
//! labels — limits, security, devices and kernel, DNS and hosts, logging, process and
//! namespaces, tmpfs, the network mode — from the evaluated declaration into
//! [`ContainerOptions`], each in its canonical form. A value the contract let through but the
//! engine would refuse or read otherwise (a size that is not one, an address that is not one,
//! two options that exclude each other) is rejected here, at its span.
//!
//! Numbers arrive as JSON values: a container's record is read through serde's `flatten`, which
//! hands Nickel's numbers over as floats; [`integer`] takes back the whole ones.

use std::collections::BTreeMap;

use mesh_lib::model::{parse_duration, ContainerName};
use mesh_lib::options::{
    capability, exposed_port, is_capability, link, parse_cpus, parse_size, tmpfs_options,
    BlkioConfig, ContainerOptions, Device, Logging, Ulimit,
};
use serde::Deserialize;
use serde_json::Value;

use super::{f, named, Ctx};
use crate::diagnostic::MeshDiagnostic;
use crate::eval::{Pointer, Step};

/// The options as the declaration evaluates them (see the module's note on numbers).
#[derive(Deserialize, Default)]
pub(super) struct OptionsOut {
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    hostname: Option<String>,
    #[serde(default)]
    domainname: Option<String>,
    #[serde(default)]
    init: Option<bool>,
    #[serde(default)]
    tty: Option<bool>,
    #[serde(default)]
    stdin_open: Option<bool>,
    #[serde(default)]
    stop_signal: Option<String>,
    #[serde(default)]
    pub(super) stop_grace_period: Option<String>,
    #[serde(default)]
    expose: Option<Vec<Value>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    runtime: Option<String>,
    #[serde(default)]
    platform: Option<String>,
    #[serde(default)]
    pid: Option<String>,
    #[serde(default)]
    ipc: Option<String>,
    #[serde(default)]
    uts: Option<String>,
    #[serde(default)]
    userns_mode: Option<String>,
    #[serde(default)]
    cgroup: Option<String>,
    #[serde(default)]
    cgroup_parent: Option<String>,
    #[serde(default)]
    privileged: Option<bool>,
    #[serde(default)]
    read_only: Option<bool>,
    #[serde(default)]
    cap_add: Option<Vec<String>>,
    #[serde(default)]
    cap_drop: Option<Vec<String>>,
    #[serde(default)]
    security_opt: Option<Vec<String>>,
    #[serde(default)]
    group_add: Option<Vec<Value>>,
    #[serde(default)]
    devices: Option<Vec<String>>,
    #[serde(default)]
    device_cgroup_rules: Option<Vec<String>>,
    #[serde(default)]
    sysctls: Option<BTreeMap<String, Value>>,
    #[serde(default)]
    ulimits: Option<BTreeMap<String, Value>>,
    #[serde(default)]
    storage_opt: Option<BTreeMap<String, String>>,
    #[serde(default)]
    mem_limit: Option<Value>,
    #[serde(default)]
    mem_reservation: Option<Value>,
    #[serde(default)]
    memswap_limit: Option<Value>,
    #[serde(default)]
    mem_swappiness: Option<Value>,
    #[serde(default)]
    oom_kill_disable: Option<bool>,
    #[serde(default)]
    oom_score_adj: Option<Value>,
    #[serde(default)]
    cpus: Option<Value>,
    #[serde(default)]
    cpu_shares: Option<Value>,
    #[serde(default)]
    cpuset: Option<String>,
    #[serde(default)]
    cpu_quota: Option<Value>,
    #[serde(default)]
    cpu_period: Option<Value>,
    #[serde(default)]
    blkio_config: Option<BTreeMap<String, Value>>,
    #[serde(default)]
    pids_limit: Option<Value>,
    #[serde(default)]
    shm_size: Option<Value>,
    #[serde(default)]
    dns: Option<Vec<String>>,
    #[serde(default)]
    dns_search: Option<Vec<String>>,
    #[serde(default)]
    dns_opt: Option<Vec<String>>,
    #[serde(default)]
    extra_hosts: Option<Vec<String>>,
    #[serde(default)]
    logging: Option<LoggingOut>,
    #[serde(default)]
    pub(super) network_mode: Option<String>,
    #[serde(default)]
    links: Option<Vec<String>>,
    #[serde(default)]
    volumes_from: Option<Vec<String>>,
    #[serde(default)]
    tmpfs: Option<Vec<String>>,
    #[serde(default)]
    pub(super) accept_gaps: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct LoggingOut {
    driver: String,
    #[serde(default)]
    options: BTreeMap<String, String>,
}

/// A whole number, from a JSON number (a float that is whole too: see the module's note).
fn integer(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|x| x.fract() == 0.0 && x.abs() < 9.0e15)
            // Whole and well inside i64: the cast is exact.
            .map(|x| x as i64)
    })
}

/// A number or a string as text: a sysctl's value, a group.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(_) => integer(v).map(|n| n.to_string()),
        _ => None,
    }
}

/// Where a rejection points, and who it names.
struct At<'a, 'b> {
    ctx: &'a Ctx<'b>,
    here: &'a Pointer,
    name: &'a ContainerName,
}

impl At<'_, '_> {
    fn reject(&self, steps: &[Step], why: impl std::fmt::Display) -> MeshDiagnostic {
        self.ctx.reject(
            &self.ctx.at(self.here, steps),
            format!("container {}: {why}", self.name),
            "this value",
        )
    }

    /// An integer in `range`, or a rejection naming the field.
    fn within(
        &self,
        field: &'static str,
        v: &Option<Value>,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<Option<i64>, MeshDiagnostic> {
        let Some(v) = v else { return Ok(None) };
        match integer(v).filter(|n| range.contains(n)) {
            Some(n) => Ok(Some(n)),
            None => Err(self.reject(
                &[f(field)],
                format!(
                    "{field} {} is not a whole number from {} to {}",
                    scalar(v).unwrap_or_else(|| v.to_string()),
                    range.start(),
                    range.end()
                ),
            )),
        }
    }

    /// A size in bytes (an integer, or `512m`), or a rejection naming the field.
    fn size(&self, field: &'static str, v: &Option<Value>) -> Result<Option<i64>, MeshDiagnostic> {
        let Some(v) = v else { return Ok(None) };
        let bytes = match v {
            Value::String(s) => parse_size(s),
            other => integer(other)
                .filter(|n| *n >= 0)
                .ok_or_else(|| format!("{other} is not a number of bytes")),
        };
        bytes
            .map(Some)
            .map_err(|e| self.reject(&[f(field)], format!("{field}: {e}")))
    }
}

fn given(v: &Option<String>) -> Option<String> {
    v.clone().filter(|s| !s.is_empty())
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}

/// The options of the container `name` at `here`; `networks` says whether it declares networks
/// of its own (which exclude a network mode).
pub(super) fn options(
    ctx: &Ctx<'_>,
    here: &Pointer,
    name: &ContainerName,
    o: &OptionsOut,
    networks: bool,
) -> Result<ContainerOptions, MeshDiagnostic> {
    let at = At { ctx, here, name };
    let mut out = ContainerOptions {
        entrypoint: o.entrypoint.clone(),
        user: given(&o.user),
        working_dir: given(&o.working_dir),
        hostname: given(&o.hostname),
        domainname: given(&o.domainname),
        init: o.init,
        tty: o.tty.unwrap_or(false),
        stdin_open: o.stdin_open.unwrap_or(false),
        stop_signal: given(&o.stop_signal),
        annotations: o.annotations.clone().unwrap_or_default(),
        runtime: given(&o.runtime),
        platform: given(&o.platform),
        pid: given(&o.pid),
        ipc: given(&o.ipc),
        uts: given(&o.uts),
        userns_mode: given(&o.userns_mode),
        cgroup: given(&o.cgroup),
        cgroup_parent: given(&o.cgroup_parent),
        privileged: o.privileged.unwrap_or(false),
        read_only: o.read_only.unwrap_or(false),
        security_opt: sorted(o.security_opt.clone().unwrap_or_default()),
        device_cgroup_rules: sorted(o.device_cgroup_rules.clone().unwrap_or_default()),
        storage_opt: o.storage_opt.clone().unwrap_or_default(),
        oom_kill_disable: o.oom_kill_disable.unwrap_or(false),
        cpuset: given(&o.cpuset),
        dns_search: o.dns_search.clone().unwrap_or_default(),
        dns_opt: o.dns_opt.clone().unwrap_or_default(),
        logging: o.logging.as_ref().map(|l| Logging {
            driver: l.driver.clone(),
            options: l.options.clone(),
        }),
        network_mode: given(&o.network_mode),
        volumes_from: o.volumes_from.clone().unwrap_or_default(),
        ..ContainerOptions::default()
    };
    for (i, p) in o.expose.iter().flatten().enumerate() {
        let text = scalar(p).unwrap_or_else(|| p.to_string());
        out.expose
            .push(exposed_port(&text).map_err(|e| at.reject(&[f("expose"), Step::Index(i)], e))?);
    }
    out.expose = sorted(out.expose);
    for (field, given, into) in [
        ("cap_add", &o.cap_add, &mut out.cap_add),
        ("cap_drop", &o.cap_drop, &mut out.cap_drop),
    ] {
        for (i, c) in given.iter().flatten().enumerate() {
            if !is_capability(c) {
                return Err(at.reject(
                    &[f(field), Step::Index(i)],
                    format!("{field}: `{c}` is not a capability (NET_ADMIN, CAP_SYS_TIME, ALL)"),
                ));
            }
            into.push(capability(c));
        }
        *into = sorted(std::mem::take(into));
    }
    for (i, g) in o.group_add.iter().flatten().enumerate() {
        let g = scalar(g).filter(|g| !g.is_empty()).ok_or_else(|| {
            at.reject(
                &[f("group_add"), Step::Index(i)],
                "group_add: a group is a name or a number",
            )
        })?;
        out.group_add.push(g);
    }
    out.group_add = sorted(out.group_add);
    for (i, d) in o.devices.iter().flatten().enumerate() {
        out.devices
            .push(Device::parse(d).map_err(|e| at.reject(&[f("devices"), Step::Index(i)], e))?);
    }
    out.devices.sort();
    for (k, v) in o.sysctls.iter().flatten() {
        let v = scalar(v).ok_or_else(|| {
            at.reject(
                &[f("sysctls"), named(k)],
                format!("sysctl {k}: its value is a string or a number"),
            )
        })?;
        out.sysctls.insert(k.clone(), v);
    }
    for (k, v) in o.ulimits.iter().flatten() {
        let u = match v {
            Value::Object(m) => match (
                m.get("soft").and_then(integer),
                m.get("hard").and_then(integer),
            ) {
                (Some(soft), Some(hard)) if m.len() == 2 => Some(Ulimit { soft, hard }),
                _ => None,
            },
            other => integer(other).map(|n| Ulimit { soft: n, hard: n }),
        };
        let u = u.filter(|u| u.soft <= u.hard || u.hard < 0).ok_or_else(|| {
            at.reject(
                &[f("ulimits"), named(k)],
                format!("ulimit {k}: a limit is a number, or {{ soft, hard }} with soft at most hard"),
            )
        })?;
        out.ulimits.insert(k.clone(), u);
    }
    out.mem_limit = at.size("mem_limit", &o.mem_limit)?;
    out.mem_reservation = at.size("mem_reservation", &o.mem_reservation)?;
    out.memswap_limit = match &o.memswap_limit {
        Some(v) if integer(v) == Some(-1) => Some(-1),
        other => at.size("memswap_limit", other)?,
    };
    out.shm_size = at.size("shm_size", &o.shm_size)?;
    out.mem_swappiness = at.within("mem_swappiness", &o.mem_swappiness, 0..=100)?;
    out.oom_score_adj = at
        .within("oom_score_adj", &o.oom_score_adj, -1000..=1000)?
        .filter(|n| *n != 0);
    out.cpus = match &o.cpus {
        None => None,
        Some(v) => {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            Some(parse_cpus(&text).map_err(|e| at.reject(&[f("cpus")], format!("cpus: {e}")))?)
        }
    };
    out.cpu_shares = at.within("cpu_shares", &o.cpu_shares, 2..=262_144)?;
    out.cpu_quota = at.within("cpu_quota", &o.cpu_quota, 1000..=i64::MAX)?;
    out.cpu_period = at.within("cpu_period", &o.cpu_period, 1000..=1_000_000)?;
    out.pids_limit = at.within("pids_limit", &o.pids_limit, 1..=i64::MAX)?;
    if let Some(b) = &o.blkio_config {
        let weight = b.get("weight").cloned();
        let w = at.within("blkio_config", &weight, 10..=1000)?;
        out.blkio_config = w.map(|w| BlkioConfig {
            weight: u16::try_from(w).unwrap_or(1000),
        });
    }
    for (i, d) in o.dns.iter().flatten().enumerate() {
        if d.parse::<std::net::IpAddr>().is_err() {
            return Err(at.reject(
                &[f("dns"), Step::Index(i)],
                format!("dns: `{d}` is not an IP address"),
            ));
        }
        out.dns.push(d.clone());
    }
    for (i, h) in o.extra_hosts.iter().flatten().enumerate() {
        // `HOST:ADDRESS` (`HOST=ADDRESS` as newer compose writes it); an IPv6 address has
        // colons of its own.
        let (host, address) = h
            .split_once('=')
            .or_else(|| h.split_once(':'))
            .unwrap_or((h, ""));
        let address = address.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty()
            || (address.parse::<std::net::IpAddr>().is_err() && address != "host-gateway")
        {
            return Err(at.reject(
                &[f("extra_hosts"), Step::Index(i)],
                format!("extra_hosts: `{h}` is not HOST:ADDRESS"),
            ));
        }
        out.extra_hosts.push(format!("{host}:{address}"));
    }
    for (i, l) in o.links.iter().flatten().enumerate() {
        let name_part = l.split(':').next().unwrap_or_default();
        ContainerName::new(name_part).map_err(|e| at.reject(&[f("links"), Step::Index(i)], e))?;
        out.links.push(link(l));
    }
    out.links = sorted(out.links);
    for (i, v) in out.volumes_from.iter().enumerate() {
        let (donor, mode) = v.split_once(':').unwrap_or((v, "rw"));
        ContainerName::new(donor)
            .map_err(|e| at.reject(&[f("volumes_from"), Step::Index(i)], e))?;
        if mode != "ro" && mode != "rw" {
            return Err(at.reject(
                &[f("volumes_from"), Step::Index(i)],
                format!("volumes_from: `{v}` is NAME, NAME:ro or NAME:rw"),
            ));
        }
    }
    for (i, t) in o.tmpfs.iter().flatten().enumerate() {
        let (target, options) = t.split_once(':').unwrap_or((t, ""));
        let here = [f("tmpfs"), Step::Index(i)];
        if !target.starts_with('/') {
            return Err(at.reject(&here, format!("tmpfs: `{target}` is not an absolute path")));
        }
        let options =
            tmpfs_options(options).map_err(|e| at.reject(&here, format!("tmpfs: {e}")))?;
        if out.tmpfs.insert(target.to_owned(), options).is_some() {
            return Err(at.reject(&here, format!("tmpfs: {target} is listed twice")));
        }
    }
    for (field, value) in [
        ("pid", &out.pid),
        ("ipc", &out.ipc),
        ("network_mode", &out.network_mode),
    ] {
        if let Some(donor) = value.as_deref().and_then(|v| v.strip_prefix("container:")) {
            ContainerName::new(donor).map_err(|e| at.reject(&[f(field)], e))?;
        }
    }
    check_together(&at, &out, networks)?;
    Ok(out)
}

/// Options that exclude each other, as the engine refuses them.
fn check_together(
    at: &At<'_, '_>,
    o: &ContainerOptions,
    networks: bool,
) -> Result<(), MeshDiagnostic> {
    let mode = o.network_mode.as_deref();
    let shared = mode.is_some_and(|m| m.starts_with("container:"));
    let refuse = |field: &'static str, when: bool, why: &str| {
        if when {
            Err(at.reject(&[f(field)], why.to_owned()))
        } else {
            Ok(())
        }
    };
    refuse(
        "network_mode",
        mode.is_some() && networks,
        "network_mode and networks exclude each other: give one",
    )?;
    refuse(
        "hostname",
        shared && o.hostname.is_some(),
        "a container on another's network (network_mode = \"container:…\") has that one's hostname",
    )?;
    refuse(
        "links",
        !o.links.is_empty() && (networks || mode.is_some_and(|m| m != "bridge")),
        "links are for the default bridge only",
    )?;
    refuse(
        "dns",
        shared && !o.dns.is_empty(),
        "a container on another's network has that one's DNS",
    )?;
    refuse(
        "cpus",
        o.cpus.is_some() && (o.cpu_quota.is_some() || o.cpu_period.is_some()),
        "cpus and cpu_quota/cpu_period exclude each other: give one",
    )?;
    refuse(
        "memswap_limit",
        o.memswap_limit.is_some() && o.mem_limit.is_none(),
        "memswap_limit needs mem_limit",
    )?;
    if let (Some(memory), Some(swap)) = (o.mem_limit, o.memswap_limit) {
        refuse(
            "memswap_limit",
            swap >= 0 && swap < memory,
            "memswap_limit is memory and swap together: at least mem_limit",
        )?;
    }
    if let (Some(memory), Some(reserved)) = (o.mem_limit, o.mem_reservation) {
        refuse(
            "mem_reservation",
            reserved > memory,
            "mem_reservation is at most mem_limit",
        )?;
    }
    Ok(())
}

/// `stop_grace_period` (compose's: a duration of whole seconds) as the seconds of
/// `stop_timeout`; both given is refused.
pub(super) fn stop_grace_period(
    ctx: &Ctx<'_>,
    here: &Pointer,
    name: &ContainerName,
    grace: &Option<String>,
    stop_timeout: Option<i64>,
) -> Result<Option<i64>, MeshDiagnostic> {
    let Some(text) = grace else {
        return Ok(stop_timeout);
    };
    let at = At { ctx, here, name };
    if stop_timeout.is_some() {
        return Err(at.reject(
            &[f("stop_grace_period")],
            "stop_grace_period and stop_timeout say the same: give one",
        ));
    }
    let nanos = parse_duration(text)
        .map_err(|e| at.reject(&[f("stop_grace_period")], format!("stop_grace_period: {e}")))?;
    if nanos % 1_000_000_000 != 0 {
        return Err(at.reject(
            &[f("stop_grace_period")],
            format!("stop_grace_period {text}: the engine counts whole seconds"),
        ));
    }
    Ok(Some(
        i64::try_from(nanos / 1_000_000_000).unwrap_or(i64::MAX),
    ))
}
