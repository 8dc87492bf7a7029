//! `mesh deploy`: per node, over one connection — its record and the generation in force read,
//! its generation built with it here (nothing more when the node already runs it), the objects
//! it lacks asked for and sent (the generation as a delta from the one in force, the contents
//! compressed; each checked by hash on arrival, and kept once whole even if the copy is cut
//! after it), and a switch armed with a deadline that runs detached on the node. The deployer
//! then confirms over a *new* connection, which proves the node still answers after the switch
//! (an open session survives a firewall that refuses new ones); without the confirmation in
//! time the node switches back by itself. Nodes go in parallel; one that fails or is
//! unreachable does not stop the others. Every read and write is bounded by an I/O timeout, so
//! a link that stalls mid-copy is reported as that, with nothing switched.
//!
//! With `--stage` ([`Options::stage`]), each node is offered its generation to stage, judged as
//! strictly as for a switch (signatures, statement) before any object is sent; the objects it
//! lacks are sent, then it stages the generation (its images fetched there, its secrets
//! decrypted to check them) and nothing in force changes: the later deploy of the same
//! generation sends nothing and switches with everything present.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mesh_compiler::Evaluator;
use mesh_lib::transfer::{self, Object};
use mesh_lib::{GenerationId, NodeRecord, Store};
use serde::Serialize;

use crate::file::{Fleet, Node};
use crate::progress::Progress;
use crate::ssh::{Link, Serve, ServeError, SshError};

/// How a deploy goes.
pub struct Options {
    /// Nodes at once.
    pub parallel: usize,
    /// Seconds a node waits for the confirmation once switched.
    pub confirm_within: u64,
    /// Only send the objects and show each node's plan.
    pub dry_run: bool,
    /// The deployer's state directory (its store holds what is built).
    pub state_dir: PathBuf,
    /// Where builds evaluate.
    pub evaluator: Evaluator,
    /// How long a read or a write on a node's connection may make no progress.
    pub io_timeout: Duration,
    /// Replace a generation the node runs that the fleet did not build (switched by hand).
    pub replace_foreign: bool,
    /// Sign each node's generation with this key before it is sent, and a statement naming it
    /// for the node (a node that trusts signers switches only to a generation one of them
    /// signed, stated for it).
    pub signer: Option<crate::sign::Signer>,
    /// How long the statements signed hold.
    pub valid_for: Duration,
    /// Stage each node's generation instead of switching to it (see the module's doc).
    pub stage: bool,
}

/// How long the deployer waits for a node's stage: the fetch of its images, which has no
/// deadline on the node (nothing in force waits on it).
const STAGE_BOUND: Duration = Duration::from_secs(3600);

/// How long the deployer waits, past a deploy's deadline, for the node's verdict: the agent
/// stops a switch still running at the deadline, and going back is bounded too.
pub const VERDICT_MARGIN: Duration = Duration::from_secs(15);

/// How long the node's agent gives going back, past the deadline (the activator's
/// `deploy::agent::REVERT_BOUND`: the node answers the switch no later than that).
const REVERT_BOUND: Duration = Duration::from_secs(120);

/// How a node's deploy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Switched and confirmed.
    Confirmed,
    /// The node switched back by itself: no confirmation reached it in time, or a unit failed.
    Reverted,
    /// The build, the transfer or the switch failed; the node is in its old generation.
    Failed,
    /// No connection could be made.
    Unreachable,
    /// The node's host key is not the one known: refused.
    HostKeyRefused,
    /// A dry run: the objects were sent, the plan is shown, nothing was switched.
    Planned,
    /// The node already runs the generation: nothing sent, nothing switched.
    Unchanged,
    /// The node runs a generation switched to by hand that the fleet did not build: not
    /// replaced (`--replace-foreign` replaces it).
    Foreign,
    /// The node refused the generation (no signer it trusts vouches for it, its lock is
    /// held): nothing switched.
    Refused,
    /// Staged: everything the generation needs is on the node, nothing in force changed.
    Staged,
}

impl Outcome {
    /// Whether the node ended as asked.
    pub fn ok(self) -> bool {
        matches!(
            self,
            Outcome::Confirmed | Outcome::Planned | Outcome::Unchanged | Outcome::Staged
        )
    }

    /// The word for the table.
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Confirmed => "confirmed",
            Outcome::Reverted => "reverted",
            Outcome::Failed => "failed",
            Outcome::Unreachable => "unreachable",
            Outcome::HostKeyRefused => "host key refused",
            Outcome::Planned => "planned",
            Outcome::Unchanged => "unchanged",
            Outcome::Foreign => "foreign",
            Outcome::Refused => "refused",
            Outcome::Staged => "staged",
        }
    }
}

/// One node's line of the deploy's table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The node.
    pub node: String,
    /// The generation in force before.
    pub from: Option<GenerationId>,
    /// The generation deployed.
    pub to: Option<GenerationId>,
    /// What the switch changed (files, firewall, units, containers), as the node counted it.
    pub changed: Option<serde_json::Value>,
    /// How it ended.
    pub result: Outcome,
    /// Why, when it did not end as asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Objects sent (the ones the node lacked).
    pub objects_sent: usize,
    /// Bytes written to the node's commands (objects, lists), counted as they are written: a
    /// copy cut halfway counts what went.
    pub bytes_sent: u64,
    /// Bytes of objects the node said it received and kept (its answers to what was sent):
    /// what it lacked and holds now. The objects of a copy cut short that arrived whole are
    /// kept by the node, so the next deploy's row counts only the rest.
    pub bytes_received: u64,
    /// Seconds it took.
    pub seconds: f64,
    /// The generation in force on the node after the deploy, as the node said it (`None`: not
    /// read, the node did not answer).
    pub in_force: Option<GenerationId>,
    /// The last lines of the node's log of the deploy, when it failed or reverted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<String>,
    /// What a stage put on the node, as the node said it (`mesh switch --stage --json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staged: Option<serde_json::Value>,
    /// How far it got.
    #[serde(skip)]
    phase: Phase,
    /// When its switch was armed: its deadline is counted from then.
    #[serde(skip)]
    armed: Option<Instant>,
}

/// How far a node's deploy got: what a dropped connection means depends on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Phase {
    /// Reading, building, asking: nothing on the node changed.
    #[default]
    Preparing,
    /// Sending objects: nothing switched.
    Copying,
    /// Staging: nothing in force changes.
    Staging,
    /// The switch was armed: the node goes on by itself.
    Switching,
}

/// Deploys `nodes` of `fleet`.
pub fn run(fleet: &Fleet, nodes: &[&Node], options: &Options, progress: &Progress) -> Vec<Row> {
    crate::each(nodes, options.parallel, |n| {
        let started = Instant::now();
        let mut row = Row {
            node: n.name.to_string(),
            from: None,
            to: None,
            changed: None,
            result: Outcome::Failed,
            reason: None,
            objects_sent: 0,
            bytes_sent: 0,
            bytes_received: 0,
            seconds: 0.0,
            in_force: None,
            log: Vec::new(),
            staged: None,
            phase: Phase::Preparing,
            armed: None,
        };
        one(fleet, n, options, progress, &mut row);
        row.seconds = started.elapsed().as_secs_f64();
        progress.done(
            &row.node,
            &format!(
                "{}{}",
                row.result.word(),
                row.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
        );
        row
    })
}

fn reached(row: &mut Row, e: SshError) {
    row.result = match e {
        SshError::HostKey { .. } => Outcome::HostKeyRefused,
        SshError::Unreachable { .. } => Outcome::Unreachable,
        SshError::Dropped { .. } => Outcome::Failed,
    };
    row.reason = Some(e.to_string());
}

/// A dry run's plan, as the node makes it.
fn plan(link: &mut Link, row: &mut Row) -> Result<(), SshError> {
    let Some(id) = row.to.map(|i| i.to_string()) else {
        return Ok(());
    };
    let ran = link.mesh(&["generations", "--json"], None)?;
    let listed: serde_json::Value = serde_json::from_slice(&ran.stdout).unwrap_or_default();
    row.from = listed["generations"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["current"] == true))
        .and_then(|g| g["id"].as_str())
        .and_then(|id| id.parse().ok());
    let ran = link.mesh(
        &["switch", "--generation", &id, "--dry-run", "--json"],
        None,
    )?;
    if !ran.ok() {
        failed(row, "planning", &ran);
        return Ok(());
    }
    let plan: serde_json::Value = serde_json::from_slice(&ran.stdout).unwrap_or_default();
    row.changed = Some(serde_json::json!({
        "files": plan["plan"]["actions"].as_array().map_or(0, |a| a.iter().filter(|x| matches!(x["action"].as_str(), Some("write" | "remove"))).count()),
        "units": plan["services"]["jobs"].as_array().map_or(0, Vec::len),
        "containers": plan["containers"].as_array().map_or(0, |c| c.iter().filter(|x| x["action"] != "hold").count()),
    }));
    Ok(())
}

fn failed(row: &mut Row, what: &str, ran: &crate::ssh::Ran) {
    row.result = Outcome::Failed;
    let said = ran.stderr.trim();
    row.reason = Some(format!(
        "{what}: {}",
        if said.is_empty() {
            format!("exit {:?}", ran.code)
        } else {
            mesh_lib::text::escape_keeping_lines(said).into_owned()
        }
    ));
}

/// The deploy record the node keeps for `token`, as JSON.
fn deploy_record(link: &mut Link, token: &str) -> Result<serde_json::Value, SshError> {
    let ran = link.mesh(&["deploys", token, "--wait", "--json"], None)?;
    Ok(serde_json::from_slice(&ran.stdout).unwrap_or(serde_json::Value::Null))
}

/// A build started before the node said its record, with the record it said last time (kept
/// in the deployer's state directory): while ssh connects, the node is built; the build is
/// used only if the node's record is that one, byte for byte.
struct Speculation<'s> {
    /// The record it builds with (`None`: the node had none).
    record: Option<Vec<u8>>,
    build: std::thread::ScopedJoinHandle<'s, Result<mesh_compiler::Built, String>>,
}

/// Where the deployer keeps the record `node` said last (empty: it had none).
fn seen_record(state_dir: &Path, node: &Node) -> PathBuf {
    state_dir
        .join("deploy")
        .join("records")
        .join(format!("{}.record", node.name))
}

/// Builds `node` with the record `bytes` says.
fn build_with(
    node: &Node,
    bytes: Option<&[u8]>,
    options: &Options,
) -> Result<mesh_compiler::Built, String> {
    let record = match bytes.map(NodeRecord::parse).transpose() {
        Ok(r) => r,
        Err(e) => return Err(format!("its record cannot be read: {e}")),
    };
    let label = PathBuf::from(format!("{}'s record", node.name));
    crate::build::node(
        node,
        record.as_ref().map(|r| (r, label.as_path())),
        &options.state_dir,
        &options.evaluator,
    )
    .map_err(|e| format!("the build failed: {e}"))
}

fn one(fleet: &Fleet, node: &Node, options: &Options, progress: &Progress, row: &mut Row) {
    let name = node.name.to_string();
    std::thread::scope(|scope| {
        let speculation = std::fs::read(seen_record(&options.state_dir, node))
            .ok()
            .map(|bytes| {
                let record = (!bytes.is_empty()).then_some(bytes);
                let guess = record.clone();
                Speculation {
                    record,
                    build: scope.spawn(move || build_with(node, guess.as_deref(), options)),
                }
            });
        progress.say(&name, "connecting");
        let mut link = match Link::open(fleet, node) {
            Ok(l) => l,
            Err(e) => return reached(row, e),
        };
        let outcome = deploy_over(fleet, node, options, progress, row, &mut link, speculation);
        row.bytes_sent = link.sent;
        if let Err(e) = outcome {
            reached(row, e);
        }
        link.close();
    });
}

fn deploy_over(
    fleet: &Fleet,
    node: &Node,
    options: &Options,
    progress: &Progress,
    row: &mut Row,
    link: &mut Link,
    speculation: Option<Speculation<'_>>,
) -> Result<(), SshError> {
    let name = node.name.to_string();
    let mut serve = link.serve(options.io_timeout)?;
    let outcome = converse(node, options, progress, row, &mut serve, speculation);
    link.sent += serve.finish();
    let token = match outcome {
        Ok(Some(token)) => token,
        Ok(None) if row.result == Outcome::Planned => return plan(link, row),
        Ok(None) => return Ok(()),
        Err(ServeError::Said(said)) => {
            match said.strip_prefix("refused: ") {
                Some(why) => {
                    row.result = Outcome::Refused;
                    row.reason = Some(why.to_owned());
                }
                None => {
                    row.result = Outcome::Failed;
                    row.reason = Some(said);
                }
            }
            return Ok(());
        }
        // Cut or stalled before the switch was armed: nothing switched, whatever the link did.
        Err(e) if row.phase != Phase::Switching => {
            let what = match row.phase {
                Phase::Copying => "the copy failed or stalled",
                Phase::Staging => "the stage failed or stalled",
                _ => "the conversation failed",
            };
            row.result = Outcome::Failed;
            row.reason = Some(format!(
                "{what} after {} bytes ({e}); nothing was switched",
                link.sent
            ));
            return Ok(());
        }
        Err(ServeError::Stalled(said)) => {
            row.result = Outcome::Failed;
            row.reason = Some(format!(
                "{said}; the node's deploy goes on by itself: it reverts unless confirmed"
            ));
            return Ok(());
        }
        Err(ServeError::Ssh(e)) if row.changed.is_some() => return Err(e),
        // Dropped while the node switched: the deploy goes on there; find it again.
        Err(ServeError::Ssh(_)) => {
            progress.say(
                &name,
                "the connection dropped: reading the deploy over a new one",
            );
            match find_deploy(fleet, node, row) {
                Some(t) => t,
                None => {
                    row.result = Outcome::Unreachable;
                    row.reason = Some(
                        "the connection dropped during the switch, and no new one reached the node; it switches back by itself unless confirmed".into(),
                    );
                    return Ok(());
                }
            }
        }
    };
    confirm(fleet, node, options, progress, row, &token);
    Ok(())
}

/// The node's side of the deploy, over `mesh store serve`: the token of the deploy armed (or
/// `None` when it ends here, the row saying why).
fn converse(
    node: &Node,
    options: &Options,
    progress: &Progress,
    row: &mut Row,
    serve: &mut Serve<'_>,
    speculation: Option<Speculation<'_>>,
) -> Result<Option<String>, ServeError> {
    let name = node.name.to_string();
    let version = serve.hello()?;
    progress.say(&name, "reading its record");
    let record = serve.record()?;
    // Kept for the next deploy's build while it connects (when it differs from what this one
    // built with, read as it began); a deploy goes on without it.
    if speculation.as_ref().map(|s| &s.record) != Some(&record) {
        let seen = seen_record(&options.state_dir, node);
        let _kept = seen
            .parent()
            .map(mesh_lib::atomic::create_dir_all)
            .transpose()
            .and_then(|_| {
                mesh_lib::atomic::write_file(&seen, record.as_deref().unwrap_or_default(), 0o600)
            });
    }
    let current = match version {
        Some(_) => serve.current()?,
        None => None,
    };
    row.in_force = current.as_ref().map(|c| c.id);
    row.from = row.in_force;
    progress.say(&name, "building");
    let built = match speculation {
        // Built while connecting, with the record the node said: what a build now makes.
        Some(s) if s.record == record => s
            .build
            .join()
            .unwrap_or_else(|_| build_with(node, record.as_deref(), options)),
        _ => build_with(node, record.as_deref(), options),
    };
    let built = match built {
        Ok(b) => b,
        Err(e) => {
            row.reason = Some(e);
            return Ok(None);
        }
    };
    row.to = Some(built.id);
    if let Some(c) = &current {
        // In force already: nothing to stage either.
        if c.id == built.id && !options.dry_run {
            row.result = Outcome::Unchanged;
            return Ok(None);
        }
        if let Some(token) = &c.waiting {
            row.reason = Some(format!(
                "deploy {token} waits for its confirmation there: deploy again once it is settled (`mesh deploys` on the node)"
            ));
            return Ok(None);
        }
        let by_hand = matches!(c.trigger.as_deref(), Some("build" | "rollback"));
        if by_hand && !c.deployed && !options.replace_foreign {
            row.result = Outcome::Foreign;
            row.reason = Some(format!(
                "it runs {}, switched to by hand, which the fleet did not build: not replaced (--replace-foreign replaces it)",
                c.id.short()
            ));
            return Ok(None);
        }
    }
    let id = built.id.to_string();
    row.phase = Phase::Copying;
    let store = Store::open(&options.state_dir).map_err(|e| ServeError::Said(e.to_string()))?;
    if options.stage && version.is_none_or(|v| v < 4) {
        row.reason = Some(format!(
            "its mesh (serve {}) cannot stage: update it, or deploy without --stage",
            version.map_or("1".to_owned(), |v| v.to_string())
        ));
        return Ok(None);
    }
    if version.is_some_and(|v| v >= 3) && !options.dry_run {
        // Judged by the node before a single object is sent: a refusal sends nothing more.
        offer(node, options, progress, serve, &store, built.id)?;
    }
    match version {
        Some(_) => {
            let base = current.as_ref().map(|c| c.id);
            progress.say(&name, "asking what it lacks");
            let mut lacking = serve.lacks(&id)?;
            if lacking.contains(&Object::Generation(built.id)) {
                let object = Object::Generation(built.id);
                let encoded = [(object, transfer::encoding_for(&store, object, base))];
                progress.say(&name, "sending the generation");
                send(serve, &store, &encoded, row)?;
                lacking = serve.lacks(&id)?;
            }
            if !lacking.is_empty() {
                progress.say(&name, &format!("sending {} content(s)", lacking.len()));
                let encoded: Vec<_> = lacking
                    .iter()
                    .map(|o| (*o, transfer::encoding_for(&store, *o, None)))
                    .collect();
                send(serve, &store, &encoded, row)?;
            }
        }
        None => {
            // A node whose mesh predates `hello`: the want list of every object.
            let generation = match built.generation() {
                Ok(g) => g,
                Err(e) => {
                    row.reason = Some(format!("the build cannot be read back: {e}"));
                    return Ok(None);
                }
            };
            let mut objects = vec![Object::Generation(built.id)];
            objects.extend(generation.sent_blobs().into_iter().map(Object::Blob));
            progress.say(&name, "asking what it lacks");
            let mut list = Vec::new();
            transfer::write_list(&mut list, &objects).expect("writing to memory");
            let answer = serve.missing(&list)?;
            let missing = transfer::read_list(answer.as_slice())
                .map_err(|e| ServeError::Said(format!("its answer to the want list: {e}")))?;
            if !missing.is_empty() {
                progress.say(&name, &format!("sending {} object(s)", missing.len()));
                let encoded: Vec<_> = missing
                    .iter()
                    .map(|o| (*o, transfer::Encoding::Raw))
                    .collect();
                send(serve, &store, &encoded, row)?;
            }
        }
    }
    if version.is_some_and(|v| v < 3) {
        // Its signatures travel with it: the node keeps those valid over its id.
        if let Some(signer) = &options.signer {
            progress.say(&name, "signing");
            signer
                .sign_into(&store, &built.id)
                .map_err(|e| ServeError::Said(format!("signing {}: {e}", built.id.short())))?;
        }
        let signatures = store
            .signatures(&built.id)
            .map_err(|e| ServeError::Said(e.to_string()))?;
        if !signatures.is_empty() {
            let has = serve.signatures(&id)?;
            for (name, text) in signatures {
                if !has.contains(&name.to_string()) {
                    serve.signature(&id, &text)?;
                }
            }
        }
    }
    if options.dry_run {
        row.result = Outcome::Planned;
        return Ok(None);
    }
    if options.stage {
        progress.say(&name, "staging");
        row.phase = Phase::Staging;
        row.staged = Some(serve.stage(&id, STAGE_BOUND)?);
        row.result = Outcome::Staged;
        return Ok(None);
    }
    progress.say(&name, "switching");
    row.phase = Phase::Switching;
    row.armed = Some(Instant::now());
    let within = Duration::from_secs(options.confirm_within) + VERDICT_MARGIN + REVERT_BOUND;
    let record = serve.switch(&id, options.confirm_within, within)?;
    row.from = record["previous"].as_str().and_then(|p| p.parse().ok());
    row.changed = record.get("changed").cloned();
    told(row, &record);
    match record["state"].as_str() {
        Some("switched") => Ok(record["token"].as_str().map(str::to_owned)),
        Some("reverted") => {
            row.result = Outcome::Reverted;
            row.reason = record["reason"].as_str().map(str::to_owned);
            Ok(None)
        }
        other => {
            row.result = Outcome::Failed;
            row.reason = Some(
                record["reason"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("the switch did not finish ({other:?})")),
            );
            Ok(None)
        }
    }
}

/// Offers the node generation `id` (version 3): its signatures — one made now with the
/// deployer's key, if it has one — and a statement naming it for the node, its sequence above
/// the node's highest. The node judges them whole before any object is sent; a refusal comes
/// back as `refused: …`.
fn offer(
    node: &Node,
    options: &Options,
    progress: &Progress,
    serve: &mut Serve<'_>,
    store: &Store,
    id: mesh_lib::GenerationId,
) -> Result<(), ServeError> {
    let name = node.name.to_string();
    let statement = match &options.signer {
        Some(signer) => {
            progress.say(&name, "signing");
            signer
                .sign_into(store, &id)
                .map_err(|e| ServeError::Said(format!("signing {}: {e}", id.short())))?;
            let highest = serve.sequence()?;
            Some(
                signer
                    .state(&name, Some(id), highest, options.valid_for)
                    .map_err(|e| ServeError::Said(format!("signing its statement: {e}")))?,
            )
        }
        None => None,
    };
    let signatures = store
        .signatures(&id)
        .map_err(|e| ServeError::Said(e.to_string()))?
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    let offer = mesh_lib::statement::Offer {
        generation: id,
        signatures,
        statement,
    };
    if options.stage {
        serve.offer_stage(&offer)
    } else {
        serve.offer(&offer)
    }
}

/// What the node told of its deploy: the generation in force, and its log when it did not end
/// as deployed.
fn told(row: &mut Row, record: &serde_json::Value) {
    if let Some(id) = record["in_force"].as_str().and_then(|i| i.parse().ok()) {
        row.in_force = Some(id);
    }
    if let Some(lines) = record["log"].as_array() {
        row.log = lines
            .iter()
            .filter_map(|l| l.as_str().map(str::to_owned))
            .collect();
    }
}

/// Sends `objects`, each encoded as it says, and counts them.
fn send(
    serve: &mut Serve<'_>,
    store: &Store,
    objects: &[(Object, transfer::Encoding)],
    row: &mut Row,
) -> Result<(), ServeError> {
    let mut stream = Vec::new();
    transfer::send_encoded(store, objects, &mut stream)
        .map_err(|e| ServeError::Said(format!("reading what to send: {e}")))?;
    let (_, received) = serve.receive(&stream)?;
    row.bytes_received += received;
    row.objects_sent += objects.len();
    Ok(())
}

/// The deploy of `row.to` on `node`, found over a new connection after the first dropped, once
/// its switch is done: its token.
fn find_deploy(fleet: &Fleet, node: &Node, row: &mut Row) -> Option<String> {
    let to = row.to?.to_string();
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        if let Ok(mut fresh) = Link::open(fleet, node) {
            let listed = fresh.mesh(&["deploys", "--json"], None).ok()?;
            let all: serde_json::Value = serde_json::from_slice(&listed.stdout).ok()?;
            let token = all["deploys"]
                .as_array()?
                .iter()
                .find(|d| d["target"] == to.as_str())?["token"]
                .as_str()?
                .to_owned();
            let record = deploy_record(&mut fresh, &token).ok()?;
            row.from = record["previous"].as_str().and_then(|p| p.parse().ok());
            row.changed = record.get("changed").cloned();
            return Some(token);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    None
}

/// Confirms `token` over new connections until the deadline; then, without a confirmation,
/// waits for the node to switch back and reads how it ended.
fn confirm(
    fleet: &Fleet,
    node: &Node,
    options: &Options,
    progress: &Progress,
    row: &mut Row,
    token: &str,
) {
    let name = node.name.to_string();
    progress.say(&name, "confirming over a new connection");
    // The node's deadline was armed a little after ours: ours passes first.
    let deadline =
        row.armed.unwrap_or_else(Instant::now) + Duration::from_secs(options.confirm_within);
    let mut last = String::new();
    while Instant::now() < deadline {
        match crate::ssh::once(fleet, node, &["confirm", token, "--json"]) {
            Ok(r) if r.ok() => {
                row.result = Outcome::Confirmed;
                told(row, &serde_json::from_slice(&r.stdout).unwrap_or_default());
                return;
            }
            Ok(r) => {
                let record: serde_json::Value =
                    serde_json::from_slice(&r.stdout).unwrap_or_default();
                told(row, &record);
                row.result = if record["state"] == "reverted" {
                    Outcome::Reverted
                } else {
                    Outcome::Failed
                };
                row.reason = record["reason"]
                    .as_str()
                    .map(str::to_owned)
                    .or_else(|| Some(r.stderr.trim().to_owned()));
                return;
            }
            Err(e) => last = e.to_string(),
        }
        progress.say(&name, "not answering a new connection; trying again");
        std::thread::sleep(Duration::from_millis(500));
    }
    progress.say(
        &name,
        "no confirmation went through: waiting for the node to switch back",
    );
    // The node reverts at its deadline, which began a little after ours: allow it a margin.
    let until = deadline + VERDICT_MARGIN;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_secs(1));
        if let Ok(mut fresh) = Link::open(fleet, node) {
            if let Ok(record) = deploy_record(&mut fresh, token) {
                told(row, &record);
                if record["state"] == "reverted" {
                    row.result = Outcome::Reverted;
                    row.reason = Some(format!(
                        "the confirmation could not reach it over a new connection ({last}); it switched back by itself"
                    ));
                    return;
                }
            }
        }
    }
    row.result = Outcome::Unreachable;
    row.reason = Some(format!(
        "switched, and no confirmation reached it ({last}); it switches back by itself at its deadline, but did not answer since"
    ));
}

/// Where a node's record goes in the fleet's records folder, written only when it changed.
pub fn write_record(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    if std::fs::read(path).is_ok_and(|b| b == bytes) {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    mesh_lib::atomic::write_file(path, bytes, 0o644)?;
    Ok(true)
}
