//! Services follow their configuration, against a real systemd running as PID 1 in a container
//! (see `systemd_node.rs`): a file's change reloads or restarts the units it configures, a
//! declared unit restarts when its file changes (not when only `[Install]` does), a no-op switch
//! makes no job, a held module's units are never touched until the take, a failing unit is
//! reported (and rolled back with the flag), and a crash between the renames and the jobs is
//! finished by the next switch. Units count what is done to them in files the test reads.

use crate::node_fixture::Fixture;
use crate::support::have_root_tools;
use crate::systemd_node::SystemdNode;

pub(crate) fn decl(modules: &str) -> String {
    format!(
        r#"let mesh = import "mesh.ncl" in
mesh.node {{
  name = "sd",
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

/// A service that counts its starts and reloads in /srv/t/NAME-starts and NAME-reloads.
pub(crate) fn counting_unit(name: &str, marker: &str, install: &str) -> String {
    format!(
        "[Unit]\nDescription={marker}\n[Service]\nExecStartPre=/bin/sh -c 'echo {marker} >> /srv/t/{name}-starts'\nExecStart=/usr/bin/sleep infinity\nExecReload=/bin/sh -c 'echo r >> /srv/t/{name}-reloads'\n[Install]\nWantedBy={install}\n"
    )
}

/// Nickel text for a string (a unit file's text).
pub(crate) fn ncl(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

pub(crate) fn tools() -> bool {
    have_root_tools(&["docker"])
}

/// A unit the test puts on the node as the predecessor would: written, enabled, started.
pub(crate) fn predecessor_unit(node: &SystemdNode, name: &str) {
    let text = counting_unit(name, "pred", "multi-user.target");
    std::fs::write(node.here(&format!("{name}.unit")), text).unwrap();
    node.ok_sh(&format!(
        "cp /srv/t/{name}.unit /etc/systemd/system/{name}.service && systemctl enable --now {name}.service"
    ));
}

/// A file's change reloads the running unit it configures, once; a no-op switch makes no job;
/// a dry run says what it would do and does nothing.
#[test]
fn a_changed_file_reloads_its_unit_and_a_no_op_asks_nothing() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("reload");
    predecessor_unit(&node, "pred");
    let module = |content: &str| {
        decl(&format!(
            r#"    {{ name = "conf", config = fun s => {{ files = [{{ path = "/etc/pred/pred.conf", content = "{content}", reloads = ["pred.service"] }}] }} }},"#
        ))
    };
    let v1 = node.declare("v1.ncl", &module("one\\n"));
    let ran = node.ok(&["switch", &v1]);
    assert!(
        ran.stdout
            .contains("reload   pred.service: /etc/pred/pred.conf created"),
        "{}",
        ran.stdout
    );
    assert_eq!(node.count("pred-reloads"), 1);

    let again = node.ok(&["switch", &v1, "--json"]);
    let out: serde_json::Value = serde_json::from_str(again.stdout.trim()).unwrap();
    assert!(out["services"].get("jobs").is_none(), "{out}");
    assert_eq!(
        node.count("pred-reloads"),
        1,
        "a no-op switch reloads nothing"
    );

    let v2 = node.declare("v2.ncl", &module("two\\n"));
    let dry = node.ok(&["switch", &v2, "--dry-run"]);
    assert!(
        dry.stdout
            .contains("reload   pred.service: /etc/pred/pred.conf changed"),
        "{}",
        dry.stdout
    );
    assert_eq!(node.count("pred-reloads"), 1, "a dry run reloads nothing");
    let dry: serde_json::Value = serde_json::from_str(
        node.ok(&["switch", &v2, "--dry-run", "--json"])
            .stdout
            .trim(),
    )
    .unwrap();
    assert_eq!(
        dry["services"]["jobs"],
        serde_json::json!([{ "unit": "pred.service", "verb": "reload", "because": ["/etc/pred/pred.conf changed"] }])
    );
    node.ok(&["switch", &v2]);
    assert_eq!(node.count("pred-reloads"), 2);
    let diff = node.ok(&["diff"]).stdout;
    assert!(
        diff.contains("unit pred.service: reload if it runs: /etc/pred/pred.conf changes"),
        "{diff}"
    );
    assert_eq!(node.count("pred-starts"), 1, "reloaded, never restarted");
    assert_eq!(node.property("pred.service", "ActiveState"), "active");
}

/// A file may name a unit by one of its aliases (Debian's `sshd.service` is `ssh.service`):
/// systemd answers for the unit it is, and the reload reaches it — one job on the unit systemd
/// runs, however many names the changed files give it.
#[test]
fn a_unit_named_by_its_alias_is_reloaded() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("alias");
    let text = counting_unit("real", "pred", "multi-user.target\nAlias=nick.service");
    std::fs::write(node.here("real.unit"), text).unwrap();
    node.ok_sh(
        "cp /srv/t/real.unit /etc/systemd/system/real.service && systemctl enable --now real.service",
    );
    let module = |content: &str| {
        decl(&format!(
            r#"    {{ name = "conf", config = fun s => {{ files = [{{ path = "/etc/real/real.conf", content = "{content}", reloads = ["nick.service"] }}, {{ path = "/etc/real/other.conf", content = "{content}", reloads = ["real.service"] }}] }} }},"#
        ))
    };
    let v1 = node.declare("v1.ncl", &module("one\n"));
    let ran = node.ok(&["switch", &v1, "--json"]);
    let out: serde_json::Value = serde_json::from_str(ran.stdout.trim()).unwrap();
    assert_eq!(
        out["services"]["jobs"],
        serde_json::json!([{ "unit": "real.service", "verb": "reload", "because": ["/etc/real/other.conf created", "/etc/real/real.conf created"] }]),
        "one job, on the unit systemd runs"
    );
    assert_eq!(node.count("real-reloads"), 1);
    let v2 = node.declare("v2.ncl", &module("two\n"));
    let ran = node.ok(&["switch", &v2]);
    assert!(
        ran.stdout.contains(
            "reload   real.service: /etc/real/other.conf changed; /etc/real/real.conf changed"
        ),
        "{}",
        ran.stdout
    );
    assert_eq!(node.count("real-reloads"), 2);
    assert_eq!(node.count("real-starts"), 1, "reloaded, never restarted");
}

/// A declared unit: written, enabled, started; restarted when its file changes outside
/// `[Install]`, enabled anew (not restarted) when only `[Install]` changes, reloaded when it
/// asks for that; stopped, disabled and its file removed when no longer declared.
#[test]
fn a_declared_unit_follows_its_file() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("unit");
    let module = |marker: &str, install: &str, on_change: &str| {
        decl(&format!(
            r#"    {{ name = "app", config = fun s => {{ units = [{{ name = "app.service", text = {}, on_change = '{on_change} }}] }} }},"#,
            ncl(&counting_unit("app", marker, install))
        ))
    };
    let switch = |name: &str, text: String| {
        let path = node.declare(name, &text);
        node.ok(&["switch", &path])
    };
    switch("v1.ncl", module("one", "multi-user.target", "restart"));
    assert_eq!(node.property("app.service", "ActiveState"), "active");
    assert_eq!(
        node.ok_sh("systemctl is-enabled app.service").trim(),
        "enabled"
    );
    assert_eq!(node.count("app-starts"), 1);

    let ran = switch("v2.ncl", module("two", "multi-user.target", "restart"));
    assert!(
        ran.stdout
            .contains("restart  app.service: its unit file changed"),
        "{}",
        ran.stdout
    );
    assert_eq!(node.count("app-starts"), 2, "restarted once");
    let diff = node.ok(&["diff"]).stdout;
    assert!(
        diff.contains("unit app.service: its unit file changes: restarted if it runs"),
        "{diff}"
    );

    switch("v3.ncl", module("two", "basic.target", "restart"));
    assert_eq!(
        node.count("app-starts"),
        2,
        "an [Install] change restarts nothing"
    );
    node.ok_sh("test -L /etc/systemd/system/basic.target.wants/app.service");
    node.ok_sh("test ! -e /etc/systemd/system/multi-user.target.wants/app.service");

    switch("v4.ncl", module("three", "basic.target", "reload"));
    assert_eq!(node.count("app-starts"), 2);
    assert_eq!(node.count("app-reloads"), 1, "reloaded, as on_change says");

    let none = node.declare("none.ncl", &decl(""));
    node.ok(&["switch", &none]);
    assert_eq!(node.property("app.service", "ActiveState"), "inactive");
    node.ok_sh("test ! -e /etc/systemd/system/app.service");
    node.ok_sh("test ! -e /etc/systemd/system/basic.target.wants/app.service");
}

/// On an adopted node a held module's units are never reloaded, restarted, started or
/// stopped — even when its declaration changes; the take ends with the reloads and restarts its
/// files call for; a rollback across the take does the same for the restored originals.
#[test]
fn held_until_taken_then_reloaded_and_back() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("held");
    predecessor_unit(&node, "other");
    predecessor_unit(&node, "app");
    node.ok_sh("mkdir -p /etc/other && printf 'theirs\\n' > /etc/other/other.conf");
    let app_pid = node.property("app.service", "MainPID");
    let module = |conf: &str| {
        decl(&format!(
            r#"    {{ name = "conf", config = fun s => {{ files = [{{ path = "/etc/other/other.conf", content = "{conf}", reloads = ["other.service"] }}] }} }},
    {{ name = "app", config = fun s => {{ units = [{{ name = "app.service", text = {} }}] }} }},"#,
            ncl(&counting_unit("app", "mesh", "multi-user.target"))
        ))
    };
    let v1 = node.declare("v1.ncl", &module("ours\\n"));
    node.ok(&["adopt", &v1]);
    let v2 = node.declare("v2.ncl", &module("ours, changed\\n"));
    let ran = node.ok(&["switch", &v2]);
    assert_eq!(node.count("other-reloads"), 0, "held: {}", ran.stdout);
    assert_eq!(node.property("app.service", "MainPID"), app_pid, "held");
    assert_eq!(node.count("app-starts"), 1);
    assert_eq!(node.ok_sh("cat /etc/other/other.conf"), "theirs\n");

    let ran = node.ok(&["take", "conf"]);
    assert!(
        ran.stdout
            .contains("reload   other.service: /etc/other/other.conf taken"),
        "{}",
        ran.stdout
    );
    assert_eq!(node.count("other-reloads"), 1, "the take reloads");
    assert_eq!(
        node.property("app.service", "MainPID"),
        app_pid,
        "app still held"
    );

    node.ok(&["take", "app"]);
    assert_ne!(
        node.property("app.service", "MainPID"),
        app_pid,
        "restarted"
    );
    assert_eq!(
        std::fs::read_to_string(node.here("app-starts")).unwrap(),
        "pred\nmesh\n",
        "the mesh's unit file runs"
    );

    node.ok(&["rollback"]);
    assert_eq!(
        std::fs::read_to_string(node.here("app-starts")).unwrap(),
        "pred\nmesh\npred\n",
        "the found unit file is back and runs"
    );
    assert_eq!(
        node.ok_sh("cat /etc/systemd/system/app.service"),
        std::fs::read_to_string(node.here("app.unit")).unwrap()
    );
    node.ok(&["rollback", "--to", "2"]);
    assert_eq!(node.ok_sh("cat /etc/other/other.conf"), "theirs\n");
    assert_eq!(
        node.count("other-reloads"),
        2,
        "the restored original reloads"
    );
}

/// A unit that fails after the switch: exit 3, the unit, its last log lines and the generation
/// to go back to named; with --rollback-on-failure the node goes back by itself and says so.
#[test]
fn a_failing_unit_is_reported_and_rolled_back_with_the_flag() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("fail");
    let good = format!(
        r#"    {{ name = "good", config = fun s => {{ units = [{{ name = "good.service", text = {} }}] }} }},"#,
        ncl(&counting_unit("good", "good", "multi-user.target"))
    );
    let bad = r#"    { name = "bad", config = fun s => { units = [{ name = "bad.service", text = "[Service]\nType=exec\nExecStart=/nonexistent/bad-binary\n[Install]\nWantedBy=multi-user.target\n" }] } },"#;
    let a = node.declare("a.ncl", &decl(&good));
    let b = node.declare("b.ncl", &decl(&format!("{good}\n{bad}")));
    node.ok(&["switch", &a]);
    let first = node.current();

    let failed = node.mesh(&["switch", &b]);
    assert_eq!(failed.code, 3, "{}{}", failed.stdout, failed.stderr);
    assert!(
        failed.stderr.contains("start bad.service"),
        "{}",
        failed.stderr
    );
    assert!(
        failed.stderr.contains("its last log lines") && failed.stderr.contains("203/EXEC"),
        "its log: {}",
        failed.stderr
    );
    assert!(failed.stderr.contains(&first[..15]), "{}", failed.stderr);
    assert_ne!(
        node.current(),
        first,
        "the switch is committed, and reported"
    );

    node.ok(&["switch", &a]);
    let back = node.mesh(&["switch", &b, "--rollback-on-failure"]);
    assert_ne!(back.code, 0);
    assert!(back.stderr.contains("rolled back"), "{}", back.stderr);
    assert_eq!(node.current(), first, "back in the generation before");
    assert_ne!(node.property("bad.service", "ActiveState"), "active");
    assert_eq!(node.property("good.service", "ActiveState"), "active");
}

/// A switch crashed after its files changed and before (or between) its jobs: the next switch
/// finishes it, and the unit picks the change up.
#[test]
fn a_crash_between_renames_and_jobs_is_finished() {
    if !tools() || !crate::support::crash_points_here() {
        return;
    }
    let node = SystemdNode::boot("crash");
    predecessor_unit(&node, "pred");
    let module = |content: &str| {
        decl(&format!(
            r#"    {{ name = "conf", config = fun s => {{ files = [{{ path = "/etc/pred/pred.conf", content = "{content}", reloads = ["pred.service"] }}] }} }},"#
        ))
    };
    let v0 = node.declare("v0.ncl", &module("zero\\n"));
    node.ok(&["switch", &v0]);
    let mut crashed = 0;
    for (i, point) in ["file-applied", "services-reloaded", "service-jobs-done"]
        .into_iter()
        .enumerate()
    {
        let next = node.declare(&format!("c{i}.ncl"), &module(&format!("version {i}\\n")));
        let before = node.count("pred-reloads");
        let ran = node.mesh_env(&[("MESH_CRASH_AT", point)], &["switch", &next]);
        if ran.code == 134 {
            crashed += 1;
        } else {
            panic!("{point}: not reached ({}): {}", ran.code, ran.stderr);
        }
        node.ok(&["switch", &next]);
        assert!(
            node.count("pred-reloads") > before,
            "{point}: the reload was lost"
        );
        assert_eq!(
            node.ok_sh("cat /etc/pred/pred.conf"),
            format!("version {i}\n")
        );
        node.ok_sh("test ! -e /srv/t/state/journal.json");
        assert_eq!(node.property("pred.service", "ActiveState"), "active");
    }
    assert_eq!(crashed, 3);
}

/// No systemd answers (PID 1 is not systemd): a generation with units the mesh must run is
/// refused with nothing changed; one whose files only name units goes on with the files and
/// says that the units are not driven.
#[test]
fn without_systemd_units_are_refused_and_triggers_said() {
    if !tools() {
        return;
    }
    let node = SystemdNode::without_systemd("none");
    let unit = node.declare(
        "unit.ncl",
        &decl(
            r#"    { name = "app", config = fun s => { files = [{ path = "/etc/app.conf", content = "x\n" }], units = [{ name = "app.service", text = "[Service]\nExecStart=/usr/bin/sleep infinity\n" }] } },"#,
        ),
    );
    let ran = node.mesh(&["switch", &unit]);
    assert_eq!(ran.code, 3, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr.contains("systemd does not answer"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("nothing was changed"), "{}", ran.stderr);
    node.ok_sh("test ! -e /etc/app.conf && test ! -e /etc/systemd/system/app.service");

    let trigger = node.declare(
        "trigger.ncl",
        &decl(
            r#"    { name = "conf", config = fun s => { files = [{ path = "/etc/pred.conf", content = "x\n", reloads = ["pred.service"] }] } },"#,
        ),
    );
    let ran = node.ok(&["switch", &trigger]);
    assert!(
        ran.stdout.contains("services are not driven here")
            && ran.stdout.contains("systemd does not answer"),
        "{}",
        ran.stdout
    );
    assert_eq!(node.ok_sh("cat /etc/pred.conf"), "x\n");
}

/// Under a root that is not `/`, this machine's systemd is not asked: the switch says what a
/// switch on the node would do.
#[test]
fn under_another_root_units_are_not_driven() {
    if !have_root_tools(&[]) {
        return;
    }
    let f = Fixture::new();
    f.write_decl(
        "u.ncl",
        &decl(
            r#"    { name = "conf", config = fun s => { files = [{ path = "/etc/x.conf", content = "x\n", reloads = ["x.service"] }] } },"#,
        ),
    );
    let ran = f.ok(&["switch", f.decl("u.ncl").to_str().unwrap()]);
    assert!(
        ran.stdout
            .contains("services are not driven here (the root is")
            && ran
                .stdout
                .contains("reload   x.service: /etc/x.conf created"),
        "{}",
        ran.stdout
    );
}

/// Seventy units started by one switch: every job is waited for (the signals are read while the
/// jobs are queued; a stream left unread stops the connection after 64 messages).
#[test]
fn seventy_units_start_in_one_switch() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("many");
    let units: String = (0..70)
        .map(|n| {
            format!(
                "{{ name = \"m{n}.service\", text = \"[Service]\\nExecStart=/usr/bin/sleep infinity\\n\" }},"
            )
        })
        .collect();
    let path = node.declare(
        "many.ncl",
        &decl(&format!(
            "    {{ name = \"many\", config = fun s => {{ units = [{units}] }} }},"
        )),
    );
    let ran = node.mesh_env(&[("MESH_JOB_TIMEOUT", "60")], &["switch", &path, "--json"]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let out: serde_json::Value = serde_json::from_str(ran.stdout.trim()).unwrap();
    assert_eq!(out["systemd_jobs"], 70);
    let active = node.ok_sh("systemctl list-units --state=active --no-legend 'm*.service' | wc -l");
    assert_eq!(active.trim(), "70");
}

/// Every job is waited for within a bound (MESH_JOB_TIMEOUT): a reload that does not end in
/// time is reported as not finished, naming the unit, and the switch does not hang.
#[test]
fn a_job_past_its_bound_is_reported() {
    if !tools() {
        return;
    }
    let node = SystemdNode::boot("bound");
    node.ok_sh(
        "printf '[Service]\\nExecStart=/usr/bin/sleep infinity\\nExecReload=/usr/bin/sleep 60\\n' > /etc/systemd/system/slow.service && systemctl daemon-reload && systemctl start slow.service",
    );
    let module = |content: &str| {
        decl(&format!(
            r#"    {{ name = "conf", config = fun s => {{ files = [{{ path = "/etc/slow.conf", content = "{content}", reloads = ["slow.service"] }}] }} }},"#
        ))
    };
    let v1 = node.declare("v1.ncl", &module("one\\n"));
    let started = std::time::Instant::now();
    let ran = node.mesh_env(&[("MESH_JOB_TIMEOUT", "2")], &["switch", &v1]);
    assert_eq!(ran.code, 3, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr.contains("reload slow.service: not finished"),
        "{}",
        ran.stderr
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}
