//! Backups in the state store (`etcd/backups/<id>/snapshot.db` and `metadata.json`): storing one, listing,
//! retention, on-demand requests (`ballast etcd backup`), and reading a snapshot back checked against its
//! metadata (their types, ids and keys: `ballast_state::etcd::backup`).

use std::collections::BTreeSet;
use std::time::Duration;

use ballast_state::digest::sha256_hex;
use ballast_state::duration::DurationError;
use ballast_state::etcd::backup::{metadata_key, request_key, snapshot_key, BackupMetadata};
use ballast_state::etcd::health::REPORT_FRESHNESS;
use ballast_state::etcd::json_bytes;
use ballast_state::layout::ClusterPaths;
use ballast_state::limits::{MAX_NODE_RECORD, MAX_SNAPSHOT};
use ballast_state::timestamp::now_stamp;

use super::record::RecordError;
use crate::store::{Precondition, StateStore, StoreError};

/// Failures of backups and restores; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Taking a snapshot through etcd failed (`ballast-etcd`, on a control-plane node). The source is the etcd
    /// client's error, boxed because this crate links no etcd client.
    #[error("taking a snapshot: {source}")]
    Snapshot {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The snapshot could not be written to its local file.
    #[error("taking a snapshot: {}: {source}", path.display())]
    SnapshotFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// etcd sent a snapshot that cannot be a backup; `problem` says what is wrong with it (Ballast's own words).
    #[error("taking a snapshot: {problem}")]
    BadSnapshot { problem: String },
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
