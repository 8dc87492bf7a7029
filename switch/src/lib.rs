//! The switch: a node from the generation in force to another, one phase after another, each
//! in its own file saying what it changes, what its dry run prints and where its crash points
//! are; and the rest of what changes a node as a whole — a rollback, the recording of what an
//! adoption finds, the collection of garbage — and what `mesh import` reads and compares on it.
//!
//! An [`Activator`] is a node's ground ([`mesh_node::Node`]) with what a switch speaks to on it:
//! the firewall ([`mesh_reach`]), systemd ([`mesh_systemd`]), the container engine
//! ([`mesh_containers`]). A switch ([`switch`]):
//!
//! 0. an interrupted switch is finished first, from its journal ([`journal`]);
//! 1. **observe** what is at every path the plan needs ([`observe`]), and the Docker engine; a
//!    switch that changes the private network's range checks it against the node's addresses
//!    and routes first ([`network`]);
//! 2. **plan**: the pure file plan ([`mesh_node::plan`]), the service plan ([`mesh_systemd::services`],
//!    with the units' states systemd reports) and the container steps ([`containers`]); a dry
//!    run stops here and prints them, with what a person reviews ([`review`]: each file's
//!    content diff, the firewall's nft lines, the containers' fields);
//! 3. **prepare**: every blob read and checked, space and writability checked ([`prepare`]);
//!    the images pinned by digest that the containers need and the engine lacks fetched
//!    ([`mesh_containers::images`]);
//! 4. **apply**, in this order:
//!    - the firewall, in one transaction ([`firewall`]): if nft refuses, nothing has changed;
//!    - content the mesh did not write recorded, the journal written ([`prepare`]);
//!    - the units that stop, with the definitions they run ([`units`]);
//!    - the files, staged, synced, renamed ([`files`]);
//!    - the units: daemon-reload, enables, then reloads, restarts, starts, and the settle
//!      window ([`units`], planned by [`mesh_systemd::services`]);
//!    - the containers, after the files they may mount ([`containers`]); a found container
//!      holding what no declaration says is not recreated unless the loss is accepted
//!      ([`gaps`]);
//! 5. **commit**: the host store, the profile's `current`, the journal removed ([`commit`]).
//!
//! A crash anywhere leaves, after the next switch or rollback, the old or the new generation.
//!
//! Invariants (SPEC.md, "The activator"):
//! - a held item (found, its module not taken) is never opened for writing, moved or restarted;
//! - before content the mesh did not write is replaced or removed, it is recorded in the store;
//! - a switch commits by atomically moving the profile's `current` link.
//!
//! May use: `mesh-lib`, `mesh-node`, `mesh-reach`, `mesh-containers`, `mesh-systemd`. Used by
//! the node's side of remote work (`mesh-remote`) and the binary.
#![deny(missing_docs)]

mod activator;
pub mod back;
pub mod commit;
pub mod containers;
pub mod error;
pub mod files;
pub mod firewall;
pub mod gaps;
pub mod import;
pub mod journal;
pub mod network;
pub mod observe;
pub mod prepare;
pub mod review;
pub mod secrets;
pub mod stage;
pub mod states;
pub mod switch;
pub mod units;

pub use activator::{Activator, Collected};
pub use error::{ActivateError, Kind};
pub use journal::Recovered;
pub use states::{Counts, States};
pub use switch::Switched;
pub use units::UnitFailure;
