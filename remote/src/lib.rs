//! The node's side of remote work, and what reads it: a deploy on the node (armed with a
//! deadline, its agent, confirmed or switched back), the requests of a deployer's one
//! connection (`mesh serve`), a pull from a registry (its tag, signatures and objects, a guarded
//! switch, health checks), the statements a node accepted and the signers it trusts; `mesh
//! status`, which reports all of it with the node's own state, and `mesh reconcile`, which
//! settles deploys whose agent is gone and puts the firewall back in force.
//!
//! - [`deploy`]: a deploy's record, its agent ([`deploy::agent`]), `mesh serve`
//!   ([`deploy::serve`]), pulls ([`deploy::pull`]) and their health checks ([`deploy::health`]);
//! - [`statement`] and [`trust`]: what a switch from elsewhere needs before anything changes;
//! - [`status`] and [`reconcile`].
//!
//! Invariant: nothing from elsewhere changes the node unless a signer it trusts vouches for it
//! (once it trusts any), and a deploy not confirmed in time is switched back.
//!
//! May use: `mesh-lib`, `mesh-node`, `mesh-reach`, `mesh-containers`, `mesh-switch`,
//! `mesh-registry`. Used by the binary.
#![deny(missing_docs)]

pub mod deploy;
pub mod reconcile;
pub mod statement;
pub mod status;
pub mod trust;

pub use status::Status;
