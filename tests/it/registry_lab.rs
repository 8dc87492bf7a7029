//! A real OCI registry for the tests and the benches: Debian's `docker-registry` (the
//! Distribution registry), in a lab's deployer namespace, plain HTTP, its storage in a
//! temporary folder; stopped when dropped.
#![allow(dead_code)] // the bench uses a part

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::sshlab::Lab;

pub const REGISTRY: &str = "/usr/bin/docker-registry";
pub const PORT: u16 = 5000;
pub const REPO: &str = "fleet/prod";

/// The registry, in the lab's deployer namespace, listening on every address there; stopped
/// when dropped (also when the test fails). Its storage outlives a restart.
pub struct Registry {
    pub netns: String,
    pub dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Registry {
    pub fn start(lab: &Lab) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.yml"),
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 0.0.0.0:{PORT}\n",
                dir.path().join("storage").display()
            ),
        )
        .unwrap();
        let mut r = Self {
            netns: lab.deployer.clone(),
            dir,
            child: None,
        };
        r.up();
        r
    }

    pub fn up(&mut self) {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.netns, REGISTRY, "serve"])
            .arg(self.dir.path().join("config.yml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("registry.log")).unwrap())
            .spawn()
            .expect("the registry starts");
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if self
                .curl(&["-sf", &format!("http://127.0.0.1:{PORT}/v2/")])
                .status
                .success()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the registry does not answer: {}",
            std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
        );
    }

    /// The registry's process (the `ip netns exec` it was started by became it).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The CPU time the registry used so far (user and system), from /proc.
    pub fn cpu(&self) -> Duration {
        let Some(pid) = self.pid() else {
            return Duration::ZERO;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        // utime and stime, the 14th and 15th fields, in clock ticks (100 a second).
        Duration::from_millis((f.get(11).unwrap_or(&0) + f.get(12).unwrap_or(&0)) * 10)
    }

    pub fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn curl(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.netns, "curl"])
            .args(args)
            .output()
            .unwrap()
    }

    /// The manifest tagged `tag`, as the registry has it.
    pub fn manifest(&self, tag: &str) -> serde_json::Value {
        let out = self.curl(&[
            "-sf",
            "-H",
            "Accept: application/vnd.oci.image.manifest.v1+json",
            &format!("http://127.0.0.1:{PORT}/v2/{REPO}/manifests/{tag}"),
        ]);
        assert!(out.status.success(), "GET manifest {tag}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Tags `manifest` as `tag`.
    pub fn put_manifest(&self, tag: &str, manifest: &serde_json::Value) {
        let file = self.dir.path().join("manifest.json");
        std::fs::write(&file, serde_json::to_vec(manifest).unwrap()).unwrap();
        let out = self.curl(&[
            "-sf",
            "-X",
            "PUT",
            "-H",
            "Content-Type: application/vnd.oci.image.manifest.v1+json",
            "--data-binary",
            &format!("@{}", file.display()),
            &format!("http://127.0.0.1:{PORT}/v2/{REPO}/manifests/{tag}"),
        ]);
        assert!(out.status.success(), "PUT manifest {tag}");
    }

    /// The stored file of every blob whose bytes are `bytes`.
    pub fn blobs_holding(&self, bytes: &[u8]) -> Vec<PathBuf> {
        walkdir::WalkDir::new(self.dir.path().join("storage"))
            .into_iter()
            .filter_map(Result::ok)
            .filter(|e| e.file_name() == "data" && e.file_type().is_file())
            .filter(|e| std::fs::read(e.path()).is_ok_and(|b| b == bytes))
            .map(|e| e.path().to_owned())
            .collect()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.down();
    }
}
