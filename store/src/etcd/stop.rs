//! The asking side of `etcd/stop-requests/<instance-id>.json` (`ballast_state::termination::EtcdStopRequest`):
//! ask a control-plane node's own etcd supervisor to hand leadership away (when its member leads) and stop its
//! member before the instance goes, and wait, bounded, for its answer. The control-plane nodes' termination
//! handler (`nodeup/src/termination/`) and `rolling-update` (`ctl/src/roll/`) both ask through this one function;
//! the target's side (the watch and the answer) is nodeup's `termination::stop`.
//!
//! Two askers may ask for the same instance (on AWS, the roll terminates an instance and EventBridge also hands
//! its lifecycle event to a handler): a request already there is waited on, never written over, and one already
//! answered is the answer. Writing over it would reset the answer, and the target answers once.

use std::time::Duration;

use ballast_state::layout::ClusterPaths;
use ballast_state::limits::MAX_NODE_RECORD;
use ballast_state::termination::EtcdStopRequest;
use ballast_state::timestamp::now_rfc3339;

use crate::store::{Precondition, StateStore, StoreError};

/// How often the asker looks whether its request was answered: one small read each time. The target looks for
/// its request every 2 s and stops in about 1.5 s at worst, so an answer comes within a few of these.
pub const ANSWER_POLL: Duration = Duration::from_millis(500);

/// Why a stop request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum StopRequestError {
    /// The request could not be written (or read back).
    #[error("{key}: {source}")]
    Store {
        key: String,
        #[source]
        source: StoreError,
    },
    /// The request could not be made JSON.
    #[error("{key}: the request cannot be written as JSON: {source}")]
    Encode {
        key: String,
        #[source]
        source: serde_json::Error,
    },
    /// Someone deleted the request before its node answered (the other asker, done with it).
    #[error("{key} was deleted before its node answered")]
    Withdrawn { key: String },
    /// The node did not answer in time: it is gone, or its nodeup is down, or it does not watch its requests
    /// (it booted before the cluster turned termination handling on).
    #[error("{key}: no answer from the instance's node within {}s", waited.as_secs())]
    NoAnswer { key: String, waited: Duration },
}

/// Asks `instance_id`'s node to stop its etcd member, for `reason` (shown in its log), and waits at most `wait`
/// for the answer; returns the answer's outcome (`follower`, `handed over to <member id>`, `not running`, or why a
/// leader stopped without a handoff). The request stays in the store: [`withdraw`] it once the instance may go.
pub async fn request_stop(
    store: &StateStore,
    cluster: &str,
    instance_id: &str,
    reason: &str,
    wait: Duration,
) -> Result<String, StopRequestError> {
    request_stop_resuming_after(store, cluster, instance_id, reason, wait, None).await
}

/// [`request_stop`], asking the member to resume `resume_after` after its stop if its instance is still running
/// then (`None`: the target's default, `ballast_state::termination::DEFAULT_RESUME_AFTER_SECONDS`).
pub async fn request_stop_resuming_after(
    store: &StateStore,
    cluster: &str,
    instance_id: &str,
    reason: &str,
    wait: Duration,
    resume_after: Option<Duration>,
) -> Result<String, StopRequestError> {
    let key = ClusterPaths::new(cluster).etcd_stop_request(instance_id);
    let store_error = |source| StopRequestError::Store {
        key: key.clone(),
        source,
    };
    if read(store, &key).await.map_err(store_error)?.is_none() {
        let request = EtcdStopRequest {
            instance_id: instance_id.to_string(),
            reason: reason.to_string(),
            requested_at: now_rfc3339(),
            resume_after_seconds: resume_after
                .map(|d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX)),
            stopped: None,
        };
        let body = serde_json::to_vec(&request).map_err(|source| StopRequestError::Encode {
            key: key.clone(),
            source,
        })?;
        match store.put(&key, &body, &Precondition::MustNotExist).await {
            Ok(_) => {}
            // Another asker wrote it between the read and this write: that request is waited on.
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(store_error(e)),
        }
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match read(store, &key).await {
            Ok(Some(EtcdStopRequest {
                stopped: Some(stopped),
                ..
            })) => return Ok(stopped.outcome),
            Ok(Some(_)) => {}
            Ok(None) => return Err(StopRequestError::Withdrawn { key }),
            // A read that fails is tried again until the deadline: the answer may still come.
            Err(e) => tracing::warn!(key, error = %e, "reading the etcd stop request"),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StopRequestError::NoAnswer { key, waited: wait });
        }
        tokio::time::sleep(ANSWER_POLL).await;
    }
}

/// Removes the request once its instance may go (answered or not).
pub async fn withdraw(
    store: &StateStore,
    cluster: &str,
    instance_id: &str,
) -> Result<(), StopRequestError> {
    let key = ClusterPaths::new(cluster).etcd_stop_request(instance_id);
    store
        .delete(&key)
        .await
        .map_err(|source| StopRequestError::Store { key, source })
}

/// The request at `key`, if there; one that is not a request is treated as absent (and written over by
/// MustNotExist's conflict only if someone else writes it).
async fn read(store: &StateStore, key: &str) -> Result<Option<EtcdStopRequest>, StoreError> {
    let Some(object) = store.get_bounded(key, MAX_NODE_RECORD).await? else {
        return Ok(None);
    };
    match serde_json::from_slice(&object.data) {
        Ok(request) => Ok(Some(request)),
        Err(e) => {
            tracing::warn!(key, error = %e, "an unreadable etcd stop request");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use ballast_state::termination::EtcdStopped;

    use super::*;

    /// A file store in a directory made private from the start (the store refuses one others may open).
    async fn file_store() -> (tempfile::TempDir, StateStore) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .expect("tempdir");
        let url = format!("file://{}", dir.path().display());
        let store = StateStore::open(&url, Default::default())
            .await
            .expect("store");
        (dir, store)
    }

    const CLUSTER: &str = "demo.example.com";

    fn key(id: &str) -> String {
        ClusterPaths::new(CLUSTER).etcd_stop_request(id)
    }

    /// Plays the target node: once the request is there, answers it as its supervisor would.
    async fn answer_when_asked(store: StateStore, id: &str, outcome: &str) {
        loop {
            if let Ok(Some(mut request)) = read(&store, &key(id)).await {
                request.stopped = Some(EtcdStopped {
                    at: now_rfc3339(),
                    outcome: outcome.to_string(),
                });
                let body = serde_json::to_vec(&request).expect("json");
                store
                    .put(&key(id), &body, &Precondition::None)
                    .await
                    .expect("answer");
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn a_request_is_written_answered_by_its_node_and_withdrawn() {
        let (_dir, store) = file_store().await;
        let (outcome, ()) = tokio::join!(
            request_stop(
                &store,
                CLUSTER,
                "i-1",
                "rolling-update",
                Duration::from_secs(5)
            ),
            answer_when_asked(store.clone(), "i-1", "handed over to ab"),
        );
        assert_eq!(outcome.expect("answered"), "handed over to ab");
        let written = read(&store, &key("i-1"))
            .await
            .expect("read")
            .expect("there");
        assert_eq!(written.reason, "rolling-update");
        withdraw(&store, CLUSTER, "i-1").await.expect("withdraw");
        assert!(read(&store, &key("i-1")).await.expect("read").is_none());
    }

    #[tokio::test]
    async fn an_answered_request_of_another_asker_is_the_answer_and_is_not_written_over() {
        let (_dir, store) = file_store().await;
        let answered = EtcdStopRequest {
            instance_id: "i-2".into(),
            reason: "lifecycle action".into(),
            requested_at: "2026-12-03T00:00:00Z".into(),
            resume_after_seconds: None,
            stopped: Some(EtcdStopped {
                at: "2026-12-03T00:00:01Z".into(),
                outcome: "follower".into(),
            }),
        };
        let body = serde_json::to_vec(&answered).expect("json");
        store
            .put(&key("i-2"), &body, &Precondition::None)
            .await
            .expect("put");
        let outcome = request_stop(&store, CLUSTER, "i-2", "rolling-update", Duration::ZERO)
            .await
            .expect("the earlier answer");
        assert_eq!(outcome, "follower");
        let kept = read(&store, &key("i-2"))
            .await
            .expect("read")
            .expect("there");
        assert_eq!(kept, answered, "the answered request was written over");
    }

    #[tokio::test]
    async fn no_answer_within_the_wait_and_a_withdrawn_request_are_errors_naming_the_key() {
        let (_dir, store) = file_store().await;
        let error = request_stop(
            &store,
            CLUSTER,
            "i-3",
            "rolling-update",
            Duration::from_millis(600),
        )
        .await
        .expect_err("nobody answers");
        assert!(
            matches!(error, StopRequestError::NoAnswer { .. }),
            "{error}"
        );
        assert!(error.to_string().contains(&key("i-3")), "{error}");

        let withdrawer = store.clone();
        let (error, ()) = tokio::join!(
            request_stop(
                &store,
                CLUSTER,
                "i-4",
                "rolling-update",
                Duration::from_secs(5)
            ),
            async move {
                while read(&withdrawer, &key("i-4"))
                    .await
                    .expect("read")
                    .is_none()
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                withdraw(&withdrawer, CLUSTER, "i-4")
                    .await
                    .expect("withdraw");
            }
        );
        let error = error.expect_err("deleted before an answer");
        assert!(
            matches!(error, StopRequestError::Withdrawn { .. }),
            "{error}"
        );
    }
}
