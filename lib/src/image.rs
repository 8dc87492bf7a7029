//! Container image references as the Docker engine and the OCI distribution spec read them:
//! `[DOMAIN/]PATH[:TAG][@sha256:HEX]`.
//!
//! A reference pinned by digest ([`ImageRef::digest`]) names the same bytes on every node and
//! every day; a tag alone names whatever the registry holds under it when it is asked. A
//! generation keeps the digest of a pinned image beside its reference
//! ([`crate::model::ContainerEntry::digest`]), so its id changes when the digest does, and never
//! when a tag moves at the registry.
//!
//! Pure: parsing and naming only. The switch fetches (`mesh_containers::images`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The registry a reference without a domain is fetched from.
pub const DEFAULT_REGISTRY: &str = "docker.io";

/// A content digest of an image manifest: `sha256:` and 64 lowercase hex digits. Valid when
/// built.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ImageDigest(String);

impl ImageDigest {
    /// `sha256:HEX`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 hex digits, for people (as `docker images` shows ids).
    pub fn short(&self) -> &str {
        &self.0["sha256:".len().."sha256:".len() + 12]
    }
}

impl TryFrom<&str> for ImageDigest {
    type Error = ImageRefError;

    fn try_from(text: &str) -> Result<Self, ImageRefError> {
        let hex = text.strip_prefix("sha256:").ok_or_else(|| {
            ImageRefError(format!(
                "digest `{text}` is not sha256: followed by 64 lowercase hex digits"
            ))
        })?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(ImageRefError(format!(
                "digest `{text}` is not sha256: followed by 64 lowercase hex digits"
            )));
        }
        Ok(Self(text.to_owned()))
    }
}

impl TryFrom<String> for ImageDigest {
    type Error = ImageRefError;

    fn try_from(text: String) -> Result<Self, ImageRefError> {
        Self::try_from(text.as_str())
    }
}

impl From<ImageDigest> for String {
    fn from(d: ImageDigest) -> String {
        d.0
    }
}

impl fmt::Display for ImageDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a reference is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ImageRefError(String);

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// The registry's host (and port) as written; `None` for the default registry.
    domain: Option<String>,
    /// The repository's path in its registry, as written.
    path: String,
    tag: Option<String>,
    digest: Option<ImageDigest>,
}

impl ImageRef {
    /// Parses `text` by the reference grammar of the Docker engine (distribution's
    /// `reference` package): lowercase path components, a tag of at most 128 word characters,
    /// dots and dashes, a `sha256` digest.
    pub fn parse(text: &str) -> Result<Self, ImageRefError> {
        let bad = |why: &str| Err(ImageRefError(format!("image `{text}`: {why}")));
        let (name_tag, digest) = match text.split_once('@') {
            Some((n, d)) => (
                n,
                Some(
                    ImageDigest::try_from(d)
                        .map_err(|e| ImageRefError(format!("image `{text}`: {e}")))?,
                ),
            ),
            None => (text, None),
        };
        let last_slash = name_tag.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name_tag[last_slash..].rfind(':') {
            Some(i) => (
                &name_tag[..last_slash + i],
                Some(&name_tag[last_slash + i + 1..]),
            ),
            None => (name_tag, None),
        };
        if let Some(tag) = tag {
            let ok = !tag.is_empty()
                && tag.len() <= 128
                && tag
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
                && !matches!(tag.as_bytes()[0], b'.' | b'-');
            if !ok {
                return bad(&format!(
                    "tag `{tag}` is not 1 to 128 letters, digits, `_`, `.` and `-` (not first)"
                ));
            }
        }
        if name.is_empty() {
            return bad("no repository name");
        }
        if name.len() > 255 {
            return bad("the repository name is longer than 255 characters");
        }
        let (domain, path) = match name.split_once('/') {
            Some((first, rest))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.to_lowercase() != first =>
            {
                (Some(first), rest)
            }
            _ => (None, name),
        };
        if let Some(domain) = domain {
            let (host, port) = match domain.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (domain, None),
            };
            let host_ok = !host.is_empty()
                && host.split('.').all(|c| {
                    !c.is_empty()
                        && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                        && !c.starts_with('-')
                        && !c.ends_with('-')
                });
            let port_ok =
                port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            if !host_ok || !port_ok {
                return bad(&format!("`{domain}` is not a registry host[:port]"));
            }
        }
        for component in path.split('/') {
            if !path_component(component) {
                return bad(&format!(
                    "`{component}` is not a repository path component (lowercase letters and digits, separated by `.`, `_`, `__` or dashes)"
                ));
            }
        }
        Ok(Self {
            domain: domain.map(str::to_owned),
            path: path.to_owned(),
            tag: tag.map(str::to_owned),
            digest,
        })
    }

    /// The digest it is pinned by, if any.
    pub fn digest(&self) -> Option<&ImageDigest> {
        self.digest.as_ref()
    }

    /// Its tag, if any.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The repository as written, without tag or digest (`127.0.0.1:5000/t/busy`, `nginx`).
    pub fn repository(&self) -> String {
        match &self.domain {
            Some(d) => format!("{d}/{}", self.path),
            None => self.path.clone(),
        }
    }

    /// The registry it is fetched from (`host[:port]`; `docker.io` when none is written).
    pub fn registry(&self) -> &str {
        match self.domain.as_deref() {
            None | Some("index.docker.io") => DEFAULT_REGISTRY,
            Some(d) => d,
        }
    }

    /// The host the docker config keeps the registry's credentials under (Docker Hub's are
    /// under `https://index.docker.io/v1/`).
    pub fn credentials_host(&self) -> &str {
        match self.registry() {
            DEFAULT_REGISTRY => "index.docker.io",
            other => other,
        }
    }

    /// The reference by digest alone, `REPOSITORY@sha256:…`, if it is pinned: what is fetched
    /// (the tag is not asked, so a tag that moved changes nothing).
    pub fn by_digest(&self) -> Option<String> {
        self.digest
            .as_ref()
            .map(|d| format!("{}@{d}", self.repository()))
    }

    /// The repository with the tag, `REPOSITORY:TAG`, if it has one.
    pub fn by_tag(&self) -> Option<String> {
        self.tag
            .as_ref()
            .map(|t| format!("{}:{t}", self.repository()))
    }

    /// The repository as the engine shows it in an image's `RepoDigests` and `RepoTags`: the
    /// default registry and its `library/` left out.
    pub fn familiar(&self) -> String {
        match self.registry() {
            DEFAULT_REGISTRY => match self.path.strip_prefix("library/") {
                Some(rest) if !rest.contains('/') => rest.to_owned(),
                _ => self.path.clone(),
            },
            other => format!("{other}/{}", self.path),
        }
    }

    /// Whether `entry`, one of an image's `RepoDigests` (`NAME@sha256:…`), says this image is
    /// there by its digest.
    pub fn matches_repo_digest(&self, entry: &str) -> bool {
        let Some(digest) = &self.digest else {
            return false;
        };
        let Some((name, d)) = entry.split_once('@') else {
            return false;
        };
        if d != digest.as_str() {
            return false;
        }
        match ImageRef::parse(name) {
            Ok(theirs) => theirs.familiar() == self.familiar(),
            Err(_) => name == self.familiar() || name == self.repository(),
        }
    }
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or one or more `-`.
fn path_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.repository())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:a7cd3a45fbef58a250d961834bf7a446ee7a34820f57be0876d0e381f20c5544";

    /// The two pinned forms and the tag-only one parse into repository, tag and digest, and
    /// print back as written.
    #[test]
    fn pinned_and_tagged_forms() {
        let r = ImageRef::parse(&format!("127.0.0.1:5000/t/busy:1@{D}")).unwrap();
        assert_eq!(r.repository(), "127.0.0.1:5000/t/busy");
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.tag(), Some("1"));
        assert_eq!(r.digest().map(ImageDigest::as_str), Some(D));
        assert_eq!(r.by_digest().unwrap(), format!("127.0.0.1:5000/t/busy@{D}"));
        assert_eq!(r.to_string(), format!("127.0.0.1:5000/t/busy:1@{D}"));

        let r = ImageRef::parse(&format!("postgres@{D}")).unwrap();
        assert_eq!(r.tag(), None);
        assert_eq!(r.registry(), "docker.io");
        assert_eq!(r.credentials_host(), "index.docker.io");
        assert_eq!(r.familiar(), "postgres");

        let r = ImageRef::parse("docker.io/library/caddy:2").unwrap();
        assert_eq!(r.digest(), None);
        assert_eq!(r.familiar(), "caddy");
        assert_eq!(r.by_tag().unwrap(), "docker.io/library/caddy:2");
        let r = ImageRef::parse("localhost/app:1").unwrap();
        assert_eq!(r.registry(), "localhost");
    }

    /// A digest that is not `sha256:` and 64 lowercase hex digits, a bad tag or an uppercase
    /// path is refused, saying which part.
    #[test]
    fn malformed_references_are_refused() {
        for (text, says) in [
            ("app:1@sha256:abc", "64 lowercase hex"),
            (&format!("app@{}", D.to_uppercase())[..], "sha256:"),
            (
                &format!("app@{}", D.replace("sha256", "md5"))[..],
                "sha256:",
            ),
            ("app:1@", "sha256:"),
            (&format!("app:-x@{D}")[..], "tag `-x`"),
            (&format!("app/X@{D}")[..], "`X`"),
            (&format!("reg.example/Up@{D}")[..], "`Up`"),
            (&format!("@{D}")[..], "no repository"),
            (&format!("a//b@{D}")[..], "``"),
            (&format!("a@{D}@{D}")[..], "sha256:"),
        ] {
            let e = ImageRef::parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    /// An image's `RepoDigests` entry matches by the familiar name and the digest; another
    /// digest or repository does not.
    #[test]
    fn repo_digests_match_by_name_and_digest() {
        let r = ImageRef::parse(&format!("docker.io/library/postgres:16@{D}")).unwrap();
        assert!(r.matches_repo_digest(&format!("postgres@{D}")));
        assert!(!r.matches_repo_digest(&format!("other@{D}")));
        assert!(!r.matches_repo_digest(&format!("postgres@sha256:{}", "0".repeat(64))));
        let r = ImageRef::parse(&format!("127.0.0.1:5000/t/busy@{D}")).unwrap();
        assert!(r.matches_repo_digest(&format!("127.0.0.1:5000/t/busy@{D}")));
        assert!(!r.matches_repo_digest(&format!("127.0.0.1:5001/t/busy@{D}")));
    }

    /// The digest serialises as its text and is checked when read back.
    #[test]
    fn digest_round_trip() {
        let d = ImageDigest::try_from(D).unwrap();
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, format!("\"{D}\""));
        assert_eq!(serde_json::from_str::<ImageDigest>(&json).unwrap(), d);
        assert!(serde_json::from_str::<ImageDigest>("\"sha256:00\"").is_err());
        assert_eq!(d.short(), "a7cd3a45fbef");
    }
}
