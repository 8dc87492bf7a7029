//! Bad input and faults: each gives a clear error and changes nothing on the machine.

use std::process::Command;

use crate::node_fixture::{declaration, Fixture, MOTD, ORIGINAL_SSH, SSH};
use crate::support::have_root_tools;

/// A tmpfs mounted for one test, unmounted when dropped (also when the test fails).
struct Tmpfs {
    path: std::path::PathBuf,
}

impl Tmpfs {
    fn mount(path: &std::path::Path, options: &str) -> Self {
        std::fs::create_dir_all(path).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(path)
            .status()
            .unwrap();
        assert!(ok.success(), "mount tmpfs on {}", path.display());
        Self {
            path: path.to_owned(),
        }
    }

    fn remount(&self, options: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.path)
            .status()
            .unwrap();
        assert!(ok.success());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// A corrupted blob is found before any write: exit 3, the root untouched.
#[test]
fn corrupted_blob_stops_before_any_write() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    let built = f.ok(&["build", f.decl("a.ncl").to_str().unwrap()]);
    let id: mesh_lib::GenerationId = built.last_line().parse().unwrap();
    let store = mesh_lib::Store::open(&f.state()).unwrap();
    let motd = store.generation(&id).unwrap().files[&mesh_lib::TargetPath::new(MOTD).unwrap()].blob;
    let Some(mesh_lib::store::Location::Packed { pack, entry }) = store.locate(&motd).unwrap()
    else {
        panic!("packed")
    };
    let mut bytes = std::fs::read(&pack).unwrap();
    bytes[entry.offset as usize] ^= 0x20;
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut std::fs::metadata(&pack).unwrap().permissions(),
        0o644,
    );
    std::fs::write(&pack, bytes).unwrap();
    let before = f.snapshot();
    let ran = f.mesh(&["switch", "--generation", &id.to_string()]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("corrupted") && ran.stderr.contains("nothing was changed"),
        "{}",
        ran.stderr
    );
    assert_eq!(f.snapshot(), before);
}

/// A symlink planted in a declared path's parent, pointing outside the root: refused (exit 2),
/// nothing written outside the root or inside it.
#[test]
fn symlink_in_parent_is_refused() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(f.at("/etc/extra").parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(outside.path(), f.at("/etc/extra")).unwrap();
    let before = f.snapshot();
    let ran = f.mesh(&["switch", f.decl("a.ncl").to_str().unwrap()]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("/etc/extra/extra.conf") && ran.stderr.contains("symlink"),
        "{}",
        ran.stderr
    );
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing written outside the root"
    );
    assert_eq!(f.snapshot(), before);
}

/// A folder where a file is declared: refused (exit 2), nothing changed.
#[test]
fn folder_where_a_file_is_declared() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    std::fs::create_dir_all(f.at(MOTD)).unwrap();
    let before = f.snapshot();
    let ran = f.mesh(&["switch", f.decl("a.ncl").to_str().unwrap()]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("/etc/motd: a folder is where a file is declared"),
        "{}",
        ran.stderr
    );
    assert_eq!(f.snapshot(), before);
}

/// A full filesystem (a small tmpfs as the root): a clear error (exit 3), nothing changed.
#[test]
fn full_filesystem() {
    if !have_root_tools(&["mount", "umount"]) {
        return;
    }
    let f = Fixture::new();
    let big = format!("{}\\n", "x".repeat(300 * 1024));
    f.write_decl("big.ncl", &declaration(&big, false));
    let root = f.dir.path().join("small-root");
    let _tmpfs = Tmpfs::mount(&root, "size=256k");
    std::fs::create_dir_all(root.join("etc/ssh/sshd_config.d")).unwrap();
    std::fs::write(root.join(SSH.trim_start_matches('/')), ORIGINAL_SSH).unwrap();
    let before = crate::node_fixture::snapshot(&root);
    let mut c = f.command(&["switch", f.decl("big.ncl").to_str().unwrap()]);
    c.env("MESH_ROOT", &root);
    let ran = crate::support::run(c);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("not enough space") && ran.stderr.contains("nothing was changed"),
        "{}",
        ran.stderr
    );
    assert_eq!(crate::node_fixture::snapshot(&root), before);
}

/// A read-only target: a clear error (exit 3), nothing changed.
#[test]
fn read_only_target() {
    if !have_root_tools(&["mount", "umount"]) {
        return;
    }
    let f = Fixture::new();
    let root = f.dir.path().join("ro-root");
    let tmpfs = Tmpfs::mount(&root, "size=1m");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    tmpfs.remount("ro");
    let before = crate::node_fixture::snapshot(&root);
    let mut c = f.command(&["switch", f.decl("a.ncl").to_str().unwrap()]);
    c.env("MESH_ROOT", &root);
    let ran = crate::support::run(c);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("read-only") && ran.stderr.contains("nothing was changed"),
        "{}",
        ran.stderr
    );
    assert_eq!(crate::node_fixture::snapshot(&root), before);
}

/// A lock held: the second caller fails at once (exit 2) naming the holder's pid; a lock file
/// left by a process that is gone does not block.
#[test]
fn lock_held_fails_fast() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(f.state().join("lock"))
        .unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
    std::fs::write(f.state().join("lock"), "4242").unwrap();
    let before = f.snapshot();
    let ran = f.mesh(&["switch", f.decl("a.ncl").to_str().unwrap()]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("pid 4242"), "{}", ran.stderr);
    assert_eq!(f.snapshot(), before);
    drop(lock);
    // The file is still there, its holder gone: no obstacle.
    f.ok(&["switch", f.decl("a.ncl").to_str().unwrap()]);
}

/// A generation id that does not exist: exit 1, nothing changed.
#[test]
fn unknown_generation() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    let before = f.snapshot();
    let ran = f.mesh(&["switch", "--generation", &format!("b3:{}", "1".repeat(64))]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(ran.stderr.contains("is not in the store"), "{}", ran.stderr);
    assert_eq!(f.snapshot(), before);
    let ran = f.mesh(&["rollback"]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(ran.stderr.contains("no generation yet"), "{}", ran.stderr);
}

/// A stored generation that breaks the model's invariants — here one adopted generation turned
/// managed while it still holds the predecessor's file, stored under its own digest as if built
/// elsewhere — is refused by `mesh switch --generation`: exit 1, what is wrong, nothing changed.
#[test]
fn crafted_generation_is_refused() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    f.ok(&["adopt", f.decl("a.ncl").to_str().unwrap()]);
    let store = mesh_lib::Store::open(&f.state()).unwrap();
    let g: serde_json::Value =
        serde_json::from_str(&f.ok(&["generations", "--json"]).stdout).unwrap();
    let id: mesh_lib::GenerationId = g["generations"][0]["id"].as_str().unwrap().parse().unwrap();
    let mut crafted = store.generation(&id).unwrap();
    crafted.mode = mesh_lib::model::Mode::Managed;
    let crafted = store.put_generation(&crafted).unwrap();
    let before = f.snapshot();
    let ran = f.mesh(&["switch", "--generation", &crafted.to_string()]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("is not one the compiler would build")
            && ran.stderr.contains("is held on a managed node"),
        "{}",
        ran.stderr
    );
    assert_eq!(f.snapshot(), before);
}

/// `--netns` naming a namespace that does not exist: exit 1, the namespace named, nothing
/// changed (and never the machine's own ruleset in its place).
#[test]
fn missing_network_namespace() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    let before = f.snapshot();
    let gone = format!("{}-gone", f.netns);
    let mut c = f.command(&["switch", f.decl("a.ncl").to_str().unwrap()]);
    c.env("MESH_NETNS", &gone);
    let ran = crate::support::run(c);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains(&format!("cannot enter network namespace {gone}")),
        "{}",
        ran.stderr
    );
    assert_eq!(f.snapshot(), before);
}

/// A file or folder made immutable (`chattr +i`) for one test; made mutable again when dropped.
struct Immutable(std::path::PathBuf);

impl Immutable {
    fn set(path: std::path::PathBuf) -> Self {
        let ok = Command::new("chattr")
            .arg("+i")
            .arg(&path)
            .status()
            .unwrap();
        assert!(
            ok.success(),
            "chattr +i {} (the test folder's filesystem must support it)",
            path.display()
        );
        Self(path)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// Writing fails before any declared path changed (the new file's folder is immutable, which
/// even root cannot write into): nothing changed. Then a rename fails midway (the second target
/// is an immutable file): the file already replaced is put back, the node stays at its
/// generation.
#[test]
fn failure_midway_puts_back_what_changed() {
    if !have_root_tools(&["chattr"]) {
        return;
    }
    let f = Fixture::new();
    f.write_decl("plain.ncl", &declaration("first\\n", false));
    f.ok(&["switch", f.decl("plain.ncl").to_str().unwrap()]);
    let generations = f.ok(&["generations", "--json"]).stdout;
    // The next generation changes /etc/motd, then (in path order) writes /etc/zz/late.conf.
    let late = r#"{ name = "late", config = fun s => { files = [{ path = "/etc/zz/late.conf", content = "late\\n" }] } },"#;
    f.write_decl(
        "two.ncl",
        &declaration("second\\n", false).replace("  ],\n}", &format!("    {late}\n  ],\n}}")),
    );
    std::fs::create_dir_all(f.at("/etc/zz")).unwrap();

    let folder = Immutable::set(f.at("/etc/zz"));
    let before = f.snapshot();
    let ran = f.mesh(&["switch", f.decl("two.ncl").to_str().unwrap()]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("/etc/zz/late.conf") && ran.stderr.contains("nothing was changed"),
        "{}",
        ran.stderr
    );
    assert_eq!(f.snapshot(), before, "not even a temp file is left");
    drop(folder);

    std::fs::write(f.at("/etc/zz/late.conf"), "the predecessor's\n").unwrap();
    let file = Immutable::set(f.at("/etc/zz/late.conf"));
    let contents = |f: &Fixture| {
        f.snapshot()
            .into_iter()
            .map(|(p, b, m, u, g, _)| (p, b, m, u, g))
            .collect::<Vec<_>>()
    };
    let before = contents(&f);
    let ran = f.mesh(&["switch", f.decl("two.ncl").to_str().unwrap()]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("/etc/zz/late.conf") && ran.stderr.contains("put back"),
        "{}",
        ran.stderr
    );
    assert_eq!(
        f.read(MOTD).unwrap(),
        "first\n",
        "the replaced file was put back"
    );
    assert_eq!(contents(&f), before);
    assert_eq!(f.ok(&["generations", "--json"]).stdout, generations);
    drop(file);
}
