//! The filesystem under `--root`, reached only through file descriptors resolved with `openat2`
//! (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`): a symlink anywhere in a
//! declared path is refused, and nothing outside the root is ever opened.
//!
//! A file is written as a temp file in its folder, created with its final mode and owner,
//! written, fsynced, renamed over the target, then the folder is fsynced.
//!
//! The temp file's name, `.NAME.mesh-TAG`, is one only the mesh can make: TAG is a keyed digest
//! of the declared path under this node's secret ([`TempKey`], `STATE/temp-key`, readable by
//! the state directory's owner only). So the name is the same on every try, and a crash's
//! leftover is found and removed by the next switch; and a file of anyone else's beside a
//! declared path — an operator's `.NAME.mesh-tmp`, say — can never bear it, so it is never
//! mistaken for a leftover and never removed.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use mesh_lib::model::FileMode;
use mesh_lib::{BlobHash, TargetPath};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// A filesystem error, naming the declared path.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// A symlink at or above a declared path.
    #[error("{path}: a symlink is in the way (at the path or in one of its folders); the mesh never writes through a symlink")]
    Symlink {
        /// The declared path.
        path: TargetPath,
    },
    /// A folder where a file is declared.
    #[error("{path}: a folder is where a file is declared")]
    Folder {
        /// The declared path.
        path: TargetPath,
    },
    /// A file where a folder is needed.
    #[error("{path}: one of its parents is not a folder")]
    NotAFolder {
        /// The declared path.
        path: TargetPath,
    },
    /// Something other than a regular file (a socket, a device).
    #[error("{path}: not a regular file")]
    Special {
        /// The declared path.
        path: TargetPath,
    },
    /// The root itself.
    #[error("cannot open the root {path}: {source}")]
    OpenRoot {
        /// The root.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Any other failure.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The declared path.
        path: TargetPath,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// What is at a declared path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// Nothing.
    Absent,
    /// A regular file.
    File(FileFacts),
    /// A folder.
    Folder,
    /// A symlink at the path or above it.
    Symlink,
    /// A socket, a device, a fifo.
    Special,
}

/// A regular file's content hash and metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFacts {
    /// The content's blake3.
    pub hash: BlobHash,
    /// Permission bits.
    pub mode: FileMode,
    /// Owner uid.
    pub uid: u32,
    /// Group gid.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// What identifies this version of the file without reading it.
    pub stamp: Stamp,
}

/// Inode, size and change times: if a file's stamp is the one recorded when the mesh wrote it,
/// its content is the one written (the kernel moves ctime on every change, and no one can set
/// it back), so a no-op switch need not read and hash every file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Stamp {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Size.
    pub size: u64,
    /// Modification time, ns.
    pub mtime: i128,
    /// Change time, ns.
    pub ctime: i128,
}

impl Stamp {
    fn of(st: &rustix::fs::Stat) -> Self {
        Self {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
            ctime: i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec),
        }
    }
}

/// This node's secret for naming temp files under the root (see the module doc).
#[derive(Clone)]
pub struct TempKey([u8; 32]);

impl TempKey {
    /// The key of the node whose state directory is `state`: from `STATE/temp-key`, made on
    /// first use from the kernel's random bytes (`0600`). Two first users race safely: the
    /// file is created whole under its name once, and the loser reads the winner's.
    pub fn of_state(state: &Path) -> io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let path = state.join("temp-key");
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let mut random = [0u8; 32];
                File::open("/dev/urandom")?.read_exact(&mut random)?;
                let secret = hex_of(&random);
                let mut tmp = tempfile::Builder::new()
                    .prefix(mesh_lib::atomic::TEMP_PREFIX)
                    .permissions(std::fs::Permissions::from_mode(0o600))
                    .tempfile_in(state)?;
                tmp.write_all(secret.as_bytes())?;
                tmp.as_file().sync_all()?;
                match tmp.persist_noclobber(&path) {
                    Ok(_) => mesh_lib::atomic::sync_dir(state)?,
                    Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e.error),
                }
                std::fs::read(&path)?
            }
            Err(e) => return Err(e),
        };
        Ok(Self(blake3::derive_key("mesh temp file names v1", &bytes)))
    }

    /// The node's key for naming what is at a secret's path ([`mesh_lib::secret::DigestKey`]),
    /// derived from the same node secret for that purpose alone.
    pub fn digest_key(&self) -> mesh_lib::secret::DigestKey {
        mesh_lib::secret::DigestKey::derive(&self.0)
    }

    /// A key for tests and tools that never meet a crash's leftovers: random, never stored.
    pub fn ephemeral() -> io::Result<Self> {
        let mut random = [0u8; 32];
        File::open("/dev/urandom")?.read_exact(&mut random)?;
        Ok(Self(random))
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The root every declared path is resolved beneath.
pub struct Root {
    dir: OwnedFd,
    path: PathBuf,
    key: TempKey,
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// The longest stem of a file's name kept in its temp file's name: with the dot and the
/// `.mesh-` tag, the temp name stays within the 255 bytes a name may have.
const TEMP_STEM: usize = 200;

fn split(path: &TargetPath) -> (Vec<&str>, &str) {
    let mut parts: Vec<&str> = path.components().collect();
    let name = parts.pop().expect("a target path has a file name");
    (parts, name)
}

impl Root {
    /// Opens the root folder; its temp files are named with `key`.
    pub fn open(path: &Path, key: TempKey) -> Result<Self, RootError> {
        let dir = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| RootError::OpenRoot {
            path: path.to_owned(),
            source: e.into(),
        })?;
        Ok(Self {
            dir,
            path: path.to_owned(),
            key,
        })
    }

    /// The name of `path`'s temp file in its folder (see the module doc).
    fn temp_name(&self, path: &TargetPath) -> String {
        let (_, name) = split(path);
        let mut stem = name.len().min(TEMP_STEM);
        while !name.is_char_boundary(stem) {
            stem -= 1;
        }
        let tag = blake3::keyed_hash(&self.key.0, path.as_str().as_bytes());
        format!(".{}.mesh-{}", &name[..stem], &tag.to_hex()[..20])
    }

    /// The root's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io<'a>(op: &'static str, path: &'a TargetPath) -> impl FnOnce(Errno) -> RootError + 'a {
        move |e| match e {
            Errno::LOOP | Errno::XDEV => RootError::Symlink { path: path.clone() },
            Errno::NOTDIR => RootError::NotAFolder { path: path.clone() },
            Errno::ISDIR => RootError::Folder { path: path.clone() },
            other => RootError::Io {
                op,
                path: path.clone(),
                source: other.into(),
            },
        }
    }

    /// Opens the folder holding `path`, creating missing folders (mode 0755) when `create`.
    fn parent(&self, path: &TargetPath, create: bool) -> Result<Option<OwnedFd>, RootError> {
        let (folders, _) = split(path);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if folders.is_empty() {
            return rustix::fs::openat(&self.dir, ".", flags, Mode::empty())
                .map(Some)
                .map_err(Self::io("opening the root for", path));
        }
        match rustix::fs::openat2(&self.dir, folders.join("/"), flags, Mode::empty(), RESOLVE) {
            Ok(fd) => return Ok(Some(fd)),
            Err(Errno::NOENT) if !create => return Ok(None),
            Err(Errno::NOENT) => {}
            Err(e) => return Err(Self::io("opening the folder of", path)(e)),
        }
        let mut current = rustix::fs::openat(&self.dir, ".", flags, Mode::empty())
            .map_err(Self::io("opening the root for", path))?;
        for folder in folders {
            match rustix::fs::mkdirat(&current, folder, Mode::from_raw_mode(0o755)) {
                Ok(()) => rustix::fs::fsync(&current)
                    .map_err(Self::io("syncing a new folder of", path))?,
                Err(Errno::EXIST) => {}
                Err(e) => return Err(Self::io("creating a folder of", path)(e)),
            }
            current = rustix::fs::openat2(&current, folder, flags, Mode::empty(), RESOLVE)
                .map_err(Self::io("opening a folder of", path))?;
        }
        Ok(Some(current))
    }

    /// What is at `path`; the content too when it is a regular file.
    pub fn observe(&self, path: &TargetPath) -> Result<(Observed, Option<Vec<u8>>), RootError> {
        let relative: Vec<&str> = path.components().collect();
        let fd = match rustix::fs::openat2(
            &self.dir,
            relative.join("/"),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
            RESOLVE,
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok((Observed::Absent, None)),
            Err(Errno::LOOP | Errno::XDEV) => return Ok((Observed::Symlink, None)),
            Err(Errno::NXIO) => return Ok((Observed::Special, None)),
            Err(e) => return Err(Self::io("reading", path)(e)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(Self::io("reading", path))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => return Ok((Observed::Folder, None)),
            _ => return Ok((Observed::Special, None)),
        }
        let mut bytes = Vec::with_capacity(stat.st_size as usize);
        File::from(fd)
            .read_to_end(&mut bytes)
            .map_err(|source| RootError::Io {
                op: "reading",
                path: path.clone(),
                source,
            })?;
        let facts = FileFacts {
            hash: BlobHash::of(&bytes),
            mode: FileMode::from_bits(stat.st_mode & 0o7777).expect("masked to permission bits"),
            uid: stat.st_uid,
            gid: stat.st_gid,
            size: bytes.len() as u64,
            stamp: Stamp::of(&stat),
        };
        Ok((Observed::File(facts), Some(bytes)))
    }

    /// The stamps of many files, one `statat` each beneath their folder, each folder opened once
    /// (resolved as safely as a read). `None` for a path that is not a regular file reachable
    /// without a symlink.
    pub fn stamps<'a>(
        &self,
        paths: impl IntoIterator<Item = &'a TargetPath>,
    ) -> Result<Vec<(&'a TargetPath, Option<Stamp>)>, RootError> {
        let mut out = Vec::new();
        let mut folder: Option<(Vec<&str>, Option<OwnedFd>)> = None;
        for path in paths {
            let (folders, name) = split(path);
            if folder.as_ref().is_none_or(|(f, _)| *f != folders) {
                let fd = match self.parent(path, false) {
                    Ok(fd) => fd,
                    Err(RootError::Symlink { .. } | RootError::NotAFolder { .. }) => None,
                    Err(e) => return Err(e),
                };
                folder = Some((folders, fd));
            }
            let stamp = match folder.as_ref().and_then(|(_, fd)| fd.as_ref()) {
                None => None,
                Some(fd) => match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
                        Some(Stamp::of(&st))
                    }
                    Ok(_) | Err(Errno::NOENT) => None,
                    Err(e) => return Err(Self::io("inspecting", path)(e)),
                },
            };
            out.push((path, stamp));
        }
        Ok(out)
    }

    fn check_target(parent: &OwnedFd, name: &str, path: &TargetPath) -> Result<(), RootError> {
        match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => Ok(()),
                FileType::Directory => Err(RootError::Folder { path: path.clone() }),
                FileType::Symlink => Err(RootError::Symlink { path: path.clone() }),
                _ => Err(RootError::Special { path: path.clone() }),
            },
            Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(Self::io("inspecting", path)(e)),
        }
    }

    /// Writes `bytes` to the temp file of `path` (in its folder, created if needed), with its
    /// final mode and owner. Nothing at `path` changes until [`Root::commit`]. With `durable`,
    /// the temp file is fsynced; otherwise a [`Root::sync`] is due before the commit.
    pub fn stage(
        &self,
        path: &TargetPath,
        bytes: &[u8],
        mode: FileMode,
        uid: u32,
        gid: u32,
        durable: bool,
    ) -> Result<(), RootError> {
        let parent = self.parent(path, true)?.expect("created");
        let (_, name) = split(path);
        Self::check_target(&parent, name, path)?;
        let tmp = self.temp_name(path);
        let create = || {
            rustix::fs::openat(
                &parent,
                tmp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode.bits() & 0o777),
            )
        };
        let fd = match create() {
            Err(Errno::EXIST) => {
                // A leftover of an interrupted write: ours by its name, which no one else
                // can make.
                rustix::fs::unlinkat(&parent, tmp.as_str(), AtFlags::empty())
                    .map_err(Self::io("removing a leftover temp file of", path))?;
                create()
            }
            other => other,
        }
        .map_err(Self::io("creating a temp file for", path))?;
        let result = (|| {
            rustix::fs::fchown(
                &fd,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            )
            .map_err(Self::io("setting the owner of", path))?;
            // After chown, which clears set-id bits.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode.bits()))
                .map_err(Self::io("setting the mode of", path))?;
            let mut file = File::from(fd);
            file.write_all(bytes).map_err(|source| RootError::Io {
                op: "writing",
                path: path.clone(),
                source,
            })?;
            if durable {
                file.sync_all().map_err(|source| RootError::Io {
                    op: "syncing",
                    path: path.clone(),
                    source,
                })?;
            }
            Ok(())
        })();
        if result.is_err() {
            let _best_effort = rustix::fs::unlinkat(&parent, tmp.as_str(), AtFlags::empty());
        }
        result
    }

    /// Renames the staged temp file of `path` over it; returns the new file's stamp. Durable
    /// after the folder's fsync or a [`Root::sync`].
    pub fn commit(&self, path: &TargetPath) -> Result<Stamp, RootError> {
        let parent = self.parent(path, false)?.ok_or_else(|| RootError::Io {
            op: "committing",
            path: path.clone(),
            source: std::io::Error::other("its folder is gone"),
        })?;
        let (_, name) = split(path);
        Self::check_target(&parent, name, path)?;
        rustix::fs::renameat(&parent, self.temp_name(path).as_str(), &parent, name)
            .map_err(Self::io("renaming into place", path))?;
        let st = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(Self::io("inspecting", path))?;
        Ok(Stamp::of(&st))
    }

    /// Writes `bytes` at `path` atomically and durably, on its own: temp file with its final
    /// mode and owner, fsync, rename, fsync of the folder.
    pub fn write(
        &self,
        path: &TargetPath,
        bytes: &[u8],
        mode: FileMode,
        uid: u32,
        gid: u32,
    ) -> Result<Stamp, RootError> {
        self.stage(path, bytes, mode, uid, gid, true)?;
        let stamp = self.commit(path).inspect_err(|_| {
            let _best_effort = self.remove_leftover(path);
        })?;
        let parent = self.parent(path, false)?.expect("just written");
        rustix::fs::fsync(&parent).map_err(Self::io("syncing the folder of", path))?;
        Ok(stamp)
    }

    /// Waits until everything written under the root is on disk (`syncfs`): one wait for many
    /// files.
    pub fn sync(&self) -> Result<(), RootError> {
        rustix::fs::syncfs(&self.dir).map_err(|e| RootError::OpenRoot {
            path: self.path.clone(),
            source: e.into(),
        })
    }

    /// Removes the file at `path` (a missing file is already removed); with `durable`, fsyncs
    /// its folder, otherwise a [`Root::sync`] is due.
    pub fn remove(&self, path: &TargetPath, durable: bool) -> Result<(), RootError> {
        let Some(parent) = self.parent(path, false)? else {
            return Ok(());
        };
        let (_, name) = split(path);
        match rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                return Err(RootError::Folder { path: path.clone() })
            }
            Ok(_) => {}
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(Self::io("inspecting", path)(e)),
        }
        rustix::fs::unlinkat(&parent, name, AtFlags::empty())
            .map_err(Self::io("removing", path))?;
        if durable {
            rustix::fs::fsync(&parent).map_err(Self::io("syncing the folder of", path))?;
        }
        Ok(())
    }

    /// Removes the temp file an interrupted write of `path` may have left; says whether one was.
    pub fn remove_leftover(&self, path: &TargetPath) -> Result<bool, RootError> {
        let Some(parent) = self.parent(path, false).or_else(|e| match e {
            RootError::Symlink { .. } | RootError::NotAFolder { .. } => Ok(None),
            e => Err(e),
        })?
        else {
            return Ok(false);
        };
        match rustix::fs::unlinkat(&parent, self.temp_name(path).as_str(), AtFlags::empty()) {
            Ok(()) => {
                rustix::fs::fsync(&parent).map_err(Self::io("syncing the folder of", path))?;
                Ok(true)
            }
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(Self::io("removing a leftover temp file of", path)(e)),
        }
    }

    /// Free bytes for an unprivileged writer, and whether the filesystem is mounted read-only.
    pub fn space(&self) -> io::Result<(u64, bool)> {
        let st = rustix::fs::fstatvfs(self.dir.as_fd())?;
        let read_only = st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY);
        Ok((st.f_bavail.saturating_mul(st.f_frsize), read_only))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of anyone else's beside a declared path, named like a temp file (the mesh's old
    /// fixed name, or the new form with another tag), survives a write and a leftover's
    /// removal; the mesh's own leftover is found and removed.
    #[test]
    fn only_the_meshs_own_temp_file_is_ever_removed() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        let root = Root::open(dir.path(), TempKey::of_state(&state).unwrap()).unwrap();
        let motd = TargetPath::new("/etc/motd").unwrap();
        let theirs = [
            ".motd.mesh-tmp",
            ".motd.mesh-0123456789abcdef0123",
            ".motd.tmp",
        ];
        for name in theirs {
            std::fs::write(dir.path().join("etc").join(name), "the operator's\n").unwrap();
        }
        let mode = FileMode::parse("0644").unwrap();
        root.write(&motd, b"hello\n", mode, 0, 0).unwrap();
        // A write cut short leaves the mesh's temp file; the next run removes it.
        root.stage(&motd, b"again\n", mode, 0, 0, true).unwrap();
        let ours = root.temp_name(&motd);
        assert!(dir.path().join("etc").join(&ours).exists());
        assert!(root.remove_leftover(&motd).unwrap());
        assert!(!root.remove_leftover(&motd).unwrap());
        // Staging over a leftover replaces it.
        root.stage(&motd, b"again\n", mode, 0, 0, true).unwrap();
        root.stage(&motd, b"third\n", mode, 0, 0, true).unwrap();
        root.commit(&motd).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("etc/motd")).unwrap(),
            b"third\n"
        );
        for name in theirs {
            assert_eq!(
                std::fs::read_to_string(dir.path().join("etc").join(name)).unwrap(),
                "the operator's\n",
                "{name}"
            );
        }
        let mut left: Vec<String> = std::fs::read_dir(dir.path().join("etc"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".motd.mesh-0123456789abcdef0123",
                ".motd.mesh-tmp",
                ".motd.tmp",
                "motd"
            ]
        );

        // The key is the node's: the same from its state directory, another elsewhere.
        let again = Root::open(dir.path(), TempKey::of_state(&state).unwrap()).unwrap();
        assert_eq!(again.temp_name(&motd), ours);
        let other = Root::open(dir.path(), TempKey::ephemeral().unwrap()).unwrap();
        assert_ne!(other.temp_name(&motd), ours);
        // A long name still makes a name the kernel takes.
        let long = TargetPath::new(&format!("/etc/{}", "é".repeat(127))).unwrap();
        root.write(&long, b"x", mode, 0, 0).unwrap();
    }
}
