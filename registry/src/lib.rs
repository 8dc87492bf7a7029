//! Generations as OCI artifacts: what `mesh push` publishes to a registry (the Distribution
//! registry, Harbor, a cloud's) and what `mesh pull` fetches on a node.
//!
//! One artifact per node, tagged with the node's name, small whatever the node's size:
//!
//! ```text
//! manifest (application/vnd.oci.image.manifest.v1+json, artifactType application/vnd.mesh.generation.v1)
//!   annotations: dev.mesh.generation = b3:…   dev.mesh.node = NAME
//!                org.opencontainers.image.revision = the source revision (when known)
//!   config: the empty descriptor ({})
//!   layers, each annotated dev.mesh.object:
//!     application/vnd.mesh.signature.v1            `signature b3:…`: each signature (sshsig, armored)
//!     application/vnd.mesh.generation.v1[+zstd]    `generation b3:K`: a canonical encoding, the
//!                                                  generation's own or its keyframe's (below)
//!     application/vnd.mesh.generation.delta.v1     `delta b3:BASE`: the generation, zstd against
//!                                                  BASE — the keyframe, and the generation the
//!                                                  tag named before (a node that runs either
//!                                                  fetches a few hundred bytes)
//! ```
//!
//! The keyframe: a push keeps the whole generation the node's artifact carried before (already
//! in the registry: not sent again) while the new generation's delta from it stays under a
//! quarter of the generation's own size, and sends only that delta; past it, the generation is
//! published whole and becomes the keyframe. A node's artifact then costs a push its manifest,
//! its signature and a delta or two, whatever the node's size. A node that has neither base (a
//! new one) fetches the keyframe — checked against its name, used only as the dictionary — and
//! the delta; the result is checked against the signed id as always.
//!
//! and every object a generation references as an artifact of its own, tagged `b3-HEX` (its
//! name), one layer (`application/vnd.mesh.blob.v1[+zstd]`): a node asks for the objects its
//! store lacks by name, so what it fetches grows with what changed, not with the generation's
//! size. A push asks the registry for each object's tag first (HEAD) and sends only those it
//! lacks; a second push of a generation that changed one file sends that file, the generation
//! and its signature. The manifests hold no time: the same content publishes the same digests.
//! Objects no generation a tag names uses any more stay until `mesh prune` deletes them
//! ([`prune`]); the registry's garbage collection then frees their blobs.
//!
//! Invariants of a fetch: nothing is trusted for what the registry says it is. The signatures are
//! fetched first and handed to the caller to judge before anything else is fetched; the
//! generation is stored only if its canonical encoding hashes to the signed id; a blob only if
//! its bytes hash to a name the generation references; each blob is stored as it arrives and
//! checks out, so a fetch cut short keeps what arrived whole and the next fetches the rest.
#![deny(missing_docs)]

mod client;
mod credentials;
pub mod prune;
pub mod tags;

use std::collections::BTreeMap;
use std::io::Read;

use mesh_lib::statement::Signed;
use mesh_lib::{BlobHash, GenerationId, Store};
use serde::{Deserialize, Serialize};

pub use client::{Options, Registry, Sent};

/// The tag of the artifact holding object `hash`.
pub fn object_tag(hash: &BlobHash) -> String {
    format!("b3-{}", hash.hex())
}
pub use credentials::{docker_login, Denied, Lookup};

/// The artifact's type.
pub const ARTIFACT_TYPE: &str = "application/vnd.mesh.generation.v1";
/// A signature layer's media type.
pub const SIGNATURE_TYPE: &str = "application/vnd.mesh.signature.v1";
/// A generation layer's media type (`+zstd` when compressed).
pub const GENERATION_TYPE: &str = "application/vnd.mesh.generation.v1";
/// A generation delta's media type.
pub const DELTA_TYPE: &str = "application/vnd.mesh.generation.delta.v1";
/// An object artifact's type.
pub const OBJECT_ARTIFACT_TYPE: &str = "application/vnd.mesh.object.v1";
/// The artifact type of a withdrawn node tag ([`withdrawal`]): it names no generation.
pub const WITHDRAWN_TYPE: &str = "application/vnd.mesh.withdrawn.v1";
/// A blob layer's media type (`+zstd` when compressed).
pub const BLOB_TYPE: &str = "application/vnd.mesh.blob.v1";
/// The OCI manifest's media type.
pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The empty config's media type, and its bytes.
pub const EMPTY_TYPE: &str = "application/vnd.oci.empty.v1+json";
pub(crate) const EMPTY: &[u8] = b"{}";

/// The annotation naming the generation.
pub const GENERATION_KEY: &str = "dev.mesh.generation";
/// The annotation naming the node.
pub const NODE_KEY: &str = "dev.mesh.node";
/// The annotation naming a layer's object.
pub const OBJECT_KEY: &str = "dev.mesh.object";
/// The annotation holding the node's statement ([`mesh_lib::statement::Signed`], as JSON): which
/// node, which generation, its sequence and expiry, signed. A node judges it before it fetches
/// anything else.
pub const STATEMENT_KEY: &str = "dev.mesh.statement";
/// The OCI annotation for the source revision.
pub const REVISION_KEY: &str = "org.opencontainers.image.revision";

/// The largest object a fetch accepts (as [`mesh_lib::transfer::MAX_OBJECT`]).
pub const MAX_OBJECT: u64 = mesh_lib::transfer::MAX_OBJECT;

/// The compression level of the objects: they are small, and the link is the cost.
const LEVEL: i32 = 9;

/// A keyframe is kept while a generation's delta from it is at most this share (1/N) of the
/// generation's own encoding; past it, the generation is published whole, the new keyframe.
const KEYFRAME_SHARE: usize = 4;

/// Why a push or a fetch did not go through.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A reference that is not `REGISTRY/REPOSITORY`.
    #[error("`{0}` is not a registry and repository (write HOST[:PORT]/REPOSITORY)")]
    Reference(String),
    /// The registry answered with an error, or could not be reached.
    #[error("the registry {registry}: {what}: {why}")]
    Registry {
        /// The registry.
        registry: String,
        /// What was being done.
        what: String,
        /// Its answer.
        why: String,
    },
    /// The registry refused access: the docker config's credentials, or their absence
    /// ([`Denied`], in the words a switch fetching an image says it with).
    #[error("{what} in {repository}: {denied}")]
    Denied {
        /// The repository (`HOST/REPOSITORY`).
        repository: String,
        /// What was being done.
        what: String,
        /// The refusal.
        denied: Box<Denied>,
    },
    /// The registry has no artifact under that tag.
    #[error("{0}: no such tag")]
    NoTag(String),
    /// The tag names no generation: a rollout that stopped withdrew it ([`withdrawal`]).
    #[error(
        "{reference}: withdrawn (a rollout stopped at this node's wave, and its tag had named no \
         generation before); the next push or rollout names one again"
    )]
    Withdrawn {
        /// The tag.
        reference: String,
        /// The statement that withdrew it ([`STATEMENT_KEY`]'s value), if it carries one.
        statement: Option<String>,
    },
    /// What the registry gave is not an artifact of the mesh's, or does not check out.
    #[error("{reference}: {why}")]
    Invalid {
        /// The artifact.
        reference: String,
        /// What is wrong with it.
        why: String,
    },
    /// An object whose bytes do not hash to what names it (its name, or the digest its
    /// manifest gives): not stored.
    #[error("the registry's {object} does not match what names it: expected {expected}, got {actual}; it was not stored")]
    Mismatch {
        /// The object, as the manifest names it.
        object: String,
        /// What its bytes should hash to: its name, or the manifest's digest of them.
        expected: String,
        /// What they hash to.
        actual: String,
    },
    /// The local store.
    #[error(transparent)]
    Store(#[from] mesh_lib::store::StoreError),
    /// Encoding or decoding an object.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A descriptor of a blob in the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Its media type.
    pub media_type: String,
    /// `sha256:HEX` of its bytes as stored.
    pub digest: String,
    /// Its size as stored.
    pub size: u64,
    /// What it is.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    fn of(media_type: &str, bytes: &[u8], object: Option<String>) -> Self {
        Self {
            media_type: media_type.to_owned(),
            digest: sha256(bytes),
            size: bytes.len() as u64,
            annotations: object
                .map(|o| BTreeMap::from([(OBJECT_KEY.to_owned(), o)]))
                .unwrap_or_default(),
        }
    }

    /// The object it carries, as its annotation names it.
    pub fn object(&self) -> Option<&str> {
        self.annotations.get(OBJECT_KEY).map(String::as_str)
    }
}

/// An OCI image manifest, as the mesh writes it (fields sorted: the same artifact encodes to
/// the same bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// [`MANIFEST_TYPE`].
    #[serde(default)]
    pub media_type: Option<String>,
    /// [`ARTIFACT_TYPE`].
    #[serde(default)]
    pub artifact_type: Option<String>,
    /// The empty config.
    pub config: Descriptor,
    /// The objects.
    pub layers: Vec<Descriptor>,
    /// The generation, the node, the revision.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// A node's artifact, as read from the registry.
#[derive(Debug, Clone)]
pub struct Artifact {
    /// Its manifest.
    pub manifest: Manifest,
    /// The manifest's digest.
    pub digest: String,
    /// The manifest's bytes, as the registry has them.
    pub bytes: Vec<u8>,
    /// The generation it carries, as its annotation says (checked against the signature and
    /// the generation's bytes before anything is stored).
    pub generation: GenerationId,
}

impl Artifact {
    /// Reads a manifest: the artifact, if it is one of the mesh's.
    pub fn parse(reference: &str, bytes: &[u8], digest: String) -> Result<Self, RegistryError> {
        let invalid = |why: String| RegistryError::Invalid {
            reference: reference.to_owned(),
            why,
        };
        let manifest: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| invalid(format!("not an OCI manifest: {e}")))?;
        if manifest.artifact_type.as_deref() == Some(WITHDRAWN_TYPE) {
            return Err(RegistryError::Withdrawn {
                reference: reference.to_owned(),
                statement: manifest.annotations.get(STATEMENT_KEY).cloned(),
            });
        }
        if manifest.artifact_type.as_deref() != Some(ARTIFACT_TYPE) {
            return Err(invalid(format!(
                "not a mesh generation (its artifact type is {})",
                manifest.artifact_type.as_deref().unwrap_or("none")
            )));
        }
        let generation = manifest
            .annotations
            .get(GENERATION_KEY)
            .ok_or_else(|| invalid(format!("no {GENERATION_KEY} annotation")))?
            .parse()
            .map_err(|e| invalid(format!("its {GENERATION_KEY} annotation: {e}")))?;
        Ok(Self {
            manifest,
            digest,
            bytes: bytes.to_vec(),
            generation,
        })
    }

    /// The delta layers, each from a generation a node may have: (its base, the layer).
    pub fn deltas(&self) -> impl Iterator<Item = (GenerationId, &Descriptor)> {
        self.manifest.layers.iter().filter_map(|l| {
            let base = l.object()?.strip_prefix("delta ")?.parse().ok()?;
            (l.media_type == DELTA_TYPE).then_some((base, l))
        })
    }

    /// The whole generation it carries: the artifact's own, or the keyframe its deltas are
    /// from (the layer, and the generation it holds).
    pub fn full(&self) -> Option<(GenerationId, &Descriptor)> {
        self.manifest.layers.iter().find_map(|l| {
            let id = l.object()?.strip_prefix("generation ")?.parse().ok()?;
            l.media_type.starts_with(GENERATION_TYPE).then_some((id, l))
        })
    }

    /// The statement it carries (`None`: none; `Some(Err)`: one that is not a statement's
    /// form).
    pub fn statement(&self) -> Option<Result<Signed, String>> {
        self.manifest
            .annotations
            .get(STATEMENT_KEY)
            .map(|text| parse_statement(text))
    }

    /// A copy of it whose statement is `statement` (the same layers: nothing to upload but the
    /// manifest).
    pub fn restated(&self, statement: &Signed) -> Vec<u8> {
        let mut manifest = self.manifest.clone();
        manifest.annotations.insert(
            STATEMENT_KEY.to_owned(),
            serde_json::to_string(statement).expect("a statement encodes"),
        );
        serde_json::to_vec(&manifest).expect("a manifest encodes")
    }

    /// The source revision it was published from, if known.
    pub fn revision(&self) -> Option<&str> {
        self.manifest
            .annotations
            .get(REVISION_KEY)
            .map(String::as_str)
    }

    /// The layers that carry signatures.
    pub fn signature_layers(&self) -> impl Iterator<Item = &Descriptor> {
        self.manifest
            .layers
            .iter()
            .filter(|l| l.media_type == SIGNATURE_TYPE)
    }
}

/// The manifest a withdrawn node tag names: an artifact of [`WITHDRAWN_TYPE`] with the empty
/// config and one empty layer (a registry refuses a manifest with none), no generation. A tag
/// that named nothing before a rollout moved it cannot be put back where it was, and deleting a
/// manifest is not something every registry allows: it is made to name this instead, which a
/// pull reads as nothing to do ([`RegistryError::Withdrawn`]) — once it judged the withdrawal's
/// statement (a withdrawal without one, or with a stale one, is refused: anyone who can write
/// to the registry could otherwise freeze a node).
pub fn withdrawal(statement: Option<&Signed>) -> Vec<u8> {
    let empty = Descriptor::of(EMPTY_TYPE, EMPTY, None);
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(MANIFEST_TYPE.to_owned()),
        artifact_type: Some(WITHDRAWN_TYPE.to_owned()),
        config: empty.clone(),
        layers: vec![empty],
        annotations: statement
            .map(|s| {
                BTreeMap::from([(
                    STATEMENT_KEY.to_owned(),
                    serde_json::to_string(s).expect("a statement encodes"),
                )])
            })
            .unwrap_or_default(),
    };
    serde_json::to_vec(&manifest).expect("a manifest encodes")
}

/// A statement as an annotation holds it.
pub fn parse_statement(text: &str) -> Result<Signed, String> {
    serde_json::from_str(text).map_err(|e| format!("its statement is not one: {e}"))
}

/// `sha256:HEX` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// An object's bytes as stored in the registry: compressed when that is smaller; its media
/// type.
fn encode(base_type: &str, bytes: &[u8]) -> std::io::Result<(String, Vec<u8>)> {
    let packed = zstd::bulk::compress(bytes, LEVEL)?;
    if packed.len() < bytes.len() {
        Ok((format!("{base_type}+zstd"), packed))
    } else {
        Ok((base_type.to_owned(), bytes.to_vec()))
    }
}

/// An object's bytes from what the registry stored, bounded by [`MAX_OBJECT`].
fn decode(media_type: &str, wire: Vec<u8>) -> std::io::Result<Vec<u8>> {
    if !media_type.ends_with("+zstd") {
        return Ok(wire);
    }
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(wire.as_slice())?
        .take(MAX_OBJECT + 1)
        .read_to_end(&mut out)?;
    if out.len() as u64 > MAX_OBJECT {
        return Err(std::io::Error::other("it decodes to more than 1 GiB"));
    }
    Ok(out)
}

#[derive(Clone)]
/// One blob to publish: its descriptor, and its bytes as the registry stores them.
pub struct Layer {
    /// Its descriptor.
    pub descriptor: Descriptor,
    /// Its bytes as stored.
    pub bytes: Vec<u8>,
}

#[derive(Clone)]
/// A manifest to publish, and the blobs it names (its config first).
pub struct Piece {
    /// The manifest's bytes.
    pub manifest: Vec<u8>,
    /// Its blobs.
    pub layers: Vec<Layer>,
}

#[derive(Clone)]
/// What a node's generation publishes: the node's artifact, and an artifact per object.
pub struct Publication {
    /// The node's artifact (signatures, the generation, its delta).
    pub node: Piece,
    /// The statement it carries.
    pub statement: Option<Signed>,
    /// Each object the generation references that the registry may lack: its name, and its
    /// artifact (tag `b3-HEX`).
    pub objects: Vec<(BlobHash, Piece)>,
    /// How many objects it references that the registry holds for sure: those of the
    /// generation the node's tag names now (a push sends every object before it moves a tag),
    /// neither asked for nor sent again.
    pub present: usize,
}

fn manifest_of(
    artifact_type: &str,
    layers: Vec<Layer>,
    annotations: BTreeMap<String, String>,
) -> Result<Piece, RegistryError> {
    let config = Layer {
        descriptor: Descriptor::of(EMPTY_TYPE, EMPTY, None),
        bytes: EMPTY.to_vec(),
    };
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(MANIFEST_TYPE.to_owned()),
        artifact_type: Some(artifact_type.to_owned()),
        config: config.descriptor.clone(),
        layers: layers.iter().map(|l| l.descriptor.clone()).collect(),
        annotations,
    };
    let bytes = serde_json::to_vec(&manifest).map_err(std::io::Error::other)?;
    let mut all = vec![config];
    all.extend(layers);
    Ok(Piece {
        manifest: bytes,
        layers: all,
    })
}

/// `bytes` compressed with zstd against `dictionary`.
fn delta(bytes: &[u8], dictionary: &[u8]) -> std::io::Result<Vec<u8>> {
    zstd::bulk::Compressor::with_dictionary(LEVEL, dictionary)?.compress(bytes)
}

/// The artifacts of generation `id` for `node`, from `store`: its signatures (at least one:
/// an unsigned generation is not published), the generation whole, or the keyframe (see the
/// crate's doc), and its deltas from the generations `previous` (the node's artifact now) names,
/// and an artifact per object it references.
pub fn publication(
    store: &Store,
    node: &str,
    id: &GenerationId,
    statement: Option<&Signed>,
    revision: Option<&str>,
    previous: Option<&Artifact>,
) -> Result<Publication, RegistryError> {
    let invalid = |why: String| RegistryError::Invalid {
        reference: format!("{node} ({id})"),
        why,
    };
    let Some(statement) = statement else {
        return Err(invalid(
            "no statement names it for the node: sign one (`mesh push --sign`); a node pulls \
             only what a signer it trusts stated for it, with a sequence and an expiry"
                .into(),
        ));
    };
    let mut layers = Vec::new();
    let signatures = store.signatures(id)?;
    if signatures.is_empty() {
        return Err(invalid(
            "the generation has no signature: sign it (`mesh push --sign`, `mesh sign`), a node \
             pulls only what a signer it trusts signed"
                .into(),
        ));
    }
    for (_, armored) in &signatures {
        let bytes = armored.as_bytes().to_vec();
        layers.push(Layer {
            descriptor: Descriptor::of(SIGNATURE_TYPE, &bytes, Some(format!("signature {id}"))),
            bytes,
        });
    }
    let generation = store.generation(id)?;
    // The generation the tag names now, read once: a base of the deltas, and whose objects the
    // registry holds.
    let base = previous.map(|a| a.generation);
    let loaded = match base {
        Some(p) if p != *id && store.has_intact_generation(&p) => Some(store.generation(&p)?),
        _ => None,
    };
    let canonical_of = |g: &GenerationId| -> Result<Option<Vec<u8>>, RegistryError> {
        let bytes = match &loaded {
            _ if g == id => return Ok(None),
            Some(l) if base == Some(*g) => l.canonical_bytes(),
            _ if store.has_intact_generation(g) => store.generation(g)?.canonical_bytes(),
            _ => return Ok(None),
        };
        Ok(Some(bytes.map_err(|e| invalid(e.to_string()))?))
    };
    let canonical = generation
        .canonical_bytes()
        .map_err(|e| invalid(e.to_string()))?;
    let (media, whole) = encode(GENERATION_TYPE, &canonical)?;
    // The keyframe the node's artifact carries now, kept while this generation's delta from it
    // stays small: what a second push sends for a node is then a few hundred bytes.
    let mut deltas: Vec<(GenerationId, Vec<u8>)> = Vec::new();
    let mut full = None;
    if let Some((keyframe, _)) = previous.and_then(Artifact::full) {
        if let Some(dictionary) = canonical_of(&keyframe)? {
            let bytes = delta(&canonical, &dictionary)?;
            if bytes.len() * KEYFRAME_SHARE <= whole.len() {
                let (media, kept) = encode(GENERATION_TYPE, &dictionary)?;
                full = Some((keyframe, media, kept));
                deltas.push((keyframe, bytes));
            }
        }
    }
    if let Some(base) = base {
        if !deltas.iter().any(|(b, _)| *b == base) {
            if let Some(dictionary) = canonical_of(&base)? {
                deltas.push((base, delta(&canonical, &dictionary)?));
            }
        }
    }
    let (full_id, media, bytes) = full.unwrap_or((*id, media, whole));
    layers.push(Layer {
        descriptor: Descriptor::of(&media, &bytes, Some(format!("generation {full_id}"))),
        bytes,
    });
    for (base, bytes) in deltas {
        layers.push(Layer {
            descriptor: Descriptor::of(DELTA_TYPE, &bytes, Some(format!("delta {base}"))),
            bytes,
        });
    }
    let mut annotations = BTreeMap::from([
        (GENERATION_KEY.to_owned(), id.to_string()),
        (NODE_KEY.to_owned(), node.to_owned()),
        (
            STATEMENT_KEY.to_owned(),
            serde_json::to_string(statement).map_err(std::io::Error::other)?,
        ),
    ]);
    if let Some(r) = revision {
        annotations.insert(REVISION_KEY.to_owned(), r.to_owned());
    }
    let node_piece = manifest_of(ARTIFACT_TYPE, layers, annotations)?;
    // The objects of the generation the tag names now are in the registry: a push sends them
    // all before it moves the tag (and a rollout puts back only what was published so).
    let there: std::collections::BTreeSet<BlobHash> = if base == Some(*id) {
        generation.blobs().into_iter().collect()
    } else {
        loaded
            .as_ref()
            .map(|g| g.blobs().into_iter().collect())
            .unwrap_or_default()
    };
    let mut objects = Vec::new();
    let mut present = 0;
    for hash in generation.blobs() {
        if there.contains(&hash) {
            present += 1;
            continue;
        }
        let (media, bytes) = encode(BLOB_TYPE, &store.blob(&hash)?)?;
        let layer = Layer {
            descriptor: Descriptor::of(&media, &bytes, Some(format!("blob {hash}"))),
            bytes,
        };
        objects.push((
            hash,
            manifest_of(OBJECT_ARTIFACT_TYPE, vec![layer], BTreeMap::new())?,
        ));
    }
    Ok(Publication {
        node: node_piece,
        statement: Some(statement.clone()),
        objects,
        present,
    })
}

/// What a fetch stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Fetched {
    /// Objects fetched and stored.
    pub objects: usize,
    /// Bytes received from the registry (as stored there, manifest included).
    pub bytes: u64,
}

/// Checks the generation's bytes against the signed id and stores it: the generation.
fn keep_generation(
    store: &Store,
    id: &GenerationId,
    descriptor: &Descriptor,
    wire: Vec<u8>,
    base: Option<&[u8]>,
) -> Result<mesh_lib::model::Generation, RegistryError> {
    let bytes = match base {
        Some(dictionary) => {
            let mut out = Vec::new();
            zstd::stream::read::Decoder::with_dictionary(wire.as_slice(), dictionary)?
                .take(MAX_OBJECT + 1)
                .read_to_end(&mut out)?;
            out
        }
        None => decode(&descriptor.media_type, wire)?,
    };
    let actual = GenerationId::of(&bytes);
    let parsed = serde_json::from_slice::<mesh_lib::model::Generation>(&bytes).ok();
    let canonical = parsed
        .as_ref()
        .and_then(|g| g.canonical_bytes().ok())
        .is_some_and(|c| c == bytes);
    match parsed {
        Some(g) if actual == *id && canonical => {
            store.put_generation(&g)?;
            Ok(g)
        }
        _ => Err(RegistryError::Mismatch {
            object: format!("generation {id}"),
            expected: id.to_string(),
            actual: if canonical {
                actual.to_string()
            } else {
                format!("{actual} (bytes that are not a generation's canonical encoding)")
            },
        }),
    }
}

/// A keyframe's bytes, checked against its name (a dictionary only: never stored, the
/// generation made from it is checked against the signed id).
fn keyframe(
    id: &GenerationId,
    descriptor: &Descriptor,
    wire: Vec<u8>,
) -> Result<Vec<u8>, RegistryError> {
    let bytes = decode(&descriptor.media_type, wire)?;
    let actual = GenerationId::of(&bytes);
    if actual != *id {
        return Err(RegistryError::Mismatch {
            object: format!("generation {id} (the keyframe)"),
            expected: id.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(bytes)
}

/// Checks a blob's bytes against its name and stores it.
fn keep_blob(
    store: &Store,
    hash: &BlobHash,
    descriptor: &Descriptor,
    wire: Vec<u8>,
) -> Result<u64, RegistryError> {
    let bytes = decode(&descriptor.media_type, wire)?;
    let actual = BlobHash::of(&bytes);
    if actual != *hash {
        return Err(RegistryError::Mismatch {
            object: format!("blob {hash}"),
            expected: hash.to_string(),
            actual: actual.to_string(),
        });
    }
    store.put_blob(&bytes, true)?;
    Ok(bytes.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object that compresses travels compressed and decodes to its bytes; one that does not
    /// travels as it is.
    #[test]
    fn objects_encode_and_decode() {
        let text = b"a configuration line\n".repeat(100);
        let (media, bytes) = encode(BLOB_TYPE, &text).unwrap();
        assert_eq!(media, "application/vnd.mesh.blob.v1+zstd");
        assert!(bytes.len() < text.len() / 10);
        assert_eq!(decode(&media, bytes).unwrap(), text);
        let (media, bytes) = encode(BLOB_TYPE, b"x").unwrap();
        assert_eq!((media.as_str(), bytes.as_slice()), (BLOB_TYPE, &b"x"[..]));
    }

    /// A manifest that is not the mesh's, or names no generation, is refused before anything.
    #[test]
    fn only_the_mesh_s_artifacts_are_read() {
        let id = GenerationId::of(b"g");
        let config = Descriptor::of(EMPTY_TYPE, EMPTY, None);
        let mut m = Manifest {
            schema_version: 2,
            media_type: Some(MANIFEST_TYPE.into()),
            artifact_type: Some(ARTIFACT_TYPE.into()),
            config,
            layers: vec![],
            annotations: BTreeMap::from([(GENERATION_KEY.into(), id.to_string())]),
        };
        let bytes = serde_json::to_vec(&m).unwrap();
        assert_eq!(
            Artifact::parse("r", &bytes, sha256(&bytes))
                .unwrap()
                .generation,
            id
        );
        m.artifact_type = None;
        let bytes = serde_json::to_vec(&m).unwrap();
        let e = Artifact::parse("r", &bytes, sha256(&bytes)).unwrap_err();
        assert!(e.to_string().contains("not a mesh generation"), "{e}");
        // A withdrawn tag names no generation, and says so.
        let bytes = withdrawal(None);
        let e = Artifact::parse("r:node0", &bytes, sha256(&bytes)).unwrap_err();
        assert!(
            matches!(&e, RegistryError::Withdrawn { reference, statement: None } if reference == "r:node0"),
            "{e}"
        );
        let m: Manifest = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            m.layers.len(),
            1,
            "a registry refuses a manifest without layers"
        );
    }
}
