//! `mesh import`: the declaration of what a node runs, written from the machine (read-only), and
//! `mesh import --check`: a declaration compared, item by item, with what runs.

use mesh_activator::node::Node;
use mesh_fleet::import::{render, write, FileToImport};
use mesh_lib::TargetPath;
use serde_json::json;

use crate::activate::Machine;
use crate::cli::ImportArgs;
use crate::failure::{Exit, Failure};

pub fn import(machine: &Machine, args: ImportArgs) -> Result<(), Failure> {
    // What the user gave, checked before anything is read.
    let paths = args
        .file
        .iter()
        .map(|p| TargetPath::new(p).map_err(|e| Failure::user(format!("--file {p}: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(decl) = &args.check {
        return check(machine, decl, !args.no_firewall, args.json);
    }
    let Some(out) = &args.out else {
        return Err(Failure::user(
            "mesh import needs --out DIR (where the catalogue and the node's declaration go), or --check NODE.ncl",
        ));
    };
    let node = Node::inspect(&machine.state, &machine.root, machine.netns.clone())?;
    let name = match &args.node {
        Some(n) => n.clone(),
        None => std::fs::read_to_string(machine.root.join("etc/hostname"))
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .ok_or_else(|| {
                Failure::user("the node's name: give --node NAME (the root has no /etc/hostname)")
            })?,
    };
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
    let containers = if args.no_containers {
        Vec::new()
    } else {
        let docker = |e| Failure::from(mesh_activator::ActivateError::from(e));
        let engine = mesh_activator::docker::Engine::connect().map_err(docker)?;
        let present = engine.containers().map_err(docker)?;
        let unknown: Vec<&String> = args
            .container
            .iter()
            .filter(|n| !present.contains_key(n.as_str()))
            .collect();
        if !unknown.is_empty() {
            return Err(Failure::user(format!(
                "--container: no container {} on the engine; nothing was written",
                unknown
                    .iter()
                    .map(|n| mesh_lib::text::escape(n).into_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        mesh_activator::import::live_containers(&engine, &args.container, &machine.root)
            .map_err(docker)?
    };
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
    let openings = if args.no_firewall {
        Vec::new()
    } else {
        let (range, address) = mesh_fleet::import::PRIVATE_NETWORK;
        let private = mesh_lib::model::PrivateNetwork {
            range: range.parse().map_err(Failure::system)?,
            address: address.parse().map_err(Failure::system)?,
            hub: true,
        };
        node.found_openings(engine_published(), &private)?
    };
    let mut imported = render(&name, &containers, &files, &openings);
    // A folder that is no fleet yet becomes one: its declaration imports the catalogue beside it.
    if !out.join("fleet.ncl").exists() {
        imported.files.push(mesh_fleet::import::fleet_file(&name));
    }
    let written = write(out, &imported, args.force).map_err(|e| match e {
        mesh_fleet::import::WriteError::Exists(_) => Failure::new(
            Exit::Refused,
            miette::miette!(
                help = "--force writes over them",
                "{e}; nothing was written"
            ),
        ),
        other => Failure::system(other),
    })?;
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
    if args.json {
        let mut v = serde_json::to_value(&imported).map_err(Failure::system)?;
        v["node"] = json!(name);
        v["written"] = json!(written);
        say!("{v}");
    } else {
        for w in &written {
            say!("wrote {}", out.join(w).display());
        }
        say!(
            "{} module{} for {name}; check it: mesh import --check {}",
            imported.modules.len(),
            if imported.modules.len() == 1 { "" } else { "s" },
            out.join(format!("nodes/{name}.ncl")).display()
        );
    }
    Ok(())
}

/// The ports an engine says its containers publish, to name them; none without an engine.
fn engine_published() -> Vec<mesh_activator::docker::Published> {
    match mesh_activator::docker::Engine::connect() {
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
    let node = Node::inspect(&machine.state, &machine.root, machine.netns.clone())?;
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
                    "    not declared ({}): {} — {}",
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
