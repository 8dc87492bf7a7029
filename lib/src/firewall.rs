//! The mesh's own nftables rules, built with the `nftables` crate's types, and their rendering as
//! `nft` text for people.
//!
//! - The **guard** (`table inet mesh_guard`) exists on every node. It only refuses: a prerouting
//!   chain at priority [`GUARD_PRIORITY`] (below dstnat, -100, so it sees a published port before a
//!   container runtime's DNAT rewrites it) drops packets to the store and the broker's management
//!   port unless they come from loopback or, over IPv4, from the private network. Its policy is
//!   accept and it holds no accept rule, so it can never open what another table closes.
//! - The **base ruleset** (`table inet mesh_base`) exists only on a managed node: input and forward
//!   default to drop; established/related, loopback, ICMP and the declared openings are accepted.
//!   Forwarded openings match conntrack's original destination port, since DNAT has already
//!   rewritten the packet's port by the forward hook.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt::Write as _;

use nftables::expr::{
    CTDir, Expression, Meta, MetaKey, NamedExpression, Payload, PayloadField, Prefix, SetItem, CT,
};
use nftables::schema::{Chain, NfListObject, NfObject, Nftables, Rule, Table};
use nftables::stmt::{Accept, Drop, Match, Operator, Statement};
use nftables::types::{NfChainPolicy, NfChainType, NfFamily, NfHook};

use crate::model::{Opening, Settings, Source, TrafficPath};

/// The guard table's name.
pub const GUARD_TABLE: &str = "mesh_guard";
/// The base ruleset's table name.
pub const BASE_TABLE: &str = "mesh_base";
/// The guard chain's priority: below dstnat (-100).
pub const GUARD_PRIORITY: i32 = -150;
/// The port settings the guard protects.
pub const GUARDED_PORTS: [&str; 2] = ["store", "broker_management"];

type Ruleset = Nftables<'static>;

fn named(e: NamedExpression<'static>) -> Expression<'static> {
    Expression::Named(e)
}

fn field(protocol: &'static str, name: &'static str) -> Expression<'static> {
    named(NamedExpression::Payload(Payload::PayloadField(
        PayloadField {
            protocol: Cow::Borrowed(protocol),
            field: Cow::Borrowed(name),
        },
    )))
}

fn meta(key: MetaKey) -> Expression<'static> {
    named(NamedExpression::Meta(Meta { key }))
}

fn text(s: impl Into<String>) -> Expression<'static> {
    Expression::String(Cow::Owned(s.into()))
}

fn matches(
    left: Expression<'static>,
    op: Operator,
    right: Expression<'static>,
) -> Statement<'static> {
    Statement::Match(Match { left, right, op })
}

fn ports_expr(ports: &BTreeSet<u16>) -> Expression<'static> {
    if ports.len() == 1 {
        Expression::Number(u32::from(*ports.first().expect("one port")))
    } else {
        named(NamedExpression::Set(
            ports
                .iter()
                .map(|p| SetItem::Element(Expression::Number(u32::from(*p))))
                .collect(),
        ))
    }
}

fn prefix(net: ipnet::Ipv4Net) -> Expression<'static> {
    named(NamedExpression::Prefix(Prefix {
        addr: Box::new(text(net.network().to_string())),
        len: u32::from(net.prefix_len()),
    }))
}

fn not_loopback() -> Statement<'static> {
    matches(meta(MetaKey::Iifname), Operator::NEQ, text("lo"))
}

fn table(name: &'static str) -> NfObject<'static> {
    NfObject::ListObject(NfListObject::Table(Table {
        family: NfFamily::INet,
        name: Cow::Borrowed(name),
        handle: None,
    }))
}

fn base_chain(
    table: &'static str,
    name: &'static str,
    hook: NfHook,
    prio: i32,
    policy: NfChainPolicy,
) -> NfObject<'static> {
    NfObject::ListObject(NfListObject::Chain(Chain {
        family: NfFamily::INet,
        table: Cow::Borrowed(table),
        name: Cow::Borrowed(name),
        _type: Some(NfChainType::Filter),
        hook: Some(hook),
        prio: Some(prio),
        policy: Some(policy),
        ..Chain::default()
    }))
}

fn rule(
    table: &'static str,
    chain: &'static str,
    expr: Vec<Statement<'static>>,
    comment: Option<String>,
) -> NfObject<'static> {
    NfObject::ListObject(NfListObject::Rule(Rule {
        family: NfFamily::INet,
        table: Cow::Borrowed(table),
        chain: Cow::Borrowed(chain),
        expr: Cow::Owned(expr),
        handle: None,
        index: None,
        comment: comment.map(Cow::Owned),
    }))
}

/// The guard for `settings`: drop rules only, IPv4 and IPv6.
pub fn guard_ruleset(settings: &Settings) -> Ruleset {
    let ports: BTreeSet<u16> = GUARDED_PORTS
        .iter()
        .filter_map(|name| settings.ports.get(*name))
        .map(|p| p.get())
        .collect();
    let mut objects = vec![
        table(GUARD_TABLE),
        base_chain(
            GUARD_TABLE,
            "prerouting",
            NfHook::Prerouting,
            GUARD_PRIORITY,
            NfChainPolicy::Accept,
        ),
    ];
    if !ports.is_empty() {
        let comment = format!(
            "mesh guard: {} only from loopback and {}",
            GUARDED_PORTS.join(", "),
            settings.private_network.range
        );
        objects.push(rule(
            GUARD_TABLE,
            "prerouting",
            vec![
                not_loopback(),
                matches(
                    field("ip", "saddr"),
                    Operator::NEQ,
                    prefix(settings.private_network.range),
                ),
                matches(field("tcp", "dport"), Operator::EQ, ports_expr(&ports)),
                Statement::Drop(Some(Drop {})),
            ],
            Some(comment.clone()),
        ));
        objects.push(rule(
            GUARD_TABLE,
            "prerouting",
            vec![
                not_loopback(),
                matches(meta(MetaKey::Nfproto), Operator::EQ, text("ipv6")),
                matches(field("tcp", "dport"), Operator::EQ, ports_expr(&ports)),
                Statement::Drop(Some(Drop {})),
            ],
            Some(comment),
        ));
    }
    Nftables {
        objects: Cow::Owned(objects),
    }
}

fn established() -> Statement<'static> {
    matches(
        named(NamedExpression::CT(CT {
            key: Cow::Borrowed("state"),
            family: None,
            dir: None,
        })),
        Operator::IN,
        Expression::List(vec![text("established"), text("related")]),
    )
}

fn accept() -> Statement<'static> {
    Statement::Accept(Some(Accept {}))
}

fn source_match(from: Source, settings: &Settings) -> Option<Statement<'static>> {
    match from {
        Source::Anywhere => None,
        Source::Private => Some(matches(
            field("ip", "saddr"),
            Operator::EQ,
            prefix(settings.private_network.range),
        )),
        Source::Range(net) => Some(matches(field("ip", "saddr"), Operator::EQ, prefix(net))),
    }
}

/// The longest comment nft takes on a rule, in bytes.
pub const COMMENT_MAX: usize = 128;

/// The comment that marks a rule as the mesh's: the module it opens for, and what it opens (so
/// that each rule's comment is its own). A text longer than nft takes (a module and a setting
/// of 63 characters each, a source range) keeps its head and ends with `~` and 16 hex digits
/// of the whole text's digest: still its own, still the same on every build.
pub fn opening_comment(opening: &Opening) -> String {
    opening_mark(opening, COMMENT_MAX)
}

/// [`opening_comment`] in at most `max` bytes (a log prefix, where a comment cannot be).
pub fn opening_mark(opening: &Opening, max: usize) -> String {
    let from = match opening.from {
        Source::Anywhere => "anywhere".to_string(),
        Source::Private => "private".to_string(),
        Source::Range(r) => r.to_string(),
    };
    let full = format!(
        "mesh: {} {} {}/{} from {from}",
        opening.module, opening.setting, opening.port, opening.protocol
    );
    if full.len() <= max {
        return full;
    }
    let digest = blake3::hash(full.as_bytes()).to_hex();
    let tail = format!("~{}", &digest[..16]);
    let mut head = max - tail.len();
    while !full.is_char_boundary(head) {
        head -= 1;
    }
    format!("{}{tail}", &full[..head])
}

/// The statements of the rule that accepts `opening` on `path`: on the incoming path the
/// destination port; on the forwarded path conntrack's original destination port, since DNAT
/// has already rewritten the packet's. `None` when the rule cannot be written for a table of
/// `family` (a private or IPv4-range source in an `ip6` table).
pub fn opening_rule(
    opening: &Opening,
    settings: &Settings,
    path: TrafficPath,
    family: NfFamily,
) -> Option<Vec<Statement<'static>>> {
    let source = source_match(opening.from, settings);
    if source.is_some() && family == NfFamily::IP6 {
        return None;
    }
    let mut expr: Vec<_> = source.into_iter().collect();
    match path {
        TrafficPath::Incoming => expr.push(matches(
            field(opening.protocol.as_str(), "dport"),
            Operator::EQ,
            Expression::Number(u32::from(opening.port.get())),
        )),
        TrafficPath::Forwarded => {
            expr.push(matches(
                meta(MetaKey::L4proto),
                Operator::EQ,
                text(opening.protocol.as_str()),
            ));
            expr.push(matches(
                named(NamedExpression::CT(CT {
                    key: Cow::Borrowed("proto-dst"),
                    family: None,
                    dir: Some(CTDir::Original),
                })),
                Operator::EQ,
                Expression::Number(u32::from(opening.port.get())),
            ));
        }
    }
    expr.push(accept());
    Some(expr)
}

/// The base ruleset of a managed node: default drop on input and forward, the openings accepted.
pub fn base_ruleset(settings: &Settings, openings: &[Opening]) -> Ruleset {
    let mut objects = vec![
        table(BASE_TABLE),
        base_chain(BASE_TABLE, "input", NfHook::Input, 0, NfChainPolicy::Drop),
        base_chain(
            BASE_TABLE,
            "forward",
            NfHook::Forward,
            0,
            NfChainPolicy::Drop,
        ),
        rule(BASE_TABLE, "input", vec![established(), accept()], None),
        rule(
            BASE_TABLE,
            "input",
            vec![
                matches(meta(MetaKey::Iifname), Operator::EQ, text("lo")),
                accept(),
            ],
            None,
        ),
        rule(
            BASE_TABLE,
            "input",
            vec![
                matches(meta(MetaKey::L4proto), Operator::EQ, text("icmp")),
                accept(),
            ],
            None,
        ),
        rule(
            BASE_TABLE,
            "input",
            vec![
                matches(meta(MetaKey::L4proto), Operator::EQ, text("ipv6-icmp")),
                accept(),
            ],
            None,
        ),
    ];
    for o in openings
        .iter()
        .filter(|o| o.paths.contains(&TrafficPath::Incoming))
    {
        let expr = opening_rule(o, settings, TrafficPath::Incoming, NfFamily::INet)
            .expect("inet takes every rule");
        objects.push(rule(BASE_TABLE, "input", expr, Some(opening_comment(o))));
    }
    objects.push(rule(
        BASE_TABLE,
        "forward",
        vec![established(), accept()],
        None,
    ));
    // Containers reach out through their bridge — Docker's default one, and the `br-*` bridge
    // of each user-defined network (every compose project has one); only what comes in is
    // filtered.
    for (bridge, which) in [
        ("docker0", "default bridge"),
        ("br-*", "user-defined networks"),
    ] {
        objects.push(rule(
            BASE_TABLE,
            "forward",
            vec![
                matches(meta(MetaKey::Iifname), Operator::EQ, text(bridge)),
                accept(),
            ],
            Some(format!("mesh: containers' own traffic ({which})")),
        ));
    }
    for o in openings
        .iter()
        .filter(|o| o.paths.contains(&TrafficPath::Forwarded))
    {
        let expr = opening_rule(o, settings, TrafficPath::Forwarded, NfFamily::INet)
            .expect("inet takes every rule");
        objects.push(rule(BASE_TABLE, "forward", expr, Some(opening_comment(o))));
    }
    Nftables {
        objects: Cow::Owned(objects),
    }
}

/// A base chain's priority as `nft list` prints it: by its standard name where it is one (for
/// the ip, ip6 and inet families), as a number otherwise.
fn priority_name(prio: i32) -> String {
    match prio {
        -300 => "raw".into(),
        -150 => "mangle".into(),
        -100 => "dstnat".into(),
        0 => "filter".into(),
        50 => "security".into(),
        100 => "srcnat".into(),
        other => other.to_string(),
    }
}

/// Renders a ruleset built by this module as `nft` text, the way `nft list ruleset` prints it.
/// A construct this module never builds is rendered as its JSON, so nothing is hidden.
pub fn render_nft(rules: &Nftables<'_>) -> String {
    /// A chain as text: its name, its base-chain header, its rules.
    type TextChain = (String, Option<String>, Vec<String>);
    let mut tables: Vec<(String, Vec<TextChain>)> = Vec::new();
    for object in rules.objects.iter() {
        match object {
            NfObject::ListObject(NfListObject::Table(t)) => {
                tables.push((format!("{} {}", family(t.family), t.name), Vec::new()));
            }
            NfObject::ListObject(NfListObject::Chain(c)) => {
                let header = match (c._type, c.hook, c.prio, c.policy) {
                    (Some(ty), Some(hook), Some(prio), policy) => Some(format!(
                        "type {} hook {} priority {}; policy {};",
                        word(&ty),
                        word(&hook),
                        priority_name(prio),
                        policy.map(|p| word(&p)).unwrap_or_else(|| "accept".into())
                    )),
                    _ => None,
                };
                if let Some(t) = tables.last_mut() {
                    t.1.push((c.name.to_string(), header, Vec::new()));
                }
            }
            NfObject::ListObject(NfListObject::Rule(r)) => {
                let line = render_rule(&r.expr, r.comment.as_deref());
                if let Some(chain) = tables
                    .last_mut()
                    .and_then(|t| t.1.iter_mut().find(|ch| ch.0 == r.chain))
                {
                    chain.2.push(line);
                }
            }
            other => tables.push((serde_json::to_string(other).unwrap_or_default(), Vec::new())),
        }
    }
    let mut out = String::new();
    for (name, chains) in tables {
        let _ = writeln!(out, "table {name} {{");
        for (i, (chain, header, lines)) in chains.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let _ = writeln!(out, "\tchain {chain} {{");
            if let Some(h) = header {
                let _ = writeln!(out, "\t\t{h}");
            }
            for l in lines {
                let _ = writeln!(out, "\t\t{l}");
            }
            out.push_str("\t}\n");
        }
        out.push_str("}\n");
    }
    out
}

fn word<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        other => format!("{other:?}"),
    }
}

fn family(f: NfFamily) -> String {
    word(&f)
}

/// A rule's statements as `nft` text, with its comment: the body of an `add rule` or `insert
/// rule` command.
pub fn render_rule(statements: &[Statement<'_>], comment: Option<&str>) -> String {
    let mut line = statements
        .iter()
        .map(statement)
        .collect::<Vec<_>>()
        .join(" ");
    if let Some(c) = comment {
        let _ = write!(line, " comment {c:?}");
    }
    line
}

fn statement(s: &Statement<'_>) -> String {
    match s {
        Statement::Accept(_) => "accept".into(),
        Statement::Drop(_) => "drop".into(),
        Statement::Match(m) => {
            let quoted = matches!(
                &m.left,
                Expression::Named(NamedExpression::Meta(Meta {
                    key: MetaKey::Iifname | MetaKey::Oifname
                }))
            );
            let op = match m.op {
                Operator::EQ | Operator::IN => "",
                Operator::NEQ => "!= ",
                _ => "?? ",
            };
            format!(
                "{} {op}{}",
                expression(&m.left, false),
                expression(&m.right, quoted)
            )
        }
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn expression(e: &Expression<'_>, quoted: bool) -> String {
    match e {
        Expression::String(s) if quoted => format!("{s:?}"),
        Expression::String(s) => s.to_string(),
        Expression::Number(n) => n.to_string(),
        Expression::Boolean(b) => b.to_string(),
        Expression::List(items) => items
            .iter()
            .map(|i| expression(i, quoted))
            .collect::<Vec<_>>()
            .join(","),
        Expression::Named(NamedExpression::Payload(Payload::PayloadField(p))) => {
            format!("{} {}", p.protocol, p.field)
        }
        Expression::Named(NamedExpression::Meta(Meta { key })) => match key {
            MetaKey::Iifname | MetaKey::Oifname => word(key),
            _ => format!("meta {}", word(key)),
        },
        Expression::Named(NamedExpression::CT(ct)) => match ct.dir {
            Some(dir) => format!("ct {} {}", word(&dir), ct.key),
            None => format!("ct {}", ct.key),
        },
        Expression::Named(NamedExpression::Prefix(p)) => {
            format!("{}/{}", expression(&p.addr, false), p.len)
        }
        Expression::Named(NamedExpression::Set(items)) => {
            let inner: Vec<String> = items
                .iter()
                .map(|i| match i {
                    SetItem::Element(e) => expression(e, quoted),
                    other => serde_json::to_string(other).unwrap_or_default(),
                })
                .collect();
            format!("{{ {} }}", inner.join(", "))
        }
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Port, Protocol};

    fn opening(module: &str, setting: &str) -> Opening {
        Opening {
            module: module.into(),
            setting: setting.into(),
            port: Port::new(65535).unwrap(),
            protocol: Protocol::Tcp,
            paths: BTreeSet::from([TrafficPath::Incoming]),
            from: Source::Range("203.0.113.128/25".parse().unwrap()),
        }
    }

    /// A comment fits what nft takes, a short one unchanged; two long ones that differ only
    /// past the cut stay apart, and each is the same on every call.
    #[test]
    fn comments_fit_nft_and_stay_their_own() {
        assert_eq!(
            opening_comment(&opening("web", "http")),
            "mesh: web http 65535/tcp from 203.0.113.128/25"
        );
        let (m, s) = ("m".repeat(63), "s".repeat(63));
        let a = opening_comment(&opening(&m, &format!("{}a", &s[1..])));
        let b = opening_comment(&opening(&m, &format!("{}b", &s[1..])));
        assert_eq!(a.len(), COMMENT_MAX, "{a}");
        assert!(a.starts_with(&format!("mesh: {m} ")), "{a}");
        assert_ne!(a, b);
        assert_eq!(a, opening_comment(&opening(&m, &format!("{}a", &s[1..]))));
    }
}
