//! What `get instances` and `validate cluster` both judge about an instance: whether it runs its group's
//! current node spec, and what its nodeup reported.

use std::collections::BTreeMap;

use ballast_state::keyset::KeysetName;
use ballast_state::keystore::{self, KeystoreError};
use ballast_state::layout::ClusterPaths;
use ballast_state::report::NodeReport;
use ballast_state::report_signature::{self, UntrustedReport};
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
    /// Signed by the node EC2 names for the instance (`ballast_state::report_signature`): trusted.
    Found(Box<NodeReport>),
    /// Readable, but not shown to be written by the instance's own node: its content is not used; why.
    Untrusted(UntrustedReport),
}

impl ReportRead {
    /// Judges a stored report against the instance EC2 reports for its key (`node_name`, its private DNS name),
    /// with the cluster's trusted Kubernetes CA certificates (a PEM bundle; or why they could not be read).
    pub fn judge(
        data: &[u8],
        ca_cert_pem: Result<&str, &str>,
        node_name: Option<&str>,
        now_unix: i64,
    ) -> Self {
        let stored = match report_signature::parse_stored(data) {
            Ok(stored) => stored,
            Err(e) => return ReportRead::Unreadable(e.to_string()),
        };
        let verified = match ca_cert_pem {
            Ok(ca) => report_signature::verify(&stored, ca, node_name, now_unix).map(|_| ()),
            Err(why) => Err(UntrustedReport::BadCa(why.to_string())),
        };
        match verified {
            Ok(()) => ReportRead::Found(Box::new(stored.report)),
            Err(why) => ReportRead::Untrusted(why),
        }
    }
}

/// Why a report is not trusted and what to do, in one sentence (for `validate cluster` and `get instances`).
pub fn untrusted_reason(why: &UntrustedReport) -> String {
    let advice = match why {
        UntrustedReport::Unsigned => {
            "if the instance runs a nodeup older than this ballast, replace it (`ballast rolling-update cluster`); \
             otherwise restart nodeup on it so that it writes a signed one"
        }
        UntrustedReport::BadCa(_) => {
            "restore the Kubernetes CA's keyset (keysets/kubernetes-ca.yaml) and certificates (pki/kubernetes-ca/) \
             from the bucket's versions"
        }
        _ => "another node or a copy wrote it: delete it and restart nodeup on the instance so that it writes its own",
    };
    format!("not trusted, not counted: {why}; {advice}")
}

/// What a report is checked against: the certificates of every Kubernetes CA the nodes trust (the keyset's
/// primary, next and trusted keys, docs/keys.md), read once per command; or why they could not be read.
pub struct ReportAnchor {
    ca_bundle: Result<String, String>,
}

impl ReportAnchor {
    pub async fn load(store: &StateStore, paths: &ClusterPaths) -> Result<Self, StoreError> {
        let bundle = keystore::ca_bundle(store, paths.cluster(), KeysetName::KubernetesCa).await;
        let ca_bundle = match bundle {
            Ok(bundle) => Ok(bundle),
            // The store failing is the command's failure; a missing or damaged object is the reports' problem.
            Err(KeystoreError::Store { source, .. }) => return Err(*source),
            Err(other) => Err(other.to_string()),
        };
        Ok(ReportAnchor { ca_bundle })
    }
}

/// Reads and judges an instance's nodeup report; `node_name` is the private DNS name EC2 gives the instance.
pub async fn read_report(
    store: &StateStore,
    paths: &ClusterPaths,
    anchor: &ReportAnchor,
    instance_id: &str,
    node_name: Option<&str>,
) -> Result<ReportRead, StoreError> {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    Ok(match store.get(&paths.report(instance_id)).await? {
        None => ReportRead::Missing,
        Some(object) => ReportRead::judge(
            &object.data,
            anchor.ca_bundle.as_deref().map_err(String::as_str),
            node_name,
            now,
        ),
    })
}

/// How many reports are read at once: one round trip per instance, but not one after the other (at 105
/// instances, in sequence, `validate cluster` spent most of its time waiting on S3).
const REPORT_READS_AT_ONCE: usize = 16;

/// Reads the reports of `instances` (instance id, its private DNS name as EC2 gives it) concurrently (at most
/// [`REPORT_READS_AT_ONCE`] in flight): instance id -> what was found. The first store error fails the whole read.
pub async fn read_reports<'a>(
    store: &StateStore,
    paths: &ClusterPaths,
    instances: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<BTreeMap<String, ReportRead>, StoreError> {
    use futures_util::{stream, StreamExt, TryStreamExt};
    let anchor = &ReportAnchor::load(store, paths).await?;
    stream::iter(instances.into_iter().map(|(id, node_name)| async move {
        read_report(store, paths, anchor, id, node_name)
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
