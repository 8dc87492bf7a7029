//! A node's secrets, read from the fleet's tree once its files are assembled: each secret file's
//! ciphertext becomes a blob (the store holds the ciphertext, never a plaintext), its hash and
//! recipients go into the generation, and a secret the node may not read is refused.
//!
//! Who may read what is the tree's `secrets.ncl` ([`mesh_lib::secret::Rules`]). A node may
//! read a secret when `secrets.ncl` names it among the secret's recipients *and* the ciphertext
//! is encrypted to the host key `secrets.ncl` gives for it (its header's `ssh-ed25519` stanza
//! names the key by a tag): no key is needed to check either, so a build gives the same id on
//! any machine. The files read are sources of the build, like its imports: a changed
//! ciphertext is a new evaluation, not a cache hit.

use std::path::Path;

use mesh_lib::secret::{key_tag, stanza_tags, Rules, SecretContent, SecretRef, RULES_FILE};
use mesh_lib::BlobHash;

use crate::assemble::{Assembled, NewBlob};
use crate::diagnostic::MeshDiagnostic;
use crate::eval::ReadSource;
use crate::imports::Tree;

/// Reads the ciphertexts of every secret of `assembled` from `tree`, checks that the node may
/// read each, and fills in their hashes; the files read (for the evaluation cache).
pub(crate) fn resolve(
    assembled: &mut Assembled,
    tree: &Tree,
    library: &Path,
) -> Result<Vec<ReadSource>, MeshDiagnostic> {
    let generation = &mut assembled.generation;
    if generation.files.values().all(|f| f.secret.is_none())
        && generation
            .containers
            .values()
            .all(|c| c.secret_environment.is_empty())
    {
        return Ok(Vec::new());
    }
    let node = generation.node.to_string();
    let (rules, mut sources) = rules(tree, library)?;
    let host_key = rules
        .nodes
        .get(&node)
        .map(|k| mesh_lib::secret::parse_key(&node, k))
        .transpose()
        .map_err(|e| MeshDiagnostic::new(format!("{RULES_FILE}: {e}")))?;
    let mut reader = Reader {
        rules: &rules,
        host_tag: host_key.as_ref().map(key_tag),
        node: &node,
        tree,
        sources: &mut sources,
        blobs: &mut assembled.blobs,
    };
    for (path, entry) in generation.files.iter_mut() {
        let Some(secret) = entry.secret.as_mut() else {
            continue;
        };
        for r in secret.refs_mut() {
            reader.read(r, path.as_str())?;
        }
        if let SecretContent::Whole(r) = secret {
            entry.blob = r.ciphertext;
            entry.size = reader
                .blobs
                .iter()
                .find(|b| b.hash == r.ciphertext)
                .map_or(0, |b| b.bytes.len() as u64);
        }
    }
    for (name, container) in generation.containers.iter_mut() {
        for (var, r) in container.secret_environment.iter_mut() {
            reader.read(r, &format!("container {name}, environment variable {var}"))?;
        }
    }
    Ok(sources)
}

/// What reads a node's secrets' ciphertexts from the tree.
struct Reader<'a> {
    rules: &'a Rules,
    /// The tag of the node's host key, as a ciphertext's stanza names it.
    host_tag: Option<String>,
    node: &'a str,
    tree: &'a Tree,
    sources: &'a mut Vec<ReadSource>,
    blobs: &'a mut Vec<NewBlob>,
}

impl Reader<'_> {
    /// Reads `r`'s ciphertext (what needs it: `what`), checks that the node may read it, and
    /// fills in its hash and recipients.
    fn read(&mut self, r: &mut SecretRef, what: &str) -> Result<(), MeshDiagnostic> {
        let node = self.node;
        let file = r.file.clone();
        let refuse = |why: String| MeshDiagnostic::new(format!("{what}: secret {file}: {why}"));
        let recipients = self
            .rules
            .recipients(&file)
            .map_err(|e| MeshDiagnostic::new(format!("{what}: {e}")))?;
        let names: Vec<String> = recipients.iter().map(|r| r.name.clone()).collect();
        if !names.iter().any(|n| n == node) {
            return Err(refuse(format!(
                "node {node} is not among its recipients ({}) in {RULES_FILE}",
                names.join(", ")
            ))
            .with_help(format!(
                "add `{node}` to its recipients in {RULES_FILE}, then `mesh secret rekey`"
            )));
        }
        let Some(tag) = &self.host_tag else {
            return Err(refuse(format!(
                "node {node} has no host key in {RULES_FILE} (`nodes.{node}`)"
            ))
            .with_help("give it the node's /etc/ssh/ssh_host_ed25519_key.pub"));
        };
        let on_disk = self.tree.root.join(&file);
        if !self.tree.allows(&on_disk) {
            return Err(refuse(format!(
                "{} is not a file of the fleet's tree {}",
                on_disk.display(),
                self.tree.root.display()
            ))
            .with_help("create it with `mesh secret edit FILE`"));
        }
        let bytes = std::fs::read(&on_disk)
            .map_err(|e| refuse(format!("cannot read {}: {e}", on_disk.display())))?;
        let tags = stanza_tags(&file, &bytes).map_err(|e| refuse(e.to_string()))?;
        if !tags.contains(tag) {
            return Err(refuse(format!(
                "it is not encrypted to node {node}'s host key (the one {RULES_FILE} gives)"
            ))
            .with_help("re-encrypt it to the recipients declared now: `mesh secret rekey`"));
        }
        let hash = BlobHash::of(&bytes);
        self.sources.push((
            std::fs::canonicalize(&on_disk).unwrap_or(on_disk),
            *blake3::hash(&bytes).as_bytes(),
        ));
        r.ciphertext = hash;
        r.recipients = names;
        if !self.blobs.iter().any(|b| b.hash == hash) {
            self.blobs.push(NewBlob {
                hash,
                bytes,
                private: true,
            });
        }
        Ok(())
    }
}

/// The tree's `secrets.ncl`, evaluated, and the files its evaluation read.
pub fn rules(tree: &Tree, library: &Path) -> Result<(Rules, Vec<ReadSource>), MeshDiagnostic> {
    let file = tree.root.join(RULES_FILE);
    if !file.is_file() {
        return Err(MeshDiagnostic::new(format!(
            "the node declares secrets, but the fleet's tree {} has no {RULES_FILE} saying who may read them",
            tree.root.display()
        ))
        .with_help(format!(
            "write {RULES_FILE} at the tree's root: `let mesh = import \"mesh.ncl\" in mesh.secrets {{ nodes = {{ NODE = \"ssh-ed25519 …\" }}, operators = {{ … }}, files = {{ \"secrets/x.age\" = [\"NODE\", …] }} }}`"
        )));
    }
    crate::imports::check_imports(&file, &[library.to_owned()], tree)?;
    let evaluation = crate::eval::evaluate_in(&file, library, &Default::default(), tree)?;
    let rules: Rules = evaluation.deserialize().map_err(|e| {
        MeshDiagnostic::new(format!(
            "{} does not evaluate to the fleet's secrets: {e}",
            crate::diagnostic::display_name(&file)
        ))
    })?;
    rules
        .check_keys()
        .map_err(|e| MeshDiagnostic::new(format!("{RULES_FILE}: {e}")))?;
    Ok((rules, evaluation.read_sources()))
}
