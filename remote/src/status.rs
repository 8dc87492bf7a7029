//! `mesh status`: the node's mode, the generation in force, what is held, staged and managed,
//! the drift of the mesh's files, and the firewall against the generation. Reads only.

use mesh_lib::model::{FileState, Mode};
use mesh_lib::{GenerationId, TargetPath};
use serde::Serialize;

use mesh_node::host::HostStore;
use mesh_node::root::Observed;
use mesh_node::Node;
use mesh_switch::journal::journal_path;
use mesh_switch::Activator;
use mesh_switch::{ActivateError, Counts};

/// What `mesh status` reports. Serialized with named fields only (`mesh status --json`, see
/// the manual's commands pages): scripts read `containers.held`, never a position in an array.
#[derive(Debug, Serialize)]
pub struct Status {
    /// Adopted or managed.
    pub mode: Mode,
    /// The generation in force, if any.
    pub current: Option<Current>,
    /// Files by state.
    pub files: Counts,
    /// Containers by state.
    pub containers: Counts,
    /// Declared units by state.
    pub units: Counts,
    /// Taken modules.
    pub taken: Vec<String>,
    /// Modules assigned, not taken.
    pub not_taken: Vec<String>,
    /// Managed files changed behind the mesh's back.
    pub drift: Vec<Drift>,
    /// Whether an interrupted switch is waiting to be finished.
    pub interrupted: bool,
    /// The switch a command cut short, when it had not committed: the generation it was
    /// putting in force, and the one in force before it (where `mesh rollback` goes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unfinished: Option<Unfinished>,
    /// What a take would do to each held container.
    pub take_would_retire: Vec<Retire>,
    /// The held containers a take would keep as they are: each already is the declared one
    /// (asked of the engine when it answers; otherwise every held container is listed above).
    pub take_would_keep: Vec<Retire>,
    /// The firewall against the generation in force (`None` without one).
    pub firewall: Option<FirewallDrift>,
    /// The newest deploy on this node (`mesh switch --confirm-within`): how it ended, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_deploy: Option<crate::deploy::Deploy>,
    /// The host key the node decrypts its secrets with: where, and its public key (or why it
    /// cannot be read). `mesh fleet status` checks the fleet's secrets against it.
    pub host_key: HostKey,
    /// The last pull from a registry (`mesh pull`) that did something: from where, which
    /// generation, how it ended, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_pull: Option<crate::deploy::pull::LastPull>,
    /// The newest statement the node accepted from elsewhere (a deploy's, a pull's): which
    /// generation, its sequence, when it expires and whether it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statement: Option<Stated>,
    /// The generation `mesh switch --stage` put on the node, everything it needs present,
    /// while it is not the one in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staged_generation: Option<GenerationId>,
}

/// The newest statement a node accepted, for `mesh status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stated {
    /// The node it is for.
    pub node: String,
    /// The generation it names (`None`: a withdrawal).
    pub generation: Option<GenerationId>,
    /// Its sequence.
    pub sequence: u64,
    /// When it expires (RFC 3339).
    pub expires: String,
    /// Whether it has: nothing newer came since (a registry withholding statements, a fleet
    /// that stopped signing), and the node refuses it.
    pub expired: bool,
    /// Who signed it.
    pub signer: String,
    /// When the node accepted it.
    pub accepted: String,
    /// Why it could not be read, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl Stated {
    fn read(state: &std::path::Path) -> Option<Self> {
        match crate::statement::Kept::load(state) {
            Ok(None) => None,
            Ok(Some(kept)) => {
                let statement = kept.statement();
                Some(Self {
                    node: statement
                        .as_ref()
                        .map(|s| s.node.clone())
                        .unwrap_or_default(),
                    generation: statement.as_ref().and_then(|s| s.generation),
                    sequence: statement.as_ref().map_or(0, |s| s.sequence),
                    expires: statement
                        .as_ref()
                        .map(|s| s.expires_stamp())
                        .unwrap_or_default(),
                    expired: statement
                        .as_ref()
                        .is_none_or(|s| s.expired(std::time::SystemTime::now())),
                    signer: kept.signer,
                    accepted: kept.accepted,
                    problem: statement
                        .is_none()
                        .then(|| "its text is not a statement's".to_owned()),
                })
            }
            Err(e) => Some(Self {
                node: String::new(),
                generation: None,
                sequence: 0,
                expires: String::new(),
                expired: true,
                signer: String::new(),
                accepted: String::new(),
                problem: Some(e.to_string()),
            }),
        }
    }
}

/// The generation in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Current {
    /// Its number in the profile.
    pub number: u64,
    /// Its id.
    pub id: GenerationId,
    /// What put it in force, as the profile's log says (`build`: a switch of a declaration or a
    /// generation by hand).
    pub trigger: Option<mesh_node::profile::Trigger>,
    /// Whether a deploy switched to it (a record here, or the profile's log says so).
    pub deployed: bool,
    /// The deploy that waits for its confirmation, if one does.
    pub waiting: Option<String>,
}

/// The generation in force, what put it there, and the deploys that did (read without the
/// lock).
pub fn in_force(node: &Node) -> Result<Option<Current>, ActivateError> {
    let err = |e| mesh_node::io_err("reading the profile in", &node.state)(e);
    let Some((number, id)) = node.profile.current().map_err(err)? else {
        return Ok(None);
    };
    let log = node.profile.log().map_err(err)?;
    let trigger = log
        .iter()
        .rev()
        .find(|e| e.number == number)
        .map(|e| e.trigger);
    let deploys = crate::deploy::Deploy::all(&node.state).unwrap_or_default();
    Ok(Some(Current {
        number,
        id,
        trigger,
        // The profile's log says it too for a deploy whose record was pruned since.
        deployed: deploys.iter().any(|d| d.target == id)
            || log
                .iter()
                .any(|e| e.id == id && e.trigger == mesh_node::profile::Trigger::Deploy),
        waiting: deploys
            .iter()
            .find(|d| !d.state.settled())
            .map(|d| d.token.clone()),
    }))
}

/// A switch a command cut short.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unfinished {
    /// The generation it was putting in force.
    pub target: GenerationId,
    /// The generation in force before it (`None` before the node's first switch).
    pub previous: Option<GenerationId>,
}

/// A managed file changed behind the mesh's back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drift {
    /// Its path.
    pub path: TargetPath,
    /// What is there now.
    pub what: String,
}

/// A held container a take would stop and keep under another name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Retire {
    /// Its module.
    pub module: String,
    /// Its name.
    pub container: String,
}

/// The firewall in the kernel against the generation in force.
#[derive(Debug, Serialize)]
pub struct FirewallDrift {
    /// What a reconcile would change (nothing: it is in force).
    pub would_change: Option<mesh_reach::firewall::Converged>,
    /// Why it could not be read (without privileges, say), if so.
    pub unreadable: Option<String>,
}

/// The node's host key, as `mesh status` reports it: never its private half.
#[derive(Debug, Serialize)]
pub struct HostKey {
    /// Where it is read from.
    pub path: String,
    /// Its public key (`ssh-ed25519 AAAA…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public: Option<String>,
    /// Why it cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The host key's path and public key, or why it cannot be read.
pub fn host_key(node: &Activator) -> HostKey {
    let (public, problem) = match node.host_identity() {
        Ok(id) => match id.public {
            Some(p) => (Some(p), None),
            None => (None, Some("its public key cannot be derived".to_owned())),
        },
        Err((why, _)) => (None, Some(why)),
    };
    HostKey {
        path: node.host_key_path(),
        public,
        problem,
    }
}

/// Mode, current generation, counts and drift.
pub fn of(node: &Activator) -> Result<Status, ActivateError> {
    let record = node.record()?;
    let current = node.current()?;
    let host = HostStore::load(&node.state)?;
    let mut status = Status {
        mode: record.as_ref().map_or(Mode::Managed, |r| r.mode),
        current: in_force(node)?,
        files: Counts::default(),
        containers: Counts::default(),
        units: Counts::default(),
        taken: Vec::new(),
        not_taken: Vec::new(),
        drift: Vec::new(),
        interrupted: journal_path(&node.state).exists(),
        unfinished: node.unfinished()?.map(|(target, act)| Unfinished {
            target,
            previous: act.previous.map(|(_, id)| id),
        }),
        take_would_retire: Vec::new(),
        take_would_keep: Vec::new(),
        firewall: None,
        last_deploy: crate::deploy::Deploy::all(&node.state)
            .ok()
            .and_then(|all| all.into_iter().next()),
        host_key: host_key(node),
        last_pull: crate::deploy::pull::LastPull::load(&node.state),
        statement: Stated::read(&node.state),
        staged_generation: None,
    };
    status.staged_generation = mesh_switch::stage::StagedRecord::load(&node.state)
        .filter(|staged| status.current.as_ref().is_none_or(|c| c.id != *staged));
    if let Some((_, _, g)) = &current {
        status.firewall = Some(match node.check_firewall(g) {
            Ok(drift) => FirewallDrift {
                would_change: Some(drift),
                unreadable: None,
            },
            Err(ActivateError::Firewall(e)) => FirewallDrift {
                would_change: None,
                unreadable: Some(e.to_string()),
            },
            Err(e) => return Err(e),
        });
        // Unchanged files the mesh wrote are known by their stamps, as in a switch.
        let (observed, _) = node.observe_all(g, &host)?;
        for (name, state) in &g.modules {
            match state {
                mesh_lib::model::ModuleState::Taken => status.taken.push(name.to_string()),
                mesh_lib::model::ModuleState::Assigned => status.not_taken.push(name.to_string()),
            }
        }
        // A held container that already is the declared one is kept by its take: asked of
        // the engine only when a container is held, and only if it answers.
        let held = g
            .containers
            .values()
            .any(|c| matches!(c.state, mesh_lib::model::ContainerState::Held { .. }));
        let engine = held
            .then(mesh_containers::Engine::connect)
            .and_then(Result::ok);
        // A held container's secret environment, decrypted to compare it (one this node
        // cannot read leaves the container to be retired, as far as status can tell).
        let opened = (engine.is_some()
            && g.containers
                .values()
                .any(|c| !c.secret_environment.is_empty()))
        .then(|| node.open_secrets_of(g, true).ok().flatten())
        .flatten();
        for (name, c) in &g.containers {
            match c.state {
                mesh_lib::model::ContainerState::Held { .. } => {
                    status.containers.held += 1;
                    let declared = match &opened {
                        Some((resolved, opened)) if !c.secret_environment.is_empty() => {
                            mesh_switch::containers::with_values(
                                &resolved.containers[name],
                                &opened.values,
                            )
                        }
                        _ => c.clone(),
                    };
                    let kept = engine.as_ref().is_some_and(|e| {
                        e.live(name.as_str(), node.root.path())
                            .is_ok_and(|live| mesh_lib::import::is_equal(&declared, &live))
                    });
                    let what = Retire {
                        module: c.module.to_string(),
                        container: name.to_string(),
                    };
                    if kept {
                        status.take_would_keep.push(what);
                    } else {
                        status.take_would_retire.push(what);
                    }
                }
                mesh_lib::model::ContainerState::Staged => status.containers.staged += 1,
                mesh_lib::model::ContainerState::Managed => status.containers.managed += 1,
            }
        }
        for u in g.units.values() {
            match u.state {
                mesh_lib::model::UnitState::Held => status.units.held += 1,
                mesh_lib::model::UnitState::Staged => status.units.staged += 1,
                mesh_lib::model::UnitState::Managed => status.units.managed += 1,
            }
        }
        for (path, f) in &g.files {
            match f.state {
                FileState::Held { .. } => {
                    status.files.held += 1;
                    continue;
                }
                FileState::Staged => status.files.staged += 1,
                FileState::Managed => status.files.managed += 1,
            }
            let what = match (
                observed.get(path).cloned().unwrap_or(Observed::Absent),
                host.written.get(path),
            ) {
                (Observed::File(o), Some(w))
                    if o.hash == w.hash && o.mode == w.mode && o.uid == w.uid && o.gid == w.gid =>
                {
                    None
                }
                (Observed::File(o), Some(w)) if o.hash == w.hash => Some(format!(
                    "mode or owner changed to {} {}:{}",
                    o.mode, o.uid, o.gid
                )),
                (Observed::File(o), _) => Some(format!("content changed ({})", o.hash.short())),
                (Observed::Absent, _) => Some("removed".to_string()),
                (other, _) => Some(format!("replaced by {other:?}")),
            };
            if let Some(what) = what {
                status.drift.push(Drift {
                    path: path.clone(),
                    what,
                });
            }
        }
    }
    Ok(status)
}
