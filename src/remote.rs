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

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use mesh_activator::deploy::{Deploy, DeployState};
use mesh_activator::profile::Trigger;
use mesh_lib::transfer;
use serde_json::json;

use crate::activate::{go_back, Machine};
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

/// `mesh switch --generation ID --confirm-within S`: arms the deploy, starts its agent, prints
/// the token.
pub fn arm(
    machine: &Machine,
    generation: &str,
    seconds: u64,
    json_out: bool,
) -> Result<(), Failure> {
    let node = mesh_activator::Node::inspect(&machine.state, &machine.root, machine.netns.clone())?;
    let target = node.store.resolve_generation(generation)?;
    // Checked here, so that a generation the store cannot give is refused before anything.
    node.store.generation(&target)?;
    let previous = node.current()?.map(|(_, id, _)| id);
    let deploy = Deploy::arm(&machine.state, target, previous, seconds)
        .map_err(|e| Failure::system(format!("arming the deploy: {e}")))?;
    let log = mesh_activator::deploy::folder(&machine.state).join(format!("{}.log", deploy.token));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| Failure::system(format!("{}: {e}", log.display())))?;
    let err = out.try_clone().map_err(Failure::system)?;
    let mut agent = Command::new("/proc/self/exe");
    agent
        .arg("deploy-agent")
        .arg(&deploy.token)
        .env("MESH_STATE_DIR", &machine.state)
        .env("MESH_ROOT", &machine.root)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: what ends the connection's session does not end it.
        .process_group(0);
    match &machine.netns {
        Some(ns) => agent.env("MESH_NETNS", ns),
        None => agent.env_remove("MESH_NETNS"),
    };
    agent
        .spawn()
        .map_err(|e| Failure::system(format!("starting the deploy's agent: {e}")))?;
    if json_out {
        say!(
            "{}",
            json!({ "token": deploy.token, "target": target, "previous": previous, "confirm_within": seconds })
        );
    } else {
        say!(
            "deploy {} armed: switching to {}; confirm within {seconds} s of the switch with `mesh confirm {}`, or the node goes back to {}",
            deploy.token,
            target.short(),
            deploy.token,
            previous.map_or("(nothing)".to_owned(), |p| p.short().to_string())
        );
    }
    Ok(())
}

/// What a switch changed, in counts: for a deploy's record and the deployer's table.
fn changed(s: &mesh_activator::Switched) -> serde_json::Value {
    json!({
        "files": s.plan.actions.iter().filter(|a| a.changes_machine()).count(),
        "firewall": s.firewall.as_ref().is_some_and(|f| *f != Default::default()),
        "units": s.services.jobs.len(),
        "containers": s.containers.iter().filter(|c| !matches!(c, mesh_activator::docker::Step::Hold { .. })).count(),
    })
}

/// `mesh deploy-agent TOKEN`: switch, wait for the confirmation, or go back.
pub fn agent(machine: &Machine, token: &str) -> Result<(), Failure> {
    let state = machine.state.as_path();
    let io = |e: std::io::Error| Failure::system(format!("the deploy's record: {e}"));
    let mut deploy = Deploy::load(state, token).map_err(io)?;
    let node =
        match mesh_activator::Node::open(&machine.state, &machine.root, machine.netns.clone()) {
            Ok(n) => n,
            Err(e) => {
                let why = Failure::from(e).report_text();
                deploy
                    .set(state, DeployState::Failed, Some(why.clone()))
                    .map_err(io)?;
                return Err(Failure::system(why));
            }
        };
    deploy.previous = node.current()?.map(|(_, id, _)| id);
    deploy
        .set(state, DeployState::Switching, None)
        .map_err(io)?;
    let generation = node.store.generation(&deploy.target)?;
    let switched = match node.switch(deploy.target, &generation, Trigger::Deploy, None, false) {
        Ok(s) => s,
        Err(e) => {
            let why = Failure::from(e).report_text();
            deploy
                .set(state, DeployState::Failed, Some(why.clone()))
                .map_err(io)?;
            return Err(Failure::system(why));
        }
    };
    deploy.changed = Some(changed(&switched));
    let reason = if switched.failed.is_empty() {
        deploy.set(state, DeployState::Switched, None).map_err(io)?;
        if deploy.wait_for_confirmation(state, Duration::from_secs(deploy.confirm_within)) {
            deploy
                .set(state, DeployState::Confirmed, None)
                .map_err(io)?;
            return Ok(());
        }
        format!(
            "no confirmation within {} s of the switch",
            deploy.confirm_within
        )
    } else {
        let units: Vec<String> = switched
            .failed
            .iter()
            .map(|f| format!("{} {}: {}", f.verb.word(), f.unit, f.result))
            .collect();
        format!("units failed after the switch: {}", units.join("; "))
    };
    match deploy.previous.filter(|p| *p != deploy.target) {
        Some(previous) => {
            let back = node
                .store
                .generation(&previous)
                .map_err(Failure::from)
                .and_then(|g| go_back(&node, previous, &g, false, Trigger::Revert));
            match back {
                Ok(_) => deploy
                    .set(state, DeployState::Reverted, Some(reason))
                    .map_err(io)?,
                Err(e) => deploy
                    .set(
                        state,
                        DeployState::Failed,
                        Some(format!(
                            "{reason}; switching back failed: {}",
                            e.report_text()
                        )),
                    )
                    .map_err(io)?,
            }
        }
        None => deploy
            .set(
                state,
                DeployState::Failed,
                Some(format!(
                    "{reason}; there was no other generation to switch back to"
                )),
            )
            .map_err(io)?,
    }
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
    let mut deploy = before;
    for _ in 0..200 {
        deploy = Deploy::load(state, token).map_err(known)?;
        if deploy.state.settled() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if json_out {
        say!(
            "{}",
            serde_json::to_string(&deploy).map_err(Failure::system)?
        );
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
pub fn deploys(machine: &Machine, token: Option<&str>, json_out: bool) -> Result<(), Failure> {
    let state = machine.state.as_path();
    let list = match token {
        Some(t) => vec![Deploy::load(state, t)
            .map_err(|e| Failure::user(format!("deploy {}: {e}", mesh_lib::text::escape(t))))?],
        None => Deploy::all(state).map_err(Failure::system)?,
    };
    if json_out {
        let value = if token.is_some() {
            serde_json::to_value(&list[0])
        } else {
            serde_json::to_value(json!({ "deploys": list }))
        };
        say!("{}", value.map_err(Failure::system)?);
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
