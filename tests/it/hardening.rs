//! Issue 11, "Hardening": what a careless or hostile operator, module or machine can hand the
//! mesh, and what the mesh does with it. Each test pins one of the holes the issue found (or a
//! sibling of one), and failed before its fix.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::node_fixture::{declaration, Fixture, MOTD, SSH};
use crate::rejections::{assert_says, file, module, node, rejected, PORTS};
use crate::support::{build_json, crash_points_here, crashes_at, have_root_tools, mesh, run};

/// A usage error — an unknown flag or command, a missing or conflicting argument, a value that
/// is not a number — is bad input: exit 1 (2 is a conflict that may be retried); `--help` and
/// `--version` still succeed.
#[test]
fn usage_errors_exit_1_help_and_version_exit_0() {
    let state = tempfile::tempdir().unwrap();
    let usage_errors: &[&[&str]] = &[
        &[],
        &["frobnicate"],
        &["build"],
        &["build", "x.ncl", "--bogus"],
        &["--bogus", "status"],
        &["switch"],
        &["switch", "x.ncl", "--generation", "b3:00"],
        &["rollback", "--to", "yesterday"],
        &["gc", "--keep", "-1"],
        &["reconcile", "--watch", "0"],
        &["reconcile", "--watch", "5", "--dry-run"],
        &["take"],
        &["record"],
        &["record", "import"],
        &["diff", "1", "2", "3"],
    ];
    for args in usage_errors {
        let mut c = mesh(state.path());
        c.args(*args);
        let ran = run(c);
        assert_eq!(
            ran.code, 1,
            "mesh {args:?} is a usage error: exit 1, got {}\n{}",
            ran.code, ran.stderr
        );
        assert!(
            !ran.stderr.trim().is_empty(),
            "mesh {args:?} says what is wrong"
        );
    }
    for args in [
        &["--help"][..],
        &["--version"],
        &["build", "--help"],
        &["help", "switch"],
        &["switch", "-h"],
    ] {
        let mut c = mesh(state.path());
        c.args(args);
        let ran = run(c);
        assert_eq!(ran.code, 0, "mesh {args:?}: {}", ran.stderr);
        assert!(!ran.stdout.is_empty(), "mesh {args:?} prints to stdout");
    }
}

/// Item 8: a relative `--state-dir` that does not exist yet is created, like an absolute one,
/// under the working folder.
#[test]
fn a_relative_state_dir_is_created() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("n.ncl"),
        node(PORTS, &module("m", &file("/etc/motd"))),
    )
    .unwrap();
    let mut c = mesh(Path::new("unused"));
    c.current_dir(dir.path())
        .env_remove("MESH_STATE_DIR")
        .args(["--state-dir", "state", "build", "n.ncl"]);
    let ran = run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let store = dir.path().join("state/store/generations");
    assert_eq!(std::fs::read_dir(store).unwrap().count(), 1);
}

fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// Item 2: the state directory and the store are their owner's only — folders `0700`, no file
/// readable by group or others — whatever mode a declaration gives its files; a state directory
/// an older mesh left readable is made private when it is next opened; and a user other than
/// its owner cannot read a blob.
#[test]
fn the_state_directory_is_its_owners_only() {
    let dir = tempfile::tempdir().unwrap();
    // Traversable by others up to the state directory, so only its own modes protect it.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = dir.path().join("var/lib/mesh");
    let decl = dir.path().join("n.ncl");
    let secret = "password = hunter2\n";
    std::fs::write(
        &decl,
        node(
            PORTS,
            &module(
                "m",
                &format!(
                    r#"files = [{{ path = "/etc/app.conf", content = {secret:?}, mode = "0644" }}]"#
                ),
            ),
        ),
    )
    .unwrap();
    build_json(&state, &decl, None);
    let check_private = |state: &Path| {
        let mut files = 0;
        for entry in walkdir::WalkDir::new(state) {
            let entry = entry.unwrap();
            let mode = mode_of(entry.path());
            if entry.file_type().is_dir() {
                assert_eq!(mode, 0o700, "{}", entry.path().display());
            } else {
                files += 1;
                assert_eq!(mode & 0o077, 0, "{} is {mode:o}", entry.path().display());
            }
        }
        assert!(files > 0);
    };
    check_private(&state);
    // Its parents the mesh created are private too; the ones that were there are untouched.
    assert_eq!(mode_of(&dir.path().join("var")), 0o700);
    assert_eq!(mode_of(dir.path()), 0o755);

    // As an older mesh left it: folders 0755, blobs and generations 0444, the record 0644.
    for entry in walkdir::WalkDir::new(&state) {
        let entry = entry.unwrap();
        let mode = if entry.file_type().is_dir() {
            0o755
        } else {
            0o444
        };
        std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::write(state.join("record.json"), "{}").unwrap();
    std::fs::set_permissions(
        state.join("record.json"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let mut c = mesh(&state);
    c.arg("generations");
    let ran = run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    for p in [
        state.clone(),
        state.join("store"),
        state.join("store/packs"),
        state.join("store/generations"),
    ] {
        assert_eq!(mode_of(&p), 0o700, "{}", p.display());
    }
    assert_eq!(mode_of(&state.join("record.json")), 0o600);

    // A user other than the owner reads nothing of it: not the pack with the secret, not the
    // list of generations.
    if have_root_tools(&["cat", "ls"]) {
        use std::os::unix::process::CommandExt;
        let pack = std::fs::read_dir(state.join("store/packs"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        for (tool, target) in [("cat", &pack), ("ls", &state.join("store/generations"))] {
            let out = std::process::Command::new(tool)
                .arg(target)
                .uid(65534)
                .gid(65534)
                .output()
                .unwrap();
            assert!(
                !out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("hunter2"),
                "{tool} {} as nobody: {}",
                target.display(),
                String::from_utf8_lossy(&out.stdout)
            );
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// A folder every user may write to is not a state directory: refused, exit 1.
#[test]
fn a_shared_folder_is_not_a_state_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let mut c = mesh(dir.path());
    c.arg("generations");
    let ran = run(c);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("writable by every user"),
        "{}",
        ran.stderr
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing made in it"
    );
}

/// Item 6: a declared path with a newline, a carriage return, an escape or a bidirectional
/// override is refused with its span, and the message shows the character escaped, never raw.
#[test]
fn a_path_with_a_control_character_is_refused() {
    for (nickel, shown) in [
        (
            r"/etc/motd\nPermitRootLogin yes",
            r"/etc/motd\nPermitRootLogin yes",
        ),
        (r"/etc/motd\r", r"/etc/motd\r"),
        (r"/etc/\u{1b}[2Jmotd", r"/etc/\u{1b}[2Jmotd"),
        (r"/etc/cron.d/x\u{202e}fnoc", r"/etc/cron.d/x\u{202e}fnoc"),
    ] {
        let ran = rejected(&node(PORTS, &module("m", &file(nickel))), None);
        assert_says(
            &ran,
            &[
                &format!("`{shown}` contains the character U+"),
                "module m",
                "bad-node.ncl:9:",
            ],
        );
        assert!(
            !ran.stderr.contains(['\r', '\u{1b}', '\u{202e}']),
            "raw in: {:?}",
            ran.stderr
        );
    }
}

/// Item 6: anything from the declaration printed in a diagnostic is escaped: a name with an
/// escape sequence cannot colour or clear the terminal of the person reading it.
#[test]
fn a_diagnostic_never_prints_a_raw_escape_sequence() {
    let text = node(PORTS, "").replace(r#"name = "n""#, r#"name = "n\u{1b}[2J\u{1b}[31m""#);
    let ran = rejected(&text, None);
    assert_says(&ran, &[r"n\u{1b}[2J\u{1b}[31m", "is not a valid node name"]);
    assert!(!ran.stderr.contains('\u{1b}'), "{:?}", ran.stderr);
}

/// Item 6: setuid, setgid, sticky and world-writable modes are written only for a file that
/// asks for them (`special_mode = true`); otherwise the mode is refused with its span. The
/// generation records the opt-in.
#[test]
fn a_special_mode_needs_its_opt_in() {
    for (mode, says) in [
        ("4755", "setuid"),
        ("2755", "setgid"),
        ("1644", "sticky"),
        ("0666", "writable by everyone"),
        ("0602", "writable by everyone"),
    ] {
        let body = format!(
            r#"files = [{{ path = "/usr/local/bin/tool", content = "x", mode = "{mode}" }}]"#
        );
        let ran = rejected(&node(PORTS, &module("m", &body)), None);
        assert_says(
            &ran,
            &[
                &format!("mode {mode} is {says}"),
                "bad-node.ncl:9:",
                "special_mode = true",
            ],
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let decl = dir.path().join("n.ncl");
    std::fs::write(
        &decl,
        node(
            PORTS,
            &module(
                "m",
                r#"files = [{ path = "/usr/local/bin/tool", content = "x", mode = "4755", special_mode = true }]"#,
            ),
        ),
    )
    .unwrap();
    let built = build_json(state.path(), &decl, None);
    let mut c = mesh(state.path());
    c.args(["show", built["id"].as_str().unwrap(), "--json"]);
    let shown: serde_json::Value = serde_json::from_str(&run(c).stdout).unwrap();
    let f = &shown["files"]["/usr/local/bin/tool"];
    assert_eq!(
        (f["mode"].as_str(), f["special_mode"].as_bool()),
        (Some("4755"), Some(true))
    );
}

/// A container's bind mount is a way into the host: a volume whose source is `/`, the engine's
/// socket, /etc, /proc, /dev, root's home… is refused with its span unless the volume says
/// `host_access = true`; one reaching the mesh's state directory is refused even then; a file
/// the node declares, and its folder, mount as before.
#[test]
fn a_host_mount_needs_its_opt_in() {
    let container = |source: &str, extra: &str| {
        format!(
            r#"containers = [{{ name = "agent", image = "example/agent:1", volumes = [{{ source = "{source}", target = "/host"{extra} }}] }}]"#
        )
    };
    for (source, says) in [
        ("/var/run/docker.sock", "runtime sockets"),
        ("/", "the whole host"),
        ("/var/lib/../lib", "the whole host"),
        ("/etc", "configuration and secrets"),
        ("/proc", "kernel interfaces"),
        ("/root/.ssh", "home of the host's root"),
    ] {
        let ran = rejected(&node(PORTS, &module("m", &container(source, ""))), None);
        assert_says(
            &ran,
            &[
                &format!("volume source `{source}` hands the container the"),
                says,
                "bad-node.ncl:9:",
                "host_access = true",
            ],
        );
    }
    for source in [
        "/var/lib/mesh",
        "/var/lib/mesh/store",
        "/var/lib/docker/../mesh/",
    ] {
        let ran = rejected(
            &node(
                PORTS,
                &module("m", &container(source, ", host_access = true")),
            ),
            None,
        );
        assert_says(
            &ran,
            &["reaches the mesh's state directory", "bad-node.ncl:9:"],
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let decl = dir.path().join("n.ncl");
    for body in [
        container(
            "/var/run/docker.sock",
            ", host_access = true, read_only = true",
        ),
        format!(
            r#"files = [{{ path = "/etc/agent/agent.conf", content = "x" }}], {}"#,
            container("/etc/agent", "")
        ),
        container("/srv/agent/data", ""),
    ] {
        std::fs::write(&decl, node(PORTS, &module("m", &body))).unwrap();
        let built = build_json(state.path(), &decl, None);
        assert!(built["id"].is_string(), "{body}: {built}");
    }
}

/// Item 6, siblings: owner and group names and a container's printed strings hold no control
/// character (they are printed in plans and `mesh show`); each refusal points at the value.
#[test]
fn names_and_container_strings_are_printable() {
    let cases = [
        (
            r#"files = [{ path = "/etc/motd", content = "x", owner = "root\nPasswordAuthentication yes" }]"#,
            r"`root\nPasswordAuthentication yes` is not a user or group name",
        ),
        (
            r#"files = [{ path = "/etc/motd", content = "x", group = "adm in" }]"#,
            "`adm in` is not a user or group name",
        ),
        (
            r#"containers = [{ name = "c", image = "busybox\u{1b}[2J" }]"#,
            r"container c: image `busybox\u{1b}[2J` holds the control character U+001B",
        ),
        (
            r#"containers = [{ name = "c", image = "busybox", volumes = [{ source = "data\r", target = "/data" }] }]"#,
            r"volume source `data\r`",
        ),
    ];
    for (body, says) in cases {
        let ran = rejected(&node(PORTS, &module("m", body)), None);
        assert_says(&ran, &[says, "bad-node.ncl:9:"]);
    }
}

/// Item 4: a caller that finds the lock held always names the holder's pid — also when it
/// races the first caller to create the lock file, or a holder taking over a lock file a
/// previous one left (the lock's unit test races it hundreds of times in one process).
#[test]
fn a_concurrent_loser_always_prints_a_pid() {
    for round in 0..15 {
        let state = tempfile::tempdir().unwrap();
        if round % 2 == 1 {
            let mut c = mesh(state.path());
            c.arg("gc");
            assert_eq!(run(c).code, 0, "a lock file an earlier holder left");
        }
        let children: Vec<_> = (0..6)
            .map(|_| {
                let mut c = mesh(state.path());
                c.arg("gc")
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped());
                c.spawn().unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            match out.status.code() {
                Some(0) => {}
                Some(2) => {
                    let pid = stderr
                        .split("(pid ")
                        .nth(1)
                        .and_then(|rest| rest.split(')').next())
                        .unwrap_or_default();
                    assert!(
                        !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()),
                        "round {round}: {stderr}"
                    );
                }
                other => panic!("round {round}: exit {other:?}: {stderr}"),
            }
        }
    }
}

/// Item 9: a damaged line in `profile.log` (not even text) does not make `mesh generations`
/// fail: the line is named on stderr, every other entry is shown.
#[test]
fn a_damaged_profile_log_line_is_named_and_skipped() {
    let state = tempfile::tempdir().unwrap();
    let profile = state.path().join("profile");
    std::fs::create_dir(&profile).unwrap();
    let ids = ["11", "22"].map(|n| n.repeat(32));
    for (i, id) in ids.iter().enumerate() {
        std::os::unix::fs::symlink(
            format!("../store/generations/{id}"),
            profile.join(format!("generation-{}", i + 1)),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("generation-2", profile.join("current")).unwrap();
    let entry = |n: usize, trigger: &str| {
        format!(
            "{{\"number\":{n},\"id\":\"b3:{}\",\"time\":\"2025-01-0{n}T00:00:00Z\",\"trigger\":\"{trigger}\"}}\n",
            ids[n - 1]
        )
    };
    let mut log = entry(1, "build").into_bytes();
    log.extend_from_slice(b"\xff\xfe\x1b[2J not a line of the mesh's\n");
    log.extend_from_slice(entry(2, "take").as_bytes());
    std::fs::write(state.path().join("profile.log"), log).unwrap();

    let mut c = mesh(state.path());
    c.arg("generations");
    let ran = run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.stderr.contains("profile.log line 2"), "{}", ran.stderr);
    assert!(!ran.stderr.contains('\u{1b}'));
    let rows: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(rows.len(), 2, "{}", ran.stdout);
    assert!(rows[0].contains("2025-01-01T00:00:00Z") && rows[0].contains("build"));
    assert!(
        rows[1].starts_with('*') && rows[1].contains("take"),
        "{}",
        rows[1]
    );
}

/// Item 9: switches keep appending to a log whose last line is damaged and has no newline: the
/// next entry is a line of its own, readable, and the damage is named.
#[test]
fn switches_append_after_a_damaged_log_line() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    f.ok(&["switch", f.decl("a.ncl").to_str().unwrap()]);
    let log = f.state().join("profile.log");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(b"{\"number\":2,\"id\":\"b3:\xff");
    std::fs::write(&log, bytes).unwrap();
    f.ok(&["switch", f.decl("b.ncl").to_str().unwrap()]);
    let ran = f.ok(&["generations", "--json"]);
    assert!(ran.stderr.contains("profile.log line 2"), "{}", ran.stderr);
    let rows: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    let triggers: Vec<&str> = rows["generations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["trigger"].as_str().unwrap_or("missing"))
        .collect();
    assert_eq!(triggers, ["build", "build"], "{}", ran.stdout);
}

/// Item 7: owners and groups resolve against the root's own `/etc/passwd` and `/etc/group`,
/// not the machine's: a user only the root knows gets the root's uid; a user only the machine
/// knows is refused, naming the root's databases. A found file's numeric ids are recorded
/// beside its names.
#[test]
fn owners_resolve_against_the_roots_own_databases() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    std::fs::write(
        f.at("/etc/passwd"),
        "root:x:0:0::/root:/bin/sh\nsvc:x:4242:4243::/:/usr/sbin/nologin\n",
    )
    .unwrap();
    std::fs::write(f.at("/etc/group"), "root:x:0:\nsvc:x:4243:\n").unwrap();
    let with_owner = |owner: &str| {
        declaration("hello\\n", false).replace(
            r#"content = "hello\n" }"#,
            &format!(r#"content = "hello\n", owner = "{owner}", group = "{owner}" }}"#),
        )
    };
    // Adopting records the found drop-in's ids (1000:1000, no name in this root) as numbers.
    f.ok(&["adopt", f.decl("a.ncl").to_str().unwrap()]);
    let found = &f.record()["found"]["files"][SSH];
    assert_eq!(
        (found["uid"].as_u64(), found["gid"].as_u64()),
        (Some(1000), Some(1000))
    );
    assert_eq!(found["owner"], "1000");

    f.write_decl("svc.ncl", &with_owner("svc"));
    f.ok(&["switch", f.decl("svc.ncl").to_str().unwrap()]);
    let (_, uid, gid) = f.meta(MOTD);
    assert_eq!((uid, gid), (4242, 4243));

    // `daemon` is a user of this machine (Debian's uid 1), not of this root.
    f.write_decl("daemon.ncl", &with_owner("daemon"));
    let ran = f.mesh(&["switch", f.decl("daemon.ncl").to_str().unwrap()]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("owner `daemon` is not in the /etc/passwd and /etc/group of the root"),
        "{}",
        ran.stderr
    );
    assert_eq!(f.meta(MOTD).1, 4242, "nothing changed");
}

/// Item 8: `mesh take` of a module the declaration does not assign names the declaration and
/// the module (not the node record, which only the take would have changed), exit 1, and
/// changes nothing.
#[test]
fn take_of_a_module_the_declaration_does_not_assign() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    let decl = f.decl("a.ncl");
    f.ok(&["adopt", decl.to_str().unwrap()]);
    let record = f.record();
    for args in [
        &["take", "sssh", decl.to_str().unwrap()][..],
        &["take", "sssh"],
    ] {
        let ran = f.mesh(args);
        assert_eq!(ran.code, 1, "{}", ran.stderr);
        assert!(
            ran.stderr.contains(&format!(
                "{} does not assign module sssh to node n1",
                decl.display()
            )),
            "{}",
            ran.stderr
        );
        assert!(
            ran.stderr.contains("assigned: extra, motd, ssh"),
            "{}",
            ran.stderr
        );
        assert!(!ran.stderr.contains("record"), "{}", ran.stderr);
        assert_eq!(f.record(), record, "the record is unchanged");
    }
}

/// Item 10: an operator's own file named like the mesh's temp files beside a declared path —
/// the old fixed name `.NAME.mesh-tmp` among them — is never removed: not by a switch, not by
/// the recovery of a switch a crash cut short after staging its temp files. The mesh's own
/// leftovers are.
#[test]
fn an_operators_file_named_like_a_temp_file_is_never_removed() {
    if !have_root_tools(&[]) || !crash_points_here() {
        return;
    }
    let f = Fixture::new();
    let theirs = [
        ".motd.mesh-tmp",
        ".motd.mesh-0000000000000000beef",
        ".10-mesh.conf.mesh-tmp",
    ];
    let place = |name: &str| {
        if name.contains("10-mesh") {
            f.at(SSH).with_file_name(name)
        } else {
            f.at(MOTD).with_file_name(name)
        }
    };
    std::fs::create_dir_all(f.at(MOTD).parent().unwrap()).unwrap();
    for name in theirs {
        std::fs::write(place(name), "the operator's own\n").unwrap();
    }
    let decl = f.decl("a.ncl");
    assert!(crashes_at(
        f.command(&["switch", decl.to_str().unwrap()]),
        "file-written-before-rename",
        "a switch cut short with its temp files staged"
    ));
    f.ok(&["switch", decl.to_str().unwrap()]);
    for name in theirs {
        assert_eq!(
            std::fs::read_to_string(place(name)).unwrap(),
            "the operator's own\n",
            "{name}"
        );
    }
    // Nothing else is left beside the declared paths: the mesh's own temp files went.
    for dir in [
        f.at(MOTD).parent().unwrap().to_owned(),
        f.at(SSH).parent().unwrap().to_owned(),
    ] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            assert!(
                !name.starts_with('.') || theirs.contains(&name.as_str()),
                "left in {}: {name}",
                dir.display()
            );
        }
    }
}

/// A declaration `n.ncl` in `dir` with one module whose file's content is `content` (Nickel).
fn declaration_with_content(dir: &Path, content: &str) -> std::path::PathBuf {
    let path = dir.join("n.ncl");
    std::fs::write(
        &path,
        node(
            PORTS,
            &module(
                "m",
                &format!(r#"files = [{{ path = "/etc/x", content = {content} }}]"#),
            ),
        ),
    )
    .unwrap();
    path
}

fn build_in(state: &Path, decl: &Path, extra: &[&str]) -> crate::support::Ran {
    let mut c = mesh(state);
    c.current_dir(decl.parent().unwrap())
        .arg("build")
        .arg(decl.file_name().unwrap())
        .args(extra);
    run(c)
}

/// Item 2: an import that resolves outside the fleet's tree — an absolute path, `..` out of
/// it, a symlink in it that points out, the state directory through the library's folder — is
/// exit 1 with the span of the import naming the path; nothing reaches the store, and the CI
/// gate (`--check`) refuses it the same way.
#[test]
fn an_import_outside_the_fleets_tree_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "hunter2\n").unwrap();
    std::fs::write(outside.path().join("lib.ncl"), "{ x = \"hunter2\" }\n").unwrap();
    let secret = outside.path().join("secret");
    let fleet = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::write(
        state.path().join("record.json"),
        r#"{"format": 1, "node": "n", "mode": "managed"}"#,
    )
    .unwrap();
    std::os::unix::fs::symlink(&secret, fleet.path().join("link.txt")).unwrap();
    std::fs::write(
        fleet.path().join("inner.ncl"),
        format!(
            "{{ x = import {:?} as 'Text }}\n",
            secret.display().to_string()
        ),
    )
    .unwrap();
    let up = format!(
        "{}{}",
        "../".repeat(fleet.path().components().count()),
        secret.display().to_string().trim_start_matches('/')
    );
    let cases: Vec<(String, String, String)> = vec![
        (
            format!("import {:?} as 'Text", secret.display().to_string()),
            format!(
                "n.ncl imports {}, which is outside the fleet's tree",
                secret.display()
            ),
            "n.ncl:9:".into(),
        ),
        (
            format!("import {up:?} as 'Text"),
            format!("n.ncl imports {}", secret.display()),
            "n.ncl:9:".into(),
        ),
        (
            format!(
                "(import {:?}).x",
                outside.path().join("lib.ncl").display().to_string()
            ),
            "lib.ncl, which is outside the fleet's tree".into(),
            "n.ncl:9:".into(),
        ),
        (
            "import \"link.txt\" as 'Text".into(),
            format!("link.txt (through a symlink, to {})", secret.display()),
            "n.ncl:9:".into(),
        ),
        (
            "(import \"inner.ncl\").x".into(),
            format!("inner.ncl imports {}", secret.display()),
            "inner.ncl:1:".into(),
        ),
        (
            // Not in the declaration's folder, so Nickel would look in the library's, two
            // folders below the state directory.
            "import \"../../record.json\" as 'Text".into(),
            "record.json, which is outside the fleet's tree".into(),
            "n.ncl:9:".into(),
        ),
    ];
    for (content, says, at) in cases {
        let decl = declaration_with_content(fleet.path(), &content);
        for extra in [&[][..], &["--check", &format!("b3:{}", "0".repeat(64))]] {
            let ran = build_in(state.path(), &decl, extra);
            assert_eq!(ran.code, 1, "{content} {extra:?}: {}", ran.stderr);
            assert_says(&ran, &[&says, &at, "imported here"]);
            assert!(!ran.stderr.contains("hunter2"), "{}", ran.stderr);
        }
    }
    for folder in ["store/packs", "store/blobs", "store/generations"] {
        assert_eq!(
            std::fs::read_dir(state.path().join(folder))
                .unwrap()
                .count(),
            0,
            "nothing in {folder}"
        );
    }
}

/// Item 2: inside a checkout, the tree is the checkout — a node may import its catalogue beside
/// it — and a cached build whose sources the tree no longer holds is not served. Issue 23: out
/// of a checkout, the refusal says why the tree is what it is; a fleet file, or `--tree`, makes
/// the folder the tree again.
#[test]
fn the_fleets_tree_is_its_checkout() {
    let fleet = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(fleet.path().join("nodes")).unwrap();
    std::fs::create_dir_all(fleet.path().join("catalogue")).unwrap();
    std::fs::create_dir(fleet.path().join(".git")).unwrap();
    std::fs::write(fleet.path().join("catalogue/motd.txt"), "hello\n").unwrap();
    let decl = declaration_with_content(
        &fleet.path().join("nodes"),
        "import \"../catalogue/motd.txt\" as 'Text",
    );
    for cached in [false, true] {
        let ran = build_in(state.path(), &decl, &["--json"]);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        let out: serde_json::Value = serde_json::from_str(ran.last_line()).unwrap();
        assert_eq!(out["cached"], cached);
    }
    // No longer a checkout: the node's folder is the tree, and the catalogue is outside it.
    std::fs::remove_dir(fleet.path().join(".git")).unwrap();
    let ran = build_in(state.path(), &decl, &[]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert_says(
        &ran,
        &[
            "motd.txt, which is outside the fleet's tree",
            "the declaration's own folder: no fleet.ncl or checkout above it",
            "mesh init",
        ],
    );
    // Said outright, it is the tree again; so it is when a fleet file marks it.
    let root = fleet.path().to_str().unwrap();
    assert_eq!(build_in(state.path(), &decl, &["--tree", root]).code, 0);
    let mut c = mesh(state.path());
    c.env("MESH_TREE", root).arg("build").arg(&decl);
    assert_eq!(run(c).code, 0);
    let ran = build_in(state.path(), &decl, &["--tree", "/nonexistent"]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert_says(&ran, &["/nonexistent (--tree, MESH_TREE) is not a folder"]);
    std::fs::write(fleet.path().join("fleet.ncl"), "{}").unwrap();
    assert_eq!(build_in(state.path(), &decl, &[]).code, 0);
}

/// Item 3: a declaration that does not terminate is stopped at the memory limit, or at the
/// time limit, whichever it reaches first: exit 1 naming the limit, quickly, nothing stored. One
/// nested too deep for the evaluator's stack is reported too, never a crash of the mesh.
#[test]
fn a_declaration_that_does_not_terminate_is_stopped_at_a_limit() {
    let fleet = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let decl = fleet.path().join("n.ncl");
    std::fs::write(
        &decl,
        node(
            PORTS,
            &module("m", r#"files = [{ path = "/etc/x", content = f 0 }]"#),
        )
        .replace(
            "let mesh = import \"mesh.ncl\" in",
            "let mesh = import \"mesh.ncl\" in\nlet rec f = fun x => f (x + 1) in",
        ),
    )
    .unwrap();
    // It grows (Nickel keeps every call): 200 MiB is reached in well under a second. With a
    // backtrace asked for, as a developer's shell often does: Rust's runtime printing one when
    // memory runs out needs memory too, and the evaluator hung on that until the clock.
    let t = std::time::Instant::now();
    let mut c = mesh(state.path());
    c.current_dir(fleet.path())
        .env("RUST_BACKTRACE", "1")
        .args([
            "build",
            "n.ncl",
            "--eval-memory",
            "200",
            "--eval-timeout",
            "120",
        ]);
    let ran = run(c);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert_says(
        &ran,
        &["went past the memory limit of 200 MiB (--eval-memory"],
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        t.elapsed()
    );

    // With room to grow, the clock stops it: set through the environment this time.
    let t = std::time::Instant::now();
    let mut c = mesh(state.path());
    c.current_dir(fleet.path())
        .env("MESH_EVAL_TIMEOUT", "1")
        .env("MESH_EVAL_MEMORY", "16384")
        .args(["build", "n.ncl"]);
    let ran = run(c);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert_says(&ran, &["went past the time limit of 1 s (--eval-timeout"]);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        std::fs::read_dir(state.path().join("store/generations"))
            .unwrap()
            .count(),
        0
    );

    // A value nested deeper than the evaluator's stack: it overflows, in the child, and the
    // mesh says so (it used to die of the overflow itself, exit 134).
    std::fs::write(
        &decl,
        node(
            PORTS,
            &module(
                "m",
                r#"files = [{ path = "/etc/x", content = std.serialize 'Json (nest 200000) }]"#,
            ),
        )
        .replace(
            "let mesh = import \"mesh.ncl\" in",
            "let mesh = import \"mesh.ncl\" in\nlet rec nest = fun n => if n == 0 then {} else { a = nest (n - 1) } in",
        ),
    )
    .unwrap();
    let ran = build_in(state.path(), &decl, &["--eval-timeout", "120"]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert_says(&ran, &["went past the evaluator's stack"]);
}

/// Sibling of item 6: a port setting's name is written into the firewall — the opening's
/// comment, and the text iptables-nft-restore reads, where a quote and a newline would make a
/// rule of their own (here: accept everything). Only a plain name is a setting name.
#[test]
fn a_setting_name_cannot_write_a_firewall_rule() {
    let injected = r#""web\" -j ACCEPT\n-I INPUT -j ACCEPT\n#" = 8080"#;
    let ports = PORTS.replace("web = 80", injected);
    let ran = rejected(&node(&ports, ""), None);
    assert_says(
        &ran,
        &[
            r#"`web" -j ACCEPT\n-I INPUT -j ACCEPT\n#` is not a setting name"#,
            "bad-node.ncl:5:",
        ],
    );
    // And a pinned port of the record cannot bring one in either.
    let ran = rejected(
        &node(PORTS, ""),
        Some(serde_json::json!({
            "format": 1, "node": "n", "mode": "adopted",
            "pinned": { "x\" -j ACCEPT": 9000 },
        })),
    );
    assert_says(&ran, &[r#"`x" -j ACCEPT` is not a setting name"#]);
}

/// Sibling of item 3: `--record FILE` is read with a bound too — a fifo or a device is refused
/// (not waited on, not read forever), and so is a file larger than any record.
#[test]
fn a_record_that_is_no_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let decl = dir.path().join("n.ncl");
    std::fs::write(&decl, node(PORTS, "")).unwrap();
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for record in [Path::new("/dev/zero"), &fifo] {
        let t = std::time::Instant::now();
        let mut c = mesh(state.path());
        c.arg("build").arg(&decl).arg("--record").arg(record);
        let ran = run(c);
        assert_eq!(ran.code, 1, "{}", ran.stderr);
        assert_says(&ran, &["cannot read the node record", "not a regular file"]);
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
    }
}

/// Item 3: the evaluating child does not outlive the mesh. Killed while a declaration that does
/// not terminate is being evaluated (with room for minutes of it), the mesh takes its child with
/// it: nothing keeps eating the node's memory. So too for a node built before, whose changed
/// module a child serving builds evaluates (`mesh_compiler::serving`).
#[test]
fn the_evaluator_does_not_outlive_the_mesh() {
    for built_before in [false, true] {
        the_evaluator_does_not_outlive_the_mesh_when(built_before);
    }
}

fn the_evaluator_does_not_outlive_the_mesh_when(built_before: bool) {
    let fleet = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let declare = |content: &str| {
        std::fs::write(
            fleet.path().join("n.ncl"),
            node(
                PORTS,
                &module(
                    "m",
                    &format!(r#"files = [{{ path = "/etc/x", content = {content} }}]"#),
                ),
            )
            .replace(
                "let mesh = import \"mesh.ncl\" in",
                "let mesh = import \"mesh.ncl\" in\nlet rec f = fun x => f (x + 1) in",
            ),
        )
        .unwrap();
    };
    if built_before {
        declare("\"x\"");
        let ran = build_in(state.path(), &fleet.path().join("n.ncl"), &[]);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
    }
    declare("f 0");
    let mut c = mesh(state.path());
    c.current_dir(fleet.path())
        .args([
            "--eval-timeout",
            "600",
            "--eval-memory",
            "65536",
            "build",
            "n.ncl",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut parent = c.spawn().unwrap();
    let children_of = |pid: u32| -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                    // pid (comm) state ppid …: the comm may hold spaces, so after the last ')'.
                    stat.rsplit_once(')')
                        .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
                        == Some(pid)
                })
            })
            .collect()
    };
    let started = std::time::Instant::now();
    let child = loop {
        if let Some(c) = children_of(parent.id()).first() {
            break *c;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "no evaluator started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    parent.kill().unwrap();
    parent.wait().unwrap();
    let gone = std::time::Instant::now();
    while std::path::Path::new(&format!("/proc/{child}")).exists()
        && !std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    {
        assert!(
            gone.elapsed() < std::time::Duration::from_secs(5),
            "the evaluator {child} outlived the mesh"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A declaration never reaches the mesh's own state: with the state directory under the root
/// (the non-root default `~/.local/state/mesh` with `--root /`, here `ROOT/var/state`), a
/// module declaring `STATE/host.json`, `STATE/profile.log` or a path in the store is refused
/// (exit 1), the state untouched — also when the state directory is named through a link.
#[test]
fn a_declaration_never_reaches_the_state_directory() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    let state = f.root().join("var/state");
    let link = f.dir.path().join("state-link");
    std::fs::create_dir_all(&state).unwrap();
    std::os::unix::fs::symlink(&state, &link).unwrap();
    let run_with = |state_dir: &Path, args: &[&str]| {
        let mut c = f.command(args);
        c.env("MESH_STATE_DIR", state_dir);
        run(c)
    };
    let first = run_with(&state, &["switch", f.decl("a.ncl").to_str().unwrap()]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let before = snapshot_of(&state);
    for (i, target) in [
        "/var/state/host.json",
        "/var/state/profile.log",
        "/var/state/store/x",
        "/var/state",
    ]
    .iter()
    .enumerate()
    {
        let hostile = declaration("hello\\n", true).replace(
            "modules = [",
            &format!(
                "modules = [ {{ name = \"evil\", config = fun s => {{ files = [{{ path = \"{target}\", content = \"gone\\n\" }}] }} }},"
            ),
        );
        let name = format!("evil{i}.ncl");
        f.write_decl(&name, &hostile);
        for dir in [&state, &link] {
            let ran = run_with(dir, &["switch", f.decl(&name).to_str().unwrap()]);
            assert_eq!(ran.code, 1, "{target}: {}{}", ran.stdout, ran.stderr);
            assert!(
                ran.stderr.contains("state directory") && ran.stderr.contains(target),
                "{target}: {}",
                ran.stderr
            );
            assert_eq!(snapshot_of(&state), before, "{target}: the state changed");
        }
    }
}

/// What a switch's history is in the state directory: the host store, the profile and its log,
/// the node record — each file's path and a digest of its bytes. (A build adds to the store
/// and the cache: that is no loss.)
fn snapshot_of(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    for e in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(dir).unwrap().to_owned();
        let history = ["host.json", "host.log", "profile.log", "record.json"]
            .iter()
            .any(|n| rel == Path::new(n))
            || rel.starts_with("profile");
        if history && e.path().symlink_metadata().unwrap().is_file() {
            let bytes = std::fs::read(e.path()).unwrap();
            out.push((rel, mesh_lib::BlobHash::of(&bytes).to_string()));
        }
    }
    out
}
