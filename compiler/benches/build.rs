//! `cargo bench -p mesh-compiler --bench build`: what a `mesh build` costs next to the bare Nickel
//! evaluation of the same declaration (the reference a user would otherwise run), for the
//! control-node example and a generated large node (200 modules, 2,000 files, each module a
//! container and a port read from the settings). Prints one table; times are medians.
//!
//! Two cold builds: evaluated in this process, and evaluated as `mesh build` does, in a child
//! process bounded in time and memory (issue 11; this bench's own binary is the child). The
//! difference is the price of the bounds: a process, the request and the answer.
//!
//! Targets (issue 2): cold build within 1.3x the bare evaluation; a rebuild of unchanged inputs
//! under 5% of the cold build.
//!
//! Last, 10 nodes with one module changed in each, built at once in one process as a deploy
//! builds them: by evaluating children that stay, against a child per build.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mesh_compiler::{build, BuildRequest, Evaluator, Limits};

#[path = "../../benches/common/cpu.rs"]
mod cpu;
use cpu::busy;
use mesh_lib::NodeRecord;
use nickel_lang_core::eval::cache::CacheImpl;
use nickel_lang_core::program::{Program, ProgramBuilder};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn bare_eval(node: &Path, library: &Path) -> Duration {
    let t = Instant::now();
    let mut p: Program<CacheImpl> = ProgramBuilder::new()
        .add_path(node.as_os_str())
        .add_import_paths([library])
        .build()
        .unwrap();
    let v = p
        .eval_full_for_export()
        .map_err(|_| "evaluation failed")
        .unwrap();
    std::hint::black_box(v);
    t.elapsed()
}

struct Row {
    name: String,
    bare: Duration,
    cold: Duration,
    bounded: Duration,
    rebuild: Duration,
}

fn cold_build(
    node: &Path,
    record: Option<(&NodeRecord, &Path)>,
    runs: usize,
    evaluator: &Evaluator,
) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let state = tempfile::tempdir().unwrap();
                let t = Instant::now();
                let built = build(&BuildRequest {
                    node,
                    record,
                    images: None,
                    state_dir: state.path(),
                    use_cache: true,
                    evaluator,
                    tree: &Default::default(),
                    per_module: true,
                    keep_if: Default::default(),
                })
                .unwrap();
                let d = t.elapsed();
                assert!(!built.cached);
                d
            })
            .collect(),
    )
}

fn measure(name: &str, node: &Path, record: Option<(&NodeRecord, &Path)>, runs: usize) -> Row {
    let lib_state = tempfile::tempdir().unwrap();
    let library = mesh_compiler::library::install(lib_state.path()).unwrap();
    bare_eval(node, &library); // warm the page cache
    let bare = median((0..runs).map(|_| bare_eval(node, &library)).collect());
    let cold = cold_build(node, record, runs, &Evaluator::InProcess);
    let child = Evaluator::Child {
        program: std::env::current_exe().unwrap(),
        limits: Limits::default(),
    };
    let bounded = cold_build(node, record, runs, &child);
    let state = tempfile::tempdir().unwrap();
    let request = BuildRequest {
        node,
        record,
        images: None,
        state_dir: state.path(),
        use_cache: true,
        evaluator: &child,
        tree: &Default::default(),
        per_module: true,
        keep_if: Default::default(),
    };
    let first = build(&request).unwrap();
    let rebuild = median(
        (0..runs * 4)
            .map(|_| {
                let t = Instant::now();
                let again = build(&request).unwrap();
                let d = t.elapsed();
                assert!(again.cached && again.id == first.id);
                d
            })
            .collect(),
    );
    Row {
        name: name.into(),
        bare,
        cold,
        bounded,
        rebuild,
    }
}

/// Writes a node with `modules` modules of `files_per_module` files, each module with a container
/// publishing its own port setting.
fn generate_large(dir: &Path, modules: usize, files_per_module: usize) -> PathBuf {
    let mut catalogue = String::from("{\n");
    for m in 0..modules {
        let mut files = String::new();
        for f in 0..files_per_module {
            files.push_str(&format!(
                "{{ path = \"/etc/app{m}/conf{f}.conf\", content = \"# app {m} file {f}\\nlisten = %{{std.to_string s.ports.app{m}}}\\n\" }},"
            ));
        }
        catalogue.push_str(&format!(
            "  app{m} = {{ name = \"app{m}\", config = fun s => {{ files = [{files}], containers = [{{ name = \"app{m}\", image = \"example/app:{m}\", publish = [{{ host_port = s.ports.app{m}, container_port = 8080 }}], volumes = [{{ source = \"app{m}-data\", target = \"/data\" }}] }}], openings = [{{ port = s.ports.app{m}, paths = ['forwarded] }}] }} }},\n"
        ));
    }
    catalogue.push_str("}\n");
    std::fs::write(dir.join("catalogue.ncl"), catalogue).unwrap();
    let ports: String = (0..modules)
        .map(|m| format!("app{m} = {}, ", 20000 + m))
        .collect();
    let assigned: String = (0..modules).map(|m| format!("c.app{m}, ")).collect();
    let node = format!(
        "let mesh = import \"mesh.ncl\" in\nlet c = import \"catalogue.ncl\" in\nmesh.node {{\n  name = \"large\",\n  settings = {{\n    ports = {{ store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820, {ports} }},\n    private_network = {{ range = \"10.77.0.0/24\", address = \"10.77.0.9\" }},\n  }},\n  modules = [{assigned}],\n}}\n"
    );
    let path = dir.join("large.ncl");
    std::fs::write(&path, node).unwrap();
    path
}

/// Where a cold build of `node` spends its time, phase by phase (one run, fresh state).
fn phases(node: &Path) -> Vec<(&'static str, Duration)> {
    let state = tempfile::tempdir().unwrap();
    let store = mesh_lib::Store::open(state.path()).unwrap();
    let mut out = Vec::new();
    let t = Instant::now();
    let library = mesh_compiler::library::install(state.path()).unwrap();
    out.push(("install library", t.elapsed()));
    let t = Instant::now();
    let node = std::fs::canonicalize(node).unwrap();
    let tree = mesh_compiler::imports::Tree::of_declaration(&node, &library);
    mesh_compiler::imports::check_imports(&node, std::slice::from_ref(&library), &tree).unwrap();
    out.push(("walk the imports", t.elapsed()));
    let t = Instant::now();
    let eval = mesh_compiler::eval::evaluate(&node, &library, &Default::default()).unwrap();
    out.push(("evaluate", t.elapsed()));
    let t = Instant::now();
    let assembled = mesh_compiler::assemble::assemble(&eval, None).unwrap();
    out.push(("assemble + hash", t.elapsed()));
    let t = Instant::now();
    store
        .put_blobs_deferred(
            assembled
                .blobs
                .iter()
                .map(|b| (b.bytes.as_slice(), b.private)),
        )
        .unwrap();
    out.push(("store blobs", t.elapsed()));
    let t = Instant::now();
    store.put_generation(&assembled.generation).unwrap();
    out.push(("store generation", t.elapsed()));
    let t = Instant::now();
    std::hint::black_box(eval.read_sources());
    out.push(("list sources for the cache", t.elapsed()));
    out
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    // The bounded builds' evaluating child is this very binary.
    if std::env::args_os().nth(1).as_deref() == Some(mesh_compiler::bounded::CHILD_ARG.as_ref()) {
        std::process::exit(i32::from(mesh_compiler::serve()));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let nodes = root.join("examples/nodes");
    let record_path = nodes.join("control-node.record.json");
    let record = NodeRecord::parse(&std::fs::read(&record_path).unwrap()).unwrap();
    let large_dir = tempfile::tempdir().unwrap();
    let large = generate_large(large_dir.path(), 200, 10);

    let rows = [
        measure(
            "control-node (example)",
            &nodes.join("control-node.ncl"),
            Some((&record, &record_path)),
            15,
        ),
        measure("large: 200 modules, 2000 files", &large, None, 5),
    ];
    println!();
    println!(
        "{:<32} {:>12} {:>12} {:>13} {:>12} {:>14} {:>17} {:>16}",
        "node",
        "bare nickel",
        "cold build",
        "cold bounded",
        "rebuild",
        "cold / bare",
        "bounded / cold",
        "rebuild / cold"
    );
    for r in &rows {
        println!(
            "{:<32} {:>12} {:>12} {:>13} {:>12} {:>13.2}x {:>16.2}x {:>15.1}%",
            r.name,
            ms(r.bare),
            ms(r.cold),
            ms(r.bounded),
            ms(r.rebuild),
            r.cold.as_secs_f64() / r.bare.as_secs_f64(),
            r.bounded.as_secs_f64() / r.cold.as_secs_f64(),
            100.0 * r.rebuild.as_secs_f64() / r.bounded.as_secs_f64()
        );
    }
    println!("\ntargets: cold / bare <= 1.30x; rebuild / cold < 5%");
    println!(
        "cold bounded: evaluated in a child process with the default limits, as `mesh build` does"
    );
    println!("\nwhere a cold build of the large node goes:");
    for (phase, d) in phases(&large) {
        println!("  {phase:<28} {:>10}", ms(d));
    }
    fleet_rows();
}

/// Node `n` of a fleet of nodes of 20 modules each, every module in a file of its own, one
/// of them the node's own (with `version`): what a deploy builds, one node per thread.
fn fleet_node(dir: &Path, n: usize, version: usize) -> PathBuf {
    let mods = dir.join("mods");
    std::fs::create_dir_all(&mods).unwrap();
    for m in 0..19 {
        let path = mods.join(format!("m{m}.ncl"));
        if !path.exists() {
            let files: String = (0..10)
                .map(|f| {
                    format!(
                        "{{ path = \"/etc/m{m}/f{f}\", content = \"module {m} file {f}\\n\" }},"
                    )
                })
                .collect();
            std::fs::write(
                path,
                format!("{{ name = \"m{m}\", config = fun s => {{ files = [{files}] }} }}\n"),
            )
            .unwrap();
        }
    }
    let files: String = (0..50)
        .map(|f| format!("{{ path = \"/etc/own/f{f}\", content = \"node {n} version {version} file {f}\\n\" }},"))
        .collect();
    std::fs::write(
        mods.join(format!("own{n}.ncl")),
        format!("{{ name = \"own\", config = fun s => {{ files = [{files}] }} }}\n"),
    )
    .unwrap();
    let modules: String = (0..19)
        .map(|m| format!("(import \"mods/m{m}.ncl\"), "))
        .collect();
    let path = dir.join(format!("n{n}.ncl"));
    std::fs::write(
        &path,
        format!(
            "let mesh = import \"mesh.ncl\" in\nmesh.node {{\n  name = \"n{n}\",\n  settings = {{\n    ports = {{ store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820 }},\n    private_network = {{ range = \"10.77.0.0/24\", address = \"10.77.0.9\" }},\n  }},\n  modules = [{modules}(import \"mods/own{n}.ncl\")],\n}}\n"
        ),
    )
    .unwrap();
    path
}

/// 10 nodes, one module changed in each, built at once in one process as a deploy builds them:
/// by children that stay (one per core, `mesh_compiler::serving`) and by a child per build
/// (`MESH_EVAL_SERVE=0`, what every build did before), alternating, medians of 5 rounds each.
fn fleet_rows() {
    const NODES: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let child = Evaluator::Child {
        program: std::env::current_exe().unwrap(),
        limits: Limits::default(),
    };
    let mut version = 0;
    let round = |version: &mut usize| -> (Duration, Duration) {
        *version += 1;
        let first = *version == 1;
        let nodes: Vec<PathBuf> = (0..NODES)
            .map(|n| fleet_node(dir.path(), n, *version))
            .collect();
        let (t, cpu) = (Instant::now(), busy());
        std::thread::scope(|scope| {
            for node in &nodes {
                let (child, state) = (&child, state.path());
                scope.spawn(move || {
                    let built = build(&BuildRequest {
                        node,
                        record: None,
                        images: None,
                        state_dir: state,
                        use_cache: true,
                        evaluator: child,
                        tree: &Default::default(),
                        per_module: true,
                        keep_if: Default::default(),
                    })
                    .unwrap();
                    assert!(first || built.evaluated == Some(1));
                });
            }
        });
        (t.elapsed(), busy() - cpu)
    };
    round(&mut version);
    let (mut served, mut apart) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        std::env::set_var("MESH_EVAL_SERVE", "0");
        apart.push(round(&mut version));
        std::env::remove_var("MESH_EVAL_SERVE");
        served.push(round(&mut version));
    }
    let pick = |v: &[(Duration, Duration)]| {
        (
            median(v.iter().map(|r| r.0).collect()),
            median(v.iter().map(|r| r.1).collect()),
        )
    };
    let ((st, sc), (at, ac)) = (pick(&served), pick(&apart));
    println!("\n{NODES} nodes of 20 modules, one changed in each, built at once in one process (a deploy's builds):");
    println!(
        "  children that stay, one per core   {:>10} wall {:>10} CPU   {:.2}x wall, {:.2}x CPU",
        ms(st),
        ms(sc),
        st.as_secs_f64() / at.as_secs_f64(),
        sc.as_secs_f64() / ac.as_secs_f64()
    );
    println!(
        "  a child per build (reference)      {:>10} wall {:>10} CPU   1.00x",
        ms(at),
        ms(ac)
    );
}
