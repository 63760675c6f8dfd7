//! `etcd/cluster.json` read and written, only through conditional writes (its types: `ballast_state::etcd::record`).

use ballast_state::etcd::json_bytes;
use ballast_state::etcd::record::ClusterRecord;
use ballast_state::layout::ClusterPaths;
use ballast_state::limits::MAX_NODE_RECORD;

use crate::store::{Precondition, StateStore, StoreError, Version};

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
