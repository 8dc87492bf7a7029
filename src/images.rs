//! `mesh images lock`: the images a fleet names by tag, resolved at their registries and
//! written into the fleet's image lock; with `--check`, whether the lock pins them all, asking
//! no registry.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_compiler::{BuildRequest, Built, KeepIf};
use mesh_lib::image::ImageDigest;
use mesh_lib::image_lock::{ImageLock, Unpinned};
use serde_json::json;

use crate::cli::ImagesLockArgs;
use crate::context::Place;
use crate::failure::{Exit, Failure};

/// The images one lock file answers for: each unpinned reference and the containers that name
/// it (`NODE/CONTAINER`).
#[derive(Default)]
struct Wanted {
    images: BTreeMap<Unpinned, Vec<String>>,
    /// Whether every node of the tree was read: then an entry no node names is stale.
    whole: bool,
}

/// A node's containers named by a tag alone, `(container, image)`, and the lock of its tree:
/// `(lock, node, containers)`.
type Found = (PathBuf, String, Vec<(String, String)>);

/// The containers of `built` named by a tag alone (its images as declared): `(container,
/// image)`.
fn unpinned_of(built: &Built) -> Result<Vec<(String, String)>, Failure> {
    Ok(built.unpinned()?)
}

/// The images each lock file answers for: of one declaration, or of every node of the fleet
/// (grouped by the lock of each node's tree: the fleet file's folder, unless a node is
/// elsewhere).
fn wanted(
    state: &Path,
    place: &Place,
    node: Option<&Path>,
    keep_if: &KeepIf,
) -> Result<BTreeMap<PathBuf, Wanted>, Failure> {
    let mut found: Vec<Found> = Vec::new();
    let whole = node.is_none();
    match node {
        Some(decl) => {
            let record = crate::context::load_record(state, None)?;
            let built = mesh_compiler::build(&BuildRequest {
                node: decl,
                record: record.as_ref().map(|(r, p)| (r, p.as_path())),
                images: None,
                state_dir: state,
                use_cache: true,
                evaluator: crate::context::evaluator(),
                tree: crate::context::tree_rule(),
                per_module: true,
                keep_if: keep_if.clone(),
            })?;
            let lock = mesh_compiler::images_lock_path(decl, crate::context::tree_rule())?;
            found.push((lock, built.summary.node.to_string(), unpinned_of(&built)?));
        }
        None => {
            let fleet = crate::context::load(state, place)?;
            let nodes: Vec<&mesh_fleet::Node> = fleet.nodes.values().collect();
            let built = mesh_fleet::each(&nodes, 8, |n| {
                let record = mesh_fleet::build::recorded(&fleet, n)
                    .map_err(mesh_compiler::MeshDiagnostic::new)?;
                let built = mesh_fleet::build::as_declared(
                    n,
                    record.as_ref().map(|(r, p)| (r, p.as_path())),
                    state,
                    crate::context::evaluator(),
                    keep_if.clone(),
                )?;
                let lock = mesh_compiler::images_lock_path(&n.declaration, &n.tree)?;
                Ok::<_, mesh_compiler::BuildError>((lock, built))
            });
            let mut failed = Vec::new();
            for (n, result) in nodes.iter().zip(built) {
                match result {
                    Ok((lock, built)) => {
                        found.push((lock, n.name.to_string(), unpinned_of(&built)?))
                    }
                    Err(e) => failed.push(format!("{}: {e}", n.name)),
                }
            }
            if !failed.is_empty() {
                return Err(Failure::user(format!(
                    "{} node(s) did not build, so their images are not known:\n  {}",
                    failed.len(),
                    failed.join("\n  ")
                )));
            }
        }
    }
    let mut out: BTreeMap<PathBuf, Wanted> = BTreeMap::new();
    let mut bad = Vec::new();
    for (lock, node, containers) in found {
        let w = out.entry(lock).or_default();
        w.whole = whole;
        for (container, image) in containers {
            match Unpinned::try_from(image) {
                Ok(u) => w
                    .images
                    .entry(u)
                    .or_default()
                    .push(format!("{node}/{container}")),
                Err(e) => bad.push(format!("{node}/{container}: {e}")),
            }
        }
    }
    if !bad.is_empty() {
        return Err(Failure::user(format!(
            "image(s) that are not references a registry answers for:\n  {}",
            bad.join("\n  ")
        )));
    }
    Ok(out)
}

/// `mesh images lock`.
pub fn lock(state: &Path, place: &Place, args: ImagesLockArgs) -> Result<(), Failure> {
    // A check only looks: the generations it builds are kept nowhere.
    let keep_if = KeepIf {
        never: args.check,
        ..KeepIf::default()
    };
    let wanted = wanted(state, place, args.node.as_deref(), &keep_if)?;
    if args.check {
        return check(&wanted, args.json);
    }
    // Every tag asked first; nothing is written unless every one answered.
    let all: Vec<Unpinned> = wanted
        .values()
        .flat_map(|w| w.images.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let parsed: Vec<_> = all.iter().map(Unpinned::parsed).collect();
    let answers = mesh_registry::tags::resolve(
        &parsed,
        &mesh_registry::Options {
            insecure: args.registry.insecure,
            timeout: Duration::from_secs(args.registry.registry_timeout),
        },
    );
    let mut resolved: BTreeMap<&Unpinned, ImageDigest> = BTreeMap::new();
    let mut failed = Vec::new();
    for (image, answer) in all.iter().zip(answers) {
        match answer {
            Ok(d) => {
                resolved.insert(image, d);
            }
            Err(e) => failed.push(e),
        }
    }
    if !failed.is_empty() {
        let exit = if failed.iter().all(|e| e.refused) {
            Exit::Refused
        } else {
            Exit::System
        };
        let text: Vec<String> = failed.iter().map(ToString::to_string).collect();
        return Err(Failure::text(
            exit,
            format!(
                "{} image(s) could not be resolved, so no lock was written:\n  {}",
                failed.len(),
                text.join("\n  ")
            ),
        ));
    }
    let mut reports = Vec::new();
    for (path, w) in &wanted {
        // A lock that cannot be read is written anew (what it held is said to be gone); one
        // that reads is compared with.
        let before = mesh_compiler::read_images_lock(path)
            .ok()
            .flatten()
            .unwrap_or_default();
        let mut after = if w.whole {
            ImageLock::default()
        } else {
            before.clone()
        };
        for image in w.images.keys() {
            after.images.insert(image.clone(), resolved[image].clone());
        }
        let bytes = after.to_bytes();
        let unchanged = std::fs::read(path).is_ok_and(|b| b == bytes);
        if !unchanged {
            mesh_lib::atomic::write_file(path, &bytes, 0o644)
                .map_err(|e| Failure::system(format!("writing {}: {e}", path.display())))?;
        }
        let images: Vec<serde_json::Value> = w
            .images
            .iter()
            .map(|(image, containers)| {
                json!({
                    "image": image,
                    "digest": resolved[image],
                    "was": before.images.get(image),
                    "containers": containers,
                })
            })
            .collect();
        let dropped: Vec<serde_json::Value> = before
            .images
            .iter()
            .filter(|(k, _)| !after.images.contains_key(*k))
            .map(|(k, d)| json!({ "image": k, "digest": d }))
            .collect();
        if !args.json {
            say!("{}", path.display());
            for image in w.images.keys() {
                let now = &resolved[image];
                let how = match before.images.get(image) {
                    None => "new".to_owned(),
                    Some(was) if was == now => "unchanged".to_owned(),
                    Some(was) => format!("was {was}"),
                };
                say!("  locked  {image}  {now}  ({how})");
            }
            for d in &dropped {
                say!(
                    "  dropped {}  (no node declares it)",
                    d["image"].as_str().unwrap_or_default()
                );
            }
            say!(
                "{} image(s) locked{}",
                w.images.len(),
                if unchanged {
                    ", the lock unchanged"
                } else {
                    ""
                }
            );
        }
        reports.push(json!({
            "lock": path,
            "written": !unchanged,
            "images": images,
            "dropped": dropped,
        }));
    }
    if args.json {
        say!("{}", json!({ "locks": reports }));
    }
    Ok(())
}

/// `mesh images lock --check`: the lock as it is against the images declared; no registry
/// asked, nothing written.
fn check(wanted: &BTreeMap<PathBuf, Wanted>, json_out: bool) -> Result<(), Failure> {
    let mut reports = Vec::new();
    let mut all_missing = Vec::new();
    for (path, w) in wanted {
        let lock = mesh_compiler::read_images_lock(path)?.unwrap_or_default();
        let missing: Vec<(&Unpinned, &Vec<String>)> = w
            .images
            .iter()
            .filter(|(image, _)| !lock.images.contains_key(*image))
            .collect();
        let stale: Vec<&Unpinned> = if w.whole {
            lock.images
                .keys()
                .filter(|k| !w.images.contains_key(*k))
                .collect()
        } else {
            Vec::new()
        };
        if !json_out {
            say!(
                "{}: {} of {} image(s) named by a tag locked",
                path.display(),
                w.images.len() - missing.len(),
                w.images.len()
            );
            for (image, containers) in &missing {
                say!("  not locked  {image}  ({})", containers.join(", "));
            }
            for image in &stale {
                say!("  stale       {image}  (no node declares it; the next lock drops it)");
            }
        }
        for (image, _) in &missing {
            all_missing.push(format!("{} (in {})", image, path.display()));
        }
        reports.push(json!({
            "lock": path,
            "covered": missing.is_empty(),
            "missing": missing
                .iter()
                .map(|(image, containers)| json!({ "image": image, "containers": containers }))
                .collect::<Vec<_>>(),
            "stale": stale,
        }));
    }
    if json_out {
        say!("{}", json!({ "locks": reports }));
    }
    if all_missing.is_empty() {
        return Ok(());
    }
    Err(Failure::new(
        Exit::Refused,
        miette::miette!(
            help = "`mesh images lock` resolves them, or pin them in the declaration (REPO:TAG@sha256:…)",
            "{} image(s) named by a tag are not in the lock:\n  {}",
            all_missing.len(),
            all_missing.join("\n  ")
        ),
    ))
}

/// The images of `built` pinned neither in the declaration nor in the lock, refused: what
/// `--locked` says (exit 2, each named).
pub fn refuse_unpinned(what: &str, unpinned: &[(String, String)]) -> Result<(), Failure> {
    if unpinned.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = unpinned
        .iter()
        .map(|(c, i)| {
            format!(
                "container {}: {}",
                mesh_lib::text::escape(c),
                mesh_lib::text::escape(i)
            )
        })
        .collect();
    Err(Failure::new(
        Exit::Refused,
        miette::miette!(
            help = "`mesh images lock` pins them in the fleet's images.lock, or pin them in the declaration (REPO:TAG@sha256:…)",
            "--locked: {what} names {} image(s) pinned neither in the declaration nor in the image lock (nothing was kept):\n  {}",
            unpinned.len(),
            list.join("\n  ")
        ),
    ))
}
