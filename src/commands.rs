//! Each command: resolve the environment (state directory, record), call the library, present.

use std::path::{Path, PathBuf};

use std::sync::OnceLock;

use mesh_compiler::{build, BuildRequest, Built, Evaluator, Limits, TreeRule};
use mesh_lib::{GenerationId, NodeRecord, Store};
use serde_json::json;

use crate::activate;
use crate::cli::{
    BuildArgs, Cli, Command, FleetCommand, ImagesCommand, RecordCommand, ShowArgs, StoreCommand,
};
use crate::failure::{Exit, Failure};
use crate::show;

/// The state directory: the flag or `MESH_STATE_DIR`, else SPEC.md's default. Made absolute, so
/// that a relative one means the same folder to every part of the mesh.
fn state_dir(flag: Option<PathBuf>) -> Result<PathBuf, Failure> {
    if let Some(dir) = flag {
        return std::path::absolute(&dir)
            .map_err(|e| Failure::user(format!("the state directory {}: {e}", dir.display())));
    }
    if rustix::process::geteuid().is_root() {
        return Ok(PathBuf::from("/var/lib/mesh"));
    }
    if let Some(xdg) = std::env::var_os("XDG_STATE_HOME").filter(|v| Path::new(v).is_absolute()) {
        return Ok(PathBuf::from(xdg).join("mesh"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/state/mesh")),
        None => Err(Failure::user(
            "no state directory: set --state-dir, MESH_STATE_DIR or HOME",
        )),
    }
}

/// Reads a node record: the given file, else this node's in the state directory, else none.
pub(crate) fn load_record(
    state: &Path,
    flag: Option<&Path>,
) -> Result<Option<(NodeRecord, PathBuf)>, Failure> {
    let path = match flag {
        Some(p) => p.to_owned(),
        None => {
            let p = mesh_lib::record::record_path(state);
            if !p.exists() {
                return Ok(None);
            }
            p
        }
    };
    let record = mesh_lib::record::read(&path).map_err(|e| {
        Failure::user(format!(
            "cannot read the node record {}: {e}",
            path.display()
        ))
    })?;
    Ok(Some((record, path)))
}

/// Where every build of this run evaluates: a bounded child of this binary, with the limits the
/// command line gave.
static EVALUATOR: OnceLock<Evaluator> = OnceLock::new();

/// The evaluator of this run's builds.
pub fn evaluator() -> &'static Evaluator {
    EVALUATOR.get_or_init(|| Evaluator::this_binary(Limits::default()))
}

/// How every build of this run finds the fleet's tree: what `--tree` and `--fleet` said.
static TREE: OnceLock<TreeRule> = OnceLock::new();

/// How this run's builds find the fleet's tree.
pub fn tree_rule() -> &'static TreeRule {
    TREE.get_or_init(TreeRule::default)
}

pub fn run(cli: Cli) -> Result<(), Failure> {
    // What reads no state: a build of the package (flake.nix) makes completions and man pages
    // where no state directory can be.
    let command = match cli.command {
        Command::Lib(args) => return crate::setup::lib(args),
        Command::Completions(args) => return crate::setup::completions(args),
        Command::Man(args) => return crate::setup::man(args),
        command => command,
    };
    let _first = EVALUATOR.set(Evaluator::this_binary(Limits {
        time: std::time::Duration::from_secs(cli.global.eval_timeout),
        memory_mib: cli.global.eval_memory,
    }));
    let _first = TREE.set(TreeRule {
        tree: cli.global.tree.clone(),
        fleet: cli.global.fleet.clone(),
    });
    let place = crate::fleet::Place {
        file: cli.global.fleet,
        tree: cli.global.tree,
    };
    let state = state_dir(cli.global.state_dir)?;
    mesh_lib::state::secure(&state)?;
    let machine = activate::Machine {
        state: state.clone(),
        root: cli.global.root,
        netns: cli.global.netns,
        container_jobs: cli.global.container_jobs as usize,
        settle: std::time::Duration::from_secs(cli.global.settle),
        served: crate::serve::served(),
    };
    match command {
        Command::Init(args) => crate::setup::init(&state, args),
        Command::Lib(_) | Command::Completions(_) | Command::Man(_) => {
            unreachable!("answered before the state directory")
        }
        Command::Build(args) => build_cmd(&state, args),
        Command::Show(args) => show_cmd(&state, args),
        Command::Verify(flag) => verify_cmd(&state, flag.json),
        Command::Record {
            command: RecordCommand::Export,
        } => record_export(&state),
        Command::Switch(args) => activate::switch(&machine, args),
        Command::Rollback(args) => activate::rollback(&machine, args),
        Command::Generations(flag) => activate::generations(&machine, flag.json),
        Command::Diff(args) => activate::diff(&machine, args),
        Command::Adopt(args) => activate::adopt(&machine, args),
        Command::Import(args) => crate::import::import(&machine, args),
        Command::Take(args) => activate::take(&machine, args),
        Command::Status(flag) => activate::status(&machine, flag.json),
        Command::Gc(args) => activate::gc(&machine, args),
        Command::Genesis(args) => activate::genesis(&machine, args),
        Command::Flip(args) => activate::flip(&machine, args),
        Command::Reconcile(args) => activate::reconcile(&machine, args),
        Command::Confirm(args) => crate::remote::confirm(&machine, &args.token, args.json),
        Command::Deploys(args) => {
            crate::remote::deploys(&machine, args.token.as_deref(), args.wait, args.json)
        }
        Command::Store {
            command: StoreCommand::Missing,
        } => crate::remote::missing(&machine),
        Command::Store {
            command: StoreCommand::Receive,
        } => crate::remote::receive(&machine),
        Command::Store {
            command: StoreCommand::Serve { io_timeout },
        } => crate::remote::serve(&machine, io_timeout.map(std::time::Duration::from_secs)),
        Command::Sign(args) => crate::fleet::sign(&state, args),
        Command::Serve => {
            let mut own = vec![
                (
                    "--state-dir".to_owned(),
                    machine.state.display().to_string(),
                ),
                ("--root".to_owned(), machine.root.display().to_string()),
            ];
            if let Some(ns) = &machine.netns {
                own.push(("--netns".to_owned(), ns.clone()));
            }
            crate::serve::serve(&own)
        }
        Command::DeployAgent { token } => crate::remote::agent(&machine, &token),
        Command::DeployStep { token, step } => crate::remote::step(&machine, &token, &step),
        Command::Secret { command } => crate::secret::run(&state, command),
        Command::Images {
            command: ImagesCommand::Lock(args),
        } => crate::images::lock(&state, &place, args),
        Command::Fleet {
            command: FleetCommand::Build(args),
        } => crate::fleet::build(&state, &place, args),
        Command::Fleet {
            command: FleetCommand::Records(args),
        } => crate::fleet::records(&state, &place, args),
        Command::Fleet {
            command: FleetCommand::Status(args),
        } => crate::fleet::status(&state, &place, args),
        Command::Fleet {
            command: FleetCommand::Import(args),
        } => crate::fleet::import(&state, &place, args),
        Command::Deploy(args) => crate::fleet::deploy(&state, &place, args),
        Command::Push(args) => crate::registry::push(&state, &place, args),
        Command::Prune(args) => crate::registry::prune(&state, &args),
        Command::Rollout(args) => crate::registry::rollout(&state, &place, args),
        Command::Pull(args) => crate::registry::pull(&machine, &args),
        Command::Follow(args) => crate::registry::follow(&machine, &args),
    }
}

fn build_node(
    state: &Path,
    node: &Path,
    record: Option<&Path>,
    use_cache: bool,
) -> Result<Built, Failure> {
    let record = load_record(state, record)?;
    let images = mesh_compiler::images_lock(node, tree_rule())?;
    let built = build(&BuildRequest {
        node,
        record: record.as_ref().map(|(r, p)| (r, p.as_path())),
        images: images.as_ref().map(|(l, _)| l),
        state_dir: state,
        use_cache,
        evaluator: evaluator(),
        tree: tree_rule(),
        per_module: true,
    })?;
    Ok(built)
}

fn build_cmd(state: &Path, args: BuildArgs) -> Result<(), Failure> {
    // Validate what the user gave before any work.
    let expected = match &args.check {
        Some(text) => Some(
            text.parse::<GenerationId>()
                .map_err(|e| Failure::user(format!("--check: {e}")))?,
        ),
        None => None,
    };
    let built = build_node(state, &args.node, args.record.as_deref(), !args.no_cache)?;
    let g = &built.summary;
    // Images named by a tag alone, and not in the image lock: the bytes a tag names differ by
    // node and by day, and the mesh does not fetch them. A warning, refused with --locked.
    let containers = g.containers.managed + g.containers.staged + g.containers.held;
    let unpinned: Vec<(String, String)> = if containers == 0 {
        Vec::new()
    } else {
        built
            .generation()?
            .containers
            .iter()
            .filter(|(_, c)| c.digest.is_none())
            .map(|(n, c)| (n.to_string(), c.image.clone()))
            .collect()
    };
    if !unpinned.is_empty() && !args.locked {
        eprintln!(
            "warning: {} container image(s) not pinned by digest (REPO:TAG@sha256:…, or `mesh images lock`): the bytes a tag names can differ from node to node and day to day, and the mesh fetches only pinned images:",
            unpinned.len()
        );
        for (name, image) in &unpinned {
            eprintln!(
                "  container {}: {}",
                mesh_lib::text::escape(name),
                mesh_lib::text::escape(image)
            );
        }
    }
    if args.json {
        let out = json!({
            "id": built.id,
            "node": g.node,
            "mode": g.mode,
            "cached": built.cached,
            "modules_evaluated": built.evaluated,
            "files": g.files,
            "containers": containers,
            "unpinned": unpinned
                .iter()
                .map(|(name, image)| json!({ "container": name, "image": image }))
                .collect::<Vec<_>>(),
            "openings": g.openings,
            "check": expected.map(|e| e == built.id),
        });
        say!("{out}");
    } else {
        say!("{}", show::summary(&built.id, g, built.cached));
        say!("{}", built.id);
    }
    if args.locked {
        crate::images::refuse_unpinned(&args.node.display().to_string(), &unpinned)?;
    }
    if let Some(expected) = expected {
        if expected != built.id {
            return Err(Failure::new(
                Exit::Refused,
                miette::miette!(
                    help = "if the change is deliberate, commit the new id",
                    "{} builds to {}, not the expected {}",
                    args.node.display(),
                    built.id,
                    expected
                ),
            ));
        }
    }
    Ok(())
}

fn show_cmd(state: &Path, args: ShowArgs) -> Result<(), Failure> {
    let as_path = Path::new(&args.what);
    let (id, generation) = if args.what.ends_with(".ncl") || as_path.is_file() {
        let built = build_node(state, as_path, args.record.as_deref(), true)?;
        (built.id, built.generation()?.clone())
    } else {
        let store = Store::open(state)?;
        let id = store.resolve_generation(&args.what)?;
        (id, store.generation(&id)?)
    };
    if args.json {
        let mut value = serde_json::to_value(&generation).map_err(Failure::system)?;
        value["id"] = json!(id);
        say!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(Failure::system)?
        );
    } else {
        say_raw!("{}", show::generation(&id, &generation));
    }
    Ok(())
}

fn verify_cmd(state: &Path, json_out: bool) -> Result<(), Failure> {
    let store = Store::open(state)?;
    let report = store.verify()?;
    if json_out {
        say!(
            "{}",
            json!({ "checked": report.checked, "corrupt": report.corrupt })
        );
    } else {
        say!(
            "checked {} objects in {}",
            report.checked,
            store.root().display()
        );
        for p in &report.corrupt {
            say!("corrupted: {}", p.display());
        }
    }
    if report.corrupt.is_empty() {
        Ok(())
    } else {
        Err(Failure::system(format!(
            "{} object(s) in the store do not match their names",
            report.corrupt.len()
        )))
    }
}

fn record_export(state: &Path) -> Result<(), Failure> {
    match load_record(state, None)? {
        Some((record, _)) => {
            let bytes = record.to_bytes().map_err(Failure::system)?;
            say_raw!("{}", String::from_utf8_lossy(&bytes));
            Ok(())
        }
        None => Err(Failure::user(format!(
            "no node record in {}: this node was never adopted (a managed node with nothing found)",
            state.display()
        ))),
    }
}
