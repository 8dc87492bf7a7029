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
//! Files are done; the firewall and containers take their place in the same plan in the issues
//! that build them.
#![deny(missing_docs)]

pub mod crash;
pub mod docker;
pub mod firewall;
pub mod host;
pub mod libnft;
pub mod lock;
pub mod netns;
pub mod plan;
pub mod profile;
pub mod root;
pub mod sockets;
pub mod switch;
pub mod users;

pub use switch::{ActivateError, Kind, Node, Status, Switched};
