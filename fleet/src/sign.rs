//! Signing generations with the keys operators and CI already hold: an OpenSSH key file signs in
//! this process; a key with a passphrase, a public key, or none named signs through the user's
//! ssh-agent — by way of `ssh-keygen -Y sign`, which speaks the agent's protocol — so a key
//! that never leaves the agent (or a hardware token) signs too. Either way the signature is
//! the `sshsig` of [`mesh_lib::trust`], kept in the store beside its generation.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mesh_lib::statement::{self, Signed, Statement};
use mesh_lib::trust::{self, Signature, NAMESPACE};
use mesh_lib::{GenerationId, Store};

/// A key that signs.
pub enum Signer {
    /// A private key read from its file.
    File(Box<ssh_key::PrivateKey>),
    /// A key of the user's ssh-agent: its public key, in a file ssh-keygen reads.
    Agent {
        /// The public key's file.
        public: PathBuf,
        /// A temporary folder holding it, when it was written here.
        _held: Option<tempfile::TempDir>,
    },
}

/// Why a key cannot sign.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The key file.
    #[error("{path}: {why}")]
    Key {
        /// Its path.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The agent.
    #[error("the ssh-agent: {0}")]
    Agent(String),
    /// The store.
    #[error(transparent)]
    Store(#[from] mesh_lib::store::StoreError),
    /// The signature.
    #[error(transparent)]
    Trust(#[from] trust::TrustError),
}

impl Signer {
    /// The signer for `key` (a private or a public key file), or the agent's first key.
    pub fn new(key: Option<&Path>) -> Result<Self, SignError> {
        let Some(path) = key else {
            return Self::agent_first();
        };
        let bad = |why: String| SignError::Key {
            path: path.to_owned(),
            why,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        if let Ok(private) = ssh_key::PrivateKey::from_openssh(&text) {
            if !private.is_encrypted() {
                return Ok(Signer::File(Box::new(private)));
            }
            // Its passphrase is the agent's business: sign there, by its public key.
            let public = private
                .public_key()
                .to_openssh()
                .map_err(|e| bad(e.to_string()))?;
            return Self::agent_with(&public);
        }
        ssh_key::PublicKey::from_openssh(text.trim())
            .map_err(|e| bad(format!("neither a private nor a public OpenSSH key: {e}")))?;
        Ok(Signer::Agent {
            public: path.to_owned(),
            _held: None,
        })
    }

    /// The agent's first key (`ssh-add -L`).
    fn agent_first() -> Result<Self, SignError> {
        let out = Command::new("ssh-add")
            .arg("-L")
            .output()
            .map_err(|e| SignError::Agent(format!("ssh-add: {e}")))?;
        let listed = String::from_utf8_lossy(&out.stdout).into_owned();
        let first = listed
            .lines()
            .find(|l| ssh_key::PublicKey::from_openssh(l.trim()).is_ok())
            .ok_or_else(|| {
                SignError::Agent(format!(
                    "no key to sign with (name one with --key, or add one with ssh-add): {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            })?;
        Self::agent_with(first)
    }

    fn agent_with(public: &str) -> Result<Self, SignError> {
        let dir = tempfile::tempdir().map_err(|e| SignError::Agent(e.to_string()))?;
        let path = dir.path().join("key.pub");
        std::fs::write(&path, format!("{}\n", public.trim()))
            .map_err(|e| SignError::Agent(e.to_string()))?;
        Ok(Signer::Agent {
            public: path,
            _held: Some(dir),
        })
    }

    /// Signs `id`: the armored signature.
    pub fn sign(&self, id: &GenerationId) -> Result<String, SignError> {
        self.sign_bytes(id.to_string().as_bytes())
    }

    /// Signs a statement for `node` naming `generation` (`None`: a withdrawal), its sequence
    /// above `highest` (the highest known for the node), valid for `valid_for` from now: the
    /// statement as it travels.
    pub fn state(
        &self,
        node: &str,
        generation: Option<GenerationId>,
        highest: Option<u64>,
        valid_for: std::time::Duration,
    ) -> Result<Signed, SignError> {
        let now = std::time::SystemTime::now();
        let statement = Statement::new(
            node,
            generation,
            statement::next_sequence(highest, now),
            now,
            valid_for,
        );
        let text = statement.text();
        let signature = Signature::parse(&self.sign_bytes(text.as_bytes())?)?;
        signature.verify_message("the statement", text.as_bytes())?;
        Ok(Signed {
            statement: text,
            signatures: vec![signature.armored().to_owned()],
        })
    }

    /// Signs `message`: the armored signature.
    fn sign_bytes(&self, message: &[u8]) -> Result<String, SignError> {
        match self {
            Signer::File(key) => Ok(trust::sign_message(key, message)?),
            Signer::Agent { public, .. } => {
                let mut child = Command::new("ssh-keygen")
                    .args(["-q", "-Y", "sign", "-n", NAMESPACE, "-f"])
                    .arg(public)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| SignError::Agent(format!("ssh-keygen: {e}")))?;
                child
                    .stdin
                    .take()
                    .expect("piped")
                    .write_all(message)
                    .map_err(|e| SignError::Agent(format!("ssh-keygen: {e}")))?;
                let out = child
                    .wait_with_output()
                    .map_err(|e| SignError::Agent(format!("ssh-keygen: {e}")))?;
                if !out.status.success() {
                    return Err(SignError::Agent(format!(
                        "ssh-keygen -Y sign: {}",
                        mesh_lib::text::escape(String::from_utf8_lossy(&out.stderr).trim())
                    )));
                }
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            }
        }
    }

    /// Signs `id` and keeps the signature in `store`: the signature, checked.
    pub fn sign_into(&self, store: &Store, id: &GenerationId) -> Result<Signature, SignError> {
        let signature = Signature::parse(&self.sign(id)?)?;
        signature.verify(id)?;
        store.put_signature(id, signature.armored())?;
        Ok(signature)
    }
}
