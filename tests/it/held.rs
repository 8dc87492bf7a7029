//! Found files on an adopted node: held, with the original's hash, until their module is taken.

use std::path::Path;

use crate::support::{mesh, run};

const NODE: &str = r#"
let mesh = import "mesh.ncl" in
mesh.node {
  name = "n",
  settings = {
    ports = { store = 5432, bus = 4222, registry = 5000, broker_management = 15672, hub = 51820 },
    private_network = { range = "10.77.0.0/24", address = "10.77.0.5" },
  },
  modules = [
    { name = "ssh", config = fun s => { files = [{ path = "/etc/ssh/sshd_config.d/10-mesh.conf", content = "PasswordAuthentication no\n" }] } },
    { name = "motd", config = fun s => { files = [{ path = "/etc/motd", content = "hello\n" }] } },
  ],
}
"#;

const ORIGINAL: &str = "b3:acaa193ff9cf64cd7f872d0fb79c9cfa06bce9d684f46851eb077d717e27de64";

fn record(dir: &Path, mode: &str, taken: &[&str]) -> std::path::PathBuf {
    let r = serde_json::json!({
        "format": 1, "node": "n", "mode": mode,
        "found": { "files": { "/etc/ssh/sshd_config.d/10-mesh.conf": { "hash": ORIGINAL, "mode": "0644", "owner": "root", "group": "root" } } },
        "taken": taken,
    });
    let p = dir.join(format!("record-{mode}-{}.json", taken.join("-")));
    std::fs::write(&p, serde_json::to_vec(&r).unwrap()).unwrap();
    p
}

fn file_states(state: &Path, node: &Path, record: Option<&Path>) -> serde_json::Value {
    let mut c = mesh(state);
    c.arg("show").arg(node).arg("--json");
    if let Some(r) = record {
        c.arg("--record").arg(r);
    }
    let ran = run(c);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let g: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    g["files"].clone()
}

/// Held (with the original's hash) while the module is not taken; managed once it is; a file
/// that collides with nothing is staged; a managed node holds nothing.
#[test]
fn found_file_is_held_until_its_module_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let node = dir.path().join("n.ncl");
    std::fs::write(&node, NODE).unwrap();
    let ssh = "/etc/ssh/sshd_config.d/10-mesh.conf";

    let adopted = file_states(
        state.path(),
        &node,
        Some(&record(dir.path(), "adopted", &[])),
    );
    assert_eq!(
        adopted[ssh]["state"],
        serde_json::json!({"kind": "held", "original": ORIGINAL})
    );
    assert_eq!(adopted["/etc/motd"]["state"]["kind"], "staged");

    let taken_other = file_states(
        state.path(),
        &node,
        Some(&record(dir.path(), "adopted", &["motd"])),
    );
    assert_eq!(
        taken_other[ssh]["state"]["kind"], "held",
        "taking another module does not release it"
    );
    assert_eq!(taken_other["/etc/motd"]["state"]["kind"], "managed");

    let taken = file_states(
        state.path(),
        &node,
        Some(&record(dir.path(), "adopted", &["ssh"])),
    );
    assert_eq!(taken[ssh]["state"]["kind"], "managed");

    let managed = file_states(state.path(), &node, None);
    assert_eq!(managed[ssh]["state"]["kind"], "managed");
    assert_eq!(managed["/etc/motd"]["state"]["kind"], "managed");
}
