//! The `mesh` binary: argument parsing and presentation only. Every semantic lives in the
//! libraries: `mesh-lib`, `mesh-compiler`, the node's crates (`mesh-node`, `mesh-reach`,
//! `mesh-containers`, `mesh-systemd`, `mesh-switch`, `mesh-remote`), `mesh-fleet` and
//! `mesh-registry`.

#[macro_use]
mod output;
mod activate;
mod build;
mod cli;
mod commands;
mod context;
mod failure;
mod fleet;
mod images;
mod import;
mod progress;
mod registry;
mod remote;
mod secret;
mod serve;
mod setup;
mod show;

use std::process::ExitCode;

fn main() -> ExitCode {
    // The evaluating child of a build (see mesh_compiler::bounded): not a command of the CLI.
    if std::env::args_os().nth(1).as_deref() == Some(mesh_compiler::bounded::CHILD_ARG.as_ref()) {
        return ExitCode::from(mesh_compiler::serve());
    }
    // The ProxyCommand of the mesh's own ssh connections (see mesh_fleet::ssh::proxy).
    if std::env::args_os().nth(1).as_deref() == Some(mesh_fleet::ssh::PROXY_ARG.as_ref()) {
        let args: Vec<std::ffi::OsString> = std::env::args_os().skip(2).collect();
        return ExitCode::from(mesh_fleet::ssh::proxy(&args));
    }
    mesh_fleet::ssh::prepare_environment();
    failure::install_report_handler();
    let mut args = match cli::Cli::parse_from_args(std::env::args_os()) {
        Ok(args) => args,
        Err(e) => return failure::usage(e),
    };
    // A deploy key's forced command takes its place from its own command line only: whatever
    // a client sent (`SetEnv`, where sshd accepts it) is gone before anything reads it.
    if matches!(args.command, cli::Command::Serve) {
        serve::scrub_environment();
        args = match cli::Cli::parse_from_args(std::env::args_os()) {
            Ok(args) => args,
            Err(e) => return failure::usage(e),
        };
    }
    match commands::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}
