//! One switch at a time per state directory: a non-blocking `flock` on `STATE/lock`. The kernel
//! releases it when the holder exits, however it exits, so a lock left by a killed process never
//! blocks. The holder's pid is written in the file for the second caller's message.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::Path;

use rustix::fs::FlockOperation;

/// The lock, held until dropped.
pub struct StateLock {
    _file: File,
}

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds it.
    #[error("another mesh (pid {pid}) is changing this node; try again when it is done")]
    Held {
        /// The holder's pid, as it wrote it.
        pid: String,
    },
    /// The lock file cannot be opened.
    #[error("cannot open the lock {path}: {source}")]
    Io {
        /// The lock file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl StateLock {
    /// Takes the lock of `state`, failing at once if it is held.
    pub fn take(state: &Path) -> Result<Self, LockError> {
        let path = state.join("lock");
        let io_err = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        mesh_lib::atomic::create_dir_all(state).map_err(io_err)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err)?;
        if rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            let mut pid = String::new();
            let _unreadable = file.read_to_string(&mut pid);
            return Err(LockError::Held {
                pid: pid.trim().to_owned(),
            });
        }
        file.set_len(0).map_err(io_err)?;
        file.rewind().map_err(io_err)?;
        write!(file, "{}", std::process::id()).map_err(io_err)?;
        Ok(Self { _file: file })
    }
}
