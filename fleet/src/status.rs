//! `mesh fleet status` — the migration's board, one line per node: reachable or not, its mode,
//! its generation and whether it is the one the fleet builds for it, its modules held and
//! taken, its files' and firewall's drift — and `mesh fleet records`, which keeps each node's
//! record beside the fleet file, so CI builds what the nodes build.

use std::path::Path;

use mesh_compiler::Evaluator;
use mesh_lib::{GenerationId, NodeRecord};
use serde::Serialize;

use crate::file::{Fleet, Node};
use crate::ssh::Link;

/// One node's line.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    /// The node.
    pub node: String,
    /// Whether a connection could be made.
    pub reachable: bool,
    /// Why not, or what failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// `adopted` or `managed`.
    pub mode: Option<String>,
    /// The generation in force.
    pub current: Option<GenerationId>,
    /// The generation the fleet builds for it, with its record.
    pub built: Option<GenerationId>,
    /// Modules taken and not taken.
    pub taken: Vec<String>,
    /// Modules assigned, not taken (held).
    pub not_taken: Vec<String>,
    /// How many of its files drifted.
    pub drifted_files: Option<usize>,
    /// Whether its firewall is as its generation says (`None`: not read).
    pub firewall_in_force: Option<bool>,
    /// Whether it runs a generation switched to by hand (a switch or a rollback on the node)
    /// that no deploy put there and the fleet does not build: `mesh deploy` leaves it as it is
    /// unless told `--replace-foreign`.
    pub foreign: bool,
    /// Whether the node can read the secrets the fleet builds for it (`None`: it has none, or
    /// the build or the node's host key could not be had).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secrets: Option<SecretsReadable>,
    /// The generation its tag in the registry names (`mesh fleet status --registry`).
    pub desired: Option<GenerationId>,
    /// Whether its tag is withdrawn (a rollout stopped; it names no generation).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub withdrawn: bool,
    /// Its last pull from a registry, as `mesh status` says it: from where, which generation,
    /// how it ended and why.
    pub last_pull: Option<serde_json::Value>,
    /// The statement its tag carries (`mesh fleet status --registry`): its sequence, when it
    /// expires, whether it has; `None`: none could be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag_statement: Option<serde_json::Value>,
    /// The newest statement the node accepted, as `mesh status` says it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statement: Option<serde_json::Value>,
}

/// Whether a node can read its secrets: each ciphertext's header (public, read without a key)
/// names the node's host key, as the node reports it (`mesh status`: its public key only).
#[derive(Debug, Clone, Serialize)]
pub struct SecretsReadable {
    /// Whether it can read every one.
    pub readable: bool,
    /// How many secret files the fleet's generation for it has.
    pub count: usize,
    /// The secret files not encrypted to its host key.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
    /// Why none can be read (its host key missing, unreadable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The secrets of `generation` checked against the node's public host key, as its status says
/// it (`host_key.public`, or `host_key.problem`); `None` when it has no secret.
fn secrets_readable(
    generation: &mesh_lib::Generation,
    state_dir: &Path,
    host_key: &serde_json::Value,
) -> Option<SecretsReadable> {
    use mesh_lib::secret::{key_tag, parse_key, stanza_tags};
    let refs: std::collections::BTreeMap<String, mesh_lib::BlobHash> = generation
        .files
        .values()
        .filter(|f| !matches!(f.state, mesh_lib::model::FileState::Held { .. }))
        .filter_map(|f| f.secret.as_ref())
        .flat_map(|s| {
            s.refs()
                .into_iter()
                .map(|(_, r)| (r.file.clone(), r.ciphertext))
        })
        .chain(
            generation
                .containers
                .values()
                .filter(|c| !matches!(c.state, mesh_lib::model::ContainerState::Held { .. }))
                .flat_map(|c| c.secret_environment.values())
                .map(|r| (r.file.clone(), r.ciphertext)),
        )
        .collect();
    if refs.is_empty() {
        return None;
    }
    let mut out = SecretsReadable {
        readable: false,
        count: refs.len(),
        unreadable: Vec::new(),
        problem: None,
    };
    let tag = match (host_key["public"].as_str(), host_key["problem"].as_str()) {
        (Some(public), _) => match parse_key("host key", public) {
            Ok(k) => key_tag(&k),
            Err(e) => {
                out.problem = Some(e.to_string());
                return Some(out);
            }
        },
        (None, Some(problem)) => {
            out.problem = Some(problem.to_owned());
            return Some(out);
        }
        (None, None) => {
            out.problem = Some("its mesh does not say its host key".into());
            return Some(out);
        }
    };
    let store = match mesh_lib::Store::open(state_dir) {
        Ok(s) => s,
        Err(e) => {
            out.problem = Some(e.to_string());
            return Some(out);
        }
    };
    for (file, hash) in refs {
        let ok = store
            .blob(&hash)
            .ok()
            .and_then(|c| stanza_tags(&file, &c).ok())
            .is_some_and(|tags| tags.contains(&tag));
        if !ok {
            out.unreadable.push(file);
        }
    }
    out.readable = out.unreadable.is_empty();
    Some(out)
}

impl Line {
    /// Whether the node runs what the fleet builds for it.
    pub fn up_to_date(&self) -> bool {
        self.current.is_some() && self.current == self.built
    }
}

fn text_list(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The node record, as `mesh record export` on the node says it (`None`: never adopted).
pub fn read_record(link: &mut Link) -> Result<Option<Vec<u8>>, String> {
    let ran = link
        .mesh(&["record", "export"], None)
        .map_err(|e| e.to_string())?;
    if ran.ok() {
        return Ok(Some(ran.stdout));
    }
    if ran.code == Some(1) && ran.stderr.contains("never adopted") {
        return Ok(None);
    }
    Err(format!("mesh record export: {}", ran.stderr.trim()))
}

/// One node's board line.
pub fn line(fleet: &Fleet, node: &Node, state_dir: &Path, evaluator: &Evaluator) -> Line {
    let mut line = Line {
        node: node.name.to_string(),
        reachable: false,
        problem: None,
        mode: None,
        current: None,
        built: None,
        taken: Vec::new(),
        not_taken: Vec::new(),
        drifted_files: None,
        firewall_in_force: None,
        foreign: false,
        secrets: None,
        desired: None,
        withdrawn: false,
        last_pull: None,
        tag_statement: None,
        statement: None,
    };
    let mut link = match Link::open(fleet, node) {
        Ok(l) => l,
        Err(e) => {
            line.problem = Some(e.to_string());
            return line;
        }
    };
    line.reachable = true;
    let status = match link.mesh(&["status", "--json"], None) {
        Ok(r) if r.ok() => {
            serde_json::from_slice::<serde_json::Value>(&r.stdout).unwrap_or_default()
        }
        Ok(r) => {
            line.problem = Some(format!("mesh status: {}", r.stderr.trim()));
            return line;
        }
        Err(e) => {
            line.problem = Some(e.to_string());
            return line;
        }
    };
    line.mode = status["mode"].as_str().map(str::to_owned);
    // `current` is {number, id}, or [number, id] from an older mesh.
    let current = &status["current"];
    line.current = current["id"]
        .as_str()
        .or_else(|| current[1].as_str())
        .and_then(|s| s.parse().ok());
    line.last_pull = Some(status["last_pull"].clone()).filter(|p| !p.is_null());
    line.statement = Some(status["statement"].clone()).filter(|p| !p.is_null());
    line.taken = text_list(&status["taken"]);
    line.not_taken = text_list(&status["not_taken"]);
    line.drifted_files = status["drift"].as_array().map(Vec::len);
    line.firewall_in_force = status["firewall"]["would_change"]
        .as_object()
        .map(|w| w.values().all(|v| v.is_null() || v == false || v == 0));
    match read_record(&mut link) {
        Ok(record) => {
            let record = match record.map(|b| NodeRecord::parse(&b)).transpose() {
                Ok(r) => r,
                Err(e) => {
                    line.problem = Some(format!("its record: {e}"));
                    return line;
                }
            };
            let label = std::path::PathBuf::from(format!("{}'s record", node.name));
            match crate::build::node(
                node,
                record.as_ref().map(|r| (r, label.as_path())),
                state_dir,
                evaluator,
            ) {
                Ok(b) => {
                    line.built = Some(b.id);
                    line.secrets = b
                        .generation()
                        .ok()
                        .and_then(|g| secrets_readable(g, state_dir, &status["host_key"]));
                }
                Err(e) => line.problem = Some(format!("the fleet's build of it failed: {e}")),
            }
        }
        Err(e) => line.problem = Some(e),
    }
    link.close();
    let by_hand = matches!(current["trigger"].as_str(), Some("build" | "rollback"));
    line.foreign = by_hand
        && current["deployed"] == false
        && line.current.is_some()
        && line.current != line.built;
    line
}

/// What `mesh fleet records` did for one node.
#[derive(Debug, Clone, Serialize)]
pub struct Fetched {
    /// The node.
    pub node: String,
    /// `written`, `unchanged`, `none` (never adopted: no record), or the problem.
    pub result: String,
}

/// Fetches one node's record into the fleet's records folder.
pub fn fetch_record(fleet: &Fleet, node: &Node) -> Fetched {
    let result = (|| {
        let mut link = Link::open(fleet, node).map_err(|e| e.to_string())?;
        let record = read_record(&mut link)?;
        link.close();
        let path = fleet.record_file(&node.name);
        match record {
            Some(bytes) => {
                NodeRecord::parse(&bytes).map_err(|e| format!("its record: {e}"))?;
                let wrote = crate::deploy::write_record(&path, &bytes)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                Ok(if wrote { "written" } else { "unchanged" }.to_owned())
            }
            None => {
                // Never adopted: no record, and none kept for it.
                if path.exists() {
                    std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                }
                Ok("none (never adopted)".to_owned())
            }
        }
    })();
    Fetched {
        node: node.name.to_string(),
        result: result.unwrap_or_else(|e: String| format!("failed: {e}")),
    }
}
