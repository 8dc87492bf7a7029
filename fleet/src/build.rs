//! Every node of the fleet built, in parallel: each evaluation is a process of its own (the
//! compiler's bounded child), so the threads here only wait for them. A node builds with its
//! record: the one `mesh fleet records` fetched beside the fleet file, or one given (a deploy
//! builds with what the node says its record is now).

use std::path::{Path, PathBuf};

use mesh_compiler::{build as compile, BuildError, BuildRequest, Built, Evaluator, KeepIf};
use mesh_lib::NodeRecord;

use crate::file::{Fleet, Node};

/// Builds `node` with `record` (read from `record_file`, for diagnostics about it) and the
/// image lock of its tree, if it has one.
pub fn node(
    node: &Node,
    record: Option<(&NodeRecord, &Path)>,
    state_dir: &Path,
    evaluator: &Evaluator,
) -> Result<Built, BuildError> {
    kept_if(node, record, state_dir, evaluator, KeepIf::default())
}

/// [`node`], keeping what is built only as `keep_if` says (a refused build writes nothing).
pub fn kept_if(
    node: &Node,
    record: Option<(&NodeRecord, &Path)>,
    state_dir: &Path,
    evaluator: &Evaluator,
    keep_if: KeepIf,
) -> Result<Built, BuildError> {
    let images = mesh_compiler::images_lock(&node.declaration, &node.tree)?;
    compile(&BuildRequest {
        node: &node.declaration,
        record,
        images: images.as_ref().map(|(l, _)| l),
        state_dir,
        use_cache: true,
        evaluator,
        tree: &node.tree,
        per_module: true,
        keep_if,
    })
}

/// Builds `node` with `record` as declared: no image lock read (what `mesh images lock` asks
/// of the registry is what the declaration names).
pub fn as_declared(
    node: &Node,
    record: Option<(&NodeRecord, &Path)>,
    state_dir: &Path,
    evaluator: &Evaluator,
    keep_if: KeepIf,
) -> Result<Built, BuildError> {
    compile(&BuildRequest {
        node: &node.declaration,
        record,
        images: None,
        state_dir,
        use_cache: true,
        evaluator,
        tree: &node.tree,
        per_module: true,
        keep_if,
    })
}

/// The record a CI build uses for `node`: the file in the fleet's records folder, if there is
/// one (none: a node never adopted).
pub fn recorded(fleet: &Fleet, node: &Node) -> Result<Option<(NodeRecord, PathBuf)>, String> {
    let path = fleet.record_file(&node.name);
    if !path.exists() {
        return Ok(None);
    }
    mesh_lib::record::read(&path)
        .map(|r| Some((r, path.clone())))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// One node's build in a fleet build.
pub struct NodeBuilt {
    /// The node.
    pub node: String,
    /// Its generation, or why it did not build.
    pub result: Result<Built, BuildError>,
}

/// Builds `nodes` of `fleet`, `parallel` at a time, each with its recorded record.
pub fn all(
    fleet: &Fleet,
    nodes: &[&Node],
    state_dir: &Path,
    evaluator: &Evaluator,
    parallel: usize,
) -> Vec<NodeBuilt> {
    all_kept_if(fleet, nodes, state_dir, evaluator, parallel, &|_| {
        KeepIf::default()
    })
}

/// [`all`], keeping each node's build only as `keep_if` says of the node (a refused build
/// writes nothing).
pub fn all_kept_if(
    fleet: &Fleet,
    nodes: &[&Node],
    state_dir: &Path,
    evaluator: &Evaluator,
    parallel: usize,
    keep_if: &(dyn Fn(&Node) -> KeepIf + Sync),
) -> Vec<NodeBuilt> {
    crate::each(nodes, parallel, |n| {
        let result = match recorded(fleet, n) {
            Ok(record) => kept_if(
                n,
                record.as_ref().map(|(r, p)| (r, p.as_path())),
                state_dir,
                evaluator,
                keep_if(n),
            ),
            Err(e) => Err(mesh_compiler::MeshDiagnostic::new(e).into()),
        };
        NodeBuilt {
            node: n.name.to_string(),
            result,
        }
    })
}
