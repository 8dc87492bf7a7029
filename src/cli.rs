//! The command line: what the user can say, validated before anything runs.

use std::path::PathBuf;

use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

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

/// The options that say where and how a command acts: given before the command's name, and
/// after it to each command that reads them ([`READS`]), listed in its --help.
#[derive(Args, Debug)]
#[command(
    next_help_heading = "Options before a command (each command's --help lists those it reads)"
)]
pub struct Global {
    /// The state directory: store, node record, profile. Default: /var/lib/mesh as root,
    /// $XDG_STATE_HOME/mesh or ~/.local/state/mesh otherwise.
    #[arg(long, env = "MESH_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The filesystem root declared files are written under.
    #[arg(long, env = "MESH_ROOT", value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Apply and read the firewall inside this network namespace (`ip netns`), not the
    /// machine's own.
    #[arg(long, env = "MESH_NETNS", value_name = "NAME")]
    pub netns: Option<String>,
    /// Stop the evaluation of a declaration that runs longer than this (exit 1).
    #[arg(
        long,
        env = "MESH_EVAL_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = mesh_compiler::bounded::DEFAULT_TIME_SECONDS,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub eval_timeout: u64,
    /// Stop the evaluation of a declaration that needs more memory than this, in MiB (exit 1).
    #[arg(
        long,
        env = "MESH_EVAL_MEMORY",
        value_name = "MIB",
        default_value_t = mesh_compiler::bounded::DEFAULT_MEMORY_MIB,
        value_parser = clap::value_parser!(u64).range(64..)
    )]
    pub eval_memory: u64,
    /// The fleet file (default for `mesh fleet` and `mesh deploy`: the nearest fleet.ncl from
    /// the working folder upwards). Its folder is the fleet's tree for the declarations in it:
    /// where their imports may lead.
    #[arg(long, env = "MESH_FLEET", value_name = "FILE")]
    pub fleet: Option<PathBuf>,
    /// The fleet's tree, given outright: a declaration's imports may lead only into it (and to
    /// the mesh's library). Default: the folder of the nearest fleet.ncl above the declaration
    /// (or of --fleet's), else its checkout (.git), else its own folder.
    #[arg(long, env = "MESH_TREE", value_name = "DIR")]
    pub tree: Option<PathBuf>,
    /// How many containers a switch creates and starts at once (each container's own steps
    /// stay in their order). Stops are not bound by it: a switch asks every stop at once.
    #[arg(
        long,
        env = "MESH_CONTAINER_JOBS",
        value_name = "N",
        default_value_t = mesh_containers::DEFAULT_JOBS as u64,
        value_parser = clap::value_parser!(u64).range(1..=1024)
    )]
    pub container_jobs: u64,
    /// Seconds a switch watches the units it started, restarted or reloaded before it calls
    /// the switch done: a unit that fails within them (or dies and waits to be restarted) is
    /// reported as a failed job is, and `--rollback-on-failure` and a deploy's confirmation
    /// take it into account. 0: do not wait.
    #[arg(
        long,
        env = "MESH_SETTLE",
        value_name = "SECONDS",
        default_value_t = mesh_switch::units::SETTLE.as_secs(),
        value_parser = clap::value_parser!(u64).range(0..=3600)
    )]
    pub settle: u64,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Start a fleet: write into DIR (default: here) a small one that builds as it is — a fleet
    /// file, a catalogue of two modules, one node's declaration, the records folder, a
    /// .gitignore, the CI gate (ci/check.sh: `mesh fleet build --check ci/ids.txt`, with the ids
    /// the nodes build now) and the mesh's library in .mesh/ for editors. Writes over nothing.
    Init(InitArgs),
    /// The mesh's Nickel library (what `import "mesh.ncl"` reads), as this binary ships it and
    /// builds with: printed, or written as DIR/mesh.ncl for the `nickel` command and the Nickel
    /// language server (put DIR on NICKEL_IMPORT_PATH).
    Lib(LibArgs),
    /// Compile a node declaration into a generation in the store; print its id on the last line.
    Build(BuildArgs),
    /// Show a generation for a person: files and their states, containers, ports, openings and
    /// the firewall as nft text.
    Show(ShowArgs),
    /// Check every object in the store against its name.
    Verify(JsonFlag),
    /// Switch the node to a generation: build the declaration (or take a stored generation),
    /// plan against what is on the machine, apply atomically, and commit it as the current one.
    Switch(SwitchArgs),
    /// Switch to the previous generation (or generation NUMBER), as a new entry in the log.
    Rollback(RollbackArgs),
    /// List the profile's generations, the current one marked.
    Generations(JsonFlag),
    /// What changes between two generations (numbers or ids); default previous -> current.
    Diff(DiffArgs),
    /// Start adopting this node: record every found file of the assigned modules, hold them, and
    /// switch.
    Adopt(AdoptArgs),
    /// Write the declaration of what this node runs (its containers, files at given paths) into
    /// a fleet's catalogue and a node declaration, changing nothing on the machine, laid out as
    /// `nickel format` lays it out; a credential is never written in clear (a file holding one,
    /// or an environment's, is written encrypted when DIR's secrets.ncl names its readers, the
    /// node among them; an environment's then is the container's `secret_environment`). Or,
    /// with --check, compare a declaration's every container and file with what runs.
    Import(ImportArgs),
    /// The cutover of one module or several, in one generation: their held files are replaced
    /// by the declared ones (the originals stay in the store), their found containers stop and
    /// are kept as NAME.found, the declared ones run.
    Take(TakeArgs),
    /// Mode, current generation, held and taken counts, drift of files, and the firewall against
    /// the generation (what `mesh reconcile` would put back).
    Status(JsonFlag),
    /// Remove old generations and every blob nothing references.
    Gc(GcArgs),
    /// End adoption on this node: the base ruleset and the guard in force, the found firewall
    /// removed (a container runtime's tables stay: Docker's, Podman's, kube-proxy's).
    /// `--preview` shows, from the sockets actually listening, what stays reachable and what the
    /// flip would close.
    Flip(FlipArgs),
    /// First bring-up of the foundation: check each of its ports free (no socket bound to it),
    /// naming the holder and a free alternative when one is taken, and pin them in the node
    /// record, so every later build reads them.
    Genesis(GenesisArgs),
    /// Put the current generation's firewall back in force: the guard, and on an adopted node
    /// the openings through the found firewall's own chains (after a reload or a reboot lost
    /// them).
    Reconcile(ReconcileArgs),
    /// The node record.
    Record {
        #[command(subcommand)]
        command: RecordCommand,
    },
    /// Confirm a deploy (`mesh switch --confirm-within`): the new generation stays. Says
    /// whether it was confirmed in time, or had already been reverted (exit 2).
    Confirm(ConfirmArgs),
    /// The deploys on this node, the newest first (or one, by its token): what they switched to,
    /// from what, and how they ended — confirmed, reverted and why, or failed.
    Deploys(DeploysArgs),
    /// The store's objects, as `mesh deploy` moves them (plumbing, spoken over SSH).
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// The fleet's secrets: age files encrypted to the nodes' SSH host keys and the operators'
    /// keys, as the fleet's secrets.ncl declares who may read which.
    Secret {
        #[command(subcommand)]
        command: SecretCommand,
    },
    /// Container images named by a tag: pinned by digest in the fleet's image lock.
    Images {
        #[command(subcommand)]
        command: ImagesCommand,
    },
    /// The fleet: every node of a fleet file built, their records fetched, their status.
    Fleet {
        #[command(subcommand)]
        command: FleetCommand,
    },
    /// Deploy the fleet's nodes over SSH: per node, build its generation with the record it has,
    /// send only the objects it lacks (checked on arrival), switch it in a process of its own
    /// that survives the connection, and confirm over a new connection; a node without the
    /// confirmation in time (or whose units fail) switches back by itself. Prints a table:
    /// node, from -> to, what changed, result, time. Exit 0 when every node is confirmed, 2 when
    /// one was reverted or its host key refused, 3 when one failed or is unreachable.
    Deploy(DeployArgs),
    /// Publish each node's generation to an OCI registry (REGISTRY/REPOSITORY): built with its
    /// record from the fleet's records folder, signed; every object it references an artifact
    /// of its own (tagged b3-HEX, sent only when the registry lacks it), and the node's tag
    /// (its name) moved to an artifact of its signatures, the generation and its delta from the
    /// one the tag named before, annotated with the generation id and the source revision.
    /// Nodes fetch it themselves with `mesh pull`.
    Push(PushArgs),
    /// Delete the object artifacts (tags b3-HEX) of REGISTRY/REPOSITORY that no generation a
    /// node's tag names references any more: every push adds objects, none goes by itself.
    /// Node tags and their artifacts are never touched; nothing is deleted unless every node tag
    /// was read. Run it where the pushes are made, not while one runs (a push sends its objects
    /// before it moves a tag). The registry's own garbage collection then frees the blobs.
    /// --dry-run only says what would go.
    Prune(PruneArgs),
    /// On a node: read this node's tag in REGISTRY/REPOSITORY, check its signature against the
    /// node's trusted signers before anything else is fetched, fetch only the objects the
    /// store lacks (each checked against its name), then switch under a deploy's guard: a unit
    /// that fails in the settle window or a health check (--check, --probe) that does not pass
    /// switches back by itself, and the pull records why. A tag whose generation is in force
    /// changes nothing and writes nothing. Exit 0 confirmed or up to date, 2 refused or
    /// reverted, 3 the registry or the switch failed.
    Pull(PullArgs),
    /// `mesh pull` every INTERVAL seconds, until stopped (for a service; a systemd timer runs
    /// `mesh pull` instead): a pull that fails is said and tried again at the next round.
    Follow(FollowArgs),
    /// Publish every node's generation (as `mesh push`, no tag moved), then move the tags wave
    /// after wave as the fleet file's `rollout` declares, waiting after each wave until its
    /// nodes report the new generation in force and confirmed (read over SSH, as `mesh fleet
    /// status` does). The first wave that does not get healthy in time stops the rollout (exit
    /// 2), naming its nodes and why; its tags are put back and later waves' tags are untouched.
    Rollout(RolloutArgs),
    /// Print the completion script of SHELL for the mesh's commands and options, e.g.
    /// `mesh completions bash > /etc/bash_completion.d/mesh`.
    Completions(CompletionsArgs),
    /// Man pages for the mesh and each of its commands (the --help text, as roff): the page of
    /// COMMAND printed (`mesh man fleet build | man -l -`), or every page written to DIR; or
    /// every command's --help as one Markdown page (--markdown).
    Man(ManArgs),
    /// Sign generations with an SSH key (sshsig, namespace mesh-generation): a key file, or a
    /// key of the ssh-agent (--key naming its public key, or none: the agent's first). The
    /// signature is kept in the store beside the generation and travels with it in a deploy;
    /// a node whose trusted signers include the key accepts the generation.
    Sign(SignArgs),
    /// The one command a deploy key may run on a node: put it in `authorized_keys` as
    /// `command="mesh serve",restrict` (with this node's --state-dir, --root, --netns if not
    /// the defaults). It runs what the deployer asked (SSH_ORIGINAL_COMMAND) only when it is a
    /// request a deploy makes — record export, the store's objects, a switch armed with its
    /// deadline, confirm, deploys, status — for this node's own state directory: no shell, no
    /// other command.
    Serve,
    /// The detached side of `mesh switch --confirm-within` (not for people).
    #[command(hide = true)]
    DeployAgent {
        /// The deploy's token.
        token: String,
    },
    /// One step of a deploy, run by its agent under the agent's lock (not for people).
    #[command(hide = true)]
    DeployStep {
        /// The deploy's token.
        token: String,
        /// `switch` or `revert`.
        step: String,
    },
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// The fleet's folder, made if missing (it may hold other files, none of the fleet's).
    #[arg(default_value = ".", value_name = "DIR")]
    pub dir: PathBuf,
    /// The first node's name.
    #[arg(long, value_name = "NAME", default_value = "node-1")]
    pub node: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LibArgs {
    /// Write the library as DIR/mesh.ncl (replacing one a mesh wrote there; any other file is
    /// refused) instead of printing it.
    #[arg(long, value_name = "DIR")]
    pub write: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// The command whose page is printed, e.g. `fleet build` (default: the mesh's own page).
    #[arg(value_name = "COMMAND", conflicts_with = "write")]
    pub command: Vec<String>,
    /// Write every page (mesh.1, mesh-build.1, mesh-fleet-build.1, …) into DIR instead.
    #[arg(long, value_name = "DIR")]
    pub write: Option<PathBuf>,
    /// Print every command's --help as one Markdown page instead: the manual's commands page
    /// (docs/src/commands.md), the same whatever the environment holds.
    #[arg(long, conflicts_with_all = ["write", "command"])]
    pub markdown: bool,
}

#[derive(Subcommand, Debug)]
pub enum SecretCommand {
    /// Decrypt FILE with the operator's key into $VISUAL/$EDITOR (a file only you may read, in
    /// a folder only you may enter, removed after), then encrypt what was saved to the
    /// recipients secrets.ncl declares for it. A FILE not there yet is created.
    Edit(SecretEditArgs),
    /// Re-encrypt every secret secrets.ncl declares to the recipients it declares now (after
    /// a node joins or an operator leaves); say which changed.
    Rekey(SecretIdentity),
    /// Who secrets.ncl says may read FILE, and whether its ciphertext is encrypted to each.
    Recipients {
        /// The secret file (e.g. secrets/db.age).
        file: PathBuf,
    },
}

/// The operator's key that decrypts.
#[derive(Args, Debug)]
pub struct SecretIdentity {
    /// The operator's SSH private key (ssh-ed25519, not passphrase-protected); default
    /// ~/.ssh/id_ed25519.
    #[arg(long, short = 'i', value_name = "FILE")]
    pub identity: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct SecretEditArgs {
    /// The secret file (e.g. secrets/db.age), in the fleet's tree.
    pub file: PathBuf,
    #[command(flatten)]
    pub key: SecretIdentity,
}

#[derive(Subcommand, Debug)]
pub enum ImagesCommand {
    /// Resolve every container image named by a tag alone in the fleet's nodes (or in one
    /// declaration) at its registry, and write the digests into images.lock at the root of the
    /// fleet's tree (beside fleet.ncl): every build there then pins those images by the locked
    /// digests, offline, on any machine. Every tag is asked again; entries of images no node
    /// declares any more are dropped (not with a declaration: the other entries are kept).
    /// --check asks no registry: exit 2 naming every image the lock lacks.
    Lock(ImagesLockArgs),
}

#[derive(Args, Debug)]
pub struct ImagesLockArgs {
    /// One node declaration (default: every node of the fleet file).
    pub node: Option<PathBuf>,
    /// Change nothing and ask no registry: say whether the lock pins every image named by a
    /// tag (exit 0) or which it lacks (exit 2).
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub registry: RegistryOptions,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum FleetCommand {
    /// Build every node (in parallel), each with its record from the fleet's records folder;
    /// print each node's generation id. --check FILE (lines `NODE ID`) exits 2 naming every
    /// node whose build differs: the CI gate for a fleet.
    Build(FleetBuildArgs),
    /// Fetch every node's record (`mesh record export` over SSH) into the fleet's records
    /// folder, so CI builds exactly what the nodes build.
    Records(FleetArgs),
    /// One line per node: reachable, mode, generation (and whether it is the one the fleet
    /// builds), modules held and taken, file and firewall drift; and, for nodes that pull,
    /// the generation their tag names (with --registry), and their last pull and its result.
    Status(FleetStatusArgs),
    /// Write the declaration of what each node runs into the fleet's tree (`mesh import` on
    /// the node, over SSH, read-only): a module the catalogue has already, saying the same, is
    /// shared; one saying another thing gets a module of the node's own (NAME_NODE), unless
    /// the nodes imported together run it alike but for its containers' names, environment
    /// values and label values: then it is one module, each node's own (and its ports' numbers)
    /// passed by its declaration. Each node's
    /// declaration goes to nodes/NODE.ncl.
    Import(FleetImportArgs),
}

/// How many of the fleet's nodes at once: every fleet command takes it (and the global --fleet).
#[derive(Args, Debug)]
pub struct AtOnce {
    /// Nodes at once.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub parallel: u64,
}

#[derive(Args, Debug)]
pub struct FleetArgs {
    #[command(flatten)]
    pub at_once: AtOnce,
    /// Only these nodes (default: every node of the fleet).
    #[arg(long = "node", value_name = "NODE")]
    pub nodes: Vec<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct FleetStatusArgs {
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// The registry and repository the nodes pull from: each node's tag is read, and shown as
    /// the generation desired.
    #[arg(long, value_name = "REGISTRY/REPOSITORY")]
    pub registry: Option<String>,
    #[command(flatten)]
    pub registry_options: RegistryOptions,
}

#[derive(Args, Debug)]
pub struct FleetBuildArgs {
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// A file of expected ids, a line `NODE ID` (or `NODE RECORD ID`) each, `#` starting a
    /// comment: exit 2 naming every node whose build differs.
    #[arg(long, value_name = "FILE")]
    pub check: Option<PathBuf>,
    /// Sign each node's generation (with --key, or the ssh-agent's first key): the signature
    /// is kept in the store and travels with the generation in a deploy.
    #[arg(long)]
    pub sign: bool,
    /// Refuse (exit 2), naming them, container images pinned neither in the declaration nor
    /// in the image lock (`mesh images lock`).
    #[arg(long)]
    pub locked: bool,
    #[command(flatten)]
    pub key: SigningKey,
}

#[derive(Args, Debug)]
pub struct DeployArgs {
    /// The nodes to deploy (default: every node of the fleet).
    pub nodes: Vec<String>,
    #[command(flatten)]
    pub at_once: AtOnce,
    /// The deploy's deadline on each node, in seconds from when its switch is armed: a switch
    /// still running then is stopped, and without the confirmation over a new connection by
    /// then the node switches back by itself.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub confirm_timeout: u64,
    /// Seconds a read or a write on a node's connection may make no progress before its deploy
    /// fails (a link that stalls mid-copy: nothing switched; what arrived whole is kept).
    #[arg(long, value_name = "SECONDS", env = "MESH_IO_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub io_timeout: u64,
    /// Replace the generation of a node that runs one switched to by hand, which the fleet did
    /// not build (without it, such a node is reported `foreign` and left as it is).
    #[arg(long)]
    pub replace_foreign: bool,
    /// Sign each node's generation before it is sent (with --key, or the ssh-agent's first
    /// key), and a statement naming it for the node (its sequence above the node's highest,
    /// valid for --valid-for): a node that trusts signers switches only with one.
    #[arg(long)]
    pub sign: bool,
    #[command(flatten)]
    pub key: SigningKey,
    /// How long each statement signed holds, e.g. 12h, 7d (default: the fleet file's
    /// statements.valid_for, else 7 days).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub valid_for: Option<std::time::Duration>,
    /// Send the objects each node lacks and show its plan; switch nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Stage each node's generation instead of switching to it: judged as for a switch, the
    /// objects it lacks sent, its images fetched on the node and its secrets decrypted to check
    /// them, nothing in force changed (`mesh switch --stage` there); the later deploy of the same
    /// generation sends nothing and switches, even with the image registry gone.
    #[arg(long, conflicts_with_all = ["dry_run", "replace_foreign"])]
    pub stage: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum StoreCommand {
    /// Read a want list on stdin (`generation ID` / `blob HASH`, a line each); print the ones
    /// this store lacks.
    Missing,
    /// Read a stream of objects on stdin; store them once every one matches its name (one that
    /// does not stores nothing, exit 3); print one JSON object: objects and bytes stored.
    Receive,
    /// A deploy's requests, a line each on stdin (hello, io-timeout, record, current, lacks,
    /// missing, receive, signatures, signature, sequence, offer, switch, offer-stage, stage),
    /// answered in turn on stdout: what `mesh
    /// deploy` speaks over its one connection to a node.
    Serve {
        /// End the session when no byte of a stream comes for this long (a link cut mid-copy);
        /// the objects that arrived whole are kept.
        #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
        io_timeout: Option<u64>,
    },
}

#[derive(Args, Debug)]
pub struct ConfirmArgs {
    /// The deploy's token (printed by `mesh switch --confirm-within`).
    pub token: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct DeploysArgs {
    /// One deploy's token.
    pub token: Option<String>,
    /// With TOKEN: wait until its switch is done (switched, failed or reverted) before saying.
    #[arg(long, requires = "token")]
    pub wait: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
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
    /// Refuse (exit 2), naming them, container images pinned neither in the declaration nor
    /// in the image lock (`mesh images lock`).
    #[arg(long)]
    pub locked: bool,
    /// Evaluate even if the evaluation cache has an answer.
    #[arg(long)]
    pub no_cache: bool,
    /// Print one JSON object (with at least `id`) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct SwitchArgs {
    /// The node declaration to build and switch to.
    #[arg(required_unless_present = "generation", conflicts_with = "generation")]
    pub node: Option<PathBuf>,
    /// A generation already in the store (e.g. built by CI) to switch to.
    #[arg(long, value_name = "ID")]
    pub generation: Option<String>,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Put everything the generation needs on the node — its objects read and checked, its
    /// secrets decrypted to check them, its images pinned by digest fetched (a held
    /// container's too) — with nothing in force changed, and record it as staged (`mesh
    /// status`); the later switch to it then needs no registry.
    #[arg(long, conflicts_with_all = ["dry_run", "rollback_on_failure", "confirm_within"])]
    pub stage: bool,
    /// When a unit fails after the switch, switch back to the generation in force before, at
    /// once (the command still fails, and says so).
    #[arg(long)]
    pub rollback_on_failure: bool,
    /// A deploy: switch to --generation in a process of its own (it survives the connection
    /// that started it), then wait SECONDS for `mesh confirm TOKEN`; without it, or when a unit
    /// fails, switch back to the generation in force before by itself. Prints the token at once.
    #[arg(long, value_name = "SECONDS", requires = "generation", conflicts_with_all = ["dry_run", "node"], value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub confirm_within: Option<u64>,
    /// Accept that recreating a found container loses what no declaration can say (the gaps
    /// `mesh import` names): `CONTAINER` (all of its gaps), `CONTAINER:GAP`, or `*`. Without it
    /// such a switch is refused. Repeat for more.
    #[arg(long, value_name = "CONTAINER[:GAP]")]
    pub accept_gap: Vec<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RollbackArgs {
    /// The generation number to go to (see `mesh generations`).
    #[arg(long, value_name = "NUMBER")]
    pub to: Option<u64>,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// From: a generation number or id. Default: the one before TO.
    pub from: Option<String>,
    /// To: a generation number or id. Default: the current one.
    pub to: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct AdoptArgs {
    /// The node declaration.
    pub node: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The folder the catalogue (catalogue/NAME.ncl) and the node's declaration
    /// (nodes/NODE.ncl) are written into: a fleet's tree. A module already in its catalogue
    /// that says the same is shared, not written again.
    #[arg(long, value_name = "DIR", required_unless_present_any = ["check", "found_json"])]
    pub out: Option<PathBuf>,
    /// The node's name (default: the root's /etc/hostname).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    #[command(flatten)]
    pub what: ImportWhat,
    /// Write over files that are already there.
    #[arg(long)]
    pub force: bool,
    /// Compare the declaration's every container, file and opening with what runs, each
    /// `equal` or what differs and why (an opening: who reaches the port now against who would
    /// after the flip); exit 2 unless all are equal. Writes nothing.
    #[arg(
        long,
        value_name = "NODE.ncl",
        conflicts_with_all = ["out", "force", "node", "container", "no_containers", "file", "compose", "no_compose_files", "found_json"]
    )]
    pub check: Option<PathBuf>,
    /// Print what was found (the containers as the engine says them, the files' bytes, the
    /// openings) as one JSON object, and write nothing: what `mesh fleet import` reads over SSH.
    #[arg(long, conflicts_with_all = ["out", "force"])]
    pub found_json: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `mesh import` and `mesh fleet import` read on a node.
#[derive(Args, Debug, Clone)]
pub struct ImportWhat {
    /// A container to import, by name or by a shell pattern matching names (`app-*`; quote
    /// it), repeat it; default: every container on the engine but the mesh's own.
    #[arg(long, value_name = "NAME|PATTERN")]
    pub container: Vec<String>,
    /// Import no container (files only).
    #[arg(long, conflicts_with = "container")]
    pub no_containers: bool,
    /// A file to import, by its absolute path on the node (repeat it).
    #[arg(long, value_name = "PATH")]
    pub file: Vec<String>,
    /// A compose file on the node, by its absolute path (repeat it): the containers of the
    /// project it started are imported (beside any --container), with the file itself and the
    /// environment files it names. An imported container's compose project brings its files
    /// so anyway.
    #[arg(long, value_name = "PATH", conflicts_with = "no_containers")]
    pub compose: Vec<String>,
    /// Import no compose file, nor the environment files one names (its containers still are).
    #[arg(long)]
    pub no_compose_files: bool,
    /// Read no firewall: write no openings (with --check: compare none). By default every port
    /// published on the node that someone outside reaches through the firewall in force gets an
    /// opening from whom it is reached now, so the flip leaves it so.
    #[arg(long)]
    pub no_firewall: bool,
    /// A file larger than this (bytes, or a size such as 512k, 10m) is not imported: it is
    /// named as a gap, its content not copied into the fleet's repository.
    #[arg(long, value_name = "SIZE", default_value = "1m", value_parser = size)]
    pub max_file_size: u64,
}

/// The default of `--max-file-size`: 1 MiB.
pub const MAX_FILE_SIZE: u64 = 1 << 20;

/// A size as compose writes one (`512k`, `10m`, or bytes).
fn size(text: &str) -> Result<u64, String> {
    mesh_lib::options::parse_size(text).and_then(|n| u64::try_from(n).map_err(|e| e.to_string()))
}

impl ImportWhat {
    /// As arguments of the node's `mesh import`.
    pub fn to_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (flag, values) in [
            ("--container", &self.container),
            ("--file", &self.file),
            ("--compose", &self.compose),
        ] {
            for v in values {
                out.push(flag.to_owned());
                out.push(v.clone());
            }
        }
        for (flag, on) in [
            ("--no-containers", self.no_containers),
            ("--no-compose-files", self.no_compose_files),
            ("--no-firewall", self.no_firewall),
        ] {
            if on {
                out.push(flag.to_owned());
            }
        }
        // Said only when it is not the default: a node's older mesh knows no such flag.
        if self.max_file_size != MAX_FILE_SIZE {
            out.push("--max-file-size".to_owned());
            out.push(self.max_file_size.to_string());
        }
        out
    }
}

#[derive(Args, Debug)]
pub struct FleetImportArgs {
    /// The nodes to import, one after the other, as `mesh fleet status` reaches them (default:
    /// every node of the fleet).
    #[arg(long = "node", value_name = "NODE")]
    pub nodes: Vec<String>,
    #[command(flatten)]
    pub what: ImportWhat,
    /// Write over files that are already there (a node's own modules from an import before).
    #[arg(long)]
    pub force: bool,
    /// Print one JSON object instead of text: `nodes`, each node's import as `mesh import
    /// --json` says it, and `failed`, each node not imported with why.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TakeArgs {
    /// The modules to take, all in one generation; then, optionally, the node declaration
    /// (the last argument, when it ends in `.ncl` or holds a `/`). Default declaration: the one
    /// the current generation was built from.
    #[arg(required = true, value_name = "MODULE... [NODE.ncl]")]
    pub args: Vec<String>,
    /// When a unit fails after the switch, switch back to the generation in force before, at
    /// once (the command still fails, and says so).
    #[arg(long)]
    pub rollback_on_failure: bool,
    /// Accept that the take loses what a found container holds that no declaration can say
    /// (the gaps `mesh import` names): `CONTAINER` (all of its gaps), `CONTAINER:GAP`, or `*`.
    /// Without it such a take is refused. Repeat for more.
    #[arg(long, value_name = "CONTAINER[:GAP]")]
    pub accept_gap: Vec<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

impl TakeArgs {
    /// The modules and the declaration: the last argument is the declaration when it ends in
    /// `.ncl` or holds a `/` (a module's name cannot hold a `/`).
    pub fn split(&self) -> (Vec<&str>, Option<PathBuf>) {
        match self.args.split_last() {
            Some((last, rest)) if last.ends_with(".ncl") || last.contains('/') => (
                rest.iter().map(String::as_str).collect(),
                Some(PathBuf::from(last)),
            ),
            _ => (self.args.iter().map(String::as_str).collect(), None),
        }
    }
}

#[derive(Args, Debug)]
pub struct SignArgs {
    /// The generations (ids, or unique prefixes of at least 4 hex digits).
    #[arg(required = true)]
    pub ids: Vec<String>,
    #[command(flatten)]
    pub key: SigningKey,
    /// Also write each signature to DIR/ID.sig (to check with ssh-keygen -Y verify).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The key generations are signed with.
#[derive(Args, Debug)]
pub struct SigningKey {
    /// An OpenSSH private key file, or a public key whose private half is in the ssh-agent
    /// (default: the agent's first key).
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct GenesisArgs {
    /// The node declaration.
    pub node: PathBuf,
    /// Replace ports already pinned with the declaration's (an explicit act: a pinned port never
    /// changes otherwise).
    #[arg(long)]
    pub repin: bool,
    /// Where this node's trusted signers are (a path under the root; default
    /// /etc/mesh/trusted-signers): once that file exists, a generation from elsewhere
    /// (`switch --generation`, a deploy) needs a signature by one of them.
    #[arg(long, value_name = "PATH")]
    pub trusted_signers: Option<String>,
    /// Where this node's ssh-ed25519 host key is (a path under the root; default
    /// /etc/ssh/ssh_host_ed25519_key): the private key its secrets are decrypted with at switch
    /// time. MESH_HOST_KEY (a path on this machine) overrides it for one command.
    #[arg(long, value_name = "PATH")]
    pub host_key: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ReconcileArgs {
    /// Keep doing it, every SECONDS, until SIGTERM (as a service: see
    /// examples/systemd/mesh-reconcile.service).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub watch: Option<u64>,
    /// Only say what is missing or different in the kernel's firewall; change nothing.
    #[arg(long, conflicts_with = "watch")]
    pub dry_run: bool,
    /// Print one JSON object (per round) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct FlipArgs {
    /// Only show what is reachable now and what the base ruleset would close; change nothing.
    #[arg(long)]
    pub preview: bool,
    /// Flip even though some modules are not taken (their held files are then replaced).
    #[arg(long)]
    pub force: bool,
    /// The node declaration. Default: the one the current generation was built from.
    pub node: Option<PathBuf>,
    /// When a unit fails after the switch, switch back to the generation in force before, at
    /// once (the command still fails, and says so).
    #[arg(long)]
    pub rollback_on_failure: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct GcArgs {
    /// How many of the newest generations to keep (the current one is always kept).
    #[arg(long, default_value_t = 5)]
    pub keep: usize,
    /// Print one JSON object instead of text.
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

/// How the registry is reached.
#[derive(Args, Debug, Clone)]
pub struct RegistryOptions {
    /// Speak plain HTTP to the registry (one on loopback or a private network without TLS).
    #[arg(long, env = "MESH_REGISTRY_INSECURE")]
    pub insecure: bool,
    /// Seconds a connection to the registry, or a read from it, may take.
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub registry_timeout: u64,
}

/// What `mesh push` and `mesh rollout` publish, and where.
#[derive(Args, Debug)]
pub struct PublishArgs {
    /// The registry and repository, e.g. registry.example:5000/fleet/prod.
    #[arg(value_name = "REGISTRY/REPOSITORY")]
    pub target: String,
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub registry: RegistryOptions,
    /// Sign each node's generation and a statement naming it for the node (with --key, or the
    /// ssh-agent's first key): a node pulls only a tag whose statement a signer it trusts
    /// signed, for it, newer than the last it accepted and not expired.
    #[arg(long)]
    pub sign: bool,
    #[command(flatten)]
    pub key: SigningKey,
    /// How long each statement holds, e.g. 12h, 7d (default: the fleet file's
    /// statements.valid_for, else 7 days).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub valid_for: Option<std::time::Duration>,
    /// The source revision for the annotation (default: `git rev-parse HEAD` of the fleet
    /// file's checkout).
    #[arg(long, value_name = "REV")]
    pub revision: Option<String>,
}

#[derive(Args, Debug)]
pub struct PushArgs {
    #[command(flatten)]
    pub publish: PublishArgs,
}

#[derive(Args, Debug)]
pub struct PruneArgs {
    /// The registry and repository, e.g. registry.example:5000/fleet/prod.
    #[arg(value_name = "REGISTRY/REPOSITORY")]
    pub target: String,
    /// Say what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub registry: RegistryOptions,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct PullArgs {
    /// The registry and repository, e.g. registry.example:5000/fleet/prod.
    #[arg(value_name = "REGISTRY/REPOSITORY")]
    pub target: String,
    /// The tag to read (default: this node's name, as its generation in force says).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    #[command(flatten)]
    pub registry: RegistryOptions,
    /// A command (run by sh) that must exit 0 once switched, or the node switches back.
    #[arg(long = "check", value_name = "COMMAND")]
    pub checks: Vec<String>,
    /// A probe that must pass once switched: tcp:HOST:PORT (accepts a connection) or
    /// http://HOST[:PORT]/PATH (answers 2xx or 3xx).
    #[arg(long = "probe", value_name = "PROBE")]
    pub probes: Vec<String>,
    /// Seconds the checks and probes have to pass (each retried every second meanwhile).
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub health_within: u64,
    /// Try a generation that was switched to here and went back again (by default it is not
    /// tried again until the tag names another).
    #[arg(long)]
    pub retry: bool,
    /// Stage the tag's generation instead of switching to it: its statement and signatures
    /// judged as for a switch, its objects and images fetched, its secrets decrypted to check
    /// them, nothing in force changed and no pull recorded; the later `mesh pull` of the same
    /// tag switches to it without fetching again, even with the image registry gone.
    #[arg(long)]
    pub stage: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct FollowArgs {
    #[command(flatten)]
    pub pull: PullArgs,
    /// Seconds between pulls.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub interval: u64,
}

#[derive(Args, Debug)]
pub struct RolloutArgs {
    #[command(flatten)]
    pub publish: PublishArgs,
    /// Seconds each wave's nodes have to report the new generation confirmed (default: the
    /// fleet file's rollout.within).
    #[arg(long, value_name = "SECONDS")]
    pub within: Option<u64>,
    /// Seconds between two readings of a wave's nodes.
    #[arg(long, value_name = "SECONDS", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub every: u64,
}

/// A heading of a command's --help, and the options of [`Global`] under it (by id).
type Group = (&'static str, &'static [&'static str]);

const STATE: Group = ("The state", &["state_dir"]);
const NODE: Group = ("The machine", &["root", "netns"]);
const EVALUATION: Group = ("Evaluation", &["eval_timeout", "eval_memory"]);
const FLEET: Group = ("The fleet's tree", &["fleet", "tree"]);
const SWITCHING: Group = ("Switching", &["container_jobs", "settle"]);

/// Which of [`Global`]'s options each command reads: the command (its words), then the groups.
/// A command not named reads none (`lib`, `completions`, `man`).
pub const READS: &[(&[&str], &[Group])] = &[
    (&["init"], &[STATE, EVALUATION, FLEET]),
    (&["build"], &[STATE, EVALUATION, FLEET]),
    (&["show"], &[STATE, EVALUATION, FLEET]),
    (&["verify"], &[STATE]),
    (&["switch"], &[STATE, NODE, EVALUATION, FLEET, SWITCHING]),
    (&["rollback"], &[STATE, NODE, SWITCHING]),
    (&["generations"], &[STATE]),
    (&["diff"], &[STATE]),
    (&["adopt"], &[STATE, NODE, EVALUATION, FLEET, SWITCHING]),
    (&["import"], &[STATE, NODE, EVALUATION, FLEET]),
    (&["take"], &[STATE, NODE, EVALUATION, FLEET, SWITCHING]),
    (&["status"], &[STATE, NODE]),
    (&["gc"], &[STATE]),
    (&["flip"], &[STATE, NODE, EVALUATION, FLEET, SWITCHING]),
    (&["genesis"], &[STATE, NODE, EVALUATION, FLEET]),
    (&["reconcile"], &[STATE, NODE, SWITCHING]),
    (&["record", "export"], &[STATE]),
    (&["confirm"], &[STATE]),
    (&["deploys"], &[STATE]),
    (&["store", "missing"], &[STATE]),
    (&["store", "receive"], &[STATE]),
    (&["store", "serve"], &[STATE]),
    (&["secret", "edit"], &[STATE, FLEET]),
    (&["secret", "rekey"], &[STATE, FLEET]),
    (&["secret", "recipients"], &[STATE, FLEET]),
    (&["images", "lock"], &[STATE, EVALUATION, FLEET]),
    (&["fleet", "build"], &[STATE, EVALUATION, FLEET]),
    (&["fleet", "records"], &[STATE, FLEET]),
    (&["fleet", "status"], &[STATE, EVALUATION, FLEET]),
    (&["fleet", "import"], &[STATE, FLEET]),
    (&["deploy"], &[STATE, EVALUATION, FLEET]),
    (&["push"], &[STATE, EVALUATION, FLEET]),
    (&["prune"], &[STATE]),
    (&["pull"], &[STATE, NODE, SWITCHING]),
    (&["follow"], &[STATE, NODE, SWITCHING]),
    (&["rollout"], &[STATE, EVALUATION, FLEET]),
    (&["sign"], &[STATE]),
    (&["serve"], &[STATE, NODE]),
    (&["deploy-agent"], &[STATE, NODE, SWITCHING]),
    (&["deploy-step"], &[STATE, NODE, SWITCHING]),
];

/// The command line's definition: [`Cli`]'s, each command given the options of [`Global`] it
/// reads ([`READS`]) under their headings. What parses, and what --help, the completions and
/// the man pages say.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    let globals: Vec<clap::Arg> = cmd.get_arguments().cloned().collect();
    for (path, groups) in READS {
        let args: Vec<clap::Arg> = groups
            .iter()
            .flat_map(|(heading, ids)| {
                ids.iter().map(|id| {
                    globals
                        .iter()
                        .find(|a| a.get_id() == id)
                        .expect("an option of Global")
                        .clone()
                        .help_heading(*heading)
                })
            })
            .collect();
        cmd = with_args(cmd, path, args);
    }
    cmd
}

/// The value of the option `id` as given on the command line after the deepest of the commands
/// `chain` (the mesh's own first) that was given it; `None` when none was.
fn given<T: Clone + Send + Sync + 'static>(chain: &[&ArgMatches], id: &str) -> Option<T> {
    chain
        .iter()
        .rev()
        .find(|m| {
            m.ids().any(|i| i == id)
                && m.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
        })
        .and_then(|m| m.get_one::<T>(id).cloned())
}

/// `cmd` with `args` added to its subcommand at `path`.
fn with_args(cmd: clap::Command, path: &[&str], args: Vec<clap::Arg>) -> clap::Command {
    match path.split_first() {
        None => cmd.args(args),
        Some((first, rest)) => cmd.mut_subcommand(*first, |sub| with_args(sub, rest, args)),
    }
}

impl Cli {
    /// Parses `argv` (its first word the program's name) by [`command`]: an option of
    /// [`Global`] given after the command's name wins over the same given before it.
    pub fn parse_from_args<I, T>(argv: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let matches = command().try_get_matches_from(argv)?;
        let mut cli = Cli::from_arg_matches(&matches)?;
        let mut chain = vec![&matches];
        while let Some((_, sub)) = chain.last().and_then(|m| m.subcommand()) {
            chain.push(sub);
        }
        let g = &mut cli.global;
        g.state_dir = given(&chain, "state_dir").or(g.state_dir.take());
        g.root = given(&chain, "root").unwrap_or(std::mem::take(&mut g.root));
        g.netns = given(&chain, "netns").or(g.netns.take());
        g.eval_timeout = given(&chain, "eval_timeout").unwrap_or(g.eval_timeout);
        g.eval_memory = given(&chain, "eval_memory").unwrap_or(g.eval_memory);
        g.fleet = given(&chain, "fleet").or(g.fleet.take());
        g.tree = given(&chain, "tree").or(g.tree.take());
        g.container_jobs = given(&chain, "container_jobs").unwrap_or(g.container_jobs);
        g.settle = given(&chain, "settle").unwrap_or(g.settle);
        Ok(cli)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command [`READS`] names is one of the command line's, each option it lists one of
    /// [`Global`]'s (else [`command`] panics), and the whole passes clap's own checks.
    #[test]
    fn the_command_line_is_well_formed() {
        command().debug_assert();
        for (path, _) in READS {
            let mut cmd = command();
            for word in *path {
                cmd = cmd
                    .find_subcommand(word)
                    .unwrap_or_else(|| panic!("no command {path:?}"))
                    .clone();
            }
        }
    }
}
