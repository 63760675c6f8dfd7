//! Helpers shared by the CLI's tests (each test file includes this module with `mod common;`).

#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;

/// A temporary directory holding a `file://` state store (`state/`), where `ballast` runs as an operator would:
/// with a clean environment (only `PATH` and `BALLAST_STATE`) and the directory as its working directory.
pub struct TempStore {
    pub dir: tempfile::TempDir,
}

impl TempStore {
    pub fn new() -> Self {
        TempStore {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// A store holding cluster `name` as `create cluster --zones ZONES` makes it.
    pub fn with_cluster(name: &str, zones: &str) -> Self {
        let store = TempStore::new();
        store.create_cluster(name, zones);
        store
    }

    pub fn create_cluster(&self, name: &str, zones: &str) {
        self.ballast()
            .args(["create", "cluster", "--name", name, "--zones", zones])
            .assert()
            .success();
    }

    /// The store's URL (`BALLAST_STATE`).
    pub fn state(&self) -> String {
        format!("file://{}", self.store_dir().display())
    }

    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// `ballast` against this store; a hung command fails its test after a minute.
    pub fn ballast(&self) -> Command {
        let mut cmd = Command::cargo_bin("ballast").expect("the ballast binary");
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("BALLAST_STATE", self.state())
            .current_dir(self.dir.path())
            .timeout(Duration::from_secs(60));
        cmd
    }

    /// Writes `text` to `name` in the temporary directory (beside the store, not in it).
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write file");
        path
    }

    /// Every file of the store with its content: what "changes nothing" is checked against.
    pub fn snapshot(&self) -> Vec<(String, Vec<u8>)> {
        snapshot(&self.store_dir())
    }
}

/// Every file under `root` (recursively) with its content, by path relative to `root`, sorted: what "changes
/// nothing" is checked against (e.g. a `file://` state store before and after a refused command).
pub fn snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            walk(root, &path, out);
        } else {
            let rel = path
                .strip_prefix(root)
                .expect("under root")
                .display()
                .to_string();
            out.push((rel, std::fs::read(&path).expect("reading a file")));
        }
    }
}
