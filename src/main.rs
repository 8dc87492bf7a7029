//! The `mesh` binary: argument parsing and presentation only. Every semantic lives in the
//! `mesh-lib`, `mesh-compiler` and `mesh-activator` crates.

#[macro_use]
mod output;
mod activate;
mod cli;
mod commands;
mod failure;
mod show;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    failure::install_report_handler();
    let args = match cli::Cli::try_parse() {
        Ok(args) => args,
        Err(e) => return failure::usage(e),
    };
    match commands::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}
