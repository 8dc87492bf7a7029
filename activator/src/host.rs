//! The host store: the activator's record of what it wrote (path → hash, mode, owner) and of every
//! content it recorded before replacing or removing something it did not write. It is what makes
//! "found" precise: a file at a declared path with no entry in `written` was not written by the
//! mesh.
//!
//! Kept in `STATE/host.json`, replaced atomically and durably. It is compact JSON (its maps are
//! sorted; it is never hashed, so it needs no canonical form): on a node of 10,000 files it is
//! read by every switch.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mesh_lib::model::FileMode;
use mesh_lib::{atomic, BlobHash, TargetPath};
use serde::{Deserialize, Serialize};

use crate::root::{FileFacts, Stamp};

/// The host store's format.
pub const HOST_FORMAT: u32 = 1;

/// A file the mesh wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Written {
    /// Its content.
    pub hash: BlobHash,
    /// Its permission bits.
    pub mode: FileMode,
    /// Its owner.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
    /// The file's stamp when the mesh wrote or last read it: while it is unchanged, the file is
    /// known to hold `hash` without reading it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<Stamp>,
}

impl From<&FileFacts> for Written {
    fn from(f: &FileFacts) -> Self {
        Self {
            hash: f.hash,
            mode: f.mode,
            uid: f.uid,
            gid: f.gid,
            stamp: Some(f.stamp),
        }
    }
}

/// Why a content was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Why {
    /// Found at a declared path: the predecessor's.
    Found,
    /// A file the mesh wrote, changed behind its back.
    Drift,
}

/// A content recorded before the mesh replaced or removed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kept {
    /// Its content (a blob in the store).
    pub hash: BlobHash,
    /// Its permission bits.
    pub mode: FileMode,
    /// Its owner.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
    /// Why it was recorded.
    pub why: Why,
}

/// The host store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostStore {
    /// [`HOST_FORMAT`].
    pub format: u32,
    /// What the mesh wrote.
    pub written: BTreeMap<TargetPath, Written>,
    /// Every content recorded at a path, oldest first.
    pub kept: BTreeMap<TargetPath, Vec<Kept>>,
}

impl Default for HostStore {
    fn default() -> Self {
        Self {
            format: HOST_FORMAT,
            written: BTreeMap::new(),
            kept: BTreeMap::new(),
        }
    }
}

/// The host store cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[error("host store {path}: {message}")]
pub struct HostError {
    /// Its file.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

impl HostStore {
    /// Its file in `state`.
    pub fn path(state: &Path) -> PathBuf {
        state.join("host.json")
    }

    /// Reads it; absent means the mesh has written nothing here yet.
    pub fn load(state: &Path) -> Result<Self, HostError> {
        let path = Self::path(state);
        let err = |message: String| HostError {
            path: path.clone(),
            message,
        };
        match std::fs::read(&path) {
            Ok(bytes) => {
                let host: HostStore =
                    serde_json::from_slice(&bytes).map_err(|e| err(e.to_string()))?;
                if host.format != HOST_FORMAT {
                    return Err(err(format!(
                        "format {} is not one this mesh reads",
                        host.format
                    )));
                }
                Ok(host)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(err(e.to_string())),
        }
    }

    /// Writes it, durably.
    pub fn save(&self, state: &Path) -> Result<(), HostError> {
        let path = Self::path(state);
        let bytes = serde_json::to_vec(self).map_err(|e| HostError {
            path: path.clone(),
            message: e.to_string(),
        })?;
        atomic::write_file(&path, &bytes, 0o600).map_err(|e| HostError {
            path,
            message: e.to_string(),
        })
    }

    /// Records a content, once.
    pub fn keep(&mut self, path: &TargetPath, kept: Kept) {
        let list = self.kept.entry(path.clone()).or_default();
        if !list.iter().any(|k| k.hash == kept.hash) {
            list.push(kept);
        }
    }

    /// Every blob the host store references.
    pub fn blobs(&self) -> impl Iterator<Item = BlobHash> + '_ {
        self.written
            .values()
            .map(|w| w.hash)
            .chain(self.kept.values().flatten().map(|k| k.hash))
    }
}
