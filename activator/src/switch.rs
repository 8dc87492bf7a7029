//! A node under the activator's hand: the lock held, the root, the store, the host store and the
//! profile. [`Node::switch`] observes, plans, and — unless it is a dry run — applies and commits.
//!
//! The order of a switch, and why:
//! 1. an interrupted switch is finished first ([`Node::recover`]), from its journal;
//! 2. every blob to write is read and checked before anything changes (a corrupted blob stops the
//!    switch with nothing done), and the space and writability of the root are checked;
//! 3. content the mesh did not write is recorded in the store (durably) before it is replaced;
//! 4. the journal names every path about to change and what it will hold;
//! 5. each file is replaced atomically; if one fails, the ones already changed are put back;
//! 6. the host store records what the mesh wrote; the profile's `current` moves; the journal
//!    goes.
//!
//! A crash anywhere leaves, after the next switch or rollback, the old or the new generation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mesh_lib::model::{FileState, Mode};
use mesh_lib::record::{record_path, FoundFile};
use mesh_lib::store::StoreError;
use mesh_lib::{atomic, BlobHash, Generation, GenerationId, NodeRecord, Store, TargetPath};
use serde::{Deserialize, Serialize};

use crate::host::{HostError, HostStore, Kept, Written};
use crate::lock::{LockError, StateLock};
use crate::plan::{self, Action, Plan, PlanError, PlanInput, Reason};
use crate::profile::{Profile, Trigger};
use crate::root::{FileFacts, Observed, Root, RootError, TempKey};
use crate::users::Ids;

/// How a failure is to be reported: the binary maps these to exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bad input (exit 1).
    User,
    /// A conflict or refusal (exit 2).
    Refused,
    /// The system failed (exit 3).
    System,
}

/// Why an activation failed. Each says what was changed: nothing, unless it says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum ActivateError {
    /// Another switch holds the lock.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The plan refused.
    #[error("{0}; nothing was changed")]
    Plan(#[from] PlanError),
    /// The store failed (a corrupted blob among others).
    #[error("{0}; nothing was changed")]
    Store(#[from] StoreError),
    /// The filesystem under the root failed.
    #[error("{0}")]
    Root(#[from] RootError),
    /// The host store failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// Not enough space under the root.
    #[error("not enough space under {root}: the switch writes {need} bytes, {free} are free; nothing was changed")]
    NoSpace {
        /// The root.
        root: PathBuf,
        /// Bytes needed (with a margin per file).
        need: u64,
        /// Bytes free.
        free: u64,
    },
    /// The root is mounted read-only.
    #[error("{root} is mounted read-only; nothing was changed")]
    ReadOnly {
        /// The root.
        root: PathBuf,
    },
    /// Writing the new files failed before any declared path changed.
    #[error("{source}; nothing was changed")]
    NotStarted {
        /// What failed.
        #[source]
        source: RootError,
    },
    /// A file operation failed midway; what had changed was put back.
    #[error("{source}; the files already changed were put back, the node is still at its previous generation")]
    RolledBack {
        /// What failed.
        #[source]
        source: RootError,
    },
    /// A file operation failed and putting back failed too: the journal stays for the next run.
    #[error("{source}; putting the changed files back failed too ({undo}); run the switch again to finish")]
    Interrupted {
        /// What failed.
        #[source]
        source: RootError,
        /// Why putting back failed.
        undo: RootError,
    },
    /// The generation is of another node.
    #[error("generation {id} is of node {theirs}, but this node is {ours}")]
    WrongNode {
        /// The generation.
        id: GenerationId,
        /// Its node.
        theirs: String,
        /// This node.
        ours: String,
    },
    /// A stored generation that breaks the model's invariants (built elsewhere, or crafted).
    #[error("generation {} is not one the compiler would build: {why}; nothing was changed", .id.short())]
    InvalidGeneration {
        /// The generation.
        id: GenerationId,
        /// What is wrong.
        why: String,
    },
    /// Nothing to roll back to, or no such generation number.
    #[error("{0}")]
    NoSuchGeneration(String),
    /// The Docker engine failed or does not answer.
    #[error("{0}")]
    Docker(#[from] crate::docker::DockerError),
    /// A found container the generation does not hold would be replaced.
    #[error("container {name} was found on this adopted node and the generation does not hold it: switching would replace it (switch the declaration on this node, which records and holds it); nothing was changed")]
    FoundContainerNotHeld {
        /// Its name.
        name: String,
    },
    /// Images a container to create needs are not on the engine.
    #[error("image{} not on the Docker engine: {}; the mesh does not pull (docker pull or docker load them first); nothing was changed", if .images.len() == 1 { " is" } else { "s are" }, .images.join(", "))]
    MissingImages {
        /// The images.
        images: Vec<String>,
    },
    /// A container step failed after the files of the new generation were put in place.
    #[error("{source}: a container step failed after the files of {target} were put in place; {previous} is still the generation in force. Fix the cause and run the switch again, or go back with `mesh switch --generation {previous}`", target = .target.short(), previous = .previous.as_ref().map(|p| p.short().to_string()).unwrap_or_else(|| "(none)".into()))]
    ContainersUnfinished {
        /// The generation being switched to.
        target: GenerationId,
        /// The one in force before (`None` on a first switch).
        previous: Option<GenerationId>,
        /// The engine's error.
        #[source]
        source: Box<crate::docker::DockerError>,
    },
    /// The firewall refused (nft's own message); the kernel's ruleset is unchanged.
    #[error("{0}; the firewall was left as it was and no file was changed")]
    Firewall(#[from] crate::firewall::FirewallError),
    /// Any other I/O in the state directory.
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

impl ActivateError {
    /// How to report it.
    pub fn kind(&self) -> Kind {
        match self {
            ActivateError::Lock(LockError::Held { .. }) => Kind::Refused,
            ActivateError::Plan(PlanError::UnknownId { .. }) => Kind::User,
            ActivateError::Plan(_) => Kind::Refused,
            ActivateError::Root(
                RootError::Symlink { .. } | RootError::Folder { .. } | RootError::NotAFolder { .. },
            )
            | ActivateError::NotStarted {
                source:
                    RootError::Symlink { .. } | RootError::Folder { .. } | RootError::NotAFolder { .. },
            } => Kind::Refused,
            ActivateError::Store(StoreError::MissingGeneration(_) | StoreError::Ambiguous(_)) => {
                Kind::User
            }
            ActivateError::WrongNode { .. }
            | ActivateError::NoSuchGeneration(_)
            | ActivateError::InvalidGeneration { .. } => Kind::User,
            ActivateError::FoundContainerNotHeld { .. } | ActivateError::MissingImages { .. } => {
                Kind::Refused
            }
            ActivateError::Firewall(crate::firewall::FirewallError::NotCovered(_)) => Kind::Refused,
            // `--netns` names a namespace that does not exist: the user's input.
            ActivateError::Firewall(crate::firewall::FirewallError::Netns { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Kind::User
            }
            _ => Kind::System,
        }
    }
}

fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> ActivateError + 'a {
    move |source| ActivateError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// One path the journal says is changing, and what it will hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct JournalOp {
    path: TargetPath,
    /// The content it will hold; `None` for a removal.
    hash: Option<BlobHash>,
    /// Whether that content is a found original coming back (then it is not the mesh's).
    restore: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    target: GenerationId,
    ops: Vec<JournalOp>,
}

/// What a switch did, or would do.
#[derive(Debug, Serialize)]
pub struct Switched {
    /// The generation switched to.
    pub id: GenerationId,
    /// Its number in the profile (`None` for a dry run or when it already was current).
    pub number: Option<u64>,
    /// The plan.
    pub plan: Plan,
    /// The container steps.
    pub containers: Vec<crate::docker::Step>,
    /// How many Docker API calls the switch made.
    pub docker_calls: usize,
    /// What putting the firewall in force changed (`None` when the switch changed nothing).
    pub firewall: Option<crate::firewall::Converged>,
    /// The found firewall's tables (`family name`) loaded back from the dump before the switch:
    /// a rollback across the flip.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restored: Vec<String>,
    /// Whether it was only planned.
    pub dry_run: bool,
}

/// What `mesh status` reports.
#[derive(Debug, Serialize)]
pub struct Status {
    /// Adopted or managed.
    pub mode: Mode,
    /// The current generation's number and id.
    pub current: Option<(u64, GenerationId)>,
    /// Files held (found, module not taken).
    pub held: usize,
    /// Files staged.
    pub staged: usize,
    /// Files managed.
    pub managed: usize,
    /// Taken modules.
    pub taken: Vec<String>,
    /// Modules assigned, not taken.
    pub not_taken: Vec<String>,
    /// Managed files changed behind the mesh's back: path and what is there now.
    pub drift: Vec<(TargetPath, String)>,
    /// Whether an interrupted switch is waiting to be finished.
    pub interrupted: bool,
    /// Containers by state: (held, staged, managed).
    pub containers: (usize, usize, usize),
    /// What a take would do to each held container: its module and name.
    pub take_would_retire: Vec<(String, String)>,
    /// The firewall against the generation in force (`None` without one).
    pub firewall: Option<FirewallDrift>,
}

/// The firewall in the kernel against the generation in force.
#[derive(Debug, Serialize)]
pub struct FirewallDrift {
    /// What a reconcile would change (nothing: it is in force).
    pub would_change: Option<crate::firewall::Converged>,
    /// Why it could not be read (without privileges, say), if so.
    pub unreadable: Option<String>,
}

/// A node, its lock held.
pub struct Node {
    state: PathBuf,
    root: Root,
    /// The content-addressed store.
    pub store: Store,
    /// The profile.
    pub profile: Profile,
    ids: Ids,
    firewall: Box<dyn crate::firewall::Firewall>,
    _lock: Option<StateLock>,
}

/// What is at each path, and the bytes of each regular file there.
type Observations = (
    BTreeMap<TargetPath, Observed>,
    BTreeMap<TargetPath, Vec<u8>>,
);

fn journal_path(state: &Path) -> PathBuf {
    state.join("journal.json")
}

impl Node {
    /// Takes the state directory's lock (failing at once if it is held) and opens the node.
    pub fn open(state: &Path, root: &Path, netns: Option<String>) -> Result<Self, ActivateError> {
        let lock = StateLock::take(state)?;
        Self::open_with(state, root, netns, Some(lock))
    }

    /// Opens the node to look at it, without the lock: for commands that change nothing.
    pub fn inspect(
        state: &Path,
        root: &Path,
        netns: Option<String>,
    ) -> Result<Self, ActivateError> {
        Self::open_with(state, root, netns, None)
    }

    fn open_with(
        state: &Path,
        root: &Path,
        netns: Option<String>,
        lock: Option<StateLock>,
    ) -> Result<Self, ActivateError> {
        let store = Store::open(state)?;
        let profile = Profile::open(state).map_err(io_err("opening the profile in", state))?;
        let key =
            TempKey::of_state(state).map_err(io_err("reading the temp-file key in", state))?;
        let root = Root::open(root, key)?;
        Ok(Self {
            state: state.to_owned(),
            ids: Ids::load(&root),
            root,
            store,
            profile,
            firewall: Box::new(crate::firewall::Kernel::new(netns)),
            _lock: lock,
        })
    }

    /// The same node, its firewall spoken to through `firewall` (a [`Recording`] one in tests
    /// of what the activator asks of it).
    ///
    /// [`Recording`]: crate::firewall::Recording
    pub fn with_firewall(mut self, firewall: Box<dyn crate::firewall::Firewall>) -> Self {
        self.firewall = firewall;
        self
    }

    /// The value of the owner label on the containers this node's switches create: a digest
    /// of the state directory's path.
    fn owner(&self) -> String {
        let path = std::fs::canonicalize(&self.state).unwrap_or_else(|_| self.state.clone());
        let digest = blake3::hash(path.as_os_str().as_encoded_bytes());
        digest.to_hex()[..16].to_owned()
    }

    fn engine_marker(&self) -> PathBuf {
        self.state.join("engine-used")
    }

    /// Whether a switch of this node ever created a container: from then on every switch asks
    /// the engine, so one no longer declared is removed even by a generation declaring none.
    fn engine_used(&self) -> bool {
        self.engine_marker().exists()
    }

    /// Records, durably and before the first container is created, that the engine is used.
    fn mark_engine_used(&self) -> Result<(), ActivateError> {
        let marker = self.engine_marker();
        if !marker.exists() {
            atomic::write_file(
                &marker,
                b"the mesh created containers for this node\n",
                0o600,
            )
            .map_err(io_err("writing", &marker))?;
        }
        Ok(())
    }

    /// The node record, if the node was ever adopted.
    pub fn record(&self) -> Result<Option<NodeRecord>, ActivateError> {
        let path = record_path(&self.state);
        match std::fs::read(&path) {
            Ok(bytes) => NodeRecord::parse(&bytes)
                .map(Some)
                .map_err(|e| ActivateError::Io {
                    what: "reading the node record",
                    path,
                    source: std::io::Error::other(e),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("reading", &path)(e)),
        }
    }

    /// Writes the node record, durably.
    pub fn save_record(&self, record: &NodeRecord) -> Result<(), ActivateError> {
        let path = record_path(&self.state);
        let bytes = record
            .to_bytes()
            .map_err(|e| io_err("encoding", &path)(std::io::Error::other(e)))?;
        atomic::write_file(&path, &bytes, 0o600).map_err(io_err("writing", &path))?;
        crate::crash::point("record-written");
        Ok(())
    }

    /// The current generation.
    pub fn current(&self) -> Result<Option<(u64, GenerationId, Generation)>, ActivateError> {
        match self
            .profile
            .current()
            .map_err(io_err("reading the profile in", &self.state))?
        {
            Some((n, id)) => Ok(Some((n, id, self.store.generation(&id)?))),
            None => Ok(None),
        }
    }

    /// Finishes the bookkeeping of a switch a crash interrupted: removes its temp files and
    /// records in the host store what it had written. Says whether there was one.
    pub fn recover(&self) -> Result<bool, ActivateError> {
        let path = journal_path(&self.state);
        let journal: Journal = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(j) => j,
                // Cut short by the crash before it was renamed into place cannot happen (it is
                // written atomically); anything else unreadable is not ours to guess at.
                Err(e) => {
                    return Err(io_err("reading the journal", &path)(std::io::Error::other(
                        e,
                    )))
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err("reading", &path)(e)),
        };
        let mut host = HostStore::load(&self.state)?;
        for op in &journal.ops {
            self.root.remove_leftover(&op.path)?;
            let (observed, _) = self.root.observe(&op.path)?;
            match (op.hash, observed) {
                (Some(hash), Observed::File(f)) if f.hash == hash => {
                    if op.restore {
                        host.unset_written(&op.path);
                    } else {
                        host.set_written(&op.path, Written::from(&f));
                    }
                }
                (None, Observed::Absent) => {
                    host.unset_written(&op.path);
                }
                _ => {}
            }
        }
        host.save(&self.state)?;
        std::fs::remove_file(&path).map_err(io_err("removing", &path))?;
        atomic::sync_dir(&self.state).map_err(io_err("syncing", &self.state))?;
        self.profile
            .repair_log()
            .map_err(io_err("repairing the log in", &self.state))?;
        Ok(true)
    }

    /// Records every found file and container of `generation` that it does not hold yet: present at a declared
    /// path of a module not taken, with no record in the host store that the mesh wrote it. The
    /// content goes into the store (durably), the hash, mode and owner into `record`. The caller
    /// saves the record and builds again, so the generation holds them.
    pub fn record_found(
        &self,
        generation: &Generation,
        record: &mut NodeRecord,
    ) -> Result<usize, ActivateError> {
        if record.mode != Mode::Adopted {
            return Ok(0);
        }
        let host = HostStore::load(&self.state)?;
        let mut found = 0;
        let staged: Vec<&mesh_lib::model::ContainerName> = generation
            .containers
            .iter()
            .filter(|(n, c)| {
                c.state == mesh_lib::model::ContainerState::Staged
                    && !record.found.containers.contains_key(*n)
            })
            .map(|(n, _)| n)
            .collect();
        if !staged.is_empty() {
            let engine = crate::docker::Engine::connect()?;
            let present = engine.containers()?;
            for name in staged {
                if present.get(name.as_str()).is_some_and(|p| !p.is_ours()) {
                    let spec = engine.spec_of(name.as_str())?;
                    let hash = self.store.put_blob(&spec, true)?;
                    record.found.containers.insert(
                        name.clone(),
                        mesh_lib::record::FoundContainer {
                            spec: hash,
                            running: present[name.as_str()].running,
                        },
                    );
                    found += 1;
                }
            }
        }
        for (path, file) in &generation.files {
            if file.state != FileState::Staged
                || host.written.contains_key(path)
                || record.found.files.contains_key(path)
            {
                continue;
            }
            if let (Observed::File(f), Some(bytes)) = self.root.observe(path)? {
                self.store.put_blob(&bytes, !f.mode.world_readable())?;
                record.found.files.insert(
                    path.clone(),
                    FoundFile {
                        hash: f.hash,
                        mode: f.mode,
                        owner: self.ids.user_name(f.uid),
                        group: self.ids.group_name(f.gid),
                        uid: Some(f.uid),
                        gid: Some(f.gid),
                    },
                );
                found += 1;
            }
        }
        Ok(found)
    }

    fn observe_all(
        &self,
        target: &Generation,
        host: &HostStore,
    ) -> Result<Observations, ActivateError> {
        let mut observed = BTreeMap::new();
        let mut contents = BTreeMap::new();
        let paths = plan::paths_to_observe(target, host);
        // A file the mesh wrote, unchanged since (same stamp): known without reading it. The
        // stamps are read on two threads: on a large node this is most of a no-op switch.
        let candidates: Vec<&TargetPath> = paths
            .iter()
            .copied()
            .filter(|p| host.written.get(*p).is_some_and(|w| w.stamp.is_some()))
            .collect();
        let (first, second) = candidates.split_at(candidates.len() / 2);
        let stamped = std::thread::scope(|scope| {
            let other = scope.spawn(|| self.root.stamps(second.iter().copied()));
            let mut mine = self.root.stamps(first.iter().copied())?;
            mine.extend(other.join().expect("the stamp thread does not panic")?);
            Ok::<_, RootError>(mine)
        })?;
        let mut known: BTreeMap<&TargetPath, FileFacts> = BTreeMap::new();
        for (path, stamp) in stamped {
            let w = &host.written[path];
            if let Some(stamp) = stamp.filter(|s| w.stamp == Some(*s)) {
                known.insert(
                    path,
                    FileFacts {
                        hash: w.hash,
                        mode: w.mode,
                        uid: w.uid,
                        gid: w.gid,
                        size: stamp.size,
                        stamp,
                    },
                );
            }
        }
        for path in paths {
            if let Some(facts) = known.remove(path) {
                observed.insert(path.clone(), Observed::File(facts));
                continue;
            }
            let (o, bytes) = self.root.observe(path)?;
            if let Some(b) = bytes {
                contents.insert(path.clone(), b);
            }
            observed.insert(path.clone(), o);
        }
        Ok((observed, contents))
    }

    /// Switches to `target` (or only plans it, for a dry run) and commits it as the next
    /// generation of the profile.
    pub fn switch(
        &self,
        id: GenerationId,
        target: &Generation,
        trigger: Trigger,
        declaration: Option<&Path>,
        dry_run: bool,
    ) -> Result<Switched, ActivateError> {
        target
            .validate()
            .map_err(|why| ActivateError::InvalidGeneration { id, why })?;
        if !dry_run {
            self.recover()?;
        }
        let record = self
            .record()?
            .unwrap_or_else(|| NodeRecord::managed(target.node.clone()));
        if record.node != target.node {
            return Err(ActivateError::WrongNode {
                id,
                theirs: target.node.to_string(),
                ours: record.node.to_string(),
            });
        }
        // The plan needs the host store, not the generation in force: every file the mesh may
        // remove is one the host store says it wrote.
        let in_force = self
            .profile
            .current()
            .map_err(io_err("reading the profile in", &self.state))?;
        let mut host = HostStore::load(&self.state)?;
        let (observed, contents) = self.observe_all(target, &host)?;
        let plan = plan::plan(&PlanInput {
            target,
            host: &host,
            record: &record,
            observed: &observed,
            ids: &self.ids,
        })?;
        // Containers: when the generation declares some, or this node ever created one (it
        // may have to go); then the engine must answer, before anything changes.
        let owner = self.owner();
        let (engine, containers) = if target.containers.is_empty() && !self.engine_used() {
            (None, Vec::new())
        } else {
            let engine = crate::docker::Engine::connect()?;
            let steps = crate::docker::plan(
                &target.containers,
                &engine.containers()?,
                &record.found.containers,
                record.mode == Mode::Adopted,
                &owner,
            )
            .map_err(|name| ActivateError::FoundContainerNotHeld { name })?;
            let images = engine.missing_images(&target.containers, &steps)?;
            if !images.is_empty() {
                return Err(ActivateError::MissingImages { images });
            }
            (Some(engine), steps)
        };
        let already = in_force.is_some_and(|(_, cid)| cid == id);
        let bookkeeping = plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::Claim { .. } | Action::Keep { .. }));
        let busy = |s: &crate::docker::Step| !matches!(s, crate::docker::Step::Hold { .. });
        if dry_run
            || (already && !plan.changes_machine() && !bookkeeping && !containers.iter().any(busy))
        {
            let docker_calls = engine.as_ref().map_or(0, crate::docker::Engine::calls);
            return Ok(Switched {
                id,
                number: None,
                plan,
                containers,
                docker_calls,
                firewall: None,
                restored: Vec::new(),
                dry_run,
            });
        }

        // Everything that will be written, read and checked before anything changes.
        let mut blobs: BTreeMap<BlobHash, Vec<u8>> = BTreeMap::new();
        for action in &plan.actions {
            if let Action::Write { blob, .. } = action {
                if !blobs.contains_key(blob) {
                    blobs.insert(*blob, self.store.blob(blob)?);
                }
            }
        }
        if plan.changes_machine() {
            let (free, read_only) = self
                .root
                .space()
                .map_err(io_err("inspecting", self.root.path()))?;
            if read_only {
                return Err(ActivateError::ReadOnly {
                    root: self.root.path().to_owned(),
                });
            }
            let need: u64 = plan
                .actions
                .iter()
                .filter_map(|a| match a {
                    Action::Write { blob, .. } => Some(blobs[blob].len() as u64 + 4096),
                    _ => None,
                })
                .sum();
            if need > free {
                return Err(ActivateError::NoSpace {
                    root: self.root.path().to_owned(),
                    need,
                    free,
                });
            }
        }

        // The firewall first, in one transaction: if nft refuses, nothing has changed.
        let firewall = self.converge_firewall(target)?;
        crate::crash::point("firewall-converged");

        // What the mesh did not write is recorded before it is replaced or removed.
        let keeps: Vec<(&TargetPath, BlobHash, crate::host::Why)> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Keep { path, hash, why } => Some((path, *hash, *why)),
                _ => None,
            })
            .collect();
        if !keeps.is_empty() {
            let mut batch = Vec::new();
            for (path, _, _) in &keeps {
                let private = match &observed[*path] {
                    Observed::File(f) => !f.mode.world_readable(),
                    _ => true,
                };
                batch.push((contents[*path].as_slice(), private));
            }
            self.store.put_blobs(batch)?;
            for (path, hash, why) in &keeps {
                if let Observed::File(f) = &observed[*path] {
                    host.keep(
                        path,
                        Kept {
                            hash: *hash,
                            mode: f.mode,
                            uid: f.uid,
                            gid: f.gid,
                            why: *why,
                        },
                    );
                }
            }
            host.save(&self.state)?;
            crate::crash::point("originals-recorded");
        }
        // The generation and its blobs were written by a build without waiting for the disk.
        self.store.sync()?;

        let ops: Vec<JournalOp> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Write {
                    path, blob, reason, ..
                } => Some(JournalOp {
                    path: path.clone(),
                    hash: Some(*blob),
                    restore: *reason == Reason::Restore,
                }),
                Action::Remove { path } => Some(JournalOp {
                    path: path.clone(),
                    hash: None,
                    restore: false,
                }),
                _ => None,
            })
            .collect();
        let journal = journal_path(&self.state);
        if !ops.is_empty() {
            let bytes = serde_json::to_vec(&Journal { target: id, ops })
                .map_err(|e| io_err("encoding", &journal)(e.into()))?;
            atomic::write_file(&journal, &bytes, 0o600).map_err(io_err("writing", &journal))?;
            crate::crash::point("journal-written");
        }

        // Every new file is staged (temp file beside its target, final mode and owner) and made
        // durable with one sync of the filesystem, instead of an fsync per file and folder; only
        // then does anything at a declared path change.
        let writes: Vec<&Action> = plan
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Write { .. }))
            .collect();
        for (i, action) in writes.iter().enumerate() {
            let Action::Write {
                path,
                blob,
                mode,
                uid,
                gid,
                ..
            } = action
            else {
                unreachable!()
            };
            if let Err(source) = self
                .root
                .stage(path, &blobs[blob], *mode, *uid, *gid, false)
            {
                for staged in &writes[..i] {
                    let _best_effort = self.root.remove_leftover(staged.path());
                }
                let _done = std::fs::remove_file(&journal);
                return Err(ActivateError::NotStarted { source });
            }
        }
        self.root.sync()?;
        crate::crash::point("file-written-before-rename");

        let mut applied: Vec<&Action> = Vec::new();
        let mut stamps = BTreeMap::new();
        for action in &plan.actions {
            let result = match action {
                Action::Write { path, .. } => self.root.commit(path).map(|stamp| {
                    stamps.insert(path.clone(), stamp);
                    crate::crash::point("file-applied");
                }),
                Action::Remove { path } => self.root.remove(path, false).map(|()| {
                    crate::crash::point("file-removed");
                }),
                _ => continue,
            };
            if let Err(source) = result {
                for w in &writes {
                    let _best_effort = self.root.remove_leftover(w.path());
                }
                return Err(match self.put_back(&applied, &observed, &contents) {
                    Ok(()) => {
                        let _done = std::fs::remove_file(&journal);
                        if let Ok(Some((_, _, current))) = self.current() {
                            let _best_effort = self.converge_firewall(&current);
                        }
                        ActivateError::RolledBack { source }
                    }
                    Err(undo) => ActivateError::Interrupted { source, undo },
                });
            }
            applied.push(action);
        }
        // The renames and removals, durable.
        self.root.sync()?;

        // Containers after the files they may mount.
        if let Some(engine) = &engine {
            let creates = containers.iter().any(|s| {
                matches!(
                    s,
                    crate::docker::Step::Stage { .. } | crate::docker::Step::Run { .. }
                )
            });
            if creates {
                self.mark_engine_used()?;
            }
            engine
                .apply(&target.containers, &containers, &id, &owner)
                .map_err(|source| ActivateError::ContainersUnfinished {
                    target: id,
                    previous: in_force.map(|(_, cid)| cid),
                    source: Box::new(source),
                })?;
        }

        for action in &plan.actions {
            match action {
                Action::Write {
                    path,
                    reason: Reason::Restore,
                    ..
                }
                | Action::Remove { path } => {
                    host.unset_written(path);
                }
                Action::Write {
                    path,
                    blob,
                    mode,
                    uid,
                    gid,
                    ..
                } => {
                    host.set_written(
                        path,
                        Written {
                            hash: *blob,
                            mode: *mode,
                            uid: *uid,
                            gid: *gid,
                            stamp: stamps.get(path).copied(),
                        },
                    );
                }
                Action::Claim { path } => {
                    if let Observed::File(f) = &observed[path] {
                        host.set_written(path, Written::from(f));
                    }
                }
                Action::Keep { .. } | Action::Hold { .. } => {}
            }
        }
        host.save(&self.state)?;
        crate::crash::point("host-store-written");

        let number = if already {
            None
        } else {
            Some(
                self.profile
                    .commit(id, trigger, declaration)
                    .map_err(io_err("committing the profile in", &self.state))?,
            )
        };
        if journal.exists() {
            std::fs::remove_file(&journal).map_err(io_err("removing", &journal))?;
            atomic::sync_dir(&self.state).map_err(io_err("syncing", &self.state))?;
        }
        let docker_calls = engine.as_ref().map_or(0, crate::docker::Engine::calls);
        Ok(Switched {
            id,
            number,
            plan,
            containers,
            docker_calls,
            firewall: Some(firewall),
            restored: Vec::new(),
            dry_run: false,
        })
    }

    /// Records the firewall found in force: its kind and a dump of it (into the store,
    /// durably), for a rollback after the flip. Refuses a kind no driver speaks.
    pub fn record_found_firewall(&self, record: &mut NodeRecord) -> Result<(), ActivateError> {
        if record.found.firewall.is_some() {
            return Ok(());
        }
        if let Some((kind, dump)) = self.firewall.detect()? {
            let hash = self.store.put_blob(dump.as_bytes(), true)?;
            record.found.firewall = Some(mesh_lib::record::FoundFirewall { kind, dump: hash });
        }
        Ok(())
    }

    /// Puts `generation`'s firewall in force: the guard; the base ruleset on a managed node; the
    /// openings through the found firewall on an adopted one.
    pub fn converge_firewall(
        &self,
        generation: &Generation,
    ) -> Result<crate::firewall::Converged, ActivateError> {
        self.firewall_against(generation, true)
    }

    /// What [`Node::converge_firewall`] would change, changing nothing: the firewall's drift.
    pub fn check_firewall(
        &self,
        generation: &Generation,
    ) -> Result<crate::firewall::Converged, ActivateError> {
        self.firewall_against(generation, false)
    }

    fn firewall_against(
        &self,
        generation: &Generation,
        apply: bool,
    ) -> Result<crate::firewall::Converged, ActivateError> {
        // On a managed node that was adopted, the found firewall goes: its tables are those of
        // the dump recorded at adoption that hold a firewall, and its INPUT chain in a table a
        // container runtime shares.
        let (mut remove_tables, mut empty_inputs) = (Vec::new(), Vec::new());
        if generation.mode == Mode::Managed {
            if let Some(found) = self.record()?.and_then(|r| r.found.firewall) {
                let dump = crate::firewall::Dump::parse(&self.store.blob(&found.dump)?)?;
                remove_tables = dump.firewall_tables();
                empty_inputs = dump.shared_inputs();
            }
        }
        // The openings go through every foreign base chain that stays in force: on an adopted
        // node the predecessor's; on a managed one what a container runtime keeps (a drop
        // there is as final as anywhere).
        let want = crate::firewall::Want {
            guard: &generation.firewall.guard,
            base: generation.firewall.base.as_ref(),
            settings: &generation.settings,
            openings: &generation.openings,
            remove_tables: &remove_tables,
            empty_inputs: &empty_inputs,
        };
        Ok(if apply {
            self.firewall.converge(&want)?
        } else {
            self.firewall.check(&want)?
        })
    }

    /// Loads back the found firewall's tables that are not in force, from the dump recorded at
    /// adoption: a rollback from a flipped generation to an adopted one.
    pub fn restore_found_firewall(&self) -> Result<Vec<(String, String)>, ActivateError> {
        let Some(found) = self.record()?.and_then(|r| r.found.firewall) else {
            return Ok(Vec::new());
        };
        let dump = crate::firewall::Dump::parse(&self.store.blob(&found.dump)?)?;
        Ok(self.firewall.restore_missing(&dump)?)
    }

    /// Every port taken on the node, loopback included: what genesis checks.
    pub fn bound(&self) -> Result<Vec<crate::sockets::Listening>, crate::sockets::SocketsError> {
        crate::sockets::bound(self.firewall.netns())
    }

    /// What is reachable on the node: its sockets not bound to loopback.
    pub fn listening(
        &self,
    ) -> Result<Vec<crate::sockets::Listening>, crate::sockets::SocketsError> {
        crate::sockets::listening(self.firewall.netns())
    }

    /// Puts back what `applied` changed: the content observed before, or nothing where there was
    /// nothing.
    fn put_back(
        &self,
        applied: &[&Action],
        observed: &BTreeMap<TargetPath, Observed>,
        contents: &BTreeMap<TargetPath, Vec<u8>>,
    ) -> Result<(), RootError> {
        for action in applied.iter().rev() {
            let path = action.path();
            match observed.get(path) {
                Some(Observed::File(f)) => {
                    // Not read when its stamp showed it unchanged: the store has its content.
                    let stored;
                    let bytes = match contents.get(path) {
                        Some(b) => b,
                        None => {
                            stored = self.store.blob(&f.hash).map_err(|e| RootError::Io {
                                op: "reading what to put back at",
                                path: path.clone(),
                                source: std::io::Error::other(e),
                            })?;
                            &stored
                        }
                    };
                    self.root.write(path, bytes, f.mode, f.uid, f.gid)?;
                }
                Some(Observed::Absent) | None => self.root.remove(path, true)?,
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The generation `mesh rollback` goes to: number `to`, or the newest one before the current
    /// whose content differs from it.
    pub fn rollback_target(&self, to: Option<u64>) -> Result<(u64, GenerationId), ActivateError> {
        let generations = self
            .profile
            .generations()
            .map_err(io_err("reading the profile in", &self.state))?;
        let current = self
            .profile
            .current()
            .map_err(io_err("reading the profile in", &self.state))?;
        match to {
            Some(n) => generations
                .into_iter()
                .find(|(m, _)| *m == n)
                .ok_or_else(|| {
                    ActivateError::NoSuchGeneration(format!(
                        "there is no generation {n} (see `mesh generations`)"
                    ))
                }),
            None => {
                let (cn, cid) = current.ok_or_else(|| {
                    ActivateError::NoSuchGeneration("this node has no generation yet".into())
                })?;
                generations
                    .into_iter()
                    .rev()
                    .find(|(n, id)| *n < cn && *id != cid)
                    .ok_or_else(|| {
                        ActivateError::NoSuchGeneration(format!(
                            "generation {cn} is the first: there is nothing to roll back to"
                        ))
                    })
            }
        }
    }

    /// Removes generation links but the newest `keep` and the current one, then every generation
    /// and blob nothing references: never a blob of a kept generation, of the node record or of
    /// the host store.
    pub fn gc(&self, keep: usize) -> Result<(Vec<u64>, mesh_lib::store::GcReport), ActivateError> {
        self.recover()?;
        let err = |e| io_err("collecting garbage in", &self.state)(e);
        let generations = self.profile.generations().map_err(err)?;
        let keep_numbers: Vec<u64> = generations
            .iter()
            .rev()
            .take(keep)
            .map(|(n, _)| *n)
            .collect();
        let removed = self.profile.remove_links(&keep_numbers).map_err(err)?;
        crate::crash::point("gc-links-removed");
        let kept: std::collections::BTreeSet<GenerationId> = self
            .profile
            .generations()
            .map_err(err)?
            .into_iter()
            .map(|(_, id)| id)
            .collect();
        let mut blobs = std::collections::BTreeSet::new();
        for id in &kept {
            blobs.extend(self.store.generation(id)?.blobs());
        }
        if let Some(record) = self.record()? {
            blobs.extend(record.blobs());
        }
        blobs.extend(HostStore::load(&self.state)?.blobs());
        let report = self.store.gc(&kept, &blobs)?;
        Ok((removed, report))
    }

    /// Mode, current generation, counts and drift.
    pub fn status(&self) -> Result<Status, ActivateError> {
        let record = self.record()?;
        let current = self.current()?;
        let host = HostStore::load(&self.state)?;
        let mut status = Status {
            mode: record.as_ref().map_or(Mode::Managed, |r| r.mode),
            current: current.as_ref().map(|(n, id, _)| (*n, *id)),
            held: 0,
            staged: 0,
            managed: 0,
            taken: Vec::new(),
            not_taken: Vec::new(),
            drift: Vec::new(),
            interrupted: journal_path(&self.state).exists(),
            containers: (0, 0, 0),
            take_would_retire: Vec::new(),
            firewall: None,
        };
        if let Some((_, _, g)) = &current {
            status.firewall = Some(match self.check_firewall(g) {
                Ok(drift) => FirewallDrift {
                    would_change: Some(drift),
                    unreadable: None,
                },
                Err(ActivateError::Firewall(e)) => FirewallDrift {
                    would_change: None,
                    unreadable: Some(e.to_string()),
                },
                Err(e) => return Err(e),
            });
            // Unchanged files the mesh wrote are known by their stamps, as in a switch.
            let (observed, _) = self.observe_all(g, &host)?;
            for (name, state) in &g.modules {
                match state {
                    mesh_lib::model::ModuleState::Taken => status.taken.push(name.to_string()),
                    mesh_lib::model::ModuleState::Assigned => {
                        status.not_taken.push(name.to_string())
                    }
                }
            }
            for (name, c) in &g.containers {
                match c.state {
                    mesh_lib::model::ContainerState::Held { .. } => {
                        status.containers.0 += 1;
                        status
                            .take_would_retire
                            .push((c.module.to_string(), name.to_string()));
                    }
                    mesh_lib::model::ContainerState::Staged => status.containers.1 += 1,
                    mesh_lib::model::ContainerState::Managed => status.containers.2 += 1,
                }
            }
            for (path, f) in &g.files {
                match f.state {
                    FileState::Held { .. } => {
                        status.held += 1;
                        continue;
                    }
                    FileState::Staged => status.staged += 1,
                    FileState::Managed => status.managed += 1,
                }
                let what = match (
                    observed.get(path).cloned().unwrap_or(Observed::Absent),
                    host.written.get(path),
                ) {
                    (Observed::File(o), Some(w))
                        if o.hash == w.hash
                            && o.mode == w.mode
                            && o.uid == w.uid
                            && o.gid == w.gid =>
                    {
                        None
                    }
                    (Observed::File(o), Some(w)) if o.hash == w.hash => Some(format!(
                        "mode or owner changed to {} {}:{}",
                        o.mode, o.uid, o.gid
                    )),
                    (Observed::File(o), _) => Some(format!("content changed ({})", o.hash.short())),
                    (Observed::Absent, _) => Some("removed".to_string()),
                    (other, _) => Some(format!("replaced by {other:?}")),
                };
                if let Some(what) = what {
                    status.drift.push((path.clone(), what));
                }
            }
        }
        Ok(status)
    }
}

/// What one round of [`watch`] did.
pub type Round = Result<(GenerationId, crate::firewall::Converged), ActivateError>;

/// `mesh reconcile --watch`: puts the current generation's firewall back in force every
/// `every`, on a tokio runtime, until SIGTERM or SIGINT; each round takes the state
/// directory's lock for its own length only (a round that finds it held by a switch waits for
/// the next), and reads the current generation afresh. Returns after a clean shutdown.
pub fn watch(
    state: &Path,
    root: &Path,
    netns: Option<String>,
    every: std::time::Duration,
    mut report: impl FnMut(Round) + Send,
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {
                    let (state, root, netns) = (state.to_owned(), root.to_owned(), netns.clone());
                    let round = tokio::task::spawn_blocking(move || {
                        let node = Node::open(&state, &root, netns)?;
                        let (_, id, generation) = node
                            .current()?
                            .ok_or_else(|| ActivateError::NoSuchGeneration("this node has no generation yet".into()))?;
                        Ok((id, node.converge_firewall(&generation)?))
                    })
                    .await
                    .map_err(std::io::Error::other)?;
                    report(round);
                }
                _ = terminate.recv() => return Ok(()),
                _ = tokio::signal::ctrl_c() => return Ok(()),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use mesh_lib::model::{
        FirewallRules, NodeName, Opening, Port, PrivateNetwork, Protocol, Settings, Source,
        TrafficPath,
    };
    use mesh_lib::record::{FirewallKind, FoundFirewall};

    use super::*;
    use crate::firewall::{Call, Dump, Recording};

    fn generation(mode: Mode) -> Generation {
        let settings = Settings {
            ports: [("pg".to_owned(), Port::new(15432).unwrap())].into(),
            private_network: PrivateNetwork {
                range: "10.77.0.0/24".parse().unwrap(),
                address: "10.77.0.1".parse().unwrap(),
                hub: false,
            },
        };
        let openings = vec![Opening {
            module: "pg".into(),
            setting: "pg".into(),
            port: Port::new(15432).unwrap(),
            protocol: Protocol::Tcp,
            paths: BTreeSet::from([TrafficPath::Forwarded]),
            from: Source::Anywhere,
        }];
        Generation {
            format: 1,
            node: NodeName::new("n1").unwrap(),
            mode,
            firewall: FirewallRules {
                guard: mesh_lib::firewall::guard_ruleset(&settings),
                base: (mode == Mode::Managed)
                    .then(|| mesh_lib::firewall::base_ruleset(&settings, &openings)),
            },
            settings,
            modules: BTreeMap::new(),
            files: BTreeMap::new(),
            containers: BTreeMap::new(),
            openings,
        }
    }

    /// What the flip removes is decided from the dump recorded at adoption: the predecessor's
    /// own table, never a container runtime's (whose shared INPUT chain is emptied instead);
    /// and the openings go on through what stays, on the adopted and the managed node alike.
    #[test]
    fn converge_asks_for_the_predecessor_gone_and_the_runtime_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (state, root) = (dir.path().join("state"), dir.path().join("root"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        let firewall = Arc::new(Recording::default());
        let node = Node::open(&state, &root, None)
            .unwrap()
            .with_firewall(Box::new(firewall.clone()));
        let dump = Dump {
            tables: [
                ("inet pred".to_owned(), "table inet pred {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t}\n}\n".to_owned()),
                ("ip filter".to_owned(), "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy drop;\n\t}\n\tchain DOCKER {\n\t}\n}\n".to_owned()),
                ("ip nat".to_owned(), "table ip nat {\n\tchain DOCKER {\n\t}\n}\n".to_owned()),
            ]
            .into(),
            iptables: BTreeMap::new(),
        };
        let mut record = NodeRecord::managed(NodeName::new("n1").unwrap());
        record.mode = Mode::Adopted;
        record.found.firewall = Some(FoundFirewall {
            kind: FirewallKind::Nftables,
            dump: node
                .store
                .put_blob(&serde_json::to_vec(&dump).unwrap(), true)
                .unwrap(),
        });
        std::fs::write(record_path(&state), serde_json::to_vec(&record).unwrap()).unwrap();

        node.converge_firewall(&generation(Mode::Adopted)).unwrap();
        node.converge_firewall(&generation(Mode::Managed)).unwrap();
        let opening = vec!["mesh: pg pg 15432/tcp from anywhere".to_owned()];
        assert_eq!(
            firewall.calls(),
            [
                Call::Converge {
                    base: false,
                    openings: opening.clone(),
                    remove_tables: vec![],
                    empty_inputs: vec![],
                },
                Call::Converge {
                    base: true,
                    openings: opening,
                    remove_tables: vec![("inet".into(), "pred".into())],
                    empty_inputs: vec!["ip".into()],
                },
            ]
        );
    }
}
