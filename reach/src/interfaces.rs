//! The node's network as the kernel has it: every interface, its addresses and the routes, read
//! over netlink in the node's namespace (`--netns`). Genesis checks the private network's range
//! against them, and the flip preview follows a packet through them (which addresses are the
//! node's own, which interface a forwarded packet leaves by).
//!
//! Invariant: a range that collides is named with the interface that holds it; the private
//! network's own interface (the one carrying the node's declared private address with the
//! declared range) is never a collision with itself.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteType};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::protocols::NETLINK_ROUTE;
use serde::Serialize;

/// An address on an interface, with its prefix (`10.77.0.1/24`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Address {
    /// The interface's name.
    pub interface: String,
    /// The address and its prefix length.
    pub net: IpNet,
}

/// A route of a routing table other than `local` (whose entries are the addresses again).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Route {
    /// The interface it leaves by, when it names one.
    pub interface: Option<String>,
    /// Where it leads.
    pub destination: IpNet,
    /// Its routing table (254: main).
    pub table: u32,
    /// Whether it delivers (unicast); a blackhole, unreachable or prohibit route does not.
    pub delivers: bool,
}

/// The addresses and routes of a namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Interfaces {
    /// Every address, on every interface.
    pub addresses: Vec<Address>,
    /// Every route but the local table's.
    pub routes: Vec<Route>,
}

/// Why the interfaces cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the network interfaces{}: {source}", .netns.as_ref().map(|n| format!(" of network namespace {n}")).unwrap_or_default())]
pub struct InterfacesError {
    /// The namespace.
    pub netns: Option<String>,
    /// The cause.
    #[source]
    pub source: std::io::Error,
}

/// Reads the addresses and routes of `netns` (or of the machine's own namespace).
pub fn read(netns: Option<&str>) -> Result<Interfaces, InterfacesError> {
    crate::netns::within(netns, read_here).map_err(|source| InterfacesError {
        netns: netns.map(str::to_owned),
        source,
    })
}

fn read_here() -> std::io::Result<Interfaces> {
    let mut names = BTreeMap::new();
    for m in crate::netlink::dump(
        NETLINK_ROUTE,
        RouteNetlinkMessage::GetLink(LinkMessage::default()),
    )? {
        if let RouteNetlinkMessage::NewLink(link) = m {
            let name = link.attributes.iter().find_map(|a| match a {
                LinkAttribute::IfName(n) => Some(n.clone()),
                _ => None,
            });
            names.insert(link.header.index, name.unwrap_or_default());
        }
    }
    let name_of = |index: u32| {
        names
            .get(&index)
            .cloned()
            .unwrap_or_else(|| format!("interface {index}"))
    };
    let mut out = Interfaces::default();
    for m in crate::netlink::dump(
        NETLINK_ROUTE,
        RouteNetlinkMessage::GetAddress(AddressMessage::default()),
    )? {
        let RouteNetlinkMessage::NewAddress(a) = m else {
            continue;
        };
        // IFA_LOCAL is the interface's own address (on a point-to-point link IFA_ADDRESS is
        // the peer's); IFA_ADDRESS otherwise.
        let local = a.attributes.iter().find_map(|x| match x {
            AddressAttribute::Local(ip) => Some(*ip),
            _ => None,
        });
        let address = local.or_else(|| {
            a.attributes.iter().find_map(|x| match x {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            })
        });
        if let Some(ip) = address {
            if let Ok(net) = IpNet::new(ip, a.header.prefix_len) {
                out.addresses.push(Address {
                    interface: name_of(a.header.index),
                    net,
                });
            }
        }
    }
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let mut request = RouteMessage::default();
        request.header.address_family = family;
        for m in crate::netlink::dump(NETLINK_ROUTE, RouteNetlinkMessage::GetRoute(request))? {
            let RouteNetlinkMessage::NewRoute(r) = m else {
                continue;
            };
            let mut table = u32::from(r.header.table);
            let mut interface = None;
            let mut destination = None;
            for a in &r.attributes {
                match a {
                    RouteAttribute::Table(t) => table = *t,
                    RouteAttribute::Oif(i) => interface = Some(name_of(*i)),
                    RouteAttribute::Destination(RouteAddress::Inet(ip)) => {
                        destination = Some(IpAddr::V4(*ip))
                    }
                    RouteAttribute::Destination(RouteAddress::Inet6(ip)) => {
                        destination = Some(IpAddr::V6(*ip))
                    }
                    _ => {}
                }
            }
            // The local table holds the addresses themselves, their broadcasts and multicast.
            if table == 255 || matches!(r.header.kind, RouteType::Multicast) {
                continue;
            }
            let destination = destination.unwrap_or(match family {
                AddressFamily::Inet => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                _ => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            });
            let Ok(destination) = IpNet::new(destination, r.header.destination_prefix_length)
            else {
                continue;
            };
            out.routes.push(Route {
                interface,
                destination,
                table,
                delivers: matches!(r.header.kind, RouteType::Unicast),
            });
        }
    }
    out.addresses.sort();
    out.addresses.dedup();
    out.routes.sort();
    out.routes.dedup();
    Ok(out)
}

/// Something in the namespace that overlaps the private network's range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Collision {
    /// The interface that holds it.
    pub interface: String,
    /// Its range: an address with its prefix, or a route's destination.
    pub range: IpNet,
    /// `address` or `route`.
    pub what: &'static str,
}

impl std::fmt::Display for Collision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.what {
            "address" => write!(
                f,
                "interface {} has address {} (range {})",
                mesh_lib::text::escape(&self.interface),
                self.range,
                self.range.trunc()
            ),
            _ => write!(
                f,
                "interface {} is routed {}",
                mesh_lib::text::escape(&self.interface),
                self.range
            ),
        }
    }
}

fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

impl Interfaces {
    /// What overlaps the private network `range` (or holds its `address`): every address and
    /// every route of the namespace, except the default routes (they lead everywhere) and what
    /// belongs to an interface in `own` — the private network's own interfaces, as
    /// [`Interfaces::private_interfaces`] finds them.
    pub fn collisions(&self, range: IpNet, address: IpAddr, own: &[String]) -> Vec<Collision> {
        let mut out = Vec::new();
        for a in &self.addresses {
            if own.contains(&a.interface) {
                continue;
            }
            if overlaps(&a.net.trunc(), &range) || a.net.addr() == address {
                out.push(Collision {
                    interface: a.interface.clone(),
                    range: a.net,
                    what: "address",
                });
            }
        }
        for r in &self.routes {
            let Some(interface) = &r.interface else {
                continue;
            };
            if own.contains(interface) || r.destination.prefix_len() == 0 {
                continue;
            }
            // A route an address of the same interface already explains is that address's.
            let explained = out
                .iter()
                .any(|c| &c.interface == interface && c.range.trunc() == r.destination);
            if overlaps(&r.destination, &range) && !explained {
                out.push(Collision {
                    interface: interface.clone(),
                    range: r.destination,
                    what: "route",
                });
            }
        }
        out
    }

    /// The interfaces that are the private network's own: those carrying one of `addresses`
    /// (the node's declared private address, in force or to be) with the range it is declared
    /// with. The mesh's hub interface, once it is up, is not a collision with itself.
    pub fn private_interfaces(&self, own: &[(IpNet, IpAddr)]) -> Vec<String> {
        self.addresses
            .iter()
            .filter(|a| {
                own.iter()
                    .any(|(range, address)| a.net.addr() == *address && a.net.trunc() == *range)
            })
            .map(|a| a.interface.clone())
            .collect()
    }

    /// Whether `ip` is one of the node's own addresses (loopback's included).
    pub fn is_local(&self, ip: IpAddr) -> bool {
        ip.is_loopback()
            || self.addresses.iter().any(|a| a.net.addr() == ip)
            || matches!(ip, IpAddr::V4(v4) if v4.octets()[0] == 127)
    }

    /// The interface holding `ip`, if it is the node's.
    pub fn interface_of(&self, ip: IpAddr) -> Option<&str> {
        self.addresses
            .iter()
            .find(|a| a.net.addr() == ip)
            .map(|a| a.interface.as_str())
    }

    /// The interface a packet to `ip` leaves by: the longest matching delivering route of the
    /// main table. `None` when no route leads there.
    pub fn route_to(&self, ip: IpAddr) -> Option<&str> {
        self.routes
            .iter()
            .filter(|r| r.table == 254 && r.destination.contains(&ip))
            .max_by_key(|r| r.destination.prefix_len())
            .filter(|r| r.delivers)
            .and_then(|r| r.interface.as_deref())
    }
}

#[cfg(test)]
impl Interfaces {
    /// Interfaces for a test: `(interface, address/prefix)` and `(interface, destination)`, every
    /// route in the main table and delivering.
    pub(crate) fn of(addresses: &[(&str, &str)], routes: &[(&str, &str)]) -> Self {
        Self {
            addresses: addresses
                .iter()
                .map(|(i, n)| Address {
                    interface: (*i).into(),
                    net: n.parse().unwrap(),
                })
                .collect(),
            routes: routes
                .iter()
                .map(|(i, d)| Route {
                    interface: Some((*i).into()),
                    destination: d.parse().unwrap(),
                    table: 254,
                    delivers: true,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> Interfaces {
        Interfaces::of(
            &[
                ("lo", "127.0.0.1/8"),
                ("eth0", "192.0.2.1/24"),
                ("wg0", "10.77.0.1/24"),
                ("docker0", "172.17.0.1/16"),
                ("tun-old", "10.77.0.200/32"),
            ],
            &[
                ("eth0", "0.0.0.0/0"),
                ("eth0", "192.0.2.0/24"),
                ("wg0", "10.77.0.0/24"),
                ("docker0", "172.17.0.0/16"),
                ("tun-old", "10.0.0.0/8"),
            ],
        )
    }

    /// The private network's own interface is no collision; a tunnel's address in the range
    /// and a route that covers it are, each named with its interface; default routes and
    /// unrelated ranges are not.
    #[test]
    fn collisions_name_the_interface_and_its_range() {
        let net = lab();
        let range: IpNet = "10.77.0.0/24".parse().unwrap();
        let address: IpAddr = "10.77.0.1".parse().unwrap();
        let own = net.private_interfaces(&[(range, address)]);
        assert_eq!(own, ["wg0"]);
        let found: Vec<String> = net
            .collisions(range, address, &own)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            found,
            [
                "interface tun-old has address 10.77.0.200/32 (range 10.77.0.200/32)",
                "interface tun-old is routed 10.0.0.0/8"
            ]
        );
        // Before the hub is up (genesis), the interface with the address is a collision too.
        assert_eq!(net.collisions(range, address, &[]).len(), 3);
        // A range clear of everything.
        let clear: IpNet = "10.99.0.0/24".parse().unwrap();
        assert_eq!(
            net.collisions(clear, "10.99.0.1".parse().unwrap(), &own)
                .len(),
            1,
            "only tun-old's 10.0.0.0/8 route covers it"
        );
    }

    /// Local addresses and the interface a forwarded packet leaves by.
    #[test]
    fn local_addresses_and_routes() {
        let net = lab();
        assert!(net.is_local("192.0.2.1".parse().unwrap()));
        assert!(net.is_local("127.0.0.5".parse().unwrap()));
        assert!(!net.is_local("172.17.0.2".parse().unwrap()));
        assert_eq!(net.route_to("172.17.0.2".parse().unwrap()), Some("docker0"));
        assert_eq!(net.route_to("10.1.2.3".parse().unwrap()), Some("tun-old"));
        assert_eq!(net.route_to("8.8.8.8".parse().unwrap()), Some("eth0"));
        assert_eq!(net.route_to("2001:db8::1".parse().unwrap()), None);
    }
}
