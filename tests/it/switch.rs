//! `mesh switch`, `adopt`, `take`, `rollback`, `generations`, `diff`, `status`, `gc` on a real
//! filesystem under a root the test creates.

use std::os::unix::fs::MetadataExt;

use crate::node_fixture::{declaration, Fixture, EXTRA, MOTD, ORIGINAL_SSH, SSH};
use crate::support::have_root_tools;

/// Adopt holds the found drop-in untouched (same inode, same mtime: never opened for writing)
/// and writes what collides with nothing; take replaces it and keeps the original in the store;
/// rollback restores it byte for byte with its mode and owner; rolling forward takes it again.
#[test]
fn adopt_holds_take_replaces_rollback_restores() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    let before = std::fs::metadata(f.at(SSH)).unwrap();
    let adopted = f.ok(&["adopt", f.decl("a.ncl").to_str().unwrap()]);
    assert!(
        adopted.stdout.contains(&format!("hold     {SSH}")),
        "{}",
        adopted.stdout
    );
    let after = std::fs::metadata(f.at(SSH)).unwrap();
    assert_eq!(
        (before.ino(), before.mtime_nsec(), before.ctime_nsec()),
        (after.ino(), after.mtime_nsec(), after.ctime_nsec())
    );
    assert_eq!(f.read(SSH).unwrap(), ORIGINAL_SSH);
    assert_eq!(f.read(MOTD).unwrap(), "hello\n");
    let record = f.record();
    assert_eq!(record["mode"], "adopted");
    assert_eq!(record["found"]["files"][SSH]["mode"], "0640");

    let taken = f.ok(&["take", "ssh"]);
    assert!(
        taken.stdout.contains(&format!("take     {SSH}")),
        "{}",
        taken.stdout
    );
    assert_eq!(f.read(SSH).unwrap(), "PasswordAuthentication no\n");
    assert_eq!(f.meta(SSH), (0o600, 0, 0));
    let original: mesh_lib::BlobHash = f.record()["found"]["files"][SSH]["hash"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let store = mesh_lib::Store::open(&f.state()).unwrap();
    assert_eq!(
        store.blob(&original).unwrap(),
        ORIGINAL_SSH.as_bytes(),
        "the original stays in the store"
    );

    // The summary counts by the states of the generation rolled back to: the restored file is
    // held again (issue 12: it said "0 held").
    let back = f.ok(&["rollback"]);
    assert!(
        back.stdout
            .contains(": 1 file(s) changed; files 0 managed, 2 staged, 1 held"),
        "{}",
        back.stdout
    );
    assert_eq!(f.read(SSH).unwrap(), ORIGINAL_SSH);
    assert_eq!(f.meta(SSH), (0o640, 1000, 1000));
    assert_eq!(
        f.record()["taken"],
        serde_json::json!([]),
        "the record follows what is in force"
    );

    f.ok(&["rollback", "--to", "2"]);
    assert_eq!(f.read(SSH).unwrap(), "PasswordAuthentication no\n");
    let generations = f.ok(&["generations", "--json"]);
    let g: serde_json::Value = serde_json::from_str(&generations.stdout).unwrap();
    let rows = g["generations"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(
        rows.iter()
            .map(|r| r["trigger"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["adopt", "take", "rollback", "rollback"]
    );
    assert_eq!(rows[3]["current"], true);
    assert_eq!(rows[3]["id"], rows[1]["id"]);

    let diff = f.ok(&["diff", "1", "2"]);
    assert!(
        diff.stdout.contains(&format!(
            "~ {SSH}: content, mode 0644 -> 0600, held -> managed"
        )) || diff.stdout.contains("held -> managed"),
        "{}",
        diff.stdout
    );
    assert!(
        diff.stdout.contains("module ssh: assigned -> taken"),
        "{}",
        diff.stdout
    );
}

/// `--dry-run` prints the plan and changes nothing: not the root, not the profile.
#[test]
fn dry_run_changes_nothing() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    f.ok(&["adopt", f.decl("a.ncl").to_str().unwrap()]);
    let root_before = f.snapshot();
    let profile_before = f.ok(&["generations", "--json"]).stdout;
    let ran = f.ok(&["switch", f.decl("b.ncl").to_str().unwrap(), "--dry-run"]);
    assert!(ran.stdout.contains("nothing was changed"), "{}", ran.stdout);
    assert!(
        ran.stdout.contains(&format!("remove   {EXTRA}")),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains(&format!("update   {MOTD}")),
        "{}",
        ran.stdout
    );
    assert_eq!(f.snapshot(), root_before);
    assert_eq!(f.ok(&["generations", "--json"]).stdout, profile_before);
}

/// A file no longer declared is removed when it holds what the mesh wrote; a drifted one is
/// recorded in the store first. `mesh status` reports the drift beforehand.
#[test]
fn removal_keeps_what_the_mesh_did_not_write() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    f.ok(&["adopt", f.decl("a.ncl").to_str().unwrap()]);
    std::fs::write(f.at(EXTRA), "changed by hand\n").unwrap();
    let status = f.ok(&["status", "--json"]);
    let s: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    // Named fields, never positions (the manual documents them).
    assert_eq!(s["drift"][0]["path"], EXTRA, "{}", status.stdout);
    let changed = mesh_lib::BlobHash::of(b"changed by hand\n");
    assert_eq!(
        s["drift"][0]["what"],
        format!("content changed ({})", changed.short())
    );
    assert_eq!(
        s["files"],
        serde_json::json!({"held": 1, "staged": 2, "managed": 0})
    );
    assert_eq!(
        s["containers"],
        serde_json::json!({"held": 0, "staged": 0, "managed": 0})
    );
    assert_eq!(s["units"], s["containers"]);
    assert_eq!(s["current"]["number"], 1);
    assert!(s["current"]["id"].as_str().unwrap().starts_with("b3:"));
    f.ok(&["switch", f.decl("b.ncl").to_str().unwrap()]);
    assert!(!f.at(EXTRA).exists());
    let store = mesh_lib::Store::open(&f.state()).unwrap();
    assert!(
        store.has_blob(&mesh_lib::BlobHash::of(b"changed by hand\n")),
        "the drifted content was recorded"
    );
    assert_eq!(f.read(SSH).unwrap(), ORIGINAL_SSH, "held throughout");
}

/// A newly assigned module whose path is found: `mesh switch NODE.ncl` records and holds it; a
/// generation built elsewhere that does not hold it is refused (exit 2) with the path named.
#[test]
fn found_file_not_held_is_refused() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    f.ok(&["adopt", f.decl("b.ncl").to_str().unwrap()]);
    // The predecessor has a file where a module assigned later declares one.
    std::fs::create_dir_all(f.at("/etc/extra")).unwrap();
    std::fs::write(f.at(EXTRA), "the predecessor's extra\n").unwrap();
    // CI builds the new declaration from the exported record, which knows nothing of it.
    let exported = f.ok(&["record", "export"]).stdout;
    let record = f.dir.path().join("exported.json");
    std::fs::write(&record, exported).unwrap();
    let built = f.ok(&[
        "build",
        f.decl("a.ncl").to_str().unwrap(),
        "--record",
        record.to_str().unwrap(),
    ]);
    let refused = f.mesh(&["switch", "--generation", built.last_line()]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains(EXTRA), "{}", refused.stderr);
    assert_eq!(f.read(EXTRA).unwrap(), "the predecessor's extra\n");
    // On the node, the switch records it and holds it.
    let ran = f.ok(&["switch", f.decl("a.ncl").to_str().unwrap()]);
    assert!(
        ran.stdout.contains(&format!("hold     {EXTRA}")),
        "{}",
        ran.stdout
    );
    assert_eq!(f.read(EXTRA).unwrap(), "the predecessor's extra\n");
    assert!(f.record()["found"]["files"][EXTRA].is_object());
}

/// gc keeps what is referenced: the current generation, the found originals (the record), the
/// host store's content; old generation links go.
#[test]
fn gc_never_removes_a_referenced_blob() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    f.ok(&["adopt", f.decl("a.ncl").to_str().unwrap()]);
    f.ok(&["take", "ssh"]);
    f.ok(&["switch", f.decl("b.ncl").to_str().unwrap()]);
    let gc = f.ok(&["gc", "--keep", "1", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&gc.stdout).unwrap();
    assert_eq!(
        report["removed_generations"],
        serde_json::json!([1, 2]),
        "{}",
        gc.stdout
    );
    let verify = f.ok(&["verify"]);
    assert!(verify.stdout.contains("checked"), "{}", verify.stdout);
    let store = mesh_lib::Store::open(&f.state()).unwrap();
    let original: mesh_lib::BlobHash = f.record()["found"]["files"][SSH]["hash"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(store.blob(&original).unwrap(), ORIGINAL_SSH.as_bytes());
    let status = f.ok(&["status", "--json"]);
    assert!(status.stdout.contains("\"drift\":[]"), "{}", status.stdout);
    // The current generation still switches (its blobs are all there).
    f.ok(&["switch", f.decl("b.ncl").to_str().unwrap()]);
    let gone = f.mesh(&["rollback", "--to", "1"]);
    assert_eq!(gone.code, 1, "{}", gone.stderr);
    assert!(
        gone.stderr.contains("there is no generation 1"),
        "{}",
        gone.stderr
    );
}

/// A switch to what is already in force changes nothing and adds no generation.
#[test]
fn no_op_switch_adds_nothing() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    f.write_decl("plain.ncl", &declaration("x\\n", false));
    f.ok(&["switch", f.decl("plain.ncl").to_str().unwrap()]);
    let before = f.snapshot();
    let ran = f.ok(&["switch", f.decl("plain.ncl").to_str().unwrap()]);
    assert!(ran.stdout.contains("already at"), "{}", ran.stdout);
    assert_eq!(f.snapshot(), before);
    let g: serde_json::Value =
        serde_json::from_str(&f.ok(&["generations", "--json"]).stdout).unwrap();
    assert_eq!(g["generations"].as_array().unwrap().len(), 1);
}

/// A file changed behind the mesh's back with its size and modification time put back is still
/// seen (its change time moved): the next switch records it and writes the declared content.
#[test]
fn drift_hidden_behind_an_old_mtime_is_seen() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    f.write_decl("plain.ncl", &declaration("abcdef\\n", false));
    f.ok(&["switch", f.decl("plain.ncl").to_str().unwrap()]);
    let mtime = std::fs::metadata(f.at(MOTD)).unwrap().modified().unwrap();
    std::fs::write(f.at(MOTD), "ABCDEF\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(f.at(MOTD))
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let ran = f.ok(&["switch", f.decl("plain.ncl").to_str().unwrap()]);
    assert!(
        ran.stdout.contains(&format!("update   {MOTD}")),
        "{}",
        ran.stdout
    );
    assert_eq!(f.read(MOTD).unwrap(), "abcdef\n");
    let store = mesh_lib::Store::open(&f.state()).unwrap();
    assert!(store.has_blob(&mesh_lib::BlobHash::of(b"ABCDEF\n")));
}

/// `mesh take A B` takes several modules in one generation (an operator whose apps' data has
/// moved does not want one generation per app): both found files replaced, one profile entry,
/// the record naming both. Taking them again is refused (exit 2), a module the declaration does
/// not assign is bad input (exit 1), each naming every such module and changing nothing; a
/// multi-module take cut short after the record was written is finished by taking again.
#[test]
fn take_of_several_modules_is_one_generation() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    std::fs::create_dir_all(f.at("/etc/extra")).unwrap();
    std::fs::write(f.at(EXTRA), "the predecessor's extra\n").unwrap();
    let decl = f.decl("a.ncl");
    f.ok(&["adopt", decl.to_str().unwrap()]);
    assert_eq!(f.read(EXTRA).unwrap(), "the predecessor's extra\n", "held");

    let taken = f.ok(&["take", "ssh", "extra", "--json"]);
    let v: serde_json::Value = serde_json::from_str(taken.last_line()).unwrap();
    assert_eq!(v["number"], 2, "one generation for both: {v}");
    assert_eq!(f.read(SSH).unwrap(), "PasswordAuthentication no\n");
    assert_eq!(f.read(EXTRA).unwrap(), "extra\n");
    assert_eq!(f.record()["taken"], serde_json::json!(["extra", "ssh"]));
    let g: serde_json::Value =
        serde_json::from_str(&f.ok(&["generations", "--json"]).stdout).unwrap();
    assert_eq!(g["generations"].as_array().unwrap().len(), 2);

    let again = f.mesh(&["take", "extra", "ssh", decl.to_str().unwrap()]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(
        again
            .stderr
            .contains("modules extra, ssh are already taken on node n1"),
        "{}",
        again.stderr
    );
    let record = f.record();
    let unknown = f.mesh(&["take", "motd", "nosuch", "other"]);
    assert_eq!(unknown.code, 1, "{}", unknown.stderr);
    assert!(
        unknown
            .stderr
            .contains("does not assign modules nosuch, other to node n1"),
        "{}",
        unknown.stderr
    );
    assert_eq!(f.record(), record, "nothing changed");

    // Back before the take, then a take of both cut short once its journal names the files:
    // the record still says what is in force (nothing taken), and taking again finishes it.
    f.ok(&["rollback", "--to", "1"]);
    assert_eq!(f.read(SSH).unwrap(), ORIGINAL_SSH);
    assert_eq!(f.read(EXTRA).unwrap(), "the predecessor's extra\n");
    if !crate::support::crash_points_here() {
        return;
    }
    let cut = crate::support::crashes_at(
        f.command(&["take", "ssh", "extra"]),
        "journal-written",
        "take ssh extra",
    );
    assert!(cut, "the take reached its journal");
    assert_eq!(f.record()["taken"], serde_json::json!([]));
    f.ok(&["take", "ssh", "extra"]);
    assert_eq!(f.read(SSH).unwrap(), "PasswordAuthentication no\n");
    assert_eq!(f.read(EXTRA).unwrap(), "extra\n");
}

/// The record follows what is put in force, whatever puts it there: a switch by id forward
/// across the flip leaves the record managed (as the flip did), and one back to the adoption's
/// generation leaves it adopted, its take undone — `mesh status` and the record never
/// disagree with the generation in force.
#[test]
fn a_switch_by_id_across_the_flip_leaves_the_record_saying_what_is_in_force() {
    if !crate::support::have_root_tools(&["ip"]) {
        return;
    }
    let f = Fixture::new();
    let a = f.decl("a.ncl").display().to_string();
    f.ok(&["adopt", &a]);
    let adopted = f.current_id();
    f.ok(&["take", "ssh"]);
    f.ok(&["flip", "--force"]);
    let flipped = f.current_id();
    f.ok(&["rollback", "--to", "1"]);
    assert_eq!(f.record()["mode"], "adopted");
    assert_eq!(f.record()["taken"], serde_json::json!([]));

    f.ok(&["switch", "--generation", &flipped]);
    assert_eq!(f.record()["mode"], "managed", "forward across the flip");
    let status: serde_json::Value =
        serde_json::from_str(f.ok(&["status", "--json"]).last_line()).unwrap();
    assert_eq!(status["mode"], "managed", "{status}");

    f.ok(&["switch", "--generation", &adopted]);
    assert_eq!(f.record()["mode"], "adopted", "back across it");
    assert_eq!(
        f.record()["taken"],
        serde_json::json!([]),
        "its take undone"
    );
    let status: serde_json::Value =
        serde_json::from_str(f.ok(&["status", "--json"]).last_line()).unwrap();
    assert_eq!(status["mode"], "adopted", "{status}");
}
