//! Which files of the audit log's directory may be shipped, pure: only what the API server writes there, a
//! regular file of its own (docs/audit.md, "What is shipped").
//!
//! The API server (the static pod sets no `runAsUser`: the kube-apiserver image's user, root) creates
//! `audit.log` and renames it into its backups (lumberjack: mode 0600, rotation by rename). So a file to ship is a
//! regular file, owned by [`API_SERVER_UID`], writable by no one else, and with one name only. Anything else
//! (a symbolic link to `/etc/kubernetes/pki/ca.key`, a hard link to a key, a FIFO, a file someone else made) is
//! never read, and said once per change ([`Warnings`]).

use std::collections::BTreeMap;

/// The user the API server writes its audit log as: root (its static pod sets no `runAsUser`).
pub const API_SERVER_UID: u32 = 0;

/// What a file is, by its own `lstat` or by `fstat` of a descriptor opened without following links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Regular,
    Symlink,
    Directory,
    /// A FIFO, socket or device.
    Other,
}

/// What the shipper knows of a file, from one `fstat` (or `lstat` of a name in the directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    pub kind: Kind,
    pub uid: u32,
    /// The permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub nlink: u64,
}

/// Why a file in the audit log's directory is not shipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A symbolic link: it could name any file of the node (a CA key), or one outside its root.
    Symlink,
    /// A directory, FIFO, socket or device.
    NotRegular(Kind),
    /// Owned by another user than the API server's.
    Owner { uid: u32, expected: u32 },
    /// Writable by its group or by others: not only the API server's writing.
    Writable { mode: u32 },
    /// More than one name: a hard link, perhaps to a file that is not an audit log.
    Linked { nlink: u64 },
    /// A directory on the way to the log is not a plain directory (a symbolic link, or a file).
    Directory { component: String, why: String },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Symlink => write!(f, "it is a symbolic link, and links are never followed"),
            Refusal::NotRegular(kind) => write!(f, "it is not a regular file but a {kind:?}"),
            Refusal::Owner { uid, expected } => write!(
                f,
                "it is owned by uid {uid}, not by the API server's uid {expected}"
            ),
            Refusal::Writable { mode } => write!(
                f,
                "its mode {mode:04o} lets its group or others write it; the API server writes it 0600"
            ),
            Refusal::Linked { nlink } => write!(
                f,
                "it has {nlink} names (a hard link), and the API server's log has one"
            ),
            Refusal::Directory { component, why } => {
                write!(f, "its directory component {component:?} {why}")
            }
        }
    }
}

/// Whether a file with these facts is an audit log the API server wrote (`owner`: [`API_SERVER_UID`] on a node).
pub fn judge(facts: &Facts, owner: u32) -> Result<(), Refusal> {
    match facts.kind {
        Kind::Regular => {}
        Kind::Symlink => return Err(Refusal::Symlink),
        other => return Err(Refusal::NotRegular(other)),
    }
    if facts.uid != owner {
        return Err(Refusal::Owner {
            uid: facts.uid,
            expected: owner,
        });
    }
    if facts.mode & 0o022 != 0 {
        return Err(Refusal::Writable {
            mode: facts.mode & 0o7777,
        });
    }
    if facts.nlink > 1 {
        return Err(Refusal::Linked { nlink: facts.nlink });
    }
    Ok(())
}

/// The refusals already said, by path: each is logged when it appears or changes, not at every look, and said
/// again if it comes back after the path was fine or gone.
#[derive(Debug, Default)]
pub struct Warnings {
    said: BTreeMap<String, Refusal>,
}

impl Warnings {
    /// Notes this look's verdict on `path`; returns the refusal when it is new for that path (to be logged).
    pub fn note(&mut self, path: &str, verdict: Result<(), Refusal>) -> Option<Refusal> {
        match verdict {
            Ok(()) => {
                self.said.remove(path);
                None
            }
            Err(refusal) => {
                if self.said.get(path) == Some(&refusal) {
                    return None;
                }
                self.said.insert(path.to_string(), refusal.clone());
                Some(refusal)
            }
        }
    }

    /// Forgets every path not in `present` (gone from the directory): if it comes back refused, it is said again.
    pub fn keep_only(&mut self, present: &[String]) {
        self.said.retain(|path, _| present.contains(path));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regular() -> Facts {
        Facts {
            kind: Kind::Regular,
            uid: 0,
            mode: 0o600,
            nlink: 1,
        }
    }

    #[test]
    fn only_the_api_servers_own_regular_file_is_shipped() {
        assert_eq!(judge(&regular(), 0), Ok(()));
        assert_eq!(
            judge(
                &Facts {
                    mode: 0o644,
                    ..regular()
                },
                0
            ),
            Ok(())
        );
        assert_eq!(
            judge(
                &Facts {
                    kind: Kind::Symlink,
                    mode: 0o777,
                    ..regular()
                },
                0
            ),
            Err(Refusal::Symlink)
        );
        assert_eq!(
            judge(
                &Facts {
                    kind: Kind::Other,
                    ..regular()
                },
                0
            ),
            Err(Refusal::NotRegular(Kind::Other))
        );
        assert_eq!(
            judge(
                &Facts {
                    uid: 1000,
                    ..regular()
                },
                0
            ),
            Err(Refusal::Owner {
                uid: 1000,
                expected: 0
            })
        );
        assert_eq!(
            judge(
                &Facts {
                    mode: 0o666,
                    ..regular()
                },
                0
            ),
            Err(Refusal::Writable { mode: 0o666 })
        );
        assert_eq!(
            judge(
                &Facts {
                    nlink: 2,
                    ..regular()
                },
                0
            ),
            Err(Refusal::Linked { nlink: 2 })
        );
    }

    #[test]
    fn a_refusal_is_said_once_per_change_and_again_after_it_cleared() {
        let mut warnings = Warnings::default();
        let path = "/var/log/kubernetes/audit.log";
        assert_eq!(
            warnings.note(path, Err(Refusal::Symlink)),
            Some(Refusal::Symlink)
        );
        assert_eq!(warnings.note(path, Err(Refusal::Symlink)), None);
        let linked = Refusal::Linked { nlink: 2 };
        assert_eq!(warnings.note(path, Err(linked.clone())), Some(linked));
        assert_eq!(warnings.note(path, Ok(())), None);
        assert_eq!(
            warnings.note(path, Err(Refusal::Symlink)),
            Some(Refusal::Symlink)
        );
        warnings.keep_only(&[]);
        assert_eq!(
            warnings.note(path, Err(Refusal::Symlink)),
            Some(Refusal::Symlink)
        );
    }
}
