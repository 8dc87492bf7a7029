//! The node's side of `mesh deploy`, as commands a person could run too: the store's objects
//! asked for and received (`mesh store missing|receive`), a switch armed with a deadline
//! (`mesh switch --generation ID --confirm-within S`), its confirmation (`mesh confirm`) and the
//! deploys' records (`mesh deploys`).
//!
//! The armed switch runs in a process of its own (the agent, `mesh deploy-agent TOKEN`), in a
//! process group of its own, its output to `STATE/deploys/TOKEN.log`: the connection that
//! started it may drop, the agent goes on, switches, and waits for the confirmation — which must
//! come over a new connection, proving the node still answers. Without it in time, or when a
//! unit fails after the switch, it switches back to the generation that was in force.

use std::process::Command;
use std::time::Duration;

use mesh_activator::deploy::{agent, Deploy, DeployState};
use mesh_lib::transfer;
use serde_json::json;

use crate::activate::Machine;
use crate::failure::{Exit, Failure};

fn transfer_failure(e: transfer::TransferError) -> Failure {
    match e {
        transfer::TransferError::Format { .. } => Failure::user(e),
        _ => Failure::system(e),
    }
}

/// `mesh store missing`.
pub fn missing(machine: &Machine) -> Result<(), Failure> {
    let store = mesh_lib::Store::open(&machine.state)?;
    let wanted = transfer::read_list(std::io::stdin().lock()).map_err(transfer_failure)?;
    let lacking = transfer::missing(&store, &wanted);
    let mut out = Vec::new();
    transfer::write_list(&mut out, &lacking).map_err(Failure::system)?;
    say_raw!("{}", String::from_utf8_lossy(&out));
    Ok(())
}

/// `mesh store receive`.
pub fn receive(machine: &Machine) -> Result<(), Failure> {
    let store = mesh_lib::Store::open(&machine.state)?;
    let got = transfer::receive(&store, std::io::stdin().lock()).map_err(transfer_failure)?;
    say!("{}", json!({ "objects": got.objects, "bytes": got.bytes }));
    Ok(())
}

/// How this binary runs a deploy's agent and its steps: itself, with the node's options.
pub struct Spawn(pub Machine);

impl Spawn {
    fn command(&self, args: &[&str]) -> Command {
        let machine = &self.0;
        let mut c = Command::new("/proc/self/exe");
        c.args(args)
            .env("MESH_STATE_DIR", &machine.state)
            .env("MESH_ROOT", &machine.root)
            .env("MESH_SETTLE", machine.settle.as_secs().to_string())
            .env("MESH_CONTAINER_JOBS", machine.container_jobs.to_string());
        match &machine.netns {
            Some(ns) => c.env("MESH_NETNS", ns),
            None => c.env_remove("MESH_NETNS"),
        };
        c
    }
}

impl agent::Spawner for Spawn {
    fn agent(&self, token: &str) -> Command {
        self.command(&["deploy-agent", token])
    }

    fn step(&self, token: &str, step: agent::Step) -> Command {
        self.command(&["deploy-step", token, step.word()])
    }
}

/// Where the node is, for the agent and its steps.
pub fn place(machine: &Machine) -> agent::Place {
    agent::Place {
        state: machine.state.clone(),
        root: machine.root.clone(),
        netns: machine.netns.clone(),
        settle: machine.settle,
    }
}

/// Arms a deploy of `generation` and starts its agent (the library's [`agent::start`]): the
/// deploy, as armed.
fn start_deploy(machine: &Machine, generation: &str, seconds: u64) -> Result<Deploy, Failure> {
    let node = mesh_activator::Node::inspect(&machine.state, &machine.root, machine.netns.clone())?;
    let target = node.store.resolve_generation(generation)?;
    agent::start(
        &place(machine),
        &Spawn(machine.clone()),
        &node,
        target,
        seconds,
    )
    .map_err(|e| match e {
        // One it cannot decrypt says `refused`, as an untrusted one does: nothing moved.
        agent::StartError::Refused(e @ mesh_activator::ActivateError::Secret { .. }) => {
            Failure::new(Exit::Refused, miette::miette!("{e}"))
        }
        agent::StartError::Refused(e) => e.into(),
        agent::StartError::Io(e) => Failure::system(e),
    })
}

fn switch_done(state: &std::path::Path, token: &str) -> std::io::Result<Deploy> {
    agent::switch_done(state, token)
}

/// `mesh switch --generation ID --confirm-within S`: arms the deploy, starts its agent, prints
/// the token.
pub fn arm(
    machine: &Machine,
    generation: &str,
    seconds: u64,
    json_out: bool,
) -> Result<(), Failure> {
    let deploy = start_deploy(machine, generation, seconds)?;
    if json_out {
        say!(
            "{}",
            json!({ "token": deploy.token, "target": deploy.target, "previous": deploy.previous, "confirm_within": seconds })
        );
    } else {
        say!(
            "deploy {} armed: switching to {}; confirm within {seconds} s of the switch with `mesh confirm {}`, or the node goes back to {}",
            deploy.token,
            deploy.target.short(),
            deploy.token,
            deploy
                .previous
                .map_or("(nothing)".to_owned(), |p| p.short().to_string())
        );
    }
    Ok(())
}

/// `mesh store serve`: the node's side of a deploy in one process, a request a line on stdin,
/// each answered on stdout before the next is read — what `mesh deploy` asks over its one
/// connection, so that a node pays one process (and one login shell) for it, not five:
///
/// ```text
/// hello                     -> mesh serve 2
/// io-timeout SECONDS        -> ok                               (the bound below, from now)
/// record                    -> record none | record LEN\n<LEN bytes: the node record>
/// current                   -> current none | current {"id", "trigger", "deployed", "waiting"}
/// lacks ID                  -> <generation ID, when it lacks it; else the blobs it lacks>end
/// missing\n<want list>end   -> <the missing ones>end
/// receive\n<object stream>  -> received OBJECTS BYTES            (the stream as `store receive`)
/// signatures ID             -> <the names of the signatures it has for ID>end
/// signature ID LEN\n<sig>    -> ok                               (kept when valid over ID)
/// switch ID SECONDS         -> <the deploy's record, JSON, once its switch is done>
/// ```
///
/// A request that fails is answered `error MESSAGE` (and a stream that cannot be read ends the
/// session, since what follows it cannot be found). With `io_timeout`, a stream from which no
/// byte comes for that long (a link cut mid-copy, which no FIN announces) ends the session too,
/// and the objects that arrived whole are kept.
pub fn serve(machine: &Machine, io_timeout: Option<Duration>) -> Result<(), Failure> {
    use std::io::{BufRead, Write};
    let store = mesh_lib::Store::open(&machine.state)?;
    let mut input = std::io::BufReader::with_capacity(1 << 16, TimedStdin(io_timeout));
    let mut out = std::io::stdout().lock();
    let answer = |out: &mut std::io::StdoutLock, bytes: &[u8]| -> Result<(), Failure> {
        out.write_all(bytes)
            .and_then(|()| out.flush())
            .map_err(|e| Failure::system(format!("answering: {e}")))
    };
    loop {
        let mut line = String::new();
        if input.read_line(&mut line).map_err(Failure::system)? == 0 {
            return Ok(());
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["record"] => {
                let path = mesh_lib::record::record_path(&machine.state);
                match std::fs::read(&path) {
                    Ok(bytes) => {
                        answer(&mut out, format!("record {}\n", bytes.len()).as_bytes())?;
                        answer(&mut out, &bytes)?;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        answer(&mut out, b"record none\n")?
                    }
                    Err(e) => answer(
                        &mut out,
                        format!("error {}: {e}\n", path.display()).as_bytes(),
                    )?,
                }
            }
            ["missing"] => {
                let mut list = Vec::new();
                loop {
                    let mut l = String::new();
                    if input.read_line(&mut l).map_err(Failure::system)? == 0 || l == "end\n" {
                        break;
                    }
                    list.extend_from_slice(l.as_bytes());
                }
                match transfer::read_list(list.as_slice()) {
                    Ok(wanted) => {
                        let mut text = Vec::new();
                        transfer::write_list(&mut text, &transfer::missing(&store, &wanted))
                            .map_err(Failure::system)?;
                        text.extend_from_slice(b"end\n");
                        answer(&mut out, &text)?;
                    }
                    Err(e) => answer(&mut out, format!("error {e}\n").as_bytes())?,
                }
            }
            ["hello"] => answer(&mut out, b"mesh serve 2\n")?,
            ["io-timeout", seconds] => match seconds.parse::<u64>() {
                Ok(s) if s > 0 => {
                    input.get_mut().0 = Some(Duration::from_secs(s));
                    answer(&mut out, b"ok\n")?
                }
                _ => answer(
                    &mut out,
                    format!(
                        "error `{}` is not a number of seconds\n",
                        mesh_lib::text::escape(seconds)
                    )
                    .as_bytes(),
                )?,
            },
            ["current"] => {
                let text = match in_force(machine) {
                    Ok(Some(v)) => format!("current {v}\n"),
                    Ok(None) => "current none\n".to_owned(),
                    Err(e) => format!("error {}\n", e.report_text().replace('\n', " ")),
                };
                answer(&mut out, text.as_bytes())?;
            }
            ["lacks", id] => {
                let text = match id.parse::<mesh_lib::GenerationId>() {
                    Ok(id) if !store.has_generation(&id) => format!("generation {id}\nend\n"),
                    Ok(id) => match store.generation(&id) {
                        Ok(g) => {
                            let mut blobs: Vec<_> = g.files.values().map(|f| f.blob).collect();
                            blobs.sort();
                            blobs.dedup();
                            let wanted: Vec<transfer::Object> =
                                blobs.into_iter().map(transfer::Object::Blob).collect();
                            let mut text = Vec::new();
                            transfer::write_list(&mut text, &transfer::missing(&store, &wanted))
                                .map_err(Failure::system)?;
                            format!("{}end\n", String::from_utf8_lossy(&text))
                        }
                        Err(e) => format!("error {e}\n"),
                    },
                    Err(_) => format!(
                        "error `{}` is not a generation id\n",
                        mesh_lib::text::escape(id)
                    ),
                };
                answer(&mut out, text.as_bytes())?;
            }
            ["signatures", id] => {
                let text = match id.parse::<mesh_lib::GenerationId>() {
                    Ok(id) => {
                        let mut text = String::new();
                        for (name, _) in store.signatures(&id).map_err(Failure::from)? {
                            text.push_str(&format!("{name}\n"));
                        }
                        text + "end\n"
                    }
                    Err(_) => format!(
                        "error `{}` is not a generation id\n",
                        mesh_lib::text::escape(id)
                    ),
                };
                answer(&mut out, text.as_bytes())?;
            }
            ["signature", id, len] => {
                use std::io::Read;
                let len: usize = match len.parse() {
                    Ok(l) if l <= 64 << 10 => l,
                    _ => return Err(Failure::user("a signature's length is not one")),
                };
                let mut bytes = vec![0; len];
                input.read_exact(&mut bytes).map_err(Failure::system)?;
                let text = match id.parse::<mesh_lib::GenerationId>() {
                    Ok(id) => {
                        match mesh_lib::trust::Signature::parse(&String::from_utf8_lossy(&bytes))
                            .and_then(|s| s.verify(&id).map(|()| s))
                        {
                            Ok(sig) => match store.put_signature(&id, sig.armored()) {
                                Ok(_) => "ok\n".to_owned(),
                                Err(e) => format!("error {e}\n"),
                            },
                            Err(e) => format!("error {e}\n"),
                        }
                    }
                    Err(_) => format!(
                        "error `{}` is not a generation id\n",
                        mesh_lib::text::escape(id)
                    ),
                };
                answer(&mut out, text.as_bytes())?;
            }
            ["receive"] => match transfer::receive(&store, &mut input) {
                Ok(got) => answer(
                    &mut out,
                    format!("received {} {}\n", got.objects, got.bytes).as_bytes(),
                )?,
                Err(e) => {
                    answer(&mut out, format!("error {e}\n").as_bytes())?;
                    return Err(transfer_failure(e));
                }
            },
            ["switch", id, seconds] => {
                let text = match seconds.parse::<u64>() {
                    Ok(s) if (1..=86400).contains(&s) => start_deploy(machine, id, s)
                        .and_then(|d| {
                            switch_done(&machine.state, &d.token).map_err(Failure::system)
                        })
                        .map(|d| told(machine, &d).to_string())
                        .unwrap_or_else(|e| match e.exit {
                            // A refusal (a generation the node does not trust, a lock held):
                            // the deployer says so, as a refusal.
                            Exit::Refused => format!("error refused: {}", e.report_text()),
                            _ => format!("error {}", e.report_text()),
                        }),
                    _ => format!("error `{seconds}` is not a number of seconds from 1 to 86400"),
                };
                answer(
                    &mut out,
                    format!("{}\n", text.replace('\n', " ")).as_bytes(),
                )?;
            }
            [] => {}
            _ => answer(
                &mut out,
                format!(
                    "error unknown request `{}`\n",
                    mesh_lib::text::escape(line.trim())
                )
                .as_bytes(),
            )?,
        }
    }
}

/// How many lines of a deploy's log a deployer is told when it did not end as deployed.
const LOG_LINES: usize = 12;

/// A deploy as the deployer is told it: its record, the generation in force on the node now
/// (read, not assumed), and — when it failed or reverted — the last lines of its log.
fn told(machine: &Machine, deploy: &Deploy) -> serde_json::Value {
    let mut v = serde_json::to_value(deploy).unwrap_or_default();
    let in_force = mesh_activator::profile::Profile::open(&machine.state)
        .ok()
        .and_then(|p| p.current().ok().flatten())
        .map(|(_, id)| id.to_string());
    v["in_force"] = json!(in_force);
    if matches!(deploy.state, DeployState::Reverted | DeployState::Failed) {
        let log = std::fs::read_to_string(mesh_activator::deploy::log_path(
            &machine.state,
            &deploy.token,
        ))
        .unwrap_or_default();
        let lines: Vec<String> = log
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| mesh_lib::text::escape(l).into_owned())
            .collect();
        v["log"] = json!(lines[lines.len().saturating_sub(LOG_LINES)..]);
    }
    v
}

/// Standard input, read with a bound on how long one read may wait.
struct TimedStdin(Option<Duration>);

impl std::io::Read for TimedStdin {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let stdin = rustix::stdio::stdin();
        if let Some(bound) = self.0 {
            let mut fds = [rustix::event::PollFd::new(
                &stdin,
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::event::Timespec::try_from(bound)
                .map_err(|_| std::io::Error::other("an I/O timeout too long"))?;
            if rustix::event::poll(&mut fds, Some(&timeout))? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("nothing came for {} s", bound.as_secs()),
                ));
            }
        }
        Ok(rustix::io::read(stdin, buf)?)
    }
}

/// The generation in force, as `current` answers it: its id, what put it in force (the
/// profile log's trigger), whether a deploy recorded here switched to it, and the deploy that
/// waits for its confirmation, if one does.
fn in_force(machine: &Machine) -> Result<Option<serde_json::Value>, Failure> {
    let node = mesh_activator::Node::inspect(&machine.state, &machine.root, machine.netns.clone())?;
    Ok(node
        .in_force()?
        .map(|c| json!({ "id": c.id, "trigger": c.trigger, "deployed": c.deployed, "waiting": c.waiting })))
}

/// `mesh deploy-agent TOKEN`: the deploy's agent (see [`agent`]).
pub fn agent(machine: &Machine, token: &str) -> Result<(), Failure> {
    agent::run(&place(machine), &Spawn(machine.clone()), token).map_err(Failure::system)
}

/// `mesh deploy-step TOKEN STEP`: one step of a deploy, under its agent's lock; says how it
/// went, one JSON line.
pub fn step(machine: &Machine, token: &str, step: &str) -> Result<(), Failure> {
    let step = match step {
        "switch" => agent::Step::Switch,
        "revert" => agent::Step::Revert,
        other => {
            return Err(Failure::user(format!(
                "`{}` is not a deploy step (switch, revert)",
                mesh_lib::text::escape(other)
            )))
        }
    };
    let outcome = agent::run_step(&place(machine), token, step);
    if let Some(e) = &outcome.error {
        eprintln!("deploy {token}: {} step: {e}", step.word());
    }
    say_raw!(
        "{}\n",
        serde_json::to_string(&outcome).map_err(Failure::system)?
    );
    Ok(())
}

/// `mesh confirm TOKEN`: marks the deploy confirmed, then waits for its agent to settle it.
pub fn confirm(machine: &Machine, token: &str, json_out: bool) -> Result<(), Failure> {
    let state = machine.state.as_path();
    let known = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => Failure::user(format!(
            "no deploy {} on this node (see `mesh deploys`)",
            mesh_lib::text::escape(token)
        )),
        std::io::ErrorKind::InvalidInput => Failure::user(e),
        _ => Failure::system(e),
    };
    let before = Deploy::load(state, token).map_err(known)?;
    if !before.state.settled() {
        Deploy::confirm(state, token).map_err(known)?;
    }
    // The agent answers a confirmation within milliseconds; wait up to 10 s for it.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let mut pause = Duration::from_millis(1);
    let deploy = loop {
        let deploy = Deploy::load(state, token).map_err(known)?;
        if deploy.state.settled() || std::time::Instant::now() >= until {
            break deploy;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    };
    if json_out {
        say!("{}", told(machine, &deploy));
    } else {
        say!(
            "deploy {}: {}{}",
            deploy.token,
            word(deploy.state),
            deploy
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
    }
    match deploy.state {
        DeployState::Confirmed => Ok(()),
        DeployState::Reverted | DeployState::Failed => Err(Failure::new(
            Exit::Refused,
            miette::miette!(
                "deploy {token} was not confirmed: it is {}",
                word(deploy.state)
            ),
        )),
        _ => Err(Failure::system(format!(
            "deploy {token} is still {} after 10 s: its agent does not answer (see {})",
            word(deploy.state),
            mesh_activator::deploy::folder(state)
                .join(format!("{token}.log"))
                .display()
        ))),
    }
}

fn word(s: DeployState) -> &'static str {
    match s {
        DeployState::Starting => "starting",
        DeployState::Switching => "switching",
        DeployState::Switched => "switched, waiting for its confirmation",
        DeployState::Confirmed => "confirmed",
        DeployState::Reverted => "reverted",
        DeployState::Failed => "failed",
    }
}

/// `mesh deploys [TOKEN]`.
pub fn deploys(
    machine: &Machine,
    token: Option<&str>,
    wait: bool,
    json_out: bool,
) -> Result<(), Failure> {
    let state = machine.state.as_path();
    let list = match token {
        Some(t) => {
            let known = Deploy::load(state, t)
                .map_err(|e| Failure::user(format!("deploy {}: {e}", mesh_lib::text::escape(t))))?;
            vec![if wait {
                switch_done(state, t).map_err(Failure::system)?
            } else {
                known
            }]
        }
        None => Deploy::all(state).map_err(Failure::system)?,
    };
    if json_out {
        let value = if token.is_some() {
            told(machine, &list[0])
        } else {
            serde_json::to_value(json!({ "deploys": list })).map_err(Failure::system)?
        };
        say!("{}", value);
        return Ok(());
    }
    if list.is_empty() {
        say!("no deploys on this node");
    }
    for d in &list {
        say!(
            "{}  {}  {} -> {}  {}{}",
            d.armed,
            d.token,
            d.previous
                .map_or("(none)".to_owned(), |p| p.short().to_string()),
            d.target.short(),
            word(d.state),
            d.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}
