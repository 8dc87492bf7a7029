//! One switch at a time per state directory: a non-blocking `flock` on the state directory
//! itself, and on `STATE/lock`. The kernel releases both when the holder exits, however it exits,
//! so a lock left by a killed process never blocks. The holder's pid is in the file for the
//! second caller's message.
//!
//! The directory's lock is the one that holds whatever happens to the files in it: a lock file
//! removed (or replaced) while a switch runs would let a second caller lock a new file of the
//! same name beside it, but not the directory, which the holder has open. The file's lock is
//! kept too, so that a mesh of an earlier version, which locks only the file, is excluded as
//! well.
//!
//! The pid never reads empty. The lock file is born whole: a temp file with the creator's pid,
//! locked by it, then linked to the name (a second creator's link fails, and it takes the lock
//! of the file that won). A later holder writes its pid over the previous one in one write of a
//! fixed width, never truncating first. The flock is on the file (its inode), not on the name,
//! so the name is never replaced while the file may be locked.
//!
//! What a loser can still see is the pid of the previous holder, for the instant between the new
//! holder's flock and its write: such a pid is no longer running (or it is a `mesh reconcile
//! --watch` between its rounds), so a loser that finds a pid of a process that has gone looks
//! again, briefly.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;

use rustix::fs::FlockOperation;

/// The width the pid is written at: the largest pid, padded, and a newline. Every holder writes
/// exactly this many bytes at offset 0, so a shorter pid never leaves a longer one's tail.
const PID_WIDTH: usize = 20;

/// The lock, held until dropped.
pub struct StateLock {
    _file: File,
    /// The state directory, locked (`None` for a named lock of its own, see
    /// [`StateLock::take_file`]).
    _folder: Option<File>,
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

fn pid_record() -> String {
    format!("{:<width$}\n", std::process::id(), width = PID_WIDTH - 1)
}

fn try_lock(file: &File) -> io::Result<bool> {
    match rustix::fs::flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether `file` is the one named `path` now (same device and inode).
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The pid in a lock file, if it names a running process.
fn holder(file: &mut File) -> Option<String> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    let pid: i32 = text.split_whitespace().next()?.parse().ok()?;
    runs(pid).then(|| pid.to_string())
}

/// Whether process `pid` is running (one of another user's counts).
pub fn runs(pid: i32) -> bool {
    rustix::process::Pid::from_raw(pid).is_some_and(|p| {
        matches!(
            rustix::process::test_kill_process(p),
            Ok(()) | Err(rustix::io::Errno::PERM)
        )
    })
}

impl StateLock {
    /// Takes the lock of `state`, failing at once if it is held: the directory's, then its
    /// lock file's.
    pub fn take(state: &Path) -> Result<Self, LockError> {
        let path = state.join("lock");
        let io_err = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        mesh_lib::atomic::create_dir_all(state).map_err(io_err)?;
        let folder = File::open(state).map_err(io_err)?;
        // The holder writes its pid just after its flock: a loser that finds none running
        // looks again, briefly (as for the file's lock below).
        let mut taken = false;
        for _ in 0..200 {
            if try_lock(&folder).map_err(io_err)? {
                taken = true;
                break;
            }
            if let Some(pid) = OpenOptions::new()
                .read(true)
                .open(&path)
                .ok()
                .and_then(|mut file| holder(&mut file))
            {
                return Err(LockError::Held { pid });
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if !taken {
            return Err(LockError::Held {
                pid: "unknown".into(),
            });
        }
        let mut lock = Self::take_file(state, "lock")?;
        lock._folder = Some(folder);
        Ok(lock)
    }

    /// Takes the lock `STATE/NAME` (another than the switch's: one pull at a time, say),
    /// failing at once if it is held.
    pub fn take_file(state: &Path, name: &str) -> Result<Self, LockError> {
        let path = state.join(name);
        let io_err = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        mesh_lib::atomic::create_dir_all(state).map_err(io_err)?;
        let mut last_seen = String::new();
        // Each round is short; a round repeats only while a holder is between its flock and
        // its pid (microseconds), or when two first callers race to create the file.
        for _ in 0..200 {
            let mut file = match OpenOptions::new().read(true).write(true).open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    match Self::create(state, &path).map_err(io_err)? {
                        Some(lock) => return Ok(lock),
                        None => continue, // another caller created it first: lock that one
                    }
                }
                Err(e) => return Err(io_err(e)),
            };
            if try_lock(&file).map_err(io_err)? {
                // Over the previous holder's pid, whole, in one write: never an empty file.
                // A file removed or replaced since it was opened is no longer the lock: the
                // lock is the one under the name.
                if !same_file(&file, &path) {
                    continue;
                }
                file.write_all_at(pid_record().as_bytes(), 0)
                    .map_err(io_err)?;
                return Ok(Self {
                    _file: file,
                    _folder: None,
                });
            }
            match holder(&mut file) {
                Some(pid) => return Err(LockError::Held { pid }),
                None => {
                    let mut text = String::new();
                    let _unreadable = file.rewind().and_then(|()| file.read_to_string(&mut text));
                    last_seen = text.trim().to_owned();
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
        Err(LockError::Held {
            pid: if last_seen.is_empty() {
                "unknown".into()
            } else {
                last_seen
            },
        })
    }

    /// Creates the lock file whole and locked: `None` if another caller created it first.
    fn create(state: &Path, path: &Path) -> io::Result<Option<Self>> {
        let mut tmp = tempfile::Builder::new()
            .prefix(mesh_lib::atomic::TEMP_PREFIX)
            .permissions(std::fs::Permissions::from_mode(0o600))
            .tempfile_in(state)?;
        tmp.write_all(pid_record().as_bytes())?;
        if !try_lock(tmp.as_file())? {
            return Err(io::Error::other(
                "a new temp file is locked by someone else",
            ));
        }
        match tmp.persist_noclobber(path) {
            Ok(file) => Ok(Some(Self {
                _file: file,
                _folder: None,
            })),
            Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(e.error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loser always names the holder: racing to create the lock file, and racing a holder
    /// that takes over a lock file another left. flock locks are per open file, so threads of
    /// one process contend as processes do; every pid is this process's.
    #[test]
    fn a_loser_always_reads_a_pid() {
        let me = std::process::id().to_string();
        for round in 0..300 {
            let dir = tempfile::tempdir().unwrap();
            if round % 2 == 1 {
                // A lock file an earlier holder left, holding its pid.
                drop(StateLock::take(dir.path()).unwrap());
            }
            let barrier = std::sync::Barrier::new(4);
            let results: Vec<Result<StateLock, LockError>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            StateLock::take(dir.path())
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let held = results.iter().filter(|r| r.is_ok()).count();
            assert_eq!(held, 1, "round {round}: exactly one holder");
            for r in &results {
                if let Err(LockError::Held { pid }) = r {
                    assert_eq!(pid, &me, "round {round}: the loser read {pid:?}");
                } else if let Err(e) = r {
                    panic!("round {round}: {e}");
                }
            }
        }
    }

    /// The lock holds whatever happens to its file: removed, or replaced by another, while
    /// it is held, a second caller is still refused — and once the holder is gone, taken.
    #[test]
    fn the_lock_holds_when_its_file_goes() {
        let dir = tempfile::tempdir().unwrap();
        let held = StateLock::take(dir.path()).unwrap();
        std::fs::remove_file(dir.path().join("lock")).unwrap();
        assert!(matches!(
            StateLock::take(dir.path()),
            Err(LockError::Held { .. })
        ));
        std::fs::write(dir.path().join("lock"), "1\n").unwrap();
        assert!(matches!(
            StateLock::take(dir.path()),
            Err(LockError::Held { .. })
        ));
        drop(held);
        StateLock::take(dir.path()).expect("free once the holder is gone");
    }
}
