//! Going back to an earlier generation (a rollback, or a deploy's revert): a switch like any
//! other. Across the flip the found firewall comes back in the firewall's transaction (see
//! [`crate::firewall`]), and the node record follows what is in force, as after every switch
//! (see [`crate::commit`]).

use mesh_lib::{Generation, GenerationId};

use crate::Activator;
use crate::{ActivateError, Switched};
use mesh_node::profile::Trigger;

impl Activator {
    /// Switches back to `id`.
    pub fn go_back(
        &self,
        id: GenerationId,
        generation: &Generation,
        dry_run: bool,
        trigger: Trigger,
    ) -> Result<Switched, ActivateError> {
        self.switch(id, generation, trigger, None, dry_run)
    }

    /// Settles a switch a command cut short, before anything else is done to the node (`mesh
    /// reconcile` at boot): its file steps are finished, and when it had not committed, the
    /// node goes back to the generation in force before it (`None`: nothing was cut short, or
    /// it had committed, and only its record was left to follow it).
    pub fn settle(&self) -> Result<Option<Switched>, ActivateError> {
        let recovered = self.recover()?;
        let Some((_, act)) = recovered.unfinished else {
            return Ok(None);
        };
        let Some((_, previous)) = act.previous else {
            return Ok(None);
        };
        let generation = self.store.generation(&previous)?;
        self.go_back(previous, &generation, false, Trigger::Rollback)
            .map(Some)
    }

    /// The generation `mesh rollback` goes to: number `to`; or, after a command that was cut
    /// short, the generation that command was leaving — what undoing it means, never one further
    /// back — unless it was a rollback, which rolling back again finishes; or else the newest one
    /// before the current whose content differs from it.
    pub fn rollback_target(&self, to: Option<u64>) -> Result<(u64, GenerationId), ActivateError> {
        if to.is_none() {
            if let Some((target, act)) = self.unfinished()? {
                if act.trigger == Some(Trigger::Rollback) {
                    let number = self
                        .profile
                        .generations()
                        .map_err(mesh_node::io_err("reading the profile in", &self.state))?
                        .into_iter()
                        .rev()
                        .find(|(_, id)| *id == target)
                        .map_or(0, |(n, _)| n);
                    return Ok((number, target));
                }
                return act.previous.ok_or_else(|| {
                    mesh_node::NodeError::NoSuchGeneration(
                        "the command cut short was this node's first switch: there is no generation before it to go back to".into(),
                    )
                    .into()
                });
            }
        }
        Ok(self.generation_before(to)?)
    }
}
