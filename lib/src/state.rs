//! The state directory: the store, the node record, the host store, the profile, the lock. It
//! holds the contents of every declared and every found file, secrets among them, whatever mode
//! a declaration gives a file; so it is its owner's only.
//!
//! Invariants:
//! - a state directory the mesh creates is `0700`, and so is every folder it creates in it;
//! - on every open, the mesh's own folders in it are made `0700` and its own files `0600` if
//!   they were not (a state directory an older mesh made `0755`, its blobs `0444`): nothing in it
//!   is readable by another user from then on;
//! - the state directory itself is made `0700` when it is the mesh's (it holds the mesh's
//!   entries, or nothing); a folder of someone else's given by mistake (`--state-dir /etc`) is
//!   never chmodded, only the mesh's entries in it;
//! - a folder every user may write to (`/tmp`, mode `1777`) is refused: another user could plant
//!   the mesh's files in it before the mesh makes them.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::atomic;

/// Folders of the mesh's own, relative to the state directory.
const FOLDERS: [&str; 10] = [
    "store",
    "store/blobs",
    "store/packs",
    "store/incoming",
    "store/generations",
    "profile",
    "ncl",
    "cache",
    "cache/eval",
    DEPLOYS,
];

/// Files of the mesh's own, relative to the state directory.
const FILES: [&str; 12] = [
    "record.json",
    "images.json",
    "staged.json",
    "host.json",
    "host.log",
    "profile.log",
    "lock",
    "journal.json",
    "engine-used",
    "temp-key",
    "pull.json",
    "pull.lock",
];

/// The deploys' records and their agents' logs: an older mesh made the logs through the umask.
const DEPLOYS: &str = "deploys";

/// A state directory that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Every user may write to it.
    #[error("the state directory {} is writable by every user (mode {mode:04o}): another user could plant files where the mesh keeps its own; give the mesh a folder of its own (--state-dir, MESH_STATE_DIR)", .path.display())]
    Shared {
        /// The folder.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// It is not a folder.
    #[error("the state directory {} is not a folder", .path.display())]
    NotAFolder {
        /// The path.
        path: PathBuf,
    },
    /// Creating it or making it private failed.
    #[error("{op} the state directory {}: {source}", .path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// Where.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl StateError {
    /// Whether the user gave a folder that cannot be a state directory (rather than the system
    /// failing).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            StateError::Shared { .. } | StateError::NotAFolder { .. }
        )
    }
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StateError + 'a {
    move |source| StateError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// Makes `path` owner-only (`mode`) if group or others have any permission on it.
fn restrict(path: &Path, mode: u32) -> Result<(), StateError> {
    match fs::symlink_metadata(path) {
        // A symlink is not the mesh's; chmod would follow it.
        Ok(m) if m.file_type().is_symlink() => Ok(()),
        Ok(m) if m.mode() & 0o077 != 0 => {
            fs::set_permissions(path, fs::Permissions::from_mode(mode))
                .map_err(io_err("making private", path))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("inspecting", path)(e)),
    }
}

/// Whether `dir` holds one of the mesh's entries, or nothing.
fn is_the_meshs(dir: &Path) -> Result<bool, StateError> {
    let mut entries = fs::read_dir(dir).map_err(io_err("listing", dir))?;
    let mut empty = true;
    for entry in entries.by_ref() {
        let name = entry.map_err(io_err("listing", dir))?.file_name();
        empty = false;
        if FOLDERS.iter().chain(&FILES).any(|n| name == **n) {
            return Ok(true);
        }
    }
    Ok(empty)
}

/// Creates the state directory (private) or makes an existing one private; refuses one every
/// user may write to. Cheap: a few `stat`s; called whenever the store or the node is opened.
pub fn secure(state: &Path) -> Result<(), StateError> {
    match fs::metadata(state) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            atomic::create_dir_all(state).map_err(io_err("creating", state))?;
        }
        Err(e) => return Err(io_err("inspecting", state)(e)),
        Ok(m) if !m.is_dir() => {
            return Err(StateError::NotAFolder {
                path: state.to_owned(),
            })
        }
        Ok(m) => {
            let mode = m.mode() & 0o7777;
            if mode & 0o002 != 0 || mode & 0o1000 != 0 {
                return Err(StateError::Shared {
                    path: state.to_owned(),
                    mode,
                });
            }
            if mode & 0o077 != 0 && is_the_meshs(state)? {
                fs::set_permissions(state, fs::Permissions::from_mode(0o700))
                    .map_err(io_err("making private", state))?;
            }
        }
    }
    // An older mesh's deploys folder, and its logs, are made private once: listed only then.
    let deploys = state.join(DEPLOYS);
    if fs::symlink_metadata(&deploys).is_ok_and(|m| m.is_dir() && m.mode() & 0o077 != 0) {
        for entry in fs::read_dir(&deploys).map_err(io_err("listing", &deploys))? {
            let entry = entry.map_err(io_err("listing", &deploys))?;
            let dir = entry.file_type().is_ok_and(|t| t.is_dir());
            restrict(&entry.path(), if dir { 0o700 } else { 0o600 })?;
        }
    }
    for folder in FOLDERS {
        restrict(&state.join(folder), 0o700)?;
    }
    for file in FILES {
        restrict(&state.join(file), 0o600)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().mode() & 0o7777
    }

    /// A new state directory is private; an old one made world-readable is made private on
    /// open, its deploys' logs too; a shared folder is refused; someone else's folder keeps its mode.
    #[test]
    fn private_when_made_and_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("fresh/state");
        secure(&fresh).unwrap();
        assert_eq!(mode(&fresh), 0o700);

        let old = dir.path().join("old");
        fs::create_dir_all(old.join("store/blobs/ab")).unwrap();
        fs::write(old.join("record.json"), "{}").unwrap();
        fs::create_dir_all(old.join("deploys")).unwrap();
        fs::write(old.join("deploys/t.log"), "switched\n").unwrap();
        for (p, m) in [
            (old.clone(), 0o755),
            (old.join("store"), 0o755),
            (old.join("store/blobs"), 0o755),
            (old.join("record.json"), 0o644),
            (old.join("deploys"), 0o755),
            (old.join("deploys/t.log"), 0o644),
        ] {
            fs::set_permissions(&p, fs::Permissions::from_mode(m)).unwrap();
        }
        secure(&old).unwrap();
        assert_eq!(mode(&old), 0o700);
        assert_eq!(mode(&old.join("store")), 0o700);
        assert_eq!(mode(&old.join("store/blobs")), 0o700);
        assert_eq!(mode(&old.join("record.json")), 0o600);
        assert_eq!(mode(&old.join("deploys")), 0o700);
        assert_eq!(mode(&old.join("deploys/t.log")), 0o600);

        let shared = dir.path().join("tmp");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(matches!(secure(&shared), Err(StateError::Shared { .. })));

        let foreign = dir.path().join("etc");
        fs::create_dir(&foreign).unwrap();
        fs::write(foreign.join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        fs::set_permissions(&foreign, fs::Permissions::from_mode(0o755)).unwrap();
        secure(&foreign).unwrap();
        assert_eq!(
            mode(&foreign),
            0o755,
            "not the mesh's folder: left as it is"
        );
    }
}
