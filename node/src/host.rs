//! The host store: the activator's record of what it wrote (path → hash, mode, owner) and of every
//! content it recorded before replacing or removing something it did not write. It is what makes
//! "found" precise: a file at a declared path with no entry in `written` was not written by the
//! mesh.
//!
//! What is at a secret's path is named by its keyed digest
//! ([`mesh_lib::secret::DigestKey`]), never its plain one, and the entry says so (`keyed`): the
//! host store gives nothing to guess a credential against.
//!
//! Kept as a snapshot, `STATE/host.json`, and a log of the changes since, `STATE/host.log`: a
//! switch that changes one file of 10,000 appends one line instead of rewriting megabytes. Both
//! are compact JSON (sorted maps; never hashed, so no canonical form is needed); the snapshot is
//! replaced atomically, the log appended and fsynced.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use mesh_lib::model::{FileMode, UnitName, UnitTrigger};
use mesh_lib::{atomic, BlobHash, TargetPath};
use serde::{Deserialize, Serialize};

use crate::root::{FileFacts, Stamp};

/// The host store's format.
pub const HOST_FORMAT: u32 = 1;

/// A file the mesh wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Written {
    /// Its content: its digest, or its keyed digest when `keyed`.
    pub hash: BlobHash,
    /// Whether it is at a secret's path: `hash` is the content's keyed digest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keyed: bool,
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
    /// The units the file configured when the mesh wrote it managed: when the mesh removes it,
    /// they pick the change up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<UnitTrigger>,
}

impl From<&FileFacts> for Written {
    fn from(f: &FileFacts) -> Self {
        Self {
            hash: f.hash,
            keyed: false,
            mode: f.mode,
            uid: f.uid,
            gid: f.gid,
            stamp: Some(f.stamp),
            units: Vec::new(),
        }
    }
}

/// A declared unit the mesh put in force (its module taken): what it was put in force as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitInForce {
    /// The digest of its unit file without `[Install]`.
    pub body: BlobHash,
    /// The digest of its `[Install]` section.
    pub install: BlobHash,
    /// Whether the mesh enabled it.
    pub enabled: bool,
    /// Whether the mesh runs it.
    pub started: bool,
    /// For a template, the instances it was put in force with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<String>,
}

impl UnitInForce {
    /// The units systemd runs for it, by name: a template's instances, or itself.
    pub fn runs_as(&self, name: &mesh_lib::model::UnitName) -> Vec<mesh_lib::model::UnitName> {
        name.runs_as(&self.instances)
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
    /// Its content (a blob in the store; wrapped when `keyed`).
    pub hash: BlobHash,
    /// Whether it was at a secret's path: the blob is the content wrapped, `hash` its keyed
    /// digest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keyed: bool,
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
    /// What the mesh wrote. Change it through [`HostStore::set_written`] and
    /// [`HostStore::unset_written`], so that [`HostStore::save`] knows what changed.
    pub written: BTreeMap<TargetPath, Written>,
    /// Every content recorded at a path, oldest first.
    pub kept: BTreeMap<TargetPath, Vec<Kept>>,
    /// The declared units the mesh has in force. Change it through [`HostStore::set_units`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub units: BTreeMap<UnitName, UnitInForce>,
    /// Whether `units` changed since the last load or save.
    #[serde(skip)]
    units_dirty: bool,
    /// Paths changed since the last load or save.
    #[serde(skip)]
    dirty: BTreeSet<TargetPath>,
    /// Changes in the log since the snapshot.
    #[serde(skip)]
    logged: usize,
}

impl Default for HostStore {
    fn default() -> Self {
        Self {
            format: HOST_FORMAT,
            written: BTreeMap::new(),
            kept: BTreeMap::new(),
            units: BTreeMap::new(),
            units_dirty: false,
            dirty: BTreeSet::new(),
            logged: 0,
        }
    }
}

/// How many logged saves make the next save a new snapshot.
const COMPACT_AFTER: usize = 256;

/// One save's changes, a line of `host.log`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Delta {
    /// Each changed path's entry: what the mesh wrote there now, or `None` if nothing.
    written: BTreeMap<TargetPath, Option<Written>>,
    /// Each changed path's recorded contents, whole.
    kept: BTreeMap<TargetPath, Vec<Kept>>,
    /// The units in force, whole, when they changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    units: Option<BTreeMap<UnitName, UnitInForce>>,
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
    /// Its snapshot in `state`.
    pub fn path(state: &Path) -> PathBuf {
        state.join("host.json")
    }

    fn log_path(state: &Path) -> PathBuf {
        state.join("host.log")
    }

    /// Reads it: the snapshot, then the changes logged since. Absent means the mesh has written
    /// nothing here yet. A last log line a crash cut short was never acknowledged and is
    /// skipped.
    pub fn load(state: &Path) -> Result<Self, HostError> {
        let path = Self::path(state);
        let err = |path: &Path, message: String| HostError {
            path: path.to_owned(),
            message,
        };
        let mut host = match std::fs::read(&path) {
            Ok(bytes) => {
                let host: HostStore =
                    serde_json::from_slice(&bytes).map_err(|e| err(&path, e.to_string()))?;
                if host.format != HOST_FORMAT {
                    return Err(err(
                        &path,
                        format!("format {} is not one this mesh reads", host.format),
                    ));
                }
                host
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::default(),
            Err(e) => return Err(err(&path, e.to_string())),
        };
        let log = Self::log_path(state);
        let text = match std::fs::read(&log) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(err(&log, e.to_string())),
        };
        let lines: Vec<&[u8]> = text
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_slice::<Delta>(line) {
                Ok(delta) => {
                    for (p, w) in delta.written {
                        match w {
                            Some(w) => host.written.insert(p, w),
                            None => host.written.remove(&p),
                        };
                    }
                    for (p, k) in delta.kept {
                        host.kept.insert(p, k);
                    }
                    if let Some(units) = delta.units {
                        host.units = units;
                    }
                    host.logged += 1;
                }
                Err(_) if i + 1 == lines.len() && !text.ends_with(b"\n") => {}
                Err(e) => return Err(err(&log, format!("line {}: {e}", i + 1))),
            }
        }
        Ok(host)
    }

    /// Makes the changes since the last load or save durable: one line appended to the log, or,
    /// when the log has grown long, a new snapshot (atomically) and an empty log.
    pub fn save(&mut self, state: &Path) -> Result<(), HostError> {
        if self.dirty.is_empty() && !self.units_dirty {
            return Ok(());
        }
        let path = Self::path(state);
        let log = Self::log_path(state);
        let err = |path: &Path, message: String| HostError {
            path: path.to_owned(),
            message,
        };
        if self.logged >= COMPACT_AFTER || !path.exists() {
            let bytes = serde_json::to_vec(self).map_err(|e| err(&path, e.to_string()))?;
            atomic::write_file(&path, &bytes, 0o600).map_err(|e| err(&path, e.to_string()))?;
            // The snapshot holds every logged change: replaying them again would change nothing.
            atomic::write_file(&log, b"", 0o600).map_err(|e| err(&log, e.to_string()))?;
            self.logged = 0;
        } else {
            let delta = Delta {
                written: self
                    .dirty
                    .iter()
                    .map(|p| (p.clone(), self.written.get(p).cloned()))
                    .collect(),
                kept: self
                    .dirty
                    .iter()
                    .filter_map(|p| self.kept.get(p).map(|k| (p.clone(), k.clone())))
                    .collect(),
                units: self.units_dirty.then(|| self.units.clone()),
            };
            let mut line = serde_json::to_vec(&delta).map_err(|e| err(&log, e.to_string()))?;
            line.push(b'\n');
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&log)
                .map_err(|e| err(&log, e.to_string()))?;
            file.write_all(&line)
                .and_then(|()| file.sync_all())
                .map_err(|e| err(&log, e.to_string()))?;
            self.logged += 1;
        }
        self.dirty.clear();
        self.units_dirty = false;
        Ok(())
    }

    /// Records the declared units the mesh has in force now.
    pub fn set_units(&mut self, units: BTreeMap<UnitName, UnitInForce>) {
        if self.units != units {
            self.units = units;
            self.units_dirty = true;
        }
    }

    /// Records that the mesh wrote `w` at `path`.
    pub fn set_written(&mut self, path: &TargetPath, w: Written) {
        self.written.insert(path.clone(), w);
        self.dirty.insert(path.clone());
    }

    /// Records that what is at `path` is not the mesh's (removed, or an original restored).
    pub fn unset_written(&mut self, path: &TargetPath) {
        if self.written.remove(path).is_some() {
            self.dirty.insert(path.clone());
        }
    }

    /// Records a content, once.
    pub fn keep(&mut self, path: &TargetPath, kept: Kept) {
        let list = self.kept.entry(path.clone()).or_default();
        if !list.iter().any(|k| k.hash == kept.hash) {
            list.push(kept);
            self.dirty.insert(path.clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn written(n: u8) -> Written {
        Written {
            hash: BlobHash::of(&[n]),
            keyed: n.is_multiple_of(3),
            mode: FileMode::parse("0644").unwrap(),
            uid: 0,
            gid: 0,
            stamp: None,
            units: Vec::new(),
        }
    }

    /// What is saved is what is loaded: through the log, through a new snapshot, and with a
    /// last log line a crash cut short.
    #[test]
    fn log_and_snapshot_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            TargetPath::new("/a").unwrap(),
            TargetPath::new("/b").unwrap(),
        );
        let mut host = HostStore::load(dir.path()).unwrap();
        host.set_written(&a, written(1));
        host.save(dir.path()).unwrap(); // the first save is a snapshot
        for n in 0..260u16 {
            host.set_written(&b, written(n as u8));
            if n % 2 == 0 {
                host.unset_written(&a);
            } else {
                host.set_written(&a, written(7));
            }
            host.keep(
                &b,
                Kept {
                    hash: BlobHash::of(&n.to_le_bytes()),
                    keyed: n.is_multiple_of(5),
                    mode: FileMode::parse("0600").unwrap(),
                    uid: 1,
                    gid: 1,
                    why: Why::Drift,
                },
            );
            host.save(dir.path()).unwrap();
            // Through the log, and on either side of the snapshot the 256th line makes.
            if [0, 1, 2, 254, 255, 256, 259].contains(&n) {
                let loaded = HostStore::load(dir.path()).unwrap();
                assert_eq!(
                    (&loaded.written, &loaded.kept),
                    (&host.written, &host.kept),
                    "after save {n}"
                );
            }
        }
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("host.log"))
            .unwrap();
        f.write_all(b"{\"written\":{\"/a\":nu").unwrap();
        let loaded = HostStore::load(dir.path()).unwrap();
        assert_eq!(loaded.written, host.written, "a torn last line is skipped");
    }
}
