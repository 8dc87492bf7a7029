//! The node record: the machine-side facts the compiler needs — the node's mode, its pinned port
//! settings, what was found on it, and which modules are taken.
//!
//! Stored as canonical JSON in its indented form (sorted keys, one field per line): versioned by
//! [`RECORD_FORMAT`], diff-friendly, and exportable so that CI builds the very generation the
//! node builds. An absent record means a managed node with nothing found.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::canonical::{to_canonical_pretty, CanonicalError};
use crate::id::BlobHash;
use crate::model::{ContainerName, FileMode, Mode, ModuleName, NodeName, Port, UnitName};
use crate::path::TargetPath;

/// The record format this mesh reads and writes.
pub const RECORD_FORMAT: u32 = 1;

/// A file found on the node at a declared path, with no record that the mesh wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FoundFile {
    /// The original content's hash (the content itself is a blob in the store).
    pub hash: BlobHash,
    /// Its permission bits.
    pub mode: FileMode,
    /// Its owner's user name (or uid, when it has no name).
    pub owner: String,
    /// Its group's name (or gid).
    pub group: String,
    /// Its owner's uid, as found (absent in records of an older mesh): what a restore writes
    /// back, whatever the name resolves to then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Its group's gid, as found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
}

/// A container found under a declared name without the mesh's label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FoundContainer {
    /// The hash of its recorded inspect data (a blob in the store).
    pub spec: BlobHash,
    /// Whether it ran when it was found: a rollback across the take starts it again only then.
    #[serde(default = "running_by_default", skip_serializing_if = "is_running")]
    pub running: bool,
}

fn running_by_default() -> bool {
    true
}

fn is_running(running: &bool) -> bool {
    *running
}

/// A systemd unit found on an adopted node under a declared unit's name: systemd knew it, from a
/// file the mesh did not write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FoundUnit {
    /// The file systemd loaded it from (its `FragmentPath`).
    pub fragment: String,
    /// Whether it was active when found: a rollback across the take starts it again, or stops
    /// it, as it was.
    pub active: bool,
    /// Whether it was enabled when found: a rollback across the take enables or disables it as
    /// it was.
    pub enabled: bool,
}

/// The kind of firewall found in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FirewallKind {
    /// Native nftables tables.
    Nftables,
    /// Rules made by `iptables` on its nft backend.
    IptablesNft,
    /// Legacy iptables (x_tables, which nft does not see), as `iptables-legacy` writes them.
    IptablesLegacy,
    /// firewalld: a daemon that owns its nftables table and rewrites it on every reload; the
    /// mesh speaks to it over D-Bus.
    Firewalld,
    /// ufw: its own chains in iptables, hooked from INPUT, OUTPUT and FORWARD, rewritten by
    /// `ufw reload`.
    Ufw,
}

/// The firewall found in force at adoption.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FoundFirewall {
    /// Which kind it is.
    pub kind: FirewallKind,
    /// The hash of its dump (a blob in the store), for a rollback after the flip.
    pub dump: BlobHash,
}

/// Everything found on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Found {
    /// Found files by path.
    #[serde(default)]
    pub files: BTreeMap<TargetPath, FoundFile>,
    /// Found containers by name.
    #[serde(default)]
    pub containers: BTreeMap<ContainerName, FoundContainer>,
    /// The found firewall.
    #[serde(default)]
    pub firewall: Option<FoundFirewall>,
    /// Found systemd units by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub units: BTreeMap<UnitName, FoundUnit>,
}

/// The node record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeRecord {
    /// [`RECORD_FORMAT`].
    pub format: u32,
    /// The node it describes.
    pub node: NodeName,
    /// Adopted or managed.
    pub mode: Mode,
    /// Port settings pinned at genesis; they override the declaration's.
    #[serde(default)]
    pub pinned: BTreeMap<String, Port>,
    /// What was found.
    #[serde(default)]
    pub found: Found,
    /// Modules taken on this node.
    #[serde(default)]
    pub taken: BTreeSet<ModuleName>,
    /// Where the node's trusted signers are, when not [`crate::trust::TRUSTED_SIGNERS`] (set at
    /// genesis).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_signers: Option<crate::TargetPath>,
    /// Where the node's host key (the `ssh-ed25519` private key its secrets are encrypted to)
    /// is, when not [`crate::secret::HOST_KEY`] (set at genesis).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_key: Option<crate::TargetPath>,
}

/// A record that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Not JSON, or not a record.
    #[error("not a node record: {0}")]
    Parse(#[from] serde_json::Error),
    /// Written by a newer mesh.
    #[error("record format {found} is not one this mesh reads (it reads format {RECORD_FORMAT})")]
    Format {
        /// The format it claims.
        found: u32,
    },
    /// Not a regular file (a fifo, a device: `--record /dev/zero`).
    #[error("not a regular file")]
    NotAFile,
    /// Larger than any record.
    #[error("larger than {} MiB, which no node record is", MAX_RECORD_BYTES >> 20)]
    TooLarge,
    /// It cannot be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The most bytes a node record is read to: far more than the record of a node with a hundred
/// thousand found files, and a bound on what `--record FILE` can make the mesh hold in memory.
pub const MAX_RECORD_BYTES: u64 = 64 << 20;

/// Reads and parses the record at `path`: a regular file (opened without waiting, so a fifo
/// is refused rather than waited on) of at most [`MAX_RECORD_BYTES`].
pub fn read(path: &std::path::Path) -> Result<NodeRecord, RecordError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(RecordError::NotAFile);
    }
    let mut bytes = Vec::new();
    file.take(MAX_RECORD_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err(RecordError::TooLarge);
    }
    NodeRecord::parse(&bytes)
}

/// Where a node's record lives in its state directory.
pub fn record_path(state: &std::path::Path) -> std::path::PathBuf {
    state.join("record.json")
}

impl NodeRecord {
    /// The record of a node never adopted: managed, nothing found, nothing pinned.
    pub fn managed(node: NodeName) -> Self {
        Self {
            format: RECORD_FORMAT,
            node,
            mode: Mode::Managed,
            pinned: BTreeMap::new(),
            found: Found::default(),
            taken: BTreeSet::new(),
            trusted_signers: None,
            host_key: None,
        }
    }

    /// Parses a record, checking its format version first.
    pub fn parse(bytes: &[u8]) -> Result<Self, RecordError> {
        #[derive(Deserialize)]
        struct Version {
            format: u32,
        }
        let version: Version = serde_json::from_slice(bytes)?;
        if version.format != RECORD_FORMAT {
            return Err(RecordError::Format {
                found: version.format,
            });
        }
        Ok(serde_json::from_slice(bytes)?)
    }

    /// The record as it is once `generation` is in force: its mode, and on an adopted node the
    /// modules it has taken (a managed node's generation says nothing of takes: they stay).
    /// Whatever put the generation in force — a take, a flip, a rollback, a switch by id — the
    /// record then says what is in force.
    pub fn following(&self, generation: &crate::model::Generation) -> Self {
        let mut record = self.clone();
        record.mode = generation.mode;
        if generation.mode == Mode::Adopted {
            record.taken = generation
                .modules
                .iter()
                .filter(|(_, s)| **s == crate::model::ModuleState::Taken)
                .map(|(m, _)| m.clone())
                .collect();
        }
        record
    }

    /// Every blob the record references: found originals, container specs, the firewall dump.
    pub fn blobs(&self) -> impl Iterator<Item = BlobHash> + '_ {
        self.found
            .files
            .values()
            .map(|f| f.hash)
            .chain(self.found.containers.values().map(|c| c.spec))
            .chain(self.found.firewall.iter().map(|f| f.dump))
    }

    /// The canonical, indented bytes of the record.
    pub fn to_bytes(&self) -> Result<Vec<u8>, CanonicalError> {
        to_canonical_pretty(self)
    }
}
