//! `cargo bench --bench switch` (as root, with rsync installed): what `mesh switch` costs next to
//! the tools a user knows, for 1,000 and 10,000 declared files. Prints one table; times are
//! medians of a few runs.
//!
//! - first switch into an empty root, against `rsync -a` of the same files into an empty folder
//!   (the floor a user knows); the same again on a tmpfs, where fsync costs nothing, so the
//!   difference is the price of crash safety;
//! - a switch that changes one file out of 10,000;
//! - a no-op switch (the generation in force, again);
//! - Ansible's `copy` module on 100 of the files, first apply and no-op, when ansible-playbook is
//!   installed.
//!
//! Targets (issue 3): first switch within 2x rsync; one-file change under 5% of the full switch;
//! no-op under 50 ms at 10,000 files.

use std::path::{Path, PathBuf};
mod common;
use common::{median, ms};

use std::process::Command;
use std::time::{Duration, Instant};

fn content(i: usize, variant: usize) -> String {
    format!(
        "# file {i}, variant {variant}\nkey_{i} = value {}\n{}\n",
        i * 7 + variant,
        "x".repeat(120)
    )
}

/// A declaration of `n` files in modules of 100, one of them (file 0) at `variant`.
fn declaration(dir: &Path, n: usize, variant: usize) -> PathBuf {
    let mut modules = String::new();
    for m in 0..n.div_ceil(100) {
        let files: Vec<String> = (m * 100..((m + 1) * 100).min(n))
            .map(|i| {
                format!(
                    "{{ path = \"/srv/app{m}/f{i}.conf\", content = m%\"{}\"% }}",
                    content(i, if i == 0 { variant } else { 0 })
                )
            })
            .collect();
        modules.push_str(&format!(
            "{{ name = \"app{m}\", config = fun s => {{ files = [{}] }} }},\n",
            files.join(", ")
        ));
    }
    let text = format!(
        "let mesh = import \"mesh.ncl\" in\nmesh.node {{ name = \"bench\", settings = {{ ports = {{ store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820 }}, private_network = {{ range = \"10.77.0.0/24\", address = \"10.77.0.9\" }} }}, modules = [\n{modules}] }}\n"
    );
    let path = dir.join(format!("node-{n}-{variant}.ncl"));
    std::fs::write(&path, text).unwrap();
    path
}

/// The same files as a plain tree, for rsync and Ansible.
fn source_tree(dir: &Path, n: usize, limit: usize) -> PathBuf {
    let src = dir.join(format!("src-{n}-{limit}"));
    for i in 0..n.min(limit) {
        let p = src.join(format!("srv/app{}/f{i}.conf", i / 100));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content(i, 0)).unwrap();
    }
    src
}

/// The network namespace the bench's firewall goes into: a switch puts the generation's firewall
/// in force, and the bench must never touch the machine's own ruleset.
static NETNS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn mesh(state: &Path, root: &Path, args: &[&str]) -> String {
    common::mesh(state, root, NETNS.get().map(String::as_str), args)
}

fn timed(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Runs in `base`: rsync, rsync made durable (`sync -f`, a syncfs of the destination's
/// filesystem, as a switch makes its files durable) and first switch, `runs` times each, fresh
/// folders every time.
fn first_switch(
    base: &Path,
    decl: &Path,
    src: &Path,
    runs: usize,
) -> (Duration, Duration, Duration) {
    let mut rsync = Vec::new();
    let mut durable = Vec::new();
    let mut switch = Vec::new();
    for r in 0..runs {
        let run = base.join(format!("run-{r}"));
        let (state, root, dst) = (run.join("state"), run.join("root"), run.join("dst"));
        let dst_synced = run.join("dst-synced");
        for d in [&state, &root, &dst, &dst_synced] {
            std::fs::create_dir_all(d).unwrap();
        }
        let id = mesh(&state, &root, &["build", decl.to_str().unwrap()])
            .lines()
            .last()
            .unwrap()
            .to_owned();
        Command::new("sync").status().unwrap();
        rsync.push(timed(|| {
            assert!(Command::new("rsync")
                .arg("-a")
                .arg(format!("{}/", src.display()))
                .arg(&dst)
                .status()
                .unwrap()
                .success());
        }));
        // rsync leaves its files for the kernel to write back: flush them, so that the next
        // run's syncs do not pay for them.
        Command::new("sync").status().unwrap();
        durable.push(timed(|| {
            assert!(Command::new("rsync")
                .arg("-a")
                .arg(format!("{}/", src.display()))
                .arg(&dst_synced)
                .status()
                .unwrap()
                .success());
            assert!(Command::new("sync")
                .arg("-f")
                .arg(&dst_synced)
                .status()
                .unwrap()
                .success());
        }));
        switch.push(timed(|| {
            mesh(&state, &root, &["switch", "--generation", &id]);
        }));
        std::fs::remove_dir_all(&run).unwrap();
    }
    (median(rsync), median(durable), median(switch))
}

fn ansible(dir: &Path, src: &Path) -> Option<(Duration, Duration)> {
    let available = Command::new("ansible-playbook")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !available {
        return None;
    }
    let dst = dir.join("ansible-dst");
    let playbook = dir.join("copy.yml");
    std::fs::write(
        &playbook,
        format!(
            "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n    - copy:\n        src: \"{}/\"\n        dest: \"{}/\"\n",
            src.display(),
            dst.display()
        ),
    )
    .unwrap();
    let play = || {
        let ok = Command::new("ansible-playbook")
            .arg(&playbook)
            .env("ANSIBLE_NOCOLOR", "1")
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stdout)
        );
    };
    Some((timed(play), timed(play)))
}

fn main() {
    if !rustix::process::geteuid().is_root()
        || Command::new("rsync").arg("--version").output().is_err()
    {
        eprintln!("the switch bench needs root (files are owned by root) and rsync");
        return;
    }
    let ns = format!("mesh-bench-sw-{}", std::process::id());
    let _gone = common::Netns::add(ns.clone());
    NETNS.set(ns).unwrap();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    println!("\nfirst switch into an empty root, against rsync -a of the same files (on disk, then on tmpfs where fsync is free)");
    println!(
        "{:>7} {:>12} {:>14} {:>9} {:>14} {:>16} {:>9} {:>14}",
        "files",
        "rsync",
        "mesh switch",
        "ratio",
        "rsync tmpfs",
        "switch tmpfs",
        "ratio",
        "fsync share"
    );
    let mut full_10k = Duration::ZERO;
    let mut durable_rows = Vec::new();
    for n in [1_000usize, 10_000] {
        let decl = declaration(dir.path(), n, 0);
        let src = source_tree(dir.path(), n, usize::MAX);
        let runs = if n > 1000 { 3 } else { 5 };
        let (rsync, durable, switch) =
            first_switch(&dir.path().join(format!("disk-{n}")), &decl, &src, runs);
        durable_rows.push((n, durable, switch));
        let tmp = dir.path().join(format!("tmpfs-{n}"));
        std::fs::create_dir_all(&tmp).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=512m", "tmpfs"])
            .arg(&tmp)
            .status()
            .is_ok_and(|s| s.success());
        let _guard = mounted.then(|| Tmpfs(tmp.clone()));
        let (rsync_t, switch_t) = if mounted {
            let (rsync_t, _, switch_t) = first_switch(&tmp, &decl, &src, runs);
            (rsync_t, switch_t)
        } else {
            (Duration::ZERO, Duration::ZERO)
        };
        if n == 10_000 {
            full_10k = switch;
        }
        println!(
            "{:>7} {:>12} {:>14} {:>8.2}x {:>14} {:>16} {:>8.2}x {:>13.0}%",
            n,
            ms(rsync),
            ms(switch),
            switch.as_secs_f64() / rsync.as_secs_f64(),
            ms(rsync_t),
            ms(switch_t),
            switch_t.as_secs_f64() / rsync_t.as_secs_f64().max(1e-9),
            100.0 * (switch.as_secs_f64() - switch_t.as_secs_f64()).max(0.0) / switch.as_secs_f64()
        );
    }

    println!(
        "\nthe same, against rsync made durable (then `sync -f`: a syncfs, as the switch does)"
    );
    println!(
        "{:>7} {:>18} {:>14} {:>9}",
        "files", "rsync + sync -f", "mesh switch", "ratio"
    );
    for (n, durable, switch) in durable_rows {
        println!(
            "{:>7} {:>18} {:>14} {:>8.2}x",
            n,
            ms(durable),
            ms(switch),
            switch.as_secs_f64() / durable.as_secs_f64()
        );
    }

    // One file of 10,000 changes; then nothing changes.
    let n = 10_000;
    let (state, root) = (
        dir.path().join("steady/state"),
        dir.path().join("steady/root"),
    );
    std::fs::create_dir_all(&root).unwrap();
    let base = declaration(dir.path(), n, 0);
    let changed = declaration(dir.path(), n, 1);
    mesh(&state, &root, &["switch", base.to_str().unwrap()]);
    let id_base = mesh(&state, &root, &["build", base.to_str().unwrap()])
        .lines()
        .last()
        .unwrap()
        .to_owned();
    let id_changed = mesh(&state, &root, &["build", changed.to_str().unwrap()])
        .lines()
        .last()
        .unwrap()
        .to_owned();
    let mut one = Vec::new();
    for i in 0..6 {
        let id = if i % 2 == 0 { &id_changed } else { &id_base };
        one.push(timed(|| {
            mesh(&state, &root, &["switch", "--generation", id]);
        }));
    }
    let one = median(one);
    let noop = median(
        (0..7)
            .map(|_| {
                timed(|| {
                    mesh(&state, &root, &["switch", "--generation", &id_base]);
                })
            })
            .collect(),
    );
    let noop_decl = median(
        (0..7)
            .map(|_| {
                timed(|| {
                    mesh(&state, &root, &["switch", base.to_str().unwrap()]);
                })
            })
            .collect(),
    );
    println!("\n10,000 files in force");
    println!(
        "  one file changed:        {:>10}  ({:.1}% of the first switch)",
        ms(one),
        100.0 * one.as_secs_f64() / full_10k.as_secs_f64()
    );
    println!("  no-op (--generation):    {:>10}", ms(noop));
    println!("  no-op (NODE.ncl, cached):{:>10}", ms(noop_decl));

    println!("\nAnsible copy module, 100 files");
    let src100 = source_tree(dir.path(), n, 100);
    match ansible(dir.path(), &src100) {
        Some((first, again)) => {
            println!("  first apply {:>10}   no-op {:>10}", ms(first), ms(again))
        }
        None => println!("  not run: ansible-playbook is not installed (pip install ansible-core)"),
    }
    println!("\ntargets: first switch <= 2x rsync; one-file change < 5% of the first switch; no-op < 50 ms at 10,000 files");
}
