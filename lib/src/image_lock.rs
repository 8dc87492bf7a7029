//! The image lock: the digest each image named by a tag alone resolved to at its registry, so
//! a build pins it without asking the registry (as `flake.lock` pins a flake's inputs).
//!
//! The file is `images.lock` at the root of the fleet's tree (the folder of the fleet file;
//! see `mesh_compiler::imports::Tree`), written by `mesh images lock`, read by every build of a
//! declaration in that tree. Its bytes are canonical — the same entries give the same bytes on
//! every machine — and one entry is one line, so a change reads as a one-line diff:
//!
//! ```text
//! {
//!   "version": 1,
//!   "images": {
//!     "registry.example/app:1.4": "sha256:…"
//!   }
//! }
//! ```
//!
//! A key is an image reference as a declaration names it, tag and all, never pinned; a value
//! is the manifest digest its registry answered for the tag (an index's for a multi-arch tag,
//! as `docker pull` pins it). A container whose image is such a key gets the digest as if the
//! declaration had written `REFERENCE@DIGEST` ([`ImageLock::pin`]): the generation's id is the
//! same either way.
//!
//! Pure: parsing and writing. Bad input is named by its line, and nothing is changed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::image::{ImageDigest, ImageRef};
use crate::model::ContainerEntry;

/// The lock file's name, at the root of the fleet's tree.
pub const FILE: &str = "images.lock";

/// The version of the file this mesh writes and reads.
pub const VERSION: u32 = 1;

/// An image reference named by a tag alone (or by its repository alone, `latest`): a lock's
/// key. Valid when built.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Unpinned(String);

impl Unpinned {
    /// The reference, as declared.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Parsed.
    pub fn parsed(&self) -> ImageRef {
        ImageRef::parse(&self.0).expect("checked when built")
    }
}

impl TryFrom<String> for Unpinned {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let parsed = ImageRef::parse(&text).map_err(|e| e.to_string())?;
        if parsed.digest().is_some() {
            return Err(format!(
                "image `{text}` is pinned by digest already: a lock holds only images named by a tag"
            ));
        }
        Ok(Self(text))
    }
}

impl From<Unpinned> for String {
    fn from(u: Unpinned) -> String {
        u.0
    }
}

impl std::fmt::Display for Unpinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a lock file holds, as it is written.
#[derive(Serialize)]
struct File {
    version: u32,
    images: BTreeMap<Unpinned, ImageDigest>,
}

/// The digests of a fleet's images named by tag.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageLock {
    /// Each reference and its digest, sorted.
    pub images: BTreeMap<Unpinned, ImageDigest>,
}

/// Why a lock file cannot be read: its line (1 for the file as a whole) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct LockError {
    /// The line, from 1.
    pub line: usize,
    /// What is wrong there.
    pub message: String,
}

impl ImageLock {
    /// Reads a lock file's bytes: JSON of this [`VERSION`], every key an unpinned reference
    /// listed once, every value a `sha256:` digest, nothing else.
    pub fn parse(bytes: &[u8]) -> Result<Self, LockError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            version: u32,
            images: BTreeMap<String, String>,
        }
        let raw: Raw = serde_json::from_slice(bytes).map_err(|e| {
            let text = e.to_string();
            // serde_json says where after the message; the line is said before it.
            let message = match text.rsplit_once(" at line ") {
                Some((m, _)) => m.to_owned(),
                None => text,
            };
            LockError {
                line: e.line().max(1),
                message,
            }
        })?;
        let text = String::from_utf8_lossy(bytes);
        // The lines that start with `needle` (a key, as JSON writes it), from 1.
        let lines_of = |needle: &str| -> Vec<usize> {
            text.lines()
                .enumerate()
                .filter(|(_, l)| l.trim_start().starts_with(needle))
                .map(|(i, _)| i + 1)
                .collect()
        };
        if raw.version != VERSION {
            return Err(LockError {
                line: lines_of("\"version\"").first().copied().unwrap_or(1),
                message: format!(
                    "version {} is not one this mesh reads ({VERSION}): a newer mesh wrote it",
                    raw.version
                ),
            });
        }
        let mut images = BTreeMap::new();
        for (key, value) in raw.images {
            let quoted = serde_json::to_string(&key).expect("a string encodes");
            let at = lines_of(&format!("{quoted}:"));
            let line = at.first().copied().unwrap_or(1);
            if at.len() > 1 {
                return Err(LockError {
                    line: at[1],
                    message: format!("image {quoted} is listed twice (first on line {line})"),
                });
            }
            let key = Unpinned::try_from(key).map_err(|message| LockError { line, message })?;
            let digest = ImageDigest::try_from(value).map_err(|e| LockError {
                line,
                message: format!("image {quoted}: {e}"),
            })?;
            images.insert(key, digest);
        }
        Ok(Self { images })
    }

    /// The canonical bytes: the keys sorted, two spaces of indent, one entry a line, a final
    /// newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let file = File {
            version: VERSION,
            images: self.images.clone(),
        };
        let mut bytes = serde_json::to_vec_pretty(&file).expect("strings and a number encode");
        bytes.push(b'\n');
        bytes
    }

    /// The digest `image`, as a declaration names it, is locked to.
    pub fn digest(&self, image: &str) -> Option<&ImageDigest> {
        self.images
            .iter()
            .find(|(k, _)| k.as_str() == image)
            .map(|(_, d)| d)
    }

    /// Pins `entry`'s image by its locked digest when it is named by a tag alone and locked:
    /// its image becomes `REFERENCE@DIGEST`, as if declared so. Whether it was.
    pub fn pin(&self, entry: &mut ContainerEntry) -> bool {
        if entry.digest.is_some() {
            return false;
        }
        let Some(digest) = self.digest(&entry.image) else {
            return false;
        };
        entry.image = format!("{}@{digest}", entry.image);
        entry.digest = Some(digest.clone());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:a7cd3a45fbef58a250d961834bf7a446ee7a34820f57be0876d0e381f20c5544";
    const E: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn lock(entries: &[(&str, &str)]) -> ImageLock {
        ImageLock {
            images: entries
                .iter()
                .map(|(k, v)| {
                    (
                        Unpinned::try_from((*k).to_owned()).unwrap(),
                        ImageDigest::try_from(*v).unwrap(),
                    )
                })
                .collect(),
        }
    }

    /// The bytes are canonical: sorted whatever the order of insertion, one entry a line, and
    /// read back to the same lock.
    #[test]
    fn written_bytes_are_canonical_and_read_back() {
        let a = lock(&[("reg.example:5000/b/app:2", E), ("postgres:16", D)]);
        let b = lock(&[("postgres:16", D), ("reg.example:5000/b/app:2", E)]);
        assert_eq!(a.to_bytes(), b.to_bytes());
        let text = String::from_utf8(a.to_bytes()).unwrap();
        assert_eq!(
            text,
            format!(
                "{{\n  \"version\": 1,\n  \"images\": {{\n    \"postgres:16\": \"{D}\",\n    \"reg.example:5000/b/app:2\": \"{E}\"\n  }}\n}}\n"
            )
        );
        assert_eq!(ImageLock::parse(text.as_bytes()).unwrap(), a);
        assert_eq!(
            ImageLock::default().to_bytes(),
            b"{\n  \"version\": 1,\n  \"images\": {}\n}\n"
        );
    }

    /// A malformed digest, a pinned key, a bad reference, an unknown field, another version or
    /// text that is not JSON is refused, naming the line it is on.
    #[test]
    fn bad_input_is_named_by_its_line() {
        let good = String::from_utf8(lock(&[("app:1", D), ("web:2", E)]).to_bytes()).unwrap();
        let cases: Vec<(String, usize, &str)> = vec![
            (good.replace(E, "sha256:abc"), 5, "64 lowercase hex"),
            (
                good.replace("\"web:2\"", &format!("\"web:2@{D}\"")),
                5,
                "pinned by digest already",
            ),
            (good.replace("\"web:2\"", "\"Web:2\""), 5, "`Web`"),
            (
                good.replace("\"version\": 1", "\"version\": 2"),
                2,
                "version 2",
            ),
            (
                good.replace("\"version\": 1,", "\"version\": 1,\n  \"extra\": 0,"),
                3,
                "unknown field `extra`",
            ),
            (good.replace("\"images\": {", "\"images\": ["), 3, ""),
            ("not json".to_owned(), 1, "expected"),
            (String::new(), 1, "EOF"),
            (
                good.replace(
                    &format!("\"web:2\": \"{E}\""),
                    &format!("\"app:1\": \"{E}\""),
                ),
                5,
                "listed twice (first on line 4)",
            ),
        ];
        for (text, line, says) in cases {
            let e = ImageLock::parse(text.as_bytes()).unwrap_err();
            assert_eq!(e.line, line, "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
    }

    /// A locked image named by tag is pinned as if declared `REF@DIGEST`; an image pinned in
    /// the declaration or not in the lock is left as it is.
    #[test]
    fn pin_writes_the_digest_into_the_reference() {
        let l = lock(&[("app:1", D)]);
        let mut entry: ContainerEntry = serde_json::from_value(serde_json::json!({
            "module": "m", "image": "app:1", "command": [], "environment": {}, "ports": [],
            "volumes": [], "labels": {}, "state": { "kind": "managed" }
        }))
        .unwrap();
        let mut declared = entry.clone();
        declared.image = format!("app:1@{D}");
        declared.digest = Some(ImageDigest::try_from(D).unwrap());
        assert!(l.pin(&mut entry));
        assert_eq!(entry, declared);
        assert!(entry.check_digest().is_ok());
        assert!(!l.pin(&mut entry), "pinned already");
        let mut other = entry.clone();
        other.image = "app:2".into();
        other.digest = None;
        assert!(!l.pin(&mut other));
        assert_eq!(other.image, "app:2");
    }
}
