//! What the supervisors agree on through the state store: `etcd/cluster.json` (the cluster's epoch and who seeds
//! it), each member's published health (`etcd/health/<instance-id>.json`), and backups' metadata.

use ballast_state::layout::ClusterPaths;
use ballast_state::store::{Precondition, StateStore, StoreError, Version};
use serde::{Deserialize, Serialize};

/// Why an epoch began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Origin {
    /// A brand-new, empty cluster: the very first decision of the cluster.
    Bootstrap,
    /// The majority was lost; the survivor with the most data carries the cluster (rebuilt from a snapshot of
    /// its etcd).
    ForceNewCluster {
        /// The survivor's raft index when it won the epoch.
        raft_index: u64,
        /// The voting members whose instances EC2 confirmed terminated.
        lost_members: Vec<String>,
    },
    /// `ballast etcd restore-backup`: the cluster is rebuilt from a snapshot.
    Restore {
        backup_id: String,
        /// sha256 of the snapshot, checked again before it is restored.
        sha256: String,
    },
}

/// `etcd/cluster.json`: the one decision every supervisor follows. It changes only through conditional writes, and
/// every change starts a new epoch (except a seed claiming an unseeded epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRecord {
    /// Grows by one with every new cluster (bootstrap, forced new cluster, restore).
    pub epoch: u64,
    pub origin: Origin,
    /// The instance that creates this epoch's cluster (from nothing, from its own data, or from the snapshot);
    /// `None` until a supervisor claims it (a restore is recorded without one).
    pub seed: Option<String>,
    /// RFC 3339 time of the decision.
    pub decided_at: String,
    /// Who decided, for operators (`instance i-...`, `ballast etcd restore-backup by user@host`).
    pub decided_by: String,
}

impl ClusterRecord {
    /// The `--initial-cluster-token` of this epoch: every epoch is a distinct etcd cluster.
    pub fn cluster_token(&self, cluster: &str) -> String {
        format!("ballast-{cluster}-epoch-{}", self.epoch)
    }
}

/// A record and the version it was read at (for the next conditional write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedRecord {
    pub record: ClusterRecord,
    pub version: Version,
}

/// Failures reading or writing what the supervisors share.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The state store failed (a lost conditional write is [`StoreError::Conflict`]).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An object is not what this version of Ballast writes.
    #[error("{key} is not valid JSON of the expected shape: {source}")]
    Corrupt {
        key: String,
        #[source]
        source: serde_json::Error,
    },
}

impl RecordError {
    /// A conditional write that lost a race.
    pub fn is_conflict(&self) -> bool {
        matches!(self, RecordError::Store(StoreError::Conflict { .. }))
    }
}

/// Reads `etcd/cluster.json`.
pub async fn read_record(
    store: &StateStore,
    paths: &ClusterPaths,
) -> Result<Option<VersionedRecord>, RecordError> {
    let key = paths.etcd_cluster();
    let Some(object) = store.get(&key).await? else {
        return Ok(None);
    };
    let record = serde_json::from_slice(&object.data)
        .map_err(|source| RecordError::Corrupt { key, source })?;
    Ok(Some(VersionedRecord {
        record,
        version: object.version,
    }))
}

/// Writes `etcd/cluster.json` if nobody changed it since `previous` was read (`None`: it must not exist).
pub async fn write_record(
    store: &StateStore,
    paths: &ClusterPaths,
    record: &ClusterRecord,
    previous: Option<&Version>,
) -> Result<VersionedRecord, RecordError> {
    let key = paths.etcd_cluster();
    let data = json_bytes(record);
    let precondition = match previous {
        None => Precondition::MustNotExist,
        Some(v) => Precondition::MustMatch(v.clone()),
    };
    let version = store.put(&key, &data, &precondition).await?;
    Ok(VersionedRecord {
        record: record.clone(),
        version,
    })
}

/// A member's health as its supervisor last published it (`etcd/health/<instance-id>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthReport {
    pub instance_id: String,
    pub peer_url: String,
    pub client_url: String,
    /// RFC 3339 time of the report.
    pub updated_at: String,
    /// Unix seconds of the report (for freshness checks).
    pub updated_unix: i64,
    /// The epoch of the local data, if any.
    pub local_epoch: Option<u64>,
    /// Whether this member's etcd answers.
    pub running: bool,
    pub member_id: Option<String>,
    pub is_learner: bool,
    pub is_leader: bool,
    pub raft_index: u64,
    /// Whether the cluster, seen from here, has a leader and a healthy quorum.
    pub cluster_healthy: bool,
    /// The voting members and learners, seen from here (instance ids, or peer URLs of unstarted members).
    pub voting_members: Vec<String>,
    pub learners: Vec<String>,
    /// What the supervisor decided last, in words.
    pub last_step: String,
    /// The last error of the loop, if the last round failed.
    pub last_error: Option<String>,
}

/// A published report older than this is not trusted (for restore refusals and `validate cluster`).
pub const REPORT_FRESHNESS: std::time::Duration = std::time::Duration::from_secs(30);

/// Where a member's health report lives.
pub fn health_key(paths: &ClusterPaths, instance_id: &str) -> String {
    format!("{}etcd/health/{instance_id}.json", paths.prefix())
}

/// The prefix of every health report.
pub fn health_prefix(paths: &ClusterPaths) -> String {
    format!("{}etcd/health/", paths.prefix())
}

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
        if let Some(object) = store.get(&key).await? {
            match serde_json::from_slice(&object.data) {
                Ok(report) => reports.push(report),
                Err(e) => {
                    tracing::warn!(%key, error = %e, "skipping an unreadable etcd health report")
                }
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

pub(crate) fn json_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs cannot fail (string keys, no non-finite floats).
    let mut data = serde_json::to_vec_pretty(value).unwrap_or_default();
    data.push(b'\n');
    data
}

/// Now, as RFC 3339 and Unix seconds.
pub(crate) fn now_stamp() -> (String, i64) {
    let now = time::OffsetDateTime::now_utc();
    let text = now
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    (text, now.unix_timestamp())
}
