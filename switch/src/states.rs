//! A generation's files, containers and units counted by state: what a switch and `mesh status`
//! report.

use serde::Serialize;

/// Items by state: found and kept (held), prepared (staged), the mesh's (managed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Found, their module not taken: kept as they are.
    pub held: usize,
    /// Prepared, their module not taken.
    pub staged: usize,
    /// The mesh's.
    pub managed: usize,
}

/// A generation's files, containers and units by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct States {
    /// Files.
    pub files: Counts,
    /// Containers.
    pub containers: Counts,
    /// Declared units.
    pub units: Counts,
}

impl States {
    /// Counts `g`'s items by their state in it.
    pub fn of(g: &mesh_lib::Generation) -> Self {
        let mut out = States::default();
        let (managed, staged, held) = g.file_counts();
        out.files = Counts {
            held,
            staged,
            managed,
        };
        for c in g.containers.values() {
            match c.state {
                mesh_lib::model::ContainerState::Held { .. } => out.containers.held += 1,
                mesh_lib::model::ContainerState::Staged => out.containers.staged += 1,
                mesh_lib::model::ContainerState::Managed => out.containers.managed += 1,
            }
        }
        for u in g.units.values() {
            match u.state {
                mesh_lib::model::UnitState::Held => out.units.held += 1,
                mesh_lib::model::UnitState::Staged => out.units.staged += 1,
                mesh_lib::model::UnitState::Managed => out.units.managed += 1,
            }
        }
        out
    }
}
