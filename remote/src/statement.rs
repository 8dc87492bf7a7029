//! The node's side of statements ([`mesh_lib::statement`]): what a node was told to run from
//! elsewhere, judged and remembered.
//!
//! The newest statement the node accepted is kept whole (its text and signatures) in
//! `STATE/statement.json`, written atomically, owner-only. Its sequence is the floor: a
//! statement not above it is refused, unless it is that very statement again. A statement is
//! judged — signer trusted now, this node's, newer, not expired — before anything else of what
//! it names is fetched or stored, and kept only once what it names passed its own checks, so a
//! refusal changes nothing. A node that trusts no signer (no trusted-signers file) judges
//! nothing, as it judges no generation; a pull refuses on such a node anyway.
//!
//! The node's own name, against which a statement is judged, is its record's, else the name
//! of the generation in force, else the newest statement's; a node that has none of them (new,
//! never switched) takes the name its first statement gives, and the generation it names must
//! bear that name too.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use mesh_lib::atomic;
use mesh_lib::statement::{Judged, Offer, Signed, Statement, StatementError};
use mesh_lib::trust::Signature;
use mesh_lib::GenerationId;
use serde::{Deserialize, Serialize};

use mesh_node::io_err;
use mesh_node::Node;
use mesh_switch::ActivateError;

/// Where the newest accepted statement is kept.
pub fn path(state: &Path) -> PathBuf {
    state.join("statement.json")
}

/// The newest statement a node accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// It, as it came.
    #[serde(flatten)]
    pub signed: Signed,
    /// Who signed it, as the node's trusted signers name them.
    pub signer: String,
    /// When the node accepted it (RFC 3339).
    pub accepted: String,
}

impl Kept {
    /// The newest statement kept in `state`, if any.
    pub fn load(state: &Path) -> Result<Option<Self>, ActivateError> {
        let file = path(state);
        match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                ActivateError::Statement(StatementError::Malformed(format!(
                    "{}: {e} (remove it to accept statements afresh)",
                    file.display()
                )))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("reading", &file)(e).into()),
        }
    }

    /// The statement it holds.
    pub fn statement(&self) -> Option<Statement> {
        Statement::parse(&self.signed.statement).ok()
    }
}

/// A statement judged fit, to be kept once what it names passed its own checks.
#[derive(Debug, Clone)]
pub struct Fit {
    /// Judged new, or the newest again.
    pub judged: Judged,
    /// It, as it came.
    pub signed: Signed,
}

impl Fit {
    /// The statement.
    pub fn statement(&self) -> &Statement {
        self.judged.statement()
    }
}

/// The node's own name, as far as it knows one (see the module's doc).
pub fn own_name(node: &Node) -> Result<Option<String>, ActivateError> {
    if let Some(record) = node.record()? {
        return Ok(Some(record.node.to_string()));
    }
    if let Some((_, _, g)) = node.current()? {
        return Ok(Some(g.node.to_string()));
    }
    Ok(Kept::load(&node.state)?
        .and_then(|k| k.statement())
        .map(|s| s.node))
}

/// Judges `signed` at `now` (see [`Statement::judge`]): `Ok(None)` when the node trusts no
/// signer (nothing is judged). `tag` is the name the statement was fetched under, which
/// must be the node's when it knows none of its own yet.
pub fn judge(
    node: &Node,
    signed: &Signed,
    tag: Option<&str>,
    now: SystemTime,
) -> Result<Option<Fit>, ActivateError> {
    let Some(signers) = crate::trust::signers(node)? else {
        return Ok(None);
    };
    let name = own_name(node)?.or_else(|| tag.map(str::to_owned));
    let newest = Kept::load(&node.state)?;
    let judged = Statement::judge(
        signed,
        &signers,
        name.as_deref(),
        newest.as_ref().map(|k| &k.signed),
        now,
    )
    .map_err(ActivateError::Statement)?;
    Ok(Some(Fit {
        judged,
        signed: signed.clone(),
    }))
}

/// Keeps `fit` as the newest statement (nothing to write when it is the newest again).
pub fn keep(node: &Node, fit: &Fit) -> Result<(), ActivateError> {
    let Judged::New { signer, .. } = &fit.judged else {
        return Ok(());
    };
    let kept = Kept {
        signed: fit.signed.clone(),
        signer: signer.clone(),
        accepted: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
    };
    let file = path(&node.state);
    let bytes = serde_json::to_vec_pretty(&kept).expect("a statement encodes");
    Ok(atomic::write_file(&file, &bytes, 0o600).map_err(io_err("writing", &file))?)
}

/// Judges what a deploy offers (see [`Offer`]) before any of its objects is sent: on a
/// node that trusts signers, a signer it trusts now must have signed the generation, and
/// the statement must be fit and name it. Only then are the valid signatures stored and
/// the statement kept; a refusal writes nothing. A node that trusts no signer keeps the
/// signatures valid over the id, and judges nothing.
pub fn accept_offer(node: &Node, offer: &Offer, now: SystemTime) -> Result<(), ActivateError> {
    let fit = judge_offer_whole(node, offer, now)?;
    if let Some(fit) = &fit {
        keep(node, fit)?;
    }
    Ok(())
}

/// Judges what a deploy offers to stage exactly as [`accept_offer`] judges what it
/// offers to switch to, and keeps the valid signatures — but not the statement: a stage
/// puts nothing in force, so the floor of sequences stays where it was, and the later
/// deploy or pull of the same generation (a statement of its own, or this one again) is
/// judged afresh, not refused as old. The statement judged fit, for the stage to check
/// what it names (`None` on a node that trusts no signer).
pub fn judge_offer_to_stage(
    node: &Node,
    offer: &Offer,
    now: SystemTime,
) -> Result<Option<Fit>, ActivateError> {
    judge_offer_whole(node, offer, now)
}

/// The judgement of an offer (see [`accept_offer`]), its valid signatures stored
/// once it passed; the statement judged fit is the caller's to keep or not.
fn judge_offer_whole(
    node: &Node,
    offer: &Offer,
    now: SystemTime,
) -> Result<Option<Fit>, ActivateError> {
    let id = offer.generation;
    let valid: Vec<Signature> = offer
        .signatures
        .iter()
        .filter_map(|text| Signature::parse(text).ok())
        .filter(|s| s.verify(&id).is_ok())
        .collect();
    let fit = match crate::trust::signers(node)? {
        None => None,
        Some(signers) => {
            signers
                .accept_message(
                    &format!("generation {id}"),
                    id.to_string().as_bytes(),
                    &valid,
                    now,
                )
                .map_err(|refusal| ActivateError::Untrusted(Box::new(refusal)))?;
            let signed = offer
                .statement
                .as_ref()
                .ok_or(ActivateError::Statement(StatementError::Missing(id)))?;
            let fit = judge(node, signed, None, now)?.expect("a node that trusts signers judges");
            if fit.statement().generation != Some(id) {
                return Err(ActivateError::Statement(StatementError::Elsewhere {
                    stated: mesh_lib::statement::naming(fit.statement().generation),
                    offered: id.to_string(),
                }));
            }
            Some(fit)
        }
    };
    for sig in &valid {
        node.store.put_signature(&id, sig.armored())?;
    }
    Ok(fit)
}

/// For a switch asked for from elsewhere (a deploy key's, a pull's): on a node that trusts
/// signers, the newest statement it accepted must name `target`, for the node `name` (the
/// generation's own name), and not have expired — refused otherwise (exit 2), before
/// anything changes.
pub fn check_stated(node: &Node, target: &GenerationId, name: &str) -> Result<(), ActivateError> {
    if crate::trust::signers(node)?.is_none() {
        return Ok(());
    }
    let stated = Kept::load(&node.state)?.and_then(|k| k.statement());
    match stated {
        Some(s) if s.generation == Some(*target) => {
            if s.expired(SystemTime::now()) {
                Err(ActivateError::Statement(StatementError::Expired {
                    expires: s.expires,
                }))
            } else if s.node != name {
                Err(ActivateError::Statement(StatementError::OtherNode {
                    stated: s.node,
                    here: name.to_owned(),
                }))
            } else {
                Ok(())
            }
        }
        Some(s) => Err(ActivateError::Unstated {
            target: *target,
            stated: Some(s.to_string()),
        }),
        None => Err(ActivateError::Unstated {
            target: *target,
            stated: None,
        }),
    }
}
