//! What `mesh import` reads on the node, and `mesh import --check`'s comparison of a built
//! declaration with what runs. Reads only: no container is started, stopped, renamed or
//! created, no file is opened for writing, nothing goes into the store or the node record.
//!
//! The node side of an import is this file: the fleet side (`mesh_fleet::import`) writes the
//! Nickel from what it returns, so an import over SSH is this read on the node and the writing
//! on the workstation.

use mesh_lib::import::{compare, Difference, Gap, LiveContainer};
use mesh_lib::model::{ContainerEntry, FileMode};
use mesh_lib::{BlobHash, Generation, TargetPath};
use serde::Serialize;

use crate::docker::{DockerError, Engine};
use crate::node::Node;
use crate::root::Observed;
use crate::switch::ActivateError;

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
/// is, except the mesh's own and the found ones a take kept (`NAME.found`).
pub fn live_containers(
    engine: &Engine,
    names: &[String],
    root: &std::path::Path,
) -> Result<Vec<LiveContainer>, DockerError> {
    let present = engine.containers()?;
    let wanted: Vec<&String> = if names.is_empty() {
        present
            .iter()
            .filter(|(n, p)| !p.is_ours() && !n.ends_with(crate::docker::FOUND_SUFFIX))
            .map(|(n, _)| n)
            .collect()
    } else {
        names.iter().collect()
    };
    wanted.into_iter().map(|n| engine.live(n, root)).collect()
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
    /// `equal`, `differs`, `missing` (declared, not on the machine), or `not compared`.
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

impl Node {
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
        if !generation.containers.is_empty() {
            let engine = Engine::connect()?;
            let present = engine.containers()?;
            for (name, entry) in &generation.containers {
                out.push(if present.contains_key(name.as_str()) {
                    check_container(entry, &engine.live(name.as_str(), self.root.path())?)
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
                (Observed::File(f), _) => {
                    if file.secret.is_some() {
                        // The declared content is a ciphertext (or a template): its plaintext
                        // is the node's at switch time only.
                        c.verdict = "not compared";
                        c.declared = None;
                        c.gaps.push(Gap {
                            what: "content".into(),
                            found: "a file made from secrets".into(),
                            why: "its plaintext is decrypted at switch time, never built".into(),
                        });
                    } else {
                        c.found = Some(f.hash.to_string());
                        let mut differ = |field: &str, declared: String, found: String| {
                            if declared != found {
                                c.differences.push(Difference {
                                    field: field.into(),
                                    declared,
                                    found,
                                });
                            }
                        };
                        differ("content", file.blob.to_string(), f.hash.to_string());
                        differ("mode", String::from(file.mode), String::from(f.mode));
                        differ("owner", file.owner.clone(), self.ids.user_name(f.uid));
                        differ("group", file.group.clone(), self.ids.group_name(f.gid));
                        if !c.differences.is_empty() {
                            c.verdict = "differs";
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

/// A declared container against the live one under its name.
fn check_container(entry: &ContainerEntry, live: &LiveContainer) -> Checked {
    let defaults = live.image_defaults.clone().unwrap_or_default();
    let differences = compare(entry, live);
    let verdict = if differences.is_empty() && live.gaps.is_empty() {
        "equal"
    } else {
        "differs"
    };
    Checked {
        kind: "container",
        name: live.name.clone(),
        module: entry.module.to_string(),
        verdict,
        declared: Some(mesh_lib::import::Effective::of_declared(entry, &defaults).digest()),
        found: Some(live.effective().digest()),
        differences,
        gaps: live.gaps.clone(),
    }
}
