//! `sudo cargo bench --bench images`: issue 37's table, every ratio measured in the same run.
//!
//! Sixty containers whose images changed, each image a registry's (a Distribution registry the
//! bench starts, `docker-registry`, on 127.0.0.1): the busybox root with a file of its own per
//! app and version, so no two images share a layer and every fetch moves its bytes.
//!
//! - **Fetch and switch**: `mesh switch` from the sixty at version 1 to the sixty at version 2
//!   (each pinned by digest; none of the version 2 images on the engine: the switch fetches
//!   them, then recreates the containers), against what an operator of compose runs:
//!   `docker-compose pull && docker-compose up -d`, the same sixty images by tag, from version 1
//!   to version 2, on the same engine and registry. Both stop with a 1 s timeout.
//! - **Staged**: `mesh switch --stage` back to version 1 (its images removed from the engine
//!   first: the stage fetches them), then the `mesh switch` to it, timed — what the services
//!   notice — against the switch that fetched.
//!
//! Needs root, a Docker engine, `docker-registry` and `docker-compose` (Debian's packages of
//! those names). Everything it creates carries its prefix and is removed at the end.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const N: usize = 60;

fn run(program: &str, args: &[&str], dir: Option<&Path>) -> String {
    let mut c = Command::new(program);
    c.args(args);
    if let Some(d) = dir {
        c.current_dir(d);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn docker(args: &[&str]) -> String {
    run("docker", args, None)
}

/// The registry, stopped when dropped.
struct Registry {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.path().join("storage").display()
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry (Debian's package) runs");
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes app `i`'s image at `version` (busybox and a file of its own), pushes it as
/// `REPO:VERSION`, removes it from the engine; its digest.
fn pushed(repo: &str, i: usize, version: u32) -> String {
    let reference = format!("{repo}:{version}");
    common::import_busybox_with(&reference, Some(&format!("app {i} version {version}\n")));
    docker(&["push", &reference]);
    let repo_digest = docker(&[
        "image",
        "inspect",
        "--format",
        "{{index .RepoDigests 0}}",
        &reference,
    ]);
    docker(&["rmi", &reference]);
    repo_digest.split_once('@').unwrap().1.to_owned()
}

/// Removes every image of the registry's repositories from the engine.
fn remove_images(host: &str) {
    let out = docker(&[
        "images",
        "--digests",
        "--no-trunc",
        "--format",
        "{{.Repository}} {{.Tag}} {{.Digest}} {{.ID}}",
    ]);
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [repo, _, _, id] = words[..] else {
            continue;
        };
        if repo.starts_with(&format!("{host}/")) {
            let _ = Command::new("docker").args(["rmi", "-f", id]).output();
        }
    }
}

/// Removes what the bench made, also when it panics.
struct Cleanup {
    prefix: String,
    host: String,
    compose: std::path::PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("docker-compose")
            .args(["-p", &self.prefix, "down", "-t", "1"])
            .current_dir(&self.compose)
            .output();
        if let Ok(out) = Command::new("docker")
            .args(["ps", "-aq", "--filter", &format!("name={}", self.prefix)])
            .output()
        {
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("docker").args(["rm", "-f", id]).output();
            }
        }
        remove_images(&self.host);
    }
}

fn compose_file(dir: &Path, repos: &[String], version: u32) {
    let mut text = String::from("version: \"2.4\"\nservices:\n");
    for (i, repo) in repos.iter().enumerate() {
        text.push_str(&format!(
            "  app{i}:\n    image: {repo}:{version}\n    command: [\"/bin/busybox\", \"sleep\", \"100000\"]\n    stop_grace_period: 1s\n"
        ));
    }
    std::fs::write(dir.join("docker-compose.yml"), text).unwrap();
}

fn declaration(
    dir: &Path,
    prefix: &str,
    repos: &[String],
    digests: &[String],
) -> std::path::PathBuf {
    let modules: String = repos
        .iter()
        .zip(digests)
        .enumerate()
        .map(|(i, (repo, digest))| {
            format!(
                "{{ name = \"app{i}\", config = fun s => {{ containers = [{{ name = \"{prefix}-m{i}\", image = \"{repo}@{digest}\", command = [\"/bin/busybox\", \"sleep\", \"100000\"], stop_timeout = 1 }}] }} }},\n"
            )
        })
        .collect();
    common::container_node(dir, &modules)
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn main() {
    if !rustix::process::geteuid().is_root() || !common::docker_here() {
        println!("this bench needs root and a Docker engine");
        return;
    }
    let registry = Registry::start();
    let host = format!("127.0.0.1:{}", registry.port);
    let prefix = format!("meshimg{}", std::process::id());
    let compose = tempfile::tempdir().unwrap();
    let _cleanup = Cleanup {
        prefix: prefix.clone(),
        host: host.clone(),
        compose: compose.path().to_owned(),
    };
    let repos: Vec<String> = (0..N).map(|i| format!("{host}/{prefix}/app{i}")).collect();
    let apps: Vec<usize> = (0..N).collect();
    let digests = std::sync::Mutex::new(vec![(String::new(), String::new()); N]);
    common::at_a_time(8, &apps, |&i| {
        let one = pushed(&repos[i], i, 1);
        let two = pushed(&repos[i], i, 2);
        digests.lock().unwrap()[i] = (one, two);
    });
    let digests = digests.into_inner().unwrap();
    let v1: Vec<String> = digests.iter().map(|d| d.0.clone()).collect();
    let v2: Vec<String> = digests.iter().map(|d| d.1.clone()).collect();

    // Compose: version 1 up, then pull and up version 2.
    compose_file(compose.path(), &repos, 1);
    let dc = |args: &[&str]| {
        let mut all = vec!["-p", prefix.as_str()];
        all.extend(args);
        run("docker-compose", &all, Some(compose.path()));
    };
    dc(&["up", "-d"]);
    compose_file(compose.path(), &repos, 2);
    let t = Instant::now();
    dc(&["pull", "-q"]);
    dc(&["up", "-d"]);
    let compose_time = t.elapsed();
    dc(&["down", "-t", "1"]);
    remove_images(&host);

    // The mesh: version 1 in force, then the switch that fetches version 2.
    let dir = tempfile::tempdir().unwrap();
    let ns = common::Netns::add(format!("{prefix}-ns"));
    let state = dir.path().join("state");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let decl_dir = |name: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let one = declaration(&decl_dir("v1"), &prefix, &repos, &v1);
    let two = declaration(&decl_dir("v2"), &prefix, &repos, &v2);
    let mesh = |args: &[&str]| {
        let t = Instant::now();
        common::mesh(&state, &root, Some(&ns.0), args);
        t.elapsed()
    };
    mesh(&["switch", one.to_str().unwrap()]);
    let fetching = mesh(&["switch", two.to_str().unwrap()]);

    // Staged: version 1's images gone from the engine, staged, then the switch to it.
    for (repo, digest) in repos.iter().zip(&v1) {
        let _ = Command::new("docker")
            .args(["rmi", "-f", &format!("{repo}@{digest}")])
            .output();
    }
    let stage = mesh(&["switch", "--stage", one.to_str().unwrap()]);
    let staged = mesh(&["switch", one.to_str().unwrap()]);

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("\nsixty containers whose images changed, on {cores} cores (one run each)\n");
    println!(
        "{:<46} {:>8}   {:<40} {:>8}   {:>6}",
        "", "mesh", "against", "", "ratio"
    );
    for (what, mesh_time, reference, against) in [
        (
            "switch, fetching 60 images",
            fetching,
            "docker-compose pull && up -d",
            compose_time,
        ),
        (
            "switch after --stage (what services notice)",
            staged,
            "mesh switch, fetching",
            fetching,
        ),
    ] {
        println!(
            "{what:<46} {:>8}   {reference:<40} {:>8}   {:>5.2}x",
            seconds(mesh_time),
            seconds(against),
            mesh_time.as_secs_f64() / against.as_secs_f64()
        );
    }
    println!(
        "\n(the stage itself, fetching version 1's sixty images again: {})",
        seconds(stage)
    );
}
