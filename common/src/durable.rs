//! The one durable file writer: replaces a file so that a crash or a power loss at any point leaves either the
//! old file or the new one, whole, with its final mode and owner, never a torn, empty or briefly world-readable
//! one.
//!
//! The steps: create a temporary file beside the target (same directory, so the rename is atomic and never
//! crosses a file system) readable by its owner only; write; set the owner, then the final mode (after the owner:
//! `chown` clears set-id bits, and a private file is never readable by others while it has the wrong owner);
//! fsync it; rename it over the target; fsync the directory (the rename itself is only durable once the directory
//! is). On any error the temporary file is removed and the target is untouched.
//!
//! Not for a file that is a mount point (a bind-mounted `/etc/hosts`): rename cannot replace one; such a file is
//! rewritten in place by its owner module (etcd's `hosts`).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How a file is written: its final mode, optionally its owner and the mode of parent directories to create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    mode: u32,
    owner: Option<(u32, u32)>,
    parents: Option<u32>,
    sync: bool,
}

impl Options {
    /// A file with permission bits `mode` (e.g. `0o600`; applied exactly, not through the umask), owned by the
    /// writing process, in a directory that must exist.
    pub const fn mode(mode: u32) -> Self {
        Self {
            mode: mode & 0o7777,
            owner: None,
            parents: None,
            sync: true,
        }
    }

    /// The file is owned by `uid:gid` (nodeup writes files for etcd's and the kubelet's users as root).
    pub const fn owner(mut self, uid: u32, gid: u32) -> Self {
        self.owner = Some((uid, gid));
        self
    }

    /// Missing parent directories are created with mode `dir_mode` (existing ones are left as they are).
    pub const fn create_parents(mut self, dir_mode: u32) -> Self {
        self.parents = Some(dir_mode & 0o7777);
        self
    }

    /// Atomic but not durable: no fsync of the file nor of its directory. Only for a cache, whose loss costs a
    /// re-read and whose writes are many (an fsync costs milliseconds; a cache of a hundred entries, a second).
    pub const fn cache(mut self) -> Self {
        self.sync = false;
        self
    }
}

/// The step of [`write`] that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    CreateParents,
    CreateTemporary,
    Write,
    SetOwner,
    SetMode,
    Sync,
    Rename,
    SyncDirectory,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::CreateParents => "creating its directory",
            Step::CreateTemporary => "creating a temporary file beside it",
            Step::Write => "writing the temporary file",
            Step::SetOwner => "setting the owner",
            Step::SetMode => "setting the mode",
            Step::Sync => "syncing the temporary file to disk",
            Step::Rename => "renaming the temporary file into place",
            Step::SyncDirectory => "syncing its directory to disk",
        })
    }
}

/// A file could not be replaced. Unless `step` is [`Step::SyncDirectory`] the old file (or its absence) is
/// untouched; after a failed directory sync the new file is in place but may not survive a power loss.
#[derive(Debug)]
pub struct WriteError {
    pub path: PathBuf,
    pub step: Step,
    pub source: std::io::Error,
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "writing {}: {}: {}",
            self.path.display(),
            self.step,
            self.source
        )
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Replaces `path` with `contents` durably and atomically (see the module's documentation).
pub fn write(path: &Path, contents: &[u8], options: &Options) -> Result<(), WriteError> {
    write_with(path, contents, options, |_| Ok(()))
}

/// [`write`] with a hook run after the temporary file is complete and synced and before the rename: the tests'
/// way to fail or crash at the one moment that matters.
fn write_with(
    path: &Path,
    contents: &[u8],
    options: &Options,
    before_rename: impl FnOnce(&Path) -> std::io::Result<()>,
) -> Result<(), WriteError> {
    let fail = |step| {
        move |source| WriteError {
            path: path.to_path_buf(),
            step,
            source,
        }
    };
    let (dir, name) = match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => (dir, name),
        _ => {
            return Err(fail(Step::CreateTemporary)(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the path names no file",
            )))
        }
    };
    // "file" relative to the current directory has the parent "", which is the current directory.
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    if let Some(dir_mode) = options.parents {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(dir_mode)
            .create(dir)
            .map_err(fail(Step::CreateParents))?;
    }
    let tmp = dir.join(temporary_name(name));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(fail(Step::CreateTemporary))?;
    let staged = (|| {
        file.write_all(contents).map_err(fail(Step::Write))?;
        if let Some((uid, gid)) = options.owner {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid)).map_err(fail(Step::SetOwner))?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(options.mode))
            .map_err(fail(Step::SetMode))?;
        if options.sync {
            file.sync_all().map_err(fail(Step::Sync))?;
        }
        before_rename(&tmp).map_err(fail(Step::Rename))?;
        std::fs::rename(&tmp, path).map_err(fail(Step::Rename))
    })();
    drop(file);
    if let Err(e) = staged {
        // Best effort: the write already failed, and the name is this process's and this write's alone.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if options.sync {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(fail(Step::SyncDirectory))?;
    }
    Ok(())
}

/// `.<name>.<pid>.<n>.tmp`: hidden, and unique per process and write, so two writers of one file never write into
/// (or rename) each other's temporary file. The name is cut so the whole stays within a file name's 255 bytes.
fn temporary_name(name: &std::ffi::OsStr) -> std::ffi::OsString {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let name = name.to_string_lossy();
    let cut = name
        .char_indices()
        .map(|(i, c)| i + c.len_utf8())
        .take_while(|end| *end <= 180)
        .last()
        .unwrap_or(0);
    format!(".{}.{}.{n}.tmp", &name[..cut], std::process::id()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn writes_contents_with_the_exact_mode_and_no_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.conf");
        write(&path, b"one", &Options::mode(0o640)).expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"one");
        let meta = std::fs::metadata(&path).expect("meta");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
        // A replacement takes the new mode and contents; the old file is gone, not kept beside.
        write(&path, b"two", &Options::mode(0o600)).expect("rewrite");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let meta = std::fs::metadata(&path).expect("meta");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        // A mode wider than the umask allows is applied exactly (the umask is usually 022).
        write(&path, b"three", &Options::mode(0o666)).expect("rewrite");
        let meta = std::fs::metadata(&path).expect("meta");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o666);
    }

    #[test]
    fn owner_and_parents_are_applied() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x/y/key.pem");
        let me = std::fs::metadata(dir.path()).expect("meta");
        let options = Options::mode(0o600)
            .owner(me.uid(), me.gid())
            .create_parents(0o700);
        write(&path, b"k", &options).expect("write");
        let parent = std::fs::metadata(dir.path().join("x/y")).expect("meta");
        assert_eq!(parent.permissions().mode() & 0o777, 0o700);
        let meta = std::fs::metadata(&path).expect("meta");
        assert_eq!((meta.uid(), meta.gid()), (me.uid(), me.gid()));
        // Without create_parents a missing directory is an error naming the step, and nothing is created.
        let missing = dir.path().join("nope/file");
        let e = write(&missing, b"x", &Options::mode(0o600)).expect_err("no directory");
        assert_eq!(e.step, Step::CreateTemporary);
        assert_eq!(e.path, missing);
        assert!(e.to_string().contains("nope/file"), "{e}");
        assert!(!dir.path().join("nope").exists());
    }

    #[test]
    fn a_failure_before_the_rename_keeps_the_old_file_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        write(&path, b"old", &Options::mode(0o600)).expect("write");
        let mut seen = None;
        let e = write_with(&path, b"new", &Options::mode(0o600), |tmp| {
            // The temporary file is whole and beside the target when the rename would happen.
            seen = Some(std::fs::read(tmp).expect("temporary file"));
            Err(std::io::Error::other("injected"))
        })
        .expect_err("injected failure");
        assert_eq!(seen.as_deref(), Some(&b"new"[..]));
        assert_eq!(e.step, Step::Rename);
        assert_eq!(std::fs::read(&path).expect("read"), b"old");
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn a_path_that_is_a_directory_fails_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub");
        std::fs::create_dir(&path).expect("mkdir");
        std::fs::write(path.join("inside"), b"x").expect("write");
        let e = write(&path, b"new", &Options::mode(0o600)).expect_err("a non-empty directory");
        assert_eq!(e.step, Step::Rename);
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        assert!(write(Path::new("/"), b"x", &Options::mode(0o600)).is_err());
    }

    #[test]
    fn long_names_get_a_temporary_name_within_the_limit() {
        let long = "é".repeat(120); // 240 bytes, multi-byte: the cut must land on a character boundary
        let tmp = temporary_name(std::ffi::OsStr::new(&long));
        assert!(tmp.len() <= 255, "{}", tmp.len());
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(&long);
        write(&path, b"x", &Options::mode(0o600)).expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"x");
    }

    /// The child of [`a_crash_between_write_and_rename_keeps_the_old_file`]: writes the file named by
    /// `BALLAST_DURABLE_CRASH` and aborts the process, as a crash would, just before the rename. Run alone it does
    /// nothing (it is ignored, and without the variable returns at once).
    #[test]
    #[ignore = "run by a_crash_between_write_and_rename_keeps_the_old_file in a child process"]
    fn crash_child() {
        let Some(path) = std::env::var_os("BALLAST_DURABLE_CRASH") else {
            return;
        };
        let _ = write_with(Path::new(&path), b"new", &Options::mode(0o600), |_| {
            std::process::abort()
        });
    }

    #[test]
    fn a_crash_between_write_and_rename_keeps_the_old_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("epoch");
        write(&path, b"old", &Options::mode(0o600)).expect("write");
        let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--ignored",
                "--exact",
                "durable::tests::crash_child",
                "--test-threads=1",
            ])
            .env("BALLAST_DURABLE_CRASH", &path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run the child");
        assert!(!status.success(), "the child must have crashed: {status}");
        assert_eq!(std::fs::read(&path).expect("read"), b"old");
        // The crash left its whole temporary file (it had been synced) under a name no later write reuses.
        let left = leftovers(dir.path());
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(
            std::fs::read(dir.path().join(&left[0])).expect("read"),
            b"new"
        );
        write(&path, b"after", &Options::mode(0o600)).expect("write after the crash");
        assert_eq!(std::fs::read(&path).expect("read"), b"after");
    }
}
