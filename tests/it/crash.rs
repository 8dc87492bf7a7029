//! Crash safety: a switch, a take, a rollback and a flip, each crashed (abort, as a power cut stops a
//! process) at every named injection point, then run again. After that second run the machine is
//! in the old or the new generation — never a mix — every found original is at its path or in
//! the store, no temp file is left, and `current` names a complete generation.

use std::collections::BTreeSet;

use mesh_lib::model::FileState;
use mesh_lib::{GenerationId, Store, TargetPath};

use crate::node_fixture::{Fixture, MOTD};
use crate::support::{crashes_at, have_root_tools, run};

#[derive(Debug, Clone, Copy)]
enum Scenario {
    /// Adopted, a managed file drifted; switch to a declaration that changes it and drops one.
    Switch,
    /// Adopted; take the module whose file was found.
    Take,
    /// Adopted and taken; roll back across the take.
    Rollback,
    /// Adopted and one module taken; flip (forced: the others are not taken).
    Flip,
}

impl Scenario {
    fn setup(self, f: &Fixture) {
        f.ok(&["adopt", f.decl("a.ncl").to_str().unwrap()]);
        match self {
            Scenario::Switch => std::fs::write(f.at(MOTD), "drifted\n").unwrap(),
            Scenario::Take => {}
            Scenario::Rollback | Scenario::Flip => {
                f.ok(&["take", "ssh"]);
            }
        }
    }

    fn act(self, f: &Fixture) -> Vec<String> {
        let args = match self {
            Scenario::Switch => vec!["switch".into(), f.decl("b.ncl").display().to_string()],
            Scenario::Take => vec!["take".into(), "ssh".into()],
            Scenario::Rollback => vec!["rollback".into()],
            Scenario::Flip => vec!["flip".into(), "--force".into()],
        };
        args
    }

    /// What is run after the crash: the same command again while the generation in force does
    /// not have what it does (a take or a flip again also when the record already says so);
    /// once it does, a switch of the declaration, which changes nothing.
    fn again(self, f: &Fixture) -> Vec<String> {
        let shown = f.ok(&[
            "show",
            &f.current_id().parse::<GenerationId>().unwrap().to_string(),
            "--json",
        ]);
        let in_force: serde_json::Value = serde_json::from_str(&shown.stdout).unwrap();
        let unfinished = match self {
            Scenario::Take => in_force["modules"]["ssh"] != "taken",
            Scenario::Flip => in_force["mode"] == "adopted",
            _ => true,
        };
        if unfinished {
            self.act(f)
        } else {
            vec!["switch".into(), f.decl("a.ncl").display().to_string()]
        }
    }
}

/// The machine is exactly generation `id`: held files hold their originals, the others their
/// declared content and mode; paths the other generation declares and this one does not are gone.
fn assert_machine_is(
    f: &Fixture,
    store: &Store,
    id: &GenerationId,
    other: &GenerationId,
    context: &str,
) {
    let g = store
        .generation(id)
        .unwrap_or_else(|e| panic!("{context}: current is not a complete generation: {e}"));
    for blob in g.blobs() {
        store
            .blob(&blob)
            .unwrap_or_else(|e| panic!("{context}: {e}"));
    }
    for (path, file) in &g.files {
        let bytes =
            std::fs::read(f.at(path.as_str())).unwrap_or_else(|e| panic!("{context}: {path}: {e}"));
        let hash = mesh_lib::BlobHash::of(&bytes);
        match file.state {
            FileState::Held { original } => {
                assert_eq!(hash, original, "{context}: {path} should hold its original")
            }
            _ => {
                assert_eq!(
                    hash,
                    file.blob,
                    "{context}: {path} should be as generation {} declares",
                    id.short()
                );
                assert_eq!(
                    f.meta(path.as_str()).0,
                    file.mode.bits(),
                    "{context}: {path} mode"
                );
            }
        }
    }
    let o = store.generation(other).unwrap();
    for path in o.files.keys().filter(|p| !g.files.contains_key(*p)) {
        assert!(
            !f.at(path.as_str()).exists(),
            "{context}: {path} belongs to the other generation only"
        );
    }
}

fn assert_no_temp_files(f: &Fixture, context: &str) {
    for entry in walkdir::WalkDir::new(f.dir.path()) {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy();
        // The mesh's temp file beside a declared path: `.NAME.mesh-` and a 20-digit tag.
        let staged = name.starts_with('.')
            && name.rsplit_once(".mesh-").is_some_and(|(_, tag)| {
                tag.len() == 20 && tag.bytes().all(|b| b.is_ascii_hexdigit())
            });
        assert!(
            !staged && !name.starts_with(".tmp-"),
            "{context}: temp file left: {}",
            entry.path().display()
        );
    }
}

fn assert_originals_kept(f: &Fixture, store: &Store, context: &str) {
    let record = f.record();
    for (path, found) in record["found"]["files"].as_object().unwrap() {
        let hash: mesh_lib::BlobHash = found["hash"].as_str().unwrap().parse().unwrap();
        let at_path = std::fs::read(f.at(path))
            .map(|b| mesh_lib::BlobHash::of(&b) == hash)
            .unwrap_or(false);
        assert!(
            at_path || store.blob(&hash).is_ok(),
            "{context}: the original of {path} is lost"
        );
        let _ = TargetPath::new(path).unwrap();
    }
}

/// Every crash point, in a switch, a take, a rollback and a flip.
#[test]
fn crash_at_every_point_leaves_old_or_new() {
    if !have_root_tools(&[]) {
        return;
    }
    if !crate::support::crash_points_here() {
        return;
    }
    let points = mesh_lib::crash::POINTS;
    let mut covered = BTreeSet::new();
    let mut runs = 0;
    for scenario in [
        Scenario::Switch,
        Scenario::Take,
        Scenario::Rollback,
        Scenario::Flip,
    ] {
        // The ids a run without a crash goes from and to.
        let clean = Fixture::new();
        scenario.setup(&clean);
        let old = clean.current_id().parse::<GenerationId>().unwrap();
        let args = scenario.act(&clean);
        clean.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let new = clean.current_id().parse::<GenerationId>().unwrap();
        assert_ne!(old, new);

        for point in points {
            let f = Fixture::new();
            scenario.setup(&f);
            let args = scenario.act(&f);
            let context = format!("{scenario:?} crashed at {point}");
            let c = f.command(&args.iter().map(String::as_str).collect::<Vec<_>>());
            if crashes_at(c, point, &context) {
                covered.insert(*point);
                runs += 1;
            }
            let again = scenario.again(&f);
            let ran = run(f.command(&again.iter().map(String::as_str).collect::<Vec<_>>()));
            assert_eq!(
                ran.code, 0,
                "{context}: the run after the crash failed:\n{}",
                ran.stderr
            );
            let store = Store::open(&f.state()).unwrap();
            let now = f.current_id().parse::<GenerationId>().unwrap();
            assert!(
                now == old || now == new,
                "{context}: current is neither the old nor the new generation"
            );
            let other = if now == old { new } else { old };
            assert_machine_is(&f, &store, &now, &other, &context);
            assert_originals_kept(&f, &store, &context);
            assert_no_temp_files(&f, &context);
            assert!(
                !f.state().join("journal.json").exists(),
                "{context}: the journal was not finished"
            );
        }
    }
    println!(
        "crash points covered: {}/{} ({runs} crashed runs)",
        covered.len(),
        points.len()
    );
    let missing: Vec<_> = points.iter().filter(|p| !covered.contains(*p)).collect();
    assert!(
        missing.is_empty(),
        "crash points never reached: {missing:?}"
    );
}

/// `mesh gc` crashed after the profile's links go and after each object it removes, then run
/// again: the generation in force is complete (every blob it names is there and checks out),
/// the machine still matches it, every found original is at its path or in the store, and
/// `mesh verify` finds nothing wrong.
#[test]
fn gc_crashed_anywhere_loses_nothing_in_use() {
    if !have_root_tools(&[]) || !crate::support::crash_points_here() {
        return;
    }
    // Four generations, with contents only the older ones use.
    let setup = |f: &Fixture| {
        f.ok(&["adopt", f.decl("a.ncl").to_str().unwrap()]);
        f.ok(&["switch", f.decl("b.ncl").to_str().unwrap()]);
        f.write_decl("c.ncl", &crate::node_fixture::declaration("third\\n", true));
        f.ok(&["switch", f.decl("c.ncl").to_str().unwrap()]);
        f.ok(&["take", "ssh"]);
    };
    let mut crashed = 0;
    for point in mesh_lib::crash::GC_POINTS {
        for k in 1.. {
            let f = Fixture::new();
            setup(&f);
            let now = f.current_id().parse::<GenerationId>().unwrap();
            let context = format!("gc crashed at {point}:{k}");
            let stopped = crashes_at(
                f.command(&["gc", "--keep", "1"]),
                &format!("{point}:{k}"),
                &context,
            );
            f.ok(&["gc", "--keep", "1"]);
            f.ok(&["verify"]);
            assert_eq!(
                f.current_id().parse::<GenerationId>().unwrap(),
                now,
                "{context}: current changed"
            );
            let store = Store::open(&f.state()).unwrap();
            assert_machine_is(&f, &store, &now, &now, &context);
            assert_originals_kept(&f, &store, &context);
            if !stopped {
                break;
            }
            crashed += 1;
        }
    }
    println!("gc crashed {crashed} times");
    assert!(
        crashed >= 3,
        "gc reached its crash points only {crashed} times"
    );
}

/// A build whose new pack takes the store past its packs' limit merges them; crashed once the
/// merged pack is written, before the merged packs go (a build's evaluating process stops
/// there), the next build merges again, and every blob of every generation reads back and
/// checks out.
#[test]
fn a_build_crashed_while_merging_packs_loses_no_blob() {
    if !crate::support::crash_points_here() {
        return;
    }
    let fleet = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let build = |version: usize, crash: Option<&str>| {
        let file =
            format!(r#"files = [{{ path = "/etc/app.conf", content = "version {version}\n" }}]"#);
        let text = crate::rejections::node(
            crate::rejections::PORTS,
            &crate::rejections::module("app", &file),
        );
        std::fs::write(fleet.path().join("n.ncl"), text).unwrap();
        let mut c = crate::support::mesh(state.path());
        c.current_dir(fleet.path()).args(["build", "n.ncl"]);
        if let Some(at) = crash {
            c.env("MESH_CRASH_AT", at);
        }
        run(c)
    };
    let packs = || std::fs::read_dir(state.path().join("store/packs")).map_or(0, |d| d.count());
    // One pack per build: each adds one new content.
    let mut version = 0;
    while packs() < 16 {
        let ran = build(version, None);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        version += 1;
    }
    let crashed = build(version, Some("packs-merged"));
    assert_ne!(crashed.code, 0, "the build stopped at the merge");
    assert_eq!(packs(), 18, "the merged pack beside the seventeen it holds");
    let ran = build(version + 1, None);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(packs() <= 3, "merged again: {} packs", packs());

    let verified = {
        let mut c = crate::support::mesh(state.path());
        c.arg("verify");
        run(c)
    };
    assert_eq!(verified.code, 0, "{}", verified.stderr);
    let store = Store::open(state.path()).unwrap();
    let ids = store.generation_ids().unwrap();
    assert_eq!(
        ids.len(),
        version + 1,
        "every build but the crashed one kept its generation"
    );
    let mut seen = BTreeSet::new();
    for id in ids {
        for blob in store.generation(&id).unwrap().blobs() {
            store.blob(&blob).unwrap();
            seen.insert(blob);
        }
    }
    assert!(seen.len() > version, "{} blobs", seen.len());
}
