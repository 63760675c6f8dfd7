//! What every crate's tests share, and nothing a product binary links (each crate takes it as a
//! dev-dependency).
//!
//! Golden files: a test renders its output and hands it to [`check`] (or [`assert_golden`]) with the file it
//! should equal. `BALLAST_BLESS=1` rewrites the files instead (review the diff before committing it); unset, the
//! files are compared and a difference names the file, shows both texts and says how to bless.

use std::path::{Path, PathBuf};

/// The variable that turns comparing into rewriting.
pub const BLESS_VAR: &str = "BALLAST_BLESS";

/// Whether this run rewrites golden files: `BALLAST_BLESS=1`. Unset, empty or `0` compares.
///
/// # Panics
/// On any other value (`true`, `yes`, ...), so a typo never silently compares when the operator meant to bless.
pub fn blessing() -> bool {
    match std::env::var(BLESS_VAR) {
        Err(_) => false,
        Ok(v) if v.is_empty() || v == "0" => false,
        Ok(v) if v == "1" => true,
        Ok(v) => panic!(
            "{BLESS_VAR}={v:?}: set it to 1 to rewrite golden files, or unset it to compare them"
        ),
    }
}

/// A golden file that does not hold what the test rendered.
#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    /// The golden file cannot be read (it does not exist yet, most often).
    #[error("{}: {source} (run the test with {BLESS_VAR}=1 to write it)", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The golden file differs from what was rendered.
    #[error(
        "{} differs (if the change is intended, run the test with {BLESS_VAR}=1 and review the diff):\n\
         --- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    )]
    Differs {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    /// Blessing could not write the golden file.
    #[error("writing the golden file {}: {source}", path.display())]
    Unwritable {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Compares `actual` with the golden file at `path`, or, when [`blessing`], writes it there (its directories
/// created).
pub fn check(path: &Path, actual: impl AsRef<[u8]>) -> Result<(), GoldenError> {
    let actual = actual.as_ref();
    if blessing() {
        return write(path, actual);
    }
    let expected = std::fs::read(path).map_err(|source| GoldenError::Unreadable {
        path: path.to_path_buf(),
        source,
    })?;
    if expected == actual {
        Ok(())
    } else {
        Err(GoldenError::Differs {
            path: path.to_path_buf(),
            expected: String::from_utf8_lossy(&expected).into_owned(),
            actual: String::from_utf8_lossy(actual).into_owned(),
        })
    }
}

/// [`check`], panicking with its message: for a test that compares one file at a time.
///
/// # Panics
/// When the golden file is missing or differs.
pub fn assert_golden(path: &Path, actual: impl AsRef<[u8]>) {
    if let Err(e) = check(path, actual) {
        panic!("{e}");
    }
}

fn write(path: &Path, contents: &[u8]) -> Result<(), GoldenError> {
    let unwritable = |source| GoldenError::Unwritable {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(unwritable)?;
    }
    std::fs::write(path, contents).map_err(unwritable)
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test touches BALLAST_BLESS (the environment is the process's): comparing, then blessing, then a bad
    // value.
    #[test]
    fn compares_blesses_and_refuses_a_value_it_does_not_know() {
        let dir = std::env::temp_dir().join(format!("ballast-testutil-{}", std::process::id()));
        let path = dir.join("nested").join("golden.txt");
        std::env::remove_var(BLESS_VAR);
        match check(&path, "new\n") {
            Err(GoldenError::Unreadable { path: p, .. }) => assert_eq!(p, path),
            other => panic!("a missing golden file: {other:?}"),
        }

        std::env::set_var(BLESS_VAR, "1");
        check(&path, "new\n").expect("blessing writes the file and its directories");
        std::env::set_var(BLESS_VAR, "0");
        check(&path, "new\n").expect("the blessed file compares equal");
        let differs = check(&path, "changed\n").expect_err("a change is reported");
        let message = differs.to_string();
        assert!(message.contains("--- expected\nnew\n"), "{message}");
        assert!(message.contains("--- actual\nchanged\n"), "{message}");
        assert!(message.contains("BALLAST_BLESS=1"), "{message}");

        std::env::set_var(BLESS_VAR, "yes");
        let refused = std::panic::catch_unwind(blessing).expect_err("an unknown value panics");
        let text = refused
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        assert!(text.contains("set it to 1"), "{text}");
        std::env::remove_var(BLESS_VAR);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
