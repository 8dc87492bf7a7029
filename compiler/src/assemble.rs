//! From an evaluated declaration and the node record to a [`Generation`]: every rejection SPEC.md
//! lists is made here, each pointing at the offending value's source span and naming both sides
//! where there are two; then each file and container gets its state from the record.
//!
//! Pure: no I/O. Blobs are returned, not written.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use ipnet::Ipv4Net;
use mesh_lib::firewall::{base_ruleset, guard_ruleset};
use mesh_lib::image::ImageRef;
use mesh_lib::model::{
    check_account_name, check_printable, check_setting_name, split_install, ContainerEntry,
    ContainerName, ContainerNetwork, ContainerState, FileEntry, FileMode, FileState, FirewallRules,
    Healthcheck, Mode, ModuleName, ModuleState, NodeName, OnChange, Opening, PickUp, Port,
    PrivateNetwork, Protocol, PublishedPort, Settings, Source as From, TrafficPath, UnitEntry,
    UnitName, UnitState, UnitTrigger, Volume, FORMAT_VERSION, FOUNDATION_PORTS,
};
use mesh_lib::path::HostMount;
use mesh_lib::secret::{SecretContent, SecretRef};
use mesh_lib::{BlobHash, Generation, NodeRecord, TargetPath};
use serde::Deserialize;

use crate::diagnostic::{MeshDiagnostic, Span};
use crate::eval::{show_pointer, Evaluation, Pointer, Step};

mod options;

/// A node as its declaration evaluates: its name, settings and modules, each module applied
/// to the settings. What is assembled into a generation.
#[derive(Deserialize)]
pub(crate) struct NodeOut {
    pub(crate) name: String,
    pub(crate) settings: SettingsOut,
    pub(crate) modules: Vec<ModuleOut>,
}

#[derive(Deserialize)]
pub(crate) struct SettingsOut {
    ports: BTreeMap<String, i64>,
    private_network: NetworkOut,
}

#[derive(Deserialize)]
struct NetworkOut {
    range: String,
    address: String,
    hub: bool,
}

#[derive(Deserialize)]
pub(crate) struct ModuleOut {
    name: String,
    files: Vec<FileOut>,
    containers: Vec<ContainerOut>,
    openings: Vec<OpeningOut>,
    units: Vec<UnitOut>,
}

#[derive(Deserialize)]
struct UnitOut {
    name: String,
    text: String,
    enabled: bool,
    started: bool,
    on_change: OnChange,
    #[serde(default)]
    instances: Vec<String>,
}

#[derive(Deserialize)]
struct FileOut {
    path: String,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    secrets: BTreeMap<String, String>,
    #[serde(default)]
    mode: Option<String>,
    owner: String,
    group: String,
    reloads: Vec<String>,
    restarts: Vec<String>,
    special_mode: bool,
}

#[derive(Deserialize)]
struct ContainerOut {
    name: String,
    image: String,
    command: Vec<String>,
    environment: BTreeMap<String, String>,
    #[serde(default)]
    secret_environment: BTreeMap<String, String>,
    publish: Vec<PublishOut>,
    volumes: Vec<VolumeOut>,
    labels: BTreeMap<String, String>,
    #[serde(default)]
    stop_timeout: Option<i64>,
    #[serde(default)]
    restart: Option<String>,
    #[serde(default)]
    networks: Vec<JoinedOut>,
    #[serde(default)]
    healthcheck: Option<HealthcheckOut>,
    /// Every other option (limits, security, namespaces…): see [`options`].
    #[serde(flatten)]
    options: options::OptionsOut,
}

#[derive(Deserialize)]
struct JoinedOut {
    name: String,
    aliases: Vec<String>,
    #[serde(default)]
    ipv4_address: Option<String>,
    #[serde(default)]
    ipv6_address: Option<String>,
}

#[derive(Deserialize)]
struct HealthcheckOut {
    test: Vec<String>,
    #[serde(default)]
    interval: Option<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    retries: Option<i64>,
    #[serde(default)]
    start_period: Option<String>,
}

#[derive(Deserialize)]
struct PublishOut {
    host_port: i64,
    container_port: i64,
    protocol: Protocol,
    host_ip: String,
}

#[derive(Deserialize)]
struct VolumeOut {
    source: String,
    target: String,
    read_only: bool,
    #[serde(default)]
    host_access: bool,
    #[serde(default)]
    propagation: Option<Propagation>,
    #[serde(default)]
    nocopy: Option<bool>,
    #[serde(default)]
    selinux: Option<Relabel>,
}

/// A bind's mount propagation, as the contract's enum gives it.
#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Propagation {
    Shared,
    Slave,
    Private,
    Rshared,
    Rslave,
    Rprivate,
}

impl Propagation {
    /// As the engine writes it; `None` for its default, `rprivate`.
    fn given(self) -> Option<String> {
        let word = match self {
            Propagation::Shared => "shared",
            Propagation::Slave => "slave",
            Propagation::Private => "private",
            Propagation::Rshared => "rshared",
            Propagation::Rslave => "rslave",
            Propagation::Rprivate => return None,
        };
        Some(word.to_owned())
    }
}

/// A mount's SELinux relabelling: `'z` shared, `'Z` private.
#[derive(Deserialize, Clone, Copy)]
enum Relabel {
    #[serde(rename = "z")]
    Shared,
    #[serde(rename = "Z")]
    Private,
}

#[derive(Deserialize)]
struct OpeningOut {
    port: i64,
    protocol: Protocol,
    paths: Vec<TrafficPath>,
    from: String,
}

/// A blob the generation needs in the store.
#[derive(Debug, Clone)]
pub struct NewBlob {
    /// Its digest.
    pub hash: BlobHash,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Whether a file using it is not world-readable.
    pub private: bool,
}

/// The compiler's result before it reaches the store.
#[derive(Debug)]
pub struct Assembled {
    /// The generation.
    pub generation: Generation,
    /// The contents of its declared files.
    pub blobs: Vec<NewBlob>,
}

/// The node record and where it came from, for diagnostics about it.
pub struct RecordSource<'a> {
    /// The record.
    pub record: &'a NodeRecord,
    /// Its file, as shown to the user.
    pub name: String,
}

struct Ctx<'a> {
    /// The evaluation the node came from, for the spans of rejections (none for a node put
    /// together from cached modules: a rejection is then made again from a whole evaluation).
    eval: Option<&'a Evaluation>,
}

impl Ctx<'_> {
    fn reject(&self, at: &[Step], message: impl Into<String>, label: &str) -> MeshDiagnostic {
        let message = message.into();
        let mut d = MeshDiagnostic::new(message);
        match self.span(at, label) {
            Some(span) => d = d.with_span(span),
            None => {
                d = d.with_help(format!(
                    "at `{}` in the evaluated declaration",
                    show_pointer(at)
                ))
            }
        }
        d
    }

    fn span(&self, at: &[Step], label: &str) -> Option<Span> {
        self.eval.and_then(|e| e.span_at(at, label))
    }

    /// The place `more` under `steps`. Where there is no evaluation to point into — a node
    /// assembled module by module, whose rejections the whole evaluation reports — none is
    /// built: two thousand files would cost thousands of allocations for nothing.
    fn at(&self, steps: &[Step], more: &[Step]) -> Pointer {
        match self.eval {
            Some(_) => steps.iter().chain(more).cloned().collect(),
            None => Pointer::new(),
        }
    }
}

fn f(name: &'static str) -> Step {
    Step::Field(std::borrow::Cow::Borrowed(name))
}

/// A field whose name is data, not code.
fn named(name: &str) -> Step {
    Step::Field(std::borrow::Cow::Owned(name.to_owned()))
}

/// Assembles the generation of `eval` for the node `record` describes.
pub fn assemble(
    eval: &Evaluation,
    record: Option<&RecordSource<'_>>,
) -> Result<Assembled, MeshDiagnostic> {
    let node: NodeOut = eval.deserialize().map_err(|e| not_a_node(&e))?;
    assemble_node(&node, Some(eval), record)
}

/// Why a value is not a node.
pub(crate) fn not_a_node(e: &dyn std::fmt::Display) -> MeshDiagnostic {
    MeshDiagnostic::new(format!("the declaration does not evaluate to a node: {e}")).with_help(
        "a node declaration ends with `mesh.node { name = …, settings = …, modules = […] }`",
    )
}

/// Assembles the generation of an evaluated `node`; `eval`, when there is one, gives the
/// rejections their spans.
pub(crate) fn assemble_node(
    node: &NodeOut,
    eval: Option<&Evaluation>,
    record: Option<&RecordSource<'_>>,
) -> Result<Assembled, MeshDiagnostic> {
    let mut assembly = Assembly::new(&node.name, &node.settings, eval, record)?;
    for (i, m) in node.modules.iter().enumerate() {
        assembly.add(i, m)?;
    }
    assembly.finish()
}

/// A generation assembled module by module, the modules added in any order (each with its
/// place in the declaration's `modules`): what it gives does not depend on the order, so the
/// modules a build reads from its cache are added while the ones that changed are evaluated.
/// What needs every module — a module the record takes but the declaration does not assign, a
/// container's host mount of a declared file's folder — is checked at [`Assembly::finish`].
pub(crate) struct Assembly<'a> {
    ctx: Ctx<'a>,
    node_name: NodeName,
    record: std::borrow::Cow<'a, NodeRecord>,
    record_name: &'a str,
    settings: Settings,
    modules: BTreeMap<ModuleName, ModuleState>,
    files: BTreeMap<TargetPath, (FileEntry, Pointer)>,
    /// The files of units, not of the modules' `files`.
    unit_files: BTreeSet<TargetPath>,
    units: BTreeMap<UnitName, (UnitEntry, Pointer)>,
    blobs: BTreeMap<BlobHash, NewBlob>,
    containers: BTreeMap<ContainerName, (ContainerEntry, Pointer)>,
    host_ports: Vec<(PublishedPort, ModuleName, Pointer)>,
    openings: Vec<Opening>,
    /// Volumes whose source is a host path, checked once every declared file is known.
    mounts: Vec<Mount>,
}

/// A container's volume from a host path.
struct Mount {
    container: ContainerName,
    source: String,
    host_access: bool,
    at: Pointer,
}

impl<'a> Assembly<'a> {
    /// Starts the generation of the node `name` with `settings`, for the node `record`
    /// describes; `eval`, when there is one, gives the rejections their spans.
    pub(crate) fn new(
        name: &str,
        settings_out: &SettingsOut,
        eval: Option<&'a Evaluation>,
        record: Option<&'a RecordSource<'a>>,
    ) -> Result<Self, MeshDiagnostic> {
        let ctx = Ctx { eval };
        let node_name = NodeName::new(name)
            .map_err(|e| ctx.reject(&[f("name")], e.to_string(), "this name"))?;
        // No record: a node never adopted, managed, with nothing found.
        let (record, record_name) = match record {
            Some(source) => (
                std::borrow::Cow::Borrowed(source.record),
                source.name.as_str(),
            ),
            None => (
                std::borrow::Cow::Owned(NodeRecord::managed(node_name.clone())),
                "the node record",
            ),
        };
        if record.node != node_name {
            return Err(MeshDiagnostic::new(format!(
                "{record_name} is the record of node `{}`, but the declaration is node `{node_name}`",
                record.node
            ))
            .with_help("pass the record of this node with --record, or build with the state directory of that node"));
        }
        let settings = settings(&ctx, settings_out)?;
        let openings = foundation_openings(&settings);
        Ok(Assembly {
            ctx,
            node_name,
            record,
            record_name,
            settings,
            modules: BTreeMap::new(),
            files: BTreeMap::new(),
            unit_files: BTreeSet::new(),
            units: BTreeMap::new(),
            blobs: BTreeMap::new(),
            containers: BTreeMap::new(),
            host_ports: Vec::new(),
            openings,
            mounts: Vec::new(),
        })
    }

    /// Adds the module at `mi` in the declaration's `modules`.
    pub(crate) fn add(&mut self, mi: usize, m: &ModuleOut) -> Result<(), MeshDiagnostic> {
        let Assembly {
            ctx,
            record,
            settings,
            modules,
            files,
            unit_files,
            units,
            blobs,
            containers,
            host_ports,
            openings,
            mounts,
            ..
        } = self;
        let ctx = &*ctx;
        let record: &NodeRecord = record;
        let base = [f("modules"), Step::Index(mi)];
        let here = [f("modules"), Step::Index(mi), f("name")];
        let module =
            ModuleName::new(&m.name).map_err(|e| ctx.reject(&here, e.to_string(), "this name"))?;
        let state = match record.mode {
            Mode::Managed => ModuleState::Taken,
            Mode::Adopted if record.taken.contains(&module) => ModuleState::Taken,
            Mode::Adopted => ModuleState::Assigned,
        };
        if modules.insert(module.clone(), state).is_some() {
            return Err(ctx.reject(
                &here,
                format!("module {module} is assigned twice"),
                "assigned again here",
            ));
        }
        let module = &module;
        let taken = state == ModuleState::Taken;

        for (fi, file) in m.files.iter().enumerate() {
            let here = ctx.at(&base, &[f("files"), Step::Index(fi)]);
            let path = TargetPath::new(&file.path).map_err(|e| {
                ctx.reject(
                    &ctx.at(&here, &[f("path")]),
                    format!("module {module}: {e}"),
                    "this path",
                )
            })?;
            let (content, secret) = file_content(ctx, &here, module, &file.path, file)?;
            let default_mode = if secret.is_some() { "0400" } else { "0644" };
            let mode =
                FileMode::parse(file.mode.as_deref().unwrap_or(default_mode)).map_err(|e| {
                    ctx.reject(
                        &ctx.at(&here, &[f("mode")]),
                        format!("module {module}, {path}: {e}"),
                        "this mode",
                    )
                })?;
            let special = mode.special();
            if !special.is_empty() && !file.special_mode {
                return Err(ctx
                    .reject(
                        &ctx.at(&here, &[f("mode")]),
                        format!(
                            "module {module}, {path}: mode {mode} is {}, which the mesh writes only when the file asks for it",
                            special.join(", ")
                        ),
                        "this mode",
                    )
                    .with_help("if this file must have it, say so on the file: `special_mode = true`"));
            }
            for (field, name) in [("owner", &file.owner), ("group", &file.group)] {
                check_account_name(name).map_err(|e| {
                    ctx.reject(
                        &ctx.at(&here, &[f(field)]),
                        format!("module {module}, {path}: {e}"),
                        &format!("this {field}"),
                    )
                })?;
            }
            let units = triggers(ctx, &here, module, &path, file)?;
            let declared = Declared {
                path,
                content,
                secret,
                mode,
                owner: &file.owner,
                group: &file.group,
                units,
                special_mode: file.special_mode,
                named_at: ctx.at(&here, &[f("path")]),
            };
            add_file(ctx, files, blobs, record, module, taken, declared)?;
        }

        for (ui, u) in m.units.iter().enumerate() {
            let here = ctx.at(&base, &[f("units"), Step::Index(ui)]);
            let named_at = ctx.at(&here, &[f("name")]);
            let name = UnitName::new(&u.name)
                .map_err(|e| ctx.reject(&named_at, format!("module {module}: {e}"), "this name"))?;
            if let Some((first, first_at)) = units.get(&name) {
                let mut d = ctx.reject(
                    &named_at,
                    format!(
                        "unit {name} is declared by modules {} and {module}",
                        first.module
                    ),
                    &format!("declared by {module}"),
                );
                if let Some(span) = ctx.span(first_at, &format!("declared by {}", first.module)) {
                    d = d.with_span(span);
                }
                return Err(d);
            }
            let path = name.file();
            let found_elsewhere =
                record.found.units.contains_key(&name) && !record.found.files.contains_key(&path);
            let state = if taken {
                UnitState::Managed
            } else if record.found.units.contains_key(&name)
                || record.found.files.contains_key(&path)
            {
                UnitState::Held
            } else {
                UnitState::Staged
            };
            // A unit found under its name in a file elsewhere is held with that file in force:
            // the declared file, which would shadow it, is written only at the take.
            if !(state == UnitState::Held && found_elsewhere) {
                unit_files.insert(path.clone());
                let declared = Declared {
                    path,
                    content: &u.text,
                    secret: None,
                    mode: FileMode::parse("0644").expect("a mode"),
                    owner: "root",
                    group: "root",
                    units: Vec::new(),
                    special_mode: false,
                    named_at: named_at.clone(),
                };
                add_file(ctx, files, blobs, record, module, taken, declared)?;
            }
            if !u.instances.is_empty() && !name.is_template() {
                return Err(ctx.reject(
                    &ctx.at(&here, &[f("instances")]),
                    format!("module {module}: unit {name} is not a template (NAME@.TYPE): it has no instances"),
                    "these instances",
                ));
            }
            let mut instances = Vec::new();
            for (ii, i) in u.instances.iter().enumerate() {
                let at = ctx.at(&here, &[f("instances"), Step::Index(ii)]);
                name.instance(i).map_err(|e| {
                    ctx.reject(&at, format!("module {module}: {e}"), "this instance")
                })?;
                if instances.contains(i) {
                    return Err(ctx.reject(
                        &at,
                        format!("module {module}: unit {name} names instance {i} twice"),
                        "named again",
                    ));
                }
                instances.push(i.clone());
            }
            instances.sort();
            let (body, install) = split_install(&u.text);
            let entry = UnitEntry {
                module: module.clone(),
                enabled: u.enabled,
                started: u.started,
                on_change: u.on_change,
                body: BlobHash::of(body.as_bytes()),
                install: BlobHash::of(install.as_bytes()),
                state,
                instances,
            };
            units.insert(name, (entry, named_at));
        }

        for (ci, c) in m.containers.iter().enumerate() {
            let here = ctx.at(&base, &[f("containers"), Step::Index(ci)]);
            let name = ContainerName::new(&c.name).map_err(|e| {
                ctx.reject(
                    &ctx.at(&here, &[f("name")]),
                    format!("module {module}: {e}"),
                    "this name",
                )
            })?;
            let mut ports = Vec::new();
            for (pi, p) in c.publish.iter().enumerate() {
                let p_at = ctx.at(&here, &[f("publish"), Step::Index(pi)]);
                let host_port = setting_port(
                    ctx,
                    settings,
                    &ctx.at(&p_at, &[f("host_port")]),
                    p.host_port,
                    || format!("container {name} of module {module} publishes host port"),
                )?;
                let container_port = Port::new(p.container_port).map_err(|e| {
                    ctx.reject(
                        &ctx.at(&p_at, &[f("container_port")]),
                        format!("container {name}: {e}"),
                        "this port",
                    )
                })?;
                let host_ip: IpAddr = p.host_ip.parse().map_err(|_| {
                    ctx.reject(
                        &ctx.at(&p_at, &[f("host_ip")]),
                        format!("container {name}: `{}` is not an IP address", p.host_ip),
                        "this address",
                    )
                })?;
                let published = PublishedPort {
                    host_ip,
                    host_port,
                    container_port,
                    protocol: p.protocol,
                };
                if let Some((_, other, other_at)) =
                    host_ports.iter().find(|(q, _, _)| collides(q, &published))
                {
                    let mut d = ctx.reject(
                        &ctx.at(&p_at, &[f("host_port")]),
                        format!(
                            "host port {}/{} is published by modules {other} and {module}",
                            host_port, published.protocol
                        ),
                        &format!("published by {module}"),
                    );
                    if let Some(span) = ctx.span(
                        &ctx.at(other_at, &[f("host_port")]),
                        &format!("published by {other}"),
                    ) {
                        d = d.with_span(span);
                    }
                    return Err(d);
                }
                host_ports.push((published.clone(), module.clone(), p_at));
                ports.push(published);
            }
            ports.sort();
            let mut volumes = Vec::new();
            for (vi, v) in c.volumes.iter().enumerate() {
                if !v.target.starts_with('/') {
                    return Err(ctx.reject(
                        &ctx.at(&here, &[f("volumes"), Step::Index(vi), f("target")]),
                        format!(
                            "container {name}: volume target `{}` is not an absolute path",
                            v.target
                        ),
                        "this target",
                    ));
                }
                if v.source.starts_with('/') {
                    mounts.push(Mount {
                        container: name.clone(),
                        source: v.source.clone(),
                        host_access: v.host_access,
                        at: ctx.at(&here, &[f("volumes"), Step::Index(vi), f("source")]),
                    });
                }
                let v_at = ctx.at(&here, &[f("volumes"), Step::Index(vi)]);
                let host_path = v.source.starts_with('/');
                if v.propagation.is_some() && !host_path {
                    return Err(ctx.reject(
                        &ctx.at(&v_at, &[f("propagation")]),
                        format!("container {name}: propagation is a host path's, not the named volume {}'s", v.source),
                        "this propagation",
                    ));
                }
                if v.nocopy == Some(true) && host_path {
                    return Err(ctx.reject(
                        &ctx.at(&v_at, &[f("nocopy")]),
                        format!(
                            "container {name}: nocopy is a named volume's, not the host path {}'s",
                            v.source
                        ),
                        "this option",
                    ));
                }
                let mut volume = Volume::new(v.source.clone(), v.target.clone(), v.read_only);
                volume.propagation = v.propagation.and_then(Propagation::given);
                volume.nocopy = v.nocopy.unwrap_or(false);
                volume.selinux = v.selinux.map(|z| {
                    match z {
                        Relabel::Shared => "z",
                        Relabel::Private => "Z",
                    }
                    .to_owned()
                });
                volumes.push(volume);
            }
            volumes.sort();
            let stop_timeout = options::stop_grace_period(
                ctx,
                &here,
                &name,
                &c.options.stop_grace_period,
                c.stop_timeout,
            )?;
            let stop_timeout =
                match stop_timeout {
                    None => None,
                    Some(t) => Some(u32::try_from(t).ok().filter(|t| *t <= 3600).ok_or_else(
                        || {
                            ctx.reject(
                                &ctx.at(&here, &[f("stop_timeout")]),
                                format!(
                                    "container {name}: stop_timeout {t} is not 0 to 3600 seconds"
                                ),
                                "this value",
                            )
                        },
                    )?),
                };
            let mut secret_environment = BTreeMap::new();
            for (k, file) in &c.secret_environment {
                let at = ctx.at(&here, &[f("secret_environment"), named(k)]);
                let why = if c.environment.contains_key(k) {
                    Some(format!("container {name}: environment variable {k} is given in `environment` and in `secret_environment`: give it once"))
                } else if k.is_empty() || k.contains('=') || k.contains('\0') {
                    Some(format!(
                        "container {name}: {k:?} cannot be an environment variable's name"
                    ))
                } else {
                    mesh_lib::secret::check_file(file)
                        .err()
                        .map(|e| format!("container {name}, environment variable {k}: {e}"))
                };
                if let Some(why) = why {
                    return Err(ctx.reject(&at, why, "this secret"));
                }
                secret_environment.insert(
                    k.clone(),
                    SecretRef {
                        // Filled in once the ciphertext is read.
                        ciphertext: BlobHash::of(b""),
                        file: file.clone(),
                        recipients: Vec::new(),
                    },
                );
            }
            let mut networks = Vec::new();
            for (ni, n) in c.networks.iter().enumerate() {
                if networks.iter().any(|m: &ContainerNetwork| m.name == n.name) {
                    return Err(ctx.reject(
                        &ctx.at(&here, &[f("networks"), Step::Index(ni), f("name")]),
                        format!("container {name}: network {} is listed twice", n.name),
                        "this network",
                    ));
                }
                let mut aliases = n.aliases.clone();
                aliases.sort();
                aliases.dedup();
                let mut joined = ContainerNetwork::new(n.name.clone(), aliases);
                let bad = |field: &'static str, a: &str| {
                    ctx.reject(
                        &ctx.at(&here, &[f("networks"), Step::Index(ni), f(field)]),
                        format!(
                            "container {name}: `{a}` is not an {} address",
                            if field == "ipv4_address" {
                                "IPv4"
                            } else {
                                "IPv6"
                            }
                        ),
                        "this address",
                    )
                };
                if let Some(a) = &n.ipv4_address {
                    joined.ipv4_address = Some(a.parse().map_err(|_| bad("ipv4_address", a))?);
                }
                if let Some(a) = &n.ipv6_address {
                    joined.ipv6_address = Some(a.parse().map_err(|_| bad("ipv6_address", a))?);
                }
                networks.push(joined);
            }
            networks.sort();
            let run_options =
                options::options(ctx, &here, &name, &c.options, !networks.is_empty())?;
            if let Some(t) = volumes
                .iter()
                .find(|v| run_options.tmpfs.contains_key(&v.target))
            {
                return Err(ctx.reject(
                    &ctx.at(&here, &[f("tmpfs")]),
                    format!(
                        "container {name}: {} is a volume's target and a tmpfs",
                        t.target
                    ),
                    "this tmpfs",
                ));
            }
            run_options.check_printable().map_err(|e| {
                ctx.reject(&here, format!("container {name}: {e}"), "this container")
            })?;
            let healthcheck = match &c.healthcheck {
                None => None,
                Some(h) => {
                    let duration = |field: &'static str, text: &Option<String>| {
                        text.as_deref()
                            .map(|t| {
                                mesh_lib::model::parse_duration(t).map_err(|e| {
                                    ctx.reject(
                                        &ctx.at(&here, &[f("healthcheck"), f(field)]),
                                        format!("container {name}: healthcheck {field}: {e}"),
                                        "this duration",
                                    )
                                })
                            })
                            .transpose()
                    };
                    let retries = match h.retries {
                        None => None,
                        Some(r) => Some(u32::try_from(r).ok().filter(|r| *r <= 1000).ok_or_else(
                            || {
                                ctx.reject(
                                    &ctx.at(&here, &[f("healthcheck"), f("retries")]),
                                    format!(
                                        "container {name}: healthcheck retries {r} is not 0 to 1000"
                                    ),
                                    "this value",
                                )
                            },
                        )?),
                    };
                    let test_ok = match h.test.first().map(String::as_str) {
                        None => true,
                        Some("NONE") => h.test.len() == 1,
                        Some("CMD") => h.test.len() > 1,
                        Some("CMD-SHELL") => h.test.len() == 2,
                        Some(_) => false,
                    };
                    if !test_ok {
                        return Err(ctx.reject(
                            &ctx.at(&here, &[f("healthcheck"), f("test")]),
                            format!(
                                "container {name}: a healthcheck test is [\"CMD\", ARG…], [\"CMD-SHELL\", COMMAND] or [\"NONE\"]"
                            ),
                            "this test",
                        ));
                    }
                    Some(Healthcheck {
                        test: h.test.clone(),
                        interval: duration("interval", &h.interval)?,
                        timeout: duration("timeout", &h.timeout)?,
                        retries,
                        start_period: duration("start_period", &h.start_period)?,
                    })
                }
            };
            // A pinned image is held with its digest; a tag alone is kept as declared.
            let digest = if c.image.contains('@') {
                ImageRef::parse(&c.image)
                    .map_err(|e| {
                        ctx.reject(
                            &ctx.at(&here, &[f("image")]),
                            format!("container {name}: {e}"),
                            "this image",
                        )
                    })?
                    .digest()
                    .cloned()
            } else {
                None
            };
            let state = if taken {
                ContainerState::Managed
            } else {
                match record.found.containers.get(&name) {
                    Some(found) => ContainerState::Held {
                        original: found.spec,
                    },
                    None => ContainerState::Staged,
                }
            };
            // What `mesh show` prints of a container reads as what it is.
            let mut printed: Vec<(&str, &str, Pointer)> =
                vec![("image", &c.image, ctx.at(&here, &[f("image")]))];
            for (i, a) in c.command.iter().enumerate() {
                printed.push((
                    "command argument",
                    a,
                    ctx.at(&here, &[f("command"), Step::Index(i)]),
                ));
            }
            for k in c.environment.keys() {
                printed.push((
                    "environment variable",
                    k,
                    ctx.at(&here, &[f("environment"), named(k)]),
                ));
            }
            for k in c.secret_environment.keys() {
                printed.push((
                    "environment variable",
                    k,
                    ctx.at(&here, &[f("secret_environment"), named(k)]),
                ));
            }
            for k in c.labels.keys() {
                printed.push(("label", k, ctx.at(&here, &[f("labels"), named(k)])));
            }
            for (vi, v) in c.volumes.iter().enumerate() {
                let v_at = ctx.at(&here, &[f("volumes"), Step::Index(vi)]);
                printed.push(("volume source", &v.source, ctx.at(&v_at, &[f("source")])));
                printed.push(("volume target", &v.target, ctx.at(&v_at, &[f("target")])));
            }
            for (ni, n) in c.networks.iter().enumerate() {
                let n_at = ctx.at(&here, &[f("networks"), Step::Index(ni)]);
                printed.push(("network", &n.name, ctx.at(&n_at, &[f("name")])));
                for (ai, a) in n.aliases.iter().enumerate() {
                    printed.push((
                        "network alias",
                        a,
                        ctx.at(&n_at, &[f("aliases"), Step::Index(ai)]),
                    ));
                }
            }
            for (ti, a) in c.healthcheck.iter().flat_map(|h| h.test.iter().enumerate()) {
                printed.push((
                    "healthcheck argument",
                    a,
                    ctx.at(&here, &[f("healthcheck"), f("test"), Step::Index(ti)]),
                ));
            }
            for (what, text, pointer) in printed {
                check_printable(what, text).map_err(|e| {
                    ctx.reject(&pointer, format!("container {name}: {e}"), "this value")
                })?;
            }
            let entry = ContainerEntry {
                module: module.clone(),
                image: c.image.clone(),
                digest,
                command: c.command.clone(),
                environment: c.environment.clone(),
                secret_environment,
                ports,
                volumes,
                labels: c.labels.clone(),
                stop_timeout,
                restart: c.restart.clone().filter(|r| r != "no"),
                networks,
                healthcheck,
                options: run_options,
                accept_gaps: {
                    let mut g = c.options.accept_gaps.clone().unwrap_or_default();
                    g.sort();
                    g.dedup();
                    g
                },
                state,
            };
            if let Some((first, first_at)) = containers.get(&name) {
                let mut d = ctx.reject(
                    &ctx.at(&here, &[f("name")]),
                    format!(
                        "container {name} is declared by modules {} and {module}",
                        first.module
                    ),
                    &format!("declared by {module}"),
                );
                if let Some(span) = ctx.span(
                    &ctx.at(first_at, &[f("name")]),
                    &format!("declared by {}", first.module),
                ) {
                    d = d.with_span(span);
                }
                return Err(d);
            }
            containers.insert(name, (entry, here));
        }

        for (oi, o) in m.openings.iter().enumerate() {
            let here = ctx.at(&base, &[f("openings"), Step::Index(oi)]);
            let port = setting_port(ctx, settings, &ctx.at(&here, &[f("port")]), o.port, || {
                format!("module {module} opens port")
            })?;
            let from = match o.from.as_str() {
                "anywhere" => From::Anywhere,
                "private" => From::Private,
                cidr => From::Range(cidr.parse::<Ipv4Net>().map_err(|_| {
                    ctx.reject(
                        &ctx.at(&here, &[f("from")]),
                        format!("module {module}: `{cidr}` is not \"anywhere\", \"private\" or an IPv4 range"),
                        "this source",
                    )
                })?),
            };
            if o.paths.is_empty() {
                return Err(ctx.reject(
                    &ctx.at(&here, &[f("paths")]),
                    format!(
                        "module {module}: an opening needs at least one path (incoming, forwarded)"
                    ),
                    "no path",
                ));
            }
            openings.push(Opening {
                module: module.to_string(),
                setting: settings
                    .setting_of(port)
                    .expect("checked to be a setting")
                    .to_owned(),
                port,
                protocol: o.protocol,
                paths: o.paths.iter().copied().collect(),
                from,
            });
        }
        Ok(())
    }

    /// The blobs of the modules added so far.
    pub(crate) fn blobs(&self) -> impl Iterator<Item = &NewBlob> {
        self.blobs.values()
    }

    /// The generation, once every module is added.
    pub(crate) fn finish(self) -> Result<Assembled, MeshDiagnostic> {
        let Assembly {
            ctx,
            node_name,
            record,
            record_name,
            settings,
            modules,
            files,
            unit_files,
            units,
            blobs,
            containers,
            mut openings,
            mounts,
            ..
        } = self;
        for taken in &record.taken {
            if !modules.contains_key(taken) {
                return Err(MeshDiagnostic::new(format!(
                    "{record_name} takes module {taken}, which is not assigned to node {node_name}"
                ))
                .with_help(format!(
                    "assign {taken} in the declaration, or remove it from the record's `taken`"
                )));
            }
        }
        // A container may mount the files the node declares, and their folders, wherever
        // they are.
        if !mounts.is_empty() {
            let declared: BTreeSet<&str> = files
                .keys()
                .filter(|p| !unit_files.contains(*p))
                .map(|p| p.as_str())
                .collect();
            for Mount {
                container: name,
                source,
                host_access,
                at,
            } in &mounts
            {
                match mesh_lib::path::host_mount(source, &declared) {
                    Some(HostMount::StateDir) => {
                        return Err(ctx.reject(
                            at,
                            format!(
                                "container {name}: volume source `{source}` reaches the mesh's state directory ({})",
                                mesh_lib::path::STORE_ROOT
                            ),
                            "this source",
                        ))
                    }
                    Some(HostMount::Host(what)) if !host_access => {
                        return Err(ctx
                            .reject(
                                at,
                                format!("container {name}: volume source `{source}` hands the container {what}"),
                                "this source",
                            )
                            .with_help(
                                "if the container must have it, say so on the volume: `host_access = true`",
                            ))
                    }
                    _ => {}
                }
            }
        }
        openings.sort();
        openings.dedup();

        let mode = record.mode;
        let firewall = FirewallRules {
            guard: guard_ruleset(&settings),
            base: (mode == Mode::Managed).then(|| base_ruleset(&settings, &openings)),
        };
        let generation = Generation {
            format: FORMAT_VERSION,
            node: node_name,
            mode,
            settings,
            modules,
            files: files.into_iter().map(|(p, (e, _))| (p, e)).collect(),
            containers: containers.into_iter().map(|(n, (e, _))| (n, e)).collect(),
            openings,
            firewall,
            units: units.into_iter().map(|(n, (e, _))| (n, e)).collect(),
        };
        Ok(Assembled {
            generation,
            blobs: blobs.into_values().collect(),
        })
    }
}

/// A file to add to the generation: a module's file or a unit's file.
struct Declared<'a> {
    path: TargetPath,
    content: &'a str,
    /// For a file made from secrets, how (its ciphertexts' hashes are filled in once read:
    /// [`crate::secrets::resolve`]).
    secret: Option<SecretContent>,
    mode: FileMode,
    owner: &'a str,
    group: &'a str,
    units: Vec<UnitTrigger>,
    /// Whether the declaration asked for a special mode.
    special_mode: bool,
    /// Where the declaration names the path (for a collision's span).
    named_at: Pointer,
}

/// Adds a declared file, its state from the record, refusing a path another module declares.
fn add_file(
    ctx: &Ctx<'_>,
    files: &mut BTreeMap<TargetPath, (FileEntry, Pointer)>,
    blobs: &mut BTreeMap<BlobHash, NewBlob>,
    record: &NodeRecord,
    module: &ModuleName,
    taken: bool,
    d: Declared<'_>,
) -> Result<(), MeshDiagnostic> {
    let path = d.path;
    if let Some((first, first_at)) = files.get(&path) {
        let mut e = ctx.reject(
            &d.named_at,
            format!(
                "{path} is declared by modules {} and {module}",
                first.module
            ),
            &format!("declared by {module}"),
        );
        if let Some(span) = ctx.span(first_at, &format!("declared by {}", first.module)) {
            e = e.with_span(span);
        }
        return Err(e);
    }
    let bytes = d.content.as_bytes();
    let hash = BlobHash::of(bytes);
    // A template of secrets is kept private whatever the file's mode.
    let private = !d.mode.world_readable() || d.secret.is_some();
    if !matches!(d.secret, Some(SecretContent::Whole(_))) {
        blobs
            .entry(hash)
            .and_modify(|b| b.private |= private)
            .or_insert_with(|| NewBlob {
                hash,
                bytes: bytes.to_vec(),
                private,
            });
    }
    let state = if taken {
        FileState::Managed
    } else {
        match record.found.files.get(&path) {
            Some(found) => FileState::Held {
                original: found.hash,
            },
            None => FileState::Staged,
        }
    };
    let entry = FileEntry {
        module: module.clone(),
        blob: hash,
        size: bytes.len() as u64,
        mode: d.mode,
        owner: d.owner.to_owned(),
        group: d.group.to_owned(),
        special_mode: d.special_mode,
        secret: d.secret,
        state,
        units: d.units,
    };
    files.insert(path, (entry, d.named_at));
    Ok(())
}

/// A file's content: its text, and how it is made from secrets if it is. A file gives
/// `content` or `secret`; a template's `{{secret.NAME}}` placeholders and its `secrets` name
/// the same secrets.
fn file_content<'f>(
    ctx: &Ctx<'_>,
    here: &[Step],
    module: &ModuleName,
    path: &str,
    file: &'f FileOut,
) -> Result<(&'f str, Option<SecretContent>), MeshDiagnostic> {
    let pending = |name: &str, at: &[Step]| -> Result<SecretRef, MeshDiagnostic> {
        mesh_lib::secret::check_file(name)
            .map_err(|e| ctx.reject(at, format!("module {module}, {path}: {e}"), "this secret"))?;
        Ok(SecretRef {
            // Filled in once the ciphertext is read.
            ciphertext: BlobHash::of(b""),
            file: name.to_owned(),
            recipients: Vec::new(),
        })
    };
    match (&file.content, &file.secret) {
        (Some(_), Some(_)) => Err(ctx.reject(
            &ctx.at(here, &[f("secret")]),
            format!("module {module}, {path}: a file gives `content` or `secret`, not both"),
            "this secret",
        )),
        (None, None) => Err(ctx.reject(
            &ctx.at(here, &[f("path")]),
            format!("module {module}, {path}: the file has no content: give `content` or `secret`"),
            "this file",
        )),
        (None, Some(secret)) => {
            if !file.secrets.is_empty() {
                return Err(ctx.reject(
                    &ctx.at(here, &[f("secrets")]),
                    format!("module {module}, {path}: `secrets` fill a template's `content`; a file that is one `secret` has none"),
                    "these secrets",
                ));
            }
            let r = pending(secret, &ctx.at(here, &[f("secret")]))?;
            Ok(("", Some(SecretContent::Whole(r))))
        }
        (Some(content), None) => {
            let used = mesh_lib::secret::placeholders(content);
            let given: BTreeSet<String> = file.secrets.keys().cloned().collect();
            if let Some(name) = used.difference(&given).next() {
                return Err(ctx.reject(
                    &ctx.at(here, &[f("content")]),
                    format!("module {module}, {path}: the content uses {{{{secret.{name}}}}}, which the file's `secrets` does not name"),
                    "this content",
                ).with_help(format!("say which secret file it is: `secrets = {{ {name} = \"secrets/….age\" }}`")));
            }
            if let Some(name) = given.difference(&used).next() {
                return Err(ctx.reject(
                    &ctx.at(here, &[f("secrets"), named(name)]),
                    format!("module {module}, {path}: secret `{name}` is not used by the content (no {{{{secret.{name}}}}})"),
                    "this secret",
                ));
            }
            if file.secrets.is_empty() {
                return Ok((content, None));
            }
            let mut refs = BTreeMap::new();
            for (name, secret) in &file.secrets {
                let at = ctx.at(here, &[f("secrets"), named(name)]);
                refs.insert(name.clone(), pending(secret, &at)?);
            }
            Ok((content, Some(SecretContent::Template(refs))))
        }
    }
}

/// The units a file says it configures, sorted; a unit named to be both reloaded and restarted
/// is refused.
fn triggers(
    ctx: &Ctx<'_>,
    here: &[Step],
    module: &ModuleName,
    path: &TargetPath,
    file: &FileOut,
) -> Result<Vec<UnitTrigger>, MeshDiagnostic> {
    let mut out: BTreeMap<UnitName, (PickUp, Pointer)> = BTreeMap::new();
    for (field, how, names) in [
        ("reloads", PickUp::Reload, &file.reloads),
        ("restarts", PickUp::Restart, &file.restarts),
    ] {
        for (i, n) in names.iter().enumerate() {
            let named_at = ctx.at(here, &[f(field), Step::Index(i)]);
            let unit = UnitName::new(n).map_err(|e| {
                ctx.reject(
                    &named_at,
                    format!("module {module}, {path}: {e}"),
                    "this unit",
                )
            })?;
            if let Some((other, other_at)) = out.get(&unit) {
                if *other != how {
                    let mut d = ctx.reject(
                        &named_at,
                        format!("{path} says unit {unit} both reloads and restarts: say one"),
                        &format!("{}s here", how.word()),
                    );
                    if let Some(span) = ctx.span(other_at, &format!("{}s here", other.word())) {
                        d = d.with_span(span);
                    }
                    return Err(d);
                }
            }
            out.insert(unit, (how, named_at));
        }
    }
    Ok(out
        .into_iter()
        .map(|(unit, (how, _))| UnitTrigger { unit, how })
        .collect())
}

fn settings(ctx: &Ctx<'_>, s: &SettingsOut) -> Result<Settings, MeshDiagnostic> {
    let mut ports = BTreeMap::new();
    for (name, n) in &s.ports {
        let here = [f("settings"), f("ports"), named(name)];
        check_setting_name(name).map_err(|e| ctx.reject(&here, e, "this setting"))?;
        let port = Port::new(*n)
            .map_err(|e| ctx.reject(&here, format!("setting ports.{name}: {e}"), "this port"))?;
        ports.insert(name.clone(), port);
    }
    for required in FOUNDATION_PORTS {
        if !ports.contains_key(required) {
            return Err(ctx.reject(
                &[f("settings"), f("ports")],
                format!("the settings give no port for the foundation's {required}"),
                "these ports",
            ));
        }
    }
    let net_at = [f("settings"), f("private_network")];
    let range: Ipv4Net = s.private_network.range.parse().map_err(|_| {
        ctx.reject(
            &ctx.at(&net_at, &[f("range")]),
            format!(
                "private_network.range `{}` is not an IPv4 range like 10.77.0.0/24",
                s.private_network.range
            ),
            "this range",
        )
    })?;
    let address: Ipv4Addr = s.private_network.address.parse().map_err(|_| {
        ctx.reject(
            &ctx.at(&net_at, &[f("address")]),
            format!(
                "private_network.address `{}` is not an IPv4 address",
                s.private_network.address
            ),
            "this address",
        )
    })?;
    if !range.contains(&address) {
        return Err(ctx.reject(
            &ctx.at(&net_at, &[f("address")]),
            format!(
                "private_network.address {address} is not in the private network's range {range}"
            ),
            "outside the range",
        ));
    }
    Ok(Settings {
        ports,
        private_network: PrivateNetwork {
            range: range.trunc(),
            address,
            hub: s.private_network.hub,
        },
    })
}

/// A port used by a module must be one of the settings' values: a port is written once.
fn setting_port(
    ctx: &Ctx<'_>,
    settings: &Settings,
    here: &[Step],
    n: i64,
    what: impl Fn() -> String,
) -> Result<Port, MeshDiagnostic> {
    let port =
        Port::new(n).map_err(|e| ctx.reject(here, format!("{}: {e}", what()), "this port"))?;
    if settings.setting_of(port).is_none() {
        return Err(ctx
            .reject(here, format!("{} {port}, which is not a setting", what()), "not a setting")
            .with_help("add the port to the node's settings.ports and read it from there (settings.ports.NAME)"));
    }
    Ok(port)
}

/// Two published ports collide when they bind the same port and protocol on the same address,
/// or on any address when one of them binds every interface.
fn collides(a: &PublishedPort, b: &PublishedPort) -> bool {
    a.host_port == b.host_port
        && a.protocol == b.protocol
        && (a.host_ip == b.host_ip || a.host_ip.is_unspecified() || b.host_ip.is_unspecified())
}

/// The bus, the registry and the hub's port stay open to anywhere: a node enrols before it has a
/// private address.
fn foundation_openings(settings: &Settings) -> Vec<Opening> {
    [
        ("bus", Protocol::Tcp),
        ("registry", Protocol::Tcp),
        ("hub", Protocol::Udp),
    ]
    .into_iter()
    .map(|(setting, protocol)| Opening {
        module: "foundation".into(),
        setting: setting.into(),
        port: settings.ports[setting],
        protocol,
        paths: BTreeSet::from([TrafficPath::Incoming, TrafficPath::Forwarded]),
        from: From::Anywhere,
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SettingsOut {
        serde_json::from_value(serde_json::json!({
            "ports": { "store": 5432, "bus": 4222, "registry": 5000, "broker_management": 15672,
                       "hub": 51820, "web": 80, "app": 8080 },
            "private_network": { "range": "10.77.0.0/24", "address": "10.77.0.5", "hub": false },
        }))
        .unwrap()
    }

    fn file(path: &str, content: &str) -> serde_json::Value {
        serde_json::json!({ "path": path, "content": content, "mode": "0644", "owner": "root",
            "group": "root", "reloads": [], "restarts": [], "special_mode": false })
    }

    fn container(name: &str, mount: &str) -> serde_json::Value {
        serde_json::json!({ "name": name, "image": "example/app:1", "command": [],
            "environment": {}, "labels": {},
            "publish": [{ "host_port": 8080, "container_port": 80, "protocol": "tcp",
                          "host_ip": "0.0.0.0" }],
            "volumes": [{ "source": mount, "target": "/config", "read_only": true }] })
    }

    /// Three modules: a container mounting a folder a later module's file is in, files, a
    /// unit, openings.
    fn modules(mount: &str) -> Vec<ModuleOut> {
        let unit = serde_json::json!({ "name": "web.service", "text": "[Service]\nExecStart=/bin/true\n",
            "enabled": true, "started": true, "on_change": "restart" });
        let opening = |port| {
            serde_json::json!({ "port": port, "protocol": "tcp",
            "paths": ["incoming"], "from": "anywhere" })
        };
        [
            serde_json::json!({ "name": "app", "files": [file("/etc/app/a.conf", "a")],
                "containers": [container("app", mount)], "openings": [opening(8080)], "units": [] }),
            serde_json::json!({ "name": "caddy", "files": [file("/etc/caddy/Caddyfile", "c"),
                file("/etc/caddy/extra", "a")], "containers": [], "openings": [opening(80)],
                "units": [] }),
            serde_json::json!({ "name": "web", "files": [], "containers": [], "openings": [],
                "units": [unit] }),
        ]
        .into_iter()
        .map(|m| serde_json::from_value(m).unwrap())
        .collect()
    }

    fn in_order(modules: &[ModuleOut], order: &[usize]) -> Result<Assembled, MeshDiagnostic> {
        let mut a = Assembly::new("n", &settings(), None, None)?;
        for &i in order {
            a.add(i, &modules[i])?;
        }
        a.finish()
    }

    /// What the per-module build relies on: the modules added in any order give the same
    /// generation, byte for byte, and the same blobs; a container may mount the folder of a
    /// file a module added after it declares.
    #[test]
    fn the_order_modules_are_added_in_changes_nothing() {
        let modules = modules("/etc/caddy");
        let first = in_order(&modules, &[0, 1, 2]).unwrap();
        for order in [[2, 1, 0], [1, 0, 2], [2, 0, 1]] {
            let other = in_order(&modules, &order).unwrap();
            assert_eq!(
                first.generation.canonical_bytes().unwrap(),
                other.generation.canonical_bytes().unwrap(),
                "{order:?}"
            );
            let hashes = |a: &Assembled| a.blobs.iter().map(|b| b.hash).collect::<Vec<_>>();
            assert_eq!(hashes(&first), hashes(&other), "{order:?}");
        }
        assert_eq!(
            first.generation.files.len(),
            4,
            "three files and the unit's"
        );
    }

    /// A container's image pinned by digest is held with its digest, so the id follows the
    /// digest; a tag alone adds nothing to the encoding (ids built before digests hold); a
    /// malformed digest is refused at the image's value.
    #[test]
    fn a_pinned_image_is_held_with_its_digest() {
        let digest = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        let build = |image: &str| {
            let mut m = modules("/etc/caddy");
            m[0].containers[0].image = image.to_owned();
            in_order(&m, &[0, 1, 2])
        };
        let tagged = build("example/app:1").unwrap();
        let bytes = tagged.generation.canonical_bytes().unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("\"digest\""));
        let a = build(&format!("example/app:1@{}", digest('a'))).unwrap();
        let held = &a.generation.containers.values().next().unwrap().digest;
        assert_eq!(held.as_ref().map(ToString::to_string), Some(digest('a')));
        let b = build(&format!("example/app:1@{}", digest('b'))).unwrap();
        assert_ne!(
            a.generation.canonical_bytes().unwrap(),
            b.generation.canonical_bytes().unwrap()
        );
        let untagged = build(&format!("example/app@{}", digest('a'))).unwrap();
        assert!(untagged.generation.containers.values().all(|c| c
            .digest
            .as_ref()
            .map(ToString::to_string)
            == Some(digest('a'))));
        for bad in [
            "example/app:1@sha256:abc",
            "example/app@md5:00",
            "Example/App@",
        ] {
            let e = build(bad).unwrap_err();
            assert!(
                e.message.contains("container app: image") && e.message.contains(bad),
                "{bad}: {}",
                e.message
            );
        }
    }

    /// The checks that need every module are made at the end, whatever the order: a mount
    /// of the state directory, or of a host folder no module declares a file in, is refused;
    /// a module the record takes but the declaration does not assign is refused.
    #[test]
    fn the_checks_of_every_module_are_made_at_the_end() {
        for (mount, says) in [
            ("/var/lib/mesh", "reaches the mesh's state directory"),
            ("/etc/app2", "hands the container"),
        ] {
            let modules = modules(mount);
            for order in [[0, 1, 2], [2, 1, 0]] {
                let e = in_order(&modules, &order).unwrap_err();
                assert!(e.message.contains(says), "{mount} {order:?}: {}", e.message);
            }
        }
        // A unit's file is not a declared file a container may mount the folder of.
        let e = in_order(&modules("/etc/systemd/system"), &[0, 1, 2]).unwrap_err();
        assert!(e.message.contains("hands the container"), "{}", e.message);

        let record = NodeRecord {
            taken: [ModuleName::new("gone").unwrap()].into_iter().collect(),
            ..NodeRecord::managed(NodeName::new("n").unwrap())
        };
        let source = RecordSource {
            record: &record,
            name: "the record".into(),
        };
        let modules = modules("/etc/caddy");
        let mut a = Assembly::new("n", &settings(), None, Some(&source)).unwrap();
        for (i, m) in modules.iter().enumerate() {
            a.add(i, m).unwrap();
        }
        let e = a.finish().unwrap_err();
        assert!(
            e.message
                .contains("takes module gone, which is not assigned"),
            "{}",
            e.message
        );
    }
}
