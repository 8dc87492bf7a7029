//! Packs: many blobs in one file, so a build of thousands of files costs one file creation, not
//! thousands (file creation is what a store of loose blobs spends its time on).
//!
//! ```text
//! "MESHPACK" | version u32 LE | count u32 LE
//! count × ( blake3 [32] | offset u64 LE | length u64 LE )   sorted by digest
//! the blobs' bytes, concatenated
//! ```
//!
//! A pack is named by the blake3 of its whole file and never modified. Every read of a blob
//! hashes its bytes: a damaged pack is reported, never used.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use crate::id::BlobHash;

const MAGIC: &[u8; 8] = b"MESHPACK";
const VERSION: u32 = 1;
const HEADER: usize = 16;
const ENTRY: usize = 48;

/// Where a blob is in a pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Byte offset of the blob in the pack file.
    pub offset: u64,
    /// Its length.
    pub len: u64,
}

/// The bytes of a pack holding `blobs` (duplicates are stored once).
pub fn encode(blobs: &[(BlobHash, &[u8])]) -> Vec<u8> {
    let mut sorted: Vec<&(BlobHash, &[u8])> = blobs.iter().collect();
    sorted.sort_by_key(|(h, _)| *h);
    sorted.dedup_by_key(|(h, _)| *h);
    let data_start = (HEADER + ENTRY * sorted.len()) as u64;
    let total: usize = sorted.iter().map(|(_, b)| b.len()).sum();
    let mut out = Vec::with_capacity(data_start as usize + total);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(sorted.len() as u32).to_le_bytes());
    let mut offset = data_start;
    for (hash, bytes) in &sorted {
        out.extend_from_slice(hash.as_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        offset += bytes.len() as u64;
    }
    for (_, bytes) in &sorted {
        out.extend_from_slice(bytes);
    }
    out
}

fn bad(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{} is not a pack: {what}", path.display()),
    )
}

/// Reads a pack's index.
pub fn read_index(path: &Path) -> io::Result<Vec<(BlobHash, Entry)>> {
    let mut file = File::open(path)?;
    let file_len = file.metadata()?.len();
    let mut header = [0u8; HEADER];
    file.read_exact(&mut header)
        .map_err(|_| bad(path, "too short"))?;
    if &header[..8] != MAGIC || header[8..12] != VERSION.to_le_bytes() {
        return Err(bad(path, "wrong magic or version"));
    }
    let count = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes")) as usize;
    // The count is read from the file: a damaged one must not make the mesh ask for 200 GB.
    if (HEADER + count * ENTRY) as u64 > file_len {
        return Err(bad(path, "its index is longer than the file"));
    }
    let mut raw = vec![0u8; count * ENTRY];
    file.read_exact(&mut raw)
        .map_err(|_| bad(path, "index cut short"))?;
    raw.chunks_exact(ENTRY)
        .map(|e| {
            let hash = BlobHash::from_bytes(e[..32].try_into().expect("32 bytes"));
            let offset = u64::from_le_bytes(e[32..40].try_into().expect("8 bytes"));
            let len = u64::from_le_bytes(e[40..48].try_into().expect("8 bytes"));
            if offset.checked_add(len).is_none_or(|end| end > file_len) {
                return Err(bad(path, "an entry points past the end"));
            }
            Ok((hash, Entry { offset, len }))
        })
        .collect()
}

/// Reads one blob's bytes (not checked: the caller hashes them).
pub fn read_entry(path: &Path, entry: Entry) -> io::Result<Vec<u8>> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(entry.offset))?;
    let mut bytes = vec![0u8; entry.len as usize];
    file.read_exact(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is packed reads back, by digest; duplicates are stored once.
    #[test]
    fn round_trip() {
        let blobs: Vec<(BlobHash, &[u8])> = [&b"one"[..], b"two", b"", b"one"]
            .iter()
            .map(|b| (BlobHash::of(b), *b))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        std::fs::write(&path, encode(&blobs)).unwrap();
        let index = read_index(&path).unwrap();
        assert_eq!(index.len(), 3);
        for (hash, entry) in index {
            assert_eq!(BlobHash::of(&read_entry(&path, entry).unwrap()), hash);
        }
    }

    /// A header claiming more entries than the file holds is refused before anything is
    /// allocated for them (4 billion entries would be 200 GB).
    #[test]
    fn a_damaged_count_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        let mut bytes = encode(&[(BlobHash::of(b"x"), b"x")]);
        bytes[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, bytes).unwrap();
        let err = read_index(&path).unwrap_err();
        assert!(err.to_string().contains("longer than the file"), "{err}");
    }
}
