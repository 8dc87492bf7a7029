//! Moving store objects from one node's store to another's, the `nix copy` way: the sender asks
//! which of a generation's objects the receiver lacks, and sends only those; the receiver checks
//! every object against its name before it stores it, and keeps every object that arrived whole
//! and checked even when the stream is cut after it (the next transfer sends only the rest).
//!
//! Both are line-oriented text on a byte stream (an SSH channel in practice):
//!
//! ```text
//! want list, and the answer (the missing ones):   generation b3:HEX
//!                                                 blob b3:HEX
//! object stream:                                  blob b3:HEX LEN\n<LEN bytes>
//!                                                 generation b3:HEX LEN\n<LEN bytes: canonical JSON>
//!                                                 blob b3:HEX LEN zstd\n<LEN bytes, zstd>
//!                                                 generation b3:HEX LEN zstd\n<…>
//!                                                 generation b3:HEX LEN delta b3:BASE\n<LEN bytes>
//!                                                 end\n
//! ```
//!
//! What a receiver has checked is written down as it arrives, before it is stored: each object,
//! as it decodes, appended to a file of its own under `STORE/incoming/` (the stream's own raw
//! form). The objects are stored in one pack at the end of the stream — whole or cut short — and
//! the file goes; a receiver killed before (the node's process, not only the link) leaves the
//! file, and the next transfer's question of what is missing stores what it holds first
//! ([`salvage`]). So a copy cut anywhere costs the next one only the object that was arriving.
//!
//! An object's bytes travel as they are, compressed (`zstd`), or — a generation — as a
//! **delta** from a generation the receiver has (`delta BASE`: zstd with BASE's canonical
//! encoding as its dictionary, so that the files, containers and rules a new generation shares
//! with the one in force cost next to nothing). Whatever the encoding, what is checked against
//! the name is what it decodes to; ids are of the canonical encoding, never of what travelled.

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

/// How an object's bytes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As they are.
    Raw,
    /// Compressed with zstd.
    Zstd,
    /// A generation, compressed with zstd against the canonical encoding of a generation the
    /// receiver has.
    Delta(GenerationId),
}

/// The compression level: a generation or a configuration file is small, and the link is the
/// cost.
const LEVEL: i32 = 9;

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
    #[error("{object} does not match its name (its bytes hash to {actual}): it was not stored")]
    Mismatch {
        /// The object.
        object: Object,
        /// What its bytes hash to.
        actual: String,
    },
    /// The stream ended before its `end`.
    #[error("the stream ended before its end, after {0} whole object(s), which were kept")]
    CutShort(usize),
    /// More than [`MAX_OBJECT`] bytes announced, or decoded.
    #[error("{0} announces or decodes to more than {MAX_OBJECT} bytes: it was not stored")]
    TooLarge(Object),
    /// A delta from a generation the receiver does not have, or bytes that do not decode.
    #[error("{object} cannot be decoded: {why}; it was not stored")]
    Undecodable {
        /// The object.
        object: Object,
        /// Why.
        why: String,
    },
    /// Reading or writing the stream failed.
    #[error("the stream: {0}")]
    Io(#[from] std::io::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The largest object a stream may announce (1 GiB): a bound on what a receiver allocates.
pub const MAX_OBJECT: u64 = 1 << 30;

/// An object's line: the object, its length when it has one, and how its bytes travel.
fn parse_object(line: &str, n: usize) -> Result<(Object, Option<u64>, Encoding), TransferError> {
    let bad = |expected| TransferError::Format {
        line: n,
        text: crate::text::escape(line).into_owned(),
        expected,
    };
    let words: Vec<&str> = line.split(' ').collect();
    let (kind, name) = (
        words.first().copied().unwrap_or(""),
        words.get(1).copied().unwrap_or(""),
    );
    let object = match kind {
        "generation" => Object::Generation(
            name.parse()
                .map_err(|_| bad("a generation id after `generation`"))?,
        ),
        "blob" => Object::Blob(name.parse().map_err(|_| bad("a blob hash after `blob`"))?),
        _ => return Err(bad("`generation ID` or `blob HASH`")),
    };
    let len = match words.get(2) {
        Some(len) => Some(len.parse().map_err(|_| bad("a length in bytes"))?),
        None => None,
    };
    let encoding = match (&words[words.len().min(3)..], object) {
        ([], _) => Encoding::Raw,
        (["zstd"], _) => Encoding::Zstd,
        (["delta", base], Object::Generation(_)) => Encoding::Delta(
            base.parse()
                .map_err(|_| bad("a generation id after `delta`"))?,
        ),
        _ => {
            return Err(bad(
                "`zstd` or `delta BASE` (a generation's) after the length",
            ))
        }
    };
    Ok((object, len, encoding))
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
            (object, None, Encoding::Raw) => out.push(object),
            _ => {
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

/// The objects of `wanted` that `store` lacks, in order — once what a receiver cut short left
/// written down is stored ([`salvage`]).
pub fn missing(store: &Store, wanted: &[Object]) -> Vec<Object> {
    // What cannot be salvaged is asked for again: nothing is lost by failing here.
    let _best_effort = salvage(store);
    wanted
        .iter()
        .copied()
        .filter(|o| match o {
            Object::Generation(id) => !store.has_generation(id),
            Object::Blob(hash) => !store.has_blob(hash),
        })
        .collect()
}

/// Writes the stream of `objects` read from `store`, each as it is; the bytes written.
pub fn send(store: &Store, objects: &[Object], out: &mut impl Write) -> Result<u64, TransferError> {
    let each: Vec<(Object, Encoding)> = objects.iter().map(|o| (*o, Encoding::Raw)).collect();
    send_encoded(store, &each, out)
}

/// How a sender that the receiver understands (`mesh store serve` 2 and later) sends `object`:
/// a generation as a delta from `base` when the sender has it, else compressed; a blob
/// compressed.
pub fn encoding_for(store: &Store, object: Object, base: Option<GenerationId>) -> Encoding {
    match (object, base) {
        (Object::Generation(id), Some(base)) if base != id && store.has_generation(&base) => {
            Encoding::Delta(base)
        }
        _ => Encoding::Zstd,
    }
}

/// An object's bytes, read from `store`.
fn bytes_of(store: &Store, object: Object) -> Result<Vec<u8>, TransferError> {
    Ok(match object {
        Object::Generation(id) => canonical(store, &id)?,
        Object::Blob(hash) => store.blob(&hash)?,
    })
}

fn canonical(store: &Store, id: &GenerationId) -> Result<Vec<u8>, TransferError> {
    store.generation(id)?.canonical_bytes().map_err(|e| {
        TransferError::Store(StoreError::Io {
            op: "encoding",
            path: store.root().to_owned(),
            source: std::io::Error::other(e),
        })
    })
}

/// `bytes` compressed, with `dictionary` (a generation's canonical encoding) when given.
fn compress(bytes: &[u8], dictionary: Option<&[u8]>) -> std::io::Result<Vec<u8>> {
    let mut c = match dictionary {
        Some(d) => zstd::bulk::Compressor::with_dictionary(LEVEL, d)?,
        None => zstd::bulk::Compressor::new(LEVEL)?,
    };
    c.compress(bytes)
}

/// Writes the stream of `objects` read from `store`, each encoded as it says (a compressed
/// object that would be no smaller goes as it is); the bytes written.
pub fn send_encoded(
    store: &Store,
    objects: &[(Object, Encoding)],
    out: &mut impl Write,
) -> Result<u64, TransferError> {
    let mut sent = 0u64;
    for (o, encoding) in objects {
        let bytes = bytes_of(store, *o)?;
        let dictionary = match encoding {
            Encoding::Delta(base) => Some(canonical(store, base)?),
            _ => None,
        };
        let packed = match encoding {
            Encoding::Raw => None,
            _ => Some(compress(&bytes, dictionary.as_deref())?).filter(|p| p.len() < bytes.len()),
        };
        let (header, body) = match (&packed, encoding) {
            (None, _) => (format!("{o} {}\n", bytes.len()), &bytes),
            (Some(p), Encoding::Delta(base)) => (format!("{o} {} delta {base}\n", p.len()), p),
            (Some(p), _) => (format!("{o} {} zstd\n", p.len()), p),
        };
        out.write_all(header.as_bytes())?;
        out.write_all(body)?;
        sent += (header.len() + body.len()) as u64;
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
    /// Their bytes (decoded).
    pub bytes: u64,
}

/// The objects checked and not yet stored.
#[derive(Default)]
struct Checked {
    blobs: Vec<Vec<u8>>,
    generations: Vec<Generation>,
    size: u64,
}

/// Past this many bytes checked, they are stored before more are read.
const KEEP_EVERY: u64 = 64 << 20;

impl Checked {
    /// Stores what was checked: one pack for the blobs, then one sync.
    fn keep(&mut self, store: &Store) -> Result<(), TransferError> {
        if self.blobs.is_empty() && self.generations.is_empty() {
            return Ok(());
        }
        store.put_blobs_deferred(self.blobs.iter().map(|b| (b.as_slice(), true)))?;
        for g in &self.generations {
            store.put_generation(g)?;
        }
        store.sync()?;
        *self = Checked::default();
        Ok(())
    }
}

/// Reads a stream and stores each object once it checks out against its name (a blob's bytes
/// hash to it; a generation's canonical encoding does, whatever way it travelled). On any error
/// — an object that does not check out, a stream cut short, a read that failed or timed out —
/// the objects that arrived whole and checked before it are kept; and should this process be
/// killed instead, they are in its file under `STORE/incoming/` for [`salvage`].
pub fn receive(store: &Store, mut input: impl BufRead) -> Result<Received, TransferError> {
    let mut incoming = Incoming::open(store)?;
    let mut checked = Checked::default();
    let mut received = Received::default();
    let result = read_objects(
        store,
        &mut input,
        &mut checked,
        &mut received,
        &mut incoming,
    );
    let kept = checked.keep(store);
    if kept.is_ok() {
        incoming.done();
    }
    result?;
    kept?;
    Ok(received)
}

/// Stores what receivers that were killed left written down under `STORE/incoming/` (each file
/// whose writer is gone: it no longer holds the file's lock), and removes each file once its
/// objects are stored: the objects stored and their bytes.
pub fn salvage(store: &Store) -> Result<Received, TransferError> {
    let dir = store.root().join(INCOMING);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Received::default());
    };
    let mut total = Received::default();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(file) = std::fs::File::open(&path) else {
            continue;
        };
        // The writer holds its file's lock for as long as it receives.
        if !matches!(
            rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive),
            Ok(())
        ) {
            continue;
        }
        let mut checked = Checked::default();
        let mut received = Received::default();
        let mut none = Incoming::none();
        // A file cut short ends where the kill came: what came before it is kept.
        let _cut_short = read_objects(
            store,
            &mut std::io::BufReader::new(&file),
            &mut checked,
            &mut received,
            &mut none,
        );
        checked.keep(store)?;
        std::fs::remove_file(&path)?;
        total.objects += received.objects;
        total.bytes += received.bytes;
    }
    Ok(total)
}

/// Where receivers write down what they checked, under the store.
const INCOMING: &str = "incoming";

/// A receiver's file of what it checked, locked while it writes.
struct Incoming {
    file: Option<(std::fs::File, std::path::PathBuf)>,
}

impl Incoming {
    fn open(store: &Store) -> Result<Self, TransferError> {
        let dir = store.root().join(INCOMING);
        crate::atomic::create_dir_all(&dir)?;
        let file = tempfile::Builder::new()
            .prefix("stream-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .tempfile_in(&dir)?;
        let (file, path) = file.keep().map_err(|e| e.error)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .map_err(std::io::Error::from)?;
        Ok(Self {
            file: Some((file, path)),
        })
    }

    /// One that writes nothing down (a salvage's own reading).
    fn none() -> Self {
        Self { file: None }
    }

    /// Writes down one checked object, as the stream carries it raw.
    fn write(&mut self, object: Object, bytes: &[u8]) -> Result<(), TransferError> {
        if let Some((file, _)) = &mut self.file {
            let mut record = format!("{object} {}\n", bytes.len()).into_bytes();
            record.extend_from_slice(bytes);
            file.write_all(&record)?;
        }
        Ok(())
    }

    /// The objects are stored: the file goes.
    fn done(mut self) {
        if let Some((_, path)) = self.file.take() {
            let _gone_already = std::fs::remove_file(path);
        }
    }
}

fn read_objects(
    store: &Store,
    input: &mut impl BufRead,
    checked: &mut Checked,
    received: &mut Received,
    incoming: &mut Incoming,
) -> Result<(), TransferError> {
    let mut n = 0;
    loop {
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            return Err(TransferError::CutShort(received.objects));
        }
        n += 1;
        let line = line.strip_suffix('\n').unwrap_or(&line);
        if line == "end" {
            return Ok(());
        }
        let (object, len, encoding) = parse_object(line, n)?;
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
        let mut wire = Vec::with_capacity(len as usize);
        (&mut *input).take(len).read_to_end(&mut wire)?;
        if wire.len() as u64 != len {
            return Err(TransferError::CutShort(received.objects));
        }
        let bytes = decode(store, object, encoding, wire)?;
        match object {
            Object::Blob(hash) => {
                let actual = BlobHash::of(&bytes);
                if actual != hash {
                    return Err(TransferError::Mismatch {
                        object,
                        actual: actual.to_string(),
                    });
                }
                incoming.write(object, &bytes)?;
                received.bytes += bytes.len() as u64;
                checked.size += bytes.len() as u64;
                checked.blobs.push(bytes);
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
                incoming.write(object, &bytes)?;
                received.bytes += bytes.len() as u64;
                checked.size += bytes.len() as u64;
                checked.generations.extend(parsed);
            }
        }
        received.objects += 1;
        if checked.size > KEEP_EVERY {
            checked.keep(store)?;
        }
    }
}

/// An object's bytes from what travelled.
fn decode(
    store: &Store,
    object: Object,
    encoding: Encoding,
    wire: Vec<u8>,
) -> Result<Vec<u8>, TransferError> {
    let undecodable = |why: String| TransferError::Undecodable { object, why };
    let dictionary = match encoding {
        Encoding::Raw => return Ok(wire),
        Encoding::Zstd => None,
        Encoding::Delta(base) => Some(
            canonical(store, &base)
                .map_err(|e| undecodable(format!("its base {base} is not here ({e})")))?,
        ),
    };
    let decoder = zstd::stream::read::Decoder::with_dictionary(
        wire.as_slice(),
        dictionary.as_deref().unwrap_or(&[]),
    );
    let mut out = Vec::new();
    decoder
        .map_err(|e| undecodable(e.to_string()))?
        .take(MAX_OBJECT + 1)
        .read_to_end(&mut out)
        .map_err(|e| undecodable(e.to_string()))?;
    if out.len() as u64 > MAX_OBJECT {
        return Err(TransferError::TooLarge(object));
    }
    Ok(out)
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
            receive(&to, &stream[..stream.len() - 5]),
            Err(TransferError::CutShort(0))
        ));
        assert!(!to.has_blob(&two), "a part of an object is not kept");
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

    fn generation_of(files: usize, changed: &str) -> Generation {
        let mut g: Generation = serde_json::from_value(serde_json::json!({
            "format": 1, "node": "n", "mode": "managed",
            "settings": { "ports": {}, "private_network": { "range": "10.0.0.0/24", "address": "10.0.0.1", "hub": false } },
            "modules": { "m": "taken" }, "files": {}, "containers": {}, "openings": [], "units": {},
            "firewall": { "guard": { "nftables": [] }, "base": null }
        }))
        .unwrap();
        for i in 0..files {
            let content = if i == 0 {
                changed.to_owned()
            } else {
                format!("file {i}")
            };
            g.files.insert(
                crate::TargetPath::new(&format!("/etc/f{i:03}")).unwrap(),
                serde_json::from_value(serde_json::json!({
                    "module": "m", "blob": BlobHash::of(content.as_bytes()), "size": content.len(),
                    "mode": "0644", "owner": "root", "group": "root", "state": { "kind": "managed" }
                }))
                .unwrap(),
            );
        }
        g
    }

    /// A generation sent as a delta from one the receiver has costs a small part of its
    /// encoding, and decodes to the very bytes its id names; blobs travel compressed; a delta
    /// from a generation the receiver lacks is refused, naming it.
    #[test]
    fn a_generation_travels_as_a_delta() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (from, to) = (
            Store::open(a.path()).unwrap(),
            Store::open(b.path()).unwrap(),
        );
        let old = from.put_generation(&generation_of(200, "one")).unwrap();
        let new = from.put_generation(&generation_of(200, "two")).unwrap();
        let blob = from
            .put_blob(&b"a configuration line\n".repeat(200), false)
            .unwrap();
        let size = from
            .generation(&new)
            .unwrap()
            .canonical_bytes()
            .unwrap()
            .len();

        let mut without_base = Vec::new();
        let objects = [(
            Object::Generation(new),
            encoding_for(&from, Object::Generation(new), Some(old)),
        )];
        send_encoded(&from, &objects, &mut without_base).unwrap();
        assert!(
            without_base.len() < size / 20,
            "{} bytes for a generation of {size}",
            without_base.len()
        );
        assert!(matches!(
            receive(&to, without_base.as_slice()),
            Err(TransferError::Undecodable { .. })
        ));
        assert!(!to.has_generation(&new));

        let mut base = Vec::new();
        send_encoded(
            &from,
            &[(Object::Generation(old), Encoding::Zstd)],
            &mut base,
        )
        .unwrap();
        receive(&to, base.as_slice()).unwrap();
        receive(&to, without_base.as_slice()).unwrap();
        assert_eq!(
            to.generation(&new).unwrap().canonical_bytes().unwrap(),
            from.generation(&new).unwrap().canonical_bytes().unwrap()
        );

        let mut packed = Vec::new();
        let sent =
            send_encoded(&from, &[(Object::Blob(blob), Encoding::Zstd)], &mut packed).unwrap();
        assert!(sent < 200, "{sent} bytes for 4 KB of repeated lines");
        assert_eq!(receive(&to, packed.as_slice()).unwrap().bytes, 4200);
        assert!(to.has_blob(&blob));
    }

    /// A stream cut after some objects: those that arrived whole and checked are kept, the one
    /// cut is not; a tampered object after good ones stores the good ones only.
    #[test]
    fn what_arrived_whole_is_kept() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (from, to) = (
            Store::open(a.path()).unwrap(),
            Store::open(b.path()).unwrap(),
        );
        let hashes: Vec<BlobHash> = (0..5)
            .map(|i| {
                from.put_blob(format!("object {i}").repeat(100).as_bytes(), false)
                    .unwrap()
            })
            .collect();
        let objects: Vec<Object> = hashes.iter().map(|h| Object::Blob(*h)).collect();
        let mut stream = Vec::new();
        send(&from, &objects, &mut stream).unwrap();
        let cut = stream.len() / 2;
        assert!(matches!(
            receive(&to, &stream[..cut]),
            Err(TransferError::CutShort(2))
        ));
        let kept: Vec<bool> = hashes.iter().map(|h| to.has_blob(h)).collect();
        assert_eq!(kept, [true, true, false, false, false]);
        let mut want = Vec::new();
        write_list(&mut want, &objects).unwrap();
        assert_eq!(missing(&to, &read_list(want.as_slice()).unwrap()).len(), 3);

        let (c, _) = (tempfile::tempdir().unwrap(), ());
        let other = Store::open(c.path()).unwrap();
        let mut tampered = stream.clone();
        let at = stream.len() - 30;
        tampered[at] ^= 1;
        assert!(matches!(
            receive(&other, tampered.as_slice()),
            Err(TransferError::Mismatch { .. })
        ));
        let kept: Vec<bool> = hashes.iter().map(|h| other.has_blob(h)).collect();
        assert_eq!(kept, [true, true, true, true, false]);
    }

    /// A receiver killed in the middle of a stream (not only cut off: its process gone, its
    /// memory with it) has written down every object it checked; the next question of what is
    /// missing stores them first, so they are not asked for again — and a file cut short in
    /// the middle of an object gives back the objects before it.
    #[test]
    fn what_a_killed_receiver_checked_is_salvaged() {
        let (from_dir, to_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let from = Store::open(from_dir.path()).unwrap();
        let to = Store::open(to_dir.path()).unwrap();
        let objects: Vec<Object> = (0..4)
            .map(|i| {
                Object::Blob(
                    from.put_blob(format!("object {i}").repeat(1000).as_bytes(), false)
                        .unwrap(),
                )
            })
            .collect();
        let mut stream = Vec::new();
        send(&from, &objects, &mut stream).unwrap();
        // Three objects read and written down, then the process dies in the fourth's bytes.
        let mut incoming = Incoming::open(&to).unwrap();
        let cut = stream.len() - 3000;
        let mut checked = Checked::default();
        let mut received = Received::default();
        let read = read_objects(
            &to,
            &mut &stream[..cut],
            &mut checked,
            &mut received,
            &mut incoming,
        );
        assert!(matches!(read, Err(TransferError::CutShort(3))), "{read:?}");
        drop((checked, incoming));
        assert_eq!(missing(&to, &objects), objects[3..].to_vec());
        assert!(
            std::fs::read_dir(to.root().join(INCOMING))
                .unwrap()
                .next()
                .is_none(),
            "the file went once its objects were stored"
        );
        // A receiver still at work is left to finish.
        let _working = Incoming::open(&to).unwrap();
        assert_eq!(salvage(&to).unwrap(), Received::default());
    }
}
