//! Backups in the state store (`etcd/backups/<id>/snapshot.db` and `metadata.json`): what a backup holds, its id,
//! where its objects live, and the snapshot's own checksum. Storing, listing, pruning and reading them back is
//! `ballast_store::etcd::backup`'s; taking the snapshot from etcd is `ballast-etcd`'s (it needs an etcd client).

use serde::{Deserialize, Serialize};

use crate::layout::ClusterPaths;

/// What a backup holds, beside its snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupMetadata {
    pub id: String,
    /// RFC 3339.
    pub created_at: String,
    pub created_unix: i64,
    /// The etcd revision the snapshot was taken at.
    pub revision: i64,
    /// sha256 of `snapshot.db`, hex.
    pub sha256: String,
    pub size: u64,
    pub member_count: usize,
    /// The epoch of the cluster it was taken from.
    pub epoch: u64,
    /// The instance that took it.
    pub taken_by: String,
}

/// Where a backup's snapshot lives.
pub fn snapshot_key(paths: &ClusterPaths, id: &str) -> String {
    format!("{}snapshot.db", paths.etcd_backup(id))
}

/// Where a backup's metadata lives.
pub fn metadata_key(paths: &ClusterPaths, id: &str) -> String {
    format!("{}metadata.json", paths.etcd_backup(id))
}

/// A sortable id from the time: `20250101T120000.123Z`.
pub fn backup_id(now: time::OffsetDateTime) -> String {
    let format = time::macros::format_description!(
        "[year][month][day]T[hour][minute][second].[subsecond digits:3]Z"
    );
    now.format(&format)
        .unwrap_or_else(|_| now.unix_timestamp().to_string())
}

/// A snapshot streamed by etcd ends with the sha256 of the bolt database before it (the database is a whole
/// number of 512-byte pages): what `etcdctl snapshot restore` checks.
pub fn snapshot_checksum_ok(data: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    if data.len() < 512 + 32 || data.len() % 512 != 32 {
        return false;
    }
    let (db, sum) = data.split_at(data.len() - 32);
    Sha256::digest(db).as_slice() == sum
}

/// Where an on-demand backup request lives (`ballast etcd backup`); the leader's supervisor takes a backup on
/// its next round and deletes the request.
pub fn request_key(paths: &ClusterPaths) -> String {
    paths.etcd_backup_request()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_checksum() {
        use sha2::{Digest, Sha256};
        let mut data = vec![7u8; 1024];
        let sum = Sha256::digest(&data);
        assert!(!snapshot_checksum_ok(&data), "no checksum");
        data.extend_from_slice(&sum);
        assert!(snapshot_checksum_ok(&data));
        data[3] = 8;
        assert!(!snapshot_checksum_ok(&data), "corrupted");
        assert!(!snapshot_checksum_ok(&[]));
    }

    #[test]
    fn ids_sort_by_time() {
        let a = backup_id(time::macros::datetime!(2025-01-02 03:04:05.678 UTC));
        assert_eq!(a, "20250102T030405.678Z");
        let b = backup_id(time::macros::datetime!(2025-01-10 00:00:00 UTC));
        assert!(a < b);
    }
}
