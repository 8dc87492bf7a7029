//! systemd: speaking to it, and which units a switch asks it to reload, restart, start or
//! stop.
//!
//! - [`bus`]: systemd through its D-Bus API ([`Systemd`], the seam; [`Bus`], the real one;
//!   [`Recording`], one that records what it is asked, for tests of what a switch asks);
//! - [`services`]: the service plan, a pure function of the target generation, the file plan,
//!   the host store, the node record and the units' states as systemd has them.
//!
//! Invariant: a unit of a module not taken is never started, stopped or restarted by a switch;
//! a held unit is never touched.
//!
//! May use: `mesh-lib`, `mesh-node` (the host store, the file plan). Used by the switch.
#![deny(missing_docs)]

pub mod bus;
pub mod services;

pub use bus::{Bus, Call, Exit, Known, Outcome, Recording, Systemd, SystemdError, UnitNow, Verb};
