//! Helpers shared by the CLI's tests (each test file includes this module with `mod common;`).

#![allow(dead_code)] // each test file uses its own subset

use std::path::Path;

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
