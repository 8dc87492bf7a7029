//! A lab of network namespaces for real packets, after `shared/testbed/two-firewalls.sh`:
//!
//! ```text
//!  outside (192.0.2.2, 2001:db8:1::2) ──┐
//!                                        node (192.0.2.1, 2001:db8:1::1; 10.77.0.1; 172.30.0.1)
//!  private (10.77.0.2) ──────────────────┤
//!  ctr (172.30.0.2, the "container") ────┘  (the node's side: br-…, as Docker names a bridge)
//! ```
//!
//! The node runs a predecessor's default-deny nftables firewall and a container runtime's DNAT.
//! Listeners and probes run on threads that entered a namespace (`setns`), so the lab needs only
//! `ip` and `nft`. Everything is removed when the lab is dropped, also when a test fails.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::{feed, Netns};

static LABS: AtomicUsize = AtomicUsize::new(0);

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `f` on a thread inside the network namespace `ns`.
pub fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    mesh_reach::netns::within(Some(ns), || Ok(f())).expect("the namespace can be entered")
}

pub struct Lab {
    pub node: Netns,
    pub outside: Netns,
    pub private: Netns,
    pub ctr: Netns,
}

/// The predecessor: default deny; web (80) and 5432 allowed (so the mesh's store port would be
/// open to the world without the guard); its own store published by DNAT 15432 -> ctr:5432 and
/// allowed on the forward path; a DNAT for the mesh's registry port 5001 -> ctr:5000, which its
/// firewall does not allow.
pub const PREDECESSOR: &str = r#"
table inet pred {
  chain input {
    type filter hook input priority 0; policy drop;
    ct state established,related accept
    iif lo accept
    meta l4proto ipv6-icmp accept
    tcp dport 80 accept
    tcp dport 5432 accept
  }
  chain forward {
    type filter hook forward priority 0; policy drop;
    ct state established,related accept
    ct status dnat tcp dport 5432 accept
  }
}
table ip natrt {
  chain pre {
    type nat hook prerouting priority dstnat;
    tcp dport 15432 dnat to 172.30.0.2:5432
    tcp dport 5001 dnat to 172.30.0.2:5000
  }
}
"#;

impl Lab {
    pub fn new() -> Self {
        let n = LABS.fetch_add(1, Ordering::SeqCst);
        let tag = |t: &str| format!("{t}{n}");
        let lab = Lab {
            node: Netns::new(&tag("n")),
            outside: Netns::new(&tag("o")),
            private: Netns::new(&tag("p")),
            ctr: Netns::new(&tag("c")),
        };
        let id = format!("{}{n}", std::process::id() % 100_000);
        let link = |a: &str, b: &str, ns_a: &Netns, ns_b: &Netns| {
            let (a, b) = (format!("{a}{id}"), format!("{b}{id}"));
            ip(&[
                "link", "add", &a, "netns", &ns_a.name, "type", "veth", "peer", "name", &b,
                "netns", &ns_b.name,
            ]);
            (a, b)
        };
        let (vo, vno) = link("vo", "vno", &lab.outside, &lab.node);
        let (vp, vnp) = link("vp", "vnp", &lab.private, &lab.node);
        // The node's side is named as Docker names a user-defined network's bridge.
        let (vc, vnc) = link("vc", "br-", &lab.ctr, &lab.node);
        let addr = |ns: &Netns, dev: &str, a: &str| {
            ip(&["-n", &ns.name, "addr", "add", a, "dev", dev, "nodad"])
        };
        let up = |ns: &Netns, dev: &str| ip(&["-n", &ns.name, "link", "set", dev, "up"]);
        for ns in [&lab.node, &lab.outside, &lab.private, &lab.ctr] {
            up(ns, "lo");
        }
        addr(&lab.outside, &vo, "192.0.2.2/24");
        addr(&lab.outside, &vo, "2001:db8:1::2/64");
        addr(&lab.node, &vno, "192.0.2.1/24");
        addr(&lab.node, &vno, "2001:db8:1::1/64");
        addr(&lab.private, &vp, "10.77.0.2/24");
        addr(&lab.node, &vnp, "10.77.0.1/24");
        addr(&lab.ctr, &vc, "172.30.0.2/24");
        addr(&lab.node, &vnc, "172.30.0.1/24");
        for (ns, dev) in [
            (&lab.outside, &vo),
            (&lab.node, &vno),
            (&lab.private, &vp),
            (&lab.node, &vnp),
            (&lab.ctr, &vc),
            (&lab.node, &vnc),
        ] {
            up(ns, dev);
        }
        ip(&[
            "-n",
            &lab.ctr.name,
            "route",
            "add",
            "default",
            "via",
            "172.30.0.1",
        ]);
        // The outside knows its way back to the container (no masquerade in the lab).
        ip(&[
            "-n",
            &lab.outside.name,
            "route",
            "add",
            "172.30.0.0/24",
            "via",
            "192.0.2.1",
        ]);
        let ok = lab
            .node
            .exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"])
            .status()
            .unwrap();
        assert!(ok.success());
        lab
    }

    /// Loads nft text into the node's namespace.
    pub fn nft(&self, text: &str) {
        feed(
            self.node.exec(&["nft", "-f", "-"]),
            text,
            "nft -f in the node namespace",
        );
    }

    /// Loads an iptables-restore file into the node's namespace with `tool`.
    pub fn restore(&self, tool: &str, text: &str) {
        feed(
            self.node.exec(&[tool]),
            text,
            &format!("{tool} in the node namespace"),
        );
    }

    /// Serves `hi` on TCP `port` (IPv4 and IPv6) inside `ns`, for as long as the test runs.
    pub fn serve(ns: &Netns, port: u16) {
        let listener = in_ns(&ns.name, || {
            std::net::TcpListener::bind(SocketAddr::from(([0u16; 8], port)))
                .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
                .unwrap()
        });
        std::thread::spawn(move || {
            for mut c in listener.incoming().flatten() {
                let _ = c.write_all(b"hi\n");
            }
        });
    }

    /// Echoes UDP datagrams on `port` (IPv4 and IPv6) inside `ns`, for as long as the test runs.
    pub fn serve_udp(ns: &Netns, port: u16) {
        let socket = in_ns(&ns.name, || {
            std::net::UdpSocket::bind(SocketAddr::from(([0u16; 8], port))).unwrap()
        });
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while let Ok((n, peer)) = socket.recv_from(&mut buf) {
                let _ = socket.send_to(&buf[..n], peer);
            }
        });
    }

    /// Whether a client in `from` gets its datagram echoed by `addr:port`.
    pub fn reaches_udp(from: &Netns, addr: &str, port: u16) -> bool {
        let target = SocketAddr::new(addr.parse().unwrap(), port);
        in_ns(&from.name, || {
            let bind: SocketAddr = if target.is_ipv6() {
                "[::]:0".parse().unwrap()
            } else {
                "0.0.0.0:0".parse().unwrap()
            };
            let socket = std::net::UdpSocket::bind(bind).unwrap();
            socket
                .set_read_timeout(Some(Duration::from_millis(1500)))
                .unwrap();
            let mut buf = [0u8; 8];
            socket.send_to(b"mesh", target).is_ok()
                && socket
                    .recv_from(&mut buf)
                    .is_ok_and(|(n, _)| &buf[..n] == b"mesh")
        })
    }

    /// Whether a client in `from` gets `hi` from `addr:port`.
    pub fn reaches(from: &Netns, addr: &str, port: u16) -> bool {
        let target = SocketAddr::new(addr.parse().unwrap(), port);
        in_ns(&from.name, || {
            // Past the 1 s SYN retransmission: a first SYN can meet an unresolved IPv6 neighbour.
            let Ok(mut s) = TcpStream::connect_timeout(&target, Duration::from_millis(1500)) else {
                return false;
            };
            let _ = s.set_read_timeout(Some(Duration::from_millis(700)));
            let mut buf = [0u8; 3];
            s.read_exact(&mut buf).is_ok() && &buf == b"hi\n"
        })
    }

    /// Probes every (who, from, address, port) at once — a refused probe waits for its
    /// timeout — and says, in the order given, which were reached.
    pub fn probe(probes: &[(&str, &Netns, &str, u16)]) -> Vec<(String, u16, bool)> {
        std::thread::scope(|s| {
            let handles: Vec<_> = probes
                .iter()
                .map(|(who, ns, addr, port)| {
                    s.spawn(move || (who.to_string(), *port, Lab::reaches(ns, addr, *port)))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }
}
