//! A declared container's [`ContainerOptions`] in the engine's create body: each option the
//! field the engine reads it from (`docker inspect` shows it there), nothing given for an option
//! not declared, so the engine's default holds.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, DeviceMapping, HostConfig, HostConfigCgroupnsModeEnum,
    HostConfigLogConfig, ResourcesUlimits,
};
use mesh_lib::options::ContainerOptions;

/// The engine API version from which a create keeps a container's annotations.
pub(crate) const ANNOTATIONS_FROM: (u32, u32) = (1, 43);

/// `o`'s process options into the body's `Config` part.
pub(super) fn config(body: &mut ContainerCreateBody, o: &ContainerOptions) {
    body.entrypoint = o.entrypoint.clone();
    body.user = o.user.clone();
    body.working_dir = o.working_dir.clone();
    body.hostname = o.hostname.clone();
    body.domainname = o.domainname.clone();
    body.tty = o.tty.then_some(true);
    body.open_stdin = o.stdin_open.then_some(true);
    body.stop_signal = o.stop_signal.clone();
    if !o.expose.is_empty() {
        let mut exposed = body.exposed_ports.take().unwrap_or_default();
        exposed.extend(o.expose.iter().cloned());
        exposed.sort();
        exposed.dedup();
        body.exposed_ports = Some(exposed);
    }
}

fn list(v: &[String]) -> Option<Vec<String>> {
    (!v.is_empty()).then(|| v.to_vec())
}

fn map(m: &std::collections::BTreeMap<String, String>) -> Option<HashMap<String, String>> {
    (!m.is_empty()).then(|| m.clone().into_iter().collect())
}

/// `o`'s options into the body's `HostConfig`.
pub(super) fn host_config(h: &mut HostConfig, o: &ContainerOptions) {
    h.init = o.init;
    h.annotations = map(&o.annotations);
    h.runtime = o.runtime.clone();
    h.pid_mode = o.pid.clone();
    h.ipc_mode = o.ipc.clone();
    h.uts_mode = o.uts.clone();
    h.userns_mode = o.userns_mode.clone();
    h.cgroupns_mode = o.cgroup.as_deref().map(|c| match c {
        "host" => HostConfigCgroupnsModeEnum::HOST,
        _ => HostConfigCgroupnsModeEnum::PRIVATE,
    });
    h.cgroup_parent = o.cgroup_parent.clone();
    h.privileged = o.privileged.then_some(true);
    h.readonly_rootfs = o.read_only.then_some(true);
    h.cap_add = list(&o.cap_add);
    h.cap_drop = list(&o.cap_drop);
    h.security_opt = list(&o.security_opt);
    h.group_add = list(&o.group_add);
    h.devices = (!o.devices.is_empty()).then(|| {
        o.devices
            .iter()
            .map(|d| DeviceMapping {
                path_on_host: Some(d.source.clone()),
                path_in_container: Some(d.target.clone()),
                cgroup_permissions: Some(d.permissions.clone()),
            })
            .collect()
    });
    h.device_cgroup_rules = list(&o.device_cgroup_rules);
    h.sysctls = map(&o.sysctls);
    h.ulimits = (!o.ulimits.is_empty()).then(|| {
        o.ulimits
            .iter()
            .map(|(name, u)| ResourcesUlimits {
                name: Some(name.clone()),
                soft: Some(u.soft),
                hard: Some(u.hard),
            })
            .collect()
    });
    h.storage_opt = map(&o.storage_opt);
    h.memory = o.mem_limit;
    h.memory_reservation = o.mem_reservation;
    h.memory_swap = o.memswap_limit;
    h.memory_swappiness = o.mem_swappiness;
    h.oom_kill_disable = o.oom_kill_disable.then_some(true);
    h.oom_score_adj = o.oom_score_adj;
    h.nano_cpus = o.cpus;
    h.cpu_shares = o.cpu_shares;
    h.cpuset_cpus = o.cpuset.clone();
    h.cpu_quota = o.cpu_quota;
    h.cpu_period = o.cpu_period;
    h.blkio_weight = o.blkio_config.map(|b| b.weight);
    h.pids_limit = o.pids_limit;
    h.shm_size = o.shm_size;
    h.dns = list(&o.dns);
    h.dns_search = list(&o.dns_search);
    h.dns_options = list(&o.dns_opt);
    h.extra_hosts = list(&o.extra_hosts);
    h.log_config = o.logging.as_ref().map(|l| HostConfigLogConfig {
        typ: Some(l.driver.clone()),
        config: map(&l.options),
    });
    if let Some(mode) = &o.network_mode {
        h.network_mode = Some(mode.clone());
    }
    h.links = list(&o.links);
    h.volumes_from = list(&o.volumes_from);
    h.tmpfs = (!o.tmpfs.is_empty()).then(|| o.tmpfs.clone().into_iter().collect());
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_lib::options::{Device, Logging, Ulimit};

    /// Each option lands in the field the engine reads it from; an option not declared gives
    /// nothing, so the engine's default holds.
    #[test]
    fn each_option_where_the_engine_reads_it() {
        let o = ContainerOptions {
            entrypoint: Some(vec![]),
            user: Some("1000:1000".into()),
            tty: true,
            expose: vec!["9000/tcp".into()],
            cgroup: Some("host".into()),
            cap_drop: vec!["CAP_NET_RAW".into()],
            devices: vec![Device::parse("/dev/fuse:/dev/fuse:rw").unwrap()],
            ulimits: [("nofile".to_owned(), Ulimit { soft: 1, hard: 2 })].into(),
            mem_limit: Some(64 << 20),
            cpus: Some(500_000_000),
            logging: Some(Logging {
                driver: "local".into(),
                options: [("max-size".to_owned(), "1m".to_owned())].into(),
            }),
            tmpfs: [("/run".to_owned(), "size=1024".to_owned())].into(),
            network_mode: Some("none".into()),
            ..ContainerOptions::default()
        };
        let mut body = ContainerCreateBody {
            exposed_ports: Some(vec!["80/tcp".into()]),
            ..ContainerCreateBody::default()
        };
        config(&mut body, &o);
        let mut h = HostConfig::default();
        host_config(&mut h, &o);
        let v = serde_json::to_value(&body).unwrap();
        assert_eq!(
            v["Entrypoint"],
            serde_json::json!([]),
            "an empty one clears the image's"
        );
        assert_eq!(v["User"], "1000:1000");
        assert_eq!(v["Tty"], true);
        assert!(v.get("OpenStdin").is_none());
        assert_eq!(
            v["ExposedPorts"],
            serde_json::json!({"80/tcp": {}, "9000/tcp": {}})
        );
        let h = serde_json::to_value(&h).unwrap();
        assert_eq!(h["CgroupnsMode"], "host");
        assert_eq!(h["CapDrop"], serde_json::json!(["CAP_NET_RAW"]));
        assert_eq!(
            h["Devices"],
            serde_json::json!([{"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse", "CgroupPermissions": "rw"}])
        );
        assert_eq!(
            h["Ulimits"],
            serde_json::json!([{"Name": "nofile", "Soft": 1, "Hard": 2}])
        );
        assert_eq!(h["Memory"], 64 << 20);
        assert_eq!(h["NanoCpus"], 500_000_000);
        assert_eq!(
            h["LogConfig"],
            serde_json::json!({"Type": "local", "Config": {"max-size": "1m"}})
        );
        assert_eq!(h["Tmpfs"], serde_json::json!({"/run": "size=1024"}));
        assert_eq!(h["NetworkMode"], "none");
        for unset in [
            "Privileged",
            "ShmSize",
            "MemorySwap",
            "Runtime",
            "Init",
            "Dns",
        ] {
            assert!(h.get(unset).is_none(), "{unset} given: {h}");
        }
    }
}
