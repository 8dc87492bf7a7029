//! What a person is shown while the container phase runs and a switch's images are fetched: the
//! binary draws it (a bar on a terminal), this crate only reports.

/// What a person is shown while the container phase runs: the binary draws it (a bar on a
/// terminal), the activator only reports.
pub trait Progress: Send + Sync {
    /// The phase begins: `total` containers have calls to make.
    fn begin(&self, total: usize);
    /// Called every quarter of a second while it runs, and when a container is done: how many
    /// are done, and the containers whose calls are in flight.
    fn update(&self, done: usize, in_flight: &[&str]);
    /// The phase is over.
    fn end(&self);
    /// A switch's images begin to be fetched (see [`crate::images`]), before anything changes.
    fn fetch_begin(&self, _images: &[&str]) {}
    /// Where one image's fetch is.
    fn fetching(&self, _image: &str, _state: Fetching) {}
    /// The images are fetched, or one failed.
    fn fetch_end(&self) {}
}

/// Shows nothing.
pub struct Quiet;

impl Progress for Quiet {
    fn begin(&self, _total: usize) {}
    fn update(&self, _done: usize, _in_flight: &[&str]) {}
    fn end(&self) {}
}

/// One image's fetch, as a person is shown it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetching {
    /// Not started yet.
    Waiting,
    /// Its layers' bytes: how many came of how many are known so far.
    Bytes {
        /// Downloaded.
        done: u64,
        /// Known to come (grows as the engine learns each layer's size); 0 while no layer
        /// said its size: not known yet (a spinner), not done.
        total: u64,
    },
    /// Fetched and checked.
    Done,
    /// Failed.
    Failed,
}
