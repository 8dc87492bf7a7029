//! The evaluation caches, like Nix's: a build whose inputs are unchanged is not evaluated again;
//! one whose inputs changed evaluates only the modules they change ([`modules`]).
//!
//! The key is the blake3 of the mesh's own build (compiler sources and library), the
//! declaration's path and the node record's canonical bytes. The entry lists every source file the
//! evaluation read, with the digest of the text it read, and the generation it produced. An entry
//! is used only if every one of those files still has that digest and the generation is still in
//! the store; a changed imported file, template or text import misses.
//!
//! Entries live in `STATE/cache/eval/` and are written atomically; a damaged entry is a miss.

use std::path::{Path, PathBuf};

use mesh_lib::model::Summary;
use mesh_lib::{atomic, GenerationId};
use serde::{Deserialize, Serialize};

use crate::eval::ReadSource;

/// The key of one evaluation.
#[derive(Debug, Clone, Copy)]
pub struct CacheKey(blake3::Hash);

impl CacheKey {
    /// The key for evaluating `node` (an absolute path) with `record_bytes`.
    pub fn new(node: &Path, record_bytes: Option<&[u8]>) -> Self {
        let mut h = blake3::Hasher::new();
        h.update(b"mesh-eval-cache\0");
        h.update(env!("MESH_COMPILER_DIGEST").as_bytes());
        h.update(crate::library::digest().as_bytes());
        h.update(node.as_os_str().as_encoded_bytes());
        h.update(b"\0");
        match record_bytes {
            Some(b) => h.update(b"record\0").update(b),
            None => h.update(b"no record\0"),
        };
        Self(h.finalize())
    }

    /// The key's bytes, to hand it to an evaluating child.
    pub fn as_bytes(&self) -> &[u8; 32] {
        self.0.as_bytes()
    }

    /// The key whose bytes these are.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(blake3::Hash::from_bytes(bytes))
    }
}

#[derive(Serialize, Deserialize)]
struct Entry {
    generation: GenerationId,
    /// What a build reports of it (absent in entries of older builds).
    #[serde(default)]
    summary: Option<Summary>,
    sources: Vec<(PathBuf, String)>,
}

fn entry_path(state_dir: &Path, key: &CacheKey) -> PathBuf {
    state_dir
        .join("cache")
        .join("eval")
        .join(key.0.to_hex().as_str())
}

/// The generation a previous evaluation with the same key and unchanged sources produced, and
/// its summary where the entry has it, if every source is still one the evaluation may read
/// (`allowed`).
pub fn lookup(
    state_dir: &Path,
    key: &CacheKey,
    allowed: impl Fn(&Path) -> bool,
) -> Option<(GenerationId, Option<Summary>)> {
    let bytes = std::fs::read(entry_path(state_dir, key)).ok()?;
    let entry: Entry = serde_json::from_slice(&bytes).ok()?;
    for (path, digest) in &entry.sources {
        if !allowed(path) {
            return None;
        }
        let text = std::fs::read(path).ok()?;
        if blake3::hash(&text).to_hex().as_str() != digest {
            return None;
        }
    }
    Some((entry.generation, entry.summary))
}

/// Records what an evaluation read and produced. Failing to write the cache fails nothing.
pub fn store(
    state_dir: &Path,
    key: &CacheKey,
    generation: GenerationId,
    summary: &Summary,
    sources: &[ReadSource],
) {
    let entry = Entry {
        generation,
        summary: Some(summary.clone()),
        sources: sources
            .iter()
            .map(|(p, d)| (p.clone(), blake3::Hash::from_bytes(*d).to_hex().to_string()))
            .collect(),
    };
    let path = entry_path(state_dir, key);
    let Ok(bytes) = serde_json::to_vec(&entry) else {
        return;
    };
    if let Some(dir) = path.parent() {
        if atomic::create_dir_all(dir).is_ok() {
            // Not waited for, like the generation it names: a torn entry is a miss.
            let _ignored_cache_write_failure = atomic::write_file_unsynced(&path, &bytes, 0o600);
        }
    }
}

/// The per-module cache: a node's head (its name and settings) and each of its modules, keyed
/// by everything its evaluated value depends on (see [`crate::spine`]): the mesh's build and
/// library (the contracts' version), the node's pinned ports, the text of the declaration
/// around its `modules` array and of every file the head reads, and, for a module, the files
/// the walk read through to find it and its source closure — or, for a module the walk could
/// not follow, every file the declaration reaches. Entries live in `STATE/cache/head/` and
/// `STATE/cache/module/`, hold the evaluated value as JSON, and are written atomically; a
/// damaged entry is a miss.
pub mod modules {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    use mesh_lib::atomic;
    use serde::{Deserialize, Serialize};

    use crate::imports::Graph;
    use crate::spine::Spine;

    /// Which cache an entry belongs to.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Kind {
        /// A node's name and settings.
        Head,
        /// One module's evaluated value.
        Module,
    }

    impl Kind {
        fn folder(self) -> &'static str {
            match self {
                Kind::Head => "head",
                Kind::Module => "module",
            }
        }
    }

    /// An entry to write: which cache, its key (hex), the value's JSON.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct Entry {
        /// Which cache.
        pub kind: Kind,
        /// The key, hex.
        pub key: String,
        /// The evaluated value, JSON.
        pub value: serde_json::Value,
    }

    /// The keys of a node's head and modules; `None` where a file could not be read.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Keys {
        /// The head's.
        pub head: Option<String>,
        /// Each module's, in the declaration's order.
        pub modules: Vec<Option<String>>,
    }

    fn start(what: &[u8]) -> blake3::Hasher {
        let mut h = blake3::Hasher::new();
        h.update(what);
        h.update(env!("MESH_COMPILER_DIGEST").as_bytes());
        h.update(crate::library::digest().as_bytes());
        h
    }

    fn path(h: &mut blake3::Hasher, p: &Path) {
        h.update(p.as_os_str().as_encoded_bytes());
        h.update(b"\0");
    }

    /// Hashes each file's path and digest; the declaration itself, when `outside` is given, by
    /// the digest of its text around the `modules` array ([`outside_digest`]). `None` if a
    /// file's digest is unknown.
    fn files(
        h: &mut blake3::Hasher,
        graph: &Graph,
        set: &BTreeSet<PathBuf>,
        node: &Path,
        outside: Option<&blake3::Hash>,
    ) -> Option<()> {
        for f in set {
            path(h, f);
            match outside {
                Some(digest) if f == node => {
                    h.update(b"outside modules\0");
                    h.update(digest.as_bytes());
                }
                _ => {
                    h.update(graph.digests.get(f)?);
                }
            }
        }
        Some(())
    }

    /// The digest of the declaration's text around its `modules` array: hashed once, not once
    /// per module (a node of hundreds of modules has a long declaration).
    fn outside_digest(spine: &Spine) -> blake3::Hash {
        let [before, after] = spine.outside_modules();
        let mut h = blake3::Hasher::new();
        h.update(&(before.len() as u64).to_le_bytes());
        h.update(before.as_bytes());
        h.update(after.as_bytes());
        h.finalize()
    }

    /// The keys of `spine`'s head and modules, with `pinned` ports overriding the settings.
    pub fn keys(spine: &Spine, graph: &Graph, pinned: &BTreeMap<String, u16>) -> Keys {
        let node = &spine.node;
        let all = graph.files();
        let outside = outside_digest(spine);
        let head = (|| {
            let mut h = start(b"mesh-cache-head\0");
            path(&mut h, node);
            for (name, port) in pinned {
                h.update(name.as_bytes());
                h.update(b"=");
                h.update(&port.to_le_bytes());
                h.update(b"\n");
            }
            match &spine.head {
                Some(reads) => files(&mut h, graph, reads, node, Some(&outside))?,
                None => {
                    h.update(b"every file\0");
                    files(&mut h, graph, &all, node, None)?
                }
            }
            Some(h.finalize())
        })();
        let modules = spine
            .elements
            .iter()
            .enumerate()
            .map(|(k, e)| {
                let head = head?;
                let mut h = start(b"mesh-cache-module\0");
                h.update(head.as_bytes());
                match &e.place {
                    Some(p) => {
                        path(&mut h, &p.anchor.0);
                        for field in &p.anchor.1 {
                            h.update(field.as_bytes());
                            h.update(b"\0");
                        }
                        path(&mut h, &p.file);
                        h.update(&(p.range.start as u64).to_le_bytes());
                        h.update(&(p.range.end as u64).to_le_bytes());
                        let closure = graph.closure(&p.file);
                        let outside = (!closure.contains(node)).then_some(&outside);
                        let set: BTreeSet<PathBuf> = p.traversed.union(&closure).cloned().collect();
                        files(&mut h, graph, &set, node, outside)?;
                    }
                    None => {
                        h.update(b"dynamic\0");
                        h.update(&(k as u64).to_le_bytes());
                        h.update(spine.element_text(k).as_bytes());
                        files(&mut h, graph, &all, node, None)?;
                    }
                }
                Some(h.finalize().to_hex().to_string())
            })
            .collect();
        Keys {
            head: head.map(|h| h.to_hex().to_string()),
            modules,
        }
    }

    fn entry_path(state_dir: &Path, kind: Kind, key: &str) -> PathBuf {
        state_dir
            .join("cache")
            .join(kind.folder())
            .join(&key[..2])
            .join(key)
    }

    /// Whether an entry is under `key` (read with [`lookup`]).
    pub fn exists(state_dir: &Path, kind: Kind, key: &str) -> bool {
        key.len() >= 3
            && key.bytes().all(|b| b.is_ascii_hexdigit())
            && entry_path(state_dir, kind, key).is_file()
    }

    /// The value cached under `key`, read as a `T` (the evaluated JSON itself, or what the
    /// assembly reads of it), if any.
    pub fn lookup<T: serde::de::DeserializeOwned>(
        state_dir: &Path,
        kind: Kind,
        key: &str,
    ) -> Option<T> {
        if key.len() < 3 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let bytes = std::fs::read(entry_path(state_dir, kind, key)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn parsed_path(state_dir: &Path, node: &Path) -> PathBuf {
        let name = blake3::hash(node.as_os_str().as_encoded_bytes()).to_hex();
        state_dir
            .join("cache")
            .join("imports")
            .join(format!("{}.json", &name[..32]))
    }

    /// Whether a walk of `node` was remembered: the node was built before.
    pub fn has_parsed(state_dir: &Path, node: &Path) -> bool {
        parsed_path(state_dir, node).is_file()
    }

    /// The imports of the texts the last walk of `node` parsed (by the digest of each text).
    pub fn load_parsed(state_dir: &Path, node: &Path) -> crate::imports::Parsed {
        std::fs::read(parsed_path(state_dir, node))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Remembers the imports of the texts a walk of `node` parsed: exactly those of this walk,
    /// so the file does not grow. Failing to write fails nothing.
    pub fn store_parsed(state_dir: &Path, node: &Path, parsed: &crate::imports::Parsed) {
        let path = parsed_path(state_dir, node);
        let Ok(bytes) = serde_json::to_vec(parsed) else {
            return;
        };
        if let Some(dir) = path.parent() {
            if atomic::create_dir_all(dir).is_ok() {
                let _ignored_cache_write_failure =
                    atomic::write_file_unsynced(&path, &bytes, 0o600);
            }
        }
    }

    /// Writes `entries`. Failing to write the cache fails nothing.
    pub fn store(state_dir: &Path, entries: &[Entry]) {
        for e in entries {
            if e.key.len() < 3 || !e.key.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            let path = entry_path(state_dir, e.kind, &e.key);
            let Ok(bytes) = serde_json::to_vec(&e.value) else {
                continue;
            };
            if let Some(dir) = path.parent() {
                // Not waited for: an entry a crash lost is evaluated again.
                if atomic::create_dir_all(dir).is_ok() {
                    let _ignored_cache_write_failure =
                        atomic::write_file_unsynced(&path, &bytes, 0o600);
                }
            }
        }
    }
}
