//! `sudo cargo bench --bench scale`: the seed's scale (issue 14), one table, every ratio measured
//! in the same run.
//!
//! Containers (with a Docker engine, as root): 60 found containers, each a process that ignores
//! SIGTERM with a stop timeout of 2 s, so the sum of the stops (120 s) and their maximum (2 s)
//! differ visibly. `mesh take` of all 60 modules, `mesh rollback` across it, and forward again
//! (`mesh rollback --to`), against the docker CLI making the same calls — stop, rename, create,
//! start; and back: stop, remove, start, rename — 16 containers at a time, and one after another.
//! The mesh's containers declare the same 2 s stop timeout: a rollback stops each (SIGTERM, then
//! its timeout) before it removes it.
//! Targets: the mesh within 1.2x the CLI 16 at a time, and under 0.2x the CLI one after
//! another.
//!
//! Builds: nodes of 200 and 800 modules, each module in a file of its own (ten files, a
//! container and an opening, reading its port from the settings), imported through a catalogue.
//! A cold `mesh build` (fresh state) against one whole evaluation of the node (Nickel's, in
//! process: what a build would cost evaluated as one); and a build after one module's file
//! changed, against the cold build. Targets: cold within 0.7x one whole evaluation; one module
//! changed under 10% of cold.
//!
//! Rollback stops (issue 23): 60 takes whose mesh containers declare no stop timeout (the
//! engine's default, 10 s), rolled back: against the CLI making the same calls all 60 at once,
//! and 32 at a time (in waves, as the container jobs once bounded the stops). Target: within
//! 1.2x of all at once, faster than the waves. (What remains beyond one stop is the engine's own
//! work — sixty teardowns and starts — which the CLI all at once waits for too.)
//!
//! Import (issues 38 and 46): `mesh import` of the sixty found containers, each started with
//! twelve options of the families a declaration says, and its `--check`, against one `docker
//! inspect` of the sixty. Target: within 3x the inspect.
//!
//! Takes one at a time (issue 47): the sixty taken one module at a time, 59 takes, then rolled
//! back across all of them and forward again. Targets: the rollback at most 12 s and two takes,
//! forward at most eight takes. Beside the rollback, the engine's floor: its default stop
//! timeout, then the 59 killed and started again all at once through its API — the work left
//! to the engine after the stop, which no caller can skip.
//!
//! `MESH_BENCH_ONLY=builds` (or `containers`) runs one half; `stops`, the rollback stops alone
//! (and the takes one at a time); `takes`, the takes one at a time alone; `import`, the import's
//! rows alone.
//! Everything the bench creates carries its prefix and is removed at the end.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{at_a_time, median};

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// One row of the table: what, the mesh's time, the reference and its time, the target.
struct Row {
    what: String,
    mesh: Duration,
    reference: String,
    against: Duration,
    target: &'static str,
    percent: bool,
}

fn seconds(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

const N: usize = 60;

/// The seed's sixty containers on the engine: the predecessor's, each named, on its volume, a
/// process that ignores SIGTERM (busybox `sleep` as PID 1), and the node declaring a module per
/// container; removed when dropped.
struct Sixty {
    prefix: String,
    image: String,
    dir: tempfile::TempDir,
    decl: PathBuf,
    ns: String,
    _ns: common::Netns,
    _cleanup: common::DockerCleanup,
}

impl Sixty {
    /// `tag` keeps this set's names apart; `found_stop` is the predecessor's `--stop-timeout`,
    /// `stop` the one the mesh's containers declare (`None`: the engine's default, 10 s);
    /// `options`, more `docker run` options each found container is started with.
    fn new(tag: &str, found_stop: u32, stop: Option<u32>, options: &[&str]) -> Self {
        let prefix = format!("meshscale{}{tag}", std::process::id());
        let image = format!("{prefix}-busybox:1");
        let cleanup = common::DockerCleanup(prefix.clone(), image.clone());
        common::import_busybox(&image);
        let apps: Vec<usize> = (0..N).collect();
        let name = |i: usize| format!("{prefix}-app{i}");
        at_a_time(16, &apps, |&i| {
            let mut args = vec!["run".to_owned(), "-d".into(), "--name".into(), name(i)];
            args.extend(["--stop-timeout".into(), found_stop.to_string()]);
            args.extend(options.iter().map(|o| (*o).to_owned()));
            args.extend(Self::run_args(&prefix, &image, i));
            docker(&args.iter().map(String::as_str).collect::<Vec<_>>());
        });
        let stop = stop.map_or(String::new(), |s| format!(", stop_timeout = {s}"));
        // The declared containers differ from the found ones (a label): a found container
        // that already is the declared one is kept by a take, and this measures a take.
        let modules: String = (0..N)
            .map(|i| {
                format!(
                    "{{ name = \"app{i}\", config = fun s => {{ containers = [{{ name = \"{}\", image = \"{image}\", command = [\"/bin/busybox\", \"sleep\", \"100000\"], volumes = [{{ source = \"{prefix}-vol{i}\", target = \"/data\" }}], labels = {{ bench = \"taken\" }}{stop} }}] }} }},\n",
                    name(i)
                )
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let decl = common::container_node(dir.path(), &modules);
        let ns = format!("{prefix}-ns");
        Self {
            _ns: common::Netns::add(ns.clone()),
            ns,
            prefix,
            image,
            dir,
            decl,
            _cleanup: cleanup,
        }
    }

    /// The arguments of `docker run` and `docker create` after the name and the stop timeout.
    fn run_args(prefix: &str, image: &str, i: usize) -> Vec<String> {
        [
            "-v",
            &format!("{prefix}-vol{i}:/data"),
            image,
            "/bin/busybox",
            "sleep",
            "100000",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn name(&self, i: usize) -> String {
        format!("{}-app{i}", self.prefix)
    }

    fn mesh(&self, args: &[&str]) -> Duration {
        let t = Instant::now();
        common::mesh(
            &self.dir.path().join("state"),
            self.dir.path(),
            Some(&self.ns),
            args,
        );
        t.elapsed()
    }

    /// `mesh adopt`, then how long `mesh take` of all sixty modules took.
    fn adopt_and_take(&self) -> Duration {
        self.mesh(&["adopt", self.decl.to_str().unwrap()]);
        let all: Vec<String> = (0..N).map(|i| format!("app{i}")).collect();
        let mut take: Vec<&str> = vec!["take"];
        take.extend(all.iter().map(String::as_str));
        self.mesh(&take)
    }

    /// The take of container `i` through the CLI, the mesh's container created with `stop`
    /// (`None`: the engine's default): stop, rename, create, start.
    fn cli_take(&self, i: usize, stop: Option<u32>) {
        let n = self.name(i);
        docker(&["stop", &n]);
        docker(&["rename", &n, &format!("{n}.found")]);
        let mut args = vec!["create".to_owned(), "--name".into(), n.clone()];
        if let Some(s) = stop {
            args.extend(["--stop-timeout".into(), s.to_string()]);
        }
        args.extend(Self::run_args(&self.prefix, &self.image, i));
        docker(&args.iter().map(String::as_str).collect::<Vec<_>>());
        docker(&["start", &n]);
    }

    /// The rollback of container `i` through the CLI: stop, remove, start, rename.
    fn cli_back(&self, i: usize) {
        let n = self.name(i);
        docker(&["stop", &n]);
        docker(&["rm", &n]);
        docker(&["start", &format!("{n}.found")]);
        docker(&["rename", &format!("{n}.found"), &n]);
    }
}

/// The take, the rollback and the forward of sixty containers whose stops take 2 s, against
/// the docker CLI 16 at a time and one by one.
fn containers(rows: &mut Vec<Row>) {
    let set = Sixty::new("c", 2, Some(2), &[]);
    let apps: Vec<usize> = (0..N).collect();
    let mesh_take = set.adopt_and_take();
    let mesh_back = set.mesh(&["rollback", "--to", "1"]);
    let mesh_forward = set.mesh(&["rollback", "--to", "2"]);
    set.mesh(&["rollback", "--to", "1"]);

    // The same calls through the CLI.
    let take_one = |&i: &usize| set.cli_take(i, Some(2));
    let back_one = |&i: &usize| set.cli_back(i);
    let cli16_take = at_a_time(16, &apps, take_one);
    let cli16_back = at_a_time(16, &apps, back_one);
    let cli16_forward = at_a_time(16, &apps, take_one);
    at_a_time(16, &apps, back_one);
    let cli1_take = at_a_time(1, &apps, take_one);
    let cli1_back = at_a_time(1, &apps, back_one);
    let cli1_forward = at_a_time(1, &apps, take_one);
    at_a_time(16, &apps, back_one);

    for (what, mesh_time, cli16, cli1) in [
        ("take of 60 containers", mesh_take, cli16_take, cli1_take),
        ("rollback across it", mesh_back, cli16_back, cli1_back),
        ("forward again", mesh_forward, cli16_forward, cli1_forward),
    ] {
        rows.push(Row {
            what: format!("{what} (stop 2 s)"),
            mesh: mesh_time,
            reference: "docker CLI, 16 at a time".into(),
            against: cli16,
            target: "<= 1.2x",
            percent: false,
        });
        rows.push(Row {
            what: String::new(),
            mesh: mesh_time,
            reference: "docker CLI, one by one".into(),
            against: cli1,
            target: "<= 0.2x",
            percent: false,
        });
    }
}

/// The `docker run` options each of the sixty imported containers is started with (issue 46):
/// ten keys and more of the families a declaration says — limits, security, mounts, logging,
/// DNS and hosts, process — each imported, written and compared.
const IMPORTED_OPTIONS: [&str; 22] = [
    "--memory",
    "64m",
    "--cpus",
    "0.5",
    "--pids-limit",
    "100",
    "--cap-drop",
    "NET_RAW",
    "--read-only",
    "--security-opt",
    "no-new-privileges",
    "--tmpfs",
    "/run:size=16m",
    "--log-opt",
    "max-size=1m",
    "--add-host",
    "db.local:10.1.2.3",
    "--dns",
    "192.0.2.53",
    "--init",
    "--ulimit",
    "nofile=1024:2048",
];

/// Issues 38 and 46: `mesh import` of the sixty found containers, each started with twelve
/// options (each inspected, its image's and its engine's defaults read, a module written per
/// container, every option in it) and `mesh import --check` of what it wrote (built, every
/// container compared, option by option: all equal, or the bench fails), against the least a
/// declaration by hand or a generator (docker-autocompose) needs: one `docker inspect` of the
/// sixty. Medians of three. Target (issue 46): within 3x the inspect.
fn imports(rows: &mut Vec<Row>) {
    let set = Sixty::new("i", 1, None, &IMPORTED_OPTIONS);
    let names: Vec<String> = (0..N).map(|i| set.name(i)).collect();
    let out = set.dir.path().join("imported");
    let mut import: Vec<&str> = vec!["import", "--out", out.to_str().unwrap(), "--node", "n1"];
    import.extend(["--force", "--no-firewall"]);
    for n in &names {
        import.extend(["--container", n.as_str()]);
    }
    let decl = out.join("nodes/n1.ncl");
    let check = ["import", "--no-firewall", "--check", decl.to_str().unwrap()];
    let mut inspect = vec!["inspect"];
    inspect.extend(names.iter().map(String::as_str));
    let runs = |f: &dyn Fn() -> Duration| median((0..3).map(|_| f()).collect());
    let mesh_import = runs(&|| set.mesh(&import));
    let mesh_check = runs(&|| set.mesh(&check));
    let cli = runs(&|| {
        let t = Instant::now();
        docker(&inspect);
        t.elapsed()
    });
    for (what, mesh_time) in [
        ("import of 60 containers, 12 options each", mesh_import),
        ("import --check of the 60", mesh_check),
    ] {
        rows.push(Row {
            what: what.into(),
            mesh: mesh_time,
            reference: "docker inspect of the 60".into(),
            against: cli,
            target: "<= 3x",
            percent: false,
        });
    }
}

/// Issue 23: a rollback across sixty takes whose containers (the mesh's) declare no stop
/// timeout, so each waits the engine's default 10 s: the mesh asks every stop at once, so the
/// rollback costs about one stop — against the CLI making the same calls all sixty at once, and
/// in waves of 32 (the container jobs' bound, which once held the stops too: two stops' time).
fn rollback_stops(rows: &mut Vec<Row>) {
    let set = Sixty::new("s", 1, None, &[]);
    let apps: Vec<usize> = (0..N).collect();
    set.adopt_and_take();
    let mesh_back = set.mesh(&["rollback", "--to", "1"]);
    set.mesh(&["rollback", "--to", "2"]);
    let cli_all_back = at_a_time(N, &apps, |&i| set.cli_back(i));
    at_a_time(N, &apps, |&i| set.cli_take(i, None));
    let cli32_back = at_a_time(32, &apps, |&i| set.cli_back(i));
    rows.push(Row {
        what: "rollback across 60 takes (stop 10 s, the default)".into(),
        mesh: mesh_back,
        reference: "docker CLI, all 60 at once".into(),
        against: cli_all_back,
        target: "<= 1.2x",
        percent: false,
    });
    rows.push(Row {
        what: String::new(),
        mesh: mesh_back,
        reference: "docker CLI, 32 at a time".into(),
        against: cli32_back,
        target: "< 1x",
        percent: false,
    });
}

/// Issue 47: the seed's sixty taken one module at a time — 59 takes, 59 generations, the 60th
/// left held — then a rollback across all of them to the adoption, and forward again. The
/// found containers stop within a second; the mesh's declare no stop timeout, so each of their
/// stops waits the engine's default 10 s (their processes ignore SIGTERM). Targets: the rollback
/// costs about one stop — at most 12 s and two takes — and forward again at most eight takes;
/// beside the docker CLI making the rollback's calls (stop, remove, start, rename) all at once.
fn takes_one_at_a_time(rows: &mut Vec<Row>) {
    const TAKEN: usize = N - 1;
    let set = Sixty::new("t", 1, None, &[]);
    set.mesh(&["adopt", set.decl.to_str().unwrap()]);
    let takes: Vec<Duration> = (0..TAKEN)
        .map(|i| set.mesh(&["take", &format!("app{i}")]))
        .collect();
    let take = median(takes);
    let back = set.mesh(&["rollback", "--to", "1"]);
    let last = (TAKEN + 1).to_string();
    let forward = set.mesh(&["rollback", "--to", &last]);
    let apps: Vec<usize> = (0..TAKEN).collect();
    let cli_back = at_a_time(TAKEN, &apps, |&i| set.cli_back(i));
    // What no caller can go below: the engine's default stop timeout, then each of the 59
    // killed at once (its teardown) and started again — the engine's own work after the
    // stop, asked of its API directly (no CLI process in the way).
    let after_stop = at_a_time(TAKEN, &apps, |&i| {
        let n = set.name(i);
        engine_post(&format!("/containers/{n}/stop?t=0"));
        engine_post(&format!("/containers/{n}/start"));
    });
    let floor = Duration::from_secs(10) + after_stop;
    // Forward: the found containers' own stop timeout (1 s), then the same kills and starts
    // (creating the mesh's sixty is left out: the floor is lower than the engine's).
    let floor_forward = Duration::from_secs(1) + after_stop;
    rows.push(Row {
        what: "rollback across 59 takes, one module each".into(),
        mesh: back,
        reference: "one take (median of the 59)".into(),
        against: take,
        target: "<= 12 s + 2 takes",
        percent: false,
    });
    rows.push(Row {
        what: String::new(),
        mesh: back,
        reference: "docker CLI, the same calls, all at once".into(),
        against: cli_back,
        target: "(measured)",
        percent: false,
    });
    rows.push(Row {
        what: String::new(),
        mesh: back,
        reference: "the engine's floor: 10 s, then 59 kills and starts at once".into(),
        against: floor,
        target: "(measured)",
        percent: false,
    });
    rows.push(Row {
        what: "forward again across them".into(),
        mesh: forward,
        reference: "one take (median of the 59)".into(),
        against: take,
        target: "<= 8x",
        percent: false,
    });
    rows.push(Row {
        what: String::new(),
        mesh: forward,
        reference: "the engine's floor: 1 s, then 59 kills and starts at once".into(),
        against: floor_forward,
        target: "(measured)",
        percent: false,
    });
}

/// A POST of `path` to the engine's API on its socket (`/var/run/docker.sock`); panics unless it
/// answers 2xx or 304 (already so).
fn engine_post(path: &str) {
    use std::io::{Read, Write};
    let mut socket = std::os::unix::net::UnixStream::connect("/var/run/docker.sock").unwrap();
    write!(socket, "POST {path} HTTP/1.0\r\nHost: engine\r\n\r\n").unwrap();
    let mut answer = String::new();
    socket.read_to_string(&mut answer).unwrap();
    let status = answer.split(' ').nth(1).unwrap_or("");
    assert!(
        status.starts_with('2') || status == "304",
        "POST {path}: {answer}"
    );
}

/// A node of `n` modules, each in a file of its own with ten files, a container and an
/// opening reading its port from the settings, imported through a catalogue.
fn generate(dir: &Path, n: usize) -> PathBuf {
    std::fs::create_dir_all(dir.join("apps")).unwrap();
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    let mut catalogue = String::from("{\n");
    for m in 0..n {
        std::fs::write(dir.join(format!("apps/app{m}.ncl")), module(m, 0)).unwrap();
        catalogue.push_str(&format!("  app{m} = import \"apps/app{m}.ncl\",\n"));
    }
    catalogue.push_str("}\n");
    std::fs::write(dir.join("catalogue.ncl"), catalogue).unwrap();
    let ports: String = (0..n)
        .map(|m| format!("app{m} = {}, ", 20000 + m))
        .collect();
    let assigned: String = (0..n).map(|m| format!("c.app{m}, ")).collect();
    let node = dir.join("node.ncl");
    std::fs::write(
        &node,
        format!("let mesh = import \"mesh.ncl\" in\nlet c = import \"catalogue.ncl\" in\nmesh.node {{\n  name = \"large\",\n  settings = {{\n    ports = {{ store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820, {ports} }},\n    private_network = {{ range = \"10.77.0.0/24\", address = \"10.77.0.9\" }},\n  }},\n  modules = [{assigned}],\n}}\n"),
    )
    .unwrap();
    node
}

fn module(m: usize, edit: usize) -> String {
    let files: String = (0..10)
        .map(|f| format!("{{ path = \"/etc/app{m}/conf{f}.conf\", content = \"# app {m} file {f}, edit {edit}\\nlisten = %{{std.to_string s.ports.app{m}}}\\n\" }},"))
        .collect();
    format!("{{ name = \"app{m}\", config = fun s => {{ files = [{files}], containers = [{{ name = \"app{m}\", image = \"example/app:{m}\", publish = [{{ host_port = s.ports.app{m}, container_port = 8080 }}], volumes = [{{ source = \"app{m}-data\", target = \"/data\" }}] }}], openings = [{{ port = s.ports.app{m}, paths = ['forwarded] }}] }} }}\n")
}

/// Waits (a millisecond at a time, two seconds at most) until no evaluating process of an
/// earlier build is left: a build answers before they are gone, and they give their memory
/// back after (some 10 ms after a cold build of 200 modules) — work of that build, which the
/// next one timed would otherwise share the cores with.
fn settle() {
    let evaluating = || {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .any(|p| {
                std::fs::read(p.path().join("cmdline")).is_ok_and(|c| {
                    c.split(|b| *b == 0)
                        .any(|arg| arg == mesh_compiler::bounded::CHILD_ARG.as_bytes())
                })
            })
    };
    let t = Instant::now();
    while evaluating() && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn build(state: &Path, node: &Path) -> (Duration, serde_json::Value) {
    settle();
    let t = Instant::now();
    let out = common::mesh(
        state,
        Path::new("/"),
        None,
        &["build", node.to_str().unwrap(), "--json"],
    );
    let d = t.elapsed();
    (
        d,
        serde_json::from_str(out.lines().last().unwrap()).unwrap(),
    )
}

fn builds(rows: &mut Vec<Row>, n: usize, runs: usize) {
    let dir = tempfile::tempdir().unwrap();
    let node = generate(dir.path(), n);
    let lib_state = tempfile::tempdir().unwrap();
    let library = mesh_compiler::library::install(lib_state.path()).unwrap();
    let whole_once = || {
        settle();
        let t = Instant::now();
        let e = mesh_compiler::eval::evaluate(&node, &library, &BTreeMap::new()).unwrap();
        std::hint::black_box(&e);
        t.elapsed()
    };
    whole_once(); // the page cache
    let state = tempfile::tempdir().unwrap();
    build(state.path(), &node);
    // Side by side, round after round: this machine's speed drifts over a minute, and each
    // ratio is of times taken in the same rounds.
    let (mut wholes, mut colds, mut changes) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..runs {
        wholes.push(whole_once());
        let fresh = tempfile::tempdir().unwrap();
        let (d, v) = build(fresh.path(), &node);
        assert_eq!(
            v["modules_evaluated"], n,
            "a cold build evaluates every module"
        );
        colds.push(d);
        for edit in [2 * round + 1, 2 * round + 2] {
            let m = (edit * 37) % n;
            std::fs::write(dir.path().join(format!("apps/app{m}.ncl")), module(m, edit)).unwrap();
            let (d, v) = build(state.path(), &node);
            assert_eq!(v["modules_evaluated"], 1, "one module evaluated");
            changes.push(d);
        }
    }
    let (whole, cold, changed) = (median(wholes), median(colds), median(changes));
    rows.push(Row {
        what: format!("build, {n} modules in files of their own: cold"),
        mesh: cold,
        reference: "one whole evaluation (Nickel)".into(),
        against: whole,
        target: "<= 0.7x",
        percent: false,
    });
    rows.push(Row {
        what: format!("build, {n} modules: one module's file changed"),
        mesh: changed,
        reference: "the cold build".into(),
        against: cold,
        target: "< 10%",
        percent: true,
    });
}

fn main() {
    // The builds' evaluating children are the mesh binary; nothing here is a child.
    let mut rows = Vec::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let only = std::env::var("MESH_BENCH_ONLY").unwrap_or_default();
    if only != "containers" && only != "stops" && only != "import" && only != "takes" {
        builds(&mut rows, 200, 5);
        builds(&mut rows, 800, 3);
    }
    let docker_ran =
        only != "builds" && rustix::process::geteuid().is_root() && common::docker_here();
    if docker_ran {
        if only != "stops" && only != "import" && only != "takes" {
            containers(&mut rows);
        }
        if only != "import" && only != "takes" {
            rollback_stops(&mut rows);
        }
        if only.is_empty() || only == "stops" || only == "takes" {
            takes_one_at_a_time(&mut rows);
        }
        if only.is_empty() || only == "import" {
            imports(&mut rows);
        }
    }
    println!("\nat the seed's scale, on {cores} cores (medians; containers: one run each)\n");
    let wide = rows
        .iter()
        .map(|r| r.reference.len())
        .max()
        .unwrap_or(0)
        .max(32);
    println!(
        "{:<50} {:>9}   {:<w$} {:>9}   target",
        "",
        "mesh",
        "against",
        "ratio",
        w = wide + 10
    );
    for r in &rows {
        let ratio = r.mesh.as_secs_f64() / r.against.as_secs_f64();
        println!(
            "{:<50} {:>9}   {:<wide$} {:>9} {:>9}   {}",
            r.what,
            seconds(r.mesh),
            r.reference,
            seconds(r.against),
            if r.percent {
                format!("{:.1}%", ratio * 100.0)
            } else {
                format!("{ratio:.2}x")
            },
            r.target
        );
    }
    if !docker_ran && only != "builds" {
        println!("\n(the containers' rows need root and a Docker engine)");
    }
}
