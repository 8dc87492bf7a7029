//! Computes a digest of the compiler's and the model's own sources and of the locked versions of
//! its dependencies (Nickel's among them), so the evaluation caches never serve what an older
//! build of the mesh evaluated or assembled.
use std::path::Path;

fn visit(dir: &Path, hasher: &mut blake3::Hasher) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            visit(&p, hasher);
        } else if let Ok(bytes) = std::fs::read(&p) {
            hasher.update(p.file_name().unwrap_or_default().as_encoded_bytes());
            hasher.update(&bytes);
        }
    }
}

fn main() {
    let mut hasher = blake3::Hasher::new();
    for dir in ["src", "ncl", "../lib/src"] {
        println!("cargo:rerun-if-changed={dir}");
        visit(Path::new(dir), &mut hasher);
    }
    // The evaluator's own version: a Nickel that evaluates differently is another build.
    println!("cargo:rerun-if-changed=../Cargo.lock");
    if let Ok(lock) = std::fs::read("../Cargo.lock") {
        hasher.update(&lock);
    }
    println!(
        "cargo:rustc-env=MESH_COMPILER_DIGEST={}",
        hasher.finalize().to_hex()
    );
}
