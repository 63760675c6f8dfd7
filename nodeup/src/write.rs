//! Step 4 of nodeup: the rendered files, written under `--root`. Only files whose content, mode or owner differ
//! are written; each through the workspace's one durable writer (`ballast_common::durable`: a temporary file in
//! the same directory, mode and owner set and the file synced before the rename, the directory synced after), so
//! a reader sees the old file or the new one, never half of one, even after a power loss.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ballast_common::durable;
use ballast_state::report::{FileAction, FileWritten};

use crate::model::{paths, RenderedFile};

/// Failures writing a file.
#[derive(Debug, thiserror::Error)]
pub enum WriteFileError {
    /// Reading, creating or removing around the write.
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Replacing the file itself (the error names the path and the step).
    #[error(transparent)]
    Replace(#[from] durable::WriteError),
}

/// What writing did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOutcome {
    pub written: Vec<FileWritten>,
    pub unchanged: usize,
}

impl WriteOutcome {
    pub fn changed(&self, node_path: &str) -> bool {
        self.written.iter().any(|f| f.path == node_path)
    }
}

/// The path of a node file under `root`.
pub fn under_root(root: &Path, node_path: &str) -> PathBuf {
    root.join(node_path.trim_start_matches('/'))
}

/// What a file needs: nothing, creating, or updating.
pub fn needed(root: &Path, file: &RenderedFile) -> Option<FileAction> {
    let path = under_root(root, &file.path);
    let Ok(meta) = std::fs::symlink_metadata(&path) else {
        return Some(FileAction::Created);
    };
    let same = meta.is_file()
        && meta.permissions().mode() & 0o7777 == file.mode
        && meta.uid() == file.owner.uid
        && meta.gid() == file.owner.gid
        && meta.len() == file.content.len() as u64
        && std::fs::read(&path).is_ok_and(|c| c == file.content);
    (!same).then_some(FileAction::Updated)
}

/// Writes every file that differs. Stops at the first failure (the files written so far are whole).
pub fn write_files(root: &Path, files: &[RenderedFile]) -> Result<WriteOutcome, WriteFileError> {
    let mut outcome = WriteOutcome::default();
    for file in files {
        if Path::new(&file.path).parent() == Some(Path::new(paths::ROOT_SSH_DIR)) {
            private_dir(&under_root(root, paths::ROOT_SSH_DIR))?;
        }
        match needed(root, file) {
            None => outcome.unchanged += 1,
            Some(action) => {
                write_one(root, file)?;
                outcome.written.push(FileWritten {
                    path: file.path.clone(),
                    action,
                    mode: format!("{:04o}", file.mode),
                });
            }
        }
    }
    if !files.iter().any(|f| f.path == paths::AUTHORIZED_KEYS)
        && remove_managed(&under_root(root, paths::AUTHORIZED_KEYS))?
    {
        outcome.written.push(FileWritten {
            path: paths::AUTHORIZED_KEYS.to_string(),
            action: FileAction::Removed,
            mode: "-".to_string(),
        });
    }
    outcome.written.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(outcome)
}

/// `dir` exists, mode 0700 (root's `.ssh`: sshd ignores keys in a directory others may write).
fn private_dir(dir: &Path) -> Result<(), WriteFileError> {
    let err = |source| WriteFileError::Io {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(err)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(err)
}

/// Removes `path` if it is a file nodeup wrote (it starts with Ballast's header); an operator's file, or
/// anything else, is left alone. Returns whether it was removed.
fn remove_managed(path: &Path) -> Result<bool, WriteFileError> {
    let err = |source| WriteFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(false);
    };
    if !meta.is_file() {
        return Ok(false);
    }
    let text = std::fs::read(path).map_err(err)?;
    if !text.starts_with(format!("{}\n", paths::AUTHORIZED_KEYS_HEADER).as_bytes()) {
        return Ok(false);
    }
    std::fs::remove_file(path).map_err(err)?;
    Ok(true)
}

fn write_one(root: &Path, file: &RenderedFile) -> Result<(), WriteFileError> {
    let path = under_root(root, &file.path);
    // Parents are made as `mkdir -p` would (0755): the rendered tree's directories are system ones (/etc/...);
    // private ones are made 0700 by `private_dir` before.
    let options = durable::Options::mode(file.mode)
        .owner(file.owner.uid, file.owner.gid)
        .create_parents(0o755);
    durable::write(&path, &file.content, &options)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Owner;

    fn file(path: &str, mode: u32, content: &str) -> RenderedFile {
        RenderedFile {
            path: path.into(),
            mode,
            owner: Owner {
                uid: nix::unistd::geteuid().as_raw(),
                gid: nix::unistd::getegid().as_raw(),
            },
            content: content.as_bytes().to_vec(),
        }
    }

    #[test]
    fn writes_only_what_differs_with_mode_and_no_leftovers() {
        let root = tempfile::tempdir().expect("tempdir");
        let files = vec![
            file("/etc/a.conf", 0o644, "a"),
            file("/etc/k/key.pem", 0o600, "k"),
        ];
        let first = write_files(root.path(), &files).expect("write");
        assert_eq!(first.written.len(), 2);
        assert!(first
            .written
            .iter()
            .all(|f| f.action == FileAction::Created));
        let meta = std::fs::metadata(root.path().join("etc/k/key.pem")).expect("written");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let again = write_files(root.path(), &files).expect("write");
        assert_eq!(
            again,
            WriteOutcome {
                written: vec![],
                unchanged: 2
            }
        );
        // Content change, then mode change: each rewrites exactly that file.
        let changed = vec![
            file("/etc/a.conf", 0o644, "b"),
            file("/etc/k/key.pem", 0o640, "k"),
        ];
        let third = write_files(root.path(), &changed).expect("write");
        let paths: Vec<_> = third
            .written
            .iter()
            .map(|f| (f.path.as_str(), f.action))
            .collect();
        assert_eq!(
            paths,
            [
                ("/etc/a.conf", FileAction::Updated),
                ("/etc/k/key.pem", FileAction::Updated)
            ]
        );
        let names: Vec<_> = std::fs::read_dir(root.path().join("etc"))
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.contains("nodeup-tmp")), "{names:?}");
    }

    #[test]
    fn authorized_keys_dir_is_0700_and_only_ballasts_file_is_removed() {
        let root = tempfile::tempdir().expect("tempdir");
        let keys = format!("{}\nssh-ed25519 AAAA\n", paths::AUTHORIZED_KEYS_HEADER);
        let with_key = vec![file(paths::AUTHORIZED_KEYS, 0o600, &keys)];
        write_files(root.path(), &with_key).expect("write");
        let dir = std::fs::metadata(root.path().join("root/.ssh")).expect("dir");
        assert_eq!(dir.permissions().mode() & 0o777, 0o700);
        let path = root.path().join("root/.ssh/authorized_keys");
        let meta = std::fs::metadata(&path).expect("file");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // No key any more: Ballast's file goes, and says so.
        let gone = write_files(root.path(), &[]).expect("write");
        assert_eq!(
            gone.written
                .iter()
                .map(|f| (f.path.as_str(), f.action))
                .collect::<Vec<_>>(),
            [(paths::AUTHORIZED_KEYS, FileAction::Removed)]
        );
        assert!(!path.exists());
        // An operator's own file (no header) is never removed on a guess.
        std::fs::write(&path, "ssh-ed25519 AAAA mine\n").expect("operator's file");
        let kept = write_files(root.path(), &[]).expect("write");
        assert!(kept.written.is_empty(), "{kept:?}");
        assert_eq!(
            std::fs::read_to_string(&path).expect("kept"),
            "ssh-ed25519 AAAA mine\n"
        );
    }
}
