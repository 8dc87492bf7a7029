//! A fleet checked as a whole once its nodes are built: what no node's own build can see. Two
//! nodes on one private address, more than one hub of the private network, a node whose private
//! network is not the fleet's range, two nodes of one name — each refused naming both nodes and
//! the file and line where each says it, before anything is sent anywhere.
//!
//! Pure: the nodes' generations in, the conflicts out (the lines are looked up in the
//! declarations' texts, where the value is written in the node's own file; elsewhere the file
//! alone is named).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use mesh_lib::model::PrivateNetwork;
use mesh_lib::Generation;

/// One node as the check sees it: its name in the fleet file, its declaration, what its
/// generation says of it.
pub struct Member<'a> {
    /// Its name in the fleet file.
    pub name: &'a str,
    /// Its declaration.
    pub declaration: &'a Path,
    /// Its generation.
    pub generation: &'a Generation,
}

/// Where a node says something: its declaration, and the line when its own file writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    /// The node (its name in the fleet file).
    pub node: String,
    /// The file.
    pub file: PathBuf,
    /// The line, from 1, when the file writes the value itself.
    pub line: Option<usize>,
}

impl std::fmt::Display for Said {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{} ({}:{line})", self.node, self.file.display()),
            None => write!(f, "{} ({})", self.node, self.file.display()),
        }
    }
}

/// What the fleet as a whole gets wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// Two nodes (or more) on one private address.
    SameAddress {
        /// The address.
        address: Ipv4Addr,
        /// The nodes, where each says it.
        nodes: Vec<Said>,
    },
    /// More than one hub.
    Hubs {
        /// The hubs, where each says it.
        nodes: Vec<Said>,
    },
    /// A node whose private network is not the fleet's range (the hub's, else the most
    /// nodes').
    OtherRange {
        /// The fleet's range, and the node that sets it.
        fleet: (ipnet::Ipv4Net, Said),
        /// The node, its range and address.
        node: (PrivateNetwork, Said),
    },
    /// Two nodes (or more) whose declarations give one name.
    SameName {
        /// The name.
        name: String,
        /// The nodes, where each says it.
        nodes: Vec<Said>,
    },
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |nodes: &[Said]| {
            nodes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" and ")
        };
        match self {
            Conflict::SameAddress { address, nodes } => write!(
                f,
                "nodes {} have one private address, {address}: each node of the private network needs its own",
                list(nodes)
            ),
            Conflict::Hubs { nodes } => write!(
                f,
                "nodes {} are each the private network's hub: a fleet has one",
                list(nodes)
            ),
            Conflict::OtherRange { fleet, node } => write!(
                f,
                "node {} puts its private address {} in {}, not in the fleet's private network {} (that of {})",
                node.1, node.0.address, node.0.range, fleet.0, fleet.1
            ),
            Conflict::SameName { name, nodes } => write!(
                f,
                "nodes {} are both named {name} by their declarations: a node's name is its own",
                list(nodes)
            ),
        }
    }
}

/// The conflicts of `members` as a fleet, in a stable order: none for a consistent fleet.
pub fn check(members: &[Member<'_>]) -> Vec<Conflict> {
    let mut out = Vec::new();
    let texts: BTreeMap<&str, String> = members
        .iter()
        .map(|m| {
            (
                m.name,
                std::fs::read_to_string(m.declaration).unwrap_or_default(),
            )
        })
        .collect();
    let said = |m: &Member<'_>, pattern: &dyn Fn(&str) -> bool| Said {
        node: m.name.to_owned(),
        file: m.declaration.to_owned(),
        line: texts[m.name].lines().position(pattern).map(|i| i + 1),
    };

    let mut names: BTreeMap<&str, Vec<&Member<'_>>> = BTreeMap::new();
    for m in members {
        names.entry(m.generation.node.as_str()).or_default().push(m);
    }
    for (name, same) in names.into_iter().filter(|(_, m)| m.len() > 1) {
        out.push(Conflict::SameName {
            name: name.to_owned(),
            nodes: same
                .iter()
                .map(|m| {
                    said(m, &|l| {
                        l.contains("name") && l.contains(&format!("\"{name}\""))
                    })
                })
                .collect(),
        });
    }

    let hubs: Vec<&Member<'_>> = members.iter().filter(|m| network(m).hub).collect();
    if hubs.len() > 1 {
        out.push(Conflict::Hubs {
            nodes: hubs.iter().map(|m| said(m, &says_hub)).collect(),
        });
    }

    // The fleet's range: the hub's, else the one most nodes are in (the first of equals).
    let mut counted: BTreeMap<ipnet::Ipv4Net, usize> = BTreeMap::new();
    for m in members {
        *counted.entry(network(m).range).or_default() += 1;
    }
    let fleet_range = hubs.first().map(|h| network(h).range).or_else(|| {
        let most = counted.values().max()?;
        counted.iter().find(|(_, n)| *n == most).map(|(r, _)| *r)
    });
    if let Some(range) = fleet_range {
        let setter = hubs
            .first()
            .copied()
            .or_else(|| members.iter().find(|m| network(m).range == range))
            .expect("some node is in it");
        for m in members.iter().filter(|m| network(m).range != range) {
            let written = network(m).range.to_string();
            out.push(Conflict::OtherRange {
                fleet: (
                    range,
                    said(setter, &|l| l.contains(&format!("\"{range}\""))),
                ),
                node: (
                    network(m).clone(),
                    said(m, &|l| l.contains(&format!("\"{written}\""))),
                ),
            });
        }
    }

    let mut addresses: BTreeMap<Ipv4Addr, Vec<&Member<'_>>> = BTreeMap::new();
    for m in members {
        addresses.entry(network(m).address).or_default().push(m);
    }
    for (address, same) in addresses.into_iter().filter(|(_, m)| m.len() > 1) {
        let written = format!("\"{address}\"");
        out.push(Conflict::SameAddress {
            address,
            nodes: same
                .iter()
                .map(|m| said(m, &|l| l.contains("address") && l.contains(&written)))
                .collect(),
        });
    }
    out
}

/// A member's private network, as its generation says.
fn network<'a>(m: &Member<'a>) -> &'a PrivateNetwork {
    &m.generation.settings.private_network
}

/// Whether a line of a declaration makes its node the hub.
fn says_hub(line: &str) -> bool {
    let squeezed: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    squeezed.contains("hub=true")
}

/// What the nodes of a fleet's tree say of its private network, read from the text of their
/// declarations (`nodes/*.ncl`, as `mesh init` and `mesh import` write them): what a node that
/// joins must not take.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The fleet's range, as the first node that says one says it.
    pub range: Option<ipnet::Ipv4Net>,
    /// The addresses the nodes have.
    pub addresses: Vec<Ipv4Addr>,
    /// The node that is the hub, if one is.
    pub hub: Option<String>,
}

/// What the declarations under `tree`'s `nodes/` but `except`'s own say of the private
/// network (see [`Taken`]); nothing for a tree without nodes yet.
pub fn taken_in(tree: &Path, except: &str) -> Taken {
    let mut taken = Taken::default();
    let Ok(entries) = std::fs::read_dir(tree.join("nodes")) else {
        return taken;
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "ncl")
                && p.file_stem().is_some_and(|s| s != except)
                && !p.to_string_lossy().ends_with(".credentials.ncl")
        })
        .collect();
    files.sort();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let (range, addresses, hub) = said_in(&text);
        taken.range = taken.range.or(range);
        taken.addresses.extend(addresses);
        if taken.hub.is_none() && hub {
            taken.hub = file.file_stem().map(|s| s.to_string_lossy().into_owned());
        }
    }
    taken
}

/// What a declaration's text says of the private network: its range, its addresses, whether
/// it makes its node the hub.
fn said_in(text: &str) -> (Option<ipnet::Ipv4Net>, Vec<Ipv4Addr>, bool) {
    let quoted = |key: &str| -> Vec<String> {
        text.match_indices(&format!("{key} = \""))
            .filter_map(|(at, m)| text[at + m.len()..].split('"').next().map(str::to_owned))
            .collect()
    };
    (
        quoted("range").iter().find_map(|r| r.parse().ok()),
        quoted("address")
            .iter()
            .filter_map(|a| a.parse::<Ipv4Addr>().ok())
            .collect(),
        text.lines().any(says_hub),
    )
}

/// The private network `tree`'s `nodes/NODE.ncl` gives its node already, if it is written and
/// says one: what an import of that node again keeps.
pub fn own(tree: &Path, node: &str) -> Option<PrivateNetwork> {
    let text = std::fs::read_to_string(tree.join("nodes").join(format!("{node}.ncl"))).ok()?;
    let (range, addresses, hub) = said_in(&text);
    Some(PrivateNetwork {
        range: range?,
        address: *addresses.first()?,
        hub,
    })
}

/// The fleet's range when no node says one yet: `mesh init`'s.
pub const DEFAULT_RANGE: &str = "10.77.0.0/24";

/// The private network a node joining a fleet of `taken` gets: the fleet's range (`mesh
/// init`'s for a first node), its first address no node has, and the hub's role only when no
/// node has it. `None` when the range is full.
pub fn joining(taken: &Taken) -> Option<PrivateNetwork> {
    let range = taken
        .range
        .unwrap_or_else(|| DEFAULT_RANGE.parse().expect("a valid range"));
    Some(PrivateNetwork {
        range,
        address: free_address(range, &taken.addresses)?,
        hub: taken.hub.is_none(),
    })
}

/// Where a node an import writes into a fleet's tree stands on its private network, and why:
/// what the import writes into its declaration and says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Placed {
    /// Its private network.
    #[serde(flatten)]
    pub network: PrivateNetwork,
    /// Why it has that address and role, in words.
    pub why: String,
}

/// A fleet's range with no address left for a node that joins.
#[derive(Debug, thiserror::Error)]
#[error("the fleet's private network {range} has no free address left for {node}: every address in it is a node's; widen the range in the nodes' declarations, or give {node} an address by hand")]
pub struct RangeFull {
    /// The fleet's range.
    pub range: ipnet::Ipv4Net,
    /// The node that joins.
    pub node: String,
}

/// The private network `node` gets in the fleet's tree `tree`: what its declaration there
/// gives it already (an import written again keeps it), else what is free ([`joining`]).
pub fn place(tree: &Path, node: &str) -> Result<Placed, RangeFull> {
    if let Some(network) = own(tree, node) {
        return Ok(Placed {
            why: format!("kept: nodes/{node}.ncl gives it already"),
            network,
        });
    }
    let taken = taken_in(tree, node);
    let network = joining(&taken).ok_or_else(|| RangeFull {
        range: taken
            .range
            .unwrap_or_else(|| DEFAULT_RANGE.parse().expect("a valid range")),
        node: node.to_owned(),
    })?;
    let why = if taken.addresses.is_empty() && taken.range.is_none() {
        "the fleet's first node: mesh init's defaults, and the hub".to_owned()
    } else {
        let role = match &taken.hub {
            Some(hub) => format!("not the hub ({hub} is)"),
            None => "the hub (no node of the fleet is)".to_owned(),
        };
        format!(
            "the first address of the fleet's range {} no node has; {role}",
            network.range
        )
    };
    Ok(Placed { network, why })
}

/// The first address of `range` no node of `taken` has, past the network's own address (and
/// before its broadcast): the one a node that joins the fleet gets.
pub fn free_address(range: ipnet::Ipv4Net, taken: &[Ipv4Addr]) -> Option<Ipv4Addr> {
    range.hosts().find(|a| !taken.contains(a))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use mesh_lib::model::{FirewallRules, Mode, NodeName, Settings};

    use super::*;

    fn generation(name: &str, range: &str, address: &str, hub: bool) -> Generation {
        let settings = Settings {
            ports: BTreeMap::new(),
            private_network: PrivateNetwork {
                range: range.parse().unwrap(),
                address: address.parse().unwrap(),
                hub,
            },
        };
        Generation {
            format: 1,
            node: NodeName::new(name).unwrap(),
            mode: Mode::Managed,
            firewall: FirewallRules {
                guard: mesh_lib::firewall::guard_ruleset(&settings),
                base: None,
            },
            settings,
            modules: BTreeMap::new(),
            files: BTreeMap::new(),
            containers: BTreeMap::new(),
            openings: Vec::new(),
            units: BTreeMap::new(),
        }
    }

    /// A declaration as `mesh init` writes one, its private network on line 4.
    fn declaration(
        dir: &Path,
        file: &str,
        name: &str,
        (range, address, hub): (&str, &str, bool),
    ) -> PathBuf {
        let path = dir.join(format!("{file}.ncl"));
        std::fs::write(
            &path,
            format!(
                "mesh.node {{\n  name = \"{name}\",\n  settings = {{\n    private_network = {{ range = \"{range}\", address = \"{address}\", hub = {hub} }},\n  }},\n}}\n"
            ),
        )
        .unwrap();
        path
    }

    fn conflicts(nodes: &[(&str, &str, &str, &str, bool)]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let made: Vec<(String, PathBuf, Generation)> = nodes
            .iter()
            .map(|(fleet_name, name, range, address, hub)| {
                (
                    fleet_name.to_string(),
                    declaration(dir.path(), fleet_name, name, (range, address, *hub)),
                    generation(name, range, address, *hub),
                )
            })
            .collect();
        let members: Vec<Member<'_>> = made
            .iter()
            .map(|(name, declaration, generation)| Member {
                name,
                declaration,
                generation,
            })
            .collect();
        check(&members)
            .iter()
            .map(|c| {
                c.to_string()
                    .replace(&dir.path().display().to_string(), "D")
            })
            .collect()
    }

    /// A fleet as `mesh init` and the examples make it is one network: nothing to say.
    #[test]
    fn a_consistent_fleet_passes() {
        let none = conflicts(&[
            ("a", "a", "10.77.0.0/24", "10.77.0.1", true),
            ("b", "b", "10.77.0.0/24", "10.77.0.2", false),
        ]);
        assert!(none.is_empty(), "{none:?}");
    }

    /// A second node given the first's address and the hub role (what an import wrote before
    /// it asked the fleet), and one in another range: each named with both nodes, the file and
    /// the line.
    #[test]
    fn one_address_two_hubs_another_range_and_one_name_are_named() {
        assert_eq!(
            conflicts(&[
                ("node1", "node1", "10.77.0.0/24", "10.77.0.1", true),
                ("node2", "node2", "10.77.0.0/24", "10.77.0.1", true),
                ("node3", "node3", "10.88.0.0/24", "10.88.0.3", false),
                ("node4", "node1", "10.77.0.0/24", "10.77.0.4", false),
            ]),
            [
                "nodes node1 (D/node1.ncl:2) and node4 (D/node4.ncl:2) are both named node1 by their declarations: a node's name is its own",
                "nodes node1 (D/node1.ncl:4) and node2 (D/node2.ncl:4) are each the private network's hub: a fleet has one",
                "node node3 (D/node3.ncl:4) puts its private address 10.88.0.3 in 10.88.0.0/24, not in the fleet's private network 10.77.0.0/24 (that of node1 (D/node1.ncl:4))",
                "nodes node1 (D/node1.ncl:4) and node2 (D/node2.ncl:4) have one private address, 10.77.0.1: each node of the private network needs its own",
            ]
        );
    }

    /// The address a joining node gets: the first of the range no node has.
    #[test]
    fn a_joining_node_gets_the_first_free_address() {
        let range: ipnet::Ipv4Net = "10.77.0.0/24".parse().unwrap();
        let taken: Vec<Ipv4Addr> = ["10.77.0.1", "10.77.0.2", "10.77.0.4"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(
            free_address(range, &taken),
            Some("10.77.0.3".parse().unwrap())
        );
        let full: ipnet::Ipv4Net = "10.77.0.0/30".parse().unwrap();
        assert_eq!(
            free_address(
                full,
                &["10.77.0.1".parse().unwrap(), "10.77.0.2".parse().unwrap()]
            ),
            None
        );
    }

    /// A node that joins a fleet gets what is free: the first free address of the fleet's
    /// range, and the hub's role only while no node has it; a first node, `mesh init`'s.
    #[test]
    fn a_joining_node_gets_what_is_free() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            joining(&taken_in(dir.path(), "node1")),
            Some(PrivateNetwork {
                range: DEFAULT_RANGE.parse().unwrap(),
                address: "10.77.0.1".parse().unwrap(),
                hub: true,
            }),
            "a first node"
        );
        std::fs::create_dir_all(dir.path().join("nodes")).unwrap();
        declaration(
            &dir.path().join("nodes"),
            "node1",
            "node1",
            ("10.88.0.0/24", "10.88.0.1", true),
        );
        declaration(
            &dir.path().join("nodes"),
            "node3",
            "node3",
            ("10.88.0.0/24", "10.88.0.2", false),
        );
        let taken = taken_in(dir.path(), "node2");
        assert_eq!(taken.hub.as_deref(), Some("node1"));
        assert_eq!(
            joining(&taken),
            Some(PrivateNetwork {
                range: "10.88.0.0/24".parse().unwrap(),
                address: "10.88.0.3".parse().unwrap(),
                hub: false,
            })
        );
        let placed = place(dir.path(), "node2").unwrap();
        assert_eq!(
            placed.network.address,
            "10.88.0.3".parse::<Ipv4Addr>().unwrap()
        );
        assert_eq!(
            placed.why,
            "the first address of the fleet's range 10.88.0.0/24 no node has; not the hub (node1 is)"
        );
        assert!(place(dir.path(), "node3").unwrap().why.starts_with("kept"));
        // Written again, a node keeps what it has.
        assert_eq!(
            own(dir.path(), "node3"),
            Some(PrivateNetwork {
                range: "10.88.0.0/24".parse().unwrap(),
                address: "10.88.0.2".parse().unwrap(),
                hub: false,
            })
        );
    }
}
