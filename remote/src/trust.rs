//! The node's side of trust: a generation that arrived from elsewhere (`switch --generation`, a
//! deploy, a pull) is switched to only when one of its signatures is by a signer the node
//! trusts — checked before anything changes. The trusted signers are a file under the root
//! (`/etc/mesh/trusted-signers`, or where the node record says since genesis), managed like any
//! file once the node is managed; no file, no check. A generation that was in force before (a
//! rollback to it) was accepted then and needs no new signature; a local `mesh switch NODE.ncl`
//! builds its own and is not asked (its operator is root there anyway).
//!
//! The file is a trust root only if no one but root could have written it: it and every folder
//! above it, up to and including the root, must be owned by root (or by the user the mesh runs
//! as) and writable by no group and no other user — sshd's `StrictModes` — and none of them a
//! symlink (each is looked at with `lstat`). Otherwise everything from elsewhere is refused
//! (exit 2), naming what is wrong and the fix. A file that is absent under a folder others may
//! write is refused the same way: its absence, which would mean "trust anything", is not one
//! to believe.

use std::path::Path;

use mesh_lib::trust::{Signature, TrustedSigners, TRUSTED_SIGNERS};
use mesh_lib::{GenerationId, TargetPath};

use mesh_node::io_err;
use mesh_node::root::Observed;
use mesh_node::Node;
use mesh_switch::ActivateError;

/// How a generation was let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// The node trusts no signer: nothing is checked.
    NoPolicy,
    /// It was in force before.
    InForceBefore,
    /// Signed by this trusted signer.
    SignedBy(String),
}

/// Where the node's trusted signers are.
pub fn signers_path(node: &Node) -> Result<TargetPath, ActivateError> {
    Ok(node
        .record()?
        .and_then(|r| r.trusted_signers)
        .unwrap_or_else(|| TargetPath::new(TRUSTED_SIGNERS).expect("a valid path")))
}

/// The node's trusted signers (`None`: no file, nothing is checked).
pub fn signers(node: &Node) -> Result<Option<TrustedSigners>, ActivateError> {
    let path = signers_path(node)?;
    if !trust_root_holds(node.root.path(), &path)? {
        return Ok(None);
    }
    match node.root.observe(&path)? {
        (Observed::Absent, _) => Ok(None),
        (Observed::File(_), Some(bytes)) => {
            let text = String::from_utf8_lossy(&bytes);
            TrustedSigners::parse(&text)
                .map(Some)
                .map_err(|e| ActivateError::Signers {
                    path,
                    why: e.to_string(),
                })
        }
        _ => Err(ActivateError::Signers {
            path,
            why: "not a regular file".into(),
        }),
    }
}

/// Whether generation `id`, arrived from elsewhere, may be switched to: refused (exit 2,
/// nothing changed) unless the node trusts no signer, it was in force before, or one of its
/// signatures is by a signer the node trusts.
pub fn check(node: &Node, id: &GenerationId) -> Result<Accepted, ActivateError> {
    let Some(signers) = signers(node)? else {
        return Ok(Accepted::NoPolicy);
    };
    let log = node
        .profile
        .log()
        .map_err(io_err("reading the profile in", &node.state))?;
    if log.iter().any(|e| e.id == *id) {
        return Ok(Accepted::InForceBefore);
    }
    signed_by(node, &signers, id)
}

/// Whether generation `id` may be switched to at the request of a deploy key: as
/// [`check`], but having been in force before is no pass — a signer the node
/// trusts *now* must vouch for it, so a generation signed only by a signer since removed
/// (or never signed, from before the node trusted any) is refused.
pub fn check_now(node: &Node, id: &GenerationId) -> Result<Accepted, ActivateError> {
    match signers(node)? {
        Some(signers) => signed_by(node, &signers, id),
        None => Ok(Accepted::NoPolicy),
    }
}

/// The signer among `signers` of one of the signatures the store keeps for `id`.
fn signed_by(
    node: &Node,
    signers: &TrustedSigners,
    id: &GenerationId,
) -> Result<Accepted, ActivateError> {
    let signatures: Vec<Signature> = node
        .store
        .signatures(id)?
        .into_iter()
        .filter_map(|(_, text)| Signature::parse(&text).ok())
        .collect();
    signers
        .accept(id, &signatures)
        .map(|s| Accepted::SignedBy(s.to_string()))
        .map_err(|refusal| ActivateError::Untrusted(Box::new(refusal)))
}

/// Whether the trusted signers at `path` under `root` are there (`false`: no such file) and
/// are a trust root: the file and each folder above it up to and including `root` owned by
/// root or by the user the mesh runs as, writable by no group and no other user, none of them
/// a symlink. Each component under the root is looked at with `lstat`, the root itself as it
/// is named (`--root` may be a link to the folder it means). Every fault is named with its fix.
fn trust_root_holds(root: &Path, path: &TargetPath) -> Result<bool, ActivateError> {
    let refuse = |why: String| ActivateError::Signers {
        path: path.clone(),
        why,
    };
    let me = rustix::process::geteuid().as_raw();
    let meta = std::fs::metadata(root).map_err(io_err("reading", root))?;
    let mut faults = Vec::new();
    judge_owner_and_mode(root, &meta, me, &mut faults);
    let parts: Vec<&str> = path.components().collect();
    let mut at = root.to_path_buf();
    let mut absent = false;
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let last = i + 1 == parts.len();
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                absent = true;
                break;
            }
            Err(e) => return Err(io_err("reading", &at)(e).into()),
        };
        let kind = meta.file_type();
        if kind.is_symlink() {
            return Err(refuse(format!(
                "{} is a symlink: the trusted signers are read through none, put the {} itself \
                 there",
                at.display(),
                if last { "file" } else { "folder" }
            )));
        }
        if !last && !kind.is_dir() {
            return Err(refuse(format!("{} is not a folder", at.display())));
        }
        if last && !kind.is_file() {
            return Err(refuse(format!("{} is not a regular file", at.display())));
        }
        judge_owner_and_mode(&at, &meta, me, &mut faults);
    }
    if faults.is_empty() {
        return Ok(!absent);
    }
    // No file under a folder others may write is no answer either: whoever can write the
    // folder may have removed it, to have a node that trusts no signer accept anything.
    Err(refuse(format!(
        "{}{}; the file and every folder above it up to the root must be owned by root{} and \
         writable by no group or other user (as sshd's StrictModes wants): whoever can write \
         one of them chooses whom the node trusts",
        if absent {
            "there is no such file, and whoever removed it could have: "
        } else {
            ""
        },
        faults.join("; "),
        if me == 0 {
            String::new()
        } else {
            format!(" or uid {me} (the user the mesh runs as)")
        }
    )))
}

/// What is wrong with `at`'s owner and mode for a trust root, each with its fix.
fn judge_owner_and_mode(at: &Path, meta: &std::fs::Metadata, me: u32, faults: &mut Vec<String>) {
    use std::os::unix::fs::MetadataExt;
    let shown = shell_word(at);
    if meta.uid() != 0 && meta.uid() != me {
        let fix = if me == 0 {
            format!("chown root:root {shown}")
        } else {
            format!("chown root:root {shown}, or chown {me} {shown}")
        };
        faults.push(format!(
            "{} is owned by uid {} (fix: {fix})",
            at.display(),
            meta.uid()
        ));
    }
    let writable = match (meta.mode() & 0o020 != 0, meta.mode() & 0o002 != 0) {
        (true, true) => Some("its group and every user"),
        (true, false) => Some("its group"),
        (false, true) => Some("every user"),
        (false, false) => None,
    };
    if let Some(whom) = writable {
        faults.push(format!(
            "{} is writable by {whom} (mode {:04o}; fix: chmod go-w {shown})",
            at.display(),
            meta.mode() & 0o7777
        ));
    }
}

/// `path` as one word of a shell command: quoted when it holds anything but the plainest
/// characters.
fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    if !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@%,".contains(&b))
    {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// Whether a generation offered by a registry may be fetched at all: one of `armored` (its
/// signatures, as the registry gave them) must be valid over `id` and by a signer the node
/// trusts — judged before anything else of it is fetched. Unlike [`check`], a
/// node that trusts no signer accepts nothing this way: a registry is not the operator.
pub fn judge_offer(
    node: &Node,
    id: &GenerationId,
    armored: &[String],
) -> Result<String, ActivateError> {
    let Some(signers) = signers(node)? else {
        return Err(ActivateError::Signers {
            path: signers_path(node)?,
            why: "there is no such file: a pull switches only to a generation a signer the \
                  node trusts signed"
                .into(),
        });
    };
    let signatures: Vec<Signature> = armored
        .iter()
        .filter_map(|text| Signature::parse(text).ok())
        .collect();
    signers
        .accept(id, &signatures)
        .map(|s| s.to_string())
        .map_err(|refusal| ActivateError::Untrusted(Box::new(refusal)))
}
