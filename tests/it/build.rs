//! `mesh build` of the bundled examples: every node builds, its id is pinned, and the id is the
//! same from any folder, in any environment.

use std::path::Path;

use crate::support::{build_json, copy_tree, mesh, repo, run};

/// The examples' generation ids. A change here is a change of the encoding or of the examples:
/// deliberate and visible. `examples/ci/check-ids.sh` checks the same ids.
pub const PINNED: [(&str, Option<&str>, &str); 3] = [
    (
        "control-node",
        Some("control-node.record.json"),
        "b3:76ed0dabf008c7cb098e7a0866cf4da582e79791c82a9b16eb6f8273b6fb671e",
    ),
    (
        "worker-1",
        Some("worker-1.record.json"),
        "b3:364b0662ff55ed1d6fdf3c9d8756a638aaece4974f527d041938b3adacaa364c",
    ),
    (
        "fresh-node",
        None,
        "b3:e3a13293d9dd7ce53aecb0e0b52fa81c52190c65d8a604497e8fadf7d363899b",
    ),
];

fn build_examples(examples: &Path, state: &Path, env: &[(&str, &str)]) -> Vec<String> {
    PINNED
        .iter()
        .map(|(node, record, _)| {
            let mut c = mesh(state);
            c.arg("build")
                .arg(examples.join("nodes").join(format!("{node}.ncl")))
                .arg("--no-cache");
            if let Some(r) = record {
                c.arg("--record").arg(examples.join("nodes").join(r));
            }
            for (k, v) in env {
                c.env(k, v);
            }
            let ran = run(c);
            assert_eq!(ran.code, 0, "{node}: {}", ran.stderr);
            ran.last_line().to_owned()
        })
        .collect()
}

/// Builds the examples in `examples` (with `state`): each node to its pinned id.
fn builds_to_the_pinned_ids(examples: &Path, state: &Path) {
    let ids = build_examples(examples, state, &[]);
    for ((node, _, pinned), id) in PINNED.iter().zip(&ids) {
        assert_eq!(id, pinned, "{node} in {}", examples.display());
    }
}

/// Every example node builds to its pinned id; the id is alone on the last line.
#[test]
fn every_example_builds_to_its_pinned_id() {
    let state = tempfile::tempdir().unwrap();
    let ids = build_examples(&repo().join("examples"), state.path(), &[]);
    let store = mesh_lib::Store::open(state.path()).unwrap();
    for ((node, _, pinned), id) in PINNED.iter().zip(&ids) {
        assert_eq!(id, pinned, "{node} no longer builds to its pinned id");
        // And each is one a switch accepts.
        let generation = store.generation(&id.parse().unwrap()).unwrap();
        assert_eq!(generation.validate(), Ok(()), "{node}");
    }
}

/// The examples copied into two different folders, built with different environments (time
/// zone, locale, user, HOME), give the same ids; building twice in one folder too.
#[test]
fn ids_do_not_depend_on_folder_or_environment() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::Builder::new()
        .prefix("another-checkout")
        .tempdir()
        .unwrap();
    // Two copies of the fleet (the tree its imports may reach is the fleet file's folder: see
    // compiler/src/imports.rs).
    for copy in [a.path().to_owned(), b.path().join("deeper")] {
        copy_tree(&repo().join("examples"), &copy.join("examples"));
    }
    let state_a = tempfile::tempdir().unwrap();
    let state_b = tempfile::tempdir().unwrap();
    let first = build_examples(&a.path().join("examples"), state_a.path(), &[]);
    let again = build_examples(&a.path().join("examples"), state_a.path(), &[]);
    let other = build_examples(
        &b.path().join("deeper/examples"),
        state_b.path(),
        &[
            ("TZ", "Pacific/Kiritimati"),
            ("LANG", "de_DE.UTF-8"),
            ("LC_ALL", "tr_TR.UTF-8"),
            ("USER", "nobody"),
            ("HOME", "/nonexistent"),
        ],
    );
    assert_eq!(first, again);
    assert_eq!(first, other);
}

/// Issue 23: the examples copied to a plain folder — no checkout anywhere above, as a tarball,
/// a CI artifact or a Nix store path has them — build to their pinned ids: the fleet file's
/// folder is the tree. So does the fleet, found from the working folder as Cargo finds
/// `Cargo.toml`, and the CI script.
#[test]
fn the_examples_build_to_their_pinned_ids_in_a_plain_folder() {
    let dir = tempfile::tempdir().unwrap();
    let examples = dir.path().join("plain/examples");
    copy_tree(&repo().join("examples"), &examples);
    assert!(
        !examples.ancestors().any(|d| d.join(".git").exists()),
        "a plain folder, in no checkout"
    );
    let state = tempfile::tempdir().unwrap();
    builds_to_the_pinned_ids(&examples, state.path());
    let mut c = mesh(state.path());
    c.current_dir(examples.join("nodes"))
        .args(["fleet", "build", "--check", "../ci/ids.txt"]);
    let ran = run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let ci = std::process::Command::new(examples.join("ci/check-ids.sh"))
        .arg(env!("CARGO_BIN_EXE_mesh"))
        .env_remove("MESH_STATE_DIR")
        .output()
        .unwrap();
    assert!(
        ci.status.success(),
        "{}{}",
        String::from_utf8_lossy(&ci.stdout),
        String::from_utf8_lossy(&ci.stderr)
    );
}

/// A folder made read-only for a test — by its modes, and as root (whom modes do not stop) by a
/// read-only bind mount on itself — and writable again when dropped, so it can be removed.
struct ReadOnly(std::path::PathBuf, bool);

impl ReadOnly {
    fn make(dir: &Path) -> Self {
        use std::os::unix::fs::PermissionsExt;
        for entry in walkdir::WalkDir::new(dir) {
            let entry = entry.unwrap();
            let mode = if entry.file_type().is_dir() {
                0o555
            } else {
                0o444
            };
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        if !rustix::process::geteuid().is_root() {
            return Self(dir.to_owned(), false);
        }
        // Root writes whatever the modes say: a read-only bind mount of the folder on itself.
        let mount = |args: &[&str]| {
            let out = std::process::Command::new("mount")
                .args(args)
                .arg(dir)
                .arg(dir)
                .output()
                .unwrap();
            assert!(out.status.success(), "mount {args:?}: {out:?}");
        };
        mount(&["--bind"]);
        let guard = Self(dir.to_owned(), true);
        mount(&["-o", "remount,bind,ro"]);
        guard
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if self.1 {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
        for entry in walkdir::WalkDir::new(&self.0).into_iter().flatten() {
            let mode = if entry.file_type().is_dir() {
                0o755
            } else {
                0o644
            };
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode));
        }
    }
}

/// Issue 23: the examples in a read-only folder build to their pinned ids — the build writes
/// nothing in the fleet's tree — and so does the fleet.
#[test]
fn the_examples_build_to_their_pinned_ids_in_a_read_only_folder() {
    let dir = tempfile::tempdir().unwrap();
    let examples = dir.path().join("examples");
    copy_tree(&repo().join("examples"), &examples);
    let _read_only = ReadOnly::make(&examples);
    assert!(
        std::fs::write(examples.join("nodes/written"), "x").is_err(),
        "the folder is read-only"
    );
    let state = tempfile::tempdir().unwrap();
    builds_to_the_pinned_ids(&examples, state.path());
    let mut c = mesh(state.path());
    c.arg("fleet")
        .arg("build")
        .arg("--fleet")
        .arg(examples.join("fleet.ncl"))
        .arg("--check")
        .arg(examples.join("ci/ids.txt"));
    let ran = run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
}

/// `--check` passes with the right id and exits 2 naming both ids with a wrong one.
#[test]
fn check_gate_names_both_ids() {
    let state = tempfile::tempdir().unwrap();
    let node = repo().join("examples/nodes/fresh-node.ncl");
    let id = build_json(state.path(), &node, None)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut ok = mesh(state.path());
    ok.arg("build").arg(&node).arg("--check").arg(&id);
    assert_eq!(run(ok).code, 0);
    let wrong = format!("b3:{}", "0".repeat(64));
    let mut bad = mesh(state.path());
    bad.arg("build").arg(&node).arg("--check").arg(&wrong);
    let ran = run(bad);
    assert_eq!(ran.code, 2);
    assert!(
        ran.stderr.contains(&id) && ran.stderr.contains(&wrong),
        "{}",
        ran.stderr
    );
    assert_eq!(ran.stdout, "", "a refused build prints no id on stdout");
}

/// Every path of the store, each with its size: what a refused build must leave as it was.
fn store_listing(state: &Path) -> Vec<(String, u64)> {
    walkdir::WalkDir::new(state.join("store"))
        .sort_by_file_name()
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| {
            let len = e.metadata().map(|m| m.len()).unwrap_or(0);
            (e.path().display().to_string(), len)
        })
        .collect()
}

/// A refused build leaves no trace: `mesh build --locked` of a declaration with images named by
/// a tag alone (the bundled fresh node), `--check` of another id, `fleet build --check` of a
/// file that names other ids, `images lock --check` — each exits 2, prints no id on stdout, and
/// the store is as it was; the same builds unrefused keep their generations.
#[test]
fn a_refused_build_writes_nothing_and_prints_no_id() {
    let state = tempfile::tempdir().unwrap();
    let examples = tempfile::tempdir().unwrap();
    copy_tree(&repo().join("examples"), examples.path());
    // The store made by a build of another node first: what it holds must not grow.
    let worker = examples.path().join("nodes/worker-1.ncl");
    let mut c = mesh(state.path());
    c.arg("build")
        .arg(&worker)
        .arg("--record")
        .arg(examples.path().join("nodes/worker-1.record.json"));
    assert_eq!(run(c).code, 0);
    let before = store_listing(state.path());
    assert!(!before.is_empty());
    let fresh = examples.path().join("nodes/fresh-node.ncl");
    let refused = |args: &[&str]| {
        let mut c = mesh(state.path());
        c.args(args);
        let ran = run(c);
        assert_eq!(ran.code, 2, "{args:?}: {}{}", ran.stdout, ran.stderr);
        assert_eq!(ran.stdout, "", "{args:?} printed on stdout");
        assert_eq!(
            store_listing(state.path()),
            before,
            "{args:?} wrote in the store"
        );
        ran.stderr
    };
    let fresh_s = fresh.to_str().unwrap();
    let said = refused(&["build", fresh_s, "--locked"]);
    assert!(said.contains("nothing was kept"), "{said}");
    let said = refused(&["build", fresh_s, "--locked", "--json"]);
    assert!(said.contains("--locked"), "{said}");
    let other = format!("b3:{}", "0".repeat(64));
    let said = refused(&["build", fresh_s, "--check", &other]);
    assert!(said.contains(&other), "{said}");
    let said = refused(&["build", fresh_s, "--no-cache", "--check", &other]);
    assert!(said.contains("nothing was kept"), "{said}");
    let ids = examples.path().join("other-ids.txt");
    let ci_ids = std::fs::read_to_string(examples.path().join("ci/ids.txt")).unwrap();
    let wrong: String = ci_ids
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .map(|l| format!("{} {other}\n", l.split_whitespace().next().unwrap()))
        .collect();
    std::fs::write(&ids, wrong).unwrap();
    let fleet = examples.path().join("fleet.ncl");
    let mut c = mesh(state.path());
    c.arg("fleet")
        .arg("build")
        .arg("--fleet")
        .arg(&fleet)
        .arg("--check")
        .arg(&ids);
    let ran = run(c);
    assert_eq!(ran.code, 2, "{}{}", ran.stdout, ran.stderr);
    assert!(
        !ran.stdout.contains("b3:"),
        "a refused fleet build printed an id: {}",
        ran.stdout
    );
    assert_eq!(
        store_listing(state.path()),
        before,
        "fleet build --check wrote"
    );
    // A check of the image lock builds only to look: nothing kept.
    let mut c = mesh(state.path());
    c.args(["images", "lock", "--check"]).arg(&fresh);
    let ran = run(c);
    assert_eq!(ran.code, 2, "{}{}", ran.stdout, ran.stderr);
    assert_eq!(
        store_listing(state.path()),
        before,
        "images lock --check wrote"
    );

    // Unrefused, the same build keeps its generation and prints its id last.
    let mut c = mesh(state.path());
    c.arg("build").arg(&fresh);
    let ran = run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.last_line().starts_with("b3:"), "{}", ran.stdout);
    assert_ne!(store_listing(state.path()), before, "a build kept nothing");
}

/// `mesh show` prints files with their states, containers, ports and the firewall as nft text;
/// by id (or prefix) and by declaration alike.
#[test]
fn show_prints_a_generation_for_a_person() {
    let state = tempfile::tempdir().unwrap();
    let nodes = repo().join("examples/nodes");
    let built = build_json(
        state.path(),
        &nodes.join("control-node.ncl"),
        Some(&nodes.join("control-node.record.json")),
    );
    let id = built["id"].as_str().unwrap();
    let mut c = mesh(state.path());
    c.arg("show").arg(&id[..12]);
    let ran = run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    for expected in [
        "held     /etc/ssh/sshd_config.d/10-mesh.conf",
        "managed  /etc/apt/apt.conf.d/50mesh",
        "staged   /etc/caddy/Caddyfile",
        "held     forge",
        "publish 127.0.0.1:15673 -> 15672/tcp",
        "table inet mesh_guard {",
        "type filter hook prerouting priority mangle; policy accept;",
        "no base ruleset on an adopted node",
    ] {
        assert!(
            ran.stdout.contains(expected),
            "missing {expected:?} in:\n{}",
            ran.stdout
        );
    }
    let mut missing = mesh(state.path());
    missing.arg("show").arg(format!("b3:{}", "f".repeat(64)));
    let ran = run(missing);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(ran.stderr.contains("is not in the store"), "{}", ran.stderr);
}

/// `mesh show` lists the declared units, a template with its instances; `mesh diff` says which
/// instances changed and what a change of a slice's file does (nothing restarted).
#[test]
fn show_and_diff_say_units_and_instances() {
    use crate::rejections::{module, node, PORTS};
    let state = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let units = |instances: &str, tasks: u32| {
        module(
            "echo",
            &format!(
                r#"units = [{{ name = "echo@.service", text = "[Service]\nExecStart=/bin/true\n", instances = [{instances}] }}, {{ name = "app.slice", text = "[Slice]\nTasksMax={tasks}\n" }}]"#
            ),
        )
    };
    let ids: Vec<String> = [("\"one\", \"two\"", 10), ("\"one\"", 20)]
        .iter()
        .enumerate()
        .map(|(i, (instances, tasks))| {
            let path = dir.path().join(format!("v{i}.ncl"));
            std::fs::write(&path, node(PORTS, &units(instances, *tasks))).unwrap();
            build_json(state.path(), &path, None)["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let mut c = mesh(state.path());
    c.arg("show").arg(&ids[0]);
    let shown = run(c);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(
        shown
            .stdout
            .contains("managed  echo@.service  enabled, started  [echo]")
            && shown.stdout.contains("instances one, two")
            && shown.stdout.contains("app.slice  enabled, started  [echo]"),
        "{}",
        shown.stdout
    );
    let mut c = mesh(state.path());
    c.arg("diff").arg(&ids[0]).arg(&ids[1]);
    let diff = run(c);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
    assert!(
        diff.stdout
            .contains("unit echo@.service: instances one (was one, two)")
            && diff.stdout.contains(
                "unit app.slice: its unit file changes: read by systemd, nothing in it restarted"
            ),
        "{}",
        diff.stdout
    );
}

/// A pinned port overrides the declaration's and reaches every use: the template of a file, the
/// openings, the containers.
#[test]
fn pinned_port_reaches_templates_openings_and_containers() {
    let state = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let nodes = repo().join("examples/nodes");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(nodes.join("control-node.record.json")).unwrap())
            .unwrap();
    record["pinned"]["hub"] = 41820.into();
    record["pinned"]["bus"] = 14222.into();
    let record_path = dir.path().join("record.json");
    std::fs::write(&record_path, serde_json::to_vec(&record).unwrap()).unwrap();
    let mut c = mesh(state.path());
    c.arg("show")
        .arg(nodes.join("control-node.ncl"))
        .arg("--record")
        .arg(&record_path)
        .arg("--json");
    let ran = run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let g: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(g["settings"]["ports"]["hub"], 41820);
    let hub = g["openings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["setting"] == "hub")
        .unwrap();
    assert_eq!(hub["port"], 41820);
    assert_eq!(g["containers"]["mesh-bus"]["ports"][0]["host_port"], 14222);
    let blob: mesh_lib::BlobHash = g["files"]["/etc/wireguard/mesh0.conf"]["blob"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let store = mesh_lib::Store::open(state.path()).unwrap();
    let text = String::from_utf8(store.blob(&blob).unwrap()).unwrap();
    assert!(text.contains("ListenPort = 41820"), "{text}");
    assert!(text.contains("Address = 10.77.0.1/24"), "{text}");
}

/// The CI example's committed ids (`examples/ci/ids.txt`) are the pinned ones.
#[test]
fn ci_example_ids_match_the_pins() {
    let text = std::fs::read_to_string(repo().join("examples/ci/ids.txt")).unwrap();
    let committed: Vec<(String, String)> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[0].to_owned(), cols[2].to_owned())
        })
        .collect();
    let pinned: Vec<(String, String)> = PINNED
        .iter()
        .map(|(n, _, id)| (n.to_string(), id.to_string()))
        .collect();
    assert_eq!(committed, pinned);
}

/// `mesh verify` finds a corrupted blob (exit 3, the file named); `mesh show` refuses to use it.
#[test]
fn verify_reports_a_corrupted_blob() {
    use std::os::unix::fs::PermissionsExt;
    let state = tempfile::tempdir().unwrap();
    let built = build_json(
        state.path(),
        &repo().join("examples/nodes/fresh-node.ncl"),
        None,
    );
    let mut ok = mesh(state.path());
    ok.arg("verify");
    assert_eq!(run(ok).code, 0);
    let store = mesh_lib::Store::open(state.path()).unwrap();
    let id: mesh_lib::GenerationId = built["id"].as_str().unwrap().parse().unwrap();
    let blob = store
        .generation(&id)
        .unwrap()
        .files
        .values()
        .next()
        .unwrap()
        .blob;
    // A build's blobs are packed: damage this one's bytes inside its pack.
    let Some(mesh_lib::store::Location::Packed { pack, entry }) = store.locate(&blob).unwrap()
    else {
        panic!("a build's blob is packed");
    };
    std::fs::set_permissions(&pack, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut bytes = std::fs::read(&pack).unwrap();
    bytes[entry.offset as usize] ^= 0xff;
    std::fs::write(&pack, bytes).unwrap();
    assert!(matches!(
        store.blob(&blob),
        Err(mesh_lib::store::StoreError::Corrupt { .. })
    ));
    let mut bad = mesh(state.path());
    bad.arg("verify");
    let ran = run(bad);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(
        ran.stdout.contains(&pack.display().to_string()),
        "{}",
        ran.stdout
    );
}

/// A file declared with a mode that is not world-readable (the hub's key-bearing configuration,
/// 0600) is not world-readable in the store either; the store's folders are not world-writable.
#[test]
fn secret_stays_secret_in_the_store() {
    use std::os::unix::fs::MetadataExt;
    let state = tempfile::tempdir().unwrap();
    let nodes = repo().join("examples/nodes");
    let built = build_json(
        state.path(),
        &nodes.join("control-node.ncl"),
        Some(&nodes.join("control-node.record.json")),
    );
    let store = mesh_lib::Store::open(state.path()).unwrap();
    let id: mesh_lib::GenerationId = built["id"].as_str().unwrap().parse().unwrap();
    let secret = store.generation(&id).unwrap().files
        [&mesh_lib::TargetPath::new("/etc/wireguard/mesh0.conf").unwrap()]
        .blob;
    let file = match store.locate(&secret).unwrap().expect("stored") {
        mesh_lib::store::Location::Loose(p) => p,
        mesh_lib::store::Location::Packed { pack, .. } => pack,
    };
    assert_eq!(
        std::fs::metadata(&file).unwrap().mode() & 0o077,
        0,
        "{} is readable by others",
        file.display()
    );
    for entry in walkdir::WalkDir::new(state.path().join("store")) {
        let entry = entry.unwrap();
        if entry.file_type().is_dir() {
            assert_eq!(
                entry.metadata().unwrap().mode() & 0o002,
                0,
                "{} is world-writable",
                entry.path().display()
            );
        }
    }
}

/// The example fleet builds every node, in parallel, with the records beside the declarations:
/// the same ids as one build each; `--check` against examples/ci/ids.txt passes, and a changed
/// id is named (exit 2).
#[test]
fn the_example_fleet_builds_to_the_pinned_ids() {
    let state = tempfile::tempdir().unwrap();
    let fleet = repo().join("examples/fleet.ncl");
    let mut c = mesh(state.path());
    c.args(["fleet", "build", "--json", "--fleet"]).arg(&fleet);
    let ran = run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let json: serde_json::Value = serde_json::from_str(ran.last_line()).unwrap();
    for (node, _, id) in PINNED {
        let row = json["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["node"] == node)
            .unwrap_or_else(|| panic!("{node}: {json}"));
        assert_eq!(row["id"], id, "{node}");
    }
    let ids = repo().join("examples/ci/ids.txt");
    let mut c = mesh(state.path());
    c.args(["fleet", "build", "--fleet"])
        .arg(&fleet)
        .arg("--check")
        .arg(&ids);
    assert_eq!(run(c).code, 0);
    let wrong = state.path().join("wrong.txt");
    std::fs::write(
        &wrong,
        std::fs::read_to_string(&ids)
            .unwrap()
            .replace("b3:76ed", "b3:0000"),
    )
    .unwrap();
    let mut c = mesh(state.path());
    c.args(["fleet", "build", "--fleet"])
        .arg(&fleet)
        .arg("--check")
        .arg(&wrong);
    let ran = run(c);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("control-node: builds to"),
        "{}",
        ran.stderr
    );
}

/// Issue 51: a fleet whose second node was given the first's private address and the hub's
/// role (what an import wrote before it asked the fleet) is refused by `mesh fleet build` (exit
/// 2), naming both nodes and the file and line where each says it; and so is a deploy, before
/// it connects to any node.
#[test]
fn a_fleet_with_one_address_twice_is_refused_naming_both_nodes() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&repo().join("examples"), &dir.path().join("examples"));
    let worker = dir.path().join("examples/nodes/worker-1.ncl");
    let text = std::fs::read_to_string(&worker).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("private_network"))
        .unwrap()
        + 1;
    std::fs::write(
        &worker,
        text.replace(
            r#"address = "10.77.0.12" }"#,
            r#"address = "10.77.0.1", hub = true }"#,
        ),
    )
    .unwrap();
    let fleet = dir.path().join("examples/fleet.ncl");
    let state = tempfile::tempdir().unwrap();
    for args in [
        vec!["fleet", "build"],
        vec!["deploy", "worker-1", "--dry-run"],
    ] {
        let mut c = mesh(state.path());
        c.arg("--fleet").arg(&fleet).args(&args);
        let ran = run(c);
        assert_eq!(ran.code, 2, "{args:?}: {}", ran.stderr);
        let said = ran.stderr.replace('\n', " ");
        assert!(
            said.contains("have one private address, 10.77.0.1")
                && said.contains("are each the private network's hub")
                && said.contains("control-node (")
                && said.contains(&format!("worker-1 ({}:{line})", worker.display())),
            "{args:?}: {}",
            ran.stderr
        );
    }
}
