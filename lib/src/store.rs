//! The content-addressed store under the state directory.
//!
//! ```text
//! STATE/store/blobs/ab/abcdef…       a loose blob, named by the blake3 of its bytes (read-only)
//! STATE/store/packs/abcdef….pack     many blobs of one build in one file (see [`crate::pack`])
//! STATE/store/generations/abcdef…    a generation's canonical encoding, named by its id
//! STATE/store/signatures/abcdef…/01…  its signatures (sshsig), each named by its text's digest
//! ```
//!
//! Invariants:
//! - an object is written atomically ([`crate::atomic`]) and never modified afterwards;
//! - every read checks the bytes against the name: a corrupted object is reported, never used;
//! - every object is stored with mode `0400` and every folder is `0700`, whatever the mode a
//!   declaration gives a file: the store holds secrets, and is its owner's only (see
//!   [`crate::state`]).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::atomic;
use crate::id::{BlobHash, GenerationId};
use crate::model::Generation;
use crate::pack;

/// A store error. Each names the object and the file it concerns.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading or writing failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// An object's bytes do not match its name.
    #[error("the store is corrupted: {path} should hash to {expected} but hashes to {actual}; it was not used (run `mesh verify`)")]
    Corrupt {
        /// The object's file.
        path: PathBuf,
        /// The name it is stored under.
        expected: String,
        /// What its bytes hash to.
        actual: String,
    },
    /// No such blob.
    #[error("blob {0} is not in the store")]
    MissingBlob(BlobHash),
    /// No such generation.
    #[error("generation {0} is not in the store")]
    MissingGeneration(String),
    /// A prefix that matches several generations.
    #[error("`{0}` matches more than one generation: give more digits")]
    Ambiguous(String),
    /// A stored generation that does not parse (a newer format, or damage the hash missed).
    #[error("generation {id} cannot be read: {source}")]
    Unreadable {
        /// Its id.
        id: GenerationId,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A generation that has no canonical encoding.
    #[error("generation cannot be encoded: {0}")]
    Encode(#[from] crate::canonical::CanonicalError),
    /// The state directory cannot be used or made private.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// What [`Store::gc`] removed.
#[derive(Debug, Default, serde::Serialize)]
pub struct GcReport {
    /// Generations removed.
    pub generations: usize,
    /// Blobs removed (loose or from packs).
    pub blobs: usize,
    /// Packs rewritten without their unreferenced blobs.
    pub packs_rewritten: usize,
}

/// What [`Store::verify`] found.
#[derive(Debug, Default, serde::Serialize)]
pub struct VerifyReport {
    /// Objects checked.
    pub checked: usize,
    /// Files whose bytes do not match their names.
    pub corrupt: Vec<PathBuf>,
}

/// The mode of every object in the store: its owner may read it, no one else.
const OBJECT_MODE: u32 = 0o400;

/// How many packs the store keeps before it merges them ([`Store::merge_packs`]).
const MAX_PACKS: usize = 16;

/// Where every packed blob is: digest → (pack file, entry).
type PackIndex = BTreeMap<BlobHash, (PathBuf, pack::Entry)>;

/// A content-addressed store rooted at `STATE/store`.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    /// Loaded on first use: a build answered by the evaluation cache never reads it.
    packs: Arc<Mutex<Option<PackIndex>>>,
}

/// Where a blob is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A file of its own.
    Loose(PathBuf),
    /// In a pack.
    Packed {
        /// The pack file.
        pack: PathBuf,
        /// Its place in the pack.
        entry: pack::Entry,
    },
}

impl Store {
    /// Opens the store of `state_dir`, creating its folders if needed; the state directory is
    /// made private first ([`crate::state::secure`]).
    pub fn open(state_dir: &Path) -> Result<Self, StoreError> {
        crate::state::secure(state_dir)?;
        let root = state_dir.join("store");
        for dir in [
            root.join("blobs"),
            root.join("packs"),
            root.join("generations"),
        ] {
            atomic::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
        }
        Ok(Self {
            root,
            packs: Arc::new(Mutex::new(None)),
        })
    }

    fn with_packs<T>(&self, f: impl FnOnce(&mut PackIndex) -> T) -> Result<T, StoreError> {
        let mut guard = self
            .packs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if guard.is_none() {
            *guard = Some(self.read_pack_index()?);
        }
        Ok(f(guard.as_mut().expect("loaded above")))
    }

    /// Every pack's index. Another process may merge packs while they are listed and read (a
    /// fleet's builds share a store): a pack gone between the two was merged into a new one,
    /// so the listing is read again; past a few tries, what is left is what the index holds
    /// (a blob it misses is looked for again, or stored once more).
    fn read_pack_index(&self) -> Result<PackIndex, StoreError> {
        let mut tries = 0;
        'listing: loop {
            tries += 1;
            let mut index = PackIndex::new();
            for (path, _) in self.packs()? {
                let entries = match pack::read_index(&path) {
                    Ok(entries) => entries,
                    Err(e) if e.kind() == io::ErrorKind::NotFound && tries < 5 => continue 'listing,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io_err("reading", &path)(e)),
                };
                for (hash, e) in entries {
                    index.entry(hash).or_insert((path.clone(), e));
                }
            }
            return Ok(index);
        }
    }

    /// Has the packs' index read again at its next use: packs were added, merged or removed.
    fn forget_packs(&self) {
        *self
            .packs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }

    /// Where a blob is, if it is in the store.
    pub fn locate(&self, hash: &BlobHash) -> Result<Option<Location>, StoreError> {
        let loose = self.blob_path(hash);
        if loose.is_file() {
            return Ok(Some(Location::Loose(loose)));
        }
        self.with_packs(|index| {
            index.get(hash).map(|(pack, entry)| Location::Packed {
                pack: pack.clone(),
                entry: *entry,
            })
        })
    }

    /// The store's folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the blob `hash` lives.
    pub fn blob_path(&self, hash: &BlobHash) -> PathBuf {
        let hex = hash.hex();
        self.root.join("blobs").join(&hex[..2]).join(hex)
    }

    fn generation_path(&self, id: &GenerationId) -> PathBuf {
        self.root.join("generations").join(id.hex())
    }

    /// Adds `bytes` as a blob, durably. Every blob is stored `0400`; `private` (a blob of a file
    /// that is not world-readable) also makes an object an older mesh stored `0444` private. A
    /// blob already present is checked and replaced if corrupted.
    pub fn put_blob(&self, bytes: &[u8], private: bool) -> Result<BlobHash, StoreError> {
        Ok(self.put_blobs([(bytes, private)])?[0])
    }

    /// Adds many blobs, then waits for the disk once (`syncfs`) rather than once per blob: when it
    /// returns, every blob is durable, so a generation written next never references a blob a
    /// crash could lose.
    pub fn put_blobs<'a>(
        &self,
        blobs: impl IntoIterator<Item = (&'a [u8], bool)>,
    ) -> Result<Vec<BlobHash>, StoreError> {
        let mut any_written = false;
        let mut hashes = Vec::new();
        for (bytes, private) in blobs {
            let (hash, written) = self.put_blob_unsynced(bytes, private)?;
            any_written |= written;
            hashes.push(hash);
        }
        if any_written {
            atomic::sync_filesystem(&self.root).map_err(io_err("syncing", &self.root))?;
        }
        Ok(hashes)
    }

    /// Adds many blobs without waiting for the disk: the build's way. A build's blobs can be made
    /// again from the declaration, so a crash that loses one costs a rebuild, never data: the
    /// lost blob is detected on read (its bytes do not match its name) and replaced by the next
    /// build that needs it. Whatever the mesh cannot make again (a found original) goes through
    /// [`Store::put_blobs`]; a switch makes the blobs it activates durable first
    /// ([`Store::sync`]).
    ///
    /// The blobs not yet in the store go into one new pack (`0400`).
    pub fn put_blobs_deferred<'a>(
        &self,
        blobs: impl IntoIterator<Item = (&'a [u8], bool)>,
    ) -> Result<Vec<BlobHash>, StoreError> {
        let mut hashes = Vec::new();
        let mut missing: Vec<(BlobHash, &[u8])> = Vec::new();
        for (bytes, private) in blobs {
            let hash = BlobHash::of(bytes);
            hashes.push(hash);
            // Most of a build's blobs are in a pack already: asking the packs' index first
            // spares a look on disk for each. A private blob's every copy is checked.
            if !private && self.with_packs(|index| index.contains_key(&hash))? {
                continue;
            }
            match self.locate(&hash)? {
                None => {
                    missing.push((hash, bytes));
                }
                Some(Location::Loose(path)) if private => self.restrict(&path)?,
                Some(Location::Packed { pack, .. }) if private => self.restrict(&pack)?,
                Some(_) => {}
            }
        }
        if missing.is_empty() {
            return Ok(hashes);
        }
        let bytes = pack::encode(&missing);
        let path = self
            .root
            .join("packs")
            .join(format!("{}.pack", BlobHash::of(&bytes).hex()));
        atomic::write_file_unsynced(&path, &bytes, OBJECT_MODE)
            .map_err(io_err("writing", &path))?;
        match pack::read_index(&path) {
            Ok(index) => self.with_packs(|packs| {
                for (hash, entry) in index {
                    packs.entry(hash).or_insert((path.clone(), entry));
                }
            })?,
            // Merged away already by a build beside this one, whose merge writes the merged
            // pack (synced) before it removes the packs it read: the blobs are in, and the
            // packs' index is read afresh at its next use.
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.forget_packs(),
            Err(e) => return Err(io_err("reading", &path)(e)),
        }
        // The blobs are in; merging the packs is only for the builds to come.
        let _best_effort = self.merge_packs();
        Ok(hashes)
    }

    /// Past [`MAX_PACKS`] packs, every pack but the largest is merged into one: every build
    /// reads every pack's index, and each build with new content adds a pack. The merged pack
    /// is on disk (synced) before the packs it holds go, so a crash leaves a copy too many,
    /// never one too few; a pack that cannot be read whole and checked stops the merge, with
    /// nothing removed. A reader whose index names a pack merged away meanwhile looks again
    /// ([`Store::blob`]). Returns how many packs were merged.
    fn merge_packs(&self) -> Result<usize, StoreError> {
        let mut packs = Vec::new();
        for (path, name) in self.packs()? {
            let size = fs::metadata(&path).map_err(io_err("reading", &path))?.len();
            packs.push((size, path, name));
        }
        if packs.len() <= MAX_PACKS {
            return Ok(0);
        }
        packs.sort();
        packs.pop(); // the largest stays as it is
        let mut files = Vec::new();
        for (_, path, name) in &packs {
            let bytes = fs::read(path).map_err(io_err("reading", path))?;
            if BlobHash::of(&bytes) != *name {
                return Err(StoreError::Corrupt {
                    path: path.clone(),
                    expected: name.to_string(),
                    actual: BlobHash::of(&bytes).to_string(),
                });
            }
            let index = pack::read_index(path).map_err(io_err("reading", path))?;
            files.push((bytes, index));
        }
        let mut blobs: Vec<(BlobHash, &[u8])> = Vec::new();
        for (bytes, index) in &files {
            for (hash, entry) in index {
                // The index was checked against the file's length when read.
                blobs.push((*hash, &bytes[entry.offset as usize..][..entry.len as usize]));
            }
        }
        let merged = pack::encode(&blobs);
        let path = self
            .root
            .join("packs")
            .join(format!("{}.pack", BlobHash::of(&merged).hex()));
        atomic::write_file(&path, &merged, OBJECT_MODE).map_err(io_err("writing", &path))?;
        crate::crash::point("packs-merged");
        for (_, old, _) in &packs {
            if *old == path {
                continue;
            }
            match fs::remove_file(old) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(io_err("removing", old)(e))
                }
                _ => {}
            }
        }
        self.forget_packs();
        Ok(packs.len())
    }

    fn restrict(&self, path: &Path) -> Result<(), StoreError> {
        let meta = fs::metadata(path).map_err(io_err("reading", path))?;
        if meta.permissions().mode() & 0o077 != 0 {
            fs::set_permissions(path, fs::Permissions::from_mode(0o400))
                .map_err(io_err("restricting", path))?;
        }
        Ok(())
    }

    /// Waits until everything written to the store is on disk (`syncfs`).
    pub fn sync(&self) -> Result<(), StoreError> {
        atomic::sync_filesystem(&self.root).map_err(io_err("syncing", &self.root))
    }

    /// Adds a blob without waiting for the disk; says whether it had to be written.
    fn put_blob_unsynced(
        &self,
        bytes: &[u8],
        private: bool,
    ) -> Result<(BlobHash, bool), StoreError> {
        let hash = BlobHash::of(bytes);
        let path = self.blob_path(&hash);
        let mode = OBJECT_MODE;
        match fs::read(&path) {
            Ok(existing) if BlobHash::of(&existing) == hash => {
                if private {
                    let meta = fs::metadata(&path).map_err(io_err("reading", &path))?;
                    if meta.permissions().mode() & 0o077 != 0 {
                        fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                            .map_err(io_err("restricting", &path))?;
                    }
                }
                return Ok((hash, false));
            }
            Ok(_) => {} // corrupted: replace it with the right bytes below
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("reading", &path)(e)),
        }
        let dir = path.parent().expect("blob paths have a parent");
        atomic::create_dir_all(dir).map_err(io_err("creating", dir))?;
        atomic::write_file_unsynced(&path, bytes, mode).map_err(io_err("writing", &path))?;
        Ok((hash, true))
    }

    /// Whether the blob is present (not checked: use [`Store::blob`] to read it).
    pub fn has_blob(&self, hash: &BlobHash) -> bool {
        matches!(self.locate(hash), Ok(Some(_)))
    }

    /// Reads a blob, checking its bytes against its name.
    pub fn blob(&self, hash: &BlobHash) -> Result<Vec<u8>, StoreError> {
        // The packs' index is read once: another process may have added the blob since, or
        // merged its pack into another; either is looked for again, once, in a fresh index.
        let mut fresh = false;
        let (path, bytes) = loop {
            match self.locate(hash)? {
                None if !fresh => {
                    self.forget_packs();
                    fresh = true;
                }
                None => return Err(StoreError::MissingBlob(*hash)),
                Some(Location::Loose(path)) => {
                    let bytes = fs::read(&path).map_err(io_err("reading", &path))?;
                    break (path, bytes);
                }
                Some(Location::Packed { pack, entry }) => match pack::read_entry(&pack, entry) {
                    Ok(bytes) => break (pack, bytes),
                    Err(e) if e.kind() == io::ErrorKind::NotFound && !fresh => {
                        self.forget_packs();
                        fresh = true;
                    }
                    Err(e) => return Err(io_err("reading", &pack)(e)),
                },
            }
        };
        let actual = BlobHash::of(&bytes);
        if actual != *hash {
            return Err(StoreError::Corrupt {
                path,
                expected: hash.to_string(),
                actual: actual.to_string(),
            });
        }
        Ok(bytes)
    }

    /// Adds a generation (not waited for); returns its id.
    pub fn put_generation(&self, generation: &Generation) -> Result<GenerationId, StoreError> {
        self.put_generation_canonical(&generation.canonical_bytes()?)
    }

    /// Adds a generation given as its canonical bytes, exactly as
    /// [`Generation::canonical_bytes`] gives them (encoded while something else was done), not
    /// waited for; returns its id.
    pub fn put_generation_canonical(&self, bytes: &[u8]) -> Result<GenerationId, StoreError> {
        let id = GenerationId::of(bytes);
        let path = self.generation_path(&id);
        if let Ok(existing) = fs::read(&path) {
            if GenerationId::of(&existing) == id {
                return Ok(id);
            }
        }
        // Not waited for, like a build's blobs: a generation can be built again. A switch makes
        // what it activates durable ([`Store::sync`]) before it commits.
        atomic::write_file_unsynced(&path, bytes, OBJECT_MODE).map_err(io_err("writing", &path))?;
        Ok(id)
    }

    /// Whether a generation is present.
    pub fn has_generation(&self, id: &GenerationId) -> bool {
        self.generation_path(id).is_file()
    }

    fn signatures_dir(&self, id: &GenerationId) -> PathBuf {
        self.root.join("signatures").join(id.hex())
    }

    /// Keeps a signature of generation `id` (armored `sshsig`; see [`crate::trust`]) beside
    /// it, named by the digest of its text. What it vouches for is checked where it is used.
    pub fn put_signature(&self, id: &GenerationId, armored: &str) -> Result<BlobHash, StoreError> {
        let name = BlobHash::of(armored.as_bytes());
        let dir = self.signatures_dir(id);
        let path = dir.join(format!("{}.sig", name.hex()));
        if !path.exists() {
            atomic::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
            atomic::write_file(&path, armored.as_bytes(), OBJECT_MODE)
                .map_err(io_err("writing", &path))?;
        }
        Ok(name)
    }

    /// The signatures kept for generation `id`, each checked against its name (one that is not
    /// what its name says is left out): (name, armored text).
    pub fn signatures(&self, id: &GenerationId) -> Result<Vec<(BlobHash, String)>, StoreError> {
        let dir = self.signatures_dir(id);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("listing", &dir)(e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let path = entry.map_err(io_err("listing", &dir))?.path();
            let Some(name) = path
                .file_stem()
                .and_then(|n| n.to_str())
                .and_then(|n| BlobHash::from_hex(n).ok())
            else {
                continue;
            };
            let text = fs::read_to_string(&path).map_err(io_err("reading", &path))?;
            if BlobHash::of(text.as_bytes()) == name {
                out.push((name, text));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Whether a generation is present and its bytes are those its id names.
    pub fn has_intact_generation(&self, id: &GenerationId) -> bool {
        fs::read(self.generation_path(id)).is_ok_and(|bytes| GenerationId::of(&bytes) == *id)
    }

    /// Reads a generation, checking its bytes against its id.
    pub fn generation(&self, id: &GenerationId) -> Result<Generation, StoreError> {
        let path = self.generation_path(id);
        let bytes = fs::read(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => StoreError::MissingGeneration(id.to_string()),
            _ => io_err("reading", &path)(e),
        })?;
        let actual = GenerationId::of(&bytes);
        if actual != *id {
            return Err(StoreError::Corrupt {
                path,
                expected: id.to_string(),
                actual: actual.to_string(),
            });
        }
        serde_json::from_slice(&bytes).map_err(|source| StoreError::Unreadable { id: *id, source })
    }

    /// The ids of every stored generation, sorted.
    pub fn generation_ids(&self) -> Result<Vec<GenerationId>, StoreError> {
        let dir = self.root.join("generations");
        let mut ids = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err("listing", &dir))? {
            let entry = entry.map_err(io_err("listing", &dir))?;
            if let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(|n| GenerationId::from_hex(n).ok())
            {
                ids.push(id);
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Resolves a full id (`b3:…`) or a unique prefix of one (at least 4 digits, with or
    /// without `b3:`).
    pub fn resolve_generation(&self, text: &str) -> Result<GenerationId, StoreError> {
        if let Ok(id) = text.parse::<GenerationId>() {
            return if self.has_generation(&id) {
                Ok(id)
            } else {
                Err(StoreError::MissingGeneration(text.to_owned()))
            };
        }
        let digits = text.strip_prefix(crate::id::DIGEST_PREFIX).unwrap_or(text);
        if digits.len() < 4 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::MissingGeneration(text.to_owned()));
        }
        let digits = digits.to_ascii_lowercase();
        let mut matches = self
            .generation_ids()?
            .into_iter()
            .filter(|id| id.hex().starts_with(&digits));
        match (matches.next(), matches.next()) {
            (Some(id), None) => Ok(id),
            (None, _) => Err(StoreError::MissingGeneration(text.to_owned())),
            (Some(_), Some(_)) => Err(StoreError::Ambiguous(text.to_owned())),
        }
    }

    /// Removes every generation not in `keep_generations` and every blob not in `keep_blobs`.
    /// A pack that holds some kept blobs is rewritten with those only: the new pack is on disk
    /// before the old one goes, so a crash leaves a copy too many, never one too few.
    pub fn gc(
        &self,
        keep_generations: &std::collections::BTreeSet<GenerationId>,
        keep_blobs: &std::collections::BTreeSet<BlobHash>,
    ) -> Result<GcReport, StoreError> {
        let mut report = GcReport::default();
        for id in self.generation_ids()? {
            if !keep_generations.contains(&id) {
                // Its signatures first: a signature without its generation vouches for nothing.
                let signatures = self.signatures_dir(&id);
                if signatures.exists() {
                    fs::remove_dir_all(&signatures).map_err(io_err("removing", &signatures))?;
                }
                let path = self.generation_path(&id);
                fs::remove_file(&path).map_err(io_err("removing", &path))?;
                crate::crash::point("gc-removed");
                report.generations += 1;
            }
        }
        for (path, name) in self.loose_blobs()? {
            if !keep_blobs.contains(&name) {
                fs::remove_file(&path).map_err(io_err("removing", &path))?;
                crate::crash::point("gc-removed");
                report.blobs += 1;
            }
        }
        let packs = self.root.join("packs");
        for (path, _) in self.packs()? {
            let index = pack::read_index(&path).map_err(io_err("reading", &path))?;
            let kept: Vec<_> = index
                .iter()
                .filter(|(h, _)| keep_blobs.contains(h))
                .collect();
            if kept.len() == index.len() {
                continue;
            }
            report.blobs += index.len() - kept.len();
            if !kept.is_empty() {
                let mut contents = Vec::new();
                for (hash, e) in &kept {
                    let bytes = pack::read_entry(&path, *e).map_err(io_err("reading", &path))?;
                    if BlobHash::of(&bytes) != *hash {
                        return Err(StoreError::Corrupt {
                            path: path.clone(),
                            expected: hash.to_string(),
                            actual: BlobHash::of(&bytes).to_string(),
                        });
                    }
                    contents.push((*hash, bytes));
                }
                let refs: Vec<(BlobHash, &[u8])> =
                    contents.iter().map(|(h, b)| (*h, b.as_slice())).collect();
                let bytes = pack::encode(&refs);
                let new = packs.join(format!("{}.pack", BlobHash::of(&bytes).hex()));
                atomic::write_file(&new, &bytes, OBJECT_MODE).map_err(io_err("writing", &new))?;
                report.packs_rewritten += 1;
            }
            fs::remove_file(&path).map_err(io_err("removing", &path))?;
            crate::crash::point("gc-removed");
        }
        self.forget_packs();
        self.sync()?;
        Ok(report)
    }

    /// Every loose blob's file and the digest it is named by.
    fn loose_blobs(&self) -> Result<Vec<(PathBuf, BlobHash)>, StoreError> {
        let blobs = self.root.join("blobs");
        let mut out = Vec::new();
        for shard in fs::read_dir(&blobs).map_err(io_err("listing", &blobs))? {
            let shard = shard.map_err(io_err("listing", &blobs))?.path();
            if !shard.is_dir() {
                continue;
            }
            for entry in fs::read_dir(&shard).map_err(io_err("listing", &shard))? {
                let path = entry.map_err(io_err("listing", &shard))?.path();
                if let Some(name) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| BlobHash::from_hex(n).ok())
                {
                    out.push((path, name));
                }
            }
        }
        Ok(out)
    }

    /// Every pack's file and the digest it is named by.
    fn packs(&self) -> Result<Vec<(PathBuf, BlobHash)>, StoreError> {
        let packs = self.root.join("packs");
        let mut out = Vec::new();
        for entry in fs::read_dir(&packs).map_err(io_err("listing", &packs))? {
            let path = entry.map_err(io_err("listing", &packs))?.path();
            let name = path
                .file_stem()
                .and_then(|n| n.to_str())
                .and_then(|n| BlobHash::from_hex(n).ok());
            if let (Some(name), true) = (name, path.extension().is_some_and(|e| e == "pack")) {
                out.push((path, name));
            }
        }
        Ok(out)
    }

    /// Checks every object's bytes against its name.
    pub fn verify(&self) -> Result<VerifyReport, StoreError> {
        let mut report = VerifyReport::default();
        for (path, name) in self.loose_blobs()?.into_iter().chain(self.packs()?) {
            report.checked += 1;
            let bytes = fs::read(&path).map_err(io_err("reading", &path))?;
            if BlobHash::of(&bytes) != name {
                report.corrupt.push(path);
            }
        }
        for id in self.generation_ids()? {
            report.checked += 1;
            let path = self.generation_path(&id);
            let bytes = fs::read(&path).map_err(io_err("reading", &path))?;
            if GenerationId::of(&bytes) != id {
                report.corrupt.push(path);
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A corrupted blob is detected on read and by verify, and never returned.
    #[test]
    fn corrupted_blob_is_detected_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let h = store.put_blob(b"original", false).unwrap();
        assert_eq!(store.blob(&h).unwrap(), b"original");
        let p = store.blob_path(&h);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        fs::write(&p, b"tampered").unwrap();
        assert!(matches!(store.blob(&h), Err(StoreError::Corrupt { .. })));
        assert_eq!(store.verify().unwrap().corrupt, vec![p.clone()]);
        // Adding the same content again repairs it.
        store.put_blob(b"original", false).unwrap();
        assert_eq!(store.blob(&h).unwrap(), b"original");
    }

    /// Nothing in the store is readable by anyone but its owner, whatever the declared mode:
    /// objects `0400`, folders `0700`.
    #[test]
    fn every_object_is_its_owners_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let public = store.put_blob(b"motd", false).unwrap();
        let secret = store.put_blob(b"password", true).unwrap();
        store.put_blobs_deferred([(&b"packed"[..], false)]).unwrap();
        for h in [public, secret] {
            assert_eq!(
                fs::metadata(store.blob_path(&h)).unwrap().mode() & 0o777,
                0o400
            );
        }
        for entry in walk(dir.path()) {
            let m = fs::metadata(&entry).unwrap();
            let want = if m.is_dir() { 0o700 } else { 0o400 };
            assert_eq!(m.mode() & 0o777, want, "{}", entry.display());
        }
    }

    /// One build after another, each adding a pack: past the limit all but the largest are
    /// merged, and every blob reads back — through a fresh store, and through a store whose
    /// index was read before the merge took its packs away.
    #[test]
    fn packs_past_the_limit_are_merged_and_every_blob_stays() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let large = vec![7u8; 4096];
        let mut hashes = store.put_blobs_deferred([(&large[..], false)]).unwrap();
        let stale = Store::open(dir.path()).unwrap();
        let contents: Vec<Vec<u8>> = (0..40).map(|i| format!("blob {i}").into_bytes()).collect();
        for (i, bytes) in contents.iter().enumerate() {
            hashes.extend(store.put_blobs_deferred([(&bytes[..], false)]).unwrap());
            if i == 3 {
                // Its index names the first packs.
                assert_eq!(stale.blob(&hashes[1]).unwrap(), contents[0]);
            }
            assert!(store.packs().unwrap().len() <= MAX_PACKS, "after {i}");
        }
        assert!(store.packs().unwrap().len() < 40);
        let fresh = Store::open(dir.path()).unwrap();
        for (i, h) in hashes.iter().enumerate() {
            let want = if i == 0 { &large } else { &contents[i - 1] };
            assert_eq!(&fresh.blob(h).unwrap(), want);
            assert_eq!(
                &stale.blob(h).unwrap(),
                want,
                "through the index read before"
            );
            assert_eq!(&store.blob(h).unwrap(), want);
        }
        assert!(fresh.verify().unwrap().corrupt.is_empty());
    }

    /// Builds that share a store, each with a store of its own opened (as a fleet's builds run,
    /// one process each), add packs while the others merge them away: every put succeeds, and
    /// every blob reads back.
    #[test]
    fn builds_sharing_a_store_put_while_others_merge() {
        let dir = tempfile::tempdir().unwrap();
        let hashes: Vec<Vec<(BlobHash, Vec<u8>)>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..6)
                .map(|w| {
                    let root = dir.path();
                    s.spawn(move || {
                        let mut put = Vec::new();
                        for i in 0..30 {
                            // A new store each time: its packs' index read afresh, as a new
                            // build's is.
                            let store = Store::open(root).unwrap();
                            let bytes = format!("worker {w} blob {i}").into_bytes();
                            let h = store
                                .put_blobs_deferred([(&bytes[..], false)])
                                .unwrap_or_else(|e| panic!("worker {w}, put {i}: {e}"));
                            put.push((h[0], bytes));
                        }
                        put
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let store = Store::open(dir.path()).unwrap();
        for (h, bytes) in hashes.iter().flatten() {
            assert_eq!(&store.blob(h).unwrap(), bytes);
        }
    }

    /// A pack whose bytes are not its name stops the merge: nothing is removed, nothing of it
    /// is copied.
    #[test]
    fn a_damaged_pack_stops_the_merge() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        for i in 0..MAX_PACKS {
            store
                .put_blobs_deferred([(format!("blob {i}").as_bytes(), false)])
                .unwrap();
        }
        // One of the smallest: the largest is not merged.
        let (damaged, _) = store
            .packs()
            .unwrap()
            .into_iter()
            .min_by_key(|(p, _)| fs::metadata(p).unwrap().len())
            .unwrap();
        fs::set_permissions(&damaged, fs::Permissions::from_mode(0o600)).unwrap();
        let mut bytes = fs::read(&damaged).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        fs::write(&damaged, bytes).unwrap();
        store
            .put_blobs_deferred([(&b"one more"[..], false)])
            .unwrap();
        assert_eq!(
            store.packs().unwrap().len(),
            MAX_PACKS + 1,
            "nothing merged"
        );
        assert!(damaged.exists());
    }

    fn walk(p: &Path) -> Vec<PathBuf> {
        let mut out = vec![p.to_owned()];
        if p.is_dir() {
            for e in fs::read_dir(p).unwrap() {
                out.extend(walk(&e.unwrap().path()));
            }
        }
        out
    }
}
