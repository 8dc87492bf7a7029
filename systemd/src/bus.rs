//! systemd, through its D-Bus API on the system bus (zbus and zbus_systemd's proxies; never by
//! parsing `systemctl`'s output). The switch speaks to it through the [`Systemd`] trait: [`Bus`]
//! is the real one, [`Recording`] records what it is asked (for tests of what a switch asks).
//!
//! Every job is waited for: its `JobRemoved` signal is subscribed to before the job is queued, so
//! none is missed, and a job not finished within the bound counts as failed. The last lines of a
//! unit's log come from the journal (`journalctl`, the journal's own reader: there is no D-Bus
//! call for them).
//!
//! A unit's state is its state words, and for a service that waits for its `Restart=` or
//! failed, how its main process ended (`Result`, `ExecMainCode`, `ExecMainStatus`): waiting
//! after a clean exit is not a failure, waiting after a failed one is ([`UnitNow::failing`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::StreamExt;
use mesh_lib::model::UnitName;
use serde::{Deserialize, Serialize};
use zbus_systemd::systemd1::{ManagerProxy, ServiceProxy, UnitProxy};

/// A systemd failure.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    /// No systemd answers on the system bus.
    #[error("systemd does not answer on the system bus: {0}")]
    Unreachable(#[source] zbus::Error),
    /// A call failed.
    #[error("systemd {what}{}: {source}", .unit.as_ref().map(|u| format!(" {u}")).unwrap_or_default())]
    Call {
        /// What was asked.
        what: &'static str,
        /// The unit, if the call was about one.
        unit: Option<UnitName>,
        /// The cause.
        #[source]
        source: zbus::Error,
    },
    /// The runtime for the calls could not start.
    #[error("cannot start the runtime for systemd calls: {0}")]
    Runtime(#[from] std::io::Error),
}

/// A unit as systemd has it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitNow {
    /// `loaded`, `not-found`, `masked`, …
    pub load: String,
    /// `active`, `inactive`, `failed`, `activating`, …
    pub active: String,
    /// `running`, `dead`, `auto-restart`, … (empty when not known).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sub: String,
    /// The unit's own name, when it was asked for by another (an alias: `sshd.service` is
    /// `ssh.service`); empty when it is the name asked.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// How its main process last ended, for a service that waits to be started again or
    /// failed (read only then: elsewhere it says nothing about the unit as it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<Exit>,
}

/// How a service's main process last ended, as systemd has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    /// systemd's `Result`: `success` when the process ended cleanly — status 0, a status its
    /// `SuccessExitStatus=` lists, or a signal a service is stopped with (`SIGTERM`, …) — else
    /// why it failed: `exit-code`, `signal`, `core-dump`, `watchdog`, `timeout`,
    /// `start-limit-hit`, `oom-kill`, …
    pub result: String,
    /// `ExecMainCode`: how the process ended (1 it exited, 2 it was killed, 3 it dumped core;
    /// 0 when none ended).
    pub code: i32,
    /// `ExecMainStatus`: its exit status, or the signal's number.
    pub status: i32,
}

impl Exit {
    /// Whether it ended cleanly: what systemd says (`Result`), which knows the unit's
    /// `SuccessExitStatus=`; the exit status alone does not.
    pub fn clean(&self) -> bool {
        self.result == "success"
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self.code {
            1 => Some(format!("exited with status {}", self.status)),
            2 => Some(format!("was killed by {}", signal(self.status))),
            3 => Some(format!("dumped core on {}", signal(self.status))),
            _ => None,
        };
        // The result is said when the way the process ended does not say it already.
        let said = matches!(
            (self.result.as_str(), self.code),
            ("exit-code", 1) | ("signal", 2) | ("core-dump", 3)
        );
        match how {
            Some(how) if said => write!(f, "its main process {how}"),
            Some(how) => write!(f, "{}, its main process {how}", self.result),
            None => write!(f, "{}", self.result),
        }
    }
}

/// A signal's name, for the ones a service dies of; its number otherwise.
fn signal(number: i32) -> String {
    let name = match number {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return format!("signal {number}"),
    };
    name.to_owned()
}

impl UnitNow {
    /// A unit's state from its state words (asked by its own name).
    pub fn new(load: &str, active: &str, sub: &str) -> Self {
        Self {
            load: load.into(),
            active: active.into(),
            sub: sub.into(),
            id: String::new(),
            exit: None,
        }
    }

    /// The same state, its main process having ended as `exit` says.
    pub fn ended(mut self, exit: Exit) -> Self {
        self.exit = Some(exit);
        self
    }

    /// Whether it failed, or is failing: `failed`, or waiting to be started again
    /// (`auto-restart`) after its main process failed. One whose process ended cleanly and
    /// waits for its `Restart=` (periodic work done, a status `SuccessExitStatus=` lists) is
    /// not failing; one whose end is not known is.
    pub fn failing(&self) -> bool {
        self.active == "failed"
            || (self.waits_to_restart() && !self.exit.as_ref().is_some_and(Exit::clean))
    }

    /// Whether it waits to be started again by its `Restart=` (`auto-restart`; systemd 254
    /// and later say `auto-restart-queued` once the restart's job is queued).
    pub fn waits_to_restart(&self) -> bool {
        matches!(self.sub.as_str(), "auto-restart" | "auto-restart-queued")
    }

    /// Whether how its main process ended is worth reading: a service that waits to be
    /// started again (it decides whether that is a failure) or failed (it says how).
    fn exit_tells(&self, name: &UnitName) -> bool {
        name.kind() == "service" && (self.waits_to_restart() || self.active == "failed")
    }

    /// Whether it runs (or is on its way up, or reloading).
    pub fn running(&self) -> bool {
        matches!(
            self.active.as_str(),
            "active" | "activating" | "reloading" | "refreshing"
        )
    }

    /// Whether systemd has a unit file for it.
    pub fn known(&self) -> bool {
        self.load == "loaded"
    }
}

/// A unit systemd knows, as found: where its file is, whether it runs and is enabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    /// Its unit file (`FragmentPath`).
    pub fragment: String,
    /// Whether it runs.
    pub active: bool,
    /// Whether it is enabled.
    pub enabled: bool,
}

/// What a job does to a unit. The order is the order a switch runs them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// Stop it.
    Stop,
    /// Reload its configuration.
    Reload,
    /// Restart it.
    Restart,
    /// Start it.
    Start,
}

impl Verb {
    /// The word.
    pub fn word(self) -> &'static str {
        match self {
            Verb::Stop => "stop",
            Verb::Reload => "reload",
            Verb::Restart => "restart",
            Verb::Start => "start",
        }
    }
}

/// How a job ended: systemd's result (`done`, `failed`, `timeout`, `dependency`, `canceled`,
/// `skipped`), `not finished` when the bound passed first, or the call's error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// The unit.
    pub unit: UnitName,
    /// The job.
    pub verb: Verb,
    /// `done` when it succeeded.
    pub result: String,
}

impl Outcome {
    /// Whether the job succeeded.
    pub fn ok(&self) -> bool {
        self.result == "done"
    }
}

/// What the activator asks of systemd.
pub trait Systemd: Send + Sync {
    /// The units' states, in one call, with how its main process last ended for a service
    /// that waits for its `Restart=` or failed. A unit systemd does not know is `not-found`.
    fn units(&self, names: &[&UnitName]) -> Result<BTreeMap<UnitName, UnitNow>, SystemdError>;
    /// The unit of this name systemd knows from a file, if any.
    fn known(&self, name: &UnitName) -> Result<Option<Known>, SystemdError>;
    /// `daemon-reload`: systemd reads its unit files again. Returns when it is done.
    fn daemon_reload(&self) -> Result<(), SystemdError>;
    /// Enables the units (the symlinks their `[Install]` sections ask for, replacing others);
    /// the ones that could not be, each with systemd's reason (one whose file is missing, say),
    /// while the others are enabled.
    fn enable(&self, names: &[&UnitName]) -> Result<Vec<(UnitName, String)>, SystemdError>;
    /// Disables the units. A unit whose file is gone has nothing left to disable: done.
    fn disable(&self, names: &[&UnitName]) -> Result<(), SystemdError>;
    /// The loaded instances of a template (`getty@.service`: `getty@tty1.service`, …), as
    /// [`Systemd::units`] has them.
    fn instances(&self, template: &UnitName) -> Result<BTreeMap<UnitName, UnitNow>, SystemdError>;
    /// The units a unit activates (a socket's service, a timer's), as systemd has them loaded.
    fn triggers(&self, name: &UnitName) -> Result<Vec<UnitName>, SystemdError>;
    /// Queues one job per unit, at once, and waits for every one within `bound`. A restart is
    /// a restart of a unit that runs (`try-restart`: one that stopped meanwhile stays stopped);
    /// a stop of a unit systemd does not have is done.
    fn run(
        &self,
        jobs: &[(&UnitName, Verb)],
        bound: Duration,
    ) -> Result<Vec<Outcome>, SystemdError>;
    /// The last `lines` lines of a unit's log (best effort: empty when the journal cannot be
    /// read).
    fn log_tail(&self, unit: &UnitName, lines: usize) -> Vec<String>;
    /// How many jobs were queued.
    fn jobs(&self) -> usize;
}

/// systemd on the system bus.
pub struct Bus {
    runtime: tokio::runtime::Runtime,
    connection: zbus::Connection,
    jobs: std::sync::atomic::AtomicUsize,
}

impl Bus {
    /// Connects to the system bus (`DBUS_SYSTEM_BUS_ADDRESS`, or the standard socket) and checks
    /// that systemd answers on it.
    pub fn connect() -> Result<Self, SystemdError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let connection = runtime.block_on(async {
            let connection = zbus::Connection::system().await?;
            let manager = manager(&connection).await?;
            manager.version().await?;
            Ok::<_, zbus::Error>(connection)
        });
        Ok(Self {
            runtime,
            connection: connection.map_err(SystemdError::Unreachable)?,
            jobs: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    fn call<T>(
        &self,
        what: &'static str,
        unit: Option<&UnitName>,
        f: impl std::future::Future<Output = zbus::Result<T>>,
    ) -> Result<T, SystemdError> {
        self.runtime
            .block_on(f)
            .map_err(|source| SystemdError::Call {
                what,
                unit: unit.cloned(),
                source,
            })
    }

    /// `now`, with how its main process last ended when that tells (see [`UnitNow::exit`]),
    /// read from the unit's object at `path`: its `Result`, `ExecMainCode` and
    /// `ExecMainStatus`.
    fn with_exit(
        &self,
        name: &UnitName,
        now: UnitNow,
        path: zbus::OwnedObjectPath,
    ) -> Result<UnitNow, SystemdError> {
        if !now.exit_tells(name) {
            return Ok(now);
        }
        let exit = self.call("inspect", Some(name), async {
            let service = ServiceProxy::builder(&self.connection)
                .path(path)
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await?;
            Ok(Exit {
                result: service.result().await?,
                code: service.exec_main_code().await?,
                status: service.exec_main_status().await?,
            })
        })?;
        Ok(now.ended(exit))
    }
}

async fn manager(connection: &zbus::Connection) -> zbus::Result<ManagerProxy<'static>> {
    ManagerProxy::builder(connection)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
}

fn names(list: &[&UnitName]) -> Vec<String> {
    list.iter().map(|n| n.to_string()).collect()
}

/// The D-Bus error's name, when systemd answered with one.
fn error_name(e: &zbus::Error) -> Option<&str> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.as_str()),
        _ => None,
    }
}

/// systemd has no unit, or no unit file, of that name.
fn no_such_unit(e: &zbus::Error) -> bool {
    error_name(e) == Some("org.freedesktop.systemd1.NoSuchUnit")
}

/// systemd answered, and refused (as opposed to a bus that failed).
fn refused(e: &zbus::Error) -> bool {
    error_name(e).is_some()
}

/// What systemd said, without the error's name.
fn said(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, detail, _) => {
            detail.clone().unwrap_or_else(|| name.to_string())
        }
        other => other.to_string(),
    }
}

impl Systemd for Bus {
    fn units(&self, list: &[&UnitName]) -> Result<BTreeMap<UnitName, UnitNow>, SystemdError> {
        if list.is_empty() {
            return Ok(BTreeMap::new());
        }
        let rows = self.call("list units", None, async {
            manager(&self.connection)
                .await?
                .list_units_by_names(names(list))
                .await
        })?;
        // One row per name asked, in order; a row names the unit by its own name, not by the
        // alias it was asked by (`sshd.service` answers as `ssh.service`), so each row is the
        // answer for the name at its place (by its own name only if systemd ever answered
        // otherwise).
        let by_place = rows.len() == list.len();
        let mut out = BTreeMap::new();
        for (i, row) in rows.into_iter().enumerate() {
            let name = match by_place {
                true => list[i].clone(),
                false => match UnitName::new(&row.0) {
                    Ok(name) => name,
                    Err(_) => continue,
                },
            };
            let id = if row.0 == name.as_str() {
                String::new()
            } else {
                row.0
            };
            let now = UnitNow {
                load: row.2,
                active: row.3,
                sub: row.4,
                id,
                exit: None,
            };
            let now = self.with_exit(&name, now, row.6)?;
            out.insert(name, now);
        }
        Ok(out)
    }

    fn known(&self, name: &UnitName) -> Result<Option<Known>, SystemdError> {
        self.call("inspect", Some(name), async {
            let manager = manager(&self.connection).await?;
            let path = manager.load_unit(name.to_string()).await?;
            let unit = UnitProxy::builder(&self.connection)
                .path(path)
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await?;
            let fragment = unit.fragment_path().await?;
            if unit.load_state().await? != "loaded" || fragment.is_empty() {
                return Ok(None);
            }
            let active = matches!(
                unit.active_state().await?.as_str(),
                "active" | "activating" | "reloading" | "refreshing"
            );
            let enabled = matches!(
                unit.unit_file_state().await?.as_str(),
                "enabled" | "enabled-runtime" | "alias"
            );
            Ok(Some(Known {
                fragment,
                active,
                enabled,
            }))
        })
    }

    fn daemon_reload(&self) -> Result<(), SystemdError> {
        self.call("daemon-reload", None, async {
            manager(&self.connection).await?.reload().await
        })
    }

    fn enable(&self, list: &[&UnitName]) -> Result<Vec<(UnitName, String)>, SystemdError> {
        let enable = |list: Vec<String>| async move {
            manager(&self.connection)
                .await?
                .enable_unit_files(list, false, true)
                .await
                .map(|_| ())
        };
        if list.is_empty() {
            return Ok(Vec::new());
        }
        match self.runtime.block_on(enable(names(list))) {
            Ok(()) => return Ok(Vec::new()),
            Err(e) if !refused(&e) => {
                return Err(SystemdError::Call {
                    what: "enable",
                    unit: list.first().map(|u| (*u).clone()),
                    source: e,
                })
            }
            Err(_) => {}
        }
        // One refused the lot: each on its own, so that the others are enabled.
        let mut out = Vec::new();
        for unit in list {
            match self.runtime.block_on(enable(vec![unit.to_string()])) {
                Ok(()) => {}
                Err(e) if refused(&e) => out.push(((*unit).clone(), said(&e))),
                Err(source) => {
                    return Err(SystemdError::Call {
                        what: "enable",
                        unit: Some((*unit).clone()),
                        source,
                    })
                }
            }
        }
        Ok(out)
    }

    fn disable(&self, list: &[&UnitName]) -> Result<(), SystemdError> {
        let disable = |list: Vec<String>| async move {
            manager(&self.connection)
                .await?
                .disable_unit_files(list, false)
                .await
                .map(|_| ())
        };
        if list.is_empty() {
            return Ok(());
        }
        match self.runtime.block_on(disable(names(list))) {
            Err(e) if no_such_unit(&e) => {}
            done => {
                return done.map_err(|source| SystemdError::Call {
                    what: "disable",
                    unit: list.first().map(|u| (*u).clone()),
                    source,
                })
            }
        }
        // A unit whose file is gone (a switch finished after a crash) has no links left: each
        // of the others on its own.
        for unit in list {
            match self.runtime.block_on(disable(vec![unit.to_string()])) {
                Err(e) if no_such_unit(&e) => {}
                done => done.map_err(|source| SystemdError::Call {
                    what: "disable",
                    unit: Some((*unit).clone()),
                    source,
                })?,
            }
        }
        Ok(())
    }

    fn instances(&self, template: &UnitName) -> Result<BTreeMap<UnitName, UnitNow>, SystemdError> {
        let Some((prefix, kind)) = template.as_str().rsplit_once("@.") else {
            return Ok(BTreeMap::new());
        };
        let pattern = format!("{prefix}@*.{kind}");
        let rows = self.call("list instances", Some(template), async {
            manager(&self.connection)
                .await?
                .list_units_by_patterns(Vec::new(), vec![pattern])
                .await
        })?;
        let mut out = BTreeMap::new();
        for row in rows {
            let Ok(name) = UnitName::new(&row.0) else {
                continue;
            };
            let now = self.with_exit(&name, UnitNow::new(&row.2, &row.3, &row.4), row.6)?;
            out.insert(name, now);
        }
        Ok(out)
    }

    fn triggers(&self, name: &UnitName) -> Result<Vec<UnitName>, SystemdError> {
        let list = self.call("inspect", Some(name), async {
            let manager = manager(&self.connection).await?;
            let path = manager.load_unit(name.to_string()).await?;
            UnitProxy::builder(&self.connection)
                .path(path)
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await?
                .triggers()
                .await
        })?;
        Ok(list.iter().filter_map(|n| UnitName::new(n).ok()).collect())
    }

    fn run(
        &self,
        jobs: &[(&UnitName, Verb)],
        bound: Duration,
    ) -> Result<Vec<Outcome>, SystemdError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.runtime.block_on(async {
            let err = |what, unit: Option<&UnitName>| {
                let unit = unit.cloned();
                move |source| SystemdError::Call { what, unit, source }
            };
            let manager = manager(&self.connection)
                .await
                .map_err(err("connect", None))?;
            // Subscribed before any job is queued, so no JobRemoved is missed.
            manager.subscribe().await.map_err(err("subscribe", None))?;
            let mut removed = manager
                .receive_job_removed()
                .await
                .map_err(err("subscribe", None))?;
            // The signals are read while the jobs are queued: a stream not read holds at most
            // 64 messages, and a full one stops the connection (the calls' replies too).
            let ended: RefCell<BTreeMap<String, String>> = RefCell::new(BTreeMap::new());
            let queued: RefCell<Option<Vec<Option<String>>>> = RefCell::new(None);
            let all_queued = tokio::sync::Notify::new();
            let read = async {
                loop {
                    let done = queued.borrow().as_ref().is_some_and(|q| {
                        let ended = ended.borrow();
                        q.iter().flatten().all(|job| ended.contains_key(job))
                    });
                    if done {
                        break;
                    }
                    tokio::select! {
                        signal = removed.next() => {
                            let Some(signal) = signal else { break };
                            if let Ok(args) = signal.args() {
                                ended
                                    .borrow_mut()
                                    .insert(args.job.as_str().to_owned(), args.result.clone());
                            }
                        }
                        _ = all_queued.notified() => {}
                    }
                }
            };
            let queue = async {
                let mut paths = Vec::new();
                let mut refused = Vec::new();
                for (unit, verb) in jobs {
                    let (name, mode) = (unit.to_string(), "replace".to_string());
                    let job = match verb {
                        Verb::Stop => manager.stop_unit(name, mode).await,
                        Verb::Reload => manager.reload_unit(name, mode).await,
                        Verb::Restart => manager.try_restart_unit(name, mode).await,
                        Verb::Start => manager.start_unit(name, mode).await,
                    };
                    self.jobs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    match job {
                        Ok(path) => {
                            paths.push(Some(path.as_str().to_owned()));
                            refused.push(None);
                        }
                        // A unit systemd does not have is stopped.
                        Err(e) if *verb == Verb::Stop && no_such_unit(&e) => {
                            paths.push(None);
                            refused.push(Some("done".into()));
                        }
                        Err(e) => {
                            paths.push(None);
                            refused.push(Some(format!("refused: {e}")));
                        }
                    }
                }
                *queued.borrow_mut() = Some(paths);
                all_queued.notify_one();
                refused
            };
            let (refused, _bounded) =
                futures_util::future::join(queue, tokio::time::timeout(bound, read)).await;
            let paths = queued.into_inner().unwrap_or_default();
            let ended = ended.into_inner();
            let out: Vec<Outcome> = jobs
                .iter()
                .zip(paths.iter().zip(refused))
                .map(|((unit, verb), (path, refused))| Outcome {
                    unit: (*unit).clone(),
                    verb: *verb,
                    result: refused.unwrap_or_else(|| {
                        path.as_ref()
                            .and_then(|p| ended.get(p).cloned())
                            .unwrap_or_else(|| "not finished".into())
                    }),
                })
                .collect();
            let _quiet = manager.unsubscribe().await;
            Ok(out)
        })
    }

    fn log_tail(&self, unit: &UnitName, lines: usize) -> Vec<String> {
        // What was logged before now is in the journal once --sync returns (best effort).
        let _synced = std::process::Command::new("journalctl")
            .arg("--sync")
            .output();
        let out = std::process::Command::new("journalctl")
            .args(["--no-pager", "-o", "cat", "-n"])
            .arg(lines.to_string())
            .arg("-u")
            .arg(unit.as_str())
            .output();
        match out {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        }
    }

    fn jobs(&self) -> usize {
        self.jobs.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A call made to a [`Recording`] systemd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `daemon-reload`.
    DaemonReload,
    /// Enable these units.
    Enable(Vec<String>),
    /// Disable these units.
    Disable(Vec<String>),
    /// These jobs, queued together.
    Jobs(Vec<(String, Verb)>),
}

/// A systemd that records what it is asked and answers from a table: for tests of what a switch
/// asks, never instead of the real one in tests of what happens.
#[derive(Debug, Default)]
pub struct Recording {
    /// The units' states it answers with (a unit not in it is `not-found`).
    pub units: Mutex<BTreeMap<UnitName, UnitNow>>,
    /// Jobs that end with another result than `done`.
    pub fail: BTreeSet<UnitName>,
    calls: Mutex<Vec<Call>>,
}

impl Recording {
    /// What it was asked, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("not poisoned").clone()
    }

    fn record(&self, call: Call) {
        self.calls.lock().expect("not poisoned").push(call);
    }
}

impl Systemd for std::sync::Arc<Recording> {
    fn units(&self, list: &[&UnitName]) -> Result<BTreeMap<UnitName, UnitNow>, SystemdError> {
        let table = self.units.lock().expect("not poisoned");
        Ok(list
            .iter()
            .map(|n| {
                let now = table
                    .get(*n)
                    .cloned()
                    .unwrap_or_else(|| UnitNow::new("not-found", "inactive", "dead"));
                ((*n).clone(), now)
            })
            .collect())
    }

    fn known(&self, name: &UnitName) -> Result<Option<Known>, SystemdError> {
        let table = self.units.lock().expect("not poisoned");
        Ok(table.get(name).filter(|u| u.known()).map(|u| Known {
            fragment: format!("/usr/lib/systemd/system/{name}"),
            active: u.running(),
            enabled: false,
        }))
    }

    fn daemon_reload(&self) -> Result<(), SystemdError> {
        self.record(Call::DaemonReload);
        Ok(())
    }

    fn enable(&self, list: &[&UnitName]) -> Result<Vec<(UnitName, String)>, SystemdError> {
        self.record(Call::Enable(names(list)));
        Ok(Vec::new())
    }

    fn disable(&self, list: &[&UnitName]) -> Result<(), SystemdError> {
        self.record(Call::Disable(names(list)));
        Ok(())
    }

    fn instances(&self, template: &UnitName) -> Result<BTreeMap<UnitName, UnitNow>, SystemdError> {
        let table = self.units.lock().expect("not poisoned");
        Ok(table
            .iter()
            .filter(|(n, _)| n.template().as_ref() == Some(template))
            .map(|(n, u)| (n.clone(), u.clone()))
            .collect())
    }

    fn triggers(&self, name: &UnitName) -> Result<Vec<UnitName>, SystemdError> {
        let stem = name.as_str().rsplit_once('.').map_or("", |(s, _)| s);
        Ok(UnitName::new(&format!("{stem}.service"))
            .into_iter()
            .collect())
    }

    fn run(
        &self,
        jobs: &[(&UnitName, Verb)],
        _bound: Duration,
    ) -> Result<Vec<Outcome>, SystemdError> {
        self.record(Call::Jobs(
            jobs.iter().map(|(u, v)| (u.to_string(), *v)).collect(),
        ));
        Ok(jobs
            .iter()
            .map(|(u, v)| Outcome {
                unit: (*u).clone(),
                verb: *v,
                result: if self.fail.contains(*u) {
                    "failed".into()
                } else {
                    "done".into()
                },
            })
            .collect())
    }

    fn log_tail(&self, _unit: &UnitName, _lines: usize) -> Vec<String> {
        Vec::new()
    }

    fn jobs(&self) -> usize {
        self.calls()
            .iter()
            .map(|c| match c {
                Call::Jobs(j) => j.len(),
                _ => 0,
            })
            .sum()
    }
}
