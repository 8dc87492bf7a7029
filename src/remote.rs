//! The node's side of `mesh deploy` as commands a person could run too — the store's objects
//! asked for and received (`mesh store missing|receive`), a deploy's one connection (`mesh store
//! serve`), a switch armed with a deadline (`mesh switch --generation ID --confirm-within S`),
//! its confirmation (`mesh confirm`) and the deploys' records (`mesh deploys`) — as arguments
//! and output. What they do is the activator's [`mesh_remote::deploy`]: arming, the agent
//! (`mesh deploy-agent TOKEN`, detached, which switches, waits for the confirmation over a new
//! connection and otherwise switches back), the requests of a deploy's connection
//! ([`serve`]); `mesh pull` arms its switches there too.

use std::process::Command;
use std::time::Duration;

use mesh_lib::transfer;
use mesh_remote::deploy::{agent, serve, Deploy, DeployState};
use serde_json::json;

use crate::context::Machine;
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

/// Arms a deploy of `generation` and starts its agent (the library's [`agent::arm`]): the
/// deploy, as armed.
fn start_deploy(machine: &Machine, generation: &str, seconds: u64) -> Result<Deploy, Failure> {
    agent::arm(
        &place(machine),
        &Spawn(machine.clone()),
        generation,
        seconds,
        if machine.served {
            agent::Asked::FromElsewhere
        } else {
            agent::Asked::Here
        },
    )
    .map_err(|e| match e {
        // One it cannot decrypt says `refused`, as an untrusted one does: nothing moved.
        agent::StartError::Refused(e @ mesh_switch::ActivateError::Secret { .. }) => {
            Failure::new(Exit::Refused, miette::miette!("{e}"))
        }
        agent::StartError::Refused(e) => e.into(),
        agent::StartError::Io(e) => Failure::system(e),
    })
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

/// `mesh store serve`: the node's side of a deploy over its one connection (the library's
/// [`serve::serve`], whose doc lists the requests). With `io_timeout`, a stream from which no
/// byte comes for that long (a link cut mid-copy) ends the session, and the objects that arrived
/// whole are kept.
pub fn serve(machine: &Machine, io_timeout: Option<Duration>) -> Result<(), Failure> {
    let input = serve::Timed::new(rustix::stdio::stdin(), io_timeout);
    let mut out = std::io::stdout().lock();
    serve::serve(&place(machine), &Spawn(machine.clone()), input, &mut out).map_err(|e| match e {
        serve::ServeError::Transfer(e) => transfer_failure(e),
        serve::ServeError::Request(_) => Failure::user(e),
        serve::ServeError::Store(e) => e.into(),
        serve::ServeError::Io { .. } => Failure::system(e),
    })
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
    let deploy = agent::confirm(state, token).map_err(known)?;
    if json_out {
        say!("{}", serve::told(&machine.state, &deploy));
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
            mesh_remote::deploy::folder(state)
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
                agent::switch_done(state, t).map_err(Failure::system)?
            } else {
                known
            }]
        }
        None => Deploy::all(state).map_err(Failure::system)?,
    };
    if json_out {
        let value = if token.is_some() {
            serve::told(&machine.state, &list[0])
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
