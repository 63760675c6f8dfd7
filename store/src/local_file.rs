//! Files named from outside Ballast (every path flag, the file an editor saved), read under a limit: a regular
//! file only, never a FIFO or a device. The limits themselves are `ballast_state::limits`'s.

use std::io::Read;

use ballast_state::limits::ReadLimit;

/// Why a file from outside Ballast was not read ([`read_file_bounded`]). Its message follows the file's name
/// (and the flag that gave it): `--cert /dev/zero: is a character device, not a regular file ...`.
#[derive(Debug, thiserror::Error)]
pub enum FileReadError {
    #[error(
        "is {kind}, not a regular file: give the file itself (a pipe or a device is not read)"
    )]
    NotAFile { kind: &'static str },
    #[error("is larger than the limit of {limit} bytes for {what}")]
    TooLarge { limit: u64, what: &'static str },
    #[error("cannot be read: {0}")]
    Io(#[from] std::io::Error),
}

/// Why a directory named from outside Ballast (an `--out` flag) cannot be written into. Its message follows the
/// directory's name and flag: `--out /dev/null: is a character device, not a directory ...`.
#[derive(Debug, thiserror::Error)]
pub enum OutputDirError {
    #[error("is {kind}, not a directory: give a directory (it is made if missing)")]
    NotADirectory { kind: &'static str },
    #[error("cannot be used: {0}")]
    Io(#[from] std::io::Error),
}

/// Checks, before any work, that files can go under `path`: it is a directory (a link to one counts) or does not
/// exist yet (the command makes it). A file or a device (`/dev/null`) is refused by its kind.
pub fn check_output_dir(path: &std::path::Path) -> Result<(), OutputDirError> {
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_dir() => Ok(()),
        Ok(metadata) => Err(OutputDirError::NotADirectory {
            kind: not_regular(metadata.file_type()).unwrap_or("a regular file"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(OutputDirError::Io(e)),
    }
}

/// What a file type is, in words, when it is not a regular file.
fn not_regular(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_file() {
        None
    } else if file_type.is_dir() {
        Some("a directory")
    } else if file_type.is_fifo() {
        Some("a named pipe (FIFO)")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// The one reader of files named from outside Ballast (every path flag, the file an editor saved): a regular
/// file only, and at most `limit.bytes` of it.
///
/// The file's type is checked before it is opened, so a FIFO (which would block the open until a writer
/// came) or a device (/dev/zero never ends) is refused at once; and again once open, on the open file, so one
/// swapped in between is refused too, without blocking (it is opened non-blocking, which changes nothing for
/// a regular file). At most `limit.bytes` and one more byte are read whatever the file's size claims (files
/// under /proc say 0): a larger file is [`FileReadError::TooLarge`].
pub fn read_file_bounded(
    path: &std::path::Path,
    limit: ReadLimit,
) -> Result<Vec<u8>, FileReadError> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(kind) = not_regular(std::fs::metadata(path)?.file_type()) {
        return Err(FileReadError::NotAFile { kind });
    }
    let flags = nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOCTTY;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)?;
    if let Some(kind) = not_regular(file.metadata()?.file_type()) {
        return Err(FileReadError::NotAFile { kind });
    }
    let mut data = Vec::new();
    file.take(limit.bytes.saturating_add(1))
        .read_to_end(&mut data)?;
    if data.len() as u64 > limit.bytes {
        return Err(FileReadError::TooLarge {
            limit: limit.bytes,
            what: limit.what,
        });
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: ReadLimit = ReadLimit {
        bytes: 10,
        what: "a test file",
    };

    #[test]
    fn a_regular_file_is_read_up_to_its_limit_and_refused_past_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let at = dir.path().join("at");
        std::fs::write(&at, b"0123456789").expect("write");
        assert_eq!(
            read_file_bounded(&at, SMALL).expect("at the limit"),
            b"0123456789"
        );
        let over = dir.path().join("over");
        std::fs::write(&over, b"0123456789a").expect("write");
        let err = read_file_bounded(&over, SMALL).expect_err("over the limit");
        assert_eq!(
            err.to_string(),
            "is larger than the limit of 10 bytes for a test file"
        );
        let missing = read_file_bounded(&dir.path().join("none"), SMALL).expect_err("missing");
        assert!(matches!(missing, FileReadError::Io(_)), "{missing}");
    }

    /// /dev/zero never ends and claims no size; a FIFO with no writer would block its open forever; a
    /// directory is no file: each is refused by its type, before anything is read.
    #[test]
    fn devices_fifos_and_directories_are_refused_without_reading() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        for (path, kind) in [
            (std::path::Path::new("/dev/zero"), "a character device"),
            (fifo.as_path(), "a named pipe (FIFO)"),
            (dir.path(), "a directory"),
        ] {
            let err = read_file_bounded(path, SMALL).expect_err("refused");
            assert_eq!(
                err.to_string(),
                format!(
                    "is {kind}, not a regular file: give the file itself (a pipe or a device is not read)"
                ),
                "{}",
                path.display()
            );
        }
        // A symbolic link to a regular file is that file.
        let target = dir.path().join("target");
        std::fs::write(&target, b"x").expect("write");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        assert_eq!(read_file_bounded(&link, SMALL).expect("read"), b"x");
    }
}
