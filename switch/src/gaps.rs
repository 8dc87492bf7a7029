//! What a take or a switch would lose in silence, refused: a found container the generation
//! makes the module's (taken, or on a managed node) that holds a setting no declaration can
//! say — a [`Gap`], as `mesh import` names it — is not recreated without it unless the operator
//! said so, by the container's `accept_gaps` in the declaration or `--accept-gap` on the
//! command line. The operator decides what is lost, never the mesh by omission.
//!
//! Invariants: the refusal comes before anything changes (a take checks before it saves the
//! record, the switch while it plans); a container with a gap is never kept in place as if it
//! were the declared one (see [`mesh_lib::import::is_equal`]), so every such container would be
//! retired and recreated.

use std::collections::BTreeMap;

use mesh_containers::{Engine, Present};
use mesh_lib::import::{Gap, LiveContainer};
use mesh_lib::model::{ContainerEntry, ContainerState};
use mesh_lib::Generation;

use crate::{ActivateError, Activator};

/// A found container's gaps no one accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unaccepted {
    /// The container.
    pub container: String,
    /// What it holds that its declaration cannot say.
    pub gaps: Vec<Gap>,
}

impl std::fmt::Display for Unaccepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gaps: Vec<String> = self
            .gaps
            .iter()
            .map(|g| format!("{} (found {})", g.what, mesh_lib::text::escape(&g.found)))
            .collect();
        write!(
            f,
            "container {}: {}",
            mesh_lib::text::escape(&self.container),
            gaps.join(", ")
        )
    }
}

/// Whether `accepted` (the command line's `--accept-gap`: `CONTAINER`, `CONTAINER:GAP`, or `*`)
/// or the declaration's `accept_gaps` (`GAP`, or `*`) accept losing `gap` of `container`.
fn is_accepted(container: &str, gap: &Gap, declared: &[String], accepted: &[String]) -> bool {
    declared.iter().any(|a| a == "*" || *a == gap.what)
        || accepted.iter().any(|a| match a.split_once(':') {
            _ if a == "*" || a == container => true,
            Some((c, what)) => c == container && (what == "*" || what == gap.what),
            None => false,
        })
}

/// The gaps of the found container `live`, which `entry` declares under its name, that neither
/// the declaration nor `accepted` accepts; `None` when there are none.
pub fn unaccepted_of(
    entry: &ContainerEntry,
    live: &LiveContainer,
    accepted: &[String],
) -> Option<Unaccepted> {
    let gaps: Vec<Gap> = live
        .gaps
        .iter()
        .filter(|g| !is_accepted(&live.name, g, &entry.accept_gaps, accepted))
        .cloned()
        .collect();
    (!gaps.is_empty()).then(|| Unaccepted {
        container: live.name.clone(),
        gaps,
    })
}

/// The found containers on `engine` (listed as `present`) that `target` makes the module's and
/// that hold gaps neither the declaration nor `accepted` accepts.
pub fn unaccepted(
    engine: &Engine,
    present: &BTreeMap<String, Present>,
    target: &Generation,
    accepted: &[String],
    root: &std::path::Path,
) -> Result<Vec<Unaccepted>, ActivateError> {
    let mut out = Vec::new();
    for (name, entry) in &target.containers {
        let found = present.get(name.as_str()).is_some_and(|p| !p.is_ours());
        if entry.state == ContainerState::Managed && found {
            let live = engine.live(name.as_str(), root)?;
            out.extend(unaccepted_of(entry, &live, accepted));
        }
    }
    Ok(out)
}

impl Activator {
    /// Refuses `target` when it would recreate a found container holding gaps no one accepted
    /// (see the module). The engine is asked only when `target` declares containers.
    pub fn refuse_unaccepted_gaps(&self, target: &Generation) -> Result<(), ActivateError> {
        if !target
            .containers
            .values()
            .any(|c| c.state == ContainerState::Managed)
        {
            return Ok(());
        }
        let engine = Engine::connect()?;
        let present = engine.containers()?;
        let found = unaccepted(
            &engine,
            &present,
            target,
            &self.accepted_gaps,
            self.root.path(),
        )?;
        refused(found)
    }
}

/// `Ok` when nothing is left unaccepted, else the refusal naming each container and gap.
pub(crate) fn refused(unaccepted: Vec<Unaccepted>) -> Result<(), ActivateError> {
    if unaccepted.is_empty() {
        Ok(())
    } else {
        Err(ActivateError::GapsNotAccepted {
            containers: unaccepted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gap(what: &str) -> Gap {
        Gap {
            what: what.into(),
            found: "x".into(),
            why: "y".into(),
        }
    }

    /// A gap is accepted by its name or `*` in the declaration, or by the container, its name
    /// and the gap's, or `*` on the command line; nothing else accepts it.
    #[test]
    fn what_accepts_a_gap() {
        let g = gap("HostConfig.CpusetMems");
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(is_accepted("db", &g, &s(&["HostConfig.CpusetMems"]), &[]));
        assert!(is_accepted("db", &g, &s(&["*"]), &[]));
        assert!(is_accepted("db", &g, &[], &s(&["db"])));
        assert!(is_accepted(
            "db",
            &g,
            &[],
            &s(&["db:HostConfig.CpusetMems"])
        ));
        assert!(is_accepted("db", &g, &[], &s(&["db:*"])));
        assert!(is_accepted("db", &g, &[], &s(&["*"])));
        assert!(!is_accepted("db", &g, &s(&["HostConfig.AutoRemove"]), &[]));
        assert!(!is_accepted(
            "db",
            &g,
            &[],
            &s(&["web", "web:HostConfig.CpusetMems"])
        ));
        assert!(!is_accepted(
            "db",
            &g,
            &[],
            &s(&["db:HostConfig.AutoRemove"])
        ));
        assert!(!is_accepted("db", &g, &[], &[]));
    }
}
