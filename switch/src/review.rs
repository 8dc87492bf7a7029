//! What a dry run shows a person before they approve a switch: the generation-level diff from
//! the generation in force (settings, modules, containers field by field, the firewall's nft
//! lines added and removed, the units) with, for every file the plan writes or removes, the
//! unified diff of its content from what is on the machine now to what would be written.
//!
//! Changes nothing; no crash point. A file others may not read (on either side) is shown as
//! changed, never its content (see [`mesh_lib::diff::content_diff`]).

use mesh_lib::diff::{content_diff, Diff, Side};
use mesh_lib::Generation;

use crate::observe::Observations;
use crate::Activator;
use mesh_node::plan::{Action, Plan};
use mesh_node::root::Observed;

impl Activator {
    /// The review of a switch from `in_force` to `target` whose plan is `plan`, the machine as
    /// `seen`.
    pub(crate) fn review(
        &self,
        in_force: Option<&Generation>,
        target: &Generation,
        plan: &Plan,
        seen: &Observations,
    ) -> Diff {
        let mut diff = mesh_lib::diff::diff_from(in_force, target);
        for action in &plan.actions {
            let (path, new) = match action {
                Action::Write {
                    path, blob, mode, ..
                } => (path, Some((*blob, *mode))),
                Action::Remove { path } => (path, None),
                _ => continue,
            };
            // What is there now: read by the observe phase, or (a file the mesh wrote,
            // unchanged since) its content from the store.
            let old_bytes;
            let old = match seen.0.get(path) {
                Some(Observed::File(facts)) => {
                    old_bytes = seen
                        .1
                        .get(path)
                        .cloned()
                        .or_else(|| self.store.blob(&facts.hash).ok());
                    match &old_bytes {
                        Some(b) => Side::File(b, facts.mode),
                        None => Side::Unknown("what is on the machine could not be read"),
                    }
                }
                _ => Side::Absent,
            };
            // A file made from secrets, in the generation in force or the target: never shown.
            let secret = [in_force, Some(target)]
                .iter()
                .flatten()
                .filter_map(|g| g.files.get(path))
                .filter(|f| !matches!(f.state, mesh_lib::model::FileState::Held { .. }))
                .find_map(|f| f.secret.as_ref())
                .map(|s| s.describe());
            if let Some(what) = &secret {
                let side = mesh_lib::diff::Side::Secret(what);
                diff.contents.push(content_diff(path.as_str(), side, side));
                continue;
            }
            let new_bytes = new.and_then(|(blob, _)| self.store.blob(&blob).ok());
            let new = match (new, &new_bytes) {
                (None, _) => Side::Absent,
                (Some((_, mode)), Some(b)) => Side::File(b, mode),
                (Some(_), None) => Side::Unknown("its content is not in the store"),
            };
            diff.contents.push(content_diff(path.as_str(), old, new));
        }
        diff
    }
}
