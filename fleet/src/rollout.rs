//! `mesh rollout`: the fleet's generations published to a registry, then the nodes' tags moved
//! wave after wave as the fleet file's `rollout` says (a canary, then more): after each wave,
//! its nodes — which pull by themselves (`mesh follow`) — are read over SSH (`mesh status`, as
//! `mesh fleet status` reads them) until each reports the new generation in force and its pull
//! confirmed. The first wave that does not get there within its time stops the rollout: its
//! nodes are named with why, its tags are put back where they were (a node that went back by
//! itself does not pull the generation again; a node not yet there does not get it) — a tag
//! that named nothing before is withdrawn (`mesh_registry::withdrawal`: it names no generation,
//! and a pull does nothing) — and the tags of the waves after it are never touched.

use std::time::{Duration, Instant};

use mesh_lib::GenerationId;
use mesh_registry::Registry;
use serde::Serialize;

use crate::file::{Fleet, Node};
use crate::publish::{Prepared, Pushed};
use crate::ssh::Link;

/// A wave of the rollout: its nodes' names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wave {
    /// Its number, from 1.
    pub number: usize,
    /// Its nodes.
    pub nodes: Vec<String>,
}

/// The waves of `nodes` as the fleet declares them, in order: a wave of names keeps the nodes
/// among `nodes`; a share (`"25%"`) takes that part of `nodes`, rounded up, in name order, from
/// those no earlier wave took and no wave names; the nodes left form one last wave. An empty
/// wave is dropped.
pub fn waves(fleet: &Fleet, nodes: &[&Node]) -> Result<Vec<Wave>, String> {
    use crate::file::WaveSpec;
    let mut chosen: Vec<String> = nodes.iter().map(|n| n.name.to_string()).collect();
    chosen.sort();
    chosen.dedup();
    let mut named = std::collections::BTreeSet::new();
    for spec in &fleet.rollout.waves {
        if let WaveSpec::Names(names) = spec {
            for n in names {
                if !fleet.nodes.keys().any(|k| k.as_str() == n.as_str()) {
                    return Err(format!(
                        "the rollout's waves name {}, which is not a node of {}",
                        mesh_lib::text::escape(n),
                        fleet.file.display()
                    ));
                }
                named.insert(n.clone());
            }
        }
    }
    let mut placed = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for spec in &fleet.rollout.waves {
        let wave: Vec<String> = match spec {
            WaveSpec::Names(names) => names
                .iter()
                .filter(|n| chosen.contains(n) && placed.insert((*n).clone()))
                .cloned()
                .collect(),
            WaveSpec::Share(percent) => {
                let count = (chosen.len() * usize::from(*percent)).div_ceil(100);
                let free: Vec<String> = chosen
                    .iter()
                    .filter(|n| !placed.contains(*n) && !named.contains(*n))
                    .take(count)
                    .cloned()
                    .collect();
                placed.extend(free.iter().cloned());
                free
            }
        };
        if !wave.is_empty() {
            out.push(wave);
        }
    }
    let rest: Vec<String> = chosen.into_iter().filter(|n| !placed.contains(n)).collect();
    if !rest.is_empty() {
        out.push(rest);
    }
    Ok(out
        .into_iter()
        .enumerate()
        .map(|(i, nodes)| Wave {
            number: i + 1,
            nodes,
        })
        .collect())
}

/// How one node of a wave stands.
#[derive(Debug, Clone, Serialize)]
pub struct NodeReport {
    /// The node.
    pub node: String,
    /// The generation it was to get.
    pub generation: Option<GenerationId>,
    /// Whether it reported it in force and its pull confirmed.
    pub healthy: bool,
    /// What it reported, or why it is not healthy.
    pub said: String,
}

/// How a wave went.
#[derive(Debug, Clone, Serialize)]
pub struct WaveReport {
    /// The wave.
    pub wave: Wave,
    /// Its nodes' lines of the push.
    pub pushed: Vec<Pushed>,
    /// Each node.
    pub nodes: Vec<NodeReport>,
    /// Whether every node got healthy.
    pub healthy: bool,
    /// The tags of an unhealthy wave that could not be put back where they were, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_put_back: Vec<String>,
    /// The tags of an unhealthy wave that named nothing before: withdrawn
    /// (`mesh_registry::withdrawal`), so that no node pulls the new generation through them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub withdrawn: Vec<String>,
    /// Seconds it took.
    pub seconds: f64,
}

/// How a node's pull of `target` stands, from its `mesh status --json`: `Some(Ok)` confirmed,
/// `Some(Err(why))` it will not get there (reverted, refused, failed), `None` not yet.
pub fn judge(status: &serde_json::Value, target: &GenerationId) -> Option<Result<String, String>> {
    let in_force = status["current"]["id"].as_str();
    let pull = &status["last_pull"];
    let pulled = pull["generation"].as_str() == Some(&target.to_string());
    let result = pull["result"].as_str().unwrap_or("");
    let reason = pull["reason"].as_str().unwrap_or("");
    let waiting = !status["current"]["waiting"].is_null();
    if pulled && result != "confirmed" && result != "running" {
        return Some(Err(format!("its pull was {result}: {reason}")));
    }
    // In force and no deploy waiting for it: confirmed (by its pull, or already there).
    if in_force == Some(&target.to_string()) && !waiting {
        return Some(Ok(format!("{} in force, confirmed", target.short())));
    }
    None
}

fn read_status(fleet: &Fleet, node: &Node) -> Result<serde_json::Value, String> {
    let mut link = Link::open(fleet, node).map_err(|e| e.to_string())?;
    let ran = link
        .mesh(&["status", "--json"], None)
        .map_err(|e| e.to_string())?;
    link.close();
    if !ran.ok() {
        return Err(format!("mesh status: {}", ran.stderr.trim()));
    }
    serde_json::from_slice(&ran.stdout).map_err(|e| format!("mesh status: {e}"))
}

/// Waits until each of `nodes` reports its `target` confirmed, or will not, or `within`
/// passed; polled every `every`.
pub fn wait_for(
    fleet: &Fleet,
    nodes: &[(&Node, Option<GenerationId>)],
    within: Duration,
    every: Duration,
) -> Vec<NodeReport> {
    let until = Instant::now() + within;
    crate::each(nodes, nodes.len().max(1), |(node, target)| {
        let mut report = NodeReport {
            node: node.name.to_string(),
            generation: *target,
            healthy: false,
            said: String::new(),
        };
        let Some(target) = target else {
            report.said = "it was not published".into();
            return report;
        };
        let mut last;
        loop {
            match read_status(fleet, node) {
                Ok(status) => match judge(&status, target) {
                    Some(Ok(said)) => {
                        report.healthy = true;
                        report.said = said;
                        return report;
                    }
                    Some(Err(why)) => {
                        report.said = why;
                        return report;
                    }
                    None => {
                        last = format!(
                            "in force: {}, last pull: {} {}",
                            status["current"]["id"].as_str().unwrap_or("none"),
                            status["last_pull"]["generation"].as_str().unwrap_or("none"),
                            status["last_pull"]["result"].as_str().unwrap_or("")
                        )
                    }
                },
                Err(e) => last = e,
            }
            if Instant::now() >= until {
                report.said = format!(
                    "did not report {} confirmed within {} s ({last})",
                    target.short(),
                    within.as_secs()
                );
                return report;
            }
            std::thread::sleep(every);
        }
    })
}

/// What a rollout needs beyond the fleet.
pub struct Options<'a> {
    /// How long each wave has; `None`: the fleet file's.
    pub within: Option<Duration>,
    /// How often a wave's nodes are read.
    pub every: Duration,
    /// Signs the statements that put a stopped wave's tags back (`None`: they stay).
    pub signer: Option<&'a crate::sign::Signer>,
    /// How long those statements hold.
    pub valid_for: Duration,
}

/// Puts node `tag` back where `before` had it, with a new statement (a sequence above the one
/// the wave's push signed, `pushed`): the generation it named before, or withdrawn when it
/// named none. `Ok(true)`: withdrawn.
fn put_back(
    registry: &Registry,
    tag: &str,
    before: Option<&mesh_registry::Artifact>,
    pushed: Option<u64>,
    options: &Options<'_>,
) -> Result<bool, String> {
    let signer = options
        .signer
        .ok_or("no key to sign a statement that puts it back")?;
    let highest = pushed.max(before.and_then(crate::publish::sequence_of));
    let statement = signer
        .state(
            tag,
            before.map(|a| a.generation),
            highest,
            options.valid_for,
        )
        .map_err(|e| format!("signing the statement that puts it back: {e}"))?;
    match before {
        Some(a) => registry
            .restate(tag, a, &statement)
            .map(|()| false)
            .map_err(|e| e.to_string()),
        None => registry
            .withdraw(tag, &statement)
            .map(|()| true)
            .map_err(|e| e.to_string()),
    }
}

/// Moves the tags of `prepared` (uploaded already) wave after wave: each wave's report, the
/// last one unhealthy if the rollout stopped there. `on_wave` is told each as it ends.
pub fn run(
    fleet: &Fleet,
    registry: &Registry,
    prepared: &[Prepared],
    waves: &[Wave],
    options: &Options<'_>,
    on_wave: &dyn Fn(&WaveReport),
) -> Vec<WaveReport> {
    let within = options
        .within
        .unwrap_or(Duration::from_secs(fleet.rollout.within));
    let mut out = Vec::new();
    for wave in waves {
        let started = Instant::now();
        let mine: Vec<&Prepared> = prepared
            .iter()
            .filter(|p| wave.nodes.contains(&p.node))
            .collect();
        // What the tags named before, to put back if the wave does not get healthy.
        let before: Vec<(String, Option<mesh_registry::Artifact>)> = mine
            .iter()
            .map(|p| (p.node.clone(), registry.artifact(&p.node).ok()))
            .collect();
        let owned: Vec<Prepared> = mine
            .iter()
            .map(|p| Prepared {
                node: p.node.clone(),
                result: match &p.result {
                    Ok((id, publication)) => Ok((*id, publication.clone())),
                    Err(e) => Err(e.clone()),
                },
            })
            .collect();
        let pushed = crate::publish::publish(registry, &owned, true);
        let targets: Vec<(&Node, Option<GenerationId>)> = wave
            .nodes
            .iter()
            .filter_map(|n| fleet.nodes.iter().find(|(k, _)| k.as_str() == n.as_str()))
            .map(|(_, node)| {
                let line = pushed.iter().find(|l| l.node == node.name.as_str());
                let id = line
                    .filter(|l| l.error.is_none())
                    .and_then(|l| l.generation);
                (node, id)
            })
            .collect();
        let nodes = wait_for(fleet, &targets, within, options.every);
        let healthy = nodes.iter().all(|n| n.healthy);
        let (mut not_put_back, mut withdrawn) = (Vec::new(), Vec::new());
        if !healthy {
            for (tag, artifact) in &before {
                let moved = pushed.iter().any(|l| l.node == *tag && l.tag_moved);
                if !moved {
                    continue;
                }
                // The statement the push signed for it: what the put-back must pass.
                let signed = mine
                    .iter()
                    .find(|p| p.node == *tag)
                    .and_then(|p| p.result.as_ref().ok())
                    .and_then(|(_, publication)| publication.statement.as_ref())
                    .and_then(|s| mesh_lib::statement::Statement::parse(&s.statement).ok())
                    .map(|s| s.sequence);
                match put_back(registry, tag, artifact.as_ref(), signed, options) {
                    Ok(true) => withdrawn.push(tag.clone()),
                    Ok(false) => {}
                    Err(e) if artifact.is_none() => not_put_back.push(format!(
                        "{tag}: it named nothing before, and could not be withdrawn: {e}; \
                         it still names the new generation"
                    )),
                    Err(e) => not_put_back.push(format!("{tag}: {e}")),
                }
            }
        }
        let report = WaveReport {
            wave: wave.clone(),
            pushed,
            nodes,
            healthy,
            not_put_back,
            withdrawn,
            seconds: started.elapsed().as_secs_f64(),
        };
        on_wave(&report);
        out.push(report);
        if !healthy {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node is healthy once the generation is in force with no deploy waiting for it; not
    /// while it waits; never once its pull of that generation went back or was refused.
    #[test]
    fn a_node_is_judged_by_what_it_reports() {
        let target = GenerationId::of(b"new");
        let old = GenerationId::of(b"old");
        let status = |in_force: &GenerationId, waiting: bool, pull: serde_json::Value| {
            serde_json::json!({
                "current": { "id": in_force.to_string(), "waiting": if waiting { serde_json::json!({}) } else { serde_json::Value::Null } },
                "last_pull": pull,
            })
        };
        let pulled = |result: &str| serde_json::json!({ "generation": target.to_string(), "result": result, "reason": "a check failed" });
        assert!(judge(&status(&old, false, serde_json::Value::Null), &target).is_none());
        assert!(judge(&status(&target, true, pulled("confirmed")), &target).is_none());
        assert!(
            judge(&status(&old, false, pulled("running")), &target).is_none(),
            "a pull under way: not yet"
        );
        assert!(matches!(
            judge(&status(&target, false, pulled("confirmed")), &target),
            Some(Ok(_))
        ));
        let why = judge(&status(&old, false, pulled("reverted")), &target)
            .unwrap()
            .unwrap_err();
        assert!(why.contains("reverted: a check failed"), "{why}");
    }

    fn fleet_with(waves: &str) -> Result<(tempfile::TempDir, Fleet), String> {
        let dir = tempfile::tempdir().unwrap();
        let nodes: String = (0..8)
            .map(|i| format!("    n{i} = {{ declaration = \"n{i}.ncl\", ssh = {{ destination = \"n{i}\" }} }},\n"))
            .collect();
        let file = dir.path().join("fleet.ncl");
        std::fs::write(
            &file,
            format!(
                "let mesh = import \"mesh.ncl\" in\nmesh.fleet {{\n  rollout = {{ waves = {waves} }},\n  nodes = {{\n{nodes}  }},\n}}\n"
            ),
        )
        .unwrap();
        let state = dir.path().join("state");
        let fleet = Fleet::load(&file, &state, None).map_err(|e| format!("{e:?}"))?;
        Ok((dir, fleet))
    }

    fn names(waves: &[Wave]) -> Vec<Vec<&str>> {
        waves
            .iter()
            .map(|w| w.nodes.iter().map(String::as_str).collect())
            .collect()
    }

    /// A share takes its part of the nodes rolled out, rounded up, in name order, leaving the
    /// nodes a later wave names to that wave; the nodes left form the last wave.
    #[test]
    fn waves_by_name_and_by_share() {
        let (_dir, fleet) = fleet_with(r#"[["n7"], "25%", "50%", ["n2"]]"#).unwrap();
        let all: Vec<&Node> = fleet.nodes.values().collect();
        assert_eq!(
            names(&waves(&fleet, &all).unwrap()),
            vec![
                vec!["n7"],
                vec!["n0", "n1"],
                vec!["n3", "n4", "n5", "n6"],
                vec!["n2"]
            ]
        );
        // Of three nodes rolled out, 25% is one.
        let some: Vec<&Node> = all
            .iter()
            .copied()
            .filter(|n| n.name.as_str() < "n3")
            .collect();
        assert_eq!(
            names(&waves(&fleet, &some).unwrap()),
            vec![vec!["n0"], vec!["n1"], vec!["n2"]]
        );
        let (_dir, fleet) = fleet_with(r#"["100%"]"#).unwrap();
        let all: Vec<&Node> = fleet.nodes.values().collect();
        assert_eq!(waves(&fleet, &all).unwrap().len(), 1);
    }

    /// A share out of 1–100%, or a wave that is neither names nor a share, is refused with
    /// what to write.
    #[test]
    fn a_wave_that_is_not_one_is_refused() {
        for bad in [r#"["0%"]"#, r#"["120%"]"#, r#"["quarter"]"#, r#"[[""]]"#] {
            let e = fleet_with(bad).map(|_| ()).unwrap_err();
            assert!(e.contains("not a wave"), "{bad}: {e}");
        }
    }
}
