//! A node's ground: what every part of the activator stands on. The state directory — the
//! store, the profile and its log, the node record, the host store (what the mesh wrote, and
//! every original it recorded), the lock — and the root declared files are written beneath,
//! with its users and groups; and the file plan, a pure function of them.
//!
//! - [`Node`]: the state directory and root opened, with the lock for a command that changes
//!   the node ([`lock`]), or without to look at it;
//! - [`root`]: the filesystem under `--root`, reached only through file descriptors (openat2,
//!   never following a link), written as temp file, fsync, rename, fsync of the folder;
//! - [`host`]: the host store, what makes "found" precise;
//! - [`profile`]: the numbered generations, `current` and the log of switches;
//! - [`users`]: owner and group names of the root's own databases;
//! - [`plan`]: what a switch does to each declared path, and why (pure).
//!
//! Invariants (SPEC.md, "The activator"):
//! - before content the mesh did not write is replaced or removed, it is recorded in the store;
//! - a held file (found, its module not taken) is never written;
//! - no path the mesh writes, removes or restores reaches the state directory.
//!
//! May use: `mesh-lib`. Used by every crate that changes or reads a node: the systemd,
//! switch and remote crates, and the binary.
#![deny(missing_docs)]

pub mod error;
pub mod host;
pub mod lock;
mod node;
pub mod plan;
pub mod profile;
pub mod root;
pub mod users;

pub use error::{io_err, Kind, NodeError};
pub use node::Node;
