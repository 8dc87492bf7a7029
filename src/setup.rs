//! What sets a person up: `mesh init` (a fleet of their own), `mesh lib` (the library for their
//! editor).

use std::path::Path;

use mesh_fleet::init::InitError;
use mesh_lib::model::NodeName;
use serde_json::json;

use crate::cli::{InitArgs, LibArgs};
use crate::failure::{Exit, Failure};

/// `mesh init`.
pub fn init(state: &Path, args: InitArgs) -> Result<(), Failure> {
    let node = NodeName::new(&args.node).map_err(|e| Failure::user(format!("--node: {e}")))?;
    let done = mesh_fleet::init::init(&args.dir, &node, state, crate::commands::evaluator())
        .map_err(|e| match e {
            InitError::Build { source, .. } => (*source).into(),
            InitError::InTheWay { .. } => Failure::text(Exit::Refused, e),
            InitError::OpenToAll(_) => Failure::user(e),
            InitError::Io { .. } => Failure::system(e),
        })?;
    if args.json {
        let nodes: Vec<_> = done
            .nodes
            .iter()
            .map(|(node, id)| json!({ "node": node, "id": id }))
            .collect();
        say!(
            "{}",
            json!({ "dir": done.dir, "files": done.files, "nodes": nodes })
        );
        return Ok(());
    }
    let dir = args.dir.display();
    say!("a fleet in {dir}:");
    for file in &done.files {
        say!("  {}", file.display());
    }
    for (node, id) in &done.nodes {
        say!("{node} builds to {id} (in ci/ids.txt, the CI gate's)");
    }
    say!(
        "next:
  cd {dir}
  git init && git add . && git commit -m 'A fleet'   # the fleet is a repository of its own
  mesh build nodes/{node}.ncl     # build the node here: nothing on a machine changes
  ci/check.sh                    # the CI gate: every node still builds to its id
  direnv allow                   # editors and `nickel` find `import \"mesh.ncl\"` in .mesh/
then adopt the node and take its modules: README, \"A fleet of your own\""
    );
    Ok(())
}

/// `mesh lib`.
pub fn lib(args: LibArgs) -> Result<(), Failure> {
    use mesh_compiler::library::{self, WriteError};
    let Some(dir) = args.write else {
        say_raw!("{}", library::MESH_NCL);
        return Ok(());
    };
    let file = library::write_to(&dir).map_err(|e| match e {
        WriteError::NotALibrary(_) => Failure::text(Exit::Refused, e),
        WriteError::Io { .. } => Failure::system(e),
    })?;
    say!("{}", file.display());
    Ok(())
}
