//! Containers as whole as `docker run` and compose make them, on the real engine: for each family
//! of options (limits, security, devices and kernel, DNS and hosts, logging, process and
//! namespaces, mounts, networks) a container a predecessor started with `docker run` is imported
//! with every option written, checked equal, adopted and taken in place (same id, never
//! restarted); the value changed in the declaration, the switch recreates it and the engine shows
//! the new value; a rollback shows the old one. A compose project using such keys is imported,
//! equal, taken in place, and `docker-compose up -d` afterwards recreates nothing. What no
//! declaration can say is named, `not comparable`, and a take that would lose it is refused
//! until the loss is accepted. A bad value is refused at its span.
//!
//! Every container, network and volume a test makes carries its unique prefix and is removed
//! afterwards, also when the test fails (the `Made` guard).

use std::path::PathBuf;

use crate::containers::{docker, docker_here, take_turn, Made};
use crate::import::passes_nickel_format;
use crate::node_fixture::Fixture;
use crate::rejections::{assert_says, module, node, rejected, PORTS};

/// A container's id and when it last started: what "not recreated, not restarted" means.
fn facts(name: &str) -> String {
    docker(&["inspect", "-f", "{{.Id}} {{.State.StartedAt}}", name])
}

/// A container a test starts with `docker run`.
struct Run {
    /// Its name after the test's prefix (`PREFIX-SUFFIX`).
    suffix: &'static str,
    /// `docker run` options before the image.
    options: Vec<String>,
    /// The command after the image.
    command: Vec<&'static str>,
    /// Whether `mesh import` reads it (a donor of volumes is not: it stays the predecessor's).
    imported: bool,
}

impl Run {
    fn imported(suffix: &'static str, options: Vec<String>) -> Self {
        Self {
            suffix,
            options,
            command: vec!["/bin/busybox", "sleep", "100000"],
            imported: true,
        }
    }
}

/// How the engine shows the value a family's test changes, for the container named.
type Probe = Box<dyn Fn(&str) -> String>;

/// `docker inspect -f TEMPLATE`, as a probe.
fn inspect(template: &'static str) -> Probe {
    Box::new(move |name| docker(&["inspect", "-f", template, name]))
}

/// One family's round trip on the real engine (see the module's doc).
struct Family {
    /// The containers, in the order they are started; the first imported one is the subject.
    runs: Vec<Run>,
    /// What the import writes into the subject's module, each somewhere in it.
    written: Vec<String>,
    /// A text of the module replaced by another: the value changed in the declaration.
    change: (String, String),
    /// The changed value as the engine shows it: before the change (also after the
    /// rollback) and after.
    probe: Probe,
    shows: (String, String),
}

/// What a family's test has made: the node, the fleet the import wrote, the engine's things.
struct RoundTrip {
    f: Fixture,
    _out: tempfile::TempDir,
    fleet: PathBuf,
    made: Made,
}

impl RoundTrip {
    fn decl(&self) -> String {
        self.fleet.join("nodes/n1.ncl").display().to_string()
    }
}

/// On the node `f`, with the engine's things `made` names: starts the family's containers, then
/// import → `--check` equal → adopt and take in place → change → the switch shows it → a
/// rollback shows the old value.
fn round_trip(f: Fixture, made: Made, family: Family) -> RoundTrip {
    let mut imported = Vec::new();
    for run in &family.runs {
        let name = format!("{}-{}", made.prefix, run.suffix);
        let mut args = vec!["run", "-d", "--name", &name];
        args.extend(run.options.iter().map(String::as_str));
        args.push(&made.image);
        args.extend(&run.command);
        docker(&args);
        if run.imported {
            imported.push(name);
        }
    }
    let subject = imported[0].clone();
    let before: Vec<String> = imported.iter().map(|n| facts(n)).collect();
    assert_eq!(
        (family.probe)(&subject),
        family.shows.0,
        "as docker run made it"
    );

    let out = tempfile::tempdir().unwrap();
    let fleet = out.path().join("fleet");
    let mut args = vec![
        "import",
        "--no-firewall",
        "--out",
        fleet.to_str().unwrap(),
        "--node",
        "n1",
        "--json",
    ];
    for n in &imported {
        args.extend(["--container", n]);
    }
    let ran = f.mesh(&args);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let result: serde_json::Value = serde_json::from_str(ran.last_line()).unwrap();
    assert_eq!(
        result["gaps"],
        serde_json::json!({}),
        "nothing undeclared: {result}"
    );
    passes_nickel_format(&fleet, &[]);
    let modules: Vec<String> = imported.iter().map(|n| n.replace('-', "_")).collect();
    let module_file = fleet.join(format!("catalogue/{}.ncl", modules[0]));
    let text = std::fs::read_to_string(&module_file).unwrap();
    for line in &family.written {
        assert!(text.contains(line.as_str()), "{line} not in:\n{text}");
    }
    assert_eq!(
        imported.iter().map(|n| facts(n)).collect::<Vec<_>>(),
        before,
        "the import changed nothing"
    );

    let trip = RoundTrip {
        f,
        _out: out,
        fleet,
        made,
    };
    let (f, decl) = (&trip.f, trip.decl());
    let checked = f.ok(&["import", "--no-firewall", "--check", &decl]);
    for n in &imported {
        assert!(
            checked
                .stdout
                .contains(&format!("equal        container {n} ")),
            "{}",
            checked.stdout
        );
    }
    f.ok(&["adopt", &decl]);
    let mut take = vec!["take"];
    take.extend(modules.iter().map(String::as_str));
    take.push(&decl);
    let taken = f.ok(&take);
    for n in &imported {
        assert!(
            taken.stdout.contains(&format!("keep     container {n}")),
            "{}",
            taken.stdout
        );
    }
    assert_eq!(
        imported.iter().map(|n| facts(n)).collect::<Vec<_>>(),
        before,
        "the take recreated or restarted"
    );

    // The value changed in the declaration: the switch recreates the container with it.
    let (from, to) = &family.change;
    assert!(text.contains(from.as_str()), "{from} not in:\n{text}");
    std::fs::write(&module_file, text.replacen(from.as_str(), to, 1)).unwrap();
    let switched = f.ok(&["switch", &decl]);
    assert!(
        switched
            .stdout
            .contains(&format!("run      container {subject}")),
        "{}",
        switched.stdout
    );
    assert_ne!(facts(&subject), before[0], "recreated");
    assert_eq!(
        (family.probe)(&subject),
        family.shows.1,
        "the new value in force"
    );
    let checked = f.mesh(&["import", "--no-firewall", "--check", &decl]);
    assert!(
        checked
            .stdout
            .contains(&format!("equal        container {subject} ")),
        "the container the mesh made is its declaration: {}",
        checked.stdout
    );
    f.ok(&["rollback"]);
    assert_eq!(
        (family.probe)(&subject),
        family.shows.0,
        "the old value back"
    );
    trip
}

/// Memory, swap, swappiness, CPUs, CPU shares and set, processes, /dev/shm, OOM score and killer.
#[test]
fn limits_round_trip() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let options = [
        "--memory",
        "64m",
        "--memory-reservation",
        "32m",
        "--memory-swap",
        "256m",
        "--memory-swappiness",
        "10",
        "--oom-kill-disable",
        "--oom-score-adj",
        "100",
        "--cpus",
        "0.5",
        "--cpu-shares",
        "512",
        "--cpuset-cpus",
        "0",
        "--pids-limit",
        "100",
        "--shm-size",
        "32m",
    ];
    round_trip(
        Fixture::new(),
        Made::new("olim"),
        Family {
            runs: vec![Run::imported("c", strings(&options))],
            written: strings(&[
                r#"mem_limit = "64m","#,
                r#"mem_reservation = "32m","#,
                r#"memswap_limit = "256m","#,
                "mem_swappiness = 10,",
                "oom_kill_disable = true,",
                "oom_score_adj = 100,",
                "cpus = 0.5,",
                "cpu_shares = 512,",
                r#"cpuset = "0","#,
                "pids_limit = 100,",
                r#"shm_size = "32m","#,
            ]),
            change: (r#"mem_limit = "64m""#.into(), r#"mem_limit = "96m""#.into()),
            probe: inspect("{{.HostConfig.Memory}}"),
            shows: ((64u64 << 20).to_string(), (96u64 << 20).to_string()),
        },
    );
}

/// Capabilities added and dropped, a read-only root, security options.
#[test]
fn security_round_trip() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let options = [
        "--cap-drop",
        "NET_RAW",
        "--cap-add",
        "SYS_TIME",
        "--read-only",
        "--security-opt",
        "no-new-privileges",
    ];
    round_trip(
        Fixture::new(),
        Made::new("osec"),
        Family {
            runs: vec![Run::imported("c", strings(&options))],
            written: strings(&[
                r#"cap_add = ["CAP_SYS_TIME"],"#,
                r#"cap_drop = ["CAP_NET_RAW"],"#,
                "read_only = true,",
                r#"security_opt = ["no-new-privileges"],"#,
            ]),
            change: (
                r#"cap_drop = ["CAP_NET_RAW"]"#.into(),
                r#"cap_drop = ["NET_RAW", "mknod"]"#.into(),
            ),
            probe: inspect("{{json .HostConfig.CapDrop}}"),
            shows: (
                r#"["CAP_NET_RAW"]"#.into(),
                r#"["CAP_MKNOD","CAP_NET_RAW"]"#.into(),
            ),
        },
    );
}

/// Devices with their permissions, device cgroup rules, sysctls, ulimits, another runtime.
#[test]
fn devices_and_kernel_round_trip() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let options = [
        "--device",
        "/dev/fuse:/dev/fuse:rw",
        "--device-cgroup-rule",
        "c 1:3 rwm",
        "--sysctl",
        "net.ipv4.ip_forward=1",
        "--ulimit",
        "nofile=1024:2048",
        "--ulimit",
        "nproc=512",
        "--runtime",
        "io.containerd.runc.v2",
    ];
    round_trip(
        Fixture::new(),
        Made::new("odev"),
        Family {
            runs: vec![Run::imported("c", strings(&options))],
            written: strings(&[
                r#"devices = ["/dev/fuse:/dev/fuse:rw"],"#,
                r#"device_cgroup_rules = ["c 1:3 rwm"],"#,
                r#"sysctls = { "net.ipv4.ip_forward" = "1" },"#,
                "ulimits = { nofile = { soft = 1024, hard = 2048 }, nproc = 512 },",
                r#"runtime = "io.containerd.runc.v2","#,
            ]),
            change: (
                r#""net.ipv4.ip_forward" = "1""#.into(),
                r#""net.ipv4.ip_forward" = "0""#.into(),
            ),
            probe: Box::new(|name| {
                docker(&[
                    "exec",
                    name,
                    "/bin/busybox",
                    "cat",
                    "/proc/sys/net/ipv4/ip_forward",
                ])
            }),
            shows: ("1".into(), "0".into()),
        },
    );
}

/// Name servers, search domains, resolver options, /etc/hosts lines, host and domain names, a
/// link to another container on the default bridge (which the import leaves, as a donor).
#[test]
fn dns_and_hosts_round_trip() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("odns");
    let target = format!("{}-t", made.prefix);
    let mut options = strings(&[
        "--dns",
        "192.0.2.53",
        "--dns-search",
        "example.org",
        "--dns-option",
        "ndots:2",
        "--add-host",
        "db.local:10.1.2.3",
        "--hostname",
        "h1",
        "--domainname",
        "example.org",
    ]);
    options.extend(["--link".to_owned(), format!("{target}:db")]);
    let trip = round_trip(
        Fixture::new(),
        made,
        Family {
            runs: vec![
                Run {
                    imported: false,
                    ..Run::imported("t", vec![])
                },
                Run::imported("c", options),
            ],
            written: vec![
                r#"dns = ["192.0.2.53"],"#.into(),
                r#"dns_search = ["example.org"],"#.into(),
                r#"dns_opt = ["ndots:2"],"#.into(),
                r#"extra_hosts = ["db.local:10.1.2.3"],"#.into(),
                r#"hostname = "h1","#.into(),
                r#"domainname = "example.org","#.into(),
                format!(r#"links = ["{target}:db"],"#),
            ],
            change: (
                r#"dns = ["192.0.2.53"]"#.into(),
                r#"dns = ["192.0.2.54"]"#.into(),
            ),
            probe: Box::new(|name| {
                docker(&[
                    "exec",
                    name,
                    "/bin/busybox",
                    "grep",
                    "^nameserver",
                    "/etc/resolv.conf",
                ])
            }),
            shows: (
                "nameserver 192.0.2.53".into(),
                "nameserver 192.0.2.54".into(),
            ),
        },
    );
    // What the container the mesh made has in its /etc/hosts: the extra line, and the link.
    let name = format!("{}-c", trip.made.prefix);
    let hosts = docker(&["exec", &name, "/bin/busybox", "cat", "/etc/hosts"]);
    assert!(hosts.contains("10.1.2.3\tdb.local"), "{hosts}");
    assert!(hosts.contains("\tdb "), "the link's alias: {hosts}");
}

/// The logging driver and its options.
#[test]
fn logging_round_trip() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let options = [
        "--log-driver",
        "json-file",
        "--log-opt",
        "max-size=1m",
        "--log-opt",
        "max-file=2",
    ];
    round_trip(
        Fixture::new(),
        Made::new("olog"),
        Family {
            runs: vec![Run::imported("c", strings(&options))],
            written: strings(&[
                r#"logging = { driver = "json-file", options = { max-file = "2", max-size = "1m" } },"#,
            ]),
            change: (r#"max-file = "2""#.into(), r#"max-file = "3""#.into()),
            probe: inspect(r#"{{index .HostConfig.LogConfig.Config "max-file"}}"#),
            shows: ("2".into(), "3".into()),
        },
    );
}

/// The entrypoint, user, working folder, init, terminal, standard input, stop signal, ports
/// exposed, and the process, IPC and cgroup namespaces.
#[test]
fn process_and_namespaces_round_trip() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let options = [
        "--entrypoint",
        "/bin/busybox",
        "--user",
        "1000:1000",
        "--workdir",
        "/tmp",
        "--init",
        "-t",
        "-i",
        "--stop-signal",
        "SIGINT",
        "--expose",
        "9000",
        "--group-add",
        "10",
        "--pid",
        "host",
        "--ipc",
        "shareable",
        "--cgroupns",
        "private",
    ];
    round_trip(
        Fixture::new(),
        Made::new("oproc"),
        Family {
            runs: vec![Run {
                command: vec!["sleep", "100000"],
                ..Run::imported("c", strings(&options))
            }],
            written: strings(&[
                r#"entrypoint = ["/bin/busybox"],"#,
                r#"command = ["sleep", "100000"],"#,
                r#"user = "1000:1000","#,
                r#"working_dir = "/tmp","#,
                "init = true,",
                "tty = true,",
                "stdin_open = true,",
                r#"stop_signal = "SIGINT","#,
                r#"expose = ["9000/tcp"],"#,
                r#"group_add = ["10"],"#,
                r#"pid = "host","#,
                r#"ipc = "shareable","#,
                r#"cgroup = "private","#,
            ]),
            change: (
                r#"stop_signal = "SIGINT""#.into(),
                r#"stop_signal = "SIGQUIT""#.into(),
            ),
            probe: inspect("{{.Config.StopSignal}}"),
            shows: ("SIGINT".into(), "SIGQUIT".into()),
        },
    );
}

/// tmpfs mounts (by `--tmpfs` and by `--mount`), a named volume not filled from the image, a
/// bind with its propagation, the volumes of another container (a donor the import leaves).
#[test]
fn mounts_round_trip() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let (f, made) = (Fixture::new(), Made::new("omnt"));
    // The bind's source is under the node's root, where a declared path is.
    let data = f.at("/srv/data");
    std::fs::create_dir_all(&data).unwrap();
    let p = made.prefix.clone();
    docker(&[
        "run",
        "-d",
        "--name",
        &format!("{p}-donor"),
        "-v",
        &format!("{p}-shared:/shared"),
        &made.image,
        "/bin/busybox",
        "sleep",
        "100000",
    ]);
    let options = vec![
        "--tmpfs".to_owned(),
        "/run:size=16m,mode=1777".into(),
        "--mount".into(),
        "type=tmpfs,destination=/t,tmpfs-size=1048576".into(),
        "-v".into(),
        format!("{p}-vol:/v:nocopy"),
        "-v".into(),
        format!("{}:/b:ro,private", data.display()),
        "--volumes-from".into(),
        format!("{p}-donor:ro"),
    ];
    let trip = round_trip(
        f,
        made,
        Family {
            runs: vec![Run::imported("c", options)],
            written: vec![
                r#"tmpfs = ["/run:mode=1777,size=16m", "/t:size=1m"],"#.into(),
                format!(r#"{{ source = "{p}-vol", target = "/v", nocopy = true }},"#),
                r#"{ source = "/srv/data", target = "/b", read_only = true, propagation = 'private },"#
                    .into(),
                format!(r#"volumes_from = ["{p}-donor:ro"],"#),
            ],
            change: ("size=16m".into(), "size=32m".into()),
            probe: Box::new(|name| {
                docker(&["exec", name, "/bin/busybox", "grep", " /run ", "/proc/mounts"])
                    .split(',')
                    .find_map(|o| o.strip_prefix("size="))
                    .and_then(|o| o.split_whitespace().next())
                    .unwrap_or_default()
                    .to_owned()
            }),
            shows: ("16384k".into(), "32768k".into()),
        },
    );
    // The donor's volume, read-only, in the container the mesh made.
    let name = format!("{p}-c");
    let shared = docker(&[
        "exec",
        &name,
        "/bin/busybox",
        "grep",
        " /shared ",
        "/proc/mounts",
    ]);
    assert!(shared.contains(" ro,"), "{shared}");
    drop(trip);
}

/// A fixed address and an alias on a network of its own; a container on another's network
/// (the engine keeps it by id: it is declared by name).
#[test]
fn networks_round_trip() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let (f, made) = (Fixture::new(), Made::new("onet"));
    let p = made.prefix.clone();
    let subnet = 100 + std::process::id() % 150;
    let address = move |last: u8| format!("10.213.{subnet}.{last}");
    let network = format!("{p}-net");
    docker(&[
        "network",
        "create",
        "--subnet",
        &format!("10.213.{subnet}.0/24"),
        &network,
    ]);
    let trip = round_trip(
        f,
        made,
        Family {
            runs: vec![
                Run::imported(
                    "a",
                    vec![
                        "--network".into(),
                        network.clone(),
                        "--network-alias".into(),
                        "api".into(),
                        "--ip".into(),
                        address(9),
                    ],
                ),
                Run::imported("b", vec!["--network".into(), format!("container:{p}-a")]),
            ],
            written: vec![format!(
                r#"{{ name = "{network}", aliases = ["api"], ipv4_address = "{}" }},"#,
                address(9)
            )],
            change: (
                format!(r#"ipv4_address = "{}""#, address(9)),
                format!(r#"ipv4_address = "{}""#, address(10)),
            ),
            probe: Box::new(|name| {
                docker(&[
                    "inspect",
                    "-f",
                    "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                    name,
                ])
            }),
            shows: (address(9), address(10)),
        },
    );
    // `b` joined `a`'s network namespace: made anew with `a` at the switch and again at the
    // rollback, it is in the namespace of the `a` there is now, and runs.
    let a = docker(&["inspect", "-f", "{{.Id}}", &format!("{p}-a")]);
    assert_eq!(
        docker(&[
            "inspect",
            "-f",
            "{{.HostConfig.NetworkMode}} {{.State.Running}}",
            &format!("{p}-b")
        ]),
        format!("container:{a} true")
    );
    drop(trip);
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// A bad value of each kind is refused at its span (exit 1, nothing built): by the contract
/// (a size that is not one, a capability with a space, a namespace mode the engine has not, a
/// propagation that is not one), or where the engine would refuse or read it otherwise (an
/// address, a path, CPUs finer than a billionth, options that exclude each other).
#[test]
fn a_bad_option_is_refused_at_its_span() {
    let cases = [
        (
            r#"mem_limit = "lots""#,
            "contract broken by the value of `mem_limit`",
        ),
        (
            r#"cap_drop = ["NET RAW"]"#,
            "contract broken by the value of `cap_drop`",
        ),
        (r#"pid = "hots""#, "contract broken by the value of `pid`"),
        (
            r#"volumes = [{ source = "/srv", target = "/s", propagation = 'sideways }]"#,
            "contract broken by the value of `propagation`",
        ),
        ("cpus = 0.0000000001", "is not a number of CPUs"),
        (
            r#"dns = ["dns.example"]"#,
            "dns: `dns.example` is not an IP address",
        ),
        (
            r#"network_mode = "host", networks = [{ name = "x" }]"#,
            "network_mode and networks exclude each other",
        ),
        (r#"tmpfs = ["run"]"#, "tmpfs: `run` is not an absolute path"),
        (
            r#"extra_hosts = ["db"]"#,
            "extra_hosts: `db` is not HOST:ADDRESS",
        ),
        (
            "ulimits = { nofile = { soft = 3, hard = 2 } }",
            "ulimit nofile: a limit is a number",
        ),
        (r#"memswap_limit = "1g""#, "memswap_limit needs mem_limit"),
        (
            r#"stop_grace_period = "1500ms""#,
            "the engine counts whole seconds",
        ),
        (
            r#"devices = ["/dev/a:/dev/b:x"]"#,
            "its permissions are some of r, w and m",
        ),
        (
            "oom_score_adj = 5000",
            "oom_score_adj 5000 is not a whole number from -1000 to 1000",
        ),
        (
            "cpus = 1, cpu_quota = 50000",
            "cpus and cpu_quota/cpu_period exclude each other",
        ),
        (
            r#"volumes = [{ source = "data", target = "/d", propagation = 'rshared }]"#,
            "propagation is a host path's, not the named volume data's",
        ),
        (
            r#"network_mode = "container:../x""#,
            "`../x` is not a valid container name",
        ),
        (
            r#"networks = [{ name = "n", ipv4_address = "10.0.0.300" }]"#,
            "`10.0.0.300` is not an IPv4 address",
        ),
    ];
    for (body, says) in cases {
        let text = node(
            PORTS,
            &module(
                "app",
                &format!(r#"containers = [{{ name = "app", image = "busy:1", {body} }}]"#),
            ),
        );
        let ran = rejected(&text, None);
        assert_says(&ran, &[says, "bad-node.ncl"]);
    }
}

/// Options change a generation's id, and only options that differ do: the same declaration
/// builds to the same (pinned) id, the same values written otherwise too, another value of one
/// option to another id.
#[test]
fn options_are_part_of_the_id() {
    let id = |body: &str| {
        let dir = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.ncl");
        std::fs::write(
            &path,
            node(
                PORTS,
                &module(
                    "app",
                    &format!(r#"containers = [{{ name = "app", image = "busy:1", {body} }}]"#),
                ),
            ),
        )
        .unwrap();
        crate::support::build_json(state.path(), &path, None)["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let limits = r#"mem_limit = "64m", cap_drop = ["NET_RAW"], tmpfs = ["/run:size=16m"]"#;
    assert_eq!(id(limits), id(limits));
    // Pinned: the canonical encoding of options is a contract, like every id's.
    assert_eq!(
        id(limits),
        "b3:daa760e263cc030f62ed425468e38460fc4dd1f5af83e55f5e79dcbf36039ef9"
    );
    // The same values, written otherwise: the same container, the same id.
    assert_eq!(
        id(limits),
        id(r#"tmpfs = ["/run:size=16777216"], cap_drop = ["net_raw"], mem_limit = 67108864"#)
    );
    assert_ne!(id(limits), id(&limits.replace("64m", "65m")));
    assert_ne!(id(limits), id(""));
}

/// A real compose project (`docker-compose up`, Debian's v1) whose service sets keys of every
/// family: imported by its compose file with each key written and nothing undeclared, checked
/// equal, adopted and taken in place (same id, not restarted); then `docker-compose up -d`
/// finds it up to date and recreates nothing.
#[test]
fn a_compose_project_with_options_is_taken_in_place() {
    if !docker_here() || !crate::support::have_root_tools(&["docker-compose"]) {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("ocmp");
    let project = format!("{}proj", made.prefix);
    let f = Fixture::new();
    let dir = f.at("/srv/opts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("docker-compose.yml"),
        format!(
            r#"version: "2.4"
services:
  api:
    image: {image}
    command: ["/bin/busybox", "sleep", "100000"]
    mem_limit: 64m
    mem_reservation: 32m
    cpus: 0.5
    pids_limit: 100
    shm_size: 32m
    cap_drop: [NET_RAW]
    cap_add: [SYS_TIME]
    read_only: true
    security_opt: [no-new-privileges]
    tmpfs: [/run:size=16m]
    dns: [192.0.2.53]
    dns_search: [example.org]
    extra_hosts: ["db.local:10.1.2.3"]
    logging:
      driver: json-file
      options: {{ max-size: 1m, max-file: "2" }}
    init: true
    sysctls: {{ net.ipv4.ip_forward: 1 }}
    ulimits: {{ nofile: {{ soft: 1024, hard: 2048 }} }}
    stop_signal: SIGINT
    working_dir: /tmp
    hostname: api-host
"#,
            image = made.image
        ),
    )
    .unwrap();
    let compose = |args: &[&str]| crate::import::docker_compose(&dir, &project, args);
    compose(&["up", "-d"]);
    let api = format!("{project}_api_1");
    let before = facts(&api);

    let out = tempfile::tempdir().unwrap();
    let fleet = out.path().join("fleet");
    let ran = f.mesh(&[
        "import",
        "--no-firewall",
        "--out",
        fleet.to_str().unwrap(),
        "--node",
        "n1",
        "--compose",
        "/srv/opts/docker-compose.yml",
        "--json",
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let result: serde_json::Value = serde_json::from_str(ran.last_line()).unwrap();
    assert_eq!(result["gaps"], serde_json::json!({}), "{result}");
    passes_nickel_format(&fleet, &[]);
    let module = std::fs::read_to_string(fleet.join(format!("catalogue/{project}.ncl"))).unwrap();
    for expected in [
        r#"mem_limit = "64m","#,
        r#"mem_reservation = "32m","#,
        "cpus = 0.5,",
        "pids_limit = 100,",
        r#"shm_size = "32m","#,
        r#"cap_drop = ["CAP_NET_RAW"],"#,
        r#"cap_add = ["CAP_SYS_TIME"],"#,
        "read_only = true,",
        r#"security_opt = ["no-new-privileges"],"#,
        r#"tmpfs = ["/run:size=16m"],"#,
        r#"dns = ["192.0.2.53"],"#,
        r#"dns_search = ["example.org"],"#,
        r#"extra_hosts = ["db.local:10.1.2.3"],"#,
        r#"logging = { driver = "json-file", options = { max-file = "2", max-size = "1m" } },"#,
        "init = true,",
        r#"sysctls = { "net.ipv4.ip_forward" = "1" },"#,
        "ulimits = { nofile = { soft = 1024, hard = 2048 } },",
        r#"stop_signal = "SIGINT","#,
        r#"working_dir = "/tmp","#,
        r#"hostname = "api-host","#,
    ] {
        assert!(module.contains(expected), "{expected} not in:\n{module}");
    }
    let decl = fleet.join("nodes/n1.ncl");
    let decl = decl.to_str().unwrap();
    f.ok(&["import", "--no-firewall", "--check", decl]);
    f.ok(&["adopt", decl]);
    let taken = f.ok(&["take", &project, "files", decl]);
    assert!(
        taken.stdout.contains(&format!("keep     container {api}")),
        "{}",
        taken.stdout
    );
    assert_eq!(facts(&api), before, "the take recreated or restarted");
    let again = compose(&["up", "-d"]);
    assert!(again.contains("is up-to-date"), "{again}");
    assert_eq!(facts(&api), before, "compose recreated it");
    f.ok(&["import", "--no-firewall", "--check", decl]);
    compose(&["down", "-v"]);
}

/// Every option the model holds is in the contract (a field of `Container`) and in the manual's
/// list of what a container declares (docs/src/containers.md): none is declared without being
/// documented, or documented without being declared.
#[test]
fn every_option_is_in_the_contract_and_the_manual() {
    let library =
        std::fs::read_to_string(crate::support::repo().join("compiler/ncl/mesh.ncl")).unwrap();
    let contract = &library[library.find("  Container = {").unwrap()..];
    let contract = &contract[..contract.find("\n  },").unwrap()];
    let page =
        std::fs::read_to_string(crate::support::repo().join("docs/src/containers.md")).unwrap();
    let section = &page[page
        .find("## What a container declares, and what is a gap")
        .unwrap()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    for field in mesh_lib::options::FIELDS {
        assert!(
            contract.contains(&format!("\n    {} |", field.name))
                || contract.contains(&format!("\n    {}\n", field.name)),
            "{} is not a field of the Container contract",
            field.name
        );
        assert!(
            section.contains(&format!("`{}`", field.name))
                || section.contains(&format!("`{} =", field.name)),
            "{} is not in docs/src/containers.md's list",
            field.name
        );
    }
}

/// A container the mesh creates on two networks of its own is on both, with its aliases, also
/// on an engine that joins one network at create (API before 1.44: the other is connected just
/// after), and is its declaration by `--check`.
#[test]
fn a_container_on_two_networks_is_created_on_both() {
    if !docker_here() {
        return;
    }
    let _turn = take_turn();
    let made = Made::new("o2net");
    let p = &made.prefix;
    let f = Fixture::new();
    f.write_decl(
        "n.ncl",
        &node(
            PORTS,
            &module(
                "two",
                &format!(
                    r#"containers = [{{ name = "{p}-c", image = "{}", command = ["/bin/busybox", "sleep", "100000"],
                        networks = [{{ name = "{p}-n1", aliases = ["one"] }}, {{ name = "{p}-n2", aliases = ["two"] }}] }}]"#,
                    made.image
                ),
            ),
        ),
    );
    let decl = f.decl("n.ncl");
    let decl = decl.to_str().unwrap();
    f.ok(&["switch", decl]);
    let name = format!("{p}-c");
    let id = docker(&["inspect", "-f", "{{.Id}}", &name]);
    for (network, alias) in [(format!("{p}-n1"), "one"), (format!("{p}-n2"), "two")] {
        let aliases: Vec<String> = serde_json::from_str(&docker(&[
            "inspect",
            "-f",
            &format!("{{{{json (index .NetworkSettings.Networks \"{network}\").Aliases}}}}"),
            &name,
        ]))
        .unwrap();
        assert!(aliases.iter().any(|a| a == alias), "{network}: {aliases:?}");
        assert!(aliases
            .iter()
            .all(|a| a == alias || id.starts_with(a.as_str())));
    }
    f.ok(&["import", "--no-firewall", "--check", decl]);
}
