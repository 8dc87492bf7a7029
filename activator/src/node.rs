//! A node under the activator's hand: its state directory (store, profile, node record, host
//! store), the root declared files are written beneath, and the firewall of its network
//! namespace. Opened with the state directory's lock for a command that changes it, or without
//! to look at it. What a switch does is in [`crate::switch`]; what `mesh status` reports in
//! [`crate::status`].

use std::path::{Path, PathBuf};

use mesh_lib::model::{FileState, Mode};
use mesh_lib::record::{record_path, FoundFile};
use mesh_lib::{atomic, Generation, GenerationId, NodeRecord, Store};

use crate::host::HostStore;
use crate::lock::StateLock;
use crate::profile::Profile;
use crate::root::{Observed, Root, TempKey};
use crate::switch::error::io_err;
use crate::switch::ActivateError;
use crate::users::Ids;

/// A node, its lock held.
pub struct Node {
    pub(crate) state: PathBuf,
    pub(crate) root: Root,
    /// Names what is at a secret's path (keyed with the node's own secret): never a plain
    /// digest of a credential.
    pub(crate) digests: mesh_lib::secret::DigestKey,
    /// The content-addressed store.
    pub store: Store,
    /// The profile.
    pub profile: Profile,
    pub(crate) ids: Ids,
    pub(crate) firewall: Box<dyn mesh_reach::firewall::Firewall>,
    /// Where the state directory lies under the root, as a declared path names it (`None` when
    /// it is elsewhere): no path the mesh writes, removes or restores may reach it.
    pub(crate) state_in_root: Option<String>,
    /// systemd, connected on first use.
    pub(crate) systemd: std::sync::OnceLock<Box<dyn crate::systemd::Systemd>>,
    /// How many containers a switch creates and starts at once (its stops are all at once).
    pub(crate) container_jobs: usize,
    /// What the container phase reports while it runs.
    pub(crate) progress: Box<dyn mesh_containers::Progress>,
    /// How long a switch watches the units it started before it calls them up.
    pub(crate) settle: std::time::Duration,
    _lock: Option<StateLock>,
}

/// The state directory as a path under `root` would name it, both resolved (links followed,
/// `..` gone), if it lies under the root: `/home/u/.local/state/mesh` with `--root /`,
/// `/var/state` for a state directory `R/var/state` with `--root R`.
fn state_in_root(state: &Path, root: &Path) -> Option<String> {
    let state = std::fs::canonicalize(state).ok()?;
    let root = std::fs::canonicalize(root).ok()?;
    let rel = state.strip_prefix(&root).ok()?;
    Some(format!("/{}", rel.display()).replace("//", "/"))
}

impl Node {
    /// Refuses a generation with a path the mesh would write, and any path it would remove or
    /// restore, that reaches the real state directory (its store, record, host store, lock):
    /// a declaration must never touch the mesh's own state, wherever that is.
    pub(crate) fn check_reach<'a>(
        &self,
        paths: impl IntoIterator<Item = &'a mesh_lib::TargetPath>,
    ) -> Result<(), ActivateError> {
        let Some(state) = &self.state_in_root else {
            return Ok(());
        };
        for path in paths {
            let p = path.as_str();
            let inside = state == "/"
                || p == state
                || p.strip_prefix(state.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
                || state
                    .strip_prefix(p)
                    .is_some_and(|rest| rest.starts_with('/'));
            if inside {
                return Err(ActivateError::ReachesState {
                    path: path.clone(),
                    state: self.state.clone(),
                });
            }
        }
        Ok(())
    }

    /// Takes the state directory's lock (failing at once if it is held) and opens the node.
    pub fn open(state: &Path, root: &Path, netns: Option<String>) -> Result<Self, ActivateError> {
        let lock = StateLock::take(state)?;
        Self::open_with(state, root, netns, Some(lock))
    }

    /// Opens the node to change it, under the lock another process holds for this one: a
    /// deploy's step, run by the deploy's agent, which holds the lock until the deploy is
    /// settled (see [`crate::deploy::agent`]).
    pub fn open_under(
        state: &Path,
        root: &Path,
        netns: Option<String>,
    ) -> Result<Self, ActivateError> {
        Self::open_with(state, root, netns, None)
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
        let digests = key.digest_key();
        let root = Root::open(root, key)?;
        Ok(Self {
            digests,
            state_in_root: state_in_root(state, root.path()),
            state: state.to_owned(),
            ids: Ids::load(&root),
            root,
            store,
            profile,
            firewall: Box::new(mesh_reach::firewall::Kernel::new(netns)),
            systemd: std::sync::OnceLock::new(),
            container_jobs: mesh_containers::DEFAULT_JOBS,
            progress: Box::new(mesh_containers::Quiet),
            settle: crate::switch::units::SETTLE,
            _lock: lock,
        })
    }

    /// The same node, its firewall spoken to through `firewall` (a [`Recording`] one in tests
    /// of what the activator asks of it).
    ///
    /// [`Recording`]: mesh_reach::firewall::Recording
    pub fn with_firewall(mut self, firewall: Box<dyn mesh_reach::firewall::Firewall>) -> Self {
        self.firewall = firewall;
        self
    }

    /// The same node, speaking to systemd through `systemd` (a [`Recording`] one in tests of
    /// what the activator asks of it).
    ///
    /// [`Recording`]: crate::systemd::Recording
    pub fn with_systemd(mut self, systemd: Box<dyn crate::systemd::Systemd>) -> Self {
        self.systemd = std::sync::OnceLock::from(systemd);
        self
    }

    /// The same node, creating and starting at most `jobs` containers at once (at least one);
    /// its stops are all asked at once.
    pub fn with_container_jobs(mut self, jobs: usize) -> Self {
        self.container_jobs = jobs.max(1);
        self
    }

    /// The same node, watching the units a switch started for `settle` before it calls them
    /// up (zero: not at all).
    pub fn with_settle(mut self, settle: std::time::Duration) -> Self {
        self.settle = settle;
        self
    }

    /// The same node, reporting the container phase's progress to `progress`.
    pub fn with_progress(mut self, progress: Box<dyn mesh_containers::Progress>) -> Self {
        self.progress = progress;
        self
    }

    /// The value of the owner label on the containers this node's switches create: a digest
    /// of the state directory's path.
    pub(crate) fn owner(&self) -> String {
        let path = std::fs::canonicalize(&self.state).unwrap_or_else(|_| self.state.clone());
        let digest = blake3::hash(path.as_os_str().as_encoded_bytes());
        digest.to_hex()[..16].to_owned()
    }

    fn engine_marker(&self) -> PathBuf {
        self.state.join("engine-used")
    }

    /// Whether a switch of this node ever created a container: from then on every switch asks
    /// the engine, so one no longer declared is removed even by a generation declaring none.
    pub(crate) fn engine_used(&self) -> bool {
        self.engine_marker().exists()
    }

    /// Records, durably and before the first container is created, that the engine is used.
    pub(crate) fn mark_engine_used(&self) -> Result<(), ActivateError> {
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

    /// The node record `target` (generation `id`) is put in force with: the one kept, else a
    /// managed node's; a generation built for another node is refused.
    pub fn record_for(
        &self,
        id: GenerationId,
        target: &Generation,
    ) -> Result<NodeRecord, ActivateError> {
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
        Ok(record)
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

    /// Records every found file and container of `generation` that it does not hold yet: present
    /// at a declared path of a module not taken, with no record in the host store that the mesh
    /// wrote it. The content goes into the store (durably), the hash, mode and owner into
    /// `record`. The caller saves the record and builds again, so the generation holds them.
    pub fn record_found(
        &self,
        generation: &Generation,
        record: &mut NodeRecord,
    ) -> Result<usize, ActivateError> {
        if record.mode != Mode::Adopted {
            return Ok(0);
        }
        // Nothing in the state directory is ever read as a found file.
        self.check_reach(generation.files.keys())?;
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
            let engine = mesh_containers::Engine::connect()?;
            let present = engine.containers()?;
            for name in staged {
                if present.get(name.as_str()).is_some_and(|p| !p.is_ours()) {
                    // A spec whose environment holds a credential is kept wrapped, recorded
                    // by its keyed digest: the record goes into git, and a plain digest of
                    // a spec the declaration all but says would let the credential be guessed.
                    let spec = engine.spec_of(name.as_str())?;
                    let hash = if mesh_lib::import::spec_holds_credential(&spec) {
                        self.store.put_blob(&self.digests.wrap(&spec), true)?
                    } else {
                        self.store.put_blob(&spec, true)?
                    };
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
        found += self.record_found_units(generation, &host, record)?;
        for (path, file) in &generation.files {
            if file.state != FileState::Staged
                || host.written.contains_key(path)
                || record.found.files.contains_key(path)
            {
                continue;
            }
            if let (Observed::File(f), Some(bytes)) = self.root.observe(path)? {
                // A file found at a secret's path is a credential, whatever its mode: kept
                // private, as a secret's plaintext would be, wrapped, and recorded by its
                // keyed digest (the record goes into git: no plain digest to guess against).
                let hash = if file.secret.is_some() {
                    self.store.put_blob(&self.digests.wrap(&bytes), true)?
                } else {
                    self.store.put_blob(&bytes, !f.mode.world_readable())?;
                    f.hash
                };
                record.found.files.insert(
                    path.clone(),
                    FoundFile {
                        hash,
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

    /// Records every staged unit systemd already knows from a file the mesh did not write: where
    /// the file is, whether the unit runs and is enabled. Asked only where systemd is driven
    /// (the root is `/`) and answers: elsewhere no unit of this machine is the node's.
    fn record_found_units(
        &self,
        generation: &Generation,
        host: &HostStore,
        record: &mut NodeRecord,
    ) -> Result<usize, ActivateError> {
        let staged: Vec<&mesh_lib::model::UnitName> = generation
            .units
            .iter()
            .filter(|(n, u)| {
                u.state == mesh_lib::model::UnitState::Staged
                    && !record.found.units.contains_key(*n)
            })
            .map(|(n, _)| n)
            .collect();
        if staged.is_empty() || self.root.path() != Path::new("/") {
            return Ok(0);
        }
        let Ok(systemd) = self.systemd() else {
            return Ok(0);
        };
        let mut found = 0;
        for name in staged {
            let Some(known) = systemd.known(name)? else {
                continue;
            };
            if host.written.contains_key(&name.file()) && known.fragment == name.file().as_str() {
                continue; // the mesh's own staged file
            }
            record.found.units.insert(
                name.clone(),
                mesh_lib::record::FoundUnit {
                    fragment: known.fragment,
                    active: known.active,
                    enabled: known.enabled,
                },
            );
            found += 1;
        }
        Ok(found)
    }

    /// Every port taken on the node, loopback included: what genesis checks.
    pub fn bound(
        &self,
    ) -> Result<Vec<mesh_reach::sockets::Listening>, mesh_reach::sockets::SocketsError> {
        mesh_reach::sockets::bound(self.firewall.netns())
    }

    /// What is reachable on the node: its sockets not bound to loopback.
    pub fn listening(
        &self,
    ) -> Result<Vec<mesh_reach::sockets::Listening>, mesh_reach::sockets::SocketsError> {
        mesh_reach::sockets::listening(self.firewall.netns())
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
    /// the host store; then the images the mesh fetched that no kept generation references and
    /// no container uses ([`mesh_containers::images::gc`]): never an image the mesh found.
    pub fn gc(&self, keep: usize) -> Result<Collected, ActivateError> {
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
        let mut kept: std::collections::BTreeSet<GenerationId> = self
            .profile
            .generations()
            .map_err(err)?
            .into_iter()
            .map(|(_, id)| id)
            .collect();
        // The staged generation, its blobs and images stay for the switch to it.
        if let Some(staged) = crate::switch::stage::StagedRecord::load(&self.state) {
            if self.store.has_generation(&staged) {
                kept.insert(staged);
            }
        }
        let mut blobs = std::collections::BTreeSet::new();
        let mut images = std::collections::BTreeSet::new();
        for id in &kept {
            let generation = self.store.generation(id)?;
            blobs.extend(generation.blobs());
            images.extend(mesh_containers::images::references(
                generation.containers.values(),
            ));
        }
        if let Some(record) = self.record()? {
            blobs.extend(record.blobs());
        }
        blobs.extend(HostStore::load(&self.state)?.blobs());
        let report = self.store.gc(&kept, &blobs)?;
        // Last, and apart: an engine that does not answer leaves the images for the next gc,
        // not the store uncollected.
        let images = mesh_containers::images::gc(&self.state, &images);
        Ok(Collected {
            removed,
            store: report,
            images,
        })
    }
}

/// What [`Node::gc`] collected.
#[derive(Debug)]
pub struct Collected {
    /// The numbers of the generation links removed.
    pub removed: Vec<u64>,
    /// What went from the store.
    pub store: mesh_lib::store::GcReport,
    /// The images the mesh fetched that went from the engine, or why none could (the store
    /// was collected all the same).
    pub images: Result<mesh_containers::images::ImagesGc, mesh_containers::images::GcError>,
}
