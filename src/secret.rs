//! `mesh secret`: edit, rekey and list the recipients of the fleet's secrets (age files
//! encrypted to the SSH keys the tree's `secrets.ncl` declares). The plaintext is only ever in
//! memory (zeroed after use) and, while `mesh secret edit` runs the editor, in a file only the
//! operator may read, in a folder only the operator may enter, removed after.

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
fn tree_at(state: &Path, at: &Path) -> Result<Tree, Failure> {
    let library = mesh_compiler::library::install(state)
        .map_err(|e| Failure::system(format!("installing the mesh library: {e}")))?;
    let rule = crate::commands::tree_rule();
    // The tree of the nearest secrets.ncl above (the one that declares this secret's readers).
    let rules_file = at
        .ancestors()
        .skip(1)
        .map(|d| d.join(RULES_FILE))
        .find(|f| f.is_file());
    let at = rules_file.as_deref().unwrap_or(at);
    Tree::find(at, &library, rule).map_err(|e| mesh_compiler::BuildError::from(e).into())
}

fn rules(state: &Path, tree: &Tree) -> Result<Rules, Failure> {
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
    // A folder only the operator may enter, a file only the operator may read.
    let dir = tempfile::Builder::new()
        .prefix("mesh-secret-")
        .tempdir()
        .map_err(|e| Failure::system(format!("making a private folder: {e}")))?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .map_err(|e| Failure::system(format!("{}: {e}", dir.path().display())))?;
    let plain = dir.path().join(
        Path::new(&name)
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string(),
    );
    let wipe = |p: &Path| {
        // Overwritten before it is removed: the plaintext does not outlive the edit.
        if let Ok(meta) = std::fs::metadata(p) {
            if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(p) {
                let _best_effort = f.write_all(&vec![0u8; meta.len() as usize]);
                let _best_effort = f.sync_data();
            }
        }
        let _best_effort = std::fs::remove_file(p);
    };
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
        let status = std::process::Command::new(&words[0])
            .args(&words[1..])
            .arg(&plain)
            .status()
            .map_err(|e| Failure::user(format!("running the editor `{editor}`: {e}")))?;
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
    wipe(&plain);
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
    for name in rules.files.keys() {
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
