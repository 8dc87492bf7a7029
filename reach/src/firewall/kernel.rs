//! The firewall in the kernel: the [`Firewall`] a node's switch goes through. It lists the
//! ruleset once, writes the mesh's own tables (guard, base ruleset), the removal of the found
//! firewall and the nftables driver's openings in one nft transaction, then the iptables-nft
//! driver's openings through iptables.

use mesh_lib::firewall::{render_nft, render_rule, BASE_TABLE, GUARD_TABLE};
use serde_json::Value;

use super::dump::{is_iptables_table, split_key};
use super::nft::Nft;
use super::{
    daemon, iptables, is_runtime_table, nftables, BaseChange, Converged, Dump, Firewall,
    FirewallError, FoundChain, Want, MARK,
};

/// The kernel's firewall, in a network namespace or the machine's own.
#[derive(Debug, Clone)]
pub struct Kernel {
    nft: Nft,
}

/// Whether one of the mesh's tables in force is the wanted one: the same chains, and the same
/// rules by their comments and count, in order.
fn same_table(ruleset: &[Value], name: &str, wanted: &::nftables::schema::Nftables<'_>) -> bool {
    use ::nftables::schema::{NfListObject, NfObject};
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
fn replace_table(
    ruleset: &[Value],
    name: &str,
    rules: &::nftables::schema::Nftables<'_>,
) -> String {
    use ::nftables::schema::{NfListObject, NfObject};
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

fn table_present(ruleset: &[Value], family: &str, name: &str) -> bool {
    ruleset
        .iter()
        .filter_map(|o| o.get("table"))
        .any(|t| t["family"] == family && t["name"] == name)
}

impl Kernel {
    /// The firewall of network namespace `netns` (`None`: the machine's own), spoken through
    /// libnftables when it can be opened, the `nft` command otherwise.
    pub fn new(netns: Option<String>) -> Self {
        Self {
            nft: Nft::new(netns),
        }
    }

    /// The same, always through the `nft` command (what it falls back to).
    pub fn with_command(netns: Option<String>) -> Self {
        Self {
            nft: Nft::with_command(netns),
        }
    }

    /// The system bus, where the found firewall's daemon is spoken to: only for the machine's
    /// own firewall (no `--netns`), and only when a bus answers.
    fn bus(&self) -> Option<daemon::Bus> {
        match self.nft.netns() {
            None => daemon::Bus::connect(),
            Some(_) => None,
        }
    }

    /// Whether nft is spoken to in process (libnftables).
    pub fn in_process(&self) -> bool {
        self.nft.in_process()
    }

    /// The whole ruleset as nft's JSON objects.
    pub fn ruleset(&self) -> Result<Vec<Value>, FirewallError> {
        self.nft.ruleset()
    }
}

impl Firewall for Kernel {
    /// Every table besides the mesh's is dumped (`nft list table …`, which `nft -f` loads back;
    /// for iptables-nft's tables also what `iptables-nft-save` prints), and legacy iptables
    /// (x_tables, which nft does not see) as `iptables-legacy-save` prints it, where its rules
    /// are in force.
    fn detect(&self) -> Result<Option<(mesh_lib::record::FirewallKind, String)>, FirewallError> {
        let legacy = iptables::legacy_saves(&self.nft);
        let ruleset = self.nft.ruleset()?;
        let chains = nftables::found_chains(&ruleset);
        let bus = self.bus();
        let which = match &bus {
            Some(bus) if bus.firewalld_runs() => Some(daemon::Which::Firewalld),
            Some(_) if has_ufw_chains(&ruleset, &legacy) => Some(daemon::Which::Ufw),
            _ => None,
        };
        if chains.is_empty() && legacy.is_empty() && which.is_none() {
            return Ok(None);
        }
        let kind = if let Some(which) = which {
            which.kind()
        } else if !legacy.is_empty() {
            mesh_lib::record::FirewallKind::IptablesLegacy
        } else if chains.iter().all(iptables::speaks) {
            mesh_lib::record::FirewallKind::IptablesNft
        } else {
            mesh_lib::record::FirewallKind::Nftables
        };
        let mut tables: Vec<(&str, &str)> = ruleset
            .iter()
            .filter_map(|o| o.get("table"))
            .filter_map(|t| Some((t["family"].as_str()?, t["name"].as_str()?)))
            .filter(|(_, name)| !name.starts_with("mesh_"))
            .collect();
        tables.sort();
        let daemon = match (which, &bus) {
            (Some(which), Some(bus)) => Some(daemon::Daemon {
                which,
                enabled: bus.unit_state(which.unit())?.1,
            }),
            _ => None,
        };
        let firewalld_zones = match (which, &bus) {
            (Some(daemon::Which::Firewalld), Some(bus)) => bus.zone_settings()?,
            _ => daemon::Zones::new(),
        };
        let mut dump = Dump {
            legacy,
            daemon,
            firewalld_zones,
            ..Dump::default()
        };
        for (family, name) in tables {
            let text = self.nft.list(&format!("table {family} {name}"), false)?;
            dump.tables.insert(format!("{family} {name}"), text);
            if is_iptables_table(family, name) && !dump.iptables.contains_key(family) {
                dump.iptables
                    .insert(family.to_owned(), iptables::save(&self.nft, family)?);
            }
        }
        let text =
            serde_json::to_string(&dump).map_err(|e| FirewallError::Listing(e.to_string()))?;
        Ok(Some((kind, text)))
    }

    /// The base ruleset loaded (replaced when it differs) or removed, the guard replaced when it
    /// differs, the found firewall's tables removed when asked (the flip) and the openings
    /// through nft's own found chains, all in one nft transaction; then the openings through
    /// iptables-nft's chains.
    fn converge(&self, want: &Want<'_>) -> Result<Converged, FirewallError> {
        self.converge_or_check(want, true)
    }

    fn check(&self, want: &Want<'_>) -> Result<Converged, FirewallError> {
        self.converge_or_check(want, false)
    }

    fn netns(&self) -> Option<&str> {
        self.nft.netns()
    }

    /// nft's JSON, and iptables' own save of each family whose rules nft's JSON shows as `xt`
    /// (their conntrack, multiport, addrtype matches; their DNAT target).
    fn listing(&self) -> Result<super::Listing, FirewallError> {
        let ruleset = self.nft.ruleset()?;
        let mut saved = std::collections::BTreeMap::new();
        for family in ["ip", "ip6"] {
            let hides = ruleset.iter().filter_map(|o| o.get("rule")).any(|r| {
                r["family"] == family
                    && r["expr"]
                        .as_array()
                        .is_some_and(|e| e.iter().any(|x| x.get("xt").is_some()))
            });
            // Without iptables' save, those rules stay unread: the preview says where a
            // verdict hangs on them rather than fail.
            if !hides {
                continue;
            }
            if let Ok(save) = iptables::save(&self.nft, family) {
                saved.insert(family.to_owned(), save);
            }
        }
        Ok(super::Listing {
            ruleset,
            saved,
            legacy: iptables::legacy_saves(&self.nft),
        })
    }
}

impl Kernel {
    /// What [`Firewall::converge`] does, or with `apply` false only works out what it would
    /// change.
    fn converge_or_check(&self, want: &Want<'_>, apply: bool) -> Result<Converged, FirewallError> {
        // Connected once for the whole converge (the flip's passes too).
        let bus = self.bus();
        self.converge_on(want, apply, bus.as_ref())
    }

    /// [`Kernel::converge_or_check`] with the system bus, when there is one.
    fn converge_on(
        &self,
        want: &Want<'_>,
        apply: bool,
        bus: Option<&daemon::Bus>,
    ) -> Result<Converged, FirewallError> {
        // The flip on a node whose found firewall a daemon keeps: the base ruleset first,
        // beside the daemon's rules (what both open stays open); then the daemon stopped and
        // disabled (it takes its own rules away); then what is left of them goes.
        if let (Some(_), Some(found), Some(bus)) = (want.base, want.daemon, bus) {
            let unit = found.which.unit();
            let (active, enabled) = bus.unit_state(unit)?;
            if active || enabled {
                if !apply {
                    let mut done = self.converge_on(
                        &Want {
                            daemon: None,
                            ..*want
                        },
                        false,
                        Some(bus),
                    )?;
                    done.daemon_stopped = Some(unit.to_owned());
                    return Ok(done);
                }
                let beside = Want {
                    remove_tables: &[],
                    empty_inputs: &[],
                    daemon: None,
                    ..*want
                };
                let first = self.converge_on(&beside, true, Some(bus))?;
                bus.stop_and_disable(unit)?;
                let mut done = self.converge_on(
                    &Want {
                        daemon: None,
                        ..*want
                    },
                    true,
                    Some(bus),
                )?;
                done.base = done.base.or(first.base);
                done.guard |= first.guard;
                done.inserted += first.inserted;
                done.removed += first.removed;
                done.daemon_stopped = Some(unit.to_owned());
                return Ok(done);
            }
        }
        let mut ruleset = self.nft.ruleset()?;
        let mut done = Converged::default();
        // One transaction, written in nft's text syntax (nft reads it faster than its JSON).
        let mut commands = String::new();
        // Back across the flip: the found firewall's tables the flip removed, loaded back (the
        // iptables-nft ones through iptables first, beside the base ruleset still in force:
        // nothing opens or closes), then nft's own in this transaction, which removes the
        // base ruleset: what both open never closes.
        let across_flip = match want.restore {
            Some(dump) if want.base.is_none() && table_present(&ruleset, "inet", BASE_TABLE) => {
                Some(dump)
            }
            _ => None,
        };
        let mut restored_chains = Vec::new();
        // Back across the flip, a daemon that kept the found firewall is started again first
        // (enabled as found): it loads its own configuration beside the base ruleset.
        let daemon = want.daemon.filter(|_| across_flip.is_some());
        if let (Some(found), Some(bus), Some(dump)) = (daemon, bus, across_flip) {
            let unit = found.which.unit();
            let mut changed = false;
            if apply && !bus.unit_state(unit)?.0 {
                bus.enable_and_start(unit, found.enabled)?;
                changed = true;
            }
            // firewalld loads its files; what was in force when found had more, or less, in
            // its runtime configuration: set back zone by zone.
            if apply && found.which == daemon::Which::Firewalld {
                changed |= !bus.restore_zone_settings(&dump.firewalld_zones)?.is_empty();
            }
            if changed {
                ruleset = self.nft.ruleset()?;
            }
            done.daemon_started = Some(unit.to_owned());
        }
        let firewalld = bus.filter(|b| b.firewalld_runs());
        // firewalld's openings: rich rules in its runtime configuration, in before the base
        // ruleset goes (back across the flip).
        if let (Some(bus), None) = (firewalld, want.base) {
            let (added, removed) = bus.converge_rich_rules(want.openings, want.settings, apply)?;
            done.inserted += added;
            done.removed += removed;
        }
        let firewalld = firewalld.is_some();
        if let Some(dump) = across_flip {
            let mut restoring = missing(dump, &ruleset);
            if let Some(found) = daemon {
                restoring.retain(|(f, n)| !owned_by(found.which, f, n));
            }
            let ufw = daemon.is_some_and(|d| d.which == daemon::Which::Ufw);
            if apply && !ufw {
                // Also the predecessor's INPUT chain in a table a container runtime shares,
                // which the flip emptied, and legacy iptables.
                done.restored.extend(
                    iptables::restore(&self.nft, dump, &restoring)?
                        .into_iter()
                        .map(|(f, t)| format!("{f} {t}")),
                );
                done.restored.extend(
                    iptables::restore_legacy(&self.nft, dump)?
                        .into_iter()
                        .map(|f| format!("{f} {}", iptables::LEGACY)),
                );
            }
            for (family, name) in restoring.iter().filter(|(f, n)| !is_iptables_table(f, n)) {
                let text = without_mesh_rules(&dump.tables[&format!("{family} {name}")]);
                restored_chains.extend(nftables::chains_of(family, name, &text));
                commands.push_str(&text);
                commands.push('\n');
            }
            done.restored
                .extend(restoring.iter().map(|(f, n)| format!("{f} {n}")));
        }
        match want.base {
            Some(base) if !same_table(&ruleset, BASE_TABLE, base) => {
                commands.push_str(&replace_table(&ruleset, BASE_TABLE, base));
                done.base = Some(BaseChange::Loaded);
            }
            Some(_) => {}
            None if table_present(&ruleset, "inet", BASE_TABLE) => {
                commands.push_str(&format!("delete table inet {BASE_TABLE}\n"));
                done.base = Some(BaseChange::Removed);
            }
            None => {}
        }
        for (family, name) in want.remove_tables {
            if table_present(&ruleset, family, name) {
                commands.push_str(&format!("delete table {family} {name}\n"));
                done.removed_tables += 1;
            }
        }
        // The guard: compared by what the kernel lists back, rule by rule.
        if !same_table(&ruleset, GUARD_TABLE, want.guard) {
            commands.push_str(&replace_table(&ruleset, GUARD_TABLE, want.guard));
            done.guard = true;
        }
        // The openings through nft's own found chains; none into tables the flip removes.
        let chains: Vec<FoundChain> = nftables::found_chains(&ruleset)
            .into_iter()
            .chain(restored_chains)
            .filter(|c| !iptables::speaks(c))
            // firewalld rewrites its table on every reload: its openings go through it.
            .filter(|c| !(firewalld && owned_by(daemon::Which::Firewalld, &c.family, &c.table)))
            .filter(|c| {
                !want
                    .remove_tables
                    .iter()
                    .any(|(f, t)| *f == c.family && *t == c.table)
            })
            .collect();
        let (openings, inserted, removed) = nftables::openings(&ruleset, &chains, want);
        commands.push_str(&openings);
        (done.inserted, done.removed) = (inserted, removed);
        if apply && !commands.is_empty() {
            let what = match (done.base, done.guard) {
                (Some(BaseChange::Removed), _) if !done.restored.is_empty() => {
                    "loading the found firewall back and removing the base ruleset"
                }
                (Some(_), _) => "loading the base ruleset and the guard",
                (None, true) => "loading the guard",
                (None, false) => "converging the openings through the found firewall",
            };
            self.nft.apply(&commands, what)?;
        }
        // The iptables-nft chains loaded back are in force now: the openings go into them too.
        let ruleset = if apply && !done.restored.is_empty() {
            self.nft.ruleset()?
        } else {
            ruleset
        };
        let (inserted, removed, emptied) = iptables::converge(&self.nft, &ruleset, want, apply)?;
        done.inserted += inserted;
        done.removed += removed;
        done.emptied_inputs = emptied;
        // Legacy iptables, beside: its openings, or (the flip) the predecessor's rules gone.
        let (inserted, removed, emptied) = iptables::converge_legacy(&self.nft, want, apply)?;
        done.inserted += inserted;
        done.removed += removed;
        done.removed_tables += emptied;
        Ok(done)
    }
}

/// Whether a table is the found firewall's daemon's to make: never loaded back from the dump
/// (the daemon loads its own), never written with nft behind the daemon's back.
fn owned_by(which: daemon::Which, family: &str, name: &str) -> bool {
    match which {
        daemon::Which::Firewalld => name == "firewalld",
        daemon::Which::Ufw => is_iptables_table(family, name),
    }
}

/// Whether ufw's chains are in force (iptables-nft's, or legacy iptables').
fn has_ufw_chains(ruleset: &[Value], legacy: &std::collections::BTreeMap<String, String>) -> bool {
    ruleset
        .iter()
        .filter_map(|o| o.get("chain"))
        .any(|c| c["name"].as_str().is_some_and(|n| n.starts_with("ufw-")))
        || legacy.values().any(|save| save.contains("\n:ufw-"))
}

/// The tables of `dump` that are not in `ruleset`, as (family, name): a container runtime's
/// aside (it keeps its own).
fn missing(dump: &Dump, ruleset: &[Value]) -> Vec<(String, String)> {
    dump.tables
        .iter()
        .filter(|(key, text)| !is_runtime_table(key, text))
        .filter_map(|(key, _)| split_key(key))
        .filter(|(f, n)| !table_present(ruleset, f, n))
        .collect()
}

/// A table as the dump lists it, without any rule of the mesh's (they are inserted anew, as
/// the generation wants them).
fn without_mesh_rules(text: &str) -> String {
    text.lines()
        .filter(|l| !l.contains(&format!("comment \"{MARK}")))
        .collect::<Vec<_>>()
        .join("\n")
}
