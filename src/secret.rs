//! `mesh secret`: edit, rekey and list the recipients of the fleet's secrets (age files
//! encrypted to the SSH keys the tree's `secrets.ncl` declares). The plaintext is only ever in
//! memory (zeroed after use) and, while `mesh secret edit` runs the editor, in a file only the
//! operator may read, in a folder only the operator may enter — in memory when the machine has
//! such a folder (`$XDG_RUNTIME_DIR`, `/dev/shm`) — overwritten and removed after: also when
//! the editor is killed, and when mesh gets SIGINT, SIGTERM or SIGHUP while it runs (mesh then
//! stops the editor, removes the plaintext, and exits with 128 + the signal's number).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use mesh_compiler::imports::Tree;
use mesh_lib::secret::{encrypt, Identity, Rules, Zeroizing, RULES_FILE};

use crate::cli::{SecretCommand, SecretEditArgs, SecretIdentity};
use crate::failure::Failure;

pub fn run(state: &Path, command: SecretCommand) -> Result<(), Failure> {
    match command {
        SecretCommand::Edit(args) => edit(state, args),
        SecretCommand::Rekey(args) => rekey(state, &args),
        SecretCommand::Recipients { file } => recipients(state, &file),
    }
}

/// The fleet's tree holding `file` (made absolute; it need not exist), and `file` relative to
/// the tree, as `secrets.ncl` names it.
fn locate(state: &Path, file: &Path) -> Result<(Tree, String), Failure> {
    let absolute =
        std::path::absolute(file).map_err(|e| Failure::user(format!("{}: {e}", file.display())))?;
    // Its folders resolved as far as they exist (a first secret's folder may not yet).
    let existing = absolute
        .ancestors()
        .skip(1)
        .find(|a| a.is_dir())
        .unwrap_or(Path::new("/"));
    let rest = absolute.strip_prefix(existing).unwrap_or(&absolute);
    let real = std::fs::canonicalize(existing)
        .map_err(|e| Failure::user(format!("{}: {e}", existing.display())))?
        .join(rest);
    let tree = tree_at(state, &real)?;
    let relative = real
        .strip_prefix(&tree.root)
        .map_err(|_| {
            Failure::user(format!(
                "{} is outside the fleet's tree {}",
                real.display(),
                tree.root.display()
            ))
        })?
        .display()
        .to_string();
    Ok((tree, relative))
}

/// The tree of a file there (or of `secrets.ncl` in the current folder): `--tree`, `--fleet`'s
/// folder, else the tree of the nearest `secrets.ncl` above it, else the nearest fleet file or
/// checkout above.
pub(crate) fn tree_at(state: &Path, at: &Path) -> Result<Tree, Failure> {
    let library = mesh_compiler::library::install(state)
        .map_err(|e| Failure::system(format!("installing the mesh library: {e}")))?;
    let rule = crate::context::tree_rule();
    // The tree of the nearest secrets.ncl above (the one that declares this secret's readers).
    let rules_file = at
        .ancestors()
        .skip(1)
        .map(|d| d.join(RULES_FILE))
        .find(|f| f.is_file());
    let at = rules_file.as_deref().unwrap_or(at);
    Tree::find(at, &library, rule).map_err(|e| mesh_compiler::BuildError::from(e).into())
}

pub(crate) fn rules(state: &Path, tree: &Tree) -> Result<Rules, Failure> {
    let library = mesh_compiler::library::install(state)
        .map_err(|e| Failure::system(format!("installing the mesh library: {e}")))?;
    mesh_compiler::secrets::rules(tree, &library)
        .map(|(rules, _)| rules)
        .map_err(|e| mesh_compiler::BuildError::from(e).into())
}

fn identity(args: &SecretIdentity) -> Result<Identity, Failure> {
    let path = match &args.identity {
        Some(p) => p.clone(),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".ssh/id_ed25519"),
    };
    Identity::read(&path).map_err(|e| Failure::user(format!("the operator's key: {e}")))
}

/// Decrypts `file` with the operator's key into an editor, then encrypts what was saved to the
/// recipients `secrets.ncl` declares; a file not there yet is created.
fn edit(state: &Path, args: SecretEditArgs) -> Result<(), Failure> {
    let (tree, name) = locate(state, &args.file)?;
    let rules = rules(state, &tree)?;
    let recipients = rules
        .recipients(&name)
        .map_err(|e| Failure::user(e.to_string()))?;
    let path = tree.root.join(&name);
    let before: Zeroizing<Vec<u8>> = if path.exists() {
        let id = identity(&args.key)?;
        let ciphertext = std::fs::read(&path)
            .map_err(|e| Failure::system(format!("reading {}: {e}", path.display())))?;
        let names: Vec<String> = recipients.iter().map(|r| r.name.clone()).collect();
        id.decrypt(&name, &ciphertext, &names)
            .map_err(|e| Failure::user(e.to_string()))?
    } else {
        Zeroizing::new(Vec::new())
    };
    // The signals that end mesh are caught from before the plaintext is written to after it
    // is removed: the editor is stopped, the plaintext wiped, then mesh exits as killed.
    let signals = Signals::catch()?;
    // A folder only the operator may enter, in memory when there is one; a file only the
    // operator may read.
    let dir = private_folder()?;
    let plain = dir.path().join(
        Path::new(&name)
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string(),
    );
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&plain)
            .map_err(|e| Failure::system(format!("{}: {e}", plain.display())))?;
        f.write_all(&before)
            .map_err(|e| Failure::system(format!("{}: {e}", plain.display())))?;
        drop(f);
        let editor = std::env::var("VISUAL")
            .or_else(|_| std::env::var("EDITOR"))
            .unwrap_or_else(|_| "vi".into());
        let words = shlex::split(&editor)
            .filter(|w| !w.is_empty())
            .ok_or_else(|| Failure::user(format!("the editor `{editor}` cannot be run")))?;
        let child = std::process::Command::new(&words[0])
            .args(&words[1..])
            .arg(&plain)
            .spawn()
            .map_err(|e| Failure::user(format!("running the editor `{editor}`: {e}")))?;
        let status = match signals.wait(child) {
            Ok(status) => status
                .map_err(|e| Failure::system(format!("waiting for the editor `{editor}`: {e}")))?,
            Err(signal) => {
                // The editor is stopped; what it may have left beside the file (a swap
                // file, a backup) goes with the folder.
                wipe_folder(dir.path());
                eprintln!(
                    "{} received: the plaintext was removed; {name} is unchanged",
                    signal.name
                );
                std::process::exit(128 + signal.number);
            }
        };
        if !status.success() {
            return Err(Failure::user(format!(
                "the editor `{editor}` failed ({status}): {name} is unchanged"
            )));
        }
        let after = Zeroizing::new(
            std::fs::read(&plain)
                .map_err(|e| Failure::system(format!("{}: {e}", plain.display())))?,
        );
        Ok(after)
    })();
    wipe_folder(dir.path());
    let after = result?;
    if path.exists() && after[..] == before[..] {
        say!("{name}: unchanged");
        return Ok(());
    }
    write_secret(&path, &name, &after, &recipients)?;
    say!(
        "{name}: encrypted to {}",
        recipients
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// A new folder only the operator may enter, for a plaintext: in `$XDG_RUNTIME_DIR` when it is
/// set and usable (a folder of the operator's, that no one else may write to), else in
/// `/dev/shm` (both in memory: the plaintext never reaches a disk), else in the temp folder.
fn private_folder() -> Result<tempfile::TempDir, Failure> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .filter(|d| {
            std::fs::metadata(d).is_ok_and(|m| m.is_dir() && m.uid() == me && m.mode() & 0o022 == 0)
        });
    let shm = Some(PathBuf::from("/dev/shm")).filter(|d| d.is_dir());
    let mut last = None;
    for base in [runtime, shm, Some(std::env::temp_dir())]
        .into_iter()
        .flatten()
    {
        match tempfile::Builder::new()
            .prefix("mesh-secret-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&base)
        {
            Ok(dir) => {
                std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| Failure::system(format!("{}: {e}", dir.path().display())))?;
                return Ok(dir);
            }
            Err(e) => last = Some(format!("{}: {e}", base.display())),
        }
    }
    Err(Failure::system(format!(
        "making a private folder: {}",
        last.unwrap_or_default()
    )))
}

/// Overwrites every file in `dir` (the plaintext, and whatever an editor left beside it) and
/// removes the folder: the plaintext does not outlive the edit.
fn wipe_folder(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(entry.path()) {
                let len = entry.metadata().map_or(0, |m| m.len());
                let _best_effort = f.write_all(&vec![0u8; len as usize]);
                let _best_effort = f.sync_data();
            }
        }
    }
    let _best_effort = std::fs::remove_dir_all(dir);
}

/// A signal that ends mesh.
struct Caught {
    name: &'static str,
    number: i32,
}

/// SIGINT, SIGTERM and SIGHUP, caught while a plaintext is out (tokio's handlers, on a runtime
/// of their own; they stay installed after, harmlessly: mesh exits soon).
struct Signals {
    runtime: tokio::runtime::Runtime,
    streams: Vec<(tokio::signal::unix::Signal, Caught)>,
}

impl Signals {
    fn catch() -> Result<Self, Failure> {
        use tokio::signal::unix::{signal, SignalKind};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::system(format!("catching signals: {e}")))?;
        let streams = runtime.block_on(async {
            [
                (SignalKind::interrupt(), "SIGINT", 2),
                (SignalKind::terminate(), "SIGTERM", 15),
                (SignalKind::hangup(), "SIGHUP", 1),
            ]
            .into_iter()
            .map(|(kind, name, number)| signal(kind).map(|s| (s, Caught { name, number })))
            .collect::<std::io::Result<Vec<_>>>()
        });
        let streams = streams.map_err(|e| Failure::system(format!("catching signals: {e}")))?;
        Ok(Self { runtime, streams })
    }

    /// Waits for `child` to end; or, when a signal comes first, stops it (SIGTERM, then
    /// SIGKILL after a grace) and says which signal came.
    fn wait(
        mut self,
        mut child: std::process::Child,
    ) -> Result<std::io::Result<std::process::ExitStatus>, Caught> {
        let pid = rustix::process::Pid::from_raw(child.id() as i32);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let waiter = std::thread::spawn(move || {
            let status = child.wait();
            let _receiver_may_be_gone = done_tx.send(());
            status
        });
        let caught = self.runtime.block_on(async {
            let signals = first_signal(&mut self.streams);
            tokio::select! {
                _ = done_rx => None,
                i = signals => Some(i),
            }
        });
        let Some(i) = caught else {
            return Ok(waiter.join().expect("the waiting thread does not panic"));
        };
        if let Some(pid) = pid {
            let _already_gone = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
            while !waiter.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if !waiter.is_finished() {
                let _already_gone =
                    rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        let _status = waiter.join();
        let (_, caught) = self.streams.swap_remove(i);
        Err(caught)
    }
}

/// Resolves with the index of the first stream that receives a signal.
async fn first_signal(streams: &mut [(tokio::signal::unix::Signal, Caught)]) -> usize {
    std::future::poll_fn(|cx| {
        for (i, (s, _)) in streams.iter_mut().enumerate() {
            if s.poll_recv(cx).is_ready() {
                return std::task::Poll::Ready(i);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

fn write_secret(
    path: &Path,
    name: &str,
    plaintext: &[u8],
    recipients: &[mesh_lib::secret::Recipient],
) -> Result<(), Failure> {
    let ciphertext =
        encrypt(name, plaintext, recipients).map_err(|e| Failure::user(e.to_string()))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::system(format!("{}: {e}", dir.display())))?;
    }
    mesh_lib::atomic::write_file(path, &ciphertext, 0o644)
        .map_err(|e| Failure::system(format!("writing {}: {e}", path.display())))
}

/// Re-encrypts every secret `secrets.ncl` declares whose ciphertext is not encrypted to
/// exactly the recipients declared now; says which changed.
fn rekey(state: &Path, args: &SecretIdentity) -> Result<(), Failure> {
    let cwd =
        std::env::current_dir().map_err(|e| Failure::system(format!("the current folder: {e}")))?;
    let tree = tree_at(state, &cwd.join(RULES_FILE))?;
    let rules = rules(state, &tree)?;
    let mut id = None;
    let mut changed = 0;
    for name in declared(&rules, &tree.root) {
        let name = &name;
        let recipients = rules
            .recipients(name)
            .map_err(|e| Failure::user(e.to_string()))?;
        let path = tree.root.join(name);
        let Ok(ciphertext) = std::fs::read(&path) else {
            say!("{name}: missing (create it with `mesh secret edit {name}`)");
            continue;
        };
        let want: std::collections::BTreeSet<String> = recipients
            .iter()
            .map(|r| mesh_lib::secret::key_tag(&r.key))
            .collect();
        let have = mesh_lib::secret::stanza_tags(name, &ciphertext)
            .map_err(|e| Failure::user(e.to_string()))?;
        if want == have {
            say!("{name}: unchanged");
            continue;
        }
        if id.is_none() {
            id = Some(identity(args)?);
        }
        let names: Vec<String> = recipients.iter().map(|r| r.name.clone()).collect();
        let plaintext = id
            .as_ref()
            .expect("read above")
            .decrypt(name, &ciphertext, &names)
            .map_err(|e| Failure::user(e.to_string()))?;
        write_secret(&path, name, &plaintext, &recipients)?;
        changed += 1;
        say!("{name}: re-encrypted to {}", names.join(", "));
    }
    say!("{changed} secret(s) re-encrypted");
    Ok(())
}

/// The secret files `rules` declares under `root`: each file named, and each `.age` file
/// under a folder named (`"secrets/web-1/"`), in order.
fn declared(rules: &mesh_lib::secret::Rules, root: &Path) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for key in rules.files.keys() {
        if !key.ends_with('/') {
            out.insert(key.clone());
            continue;
        }
        let found = walkdir::WalkDir::new(root.join(key))
            .follow_links(false)
            .into_iter()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_file())
            .filter_map(|e| {
                let rel = e.path().strip_prefix(root).ok()?.to_str()?.to_owned();
                rel.ends_with(".age").then_some(rel)
            });
        out.extend(found);
    }
    out
}

/// Who `secrets.ncl` says may read `file`, and whether its ciphertext is encrypted to each.
fn recipients(state: &Path, file: &Path) -> Result<(), Failure> {
    let (tree, name) = locate(state, file)?;
    let rules = rules(state, &tree)?;
    let recipients = rules
        .recipients(&name)
        .map_err(|e| Failure::user(e.to_string()))?;
    let tags = std::fs::read(tree.root.join(&name))
        .ok()
        .map(|c| mesh_lib::secret::stanza_tags(&name, &c))
        .transpose()
        .map_err(|e| Failure::user(e.to_string()))?;
    for r in &recipients {
        let kind = if r.node { "node" } else { "operator" };
        let state = match &tags {
            None => "file missing",
            Some(t) if t.contains(&mesh_lib::secret::key_tag(&r.key)) => "can read",
            Some(_) => "NOT encrypted to it: run `mesh secret rekey`",
        };
        say!("{:<20} {kind:<9} {state}", r.name);
    }
    Ok(())
}
