//! The node's profile: numbered generation links, the `current` pointer and the log of switches.
//!
//! ```text
//! STATE/profile/generation-7 -> ../store/generations/<hex>
//! STATE/profile/current      -> generation-7
//! STATE/profile.log          one JSON object a line: number, id, time, trigger, declaration
//! ```
//!
//! The log is history for people, not what the profile is made of (the links are): a line that
//! is not an entry (cut short by a crash, damaged, written by something else) is named and
//! skipped, and every other entry stays readable; the next entry starts on a line of its own.
//!
//! A link is created under a temporary name and renamed into place, then the folder is fsynced:
//! `current` always names a complete generation. The new numbered link is added before `current`
//! moves, so a crash leaves an extra link, never a dangling `current`. Time lives in the log only,
//! never in a generation.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use mesh_lib::{atomic, GenerationId};
use serde::{Deserialize, Serialize};

/// What caused a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// `mesh switch` of a declaration or a generation.
    Build,
    /// `mesh adopt`.
    Adopt,
    /// `mesh take`.
    Take,
    /// `mesh rollback`.
    Rollback,
    /// `mesh flip`.
    Flip,
    /// Written after a crash: the switch committed but did not get to log itself.
    Recovered,
    /// A deploy (`mesh switch --confirm-within`), confirmed or still waiting.
    Deploy,
    /// A deploy not confirmed in time, or whose units failed: the node switched back by itself.
    Revert,
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The generation's number in the profile.
    pub number: u64,
    /// Its id.
    pub id: GenerationId,
    /// When (RFC 3339, UTC).
    pub time: String,
    /// What caused it.
    pub trigger: Trigger,
    /// The declaration it was built from, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declaration: Option<PathBuf>,
}

/// A line of the log that is not an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedLine {
    /// Its number, from 1.
    pub line: usize,
    /// Why it is not an entry.
    pub why: String,
}

/// The log as read: its entries, oldest first, and the lines that are not entries.
#[derive(Debug, Default)]
pub struct Log {
    /// The entries.
    pub entries: Vec<Entry>,
    /// The lines skipped.
    pub damaged: Vec<DamagedLine>,
}

/// The profile of the node whose state directory is `state`.
pub struct Profile {
    dir: PathBuf,
    log: PathBuf,
}

fn link_name(number: u64) -> String {
    format!("generation-{number}")
}

impl Profile {
    /// Opens (creating) the profile.
    pub fn open(state: &Path) -> io::Result<Self> {
        let dir = state.join("profile");
        atomic::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            log: state.join("profile.log"),
        })
    }

    /// The log's file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The numbers and ids of every generation link, in order.
    pub fn generations(&self) -> io::Result<Vec<(u64, GenerationId)>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(n) = name
                .to_str()
                .and_then(|n| n.strip_prefix("generation-"))
                .and_then(|n| n.parse().ok())
            else {
                continue;
            };
            if let Some(id) = link_target_id(&entry.path()) {
                out.push((n, id));
            }
        }
        out.sort();
        Ok(out)
    }

    /// The current generation's number and id, if the node has one.
    pub fn current(&self) -> io::Result<Option<(u64, GenerationId)>> {
        let current = self.dir.join("current");
        let target = match fs::read_link(&current) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let number = target
            .to_str()
            .and_then(|t| t.strip_prefix("generation-"))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| {
                io::Error::other(format!(
                    "{} points at {}",
                    current.display(),
                    target.display()
                ))
            })?;
        let id = link_target_id(&self.dir.join(&target)).ok_or_else(|| {
            io::Error::other(format!("{} is not a generation link", target.display()))
        })?;
        Ok(Some((number, id)))
    }

    fn replace_link(&self, name: &str, target: &Path) -> io::Result<()> {
        let tmp = self.dir.join(format!("{}{name}", atomic::TEMP_PREFIX));
        let _stale = fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp)?;
        fs::rename(&tmp, self.dir.join(name))?;
        atomic::sync_dir(&self.dir)
    }

    /// Adds generation `id` as the next number and makes it current; appends to the log.
    pub fn commit(
        &self,
        id: GenerationId,
        trigger: Trigger,
        declaration: Option<&Path>,
    ) -> io::Result<u64> {
        let number = self.generations()?.last().map_or(1, |(n, _)| n + 1);
        self.replace_link(
            &link_name(number),
            &Path::new("../store/generations").join(id.hex()),
        )?;
        mesh_lib::crash::point("profile-link-created");
        self.replace_link("current", Path::new(&link_name(number)))?;
        mesh_lib::crash::point("current-switched");
        self.append(&Entry {
            number,
            id,
            time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            trigger,
            declaration: declaration.map(Path::to_owned),
        })?;
        mesh_lib::crash::point("log-appended");
        Ok(number)
    }

    fn append(&self, entry: &Entry) -> io::Result<()> {
        let mut line = serde_json::to_vec(entry).map_err(io::Error::other)?;
        line.push(b'\n');
        let mut f = fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .mode(0o600)
            .open(&self.log)?;
        // After a line a crash cut short (or any text without a final newline), the entry
        // starts a line of its own: it is never glued to the damage.
        let len = f.metadata()?.len();
        let mut last = [b'\n'];
        if len > 0 {
            f.read_exact_at(&mut last, len - 1)?;
        }
        if last[0] != b'\n' {
            line.insert(0, b'\n');
        }
        f.write_all(&line)?;
        f.sync_all()
    }

    /// Logs the current generation if a crash kept its switch from doing so.
    pub fn repair_log(&self) -> io::Result<()> {
        let Some((number, id)) = self.current()? else {
            return Ok(());
        };
        if self.log()?.iter().any(|e| e.number == number) {
            return Ok(());
        }
        self.append(&Entry {
            number,
            id,
            time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            trigger: Trigger::Recovered,
            declaration: None,
        })
    }

    /// The log's entries, oldest first; a line that is not an entry is skipped (see
    /// [`Profile::read_log`] to name it).
    pub fn log(&self) -> io::Result<Vec<Entry>> {
        Ok(self.read_log()?.entries)
    }

    /// The log's entries, oldest first, and every line that is not an entry (not text, not
    /// JSON, not an entry, cut short), named by its number: one damaged line never hides the
    /// rest of the history.
    pub fn read_log(&self) -> io::Result<Log> {
        let bytes = match fs::read(&self.log) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Log::default()),
            Err(e) => return Err(e),
        };
        let mut log = Log::default();
        let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
        let count = lines.len();
        for (i, raw) in lines.into_iter().enumerate() {
            let cut_short = i + 1 == count;
            if raw.is_empty() {
                continue;
            }
            let why = match std::str::from_utf8(raw) {
                Err(_) => "not text".to_owned(),
                Ok(text) => match serde_json::from_str::<Entry>(text) {
                    Ok(entry) if !cut_short => {
                        log.entries.push(entry);
                        continue;
                    }
                    Ok(_) => "cut short (no newline at its end)".to_owned(),
                    Err(_) if cut_short => "cut short (no newline at its end)".to_owned(),
                    Err(e) => format!("not a log entry ({e})"),
                },
            };
            log.damaged.push(DamagedLine { line: i + 1, why });
        }
        Ok(log)
    }

    /// Removes generation links not in `keep` (never the current one).
    pub fn remove_links(&self, keep: &[u64]) -> io::Result<Vec<u64>> {
        let current = self.current()?.map(|(n, _)| n);
        let mut removed = Vec::new();
        for (n, _) in self.generations()? {
            if !keep.contains(&n) && Some(n) != current {
                fs::remove_file(self.dir.join(link_name(n)))?;
                removed.push(n);
            }
        }
        atomic::sync_dir(&self.dir)?;
        Ok(removed)
    }
}

fn link_target_id(link: &Path) -> Option<GenerationId> {
    let target = fs::read_link(link).ok()?;
    GenerationId::from_hex(target.file_name()?.to_str()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> GenerationId {
        GenerationId::of(&[n])
    }

    /// A damaged line in the middle and a line cut short at the end are named, every entry
    /// around them stays readable, and the next entry starts a line of its own.
    #[test]
    fn a_damaged_line_is_named_and_the_history_stays_readable() {
        let dir = tempfile::tempdir().unwrap();
        let profile = Profile::open(dir.path()).unwrap();
        profile.commit(id(1), Trigger::Build, None).unwrap();
        let log = dir.path().join("profile.log");
        let mut f = fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"\xff\xfe garbage\n{\"number\": \"two\"}\n")
            .unwrap();
        drop(f);
        profile.commit(id(2), Trigger::Take, None).unwrap();
        let mut f = fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"{\"number\":3,\"id\":").unwrap();
        drop(f);

        let read = profile.read_log().unwrap();
        assert_eq!(
            read.entries.iter().map(|e| e.number).collect::<Vec<_>>(),
            [1, 2]
        );
        let lines: Vec<usize> = read.damaged.iter().map(|d| d.line).collect();
        assert_eq!(lines, [2, 3, 5]);
        assert_eq!(read.damaged[0].why, "not text");
        assert!(read.damaged[2].why.contains("cut short"));

        // The next commit is not glued to the line cut short.
        profile.commit(id(3), Trigger::Rollback, None).unwrap();
        let read = profile.read_log().unwrap();
        assert_eq!(
            read.entries.iter().map(|e| e.number).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(read.entries[2].trigger, Trigger::Rollback);
        assert_eq!(read.damaged.len(), 3, "{:?}", read.damaged);
    }
}
