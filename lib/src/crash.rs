//! Named crash-injection points, compiled in with the `crash-points` feature only.
//!
//! With `MESH_CRASH_AT=NAME` (or `NAME:K`, the K-th time the point is reached) the process aborts
//! at that point, as a power cut would stop it: no destructor runs, no buffer is flushed. With
//! `MESH_PAUSE_AT=NAME` (or `NAME:K`) it stops itself there (SIGSTOP) until it is continued
//! (SIGCONT): a test then does what a fault would do in the middle of the command — remounts
//! the root read-only, removes the lock file, runs a second command — and lets it go on. The
//! crash-safety test runs a switch, a take, a rollback and a flip once per point in [`POINTS`]; the
//! container test crashes a take and a rollback after each change on the engine
//! ([`CONTAINER_POINTS`]); the gc test crashes a gc at each of [`GC_POINTS`]; the services test a
//! switch at each of [`SERVICE_POINTS`]; the store test a build at each of [`STORE_POINTS`].

/// Every crash point, in the order a switch reaches them.
pub const POINTS: &[&str] = &[
    "record-written",
    "journal-begun",
    "firewall-converged",
    "originals-recorded",
    "journal-written",
    "file-written-before-rename",
    "file-applied",
    "file-removed",
    "host-store-written",
    "profile-link-created",
    "current-switched",
    "log-appended",
    "record-followed",
];

/// The crash points of `mesh gc`: after the profile's links of removed generations are gone, and
/// after each generation, blob or pack file the store removes.
pub const GC_POINTS: &[&str] = &["gc-links-removed", "gc-removed"];

/// The crash point reached after each change a switch makes on the Docker engine (a stop, a
/// rename, a create, a start, a removal): `container-changed:K` stops after the K-th. The
/// changes of different containers run concurrently, so the K-th is whichever ends K-th: the
/// container tests stop a one-container take and rollback after each change, and a
/// twenty-container take and rollback in the middle of their stops and of their starts.
pub const CONTAINER_POINTS: &[&str] = &["container-changed"];

/// The crash points of the units phase, reached only where systemd is driven (the services test
/// crashes a switch at each, in a node with systemd as PID 1): after the disables and stops
/// that come before the files, after daemon-reload and enables, and after each group of jobs
/// (`service-jobs-done:K`).
pub const SERVICE_POINTS: &[&str] = &["services-stopped", "services-reloaded", "service-jobs-done"];
/// The crash point of the store merging its packs (a build past the packs' limit): after the
/// merged pack is written, before the packs it holds are removed.
pub const STORE_POINTS: &[&str] = &["packs-merged"];

/// Aborts here, or stops here until continued, if asked to.
#[cfg(feature = "crash-points")]
pub fn point(name: &'static str) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::OnceLock;
    static CRASH: OnceLock<Option<(String, usize)>> = OnceLock::new();
    static PAUSE: OnceLock<Option<(String, usize)>> = OnceLock::new();
    static HITS: AtomicUsize = AtomicUsize::new(0);
    debug_assert!(
        POINTS.contains(&name)
            || CONTAINER_POINTS.contains(&name)
            || GC_POINTS.contains(&name)
            || SERVICE_POINTS.contains(&name)
            || STORE_POINTS.contains(&name),
        "crash point {name} is not listed in POINTS, CONTAINER_POINTS, GC_POINTS, SERVICE_POINTS or STORE_POINTS"
    );
    let asked = |variable: &str| {
        let spec = std::env::var(variable).ok()?;
        match spec.split_once(':') {
            Some((n, k)) => Some((n.to_owned(), k.parse().unwrap_or(1))),
            None => Some((spec, 1)),
        }
    };
    let crash = CRASH.get_or_init(|| asked("MESH_CRASH_AT"));
    let pause = PAUSE.get_or_init(|| asked("MESH_PAUSE_AT"));
    let here = |target: &Option<(String, usize)>| {
        target.as_ref().is_some_and(|(target, _)| target == name)
    };
    if !here(crash) && !here(pause) {
        return;
    }
    let hit = HITS.fetch_add(1, Ordering::SeqCst) + 1;
    if crash.as_ref().is_some_and(|(_, k)| *k == hit) {
        std::process::abort();
    }
    if pause.as_ref().is_some_and(|(_, k)| *k == hit) {
        let _continued =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::STOP);
    }
}

/// Crash points are compiled out.
#[cfg(not(feature = "crash-points"))]
#[inline(always)]
pub fn point(_name: &'static str) {}
