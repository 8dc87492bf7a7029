//! The registry, over the OCI distribution API (`oci-client`): a blocking face on its async
//! client, with a runtime of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use mesh_lib::statement::Signed;
use mesh_lib::{BlobHash, Store};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use crate::{
    keep_blob, keep_generation, Artifact, Descriptor, Fetched, Piece, Publication, RegistryError,
    MANIFEST_TYPE, MAX_OBJECT,
};

/// An OCI client for `options`: plain HTTP when insecure, the timeouts, rustls with ring (not
/// the default provider: a long C build, installed once per process). Uploads go in one
/// request each: the objects are small, the registry's limit on open uploads is not ours to
/// find.
pub(crate) fn oci_client(options: &Options) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::new(ClientConfig {
        protocol: if options.insecure {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        read_timeout: Some(options.timeout),
        connect_timeout: Some(options.timeout),
        use_monolithic_push: true,
        ..ClientConfig::default()
    })
}

/// How the registry is spoken to.
#[derive(Debug, Clone)]
pub struct Options {
    /// Plain HTTP (a registry on a private network or loopback with no TLS).
    pub insecure: bool,
    /// How long a connection, or a read, may take.
    pub timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            insecure: false,
            timeout: Duration::from_secs(30),
        }
    }
}

/// A repository of a registry.
pub struct Registry {
    client: Client,
    host: String,
    repository: String,
    runtime: tokio::runtime::Runtime,
    /// The credentials, for the requests oci-client does not make (a delete).
    auth: RegistryAuth,
    /// Which credentials were tried, from where (or where none were found): said when the
    /// registry refuses them.
    lookup: crate::credentials::Lookup,
    /// Plain HTTP.
    insecure: bool,
    /// For those requests.
    http: reqwest::Client,
    /// The bearer token deletes carried last, and when it was asked for.
    delete_token: Mutex<Option<(std::time::Instant, Option<String>)>>,
    /// The digests known to be in the registry (asked, or sent, by this process).
    known: Mutex<BTreeSet<String>>,
    /// A lock per digest (or object tag) being asked for or sent: two threads never send the
    /// same blob at once. A Distribution registry writes a blob's link in place, so one
    /// thread's HEAD while another's upload of that blob commits may read it half-written
    /// and answer 500.
    busy: Mutex<BTreeMap<String, Arc<Mutex<()>>>>,
}

/// How often an ask (a HEAD, which changes nothing) is tried when the registry answers with a
/// server error, and how long the first wait between tries is (doubled each time).
const ASKS: u32 = 4;
const FIRST_WAIT: Duration = Duration::from_millis(100);

/// Whether `e` is the registry failing for now (5xx) rather than an answer.
fn server_error(e: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::OciDistributionError as E;
    match e {
        E::ServerError { code, .. } => *code >= 500,
        E::RequestError(r) => r.status().is_some_and(|s| s.is_server_error()),
        _ => false,
    }
}

/// What a push sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Sent {
    /// The store's objects (the contents a generation references) sent: those the registry
    /// lacked.
    pub objects: usize,
    /// Objects the registry had already.
    pub objects_reused: usize,
    /// Blobs sent (objects, signatures, generations and their deltas, configs).
    pub blobs: usize,
    /// Bytes sent (blobs and manifests).
    pub bytes: u64,
}

impl std::ops::AddAssign for Sent {
    fn add_assign(&mut self, other: Self) {
        self.objects += other.objects;
        self.objects_reused += other.objects_reused;
        self.blobs += other.blobs;
        self.bytes += other.bytes;
    }
}

impl Registry {
    /// The repository `target` (`HOST[:PORT]/REPOSITORY`), with the docker config's
    /// credentials for its host when it has some.
    pub fn new(target: &str, options: &Options) -> Result<Self, RegistryError> {
        let (host, repository) = target
            .split_once('/')
            .filter(|(h, r)| {
                !h.is_empty()
                    && !r.is_empty()
                    && (h.contains('.') || h.contains(':') || *h == "localhost")
            })
            .ok_or_else(|| RegistryError::Reference(target.to_owned()))?;
        if repository
            .bytes()
            .any(|b| !(b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/".contains(&b)))
        {
            return Err(RegistryError::Reference(target.to_owned()));
        }
        let client = oci_client(options);
        // Two workers: a push sends many small requests from several threads at once (see
        // `mesh_fleet::publish`), each thread waiting on its own.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let lookup = crate::credentials::docker_login(host);
        let auth = match &lookup.login {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        };
        // reqwest's client sets its timers up in the runtime it is built in.
        let entered = runtime.enter();
        let http = reqwest::Client::builder()
            .connect_timeout(options.timeout)
            .timeout(options.timeout)
            .build()
            .map_err(|e| RegistryError::Registry {
                registry: host.to_owned(),
                what: "setting up HTTP".into(),
                why: mesh_lib::text::chain(&e),
            })?;
        drop(entered);
        let registry = Self {
            client,
            host: host.to_owned(),
            repository: repository.to_owned(),
            runtime,
            auth: auth.clone(),
            lookup,
            insecure: options.insecure,
            http,
            delete_token: Mutex::new(None),
            known: Mutex::new(BTreeSet::new()),
            busy: Mutex::new(BTreeMap::new()),
        };
        let reference = registry.reference("latest");
        registry.runtime.block_on(
            registry
                .client
                .store_auth_if_needed(reference.resolve_registry(), &auth),
        );
        Ok(registry)
    }

    /// `HOST/REPOSITORY`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.host, self.repository)
    }

    fn reference(&self, tag: &str) -> Reference {
        Reference::with_tag(self.host.clone(), self.repository.clone(), tag.to_owned())
    }

    fn failed(
        &self,
        what: impl Into<String>,
    ) -> impl FnOnce(oci_client::errors::OciDistributionError) -> RegistryError + '_ {
        let what = what.into();
        move |e| {
            let why = mesh_lib::text::chain(&e);
            if denies(&e) || refuses_credentials(&why) {
                return self.denied(what, why);
            }
            RegistryError::Registry {
                registry: self.name(),
                what,
                why,
            }
        }
    }

    /// The registry refused access while doing `what`, answering `message`: in the words
    /// every path says it with ([`crate::Denied`]).
    fn denied(&self, what: impl Into<String>, message: String) -> RegistryError {
        RegistryError::Denied {
            repository: self.name(),
            what: what.into(),
            denied: Box::new(crate::Denied::new(&self.host, &self.lookup, message)),
        }
    }

    /// The lock of `key` (a digest or an object's tag): held while it is asked for and sent.
    fn claim(&self, key: &str) -> Arc<Mutex<()>> {
        self.busy
            .lock()
            .expect("not poisoned")
            .entry(key.to_owned())
            .or_default()
            .clone()
    }

    /// `ask` (a request that changes nothing), tried again after a server error.
    fn ask<T, F>(&self, ask: impl Fn() -> F) -> Result<T, oci_client::errors::OciDistributionError>
    where
        F: std::future::Future<Output = Result<T, oci_client::errors::OciDistributionError>>,
    {
        let mut wait = FIRST_WAIT;
        let mut tries = 1;
        loop {
            match self.runtime.block_on(ask()) {
                Err(e) if tries < ASKS && server_error(&e) => {
                    std::thread::sleep(wait);
                    wait *= 2;
                    tries += 1;
                }
                done => return done,
            }
        }
    }

    /// Sends the blobs of `piece` the registry lacks (each asked for first).
    fn upload_blobs(&self, piece: &Piece, sent: &mut Sent) -> Result<(), RegistryError> {
        let reference = self.reference("latest");
        for layer in &piece.layers {
            let digest = &layer.descriptor.digest;
            let lock = self.claim(digest);
            let _held = lock.lock().expect("not poisoned");
            if self.known.lock().expect("not poisoned").contains(digest) {
                continue;
            }
            let there = self
                .ask(|| self.client.blob_exists(&reference, digest))
                .map_err(self.failed(format!("asking for {digest}")))?;
            if !there {
                self.runtime
                    .block_on(
                        self.client
                            .push_blob(&reference, layer.bytes.clone(), digest),
                    )
                    .map_err(self.failed(format!(
                        "sending {}",
                        layer.descriptor.object().unwrap_or("the config")
                    )))?;
                sent.blobs += 1;
                sent.bytes += layer.bytes.len() as u64;
            }
            self.known
                .lock()
                .expect("not poisoned")
                .insert(digest.clone());
        }
        Ok(())
    }

    fn put_manifest(&self, tag: &str, bytes: &[u8]) -> Result<(), RegistryError> {
        self.runtime
            .block_on(self.client.push_manifest_raw(
                &self.reference(tag),
                bytes.to_vec(),
                MANIFEST_TYPE.parse().expect("a header value"),
            ))
            .map_err(self.failed(format!("tagging {tag}")))?;
        Ok(())
    }

    /// Sends `piece`, the artifact of object `hash`, unless the registry has it (asked for by
    /// its tag first): what was sent (`objects` 1), or `objects_reused` 1.
    pub fn upload_object(&self, hash: &BlobHash, piece: &Piece) -> Result<Sent, RegistryError> {
        let tag = crate::object_tag(hash);
        let lock = self.claim(&tag);
        let _held = lock.lock().expect("not poisoned");
        let mut sent = Sent::default();
        if self.known.lock().expect("not poisoned").contains(&tag) || self.has_tag(&tag)? {
            sent.objects_reused = 1;
        } else {
            self.upload_blobs(piece, &mut sent)?;
            self.put_manifest(&tag, &piece.manifest)?;
            sent.objects = 1;
            sent.bytes += piece.manifest.len() as u64;
        }
        self.known.lock().expect("not poisoned").insert(tag);
        Ok(sent)
    }

    /// Sends the blobs of the node's artifact of `publication` the registry lacks (its
    /// objects sent before, each with [`Registry::upload_object`]); the tag is not moved.
    pub fn upload_node(&self, publication: &Publication) -> Result<Sent, RegistryError> {
        let mut sent = Sent {
            objects_reused: publication.present,
            ..Sent::default()
        };
        self.upload_blobs(&publication.node, &mut sent)?;
        Ok(sent)
    }

    /// Whether the registry has a manifest tagged `tag` (HEAD).
    fn has_tag(&self, tag: &str) -> Result<bool, RegistryError> {
        let reference = self.reference(tag);
        match self.ask(|| {
            self.client
                .fetch_manifest_digest(&reference, &RegistryAuth::Anonymous)
        }) {
            Ok(_) => Ok(true),
            Err(e) if denies(&e) => Err(self.failed(format!("asking for {tag}"))(e)),
            Err(
                oci_client::errors::OciDistributionError::ImageManifestNotFoundError(_)
                | oci_client::errors::OciDistributionError::RegistryError { .. },
            ) => Ok(false),
            Err(oci_client::errors::OciDistributionError::ServerError { code: 404, .. }) => {
                Ok(false)
            }
            Err(e) => Err(self.failed(format!("asking for {tag}"))(e)),
        }
    }

    /// Points `tag` at the node's artifact of `publication` (whose blobs were uploaded): the
    /// bytes sent, none when the tag points at it already.
    pub fn tag(&self, tag: &str, publication: &Publication) -> Result<u64, RegistryError> {
        let digest = crate::sha256(&publication.node.manifest);
        if let Ok(a) = self.artifact(tag) {
            if a.digest == digest {
                return Ok(0);
            }
        }
        self.put_manifest(tag, &publication.node.manifest)?;
        Ok(publication.node.manifest.len() as u64)
    }

    /// Withdraws `tag`: it names [`crate::withdrawal`], no generation, from now on, with
    /// `statement` (a signed withdrawal: a node judges it as any statement).
    pub fn withdraw(&self, tag: &str, statement: &Signed) -> Result<(), RegistryError> {
        let reference = self.reference("latest");
        let digest = crate::sha256(crate::EMPTY);
        self.runtime
            .block_on(
                self.client
                    .push_blob(&reference, crate::EMPTY.to_vec(), &digest),
            )
            .map_err(self.failed(format!("withdrawing {tag}")))?;
        self.put_manifest(tag, &crate::withdrawal(Some(statement)))
    }

    /// Points `tag` at `artifact` again, with a new statement (its layers are there already:
    /// only the manifest is sent). Putting back the old manifest as it was would not do: its
    /// statement is older than the one the nodes accepted since, and they refuse it.
    pub fn restate(
        &self,
        tag: &str,
        artifact: &Artifact,
        statement: &Signed,
    ) -> Result<(), RegistryError> {
        self.put_manifest(tag, &artifact.restated(statement))
    }

    /// The artifact tagged `tag`.
    pub fn artifact(&self, tag: &str) -> Result<Artifact, RegistryError> {
        let bytes = self.manifest_bytes(tag)?;
        Artifact::parse(
            &format!("{}:{tag}", self.name()),
            &bytes,
            crate::sha256(&bytes),
        )
    }

    /// The manifest tagged `tag`, its bytes as the registry has them.
    fn manifest_bytes(&self, tag: &str) -> Result<Vec<u8>, RegistryError> {
        let reference = self.reference(tag);
        let (bytes, digest) = self
            .runtime
            .block_on(self.client.pull_manifest_raw(
                &reference,
                &RegistryAuth::Anonymous,
                &[MANIFEST_TYPE],
            ))
            .map_err(|e| match &e {
                oci_client::errors::OciDistributionError::ImageManifestNotFoundError(_) => {
                    RegistryError::NoTag(format!("{}:{tag}", self.name()))
                }
                oci_client::errors::OciDistributionError::RegistryError { envelope, .. }
                    if envelope
                        .errors
                        .iter()
                        .any(|e| format!("{:?}", e.code).contains("ManifestUnknown")) =>
                {
                    RegistryError::NoTag(format!("{}:{tag}", self.name()))
                }
                _ => self.failed(format!("reading tag {tag}"))(e),
            })?;
        if crate::sha256(&bytes) != digest && !digest.is_empty() {
            return Err(RegistryError::Invalid {
                reference: format!("{}:{tag}", self.name()),
                why: format!("its manifest does not hash to {digest}"),
            });
        }
        Ok(bytes.to_vec())
    }

    /// A blob's bytes as the registry stores them, checked against its digest and bounded.
    fn blob(&self, descriptor: &Descriptor) -> Result<Vec<u8>, RegistryError> {
        let what = descriptor.object().unwrap_or(&descriptor.digest).to_owned();
        if descriptor.size > MAX_OBJECT {
            return Err(RegistryError::Invalid {
                reference: self.name(),
                why: format!("{what} is larger than 1 GiB"),
            });
        }
        let mut out = Bounded {
            bytes: Vec::new(),
            limit: descriptor.size,
        };
        let reference = self.reference("latest");
        let oci = oci_client::manifest::OciDescriptor {
            media_type: descriptor.media_type.clone(),
            digest: descriptor.digest.clone(),
            size: descriptor.size as i64,
            ..Default::default()
        };
        self.runtime
            .block_on(self.client.pull_blob(&reference, &oci, &mut out))
            .map_err(|e| match e {
                // The bytes the registry sent are not the ones the manifest names.
                oci_client::errors::OciDistributionError::DigestError(
                    oci_client::errors::DigestError::VerificationError { expected, actual },
                ) => RegistryError::Mismatch {
                    object: what.clone(),
                    expected,
                    actual,
                },
                e => self.failed(format!("fetching {what}"))(e),
            })?;
        Ok(out.bytes)
    }

    /// The signatures the artifact carries (armored), and the bytes they took: read first, so
    /// that the generation is judged before anything else is fetched.
    pub fn signatures(&self, artifact: &Artifact) -> Result<(Vec<String>, u64), RegistryError> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for layer in artifact.signature_layers() {
            if layer.object() != Some(&format!("signature {}", artifact.generation)) {
                continue;
            }
            let got = self.blob(layer)?;
            bytes += got.len() as u64;
            out.push(String::from_utf8_lossy(&got).into_owned());
        }
        Ok((out, bytes))
    }

    /// Fetches into `store` what it lacks of the artifact's generation: the generation (as a
    /// delta from the one named, when the store has it; checked against its id), then each
    /// object it references that the store lacks, by its tag (checked against its name,
    /// stored as it arrives). Call it once the signatures were judged.
    pub fn fetch(&self, store: &Store, artifact: &Artifact) -> Result<Fetched, RegistryError> {
        let mut fetched = Fetched::default();
        let generation = self.fetch_generation(store, artifact, &mut fetched)?;
        let lacking: Vec<BlobHash> = generation
            .blobs()
            .into_iter()
            .filter(|h| !store.has_blob(h))
            .collect();
        for hash in lacking {
            let object = format!("blob {hash}");
            let tag = crate::object_tag(&hash);
            let manifest = self.manifest_bytes(&tag).map_err(|e| match e {
                RegistryError::NoTag(_) => self.lacks(&object),
                e => e,
            })?;
            fetched.bytes += manifest.len() as u64;
            let manifest: crate::Manifest =
                serde_json::from_slice(&manifest).map_err(|e| RegistryError::Invalid {
                    reference: format!("{}:{tag}", self.name()),
                    why: format!("not an OCI manifest: {e}"),
                })?;
            let layer = manifest
                .layers
                .iter()
                .find(|l| l.object() == Some(object.as_str()))
                .ok_or_else(|| self.lacks(&object))?;
            let wire = self.blob(layer)?;
            fetched.bytes += wire.len() as u64;
            keep_blob(store, &hash, layer, wire)?;
            fetched.objects += 1;
        }
        Ok(fetched)
    }

    /// The artifact's generation, fetched into `store` unless it is there (as a delta from a
    /// generation the store has, else whole, else the keyframe and the delta from it; checked
    /// against its id), what it took counted in `fetched`.
    pub fn fetch_generation(
        &self,
        store: &Store,
        artifact: &Artifact,
        fetched: &mut Fetched,
    ) -> Result<mesh_lib::Generation, RegistryError> {
        let id = artifact.generation;
        Ok(if store.has_intact_generation(&id) {
            store.generation(&id)?
        } else {
            // A delta from a generation the store has; else the whole one; else the keyframe
            // and the delta from it.
            let base = artifact
                .deltas()
                .filter(|(base, _)| store.has_intact_generation(base))
                .find_map(|(base, layer)| {
                    let bytes = store.generation(&base).ok()?.canonical_bytes().ok()?;
                    Some((bytes, layer))
                });
            let (layer, dictionary) = match base {
                Some((bytes, layer)) => (layer, Some(bytes)),
                None => {
                    let object = format!("generation {id}");
                    let (full, layer) = artifact.full().ok_or_else(|| self.lacks(&object))?;
                    if full == id {
                        (layer, None)
                    } else {
                        let (_, delta) = artifact
                            .deltas()
                            .find(|(base, _)| *base == full)
                            .ok_or_else(|| self.lacks(&format!("delta {full}")))?;
                        let wire = self.blob(layer)?;
                        fetched.bytes += wire.len() as u64;
                        (delta, Some(crate::keyframe(&full, layer, wire)?))
                    }
                }
            };
            let wire = self.blob(layer)?;
            fetched.bytes += wire.len() as u64;
            fetched.objects += 1;
            keep_generation(store, &id, layer, wire, dictionary.as_deref())?
        })
    }

    /// That the artifact lacks `object`.
    fn lacks(&self, object: &str) -> RegistryError {
        RegistryError::Invalid {
            reference: self.name(),
            why: format!("the artifact lacks {object}"),
        }
    }

    /// The bearer token a delete carries (`None`: basic credentials, or none needed), asked of
    /// the registry once a minute at most: a prune deletes many objects.
    fn delete_token(&self, reference: &Reference) -> Option<String> {
        let mut cached = self.delete_token.lock().expect("not poisoned");
        if let Some((asked, token)) = &*cached {
            if asked.elapsed() < Duration::from_secs(60) {
                return token.clone();
            }
        }
        let token = self
            .runtime
            .block_on(
                self.client
                    .auth(reference, &self.auth, oci_client::RegistryOperation::Push),
            )
            .ok()
            .flatten();
        *cached = Some((std::time::Instant::now(), token.clone()));
        token
    }

    /// Every tag of the repository, page after page.
    pub fn tags(&self) -> Result<Vec<String>, RegistryError> {
        const PAGE: usize = 1000;
        let reference = self.reference("latest");
        let mut out: Vec<String> = Vec::new();
        loop {
            let page = self
                .runtime
                .block_on(self.client.list_tags(
                    &reference,
                    &RegistryAuth::Anonymous,
                    Some(PAGE),
                    out.last().map(String::as_str),
                ))
                .map_err(self.failed("listing the tags"))?;
            let n = page.tags.len();
            out.extend(page.tags);
            if n < PAGE {
                return Ok(out);
            }
        }
    }

    /// Deletes the manifest `tag` names (by its digest, as the distribution API asks), and so
    /// the tag. One already gone is no error. A registry that does not allow deleting (the
    /// Distribution registry unless `storage.delete.enabled`) is named as that.
    pub fn delete(&self, tag: &str) -> Result<(), RegistryError> {
        let reference = self.reference(tag);
        let digest = match self.runtime.block_on(
            self.client
                .fetch_manifest_digest(&reference, &RegistryAuth::Anonymous),
        ) {
            Ok(d) => d,
            Err(oci_client::errors::OciDistributionError::ImageManifestNotFoundError(_)) => {
                return Ok(())
            }
            Err(e) => return Err(self.failed(format!("asking for {tag}"))(e)),
        };
        let failed = |why: String| RegistryError::Registry {
            registry: self.name(),
            what: format!("deleting {tag}"),
            why,
        };
        let token = self.delete_token(&reference);
        let scheme = if self.insecure { "http" } else { "https" };
        let url = format!(
            "{scheme}://{}/v2/{}/manifests/{digest}",
            self.host, self.repository
        );
        let mut request = self.http.delete(url);
        request = match (&token, &self.auth) {
            (Some(token), _) => request.bearer_auth(token),
            (None, RegistryAuth::Basic(user, password)) => request.basic_auth(user, Some(password)),
            (None, _) => request,
        };
        let answer = self
            .runtime
            .block_on(async { request.send().await })
            .map_err(|e| failed(mesh_lib::text::chain(&e)))?;
        match answer.status().as_u16() {
            200..=299 | 404 => Ok(()),
            405 => Err(failed(
                "the registry does not allow deleting manifests (the Distribution registry: \
                 storage.delete.enabled)"
                    .into(),
            )),
            code @ (401 | 403) => {
                let said = self.runtime.block_on(answer.text()).unwrap_or_default();
                Err(self.denied(
                    format!("deleting {tag}"),
                    format!("HTTP {code}: {}", mesh_lib::text::escape(said.trim())),
                ))
            }
            code => {
                let said = self.runtime.block_on(answer.text()).unwrap_or_default();
                Err(failed(format!(
                    "HTTP {code}: {}",
                    mesh_lib::text::escape(said.trim())
                )))
            }
        }
    }
}

/// A writer that takes at most `limit` bytes: a registry that sends more than the descriptor
/// says is cut off, not given the memory.
struct Bounded {
    bytes: Vec<u8>,
    limit: u64,
}

impl tokio::io::AsyncWrite for Bounded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if (self.bytes.len() + buf.len()) as u64 > self.limit {
            return Poll::Ready(Err(std::io::Error::other(
                "the registry sent more bytes than the manifest says",
            )));
        }
        self.bytes.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Whether the OCI client's error is the registry refusing access: 401 or 403, or its
/// `UNAUTHORIZED` / `DENIED` codes.
fn denies(e: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode};
    match e {
        E::UnauthorizedError { .. } | E::AuthenticationFailure(_) => true,
        E::ServerError { code, .. } => matches!(code, 401 | 403),
        E::RequestError(r) => r.status().is_some_and(|s| matches!(s.as_u16(), 401 | 403)),
        E::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)),
        _ => false,
    }
}

/// Whether a registry's answer, in words, refuses the credentials (or their absence): 401,
/// 403, or its `UNAUTHORIZED` / `DENIED` codes.
pub(crate) fn refuses_credentials(why: &str) -> bool {
    let lower = why.to_ascii_lowercase();
    // A status code as a number of its own: never the digits of a port or a digest
    // (`127.0.0.1:40309` holds 403).
    let status = |code: &str| {
        lower.match_indices(code).any(|(at, _)| {
            let before = lower[..at].chars().next_back();
            let after = lower[at + code.len()..].chars().next();
            !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == ':')
                && !after.is_some_and(|c| c.is_ascii_alphanumeric())
        })
    };
    status("401")
        || status("403")
        || ["unauthorized", "not authorized", "denied", "authentication"]
            .iter()
            .any(|w| lower.contains(w))
}

#[cfg(test)]
mod tests {
    /// A registry's refusal of the credentials is told from its other errors.
    #[test]
    fn a_refusal_of_credentials_is_seen() {
        for refused in [
            "Not authorized: url http://r/v2/x/manifests/a",
            "Registry error: UNAUTHORIZED: authentication required",
            "Server error: code 403: DENIED: requested access to the resource is denied",
        ] {
            assert!(super::refuses_credentials(refused), "{refused}");
        }
        assert!(!super::refuses_credentials("connection refused"));
        // A port or a digest holding the digits is no status.
        assert!(!super::refuses_credentials(
            "error sending request for url (http://127.0.0.1:40309/v2/x/manifests/1): tcp connect error: Connection refused"
        ));
        assert!(!super::refuses_credentials("blob sha256:a4031b: not found"));
        assert!(super::refuses_credentials(
            "HTTP status client error (401 Unauthorized)"
        ));
        assert!(super::refuses_credentials(
            "Server error: code 403: forbidden"
        ));
    }

    /// A registry failing for now (5xx) is asked again; an answer (4xx, not found) is not.
    #[test]
    fn only_a_server_error_is_asked_again() {
        use oci_client::errors::OciDistributionError as E;
        let code = |code| E::ServerError {
            code,
            url: "http://r/v2/x/blobs/sha256:0".into(),
            message: String::new(),
        };
        assert!(super::server_error(&code(500)));
        assert!(super::server_error(&code(503)));
        assert!(!super::server_error(&code(404)));
        assert!(!super::server_error(&code(401)));
        assert!(!super::server_error(&E::ImageManifestNotFoundError(
            "x".into()
        )));
    }
}
