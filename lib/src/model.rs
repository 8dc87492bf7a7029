//! The generation model: what a node should be, as data. A [`Generation`] is immutable and named by
//! the blake3 digest of its canonical encoding ([`Generation::id`]); it holds hashes of file
//! contents, never the contents themselves (those are blobs in the store).
//!
//! Invariants, upheld by the compiler and checked again by [`Generation::validate`] before a
//! switch uses a generation:
//! - every map is a `BTreeMap` and every list is sorted, so the encoding is a function of the
//!   content alone;
//! - every port a file, container or opening uses is a value of [`Settings::ports`];
//! - a held item only exists on an adopted node, for a module that is not taken.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::canonical::{to_canonical_json, CanonicalError};
use crate::id::{BlobHash, GenerationId};
use crate::options::ContainerOptions;
use crate::path::TargetPath;

/// The version of the generation format. Part of every generation's content, so a change of
/// format is a change of every id: deliberate and visible.
pub const FORMAT_VERSION: u32 = 1;

/// The foundation's port settings, which every node has.
pub const FOUNDATION_PORTS: [&str; 5] = ["store", "bus", "registry", "broker_management", "hub"];

/// A TCP or UDP port, 1–65535.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "u16")]
pub struct Port(u16);

/// A number that is not a port.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} is not a port: a port is an integer from 1 to 65535")]
pub struct PortError(pub i64);

impl Port {
    /// Validates a port number.
    pub fn new(n: i64) -> Result<Self, PortError> {
        match u16::try_from(n) {
            Ok(p) if p >= 1 => Ok(Self(p)),
            _ => Err(PortError(n)),
        }
    }
    /// The number.
    pub fn get(self) -> u16 {
        self.0
    }
}

impl TryFrom<i64> for Port {
    type Error = PortError;
    fn try_from(n: i64) -> Result<Self, PortError> {
        Port::new(n)
    }
}

impl From<Port> for u16 {
    fn from(p: Port) -> u16 {
        p.0
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Port({})", self.0)
    }
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Validates a name: 1–63 bytes of ASCII letters, digits, `-`, `_` and `.`,
            /// starting with a letter or digit.
            pub fn new(s: &str) -> Result<Self, NameError> {
                let ok = !s.is_empty()
                    && s.len() <= 63
                    && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
                    && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
                if ok {
                    Ok(Self(s.to_owned()))
                } else {
                    Err(NameError { what: $what, name: s.to_owned() })
                }
            }
            /// The name.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}

/// A name that is not valid for its kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` is not a valid {what} name: {}", if *.what == "systemd unit" { "write NAME.TYPE with letters, digits, `:`, `-`, `_`, `.`, `@` or `\\`, TYPE one of service, socket, timer, path, target, mount, automount, swap, slice" } else { "use 1-63 letters, digits, `-`, `_` or `.`, starting with a letter or digit" })]
pub struct NameError {
    /// Which kind of name.
    pub what: &'static str,
    /// What was given.
    pub name: String,
}

name_type!(
    /// A module's name, unique in a catalogue.
    ModuleName,
    "module"
);
name_type!(
    /// A node's name.
    NodeName,
    "node"
);
name_type!(
    /// A container's name on the node (without Docker's leading `/`).
    ContainerName,
    "container"
);

/// The unit types a declaration may name (the suffix of a unit's name).
pub const UNIT_TYPES: [&str; 9] = [
    "service",
    "socket",
    "timer",
    "path",
    "target",
    "mount",
    "automount",
    "swap",
    "slice",
];

/// The folder a declared unit's file is written to.
pub const UNIT_DIR: &str = "/etc/systemd/system";

/// A systemd unit's name, e.g. `ssh.service` or `getty@tty1.service`: 1–255 bytes of ASCII
/// letters, digits, `:`, `-`, `_`, `.`, `@` and `\`, a name before the type, and a type of
/// [`UNIT_TYPES`].
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct UnitName(String);

impl UnitName {
    /// Validates a unit name.
    pub fn new(s: &str) -> Result<Self, NameError> {
        let typed = s
            .rsplit_once('.')
            .is_some_and(|(name, kind)| !name.is_empty() && UNIT_TYPES.contains(&kind));
        let ok = typed
            && s.len() <= 255
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b":-_.@\\".contains(&b));
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(NameError {
                what: "systemd unit",
                name: s.to_owned(),
            })
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path of its unit file when the mesh declares it.
    pub fn file(&self) -> TargetPath {
        TargetPath::new(&format!("{UNIT_DIR}/{}", self.0)).expect("a unit name is a file name")
    }

    /// Its type: `service`, `socket`, `timer`, …
    pub fn kind(&self) -> &str {
        self.0.rsplit_once('.').map_or("", |(_, kind)| kind)
    }

    /// Whether it is a template (`getty@.service`): systemd runs its instances, never it.
    pub fn is_template(&self) -> bool {
        self.0
            .rsplit_once('.')
            .is_some_and(|(name, _)| name.ends_with('@'))
    }

    /// For an instance (`getty@tty1.service`), its template (`getty@.service`).
    pub fn template(&self) -> Option<UnitName> {
        let (name, kind) = self.0.rsplit_once('.')?;
        let (prefix, instance) = name.split_once('@')?;
        (!instance.is_empty()).then(|| Self(format!("{prefix}@.{kind}")))
    }

    /// For a template, its instance `instance` (`getty@.service`, `tty1` → `getty@tty1.service`).
    pub fn instance(&self, instance: &str) -> Result<UnitName, NameError> {
        let (name, kind) = self.0.rsplit_once('.').unwrap_or((&self.0, ""));
        if !self.is_template() || instance.is_empty() || instance.contains('@') {
            return Err(NameError {
                what: "systemd unit instance",
                name: format!("{name}{instance}.{kind}"),
            });
        }
        Self::new(&format!("{name}{instance}.{kind}"))
    }

    /// The units systemd runs for it, by name: for a template, its `instances`; any other
    /// unit is itself.
    pub fn runs_as(&self, instances: &[String]) -> Vec<UnitName> {
        if self.is_template() {
            instances
                .iter()
                .filter_map(|i| self.instance(i).ok())
                .collect()
        } else {
            vec![self.clone()]
        }
    }

    /// Whether systemd activates other units through it (a timer, socket, path or automount):
    /// it is stopped before them, so that it starts nothing that is going away.
    pub fn triggers_others(&self) -> bool {
        matches!(self.kind(), "timer" | "socket" | "path" | "automount")
    }
}

impl fmt::Display for UnitName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for UnitName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UnitName({:?})", self.0)
    }
}

impl<'de> Deserialize<'de> for UnitName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::new(&s).map_err(serde::de::Error::custom)
    }
}

/// A file mode's permission bits (at most `0o7777`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileMode(u32);

impl Serialize for FileMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Four octal digits, written in place (a generation holds thousands of modes).
        let mut text = [0u8; 4];
        for (i, digit) in text.iter_mut().enumerate() {
            *digit = b'0' + ((self.0 >> (3 * (3 - i))) & 7) as u8;
        }
        s.serialize_str(std::str::from_utf8(&text).expect("ASCII"))
    }
}

impl<'de> Deserialize<'de> for FileMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = FileMode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a file mode: 3 or 4 octal digits")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<FileMode, E> {
                FileMode::parse(s).map_err(E::custom)
            }
        }
        d.deserialize_str(Text)
    }
}

/// A mode string that is not 3 or 4 octal digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a file mode: write 3 or 4 octal digits, e.g. \"0644\"")]
pub struct ModeError(pub String);

impl FileMode {
    /// Parses `"0644"`-style octal text.
    pub fn parse(s: &str) -> Result<Self, ModeError> {
        if !(3..=4).contains(&s.len()) || !s.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return Err(ModeError(s.to_owned()));
        }
        u32::from_str_radix(s, 8)
            .map(Self)
            .map_err(|_| ModeError(s.to_owned()))
    }
    /// From permission bits; anything above `0o7777` is refused.
    pub fn from_bits(bits: u32) -> Result<Self, ModeError> {
        if bits > 0o7777 {
            return Err(ModeError(format!("{bits:o}")));
        }
        Ok(Self(bits))
    }
    /// The permission bits.
    pub fn bits(self) -> u32 {
        self.0
    }
    /// Whether "others" may read it. A blob of a file that is not world-readable is not
    /// world-readable in the store either.
    pub fn world_readable(self) -> bool {
        self.0 & 0o004 != 0
    }
    /// The bits that give more than a file's content and readers: setuid, setgid, sticky, and
    /// write for everyone. Written only when the declaration asks for them per file
    /// (`special_mode = true`); empty for an ordinary mode.
    pub fn special(self) -> Vec<&'static str> {
        [
            (0o4000, "setuid"),
            (0o2000, "setgid"),
            (0o1000, "sticky"),
            (0o002, "writable by everyone"),
        ]
        .into_iter()
        .filter(|(bit, _)| self.0 & bit != 0)
        .map(|(_, name)| name)
        .collect()
    }
}

/// An owner or group name that a generation may carry: a name as `useradd` takes it, or a
/// number. Printed in plans and `mesh show`, so it holds no control character, no space and no
/// `:` (the passwd separator).
pub fn check_account_name(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 64 {
        return Err(format!(
            "`{}` is not a user or group name: 1-64 characters",
            crate::text::escape(s)
        ));
    }
    match s
        .chars()
        .find(|c| crate::text::is_hazard(*c) || c.is_whitespace() || matches!(c, ':' | '/' | ','))
    {
        Some(c) => Err(format!(
            "`{}` is not a user or group name: it holds {}",
            crate::text::escape(s),
            crate::text::escape(&format!("{c:?}"))
        )),
        None => Ok(()),
    }
}

/// A port setting's name (`settings.ports.NAME`): 1–63 ASCII letters, digits, `_` or `-`,
/// starting with a letter or `_`. It is written into the firewall — in the comment that marks
/// each opening as the mesh's, and in the text `iptables-nft-restore` reads, where a quote or a
/// newline in it would be a rule of its own — so nothing else is a setting name.
pub fn check_setting_name(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a setting name: use 1-63 letters, digits, `_` or `-`, starting with a letter or `_`",
            crate::text::escape(s)
        ))
    }
}

pub use crate::text::check_printable;

impl TryFrom<String> for FileMode {
    type Error = ModeError;
    fn try_from(s: String) -> Result<Self, ModeError> {
        FileMode::parse(&s)
    }
}

impl From<FileMode> for String {
    fn from(m: FileMode) -> String {
        format!("{:04o}", m.0)
    }
}

impl fmt::Display for FileMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

impl fmt::Debug for FileMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FileMode({self})")
    }
}

/// Whether the mesh has full control of a node or is adopting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Found items are held until their module is taken; the found firewall stays in force.
    Adopted,
    /// The mesh has full control: base ruleset, no held items.
    Managed,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Adopted => "adopted",
            Mode::Managed => "managed",
        })
    }
}

/// The node's private network: its range and the node's address in it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivateNetwork {
    /// The private network's range, e.g. `10.77.0.0/24`.
    pub range: Ipv4Net,
    /// This node's address in it.
    pub address: Ipv4Addr,
    /// Whether this node is the private network's hub.
    pub hub: bool,
}

/// The node's settings: every port number used anywhere in the generation, written once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Port settings by name. Always holds the [`FOUNDATION_PORTS`]; web and resolver ports and
    /// application ports where assigned.
    pub ports: BTreeMap<String, Port>,
    /// The private network.
    pub private_network: PrivateNetwork,
}

impl Settings {
    /// The name of the setting that gives `port`, if any.
    pub fn setting_of(&self, port: Port) -> Option<&str> {
        self.ports
            .iter()
            .find(|(_, p)| **p == port)
            .map(|(n, _)| n.as_str())
    }
}

/// What the mesh does with a declared file on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum FileState {
    /// Written and owned by the mesh.
    Managed,
    /// Of an assigned, not yet taken module on an adopted node, colliding with nothing: written.
    Staged,
    /// Found on an adopted node, its module not taken: kept as it is, in force.
    Held {
        /// The hash of the original content found at the path.
        original: BlobHash,
    },
}

/// Read field by field rather than through serde's buffering of internally tagged enums: a
/// large generation holds ten thousand of these. The JSON is the same: `{"kind": "held",
/// "original": "b3:…"}`.
impl<'de> Deserialize<'de> for FileState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, MapAccess, Visitor};
        #[derive(Deserialize)]
        #[serde(rename_all = "lowercase")]
        enum Kind {
            Managed,
            Staged,
            Held,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "lowercase")]
        enum Key {
            Kind,
            Original,
        }
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = FileState;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a file state: {\"kind\": \"managed\" | \"staged\" | \"held\", \"original\": …}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FileState, A::Error> {
                let (mut kind, mut original) = (None, None);
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Kind => kind = Some(map.next_value::<Kind>()?),
                        Key::Original => original = Some(map.next_value::<BlobHash>()?),
                    }
                }
                match (kind, original) {
                    (Some(Kind::Managed), None) => Ok(FileState::Managed),
                    (Some(Kind::Staged), None) => Ok(FileState::Staged),
                    (Some(Kind::Held), Some(original)) => Ok(FileState::Held { original }),
                    (Some(Kind::Held), None) => Err(A::Error::missing_field("original")),
                    (Some(_), Some(_)) => Err(A::Error::unknown_field("original", &["kind"])),
                    (None, _) => Err(A::Error::missing_field("kind")),
                }
            }
        }
        d.deserialize_map(Fields)
    }
}

impl FileState {
    /// One word for people.
    pub fn word(&self) -> &'static str {
        match self {
            FileState::Managed => "managed",
            FileState::Staged => "staged",
            FileState::Held { .. } => "held",
        }
    }
}

/// A declared file. (Its fields are in their names' order, the canonical encoding's: thousands
/// of entries are encoded on every build, and one already in order is written as it comes.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// The declared content.
    pub blob: BlobHash,
    /// Owner group name.
    pub group: String,
    /// Permission bits.
    pub mode: FileMode,
    /// The module that declares it.
    pub module: ModuleName,
    /// Owner user name.
    pub owner: String,
    /// For a file made from secrets, how: its content is then decrypted on the node, never
    /// in the generation or the store (`blob` is the one secret's ciphertext, or a template).
    /// Absent from the encoding for any other file, so no other id changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<crate::secret::SecretContent>,
    /// The declared content's length in bytes.
    pub size: u64,
    /// Whether the declaration asked for a special mode (setuid, setgid, sticky, writable by
    /// everyone): without it such a mode is refused. Absent from the encoding when false, so
    /// the ids of generations without one do not change.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub special_mode: bool,
    /// What the mesh does with it here.
    pub state: FileState,
    /// The systemd units this file configures and how each picks a change up, sorted by unit.
    /// A change the switch makes to the file (written, taken, restored, removed) reloads or
    /// restarts them, unless its module is not taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<UnitTrigger>,
}

/// How a unit picks up a change of a file that configures it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PickUp {
    /// `systemctl reload`: the service reads its configuration again.
    Reload,
    /// `systemctl restart`.
    Restart,
}

impl PickUp {
    /// `reload` or `restart`.
    pub fn word(self) -> &'static str {
        match self {
            PickUp::Reload => "reload",
            PickUp::Restart => "restart",
        }
    }
}

/// A unit a file configures.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitTrigger {
    /// The unit.
    pub unit: UnitName,
    /// How it picks a change up.
    pub how: PickUp,
}

/// What a change of a declared unit's own file (outside `[Install]`) does to it while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnChange {
    /// Restart it (the default).
    Restart,
    /// Reload it.
    Reload,
    /// Leave it running as it is: the change applies at its next start.
    Leave,
}

/// What the mesh does with a declared unit on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnitState {
    /// Its file written, enabled and started as declared.
    Managed,
    /// Of an assigned, not yet taken module on an adopted node, colliding with nothing: its file
    /// is written; it is not enabled, started, stopped, reloaded or restarted.
    Staged,
    /// Found on an adopted node (systemd knew a unit of its name, or its file was found), its
    /// module not taken: untouched. When its file was found elsewhere than the declared path,
    /// the declared file is not written either.
    Held,
}

impl UnitState {
    /// One word for people.
    pub fn word(&self) -> &'static str {
        match self {
            UnitState::Managed => "managed",
            UnitState::Staged => "staged",
            UnitState::Held => "held",
        }
    }
}

/// A systemd unit a module declares. Its file, `/etc/systemd/system/NAME`, is a declared file
/// of the same module (except while it is held by a unit file found elsewhere).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitEntry {
    /// The module that declares it.
    pub module: ModuleName,
    /// Wanted by the targets its `[Install]` section names (`systemctl enable`).
    pub enabled: bool,
    /// Running after the switch.
    pub started: bool,
    /// What a change of its unit file does to it while it runs.
    pub on_change: OnChange,
    /// The digest of its unit file without the `[Install]` section: when it changes, the unit
    /// is restarted (or reloaded, or left) as `on_change` says.
    pub body: BlobHash,
    /// The digest of the `[Install]` section alone: when only it changes, the unit is enabled
    /// again, not restarted.
    pub install: BlobHash,
    /// What the mesh does with it here.
    pub state: UnitState,
    /// For a template (`NAME@.service`), the instances the mesh enables and starts as
    /// `enabled` and `started` say (`NAME@INSTANCE.service`); a template itself is never
    /// enabled or started. Empty for any other unit (and then not encoded: no id moves).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<String>,
}

impl UnitEntry {
    /// The units systemd runs for it, by name: a template's declared instances, or itself.
    pub fn runs_as(&self, name: &UnitName) -> Vec<UnitName> {
        name.runs_as(&self.instances)
    }
}

/// A unit file's text in two: everything but the `[Install]` section, and that section alone
/// (a section runs from its `[Name]` line to the next section's).
pub fn split_install(text: &str) -> (String, String) {
    let (mut body, mut install) = (String::new(), String::new());
    let mut in_install = false;
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if t.starts_with('[') && t.ends_with(']') {
            in_install = t == "[Install]";
        }
        if in_install {
            install.push_str(line);
        } else {
            body.push_str(line);
        }
    }
    (body, install)
}

/// TCP or UDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Protocol {
    /// `tcp` or `udp`, as nft writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A container port published on the host.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishedPort {
    /// The host address it binds, `0.0.0.0` for every interface.
    pub host_ip: std::net::IpAddr,
    /// The host port: a setting.
    pub host_port: Port,
    /// The port inside the container.
    pub container_port: Port,
    /// TCP or UDP.
    pub protocol: Protocol,
}

/// A volume mounted into a container.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Volume {
    /// A named volume, or an absolute host path.
    pub source: String,
    /// The absolute path inside the container.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// A bind mount's propagation (`shared`, `slave`, `private`, `rshared`, `rslave`);
    /// `rprivate`, the engine's default, when not declared (and then not encoded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagation: Option<String>,
    /// A named volume not filled from the image's content at that path (`nocopy`; not encoded
    /// when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nocopy: bool,
    /// Relabelled for SELinux: `z` (shared) or `Z` (private); not encoded when not declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selinux: Option<String>,
}

impl Volume {
    /// A volume of `source` at `target`, with the engine's defaults otherwise.
    pub fn new(source: impl Into<String>, target: impl Into<String>, read_only: bool) -> Self {
        Self {
            source: source.into(),
            target: target.into(),
            read_only,
            propagation: None,
            nocopy: false,
            selinux: None,
        }
    }

    /// Its options as a bind's third part says them (`ro,rslave,z,nocopy`), empty for none.
    pub fn mode(&self) -> String {
        let mut parts: Vec<&str> = Vec::new();
        if self.read_only {
            parts.push("ro");
        }
        parts.extend(self.propagation.as_deref());
        parts.extend(self.selinux.as_deref());
        if self.nocopy {
            parts.push("nocopy");
        }
        parts.join(",")
    }
}

/// An engine network a container joins, and the names it answers to there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerNetwork {
    /// The network's name (a compose project's `PROJECT_default`, say).
    pub name: String,
    /// The names other containers on it reach this one by, sorted (beside its own name).
    pub aliases: Vec<String>,
    /// Its fixed IPv4 address there; the one the network gives when not declared (and then
    /// not encoded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4_address: Option<std::net::Ipv4Addr>,
    /// Its fixed IPv6 address there (not encoded when not declared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_address: Option<std::net::Ipv6Addr>,
}

impl ContainerNetwork {
    /// The network `name`, where the container answers to `aliases` and gets the address the
    /// network gives.
    pub fn new(name: impl Into<String>, aliases: Vec<String>) -> Self {
        Self {
            name: name.into(),
            aliases,
            ipv4_address: None,
            ipv6_address: None,
        }
    }
}

/// How the engine checks a container is healthy (`docker run --health-*`, compose's
/// `healthcheck`). A field not given is the image's (or the engine's default).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Healthcheck {
    /// `["CMD", ARG…]`, `["CMD-SHELL", COMMAND]`, or `["NONE"]` (the image's check disabled);
    /// empty for the image's.
    pub test: Vec<String>,
    /// Between checks, in nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<u64>,
    /// A check's limit, in nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Failures in a row before it is unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// The start's grace, in nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_period: Option<u64>,
}

/// The units of a duration as the engine and compose write it (Go's): `1h30m`, `500ms`.
const DURATION_UNITS: [(&str, u64); 6] = [
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// A duration written as compose writes one (`30s`, `1m30s`, `500ms`), in nanoseconds.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let bad = || format!("`{text}` is not a duration such as 30s, 1m30s or 500ms");
    let mut rest = text;
    let mut total: u64 = 0;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (_, scale) = DURATION_UNITS
            .iter()
            .find(|(u, _)| *u == &rest[..unit])
            .ok_or_else(bad)?;
        rest = &rest[unit..];
        total = number
            .checked_mul(*scale)
            .and_then(|n| total.checked_add(n))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

/// `nanos` as [`parse_duration`] reads it, shortest first (`1m30s`, `500ms`, `0s`).
pub fn format_duration(nanos: u64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = nanos;
    for (unit, scale) in DURATION_UNITS {
        if rest >= scale {
            out.push_str(&format!("{}{unit}", rest / scale));
            rest %= scale;
        }
    }
    out
}

/// What the mesh does with a declared container on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum ContainerState {
    /// Created, running and owned by the mesh.
    Managed,
    /// Of an assigned, not yet taken module on an adopted node, colliding with nothing: created,
    /// not started.
    Staged,
    /// Found on an adopted node under the declared name, its module not taken: not stopped, not
    /// restarted, not recreated.
    Held {
        /// The hash of the found container's recorded spec.
        original: BlobHash,
    },
}

impl ContainerState {
    /// One word for people.
    pub fn word(&self) -> &'static str {
        match self {
            ContainerState::Managed => "managed",
            ContainerState::Staged => "staged",
            ContainerState::Held { .. } => "held",
        }
    }
}

/// A declared container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerEntry {
    /// The module that declares it.
    pub module: ModuleName,
    /// The image reference, as declared.
    pub image: String,
    /// The manifest digest the image is pinned by (`REPO[:TAG]@sha256:…`), so the id changes
    /// when the digest does and never when a tag moves; not encoded when the image is named by
    /// tag alone (a generation without digests keeps its id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<crate::image::ImageDigest>,
    /// The command, empty for the image's default.
    pub command: Vec<String>,
    /// Environment variables.
    pub environment: BTreeMap<String, String>,
    /// Environment variables whose values are secrets of the fleet's tree: each its secret's
    /// plaintext, decrypted on the node when the container is created (never in a generation,
    /// the store, an output or a label: the spec the mesh labels a container with names the
    /// plaintext by its keyed digest). None of its names is also in `environment`. Not encoded
    /// when there are none (a generation without them keeps its id).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_environment: BTreeMap<String, crate::secret::SecretRef>,
    /// Published ports, sorted.
    pub ports: Vec<PublishedPort>,
    /// Mounted volumes, sorted.
    pub volumes: Vec<Volume>,
    /// Labels the declaration gives (the mesh adds its own when it creates the container).
    pub labels: BTreeMap<String, String>,
    /// Seconds it is given to stop after SIGTERM before it is killed; the engine's default when
    /// not declared (and then not encoded: a generation without one keeps its id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_timeout: Option<u32>,
    /// The engine's restart policy (`always`, `unless-stopped`, `on-failure`, `on-failure:N`);
    /// none when not declared (and then not encoded: a generation without one keeps its id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<String>,
    /// The engine networks it joins instead of the default bridge, sorted by name; none when
    /// not declared (and then not encoded: a generation without them keeps its id).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<ContainerNetwork>,
    /// Its health check, when it declares one (not encoded otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthcheck: Option<Healthcheck>,
    /// Every other option it is run with (limits, security, devices, DNS, logging,
    /// namespaces, tmpfs…); not encoded when it sets none, so a generation without them
    /// keeps its id.
    #[serde(default, skip_serializing_if = "ContainerOptions::is_empty")]
    pub options: ContainerOptions,
    /// What the operator accepts to lose when a take or a switch recreates the found container
    /// under its name: each a gap's name as `mesh import` names it (`HostConfig.CpusetMems`),
    /// or `*` for every gap. Not part of the container's spec (accepting changes nothing
    /// created); not encoded when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accept_gaps: Vec<String>,
    /// What the mesh does with it here.
    pub state: ContainerState,
}

impl ContainerEntry {
    /// A container of `module` that runs `image` as the image says, with nothing else declared
    /// (no command, environment, ports, volumes or labels), in `state`.
    pub fn new(module: ModuleName, image: impl Into<String>, state: ContainerState) -> Self {
        Self {
            module,
            image: image.into(),
            digest: None,
            command: Vec::new(),
            environment: BTreeMap::new(),
            secret_environment: BTreeMap::new(),
            ports: Vec::new(),
            volumes: Vec::new(),
            labels: BTreeMap::new(),
            stop_timeout: None,
            restart: None,
            networks: Vec::new(),
            healthcheck: None,
            options: ContainerOptions::default(),
            accept_gaps: Vec::new(),
            state,
        }
    }

    /// The digest held is the one the image reference is pinned by (none for a tag alone).
    pub fn check_digest(&self) -> Result<(), String> {
        let declared = if self.image.contains('@') {
            crate::image::ImageRef::parse(&self.image)
                .map_err(|e| e.to_string())?
                .digest()
                .cloned()
        } else {
            None
        };
        if declared != self.digest {
            return Err(format!(
                "image {} is held with digest {}",
                self.image,
                self.digest
                    .as_ref()
                    .map_or("none".to_owned(), ToString::to_string)
            ));
        }
        Ok(())
    }

    /// Every string `mesh show` prints on a line of its own is free of control characters (see
    /// [`check_printable`]).
    pub fn check_printable(&self) -> Result<(), String> {
        check_printable("image", &self.image)?;
        for a in &self.command {
            check_printable("command argument", a)?;
        }
        for k in self
            .environment
            .keys()
            .chain(self.secret_environment.keys())
        {
            check_printable("environment variable", k)?;
        }
        for k in self.labels.keys() {
            check_printable("label", k)?;
        }
        for v in &self.volumes {
            check_printable("volume source", &v.source)?;
            check_printable("volume target", &v.target)?;
        }
        for n in &self.networks {
            check_printable("network", &n.name)?;
            for a in &n.aliases {
                check_printable("network alias", a)?;
            }
        }
        if let Some(h) = &self.healthcheck {
            for a in &h.test {
                check_printable("healthcheck argument", a)?;
            }
        }
        for g in &self.accept_gaps {
            check_printable("gap accepted", g)?;
        }
        self.options.check_printable()
    }
}

/// Which path through the kernel a packet to an opening takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrafficPath {
    /// To a socket on the node itself (the input hook).
    Incoming,
    /// To a container's published port, after DNAT (the forward hook).
    Forwarded,
}

/// Who may reach an opening.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "range")]
pub enum Source {
    /// Anyone, IPv4 and IPv6.
    Anywhere,
    /// Only the node's private network.
    Private,
    /// Only this IPv4 range.
    Range(Ipv4Net),
}

/// A port the mesh needs reachable.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Opening {
    /// The module that needs it (`foundation` for the bus, registry and hub).
    pub module: String,
    /// The name of the setting that gives the port.
    pub setting: String,
    /// The port.
    pub port: Port,
    /// TCP or UDP.
    pub protocol: Protocol,
    /// The paths it is opened on.
    pub paths: BTreeSet<TrafficPath>,
    /// Who may reach it.
    pub from: Source,
}

/// A module assigned to the node, and whether it is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleState {
    /// Assigned, not taken, on an adopted node: found items held, the rest staged.
    Assigned,
    /// Taken (on an adopted node) or simply managed (on a managed node).
    Taken,
}

/// The firewall rules of a generation, as nftables JSON (the `nftables` crate's schema), ready
/// for `nft -j -f`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirewallRules {
    /// The guard: a refuse-only table at prerouting, on every node.
    pub guard: nftables::schema::Nftables<'static>,
    /// The base ruleset: default drop, declared openings accepted. Only on a managed node.
    pub base: Option<nftables::schema::Nftables<'static>>,
}

/// A generation: everything the mesh wants a node to be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generation {
    /// [`FORMAT_VERSION`].
    pub format: u32,
    /// The node's name.
    pub node: NodeName,
    /// Adopted or managed.
    pub mode: Mode,
    /// Every port and the private network.
    pub settings: Settings,
    /// The assigned modules.
    pub modules: BTreeMap<ModuleName, ModuleState>,
    /// Declared files by path.
    pub files: BTreeMap<TargetPath, FileEntry>,
    /// Declared containers by name.
    pub containers: BTreeMap<ContainerName, ContainerEntry>,
    /// Openings, sorted. On an adopted node they are converged through the found firewall; on a
    /// managed node the base ruleset accepts them (and they go through a container runtime's
    /// chains that stay in force, as on an adopted one).
    pub openings: Vec<Opening>,
    /// The guard and, on a managed node, the base ruleset.
    pub firewall: FirewallRules,
    /// Declared systemd units by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub units: BTreeMap<UnitName, UnitEntry>,
}

impl Generation {
    /// The canonical encoding (see [`crate::canonical`]).
    pub fn canonical_bytes(&self) -> Result<Vec<u8>, CanonicalError> {
        to_canonical_json(self)
    }

    /// The generation's id: the blake3 digest of its canonical encoding.
    pub fn id(&self) -> Result<GenerationId, CanonicalError> {
        Ok(GenerationId::of(&self.canonical_bytes()?))
    }

    /// Every blob the generation references: declared contents and held originals.
    pub fn blobs(&self) -> BTreeSet<BlobHash> {
        let mut out = BTreeSet::new();
        for f in self.files.values() {
            out.insert(f.blob);
            if let FileState::Held { original } = f.state {
                out.insert(original);
            }
            if let Some(secret) = &f.secret {
                out.extend(secret.refs().iter().map(|(_, r)| r.ciphertext));
            }
        }
        for c in self.containers.values() {
            if let ContainerState::Held { original } = c.state {
                out.insert(original);
            }
            out.extend(c.secret_environment.values().map(|r| r.ciphertext));
        }
        out
    }

    /// The blobs a node is sent with the generation: every file's content and every secret's
    /// ciphertext (a template's and a container's environment's as well as a whole file's). A
    /// held original is not among them: it is the node's own, recorded there.
    pub fn sent_blobs(&self) -> BTreeSet<BlobHash> {
        let mut out = BTreeSet::new();
        for f in self.files.values() {
            out.insert(f.blob);
            if let Some(secret) = &f.secret {
                out.extend(secret.refs().iter().map(|(_, r)| r.ciphertext));
            }
        }
        for c in self.containers.values() {
            out.extend(c.secret_environment.values().map(|r| r.ciphertext));
        }
        out
    }

    /// Checks the invariants the compiler upholds, for a generation that comes from elsewhere
    /// (`mesh switch --generation` of a stored one): a held item only on an adopted node, for a
    /// module assigned and not taken; every item's module assigned; every opening's port and
    /// every published host port a value of [`Settings::ports`]; the openings sorted; the base
    /// ruleset on a managed node only. The first violation, described.
    pub fn validate(&self) -> Result<(), String> {
        let assigned = |module: &ModuleName, what: &str| match self.modules.get(module) {
            Some(_) => Ok(()),
            None => Err(format!(
                "{what} belongs to module {module}, which is not assigned"
            )),
        };
        let holdable = |module: &ModuleName, what: &str| {
            if self.mode != Mode::Adopted {
                return Err(format!("{what} is held on a managed node"));
            }
            match self.modules.get(module) {
                Some(ModuleState::Assigned) => Ok(()),
                _ => Err(format!(
                    "{what} is held, but its module {module} is taken or not assigned"
                )),
            }
        };
        for (path, f) in &self.files {
            let what = format!("file {path}");
            assigned(&f.module, &what)?;
            let special = f.mode.special();
            if !special.is_empty() && !f.special_mode {
                return Err(format!(
                    "{what} has mode {} ({}) without `special_mode`",
                    f.mode,
                    special.join(", ")
                ));
            }
            check_account_name(&f.owner).map_err(|e| format!("{what}: {e}"))?;
            check_account_name(&f.group).map_err(|e| format!("{what}: {e}"))?;
            if let FileState::Held { .. } = f.state {
                holdable(&f.module, &what)?;
            }
            if let Some(crate::secret::SecretContent::Whole(r)) = &f.secret {
                if r.ciphertext != f.blob {
                    return Err(format!(
                        "{what} is a secret whose content is not its ciphertext"
                    ));
                }
            }
        }
        let is_setting = |port: Port| self.settings.ports.values().any(|p| *p == port);
        for (name, c) in &self.containers {
            let what = format!("container {name}");
            assigned(&c.module, &what)?;
            c.check_printable().map_err(|e| format!("{what}: {e}"))?;
            c.check_digest().map_err(|e| format!("{what}: {e}"))?;
            if let Some(k) = c
                .secret_environment
                .keys()
                .find(|k| c.environment.contains_key(*k))
            {
                return Err(format!(
                    "{what} gives environment variable {k} both as a value and as a secret"
                ));
            }
            if let Some(k) = c
                .secret_environment
                .keys()
                .find(|k| k.is_empty() || k.contains(['=', '\0']))
            {
                return Err(format!(
                    "{what} has a secret environment variable named {k:?}, which no variable can be"
                ));
            }
            if let ContainerState::Held { .. } = c.state {
                holdable(&c.module, &what)?;
            }
            if let Some(p) = c.ports.iter().find(|p| !is_setting(p.host_port)) {
                return Err(format!(
                    "{what} publishes host port {}, which is not a setting",
                    p.host_port
                ));
            }
        }
        for (name, u) in &self.units {
            let what = format!("unit {name}");
            assigned(&u.module, &what)?;
            let file = self.files.get(&name.file());
            match u.state {
                UnitState::Held => holdable(&u.module, &what)?,
                _ if file.is_none_or(|f| f.module != u.module) => {
                    return Err(format!(
                        "{what} has no file {} of its module {}",
                        name.file(),
                        u.module
                    ))
                }
                _ => {}
            }
            if !u.instances.is_empty() && !name.is_template() {
                return Err(format!(
                    "{what} has instances but is not a template (NAME@.TYPE)"
                ));
            }
            for i in &u.instances {
                name.instance(i).map_err(|e| format!("{what}: {e}"))?;
            }
        }
        for name in self.settings.ports.keys() {
            check_setting_name(name)?;
        }
        for o in &self.openings {
            if o.module != "foundation" {
                ModuleName::new(&o.module).map_err(|e| e.to_string())?;
            }
            if self.settings.ports.get(&o.setting) != Some(&o.port) {
                return Err(format!(
                    "the opening of module {} names setting {} but port {}",
                    o.module, o.setting, o.port
                ));
            }
        }
        if !self.openings.windows(2).all(|w| w[0] <= w[1]) {
            return Err("the openings are not sorted".into());
        }
        if (self.mode == Mode::Managed) != self.firewall.base.is_some() {
            return Err(format!(
                "a {} node {} a base ruleset",
                self.mode,
                if self.firewall.base.is_some() {
                    "has"
                } else {
                    "lacks"
                }
            ));
        }
        Ok(())
    }

    /// How many files are in each state, as (managed, staged, held).
    pub fn file_counts(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for f in self.files.values() {
            match f.state {
                FileState::Managed => counts.0 += 1,
                FileState::Staged => counts.1 += 1,
                FileState::Held { .. } => counts.2 += 1,
            }
        }
        counts
    }

    /// What a build says of the generation.
    pub fn summary(&self) -> Summary {
        let (managed, staged, held) = self.file_counts();
        let mut containers = Counts::default();
        for c in self.containers.values() {
            match c.state {
                ContainerState::Managed => containers.managed += 1,
                ContainerState::Staged => containers.staged += 1,
                ContainerState::Held { .. } => containers.held += 1,
            }
        }
        Summary {
            node: self.node.clone(),
            mode: self.mode,
            modules: self.modules.len(),
            files: Counts {
                managed,
                staged,
                held,
            },
            containers,
            openings: self.openings.len(),
        }
    }
}

/// A generation in a few numbers: what a build reports, without the generation itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// The node's name.
    pub node: NodeName,
    /// Adopted or managed.
    pub mode: Mode,
    /// How many modules are assigned.
    pub modules: usize,
    /// The declared files, by state.
    pub files: Counts,
    /// The declared containers, by state.
    pub containers: Counts,
    /// How many openings.
    pub openings: usize,
}

/// How many items are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Managed.
    pub managed: usize,
    /// Staged.
    pub staged: usize,
    /// Held.
    pub held: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A duration as compose and the engine write one, read back as written, shortest first.
    #[test]
    fn durations_read_and_written_as_compose_writes_them() {
        assert_eq!(parse_duration("30s"), Ok(30_000_000_000));
        assert_eq!(parse_duration("1m30s"), Ok(90_000_000_000));
        assert_eq!(parse_duration("500ms"), Ok(500_000_000));
        assert_eq!(parse_duration("1h2m3s4ms5us6ns"), Ok(3_723_004_005_006));
        for bad in ["", "30", "s", "1x", "-1s", "1.5s", "99999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        for nanos in [0, 1, 500_000_000, 90_000_000_000, 3_723_004_005_006] {
            assert_eq!(parse_duration(&format_duration(nanos)), Ok(nanos));
        }
        assert_eq!(format_duration(90_000_000_000), "1m30s");
        assert_eq!(format_duration(0), "0s");
    }

    fn generation() -> Generation {
        let settings = Settings {
            ports: [("web".to_owned(), Port::new(8080).unwrap())].into(),
            private_network: PrivateNetwork {
                range: "10.0.0.0/24".parse().unwrap(),
                address: "10.0.0.1".parse().unwrap(),
                hub: false,
            },
        };
        let web = ModuleName::new("web").unwrap();
        Generation {
            format: FORMAT_VERSION,
            node: NodeName::new("n").unwrap(),
            mode: Mode::Adopted,
            firewall: FirewallRules {
                guard: crate::firewall::guard_ruleset(&settings),
                base: None,
            },
            settings,
            modules: [(web.clone(), ModuleState::Assigned)].into(),
            files: [(
                TargetPath::new("/etc/web.conf").unwrap(),
                FileEntry {
                    module: web,
                    blob: BlobHash::of(b"new"),
                    size: 3,
                    mode: FileMode::parse("0644").unwrap(),
                    owner: "0".into(),
                    group: "0".into(),
                    special_mode: false,
                    secret: None,
                    state: FileState::Held {
                        original: BlobHash::of(b"old"),
                    },
                    units: Vec::new(),
                },
            )]
            .into(),
            containers: BTreeMap::new(),
            openings: vec![Opening {
                module: "web".into(),
                setting: "web".into(),
                port: Port::new(8080).unwrap(),
                protocol: Protocol::Tcp,
                paths: [TrafficPath::Incoming].into(),
                from: Source::Anywhere,
            }],
            units: BTreeMap::new(),
        }
    }

    /// What the compiler builds passes; each broken invariant is named.
    #[test]
    fn validate_names_the_broken_invariant() {
        assert_eq!(generation().validate(), Ok(()));
        let mut taken = generation();
        taken
            .modules
            .insert(ModuleName::new("web").unwrap(), ModuleState::Taken);
        assert!(taken
            .validate()
            .unwrap_err()
            .contains("taken or not assigned"));
        let mut port = generation();
        port.openings[0].port = Port::new(9090).unwrap();
        assert!(port
            .validate()
            .unwrap_err()
            .contains("names setting web but port 9090"));
        let mut unassigned = generation();
        unassigned.modules.clear();
        assert!(unassigned.validate().unwrap_err().contains("not assigned"));
        let mut base = generation();
        base.firewall.base = Some(base.firewall.guard.clone());
        assert!(base.validate().unwrap_err().contains("has a base ruleset"));
        let mut setuid = generation();
        let file = setuid.files.values_mut().next().unwrap();
        file.mode = FileMode::parse("4755").unwrap();
        assert!(setuid
            .validate()
            .unwrap_err()
            .contains("mode 4755 (setuid) without `special_mode`"));
        setuid.files.values_mut().next().unwrap().special_mode = true;
        assert_eq!(setuid.validate(), Ok(()));
        let mut setting = generation();
        let port = setting.settings.ports.remove("web").unwrap();
        let injected = "web\" -j ACCEPT\n-I INPUT -j ACCEPT\n#";
        setting.settings.ports.insert(injected.into(), port);
        setting.openings[0].setting = injected.into();
        assert!(setting
            .validate()
            .unwrap_err()
            .contains("is not a setting name"));
        let mut owner = generation();
        owner.files.values_mut().next().unwrap().owner = "root\nx".into();
        assert!(owner.validate().unwrap_err().contains("root\\nx"));
        // A container's secret environment: a name given twice, or no variable's name.
        let with_secret = |name: &str, plain: &[(&str, &str)]| {
            let mut g = generation();
            let entry: ContainerEntry = serde_json::from_value(serde_json::json!({
                "module": "web", "image": "app:1", "command": [],
                "environment": plain.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect::<BTreeMap<String, &str>>(),
                "secret_environment": { name: { "ciphertext": format!("b3:{}", "0".repeat(64)), "file": "secrets/x.age", "recipients": ["n1"] } },
                "ports": [], "volumes": [], "labels": {}, "state": { "kind": "managed" },
            }))
            .unwrap();
            g.containers
                .insert(ContainerName::new("app").unwrap(), entry);
            g.validate()
        };
        assert_eq!(with_secret("DB_PASSWORD", &[("MODE", "prod")]), Ok(()));
        assert!(with_secret("MODE", &[("MODE", "prod")])
            .unwrap_err()
            .contains("both as a value and as a secret"));
        assert!(with_secret("A=B", &[])
            .unwrap_err()
            .contains("which no variable can be"));
    }
}
