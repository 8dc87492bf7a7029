//! `mesh reconcile --watch`: the firewall of the generation in force, put back on a schedule.

use std::path::Path;

use mesh_lib::GenerationId;

use crate::node::Node;
use crate::switch::ActivateError;

/// What one round of [`watch`] did.
pub type Round = Result<(GenerationId, crate::firewall::Converged), ActivateError>;

/// `mesh reconcile --watch`: puts the current generation's firewall back in force every
/// `every`, on a tokio runtime, until SIGTERM or SIGINT; each round takes the state
/// directory's lock for its own length only (a round that finds it held by a switch waits for
/// the next), and reads the current generation afresh. Returns after a clean shutdown.
pub fn watch(
    state: &Path,
    root: &Path,
    netns: Option<String>,
    every: std::time::Duration,
    mut report: impl FnMut(Round) + Send,
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {
                    let (state, root, netns) = (state.to_owned(), root.to_owned(), netns.clone());
                    let round = tokio::task::spawn_blocking(move || {
                        let node = Node::open(&state, &root, netns)?;
                        let (_, id, generation) = node
                            .current()?
                            .ok_or_else(|| ActivateError::NoSuchGeneration("this node has no generation yet".into()))?;
                        Ok((id, node.converge_firewall(&generation)?))
                    })
                    .await
                    .map_err(std::io::Error::other)?;
                    report(round);
                }
                _ = terminate.recv() => return Ok(()),
                _ = tokio::signal::ctrl_c() => return Ok(()),
            }
        }
    })
}
