//! What is actually reachable on a node: its listening TCP sockets and bound UDP sockets, read
//! from `/proc/net/{tcp,tcp6,udp,udp6}` of its network namespace, each with the process that
//! owns it where `/proc/*/fd` tells. The flip is previewed from this, not from the found
//! firewall's allow list (which does not see what a container runtime forwards).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use mesh_lib::model::Protocol;
use serde::Serialize;

/// A socket that accepts traffic from outside the machine.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Listening {
    /// TCP or UDP.
    pub protocol: Protocol,
    /// The port.
    pub port: u16,
    /// The address it is bound to (`0.0.0.0` or `::` for every one).
    pub address: IpAddr,
    /// The owning process, as `name (pid N)`, when it can be found.
    pub owner: Option<String>,
    /// For an IPv6 socket, whether it takes IPv6 only (`IPV6_V6ONLY`); an IPv6 socket without
    /// it bound to `::` takes IPv4 too. `None` when the kernel did not say (then the
    /// namespace's `net.ipv6.bindv6only` is assumed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v6only: Option<bool>,
}

impl Listening {
    /// Whether a packet for `ip` (one of the node's addresses) reaches this socket: bound to it,
    /// or to every address of its family — an IPv6 one without `IPV6_V6ONLY` takes IPv4 too.
    pub fn takes(&self, ip: IpAddr) -> bool {
        match (self.address, ip) {
            (a, b) if a == b => true,
            (IpAddr::V4(a), IpAddr::V4(_)) => a.is_unspecified(),
            (IpAddr::V6(a), IpAddr::V6(_)) => a.is_unspecified(),
            (IpAddr::V6(a), IpAddr::V4(b)) => {
                a.to_ipv4_mapped() == Some(b) || (a.is_unspecified() && self.v6only == Some(false))
            }
            (IpAddr::V4(_), IpAddr::V6(_)) => false,
        }
    }
}

/// Why the sockets cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the listening sockets{}: {source}", .netns.as_ref().map(|n| format!(" of network namespace {n}")).unwrap_or_default())]
pub struct SocketsError {
    /// The namespace.
    pub netns: Option<String>,
    /// The cause.
    #[source]
    pub source: std::io::Error,
}

/// Parses one `/proc/net/{tcp,udp}{,6}` table: (address, port, state, inode) per line.
pub fn parse_table(text: &str, v6: bool) -> Vec<(IpAddr, u16, u8, u64)> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (addr, port) = fields.get(1)?.split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let state = u8::from_str_radix(fields.get(3)?, 16).ok()?;
            let inode = fields.get(9)?.parse().ok()?;
            let address = if v6 {
                // Four 32-bit words, each in the kernel's (little-endian) byte order.
                let mut bytes = [0u8; 16];
                for (i, chunk) in addr.as_bytes().chunks(8).enumerate() {
                    let word = u32::from_str_radix(std::str::from_utf8(chunk).ok()?, 16).ok()?;
                    bytes[i * 4..i * 4 + 4].copy_from_slice(&word.to_le_bytes());
                }
                IpAddr::V6(Ipv6Addr::from(bytes))
            } else {
                IpAddr::V4(Ipv4Addr::from(
                    u32::from_str_radix(addr, 16).ok()?.to_le_bytes(),
                ))
            };
            Some((address, port, state, inode))
        })
        .collect()
}

fn loopback(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// socket inode -> "name (pid N)", from every process's open descriptors.
fn owners() -> BTreeMap<u64, String> {
    let mut out = BTreeMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        // A process names itself: its name is shown escaped (see `mesh_lib::text`).
        let name = std::fs::read_to_string(p.path().join("comm"))
            .map(|c| mesh_lib::text::escape(c.trim_end_matches('\n')).into_owned())
            .unwrap_or_default();
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                if let Some(inode) = target
                    .to_str()
                    .and_then(|t| t.strip_prefix("socket:["))
                    .and_then(|t| t.strip_suffix(']'))
                    .and_then(|t| t.parse().ok())
                {
                    out.entry(inode)
                        .or_insert_with(|| format!("{name} (pid {pid})"));
                }
            }
        }
    }
    out
}

/// inode -> `IPV6_V6ONLY` of every IPv6 TCP and UDP socket, from the kernel's socket diagnostics
/// (`/proc/net` does not show it). Empty when they cannot be asked.
fn v6only_flags() -> BTreeMap<u64, bool> {
    use netlink_packet_sock_diag::constants::{AF_INET6, IPPROTO_TCP, IPPROTO_UDP};
    use netlink_packet_sock_diag::inet::nlas::Nla;
    use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
    use netlink_packet_sock_diag::SockDiagMessage;
    let mut out = BTreeMap::new();
    for protocol in [IPPROTO_TCP, IPPROTO_UDP] {
        let request = SockDiagMessage::InetRequest(InetRequest {
            family: AF_INET6,
            protocol,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::all(),
            socket_id: SocketId::new_v6(),
        });
        let Ok(answers) = crate::netlink::dump(netlink_sys::protocols::NETLINK_SOCK_DIAG, request)
        else {
            continue;
        };
        for m in answers {
            if let SockDiagMessage::InetResponse(r) = m {
                if let Some(v6only) = r.nlas.iter().find_map(|n| match n {
                    Nla::SkV6Only(b) => Some(*b),
                    _ => None,
                }) {
                    out.insert(u64::from(r.header.inode), v6only);
                }
            }
        }
    }
    out
}

/// The namespace's default for IPv6 sockets that do not say (`net.ipv6.bindv6only`).
fn bindv6only() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only").is_ok_and(|s| s.trim() == "1")
}

type Tables = (Vec<(Protocol, IpAddr, u16, u64)>, BTreeMap<u64, bool>, bool);

fn read_tables(include_loopback: bool) -> std::io::Result<Tables> {
    Ok((read_proc(include_loopback)?, v6only_flags(), bindv6only()))
}

fn read_proc(include_loopback: bool) -> std::io::Result<Vec<(Protocol, IpAddr, u16, u64)>> {
    let mut out = Vec::new();
    for (file, protocol, v6, wanted_state) in [
        ("tcp", Protocol::Tcp, false, 0x0A),
        ("tcp6", Protocol::Tcp, true, 0x0A),
        ("udp", Protocol::Udp, false, 0x07),
        ("udp6", Protocol::Udp, true, 0x07),
    ] {
        let text = match std::fs::read_to_string(format!("/proc/thread-self/net/{file}")) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for (address, port, state, inode) in parse_table(&text, v6) {
            if state == wanted_state && (include_loopback || !loopback(&address)) {
                out.push((protocol, address, port, inode));
            }
        }
    }
    Ok(out)
}

/// Every socket not bound to loopback, in `netns` (or the machine's own namespace).
pub fn listening(netns: Option<&str>) -> Result<Vec<Listening>, SocketsError> {
    sockets(netns, false)
}

/// Every listening (TCP) or bound (UDP) socket, loopback ones too: what takes a port.
pub fn bound(netns: Option<&str>) -> Result<Vec<Listening>, SocketsError> {
    sockets(netns, true)
}

fn sockets(netns: Option<&str>, include_loopback: bool) -> Result<Vec<Listening>, SocketsError> {
    let err = |source| SocketsError {
        netns: netns.map(str::to_owned),
        source,
    };
    let (tables, v6only, default_v6only) =
        crate::netns::within(netns, || read_tables(include_loopback)).map_err(err)?;
    let owners = owners();
    let mut out: Vec<Listening> = tables
        .into_iter()
        .map(|(protocol, address, port, inode)| Listening {
            protocol,
            port,
            address,
            owner: owners.get(&inode).cloned(),
            v6only: address
                .is_ipv6()
                .then(|| v6only.get(&inode).copied().unwrap_or(default_v6only)),
        })
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's byte order, for both families.
    #[test]
    fn parses_proc_net_lines() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n";
        assert_eq!(
            parse_table(v4, false),
            vec![("127.0.0.1".parse().unwrap(), 8080, 0x0A, 4242)]
        );
        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000000000000000000001000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0 100 0 0 10 0\n";
        assert_eq!(
            parse_table(v6, true),
            vec![("::1".parse().unwrap(), 22, 0x0A, 77)]
        );
    }
}
