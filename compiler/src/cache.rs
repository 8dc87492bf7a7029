//! The evaluation cache, like Nix's: a build whose inputs are unchanged is not evaluated again.
//!
//! The key is the blake3 of the mesh's own build (compiler sources and library), the
//! declaration's path and the node record's canonical bytes. The entry lists every source file the
//! evaluation read, with the digest of the text it read, and the generation it produced. An entry
//! is used only if every one of those files still has that digest and the generation is still in
//! the store; a changed imported file, template or text import misses.
//!
//! Entries live in `STATE/cache/eval/` and are written atomically; a damaged entry is a miss.

use std::path::{Path, PathBuf};

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
}

#[derive(Serialize, Deserialize)]
struct Entry {
    generation: GenerationId,
    sources: Vec<(PathBuf, String)>,
}

fn entry_path(state_dir: &Path, key: &CacheKey) -> PathBuf {
    state_dir
        .join("cache")
        .join("eval")
        .join(key.0.to_hex().as_str())
}

/// The generation a previous evaluation with the same key and unchanged sources produced, if
/// every source is still one the evaluation may read (`allowed`).
pub fn lookup(
    state_dir: &Path,
    key: &CacheKey,
    allowed: impl Fn(&Path) -> bool,
) -> Option<GenerationId> {
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
    Some(entry.generation)
}

/// Records what an evaluation read and produced. Failing to write the cache fails nothing.
pub fn store(state_dir: &Path, key: &CacheKey, generation: GenerationId, sources: &[ReadSource]) {
    let entry = Entry {
        generation,
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
            let _ignored_cache_write_failure = atomic::write_file(&path, &bytes, 0o600);
        }
    }
}
