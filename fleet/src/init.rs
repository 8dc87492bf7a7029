//! `mesh init`: a small fleet that builds as it is — a fleet file, a catalogue of two modules,
//! one node's declaration, the records folder, a `.gitignore`, the CI gate (`ci/check.sh`, which
//! runs `mesh fleet build --check ci/ids.txt`) with the ids the nodes build, and the mesh's
//! library in `.mesh/` for editors (`.envrc` points `NICKEL_IMPORT_PATH` at it).
//!
//! Invariant: nothing that is there is overwritten. Every file is checked absent before the
//! first is written; a folder holding any of them is refused, naming them all.

use std::path::{Path, PathBuf};

use mesh_compiler::library::WriteError;
use mesh_compiler::{BuildError, Evaluator};
use mesh_lib::model::NodeName;

/// The fleet's files, by their path in it; `@NODE@` and `@FIELD@` are the node's name (as a
/// Nickel field, quoted where it must be).
const FILES: [(&str, &str, u32); 10] = [
    (
        "fleet.ncl",
        include_str!("../templates/init/fleet.ncl"),
        0o644,
    ),
    (
        "nodes/@NODE@.ncl",
        include_str!("../templates/init/nodes/NODE.ncl"),
        0o644,
    ),
    (
        "catalogue/catalogue.ncl",
        include_str!("../templates/init/catalogue/catalogue.ncl"),
        0o644,
    ),
    (
        "catalogue/files/motd",
        include_str!("../templates/init/catalogue/files/motd"),
        0o644,
    ),
    (
        "catalogue/files/ssh/10-mesh.conf",
        include_str!("../templates/init/catalogue/files/ssh/10-mesh.conf"),
        0o644,
    ),
    ("records/.gitkeep", "", 0o644),
    (
        "ci/check.sh",
        include_str!("../templates/init/ci/check.sh"),
        0o755,
    ),
    (
        ".gitignore",
        include_str!("../templates/init/gitignore"),
        0o644,
    ),
    (".envrc", include_str!("../templates/init/envrc"), 0o644),
    // Last: written once the fleet has built, with the ids.
    ("ci/ids.txt", IDS_HEADER, 0o644),
];

/// The head of `ci/ids.txt`; a line `NODE ID` per node follows.
const IDS_HEADER: &str = "\
# The CI gate's ids (ci/check.sh): every node must build to the generation id written here. A
# change of id is a change of what the node would run: after a deliberate one, write them again
# with `ci/check.sh --update` and commit them with it.
";

/// The folder the library is written to, for editors and the `nickel` command.
pub const LIBRARY_DIR: &str = ".mesh";

/// Why `mesh init` wrote nothing, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// Files of the fleet are already there.
    #[error("{} already holds {}: nothing was written", .dir.display(), .present.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    InTheWay {
        /// The folder.
        dir: PathBuf,
        /// What is there, relative to it.
        present: Vec<PathBuf>,
    },
    /// The folder is one every user may write to: a fleet file there marks no tree.
    #[error("{} is a folder every user may write to: a fleet file there would mark no tree (anyone could have put it there), so its nodes could not import their catalogue; start the fleet in a folder of its own, e.g. `mesh init {}/fleet`", .0.display(), .0.display())]
    OpenToAll(PathBuf),
    /// Writing failed.
    #[error("cannot write {}: {source}", .path.display())]
    Io {
        /// Where.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The fleet written does not build (it should: a mesh whose library or rules changed).
    #[error("the fleet written in {} does not build: {source}", .dir.display())]
    Build {
        /// The folder.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: Box<BuildError>,
    },
}

impl InitError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| Self::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// What `mesh init` did.
#[derive(Debug)]
pub struct Initialised {
    /// The fleet's folder.
    pub dir: PathBuf,
    /// The files written, relative to it.
    pub files: Vec<PathBuf>,
    /// Each node and the generation id it builds to (what `ci/ids.txt` says).
    pub nodes: Vec<(String, mesh_lib::GenerationId)>,
}

/// `name` as a field of a Nickel record: bare when it is an identifier, quoted otherwise.
fn field(name: &NodeName) -> String {
    let s = name.as_str();
    let identifier = s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if identifier {
        s.to_owned()
    } else {
        format!("\"{s}\"")
    }
}

/// Writes a new fleet with the node `node` into `dir` (made if missing), then builds it (with
/// `state_dir`'s store, by `evaluator`) and writes the ids it builds to into `ci/ids.txt`.
pub fn init(
    dir: &Path,
    node: &NodeName,
    state_dir: &Path,
    evaluator: &Evaluator,
) -> Result<Initialised, InitError> {
    let files: Vec<(PathBuf, String, u32)> = FILES
        .iter()
        .map(|(path, text, mode)| {
            let fill = |t: &str| {
                t.replace("@FIELD@", &field(node))
                    .replace("@NODE@", node.as_str())
            };
            (PathBuf::from(fill(path)), fill(text), *mode)
        })
        .collect();
    let present: Vec<PathBuf> = files
        .iter()
        .map(|(p, _, _)| p.clone())
        .chain([PathBuf::from(LIBRARY_DIR)])
        .filter(|p| dir.join(p).symlink_metadata().is_ok())
        .collect();
    if !present.is_empty() {
        return Err(InitError::InTheWay {
            dir: dir.to_owned(),
            present,
        });
    }
    // A fleet is the operator's sources, not the mesh's state: its folders and files follow the
    // umask, as `git` or `cargo init` would make them.
    std::fs::create_dir_all(dir).map_err(InitError::io(dir))?;
    let dir = std::fs::canonicalize(dir).map_err(InitError::io(dir))?;
    if mesh_compiler::imports::writable_by_all(&dir) {
        return Err(InitError::OpenToAll(dir));
    }
    let (ids_file, sources) = files.split_last().expect("the ids are the last file");
    for (path, text, mode) in sources {
        create_new(&dir.join(path), text, *mode)?;
    }
    let library = dir.join(LIBRARY_DIR);
    mesh_compiler::library::write_to(&library).map_err(|e| match e {
        WriteError::Io { path, source } => InitError::Io { path, source },
        WriteError::NotALibrary(file) => InitError::InTheWay {
            dir: dir.clone(),
            present: vec![file],
        },
    })?;

    let built = |source| InitError::Build {
        dir: dir.clone(),
        source: Box::new(source),
    };
    let fleet = crate::Fleet::load(&dir.join("fleet.ncl"), state_dir, None).map_err(built)?;
    let all: Vec<&crate::Node> = fleet.nodes.values().collect();
    let mut nodes = Vec::new();
    for b in crate::build::all(&fleet, &all, state_dir, evaluator, all.len()) {
        nodes.push((b.node, b.result.map_err(built)?.id));
    }
    let mut ids = ids_file.1.clone();
    for (node, id) in &nodes {
        ids.push_str(&format!("{node:<20} {id}\n"));
    }
    create_new(&dir.join(&ids_file.0), &ids, ids_file.2)?;
    let mut written: Vec<PathBuf> = files.into_iter().map(|(p, _, _)| p).collect();
    written.push(PathBuf::from(LIBRARY_DIR).join(mesh_compiler::library::FILE));
    Ok(Initialised {
        dir,
        files: written,
        nodes,
    })
}

/// Writes a new file at `path` (its folders made as needed) with `mode` (through the umask);
/// one that is there is never overwritten.
fn create_new(path: &Path, text: &str, mode: u32) -> Result<(), InitError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(InitError::io(parent))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(InitError::io(path))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(InitError::io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name that is a Nickel identifier is a bare field; another (a dot, a leading digit) is
    /// quoted, so the fleet file still parses.
    #[test]
    fn a_node_name_is_a_field_quoted_where_it_must_be() {
        let name = |s| NodeName::new(s).unwrap();
        assert_eq!(field(&name("node-1")), "node-1");
        assert_eq!(field(&name("web.example")), "\"web.example\"");
        assert_eq!(field(&name("1st")), "\"1st\"");
    }
}
