//! The mesh's own Nickel library (`mesh.ncl`), shipped inside the binary and put on disk where
//! Nickel can import it: `STATE/ncl/<digest>/mesh.ncl`. The folder is named by the library's
//! digest, so a newer mesh never evaluates against an older library.

use std::io;
use std::path::{Path, PathBuf};

use mesh_lib::atomic;

/// The library's file name in its folder: what a declaration imports.
pub const FILE: &str = "mesh.ncl";

/// The library's source.
pub const MESH_NCL: &str = include_str!("../ncl/mesh.ncl");

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
