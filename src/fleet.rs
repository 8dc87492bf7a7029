//! `mesh fleet build|records|status` and `mesh deploy`: presentation of what the `mesh-fleet`
//! crate does.

use std::path::{Path, PathBuf};

use mesh_fleet::deploy::{Options, Outcome};
use mesh_fleet::progress::Progress;
use serde_json::json;

use crate::cli::{DeployArgs, FleetArgs, FleetBuildArgs, FleetImportArgs, FleetStatusArgs};
use crate::context::{load, select, signer, Place};
use crate::failure::{Exit, Failure};

fn short(id: Option<&mesh_lib::GenerationId>) -> String {
    id.map_or("-".to_owned(), |i| i.short().to_string())
}

/// `mesh fleet import`: each node's `mesh import --found-json` over SSH, one node after the
/// other, rendered beside the fleet's catalogue (a module it has, saying the same, shared) and
/// written into the fleet's tree. A node that cannot be read is named and the others still
/// imported; the command then exits 3.
pub fn import(state: &Path, place: &Place, args: FleetImportArgs) -> Result<(), Failure> {
    let fleet = load(state, place)?;
    let nodes = select(&fleet, &args.nodes)?;
    let tree = place.tree.clone().unwrap_or_else(|| {
        fleet
            .file
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    });
    let selection = args.what.to_args();
    let mut failed = Vec::new();
    let mut imported = Vec::new();
    // Every node read first: what several of them run alike but for names and environment
    // values is then one module, each node's own passed by its declaration.
    let mut reached = Vec::new();
    for node in nodes {
        match mesh_fleet::import::fetch(&fleet, node, &selection) {
            Ok(found) => reached.push((node, found)),
            Err(e) => {
                eprintln!("{}: {e}", node.name);
                failed.push(json!({ "node": node.name.to_string(), "problem": e.to_string() }));
            }
        }
    }
    let founds: Vec<&mesh_fleet::import::Found> = reached.iter().map(|(_, f)| f).collect();
    let varying = mesh_fleet::import::varying(&founds);
    let rules = crate::import::secret_rules(state, &tree)?;
    for (node, found) in reached {
        let done = crate::import::written_into(
            &tree,
            &found,
            args.force,
            false,
            rules.as_ref(),
            &varying,
        )?;
        let declared = tree.join(format!("nodes/{}.ncl", node.name));
        if node.declaration != declared {
            eprintln!(
                "{}: the fleet file names {} as its declaration; the import wrote {}",
                node.name,
                node.declaration.display(),
                declared.display()
            );
        }
        imported.extend(crate::import::report(&found, &tree, &done, args.json)?);
    }
    if args.json {
        say!("{}", json!({ "nodes": imported, "failed": failed }));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        let names: Vec<&str> = failed.iter().filter_map(|f| f["node"].as_str()).collect();
        Err(Failure::new(
            Exit::System,
            miette::miette!("not imported: {}", names.join(", ")),
        ))
    }
}

/// `mesh fleet build`.
pub fn build(state: &Path, place: &Place, args: FleetBuildArgs) -> Result<(), Failure> {
    let fleet = load(state, place)?;
    let nodes = select(&fleet, &args.fleet.nodes)?;
    let expected = match &args.check {
        Some(file) => Some(expected_ids(file)?),
        None => None,
    };
    // A node refused (--locked, --check) is kept nowhere, and no id is printed for it.
    let keep_if = |n: &mesh_fleet::Node| mesh_compiler::KeepIf {
        pinned: args.locked,
        id: expected
            .as_ref()
            .and_then(|e| e.get(n.name.as_str()).copied()),
        never: expected
            .as_ref()
            .is_some_and(|e| !e.contains_key(n.name.as_str())),
    };
    let built = mesh_fleet::build::all_kept_if(
        &fleet,
        &nodes,
        state,
        crate::context::evaluator(),
        args.fleet.at_once.parallel as usize,
        &keep_if,
    );
    let signer = signer(args.sign, &args.key)?;
    let store = match &signer {
        Some(_) => Some(mesh_lib::Store::open(state)?),
        None => None,
    };
    let mut failed = Vec::new();
    let mut differ = Vec::new();
    let mut unlocked = Vec::new();
    let mut rows = Vec::new();
    for b in &built {
        let want = expected.as_ref().and_then(|e| e.get(&b.node));
        // Refused: it names an image by a tag alone under --locked, or builds to another id
        // than --check's. (Its build was kept only if it was in the store already.)
        let mut refused = false;
        if let (true, Ok(g)) = (args.locked, &b.result) {
            for (name, image) in g.unpinned()? {
                unlocked.push((format!("{}/{name}", b.node), image));
                refused = true;
            }
        }
        if let (true, Ok(g)) = (expected.is_some(), &b.result) {
            refused |= want != Some(&g.id);
        }
        if let (Some(signer), Some(store), Ok(g)) = (&signer, &store, &b.result) {
            if refused {
                continue;
            }
            signer
                .sign_into(store, &g.id)
                .map_err(|e| Failure::user(format!("signing {}: {e}", b.node)))?;
        }
        match &b.result {
            Ok(g) => {
                if expected.is_some() && want != Some(&g.id) {
                    differ.push(format!(
                        "{}: builds to {}, expected {}",
                        b.node,
                        g.id,
                        want.map_or("no id (not in the file)".to_owned(), |w| w.to_string())
                    ));
                }
                if refused {
                    rows.push(json!({ "node": b.node, "refused": true }));
                    if !args.fleet.json {
                        say!("{:<20} REFUSED (see below)", b.node);
                    }
                    continue;
                }
                rows.push(json!({ "node": b.node, "id": g.id, "cached": g.cached }));
                if !args.fleet.json {
                    say!("{:<20} {}", b.node, g.id);
                }
            }
            Err(e) => {
                rows.push(json!({ "node": b.node, "error": e.to_string() }));
                if !args.fleet.json {
                    say!("{:<20} FAILED: {e}", b.node);
                }
                failed.push((b.node.clone(), e.to_string()));
            }
        }
    }
    if args.fleet.json {
        say!("{}", json!({ "nodes": rows, "differ": differ }));
    }
    if !failed.is_empty() {
        let text: Vec<String> = failed.iter().map(|(n, e)| format!("{n}: {e}")).collect();
        return Err(Failure::user(format!(
            "{} node(s) did not build:\n  {}",
            failed.len(),
            text.join("\n  ")
        )));
    }
    crate::images::refuse_unpinned("the fleet", &unlocked)?;
    if !differ.is_empty() {
        return Err(Failure::new(
            Exit::Refused,
            miette::miette!(
                help = "if the change is deliberate, commit the new ids",
                "{} node(s) build to another id than expected (nothing was kept of them):\n  {}",
                differ.len(),
                differ.join("\n  ")
            ),
        ));
    }
    // Checked once every node is as asked: the builds it reads are those kept above.
    crate::context::consistent(&fleet, state)
}

/// A file of `NODE ID` lines.
fn expected_ids(
    file: &Path,
) -> Result<std::collections::BTreeMap<String, mesh_lib::GenerationId>, Failure> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::user(format!("{}: {e}", file.display())))?;
    let mut out = std::collections::BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        // `NODE ID`, or `NODE RECORD ID` as examples/ci/ids.txt has it.
        let (node, id) = match words.as_slice() {
            [node, id] | [node, _, id] => (node, id),
            _ => {
                return Err(Failure::user(format!(
                    "{}:{}: write `NODE ID`",
                    file.display(),
                    i + 1
                )))
            }
        };
        let id = id
            .parse()
            .map_err(|e| Failure::user(format!("{}:{}: {e}", file.display(), i + 1)))?;
        out.insert((*node).to_owned(), id);
    }
    Ok(out)
}

/// `mesh fleet records`.
pub fn records(state: &Path, place: &Place, args: FleetArgs) -> Result<(), Failure> {
    let fleet = load(state, place)?;
    let nodes = select(&fleet, &args.nodes)?;
    let fetched = mesh_fleet::each(&nodes, args.at_once.parallel as usize, |n| {
        mesh_fleet::status::fetch_record(&fleet, n)
    });
    if args.json {
        say!("{}", json!({ "records": fleet.records, "nodes": fetched }));
    } else {
        for f in &fetched {
            say!("{:<20} {}", f.node, f.result);
        }
    }
    let failed: Vec<&str> = fetched
        .iter()
        .filter(|f| f.result.starts_with("failed"))
        .map(|f| f.node.as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure::system(format!(
            "no record fetched from: {}",
            failed.join(", ")
        )))
    }
}

/// `mesh fleet status`.
pub fn status(state: &Path, place: &Place, status_args: FleetStatusArgs) -> Result<(), Failure> {
    let args = &status_args.fleet;
    let fleet = load(state, place)?;
    let nodes = select(&fleet, &args.nodes)?;
    let evaluator = crate::context::evaluator();
    let mut lines = mesh_fleet::each(&nodes, args.at_once.parallel as usize, |n| {
        mesh_fleet::status::line(&fleet, n, state, evaluator)
    });
    if let Some(target) = &status_args.registry {
        let registry = crate::registry::connect(target, &status_args.registry_options)?;
        for l in &mut lines {
            let statement = match registry.artifact(&l.node) {
                Ok(a) => {
                    l.desired = Some(a.generation);
                    a.statement()
                }
                Err(mesh_registry::RegistryError::NoTag(_)) => None,
                Err(mesh_registry::RegistryError::Withdrawn { statement, .. }) => {
                    l.withdrawn = true;
                    statement.as_deref().map(mesh_registry::parse_statement)
                }
                // Denied: in the words, and with the exit, of every other path.
                Err(e @ mesh_registry::RegistryError::Denied { .. }) => {
                    return Err(crate::registry::failure(e))
                }
                Err(e) => return Err(Failure::system(e)),
            };
            l.tag_statement = Some(match statement {
                None => json!({ "problem": "no statement: a node refuses it" }),
                Some(Err(why)) => json!({ "problem": why }),
                Some(Ok(signed)) => {
                    match mesh_lib::statement::Statement::parse(&signed.statement) {
                        Ok(s) => json!({
                            "sequence": s.sequence,
                            "expires": s.expires_stamp(),
                            "expired": s.expired(std::time::SystemTime::now()),
                        }),
                        Err(e) => json!({ "problem": e.to_string() }),
                    }
                }
            });
        }
    }
    if args.json {
        say!("{}", json!({ "nodes": lines }));
        return Ok(());
    }
    say!(
        "{:<16} {:<11} {:<8} {:<16} {:<9} {:<22} {:<7} {:<9} {}",
        "node",
        "reachable",
        "mode",
        "generation",
        "fleet's",
        "modules taken/held",
        "drift",
        "firewall",
        "secrets"
    );
    for l in &lines {
        let secrets = match &l.secrets {
            None => "-".to_owned(),
            Some(s) if s.readable => "readable".to_owned(),
            Some(s) if s.problem.is_some() => "NO KEY".to_owned(),
            Some(s) => format!("{} NOT readable", s.unreadable.len()),
        };
        let expired = l
            .statement
            .as_ref()
            .filter(|s| s["expired"] == true)
            .map(|s| {
                format!(
                    "STATEMENT EXPIRED at {}: nothing newer reached it",
                    s["expires"].as_str().unwrap_or("?")
                )
            });
        let problem = l
            .problem
            .clone()
            .into_iter()
            .chain(expired)
            .chain(l.secrets.as_ref().and_then(|s| {
                if let Some(p) = &s.problem {
                    Some(format!("its host key: {p}"))
                } else if s.unreadable.is_empty() {
                    None
                } else {
                    Some(format!(
                        "not encrypted to its host key: {} (run `mesh secret rekey`)",
                        s.unreadable.join(", ")
                    ))
                }
            }))
            .collect::<Vec<_>>();
        say!(
            "{:<16} {:<11} {:<8} {:<16} {:<9} {:<22} {:<7} {:<9} {}{}",
            l.node,
            if l.reachable { "yes" } else { "NO" },
            l.mode.as_deref().unwrap_or("-"),
            short(l.current.as_ref()),
            match (l.current, l.built) {
                (Some(_), Some(_)) if l.up_to_date() => "yes",
                _ if l.foreign => "foreign",
                (_, Some(_)) => "NO",
                _ => "-",
            },
            format!("{}/{}", l.taken.len(), l.not_taken.len()),
            l.drifted_files.map_or("-".into(), |d| d.to_string()),
            match l.firewall_in_force {
                Some(true) => "in force",
                Some(false) => "DRIFTED",
                None => "-",
            },
            secrets,
            if problem.is_empty() {
                String::new()
            } else {
                format!("  ({})", problem.join("; "))
            }
        );
        if l.desired.is_some() || l.withdrawn || l.last_pull.is_some() {
            let p = l.last_pull.clone().unwrap_or_default();
            let text = |k: &str| p[k].as_str().unwrap_or("-").to_owned();
            let pulled = p["generation"]
                .as_str()
                .and_then(|g| g.parse::<mesh_lib::GenerationId>().ok());
            let stated = l.tag_statement.as_ref().map_or(String::new(), |s| {
                match (s["expires"].as_str(), s["expired"].as_bool()) {
                    (Some(at), Some(true)) => format!(" (its statement EXPIRED at {at})"),
                    (Some(at), _) => format!(" (stated until {at})"),
                    _ => format!(
                        " (its statement: {})",
                        mesh_lib::text::escape(s["problem"].as_str().unwrap_or("-"))
                    ),
                }
            });
            say!(
                "{:<16} desired {}{stated}, in force {}, last pull: {} {} at {}{}",
                "",
                if l.withdrawn {
                    "withdrawn".to_owned()
                } else {
                    short(l.desired.as_ref())
                },
                short(l.current.as_ref()),
                short(pulled.as_ref()),
                text("result"),
                text("at"),
                p["reason"]
                    .as_str()
                    .map(|r| format!(" ({})", mesh_lib::text::escape(r)))
                    .unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// `mesh deploy`.
pub fn deploy(state: &Path, place: &Place, args: DeployArgs) -> Result<(), Failure> {
    let fleet = load(state, place)?;
    let nodes = select(&fleet, &args.nodes)?;
    crate::context::consistent(&fleet, state)?;
    let options = Options {
        parallel: args.at_once.parallel as usize,
        confirm_within: args.confirm_timeout,
        dry_run: args.dry_run,
        state_dir: state.to_owned(),
        evaluator: crate::context::evaluator().clone(),
        io_timeout: std::time::Duration::from_secs(args.io_timeout),
        replace_foreign: args.replace_foreign,
        signer: signer(args.sign, &args.key)?,
        valid_for: args.valid_for.unwrap_or(fleet.valid_for),
        stage: args.stage,
    };
    let progress = Progress::new(args.json);
    let rows = mesh_fleet::deploy::run(&fleet, &nodes, &options, &progress);
    if args.json {
        say!("{}", json!({ "nodes": rows }));
    } else {
        say!(
            "{:<16} {:<35} {:<46} {:<16} {:>7}  {}",
            "node",
            "from -> to",
            "changed",
            "result",
            "time",
            "sent"
        );
        for r in &rows {
            let staged = r.staged.as_ref().map(|s| {
                format!(
                    "nothing (images {} fetched, {} present)",
                    s["images"].as_array().map_or(0, Vec::len),
                    s["present"].as_u64().unwrap_or(0)
                )
            });
            let changed = staged
                .or_else(|| {
                    r.changed.as_ref().map(|c| {
                        format!(
                            "files {}, firewall {}, units {}, containers {}",
                            c["files"].as_u64().unwrap_or(0),
                            if c["firewall"] == true { "yes" } else { "no" },
                            c["units"].as_u64().unwrap_or(0),
                            c["containers"].as_u64().unwrap_or(0)
                        )
                    })
                })
                .unwrap_or_else(|| "-".to_owned());
            say!(
                "{:<16} {:<35} {:<46} {:<16} {:>6.1}s  {} object(s), {} bytes received{}",
                r.node,
                format!("{} -> {}", short(r.from.as_ref()), short(r.to.as_ref())),
                changed,
                r.result.word(),
                r.seconds,
                r.objects_sent,
                r.bytes_received,
                r.reason
                    .as_deref()
                    .map(|p| format!("\n{:<16} {p}", ""))
                    .unwrap_or_default()
            );
        }
    }
    let not_ok: Vec<&mesh_fleet::deploy::Row> = rows.iter().filter(|r| !r.result.ok()).collect();
    if not_ok.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = not_ok
        .iter()
        .map(|r| format!("{} ({})", r.node, r.result.word()))
        .collect();
    let refusals = not_ok.iter().all(|r| {
        matches!(
            r.result,
            Outcome::Reverted | Outcome::HostKeyRefused | Outcome::Foreign | Outcome::Refused
        )
    });
    let message = format!(
        "{} of {} node(s) did not end as {}: {}",
        not_ok.len(),
        rows.len(),
        if args.stage { "staged" } else { "deployed" },
        names.join(", ")
    );
    Err(if refusals {
        Failure::new(Exit::Refused, miette::miette!("{message}"))
    } else {
        Failure::system(message)
    })
}

/// `mesh sign ID…`.
pub fn sign(state: &Path, args: crate::cli::SignArgs) -> Result<(), Failure> {
    let store = mesh_lib::Store::open(state)?;
    let ids: Vec<mesh_lib::GenerationId> = args
        .ids
        .iter()
        .map(|t| store.resolve_generation(t))
        .collect::<Result<_, _>>()?;
    let signer = mesh_fleet::sign::Signer::new(args.key.key.as_deref()).map_err(Failure::user)?;
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::user(format!("{}: {e}", dir.display())))?;
    }
    let mut rows = Vec::new();
    for id in ids {
        let signature = signer
            .sign_into(&store, &id)
            .map_err(|e| Failure::user(format!("signing {id}: {e}")))?;
        if let Some(dir) = &args.out {
            let path = dir.join(format!("{}.sig", id.hex()));
            std::fs::write(&path, signature.armored())
                .map_err(|e| Failure::system(format!("{}: {e}", path.display())))?;
        }
        if !args.json {
            say!("signed {id} with {}", signature.fingerprint());
        }
        rows.push(json!({ "id": id, "key": signature.fingerprint() }));
    }
    if args.json {
        say!("{}", json!({ "signed": rows }));
    }
    Ok(())
}
