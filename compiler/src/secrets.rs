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

use mesh_lib::secret::{key_tag, stanza_tags, Rules, SecretContent, RULES_FILE};
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
    if generation.files.values().all(|f| f.secret.is_none()) {
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
    for (path, entry) in generation.files.iter_mut() {
        let Some(secret) = entry.secret.as_mut() else {
            continue;
        };
        for r in secret.refs_mut() {
            let file = r.file.clone();
            let refuse = |why: String| MeshDiagnostic::new(format!("{path}: secret {file}: {why}"));
            let recipients = rules
                .recipients(&file)
                .map_err(|e| MeshDiagnostic::new(format!("{path}: {e}")))?;
            let names: Vec<String> = recipients.iter().map(|r| r.name.clone()).collect();
            if !names.contains(&node) {
                return Err(refuse(format!(
                    "node {node} is not among its recipients ({}) in {RULES_FILE}",
                    names.join(", ")
                ))
                .with_help(format!(
                    "add `{node}` to its recipients in {RULES_FILE}, then `mesh secret rekey`"
                )));
            }
            let Some(key) = &host_key else {
                return Err(refuse(format!(
                    "node {node} has no host key in {RULES_FILE} (`nodes.{node}`)"
                ))
                .with_help("give it the node's /etc/ssh/ssh_host_ed25519_key.pub"));
            };
            let on_disk = tree.root.join(&file);
            if !tree.allows(&on_disk) {
                return Err(refuse(format!(
                    "{} is not a file of the fleet's tree {}",
                    on_disk.display(),
                    tree.root.display()
                ))
                .with_help("create it with `mesh secret edit FILE`"));
            }
            let bytes = std::fs::read(&on_disk)
                .map_err(|e| refuse(format!("cannot read {}: {e}", on_disk.display())))?;
            let tags = stanza_tags(&file, &bytes).map_err(|e| refuse(e.to_string()))?;
            if !tags.contains(&key_tag(key)) {
                return Err(refuse(format!(
                    "it is not encrypted to node {node}'s host key (the one {RULES_FILE} gives)"
                ))
                .with_help("re-encrypt it to the recipients declared now: `mesh secret rekey`"));
            }
            let hash = BlobHash::of(&bytes);
            sources.push((
                std::fs::canonicalize(&on_disk).unwrap_or(on_disk),
                *blake3::hash(&bytes).as_bytes(),
            ));
            r.ciphertext = hash;
            r.recipients = names;
            if !assembled.blobs.iter().any(|b| b.hash == hash) {
                assembled.blobs.push(NewBlob {
                    hash,
                    bytes,
                    private: true,
                });
            }
        }
        if let SecretContent::Whole(r) = secret {
            entry.blob = r.ciphertext;
            entry.size = assembled
                .blobs
                .iter()
                .find(|b| b.hash == r.ciphertext)
                .map_or(0, |b| b.bytes.len() as u64);
        }
    }
    Ok(sources)
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
