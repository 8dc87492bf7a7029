//! How a failure reaches the user: a miette report on stderr and the exit code SPEC.md gives.

use std::process::ExitCode;

use mesh_compiler::BuildError;
use mesh_lib::store::StoreError;

/// Reports go to a person on a terminal (wrapped to its width) and to scripts and logs otherwise
/// (one line per message, never wrapped, so a message can be searched for whole).
pub fn install_report_handler() {
    use std::io::IsTerminal;
    let terminal = std::io::stderr().is_terminal();
    let _already_installed = miette::set_hook(Box::new(move |_| {
        let opts = miette::MietteHandlerOpts::new();
        let opts = if terminal {
            opts
        } else {
            opts.wrap_lines(false).color(false)
        };
        Box::new(opts.build())
    }));
}

/// What clap says about the command line, with the contract's exit code: help and the version
/// asked for are a success (0); anything else is a usage error, bad input (1) — not clap's own 2,
/// which the contract keeps for a conflict that may be retried.
pub fn usage(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let asked = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    // Printing goes to stdout for help and version, stderr otherwise; a closed pipe is not an
    // error worth reporting here.
    let _unprinted = e.print();
    if asked {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(Exit::User as u8)
    }
}

/// The exit codes of the command contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 1: a bad declaration or bad input.
    User = 1,
    /// 2: a conflict or a refusal.
    Refused = 2,
    /// 3: I/O, nft or Docker failed.
    System = 3,
}

/// A failed command.
pub struct Failure {
    pub exit: Exit,
    pub report: miette::Report,
}

impl Failure {
    pub fn new(exit: Exit, report: impl Into<miette::Report>) -> Self {
        Self {
            exit,
            report: report.into(),
        }
    }

    /// A failure whose message is text, some of it from outside (a path, a tool's answer):
    /// escaped where it could make the report lie (see [`mesh_lib::text`]).
    pub fn text(exit: Exit, message: impl std::fmt::Display) -> Self {
        let text = message.to_string();
        Self::new(
            exit,
            miette::Report::msg(mesh_lib::text::escape_keeping_lines(&text).into_owned()),
        )
    }

    pub fn user(message: impl std::fmt::Display) -> Self {
        Self::text(Exit::User, message)
    }

    pub fn system(message: impl std::fmt::Display) -> Self {
        Self::text(Exit::System, message)
    }

    /// The report as one line, for a long-running loop that goes on after it.
    pub fn report_text(&self) -> String {
        self.report.to_string()
    }

    pub fn report(self) -> ExitCode {
        eprintln!("{:?}", self.report);
        ExitCode::from(self.exit as u8)
    }
}

impl From<BuildError> for Failure {
    fn from(e: BuildError) -> Self {
        let exit = match e {
            BuildError::Rejected(_) => Exit::User,
            BuildError::Store(StoreError::MissingGeneration(_) | StoreError::Ambiguous(_)) => {
                Exit::User
            }
            BuildError::Store(StoreError::State(ref s)) if s.is_bad_input() => Exit::User,
            BuildError::Bounded(mesh_compiler::bounded::BoundedError::Exceeded { .. }) => {
                Exit::User
            }
            BuildError::Store(_)
            | BuildError::Io { .. }
            | BuildError::Bounded(_)
            | BuildError::NotKept(_) => Exit::System,
        };
        match e {
            // Spans and help, each part escaped by the diagnostic itself; a limit's help.
            BuildError::Rejected(_) | BuildError::Bounded(_) => Self::new(exit, e),
            _ => Self::text(exit, mesh_lib::text::chain(&e)),
        }
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        BuildError::Store(e).into()
    }
}

impl From<mesh_lib::state::StateError> for Failure {
    fn from(e: mesh_lib::state::StateError) -> Self {
        let exit = if e.is_bad_input() {
            Exit::User
        } else {
            Exit::System
        };
        Self::text(exit, mesh_lib::text::chain(&e))
    }
}

impl From<mesh_switch::ActivateError> for Failure {
    fn from(e: mesh_switch::ActivateError) -> Self {
        let exit = match e.kind() {
            mesh_switch::Kind::User => Exit::User,
            mesh_switch::Kind::Refused => Exit::Refused,
            mesh_switch::Kind::System => Exit::System,
        };
        // Docker's and nft's messages are in the chain: escaped, their lines kept.
        Self::text(exit, mesh_lib::text::chain(&e))
    }
}

impl From<mesh_node::NodeError> for Failure {
    fn from(e: mesh_node::NodeError) -> Self {
        mesh_switch::ActivateError::from(e).into()
    }
}
