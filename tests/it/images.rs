//! Images from a registry, through the real Docker engine and a real Distribution registry
//! (Debian's `docker-registry`) each test starts on 127.0.0.1, on a port of its own: an image
//! the test makes (`docker import` of the static busybox), pushes, then removes from the engine.
//! A switch whose container names it by digest fetches it before anything changes; a registry
//! that is down, a digest that does not match, credentials missing or denied refuse the switch
//! with nothing changed. Every container and image a test makes is removed afterwards, also
//! when it fails; the registries stop with their guards.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::containers::{docker, docker_here, take_turn};
use crate::node_fixture::{Fixture, Snapshot};
use crate::registry_lab::REGISTRY;
use crate::rejections::{assert_says, module, node, rejected, PORTS};
use crate::support::{have_root_tools, run, Ran};

/// A Distribution registry on 127.0.0.1:`port`, its storage in a temp folder that outlives a
/// restart; optionally with basic auth (`htpasswd`). Stopped when dropped.
pub(crate) struct Registry {
    dir: tempfile::TempDir,
    port: u16,
    auth: bool,
    child: Option<Child>,
}

impl Registry {
    pub(crate) fn start(auth: Option<(&str, &str)>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // A port of its own (the pull tests' registries are in namespaces of their own).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if let Some((user, password)) = auth {
            let out = Command::new("htpasswd")
                .args(["-Bbn", user, password])
                .output()
                .expect("htpasswd (apache2-utils) runs");
            assert!(out.status.success(), "htpasswd");
            std::fs::write(dir.path().join("htpasswd"), out.stdout).unwrap();
        }
        let mut r = Self {
            dir,
            port,
            auth: auth.is_some(),
            child: None,
        };
        r.write_config();
        r.up();
        r
    }

    fn write_config(&self) {
        let auth = if self.auth {
            format!(
                "auth:\n  htpasswd:\n    realm: mesh-test\n    path: {}\n",
                self.dir.path().join("htpasswd").display()
            )
        } else {
            String::new()
        };
        std::fs::write(
            self.dir.path().join("config.yml"),
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n{auth}http:\n  addr: 127.0.0.1:{}\n",
                self.dir.path().join("storage").display(),
                self.port
            ),
        )
        .unwrap();
    }

    fn up(&mut self) {
        let child = Command::new(REGISTRY)
            .arg("serve")
            .arg(self.dir.path().join("config.yml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("registry.log")).unwrap())
            .spawn()
            .expect("the registry starts");
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            // 200 without auth, 401 with: either way it answers.
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the registry does not answer: {}",
            std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
        );
    }

    pub(crate) fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The same storage served with basic auth from now on.
    fn with_auth(&mut self, user: &str, password: &str) {
        self.down();
        let out = Command::new("htpasswd")
            .args(["-Bbn", user, password])
            .output()
            .expect("htpasswd (apache2-utils) runs");
        std::fs::write(self.dir.path().join("htpasswd"), out.stdout).unwrap();
        self.auth = true;
        self.write_config();
        self.up();
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.down();
    }
}

/// A registry's address that goes away mid-fetch: a TCP relay on 127.0.0.1 to the registry
/// that, once `cut_after` bytes of answers have passed, closes every connection and stops
/// listening (as a registry that stops, or a link that drops, looks to the engine) — or, made
/// with [`Relay::stalling`], stops sending and keeps every connection open (a link that goes
/// quiet: nothing tells the engine it is gone).
struct Relay {
    port: u16,
    gone: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Answers stopped with the connections kept open.
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    fn start(port: u16, to: u16, cut_after: Option<u64>) -> Self {
        Self::between(port, to, cut_after, false)
    }

    /// A relay to `to` that stops sending answers once `after` bytes of them passed, every
    /// connection left open until it is stopped.
    fn stalling(to: u16, after: u64) -> Self {
        Self::between(0, to, Some(after), true)
    }

    fn between(port: u16, to: u16, cut_after: Option<u64>, hold: bool) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let gone = Arc::new(AtomicBool::new(false));
        let stalled = Arc::new(AtomicBool::new(false));
        let passed = Arc::new(AtomicU64::new(0));
        let flag = gone.clone();
        let quiet = stalled.clone();
        let thread = std::thread::spawn(move || {
            let mut open: Vec<std::net::TcpStream> = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let Ok(upstream) = std::net::TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                open.push(client.try_clone().unwrap());
                open.push(upstream.try_clone().unwrap());
                let (mut c_in, mut u_out) =
                    (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_in, &mut u_out);
                    let _ = u_out.shutdown(std::net::Shutdown::Write);
                });
                let (mut u_in, mut c_out) = (upstream, client);
                let (passed, flag, quiet) = (passed.clone(), flag.clone(), quiet.clone());
                std::thread::spawn(move || {
                    use std::io::Read;
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n) = u_in.read(&mut buf) {
                        if quiet.load(Ordering::SeqCst) {
                            break;
                        }
                        if n == 0 || c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        let total = passed.fetch_add(n as u64, Ordering::SeqCst) + n as u64;
                        if cut_after.is_some_and(|cut| total >= cut) {
                            if hold {
                                quiet.store(true, Ordering::SeqCst);
                            } else {
                                flag.store(true, Ordering::SeqCst);
                            }
                            break;
                        }
                    }
                    // Quiet: the connection stays open, nothing more sent, until the relay
                    // stops.
                    while quiet.load(Ordering::SeqCst) && !flag.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    let _ = c_out.shutdown(std::net::Shutdown::Both);
                });
            }
            // Gone: every connection closed, the listener dropped (connections refused).
            for s in open {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        });
        Self {
            port,
            gone,
            stalled,
            thread: Some(thread),
        }
    }

    fn is_gone(&self) -> bool {
        self.gone.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn is_stalled(&self) -> bool {
        self.stalled.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn stop(&mut self) {
        self.gone.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a test made on the engine: containers named `PREFIX…`, images of the registries it
/// pushed to. All of it is removed when dropped.
pub(crate) struct Made {
    pub(crate) prefix: String,
    hosts: Vec<String>,
}

impl Made {
    pub(crate) fn new(tag: &str) -> Self {
        Self {
            prefix: format!("meshtest{}{tag}", std::process::id()),
            hosts: Vec::new(),
        }
    }

    /// Makes an image of the static busybox (and `extra`, a file that makes it other bytes),
    /// pushes it to `registry` as `REPO:TAG`, removes it from the engine, and returns its
    /// repository and digest.
    pub(crate) fn pushed(
        &mut self,
        registry: &Registry,
        repo: &str,
        tag: &str,
        extra: &str,
    ) -> (String, String) {
        self.hosts.push(registry.host());
        let repository = format!("{}/{}/{repo}", registry.host(), self.prefix);
        let reference = format!("{repository}:{tag}");
        crate::support::import_busybox(&reference, Some(("extra", extra)));
        docker(&["push", &reference]);
        let repo_digest = docker(&[
            "image",
            "inspect",
            "--format",
            "{{index .RepoDigests 0}}",
            &reference,
        ]);
        let digest = repo_digest
            .split_once('@')
            .map(|(_, d)| d.to_owned())
            .expect("a repo digest after the push");
        self.remove_images(&registry.host());
        assert!(!has_image(&format!("{repository}@{digest}")));
        (repository, digest)
    }

    /// Removes every image of `host`'s repositories from the engine.
    fn remove_images(&self, host: &str) {
        let Ok(out) = Command::new("docker")
            .args([
                "images",
                "--digests",
                "--no-trunc",
                "--format",
                "{{.Repository}} {{.Tag}} {{.Digest}} {{.ID}}",
            ])
            .output()
        else {
            return;
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let [repo, tag, digest, id] = words[..] else {
                continue;
            };
            if !repo.starts_with(&format!("{host}/")) {
                continue;
            }
            for r in [
                format!("{repo}:{tag}"),
                format!("{repo}@{digest}"),
                id.to_owned(),
            ] {
                let _ = Command::new("docker").args(["rmi", "-f", &r]).output();
            }
        }
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        if let Ok(names) = Command::new("docker")
            .args(["ps", "-aq", "--filter", &format!("name={}", self.prefix)])
            .output()
        {
            for id in String::from_utf8_lossy(&names.stdout).split_whitespace() {
                let _ = Command::new("docker").args(["rm", "-f", id]).output();
            }
        }
        for host in &self.hosts {
            self.remove_images(host);
        }
    }
}

pub(crate) fn has_image(reference: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", reference])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// (running, image id) of the container `name`, if there is one.
pub(crate) fn container(name: &str) -> Option<(bool, String)> {
    let out = Command::new("docker")
        .args(["inspect", "-f", "{{.State.Running}} {{.Image}}", name])
        .output()
        .unwrap();
    out.status.success().then(|| {
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let (running, image) = text.split_once(' ').unwrap_or_default();
        (running == "true", image.to_owned())
    })
}

/// Whether root, docker, the registry and (for the credentials) htpasswd are here; in CI
/// their absence is a failure.
pub(crate) fn lab_here(htpasswd: bool) -> bool {
    let mut tools = vec!["docker", "tar", "docker-registry"];
    if htpasswd {
        tools.push("htpasswd");
    }
    have_root_tools(&tools) && docker_here()
}

/// A node with the file `/etc/motd` and one container per `(name, image)`, each sleeping.
fn declaration(motd: &str, containers: &[(&str, &str)]) -> String {
    let list: Vec<String> = containers
        .iter()
        .map(|(name, image)| {
            format!(
                r#"{{ name = "{name}", image = "{image}", command = ["/bin/busybox", "sleep", "1000"], stop_timeout = 0 }}"#
            )
        })
        .collect();
    format!(
        r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "n1",
  settings = {{
    ports = {{ store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820 }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.5" }},
  }},
  modules = [
    {{ name = "motd", config = fun s => {{ files = [{{ path = "/etc/motd", content = "{motd}" }}] }} }},
    {{ name = "app", config = fun s => {{ containers = [{}] }} }},
  ],
}}
"#,
        list.join(", ")
    )
}

/// `mesh ARGS` on the fixture's node, with `DOCKER_CONFIG` at `config` (a folder that may hold
/// a `config.json`): never the machine's own.
fn mesh_with(f: &Fixture, config: &Path, args: &[&str]) -> Ran {
    let mut c = f.command(args);
    c.env("DOCKER_CONFIG", config);
    run(c)
}

/// The generations the node has (none before its first switch).
fn generations(f: &Fixture) -> usize {
    let ran = f.mesh(&["generations", "--json"]);
    serde_json::from_str::<serde_json::Value>(&ran.stdout)
        .ok()
        .and_then(|v| v["generations"].as_array().map(Vec::len))
        .unwrap_or(0)
}

/// What a refused switch must leave: the files as they were, no container, no generation.
fn nothing_changed(f: &Fixture, before: &Snapshot, names: &[&str], context: &str) {
    assert_eq!(&f.snapshot(), before, "{context}: the files changed");
    for name in names {
        assert_eq!(container(name), None, "{context}: container {name} exists");
    }
    assert_eq!(generations(f), 0, "{context}: a generation was committed");
}

/// Standard base64, as a docker config's `auth` holds `USER:PASSWORD`.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The words every path (a switch's image fetch, push, pull, prune, images lock) says a
/// registry's refusal with, up to the registry's own answer: the credentials sent and denied
/// (`had`), or none in the docker config.
pub(crate) fn denial(host: &str, had: bool) -> String {
    if had {
        format!("the registry {host} denied the docker config's credentials: ")
    } else {
        format!(
            "the registry {host} denied access and the docker config has no credentials for it \
             (docker login {host}, or DOCKER_CONFIG): "
        )
    }
}

/// What the words say was tried, after the registry's answer: no docker config at `config`,
/// or the user `ci` from it.
pub(crate) fn tried(host: &str, config: &Path, had: bool) -> String {
    let file = config.join("config.json");
    if had {
        format!(
            "; credentials tried: the user ci for {host} from {}",
            file.display()
        )
    } else {
        format!(
            "; credentials tried: none (there is no docker config at {}",
            file.display()
        )
    }
}

/// A docker config (its folder) whose `auths` give `user:password` for `host`.
pub(crate) fn config_with(host: &str, user: &str, password: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let auth = base64(format!("{user}:{password}").as_bytes());
    std::fs::write(
        dir.path().join("config.json"),
        serde_json::json!({ "auths": { host: { "auth": auth } } }).to_string(),
    )
    .unwrap();
    dir
}

fn empty_config() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// A container whose image is pinned by digest, absent from the engine, is fetched by the
/// switch before anything changes (a dry run only says it would be), checked against its
/// digest and run; the digest is fetched, not the tag, so a tag moved to other bytes at the
/// registry changes nothing; an image the engine has by its digest is not fetched again.
#[test]
fn a_pinned_image_is_fetched_by_the_switch_and_runs() {
    if !lab_here(false) {
        return;
    }
    let _turn = take_turn();
    let registry = Registry::start(None);
    let mut made = Made::new("if");
    let (repository, digest) = made.pushed(&registry, "busy", "1", "one");
    // The tag moves on to other bytes after the declaration pinned the first.
    let (_, moved) = made.pushed(&registry, "busy", "1", "two");
    assert_ne!(digest, moved);
    let image = format!("{repository}:1@{digest}");
    let name = format!("{}-app", made.prefix);
    let f = Fixture::new();
    let config = empty_config();
    f.write_decl("n.ncl", &declaration("one\\n", &[(&name, &image)]));
    let decl = f.decl("n.ncl");
    let decl = decl.to_str().unwrap();

    let built = mesh_with(&f, config.path(), &["build", decl, "--json"]);
    assert_eq!(built.code, 0, "{}", built.stderr);
    let v: serde_json::Value = serde_json::from_str(&built.stdout).unwrap();
    assert_eq!(v["unpinned"], serde_json::json!([]), "{}", built.stdout);
    assert!(!built.stderr.contains("not pinned"), "{}", built.stderr);

    let before = f.snapshot();
    let dry = mesh_with(&f, config.path(), &["switch", decl, "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout.contains(&format!("fetch    image {image}"))
            && dry.stdout.contains("would be fetched"),
        "{}",
        dry.stdout
    );
    let dry_json = mesh_with(&f, config.path(), &["switch", decl, "--dry-run", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&dry_json.stdout).unwrap();
    assert_eq!(
        v["images"][0]["image"],
        image.as_str(),
        "{}",
        dry_json.stdout
    );
    assert_eq!(v["images"][0]["digest"], digest.as_str());
    assert!(
        !has_image(&format!("{repository}@{digest}")),
        "a dry run fetched"
    );
    assert_eq!(f.snapshot(), before);

    let ran = mesh_with(&f, config.path(), &["switch", decl, "--json"]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let v: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(v["images"][0]["image"], image.as_str(), "{}", ran.stdout);
    assert!(
        ran.stderr
            .contains(&format!("fetched image {image}, digest checked")),
        "{}",
        ran.stderr
    );
    let pinned_id = docker(&[
        "image",
        "inspect",
        "--format",
        "{{.Id}}",
        &format!("{repository}@{digest}"),
    ]);
    let (running, id) = container(&name).expect("the container was created");
    assert!(running, "the container runs");
    assert_eq!(id, pinned_id, "the container runs the pinned bytes");
    assert!(
        !has_image(&format!("{repository}:1")),
        "the tag was not fetched"
    );
    assert_eq!(f.read("/etc/motd").as_deref(), Some("one\n"));

    // Another generation with the same image: the engine has it by its digest.
    docker(&["rm", "-f", &name]);
    f.write_decl("n.ncl", &declaration("two\\n", &[(&name, &image)]));
    let again = mesh_with(&f, config.path(), &["switch", decl, "--json"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let v: serde_json::Value = serde_json::from_str(&again.stdout).unwrap();
    assert!(v.get("images").is_none(), "fetched again: {}", again.stdout);
    assert!(!again.stderr.contains("fetched image"), "{}", again.stderr);
    assert_eq!(container(&name).map(|c| c.0), Some(true));
}

/// A registry that does not answer refuses the switch (exit 3), naming the image and the
/// registry, with nothing changed: no file, no container, no generation. With two images,
/// one fetched and the other's registry down, the fetched one stays on the engine and nothing
/// else changes. The next switch, the registry back, fetches only what is still missing and
/// finishes.
#[test]
fn a_registry_down_refuses_the_switch_and_the_next_one_finishes() {
    if !lab_here(false) {
        return;
    }
    let _turn = take_turn();
    let up = Registry::start(None);
    let mut down = Registry::start(None);
    let mut made = Made::new("iu");
    let (repo_a, digest_a) = made.pushed(&up, "a", "1", "a");
    let (repo_b, digest_b) = made.pushed(&down, "b", "1", "b");
    down.down();
    let image_a = format!("{repo_a}@{digest_a}");
    let image_b = format!("{repo_b}:1@{digest_b}");
    let (name_a, name_b) = (format!("{}-a", made.prefix), format!("{}-b", made.prefix));
    let f = Fixture::new();
    let config = empty_config();
    let before = f.snapshot();

    // Only the image whose registry is down.
    f.write_decl("one.ncl", &declaration("one\\n", &[(&name_b, &image_b)]));
    let one = f.decl("one.ncl");
    let ran = mesh_with(&f, config.path(), &["switch", one.to_str().unwrap()]);
    assert_eq!(ran.code, 3, "{}{}", ran.stdout, ran.stderr);
    assert_says(
        &ran,
        &[
            &format!("image {image_b}"),
            &format!("the registry {} is not reachable", down.host()),
            "nothing was changed",
        ],
    );
    nothing_changed(&f, &before, &[&name_b], "registry down");

    // Both: the one whose registry answers is fetched, the switch is refused all the same.
    f.write_decl(
        "two.ncl",
        &declaration("two\\n", &[(&name_a, &image_a), (&name_b, &image_b)]),
    );
    let two = f.decl("two.ncl");
    let two = two.to_str().unwrap();
    let ran = mesh_with(&f, config.path(), &["switch", two]);
    assert_eq!(ran.code, 3, "{}{}", ran.stdout, ran.stderr);
    assert_says(
        &ran,
        &[
            &format!("image {image_b}"),
            "not reachable",
            &format!("kept on the engine for the next switch: {image_a}"),
        ],
    );
    assert!(
        has_image(&image_a),
        "the image fetched before the failure stays"
    );
    nothing_changed(
        &f,
        &before,
        &[&name_a, &name_b],
        "one of two registries down",
    );

    down.up();
    let ran = mesh_with(&f, config.path(), &["switch", two, "--json"]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let v: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    let fetched: Vec<&str> = v["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["image"].as_str().unwrap())
        .collect();
    assert_eq!(fetched, [image_b.as_str()], "{}", ran.stdout);
    assert_eq!(container(&name_a).map(|c| c.0), Some(true));
    assert_eq!(container(&name_b).map(|c| c.0), Some(true));
    assert_eq!(f.read("/etc/motd").as_deref(), Some("two\n"));
}

/// A registry that goes away in the middle of an image's layer (the engine has part of it,
/// retries, and gives up) refuses the switch (exit 3) naming the image and the registry, with
/// nothing changed: no file, no container, no generation, the image not on the engine. The next
/// switch, the registry back, fetches it and finishes.
#[test]
fn a_registry_gone_mid_fetch_refuses_and_the_next_switch_finishes() {
    if !lab_here(false) {
        return;
    }
    let _turn = take_turn();
    let registry = Registry::start(None);
    let mut made = Made::new("im");
    // A layer of 16 MiB that does not compress, cut after 4 MiB of it.
    let (repository, digest) = made.pushed(&registry, "big", "1", &noise());
    let mut relay = Relay::start(0, registry.port, Some(4 * 1024 * 1024));
    let relayed = format!("127.0.0.1:{}", relay.port);
    made.hosts.push(relayed.clone());
    let image = format!(
        "{}@{digest}",
        repository.replacen(&registry.host(), &relayed, 1)
    );
    let name = format!("{}-app", made.prefix);
    let f = Fixture::new();
    let config = empty_config();
    f.write_decl("n.ncl", &declaration("one\\n", &[(&name, &image)]));
    let decl = f.decl("n.ncl");
    let decl = decl.to_str().unwrap();
    let before = f.snapshot();

    let ran = mesh_with(&f, config.path(), &["switch", decl]);
    assert!(relay.is_gone(), "the registry went away mid-fetch");
    assert_eq!(ran.code, 3, "{}{}", ran.stdout, ran.stderr);
    assert_says(
        &ran,
        &[
            &format!("image {image}"),
            &format!("the registry {relayed} is not reachable"),
            "nothing was changed",
        ],
    );
    nothing_changed(&f, &before, &[&name], "registry gone mid-fetch");
    assert!(!has_image(&image), "a part of an image is not an image");

    let port = relay.port;
    relay.stop();
    let _back = Relay::start(port, registry.port, None);
    let ran = mesh_with(&f, config.path(), &["switch", decl]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert_eq!(container(&name).map(|c| c.0), Some(true));
    assert_eq!(f.read("/etc/motd").as_deref(), Some("one\n"));
}

/// 16 MiB of hex that does not compress: an image layer big enough to be cut in the middle.
fn noise() -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..16 * 1024 * 1024 / 16)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("{x:016x}")
        })
        .collect()
}

/// Issue 48: a registry that goes quiet in the middle of a layer (the connection open,
/// nothing more sent: the engine would wait for ever) is given up once no byte came for the
/// I/O timeout — at the default, 30 s, well within 45 — refusing the switch (exit 3) with the
/// image named and nothing changed: no file, no container, no generation, no image.
#[test]
fn a_registry_that_stops_sending_is_given_up_at_the_io_timeout() {
    if !lab_here(false) {
        return;
    }
    let _turn = take_turn();
    let registry = Registry::start(None);
    let mut made = Made::new("is");
    let (repository, digest) = made.pushed(&registry, "big", "1", &noise());
    let mut relay = Relay::stalling(registry.port, 4 * 1024 * 1024);
    let relayed = format!("127.0.0.1:{}", relay.port);
    made.hosts.push(relayed.clone());
    let image = format!(
        "{}@{digest}",
        repository.replacen(&registry.host(), &relayed, 1)
    );
    let name = format!("{}-app", made.prefix);
    let f = Fixture::new();
    let config = empty_config();
    f.write_decl("n.ncl", &declaration("one\\n", &[(&name, &image)]));
    let decl = f.decl("n.ncl");
    let before = f.snapshot();

    let mut c = f.command(&["switch", decl.to_str().unwrap()]);
    c.env("DOCKER_CONFIG", config.path())
        .env_remove("MESH_IO_TIMEOUT");
    let started = Instant::now();
    let ran = run(c);
    let took = started.elapsed();
    assert!(relay.is_stalled(), "the registry went quiet mid-fetch");
    assert_eq!(ran.code, 3, "{}{}", ran.stdout, ran.stderr);
    assert_says(
        &ran,
        &[
            &format!("image {image}"),
            &format!("the registry {relayed} is not reachable"),
            "no byte of the image came for 30 s, and the fetch was given up",
            "nothing was changed",
        ],
    );
    assert!(
        took >= Duration::from_secs(30) && took < Duration::from_secs(45),
        "given up after {took:?}, not at the I/O timeout"
    );
    nothing_changed(&f, &before, &[&name], "registry quiet mid-fetch");
    assert!(!has_image(&image), "a part of an image is not an image");
    relay.stop();
}

/// A digest the registry does not have refuses the switch (exit 2) naming both the pinned
/// digest and the one the declared tag names at the registry; nothing changed, nothing
/// fetched.
#[test]
fn a_digest_that_does_not_match_is_refused_naming_both() {
    if !lab_here(false) {
        return;
    }
    let _turn = take_turn();
    let registry = Registry::start(None);
    let mut made = Made::new("id");
    let (repository, digest) = made.pushed(&registry, "busy", "1", "one");
    let wrong = format!("sha256:{}", "0".repeat(64));
    let image = format!("{repository}:1@{wrong}");
    let name = format!("{}-app", made.prefix);
    let f = Fixture::new();
    let config = empty_config();
    f.write_decl("n.ncl", &declaration("one\\n", &[(&name, &image)]));
    let before = f.snapshot();
    let ran = mesh_with(
        &f,
        config.path(),
        &["switch", f.decl("n.ncl").to_str().unwrap()],
    );
    assert_eq!(ran.code, 2, "{}{}", ran.stdout, ran.stderr);
    assert_says(
        &ran,
        &[
            &format!("image {image}"),
            "the digest does not match",
            &format!("the declaration pins {wrong}"),
            &format!("{repository}:1 at {digest}"),
            "nothing was changed",
        ],
    );
    nothing_changed(&f, &before, &[&name], "wrong digest");
    assert!(!has_image(&format!("{repository}@{digest}")));
}

/// A registry with basic auth: without credentials in the docker config the fetch is denied
/// (exit 2, saying the config has none), with a wrong password denied (exit 2), each with
/// nothing changed; with the right ones in `auths` (the docker config `DOCKER_CONFIG` points
/// at, as `mesh push` reads it) the image is fetched and the container runs.
#[test]
fn credentials_come_from_the_docker_config() {
    if !lab_here(true) {
        return;
    }
    let _turn = take_turn();
    let mut registry = Registry::start(None);
    let mut made = Made::new("ic");
    let (repository, digest) = made.pushed(&registry, "busy", "1", "one");
    registry.with_auth("ci", "s3cret");
    let image = format!("{repository}@{digest}");
    let name = format!("{}-app", made.prefix);
    let f = Fixture::new();
    f.write_decl("n.ncl", &declaration("one\\n", &[(&name, &image)]));
    let decl = f.decl("n.ncl");
    let decl = decl.to_str().unwrap();
    let before = f.snapshot();
    let host = registry.host();

    let none = empty_config();
    let ran = mesh_with(&f, none.path(), &["switch", decl]);
    assert_eq!(ran.code, 2, "{}{}", ran.stdout, ran.stderr);
    assert_says(
        &ran,
        &[
            &format!("image {image}: {}", denial(&host, false)),
            &tried(&host, none.path(), false),
            "nothing was changed",
        ],
    );
    nothing_changed(&f, &before, &[&name], "no credentials");

    let wrong = config_with(&host, "ci", "n0t-it");
    let ran = mesh_with(&f, wrong.path(), &["switch", decl]);
    assert_eq!(ran.code, 2, "{}{}", ran.stdout, ran.stderr);
    assert_says(
        &ran,
        &[
            &format!("image {image}: {}", denial(&host, true)),
            &tried(&host, wrong.path(), true),
        ],
    );
    assert!(!ran.stderr.contains("n0t-it"), "never the password");
    nothing_changed(&f, &before, &[&name], "wrong password");

    let right = config_with(&host, "ci", "s3cret");
    let ran = mesh_with(&f, right.path(), &["switch", decl]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert_eq!(container(&name).map(|c| c.0), Some(true));
    assert!(has_image(&image));
}

/// The mesh's own registry client (push, pull, prune) says which credentials it tried and
/// where it looked when a registry refuses them: that there was no docker config, or the user
/// it sent and the file it came from — never the password.
#[test]
fn a_refused_login_says_which_credentials_were_tried_and_where() {
    if !lab_here(true) {
        return;
    }
    let registry = Registry::start(Some(("ci", "s3cret")));
    let target = format!("{}/fleet/prod", registry.host());
    let f = Fixture::new();
    let prune = |config: &Path| {
        mesh_with(
            &f,
            config,
            &["prune", &target, "--insecure", "--dry-run", "--json"],
        )
    };
    let none = empty_config();
    let ran = prune(none.path());
    assert_eq!(ran.code, 2, "{}{}", ran.stdout, ran.stderr);
    assert_says(
        &ran,
        &[
            "credentials tried: none (there is no docker config at",
            &none.path().join("config.json").display().to_string(),
        ],
    );
    let wrong = tempfile::tempdir().unwrap();
    std::fs::write(
        wrong.path().join("config.json"),
        serde_json::json!({ "auths": { registry.host(): { "auth": base64(b"ci:wrong") } } })
            .to_string(),
    )
    .unwrap();
    let ran = prune(wrong.path());
    assert_eq!(ran.code, 2, "{}{}", ran.stdout, ran.stderr);
    assert_says(
        &ran,
        &[&format!(
            "credentials tried: the user ci for {} from {}",
            registry.host(),
            wrong.path().join("config.json").display()
        )],
    );
    assert!(
        !ran.stderr.contains("wrong"),
        "never the password: {}",
        ran.stderr
    );
}

/// Issue 48: `mesh push`, `mesh rollout` and `mesh pull` against a registry with basic auth
/// say a refusal in the words a switch fetching an image says it with, and exit as it does
/// (2, a refusal): no credentials in the docker config and a wrong password are two facts,
/// each naming what was tried and where it was looked for, never the password. Nothing is
/// published, nothing pulled.
#[test]
fn push_and_pull_are_denied_in_the_words_of_a_switch() {
    if !have_root_tools(&["docker-registry", "htpasswd", "ssh-keygen", "ip"]) {
        return;
    }
    let registry = Registry::start(Some(("ci", "s3cret")));
    let host = registry.host();
    let target = format!("{host}/fleet/prod");
    let f = Fixture::new();
    let fleet = fleet_file(&f);
    let fleet = fleet.to_str().unwrap();
    f.write_decl("n.ncl", &declaration("one\\n", &[]));
    let keys = tempfile::tempdir().unwrap();
    let key = crate::trust::keygen(keys.path(), "ci");
    let key = key.to_str().unwrap();
    let push = |config: &Path| {
        mesh_with(
            &f,
            config,
            &[
                "--fleet",
                fleet,
                "push",
                &target,
                "--insecure",
                "--sign",
                "--key",
                key,
            ],
        )
    };
    let rollout = |config: &Path| {
        mesh_with(
            &f,
            config,
            &[
                "--fleet",
                fleet,
                "rollout",
                &target,
                "--insecure",
                "--sign",
                "--key",
                key,
            ],
        )
    };
    let pull =
        |config: &Path| mesh_with(&f, config, &["pull", &target, "--node", "n1", "--insecure"]);
    let none = empty_config();
    let wrong = config_with(&host, "ci", "n0t-it");
    for (config, had) in [(none.path(), false), (wrong.path(), true)] {
        let words = denial(&host, had);
        let tried = tried(&host, config, had);
        let ran = push(config);
        assert_eq!(ran.code, 2, "push ({had}): {}{}", ran.stdout, ran.stderr);
        assert_says(&ran, &["not published: n1: ", &words, &tried]);
        assert!(
            ran.stdout.contains("n1") && ran.stdout.contains(&words),
            "the node's line says it too: {}",
            ran.stdout
        );
        let ran = rollout(config);
        assert_eq!(ran.code, 2, "rollout ({had}): {}{}", ran.stdout, ran.stderr);
        assert_says(
            &ran,
            &[
                "nothing rolled out: uploading n1's objects: ",
                &words,
                &tried,
            ],
        );
        let ran = pull(config);
        assert_eq!(ran.code, 2, "pull ({had}): {}{}", ran.stdout, ran.stderr);
        assert_says(
            &ran,
            &[&format!("refused from {target}:n1: "), &words, &tried],
        );
        for out in [&ran.stdout, &ran.stderr] {
            assert!(!out.contains("n0t-it"), "never the password: {out}");
        }
        assert_eq!(generations(&f), 0, "nothing was pulled ({had})");
    }
    // The right credentials publish: the words above were the registry's refusal, nothing else.
    let right = config_with(&host, "ci", "s3cret");
    let ran = push(right.path());
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
}

/// `mesh build` names the images not pinned by digest: a warning on stderr, and in `--json` a
/// list of container and image; a pinned one is not named.
#[test]
fn build_warns_about_images_not_pinned() {
    let state = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pinned = format!("reg.example/app:1@sha256:{}", "a".repeat(64));
    std::fs::write(
        dir.path().join("n.ncl"),
        declaration("x", &[("web", "reg.example/web:2"), ("app", &pinned)]),
    )
    .unwrap();
    let build = |json: bool| {
        let mut c = crate::support::mesh(state.path());
        c.current_dir(dir.path()).args(["build", "n.ncl"]);
        if json {
            c.arg("--json");
        }
        run(c)
    };
    let ran = build(true);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let v: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(
        v["unpinned"],
        serde_json::json!([{ "container": "web", "image": "reg.example/web:2" }])
    );
    let ran = build(false);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_says(
        &ran,
        &[
            "warning: 1 container image(s) not pinned by digest",
            "container web: reg.example/web:2",
        ],
    );
    assert!(!ran.stderr.contains("container app:"), "{}", ran.stderr);
}

/// A malformed digest is a rejection pointing at the image's value: exit 1, the container
/// named, the file and line.
#[test]
fn a_malformed_digest_is_rejected_at_its_value() {
    for (image, says) in [
        ("reg.example/app:1@sha256:abc", "64 lowercase hex digits"),
        ("reg.example/app@md5:00", "is not sha256:"),
        ("reg.example/App:1@sha256:", "64 lowercase hex digits"),
    ] {
        let c = format!(r#"containers = [{{ name = "app", image = "{image}" }}]"#);
        let ran = rejected(&node(PORTS, &module("app", &c)), None);
        assert_says(
            &ran,
            &[
                &format!("container app: image `{image}`"),
                says,
                "bad-node.ncl:9:",
            ],
        );
    }
}

/// A fleet file in the fixture's folder (the tree of its declarations, where the image lock
/// goes) with one node `n1` declared by `n.ncl`.
fn fleet_file(f: &Fixture) -> std::path::PathBuf {
    let file = f.dir.path().join("fleet.ncl");
    std::fs::write(
        &file,
        "let mesh = import \"mesh.ncl\" in\nmesh.fleet {\n  records = \"records\",\n  nodes = {\n    n1 = { declaration = \"n.ncl\", ssh = { destination = \"n1.invalid\" } },\n  },\n}\n",
    )
    .unwrap();
    file
}

/// The id `mesh build DECL --no-cache --json` prints, with the state directory `state`.
fn built_id(f: &Fixture, state: &Path, decl: &Path) -> String {
    let mut c = crate::support::mesh(state);
    c.env("MESH_ROOT", f.root())
        .env("DOCKER_CONFIG", f.dir.path().join("no-docker-config"))
        .args(["build", "--no-cache", "--json"])
        .arg(decl);
    let ran = run(c);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let v: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(v["unpinned"], serde_json::json!([]), "{}", ran.stdout);
    v["id"].as_str().unwrap().to_owned()
}

/// `mesh images lock` resolves a tag at the registry and writes its digest into images.lock
/// beside the fleet file; the build then pins the image by it — the id is the one of the
/// declaration pinned by hand, in another folder and state directory too — and keeps it when
/// the tag moves at the registry and when the registry is gone; `--locked` refuses an image in
/// neither, naming it; a new lock picks the tag's new digest (the id follows) and drops the
/// entry of an image no node names any more; `--check` says what the lock lacks without a
/// registry; the switch of the locked generation fetches the image by its digest.
#[test]
fn the_image_lock_pins_tags_offline_until_locked_again() {
    if !lab_here(false) {
        return;
    }
    let _turn = take_turn();
    let mut registry = Registry::start(None);
    let mut made = Made::new("il");
    let (repository, first) = made.pushed(&registry, "busy", "1", "one");
    let tagged = format!("{repository}:1");
    let name = format!("{}-app", made.prefix);
    let f = Fixture::new();
    let config = empty_config();
    let fleet = fleet_file(&f);
    let fleet = fleet.to_str().unwrap();
    f.write_decl("n.ncl", &declaration("one\\n", &[(&name, &tagged)]));
    let decl = f.decl("n.ncl");
    let decl_s = decl.to_str().unwrap();
    let lock_file = f.dir.path().join("images.lock");
    // The same node pinned by hand, in a folder of its own: what the lock must build to.
    let elsewhere = tempfile::tempdir().unwrap();
    let pinned_by_hand = |digest: &str| {
        let d = elsewhere.path().join(format!("n-{}.ncl", &digest[7..19]));
        std::fs::write(
            &d,
            declaration("one\\n", &[(&name, &format!("{tagged}@{digest}"))]),
        )
        .unwrap();
        built_id(&f, &f.state(), &d)
    };

    // No lock: --locked refuses, naming the container and its image; check says it lacks it.
    let refused = mesh_with(&f, config.path(), &["build", decl_s, "--locked"]);
    assert_eq!(refused.code, 2, "{}{}", refused.stdout, refused.stderr);
    assert_says(
        &refused,
        &[
            "--locked",
            "pinned neither in the declaration nor in the image lock",
            &format!("container {name}: {tagged}"),
        ],
    );
    let fleet_refused = mesh_with(
        &f,
        config.path(),
        &["--fleet", fleet, "fleet", "build", "--locked"],
    );
    assert_eq!(fleet_refused.code, 2, "{}", fleet_refused.stderr);
    assert_says(&fleet_refused, &[&format!("container n1/{name}: {tagged}")]);
    let check = mesh_with(
        &f,
        config.path(),
        &["--fleet", fleet, "images", "lock", "--check", "--json"],
    );
    assert_eq!(check.code, 2, "{}{}", check.stdout, check.stderr);
    let v: serde_json::Value = serde_json::from_str(&check.stdout).unwrap();
    assert_eq!(
        v["locks"][0]["missing"][0]["image"],
        tagged.as_str(),
        "{}",
        check.stdout
    );
    assert!(!lock_file.exists(), "--check wrote a lock");

    // Locked: the file holds the tag's digest, canonical; the build pins by it.
    let locked = mesh_with(
        &f,
        config.path(),
        &["--fleet", fleet, "images", "lock", "--insecure", "--json"],
    );
    assert_eq!(locked.code, 0, "{}{}", locked.stdout, locked.stderr);
    let v: serde_json::Value = serde_json::from_str(&locked.stdout).unwrap();
    let entry = &v["locks"][0];
    assert_eq!(
        entry["lock"],
        lock_file.to_str().unwrap(),
        "{}",
        locked.stdout
    );
    assert_eq!(entry["images"][0]["image"], tagged.as_str());
    assert_eq!(entry["images"][0]["digest"], first.as_str());
    assert_eq!(entry["images"][0]["was"], serde_json::Value::Null);
    assert_eq!(
        entry["images"][0]["containers"],
        serde_json::json!([format!("n1/{name}")])
    );
    assert_eq!(
        std::fs::read_to_string(&lock_file).unwrap(),
        format!(
            "{{\n  \"version\": 1,\n  \"images\": {{\n    \"{tagged}\": \"{first}\"\n  }}\n}}\n"
        )
    );
    let id_first = built_id(&f, &f.state(), &decl);
    assert_eq!(
        id_first,
        pinned_by_hand(&first),
        "the lock pins as the declaration would"
    );
    let ok = mesh_with(&f, config.path(), &["build", decl_s, "--locked"]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(!ok.stderr.contains("not pinned"), "{}", ok.stderr);
    let ok = mesh_with(
        &f,
        config.path(),
        &["--fleet", fleet, "fleet", "build", "--locked"],
    );
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(ok.stdout.contains(&id_first), "{}", ok.stdout);
    // The same declaration and lock in another folder, with another state directory.
    let copy = tempfile::tempdir().unwrap();
    std::fs::copy(&decl, copy.path().join("n.ncl")).unwrap();
    std::fs::copy(&lock_file, copy.path().join("images.lock")).unwrap();
    let other_state = tempfile::tempdir().unwrap();
    assert_eq!(
        built_id(&f, other_state.path(), &copy.path().join("n.ncl")),
        id_first
    );

    // The tag moves at the registry: the lock holds, with the registry up and gone.
    let (_, second) = made.pushed(&registry, "busy", "1", "two");
    assert_ne!(first, second);
    assert_eq!(built_id(&f, &f.state(), &decl), id_first);
    registry.down();
    assert_eq!(built_id(&f, &f.state(), &decl), id_first);
    let check = mesh_with(
        &f,
        config.path(),
        &["--fleet", fleet, "images", "lock", "--check"],
    );
    assert_eq!(check.code, 0, "{}{}", check.stdout, check.stderr);
    assert!(
        check
            .stdout
            .contains("1 of 1 image(s) named by a tag locked"),
        "{}",
        check.stdout
    );
    // A lock that cannot ask the registry writes nothing.
    let down = mesh_with(
        &f,
        config.path(),
        &["--fleet", fleet, "images", "lock", "--insecure"],
    );
    assert_eq!(down.code, 3, "{}{}", down.stdout, down.stderr);
    assert_says(&down, &[&format!("image {tagged}"), "no lock was written"]);
    assert!(std::fs::read_to_string(&lock_file)
        .unwrap()
        .contains(&first));

    // Locked again: the new digest, and the id follows.
    registry.up();
    let relocked = mesh_with(
        &f,
        config.path(),
        &["--fleet", fleet, "images", "lock", "--insecure"],
    );
    assert_eq!(relocked.code, 0, "{}{}", relocked.stdout, relocked.stderr);
    assert!(
        relocked
            .stdout
            .contains(&format!("locked  {tagged}  {second}  (was {first})")),
        "{}",
        relocked.stdout
    );
    let id_second = built_id(&f, &f.state(), &decl);
    assert_ne!(id_second, id_first);
    assert_eq!(id_second, pinned_by_hand(&second));

    // The switch of the locked generation fetches the image by its digest, not the tag.
    let ran = mesh_with(&f, config.path(), &["switch", decl_s, "--json"]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let v: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(
        v["images"][0]["image"],
        format!("{tagged}@{second}"),
        "{}",
        ran.stdout
    );
    assert_eq!(v["images"][0]["digest"], second.as_str());
    let pinned_id = docker(&[
        "image",
        "inspect",
        "--format",
        "{{.Id}}",
        &format!("{repository}@{second}"),
    ]);
    let (running, id) = container(&name).expect("the container was created");
    assert!(running);
    assert_eq!(id, pinned_id, "the container runs the locked bytes");
    assert!(!has_image(&tagged), "the tag was not fetched");

    // Another tag named instead: --check names it and the stale entry; a lock drops it.
    let (_, third) = made.pushed(&registry, "busy", "2", "three");
    let retagged = format!("{repository}:2");
    f.write_decl("n.ncl", &declaration("one\\n", &[(&name, &retagged)]));
    let check = mesh_with(
        &f,
        config.path(),
        &["--fleet", fleet, "images", "lock", "--check"],
    );
    assert_eq!(check.code, 2, "{}{}", check.stdout, check.stderr);
    assert!(
        check
            .stdout
            .contains(&format!("not locked  {retagged}  (n1/{name})"))
            && check.stdout.contains(&format!("stale       {tagged}")),
        "{}",
        check.stdout
    );
    assert_says(
        &check,
        &[&format!("{retagged} (in {})", lock_file.display())],
    );
    let relocked = mesh_with(
        &f,
        config.path(),
        &["--fleet", fleet, "images", "lock", "--insecure", "--json"],
    );
    assert_eq!(relocked.code, 0, "{}{}", relocked.stdout, relocked.stderr);
    let v: serde_json::Value = serde_json::from_str(&relocked.stdout).unwrap();
    assert_eq!(
        v["locks"][0]["dropped"],
        serde_json::json!([{ "image": tagged, "digest": second }])
    );
    assert_eq!(
        std::fs::read_to_string(&lock_file).unwrap(),
        format!(
            "{{\n  \"version\": 1,\n  \"images\": {{\n    \"{retagged}\": \"{third}\"\n  }}\n}}\n"
        )
    );
}

/// A lock file that does not read — a malformed digest, a pinned key, not JSON — refuses the
/// build and `--check` as bad input (exit 1) naming the file and the line, and is left as it
/// is; a fleet without a lock builds as before.
#[test]
fn a_bad_image_lock_is_named_by_file_and_line() {
    let state = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("n.ncl"),
        declaration("x", &[("web", "reg.example/web:2")]),
    )
    .unwrap();
    let mesh = |args: &[&str]| {
        let mut c = crate::support::mesh(state.path());
        c.current_dir(dir.path()).args(args);
        run(c)
    };
    let ran = mesh(&["build", "n.ncl", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let v: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    let unlocked = v["id"].clone();
    let lock = dir.path().join("images.lock");
    let good = format!("sha256:{}", "b".repeat(64));
    for (text, says) in [
        (
            "{\n  \"version\": 1,\n  \"images\": {\n    \"reg.example/web:2\": \"sha256:b\"\n  }\n}\n".to_owned(),
            ":4: image \"reg.example/web:2\": digest `sha256:b` is not sha256: followed by 64 lowercase hex digits",
        ),
        (
            format!("{{\n  \"version\": 1,\n  \"images\": {{\n    \"reg.example/web:2@{good}\": \"{good}\"\n  }}\n}}\n"),
            ":4: image `reg.example/web:2@",
        ),
        ("{ \"version\": 1,\n  \"images\": [".to_owned(), ":2: invalid type"),
    ] {
        std::fs::write(&lock, &text).unwrap();
        let ran = mesh(&["build", "n.ncl"]);
        assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
        assert_says(&ran, &[&format!("{}{says}", lock.display())]);
        let check = mesh(&["images", "lock", "--check", "n.ncl"]);
        assert_eq!(check.code, 1, "{}{}", check.stdout, check.stderr);
        assert_says(&check, &[&format!("{}{says}", lock.display())]);
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), text, "the lock changed");
    }
    // A lock that does not name the image changes nothing of the id.
    std::fs::write(
        &lock,
        format!("{{\n  \"version\": 1,\n  \"images\": {{\n    \"reg.example/other:1\": \"{good}\"\n  }}\n}}\n"),
    )
    .unwrap();
    let ran = mesh(&["build", "n.ncl", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let v: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(v["id"], unlocked);
}

/// `mesh images lock` asks a registry with basic auth with the docker config's credentials,
/// as `mesh push` finds them: none there is a refusal (exit 2) that says where it looked and
/// writes no lock; the right ones in `auths` lock the tag's digest.
#[test]
fn the_lock_asks_with_the_docker_configs_credentials() {
    if !lab_here(true) {
        return;
    }
    let _turn = take_turn();
    let mut registry = Registry::start(None);
    let mut made = Made::new("ia");
    let (repository, digest) = made.pushed(&registry, "busy", "1", "one");
    registry.with_auth("ci", "s3cret");
    let tagged = format!("{repository}:1");
    let f = Fixture::new();
    f.write_decl("n.ncl", &declaration("one\\n", &[("app", &tagged)]));
    let decl = f.decl("n.ncl");
    let decl = decl.to_str().unwrap();
    let lock_file = f.dir.path().join("images.lock");

    let none = empty_config();
    let ran = mesh_with(&f, none.path(), &["images", "lock", decl, "--insecure"]);
    assert_eq!(ran.code, 2, "{}{}", ran.stdout, ran.stderr);
    assert_says(
        &ran,
        &[
            &format!("image {tagged}: {}", denial(&registry.host(), false)),
            &tried(&registry.host(), none.path(), false),
            "no lock was written",
        ],
    );
    assert!(!lock_file.exists());

    let right = tempfile::tempdir().unwrap();
    std::fs::write(
        right.path().join("config.json"),
        serde_json::json!({ "auths": { registry.host(): { "auth": base64(b"ci:s3cret") } } })
            .to_string(),
    )
    .unwrap();
    let ran = mesh_with(&f, right.path(), &["images", "lock", decl, "--insecure"]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout
            .contains(&format!("locked  {tagged}  {digest}  (new)")),
        "{}",
        ran.stdout
    );
    assert!(std::fs::read_to_string(&lock_file)
        .unwrap()
        .contains(&format!("\"{tagged}\": \"{digest}\"")));
}

/// `mesh gc` removes through the engine the images the mesh fetched that no kept generation
/// references and no container uses, and only those: switch A fetches X (and finds Z on the
/// engine), switch B needs Y, not X nor Z; a gc that drops A removes X, keeps Y (B needs it)
/// and keeps Z, which the mesh found and never fetched, though nothing references it.
#[test]
fn gc_removes_the_images_the_mesh_fetched_and_no_kept_generation_needs() {
    if !lab_here(false) {
        return;
    }
    let _turn = take_turn();
    let registry = Registry::start(None);
    let mut made = Made::new("ig");
    let (repo_x, digest_x) = made.pushed(&registry, "x", "1", "x");
    let (repo_y, digest_y) = made.pushed(&registry, "y", "1", "y");
    let (repo_z, digest_z) = made.pushed(&registry, "z", "1", "z");
    let (x, y, z) = (
        format!("{repo_x}@{digest_x}"),
        format!("{repo_y}@{digest_y}"),
        format!("{repo_z}@{digest_z}"),
    );
    // Z is on the engine before the mesh: found, not fetched.
    docker(&["pull", &z]);
    let (name_a, name_b, name_z) = (
        format!("{}-a", made.prefix),
        format!("{}-b", made.prefix),
        format!("{}-z", made.prefix),
    );
    let f = Fixture::new();
    let config = empty_config();
    f.write_decl(
        "a.ncl",
        &declaration("a\\n", &[(&name_a, &x), (&name_z, &z)]),
    );
    f.write_decl("b.ncl", &declaration("b\\n", &[(&name_b, &y)]));
    let (a, b) = (f.decl("a.ncl"), f.decl("b.ncl"));

    let ran = mesh_with(
        &f,
        config.path(),
        &["switch", a.to_str().unwrap(), "--json"],
    );
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let v: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    let fetched: Vec<&str> = v["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["image"].as_str().unwrap())
        .collect();
    assert_eq!(fetched, [x.as_str()], "only X is fetched: {}", ran.stdout);
    let ran = mesh_with(&f, config.path(), &["switch", b.to_str().unwrap()]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert_eq!(container(&name_a), None, "A's containers are gone with B");
    assert!(has_image(&x) && has_image(&y) && has_image(&z));

    // Both generations kept: nothing goes.
    let ran = mesh_with(&f, config.path(), &["gc", "--keep", "2", "--json"]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let v: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(
        v["images"]["removed"],
        serde_json::json!([]),
        "{}",
        ran.stdout
    );
    assert!(has_image(&x));

    // A dropped: X goes, Y (B needs it) and Z (found) stay.
    let ran = mesh_with(&f, config.path(), &["gc", "--keep", "1", "--json"]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let v: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(
        v["removed_generations"],
        serde_json::json!([1]),
        "{}",
        ran.stdout
    );
    assert_eq!(
        v["images"]["removed"],
        serde_json::json!([x]),
        "{}",
        ran.stdout
    );
    assert!(!has_image(&x), "X was removed from the engine");
    assert!(has_image(&y), "Y, which B needs, was removed");
    assert!(has_image(&z), "Z, which the mesh found, was removed");
    assert_eq!(container(&name_b).map(|c| c.0), Some(true));

    // Rolled forward to A again, X is fetched again and listed; a container of someone
    // else's on it keeps it through a gc that drops A.
    let ran = mesh_with(&f, config.path(), &["switch", a.to_str().unwrap()]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr.contains(&format!("fetched image {x}")),
        "{}",
        ran.stderr
    );
    let ran = mesh_with(&f, config.path(), &["switch", b.to_str().unwrap()]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let theirs = format!("{}-theirs", made.prefix);
    docker(&["create", "--name", &theirs, &x, "/bin/busybox", "true"]);
    let ran = mesh_with(&f, config.path(), &["gc", "--keep", "1"]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains(&format!(
            "kept image {x}: fetched by the mesh, no kept generation needs it, a container uses it"
        )),
        "{}",
        ran.stdout
    );
    assert!(has_image(&x) && has_image(&z));
    docker(&["rm", "-f", &theirs]);
    let ran = mesh_with(&f, config.path(), &["gc", "--keep", "1"]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains(&format!("removed image {x}")),
        "{}",
        ran.stdout
    );
    assert!(!has_image(&x) && has_image(&y) && has_image(&z));
}

/// `mesh switch --stage` puts what a generation needs on the node — its image fetched, by
/// digest — with nothing in force changed (no file, no container, no generation), and `mesh
/// status` shows it staged; a gc keeps it; with the registry stopped, the switch to it then
/// fetches nothing and finishes, and it is staged no more.
#[test]
fn a_staged_generation_switches_with_the_registry_gone() {
    if !lab_here(false) {
        return;
    }
    let _turn = take_turn();
    let mut registry = Registry::start(None);
    let mut made = Made::new("is");
    let (repository, digest) = made.pushed(&registry, "busy", "1", "one");
    let image = format!("{repository}:1@{digest}");
    let name = format!("{}-app", made.prefix);
    let f = Fixture::new();
    let config = empty_config();
    f.write_decl("n.ncl", &declaration("staged\\n", &[(&name, &image)]));
    let decl = f.decl("n.ncl");
    let decl = decl.to_str().unwrap();
    let before = f.snapshot();

    let staged = mesh_with(&f, config.path(), &["switch", "--stage", decl, "--json"]);
    assert_eq!(staged.code, 0, "{}{}", staged.stdout, staged.stderr);
    let v: serde_json::Value = serde_json::from_str(&staged.stdout).unwrap();
    let id = v["id"].as_str().unwrap().to_owned();
    assert_eq!(v["images"][0]["image"], image.as_str(), "{}", staged.stdout);
    assert!(v["blobs"].as_u64().unwrap() > 0, "{}", staged.stdout);
    assert!(
        has_image(&format!("{repository}@{digest}")),
        "the image was fetched"
    );
    nothing_changed(&f, &before, &[&name], "a stage");
    let status = f.ok(&["status", "--json"]);
    let s: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(s["staged_generation"], id.as_str(), "{}", status.stdout);
    let gc = mesh_with(&f, config.path(), &["gc", "--keep", "1", "--json"]);
    assert_eq!(gc.code, 0, "{}{}", gc.stdout, gc.stderr);
    let g: serde_json::Value = serde_json::from_str(&gc.stdout).unwrap();
    assert_eq!(
        g["images"]["removed"],
        serde_json::json!([]),
        "{}",
        gc.stdout
    );
    assert!(
        has_image(&format!("{repository}@{digest}")),
        "gc removed the staged image"
    );

    registry.down();
    let ran = mesh_with(
        &f,
        config.path(),
        &["switch", "--generation", &id, "--json"],
    );
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let v: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert!(
        v.get("images").is_none(),
        "fetched at the switch: {}",
        ran.stdout
    );
    assert_eq!(container(&name).map(|c| c.0), Some(true));
    assert_eq!(f.read("/etc/motd").as_deref(), Some("staged\n"));
    let status = f.ok(&["status", "--json"]);
    let s: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert!(s.get("staged_generation").is_none(), "{}", status.stdout);
}

/// A predecessor's container started from a registry's image by its tag (`docker run
/// REPO:1`): `mesh import` pins the image by the digest the registry knows it by, `--check`
/// finds the pinned declaration equal to what runs, and `mesh take` keeps the very container
/// (same id): a pinned declaration — by the import, by hand or by the lock — is the container
/// its tag created, not one to recreate.
#[test]
fn an_imported_container_is_pinned_by_its_registry_digest_and_taken_in_place() {
    if !lab_here(false) {
        return;
    }
    let _turn = take_turn();
    let registry = Registry::start(None);
    let mut made = Made::new("ip");
    let (repository, digest) = made.pushed(&registry, "busy", "1", "one");
    let name = format!("{}-app", made.prefix);
    docker(&[
        "run",
        "-d",
        "--name",
        &name,
        &format!("{repository}:1"),
        "/bin/busybox",
        "sleep",
        "100000",
    ]);
    let id = docker(&["inspect", "-f", "{{.Id}} {{.State.StartedAt}}", &name]);
    let f = Fixture::new();
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().to_str().unwrap();
    f.ok(&[
        "import",
        "--no-firewall",
        "--out",
        out_dir,
        "--node",
        "n1",
        "--container",
        &name,
    ]);
    let module = std::fs::read_dir(out.path().join("catalogue"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .find(|t| t.contains(&name))
        .unwrap();
    let pinned = format!("image = \"{repository}:1@{digest}\",");
    assert!(module.contains(&pinned), "{pinned}\nnot in:\n{module}");
    let decl = out.path().join("nodes/n1.ncl");
    let decl = decl.to_str().unwrap();
    let checked = f.mesh(&["import", "--no-firewall", "--check", decl]);
    assert_eq!(checked.code, 0, "{}{}", checked.stdout, checked.stderr);
    let built = f.ok(&["build", decl, "--json"]);
    let v: serde_json::Value = serde_json::from_str(built.last_line()).unwrap();
    assert_eq!(v["unpinned"], serde_json::json!([]), "{v:#}");
    f.ok(&["adopt", decl]);
    let module_name = module
        .lines()
        .find_map(|l| l.trim().strip_prefix("name = \""))
        .and_then(|l| l.strip_suffix("\","))
        .unwrap()
        .to_owned();
    let taken = f.ok(&["take", &module_name, decl]);
    assert!(
        taken.stdout.contains(&format!("keep     container {name}")),
        "{}",
        taken.stdout
    );
    assert_eq!(
        docker(&["inspect", "-f", "{{.Id}} {{.State.StartedAt}}", &name]),
        id,
        "the take recreated or restarted the container"
    );
}

/// On an adopted node, a module not taken yet: its found container runs what the predecessor
/// started (`REPO:1`), the declaration names `REPO:2` pinned. `mesh switch --stage` fetches the
/// declared image for the held container with nothing in force changed (the found container
/// still runs, not restarted), and the take later needs no registry: the registry is stopped
/// and the take recreates the container from the staged image.
#[test]
fn a_stage_on_an_adopted_node_fetches_what_a_take_will_need() {
    if !lab_here(false) {
        return;
    }
    let _turn = take_turn();
    let mut registry = Registry::start(None);
    let mut made = Made::new("ia");
    let (repository, _) = made.pushed(&registry, "busy", "1", "one");
    let (_, two) = made.pushed(&registry, "busy", "2", "two");
    let name = format!("{}-app", made.prefix);
    docker(&[
        "run",
        "-d",
        "--name",
        &name,
        &format!("{repository}:1"),
        "/bin/busybox",
        "sleep",
        "1000",
    ]);
    let found = docker(&["inspect", "-f", "{{.Id}} {{.State.StartedAt}}", &name]);
    let image = format!("{repository}:2@{two}");
    let f = Fixture::new();
    let config = empty_config();
    f.write_decl("n.ncl", &declaration("adopted\\n", &[(&name, &image)]));
    let decl = f.decl("n.ncl");
    let decl = decl.to_str().unwrap();
    let adopted = mesh_with(&f, config.path(), &["adopt", decl]);
    assert_eq!(adopted.code, 0, "{}{}", adopted.stdout, adopted.stderr);
    assert!(
        !has_image(&format!("{repository}@{two}")),
        "the adoption fetched the image of a module not taken"
    );

    let staged = mesh_with(&f, config.path(), &["switch", "--stage", decl, "--json"]);
    assert_eq!(staged.code, 0, "{}{}", staged.stdout, staged.stderr);
    assert!(
        has_image(&format!("{repository}@{two}")),
        "the stage fetched the held container's declared image: {}",
        staged.stdout
    );
    assert_eq!(
        docker(&["inspect", "-f", "{{.Id}} {{.State.StartedAt}}", &name]),
        found,
        "the stage touched the found container"
    );

    registry.down();
    let taken = mesh_with(&f, config.path(), &["take", "app", decl]);
    assert_eq!(taken.code, 0, "{}{}", taken.stdout, taken.stderr);
    let (running, image_id) = container(&name).expect("the mesh's container");
    assert!(running);
    let staged_id = docker(&[
        "image",
        "inspect",
        "-f",
        "{{.Id}}",
        &format!("{repository}@{two}"),
    ]);
    assert_eq!(image_id, staged_id, "the take runs the staged image");
}
