//! The firewall, spoken in nft's language — through libnftables in process, or the `nft`
//! command where the library cannot be opened — inside `--netns` when given, so tests never
//! touch the machine's own ruleset.
//!
//! On every node the mesh's guard table is replaced in one `nft -f` transaction. On an adopted
//! node the mesh loads no table of its own that accepts or drops by default: each opening is
//! inserted at the top of the **found firewall's own** input and forward chains, marked by a
//! comment starting `mesh: ` — an accept in a table of the mesh's could not help, since a drop in
//! any base chain is final. Converging is idempotent: the mesh's rules in force are compared with
//! the wanted ones, and only a difference is written, again in one transaction.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use mesh_lib::firewall::{
    opening_comment, opening_rule, render_nft, render_rule, BASE_TABLE, GUARD_TABLE,
};
use mesh_lib::model::{Opening, Settings, TrafficPath};
use nftables::types::NfFamily;
use serde_json::Value;

/// The prefix of the comment on every rule the mesh puts in a found chain.
pub const MARK: &str = "mesh: ";

/// A firewall operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum FirewallError {
    /// `nft` could not be started.
    #[error("cannot run nft{}: {source}", netns_note(.netns))]
    Spawn {
        /// The namespace.
        netns: Option<String>,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The network namespace cannot be entered (it does not exist, or no privilege).
    #[error("cannot enter network namespace {netns}: {source}")]
    Netns {
        /// The namespace.
        netns: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `nft` refused; its own message.
    #[error("nft {what} failed{}: {stderr}", netns_note(.netns))]
    Nft {
        /// What was asked.
        what: String,
        /// The namespace.
        netns: Option<String>,
        /// nft's message.
        stderr: String,
    },
    /// A firewall kind neither driver speaks is in force.
    #[error("{0}: the mesh speaks nftables tables and iptables-nft, not this; adoption needs the found firewall in one of those")]
    NotCovered(String),
    /// `nft -j` printed something that is not its JSON.
    #[error("cannot read nft's listing: {0}")]
    Listing(String),
}

fn netns_note(netns: &Option<String>) -> String {
    netns
        .as_ref()
        .map(|n| format!(" in network namespace {n}"))
        .unwrap_or_default()
}

/// nftables, in a network namespace or not: through libnftables in process when it can be
/// opened (see [`crate::libnft`]), through the `nft` command otherwise.
#[derive(Debug, Clone)]
pub struct Nft {
    netns: Option<String>,
    in_process: bool,
}

/// A base chain of the found firewall that openings go into.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FoundChain {
    /// `ip`, `ip6` or `inet`.
    pub family: String,
    /// Its table.
    pub table: String,
    /// Its name.
    pub name: String,
    /// Incoming (input hook) or forwarded (forward hook).
    pub path: TrafficPath,
}

/// A rule of the mesh's in a found chain.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct MeshRule {
    family: String,
    table: String,
    chain: String,
    comment: String,
    handle: u64,
}

/// Whether one of the mesh's tables in force is the wanted one: the same chains, and the same
/// rules by their comments and count, in order.
fn same_table(ruleset: &[Value], name: &str, wanted: &nftables::schema::Nftables<'_>) -> bool {
    use nftables::schema::{NfListObject, NfObject};
    let in_table = |o: &&Value, kind: &str| {
        o.get(kind)
            .is_some_and(|x| x["table"] == name && x["family"] == "inet")
    };
    let chains: Vec<&str> = ruleset
        .iter()
        .filter(|o| in_table(o, "chain"))
        .filter_map(|o| o["chain"]["name"].as_str())
        .collect();
    let rules: Vec<(&str, Option<&str>)> = ruleset
        .iter()
        .filter(|o| in_table(o, "rule"))
        .filter_map(|o| Some((o["rule"]["chain"].as_str()?, o["rule"]["comment"].as_str())))
        .collect();
    let mut want_chains = Vec::new();
    let mut want_rules = Vec::new();
    for o in wanted.objects.iter() {
        match o {
            NfObject::ListObject(NfListObject::Chain(c)) => want_chains.push(c.name.as_ref()),
            NfObject::ListObject(NfListObject::Rule(r)) => {
                want_rules.push((r.chain.as_ref(), r.comment.as_deref()))
            }
            _ => {}
        }
    }
    chains == want_chains && rules == want_rules
}

/// The `nft` commands (text) that replace one of the mesh's tables. When its base chains are already the
/// wanted ones (hook, priority, policy), the table is flushed and refilled: deleting a table
/// with base chains makes the kernel wait out an RCU grace period, the largest part of a
/// converge. Otherwise it is deleted, if it exists, and built anew.
fn replace_table(ruleset: &[Value], name: &str, rules: &nftables::schema::Nftables<'_>) -> String {
    use nftables::schema::{NfListObject, NfObject};
    let present: Vec<&Value> = ruleset
        .iter()
        .filter_map(|o| o.get("chain"))
        .filter(|c| c["table"] == name && c["family"] == "inet")
        .collect();
    let wanted: Vec<Value> = rules
        .objects
        .iter()
        .filter_map(|o| match o {
            NfObject::ListObject(NfListObject::Chain(c)) => serde_json::to_value(c).ok(),
            _ => None,
        })
        .collect();
    let spec = |c: &Value| {
        (
            c["name"].clone(),
            c["hook"].clone(),
            c["prio"].clone(),
            c["policy"].clone(),
        )
    };
    let same_chains = present.len() == wanted.len()
        && present.iter().zip(&wanted).all(|(p, w)| spec(p) == spec(w));
    let exists = ruleset
        .iter()
        .filter_map(|o| o.get("table"))
        .any(|t| t["name"] == name && t["family"] == "inet");
    let mut commands = String::new();
    if exists && same_chains {
        commands.push_str(&format!("flush table inet {name}\n"));
        for o in rules.objects.iter() {
            if let NfObject::ListObject(NfListObject::Rule(r)) = o {
                commands.push_str(&format!(
                    "add rule inet {name} {} {}\n",
                    r.chain,
                    render_rule(&r.expr, r.comment.as_deref())
                ));
            }
        }
    } else {
        if exists {
            commands.push_str(&format!("delete table inet {name}\n"));
        }
        commands.push_str(&render_nft(rules));
    }
    commands
}

/// The firewall a node should have.
pub struct Want<'a> {
    /// The guard.
    pub guard: &'a nftables::schema::Nftables<'static>,
    /// The base ruleset (managed node) or none (adopted node: removed if present).
    pub base: Option<&'a nftables::schema::Nftables<'static>>,
    /// The settings the openings are read with.
    pub settings: &'a Settings,
    /// The openings to converge through the found chains (none on a managed node).
    pub openings: &'a [Opening],
    /// Tables of the found firewall to remove (the flip).
    pub remove_tables: &'a [(String, String)],
    /// Families whose iptables INPUT chain is the predecessor's in a table the container
    /// runtime shares: emptied, policy accept (the flip), the rest of the table left alone.
    pub empty_inputs: &'a [String],
}

/// The firewall found at adoption, as recorded in the store (JSON): every table as `nft list
/// table` prints it, and for iptables-nft's tables what `iptables-nft-save` prints, since only
/// iptables can load those back in a form iptables still speaks.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Dump {
    /// "family name" -> the table as nft lists it.
    pub tables: std::collections::BTreeMap<String, String>,
    /// "ip" or "ip6" -> `iptables-nft-save` / `ip6tables-nft-save` output.
    pub iptables: std::collections::BTreeMap<String, String>,
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
    fn input_batch(&self, family: &str) -> Option<String> {
        let save = self.iptables.get(family)?;
        let filter = save
            .split("\n*")
            .find(|section| section.trim_start_matches('*').starts_with("filter"))?;
        let mut policy = "ACCEPT";
        let mut rules = String::new();
        for line in filter.lines() {
            if let Some(rest) = line.strip_prefix(":INPUT ") {
                policy = rest.split_whitespace().next().unwrap_or("ACCEPT");
            } else if line.starts_with("-A INPUT ")
                && !line.contains(&format!("--comment \"{MARK}"))
            {
                rules.push_str(line);
                rules.push('\n');
            }
        }
        Some(format!(
            "*filter\n:INPUT {policy} [0:0]\n-F INPUT\n{rules}COMMIT\n"
        ))
    }
}

/// Whether a table (`family name`, and its text as nft lists it) is a container runtime's:
/// Docker's iptables chains (`DOCKER`, `DOCKER-USER`, `DOCKER-ISOLATION-STAGE-1`, …) or its
/// nftables tables (`docker-bridges`). The runtime adds and removes its rules as containers come
/// and go: the flip does not remove them (Docker could no longer publish a port), and a
/// rollback does not load an old copy of them.
pub fn is_runtime_table(key: &str, text: &str) -> bool {
    key.split_once(' ')
        .is_some_and(|(_, name)| name.starts_with("docker"))
        || text
            .lines()
            .any(|l| l.trim_start().starts_with("chain DOCKER"))
}

fn split_key(key: &str) -> Option<(String, String)> {
    key.split_once(' ')
        .map(|(f, n)| (f.to_owned(), n.to_owned()))
}

fn is_iptables_table(family: &str, name: &str) -> bool {
    matches!(family, "ip" | "ip6")
        && matches!(name, "filter" | "nat" | "mangle" | "raw" | "security")
}

/// What a converge did.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Converged {
    /// Whether the base ruleset was loaded or removed.
    pub base: bool,
    /// Whether the guard was written.
    pub guard: bool,
    /// Tables of the found firewall removed (the flip).
    pub removed_tables: usize,
    /// Rules of the mesh's inserted into found chains.
    pub inserted: usize,
    /// Rules of the mesh's removed from found chains (no longer wanted, or to be rewritten).
    pub removed: usize,
    /// The predecessor's INPUT chains emptied in tables the container runtime shares (the
    /// flip).
    pub emptied_inputs: usize,
}

/// The comment of an `iptables -S` line, unquoted.
fn iptables_comment(line: &str) -> Option<String> {
    let rest = &line[line.find("--comment ")? + "--comment ".len()..];
    if let Some(quoted) = rest.strip_prefix('"') {
        Some(quoted[..quoted.find('"')?].to_owned())
    } else {
        Some(rest.split_whitespace().next()?.to_owned())
    }
}

/// A chain made by `iptables` on its nft backend: spoken through `iptables`, never edited with
/// `nft` (iptables-nft owns its tables' layout).
pub fn is_iptables_nft(chain: &FoundChain) -> bool {
    matches!(chain.family.as_str(), "ip" | "ip6")
        && matches!(
            chain.table.as_str(),
            "filter" | "nat" | "mangle" | "raw" | "security"
        )
        && chain
            .name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c == '_' || c == '-')
}

fn family_of(name: &str) -> Option<NfFamily> {
    match name {
        "ip" => Some(NfFamily::IP),
        "ip6" => Some(NfFamily::IP6),
        "inet" => Some(NfFamily::INet),
        _ => None,
    }
}

impl Nft {
    /// `nft` in `netns`, or in the machine's own namespace when `None`.
    pub fn new(netns: Option<String>) -> Self {
        Self {
            netns,
            in_process: crate::libnft::available(),
        }
    }

    /// The same driver, always through the `nft` command (what it falls back to when
    /// libnftables cannot be opened).
    pub fn with_command(netns: Option<String>) -> Self {
        Self {
            netns,
            in_process: false,
        }
    }

    /// Whether it calls libnftables in process.
    pub fn in_process(&self) -> bool {
        self.in_process
    }

    /// The namespace it works in.
    pub fn netns(&self) -> Option<&str> {
        self.netns.as_deref()
    }

    fn command(&self, tool: &str) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, tool]);
                c
            }
            None => Command::new(tool),
        }
    }

    /// Lists `what` (`ruleset`, `table inet NAME`), as JSON (`nft -j`) or nft's text.
    fn list(&self, what: &str, json: bool) -> Result<String, FirewallError> {
        let command = format!("list {what}");
        if let Some(outcome) = self.library(&command, json, &command) {
            return outcome;
        }
        let mut args: Vec<&str> = if json { vec!["-j"] } else { Vec::new() };
        args.extend(command.split(' '));
        self.run_tool("nft", &args, None, &command)
    }

    /// Applies `commands` (nft's text syntax) as one transaction: all of them or, when nft
    /// refuses any, none.
    fn apply(&self, commands: &str, what: &str) -> Result<(), FirewallError> {
        if let Some(outcome) = self.library(commands, false, what) {
            return outcome.map(drop);
        }
        self.run_tool("nft", &["-f", "-"], Some(commands.as_bytes()), what)
            .map(drop)
    }

    /// Runs `commands` through libnftables in the namespace; `None` when the driver uses the
    /// `nft` command instead.
    fn library(
        &self,
        commands: &str,
        json: bool,
        what: &str,
    ) -> Option<Result<String, FirewallError>> {
        if !self.in_process {
            return None;
        }
        let outcome = crate::netns::within(self.netns.as_deref(), || {
            Ok(crate::libnft::run(commands, json))
        });
        match outcome {
            Err(source) => Some(Err(FirewallError::Netns {
                netns: self.netns.clone().unwrap_or_default(),
                source,
            })),
            Ok(None) => None,
            Ok(Some(Ok(out))) => Some(Ok(out)),
            Ok(Some(Err(stderr))) => Some(Err(FirewallError::Nft {
                what: what.to_owned(),
                netns: self.netns.clone(),
                stderr,
            })),
        }
    }

    /// Runs `TOOL ARGS` (nft, iptables-nft, …) with `input`; its stdout, or its own message.
    fn run_tool(
        &self,
        tool: &str,
        args: &[&str],
        input: Option<&[u8]>,
        what: &str,
    ) -> Result<String, FirewallError> {
        let spawn = |source| FirewallError::Spawn {
            netns: self.netns.clone(),
            source,
        };
        let mut child = self
            .command(tool)
            .args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn)?;
        if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(bytes).map_err(spawn)?;
        }
        let out = child.wait_with_output().map_err(spawn)?;
        if !out.status.success() {
            return Err(FirewallError::Nft {
                what: format!(
                    "{}{what}",
                    if tool == "nft" {
                        String::new()
                    } else {
                        format!("({tool}) ")
                    }
                ),
                netns: self.netns.clone(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The whole ruleset as nft's JSON objects.
    pub fn ruleset(&self) -> Result<Vec<Value>, FirewallError> {
        let text = self.list("ruleset", true)?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| FirewallError::Listing(e.to_string()))?;
        Ok(v["nftables"].as_array().cloned().unwrap_or_default())
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

    /// What firewall is in force besides the mesh's own tables: its kind and a dump of its
    /// tables (`nft list table …`, which `nft -f` loads back), or `None` when there is none.
    /// Legacy iptables rules (x_tables, which nft does not see) are refused: no driver speaks
    /// them, and a drop there would be final whatever the mesh opens.
    pub fn detect(
        &self,
    ) -> Result<Option<(mesh_lib::record::FirewallKind, String)>, FirewallError> {
        for save in ["iptables-legacy-save", "ip6tables-legacy-save"] {
            if let Some(out) = self.legacy(save) {
                if out.lines().any(|l| l.starts_with("-A ")) {
                    return Err(FirewallError::NotCovered(format!(
                        "legacy iptables rules are in force{} ({save} lists them)",
                        netns_note(&self.netns)
                    )));
                }
            }
        }
        let ruleset = self.ruleset()?;
        let mut tables: Vec<(String, String)> = ruleset
            .iter()
            .filter_map(|o| o.get("table"))
            .filter_map(|t| {
                Some((
                    t["family"].as_str()?.to_owned(),
                    t["name"].as_str()?.to_owned(),
                ))
            })
            .filter(|(_, name)| !name.starts_with("mesh_"))
            .collect();
        tables.sort();
        let chains: Vec<FoundChain> = ruleset
            .iter()
            .filter_map(|o| o.get("chain"))
            .filter(|c| {
                c["type"] == "filter" && matches!(c["hook"].as_str(), Some("input" | "forward"))
            })
            .filter_map(|c| {
                Some(FoundChain {
                    family: c["family"].as_str()?.to_owned(),
                    table: c["table"].as_str()?.to_owned(),
                    name: c["name"].as_str()?.to_owned(),
                    path: TrafficPath::Incoming,
                })
            })
            .filter(|c| !c.table.starts_with("mesh_"))
            .collect();
        if chains.is_empty() {
            return Ok(None);
        }
        let kind = if chains.iter().all(is_iptables_nft) {
            mesh_lib::record::FirewallKind::IptablesNft
        } else {
            mesh_lib::record::FirewallKind::Nftables
        };
        let mut dump = Dump::default();
        for (family, name) in &tables {
            let text = self.list(&format!("table {family} {name}"), false)?;
            dump.tables.insert(format!("{family} {name}"), text);
            if is_iptables_table(family, name) && !dump.iptables.contains_key(family) {
                let tool = if family == "ip" {
                    "iptables-nft-save"
                } else {
                    "ip6tables-nft-save"
                };
                dump.iptables
                    .insert(family.clone(), self.run_tool(tool, &[], None, "saving")?);
            }
        }
        let text =
            serde_json::to_string(&dump).map_err(|e| FirewallError::Listing(e.to_string()))?;
        Ok(Some((kind, text)))
    }

    fn legacy(&self, save: &str) -> Option<String> {
        let out = self
            .command(save)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Loads back every table of `dump` that is not in force: the found firewall after a
    /// rollback across the flip. nft's own tables in one transaction; iptables-nft's through
    /// iptables-nft-restore, so iptables still speaks them; a container runtime's tables never
    /// (they are the runtime's, and an old copy would be wrong), but the predecessor's INPUT
    /// chain in a table the runtime shares is put back as found. Returns what was restored.
    pub fn restore_missing(&self, dump: &Dump) -> Result<Vec<(String, String)>, FirewallError> {
        let ruleset = self.ruleset()?;
        let present = |f: &str, n: &str| {
            ruleset
                .iter()
                .filter_map(|o| o.get("table"))
                .any(|t| t["family"] == f && t["name"] == n)
        };
        let missing: Vec<(String, String)> = dump
            .tables
            .iter()
            .filter(|(key, text)| !is_runtime_table(key, text))
            .filter_map(|(key, _)| split_key(key))
            .filter(|(f, n)| !present(f, n))
            .collect();
        let native: String = missing
            .iter()
            .filter(|(f, n)| !is_iptables_table(f, n))
            .map(|(f, n)| dump.tables[&format!("{f} {n}")].as_str())
            .collect();
        if !native.is_empty() {
            self.apply(&native, "restoring the found firewall")?;
        }
        for (family, tool) in [
            ("ip", "iptables-nft-restore"),
            ("ip6", "ip6tables-nft-restore"),
        ] {
            if missing
                .iter()
                .any(|(f, n)| f == family && is_iptables_table(f, n))
            {
                if let Some(saved) = dump.iptables.get(family) {
                    self.run_tool(
                        tool,
                        &[],
                        Some(saved.as_bytes()),
                        "restoring the found firewall",
                    )?;
                }
            }
        }
        // The predecessor's INPUT chains in tables the runtime shares, as they were found.
        let mut restored = missing;
        for family in dump.shared_inputs() {
            let tool = if family == "ip" {
                "iptables-nft-restore"
            } else {
                "ip6tables-nft-restore"
            };
            if let Some(batch) = dump.input_batch(&family) {
                self.run_tool(
                    tool,
                    &["--noflush"],
                    Some(batch.as_bytes()),
                    "restoring the predecessor's INPUT chain",
                )?;
                restored.push((family, "filter INPUT".to_owned()));
            }
        }
        Ok(restored)
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
                    .any(|c| {
                        c.family == rule.family && c.table == rule.table && c.name == rule.chain
                    })
                    .then_some(rule)
            })
            .collect()
    }

    /// Puts `want` in force: the base ruleset loaded (replaced when it differs) or removed, the
    /// guard replaced when it differs, the found firewall's tables removed when asked (the
    /// flip), all in one nft transaction; then the openings through iptables-nft's chains.
    pub fn converge(&self, want: &Want<'_>) -> Result<Converged, FirewallError> {
        let (guard, base, settings, openings) =
            (want.guard, want.base, want.settings, want.openings);
        let ruleset = self.ruleset()?;
        let mut done = Converged::default();
        // Every change goes into one transaction (one `nft -f` of text, which nft reads faster
        // than its JSON): if nft refuses any of it, nothing changes.
        let mut commands = String::new();
        let base_present = ruleset
            .iter()
            .filter_map(|o| o.get("table"))
            .any(|t| t["name"] == BASE_TABLE && t["family"] == "inet");
        match base {
            Some(base) if !same_table(&ruleset, BASE_TABLE, base) => {
                commands.push_str(&replace_table(&ruleset, BASE_TABLE, base));
                done.base = true;
            }
            Some(_) => {}
            None if base_present => {
                commands.push_str(&format!(
                    "delete table inet {BASE_TABLE}
"
                ));
                done.base = true;
            }
            None => {}
        }
        for (family, name) in want.remove_tables {
            let present = ruleset
                .iter()
                .filter_map(|o| o.get("table"))
                .any(|t| t["family"] == family.as_str() && t["name"] == name.as_str());
            if present {
                commands.push_str(&format!(
                    "delete table {family} {name}
"
                ));
                done.removed_tables += 1;
            }
        }
        // The guard: compared by what the kernel lists back, rule by rule.
        if !same_table(&ruleset, GUARD_TABLE, guard) {
            commands.push_str(&replace_table(&ruleset, GUARD_TABLE, guard));
            done.guard = true;
        }

        // The openings, through the found chains.
        // iptables-nft's own chains are spoken through iptables, not edited here.
        // Chains of tables the flip removes get nothing.
        let removed = |family: &str, table: &str| {
            want.remove_tables
                .iter()
                .any(|(f, t)| f == family && t == table)
        };
        let chains: Vec<FoundChain> = Self::found_chains(&ruleset)
            .into_iter()
            .filter(|c| !is_iptables_nft(c) && !removed(&c.family, &c.table))
            .collect();
        let present = Self::mesh_rules(&ruleset, &chains);
        let mut wanted = Vec::new();
        for chain in &chains {
            let Some(family) = family_of(&chain.family) else {
                continue;
            };
            for o in openings.iter().filter(|o| o.paths.contains(&chain.path)) {
                if let Some(expr) = opening_rule(o, settings, chain.path, family) {
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
        if present_keys != wanted_keys || present.len() != wanted.len() {
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
            done.removed = present.len();
            done.inserted = wanted.len();
        }
        if !commands.is_empty() {
            let what = match (done.base, done.guard) {
                (true, _) => "loading the base ruleset and the guard",
                (false, true) => "loading the guard",
                (false, false) => "converging the openings through the found firewall",
            };
            self.apply(&commands, what)?;
        }
        // iptables-nft's chains, through iptables itself.
        for (family, tool) in [("ip", "iptables-nft"), ("ip6", "ip6tables-nft")] {
            if removed(family, "filter") {
                continue;
            }
            let emptied = want.empty_inputs.iter().any(|f| f == family);
            if emptied && self.empty_input(&ruleset, family, tool)? {
                done.emptied_inputs += 1;
            }
            let chains: Vec<&str> = ruleset
                .iter()
                .filter_map(|o| o.get("chain"))
                .filter(|c| c["family"] == family && c["table"] == "filter")
                .filter_map(|c| c["name"].as_str())
                .filter(|n| *n == "FORWARD" || (*n == "INPUT" && !emptied))
                .collect();
            if chains.is_empty() {
                continue;
            }
            let (inserted, removed) =
                self.converge_iptables(tool, family, &chains, settings, openings)?;
            done.inserted += inserted;
            done.removed += removed;
        }
        Ok(done)
    }

    /// Empties the predecessor's INPUT chain of a `filter` table the container runtime shares
    /// (its rules flushed, its policy accept) unless it already is; whether it did.
    fn empty_input(
        &self,
        ruleset: &[Value],
        family: &str,
        tool: &str,
    ) -> Result<bool, FirewallError> {
        let input = |x: &Value, name_key: &str| {
            x["family"] == family && x["table"] == "filter" && x[name_key] == "INPUT"
        };
        let Some(chain) = ruleset
            .iter()
            .filter_map(|o| o.get("chain"))
            .find(|c| input(c, "name"))
        else {
            return Ok(false);
        };
        let rules = ruleset
            .iter()
            .filter_map(|o| o.get("rule"))
            .filter(|r| input(r, "chain"))
            .count();
        if chain["policy"] == "accept" && rules == 0 {
            return Ok(false);
        }
        self.run_tool(
            &format!("{tool}-restore"),
            &["--noflush"],
            Some(b"*filter\n:INPUT ACCEPT [0:0]\n-F INPUT\nCOMMIT\n"),
            "emptying the predecessor's INPUT chain",
        )?;
        Ok(true)
    }

    /// Converges the openings through iptables-nft's INPUT and FORWARD chains, spoken through
    /// `iptables` (as ufw and most scripts do), in one `iptables-nft-restore --noflush` batch.
    fn converge_iptables(
        &self,
        tool: &str,
        family: &str,
        chains: &[&str],
        settings: &Settings,
        openings: &[Opening],
    ) -> Result<(usize, usize), FirewallError> {
        let mut present = Vec::new();
        for chain in chains {
            let listing = self.run_tool(tool, &["-S", chain], None, "listing")?;
            for line in listing.lines() {
                if let (Some(spec), Some(comment)) = (
                    line.strip_prefix(&format!("-A {chain} ")),
                    iptables_comment(line),
                ) {
                    if comment.starts_with(MARK) {
                        present.push((chain.to_string(), spec.to_owned(), comment));
                    }
                }
            }
        }
        let mut wanted = Vec::new();
        for chain in chains {
            let path = if *chain == "INPUT" {
                TrafficPath::Incoming
            } else {
                TrafficPath::Forwarded
            };
            for o in openings.iter().filter(|o| o.paths.contains(&path)) {
                let source = match o.from {
                    mesh_lib::model::Source::Anywhere => None,
                    mesh_lib::model::Source::Private => Some(settings.private_network.range),
                    mesh_lib::model::Source::Range(r) => Some(r),
                };
                if source.is_some() && family == "ip6" {
                    continue;
                }
                let proto = o.protocol.as_str();
                let mut spec = match source {
                    Some(net) => format!("-s {net} "),
                    None => String::new(),
                };
                spec.push_str(&match path {
                    TrafficPath::Incoming => format!("-p {proto} -m {proto} --dport {}", o.port),
                    TrafficPath::Forwarded => {
                        format!("-p {proto} -m conntrack --ctorigdstport {}", o.port)
                    }
                });
                let comment = opening_comment(o);
                spec.push_str(&format!(" -m comment --comment \"{comment}\" -j ACCEPT"));
                wanted.push((chain.to_string(), spec, comment));
            }
        }
        let keys = |v: &[(String, String, String)]| {
            v.iter()
                .map(|(c, _, comment)| (c.clone(), comment.clone()))
                .collect::<BTreeSet<_>>()
        };
        if keys(&present) == keys(&wanted) && present.len() == wanted.len() {
            return Ok((0, 0));
        }
        let mut batch = String::from("*filter\n");
        for (chain, spec, _) in &present {
            batch.push_str(&format!("-D {chain} {spec}\n"));
        }
        for (chain, spec, _) in &wanted {
            batch.push_str(&format!("-I {chain} {spec}\n"));
        }
        batch.push_str("COMMIT\n");
        self.run_tool(
            &format!("{tool}-restore"),
            &["--noflush"],
            Some(batch.as_bytes()),
            "converging the openings through iptables",
        )?;
        Ok((wanted.len(), present.len()))
    }
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
        };
        assert!(is_runtime_table("ip filter", shared));
        assert!(is_runtime_table("ip docker-bridges", ""));
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
