//! A node's ground: its state directory (store, profile, node record, host store, lock) and the
//! root declared files are written beneath. Opened with the state directory's lock for a
//! command that changes it, or without to look at it.

use std::path::{Path, PathBuf};

use mesh_lib::record::record_path;
use mesh_lib::{atomic, Generation, GenerationId, NodeRecord, Store};

use crate::error::{io_err, NodeError};
use crate::lock::StateLock;
use crate::profile::Profile;
use crate::root::{Root, TempKey};
use crate::users::Ids;

/// A node's state directory and root, its lock held when opened to change it.
pub struct Node {
    /// The state directory.
    pub state: PathBuf,
    /// The root declared files are written beneath.
    pub root: Root,
    /// Names what is at a secret's path (keyed with the node's own secret): never a plain
    /// digest of a credential.
    pub digests: mesh_lib::secret::DigestKey,
    /// The content-addressed store.
    pub store: Store,
    /// The profile.
    pub profile: Profile,
    /// The owners and groups of the root's own `/etc/passwd` and `/etc/group`.
    pub ids: Ids,
    /// Where the state directory lies under the root, as a declared path names it (`None` when
    /// it is elsewhere): no path the mesh writes, removes or restores may reach it.
    state_in_root: Option<String>,
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
    pub fn check_reach<'a>(
        &self,
        paths: impl IntoIterator<Item = &'a mesh_lib::TargetPath>,
    ) -> Result<(), NodeError> {
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
                return Err(NodeError::ReachesState {
                    path: path.clone(),
                    state: self.state.clone(),
                });
            }
        }
        Ok(())
    }

    /// Takes the state directory's lock (failing at once if it is held) and opens the node.
    pub fn open(state: &Path, root: &Path) -> Result<Self, NodeError> {
        let lock = StateLock::take(state)?;
        Self::open_with(state, root, Some(lock))
    }

    /// Opens the node to change it, under the lock another process holds for this one: a
    /// deploy's step, run by the deploy's agent, which holds the lock until the deploy is
    /// settled (the deploy's agent, in `mesh-remote`).
    pub fn open_under(state: &Path, root: &Path) -> Result<Self, NodeError> {
        Self::open_with(state, root, None)
    }

    /// Opens the node to look at it, without the lock: for commands that change nothing.
    pub fn inspect(state: &Path, root: &Path) -> Result<Self, NodeError> {
        Self::open_with(state, root, None)
    }

    fn open_with(state: &Path, root: &Path, lock: Option<StateLock>) -> Result<Self, NodeError> {
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
            _lock: lock,
        })
    }

    /// The value of the owner label on the containers this node's switches create: a digest
    /// of the state directory's path.
    pub fn owner(&self) -> String {
        let path = std::fs::canonicalize(&self.state).unwrap_or_else(|_| self.state.clone());
        let digest = blake3::hash(path.as_os_str().as_encoded_bytes());
        digest.to_hex()[..16].to_owned()
    }

    fn engine_marker(&self) -> PathBuf {
        self.state.join("engine-used")
    }

    /// Whether a switch of this node ever created a container: from then on every switch asks
    /// the engine, so one no longer declared is removed even by a generation declaring none.
    pub fn engine_used(&self) -> bool {
        self.engine_marker().exists()
    }

    /// Records, durably and before the first container is created, that the engine is used.
    pub fn mark_engine_used(&self) -> Result<(), NodeError> {
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
    ) -> Result<NodeRecord, NodeError> {
        let record = self
            .record()?
            .unwrap_or_else(|| NodeRecord::managed(target.node.clone()));
        if record.node != target.node {
            return Err(NodeError::WrongNode {
                id,
                theirs: target.node.to_string(),
                ours: record.node.to_string(),
            });
        }
        Ok(record)
    }

    /// The node record, if the node was ever adopted.
    pub fn record(&self) -> Result<Option<NodeRecord>, NodeError> {
        let path = record_path(&self.state);
        match std::fs::read(&path) {
            Ok(bytes) => NodeRecord::parse(&bytes)
                .map(Some)
                .map_err(|e| NodeError::Io {
                    what: "reading the node record",
                    path,
                    source: std::io::Error::other(e),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("reading", &path)(e)),
        }
    }

    /// Writes the node record, durably.
    pub fn save_record(&self, record: &NodeRecord) -> Result<(), NodeError> {
        let path = record_path(&self.state);
        let bytes = record
            .to_bytes()
            .map_err(|e| io_err("encoding", &path)(std::io::Error::other(e)))?;
        atomic::write_file(&path, &bytes, 0o600).map_err(io_err("writing", &path))?;
        mesh_lib::crash::point("record-written");
        Ok(())
    }

    /// The current generation.
    pub fn current(&self) -> Result<Option<(u64, GenerationId, Generation)>, NodeError> {
        match self
            .profile
            .current()
            .map_err(io_err("reading the profile in", &self.state))?
        {
            Some((n, id)) => Ok(Some((n, id, self.store.generation(&id)?))),
            None => Ok(None),
        }
    }

    /// Generation number `to`, or the newest one before the current whose content differs from
    /// it: where a rollback goes when no command was cut short.
    pub fn generation_before(&self, to: Option<u64>) -> Result<(u64, GenerationId), NodeError> {
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
                    NodeError::NoSuchGeneration(format!(
                        "there is no generation {n} (see `mesh generations`)"
                    ))
                }),
            None => {
                let (cn, cid) = current.ok_or_else(|| {
                    NodeError::NoSuchGeneration("this node has no generation yet".into())
                })?;
                generations
                    .into_iter()
                    .rev()
                    .find(|(n, id)| *n < cn && *id != cid)
                    .ok_or_else(|| {
                        NodeError::NoSuchGeneration(format!(
                            "generation {cn} is the first: there is nothing to roll back to"
                        ))
                    })
            }
        }
    }
}
