//! Reading a firewall into [`Ruleset`]: nft's JSON listing (`nft -j list ruleset`) for every
//! table, and for a table iptables-nft wrote with matches nft's JSON only shows as `xt` (its
//! conntrack, multiport, addrtype matches; its DNAT target), what `iptables-nft-save` prints of
//! it, which says everything. A construct neither reading knows becomes [`Test::Unknown`] or
//! [`Action::Unknown`]: the walk follows both of its outcomes rather than guess.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

use crate::firewall::iptables::LEGACY;

use super::rules::{
    Action, Base, Chain, ChainType, Cond, Family, Hook, Ports, Rule, Ruleset, Test,
};

/// Named sets of a table, by (family, table, name): their elements.
type Sets<'a> = BTreeMap<(String, String, String), &'a Value>;

/// A table read from `iptables-save`, by (family, name): its chains, each with its rules' words.
type SavedTables = BTreeMap<(String, String), Vec<(String, Vec<String>)>>;

/// Reads nft's JSON ruleset (its `nftables` array); the tables in `saved` (family ->
/// `iptables-nft-save` output) whose JSON hides an `xt` match or target are read from the save.
///
/// Legacy iptables (`legacy`: family -> `iptables-legacy-save` output) is read as tables of
/// its own beside nft's: its `filter` table as [`LEGACY`] (what the flip empties), its `nat`
/// table as `iptables-legacy-nat`, their built-in chains hooked at iptables' priorities.
pub fn ruleset(
    objects: &[Value],
    saved: &BTreeMap<String, String>,
    legacy: &BTreeMap<String, String>,
) -> Ruleset {
    let mut sets: Sets<'_> = BTreeMap::new();
    for s in objects.iter().filter_map(|o| o.get("set")) {
        if let (Some(f), Some(t), Some(n)) = (
            s["family"].as_str(),
            s["table"].as_str(),
            s["name"].as_str(),
        ) {
            sets.insert((f.to_owned(), t.to_owned(), n.to_owned()), &s["elem"]);
        }
    }
    // Tables whose JSON says `xt`: read from iptables' own save where there is one.
    let mut from_save: SavedTables = BTreeMap::new();
    for r in objects.iter().filter_map(|o| o.get("rule")) {
        let (Some(f), Some(t)) = (r["family"].as_str(), r["table"].as_str()) else {
            continue;
        };
        let hides = r["expr"]
            .as_array()
            .is_some_and(|e| e.iter().any(|x| x.get("xt").is_some()));
        if hides && !from_save.contains_key(&(f.to_owned(), t.to_owned())) {
            if let Some(chains) = saved.get(f).and_then(|s| save_table(s, t)) {
                from_save.insert((f.to_owned(), t.to_owned()), chains);
            }
        }
    }
    let mut out = Ruleset::default();
    for c in objects.iter().filter_map(|o| o.get("chain")) {
        let (Some(f), Some(t), Some(n)) = (
            c["family"].as_str(),
            c["table"].as_str(),
            c["name"].as_str(),
        ) else {
            continue;
        };
        let base = match (
            c["hook"].as_str().and_then(Hook::from_word),
            c["type"].as_str(),
        ) {
            (Some(hook), Some(kind)) => Some(Base {
                kind: if kind == "nat" {
                    ChainType::Nat
                } else {
                    ChainType::Filter
                },
                hook,
                priority: c["prio"].as_i64().unwrap_or(0) as i32,
                accepts: c["policy"].as_str() != Some("drop"),
            }),
            _ => None,
        };
        out.chains.push(Chain {
            family: Family::from_word(f),
            table: t.to_owned(),
            name: n.to_owned(),
            base,
            rules: Vec::new(),
        });
    }
    for r in objects.iter().filter_map(|o| o.get("rule")) {
        let (Some(f), Some(t), Some(n)) = (
            r["family"].as_str(),
            r["table"].as_str(),
            r["chain"].as_str(),
        ) else {
            continue;
        };
        if from_save.contains_key(&(f.to_owned(), t.to_owned())) {
            continue;
        }
        let rule = json_rule(f, t, r, &sets);
        if let Some(chain) = out.chain_mut(Family::from_word(f), t, n) {
            chain.rules.push(rule);
        }
    }
    for (family, save) in legacy {
        legacy_tables(&mut out, family, save);
    }
    for ((f, t), chains) in &from_save {
        for (name, lines) in chains {
            let names: Vec<&str> = chains.iter().map(|(n, _)| n.as_str()).collect();
            let rules = lines.iter().map(|l| save_rule(l, &names)).collect();
            if let Some(chain) = out.chain_mut(Family::from_word(f), t, name) {
                chain.rules = rules;
            }
        }
    }
    out
}

fn json_rule(family: &str, table: &str, rule: &Value, sets: &Sets<'_>) -> Rule {
    let mut conds = Vec::new();
    let mut action = Action::Continue;
    let comment = rule["comment"].as_str().map(str::to_owned);
    for stmt in rule["expr"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let Some((key, body)) = stmt.as_object().and_then(|o| o.iter().next()) else {
            continue;
        };
        match key.as_str() {
            "match" => conds.push(json_match(family, table, body, sets)),
            "accept" => action = Action::Accept,
            "drop" | "reject" => action = Action::Drop,
            "return" => action = Action::Return,
            "jump" => action = Action::Jump(body["target"].as_str().unwrap_or("").to_owned()),
            "goto" => action = Action::Goto(body["target"].as_str().unwrap_or("").to_owned()),
            "dnat" => {
                let addr = match &body["addr"] {
                    Value::Null => Ok(None),
                    Value::String(s) => s.parse::<IpAddr>().map(Some).map_err(|_| ()),
                    _ => Err(()),
                };
                let port = match &body["port"] {
                    Value::Null => Ok(None),
                    Value::Number(n) => Ok(n.as_u64().and_then(|n| u16::try_from(n).ok())),
                    Value::Object(o) => o
                        .get("range")
                        .and_then(|r| r[0].as_u64())
                        .and_then(|n| u16::try_from(n).ok())
                        .map(Some)
                        .ok_or(()),
                    _ => Err(()),
                };
                action = match (addr, port) {
                    (Ok(addr), Ok(port)) => Action::Dnat {
                        addr,
                        port,
                        family: body["family"].as_str().map(Family::from_word),
                    },
                    _ => Action::Unknown(format!("dnat to {}", body)),
                };
            }
            "redirect" => {
                action = Action::Redirect {
                    port: body["port"].as_u64().and_then(|n| u16::try_from(n).ok()),
                }
            }
            "xt" => {
                let name = body["name"].as_str().unwrap_or("?");
                if body["type"] == "target" {
                    action = Action::Unknown(format!("iptables target {name}"));
                } else {
                    conds.push(Cond::new(Test::Unknown(format!("iptables match {name}"))));
                }
            }
            "vmap" | "queue" => action = Action::Unknown(format!("{key} {body}")),
            // Counters, logs, limits, marks set, sets updated, snat and masquerade (after
            // routing): nothing that decides a new connection's way in.
            _ => {}
        }
    }
    Rule {
        conds,
        action,
        comment,
    }
}

fn port_of(v: &Value) -> Option<u16> {
    v.as_u64().and_then(|n| u16::try_from(n).ok())
}

/// Ports from a right-hand side: a number, a range, a set of those.
fn ports(v: &Value) -> Option<Ports> {
    match v {
        Value::Number(_) => port_of(v).map(|p| vec![(p, p)]),
        Value::Object(o) if o.contains_key("range") => {
            Some(vec![(port_of(&o["range"][0])?, port_of(&o["range"][1])?)])
        }
        Value::Object(o) if o.contains_key("set") => {
            let mut out = Vec::new();
            for item in o["set"].as_array()? {
                out.extend(ports(item)?);
            }
            Some(out)
        }
        Value::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                out.extend(ports(item)?);
            }
            Some(out)
        }
        _ => None,
    }
}

/// Networks from a right-hand side: an address, a prefix, a set of those.
fn nets(v: &Value) -> Option<Vec<IpNet>> {
    match v {
        Value::String(s) => {
            let ip: IpAddr = s.parse().ok()?;
            Some(vec![IpNet::from(ip)])
        }
        Value::Object(o) if o.contains_key("prefix") => {
            let ip: IpAddr = o["prefix"]["addr"].as_str()?.parse().ok()?;
            let len = u8::try_from(o["prefix"]["len"].as_u64()?).ok()?;
            Some(vec![IpNet::new(ip, len).ok()?.trunc()])
        }
        Value::Object(o) if o.contains_key("set") => {
            let mut out = Vec::new();
            for item in o["set"].as_array()? {
                out.extend(nets(item)?);
            }
            Some(out)
        }
        Value::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                out.extend(nets(item)?);
            }
            Some(out)
        }
        _ => None,
    }
}

/// Words from a right-hand side: a string, a list or set of strings.
fn words(v: &Value) -> Option<Vec<String>> {
    match v {
        Value::String(s) => Some(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_owned))
            .collect(),
        Value::Object(o) if o.contains_key("set") => words(&o["set"]),
        _ => None,
    }
}

fn json_match(family: &str, table: &str, m: &Value, sets: &Sets<'_>) -> Cond {
    let unknown = || Cond::new(Test::Unknown(format!("the match {m}")));
    let negate = match m["op"].as_str() {
        Some("==" | "in") => false,
        Some("!=") => true,
        _ => return unknown(),
    };
    let (left, mut right) = (&m["left"], &m["right"]);
    // A named set: its elements.
    if let Some(name) = right.as_str().and_then(|s| s.strip_prefix('@')) {
        match sets.get(&(family.to_owned(), table.to_owned(), name.to_owned())) {
            Some(elements) => right = elements,
            None => return unknown(),
        }
    }
    let mut cond = match (
        left.get("meta"),
        left.get("payload"),
        left.get("ct"),
        left.get("fib"),
    ) {
        (Some(meta), ..) => {
            let test = match meta["key"].as_str() {
                Some("iifname" | "iif") => words(right).map(Test::Iif),
                Some("oifname" | "oif") => words(right).map(Test::Oif),
                Some("l4proto") => words(right).map(Test::Proto),
                Some("nfproto" | "protocol") => match right.as_str() {
                    Some("ipv4" | "ip") => Some(Test::Family(Family::Ip)),
                    Some("ipv6" | "ip6") => Some(Test::Family(Family::Ip6)),
                    _ => None,
                },
                _ => None,
            };
            match test {
                Some(t) => Cond::new(t),
                None => return unknown(),
            }
        }
        (_, Some(payload), ..) => {
            let proto = payload["protocol"].as_str().unwrap_or("");
            let field = payload["field"].as_str().unwrap_or("");
            match (proto, field) {
                ("ip" | "ip6", "saddr" | "daddr") => {
                    let Some(n) = nets(right) else {
                        return unknown();
                    };
                    let mut c = Cond::new(if field == "saddr" {
                        Test::Saddr(n)
                    } else {
                        Test::Daddr(n)
                    });
                    c.family = Some(Family::from_word(proto));
                    c
                }
                ("ip", "protocol") | ("ip6", "nexthdr") => {
                    let Some(w) = words(right) else {
                        return unknown();
                    };
                    let mut c = Cond::new(Test::Proto(w));
                    c.family = Some(Family::from_word(proto));
                    c
                }
                (_, "dport" | "sport") => {
                    let Some(p) = ports(right) else {
                        return unknown();
                    };
                    let mut c = Cond::new(if field == "dport" {
                        Test::Dport(p)
                    } else {
                        Test::Sport(p)
                    });
                    if proto != "th" {
                        c.proto = Some(proto.to_owned());
                    }
                    c
                }
                _ => return unknown(),
            }
        }
        (_, _, Some(ct), _) => {
            let original = ct["dir"].as_str() == Some("original");
            let test = match (ct["key"].as_str(), original) {
                (Some("state"), _) => words(right).map(Test::CtState),
                (Some("status"), _) => words(right).map(Test::CtStatus),
                (Some("proto-dst"), true) => ports(right).map(Test::CtOrigDport),
                (Some("daddr" | "ip daddr" | "ip6 daddr"), true) => {
                    nets(right).map(Test::CtOrigDaddr)
                }
                _ => None,
            };
            match test {
                Some(t) => Cond::new(t),
                None => return unknown(),
            }
        }
        (_, _, _, Some(fib)) => {
            let daddr_type = fib["result"] == "type"
                && fib["flags"]
                    .as_array()
                    .is_some_and(|f| f.len() == 1 && f[0] == "daddr");
            match (daddr_type, words(right)) {
                (true, Some(w)) if w == ["local"] => Cond::new(Test::DaddrLocal),
                _ => return unknown(),
            }
        }
        _ => return unknown(),
    };
    cond.negate = negate;
    cond
}

/// The chains of `table` in an `iptables-save` output, each with its `-A` lines' arguments.
/// Legacy iptables' `filter` and `nat` tables of `family`, from its save, into `out`.
fn legacy_tables(out: &mut Ruleset, family: &str, save: &str) {
    for (table, name, kind) in [
        ("filter", LEGACY.to_owned(), ChainType::Filter),
        ("nat", format!("{LEGACY}-nat"), ChainType::Nat),
    ] {
        let Some(chains) = save_table(save, table) else {
            continue;
        };
        let policies: BTreeMap<&str, &str> = save
            .lines()
            .skip_while(|l| l.strip_prefix('*').map(str::trim) != Some(table))
            .take_while(|l| !l.starts_with("COMMIT"))
            .filter_map(|l| l.strip_prefix(':'))
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                Some((words.next()?, words.next()?))
            })
            .collect();
        let names: Vec<&str> = chains.iter().map(|(n, _)| n.as_str()).collect();
        for (chain, lines) in &chains {
            // iptables' built-in chains and where x_tables hooks them.
            let hooked = match (table, chain.as_str()) {
                ("filter", "INPUT") => Some((Hook::Input, 0)),
                ("filter", "FORWARD") => Some((Hook::Forward, 0)),
                ("filter", "OUTPUT") => Some((Hook::Output, 0)),
                ("nat", "PREROUTING") => Some((Hook::Prerouting, -100)),
                ("nat", "INPUT") => Some((Hook::Input, 100)),
                ("nat", "OUTPUT") => Some((Hook::Output, -100)),
                ("nat", "POSTROUTING") => Some((Hook::Postrouting, 100)),
                _ => None,
            };
            out.chains.push(Chain {
                family: Family::from_word(family),
                table: name.clone(),
                name: chain.clone(),
                base: hooked.map(|(hook, priority)| Base {
                    kind,
                    hook,
                    priority,
                    accepts: policies.get(chain.as_str()) != Some(&"DROP"),
                }),
                rules: lines.iter().map(|l| save_rule(l, &names)).collect(),
            });
        }
    }
}

fn save_table(save: &str, table: &str) -> Option<Vec<(String, Vec<String>)>> {
    let mut chains: Vec<(String, Vec<String>)> = Vec::new();
    let mut inside = false;
    let mut seen = false;
    for line in save.lines() {
        if let Some(name) = line.strip_prefix('*') {
            inside = name.trim() == table;
            seen |= inside;
            continue;
        }
        if !inside {
            continue;
        }
        if line.starts_with("COMMIT") {
            inside = false;
        } else if let Some(rest) = line.strip_prefix(':') {
            if let Some(name) = rest.split_whitespace().next() {
                chains.push((name.to_owned(), Vec::new()));
            }
        } else if let Some(rest) = line.strip_prefix("-A ") {
            let (chain, args) = rest.split_once(' ').unwrap_or((rest, ""));
            if let Some(c) = chains.iter_mut().find(|(n, _)| n == chain) {
                c.1.push(args.to_owned());
            }
        }
    }
    seen.then_some(chains)
}

/// Splits an `iptables-save` line into words, its quoted ones (comments) kept whole.
fn split_words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' if quoted => {
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

fn save_ports(text: &str) -> Option<Ports> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let (lo, hi) = part.split_once(':').unwrap_or((part, part));
        out.push((lo.parse().ok()?, hi.parse().ok()?));
    }
    Some(out)
}

fn save_net(text: &str) -> Option<IpNet> {
    match text.split_once('/') {
        Some((ip, mask)) => {
            let ip: IpAddr = ip.parse().ok()?;
            let len = match mask.parse::<u8>() {
                Ok(len) => len,
                // A dotted mask (`255.255.255.0`).
                Err(_) => {
                    let m: std::net::Ipv4Addr = mask.parse().ok()?;
                    u32::from(m).count_ones() as u8
                }
            };
            Some(IpNet::new(ip, len).ok()?.trunc())
        }
        None => Some(IpNet::from(text.parse::<IpAddr>().ok()?)),
    }
}

/// `A`, `A:P`, `A:P-Q`, `[A6]:P`, `:P`: (address, first port).
fn save_destination(text: &str) -> Option<(Option<IpAddr>, Option<u16>)> {
    let first_port = |p: &str| -> Option<u16> { p.split('-').next()?.parse().ok() };
    if let Some(rest) = text.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(first_port(p)?),
            None => None,
        };
        return Some((Some(ip.parse().ok()?), port));
    }
    match text.rsplit_once(':') {
        Some((ip, port)) if !ip.contains(':') => {
            let addr = if ip.is_empty() {
                None
            } else {
                Some(ip.split('-').next()?.parse().ok()?)
            };
            Some((addr, Some(first_port(port)?)))
        }
        _ => Some((Some(text.split('-').next()?.parse().ok()?), None)),
    }
}

/// Options that say nothing about a new connection's way in: skipped with their value.
const QUIET: [&str; 10] = [
    "--comment",
    "--log-prefix",
    "--log-level",
    "--reject-with",
    "--limit",
    "--limit-burst",
    "--to-source",
    "--set-xmark",
    "--set-mark",
    "--limit-iface-in",
];

/// One `iptables-save` rule (the words after `-A CHAIN`); `chains` are the table's own chains,
/// the jump targets.
fn save_rule(line: &str, chains: &[&str]) -> Rule {
    let words = split_words(line);
    let mut conds = Vec::new();
    let mut action = Action::Continue;
    let mut comment = None;
    let mut proto: Option<String> = None;
    let mut negate = false;
    let mut i = 0;
    let unknown = |w: &[String]| Test::Unknown(format!("iptables {}", w.join(" ")));
    while i < words.len() {
        let w = words[i].as_str();
        let value = words.get(i + 1).map(String::as_str).unwrap_or("");
        let mut push = |test: Test, proto_dep: Option<&String>| {
            conds.push(Cond {
                family: None,
                proto: proto_dep.cloned(),
                negate,
                test,
            });
        };
        let mut step = 2;
        match w {
            "!" => {
                negate = true;
                i += 1;
                continue;
            }
            "-s" | "--source" | "-d" | "--destination" => match save_net(value) {
                Some(n) if w.starts_with("-s") || w == "--source" => {
                    push(Test::Saddr(vec![n]), None)
                }
                Some(n) => push(Test::Daddr(vec![n]), None),
                None => push(unknown(&words[i..i + 2]), None),
            },
            "-i" | "--in-interface" => push(Test::Iif(vec![value.to_owned()]), None),
            "-o" | "--out-interface" => push(Test::Oif(vec![value.to_owned()]), None),
            "-p" | "--protocol" => {
                let name = value.to_ascii_lowercase();
                if name != "all" {
                    proto = Some(name.clone());
                    push(Test::Proto(vec![name]), None);
                }
            }
            "-m" | "--match" => {}
            "--dport" | "--destination-port" | "--dports" | "--destination-ports" => {
                match save_ports(value) {
                    Some(p) => push(Test::Dport(p), proto.as_ref()),
                    None => push(unknown(&words[i..i + 2]), None),
                }
            }
            "--sport" | "--source-port" | "--sports" | "--source-ports" => {
                match save_ports(value) {
                    Some(p) => push(Test::Sport(p), proto.as_ref()),
                    None => push(unknown(&words[i..i + 2]), None),
                }
            }
            "--ctstate" | "--state" => push(
                Test::CtState(value.split(',').map(|s| s.to_ascii_lowercase()).collect()),
                None,
            ),
            "--ctstatus" => push(
                Test::CtStatus(value.split(',').map(|s| s.to_ascii_lowercase()).collect()),
                None,
            ),
            "--ctorigdstport" => match save_ports(value) {
                Some(p) => push(Test::CtOrigDport(p), None),
                None => push(unknown(&words[i..i + 2]), None),
            },
            "--ctorigdst" => match save_net(value) {
                Some(n) => push(Test::CtOrigDaddr(vec![n]), None),
                None => push(unknown(&words[i..i + 2]), None),
            },
            "--dst-type" if value == "LOCAL" => push(Test::DaddrLocal, None),
            // A first packet is a SYN.
            "--syn" => step = 1,
            "-j" | "--jump" | "-g" | "--goto" => {
                action = match value {
                    "ACCEPT" => Action::Accept,
                    "DROP" | "REJECT" => Action::Drop,
                    "RETURN" => Action::Return,
                    "DNAT" => Action::Dnat {
                        addr: None,
                        port: None,
                        family: None,
                    },
                    "REDIRECT" => Action::Redirect { port: None },
                    "LOG" | "MARK" | "CONNMARK" | "CT" | "TCPMSS" | "SNAT" | "MASQUERADE"
                    | "NOTRACK" | "NFLOG" | "TRACE" => Action::Continue,
                    chain if chains.contains(&chain) && (w == "-g" || w == "--goto") => {
                        Action::Goto(chain.to_owned())
                    }
                    chain if chains.contains(&chain) => Action::Jump(chain.to_owned()),
                    other => Action::Unknown(format!("iptables target {other}")),
                };
            }
            "--to-destination" => match (&action, save_destination(value)) {
                (Action::Dnat { .. }, Some((addr, port))) => {
                    action = Action::Dnat {
                        addr,
                        port,
                        family: None,
                    }
                }
                _ => action = Action::Unknown(format!("DNAT --to-destination {value}")),
            },
            "--to-ports" => {
                action = Action::Redirect {
                    port: value.split('-').next().and_then(|p| p.parse().ok()),
                }
            }
            q if QUIET.contains(&q) => {
                if q == "--comment" {
                    comment = Some(value.to_owned());
                }
            }
            other if other.starts_with('-') => {
                // A match option the walk does not read, and its value if it has one.
                let has_value = !value.is_empty() && !value.starts_with('-');
                let end = if has_value { i + 2 } else { i + 1 };
                step = end - i;
                push(unknown(&words[i..end]), None);
            }
            _ => step = 1,
        }
        negate = false;
        i += step;
    }
    Rule {
        conds,
        action,
        comment,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_lines_are_read() {
        let chains = ["DOCKER"];
        let r = save_rule(
            "! -i br-x -p tcp -m tcp --dport 15432 -j DNAT --to-destination 172.30.0.2:5432",
            &chains,
        );
        assert_eq!(
            r.action,
            Action::Dnat {
                addr: Some("172.30.0.2".parse().unwrap()),
                port: Some(5432),
                family: None
            }
        );
        assert_eq!(r.conds.len(), 3);
        assert!(r.conds[0].negate);
        let r = save_rule("-m addrtype --dst-type LOCAL -j DOCKER", &chains);
        assert_eq!(r.action, Action::Jump("DOCKER".into()));
        assert_eq!(r.conds, [Cond::new(Test::DaddrLocal)]);
        let r = save_rule(
            "-p tcp -m conntrack --ctorigdstport 4222 -m comment --comment \"mesh: a b 4222/tcp from anywhere\" -j ACCEPT",
            &chains,
        );
        assert_eq!(
            r.comment.as_deref(),
            Some("mesh: a b 4222/tcp from anywhere")
        );
        assert_eq!(r.conds[1].test, Test::CtOrigDport(vec![(4222, 4222)]));
        let r = save_rule(
            "-p tcp -m multiport --dports 80,8000:8010 -j ACCEPT",
            &chains,
        );
        assert_eq!(r.conds[1].test, Test::Dport(vec![(80, 80), (8000, 8010)]));
        let r = save_rule("-m recent --rcheck --name x -j DROP", &chains);
        assert!(r.conds.iter().all(|c| matches!(c.test, Test::Unknown(_))));
        assert_eq!(
            save_destination("[2001:db8::5]:80"),
            Some((Some("2001:db8::5".parse().unwrap()), Some(80)))
        );
        assert_eq!(save_destination(":22"), Some((None, Some(22))));
        assert_eq!(
            save_destination("172.30.0.2:8000-8010"),
            Some((Some("172.30.0.2".parse().unwrap()), Some(8000)))
        );
    }
}
