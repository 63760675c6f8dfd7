//! `etcd/cluster.json`: the one decision every supervisor follows (the cluster's epoch, why it began, and who
//! seeds it), changed only through conditional writes.

use serde::{Deserialize, Serialize};

use super::json_bytes;
use crate::layout::ClusterPaths;
use crate::limits::MAX_NODE_RECORD;
use crate::store::{Precondition, StateStore, StoreError, Version};

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
        /// Requested with `--force`: the supervisors of a healthy cluster discard it too (without it, a member of a
        /// healthy quorum refuses to wipe for this epoch). Absent in records written before it existed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        forced: bool,
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
    let Some(object) = store.get_bounded(&key, MAX_NODE_RECORD).await? else {
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
