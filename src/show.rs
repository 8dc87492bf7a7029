//! Presenting a generation to a person.

use std::fmt::Write as _;

use mesh_lib::firewall::render_nft;
use mesh_lib::model::{FileState, Mode, Source, Summary, TrafficPath};
use mesh_lib::{Generation, GenerationId};

/// Two lines about a build.
pub fn summary(id: &GenerationId, g: &Summary, cached: bool) -> String {
    let (files, containers) = (g.files, g.containers);
    format!(
        "built generation {} of node {} ({}){}\n  {} modules; files: {} managed, {} staged, {} held; containers: {} managed, {} staged, {} held; {} openings",
        id.short(),
        g.node,
        g.mode,
        if cached { ", from the evaluation cache" } else { "" },
        g.modules,
        files.managed,
        files.staged,
        files.held,
        containers.managed,
        containers.staged,
        containers.held,
        g.openings
    )
}

/// The whole generation, readable.
pub fn generation(id: &GenerationId, g: &Generation) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "generation {id}");
    let _ = writeln!(o, "node {}, {}, format {}", g.node, g.mode, g.format);

    let _ = writeln!(o, "\nsettings");
    for (name, port) in &g.settings.ports {
        let _ = writeln!(o, "  {name:<20} {port}");
    }
    let net = &g.settings.private_network;
    let _ = writeln!(
        o,
        "  private network      {} (this node {}{})",
        net.range,
        net.address,
        if net.hub { ", the hub" } else { "" }
    );

    let _ = writeln!(o, "\nmodules");
    for (name, state) in &g.modules {
        let word = match (g.mode, state) {
            (Mode::Managed, _) => "managed",
            (_, mesh_lib::model::ModuleState::Taken) => "taken",
            (_, mesh_lib::model::ModuleState::Assigned) => "assigned, not taken",
        };
        let _ = writeln!(o, "  {name:<20} {word}");
    }

    let _ = writeln!(o, "\nfiles");
    if g.files.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for (path, f) in &g.files {
        let _ = write!(
            o,
            "  {:<8} {path}  {} {}:{}  {} bytes  [{}]",
            f.state.word(),
            f.mode,
            f.owner,
            f.group,
            f.size,
            f.module
        );
        if let FileState::Held { original } = f.state {
            let _ = write!(o, "  original {}", original.short());
        }
        if let Some(secret) = &f.secret {
            let _ = write!(o, "  secret: {}", secret.describe());
        }
        o.push('\n');
    }

    let _ = writeln!(o, "\ncontainers");
    if g.containers.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for (name, c) in &g.containers {
        let _ = writeln!(
            o,
            "  {:<8} {name}  {}  [{}]",
            c.state.word(),
            c.image,
            c.module
        );
        for p in &c.ports {
            let _ = writeln!(
                o,
                "             publish {}:{} -> {}/{}",
                p.host_ip, p.host_port, p.container_port, p.protocol
            );
        }
        for v in &c.volumes {
            let mode = v.mode();
            let _ = writeln!(
                o,
                "             volume  {} -> {}{}",
                v.source,
                v.target,
                if mode.is_empty() {
                    String::new()
                } else {
                    format!(" ({mode})")
                }
            );
        }
        for (k, r) in &c.secret_environment {
            let _ = writeln!(
                o,
                "             secret  environment {k} from {} (for {})",
                r.file,
                r.recipients.join(", ")
            );
        }
        if let Some(t) = c.stop_timeout {
            let _ = writeln!(o, "             stops   within {t} s of SIGTERM");
        }
        if let Some(r) = &c.restart {
            let _ = writeln!(o, "             restart {r}");
        }
        for n in &c.networks {
            let _ = writeln!(
                o,
                "             network {}{}",
                n.name,
                if n.aliases.is_empty() {
                    String::new()
                } else {
                    format!(" as {}", n.aliases.join(", "))
                }
            );
            for address in n
                .ipv4_address
                .map(|a| a.to_string())
                .into_iter()
                .chain(n.ipv6_address.map(|a| a.to_string()))
            {
                let _ = writeln!(o, "                     at {address}");
            }
        }
        if let Some(h) = &c.healthcheck {
            let _ = writeln!(o, "             health  {}", h.describe());
        }
        for (name, value) in c.options.fields() {
            let _ = writeln!(
                o,
                "             option  {name} = {}",
                mesh_lib::options::describe(name, &value)
            );
        }
        if !c.accept_gaps.is_empty() {
            let _ = writeln!(
                o,
                "             accepts losing {}",
                c.accept_gaps.join(", ")
            );
        }
    }

    if !g.units.is_empty() {
        let _ = writeln!(o, "\nunits");
    }
    for (name, u) in &g.units {
        let mut how = vec![
            if u.enabled { "enabled" } else { "not enabled" },
            if u.started { "started" } else { "not started" },
        ];
        match u.on_change {
            mesh_lib::model::OnChange::Restart => {}
            mesh_lib::model::OnChange::Reload => how.push("reloaded on change"),
            mesh_lib::model::OnChange::Leave => how.push("left on change"),
        }
        let _ = writeln!(
            o,
            "  {:<8} {name}  {}  [{}]",
            u.state.word(),
            how.join(", "),
            u.module
        );
        if !u.instances.is_empty() {
            let _ = writeln!(o, "             instances {}", u.instances.join(", "));
        }
    }

    let _ = writeln!(
        o,
        "\nopenings{}",
        match g.mode {
            Mode::Adopted => " (converged through the found firewall)",
            Mode::Managed => " (accepted by the base ruleset)",
        }
    );
    for op in &g.openings {
        let paths: Vec<&str> = op
            .paths
            .iter()
            .map(|p| match p {
                TrafficPath::Incoming => "incoming",
                TrafficPath::Forwarded => "forwarded",
            })
            .collect();
        let from = match op.from {
            Source::Anywhere => "anywhere".to_string(),
            Source::Private => {
                format!("the private network ({})", g.settings.private_network.range)
            }
            Source::Range(r) => r.to_string(),
        };
        let _ = writeln!(
            o,
            "  {:>5}/{}  {:<18} from {from}, {}  [{}]",
            op.port,
            op.protocol,
            op.setting,
            paths.join(" and "),
            op.module
        );
    }

    let _ = writeln!(o, "\nfirewall: the guard");
    o.push_str(&indent(&render_nft(&g.firewall.guard)));
    match &g.firewall.base {
        Some(base) => {
            let _ = writeln!(o, "\nfirewall: the base ruleset");
            o.push_str(&indent(&render_nft(base)));
        }
        None => {
            let _ = writeln!(
                o,
                "\nfirewall: no base ruleset on an adopted node; the found firewall stays in force"
            );
        }
    }
    o
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// What a converge of the firewall changed (or, `would`, would change), in a few words.
pub fn firewall(done: &mesh_reach::firewall::Converged, would: bool) -> String {
    use mesh_reach::firewall::BaseChange;
    let verb = |past: &str| {
        if would {
            format!("would be {past}")
        } else {
            past.to_owned()
        }
    };
    let mut parts = Vec::new();
    if done.guard {
        parts.push(format!("guard {}", verb("loaded")));
    }
    match done.base {
        Some(BaseChange::Loaded) => parts.push(format!("base ruleset {}", verb("loaded"))),
        Some(BaseChange::Removed) => parts.push(format!("base ruleset {}", verb("removed"))),
        None => {}
    }
    if let Some(unit) = &done.daemon_started {
        parts.push(format!(
            "{unit} {} (the found firewall's daemon, with its configuration as found)",
            verb("started")
        ));
    }
    if let Some(unit) = &done.daemon_stopped {
        parts.push(format!(
            "{unit} {} and disabled (the found firewall's daemon)",
            verb("stopped")
        ));
    }
    if done.removed_tables > 0 {
        parts.push(format!(
            "{} table(s) of the found firewall {}",
            done.removed_tables,
            verb("removed")
        ));
    }
    if done.emptied_inputs > 0 {
        parts.push(format!(
            "the predecessor's INPUT chain in {} table(s) the container runtime keeps {}",
            done.emptied_inputs,
            verb("emptied")
        ));
    }
    if done.inserted > 0 || done.removed > 0 {
        parts.push(format!(
            "openings through the found chains: {} rule(s) {}, {} {}",
            done.inserted,
            verb("inserted"),
            done.removed,
            verb("removed")
        ));
    }
    if parts.is_empty() {
        "in force as the generation says: nothing to do".to_owned()
    } else {
        parts.join("; ")
    }
}

/// What a switch did (or, for a dry run, would do).
pub fn switched(s: &mesh_switch::Switched) -> String {
    let mut o = String::new();
    let verb = if s.dry_run {
        "would switch"
    } else {
        "switched"
    };
    let changes = s
        .plan
        .actions
        .iter()
        .filter(|a| a.changes_machine())
        .count();
    // Counted by the target's states: files a rollback restores are held again.
    let c = &s.states;
    let mut states = format!(
        "files {} managed, {} staged, {} held",
        c.files.managed, c.files.staged, c.files.held
    );
    for (what, n) in [("containers", &c.containers), ("units", &c.units)] {
        if *n != Default::default() {
            states.push_str(&format!(
                "; {what} {} managed, {} staged, {} held",
                n.managed, n.staged, n.held
            ));
        }
    }
    match (s.dry_run, s.number) {
        (false, None) => {
            let _ = writeln!(
                o,
                "already at {}: {changes} file(s) changed; {states}",
                s.id.short()
            );
        }
        (false, Some(n)) => {
            let _ = writeln!(
                o,
                "{verb} to generation {n} ({}): {changes} file(s) changed; {states}",
                s.id.short()
            );
        }
        (true, _) => {
            let _ = writeln!(
                o,
                "{verb} to {}: {changes} file(s) would change; {states}; nothing was changed",
                s.id.short()
            );
        }
    }
    if let Some(kind) = s.found_firewall {
        let kind = serde_json::to_value(kind).unwrap_or_default();
        let _ = writeln!(
            o,
            "  firewall found in force and recorded: {}",
            kind.as_str().unwrap_or("?")
        );
    }
    if !s.restored.is_empty() {
        let _ = writeln!(
            o,
            "  firewall the found firewall loaded back from its dump: {}",
            s.restored.join(", ")
        );
    }
    if let Some(done) = s.firewall.as_ref().filter(|d| **d != Default::default()) {
        let _ = writeln!(o, "  firewall {}", firewall(done, false));
    }
    for a in &s.plan.actions {
        let _ = writeln!(o, "  {a}");
        // A dry run shows what each write or removal does to the content.
        if let Some(c) = s.review.as_ref().and_then(|r| {
            r.contents
                .iter()
                .find(|c| c.path == a.path().as_str() && a.changes_machine())
        }) {
            o.push_str(&content(c));
        }
    }
    for i in &s.images {
        let _ = writeln!(
            o,
            "  {} image {}  (not on the engine{}: {})",
            if s.dry_run { "fetch   " } else { "fetched " },
            mesh_lib::text::escape(&i.image),
            if s.dry_run {
                "; would be fetched, before anything changes, for"
            } else {
                "; fetched and its digest checked, for"
            },
            i.containers.join(", ")
        );
    }
    for step in &s.containers {
        use mesh_containers::Step;
        let _ = match step {
            Step::Hold { name } => writeln!(o, "  hold     container {name}  (found, module not taken: not stopped, not restarted)"),
            Step::Resume { name } => writeln!(o, "  resume   container {name}  (found, module not taken: started again, as it ran before the switch that was cut short)"),
            Step::StopFound { name } => writeln!(o, "  quiet    container {name}.found  (the found one, stopped: it ran beside the module's)"),
            Step::Keep { name, start } => writeln!(o, "  keep     container {name}  (found, equal to the declared one: the module's as it is, not recreated{})", if *start { "; started" } else { "" }),
            Step::Stage { name } => writeln!(o, "  stage    container {name}  (created, not started)"),
            Step::Retire { name } => writeln!(o, "  retire   container {name}  (the found one stops, kept as {name}.found)"),
            Step::Run { name, replace, joins } => writeln!(o, "  run      container {name}{}", match (joins, replace) {
                (Some(joined), _) => format!("  (made anew: {joined}, whose network it joins, is another container now)"),
                (None, true) => "  (recreated: its spec changed)".to_owned(),
                (None, false) => String::new(),
            }),
            Step::Start { name } => writeln!(o, "  start    container {name}"),
            Step::Restore { name, start } => writeln!(o, "  restore  container {name}  (the found one, back under its name{})", if *start { ", started" } else { ", not running, as it was found" }),
            Step::Remove { name } => writeln!(o, "  remove   container {name}"),
            Step::Stop { name } => writeln!(o, "  stop     container {name}  (staged: runs in no generation)"),
            Step::Restart { name, because } => writeln!(o, "  restart  container {name}: {}", because.join("; ")),
        };
    }
    if let Some(counts) = container_counts(&s.containers) {
        let _ = writeln!(o, "  containers: {counts}");
    }
    if let Some(r) = &s.review {
        for c in r.containers.iter().filter(|c| !c.fields.is_empty()) {
            let _ = writeln!(o, "  container {}: {}", c.name, c.what);
            o.push_str(&fields(&c.fields));
        }
        if !r.firewall.is_empty() {
            let _ = writeln!(o, "  firewall (nft lines added and removed):");
            for line in &r.firewall {
                let _ = writeln!(o, "    {line}");
            }
        }
    }
    o.push_str(&services(&s.services, s.dry_run));
    for f in &s.failed {
        let _ = writeln!(o, "  FAILED   {f}");
        for line in &f.log {
            let _ = writeln!(o, "           | {line}");
        }
    }
    o
}

/// How many containers each kind of step touches, e.g. `50 held, 10 retired, 10 run` (`None`
/// without container steps): on a node of dozens of containers, the count is what a person
/// checks first.
fn container_counts(steps: &[mesh_containers::Step]) -> Option<String> {
    use mesh_containers::Step;
    let words = [
        "held",
        "resumed",
        "quieted",
        "kept",
        "staged",
        "retired",
        "run",
        "started",
        "restored",
        "removed",
        "stopped",
        "restarted",
    ];
    let mut counts = [0usize; 12];
    for step in steps {
        let at = match step {
            Step::Hold { .. } => 0,
            Step::Resume { .. } => 1,
            Step::StopFound { .. } => 2,
            Step::Keep { .. } => 3,
            Step::Stage { .. } => 4,
            Step::Retire { .. } => 5,
            Step::Run { .. } => 6,
            Step::Start { .. } => 7,
            Step::Restore { .. } => 8,
            Step::Remove { .. } => 9,
            Step::Stop { .. } => 10,
            Step::Restart { .. } => 11,
        };
        counts[at] += 1;
    }
    let parts: Vec<String> = counts
        .iter()
        .zip(words)
        .filter(|(n, _)| **n > 0)
        .map(|(n, w)| format!("{n} {w}"))
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// What the units do after the files, one line each with its cause.
pub fn services(p: &mesh_systemd::services::ServicePlan, dry_run: bool) -> String {
    use mesh_systemd::Verb;
    let mut o = String::new();
    if let Some(why) = &p.not_driven {
        if p.asks_systemd() {
            let _ = writeln!(
                o,
                "  services are not driven here ({why}); a switch on the node itself would:"
            );
        }
    }
    // In the order they run: the disables and stops before the files change, the rest after.
    for u in &p.disable {
        let _ = writeln!(o, "  disable  {}: {}", u.unit, u.because);
    }
    for j in p.jobs.iter().filter(|j| j.verb == Verb::Stop) {
        let _ = writeln!(o, "  {j}");
    }
    if p.daemon_reload() {
        let files: Vec<&str> = p.unit_files.iter().map(|f| f.as_str()).collect();
        let _ = writeln!(
            o,
            "  {}daemon-reload: {}",
            if dry_run { "would " } else { "" },
            if files.is_empty() {
                "units enabled or disabled".to_owned()
            } else {
                format!("{} changed", files.join(", "))
            }
        );
    }
    for u in &p.enable {
        let _ = writeln!(o, "  enable   {}: {}", u.unit, u.because);
    }
    for j in p.jobs.iter().filter(|j| j.verb != Verb::Stop) {
        let _ = writeln!(o, "  {j}");
    }
    for i in &p.idle {
        let _ = writeln!(o, "  (none)   {}: {}", i.unit, i.because);
    }
    o
}

/// A unified diff indented under its heading; a file others may not read, or binary, says why
/// instead.
pub fn content(c: &mesh_lib::diff::ContentDiff) -> String {
    let mut o = String::new();
    match (&c.unified, &c.hidden) {
        (Some(u), _) => {
            for line in u.lines() {
                let _ = writeln!(o, "    {line}");
            }
        }
        (None, Some(why)) => {
            let _ = writeln!(o, "    {}: {why}", mesh_lib::text::escape(&c.path));
        }
        (None, None) => {}
    }
    o
}

/// A diff, readable: what changes, then each file's content diff, each container's fields and
/// the firewall's nft lines added and removed.
pub fn diff(from: &GenerationId, to: &GenerationId, d: &mesh_lib::diff::Diff) -> String {
    use mesh_lib::diff::FileChange;
    let mut o = String::new();
    let _ = writeln!(o, "from {}\nto   {}", from.short(), to.short());
    if d.is_empty() {
        let _ = writeln!(o, "no differences");
        return o;
    }
    if let Some(m) = d.mode {
        let _ = writeln!(o, "mode: {} -> {}", m.before, m.after);
    }
    for s in &d.settings {
        let show = |p: &Option<u16>| p.map_or("-".to_string(), |p| p.to_string());
        let _ = writeln!(
            o,
            "setting ports.{}: {} -> {}",
            s.name,
            show(&s.before),
            show(&s.after)
        );
    }
    for m in &d.modules {
        let _ = writeln!(
            o,
            "module {}: {} -> {}",
            m.name,
            m.before.as_deref().unwrap_or("-"),
            m.after.as_deref().unwrap_or("-")
        );
    }
    for f in &d.files {
        let path = &f.path;
        let _ = match &f.change {
            FileChange::Added { state } => writeln!(o, "+ {path} ({state})"),
            FileChange::Removed => writeln!(o, "- {path}"),
            FileChange::Changed { what } => writeln!(o, "~ {path}: {}", what.join(", ")),
        };
        if let Some(c) = d.contents.iter().find(|c| c.path == *path) {
            o.push_str(&content(c));
        }
    }
    for c in &d.containers {
        let _ = writeln!(o, "container {}: {}", c.name, c.what);
        o.push_str(&fields(&c.fields));
    }
    for u in &d.units {
        let _ = writeln!(o, "unit {}: {}", u.unit, u.what);
    }
    for op in &d.openings {
        let comment = op.opening.strip_prefix("mesh: ").unwrap_or(&op.opening);
        let sign = if op.change == "added" { '+' } else { '-' };
        let _ = writeln!(o, "{sign} opening {comment}");
    }
    if let Some(base) = &d.base {
        let _ = writeln!(o, "the base ruleset: {base}");
    }
    if d.guard {
        let _ = writeln!(o, "the guard changes");
    }
    if !d.firewall.is_empty() {
        let _ = writeln!(o, "firewall (nft lines added and removed):");
        for line in &d.firewall {
            let _ = writeln!(o, "    {line}");
        }
    }
    o
}

/// A container's spec, field by field.
pub fn fields(f: &[mesh_lib::diff::FieldChange]) -> String {
    let mut o = String::new();
    for c in f {
        let show = |v: &Option<String>| {
            v.as_deref()
                .map(|v| mesh_lib::text::escape(v).into_owned())
                .unwrap_or_else(|| "(not set)".into())
        };
        let _ = writeln!(
            o,
            "    {}: {} -> {}",
            mesh_lib::text::escape(&c.field),
            show(&c.before),
            show(&c.after)
        );
    }
    o
}

/// `mesh status`, readable.
pub fn status(s: &mesh_remote::Status) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "mode: {}", s.mode);
    match &s.current {
        Some(c) => {
            let _ = writeln!(o, "current: generation {} ({})", c.number, c.id);
        }
        None => {
            let _ = writeln!(o, "current: none yet");
        }
    }
    if let Some(staged) = &s.staged_generation {
        let _ = writeln!(
            o,
            "staged: {staged} (everything it needs is here: `mesh switch --generation {staged}`)"
        );
    }
    let counts = |c: &mesh_switch::Counts| {
        format!(
            "{} managed, {} staged, {} held",
            c.managed, c.staged, c.held
        )
    };
    let _ = writeln!(o, "files: {}", counts(&s.files));
    let _ = writeln!(
        o,
        "modules taken: {}",
        if s.taken.is_empty() {
            "none".to_string()
        } else {
            s.taken.join(", ")
        }
    );
    let _ = writeln!(o, "containers: {}", counts(&s.containers));
    for r in &s.take_would_retire {
        let _ = writeln!(
            o,
            "  take {}: container {} stops and is kept as {}.found; the declared one runs",
            r.module, r.container, r.container
        );
    }
    for r in &s.take_would_keep {
        let _ = writeln!(
            o,
            "  take {}: container {} is kept as it is (equal to the declared one)",
            r.module, r.container
        );
    }
    if s.units != Default::default() {
        let _ = writeln!(o, "units: {}", counts(&s.units));
    }
    if !s.not_taken.is_empty() {
        let _ = writeln!(o, "modules not taken: {}", s.not_taken.join(", "));
    }
    if s.drift.is_empty() {
        let _ = writeln!(o, "drift: none");
    } else {
        let _ = writeln!(
            o,
            "drift: {} file(s) changed behind the mesh's back",
            s.drift.len()
        );
        for d in &s.drift {
            let _ = writeln!(o, "  {}: {}", d.path, d.what);
        }
    }
    match &s.firewall {
        Some(mesh_remote::status::FirewallDrift {
            would_change: Some(d),
            ..
        }) if *d == Default::default() => {
            let _ = writeln!(o, "firewall: in force as the generation says");
        }
        Some(mesh_remote::status::FirewallDrift {
            would_change: Some(d),
            ..
        }) => {
            let _ = writeln!(
                o,
                "firewall: drifted — {} (`mesh reconcile` puts it back)",
                firewall(d, true)
            );
        }
        Some(mesh_remote::status::FirewallDrift {
            unreadable: Some(why),
            ..
        }) => {
            let _ = writeln!(o, "firewall: not read: {why}");
        }
        _ => {}
    }
    if let Some(d) = &s.last_deploy {
        let _ = writeln!(
            o,
            "last deploy: {} -> {} at {}: {:?}{}",
            d.previous
                .map_or("(none)".to_owned(), |p| p.short().to_string()),
            d.target.short(),
            d.armed,
            d.state,
            d.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
    }
    if let Some(p) = &s.last_pull {
        let _ = writeln!(
            o,
            "last pull: {} from {} at {}: {}{}",
            p.generation
                .map_or("(unread)".to_owned(), |g| g.short().to_string()),
            p.from,
            p.at,
            p.result.word(),
            p.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
    }
    if let Some(st) = &s.statement {
        let names = st
            .generation
            .map_or("withdrawn".to_owned(), |g| g.short().to_string());
        let in_force = s.current.as_ref().map(|c| c.id);
        let _ = match (&st.problem, st.expired) {
            (Some(p), _) => writeln!(o, "STATEMENT UNREADABLE: {p}"),
            (None, true) => writeln!(
                o,
                "STATEMENT EXPIRED at {}: the newest this node accepted (sequence {}, naming {names}, by {}) — nothing newer came since; a registry may be withholding it, or the fleet stopped signing. Pulls refuse it until a signer states again.",
                st.expires,
                st.sequence,
                mesh_lib::text::escape(&st.signer)
            ),
            (None, false) => writeln!(
                o,
                "statement: sequence {} names {names}{}, by {}, expires {}",
                st.sequence,
                match (st.generation, in_force) {
                    (Some(g), Some(c)) if g != c => " (not the one in force: rolled back here?)",
                    _ => "",
                },
                mesh_lib::text::escape(&st.signer),
                st.expires
            ),
        };
    }
    match (&s.unfinished, s.interrupted) {
        (Some(u), _) => {
            let _ = writeln!(
                o,
                "interrupted: a switch to {} was cut short{}; the same command again finishes it, `mesh rollback` undoes it{}",
                u.target.short(),
                u.previous
                    .map(|p| format!(" while {} was in force", p.short()))
                    .unwrap_or_default(),
                u.previous
                    .map(|p| format!(" (back to {})", p.short()))
                    .unwrap_or_default(),
            );
        }
        (None, true) => {
            let _ = writeln!(
                o,
                "an interrupted switch waits to be finished: run `mesh switch` or `mesh rollback`"
            );
        }
        (None, false) => {}
    }
    o
}

/// `mesh flip --preview`, readable: each published port, what publishes it, who reaches it now
/// and after the flip, and what the flip does to it.
pub fn flip_preview(
    now: &GenerationId,
    to: &GenerationId,
    p: &mesh_reach::preview::Preview,
    not_taken: &[String],
) -> String {
    use mesh_reach::preview::Change;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "the flip from {} to {}: the base ruleset and the guard in force, the found firewall removed",
        now.short(),
        to.short()
    );
    let clients: Vec<String> = p.clients.node.iter().map(ToString::to_string).collect();
    let _ = writeln!(
        o,
        "every port published on the node (listening sockets, DNATs and redirects), and who reaches it at {}{}:",
        if clients.is_empty() {
            "(no address outside clients reach)".to_owned()
        } else {
            clients.join(", ")
        },
        p.clients
            .private
            .map(|a| format!(" and, from the private network, at {a}"))
            .unwrap_or_default()
    );
    if p.ports.is_empty() {
        let _ = writeln!(o, "  none");
    }
    let mut counts = [0usize; 5];
    for port in &p.ports {
        let number = match port.last {
            Some(last) => format!("{}-{last}/{}", port.port, port.protocol),
            None => format!("{}/{}", port.port, port.protocol),
        };
        let (what, count) = match port.change {
            Change::Stays => ("stays", 0),
            Change::Closes => ("the flip closes it", 1),
            Change::Narrows => ("the flip narrows it", 2),
            Change::Widens => ("the flip opens it wider", 3),
            Change::Uncertain => ("uncertain", 4),
        };
        counts[count] += 1;
        let _ = writeln!(
            o,
            "  {number:>11}  now {}  ->  after {}   [{what}]",
            port.now.in_words(),
            port.after.in_words()
        );
        let held: Vec<String> = port
            .held_by
            .iter()
            .map(mesh_reach::preview::Holder::in_words)
            .collect();
        let _ = writeln!(o, "               {}", held.join("; "));
        let unknown: Vec<&String> = port.now.unknown.iter().chain(&port.after.unknown).collect();
        if !unknown.is_empty() {
            let unknown: Vec<String> = unknown
                .iter()
                .map(|u| mesh_lib::text::escape(u).into_owned())
                .collect();
            let _ = writeln!(
                o,
                "               depends on rules the preview cannot read: {}",
                unknown.join("; ")
            );
        }
    }
    let [stays, closes, narrows, widens, uncertain] = counts;
    let _ = writeln!(
        o,
        "{closes} port(s) reachable now would be closed, {narrows} narrowed, {widens} opened wider; {stays} stay as they are{}; nothing was changed",
        if uncertain > 0 {
            format!("; {uncertain} uncertain")
        } else {
            String::new()
        }
    );
    if !not_taken.is_empty() {
        let _ = writeln!(
            o,
            "modules not taken yet: {} (the flip refuses without --force)",
            not_taken.join(", ")
        );
    }
    o
}
