//! Issue 50: the guide runs. `docs/src/guide.md` is read, and every block it marks as runnable is
//! run in order against a real node, as the other tests run one: the node `web-1` a network
//! namespace with a default-deny nftables firewall and a real `sshd`, its root and state in
//! folders of the test's, a compose project on the real engine (an image made by `docker import`
//! of the static busybox); the node `web-2` a second namespace with its own `sshd`, reached from
//! a workstation's namespace over SSH, as `tests/it/sshlab.rs` makes them.
//!
//! The guide's conventions, which this test defines:
//!
//! - ```` ```console,runnable ```` opens a block the test runs. Each line starting with `$ ` is a
//!   command, run by `sh -c` in the namespace of the workstation (`web-1` is the workstation
//!   too: its firewall is reached through `MESH_NETNS`, its files through `MESH_ROOT`, which the
//!   test sets, as it sets `MESH_STATE_DIR`; nothing lands in this machine's own ruleset or
//!   `/etc`). `$ cd DIR` changes the folder of the commands that follow, in later blocks too.
//! - The lines after a command, up to the next command, are what it prints: each must appear in
//!   its standard output or error, in the order shown within each; lines it prints that the guide
//!   does not show are allowed. In a line shown, `…` stands for any text (an id, a time, a hash,
//!   a token): `b3:…`. Trailing spaces are ignored.
//! - A command is expected to exit 0, unless its output ends with a line `[exit N]`.
//! - ```` ```nickel,file=PATH ```` is a file the reader writes: the test writes the block's text
//!   to PATH (from the commands' folder) before the blocks after it run.
//! - ```` ```nickel,fleet-entry ```` is a node's entry in the fleet file, which the test adds to
//!   `fleet.ncl` with what only the lab needs: where that node's mesh keeps its state and root
//!   (`remote`), and the lab's `ssh_config`. The guide says so where it shows the entry.
//! - ```` ```yaml,compose ```` is the compose file the machine's project is started from, and
//!   ```` ```text,firewall ```` the ruleset in force on it before the mesh: the test starts the
//!   one and loads the other before the first command, so what the guide says the machine has
//!   is what it has.
//!
//! Everything the test makes (namespaces, sshd, the compose project's containers, volumes and
//! networks, the image, the folders) is removed when it ends, also when it fails.
//!
//! To write a step, run `MESH_GUIDE_SHOW=1 cargo test --features crash-points --test it --
//! guide::the_guide_runs --nocapture`: every command's output and exit code is printed and
//! nothing is checked (never under `CI=true`), to copy from, masking what differs by run.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{have_root_tools, repo};

/// The compose project the machine runs: its containers are `guideshop_web_1`, ….
const PROJECT: &str = "guideshop";
/// The image the project runs, made by the test.
const IMAGE: &str = "guideshop-busybox:1";
/// The port the project publishes on the machine's loopback.
const PORT: u16 = 28080;

/// One step of a runnable block: a command, what it prints, its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    /// The guide's line number of the command.
    line: usize,
    command: String,
    shown: Vec<String>,
    exit: i32,
}

/// A block of the guide the test acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Block {
    Console(Vec<Step>),
    File {
        path: String,
        text: String,
    },
    FleetEntry(String),
    /// The compose file the machine's project is started from.
    Compose(String),
    /// The firewall in force on the machine before the mesh.
    Firewall(String),
}

/// The blocks of `guide` the test acts on, in order.
fn blocks(guide: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = guide.lines().enumerate();
    while let Some((_, line)) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let words: Vec<&str> = info.split(',').map(str::trim).collect();
        let mut body = Vec::new();
        for (n, l) in lines.by_ref() {
            if l.starts_with("```") {
                break;
            }
            body.push((n + 1, l));
        }
        if words.contains(&"runnable") {
            out.push(Block::Console(steps(&body)));
        } else if let Some(path) = words.iter().find_map(|w| w.strip_prefix("file=")) {
            out.push(Block::File {
                path: path.to_owned(),
                text: text_of(&body),
            });
        } else if words.contains(&"fleet-entry") {
            out.push(Block::FleetEntry(text_of(&body).trim().to_owned()));
        } else if words.contains(&"compose") {
            out.push(Block::Compose(text_of(&body)));
        } else if words.contains(&"firewall") {
            out.push(Block::Firewall(text_of(&body)));
        }
    }
    out
}

fn text_of(body: &[(usize, &str)]) -> String {
    body.iter().map(|(_, l)| format!("{l}\n")).collect()
}

/// The commands of a runnable block, each with the lines shown after it.
fn steps(body: &[(usize, &str)]) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    for &(n, l) in body {
        if let Some(command) = l.strip_prefix("$ ") {
            out.push(Step {
                line: n,
                command: command.to_owned(),
                shown: Vec::new(),
                exit: 0,
            });
            continue;
        }
        let step = out
            .last_mut()
            .unwrap_or_else(|| panic!("guide line {n}: output before any command: {l}"));
        let exit = l
            .strip_prefix("[exit ")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|c| c.parse().ok());
        match exit {
            Some(code) => step.exit = code,
            None if l.trim().is_empty() => {}
            None => step.shown.push(l.trim_end().to_owned()),
        }
    }
    out
}

/// Whether `line` is what `shown` shows, `…` standing for any text.
fn matches(shown: &str, line: &str) -> bool {
    let line = line.trim_end();
    let parts: Vec<&str> = shown.split('…').collect();
    if parts.len() == 1 {
        return shown == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || line.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &line[first.len()..];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The first line `shown` shows that the command did not print (in its order), if any.
fn unshown(shown: &[String], stdout: &str, stderr: &str) -> Option<String> {
    let (out, err): (Vec<&str>, Vec<&str>) = (stdout.lines().collect(), stderr.lines().collect());
    let (mut at_out, mut at_err) = (0, 0);
    for s in shown {
        if let Some(i) = out[at_out..].iter().position(|l| matches(s, l)) {
            at_out += i + 1;
        } else if let Some(i) = err[at_err..].iter().position(|l| matches(s, l)) {
            at_err += i + 1;
        } else {
            return Some(s.clone());
        }
    }
    None
}

/// The runner reads blocks, commands, outputs and exit codes as the conventions above say,
/// and a line shown matches only what it shows.
#[test]
fn the_guide_runner_reads_blocks_and_masks() {
    let guide = "text\n\n```console,runnable\n$ mesh build n.ncl\nb3:…\n$ mesh flip\nerror: … not taken\n[exit 2]\n```\n\n```nickel,file=nodes/x.ncl\n{ a = 1 }\n```\n\n```sh\n$ not run\n```\n\n```nickel,fleet-entry\nx = {},\n```\n\n```yaml,compose\nservices: {}\n```\n\n```text,firewall\ntable inet f {}\n```\n";
    assert_eq!(
        blocks(guide),
        vec![
            Block::Console(vec![
                Step {
                    line: 4,
                    command: "mesh build n.ncl".to_owned(),
                    shown: vec!["b3:…".to_owned()],
                    exit: 0,
                },
                Step {
                    line: 6,
                    command: "mesh flip".to_owned(),
                    shown: vec!["error: … not taken".to_owned()],
                    exit: 2,
                },
            ]),
            Block::File {
                path: "nodes/x.ncl".to_owned(),
                text: "{ a = 1 }\n".to_owned(),
            },
            Block::FleetEntry("x = {},".to_owned()),
            Block::Compose("services: {}\n".to_owned()),
            Block::Firewall("table inet f {}\n".to_owned()),
        ]
    );
    assert!(matches("b3:…", "b3:0123abcd"));
    assert!(matches(
        "generation 3 (b3:…) in force",
        "generation 3 (b3:99) in force  "
    ));
    assert!(!matches(
        "generation 3 (b3:…) in force",
        "generation 4 (b3:99) in force"
    ));
    assert!(!matches("b3:…", "id b3:0123"));
    assert!(!matches("ab…ba", "aba"));
    assert_eq!(unshown(&["a".into(), "c".into()], "a\nb\nc\n", ""), None);
    assert_eq!(
        unshown(&["c".into(), "a".into()], "a\nb\nc\n", ""),
        Some("a".to_owned()),
        "out of order"
    );
    assert_eq!(unshown(&["e".into(), "a".into()], "a\n", "e\n"), None);
}

/// What the test made on the engine for the guide; all of it goes when dropped. The test
/// refuses to start when any of it is there before (it is not the test's to remove).
struct Engine {
    project_dir: PathBuf,
}

impl Engine {
    fn ours(what: &str) -> Vec<String> {
        let filter = format!("name={PROJECT}");
        let out = Command::new("docker")
            .args([what, "ls", "-q", "--filter", &filter])
            .args(if what == "container" {
                &["-a"][..]
            } else {
                &[][..]
            })
            .output()
            .expect("docker runs");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    fn new(project_dir: PathBuf) -> Self {
        for what in ["container", "volume", "network"] {
            assert!(
                Self::ours(what).is_empty(),
                "a {what} named {PROJECT}… is on the engine already: the guide's test does not \
                 touch what it did not make; remove it first"
            );
        }
        let image = Command::new("docker")
            .args(["image", "inspect", IMAGE])
            .output()
            .expect("docker runs");
        assert!(
            !image.status.success(),
            "the image {IMAGE} is on the engine already: remove it first"
        );
        let engine = Self { project_dir };
        crate::support::import_busybox(IMAGE, None);
        engine
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = Command::new("docker-compose")
            .args(["-p", PROJECT, "down", "-v", "-t", "1"])
            .current_dir(&self.project_dir)
            .output();
        for (what, remove) in [
            ("container", &["rm", "-f"][..]),
            ("volume", &["rm", "-f"][..]),
            ("network", &["rm"][..]),
        ] {
            for id in Self::ours(what) {
                let _ = Command::new("docker")
                    .arg(what)
                    .args(remove)
                    .arg(id)
                    .output();
            }
        }
        let _ = Command::new("docker").args(["rmi", "-f", IMAGE]).output();
    }
}

/// The guide, run: every runnable block in order against a real node, each command's exit code
/// and the lines shown after it checked.
#[test]
fn the_guide_runs() {
    let guide_path = repo().join("docs/src/guide.md");
    let guide = std::fs::read_to_string(&guide_path).unwrap();
    let blocks = blocks(&guide);
    assert!(
        blocks
            .iter()
            .any(|b| matches!(b, Block::Console(s) if !s.is_empty())),
        "the guide has no runnable block"
    );
    // What the guide says the machine has is what the test gives it.
    let only = |what: &str, text: Vec<&String>| -> String {
        assert_eq!(
            text.len(),
            1,
            "the guide shows {} {what} blocks, not one",
            text.len()
        );
        text[0].clone()
    };
    let compose = only(
        "```yaml,compose",
        blocks
            .iter()
            .filter_map(|b| match b {
                Block::Compose(t) => Some(t),
                _ => None,
            })
            .collect(),
    );
    let predecessor = only(
        "```text,firewall",
        blocks
            .iter()
            .filter_map(|b| match b {
                Block::Firewall(t) => Some(t),
                _ => None,
            })
            .collect(),
    );
    assert!(
        compose.contains(&format!("image: {IMAGE}"))
            && compose.contains(&format!("\"127.0.0.1:{PORT}:8080\"")),
        "the guide's compose file runs {IMAGE} and publishes {PORT}, which the test makes sure of"
    );
    if !have_root_tools(&[
        "ip",
        "nft",
        "sshd",
        "ssh",
        "unshare",
        "docker-compose",
        "tar",
    ]) || !crate::containers::docker_here()
    {
        return;
    }
    let _turn = crate::containers::take_turn();
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", PORT)).is_ok(),
        "port {PORT} is taken on this machine: the guide's compose project publishes it"
    );
    let lab = crate::sshlab::Lab::named("guide", &["web-1", "web-2"], |_| String::new());
    let web1 = &lab.nodes[0];
    let web2 = &lab.nodes[1];
    // The machine in use: its firewall, its compose project under its root.
    let rules = lab.dir.path().join("predecessor.nft");
    std::fs::write(&rules, &predecessor).unwrap();
    let loaded = Command::new("ip")
        .args(["netns", "exec", &web1.netns, "nft", "-f"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(loaded.status.success(), "{loaded:?}");
    let project_dir = web1.root().join("srv/shop");
    std::fs::create_dir_all(&project_dir).unwrap();
    std::fs::write(project_dir.join("docker-compose.yml"), &compose).unwrap();
    std::fs::write(project_dir.join(".env"), "SHOP_MODE=live\n").unwrap();
    let _engine = Engine::new(project_dir.clone());
    let up = Command::new("docker-compose")
        .args(["-p", PROJECT, "up", "-d"])
        .current_dir(&project_dir)
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );

    let bin = PathBuf::from(env!("CARGO_BIN_EXE_mesh"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut here = lab.dir.path().to_owned();
    // MESH_GUIDE_SHOW=1 prints what each command printed and checks nothing: for writing the
    // guide, never in CI.
    let show = std::env::var_os("MESH_GUIDE_SHOW").is_some()
        && !std::env::var("CI").is_ok_and(|v| v == "true");
    for block in blocks {
        match block {
            Block::File { path, text } => {
                let file = here.join(path);
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                std::fs::write(file, text).unwrap();
            }
            Block::FleetEntry(entry) => add_to_fleet(&here, &entry, web2, &lab),
            // Set up before the first command.
            Block::Compose(_) | Block::Firewall(_) => {}
            Block::Console(steps) => {
                for step in steps {
                    if let Some(dir) = step.command.strip_prefix("cd ") {
                        here = here.join(dir.trim());
                        assert!(here.is_dir(), "guide line {}: no {}", step.line, dir);
                        continue;
                    }
                    let ran = Command::new("ip")
                        .args(["netns", "exec", &lab.deployer, "sh", "-c", &step.command])
                        .current_dir(&here)
                        .env("PATH", &path)
                        .env("MESH_STATE_DIR", web1.state())
                        .env("MESH_ROOT", web1.root())
                        .env("MESH_NETNS", &web1.netns)
                        .env("NO_COLOR", "1")
                        .env_remove("MESH_FLEET")
                        .env_remove("MESH_TREE")
                        .output()
                        .expect("sh runs");
                    let (stdout, stderr) = (
                        String::from_utf8_lossy(&ran.stdout),
                        String::from_utf8_lossy(&ran.stderr),
                    );
                    let code = ran.status.code().unwrap_or(-1);
                    if show {
                        eprintln!(
                            "--- line {}: $ {} [exit {code}]\n{stdout}--- stderr\n{stderr}",
                            step.line, step.command
                        );
                    }
                    if show {
                        // Writing the guide: every step shown, none checked.
                        continue;
                    }
                    assert_eq!(
                        code, step.exit,
                        "guide line {}: `{}` exited {code}, the guide says {}:\n{stdout}{stderr}",
                        step.line, step.command, step.exit
                    );
                    if let Some(line) = unshown(&step.shown, &stdout, &stderr) {
                        panic!(
                            "guide line {}: `{}` did not print, in its order, the line\n  {line}\n\
                             it printed:\n{stdout}--- on stderr:\n{stderr}",
                            step.line, step.command
                        );
                    }
                }
            }
        }
    }
}

/// Adds `entry` (the guide's, `NAME = { declaration = …, ssh = … },`) to the fleet file in
/// `here`, with what the lab needs: the node's `remote` (its mesh, state and root are the
/// lab's folders) and the lab's `ssh_config`.
fn add_to_fleet(here: &Path, entry: &str, node: &crate::sshlab::LabNode, lab: &crate::sshlab::Lab) {
    let fleet = here.join("fleet.ncl");
    let text = std::fs::read_to_string(&fleet).unwrap();
    let body = entry
        .strip_suffix("},")
        .unwrap_or_else(|| panic!("the guide's fleet entry does not end in `}},`: {entry}"));
    let entry = format!(
        "{body}, remote = {{ mesh = \"{}\", state_dir = \"{}\", root = \"{}\" }} }},",
        env!("CARGO_BIN_EXE_mesh"),
        node.state().display(),
        node.root().display()
    );
    let at = text
        .find("nodes = {\n")
        .unwrap_or_else(|| panic!("no `nodes = {{` in fleet.ncl:\n{text}"));
    let end = at + "nodes = {\n".len();
    let text = format!(
        "{}ssh_config = \"{}\",\n  {}    {entry}\n{}",
        &text[..at],
        lab.dir.path().join("ssh_config").display(),
        &text[at..end],
        &text[end..]
    );
    std::fs::write(&fleet, text).unwrap();
}
