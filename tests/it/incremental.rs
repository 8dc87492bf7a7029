//! One module changed, one module evaluated: the per-module cache gives, after any edit, the
//! generation a whole evaluation gives — byte for byte (the same id) — and its rejections with
//! the same spans; and a change to one module's file evaluates that module only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::{mesh, run};

/// A small deterministic generator (xorshift): a failing run prints its seed, and
/// `MESH_PROPTEST_SEED` replays it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A fleet's tree: a node assigning modules from a catalogue — most in files of their own
/// (some importing a shared helper or a shared template), one written in a file of the
/// catalogue's and one made there by a function, one reached through a merge (which the walk
/// does not follow: it is evaluated again after any change) — and its settings in the node.
struct Fleet {
    dir: tempfile::TempDir,
    /// Each module file's variant: what its content says, how many files it declares.
    modules: Vec<(u64, usize)>,
    assigned: usize,
    port: u16,
    helper: u64,
    template: u64,
    catalogue: u64,
    broken: Option<usize>,
}

const FILES: usize = 10;

impl Fleet {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        std::fs::create_dir_all(dir.path().join("modules")).unwrap();
        let f = Self {
            dir,
            modules: (0..FILES).map(|i| (i as u64, 1 + i % 3)).collect(),
            assigned: FILES,
            port: 8080,
            helper: 0,
            template: 0,
            catalogue: 0,
            broken: None,
        };
        f.write_all();
        f
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn node(&self) -> PathBuf {
        self.path("node.ncl")
    }

    fn module_text(&self, i: usize) -> String {
        let (variant, files) = self.modules[i];
        let mut decl: Vec<String> = (0..files)
            .map(|f| {
                format!(
                    r#"{{ path = "/etc/m{i}/f{f}.conf", content = "variant {variant}\nport %{{std.to_string s.ports.web}}\n" }}"#
                )
            })
            .collect();
        if i.is_multiple_of(3) {
            decl.push(format!(
                r#"{{ path = "/etc/m{i}/helped", content = h.line "m{i}" }}"#
            ));
        }
        if i % 4 == 1 {
            decl.push(format!(
                r#"{{ path = "/etc/m{i}/templated", content = mesh.template s (import "../shared.tmpl" as 'Text) }}"#
            ));
        }
        if self.broken == Some(i) {
            // A mode that is not a string: the File contract refuses it.
            decl.push(format!(
                "{{ path = \"/etc/m{i}/broken\", content = \"x\", mode = 644 }}"
            ));
        }
        format!(
            "let mesh = import \"mesh.ncl\" in\nlet h = import \"../helper.ncl\" in\n{{\n  name = \"m{i}\",\n  config = fun s => {{\n    files = [\n      {}\n    ],\n    openings = [{{ port = s.ports.web }}],\n  }},\n}}\n",
            decl.join(",\n      ")
        )
    }

    fn write_all(&self) {
        for i in 0..FILES {
            std::fs::write(self.path(&format!("modules/m{i}.ncl")), self.module_text(i)).unwrap();
        }
        std::fs::write(
            self.path("helper.ncl"),
            format!(
                "{{ line = fun name => \"helper {} for %{{name}}\\n\" }}\n",
                self.helper
            ),
        )
        .unwrap();
        std::fs::write(
            self.path("shared.tmpl"),
            format!("template {}: {{{{ports.web}}}}\n", self.template),
        )
        .unwrap();
        let entries: String = (0..FILES)
            .map(|i| format!("  m{i} = import \"modules/m{i}.ncl\",\n"))
            .collect();
        std::fs::write(
            self.path("more.ncl"),
            format!(
                "let mk = fun n => {{ name = n, config = fun s => {{ files = [{{ path = \"/etc/%{{n}}\", content = \"made {c}\" }}] }} }} in\n{{\n  inline = {{ name = \"inline\", config = fun s => {{ files = [{{ path = \"/etc/inline\", content = \"inline {c}\" }}] }} }},\n  made = mk \"made\",\n}}\n",
                c = self.catalogue
            ),
        )
        .unwrap();
        std::fs::write(
            self.path("catalogue.ncl"),
            format!(
                "# catalogue {c}\nlet more = import \"more.ncl\" in\n{{\n{entries}  inline = more.inline,\n  made = more.made,\n  merged = {{ name = \"merged\", config = fun s => {{ files = [{{ path = \"/etc/merged\", content = \"merged\" }}] }} }},\n}}\n",
                c = self.catalogue
            ),
        )
        .unwrap();
        let assigned: String = (0..self.assigned).map(|i| format!("c.m{i}, ")).collect();
        std::fs::write(
            self.node(),
            format!(
                "let mesh = import \"mesh.ncl\" in\nlet c = import \"catalogue.ncl\" in\nmesh.node {{\n  name = \"fleet-node\",\n  settings = {{\n    ports = {{ store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820, web = {} }},\n    private_network = {{ range = \"10.77.0.0/24\", address = \"10.77.0.3\" }},\n  }},\n  modules = [{assigned}c.inline, c.made, (c & {{}}).merged],\n}}\n",
                self.port
            ),
        )
        .unwrap();
    }
}

/// The outcome of a build: the id, or where the rejection points and what it says first.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Built(String),
    Rejected(String),
}

/// `mesh build --json` in `state`: the outcome, and how many modules it evaluated.
fn build(state: &Path, fleet: &Fleet, record: Option<&Path>) -> (Outcome, Option<u64>) {
    let mut c = mesh(state);
    c.current_dir(fleet.dir.path())
        .arg("build")
        .arg("node.ncl")
        .arg("--json");
    if let Some(r) = record {
        c.arg("--record").arg(r);
    }
    let ran = run(c);
    if ran.code == 0 {
        let v: serde_json::Value = serde_json::from_str(ran.last_line()).unwrap();
        (
            Outcome::Built(v["id"].as_str().unwrap().to_owned()),
            v["modules_evaluated"].as_u64(),
        )
    } else {
        assert_eq!(ran.code, 1, "{}", ran.stderr);
        (Outcome::Rejected(first_location(&ran.stderr)), None)
    }
}

/// The first `file:line:column` a report shows, and its message line.
fn first_location(report: &str) -> String {
    let message = report.lines().next().unwrap_or_default().trim().to_owned();
    let at = report
        .lines()
        .find_map(|l| {
            let l = l.trim_start_matches(|c: char| !c.is_alphanumeric() && c != '/');
            let (file, rest) = l.split_once(".ncl:")?;
            let pos: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == ':')
                .collect();
            Some(format!("{file}.ncl:{pos}"))
        })
        .unwrap_or_default();
    format!("{message} @ {at}")
}

/// The reference: the node evaluated whole, in this process, with no cache at all.
fn reference(fleet: &Fleet, record: Option<&Path>) -> Outcome {
    let state = tempfile::tempdir().unwrap();
    let record = record.map(|p| {
        (
            mesh_lib::NodeRecord::parse(&std::fs::read(p).unwrap()).unwrap(),
            p.to_owned(),
        )
    });
    let built = mesh_compiler::build(&mesh_compiler::BuildRequest {
        node: &fleet.node(),
        record: record.as_ref().map(|(r, p)| (r, p.as_path())),
        images: None,
        state_dir: state.path(),
        use_cache: false,
        evaluator: &mesh_compiler::Evaluator::InProcess,
        tree: &Default::default(),
        per_module: false,
        keep_if: Default::default(),
    });
    match built {
        Ok(b) => Outcome::Built(b.id.to_string()),
        Err(e) => Outcome::Rejected(format!("{e}")),
    }
}

/// Random edits to random modules — a module's file, the helper and the template some of them
/// import, the catalogue, the node's settings and its list of modules, the record's pinned
/// ports, a contract violation in a module and its fix — each followed by a build in a state
/// whose caches hold every earlier build: its id is the id of the node evaluated whole, with no
/// cache, and of a cold build in a fresh state; a rejection is the whole evaluation's, pointing
/// at the same file, line and column. An edit to one module's file evaluates that module alone
/// (and the one reached through a merge, whose source closure is every file).
#[test]
fn random_edits_build_what_a_whole_evaluation_builds() {
    let seed: u64 = std::env::var("MESH_PROPTEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("MESH_PROPTEST_SEED={seed}");
    let mut rng = Rng(seed);
    let mut fleet = Fleet::new();
    let state = tempfile::tempdir().unwrap();
    let record_path = fleet.path("record.json");
    let mut pinned: BTreeMap<String, u16> = BTreeMap::new();
    let (first, evaluated) = build(state.path(), &fleet, None);
    assert_eq!(first, reference(&fleet, None));
    assert_eq!(
        evaluated,
        Some(FILES as u64 + 3),
        "a cold build evaluates every module"
    );
    let (mut single_module_edits, mut rejections) = (0, 0);
    for step in 0..40 {
        let what = rng.below(10);
        let mut only: Option<usize> = None;
        // A broken module is fixed at the next step.
        fleet.broken = None;
        match what {
            0..=3 => {
                let i = rng.below(fleet.assigned);
                fleet.modules[i].0 += 100;
                if rng.below(2) == 0 {
                    fleet.modules[i].1 = 1 + rng.below(3);
                }
                only = Some(i);
            }
            4 => fleet.helper += 1,
            5 => fleet.template += 1,
            6 => fleet.catalogue += 1,
            7 => {
                if rng.below(2) == 0 {
                    fleet.port = 8000 + rng.below(1000) as u16;
                } else {
                    fleet.assigned = 1 + rng.below(FILES);
                }
            }
            8 => {
                let port = 5400 + rng.below(100) as u16;
                pinned.insert("store".into(), port);
            }
            _ => fleet.broken = Some(rng.below(fleet.assigned)),
        }
        fleet.write_all();
        let record = (!pinned.is_empty()).then(|| {
            let mut r = mesh_lib::NodeRecord::managed(
                mesh_lib::model::NodeName::new("fleet-node").unwrap(),
            );
            for (k, v) in &pinned {
                r.pinned.insert(
                    k.clone(),
                    mesh_lib::model::Port::new(i64::from(*v)).unwrap(),
                );
            }
            std::fs::write(&record_path, r.to_bytes().unwrap()).unwrap();
            record_path.as_path()
        });
        let context = format!("seed {seed}, step {step}, edit {what}");
        let (incremental, evaluated) = build(state.path(), &fleet, record);
        let whole = reference(&fleet, record);
        match (&incremental, &whole) {
            (Outcome::Built(a), Outcome::Built(b)) => assert_eq!(a, b, "{context}"),
            (Outcome::Rejected(a), Outcome::Rejected(_)) => {
                let cold = build(tempfile::tempdir().unwrap().path(), &fleet, record).0;
                assert_eq!(Outcome::Rejected(a.clone()), cold, "{context}");
                let i = fleet.broken.expect("only a broken module is rejected");
                rejections += 1;
                assert!(
                    a.contains(&format!("modules/m{i}.ncl:")),
                    "{context}: the span points into the broken module's file: {a}"
                );
            }
            _ => panic!("{context}: {incremental:?} but a whole evaluation gives {whole:?}"),
        }
        if step % 6 == 5 {
            let cold = build(tempfile::tempdir().unwrap().path(), &fleet, record).0;
            assert_eq!(cold, incremental, "{context}: a cold build");
        }
        if let (Some(i), Outcome::Built(_), None) = (only, &incremental, fleet.broken) {
            if i < fleet.assigned {
                assert_eq!(
                    evaluated,
                    Some(2),
                    "{context}: only module m{i} is evaluated, and the merged one"
                );
                single_module_edits += 1;
            }
        }
    }
    eprintln!(
        "{single_module_edits} edits of one module's file evaluated it alone (and the merged one); {rejections} rejections"
    );
}
