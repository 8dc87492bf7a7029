//! Units at the edges, against a real systemd as PID 1 (see `systemd_node.rs`): a switch killed
//! in its unit phase is finished by the next switch and by a rollback; a unit that goes stops
//! with its own definition; a timer and its service go together and nothing is left failed;
//! templates run as their instances; slices, targets, sockets and mounts pick up their changes
//! as their kind calls for; a unit that dies within the settle window is reported, one that
//! exits cleanly and waits for its `Restart=` is not (switched, or deployed over SSH).

use crate::services::{counting_unit, decl, ncl, tools};
use crate::systemd_node::SystemdNode;

/// A unit declared in module `module`, as Nickel.
fn module(module: &str, units: &[(&str, String)]) -> String {
    let list: Vec<String> = units
        .iter()
        .map(|(name, text)| format!("{{ name = \"{name}\", text = {} }}", ncl(text)))
        .collect();
    format!(
        "    {{ name = \"{module}\", config = fun s => {{ units = [{}] }} }},",
        list.join(", ")
    )
}

fn enabled(node: &SystemdNode, unit: &str) -> String {
    node.sh(&format!("systemctl is-enabled {unit}"))
        .stdout
        .trim()
        .to_owned()
}

fn last_line(node: &SystemdNode, file: &str) -> String {
    std::fs::read_to_string(node.here(file))
        .unwrap_or_default()
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

/// A service that takes two seconds to stop, and says it did in /srv/t/slow-stops.
const SLOW: &str = "[Unit]\nDescription=slow\n[Service]\nExecStart=/usr/bin/sleep infinity\nExecStop=/bin/sh -c 'sleep 2; echo stopped >> /srv/t/slow-stops'\n[Install]\nWantedBy=multi-user.target\n";

/// Killed at each point of its unit phase — after the stops, after daemon-reload, after each
/// group of jobs, and for real (SIGKILL) while a unit takes seconds to stop — a switch that
/// removes one unit, changes another and adds a third is finished by the next `switch`, and
/// separately by a `rollback` to the generation before it: every declared unit as that
/// generation says, a unit that stayed never restarted, the journal gone, exit 0.
#[test]
fn a_crash_in_the_unit_phase_is_finished_by_switch_and_by_rollback() {
    if !tools() || !crate::support::crash_points_here() {
        return;
    }
    let node = SystemdNode::boot("unitcrash");
    let keep = counting_unit("keep", "keep", "multi-user.target");
    let a = node.declare(
        "a.ncl",
        &decl(&module(
            "app",
            &[
                ("slow.service", SLOW.to_owned()),
                (
                    "changed.service",
                    counting_unit("changed", "A", "multi-user.target"),
                ),
                ("keep.service", keep.clone()),
            ],
        )),
    );
    let b = node.declare(
        "b.ncl",
        &decl(&module(
            "app",
            &[
                (
                    "changed.service",
                    counting_unit("changed", "B", "multi-user.target"),
                ),
                (
                    "fresh.service",
                    counting_unit("fresh", "fresh", "multi-user.target"),
                ),
                ("keep.service", keep),
            ],
        )),
    );
    let settle = [("MESH_SETTLE", "1")];
    let ok = |args: &[&str]| {
        let ran = node.mesh_env(&settle, args);
        assert_eq!(ran.code, 0, "mesh {args:?}:\n{}{}", ran.stdout, ran.stderr);
        ran
    };
    ok(&["switch", &a]);
    let keep_pid = node.property("keep.service", "MainPID");
    let check_a = |after: &str| {
        assert_eq!(
            node.property("slow.service", "ActiveState"),
            "active",
            "{after}"
        );
        assert_eq!(enabled(&node, "slow.service"), "enabled", "{after}");
        assert_eq!(
            node.property("fresh.service", "LoadState"),
            "not-found",
            "{after}"
        );
        node.ok_sh("test ! -e /etc/systemd/system/fresh.service");
        assert_eq!(
            node.property("changed.service", "ActiveState"),
            "active",
            "{after}"
        );
        assert_eq!(last_line(&node, "changed-starts"), "A", "{after}");
        assert_eq!(
            node.property("keep.service", "MainPID"),
            keep_pid,
            "{after}"
        );
        node.ok_sh("test ! -e /srv/t/state/journal.json");
    };
    let check_b = |after: &str| {
        assert_eq!(
            node.property("slow.service", "ActiveState"),
            "inactive",
            "{after}"
        );
        node.ok_sh("test ! -e /etc/systemd/system/slow.service");
        node.ok_sh("test ! -e /etc/systemd/system/multi-user.target.wants/slow.service");
        assert_eq!(
            node.property("fresh.service", "ActiveState"),
            "active",
            "{after}"
        );
        assert_eq!(enabled(&node, "fresh.service"), "enabled", "{after}");
        assert_eq!(
            node.property("changed.service", "ActiveState"),
            "active",
            "{after}"
        );
        assert_eq!(last_line(&node, "changed-starts"), "B", "{after}");
        assert_eq!(
            node.property("keep.service", "MainPID"),
            keep_pid,
            "{after}"
        );
        node.ok_sh("test ! -e /srv/t/state/journal.json");
    };
    check_a("the first switch");

    // Killed for real while slow.service takes its seconds to stop.
    let kill = || {
        node.ok_sh(&format!(
            "MESH_STATE_DIR=/srv/t/state MESH_SETTLE=1 setsid /opt/mesh/mesh switch {b} >/srv/t/killed.log 2>&1 &"
        ));
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while node.property("slow.service", "ActiveState") != "deactivating" {
            assert!(
                std::time::Instant::now() < until,
                "slow.service never stopping: {}",
                std::fs::read_to_string(node.here("killed.log")).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // `[/]`: the pattern does not match the shell that runs pkill.
        node.ok_sh("pkill -KILL -f '[/]opt/mesh/mesh switch'");
        node.ok_sh("test -e /srv/t/state/journal.json");
    };
    let points = [
        "services-stopped",
        "services-reloaded",
        "service-jobs-done:1",
        "service-jobs-done:2",
        "killed while a unit stops",
    ];
    for point in points {
        let crash = || {
            if point.starts_with("killed") {
                kill();
            } else {
                let ran = node.mesh_env(&[("MESH_CRASH_AT", point), settle[0]], &["switch", &b]);
                assert_eq!(
                    ran.code, 134,
                    "{point}: not reached: {}{}",
                    ran.stdout, ran.stderr
                );
            }
        };
        let stops = node.count("slow-stops");
        crash();
        ok(&["switch", &b]);
        check_b(&format!("switch after {point}"));
        assert!(
            node.count("slow-stops") > stops,
            "{point}: slow.service stopped without its ExecStop"
        );

        ok(&["switch", &a]);
        check_a(&format!("switch back before {point}"));
        let (number, _) = current_number(&node);
        crash();
        ok(&["rollback", "--to", &number.to_string()]);
        check_a(&format!("rollback after {point}"));
    }
}

/// The number of the generation in force, and its id.
fn current_number(node: &SystemdNode) -> (u64, String) {
    let out = node.ok(&["generations", "--json"]).stdout;
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    v["generations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["current"] == true)
        .map(|g| {
            (
                g["number"].as_u64().unwrap(),
                g["id"].as_str().unwrap().to_owned(),
            )
        })
        .expect("a current generation")
}

/// A unit no longer declared is stopped while systemd still has its definition (its
/// `ExecStop=` runs), and only then its file goes; so is a unit staged again by a rollback
/// across its take.
#[test]
fn a_unit_that_goes_stops_with_its_own_definition() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("unitgoes");
    let with = node.declare(
        "with.ncl",
        &decl(&module("app", &[("slow.service", SLOW.to_owned())])),
    );
    let without = node.declare("without.ncl", &decl(""));
    node.ok(&["switch", &with]);
    assert_eq!(node.property("slow.service", "ActiveState"), "active");
    node.ok(&["switch", &without]);
    assert_eq!(node.count("slow-stops"), 1, "its ExecStop ran");
    node.ok_sh("test ! -e /etc/systemd/system/slow.service");

    // Adopted (a node of its own: another state directory): the module is staged until its
    // take; back across the take it is staged again.
    let adopted = |args: &[&str]| {
        let ran = node.mesh_env(&[("MESH_STATE_DIR", "/srv/t/adopted")], args);
        assert_eq!(ran.code, 0, "mesh {args:?}:\n{}{}", ran.stdout, ran.stderr);
    };
    let adopt = node.declare(
        "adopt.ncl",
        &decl(&module("app", &[("slow.service", SLOW.to_owned())])),
    );
    adopted(&["adopt", &adopt]);
    assert_ne!(
        node.property("slow.service", "ActiveState"),
        "active",
        "staged"
    );
    adopted(&["take", "app"]);
    assert_eq!(node.property("slow.service", "ActiveState"), "active");
    adopted(&["rollback"]);
    assert_eq!(
        node.count("slow-stops"),
        2,
        "staged again: stopped with its ExecStop"
    );
    assert_ne!(node.property("slow.service", "ActiveState"), "active");
}

/// A timer and its service removed together: the timer is stopped first, nothing is left
/// failed (no `Unit to trigger vanished`), exit 0. A unit that the switch leaves failing — a
/// timer's service that fails when the timer fires, without a job of the switch's own — is
/// reported, exit 3.
#[test]
fn a_timer_and_its_service_go_and_nothing_is_left_failed() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("timer");
    let timer = "[Timer]\nOnCalendar=daily\n[Install]\nWantedBy=timers.target\n";
    let service = "[Service]\nType=oneshot\nExecStart=/usr/bin/true\n";
    let with = node.declare(
        "with.ncl",
        &decl(&format!(
            "    {{ name = \"tick\", config = fun s => {{ units = [{{ name = \"tick.timer\", text = {} }}, {{ name = \"tick.service\", text = {}, started = false, enabled = false }}] }} }},",
            ncl(timer),
            ncl(service)
        )),
    );
    node.ok(&["switch", &with]);
    assert_eq!(node.property("tick.timer", "ActiveState"), "active");
    let without = node.declare("without.ncl", &decl(""));
    node.ok(&["switch", &without]);
    let failed = node.sh("systemctl list-units --failed --no-legend --plain");
    assert!(
        failed.stdout.trim().is_empty(),
        "left failed: {}",
        failed.stdout
    );

    // A timer that fires a second after the switch, its service failing.
    let beat = node.declare(
        "beat.ncl",
        &decl(&format!(
            "    {{ name = \"beat\", config = fun s => {{ units = [{{ name = \"beat.timer\", text = {} }}, {{ name = \"beat.service\", text = {}, started = false, enabled = false }}] }} }},",
            ncl("[Timer]\nOnActiveSec=1\n"),
            ncl("[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo beat gives up; exit 3'\n")
        )),
    );
    let ran = node.mesh(&["switch", &beat]);
    assert_eq!(ran.code, 3, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr
            .contains("beat.service: left failed by the switch")
            && ran.stderr.contains("beat gives up"),
        "{}",
        ran.stderr
    );
}

/// A template is declarable: its file written, its instances enabled and started by name; a
/// change of the template restarts its running instances (one started by hand too); a drop-in
/// for one instance restarts that one only; an instance no longer declared is stopped and
/// disabled.
#[test]
fn a_template_runs_as_its_instances() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("template");
    let template = |marker: &str| {
        format!(
            "[Service]\nExecStartPre=/bin/sh -c 'echo {marker} >> /srv/t/%i-starts'\nExecStart=/usr/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n"
        )
    };
    let declare = |name: &str, marker: &str, instances: &str, drop_in: &str| {
        let files = if drop_in.is_empty() {
            String::new()
        } else {
            format!(
                ", files = [{{ path = \"/etc/systemd/system/echo@one.service.d/10-mesh.conf\", content = {} }}]",
                ncl(drop_in)
            )
        };
        node.declare(
            name,
            &decl(&format!(
                "    {{ name = \"echo\", config = fun s => {{ units = [{{ name = \"echo@.service\", text = {}, instances = [{instances}] }}]{files} }} }},",
                ncl(&template(marker))
            )),
        )
    };
    let v1 = declare("v1.ncl", "v1", "\"one\", \"two\"", "");
    node.ok(&["switch", &v1]);
    for i in ["one", "two"] {
        assert_eq!(
            node.property(&format!("echo@{i}.service"), "ActiveState"),
            "active"
        );
        assert_eq!(enabled(&node, &format!("echo@{i}.service")), "enabled");
        assert_eq!(node.count(&format!("{i}-starts")), 1);
    }
    node.ok_sh("systemctl start echo@three.service");

    let v2 = declare("v2.ncl", "v2", "\"one\", \"two\"", "");
    let ran = node.ok(&["switch", &v2]);
    for i in ["one", "two", "three"] {
        assert_eq!(
            last_line(&node, &format!("{i}-starts")),
            "v2",
            "echo@{i} restarted: {}",
            ran.stdout
        );
    }

    let v3 = declare(
        "v3.ncl",
        "v2",
        "\"one\", \"two\"",
        "[Service]\nEnvironment=X=1\n",
    );
    node.ok(&["switch", &v3]);
    assert_eq!(
        node.count("one-starts"),
        3,
        "the drop-in's instance restarted"
    );
    assert_eq!(node.count("two-starts"), 2, "the others not");
    assert_eq!(node.count("three-starts"), 2);

    let v4 = declare("v4.ncl", "v2", "\"one\"", "[Service]\nEnvironment=X=1\n");
    node.ok(&["switch", &v4]);
    assert_eq!(node.property("echo@two.service", "ActiveState"), "inactive");
    assert_ne!(enabled(&node, "echo@two.service"), "enabled");
    assert_eq!(node.property("echo@one.service", "ActiveState"), "active");
}

/// Each kind as systemd users expect: a slice's resource change is read by systemd (its
/// services not restarted); a target's change restarts neither it nor what is bound to it; a
/// socket that listens elsewhere while its service runs ends listening on the new address; a
/// mount whose options change is remounted (its content stays), one whose source changes is
/// mounted again.
#[test]
fn each_kind_picks_up_its_change() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("kinds");
    let declare = |name: &str, tasks: u32, target: &str, port: u16, options: &str, what: &str| {
        let units = [
            ("meshtest.slice", format!("[Slice]\nTasksMax={tasks}\n")),
            (
                "inslice.service",
                "[Service]\nSlice=meshtest.slice\nExecStart=/usr/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n".to_owned(),
            ),
            ("app.target", format!("[Unit]\nDescription={target}\n")),
            (
                "bound.service",
                "[Unit]\nPartOf=app.target\n[Service]\nExecStart=/usr/bin/sleep infinity\n[Install]\nWantedBy=app.target\n".to_owned(),
            ),
            (
                "echo.socket",
                format!("[Socket]\nListenStream=127.0.0.1:{port}\n[Install]\nWantedBy=sockets.target\n"),
            ),
            (
                "echo.service",
                "[Service]\nExecStart=/usr/bin/sleep infinity\n".to_owned(),
            ),
            (
                "mnt-x.mount",
                format!("[Mount]\nWhat={what}\nWhere=/mnt/x\nType=tmpfs\nOptions={options}\n"),
            ),
        ];
        node.declare(name, &decl(&module("kinds", &units)))
    };
    let v1 = declare("v1.ncl", 100, "one", 7001, "size=1m", "tmpfs");
    node.ok(&["switch", &v1]);
    let pids = |units: &[&str]| -> Vec<String> {
        units.iter().map(|u| node.property(u, "MainPID")).collect()
    };
    let kept = pids(&["inslice.service", "bound.service"]);
    assert_eq!(node.property("meshtest.slice", "TasksMax"), "100");
    assert!(node.ok_sh("ss -ltn").contains("127.0.0.1:7001"));
    node.ok_sh("echo kept > /mnt/x/f");

    // The slice and the target change; the socket listens elsewhere; the mount's options.
    let v2 = declare("v2.ncl", 200, "two", 7002, "size=2m", "tmpfs");
    let ran = node.ok(&["switch", &v2]);
    // systemd's own value: this container's cgroup controllers are the host's (cgroup v1, not
    // delegated), so the kernel's file is not there to read.
    assert_eq!(
        node.property("meshtest.slice", "TasksMax"),
        "200",
        "{}",
        ran.stdout
    );
    assert_eq!(
        pids(&["inslice.service", "bound.service"]),
        kept,
        "nothing in the slice or bound to the target restarted: {}",
        ran.stdout
    );
    assert_eq!(node.property("app.target", "ActiveState"), "active");
    let listening = node.ok_sh("ss -ltn");
    assert!(
        listening.contains("127.0.0.1:7002") && !listening.contains("127.0.0.1:7001"),
        "{listening}\n{}",
        ran.stdout
    );
    assert_eq!(node.property("echo.service", "ActiveState"), "active");
    assert!(
        node.ok_sh("findmnt -no OPTIONS /mnt/x")
            .contains("size=2048k"),
        "remounted"
    );
    assert_eq!(
        node.ok_sh("cat /mnt/x/f"),
        "kept\n",
        "remounted, not unmounted"
    );

    // The mount's source changes: mounted again.
    let v3 = declare("v3.ncl", 200, "two", 7002, "size=2m", "meshfs");
    node.ok(&["switch", &v3]);
    assert_eq!(node.ok_sh("findmnt -no SOURCE /mnt/x").trim(), "meshfs");
    node.ok_sh("test ! -e /mnt/x/f");
}

/// A unit that starts and dies a second later, and one that dies and waits to be restarted,
/// are reported after the settle window as a failed job is (exit 3, naming them and how their
/// process ended); with
/// `--settle 0` the switch does not wait and says nothing; `--rollback-on-failure` goes back;
/// a deploy armed on the node reverts by itself, saying which unit.
#[test]
fn a_unit_that_dies_within_the_settle_window_is_reported() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("settle");
    let good = module(
        "good",
        &[(
            "good.service",
            counting_unit("good", "good", "multi-user.target"),
        )],
    );
    let dies = module(
        "dies",
        &[
            (
                "dies.service",
                "[Service]\nExecStart=/bin/sh -c 'sleep 1; echo dies now; exit 1'\n".to_owned(),
            ),
            (
                "loops.service",
                "[Service]\nExecStart=/bin/sh -c 'sleep 1; exit 1'\nRestart=on-failure\nRestartSec=10\n"
                    .to_owned(),
            ),
        ],
    );
    let a = node.declare("a.ncl", &decl(&good));
    let b = node.declare("b.ncl", &decl(&format!("{good}\n{dies}")));
    node.ok(&["switch", &a]);
    let (_, first) = current_number(&node);

    let ran = node.mesh(&["switch", &b]);
    assert_eq!(ran.code, 3, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr
            .contains("start dies.service: failed after its job was done: its main process exited with status 1")
            && ran.stderr.contains("dies now"),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr
            .contains("start loops.service: failed after its job was done: its main process exited with status 1 (it waits to be restarted)"),
        "{}",
        ran.stderr
    );

    node.ok(&["switch", &a]);
    let quick = node.mesh(&["switch", &b, "--settle", "0"]);
    assert_eq!(
        quick.code, 0,
        "not watched: {}{}",
        quick.stdout, quick.stderr
    );

    node.ok(&["switch", &a]);
    let back = node.mesh(&["switch", &b, "--rollback-on-failure"]);
    assert_eq!(back.code, 3, "{}{}", back.stdout, back.stderr);
    assert!(back.stderr.contains("rolled back"), "{}", back.stderr);
    assert_eq!(current_number(&node).1, first);

    // A deploy: the node's agent switches, sees the unit die, and goes back by itself.
    let built = node.ok(&["build", &b]).stdout;
    let id = built.lines().last().unwrap().trim().to_owned();
    let armed = node.ok(&[
        "switch",
        "--generation",
        &id,
        "--confirm-within",
        "60",
        "--json",
    ]);
    let token = serde_json::from_str::<serde_json::Value>(armed.stdout.trim()).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let record = node.ok(&["deploys", &token, "--wait", "--json"]).stdout;
    let record: serde_json::Value = serde_json::from_str(record.trim()).unwrap();
    assert_eq!(record["state"], "reverted", "{record}");
    assert!(
        record["reason"].as_str().unwrap().contains("dies.service"),
        "{record}"
    );
    assert_eq!(current_number(&node).1, first);
}

/// A `Restart=always` service with a long `RestartSec=` whose process writes `marker` to
/// `/srv/t/NAME-runs` and exits with `status` at once; `extra` is more of its `[Service]`.
fn exits_at_once(name: &str, marker: &str, status: u8, extra: &str) -> String {
    format!(
        "[Unit]\nDescription={marker}\n[Service]\nExecStart=/bin/sh -c 'echo {marker} >> /srv/t/{name}-runs; exit {status}'\nRestart=always\nRestartSec=300\n{extra}"
    )
}

/// The module `work`: `periodic.service`, which exits 0 at once, and `listed.service`, which
/// exits 3 at once and lists 3 in its `SuccessExitStatus=`; both `Restart=always`, and
/// `marker` in what they write.
fn clean_work(marker: &str) -> String {
    module(
        "work",
        &[
            ("periodic.service", exits_at_once("periodic", marker, 0, "")),
            (
                "listed.service",
                exits_at_once("listed", marker, 3, "SuccessExitStatus=3\n"),
            ),
        ],
    )
}

/// What systemd says of a unit that waits for its restart: its sub-state, `Result` and exit
/// status.
fn waiting(node: &SystemdNode, unit: &str) -> (String, String, String) {
    (
        node.property(unit, "SubState"),
        node.property(unit, "Result"),
        node.property(unit, "ExecMainStatus"),
    )
}

/// A `Restart=always` service (`RestartSec=300`) whose process does its work and exits 0 at
/// once, and one that exits with a status its `SuccessExitStatus=` lists, wait for their
/// restart through the whole settle window with systemd's `Result` `success`: not a failure —
/// the switch exits 0 naming neither, and a second switch that restarts them exits 0 too. The
/// same service exiting 1 at once is a failure, as before: exit 3, named, with its status.
#[test]
fn a_unit_that_exits_cleanly_and_waits_for_its_restart_is_not_a_failure() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("cleanexit");
    let a = node.declare("a.ncl", &decl(&clean_work("A")));
    let ran = node.mesh(&["switch", &a]);
    let said = format!("{}{}", ran.stdout, ran.stderr);
    assert_eq!(ran.code, 0, "{said}");
    assert!(
        !said.contains("failed") && !said.contains("restarted"),
        "{said}"
    );
    // What the switch watched: both ran once and wait for their restart, cleanly.
    assert_eq!(node.count("periodic-runs"), 1);
    assert_eq!(node.count("listed-runs"), 1);
    assert_eq!(
        waiting(&node, "periodic.service"),
        ("auto-restart".into(), "success".into(), "0".into())
    );
    assert_eq!(
        waiting(&node, "listed.service"),
        ("auto-restart".into(), "success".into(), "3".into())
    );

    // Changed, both restarted (they wait for their restart: systemd has them activating).
    let a2 = node.declare("a2.ncl", &decl(&clean_work("A2")));
    let again = node.mesh(&["switch", &a2]);
    let said = format!("{}{}", again.stdout, again.stderr);
    assert_eq!(again.code, 0, "{said}");
    assert!(!said.contains("failed"), "{said}");
    assert_eq!(last_line(&node, "periodic-runs"), "A2");
    assert_eq!(last_line(&node, "listed-runs"), "A2");

    let fails = module(
        "fails",
        &[("fails.service", exits_at_once("fails", "F", 1, ""))],
    );
    let b = node.declare("b.ncl", &decl(&format!("{}\n{fails}", clean_work("A2"))));
    let failed = node.mesh(&["switch", &b]);
    assert_eq!(failed.code, 3, "{}{}", failed.stdout, failed.stderr);
    assert!(
        failed.stderr.contains(
            "start fails.service: failed after its job was done: its main process exited \
             with status 1 (it waits to be restarted)"
        ),
        "{}",
        failed.stderr
    );
    assert!(
        !failed.stderr.contains("periodic.service") && !failed.stderr.contains("listed.service"),
        "{}",
        failed.stderr
    );
    assert_eq!(
        waiting(&node, "fails.service"),
        ("auto-restart".into(), "exit-code".into(), "1".into())
    );
}

/// A deploy (`mesh deploy`, over real OpenSSH into the node) that adds a `Restart=always`
/// service whose process exits 0 at once is confirmed, not reverted: the node's agent watches
/// it wait for its restart through the settle window, cleanly, and the new generation stays in
/// force.
#[test]
fn a_deploy_of_a_unit_that_exits_cleanly_is_confirmed() {
    if !crate::support::have_root_tools(&["docker", "sshd", "ssh", "ssh-keygen"]) {
        return;
    }
    let node = SystemdNode::boot("cleandeploy");
    let good = module(
        "good",
        &[(
            "good.service",
            counting_unit("good", "good", "multi-user.target"),
        )],
    );
    let fleet = node.fleet(&decl(&good));
    let deploy = || {
        let out = fleet.mesh(&["deploy", "--json", "--confirm-timeout", "30"]);
        let sshd = std::fs::read_to_string(node.here("ssh/sshd.log")).unwrap_or_default();
        let said = format!("{}{}\nsshd: {sshd}", out.stdout, out.stderr);
        let json: serde_json::Value =
            serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {said}"));
        (out.code, json["nodes"][0].clone(), said)
    };
    let (code, row, said) = deploy();
    assert_eq!((code, &row["result"]), (0, &"confirmed".into()), "{said}");
    let before = node.current();

    fleet.declare(&decl(&format!("{good}\n{}", clean_work("D"))));
    let (code, row, said) = deploy();
    assert_eq!(code, 0, "{said}");
    assert_eq!(row["result"], "confirmed", "{said}");
    let after = node.current();
    assert_ne!(after, before, "{said}");
    assert_eq!(row["in_force"].as_str(), Some(after.as_str()), "{said}");
    let deploys = node.ok(&["deploys", "--json"]).stdout;
    let deploys: serde_json::Value = serde_json::from_str(deploys.trim()).unwrap();
    assert_eq!(deploys["deploys"][0]["state"], "confirmed", "{deploys}");
    assert_eq!(node.count("periodic-runs"), 1);
    assert_eq!(
        waiting(&node, "periodic.service"),
        ("auto-restart".into(), "success".into(), "0".into())
    );
}
