//! The mesh's compiler: a Nickel node declaration plus the node record in, an immutable,
//! content-addressed generation out.
//!
//! Invariants:
//! - a generation is a function of the declaration's sources, the node record and the mesh's
//!   format version only: not of the checkout's path, the time, the user, the host or any map's
//!   order;
//! - every rejection points at the source span of the offending value and names both sides where
//!   there are two;
//! - a declaration reads nothing outside the fleet's tree but the mesh's own library
//!   ([`imports`]), and its evaluation is bounded in time and memory ([`bounded`]);
//! - the only writes are to the store: blobs first (not waited for: they can be made again), then
//!   the generation, then the cache entries. A blob a crash lost is detected when read and
//!   replaced by the next build that needs it;
//! - a node evaluated module by module ([`incremental`]) gives the generation a whole evaluation
//!   gives, byte for byte; where it cannot, the node is evaluated whole.
#![deny(missing_docs)]

pub mod assemble;
pub mod bounded;
pub mod cache;
pub mod diagnostic;
pub mod eval;
pub mod imports;
pub mod incremental;
pub mod library;
pub mod spine;

use std::path::{Path, PathBuf};

use mesh_lib::store::StoreError;
use mesh_lib::{Generation, GenerationId, NodeRecord, Store};

pub use bounded::{Evaluator, Limits};
pub use diagnostic::MeshDiagnostic;

/// What to build.
pub struct BuildRequest<'a> {
    /// The node declaration.
    pub node: &'a Path,
    /// The node record and the file it came from; `None` for a node never adopted.
    pub record: Option<(&'a NodeRecord, &'a Path)>,
    /// The state directory (store, library, cache).
    pub state_dir: &'a Path,
    /// Whether the evaluation cache may be used.
    pub use_cache: bool,
    /// Where the declaration is evaluated: in a bounded child process (the mesh's way), or here.
    pub evaluator: &'a Evaluator,
    /// Whether the node's modules are evaluated apart — in parallel, each cached on its own
    /// ([`incremental`]) — or the node whole, in one evaluation (the reference the per-module
    /// way is tested against).
    pub per_module: bool,
}

/// A generation built and in the store.
#[derive(Debug)]
pub struct Built {
    /// Its id.
    pub id: GenerationId,
    /// The generation.
    pub generation: Generation,
    /// Whether the evaluation cache answered.
    pub cached: bool,
    /// How many modules were evaluated, when the node was evaluated module by module (the
    /// others came from the per-module cache); `None` when it was evaluated whole or not at all.
    pub evaluated: Option<usize>,
}

/// Why a build failed.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum BuildError {
    /// The declaration or the record is rejected: the user's to fix.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Rejected(#[from] MeshDiagnostic),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The evaluation went past a limit, or its evaluator failed.
    #[error(transparent)]
    #[diagnostic(help("the limits: --eval-timeout SECONDS (MESH_EVAL_TIMEOUT, default {}), --eval-memory MIB (MESH_EVAL_MEMORY, default {})", bounded::DEFAULT_TIME_SECONDS, bounded::DEFAULT_MEMORY_MIB))]
    Bounded(#[from] bounded::BoundedError),
    /// Other I/O failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Evaluates, assembles and stores the generation of `request`.
pub fn build(request: &BuildRequest<'_>) -> Result<Built, BuildError> {
    let node = std::fs::canonicalize(request.node).map_err(|_| {
        MeshDiagnostic::new(format!(
            "cannot read the node declaration {}: no such file",
            request.node.display()
        ))
    })?;
    let store = Store::open(request.state_dir)?;
    let record_bytes = match request.record {
        Some((r, _)) => Some(r.to_bytes().map_err(StoreError::Encode)?),
        None => None,
    };
    let library_dir = library::install(request.state_dir).map_err(|source| BuildError::Io {
        what: "installing the mesh library in",
        path: request.state_dir.to_owned(),
        source,
    })?;
    let tree = imports::Tree::of_declaration(&node, &library_dir);
    let key = cache::CacheKey::new(&node, record_bytes.as_deref());
    if request.use_cache {
        // An entry whose sources the tree no longer holds (a checkout moved, a link retargeted)
        // is not used: the evaluation below says what is wrong.
        if let Some(id) = cache::lookup(request.state_dir, &key, |p| tree.allows(p)) {
            if store.has_generation(&id) {
                let generation = store.generation(&id)?;
                return Ok(Built {
                    id,
                    generation,
                    cached: true,
                    evaluated: None,
                });
            }
        }
    }
    let pinned = request
        .record
        .map(|(r, _)| r.pinned.iter().map(|(k, v)| (k.clone(), v.get())).collect())
        .unwrap_or_default();
    let eval_request = bounded::Request {
        node: node.clone(),
        library: library_dir,
        tree_root: tree.root.clone(),
        pinned,
        record: match (request.record, &record_bytes) {
            (Some((_, path)), Some(bytes)) => Some((
                String::from_utf8_lossy(bytes).into_owned(),
                diagnostic::display_name(path),
            )),
            _ => None,
        },
        memory_mib: 0,
        time_seconds: 0,
        per_module: request.per_module,
        cache_dir: request.use_cache.then(|| request.state_dir.to_owned()),
        program: None,
        chunk: None,
    };
    let evaluated = match request.evaluator {
        Evaluator::InProcess => bounded::evaluate_here(&eval_request)?,
        Evaluator::Child { program, limits } => {
            let eval_request = bounded::Request {
                program: Some(program.clone()),
                memory_mib: limits.memory_mib,
                time_seconds: limits.time.as_secs_f64().ceil() as u64,
                ..eval_request
            };
            bounded::evaluate_in_child(program, *limits, &eval_request)??
        }
    };
    let assembled = evaluated.assembled;
    store.put_blobs_deferred(
        assembled
            .blobs
            .iter()
            .map(|b| (b.bytes.as_slice(), b.private)),
    )?;
    let id = store.put_generation(&assembled.generation)?;
    if request.use_cache {
        cache::modules::store(request.state_dir, &evaluated.entries);
        if let Some(parsed) = &evaluated.parsed {
            cache::modules::store_parsed(request.state_dir, &node, parsed);
        }
        cache::store(request.state_dir, &key, id, &evaluated.sources);
    }
    Ok(Built {
        id,
        generation: assembled.generation,
        cached: false,
        evaluated: evaluated.evaluated,
    })
}

/// Evaluates a Nickel file that is data, not a node — a fleet file — in this process, with the
/// mesh's library on the import path and its imports confined to its tree like a node's; its
/// value as `T`. Meant for small files of the operator's own: a node's declaration is evaluated
/// by [`build`], bounded.
pub fn evaluate_data<T: serde::de::DeserializeOwned>(
    path: &Path,
    state_dir: &Path,
) -> Result<T, BuildError> {
    let file = std::fs::canonicalize(path).map_err(|_| {
        MeshDiagnostic::new(format!("cannot read {}: no such file", path.display()))
    })?;
    let library = library::install(state_dir).map_err(|source| BuildError::Io {
        what: "installing the mesh library in",
        path: state_dir.to_owned(),
        source,
    })?;
    let tree = imports::Tree::of_declaration(&file, &library);
    imports::check_imports(&file, std::slice::from_ref(&library), &tree)?;
    let evaluation = eval::evaluate_in(&file, &library, &Default::default(), &tree)?;
    evaluation.deserialize().map_err(|e| {
        MeshDiagnostic::new(format!(
            "{} does not evaluate to what it should: {e}",
            diagnostic::display_name(&file)
        ))
        .into()
    })
}
