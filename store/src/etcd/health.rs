//! Each member's health published, read and deleted (`etcd/health/<instance-id>.json`), and the judgement of the
//! cluster's reports read from the store (the reports' type and the judgement: `ballast_state::etcd::health`).

use ballast_state::etcd::health::{
    health_key, health_prefix, judge_health, EtcdHealthSummary, HealthReport,
};
use ballast_state::etcd::json_bytes;
use ballast_state::layout::ClusterPaths;
use ballast_state::limits::MAX_NODE_RECORD;
use ballast_state::timestamp::now_stamp;

use super::record::{read_record, RecordError};
use crate::store::{Precondition, StateStore, StoreError};

/// Publishes a member's health (only its own supervisor writes it).
pub async fn publish_health(
    store: &StateStore,
    paths: &ClusterPaths,
    report: &HealthReport,
) -> Result<(), RecordError> {
    store
        .put(
            &health_key(paths, &report.instance_id),
            &json_bytes(report),
            &Precondition::None,
        )
        .await?;
    Ok(())
}

/// Every published health report (unreadable ones are skipped with a warning).
pub async fn read_health(
    store: &StateStore,
    paths: &ClusterPaths,
) -> Result<Vec<HealthReport>, RecordError> {
    let mut reports = Vec::new();
    for key in store.list(&health_prefix(paths)).await? {
        let object = match store.get_bounded(&key, MAX_NODE_RECORD).await {
            Ok(Some(object)) => object,
            Ok(None) => continue, // deleted since listed
            Err(e @ StoreError::TooLarge { .. }) => {
                tracing::warn!(%key, error = %e, "skipping an etcd health report that is too large");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match serde_json::from_slice(&object.data) {
            Ok(report) => reports.push(report),
            Err(e) => {
                tracing::warn!(%key, error = %e, "skipping an unreadable etcd health report")
            }
        }
    }
    Ok(reports)
}

/// Deletes a member's health report (its instance is gone).
pub async fn delete_health(
    store: &StateStore,
    paths: &ClusterPaths,
    instance_id: &str,
) -> Result<(), RecordError> {
    store.delete(&health_key(paths, instance_id)).await?;
    Ok(())
}

/// Judges etcd's health from what the supervisors published ([`judge_health`], at the local clock's now).
pub async fn cluster_health(
    store: &StateStore,
    paths: &ClusterPaths,
    expected_members: usize,
) -> Result<EtcdHealthSummary, RecordError> {
    let record = read_record(store, paths).await?;
    let (_, now_unix) = now_stamp();
    let reports = read_health(store, paths).await?;
    let epoch = record.map(|r| r.record.epoch);
    Ok(judge_health(epoch, &reports, now_unix, expected_members))
}
