//! Backups in the state store (`etcd/backups/<id>/snapshot.db` and `metadata.json`), listing, retention, and
//! the restore decision `ballast etcd restore-backup` records.
//!
//! A restore is a decision, not an action: it starts a new epoch in `etcd/cluster.json` naming the backup, and
//! the supervisors carry it out (one claims the seed, restores the snapshot into a one-member cluster, and the
//! others join it).

use std::time::Duration;

use ballast_state::layout::ClusterPaths;
use ballast_state::store::{sha256_hex, Precondition, StateStore, StoreError};
use serde::{Deserialize, Serialize};

use crate::record::{
    json_bytes, now_stamp, read_health, read_record, write_record, ClusterRecord, Origin,
    RecordError, REPORT_FRESHNESS,
};

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
    #[error("backup {id:?} has unreadable metadata: {message}")]
    BadMetadata { id: String, message: String },
    /// etcd is healthy: restoring would throw away everything written since the backup.
    #[error("refusing to restore: etcd is healthy (reported within the last {}s by {}); a restore replaces the cluster's data with the backup's, and is only for a cluster that lost all its members (if those instances were just terminated, run the command again once their reports are older than that)", REPORT_FRESHNESS.as_secs(), instances.join(", "))]
    ClusterHealthy { instances: Vec<String> },
    /// Someone changed `etcd/cluster.json` meanwhile.
    #[error(
        "etcd/cluster.json changed while the restore was being recorded; run the command again"
    )]
    Raced,
    #[error("{0:?} is not a duration (use e.g. 30s, 15m, 1h, 7d)")]
    BadDuration(String),
}

/// Parses `30s`, `15m`, `1h`, `7d` (and combinations like `1h30m`).
pub fn parse_duration(text: &str) -> Result<Duration, BackupError> {
    let bad = || BackupError::BadDuration(text.to_string());
    let mut total = 0u64;
    let mut number = String::new();
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: u64 = number.parse().map_err(|_| bad())?;
        number.clear();
        total += n * match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86400,
            _ => return Err(bad()),
        };
    }
    if !number.is_empty() || total == 0 {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
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

/// What [`snapshot_to_file`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalSnapshot {
    /// The member's revision and raft index just before the snapshot (the snapshot holds at least these).
    pub revision: i64,
    pub raft_index: u64,
    pub size: u64,
}

/// Streams a snapshot from the member behind `client` into `path` (synced to disk) and checks the sha256 etcd
/// appends to it. The maintenance API serves locally: it works on a member that has lost its quorum, and it
/// holds everything the member applied (etcd commits its backend before streaming).
pub async fn snapshot_to_file(
    client: &mut etcd_client::Client,
    path: &std::path::Path,
) -> Result<LocalSnapshot, BackupError> {
    let snap = |e: etcd_client::Error| BackupError::Snapshot(e.to_string());
    let file_err = |e: std::io::Error| BackupError::Snapshot(format!("{}: {e}", path.display()));
    let status = client.status().await.map_err(snap)?;
    let mut stream = client.snapshot().await.map_err(snap)?;
    let mut data = Vec::new();
    while let Some(chunk) = stream.message().await.map_err(snap)? {
        data.extend_from_slice(chunk.blob());
    }
    if !snapshot_checksum_ok(&data) {
        return Err(BackupError::Snapshot(format!(
            "the snapshot etcd sent ({} bytes) does not carry a matching sha256",
            data.len()
        )));
    }
    {
        use std::io::Write;
        let mut file = std::fs::File::create(path).map_err(file_err)?;
        file.write_all(&data).map_err(file_err)?;
        file.sync_all().map_err(file_err)?;
    }
    Ok(LocalSnapshot {
        revision: status.header().map_or(0, |h| h.revision()),
        raft_index: status.raft_index(),
        size: data.len() as u64,
    })
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

/// Streams a snapshot from the member behind `client` (a voter) and stores it with its metadata.
pub async fn take_backup(
    client: &mut etcd_client::Client,
    store: &StateStore,
    paths: &ClusterPaths,
    epoch: u64,
    taken_by: &str,
) -> Result<BackupMetadata, BackupError> {
    let snap = |e: etcd_client::Error| BackupError::Snapshot(e.to_string());
    let status = client.status().await.map_err(snap)?;
    let members = client.member_list().await.map_err(snap)?.members().len();
    let revision = status.header().map_or(0, |h| h.revision());
    let mut stream = client.snapshot().await.map_err(snap)?;
    let mut data = Vec::new();
    while let Some(chunk) = stream.message().await.map_err(snap)? {
        data.extend_from_slice(chunk.blob());
    }
    if data.is_empty() {
        return Err(BackupError::Snapshot(
            "etcd sent an empty snapshot".to_string(),
        ));
    }
    let now = time::OffsetDateTime::now_utc();
    let (created_at, created_unix) = now_stamp();
    let metadata = BackupMetadata {
        id: backup_id(now),
        created_at,
        created_unix,
        revision,
        sha256: sha256_hex(&data),
        size: data.len() as u64,
        member_count: members,
        epoch,
        taken_by: taken_by.to_string(),
    };
    // Snapshot first, metadata last: a backup without metadata is incomplete and never listed.
    store
        .put(
            &snapshot_key(paths, &metadata.id),
            &data,
            &Precondition::MustNotExist,
        )
        .await?;
    store
        .put(
            &metadata_key(paths, &metadata.id),
            &json_bytes(&metadata),
            &Precondition::MustNotExist,
        )
        .await?;
    tracing::info!(id = %metadata.id, revision, size = metadata.size, "etcd backup stored");
    Ok(metadata)
}

/// Every complete backup, oldest first.
pub async fn list_backups(
    store: &StateStore,
    paths: &ClusterPaths,
) -> Result<Vec<BackupMetadata>, BackupError> {
    let prefix = format!("{}etcd/backups/", paths.prefix());
    let mut out = Vec::new();
    for key in store.list(&prefix).await? {
        if !key.ends_with("/metadata.json") {
            continue;
        }
        let Some(object) = store.get(&key).await? else {
            continue;
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
    format!("{}etcd/backup-request.json", paths.prefix())
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
) -> Result<std::collections::BTreeSet<String>, BackupError> {
    let prefix = format!("{}etcd/backups/", paths.prefix());
    Ok(store
        .list(&prefix)
        .await?
        .iter()
        .filter_map(|key| key.strip_prefix(&prefix)?.strip_suffix("/metadata.json"))
        .filter(|id| !id.contains('/'))
        .map(str::to_string)
        .collect())
}

/// Waits up to `timeout` for the backup [`request_backup`] asked for at `requested_unix` (`ballast etcd
/// backup --wait`): the first backup not among `before` (the ids listed before the request) that was created
/// at or after the request, or, should the node's clock be behind the operator's, once the leader has taken
/// the request (deleted it). Each round lists the backups once and reads only new ones' metadata; rounds are
/// `poll` apart. `None` when the time ran out.
pub async fn wait_for_backup(
    store: &StateStore,
    paths: &ClusterPaths,
    before: &std::collections::BTreeSet<String>,
    requested_unix: i64,
    timeout: Duration,
    poll: Duration,
) -> Result<Option<BackupMetadata>, BackupError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        for id in backup_ids(store, paths).await?.difference(before) {
            let Some(object) = store.get(&metadata_key(paths, id)).await? else {
                continue; // pruned since listed
            };
            let metadata: BackupMetadata =
                serde_json::from_slice(&object.data).map_err(|e| BackupError::BadMetadata {
                    id: id.clone(),
                    message: e.to_string(),
                })?;
            if metadata.created_unix >= requested_unix
                || store.get(&request_key(paths)).await?.is_none()
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
    let unknown = |available: Vec<String>| BackupError::UnknownBackup {
        id: id.to_string(),
        available,
    };
    let valid_id = !id.is_empty() && !id.contains('/') && id != "." && id != "..";
    let metadata = if valid_id {
        store.get(&metadata_key(paths, id)).await?
    } else {
        None
    };
    let Some(metadata) = metadata else {
        let available = list_backups(store, paths)
            .await?
            .into_iter()
            .map(|b| b.id)
            .collect();
        return Err(unknown(available));
    };
    let metadata: BackupMetadata =
        serde_json::from_slice(&metadata.data).map_err(|e| BackupError::BadMetadata {
            id: id.to_string(),
            message: e.to_string(),
        })?;
    let Some(snapshot) = store.get(&snapshot_key(paths, id)).await? else {
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

/// Records the decision to rebuild the cluster from backup `id` (a new epoch in `etcd/cluster.json`). Refuses
/// an unknown id, a corrupted snapshot, and a cluster that a member reported healthy in the last
/// [`REPORT_FRESHNESS`]; the supervisors carry the decision out.
pub async fn request_restore(
    store: &StateStore,
    paths: &ClusterPaths,
    id: &str,
    requested_by: &str,
) -> Result<ClusterRecord, BackupError> {
    request_restore_with(store, paths, id, requested_by, REPORT_FRESHNESS).await
}

/// [`request_restore`], trusting health reports younger than `freshness` (tests use a short one).
pub async fn request_restore_with(
    store: &StateStore,
    paths: &ClusterPaths,
    id: &str,
    requested_by: &str,
    freshness: Duration,
) -> Result<ClusterRecord, BackupError> {
    let (metadata, _) = fetch_verified_snapshot(store, paths, id).await?;
    let (_, now_unix) = now_stamp();
    let healthy: Vec<String> = read_health(store, paths)
        .await?
        .into_iter()
        .filter(|r| r.cluster_healthy && now_unix - r.updated_unix <= freshness.as_secs() as i64)
        .map(|r| r.instance_id)
        .collect();
    if !healthy.is_empty() {
        return Err(BackupError::ClusterHealthy { instances: healthy });
    }
    let current = read_record(store, paths).await?;
    let (decided_at, _) = now_stamp();
    let record = ClusterRecord {
        epoch: current.as_ref().map_or(1, |c| c.record.epoch + 1),
        origin: Origin::Restore {
            backup_id: metadata.id,
            sha256: metadata.sha256,
        },
        seed: None,
        decided_at,
        decided_by: requested_by.to_string(),
    };
    match write_record(store, paths, &record, current.as_ref().map(|c| &c.version)).await {
        Ok(written) => Ok(written.record),
        Err(e) if e.is_conflict() => Err(BackupError::Raced),
        Err(e) => Err(e.into()),
    }
}

/// What `ballast validate cluster` and operators see of etcd: the published reports, judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcdHealthSummary {
    pub epoch: Option<u64>,
    pub healthy: bool,
    pub voting_members: Vec<String>,
    pub learners: Vec<String>,
    /// Why it is not healthy, in words.
    pub problems: Vec<String>,
}

/// Judges etcd's health from what the supervisors published: healthy when a fresh report of the current
/// epoch says so and shows `expected_members` voting members and no learner.
pub async fn cluster_health(
    store: &StateStore,
    paths: &ClusterPaths,
    expected_members: usize,
) -> Result<EtcdHealthSummary, BackupError> {
    let record = read_record(store, paths).await?;
    let (_, now_unix) = now_stamp();
    let reports = read_health(store, paths).await?;
    let fresh: Vec<_> = reports
        .iter()
        .filter(|r| now_unix - r.updated_unix <= REPORT_FRESHNESS.as_secs() as i64)
        .collect();
    let mut problems = Vec::new();
    let epoch = record.map(|r| r.record.epoch);
    if epoch.is_none() {
        problems.push("etcd was never bootstrapped (no etcd/cluster.json)".to_string());
    }
    let best = fresh
        .iter()
        .filter(|r| r.cluster_healthy && r.local_epoch == epoch)
        .max_by_key(|r| (r.is_leader, r.updated_unix));
    let (voting, learners) = best.map_or((vec![], vec![]), |r| {
        (r.voting_members.clone(), r.learners.clone())
    });
    if best.is_none() {
        problems.push("no control-plane instance reports a healthy etcd recently".to_string());
    } else {
        if voting.len() != expected_members {
            problems.push(format!(
                "{} voting members, expected {expected_members}",
                voting.len()
            ));
        }
        if !learners.is_empty() {
            problems.push(format!("learners still joining: {}", learners.join(", ")));
        }
    }
    Ok(EtcdHealthSummary {
        epoch,
        healthy: problems.is_empty(),
        voting_members: voting,
        learners,
        problems,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn snapshot_checksum() {
        use sha2::{Digest, Sha256};
        let mut data = vec![7u8; 1024];
        let sum = Sha256::digest(&data);
        assert!(!super::snapshot_checksum_ok(&data), "no checksum");
        data.extend_from_slice(&sum);
        assert!(super::snapshot_checksum_ok(&data));
        data[3] = 8;
        assert!(!super::snapshot_checksum_ok(&data), "corrupted");
        assert!(!super::snapshot_checksum_ok(&[]));
    }

    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15m").ok(), Some(Duration::from_secs(900)));
        assert_eq!(
            parse_duration("7d").ok(),
            Some(Duration::from_secs(7 * 86400))
        );
        assert_eq!(
            parse_duration("1h30m").ok(),
            Some(Duration::from_secs(5400))
        );
        assert!(parse_duration("15").is_err());
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("0s").is_err());
    }

    #[test]
    fn ids_sort_by_time() {
        let a = backup_id(time::macros::datetime!(2025-01-02 03:04:05.678 UTC));
        assert_eq!(a, "20250102T030405.678Z");
        let b = backup_id(time::macros::datetime!(2025-01-10 00:00:00 UTC));
        assert!(a < b);
    }
}
