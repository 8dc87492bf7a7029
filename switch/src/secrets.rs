//! The secrets phase, before the plan: every file of the target made from secrets (and not
//! held), and every secret of a container's environment, is decrypted with the node's host key
//! into memory. A container's is named by its value's keyed digest in the generation the
//! switch goes on with (its spec label counts that, never the value), and handed to the engine
//! only when the container is created. For files, the switch goes on with a
//! generation in which that file is its plaintext — named by its plaintext's *keyed* digest
//! ([`mesh_lib::secret::DigestKey`]), which is what the host store records and a switch shows,
//! so nothing anywhere is a plain digest to guess the secret against; the file keeps its
//! `secret`, so the switch knows it is one — so a secret is staged, synced and
//! renamed like any file, and one whose plaintext changed calls its reloads and restarts (a
//! ciphertext re-encrypted to other recipients, the same plaintext, changes nothing).
//!
//! A secret that cannot be decrypted (not encrypted to this host's key, the key missing, the
//! ciphertext damaged) refuses the switch here, before anything changes.
//!
//! The plaintexts are [`Zeroizing`]: zeroed when the switch drops them. They are never in a
//! temp file others may read (a staged file is created with its final mode and owner before a
//! byte is written), never in the store, never in an error or a log.
//!
//! Dry run: decrypted as well (a dry run says whether the switch would be refused), never
//! shown. No crash point.

use std::collections::BTreeMap;
use std::path::PathBuf;

use mesh_lib::model::{ContainerName, ContainerState, FileState};
use mesh_lib::secret::{Identity, SecretContent, SecretRef, Zeroizing, HOST_KEY};
use mesh_lib::{BlobHash, Generation, TargetPath};

use crate::ActivateError;
use crate::Activator;
use mesh_node::root::Observed;

/// The plaintexts of a switch's secret files, by their keyed digest.
pub(crate) type Plaintexts = BTreeMap<BlobHash, Zeroizing<Vec<u8>>>;

/// A target's secrets, decrypted: its files' plaintexts, and the values of its containers'
/// secret environment variables, each by its keyed digest.
#[derive(Default)]
pub struct Opened {
    /// The files' plaintexts.
    pub files: Plaintexts,
    /// The containers' secret environment values.
    pub values: mesh_containers::SecretValues,
}

impl Activator {
    /// Where the node's host key is under its root: the record's (`mesh genesis --host-key`),
    /// else [`HOST_KEY`].
    fn host_key_target(&self) -> TargetPath {
        self.record()
            .ok()
            .flatten()
            .and_then(|r| r.host_key)
            .unwrap_or_else(|| TargetPath::new(HOST_KEY).expect("a valid path"))
    }

    /// Where the node's host key is, for people: `MESH_HOST_KEY` (a path on this machine),
    /// else the record's path or [`HOST_KEY`], under the root.
    pub fn host_key_path(&self) -> String {
        match std::env::var_os("MESH_HOST_KEY") {
            Some(p) => PathBuf::from(p).display().to_string(),
            None => self
                .root
                .path()
                .join(self.host_key_target().as_str().trim_start_matches('/'))
                .display()
                .to_string(),
        }
    }

    /// The node's host key: its private key, and what it is for errors.
    pub fn host_identity(&self) -> Result<Identity, (String, bool)> {
        let bytes = match std::env::var_os("MESH_HOST_KEY") {
            Some(p) => Zeroizing::new(std::fs::read(&p).map_err(|e| {
                (
                    format!("the host key {}: {e}", PathBuf::from(&p).display()),
                    true,
                )
            })?),
            None => match self.root.observe(&self.host_key_target()) {
                Ok((Observed::File(_), Some(bytes))) => Zeroizing::new(bytes),
                Ok(_) => {
                    return Err((
                        format!("the host key {} is not there", self.host_key_path()),
                        true,
                    ))
                }
                Err(e) => return Err((format!("the host key: {e}"), true)),
            },
        };
        Identity::parse(&self.host_key_path(), &bytes).map_err(|e| (e.to_string(), true))
    }

    /// Whether this node can read every secret of `target` (each decrypted, then dropped):
    /// checked before a deploy is armed, so one the node cannot read is refused with nothing
    /// changed and nothing to revert.
    pub fn check_secrets(&self, target: &Generation) -> Result<(), ActivateError> {
        self.open_secrets(target).map(drop)
    }

    /// The target with each of its secret files as its plaintext, and each secret of a
    /// container's environment named by its plaintext's keyed digest; the plaintexts. `None`
    /// when it has none to write. Held files and containers are not the switch's to write.
    pub(crate) fn open_secrets(
        &self,
        target: &Generation,
    ) -> Result<Option<(Generation, Opened)>, ActivateError> {
        self.open_secrets_of(target, false)
    }

    /// The target with its secrets decrypted, as a switch opens them (held files and containers
    /// aside: they are not the switch's to write), or also those held (`held`): what `mesh
    /// import --check` and `mesh status` compare with what is found, whatever the mesh does
    /// with it.
    pub fn open_secrets_of(
        &self,
        target: &Generation,
        held: bool,
    ) -> Result<Option<(Generation, Opened)>, ActivateError> {
        let secret_files: Vec<(&TargetPath, &SecretContent)> = target
            .files
            .iter()
            .filter(|(_, f)| held || !matches!(f.state, FileState::Held { .. }))
            .filter_map(|(p, f)| f.secret.as_ref().map(|s| (p, s)))
            .collect();
        let secret_envs: Vec<(&ContainerName, &BTreeMap<String, SecretRef>)> = target
            .containers
            .iter()
            .filter(|(_, c)| held || !matches!(c.state, ContainerState::Held { .. }))
            .filter(|(_, c)| !c.secret_environment.is_empty())
            .map(|(n, c)| (n, &c.secret_environment))
            .collect();
        // What the first secret is for, and which it is: what a missing key is told with.
        let (item, first) = match (secret_files.first(), secret_envs.first()) {
            (Some((path, s)), _) => (path.to_string(), s.describe()),
            (None, Some((name, env))) => {
                let (var, r) = env.iter().next().expect("not empty");
                (
                    format!("container {name}, environment variable {var}"),
                    r.file.clone(),
                )
            }
            (None, None) => return Ok(None),
        };
        let identity =
            self.host_identity()
                .map_err(|(why, key_missing)| ActivateError::Secret {
                    item,
                    why: format!("{first}: {why}"),
                    key_missing,
                })?;
        let mut resolved = target.clone();
        let mut opened = Opened::default();
        for (path, secret) in secret_files {
            let refuse = |why: String| ActivateError::Secret {
                item: path.to_string(),
                why,
                key_missing: false,
            };
            let mut values: BTreeMap<String, Zeroizing<Vec<u8>>> = BTreeMap::new();
            for (name, r) in secret.refs() {
                let ciphertext = self.store.blob(&r.ciphertext)?;
                let plaintext = identity
                    .decrypt(&r.file, &ciphertext, &r.recipients)
                    .map_err(|e| refuse(e.to_string()))?;
                values.insert(name.to_owned(), plaintext);
            }
            let content = match secret {
                SecretContent::Whole(_) => values.remove("").expect("the one secret"),
                SecretContent::Template(_) => {
                    let template = self.store.blob(&target.files[path].blob)?;
                    mesh_lib::secret::render(&template, &values)
                }
            };
            let hash = self.digests.digest(&content);
            let entry = resolved.files.get_mut(path).expect("a file of the target");
            entry.blob = hash;
            entry.size = content.len() as u64;
            opened.files.insert(hash, content);
        }
        for (name, env) in secret_envs {
            let entry = resolved
                .containers
                .get_mut(name)
                .expect("a container of the target");
            for (var, r) in env {
                let refuse = |why: String| ActivateError::Secret {
                    item: format!("container {name}, environment variable {var}"),
                    why: format!("{} ({why})", r.file),
                    key_missing: false,
                };
                let ciphertext = self.store.blob(&r.ciphertext)?;
                let plaintext = identity
                    .decrypt(&r.file, &ciphertext, &r.recipients)
                    .map_err(|e| refuse(e.to_string()))?;
                let value = mesh_lib::secret::environment_value(&plaintext).map_err(refuse)?;
                let hash = self.digests.digest(value.as_bytes());
                let named = entry
                    .secret_environment
                    .get_mut(var)
                    .expect("a variable of the container");
                named.ciphertext = hash;
                opened.values.insert(hash, value);
            }
        }
        Ok(Some((resolved, opened)))
    }
}
