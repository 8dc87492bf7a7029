//! Moving store objects from one node's store to another's, the `nix copy` way: the sender asks
//! which of a generation's objects the receiver lacks, and sends only those; the receiver checks
//! every object against its name before it stores any.
//!
//! Both are line-oriented text on a byte stream (an SSH channel in practice):
//!
//! ```text
//! want list, and the answer (the missing ones):   generation b3:HEX
//!                                                 blob b3:HEX
//! object stream:                                  blob b3:HEX LEN\n<LEN bytes>
//!                                                 generation b3:HEX LEN\n<LEN bytes: canonical JSON>
//!                                                 end\n
//! ```

use std::io::{BufRead, Read, Write};

use crate::id::{BlobHash, GenerationId};
use crate::model::Generation;
use crate::store::{Store, StoreError};

/// One object of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Object {
    /// A generation.
    Generation(GenerationId),
    /// A blob.
    Blob(BlobHash),
}

impl std::fmt::Display for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Object::Generation(id) => write!(f, "generation {id}"),
            Object::Blob(hash) => write!(f, "blob {hash}"),
        }
    }
}

/// A transfer that cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// A line that is not what the format says.
    #[error("line {line}: `{text}` is not an object ({expected})")]
    Format {
        /// Its number.
        line: usize,
        /// What it said (escaped).
        text: String,
        /// What was expected.
        expected: &'static str,
    },
    /// An object whose bytes do not hash to its name.
    #[error("{object} does not match its name (its bytes hash to {actual}): nothing was stored")]
    Mismatch {
        /// The object.
        object: Object,
        /// What its bytes hash to.
        actual: String,
    },
    /// The stream ended before its `end`.
    #[error("the stream ended before its end, after {0} object(s): nothing was stored")]
    CutShort(usize),
    /// More than [`MAX_OBJECT`] bytes announced.
    #[error("{0} announces more than {MAX_OBJECT} bytes: nothing was stored")]
    TooLarge(Object),
    /// Reading or writing the stream failed.
    #[error("the stream: {0}")]
    Io(#[from] std::io::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The largest object a stream may announce (1 GiB): a bound on what a receiver allocates.
pub const MAX_OBJECT: u64 = 1 << 30;

fn parse_object(line: &str, n: usize) -> Result<(Object, Option<u64>), TransferError> {
    let bad = |expected| TransferError::Format {
        line: n,
        text: crate::text::escape(line).into_owned(),
        expected,
    };
    let mut words = line.split(' ');
    let (kind, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let object = match kind {
        "generation" => Object::Generation(
            name.parse()
                .map_err(|_| bad("a generation id after `generation`"))?,
        ),
        "blob" => Object::Blob(name.parse().map_err(|_| bad("a blob hash after `blob`"))?),
        _ => return Err(bad("`generation ID` or `blob HASH`")),
    };
    let len = match words.next() {
        Some(len) => Some(len.parse().map_err(|_| bad("a length in bytes"))?),
        None => None,
    };
    if words.next().is_some() {
        return Err(bad("two or three words"));
    }
    Ok((object, len))
}

/// Writes a want list.
pub fn write_list(out: &mut impl Write, objects: &[Object]) -> std::io::Result<()> {
    for o in objects {
        writeln!(out, "{o}")?;
    }
    out.flush()
}

/// Reads a want list (or an answer to one).
pub fn read_list(input: impl BufRead) -> Result<Vec<Object>, TransferError> {
    let mut out = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        match parse_object(&line, i + 1)? {
            (object, None) => out.push(object),
            (_, Some(_)) => {
                return Err(TransferError::Format {
                    line: i + 1,
                    text: crate::text::escape(&line).into_owned(),
                    expected: "no length in a want list",
                })
            }
        }
    }
    Ok(out)
}

/// The objects of `wanted` that `store` lacks, in order.
pub fn missing(store: &Store, wanted: &[Object]) -> Vec<Object> {
    wanted
        .iter()
        .copied()
        .filter(|o| match o {
            Object::Generation(id) => !store.has_generation(id),
            Object::Blob(hash) => !store.has_blob(hash),
        })
        .collect()
}

/// Writes the stream of `objects` read from `store`; the bytes written.
pub fn send(store: &Store, objects: &[Object], out: &mut impl Write) -> Result<u64, TransferError> {
    let mut sent = 0u64;
    for o in objects {
        let bytes = match o {
            Object::Generation(id) => {
                store
                    .generation(id)?
                    .canonical_bytes()
                    .map_err(|e| StoreError::Io {
                        op: "encoding",
                        path: store.root().to_owned(),
                        source: std::io::Error::other(e),
                    })?
            }
            Object::Blob(hash) => store.blob(hash)?,
        };
        let header = format!("{o} {}\n", bytes.len());
        out.write_all(header.as_bytes())?;
        out.write_all(&bytes)?;
        sent += (header.len() + bytes.len()) as u64;
    }
    out.write_all(b"end\n")?;
    out.flush()?;
    Ok(sent + 4)
}

/// What a receiver stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Received {
    /// Objects stored.
    pub objects: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// Reads a stream and stores its objects once every one checks out against its name (a blob's
/// bytes hash to it; a generation's canonical encoding does): one that does not stores nothing.
pub fn receive(store: &Store, mut input: impl BufRead) -> Result<Received, TransferError> {
    let mut blobs: Vec<Vec<u8>> = Vec::new();
    let mut generations: Vec<Generation> = Vec::new();
    let mut received = Received::default();
    let mut n = 0;
    loop {
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            return Err(TransferError::CutShort(received.objects));
        }
        n += 1;
        let line = line.strip_suffix('\n').unwrap_or(&line);
        if line == "end" {
            break;
        }
        let (object, len) = parse_object(line, n)?;
        let Some(len) = len else {
            return Err(TransferError::Format {
                line: n,
                text: crate::text::escape(line).into_owned(),
                expected: "a length after the object's name",
            });
        };
        if len > MAX_OBJECT {
            return Err(TransferError::TooLarge(object));
        }
        let mut bytes = Vec::with_capacity(len as usize);
        (&mut input).take(len).read_to_end(&mut bytes)?;
        if bytes.len() as u64 != len {
            return Err(TransferError::CutShort(received.objects));
        }
        match object {
            Object::Blob(hash) => {
                let actual = BlobHash::of(&bytes);
                if actual != hash {
                    return Err(TransferError::Mismatch {
                        object,
                        actual: actual.to_string(),
                    });
                }
                received.bytes += len;
                blobs.push(bytes);
            }
            Object::Generation(id) => {
                let actual = GenerationId::of(&bytes);
                let parsed = serde_json::from_slice::<Generation>(&bytes).ok();
                let canonical = parsed
                    .as_ref()
                    .and_then(|g| g.canonical_bytes().ok())
                    .is_some_and(|c| c == bytes);
                if actual != id || !canonical {
                    return Err(TransferError::Mismatch {
                        object,
                        actual: if canonical {
                            actual.to_string()
                        } else {
                            "(not a generation's canonical encoding)".into()
                        },
                    });
                }
                received.bytes += len;
                generations.extend(parsed);
            }
        }
        received.objects += 1;
    }
    // One pack for the lot, then one sync: received objects are durable when this returns.
    store.put_blobs_deferred(blobs.iter().map(|b| (b.as_slice(), true)))?;
    for g in &generations {
        store.put_generation(g)?;
    }
    store.sync()?;
    Ok(received)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is sent is received whole, checked; a byte changed on the way stores nothing; the
    /// want list names only what the receiver lacks.
    #[test]
    fn objects_travel_checked() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (from, to) = (
            Store::open(a.path()).unwrap(),
            Store::open(b.path()).unwrap(),
        );
        let one = from.put_blob(b"one", false).unwrap();
        let two = from.put_blob(b"two", false).unwrap();
        to.put_blob(b"one", false).unwrap();
        let wanted = [Object::Blob(one), Object::Blob(two)];
        let mut list = Vec::new();
        write_list(&mut list, &wanted).unwrap();
        let asked = read_list(list.as_slice()).unwrap();
        assert_eq!(missing(&to, &asked), [Object::Blob(two)]);

        let mut stream = Vec::new();
        let sent = send(&from, &[Object::Blob(two)], &mut stream).unwrap();
        assert_eq!(sent, stream.len() as u64);
        let mut damaged = stream.clone();
        let at = damaged.len() - 6;
        damaged[at] ^= 1;
        assert!(matches!(
            receive(&to, damaged.as_slice()),
            Err(TransferError::Mismatch { .. })
        ));
        assert!(!to.has_blob(&two), "nothing stored");
        assert!(matches!(
            receive(&to, &stream[..stream.len() - 4]),
            Err(TransferError::CutShort(1))
        ));
        let got = receive(&to, stream.as_slice()).unwrap();
        assert_eq!(
            got,
            Received {
                objects: 1,
                bytes: 3
            }
        );
        assert_eq!(to.blob(&two).unwrap(), b"two");
    }
}
