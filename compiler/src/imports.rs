//! Imports stay inside the fleet's tree.
//!
//! A declaration may import catalogue files, templates and data (`import "x"`,
//! `import "x" as 'Text`), and whatever it imports ends up in a generation, its blobs in the
//! store. An import of a file outside the fleet's own sources — `/etc/shadow`, another user's
//! home, the mesh's state directory — would copy it there, and would make the id depend on the
//! machine that builds it. So:
//!
//! - the **fleet's tree** is found the way `Cargo.toml` or `flake.nix` are ([`Tree::find`]):
//!   the folder given outright (`--tree DIR`); else the folder of the fleet file named
//!   (`--fleet FILE`, `MESH_FLEET`) when the declaration is in it; else the folder of the nearest
//!   `fleet.ncl` from the declaration's folder upwards, not above its checkout; else the
//!   enclosing checkout (the nearest folder holding `.git`); else the declaration's own folder.
//!   A marker (`fleet.ncl`, `.git`) in a folder every user may write to, like `/tmp`, makes no
//!   tree: anyone could have put it there. So a fleet copied out of its checkout — a tarball,
//!   a CI artifact, a Nix store path, a read-only folder — is still one tree;
//! - an import may resolve to a file in the tree, or to the mesh's own library (`mesh.ncl`,
//!   installed in the state directory); nothing else. A path is judged after every symlink in it
//!   is resolved, so a link in the tree that points out of it is outside.
//!
//! Nickel reads every import before it evaluates anything, and offers no hook into how it
//! resolves them; so [`check_imports`] walks the imports first, the way Nickel resolves them
//! (the importing file's folder, then the import path), parsing each Nickel file with Nickel's
//! own parser: a file outside the tree is refused, with the span of the import that names it,
//! before Nickel opens it. After the evaluation, [`check_read`] checks every file Nickel did read
//! (a defence in depth: nothing outside the tree reaches the store, whatever the walk missed).

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use nickel_lang_core::ast::{Ast, AstAlloc, Import, InputFormat, Node};
use nickel_lang_core::files::Files;
use nickel_lang_core::parser::grammar::TermParser;
use nickel_lang_core::parser::lexer::Lexer;
use nickel_lang_core::parser::ErrorTolerantParser;
use nickel_lang_core::traverse::{TraverseAlloc, TraverseControl};

use crate::diagnostic::{display_name, MeshDiagnostic, Source, Span};

/// The name of a fleet file, the marker of a fleet's tree.
pub const FLEET_FILE: &str = "fleet.ncl";

/// What the user said about the fleet's tree; nothing said, it is found from the declaration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeRule {
    /// The tree, given outright (`--tree DIR`, `MESH_TREE`).
    pub tree: Option<PathBuf>,
    /// The fleet file named (`--fleet FILE`, `MESH_FLEET`): its folder is the tree of the
    /// declarations in it.
    pub fleet: Option<PathBuf>,
}

/// Why a folder is the fleet's tree: said with every refusal, so a surprising tree explains
/// itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Origin {
    /// Given outright.
    Given,
    /// The folder of this fleet file.
    FleetFile(PathBuf),
    /// The enclosing checkout.
    Checkout,
    /// The declaration's own folder: no fleet file or checkout above it.
    Folder,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Given => write!(f, "given by --tree"),
            Origin::FleetFile(file) => write!(f, "the folder of the fleet file {}", file.display()),
            Origin::Checkout => write!(f, "the checkout: the nearest folder above holding .git"),
            Origin::Folder => write!(
                f,
                "the declaration's own folder: no {FLEET_FILE} or checkout above it"
            ),
        }
    }
}

/// Where imports may lead: the fleet's tree and the mesh's library.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Tree {
    /// The fleet's tree, canonical.
    pub root: PathBuf,
    /// The folder of the mesh's library, canonical.
    pub library: PathBuf,
    /// Why `root` is the tree.
    pub origin: Origin,
}

impl Tree {
    /// The tree of the declaration `node` (a canonical path) as nothing said is found: the
    /// folder of the nearest fleet file from the declaration's folder upwards, not above its
    /// checkout; else the checkout (the nearest folder holding `.git`, a folder or the file of a
    /// git worktree); else the declaration's own folder.
    pub fn of_declaration(node: &Path, library: &Path) -> Self {
        let folder = node.parent().unwrap_or(Path::new("/"));
        let (root, origin) = nearest_marker(folder).unwrap_or((folder.to_owned(), Origin::Folder));
        Self {
            root,
            library: std::fs::canonicalize(library).unwrap_or_else(|_| library.to_owned()),
            origin,
        }
    }

    /// The tree of the declaration `node` (a canonical path) under `rule`: the folder it gives
    /// (the declaration must be in it), else the named fleet file's folder if the declaration
    /// is in it, else [`Tree::of_declaration`]. A folder or fleet file named that is not there
    /// is the user's to fix.
    pub fn find(node: &Path, library: &Path, rule: &TreeRule) -> Result<Self, MeshDiagnostic> {
        let mut tree = Self::of_declaration(node, library);
        if let Some(given) = &rule.tree {
            let root = named(
                given,
                Path::is_dir,
                "the fleet's tree",
                "(--tree, MESH_TREE) is not a folder",
            )?;
            if !node.starts_with(&root) {
                return Err(MeshDiagnostic::new(format!(
                    "{} is outside the fleet's tree {} (given by --tree)",
                    node.display(),
                    root.display()
                ))
                .with_help(
                    "the tree must hold the declaration: name its folder or one above, or \
                     drop --tree (MESH_TREE) to have it found",
                ));
            }
            tree.root = root;
            tree.origin = Origin::Given;
        } else if let Some(fleet) = &rule.fleet {
            let file = named(
                fleet,
                Path::is_file,
                "the fleet file",
                "(--fleet, MESH_FLEET) is not there",
            )?;
            let folder = file.parent().unwrap_or(Path::new("/"));
            if node.starts_with(folder) {
                tree.root = folder.to_owned();
                tree.origin = Origin::FleetFile(file);
            }
        }
        Ok(tree)
    }

    /// Whether `path` may be read: once its symlinks are resolved, it is in the tree or in the
    /// library's folder. A path that cannot be resolved is not allowed.
    pub fn allows(&self, path: &Path) -> bool {
        self.checker().allows(path)
    }

    /// A [`Checker`] of paths against this tree: for many paths, most in a few folders.
    pub fn checker(&self) -> Checker<'_> {
        Checker {
            tree: self,
            folders: std::collections::HashMap::new(),
        }
    }

    fn refusal(&self, what: &str, resolved: &Path) -> String {
        let real = std::fs::canonicalize(resolved).unwrap_or_else(|_| resolved.to_owned());
        let via = if real == resolved {
            String::new()
        } else {
            format!(" (through a symlink, to {})", real.display())
        };
        format!(
            "{what} {}{via}, which is outside the fleet's tree {} ({})",
            resolved.display(),
            self.root.display(),
            self.origin
        )
    }

    fn help(&self) -> String {
        let passed = match self.origin {
            Origin::Folder => passed_over(&self.root)
                .map(|marker| {
                    format!(
                        ". {} was passed over: every user may write to its folder, so anyone \
                         could have put it there (`chmod o-w` the folder, or give --tree)",
                        marker.display()
                    )
                })
                .unwrap_or_default(),
            _ => String::new(),
        };
        format!(
            "a declaration may import files of the fleet's tree only, and the mesh's library \
             (\"mesh.ncl\"). The tree is the folder of the nearest {FLEET_FILE} above the \
             declaration (or of the one --fleet names), else its checkout (.git), else its own \
             folder; --tree DIR gives it outright. Move the file into the tree, or start a \
             fleet where the tree should be: `mesh init DIR`{passed}"
        )
    }
}

/// Checks paths against a [`Tree`] as [`Tree::allows`] does, resolving each folder once: a
/// file that is no symlink, named plainly (no `.` or `..`), is its folder's real path and its
/// name. Resolving every path whole would ask the kernel for every component of every path
/// (a build reads a few hundred files).
pub struct Checker<'t> {
    tree: &'t Tree,
    /// The real path of each folder resolved (`None`: it cannot be).
    folders: std::collections::HashMap<PathBuf, Option<PathBuf>>,
}

impl Checker<'_> {
    /// [`Tree::allows`].
    pub fn allows(&mut self, path: &Path) -> bool {
        self.real(path).is_some_and(|real| {
            real.starts_with(&self.tree.root) || real.starts_with(&self.tree.library)
        })
    }

    /// `path` with every symlink resolved: [`std::fs::canonicalize`].
    fn real(&mut self, path: &Path) -> Option<PathBuf> {
        use std::path::Component;
        let plain = path.is_absolute()
            && path
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        let (Some(folder), Some(name), true) = (path.parent(), path.file_name(), plain) else {
            return std::fs::canonicalize(path).ok();
        };
        if std::fs::symlink_metadata(path)
            .ok()?
            .file_type()
            .is_symlink()
        {
            return std::fs::canonicalize(path).ok();
        }
        let real = self
            .folders
            .entry(folder.to_owned())
            .or_insert_with(|| std::fs::canonicalize(folder).ok())
            .as_ref()?;
        Some(real.join(name))
    }
}

/// `path` as the user named it, canonical, if it is there and `kind` holds of it; else the
/// user's to fix: "`what` PATH `wrong`".
fn named(
    path: &Path,
    kind: fn(&Path) -> bool,
    what: &str,
    wrong: &str,
) -> Result<PathBuf, MeshDiagnostic> {
    std::fs::canonicalize(path)
        .ok()
        .filter(|p| kind(p))
        .ok_or_else(|| MeshDiagnostic::new(format!("{what} {} {wrong}", path.display())))
}

/// From `folder` upwards, the first folder holding a fleet file or a checkout's `.git` (no fleet
/// file is looked for above a checkout); a folder every user may write to is passed over.
fn nearest_marker(folder: &Path) -> Option<(PathBuf, Origin)> {
    folder
        .ancestors()
        .filter(|d| !writable_by_all(d))
        .find_map(marker_in)
}

/// The marker in `dir`, if it holds one: a fleet file, else a checkout's `.git`.
fn marker_in(dir: &Path) -> Option<(PathBuf, Origin)> {
    let fleet = dir.join(FLEET_FILE);
    if fleet.is_file() {
        Some((dir.to_owned(), Origin::FleetFile(fleet)))
    } else if dir.join(".git").exists() {
        Some((dir.to_owned(), Origin::Checkout))
    } else {
        None
    }
}

/// The nearest marker (a fleet file, a checkout's `.git`) from `folder` upwards that
/// [`nearest_marker`] passed over, its folder being writable by every user.
fn passed_over(folder: &Path) -> Option<PathBuf> {
    let (dir, origin) = folder
        .ancestors()
        .filter(|d| writable_by_all(d))
        .find_map(marker_in)?;
    Some(match origin {
        Origin::FleetFile(file) => file,
        _ => dir.join(".git"),
    })
}

/// The fleet file a command run in `folder` (absolute) means when none is named: the nearest
/// `fleet.ncl` from there upwards, not above a checkout — as Cargo finds `Cargo.toml`.
pub fn nearest_fleet_file(folder: &Path) -> Option<PathBuf> {
    match nearest_marker(folder) {
        Some((_, Origin::FleetFile(file))) => Some(file),
        _ => None,
    }
}

/// Whether every user may write to `dir` (`/tmp`): a marker there could be anyone's.
pub fn writable_by_all(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o002 != 0)
}

/// Nickel's normalisation of a path: absolute, `.` dropped, `..` removing the component before
/// it, symlinks not resolved (the kernel resolves them when the file is opened).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => out.push(c.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    out
}

/// One `import "PATH"` in a source: the path as written, its format, and where it is.
struct Found {
    path: PathBuf,
    format: InputFormat,
    range: std::ops::Range<usize>,
}

/// The imports written in a file, as the walk remembers them for a text it parsed before (by
/// the digest of its bytes): parsing hundreds of module files again is most of a walk.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Written {
    /// The path as written.
    pub path: PathBuf,
    /// Whether it is imported as Nickel (else as text or data).
    pub nickel: bool,
    /// Where the import is in the file.
    pub range: std::ops::Range<usize>,
}

/// The imports of texts parsed before, by the hex digest of their bytes.
pub type Parsed = std::collections::BTreeMap<String, Vec<Written>>;

/// The path imports of `text`, parsed by Nickel's own parser. A source that does not parse is
/// Nickel's to report: it has no imports to walk (Nickel does not resolve them either).
fn imports_of(text: &str) -> Vec<Found> {
    // An import is written with the keyword `import`: a text without the word has none, and
    // most module files are such texts. Parsing is most of a walk.
    if !text.contains("import") {
        return Vec::new();
    }
    let alloc = AstAlloc::new();
    let mut files = Files::empty();
    let id = files.add("source", text);
    let Ok((ast, _errors)) = TermParser::new().parse_tolerant(&alloc, id, Lexer::new(text)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let _no_early_stop: Option<()> = ast.traverse_ref(
        &mut |node: &Ast<'_>, _: &()| {
            if let Node::Import(Import::Path { path, format }) = &node.node {
                let range = node
                    .pos
                    .as_opt_ref()
                    .map_or(0..0, |s| s.start.to_usize()..s.end.to_usize());
                out.push(Found {
                    path: PathBuf::from(path),
                    format: *format,
                    range,
                });
            }
            TraverseControl::Continue
        },
        &(),
    );
    out
}

/// The files a declaration reaches through its imports, as the walk found them: each Nickel
/// file with the files it imports (resolved as Nickel resolves them), and the digest of every
/// file's bytes as the walk read them. What the per-module evaluation cache keys on
/// ([`crate::spine`]).
#[derive(Debug, Default)]
pub struct Graph {
    /// Each Nickel file reached, with the files it imports (Nickel or not).
    pub imports: std::collections::BTreeMap<PathBuf, Vec<PathBuf>>,
    /// Each Nickel file's text, as read.
    pub texts: std::collections::BTreeMap<PathBuf, std::sync::Arc<str>>,
    /// The blake3 of each file's bytes, as read (a file that could not be read is absent).
    pub digests: std::collections::BTreeMap<PathBuf, [u8; 32]>,
}

impl Graph {
    /// `file` and every file it reaches through imports, sorted.
    pub fn closure(&self, file: &Path) -> BTreeSet<PathBuf> {
        let mut seen = BTreeSet::new();
        let mut queue = vec![file.to_owned()];
        while let Some(f) = queue.pop() {
            if seen.insert(f.clone()) {
                if let Some(next) = self.imports.get(&f) {
                    queue.extend(next.iter().cloned());
                }
            }
        }
        seen
    }

    /// Every file reached.
    pub fn files(&self) -> BTreeSet<PathBuf> {
        self.digests.keys().cloned().collect()
    }
}

/// Where Nickel finds `import "path"` written in `file`: the importing file's folder first,
/// then each of `import_paths`; the first candidate that exists.
pub fn resolve(file: &Path, path: &Path, import_paths: &[PathBuf]) -> Option<PathBuf> {
    let folder = file.parent().unwrap_or(Path::new("/")).to_owned();
    std::iter::once(&folder)
        .chain(import_paths)
        .map(|dir| normalize(&dir.join(path)))
        .find(|c| c.exists())
}

/// Walks every import reachable from `node` (canonical) as Nickel will resolve them — first
/// in the importing file's folder, then in each of `import_paths` — and refuses the first that
/// resolves outside `tree`, pointing at it. Nothing outside the tree is opened.
pub fn check_imports(
    node: &Path,
    import_paths: &[PathBuf],
    tree: &Tree,
) -> Result<(), MeshDiagnostic> {
    walk(node, import_paths, tree).map(|_| ())
}

/// [`check_imports`], and the graph of what it walked.
pub fn walk(node: &Path, import_paths: &[PathBuf], tree: &Tree) -> Result<Graph, MeshDiagnostic> {
    walk_with(node, import_paths, tree, &Parsed::new()).map(|(graph, _)| graph)
}

/// [`walk`], taking the imports of a text it already `known` from there instead of parsing it
/// again; with the graph, the imports of every Nickel file it walked (to remember for the next).
pub fn walk_with(
    node: &Path,
    import_paths: &[PathBuf],
    tree: &Tree,
    known: &Parsed,
) -> Result<(Graph, Parsed), MeshDiagnostic> {
    let mut graph = Graph::default();
    let mut parsed = Parsed::new();
    let mut checker = tree.checker();
    if !checker.allows(node) {
        // The declaration itself is in its tree by construction; a vanished one is Nickel's
        // to report.
        return Ok((graph, parsed));
    }
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut queue = vec![node.to_owned()];
    // Texts parsed ahead, across the cores, while the walk goes on in its own order.
    let mut ahead = Parsed::new();
    while let Some(file) = queue.pop() {
        if !seen.insert(file.clone()) {
            continue;
        }
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        let digest = blake3::hash(&bytes);
        graph.digests.insert(file.clone(), *digest.as_bytes());
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        let hex = digest.to_hex().to_string();
        // Only a first walk (nothing known) has many texts to parse: a later one has the few
        // that changed, not worth reading every queued file twice for.
        if known.is_empty() && !ahead.contains_key(&hex) && queue.len() > 1 {
            ahead.extend(parse_ahead(&queue, &seen, known));
        }
        let written = match known.get(&hex).or_else(|| ahead.get(&hex)) {
            Some(w) => w.clone(),
            None => written_in(&text),
        };
        let mut edges = Vec::new();
        for import in &written {
            let Some(resolved) = resolve(&file, &import.path, import_paths) else {
                continue; // not found: Nickel reports it
            };
            if !checker.allows(&resolved) {
                return Err(MeshDiagnostic::new(
                    tree.refusal(&format!("{} imports", display_name(&file)), &resolved),
                )
                .with_span(Span {
                    source: Source {
                        name: display_name(&file),
                        text: text.clone(),
                    },
                    range: import.range.clone(),
                    label: "imported here".into(),
                })
                .with_help(tree.help()));
            }
            if import.nickel && resolved.is_file() {
                queue.push(resolved.clone());
            } else if !graph.digests.contains_key(&resolved) {
                // Text and data: their bytes are what the evaluation reads.
                if let Ok(bytes) = std::fs::read(&resolved) {
                    graph
                        .digests
                        .insert(resolved.clone(), *blake3::hash(&bytes).as_bytes());
                }
            }
            edges.push(resolved);
        }
        graph.imports.insert(file.clone(), edges);
        graph.texts.insert(file, text.into());
        parsed.insert(hex, written);
    }
    Ok((graph, parsed))
}

/// The imports written in `text`.
fn written_in(text: &str) -> Vec<Written> {
    imports_of(text)
        .into_iter()
        .map(|f| Written {
            path: f.path,
            nickel: f.format == InputFormat::Nickel,
            range: f.range,
        })
        .collect()
}

/// The imports of the texts `queue` holds that are neither `seen` nor `known`, parsed on every
/// core (a cold walk of hundreds of module files is mostly parsing), by the digest of each
/// text. What the walk does with them, and in which order, is its own: a file read again
/// later with other bytes is parsed again then.
fn parse_ahead(queue: &[PathBuf], seen: &BTreeSet<PathBuf>, known: &Parsed) -> Parsed {
    let todo: BTreeSet<&PathBuf> = queue.iter().filter(|f| !seen.contains(*f)).collect();
    let todo: Vec<&PathBuf> = todo.into_iter().collect();
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let per = todo.len().div_ceil(cores).max(1);
    std::thread::scope(|scope| {
        let parts: Vec<_> = todo
            .chunks(per)
            .map(|part| {
                scope.spawn(move || {
                    let mut out = Parsed::new();
                    for file in part {
                        let Ok(text) = std::fs::read_to_string(file) else {
                            continue;
                        };
                        let hex = blake3::hash(text.as_bytes()).to_hex().to_string();
                        if !known.contains_key(&hex) {
                            out.insert(hex, written_in(&text));
                        }
                    }
                    out
                })
            })
            .collect();
        parts
            .into_iter()
            .filter_map(|p| p.join().ok())
            .flatten()
            .collect()
    })
}

/// Checks every file an evaluation read (absolute paths, as Nickel named them): the first that
/// is outside `tree` is refused.
pub fn check_read<'a>(
    read: impl IntoIterator<Item = &'a Path>,
    tree: &Tree,
) -> Result<(), MeshDiagnostic> {
    let mut checker = tree.checker();
    for path in read {
        if !checker.allows(path) {
            return Err(
                MeshDiagnostic::new(tree.refusal("the declaration read", path))
                    .with_help(tree.help()),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A text without the word has no import, unparsed; with the word only in a comment or a
    /// string it is parsed, and has none either.
    #[test]
    fn the_word_import_is_needed_for_an_import() {
        assert!(imports_of("{ a = 1, b = \"x\" }").is_empty());
        assert!(imports_of("# import \"a.ncl\"\n{ a = \"import b.ncl\" }").is_empty());
        assert_eq!(imports_of("{ a = import \"a.ncl\" }").len(), 1);
    }

    /// Imports are found wherever they are, with their format and the span of the import.
    #[test]
    fn finds_every_import_with_its_span() {
        let text = r#"let a = import "a.ncl" in
{ x = import "../b.txt" as 'Text, y = [fun s => import "/etc/c.json"], z = a }"#;
        let found = imports_of(text);
        let got: Vec<(String, InputFormat, &str)> = found
            .iter()
            .map(|f| {
                (
                    f.path.display().to_string(),
                    f.format,
                    &text[f.range.clone()],
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("a.ncl".into(), InputFormat::Nickel, "import \"a.ncl\""),
                (
                    "../b.txt".into(),
                    InputFormat::Text,
                    "import \"../b.txt\" as 'Text"
                ),
                (
                    "/etc/c.json".into(),
                    InputFormat::Json,
                    "import \"/etc/c.json\""
                ),
            ]
        );
    }

    /// Folders under a private temporary one: `base` canonical, `dirs` made in it.
    fn folders(dirs: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        for d in dirs {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        let lib = base.join("lib");
        std::fs::create_dir(&lib).unwrap();
        (dir, base, lib)
    }

    /// Found from the declaration: the nearest fleet file's folder, else the checkout, else
    /// the declaration's folder; each says why it is the tree.
    #[test]
    fn the_tree_is_the_fleet_files_folder_else_the_checkout_else_the_folder() {
        let (_dir, base, lib) = folders(&["repo/fleet/nodes/deep", "repo/other", "loose"]);
        std::fs::create_dir(base.join("repo/.git")).unwrap();
        std::fs::write(base.join("repo/fleet/fleet.ncl"), "{}").unwrap();
        let t = Tree::of_declaration(&base.join("repo/fleet/nodes/deep/n.ncl"), &lib);
        assert_eq!(t.root, base.join("repo/fleet"));
        assert_eq!(
            t.origin,
            Origin::FleetFile(base.join("repo/fleet/fleet.ncl"))
        );
        let t = Tree::of_declaration(&base.join("repo/other/n.ncl"), &lib);
        assert_eq!((t.root, t.origin), (base.join("repo"), Origin::Checkout));
        let t = Tree::of_declaration(&base.join("loose/n.ncl"), &lib);
        assert_eq!((t.root, t.origin), (base.join("loose"), Origin::Folder));
    }

    /// A fleet file above the declaration's checkout is not its fleet's: the search stops at
    /// the checkout, as Nix's for a flake does.
    #[test]
    fn no_fleet_file_is_looked_for_above_a_checkout() {
        let (_dir, base, lib) = folders(&["home/repo/nodes"]);
        std::fs::write(base.join("home/fleet.ncl"), "{}").unwrap();
        std::fs::create_dir(base.join("home/repo/.git")).unwrap();
        let t = Tree::of_declaration(&base.join("home/repo/nodes/n.ncl"), &lib);
        assert_eq!(
            (t.root, t.origin),
            (base.join("home/repo"), Origin::Checkout)
        );
    }

    /// A marker in a folder every user may write to (like /tmp) makes no tree: anyone could
    /// have put it there.
    #[test]
    fn a_marker_in_a_folder_open_to_all_makes_no_tree() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, base, lib) = folders(&["shared/mine/nodes"]);
        std::fs::write(base.join("shared/fleet.ncl"), "{}").unwrap();
        std::fs::create_dir(base.join("shared/.git")).unwrap();
        std::fs::set_permissions(base.join("shared"), std::fs::Permissions::from_mode(0o1777))
            .unwrap();
        let t = Tree::of_declaration(&base.join("shared/mine/nodes/n.ncl"), &lib);
        // What an import refused then says names the marker passed over, and why.
        let help = t.help();
        assert!(
            help.contains(&format!(
                "{} was passed over: every user may write to its folder",
                base.join("shared/fleet.ncl").display()
            )),
            "{help}"
        );
        assert_eq!(
            (t.root, t.origin),
            (base.join("shared/mine/nodes"), Origin::Folder)
        );
        assert_eq!(nearest_fleet_file(&base.join("shared/mine")), None);
        // A tree found has nothing passed over to say.
        let (_dir, base, lib) = folders(&["fleet/nodes"]);
        std::fs::write(base.join("fleet/fleet.ncl"), "{}").unwrap();
        let t = Tree::of_declaration(&base.join("fleet/nodes/n.ncl"), &lib);
        assert!(!t.help().contains("passed over"), "{}", t.help());
    }

    /// `--fleet` names the tree of the declarations in its folder (and only theirs); `--tree`
    /// gives it outright, and refuses a declaration outside it and a folder that is not there.
    #[test]
    fn the_tree_said_outright_wins() {
        let (_dir, base, lib) = folders(&["fleet/nodes", "elsewhere"]);
        std::fs::write(base.join("fleet/my-fleet.ncl"), "{}").unwrap();
        let node = base.join("fleet/nodes/n.ncl");
        let named = TreeRule {
            tree: None,
            fleet: Some(base.join("fleet/my-fleet.ncl")),
        };
        let t = Tree::find(&node, &lib, &named).unwrap();
        assert_eq!(t.root, base.join("fleet"));
        let t = Tree::find(&base.join("elsewhere/n.ncl"), &lib, &named).unwrap();
        assert_eq!((t.root, t.origin), (base.join("elsewhere"), Origin::Folder));
        let missing = TreeRule {
            tree: None,
            fleet: Some(base.join("fleet/nope.ncl")),
        };
        assert!(Tree::find(&node, &lib, &missing)
            .unwrap_err()
            .to_string()
            .contains("nope.ncl (--fleet, MESH_FLEET) is not there"));
        let given = |d: &str| TreeRule {
            tree: Some(base.join(d)),
            fleet: named.fleet.clone(),
        };
        let t = Tree::find(&node, &lib, &given("fleet/nodes")).unwrap();
        assert_eq!(
            (t.root, t.origin),
            (base.join("fleet/nodes"), Origin::Given)
        );
        let e = Tree::find(&node, &lib, &given("elsewhere")).unwrap_err();
        assert!(e.to_string().contains("is outside the fleet's tree"), "{e}");
        let e = Tree::find(&node, &lib, &given("nope")).unwrap_err();
        assert!(e.to_string().contains("is not a folder"), "{e}");
    }
}
