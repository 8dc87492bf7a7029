//! A found firewall kept by a daemon of its own, which rewrites its rules on a reload and at
//! boot: firewalld (spoken to over its D-Bus API, `org.fedoraproject.FirewallD1`) and ufw (its
//! own chains in iptables, started by `ufw.service`).
//!
//! - **firewalld**: the openings are rich rules in the runtime configuration of every active
//!   zone and the default zone, so `firewall-cmd --list-all` shows them. Each is marked as the
//!   mesh's by its log prefix (`mesh: MODULE SETTING PORT/PROTO from WHO`, at most once an
//!   hour): firewalld's rich rules have no comment. The permanent configuration (the found
//!   files) is never written; a reload drops runtime rules, and `mesh reconcile --watch` puts
//!   them back on firewalld's `Reloaded` signal ([`Reloads`]).
//! - **ufw**: the openings stay at the top of iptables' own INPUT and FORWARD chains, outside
//!   ufw's `ufw-*` chains, which `ufw reload` and a restart of `ufw.service` rewrite and INPUT
//!   they do not: they survive a reload with no file of the operator's rewritten.
//!
//! For both, the flip stops and disables the daemon's unit once the base ruleset is in force,
//! and a rollback across the flip starts it again (enabled as it was found) before the base
//! ruleset goes: the daemon loads its own configuration, as found. firewalld's runtime
//! configuration may have held more, or less, than its files when found (`firewall-cmd`
//! without `--permanent`): `mesh adopt` records each zone's ([`Zones`]) and the rollback sets
//! back any zone that differs once firewalld has loaded its files.
//!
//! The daemons are the machine's: spoken to only when no `--netns` is given.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mesh_lib::firewall::opening_mark;
use mesh_lib::model::{Opening, Settings, Source, TrafficPath};
use zbus_systemd::systemd1::{ManagerProxy, UnitProxy};

use super::FirewallError;

/// firewalld's name on the system bus.
pub const FIREWALLD: &str = "org.fedoraproject.FirewallD1";
const FIREWALLD_PATH: &str = "/org/fedoraproject/FirewallD1";
const ZONE: &str = "org.fedoraproject.FirewallD1.zone";

/// The longest log prefix nft takes (its kernel's `NF_LOG_PREFIXLEN`, less the NUL).
const PREFIX_MAX: usize = 127;

/// How long a daemon's unit may take to start.
const START_BOUND: Duration = Duration::from_secs(90);

/// Which daemon keeps the found firewall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Which {
    /// firewalld.
    Firewalld,
    /// ufw.
    Ufw,
}

impl Which {
    /// Its systemd unit.
    pub fn unit(self) -> &'static str {
        match self {
            Which::Firewalld => "firewalld.service",
            Which::Ufw => "ufw.service",
        }
    }

    /// The kind recorded.
    pub fn kind(self) -> mesh_lib::record::FirewallKind {
        match self {
            Which::Firewalld => mesh_lib::record::FirewallKind::Firewalld,
            Which::Ufw => mesh_lib::record::FirewallKind::Ufw,
        }
    }
}

/// The daemon found at adoption, as the dump records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Daemon {
    /// Which one.
    pub which: Which,
    /// Whether its unit was enabled (started at boot) when found.
    pub enabled: bool,
}

/// firewalld's runtime settings of each of its zones (`getZoneSettings2`: services, ports, rich
/// rules, sources, interfaces, …), by zone: the D-Bus encoding of each zone's `a{sv}`, in hex,
/// so that what is set back is what was read, value for value.
pub type Zones = BTreeMap<String, String>;

/// One zone's settings as D-Bus carries them.
type ZoneSettings = BTreeMap<String, zbus::wire::OwnedVariant>;

/// The settings of a zone firewalld changes in its runtime configuration
/// (`setZoneSettings2`); the others (its name, description, target, priorities) only its files
/// hold. Each with its value when the zone has none (`getZoneSettings2` leaves those out).
fn runtime_settings() -> [(&'static str, zbus::wire::OwnedVariant); 12] {
    use zbus::wire::{OwnedVariant, Variant};
    let owned = |v: Variant<'static>| OwnedVariant::try_from(v).expect("no file descriptor");
    let names = || Variant::from(Vec::<String>::new());
    let pairs = || Variant::from(Vec::<(String, String)>::new());
    [
        ("services", owned(names())),
        ("ports", owned(pairs())),
        ("icmp_blocks", owned(names())),
        ("masquerade", owned(Variant::from(false))),
        (
            "forward_ports",
            owned(Variant::from(Vec::<(String, String, String, String)>::new())),
        ),
        ("interfaces", owned(names())),
        ("sources", owned(names())),
        ("rules_str", owned(names())),
        ("protocols", owned(names())),
        ("source_ports", owned(pairs())),
        ("icmp_block_inversion", owned(Variant::from(false))),
        ("forward", owned(Variant::from(false))),
    ]
}

/// Of a zone's settings, those of its runtime configuration, each there (see
/// [`runtime_settings`]): two zones alike in force compare equal.
fn in_force(mut settings: ZoneSettings) -> ZoneSettings {
    runtime_settings()
        .into_iter()
        .map(|(key, none)| (key.to_owned(), settings.remove(key).unwrap_or(none)))
        .collect()
}

fn wire() -> zbus::wire::serialized::Context {
    zbus::wire::serialized::Context::new(zbus::wire::LE, 0)
}

fn encode(settings: &ZoneSettings) -> zbus::Result<String> {
    Ok(hex::encode(zbus::wire::to_bytes(wire(), settings)?.bytes()))
}

fn decode(text: &str) -> Result<ZoneSettings, String> {
    let bytes = hex::decode(text).map_err(|e| e.to_string())?;
    let data = zbus::wire::serialized::Data::new(bytes, wire());
    let (settings, _) = data
        .deserialize::<ZoneSettings>()
        .map_err(|e| e.to_string())?;
    Ok(settings)
}

/// The rich rule that opens `opening` through firewalld, in the form firewalld lists it back;
/// `None` for an opening on the forwarded path alone (firewalld accepts a published port's
/// forwarded connections itself: `ct status dnat accept` in its forward chain).
pub fn rich_rule(opening: &Opening, settings: &Settings) -> Option<String> {
    if !opening.paths.contains(&TrafficPath::Incoming) {
        return None;
    }
    let source = match opening.from {
        Source::Anywhere => String::new(),
        Source::Private => format!(
            " family=\"ipv4\" source address=\"{}\"",
            settings.private_network.range
        ),
        Source::Range(net) => format!(" family=\"ipv4\" source address=\"{net}\""),
    };
    Some(format!(
        "rule priority=\"-32768\"{source} port port=\"{}\" protocol=\"{}\" log prefix=\"{}\" level=\"debug\" limit value=\"1/h\" accept",
        opening.port,
        opening.protocol,
        opening_mark(opening, PREFIX_MAX),
    ))
}

/// Whether a rich rule is the mesh's.
fn is_ours(rule: &str) -> bool {
    rule.contains(&format!(" log prefix=\"{}", super::MARK))
}

/// The system bus: firewalld and systemd on it.
pub struct Bus {
    runtime: tokio::runtime::Runtime,
    connection: zbus::Connection,
}

fn call_error(what: &str) -> impl FnOnce(zbus::Error) -> FirewallError + '_ {
    move |e| FirewallError::Daemon {
        what: what.to_owned(),
        message: e.to_string(),
    }
}

impl Bus {
    /// Connects to the system bus; `None` when none answers (no D-Bus, no daemon to speak to).
    pub fn connect() -> Option<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        let connection = runtime.block_on(zbus::Connection::system()).ok()?;
        Some(Self {
            runtime,
            connection,
        })
    }

    /// Whether firewalld answers on the bus (asked without starting it).
    pub fn firewalld_runs(&self) -> bool {
        self.runtime.block_on(async {
            let Ok(dbus) = zbus::fdo::DBusProxy::new(&self.connection).await else {
                return false;
            };
            let Ok(name) = zbus::names::BusName::try_from(FIREWALLD) else {
                return false;
            };
            dbus.name_has_owner(name).await.unwrap_or(false)
        })
    }

    async fn manager(&self) -> zbus::Result<ManagerProxy<'static>> {
        ManagerProxy::builder(&self.connection)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
    }

    async fn unit(&self, unit: &str) -> zbus::Result<UnitProxy<'static>> {
        let path = self.manager().await?.load_unit(unit.to_owned()).await?;
        UnitProxy::builder(&self.connection)
            .path(path)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
    }

    /// Whether `unit` runs (or is on its way up or down), and whether it is enabled.
    pub fn unit_state(&self, unit: &str) -> Result<(bool, bool), FirewallError> {
        self.runtime
            .block_on(async {
                let proxy = self.unit(unit).await?;
                let active = !matches!(proxy.active_state().await?.as_str(), "inactive" | "failed");
                let enabled = matches!(
                    proxy.unit_file_state().await?.as_str(),
                    "enabled" | "enabled-runtime"
                );
                Ok((active, enabled))
            })
            .map_err(call_error(unit))
    }

    /// `unit`'s active state, as systemd says it.
    fn active_state(&self, unit: &str) -> Result<String, FirewallError> {
        self.runtime
            .block_on(async { self.unit(unit).await?.active_state().await })
            .map_err(call_error(unit))
    }

    /// The flip: `unit` stopped (the daemon removes its own rules) and disabled (no boot starts
    /// it again).
    pub fn stop_and_disable(&self, unit: &str) -> Result<(), FirewallError> {
        self.runtime
            .block_on(async {
                let manager = self.manager().await?;
                manager
                    .disable_unit_files(vec![unit.to_owned()], false)
                    .await?;
                manager
                    .stop_unit(unit.to_owned(), "replace".to_owned())
                    .await?;
                Ok(())
            })
            .map_err(call_error(unit))?;
        self.wait_for(unit, false)
    }

    /// Back across the flip: `unit` enabled when it was found enabled, and started; returns
    /// once it runs (firewalld: once it answers on the bus).
    pub fn enable_and_start(&self, unit: &str, enabled: bool) -> Result<(), FirewallError> {
        self.runtime
            .block_on(async {
                let manager = self.manager().await?;
                if enabled {
                    manager
                        .enable_unit_files(vec![unit.to_owned()], false, true)
                        .await?;
                }
                manager
                    .start_unit(unit.to_owned(), "replace".to_owned())
                    .await?;
                Ok(())
            })
            .map_err(call_error(unit))?;
        self.wait_for(unit, true)
    }

    /// Waits until `unit` runs (or no longer does).
    fn wait_for(&self, unit: &str, running: bool) -> Result<(), FirewallError> {
        let start = Instant::now();
        loop {
            let state = self.active_state(unit)?;
            let answers = unit != Which::Firewalld.unit() || self.firewalld_runs() == running;
            let done = match running {
                true => state == "active",
                false => state == "inactive" || state == "failed",
            };
            if done && answers {
                return Ok(());
            }
            if running && state == "failed" {
                return Err(FirewallError::Daemon {
                    what: unit.to_owned(),
                    message: "failed to start (its log says why: journalctl -u UNIT)"
                        .replace("UNIT", unit),
                });
            }
            if start.elapsed() > START_BOUND {
                return Err(FirewallError::Daemon {
                    what: unit.to_owned(),
                    message: format!(
                        "still {} after {} s",
                        if running { "not running" } else { "running" },
                        START_BOUND.as_secs()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    async fn firewalld(&self, interface: &'static str) -> zbus::Result<zbus::Proxy<'static>> {
        zbus::Proxy::new(&self.connection, FIREWALLD, FIREWALLD_PATH, interface).await
    }

    /// The zones firewalld's openings go into: every active zone and the default zone.
    fn zones(&self) -> Result<BTreeSet<String>, FirewallError> {
        self.runtime
            .block_on(async {
                let main = self.firewalld(FIREWALLD).await?;
                let default: String = main.call("getDefaultZone", &()).await?;
                let zone = self.firewalld(ZONE).await?;
                let active: BTreeMap<String, BTreeMap<String, Vec<String>>> =
                    zone.call("getActiveZones", &()).await?;
                let mut zones: BTreeSet<String> = active.into_keys().collect();
                zones.insert(default);
                Ok(zones)
            })
            .map_err(call_error("firewalld"))
    }

    /// Each zone's rich rules in the runtime configuration.
    fn rich_rules(&self) -> Result<BTreeMap<String, Vec<String>>, FirewallError> {
        let zones = self.zones()?;
        self.runtime
            .block_on(async {
                let proxy = self.firewalld(ZONE).await?;
                let mut out = BTreeMap::new();
                for zone in zones {
                    let rules: Vec<String> = proxy.call("getRichRules", &(zone.as_str(),)).await?;
                    out.insert(zone, rules);
                }
                Ok(out)
            })
            .map_err(call_error("firewalld"))
    }

    /// firewalld's runtime settings of every zone it has, as they are now.
    pub fn zone_settings(&self) -> Result<Zones, FirewallError> {
        self.in_force()?
            .iter()
            .map(|(zone, settings)| Ok((zone.clone(), encode(settings)?)))
            .collect::<zbus::Result<_>>()
            .map_err(call_error("firewalld"))
    }

    /// Every zone's runtime settings, as [`in_force`] compares them.
    fn in_force(&self) -> Result<BTreeMap<String, ZoneSettings>, FirewallError> {
        self.runtime
            .block_on(async {
                let proxy = self.firewalld(ZONE).await?;
                let names: Vec<String> = proxy.call("getZones", &()).await?;
                let mut out = BTreeMap::new();
                for zone in names {
                    let settings: ZoneSettings =
                        proxy.call("getZoneSettings2", &(zone.as_str(),)).await?;
                    out.insert(zone, in_force(settings));
                }
                Ok(out)
            })
            .map_err(call_error("firewalld"))
    }

    /// Each zone of `found` whose runtime settings differ now set back to them (firewalld's
    /// `setZoneSettings2`, runtime only: its files are not written); the zones set back.
    pub fn restore_zone_settings(&self, found: &Zones) -> Result<Vec<String>, FirewallError> {
        let now = self.in_force()?;
        let mut differ: Vec<(&String, ZoneSettings)> = Vec::new();
        for (zone, text) in found {
            let want = decode(text)
                .map(in_force)
                .map_err(|message| FirewallError::Daemon {
                    what: "firewalld".into(),
                    message: format!("zone {zone} as recorded: {message}"),
                })?;
            if now.get(zone) != Some(&want) {
                differ.push((zone, want));
            }
        }
        self.runtime
            .block_on(async {
                let proxy = self.firewalld(ZONE).await?;
                for (zone, settings) in &differ {
                    let () = proxy
                        .call("setZoneSettings2", &(zone.as_str(), settings))
                        .await?;
                }
                Ok(())
            })
            .map_err(call_error("firewalld"))?;
        Ok(differ.into_iter().map(|(zone, _)| zone.clone()).collect())
    }

    /// The openings as rich rules of every zone firewalld puts traffic in, in its runtime
    /// configuration: the wanted ones added, the mesh's no longer wanted removed. Returns
    /// (added, removed); with `apply` false, only counts them.
    pub fn converge_rich_rules(
        &self,
        openings: &[Opening],
        settings: &Settings,
        apply: bool,
    ) -> Result<(usize, usize), FirewallError> {
        let wanted: BTreeSet<String> = openings
            .iter()
            .filter_map(|o| rich_rule(o, settings))
            .collect();
        let mut plan: Vec<(&'static str, String, String)> = Vec::new();
        for (zone, have) in self.rich_rules()? {
            for rule in have.iter().filter(|r| is_ours(r) && !wanted.contains(*r)) {
                plan.push(("removeRichRule", zone.clone(), rule.clone()));
            }
            for rule in wanted.iter().filter(|r| !have.contains(r)) {
                plan.push(("addRichRule", zone.clone(), rule.clone()));
            }
        }
        let added = plan.iter().filter(|(m, _, _)| *m == "addRichRule").count();
        let removed = plan.len() - added;
        if apply {
            self.runtime
                .block_on(async {
                    let proxy = self.firewalld(ZONE).await?;
                    for (method, zone, rule) in &plan {
                        if *method == "addRichRule" {
                            let _: String = proxy
                                .call(*method, &(zone.as_str(), rule.as_str(), 0i32))
                                .await?;
                        } else {
                            let _: String =
                                proxy.call(*method, &(zone.as_str(), rule.as_str())).await?;
                        }
                    }
                    Ok(())
                })
                .map_err(call_error("firewalld"))?;
        }
        Ok((added, removed))
    }
}

/// firewalld's reloads and restarts, as they happen: what `mesh reconcile --watch` waits on
/// besides its period, so that an opening a reload dropped is back at once.
pub struct Reloads {
    _connection: zbus::Connection,
    reloaded: zbus::proxy::SignalStream<'static>,
    owner: zbus::proxy::OwnerChangedStream<'static>,
}

impl Reloads {
    /// Subscribed on the system bus; `None` when there is none.
    pub async fn subscribe() -> Option<Self> {
        let connection = zbus::Connection::system().await.ok()?;
        let proxy = zbus::Proxy::new(&connection, FIREWALLD, FIREWALLD_PATH, FIREWALLD)
            .await
            .ok()?;
        let reloaded = proxy.receive_signal("Reloaded").await.ok()?;
        let owner = proxy.receive_owner_changed().await.ok()?;
        Some(Self {
            _connection: connection,
            reloaded,
            owner,
        })
    }

    /// Returns when firewalld reloaded, started or stopped; never when the bus went away.
    pub async fn next(&mut self) {
        tokio::select! {
            Some(_) = self.reloaded.next() => {}
            Some(_) = self.owner.next() => {}
            else => std::future::pending::<()>().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_lib::model::{Port, PrivateNetwork, Protocol};

    fn opening(from: Source, paths: &[TrafficPath]) -> Opening {
        Opening {
            module: "web".into(),
            setting: "http".into(),
            port: Port::new(8080).unwrap(),
            protocol: Protocol::Tcp,
            paths: paths.iter().copied().collect(),
            from,
        }
    }

    /// A zone's runtime settings read back from their recorded form are what was read: the
    /// strings, lists, pairs and flags of `getZoneSettings2`, encoded as D-Bus carries them; of
    /// them, those its runtime configuration holds are compared, a missing one as empty.
    #[test]
    fn a_zone_recorded_reads_back_as_it_was() {
        use zbus::wire::{OwnedVariant, Variant};
        let owned = |v: Variant<'_>| OwnedVariant::try_from(v).unwrap();
        let settings: ZoneSettings = BTreeMap::from([
            ("target".to_owned(), owned(Variant::from("default"))),
            ("masquerade".to_owned(), owned(Variant::from(false))),
            (
                "services".to_owned(),
                owned(Variant::from(vec![
                    "ssh".to_owned(),
                    "dhcpv6-client".to_owned(),
                ])),
            ),
            (
                "ports".to_owned(),
                owned(Variant::from(vec![
                    ("8081".to_owned(), "tcp".to_owned()),
                    ("8083".to_owned(), "tcp".to_owned()),
                ])),
            ),
        ]);
        let text = encode(&settings).unwrap();
        assert_eq!(decode(&text).unwrap(), settings);
        assert_eq!(
            encode(&decode(&text).unwrap()).unwrap(),
            text,
            "the same bytes again"
        );
        assert!(decode("zz").is_err() && decode("0100").is_err());
        // What is compared and set back: the runtime's settings alone, each there.
        let kept = in_force(settings.clone());
        assert!(!kept.contains_key("target"), "only the files hold it");
        assert_eq!(kept.len(), runtime_settings().len());
        assert_eq!(kept["ports"], settings["ports"]);
        assert_eq!(kept["sources"], runtime_settings()[6].1, "none");
    }

    #[test]
    fn an_opening_as_firewalld_lists_its_rich_rule() {
        let settings = Settings {
            ports: Default::default(),
            private_network: PrivateNetwork {
                range: "10.77.0.0/24".parse().unwrap(),
                address: "10.77.0.1".parse().unwrap(),
                hub: false,
            },
        };
        let anywhere = rich_rule(
            &opening(Source::Anywhere, &[TrafficPath::Incoming]),
            &settings,
        )
        .unwrap();
        assert_eq!(
            anywhere,
            "rule priority=\"-32768\" port port=\"8080\" protocol=\"tcp\" log prefix=\"mesh: web http 8080/tcp from anywhere\" level=\"debug\" limit value=\"1/h\" accept"
        );
        assert!(is_ours(&anywhere));
        let private = rich_rule(
            &opening(
                Source::Private,
                &[TrafficPath::Incoming, TrafficPath::Forwarded],
            ),
            &settings,
        )
        .unwrap();
        assert!(
            private.starts_with("rule priority=\"-32768\" family=\"ipv4\" source address=\"10.77.0.0/24\" port port=\"8080\""),
            "{private}"
        );
        assert_eq!(
            rich_rule(
                &opening(Source::Anywhere, &[TrafficPath::Forwarded]),
                &settings
            ),
            None,
            "firewalld accepts a published port's forwarded connections itself"
        );
        assert!(!is_ours(
            "rule port port=\"80\" protocol=\"tcp\" log prefix=\"web\" accept"
        ));
    }
}
