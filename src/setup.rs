//! What sets a person up: `mesh init` (a fleet of their own), `mesh lib` (the library for their
//! editor), `mesh completions` and `mesh man` (the shell's completions and the man pages, both
//! made from the command line's own definition, so their text is the `--help` text).

use std::path::Path;

use mesh_fleet::init::InitError;
use mesh_lib::model::NodeName;
use serde_json::json;

use crate::cli::{CompletionsArgs, InitArgs, LibArgs, ManArgs};
use crate::failure::{Exit, Failure};

/// `mesh init`.
pub fn init(state: &Path, args: InitArgs) -> Result<(), Failure> {
    let node = NodeName::new(&args.node).map_err(|e| Failure::user(format!("--node: {e}")))?;
    let done = mesh_fleet::init::init(&args.dir, &node, state, crate::context::evaluator())
        .map_err(|e| match e {
            InitError::Build { source, .. } => (*source).into(),
            InitError::InTheWay { .. } => Failure::text(Exit::Refused, e),
            InitError::OpenToAll(_) => Failure::user(e),
            InitError::Io { .. } => Failure::system(e),
        })?;
    if args.json {
        let nodes: Vec<_> = done
            .nodes
            .iter()
            .map(|(node, id)| json!({ "node": node, "id": id }))
            .collect();
        say!(
            "{}",
            json!({ "dir": done.dir, "files": done.files, "nodes": nodes })
        );
        return Ok(());
    }
    let dir = args.dir.display();
    say!("a fleet in {dir}:");
    for file in &done.files {
        say!("  {}", file.display());
    }
    for (node, id) in &done.nodes {
        say!("{node} builds to {id} (in ci/ids.txt, the CI gate's)");
    }
    say!(
        "next:
  cd {dir}
  git init && git add . && git commit -m 'A fleet'   # the fleet is a repository of its own
  mesh build nodes/{node}.ncl     # build the node here: nothing on a machine changes
  ci/check.sh                    # the CI gate: every node still builds to its id
  direnv allow                   # editors and `nickel` find `import \"mesh.ncl\"` in .mesh/
then adopt the node and take its modules: README, \"A fleet of your own\""
    );
    Ok(())
}

/// `mesh lib`.
pub fn lib(args: LibArgs) -> Result<(), Failure> {
    use mesh_compiler::library::{self, WriteError};
    let Some(dir) = args.write else {
        say_raw!("{}", library::MESH_NCL);
        return Ok(());
    };
    let file = library::write_to(&dir).map_err(|e| match e {
        WriteError::NotALibrary(_) => Failure::text(Exit::Refused, e),
        WriteError::Io { .. } => Failure::system(e),
    })?;
    say!("{}", file.display());
    Ok(())
}

/// `mesh completions SHELL`.
pub fn completions(args: CompletionsArgs) -> Result<(), Failure> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut crate::cli::command(), "mesh", &mut script);
    say_raw!("{}", String::from_utf8_lossy(&script));
    Ok(())
}

/// The command line's definition as the man pages render it: built (so each command's name
/// is `mesh-fleet-build`), without the `help` command.
fn manual() -> clap::Command {
    let mut cmd = crate::cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Every command a person may run, the mesh's own first: the ones `--help` lists, and theirs.
fn commands(cmd: &clap::Command) -> Vec<clap::Command> {
    let mut out = vec![cmd.clone()];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        out.extend(commands(sub));
    }
    out
}

fn page(cmd: clap::Command) -> Result<(String, Vec<u8>), Failure> {
    let man = clap_mangen::Man::new(cmd);
    let mut roff = Vec::new();
    man.render(&mut roff).map_err(Failure::system)?;
    Ok((man.get_filename(), roff))
}

/// `mesh man`.
pub fn man(args: ManArgs) -> Result<(), Failure> {
    let manual = manual();
    if let Some(dir) = args.write {
        std::fs::create_dir_all(&dir)
            .map_err(|e| Failure::system(format!("cannot make {}: {e}", dir.display())))?;
        for cmd in commands(&manual) {
            let (name, roff) = page(cmd)?;
            let file = dir.join(name);
            std::fs::write(&file, roff)
                .map_err(|e| Failure::system(format!("cannot write {}: {e}", file.display())))?;
            say!("{}", file.display());
        }
        return Ok(());
    }
    let mut cmd = &manual;
    for word in &args.command {
        cmd = cmd
            .get_subcommands()
            .find(|s| !s.is_hide_set() && s.get_name() == word)
            .ok_or_else(|| {
                let known: Vec<&str> = cmd
                    .get_subcommands()
                    .filter(|s| !s.is_hide_set())
                    .map(clap::Command::get_name)
                    .collect();
                Failure::user(format!(
                    "no command `{}` (`{}` has: {})",
                    args.command.join(" "),
                    cmd.get_display_name().unwrap_or(cmd.get_name()),
                    if known.is_empty() {
                        "no commands".to_owned()
                    } else {
                        known.join(", ")
                    }
                ))
            })?;
    }
    let (_, roff) = page(cmd.clone())?;
    say_raw!("{}", String::from_utf8_lossy(&roff));
    Ok(())
}
