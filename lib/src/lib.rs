//! The mesh's core: the generation model, its canonical encoding, the node record and the
//! content-addressed store. Pure data and the store's own files; no effect on the machine.
//!
//! Invariants:
//! - a [`model::Generation`] is named by the blake3 of its canonical encoding
//!   ([`canonical`]); everything in it is sorted, so the name depends on the content alone;
//! - values are validated when built ([`path::TargetPath`], [`model::Port`], the name types), so
//!   no invalid value reaches a generation;
//! - the store never hands out bytes that do not match their name.
#![deny(missing_docs)]

pub mod atomic;
pub mod canonical;
pub mod crash;
pub mod diff;
pub mod firewall;
pub mod id;
pub mod image;
pub mod image_lock;
pub mod import;
pub mod model;
pub mod options;
pub mod pack;
pub mod path;
pub mod record;
pub mod secret;
pub mod state;
pub mod statement;
pub mod store;
pub mod text;
pub mod transfer;
pub mod trust;

pub use id::{BlobHash, GenerationId};
pub use model::Generation;
pub use path::TargetPath;
pub use record::NodeRecord;
pub use store::Store;
