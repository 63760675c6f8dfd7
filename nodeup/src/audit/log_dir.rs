//! The audit log's directory, opened beneath the node's root one component at a time without following a link
//! (`openat` with `O_NOFOLLOW | O_DIRECTORY`), and its files listed (`fstatat` without following) and opened
//! (`openat` with `O_NOFOLLOW`, then `fstat` of that descriptor) relative to it. Nothing is resolved by a path
//! twice: what is judged ([`super::trust`]) is what is read, so a link made between a check and an open is
//! never followed, and no link, in the directory or on the way to it, leads out of it.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag, AT_FDCWD};
use nix::sys::stat::{fstatat, FileStat, Mode, SFlag};

use super::trust::{Facts, Kind, Refusal};

/// The log's directory, open.
pub struct LogDir {
    fd: OwnedFd,
    /// Its path on this host, for messages.
    path: PathBuf,
}

/// What opening the directory found.
pub enum Opened {
    Dir(LogDir),
    /// Not there (yet): the API server creates it.
    Absent,
    /// A component is not a plain directory: nothing under it is read.
    Refused {
        path: PathBuf,
        refusal: Refusal,
    },
}

impl LogDir {
    /// Opens `dir` (a path on the node, absolute or not) beneath `root` (nodeup's `--root`, `/` on a node),
    /// following no link on the way. `root` itself is trusted as given.
    pub fn open(root: &Path, dir: &Path) -> Result<Opened, std::io::Error> {
        let mut fd = openat(
            AT_FDCWD,
            root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let mut path = root.to_path_buf();
        for component in dir.components() {
            let name = match component {
                Component::RootDir | Component::CurDir => continue,
                Component::Normal(name) => name,
                Component::ParentDir | Component::Prefix(_) => {
                    return Ok(Opened::Refused {
                        path: path.join(component.as_os_str()),
                        refusal: Refusal::Directory {
                            component: component.as_os_str().to_string_lossy().into_owned(),
                            why: "leads out of the directory before it".to_string(),
                        },
                    })
                }
            };
            path.push(name);
            let next = openat(
                &fd,
                name,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            );
            fd = match next {
                Ok(next) => next,
                Err(Errno::ENOENT) => return Ok(Opened::Absent),
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    // Why, for the message only: the refusal does not depend on it.
                    let why = match fstatat(&fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                        .map(|st| kind(&st))
                    {
                        Ok(Kind::Symlink) => "is a symbolic link, and links are never followed",
                        _ => "is not a directory",
                    };
                    return Ok(Opened::Refused {
                        refusal: Refusal::Directory {
                            component: name.to_string_lossy().into_owned(),
                            why: why.to_string(),
                        },
                        path,
                    });
                }
                Err(e) => return Err(e.into()),
            };
        }
        Ok(Opened::Dir(LogDir { fd, path }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The names in the directory (`.` and `..` left out).
    pub fn names(&self) -> Result<Vec<String>, std::io::Error> {
        // A descriptor of its own (not a dup, which would share the read position).
        let mut dir = nix::dir::Dir::openat(
            &self.fd,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let mut names = Vec::new();
        for entry in dir.iter() {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// What `name` is, not following a link; `None` when it is gone.
    pub fn stat(&self, name: &str) -> Result<Option<Stat>, std::io::Error> {
        match fstatat(&self.fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Stat::of(&st))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens `name` for reading without following a link (and without blocking on a FIFO), and says what the
    /// open descriptor is; `None` when it is gone. A link is [`Kind::Symlink`], never opened.
    pub fn open_file(&self, name: &str) -> Result<Option<(Option<File>, Stat)>, std::io::Error> {
        let opened = openat(
            &self.fd,
            name,
            OFlag::O_RDONLY
                | OFlag::O_NOFOLLOW
                | OFlag::O_NONBLOCK
                | OFlag::O_NOCTTY
                | OFlag::O_CLOEXEC,
            Mode::empty(),
        );
        match opened {
            Ok(fd) => {
                let file = File::from(fd);
                let meta = file.metadata()?;
                let stat = Stat {
                    facts: Facts {
                        kind: if meta.file_type().is_file() {
                            Kind::Regular
                        } else if meta.file_type().is_dir() {
                            Kind::Directory
                        } else {
                            Kind::Other
                        },
                        uid: meta.uid(),
                        mode: meta.mode() & 0o7777,
                        nlink: meta.nlink(),
                    },
                    dev: meta.dev(),
                    ino: meta.ino(),
                    len: meta.len(),
                };
                Ok(Some((Some(file), stat)))
            }
            Err(Errno::ENOENT) => Ok(None),
            // O_NOFOLLOW on a link: say what it is without opening it.
            Err(Errno::ELOOP) => Ok(self.stat(name)?.map(|stat| (None, stat))),
            Err(e) => Err(e.into()),
        }
    }
}

/// A file's facts to judge and its identity and length.
#[derive(Debug, Clone, Copy)]
pub struct Stat {
    pub facts: Facts,
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
}

impl Stat {
    // The widths of `nlink_t`, `dev_t` and `ino_t` differ between targets.
    #[allow(clippy::useless_conversion)]
    fn of(st: &FileStat) -> Self {
        Stat {
            facts: Facts {
                kind: kind(st),
                uid: st.st_uid,
                mode: st.st_mode & 0o7777,
                nlink: u64::from(st.st_nlink),
            },
            dev: u64::from(st.st_dev),
            ino: u64::from(st.st_ino),
            len: u64::try_from(st.st_size).unwrap_or(0),
        }
    }
}

fn kind(st: &FileStat) -> Kind {
    let format = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    if format == SFlag::S_IFREG {
        Kind::Regular
    } else if format == SFlag::S_IFLNK {
        Kind::Symlink
    } else if format == SFlag::S_IFDIR {
        Kind::Directory
    } else {
        Kind::Other
    }
}
