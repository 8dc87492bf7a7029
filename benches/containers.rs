//! `sudo cargo bench --bench containers` (with a Docker engine): a no-op `mesh switch` of a node
//! with 60 declared containers, 50 of them held (the predecessor's, found) and 10 taken (the
//! mesh's), against the engine's own `docker ps` of them. It must restart none (checked) and
//! cost under 1 s; it prints the time and the Docker API calls it made. Everything it creates
//! carries its prefix and is removed at the end.
//!
//! Target (issue 5): under 1 s with a local engine.

mod common;
use common::median;

use std::process::Command;
use std::time::Instant;

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn main() {
    if !common::docker_here() {
        return;
    }
    let prefix = format!("meshbench{}", std::process::id());
    let image = format!("{prefix}-busybox:1");
    let _cleanup = common::DockerCleanup(prefix.clone(), image.clone());
    common::import_busybox(&image);

    let n = 60;
    let cmd = r#"["/bin/busybox", "sleep", "100000"]"#;
    for i in 0..n {
        docker(&[
            "run",
            "-d",
            "--name",
            &format!("{prefix}-c{i}"),
            &image,
            "/bin/busybox",
            "sleep",
            "100000",
        ]);
    }
    let modules: String = (0..n)
        .map(|i| format!("{{ name = \"m{i}\", config = fun s => {{ containers = [{{ name = \"{prefix}-c{i}\", image = \"{image}\", command = {cmd} }}] }} }},\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let decl = common::container_node(dir.path(), &modules);
    let ns = format!("{prefix}-ns");
    let _ns = common::Netns::add(ns.clone());
    let mesh = |args: &[&str]| common::mesh(&dir.path().join("state"), dir.path(), Some(&ns), args);
    mesh(&["adopt", decl.to_str().unwrap()]);
    for i in 0..10 {
        mesh(&["take", &format!("m{i}")]);
    }
    let started = || {
        docker(&[
            "ps",
            "-q",
            "--no-trunc",
            "--filter",
            &format!("name={prefix}-c"),
            "--format",
            "{{.ID}} {{.Names}} {{.RunningFor}}",
        ])
    };
    let starts: Vec<String> = (0..n)
        .map(|i| {
            docker(&[
                "inspect",
                "-f",
                "{{.Id}} {{.State.StartedAt}}",
                &format!("{prefix}-c{i}"),
            ])
        })
        .collect();

    let mut calls = 0;
    let noop = median(
        (0..7)
            .map(|_| {
                let t = Instant::now();
                let out = mesh(&["switch", decl.to_str().unwrap(), "--json"]);
                let d = t.elapsed();
                let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
                assert_eq!(
                    v["number"],
                    serde_json::Value::Null,
                    "a no-op switch adds no generation"
                );
                calls = v["docker_calls"].as_u64().unwrap();
                d
            })
            .collect(),
    );
    let ps = median(
        (0..7)
            .map(|_| {
                let t = Instant::now();
                let _ = started();
                t.elapsed()
            })
            .collect(),
    );
    let after: Vec<String> = (0..n)
        .map(|i| {
            docker(&[
                "inspect",
                "-f",
                "{{.Id}} {{.State.StartedAt}}",
                &format!("{prefix}-c{i}"),
            ])
        })
        .collect();
    assert_eq!(starts, after, "a no-op switch restarted a container");

    println!("\nno-op switch of a node with {n} declared containers (50 held, 10 managed)");
    println!(
        "  mesh switch NODE.ncl:   {:>8.1} ms   {calls} Docker API calls   0 containers restarted",
        noop.as_secs_f64() * 1e3
    );
    println!(
        "  docker ps of them:      {:>8.1} ms   (reference: the engine's own listing)",
        ps.as_secs_f64() * 1e3
    );
    println!("\ntarget: under 1 s, no restart");
}
