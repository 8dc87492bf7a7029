//! `mesh build`, `mesh show`, `mesh verify` and `mesh record export`: what builds and reads the
//! store, changing no node.

use std::path::Path;

use mesh_compiler::{build, BuildRequest, Built, KeepIf};
use mesh_lib::{GenerationId, Store};
use serde_json::json;

use crate::cli::{BuildArgs, ShowArgs};
use crate::context::{evaluator, load_record, tree_rule};
use crate::failure::{Exit, Failure};
use crate::show;

fn build_node(
    state: &Path,
    node: &Path,
    record: Option<&Path>,
    use_cache: bool,
    keep_if: KeepIf,
) -> Result<Built, Failure> {
    let record = load_record(state, record)?;
    let images = mesh_compiler::images_lock(node, tree_rule())?;
    let built = build(&BuildRequest {
        node,
        record: record.as_ref().map(|(r, p)| (r, p.as_path())),
        images: images.as_ref().map(|(l, _)| l),
        state_dir: state,
        use_cache,
        evaluator: evaluator(),
        tree: tree_rule(),
        per_module: true,
        keep_if,
    })?;
    Ok(built)
}

pub fn build_cmd(state: &Path, args: BuildArgs) -> Result<(), Failure> {
    // Validate what the user gave before any work.
    let expected = match &args.check {
        Some(text) => Some(
            text.parse::<GenerationId>()
                .map_err(|e| Failure::user(format!("--check: {e}")))?,
        ),
        None => None,
    };
    // A build refused (--locked, --check) is kept nowhere and prints nothing on stdout: a
    // script that reads the last line gets no id for a build it was told failed.
    let keep_if = KeepIf {
        pinned: args.locked,
        id: expected,
        never: false,
    };
    let built = build_node(
        state,
        &args.node,
        args.record.as_deref(),
        !args.no_cache,
        keep_if,
    )?;
    let g = &built.summary;
    // Images named by a tag alone, and not in the image lock: the bytes a tag names differ by
    // node and by day, and the mesh does not fetch them. A warning, refused with --locked.
    let unpinned = built.unpinned()?;
    if args.locked {
        crate::images::refuse_unpinned(&args.node.display().to_string(), &unpinned)?;
    }
    if let Some(expected) = expected {
        if expected != built.id {
            return Err(Failure::new(
                Exit::Refused,
                miette::miette!(
                    help = "if the change is deliberate, commit the new id",
                    "{} builds to {}, not the expected {}; nothing was kept",
                    args.node.display(),
                    built.id,
                    expected
                ),
            ));
        }
    }
    if !unpinned.is_empty() {
        eprintln!(
            "warning: {} container image(s) not pinned by digest (REPO:TAG@sha256:…, or `mesh images lock`): the bytes a tag names can differ from node to node and day to day, and the mesh fetches only pinned images:",
            unpinned.len()
        );
        for (name, image) in &unpinned {
            eprintln!(
                "  container {}: {}",
                mesh_lib::text::escape(name),
                mesh_lib::text::escape(image)
            );
        }
    }
    if args.json {
        let out = json!({
            "id": built.id,
            "node": g.node,
            "mode": g.mode,
            "cached": built.cached,
            "modules_evaluated": built.evaluated,
            "files": g.files,
            "containers": g.containers.managed + g.containers.staged + g.containers.held,
            "unpinned": unpinned
                .iter()
                .map(|(name, image)| json!({ "container": name, "image": image }))
                .collect::<Vec<_>>(),
            "openings": g.openings,
            "check": expected.map(|e| e == built.id),
        });
        say!("{out}");
    } else {
        say!("{}", show::summary(&built.id, g, built.cached));
        say!("{}", built.id);
    }
    Ok(())
}

pub fn show_cmd(state: &Path, args: ShowArgs) -> Result<(), Failure> {
    let as_path = Path::new(&args.what);
    let (id, generation) = if args.what.ends_with(".ncl") || as_path.is_file() {
        let built = build_node(
            state,
            as_path,
            args.record.as_deref(),
            true,
            KeepIf::default(),
        )?;
        (built.id, built.generation()?.clone())
    } else {
        let store = Store::open(state)?;
        let id = store.resolve_generation(&args.what)?;
        (id, store.generation(&id)?)
    };
    if args.json {
        let mut value = serde_json::to_value(&generation).map_err(Failure::system)?;
        value["id"] = json!(id);
        say!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(Failure::system)?
        );
    } else {
        say_raw!("{}", show::generation(&id, &generation));
    }
    Ok(())
}

pub fn verify_cmd(state: &Path, json_out: bool) -> Result<(), Failure> {
    let store = Store::open(state)?;
    let report = store.verify()?;
    if json_out {
        say!(
            "{}",
            json!({ "checked": report.checked, "corrupt": report.corrupt })
        );
    } else {
        say!(
            "checked {} objects in {}",
            report.checked,
            store.root().display()
        );
        for p in &report.corrupt {
            say!("corrupted: {}", p.display());
        }
    }
    if report.corrupt.is_empty() {
        Ok(())
    } else {
        Err(Failure::system(format!(
            "{} object(s) in the store do not match their names",
            report.corrupt.len()
        )))
    }
}

pub fn record_export(state: &Path) -> Result<(), Failure> {
    match load_record(state, None)? {
        Some((record, _)) => {
            let bytes = record.to_bytes().map_err(Failure::system)?;
            say_raw!("{}", String::from_utf8_lossy(&bytes));
            Ok(())
        }
        None => Err(Failure::user(format!(
            "no node record in {}: this node was never adopted (a managed node with nothing found)",
            state.display()
        ))),
    }
}
