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
    /// The key for evaluating `node` (an absolute path) with `record_bytes` and the image
    /// lock's `images` (its canonical bytes; none hashed when it is empty, so a fleet without
    /// a lock keeps its entries).
    pub fn new(node: &Path, record_bytes: Option<&[u8]>, images: Option<&[u8]>) -> Self {
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
        if let Some(images) = images {
            h.update(b"images\0").update(images);
        }
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
    mut allowed: impl FnMut(&Path) -> bool,
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
/// not follow, every file the declaration reaches. Entries hold the evaluated value as JSON: a
/// head's in `STATE/cache/head/`, the modules' in bundles ([`modules::Bundles`]) in
/// `STATE/cache/modules/`; all are written atomically, and a damaged entry is a miss.
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
        pub value: Box<serde_json::value::RawValue>,
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

    /// The head cached under `key`, read as a `T`, if any (modules are in [`Bundles`]).
    pub fn lookup<T: serde::de::DeserializeOwned>(
        state_dir: &Path,
        kind: Kind,
        key: &str,
    ) -> Option<T> {
        if !is_key(key) {
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

    /// Writes `entries`: a head's in a file of its own, the modules' together in one bundle
    /// ([`Bundles`]), `live` naming the keys of the node's modules (kept when the cache bounds
    /// itself). Failing to write the cache fails nothing.
    pub fn store(state_dir: &Path, entries: &[Entry], live: &[String]) {
        let mut modules: Vec<(String, Vec<u8>)> = Vec::new();
        for e in entries {
            if !is_key(&e.key) {
                continue;
            }
            let bytes = e.value.get().as_bytes().to_vec();
            match e.kind {
                Kind::Module => modules.push((e.key.clone(), bytes)),
                Kind::Head => {
                    let path = entry_path(state_dir, e.kind, &e.key);
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
        if !modules.is_empty() {
            Bundles::add(state_dir, modules, live);
        }
    }

    fn is_key(key: &str) -> bool {
        key.len() >= 3 && key.bytes().all(|b| b.is_ascii_hexdigit())
    }

    /// Bundles kept before they are merged into one.
    const MAX_BUNDLES: usize = 8;

    /// Entries a merge keeps at least, whatever node they are of; past that, and past four times
    /// the node being built, it keeps only that node's.
    const MIN_KEPT: usize = 2000;

    /// Bytes of entries a merge keeps at most beside the node's own (or four times the node's
    /// own, if more): the newest bundles' first. Every merge writes again what it keeps, and a
    /// module can be large (a file's text is in its value).
    const MAX_KEPT_BYTES: usize = 4 << 20;

    /// The modules' entries: `STATE/cache/modules/NAME.bundle`, one per build that evaluated
    /// modules (a cold build of hundreds of modules writes one file, not hundreds). A bundle's
    /// first line is its index, `{"KEY": [OFFSET, LENGTH], …}` into the rest, the values' JSON
    /// one after another; NAME is the digest of its bytes. Past [`MAX_BUNDLES`], the next build
    /// merges them all into its own — every entry, unless there are more than [`MIN_KEPT`] and
    /// four times the node's modules: then the node's own, so the cache a build reads stays the
    /// size of what is built with it, not of every edit ever made. A bundle is written whole
    /// under its name (atomically), so a damaged one — an index that does not read, a value
    /// that does not — is a miss.
    pub struct Bundles {
        /// Each bundle listed: its path, and the file opened (a bundle merged away after it was
        /// opened is still read whole through it). Only its index was read: a value is read
        /// when it is looked up — a build reads its own node's entries, not every node's.
        files: Vec<(PathBuf, std::fs::File)>,
        /// Each key: which bundle, and where in it.
        index: std::collections::HashMap<String, (usize, std::ops::Range<usize>)>,
    }

    fn bundles_dir(state_dir: &Path) -> PathBuf {
        state_dir.join("cache").join("modules")
    }

    /// The bundles in `state_dir`, in the order of their names (none, if there is no cache).
    fn bundle_paths(state_dir: &Path) -> Vec<PathBuf> {
        let Ok(dir) = std::fs::read_dir(bundles_dir(state_dir)) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "bundle"))
            .collect();
        paths.sort();
        paths
    }

    impl Bundles {
        /// Reads every bundle in `state_dir` (none, if there is no cache). A bundle that goes
        /// between the listing and its reading was merged into a new one by another build (which
        /// writes the merged bundle before it removes the old): the folder is listed and read
        /// again (64 times at most), so the entries are not missed for a race.
        pub fn load(state_dir: &Path) -> Self {
            (0..64)
                .find_map(|_| Self::load_listed(state_dir))
                .unwrap_or_else(Self::empty)
        }

        fn empty() -> Self {
            Bundles {
                files: Vec::new(),
                index: std::collections::HashMap::new(),
            }
        }

        /// [`Bundles::load`] of one listing; `None` when a listed bundle was gone.
        fn load_listed(state_dir: &Path) -> Option<Self> {
            use std::io::BufRead;
            let mut out = Self::empty();
            for path in bundle_paths(state_dir) {
                let file = match std::fs::File::open(&path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
                    Err(_) => continue,
                };
                let Ok(size) = file.metadata().map(|m| m.len()) else {
                    continue;
                };
                let mut header = Vec::new();
                let mut lines = std::io::BufReader::with_capacity(64 << 10, &file);
                if lines.read_until(b'\n', &mut header).is_err() || !header.ends_with(b"\n") {
                    continue;
                }
                let Ok(index) = serde_json::from_slice::<BTreeMap<String, (usize, usize)>>(
                    &header[..header.len() - 1],
                ) else {
                    continue;
                };
                let at = out.files.len();
                let body = header.len();
                for (key, (offset, len)) in index {
                    let Some(end) = body
                        .checked_add(offset)
                        .and_then(|start| start.checked_add(len))
                        .filter(|end| *end as u64 <= size)
                    else {
                        continue;
                    };
                    out.index.insert(key, (at, body + offset..end));
                }
                out.files.push((path, file));
            }
            Some(out)
        }

        /// The bytes of bundle `file` in `range` (`None`: it does not read).
        fn bytes(&self, file: usize, range: std::ops::Range<usize>) -> Option<Vec<u8>> {
            use std::os::unix::fs::FileExt;
            let mut bytes = vec![0; range.len()];
            self.files
                .get(file)?
                .1
                .read_exact_at(&mut bytes, range.start as u64)
                .ok()?;
            Some(bytes)
        }

        /// Whether an entry is under `key`.
        pub fn contains(&self, key: &str) -> bool {
            self.index.contains_key(key)
        }

        /// The value under `key`, read as a `T`, if it is there and reads.
        pub fn lookup<T: serde::de::DeserializeOwned>(&self, key: &str) -> Option<T> {
            let (file, range) = self.index.get(key)?;
            serde_json::from_slice(&self.bytes(*file, range.clone())?).ok()
        }

        /// Writes `entries` (key, JSON) as a new bundle; past [`MAX_BUNDLES`], with the entries
        /// of the others it keeps (see [`Bundles`]; `live`: the keys of the node's modules),
        /// which then go.
        fn add(state_dir: &Path, mut entries: Vec<(String, Vec<u8>)>, live: &[String]) {
            let dir = bundles_dir(state_dir);
            let merged =
                (bundle_paths(state_dir).len() >= MAX_BUNDLES).then(|| Bundles::load(state_dir));
            if let Some(old) = &merged {
                let new: BTreeSet<String> = entries.iter().map(|(k, _)| k.clone()).collect();
                let live: BTreeSet<&str> = live.iter().map(String::as_str).collect();
                let over = old.index.len() + entries.len() > MIN_KEPT.max(4 * live.len());
                let mut kept: usize = entries.iter().map(|(_, bytes)| bytes.len()).sum();
                let own: usize = old
                    .index
                    .iter()
                    .filter(|(key, _)| live.contains(key.as_str()) && !new.contains(*key))
                    .map(|(_, (_, range))| range.len())
                    .sum();
                kept += own;
                let budget = MAX_KEPT_BYTES.max(4 * kept);
                // The newest bundles' entries first: the nodes built lately (read from the files
                // opened, which a build beside this one may have merged away since).
                let modified =
                    |file: usize| old.files[file].1.metadata().and_then(|m| m.modified()).ok();
                let mut order: Vec<(&String, &(usize, std::ops::Range<usize>))> =
                    old.index.iter().collect();
                order.sort_by_cached_key(|(key, (file, _))| {
                    (std::cmp::Reverse(modified(*file)), (*key).clone())
                });
                for (key, (file, range)) in order {
                    if new.contains(key) {
                        continue;
                    }
                    let keep = if live.contains(key.as_str()) {
                        true
                    } else if !over && kept + range.len() <= budget {
                        kept += range.len();
                        true
                    } else {
                        false
                    };
                    if keep {
                        // One that does not read is left out: a miss, evaluated again.
                        if let Some(bytes) = old.bytes(*file, range.clone()) {
                            entries.push((key.clone(), bytes));
                        }
                    }
                }
            }
            let mut index = BTreeMap::new();
            let mut body = Vec::new();
            for (key, bytes) in &entries {
                index.insert(key.as_str(), (body.len(), bytes.len()));
                body.extend_from_slice(bytes);
            }
            let Ok(mut bytes) = serde_json::to_vec(&index) else {
                return;
            };
            bytes.push(b'\n');
            bytes.extend_from_slice(&body);
            let name = format!("{}.bundle", &blake3::hash(&bytes).to_hex()[..32]);
            let path = dir.join(name);
            if atomic::create_dir_all(&dir).is_err()
                || atomic::write_file_unsynced(&path, &bytes, 0o600).is_err()
            {
                return;
            }
            // The one-file-per-entry cache of earlier meshes is read no more.
            let _ignored =
                std::fs::remove_dir_all(state_dir.join("cache").join(Kind::Module.folder()));
            // Every entry of the old bundles is in the new one: a build reading them meanwhile
            // finds one gone, and evaluates what it would have read.
            for (old, _) in merged.iter().flat_map(|m| &m.files) {
                if *old != path {
                    let _ignored = std::fs::remove_file(old);
                }
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn entry(key: &str, value: &str) -> Entry {
            Entry {
                kind: Kind::Module,
                key: key.into(),
                value: serde_json::value::RawValue::from_string(value.into()).unwrap(),
            }
        }

        fn bundles(state: &Path) -> usize {
            std::fs::read_dir(bundles_dir(state)).unwrap().count()
        }

        /// Each build's entries go in one file; past the bound they are merged into one, and
        /// every entry written is still found — once, under a key written by several builds
        /// (a key names everything its value depends on: the same key, the same value).
        #[test]
        fn bundles_stay_few_and_keep_every_entry() {
            let state = tempfile::tempdir().unwrap();
            for build in 0..(3 * MAX_BUNDLES) {
                let entries: Vec<Entry> = (0..5)
                    .map(|m| entry(&format!("{build:04x}{m:04x}"), &format!("[{build},{m}]")))
                    .chain([entry("abcabc", "\"same\"")])
                    .collect();
                store(state.path(), &entries, &[]);
                assert!(bundles(state.path()) <= MAX_BUNDLES, "after build {build}");
            }
            let found = Bundles::load(state.path());
            for build in 0..(3 * MAX_BUNDLES) {
                for m in 0..5 {
                    let key = format!("{build:04x}{m:04x}");
                    assert!(found.contains(&key));
                    assert_eq!(found.lookup::<Vec<usize>>(&key), Some(vec![build, m]));
                }
            }
            assert_eq!(found.lookup::<String>("abcabc").as_deref(), Some("same"));
            let merged = std::fs::read_dir(bundles_dir(state.path()))
                .unwrap()
                .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
                .find(|text| text.contains("0000"))
                .unwrap();
            assert_eq!(merged.matches("abcabc").count(), 1, "{merged}");
            assert!(!found.contains("ffff"));
        }

        /// A build reads the bundles' indexes when it starts and a value when it looks it up:
        /// a bundle merged away (removed) in between is still read through the file it opened,
        /// and a value that does not read is a miss, not an error.
        #[test]
        fn values_are_read_when_looked_up_even_from_a_bundle_gone_since() {
            let state = tempfile::tempdir().unwrap();
            store(
                state.path(),
                &[entry("aaaa", "[1,2]"), entry("bbbb", "{\"big\":\"text\"}")],
                &[],
            );
            let found = Bundles::load(state.path());
            for e in std::fs::read_dir(bundles_dir(state.path())).unwrap() {
                std::fs::remove_file(e.unwrap().path()).unwrap();
            }
            assert_eq!(found.lookup::<Vec<u8>>("aaaa"), Some(vec![1, 2]));
            assert_eq!(
                found.lookup::<serde_json::Value>("bbbb"),
                Some(serde_json::json!({"big": "text"}))
            );
            assert_eq!(found.lookup::<String>("aaaa"), None);
            assert!(!found.contains("cccc"));
            assert!(Bundles::load(state.path()).index.is_empty());
        }

        /// Builds sharing a state directory (a deploy's, one per node) write and merge bundles
        /// while others read them: an entry written before never goes missing for a reader
        /// that listed a bundle another build merged away (the flake of `serving`'s test,
        /// where a node evaluated modules it had cached).
        #[test]
        fn readers_find_every_entry_while_others_merge() {
            let state = tempfile::tempdir().unwrap();
            let first: Vec<Entry> = (0..5)
                .map(|m| entry(&format!("f00d{m:04x}"), "1"))
                .collect();
            store(state.path(), &first, &[]);
            std::thread::scope(|s| {
                for w in 0..4 {
                    let state = state.path();
                    s.spawn(move || {
                        for build in 0..(4 * MAX_BUNDLES) {
                            let own = [entry(&format!("{w:04x}{build:04x}"), "2")];
                            store(state, &own, &[]);
                        }
                    });
                }
                for r in 0..2 {
                    let state = state.path();
                    s.spawn(move || {
                        for read in 0..200 {
                            let found = Bundles::load(state);
                            for m in 0..5 {
                                assert!(
                                    found.contains(&format!("f00d{m:04x}")),
                                    "reader {r}, read {read}: entry {m} missing"
                                );
                            }
                        }
                    });
                }
            });
        }

        /// Past the bound, a merge keeps the node's modules (`live`) and drops the rest: a
        /// long history of edits does not make every build read it.
        #[test]
        fn a_merge_past_the_bound_keeps_the_node_s_modules() {
            let state = tempfile::tempdir().unwrap();
            let live: Vec<String> = (0..100).map(|m| format!("aaaa{m:04x}")).collect();
            for build in 0..MAX_BUNDLES {
                // Each build: 400 edits' entries of its own, and the node's 100 modules.
                let entries: Vec<Entry> = (0..400)
                    .map(|m| entry(&format!("{build:04x}{m:04x}"), "1"))
                    .chain(live.iter().map(|k| entry(k, "2")))
                    .collect();
                store(state.path(), &entries, &live);
            }
            let before = Bundles::load(state.path());
            assert_eq!(
                before.index.len(),
                MAX_BUNDLES * 400 + 100,
                "all kept, not merged yet"
            );
            store(state.path(), &[entry("ffff0000", "3")], &live);
            let after = Bundles::load(state.path());
            assert_eq!(bundles(state.path()), 1);
            assert!(live.iter().all(|k| after.contains(k)));
            assert!(after.contains("ffff0000"));
            assert_eq!(after.index.len(), 101, "the edits' old entries dropped");
        }

        /// Past the bound in bytes, a merge keeps the node's modules and, of the others, the
        /// newest bundles' entries that fit: large modules edited often do not make every
        /// build read all of their history.
        #[test]
        fn a_merge_past_the_bytes_keeps_the_node_s_modules_and_the_newest() {
            let state = tempfile::tempdir().unwrap();
            let live: Vec<String> = (0..4).map(|m| format!("aaaa{m:04x}")).collect();
            let big = format!("\"{}\"", "x".repeat(25 << 10));
            let at = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
            for build in 0..MAX_BUNDLES {
                // Each build: 40 modules of other nodes of 25 KiB, and the node's 4.
                let entries: Vec<Entry> = (0..40)
                    .map(|m| entry(&format!("{build:04x}{m:04x}"), &big))
                    .chain(live.iter().map(|k| entry(k, "2")))
                    .collect();
                store(state.path(), &entries, &live);
                // Bundles written in order, a minute apart.
                for e in std::fs::read_dir(bundles_dir(state.path())).unwrap() {
                    let f = std::fs::File::options()
                        .write(true)
                        .open(e.unwrap().path())
                        .unwrap();
                    let just_written = at + std::time::Duration::from_secs(3000);
                    if f.metadata().unwrap().modified().unwrap() > just_written {
                        f.set_modified(at + std::time::Duration::from_secs(60 * build as u64))
                            .unwrap();
                    }
                }
            }
            store(state.path(), &[entry("ffff0000", "3")], &live);
            let after = Bundles::load(state.path());
            assert_eq!(bundles(state.path()), 1);
            assert!(live.iter().all(|k| after.contains(k)));
            assert!(after.contains("ffff0000"));
            let size = std::fs::metadata(bundle_paths(state.path())[0].clone())
                .unwrap()
                .len() as usize;
            assert!(size <= MAX_KEPT_BYTES + (16 << 10), "{size}");
            // The newest build's entries are kept, the oldest's are not.
            let newest = MAX_BUNDLES - 1;
            assert!((0..40).all(|m| after.contains(&format!("{newest:04x}{m:04x}"))));
            assert!((0..40).all(|m| !after.contains(&format!("{:04x}{m:04x}", 0))));
        }

        /// A bundle that does not read — its index torn, or a value cut short — is a miss,
        /// and the others are still read.
        #[test]
        fn a_damaged_bundle_is_a_miss() {
            let state = tempfile::tempdir().unwrap();
            store(state.path(), &[entry("aaaa", "[1,2,3]")], &[]);
            store(state.path(), &[entry("bbbb", "{\"x\":1}")], &[]);
            let dir = bundles_dir(state.path());
            let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            paths.sort();
            let holding = |key: &str| {
                paths
                    .iter()
                    .find(|p| std::fs::read_to_string(p).unwrap().contains(key))
                    .unwrap()
                    .clone()
            };
            // The index of one cut in the middle; the value of the other cut short.
            let a = holding("aaaa");
            std::fs::write(&a, &std::fs::read(&a).unwrap()[..5]).unwrap();
            let b = holding("bbbb");
            let bytes = std::fs::read(&b).unwrap();
            std::fs::write(&b, &bytes[..bytes.len() - 2]).unwrap();
            let found = Bundles::load(state.path());
            assert!(!found.contains("aaaa"));
            assert_eq!(found.lookup::<serde_json::Value>("bbbb"), None);
            // Zeros where the disk lost what was written.
            std::fs::write(&b, vec![0u8; bytes.len()]).unwrap();
            assert!(!Bundles::load(state.path()).contains("bbbb"));
        }
    }
}
