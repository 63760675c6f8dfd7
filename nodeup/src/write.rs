//! Step 4 of nodeup: the rendered files, written under `--root`. Only files whose content, mode or owner differ
//! are written; each through a temporary file in the same directory (mode and owner set before the rename), so
//! a reader sees the old file or the new one, never half of one.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ballast_state::report::{FileAction, FileWritten};

use crate::model::RenderedFile;

/// Failures writing a file.
#[derive(Debug, thiserror::Error)]
#[error("writing {path}: {source}")]
pub struct WriteFileError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
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
    outcome.written.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(outcome)
}

fn write_one(root: &Path, file: &RenderedFile) -> Result<(), WriteFileError> {
    let path = under_root(root, &file.path);
    let err = |source| WriteFileError {
        path: path.clone(),
        source,
    };
    let dir = path
        .parent()
        .ok_or_else(|| err(std::io::Error::other("a file path needs a directory")))?;
    std::fs::create_dir_all(dir).map_err(err)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.nodeup-tmp"));
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        // Created with the final mode (at most 0600 until chmod), so a private file is never readable by others.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&file.content)?;
        f.sync_all()?;
        std::os::unix::fs::chown(&tmp, Some(file.owner.uid), Some(file.owner.gid))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(file.mode))?;
        std::fs::rename(&tmp, &path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(err)
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
}
