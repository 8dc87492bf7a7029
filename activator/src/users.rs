//! Owner and group names to ids, from the machine's `/etc/passwd` and `/etc/group` (a numeric
//! name is taken as the id). Parsers take `impl Read`, so they are tested without the machine.

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
            Some((name.to_owned(), id))
        })
        .collect()
}

impl Ids {
    /// Reads the machine's databases.
    pub fn load() -> Self {
        let open = |p: &str| std::fs::File::open(p).map(parse).unwrap_or_default();
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
        name.parse().ok().or_else(|| self.users.get(name).copied())
    }

    /// The gid of a group name or number.
    pub fn gid(&self, name: &str) -> Option<u32> {
        name.parse().ok().or_else(|| self.groups.get(name).copied())
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
    }
}
