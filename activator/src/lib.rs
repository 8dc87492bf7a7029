//! The mesh's activator: generation → machine. Every side effect of the mesh lives here — files
//! under a root, nftables rules, Docker containers — behind small traits with a real
//! implementation and a recording one, driven by a pure plan computed from the current
//! generation, the new one, the host store and what is observed on the machine.
//!
//! Invariants (SPEC.md, "The activator"):
//! - a held item (found, its module not taken) is never opened for writing, moved or restarted;
//! - before content the mesh did not write is replaced or removed, it is recorded in the store;
//! - a switch commits by atomically moving the profile's `current` link, so a crash leaves the
//!   old or the new generation, never a mix.
//!
//! The effects sit behind small seams: [`root::Root`] for files (openat2, never following a
//! link), [`firewall::Firewall`] for the kernel's firewall (a real [`firewall::Kernel`] and a
//! [`firewall::Recording`] one), [`docker::Engine`] for containers. A switch puts the firewall
//! in force first, then the files, then the containers.
#![deny(missing_docs)]

/// The crash-injection points (they live in `mesh-lib`, where the store's are).
pub use mesh_lib::crash;
pub mod deploy;
pub mod import;
pub mod node;
pub mod reconcile;
pub mod statement;
pub mod status;
pub mod switch;
pub mod trust;

pub use node::Activator;
pub use status::Status;
pub use switch::{ActivateError, Kind, Switched};
