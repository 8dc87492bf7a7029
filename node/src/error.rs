//! Why the node's ground failed, and how a failure is to be reported (exit codes live in the
//! binary).

use std::path::{Path, PathBuf};

use mesh_lib::store::StoreError;
use mesh_lib::GenerationId;

use crate::lock::LockError;
use crate::root::RootError;

/// How a failure is to be reported: the binary maps these to exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bad input (exit 1).
    User,
    /// A conflict or refusal (exit 2).
    Refused,
    /// The system failed (exit 3).
    System,
}

/// Why opening or reading the node's state failed, or why what was asked of it does not fit
/// it. Each says what was changed: nothing, unless it says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Another command holds the lock.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The store failed (a corrupted blob among others).
    #[error("{0}; nothing was changed")]
    Store(#[from] StoreError),
    /// The filesystem under the root failed.
    #[error("{0}")]
    Root(#[from] RootError),
    /// The generation is of another node.
    #[error("generation {id} is of node {theirs}, but this node is {ours}")]
    WrongNode {
        /// The generation.
        id: GenerationId,
        /// Its node.
        theirs: String,
        /// This node.
        ours: String,
    },
    /// A declared path reaches the mesh's own state directory.
    #[error("{path} lies in the mesh's state directory {} (under the root): a declaration never writes, removes or restores the mesh's own state; nothing was changed", .state.display())]
    ReachesState {
        /// The path.
        path: mesh_lib::TargetPath,
        /// The state directory.
        state: PathBuf,
    },
    /// Nothing to roll back to, or no such generation number.
    #[error("{0}")]
    NoSuchGeneration(String),
    /// Any other I/O in the state directory.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl NodeError {
    /// How to report it.
    pub fn kind(&self) -> Kind {
        match self {
            NodeError::Lock(LockError::Held { .. }) => Kind::Refused,
            NodeError::Root(
                RootError::Symlink { .. } | RootError::Folder { .. } | RootError::NotAFolder { .. },
            ) => Kind::Refused,
            NodeError::Store(StoreError::MissingGeneration(_) | StoreError::Ambiguous(_)) => {
                Kind::User
            }
            NodeError::WrongNode { .. }
            | NodeError::NoSuchGeneration(_)
            | NodeError::ReachesState { .. } => Kind::User,
            _ => Kind::System,
        }
    }
}

/// An I/O failure at `path` while doing `what`, as a [`NodeError::Io`].
pub fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> NodeError + 'a {
    move |source| NodeError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}
