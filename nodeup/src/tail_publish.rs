//! The node's log tail in the state store (`logs/<writer>.json`, `ballast_state::log_tail`, docs/toolbox.md):
//! published at once when the boot fails, and on a control-plane node every [`PERIODIC`] and whenever a dump
//! asks (`log-tail-request.json`, polled every [`REQUEST_POLL`]). `<writer>` is the instance role session's
//! `aws:userid` (`<role-id>:<instance-id>`, from sts:GetCallerIdentity), the one key of `logs/` the node's IAM
//! policy lets it write; on a file store (no IAM) the instance id. Publishing never fails the node: a failure is
//! logged and the next round tries again.

use std::time::Duration;

use ballast_state::layout::ClusterPaths;
use ballast_state::limits::MAX_NODE_RECORD;
use ballast_state::log_tail::{NodeLogTail, TailReason, TailRequest};
use ballast_store::store::{Precondition, StateStore};

use crate::logtail::LogTail;

/// How often a control-plane node publishes its tail unasked.
pub const PERIODIC: Duration = Duration::from_secs(300);
/// How often a control-plane node looks for a dump's request. `ballast toolbox dump` waits up to
/// `--log-wait` (20 s by default) for the answers: four of these rounds and the write.
pub const REQUEST_POLL: Duration = Duration::from_secs(5);
/// A store or STS call that does not answer costs this round, not the node.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// Where and as whom this node publishes.
#[derive(Debug, Clone)]
pub struct TailPublisher {
    store: StateStore,
    paths: ClusterPaths,
    instance_id: String,
    writer: String,
}

impl TailPublisher {
    /// The publisher of instance `instance_id` in cluster `cluster`; on an S3 store it asks STS who the node's
    /// credentials are (the key its policy allows), falling back to the instance id (logged: IAM will then
    /// refuse the write, as it should a key that is not the node's).
    pub async fn new(store: StateStore, cluster: &str, instance_id: &str) -> Self {
        let writer = writer_for(&store, instance_id).await;
        Self::as_writer(store, cluster, instance_id, writer)
    }

    /// The publisher of instance `instance_id`, writing as `writer` ([`writer_for`], asked already).
    pub fn as_writer(store: StateStore, cluster: &str, instance_id: &str, writer: String) -> Self {
        TailPublisher {
            store,
            paths: ClusterPaths::new(cluster),
            instance_id: instance_id.to_string(),
            writer,
        }
    }

    /// The key this node writes.
    pub fn key(&self) -> String {
        self.paths.log_tail(&self.writer)
    }

    /// Writes the tail now.
    pub async fn publish(&self, tail: &LogTail, reason: TailReason) {
        let (published_at, published_unix) = ballast_state::timestamp::now_stamp();
        let document = NodeLogTail {
            instance_id: self.instance_id.clone(),
            reason,
            published_at,
            published_unix,
            nodeup: tail.lines(),
            etcd: tail.etcd_lines(),
        };
        let json = match document.to_json() {
            Ok(json) => json,
            Err(e) => {
                tracing::error!("serializing the log tail: {e}");
                return;
            }
        };
        let key = self.key();
        let put = self.store.put(&key, &json, &Precondition::None);
        match tokio::time::timeout(CALL_TIMEOUT, put).await {
            Ok(Ok(_)) => tracing::info!(key, ?reason, "log tail published"),
            Ok(Err(e)) => tracing::warn!(key, "publishing the log tail: {e}"),
            Err(_) => tracing::warn!(
                key,
                "publishing the log tail: timed out after {CALL_TIMEOUT:?}"
            ),
        }
    }

    /// A dump's request newer than `answered` (its `requestedUnix`), if one is in the store.
    async fn pending_request(&self, answered: i64) -> Option<i64> {
        let key = self.paths.log_tail_request();
        let read = self.store.get_bounded(&key, MAX_NODE_RECORD);
        let object = match tokio::time::timeout(CALL_TIMEOUT, read).await {
            Ok(Ok(Some(object))) => object,
            Ok(Ok(None)) | Err(_) => return None,
            Ok(Err(e)) => {
                tracing::debug!(key, "reading the log tail request: {e}");
                return None;
            }
        };
        let request: TailRequest = serde_json::from_slice(&object.data).ok()?;
        (request.requested_unix > answered).then_some(request.requested_unix)
    }

    /// A control-plane node's loop, for the life of nodeup: publishes at once, then every [`PERIODIC`], and
    /// whenever a new request appears.
    pub async fn keep_published(self, tail: LogTail) {
        let mut answered = 0;
        let mut last: Option<tokio::time::Instant> = None;
        loop {
            if let Some(requested) = self.pending_request(answered).await {
                self.publish(&tail, TailReason::Requested).await;
                answered = requested;
                last = Some(tokio::time::Instant::now());
            } else if last.is_none_or(|t| t.elapsed() >= PERIODIC) {
                self.publish(&tail, TailReason::Periodic).await;
                last = Some(tokio::time::Instant::now());
            }
            tokio::time::sleep(REQUEST_POLL).await;
        }
    }
}

/// Who this node writes as in `store`, the name of the keys bound to it (its report, its log tail, its audit
/// chunks): on S3
/// the instance role session's `aws:userid` as STS says it, the only such key its IAM policy lets it write; on
/// a file store (no IAM) the instance id.
pub async fn writer_for(store: &StateStore, instance_id: &str) -> String {
    match store {
        StateStore::S3(_) => writer_id(instance_id).await,
        StateStore::File(_) => instance_id.to_string(),
    }
}

/// The node's `aws:userid` as STS says it (`<role-id>:<instance-id>`), or the instance id when STS cannot say
/// or names another session (logged: IAM will then refuse the writes, as it should a key that is not the node's).
async fn writer_id(instance_id: &str) -> String {
    let config = ballast_store::sdk::load(None).await;
    let sts = aws_sdk_sts::Client::new(&config);
    match tokio::time::timeout(CALL_TIMEOUT, sts.get_caller_identity().send()).await {
        Ok(Ok(answer)) => match answer.user_id() {
            Some(id) if ballast_state::layout::instance_of_writer(id) == instance_id => {
                id.to_string()
            }
            other => {
                tracing::warn!(user_id = ?other, "STS names another session than this instance's: its log tail and audit chunks are keyed by the instance id");
                instance_id.to_string()
            }
        },
        Ok(Err(e)) => {
            tracing::warn!(
                "sts:GetCallerIdentity: {}: its log tail and audit chunks are keyed by the instance id",
                ballast_common::error_chain(&e)
            );
            instance_id.to_string()
        }
        Err(_) => {
            tracing::warn!(
                "sts:GetCallerIdentity timed out: its log tail and audit chunks are keyed by the instance id"
            );
            instance_id.to_string()
        }
    }
}
