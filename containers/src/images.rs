//! The images a generation needs, fetched through the engine before anything changes.
//!
//! Which ([`needed`]): the image of every container a switch creates (staged or run). One
//! pinned by digest (`REPO[:TAG]@sha256:…`) that the engine has by that digest is used as it
//! is, never fetched again; one it lacks is fetched. One named by a tag alone is never fetched:
//! the bytes a tag names differ from node to node and from day to day, and the generation's id
//! would not say what runs; missing, it refuses the switch as before (pin it, or pull it by
//! hand).
//!
//! How ([`fetch`]): the engine's own pull (`POST /images/create`, bollard's `create_image`)
//! of `REPO@sha256:…` — the tag is not asked, so a tag that moved at the registry changes
//! nothing — with the credentials the docker config keeps for the registry, found as `mesh
//! push` finds them ([`mesh_registry::docker_login`]); at most [`FETCH_JOBS`] images at a
//! time, each reported to the [`Progress`] as its bytes come. One that makes no progress for
//! the stall timeout ([`STALL`] by default) is given up then, not left to the engine's retries.
//! After the pull each image is checked: the engine's `RepoDigests` must list its repository at
//! its digest. A registry that denies access is said in [`mesh_registry::Denied`]'s words, as
//! `mesh push` and `mesh pull` say it.
//!
//! Invariants: a fetch changes only the engine's image store, never a container, a file or
//! the firewall, so a failed fetch leaves the node as it was; it can run on its own, before
//! any switch (a stage). A failure names the image and why, and says whether another try can
//! help ([`FetchFailed::refused`]: a digest the registry does not have, or credentials it
//! denies) or not (a registry that does not answer, a full disk).
//!
//! What was fetched ([`Fetched`], `STATE/images.json`): each image the mesh fetched, by its
//! reference by digest, with the generations that needed it — written after the fetch, so an
//! image is listed only once the mesh has put it on the engine (a crash in between leaves one
//! unlisted: kept for ever, as a found one is, never one removed that the mesh did not fetch).
//! [`gc`] removes, through the engine, the listed images no kept generation references and no
//! container uses; an image the mesh found on the engine is never listed, so never removed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::auth::DockerCredentials;
use bollard::query_parameters::CreateImageOptions;
use futures_util::stream::{FuturesUnordered, StreamExt};
use mesh_lib::image::{ImageDigest, ImageRef};
use mesh_lib::model::{ContainerEntry, ContainerName};
use mesh_lib::GenerationId;
use serde::{Deserialize, Serialize};

use crate::engine::{DockerError, Engine};
use crate::plan::Step;
use crate::progress::{Fetching, Progress};

/// How many images are fetched at once: the engine downloads each one's layers side by side
/// already (three at a time), so a few images keep a link busy without flooding a registry.
pub const FETCH_JOBS: usize = 4;

/// An image a switch fetches (or, for a dry run, would fetch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wanted {
    /// The reference as declared.
    pub image: String,
    /// The digest it is pinned by.
    pub digest: ImageDigest,
    /// The containers that need it.
    pub containers: Vec<String>,
}

/// The images of a switch's creates.
#[derive(Debug, Default)]
pub struct Needed {
    /// Pinned by digest and not on the engine by it: fetched before anything changes.
    pub fetch: Vec<Wanted>,
    /// Named by a tag alone and not on the engine: the switch is refused.
    pub missing: Vec<String>,
}

/// Why an image could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// The registry has no manifest of that digest in the repository; `tagged` is what the
    /// declared tag names there now, when it has one the registry knows.
    NoSuchDigest {
        /// The repository.
        repository: String,
        /// The tag's reference and its digest at the registry.
        tagged: Option<(String, String)>,
    },
    /// The engine fetched it, but its `RepoDigests` does not list the pinned digest.
    Mismatch {
        /// What the engine lists for the image.
        found: Vec<String>,
    },
    /// The registry refused the credentials, or asked for some and none were given: in the
    /// words `mesh push` and `mesh pull` say it with.
    Denied(mesh_registry::Denied),
    /// The registry does not answer.
    Unreachable(String),
    /// The engine's disk is full.
    NoSpace(String),
    /// Another failure of the engine.
    Engine(String),
}

/// An image that could not be fetched, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("image {image}: {}", describe(.digest, .registry, .why))]
pub struct FetchError {
    /// The reference as declared.
    pub image: String,
    /// The digest it is pinned by.
    pub digest: ImageDigest,
    /// The registry asked.
    pub registry: String,
    /// Why.
    pub why: Why,
}

fn describe(digest: &ImageDigest, registry: &str, why: &Why) -> String {
    match why {
        Why::NoSuchDigest {
            repository,
            tagged: Some((tag, theirs)),
        } => format!(
            "the digest does not match: the declaration pins {digest}, the registry {registry} has {tag} at {theirs} and no manifest {digest} in {repository}"
        ),
        Why::NoSuchDigest {
            repository,
            tagged: None,
        } => format!(
            "the digest does not match: the registry {registry} has no manifest {digest} in {repository}"
        ),
        Why::Mismatch { found } => format!(
            "the digest does not match: the declaration pins {digest}, the engine fetched {}",
            if found.is_empty() {
                "an image with no repository digest".to_owned()
            } else {
                found.join(", ")
            }
        ),
        Why::Denied(denied) => denied.to_string(),
        Why::Unreachable(m) => format!("the registry {registry} is not reachable: {m}"),
        Why::NoSpace(m) => format!("the engine's disk is full: {m}"),
        Why::Engine(m) => format!("the engine failed to fetch it: {m}"),
    }
}

impl FetchError {
    /// Whether trying again as it is cannot help: the digest is not there, or the credentials
    /// are denied (exit 2); otherwise the registry, the network or the engine failed (exit 3).
    pub fn refused(&self) -> bool {
        matches!(
            self.why,
            Why::NoSuchDigest { .. } | Why::Mismatch { .. } | Why::Denied(_)
        )
    }
}

/// The images that could not be fetched. When one failed no other fetch was started; those
/// in flight were waited for, and what they fetched stays on the engine (it is used by the
/// next switch, not fetched again).
#[derive(Debug, thiserror::Error)]
#[error("{}{}", .failed.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "), if .fetched.is_empty() { String::new() } else { format!(" (fetched before it, kept on the engine for the next switch: {})", .fetched.join(", ")) })]
pub struct FetchFailed {
    /// Each failure.
    pub failed: Vec<FetchError>,
    /// The images fetched before the failure.
    pub fetched: Vec<String>,
}

impl FetchFailed {
    /// Whether one of the failures is a refusal another try cannot help (see
    /// [`FetchError::refused`]).
    pub fn refused(&self) -> bool {
        self.failed.iter().any(FetchError::refused)
    }
}

/// The images the mesh fetched on this node, kept in `STATE/images.json` (compact JSON, sorted,
/// replaced atomically).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fetched {
    /// Each image, by its reference by digest (`REPOSITORY@sha256:…`).
    pub images: BTreeMap<String, FetchedImage>,
}

/// One image the mesh fetched.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchedImage {
    /// Its digest.
    pub digest: Option<ImageDigest>,
    /// The generations whose switches fetched it.
    pub generations: BTreeSet<GenerationId>,
}

/// Why the list of fetched images could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("the list of images the mesh fetched, {}: {why}", .path.display())]
pub struct FetchedError {
    /// Its file.
    pub path: PathBuf,
    /// Why.
    pub why: String,
}

impl Fetched {
    /// Its file in the state directory.
    pub fn path(state: &Path) -> PathBuf {
        state.join("images.json")
    }

    /// The list (empty when the mesh never fetched).
    pub fn load(state: &Path) -> Result<Self, FetchedError> {
        let path = Self::path(state);
        let fail = |why: String| FetchedError {
            path: path.clone(),
            why,
        };
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(fail(e.to_string())),
        }
    }

    fn save(&self, state: &Path) -> Result<(), FetchedError> {
        let path = Self::path(state);
        let bytes = serde_json::to_vec(self).expect("strings encode");
        mesh_lib::atomic::write_file(&path, &bytes, 0o600).map_err(|e| FetchedError {
            path: path.clone(),
            why: e.to_string(),
        })
    }

    /// Lists `images` (as declared; each in `wanted`) as fetched for `generation`.
    pub fn record(
        state: &Path,
        wanted: &[Wanted],
        images: &[String],
        generation: &GenerationId,
    ) -> Result<(), FetchedError> {
        if images.is_empty() {
            return Ok(());
        }
        let mut list = Self::load(state)?;
        for image in images {
            let Some(w) = wanted.iter().find(|w| &w.image == image) else {
                continue;
            };
            let Some(by_digest) = ImageRef::parse(image).ok().and_then(|r| r.by_digest()) else {
                continue;
            };
            let entry = list.images.entry(by_digest).or_default();
            entry.digest = Some(w.digest.clone());
            entry.generations.insert(*generation);
        }
        list.save(state)
    }
}

/// The references by digest (`REPOSITORY@sha256:…`) of the pinned images of `containers`: what
/// a generation needs of the engine.
pub fn references<'a>(
    containers: impl IntoIterator<Item = &'a ContainerEntry>,
) -> BTreeSet<String> {
    containers
        .into_iter()
        .filter(|c| c.digest.is_some())
        .filter_map(|c| ImageRef::parse(&c.image).ok()?.by_digest())
        .collect()
}

/// What [`gc`] did with the images the mesh fetched.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ImagesGc {
    /// Removed from the engine: no kept generation references them, no container uses them.
    pub removed: Vec<String>,
    /// Kept: a container uses them (the mesh's or anyone's), though no kept generation
    /// references them.
    pub in_use: Vec<String>,
    /// No longer on the engine (removed by someone else): dropped from the list.
    pub gone: Vec<String>,
}

/// Removes through the engine every image the mesh fetched (listed in [`Fetched`]) that no
/// generation of `kept` (each image's reference by digest, [`references`]) needs and no
/// container uses, and drops it from the list. An image the engine refuses to remove (a
/// container it did not list uses it) is kept. The engine is asked only when the list names an
/// image no kept generation needs.
pub fn gc(state: &Path, kept: &BTreeSet<String>) -> Result<ImagesGc, GcError> {
    let mut list = Fetched::load(state)?;
    let unneeded: Vec<String> = list
        .images
        .keys()
        .filter(|r| !kept.contains(*r))
        .cloned()
        .collect();
    let mut report = ImagesGc::default();
    if unneeded.is_empty() {
        return Ok(report);
    }
    let engine = Engine::connect()?;
    let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .all(true)
        .build();
    engine.counted();
    let used: BTreeSet<String> = engine
        .block_on(engine.api().list_containers(Some(options)))
        .map_err(|e| GcError::Engine(e.to_string()))?
        .into_iter()
        .filter_map(|c| c.image_id)
        .collect();
    for reference in unneeded {
        engine.counted();
        let id = match engine.block_on(engine.api().inspect_image(&reference)) {
            Ok(inspect) => inspect.id.unwrap_or_default(),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {
                list.images.remove(&reference);
                report.gone.push(reference);
                continue;
            }
            Err(e) => return Err(GcError::Engine(format!("{reference}: {e}"))),
        };
        if used.contains(&id) {
            report.in_use.push(reference);
            continue;
        }
        engine.counted();
        // Not forced: the engine refuses to remove an image a container uses.
        let removed = engine.block_on(engine.api().remove_image(
            &reference,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        ));
        match removed {
            Ok(_) => {
                list.images.remove(&reference);
                report.removed.push(reference);
            }
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => report.in_use.push(reference),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {
                list.images.remove(&reference);
                report.gone.push(reference);
            }
            Err(e) => {
                // What was removed so far stays removed, and off the list.
                list.save(state)?;
                return Err(GcError::Engine(format!("removing {reference}: {e}")));
            }
        }
    }
    list.save(state)?;
    Ok(report)
}

/// Why the gc of fetched images failed (the generations and blobs are collected before it).
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// The list could not be read or written.
    #[error(transparent)]
    List(#[from] FetchedError),
    /// The engine does not answer.
    #[error(transparent)]
    Docker(#[from] DockerError),
    /// The engine failed.
    #[error("the Docker engine: {0}")]
    Engine(String),
}

/// The images of the creates among `steps` that the engine lacks: the pinned ones to fetch,
/// the tag-only ones missing.
pub fn needed(
    engine: &Engine,
    containers: &BTreeMap<ContainerName, ContainerEntry>,
    steps: &[Step],
) -> Result<Needed, DockerError> {
    let mut users: BTreeMap<&str, (Option<&ImageDigest>, Vec<String>)> = BTreeMap::new();
    for step in steps {
        let (Step::Stage { name } | Step::Run { name, .. }) = step else {
            continue;
        };
        let Some(entry) = containers
            .iter()
            .find(|(n, _)| n.as_str() == name)
            .map(|(_, e)| e)
        else {
            continue;
        };
        users
            .entry(entry.image.as_str())
            .or_insert_with(|| (entry.digest.as_ref(), Vec::new()))
            .1
            .push(name.clone());
    }
    let mut out = Needed::default();
    for (image, (digest, names)) in users {
        match digest {
            Some(digest) => {
                if !has_by_digest(engine, image)? {
                    out.fetch.push(Wanted {
                        image: image.to_owned(),
                        digest: digest.clone(),
                        containers: names,
                    });
                }
            }
            None => {
                if !engine.has_image(image)? {
                    out.missing.push(image.to_owned());
                }
            }
        }
    }
    Ok(out)
}

/// Every image pinned by digest among `containers` (whatever each one's state: a held one's
/// too) that the engine lacks by its digest, and how many it has: what a stage fetches.
pub fn pinned_missing(
    engine: &Engine,
    containers: &BTreeMap<ContainerName, ContainerEntry>,
) -> Result<(Vec<Wanted>, usize), DockerError> {
    let mut users: BTreeMap<&str, (&ImageDigest, Vec<String>)> = BTreeMap::new();
    for (name, entry) in containers {
        if let Some(digest) = &entry.digest {
            users
                .entry(entry.image.as_str())
                .or_insert_with(|| (digest, Vec::new()))
                .1
                .push(name.to_string());
        }
    }
    let mut wanted = Vec::new();
    let mut present = 0;
    for (image, (digest, names)) in users {
        if has_by_digest(engine, image)? {
            present += 1;
        } else {
            wanted.push(Wanted {
                image: image.to_owned(),
                digest: digest.clone(),
                containers: names,
            });
        }
    }
    Ok((wanted, present))
}

/// Whether the engine has the pinned `image` by its digest: its `RepoDigests` lists the
/// repository at the digest (an image of the same tag and other bytes is not it).
fn has_by_digest(engine: &Engine, image: &str) -> Result<bool, DockerError> {
    let Ok(r) = ImageRef::parse(image) else {
        return Ok(false);
    };
    let Some(by_digest) = r.by_digest() else {
        return Ok(false);
    };
    Ok(engine
        .image_repo_digests(&by_digest)?
        .is_some_and(|found| found.iter().any(|d| r.matches_repo_digest(d))))
}

/// How long an image's fetch may make no progress (no byte of a layer, no layer done) before
/// it is given up, by default: the engine's own retries of a registry gone mid-layer take
/// longer than a person waits (some 75 s), and a registry that stops sending is waited for
/// for ever. The same as a deploy's `--io-timeout` (`MESH_IO_TIMEOUT`), which sets it.
pub const STALL: Duration = Duration::from_secs(30);

/// The docker config's credentials for a registry: where they were looked for, and what the
/// engine is given.
struct Login {
    lookup: mesh_registry::Lookup,
    engine: Option<DockerCredentials>,
}

/// Fetches every image of `wanted` through the engine, at most [`FETCH_JOBS`] at a time, each
/// checked against its digest after; one that makes no progress for `stall` is given up (see
/// [`STALL`]); after a failure no other fetch starts, and those in flight are waited for.
/// Returns the images fetched.
pub fn fetch(
    engine: &Engine,
    wanted: &[Wanted],
    progress: &dyn Progress,
    stall: Duration,
) -> Result<Vec<String>, FetchFailed> {
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    // The credentials first, once per registry (a helper is a process to run, up to 10 s).
    let mut plans = Vec::new();
    let mut logins: BTreeMap<String, std::sync::Arc<Login>> = BTreeMap::new();
    for w in wanted {
        let r = ImageRef::parse(&w.image).map_err(|e| FetchFailed {
            failed: vec![FetchError {
                image: w.image.clone(),
                digest: w.digest.clone(),
                registry: String::new(),
                why: Why::Engine(e.to_string()),
            }],
            fetched: Vec::new(),
        })?;
        let login = logins
            .entry(r.credentials_host().to_owned())
            .or_insert_with(|| {
                let lookup = mesh_registry::docker_login(r.credentials_host());
                let engine = lookup
                    .login
                    .clone()
                    .map(|(user, password)| DockerCredentials {
                        username: Some(user),
                        password: Some(password),
                        serveraddress: Some(r.registry().to_owned()),
                        ..Default::default()
                    });
                std::sync::Arc::new(Login { lookup, engine })
            })
            .clone();
        plans.push((w, r, login));
    }
    let names: Vec<&str> = wanted.iter().map(|w| w.image.as_str()).collect();
    progress.fetch_begin(&names);
    let (fetched, failed) = engine.block_on(async {
        let mut queue = plans.iter();
        let mut running = FuturesUnordered::new();
        let mut fetched = Vec::new();
        let mut failed = Vec::new();
        loop {
            while failed.is_empty() && running.len() < FETCH_JOBS {
                let Some((w, r, login)) = queue.next() else {
                    break;
                };
                running.push(
                    async move { (w, fetch_one(engine, w, r, login, progress, stall).await) },
                );
            }
            let Some((w, result)) = running.next().await else {
                break;
            };
            match result {
                Ok(()) => {
                    progress.fetching(&w.image, Fetching::Done);
                    fetched.push(w.image.clone());
                }
                Err(e) => {
                    progress.fetching(&w.image, Fetching::Failed);
                    failed.push(e);
                }
            }
        }
        (fetched, failed)
    });
    progress.fetch_end();
    if failed.is_empty() {
        Ok(fetched)
    } else {
        Err(FetchFailed { failed, fetched })
    }
}

/// One image: pulled by its digest, then checked.
async fn fetch_one(
    engine: &Engine,
    w: &Wanted,
    r: &ImageRef,
    login: &Login,
    progress: &dyn Progress,
    stall: Duration,
) -> Result<(), FetchError> {
    let fail = |why| FetchError {
        image: w.image.clone(),
        digest: w.digest.clone(),
        registry: r.registry().to_owned(),
        why,
    };
    let options = CreateImageOptions {
        from_image: Some(r.repository()),
        tag: Some(w.digest.to_string()),
        ..Default::default()
    };
    engine.counted();
    let mut stream = engine
        .api()
        .create_image(Some(options), None, login.engine.clone());
    // Each layer's bytes, by the engine's id of it: a layer is counted once it says its size.
    let mut layers: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    // Given up when nothing moves for `stall`: the engine's "Retrying in N seconds" is no
    // progress, a layer's bytes growing or a layer's step done is. Dropping the stream closes
    // the request, and the engine cancels the pull: no part of the image stays.
    let mut until = tokio::time::Instant::now() + stall;
    loop {
        let item = match tokio::time::timeout_at(until, stream.next()).await {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(_) => {
                return Err(fail(Why::Unreachable(format!(
                    "no byte of the image came for {} s, and the fetch was given up \
                     (MESH_IO_TIMEOUT sets how long)",
                    stall.as_secs()
                ))))
            }
        };
        let info = match item {
            Ok(info) => info,
            Err(e) => {
                let why = classify(&e, &login.lookup, r.registry());
                let why = match why {
                    Why::NoSuchDigest { .. } => Why::NoSuchDigest {
                        repository: r.repository(),
                        tagged: tagged_at_registry(engine, r, &login.engine).await,
                    },
                    other => other,
                };
                return Err(fail(why));
            }
        };
        let (Some(id), Some(status)) = (info.id, info.status) else {
            continue;
        };
        let before = layers.get(&id).map(|l| l.0);
        if moved(&status, before, &info.progress_detail) {
            until = tokio::time::Instant::now() + stall;
        }
        let detail = info.progress_detail.unwrap_or_default();
        let (current, total) = (
            detail.current.and_then(|c| u64::try_from(c).ok()),
            detail.total.and_then(|t| u64::try_from(t).ok()),
        );
        match status.as_str() {
            "Downloading" => {
                if let (Some(c), Some(t)) = (current, total) {
                    layers.insert(id, (c, t));
                }
            }
            "Download complete" | "Pull complete" | "Already exists" => {
                if let Some(l) = layers.get_mut(&id) {
                    l.0 = l.1;
                }
            }
            _ => continue,
        }
        let (done, total) = layers
            .values()
            .fold((0, 0), |(d, t), (ld, lt)| (d + ld, t + lt));
        progress.fetching(&w.image, Fetching::Bytes { done, total });
    }
    // Checked, not trusted: the engine's record of the image must list the pinned digest.
    let by_digest = r.by_digest().unwrap_or_default();
    let found = engine
        .image_repo_digests_async(&by_digest)
        .await
        .map_err(|e| fail(Why::Engine(e.to_string())))?;
    match found {
        Some(found) if found.iter().any(|d| r.matches_repo_digest(d)) => Ok(()),
        Some(found) => Err(fail(Why::Mismatch { found })),
        None => Err(fail(Why::Mismatch { found: Vec::new() })),
    }
}

/// Whether the engine's line `status` about a layer that had `before` bytes (if counted) is
/// progress: any step of it but a retry, and a download only when its bytes grew.
fn moved(
    status: &str,
    before: Option<u64>,
    detail: &Option<bollard::models::ProgressDetail>,
) -> bool {
    if status.starts_with("Retrying") {
        return false;
    }
    if status != "Downloading" {
        return true;
    }
    let current = detail
        .as_ref()
        .and_then(|d| d.current)
        .and_then(|c| u64::try_from(c).ok());
    match (before, current) {
        (Some(b), Some(c)) => c > b,
        _ => true,
    }
}

/// What the declared tag names at the registry, asked through the engine without fetching
/// anything: a digest that does not match is then named beside the pinned one.
async fn tagged_at_registry(
    engine: &Engine,
    r: &ImageRef,
    login: &Option<DockerCredentials>,
) -> Option<(String, String)> {
    let by_tag = r.by_tag()?;
    engine.counted();
    let inspect = engine
        .api()
        .inspect_registry_image(&by_tag, login.clone())
        .await
        .ok()?;
    let theirs = inspect.descriptor.digest?;
    (Some(theirs.as_str()) != r.digest().map(ImageDigest::as_str)).then_some((by_tag, theirs))
}

/// Why a pull failed, from the engine's answer: its status and the registry's message it
/// passes on.
fn classify(e: &bollard::errors::Error, lookup: &mesh_registry::Lookup, registry: &str) -> Why {
    let (status, message) = match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        } => (Some(*status_code), message.clone()),
        bollard::errors::Error::DockerStreamError { error } => (None, error.clone()),
        other => return Why::Engine(other.to_string()),
    };
    let lower = message.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if has(&["no space left on device", "disk quota exceeded"]) {
        Why::NoSpace(message)
    } else if has(&[
        "unauthorized",
        "authentication required",
        "denied",
        "no basic auth credentials",
        "forbidden",
    ]) {
        Why::Denied(mesh_registry::Denied::new(registry, lookup, message))
    } else if status == Some(404) || has(&["manifest unknown", "not found: manifest"]) {
        Why::NoSuchDigest {
            repository: String::new(),
            tagged: None,
        }
    } else if has(&[
        "connection refused",
        "dial tcp",
        "no such host",
        "i/o timeout",
        "timeout",
        "eof",
        "connection reset",
        "network is unreachable",
        "no route to host",
        "tls",
        "server gave http response",
        "service unavailable",
        "bad gateway",
    ]) {
        Why::Unreachable(message)
    } else {
        Why::Engine(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A docker config lookup that found nothing, or the user `ci`.
    fn lookup(found: bool) -> mesh_registry::Lookup {
        mesh_registry::Lookup {
            login: found.then(|| ("ci".to_owned(), "s3cret".to_owned())),
            said: if found {
                "the user ci for r.example from /c/config.json".into()
            } else {
                "none (there is no docker config at /c/config.json)".into()
            },
        }
    }

    fn server(status: u16, message: &str) -> bollard::errors::Error {
        bollard::errors::Error::DockerResponseServerError {
            status_code: status,
            message: message.to_owned(),
        }
    }

    /// The engine's answers as dockerd gives them (taken from a real Distribution registry):
    /// a digest it does not have, credentials missing or denied, a registry that does not
    /// answer, a full disk, each read as what it is.
    #[test]
    fn the_engines_answers_are_read_as_what_they_are() {
        let unknown = server(404, "manifest for 127.0.0.1:5391/t/busy@sha256:00 not found: manifest unknown: manifest unknown");
        assert!(matches!(
            classify(&unknown, &lookup(false), "r.example"),
            Why::NoSuchDigest { .. }
        ));
        let none = server(500, "Get \"http://127.0.0.1:5392/v2/t/busy/manifests/sha256:a7\": no basic auth credentials");
        assert_eq!(
            classify(&none, &lookup(false), "127.0.0.1:5392"),
            Why::Denied(mesh_registry::Denied {
                registry: "127.0.0.1:5392".into(),
                had_credentials: false,
                tried: "none (there is no docker config at /c/config.json)".into(),
                message: "Get \"http://127.0.0.1:5392/v2/t/busy/manifests/sha256:a7\": no basic auth credentials".into(),
            })
        );
        let wrong = server(500, "unauthorized: authentication required");
        assert!(matches!(
            classify(&wrong, &lookup(true), "r.example"),
            Why::Denied(mesh_registry::Denied {
                had_credentials: true,
                ..
            })
        ));
        let down = server(
            500,
            "Get \"http://127.0.0.1:5399/v2/\": dial tcp 127.0.0.1:5399: connect: connection refused",
        );
        assert!(matches!(
            classify(&down, &lookup(false), "r.example"),
            Why::Unreachable(_)
        ));
        let mid = bollard::errors::Error::DockerStreamError {
            error: "unexpected EOF".into(),
        };
        assert!(matches!(
            classify(&mid, &lookup(false), "r.example"),
            Why::Unreachable(_)
        ));
        let full = bollard::errors::Error::DockerStreamError {
            error: "write /var/lib/docker/tmp/x: no space left on device".into(),
        };
        assert!(matches!(
            classify(&full, &lookup(false), "r.example"),
            Why::NoSpace(_)
        ));
    }

    /// A fetch's time without progress runs on through the engine's retries and a layer's
    /// bytes that stay where they were; it starts again with a byte more or a step done.
    #[test]
    fn only_bytes_or_a_step_are_progress() {
        let at = |current| {
            Some(bollard::models::ProgressDetail {
                current: Some(current),
                total: Some(100),
            })
        };
        assert!(!moved("Retrying in 5 seconds", Some(10), &None));
        assert!(!moved("Downloading", Some(10), &at(10)));
        assert!(moved("Downloading", Some(10), &at(11)));
        assert!(moved("Downloading", None, &at(0)));
        assert!(moved("Download complete", Some(10), &None));
        assert!(moved("Extracting", None, &at(5)));
    }

    /// A digest mismatch and a denial refuse (another try cannot help); an unreachable
    /// registry or a full disk is a failure of the system. The message names the image, the
    /// pinned digest and what the registry has.
    #[test]
    fn refusals_and_failures_are_told_apart() {
        let digest = ImageDigest::try_from(format!("sha256:{}", "a".repeat(64))).unwrap();
        let e = |why| FetchError {
            image: "r.example/app:1@sha256:aaaa".into(),
            digest: digest.clone(),
            registry: "r.example".into(),
            why,
        };
        let theirs = format!("sha256:{}", "b".repeat(64));
        let mismatch = e(Why::NoSuchDigest {
            repository: "r.example/app".into(),
            tagged: Some(("r.example/app:1".into(), theirs.clone())),
        });
        assert!(mismatch.refused());
        let text = mismatch.to_string();
        assert!(
            text.contains(digest.as_str())
                && text.contains(&theirs)
                && text.contains("r.example/app:1"),
            "{text}"
        );
        assert!(e(Why::Denied(mesh_registry::Denied::new(
            "r.example",
            &lookup(true),
            "denied"
        )))
        .refused());
        assert!(!e(Why::Unreachable("refused".into())).refused());
        assert!(!e(Why::NoSpace("full".into())).refused());
        let failed = FetchFailed {
            failed: vec![e(Why::Unreachable("x".into())), mismatch],
            fetched: vec!["r.example/other@sha256:cccc".into()],
        };
        assert!(failed.refused());
        assert!(failed
            .to_string()
            .contains("kept on the engine for the next switch: r.example/other@sha256:cccc"));
    }
}
