//! `mesh push`: every node's generation built (with its record from the fleet's records
//! folder, as CI builds it), signed, and published to an OCI registry as the node's artifact
//! (see [`mesh_registry`]): only the objects the registry lacks are sent, and the node's tag is
//! moved to it. Nodes pull it themselves (`mesh pull`); nothing here reaches a node.

use std::collections::BTreeMap;
use std::path::PathBuf;

use mesh_compiler::Evaluator;
use mesh_lib::{BlobHash, GenerationId, Store};
use mesh_registry::{Piece, Publication, Registry, Sent};
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
    // Signed one after another (a hardware key asks for a touch per signature), then each
    // node's artifact laid out, its tag read, several at once.
    let signed: Vec<(String, Result<GenerationId, String>)> = built
        .into_iter()
        .map(|b| {
            let result = (|| {
                let store = store.as_ref().map_err(|e| e.to_string())?;
                let g = b.result.map_err(|e| format!("its build: {e}"))?;
                if let Some(signer) = &options.signer {
                    signer
                        .sign_into(store, &g.id)
                        .map_err(|e| format!("signing it: {e}"))?;
                }
                Ok(g.id)
            })();
            (b.node, result)
        })
        .collect();
    crate::each(&signed, AT_ONCE, |(node, signed)| {
        let result = signed.clone().and_then(|id| {
            let store = store.as_ref().map_err(|e| e.to_string())?;
            let previous = registry.artifact(node).ok();
            let p = mesh_registry::publication(
                store,
                node,
                &id,
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
        registry
            .upload_object(hash, piece)
            .map_err(|e| e.to_string())
    });
    let uploaded: BTreeMap<BlobHash, (usize, Result<Sent, String>)> = objects
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
        };
        let (id, publication) = match &p.result {
            Err(e) => {
                line.error = Some(e.clone());
                return line;
            }
            Ok(ready) => ready,
        };
        line.generation = Some(*id);
        let done = (|| {
            let mut sent = Sent::default();
            for (hash, _) in &publication.objects {
                match &uploaded[hash] {
                    (owner, Ok(s)) if owner == i => sent += *s,
                    (_, Ok(_)) => sent.objects_reused += 1,
                    (_, Err(e)) => return Err(e.clone()),
                }
            }
            sent += registry
                .upload_node(publication)
                .map_err(|e| e.to_string())?;
            line.sent = sent;
            if tag {
                let bytes = registry
                    .tag(&p.node, publication)
                    .map_err(|e| e.to_string())?;
                line.tag_moved = bytes > 0;
                line.sent.bytes += bytes;
            }
            Ok(())
        })();
        if let Err(e) = done {
            line.error = Some(e);
        }
        line
    })
}

/// The bytes a push sent in all.
pub fn bytes(lines: &[Pushed]) -> u64 {
    lines.iter().map(|l| l.sent.bytes).sum()
}
