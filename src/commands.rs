//! The dispatcher: each command to the module that resolves its environment, calls the
//! libraries and presents what they did.

use crate::cli::{Cli, Command, FleetCommand, ImagesCommand, RecordCommand, StoreCommand};
use crate::failure::Failure;
use crate::{activate, build, context};

pub fn run(cli: Cli) -> Result<(), Failure> {
    // What reads no state: a build of the package (flake.nix) makes completions and man pages
    // where no state directory can be.
    let command = match cli.command {
        Command::Lib(args) => return crate::setup::lib(args),
        Command::Completions(args) => return crate::setup::completions(args),
        Command::Man(args) => return crate::setup::man(args),
        command => command,
    };
    context::configure(
        cli.global.eval_timeout,
        cli.global.eval_memory,
        cli.global.tree.clone(),
        cli.global.fleet.clone(),
    );
    let place = crate::context::Place {
        file: cli.global.fleet,
        tree: cli.global.tree,
    };
    let state = context::state_dir(cli.global.state_dir)?;
    let machine = context::Machine {
        state: state.clone(),
        root: cli.global.root,
        netns: cli.global.netns,
        container_jobs: cli.global.container_jobs as usize,
        settle: std::time::Duration::from_secs(cli.global.settle),
        fetch_stall: context::fetch_stall()?,
        served: crate::serve::served(),
    };
    // An import (its --check aside) reads no state of the mesh's: it opens the node over a
    // scratch state, so a machine the mesh never ran on keeps having no state folder.
    let command = match command {
        Command::Import(args) if args.check.is_none() => {
            return crate::import::import(&machine, args)
        }
        command => command,
    };
    mesh_lib::state::secure(&state)?;
    match command {
        Command::Init(args) => crate::setup::init(&state, args),
        Command::Lib(_) | Command::Completions(_) | Command::Man(_) => {
            unreachable!("answered before the state directory")
        }
        Command::Build(args) => build::build_cmd(&state, args),
        Command::Show(args) => build::show_cmd(&state, args),
        Command::Verify(flag) => build::verify_cmd(&state, flag.json),
        Command::Record {
            command: RecordCommand::Export,
        } => build::record_export(&state),
        Command::Switch(args) => activate::switch(&machine, args),
        Command::Rollback(args) => activate::rollback(&machine, args),
        Command::Generations(flag) => activate::generations(&machine, flag.json),
        Command::Diff(args) => activate::diff(&machine, args),
        Command::Adopt(args) => activate::adopt(&machine, args),
        Command::Import(args) => crate::import::import(&machine, args),
        Command::Take(args) => activate::take(&machine, args),
        Command::Status(flag) => activate::status(&machine, flag.json),
        Command::Gc(args) => activate::gc(&machine, args),
        Command::Genesis(args) => activate::genesis(&machine, args),
        Command::Flip(args) => activate::flip(&machine, args),
        Command::Reconcile(args) => activate::reconcile(&machine, args),
        Command::Confirm(args) => crate::remote::confirm(&machine, &args.token, args.json),
        Command::Deploys(args) => {
            crate::remote::deploys(&machine, args.token.as_deref(), args.wait, args.json)
        }
        Command::Store {
            command: StoreCommand::Missing,
        } => crate::remote::missing(&machine),
        Command::Store {
            command: StoreCommand::Receive,
        } => crate::remote::receive(&machine),
        Command::Store {
            command: StoreCommand::Serve { io_timeout },
        } => crate::remote::serve(&machine, io_timeout.map(std::time::Duration::from_secs)),
        Command::Sign(args) => crate::fleet::sign(&state, args),
        Command::Serve => {
            let mut own = vec![
                (
                    "--state-dir".to_owned(),
                    machine.state.display().to_string(),
                ),
                ("--root".to_owned(), machine.root.display().to_string()),
            ];
            if let Some(ns) = &machine.netns {
                own.push(("--netns".to_owned(), ns.clone()));
            }
            run(crate::serve::request(&own)?)
        }
        Command::DeployAgent { token } => crate::remote::agent(&machine, &token),
        Command::DeployStep { token, step } => crate::remote::step(&machine, &token, &step),
        Command::Secret { command } => crate::secret::run(&state, command),
        Command::Images {
            command: ImagesCommand::Lock(args),
        } => crate::images::lock(&state, &place, args),
        Command::Fleet {
            command: FleetCommand::Build(args),
        } => crate::fleet::build(&state, &place, args),
        Command::Fleet {
            command: FleetCommand::Records(args),
        } => crate::fleet::records(&state, &place, args),
        Command::Fleet {
            command: FleetCommand::Status(args),
        } => crate::fleet::status(&state, &place, args),
        Command::Fleet {
            command: FleetCommand::Import(args),
        } => crate::fleet::import(&state, &place, args),
        Command::Deploy(args) => crate::fleet::deploy(&state, &place, args),
        Command::Push(args) => crate::registry::push(&state, &place, args),
        Command::Prune(args) => crate::registry::prune(&state, &args),
        Command::Rollout(args) => crate::registry::rollout(&state, &place, args),
        Command::Pull(args) => crate::registry::pull(&machine, &args),
        Command::Follow(args) => crate::registry::follow(&machine, &args),
    }
}
