//! Evaluating a node declaration with nickel-lang-core.
//!
//! The node record's pinned port settings enter the evaluation as overrides of
//! `settings.ports.NAME` at the highest priority: `mesh.node` reads `settings` recursively, so a
//! pinned port flows into every module that reads it, exactly as if the declaration said it.
//!
//! The evaluated value is kept (with Nickel's position table) so that a rejection found later, in
//! Rust, can point at the source span of the offending value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nickel_lang_core::error::{Diagnostic, IntoDiagnostics, LabelStyle};
use nickel_lang_core::eval::cache::CacheImpl;
use nickel_lang_core::eval::value::NickelValue;
use nickel_lang_core::files::{FileId, Files};
use nickel_lang_core::identifier::LocIdent;
use nickel_lang_core::program::{FieldOverride, FieldPath, Program, ProgramBuilder};
use nickel_lang_core::term::MergePriority;
use serde_json::value::RawValue;

use crate::diagnostic::{display_name, MeshDiagnostic, Source, Span};

/// One step into an evaluated value: a field or an array index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A record field (most are named in the code: they cost no allocation).
    Field(std::borrow::Cow<'static, str>),
    /// An array element.
    Index(usize),
}

/// A location in the evaluated value, e.g. `modules[2].files[0].path`.
pub type Pointer = Vec<Step>;

/// Shows a pointer the way a person would write the field path.
pub fn show_pointer(p: &[Step]) -> String {
    let mut out = String::new();
    for s in p {
        match s {
            Step::Field(f) if out.is_empty() => out.push_str(f),
            Step::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// A finished evaluation: the exported value, and what is needed to point into its sources.
pub struct Evaluation {
    program: Program<CacheImpl>,
    value: NickelValue,
}

/// A source file the evaluation read, and the blake3 of the text it read.
pub type ReadSource = (PathBuf, [u8; 32]);

/// Evaluates `node` with `library_dir` on the import path and `pinned` ports overriding the
/// declaration's. Reads whatever the declaration imports: see [`evaluate_in`] for an
/// evaluation confined to the fleet's tree.
pub fn evaluate(
    node: &Path,
    library_dir: &Path,
    pinned: &BTreeMap<String, u16>,
) -> Result<Evaluation, MeshDiagnostic> {
    let (mut program, result) = run(node, None, library_dir, pinned)?;
    finish(&mut program, result).map(|value| Evaluation { program, value })
}

/// [`evaluate`], confined to `tree`: every file Nickel read is checked to be in the tree (or the
/// mesh's library) before anything of the evaluation is kept or shown — a Nickel error about a
/// file outside it would quote that file.
pub fn evaluate_in(
    node: &Path,
    library_dir: &Path,
    pinned: &BTreeMap<String, u16>,
    tree: &crate::imports::Tree,
) -> Result<Evaluation, MeshDiagnostic> {
    let (mut program, result) = run(node, None, library_dir, pinned)?;
    let read = read_paths(&program.files());
    crate::imports::check_read(read.iter().map(PathBuf::as_path), tree)?;
    finish(&mut program, result).map(|value| Evaluation { program, value })
}

/// [`evaluate_in`] of `text` as if it were the file `node`: its imports are resolved from
/// `node`'s folder. What a module is evaluated in apart from the others
/// ([`crate::spine::Spine::wrapper`]).
pub fn evaluate_text_in(
    node: &Path,
    text: String,
    library_dir: &Path,
    pinned: &BTreeMap<String, u16>,
    tree: &crate::imports::Tree,
) -> Result<Evaluation, MeshDiagnostic> {
    let (mut program, result) = run(node, Some(text), library_dir, pinned)?;
    let read = read_paths(&program.files());
    crate::imports::check_read(read.iter().map(PathBuf::as_path), tree)?;
    finish(&mut program, result).map(|value| Evaluation { program, value })
}

type Outcome = Result<NickelValue, nickel_lang_core::error::Error>;

fn run(
    node: &Path,
    text: Option<String>,
    library_dir: &Path,
    pinned: &BTreeMap<String, u16>,
) -> Result<(Program<CacheImpl>, Outcome), MeshDiagnostic> {
    let overrides = pinned.iter().map(|(name, port)| FieldOverride {
        path: FieldPath(vec![
            LocIdent::from("settings"),
            LocIdent::from("ports"),
            LocIdent::from(name.as_str()),
        ]),
        value: port.to_string(),
        priority: MergePriority::Top,
    });
    let builder = match text {
        None => ProgramBuilder::new().add_path(node.as_os_str()),
        Some(text) => ProgramBuilder::new().add_source_string(text, node.as_os_str()),
    };
    let mut program: Program<CacheImpl> = builder
        .add_import_paths([library_dir])
        .add_overrides(overrides)
        .build()
        .map_err(|e| MeshDiagnostic::new(format!("cannot read {}: {e}", display_name(node))))?;
    let result = program.eval_full_for_export();
    Ok((program, result))
}

fn finish(
    program: &mut Program<CacheImpl>,
    result: Outcome,
) -> Result<NickelValue, MeshDiagnostic> {
    result.map_err(|e| {
        let mut files = program.files();
        let diagnostics = e.into_diagnostics(&mut files);
        nickel_to_mesh(&files, diagnostics)
    })
}

/// Every file on disk Nickel read: its absolute names past the standard library's.
fn read_paths(files: &Files) -> Vec<PathBuf> {
    let count = files.filenames().count();
    let first = files.stdlib_modules().count();
    (first..count)
        .filter_map(file_id)
        .map(|id| PathBuf::from(files.name(id)))
        .filter(|name| name.is_absolute())
        .collect()
}

impl Evaluation {
    /// The value as a typed structure (Nickel's values deserialise directly; integers stay
    /// integers).
    pub fn deserialize<T: serde::de::DeserializeOwned>(&self) -> Result<T, String> {
        T::deserialize(self.value.clone()).map_err(|e| e.to_string())
    }

    /// The value as JSON text, the way Nickel exports it (an enum tag is its name as a
    /// string), compact: what the per-module cache keeps of a module.
    pub fn to_json(&self) -> Result<Box<RawValue>, String> {
        json_of(&self.value)
    }

    /// Every file on disk the evaluation read (the declaration, its imports, the library, text
    /// imports), with the blake3 of exactly the text that was evaluated.
    pub fn read_sources(&self) -> Vec<ReadSource> {
        sources_read(&self.program.files())
    }

    /// The source span of the value at `pointer`, if Nickel kept one.
    pub fn span_at(&self, pointer: &[Step], label: impl Into<String>) -> Option<Span> {
        let mut v = &self.value;
        for step in pointer {
            v = match step {
                Step::Field(f) => {
                    let record = v.as_record()?.into_opt()?;
                    record
                        .fields
                        .get(&LocIdent::from(f.as_ref()))?
                        .value
                        .as_ref()?
                }
                Step::Index(i) => v.as_array()?.into_opt()?.array.get(*i)?,
            };
        }
        let span = v.pos(self.program.pos_table()).into_opt()?;
        let files = self.program.files();
        Some(Span {
            source: source_of(&files, span.src_id),
            range: span.start.to_usize()..span.end.to_usize(),
            label: label.into(),
        })
    }
}

/// A value as JSON text, the way Nickel exports it (its export is this serialisation, pretty
/// printed), written once: a chunk's answer and the cache's entries carry the text itself.
fn json_of(value: &NickelValue) -> Result<Box<RawValue>, String> {
    serde_json::value::to_raw_value(value).map_err(|e| e.to_string())
}

/// Every file on disk in `files` past the standard library, with the blake3 of its text.
fn sources_read(files: &Files) -> Vec<ReadSource> {
    let count = files.filenames().count();
    let first = files.stdlib_modules().count();
    sources_of(files, (first..count).filter_map(file_id))
}

/// Those of `ids` that are files on disk, with the blake3 of their text, sorted.
fn sources_of(files: &Files, ids: impl Iterator<Item = FileId>) -> Vec<ReadSource> {
    let mut out = Vec::new();
    for id in ids {
        let name = Path::new(files.name(id));
        if name.is_absolute() && name.is_file() {
            out.push((
                name.to_owned(),
                *blake3::hash(files.source(id).as_bytes()).as_bytes(),
            ));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `FileId` has no public constructor; it is serde-deserialisable from its index.
fn file_id(index: usize) -> Option<FileId> {
    serde_json::from_value(serde_json::Value::from(index)).ok()
}

fn source_of(files: &Files, id: FileId) -> Source {
    let name = Path::new(files.name(id));
    Source {
        name: display_name(name),
        text: files.source(id).to_owned(),
    }
}

/// Nickel's diagnostics, in the mesh's voice: the first becomes the error, the rest follow it.
fn nickel_to_mesh(files: &Files, diagnostics: Vec<Diagnostic<FileId>>) -> MeshDiagnostic {
    let mut out: Option<MeshDiagnostic> = None;
    for d in diagnostics {
        let mut message = d
            .message
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(": ");
        if out.is_none() {
            message = format!("the declaration does not evaluate: {message}");
        }
        let mut m = MeshDiagnostic::new(message);
        let mut labels = d.labels;
        // The primary label first, so it picks the diagnostic's source.
        labels.sort_by_key(|l| l.style != LabelStyle::Primary);
        for l in labels {
            m = m.with_span(Span {
                source: source_of(files, l.file_id),
                range: l.range,
                label: l.message,
            });
        }
        if !d.notes.is_empty() {
            m = m.with_help(d.notes.join("\n"));
        }
        match &mut out {
            None => out = Some(m),
            Some(first) => first.related.push(m),
        }
    }
    out.unwrap_or_else(|| MeshDiagnostic::new("the declaration does not evaluate"))
}

/// An evaluator whose standard library is loaded before it is given the declaration: loading
/// Nickel's standard library is more than half of evaluating one module, and a build that
/// evaluates one module changed can have it loaded while it walks the declaration and reads its
/// caches. It lives on a thread of its own (Nickel's evaluator is not `Send`), which waits for
/// the texts to evaluate, one after another, keeping what it parsed and evaluated of the files
/// they import (the mesh's library first): an evaluator serving several builds
/// ([`crate::serving`]) parses them once. What it keeps of a file is what it read first, or
/// again once the file's modification time changed.
pub(crate) struct Warm {
    ask: std::sync::mpsc::Sender<Ask>,
    answer: std::sync::Mutex<std::sync::mpsc::Receiver<Option<Evaluated>>>,
}

/// An evaluation's value as JSON, and the files it read.
type Evaluated = (Box<RawValue>, Vec<ReadSource>);

/// What [`Warm`] is asked.
enum Ask {
    /// Load the mesh's library from this folder too (every node imports it): parsed,
    /// typechecked and transformed then, it is found so when the declaration imports it by the
    /// same path; if that fails there, it is done at the import.
    Library(PathBuf),
    /// Evaluate this.
    Job(Job),
}

/// What [`Warm`] is to evaluate.
struct Job {
    node: PathBuf,
    library_dir: PathBuf,
    pinned: BTreeMap<String, u16>,
    tree: crate::imports::Tree,
    text: String,
    /// Only the node's `modules`: its head is known already.
    modules_only: bool,
}

/// The evaluator thread's stack: Nickel recurses as deep as the declaration nests, and on the
/// main thread it has the process's whole stack.
const WARM_STACK: usize = 64 << 20;

type WarmContext = nickel_lang_core::eval::VmContext<nickel_lang_core::cache::CacheHub, CacheImpl>;

impl Warm {
    /// Starts loading the standard library, for the evaluations to come ([`Warm::evaluate`]).
    pub(crate) fn start() -> Option<Self> {
        let (ask, asked) = std::sync::mpsc::channel::<Ask>();
        let (answered, answer) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("mesh-evaluator".into())
            .stack_size(WARM_STACK)
            .spawn(move || {
                let mut context = Context::new();
                // Until the last sender goes: no more builds to serve.
                while let Ok(asked) = asked.recv() {
                    match asked {
                        Ask::Library(dir) => context.library(dir),
                        Ask::Job(job) => {
                            let answer = context.run(&job).unwrap_or_else(|Stale| {
                                crate::memory::discard(std::mem::replace(
                                    &mut context,
                                    Context::new(),
                                ));
                                context.run(&job).ok().flatten()
                            });
                            let _gone = answered.send(answer);
                            crate::memory::collect_garbage();
                        }
                    }
                }
                crate::memory::discard(context);
            })
            .ok()?;
        Some(Warm {
            ask,
            answer: std::sync::Mutex::new(answer),
        })
    }

    /// Has the mesh's library in `library_dir` loaded once the standard library is, before the
    /// evaluation is asked for.
    pub(crate) fn library(&self, library_dir: &Path) {
        let _gone_means_no_evaluation = self.ask.send(Ask::Library(library_dir.to_owned()));
    }

    /// Evaluates `text` as [`evaluate_text_in`] would, as if it were the file `node`, with
    /// `library_dir` on the import path, `pinned` ports overriding the declaration's, every
    /// file read confined to `tree`: its exported value as JSON and the files it read; `None`
    /// if anything failed (the caller then evaluates the way that reports it). `modules_only`:
    /// `text` is a node's declaration, and only its `modules` are evaluated (with the pins).
    pub(crate) fn evaluate(
        &self,
        node: &Path,
        library_dir: &Path,
        pinned: &BTreeMap<String, u16>,
        tree: &crate::imports::Tree,
        text: String,
        modules_only: bool,
    ) -> Option<Evaluated> {
        // One evaluation at a time: the answer is the one to this job.
        let answer = self.answer.lock().ok()?;
        self.ask
            .send(Ask::Job(Job {
                node: node.to_owned(),
                library_dir: library_dir.to_owned(),
                pinned: pinned.clone(),
                tree: tree.clone(),
                text,
                modules_only,
            }))
            .ok()?;
        answer.recv().ok()?
    }
}

/// What [`Warm`]'s thread keeps from one evaluation to the next.
struct Context {
    vm: WarmContext,
    /// Whether the standard library loaded.
    loaded: bool,
    /// The mesh's libraries loaded.
    libraries: std::collections::BTreeSet<PathBuf>,
    /// The folders on the import path.
    import_paths: std::collections::BTreeSet<PathBuf>,
    /// Every file on disk an evaluation read, and its modification time once it was read.
    seen: BTreeMap<PathBuf, Option<std::time::SystemTime>>,
}

fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl Context {
    /// A context with Nickel's standard library loaded.
    fn new() -> Self {
        let mut vm: WarmContext = nickel_lang_core::eval::VmContext::new(
            nickel_lang_core::cache::CacheHub::new(),
            std::io::sink(),
            nickel_lang_core::error::NullReporter {},
        );
        // Its documentation is most of Nickel's standard library's text: none of it is
        // evaluated, and an evaluation here that fails is done again elsewhere, so no message
        // ever points into the text without it.
        let files = &mut vm.import_resolver.sources.files;
        for id in files.stdlib_modules() {
            if let Some(text) = without_docs(files.source(id)) {
                files.update(id, text);
            }
        }
        let loaded = vm.import_resolver.prepare_stdlib(&mut vm.pos_table).is_ok();
        Self {
            vm,
            loaded,
            libraries: Default::default(),
            import_paths: Default::default(),
            seen: Default::default(),
        }
    }

    /// Whether one of `paths` (a job's files) changed since an evaluation here read it: Nickel
    /// reads a file again when its modification time changed, but not the files imported by
    /// one it kept, so a job that reaches a file changed since is run in a new context. Only the
    /// job's own files are looked at: a context serving a fleet's builds has read every node's,
    /// and looking at all of them before each job grew with the square of the nodes.
    fn is_stale(&self, paths: &[PathBuf]) -> bool {
        paths
            .iter()
            .any(|path| self.seen.get(path).is_some_and(|at| modified(path) != *at))
    }

    /// Parses, typechecks and transforms the mesh's library in `dir`.
    fn library(&mut self, dir: PathBuf) {
        use nickel_lang_core::cache::InputFormat;
        if !self.loaded || self.libraries.contains(&dir) {
            return;
        }
        let vm = &mut self.vm;
        if self.libraries.is_empty() {
            vm.register_extend_env_for_typecheck();
        }
        let file = dir.join(crate::library::FILE);
        if let Ok(id) = vm
            .import_resolver
            .sources
            .get_or_add_file(&file, InputFormat::Nickel)
        {
            let _at_the_import = vm.import_resolver.prepare(&mut vm.pos_table, id.inner());
        }
        self.libraries.insert(dir);
    }

    /// Evaluates `job`: its value as JSON, and the files it read (exactly: the job's text and
    /// what it imports, not what earlier jobs read); [`Stale`] when it reaches a file that
    /// changed since this context read it.
    fn run(&mut self, job: &Job) -> Result<Option<Evaluated>, Stale> {
        use nickel_lang_core::cache::{ImportResolver as _, InputFormat, SourcePath};
        use nickel_lang_core::eval::VirtualMachine;
        if !self.loaded {
            return Ok(None);
        }
        if self.import_paths.insert(job.library_dir.clone()) {
            self.vm
                .import_resolver
                .sources
                .add_import_paths(std::iter::once(&job.library_dir));
        }
        let vm = &mut self.vm;
        let id = vm.import_resolver.sources.add_string(
            SourcePath::Path(job.node.clone(), InputFormat::Nickel),
            match with_pins(&job.text, &job.pinned) {
                text if job.modules_only => format!("(\n{text}\n).modules"),
                text => text,
            },
        );
        let body = vm.prepare_eval(id).ok();
        let mut ids = vm.import_resolver.import_data.transitive_imports(id);
        ids.insert(id);
        let files = vm.import_resolver.files();
        let paths: Vec<PathBuf> = ids
            .iter()
            .map(|id| PathBuf::from(files.name(*id)))
            .filter(|name| name.is_absolute() && *name != job.node)
            .collect();
        if self.is_stale(&paths) {
            return Err(Stale);
        }
        for path in &paths {
            self.seen
                .entry(path.clone())
                .or_insert_with(|| modified(path));
        }
        let vm = &mut self.vm;
        Ok((|| {
            let value = VirtualMachine::new(vm)
                .eval_full_for_export_closure(body?.into())
                .ok()?;
            crate::imports::check_read(
                paths
                    .iter()
                    .map(PathBuf::as_path)
                    .chain(std::iter::once(job.node.as_path())),
                &job.tree,
            )
            .ok()?;
            let files = vm.import_resolver.files();
            // The declaration read is the text given, before the pins.
            let mut read = sources_of(files, ids.into_iter());
            for (path, digest) in &mut read {
                if *path == job.node {
                    *digest = *blake3::hash(job.text.as_bytes()).as_bytes();
                }
            }
            let answer = json_of(&value).ok().map(|json| (json, read));
            crate::memory::discard(value);
            answer
        })())
    }
}

/// A job reached a file changed since its context read it: it runs in a new context.
struct Stale;

/// Nickel `text` with every multi-line documentation string (`| doc m%"…"%`, with any number of
/// `%`) empty: `| doc ""`. `None` when it has none, or one does not end.
fn without_docs(text: &str) -> Option<String> {
    const OPEN: &str = "| doc m";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut stripped = false;
    while let Some(at) = rest.find(OPEN) {
        let after = &rest[at + OPEN.len()..];
        let percents = after.len() - after.trim_start_matches('%').len();
        if percents == 0 || !after[percents..].starts_with('"') {
            out.push_str(&rest[..at + OPEN.len()]);
            rest = after;
            continue;
        }
        let body = &after[percents + 1..];
        let close = format!("\"{}", "%".repeat(percents));
        let end = body.find(&close)?;
        out.push_str(&rest[..at]);
        out.push_str("| doc \"\"");
        rest = &body[end + close.len()..];
        stripped = true;
    }
    out.push_str(rest);
    stripped.then_some(out)
}

/// `text` with the `pinned` ports merged over its value at the highest priority: what
/// evaluating it with the ports as overrides of `settings.ports.NAME` gives.
fn with_pins(text: &str, pinned: &BTreeMap<String, u16>) -> String {
    if pinned.is_empty() {
        return text.to_owned();
    }
    let quote = |name: &str| {
        name.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('%', "\\%")
    };
    let fields: Vec<String> = pinned
        .iter()
        .map(|(name, port)| format!("settings.ports.\"{}\" | force = {port}", quote(name)))
        .collect();
    format!("(\n{text}\n) & {{ {} }}", fields.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_docs_empties_every_multi_line_doc_and_nothing_else() {
        let text = "{\n  a\n    | doc m%\"\n      A.\n    \"%\n    = 1,\n  b | doc m%%\"uses m%\"x\"% here\"%% | Number = 2,\n  c | doc \"short\" = m%\"kept\"%,\n}";
        assert_eq!(
            without_docs(text).unwrap(),
            "{\n  a\n    | doc \"\"\n    = 1,\n  b | doc \"\" | Number = 2,\n  c | doc \"short\" = m%\"kept\"%,\n}"
        );
        assert_eq!(
            without_docs("{ c | doc \"short\" = 1 }"),
            None,
            "nothing to strip"
        );
        assert_eq!(
            without_docs("{ a | doc m%\"no end = 1 }"),
            None,
            "a doc that does not end"
        );
        // Nickel's own: most of its text goes.
        let std = nickel_lang_core::stdlib::StdlibModule::Std.content();
        let stripped = without_docs(std).unwrap();
        assert!(
            stripped.len() < std.len() / 2,
            "{} of {}",
            stripped.len(),
            std.len()
        );
    }

    /// The warm evaluator — Nickel's standard library without its documentation — answers what
    /// an evaluation answers, value for value.
    #[test]
    fn the_warm_evaluator_answers_what_an_evaluation_answers() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let library = crate::library::install(&root.join("state")).unwrap();
        let node = root.join("node.ncl");
        let text = r#"let mesh = import "mesh.ncl" in
mesh.node {
  name = "n",
  settings = {
    ports = { store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820, web = 80 },
    private_network = { range = "10.77.0.0/24", address = "10.77.0.5" },
  },
  modules = [
    { name = "web", config = fun s => {
        files = [{ path = "/etc/web.conf", content = "listen %{std.to_string s.ports.web}\n%{std.string.join "," (std.array.map std.string.uppercase ["a", "b"])}" }],
        containers = [{ name = "web", image = "nginx:1", publish = [{ host_port = s.ports.web, container_port = 80 }] }],
        openings = [{ port = s.ports.web, from = "private" }],
      } },
  ],
}
"#;
        std::fs::write(&node, text).unwrap();
        let tree = crate::imports::Tree::of_declaration(&node, &library);
        let pinned = BTreeMap::from([("web".to_owned(), 8080)]);
        let plain = evaluate_text_in(&node, text.to_owned(), &library, &pinned, &tree)
            .unwrap()
            .to_json()
            .unwrap();
        let warm = Warm::start().unwrap();
        warm.library(&library);
        let (value, read) = warm
            .evaluate(&node, &library, &pinned, &tree, text.to_owned(), false)
            .expect("the warm evaluator answers");
        assert_eq!(value.get(), plain.get());
        assert!(value.get().contains("listen 8080"), "{}", value.get());
        assert!(read.iter().any(|(p, _)| *p == node), "{read:?}");
    }
}
