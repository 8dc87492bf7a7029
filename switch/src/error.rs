//! Why an activation failed, and how the binary is to report it (exit codes live in the binary).

use std::path::PathBuf;

use mesh_lib::store::StoreError;
use mesh_lib::GenerationId;

use mesh_node::host::HostError;
use mesh_node::lock::LockError;
use mesh_node::plan::PlanError;
use mesh_node::root::RootError;
pub use mesh_node::{Kind, NodeError};

/// Why an activation failed. Each says what was changed: nothing, unless it says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum ActivateError {
    /// The node's ground failed: its lock, store, root or state directory, or what was asked
    /// does not fit it.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// A generation from elsewhere that no trusted signer vouches for.
    #[error("{0}; nothing was changed")]
    Untrusted(Box<mesh_lib::trust::Refusal>),
    /// A statement from elsewhere that is not one to act on: another node's, an old one
    /// replayed, an expired one, one no trusted signer signed.
    #[error("{0}; nothing was changed")]
    Statement(mesh_lib::statement::StatementError),
    /// A switch from elsewhere to a generation no statement the node accepted names.
    #[error("no statement this node accepted names {target}{}; a switch from elsewhere needs one (`mesh deploy --sign`, `mesh push --sign`); nothing was changed", .stated.as_ref().map(|s| format!(" (its newest: {s})")).unwrap_or_default())]
    Unstated {
        /// The generation asked for.
        target: GenerationId,
        /// The newest statement the node accepted.
        stated: Option<String>,
    },
    /// The node's trusted signers cannot be read: nothing from elsewhere is accepted.
    #[error("the trusted signers {path}: {why}; nothing from elsewhere is accepted, nothing was changed")]
    Signers {
        /// Their file.
        path: mesh_lib::TargetPath,
        /// Why.
        why: String,
    },
    /// A secret the node cannot decrypt: not encrypted to its host key, the key missing, the
    /// ciphertext damaged. Checked before anything changes.
    #[error("{item}: cannot decrypt secret {why}; nothing was changed")]
    Secret {
        /// What is made from it: a file's path, or a container's environment variable.
        item: String,
        /// Which secret, why, and its recipients (never its content).
        why: String,
        /// Whether the node's key could not be read at all (a system failure, not the input's).
        key_missing: bool,
    },
    /// The plan refused.
    #[error("{0}; nothing was changed")]
    Plan(#[from] PlanError),
    /// The host store failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// Not enough space under the root.
    #[error("not enough space under {root}: the switch writes {need} bytes, {free} are free; nothing was changed")]
    NoSpace {
        /// The root.
        root: PathBuf,
        /// Bytes needed (with a margin per file).
        need: u64,
        /// Bytes free.
        free: u64,
    },
    /// The root is mounted read-only.
    #[error("{root} is mounted read-only; nothing was changed")]
    ReadOnly {
        /// The root.
        root: PathBuf,
    },
    /// Writing the new files failed before any declared path changed.
    #[error("{source}; nothing was changed")]
    NotStarted {
        /// What failed.
        #[source]
        source: RootError,
    },
    /// A file operation failed midway; what had changed was put back.
    #[error("{source}; the files already changed were put back, the node is still at its previous generation")]
    RolledBack {
        /// What failed.
        #[source]
        source: RootError,
    },
    /// A file operation failed and putting back failed too: the journal stays for the next run.
    #[error("{source}; {}", cut_short(.put_back, .not_put_back))]
    Interrupted {
        /// What failed.
        #[source]
        source: RootError,
        /// The files the switch had changed that were put back as they were.
        put_back: Vec<mesh_lib::TargetPath>,
        /// Those that could not be, each with why.
        not_put_back: Vec<(mesh_lib::TargetPath, String)>,
    },
    /// A stored generation that breaks the model's invariants (built elsewhere, or crafted).
    #[error("generation {} is not one the compiler would build: {why}; nothing was changed", .id.short())]
    InvalidGeneration {
        /// The generation.
        id: GenerationId,
        /// What is wrong.
        why: String,
    },
    /// The Docker engine failed or does not answer.
    #[error("{0}")]
    Docker(#[from] mesh_containers::DockerError),
    /// A found container the generation does not hold would be replaced.
    #[error("container {name} was found on this adopted node and the generation does not hold it: switching would replace it (switch the declaration on this node, which records and holds it); nothing was changed")]
    FoundContainerNotHeld {
        /// Its name.
        name: String,
    },
    /// Found containers would be recreated without settings no declaration can say, and no one
    /// accepted losing them.
    #[error("{}", gaps_refused(.containers))]
    GapsNotAccepted {
        /// Each container, with the gaps it would lose.
        containers: Vec<crate::gaps::Unaccepted>,
    },
    /// Images a container to create needs are not on the engine, and are named by a tag alone.
    #[error("image{} not on the Docker engine: {}; the mesh fetches only images pinned by digest (REPO:TAG@sha256:…): pin {} (in the declaration, or in the fleet's images.lock with `mesh images lock`), or docker pull or docker load {} first; nothing was changed", if .images.len() == 1 { " is" } else { "s are" }, .images.join(", "), if .images.len() == 1 { "it" } else { "them" }, if .images.len() == 1 { "it" } else { "them" })]
    MissingImages {
        /// The images.
        images: Vec<String>,
    },
    /// An image the generation pins could not be fetched, before anything changed.
    #[error("{0}; the switch is refused, nothing was changed")]
    Images(mesh_containers::images::FetchFailed),
    /// Container steps failed after the files of the new generation were put in place.
    #[error("{}", unfinished(.target, .previous.as_ref(), .failed))]
    ContainersUnfinished {
        /// The generation being switched to.
        target: GenerationId,
        /// The one in force before (`None` on a first switch).
        previous: Option<GenerationId>,
        /// Every step that failed, with the engine's message.
        failed: mesh_containers::StepsFailed,
    },
    /// The generation declares units the mesh must run, and no systemd answers.
    #[error("{0}, and the generation declares units the mesh runs; nothing was changed")]
    NoSystemd(#[source] mesh_systemd::SystemdError),
    /// A call to systemd failed.
    #[error(transparent)]
    Systemd(#[from] mesh_systemd::SystemdError),
    /// The firewall refused (nft's own message); the kernel's ruleset is unchanged.
    #[error("{0}; the firewall was left as it was and no file was changed")]
    Firewall(#[from] mesh_reach::firewall::FirewallError),
    /// The private network's range overlaps an address or route already on the node.
    #[error("the private network {range} (this node {address}) overlaps what is on the node already:\n  {}\nthe range must stay clear of the node's other networks; nothing was changed", .collisions.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    PrivateNetwork {
        /// The declared range.
        range: ipnet::Ipv4Net,
        /// The node's declared address in it.
        address: std::net::Ipv4Addr,
        /// What it overlaps, each with its interface.
        collisions: Vec<mesh_reach::interfaces::Collision>,
    },
    /// The node's addresses and routes cannot be read.
    #[error("{0}; nothing was changed")]
    Interfaces(#[from] mesh_reach::interfaces::InterfacesError),
}

impl ActivateError {
    /// How to report it.
    pub fn kind(&self) -> Kind {
        match self {
            ActivateError::Node(e) => e.kind(),
            ActivateError::Untrusted(_)
            | ActivateError::Statement(_)
            | ActivateError::Unstated { .. }
            | ActivateError::Signers { .. } => Kind::Refused,
            ActivateError::Plan(PlanError::UnknownId { .. }) => Kind::User,
            ActivateError::Plan(_) => Kind::Refused,
            ActivateError::NotStarted {
                source:
                    RootError::Symlink { .. } | RootError::Folder { .. } | RootError::NotAFolder { .. },
            } => Kind::Refused,
            ActivateError::InvalidGeneration { .. } => Kind::User,
            ActivateError::Secret { key_missing, .. } => {
                if *key_missing {
                    Kind::System
                } else {
                    Kind::User
                }
            }
            ActivateError::FoundContainerNotHeld { .. }
            | ActivateError::MissingImages { .. }
            | ActivateError::GapsNotAccepted { .. } => Kind::Refused,
            ActivateError::Images(failed) if failed.refused() => Kind::Refused,
            ActivateError::Firewall(mesh_reach::firewall::FirewallError::NotCovered(_)) => {
                Kind::Refused
            }
            ActivateError::PrivateNetwork { .. } => Kind::Refused,
            ActivateError::Interfaces(e) if e.source.kind() == std::io::ErrorKind::NotFound => {
                Kind::User
            }
            // `--netns` names a namespace that does not exist: the user's input.
            ActivateError::Firewall(mesh_reach::firewall::FirewallError::Netns {
                source, ..
            }) if source.kind() == std::io::ErrorKind::NotFound => Kind::User,
            _ => Kind::System,
        }
    }
}

/// What an interrupted files phase says of what it had changed: which files were put back,
/// which were not and why, and the way on.
fn cut_short(put_back: &[mesh_lib::TargetPath], not: &[(mesh_lib::TargetPath, String)]) -> String {
    let list = |paths: Vec<String>| paths.join(", ");
    let back = if put_back.is_empty() {
        "none of the files it had changed was put back".to_owned()
    } else {
        format!(
            "put back: {}",
            list(put_back.iter().map(ToString::to_string).collect())
        )
    };
    format!(
        "{back}; not put back: {}; the node is between two generations and its journal stays: once the cause is gone, run the switch again to finish it, or `mesh rollback` to go back",
        list(not.iter().map(|(p, why)| format!("{p} ({why})")).collect())
    )
}

/// What a refusal to lose gaps says: each container and what it holds, and how to accept.
fn gaps_refused(containers: &[crate::gaps::Unaccepted]) -> String {
    format!(
        "recreating {} would lose what no declaration can say:\n  {}\nthe found {} kept as it is; if the loss is meant, accept it on the container (`accept_gaps = [\"GAP\", …]`, or [\"*\"]) or with `--accept-gap CONTAINER[:GAP]`; nothing was changed",
        if containers.len() == 1 { "a found container" } else { "found containers" },
        containers
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n  "),
        if containers.len() == 1 { "container is" } else { "containers are" },
    )
}

/// What a container phase that failed says: each failure with the engine's message, then where
/// the node stands and the way back.
fn unfinished(
    target: &GenerationId,
    previous: Option<&GenerationId>,
    failed: &mesh_containers::StepsFailed,
) -> String {
    let what = match failed.0.as_slice() {
        [one] => format!("{one}: a container step failed"),
        many => format!(
            "{} container steps failed:\n  {}\nthey failed",
            many.len(),
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n  ")
        ),
    };
    let back = match previous {
        Some(p) => format!(
            "{} is still the generation in force. Fix the cause and run the switch again, or go back with `mesh switch --generation {}`",
            p.short(),
            p.short()
        ),
        None => "no generation was in force before. Fix the cause and run the switch again".to_owned(),
    };
    format!(
        "{what} after the files of {} were put in place; {back}",
        target.short()
    )
}

/// The ground's own failures, through [`NodeError`]: the lock, the store, the root.
macro_rules! through_node {
    ($($error:ty),*) => {$(
        impl From<$error> for ActivateError {
            fn from(e: $error) -> Self {
                ActivateError::Node(e.into())
            }
        }
    )*};
}
through_node!(LockError, StoreError, RootError);
