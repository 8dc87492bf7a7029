//! Speaking to the kernel's nftables in a network namespace: through libnftables in process
//! when it can be opened ([`libnft`](super::libnft)), through the `nft` command otherwise — the
//! same text in, the same listing and error messages out. Also runs the iptables-nft tools,
//! which have no library, in the same namespace.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::FirewallError;

/// nftables, in a network namespace or not.
#[derive(Debug, Clone)]
pub struct Nft {
    netns: Option<String>,
    command_only: bool,
}

impl Nft {
    /// `nft` in `netns`, or in the machine's own namespace when `None`. Nothing is opened
    /// until the first call: a command that never touches the firewall pays nothing.
    pub fn new(netns: Option<String>) -> Self {
        Self {
            netns,
            command_only: false,
        }
    }

    /// The same driver, always through the `nft` command (what it falls back to when
    /// libnftables cannot be opened).
    pub fn with_command(netns: Option<String>) -> Self {
        Self {
            netns,
            command_only: true,
        }
    }

    /// Whether it calls libnftables in process (opening it, the first time, to know).
    pub fn in_process(&self) -> bool {
        !self.command_only && super::libnft::available()
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
    pub fn list(&self, what: &str, json: bool) -> Result<String, FirewallError> {
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
    pub fn apply(&self, commands: &str, what: &str) -> Result<(), FirewallError> {
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
        if !self.in_process() {
            return None;
        }
        let outcome = crate::netns::within(self.netns.as_deref(), || {
            Ok(super::libnft::run(commands, json))
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
    pub fn run_tool(
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

    /// What `TOOL` prints when it runs and succeeds; `None` when it is missing or fails (a
    /// probe, such as a legacy iptables tool that may not be installed).
    pub fn probe(&self, tool: &str) -> Option<String> {
        let out = self
            .command(tool)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
