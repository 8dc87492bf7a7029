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
}
