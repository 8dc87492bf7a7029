//! Issue 23: a fleet of one's own in the first hour — `mesh init` writes a fleet that builds as
//! it is, with its CI gate; `mesh lib` writes the library the build uses, for editors; the shell
//! completions and the man pages cover every command, with the `--help` text.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{mesh, repo, run, Ran};

/// Whether `tool` is on PATH; in CI (`CI=true`) its absence is a failure, never a skip.
fn tool_here(tool: &str) -> bool {
    let here = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !here {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("this test needs {tool}, and CI must run it");
        }
        eprintln!("NOT RUN outside CI: this check needs {tool}");
    }
    here
}

/// `mesh ARGS` in `dir`, with `state` as the state directory.
fn mesh_in(state: &Path, dir: &Path, args: &[&str]) -> Ran {
    let mut c = mesh(state);
    c.current_dir(dir).args(args);
    run(c)
}

/// `mesh init` writes a fleet that builds as it is: a fleet file, a catalogue, a node, the
/// records folder, a .gitignore, the library for editors, and the CI gate with the id the node
/// builds — so `mesh build`, `mesh fleet build --check` (the fleet found from the working
/// folder) and `ci/check.sh` pass at once. A change of what the node would run is caught by the
/// gate until its ids are written again.
#[test]
fn init_writes_a_fleet_that_builds_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let ran = mesh_in(state.path(), dir.path(), &["init", "fleet", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let out: serde_json::Value = serde_json::from_str(ran.last_line()).unwrap();
    assert_eq!(out["nodes"][0]["node"], "node-1", "{out}");
    let id = out["nodes"][0]["id"].as_str().unwrap().to_owned();
    let fleet = dir.path().join("fleet");
    for file in [
        "fleet.ncl",
        "nodes/node-1.ncl",
        "catalogue/catalogue.ncl",
        "records",
        ".gitignore",
        ".envrc",
        ".mesh/mesh.ncl",
        "ci/check.sh",
        "ci/ids.txt",
    ] {
        assert!(fleet.join(file).exists(), "{file}");
    }
    let ignored = std::fs::read_to_string(fleet.join(".gitignore")).unwrap();
    assert!(
        ignored.contains("/.mesh/") && ignored.contains("/keys/"),
        "{ignored}"
    );
    let ids = std::fs::read_to_string(fleet.join("ci/ids.txt")).unwrap();
    assert!(
        ids.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["node-1", id.as_str()]),
        "{ids}"
    );

    let built = mesh_in(state.path(), &fleet, &["build", "nodes/node-1.ncl"]);
    assert_eq!(built.code, 0, "{}", built.stderr);
    assert_eq!(built.last_line(), id);
    let nodes = fleet.join("nodes");
    let gate = mesh_in(
        state.path(),
        &nodes,
        &["fleet", "build", "--check", "../ci/ids.txt"],
    );
    assert_eq!(gate.code, 0, "{}", gate.stderr);

    let check = |args: &[&str]| {
        let out = Command::new(fleet.join("ci/check.sh"))
            .args(args)
            .env("MESH", env!("CARGO_BIN_EXE_mesh"))
            .env_remove("MESH_STATE_DIR")
            .output()
            .unwrap();
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    assert_eq!(check(&[]).0, Some(0), "{}", check(&[]).1);
    std::fs::write(fleet.join("catalogue/files/motd"), "Another message.\n").unwrap();
    let (code, said) = check(&[]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("node-1: builds to"), "{said}");
    assert_eq!(check(&["--update"]).0, Some(0));
    assert_eq!(check(&[]).0, Some(0), "{}", check(&[]).1);
    let again = std::fs::read_to_string(fleet.join("ci/ids.txt")).unwrap();
    assert!(
        again.starts_with("# The CI gate's ids") && !again.contains(&id),
        "{again}"
    );
}

/// `mesh init` writes over nothing: into a folder holding any of the fleet's files it writes
/// nothing (exit 2, naming them); a bad node name is exit 1; so is a folder every user may
/// write to, where a fleet file would mark no tree.
#[test]
fn init_writes_over_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("mine/ci")).unwrap();
    std::fs::write(dir.path().join("mine/fleet.ncl"), "mine").unwrap();
    std::fs::write(dir.path().join("mine/ci/check.sh"), "mine").unwrap();
    let ran = mesh_in(state.path(), dir.path(), &["init", "mine"]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("fleet.ncl") && ran.stderr.contains("ci/check.sh"),
        "{}",
        ran.stderr
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("mine/fleet.ncl")).unwrap(),
        "mine"
    );
    assert!(!dir.path().join("mine/nodes").exists(), "nothing written");

    let ran = mesh_in(
        state.path(),
        dir.path(),
        &["init", "other", "--node", "no spaces"],
    );
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(!dir.path().join("other").exists());

    use std::os::unix::fs::PermissionsExt;
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let ran = mesh_in(state.path(), dir.path(), &["init", "open"]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("every user may write"),
        "{}",
        ran.stderr
    );
    assert_eq!(std::fs::read_dir(&open).unwrap().count(), 0);
}

/// The installed library of a build in `state`.
fn installed_library(state: &Path) -> PathBuf {
    let mut found: Vec<PathBuf> = walkdir::WalkDir::new(state.join("ncl"))
        .into_iter()
        .flatten()
        .filter(|e| e.file_name() == "mesh.ncl")
        .map(|e| e.into_path())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

/// `mesh lib` prints, and `mesh lib --write DIR` writes, the very library a build evaluates
/// with (its first line naming the mesh's version); on the import path of a plain Nickel
/// evaluation — what the `nickel` command and the language server do with NICKEL_IMPORT_PATH —
/// it checks a declaration's contracts. A file there that is not a library is not replaced.
#[test]
fn the_written_library_is_the_one_the_build_uses() {
    let state = tempfile::tempdir().unwrap();
    let ran = mesh_in(
        state.path(),
        &repo(),
        &["build", "examples/nodes/fresh-node.ncl"],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let used = std::fs::read(installed_library(state.path())).unwrap();

    let printed = mesh_in(state.path(), &repo(), &["lib"]);
    assert_eq!(printed.code, 0, "{}", printed.stderr);
    assert_eq!(printed.stdout.as_bytes(), used.as_slice());
    assert!(printed
        .stdout
        .lines()
        .next()
        .unwrap()
        .contains(&format!("as mesh {} ships it", env!("CARGO_PKG_VERSION"))));

    let editor = tempfile::tempdir().unwrap();
    let dir = editor.path().join(".mesh");
    let written = mesh_in(
        state.path(),
        editor.path(),
        &["lib", "--write", dir.to_str().unwrap()],
    );
    assert_eq!(written.code, 0, "{}", written.stderr);
    assert_eq!(std::fs::read(dir.join("mesh.ncl")).unwrap(), used);

    // A plain evaluation with the written folder on the import path: a port that is not a
    // number is the contract's error, with the library's contract named.
    let node = editor.path().join("n.ncl");
    // The example's modules (the catalogue's, and one with a secret of the fleet's tree) give
    // way to the one stand-in: the library alone is what this evaluation reads.
    let example = std::fs::read_to_string(repo().join("examples/nodes/fresh-node.ncl")).unwrap();
    let modules = example
        .find("  modules = [")
        .expect("the example's modules");
    std::fs::write(
        &node,
        format!("{}  modules = [c.ssh],\n}}\n", &example[..modules]).replace(
            "let c = import \"../catalogue/catalogue.ncl\" in",
            "let c = { ssh = { name = \"ssh\", config = fun s => {} } } in",
        ),
    )
    .unwrap();
    let good = mesh_compiler::eval::evaluate(&node, &dir, &Default::default());
    assert!(good.is_ok(), "{:?}", good.err());
    std::fs::write(
        &node,
        std::fs::read_to_string(&node)
            .unwrap()
            .replace("ssh = 22", "ssh = \"twenty-two\""),
    )
    .unwrap();
    let bad = mesh_compiler::eval::evaluate(&node, &dir, &Default::default())
        .err()
        .expect("a port that is not a number breaks the contract")
        .to_string();
    assert!(bad.contains("contract"), "{bad}");

    std::fs::write(dir.join("mesh.ncl"), "{ mine = 1 }\n").unwrap();
    let refused = mesh_in(
        state.path(),
        editor.path(),
        &["lib", "--write", dir.to_str().unwrap()],
    );
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert_eq!(
        std::fs::read_to_string(dir.join("mesh.ncl")).unwrap(),
        "{ mine = 1 }\n"
    );
}

/// The commands `mesh WORDS --help` lists, each with the words that run it, recursively: every
/// command a person may run, from the binary's own help.
fn commands(state: &Path, words: &[String]) -> Vec<Vec<String>> {
    let mut c = mesh(state);
    c.args(words).arg("--help");
    let help = run(c);
    assert_eq!(help.code, 0, "{words:?}: {}", help.stderr);
    let mut out = vec![words.to_vec()];
    let listed = help
        .stdout
        .split("\nCommands:\n")
        .nth(1)
        .map(|rest| rest.split("\n\n").next().unwrap_or(""))
        .unwrap_or("");
    for line in listed.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if name.is_empty() || name == "help" || !line.starts_with("  ") || line.starts_with("   ") {
            continue;
        }
        let mut sub = words.to_vec();
        sub.push(name.to_owned());
        out.extend(commands(state, &sub));
    }
    out
}

/// Text with its whitespace made single spaces.
fn words_of(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The man pages (`mesh man --write DIR`) and the completions of bash, zsh and fish cover every
/// command `--help` lists. Each page, rendered, says what the command's `--help` says first and
/// names every option it lists; each script names every command and parses in its shell. None
/// of it needs a state directory (a package's build makes them where there is none).
#[test]
fn completions_and_man_pages_cover_every_command() {
    let state = tempfile::tempdir().unwrap();
    let all = commands(state.path(), &[]);
    assert!(all.len() > 25, "{all:?}");
    assert!(all.contains(&vec!["fleet".to_owned(), "build".to_owned()]));
    let no_state = |args: &[&str]| {
        let mut c = mesh(state.path());
        c.env("MESH_STATE_DIR", "/proc/no-state-here").args(args);
        run(c)
    };

    let pages = tempfile::tempdir().unwrap();
    let wrote = no_state(&["man", "--write", pages.path().to_str().unwrap()]);
    assert_eq!(wrote.code, 0, "{}", wrote.stderr);
    let groff = tool_here("groff");
    for words in &all {
        let name = std::iter::once("mesh")
            .chain(words.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("-");
        let page = pages.path().join(format!("{name}.1"));
        assert!(
            page.is_file(),
            "no man page for {words:?}: {}",
            wrote.stdout
        );
        if !groff {
            continue;
        }
        let rendered = Command::new("groff")
            .args(["-k", "-man", "-Tutf8", "-P-cbou", "-rLL=5000n", "-rHY=0"])
            .arg(&page)
            .output()
            .unwrap();
        assert!(rendered.status.success(), "{name}");
        let text = words_of(&String::from_utf8_lossy(&rendered.stdout))
            .replace(['\u{2010}', '\u{2212}'], "-")
            .replace(['\u{2018}', '\u{2019}'], "'")
            .replace(['\u{201c}', '\u{201d}'], "\"");
        let mut c = mesh(state.path());
        c.args(words).arg("--help");
        let help = run(c).stdout;
        let about = words_of(help.split("\n\n").next().unwrap());
        assert!(
            text.contains(&about),
            "{name}: the page does not say what --help says:\n{about}\n---\n{text}"
        );
        for flag in help
            .split_whitespace()
            .filter(|w| w.starts_with("--") && w.len() > 2)
        {
            let flag = flag.trim_end_matches([',', '.', ')', ':']);
            let flag = flag.split(['=', '[', '<']).next().unwrap();
            assert!(text.contains(flag), "{name}: the page does not name {flag}");
        }
    }
    let one = no_state(&["man", "fleet", "build"]);
    assert_eq!(one.code, 0, "{}", one.stderr);
    assert_eq!(
        one.stdout,
        std::fs::read_to_string(pages.path().join("mesh-fleet-build.1")).unwrap()
    );
    let unknown = no_state(&["man", "fleet", "nope"]);
    assert_eq!(unknown.code, 1, "{}", unknown.stderr);
    assert!(unknown.stderr.contains("records"), "{}", unknown.stderr);

    for (shell, parse) in [
        ("bash", &["bash", "-n"][..]),
        ("zsh", &["zsh", "-n"][..]),
        ("fish", &["fish", "--no-execute"][..]),
    ] {
        let script = no_state(&["completions", shell]);
        assert_eq!(script.code, 0, "{shell}: {}", script.stderr);
        for words in all.iter().filter(|w| !w.is_empty()) {
            let last = words.last().unwrap();
            assert!(
                script.stdout.contains(last.as_str()),
                "{shell}: no completion of {words:?}"
            );
        }
        if tool_here(parse[0]) {
            let file = pages.path().join(format!("completion.{shell}"));
            std::fs::write(&file, &script.stdout).unwrap();
            let out = Command::new(parse[0])
                .args(&parse[1..])
                .arg(&file)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{shell} does not parse its completions: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    assert_eq!(no_state(&["completions", "tcsh"]).code, 1);
}

/// Each command's `--help` lists the options it reads, grouped under headings, and no other:
/// `sign` offers no namespace, container jobs, settle or evaluation limits; `import` and
/// `generations` not the switch's; `switch` has them all under their headings. An option
/// given after a command that does not read it is refused (exit 1); the same option before
/// the command is taken, and after the command it wins over one before.
#[test]
fn each_commands_help_lists_only_the_options_it_reads() {
    let state = tempfile::tempdir().unwrap();
    let help = |words: &[&str]| {
        let mut c = mesh(state.path());
        c.args(words).arg("--help");
        let ran = run(c);
        assert_eq!(ran.code, 0, "{words:?}: {}", ran.stderr);
        ran.stdout
    };
    let options = |text: &str| -> Vec<String> {
        text.split_whitespace()
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(|w| w.split(['=', '[', '<', ',']).next().unwrap().to_owned())
            .collect()
    };
    let sign = options(&help(&["sign"]));
    for absent in [
        "--netns",
        "--container-jobs",
        "--settle",
        "--eval-memory",
        "--root",
    ] {
        assert!(!sign.iter().any(|o| o == absent), "sign offers {absent}");
    }
    assert!(sign.iter().any(|o| o == "--state-dir"), "{sign:?}");
    for words in [
        &["import"][..],
        &["generations"],
        &["status"],
        &["fleet", "records"],
    ] {
        let offered = options(&help(words));
        for absent in ["--container-jobs", "--settle"] {
            assert!(
                !offered.iter().any(|o| o == absent),
                "{words:?} offers {absent}"
            );
        }
    }
    let switch = help(&["switch"]);
    for heading in [
        "The state:",
        "The machine:",
        "Evaluation:",
        "The fleet's tree:",
        "Switching:",
    ] {
        assert!(
            switch.contains(heading),
            "switch --help lacks {heading}\n{switch}"
        );
    }
    for present in [
        "--netns",
        "--container-jobs",
        "--settle",
        "--eval-memory",
        "--tree",
    ] {
        assert!(
            options(&switch).iter().any(|o| o == present),
            "switch lacks {present}"
        );
    }

    // After a command that does not read it: refused, nothing done.
    let mut c = mesh(state.path());
    c.args(["generations", "--settle", "0"]);
    let ran = run(c);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(ran.stderr.contains("--settle"), "{}", ran.stderr);
    // Before it, taken; after it, winning over the one before.
    let (before, after) = (state.path().join("before"), state.path().join("after"));
    let mut c = mesh(state.path());
    c.arg("--state-dir")
        .arg(&before)
        .args(["generations", "--json"]);
    assert_eq!(run(c).code, 0);
    assert!(
        before.is_dir(),
        "--state-dir before the command is not read"
    );
    let mut c = mesh(state.path());
    c.arg("--state-dir")
        .arg(state.path().join("neither"))
        .arg("generations")
        .arg("--state-dir")
        .arg(&after);
    assert_eq!(run(c).code, 0);
    assert!(after.is_dir() && !state.path().join("neither").exists());
}
