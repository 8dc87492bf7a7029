//! Images the tests and benches make with `docker import`: a directory as an image's root, and
//! the root of busybox alone (with one more file when asked, which makes the image other bytes).
//! Included by benches too (`#[path]`).

#![allow(dead_code)] // each bench uses a part

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Makes image `reference` on the engine of the directory `root` (`tar` of it into `docker
/// import`).
pub fn docker_import(root: &Path, reference: &str) {
    let tar = Command::new("tar")
        .arg("-C")
        .arg(root)
        .args(["-c", "."])
        .output()
        .unwrap();
    assert!(tar.status.success(), "tar of the image's root");
    let mut import = Command::new("docker")
        .args(["import", "-", reference])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("docker runs");
    import.stdin.take().unwrap().write_all(&tar.stdout).unwrap();
    assert!(
        import.wait().unwrap().success(),
        "docker import {reference}"
    );
}

/// Makes image `reference`: a root holding busybox as `/bin/busybox`, and `extra` (a file
/// name, its content) when given.
pub fn import_busybox(reference: &str, extra: Option<(&str, &str)>) {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("bin")).unwrap();
    std::fs::copy("/bin/busybox", root.path().join("bin/busybox")).unwrap();
    if let Some((name, content)) = extra {
        std::fs::write(root.path().join(name), content).unwrap();
    }
    docker_import(root.path(), reference);
}
