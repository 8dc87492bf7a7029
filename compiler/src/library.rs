//! The mesh's own Nickel library (`mesh.ncl`), shipped inside the binary and put on disk where
//! Nickel can import it: `STATE/ncl/<digest>/mesh.ncl`. The folder is named by the library's
//! digest, so a newer mesh never evaluates against an older library.
//!
//! The same text, byte for byte, is what `mesh lib` prints and writes for editors and the
//! `nickel` command ([`write_to`]): its first line names the mesh's version.

use std::io;
use std::path::{Path, PathBuf};

use mesh_lib::atomic;

/// The library's file name in its folder: what a declaration imports.
pub const FILE: &str = "mesh.ncl";

/// How the library's first line begins: what [`write_to`] recognises as a library it may
/// replace.
pub const HEADER: &str = "# The mesh's Nickel library, as mesh ";

/// The library's source: its first line names the version of the mesh that ships it.
pub const MESH_NCL: &str = concat!(
    "# The mesh's Nickel library, as mesh ",
    env!("CARGO_PKG_VERSION"),
    " ships it (`mesh lib`; `mesh lib --write DIR` writes it again).\n",
    include_str!("../ncl/mesh.ncl")
);

/// The library's digest, part of every evaluation cache key (and of each module's: computed
/// once).
pub fn digest() -> blake3::Hash {
    static DIGEST: std::sync::OnceLock<blake3::Hash> = std::sync::OnceLock::new();
    *DIGEST.get_or_init(|| blake3::hash(MESH_NCL.as_bytes()))
}

/// Ensures the library is on disk under `state_dir`; returns the folder to import it from.
pub fn install(state_dir: &Path) -> io::Result<PathBuf> {
    let dir = state_dir.join("ncl").join(&digest().to_hex()[..16]);
    let file = dir.join(FILE);
    // The folder is named by the content's digest and the file written atomically: a file of
    // the right length there is this library.
    let present = std::fs::metadata(&file).is_ok_and(|m| m.len() == MESH_NCL.len() as u64);
    if !present {
        atomic::create_dir_all(&dir)?;
        atomic::write_file(&file, MESH_NCL.as_bytes(), 0o400)?;
    }
    Ok(dir)
}

/// Why [`write_to`] wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A file that is not a library a mesh wrote is where the library would go.
    #[error("{} is there and is not the mesh's library (its first line does not begin {HEADER:?}): nothing was written", .0.display())]
    NotALibrary(PathBuf),
    /// Writing failed.
    #[error("cannot write {}: {source}", .path.display())]
    Io {
        /// Where.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Writes the library as `DIR/mesh.ncl` (the folder made as needed; folder and file through
/// the umask, as the operator's own files): the folder to put on the import path of the `nickel`
/// command and the Nickel language server (`NICKEL_IMPORT_PATH`). A library an older mesh wrote
/// there is replaced (atomically); any other file is not. Returns the file.
pub fn write_to(dir: &Path) -> Result<PathBuf, WriteError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| WriteError::Io { path, source }
    };
    let file = dir.join(FILE);
    match std::fs::read(&file) {
        Ok(bytes) if !bytes.starts_with(HEADER.as_bytes()) => {
            return Err(WriteError::NotALibrary(file))
        }
        Ok(bytes) if bytes == MESH_NCL.as_bytes() => return Ok(file),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&file)(e)),
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    // Written beside it, then renamed over it: an editor never reads half a library. Created
    // through the umask: the library is read by whoever edits the fleet.
    let temp = dir.join(format!(".{FILE}.{}", std::process::id()));
    let written = (|| {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o666)
            .open(&temp)?;
        f.write_all(MESH_NCL.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&temp, &file)
    })();
    if let Err(e) = written {
        let _gone = std::fs::remove_file(&temp);
        return Err(io(&file)(e));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library's first line names the mesh's version; `write_to` writes exactly the
    /// library the build installs, replaces one a mesh wrote, and refuses any other file.
    #[test]
    fn the_written_library_is_the_shipped_one() {
        assert!(MESH_NCL.starts_with(&format!("{HEADER}{} ", env!("CARGO_PKG_VERSION"))));
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("lib");
        let file = write_to(&out).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), MESH_NCL.as_bytes());
        let state = tempfile::tempdir().unwrap();
        let installed = install(state.path()).unwrap().join(FILE);
        assert_eq!(
            std::fs::read(installed).unwrap(),
            std::fs::read(&file).unwrap()
        );
        std::fs::write(&file, format!("{HEADER}0.0.1 ships it\n{{}}\n")).unwrap();
        write_to(&out).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), MESH_NCL.as_bytes());
        std::fs::write(&file, "{ mine = 1 }\n").unwrap();
        assert!(matches!(write_to(&out), Err(WriteError::NotALibrary(_))));
        assert_eq!(std::fs::read(&file).unwrap(), b"{ mine = 1 }\n");
    }
}
