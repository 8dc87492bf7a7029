//! The firewall found at adoption, as recorded in the store, and which of its tables are the
//! predecessor's firewall (what the flip removes) and which a container runtime's.

use super::{FirewallError, MARK};

/// The firewall found at adoption, as recorded in the store (JSON): every table as `nft list
/// table` prints it, and for iptables-nft's tables what `iptables-nft-save` prints, since only
/// iptables can load those back in a form iptables still speaks.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Dump {
    /// "family name" -> the table as nft lists it.
    pub tables: std::collections::BTreeMap<String, String>,
    /// "ip" or "ip6" -> `iptables-nft-save` / `ip6tables-nft-save` output.
    pub iptables: std::collections::BTreeMap<String, String>,
    /// "ip" or "ip6" -> `iptables-legacy-save` / `ip6tables-legacy-save` output, for each
    /// family whose legacy tables held rules.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub legacy: std::collections::BTreeMap<String, String>,
    /// The daemon that keeps it (firewalld, ufw), when one does: the flip stops it, a rollback
    /// across the flip starts it again, and its own tables come from it, never from this dump.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<super::daemon::Daemon>,
    /// firewalld's runtime configuration, zone by zone, as found (see
    /// [`super::daemon::Zones`]): a rollback across the flip sets back any zone whose runtime
    /// settings differ from it once firewalld has loaded its files — what was found in force,
    /// not only what its files say.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub firewalld_zones: super::daemon::Zones,
}

impl Dump {
    /// Reads a recorded dump.
    pub fn parse(bytes: &[u8]) -> Result<Self, FirewallError> {
        serde_json::from_slice(bytes)
            .map_err(|e| FirewallError::Listing(format!("the recorded firewall dump: {e}")))
    }

    /// The tables that hold the found firewall (a filter chain on the input or forward hook),
    /// as (family, name): what the flip removes. A runtime's NAT tables are not the firewall, and
    /// a container runtime's tables are not the predecessor's (see [`is_runtime_table`]).
    pub fn firewall_tables(&self) -> Vec<(String, String)> {
        self.tables
            .iter()
            .filter(|(key, text)| {
                (text.contains("type filter hook input")
                    || text.contains("type filter hook forward"))
                    && !is_runtime_table(key, text)
            })
            .filter_map(|(key, _)| split_key(key))
            .chain(
                self.legacy
                    .keys()
                    .map(|family| (family.clone(), LEGACY.to_owned())),
            )
            .collect()
    }

    /// The families (`ip`, `ip6`) whose iptables `filter` table is shared by the container
    /// runtime and the predecessor: the runtime's chains stay, the predecessor's INPUT chain is
    /// its firewall (Docker never writes INPUT), so the flip empties that chain alone.
    pub fn shared_inputs(&self) -> Vec<String> {
        self.tables
            .iter()
            .filter(|(key, text)| {
                is_runtime_table(key, text) && text.contains("type filter hook input")
            })
            .filter_map(|(key, _)| split_key(key))
            .filter(|(family, name)| name == "filter" && matches!(family.as_str(), "ip" | "ip6"))
            .map(|(family, _)| family)
            .collect()
    }

    /// An `iptables-nft-restore --noflush` batch that puts a shared INPUT chain back as it was
    /// found: its policy and its rules (not the mesh's, which the next converge inserts).
    pub(super) fn input_batch(&self, family: &str) -> Option<String> {
        input_batch_of(self.iptables.get(family)?)
    }
}

/// An `iptables-restore --noflush` batch that puts the INPUT chain of `save` (what an
/// iptables' `-save` printed) back as it was: its policy and its rules, not the mesh's.
pub(super) fn input_batch_of(save: &str) -> Option<String> {
    let filter = save
        .split("\n*")
        .find(|section| section.trim_start_matches('*').starts_with("filter"))?;
    let mut policy = "ACCEPT";
    let mut rules = String::new();
    for line in filter.lines() {
        if let Some(rest) = line.strip_prefix(":INPUT ") {
            policy = rest.split_whitespace().next().unwrap_or("ACCEPT");
        } else if line.starts_with("-A INPUT ") && !line.contains(&format!("--comment \"{MARK}")) {
            rules.push_str(line);
            rules.push('\n');
        }
    }
    Some(format!(
        "*filter\n:INPUT {policy} [0:0]\n-F INPUT\n{rules}COMMIT\n"
    ))
}

/// The name a family's legacy iptables rules go by among the found firewall's tables (as
/// (family, name)): what the flip removes of them and a rollback loads back.
pub const LEGACY: &str = "iptables-legacy";

/// The chains a container runtime writes into iptables' tables: Docker's (`DOCKER`,
/// `DOCKER-USER`, `DOCKER-ISOLATION-STAGE-1`, …), Podman's (netavark's `NETAVARK_*`, CNI's
/// `CNI-*`) and Kubernetes' kube-proxy (`KUBE-*`).
pub const RUNTIME_CHAINS: [&str; 4] = ["DOCKER", "NETAVARK", "CNI-", "KUBE-"];
/// The nftables tables of their own: Docker's `docker-bridges`, netavark's `netavark`.
pub const RUNTIME_TABLES: [&str; 2] = ["docker", "netavark"];

/// Whether a table (`family name`, and its text as nft lists it) is a container runtime's
/// ([`RUNTIME_TABLES`], or holding one of [`RUNTIME_CHAINS`]). The runtime adds and removes its
/// rules as containers come and go: the flip does not remove them (the runtime could no longer
/// publish a port), and a rollback does not load an old copy of them.
pub fn is_runtime_table(key: &str, text: &str) -> bool {
    let named = key
        .split_once(' ')
        .is_some_and(|(_, name)| RUNTIME_TABLES.iter().any(|t| name.starts_with(t)));
    named
        || text.lines().any(|l| {
            l.trim_start()
                .strip_prefix("chain ")
                .is_some_and(|chain| RUNTIME_CHAINS.iter().any(|c| chain.starts_with(c)))
        })
}

pub(super) fn split_key(key: &str) -> Option<(String, String)> {
    key.split_once(' ')
        .map(|(f, n)| (f.to_owned(), n.to_owned()))
}

pub(super) fn is_iptables_table(family: &str, name: &str) -> bool {
    matches!(family, "ip" | "ip6")
        && matches!(name, "filter" | "nat" | "mangle" | "raw" | "security")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Docker's tables are the runtime's; the predecessor's INPUT in the table it shares comes
    /// back from the save with its policy and rules, never the mesh's own.
    #[test]
    fn runtime_tables_and_the_shared_input() {
        let shared = "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy drop;\n\t}\n\tchain DOCKER-USER {\n\t}\n}\n";
        let pred = "table inet pred {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t}\n}\n";
        let dump = Dump {
            tables: [
                ("ip filter".to_owned(), shared.to_owned()),
                ("inet pred".to_owned(), pred.to_owned()),
                ("ip docker-bridges".to_owned(), String::new()),
            ]
            .into(),
            iptables: [(
                "ip".to_owned(),
                "# Generated by iptables-nft-save\n*nat\n:INPUT ACCEPT [0:0]\n-A INPUT -j X\nCOMMIT\n*filter\n:INPUT DROP [12:34]\n:DOCKER-USER - [0:0]\n-A INPUT -p tcp -m tcp --dport 22 -m comment --comment \"mesh: ssh ssh 22/tcp from anywhere\" -j ACCEPT\n-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT\n-A DOCKER-USER -j RETURN\nCOMMIT\n".to_owned(),
            )]
            .into(),
            ..Dump::default()
        };
        assert!(is_runtime_table("ip filter", shared));
        assert!(is_runtime_table("ip docker-bridges", ""));
        assert!(is_runtime_table("inet netavark", ""));
        assert!(is_runtime_table(
            "ip nat",
            "table ip nat {\n\tchain CNI-HOSTPORT-DNAT {\n\t}\n}\n"
        ));
        assert!(is_runtime_table(
            "ip filter",
            "table ip filter {\n\tchain KUBE-FORWARD {\n\t}\n}\n"
        ));
        assert!(!is_runtime_table("inet pred", pred));
        assert_eq!(dump.firewall_tables(), [("inet".into(), "pred".into())]);
        assert_eq!(dump.shared_inputs(), ["ip"]);
        assert_eq!(
            dump.input_batch("ip").unwrap(),
            "*filter\n:INPUT DROP [0:0]\n-F INPUT\n-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT\nCOMMIT\n"
        );
        assert_eq!(dump.input_batch("ip6"), None);
    }
}
