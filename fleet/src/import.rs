//! `mesh import`'s writing side: from what a node runs (its containers as `docker inspect`
//! says, its files at given paths) to the Nickel of a fleet — a catalogue module per container
//! (or per compose project), a files module, and the node's declaration assigning them, with
//! every published host port a setting written once, in the node's declaration.
//!
//! Pure: it returns the files to write; [`write`] writes them, refusing to write over one that
//! is there unless forced. Invariants: a value that looks like a credential is never written
//! (its module reads it from the node's credentials file, which holds only its name and
//! contract); every choice made is a comment (`# from docker inspect: …`); nothing that a
//! declaration cannot say is dropped silently — it is a comment in the module and a gap in the
//! result.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use mesh_lib::import::{looks_like_credential, FoundOpening, Gap, LiveContainer};
use mesh_lib::model::{Protocol, TrafficPath};
use mesh_lib::secret::Rules;
use serde::{Deserialize, Serialize};

use crate::file::{Fleet, Node};
use crate::ssh::Link;

mod options;

/// A file read at a path given to `mesh import`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileToImport {
    /// Its absolute path on the node.
    pub path: String,
    /// Its content (base64 in JSON).
    #[serde(with = "base64_bytes")]
    pub content: Vec<u8>,
    /// Its mode, four octal digits.
    pub mode: String,
    /// Owner's name.
    pub owner: String,
    /// Group's name.
    pub group: String,
}

/// Bytes as base64 text, for JSON.
mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

/// What `mesh import` found on a node, before any Nickel is written: what `mesh import
/// --found-json` prints there, and `mesh fleet import` reads over SSH to write into the fleet's
/// tree beside the catalogue it has.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Found {
    /// The node's name.
    pub node: String,
    /// Its containers, as `docker inspect` says them.
    pub containers: Vec<LiveContainer>,
    /// Its files read.
    pub files: Vec<FileToImport>,
    /// The ports someone outside reaches through the firewall in force.
    pub openings: Vec<FoundOpening>,
    /// Compose projects' files passed over.
    pub skipped: Vec<Skipped>,
    /// What files could not be imported as they are, by path (one over the size limit).
    #[serde(default)]
    pub gaps: BTreeMap<String, Vec<Gap>>,
}

/// A compose project's file an import passed over, and why (not under the root, gone, not a
/// compose file's YAML).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Skipped {
    /// Its path on the node.
    pub path: String,
    /// Why.
    pub why: String,
}

/// Why a node's import over SSH failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// No connection, or it dropped.
    #[error(transparent)]
    Ssh(#[from] crate::ssh::SshError),
    /// The node's `mesh import` refused or failed (its exit code and what it said).
    #[error("mesh import on {node} exited {code}: {message}")]
    Refused {
        /// The node.
        node: String,
        /// Its exit code (`None`: killed).
        code: String,
        /// Its stderr.
        message: String,
    },
    /// It answered something else than what was found.
    #[error("mesh import on {node} answered what is not a found node's JSON: {message}")]
    Answer {
        /// The node.
        node: String,
        /// Why.
        message: String,
    },
}

/// What `node` runs, read over SSH as `mesh fleet status` reaches it: the node's own `mesh
/// import --found-json` with `args` (its selection: `--container`, `--compose`, `--file`, …),
/// which changes nothing there.
pub fn fetch(fleet: &Fleet, node: &Node, args: &[String]) -> Result<Found, FetchError> {
    let mut link = Link::open(fleet, node)?;
    let mut argv = vec!["import", "--found-json", "--node", node.name.as_str()];
    argv.extend(args.iter().map(String::as_str));
    let ran = link.mesh(&argv, None);
    link.close();
    let ran = ran?;
    if !ran.ok() {
        return Err(FetchError::Refused {
            node: node.name.to_string(),
            code: ran.code.map_or("(killed)".to_owned(), |c| c.to_string()),
            message: ran.stderr.trim().to_owned(),
        });
    }
    let last = ran
        .stdout
        .split(|b| *b == b'\n')
        .rfind(|l| !l.is_empty())
        .unwrap_or_default();
    let found: Found = serde_json::from_slice(last).map_err(|e| FetchError::Answer {
        node: node.name.to_string(),
        message: e.to_string(),
    })?;
    // Its name names the files written here: the fleet file's, never what the node says.
    if found.node != node.name.as_str() {
        return Err(FetchError::Answer {
            node: node.name.to_string(),
            message: format!(
                "it answered for the node `{}`",
                mesh_lib::text::escape(&found.node)
            ),
        });
    }
    Ok(found)
}

/// A value not written in clear: to be supplied (`mesh secret edit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Credential {
    /// The container, or the file's path.
    pub item: String,
    /// The environment variable (none for a whole file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variable: Option<String>,
    /// `by name` or `by entropy` (or `a line of the file` for a file).
    pub why: String,
    /// Where its value is to be supplied.
    pub supply_in: String,
}

/// What an import writes, and what it could not.
#[derive(Debug, Default, Serialize)]
pub struct Imported {
    /// Each file to write, relative to the output folder, and its text.
    #[serde(skip)]
    pub files: Vec<(PathBuf, Vec<u8>)>,
    /// The modules written, by name.
    pub modules: Vec<String>,
    /// The port settings, by name.
    pub ports: BTreeMap<String, u16>,
    /// Modules of the catalogue this node shares: already there, saying the same.
    pub shared: Vec<String>,
    /// Modules named after the node because the catalogue's module of the name says another
    /// thing (another node runs it otherwise): the name, and why.
    pub renamed: BTreeMap<String, String>,
    /// Modules several nodes run alike but for names, environment and label values, which each
    /// node's declaration passes (`values`).
    pub parametrized: Vec<String>,
    /// The credentials not written.
    pub credentials: Vec<Credential>,
    /// The files' contents written encrypted (`secrets.ncl` names their readers).
    pub secrets: Vec<WrittenSecret>,
    /// Secret files already in the fleet's tree, kept as they are (a ciphertext cannot be
    /// compared with what the node holds here: `mesh import --check` on the node does).
    pub kept: Vec<String>,
    /// What a declaration cannot say, per container.
    pub gaps: BTreeMap<String, Vec<Gap>>,
    /// The node's private network as its declaration gives it, and why (set by whoever
    /// places the node in its fleet's tree).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_network: Option<crate::check::Placed>,
}

/// The foundation's ports, as `mesh init` writes them: no import finds them.
const FOUNDATION: [(&str, u16); 5] = [
    ("store", 5432),
    ("bus", 4222),
    ("registry", 5000),
    ("broker_management", 15672),
    ("hub", 51820),
];

/// A Nickel string literal of `s`.
pub fn string(s: &str) -> String {
    let mut out = String::from("\"");
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '%' if chars.peek() == Some(&'{') => out.push_str("\\%"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A record field's name: bare when it is a Nickel identifier, quoted otherwise.
pub fn field(name: &str) -> String {
    let mut chars = name.chars();
    let ident = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    // Nickel's keywords and type names: quoted, always valid, rather than guessed right.
    const KEYWORDS: [&str; 24] = [
        "let",
        "in",
        "fun",
        "if",
        "then",
        "else",
        "match",
        "import",
        "true",
        "false",
        "null",
        "rec",
        "forall",
        "default",
        "optional",
        "force",
        "priority",
        "doc",
        "not_exported",
        "Dyn",
        "Number",
        "String",
        "Bool",
        "Array",
    ];
    if ident && !KEYWORDS.contains(&name) {
        name.to_owned()
    } else {
        string(name)
    }
}

/// A name made of lowercase letters, digits and `_`, starting with a letter.
fn slug(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert_str(0, "c_");
    }
    out
}

/// `base`, or `base_2`, `base_3`… — the first not in `taken`, which then holds it.
fn unique(taken: &mut BTreeSet<String>, base: &str) -> String {
    let mut name = base.to_owned();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    taken.insert(name.clone());
    name
}

fn list(items: &[String]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|s| string(s))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A group of containers written as one module: a compose project, or one container.
struct Group<'a> {
    module: String,
    project: Option<String>,
    containers: Vec<&'a LiveContainer>,
}

impl<'a> Group<'a> {
    /// Each container by its key in the group: its compose service when no other container
    /// of the group has it, else its name. Two nodes' containers of one key are the same
    /// thing run on each.
    fn members(&self) -> BTreeMap<String, &'a LiveContainer> {
        let service = |c: &LiveContainer| c.labels.get(COMPOSE_SERVICE).cloned();
        let mut out = BTreeMap::new();
        for c in &self.containers {
            let key = service(c)
                .filter(|s| {
                    self.containers
                        .iter()
                        .filter(|o| service(o).as_ref() == Some(s))
                        .count()
                        == 1
                })
                .unwrap_or_else(|| c.name.clone());
            out.insert(key, *c);
        }
        out
    }
}

/// The label naming a container's service in its compose project.
const COMPOSE_SERVICE: &str = "com.docker.compose.service";

/// The containers in groups: one per compose project, else one per container.
fn groups(containers: &[LiveContainer]) -> Vec<Group<'_>> {
    let mut groups: Vec<Group> = Vec::new();
    for c in containers {
        let project = c.labels.get(mesh_lib::import::COMPOSE_PROJECT).cloned();
        match project
            .as_ref()
            .and_then(|p| groups.iter_mut().find(|g| g.project.as_ref() == Some(p)))
        {
            Some(g) => g.containers.push(c),
            None => groups.push(Group {
                module: slug(project.as_deref().unwrap_or(&c.name)),
                project,
                containers: vec![c],
            }),
        }
    }
    groups
}

/// What differs between the nodes that run a module's containers alike, per module and per
/// member ([`Group::members`]): the node's own, passed by its declaration (`values`), so that
/// one module serves them all.
pub type Varying = BTreeMap<String, BTreeMap<String, MemberVarying>>;

/// What differs of one member between the nodes: its name, environment and label values.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MemberVarying {
    /// Whether its container's name differs.
    pub name: bool,
    /// The environment variables whose values differ (none a credential).
    pub environment: BTreeSet<String>,
    /// The labels whose values differ.
    pub labels: BTreeSet<String>,
}

/// What differs between the nodes `found` of each module they run alike: the same members
/// (by key), the same environment variables and labels, only names and values otherwise (a
/// published port is a setting of each node's, named after the member) — a credential
/// stays each node's credential, and a module whose members or variables differ is left to
/// be the node's own (as without this).
pub fn varying(found: &[&Found]) -> Varying {
    let mut by_module: BTreeMap<String, Vec<BTreeMap<String, &LiveContainer>>> = BTreeMap::new();
    for f in found {
        for g in groups(&f.containers) {
            by_module
                .entry(g.module.clone())
                .or_default()
                .push(g.members());
        }
    }
    let mut out = Varying::new();
    for (module, nodes) in by_module {
        let Some((first, rest)) = nodes.split_first() else {
            continue;
        };
        if rest.is_empty() || rest.iter().any(|n| !n.keys().eq(first.keys())) {
            continue;
        }
        let mut members = BTreeMap::new();
        let mut alike = true;
        for (key, c) in first {
            let parts: Vec<mesh_lib::import::DeclaredPart> =
                nodes.iter().map(|n| n[key].declared_part()).collect();
            let envs: Vec<&BTreeMap<String, String>> =
                parts.iter().map(|p| &p.environment).collect();
            let labels: Vec<&BTreeMap<String, String>> = parts.iter().map(|p| &p.labels).collect();
            if envs.iter().any(|e| !e.keys().eq(envs[0].keys()))
                || labels.iter().any(|l| !l.keys().eq(labels[0].keys()))
            {
                alike = false;
                break;
            }
            let mut m = MemberVarying {
                name: nodes.iter().any(|n| n[key].name != c.name),
                environment: BTreeSet::new(),
                labels: labels[0]
                    .keys()
                    .filter(|k| labels.iter().any(|l| l[*k] != labels[0][*k]))
                    .cloned()
                    .collect(),
            };
            for var in envs[0].keys() {
                let values: BTreeSet<&String> = envs.iter().map(|e| &e[var]).collect();
                let credential = values
                    .iter()
                    .any(|v| looks_like_credential(var, v).is_some());
                if values.len() > 1 && !credential {
                    m.environment.insert(var.clone());
                }
            }
            if m != MemberVarying::default() {
                members.insert(key.clone(), m);
            }
        }
        if alike && !members.is_empty() {
            out.insert(module, members);
        }
    }
    out
}

/// What a module's text (as [`render_group`] writes it) reads from `values`, per member: none
/// when it is no function of `values`.
fn reads_values(text: &str) -> Option<BTreeMap<String, MemberVarying>> {
    if !text.contains("fun values =>") && !text.contains("fun credentials values =>") {
        return None;
    }
    let mut out: BTreeMap<String, MemberVarying> = BTreeMap::new();
    let mut rest = text;
    while let Some(at) = rest.find("values.") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "values.".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        let Some((key, after)) = field_token(rest) else {
            continue;
        };
        if after.starts_with(".name") {
            out.entry(key).or_default().name = true;
        } else if let Some(var) = after.strip_prefix(".environment.") {
            if let Some((var, _)) = field_token(var) {
                out.entry(key).or_default().environment.insert(var);
            }
        } else if let Some(label) = after.strip_prefix(".labels.") {
            if let Some((label, _)) = field_token(label) {
                out.entry(key).or_default().labels.insert(label);
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// A record field's name at the start of `text` as [`field`] writes it (bare, or a string
/// literal as [`string`] writes it), and the text after it.
fn field_token(text: &str) -> Option<(String, &str)> {
    if let Some(quoted) = text.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => return Some((out, &quoted[i + 1..])),
                '\\' => match chars.next()?.1 {
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    'u' => {
                        let hex: String = chars
                            .by_ref()
                            .map(|(_, c)| c)
                            .skip_while(|c| *c == '{')
                            .take_while(|c| *c != '}')
                            .collect();
                        out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    other => out.push(other),
                },
                c => out.push(c),
            }
        }
        return None;
    }
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(text.len());
    (end > 0).then(|| (text[..end].to_owned(), &text[end..]))
}

/// The node's own of a module's varying members: `{ KEY = { name = …, environment = { … } } }`.
fn values_record(g: &Group, varying: &BTreeMap<String, MemberVarying>) -> String {
    let members = g.members();
    let mut text = String::from("{ ");
    for (key, m) in varying {
        let Some(c) = members.get(key) else { continue };
        let _ = write!(text, "{} = {{ ", field(key));
        if m.name {
            let _ = write!(text, "name = {}, ", string(&c.name));
        }
        let part = c.declared_part();
        for (what, names, given) in [
            ("environment", &m.environment, &part.environment),
            ("labels", &m.labels, &part.labels),
        ] {
            if names.is_empty() {
                continue;
            }
            let _ = write!(text, "{what} = {{ ");
            for (k, value) in names.iter().filter_map(|k| Some((k, given.get(k)?))) {
                let _ = write!(text, "{} = {}, ", field(k), string(value));
            }
            text.push_str("}, ");
        }
        text.push_str("}, ");
    }
    text.push('}');
    text
}

/// What the fleet's tree an import writes into says already, that the node's Nickel is written
/// beside: its catalogue, who may read its secrets, where the node stands on its private network.
#[derive(Clone, Copy)]
pub struct Tree<'a> {
    /// The catalogue's modules.
    pub catalogue: &'a Catalogue,
    /// Who may read a secret, when the tree's `secrets.ncl` says it.
    pub secrets: Option<&'a Rules>,
    /// The node's private network, and why (see [`crate::check::place`]).
    pub placed: &'a crate::check::Placed,
}

/// The Nickel for `node`: its containers, files and the found firewall's openings (every port
/// published on the node, each with who reaches it now).
pub fn render(
    node: &str,
    containers: &[LiveContainer],
    files: &[FileToImport],
    openings: &[FoundOpening],
    tree: &Tree<'_>,
    varying: &Varying,
) -> Imported {
    let Tree {
        catalogue,
        secrets,
        placed,
    } = *tree;
    let mut out = Imported::default();
    let credentials_file = format!("nodes/{node}.credentials.ncl");
    let groups = groups(containers);
    // A module of the catalogue that is a function of `values` (a fleet import made it for
    // nodes that run it alike): a node running it alike too passes its own and shares it.
    let in_catalogue: BTreeMap<String, BTreeMap<String, MemberVarying>> = catalogue
        .iter()
        .filter_map(|(name, text)| {
            Some((name.clone(), reads_values(std::str::from_utf8(text).ok()?)?))
        })
        .collect();
    // What a group's module reads from `values` under the name `m`: what differs between the
    // nodes imported with this one, else what the catalogue's module of that name reads.
    let reads = |g: &Group, m: &str| varying.get(&g.module).or_else(|| in_catalogue.get(m));
    // A port a member of a module publishes whose container's name is the node's own (a
    // value of `values`: in what differs between the nodes imported with this one, or in a
    // module of the catalogue it may share) is named after the member, not the container: the
    // module reads the same setting on every node that runs it.
    let name_varies = |g: &Group, key: &str| {
        let reads_name = |r: &BTreeMap<String, MemberVarying>| r.get(key).is_some_and(|m| m.name);
        let own = format!("{}_", g.module);
        varying.get(&g.module).is_some_and(reads_name)
            || in_catalogue
                .iter()
                .filter(|(n, _)| **n == g.module || n.starts_with(&own))
                .any(|(_, r)| reads_name(r))
    };
    let stem_of: BTreeMap<&str, String> = groups
        .iter()
        .flat_map(|g| {
            g.members()
                .into_iter()
                .filter(|(k, _)| name_varies(g, k))
                .map(|(k, c)| (c.name.as_str(), format!("{}_{k}", g.module)))
                .collect::<Vec<_>>()
        })
        .collect();
    // The port settings: one per published host port, named after its container.
    let mut taken: BTreeSet<String> = FOUNDATION.iter().map(|(n, _)| (*n).to_owned()).collect();
    taken.insert("files".into());
    let mut setting_of: BTreeMap<(String, u16), String> = BTreeMap::new();
    let mut port_comments: BTreeMap<String, String> = BTreeMap::new();
    for c in containers {
        let host_ports: BTreeSet<u16> = c.ports.iter().map(|p| p.host_port).collect();
        for port in &host_ports {
            if let Some(existing) = out.ports.iter().find(|(_, v)| *v == port) {
                // The same number published twice (two containers, or tcp and udp): one setting.
                setting_of.insert((c.name.clone(), *port), existing.0.clone());
                continue;
            }
            let stem = stem_of.get(c.name.as_str()).unwrap_or(&c.name);
            let base = if host_ports.len() == 1 {
                slug(stem)
            } else {
                let inside = c
                    .ports
                    .iter()
                    .find(|p| p.host_port == *port)
                    .map_or(*port, |p| p.container_port);
                format!("{}_{inside}", slug(stem))
            };
            let name = unique(&mut taken, &base);
            let published: Vec<String> = c
                .ports
                .iter()
                .filter(|p| p.host_port == *port)
                .map(|p| format!("{} -> {}/{}", p.host_ip, p.container_port, p.protocol))
                .collect();
            port_comments.insert(
                name.clone(),
                format!(
                    "from docker inspect: {} publishes it on {}",
                    c.name,
                    published.join(", ")
                ),
            );
            out.ports.insert(name.clone(), *port);
            setting_of.insert((c.name.clone(), *port), name);
        }
    }
    // The openings: those of a port an imported container publishes go into its module, with
    // its setting; the others (the node's own sockets, the predecessor's DNATs) into one module
    // of their own, each port a setting named after what listens.
    let imported: BTreeSet<&str> = containers.iter().map(|c| c.name.as_str()).collect();
    let mut opening_lines: BTreeMap<String, String> = BTreeMap::new();
    let mut host_module = "firewall".to_owned();
    while groups.iter().any(|g| g.module == host_module) {
        host_module.push('_');
    }
    let mut in_use: BTreeSet<u16> = BTreeSet::new();
    for o in openings {
        in_use.insert(o.port);
        if o.from.is_empty() && o.gaps.is_empty() {
            continue;
        }
        let owner = o.containers.iter().find(|c| {
            imported.contains(c.as_str()) && setting_of.contains_key(&((*c).clone(), o.port))
        });
        let (module, gap_key) = match owner {
            Some(c) => (
                groups
                    .iter()
                    .find(|g| g.containers.iter().any(|gc| &gc.name == c))
                    .map_or_else(|| host_module.clone(), |g| g.module.clone()),
                c.clone(),
            ),
            None => (host_module.clone(), host_module.clone()),
        };
        let text = opening_lines.entry(module).or_default();
        let _ = writeln!(
            text,
            "      # from the firewall in force: {}/{} is {} now; {}",
            o.port,
            o.protocol.as_str(),
            o.reach,
            o.held_by.join("; ")
        );
        for g in &o.gaps {
            let _ = writeln!(
                text,
                "      # NOT DECLARED ({}): {} — {}",
                g.what, g.found, g.why
            );
            out.gaps.entry(gap_key.clone()).or_default().push(Gap {
                what: format!("opening {}/{} {}", o.port, o.protocol.as_str(), g.what),
                found: g.found.clone(),
                why: g.why.clone(),
            });
        }
        if o.from.is_empty() {
            continue;
        }
        let setting = match owner {
            Some(c) => setting_of[&(c.clone(), o.port)].clone(),
            None => match out.ports.iter().find(|(_, v)| **v == o.port) {
                Some((name, _)) => name.clone(),
                None => {
                    // A process that holds several ports: each setting says which.
                    let shared = openings
                        .iter()
                        .filter(|other| other.name == o.name && !other.from.is_empty())
                        .count()
                        > 1;
                    let base = if shared {
                        format!("{}_{}", slug(&o.name), o.port)
                    } else {
                        slug(&o.name)
                    };
                    let name = unique(&mut taken, &base);
                    port_comments.insert(
                        name.clone(),
                        format!(
                            "from the firewall in force: {}",
                            mesh_lib::text::escape(&o.held_by.join("; "))
                        ),
                    );
                    out.ports.insert(name.clone(), o.port);
                    name
                }
            },
        };
        let paths: Vec<&str> = o
            .paths
            .iter()
            .map(|p| match p {
                TrafficPath::Incoming => "'incoming",
                TrafficPath::Forwarded => "'forwarded",
            })
            .collect();
        for from in &o.from {
            let _ = writeln!(
                text,
                "      {{ port = s.ports.{}{}, paths = [{}], from = {} }},",
                field(&setting),
                if o.protocol == Protocol::Udp {
                    ", protocol = 'udp"
                } else {
                    ""
                },
                paths.join(", "),
                string(from)
            );
        }
    }
    let mut found_ports: BTreeSet<u16> = out.ports.values().copied().collect();
    found_ports.extend(in_use);
    // A bind mount of a declared file, or of its folder, needs no `host_access`.
    let declared_files: BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let mut module_refs: Vec<String> = Vec::new();
    let mut credential_fields: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let openings: Vec<Option<String>> = groups
        .iter()
        .map(|g| opening_lines.remove(&g.module))
        .collect();
    // An environment's credential is written as a secret when secrets.ncl names readers of
    // the node's environment secrets, the node among them (as a file's is).
    let env_secrets = readable_by(node, &env_secret(node, "MODULE", "VAR"), secrets).is_ok();
    let contexts: Vec<GroupContext> = openings
        .iter()
        .zip(&groups)
        .map(|(o, g)| GroupContext {
            setting_of: &setting_of,
            declared_files: &declared_files,
            openings: o.as_deref(),
            varying: reads(g, &g.module),
            env_secrets,
        })
        .collect();
    // Each group's module under its own name, rendered (and formatted) on every core at once.
    let mut first = rendered_at_once(&groups, &contexts);
    for ((g, context), first) in groups.iter().zip(&contexts).zip(first.iter_mut()) {
        let (module, rendered) = shared_or_own(
            catalogue,
            &g.module,
            node,
            &mut out,
            |m| match first.take() {
                Some(done) if m == g.module => done,
                _ => render_group(
                    g,
                    m,
                    &GroupContext {
                        varying: reads(g, m),
                        ..*context
                    },
                ),
            },
            |r| r.text.as_bytes(),
        );
        let GroupText {
            text,
            creds,
            gaps,
            uses_credentials,
            parametrized,
        } = rendered;
        out.gaps.extend(gaps);
        let path = format!("catalogue/{module}.ncl");
        // A module gives a credential one value under its name: a container of it whose value
        // under the same name is another is named, not checked equal in silence.
        let value_of = |container: &str, var: &str| {
            containers
                .iter()
                .find(|c| c.name == container)
                .and_then(|c| c.environment.get(var))
        };
        let mut first_of: BTreeMap<&str, &str> = BTreeMap::new();
        for (container, var, _) in &creds {
            match first_of.get(var.as_str()) {
                None => {
                    first_of.insert(var, container);
                }
                Some(first) if value_of(first, var) != value_of(container, var) => {
                    out.gaps.entry(container.clone()).or_default().push(Gap {
                        what: format!("environment {var}"),
                        found: "(a credential)".to_owned(),
                        why: format!(
                            "{first}, of the same module {module}, has another value under this name, and the module gives both one"
                        ),
                    });
                }
                Some(_) => {}
            }
        }
        let mut arguments = String::new();
        if uses_credentials && env_secrets {
            // The secrets' files, by variable: the node's own, so its declaration names them.
            let mut named: BTreeMap<String, String> = BTreeMap::new();
            for (container, var, why) in &creds {
                if named.contains_key(var) {
                    continue;
                }
                let secret = env_secret(node, &module, var);
                let value = value_of(container, var).map_or("", String::as_str);
                let reason = format!("its value looks like a credential ({why})");
                match encrypted_value(node, &secret, value, secrets) {
                    Ok((ciphertext, readers)) => {
                        out.files.push((PathBuf::from(&secret), ciphertext));
                        out.secrets.push(WrittenSecret {
                            item: container.clone(),
                            variable: Some(var.clone()),
                            why: reason,
                            secret: secret.clone(),
                            readers,
                        });
                    }
                    Err(not) => out.credentials.push(Credential {
                        item: container.clone(),
                        variable: Some(var.clone()),
                        why: format!("{reason}; not written encrypted: {not}"),
                        supply_in: secret.clone(),
                    }),
                }
                named.insert(var.clone(), secret);
            }
            let record: Vec<String> = named
                .iter()
                .map(|(var, secret)| format!("{} = {}", field(var), string(secret)))
                .collect();
            let _ = write!(arguments, " {{ {} }}", record.join(", "));
        } else if uses_credentials {
            let _ = write!(arguments, " credentials.{}", field(&module));
        }
        if let Some(v) = &parametrized {
            let _ = write!(arguments, " {}", values_record(g, v));
            out.parametrized.push(module.clone());
        }
        if arguments.is_empty() {
            module_refs.push(format!("import \"../{path}\""));
        } else {
            module_refs.push(format!("(import \"../{path}\"){arguments}"));
        }
        for (container, var, why) in creds.into_iter().filter(|_| !env_secrets) {
            out.credentials.push(Credential {
                item: container,
                variable: Some(var.clone()),
                why: why.clone(),
                supply_in: credential_file_field(&credentials_file, &module, &var),
            });
            credential_fields
                .entry(module.clone())
                .or_default()
                .push((var, why));
        }
        out.modules.push(module);
        out.files.push((PathBuf::from(path), text.into_bytes()));
    }
    if !files.is_empty() {
        // Another node's files module, saying another thing, keeps its name and its contents.
        let (module, (text, contents, creds)) = shared_or_own(
            catalogue,
            "files",
            node,
            &mut out,
            |m| files_module(node, m, files, secrets),
            |r| r.0.as_bytes(),
        );
        out.files.extend(contents);
        for c in creds {
            match c {
                FileSecret::Supply(c) => out.credentials.push(c),
                FileSecret::Written(w) => out.secrets.push(w),
            }
        }
        module_refs.push(format!("import \"../catalogue/{module}.ncl\""));
        out.files.push((
            PathBuf::from(format!("catalogue/{module}.ncl")),
            text.into_bytes(),
        ));
        out.modules.push(module);
    }
    if let Some(lines) = opening_lines.remove(&host_module) {
        let mut text = String::new();
        let _ = writeln!(
            text,
            "# Imported by `mesh import` from the firewall in force on {node}: an opening for each port\n\
             # published on the node itself (a socket, the predecessor's DNAT) that someone outside\n\
             # reaches now, from whom it is reached now, so the flip leaves it as it is."
        );
        let _ = writeln!(
            text,
            "{{\n  name = {},\n  config = fun s => {{\n    openings = [",
            string(&host_module)
        );
        text.push_str(&lines);
        text.push_str("    ],\n  },\n}\n");
        let path = format!("catalogue/{host_module}.ncl");
        module_refs.push(format!("import \"../{path}\""));
        out.modules.push(host_module.clone());
        out.files
            .push((PathBuf::from(path), formatted(text).into_bytes()));
    }
    // The node's declaration.
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# The node {node}, as `mesh import` found it: its settings and the modules of what it runs.\n\
         # Check it against the machine with `mesh import --check nodes/{node}.ncl`; adopt it\n\
         # with `mesh adopt nodes/{node}.ncl` (every imported item is then held, in force)."
    );
    text.push_str("let mesh = import \"mesh.ncl\" in\n");
    if !credential_fields.is_empty() {
        let _ = writeln!(
            text,
            "let credentials = import {} in",
            string(&format!("{node}.credentials.ncl"))
        );
    }
    let _ = writeln!(
        text,
        "mesh.node {{\n  name = {},\n  settings = {{\n    ports = {{",
        string(node)
    );
    text.push_str(
        "      # The foundation's: not found by an import, mesh init's defaults (a number a\n\
         \x20     # container publishes is passed over); `mesh genesis` checks them free and pins them.\n",
    );
    for (name, default) in FOUNDATION {
        let mut port = default;
        while found_ports.contains(&port) {
            port += 1;
        }
        let _ = writeln!(text, "      {name} = {port},");
    }
    for (name, port) in &out.ports {
        let _ = writeln!(
            text,
            "      # {}\n      {} = {port},",
            port_comments[name],
            field(name)
        );
    }
    let network = &placed.network;
    let _ = write!(
        text,
        "    }},\n    # Not found by an import: the fleet's, an address no other node of it has, and\n\
         \x20   # the hub's role only while no other node has it (`mesh import` says why).\n\
         \x20   private_network = {{ range = \"{}\", address = \"{}\", hub = {} }},\n  }},\n  modules = [\n",
        network.range, network.address, network.hub
    );
    for m in &module_refs {
        let _ = writeln!(text, "    {m},");
    }
    text.push_str("  ],\n}\n");
    out.files.push((
        PathBuf::from(format!("nodes/{node}.ncl")),
        formatted(text).into_bytes(),
    ));
    if !credential_fields.is_empty() {
        let mut text = String::new();
        let _ = writeln!(
            text,
            "# The credentials `mesh import` found in the environments of {node}'s containers. Their\n\
             # values are not written: supply each (`NAME | String = \"…\"`), and keep the values\n\
             # out of the fleet's repository. A build fails, naming the field, while one is missing."
        );
        text.push_str("{\n");
        for (module, vars) in &credential_fields {
            let _ = writeln!(text, "  {} = {{", field(module));
            for (var, why) in vars {
                let _ = writeln!(
                    text,
                    "    # from docker inspect: the environment of {module}'s container ({why})\n    {} | String,",
                    field(var)
                );
            }
            text.push_str("  },\n");
        }
        text.push_str("}\n");
        out.files.push((
            PathBuf::from(&credentials_file),
            formatted(text).into_bytes(),
        ));
    }
    out
}

/// The files to write, each relative to the output folder, with its bytes.
type Written = Vec<(PathBuf, Vec<u8>)>;

/// The module `module` declaring the imported files, each one's content beside it in
/// `catalogue/MODULE/PATH`: its text, the contents to write, the credentials not written.
fn files_module(
    node: &str,
    module: &str,
    files: &[FileToImport],
    secrets: Option<&Rules>,
) -> (String, Written, Vec<FileSecret>) {
    let mut contents = Vec::new();
    let mut creds = Vec::new();
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# Imported by `mesh import` from the files of {node} at the paths it was given: each\n\
         # file's content is beside this module (files/), its mode and owner as found."
    );
    let _ = writeln!(
        text,
        "{{\n  name = {},\n  config = fun s => {{\n    files = [",
        string(module)
    );
    for f in files {
        let mode_bits = u32::from_str_radix(&f.mode, 8).unwrap_or(0o644);
        let special = mode_bits & 0o7000 != 0 || mode_bits & 0o002 != 0;
        let secret_line = std::str::from_utf8(&f.content).ok().and_then(|t| {
            t.lines().find_map(|l| {
                let (k, v) = l.trim_start_matches("export ").split_once('=')?;
                looks_like_credential(k.trim(), v.trim().trim_matches('"'))
                    .map(|why| (k.trim().to_owned(), why))
            })
        });
        let _ = writeln!(
            text,
            "      # from {}: mode {}, owner {}:{}",
            f.path, f.mode, f.owner, f.group
        );
        let mut entry = format!("      {{ path = {}", string(&f.path));
        match (std::str::from_utf8(&f.content), secret_line) {
            (Ok(_), None) => {
                let rel = format!("{module}{}", f.path);
                let _ = write!(entry, ", content = import {} as 'Text", string(&rel));
                contents.push((PathBuf::from("catalogue").join(&rel[..]), f.content.clone()));
            }
            (text_or_not, why) => {
                let secret = format!("secrets/{node}{}.age", f.path);
                let reason = match (text_or_not, why) {
                    (Ok(_), Some((var, why))) => {
                        format!("its line {var}= looks like a credential ({why})")
                    }
                    _ => "it is not text (a Nickel file's content is text)".to_owned(),
                };
                let _ = write!(entry, ", secret = {}", string(&secret));
                match encrypted(node, &secret, &f.content, secrets) {
                    Ok((ciphertext, readers)) => {
                        // Its readers are secrets.ncl's to say (and to change: a rekey
                        // changes no module).
                        let _ = writeln!(
                            text,
                            "      # Not written in clear: {reason}. Its content is {secret},\n\
                             \x20     # encrypted to the readers secrets.ncl names for it."
                        );
                        contents.push((PathBuf::from(&secret), ciphertext));
                        creds.push(FileSecret::Written(WrittenSecret {
                            item: f.path.clone(),
                            variable: None,
                            why: reason,
                            secret,
                            readers,
                        }));
                    }
                    Err(not) => {
                        let _ = writeln!(
                            text,
                            "      # Not written in clear: {reason}. Its content goes into {secret}\n\
                             \x20     # (`mesh secret edit {secret}`, its recipients in secrets.ncl)."
                        );
                        creds.push(FileSecret::Supply(Credential {
                            item: f.path.clone(),
                            variable: None,
                            why: format!("{reason}; not written encrypted: {not}"),
                            supply_in: secret,
                        }));
                    }
                }
            }
        }
        let _ = write!(entry, ", mode = {}", string(&f.mode));
        if f.owner != "root" {
            let _ = write!(entry, ", owner = {}", string(&f.owner));
        }
        if f.group != "root" {
            let _ = write!(entry, ", group = {}", string(&f.group));
        }
        if special {
            entry.push_str(", special_mode = true");
        }
        entry.push_str(" },");
        let _ = writeln!(text, "{entry}");
    }
    text.push_str("    ],\n  },\n}\n");
    (formatted(text), contents, creds)
}

/// A file's content that is not written in clear: to supply, or written encrypted.
enum FileSecret {
    Supply(Credential),
    Written(WrittenSecret),
}

/// A file's content written encrypted, as `mesh secret edit` would have: the readers
/// `secrets.ncl` names for it include the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WrittenSecret {
    /// The file's path on the node, or the container whose environment holds it.
    pub item: String,
    /// The environment variable (none for a whole file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variable: Option<String>,
    /// Why it is not in clear.
    pub why: String,
    /// The secret file written, relative to the fleet's tree.
    pub secret: String,
    /// Who may read it: the names `secrets.ncl` gives.
    pub readers: Vec<String>,
}

/// `content` encrypted to the readers `secrets` names for `secret`, and their names; or why
/// not: no `secrets.ncl`, no readers named for the file (or a folder holding it), a reader
/// without a key, or readers that leave out the node itself (its build would refuse it).
fn encrypted(
    node: &str,
    secret: &str,
    content: &[u8],
    secrets: Option<&Rules>,
) -> Result<(Vec<u8>, Vec<String>), String> {
    let recipients = readable_by(node, secret, secrets)?;
    let ciphertext =
        mesh_lib::secret::encrypt(secret, content, &recipients).map_err(|e| e.to_string())?;
    Ok((ciphertext, recipients.into_iter().map(|r| r.name).collect()))
}

/// The recipients `secrets` names for `secret`, the node among them; or why not: no
/// `secrets.ncl`, no readers named for the file (or a folder holding it), a reader without a
/// key, or readers that leave out the node itself (its build would refuse it).
fn readable_by(
    node: &str,
    secret: &str,
    secrets: Option<&Rules>,
) -> Result<Vec<mesh_lib::secret::Recipient>, String> {
    let rules = secrets.ok_or("the fleet's tree has no secrets.ncl naming its readers")?;
    let recipients = rules.recipients(secret).map_err(|e| e.to_string())?;
    if !recipients.iter().any(|r| r.node && r.name == node) {
        return Err(format!(
            "secrets.ncl's readers of it do not include the node {node}"
        ));
    }
    Ok(recipients)
}

/// The secret file of the environment variable `var` of a container of `module` on `node`.
fn env_secret(node: &str, module: &str, var: &str) -> String {
    format!("secrets/{node}/environment/{module}/{var}.age")
}

/// An environment variable's `value` encrypted as [`encrypted`] does: what the node gives the
/// container is the secret's plaintext without trailing newlines, so a value ending in one
/// cannot be a secret.
fn encrypted_value(
    node: &str,
    secret: &str,
    value: &str,
    secrets: Option<&Rules>,
) -> Result<(Vec<u8>, Vec<String>), String> {
    mesh_lib::secret::check_file(secret)?;
    if value.ends_with('\n') {
        return Err(
            "the value ends with a newline, which a secret's value drops: declare it by hand"
                .to_owned(),
        );
    }
    encrypted(node, secret, value.as_bytes(), secrets)
}

/// The modules already in the fleet's catalogue (`catalogue/NAME.ncl`), by name: their text.
pub type Catalogue = BTreeMap<String, Vec<u8>>;

/// The catalogue's modules under `out`, as [`render`] compares them (none when it has none).
pub fn catalogue(out: &Path) -> Catalogue {
    let Ok(entries) = std::fs::read_dir(out.join("catalogue")) else {
        return Catalogue::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_str()?.strip_suffix(".ncl")?.to_owned();
            Some((name, std::fs::read(e.path()).ok()?))
        })
        .collect()
}

/// The module `name` as `render` makes it under a name, and the name it goes by: `name` when
/// the catalogue has none of it or one saying the same (then shared: said in `out`); else
/// another node's `NAME_…` saying the same (shared: two nodes imported together, whose
/// `name` is an earlier import's); else `NAME_NODE`, the node's own (said in `out`, with why),
/// the catalogue's left as it is. A node's own from an import of it before is written over
/// only with --force.
fn shared_or_own<T>(
    catalogue: &Catalogue,
    name: &str,
    node: &str,
    out: &mut Imported,
    mut render: impl FnMut(&str) -> T,
    text: impl Fn(&T) -> &[u8],
) -> (String, T) {
    let rendered = render(name);
    match catalogue.get(name) {
        Some(there) if there.as_slice() != text(&rendered) => {
            let prefix = format!("{name}_");
            let alike: Vec<&String> = catalogue
                .range(prefix.clone()..)
                .take_while(|(k, _)| k.starts_with(&prefix))
                .map(|(k, _)| k)
                .collect();
            for k in alike {
                let rendered = render(k);
                if catalogue[k].as_slice() == text(&rendered) {
                    out.shared.push(k.clone());
                    return (k.clone(), rendered);
                }
            }
            let own = format!("{name}_{}", slug(node));
            out.renamed.insert(
                own.clone(),
                format!(
                    "catalogue/{name}.ncl says another thing (where it differs only in names and values, one `mesh fleet import` of the nodes running it makes one module of it)"
                ),
            );
            let rendered = render(&own);
            (own, rendered)
        }
        Some(_) => {
            out.shared.push(name.to_owned());
            (name.to_owned(), rendered)
        }
        None => (name.to_owned(), rendered),
    }
}

/// Each group's module under its own name, as [`render_group`] renders it: the groups split
/// between the machine's cores (formatting a module is most of the work).
fn rendered_at_once(groups: &[Group], contexts: &[GroupContext]) -> Vec<Option<GroupText>> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let per = groups.len().div_ceil(cores).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .chunks(per)
            .zip(contexts.chunks(per))
            .map(|(gs, cs)| {
                scope.spawn(move || {
                    gs.iter()
                        .zip(cs)
                        .map(|(g, c)| Some(render_group(g, &g.module, c)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("rendering a module does not panic"))
            .collect()
    })
}

/// What a group's module is rendered from beside the group itself.
#[derive(Clone, Copy)]
struct GroupContext<'a> {
    setting_of: &'a BTreeMap<(String, u16), String>,
    declared_files: &'a BTreeSet<&'a str>,
    /// Its openings' lines, if any.
    openings: Option<&'a str>,
    /// What of its members is the node's own (they differ between the nodes that run it).
    varying: Option<&'a BTreeMap<String, MemberVarying>>,
    /// Whether a credential in an environment is a secret (`secret_environment`, its file
    /// named by the node's declaration) rather than a value of the credentials file.
    env_secrets: bool,
}

/// A group's module, rendered.
struct GroupText {
    text: String,
    /// (container, variable, why) of each credential not written.
    creds: Vec<(String, String, String)>,
    gaps: BTreeMap<String, Vec<Gap>>,
    uses_credentials: bool,
    /// What of its members it reads from `values`, if it is a function of them.
    parametrized: Option<BTreeMap<String, MemberVarying>>,
}

/// The module `module` declaring a group's containers. It names no node: the same containers
/// on two nodes are the same text, one module the fleet shares.
fn render_group(g: &Group, module: &str, context: &GroupContext) -> GroupText {
    let mut text = String::new();
    let mut creds: Vec<(String, String, String)> = Vec::new();
    let mut gaps = BTreeMap::new();
    let _ = writeln!(
        text,
        "# Imported by `mesh import` from {}: the declaration of what runs, checked by",
        match &g.project {
            Some(p) => format!("the compose project {p} (label com.docker.compose.project)"),
            None => format!("the container {}", g.containers[0].name),
        }
    );
    let _ = writeln!(
        text,
        "# `mesh import --check`. Each host port is a setting of the node (settings.ports)."
    );
    let mut body = String::new();
    let keys: BTreeMap<&str, String> = g
        .members()
        .into_iter()
        .map(|(k, c)| (c.name.as_str(), k))
        .collect();
    for c in &g.containers {
        let varies = context.varying.and_then(|v| {
            let key = &keys[c.name.as_str()];
            v.get(key).map(|m| (key.as_str(), m))
        });
        render_container(c, context, &mut body, &mut creds, &mut gaps, varies);
    }
    let uses_credentials = !creds.is_empty();
    if uses_credentials && context.env_secrets {
        let _ = writeln!(
            text,
            "# Credentials are not written here: each is a secret, decrypted on the node when the\n\
             # container is created. `credentials` names their files; the node's declaration passes it."
        );
    } else if uses_credentials {
        let _ = writeln!(
            text,
            "# Credentials are not written here: this module reads them from `credentials`,\n\
             # which the node's declaration passes from its credentials file (nodes/NODE.credentials.ncl)."
        );
    }
    if context.varying.is_some() {
        let _ = writeln!(
            text,
            "# Several nodes run it, alike but for what each node's declaration passes in `values`:\n\
             # the names, environment and label values that differ between them."
        );
    }
    match (uses_credentials, context.varying.is_some()) {
        (true, true) => text.push_str("fun credentials values =>\n"),
        (true, false) => text.push_str("fun credentials =>\n"),
        (false, true) => text.push_str("fun values =>\n"),
        (false, false) => {}
    }
    let _ = writeln!(text, "{{\n  name = {},", string(module));
    text.push_str("  config = fun s => {\n    containers = [\n");
    text.push_str(&body);
    text.push_str("    ],\n");
    if let Some(lines) = context.openings {
        text.push_str("    openings = [\n");
        text.push_str(lines);
        text.push_str("    ],\n");
    }
    text.push_str("  },\n}\n");
    GroupText {
        text: formatted(text),
        creds,
        gaps,
        uses_credentials,
        parametrized: context.varying.cloned(),
    }
}

/// Each secret file the import would write that is already in the fleet's tree `out`: kept as
/// it is (said in `kept`), not written over — its ciphertext cannot be compared here with the
/// content found, and another one of the same plaintext would differ byte for byte.
pub fn keep_secrets_there(out: &Path, imported: &mut Imported) {
    let there: BTreeSet<PathBuf> = imported
        .secrets
        .iter()
        .map(|w| PathBuf::from(&w.secret))
        .filter(|p| out.join(p).symlink_metadata().is_ok())
        .collect();
    imported.files.retain(|(p, _)| !there.contains(p));
    imported
        .kept
        .extend(there.iter().map(|p| p.display().to_string()));
}

/// A fleet file naming the node, for an output folder that has none: the folder is then the
/// fleet's tree (the node's declaration imports the catalogue beside it).
pub fn fleet_file(node: &str) -> (PathBuf, Vec<u8>) {
    let text = format!(
        "# Written by `mesh import`: this folder is the fleet's tree. How `mesh deploy` reaches the\n\
         # node is not something an import finds: the destination below is its name, to check.\n\
         let mesh = import \"mesh.ncl\" in\n\
         mesh.fleet {{\n\
         \x20 nodes = {{\n\
         \x20   {} = {{ declaration = {}, ssh = {{ destination = {} }} }},\n\
         \x20 }},\n\
         }}\n",
        field(node),
        string(&format!("nodes/{node}.ncl")),
        string(&format!("root@{node}")),
    );
    (PathBuf::from("fleet.ncl"), formatted(text).into_bytes())
}

/// `text` as `nickel format` lays it out, so that the operator's formatter changes nothing in
/// what an import wrote. Text the formatter cannot read is a fault of the rendering (a unit test
/// formats every kind of module): written as rendered, for `mesh import --check` to name.
fn formatted(text: String) -> String {
    match mesh_compiler::format::format(&text) {
        Ok(done) => done,
        Err(e) => {
            debug_assert!(false, "{e}:\n{text}");
            text
        }
    }
}

fn credential_file_field(file: &str, module: &str, var: &str) -> String {
    format!("{file}: {module}.{var}")
}

/// One container's record, into `body`.
fn render_container(
    c: &LiveContainer,
    context: &GroupContext,
    body: &mut String,
    creds: &mut Vec<(String, String, String)>,
    gaps: &mut BTreeMap<String, Vec<Gap>>,
    varies: Option<(&str, &MemberVarying)>,
) {
    let (setting_of, declared_files) = (context.setting_of, context.declared_files);
    let mesh_lib::import::DeclaredPart {
        command,
        environment,
        labels,
        healthcheck,
    } = c.declared_part();
    let values = |what: &str| format!("values.{}.{what}", field(varies.map_or("", |v| v.0)));
    match varies {
        Some((key, m)) if m.name => {
            let _ = writeln!(
                body,
                "      # from docker inspect: the container of {key}, named by each node"
            );
        }
        _ => {
            let _ = writeln!(body, "      # from docker inspect: container {}", c.name);
        }
    }
    for g in &c.gaps {
        let _ = writeln!(
            body,
            "      # NOT DECLARED ({}): {} — {}",
            g.what, g.found, g.why
        );
    }
    if !c.gaps.is_empty() {
        gaps.insert(c.name.clone(), c.gaps.clone());
    }
    let name = match varies {
        Some((_, m)) if m.name => values("name"),
        _ => string(&c.name),
    };
    let _ = writeln!(body, "      {{\n        name = {name},");
    match c.pinned_image() {
        Some(pinned) => {
            let _ = writeln!(
                body,
                "        # from docker inspect: Config.Image (it runs {}), pinned by the digest its\n\
                 \x20       # registry knows that image by (RepoDigests): a build names these bytes, never a tag",
                &c.image_id
            );
            let _ = writeln!(body, "        image = {},", string(&pinned));
        }
        None => {
            let _ = writeln!(
                body,
                "        # from docker inspect: Config.Image (it runs {})",
                &c.image_id
            );
            let _ = writeln!(body, "        image = {},", string(&c.image));
        }
    }
    if let Some(command) = command {
        let _ = writeln!(
            body,
            "        # from docker inspect: Config.Cmd (not the image's own)"
        );
        let _ = writeln!(body, "        command = {},", list(&command));
    }
    if !environment.is_empty() {
        let mut plain_lines = String::new();
        let mut secret_lines = String::new();
        for (k, v) in &environment {
            match looks_like_credential(k, v) {
                Some(why) => {
                    // Its value is a secret's, or the credentials file's: the module reads
                    // `credentials` either way.
                    let (lines, said) = if context.env_secrets {
                        (
                            &mut secret_lines,
                            "a secret, its file named by the node's declaration",
                        )
                    } else {
                        (
                            &mut plain_lines,
                            "not written here, read from the node's credentials",
                        )
                    };
                    let _ = writeln!(lines, "          # a credential ({why}): {said}");
                    let _ = writeln!(lines, "          {} = credentials.{},", field(k), field(k));
                    creds.push((c.name.clone(), k.clone(), why.to_owned()));
                }
                None if varies.is_some_and(|(_, m)| m.environment.contains(k)) => {
                    let from = values(&format!("environment.{}", field(k)));
                    let _ = writeln!(plain_lines, "          {} = {from},", field(k));
                }
                None => {
                    let _ = writeln!(plain_lines, "          {} = {},", field(k), string(v));
                }
            }
        }
        for (key, lines) in [
            ("environment", plain_lines),
            ("secret_environment", secret_lines),
        ] {
            if lines.is_empty() {
                continue;
            }
            let _ = writeln!(
                body,
                "        # from docker inspect: Config.Env, less what the image gives itself"
            );
            let _ = writeln!(body, "        {key} = {{");
            body.push_str(&lines);
            body.push_str("        },\n");
        }
    }
    if !c.ports.is_empty() {
        let _ = writeln!(
            body,
            "        # from docker inspect: HostConfig.PortBindings; each host port is the node's setting"
        );
        body.push_str("        publish = [\n");
        for p in &c.ports {
            let setting = &setting_of[&(c.name.clone(), p.host_port)];
            let mut e = format!(
                "          {{ host_port = s.ports.{}, container_port = {}",
                field(setting),
                p.container_port
            );
            if p.protocol == Protocol::Udp {
                e.push_str(", protocol = 'udp");
            }
            if p.host_ip != "0.0.0.0" {
                let _ = write!(e, ", host_ip = {}", string(&p.host_ip));
            }
            let _ = writeln!(body, "{e} }},");
        }
        body.push_str("        ],\n");
    }
    if !c.mounts.is_empty() {
        let _ = writeln!(body, "        # from docker inspect: Mounts");
        body.push_str("        volumes = [\n");
        for m in &c.mounts {
            if m.anonymous {
                let _ = writeln!(
                    body,
                    "          # an anonymous volume (docker run -v {}): named by the engine's id",
                    m.target
                );
            }
            let mut e = format!(
                "          {{ source = {}, target = {}",
                string(&m.source),
                string(&m.target)
            );
            if m.read_only {
                e.push_str(", read_only = true");
            }
            if let Some(p) = &m.propagation {
                let _ = write!(e, ", propagation = '{p}");
            }
            if m.nocopy {
                e.push_str(", nocopy = true");
            }
            if let Some(z) = &m.selinux {
                let _ = write!(e, ", selinux = '{z}");
            }
            if m.kind == "bind" {
                match mesh_lib::path::host_mount(&m.source, declared_files) {
                    Some(mesh_lib::path::HostMount::Host(what)) => {
                        let _ = writeln!(
                            body,
                            "          # host_access: it hands the container {what}, as the found one has it"
                        );
                        e.push_str(", host_access = true");
                    }
                    Some(mesh_lib::path::HostMount::StateDir) => {
                        let _ = writeln!(
                            body,
                            "          # NOT DECLARED (bind mount): {} — the mesh's state directory is never mounted into a container",
                            m.source
                        );
                        gaps.entry(c.name.clone()).or_default().push(Gap {
                            what: "bind mount".into(),
                            found: format!("{}:{}", m.source, m.target),
                            why: "the mesh's state directory is never mounted into a container"
                                .into(),
                        });
                        continue;
                    }
                    None => {}
                }
            }
            let _ = writeln!(body, "{e} }},");
        }
        body.push_str("        ],\n");
    }
    if !labels.is_empty() {
        let _ = writeln!(
            body,
            "        # from docker inspect: Config.Labels, less what the image gives itself"
        );
        body.push_str("        labels = {\n");
        for (k, v) in &labels {
            if varies.is_some_and(|(_, m)| m.labels.contains(k)) {
                let from = values(&format!("labels.{}", field(k)));
                let _ = writeln!(body, "          {} = {from},", field(k));
            } else {
                let _ = writeln!(body, "          {} = {},", field(k), string(v));
            }
        }
        body.push_str("        },\n");
    }
    if let Some(t) = c.stop_timeout {
        let _ = writeln!(
            body,
            "        # from docker inspect: Config.StopTimeout\n        stop_timeout = {t},"
        );
    }
    if let Some(r) = &c.restart {
        let _ = writeln!(
            body,
            "        # from docker inspect: HostConfig.RestartPolicy\n        restart = {},",
            string(r)
        );
    }
    if !c.networks.is_empty() {
        let _ = writeln!(
            body,
            "        # from docker inspect: NetworkSettings.Networks; a switch on a node without one\n\
             \x20       # creates it as a plain bridge network (its driver and subnet are not declared)"
        );
        body.push_str("        networks = [\n");
        for n in &c.networks {
            let mut e = format!("          {{ name = {}", string(&n.name));
            if !n.aliases.is_empty() {
                let _ = write!(e, ", aliases = {}", list(&n.aliases));
            }
            if let Some(a) = n.ipv4_address {
                let _ = write!(e, ", ipv4_address = {}", string(&a.to_string()));
            }
            if let Some(a) = n.ipv6_address {
                let _ = write!(e, ", ipv6_address = {}", string(&a.to_string()));
            }
            let _ = writeln!(body, "{e} }},");
        }
        body.push_str("        ],\n");
    }
    if let Some(h) = healthcheck {
        let _ = writeln!(
            body,
            "        # from docker inspect: Config.Healthcheck (not the image's own)"
        );
        let mut fields = vec![format!("test = {}", list(&h.test))];
        for (what, d) in [
            ("interval", h.interval),
            ("timeout", h.timeout),
            ("start_period", h.start_period),
        ] {
            if let Some(d) = d {
                fields.push(format!(
                    "{what} = {}",
                    string(&mesh_lib::model::format_duration(d))
                ));
            }
        }
        if let Some(r) = h.retries {
            fields.push(format!("retries = {r}"));
        }
        let _ = writeln!(body, "        healthcheck = {{ {} }},", fields.join(", "));
    }
    options::write(body, &c.options);
    body.push_str("      },\n");
}

/// A refusal to write over what is there.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Files that are there already.
    #[error("{} already there: {}", if .0.len() == 1 { "a file is" } else { "files are" }, .0.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    Exists(Vec<PathBuf>),
    /// Files whose path leads out of the folder written into.
    #[error("{} would be written outside the folder: {}", if .0.len() == 1 { "a file" } else { "files" }, .0.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    Outside(Vec<PathBuf>),
    /// Writing failed.
    #[error("writing {path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Writes `imported`'s files under `out` (folders made as needed), returning those written:
/// none is written when one is there already saying something else, unless `force`.
pub fn write(out: &Path, imported: &Imported, force: bool) -> Result<Vec<PathBuf>, WriteError> {
    // Every file is under `out`: a name that would lead out of it (a node's `../x`) is
    // refused before anything is written.
    let outside: Vec<PathBuf> = imported
        .files
        .iter()
        .map(|(rel, _)| rel)
        .filter(|rel| {
            !rel.components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
        })
        .cloned()
        .collect();
    if !outside.is_empty() {
        return Err(WriteError::Outside(outside));
    }
    // A file there already with these very bytes (a module another node shares, an import
    // of the same machine again) is left as it is: no conflict, not written.
    let same = |rel: &PathBuf, bytes: &[u8]| {
        let path = out.join(rel);
        path.symlink_metadata().is_ok_and(|m| m.is_file())
            && std::fs::read(&path).is_ok_and(|b| b == bytes)
    };
    let there: Vec<PathBuf> = imported
        .files
        .iter()
        .filter(|(rel, bytes)| !same(rel, bytes))
        .map(|(p, _)| out.join(p))
        .filter(|p| p.symlink_metadata().is_ok())
        .collect();
    if !there.is_empty() && !force {
        return Err(WriteError::Exists(there));
    }
    let mut written = Vec::new();
    for (rel, bytes) in &imported.files {
        if same(rel, bytes) {
            continue;
        }
        let path = out.join(rel);
        let io = |source| WriteError::Io {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        mesh_lib::atomic::write_file_unsynced(&path, bytes, 0o644).map_err(io)?;
        written.push(rel.clone());
    }
    // One wait for the disk for every file, not two per file: durable when this returns.
    if !written.is_empty() {
        mesh_lib::atomic::sync_filesystem(out).map_err(|source| WriteError::Io {
            path: out.to_owned(),
            source,
        })?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_lib::import::LivePort;

    /// A first node's private network: what `place` gives a node in a tree with no nodes yet.
    static FIRST: std::sync::LazyLock<crate::check::Placed> = std::sync::LazyLock::new(|| {
        crate::check::place(Path::new("/nonexistent-fleet-tree"), "n").expect("a first node")
    });

    /// A fleet's tree of `catalogue` alone.
    fn beside(catalogue: &Catalogue) -> Tree<'_> {
        Tree {
            catalogue,
            secrets: None,
            placed: &FIRST,
        }
    }

    fn container(name: &str, project: Option<&str>, ports: &[(u16, u16)]) -> LiveContainer {
        let mut labels = BTreeMap::from([("team".to_owned(), "web".to_owned())]);
        if let Some(p) = project {
            labels.insert("com.docker.compose.project".into(), p.into());
        }
        LiveContainer {
            name: name.into(),
            id: "0123456789abcdef".into(),
            running: true,
            image: "app:1".into(),
            image_id: "sha256:aa".into(),
            command: vec!["serve".into()],
            entrypoint: vec![],
            environment: BTreeMap::from([
                ("MODE".to_owned(), "prod".to_owned()),
                ("DB_PASSWORD".to_owned(), "hunter2".to_owned()),
                ("UPSTREAM".to_owned(), "aK8s9Qz2LmP4xR7vT1wB".to_owned()),
            ]),
            labels,
            ports: ports
                .iter()
                .map(|(h, c)| LivePort {
                    host_port: *h,
                    container_port: *c,
                    protocol: Protocol::Tcp,
                    host_ip: "0.0.0.0".into(),
                })
                .collect(),
            mounts: vec![],
            stop_timeout: None,
            restart: Some("always".into()),
            networks: Vec::new(),
            healthcheck: None,
            options: Default::default(),
            engine: Default::default(),
            image_defaults: Some(mesh_lib::import::ImageDefaults::default()),
            gaps: vec![],
        }
    }

    /// The catalogue an import's modules make, as the next import reads it.
    fn catalogue_of(imported: &Imported) -> Catalogue {
        imported
            .files
            .iter()
            .filter_map(|(p, b)| {
                let name = p
                    .strip_prefix("catalogue")
                    .ok()?
                    .to_str()?
                    .strip_suffix(".ncl")?;
                Some((name.to_owned(), b.clone()))
            })
            .collect()
    }

    /// A compose project is one module; every host port is one setting whose number is
    /// written once, in the node's declaration, and read by the module; no credential's value
    /// is written anywhere (an environment's, by name or by entropy, or a file's line).
    #[test]
    fn ports_once_credentials_never_compose_projects_one_module() {
        let containers = [
            container("shop-web-1", Some("shop"), &[(18080, 80), (18443, 443)]),
            container("shop-db-1", Some("shop"), &[]),
            container("cache", None, &[(16379, 6379)]),
        ];
        let files = [FileToImport {
            path: "/etc/app/app.env".into(),
            content: b"MODE=prod\nAPI_TOKEN=s3cr3t-t0ken\n".to_vec(),
            mode: "0600".into(),
            owner: "root".into(),
            group: "root".into(),
        }];
        let out = render(
            "web-1",
            &containers,
            &files,
            &[],
            &beside(&Catalogue::new()),
            &Varying::new(),
        );
        assert_eq!(out.modules, ["shop", "cache", "files"]);
        let all: String = out
            .files
            .iter()
            .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
            .collect();
        for secret in ["hunter2", "aK8s9Qz2LmP4xR7vT1wB", "s3cr3t-t0ken"] {
            assert!(!all.contains(secret), "{secret} written");
        }
        assert_eq!(out.credentials.len(), 7, "{:?}", out.credentials);
        for port in ["18080", "18443", "16379"] {
            assert_eq!(all.matches(port).count(), 1, "{port}");
        }
        let shop = String::from_utf8_lossy(&out.files[0].1).into_owned();
        assert!(shop.contains("host_port = s.ports.shop_web_1_80"), "{shop}");
        assert!(shop.contains("name = \"shop-db-1\""), "{shop}");
        assert!(shop.starts_with("# Imported by `mesh import` from the compose project shop"));
        let node = out
            .files
            .iter()
            .find(|(p, _)| p == Path::new("nodes/web-1.ncl"))
            .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
            .unwrap();
        assert!(
            node.contains("(import \"../catalogue/shop.ncl\") credentials.shop"),
            "{node}"
        );
        assert!(node.contains("cache = 16379,"), "{node}");
    }

    /// A module the catalogue has already, saying the same, is shared (its text names no node,
    /// no container id); saying another thing, this node's is a module of its own and the
    /// catalogue's is not written over; the files module likewise, its contents in a folder of
    /// its own. What is there with the same bytes is no conflict and not written again.
    #[test]
    fn a_catalogue_module_saying_the_same_is_shared_another_is_the_nodes_own() {
        let mut cache = container("cache", None, &[(16379, 6379)]);
        let files = [FileToImport {
            path: "/etc/app.conf".into(),
            content: b"a\n".to_vec(),
            mode: "0644".into(),
            owner: "root".into(),
            group: "root".into(),
        }];
        let first = render(
            "web-1",
            &[cache.clone()],
            &files,
            &[],
            &beside(&Catalogue::new()),
            &Varying::new(),
        );
        let catalogue = catalogue_of(&first);
        assert_eq!(catalogue.keys().collect::<Vec<_>>(), ["cache", "files"]);
        // Another node, another container id, the same container: shared.
        cache.id = "fedcba9876543210".into();
        let second = render(
            "web-2",
            &[cache.clone()],
            &[],
            &[],
            &beside(&catalogue),
            &Varying::new(),
        );
        assert_eq!(second.modules, ["cache"]);
        assert_eq!(second.shared, ["cache"]);
        let text = |out: &Imported, rel: &str| {
            out.files
                .iter()
                .find(|(p, _)| p == Path::new(rel))
                .map(|(_, b)| b.clone())
        };
        assert_eq!(
            text(&second, "catalogue/cache.ncl"),
            catalogue.get("cache").cloned()
        );
        // Another environment, another files content: the node's own modules.
        cache.environment.insert("LEVEL".into(), "9".into());
        let mut other = files.clone();
        other[0].content = b"b\n".to_vec();
        let third = render(
            "web-3",
            &[cache],
            &other,
            &[],
            &beside(&catalogue),
            &Varying::new(),
        );
        assert_eq!(third.modules, ["cache_web_3", "files_web_3"]);
        assert!(third.renamed.contains_key("cache_web_3"));
        assert!(text(&third, "catalogue/cache.ncl").is_none());
        assert_eq!(
            text(&third, "catalogue/files_web_3/etc/app.conf"),
            Some(b"b\n".to_vec())
        );
        let node = String::from_utf8(text(&third, "nodes/web-3.ncl").unwrap()).unwrap();
        assert!(
            node.contains("import \"../catalogue/cache_web_3.ncl\""),
            "{node}"
        );
        // Written into a tree that has the first node's: only what differs is a conflict.
        let tree = tempfile::tempdir().unwrap();
        assert_eq!(
            write(tree.path(), &first, false).unwrap().len(),
            first.files.len()
        );
        let again = write(tree.path(), &first, false).unwrap();
        assert!(
            again.is_empty(),
            "the same bytes are not written again: {again:?}"
        );
        let shared = write(tree.path(), &second, false).unwrap();
        assert_eq!(
            shared,
            [
                PathBuf::from("nodes/web-2.ncl"),
                PathBuf::from("nodes/web-2.credentials.ncl")
            ],
            "the node's own files only"
        );
    }

    fn opening(port: u16, name: &str, from: &[&str], containers: &[&str]) -> FoundOpening {
        FoundOpening {
            protocol: Protocol::Tcp,
            port,
            paths: [if containers.is_empty() {
                TrafficPath::Incoming
            } else {
                TrafficPath::Forwarded
            }]
            .into(),
            from: from.iter().map(|f| (*f).to_owned()).collect(),
            name: name.into(),
            containers: containers.iter().map(|c| (*c).to_owned()).collect(),
            held_by: vec![format!("socket 0.0.0.0 {name} (pid 7)")],
            reach: "reachable from anywhere".into(),
            gaps: vec![],
        }
    }

    /// A port an imported container publishes is opened in its module, with its setting; the
    /// node's own get a module of their own, a setting each (a process with several ports:
    /// named with the port), one opening per source; a port no one reaches is opened nowhere
    /// but passed over by the foundation's defaults.
    #[test]
    fn openings_go_to_the_module_of_what_publishes_them() {
        let containers = [container("cache", None, &[(16379, 6379)])];
        let openings = [
            opening(16379, "cache", &["anywhere"], &["cache"]),
            opening(22, "sshd", &["anywhere"], &[]),
            opening(80, "nginx", &["192.0.2.0/24", "198.51.100.0/24"], &[]),
            opening(443, "nginx", &["anywhere"], &[]),
            opening(4222, "nats", &[], &[]),
        ];
        let out = render(
            "web-1",
            &containers,
            &[],
            &openings,
            &beside(&Catalogue::new()),
            &Varying::new(),
        );
        assert_eq!(out.modules, ["cache", "firewall"]);
        let text = |path: &str| {
            out.files
                .iter()
                .find(|(p, _)| p == Path::new(path))
                .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
                .unwrap()
        };
        let cache = text("catalogue/cache.ncl");
        assert!(
            cache.contains("{ port = s.ports.cache, paths = ['forwarded], from = \"anywhere\" },"),
            "{cache}"
        );
        let firewall = text("catalogue/firewall.ncl");
        for line in [
            "{ port = s.ports.sshd, paths = ['incoming], from = \"anywhere\" },",
            "{ port = s.ports.nginx_80, paths = ['incoming], from = \"192.0.2.0/24\" },",
            "{ port = s.ports.nginx_80, paths = ['incoming], from = \"198.51.100.0/24\" },",
            "{ port = s.ports.nginx_443, paths = ['incoming], from = \"anywhere\" },",
        ] {
            assert!(firewall.contains(line), "{line}\nnot in:\n{firewall}");
        }
        assert!(!firewall.contains("4222"), "{firewall}");
        let node = text("nodes/web-1.ncl");
        assert!(node.contains("bus = 4223,"), "{node}");
        assert!(
            node.contains("import \"../catalogue/firewall.ncl\""),
            "{node}"
        );
        for port in ["16379", "22", "80", "443"] {
            assert_eq!(
                node.matches(&format!(" = {port},")).count(),
                1,
                "{port} written once:\n{node}"
            );
        }
    }

    /// Every Nickel file an import writes — a compose project's module reading credentials, a
    /// container's with an opening, the files module with a secret, the node's own openings, the
    /// node's declaration, its credentials file, the fleet file — is what `nickel format`
    /// (nickel-lang-core's own formatter) writes: running it changes nothing, comments kept.
    #[test]
    fn every_module_written_passes_nickel_format() {
        let containers = [
            container("shop-web-1", Some("shop"), &[(18080, 80), (18443, 443)]),
            container("shop-db-1", Some("shop"), &[]),
            container("cache", None, &[(16379, 6379)]),
        ];
        let files = [
            FileToImport {
                path: "/etc/app/app.env".into(),
                content: b"API_TOKEN=s3cr3t-t0ken\n".to_vec(),
                mode: "0600".into(),
                owner: "root".into(),
                group: "app".into(),
            },
            FileToImport {
                path: "/etc/app/app.conf".into(),
                content: b"port = 80\n".to_vec(),
                mode: "0644".into(),
                owner: "root".into(),
                group: "root".into(),
            },
        ];
        let openings = [
            opening(16379, "cache", &["anywhere"], &["cache"]),
            opening(22, "sshd", &["192.0.2.0/24"], &[]),
        ];
        let mut out = render(
            "web-1",
            &containers,
            &files,
            &openings,
            &beside(&Catalogue::new()),
            &Varying::new(),
        );
        out.files.push(fleet_file("web-1"));
        let written: Vec<&Path> = out
            .files
            .iter()
            .map(|(p, _)| p.as_path())
            .filter(|p| p.extension().is_some_and(|e| e == "ncl"))
            .collect();
        for kind in [
            "catalogue/shop.ncl",
            "catalogue/cache.ncl",
            "catalogue/files.ncl",
            "catalogue/firewall.ncl",
            "nodes/web-1.ncl",
            "nodes/web-1.credentials.ncl",
            "fleet.ncl",
        ] {
            assert!(written.contains(&Path::new(kind)), "{kind} in {written:?}");
        }
        for (path, bytes) in out
            .files
            .iter()
            .filter(|(p, _)| written.contains(&p.as_path()))
        {
            let mut formatted = Vec::new();
            nickel_lang_core::format::format(bytes.as_slice(), &mut formatted)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(
                String::from_utf8_lossy(&formatted),
                String::from_utf8_lossy(bytes),
                "{} changed by nickel format",
                path.display()
            );
            assert!(
                bytes.starts_with(b"# "),
                "{} keeps its comment",
                path.display()
            );
        }
    }

    /// Values as odd as a machine holds — a control character, a newline, a tab, a quote, an
    /// interpolation, non-ASCII, a key Nickel must quote — are formatted like any (the
    /// formatter reads every escape `string` writes) and stay the same text.
    #[test]
    fn odd_values_are_formatted_and_kept() {
        let mut c = container("odd", None, &[]);
        c.environment = BTreeMap::from([
            ("CTRL".to_owned(), "a\u{1}b".to_owned()),
            ("LINES".to_owned(), "one\ntwo\tthree\r".to_owned()),
            ("QUOTE".to_owned(), "say \"%{x}\" \\ done".to_owned()),
            ("UNI".to_owned(), "héllo ✓".to_owned()),
            ("in".to_owned(), "keyword".to_owned()),
            ("with.dot-dash".to_owned(), "x".to_owned()),
        ]);
        let out = render(
            "web-1",
            &[c],
            &[],
            &[],
            &beside(&Catalogue::new()),
            &Varying::new(),
        );
        let module = String::from_utf8(out.files[0].1.clone()).unwrap();
        let mut formatted = Vec::new();
        nickel_lang_core::format::format(module.as_bytes(), &mut formatted).unwrap();
        assert_eq!(String::from_utf8(formatted).unwrap(), module);
        for line in [
            r#"CTRL = "a\u{1}b","#,
            r#"LINES = "one\ntwo\tthree\r","#,
            r#"QUOTE = "say \"\%{x}\" \\ done","#,
            r#"UNI = "héllo ✓","#,
            r#""in" = "keyword","#,
            r#""with.dot-dash" = "x","#,
        ] {
            assert!(module.contains(line), "{line} not in:\n{module}");
        }
    }

    /// Two nodes running a compose project alike but for a container's name and an
    /// environment value: one module, naming neither, shared by the second node; each node's
    /// declaration passes its own. A credential stays each node's credential; a module whose
    /// variables differ is not made alike.
    #[test]
    fn what_nodes_run_alike_but_for_names_and_values_is_one_module() {
        let node = |name: &str, mode: &str, extra: bool| {
            // Each publishes its port on a number of its own, and labels its build.
            let port = 18000 + name.len() as u16 * 10 + mode.len() as u16;
            let mut c = container(name, Some("shop"), &[(port, 80)]);
            c.labels.insert(COMPOSE_SERVICE.into(), "web".into());
            c.labels.insert("build".into(), mode.into());
            c.environment.insert("MODE".into(), mode.into());
            if extra {
                c.environment.insert("EXTRA".into(), "1".into());
            }
            let mut cache = container("cache", None, &[]);
            cache.environment.insert("LEVEL".into(), mode.into());
            Found {
                node: name.into(),
                containers: vec![c, cache],
                files: vec![],
                openings: vec![],
                skipped: vec![],
                gaps: BTreeMap::new(),
            }
        };
        let (a, b) = (
            node("shop-web-a", "blue", false),
            node("shop-web-b", "green", false),
        );
        let varying = varying(&[&a, &b]);
        assert_eq!(
            varying["shop"]["web"],
            MemberVarying {
                name: true,
                environment: BTreeSet::from(["MODE".to_owned()]),
                labels: BTreeSet::from(["build".to_owned()]),
            }
        );
        // DB_PASSWORD and UPSTREAM differ nowhere here, and are credentials anyway.
        assert_eq!(
            varying["cache"]["cache"].environment,
            BTreeSet::from(["LEVEL".to_owned()])
        );
        assert!(!varying["cache"]["cache"].name);

        let first = render(
            "a",
            &a.containers,
            &[],
            &[],
            &beside(&Catalogue::new()),
            &varying,
        );
        let catalogue = catalogue_of(&first);
        let second = render("b", &b.containers, &[], &[], &beside(&catalogue), &varying);
        assert_eq!(second.shared, ["shop", "cache"], "{:?}", second.renamed);
        assert_eq!(second.parametrized, ["shop", "cache"]);
        let text = |out: &Imported, path: &str| {
            out.files
                .iter()
                .find(|(p, _)| p == Path::new(path))
                .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
                .unwrap()
        };
        let shop = text(&first, "catalogue/shop.ncl");
        for absent in ["shop-web-a", "blue", "green"] {
            assert!(
                !shop.contains(absent),
                "{absent} in the shared module:\n{shop}"
            );
        }
        assert!(shop.contains("name = values.web.name,"), "{shop}");
        assert!(
            shop.contains("MODE = values.web.environment.MODE,"),
            "{shop}"
        );
        assert!(shop.contains("fun credentials values =>"), "{shop}");
        // The port's setting is the member's, the label's value each node's own.
        assert!(shop.contains("host_port = s.ports.shop_web,"), "{shop}");
        assert!(shop.contains("build = values.web.labels.build,"), "{shop}");
        let decl = text(&second, "nodes/b.ncl");
        assert!(decl.contains("shop_web = 18105,"), "{decl}");
        assert!(decl.contains("labels = { build = \"green\", }"), "{decl}");
        assert!(decl.contains("credentials.shop"), "{decl}");
        assert!(decl.contains("name = \"shop-web-b\""), "{decl}");
        assert!(decl.contains("MODE = \"green\""), "{decl}");
        assert!(decl.contains("LEVEL = \"green\""), "{decl}");

        // A third node imported alone later, running it alike: it shares the catalogue's
        // module (a function of `values`, read from its text), passing its own.
        let mut catalogue = catalogue;
        catalogue.extend(catalogue_of(&second));
        let later = node("shop-web-d", "amber", false);
        let third = render(
            "d",
            &later.containers,
            &[],
            &[],
            &beside(&catalogue),
            &Varying::new(),
        );
        assert_eq!(third.shared, ["shop", "cache"], "{:?}", third.renamed);
        assert_eq!(third.parametrized, ["shop", "cache"]);
        let decl = text(&third, "nodes/d.ncl");
        assert!(decl.contains("name = \"shop-web-d\""), "{decl}");
        assert!(decl.contains("MODE = \"amber\""), "{decl}");

        // Another variable on one node: not alike; that module is left to each node.
        let c = node("shop-web-c", "red", true);
        let varying = super::varying(&[&a, &c]);
        assert!(!varying.contains_key("shop"), "{varying:?}");
        assert!(varying.contains_key("cache"));
        // One node alone: nothing differs.
        assert!(super::varying(&[&a]).is_empty());
    }

    /// Two containers of one module with a credential under one name: one value, or the
    /// second named as a gap (the module gives both the one its declaration passes).
    #[test]
    fn a_credential_with_two_values_in_one_module_is_a_gap() {
        let web = container("shop-web-1", Some("shop"), &[]);
        let mut db = container("shop-db-1", Some("shop"), &[]);
        let out = render(
            "n",
            &[web.clone(), db.clone()],
            &[],
            &[],
            &beside(&Catalogue::new()),
            &Varying::new(),
        );
        assert!(out.gaps.is_empty(), "{:?}", out.gaps);
        db.environment
            .insert("DB_PASSWORD".into(), "another-one".into());
        let out = render(
            "n",
            &[web, db],
            &[],
            &[],
            &beside(&Catalogue::new()),
            &Varying::new(),
        );
        // The module's containers in the order they were found: the web's value first.
        let gaps = out
            .gaps
            .get("shop-db-1")
            .unwrap_or_else(|| panic!("{:?}", out.gaps));
        assert_eq!(gaps.len(), 1, "{:?}", out.gaps);
        assert_eq!(gaps[0].what, "environment DB_PASSWORD");
        assert!(gaps[0].why.contains("shop-web-1"), "{}", gaps[0].why);
        assert!(!format!("{:?}", out.gaps).contains("another-one"));
    }

    /// What a module reads from `values` is read back from its text, keys Nickel quotes too;
    /// a module that is no function of `values` reads nothing.
    #[test]
    fn what_a_module_reads_from_values_is_read_from_its_text() {
        let text = "fun credentials values =>\n  { containers = [{ name = values.\"web.1\".name, \
                    environment = { A = values.\"web.1\".environment.A, \"B.C\" = values.db.environment.\"B.C\", \
                    D = credentials.D, E = myvalues.x.name }, labels = { \"v.1\" = values.db.labels.\"v.1\" } }] }";
        let read = reads_values(text).unwrap();
        assert_eq!(
            read,
            BTreeMap::from([
                (
                    "web.1".to_owned(),
                    MemberVarying {
                        name: true,
                        environment: BTreeSet::from(["A".to_owned()]),
                        labels: BTreeSet::new(),
                    }
                ),
                (
                    "db".to_owned(),
                    MemberVarying {
                        name: false,
                        environment: BTreeSet::from(["B.C".to_owned()]),
                        labels: BTreeSet::from(["v.1".to_owned()]),
                    }
                ),
            ])
        );
        assert_eq!(reads_values("{ name = values.x.name }"), None);
        assert_eq!(
            field_token("\"a\\\"b\\u{1}\" rest"),
            Some(("a\"b\u{1}".to_owned(), " rest"))
        );
    }

    /// A string with quotes, a backslash, a newline and an interpolation stays the same text.
    /// Nothing is written outside the folder: a path that would lead out of it (a node named
    /// `../../evil`) refuses the whole write.
    #[test]
    fn nothing_is_written_outside_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("fleet");
        for rel in ["nodes/../../evil.ncl", "/etc/evil.ncl", "../evil.ncl"] {
            let imported = Imported {
                files: vec![
                    (PathBuf::from("fleet.ncl"), b"{}".to_vec()),
                    (PathBuf::from(rel), b"{}".to_vec()),
                ],
                ..Imported::default()
            };
            let refused = write(&out, &imported, true);
            assert!(matches!(refused, Err(WriteError::Outside(_))), "{rel}");
            assert!(!out.exists(), "{rel}: something written");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn strings_are_escaped_for_nickel() {
        assert_eq!(string("a\"b\\c\n%{x}"), r#""a\"b\\c\n\%{x}""#);
        assert_eq!(
            field("com.docker.compose.project"),
            "\"com.docker.compose.project\""
        );
        assert_eq!(field("MODE"), "MODE");
        assert_eq!(field("in"), "\"in\"");
    }
}
