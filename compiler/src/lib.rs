//! The mesh's compiler: a Nickel node declaration plus the node record in, an immutable,
//! content-addressed generation out.
//!
//! Invariants:
//! - a generation is a function of the declaration's sources, the node record, the image lock
//!   of its tree (the digests of images named by tag) and the mesh's format version only: not of the checkout's path, the time, the user, the host or any map's
//!   order;
//! - every rejection points at the source span of the offending value and names both sides where
//!   there are two;
//! - a declaration reads nothing outside the fleet's tree but the mesh's own library
//!   ([`imports`]), and its evaluation is bounded in time and memory ([`bounded`]);
//! - the only writes are to the store and its caches: blobs first (not waited for: they can be
//!   made again), then the generation, then the evaluation cache's entry naming it (the
//!   per-module entries, which name nothing, are written beside them). A blob a crash lost is
//!   detected when read and replaced by the next build that needs it, a torn generation is
//!   built again;
//! - a node evaluated module by module ([`incremental`]) gives the generation a whole evaluation
//!   gives, byte for byte; where it cannot, the node is evaluated whole.
#![deny(missing_docs)]

pub mod assemble;
pub mod bounded;
pub mod cache;
pub mod child;
pub mod diagnostic;
pub mod eval;
pub mod format;
pub mod imports;
pub mod incremental;
pub mod library;
mod memory;
pub mod secrets;
pub mod serving;
pub mod spine;

use std::path::{Path, PathBuf};

use mesh_lib::image_lock::ImageLock;
use mesh_lib::model::Summary;
use mesh_lib::store::StoreError;
use mesh_lib::{Generation, GenerationId, NodeRecord, Store};

pub use bounded::{Evaluator, Limits};

pub use diagnostic::MeshDiagnostic;
pub use imports::TreeRule;

/// The evaluating child's side, when this binary was run as one (its first argument is
/// [`bounded::CHILD_ARG`]): answers one build, or — told to serve ([`serving::SERVE_ARG`]) —
/// build after build of the process that started it. Returns the process's exit code.
pub fn serve() -> u8 {
    let mode = std::env::args_os().nth(2);
    if mode.as_deref() == Some(serving::SERVE_ARG.as_ref()) {
        return serving::serve_builds();
    }
    child::answer_once(mode)
}

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
    /// How the fleet's tree, where its imports may lead, is found ([`imports::Tree::find`]).
    pub tree: &'a imports::TreeRule,
    /// The fleet's image lock ([`images_lock_path`]), when it has one: an image named by a tag
    /// it holds is pinned by the locked digest.
    pub images: Option<&'a ImageLock>,
    /// Whether the node's modules are evaluated apart — in parallel, each cached on its own
    /// ([`incremental`]) — or the node whole, in one evaluation (the reference the per-module
    /// way is tested against).
    pub per_module: bool,
    /// When what is built is kept; a build that is not kept writes nothing in the store or
    /// the caches.
    pub keep_if: KeepIf,
}

/// When a build keeps what it built (the generation, its blobs, the evaluation caches). A
/// refusal leaves no trace: a build kept only if it is as asked, and not, writes nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeepIf {
    /// Only if every container's image is pinned by digest (`--locked`).
    pub pinned: bool,
    /// Only if it is this generation (`--check ID`).
    pub id: Option<GenerationId>,
    /// Never: a build that only looks (`mesh images lock --check`).
    pub never: bool,
}

impl KeepIf {
    /// Whether a generation of `id`, with `unpinned` images, is kept.
    fn allows(&self, id: &GenerationId, unpinned: &[(String, String)]) -> bool {
        let pinned = !self.pinned || unpinned.is_empty();
        let same = self.id.as_ref().is_none_or(|want| want == id);
        pinned && same && !self.never
    }
}

/// The containers of `generation` whose image is named by a tag alone, not pinned by digest:
/// `(container, image)`.
pub fn unpinned(generation: &Generation) -> Vec<(String, String)> {
    generation
        .containers
        .iter()
        .filter(|(_, c)| c.digest.is_none())
        .map(|(n, c)| (n.to_string(), c.image.clone()))
        .collect()
}

/// A generation built: in the store, unless its request kept it only if it was as asked and it
/// is not ([`Built::kept`]).
#[derive(Debug)]
pub struct Built {
    /// Its id.
    pub id: GenerationId,
    /// What it holds, in a few numbers.
    pub summary: Summary,
    /// Whether the evaluation cache answered.
    pub cached: bool,
    /// How many modules were evaluated, when the node was evaluated module by module (the
    /// others came from the per-module cache); `None` when it was evaluated whole or not at all.
    pub evaluated: Option<usize>,
    /// Whether it is in the store: a build whose [`KeepIf`] refused it wrote nothing.
    pub kept: bool,
    /// Its containers whose image is named by a tag alone (see [`unpinned`]), where the build
    /// evaluated it; `None` after a cache hit (read from the generation when asked).
    unpinned: Option<Vec<(String, String)>>,
    /// The state directory whose store holds it.
    state_dir: PathBuf,
    /// The generation, once read.
    generation: std::cell::OnceCell<Generation>,
}

impl Built {
    /// The generation: read from the store, and checked against its id, the first time it is
    /// asked for (a build evaluated in a child has it only there).
    pub fn generation(&self) -> Result<&Generation, StoreError> {
        if let Some(g) = self.generation.get() {
            return Ok(g);
        }
        let g = Store::open(&self.state_dir)?.generation(&self.id)?;
        Ok(self.generation.get_or_init(|| g))
    }

    /// Its containers whose image is named by a tag alone: `(container, image)`.
    pub fn unpinned(&self) -> Result<Vec<(String, String)>, StoreError> {
        match &self.unpinned {
            Some(u) => Ok(u.clone()),
            None if self.summary.containers.managed
                + self.summary.containers.staged
                + self.summary.containers.held
                == 0 =>
            {
                Ok(Vec::new())
            }
            None => Ok(unpinned(self.generation()?)),
        }
    }
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
    /// The evaluating child built the generation but could not keep it in the store.
    #[error("the generation could not be stored: {0}")]
    NotKept(String),
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
    let tree = imports::Tree::find(&node, &library_dir, request.tree)?;
    let images = request
        .images
        .filter(|l| !l.images.is_empty())
        .cloned()
        .unwrap_or_default();
    let images_bytes = (!images.images.is_empty()).then(|| images.to_bytes());
    let key = cache::CacheKey::new(&node, record_bytes.as_deref(), images_bytes.as_deref());
    let built = |id, summary, cached, evaluated, generation: Option<Generation>| Built {
        id,
        summary,
        cached,
        evaluated,
        kept: true,
        unpinned: None,
        state_dir: request.state_dir.to_owned(),
        generation: generation
            .map(std::cell::OnceCell::from)
            .unwrap_or_default(),
    };
    if request.use_cache {
        // An entry whose sources the tree no longer holds (a checkout moved, a link retargeted)
        // is not used: the evaluation below says what is wrong.
        let mut checker = tree.checker();
        if let Some((id, summary)) = cache::lookup(request.state_dir, &key, |p| checker.allows(p)) {
            // A generation a crash left torn is built again (and written whole).
            if store.has_intact_generation(&id) {
                return Ok(match summary {
                    Some(summary) => built(id, summary, true, None, None),
                    None => {
                        let generation = store.generation(&id)?;
                        built(id, generation.summary(), true, None, Some(generation))
                    }
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
        tree: tree.clone(),
        pinned,
        images,
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
        state_dir: request.state_dir.to_owned(),
        cache_key: request.use_cache.then(|| *key.as_bytes()),
        program: None,
        chunk: None,
        keep_if: request.keep_if.clone(),
    };
    match request.evaluator {
        Evaluator::InProcess => {
            let evaluated = child::evaluate_here(&eval_request, None)?;
            let kept = keep(&eval_request, evaluated)?;
            Ok(Built {
                kept: kept.kept,
                unpinned: Some(kept.unpinned),
                ..built(
                    kept.id,
                    kept.summary,
                    false,
                    kept.evaluated,
                    kept.generation,
                )
            })
        }
        Evaluator::Child { program, limits } => {
            let eval_request = bounded::Request {
                program: Some(program.clone()),
                memory_mib: limits.memory_mib,
                time_seconds: limits.time.as_secs_f64().ceil() as u64,
                ..eval_request
            };
            let kept = serving::evaluate_in_child(program, *limits, &eval_request)??;
            Ok(Built {
                kept: kept.kept,
                unpinned: Some(kept.unpinned),
                ..built(kept.id, kept.summary, false, kept.evaluated, None)
            })
        }
    }
}

/// Where the image lock of the declaration `node` is: [`mesh_lib::image_lock::FILE`] at the
/// root of its fleet's tree, found under `rule` as its imports' tree is ([`imports::Tree::find`]):
/// the folder of the fleet file for a fleet's declarations. Whether it is there is the caller's
/// to see.
pub fn images_lock_path(node: &Path, rule: &TreeRule) -> Result<PathBuf, BuildError> {
    let canonical = std::fs::canonicalize(node).map_err(|_| {
        MeshDiagnostic::new(format!(
            "cannot read the node declaration {}: no such file",
            node.display()
        ))
    })?;
    // The library's folder plays no part in where the tree is.
    let tree = imports::Tree::find(&canonical, Path::new("/"), rule)?;
    Ok(tree.root.join(mesh_lib::image_lock::FILE))
}

/// The image lock of the declaration `node` ([`images_lock_path`]) and where it is; `None`
/// when there is none. A lock that cannot be read or is malformed is the user's to fix, named
/// by its file and line.
pub fn images_lock(
    node: &Path,
    rule: &TreeRule,
) -> Result<Option<(ImageLock, PathBuf)>, BuildError> {
    let path = images_lock_path(node, rule)?;
    read_images_lock(&path).map(|l| l.map(|l| (l, path)))
}

/// The image lock at `path`; `None` when there is no file there.
pub fn read_images_lock(path: &Path) -> Result<Option<ImageLock>, BuildError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(MeshDiagnostic::new(format!(
                "cannot read the image lock {}: {e}",
                path.display()
            ))
            .into())
        }
    };
    ImageLock::parse(&bytes).map(Some).map_err(|e| {
        MeshDiagnostic::new(format!("{}:{}: {}", path.display(), e.line, e.message))
            .with_help("`mesh images lock` writes it anew")
            .into()
    })
}

/// A generation evaluated and kept in the store.
pub(crate) struct Kept {
    pub id: GenerationId,
    pub summary: Summary,
    pub evaluated: Option<usize>,
    /// The generation, where it was built in this process.
    pub generation: Option<Generation>,
    /// Whether it was kept (see [`KeepIf`]).
    pub kept: bool,
    /// Its containers whose image is named by a tag alone.
    pub unpinned: Vec<(String, String)>,
}

/// Keeps what `request` evaluated to: its blobs (not waited for: they can be made again), the
/// generation, then the cache entries. Done where the evaluation was — in the evaluating child,
/// which sends back only the id and the summary, not a large node's generation to decode again.
pub(crate) fn keep(
    request: &bounded::Request,
    evaluated: child::Evaluated,
) -> Result<Kept, BuildError> {
    let store = match evaluated.store {
        Some(store) => store,
        None => Store::open(&request.state_dir)?,
    };
    let assembled = evaluated.assembled;
    // What is not to be kept is written nowhere: not the store, not the caches.
    let unpinned = unpinned(&assembled.generation);
    // Encoded here only when the id decides whether it is kept; else while the blobs are written.
    let mut encoded = None;
    if request.keep_if != KeepIf::default() {
        let bytes = encoded.insert(
            assembled
                .generation
                .canonical_bytes()
                .map_err(StoreError::Encode)?,
        );
        let id = GenerationId::of(bytes);
        if !request.keep_if.allows(&id, &unpinned) {
            return Ok(Kept {
                id,
                summary: assembled.generation.summary(),
                evaluated: evaluated.evaluated,
                generation: Some(assembled.generation),
                kept: false,
                unpinned,
            });
        }
    }
    // The per-module entries (hundreds of small files after a cold build) are written beside
    // the store's writes; they do not depend on them.
    let id = std::thread::scope(|scope| {
        if request.cache_key.is_some() {
            let (dir, entries, live, parsed) = (
                &request.state_dir,
                &evaluated.entries,
                &evaluated.live,
                &evaluated.parsed,
            );
            scope.spawn(move || {
                cache::modules::store(dir, entries, live);
                if let Some(parsed) = parsed {
                    cache::modules::store_parsed(dir, &request.node, parsed);
                }
            });
        }
        // The generation is encoded while the blobs are written, and written after them.
        let blobs = scope.spawn(|| {
            store.put_blobs_deferred(
                assembled
                    .blobs
                    .iter()
                    .map(|b| (b.bytes.as_slice(), b.private)),
            )
        });
        let encoded = match encoded {
            Some(bytes) => bytes,
            None => assembled
                .generation
                .canonical_bytes()
                .map_err(StoreError::Encode)?,
        };
        blobs
            .join()
            .map_err(|_| BuildError::NotKept("writing the blobs panicked".into()))??;
        Ok::<_, BuildError>(store.put_generation_canonical(&encoded)?)
    })?;
    let summary = assembled.generation.summary();
    if let Some(key) = &request.cache_key {
        let key = cache::CacheKey::from_bytes(*key);
        cache::store(&request.state_dir, &key, id, &summary, &evaluated.sources);
    }
    memory::discard((assembled.blobs, evaluated.entries, evaluated.sources));
    Ok(Kept {
        id,
        summary,
        evaluated: evaluated.evaluated,
        generation: Some(assembled.generation),
        kept: true,
        unpinned,
    })
}

/// Evaluates a Nickel file that is data, not a node — a fleet file — in this process, with the
/// mesh's library on the import path and its imports confined to its tree like a node's (found
/// under `rule`); its value as `T`. Meant for small files of the operator's own: a node's
/// declaration is evaluated by [`build`], bounded.
pub fn evaluate_data<T: serde::de::DeserializeOwned>(
    path: &Path,
    state_dir: &Path,
    rule: &imports::TreeRule,
) -> Result<T, BuildError> {
    let file = std::fs::canonicalize(path).map_err(|_| {
        MeshDiagnostic::new(format!("cannot read {}: no such file", path.display()))
    })?;
    let library = library::install(state_dir).map_err(|source| BuildError::Io {
        what: "installing the mesh library in",
        path: state_dir.to_owned(),
        source,
    })?;
    let tree = imports::Tree::find(&file, &library, rule)?;
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
