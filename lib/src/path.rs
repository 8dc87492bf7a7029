//! [`TargetPath`]: a path on the node that a generation may declare. Validated once, when built,
//! so no unchecked path ever reaches a generation.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// Where the mesh keeps its own state on a node; no declared file may lie under it.
pub const STORE_ROOT: &str = "/var/lib/mesh";

/// Why a string is not a valid target path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Does not start with `/`.
    #[error("`{0}` is relative: a declared path must be absolute")]
    Relative(String),
    /// `/` alone or a trailing slash.
    #[error("`{0}` names a folder, not a file")]
    Folder(String),
    /// A NUL byte.
    #[error("`{}` contains a NUL byte", crate::text::escape(&.0.replace('\0', "\\0")))]
    Nul(String),
    /// A control character (newline, carriage return, escape, …) or a bidirectional override:
    /// a path a person reviews in a plan must read as what it is.
    #[error("`{}` contains {}: a declared path may not hold control or bidirectional formatting characters", crate::text::escape(.path), describe(*.character))]
    Control {
        /// The path.
        path: String,
        /// The first such character.
        character: char,
    },
    /// An empty component: `//`.
    #[error("`{0}` contains `//`")]
    DoubleSlash(String),
    /// A `.` or `..` component.
    #[error("`{path}` contains a `{component}` component")]
    DotComponent {
        /// The path.
        path: String,
        /// `.` or `..`.
        component: String,
    },
    /// Lies under the mesh's own store.
    #[error("`{0}` lies under the mesh's store ({STORE_ROOT})")]
    UnderStore(String),
    /// Longer than the kernel accepts.
    #[error("`{0}` is longer than 4095 bytes or has a component longer than 255")]
    TooLong(String),
}

fn describe(c: char) -> String {
    let name = match c {
        '\n' => " (newline)",
        '\r' => " (carriage return)",
        '\t' => " (tab)",
        '\u{1b}' => " (escape)",
        _ => "",
    };
    format!("the character U+{:04X}{name}", c as u32)
}

/// An absolute, normalised path to a file on the node: starts with `/`, no `.`, `..` or empty
/// component, no NUL, no control or bidirectional formatting character, no trailing slash, not
/// under [`STORE_ROOT`].
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct TargetPath(String);

impl TargetPath {
    /// Validates `s` as a target path.
    pub fn new(s: &str) -> Result<Self, PathError> {
        let owned = || s.to_owned();
        if s.contains('\0') {
            return Err(PathError::Nul(owned()));
        }
        if let Some(character) = s.chars().find(|c| crate::text::is_hazard(*c)) {
            return Err(PathError::Control {
                path: owned(),
                character,
            });
        }
        if !s.starts_with('/') {
            return Err(PathError::Relative(owned()));
        }
        if s == "/" || s.ends_with('/') {
            return Err(PathError::Folder(owned()));
        }
        if s.len() > 4095 {
            return Err(PathError::TooLong(owned()));
        }
        for component in s[1..].split('/') {
            match component {
                "" => return Err(PathError::DoubleSlash(owned())),
                "." | ".." => {
                    return Err(PathError::DotComponent {
                        path: owned(),
                        component: component.to_owned(),
                    })
                }
                c if c.len() > 255 => return Err(PathError::TooLong(owned())),
                _ => {}
            }
        }
        if s == STORE_ROOT || s.starts_with(&format!("{STORE_ROOT}/")) {
            return Err(PathError::UnderStore(owned()));
        }
        Ok(Self(s.to_owned()))
    }

    /// The path as a string, starting with `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The components after the leading `/`, each non-empty and neither `.` nor `..`.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0[1..].split('/')
    }
}

impl fmt::Display for TargetPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TargetPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TargetPath({:?})", self.0)
    }
}

impl<'de> Deserialize<'de> for TargetPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TargetPath::new(&s).map_err(serde::de::Error::custom)
    }
}

/// What a container's bind mount of a host path reaches beyond data of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostMount {
    /// The mesh's state directory, or a path in it: refused, always.
    StateDir,
    /// A part of the host that gives its holder the host (the words say which): refused unless
    /// the volume asks for it.
    Host(&'static str),
}

/// The parts of a host a bind mount hands over, and what each is.
const HOST_PARTS: &[(&str, &str)] = &[
    ("/boot", "the host's boot files"),
    ("/dev", "the host's devices"),
    ("/etc", "the host's configuration and secrets"),
    ("/proc", "the host's kernel interfaces"),
    ("/sys", "the host's kernel interfaces"),
    ("/root", "the home of the host's root"),
    (
        "/run",
        "the host's runtime sockets (the container engine's among them)",
    ),
    (
        "/var/run",
        "the host's runtime sockets (the container engine's among them)",
    ),
    ("/usr", "the host's programs"),
    ("/bin", "the host's programs"),
    ("/sbin", "the host's programs"),
    ("/lib", "the host's programs"),
    ("/lib64", "the host's programs"),
    ("/var/lib/docker", "the container engine's state"),
    ("/var/lib/containerd", "the container engine's state"),
];

/// `path` resolved as text: empty and `.` components dropped, `..` going up (never above `/`).
/// Docker resolves a bind mount's source the same way before the kernel sees it.
pub fn lexical(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// What a bind mount of the host path `source` reaches, when more than data: the mesh's state
/// directory (or `/` and the folders that hold it), or a part of the host that gives its holder
/// the host ([`HOST_PARTS`]) — except a file the node declares (in `declared`), or the folder a
/// declared file is in, below the top of such a part (`/etc/caddy` for a declared
/// `/etc/caddy/Caddyfile`; never `/etc` itself).
pub fn host_mount(source: &str, declared: &std::collections::BTreeSet<&str>) -> Option<HostMount> {
    let path = lexical(source);
    let under = |top: &str| path == top || path.starts_with(&format!("{top}/"));
    if under(STORE_ROOT) {
        return Some(HostMount::StateDir);
    }
    if path == "/" || STORE_ROOT.starts_with(&format!("{path}/")) {
        return Some(HostMount::Host(
            "the whole host, the mesh's state directory with it",
        ));
    }
    let (top, what) = HOST_PARTS.iter().find(|(top, _)| under(top))?;
    let folder_of = |file: &str| file.rsplit_once('/').map(|(folder, _)| folder == path);
    let declared_here = declared.contains(path.as_str())
        || (path != *top && declared.iter().any(|d| folder_of(d) == Some(true)));
    (!declared_here).then_some(HostMount::Host(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every hostile form SPEC.md lists is refused; ordinary paths pass.
    #[test]
    fn hostile_paths_are_refused() {
        for ok in [
            "/etc/ssh/sshd_config.d/10-mesh.conf",
            "/a",
            "/var/lib/meshy/x",
        ] {
            assert!(TargetPath::new(ok).is_ok(), "{ok}");
        }
        type Case = (&'static str, fn(&PathError) -> bool);
        let cases: &[Case] = &[
            ("etc/passwd", |e| matches!(e, PathError::Relative(_))),
            ("/etc/../shadow", |e| {
                matches!(e, PathError::DotComponent { .. })
            }),
            ("/etc/./x", |e| matches!(e, PathError::DotComponent { .. })),
            ("/etc//x", |e| matches!(e, PathError::DoubleSlash(_))),
            ("/etc/x\0y", |e| matches!(e, PathError::Nul(_))),
            ("/var/lib/mesh/store/x", |e| {
                matches!(e, PathError::UnderStore(_))
            }),
            ("/var/lib/mesh", |e| matches!(e, PathError::UnderStore(_))),
            ("/etc/", |e| matches!(e, PathError::Folder(_))),
            ("/etc/motd\nPasswordAuthentication yes", |e| {
                matches!(
                    e,
                    PathError::Control {
                        character: '\n',
                        ..
                    }
                )
            }),
            ("/etc/x\r", |e| matches!(e, PathError::Control { .. })),
            ("/etc/\u{1b}[2Jx", |e| {
                matches!(e, PathError::Control { .. })
            }),
            ("/etc/\u{85}x", |e| matches!(e, PathError::Control { .. })),
            ("/etc/cron.d/x\u{202e}fnoc", |e| {
                matches!(e, PathError::Control { .. })
            }),
            ("/", |e| matches!(e, PathError::Folder(_))),
        ];
        for (bad, is_expected) in cases {
            let err = TargetPath::new(bad).unwrap_err();
            assert!(is_expected(&err), "{bad}: {err}");
        }
    }

    /// The message names the character and never holds it raw.
    #[test]
    fn a_control_character_is_named_not_printed() {
        let err = TargetPath::new("/etc/a\nb").unwrap_err().to_string();
        assert!(err.contains("`/etc/a\\nb`"), "{err}");
        assert!(err.contains("U+000A (newline)"), "{err}");
        assert!(!err.contains('\n'));
    }

    /// A bind mount reaching the state directory is refused; one reaching the host needs the
    /// volume's consent, unless it is a declared file or a declared file's folder.
    #[test]
    fn host_mounts_are_named() {
        use std::collections::BTreeSet;
        let declared: BTreeSet<&str> = ["/etc/caddy/Caddyfile", "/srv/app/app.env"].into();
        let host = |s: &str| host_mount(s, &declared);
        assert_eq!(host("/var/lib/mesh"), Some(HostMount::StateDir));
        assert_eq!(host("/var/lib/mesh/store/x"), Some(HostMount::StateDir));
        assert_eq!(
            host("/var/lib/./docker/../mesh/"),
            Some(HostMount::StateDir)
        );
        for whole in ["/", "//", "/var", "/var/lib/", "/etc/.."] {
            assert!(matches!(host(whole), Some(HostMount::Host(_))), "{whole}");
        }
        for part in [
            "/var/run/docker.sock",
            "/run/docker.sock",
            "/etc",
            "/etc/shadow",
            "/etc/caddy/../shadow",
            "/proc",
            "/sys/fs/cgroup",
            "/dev/sda",
            "/root/.ssh",
            "/usr/bin",
            "/var/lib/docker/volumes",
        ] {
            assert!(matches!(host(part), Some(HostMount::Host(_))), "{part}");
        }
        for fine in [
            "/etc/caddy/Caddyfile",
            "/etc/caddy",
            "/etc/caddy/",
            "/srv/app",
            "/srv/data",
            "/var/lib/meshy",
            "/var/lib/postgresql/data",
            "/home/app",
        ] {
            assert_eq!(host(fine), None, "{fine}");
        }
        assert_eq!(lexical("/a/./b//../c/"), "/a/c");
        assert_eq!(lexical("/../.."), "/");
    }
}
