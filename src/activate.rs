//! The commands that change the node: switch, adopt, take, rollback, gc; and the ones that look
//! at it: generations, diff, status. Glue only: building is the compiler's, planning and applying
//! the activator's.

use std::path::{Path, PathBuf};

use mesh_compiler::{build, BuildRequest, Built};
use mesh_lib::model::{Mode, ModuleName, ModuleState};
use mesh_lib::record::record_path;
use mesh_lib::{Generation, GenerationId, NodeRecord};
use mesh_node::profile::Trigger;
use mesh_switch::{Activator, Switched};
use serde_json::json;

use crate::cli::{
    AdoptArgs, DiffArgs, FlipArgs, GcArgs, GenesisArgs, ReconcileArgs, RollbackArgs, SwitchArgs,
    TakeArgs,
};
use crate::context::Machine;
use crate::failure::{Exit, Failure};
use crate::show;

/// Builds `decl` with `record` (kept in memory: the caller saves it) and the image lock of its
/// tree, if it has one.
pub(crate) fn build_with(
    state: &Path,
    decl: &Path,
    record: Option<&NodeRecord>,
) -> Result<Built, Failure> {
    let path = record_path(state);
    let images = mesh_compiler::images_lock(decl, crate::context::tree_rule())?;
    Ok(build(&BuildRequest {
        node: decl,
        record: record.map(|r| (r, path.as_path())),
        images: images.as_ref().map(|(l, _)| l),
        state_dir: state,
        use_cache: true,
        evaluator: crate::context::evaluator(),
        tree: crate::context::tree_rule(),
        per_module: true,
        keep_if: Default::default(),
    })?)
}

/// Builds the declaration, records and holds what is newly found on an adopted node, and
/// switches to the result.
fn switch_declaration(
    node: &Activator,
    state: &Path,
    decl: &Path,
    mut record: Option<NodeRecord>,
    trigger: Trigger,
    dry_run: bool,
) -> Result<Switched, Failure> {
    let decl = std::fs::canonicalize(decl).map_err(|_| {
        Failure::user(format!(
            "cannot read the node declaration {}: no such file",
            decl.display()
        ))
    })?;
    let mut built = build_with(state, &decl, record.as_ref())?;
    if let Some(r) = record.as_mut() {
        if node.record_found(built.generation()?, r)? > 0 {
            if !dry_run {
                node.save_record(r)?;
            }
            built = build_with(state, &decl, Some(r))?;
        }
    }
    Ok(node.switch(built.id, built.generation()?, trigger, Some(&decl), dry_run)?)
}

fn report(switched: &Switched, json_out: bool) {
    if json_out {
        say!("{}", serde_json::to_string(switched).unwrap_or_default());
    } else {
        say_raw!("{}", show::switched(switched));
    }
}

/// Reports a switch, and fails (exit 3) when a unit failed after it: naming each unit, its
/// last log lines and the generation to go back to — or, with `rollback_on_failure`, going
/// back to it at once and saying so.
fn finish(
    node: &Activator,
    switched: Switched,
    json_out: bool,
    rollback_on_failure: bool,
) -> Result<(), Failure> {
    if switched.failed.is_empty() || !(rollback_on_failure && json_out) {
        report(&switched, json_out);
    }
    if switched.failed.is_empty() {
        return Ok(());
    }
    let mut what = Vec::new();
    for f in &switched.failed {
        let mut line = f.to_string();
        if !f.log.is_empty() {
            // The journal's lines are the unit's own output: escaped, as anything from outside.
            let log: Vec<String> = f
                .log
                .iter()
                .map(|l| mesh_lib::text::escape(l).into_owned())
                .collect();
            line.push_str(&format!(
                "; its last log lines:\n    {}",
                log.join("\n    ")
            ));
        }
        what.push(line);
    }
    let what = what.join("\n  ");
    let here = switched.id.short().to_string();
    let Some(previous) = switched.previous.filter(|p| *p != switched.id) else {
        return Err(Failure::system(format!(
            "the switch to {here} is done, but units failed:\n  {what}\nthere is no earlier generation to go back to"
        )));
    };
    if !rollback_on_failure {
        return Err(Failure::new(
            Exit::System,
            miette::miette!(
                help = format!("go back with `mesh switch --generation {}` (or `mesh rollback`), or fix the unit and switch again", previous.short()),
                "the switch to {here} is done, but units failed:\n  {what}\n{} was in force before",
                previous.short()
            ),
        ));
    }
    let generation = node.store.generation(&previous)?;
    let back = go_back(node, previous, &generation, false, Trigger::Rollback)?;
    if json_out {
        // One object: the switch, and the rollback it ended with.
        let mut value = serde_json::to_value(&switched).map_err(Failure::system)?;
        value["rolled_back"] = serde_json::to_value(&back).map_err(Failure::system)?;
        say!("{value}");
    } else {
        report(&back, json_out);
    }
    Err(Failure::system(format!(
        "units failed after the switch to {here}:\n  {what}\nrolled back to {} by itself (--rollback-on-failure){}",
        previous.short(),
        back.number.map(|n| format!(", as generation {n}")).unwrap_or_default()
    )))
}

/// Switches back to `id` (a rollback): see [`Activator::go_back`].
pub fn go_back(
    node: &Activator,
    id: GenerationId,
    generation: &Generation,
    dry_run: bool,
    trigger: Trigger,
) -> Result<Switched, Failure> {
    Ok(node.go_back(id, generation, dry_run, trigger)?)
}

pub fn switch(machine: &Machine, args: SwitchArgs) -> Result<(), Failure> {
    if let (Some(seconds), Some(text)) = (args.confirm_within, &args.generation) {
        return crate::remote::arm(machine, text, seconds, args.json);
    }
    let state = machine.state.as_path();
    let node = machine.open()?.with_accepted_gaps(args.accept_gap.clone());
    if args.stage {
        return stage(&node, machine, &args);
    }
    let switched = match (&args.node, &args.generation) {
        (Some(decl), _) => switch_declaration(
            &node,
            state,
            decl,
            node.record()?,
            Trigger::Build,
            args.dry_run,
        )?,
        (None, Some(text)) => {
            let id = node.store.resolve_generation(text)?;
            // A generation from elsewhere: a signer this node trusts must vouch for it (now,
            // when a deploy key asks: having been in force before is no pass).
            let generation = node.store.generation(&id)?;
            if machine.served {
                mesh_remote::trust::check_now(&node, &id)?;
                mesh_remote::statement::check_stated(&node, &id, generation.node.as_str())?;
            } else {
                mesh_remote::trust::check(&node, &id)?;
            }
            node.switch(id, &generation, Trigger::Build, None, args.dry_run)?
        }
        (None, None) => unreachable!("clap requires one of them"),
    };
    finish(&node, switched, args.json, args.rollback_on_failure)
}

/// `mesh switch --stage`: the generation built (with what the record would find, not saved) or
/// taken from the store, then staged.
fn stage(node: &Activator, machine: &Machine, args: &SwitchArgs) -> Result<(), Failure> {
    let state = machine.state.as_path();
    let (id, generation) = match (&args.node, &args.generation) {
        (Some(decl), _) => {
            let mut record = node.record()?;
            let mut built = build_with(state, decl, record.as_ref())?;
            if let Some(r) = record.as_mut() {
                if node.record_found(built.generation()?, r)? > 0 {
                    built = build_with(state, decl, Some(r))?;
                }
            }
            (built.id, built.generation()?.clone())
        }
        (None, Some(text)) => {
            let id = node.store.resolve_generation(text)?;
            let generation = node.store.generation(&id)?;
            mesh_remote::trust::check(node, &id)?;
            (id, generation)
        }
        (None, None) => unreachable!("clap requires one of them"),
    };
    let staged = node.stage(id, &generation)?;
    if args.json {
        say!("{}", serde_json::to_string(&staged).unwrap_or_default());
    } else {
        say!(
            "staged {}: {} object(s) checked, {} secret(s) decrypted, {} image(s) fetched, {} present; nothing in force changed",
            staged.id,
            staged.blobs,
            staged.secrets,
            staged.images.len(),
            staged.present
        );
        say!("{}", staged.id);
    }
    Ok(())
}

pub fn adopt(machine: &Machine, args: AdoptArgs) -> Result<(), Failure> {
    let state = machine.state.as_path();
    let node = machine.open()?;
    // Adoption is for a machine the mesh does not manage yet. Adopting a managed node would drop
    // its base ruleset with no found firewall in its place.
    if let Some((n, id, g)) = node.current()? {
        if g.mode == Mode::Managed {
            return Err(Failure::new(
                Exit::Refused,
                miette::miette!(
                    help = "to go back across a flip, `mesh rollback` loads the found firewall back",
                    "this node is managed (generation {n}, {}): adoption is for a machine the mesh does not manage yet; nothing was changed",
                    id.short()
                ),
            ));
        }
    }
    let mut record = match node.record()? {
        Some(r) => r,
        None => {
            // The record is named after the node: learn its name from a build with none.
            let built = build_with(state, &args.node, None)?;
            NodeRecord::managed(built.summary.node.clone())
        }
    };
    record.mode = Mode::Adopted;
    node.record_found_firewall(&mut record)?;
    node.save_record(&record)?;
    let found = record.found.firewall.as_ref().map(|f| f.kind);
    let mut switched = switch_declaration(
        &node,
        state,
        &args.node,
        Some(record),
        Trigger::Adopt,
        false,
    )?;
    switched.found_firewall = found;
    finish(&node, switched, args.json, false)
}

/// The declaration the current generation was built from, for commands that rebuild it.
fn last_declaration(node: &Activator) -> Result<PathBuf, Failure> {
    let log = node
        .profile
        .log()
        .map_err(|e| Failure::system(format!("reading the profile log: {e}")))?;
    log.iter()
        .rev()
        .find_map(|e| e.declaration.clone())
        .ok_or_else(|| Failure::user("no declaration to build from: give NODE.ncl"))
}

pub fn take(machine: &Machine, args: TakeArgs) -> Result<(), Failure> {
    let state = machine.state.as_path();
    // What the user gave, checked before the node is opened.
    let (names, decl) = args.split();
    if names.is_empty() {
        return Err(Failure::user(
            "name the modules to take before the declaration: mesh take MODULE... [NODE.ncl]",
        ));
    }
    let mut modules: Vec<ModuleName> = Vec::new();
    for name in names {
        let module = ModuleName::new(name).map_err(Failure::user)?;
        if !modules.contains(&module) {
            modules.push(module);
        }
    }
    let node = machine.open()?.with_accepted_gaps(args.accept_gap.clone());
    let mut record = node
        .record()?
        .filter(|r| r.mode == Mode::Adopted)
        .ok_or_else(|| {
            Failure::user("this node is not adopted: there is nothing to take (see `mesh adopt`)")
        })?;
    // Taken in the record but not in the generation in force: a take cut short (a crash) after
    // the record was saved, which taking again finishes.
    let in_force = node.current()?.map(|(_, _, g)| g);
    let already: Vec<String> = modules
        .iter()
        .filter(|m| {
            record.taken.contains(*m)
                && in_force
                    .as_ref()
                    .is_some_and(|g| g.modules.get(*m) == Some(&ModuleState::Taken))
        })
        .map(ToString::to_string)
        .collect();
    if !already.is_empty() {
        return Err(Failure::new(
            Exit::Refused,
            miette::miette!(
                "{} already taken on node {}; nothing was changed",
                match already.as_slice() {
                    [one] => format!("module {one} is"),
                    more => format!("modules {} are", more.join(", ")),
                },
                record.node
            ),
        ));
    }
    let decl = match decl {
        Some(d) => d,
        None => last_declaration(&node)?,
    };
    // A module the declaration does not assign is the declaration's to fix (or a typo in the
    // module's name): say so, rather than let the build blame the record the take would write.
    let assigned = build_with(state, &decl, Some(&record))?;
    let assigned_modules = &assigned.generation()?.modules;
    let missing: Vec<&str> = modules
        .iter()
        .filter(|m| !assigned_modules.contains_key(*m))
        .map(ModuleName::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(Failure::user(format!(
            "{} does not assign {} to node {}: there is nothing to take (assigned: {})",
            decl.display(),
            match missing.as_slice() {
                [one] => format!("module {one}"),
                more => format!("modules {}", more.join(", ")),
            },
            record.node,
            assigned_modules
                .keys()
                .map(ModuleName::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    record.taken.extend(modules);
    // A take that would lose what no declaration says is refused before the record changes.
    node.refuse_unaccepted_gaps(build_with(state, &decl, Some(&record))?.generation()?)?;
    commit_record(
        &node,
        state,
        &decl,
        record,
        Trigger::Take,
        args.json,
        args.rollback_on_failure,
    )
}

/// Switches to what a changed record builds to: a take, a flip. The record is saved by the
/// switch once its generation is in force (the record follows what is in force), so a record
/// the declaration rejects (a take of a module not assigned) changes nothing, and a take cut
/// short leaves the record as it was.
fn commit_record(
    node: &Activator,
    state: &Path,
    decl: &Path,
    record: NodeRecord,
    trigger: Trigger,
    json_out: bool,
    rollback_on_failure: bool,
) -> Result<(), Failure> {
    let switched = switch_declaration(node, state, decl, Some(record), trigger, false)?;
    finish(node, switched, json_out, rollback_on_failure)
}

pub fn rollback(machine: &Machine, args: RollbackArgs) -> Result<(), Failure> {
    let node = machine.open()?;
    node.recover()?;
    let (_, id) = node.rollback_target(args.to)?;
    let generation = node.store.generation(&id)?;
    let switched = go_back(&node, id, &generation, args.dry_run, Trigger::Rollback)?;
    finish(&node, switched, args.json, false)
}

pub fn generations(machine: &Machine, json_out: bool) -> Result<(), Failure> {
    let node = machine.inspect()?;
    let read = |e: std::io::Error| Failure::system(format!("reading the profile: {e}"));
    let links = node.profile.generations().map_err(read)?;
    let current = node.profile.current().map_err(read)?.map(|(n, _)| n);
    let log = node.profile.read_log().map_err(read)?;
    for d in &log.damaged {
        eprintln!(
            "warning: {} line {}: {}; skipped, the rest of the history is read",
            node.profile.log_path().display(),
            d.line,
            mesh_lib::text::escape(&d.why)
        );
    }
    let log = log.entries;
    let rows: Vec<serde_json::Value> = links
        .iter()
        .map(|(n, id)| {
            let entry = log.iter().rev().find(|e| e.number == *n);
            json!({
                "number": n,
                "id": id,
                "current": Some(*n) == current,
                "time": entry.map(|e| e.time.clone()),
                "trigger": entry.map(|e| e.trigger),
            })
        })
        .collect();
    if json_out {
        say!("{}", json!({ "generations": rows }));
    } else if rows.is_empty() {
        say!("no generations yet: `mesh switch NODE.ncl` makes the first");
    } else {
        for r in &rows {
            say!(
                "{} {:>4}  {}  {}  {}",
                if r["current"] == true { "*" } else { " " },
                r["number"],
                r["time"].as_str().unwrap_or("-"),
                r["trigger"].as_str().unwrap_or("-"),
                r["id"].as_str().unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// A generation number of the profile, or an id (or unique prefix) in the store.
fn resolve(node: &Activator, text: &str) -> Result<(GenerationId, Generation), Failure> {
    let id = match text.parse::<u64>() {
        Ok(n) if text.len() < 8 => node
            .profile
            .generations()
            .map_err(|e| Failure::system(format!("reading the profile: {e}")))?
            .into_iter()
            .find(|(m, _)| *m == n)
            .map(|(_, id)| id)
            .ok_or_else(|| {
                Failure::user(format!(
                    "there is no generation {n} (see `mesh generations`)"
                ))
            })?,
        _ => node.store.resolve_generation(text)?,
    };
    Ok((id, node.store.generation(&id)?))
}

/// One side of a file's content diff: absent, its content in effect with its mode (a held
/// original's as found), or why its content cannot be shown.
fn content_side<'a>(
    path: &str,
    content: &'a Option<mesh_lib::diff::ContentIn>,
    bytes: &'a Option<Vec<u8>>,
    found: &std::collections::BTreeMap<mesh_lib::TargetPath, mesh_lib::record::FoundFile>,
) -> mesh_lib::diff::Side<'a> {
    use mesh_lib::diff::Side;
    if let Some(what) = content.as_ref().and_then(|c| c.secret.as_deref()) {
        return Side::Secret(what);
    }
    let (Some(c), Some(bytes)) = (content, bytes) else {
        return match content {
            None => Side::Absent,
            Some(_) => Side::Unknown("its content is not in the store"),
        };
    };
    if !c.held {
        return Side::File(bytes, c.mode);
    }
    match mesh_lib::TargetPath::new(path)
        .ok()
        .and_then(|p| found.get(&p))
    {
        Some(f) => Side::File(bytes, f.mode),
        None => Side::Unknown("the original's mode is not recorded"),
    }
}

pub fn diff(machine: &Machine, args: DiffArgs) -> Result<(), Failure> {
    let node = machine.inspect()?;
    let to = match &args.to {
        Some(t) => resolve(&node, t)?,
        None => {
            let (_, id, g) = node
                .current()?
                .ok_or_else(|| Failure::user("this node has no generation yet"))?;
            (id, g)
        }
    };
    let from = match &args.from {
        Some(f) => resolve(&node, f)?,
        None => {
            let links = node
                .profile
                .generations()
                .map_err(|e| Failure::system(format!("reading the profile: {e}")))?;
            let to_number = links
                .iter()
                .rev()
                .find(|(_, id)| *id == to.0)
                .map(|(n, _)| *n);
            let prev = links
                .iter()
                .rev()
                .find(|(n, _)| to_number.is_some_and(|t| *n < t))
                .ok_or_else(|| Failure::user("there is no generation before it: give FROM"))?;
            (prev.1, node.store.generation(&prev.1)?)
        }
    };
    let mut d = mesh_lib::diff::diff(&from.1, &to.1);
    // Each changed file's content in effect, from the store: a held original with the mode it
    // was found with (the record has it), so one others may not read stays unshown.
    let found = node.record()?.map(|r| r.found.files).unwrap_or_default();
    for (path, a, b) in mesh_lib::diff::content_changes(&from.1, &to.1) {
        let blobs: Vec<Option<Vec<u8>>> = [&a, &b]
            .iter()
            .map(|c| {
                c.as_ref()
                    .filter(|c| c.secret.is_none())
                    .and_then(|c| node.store.blob(&c.blob).ok())
            })
            .collect();
        d.contents.push(mesh_lib::diff::content_diff(
            &path,
            content_side(&path, &a, &blobs[0], &found),
            content_side(&path, &b, &blobs[1], &found),
        ));
    }
    if args.json {
        say!("{}", json!({ "from": from.0, "to": to.0, "diff": d }));
    } else {
        say_raw!("{}", show::diff(&from.0, &to.0, &d));
    }
    Ok(())
}

pub fn status(machine: &Machine, json_out: bool) -> Result<(), Failure> {
    let node = machine.inspect()?;
    let s = mesh_remote::status::of(&node)?;
    if json_out {
        say!("{}", serde_json::to_string(&s).unwrap_or_default());
    } else {
        say_raw!("{}", show::status(&s));
    }
    Ok(())
}

pub fn gc(machine: &Machine, args: GcArgs) -> Result<(), Failure> {
    let node = machine.open()?;
    let mesh_switch::Collected {
        removed,
        store: report,
        images,
    } = node.gc(args.keep)?;
    let failed = images.as_ref().err().map(ToString::to_string);
    let images = images.unwrap_or_default();
    if args.json {
        say!(
            "{}",
            json!({ "removed_generations": removed, "store": report, "images": images, "images_error": failed })
        );
    } else {
        say!(
            "removed generation links {:?}; from the store: {} generations, {} blobs ({} packs rewritten)",
            removed, report.generations, report.blobs, report.packs_rewritten
        );
        for image in &images.removed {
            say!("removed image {image}: fetched by the mesh, no kept generation needs it");
        }
        for image in &images.in_use {
            say!("kept image {image}: fetched by the mesh, no kept generation needs it, a container uses it");
        }
        for image in &images.gone {
            say!("image {image}: fetched by the mesh, no longer on the engine");
        }
    }
    match failed {
        None => Ok(()),
        Some(e) => Err(Failure::system(format!(
            "the generations and blobs were collected, the images the mesh fetched were not: {e}"
        ))),
    }
}

fn say_round(
    id: &GenerationId,
    done: &mesh_reach::firewall::Converged,
    would: bool,
    json_out: bool,
) {
    if json_out {
        let key = if would { "would_change" } else { "converged" };
        say!("{}", json!({ "id": id, key: done }));
    } else {
        say!("{}: firewall {}", id.short(), show::firewall(done, would));
    }
}

/// Says one round of reconcile: the deploys it settled, and what it did to the firewall.
fn say_reconciled(
    round: mesh_remote::reconcile::Round,
    would: bool,
    json_out: bool,
    quiet: bool,
) -> Result<(), Failure> {
    use mesh_remote::reconcile::Done;
    for s in &round.settled {
        if json_out {
            say!(
                "{}",
                json!({ "deploy": s.token, "state": s.state, "settled": s.what })
            );
        } else {
            say!("deploy {}: {}", s.token, s.what);
        }
    }
    match round.done? {
        // A quiet round (--watch) says nothing: the log shows only what was repaired.
        Done::Converged(_, done) if quiet && done == Default::default() => {}
        Done::Converged(id, done) => say_round(&id, &done, would, json_out),
        Done::Waiting { id, token } => {
            if json_out {
                say!("{}", json!({ "id": id, "waiting": token }));
            } else if !quiet {
                say!(
                    "{}: waits for the confirmation of deploy {token}; its agent puts it in force, not reconcile",
                    id.short()
                );
            }
        }
    }
    Ok(())
}

pub fn reconcile(machine: &Machine, args: ReconcileArgs) -> Result<(), Failure> {
    let place = crate::remote::place(machine);
    let Some(seconds) = args.watch else {
        let spawn = crate::remote::Spawn(machine.clone());
        let round = mesh_remote::reconcile::round(&place, &spawn, args.dry_run);
        return say_reconciled(round, args.dry_run, args.json, false);
    };
    let json_out = args.json;
    mesh_remote::reconcile::watch(
        place,
        std::sync::Arc::new(crate::remote::Spawn(machine.clone())),
        std::time::Duration::from_secs(seconds),
        |round| {
            if let Err(e) = say_reconciled(round, false, json_out, true) {
                eprintln!("reconcile: {}", e.report_text());
            }
        },
    )
    .map_err(|e| Failure::system(format!("reconcile --watch: {e}")))?;
    eprintln!("reconcile: stopped");
    Ok(())
}

/// `mesh flip --preview`: every port published on the node, who reaches it now and who would
/// after the flip, worked out from the rules in force and the flip's generation (built as the
/// flip builds it). Changes nothing on the machine.
fn preview_flip(machine: &Machine, args: &FlipArgs) -> Result<(), Failure> {
    let state = machine.state.as_path();
    let node = machine.inspect()?;
    let (_, id, current) = node
        .current()?
        .ok_or_else(|| Failure::user("this node has no generation yet"))?;
    let decl = match &args.node {
        Some(d) => d.clone(),
        None => last_declaration(&node)?,
    };
    let mut record = node
        .record()?
        .unwrap_or_else(|| NodeRecord::managed(current.node.clone()));
    record.mode = Mode::Managed;
    let built = build_with(state, &decl, Some(&record))?;
    // Containers an engine says publish a port, to name them; a node without one has none.
    let published = match mesh_containers::Engine::connect() {
        Ok(engine) => engine.published().unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let preview = node.preview_flip(built.generation()?, published)?;
    let not_taken: Vec<String> = current
        .modules
        .iter()
        .filter(|(_, s)| **s == ModuleState::Assigned)
        .map(|(m, _)| m.to_string())
        .collect();
    if args.json {
        say!(
            "{}",
            json!({
                "id": id,
                "flip_to": built.id,
                "ports": preview.ports,
                "clients": preview.clients,
                "not_taken": not_taken,
            })
        );
    } else {
        say_raw!(
            "{}",
            show::flip_preview(&id, &built.id, &preview, &not_taken)
        );
    }
    Ok(())
}

pub fn flip(machine: &Machine, args: FlipArgs) -> Result<(), Failure> {
    let state = machine.state.as_path();
    if args.preview {
        return preview_flip(machine, &args);
    }
    let node = machine.open()?;
    let (_, _, current) = node
        .current()?
        .ok_or_else(|| Failure::user("this node has no generation yet"))?;
    // A flip cut short after the record said managed (a crash) is finished by flipping again:
    // the generation in force is still adopted.
    let mut record = node
        .record()?
        .filter(|r| r.mode == Mode::Adopted || current.mode == Mode::Adopted)
        .ok_or_else(|| Failure::user("this node is not adopted: there is nothing to flip"))?;
    let not_taken: Vec<String> = current
        .modules
        .iter()
        .filter(|(_, s)| **s == ModuleState::Assigned)
        .map(|(m, _)| m.to_string())
        .collect();
    if !not_taken.is_empty() && !args.force {
        return Err(Failure::new(
            Exit::Refused,
            miette::miette!(
                help = "take them first (`mesh take MODULE`), or flip with --force: their held files are then replaced (the originals stay in the store)",
                "modules not taken yet: {}",
                not_taken.join(", ")
            ),
        ));
    }
    let decl = match args.node {
        Some(d) => d,
        None => last_declaration(&node)?,
    };
    record.mode = Mode::Managed;
    commit_record(
        &node,
        state,
        &decl,
        record,
        Trigger::Flip,
        args.json,
        args.rollback_on_failure,
    )
}

/// A line said on the way: on standard output for a person, on standard error when standard
/// output is one JSON object.
fn aside(json_out: bool, line: &str) {
    if json_out {
        eprintln!("{line}");
    } else {
        say!("{line}");
    }
}

/// Sets the path the operator gave with a flag (`(flag, given)`) in `field` of the node's
/// record: saved, and said, when it changes the record.
fn set_record_path(
    node: &Activator,
    record: &mut NodeRecord,
    (flag, given): (&str, Option<&String>),
    field: fn(&mut NodeRecord) -> &mut Option<mesh_lib::TargetPath>,
    said: impl Fn(&mesh_lib::TargetPath) -> String,
    json_out: bool,
) -> Result<(), Failure> {
    let Some(given) = given else {
        return Ok(());
    };
    let path =
        mesh_lib::TargetPath::new(given).map_err(|e| Failure::user(format!("{flag}: {e}")))?;
    if field(record).as_ref() != Some(&path) {
        *field(record) = Some(path.clone());
        node.save_record(record)?;
        aside(json_out, &said(&path));
    }
    Ok(())
}

pub fn genesis(machine: &Machine, args: GenesisArgs) -> Result<(), Failure> {
    let state = machine.state.as_path();
    use mesh_lib::model::{Port, Protocol, FOUNDATION_PORTS};
    let node = machine.open()?;
    let mut record = match node.record()? {
        Some(r) => r,
        None => NodeRecord::managed(build_with(state, &args.node, None)?.summary.node),
    };
    set_record_path(
        &node,
        &mut record,
        ("--trusted-signers", args.trusted_signers.as_ref()),
        |r| &mut r.trusted_signers,
        |path| {
            format!("the node's trusted signers are at {path} (a generation from elsewhere needs a signature by one of them)")
        },
        args.json,
    )?;
    set_record_path(
        &node,
        &mut record,
        ("--host-key", args.host_key.as_ref()),
        |r| &mut r.host_key,
        |path| format!("the node's host key is at {path} (its secrets are decrypted with it)"),
        args.json,
    )?;
    // The declaration's ports: built without the pins when repinning.
    let mut unpinned = record.clone();
    if args.repin {
        unpinned.pinned.clear();
    }
    let built = build_with(state, &args.node, Some(&unpinned))?;
    let settings = &built.generation()?.settings;
    // The private network's range must be clear of every network already on the node (the
    // predecessor's tunnel, a runtime's bridges, the uplink); the mesh's own hub interface,
    // once up, carries the node's address with the range and is not in the way.
    let in_force = node.current()?.map(|(_, _, g)| g.settings.private_network);
    node.check_private_network(&settings.private_network, in_force.as_ref())?;
    let already: Vec<&str> = FOUNDATION_PORTS
        .iter()
        .copied()
        .filter(|p| record.pinned.contains_key(*p))
        .collect();
    if already.len() == FOUNDATION_PORTS.len() && !args.repin {
        let pins: Vec<String> = FOUNDATION_PORTS
            .iter()
            .map(|p| format!("{p} {}", record.pinned[*p]))
            .collect();
        if args.json {
            say!("{}", json!({ "pinned": record.pinned, "changed": false }));
        } else {
            say!(
                "the foundation's ports are already pinned: {} (change them with --repin)",
                pins.join(", ")
            );
        }
        return Ok(());
    }
    let taken = node.bound().map_err(Failure::system)?;
    let protocol = |name: &str| {
        if name == "hub" {
            Protocol::Udp
        } else {
            Protocol::Tcp
        }
    };
    // Published container ports too, when an engine answers (a node without Docker has none).
    let published = match mesh_containers::Engine::connect() {
        Ok(engine) => engine.published().map_err(Failure::system)?,
        Err(_) => Vec::new(),
    };
    let holder = |port: u16, proto: Protocol| -> Option<String> {
        taken
            .iter()
            .find(|l| l.port == port && l.protocol == proto)
            .map(|l| {
                l.owner
                    .clone()
                    .unwrap_or_else(|| "a process that could not be identified".into())
            })
            .or_else(|| {
                published
                    .iter()
                    .find(|p| p.port == port && p.protocol == proto)
                    .map(|p| format!("container {}", mesh_lib::text::escape(&p.container)))
            })
    };
    let used: Vec<u16> = settings.ports.values().map(|p| p.get()).collect();
    let mut conflicts = Vec::new();
    for name in FOUNDATION_PORTS {
        let port = settings.ports[name].get();
        // A port pinned before is the node's already: the foundation may be what holds it.
        if record.pinned.get(name).is_some_and(|p| p.get() == port) && !args.repin {
            continue;
        }
        if let Some(l) = holder(port, protocol(name)) {
            let free = (1..=1000u16)
                .flat_map(|d| [port.checked_add(d), port.checked_sub(d)])
                .flatten()
                .find(|p| *p >= 1024 && holder(*p, protocol(name)).is_none() && !used.contains(p));
            conflicts.push(format!(
                "port {port}/{} ({name}) is taken by {l}{}",
                protocol(name),
                free.map(|f| format!("; {f} is free")).unwrap_or_default()
            ));
        }
    }
    if !conflicts.is_empty() {
        return Err(Failure::new(
            Exit::Refused,
            miette::miette!(
                help = "choose free ports in the node's settings.ports, then run genesis again",
                "the foundation cannot come up on these ports:\n  {}",
                conflicts.join("\n  ")
            ),
        ));
    }
    for name in FOUNDATION_PORTS {
        record.pinned.insert(
            name.to_string(),
            Port::new(i64::from(settings.ports[name].get())).expect("a setting is a port"),
        );
    }
    node.save_record(&record)?;
    if args.json {
        say!("{}", json!({ "pinned": record.pinned, "changed": true }));
    } else {
        let pins: Vec<String> = FOUNDATION_PORTS
            .iter()
            .map(|p| format!("{p} {}", record.pinned[*p]))
            .collect();
        say!(
            "pinned the foundation's ports in the node record: {}",
            pins.join(", ")
        );
    }
    Ok(())
}
