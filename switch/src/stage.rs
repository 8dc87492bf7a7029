//! A stage: everything a generation needs put on the node, nothing in force changed — so the
//! later switch to it costs what a switch with everything present costs, even with the
//! registry gone (`mesh switch --stage`).
//!
//! What it does, in the order of a switch's own checks: the generation validated and checked
//! to be this node's; its secrets decrypted with the host key (and dropped: a secret this node
//! cannot read is said now, not at the switch); every blob it references read from the store
//! and checked against its name; every image its containers name pinned by digest that the
//! engine lacks fetched ([`mesh_containers::images`]) — those of held containers too, so that the take of
//! a module not taken yet has its images — and listed as the mesh's; then the generation is
//! recorded as staged, `STATE/staged.json`, which `mesh status` shows and `mesh gc` keeps (the
//! generation, its blobs and its images) until another is staged.
//!
//! What it never does: write a file under the root, touch the firewall, a unit or a container,
//! change the profile or the record. A stage that fails has fetched at most some images.

use std::path::{Path, PathBuf};

use mesh_lib::{Generation, GenerationId};
use serde::{Deserialize, Serialize};

use crate::error::ActivateError;
use crate::Activator;
use mesh_node::io_err;

/// What a stage put on the node.
#[derive(Debug, Serialize)]
pub struct Staged {
    /// The generation staged.
    pub id: GenerationId,
    /// The blobs it references, each read and checked.
    pub blobs: usize,
    /// The secrets decrypted to check them.
    pub secrets: usize,
    /// The images fetched.
    pub images: Vec<mesh_containers::images::Wanted>,
    /// The images pinned by digest the engine had already.
    pub present: usize,
}

/// The staged generation, as `STATE/staged.json` keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StagedRecord {
    /// The generation.
    pub generation: GenerationId,
}

impl StagedRecord {
    /// Its file.
    pub fn path(state: &Path) -> PathBuf {
        state.join("staged.json")
    }

    /// The generation staged on the node in `state`, if any (one unreadable counts as none:
    /// it only spares a later switch some work).
    pub fn load(state: &Path) -> Option<GenerationId> {
        let bytes = std::fs::read(Self::path(state)).ok()?;
        serde_json::from_slice::<Self>(&bytes)
            .ok()
            .map(|r| r.generation)
    }
}

impl Activator {
    /// Stages `target` (see the module's doc).
    pub fn stage(&self, id: GenerationId, target: &Generation) -> Result<Staged, ActivateError> {
        target
            .validate()
            .map_err(|why| ActivateError::InvalidGeneration { id, why })?;
        self.record_for(id, target)?;
        let secrets = match self.open_secrets(target)? {
            Some((_, opened)) => opened.files.len() + opened.values.len(),
            None => 0,
        };
        let blobs = target.blobs();
        for hash in &blobs {
            self.store.blob(hash)?;
        }
        let (images, present) = if target.containers.values().any(|c| c.digest.is_some()) {
            let engine = mesh_containers::Engine::connect()?;
            let (wanted, present) =
                mesh_containers::images::pinned_missing(&engine, &target.containers)?;
            self.fetch_listed(&engine, &wanted, &id)?;
            (wanted, present)
        } else {
            (Vec::new(), 0)
        };
        let path = StagedRecord::path(&self.state);
        let bytes = serde_json::to_vec(&StagedRecord { generation: id }).expect("an id encodes");
        mesh_lib::atomic::write_file(&path, &bytes, 0o600).map_err(io_err("writing", &path))?;
        Ok(Staged {
            id,
            blobs: blobs.len(),
            secrets,
            images,
            present,
        })
    }
}
