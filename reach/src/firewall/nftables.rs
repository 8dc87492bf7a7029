//! The nftables driver: a found firewall made of the predecessor's own nft tables (`table
//! inet|ip|ip6 …` with base chains on the input and forward hooks). Its chains are edited with
//! nft, in the same transaction as the mesh's own tables: each opening inserted at the top of
//! the chain, marked with its comment; on the forwarded path matched on conntrack's original
//! destination port, because DNAT has already rewritten the packet's.

use std::collections::BTreeSet;

use ::nftables::types::NfFamily;
use mesh_lib::firewall::{opening_comment, opening_rule, render_rule};
use mesh_lib::model::TrafficPath;
use serde_json::Value;

use super::{FoundChain, Want, MARK};

/// A rule of the mesh's in a found chain.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct MeshRule {
    family: String,
    table: String,
    chain: String,
    comment: String,
    handle: u64,
}

fn family_of(name: &str) -> Option<NfFamily> {
    match name {
        "ip" => Some(NfFamily::IP),
        "ip6" => Some(NfFamily::IP6),
        "inet" => Some(NfFamily::INet),
        _ => None,
    }
}

/// The base chains on the input and forward hooks of table `family name`, read from its text
/// as `nft list table` prints it: those of a table about to be loaded back, which the ruleset
/// in force does not list yet.
pub fn chains_of(family: &str, table: &str, text: &str) -> Vec<FoundChain> {
    let mut out = Vec::new();
    let mut chain: Option<&str> = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("chain ") {
            chain = rest.split_whitespace().next();
            continue;
        }
        let Some(name) = chain else { continue };
        let path = if line.starts_with("type filter hook input ") {
            TrafficPath::Incoming
        } else if line.starts_with("type filter hook forward ") {
            TrafficPath::Forwarded
        } else {
            continue;
        };
        out.push(FoundChain {
            family: family.to_owned(),
            table: table.to_owned(),
            name: name.to_owned(),
            path,
        });
        chain = None;
    }
    out
}

/// The found firewall's base chains on the input and forward hooks: every filter chain
/// hooked there that is not in a table of the mesh's.
pub fn found_chains(ruleset: &[Value]) -> Vec<FoundChain> {
    let mut out: Vec<FoundChain> = ruleset
        .iter()
        .filter_map(|o| o.get("chain"))
        .filter(|c| {
            c["type"] == "filter" && !c["table"].as_str().unwrap_or("").starts_with("mesh_")
        })
        .filter_map(|c| {
            let path = match c["hook"].as_str()? {
                "input" => TrafficPath::Incoming,
                "forward" => TrafficPath::Forwarded,
                _ => return None,
            };
            Some(FoundChain {
                family: c["family"].as_str()?.to_owned(),
                table: c["table"].as_str()?.to_owned(),
                name: c["name"].as_str()?.to_owned(),
                path,
            })
        })
        .collect();
    out.sort();
    out
}

fn mesh_rules(ruleset: &[Value], chains: &[FoundChain]) -> Vec<MeshRule> {
    ruleset
        .iter()
        .filter_map(|o| o.get("rule"))
        .filter_map(|r| {
            let comment = r["comment"].as_str()?;
            if !comment.starts_with(MARK) {
                return None;
            }
            let rule = MeshRule {
                family: r["family"].as_str()?.to_owned(),
                table: r["table"].as_str()?.to_owned(),
                chain: r["chain"].as_str()?.to_owned(),
                comment: comment.to_owned(),
                handle: r["handle"].as_u64()?,
            };
            chains
                .iter()
                .any(|c| c.family == rule.family && c.table == rule.table && c.name == rule.chain)
                .then_some(rule)
        })
        .collect()
}

/// The openings of `want` through `chains` (the found firewall's nft chains, not iptables-nft's
/// and not those of tables being removed), as nft commands for the transaction: the mesh's
/// rules in force are compared with the wanted ones by chain and comment, and only when they
/// differ are they all deleted and inserted anew. Returns the commands and how many rules
/// were (inserted, removed).
pub fn openings(
    ruleset: &[Value],
    chains: &[FoundChain],
    want: &Want<'_>,
) -> (String, usize, usize) {
    let present = mesh_rules(ruleset, chains);
    let mut wanted = Vec::new();
    for chain in chains {
        let Some(family) = family_of(&chain.family) else {
            continue;
        };
        for o in want
            .openings
            .iter()
            .filter(|o| o.paths.contains(&chain.path))
        {
            if let Some(expr) = opening_rule(o, want.settings, chain.path, family) {
                wanted.push((chain, opening_comment(o), expr));
            }
        }
    }
    let key = |f: &str, t: &str, c: &str, comment: &str| {
        (f.to_owned(), t.to_owned(), c.to_owned(), comment.to_owned())
    };
    let present_keys: BTreeSet<_> = present
        .iter()
        .map(|r| key(&r.family, &r.table, &r.chain, &r.comment))
        .collect();
    let wanted_keys: BTreeSet<_> = wanted
        .iter()
        .map(|(c, comment, _)| key(&c.family, &c.table, &c.name, comment))
        .collect();
    let mut commands = String::new();
    if present_keys == wanted_keys && present.len() == wanted.len() {
        return (commands, 0, 0);
    }
    for r in &present {
        commands.push_str(&format!(
            "delete rule {} {} {} handle {}\n",
            r.family, r.table, r.chain, r.handle
        ));
    }
    for (chain, comment, expr) in &wanted {
        commands.push_str(&format!(
            "insert rule {} {} {} {}\n",
            chain.family,
            chain.table,
            chain.name,
            render_rule(expr, Some(comment))
        ));
    }
    (commands, wanted.len(), present.len())
}
