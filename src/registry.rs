//! `mesh push`, `mesh rollout` (the publisher's side) and `mesh pull`, `mesh follow` (the
//! node's side): presentation of what `mesh-registry`, `mesh-fleet` and the activator's
//! `deploy::pull` do.

use std::path::Path;
use std::time::Duration;

use mesh_registry::{Options, Registry, RegistryError};
use mesh_remote::deploy::health::Check;
use mesh_remote::deploy::pull::{self, PullResult, Pulled};
use serde_json::json;

use crate::cli::{FollowArgs, PruneArgs, PullArgs, PushArgs, RegistryOptions, RolloutArgs};
use crate::context::Machine;
use crate::context::Place;
use crate::failure::{Exit, Failure};

/// The registry `target`, as the options say to reach it.
pub fn connect(target: &str, options: &RegistryOptions) -> Result<Registry, Failure> {
    registry(target, options)
}

fn registry(target: &str, options: &RegistryOptions) -> Result<Registry, Failure> {
    Registry::new(
        target,
        &Options {
            insecure: options.insecure,
            timeout: Duration::from_secs(options.registry_timeout),
        },
    )
    .map_err(failure)
}

/// A registry's error as a failure: bad input (1); a refusal — what it holds does not check
/// out, or it denied access — (2); otherwise a failure of the system (3).
pub fn failure(e: RegistryError) -> Failure {
    match e {
        RegistryError::Reference(_) => Failure::user(e),
        RegistryError::Invalid { .. }
        | RegistryError::Mismatch { .. }
        | RegistryError::Denied { .. } => {
            Failure::text(Exit::Refused, format!("{e}; nothing was changed"))
        }
        _ => Failure::system(e),
    }
}

/// The registry `args` names, the fleet, and each selected node built (and signed) for it.
fn prepare(
    state: &Path,
    place: &Place,
    args: &crate::cli::PublishArgs,
) -> Result<
    (
        Registry,
        mesh_fleet::Fleet,
        Vec<mesh_fleet::publish::Prepared>,
        mesh_fleet::publish::Options,
    ),
    Failure,
> {
    let registry = registry(&args.target, &args.registry)?;
    let fleet = crate::context::load(state, place)?;
    let nodes = crate::context::select(&fleet, &args.fleet.nodes)?;
    crate::context::consistent(&fleet, state)?;
    let options = mesh_fleet::publish::Options {
        parallel: args.fleet.at_once.parallel as usize,
        state_dir: state.to_owned(),
        evaluator: crate::context::evaluator().clone(),
        signer: crate::context::signer(args.sign, &args.key)?,
        revision: args
            .revision
            .clone()
            .or_else(|| mesh_fleet::publish::revision_of(&fleet)),
        valid_for: args.valid_for.unwrap_or(fleet.valid_for),
    };
    if options.signer.is_none() {
        return Err(Failure::user(
            "a push signs: each node's tag carries a statement (this node, this generation, a \
             sequence, an expiry) that a signer it trusts signed now; give --sign (with --key, \
             or the ssh-agent's first key)",
        ));
    }
    let prepared = mesh_fleet::publish::prepare(&fleet, &nodes, &options, &registry);
    Ok((registry, fleet, prepared, options))
}

fn push_line(l: &mesh_fleet::publish::Pushed) -> String {
    match &l.error {
        Some(e) => format!("{:<20} FAILED: {e}", l.node),
        None => format!(
            "{:<20} {}  {} objects sent, {} there already, {} bytes{}",
            l.node,
            l.generation
                .map_or("-".to_owned(), |g| g.short().to_string()),
            l.sent.objects,
            l.sent.objects_reused,
            l.sent.bytes,
            if l.tag_moved {
                ", tag moved"
            } else {
                ", tag unchanged"
            }
        ),
    }
}

/// `mesh push`.
pub fn push(state: &Path, place: &Place, args: PushArgs) -> Result<(), Failure> {
    let args = args.publish;
    let (registry, _, prepared, _) = prepare(state, place, &args)?;
    let lines = mesh_fleet::publish::publish(&registry, &prepared, true);
    let total = mesh_fleet::publish::bytes(&lines);
    if args.fleet.json {
        say!(
            "{}",
            json!({ "registry": registry.name(), "nodes": lines, "bytes": total })
        );
    } else {
        for l in &lines {
            say!("{}", push_line(l));
        }
        say!("{} bytes sent to {}", total, registry.name());
    }
    let failed: Vec<&mesh_fleet::publish::Pushed> =
        lines.iter().filter(|l| l.error.is_some()).collect();
    if failed.is_empty() {
        return Ok(());
    }
    // A registry that denied access refuses the push, as it refuses a switch's image (exit 2).
    let exit = if failed.iter().any(|l| l.refused) {
        Exit::Refused
    } else {
        Exit::System
    };
    Err(Failure::text(
        exit,
        format!(
            "not published: {}",
            failed
                .iter()
                .map(|l| format!("{}: {}", l.node, l.error.as_deref().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    ))
}

/// `mesh prune`: the node tags' generations read into the publisher's store (it has most of
/// them already), then every object artifact none of them references deleted.
pub fn prune(state: &Path, args: &PruneArgs) -> Result<(), Failure> {
    let registry = registry(&args.target, &args.registry)?;
    let store = mesh_lib::Store::open(state).map_err(Failure::system)?;
    let pruned =
        mesh_registry::prune::prune(&registry, &store, args.dry_run).map_err(|e| match e {
            RegistryError::Reference(_) => Failure::user(e),
            RegistryError::Denied { .. } => {
                Failure::text(Exit::Refused, format!("{e}; the prune stopped"))
            }
            e => Failure::system(miette::miette!("{e}; the prune stopped")),
        })?;
    if args.json {
        say!(
            "{}",
            json!({ "registry": registry.name(), "pruned": pruned })
        );
        return Ok(());
    }
    let verb = if pruned.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    for tag in &pruned.removed {
        say!("{verb} {tag}");
    }
    for tag in &pruned.skipped {
        say!(
            "{}: names no generation (withdrawn, or not the mesh's): nothing kept for it",
            mesh_lib::text::escape(tag)
        );
    }
    say!(
        "{}: {} node tag(s) read, {} object(s) kept, {} {verb}",
        registry.name(),
        pruned.nodes.len(),
        pruned.kept,
        pruned.removed.len()
    );
    Ok(())
}

/// `mesh rollout`.
pub fn rollout(state: &Path, place: &Place, args: RolloutArgs) -> Result<(), Failure> {
    let (registry, fleet, prepared, options) = prepare(state, place, &args.publish)?;
    let failed: Vec<String> = prepared
        .iter()
        .filter_map(|p| p.result.as_ref().err().map(|e| format!("{}: {e}", p.node)))
        .collect();
    if !failed.is_empty() {
        return Err(Failure::user(format!(
            "nothing rolled out: {} node(s) cannot be published:\n  {}",
            failed.len(),
            failed.join("\n  ")
        )));
    }
    // Every object first, no tag moved: a wave then costs a manifest per node.
    for line in mesh_fleet::publish::publish(&registry, &prepared, false) {
        if let Some(e) = line.error {
            let exit = if line.refused {
                Exit::Refused
            } else {
                Exit::System
            };
            return Err(Failure::text(
                exit,
                format!("nothing rolled out: uploading {}'s objects: {e}", line.node),
            ));
        }
    }
    let nodes = crate::context::select(&fleet, &args.publish.fleet.nodes)?;
    let waves = mesh_fleet::rollout::waves(&fleet, &nodes).map_err(Failure::user)?;
    let json_out = args.publish.fleet.json;
    let reports = mesh_fleet::rollout::run(
        &fleet,
        &registry,
        &prepared,
        &waves,
        &mesh_fleet::rollout::Options {
            within: args.within.map(Duration::from_secs),
            every: Duration::from_secs(args.every),
            signer: options.signer.as_ref(),
            valid_for: options.valid_for,
        },
        &|r: &mesh_fleet::rollout::WaveReport| {
            if json_out {
                return;
            }
            say!(
                "wave {} ({}): {} in {:.1} s",
                r.wave.number,
                r.wave.nodes.join(", "),
                if r.healthy { "healthy" } else { "NOT HEALTHY" },
                r.seconds
            );
            for n in &r.nodes {
                say!(
                    "  {:<20} {}  {}",
                    n.node,
                    n.generation
                        .map_or("-".to_owned(), |g| g.short().to_string()),
                    n.said
                );
            }
        },
    );
    let stopped = reports.iter().find(|r| !r.healthy);
    let untouched: Vec<&str> = waves
        .iter()
        .skip(reports.len())
        .flat_map(|w| w.nodes.iter().map(String::as_str))
        .collect();
    if json_out {
        say!(
            "{}",
            json!({ "registry": registry.name(), "waves": reports, "untouched": untouched })
        );
    }
    match stopped {
        None => Ok(()),
        Some(r) => {
            let why: Vec<String> = r
                .nodes
                .iter()
                .filter(|n| !n.healthy)
                .map(|n| format!("{}: {}", n.node, n.said))
                .collect();
            Err(Failure::new(
                Exit::Refused,
                miette::miette!(
                    "the rollout stopped at wave {}: {}; {}, the tags of {} node(s) after it \
                     untouched{}",
                    r.wave.number,
                    why.join("; "),
                    match (r.not_put_back.is_empty(), r.withdrawn.is_empty()) {
                        (true, true) => "its tags were put back".to_owned(),
                        (true, false) => format!(
                            "its tags were put back, and withdrawn where they had named \
                             nothing before: {}",
                            r.withdrawn.join(", ")
                        ),
                        (false, _) => format!(
                            "its tags were put back{} but for: {}",
                            if r.withdrawn.is_empty() {
                                String::new()
                            } else {
                                format!(" (withdrawn: {})", r.withdrawn.join(", "))
                            },
                            r.not_put_back.join("; ")
                        ),
                    },
                    untouched.len(),
                    if untouched.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", untouched.join(", "))
                    }
                ),
            ))
        }
    }
}

/// `mesh pull`.
pub fn pull(machine: &Machine, args: &PullArgs) -> Result<(), Failure> {
    let pulled = pull_once(machine, args)?;
    report(&pulled, args.json);
    match pulled {
        Pulled::UpToDate(_) | Pulled::NotAgain(_) | Pulled::Withdrawn(_) | Pulled::Staged(..) => {
            Ok(())
        }
        Pulled::Busy(pid) => Err(Failure::new(
            Exit::Refused,
            miette::miette!("another mesh pull (pid {pid}) is running here: this one did nothing"),
        )),
        Pulled::Refused(why) => Err(Failure::new(
            Exit::Refused,
            miette::miette!("refused: {why}"),
        )),
        Pulled::Done(p) => match p.result {
            PullResult::Confirmed => Ok(()),
            PullResult::Reverted | PullResult::Refused => Err(Failure::new(
                Exit::Refused,
                miette::miette!(
                    "{} from {}: {}",
                    p.result.word(),
                    p.from,
                    p.reason.unwrap_or_default()
                ),
            )),
            PullResult::Failed | PullResult::Running => Err(Failure::system(format!(
                "the pull from {} failed: {}",
                p.from,
                p.reason.unwrap_or_default()
            ))),
        },
    }
}

fn report(pulled: &Pulled, json_out: bool) {
    match pulled {
        Pulled::Busy(pid) => {
            if json_out {
                say!("{}", json!({ "result": "busy", "pid": pid }));
            }
        }
        Pulled::Refused(why) => {
            if json_out {
                say!("{}", json!({ "result": "refused", "reason": why }));
            }
        }
        Pulled::Withdrawn(why) => {
            if json_out {
                say!("{}", json!({ "result": "withdrawn", "reason": why }));
            } else {
                say!("{why}: nothing to do");
            }
        }
        Pulled::UpToDate(id) => {
            if json_out {
                say!("{}", json!({ "result": "up-to-date", "generation": id }));
            } else {
                say!("{} is in force: nothing to do", id.short());
            }
        }
        Pulled::NotAgain(p) => {
            if json_out {
                say!("{}", json!({ "result": "not-again", "last_pull": p }));
            } else {
                say!(
                    "{} went back here at {} ({}): not tried again until the tag names another \
                     (or --retry)",
                    p.generation
                        .map_or("-".to_owned(), |g| g.short().to_string()),
                    p.at,
                    p.reason.as_deref().unwrap_or("")
                );
            }
        }
        Pulled::Staged(p, staged) => {
            if json_out {
                let mut v = serde_json::to_value(p).unwrap_or_default();
                v["result"] = json!("staged");
                v["staged"] = serde_json::to_value(staged).unwrap_or_default();
                say!("{v}");
            } else {
                say!(
                    "{} from {}: staged ({} objects, {} bytes fetched; {} image(s) fetched, {} present; {} secret(s) decrypted); nothing in force changed: `mesh pull` switches to it",
                    staged.id.short(),
                    p.from,
                    p.objects,
                    p.bytes,
                    staged.images.len(),
                    staged.present,
                    staged.secrets
                );
            }
        }
        Pulled::Done(p) => {
            if json_out {
                say!("{}", serde_json::to_string(p).unwrap_or_default());
            } else {
                say!(
                    "{} from {}: {} ({} objects, {} bytes fetched){}",
                    p.generation
                        .map_or("-".to_owned(), |g| g.short().to_string()),
                    p.from,
                    p.result.word(),
                    p.objects,
                    p.bytes,
                    p.reason
                        .as_deref()
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default()
                );
            }
        }
    }
}

fn pull_once(machine: &Machine, args: &PullArgs) -> Result<Pulled, Failure> {
    let mut checks: Vec<Check> = args.checks.iter().cloned().map(Check::Command).collect();
    for p in &args.probes {
        checks.push(Check::probe(p).map_err(Failure::user)?);
    }
    let registry = registry(&args.target, &args.registry)?;
    let guard = pull::Guard {
        checks,
        within: Duration::from_secs(args.health_within),
    };
    pull::pull(
        &crate::remote::place(machine),
        &crate::remote::Spawn(machine.clone()),
        &registry,
        &pull::Request {
            tag: args.node.as_deref(),
            retry: args.retry,
            guard: &guard,
            stage: args.stage,
        },
    )
    .map_err(|e| match e {
        pull::PullError::NoName => Failure::user(e),
        pull::PullError::Node(e) => e.into(),
        pull::PullError::Store(e) => e.into(),
        pull::PullError::Io(e) => Failure::system(e),
    })
}

/// `mesh follow`.
pub fn follow(machine: &Machine, args: &FollowArgs) -> Result<(), Failure> {
    if args.pull.stage {
        // A stage keeps no record of the tag it staged: every round would fetch and check the
        // whole generation again.
        return Err(Failure::user(
            "mesh follow --stage: a follow switches to what its tag names; stage with `mesh pull --stage`, then let `mesh follow` (or `mesh pull`) switch",
        ));
    }
    loop {
        match pull_once(machine, &args.pull) {
            Ok(Pulled::Refused(why)) if !args.pull.json => {
                eprintln!("pull: refused: {why}");
            }
            Ok(Pulled::Busy(pid)) if !args.pull.json => {
                eprintln!("pull: another mesh pull (pid {pid}) is running here: skipped");
            }
            Ok(pulled) => report(&pulled, args.pull.json),
            Err(e) => eprintln!("pull: {}", e.report_text()),
        }
        std::thread::sleep(Duration::from_secs(args.interval));
    }
}
