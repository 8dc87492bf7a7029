//! `mesh import`: the declaration of what a node runs, written from the machine (read-only), and
//! `mesh import --check`: a declaration compared, item by item, with what runs.

use mesh_fleet::import::{render, write, FileToImport, Found, Imported, Skipped};
use std::path::Path;

use mesh_lib::TargetPath;
use mesh_switch::Activator;
use serde_json::json;

use crate::cli::ImportArgs;
use crate::context::Machine;
use crate::failure::{Exit, Failure};

pub fn import(machine: &Machine, args: ImportArgs) -> Result<(), Failure> {
    // What the user gave, checked before anything is read.
    let paths = args
        .what
        .file
        .iter()
        .map(|p| TargetPath::new(p).map_err(|e| Failure::user(format!("--file {p}: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(decl) = &args.check {
        return check(machine, decl, !args.what.no_firewall, args.json);
    }
    if args.out.is_none() && !args.found_json {
        return Err(Failure::user(
            "mesh import needs --out DIR (where the catalogue and the node's declaration go), or --check NODE.ncl",
        ));
    }
    // The node's name names files (nodes/NODE.ncl): one safe name, or nothing is written.
    let name = match &args.node {
        Some(n) => mesh_lib::model::NodeName::new(n).map_err(|e| {
            Failure::user(format!(
                "--node: {}; nothing was written",
                mesh_lib::text::escape(&e.to_string())
            ))
        })?,
        None => {
            let hostname = std::fs::read_to_string(machine.root.join("etc/hostname"))
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
                .ok_or_else(|| {
                    Failure::user(
                        "the node's name: give --node NAME (the root has no /etc/hostname)",
                    )
                })?;
            mesh_lib::model::NodeName::new(&hostname).map_err(|e| {
                Failure::user(format!(
                    "the root's /etc/hostname: {}; give --node NAME; nothing was written",
                    mesh_lib::text::escape(&e.to_string())
                ))
            })?
        }
    }
    .to_string();
    // Read-only, the mesh's own state too: what an import reads (the root's files, the
    // firewall, the engine) needs no record, so the node is opened over a scratch state
    // (removed after), not the state folder, which opening would make or fill.
    let scratch = tempfile::tempdir().map_err(Failure::system)?;
    let state = scratch.path();
    let node = Activator::inspect(state, &machine.root, machine.netns.clone())?;
    // A file over the size limit is named, never read into the fleet's repository.
    let limit = args.what.max_file_size;
    let mut gaps = std::collections::BTreeMap::new();
    let paths = within_limit(&machine.root, paths, limit, &mut gaps);
    let (live_files, not_files) = node.live_files(&paths)?;
    if !not_files.is_empty() {
        return Err(Failure::user(format!(
            "--file: no regular file at {} (under the root {}); nothing was written",
            not_files
                .iter()
                .map(|p| mesh_lib::text::escape(p.as_str()).into_owned())
                .collect::<Vec<_>>()
                .join(", "),
            machine.root.display()
        )));
    }
    let containers = if args.what.no_containers {
        Vec::new()
    } else {
        let docker = |e| Failure::from(mesh_switch::ActivateError::from(e));
        let engine = mesh_containers::Engine::connect().map_err(docker)?;
        let present = engine.containers().map_err(docker)?;
        let named = chosen(&present, &args.what.container)?;
        if args.what.compose.is_empty() {
            mesh_switch::import::live_containers(&engine, &named, &machine.root).map_err(docker)?
        } else {
            let all = mesh_switch::import::live_containers(&engine, &[], &machine.root)
                .map_err(docker)?;
            of_compose_files(all, &args.what.compose, &named, &machine.root)?
        }
    };
    // The compose files the containers' projects were started from, and the environment
    // files they name: what an operator edits beside the containers.
    let mut skipped = Vec::new();
    let mut live_files = live_files;
    if !args.what.no_compose_files {
        let given: std::collections::BTreeSet<&str> =
            paths.iter().map(TargetPath::as_str).collect();
        let (wanted, mut passed) = compose_paths(&containers, &machine.root);
        let wanted: Vec<TargetPath> = wanted
            .into_iter()
            .filter(|p| !given.contains(p.as_str()))
            .collect();
        let wanted = within_limit(&machine.root, wanted, limit, &mut gaps);
        let (found, not_there) = node.live_files(&wanted)?;
        live_files.extend(found);
        passed.extend(
            not_there
                .into_iter()
                .map(|p| (p.to_string(), "no regular file there".to_owned())),
        );
        skipped.extend(passed.into_iter().map(|(path, why)| Skipped { path, why }));
    }
    let files: Vec<FileToImport> = live_files
        .into_iter()
        .map(|f| FileToImport {
            path: f.path.to_string(),
            content: f.content,
            mode: String::from(f.mode),
            owner: f.owner,
            group: f.group,
        })
        .collect();
    let openings = if args.what.no_firewall {
        Vec::new()
    } else {
        // Who reaches a port now is told apart from the fleet's private network: the one
        // the node gets in the tree it is written into, else a first node's.
        let placed = placed_in(args.out.as_deref().unwrap_or(Path::new("")), &name)?;
        node.found_openings(engine_published(), &placed.network)?
    };
    let found = Found {
        node: name,
        containers,
        files,
        openings,
        skipped,
        gaps,
    };
    if args.found_json {
        say!(
            "{}",
            serde_json::to_string(&found).map_err(Failure::system)?
        );
        return Ok(());
    }
    let out = args.out.as_deref().expect("--out or --found-json");
    let rules = secret_rules(state, out)?;
    let imported = written_into(
        out,
        &found,
        args.force,
        true,
        rules.as_ref(),
        &mesh_fleet::import::Varying::new(),
    )?;
    if let Some(v) = report(&found, out, &imported, args.json)? {
        say!("{v}");
    }
    Ok(())
}

/// Who may read a secret in the fleet's tree `out`, when its `secrets.ncl` says it: a file's
/// content that is not written in clear is then written encrypted to them. Read once for all
/// the nodes an import writes.
pub(crate) fn secret_rules(
    state: &std::path::Path,
    out: &std::path::Path,
) -> Result<Option<mesh_lib::secret::Rules>, Failure> {
    let rules_file = out.join(mesh_lib::secret::RULES_FILE);
    if !rules_file.is_file() {
        return Ok(None);
    }
    let tree = crate::secret::tree_at(state, &rules_file)?;
    crate::secret::rules(state, &tree).map(Some)
}

/// What an import wrote into the fleet's tree `out` from what was `found`: rendered beside the
/// catalogue there, written (refused, nothing written, where a file there says another thing,
/// unless `force`); a fleet file too when `fleet_file` and the folder has none.
pub(crate) fn written_into(
    out: &std::path::Path,
    found: &Found,
    force: bool,
    fleet_file: bool,
    rules: Option<&mesh_lib::secret::Rules>,
    varying: &mesh_fleet::import::Varying,
) -> Result<(Imported, Vec<std::path::PathBuf>), Failure> {
    let placed = placed_in(out, &found.node)?;
    let mut imported = render(
        &found.node,
        &found.containers,
        &found.files,
        &found.openings,
        &mesh_fleet::import::Tree {
            catalogue: &mesh_fleet::import::catalogue(out),
            secrets: rules,
            placed: &placed,
        },
        varying,
    );
    imported.private_network = Some(placed);
    mesh_fleet::import::keep_secrets_there(out, &mut imported);
    imported
        .gaps
        .extend(found.gaps.iter().map(|(k, v)| (k.clone(), v.clone())));
    // A folder that is no fleet yet becomes one: its declaration imports the catalogue beside it.
    if fleet_file && !out.join("fleet.ncl").exists() {
        imported
            .files
            .push(mesh_fleet::import::fleet_file(&found.node));
    }
    let written = write(out, &imported, force).map_err(|e| match e {
        mesh_fleet::import::WriteError::Exists(_) => Failure::new(
            Exit::Refused,
            miette::miette!(
                help = "--force writes over them",
                "{e}; nothing was written"
            ),
        ),
        mesh_fleet::import::WriteError::Outside(_) => {
            Failure::user(format!("{e}; nothing was written"))
        }
        other => Failure::system(other),
    })?;
    Ok((imported, written))
}

/// The private network `node` gets in the fleet's tree `out` (see `mesh_fleet::check::place`);
/// a range with no address left refused, nothing written.
fn placed_in(out: &Path, node: &str) -> Result<mesh_fleet::check::Placed, Failure> {
    mesh_fleet::check::place(out, node)
        .map_err(|e| Failure::new(Exit::Refused, miette::miette!("{e}; nothing was written")))
}

/// What an import did, said: the credentials not written and the gaps on stderr, then the
/// files written and the modules (shared, or the node's own) on stdout — or, with `json_out`,
/// nothing on stdout: its JSON object is returned.
pub(crate) fn report(
    found: &Found,
    out: &std::path::Path,
    (imported, written): &(Imported, Vec<std::path::PathBuf>),
    json_out: bool,
) -> Result<Option<serde_json::Value>, Failure> {
    let name = &found.node;
    for c in &imported.credentials {
        eprintln!(
            "credential not written: {}{} ({}); supply it in {}",
            mesh_lib::text::escape(&c.item),
            c.variable
                .as_deref()
                .map(|v| format!(" {v}"))
                .unwrap_or_default(),
            c.why,
            c.supply_in
        );
    }
    for w in &imported.secrets {
        eprintln!(
            "written encrypted: {}{} ({}) as {}, to {}",
            mesh_lib::text::escape(&w.item),
            w.variable
                .as_ref()
                .map(|v| format!(" {}", mesh_lib::text::escape(v)))
                .unwrap_or_default(),
            w.why,
            w.secret,
            w.readers.join(", ")
        );
    }
    for k in &imported.kept {
        eprintln!("kept as it is: {k} (a secret already in the fleet's tree; --check on the node compares it)");
    }
    for (container, gaps) in &imported.gaps {
        for g in gaps {
            eprintln!(
                "not declared: {} {}: {} ({})",
                mesh_lib::text::escape(container),
                g.what,
                mesh_lib::text::escape(&g.found),
                g.why
            );
        }
    }
    for s in &found.skipped {
        eprintln!(
            "compose file not imported: {} ({})",
            mesh_lib::text::escape(&s.path),
            s.why
        );
    }
    if json_out {
        let mut v = serde_json::to_value(imported).map_err(Failure::system)?;
        v["node"] = json!(name);
        v["written"] = json!(written);
        v["skipped"] = json!(found.skipped);
        return Ok(Some(v));
    } else {
        for w in written {
            say!("wrote {}", out.join(w).display());
        }
        if let Some(p) = &imported.private_network {
            say!(
                "private network of {name}: {} in {}{}: {}",
                p.network.address,
                p.network.range,
                if p.network.hub { ", the hub" } else { "" },
                p.why
            );
        }
        for m in &imported.shared {
            say!("shared {m}: catalogue/{m}.ncl says the same");
        }
        for m in &imported.parametrized {
            say!(
                "module {m}: each node passes what differs between the nodes that run it (values)"
            );
        }
        for (m, why) in &imported.renamed {
            say!("module {m} of {name}'s own: {why}");
        }
        say!(
            "{} module{} for {name}; check it: mesh import --check {}",
            imported.modules.len(),
            if imported.modules.len() == 1 { "" } else { "s" },
            out.join(format!("nodes/{name}.ncl")).display()
        );
    }
    Ok(None)
}

/// `paths` less the files larger than `limit` bytes under `root`, each of which is a gap in
/// `gaps` (its content is not read). A path that is no regular file is kept: reading it says so.
fn within_limit(
    root: &std::path::Path,
    paths: Vec<TargetPath>,
    limit: u64,
    gaps: &mut std::collections::BTreeMap<String, Vec<mesh_lib::import::Gap>>,
) -> Vec<TargetPath> {
    paths
        .into_iter()
        .filter(|p| {
            let at = root.join(p.as_str().trim_start_matches('/'));
            let size = std::fs::symlink_metadata(at)
                .ok()
                .filter(|m| m.file_type().is_file())
                .map(|m| m.len());
            match size {
                Some(size) if size > limit => {
                    gaps.insert(
                        p.to_string(),
                        vec![mesh_lib::import::Gap {
                            what: "content".into(),
                            found: format!("{size} bytes"),
                            why: format!("over --max-file-size ({limit} bytes): not copied into the fleet's repository; declare it by hand, or import it with a larger --max-file-size"),
                        }],
                    );
                    false
                }
                _ => true,
            }
        })
        .collect()
}

/// The containers `given` names on the engine: each a name, or a shell pattern (`*`, `?`,
/// `[…]`) matching names (the mesh's own and kept `.found` ones aside). A name not there, or a
/// pattern matching none, is bad input; a bad pattern too.
fn chosen(
    present: &std::collections::BTreeMap<String, mesh_containers::Present>,
    given: &[String],
) -> Result<Vec<String>, Failure> {
    let mut out = std::collections::BTreeSet::new();
    let mut none = Vec::new();
    for g in given {
        if !g.contains(['*', '?', '[']) {
            if present.contains_key(g.as_str()) {
                out.insert(g.clone());
            } else {
                none.push(mesh_lib::text::escape(g).into_owned());
            }
            continue;
        }
        let pattern = glob::Pattern::new(g).map_err(|e| {
            Failure::user(format!(
                "--container {}: not a pattern: {e}",
                mesh_lib::text::escape(g)
            ))
        })?;
        let matched: Vec<&String> = present
            .iter()
            .filter(|(n, p)| {
                !p.is_ours() && !n.ends_with(mesh_containers::FOUND_SUFFIX) && pattern.matches(n)
            })
            .map(|(n, _)| n)
            .collect();
        if matched.is_empty() {
            none.push(format!("matching {}", mesh_lib::text::escape(g)));
        }
        out.extend(matched.into_iter().cloned());
    }
    if !none.is_empty() {
        return Err(Failure::user(format!(
            "--container: no container {} on the engine; nothing was written",
            none.join(", ")
        )));
    }
    Ok(out.into_iter().collect())
}

/// The containers of the compose projects the files `compose` (absolute paths on the node)
/// started, and those `names` names; a file that started none is bad input.
fn of_compose_files(
    all: Vec<mesh_lib::import::LiveContainer>,
    compose: &[String],
    names: &[String],
    root: &std::path::Path,
) -> Result<Vec<mesh_lib::import::LiveContainer>, Failure> {
    let host = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    // Each container's compose files resolved once, whatever the number of files given.
    let started: Vec<(&str, Vec<std::path::PathBuf>)> = all
        .iter()
        .map(|c| {
            let files = c.compose_files().iter().map(|f| host(f)).collect();
            (c.name.as_str(), files)
        })
        .collect();
    let mut wanted = std::collections::BTreeSet::new();
    let mut started_none = Vec::new();
    for file in compose {
        let path =
            TargetPath::new(file).map_err(|e| Failure::user(format!("--compose {file}: {e}")))?;
        let at = host(&root.join(path.as_str().trim_start_matches('/')));
        let theirs: Vec<&str> = started
            .iter()
            .filter(|(_, files)| files.contains(&at))
            .map(|(name, _)| *name)
            .collect();
        if theirs.is_empty() {
            started_none.push(mesh_lib::text::escape(file).into_owned());
        }
        wanted.extend(theirs.into_iter().map(str::to_owned));
    }
    if !started_none.is_empty() {
        return Err(Failure::user(format!(
            "--compose: no container on the engine was started from {} (compose's labels name the files a project was started from); nothing was written",
            started_none.join(", ")
        )));
    }
    // A name not on the engine was refused before.
    wanted.extend(names.iter().cloned());
    Ok(all
        .into_iter()
        .filter(|c| wanted.contains(&c.name))
        .collect())
}

/// The files the containers' compose projects were started from — each compose file, the
/// environment files it names, the `.env` beside it — as declared paths; and those passed
/// over, each with why (not under the root, not a compose file's YAML).
fn compose_paths(
    containers: &[mesh_lib::import::LiveContainer],
    root: &std::path::Path,
) -> (Vec<TargetPath>, Vec<(String, String)>) {
    let mut wanted = std::collections::BTreeSet::new();
    let mut passed = Vec::new();
    let compose: std::collections::BTreeSet<std::path::PathBuf> =
        containers.iter().flat_map(|c| c.compose_files()).collect();
    let mut declared = |host: &std::path::Path, passed: &mut Vec<(String, String)>| {
        let shown = host.display().to_string();
        match mesh_lib::import::under_root(&shown, root).map(|p| TargetPath::new(&p)) {
            Some(Ok(p)) => {
                wanted.insert(p);
                true
            }
            Some(Err(e)) => {
                passed.push((shown, e.to_string()));
                false
            }
            None => {
                passed.push((shown, format!("not under the root {}", root.display())));
                false
            }
        }
    };
    for file in &compose {
        if !declared(file, &mut passed) {
            continue;
        }
        let folder = file.parent().unwrap_or(std::path::Path::new("/"));
        // One not there any more is said by live_files.
        if let Ok(text) = std::fs::read_to_string(file) {
            match mesh_lib::import::compose_env_files(&text, folder) {
                Ok(env_files) => {
                    for env in env_files {
                        declared(&env, &mut passed);
                    }
                }
                Err(e) => passed.push((
                    file.display().to_string(),
                    format!("its environment files not found: not a compose file's YAML: {e}"),
                )),
            }
        }
        let dotenv = folder.join(".env");
        if dotenv.is_file() {
            declared(&dotenv, &mut passed);
        }
    }
    (wanted.into_iter().collect(), passed)
}

/// The ports an engine says its containers publish, to name them; none without an engine.
fn engine_published() -> Vec<mesh_lib::import::Published> {
    match mesh_containers::Engine::connect() {
        Ok(engine) => engine.published().unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

fn check(
    machine: &Machine,
    decl: &std::path::Path,
    firewall: bool,
    json_out: bool,
) -> Result<(), Failure> {
    let node = Activator::inspect(&machine.state, &machine.root, machine.netns.clone())?;
    let record = node.record()?;
    let built = crate::activate::build_with(&machine.state, decl, record.as_ref())?;
    let mut checked = node.check_import(built.generation()?)?;
    if firewall {
        // The openings are judged as the flip will judge them: the declaration built managed.
        let name = built.generation()?.node.clone();
        let mut managed = record
            .clone()
            .unwrap_or_else(|| mesh_lib::record::NodeRecord::managed(name));
        managed.mode = mesh_lib::model::Mode::Managed;
        let flipped = crate::activate::build_with(&machine.state, decl, Some(&managed))?;
        checked.extend(node.check_openings(flipped.generation()?, engine_published())?);
    }
    let all_equal = checked.iter().all(|c| c.equal());
    if json_out {
        say!(
            "{}",
            json!({ "id": built.id, "equal": all_equal, "items": checked })
        );
    } else {
        for c in &checked {
            say!(
                "{:<12} {} {} (module {})",
                c.verdict,
                c.kind,
                mesh_lib::text::escape(&c.name),
                c.module
            );
            for d in &c.differences {
                say!(
                    "    {}: declared {}, found {}",
                    d.field,
                    mesh_lib::text::escape(&d.declared),
                    mesh_lib::text::escape(&d.found)
                );
            }
            for g in &c.gaps {
                say!(
                    "    not comparable: {} (found {}; {})",
                    g.what,
                    mesh_lib::text::escape(&g.found),
                    g.why
                );
            }
        }
    }
    if all_equal {
        Ok(())
    } else {
        let n = checked.iter().filter(|c| !c.equal()).count();
        Err(Failure::new(
            Exit::Refused,
            miette::miette!("{n} imported item(s) differ from what is on the machine"),
        ))
    }
}
