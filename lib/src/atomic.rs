//! Crash-safe file replacement for the state directory: temp file in the target's folder, created
//! with its final mode, written, fsynced, renamed into place, then the folder fsynced. A reader
//! sees the old file or the new one, never a part of either; a crash leaves at most a temp file
//! named `.tmp-*`, which nothing reads.

use std::fs::{self, File, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// The prefix of every temporary file the mesh creates in its own folders.
pub const TEMP_PREFIX: &str = ".tmp-";

/// Writes `bytes` to `path` atomically with permission bits `mode`, durably: when it returns, the
/// new file and its name survive a crash.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write(path, bytes, mode, true)
}

/// Writes `bytes` to `path` atomically (readers see the old or the new file) but without waiting
/// for the disk: for many files at once, made durable afterwards by one [`sync_filesystem`].
pub fn write_file_unsynced(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write(path, bytes, mode, false)
}

/// Flushes everything written to the filesystem that holds `dir` (`syncfs(2)`): one wait for
/// many writes.
pub fn sync_filesystem(dir: &Path) -> io::Result<()> {
    let d = File::open(dir)?;
    rustix::fs::syncfs(&d).map_err(io::Error::from)
}

fn write(path: &Path, bytes: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("path has no parent folder"))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .permissions(Permissions::from_mode(mode))
        .tempfile_in(dir)?;
    // The builder's mode passes through the umask; set it exactly.
    tmp.as_file()
        .set_permissions(Permissions::from_mode(mode))?;
    tmp.write_all(bytes)?;
    if durable {
        tmp.as_file().sync_all()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    if durable {
        sync_dir(dir)?;
    }
    Ok(())
}

/// fsyncs a folder, so a rename or a new entry in it survives a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates `dir` and its missing parents, each folder it creates with mode `0700`, whatever the
/// umask: every folder the mesh makes is its owner's only (the state directory holds the
/// contents of files that are not world-readable). A relative `dir` is created under the working
/// folder. Not synced: a caller that needs the folder durable syncs its parent or the
/// filesystem.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_all(parent)?;
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => fs::set_permissions(dir, Permissions::from_mode(0o700)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The file has exactly the requested mode and content, and no temp file is left.
    #[test]
    fn writes_with_exact_mode_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("secret");
        write_file(&p, b"x", 0o600).unwrap();
        write_file(&p, b"yz", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"yz");
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o600);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("secret")]);
    }

    /// A relative folder is created under the working folder (its parent is the empty path,
    /// which is not a folder to create), and every folder made is private.
    #[test]
    fn creates_relative_and_private_folders() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        create_dir_all(&nested).unwrap();
        for p in [dir.path().join("a"), nested] {
            assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o700, "{p:?}");
        }
        // `Path::new("state").parent()` is `Some("")`: creating it must not fail.
        assert!(create_dir_all(Path::new("")).is_ok());
    }
}
