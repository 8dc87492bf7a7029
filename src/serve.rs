//! `mesh serve`: the one command a deploy key may run on a node. Put in `authorized_keys` as
//! `command="mesh serve",restrict` (or `ForceCommand mesh serve` in an sshd `Match` block),
//! it reads what the deployer asked for (`SSH_ORIGINAL_COMMAND`, which sshd sets) and runs it
//! only when it is one of the requests a deploy makes — the record exported, the objects asked
//! for and received, a switch armed, confirmed, the deploys and the status read — with this
//! node's own state directory, root and namespace: nothing else, no shell, no other command.
//! (`restrict` leaves sshd to refuse the rest: port forwarding, agent forwarding, a terminal.)
//!
//! Its place comes from its own command line only (`command="mesh --root /srv/node serve"`):
//! no `MESH_*` variable — nor `XDG_STATE_HOME`, `DOCKER_HOST` — that a client sends with
//! `SetEnv` (where sshd's `AcceptEnv` lets it through) is read; they are removed before the
//! arguments are parsed. And what it runs is asked for from elsewhere: a switch needs a signer
//! the node trusts now and a statement naming the generation, never "it was in force before".

use std::sync::atomic::{AtomicBool, Ordering};

use crate::failure::Failure;

/// Whether this process serves a deploy key's request (set by [`serve`] before it runs one).
static SERVED: AtomicBool = AtomicBool::new(false);

/// Whether this process runs a request a deploy key made: its switches are asked for from
/// elsewhere (a signer trusted now, a statement naming the generation).
pub fn served() -> bool {
    SERVED.load(Ordering::Relaxed)
}

/// The environment variables that would change where or how the mesh acts: every `MESH_*`
/// (the state directory, root, namespace, host key, settle window…), and the ones it reads for
/// its defaults and its engine.
fn steers(name: &str) -> bool {
    name.starts_with("MESH_")
        || matches!(
            name,
            "XDG_STATE_HOME"
                | "DOCKER_HOST"
                | "DOCKER_CONFIG"
                | "DOCKER_CERT_PATH"
                | "DOCKER_TLS_VERIFY"
                | "NICKEL_IMPORT_PATH"
        )
}

/// Removes from this process's environment every variable that steers the mesh ([`steers`]):
/// `mesh serve` acts on what its own command line says, never on what a client sent.
pub fn scrub_environment() {
    let names: Vec<std::ffi::OsString> = std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| name.to_str().is_none_or(steers))
        .collect();
    for name in names {
        std::env::remove_var(name);
    }
}

/// The requests a deploy makes, as `mesh` subcommands and the options each may have (a `=`
/// after an option: it takes a value; `*`: any one word, e.g. a token).
const ALLOWED: &[(&[&str], &[&str])] = &[
    (&["store", "serve"], &["--io-timeout="]),
    (&["store", "missing"], &[]),
    (&["store", "receive"], &[]),
    (&["record", "export"], &[]),
    (
        &["switch"],
        &["--generation=", "--confirm-within=", "--dry-run", "--json"],
    ),
    (&["generations"], &["--json"]),
    (&["confirm", "*"], &["--json"]),
    (&["deploys"], &["--json"]),
    (&["deploys", "*"], &["--wait", "--json"]),
    (&["status"], &["--json"]),
];

/// The global options a deployer may give, when they are this node's own.
const PLACE: &[&str] = &["--state-dir", "--root", "--netns"];

/// Whether `asked` (a request's words, after `mesh`) is one a deploy makes, given this node's
/// own global options `own` (`--state-dir`, `--root`, `--netns` and their values): the
/// subcommand's words, then why not.
pub fn allowed(asked: &[String], own: &[(String, String)]) -> Result<Vec<String>, String> {
    let mut words = asked.iter().peekable();
    // Global options first: only the place, and only this node's own.
    while let Some(w) = words.peek() {
        if !w.starts_with("--") {
            break;
        }
        let (name, value) = match w.split_once('=') {
            Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
            None => (w.to_string(), None),
        };
        words.next();
        if !PLACE.contains(&name.as_str()) {
            return Err(format!("the option {name} is not one a deploy gives"));
        }
        let value = match value {
            Some(v) => v,
            None => words
                .next()
                .cloned()
                .ok_or_else(|| format!("{name} without its value"))?,
        };
        let mine = own
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str());
        if mine != Some(value.as_str()) {
            return Err(format!(
                "{name} {value}: this key serves {}",
                mine.map_or_else(
                    || format!("no {name} but the default"),
                    |m| format!("{name} {m}")
                )
            ));
        }
    }
    let rest: Vec<String> = words.cloned().collect();
    'shapes: for (command, options) in ALLOWED {
        if rest.len() < command.len() {
            continue;
        }
        for (want, got) in command.iter().zip(&rest) {
            if *want != "*" && want != got {
                continue 'shapes;
            }
            if *want == "*" && got.starts_with('-') {
                continue 'shapes;
            }
        }
        let mut tail = rest[command.len()..].iter();
        while let Some(w) = tail.next() {
            let (name, inline) = match w.split_once('=') {
                Some((n, _)) => (n, true),
                None => (w.as_str(), false),
            };
            if options.contains(&name) {
                continue;
            }
            if options.contains(&format!("{name}=").as_str()) {
                if !inline && tail.next().is_none() {
                    return Err(format!("{name} without its value"));
                }
                continue;
            }
            continue 'shapes;
        }
        // A switch only as a deploy arms it (with its deadline), or a dry run of one.
        let guarded = rest
            .iter()
            .any(|w| w.starts_with("--confirm-within") || w == "--dry-run");
        if rest[0] == "switch" && !guarded {
            return Err("a switch without --confirm-within is not a deploy's".into());
        }
        return Ok(rest);
    }
    Err(format!(
        "`{}` is not a request a deploy makes",
        mesh_lib::text::escape(&rest.join(" "))
    ))
}

/// `mesh serve`: the request in `SSH_ORIGINAL_COMMAND`, to run when [`allowed`] (with the
/// node's own options, `own`); anything else refused (exit 1, saying so).
pub fn request(own: &[(String, String)]) -> Result<crate::cli::Cli, Failure> {
    let Some(original) = std::env::var_os("SSH_ORIGINAL_COMMAND") else {
        return Err(Failure::user(
            "this key deploys only: it opens no shell (mesh serve runs a deploy's requests, which sshd passes in SSH_ORIGINAL_COMMAND)",
        ));
    };
    let original = original.to_string_lossy().into_owned();
    let words = shlex::split(&original).ok_or_else(|| {
        Failure::user(format!(
            "`{}` is not a command line",
            mesh_lib::text::escape(&original)
        ))
    })?;
    // Its first word is the deployer's idea of where mesh is: this one serves, whatever it said.
    let Some((program, asked)) = words.split_first() else {
        return Err(Failure::user("this key deploys only: an empty request"));
    };
    if !program.ends_with("mesh") {
        return Err(Failure::user(format!(
            "this key deploys only: `{}` is not mesh",
            mesh_lib::text::escape(program)
        )));
    }
    let rest = allowed(asked, own)
        .map_err(|why| Failure::user(format!("this key deploys only: {why}")))?;
    let mut argv = vec!["mesh".to_owned()];
    for (name, value) in own {
        argv.push(name.clone());
        argv.push(value.clone());
    }
    argv.extend(rest);
    let cli = crate::cli::Cli::parse_from_args(&argv).map_err(|e| Failure::user(e.to_string()))?;
    SERVED.store(true, Ordering::Relaxed);
    Ok(cli)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    /// A deploy's requests pass with this node's own place; a shell command, another command,
    /// another state directory, an option a deploy never gives, do not.
    #[test]
    fn only_a_deploys_requests() {
        let own = vec![("--state-dir".to_owned(), "/var/lib/mesh".to_owned())];
        for ok in [
            "--state-dir /var/lib/mesh store serve",
            "store serve --io-timeout 30",
            "switch --generation b3:00 --confirm-within 60 --json",
            "confirm 0123456789abcdef0123456789abcdef --json",
            "deploys 0123456789abcdef0123456789abcdef --wait --json",
            "record export",
            "status --json",
        ] {
            assert!(allowed(&words(ok), &own).is_ok(), "{ok}");
        }
        for no in [
            "cat /etc/shadow",
            "--state-dir /tmp/x store serve",
            "--root /tmp store serve",
            "switch /etc/passwd",
            "gc --keep 0",
            "switch --generation b3:00",
            "rollback",
            "store serve --io-timeout",
            "confirm --json",
            "flip --force",
            "",
        ] {
            assert!(allowed(&words(no), &own).is_err(), "{no}");
        }
    }
}
