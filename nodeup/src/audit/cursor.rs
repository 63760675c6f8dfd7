//! Which audit file to read next, and from where: pure, from the shipper's position and a listing of the log's
//! directory.
//!
//! A file is known by its device and inode, which survive the API server's rename of the live file into a
//! backup. Backups are named `<stem>-<time>.<ext>` (lumberjack's format), so their names sort in the order they
//! were rotated, and the oldest are the ones removed past `--audit-log-maxbackup`.

use serde::{Deserialize, Serialize};

/// A file's identity across renames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

/// What the shipper has shipped: every line before `offset` of `file`, and every file rotated before it; the
/// next chunk's sequence number. Kept durably on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Position {
    /// `None` before the first chunk: the shipper starts with the oldest file present.
    pub file: Option<FileId>,
    pub offset: u64,
    pub next_sequence: u64,
    /// The chunk being put under `next_sequence`'s key: its length from `offset`, kept before its first upload
    /// and never cut again, so that a retry (after a lost answer, or a crash) puts the same bytes under the same
    /// key. Chunks are write-once: a retry that finds the key taken was preceded by an upload that landed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<u64>,
    /// The position started from nothing (no position on the node): keys under this instance's prefix may hold
    /// an earlier position's chunks (a position moved aside), so a taken key is skipped, not taken as this
    /// chunk. Cleared by the first chunk put.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fresh: bool,
}

impl Position {
    /// The position of a shipper that has none on the node.
    pub fn fresh() -> Self {
        Position {
            fresh: true,
            ..Position::default()
        }
    }
}

/// One audit file as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub id: FileId,
    pub len: u64,
}

/// The log's directory: the live file (absent between a rename and the new file's creation, or before the API
/// server first writes), and the rotated backups, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    pub live: Option<Listed>,
    pub rotated: Vec<Listed>,
}

impl Listing {
    /// Backups sorted by name, which is their rotation time.
    pub fn new(live: Option<Listed>, mut rotated: Vec<Listed>) -> Self {
        rotated.sort_by(|a, b| a.name.cmp(&b.name));
        Listing { live, rotated }
    }
}

/// What to read next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Read `file` from `from` to `to`. A rotated file (`rotated`) does not grow: its last bytes are shipped
    /// even without a final newline, and once read the shipper moves on.
    Read {
        name: String,
        id: FileId,
        from: u64,
        to: u64,
        rotated: bool,
    },
    /// Nothing new.
    Idle,
    /// The position moves without anything to ship (to the next file, or back to 0 after a truncation): store
    /// it and ask again. `lost` says why lines may have been lost, if they may.
    Move {
        position: Position,
        lost: Option<Lost>,
    },
}

/// Why lines may have been lost: said in the log, never silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// The file the shipper was in is gone (removed past `--audit-log-maxbackup` before it was shipped).
    FileRemoved,
    /// The live file is shorter than what was shipped of it: it was truncated in place (not the API server's
    /// rotation); lines written between the last read and the truncation are gone.
    Truncated,
}

/// The next thing to do from `position`, given the directory now. A move away from a pending chunk (its file
/// removed or truncated before the chunk was acknowledged) gives up its sequence number: it may have landed,
/// and chunks are write-once, so the next chunk takes the number after it (a gap in the keys, never a chunk
/// mistaken for another).
pub fn next(position: &Position, listing: &Listing) -> Next {
    match next_in_files(position, listing) {
        Next::Move {
            position: moved,
            lost,
        } => Next::Move {
            position: Position {
                pending: None,
                next_sequence: moved.next_sequence + u64::from(position.pending.is_some()),
                ..moved
            },
            lost,
        },
        other => other,
    }
}

fn next_in_files(position: &Position, listing: &Listing) -> Next {
    let files = || listing.rotated.iter().chain(listing.live.as_ref());
    let Some(current) = position.file else {
        // First start: the oldest file present, from its beginning.
        return match files().next() {
            Some(first) => Next::Move {
                position: Position {
                    file: Some(first.id),
                    offset: 0,
                    ..*position
                },
                lost: None,
            },
            None => Next::Idle,
        };
    };
    if let Some(live) = listing.live.as_ref().filter(|l| l.id == current) {
        if live.len < position.offset {
            return Next::Move {
                position: Position {
                    offset: 0,
                    ..*position
                },
                lost: Some(Lost::Truncated),
            };
        }
        if live.len == position.offset {
            return Next::Idle;
        }
        return Next::Read {
            name: live.name.clone(),
            id: live.id,
            from: position.offset,
            to: live.len,
            rotated: false,
        };
    }
    let at = listing.rotated.iter().position(|r| r.id == current);
    match at {
        Some(i) => {
            let file = &listing.rotated[i];
            if position.offset < file.len {
                return Next::Read {
                    name: file.name.clone(),
                    id: file.id,
                    from: position.offset,
                    to: file.len,
                    rotated: true,
                };
            }
            // Done with this backup: the next one rotated after it, else the live file.
            match listing.rotated.get(i + 1).or(listing.live.as_ref()) {
                Some(after) => Next::Move {
                    position: Position {
                        file: Some(after.id),
                        offset: 0,
                        ..*position
                    },
                    lost: None,
                },
                // Rotated and no new file yet: wait for the API server to create it.
                None => Next::Idle,
            }
        }
        None => {
            // Gone: backups are removed oldest first, so every file still present is newer than it.
            match files().next() {
                Some(first) => Next::Move {
                    position: Position {
                        file: Some(first.id),
                        offset: 0,
                        ..*position
                    },
                    lost: Some(Lost::FileRemoved),
                },
                None => Next::Idle,
            }
        }
    }
}

/// Whether `name` is one of the API server's backups of the live file `live_name` (`audit.log` ->
/// `audit-2026-12-02T16-00-00.000.log`).
pub fn is_backup_of(live_name: &str, name: &str) -> bool {
    let (stem, ext) = match live_name.rsplit_once('.') {
        Some((stem, ext)) => (stem, format!(".{ext}")),
        None => (live_name, String::new()),
    };
    name != live_name
        && name
            .strip_prefix(stem)
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|rest| rest.strip_suffix(ext.as_str()))
            .is_some_and(|time| !time.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, ino: u64, len: u64) -> Listed {
        Listed {
            name: name.to_string(),
            id: FileId { dev: 1, ino },
            len,
        }
    }

    fn at(ino: u64, offset: u64) -> Position {
        Position {
            file: Some(FileId { dev: 1, ino }),
            offset,
            next_sequence: 7,
            ..Position::default()
        }
    }

    #[test]
    fn a_pending_chunk_is_read_again_and_its_number_given_up_when_its_file_goes() {
        let pending = Position {
            pending: Some(4),
            ..at(3, 4)
        };
        // Still there: read again from the same offset (the chunk is cut as before, by the shipper).
        let listing = Listing::new(Some(file("audit.log", 3, 10)), vec![]);
        assert!(matches!(
            next(&pending, &listing),
            Next::Read { from: 4, .. }
        ));
        // Removed before it was acknowledged: it may have landed under 7, so the next chunk is 8.
        let listing = Listing::new(Some(file("audit.log", 9, 1)), vec![]);
        assert_eq!(
            next(&pending, &listing),
            Next::Move {
                position: Position {
                    next_sequence: 8,
                    ..at(9, 0)
                },
                lost: Some(Lost::FileRemoved)
            }
        );
        // Truncated under it: the same.
        let listing = Listing::new(Some(file("audit.log", 3, 2)), vec![]);
        assert_eq!(
            next(&pending, &listing),
            Next::Move {
                position: Position {
                    next_sequence: 8,
                    ..at(3, 0)
                },
                lost: Some(Lost::Truncated)
            }
        );
        // Without a pending chunk a move keeps the number.
        assert!(matches!(
            next(&at(3, 10), &listing),
            Next::Move {
                position: Position {
                    next_sequence: 7,
                    ..
                },
                ..
            }
        ));
    }

    #[test]
    fn a_first_start_begins_with_the_oldest_file() {
        let listing = Listing::new(
            Some(file("audit.log", 3, 10)),
            vec![
                file("audit-2026-12-02T16-05-00.000.log", 2, 5),
                file("audit-2026-12-02T16-00-00.000.log", 1, 5),
            ],
        );
        let Next::Move { position, lost } = next(&Position::default(), &listing) else {
            panic!("a move to the oldest file");
        };
        assert_eq!(
            (position.file.map(|f| f.ino), position.offset, lost),
            (Some(1), 0, None)
        );
        assert_eq!(next(&Position::default(), &Listing::default()), Next::Idle);
    }

    #[test]
    fn the_live_file_is_read_from_the_position_to_its_end() {
        let listing = Listing::new(Some(file("audit.log", 3, 10)), vec![]);
        assert_eq!(
            next(&at(3, 4), &listing),
            Next::Read {
                name: "audit.log".to_string(),
                id: FileId { dev: 1, ino: 3 },
                from: 4,
                to: 10,
                rotated: false
            }
        );
        assert_eq!(next(&at(3, 10), &listing), Next::Idle);
    }

    #[test]
    fn a_rotated_file_is_finished_before_the_new_live_file() {
        // The live file (inode 3) was renamed to a backup; a new live file (inode 4) has lines already.
        let listing = Listing::new(
            Some(file("audit.log", 4, 8)),
            vec![file("audit-2026-12-02T16-00-00.000.log", 3, 10)],
        );
        assert!(matches!(
            next(&at(3, 6), &listing),
            Next::Read {
                from: 6,
                to: 10,
                rotated: true,
                ..
            }
        ));
        let Next::Move { position, lost } = next(&at(3, 10), &listing) else {
            panic!("on to the new live file");
        };
        assert_eq!(
            (position, lost),
            (
                Position {
                    offset: 0,
                    ..at(4, 0)
                },
                None
            )
        );
    }

    #[test]
    fn two_rotations_between_looks_are_read_in_rotation_order() {
        let listing = Listing::new(
            Some(file("audit.log", 5, 1)),
            vec![
                file("audit-2026-12-02T16-10-00.000.log", 4, 9),
                file("audit-2026-12-02T16-00-00.000.log", 3, 9),
            ],
        );
        let Next::Move { position, .. } = next(&at(3, 9), &listing) else {
            panic!("on to the next backup");
        };
        assert_eq!(position.file.map(|f| f.ino), Some(4));
        let Next::Move { position, .. } = next(&at(4, 9), &listing) else {
            panic!("on to the live file");
        };
        assert_eq!(position.file.map(|f| f.ino), Some(5));
    }

    #[test]
    fn a_rotation_before_the_new_file_exists_waits() {
        let listing = Listing::new(None, vec![file("audit-2026-12-02T16-00-00.000.log", 3, 10)]);
        assert_eq!(next(&at(3, 10), &listing), Next::Idle);
    }

    #[test]
    fn a_truncated_live_file_is_read_again_from_its_start_and_said() {
        let listing = Listing::new(Some(file("audit.log", 3, 2)), vec![]);
        assert_eq!(
            next(&at(3, 10), &listing),
            Next::Move {
                position: at(3, 0),
                lost: Some(Lost::Truncated)
            }
        );
    }

    #[test]
    fn a_removed_file_moves_to_the_oldest_present_and_says_so() {
        let listing = Listing::new(
            Some(file("audit.log", 9, 1)),
            vec![file("audit-2026-12-02T17-00-00.000.log", 8, 4)],
        );
        assert_eq!(
            next(&at(3, 5), &listing),
            Next::Move {
                position: at(8, 0),
                lost: Some(Lost::FileRemoved)
            }
        );
    }

    #[test]
    fn backups_are_told_by_the_live_files_name() {
        assert!(is_backup_of(
            "audit.log",
            "audit-2026-12-02T16-00-00.000.log"
        ));
        assert!(!is_backup_of("audit.log", "audit.log"));
        assert!(!is_backup_of("audit.log", "audit-.log"));
        assert!(!is_backup_of("audit.log", "other-2026.log"));
        assert!(!is_backup_of("audit.log", "audit-2026.log.gz"));
        assert!(!is_backup_of("audit.log", ".audit-position.json"));
    }
}
