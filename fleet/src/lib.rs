//! The fleet: work that crosses machines. It uses each node through the commands a person would
//! run on it (`mesh record export`, `mesh store missing|receive`, `mesh switch --generation ID
//! --confirm-within S`, `mesh confirm`, `mesh deploys`, `mesh status`), over the system's
//! OpenSSH; it never acts on a node's files, firewall or services itself.
//!
//! - [`file`]: the fleet file (Nickel): each node's declaration and how to reach it;
//! - [`build`]: every node built, in parallel, with its record; [`check`]: the fleet as a
//!   whole (one address, one hub, one range, one name each);
//! - [`deploy`]: per node, only the objects it lacks sent, checked on arrival, then a switch that
//!   the node reverts by itself unless it is confirmed over a new connection in time;
//! - [`status`]: the migration's board, a line per node;
//! - [`publish`]: every node's generation published to an OCI registry, tagged per node;
//! - [`rollout`]: the tags moved wave after wave, each wave's nodes waited for;
//! - [`init`]: a new fleet that builds as it is (`mesh init`);
//! - [`ssh`]: the transport; [`progress`]: what a long run says while it runs.
//!
//! Invariant: a node is always left in its old or its new generation — the switch is the node's
//! own, atomic and journaled, and a deployer that vanishes is a confirmation that never comes.
#![deny(missing_docs)]

pub mod build;
pub mod check;
pub mod deploy;
pub mod file;
pub mod import;
pub mod init;
pub mod progress;
pub mod publish;
pub mod rollout;
pub mod sign;
pub mod ssh;
pub mod status;

pub use file::{Fleet, Node};

/// Runs `work` for each of `items` on at most `parallel` threads at once; the results in the
/// items' order.
pub fn each<T: Sync, R: Send>(
    items: &[T],
    parallel: usize,
    work: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<R>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..parallel.clamp(1, items.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(item) = items.get(i) else { break };
                let r = work(item);
                *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    results
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every item ran")
        })
        .collect()
}
