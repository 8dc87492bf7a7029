//! Owner and group names to ids, from the `/etc/passwd` and `/etc/group` of the root the files
//! are written under (`--root`), not of the machine the mesh runs on: a root that is another
//! system's (an image, a container's filesystem) has its own users. The databases are read
//! beneath the root like any declared path (no symlink followed). A numeric name is taken as the
//! id, and `root` is 0 on every system, even one whose databases are missing. Parsers take
//! `impl Read`, so they are tested without the machine.

use std::collections::BTreeMap;
use std::io::Read;

/// Names to ids.
#[derive(Debug, Default, Clone)]
pub struct Ids {
    users: BTreeMap<String, u32>,
    groups: BTreeMap<String, u32>,
}

fn parse(mut input: impl Read) -> BTreeMap<String, u32> {
    let mut text = String::new();
    let _unreadable_is_empty = input.read_to_string(&mut text);
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let id = fields.nth(1)?.parse().ok()?;
            // A name that is not a plain name (a control character, a space) is not one a
            // declaration can give, and is shown nowhere: its id stays a number.
            mesh_lib::model::check_account_name(name).ok()?;
            Some((name.to_owned(), id))
        })
        .collect()
}

impl Ids {
    /// Reads the databases of `root`: its `/etc/passwd` and `/etc/group`, each absent when it is
    /// not a regular file reachable beneath the root.
    pub fn load(root: &crate::root::Root) -> Self {
        let open = |p: &str| {
            let path = mesh_lib::TargetPath::new(p).expect("a valid path");
            match root.observe(&path) {
                Ok((crate::root::Observed::File(_), Some(bytes))) => parse(bytes.as_slice()),
                _ => BTreeMap::new(),
            }
        };
        Self {
            users: open("/etc/passwd"),
            groups: open("/etc/group"),
        }
    }

    /// From passwd- and group-format text.
    pub fn from_readers(passwd: impl Read, group: impl Read) -> Self {
        Self {
            users: parse(passwd),
            groups: parse(group),
        }
    }

    /// The uid of a user name or number.
    pub fn uid(&self, name: &str) -> Option<u32> {
        Self::resolve(&self.users, name)
    }

    /// The gid of a group name or number.
    pub fn gid(&self, name: &str) -> Option<u32> {
        Self::resolve(&self.groups, name)
    }

    fn resolve(database: &BTreeMap<String, u32>, name: &str) -> Option<u32> {
        name.parse()
            .ok()
            .or_else(|| database.get(name).copied())
            .or_else(|| (name == "root").then_some(0))
    }

    /// The name of a uid, or the number.
    pub fn user_name(&self, uid: u32) -> String {
        self.users
            .iter()
            .find(|(_, id)| **id == uid)
            .map_or_else(|| uid.to_string(), |(n, _)| n.clone())
    }

    /// The name of a gid, or the number.
    pub fn group_name(&self, gid: u32) -> String {
        self.groups
            .iter()
            .find(|(_, id)| **id == gid)
            .map_or_else(|| gid.to_string(), |(n, _)| n.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names resolve from the databases; numbers stand for themselves; unknown names do not.
    #[test]
    fn resolves_names_and_numbers() {
        let ids = Ids::from_readers(
            "root:x:0:0:root:/root:/bin/bash\nwww-data:x:33:33::/var/www:/usr/sbin/nologin\n"
                .as_bytes(),
            "root:x:0:\nssl-cert:x:112:\n".as_bytes(),
        );
        assert_eq!(ids.uid("www-data"), Some(33));
        assert_eq!(ids.gid("ssl-cert"), Some(112));
        assert_eq!(ids.uid("1234"), Some(1234));
        assert_eq!(ids.uid("nobody-here"), None);
        assert_eq!(ids.user_name(33), "www-data");
        assert_eq!(ids.group_name(999), "999");
        let odd = Ids::from_readers(
            "ev\u{1b}[2Jil:x:66:66::/:/bin/sh\n".as_bytes(),
            "".as_bytes(),
        );
        assert_eq!(
            odd.user_name(66),
            "66",
            "a name with a control character is not used"
        );
        let none = Ids::default();
        assert_eq!((none.uid("root"), none.gid("root")), (Some(0), Some(0)));
        assert_eq!(none.uid("www-data"), None);
    }

    /// The databases are the root's, not the machine's: a name only the root knows resolves
    /// to the root's id, and a name only the machine knows does not resolve.
    #[test]
    fn resolves_against_the_roots_databases() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(
            dir.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nonly-in-root:x:4242:4243::/:/bin/false\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("etc/group"), "only-in-root:x:4243:\n").unwrap();
        let root = crate::root::Root::open(dir.path(), crate::root::TempKey::ephemeral().unwrap());
        let ids = Ids::load(&root.unwrap());
        assert_eq!(ids.uid("only-in-root"), Some(4242));
        assert_eq!(ids.gid("only-in-root"), Some(4243));
        // On this machine, `daemon` (Debian's uid 1) exists; in this root, it does not.
        assert_eq!(ids.uid("daemon"), None);
    }
}
