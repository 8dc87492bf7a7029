//! The containers phase, after the files they may mount: found containers held, staged ones
//! created, the take's retire and run, a rollback's restore, the mesh's containers of another
//! spec recreated (see [`mesh_containers`]).
//!
//! The engine is asked only when the generation declares containers or this node's switches
//! ever created one, and then before anything changes: an engine that does not answer, a found
//! container the generation does not hold, or a missing image named by a tag alone refuses the
//! switch with nothing done. The images pinned by digest that the engine lacks are fetched in
//! the prepare phase, before anything changes ([`mesh_containers::images`]); one that cannot be fetched
//! refuses the switch with nothing done. Dry run: the images it would fetch.
//!
//! The steps run concurrently across containers: every stop at once, then the creates and
//! starts at most [`Activator::with_container_jobs`] at a time (see [`Engine::apply`]); the engine
//! is listed once, for the plan.
//!
//! Dry run: the container steps. Crash point: `container-changed`, after each engine change
//! (`container-changed:K`: the K-th, in whatever order the concurrent calls end).

use mesh_lib::model::Mode;
use mesh_lib::{Generation, GenerationId, NodeRecord};

use std::collections::BTreeMap;

use crate::ActivateError;
use crate::Activator;
use mesh_containers::plan::Was;
use mesh_containers::{Engine, Present, SecretValues, Step};
use mesh_systemd::services::Remount;

/// The engine (when it is asked) and the steps planned on it.
pub(crate) struct Containers {
    pub(crate) engine: Option<Engine>,
    pub(crate) steps: Vec<Step>,
    /// The engine's listing the steps were planned from.
    pub(crate) present: BTreeMap<String, Present>,
    /// The images pinned by digest that the steps need and the engine lacks: fetched before
    /// anything changes.
    pub(crate) fetch: Vec<mesh_containers::images::Wanted>,
}

impl Containers {
    /// How the engine has each container the steps touch, under its name and kept as
    /// `NAME.found`: what a switch cut short after them needs to know of before.
    pub(crate) fn touched(&self) -> BTreeMap<String, Was> {
        let mut out = BTreeMap::new();
        for step in &self.steps {
            for name in [
                step.name().to_owned(),
                format!("{}{}", step.name(), mesh_containers::FOUND_SUFFIX),
            ] {
                if let Some(p) = self.present.get(&name) {
                    out.insert(
                        name,
                        Was {
                            id: p.id.clone(),
                            running: p.running,
                        },
                    );
                }
            }
        }
        out
    }

    /// Whether a step changes the engine.
    pub(crate) fn busy(&self) -> bool {
        self.steps
            .iter()
            .any(|s| !matches!(s, Step::Hold { .. } | Step::Keep { start: false, .. }))
    }

    /// How many API calls were made.
    pub(crate) fn calls(&self) -> usize {
        self.engine.as_ref().map_or(0, Engine::calls)
    }
}

impl Activator {
    /// Observes the engine and plans its steps for `target`, and the restarts of containers
    /// whose mounted files change (unless another step makes them anew).
    /// `was`: how a switch cut short before this one found the containers it touched (see
    /// [`mesh_containers::plan`]).
    pub(crate) fn plan_containers(
        &self,
        target: &Generation,
        record: &NodeRecord,
        remounts: &[Remount],
        values: &SecretValues,
        was: &BTreeMap<String, Was>,
    ) -> Result<Containers, ActivateError> {
        if target.containers.is_empty() && !self.engine_used() {
            return Ok(Containers {
                engine: None,
                steps: Vec::new(),
                present: BTreeMap::new(),
                fetch: Vec::new(),
            });
        }
        let engine = Engine::connect()?;
        let present = engine.containers()?;
        // A found container the generation says is the module's (taken, or a managed node's)
        // is kept in place when it already is the declared one: the spec hash decides. One
        // that holds what no declaration says is not recreated without it unless accepted.
        let mut equal = std::collections::BTreeSet::new();
        let mut unaccepted = Vec::new();
        for (name, entry) in &target.containers {
            let found = present.get(name.as_str()).is_some_and(|p| !p.is_ours());
            if entry.state == mesh_lib::model::ContainerState::Managed && found {
                let live = engine.live(name.as_str(), self.root.path())?;
                unaccepted.extend(crate::gaps::unaccepted_of(
                    entry,
                    &live,
                    &self.accepted_gaps,
                ));
                if mesh_lib::import::is_equal(&with_values(entry, values), &live) {
                    equal.insert(name.to_string());
                }
            }
        }
        crate::gaps::refused(unaccepted)?;
        let mut steps = mesh_containers::plan(&mesh_containers::plan::Input {
            containers: &target.containers,
            present: &present,
            found: &record.found.containers,
            adopted: record.mode == Mode::Adopted,
            owner: &self.owner(),
            equal: &equal,
            was,
        })
        .map_err(|name| ActivateError::FoundContainerNotHeld { name })?;
        for r in remounts {
            let acted_on = steps.iter().any(|s| s.name() == r.name);
            let runs = present.get(&r.name).is_some_and(|p| p.running);
            if !acted_on && runs {
                steps.push(Step::Restart {
                    name: r.name.clone(),
                    because: r.because.clone(),
                });
            }
        }
        let needed = mesh_containers::images::needed(&engine, &target.containers, &steps)?;
        if !needed.missing.is_empty() {
            return Err(ActivateError::MissingImages {
                images: needed.missing,
            });
        }
        Ok(Containers {
            engine: Some(engine),
            steps,
            present,
            fetch: needed.fetch,
        })
    }

    /// Fetches the images the steps need and the engine lacks, before anything changes (see
    /// [`mesh_containers::images`]).
    pub(crate) fn fetch_images(
        &self,
        containers: &Containers,
        generation: &GenerationId,
    ) -> Result<(), ActivateError> {
        match &containers.engine {
            Some(engine) => self.fetch_listed(engine, &containers.fetch, generation),
            None => Ok(()),
        }
    }

    /// Fetches `wanted` through `engine` and lists each image fetched as the mesh's, needed by
    /// `generation` (also those fetched before a failure: they stay on the engine). A failure
    /// refuses the switch or stage with nothing changed but the engine's images.
    pub(crate) fn fetch_listed(
        &self,
        engine: &mesh_containers::Engine,
        wanted: &[mesh_containers::images::Wanted],
        generation: &GenerationId,
    ) -> Result<(), ActivateError> {
        let fetched = mesh_containers::images::fetch(
            engine,
            wanted,
            self.progress.as_ref(),
            self.fetch_stall,
        );
        let images = match &fetched {
            Ok(images) => images,
            Err(failed) => &failed.fetched,
        };
        let listed =
            mesh_containers::images::Fetched::record(&self.state, wanted, images, generation);
        fetched.map_err(ActivateError::Images)?;
        listed.map_err(|e| mesh_node::NodeError::Io {
            what: "listing the images fetched in",
            path: e.path,
            source: std::io::Error::other(e.why),
        })?;
        Ok(())
    }

    /// Carries out the steps. A failure here comes after the files of `target` were put in
    /// place: the error names the generation still in force.
    pub(crate) fn apply_containers(
        &self,
        containers: &Containers,
        target: &Generation,
        values: &SecretValues,
        id: GenerationId,
        previous: Option<GenerationId>,
    ) -> Result<(), ActivateError> {
        let Some(engine) = &containers.engine else {
            return Ok(());
        };
        let creates = containers
            .steps
            .iter()
            .any(|s| matches!(s, Step::Stage { .. } | Step::Run { .. }));
        if creates {
            self.mark_engine_used()?;
        }
        engine
            .apply(
                &target.containers,
                values,
                &containers.steps,
                &containers.present,
                &id,
                &self.owner(),
                self.root.path(),
                self.container_jobs,
                self.progress.as_ref(),
            )
            .map_err(|failed| ActivateError::ContainersUnfinished {
                target: id,
                previous,
                failed,
            })
    }
}

/// `entry` as it is compared with a found container: its secret environment variables given
/// their values (an unknown one left out, so the comparison says it differs). Only ever
/// compared, never shown or stored.
pub fn with_values(
    entry: &mesh_lib::model::ContainerEntry,
    values: &SecretValues,
) -> mesh_lib::model::ContainerEntry {
    let mut e = entry.clone();
    for (k, r) in std::mem::take(&mut e.secret_environment) {
        if let Some(v) = values.get(&r.ciphertext) {
            e.environment.insert(k, v.as_str().to_owned());
        }
    }
    e
}
