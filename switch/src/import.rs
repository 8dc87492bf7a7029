//! What `mesh import` reads on the node, and `mesh import --check`'s comparison of a built
//! declaration with what runs. Reads only: no container is started, stopped, renamed or
//! created, no file is opened for writing, nothing goes into the store or the node record.
//!
//! The node side of an import is this file: the fleet side (`mesh_fleet::import`) writes the
//! Nickel from what it returns, so an import over SSH is this read on the node and the writing
//! on the workstation.

use std::collections::BTreeSet;

use ipnet::IpNet;
use mesh_lib::import::{
    compare_hiding, looks_like_credential, Difference, Effective, FoundOpening, Gap, LiveContainer,
    Published,
};
use mesh_lib::model::{ContainerEntry, FileMode, PrivateNetwork, TrafficPath};
use mesh_lib::secret::DigestKey;
use mesh_lib::{BlobHash, Generation, TargetPath};
use serde::Serialize;

use crate::containers::with_values;
use crate::ActivateError;
use crate::Activator;
use mesh_containers::{DockerError, Engine};
use mesh_node::root::Observed;
use mesh_reach::preview::{Change, Found, Holder, Verdict, Who};

/// A file read at a path given to `mesh import`.
#[derive(Debug, Clone, Serialize)]
pub struct LiveFile {
    /// Its path.
    pub path: TargetPath,
    /// Its content (not serialized: a file may be a credential).
    #[serde(skip)]
    pub content: Vec<u8>,
    /// The content's blake3.
    pub hash: BlobHash,
    /// Permission bits.
    pub mode: FileMode,
    /// Owner's name (or uid, when the root's /etc/passwd does not name it).
    pub owner: String,
    /// Group's name.
    pub group: String,
}

/// Every container on the engine (or those `names` gives, each of which must exist), as it
/// is, except the mesh's own and the found ones a take kept (`NAME.found`). A container listed
/// and gone before it was read (someone else removed it) is not one of every container.
pub fn live_containers(
    engine: &Engine,
    names: &[String],
    root: &std::path::Path,
) -> Result<Vec<LiveContainer>, DockerError> {
    if !names.is_empty() {
        return engine.live_all(names, root).into_iter().collect();
    }
    let present = engine.containers()?;
    let every: Vec<String> = present
        .iter()
        .filter(|(n, p)| !p.is_ours() && !n.ends_with(mesh_containers::FOUND_SUFFIX))
        .map(|(n, _)| n.clone())
        .collect();
    let mut out = Vec::new();
    for read in engine.live_all(&every, root) {
        match read {
            Ok(live) => out.push(live),
            Err(e) if e.is_gone() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// One imported item, checked.
#[derive(Debug, Clone, Serialize)]
pub struct Checked {
    /// `container` or `file`.
    pub kind: &'static str,
    /// Its name or path.
    pub name: String,
    /// The module declaring it.
    pub module: String,
    /// `equal`, `differs`, `missing` (declared, not on the machine), `not comparable` (equal
    /// in all a declaration says, but holding what it cannot say: `gaps`), or `not compared`.
    pub verdict: &'static str,
    /// The spec hash (or content hash) the declaration gives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub declared: Option<String>,
    /// The one of what runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
    /// What differs.
    pub differences: Vec<Difference>,
    /// What the declaration cannot say.
    pub gaps: Vec<Gap>,
}

impl Checked {
    /// Whether the item is what runs.
    pub fn equal(&self) -> bool {
        self.verdict == "equal"
    }
}

impl Activator {
    /// The files at `paths` as they are, and the paths with no regular file at them (nothing,
    /// a folder, a link: an import reads files only).
    pub fn live_files(
        &self,
        paths: &[TargetPath],
    ) -> Result<(Vec<LiveFile>, Vec<TargetPath>), ActivateError> {
        self.check_reach(paths)?;
        let mut out = Vec::new();
        let mut not_files = Vec::new();
        for path in paths {
            match self.root.observe(path)? {
                (Observed::File(f), Some(content)) => out.push(LiveFile {
                    path: path.clone(),
                    content,
                    hash: f.hash,
                    mode: f.mode,
                    owner: self.ids.user_name(f.uid),
                    group: self.ids.group_name(f.gid),
                }),
                _ => not_files.push(path.clone()),
            }
        }
        Ok((out, not_files))
    }

    /// Every container and file `generation` declares, compared with what is on the machine.
    /// The engine is asked only when the generation declares containers.
    pub fn check_import(&self, generation: &Generation) -> Result<Vec<Checked>, ActivateError> {
        let mut out = Vec::new();
        // The secrets' plaintexts, decrypted with the node's host key as a switch does: each
        // compared by its keyed digest (never a plain one), or why it cannot be.
        let opened = self
            .open_secrets_of(generation, true)
            .map_err(|e| e.to_string());
        if !generation.containers.is_empty() {
            let engine = Engine::connect()?;
            let present = engine.containers()?;
            for (name, entry) in &generation.containers {
                out.push(if present.contains_key(name.as_str()) {
                    let live = engine.live(name.as_str(), self.root.path())?;
                    let secret: BTreeSet<String> =
                        entry.secret_environment.keys().cloned().collect();
                    match &opened {
                        _ if secret.is_empty() => {
                            check_container(entry, &live, &secret, &self.digests)
                        }
                        Ok(Some((resolved, opened))) => check_container(
                            &with_values(&resolved.containers[name], &opened.values),
                            &live,
                            &secret,
                            &self.digests,
                        ),
                        Ok(None) => not_opened(entry, &live, "they were not decrypted"),
                        Err(why) => not_opened(entry, &live, why),
                    }
                } else {
                    Checked {
                        kind: "container",
                        name: name.to_string(),
                        module: entry.module.to_string(),
                        verdict: "missing",
                        declared: None,
                        found: None,
                        differences: Vec::new(),
                        gaps: Vec::new(),
                    }
                });
            }
        }
        self.check_reach(generation.files.keys())?;
        for (path, file) in &generation.files {
            let mut c = Checked {
                kind: "file",
                name: path.to_string(),
                module: file.module.to_string(),
                verdict: "equal",
                declared: Some(file.blob.to_string()),
                found: None,
                differences: Vec::new(),
                gaps: Vec::new(),
            };
            match self.root.observe(path)? {
                (Observed::File(f), bytes) => {
                    // The contents compared: a plain file's by its digest; a secret's by the
                    // keyed digests of its plaintext and of what is found (never a plain one).
                    let contents = match (&file.secret, &opened) {
                        (None, _) => Some((file.blob, f.hash)),
                        (Some(_), Ok(Some((resolved, _)))) => Some((
                            resolved.files[path].blob,
                            self.digests.digest(&bytes.unwrap_or_default()),
                        )),
                        (Some(_), Ok(None)) => None,
                        (Some(_), Err(why)) => {
                            // Not this node's to read: its plaintext is the switch's.
                            c.gaps.push(Gap {
                                what: "content".into(),
                                found: "a file made from secrets".into(),
                                why: format!("its plaintext cannot be decrypted here: {why}"),
                            });
                            None
                        }
                    };
                    match contents {
                        None => {
                            c.verdict = "not compared";
                            c.declared = None;
                        }
                        Some((declared, found)) => {
                            c.declared = Some(declared.to_string());
                            c.found = Some(found.to_string());
                            let mut differ = |field: &str, declared: String, found: String| {
                                if declared != found {
                                    c.differences.push(Difference {
                                        field: field.into(),
                                        declared,
                                        found,
                                    });
                                }
                            };
                            differ("content", declared.to_string(), found.to_string());
                            differ("mode", String::from(file.mode), String::from(f.mode));
                            differ("owner", file.owner.clone(), self.ids.user_name(f.uid));
                            differ("group", file.group.clone(), self.ids.group_name(f.gid));
                            if !c.differences.is_empty() {
                                c.verdict = "differs";
                            }
                        }
                    }
                }
                _ => c.verdict = "missing",
            }
            out.push(c);
        }
        Ok(out)
    }
}

impl Activator {
    /// Every port published on the node, with the openings that keep it as reachable through
    /// the firewall in force as it is now (none for a port no one outside reaches); `private`
    /// is the private network the declaration will name. `published` names the containers an
    /// engine says publish a port.
    pub fn found_openings(
        &self,
        published: Vec<Published>,
        private: &PrivateNetwork,
    ) -> Result<Vec<FoundOpening>, ActivateError> {
        let observed = self.observed(published)?;
        Ok(mesh_reach::preview::reachable_now(&observed, private)
            .iter()
            .map(declared_as)
            .collect())
    }

    /// Every port published on the node, checked: who reaches it now against who would after
    /// the flip to `managed` (the declaration built managed) — `equal` when the flip leaves it
    /// as it is. A port no one outside reaches, now or after, is not listed.
    pub fn check_openings(
        &self,
        managed: &Generation,
        published: Vec<Published>,
    ) -> Result<Vec<Checked>, ActivateError> {
        let preview = self.preview_flip_as_found(managed, published)?;
        let mut out = Vec::new();
        for port in &preview.ports {
            if port.now.verdict() == Verdict::Closed && port.after.verdict() == Verdict::Closed {
                continue;
            }
            let mut modules: Vec<&str> = managed
                .openings
                .iter()
                .filter(|o| o.protocol == port.protocol && o.port.get() == port.port)
                .map(|o| o.module.as_str())
                .collect();
            modules.dedup();
            let mut c = Checked {
                kind: "opening",
                name: format!(
                    "{}{}/{}",
                    port.port,
                    port.last.map(|l| format!("-{l}")).unwrap_or_default(),
                    port.protocol.as_str()
                ),
                module: if modules.is_empty() {
                    "none".to_owned()
                } else {
                    modules.join(", ")
                },
                verdict: "equal",
                declared: None,
                found: None,
                differences: Vec::new(),
                gaps: Vec::new(),
            };
            match port.change {
                Change::Stays => {}
                Change::Uncertain => {
                    c.verdict = "not compared";
                    c.gaps.push(Gap {
                        what: "reach".into(),
                        found: port
                            .now
                            .unknown
                            .iter()
                            .chain(&port.after.unknown)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join("; "),
                        why: "who reaches it depends on rules the mesh cannot read".into(),
                    });
                }
                _ => {
                    c.verdict = "differs";
                    c.differences.push(Difference {
                        field: "reachable after the flip".into(),
                        declared: port.after.in_words(),
                        found: port.now.in_words(),
                    });
                }
            }
            out.push(c);
        }
        Ok(out)
    }
}

/// The openings that keep a published port as reachable as it is now: one per source, on the
/// paths its publishers take; what an opening cannot say is a gap. No source for a port no one
/// outside reaches.
fn declared_as(f: &Found) -> FoundOpening {
    // A path is opened for the publishers that serve a family someone reaches now: an IPv6
    // socket reached beside an IPv4 DNAT no one reaches gets the incoming path alone.
    let reached = |ipv6: bool| {
        let who = if ipv6 { &f.now.ipv6 } else { &f.now.ipv4 };
        *who != Who::Closed
    };
    let mut paths = BTreeSet::new();
    let mut every_path = BTreeSet::new();
    let mut containers = Vec::new();
    let mut serves_unreached = false;
    for h in &f.held_by {
        let path = match h {
            Holder::Socket { .. } | Holder::Redirect { .. } => TrafficPath::Incoming,
            Holder::Dnat { .. } | Holder::Container { .. } => TrafficPath::Forwarded,
        };
        if let Holder::Container { name, .. } = h {
            containers.push(name.clone());
        }
        let (ipv4, ipv6) = families(h);
        every_path.insert(path);
        if (ipv4 && reached(false)) || (ipv6 && reached(true)) {
            paths.insert(path);
            serves_unreached |= (ipv4 && !reached(false)) || (ipv6 && !reached(true));
        }
    }
    if paths.is_empty() {
        paths = every_path;
    }
    let mut from = Vec::new();
    let mut gaps = Vec::new();
    // (An opening from a range is IPv4's only: only one from anywhere opens both.)
    let anywhere = matches!(
        (&f.now.ipv4, &f.now.ipv6),
        (Who::Anywhere, _) | (_, Who::Anywhere)
    );
    if serves_unreached && anywhere && f.last.is_none() {
        gaps.push(Gap {
            what: "family".into(),
            found: f.now.in_words(),
            why: "an opening opens IPv4 and IPv6 alike: the family no one reaches now would be reached after the flip".into(),
        });
    }
    let name = f
        .held_by
        .iter()
        .find_map(|h| match h {
            Holder::Socket {
                owner: Some(owner), ..
            } => owner.split(" (pid").next().map(str::to_owned),
            _ => None,
        })
        .or_else(|| containers.first().cloned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("port_{}", f.port));
    if f.now.verdict() == Verdict::Closed {
        // No one outside reaches it: nothing to open.
    } else if let Some(last) = f.last {
        gaps.push(Gap {
            what: "ports".into(),
            found: format!("{}-{last}", f.port),
            why: "an opening is one port: a range a DNAT publishes is not declared".into(),
        });
    } else {
        match (&f.now.ipv4, &f.now.ipv6) {
            (Who::Uncertain, _) | (_, Who::Uncertain) => gaps.push(Gap {
                what: "reach".into(),
                found: f.now.unknown.join("; "),
                why: "who reaches it depends on rules the mesh cannot read".into(),
            }),
            (Who::Anywhere, _) | (_, Who::Anywhere) => from.push("anywhere".to_owned()),
            (a, b) => {
                for net in [a, b].into_iter().flat_map(|w| match w {
                    Who::Only(ranges) => ranges.clone(),
                    _ => Vec::new(),
                }) {
                    match net {
                        IpNet::V4(v4) => from.push(v4.to_string()),
                        IpNet::V6(v6) => gaps.push(Gap {
                            what: "source".into(),
                            found: v6.to_string(),
                            why: "an opening's range is IPv4: a reach over IPv6 from a range only is not declared".into(),
                        }),
                    }
                }
            }
        }
    }
    from.sort();
    from.dedup();
    FoundOpening {
        protocol: f.protocol,
        port: f.port,
        paths,
        from,
        name,
        containers,
        held_by: f.held_by.iter().map(Holder::in_words).collect(),
        reach: f.now.in_words(),
        gaps,
    }
}

/// The families a publisher serves, (IPv4, IPv6): a socket's by its address (and
/// `IPV6_V6ONLY`), a rule's by its table's family, a container's by the address it is
/// published on.
fn families(h: &Holder) -> (bool, bool) {
    let of_table = |table: &str| match table.split(' ').next() {
        Some("ip") => (true, false),
        Some("ip6") => (false, true),
        _ => (true, true),
    };
    match h {
        Holder::Socket { address, ipv4, .. } => (*ipv4, address.is_ipv6()),
        Holder::Dnat { table, .. } | Holder::Redirect { table, .. } => of_table(table),
        Holder::Container { address, .. } => {
            if address.contains(':') {
                (false, true)
            } else {
                (true, false)
            }
        }
    }
}

/// A declared container against the live one under its name; `secret` names its environment
/// variables whose values are secrets (given here their values). No value of those, or of one
/// that looks like a credential, is shown, and the spec hashes name each such value by its
/// keyed digest: a plain digest of a spec would let a short secret be guessed offline.
fn check_container(
    entry: &ContainerEntry,
    live: &LiveContainer,
    secret: &BTreeSet<String>,
    key: &DigestKey,
) -> Checked {
    let differences = compare_hiding(entry, live, secret);
    // What a declaration cannot say cannot be compared: never `equal`.
    let verdict = match (differences.is_empty(), live.gaps.is_empty()) {
        (true, true) => "equal",
        (true, false) => "not comparable",
        _ => "differs",
    };
    let keyed = |mut e: Effective| {
        for (k, v) in e.environment.iter_mut() {
            if secret.contains(k) || looks_like_credential(k, v).is_some() {
                *v = format!("keyed {}", key.digest(v.as_bytes()));
            }
        }
        e.digest()
    };
    Checked {
        kind: "container",
        name: live.name.clone(),
        module: entry.module.to_string(),
        verdict,
        declared: Some(keyed(mesh_lib::import::declared_effective(entry, live))),
        found: Some(keyed(live.effective())),
        differences,
        gaps: live.gaps.clone(),
    }
}

/// A declared container with secret environment variables whose values cannot be read here
/// (`why`): not compared, each such variable named.
fn not_opened(entry: &ContainerEntry, live: &LiveContainer, why: &str) -> Checked {
    Checked {
        kind: "container",
        name: live.name.clone(),
        module: entry.module.to_string(),
        verdict: "not compared",
        declared: None,
        found: None,
        differences: Vec::new(),
        gaps: entry
            .secret_environment
            .iter()
            .map(|(k, r)| Gap {
                what: format!("environment {k}"),
                found: format!("a secret ({})", r.file),
                why: format!("its value cannot be decrypted here: {why}"),
            })
            .collect(),
    }
}
