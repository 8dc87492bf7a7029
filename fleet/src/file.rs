//! The fleet file: a Nickel file ending in `mesh.fleet { nodes = { NAME = { declaration, ssh,
//! remote }, … }, ssh_config, records }`, every path in it relative to the file itself. Its
//! folder is the fleet's tree — where the imports of its nodes' declarations may lead — unless
//! a tree is given outright (`--tree`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mesh_compiler::{BuildError, MeshDiagnostic, TreeRule};
use mesh_lib::model::NodeName;
use serde::Deserialize;

#[derive(Deserialize)]
struct FleetOut {
    nodes: BTreeMap<String, NodeOut>,
    ssh_config: Option<String>,
    records: String,
    #[serde(default)]
    rollout: Option<RolloutOut>,
    #[serde(default)]
    statements: Option<StatementsOut>,
}

#[derive(Deserialize)]
struct StatementsOut {
    valid_for: Option<f64>,
}

#[derive(Deserialize)]
struct RolloutOut {
    #[serde(default)]
    waves: Vec<WaveOut>,
    within: Option<f64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum WaveOut {
    Names(Vec<String>),
    Share(String),
}

/// A wave as the fleet file declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaveSpec {
    /// These nodes.
    Names(Vec<String>),
    /// This percentage (1–100) of the nodes rolled out, rounded up: taken, in name order, from
    /// the nodes no wave before it took and no wave names.
    Share(u8),
}

impl WaveOut {
    fn spec(self) -> Result<WaveSpec, String> {
        match self {
            WaveOut::Names(n) => Ok(WaveSpec::Names(n)),
            WaveOut::Share(s) => s
                .strip_suffix('%')
                .and_then(|n| n.parse::<u8>().ok())
                .filter(|n| (1..=100).contains(n))
                .map(WaveSpec::Share)
                .ok_or_else(|| {
                    format!(
                        "the rollout's wave {} is neither an array of node names nor a share \
                         like \"25%\" (1% to 100%)",
                        mesh_lib::text::escape(&s)
                    )
                }),
        }
    }
}

/// How `mesh rollout` goes: the waves (node names, or a share of the nodes; the nodes in none
/// form the last) and how long a wave's nodes have to report the new generation confirmed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rollout {
    /// Each wave, in order.
    pub waves: Vec<WaveSpec>,
    /// Seconds a wave has (0: the default, 600).
    pub within: u64,
}

#[derive(Deserialize)]
struct NodeOut {
    declaration: String,
    ssh: SshOut,
    remote: RemoteOut,
}

#[derive(Deserialize)]
struct SshOut {
    destination: String,
    port: Option<u16>,
    user: Option<String>,
    identity: Option<String>,
}

#[derive(Deserialize)]
struct RemoteOut {
    mesh: String,
    state_dir: Option<String>,
    root: Option<String>,
    netns: Option<String>,
}

/// How the deployer reaches a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ssh {
    /// As ssh takes it: a host, `user@host`, or a `Host` of the ssh config.
    pub destination: String,
    /// The port, when not the ssh config's.
    pub port: Option<u16>,
    /// The user, when not the ssh config's.
    pub user: Option<String>,
    /// A private key file.
    pub identity: Option<PathBuf>,
}

/// How the mesh runs on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// Its binary.
    pub mesh: String,
    /// `--state-dir`, when not the node's default.
    pub state_dir: Option<String>,
    /// `--root`, when not `/`.
    pub root: Option<String>,
    /// `--netns`, when not the node's own.
    pub netns: Option<String>,
}

impl Remote {
    /// The mesh's global options for this node, then `args`.
    pub fn args(&self, args: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        for (flag, value) in [
            ("--state-dir", &self.state_dir),
            ("--root", &self.root),
            ("--netns", &self.netns),
        ] {
            if let Some(v) = value {
                out.push(flag.to_owned());
                out.push(v.clone());
            }
        }
        out.extend(args.iter().map(|a| (*a).to_owned()));
        out
    }
}

/// One node of the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its name (the key in the fleet file).
    pub name: NodeName,
    /// Its declaration.
    pub declaration: PathBuf,
    /// How to reach it.
    pub ssh: Ssh,
    /// How the mesh runs on it.
    pub remote: Remote,
    /// How its declaration's tree is found: the fleet file's folder, unless one is given.
    pub tree: TreeRule,
}

/// A fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    /// The fleet file.
    pub file: PathBuf,
    /// Its nodes, by name.
    pub nodes: BTreeMap<NodeName, Node>,
    /// The ssh_config file every connection uses, if the fleet names one.
    pub ssh_config: Option<PathBuf>,
    /// The folder of the nodes' records.
    pub records: PathBuf,
    /// The rollout's waves and health gate.
    pub rollout: Rollout,
    /// How long the statements a deploy, push or rollout signs hold, unless told otherwise.
    pub valid_for: std::time::Duration,
    /// The ssh_config the mesh's own ssh connections read (see [`crate::ssh::config_file`]):
    /// in the state directory; `None` when `MESH_SSH_NODELAY=0`.
    pub ssh_wrapper: Option<PathBuf>,
}

impl Fleet {
    /// Evaluates and reads the fleet file (with `state_dir` holding the mesh's library); `tree`
    /// is the fleet's tree when it is given outright (`--tree`), else the file's folder.
    pub fn load(file: &Path, state_dir: &Path, tree: Option<&Path>) -> Result<Self, BuildError> {
        let rule = TreeRule {
            tree: tree.map(Path::to_owned),
            fleet: Some(file.to_owned()),
        };
        let out: FleetOut = mesh_compiler::evaluate_data(file, state_dir, &rule)?;
        let file = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_owned());
        let rule = TreeRule {
            fleet: Some(file.clone()),
            ..rule
        };
        let here = file.parent().unwrap_or(Path::new("/")).to_owned();
        let mut nodes = BTreeMap::new();
        for (name, n) in out.nodes {
            let name = NodeName::new(&name)
                .map_err(|e| MeshDiagnostic::new(format!("{}: {e}", file.display())))?;
            nodes.insert(
                name.clone(),
                Node {
                    name,
                    declaration: here.join(&n.declaration),
                    ssh: Ssh {
                        destination: n.ssh.destination,
                        port: n.ssh.port,
                        user: n.ssh.user,
                        identity: n.ssh.identity.map(|i| here.join(i)),
                    },
                    remote: Remote {
                        mesh: n.remote.mesh,
                        state_dir: n.remote.state_dir,
                        root: n.remote.root,
                        netns: n.remote.netns,
                    },
                    tree: rule.clone(),
                },
            );
        }
        Ok(Self {
            ssh_config: out.ssh_config.map(|c| here.join(c)),
            ssh_wrapper: (std::env::var("MESH_SSH_NODELAY").as_deref() != Ok("0"))
                .then(|| state_dir.join("ssh").join("config")),
            records: here.join(out.records),
            rollout: match out.rollout {
                Some(r) => Rollout {
                    waves: r
                        .waves
                        .into_iter()
                        .map(WaveOut::spec)
                        .collect::<Result<_, _>>()
                        .map_err(|e| MeshDiagnostic::new(format!("{}: {e}", file.display())))?,
                    within: r.within.map_or(600, |w| w.max(1.0) as u64),
                },
                None => Rollout {
                    waves: Vec::new(),
                    within: 600,
                },
            },
            valid_for: out
                .statements
                .and_then(|s| s.valid_for)
                .map_or(mesh_lib::statement::DEFAULT_VALID_FOR, |v| {
                    std::time::Duration::from_secs(v.max(1.0) as u64)
                }),
            nodes,
            file,
        })
    }

    /// The record file of `node` in the records folder.
    pub fn record_file(&self, node: &NodeName) -> PathBuf {
        self.records.join(format!("{node}.record.json"))
    }

    /// The nodes named, or every node when none is; an unknown name is an error naming it.
    pub fn select(&self, names: &[String]) -> Result<Vec<&Node>, String> {
        if names.is_empty() {
            return Ok(self.nodes.values().collect());
        }
        names
            .iter()
            .map(|n| {
                self.nodes
                    .iter()
                    .find(|(k, _)| k.as_str() == n)
                    .map(|(_, v)| v)
                    .ok_or_else(|| {
                        format!(
                            "no node {} in {} (it has: {})",
                            mesh_lib::text::escape(n),
                            self.file.display(),
                            self.nodes
                                .keys()
                                .map(|k| k.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })
            })
            .collect()
    }
}
