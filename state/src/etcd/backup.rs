//! Backups in the state store (`etcd/backups/<id>/snapshot.db` and `metadata.json`): storing one, listing,
//! retention, on-demand requests (`ballast etcd backup`), and reading a snapshot back checked against its
//! metadata. Taking the snapshot from etcd is `ballast-etcd`'s (it needs an etcd client).

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::health::REPORT_FRESHNESS;
use super::json_bytes;
use super::record::RecordError;
use crate::duration::DurationError;
use crate::layout::ClusterPaths;
use crate::limits::{MAX_NODE_RECORD, MAX_SNAPSHOT};
use crate::store::{sha256_hex, Precondition, StateStore, StoreError};
use crate::timestamp::now_stamp;

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

/// Failures of backups and restores; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Taking a snapshot through etcd failed (`ballast-etcd`, on a control-plane node).
    #[error("taking a snapshot: {0}")]
    Snapshot(String),
    /// No such backup.
    #[error("no backup {id:?} in the state store; available: {}", if available.is_empty() { "none".to_string() } else { available.join(", ") })]
    UnknownBackup { id: String, available: Vec<String> },
    /// The snapshot does not match its metadata.
    #[error("backup {id:?} is corrupted: its snapshot's sha256 is {actual}, its metadata says {expected}; choose another backup (ballast etcd list-backups)")]
    Corrupted {
        id: String,
        expected: String,
        actual: String,
    },
    /// The backup's metadata is unreadable.
    #[error("backup {id:?} has unreadable metadata: {source}")]
    BadMetadata {
        id: String,
        #[source]
        source: serde_json::Error,
    },
    /// etcd is healthy: restoring would throw away everything written since the backup.
    #[error("refusing to restore: etcd is healthy (reported within the last {}s by {}); a restore replaces the cluster's data with the backup's, and is only for a cluster that lost all its members (if those instances were just terminated, run the command again once their reports are older than that)", REPORT_FRESHNESS.as_secs(), instances.join(", "))]
    ClusterHealthy { instances: Vec<String> },
    /// Someone changed `etcd/cluster.json` meanwhile.
    #[error(
        "etcd/cluster.json changed while the restore was being recorded; run the command again"
    )]
    Raced,
    /// A backup interval or retention is not a duration.
    #[error(transparent)]
    BadDuration(#[from] DurationError),
}

fn snapshot_key(paths: &ClusterPaths, id: &str) -> String {
    format!("{}snapshot.db", paths.etcd_backup(id))
}

fn metadata_key(paths: &ClusterPaths, id: &str) -> String {
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

/// Stores a backup: the snapshot first, its metadata last, so a backup without metadata is incomplete and never
/// listed. Neither may exist yet.
pub async fn store_backup(
    store: &StateStore,
    paths: &ClusterPaths,
    metadata: &BackupMetadata,
    snapshot: &[u8],
) -> Result<(), BackupError> {
    store
        .put(
            &snapshot_key(paths, &metadata.id),
            snapshot,
            &Precondition::MustNotExist,
        )
        .await?;
    store
        .put(
            &metadata_key(paths, &metadata.id),
            &json_bytes(metadata),
            &Precondition::MustNotExist,
        )
        .await?;
    Ok(())
}

/// Every complete backup, oldest first.
pub async fn list_backups(
    store: &StateStore,
    paths: &ClusterPaths,
) -> Result<Vec<BackupMetadata>, BackupError> {
    let mut out = Vec::new();
    for key in store.list(&paths.etcd_backups()).await? {
        if !key.ends_with("/metadata.json") {
            continue;
        }
        let object = match store.get_bounded(&key, MAX_NODE_RECORD).await {
            Ok(Some(object)) => object,
            Ok(None) => continue,
            Err(e @ StoreError::TooLarge { .. }) => {
                tracing::warn!(%key, error = %e, "skipping a backup whose metadata is too large");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match serde_json::from_slice::<BackupMetadata>(&object.data) {
            Ok(m) => out.push(m),
            Err(e) => {
                tracing::warn!(%key, error = %e, "skipping a backup with unreadable metadata")
            }
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Deletes backups older than `retention`, always keeping the newest one. Returns the deleted ids.
pub async fn prune_backups(
    store: &StateStore,
    paths: &ClusterPaths,
    retention: Duration,
    now_unix: i64,
) -> Result<Vec<String>, BackupError> {
    let backups = list_backups(store, paths).await?;
    let keep_from = backups.len().saturating_sub(1);
    let mut deleted = Vec::new();
    for (i, b) in backups.iter().enumerate() {
        if i < keep_from && now_unix - b.created_unix > retention.as_secs() as i64 {
            // Metadata first: a half-deleted backup is never listed.
            store.delete(&metadata_key(paths, &b.id)).await?;
            store.delete(&snapshot_key(paths, &b.id)).await?;
            deleted.push(b.id.clone());
        }
    }
    Ok(deleted)
}

/// Where an on-demand backup request lives (`ballast etcd backup`); the leader's supervisor takes a backup on
/// its next round and deletes the request.
pub fn request_key(paths: &ClusterPaths) -> String {
    paths.etcd_backup_request()
}

/// Asks the leader for a backup now (`ballast etcd backup`). Returns the request's Unix time: the CLI then
/// waits for a backup in [`list_backups`] created at or after it.
pub async fn request_backup(
    store: &StateStore,
    paths: &ClusterPaths,
    requested_by: &str,
) -> Result<i64, BackupError> {
    let (at, unix) = now_stamp();
    let body = serde_json::json!({ "requestedAt": at, "requestedUnix": unix, "requestedBy": requested_by });
    store
        .put(&request_key(paths), &json_bytes(&body), &Precondition::None)
        .await?;
    Ok(unix)
}

/// The ids of every stored backup with metadata (complete ones), from one listing: cheap enough to poll.
pub async fn backup_ids(
    store: &StateStore,
    paths: &ClusterPaths,
) -> Result<BTreeSet<String>, BackupError> {
    let prefix = paths.etcd_backups();
    Ok(store
        .list(&prefix)
        .await?
        .iter()
        .filter_map(|key| key.strip_prefix(&prefix)?.strip_suffix("/metadata.json"))
        .filter(|id| !id.contains('/'))
        .map(str::to_string)
        .collect())
}

/// Reads a backup's metadata; `None` when it has none (pruned, or still being stored).
async fn read_metadata(
    store: &StateStore,
    paths: &ClusterPaths,
    id: &str,
) -> Result<Option<BackupMetadata>, BackupError> {
    let Some(object) = store
        .get_bounded(&metadata_key(paths, id), MAX_NODE_RECORD)
        .await?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&object.data)
        .map(Some)
        .map_err(|source| BackupError::BadMetadata {
            id: id.to_string(),
            source,
        })
}

/// Waits up to `timeout` for the backup [`request_backup`] asked for at `requested_unix` (`ballast etcd
/// backup --wait`): the first backup not among `before` (the ids listed before the request) that was created
/// at or after the request, or, should the node's clock be behind the operator's, once the leader has taken
/// the request (deleted it). Each round lists the backups once and reads only new ones' metadata; rounds are
/// `poll` apart. `None` when the time ran out.
pub async fn wait_for_backup(
    store: &StateStore,
    paths: &ClusterPaths,
    before: &BTreeSet<String>,
    requested_unix: i64,
    timeout: Duration,
    poll: Duration,
) -> Result<Option<BackupMetadata>, BackupError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        for id in backup_ids(store, paths).await?.difference(before) {
            let Some(metadata) = read_metadata(store, paths, id).await? else {
                continue; // pruned since listed
            };
            if metadata.created_unix >= requested_unix
                || store.modified_unix(&request_key(paths)).await?.is_none()
            {
                return Ok(Some(metadata));
            }
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(poll.min(deadline - now)).await;
    }
}

/// A backup's snapshot, checked against its metadata's sha256.
pub async fn fetch_verified_snapshot(
    store: &StateStore,
    paths: &ClusterPaths,
    id: &str,
) -> Result<(BackupMetadata, Vec<u8>), BackupError> {
    let valid_id = !id.is_empty() && !id.contains('/') && id != "." && id != "..";
    let metadata = if valid_id {
        read_metadata(store, paths, id).await?
    } else {
        None
    };
    let Some(metadata) = metadata else {
        let available = list_backups(store, paths)
            .await?
            .into_iter()
            .map(|b| b.id)
            .collect();
        return Err(BackupError::UnknownBackup {
            id: id.to_string(),
            available,
        });
    };
    let Some(snapshot) = store
        .get_bounded(&snapshot_key(paths, id), MAX_SNAPSHOT)
        .await?
    else {
        return Err(BackupError::Corrupted {
            id: id.to_string(),
            expected: metadata.sha256.clone(),
            actual: "(the snapshot is missing)".to_string(),
        });
    };
    let actual = sha256_hex(&snapshot.data);
    if actual != metadata.sha256 {
        return Err(BackupError::Corrupted {
            id: id.to_string(),
            expected: metadata.sha256,
            actual,
        });
    }
    Ok((metadata, snapshot.data))
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
