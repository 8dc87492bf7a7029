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

/// Arms a deploy of `generation` and starts its agent: the deploy, as armed.
fn start_deploy(machine: &Machine, generation: &str, seconds: u64) -> Result<Deploy, Failure> {
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
        .env("MESH_SETTLE", machine.settle.as_secs().to_string())
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
    Ok(deploy)
}

/// The deploy's record once its switch is done (switched, failed or reverted), or after 15
/// minutes as it stands.
fn switch_done(state: &std::path::Path, token: &str) -> std::io::Result<Deploy> {
    let until = std::time::Instant::now() + Duration::from_secs(15 * 60);
    loop {
        let d = Deploy::load(state, token)?;
        if !matches!(d.state, DeployState::Starting | DeployState::Switching)
            || std::time::Instant::now() >= until
        {
            return Ok(d);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
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
/// record                    -> record none | record LEN\n<LEN bytes: the node record>
/// missing\n<want list>end   -> <the missing ones>end
/// receive\n<object stream>  -> received OBJECTS BYTES            (the stream as `store receive`)
/// switch ID SECONDS         -> <the deploy's record, JSON, once its switch is done>
/// ```
///
/// A request that fails is answered `error MESSAGE` (and a stream that cannot be read ends the
/// session, since what follows it cannot be found).
pub fn serve(machine: &Machine) -> Result<(), Failure> {
    use std::io::{BufRead, Write};
    let store = mesh_lib::Store::open(&machine.state)?;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
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
                        .and_then(|d| serde_json::to_string(&d).map_err(Failure::system))
                        .unwrap_or_else(|e| format!("error {}", e.report_text())),
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
    // A deploy that could not switch says why in its record, and nothing is to be reverted.
    let give_up = |deploy: &mut Deploy, e: mesh_activator::ActivateError| {
        let why = Failure::from(e).report_text();
        deploy
            .set(state, DeployState::Failed, Some(why.clone()))
            .map_err(io)?;
        Err::<(), _>(Failure::system(why))
    };
    let node =
        match mesh_activator::Node::open(&machine.state, &machine.root, machine.netns.clone()) {
            Ok(n) => n.with_settle(machine.settle),
            Err(e) => return give_up(&mut deploy, e),
        };
    deploy.previous = node.current()?.map(|(_, id, _)| id);
    deploy
        .set(state, DeployState::Switching, None)
        .map_err(io)?;
    let generation = node.store.generation(&deploy.target)?;
    let switched = match node.switch(deploy.target, &generation, Trigger::Deploy, None, false) {
        Ok(s) => s,
        Err(e) => return give_up(&mut deploy, e),
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
        let units: Vec<String> = switched.failed.iter().map(ToString::to_string).collect();
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
