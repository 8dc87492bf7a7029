//! A firewall as rules a packet can be followed through: every table's chains (base chains with
//! their hook, priority and policy), each rule a list of conditions and what it does. Read from
//! nft's JSON or from `iptables-save` ([`super::parse`]); walked by [`Ruleset::traverse`] the
//! way netfilter walks a new connection's first packet: prerouting (the guard, then the first
//! DNAT), the routing decision, then every base chain on the input or the forward hook, in
//! priority order, where a drop in any is final.
//!
//! Invariant: what the walk does not understand (an `xt` match it cannot read, a mark, a
//! vmap) is never guessed: such a condition is *maybe*, both of its outcomes are followed, and
//! a verdict that depends on it says so.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::interfaces::Interfaces;

/// The address family of a table or a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// `ip`: IPv4.
    Ip,
    /// `ip6`: IPv6.
    Ip6,
    /// `inet`: both.
    Inet,
    /// `bridge`, `arp`, `netdev`: not on a routed packet's way.
    Other,
}

impl Family {
    /// From nft's word.
    pub fn from_word(word: &str) -> Family {
        match word {
            "ip" => Family::Ip,
            "ip6" => Family::Ip6,
            "inet" => Family::Inet,
            _ => Family::Other,
        }
    }

    /// nft's word.
    pub fn word(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
            Family::Inet => "inet",
            Family::Other => "other",
        }
    }

    /// Whether a table of this family sees a packet of `packet`'s (`Ip` or `Ip6`).
    pub fn sees(self, packet: Family) -> bool {
        self == packet || self == Family::Inet
    }

    /// The family of an address.
    pub fn of(ip: IpAddr) -> Family {
        if ip.is_ipv4() {
            Family::Ip
        } else {
            Family::Ip6
        }
    }
}

/// A netfilter hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hook {
    /// Before routing.
    Prerouting,
    /// For the node itself.
    Input,
    /// Routed through the node.
    Forward,
    /// Sent by the node.
    Output,
    /// After routing, leaving.
    Postrouting,
}

impl Hook {
    /// From nft's word.
    pub fn from_word(word: &str) -> Option<Hook> {
        Some(match word {
            "prerouting" => Hook::Prerouting,
            "input" => Hook::Input,
            "forward" => Hook::Forward,
            "output" => Hook::Output,
            "postrouting" => Hook::Postrouting,
            _ => return None,
        })
    }
}

/// What a base chain is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainType {
    /// Filters (accept, drop); `route` chains too.
    Filter,
    /// Rewrites addresses (DNAT at prerouting and output).
    Nat,
}

/// The hook, type, priority and policy of a base chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Base {
    /// Filter or nat.
    pub kind: ChainType,
    /// Where it is hooked.
    pub hook: Hook,
    /// Its priority (lower first).
    pub priority: i32,
    /// Whether a packet that falls through is accepted.
    pub accepts: bool,
}

/// A set of ports, as inclusive ranges.
pub type Ports = Vec<(u16, u16)>;

/// What a condition looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Test {
    /// The incoming interface's name, one of these (a trailing `*` is a prefix).
    Iif(Vec<String>),
    /// The outgoing interface's name.
    Oif(Vec<String>),
    /// The transport protocol, by name (`tcp`, `udp`, `icmp`, …).
    Proto(Vec<String>),
    /// The packet's family.
    Family(Family),
    /// The source address, in one of these.
    Saddr(Vec<IpNet>),
    /// The destination address, in one of these.
    Daddr(Vec<IpNet>),
    /// The destination port.
    Dport(Ports),
    /// The source port (a client's: any).
    Sport(Ports),
    /// Conntrack's state (`new` for a first packet).
    CtState(Vec<String>),
    /// Conntrack's status (`dnat` once rewritten).
    CtStatus(Vec<String>),
    /// Conntrack's original destination port (before DNAT).
    CtOrigDport(Ports),
    /// Conntrack's original destination address (before DNAT).
    CtOrigDaddr(Vec<IpNet>),
    /// The destination is one of the node's addresses (`fib daddr type local`, `-m addrtype
    /// --dst-type LOCAL`).
    DaddrLocal,
    /// Something the walk does not read; its words.
    Unknown(String),
}

/// One condition of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    /// The family the condition is for (`ip saddr` in an inet table): another never matches.
    pub family: Option<Family>,
    /// The protocol a port condition is for (`tcp dport`): another never matches.
    pub proto: Option<String>,
    /// `!=`.
    pub negate: bool,
    /// What it looks at.
    pub test: Test,
}

impl Cond {
    /// A plain condition.
    pub fn new(test: Test) -> Self {
        Cond {
            family: None,
            proto: None,
            negate: false,
            test,
        }
    }
}

/// What a rule does when its conditions match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing final (a counter, a log): the next rule.
    Continue,
    /// Accepted by this chain.
    Accept,
    /// Dropped (or rejected).
    Drop,
    /// Back to the calling chain.
    Return,
    /// Into another chain, and back.
    Jump(String),
    /// Into another chain, not back.
    Goto(String),
    /// The destination rewritten.
    Dnat {
        /// The new address (`None`: unchanged).
        addr: Option<IpAddr>,
        /// The new port (`None`: unchanged).
        port: Option<u16>,
        /// The family it is for, in an inet table.
        family: Option<Family>,
    },
    /// To the node itself, on `port` (or the same).
    Redirect {
        /// The new port.
        port: Option<u16>,
    },
    /// Something the walk does not read.
    Unknown(String),
}

/// A rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Every condition must hold.
    pub conds: Vec<Cond>,
    /// Then this.
    pub action: Action,
    /// Its comment (the mesh's rules are marked `mesh: …`).
    pub comment: Option<String>,
}

/// A chain of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// The table's family.
    pub family: Family,
    /// The table.
    pub table: String,
    /// The chain's name.
    pub name: String,
    /// Hook, type, priority and policy, for a base chain.
    pub base: Option<Base>,
    /// Its rules, in order.
    pub rules: Vec<Rule>,
}

/// Every table's chains.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ruleset {
    /// The chains.
    pub chains: Vec<Chain>,
}

/// Three-valued: whether a condition holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tri {
    Yes,
    No,
    Maybe,
}

/// Where a packet comes in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// From outside, on this interface.
    Interface(String),
    /// From the node itself (to loopback or one of its addresses).
    Local,
}

/// The first packet of a connection, as the walk follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// IPv4 or IPv6.
    pub family: Family,
    /// Where it comes in.
    pub origin: Origin,
    /// The client's address.
    pub saddr: IpAddr,
    /// The address it is sent to (rewritten by DNAT).
    pub daddr: IpAddr,
    /// `tcp` or `udp`.
    pub proto: String,
    /// The port it is sent to (rewritten by DNAT).
    pub dport: u16,
    /// The address and port before DNAT.
    pub original: (IpAddr, u16),
    /// Whether DNAT rewrote it.
    pub natted: bool,
    /// The interface it leaves by, once routed (forward).
    pub oif: Option<String>,
}

impl Packet {
    /// A new connection from `saddr` to `daddr:dport` over `proto`, coming in by `origin`.
    pub fn new(origin: Origin, saddr: IpAddr, daddr: IpAddr, proto: &str, dport: u16) -> Self {
        Packet {
            family: Family::of(daddr),
            origin,
            saddr,
            daddr,
            proto: proto.to_owned(),
            dport,
            original: (daddr, dport),
            natted: false,
            oif: None,
        }
    }
}

/// Where a packet ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Delivered to the node itself, at this address and port (after any DNAT).
    Local {
        /// Its destination address.
        daddr: IpAddr,
        /// Its destination port.
        dport: u16,
    },
    /// Forwarded, to this address and port.
    Forwarded {
        /// Its destination address.
        daddr: IpAddr,
        /// Its destination port.
        dport: u16,
    },
    /// Dropped: by which chain, or why.
    Dropped(String),
}

/// Every way a packet may end, and what was not understood on the way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walk {
    /// The possible ends (one, unless something was not understood).
    pub ends: Vec<End>,
    /// What was not understood where it mattered.
    pub unknown: BTreeSet<String>,
}

/// A chain's outcome for a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Accept,
    Drop,
    /// Fell off the end (or returned): the policy of a base chain, the caller's next rule.
    Through,
    Nat(Action),
}

/// Whether an interface name matches a pattern (`eth*` in nft, `eth+` in iptables).
fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern
        .strip_suffix('*')
        .or_else(|| pattern.strip_suffix('+'))
    {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

fn in_ports(ports: &Ports, port: u16) -> bool {
    ports.iter().any(|(lo, hi)| (*lo..=*hi).contains(&port))
}

/// The most outcomes a walk follows before it gives up on a chain (rules it cannot read, each
/// doubling them).
const BUDGET: usize = 4096;

struct Walker<'a> {
    rules: &'a Ruleset,
    net: &'a Interfaces,
    unknown: BTreeSet<String>,
    steps: usize,
}

impl<'a> Walker<'a> {
    fn holds(&self, cond: &Cond, p: &Packet) -> Tri {
        if cond.family.is_some_and(|f| f != p.family) {
            return Tri::No;
        }
        if cond.proto.as_ref().is_some_and(|proto| *proto != p.proto) {
            return Tri::No;
        }
        let yes = |b: bool| if b { Tri::Yes } else { Tri::No };
        let iif = match &p.origin {
            Origin::Interface(name) => name.as_str(),
            Origin::Local => "lo",
        };
        let result = match &cond.test {
            Test::Iif(names) => yes(names.iter().any(|n| name_matches(n, iif))),
            Test::Oif(names) => match (&p.oif, &p.origin) {
                (Some(oif), _) => yes(names.iter().any(|n| name_matches(n, oif))),
                (None, Origin::Local) => yes(names.iter().any(|n| name_matches(n, "lo"))),
                (None, _) => Tri::No,
            },
            Test::Proto(names) => yes(names.contains(&p.proto)),
            Test::Family(f) => yes(*f == p.family),
            Test::Saddr(nets) => yes(nets.iter().any(|n| n.contains(&p.saddr))),
            Test::Daddr(nets) => yes(nets.iter().any(|n| n.contains(&p.daddr))),
            Test::Dport(ports) => yes(in_ports(ports, p.dport)),
            // A client's port is any: only a condition on every port holds.
            Test::Sport(ports) => {
                if in_ports(ports, 1) && in_ports(ports, 65535) && ports.len() == 1 {
                    Tri::Yes
                } else {
                    Tri::Maybe
                }
            }
            // A first packet is new; iptables' `--ctstate DNAT` is a state too.
            Test::CtState(states) => yes(states
                .iter()
                .any(|s| s == "new" || (s == "dnat" && p.natted))),
            Test::CtStatus(states) => yes(p.natted && states.iter().any(|s| s == "dnat")),
            Test::CtOrigDport(ports) => yes(in_ports(ports, p.original.1)),
            Test::CtOrigDaddr(nets) => yes(nets.iter().any(|n| n.contains(&p.original.0))),
            Test::DaddrLocal => yes(self.net.is_local(p.daddr)),
            Test::Unknown(_) => Tri::Maybe,
        };
        match (result, cond.negate) {
            (Tri::Yes, true) => Tri::No,
            (Tri::No, true) => Tri::Yes,
            (r, _) => r,
        }
    }

    /// Whether a rule's conditions hold, and what was not understood if they may.
    fn rule_holds(&self, rule: &Rule, p: &Packet) -> (Tri, Vec<String>) {
        let mut maybe = Vec::new();
        for cond in &rule.conds {
            match self.holds(cond, p) {
                Tri::No => return (Tri::No, Vec::new()),
                Tri::Maybe => maybe.push(match &cond.test {
                    Test::Unknown(words) => words.clone(),
                    Test::Sport(_) => "a match on the client's port".to_owned(),
                    other => format!("{other:?}"),
                }),
                Tri::Yes => {}
            }
        }
        if maybe.is_empty() {
            (Tri::Yes, maybe)
        } else {
            (Tri::Maybe, maybe)
        }
    }

    fn chain(&self, family: Family, table: &str, name: &str) -> Option<&'a Chain> {
        self.rules
            .chains
            .iter()
            .find(|c| c.family == family && c.table == table && c.name == name)
    }

    /// The outcomes of `chain` from rule `from` on, for `p`.
    fn run(&mut self, chain: &'a Chain, from: usize, p: &Packet, depth: usize) -> Vec<Outcome> {
        self.steps += 1;
        if depth > 32 || self.steps > BUDGET {
            self.unknown.insert(format!(
                "chains too deep or too many branches in {}",
                chain.name
            ));
            return vec![Outcome::Accept, Outcome::Drop];
        }
        let mut out = Vec::new();
        for (i, rule) in chain.rules.iter().enumerate().skip(from) {
            let (holds, why) = self.rule_holds(rule, p);
            if holds == Tri::No || rule.action == Action::Continue {
                continue;
            }
            let mut taken = match &rule.action {
                Action::Accept => vec![Outcome::Accept],
                Action::Drop => vec![Outcome::Drop],
                Action::Return => vec![Outcome::Through],
                Action::Dnat { family, .. } if family.is_some_and(|f| f != p.family) => continue,
                Action::Dnat { .. } | Action::Redirect { .. } => {
                    vec![Outcome::Nat(rule.action.clone())]
                }
                Action::Jump(target) | Action::Goto(target) => {
                    let sub = match self.chain(chain.family, &chain.table, target) {
                        Some(c) => self.run(c, 0, p, depth + 1),
                        None => vec![Outcome::Through],
                    };
                    let mut taken = Vec::new();
                    for o in sub {
                        match (o, &rule.action) {
                            // Back from a jump: this chain's next rule.
                            (Outcome::Through, Action::Jump(_)) => {
                                taken.extend(self.run(chain, i + 1, p, depth + 1))
                            }
                            (o, _) => taken.push(o),
                        }
                    }
                    taken
                }
                Action::Unknown(words) => {
                    self.unknown.insert(words.clone());
                    vec![Outcome::Accept, Outcome::Drop]
                }
                Action::Continue => unreachable!("skipped above"),
            };
            if holds == Tri::Yes {
                out.append(&mut taken);
                return dedup(out);
            }
            // It may hold: both ways.
            self.unknown.extend(why);
            out.append(&mut taken);
            out.extend(self.run(chain, i + 1, p, depth + 1));
            return dedup(out);
        }
        out.push(Outcome::Through);
        dedup(out)
    }

    /// The base chains on `hook` that see `p`, in priority order.
    fn hooked(&self, hook: Hook, p: &Packet) -> Vec<&'a Chain> {
        let mut chains: Vec<&'a Chain> = self
            .rules
            .chains
            .iter()
            .filter(|c| c.base.is_some_and(|b| b.hook == hook) && c.family.sees(p.family))
            .collect();
        chains.sort_by_key(|c| c.base.map(|b| b.priority).unwrap_or_default());
        chains
    }

    /// Follows `p` through the base chains of `hook` from the `from`-th on; `then` continues
    /// with each packet that comes through.
    fn through_hook(
        &mut self,
        hook: Hook,
        from: usize,
        p: Packet,
        then: &mut dyn FnMut(&mut Self, Packet) -> Vec<End>,
    ) -> Vec<End> {
        let chains = self.hooked(hook, &p);
        let Some(chain) = chains.get(from).copied() else {
            return then(self, p);
        };
        let base = chain.base.expect("hooked chains are base chains");
        let mut ends = Vec::new();
        for outcome in self.run(chain, 0, &p, 0) {
            let outcome = match outcome {
                Outcome::Through if base.accepts => Outcome::Accept,
                Outcome::Through => Outcome::Drop,
                o => o,
            };
            match outcome {
                Outcome::Drop => ends.push(End::Dropped(format!(
                    "{} {} {}",
                    chain.family.word(),
                    chain.table,
                    chain.name
                ))),
                Outcome::Nat(action) if base.kind == ChainType::Nat && !p.natted => {
                    let mut q = p.clone();
                    match action {
                        Action::Dnat { addr, port, .. } => {
                            if let Some(a) = addr {
                                q.daddr = a;
                            }
                            if let Some(port) = port {
                                q.dport = port;
                            }
                        }
                        Action::Redirect { port: Some(port) } => q.dport = port,
                        _ => {}
                    }
                    q.natted = true;
                    ends.extend(self.through_hook(hook, from + 1, q, then));
                }
                _ => ends.extend(self.through_hook(hook, from + 1, p.clone(), then)),
            }
        }
        ends
    }

    /// After prerouting (or output): routed to the node or forwarded, then the input or forward
    /// hook.
    fn routed(&mut self, mut p: Packet) -> Vec<End> {
        let local = self.net.is_local(p.daddr);
        if local {
            let (daddr, dport) = (p.daddr, p.dport);
            return self.through_hook(Hook::Input, 0, p, &mut |_, _| {
                vec![End::Local { daddr, dport }]
            });
        }
        if p.origin == Origin::Local {
            // Sent by the node itself to a rewritten destination: out, without the forward hook.
            return vec![End::Forwarded {
                daddr: p.daddr,
                dport: p.dport,
            }];
        }
        let Some(oif) = self.net.route_to(p.daddr).map(str::to_owned) else {
            return vec![End::Dropped(format!("no route to {}", p.daddr))];
        };
        p.oif = Some(oif);
        let (daddr, dport) = (p.daddr, p.dport);
        self.through_hook(Hook::Forward, 0, p, &mut |_, _| {
            vec![End::Forwarded { daddr, dport }]
        })
    }
}

fn dedup<T: PartialEq>(mut v: Vec<T>) -> Vec<T> {
    let mut out = Vec::with_capacity(v.len());
    for x in v.drain(..) {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

impl Ruleset {
    /// Follows the first packet of a connection through the node: from outside, prerouting
    /// (filter chains such as the guard, then the first DNAT), routing, then input or forward;
    /// from the node itself, output, then input.
    pub fn traverse(&self, net: &Interfaces, p: Packet) -> Walk {
        let mut walker = Walker {
            rules: self,
            net,
            unknown: BTreeSet::new(),
            steps: 0,
        };
        let first = if p.origin == Origin::Local {
            Hook::Output
        } else {
            Hook::Prerouting
        };
        let ends = walker.through_hook(first, 0, p, &mut |w, q| {
            let mut q = q;
            if q.origin == Origin::Local && w.net.is_local(q.daddr) {
                // Locally delivered: it comes back in on loopback.
                q.origin = Origin::Interface("lo".to_owned());
            }
            w.routed(q)
        });
        Walk {
            ends: dedup(ends),
            unknown: walker.unknown,
        }
    }

    /// The chain `family table name`, if there is one.
    pub fn chain_mut(&mut self, family: Family, table: &str, name: &str) -> Option<&mut Chain> {
        self.chains
            .iter_mut()
            .find(|c| c.family == family && c.table == table && c.name == name)
    }

    /// Every DNAT and redirect: the chain it is in and the rule.
    pub fn rewrites(&self) -> impl Iterator<Item = (&Chain, &Rule)> {
        self.chains.iter().flat_map(|c| {
            c.rules
                .iter()
                .filter(|r| matches!(r.action, Action::Dnat { .. } | Action::Redirect { .. }))
                .map(move |r| (c, r))
        })
    }
}
