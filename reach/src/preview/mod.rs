//! What reaches the node, now and after the flip: the flip preview.
//!
//! The ports listed are what is actually published on the node — every socket listening beyond
//! loopback and every DNAT or redirect in any table's NAT chains, whoever wrote it (the
//! predecessor's nat table, a container runtime's, iptables-nft or nftables) — not the found
//! firewall's allow list. For each, one verdict now and one after the flip: reachable from
//! anywhere, from a range only, or closed, for IPv4 and IPv6, the private network and
//! loopback. Each verdict comes from following a new connection's first packet through the
//! rules ([`rules::Ruleset::traverse`]): the incoming path to a listening socket, or the
//! forwarded path after a DNAT, through every base chain in force.
//!
//! "After the flip" is the ruleset in force now with the flip's changes made to it, exactly as
//! the flip makes them: the found firewall's tables removed, the predecessor's INPUT emptied
//! where a container runtime shares its table, the mesh's openings re-inserted into the found
//! chains that stay (a runtime's), the managed generation's guard and base ruleset loaded.
//!
//! Invariants: the preview reads and changes nothing; a verdict that depends on a rule the walk
//! cannot read says "uncertain" and names it, rather than guess.

pub mod parse;
pub mod rules;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use mesh_lib::model::{Generation, Opening, Protocol, Source, TrafficPath};
use serde::Serialize;
use serde_json::Value;

use crate::interfaces::Interfaces;
use crate::sockets::Listening;
use rules::{Action, Cond, End, Family, Origin, Packet, Rule, Ruleset, Test};

/// What the preview is made from: read on the node, nothing else.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// nft's JSON listing of the ruleset in force (its `nftables` array).
    pub ruleset: Vec<Value>,
    /// `iptables-nft-save` per family (`ip`, `ip6`), for the tables nft's JSON shows as `xt`.
    pub saved: BTreeMap<String, String>,
    /// `iptables-legacy-save` per family whose legacy rules are in force: x_tables, beside
    /// nft's, read as tables of their own ([`crate::firewall::iptables::LEGACY`]).
    pub legacy: BTreeMap<String, String>,
    /// Every listening (TCP) or bound (UDP) socket, loopback ones too.
    pub sockets: Vec<Listening>,
    /// The node's addresses and routes.
    pub net: Interfaces,
    /// Ports a container engine says its containers publish (to name them).
    pub published: Vec<mesh_lib::import::Published>,
}

/// What the flip changes: the managed generation it switches to and the found firewall it
/// removes.
#[derive(Debug, Clone, Copy)]
pub struct Flip<'a> {
    /// The managed generation.
    pub target: &'a Generation,
    /// The found firewall's tables it removes, as (family, name).
    pub remove_tables: &'a [(String, String)],
    /// The families whose shared iptables INPUT chain it empties.
    pub empty_inputs: &'a [String],
}

/// What publishes a port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Holder {
    /// A socket listening (TCP) or bound (UDP).
    Socket {
        /// The address it is bound to.
        address: IpAddr,
        /// The owning process, `name (pid N)`.
        #[serde(skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
        /// Whether it takes IPv4: bound to an IPv4 address, or an IPv6 one without
        /// `IPV6_V6ONLY` (see [`Listening::takes`]).
        #[serde(skip)]
        ipv4: bool,
    },
    /// A DNAT rule.
    Dnat {
        /// `family table`.
        table: String,
        /// The chain.
        chain: String,
        /// Where it sends the connection (`172.30.0.2:5432`, `[2001:db8::5]:80`).
        to: String,
    },
    /// A redirect rule: to the node itself.
    Redirect {
        /// `family table`.
        table: String,
        /// The chain.
        chain: String,
        /// The port it sends the connection to, when it changes it.
        #[serde(skip_serializing_if = "Option::is_none")]
        port: Option<u16>,
    },
    /// A container the engine says publishes it.
    Container {
        /// Its name.
        name: String,
        /// The host address it is published on (`0.0.0.0`, `::`, `127.0.0.1`…).
        address: String,
    },
}

impl Holder {
    /// What publishes the port, in words (text from outside escaped).
    pub fn in_words(&self) -> String {
        use mesh_lib::text::escape;
        match self {
            Holder::Socket { address, owner, .. } => format!(
                "socket {}{}",
                match address {
                    IpAddr::V6(a) => format!("[{a}]"),
                    a => a.to_string(),
                },
                owner
                    .as_deref()
                    .map(|o| format!(" {}", escape(o)))
                    .unwrap_or_default()
            ),
            Holder::Dnat { table, chain, to } => {
                format!("DNAT to {to} ({}, chain {})", escape(table), escape(chain))
            }
            Holder::Redirect { table, chain, port } => format!(
                "redirect to this node{} ({}, chain {})",
                port.map(|p| format!(", port {p}")).unwrap_or_default(),
                escape(table),
                escape(chain)
            ),
            Holder::Container { name, address } => format!(
                "container {} (published on {})",
                escape(name),
                escape(address)
            ),
        }
    }
}

/// Who reaches a port over one family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "from", content = "ranges")]
pub enum Who {
    /// Any address.
    Anywhere,
    /// Only these ranges.
    Only(Vec<IpNet>),
    /// No one from outside the node.
    Closed,
    /// It depends on rules the preview cannot read.
    Uncertain,
}

impl Who {
    /// Who reaches a port over one family, in words.
    pub fn in_words(&self) -> String {
        match self {
            Who::Anywhere => "anywhere".into(),
            Who::Only(ranges) => format!(
                "{} only",
                ranges
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Who::Closed => "closed".into(),
            Who::Uncertain => "uncertain".into(),
        }
    }
}

/// Who reaches a port, over each family and from the node itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reach {
    /// Over IPv4, from outside the node (the private network included).
    pub ipv4: Who,
    /// Over IPv6, from outside the node.
    pub ipv6: Who,
    /// From the node itself, to loopback.
    pub loopback: bool,
    /// What the verdict depends on that the preview cannot read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
}

/// The verdict on a port: reachable from anywhere, from ranges only, closed, or uncertain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "reachable", content = "ranges")]
pub enum Verdict {
    /// From any address (over the families [`Reach`] says).
    Anywhere,
    /// From these ranges only.
    Ranges(Vec<IpNet>),
    /// From no one outside the node.
    Closed,
    /// It depends on rules the preview cannot read.
    Uncertain,
}

impl Reach {
    /// One verdict for both families: the widest.
    pub fn verdict(&self) -> Verdict {
        use Who::*;
        match (&self.ipv4, &self.ipv6) {
            (Uncertain, _) | (_, Uncertain) => Verdict::Uncertain,
            (Anywhere, _) | (_, Anywhere) => Verdict::Anywhere,
            (Closed, Closed) => Verdict::Closed,
            (a, b) => {
                let mut ranges: Vec<IpNet> = [a, b]
                    .into_iter()
                    .filter_map(|w| match w {
                        Only(r) => Some(r.clone()),
                        _ => None,
                    })
                    .flatten()
                    .collect();
                ranges.sort();
                ranges.dedup();
                Verdict::Ranges(ranges)
            }
        }
    }

    /// The verdict in words: from anywhere, from ranges only, or closed, each family named
    /// where they differ, and loopback where it is all that is left (or missing).
    pub fn in_words(&self) -> String {
        let mut text = if self.ipv4 == self.ipv6 {
            match &self.ipv4 {
                Who::Closed => "closed".to_owned(),
                Who::Uncertain => "uncertain".to_owned(),
                w => format!("reachable from {}", w.in_words()),
            }
        } else {
            let part = |w: &Who, family: &str| match w {
                Who::Closed => format!("closed over {family}"),
                Who::Uncertain => format!("uncertain over {family}"),
                w => format!("from {} over {family}", w.in_words()),
            };
            let (four, six) = (part(&self.ipv4, "IPv4"), part(&self.ipv6, "IPv6"));
            match self.ipv4 {
                Who::Closed | Who::Uncertain => format!("{four}, reachable {six}"),
                _ => format!("reachable {four}, {six}"),
            }
        };
        let closed = self.ipv4 == Who::Closed && self.ipv6 == Who::Closed;
        if closed && self.loopback {
            text.push_str(" (from loopback only)");
        } else if !closed && !self.loopback {
            text.push_str(" (not from loopback)");
        }
        text
    }

    /// Whether a client at `ip` (outside the node) reaches it.
    pub fn reaches(&self, ip: IpAddr) -> Option<bool> {
        let who = if ip.is_ipv4() { &self.ipv4 } else { &self.ipv6 };
        match who {
            Who::Anywhere => Some(true),
            Who::Only(ranges) => Some(ranges.iter().any(|r| r.contains(&ip))),
            Who::Closed => Some(false),
            Who::Uncertain => None,
        }
    }
}

/// What the flip does to a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// Reachable as before.
    Stays,
    /// Reachable now, closed after.
    Closes,
    /// Reachable from fewer sources after.
    Narrows,
    /// Reachable from more sources after.
    Widens,
    /// One side depends on rules the preview cannot read.
    Uncertain,
}

/// One published port (or range of ports), what publishes it, and who reaches it now and after
/// the flip.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Port {
    /// TCP or UDP.
    pub protocol: Protocol,
    /// The port (the first of a range).
    pub port: u16,
    /// The last port of a range a DNAT publishes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<u16>,
    /// What publishes it.
    pub held_by: Vec<Holder>,
    /// Who reaches it now.
    pub now: Reach,
    /// Who reaches it after the flip.
    pub after: Reach,
    /// What the flip does to it.
    pub change: Change,
}

/// The flip preview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preview {
    /// Every published port, by protocol and port.
    pub ports: Vec<Port>,
    /// The clients each verdict was worked out for: the node's addresses a client outside
    /// reaches it at, and the address of each kind of client.
    pub clients: Clients,
}

/// The clients the verdicts are worked out for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Clients {
    /// The node's addresses for clients outside (not loopback, link-local, a container
    /// bridge's or the private network's).
    pub node: Vec<IpAddr>,
    /// The node's address on the private network, when it has it.
    pub private: Option<IpAddr>,
    /// A client from anywhere: an address in no range any rule names.
    pub anywhere: Vec<IpAddr>,
    /// A client in each range a rule (or an opening) names.
    pub ranges: Vec<(IpNet, IpAddr)>,
}

/// Interface names of container runtimes' bridges and their veths: no client outside the node
/// comes from there.
const BRIDGES: [&str; 8] = [
    "docker", "br-", "cni", "podman", "virbr", "veth", "cali", "flannel",
];

fn is_bridge(name: &str) -> bool {
    BRIDGES.iter().any(|b| name.starts_with(b))
}

fn link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// The mesh's rules for `openings` in a found chain on `path` of a table of `family`, as the
/// drivers insert them (at the top): see `mesh_lib::firewall::opening_rule`.
fn opening_rules(
    target: &Generation,
    path: TrafficPath,
    family: Family,
    iptables: bool,
) -> Vec<Rule> {
    let settings = &target.settings;
    target
        .openings
        .iter()
        .filter(|o| o.paths.contains(&path))
        .filter_map(|o: &Opening| {
            let source = match o.from {
                Source::Anywhere => None,
                Source::Private => Some(settings.private_network.range),
                Source::Range(r) => Some(r),
            };
            if source.is_some() && (family == Family::Ip6 || (iptables && family != Family::Ip)) {
                return None;
            }
            let proto = o.protocol.as_str().to_owned();
            let mut conds = Vec::new();
            if let Some(net) = source {
                let mut c = Cond::new(Test::Saddr(vec![IpNet::V4(net)]));
                c.family = Some(Family::Ip);
                conds.push(c);
            }
            let port = o.port.get();
            match path {
                TrafficPath::Incoming => {
                    let mut c = Cond::new(Test::Dport(vec![(port, port)]));
                    c.proto = Some(proto);
                    conds.push(c);
                }
                TrafficPath::Forwarded => {
                    conds.push(Cond::new(Test::Proto(vec![proto])));
                    conds.push(Cond::new(Test::CtOrigDport(vec![(port, port)])));
                }
            }
            Some(Rule {
                conds,
                action: Action::Accept,
                comment: Some(mesh_lib::firewall::opening_comment(o)),
            })
        })
        .collect()
}

/// The rules of a ruleset the mesh builds (the guard, the base ruleset), read as nft would list
/// them.
fn own_rules(rules: &::nftables::schema::Nftables<'_>) -> Ruleset {
    let objects = serde_json::to_value(rules)
        .ok()
        .and_then(|v| v.get("nftables").and_then(Value::as_array).cloned())
        .unwrap_or_default();
    parse::ruleset(&objects, &BTreeMap::new(), &BTreeMap::new())
}

/// The ruleset in force after the flip: `now` with the flip's changes.
pub fn after_flip(now: &Ruleset, flip: &Flip<'_>) -> Ruleset {
    use crate::firewall::iptables::LEGACY;
    // Legacy iptables' filter table where a container runtime keeps its chains: the flip
    // empties only its INPUT (the runtime's chains and FORWARD stay), as it does in force.
    let runtime_keeps = |family: Family| {
        now.chains.iter().any(|c| {
            c.family == family
                && c.table == LEGACY
                && crate::firewall::RUNTIME_CHAINS
                    .iter()
                    .any(|r| c.name.starts_with(r))
        })
    };
    let removed = |c: &rules::Chain| {
        flip.remove_tables
            .iter()
            .any(|(f, t)| *f == c.family.word() && *t == c.table)
            && !(c.table == LEGACY && runtime_keeps(c.family))
    };
    let legacy_inputs: Vec<Family> = flip
        .remove_tables
        .iter()
        .filter(|(_, t)| t == LEGACY)
        .map(|(f, _)| Family::from_word(f))
        .filter(|f| runtime_keeps(*f))
        .collect();
    let mut out = Ruleset {
        chains: now
            .chains
            .iter()
            .filter(|c| !removed(c) && !c.table.starts_with("mesh_"))
            .cloned()
            .collect(),
    };
    let emptied = flip
        .empty_inputs
        .iter()
        .map(|f| (Family::from_word(f), "filter"))
        .chain(legacy_inputs.iter().map(|f| (*f, LEGACY)));
    for (family, table) in emptied {
        if let Some(input) = out.chain_mut(family, table, "INPUT") {
            input.rules.clear();
            if let Some(base) = input.base.as_mut() {
                base.accepts = true;
            }
        }
    }
    for chain in &mut out.chains {
        chain.rules.retain(|r| {
            !r.comment
                .as_deref()
                .is_some_and(|c| c.starts_with(crate::firewall::MARK))
        });
        // The openings go back in at the top of every found chain that stays.
        let Some(base) = chain.base else { continue };
        let path = match base.hook {
            rules::Hook::Input => TrafficPath::Incoming,
            rules::Hook::Forward => TrafficPath::Forwarded,
            _ => continue,
        };
        if base.kind != rules::ChainType::Filter {
            continue;
        }
        let found = crate::firewall::FoundChain {
            family: chain.family.word().to_owned(),
            table: chain.table.clone(),
            name: chain.name.clone(),
            path,
        };
        let iptables = crate::firewall::iptables::speaks(&found);
        if iptables && path == TrafficPath::Incoming && flip.empty_inputs.contains(&found.family) {
            continue;
        }
        let mut rules = opening_rules(flip.target, path, chain.family, iptables);
        rules.append(&mut chain.rules);
        chain.rules = rules;
    }
    out.chains
        .extend(own_rules(&flip.target.firewall.guard).chains);
    if let Some(base) = &flip.target.firewall.base {
        out.chains.extend(own_rules(base).chains);
    }
    out
}

/// Every source range a rule's condition names, by family.
fn named_ranges(rules: &Ruleset) -> BTreeSet<IpNet> {
    let mut out = BTreeSet::new();
    for c in &rules.chains {
        for r in &c.rules {
            for cond in &r.conds {
                if let Test::Saddr(nets) = &cond.test {
                    out.extend(nets.iter().filter(|n| n.prefix_len() > 0).copied());
                }
            }
        }
    }
    out
}

/// An address in `net` that is not the node's (the first hosts, in order).
fn address_in(net: &IpNet, net_of_node: &Interfaces) -> Option<IpAddr> {
    if net.prefix_len() == net.max_prefix_len() {
        return Some(net.addr());
    }
    net.hosts().take(16).find(|ip| !net_of_node.is_local(*ip))
}

/// An address in none of `ranges`, of `family`, not the node's.
fn anywhere(family: Family, ranges: &BTreeSet<IpNet>, net: &Interfaces) -> Option<IpAddr> {
    let candidates: Vec<IpAddr> = match family {
        Family::Ip => [
            [203, 0, 113, 77],
            [198, 51, 100, 77],
            [192, 0, 2, 77],
            [100, 64, 7, 77],
            [9, 9, 9, 77],
            [1, 2, 3, 77],
        ]
        .into_iter()
        .map(|o| IpAddr::V4(Ipv4Addr::from(o)))
        .collect(),
        _ => [
            [0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 0x77],
            [0x2001, 0xdb8, 0xfffe, 0, 0, 0, 0, 0x77],
            [0x2606, 0x4700, 0x77, 0, 0, 0, 0, 0x77],
            [0x2a00, 0x1450, 0x77, 0, 0, 0, 0, 0x77],
        ]
        .into_iter()
        .map(|s| IpAddr::V6(Ipv6Addr::from(s)))
        .collect(),
    };
    candidates
        .into_iter()
        .find(|ip| !ranges.iter().any(|r| r.contains(ip)) && !net.is_local(*ip))
}

/// Works out who reaches what, now and after the flip.
struct Judge<'a> {
    observed: &'a Observed,
    clients: Clients,
    private_range: IpNet,
}

impl Judge<'_> {
    /// Whether the connection ends at a listener: a socket that takes it, or a forwarded
    /// destination (a container, whose own sockets are in another namespace).
    fn ends_open(&self, end: &End, proto: &str) -> bool {
        match end {
            End::Local { daddr, dport } => self
                .observed
                .sockets
                .iter()
                .any(|s| s.protocol.as_str() == proto && s.port == *dport && s.takes(*daddr)),
            End::Forwarded { .. } => true,
            End::Dropped(_) => false,
        }
    }

    /// Whether `p` gets through to a listener: yes, no, or (`None`) it depends on `unknown`.
    fn opens(&self, rules: &Ruleset, p: Packet, unknown: &mut BTreeSet<String>) -> Option<bool> {
        let proto = p.proto.clone();
        let walk = rules.traverse(&self.observed.net, p);
        let open: BTreeSet<bool> = walk
            .ends
            .iter()
            .map(|e| self.ends_open(e, &proto))
            .collect();
        match open.len() {
            1 => open.first().copied(),
            _ => {
                unknown.extend(walk.unknown);
                None
            }
        }
    }

    fn origin(&self, daddr: IpAddr) -> Origin {
        Origin::Interface(
            self.observed
                .net
                .interface_of(daddr)
                .unwrap_or("eth0")
                .to_owned(),
        )
    }

    /// Who reaches `proto`/`port` through `rules`.
    fn reach(&self, rules: &Ruleset, proto: &str, port: u16) -> Reach {
        let mut unknown = BTreeSet::new();
        let mut per_family = |family: Family| -> Who {
            let node: Vec<IpAddr> = self
                .clients
                .node
                .iter()
                .copied()
                .filter(|ip| Family::of(*ip) == family)
                .collect();
            // From anywhere, to any of the node's addresses.
            let from = |me: &Self, saddr: IpAddr, to: &[IpAddr], unknown: &mut BTreeSet<String>| {
                let mut answers = BTreeSet::new();
                for daddr in to {
                    let p = Packet::new(me.origin(*daddr), saddr, *daddr, proto, port);
                    answers.insert(me.opens(rules, p, unknown));
                }
                if answers.contains(&Some(true)) {
                    Some(true)
                } else if answers.contains(&None) {
                    None
                } else {
                    Some(false)
                }
            };
            let anywhere = self
                .clients
                .anywhere
                .iter()
                .find(|ip| Family::of(**ip) == family);
            match anywhere.map(|a| from(self, *a, &node, &mut unknown)) {
                Some(Some(true)) => return Who::Anywhere,
                Some(None) => return Who::Uncertain,
                _ => {}
            }
            let mut only = Vec::new();
            for (range, client) in &self.clients.ranges {
                if Family::of(*client) != family {
                    continue;
                }
                // The private network's clients come in on it, to the node's address there.
                let to: Vec<IpAddr> = match self.clients.private {
                    Some(private) if self.private_range.contains(client) => vec![private],
                    _ => node.clone(),
                };
                match from(self, *client, &to, &mut unknown) {
                    Some(true) => only.push(*range),
                    None => return Who::Uncertain,
                    Some(false) => {}
                }
            }
            // A range inside another that is reached says nothing more.
            let wide = only.clone();
            only.retain(|r| !wide.iter().any(|w| w != r && w.contains(r)));
            if only.is_empty() {
                Who::Closed
            } else {
                Who::Only(only)
            }
        };
        let ipv4 = per_family(Family::Ip);
        let ipv6 = per_family(Family::Ip6);
        let loopback = [
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        ]
        .into_iter()
        .any(|lo| {
            let p = Packet::new(Origin::Local, lo, lo, proto, port);
            self.opens(rules, p, &mut unknown) == Some(true)
        });
        Reach {
            ipv4,
            ipv6,
            loopback,
            unknown: unknown.into_iter().collect(),
        }
    }
}

/// Whether `after` lets fewer, more or the same clients through as `now`.
fn change(now: &Reach, after: &Reach) -> Change {
    let (a, b) = (now.verdict(), after.verdict());
    if a == Verdict::Uncertain || b == Verdict::Uncertain {
        return Change::Uncertain;
    }
    if now.ipv4 == after.ipv4 && now.ipv6 == after.ipv6 {
        return Change::Stays;
    }
    if b == Verdict::Closed {
        return Change::Closes;
    }
    let rank = |w: &Who| match w {
        Who::Anywhere => 2,
        Who::Only(_) => 1,
        _ => 0,
    };
    let wider = |x: &Who, y: &Who| match (x, y) {
        (Who::Only(xs), Who::Only(ys)) => xs.iter().all(|r| ys.iter().any(|s| s.contains(r))),
        _ => rank(x) <= rank(y),
    };
    if wider(&after.ipv4, &now.ipv4) && wider(&after.ipv6, &now.ipv6) {
        Change::Narrows
    } else {
        Change::Widens
    }
}

/// The ports a DNAT or redirect rule publishes: (protocols, ranges); every port when its match
/// names none.
fn published_by(rule: &Rule) -> (Vec<Protocol>, Vec<(u16, u16)>) {
    let mut protos = BTreeSet::new();
    let mut ports = Vec::new();
    for c in rule.conds.iter().filter(|c| !c.negate) {
        match &c.test {
            Test::Proto(names) => protos.extend(names.iter().cloned()),
            Test::Dport(p) => {
                ports.extend(p.iter().copied());
                protos.extend(c.proto.iter().cloned());
            }
            _ => {}
        }
    }
    let protos: Vec<Protocol> = match protos.is_empty() {
        true => vec![Protocol::Tcp, Protocol::Udp],
        false => [Protocol::Tcp, Protocol::Udp]
            .into_iter()
            .filter(|p| protos.contains(p.as_str()))
            .collect(),
    };
    if ports.is_empty() {
        ports.push((1, 65535));
    }
    (protos, ports)
}

fn destination(action: &Action) -> String {
    match action {
        Action::Dnat { addr, port, .. } => {
            let addr = match addr {
                Some(IpAddr::V6(a)) => format!("[{a}]"),
                Some(a) => a.to_string(),
                None => String::new(),
            };
            match port {
                Some(p) => format!("{addr}:{p}"),
                None => addr,
            }
        }
        _ => String::new(),
    }
}

/// The flip preview, from what was observed on the node.
pub fn preview(observed: &Observed, flip: &Flip<'_>) -> Preview {
    let now = parse::ruleset(&observed.ruleset, &observed.saved, &observed.legacy);
    let after = after_flip(&now, flip);
    let (ports, judge) = published(
        observed,
        &now,
        Some(&after),
        &flip.target.settings.private_network,
    );
    let ports = ports
        .into_iter()
        .map(|((protocol, lo, hi), held_by)| {
            let now_reach = judge.reach(&now, protocol.as_str(), lo);
            let after_reach = judge.reach(&after, protocol.as_str(), lo);
            Port {
                protocol,
                port: lo,
                last: (hi != lo).then_some(hi),
                held_by,
                change: change(&now_reach, &after_reach),
                now: now_reach,
                after: after_reach,
            }
        })
        .collect();
    Preview {
        ports,
        clients: judge.clients,
    }
}

/// One published port (or range) and who reaches it now: what `mesh import` declares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Found {
    /// TCP or UDP.
    pub protocol: Protocol,
    /// The port (the first of a range).
    pub port: u16,
    /// The last port of a range a DNAT publishes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<u16>,
    /// What publishes it.
    pub held_by: Vec<Holder>,
    /// Who reaches it now.
    pub now: Reach,
}

/// Every port published on the node and who reaches it through the rules in force, from what
/// was observed; `private` is the private network a client may come from.
pub fn reachable_now(observed: &Observed, private: &mesh_lib::model::PrivateNetwork) -> Vec<Found> {
    let now = parse::ruleset(&observed.ruleset, &observed.saved, &observed.legacy);
    let (ports, judge) = published(observed, &now, None, private);
    ports
        .into_iter()
        .map(|((protocol, lo, hi), held_by)| Found {
            protocol,
            port: lo,
            last: (hi != lo).then_some(hi),
            now: judge.reach(&now, protocol.as_str(), lo),
            held_by,
        })
        .collect()
}

/// Every port published (sockets beyond loopback, every DNAT and redirect, what an engine says
/// its containers publish) with what publishes it, sorted; and the judge of who reaches them,
/// its clients taken from the ranges `now` (and `after`) name.
#[allow(clippy::type_complexity)]
fn published<'a>(
    observed: &'a Observed,
    now: &Ruleset,
    after: Option<&Ruleset>,
    private: &mesh_lib::model::PrivateNetwork,
) -> (BTreeMap<(Protocol, u16, u16), Vec<Holder>>, Judge<'a>) {
    let net = &observed.net;
    let private_range = IpNet::V4(private.range);

    // Every port published: sockets beyond loopback, every DNAT and redirect.
    let mut ports: BTreeMap<(Protocol, u16, u16), Vec<Holder>> = BTreeMap::new();
    for s in observed.sockets.iter().filter(|s| !s.address.is_loopback()) {
        let loopback_mapped = matches!(s.address, IpAddr::V6(a) if a.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()));
        if loopback_mapped {
            continue;
        }
        ports
            .entry((s.protocol, s.port, s.port))
            .or_default()
            .push(Holder::Socket {
                address: s.address,
                owner: s.owner.clone(),
                ipv4: match s.address {
                    IpAddr::V4(_) => true,
                    IpAddr::V6(a) => {
                        a.to_ipv4_mapped().is_some()
                            || (a.is_unspecified() && s.v6only == Some(false))
                    }
                },
            });
    }
    for (chain, rule) in now.rewrites() {
        let (protos, ranges) = published_by(rule);
        for protocol in protos {
            for (lo, hi) in &ranges {
                let table = format!("{} {}", chain.family.word(), chain.table);
                let holder = match &rule.action {
                    Action::Redirect { port } => Holder::Redirect {
                        table,
                        chain: chain.name.clone(),
                        port: *port,
                    },
                    other => Holder::Dnat {
                        table,
                        chain: chain.name.clone(),
                        to: destination(other),
                    },
                };
                ports.entry((protocol, *lo, *hi)).or_default().push(holder);
            }
        }
    }
    // What an engine says its containers publish: named on the ports seen, listed on their own
    // where the namespace shows nothing for them (an engine elsewhere: closed here).
    for p in &observed.published {
        let holder = Holder::Container {
            name: p.container.clone(),
            address: p.host_ip.clone(),
        };
        let mut seen = false;
        for ((protocol, lo, hi), holders) in ports.iter_mut() {
            if *protocol == p.protocol && (*lo..=*hi).contains(&p.port) {
                seen = true;
                if !holders.contains(&holder) {
                    holders.push(holder.clone());
                }
            }
        }
        if !seen {
            ports
                .entry((p.protocol, p.port, p.port))
                .or_default()
                .push(holder);
        }
    }

    // The clients: from anywhere, and from each range a rule names.
    let mut ranges = named_ranges(now);
    if let Some(after) = after {
        ranges.extend(named_ranges(after));
    }
    ranges.insert(private_range);
    let node: Vec<IpAddr> = net
        .addresses
        .iter()
        .filter(|a| {
            let ip = a.net.addr();
            !ip.is_loopback()
                && !link_local(ip)
                && !is_bridge(&a.interface)
                && !private_range.contains(&ip)
        })
        .map(|a| a.net.addr())
        .collect();
    let private_address = IpAddr::V4(private.address);
    let clients = Clients {
        node,
        private: net.is_local(private_address).then_some(private_address),
        anywhere: [Family::Ip, Family::Ip6]
            .into_iter()
            .filter_map(|f| anywhere(f, &ranges, net))
            .collect(),
        ranges: ranges
            .iter()
            .filter_map(|r| address_in(r, net).map(|a| (*r, a)))
            .collect(),
    };
    let judge = Judge {
        observed,
        clients,
        private_range,
    };
    for held_by in ports.values_mut() {
        held_by.sort();
        held_by.dedup();
    }
    (ports, judge)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use mesh_lib::model::{
        FirewallRules, Mode, NodeName, Port as PortNumber, PrivateNetwork, Settings,
    };
    use serde_json::json;

    use super::*;

    fn managed() -> Generation {
        let settings = Settings {
            ports: [
                ("store".to_owned(), PortNumber::new(5432).unwrap()),
                (
                    "broker_management".to_owned(),
                    PortNumber::new(15672).unwrap(),
                ),
                ("bus".to_owned(), PortNumber::new(4222).unwrap()),
            ]
            .into(),
            private_network: PrivateNetwork {
                range: "10.77.0.0/24".parse().unwrap(),
                address: "10.77.0.1".parse().unwrap(),
                hub: false,
            },
        };
        let opening = |setting: &str, port: u16, from: Source| Opening {
            module: "m".into(),
            setting: setting.into(),
            port: PortNumber::new(i64::from(port)).unwrap(),
            protocol: Protocol::Tcp,
            paths: [TrafficPath::Incoming, TrafficPath::Forwarded].into(),
            from,
        };
        let openings = vec![
            opening("bus", 4222, Source::Anywhere),
            opening("store", 5432, Source::Private),
        ];
        Generation {
            format: 1,
            node: NodeName::new("n1").unwrap(),
            mode: Mode::Managed,
            firewall: FirewallRules {
                guard: mesh_lib::firewall::guard_ruleset(&settings),
                base: Some(mesh_lib::firewall::base_ruleset(&settings, &openings)),
            },
            settings,
            modules: BTreeMap::new(),
            files: BTreeMap::new(),
            containers: BTreeMap::new(),
            openings,
            units: BTreeMap::new(),
        }
    }

    fn net() -> Interfaces {
        Interfaces::of(
            &[
                ("lo", "127.0.0.1/8"),
                ("lo", "::1/128"),
                ("eth0", "192.0.2.1/24"),
                ("eth0", "2001:db8:1::1/64"),
                ("wg0", "10.77.0.1/24"),
                ("br-x", "172.30.0.1/24"),
            ],
            &[
                ("eth0", "192.0.2.0/24"),
                ("eth0", "2001:db8:1::/64"),
                ("wg0", "10.77.0.0/24"),
                ("br-x", "172.30.0.0/24"),
            ],
        )
    }

    fn socket(address: &str, port: u16, v6only: Option<bool>) -> Listening {
        Listening {
            protocol: Protocol::Tcp,
            port,
            address: address.parse().unwrap(),
            owner: None,
            v6only,
        }
    }

    fn rule(family: &str, table: &str, chain: &str, expr: Value) -> Value {
        json!({"rule": {"family": family, "table": table, "chain": chain, "expr": expr}})
    }

    fn dport(proto: &str, port: Value) -> Value {
        json!({"match": {"op": "==", "left": {"payload": {"protocol": proto, "field": "dport"}}, "right": port}})
    }

    /// The predecessor's nft tables: 80 and an unreadable 8443 allowed in, its own store
    /// published by a DNAT in a nat table of its own, allowed on the forwarded path.
    fn predecessor() -> Vec<Value> {
        let chain = |table: &str, name: &str, kind: &str, hook: &str, prio: i32, policy: &str| json!({"chain": {"family": if table == "natrt" { "ip" } else { "inet" }, "table": table, "name": name, "type": kind, "hook": hook, "prio": prio, "policy": policy}});
        vec![
            json!({"table": {"family": "inet", "name": "pred"}}),
            chain("pred", "input", "filter", "input", 0, "drop"),
            chain("pred", "forward", "filter", "forward", 0, "drop"),
            json!({"table": {"family": "ip", "name": "natrt"}}),
            chain("natrt", "pre", "nat", "prerouting", -100, "accept"),
            rule(
                "inet",
                "pred",
                "input",
                json!([dport("tcp", json!(80)), {"accept": null}]),
            ),
            rule(
                "inet",
                "pred",
                "input",
                json!([dport("tcp", json!(8443)), {"xt": {"type": "match", "name": "recent"}}, {"accept": null}]),
            ),
            rule(
                "inet",
                "pred",
                "forward",
                json!([{"match": {"op": "in", "left": {"ct": {"key": "status"}}, "right": "dnat"}}, {"accept": null}]),
            ),
            rule(
                "ip",
                "natrt",
                "pre",
                json!([dport("tcp", json!(15432)), {"dnat": {"addr": "172.30.0.2", "port": 5432}}]),
            ),
        ]
    }

    /// Legacy iptables whose filter table Docker shares: the flip empties only its INPUT, as
    /// it does in force; Docker's chains and FORWARD stay.
    #[test]
    fn the_flip_of_a_legacy_table_docker_shares_empties_only_its_input() {
        let save = "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:DOCKER-USER - [0:0]\n-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT\n-A FORWARD -j DOCKER-USER\nCOMMIT\n";
        let now = parse::ruleset(
            &[],
            &BTreeMap::new(),
            &[("ip".to_owned(), save.to_owned())].into(),
        );
        let target = managed();
        let remove = [(
            "ip".to_owned(),
            crate::firewall::iptables::LEGACY.to_owned(),
        )];
        let flip = Flip {
            target: &target,
            remove_tables: &remove,
            empty_inputs: &[],
        };
        let mut after = after_flip(&now, &flip);
        let legacy = crate::firewall::iptables::LEGACY;
        let forward = after.chain_mut(Family::Ip, legacy, "FORWARD").cloned();
        assert!(
            forward.is_some_and(|f| f.base.is_some_and(|b| !b.accepts)),
            "FORWARD stays, its policy DROP"
        );
        assert!(after.chain_mut(Family::Ip, legacy, "DOCKER-USER").is_some());
        let input = after.chain_mut(Family::Ip, legacy, "INPUT").unwrap();
        assert!(input.base.is_some_and(|b| b.accepts), "INPUT accepts");
        assert!(
            input.rules.iter().all(|r| r
                .comment
                .as_deref()
                .is_some_and(|c| c.starts_with(crate::firewall::MARK))),
            "none of the predecessor's rules stay in INPUT"
        );

        // Without Docker's chains the whole filter table goes.
        let alone = save
            .replace(":DOCKER-USER - [0:0]\n", "")
            .replace("-A FORWARD -j DOCKER-USER\n", "");
        let now = parse::ruleset(&[], &BTreeMap::new(), &[("ip".to_owned(), alone)].into());
        let mut after = after_flip(&now, &flip);
        assert!(after.chain_mut(Family::Ip, legacy, "INPUT").is_none());
    }

    fn find(p: &Preview, port: u16) -> &Port {
        p.ports.iter().find(|x| x.port == port).unwrap()
    }

    /// One verdict per port, now and after: a socket the predecessor lets in is closed by the
    /// flip; its own DNAT'd store is listed, reachable over IPv4 only now, closed after (its
    /// table goes); the store socket is the private network's only, through the guard; a
    /// verdict that hangs on a rule the preview cannot read says so.
    #[test]
    fn verdicts_follow_the_packets_way() {
        let target = managed();
        let remove = [("inet".to_owned(), "pred".to_owned())];
        let observed = Observed {
            ruleset: predecessor(),
            sockets: vec![
                socket("::", 80, Some(false)),
                socket("0.0.0.0", 8443, None),
                socket("::", 5432, Some(false)),
                socket("::", 4222, Some(true)),
                socket("127.0.0.1", 9999, None),
            ],
            net: net(),
            ..Observed::default()
        };
        let p = preview(
            &observed,
            &Flip {
                target: &target,
                remove_tables: &remove,
                empty_inputs: &[],
            },
        );
        let listed: Vec<u16> = p.ports.iter().map(|x| x.port).collect();
        assert_eq!(
            listed,
            [80, 4222, 5432, 8443, 15432],
            "not the loopback-only one"
        );

        let web = find(&p, 80);
        assert_eq!(
            (web.now.verdict(), web.after.verdict()),
            (Verdict::Anywhere, Verdict::Closed)
        );
        assert!(web.after.loopback);
        assert_eq!(web.change, Change::Closes);

        let store = find(&p, 15432);
        assert_eq!(
            store.held_by,
            [Holder::Dnat {
                table: "ip natrt".into(),
                chain: "pre".into(),
                to: "172.30.0.2:5432".into()
            }]
        );
        assert_eq!(
            (&store.now.ipv4, &store.now.ipv6),
            (&Who::Anywhere, &Who::Closed)
        );
        assert!(!store.now.loopback);
        assert_eq!(store.change, Change::Closes);

        // Now the predecessor's input lets no one reach 5432; after, the private network.
        let private = find(&p, 5432);
        assert_eq!(private.now.verdict(), Verdict::Closed);
        assert_eq!(
            private.after.verdict(),
            Verdict::Ranges(vec!["10.77.0.0/24".parse().unwrap()])
        );
        assert_eq!(private.change, Change::Widens);

        // The bus: an IPv6-only socket, closed over IPv4 whatever the rules say.
        let bus = find(&p, 4222);
        assert_eq!(
            (&bus.after.ipv4, &bus.after.ipv6),
            (&Who::Closed, &Who::Anywhere)
        );

        let unread = find(&p, 8443);
        assert_eq!(unread.now.verdict(), Verdict::Uncertain);
        assert_eq!(unread.now.unknown, ["iptables match recent"]);
        assert_eq!(unread.after.verdict(), Verdict::Closed);
        assert_eq!(unread.change, Change::Uncertain);
    }

    /// The ruleset after the flip: the found firewall's tables gone, the predecessor's shared
    /// INPUT emptied, the mesh's old rules out of the runtime's chains and the openings back in
    /// at their top, the generation's guard and base ruleset in.
    #[test]
    fn after_the_flip_is_the_ruleset_the_flip_leaves() {
        let target = managed();
        let mut now = parse::ruleset(&predecessor(), &BTreeMap::new(), &BTreeMap::new());
        let input = rules::Chain {
            family: Family::Ip,
            table: "filter".into(),
            name: "INPUT".into(),
            base: Some(rules::Base {
                kind: rules::ChainType::Filter,
                hook: rules::Hook::Input,
                priority: 0,
                accepts: false,
            }),
            rules: vec![Rule {
                conds: vec![],
                action: Action::Accept,
                comment: None,
            }],
        };
        let mut forward = input.clone();
        forward.name = "FORWARD".into();
        forward.base.as_mut().unwrap().hook = rules::Hook::Forward;
        forward.rules = vec![Rule {
            conds: vec![],
            action: Action::Jump("DOCKER".into()),
            comment: Some("mesh: stale".into()),
        }];
        now.chains.extend([input, forward]);
        let after = after_flip(
            &now,
            &Flip {
                target: &target,
                remove_tables: &[("inet".into(), "pred".into())],
                empty_inputs: &["ip".into()],
            },
        );
        let names: Vec<String> = after
            .chains
            .iter()
            .map(|c| format!("{} {} {}", c.family.word(), c.table, c.name))
            .collect();
        assert_eq!(
            names,
            [
                "ip natrt pre",
                "ip filter INPUT",
                "ip filter FORWARD",
                "inet mesh_guard prerouting",
                "inet mesh_base input",
                "inet mesh_base forward"
            ]
        );
        let input = &after.chains[1];
        assert!(input.rules.is_empty() && input.base.unwrap().accepts);
        let comments: Vec<&str> = after.chains[2]
            .rules
            .iter()
            .filter_map(|r| r.comment.as_deref())
            .collect();
        assert_eq!(
            comments,
            [
                "mesh: m bus 4222/tcp from anywhere",
                "mesh: m store 5432/tcp from private"
            ]
        );
    }
}
