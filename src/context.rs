//! What every command of this run shares, resolved once from the global options: the state
//! directory, the node record, the evaluator of its builds and the rule that finds the fleet's
//! tree; where the node's commands act ([`Machine`]) and where the fleet is ([`Place`]).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use mesh_compiler::{Evaluator, Limits, TreeRule};
use mesh_fleet::{Fleet, Node};
use mesh_lib::NodeRecord;
use mesh_switch::Activator;

use crate::failure::Failure;

/// The state directory: the flag or `MESH_STATE_DIR`, else SPEC.md's default. Made absolute, so
/// that a relative one means the same folder to every part of the mesh.
pub fn state_dir(flag: Option<PathBuf>) -> Result<PathBuf, Failure> {
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
pub fn load_record(
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

/// Sets what this run's builds evaluate with and where they find the fleet's tree: the
/// evaluation's bounds, `--tree` and `--fleet`. The first call wins (a served request is run
/// by the same process, with the same options).
pub fn configure(
    eval_timeout: u64,
    eval_memory: u64,
    tree: Option<PathBuf>,
    fleet: Option<PathBuf>,
) {
    let _first = EVALUATOR.set(Evaluator::this_binary(Limits {
        time: std::time::Duration::from_secs(eval_timeout),
        memory_mib: eval_memory,
    }));
    let _first = TREE.set(TreeRule { tree, fleet });
}

/// Where the commands act: the state directory, the root files go under, the network
/// namespace the firewall and sockets are read and written in.
#[derive(Debug, Clone)]
pub struct Machine {
    pub state: PathBuf,
    pub root: PathBuf,
    pub netns: Option<String>,
    /// How many containers a switch creates and starts at once (its stops are all at once).
    pub container_jobs: usize,
    /// How long a switch watches the units it started before it calls them up.
    pub settle: std::time::Duration,
    /// How long an image's fetch may make no progress before a switch gives it up.
    pub fetch_stall: std::time::Duration,
    /// Whether a deploy key asked for what runs (`mesh serve`): a generation from elsewhere
    /// then needs a signer trusted now, and a statement naming it.
    pub served: bool,
}

impl Machine {
    /// The node, its lock taken: for a command that changes it.
    pub fn open(&self) -> Result<Activator, Failure> {
        Ok(
            Activator::open(&self.state, &self.root, self.netns.clone())?
                .with_container_jobs(self.container_jobs)
                .with_settle(self.settle)
                .with_fetch_stall(self.fetch_stall)
                .with_progress(Box::new(crate::progress::Containers::new())),
        )
    }

    /// The node, to look at it.
    pub fn inspect(&self) -> Result<Activator, Failure> {
        Ok(Activator::inspect(
            &self.state,
            &self.root,
            self.netns.clone(),
        )?)
    }
}

/// How long an image's fetch may make no progress before a switch gives it up: the
/// deploy's `--io-timeout`, read from the same `MESH_IO_TIMEOUT` (seconds, 1 to 3600), else
/// [`mesh_containers::images::STALL`]. A switch on a node inherits it from the deploy or the
/// pull that started it.
pub fn fetch_stall() -> Result<std::time::Duration, Failure> {
    let Some(value) = std::env::var_os("MESH_IO_TIMEOUT") else {
        return Ok(mesh_containers::images::STALL);
    };
    value
        .to_str()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| (1..=3600).contains(s))
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| {
            Failure::user(format!(
                "MESH_IO_TIMEOUT={}: not a number of seconds from 1 to 3600",
                value.to_string_lossy()
            ))
        })
}

/// Where the fleet is, as the global options say.
pub struct Place {
    /// The fleet file named (`--fleet`, `MESH_FLEET`); none: the nearest `fleet.ncl` from the
    /// working folder upwards.
    pub file: Option<PathBuf>,
    /// The fleet's tree, given outright (`--tree`, `MESH_TREE`).
    pub tree: Option<PathBuf>,
}

pub fn load(state: &Path, place: &Place) -> Result<Fleet, Failure> {
    let file = match &place.file {
        Some(file) => file.clone(),
        None => {
            let here = std::env::current_dir().map_err(Failure::system)?;
            mesh_compiler::imports::nearest_fleet_file(&here).ok_or_else(|| {
                Failure::user(format!(
                    "no {} in {} or a folder above it (up to its checkout): name one with \
                     --fleet FILE (MESH_FLEET), or start a fleet with `mesh init`",
                    mesh_compiler::imports::FLEET_FILE,
                    here.display()
                ))
            })?
        }
    };
    Ok(Fleet::load(&file, state, place.tree.as_deref())?)
}

pub fn select<'a>(fleet: &'a Fleet, names: &[String]) -> Result<Vec<&'a Node>, Failure> {
    fleet.select(names).map_err(Failure::user)
}

/// The signer `--sign` and `--key` ask for, if any.
pub fn signer(
    sign: bool,
    key: &crate::cli::SigningKey,
) -> Result<Option<mesh_fleet::sign::Signer>, Failure> {
    if !sign {
        return Ok(None);
    }
    mesh_fleet::sign::Signer::new(key.key.as_deref())
        .map(Some)
        .map_err(Failure::user)
}

/// The fleet checked as a whole (see [`mesh_fleet::check`]) before anything is sent: every node
/// built with its recorded record (the builds are cached), and two nodes on one private
/// address, more than one hub, a node outside the fleet's range or two nodes of one name
/// refused (exit 2), naming both nodes and where each says it. A node that does not build is
/// left to its own build's error.
pub(crate) fn consistent(fleet: &mesh_fleet::Fleet, state: &Path) -> Result<(), Failure> {
    let all: Vec<&mesh_fleet::Node> = fleet.nodes.values().collect();
    let parallel = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let built = mesh_fleet::build::all(fleet, &all, state, crate::context::evaluator(), parallel);
    let mut generations = Vec::new();
    for (node, b) in all.iter().zip(&built) {
        if let Ok(b) = &b.result {
            generations.push((*node, b.generation()?.clone()));
        }
    }
    let members: Vec<mesh_fleet::check::Member<'_>> = generations
        .iter()
        .map(|(node, generation)| mesh_fleet::check::Member {
            name: node.name.as_str(),
            declaration: &node.declaration,
            generation,
        })
        .collect();
    let conflicts = mesh_fleet::check::check(&members);
    if conflicts.is_empty() {
        return Ok(());
    }
    Err(Failure::new(
        crate::failure::Exit::Refused,
        miette::miette!(
            help = "give each node its own private address, one hub, one range; nothing was sent",
            "the fleet is not one private network:\n  {}",
            conflicts
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n  ")
        ),
    ))
}
