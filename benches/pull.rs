//! `sudo cargo bench --bench pull`: one changed file (the same for every node) reaching 1, 10
//! and 50 nodes, by `mesh push` to a real registry (Debian's `docker-registry`, in the
//! deployer's namespace) and `mesh pull` on every node at once, against `mesh deploy
//! --parallel N` over SSH. Each node declares 51 files (a changing one, 49 small ones of its
//! own and 64 KiB that never change), and runs its own sshd in its own namespace (the lab of
//! the fleet's tests).
//!
//! Per row: wall time (push and the pulls; the deploy), bytes that leave the publisher (the
//! push's own count of what it sent the registry; the deploy's on the wire, every node's link),
//! bytes each node receives on the wire (its link, TCP and HTTP or SSH included), and the
//! registry's CPU time. Targets (issue 26): the publisher's bytes independent of the node count;
//! a node's bytes the changed objects plus the manifest, under a deploy's 17 KB.
//!
//! Prints one table with the ratios of one run.

mod common;
#[path = "../tests/it/registry_lab.rs"]
mod registry_lab;
#[path = "../tests/it/sshlab.rs"]
mod sshlab;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::ms;
use registry_lab::{Registry, PORT, REGISTRY, REPO};
use sshlab::{decl_with_data, write_data, Lab, LabNode};

const DATA: usize = 49;

fn keygen(dir: &Path) -> std::path::PathBuf {
    let key = dir.join("ci");
    assert!(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key)
        .status()
        .unwrap()
        .success());
    key
}

fn declare_all(lab: &Lab, version: usize) {
    for n in &lab.nodes {
        lab.declare(
            &n.name,
            &decl_with_data(&n.name, &format!("version {version}\\n"), DATA),
        );
    }
}

fn push(lab: &Lab, key: &Path) -> (Duration, u64) {
    let target = format!("127.0.0.1:{PORT}/{REPO}");
    let started = Instant::now();
    let out = lab.mesh(&[
        "push",
        &target,
        "--insecure",
        "--sign",
        "--key",
        key.to_str().unwrap(),
        "--json",
        "--parallel",
        "8",
    ]);
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "push: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (took, v["bytes"].as_u64().unwrap())
}

fn pull_all(lab: &Lab) -> Duration {
    let started = Instant::now();
    std::thread::scope(|s| {
        for n in &lab.nodes {
            s.spawn(move || pull(n));
        }
    });
    started.elapsed()
}

fn pull(n: &LabNode) {
    let last: u8 = n.address.rsplit('.').next().unwrap().parse().unwrap();
    let target = format!("198.51.100.{}:{PORT}/{REPO}", last - 1);
    let out = Command::new("ip")
        .args(["netns", "exec", &n.netns, env!("CARGO_BIN_EXE_mesh")])
        .env("MESH_STATE_DIR", n.state())
        .env("MESH_ROOT", n.root())
        .env("MESH_NETNS", &n.netns)
        .env("MESH_SETTLE", "0")
        .args(["pull", &target, "--node", &n.name, "--insecure"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pull on {}: {}{}",
        n.name,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn deploy(lab: &Lab, parallel: usize, key: &Path) -> Duration {
    let started = Instant::now();
    let out = lab.mesh(&[
        "deploy",
        "--json",
        "--parallel",
        &parallel.to_string(),
        "--sign",
        "--key",
        key.to_str().unwrap(),
    ]);
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "deploy: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    took
}

fn wire(lab: &Lab) -> Vec<u64> {
    lab.nodes.iter().map(|n| lab.wire(&n.name)).collect()
}

fn delta(after: &[u64], before: &[u64]) -> (u64, u64) {
    let d: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    (d.iter().sum(), d.iter().sum::<u64>() / d.len() as u64)
}

struct Row {
    nodes: usize,
    pull_wall: Duration,
    push_wall: Duration,
    published: u64,
    pull_node: u64,
    registry_cpu: Duration,
    deploy_wall: Duration,
    deploy_out: u64,
    deploy_node: u64,
}

fn measure(count: usize) -> Row {
    let lab = Lab::new("bpull", count, |n| decl_with_data(n, "version 0\\n", DATA));
    for n in &lab.nodes {
        write_data(&lab, &n.name, DATA, 200, "bench");
    }
    let registry = Registry::start(&lab);
    let keys = tempfile::tempdir().unwrap();
    let key = keygen(keys.path());
    for n in &lab.nodes {
        n.trust(&key);
    }
    // Every node has everything but the changing file from here on, both ways.
    push(&lab, &key);
    pull_all(&lab);

    declare_all(&lab, 1);
    let (cpu, before) = (registry.cpu(), wire(&lab));
    let (push_wall, published) = push(&lab, &key);
    let pull_wall = pull_all(&lab);
    let (_, pull_node) = delta(&wire(&lab), &before);
    let registry_cpu = registry.cpu() - cpu;

    declare_all(&lab, 2);
    let before = wire(&lab);
    let deploy_wall = deploy(&lab, count, &key);
    let (deploy_out, deploy_node) = delta(&wire(&lab), &before);
    Row {
        nodes: count,
        pull_wall,
        push_wall,
        published,
        pull_node,
        registry_cpu,
        deploy_wall,
        deploy_out,
        deploy_node,
    }
}

fn main() {
    if !rustix::process::geteuid().is_root() || !Path::new(REGISTRY).exists() {
        eprintln!("the pull bench needs root (namespaces, sshd) and {REGISTRY}");
        return;
    }
    let counts: Vec<usize> = std::env::var("MESH_BENCH_NODES")
        .ok()
        .map(|v| v.split(',').filter_map(|c| c.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 10, 50]);
    let rows: Vec<Row> = counts.iter().map(|&c| measure(c)).collect();
    println!("one changed file: push + pull against deploy --parallel N (one run each)");
    println!("| nodes | push + pulls | (push) | deploy | wall ratio | publisher sends: push | deploy | ratio | each node receives: pull | deploy | ratio | registry CPU |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let both = r.push_wall + r.pull_wall;
        println!(
            "| {} | {} | ({}) | {} | {:.2}x | {} B | {} B | {:.2}x | {} B | {} B | {:.2}x | {} |",
            r.nodes,
            ms(both),
            ms(r.push_wall),
            ms(r.deploy_wall),
            both.as_secs_f64() / r.deploy_wall.as_secs_f64(),
            r.published,
            r.deploy_out,
            r.published as f64 / r.deploy_out as f64,
            r.pull_node,
            r.deploy_node,
            r.pull_node as f64 / r.deploy_node as f64,
            ms(r.registry_cpu),
        );
    }
}
