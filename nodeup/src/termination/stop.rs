//! The target's side of a stop request: a control-plane node watches `etcd/stop-requests/<its instance id>.json`;
//! when the handler (on whichever control-plane node took the message) writes it, this node's own etcd
//! supervisor stops (a leader hands leadership to an up-to-date voter first: `ballast_etcd`'s bounded handoff),
//! keeping etcd's data and the member in the cluster for the replacement, and the outcome is written back into
//! the request, which tells the handler it may complete the lifecycle action.

use std::time::Duration;

use ballast_etcd::supervisor::StopOutcome;
use ballast_state::layout::ClusterPaths;
use ballast_state::limits::MAX_NODE_RECORD;
use ballast_state::termination::{EtcdStopRequest, EtcdStopped};
use ballast_store::store::{Precondition, StateStore};

/// How often a control-plane node looks for a stop request of its own: one small read each time.
pub const POLL: Duration = Duration::from_secs(2);

/// Watches this node's stop request.
pub struct StopWatch {
    store: StateStore,
    key: String,
}

/// What a stop's outcome is written as.
pub fn describe(outcome: &StopOutcome) -> String {
    match outcome {
        StopOutcome::NotRunning => "not running".to_string(),
        StopOutcome::Follower => "follower".to_string(),
        StopOutcome::HandedOver { to } => format!("handed over to {to:x}"),
        StopOutcome::NoHandoff { reason } => format!("leader stopped without a handoff: {reason}"),
    }
}

impl StopWatch {
    pub fn new(store: StateStore, cluster: &str, instance_id: &str) -> Self {
        StopWatch {
            store,
            key: ClusterPaths::new(cluster).etcd_stop_request(instance_id),
        }
    }

    /// Returns once a request for this node is there and not answered yet; never otherwise.
    pub async fn requested(&self) -> EtcdStopRequest {
        loop {
            match self.store.get_bounded(&self.key, MAX_NODE_RECORD).await {
                Ok(Some(object)) => match serde_json::from_slice::<EtcdStopRequest>(&object.data) {
                    Ok(request) if request.stopped.is_none() => {
                        tracing::debug!(reason = %request.reason, "etcd stop requested");
                        return request;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(key = %self.key, error = %e, "an unreadable stop request; ignored")
                    }
                },
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(key = %self.key, error = %e, "reading this node's stop request")
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Deletes the request once its member resumed: an answered request left there would be taken by the next
    /// asker for the answer to its own.
    pub async fn withdraw(&self) {
        if let Err(e) = self.store.delete(&self.key).await {
            tracing::warn!(key = %self.key, error = %e, "deleting the stop request of a resumed member");
        }
    }

    /// Writes the outcome back into the request (the handler waits for it).
    pub async fn acknowledge(&self, mut request: EtcdStopRequest, outcome: &StopOutcome) {
        request.stopped = Some(EtcdStopped {
            at: ballast_state::timestamp::now_rfc3339(),
            outcome: describe(outcome),
        });
        let body = match serde_json::to_vec(&request) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "serializing the stop request's answer");
                return;
            }
        };
        if let Err(e) = self.store.put(&self.key, &body, &Precondition::None).await {
            tracing::warn!(key = %self.key, error = %e, "writing the stop request's answer");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_is_seen_and_answered_through_a_real_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        // The file store keeps its objects in a directory only its owner may open.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .expect("chmod");
        let url = format!("file://{}", dir.path().display());
        let store = StateStore::open(&url, Default::default())
            .await
            .expect("store");
        let watch = StopWatch::new(store.clone(), "demo.example.com", "i-1");
        let key = ClusterPaths::new("demo.example.com").etcd_stop_request("i-1");
        let request = EtcdStopRequest {
            instance_id: "i-1".into(),
            reason: "lifecycle action".into(),
            requested_at: "2026-12-03T00:00:00Z".into(),
            resume_after_seconds: None,
            stopped: None,
        };
        store
            .put(
                &key,
                &serde_json::to_vec(&request).expect("json"),
                &Precondition::None,
            )
            .await
            .expect("put");
        let seen = tokio::time::timeout(Duration::from_secs(5), watch.requested())
            .await
            .expect("seen");
        assert_eq!(seen, request);
        watch
            .acknowledge(seen, &StopOutcome::HandedOver { to: 0xab })
            .await;
        let answered: EtcdStopRequest =
            serde_json::from_slice(&store.get(&key).await.expect("get").expect("there").data)
                .expect("json");
        assert_eq!(
            answered.stopped.map(|s| s.outcome),
            Some("handed over to ab".to_string())
        );
        // Answered: no longer a request to act on.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), watch.requested())
                .await
                .is_err()
        );
    }
}
