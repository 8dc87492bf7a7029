//! Where each module of a node comes from, read from the declaration's syntax — never evaluated
//! — so that a module can be cached and evaluated apart from the others ([`crate::incremental`]).
//!
//! A node declaration ends with `mesh.node { …, modules = [e0, e1, …] }`. For each element the
//! walk follows, in the text, only what cannot change its value: a `let` binding, a record field
//! defined once without a contract, an `import` of a Nickel file. It never enters a function, a
//! merge or a contract. Where it stops — an import not entered, or an expression `E` in a file
//! `F` (a record literal, a call of a function defined in `F`) — the module's value depends on
//! nothing but the text of the files it walked through and of `F` with everything `F` imports:
//! `E` is evaluated in `F`'s own scope (its `let`s, its imports, the fields of records written in
//! `F`, none of them merged on the way), with the node's settings as its argument. That set of
//! files is the module's **source closure**, the key of its cache entry.
//!
//! The walk also notes, for the module, an **anchor**: an expression `(import "F").a.b` whose
//! value is the module's, so a module can be evaluated in a declaration of its own
//! ([`Spine::wrapper`]): the node's text with its modules replaced by the anchors of those to
//! evaluate, its `let`s no longer used dropped — the settings, the contracts and `mesh.node`
//! itself exactly as the node has them.
//!
//! An element the walk cannot follow is *dynamic*: its closure is every file the declaration
//! reaches, and it is evaluated through its own text. A node whose shape the walk does not know
//! has no spine: it is evaluated whole.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nickel_lang_core::ast::pattern::PatternData;
use nickel_lang_core::ast::primop::PrimOp;
use nickel_lang_core::ast::{Ast, AstAlloc, Import, InputFormat, Node};
use nickel_lang_core::files::Files;
use nickel_lang_core::parser::grammar::TermParser;
use nickel_lang_core::parser::lexer::Lexer;
use nickel_lang_core::parser::ErrorTolerantParser;
use nickel_lang_core::traverse::{TraverseAlloc, TraverseControl};

use crate::imports::Graph;

/// How deep a walk lowers a file's syntax; past it, an expression is opaque.
const MAX_DEPTH: usize = 256;
/// How many steps the walk of one element may take (a `let rec x = x` goes round forever).
const FUEL: usize = 10_000;

/// An expression, as much of it as the walk needs.
#[derive(Debug)]
struct Expr {
    kind: Kind,
    range: Range<usize>,
}

#[derive(Debug)]
enum Kind {
    Import {
        path: PathBuf,
        nickel: bool,
    },
    Var(String),
    Field(Rc<Expr>, String),
    Let {
        bindings: Rc<[Binding]>,
        body: Rc<Expr>,
        rec: bool,
    },
    Record(Rc<Rec>),
    Array(Vec<Rc<Expr>>),
    App(Rc<Expr>, Vec<Rc<Expr>>),
    Other,
}

#[derive(Debug)]
struct Binding {
    /// `None` for a pattern: the walk does not follow it.
    name: Option<String>,
    annotated: bool,
    value: Rc<Expr>,
}

#[derive(Debug)]
struct Rec {
    fields: Vec<FieldDef>,
    /// A field named by an expression, or an `include`: which names it binds is not known.
    dynamic: bool,
}

#[derive(Debug)]
struct FieldDef {
    path: Vec<String>,
    /// A contract, a type or `optional`: its value is not the expression's.
    annotated: bool,
    value: Option<Rc<Expr>>,
}

/// A parsed file: its expression, every variable it names and every import it makes, with
/// where.
struct Parsed {
    root: Rc<Expr>,
    vars: Vec<(String, Range<usize>)>,
    imports: Vec<(PathBuf, Range<usize>)>,
}

fn range_of(ast: &Ast<'_>) -> Range<usize> {
    ast.pos
        .as_opt_ref()
        .map_or(0..0, |s| s.start.to_usize()..s.end.to_usize())
}

fn lower(ast: &Ast<'_>, depth: usize) -> Expr {
    let range = range_of(ast);
    if depth > MAX_DEPTH {
        return Expr {
            kind: Kind::Other,
            range,
        };
    }
    let down = |a: &Ast<'_>| Rc::new(lower(a, depth + 1));
    let kind = match &ast.node {
        Node::Import(Import::Path { path, format }) => Kind::Import {
            path: PathBuf::from(path),
            nickel: *format == InputFormat::Nickel,
        },
        Node::Var(id) => Kind::Var(id.label().to_owned()),
        Node::PrimOpApp { op, args } => match (op, args) {
            (PrimOp::RecordStatAccess(id), [record]) => {
                Kind::Field(down(record), id.label().to_owned())
            }
            _ => Kind::Other,
        },
        Node::Let {
            bindings,
            body,
            rec,
        } => Kind::Let {
            bindings: bindings
                .iter()
                .map(|b| Binding {
                    name: match (&b.pattern.data, b.pattern.alias) {
                        (PatternData::Any(id), None) => Some(id.label().to_owned()),
                        _ => None,
                    },
                    annotated: !b.metadata.annotation.is_empty(),
                    value: down(&b.value),
                })
                .collect(),
            body: down(body),
            rec: *rec,
        },
        Node::Record(r) => Kind::Record(Rc::new(Rec {
            dynamic: !r.includes.is_empty()
                || r.field_defs
                    .iter()
                    .any(|f| f.path.iter().any(|e| e.try_as_ident().is_none())),
            fields: r
                .field_defs
                .iter()
                .map(|f| FieldDef {
                    path: f
                        .path
                        .iter()
                        .filter_map(|e| e.try_as_ident())
                        .map(|i| i.label().to_owned())
                        .collect(),
                    annotated: !f.metadata.annotation.is_empty() || f.metadata.opt,
                    value: f.value.as_ref().map(down),
                })
                .collect(),
        })),
        Node::Array(items) => Kind::Array(items.iter().map(down).collect()),
        Node::App { head, args } => Kind::App(down(head), args.iter().map(down).collect()),
        _ => Kind::Other,
    };
    Expr { kind, range }
}

/// Parses `text`; `None` if it does not parse cleanly (then Nickel is to report it).
fn parse(text: &str) -> Option<Parsed> {
    let alloc = AstAlloc::new();
    let mut files = Files::empty();
    let id = files.add("source", text);
    let (ast, errors) = TermParser::new()
        .parse_tolerant(&alloc, id, Lexer::new(text))
        .ok()?;
    if !errors.no_errors() {
        return None;
    }
    let mut vars = Vec::new();
    let mut imports = Vec::new();
    let _no_early_stop: Option<()> = ast.traverse_ref(
        &mut |node: &Ast<'_>, _: &()| {
            match &node.node {
                Node::Var(id) => vars.push((id.label().to_owned(), range_of(node))),
                Node::Import(Import::Path { path, .. }) => {
                    imports.push((PathBuf::from(path), range_of(node)))
                }
                _ => {}
            }
            TraverseControl::Continue
        },
        &(),
    );
    Some(Parsed {
        root: Rc::new(lower(&ast, 0)),
        vars,
        imports,
    })
}

/// The scope an expression is read in: `let` bindings and the fields of the records around it,
/// innermost first. Scopes never cross files: an imported file starts with none.
#[derive(Clone)]
enum Env {
    Nil,
    Let(Rc<LetFrame>),
    Rec(Rc<RecFrame>),
}

struct LetFrame {
    bindings: Rc<[Binding]>,
    rec: bool,
    parent: Env,
}

struct RecFrame {
    rec: Rc<Rec>,
    parent: Env,
}

/// What a name is bound to.
enum Bound {
    /// An expression, read in its scope.
    Expr(Rc<Expr>, Env),
    /// Something the walk does not follow (a pattern, a contract, a field defined piecewise,
    /// a record whose field names are computed).
    Opaque,
    /// Nothing in the file: the standard library, or unbound.
    Free,
}

fn lookup(env: &Env, name: &str) -> Bound {
    let mut at = env.clone();
    loop {
        match at {
            Env::Nil => return Bound::Free,
            Env::Let(frame) => {
                if let Some(b) = frame
                    .bindings
                    .iter()
                    .find(|b| b.name.as_deref() == Some(name))
                {
                    if b.annotated {
                        return Bound::Opaque;
                    }
                    let scope = if frame.rec {
                        Env::Let(frame.clone())
                    } else {
                        frame.parent.clone()
                    };
                    return Bound::Expr(b.value.clone(), scope);
                }
                if frame.bindings.iter().any(|b| b.name.is_none()) {
                    return Bound::Opaque; // a pattern may bind it
                }
                at = frame.parent.clone();
            }
            Env::Rec(frame) => {
                if frame.rec.dynamic {
                    return Bound::Opaque;
                }
                let defs: Vec<&FieldDef> = frame
                    .rec
                    .fields
                    .iter()
                    .filter(|f| f.path.first().map(String::as_str) == Some(name))
                    .collect();
                match defs.as_slice() {
                    [] => at = frame.parent.clone(),
                    [one] if one.path.len() == 1 && !one.annotated => {
                        return match &one.value {
                            Some(v) => Bound::Expr(v.clone(), Env::Rec(frame.clone())),
                            None => Bound::Opaque,
                        }
                    }
                    _ => return Bound::Opaque,
                }
            }
        }
    }
}

/// Where a walk ended.
enum Reached {
    /// At an expression in `file`; `anchor`, if any, names a place with the same value.
    Expr {
        expr: Rc<Expr>,
        env: Env,
        file: PathBuf,
        anchor: Option<(PathBuf, Vec<String>)>,
    },
    /// At the whole of a Nickel file, not entered.
    File(PathBuf),
}

/// A module's place: where its value is written, and what that value may depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// `(import "FILE").a.b`: an expression with the module's value.
    pub anchor: (PathBuf, Vec<String>),
    /// The files the walk read through to find it (their own text matters, not their imports').
    pub traversed: BTreeSet<PathBuf>,
    /// The file the module's expression is in: it and everything it imports matter.
    pub file: PathBuf,
    /// Where the module's expression is in `file`.
    pub range: Range<usize>,
}

/// One element of the node's `modules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// Its text in the declaration.
    pub range: Range<usize>,
    /// Where its value is written, if the walk could follow it (else it is dynamic).
    pub place: Option<Place>,
}

/// A node declaration read for its modules.
#[derive(Debug)]
pub struct Spine {
    /// The declaration.
    pub node: PathBuf,
    /// The declaration's text, as the walk read it.
    text: std::sync::Arc<str>,
    /// The range of the `modules` array in it.
    modules: Range<usize>,
    /// The elements, in order.
    pub elements: Vec<Element>,
    /// The files the node's other fields (its name, its settings) may read; `None` when the
    /// walk cannot tell (then: every file).
    pub head: Option<BTreeSet<PathBuf>>,
}

struct Walker<'g> {
    graph: &'g Graph,
    import_paths: &'g [PathBuf],
    parsed: BTreeMap<PathBuf, Option<Rc<Parsed>>>,
    /// The node's `modules` array, once found: what the head must not read for its cache key
    /// to leave it out.
    modules: Option<(PathBuf, Range<usize>)>,
}

impl Walker<'_> {
    fn parsed(&mut self, file: &Path) -> Option<Rc<Parsed>> {
        if let Some(p) = self.parsed.get(file) {
            return p.clone();
        }
        let p = self
            .graph
            .texts
            .get(file)
            .and_then(|text| parse(text))
            .map(Rc::new);
        self.parsed.insert(file.to_owned(), p.clone());
        p
    }

    /// The Nickel file `import "path"` written in `file` reads, if the walk read it too.
    fn import(&self, file: &Path, path: &Path) -> Option<PathBuf> {
        crate::imports::resolve(file, path, self.import_paths)
            .filter(|r| self.graph.texts.contains_key(r))
    }

    /// Follows `expr` (read in `env`, in `file`, `anchor` naming a place of the same value) to
    /// where its value is written; to a record literal if `record`. `None`: it cannot be
    /// followed.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        &mut self,
        expr: Rc<Expr>,
        env: Env,
        file: PathBuf,
        anchor: Option<(PathBuf, Vec<String>)>,
        record: bool,
        traversed: &mut BTreeSet<PathBuf>,
        fuel: &mut usize,
    ) -> Option<Reached> {
        *fuel = fuel.checked_sub(1)?;
        match &expr.kind {
            Kind::Import { path, nickel } => {
                if !nickel {
                    return None;
                }
                let target = self.import(&file, path)?;
                if !record {
                    return Some(Reached::File(target));
                }
                let parsed = self.parsed(&target)?;
                traversed.insert(target.clone());
                let anchor = Some((target.clone(), Vec::new()));
                self.walk(
                    parsed.root.clone(),
                    Env::Nil,
                    target,
                    anchor,
                    record,
                    traversed,
                    fuel,
                )
            }
            Kind::Var(name) => match lookup(&env, name) {
                Bound::Expr(value, scope) => {
                    self.walk(value, scope, file, anchor, record, traversed, fuel)
                }
                Bound::Opaque | Bound::Free => None,
            },
            Kind::Field(of, name) => {
                let Reached::Expr {
                    expr: rec_expr,
                    env: rec_env,
                    file: rec_file,
                    anchor: rec_anchor,
                } = self.walk(of.clone(), env, file, None, true, traversed, fuel)?
                else {
                    return None;
                };
                let Kind::Record(rec) = &rec_expr.kind else {
                    return None;
                };
                let frame = Rc::new(RecFrame {
                    rec: rec.clone(),
                    parent: rec_env,
                });
                let Bound::Expr(value, scope) = lookup(&Env::Rec(frame), name) else {
                    return None;
                };
                let anchor = match rec_anchor {
                    Some((f, mut path)) => {
                        path.push(name.clone());
                        Some((f, path))
                    }
                    None => anchor,
                };
                self.walk(value, scope, rec_file, anchor, record, traversed, fuel)
            }
            Kind::Let {
                bindings,
                body,
                rec,
            } => {
                let env = Env::Let(Rc::new(LetFrame {
                    bindings: bindings.clone(),
                    rec: *rec,
                    parent: env,
                }));
                self.walk(body.clone(), env, file, anchor, record, traversed, fuel)
            }
            Kind::Record(_) => Some(Reached::Expr {
                expr,
                env,
                file,
                anchor,
            }),
            _ if record => None,
            _ => Some(Reached::Expr {
                expr,
                env,
                file,
                anchor,
            }),
        }
    }

    /// The files an expression of `file` (read in `env`) may read: `file`, what the imports in
    /// its text reach, and, for each name it uses, what the binding's expression may read.
    /// `None` when that cannot be told.
    fn reads(
        &mut self,
        file: &Path,
        range: Range<usize>,
        env: &Env,
        seen: &mut BTreeSet<(PathBuf, usize, usize)>,
        out: &mut BTreeSet<PathBuf>,
    ) -> Option<()> {
        if !seen.insert((file.to_owned(), range.start, range.end)) {
            return Some(());
        }
        out.insert(file.to_owned());
        let parsed = self.parsed(file)?;
        let inside = |r: &Range<usize>| r.start >= range.start && r.end <= range.end;
        for (path, _) in parsed.imports.iter().filter(|(_, r)| inside(r)) {
            let target = crate::imports::resolve(file, path, self.import_paths)?;
            out.extend(self.graph.closure(&target));
        }
        for (name, _) in parsed.vars.iter().filter(|(_, r)| inside(r)) {
            match lookup(env, name) {
                Bound::Expr(value, _)
                    if self.modules.as_ref().is_some_and(|(f, r)| {
                        f == file && value.range.start < r.end && r.start < value.range.end
                    }) =>
                {
                    return None
                }
                Bound::Expr(value, scope) => {
                    self.reads(file, value.range.clone(), &scope, seen, out)?
                }
                Bound::Free if name == "std" => {}
                Bound::Free | Bound::Opaque => return None,
            }
        }
        Some(())
    }
}

/// An anchor as Nickel text: `(import "FILE")."a"."b"`; `None` if a name would need escaping.
fn anchor_text((file, path): &(PathBuf, Vec<String>)) -> Option<String> {
    let plain = |s: &str| {
        !s.is_empty()
            && !s
                .chars()
                .any(|c| c.is_control() || matches!(c, '"' | '\\' | '%'))
    };
    let file = file.to_str().filter(|f| plain(f))?;
    let mut out = format!("(import \"{file}\")");
    for field in path {
        if !plain(field) {
            return None;
        }
        out.push_str(&format!(".\"{field}\""));
    }
    Some(out)
}

impl Spine {
    /// Reads the declaration `node` (canonical, walked into `graph`) for its modules; `None` if
    /// it is not `let …  in mesh.node { …, modules = [ … ] }` with `mesh` the mesh's library
    /// and `modules` an array written out.
    pub fn of(
        node: &Path,
        library: &Path,
        import_paths: &[PathBuf],
        graph: &Graph,
    ) -> Option<Self> {
        let text = graph.texts.get(node)?.clone();
        let mut w = Walker {
            graph,
            import_paths,
            parsed: BTreeMap::new(),
            modules: None,
        };
        let parsed = w.parsed(node)?;
        // let … in mesh.node { … }
        let mut env = Env::Nil;
        let mut body = parsed.root.clone();
        while let Kind::Let {
            bindings,
            body: inner,
            rec,
        } = &body.kind
        {
            env = Env::Let(Rc::new(LetFrame {
                bindings: bindings.clone(),
                rec: *rec,
                parent: env,
            }));
            body = inner.clone();
        }
        let Kind::App(head, args) = &body.kind else {
            return None;
        };
        let ([decl], Kind::Field(mesh, node_fn)) = (args.as_slice(), &head.kind) else {
            return None;
        };
        let (Kind::Var(mesh), "node") = (&mesh.kind, node_fn.as_str()) else {
            return None;
        };
        let Bound::Expr(lib, _) = lookup(&env, mesh) else {
            return None;
        };
        let Kind::Import { path, .. } = &lib.kind else {
            return None;
        };
        let library_file = std::fs::canonicalize(library.join("mesh.ncl")).ok()?;
        let resolved = crate::imports::resolve(node, path, import_paths)?;
        if std::fs::canonicalize(&resolved).ok()? != library_file {
            return None;
        }
        let Kind::Record(rec) = &decl.kind else {
            return None;
        };
        if rec.dynamic {
            return None;
        }
        let modules: Vec<&FieldDef> = rec
            .fields
            .iter()
            .filter(|f| f.path.first().map(String::as_str) == Some("modules"))
            .collect();
        let [modules] = modules.as_slice() else {
            return None;
        };
        let array = modules.value.as_ref().filter(|_| modules.path.len() == 1)?;
        let Kind::Array(items) = &array.kind else {
            return None;
        };
        w.modules = Some((node.to_owned(), array.range.clone()));
        let node_env = Env::Rec(Rc::new(RecFrame {
            rec: rec.clone(),
            parent: env.clone(),
        }));
        let node_file = node.to_owned();
        let elements = items
            .iter()
            .map(|item| {
                let mut traversed = BTreeSet::from([node_file.clone()]);
                let mut fuel = FUEL;
                let reached = w.walk(
                    item.clone(),
                    node_env.clone(),
                    node_file.clone(),
                    None,
                    false,
                    &mut traversed,
                    &mut fuel,
                );
                let place = match reached {
                    Some(Reached::File(file)) => Some(Place {
                        anchor: (file.clone(), Vec::new()),
                        traversed,
                        range: 0..graph.texts.get(&file).map_or(0, |t| t.len()),
                        file,
                    }),
                    Some(Reached::Expr {
                        expr,
                        file,
                        anchor: Some(anchor),
                        ..
                    }) => Some(Place {
                        anchor,
                        traversed,
                        file,
                        range: expr.range.clone(),
                    }),
                    _ => None,
                }
                .filter(|p| anchor_text(&p.anchor).is_some());
                Element {
                    range: item.range.clone(),
                    place,
                }
            })
            .collect();
        // The node's other fields: what they may read.
        let mut head = BTreeSet::from([node_file.clone()]);
        let mut seen = BTreeSet::new();
        let mut known = true;
        for f in rec
            .fields
            .iter()
            .filter(|f| f.path.first().map(String::as_str) != Some("modules"))
        {
            if let Some(v) = &f.value {
                known &= w
                    .reads(&node_file, v.range.clone(), &node_env, &mut seen, &mut head)
                    .is_some();
            }
        }
        Some(Self {
            node: node_file,
            text,
            modules: array.range.clone(),
            elements,
            head: known.then_some(head),
        })
    }

    /// The declaration's text around its `modules` array (the array left out): what the head
    /// and the modules placed through the declaration depend on of it.
    pub fn outside_modules(&self) -> [&str; 2] {
        [
            &self.text[..self.modules.start],
            &self.text[self.modules.end..],
        ]
    }

    /// An element's text.
    pub fn element_text(&self, k: usize) -> &str {
        &self.text[self.elements[k].range.clone()]
    }

    /// The declaration's text with `chosen` as its only modules (each through its anchor where
    /// it has one, else its own text), in that order, and every top-level `let` no longer used
    /// dropped: a declaration whose evaluation is the node's, for those modules.
    pub fn wrapper(&self, chosen: &[usize]) -> String {
        let items: Vec<String> = chosen
            .iter()
            .map(|&k| {
                let e = &self.elements[k];
                e.place
                    .as_ref()
                    .and_then(|p| anchor_text(&p.anchor))
                    .unwrap_or_else(|| self.text[e.range.clone()].to_owned())
            })
            .collect();
        let mut text = format!(
            "{}[\n    {}\n  ]{}",
            &self.text[..self.modules.start],
            items.join(",\n    "),
            &self.text[self.modules.end..]
        );
        // Drop the lets nothing names any more (their imports would be read and checked).
        loop {
            let Some(parsed) = parse(&text) else {
                return text;
            };
            let used: BTreeSet<&str> = parsed.vars.iter().map(|(n, _)| n.as_str()).collect();
            let mut dead = None;
            let mut at = parsed.root.clone();
            while let Kind::Let { bindings, body, .. } = &at.kind {
                let all_dead = bindings
                    .iter()
                    .all(|b| b.name.as_deref().is_some_and(|n| !used.contains(n)));
                if all_dead {
                    dead = Some(at.range.start..body.range.start);
                    break;
                }
                at = body.clone();
            }
            match dead {
                Some(r) => text.replace_range(r, ""),
                None => return text,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf, PathBuf, Graph) {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        for (name, text) in files {
            let p = base.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let lib = base.join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("mesh.ncl"), crate::library::MESH_NCL).unwrap();
        let node = base.join("node.ncl");
        let t = crate::imports::Tree::of_declaration(&node, &lib);
        let graph = crate::imports::walk(&node, std::slice::from_ref(&lib), &t).unwrap();
        (dir, base, lib, graph)
    }

    const HEAD: &str = "let mesh = import \"mesh.ncl\" in\nlet c = import \"catalogue.ncl\" in\n";

    /// Modules in files of their own, through a catalogue: each is placed in its file, found
    /// through the node and the catalogue; one written in the node, or made by a function,
    /// is placed in the file that writes it; one reached through a merge is dynamic.
    #[test]
    fn modules_are_placed_where_they_are_written() {
        let (_dir, base, lib, graph) = tree(&[
            (
                "node.ncl",
                &format!(
                    "{HEAD}mesh.node {{ name = \"n\", settings = {{ ports = {{ store = 1 }} }},\n  modules = [c.a, c.inline, c.made, (c & {{}}).a, import \"b.ncl\"] }}\n"
                ),
            ),
            (
                "catalogue.ncl",
                "let mk = fun n => { name = n, config = fun s => {} } in\n{ a = import \"apps/a.ncl\", inline = { name = \"i\", config = fun s => {} }, made = mk \"m\" }\n",
            ),
            ("apps/a.ncl", "{ name = \"a\", config = fun s => { files = [] } }\n"),
            ("b.ncl", "{ name = \"b\", config = fun s => {} }\n"),
        ]);
        let node = base.join("node.ncl");
        let spine = Spine::of(&node, &lib, std::slice::from_ref(&lib), &graph).unwrap();
        let places: Vec<Option<(PathBuf, Vec<String>, PathBuf)>> = spine
            .elements
            .iter()
            .map(|e| {
                e.place
                    .as_ref()
                    .map(|p| (p.anchor.0.clone(), p.anchor.1.clone(), p.file.clone()))
            })
            .collect();
        let cat = base.join("catalogue.ncl");
        assert_eq!(
            places,
            vec![
                Some((base.join("apps/a.ncl"), vec![], base.join("apps/a.ncl"))),
                Some((cat.clone(), vec!["inline".into()], cat.clone())),
                Some((cat.clone(), vec!["made".into()], cat.clone())),
                None,
                Some((base.join("b.ncl"), vec![], base.join("b.ncl"))),
            ]
        );
        let first = spine.elements[0].place.as_ref().unwrap();
        assert_eq!(first.traversed, BTreeSet::from([node.clone(), cat.clone()]));
        assert_eq!(spine.head, Some(BTreeSet::from([node.clone()])));
        // The wrapper of the first module: its anchor, and the catalogue's let gone.
        let w = spine.wrapper(&[0]);
        assert!(!w.contains("catalogue.ncl"), "{w}");
        assert!(
            w.contains(&format!(
                "(import \"{}\")",
                base.join("apps/a.ncl").display()
            )),
            "{w}"
        );
        // The dynamic one keeps its text, and so the let it names.
        let w = spine.wrapper(&[3]);
        assert!(
            w.contains("(c & {}).a") && w.contains("catalogue.ncl"),
            "{w}"
        );
    }

    /// A field with a contract, one defined piecewise, a record with a computed field name, a
    /// shadowing field: the walk does not follow them.
    #[test]
    fn the_walk_stops_where_a_value_could_differ() {
        let (_dir, base, lib, graph) = tree(&[
            (
                "node.ncl",
                &format!(
                    "{HEAD}mesh.node {{ name = \"n\", settings = {{ ports = {{ store = 1 }} }},\n  modules = [c.contracted, c.piece, c.shadowed, c.ok] }}\n"
                ),
            ),
            (
                "catalogue.ncl",
                "let ok = import \"wrong.ncl\" in\n{ contracted | Dyn = import \"a.ncl\", piece = import \"a.ncl\", piece.name = \"x\", shadowed = ok, ok = import \"a.ncl\" }\n",
            ),
            ("a.ncl", "{ name = \"a\", config = fun s => {} }\n"),
            ("wrong.ncl", "{ name = \"w\", config = fun s => {} }\n"),
        ]);
        let node = base.join("node.ncl");
        let spine = Spine::of(&node, &lib, std::slice::from_ref(&lib), &graph).unwrap();
        let anchors: Vec<Option<PathBuf>> = spine
            .elements
            .iter()
            .map(|e| e.place.as_ref().map(|p| p.anchor.0.clone()))
            .collect();
        // `shadowed = ok`: the record's own field `ok`, not the let.
        assert_eq!(
            anchors,
            vec![
                None,
                None,
                Some(base.join("a.ncl")),
                Some(base.join("a.ncl"))
            ]
        );
    }

    /// Settings read from another file, or through a name the walk cannot follow: the head
    /// reads that file's closure, or every file.
    #[test]
    fn what_the_head_reads() {
        let (_dir, base, lib, graph) = tree(&[
            (
                "node.ncl",
                "let mesh = import \"mesh.ncl\" in\nlet s = import \"settings.ncl\" in\nmesh.node { name = \"n\", settings = s, modules = [] }\n",
            ),
            ("settings.ncl", "{ ports = import \"ports.json\" }\n"),
            ("ports.json", "{}"),
        ]);
        let node = base.join("node.ncl");
        let spine = Spine::of(&node, &lib, std::slice::from_ref(&lib), &graph).unwrap();
        assert_eq!(
            spine.head,
            Some(BTreeSet::from([
                node.clone(),
                base.join("settings.ncl"),
                base.join("ports.json")
            ]))
        );
        let (_dir, base, lib, graph) = tree(&[(
            "node.ncl",
            "let mesh = import \"mesh.ncl\" in\nmesh.node { name = \"n\", settings = std.something unknown, modules = [] }\n",
        )]);
        let node = base.join("node.ncl");
        let spine = Spine::of(&node, &lib, std::slice::from_ref(&lib), &graph).unwrap();
        assert_eq!(spine.head, None);
        // Settings that read the modules: the head is not apart from them.
        let (_dir, base, lib, graph) = tree(&[(
            "node.ncl",
            "let mesh = import \"mesh.ncl\" in\nmesh.node { name = \"n\", settings = { ports = { store = std.array.length modules } }, modules = [] }\n",
        )]);
        let node = base.join("node.ncl");
        let spine = Spine::of(&node, &lib, std::slice::from_ref(&lib), &graph).unwrap();
        assert_eq!(spine.head, None);
    }
}
