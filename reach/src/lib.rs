//! What reaches a node: the firewall a switch puts a generation's rules in force through, the
//! node's interfaces and listening sockets, and the flip preview that follows a packet through
//! them. Everything here is read or changed inside the node's network namespace (`--netns`),
//! never the machine's own when one is given.
//!
//! - [`firewall`]: the [`firewall::Firewall`] seam, the kernel's ([`firewall::Kernel`], spoken
//!   in nft's language) and a [`firewall::Recording`] one; the found firewall's chains, spoken
//!   by a driver per kind (nftables tables, iptables-nft);
//! - [`interfaces`] and [`sockets`]: the node's addresses, routes and listening sockets, read
//!   over netlink ([`netns`] moves the reading thread into the namespace);
//! - [`preview`]: what reaches each published port now, and after the flip.
//!
//! Invariant: a table of the mesh's on an adopted node never drops by default and holds no
//! accept; the mesh's openings in a found firewall's chains carry [`firewall::MARK`].
//!
//! May use: `mesh-lib`. Used by the switch (`mesh-switch`) and the binary.
#![deny(missing_docs)]

pub mod firewall;
pub mod interfaces;
mod netlink;
pub mod netns;
pub mod preview;
pub mod sockets;
