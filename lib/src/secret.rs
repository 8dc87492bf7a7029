//! Secrets: files encrypted with [age](https://age-encryption.org) to SSH keys — each node's
//! `ssh-ed25519` host key and the operators' keys — kept in the fleet's tree beside the
//! declarations, and decrypted only on the node, at switch time.
//!
//! Invariants:
//! - a generation holds a secret's *ciphertext* hash (the ciphertext is a blob in the store, so a
//!   rollback has the old one and `mesh gc` keeps it while a generation references it), its
//!   path in the fleet's tree and the names of its recipients; never the plaintext. A build
//!   needs no key: the same id on any machine;
//! - who may read a secret is declared in the fleet's `secrets.ncl` ([`Rules`]); a build
//!   refuses a secret for a node that is not among its recipients, or whose ciphertext is not
//!   encrypted to that node's host key (checked from the ciphertext's header: an
//!   `ssh-ed25519` stanza names the key it is for by a tag, [`key_tag`]);
//! - plaintext lives in [`Zeroizing`] buffers, zeroed when dropped, and is never formatted
//!   into an error or a log: errors name the secret's file and its recipients;
//! - no plain digest of what is at a secret's path — the plaintext the node writes there, or a
//!   credential found there on adoption — is kept, recorded or shown anywhere: a short secret
//!   could be guessed offline against it. What is at a secret's path is named by its *keyed*
//!   digest ([`DigestKey::digest`]): the blake3 digest of the content wrapped with a tag keyed
//!   by the node's own secret, so only the node can tell which content it names. The host
//!   store, a switch's output and `--json`, a held original in the node record (and so in the
//!   generation, which CI builds from the record with no key: the record holds what it holds)
//!   all carry that. A found or drifted content at a secret's path is kept in the store
//!   *wrapped* ([`DigestKey::wrap`]), so that its keyed digest is the digest of a real blob and
//!   the store stays content-addressed; a restore unwraps it ([`DigestKey::unwrap`]), checking
//!   the tag.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{Read, Write};

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::Digest;
pub use zeroize::Zeroizing;

use crate::id::BlobHash;

/// The file of the fleet's tree, at its root, that declares who may read which secret.
pub const RULES_FILE: &str = "secrets.ncl";

/// Where a node's host key is under its root, unless told otherwise (`--host-key`).
pub const HOST_KEY: &str = "/etc/ssh/ssh_host_ed25519_key";

/// How a template names a secret: `{{secret.NAME}}`.
pub const PLACEHOLDER: &str = "{{secret.";

/// A secret a file is made from: its ciphertext (a blob), where it is in the fleet's tree, and
/// who may read it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRef {
    /// The ciphertext's hash: a blob in the store.
    pub ciphertext: BlobHash,
    /// Its file, relative to the fleet's tree (`secrets/db.age`).
    pub file: String,
    /// The names of its recipients as `secrets.ncl` declares them, sorted.
    pub recipients: Vec<String>,
}

/// How a declared file's content is made from secrets on the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum SecretContent {
    /// The file is the plaintext of this secret (the file's `blob` is its ciphertext).
    Whole(SecretRef),
    /// The file is its `blob`, a template, with each `{{secret.NAME}}` replaced by the
    /// plaintext of secret NAME.
    Template(BTreeMap<String, SecretRef>),
}

impl SecretContent {
    /// Every secret it is made from, by placeholder name (`""` for a whole file).
    pub fn refs(&self) -> Vec<(&str, &SecretRef)> {
        match self {
            SecretContent::Whole(r) => vec![("", r)],
            SecretContent::Template(m) => m.iter().map(|(k, v)| (k.as_str(), v)).collect(),
        }
    }

    /// Mutable access to every secret it is made from.
    pub fn refs_mut(&mut self) -> Vec<&mut SecretRef> {
        match self {
            SecretContent::Whole(r) => vec![r],
            SecretContent::Template(m) => m.values_mut().collect(),
        }
    }

    /// The files it is made from, and their recipients, for people: `secrets/db.age (for
    /// web-1, alice)`.
    pub fn describe(&self) -> String {
        self.refs()
            .iter()
            .map(|(_, r)| format!("{} (for {})", r.file, r.recipients.join(", ")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What a wrapped content starts with ([`DigestKey::wrap`]).
const WRAPPED: &[u8] = b"mesh keyed content v1\n";

/// The node's key for naming what is at a secret's path (see the module doc): derived from
/// the node's own secret (`STATE/temp-key`), for this purpose only.
#[derive(Clone)]
pub struct DigestKey([u8; 32]);

impl fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DigestKey(..)")
    }
}

impl DigestKey {
    /// The key derived from a node's secret.
    pub fn derive(node_secret: &[u8]) -> Self {
        Self(blake3::derive_key(
            "mesh secret-path digests v1",
            node_secret,
        ))
    }

    fn tag(&self, content: &[u8]) -> blake3::Hash {
        blake3::keyed_hash(&self.0, content)
    }

    /// `content` wrapped: a fixed header, the keyed tag of the content, the content. Its
    /// digest is [`DigestKey::digest`]; it is what the store keeps of a content found at a
    /// secret's path.
    pub fn wrap(&self, content: &[u8]) -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::with_capacity(WRAPPED.len() + 32 + content.len()));
        out.extend_from_slice(WRAPPED);
        out.extend_from_slice(self.tag(content).as_bytes());
        out.extend_from_slice(content);
        out
    }

    /// The keyed digest of `content`: the digest of [`DigestKey::wrap`]ped content, computed
    /// without copying it. Without the key, no guess of the content can be checked against it.
    pub fn digest(&self, content: &[u8]) -> BlobHash {
        let mut hasher = blake3::Hasher::new();
        hasher.update(WRAPPED);
        hasher.update(self.tag(content).as_bytes());
        hasher.update(content);
        BlobHash::from_bytes(*hasher.finalize().as_bytes())
    }

    /// The content of a wrapped blob, when `blob` is one wrapped with this key (its tag
    /// checked); `None` for anything else.
    pub fn unwrap<'a>(&self, blob: &'a [u8]) -> Option<&'a [u8]> {
        let rest = blob.strip_prefix(WRAPPED)?;
        if rest.len() < 32 {
            return None;
        }
        let (tag, content) = rest.split_at(32);
        // `blake3::Hash` compares in constant time.
        (self.tag(content) == blake3::Hash::from_bytes(tag.try_into().ok()?)).then_some(content)
    }
}

/// Why a secret cannot be read, written or checked. Never holds plaintext.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Not an age file.
    #[error("{file} is not an age-encrypted file: {why}")]
    NotAge {
        /// The secret's file.
        file: String,
        /// Why.
        why: String,
    },
    /// Not a public key age can encrypt to.
    #[error("`{name}`: not an ssh-ed25519 public key (\"ssh-ed25519 AAAA…\"): {why}")]
    Key {
        /// The key's name in `secrets.ncl`.
        name: String,
        /// Why.
        why: String,
    },
    /// The key given cannot decrypt it.
    #[error("{file} cannot be decrypted with {key}: {why}; its recipients are {}", recipients.join(", "))]
    Decrypt {
        /// The secret's file.
        file: String,
        /// The key tried.
        key: String,
        /// Why.
        why: String,
        /// Its declared recipients.
        recipients: Vec<String>,
    },
    /// A private key that is not usable.
    #[error("{path}: {why}")]
    Identity {
        /// Its file.
        path: String,
        /// Why.
        why: String,
    },
    /// A rule of `secrets.ncl` that does not hold.
    #[error("{0}")]
    Rules(String),
    /// Encrypting failed.
    #[error("encrypting {file}: {why}")]
    Encrypt {
        /// The secret's file.
        file: String,
        /// Why.
        why: String,
    },
}

/// `secrets.ncl`, evaluated: the keys by name (nodes' host keys under the node's name,
/// operators' keys under theirs) and each secret file's recipients.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    /// Each node's `ssh-ed25519` host public key, by node name.
    #[serde(default)]
    pub nodes: BTreeMap<String, String>,
    /// Each operator's public key, by name.
    #[serde(default)]
    pub operators: BTreeMap<String, String>,
    /// Each secret file (relative to the fleet's tree) and the names that may read it.
    #[serde(default)]
    pub files: BTreeMap<String, Vec<String>>,
}

/// A recipient of a secret.
#[derive(Debug, Clone)]
pub struct Recipient {
    /// Its name in `secrets.ncl`.
    pub name: String,
    /// Whether it is a node's host key.
    pub node: bool,
    /// Its key.
    pub key: age::ssh::Recipient,
}

impl Rules {
    /// Who may read `file` (relative to the fleet's tree): its own entry under `files`, else
    /// the entry of the innermost folder holding it — a key ending in `/` (`"secrets/web-1/"`)
    /// names the readers of every secret under it, as sops' path rules do; none when neither.
    pub fn readers(&self, file: &str) -> Option<&[String]> {
        if let Some(names) = self.files.get(file) {
            return Some(names);
        }
        self.files
            .iter()
            .filter(|(folder, _)| folder.ends_with('/') && file.starts_with(folder.as_str()))
            .max_by_key(|(folder, _)| folder.len())
            .map(|(_, names)| names.as_slice())
    }

    /// The recipients of `file` (relative to the fleet's tree), sorted by name.
    pub fn recipients(&self, file: &str) -> Result<Vec<Recipient>, SecretError> {
        let names = self.readers(file).ok_or_else(|| {
            SecretError::Rules(format!(
                "secret {file} is not declared in {RULES_FILE}: name who may read it under `files` (the file, or a folder holding it: \"secrets/NODE/\")"
            ))
        })?;
        let mut out = Vec::new();
        for name in names.iter().collect::<BTreeSet<_>>() {
            let (text, node) = match (self.nodes.get(name), self.operators.get(name)) {
                (Some(_), Some(_)) => {
                    return Err(SecretError::Rules(format!(
                        "`{name}` is both a node and an operator in {RULES_FILE}"
                    )))
                }
                (Some(k), None) => (k, true),
                (None, Some(k)) => (k, false),
                (None, None) => {
                    return Err(SecretError::Rules(format!(
                        "secret {file}: recipient `{name}` is neither a node nor an operator of {RULES_FILE}"
                    )))
                }
            };
            out.push(Recipient {
                name: name.clone(),
                node,
                key: parse_key(name, text)?,
            });
        }
        Ok(out)
    }

    /// Every key by name (nodes' and operators'), parsed.
    pub fn check_keys(&self) -> Result<(), SecretError> {
        for (name, text) in self.nodes.iter().chain(&self.operators) {
            parse_key(name, text)?;
        }
        Ok(())
    }
}

/// Checks a secret's file as a declaration names it: a relative path in the fleet's tree,
/// without `.`, `..` or empty components.
pub fn check_file(file: &str) -> Result<(), String> {
    let ok = !file.is_empty()
        && !file.starts_with('/')
        && !file.contains('\0')
        && file
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
        && !file.chars().any(crate::text::is_hazard);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a secret file of the fleet's tree: write a relative path like \"secrets/db.age\", without `..`",
            crate::text::escape(file)
        ))
    }
}

/// A container's environment variable's value from its secret's plaintext: the text without
/// its trailing newlines (as `$(cat FILE)` gives it, so a secret written by an editor is the
/// value typed). Text with a NUL cannot be an environment value; the error never holds it.
pub fn environment_value(plaintext: &[u8]) -> Result<Zeroizing<String>, String> {
    let mut end = plaintext.len();
    while end > 0 && plaintext[end - 1] == b'\n' {
        end -= 1;
        if end > 0 && plaintext[end - 1] == b'\r' {
            end -= 1;
        }
    }
    let text = std::str::from_utf8(&plaintext[..end])
        .map_err(|_| "its plaintext is not UTF-8 text, as an environment value is".to_owned())?;
    if text.contains('\0') {
        return Err("its plaintext holds a NUL, which an environment value cannot".to_owned());
    }
    Ok(Zeroizing::new(text.to_owned()))
}

/// Parses an `ssh-ed25519` public key line (its comment ignored).
pub fn parse_key(name: &str, text: &str) -> Result<age::ssh::Recipient, SecretError> {
    let err = |why: String| SecretError::Key {
        name: name.to_owned(),
        why,
    };
    let mut words = text.split_whitespace();
    let (kind, key) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if kind != "ssh-ed25519" {
        return Err(err(format!("its type is `{kind}`")));
    }
    format!("{kind} {key}")
        .parse::<age::ssh::Recipient>()
        .map_err(|e| err(format!("{e:?}")))
}

/// The tag an age `ssh-ed25519` stanza names its key by: the first 4 bytes of the SHA-256 of
/// the key's SSH wire encoding, in unpadded base64.
pub fn key_tag(key: &age::ssh::Recipient) -> String {
    let wire = match key {
        age::ssh::Recipient::SshEd25519(wire, _) | age::ssh::Recipient::SshRsa(wire, _) => wire,
    };
    let digest = sha2::Sha256::digest(wire);
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(&digest[..4])
}

/// The tags of the `ssh-ed25519` stanzas of an age file's header: the host keys it is
/// encrypted to. (The header is public: reading it needs no key.)
pub fn stanza_tags(file: &str, ciphertext: &[u8]) -> Result<BTreeSet<String>, SecretError> {
    let not_age = |why: &str| SecretError::NotAge {
        file: file.to_owned(),
        why: why.to_owned(),
    };
    let mut bytes = Vec::new();
    let mut reader = age::armor::ArmoredReader::new(ciphertext);
    // The header is at the start; a few KiB hold any header with a hundred recipients.
    let mut chunk = [0u8; 4096];
    loop {
        let n = reader
            .read(&mut chunk)
            .map_err(|e| not_age(&e.to_string()))?;
        bytes.extend_from_slice(&chunk[..n]);
        if n == 0 || bytes.windows(4).any(|w| w == b"\n---") || bytes.len() > 1 << 20 {
            break;
        }
    }
    let end = bytes
        .windows(4)
        .position(|w| w == b"\n---")
        .ok_or_else(|| not_age("no header"))?;
    let header = std::str::from_utf8(&bytes[..end]).map_err(|_| not_age("a damaged header"))?;
    let mut lines = header.lines();
    if lines.next() != Some("age-encryption.org/v1") {
        return Err(not_age("it does not begin `age-encryption.org/v1`"));
    }
    Ok(lines
        .filter_map(|l| l.strip_prefix("-> ssh-ed25519 "))
        .filter_map(|args| args.split(' ').next())
        .map(str::to_owned)
        .collect())
}

/// Encrypts `plaintext` to `recipients`, ASCII-armored (so it diffs as text and imports as
/// text: ciphertext, whatever imports it).
pub fn encrypt(
    file: &str,
    plaintext: &[u8],
    recipients: &[Recipient],
) -> Result<Vec<u8>, SecretError> {
    let err = |why: String| SecretError::Encrypt {
        file: file.to_owned(),
        why,
    };
    let keys: Vec<&dyn age::Recipient> = recipients
        .iter()
        .map(|r| &r.key as &dyn age::Recipient)
        .collect();
    let encryptor =
        age::Encryptor::with_recipients(keys.into_iter()).map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    let armored = age::armor::ArmoredWriter::wrap_output(&mut out, age::armor::Format::AsciiArmor)
        .map_err(|e| err(e.to_string()))?;
    let mut writer = encryptor
        .wrap_output(armored)
        .map_err(|e| err(e.to_string()))?;
    writer
        .write_all(plaintext)
        .map_err(|e| err(e.to_string()))?;
    writer
        .finish()
        .and_then(|a| a.finish())
        .map_err(|e| err(e.to_string()))?;
    Ok(out)
}

/// A private key that decrypts: a node's host key or an operator's key (OpenSSH format, not
/// passphrase-protected).
pub struct Identity {
    key: age::ssh::Identity,
    /// Where it was read from, for errors.
    pub path: String,
    /// Its public key's tag ([`key_tag`]), for errors.
    pub tag: Option<String>,
    /// Its public key (`ssh-ed25519 AAAA…`), when it can be derived.
    pub public: Option<String>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identity({})", self.path)
    }
}

impl Identity {
    /// Reads a private key from its bytes (zeroed by the caller).
    pub fn parse(path: &str, bytes: &[u8]) -> Result<Self, SecretError> {
        let err = |why: String| SecretError::Identity {
            path: path.to_owned(),
            why,
        };
        let key = age::ssh::Identity::from_buffer(bytes, Some(path.to_owned()))
            .map_err(|e| err(format!("not an OpenSSH private key: {e}")))?;
        match &key {
            age::ssh::Identity::Unencrypted(_) => {}
            age::ssh::Identity::Encrypted(_) => {
                return Err(err(
                    "the key is passphrase-protected: the mesh needs a key it can use unattended"
                        .into(),
                ))
            }
            age::ssh::Identity::Unsupported(_) => {
                return Err(err("a key type age does not support".into()))
            }
        }
        let public = ssh_key::PrivateKey::from_openssh(bytes)
            .ok()
            .and_then(|k| k.public_key().to_openssh().ok());
        let tag = public
            .as_deref()
            .and_then(|p| parse_key("", p).ok())
            .map(|r| key_tag(&r));
        Ok(Self {
            key,
            path: path.to_owned(),
            tag,
            public,
        })
    }

    /// Reads a private key file.
    pub fn read(path: &std::path::Path) -> Result<Self, SecretError> {
        let shown = path.display().to_string();
        let bytes = Zeroizing::new(std::fs::read(path).map_err(|e| SecretError::Identity {
            path: shown.clone(),
            why: e.to_string(),
        })?);
        Self::parse(&shown, &bytes)
    }

    /// Decrypts `ciphertext` (the secret `file`, for errors); the plaintext, zeroed on drop.
    pub fn decrypt(
        &self,
        file: &str,
        ciphertext: &[u8],
        recipients: &[String],
    ) -> Result<Zeroizing<Vec<u8>>, SecretError> {
        let err = |why: String| SecretError::Decrypt {
            file: file.to_owned(),
            key: match &self.tag {
                Some(tag) => format!("{} (tag {tag})", self.path),
                None => self.path.clone(),
            },
            why,
            recipients: recipients.to_vec(),
        };
        let decryptor = age::Decryptor::new_buffered(age::armor::ArmoredReader::new(ciphertext))
            .map_err(|e| err(describe(&e)))?;
        let mut reader = decryptor
            .decrypt(std::iter::once(&self.key as &dyn age::Identity))
            .map_err(|e| err(describe(&e)))?;
        let mut out = Zeroizing::new(Vec::new());
        reader
            .read_to_end(&mut out)
            .map_err(|e| err(format!("the ciphertext is damaged ({})", e.kind())))?;
        Ok(out)
    }
}

fn describe(e: &age::DecryptError) -> String {
    match e {
        age::DecryptError::NoMatchingKeys => "it is not encrypted to this key".into(),
        age::DecryptError::InvalidHeader | age::DecryptError::InvalidMac => {
            "the ciphertext is damaged".into()
        }
        age::DecryptError::DecryptionFailed => "the ciphertext is damaged".into(),
        other => other.to_string(),
    }
}

/// The names of the placeholders (`{{secret.NAME}}`) in a template, sorted.
pub fn placeholders(template: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = template;
    while let Some(at) = rest.find(PLACEHOLDER) {
        rest = &rest[at + PLACEHOLDER.len()..];
        if let Some(end) = rest.find("}}") {
            out.insert(rest[..end].to_owned());
            rest = &rest[end + 2..];
        }
    }
    out
}

/// A template with each `{{secret.NAME}}` replaced by `values[NAME]`: the file's content,
/// zeroed on drop. A placeholder without a value stays as it is (the build refuses one).
pub fn render(
    template: &[u8],
    values: &BTreeMap<String, Zeroizing<Vec<u8>>>,
) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::with_capacity(template.len()));
    let mut rest = template;
    let open = PLACEHOLDER.as_bytes();
    while let Some(at) = rest.windows(open.len()).position(|w| w == open) {
        out.extend_from_slice(&rest[..at]);
        let after = &rest[at + open.len()..];
        let end = after.windows(2).position(|w| w == b"}}");
        let value = end
            .and_then(|end| std::str::from_utf8(&after[..end]).ok())
            .and_then(|name| values.get(name));
        match (end, value) {
            (Some(end), Some(v)) => {
                out.extend_from_slice(v);
                rest = &after[end + 2..];
            }
            _ => {
                out.extend_from_slice(open);
                rest = after;
            }
        }
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHsKLqeplhpW+uObz5dvMgjz1OxfM/XXUB+VHtZ6isGN alice@rust";

    /// A keyed digest is the digest of the wrapped content, differs from the plain digest and
    /// between keys, and only the key that wrapped a content unwraps it.
    #[test]
    fn keyed_digests_name_wrapped_blobs_and_only_the_key_unwraps() {
        let (a, b) = (DigestKey::derive(b"node a"), DigestKey::derive(b"node b"));
        let wrapped = a.wrap(b"hunter2");
        assert_eq!(a.digest(b"hunter2"), BlobHash::of(&wrapped));
        assert_ne!(a.digest(b"hunter2"), BlobHash::of(b"hunter2"));
        assert_ne!(a.digest(b"hunter2"), b.digest(b"hunter2"));
        assert_eq!(a.unwrap(&wrapped), Some(&b"hunter2"[..]));
        assert_eq!(b.unwrap(&wrapped), None, "another node's key");
        let mut tampered = wrapped.to_vec();
        *tampered.last_mut().unwrap() ^= 1;
        assert_eq!(a.unwrap(&tampered), None, "a changed content");
        assert_eq!(a.unwrap(b"hunter2"), None, "a plain content");
    }

    /// A file's own entry wins; else the innermost folder holding it; a folder's entry covers
    /// what is under it only (not a file whose name merely starts the same), and nothing else.
    #[test]
    fn a_folders_readers_are_those_of_every_secret_under_it() {
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let rules = Rules {
            nodes: BTreeMap::from([("web-1".to_owned(), KEY.to_owned())]),
            operators: BTreeMap::from([("alice".to_owned(), KEY.replace("alice", "a2"))]),
            files: BTreeMap::from([
                ("secrets/".to_owned(), names(&["alice"])),
                ("secrets/web-1/".to_owned(), names(&["web-1", "alice"])),
                ("secrets/web-1/etc/own.age".to_owned(), names(&["web-1"])),
            ]),
        };
        let readers = |f: &str| rules.readers(f).map(<[String]>::to_vec);
        assert_eq!(
            readers("secrets/web-1/etc/own.age"),
            Some(names(&["web-1"]))
        );
        assert_eq!(
            readers("secrets/web-1/etc/app/app.env.age"),
            Some(names(&["web-1", "alice"]))
        );
        assert_eq!(readers("secrets/web-10/x.age"), Some(names(&["alice"])));
        assert_eq!(readers("other/x.age"), None);
        let r = rules
            .recipients("secrets/web-1/etc/app/app.env.age")
            .unwrap();
        assert_eq!(
            r.iter()
                .map(|r| (r.name.as_str(), r.node))
                .collect::<Vec<_>>(),
            [("alice", false), ("web-1", true)]
        );
        let e = rules.recipients("other/x.age").unwrap_err().to_string();
        assert!(e.contains("a folder holding it"), "{e}");
    }

    /// The tag of a key is the one age writes in the stanza of a file encrypted to it.
    #[test]
    fn the_stanza_names_the_key_by_its_tag() {
        let key = parse_key("alice", KEY).unwrap();
        let r = Recipient {
            name: "alice".into(),
            node: false,
            key: key.clone(),
        };
        let ct = encrypt("x.age", b"hunter2", &[r]).unwrap();
        assert!(ct.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----"));
        assert!(!String::from_utf8_lossy(&ct).contains("hunter2"));
        let tags = stanza_tags("x.age", &ct).unwrap();
        assert_eq!(tags, [key_tag(&key)].into());
    }

    /// Placeholders are replaced by their values; an unknown one stays.
    #[test]
    fn a_template_is_rendered() {
        let values = [("db".to_owned(), Zeroizing::new(b"pw".to_vec()))].into();
        let out = render(b"a={{secret.db}} b={{secret.x}} c={{x}}", &values);
        assert_eq!(&out[..], b"a=pw b={{secret.x}} c={{x}}");
        assert_eq!(
            placeholders("a={{secret.db}} {{secret.y}}"),
            ["db".to_owned(), "y".to_owned()].into()
        );
    }

    #[test]
    fn an_environment_value_is_the_text_without_its_trailing_newlines() {
        assert_eq!(*environment_value(b"s3cret\n").unwrap(), "s3cret");
        assert_eq!(*environment_value(b"s3cret\r\n\n").unwrap(), "s3cret");
        assert_eq!(*environment_value(b"two\nlines").unwrap(), "two\nlines");
        assert_eq!(*environment_value(b"").unwrap(), "");
        let bad = environment_value(b"a\0b").unwrap_err();
        assert!(bad.contains("NUL"), "{bad}");
        assert!(environment_value(&[0xff, 0xfe]).is_err());
    }
}
