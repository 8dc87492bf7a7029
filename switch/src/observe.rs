//! The observe phase: what is at every path the plan needs — the target's and every one the
//! host store says the mesh wrote — and the bytes of each regular file read. A file the mesh
//! wrote whose stamp is unchanged is known without reading it.
//!
//! What is at a secret's path (the target declares one there, or the host store says the mesh
//! wrote one) is known by its keyed digest, as the host store and the node record know it:
//! never by its plain one (see [`mesh_lib::secret`]).
//!
//! Changes nothing; no crash point.

use std::collections::BTreeMap;

use mesh_lib::{Generation, TargetPath};

use crate::ActivateError;
use crate::Activator;
use mesh_node::host::HostStore;
use mesh_node::plan;
use mesh_node::root::{FileFacts, Observed, RootError};

/// What is at each path, and the bytes of each regular file there.
pub type Observations = (
    BTreeMap<TargetPath, Observed>,
    BTreeMap<TargetPath, Vec<u8>>,
);

impl Activator {
    /// What is at each path `target` declares or the host store says the mesh wrote: a file
    /// the mesh wrote and left unchanged (same stamp) is known without being read.
    pub fn observe_all(
        &self,
        target: &Generation,
        host: &HostStore,
    ) -> Result<Observations, ActivateError> {
        let mut observed = BTreeMap::new();
        let mut contents = BTreeMap::new();
        let paths = plan::paths_to_observe(target, host);
        // A file the mesh wrote, unchanged since (same stamp): known without reading it. The
        // stamps are read on two threads: on a large node this is most of a no-op switch.
        let candidates: Vec<&TargetPath> = paths
            .iter()
            .copied()
            .filter(|p| host.written.get(*p).is_some_and(|w| w.stamp.is_some()))
            .collect();
        let (first, second) = candidates.split_at(candidates.len() / 2);
        let stamped = std::thread::scope(|scope| {
            let other = scope.spawn(|| self.root.stamps(second.iter().copied()));
            let mut mine = self.root.stamps(first.iter().copied())?;
            mine.extend(other.join().expect("the stamp thread does not panic")?);
            Ok::<_, RootError>(mine)
        })?;
        let mut known: BTreeMap<&TargetPath, FileFacts> = BTreeMap::new();
        for (path, stamp) in stamped {
            let w = &host.written[path];
            if let Some(stamp) = stamp.filter(|s| w.stamp == Some(*s)) {
                known.insert(
                    path,
                    FileFacts {
                        hash: w.hash,
                        mode: w.mode,
                        uid: w.uid,
                        gid: w.gid,
                        size: stamp.size,
                        stamp,
                    },
                );
            }
        }
        for path in paths {
            if let Some(facts) = known.remove(path) {
                observed.insert(path.clone(), Observed::File(facts));
                continue;
            }
            let (mut o, bytes) = self.root.observe(path)?;
            if let (Observed::File(facts), Some(b)) = (&mut o, &bytes) {
                if at_secret_path(target, host, path) {
                    facts.hash = self.digests.digest(b);
                }
            }
            if let Some(b) = bytes {
                contents.insert(path.clone(), b);
            }
            observed.insert(path.clone(), o);
        }
        Ok((observed, contents))
    }
}

/// Whether what is at `path` is named by its keyed digest: `target` declares a secret there, or
/// the mesh wrote one there.
pub(crate) fn at_secret_path(target: &Generation, host: &HostStore, path: &TargetPath) -> bool {
    target.files.get(path).is_some_and(|f| f.secret.is_some())
        || host.written.get(path).is_some_and(|w| w.keyed)
}
