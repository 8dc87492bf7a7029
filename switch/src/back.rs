//! Going back to an earlier generation (a rollback, or a deploy's revert): a switch like any
//! other, but across the flip the found firewall is loaded back from its dump first, and the
//! node record follows what is in force, so the next build agrees with it.

use mesh_lib::model::{Mode, ModuleState};
use mesh_lib::{Generation, GenerationId};

use crate::Activator;
use crate::{ActivateError, Switched};
use mesh_node::profile::Trigger;

impl Activator {
    /// Switches back to `id`: across the flip, the found firewall is loaded back from its dump
    /// first; the record follows what is in force.
    pub fn go_back(
        &self,
        id: GenerationId,
        generation: &Generation,
        dry_run: bool,
        trigger: Trigger,
    ) -> Result<Switched, ActivateError> {
        let mut restored = Vec::new();
        if !dry_run
            && generation.mode == Mode::Adopted
            && self
                .current()?
                .is_some_and(|(_, _, c)| c.mode == Mode::Managed)
        {
            restored = self.restore_found_firewall()?;
        }
        let mut switched = self.switch(id, generation, trigger, None, dry_run)?;
        switched.restored = restored
            .into_iter()
            .map(|(family, table)| format!("{family} {table}"))
            .collect();
        if !dry_run {
            if let Some(mut record) = self.record()? {
                let taken = generation
                    .modules
                    .iter()
                    .filter(|(_, s)| **s == ModuleState::Taken)
                    .map(|(m, _)| m.clone());
                let taken = if generation.mode == Mode::Adopted {
                    taken.collect()
                } else {
                    record.taken.clone()
                };
                if record.taken != taken || record.mode != generation.mode {
                    record.taken = taken;
                    record.mode = generation.mode;
                    self.save_record(&record)?;
                }
            }
        }
        Ok(switched)
    }
}
