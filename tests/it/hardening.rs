//! Issue 11, "Hardening": what a careless or hostile operator, module or machine can hand the
//! mesh, and what the mesh does with it. Each test pins one of the holes the issue found (or a
//! sibling of one), and failed before its fix.

use crate::support::{mesh, run};

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
