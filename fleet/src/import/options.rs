//! A live container's options written as the declaration says them: each option its image and
//! engine do not give by themselves, under a comment naming where `docker inspect` shows it, in
//! the form the Container contract reads (compose's: a size as `"64m"`, CPUs as a number, a
//! device as `"HOST:CONTAINER:PERMISSIONS"`, a tmpfs as `"PATH:OPTIONS"`).

use std::fmt::Write as _;

use mesh_lib::options::{format_cpus, format_size, ContainerOptions, FIELDS};
use serde_json::Value;

use super::{field, list, string};

/// A JSON value as a Nickel value: strings escaped, objects as records.
fn nickel(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string(s),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(nickel).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(o) => format!(
            "{{ {} }}",
            o.iter()
                .map(|(k, v)| format!("{} = {}", field(k), nickel(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A tmpfs's canonical options with each size as compose writes one (`size=16m`).
fn humane_tmpfs(options: &str) -> String {
    options
        .split(',')
        .map(|o| match o.strip_prefix("size=").map(str::parse::<i64>) {
            Some(Ok(bytes)) => format!("size={}", format_size(bytes)),
            _ => o.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The option `name` of `o` (set, as JSON) as the declaration writes it.
fn written(name: &str, value: &Value, o: &ContainerOptions) -> String {
    match name {
        "mem_limit" | "mem_reservation" | "shm_size" => value
            .as_i64()
            .map_or_else(|| nickel(value), |b| string(&format_size(b))),
        "memswap_limit" => match value.as_i64() {
            Some(-1) | None => nickel(value),
            Some(b) => string(&format_size(b)),
        },
        "cpus" => value.as_i64().map_or_else(|| nickel(value), format_cpus),
        "devices" => list(&o.devices.iter().map(|d| d.compose()).collect::<Vec<_>>()),
        "tmpfs" => list(
            &o.tmpfs
                .iter()
                .map(|(path, options)| {
                    if options.is_empty() {
                        path.clone()
                    } else {
                        format!("{path}:{}", humane_tmpfs(options))
                    }
                })
                .collect::<Vec<_>>(),
        ),
        "ulimits" => format!(
            "{{ {} }}",
            o.ulimits
                .iter()
                .map(|(k, u)| {
                    let limit = if u.soft == u.hard {
                        u.soft.to_string()
                    } else {
                        format!("{{ soft = {}, hard = {} }}", u.soft, u.hard)
                    };
                    format!("{} = {limit}", field(k))
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => nickel(value),
    }
}

/// Writes each option `o` sets into a container's record in `body`, under one comment naming
/// where `docker inspect` shows each, in their order (a comment a field would make the module
/// twice as long to format, and to read).
pub(super) fn write(body: &mut String, o: &ContainerOptions) {
    let set = o.fields();
    if set.is_empty() {
        return;
    }
    let sources: Vec<&str> = set
        .iter()
        .map(|(name, _)| {
            FIELDS
                .iter()
                .find(|f| f.name == *name)
                .map_or("", |f| f.inspect)
        })
        .collect();
    let _ = writeln!(
        body,
        "        # from docker inspect, in this order: {}",
        sources.join(", ")
    );
    for (name, value) in &set {
        let _ = writeln!(body, "        {name} = {},", written(name, value, o));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_lib::options::{Device, Logging, Ulimit};

    /// Each option in the form the contract reads, under where inspect shows it.
    #[test]
    fn options_as_a_declaration_writes_them() {
        let o = ContainerOptions {
            user: Some("1000:1000".into()),
            cap_drop: vec!["CAP_NET_RAW".into()],
            devices: vec![Device::parse("/dev/fuse:rw").unwrap()],
            ulimits: [
                ("nofile".to_owned(), Ulimit { soft: 1, hard: 2 }),
                ("nproc".to_owned(), Ulimit { soft: 5, hard: 5 }),
            ]
            .into(),
            mem_limit: Some(64 << 20),
            memswap_limit: Some(-1),
            cpus: Some(1_500_000_000),
            logging: Some(Logging {
                driver: "local".into(),
                options: [("max-size".to_owned(), "1m".to_owned())].into(),
            }),
            tmpfs: [
                ("/run".to_owned(), "mode=1777,size=16777216".to_owned()),
                ("/tmp".to_owned(), String::new()),
            ]
            .into(),
            ..ContainerOptions::default()
        };
        let mut body = String::new();
        write(&mut body, &o);
        let expected = [
            "        # from docker inspect, in this order: Config.User, HostConfig.CapDrop, \
             HostConfig.Devices, HostConfig.Ulimits, HostConfig.Memory, HostConfig.MemorySwap, \
             HostConfig.NanoCpus, HostConfig.LogConfig, HostConfig.Tmpfs (or its Mounts)",
            "        user = \"1000:1000\",",
            "        cap_drop = [\"CAP_NET_RAW\"],",
            "        devices = [\"/dev/fuse:/dev/fuse:rw\"],",
            "        ulimits = { nofile = { soft = 1, hard = 2 }, nproc = 5 },",
            "        mem_limit = \"64m\",",
            "        memswap_limit = -1,",
            "        cpus = 1.5,",
            "        logging = { driver = \"local\", options = { max-size = \"1m\" } },",
            "        tmpfs = [\"/run:mode=1777,size=16m\", \"/tmp\"],",
        ];
        assert_eq!(body.lines().collect::<Vec<_>>(), expected);
    }
}
