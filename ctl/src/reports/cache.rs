//! The operator's cache of nodeup reports, so that a `validate cluster` or `get instances` run reads from the
//! state store only the reports that changed since the last run (at 205 instances, reading every report was
//! most of a `validate cluster` run's time):
//!
//! ```text
//! <cache dir>/reports/<sha256 of the store URL, 16 hex>/<cluster>/<writer>.json
//!     {"version": "<the S3 ETag it was read at>", "report": "<the stored report, as read>"}
//! <cache dir>/reports/<sha256 of the store URL, 16 hex>/<cluster>/node_names.json
//!     {"<instance-id>": "<its private DNS name, as EC2 described it>", ...}
//! ```
//!
//! A report's writer is the name its key has in the store (`<role-id>:<instance-id>`, or the instance id on a
//! file store: `ballast_state::layout::ClusterPaths::report`). The cache dir is `$BALLAST_CACHE_DIR`, else `$XDG_CACHE_HOME/ballast`, else `$HOME/.cache/ballast`; an empty
//! `BALLAST_CACHE_DIR` turns the cache off. Directories are 0700 and files 0600: a report is not secret, but it is
//! the operator's. A cached report is used only when the store's listing names the same version, and it is
//! judged afresh each time (signature, certificate validity now, the CA bundle read now), exactly as a report
//! read from the store: the cache keeps bytes, never a verdict. The cache is only a speed-up: when it cannot
//! be read or written, the command reads the store as if it were empty (logged at debug level).

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use ballast_state::digest::sha256_hex;
use ballast_state::limits::{ReadLimit, MAX_REPORT};
use ballast_state::validate::check_cluster_name;
use ballast_store::local_file::{read_file_bounded, FileReadError};
use ballast_store::store::{StoredObject, Version};
use serde::{Deserialize, Serialize};

/// Names the cache directory; empty turns the cache off.
pub const CACHE_DIR_ENV: &str = "BALLAST_CACHE_DIR";
/// Beside the reports: each instance's private DNS name as EC2 gave it. Its `_` is no character of a writer
/// (an IAM unique id and an instance id), so it is never taken for a report (nor dropped with one).
const NAMES_FILE: &str = "node_names.json";

/// One cached report.
#[derive(Serialize, Deserialize)]
struct Entry {
    version: String,
    report: String,
}

/// The cached reports of one cluster in one state store.
#[derive(Debug, Clone)]
pub struct ReportCache {
    dir: PathBuf,
}

impl ReportCache {
    /// The cache of `cluster`'s reports in the store at `store_url`, under the cache dir the environment names;
    /// `None` when it names none (or turns it off), or when `cluster` is no valid cluster name ([`Self::under`]).
    pub fn from_env(store_url: &str, cluster: &str) -> Option<Self> {
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let root = match std::env::var_os(CACHE_DIR_ENV) {
            Some(dir) if dir.is_empty() => return None,
            Some(dir) => PathBuf::from(dir),
            None => env("XDG_CACHE_HOME")
                .map(|d| PathBuf::from(d).join("ballast"))
                .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache/ballast")))?,
        };
        Self::under(&root, store_url, cluster)
    }

    /// The cache of `cluster`'s reports in the store at `store_url`, under `root`. `None` when `cluster` is no
    /// valid cluster name (a DNS name, `check_cluster_name`): the CLI takes the name as typed, and a name such as
    /// `..` or `a/b` would put the cache, and what `clear` removes, outside its directory.
    pub fn under(root: &Path, store_url: &str, cluster: &str) -> Option<Self> {
        check_cluster_name(cluster).ok()?;
        let store = &sha256_hex(store_url.as_bytes())[..16];
        Some(ReportCache {
            dir: root.join("reports").join(store).join(cluster),
        })
    }

    /// A writer as IAM and EC2 spell them (an IAM unique id, `:`, an instance id: letters, digits, `-`) is the
    /// only file name this cache makes or reads.
    fn path(&self, writer: &str) -> Option<PathBuf> {
        let plain = !writer.is_empty()
            && writer
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':');
        plain.then(|| self.dir.join(format!("{writer}.json")))
    }

    /// The report cached for `writer`, with the version it was read at.
    pub fn load(&self, writer: &str) -> Option<StoredObject> {
        let path = self.path(writer)?;
        let text = read_cached(&path, MAX_CACHED_REPORT)?;
        match serde_json::from_slice::<Entry>(&text) {
            Ok(entry) => Some(StoredObject {
                data: entry.report.into_bytes(),
                version: Version(entry.version),
            }),
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "report cache: not an entry, ignored");
                None
            }
        }
    }

    /// Keeps `object` as `writer`'s report (replacing the file whole: a reader never sees half of one).
    pub fn save(&self, writer: &str, object: &StoredObject) {
        let Some(path) = self.path(writer) else {
            return;
        };
        // Reports are JSON; anything else is not worth keeping.
        let Ok(report) = String::from_utf8(object.data.clone()) else {
            return;
        };
        let entry = Entry {
            version: object.version.0.clone(),
            report,
        };
        if let Err(e) = self.write(&path, &entry) {
            tracing::debug!(path = %path.display(), error = %e, "report cache: not written");
        }
    }

    fn write(&self, path: &Path, entry: &Entry) -> std::io::Result<()> {
        self.write_bytes(path, &serde_json::to_vec(entry)?)
    }

    fn write_bytes(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        // A cache: atomic (a reader never sees half an entry) but not synced; a lost entry is read again.
        let options = ballast_common::durable::Options::mode(0o600).cache();
        ballast_common::durable::write(path, bytes, &options).map_err(|e| e.source)
    }

    /// The private DNS names EC2 gave the cluster's instances, as kept by [`ReportCache::save_names`]: EC2 never
    /// changes an instance's name nor reuses its id, so a later run describes only instances not named here.
    pub fn load_names(&self) -> BTreeMap<String, String> {
        let path = self.dir.join(NAMES_FILE);
        match read_cached(&path, MAX_CACHED_NAMES) {
            Some(text) => serde_json::from_slice(&text).unwrap_or_else(|e| {
                tracing::debug!(path = %path.display(), error = %e, "report cache: names not read");
                BTreeMap::new()
            }),
            None => BTreeMap::new(),
        }
    }

    /// Keeps `names` (instance id -> private DNS name) for the next run.
    pub fn save_names(&self, names: &BTreeMap<String, String>) {
        let path = self.dir.join(NAMES_FILE);
        let written = serde_json::to_vec(names)
            .map_err(std::io::Error::other)
            .and_then(|bytes| self.write_bytes(&path, &bytes));
        if let Err(e) = written {
            tracing::debug!(path = %path.display(), error = %e, "report cache: names not written");
        }
    }

    /// Drops `writer`'s cached report (the store has none).
    pub fn forget(&self, writer: &str) {
        if let Some(path) = self.path(writer) {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %e, "report cache: not removed")
                }
            }
        }
    }

    /// Drops the whole cluster's cache (its reports and node names): the cluster was deleted. A cache that cannot
    /// be removed is logged at debug level and left, like every other cache failure.
    pub fn clear(&self) {
        match std::fs::remove_dir_all(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::debug!(path = %self.dir.display(), error = %e, "report cache: not removed")
            }
        }
    }

    /// Drops every cached report whose writer is not in `keep`: the store no longer has a report of it.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if !keep(id) {
                self.forget(id);
            }
        }
    }
}

/// A cached report: one the store gave within [`MAX_REPORT`], JSON-escaped in its entry (at most doubled) with
/// its version.
const MAX_CACHED_REPORT: ReadLimit = ReadLimit {
    bytes: 2 * MAX_REPORT.bytes + 4096,
    what: "a cached boot report",
};
/// The cached instance names: an id and a DNS name each, for at most a few thousand instances.
const MAX_CACHED_NAMES: ReadLimit = ReadLimit {
    bytes: 4 * 1024 * 1024,
    what: "the cached instance names",
};

/// A cache file's bytes, or `None`: a miss (the caller reads the store instead) when it is absent, too large,
/// not a regular file (a FIFO planted in its place never blocks a command), or unreadable.
fn read_cached(path: &Path, limit: ReadLimit) -> Option<Vec<u8>> {
    match read_file_bounded(path, limit) {
        Ok(bytes) => Some(bytes),
        Err(FileReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "report cache: not read");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ReportCache;
    use ballast_store::store::{StoredObject, Version};
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn object(data: &str, version: &str) -> StoredObject {
        StoredObject {
            data: data.as_bytes().to_vec(),
            version: Version(version.to_string()),
        }
    }

    #[test]
    fn kept_reports_come_back_private_and_per_store() {
        let root = tempfile::tempdir().expect("tempdir");
        let cache =
            ReportCache::under(root.path(), "s3://a/clusters", "c1").expect("a valid cluster name");
        assert!(cache.load("i-0abc").is_none());
        cache.save("i-0abc", &object("{\"r\":1}", "\"etag1\""));
        assert_eq!(cache.load("i-0abc"), Some(object("{\"r\":1}", "\"etag1\"")));
        let file = cache.path("i-0abc").expect("a plain id");
        let mode =
            |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(file.parent().expect("dir")), 0o700);
        // Another store's cache of the same cluster name is another directory.
        assert!(ReportCache::under(root.path(), "s3://b/clusters", "c1")
            .expect("a valid cluster name")
            .load("i-0abc")
            .is_none());
        cache.save("i-0def", &object("{}", "\"etag2\""));
        cache.retain(|id| id == "i-0def");
        assert!(cache.load("i-0abc").is_none());
        assert!(cache.load("i-0def").is_some());
        cache.forget("i-0def");
        assert!(cache.load("i-0def").is_none());
        // A deleted cluster's cache goes whole; another cluster's stays.
        let other =
            ReportCache::under(root.path(), "s3://a/clusters", "c2").expect("a valid cluster name");
        other.save("i-0aaa", &object("{}", "\"etag3\""));
        cache.save("i-0def", &object("{}", "\"etag2\""));
        cache.save_names(&[("i-0def".to_string(), "ip-10-0-0-2".to_string())].into());
        cache.clear();
        assert!(!cache.dir.exists());
        assert!(other.load("i-0aaa").is_some());
        // Clearing what is gone already does not panic (a delete run again).
        cache.clear();
    }

    #[test]
    fn only_a_valid_cluster_name_gets_a_cache() {
        for name in ["..", ".", "", "a/b", "../../etc", "c1\0"] {
            assert!(
                ReportCache::under(Path::new("/cache"), "s3://a", name).is_none(),
                "{name:?}"
            );
        }
        assert!(ReportCache::under(Path::new("/cache"), "s3://a", "c1.example.com").is_some());
    }

    #[test]
    fn ids_that_are_not_plain_are_never_paths() {
        let root = tempfile::tempdir().expect("tempdir");
        let cache = ReportCache::under(root.path(), "s3://a", "c1").expect("a valid cluster name");
        for id in ["../x", "a/b", "", ".hidden", "AROA:../x"] {
            cache.save(id, &object("{}", "v"));
            assert!(cache.load(id).is_none(), "{id}");
        }
        assert!(!root.path().join("x.json").exists());
    }

    #[test]
    fn names_are_kept_beside_the_reports_and_never_taken_for_one() {
        let root = tempfile::tempdir().expect("tempdir");
        let cache = ReportCache::under(root.path(), "s3://a", "c1").expect("a valid cluster name");
        assert!(cache.load_names().is_empty());
        let names = [("i-1".to_string(), "ip-10-0-0-1.ec2.internal".to_string())].into();
        cache.save_names(&names);
        assert_eq!(cache.load_names(), names);
        cache.save("i-1", &object("{}", "v"));
        cache.retain(|id| id == "i-1");
        assert_eq!(cache.load_names(), names, "retain keeps the names file");
        let file = root
            .path()
            .join("reports")
            .join(sha(b"s3://a"))
            .join("c1/node_names.json");
        let mode = std::fs::metadata(&file).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    fn sha(data: &[u8]) -> String {
        ballast_state::digest::sha256_hex(data)[..16].to_string()
    }

    #[test]
    fn a_damaged_entry_is_ignored() {
        let root = tempfile::tempdir().expect("tempdir");
        let cache = ReportCache::under(root.path(), "s3://a", "c1").expect("a valid cluster name");
        cache.save("i-1", &object("{}", "v"));
        std::fs::write(cache.path("i-1").expect("path"), b"not json").expect("damage");
        assert!(cache.load("i-1").is_none());
    }

    fn mkfifo(path: &Path) {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo runs");
        assert!(made.success(), "mkfifo {}", path.display());
    }

    #[test]
    fn an_oversized_or_odd_cache_file_is_a_miss_never_read_whole() {
        let root = tempfile::tempdir().expect("tempdir");
        let cache = ReportCache::under(root.path(), "s3://a", "c1").expect("a valid cluster name");
        cache.save("i-1", &object("{}", "v"));
        let path = cache.path("i-1").expect("path");
        let big = vec![b' '; (super::MAX_CACHED_REPORT.bytes + 1) as usize];
        std::fs::write(&path, big).expect("oversize");
        assert!(cache.load("i-1").is_none());
        // A FIFO in place of a cache file: refused by its type, so the command never blocks on it.
        std::fs::remove_file(&path).expect("rm");
        mkfifo(&path);
        assert!(cache.load("i-1").is_none());
        let names = root
            .path()
            .join("reports")
            .join(sha(b"s3://a"))
            .join("c1/node_names.json");
        mkfifo(&names);
        assert!(cache.load_names().is_empty());
    }
}
