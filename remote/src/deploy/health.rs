//! The health checks a switch must pass before it is kept, on the node: a command (its exit
//! status), a TCP port that accepts a connection, an HTTP URL that answers 2xx or 3xx. Each is
//! retried until it passes or its window closes; one that never passes is the reason the switch
//! goes back, in its words.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// A command run by `sh -c`: healthy when it exits 0.
    Command(String),
    /// `tcp:HOST:PORT`: healthy when it accepts a connection.
    Tcp(String),
    /// `http://HOST[:PORT]/PATH`: healthy when it answers a GET with 2xx or 3xx.
    Http(String),
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Check::Command(c) => write!(f, "the check `{}`", mesh_lib::text::escape(c)),
            Check::Tcp(a) => write!(f, "the probe tcp:{a}"),
            Check::Http(u) => write!(f, "the probe {u}"),
        }
    }
}

impl Check {
    /// A probe as written: `tcp:HOST:PORT` or `http://HOST[:PORT]/PATH`.
    pub fn probe(text: &str) -> Result<Self, String> {
        if let Some(addr) = text.strip_prefix("tcp:") {
            if addr
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            {
                return Ok(Check::Tcp(addr.to_owned()));
            }
        } else if text.starts_with("http://") {
            return Ok(Check::Http(text.to_owned()));
        }
        Err(format!(
            "`{}` is not a probe (write tcp:HOST:PORT or http://HOST[:PORT]/PATH)",
            mesh_lib::text::escape(text)
        ))
    }

    /// Runs it once, bounded by `timeout`: why it failed, if it did.
    pub fn once(&self, timeout: Duration) -> Result<(), String> {
        match self {
            Check::Command(c) => command(c, timeout),
            Check::Tcp(a) => connect(a, timeout).map(drop),
            Check::Http(u) => http(u, timeout),
        }
    }
}

fn connect(addr: &str, timeout: Duration) -> Result<TcpStream, String> {
    let mut last = format!("{addr} resolves to no address");
    for a in addr.to_socket_addrs().map_err(|e| format!("{addr}: {e}"))? {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(last)
}

fn http(url: &str, timeout: Duration) -> Result<(), String> {
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_owned()), |(h, p)| (h, format!("/{p}")));
    let addr = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:80")
    };
    let mut s = connect(&addr, timeout)?;
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: mesh-health\r\n\r\n"
    )
    .map_err(|e| format!("{url}: {e}"))?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head).map_err(|e| format!("{url}: {e}"))?;
    let line = String::from_utf8_lossy(&head[..n]);
    let code = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok());
    match code {
        Some(c) if (200..400).contains(&c) => Ok(()),
        Some(c) => Err(format!("{url} answered {c}")),
        None => Err(format!("{url} did not answer HTTP")),
    }
}

fn command(text: &str, timeout: Duration) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new("sh")
        .args(["-c", text])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("sh: {e}"))?;
    let until = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                let err = err.trim();
                return Err(format!(
                    "it ended with {status}{}",
                    if err.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", mesh_lib::text::escape(err))
                    }
                ));
            }
            Ok(None) if Instant::now() >= until => {
                if let Some(pgid) = rustix::process::Pid::from_raw(child.id() as i32) {
                    let _ =
                        rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
                }
                let _ = child.wait();
                return Err(format!("it did not end within {} s", timeout.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Runs every check, each retried every second until it passes or `within` has passed since
/// the first began: `Err` names the first that never passed and why.
pub fn all_pass(checks: &[Check], within: Duration) -> Result<(), String> {
    let until = Instant::now() + within;
    for check in checks {
        loop {
            let left = until
                .saturating_duration_since(Instant::now())
                .max(Duration::from_secs(1));
            match check.once(left.min(Duration::from_secs(10))) {
                Ok(()) => break,
                Err(why) if Instant::now() >= until => {
                    return Err(format!("{check} failed for {} s: {why}", within.as_secs()))
                }
                Err(_) => std::thread::sleep(Duration::from_secs(1).min(left)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command that passes, one that fails (named, with its words), a port that accepts,
    /// one that does not; a probe that is not one is refused as written.
    #[test]
    fn checks_pass_and_fail_with_their_reasons() {
        assert_eq!(
            all_pass(&[Check::Command("true".into())], Duration::from_secs(1)),
            Ok(())
        );
        let e = all_pass(
            &[Check::Command("echo broken >&2; false".into())],
            Duration::from_millis(10),
        )
        .unwrap_err();
        assert!(e.contains("`echo broken") && e.contains("broken"), "{e}");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Check::probe(&format!("tcp:127.0.0.1:{port}")).unwrap();
        assert_eq!(open.once(Duration::from_secs(1)), Ok(()));
        drop(listener);
        assert!(open.once(Duration::from_secs(1)).is_err());
        assert!(Check::probe("udp:1.2.3.4:5").is_err());
        assert!(Check::probe("http://127.0.0.1:1/health").is_ok());
    }
}
