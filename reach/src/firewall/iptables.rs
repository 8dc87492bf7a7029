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

/// The iptables-nft tool for `family` (`ip` or `ip6`); `-save` and `-restore` follow its name.
fn tool(family: &str) -> &'static str {
    if family == "ip6" {
        "ip6tables-nft"
    } else {
        "iptables-nft"
    }
}

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

/// Legacy iptables rules (x_tables, which nft does not see) in force: no driver speaks them,
/// and a drop there would be final whatever the mesh opens. Returns the tool that lists them.
pub fn legacy_rules(nft: &Nft) -> Option<&'static str> {
    ["iptables-legacy-save", "ip6tables-legacy-save"]
        .into_iter()
        .find(|save| {
            nft.probe(save)
                .is_some_and(|out| out.lines().any(|l| l.starts_with("-A ")))
        })
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
        let (inserted, removed) = openings(nft, family, &chains, want, apply)?;
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
    family: &str,
    chains: &[&str],
    want: &Want<'_>,
    apply: bool,
) -> Result<(usize, usize), FirewallError> {
    let settings = want.settings;
    // Every chain of the filter table in one listing (one process, not one per chain).
    let listing = nft.run_tool(
        &format!("{}-save", tool(family)),
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
        &format!("{}-restore", tool(family)),
        &["--noflush"],
        Some(batch.as_bytes()),
        "converging the openings through iptables",
    )?;
    Ok((wanted.len(), present.len()))
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
