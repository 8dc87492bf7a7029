//! `mesh push`: every node's generation built (with its record from the fleet's records
//! folder, as CI builds it), signed, and published to an OCI registry as the node's artifact
//! (see [`mesh_registry`]): only the objects the registry lacks are sent, and the node's tag is
//! moved to it. Nodes pull it themselves (`mesh pull`); nothing here reaches a node.

use std::collections::BTreeMap;
use std::path::PathBuf;

use mesh_compiler::Evaluator;
use mesh_lib::{BlobHash, GenerationId, Store};
use mesh_registry::{Piece, Publication, Registry, RegistryError, Sent};
use serde::Serialize;

use crate::file::{Fleet, Node};

/// How a push goes.
pub struct Options {
    /// Builds at once.
    pub parallel: usize,
    /// The publisher's state directory (its store holds what is built).
    pub state_dir: PathBuf,
    /// Where builds evaluate.
    pub evaluator: Evaluator,
    /// Signs each generation (one already signed in the store is published with its
    /// signatures anyway).
    pub signer: Option<crate::sign::Signer>,
    /// The source revision, for the artifacts' annotation.
    pub revision: Option<String>,
    /// How long each node's statement holds.
    pub valid_for: std::time::Duration,
}

/// A node's generation, ready to publish.
pub struct Prepared {
    /// The node.
    pub node: String,
    /// Its generation and its artifact, or why not.
    pub result: Result<(GenerationId, Publication), String>,
}

/// One node's line of a push.
#[derive(Debug, Clone, Serialize)]
pub struct Pushed {
    /// The node.
    pub node: String,
    /// Its generation.
    pub generation: Option<GenerationId>,
    /// What went to the registry for it (objects another node shares count once, for the
    /// first).
    pub sent: Sent,
    /// Whether its tag moved (it already named this artifact: no).
    pub tag_moved: bool,
    /// Why it was not published.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether that is a refusal another try as it is cannot help: the registry denied the
    /// docker config's credentials, or asked for some and it has none.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
}

/// Why something went wrong at the registry, in words, and whether it refused access.
#[derive(Debug, Clone)]
struct NotSent {
    why: String,
    refused: bool,
}

impl From<RegistryError> for NotSent {
    fn from(e: RegistryError) -> Self {
        Self {
            refused: matches!(e, RegistryError::Denied { .. }),
            why: e.to_string(),
        }
    }
}

/// The revision of the checkout the fleet file is in (`git rev-parse HEAD`), if it is one.
pub fn revision_of(fleet: &Fleet) -> Option<String> {
    let dir = fleet.file.parent()?;
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// Builds, signs and lays out each of `nodes`' artifacts (with deltas from the keyframe and
/// the generation each node's tag in `registry` names now, when the store has them).
pub fn prepare(
    fleet: &Fleet,
    nodes: &[&Node],
    options: &Options,
    registry: &Registry,
) -> Vec<Prepared> {
    let built = crate::build::all(
        fleet,
        nodes,
        &options.state_dir,
        &options.evaluator,
        options.parallel,
    );
    let store = Store::open(&options.state_dir);
    // What each node's tag names now, several read at once: the base of its deltas, and the
    // sequence its next statement must pass.
    let names: Vec<String> = built.iter().map(|b| b.node.clone()).collect();
    let previous = crate::each(&names, AT_ONCE, |node| registry.artifact(node).ok());
    // Signed one after another (a hardware key asks for a touch per signature), then each
    // node's artifact laid out, several at once.
    let signed: Vec<(String, Option<mesh_registry::Artifact>, Result<_, String>)> = built
        .into_iter()
        .zip(previous)
        .map(|(b, previous)| {
            let result = (|| {
                let store = store.as_ref().map_err(|e| e.to_string())?;
                let g = b.result.map_err(|e| format!("its build: {e}"))?;
                // The tag names this generation already, under a statement that holds for
                // more than half the time a new one would: kept, and the tag with it (a push
                // that changes nothing for a node moves nothing).
                let kept = fresh_statement(previous.as_ref(), &b.node, &g.id, options.valid_for);
                let statement = match &options.signer {
                    Some(_) if kept.is_some() => kept,
                    Some(signer) => {
                        signer
                            .sign_into(store, &g.id)
                            .map_err(|e| format!("signing it: {e}"))?;
                        let highest = previous.as_ref().and_then(sequence_of);
                        Some(
                            signer
                                .state(&b.node, Some(g.id), highest, options.valid_for)
                                .map_err(|e| format!("signing its statement: {e}"))?,
                        )
                    }
                    None => None,
                };
                Ok((g.id, statement))
            })();
            (b.node, previous, result)
        })
        .collect();
    crate::each(&signed, AT_ONCE, |(node, previous, signed)| {
        let result = signed.clone().and_then(|(id, statement)| {
            let store = store.as_ref().map_err(|e| e.to_string())?;
            let p = mesh_registry::publication(
                store,
                node,
                &id,
                statement.as_ref(),
                options.revision.as_deref(),
                previous.as_ref(),
            )
            .map_err(|e| e.to_string())?;
            Ok((id, p))
        });
        Prepared {
            node: node.clone(),
            result,
        }
    })
}

/// The statement `previous` (a node's artifact now) carries, when it names `id` for `node` and
/// holds for more than half of `valid_for` from now.
fn fresh_statement(
    previous: Option<&mesh_registry::Artifact>,
    node: &str,
    id: &GenerationId,
    valid_for: std::time::Duration,
) -> Option<mesh_lib::statement::Signed> {
    let previous = previous.filter(|a| a.generation == *id)?;
    let signed = previous.statement()?.ok()?;
    let statement = mesh_lib::statement::Statement::parse(&signed.statement).ok()?;
    let half = std::time::SystemTime::now() + valid_for / 2;
    (statement.node == node && statement.generation == Some(*id) && !statement.expired(half))
        .then_some(signed)
}

/// The sequence of the statement an artifact carries, if it carries one.
pub fn sequence_of(artifact: &mesh_registry::Artifact) -> Option<u64> {
    let signed = artifact.statement()?.ok()?;
    mesh_lib::statement::Statement::parse(&signed.statement)
        .ok()
        .map(|s| s.sequence)
}

/// Requests to the registry under way at once: each is small, and most of a push is waiting
/// for the answers.
const AT_ONCE: usize = 8;

/// Sends what the registry lacks of every prepared artifact and, when `tag`, moves each node's
/// tag to its artifact: a line per node. Every object first, each once (for the first node
/// that references it; a later one counts it as there already), several requests at once; then
/// each node's artifact and its tag — never before its objects, so that a tag names nothing the
/// registry lacks.
pub fn publish(registry: &Registry, prepared: &[Prepared], tag: bool) -> Vec<Pushed> {
    let mut first: BTreeMap<BlobHash, (usize, &Piece)> = BTreeMap::new();
    for (i, p) in prepared.iter().enumerate() {
        if let Ok((_, publication)) = &p.result {
            for (hash, piece) in &publication.objects {
                first.entry(*hash).or_insert((i, piece));
            }
        }
    }
    let objects: Vec<(&BlobHash, &(usize, &Piece))> = first.iter().collect();
    let sent = crate::each(&objects, AT_ONCE, |(hash, (_, piece))| {
        registry.upload_object(hash, piece).map_err(NotSent::from)
    });
    let uploaded: BTreeMap<BlobHash, (usize, Result<Sent, NotSent>)> = objects
        .iter()
        .zip(sent)
        .map(|((hash, (owner, _)), sent)| (**hash, (*owner, sent)))
        .collect();
    let nodes: Vec<(usize, &Prepared)> = prepared.iter().enumerate().collect();
    crate::each(&nodes, AT_ONCE, |(i, p)| {
        let mut line = Pushed {
            node: p.node.clone(),
            generation: None,
            sent: Sent::default(),
            tag_moved: false,
            error: None,
            refused: false,
        };
        let (id, publication) = match &p.result {
            Err(e) => {
                line.error = Some(e.clone());
                return line;
            }
            Ok(ready) => ready,
        };
        line.generation = Some(*id);
        let done: Result<(), NotSent> = (|| {
            let mut sent = Sent::default();
            for (hash, _) in &publication.objects {
                match &uploaded[hash] {
                    (owner, Ok(s)) if owner == i => sent += *s,
                    (_, Ok(_)) => sent.objects_reused += 1,
                    (_, Err(e)) => return Err(e.clone()),
                }
            }
            sent += registry.upload_node(publication)?;
            line.sent = sent;
            if tag {
                let bytes = registry.tag(&p.node, publication)?;
                line.tag_moved = bytes > 0;
                line.sent.bytes += bytes;
            }
            Ok(())
        })();
        if let Err(e) = done {
            line.error = Some(e.why);
            line.refused = e.refused;
        }
        line
    })
}

/// The bytes a push sent in all.
pub fn bytes(lines: &[Pushed]) -> u64 {
    lines.iter().map(|l| l.sent.bytes).sum()
}
