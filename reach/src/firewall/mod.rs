//! The firewall: the [`Firewall`] a switch puts a generation's rules in force through, the real
//! one in the kernel ([`Kernel`]) and a [`Recording`] one for tests of what is asked of it.
//!
//! The kernel is spoken to in nft's language — through libnftables in process, or the `nft`
//! command where the library cannot be opened ([`nft`]) — inside `--netns` when given, so tests
//! never touch the machine's own ruleset. The found firewall's chains are spoken by one of two
//! drivers: [`nftables`] (the predecessor's own nft tables, edited with nft) and [`iptables`]
//! (tables made by `iptables` on its nft backend, edited only through iptables, which owns their
//! layout; and legacy iptables, x_tables nft does not see, through `iptables-legacy`). Where a
//! daemon keeps the found firewall ([`daemon`]), it is spoken to as well: firewalld over its
//! D-Bus API (the openings are rich rules of its runtime configuration), ufw through its unit
//! (the flip stops it, a rollback across the flip starts it again).
//!
//! Invariants:
//! - on an adopted node the mesh loads no table of its own that accepts or drops by default:
//!   each opening is inserted at the top of the **found firewall's own** input and forward
//!   chains, marked by a comment starting `mesh: ` — an accept in a table of the mesh's could not
//!   help, since a drop in any base chain is final;
//! - the guard, the base ruleset, the removal of the found firewall (the flip) and the openings
//!   in nft's own tables change in one transaction: if nft refuses any of it, nothing changes;
//! - converging is idempotent: what is in force is compared with what is wanted, and only a
//!   difference is written;
//! - a container runtime's tables are never removed nor loaded back from an old copy
//!   ([`is_runtime_table`]).

pub mod daemon;
mod dump;
pub mod iptables;
mod kernel;
pub mod libnft;
pub mod nft;
pub mod nftables;

use std::sync::Mutex;

use mesh_lib::model::{Opening, Settings, TrafficPath};

pub use dump::{is_runtime_table, Dump, RUNTIME_CHAINS, RUNTIME_TABLES};
pub use kernel::Kernel;

/// The prefix of the comment on every rule the mesh puts in a found chain.
pub const MARK: &str = "mesh: ";

/// A firewall operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum FirewallError {
    /// `nft` (or an iptables tool) could not be started.
    #[error("cannot run nft{}: {source}", netns_note(.netns))]
    Spawn {
        /// The namespace.
        netns: Option<String>,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The network namespace cannot be entered (it does not exist, or no privilege).
    #[error("cannot enter network namespace {netns}: {source}")]
    Netns {
        /// The namespace.
        netns: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `nft` refused; its own message.
    #[error("nft {what} failed{}: {stderr}", netns_note(.netns))]
    Nft {
        /// What was asked.
        what: String,
        /// The namespace.
        netns: Option<String>,
        /// nft's message.
        stderr: String,
    },
    /// A firewall kind neither driver speaks is in force.
    #[error("{0}: the mesh speaks nftables tables, iptables-nft, legacy iptables, firewalld and ufw, not this; adoption needs the found firewall in one of those")]
    NotCovered(String),
    /// The found firewall's daemon (firewalld, or systemd for its unit) refused or failed.
    #[error("{what}: {message}")]
    Daemon {
        /// Who was asked (firewalld, or the daemon's unit).
        what: String,
        /// What it said.
        message: String,
    },
    /// `nft -j` printed something that is not its JSON.
    #[error("cannot read nft's listing: {0}")]
    Listing(String),
}

fn netns_note(netns: &Option<String>) -> String {
    netns
        .as_ref()
        .map(|n| format!(" in network namespace {n}"))
        .unwrap_or_default()
}

/// A base chain of the found firewall that openings go into.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FoundChain {
    /// `ip`, `ip6` or `inet`.
    pub family: String,
    /// Its table.
    pub table: String,
    /// Its name.
    pub name: String,
    /// Incoming (input hook) or forwarded (forward hook).
    pub path: TrafficPath,
}

/// The firewall a node should have.
#[derive(Debug, Clone, Copy)]
pub struct Want<'a> {
    /// The guard.
    pub guard: &'a ::nftables::schema::Nftables<'static>,
    /// The base ruleset (managed node) or none (adopted node: removed if present).
    pub base: Option<&'a ::nftables::schema::Nftables<'static>>,
    /// The settings the openings are read with.
    pub settings: &'a Settings,
    /// The openings, converged through every foreign base chain that stays in force.
    pub openings: &'a [Opening],
    /// Tables of the found firewall to remove (the flip).
    pub remove_tables: &'a [(String, String)],
    /// Families whose iptables INPUT chain is the predecessor's in a table the container
    /// runtime shares: emptied, policy accept (the flip), the rest of the table left alone.
    pub empty_inputs: &'a [String],
    /// The found firewall as recorded at adoption, on an adopted node: where the flip removed
    /// its tables (the base ruleset is in force), those are loaded back in the transaction that
    /// removes the base ruleset, with the openings in their chains — no port the found firewall
    /// and the generation both open is closed on the way back across the flip.
    pub restore: Option<&'a Dump>,
    /// The daemon that kept the found firewall, as recorded at adoption (in either mode): the
    /// flip stops it, a rollback across the flip starts it again.
    pub daemon: Option<daemon::Daemon>,
}

/// What a converge did to the base ruleset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BaseChange {
    /// Loaded, or replaced by the wanted one (a managed node).
    Loaded,
    /// Removed (an adopted node: back across the flip).
    Removed,
}

/// What a converge did.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Converged {
    /// What happened to the base ruleset, if anything.
    pub base: Option<BaseChange>,
    /// Whether the guard was written.
    pub guard: bool,
    /// Tables of the found firewall removed (the flip).
    pub removed_tables: usize,
    /// Rules of the mesh's inserted into found chains.
    pub inserted: usize,
    /// Rules of the mesh's removed from found chains (no longer wanted, or to be rewritten).
    pub removed: usize,
    /// The predecessor's INPUT chains emptied in tables the container runtime shares (the
    /// flip).
    pub emptied_inputs: usize,
    /// The found firewall's tables (`family name`) loaded back from the dump: back across the
    /// flip.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restored: Vec<String>,
    /// The unit of the found firewall's daemon, stopped and disabled (the flip).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemon_stopped: Option<String>,
    /// The unit of the found firewall's daemon, started again (back across the flip).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemon_started: Option<String>,
}

/// The ruleset in force, as read for the flip preview.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// nft's JSON listing (its `nftables` array).
    pub ruleset: Vec<serde_json::Value>,
    /// `iptables-nft-save` per family (`ip`, `ip6`) whose tables nft's JSON shows with `xt`
    /// matches or targets.
    pub saved: std::collections::BTreeMap<String, String>,
    /// `iptables-legacy-save` per family whose legacy rules are in force (x_tables, which
    /// nft's listing does not show).
    pub legacy: std::collections::BTreeMap<String, String>,
}

/// What the activator needs of a node's firewall.
pub trait Firewall: Send + Sync {
    /// The firewall in force besides the mesh's own tables — its kind and a dump to load it
    /// back from — or `None` when there is none. A kind no driver speaks is refused
    /// ([`FirewallError::NotCovered`]).
    fn detect(&self) -> Result<Option<(mesh_lib::record::FirewallKind, String)>, FirewallError>;

    /// Puts `want` in force; idempotent.
    fn converge(&self, want: &Want<'_>) -> Result<Converged, FirewallError>;

    /// What [`Firewall::converge`] would change, changing nothing: the drift from `want`.
    fn check(&self, want: &Want<'_>) -> Result<Converged, FirewallError>;

    /// The network namespace it works in (`None`: the machine's own).
    fn netns(&self) -> Option<&str>;

    /// The ruleset in force, whole, for the flip preview. A firewall that touches nothing has
    /// none.
    fn listing(&self) -> Result<Listing, FirewallError> {
        Ok(Listing::default())
    }
}

impl<F: Firewall + ?Sized> Firewall for std::sync::Arc<F> {
    fn detect(&self) -> Result<Option<(mesh_lib::record::FirewallKind, String)>, FirewallError> {
        (**self).detect()
    }

    fn converge(&self, want: &Want<'_>) -> Result<Converged, FirewallError> {
        (**self).converge(want)
    }

    fn check(&self, want: &Want<'_>) -> Result<Converged, FirewallError> {
        (**self).check(want)
    }

    fn netns(&self) -> Option<&str> {
        (**self).netns()
    }

    fn listing(&self) -> Result<Listing, FirewallError> {
        (**self).listing()
    }
}

/// One call made to a [`Recording`] firewall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `detect`.
    Detect,
    /// `converge`: what was wanted.
    Converge {
        /// Whether a base ruleset was wanted (a managed node).
        base: bool,
        /// The openings, as their comments.
        openings: Vec<String>,
        /// The tables to remove.
        remove_tables: Vec<(String, String)>,
        /// The shared INPUT chains to empty.
        empty_inputs: Vec<String>,
        /// The tables of the found firewall's dump, given to load back what the flip removed.
        restore: Vec<String>,
    },
    /// `check`.
    Check,
}

/// A firewall that touches nothing: it records what it is asked and answers as if a firewall
/// of `found` kind were in force, so the activator's decisions can be checked without a kernel.
#[derive(Debug, Default)]
pub struct Recording {
    /// The firewall `detect` reports.
    pub found: Option<(mesh_lib::record::FirewallKind, String)>,
    calls: Mutex<Vec<Call>>,
}

impl Recording {
    /// A recording firewall that finds `found`.
    pub fn new(found: Option<(mesh_lib::record::FirewallKind, String)>) -> Self {
        Self {
            found,
            calls: Mutex::new(Vec::new()),
        }
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn record(&self, call: Call) {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(call);
    }
}

impl Firewall for Recording {
    fn detect(&self) -> Result<Option<(mesh_lib::record::FirewallKind, String)>, FirewallError> {
        self.record(Call::Detect);
        Ok(self.found.clone())
    }

    fn converge(&self, want: &Want<'_>) -> Result<Converged, FirewallError> {
        self.record(Call::Converge {
            base: want.base.is_some(),
            openings: want
                .openings
                .iter()
                .map(mesh_lib::firewall::opening_comment)
                .collect(),
            remove_tables: want.remove_tables.to_vec(),
            empty_inputs: want.empty_inputs.to_vec(),
            restore: want
                .restore
                .map(|d| d.tables.keys().cloned().collect())
                .unwrap_or_default(),
        });
        Ok(Converged::default())
    }

    fn check(&self, _want: &Want<'_>) -> Result<Converged, FirewallError> {
        self.record(Call::Check);
        Ok(Converged::default())
    }

    fn netns(&self) -> Option<&str> {
        None
    }
}
