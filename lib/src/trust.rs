//! Trust: who vouches for a generation, and whom a node believes.
//!
//! A generation is signed by signing its id — the text `b3:…`, nothing around it — with an SSH
//! key, in the SSH signature format (`sshsig`) git and `ssh-keygen -Y` use, in the namespace
//! [`NAMESPACE`]. The signature is an object of its own beside the generation, never part of
//! it: the id stays the digest of the canonical encoding, reproducible anywhere. Any tool
//! checks one:
//!
//! ```text
//! printf %s b3:… | ssh-keygen -Y verify -f trusted-signers -I NAME -n mesh-generation -s SIG
//! ```
//!
//! A node's trusted signers are lines in `ssh-keygen`'s allowed-signers form — a name, a key
//! type, the key, an optional comment; `#` starts a comment line — so the same file serves
//! `ssh-keygen -Y verify`. A generation is accepted when one of its signatures is valid (over
//! its id, in the namespace) and made by a key the file names.

use std::fmt;

use ssh_key::{HashAlg, LineEnding, PublicKey, SshSig};

use crate::id::GenerationId;

/// The signatures' namespace.
pub const NAMESPACE: &str = "mesh-generation";

/// Where a node's trusted signers are, unless its record says otherwise.
pub const TRUSTED_SIGNERS: &str = "/etc/mesh/trusted-signers";

/// Why a signature or a signers file is not usable.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// Not an SSH signature.
    #[error("not an SSH signature (sshsig): {0}")]
    NotASignature(String),
    /// A signature that does not hold: over something else, in another namespace, or damaged.
    #[error("its signature by {key} is not valid over {what} in namespace {NAMESPACE}: {why}")]
    Invalid {
        /// What it was to be over: `b3:…` (a generation), or a statement.
        what: String,
        /// The signing key's fingerprint.
        key: String,
        /// Why.
        why: String,
    },
    /// A line of the trusted signers that is not one.
    #[error("line {line} of the trusted signers: {why}")]
    Signers {
        /// Its number, from 1.
        line: usize,
        /// Why.
        why: String,
    },
    /// A key that cannot sign.
    #[error("{0}")]
    Key(String),
}

/// A signature of a generation.
#[derive(Debug, Clone)]
pub struct Signature {
    sig: SshSig,
    armored: String,
}

impl Signature {
    /// Reads an armored signature (`-----BEGIN SSH SIGNATURE-----`).
    pub fn parse(armored: &str) -> Result<Self, TrustError> {
        let sig = SshSig::from_pem(armored.trim().as_bytes())
            .map_err(|e| TrustError::NotASignature(e.to_string()))?;
        Ok(Self {
            sig,
            armored: armored.trim().to_owned() + "\n",
        })
    }

    /// Its armored text.
    pub fn armored(&self) -> &str {
        &self.armored
    }

    /// The key that made it.
    pub fn key(&self) -> PublicKey {
        PublicKey::from(self.sig.public_key().clone())
    }

    /// Its key's fingerprint (`SHA256:…`).
    pub fn fingerprint(&self) -> String {
        self.key().fingerprint(HashAlg::Sha256).to_string()
    }

    /// Checks that it is a signature of `id`, in the namespace, by the key it names.
    pub fn verify(&self, id: &GenerationId) -> Result<(), TrustError> {
        self.verify_message(&id.to_string(), id.to_string().as_bytes())
    }

    /// Checks that it is a signature of `message` (`what` names it in an error), in the
    /// namespace, by the key it names.
    pub fn verify_message(&self, what: &str, message: &[u8]) -> Result<(), TrustError> {
        self.key()
            .verify(NAMESPACE, message, &self.sig)
            .map_err(|e| TrustError::Invalid {
                what: what.to_owned(),
                key: self.fingerprint(),
                why: e.to_string(),
            })
    }
}

/// Signs `id` with an OpenSSH private key (not encrypted: a key with a passphrase signs through
/// the agent); the armored signature.
pub fn sign(key: &ssh_key::PrivateKey, id: &GenerationId) -> Result<String, TrustError> {
    sign_message(key, id.to_string().as_bytes())
}

/// Signs `message` with an OpenSSH private key, in the namespace: the armored signature.
pub fn sign_message(key: &ssh_key::PrivateKey, message: &[u8]) -> Result<String, TrustError> {
    if key.is_encrypted() {
        return Err(TrustError::Key(
            "the key is encrypted: load it into ssh-agent and sign through the agent".into(),
        ));
    }
    let sig = SshSig::sign(key, NAMESPACE, HashAlg::Sha512, message)
        .map_err(|e| TrustError::Key(format!("signing with it: {e}")))?;
    sig.to_pem(LineEnding::LF)
        .map_err(|e| TrustError::Key(format!("writing the signature: {e}")))
}

/// A signer a node trusts.
#[derive(Debug, Clone)]
pub struct Signer {
    /// Its name, as the file gives it.
    pub name: String,
    /// Its key.
    pub key: PublicKey,
}

impl fmt::Display for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({})",
            crate::text::escape(&self.name),
            self.key.fingerprint(HashAlg::Sha256)
        )
    }
}

/// The signers a node trusts.
#[derive(Debug, Clone, Default)]
pub struct TrustedSigners {
    /// Each, in the file's order.
    pub signers: Vec<Signer>,
}

/// Why a generation is not accepted: the signatures it has, and whom the node trusts.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// What was signed: `generation b3:…`, or a statement.
    pub what: String,
    /// Each signature it has: its key's fingerprint, and why it does not count.
    pub has: Vec<String>,
    /// The signers the node trusts.
    pub trusts: Vec<String>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is signed by no key this node trusts", self.what)?;
        if self.has.is_empty() {
            write!(f, "; it has no signature")?;
        } else {
            write!(f, "; its signatures: {}", self.has.join("; "))?;
        }
        write!(f, "; this node trusts: {}", self.trusts.join(", "))
    }
}

impl TrustedSigners {
    /// Reads the allowed-signers lines of a trusted signers file.
    pub fn parse(text: &str) -> Result<Self, TrustError> {
        let mut signers = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: String| TrustError::Signers { line: i + 1, why };
            let mut words = line.split_whitespace();
            let name = words.next().unwrap_or_default();
            let mut kind = words
                .next()
                .ok_or_else(|| bad("a name, then a key".into()))?;
            // Options (`namespaces="…"`, `cert-authority`) come between the name and the key;
            // a key for other namespaces is not one for ours.
            let mut namespaces: Option<String> = None;
            while !kind.starts_with("ssh-")
                && !kind.starts_with("ecdsa-")
                && !kind.starts_with("sk-")
            {
                if let Some(list) = kind.strip_prefix("namespaces=") {
                    namespaces = Some(list.trim_matches('"').to_owned());
                }
                kind = words
                    .next()
                    .ok_or_else(|| bad("no key after the options".into()))?;
            }
            let body = words
                .next()
                .ok_or_else(|| bad("a key type without its key".into()))?;
            let key = PublicKey::from_openssh(&format!("{kind} {body}"))
                .map_err(|e| bad(format!("not a public key: {e}")))?;
            if namespaces.is_some_and(|n| !n.split(',').any(|n| n == NAMESPACE || n == "*")) {
                continue;
            }
            signers.push(Signer {
                name: name.to_owned(),
                key,
            });
        }
        Ok(Self { signers })
    }

    /// The signer of `id` among `signatures` this node trusts now, or why there is none.
    pub fn accept(&self, id: &GenerationId, signatures: &[Signature]) -> Result<&Signer, Refusal> {
        self.accept_message(
            &format!("generation {id}"),
            id.to_string().as_bytes(),
            signatures,
            std::time::SystemTime::now(),
        )
    }

    /// The signer of `message` (`what` names it) among `signatures` this node trusts at `now`,
    /// or why there is none.
    pub fn accept_message(
        &self,
        what: &str,
        message: &[u8],
        signatures: &[Signature],
        _now: std::time::SystemTime,
    ) -> Result<&Signer, Refusal> {
        let mut has = Vec::new();
        for sig in signatures {
            let key = sig.key();
            let trusted = self
                .signers
                .iter()
                .find(|s| s.key.key_data() == key.key_data());
            match (sig.verify_message(what, message), trusted) {
                (Ok(()), Some(signer)) => return Ok(signer),
                (Ok(()), None) => {
                    has.push(format!("{}, a key it does not trust", sig.fingerprint()))
                }
                (Err(e), _) => has.push(format!("{} ({e})", sig.fingerprint())),
            }
        }
        Err(Refusal {
            what: what.to_owned(),
            has,
            trusts: self.signers.iter().map(Signer::to_string).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ssh_key::PrivateKey {
        let seed = blake3::hash(b"a test key");
        ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(seed.as_bytes()))
    }

    fn other() -> ssh_key::PrivateKey {
        let seed = blake3::hash(b"another key");
        ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(seed.as_bytes()))
    }

    fn signers(key: &ssh_key::PrivateKey) -> TrustedSigners {
        let line = format!(
            "# the fleet's CI\nci {}\n",
            key.public_key().to_openssh().unwrap()
        );
        TrustedSigners::parse(&line).unwrap()
    }

    /// A signature of the id by a trusted key is accepted; by another key, over another id,
    /// cut short, or with no signature at all, refused, naming what it has and whom the node
    /// trusts.
    #[test]
    fn accepted_only_signed_by_a_trusted_key_over_its_id() {
        let id = GenerationId::of(b"a generation");
        let trusted = signers(&key());
        let good = Signature::parse(&sign(&key(), &id).unwrap()).unwrap();
        assert_eq!(trusted.accept(&id, &[good.clone()]).unwrap().name, "ci");

        let stranger = Signature::parse(&sign(&other(), &id).unwrap()).unwrap();
        let refused = trusted.accept(&id, &[stranger]).unwrap_err().to_string();
        assert!(
            refused.contains("a key it does not trust") && refused.contains("ci (SHA256:"),
            "{refused}"
        );

        let elsewhere = GenerationId::of(b"another generation");
        let refused = trusted
            .accept(&elsewhere, &[good.clone()])
            .unwrap_err()
            .to_string();
        assert!(refused.contains("not valid over"), "{refused}");

        assert!(trusted
            .accept(&id, &[])
            .unwrap_err()
            .to_string()
            .contains("no signature"));
        let armored = good.armored();
        assert!(
            Signature::parse(&armored[..armored.len() / 2]).is_err(),
            "cut short"
        );
    }

    /// The file is ssh-keygen's allowed-signers form: comments, options, namespaces.
    #[test]
    fn signers_in_the_allowed_signers_form() {
        let k = key().public_key().to_openssh().unwrap();
        let text = format!(
            "# comment\n\nops {k} laptop\nother namespaces=\"git\" {k}\nall namespaces=\"git,mesh-generation\" {k}\n"
        );
        let names: Vec<String> = TrustedSigners::parse(&text)
            .unwrap()
            .signers
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["ops", "all"]);
        let bad = TrustedSigners::parse("ops ssh-ed25519 notbase64\n").unwrap_err();
        assert!(bad.to_string().starts_with("line 1"), "{bad}");
    }
}
