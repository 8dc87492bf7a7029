//! `sudo cargo bench --bench services` (with a Docker engine): services against a real systemd
//! as PID 1 in a container (the same node the services tests boot), timed inside it.
//!
//! 1. A switch that changes 50 files configuring 20 units (10 reloaded, 10 restarted), against
//!    the shell loop an operator would otherwise run: `systemctl reload` / `systemctl restart`
//!    of the same units, one after another. Target (issue 9): ≤ 1.2×.
//! 2. A no-op switch of a node declaring 100 units, against the no-op switch of a node declaring
//!    the same 100 files as plain files. Target: zero systemd jobs (checked, and every unit's
//!    last start checked unchanged), under 10 ms more.
//!
//! 3. firewalld's own reload on an adopted node: how long the mesh's opening (a rich rule of its
//!    runtime configuration, which a reload drops) stays closed until `mesh reconcile --watch`
//!    puts it back on firewalld's `Reloaded` signal, probed from outside the node every
//!    millisecond, against how long `firewall-cmd --reload` itself takes. Target (issue 49):
//!    back within a second.
//!
//! Prints one table with the ratios of one run.

mod common;
#[path = "../tests/it/systemd_node.rs"]
mod systemd_node;

use std::time::Duration;

use common::{images_made, median, ms};
use systemd_node::SystemdNode;

const RUNS: usize = 9;

fn decl(name: &str, modules: &str) -> String {
    format!(
        r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "{name}",
  settings = {{
    ports = {{ store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820 }},
    private_network = {{ range = "10.77.0.0/24", address = "10.77.0.5" }},
  }},
  modules = [
{modules}
  ],
}}
"#
    )
}

fn unit_text(n: usize) -> String {
    format!("[Unit]\nDescription=bench {n}\nStartLimitIntervalSec=0\n[Service]\nExecStart=/usr/bin/sleep infinity\nExecReload=/bin/true\n[Install]\nWantedBy=multi-user.target\n")
}

/// Twenty declared units, and fifty files each configuring one of them (the first ten units
/// reloaded, the others restarted), with `version` in every file.
fn fifty_files(version: usize) -> String {
    let mut units = String::new();
    for n in 0..20 {
        units.push_str(&format!(
            "{{ name = \"b{n}.service\", text = {} }},",
            serde_json::to_string(&unit_text(n)).unwrap()
        ));
    }
    let mut files = String::new();
    for k in 0..50 {
        let n = k % 20;
        let how = if n < 10 { "reloads" } else { "restarts" };
        files.push_str(&format!(
            "{{ path = \"/etc/bench/f{k}.conf\", content = \"version {version}\\n\", {how} = [\"b{n}.service\"] }},"
        ));
    }
    decl(
        "bench",
        &format!("    {{ name = \"bench\", config = fun s => {{ units = [{units}], files = [{files}] }} }},"),
    )
}

/// A hundred declared units, or (`as_files`) the same hundred texts as plain files elsewhere.
fn hundred(as_files: bool) -> String {
    let mut items = String::new();
    for n in 0..100 {
        let text = serde_json::to_string(&unit_text(n)).unwrap();
        if as_files {
            items.push_str(&format!(
                "{{ path = \"/etc/plain/h{n}.service\", content = {text} }},"
            ));
        } else {
            items.push_str(&format!("{{ name = \"h{n}.service\", text = {text} }},"));
        }
    }
    let field = if as_files { "files" } else { "units" };
    decl(
        if as_files { "plain" } else { "hundred" },
        &format!("    {{ name = \"h\", config = fun s => {{ {field} = [{items}] }} }},"),
    )
}

/// Runs `script` in the node, timed inside it (no `docker exec` in the figure).
fn timed(node: &SystemdNode, script: &str) -> Duration {
    let out = node.ok_sh(&format!(
        "a=$(date +%s%N); {script} >/tmp/out 2>&1 || {{ cat /tmp/out; exit 9; }}; b=$(date +%s%N); echo $((b - a))"
    ));
    Duration::from_nanos(out.trim().parse().expect("nanoseconds"))
}

fn mesh(state: &str, args: &str) -> String {
    format!("MESH_STATE_DIR=/srv/t/{state} /opt/mesh/mesh {args}")
}

fn main() {
    if !common::docker_here() {
        return;
    }
    let node = SystemdNode::boot("bench");

    // 1. Fifty files, twenty units.
    for v in 0..2 {
        node.declare(&format!("f{v}.ncl"), &fifty_files(v));
    }
    node.ok_sh(&mesh("state-f", "switch /srv/t/f0.ncl"));
    node.ok_sh(&mesh("state-f", "switch /srv/t/f1.ncl"));
    // The work of the switch, against the loop's: without the settle window, which is waiting
    // (the loop does not watch the units either); one switch with it, for its cost.
    let mut switch = Vec::new();
    for i in 0..RUNS {
        switch.push(timed(
            &node,
            &mesh(
                "state-f",
                &format!("switch /srv/t/f{}.ncl --settle 0", i % 2),
            ),
        ));
    }
    let settled = timed(
        &node,
        &mesh("state-f", &format!("switch /srv/t/f{}.ncl", RUNS % 2)),
    );
    let reloads: Vec<String> = (0..10).map(|n| format!("b{n}.service")).collect();
    let restarts: Vec<String> = (10..20).map(|n| format!("b{n}.service")).collect();
    let lp = format!(
        "for u in {}; do systemctl reload $u; done; for u in {}; do systemctl restart $u; done",
        reloads.join(" "),
        restarts.join(" ")
    );
    let mut shell = Vec::new();
    for _ in 0..RUNS {
        shell.push(timed(&node, &lp));
    }
    let (switch, shell) = (median(switch), median(shell));

    // 2. The no-op switch of 100 units against 100 plain files.
    node.declare("units.ncl", &hundred(false));
    node.declare("plain.ncl", &hundred(true));
    node.ok_sh(&mesh("state-u", "switch /srv/t/units.ncl"));
    node.ok_sh(&mesh("state-p", "switch /srv/t/plain.ncl"));
    let starts = || {
        let names: Vec<String> = (0..100).map(|n| format!("h{n}.service")).collect();
        node.ok_sh(&format!(
            "systemctl show -P ActiveEnterTimestampMonotonic {}",
            names.join(" ")
        ))
    };
    let before = starts();
    let out = node.ok_sh(&mesh("state-u", "switch /srv/t/units.ncl --json"));
    let json: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        json["systemd_jobs"], 0,
        "a no-op switch queued jobs: {json}"
    );
    let mut units = Vec::new();
    let mut plain = Vec::new();
    for _ in 0..RUNS {
        units.push(timed(&node, &mesh("state-u", "switch /srv/t/units.ncl")));
        plain.push(timed(&node, &mesh("state-p", "switch /srv/t/plain.ncl")));
    }
    assert_eq!(starts(), before, "a no-op switch restarted a unit");
    let (units, plain) = (median(units), median(plain));

    drop(node);
    let (reload, closed) = firewalld_reload();

    println!("services (systemd as PID 1 in a container; medians of {RUNS}, timed inside)");
    println!("| | time | ratio |");
    println!("|---|---|---|");
    println!(
        "| shell loop: systemctl reload x10, restart x10 (reference) | {} | 1.00x |",
        ms(shell)
    );
    println!(
        "| mesh switch --settle 0: 50 files changed, 20 units reloaded/restarted | {} | {:.2}x (target <= 1.2x) |",
        ms(switch),
        switch.as_secs_f64() / shell.as_secs_f64()
    );
    println!(
        "| the same switch with the default settle window ({} s), once | {} | {:.2}x |",
        mesh_switch::units::SETTLE.as_secs(),
        ms(settled),
        settled.as_secs_f64() / shell.as_secs_f64()
    );
    println!(
        "| no-op switch, 100 plain files (reference) | {} | 1.00x |",
        ms(plain)
    );
    println!(
        "| no-op switch, 100 declared units: 0 jobs | {} | {:.2}x, {} more (target < 10 ms) |",
        ms(units),
        units.as_secs_f64() / plain.as_secs_f64(),
        ms(units.saturating_sub(plain))
    );
    println!(
        "| firewall-cmd --reload on an adopted node (reference) | {} | 1.00x |",
        ms(reload)
    );
    println!(
        "| the mesh's opening closed by that reload, until reconcile --watch puts it back | {} | {:.2}x (target <= 1 s) |",
        ms(closed),
        closed.as_secs_f64() / reload.as_secs_f64()
    );
}

/// Section 3: a node adopted with firewalld running, the bus port opened through it and
/// `mesh reconcile --watch` running; per run, `firewall-cmd --reload` timed inside while the
/// port is probed from outside. Medians of (the reload, how long the port was closed).
fn firewalld_reload() -> (Duration, Duration) {
    use std::net::{SocketAddr, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    let node = SystemdNode::boot("benchfw");
    node.ok_sh("systemctl start firewalld.service");
    node.ok_sh("nohup /usr/bin/python3 -m http.server 4222 --bind 0.0.0.0 >/dev/null 2>&1 &");
    node.declare(
        "fw.ncl",
        &decl(
            "fw",
            "    { name = \"web\", config = fun s => { openings = [{ port = s.ports.bus, from = \"anywhere\", paths = ['incoming] }] } },",
        ),
    );
    node.ok_sh(&mesh("state-fw", "adopt /srv/t/fw.ncl"));
    node.ok_sh(&format!(
        "nohup sh -c '{}' >/dev/null 2>&1 &",
        mesh("state-fw", "reconcile --watch 3600")
    ));
    std::thread::sleep(Duration::from_millis(500));
    let at: SocketAddr = format!("{}:4222", node.address()).parse().unwrap();
    let reaches = || TcpStream::connect_timeout(&at, Duration::from_millis(50)).is_ok();
    assert!(reaches(), "the opening answers before the reloads");
    let (mut reloads, mut closed) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let stop = AtomicBool::new(false);
        let window = std::thread::scope(|s| {
            let probe = s.spawn(|| {
                let mut first_closed: Option<Instant> = None;
                let mut window = Duration::ZERO;
                while !stop.load(Ordering::SeqCst) || first_closed.is_some() {
                    let now = Instant::now();
                    match (reaches(), first_closed) {
                        (false, None) => first_closed = Some(now),
                        (true, Some(at)) => {
                            window += now.duration_since(at);
                            first_closed = None;
                        }
                        _ => {}
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                window
            });
            reloads.push(timed(&node, "firewall-cmd --reload"));
            // The probe goes on until the port answers again.
            std::thread::sleep(Duration::from_millis(200));
            stop.store(true, Ordering::SeqCst);
            probe.join().unwrap()
        });
        closed.push(window);
    }
    (median(reloads), median(closed))
}
