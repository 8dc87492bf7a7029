//! The iptables-nft driver: a found firewall made by the `iptables` command on its nft backend,
//! as ufw and most scripts make it. Its tables are spoken through `iptables`/`ip6tables`
//! (`iptables-nft-save` to list, `iptables-nft-restore --noflush` batches to change), never
//! edited with nft:
//! iptables-nft owns its tables' layout, and only iptables can load them back in a form iptables
//! still speaks.

use std::collections::BTreeSet;

use mesh_lib::firewall::opening_comment;
use mesh_lib::model::{Source, TrafficPath};
use serde_json::Value;

use super::dump::is_iptables_table;
use super::nft::Nft;
use super::{Dump, FirewallError, FoundChain, Want, MARK};

/// The two families iptables-nft writes.
const FAMILIES: [&str; 2] = ["ip", "ip6"];

/// Which iptables: on its nft backend, or legacy (x_tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Nft,
    Legacy,
}

/// The iptables-nft tool for `family` (`ip` or `ip6`); `-save` and `-restore` follow its name.
fn tool(family: &str) -> &'static str {
    tool_of(Backend::Nft, family)
}

/// The tool of `backend` for `family` (`ip` or `ip6`); `-save` and `-restore` follow its name.
fn tool_of(backend: Backend, family: &str) -> &'static str {
    match (backend, family == "ip6") {
        (Backend::Nft, false) => "iptables-nft",
        (Backend::Nft, true) => "ip6tables-nft",
        (Backend::Legacy, false) => "iptables-legacy",
        (Backend::Legacy, true) => "ip6tables-legacy",
    }
}

pub use super::dump::LEGACY;

/// The comment of an `iptables -S` line, unquoted.
fn comment_of(line: &str) -> Option<String> {
    let rest = &line[line.find("--comment ")? + "--comment ".len()..];
    if let Some(quoted) = rest.strip_prefix('"') {
        Some(quoted[..quoted.find('"')?].to_owned())
    } else {
        Some(rest.split_whitespace().next()?.to_owned())
    }
}

/// A chain made by `iptables` on its nft backend: its table is one of iptables' and its name in
/// iptables' capitals.
pub fn speaks(chain: &FoundChain) -> bool {
    is_iptables_table(&chain.family, &chain.table)
        && chain
            .name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c == '_' || c == '-')
}

/// What `iptables-nft-save` prints for `family` (`ip` or `ip6`): the form iptables loads back.
pub fn save(nft: &Nft, family: &str) -> Result<String, FirewallError> {
    nft.run_tool(&format!("{}-save", tool(family)), &[], None, "saving")
}

/// Converges the openings through iptables-nft's INPUT and FORWARD chains of each family; first
/// empties the predecessor's INPUT where `want` says so (the flip, beside a container runtime).
/// With `apply` false, only works out what it would change. Returns (inserted, removed,
/// emptied).
pub fn converge(
    nft: &Nft,
    ruleset: &[Value],
    want: &Want<'_>,
    apply: bool,
) -> Result<(usize, usize, usize), FirewallError> {
    let mut done = (0, 0, 0);
    for family in FAMILIES {
        let removed = want
            .remove_tables
            .iter()
            .any(|(f, t)| f == family && t == "filter");
        if removed {
            continue;
        }
        let emptied = want.empty_inputs.iter().any(|f| f == family);
        if emptied && empty_input(nft, ruleset, family, apply)? {
            done.2 += 1;
        }
        let chains: Vec<&str> = ruleset
            .iter()
            .filter_map(|o| o.get("chain"))
            .filter(|c| c["family"] == family && c["table"] == "filter")
            .filter_map(|c| c["name"].as_str())
            .filter(|n| *n == "FORWARD" || (*n == "INPUT" && !emptied))
            .collect();
        if chains.is_empty() {
            continue;
        }
        let (inserted, removed) = openings(nft, Backend::Nft, family, &chains, want, apply)?;
        done.0 += inserted;
        done.1 += removed;
    }
    Ok(done)
}

/// Empties the predecessor's INPUT chain of a `filter` table the container runtime shares
/// (its rules flushed, its policy accept) unless it already is; whether it did.
fn empty_input(
    nft: &Nft,
    ruleset: &[Value],
    family: &str,
    apply: bool,
) -> Result<bool, FirewallError> {
    let input = |x: &Value, name_key: &str| {
        x["family"] == family && x["table"] == "filter" && x[name_key] == "INPUT"
    };
    let Some(chain) = ruleset
        .iter()
        .filter_map(|o| o.get("chain"))
        .find(|c| input(c, "name"))
    else {
        return Ok(false);
    };
    let rules = ruleset
        .iter()
        .filter_map(|o| o.get("rule"))
        .filter(|r| input(r, "chain"))
        .count();
    if chain["policy"] == "accept" && rules == 0 {
        return Ok(false);
    }
    if !apply {
        return Ok(true);
    }
    nft.run_tool(
        &format!("{}-restore", tool(family)),
        &["--noflush"],
        Some(b"*filter\n:INPUT ACCEPT [0:0]\n-F INPUT\nCOMMIT\n"),
        "emptying the predecessor's INPUT chain",
    )?;
    Ok(true)
}

/// Converges the openings through iptables-nft's INPUT and FORWARD chains, spoken through
/// `iptables` (as ufw and most scripts do), in one `iptables-nft-restore --noflush` batch.
fn openings(
    nft: &Nft,
    backend: Backend,
    family: &str,
    chains: &[&str],
    want: &Want<'_>,
    apply: bool,
) -> Result<(usize, usize), FirewallError> {
    let settings = want.settings;
    // Every chain of the filter table in one listing (one process, not one per chain).
    let listing = nft.run_tool(
        &format!("{}-save", tool_of(backend, family)),
        &["-t", "filter"],
        None,
        "listing",
    )?;
    let mut present = Vec::new();
    for line in listing.lines() {
        let Some((chain, spec)) = line
            .strip_prefix("-A ")
            .and_then(|rest| rest.split_once(' '))
        else {
            continue;
        };
        if let (true, Some(comment)) = (chains.contains(&chain), comment_of(line)) {
            if comment.starts_with(MARK) {
                present.push((chain.to_owned(), spec.to_owned(), comment));
            }
        }
    }
    let mut wanted = Vec::new();
    for chain in chains {
        let path = if *chain == "INPUT" {
            TrafficPath::Incoming
        } else {
            TrafficPath::Forwarded
        };
        for o in want.openings.iter().filter(|o| o.paths.contains(&path)) {
            let source = match o.from {
                Source::Anywhere => None,
                Source::Private => Some(settings.private_network.range),
                Source::Range(r) => Some(r),
            };
            if source.is_some() && family == "ip6" {
                continue;
            }
            let proto = o.protocol.as_str();
            let mut spec = match source {
                Some(net) => format!("-s {net} "),
                None => String::new(),
            };
            spec.push_str(&match path {
                TrafficPath::Incoming => format!("-p {proto} -m {proto} --dport {}", o.port),
                TrafficPath::Forwarded => {
                    format!("-p {proto} -m conntrack --ctorigdstport {}", o.port)
                }
            });
            let comment = opening_comment(o);
            spec.push_str(&format!(" -m comment --comment \"{comment}\" -j ACCEPT"));
            wanted.push((chain.to_string(), spec, comment));
        }
    }
    let keys = |v: &[(String, String, String)]| {
        v.iter()
            .map(|(c, _, comment)| (c.clone(), comment.clone()))
            .collect::<BTreeSet<_>>()
    };
    if keys(&present) == keys(&wanted) && present.len() == wanted.len() {
        return Ok((0, 0));
    }
    if !apply {
        return Ok((wanted.len(), present.len()));
    }
    let mut batch = String::from("*filter\n");
    for (chain, spec, _) in &present {
        batch.push_str(&format!("-D {chain} {spec}\n"));
    }
    for (chain, spec, _) in &wanted {
        batch.push_str(&format!("-I {chain} {spec}\n"));
    }
    batch.push_str("COMMIT\n");
    nft.run_tool(
        &format!("{}-restore", tool_of(backend, family)),
        &["--noflush"],
        Some(batch.as_bytes()),
        "converging the openings through iptables",
    )?;
    Ok((wanted.len(), present.len()))
}

/// A family's legacy iptables `filter` table as its save lists it: whether it is in use (a
/// rule, or a policy other than ACCEPT), and whether a container runtime writes its chains
/// there (it then keeps them: only the predecessor's INPUT is its firewall).
struct LegacyFilter {
    in_use: bool,
    runtime: bool,
    docker_user: bool,
}

fn legacy_filter(save: &str) -> LegacyFilter {
    let filter = save
        .split("\n*")
        .find(|section| section.trim_start_matches('*').starts_with("filter"))
        .unwrap_or("");
    let chains: Vec<&str> = filter
        .lines()
        .filter_map(|l| l.strip_prefix(':'))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    LegacyFilter {
        in_use: filter.lines().any(|l| {
            l.starts_with("-A ")
                || (l.starts_with(':') && !l.contains(" ACCEPT ") && !l.contains(" - "))
        }),
        runtime: chains
            .iter()
            .any(|c| super::RUNTIME_CHAINS.iter().any(|r| c.starts_with(r))),
        docker_user: chains.contains(&"DOCKER-USER"),
    }
}

/// What `iptables-legacy-save` prints for `family`, when the tool is there.
fn legacy_save(nft: &Nft, family: &str) -> Option<String> {
    nft.probe(&format!("{}-save", tool_of(Backend::Legacy, family)))
}

/// The legacy iptables saves of the families whose legacy rules are in force (a rule, or a
/// policy other than ACCEPT): what adoption records.
pub fn legacy_saves(nft: &Nft) -> std::collections::BTreeMap<String, String> {
    FAMILIES
        .into_iter()
        .filter_map(|family| {
            let save = legacy_save(nft, family)?;
            let in_force =
                save.lines().any(|l| l.starts_with("-A ")) || legacy_filter(&save).in_use;
            in_force.then(|| (family.to_owned(), save))
        })
        .collect()
}

/// Converges legacy iptables (x_tables): where `want` removes a family's legacy firewall (the
/// flip), its `filter` table emptied — all of it, or only INPUT where a container runtime
/// keeps its chains there; elsewhere, where legacy rules are in force, the openings through
/// its INPUT and FORWARD chains (Docker's `DOCKER-USER` for the forwarded path where Docker
/// runs on it), in one `-restore --noflush` batch per family. With `apply` false, only works
/// out what it would change. Returns (inserted, removed, tables emptied).
pub fn converge_legacy(
    nft: &Nft,
    want: &Want<'_>,
    apply: bool,
) -> Result<(usize, usize, usize), FirewallError> {
    let mut done = (0, 0, 0);
    for family in FAMILIES {
        let Some(save) = legacy_save(nft, family) else {
            continue;
        };
        let filter = legacy_filter(&save);
        let removing = want
            .remove_tables
            .iter()
            .any(|(f, t)| f == family && t == LEGACY);
        if removing {
            let input_only = filter.runtime;
            let batch = if input_only {
                "*filter\n:INPUT ACCEPT [0:0]\n-F INPUT\nCOMMIT\n"
            } else {
                "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
            };
            if filter.in_use {
                if apply {
                    nft.run_tool(
                        &format!("{}-restore", tool_of(Backend::Legacy, family)),
                        if input_only { &["--noflush"] } else { &[] },
                        Some(batch.as_bytes()),
                        "removing the found legacy iptables firewall",
                    )?;
                }
                done.2 += 1;
            }
            if !input_only {
                continue;
            }
        }
        if !filter.in_use {
            continue;
        }
        let forward = if filter.docker_user {
            "DOCKER-USER"
        } else {
            "FORWARD"
        };
        let chains: Vec<&str> = if removing {
            vec![forward]
        } else {
            vec!["INPUT", forward]
        };
        let (inserted, removed) = openings(nft, Backend::Legacy, family, &chains, want, apply)?;
        done.0 += inserted;
        done.1 += removed;
    }
    Ok(done)
}

/// Loads back what the flip emptied of legacy iptables, from the saves recorded at adoption:
/// a family's whole save where no container runtime writes there, else its INPUT chain alone.
/// Returns the families loaded back.
pub fn restore_legacy(nft: &Nft, dump: &Dump) -> Result<Vec<String>, FirewallError> {
    let mut restored = Vec::new();
    for (family, saved) in &dump.legacy {
        let now = legacy_save(nft, family).unwrap_or_default();
        let live = legacy_filter(&now);
        if live.in_use && !live.runtime {
            // Not emptied: nothing to load back.
            continue;
        }
        let restore = format!("{}-restore", tool_of(Backend::Legacy, family));
        if legacy_filter(saved).runtime || live.runtime {
            if let Some(batch) = super::dump::input_batch_of(saved) {
                nft.run_tool(
                    &restore,
                    &["--noflush"],
                    Some(batch.as_bytes()),
                    "restoring the predecessor's legacy INPUT chain",
                )?;
            }
        } else {
            nft.run_tool(
                &restore,
                &[],
                Some(saved.as_bytes()),
                "restoring the found legacy iptables firewall",
            )?;
        }
        restored.push(family.clone());
    }
    Ok(restored)
}

/// Loads back what the flip removed of iptables-nft's: each family's tables that are missing
/// (`missing`, as (family, table)) from the save recorded at adoption, and the predecessor's
/// INPUT chain in a `filter` table the container runtime shares, as found. Returns the INPUT
/// chains restored.
pub fn restore(
    nft: &Nft,
    dump: &Dump,
    missing: &[(String, String)],
) -> Result<Vec<(String, String)>, FirewallError> {
    for family in FAMILIES {
        let gone = missing
            .iter()
            .any(|(f, n)| f == family && is_iptables_table(f, n));
        if let (true, Some(saved)) = (gone, dump.iptables.get(family)) {
            nft.run_tool(
                &format!("{}-restore", tool(family)),
                &[],
                Some(saved.as_bytes()),
                "restoring the found firewall",
            )?;
        }
    }
    let mut restored = Vec::new();
    for family in dump.shared_inputs() {
        if let Some(batch) = dump.input_batch(&family) {
            nft.run_tool(
                &format!("{}-restore", tool(&family)),
                &["--noflush"],
                Some(batch.as_bytes()),
                "restoring the predecessor's INPUT chain",
            )?;
            restored.push((family, "filter INPUT".to_owned()));
        }
    }
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A legacy filter table is in force when it has a rule or a policy other than ACCEPT;
    /// Docker's chains there make it the runtime's too, its DOCKER-USER the forwarded path.
    #[test]
    fn a_legacy_filter_table_read_from_its_save() {
        let empty = "# Generated by iptables-save\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";
        let f = legacy_filter(empty);
        assert!(!f.in_use && !f.runtime && !f.docker_user);
        let drop =
            "*filter\n:INPUT DROP [3:4]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";
        assert!(legacy_filter(drop).in_use);
        let docker = "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j DOCKER\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:DOCKER - [0:0]\n:DOCKER-USER - [0:0]\n-A FORWARD -j DOCKER-USER\nCOMMIT\n";
        let f = legacy_filter(docker);
        assert!(f.in_use && f.runtime && f.docker_user);
    }
}
