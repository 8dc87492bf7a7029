//! Work done inside a named network namespace (`ip netns add NAME`, `--netns NAME`) without a
//! child process: a thread of its own moves into the namespace, does the work and ends, so the
//! rest of the process stays where it was.

use std::os::fd::AsFd;

/// Runs `work` in network namespace `netns` (a name under `/run/netns`), or right here when
/// `None`.
pub fn within<T: Send>(
    netns: Option<&str>,
    work: impl FnOnce() -> std::io::Result<T> + Send,
) -> std::io::Result<T> {
    let Some(ns) = netns else {
        return work();
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let fd = std::fs::File::open(format!("/var/run/netns/{ns}"))?;
            rustix::thread::move_into_link_name_space(
                fd.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )?;
            work()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
