//! The restore decision `ballast etcd restore-backup` records.
//!
//! A restore is a decision, not an action: it starts a new epoch in `etcd/cluster.json` naming the backup, and
//! the supervisors carry it out (one claims the seed, restores the snapshot into a one-member cluster, and the
//! others join it).

use std::time::Duration;

use super::backup::{fetch_verified_snapshot, BackupError};
use super::health::{read_health, REPORT_FRESHNESS};
use super::record::{read_record, write_record, ClusterRecord, Origin};
use crate::layout::ClusterPaths;
use crate::store::StateStore;
use crate::timestamp::now_stamp;

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
