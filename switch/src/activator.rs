//! A node under the activator's hand: its ground ([`mesh_node::Node`]: state directory, root,
//! store, profile, record) and what a switch speaks to on it — the firewall of its network
//! namespace, systemd, the container engine — with how it speaks to them. What a switch does is
//! in [`crate::switch`]; what `mesh status` reports, in `mesh-remote`.

use std::ops::Deref;
use std::path::Path;

use mesh_lib::model::{FileState, Mode};
use mesh_lib::record::FoundFile;
use mesh_lib::{Generation, GenerationId, NodeRecord};
use mesh_node::host::HostStore;
use mesh_node::io_err;
use mesh_node::root::Observed;
use mesh_node::Node;

use crate::ActivateError;

/// A node, and the firewall, systemd and container engine a switch speaks to on it.
pub struct Activator {
    node: Node,
    pub(crate) firewall: Box<dyn mesh_reach::firewall::Firewall>,
    /// systemd, connected on first use.
    pub(crate) systemd: std::sync::OnceLock<Box<dyn mesh_systemd::Systemd>>,
    /// How many containers a switch creates and starts at once (its stops are all at once).
    pub(crate) container_jobs: usize,
    /// What the container phase reports while it runs.
    pub(crate) progress: Box<dyn mesh_containers::Progress>,
    /// How long a switch watches the units it started before it calls them up.
    pub(crate) settle: std::time::Duration,
    /// How long an image's fetch may make no progress before it is given up.
    pub(crate) fetch_stall: std::time::Duration,
    /// The gaps the command line accepts losing (`--accept-gap`: `CONTAINER`,
    /// `CONTAINER:GAP`, `*`): see [`crate::gaps`].
    pub(crate) accepted_gaps: Vec<String>,
}

/// An activator is its node's ground and more: the state directory, root, store and profile
/// are read through it as they are through the node.
impl Deref for Activator {
    type Target = Node;

    fn deref(&self) -> &Node {
        &self.node
    }
}

impl Activator {
    /// Takes the state directory's lock (failing at once if it is held) and opens the node, its
    /// firewall in the network namespace `netns` (this one's without).
    pub fn open(state: &Path, root: &Path, netns: Option<String>) -> Result<Self, ActivateError> {
        Ok(Self::of(Node::open(state, root)?, netns))
    }

    /// Opens the node to change it, under the lock another process holds for this one: a
    /// deploy's step, run by the deploy's agent, which holds the lock until the deploy is
    /// settled (the deploy's agent, in `mesh-remote`).
    pub fn open_under(
        state: &Path,
        root: &Path,
        netns: Option<String>,
    ) -> Result<Self, ActivateError> {
        Ok(Self::of(Node::open_under(state, root)?, netns))
    }

    /// Opens the node to look at it, without the lock: for commands that change nothing.
    pub fn inspect(
        state: &Path,
        root: &Path,
        netns: Option<String>,
    ) -> Result<Self, ActivateError> {
        Ok(Self::of(Node::inspect(state, root)?, netns))
    }

    fn of(node: Node, netns: Option<String>) -> Self {
        Self {
            node,
            firewall: Box::new(mesh_reach::firewall::Kernel::new(netns)),
            systemd: std::sync::OnceLock::new(),
            container_jobs: mesh_containers::DEFAULT_JOBS,
            progress: Box::new(mesh_containers::Quiet),
            settle: crate::units::SETTLE,
            fetch_stall: mesh_containers::images::STALL,
            accepted_gaps: Vec::new(),
        }
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
    /// [`Recording`]: mesh_systemd::Recording
    pub fn with_systemd(mut self, systemd: Box<dyn mesh_systemd::Systemd>) -> Self {
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

    /// The same node, giving up an image's fetch that makes no progress for `stall` (see
    /// [`mesh_containers::images::STALL`]).
    pub fn with_fetch_stall(mut self, stall: std::time::Duration) -> Self {
        self.fetch_stall = stall;
        self
    }

    /// The same node, accepting that a take or switch recreating a found container loses the
    /// gaps `accepted` names (`CONTAINER`, `CONTAINER:GAP`, or `*`; see [`crate::gaps`]).
    pub fn with_accepted_gaps(mut self, accepted: Vec<String>) -> Self {
        self.accepted_gaps = accepted;
        self
    }

    /// The same node, reporting the container phase's progress to `progress`.
    pub fn with_progress(mut self, progress: Box<dyn mesh_containers::Progress>) -> Self {
        self.progress = progress;
        self
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
        mesh_lib::crash::point("gc-links-removed");
        let mut kept: std::collections::BTreeSet<GenerationId> = self
            .profile
            .generations()
            .map_err(err)?
            .into_iter()
            .map(|(_, id)| id)
            .collect();
        // The staged generation, its blobs and images stay for the switch to it.
        if let Some(staged) = crate::stage::StagedRecord::load(&self.state) {
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

/// What [`Activator::gc`] collected.
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
