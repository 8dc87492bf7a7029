//! The transport: the system's OpenSSH, through the `openssh` crate — one multiplexed connection
//! per node per run (a master `ssh` process; every command a channel on it), so the user's ssh
//! config, agent and known hosts apply, host keys are checked strictly, and no protocol of the
//! mesh's own ever listens on the network. Each remote command is the node's own `mesh`, with the
//! node's global options from the fleet file.

use std::time::Duration;

use openssh::{ControlPersist, KnownHosts, Session, SessionBuilder, Stdio};
use tokio::io::AsyncWriteExt;

use crate::file::{Fleet, Node};

/// The first argument that makes the mesh binary the ProxyCommand of its own ssh connections
/// (see [`proxy`]); not a command of the CLI.
pub const PROXY_ARG: &str = "__mesh-ssh-proxy";

/// The ssh_config file the mesh's connections read (`-F`): the fleet's `ssh_config`, or a
/// wrapper (`Fleet::ssh_wrapper`) that reads the user's own configuration first — the fleet's
/// `ssh_config`, else `~/.ssh/config` and `/etc/ssh/ssh_config`, as ssh reads them — and only
/// then names the mesh binary as the `ProxyCommand` (with `ProxyUseFdpass`): ssh takes the
/// first value it finds, so a `ProxyCommand` or `ProxyJump` of the user's own wins. The proxy
/// opens the TCP connection with `TCP_NODELAY`, which ssh sets only for interactive sessions:
/// without it, each of the small packets a login sends back to back waits for the last one's
/// delayed acknowledgement, some 40 ms a connection. `None`: ssh's own defaults.
pub fn config_file(fleet: &Fleet) -> Option<std::path::PathBuf> {
    let Some(wrapper) = &fleet.ssh_wrapper else {
        return fleet.ssh_config.clone();
    };
    match wrapper_text(fleet).map(|text| write_if_changed(wrapper, &text)) {
        Some(Ok(())) => Some(wrapper.clone()),
        _ => fleet.ssh_config.clone(),
    }
}

/// The ssh_config file `node`'s connections read: [`config_file`], except that a node whose
/// connection the operator's own configuration already routes — a `ProxyCommand` or a
/// `ProxyJump` of theirs, which ssh takes before the mesh's — reads the operator's configuration
/// alone. The wrapper's `ProxyUseFdpass` belongs to the mesh's proxy only: under a proxy that
/// relays bytes (`nc`, `ssh -W`, `docker exec -i`) ssh would wait for a descriptor that never
/// comes. Whose proxy applies is what ssh itself says (`ssh -G`, with the node's port and user),
/// asked once per node and process; when ssh cannot say, the operator's configuration alone.
pub fn config_for(fleet: &Fleet, node: &Node) -> Option<std::path::PathBuf> {
    let config = config_file(fleet);
    if config.is_none() || config == fleet.ssh_config {
        return config;
    }
    let wrapper = config.as_deref()?;
    let key = (
        wrapper.to_path_buf(),
        node.ssh.destination.clone(),
        node.ssh.port,
        node.ssh.user.clone(),
    );
    type Key = (std::path::PathBuf, String, Option<u16>, Option<String>);
    static ASKED: std::sync::Mutex<Vec<(Key, bool)>> = std::sync::Mutex::new(Vec::new());
    let known = ASKED
        .lock()
        .ok()
        .and_then(|a| a.iter().find(|(k, _)| *k == key).map(|(_, own)| *own));
    let own = known.unwrap_or_else(|| {
        let own = own_proxy_applies(wrapper, node);
        if let Ok(mut asked) = ASKED.lock() {
            asked.push((key, own));
        }
        own
    });
    if own {
        config
    } else {
        fleet.ssh_config.clone()
    }
}

/// Whether ssh, reading `wrapper` for `node`, would connect through the mesh's own proxy.
fn own_proxy_applies(wrapper: &std::path::Path, node: &Node) -> bool {
    let mut c = std::process::Command::new("ssh");
    c.arg("-F").arg(wrapper).arg("-G");
    if let Some(port) = node.ssh.port {
        c.arg("-p").arg(port.to_string());
    }
    if let Some(user) = &node.ssh.user {
        c.arg("-l").arg(user);
    }
    c.arg("--").arg(&node.ssh.destination);
    let Ok(out) = c
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return false;
    };
    out.status.success() && routed_by_mesh(&String::from_utf8_lossy(&out.stdout))
}

/// Whether `ssh -G`'s output names the mesh's proxy as the connection's, and no jump host.
fn routed_by_mesh(effective: &str) -> bool {
    let value = |name: &str| {
        effective.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    };
    value("proxyjump").is_none_or(|v| v == "none")
        && value("proxycommand").is_some_and(|v| v.contains(&format!(" {PROXY_ARG} ")))
}

/// The wrapper's text, or `None` when a path cannot be written in it as it is.
fn wrapper_text(fleet: &Fleet) -> Option<String> {
    let quoted = |p: &std::path::Path| {
        let p = p.to_str()?;
        (!p.contains(['"', '\n', '%'])).then(|| format!("\"{p}\""))
    };
    let mut text = String::from(
        "# Written by mesh for its own ssh connections (see the manual's docs/src/fleets.md).\n",
    );
    match &fleet.ssh_config {
        Some(c) => text.push_str(&format!("Include {}\n", quoted(c)?)),
        None => {
            if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
                let user = std::path::Path::new(&home).join(".ssh").join("config");
                text.push_str(&format!("Include {}\n", quoted(&user)?));
            }
            text.push_str("Include /etc/ssh/ssh_config\n");
        }
    }
    let exe = std::env::current_exe().ok()?;
    let exe = exe.to_str()?;
    if exe.contains(['\'', '\n', '%']) {
        return None;
    }
    text.push_str(&format!(
        "Host *\n  ProxyCommand '{exe}' {PROXY_ARG} %h %p\n  ProxyUseFdpass yes\n"
    ));
    Some(text)
}

fn write_if_changed(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|b| b == text.as_bytes()) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        mesh_lib::atomic::create_dir_all(dir)?;
    }
    mesh_lib::atomic::write_file(path, text.as_bytes(), 0o600)
}

/// Readies this process's environment for the ssh processes it starts; called first thing, while
/// the process has one thread.
///
/// ssh runs a `ProxyCommand` (the mesh's own, see [`config_file`]) through the user's shell,
/// with the socket it will pass on as that shell's input. bash so started, with `SHLVL` unset or
/// 0 (a mesh run from a timer, a CI job, `sudo -i`…), takes itself for a command sshd ran and
/// reads `~/.bashrc` first: a pyenv or conda set-up there cost 25–50 ms of the deployer's CPU per
/// connection, two connections per node. Started from a shell, `SHLVL` is 1 or more and bash
/// reads nothing; this makes it so when it is not.
pub fn prepare_environment() {
    let level = std::env::var("SHLVL")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok());
    if level.is_none_or(|l| l < 1) {
        std::env::set_var("SHLVL", "1");
    }
}

/// `mesh __mesh-ssh-proxy HOST PORT`, as ssh's `ProxyCommand` with `ProxyUseFdpass`: connects
/// to HOST:PORT (each of its addresses in turn, each within the connect timeout), sets
/// `TCP_NODELAY`, and hands the connected socket to ssh over its standard output. Its exit
/// code.
pub fn proxy(args: &[std::ffi::OsString]) -> u8 {
    use std::net::ToSocketAddrs;
    let (Some(host), Some(port)) = (
        args.first().and_then(|h| h.to_str()),
        args.get(1)
            .and_then(|p| p.to_str())
            .and_then(|p| p.parse::<u16>().ok()),
    ) else {
        eprintln!("usage: mesh {PROXY_ARG} HOST PORT (ssh's ProxyCommand, with ProxyUseFdpass)");
        return 2;
    };
    let addresses = match (host, port).to_socket_addrs() {
        Ok(a) => a.collect::<Vec<_>>(),
        Err(e) => {
            eprintln!("ssh: Could not resolve hostname {host}: {e}");
            return 255;
        }
    };
    let mut last = None;
    for address in addresses {
        match std::net::TcpStream::connect_timeout(&address, timeout()) {
            Ok(stream) => {
                let _best_effort = stream.set_nodelay(true);
                return match hand_over(&stream) {
                    Ok(()) => 0,
                    Err(e) => {
                        eprintln!("mesh: handing the connection to ssh: {e}");
                        255
                    }
                };
            }
            Err(e) => last = Some(e),
        }
    }
    eprintln!(
        "ssh: connect to host {host} port {port}: {}",
        last.map_or("no address".to_owned(), |e| e.to_string())
    );
    255
}

/// Sends `stream` to ssh over standard output (one byte, the descriptor in `SCM_RIGHTS`).
fn hand_over(stream: &std::net::TcpStream) -> std::io::Result<()> {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::os::fd::AsFd;
    let fds = [stream.as_fd()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("no room for the descriptor"));
    }
    sendmsg(
        rustix::stdio::stdout(),
        &[std::io::IoSlice::new(b"\0")],
        &mut control,
        SendFlags::empty(),
    )?;
    Ok(())
}

/// How long a connection may take to open, unless `MESH_SSH_TIMEOUT` (seconds) says otherwise.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a node could not be reached or a command on it failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SshError {
    /// The node's host key is not the one known: refused, as ssh refuses it.
    #[error("the host key of {node} is not the one known for it: refused (known: {}; offered: {}){}", .pinned.as_deref().unwrap_or("not read"), .offered.as_deref().unwrap_or("not read"), if .message.is_empty() { String::new() } else { format!(": {}", .message) })]
    HostKey {
        /// The node.
        node: String,
        /// The fingerprint of the key known for it (`SHA256:…`).
        pinned: Option<String>,
        /// The fingerprint of the key it offered.
        offered: Option<String>,
        /// What ssh said last.
        message: String,
    },
    /// No connection could be made.
    #[error("{node} is unreachable: {message}")]
    Unreachable {
        /// The node.
        node: String,
        /// What ssh said.
        message: String,
    },
    /// The connection dropped during a command.
    #[error("the connection to {node} dropped: {message}")]
    Dropped {
        /// The node.
        node: String,
        /// What happened.
        message: String,
    },
}

/// What a remote command said.
#[derive(Debug, Clone)]
pub struct Ran {
    /// Its exit code (`None`: killed, or the connection dropped).
    pub code: Option<i32>,
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: String,
}

impl Ran {
    /// Whether it succeeded.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// Its standard output as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// A connection to one node.
pub struct Link {
    runtime: tokio::runtime::Runtime,
    session: Option<Session>,
    node: Node,
    /// Bytes written to the node's commands' stdin (the objects sent, the lists asked).
    pub sent: u64,
}

fn timeout() -> Duration {
    std::env::var("MESH_SSH_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s: &u64| *s > 0)
        .map_or(CONNECT_TIMEOUT, Duration::from_secs)
}

fn classify(node: &Node, e: &openssh::Error) -> SshError {
    use std::error::Error;
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    classify_said(node, &message)
}

/// What ssh said when it could not connect, as a reason.
fn classify_said(node: &Node, said: &str) -> SshError {
    let message = mesh_lib::text::escape_keeping_lines(said.trim()).into_owned();
    let name = node.name.to_string();
    if message.contains("Host key verification failed")
        || message.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
        || message.contains("host key for")
    {
        let (pinned, offered) = fingerprints(&message);
        // ssh's banner is long: its conclusion is the line that says what it did.
        let last = message
            .lines()
            .find(|l| l.contains("has changed and you have requested strict checking"))
            .or_else(|| message.lines().find(|l| l.contains("verification failed")))
            .unwrap_or_default()
            .trim_end_matches(')')
            .trim_end_matches("\\r")
            .trim()
            .to_owned();
        SshError::HostKey {
            node: name,
            pinned,
            offered,
            message: last,
        }
    } else {
        SshError::Unreachable {
            node: name,
            message,
        }
    }
}

/// From what ssh said of a changed host key: the fingerprint of the key known for the host
/// (the `Offending … key in FILE:LINE`, read and hashed) and of the one it offered.
fn fingerprints(said: &str) -> (Option<String>, Option<String>) {
    let offered = said
        .split_whitespace()
        .find(|w| w.starts_with("SHA256:"))
        .map(|w| w.trim_end_matches("\\r").trim_end_matches('.').to_owned());
    let pinned = said.lines().find_map(|l| {
        let at = l.split(" key in ").nth(1)?.trim().trim_end_matches("\\r");
        let (file, line) = at.rsplit_once(':')?;
        let line: usize = line.trim().parse().ok()?;
        let text = std::fs::read_to_string(file).ok()?;
        let entry = text.lines().nth(line.checked_sub(1)?)?;
        known_fingerprint(entry)
    });
    (pinned, offered)
}

/// The `SHA256:…` fingerprint of the key on a `known_hosts` line.
fn known_fingerprint(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    if words.peek().is_some_and(|w| w.starts_with('@')) {
        words.next();
    }
    let _hosts = words.next()?;
    let key = format!("{} {}", words.next()?, words.next()?);
    let key = ssh_key::PublicKey::from_openssh(&key).ok()?;
    Some(key.fingerprint(ssh_key::HashAlg::Sha256).to_string())
}

/// The key exchange a confirmation's connection prefers, unless `MESH_CONFIRM_KEX` names
/// another (`default`: ssh's own choice). A confirmation carries a one-time token and nothing
/// else, so the post-quantum default — which guards what is recorded now against its
/// decryption years from now, and costs ~70 ms of CPU a connection on this kind of machine —
/// buys it nothing; the classical exchange is put first, the defaults after it, so a server
/// that accepts only the post-quantum one still gets it. The deploy's own connection, which
/// carries the generation, keeps ssh's choice.
pub const CONFIRM_KEX: &str = "^curve25519-sha256";

fn confirm_kex() -> Option<String> {
    match std::env::var("MESH_CONFIRM_KEX") {
        Ok(v) if v == "default" || v.is_empty() => None,
        Ok(v) => Some(v),
        Err(_) => Some(CONFIRM_KEX.to_owned()),
    }
}

/// Quotes `word` for the remote shell ssh hands the command to.
fn quoted(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:@,+".contains(&b))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// Runs the node's `mesh` with `args` over a new connection of its own, in one `ssh` process
/// (no master, nothing kept), with the same checks as [`Link::open`] (host key strictly,
/// batch mode, the connect timeout, the fleet's ssh config). For a confirmation: its key
/// exchange is [`CONFIRM_KEX`].
pub fn once(fleet: &Fleet, node: &Node, args: &[&str]) -> Result<Ran, SshError> {
    let mut c = std::process::Command::new("ssh");
    if let Some(config) = config_for(fleet, node) {
        c.arg("-F").arg(config);
    }
    c.args([
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-T",
    ])
    .arg("-o")
    .arg(format!("ConnectTimeout={}", timeout().as_secs().max(1)))
    .args(["-o", "ServerAliveInterval=5"]);
    if let Some(kex) = confirm_kex() {
        c.arg("-o").arg(format!("KexAlgorithms={kex}"));
    }
    if let Some(port) = node.ssh.port {
        c.arg("-p").arg(port.to_string());
    }
    if let Some(user) = &node.ssh.user {
        c.arg("-l").arg(user);
    }
    if let Some(key) = &node.ssh.identity {
        c.arg("-i").arg(key);
    }
    let command = std::iter::once(node.remote.mesh.clone())
        .chain(node.remote.args(args))
        .map(|w| quoted(&w))
        .collect::<Vec<_>>()
        .join(" ");
    c.arg("--").arg(&node.ssh.destination).arg(command);
    let out = output_of_ssh(&mut c).map_err(|e| SshError::Unreachable {
        node: node.name.to_string(),
        message: format!("cannot run ssh: {e}"),
    })?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // ssh's own failures exit 255 (the node's mesh never does).
    if out.status.code() == Some(255) {
        return Err(if out.stdout.is_empty() {
            classify_said(node, &stderr)
        } else {
            SshError::Dropped {
                node: node.name.to_string(),
                message: stderr.trim().to_owned(),
            }
        });
    }
    Ok(Ran {
        code: out.status.code(),
        stdout: out.stdout,
        stderr,
    })
}

/// How long ssh's stderr is read on after ssh has exited: what a child of its ProxyCommand
/// still holds open (a background process of the operator's) is not waited for.
const STDERR_AFTER_EXIT: Duration = Duration::from_millis(500);

/// `c`'s output, as [`std::process::Command::output`] gives it, but ended when ssh has exited
/// and its stdout is closed: ssh's stderr is read on for [`STDERR_AFTER_EXIT`] at most, since a
/// ProxyCommand (the operator's) may leave a process behind that holds it open for as long as
/// it lives.
fn output_of_ssh(c: &mut std::process::Command) -> std::io::Result<std::process::Output> {
    use std::io::Read as _;
    use std::process::Stdio;
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (done, finished) = std::sync::mpsc::channel();
    {
        let said = said.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n @ 1..) = stderr.read(&mut chunk) {
                said.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&chunk[..n]);
            }
            let _ = done.send(());
        });
    }
    let mut out = Vec::new();
    stdout.read_to_end(&mut out)?;
    let status = child.wait()?;
    let _ = finished.recv_timeout(STDERR_AFTER_EXIT);
    let stderr = std::mem::take(&mut *said.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(std::process::Output {
        status,
        stdout: out,
        stderr,
    })
}

impl Link {
    /// Opens a new connection to `node` (a new TCP connection: never one already open).
    pub fn open(fleet: &Fleet, node: &Node) -> Result<Self, SshError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SshError::Unreachable {
                node: node.name.to_string(),
                message: format!("cannot start the runtime for ssh: {e}"),
            })?;
        let mut builder = SessionBuilder::default();
        builder
            .known_hosts_check(KnownHosts::Strict)
            .connect_timeout(timeout())
            .server_alive_interval(Duration::from_secs(5))
            .control_directory(std::env::temp_dir())
            // A master whose deployer is gone (killed) ends on its own.
            .control_persist(ControlPersist::IdleFor(
                std::num::NonZeroUsize::new(30).expect("not zero"),
            ));
        if let Some(config) = config_for(fleet, node) {
            builder.config_file(config);
        }
        if let Some(port) = node.ssh.port {
            builder.port(port);
        }
        if let Some(user) = &node.ssh.user {
            builder.user(user.clone());
        }
        if let Some(key) = &node.ssh.identity {
            builder.keyfile(key);
        }
        let session = runtime
            .block_on(builder.connect_mux(&node.ssh.destination))
            .map_err(|e| classify(node, &e))?;
        Ok(Self {
            runtime,
            session: Some(session),
            node: node.clone(),
            sent: 0,
        })
    }

    /// Runs the node's `mesh` with `args` (after the node's global options), `input` on its
    /// stdin.
    pub fn mesh(&mut self, args: &[&str], input: Option<&[u8]>) -> Result<Ran, SshError> {
        let session = self.session.as_ref().expect("open until closed");
        let argv = self.node.remote.args(args);
        let node = &self.node;
        let dropped = |e: openssh::Error| SshError::Dropped {
            node: node.name.to_string(),
            message: e.to_string(),
        };
        let out = self.runtime.block_on(async {
            let mut c = session.command(&node.remote.mesh);
            c.args(&argv)
                .stdin(if input.is_some() {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = c.spawn().await.map_err(dropped)?;
            if let (Some(bytes), Some(mut stdin)) = (input, child.stdin().take()) {
                let wrote = stdin.write_all(bytes).await;
                let _closed = stdin.shutdown().await;
                drop(stdin);
                wrote.map_err(|e| dropped(openssh::Error::Remote(e)))?;
            }
            child.wait_with_output().await.map_err(dropped)
        })?;
        self.sent += input.map_or(0, |b| b.len() as u64);
        Ok(Ran {
            code: out.status.code(),
            stdout: out.stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Whether the connection still works.
    pub fn alive(&self) -> bool {
        let session = self.session.as_ref().expect("open until closed");
        self.runtime.block_on(session.check()).is_ok()
    }

    /// Closes the connection (its master ends).
    pub fn close(mut self) {
        if let Some(session) = self.session.take() {
            let _gone = self.runtime.block_on(session.close());
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let _gone = self.runtime.block_on(session.close());
        }
    }
}

/// A conversation with the node's `mesh store serve` (see it for the requests): the node's side
/// of a deploy in one remote process, over the link's connection. Every write and read is
/// bounded by the I/O timeout: a link that stalls mid-copy fails the conversation, never hangs
/// it; what was written is counted as it goes.
pub struct Serve<'a> {
    runtime: &'a tokio::runtime::Runtime,
    child: openssh::RemoteChild<'a>,
    stdin: Option<openssh::ChildStdin>,
    stdout: tokio::io::BufReader<openssh::ChildStdout>,
    node: String,
    io_timeout: Duration,
    /// Bytes written to it.
    pub sent: u64,
}

/// A request of a [`Serve`] that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ServeError {
    /// The connection.
    #[error(transparent)]
    Ssh(#[from] SshError),
    /// What the node answered instead.
    #[error("{0}")]
    Said(String),
    /// Nothing moved for the I/O timeout.
    #[error("{0}")]
    Stalled(String),
}

/// The generation in force on a node, as its `current` answers.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Current {
    /// Its id.
    pub id: mesh_lib::GenerationId,
    /// What put it in force (`build`: a switch by hand; `deploy`, `revert`, `take`, …).
    pub trigger: Option<String>,
    /// Whether a deploy recorded on the node switched to it.
    pub deployed: bool,
    /// A deploy that waits for its confirmation there.
    pub waiting: Option<String>,
}

/// How many bytes are written at a time: each write is counted, and bounded in time.
const CHUNK: usize = 64 << 10;

impl Link {
    /// Starts the node's `mesh store serve`, its requests bounded by `io_timeout`.
    pub fn serve(&self, io_timeout: Duration) -> Result<Serve<'_>, SshError> {
        let session = self.session.as_ref().expect("open until closed");
        let argv = self.node.remote.args(&["store", "serve"]);
        let node = self.node.name.to_string();
        let mut child = self
            .runtime
            .block_on(async {
                session
                    .command(&self.node.remote.mesh)
                    .args(&argv)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .await
            })
            .map_err(|e| SshError::Dropped {
                node: node.clone(),
                message: e.to_string(),
            })?;
        let stdin = child.stdin().take();
        let stdout = child.stdout().take().expect("piped");
        Ok(Serve {
            runtime: &self.runtime,
            child,
            stdin,
            stdout: tokio::io::BufReader::new(stdout),
            node,
            io_timeout,
            sent: 0,
        })
    }
}

impl Serve<'_> {
    fn dropped(&self, e: impl std::fmt::Display) -> ServeError {
        ServeError::Ssh(SshError::Dropped {
            node: self.node.clone(),
            message: e.to_string(),
        })
    }

    fn stalled(&self, doing: &str, bound: Duration) -> ServeError {
        ServeError::Stalled(format!(
            "{doing} {} stalled: nothing moved for {} s",
            self.node,
            bound.as_secs()
        ))
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), ServeError> {
        let bound = self.io_timeout;
        for chunk in bytes.chunks(CHUNK) {
            let Some(stdin) = self.stdin.as_mut() else {
                return Err(self.dropped("its input is closed"));
            };
            let wrote = self.runtime.block_on(async {
                tokio::time::timeout(bound, async {
                    stdin.write_all(chunk).await?;
                    stdin.flush().await
                })
                .await
            });
            match wrote {
                Ok(Ok(())) => self.sent += chunk.len() as u64,
                Ok(Err(e)) => return Err(self.dropped(e)),
                Err(_) => return Err(self.stalled("sending to", bound)),
            }
        }
        Ok(())
    }

    fn line_within(&mut self, bound: Duration) -> Result<String, ServeError> {
        use tokio::io::AsyncBufReadExt;
        let mut line = String::new();
        let stdout = &mut self.stdout;
        let read = self
            .runtime
            .block_on(async { tokio::time::timeout(bound, stdout.read_line(&mut line)).await });
        match read {
            Err(_) => Err(self.stalled("waiting for an answer from", bound)),
            Ok(Ok(0)) => Err(self.dropped("it ended")),
            Ok(Ok(_)) => match line.strip_prefix("error ") {
                Some(e) => Err(ServeError::Said(
                    mesh_lib::text::escape(e.trim_end()).into_owned(),
                )),
                None => Ok(line.trim_end_matches('\n').to_owned()),
            },
            Ok(Err(e)) => Err(self.dropped(e)),
        }
    }

    fn line(&mut self) -> Result<String, ServeError> {
        self.line_within(self.io_timeout)
    }

    /// Which version of the conversation the node speaks (`None`: the first, which knows no
    /// `hello`); from 2 on, its reads are bounded by this side's I/O timeout too.
    pub fn hello(&mut self) -> Result<Option<u32>, ServeError> {
        self.send(b"hello\n")?;
        let version = match self.line() {
            Ok(l) => l.strip_prefix("mesh serve ").and_then(|v| v.parse().ok()),
            Err(ServeError::Said(_)) => None,
            Err(e) => return Err(e),
        };
        if version.is_some() {
            self.send(format!("io-timeout {}\n", self.io_timeout.as_secs().max(1)).as_bytes())?;
            self.line()?;
        }
        Ok(version)
    }

    /// The node record's bytes (`None`: never adopted).
    pub fn record(&mut self) -> Result<Option<Vec<u8>>, ServeError> {
        use tokio::io::AsyncReadExt;
        self.send(b"record\n")?;
        let line = self.line()?;
        match line.strip_prefix("record ") {
            Some("none") => Ok(None),
            Some(len) => {
                let len: usize = len.parse().map_err(|_| self.dropped("a bad answer"))?;
                let mut bytes = vec![0; len];
                let bound = self.io_timeout;
                let stdout = &mut self.stdout;
                let read = self.runtime.block_on(async {
                    tokio::time::timeout(bound, stdout.read_exact(&mut bytes)).await
                });
                match read {
                    Ok(Ok(_)) => Ok(Some(bytes)),
                    Ok(Err(e)) => Err(self.dropped(e)),
                    Err(_) => Err(self.stalled("reading the record of", bound)),
                }
            }
            None => Err(self.dropped(format!("an answer that is not a record: {line}"))),
        }
    }

    /// The generation in force on the node (version 2).
    pub fn current(&mut self) -> Result<Option<Current>, ServeError> {
        self.send(b"current\n")?;
        let line = self.line()?;
        match line.strip_prefix("current ") {
            Some("none") => Ok(None),
            Some(json) => serde_json::from_str(json)
                .map(Some)
                .map_err(|e| self.dropped(format!("its answer to current: {e}"))),
            None => Err(self.dropped(format!("an answer that is not current: {line}"))),
        }
    }

    /// What of generation `id` the node lacks (version 2): the generation itself, or the blobs
    /// it declares that the node does not have.
    pub fn lacks(&mut self, id: &str) -> Result<Vec<mesh_lib::transfer::Object>, ServeError> {
        self.send(format!("lacks {id}\n").as_bytes())?;
        let list = self.list()?;
        mesh_lib::transfer::read_list(list.as_slice())
            .map_err(|e| ServeError::Said(format!("its answer to lacks: {e}")))
    }

    fn list(&mut self) -> Result<Vec<u8>, ServeError> {
        let mut out = Vec::new();
        loop {
            let line = self.line()?;
            if line == "end" {
                return Ok(out);
            }
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
    }

    /// The names of the signatures of generation `id` the node has (version 2).
    pub fn signatures(&mut self, id: &str) -> Result<Vec<String>, ServeError> {
        self.send(format!("signatures {id}\n").as_bytes())?;
        let list = self.list()?;
        Ok(String::from_utf8_lossy(&list)
            .lines()
            .map(str::to_owned)
            .collect())
    }

    /// Sends a signature of generation `id` (armored): the node keeps it when it is valid.
    pub fn signature(&mut self, id: &str, armored: &str) -> Result<(), ServeError> {
        let mut request = format!("signature {id} {}\n", armored.len()).into_bytes();
        request.extend_from_slice(armored.as_bytes());
        self.send(&request)?;
        self.line().map(drop)
    }

    /// The sequence of the newest statement the node accepted (version 3).
    pub fn sequence(&mut self) -> Result<Option<u64>, ServeError> {
        self.send(b"sequence\n")?;
        let line = self.line()?;
        match line.strip_prefix("sequence ") {
            Some("none") => Ok(None),
            Some(n) => n
                .parse()
                .map(Some)
                .map_err(|_| self.dropped(format!("an answer that is not a sequence: {line}"))),
            None => Err(self.dropped(format!("an answer that is not a sequence: {line}"))),
        }
    }

    /// Offers a generation, its signatures and its statement (version 3): judged by the node
    /// whole, kept only when they pass; a refusal is `Said("refused: …")`.
    pub fn offer(&mut self, offer: &mesh_lib::statement::Offer) -> Result<(), ServeError> {
        let body = serde_json::to_vec(offer).expect("an offer encodes");
        let mut request = format!("offer {}\n", body.len()).into_bytes();
        request.extend_from_slice(&body);
        self.send(&request)?;
        self.line().map(drop)
    }

    /// Offers a generation to stage (version 4): judged by the node as [`Serve::offer`] is,
    /// its signatures kept, its statement not (a stage puts nothing in force); a refusal is
    /// `Said("refused: …")`.
    pub fn offer_stage(&mut self, offer: &mesh_lib::statement::Offer) -> Result<(), ServeError> {
        let body = serde_json::to_vec(offer).expect("an offer encodes");
        let mut request = format!("offer-stage {}\n", body.len()).into_bytes();
        request.extend_from_slice(&body);
        self.send(&request)?;
        self.line().map(drop)
    }

    /// Stages `id` (version 4: the generation offered to stage in this session, its objects
    /// sent) and waits for the stage — its images fetched on the node — no longer than
    /// `within`: what the node put there.
    pub fn stage(&mut self, id: &str, within: Duration) -> Result<serde_json::Value, ServeError> {
        self.send(format!("stage {id}\n").as_bytes())?;
        let line = self.line_within(within)?;
        serde_json::from_str(&line).map_err(|e| self.dropped(format!("its answer: {e}")))
    }

    /// The objects of `list` (a want list) the node lacks, as a want list.
    pub fn missing(&mut self, list: &[u8]) -> Result<Vec<u8>, ServeError> {
        let mut request = b"missing\n".to_vec();
        request.extend_from_slice(list);
        request.extend_from_slice(b"end\n");
        self.send(&request)?;
        self.list()
    }

    /// Sends an object stream; what the node stored: (objects, bytes).
    pub fn receive(&mut self, stream: &[u8]) -> Result<(usize, u64), ServeError> {
        self.send(b"receive\n")?;
        self.send(stream)?;
        let line = self.line()?;
        let mut words = line.strip_prefix("received ").unwrap_or("").split(' ');
        match (words.next().map(str::parse), words.next().map(str::parse)) {
            (Some(Ok(objects)), Some(Ok(bytes))) => Ok((objects, bytes)),
            _ => Err(self.dropped(format!("an answer that is not a receipt: {line}"))),
        }
    }

    /// Arms a deploy of `id` (its deadline `seconds` away) and waits for its switch — no longer
    /// than `within`: the deploy's record as the node keeps it.
    pub fn switch(
        &mut self,
        id: &str,
        seconds: u64,
        within: Duration,
    ) -> Result<serde_json::Value, ServeError> {
        self.send(format!("switch {id} {seconds}\n").as_bytes())?;
        let line = self.line_within(within)?;
        serde_json::from_str(&line).map_err(|e| self.dropped(format!("its answer: {e}")))
    }

    /// Ends the conversation; the bytes sent.
    pub fn finish(mut self) -> u64 {
        drop(self.stdin.take());
        let child = self.child;
        let bound = self.io_timeout;
        let _ended = self
            .runtime
            .block_on(async { tokio::time::timeout(bound, child.wait()).await });
        self.sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_mesh_s_own_proxy_counts_as_its_route() {
        let own =
            format!("user root\nproxycommand '/x/mesh' {PROXY_ARG} %h %p\nproxyusefdpass yes\n");
        assert!(routed_by_mesh(&own));
        assert!(!routed_by_mesh(
            "proxycommand nc %h %p\nproxyusefdpass yes\n"
        ));
        assert!(!routed_by_mesh(&format!("proxyjump bastion\n{own}")));
        assert!(routed_by_mesh(&format!("proxyjump none\n{own}")));
        assert!(!routed_by_mesh("user root\n"), "no proxy at all: ssh's own");
    }
}
