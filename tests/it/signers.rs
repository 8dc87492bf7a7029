//! The trusted signers as OpenSSH reads them, and a trust root that is one: every verdict the
//! mesh gives on an allowed-signers file is the one `ssh-keygen -Y verify` gives on the same
//! file and signature, at the same time; a signer line outside its validity, and a file or
//! folder above it that another user may write, refuse a switch to a signed generation with
//! nothing changed, naming why and the fix.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use mesh_lib::trust::{Signature, TrustedSigners};

use crate::node_fixture::{declaration, snapshot, Fixture, Snapshot, MOTD};
use crate::support::have_root_tools;
use crate::trust::keygen;

/// What was signed in the cross-checks: a generation's id, as a switch signs it.
const MESSAGE: &str = "b3:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

/// 2030-06-15 12:00:00 UTC, the time both sides judge at in the pinned cross-checks.
const PINNED: u64 = 1_907_755_200;
const PINNED_TEXT: &str = "20300615120000Z";

fn public(key: &Path) -> String {
    std::fs::read_to_string(key.with_extension("pub"))
        .unwrap()
        .trim()
        .to_owned()
}

/// `ssh-keygen -Y sign` of [`MESSAGE`] with `key`, in the mesh's namespace: the signature's
/// path.
fn ssh_sign(key: &Path, dir: &Path) -> std::path::PathBuf {
    let message = dir.join("message");
    std::fs::write(&message, MESSAGE).unwrap();
    let out = Command::new("ssh-keygen")
        .args(["-Y", "sign", "-n", "mesh-generation", "-f"])
        .arg(key)
        .arg(&message)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("message.sig")
}

/// `ssh-keygen -Y verify` of [`MESSAGE`] against `signers` as principal `ci`, at
/// `verify_time` (`None`: its own clock): whether it accepts, and what it said.
fn ssh_verdict(signers: &Path, sig: &Path, verify_time: Option<&str>) -> (bool, String) {
    ssh_verdict_in(signers, sig, verify_time, None)
}

/// [`ssh_verdict`] with `TZ` set to `tz`.
fn ssh_verdict_in(
    signers: &Path,
    sig: &Path,
    verify_time: Option<&str>,
    tz: Option<&str>,
) -> (bool, String) {
    let mut c = Command::new("ssh-keygen");
    if let Some(tz) = tz {
        c.env("TZ", tz);
    }
    c.args(["-Y", "verify", "-f"])
        .arg(signers)
        .args(["-I", "ci", "-n", "mesh-generation", "-s"])
        .arg(sig);
    if let Some(t) = verify_time {
        c.arg(format!("-Overify-time={t}"));
    }
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(MESSAGE.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}

/// The mesh's verdict on the same file and signature at `now`: the signer's name, or why not.
fn mesh_verdict(text: &str, sig: &Path, now: SystemTime) -> Result<String, String> {
    let signature = Signature::parse(&std::fs::read_to_string(sig).unwrap()).unwrap();
    TrustedSigners::parse(text)
        .map_err(|e| e.to_string())?
        .accept_message(MESSAGE, MESSAGE.as_bytes(), &[signature], now)
        .map(|s| s.name.clone())
        .map_err(|r| r.to_string())
}

/// Every verdict on an allowed-signers file — option names in mixed case, namespaces lists
/// with and without the mesh's (and patterns of it), valid-before in the past and the future
/// and at its very second, valid-after in the future, cert-authority, quoted values holding
/// commas and blanks, comments and blank lines, tabs and CRLF line ends, a principal
/// pattern, options ssh-keygen does not know, malformed values, another key — is the one `ssh-keygen -Y verify` gives on the same file and
/// signature, at a pinned time and at the clock's; and each refusal by the mesh says why.
#[test]
fn every_verdict_is_ssh_keygens() {
    if !have_root_tools(&["ssh-keygen"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ci = keygen(dir.path(), "ci");
    let stranger = keygen(dir.path(), "stranger");
    let sig = ssh_sign(&ci, dir.path());
    let k = public(&ci);
    let s = public(&stranger);
    // (the file, whether it is accepted, what a refusal says)
    let cases: Vec<(String, bool, &str)> = vec![
        (format!("ci {k}\n"), true, ""),
        (format!("ci {s}\n"), false, "a key it does not trust"),
        (format!("ops,ci {k}\n"), true, ""),
        (
            format!("ci NAMESPACES=\"git,mesh-generation\" {k}\n"),
            true,
            "",
        ),
        (
            format!("ci Namespaces=\"git\" {k}\n"),
            false,
            "is for namespaces \"git\", not mesh-generation",
        ),
        (format!("ci namespaces=\"git,mesh-*\" {k}\n"), true, ""),
        (format!("ci namespaces=\"*\" {k}\n"), true, ""),
        (
            format!("ci namespaces=\"*,!mesh-generation\" {k}\n"),
            false,
            "not mesh-generation",
        ),
        (
            format!("ci Valid-Before=\"20200101\" {k}\n"),
            false,
            "has expired since 2020-01-01 00:00:00 UTC",
        ),
        (format!("ci VALID-BEFORE=\"20990101Z\" {k}\n"), true, ""),
        (format!("ci valid-before=\"{PINNED_TEXT}\" {k}\n"), true, ""),
        (
            format!("ci valid-before=\"20300615115959Z\" {k}\n"),
            false,
            "has expired since 2030-06-15 11:59:59 UTC",
        ),
        (
            format!("ci Valid-After=\"20990101\" {k}\n"),
            false,
            "is valid only from 2099-01-01 00:00:00 UTC",
        ),
        (
            format!("ci valid-after=\"20200101UTC\",valid-before=\"209901011200\" {k}\n"),
            true,
            "",
        ),
        (
            format!("ci cert-authority {k}\n"),
            false,
            "line 1 is a cert-authority line",
        ),
        (
            format!("ci CERT-AUTHORITY,namespaces=\"mesh-generation\" {k}\n"),
            false,
            "line 1 is a cert-authority line",
        ),
        (format!("ci cert-authority {k}\nci {k}\n"), true, ""),
        (
            format!("ci namespaces=\"a,b c,mesh-generation\",valid-before=\"20990101Z\" {k}\n"),
            true,
            "",
        ),
        (
            format!("ci namespaces=\"a,b c\",valid-before=\"20990101Z\" {k}\n"),
            false,
            "not mesh-generation",
        ),
        (
            format!("# the fleet's signers\n\n   # indented\n\t\nci {k} ci@build\n\n# end\n"),
            true,
            "",
        ),
        (
            format!("ci from=\"10.0.0.1\" {k}\n"),
            false,
            "ssh-keygen knows no option from=",
        ),
        (format!("ci from=\"10.0.0.1\" {k}\nci {k}\n"), true, ""),
        (
            format!("ci valid-before=20990101 {k}\n"),
            false,
            "takes a quoted value",
        ),
        (
            format!("ci valid-before=\"2099-01-01\" {k}\n"),
            false,
            "is not a time",
        ),
        (
            format!("ci valid-after=\"20990101\",valid-before=\"20200101\" {k}\n"),
            false,
            "not after its valid-after",
        ),
        (
            format!("ci namespaces=\"git\",namespaces=\"mesh-generation\" {k}\n"),
            false,
            "given twice",
        ),
        (
            format!("ci valid-before=\"20200101\" {k}\nci {k}\n"),
            true,
            "",
        ),
        (
            format!("  c*\tnamespaces=\"mesh-generation\"\t{k}\r\n"),
            true,
            "",
        ),
        (
            format!("ci namespaces=\"git\" {k}\r\n# the next one counts\r\nci {k}\r\n"),
            true,
            "",
        ),
        (
            format!("ci namespaces=\"git\" {k}\r\n"),
            false,
            "not mesh-generation",
        ),
    ];
    let file = dir.path().join("allowed_signers");
    let pinned = SystemTime::UNIX_EPOCH + Duration::from_secs(PINNED);
    for (text, accepted, why) in &cases {
        std::fs::write(&file, text).unwrap();
        for (at, verify_time) in [(pinned, Some(PINNED_TEXT)), (SystemTime::now(), None)] {
            let (theirs, said) = ssh_verdict(&file, &sig, verify_time);
            let ours = mesh_verdict(text, &sig, at);
            assert_eq!(
                ours.is_ok(),
                theirs,
                "the mesh and ssh-keygen differ at {verify_time:?} on\n{text}mesh: {ours:?}\n\
                 ssh-keygen: {said}"
            );
            if verify_time.is_some() {
                assert_eq!(theirs, *accepted, "{text}: {said}");
            }
            if let Err(refusal) = &ours {
                assert!(refusal.contains(why), "{text}: {refusal}");
            }
        }
    }
}

/// The node's root and its state directory, whole: every file's bytes, mode, owner and mtime —
/// but the switch lock's, which holds the pid of whoever took it last (see `lock.rs`).
fn node_state(f: &Fixture) -> (Snapshot, Snapshot) {
    let lock = f.state().join("lock");
    let mut state = snapshot(&f.state());
    state.retain(|e| e.0 != lock);
    (f.snapshot(), state)
}

/// Builds `decl` in the node's store: its id.
fn built(f: &Fixture, name: &str, motd: &str) -> String {
    f.write_decl(name, &declaration(motd, false));
    let ran = f.ok(&["build", f.decl(name).to_str().unwrap()]);
    ran.stdout.lines().last().unwrap().trim().to_owned()
}

fn tools() -> bool {
    have_root_tools(&["ssh-keygen", "ip", "nft"])
}

/// A node at generation a, with generation b built and signed by `ci`: the fixture, b, and
/// ci's key.
fn node_with_signed_b(keys: &Path) -> (Fixture, String, std::path::PathBuf) {
    let f = Fixture::new();
    let ci = keygen(keys, "ci");
    built(&f, "a.ncl", "a\\n");
    f.ok(&["switch", f.decl("a.ncl").to_str().unwrap()]);
    let b = built(&f, "b.ncl", "b\\n");
    f.ok(&["sign", &b, "--key", ci.to_str().unwrap()]);
    std::fs::create_dir_all(f.at("/etc/mesh")).unwrap();
    (f, b, ci)
}

/// `mesh switch --generation b` is refused (exit 2) with nothing changed in the root or the
/// state directory, saying each of `says`; what it said.
fn refused(f: &Fixture, b: &str, says: &[&str]) -> String {
    let before = node_state(f);
    let ran = f.mesh(&["switch", "--generation", b]);
    assert_eq!(ran.code, 2, "{}{}", ran.stdout, ran.stderr);
    for s in says {
        assert!(ran.stderr.contains(s), "{s:?} in:\n{}", ran.stderr);
    }
    assert!(ran.stderr.contains("nothing was changed"), "{}", ran.stderr);
    let after = node_state(f);
    let changed: Vec<_> = [(&before.0, &after.0), (&before.1, &after.1)]
        .into_iter()
        .flat_map(|(was, is)| {
            let gone = was.iter().filter(|e| !is.contains(e));
            let came = is.iter().filter(|e| !was.contains(e));
            gone.chain(came).map(|e| e.0.clone()).collect::<Vec<_>>()
        })
        .collect();
    assert!(changed.is_empty(), "the refusal changed {changed:?}");
    assert_eq!(f.read(MOTD).as_deref(), Some("a\n"));
    ran.stderr
}

/// A signer line that has expired (valid-before in the past) or is not yet valid (valid-after
/// in the future) refuses a switch to a generation its key signed — exit 2, the root and the
/// state directory byte-identical, saying since when it expired or from when it is valid —
/// and the same key on a line without bounds lets the same switch through.
#[test]
fn a_signer_line_outside_its_validity_refuses_a_switch() {
    if !tools() {
        return;
    }
    let keys = tempfile::tempdir().unwrap();
    let (f, b, ci) = node_with_signed_b(keys.path());
    let signers = f.at("/etc/mesh/trusted-signers");
    let k = public(&ci);

    std::fs::write(&signers, format!("ci valid-before=\"20200101Z\" {k}\n")).unwrap();
    refused(
        &f,
        &b,
        &[
            &b[..12],
            "line 1 (ci) has expired since 2020-01-01 00:00:00 UTC",
            "this node trusts no signer now",
        ],
    );

    std::fs::write(&signers, format!("ci Valid-After=\"20990101Z\" {k}\n")).unwrap();
    refused(
        &f,
        &b,
        &["line 1 (ci) is valid only from 2099-01-01 00:00:00 UTC"],
    );

    std::fs::write(
        &signers,
        format!("ci valid-after=\"20200101Z\",valid-before=\"20990101Z\" {k}\n"),
    )
    .unwrap();
    f.ok(&["switch", "--generation", &b]);
    assert_eq!(f.read(MOTD).as_deref(), Some("b\n"));
}

/// A time without `Z` is the node's local time, as ssh-keygen reads it: a `valid-before` two
/// hours ahead in UTC digits has passed where the clock reads fourteen hours ahead of UTC
/// (`TZ=XYZ-14`, a POSIX zone no zone file is needed for) — ssh-keygen refuses it there, and
/// the mesh refuses the switch, nothing changed — and is still ahead in UTC, where both accept.
#[test]
fn a_time_without_z_is_the_nodes_local_time() {
    if !tools() || !have_root_tools(&["date"]) {
        return;
    }
    let keys = tempfile::tempdir().unwrap();
    let (f, b, ci) = node_with_signed_b(keys.path());
    let out = Command::new("date")
        .args(["-u", "-d", "+2 hours", "+%Y%m%d%H%M%S"])
        .output()
        .unwrap();
    let soon = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let signers = f.at("/etc/mesh/trusted-signers");
    std::fs::write(
        &signers,
        format!("ci valid-before=\"{soon}\" {}\n", public(&ci)),
    )
    .unwrap();
    let sig = ssh_sign(&ci, keys.path());
    let east = "XYZ-14";
    assert!(!ssh_verdict_in(&signers, &sig, None, Some(east)).0);
    assert!(ssh_verdict_in(&signers, &sig, None, Some("UTC0")).0);

    let before = node_state(&f);
    let mut switch = f.command(&["switch", "--generation", &b]);
    switch.env("TZ", east);
    let ran = crate::support::run(switch);
    assert_eq!(ran.code, 2, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr.contains("(ci) has expired since"),
        "{}",
        ran.stderr
    );
    assert!(node_state(&f) == before, "the refusal changed nothing");

    let mut switch = f.command(&["switch", "--generation", &b]);
    switch.env("TZ", "UTC0");
    let ran = crate::support::run(switch);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert_eq!(f.read(MOTD).as_deref(), Some("b\n"));
}

/// A trusted-signers file any user may write, a folder above it its group may write, one owned
/// by another user, a symlink in its place, or no file at all in a folder every user may write
/// (whoever removed it could have) refuses a switch to a generation a trusted key
/// signed — exit 2, nothing changed — naming the file or folder and the fix; once fixed
/// (`chmod go-w`, `chown root:root`), the same switch goes through.
#[test]
fn a_trust_root_others_may_write_refuses_until_fixed() {
    if !tools() {
        return;
    }
    let keys = tempfile::tempdir().unwrap();
    let (f, b, ci) = node_with_signed_b(keys.path());
    let signers = f.at("/etc/mesh/trusted-signers");
    let folder = f.at("/etc/mesh");
    std::fs::write(&signers, format!("ci {}\n", public(&ci))).unwrap();
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));

    mode(&signers, 0o666).unwrap();
    refused(
        &f,
        &b,
        &[
            &format!(
                "{} is writable by its group and every user (mode 0666",
                signers.display()
            ),
            &format!("chmod go-w {}", signers.display()),
            "StrictModes",
        ],
    );
    mode(&signers, 0o644).unwrap();

    mode(&folder, 0o775).unwrap();
    refused(
        &f,
        &b,
        &[
            &format!("{} is writable by its group (mode 0775", folder.display()),
            &format!("chmod go-w {}", folder.display()),
        ],
    );
    mode(&folder, 0o755).unwrap();

    std::os::unix::fs::chown(&folder, Some(1000), None).unwrap();
    refused(
        &f,
        &b,
        &[&format!(
            "{} is owned by uid 1000 (fix: chown root:root {})",
            folder.display(),
            folder.display()
        )],
    );
    std::os::unix::fs::chown(&folder, Some(0), None).unwrap();

    // The same good file, reached through a symlink.
    let real = f.at("/etc/mesh/real-signers");
    std::fs::rename(&signers, &real).unwrap();
    std::os::unix::fs::symlink(&real, &signers).unwrap();
    refused(&f, &b, &[&format!("{} is a symlink", signers.display())]);
    std::fs::remove_file(&signers).unwrap();
    std::fs::rename(&real, &signers).unwrap();

    // No file at all, in a folder every user may write: whoever removed it could have.
    std::fs::rename(&signers, &real).unwrap();
    mode(&folder, 0o777).unwrap();
    refused(
        &f,
        &b,
        &[
            "there is no such file, and whoever removed it could have",
            &format!("chmod go-w {}", folder.display()),
        ],
    );
    mode(&folder, 0o755).unwrap();
    std::fs::rename(&real, &signers).unwrap();

    f.ok(&["switch", "--generation", &b]);
    assert_eq!(f.read(MOTD).as_deref(), Some("b\n"));
}
