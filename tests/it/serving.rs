//! Evaluators that stay (`mesh_compiler::serving`): the builds of one process — a deploy's, one
//! per node — are served by at most one child per core, each keeping Nickel's standard library
//! and what it parsed, and every build still gives the id a whole evaluation in this process
//! gives, and still stops at its limits.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_compiler::{BuildRequest, Evaluator, Limits};

use crate::rejections::PORTS;

const NODES: usize = 6;

/// A fleet of `NODES` nodes, each module in a file of its own: one of the node's own (`own`,
/// whose text names a version), one that imports `mods/shared.ncl` (which imports
/// `mods/helper.ncl`), and one all nodes share that never changes.
struct Fleet {
    dir: tempfile::TempDir,
}

impl Fleet {
    fn new() -> Self {
        let fleet = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(fleet.dir.path().join("mods")).unwrap();
        fleet.helper("first");
        std::fs::write(
            fleet.dir.path().join("mods/shared.ncl"),
            "let helper = import \"helper.ncl\" in { line = fun name => \"%{helper.word} %{name}\\n\" }\n",
        )
        .unwrap();
        for n in 0..NODES {
            fleet.version(n, 1);
        }
        fleet
    }

    fn node(&self, n: usize) -> PathBuf {
        self.dir.path().join(format!("n{n}.ncl"))
    }

    fn helper(&self, word: &str) {
        std::fs::write(
            self.dir.path().join("mods/helper.ncl"),
            format!("{{ word = \"{word}\" }}\n"),
        )
        .unwrap();
    }

    fn version(&self, n: usize, version: usize) {
        self.own(n, &format!("\"node {n} version {version}\\n\""));
    }

    /// Node `n`'s own module, its file's content `content` (Nickel).
    fn own(&self, n: usize, content: &str) {
        let mods = self.dir.path().join("mods");
        std::fs::write(
            mods.join(format!("n{n}-own.ncl")),
            format!(
                "let rec f = fun x => f (x + 1) in\n{{ name = \"own\", config = fun s => {{ files = [{{ path = \"/etc/own\", content = {content} }}] }} }}\n"
            ),
        )
        .unwrap();
        std::fs::write(
            mods.join(format!("n{n}-shared.ncl")),
            format!(
                "let shared = import \"shared.ncl\" in\n{{ name = \"shared\", config = fun s => {{ files = [{{ path = \"/etc/shared\", content = shared.line \"n{n}\" }}] }} }}\n"
            ),
        )
        .unwrap();
        std::fs::write(
            mods.join("still.ncl"),
            "{ name = \"still\", config = fun s => { files = [{ path = \"/etc/still\", content = \"the same\\n\" }] } }\n",
        )
        .unwrap();
        let modules = format!(
            "    (import \"mods/n{n}-own.ncl\"),\n    (import \"mods/n{n}-shared.ncl\"),\n    (import \"mods/still.ncl\"),\n"
        );
        let text = crate::rejections::node(PORTS, &modules)
            .replace("name = \"n\",", &format!("name = \"n{n}\","));
        let path = self.node(n);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            std::fs::write(path, text).unwrap();
        }
    }
}

/// How every build here finds its tree: as `mesh build` does with nothing said.
static TREE: std::sync::LazyLock<mesh_compiler::TreeRule> =
    std::sync::LazyLock::new(Default::default);

fn request<'a>(
    node: &'a Path,
    state: &'a Path,
    evaluator: &'a Evaluator,
    cached: bool,
) -> BuildRequest<'a> {
    BuildRequest {
        node,
        record: None,
        images: None,
        state_dir: state,
        use_cache: cached,
        evaluator,
        tree: &TREE,
        per_module: cached,
        keep_if: Default::default(),
    }
}

/// The id of `node` evaluated whole, in this process, with no cache.
fn reference(node: &Path) -> String {
    let state = tempfile::tempdir().unwrap();
    let here = Evaluator::InProcess;
    mesh_compiler::build(&request(node, state.path(), &here, false))
        .unwrap()
        .id
        .to_string()
}

/// The mesh binary under a name of this test's own (a link in `dir`): its children are told
/// apart from other tests' (this process runs them all), by their pool and their command line.
fn program(dir: &Path) -> PathBuf {
    let link = dir.join("mesh");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_mesh"), &link).unwrap();
    link
}

fn child(program: &Path, limits: Limits) -> Evaluator {
    Evaluator::Child {
        program: program.to_owned(),
        limits,
    }
}

/// Six nodes built again and again at once in one process, as a deploy builds them: each time
/// one module is evaluated per node (or, once a file two imports away changed, every module
/// that reads it), the ids are those of a whole evaluation, and at most one child per core
/// served them all.
#[test]
fn one_process_builds_many_nodes_with_a_child_per_core() {
    let fleet = Fleet::new();
    let state = tempfile::tempdir().unwrap();
    let program = program(state.path());
    let evaluator = child(&program, Limits::default());
    // The first builds: nothing cached, each evaluated in a child of its own.
    for n in 0..NODES {
        mesh_compiler::build(&request(&fleet.node(n), state.path(), &evaluator, true)).unwrap();
    }
    let started = mesh_compiler::serving::started(&program);
    let cores = std::thread::available_parallelism().unwrap().get();
    for round in 2..=4 {
        for n in 0..NODES {
            fleet.version(n, round);
        }
        if round == 4 {
            // Read by the children through a file they kept: they read it again.
            fleet.helper("second");
        }
        let built: Vec<_> = std::thread::scope(|scope| {
            let building: Vec<_> = (0..NODES)
                .map(|n| {
                    let (node, evaluator, state) = (fleet.node(n), &evaluator, state.path());
                    scope.spawn(move || {
                        mesh_compiler::build(&request(&node, state, evaluator, true)).unwrap()
                    })
                })
                .collect();
            building.into_iter().map(|b| b.join().unwrap()).collect()
        });
        for (n, b) in built.iter().enumerate() {
            assert_eq!(
                b.id.to_string(),
                reference(&fleet.node(n)),
                "round {round}, node {n}"
            );
            assert!(!b.cached);
            let evaluated = if round == 4 { 2 } else { 1 };
            assert_eq!(b.evaluated, Some(evaluated), "round {round}, node {n}");
        }
    }
    let served_by = mesh_compiler::serving::started(&program) - started;
    assert!(
        (1..=cores).contains(&served_by),
        "{} builds were served by {served_by} children on {cores} cores",
        3 * NODES
    );
}

/// A build served by a child that served others first stops at the limits a child of its own
/// would: past the memory limit (asked again of a child of its own, whose failure is the
/// build's), past the time limit; and the builds after it are served again.
#[test]
fn a_served_build_stops_at_its_limits() {
    let fleet = Fleet::new();
    let state = tempfile::tempdir().unwrap();
    let program = program(state.path());
    // Node `n`'s own module made to recurse forever.
    let forever = |n: usize| fleet.own(n, "f 0");
    for (i, (limits, says)) in [
        (
            Limits {
                time: Duration::from_secs(120),
                memory_mib: 1024,
            },
            "the memory limit of 1024 MiB",
        ),
        (
            Limits {
                time: Duration::from_secs(2),
                memory_mib: 16384,
            },
            "the time limit of 2 s",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        // Versions no earlier build had, so that every build here evaluates.
        let version = |v: usize| 10 * (i + 1) + v;
        let evaluator = child(&program, limits);
        for n in 0..2 {
            fleet.version(n, version(1));
            mesh_compiler::build(&request(&fleet.node(n), state.path(), &evaluator, true)).unwrap();
        }
        // Served: node 0, then node 1 that does not terminate.
        fleet.version(0, version(2));
        let b =
            mesh_compiler::build(&request(&fleet.node(0), state.path(), &evaluator, true)).unwrap();
        assert_eq!(b.evaluated, Some(1));
        forever(1);
        let started = std::time::Instant::now();
        let e = mesh_compiler::build(&request(&fleet.node(1), state.path(), &evaluator, true))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{:?}",
            started.elapsed()
        );
        // And the next build is served.
        fleet.version(0, version(3));
        let b =
            mesh_compiler::build(&request(&fleet.node(0), state.path(), &evaluator, true)).unwrap();
        assert_eq!(b.id.to_string(), reference(&fleet.node(0)));
    }
}

/// The children serving builds of `program` that this process started and are still running.
fn serving_children(program: &Path) -> Vec<u32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // pid (comm) state ppid …: the comm may hold spaces, so after the last ')'.
            let running = stat.rsplit_once(')').is_some_and(|(_, rest)| {
                let mut f = rest.split_whitespace();
                f.next() != Some("Z") && f.next() == Some(me.as_str())
            });
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            running
                && cmdline
                    .split(|b| *b == 0)
                    .next()
                    .is_some_and(|arg0| arg0 == program.as_os_str().as_encoded_bytes())
        })
        .collect()
}

/// A child idle for `IDLE_LIMIT` is not asked again (a new one serves the next build), and one
/// idle for twice that ends by itself: a long-running mesh holds no idle children.
#[test]
fn an_idle_child_is_not_asked_again_and_goes() {
    let fleet = Fleet::new();
    let state = tempfile::tempdir().unwrap();
    let program = program(state.path());
    let evaluator = child(&program, Limits::default());
    let build = |version: usize| {
        fleet.version(0, version);
        let b =
            mesh_compiler::build(&request(&fleet.node(0), state.path(), &evaluator, true)).unwrap();
        assert!(version == 1 || b.evaluated == Some(1), "{:?}", b.evaluated);
    };
    build(1);
    build(2);
    assert_eq!(mesh_compiler::serving::started(&program), 1);
    let first = serving_children(&program);
    assert_eq!(first.len(), 1, "{first:?}");
    std::thread::sleep(mesh_compiler::serving::IDLE_LIMIT + Duration::from_millis(500));
    build(3);
    assert_eq!(
        mesh_compiler::serving::started(&program),
        2,
        "a new child served the build after the idle limit"
    );
    let waited = std::time::Instant::now();
    while !serving_children(&program).is_empty() {
        assert!(
            waited.elapsed() < 3 * mesh_compiler::serving::IDLE_LIMIT,
            "idle children still running: {:?}",
            serving_children(&program)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
