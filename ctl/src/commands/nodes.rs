//! What `get instances` and `validate cluster` both judge about an instance: whether it runs its group's
//! current node spec, and what its nodeup reported.

use std::collections::BTreeMap;

use ballast_state::layout::ClusterPaths;
use ballast_state::report::NodeReport;
use ballast_state::store::{sha256_hex, StateStore, StoreError};

/// Whether an instance runs its group's current node spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecState {
    Current,
    /// Its node spec changed since it booted.
    Outdated,
    /// One side is not known (no tag, no report, or the group has no node spec yet).
    Unknown,
}

impl SpecState {
    /// Compares the node spec sha256 an instance has (its tag, or its report) with its group's current one.
    pub fn judge(have: Option<&str>, want: Option<&str>) -> Self {
        match (have, want) {
            (Some(have), Some(want)) if have == want => SpecState::Current,
            (Some(_), Some(_)) => SpecState::Outdated,
            _ => SpecState::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SpecState::Current => "current",
            SpecState::Outdated => "outdated",
            SpecState::Unknown => "unknown",
        }
    }
}

/// The sha256 of each group's current node spec (`nodes/<group>/spec.yaml`), read once per group.
pub struct NodeSpecs<'a> {
    store: &'a StateStore,
    paths: &'a ClusterPaths,
    hashes: BTreeMap<String, Option<String>>,
}

impl<'a> NodeSpecs<'a> {
    pub fn new(store: &'a StateStore, paths: &'a ClusterPaths) -> Self {
        NodeSpecs {
            store,
            paths,
            hashes: BTreeMap::new(),
        }
    }

    /// The group's current node spec's sha256; `None` when `update cluster` has not written one.
    pub async fn current(&mut self, group: &str) -> Result<Option<String>, StoreError> {
        if let Some(hash) = self.hashes.get(group) {
            return Ok(hash.clone());
        }
        let hash = self
            .store
            .get(&self.paths.node_spec(group))
            .await?
            .map(|o| sha256_hex(&o.data));
        self.hashes.insert(group.to_string(), hash.clone());
        Ok(hash)
    }
}

/// An instance's nodeup report (`reports/<instance-id>.json`), as found in the state store.
#[derive(Debug, Clone)]
pub enum ReportRead {
    /// nodeup has not written one (not finished its first run, or cannot reach the store).
    Missing,
    /// It is there but not a report this Ballast reads; the parse error.
    Unreadable(String),
    Found(Box<NodeReport>),
}

impl ReportRead {
    pub fn found(self) -> Option<NodeReport> {
        match self {
            ReportRead::Found(report) => Some(*report),
            _ => None,
        }
    }
}

/// Reads an instance's nodeup report.
pub async fn read_report(
    store: &StateStore,
    paths: &ClusterPaths,
    instance_id: &str,
) -> Result<ReportRead, StoreError> {
    Ok(match store.get(&paths.report(instance_id)).await? {
        None => ReportRead::Missing,
        Some(object) => match NodeReport::from_json(&object.data) {
            Ok(report) => ReportRead::Found(Box::new(report)),
            Err(e) => ReportRead::Unreadable(e.to_string()),
        },
    })
}

/// How many reports are read at once: one round trip per instance, but not one after the other (at 105
/// instances, in sequence, `validate cluster` spent most of its time waiting on S3).
const REPORT_READS_AT_ONCE: usize = 16;

/// Reads the reports of `instance_ids` concurrently (at most [`REPORT_READS_AT_ONCE`] in flight): instance id ->
/// what was found. The first store error fails the whole read.
pub async fn read_reports<'a>(
    store: &StateStore,
    paths: &ClusterPaths,
    instance_ids: impl IntoIterator<Item = &'a str>,
) -> Result<BTreeMap<String, ReportRead>, StoreError> {
    use futures_util::{stream, StreamExt, TryStreamExt};
    stream::iter(instance_ids.into_iter().map(|id| async move {
        read_report(store, paths, id)
            .await
            .map(|read| (id.to_string(), read))
    }))
    .buffer_unordered(REPORT_READS_AT_ONCE)
    .try_collect()
    .await
}

#[cfg(test)]
mod tests {
    use super::SpecState;

    #[test]
    fn spec_states() {
        assert_eq!(SpecState::judge(Some("a"), Some("a")), SpecState::Current);
        assert_eq!(SpecState::judge(Some("a"), Some("b")), SpecState::Outdated);
        assert_eq!(SpecState::judge(None, Some("b")), SpecState::Unknown);
        assert_eq!(SpecState::judge(Some("a"), None), SpecState::Unknown);
    }
}
