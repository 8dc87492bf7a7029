//! Containers, through the Docker engine at `DOCKER_HOST` (default: the local socket), with
//! bollard: what the engine runs, what a switch asks of it, and the images it needs.
//!
//! - [`engine`]: the [`Engine`] — listing, inspecting, starting, stopping, renaming, removing;
//! - [`create`]: what a declared container is created with, and its spec's digest;
//! - [`mod@plan`]: the [`Step`]s from a generation's containers to what is on the engine (pure);
//! - [`apply`]: the steps carried out, concurrently across containers;
//! - [`images`]: the images a generation needs, fetched before anything changes;
//! - [`progress`]: what a person is shown while the container phase and the fetches run.
//!
//! bollard. The mesh's own containers carry the labels [`LABEL_MODULE`], [`LABEL_GENERATION`],
//! [`LABEL_SPEC`] and [`LABEL_OWNER`]: those labels are the host store's record for containers.
//! A container under a declared name without them is *found*, and is never removed: a take
//! stops it and keeps it as `NAME.found`. The mesh removes a container of its own that is no
//! longer declared only when its owner label names this node's state.
//!
//! A plan's steps run concurrently across containers ([`Engine::apply`]): each container's own
//! calls in their order, every container's letting go (a stop, a removal, a rename away from its
//! name) before any container takes a name or a port (a create, a start). The letting go is
//! asked of every container at once — a stop is the engine waiting out the container's stop
//! timeout, not work — and the taking runs at most `jobs` containers at a time. A switch of N
//! containers costs about its slowest stop, not their sum, nor a stop per `jobs` containers.
//!
//! May use: `mesh-lib`. Used by the switch (`mesh-switch`), the node's side of remote work and
//! the binary.
#![deny(missing_docs)]

pub mod apply;
pub mod create;
pub mod engine;
pub mod images;
pub mod plan;
pub mod progress;

use std::collections::BTreeMap;

pub use apply::{stopping, StepsFailed, DEFAULT_JOBS};
pub use create::spec_digest;
pub use engine::{DockerError, Engine, Present, DEFAULT_STOP_SECONDS};
pub use plan::{plan, Step};
pub use progress::{Fetching, Progress, Quiet};

/// The label naming the module of a container the mesh created.
pub const LABEL_MODULE: &str = "mesh.module";
/// The label naming the generation that created a container of the mesh's.
pub const LABEL_GENERATION: &str = "mesh.generation";
/// The label holding the digest of the declared spec a container was created from.
pub const LABEL_SPEC: &str = "mesh.spec";
/// The label naming the state directory whose switch created a container of the mesh's (a
/// digest of its path): only that state removes it when it is no longer declared, so a second
/// state on the same engine (a trial with `--state-dir`, a test) never removes a node's
/// containers.
pub const LABEL_OWNER: &str = "mesh.owner";
/// The suffix a found container is renamed with when its module is taken.
pub const FOUND_SUFFIX: &str = ".found";

/// The values of containers' secret environment variables, by their keyed digest (the
/// `ciphertext` a switch's resolved generation names them by): zeroed when dropped.
pub type SecretValues = BTreeMap<mesh_lib::BlobHash, mesh_lib::secret::Zeroizing<String>>;
