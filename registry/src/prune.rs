//! Pruning a repository: the object artifacts (`b3-HEX`) that no generation a node's tag names
//! references any more. Every push adds the objects its generations lack and none ever goes;
//! a fleet that pushes every day would keep every file it ever published. What a node may still
//! be sent is what the tags name now: those objects stay, the rest are deleted (their manifests,
//! by digest, as the distribution API asks; the registry's own garbage collection then frees
//! the blobs no manifest references). The node artifacts themselves — their keyframes, deltas
//! and signatures are layers of theirs — are never touched.
//!
//! Nothing is deleted unless every node tag was read: a tag that cannot be read (the registry
//! failing, a generation that does not check out) stops the prune with nothing removed, since
//! its objects would otherwise look unused. A tag that is not a mesh artifact (another image in
//! the repository) or is withdrawn references no object.

use std::collections::BTreeSet;

use mesh_lib::Store;
use serde::Serialize;

use crate::{object_tag, Fetched, Registry, RegistryError};

/// What a prune found and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Pruned {
    /// The node tags read, each naming a generation.
    pub nodes: Vec<String>,
    /// The tags that name no generation of the mesh's (withdrawn, or another kind of artifact).
    pub skipped: Vec<String>,
    /// Object artifacts kept: a generation a node tag names references them.
    pub kept: usize,
    /// Object tags removed (in a dry run: that would be).
    pub removed: Vec<String>,
    /// Nothing was deleted: the prune only said what it would remove.
    pub dry_run: bool,
}

/// Whether `tag` is an object artifact's (`b3-` and 64 hexadecimal digits).
pub fn is_object_tag(tag: &str) -> bool {
    tag.strip_prefix("b3-")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Prunes `registry`'s repository (see the module): `scratch` is a store the node tags'
/// generations are fetched into to read what they reference (the publisher's own, or an empty
/// one).
pub fn prune(registry: &Registry, scratch: &Store, dry_run: bool) -> Result<Pruned, RegistryError> {
    let tags = registry.tags()?;
    let mut out = Pruned {
        dry_run,
        ..Pruned::default()
    };
    let mut needed = BTreeSet::new();
    for tag in tags.iter().filter(|t| !is_object_tag(t)) {
        let artifact = match registry.artifact(tag) {
            Ok(a) => a,
            Err(RegistryError::Withdrawn { .. } | RegistryError::Invalid { .. }) => {
                out.skipped.push(tag.clone());
                continue;
            }
            // Gone between the listing and now: it names nothing.
            Err(RegistryError::NoTag(_)) => continue,
            Err(e) => return Err(e),
        };
        let generation = registry.fetch_generation(scratch, &artifact, &mut Fetched::default())?;
        needed.extend(generation.blobs().iter().map(object_tag));
        out.nodes.push(tag.clone());
    }
    for tag in tags.iter().filter(|t| is_object_tag(t)) {
        if needed.contains(tag) {
            out.kept += 1;
            continue;
        }
        if !dry_run {
            registry.delete(tag)?;
        }
        out.removed.push(tag.clone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_tags_are_told_from_node_tags() {
        assert!(is_object_tag(&format!("b3-{}", "ab".repeat(32))));
        assert!(!is_object_tag("b3-abc"));
        assert!(!is_object_tag("web-1"));
        assert!(!is_object_tag(&format!("b3-{}", "zz".repeat(32))));
    }
}
