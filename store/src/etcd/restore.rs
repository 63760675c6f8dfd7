//! The restore decision `ballast etcd restore-backup` records.
//!
//! A restore is a decision, not an action: it starts a new epoch in `etcd/cluster.json` naming the backup, and
//! the supervisors carry it out (one claims the seed, restores the snapshot into a one-member cluster, and the
//! others join it).

use std::time::Duration;

use ballast_state::etcd::health::{health_key, REPORT_FRESHNESS};
use ballast_state::etcd::record::{ClusterRecord, Origin};
use ballast_state::layout::ClusterPaths;
use ballast_state::timestamp::now_stamp;

use super::backup::{fetch_verified_snapshot, BackupError};
use super::health::read_health;
use super::record::{read_record, write_record};
use crate::store::{Precondition, StateStore};

/// Records the decision to rebuild the cluster from backup `id` (a new epoch in `etcd/cluster.json`). Refuses
/// an unknown id, a corrupted snapshot, and a cluster that a member reported healthy in the last
/// [`REPORT_FRESHNESS`] by the store's clock; the supervisors carry the decision out.
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
    let options = RestoreOptions {
        freshness,
        force: false,
    };
    request_restore_with_options(store, paths, id, requested_by, options).await
}

/// How a restore is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreOptions {
    /// A health report the store wrote less than this long ago counts as a live member.
    pub freshness: Duration,
    /// Record the restore even over a healthy cluster (`--force`): the supervisors of a healthy quorum then
    /// wipe for it too. Without it, they refuse to.
    pub force: bool,
}

impl Default for RestoreOptions {
    fn default() -> Self {
        RestoreOptions {
            freshness: REPORT_FRESHNESS,
            force: false,
        }
    }
}

/// [`request_restore`] with its options. Unless forced, the cluster must have no member that reported itself
/// healthy within `freshness` of now, both measured by the store's clock: "now" is the time the store gives
/// a marker object written for the purpose, and a report's age is that minus its object's time (S3
/// LastModified, a file's mtime). Neither the operator's clock nor the supervisors' (`updatedUnix`) is
/// trusted: either may be skewed.
pub async fn request_restore_with_options(
    store: &StateStore,
    paths: &ClusterPaths,
    id: &str,
    requested_by: &str,
    options: RestoreOptions,
) -> Result<ClusterRecord, BackupError> {
    let (metadata, _) = fetch_verified_snapshot(store, paths, id).await?;
    if !options.force {
        let healthy = healthy_by_store_clock(store, paths, options.freshness).await?;
        if !healthy.is_empty() {
            return Err(BackupError::ClusterHealthy { instances: healthy });
        }
    }
    let current = read_record(store, paths).await?;
    let (decided_at, _) = now_stamp();
    let record = ClusterRecord {
        epoch: current.as_ref().map_or(1, |c| c.record.epoch + 1),
        origin: Origin::Restore {
            backup_id: metadata.id,
            sha256: metadata.sha256,
            forced: options.force,
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

/// The instances whose health report says "healthy" and was written within `freshness` of the store's now.
async fn healthy_by_store_clock(
    store: &StateStore,
    paths: &ClusterPaths,
    freshness: Duration,
) -> Result<Vec<String>, BackupError> {
    let marker = paths.etcd_clock_marker();
    store.put(&marker, b"{}\n", &Precondition::None).await?;
    let store_now = store.modified_unix(&marker).await?;
    // Best effort: a leftover marker is harmless (nothing reads it but this function, which rewrites it).
    let _ = store.delete(&marker).await;
    // The store always dates what it just wrote; should it not, every healthy report counts as fresh (refuse).
    let store_now = store_now.unwrap_or(i64::MIN);
    let mut healthy = Vec::new();
    for report in read_health(store, paths).await? {
        if !report.cluster_healthy {
            continue;
        }
        let key = health_key(paths, &report.instance_id);
        // A report deleted meanwhile was its member's removal.
        let Some(written) = store.modified_unix(&key).await? else {
            continue;
        };
        if store_now.saturating_sub(written) <= freshness.as_secs() as i64 {
            healthy.push(report.instance_id);
        }
    }
    Ok(healthy)
}
