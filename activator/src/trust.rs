//! The node's side of trust: a generation that arrived from elsewhere (`switch --generation`, a
//! deploy, a pull) is switched to only when one of its signatures is by a signer the node
//! trusts — checked before anything changes. The trusted signers are a file under the root
//! (`/etc/mesh/trusted-signers`, or where the node record says since genesis), managed like any
//! file once the node is managed; no file, no check. A generation that was in force before (a
//! rollback to it) was accepted then and needs no new signature; a local `mesh switch NODE.ncl`
//! builds its own and is not asked (its operator is root there anyway).

use mesh_lib::trust::{Signature, TrustedSigners, TRUSTED_SIGNERS};
use mesh_lib::{GenerationId, TargetPath};

use crate::node::Node;
use crate::root::Observed;
use crate::switch::error::io_err;
use crate::switch::ActivateError;

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

impl Node {
    /// Where the node's trusted signers are.
    pub fn trusted_signers_path(&self) -> Result<TargetPath, ActivateError> {
        Ok(self
            .record()?
            .and_then(|r| r.trusted_signers)
            .unwrap_or_else(|| TargetPath::new(TRUSTED_SIGNERS).expect("a valid path")))
    }

    /// The node's trusted signers (`None`: no file, nothing is checked).
    pub fn trusted_signers(&self) -> Result<Option<TrustedSigners>, ActivateError> {
        let path = self.trusted_signers_path()?;
        match self.root.observe(&path)? {
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
    pub fn check_trust(&self, id: &GenerationId) -> Result<Accepted, ActivateError> {
        if self.trusted_signers()?.is_none() {
            return Ok(Accepted::NoPolicy);
        }
        let log = self
            .profile
            .log()
            .map_err(io_err("reading the profile in", &self.state))?;
        if log.iter().any(|e| e.id == *id) {
            return Ok(Accepted::InForceBefore);
        }
        self.check_trust_now(id)
    }

    /// Whether generation `id` may be switched to at the request of a deploy key: as
    /// [`Node::check_trust`], but having been in force before is no pass — a signer the node
    /// trusts *now* must vouch for it, so a generation signed only by a signer since removed
    /// (or never signed, from before the node trusted any) is refused.
    pub fn check_trust_now(&self, id: &GenerationId) -> Result<Accepted, ActivateError> {
        let Some(signers) = self.trusted_signers()? else {
            return Ok(Accepted::NoPolicy);
        };
        let signatures: Vec<Signature> = self
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
}

impl Node {
    /// Whether a generation offered by a registry may be fetched at all: one of `armored` (its
    /// signatures, as the registry gave them) must be valid over `id` and by a signer the node
    /// trusts — judged before anything else of it is fetched. Unlike [`Node::check_trust`], a
    /// node that trusts no signer accepts nothing this way: a registry is not the operator.
    pub fn judge_offer(
        &self,
        id: &GenerationId,
        armored: &[String],
    ) -> Result<String, ActivateError> {
        let Some(signers) = self.trusted_signers()? else {
            return Err(ActivateError::Signers {
                path: self.trusted_signers_path()?,
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
}
