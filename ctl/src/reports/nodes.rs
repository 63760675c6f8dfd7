//! What `get instances` and `validate cluster` both judge about an instance: whether it runs its group's
//! current node spec, and what its nodeup reported.

use std::collections::{BTreeMap, HashMap};

use ballast_state::digest::sha256_hex;
use ballast_state::keyset::KeysetName;
use ballast_state::layout::{instance_of_writer, writer_of_key, ClusterPaths};
use ballast_state::limits::MAX_REPORT;
use ballast_state::report::NodeReport;
use ballast_state::report_signature::{self, UntrustedReport};
use ballast_store::keystore::{self, KeystoreError};
use ballast_store::store::{StateStore, StoreError, StoredObject, Version};

use super::cache::ReportCache;

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

    /// Reads the node specs of `groups` at once (concurrently), for [`NodeSpecs::current`] to answer from.
    pub async fn prefetch(&mut self, groups: &[&str]) -> Result<(), StoreError> {
        let (store, paths) = (self.store, self.paths);
        let read = futures_util::future::try_join_all(groups.iter().map(|group| async move {
            let hash = store
                .get(&paths.node_spec(group))
                .await?
                .map(|o| sha256_hex(&o.data));
            Ok::<_, StoreError>((group.to_string(), hash))
        }))
        .await?;
        self.hashes.extend(read);
        Ok(())
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

/// An instance's nodeup report, as found in the state store (`reports/<writer>.json`, named by the node that
/// wrote it: `ballast_state::layout::ClusterPaths::report`), with the key it was read from.
#[derive(Debug, Clone)]
pub enum ReportRead {
    /// nodeup has not written one (not finished its first run, or cannot reach the store).
    Missing,
    /// It is there but not a report this Ballast reads; the parse error.
    Unreadable { key: String, why: String },
    /// Signed by the node EC2 names for the instance (`ballast_state::report_signature`): trusted.
    Found {
        key: String,
        report: Box<NodeReport>,
    },
    /// Readable, but not shown to be written by the instance's own node: its content is not used; why.
    Untrusted { key: String, why: UntrustedReport },
}

impl ReportRead {
    /// Judges the report stored under `key` against the instance EC2 reports for it (`node_name`, its private
    /// DNS name), with the cluster's trusted Kubernetes CA certificates (a PEM bundle; or why they could not be
    /// read).
    pub fn judge(
        key: &str,
        data: &[u8],
        ca_cert_pem: Result<&str, &str>,
        node_name: Option<&str>,
        now_unix: i64,
    ) -> Self {
        let key = key.to_string();
        let stored = match report_signature::parse_stored(data) {
            Ok(stored) => stored,
            Err(e) => {
                return ReportRead::Unreadable {
                    key,
                    why: e.to_string(),
                }
            }
        };
        let verified = match ca_cert_pem {
            Ok(ca) => report_signature::verify(&stored, ca, node_name, now_unix).map(|_| ()),
            Err(why) => Err(UntrustedReport::BadCa(why.to_string())),
        };
        match verified {
            Ok(()) => ReportRead::Found {
                key,
                report: Box::new(stored.report),
            },
            Err(why) => ReportRead::Untrusted { key, why },
        }
    }

    /// Of two reads of one instance's reports (under two writers' keys: its role was replaced while it ran),
    /// the one to go by: a trusted report before an untrusted one before an unreadable one, and of two trusted
    /// ones the later finished.
    fn better(self, other: ReportRead) -> ReportRead {
        let rank = |read: &ReportRead| match read {
            ReportRead::Missing => 0,
            ReportRead::Unreadable { .. } => 1,
            ReportRead::Untrusted { .. } => 2,
            ReportRead::Found { .. } => 3,
        };
        match (&self, &other) {
            (ReportRead::Found { report: a, .. }, ReportRead::Found { report: b, .. }) => {
                if finished_unix(b) > finished_unix(a) {
                    other
                } else {
                    self
                }
            }
            _ if rank(&other) > rank(&self) => other,
            _ => self,
        }
    }
}

/// When a report's run finished (Unix seconds; `i64::MIN` when it does not say in RFC 3339).
fn finished_unix(report: &NodeReport) -> i64 {
    time::OffsetDateTime::parse(
        &report.finished_at,
        &time::format_description::well_known::Rfc3339,
    )
    .map_or(i64::MIN, |t| t.unix_timestamp())
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

/// How many reports are read at once: one round trip per instance, but not one after the other (at 105
/// instances, in sequence, `validate cluster` spent most of its time waiting on S3).
const REPORT_READS_AT_ONCE: usize = 16;

/// Reads the reports of `instances` (instance id, its private DNS name as EC2 gives it) once: instance id ->
/// what was found. The first store error fails the whole read.
pub async fn read_reports<'a>(
    store: &StateStore,
    paths: &ClusterPaths,
    instances: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<BTreeMap<String, ReportRead>, StoreError> {
    ReportReader::new(store.clone(), paths.clone())
        .with_cache(ReportCache::from_env(&store.url(), paths.cluster()))
        .look(instances)
        .await
}

/// Reads nodeup reports again and again (`validate cluster --wait`'s loop) without reading one that has not
/// changed: each look lists the reports' versions (one call per 1,000 reports), reads only the reports that
/// are new or changed since the previous look, and judges every report afresh (its signature, its
/// certificate's validity now, the CA bundle read now), so keeping the bytes never keeps a verdict. With a
/// [`ReportCache`], what earlier runs read counts as read before.
///
/// A report's key is named by its writer (`<role-id>:<instance-id>`, the one key the node's IAM policy lets it
/// write), so the listing is also how an instance's report is found: every key whose writer names the instance.
pub struct ReportReader {
    store: StateStore,
    paths: ClusterPaths,
    /// What earlier looks read, by writer.
    read_before: HashMap<String, StoredObject>,
    /// Reports refused unread at the last look, larger than [`MAX_REPORT`]: writer -> why.
    too_large: HashMap<String, String>,
    /// The writers of each instance's reports at the last look, by instance id.
    writers: HashMap<String, Vec<String>>,
    cache: Option<ReportCache>,
}

impl ReportReader {
    pub fn new(store: StateStore, paths: ClusterPaths) -> Self {
        ReportReader {
            store,
            paths,
            read_before: HashMap::new(),
            too_large: HashMap::new(),
            writers: HashMap::new(),
            cache: None,
        }
    }

    /// Keeps what it reads in `cache` too, and starts from what is there.
    pub fn with_cache(mut self, cache: Option<ReportCache>) -> Self {
        self.cache = cache;
        self
    }

    /// The reports of `instances` (instance id, its private DNS name as EC2 gives it) as they are now: instance
    /// id -> what was found. The first store error fails the whole look.
    pub async fn look<'a>(
        &mut self,
        instances: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<BTreeMap<String, ReportRead>, StoreError> {
        let instances: Vec<(&str, Option<&str>)> = instances.into_iter().collect();
        let ids: Vec<&str> = instances.iter().map(|(id, _)| *id).collect();
        let anchor = self.fetch(&ids).await?;
        Ok(self.judge(anchor.as_ref(), instances))
    }

    /// The reading half of [`ReportReader::look`]: brings the reports of `ids` up to date (and reads the CAs to
    /// judge them by; `None` for no instance, when nothing is read at all).
    pub async fn fetch(&mut self, ids: &[&str]) -> Result<Option<ReportAnchor>, StoreError> {
        use futures_util::{stream, StreamExt, TryStreamExt};
        if ids.is_empty() {
            // Nothing to read (a roll's look at a group whose every report is known): not even the CAs.
            return Ok(None);
        }
        let anchor = ReportAnchor::load(&self.store, &self.paths).await?;
        let prefix = self.paths.reports_prefix();
        let listed = self.store.list_versions(&prefix).await?;
        // writer -> its report's version, for every report listed.
        let versions: HashMap<&str, &Version> = listed
            .iter()
            .filter_map(|(key, version)| Some((writer_of_key(key, &prefix)?, version)))
            .collect();
        // A report gone from the listing is gone: nothing read before counts.
        self.read_before
            .retain(|w, _| versions.contains_key(w.as_str()));
        self.too_large
            .retain(|w, _| versions.contains_key(w.as_str()));
        if let Some(cache) = &self.cache {
            cache.retain(|w| versions.contains_key(w));
        }
        let wanted: std::collections::HashSet<&str> = ids.iter().copied().collect();
        self.writers.clear();
        let mut to_read = Vec::new();
        for (writer, version) in &versions {
            let instance = instance_of_writer(writer);
            if !wanted.contains(instance) {
                continue;
            }
            self.writers
                .entry(instance.to_string())
                .or_default()
                .push(writer.to_string());
            if !self.read_before.contains_key(*writer) {
                if let Some(kept) = self.cache.as_ref().and_then(|c| c.load(writer)) {
                    self.read_before.insert(writer.to_string(), kept);
                }
            }
            // Read it unless it is the version read before (in this run, or by an earlier one).
            if self.read_before.get(*writer).map(|o| &o.version) != Some(*version) {
                to_read.push(writer.to_string());
            }
        }
        let (store, paths) = (&self.store, &self.paths);
        // A report is the node's word: each is read only up to the limit, and one that is larger is that
        // instance's problem (shown as unreadable), not the command's.
        let fresh: Vec<(String, Result<Option<StoredObject>, String>)> =
            stream::iter(to_read.into_iter().map(|writer| async move {
                match store.get_bounded(&paths.report(&writer), MAX_REPORT).await {
                    Ok(read) => Ok((writer, Ok(read))),
                    Err(e @ StoreError::TooLarge { .. }) => Ok((writer, Err(e.to_string()))),
                    Err(e) => Err(e),
                }
            }))
            .buffer_unordered(REPORT_READS_AT_ONCE)
            .try_collect()
            .await?;
        for (writer, read) in fresh {
            self.too_large.remove(&writer);
            match read {
                Err(why) => {
                    if let Some(cache) = &self.cache {
                        cache.forget(&writer);
                    }
                    self.read_before.remove(&writer);
                    self.too_large.insert(writer, why);
                }
                Ok(Some(object)) => {
                    if let Some(cache) = &self.cache {
                        cache.save(&writer, &object);
                    }
                    self.read_before.insert(writer, object);
                }
                // Deleted since the listing.
                Ok(None) => {
                    if let Some(cache) = &self.cache {
                        cache.forget(&writer);
                    }
                    self.read_before.remove(&writer);
                }
            }
        }
        Ok(Some(anchor))
    }

    /// The judging half of [`ReportReader::look`]: each of `instances` (id, its private DNS name as EC2 gives
    /// it) as last fetched, judged now against `anchor`.
    pub fn judge<'a>(
        &self,
        anchor: Option<&ReportAnchor>,
        instances: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> BTreeMap<String, ReportRead> {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let ca = match anchor {
            Some(anchor) => anchor.ca_bundle.as_deref().map_err(String::as_str),
            None => Err("the Kubernetes CA certificates were not read"),
        };
        instances
            .into_iter()
            .map(|(id, node_name)| {
                let writers = self.writers.get(id).map(Vec::as_slice).unwrap_or_default();
                let read = writers
                    .iter()
                    .map(|writer| {
                        let key = self.paths.report(writer);
                        match (self.read_before.get(writer), self.too_large.get(writer)) {
                            (Some(object), _) => {
                                ReportRead::judge(&key, &object.data, ca, node_name, now)
                            }
                            (None, Some(why)) => ReportRead::Unreadable {
                                key,
                                why: why.clone(),
                            },
                            (None, None) => ReportRead::Missing,
                        }
                    })
                    .fold(ReportRead::Missing, ReportRead::better);
                (id.to_string(), read)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{ReportCache, ReportRead, ReportReader, SpecState};
    use ballast_state::layout::ClusterPaths;
    use ballast_store::store::{Precondition, StateStore, StoreOptions, StoredObject};

    /// A file store under `dir`, and a writer of any report of cluster `c1` in it.
    async fn store_in(dir: &std::path::Path) -> (StateStore, ClusterPaths) {
        let url = format!("file://{}", dir.join("state").display());
        let store = StateStore::open(&url, StoreOptions::default())
            .await
            .expect("file store");
        (store, ClusterPaths::new("c1"))
    }

    async fn put(store: &StateStore, paths: &ClusterPaths, writer: &str, body: &[u8]) {
        store
            .put(&paths.report(writer), body, &Precondition::None)
            .await
            .expect("put report");
    }

    fn unreadable(read: Option<&ReportRead>) -> String {
        match read {
            Some(ReportRead::Unreadable { why, .. }) => why.clone(),
            other => panic!("expected an unreadable report, got {other:?}"),
        }
    }

    /// A reader kept across looks sees every change: a new report, a rewritten one, a deleted one; and a
    /// report that did not change reads the same.
    #[tokio::test]
    async fn a_kept_reader_sees_every_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("file://{}", dir.path().join("state").display());
        let store = StateStore::open(&url, StoreOptions::default())
            .await
            .expect("file store");
        let paths = ClusterPaths::new("c1");
        let put = |id: &'static str, body: &'static [u8]| {
            let (store, key) = (store.clone(), paths.report(id));
            async move {
                store
                    .put(&key, body, &Precondition::None)
                    .await
                    .expect("put report")
            }
        };
        let mut reader = ReportReader::new(store.clone(), paths.clone());
        let ids = [("i-a", None), ("i-b", None)];

        put("i-a", b"[]").await;
        let first = reader.look(ids).await.expect("first look");
        let a_before = unreadable(first.get("i-a"));
        assert!(matches!(first.get("i-b"), Some(ReportRead::Missing)));

        put("i-b", b"[]").await;
        put("i-a", b"\"rewritten\"").await;
        let second = reader.look(ids).await.expect("second look");
        let a_after = unreadable(second.get("i-a"));
        assert_ne!(a_before, a_after, "the rewritten report was not read again");
        assert_eq!(unreadable(second.get("i-b")), a_before, "the new report");

        store.delete(&paths.report("i-a")).await.expect("delete");
        let third = reader.look(ids).await.expect("third look");
        assert!(matches!(third.get("i-a"), Some(ReportRead::Missing)));
        assert_eq!(unreadable(third.get("i-b")), a_before, "unchanged");
        // One instance alone is found and read as it is now.
        put("i-a", b"[]").await;
        let single = reader.look([("i-a", None)]).await.expect("one");
        assert_eq!(unreadable(single.get("i-a")), a_before);
    }

    /// A report is found by its writer's name (`<role-id>:<instance-id>`): each instance gets the reports its
    /// own writers wrote, never another instance's, and of two writers of one instance (its role replaced while
    /// it ran) the trusted report before the unreadable one, and of two trusted ones the later.
    #[tokio::test]
    async fn an_instances_report_is_found_by_its_writers_name() {
        use ballast_state::report::NodeReport;
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, paths) = store_in(dir.path()).await;
        let put = |writer: &'static str, body: Vec<u8>| {
            let (store, paths) = (store.clone(), paths.clone());
            async move { put(&store, &paths, writer, &body).await }
        };
        let report = |finished: &str| {
            let mut report = NodeReport::new("i-a", "0.1.0", "2026-01-01T00:00:00Z");
            report.finished_at = finished.to_string();
            report.to_json().expect("json")
        };
        put("AROAOLD:i-a", b"{".to_vec()).await;
        put("AROANODES:i-b", report("2026-01-01T00:00:09Z")).await;
        // A key that names no writer directly under the prefix is no one's report.
        put("x/i-a", report("2026-01-01T00:00:09Z")).await;
        let mut reader = ReportReader::new(store.clone(), paths.clone());
        let ids = [("i-a", None), ("i-c", None)];
        let first = reader.look(ids).await.expect("look");
        // i-a's only report is the unreadable one, shown under its key.
        match first.get("i-a") {
            Some(ReportRead::Unreadable { key, .. }) => {
                assert_eq!(key, &paths.report("AROAOLD:i-a"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(first.get("i-c"), Some(ReportRead::Missing)));
        assert!(!first.contains_key("i-b"), "only what was asked is judged");

        // A readable report by a second writer of i-a goes before the unreadable one; without CA certificates
        // it is untrusted, and that is what is shown, under its own key.
        put("AROANEW:i-a", report("2026-01-01T00:00:05Z")).await;
        let second = reader.look(ids).await.expect("look");
        match second.get("i-a") {
            Some(ReportRead::Untrusted { key, .. }) => {
                assert_eq!(key, &paths.report("AROANEW:i-a"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn of_two_trusted_reports_the_later_finished_is_gone_by() {
        use ballast_state::report::NodeReport;
        let found = |key: &str, finished: &str| {
            let mut report = NodeReport::new("i-a", "0.1.0", "2026-01-01T00:00:00Z");
            report.finished_at = finished.to_string();
            ReportRead::Found {
                key: key.to_string(),
                report: Box::new(report),
            }
        };
        let key_of = |read: ReportRead| match read {
            ReportRead::Found { key, .. } => key,
            other => panic!("{other:?}"),
        };
        let early = || found("a", "2026-01-01T00:00:05Z");
        let late = || found("b", "2026-01-01T00:01:00+00:00");
        assert_eq!(key_of(early().better(late())), "b");
        assert_eq!(key_of(late().better(early())), "b");
        let untrusted = || ReportRead::Untrusted {
            key: "c".into(),
            why: ballast_state::report_signature::UntrustedReport::Unsigned,
        };
        assert_eq!(key_of(untrusted().better(early())), "a");
        assert_eq!(key_of(early().better(untrusted())), "a");
        assert_eq!(key_of(ReportRead::Missing.better(early())), "a");
    }

    /// A later run starts from what an earlier one kept: it does not read a report whose version is the one
    /// kept (shown by changing the kept bytes: the later run judges those), and reads one whose version moved.
    #[tokio::test]
    async fn a_later_run_reads_only_what_changed_since_an_earlier_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("file://{}", dir.path().join("state").display());
        let store = StateStore::open(&url, StoreOptions::default())
            .await
            .expect("file store");
        let paths = ClusterPaths::new("c1");
        let cache = ReportCache::under(&dir.path().join("cache"), &url, "c1")
            .expect("a valid cluster name");
        for id in ["i-a", "i-b"] {
            store
                .put(&paths.report(id), b"[]", &Precondition::None)
                .await
                .expect("put");
        }
        let ids = [("i-a", None), ("i-b", None)];
        let earlier = ReportReader::new(store.clone(), paths.clone())
            .with_cache(Some(cache.clone()))
            .look(ids)
            .await
            .expect("earlier run");
        let seen = unreadable(earlier.get("i-a"));

        // The kept bytes of both change behind the reader's back; the store changes only i-b.
        for id in ["i-a", "i-b"] {
            let kept = cache.load(id).expect("kept");
            cache.save(
                id,
                &StoredObject {
                    data: b"\"kept\"".to_vec(),
                    version: kept.version,
                },
            );
        }
        store
            .put(&paths.report("i-b"), b"{", &Precondition::None)
            .await
            .expect("rewrite i-b");
        let later = ReportReader::new(store.clone(), paths.clone())
            .with_cache(Some(cache.clone()))
            .look(ids)
            .await
            .expect("later run");
        let a = unreadable(later.get("i-a"));
        let b = unreadable(later.get("i-b"));
        assert_ne!(
            a, seen,
            "i-a was read again although its version did not move"
        );
        assert_ne!(b, a, "i-b's version moved: it must be read from the store");
        assert_eq!(
            cache.load("i-b").map(|o| o.data),
            Some(b"{".to_vec()),
            "what was read is kept"
        );

        // A report gone from the store is gone from the cache.
        store.delete(&paths.report("i-a")).await.expect("delete");
        let gone = ReportReader::new(store, paths)
            .with_cache(Some(cache.clone()))
            .look(ids)
            .await
            .expect("after the delete");
        assert!(matches!(gone.get("i-a"), Some(ReportRead::Missing)));
        assert!(cache.load("i-a").is_none());
    }

    /// Any worker may write any report: one larger than the limit is that instance's report, unreadable, and
    /// named with the limit; it is not loaded, the others are still read, and the look does not fail.
    #[tokio::test]
    async fn a_report_over_the_limit_is_refused_unread_and_the_others_still_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("file://{}", dir.path().join("state").display());
        let store = StateStore::open(&url, StoreOptions::default())
            .await
            .expect("file store");
        let paths = ClusterPaths::new("c1");
        let limit = ballast_state::limits::MAX_REPORT.bytes;
        let huge = vec![b' '; usize::try_from(limit + 1).expect("fits")];
        store
            .put(&paths.report("i-huge"), &huge, &Precondition::None)
            .await
            .expect("put");
        store
            .put(&paths.report("i-small"), b"[]", &Precondition::None)
            .await
            .expect("put");
        let mut reader = ReportReader::new(store.clone(), paths.clone());
        for ids in [
            vec![("i-huge", None), ("i-small", None)],
            vec![("i-huge", None)],
        ] {
            let read = reader.look(ids.clone()).await.expect("the look succeeds");
            let why = unreadable(read.get("i-huge"));
            assert!(
                why.contains(&format!(
                    "{} is larger than {limit} bytes, the most Ballast reads of a node's boot report",
                    dir.path().join("state").join(paths.report("i-huge")).display()
                )),
                "{why}"
            );
            if ids.len() > 1 {
                assert!(!unreadable(read.get("i-small")).contains("larger than"));
            }
        }
        // Rewritten small, it is read again.
        store
            .put(&paths.report("i-huge"), b"[]", &Precondition::None)
            .await
            .expect("put");
        let read = reader.look([("i-huge", None)]).await.expect("look");
        assert!(!unreadable(read.get("i-huge")).contains("larger than"));
    }

    #[test]
    fn spec_states() {
        assert_eq!(SpecState::judge(Some("a"), Some("a")), SpecState::Current);
        assert_eq!(SpecState::judge(Some("a"), Some("b")), SpecState::Outdated);
        assert_eq!(SpecState::judge(None, Some("b")), SpecState::Unknown);
        assert_eq!(SpecState::judge(Some("a"), None), SpecState::Unknown);
    }
}
