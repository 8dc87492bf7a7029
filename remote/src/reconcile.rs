//! `mesh reconcile`: what runs at boot and on a schedule — deploys whose agent is gone settled
//! (the node restarted in a deploy's window), a switch a command cut short settled (back to the
//! generation in force before it), then the firewall of the generation in force put back,
//! unless that generation waits for its deploy's confirmation.

use mesh_lib::GenerationId;

use mesh_switch::ActivateError;
use mesh_switch::Activator;

/// What one round did: the deploys it settled, then the firewall put back in force — or not,
/// while the generation in force waits for its deploy's confirmation.
#[derive(Debug)]
pub struct Round {
    /// Deploys whose agent was gone, settled (see [`crate::deploy::agent::settle`]).
    pub settled: Vec<crate::deploy::agent::Settled>,
    /// What was done to the firewall.
    pub done: Result<Done, ActivateError>,
}

/// What a round did to the firewall.
#[derive(Debug)]
pub enum Done {
    /// The generation in force, its firewall converged.
    Converged(GenerationId, mesh_reach::firewall::Converged),
    /// The generation in force waits for the confirmation of deploy `token`: its agent puts it
    /// in force, never a reconcile (after a restart, a generation that closes the operator out
    /// would be put back with nothing to revert it).
    Waiting {
        /// The generation.
        id: GenerationId,
        /// The deploy.
        token: String,
    },
}

/// One round: deploys whose agent is gone settled first, then the generation in force's
/// firewall put back — unless it waits for a confirmation.
pub fn round(
    place: &crate::deploy::agent::Place,
    spawner: &dyn crate::deploy::agent::Spawner,
    dry_run: bool,
) -> Round {
    let settled = if dry_run {
        Ok(Vec::new())
    } else {
        crate::deploy::agent::settle(place, spawner)
    };
    let (settled, problem) = match settled {
        Ok(s) => (s, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let done = (|| {
        if let Some(e) = problem {
            return Err(mesh_node::NodeError::Io {
                what: "settling the deploys in",
                path: place.state.clone(),
                source: std::io::Error::other(e.to_string()),
            }
            .into());
        }
        let none = || {
            mesh_node::NodeError::NoSuchGeneration(
                "this node has no generation yet: nothing to reconcile".into(),
            )
        };
        // Looked at before the lock, which a waiting deploy's agent holds.
        let look = Activator::inspect(&place.state, &place.root, place.netns.clone())?;
        let (_, id) = look
            .profile
            .current()
            .map_err(|e| mesh_node::NodeError::Io {
                what: "reading the profile in",
                path: place.state.clone(),
                source: e,
            })?
            .ok_or_else(none)?;
        if let Some(d) = crate::deploy::agent::waiting(&place.state, &id) {
            return Ok(Done::Waiting { id, token: d.token });
        }
        let node = if dry_run {
            look
        } else {
            let node = Activator::open(&place.state, &place.root, place.netns.clone())?;
            // A switch a command (or the power) cut short: back to the generation in force
            // before it, first.
            node.settle()?;
            node
        };
        let (_, id, generation) = node.current()?.ok_or_else(none)?;
        let converged = if dry_run {
            node.check_firewall(&generation)?
        } else {
            node.converge_firewall(&generation)?
        };
        Ok(Done::Converged(id, converged))
    })();
    Round { settled, done }
}

/// `mesh reconcile --watch`: [`round`] every `every`, on a tokio runtime, until SIGTERM or
/// SIGINT, and at once when firewalld reloads or restarts; each round takes the state
/// directory's lock for its own length only (a round that finds it held by a switch waits for
/// the next), and reads the current generation afresh.
/// Returns after a clean shutdown.
pub fn watch(
    place: crate::deploy::agent::Place,
    spawner: std::sync::Arc<dyn crate::deploy::agent::Spawner>,
    every: std::time::Duration,
    mut report: impl FnMut(Round) + Send,
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // firewalld drops the openings (runtime rules) on every reload and restart: a round at
        // once when it says so, not at the next tick. Only the machine's own firewall has one.
        let mut reloads = match place.netns {
            None => mesh_reach::firewall::daemon::Reloads::subscribe().await,
            Some(_) => None,
        };
        loop {
            let reloaded = async {
                match reloads.as_mut() {
                    Some(r) => r.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = reloaded => {}
                _ = interval.tick() => {}
                _ = terminate.recv() => return Ok(()),
                _ = tokio::signal::ctrl_c() => return Ok(()),
            }
            let (place, spawner) = (place.clone(), spawner.clone());
            let done = tokio::task::spawn_blocking(move || round(&place, spawner.as_ref(), false))
                .await
                .map_err(std::io::Error::other)?;
            report(done);
        }
    })
}
