//! The command line: what the user can say, validated before anything runs.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// mesh: a declarative configuration compiler with generation rollback, built to adopt machines
/// that are in use.
///
/// A node's declaration (Nickel) plus its node record compile into an immutable,
/// content-addressed generation. Exit codes: 0 success, 1 bad declaration or input, 2 conflict or
/// refused, 3 system failure.
#[derive(Parser, Debug)]
#[command(name = "mesh", version, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Args, Debug)]
pub struct Global {
    /// The state directory: store, node record, profile. Default: /var/lib/mesh as root,
    /// $XDG_STATE_HOME/mesh or ~/.local/state/mesh otherwise.
    #[arg(long, global = true, env = "MESH_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Compile a node declaration into a generation in the store; print its id on the last line.
    Build(BuildArgs),
    /// Show a generation for a person: files and their states, containers, ports, openings and
    /// the firewall as nft text.
    Show(ShowArgs),
    /// Check every object in the store against its name.
    Verify(JsonFlag),
    /// The node record.
    Record {
        #[command(subcommand)]
        command: RecordCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum RecordCommand {
    /// Print this node's record (canonical JSON), for CI to build the same generation.
    Export,
}

#[derive(Args, Debug)]
pub struct JsonFlag {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct BuildArgs {
    /// The node declaration (a .ncl file ending in `mesh.node { … }`).
    pub node: PathBuf,
    /// The node record to build with. Default: this node's, in the state directory; none there
    /// means a managed node with nothing found.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Fail (exit 2) unless the build gives this generation id: the CI reproducibility gate.
    #[arg(long, value_name = "ID")]
    pub check: Option<String>,
    /// Evaluate even if the evaluation cache has an answer.
    #[arg(long)]
    pub no_cache: bool,
    /// Print one JSON object (with at least `id`) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// A generation id (`b3:…`, or a unique prefix of at least 4 digits) or a node declaration
    /// to build and show.
    pub what: String,
    /// The node record, when WHAT is a declaration.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Print the generation as JSON.
    #[arg(long)]
    pub json: bool,
}
