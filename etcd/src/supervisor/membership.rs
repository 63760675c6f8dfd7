//! Membership changes, asked of the voters: join as a learner, promote, remove a member.

use std::future::Future;
use std::time::{Duration, Instant};

use etcd_client::MemberAddOptions;

use super::{Supervisor, SupervisorError, LOOK_AGAIN_SOON};
use crate::client::{is_already_done, is_transient, ClientError};
use crate::record::delete_health;

impl Supervisor {
    /// Adds this instance as a learner (it starts etcd in a later round, as `StartJoined`).
    pub(super) async fn add_learner(&mut self) -> Result<(), SupervisorError> {
        let client = self.voters_client("member add").await?;
        let url = self.me.peer_url();
        retry_transient("member add", || {
            let mut client = client.clone();
            let url = url.clone();
            async move {
                client
                    .member_add([url], Some(MemberAddOptions::new().with_is_learner()))
                    .await
                    .map(|_| ())
            }
        })
        .await?;
        tracing::info!(peer_url = %url, "added this instance as a learner");
        Ok(())
    }

    /// Promotes this learner to a voting member. A learner not yet in sync is refused: look again soon
    /// (`Some` requeue) rather than count it as a failure.
    pub(super) async fn promote(
        &mut self,
        member_id: u64,
    ) -> Result<Option<Duration>, SupervisorError> {
        let mut client = self.voters_client("member promote").await?;
        match client.member_promote(member_id).await {
            Ok(_) => {
                tracing::info!(
                    member = format!("{member_id:x}"),
                    "promoted to a voting member"
                );
                Ok(None)
            }
            Err(e) if is_already_done(&e) => Ok(None),
            Err(e) if is_transient(&e) => {
                tracing::debug!(error = %e, "learner not ready to promote yet");
                Ok(Some(LOOK_AGAIN_SOON))
            }
            Err(source) => Err(ClientError::Etcd {
                operation: "member promote",
                endpoints: "voters".to_string(),
                source,
            }
            .into()),
        }
    }

    /// Removes a member (its instance is terminated, or it is this instance's own member with lost data), and
    /// its published health report.
    pub(super) async fn remove_member(
        &mut self,
        member_id: u64,
        label: &str,
        reason: &str,
    ) -> Result<(), SupervisorError> {
        let client = self.voters_client("member remove").await?;
        retry_transient("member remove", || {
            let mut client = client.clone();
            async move { client.member_remove(member_id).await.map(|_| ()) }
        })
        .await?;
        tracing::warn!(member = %label, %reason, "removed etcd member");
        // Its health report goes with it (`ballast etcd status` shows members, not ghosts). Best effort: a report
        // left behind is only stale.
        if label != self.me.instance_id {
            if let Err(e) = delete_health(&self.store, &self.paths, label).await {
                tracing::warn!(member = %label, error = %e, "deleting the removed member's health report");
            }
        }
        Ok(())
    }
}

impl Supervisor {
    /// Points this instance's member (its data re-attached here on its volume) at this instance's peer URL.
    pub(super) async fn update_peer_url(&mut self, member_id: u64) -> Result<(), SupervisorError> {
        let client = self.voters_client("member update").await?;
        let url = self.me.peer_url();
        retry_transient("member update", || {
            let mut client = client.clone();
            let url = url.clone();
            async move { client.member_update(member_id, [url]).await.map(|_| ()) }
        })
        .await?;
        tracing::info!(member = format!("{member_id:x}"), peer_url = %url, "moved this instance's member here");
        Ok(())
    }
}

/// Retries a membership change on transient refusals ("unhealthy cluster" lasts up to ~5 s after a leader
/// change or a removal) for up to 10 s; "already done" counts as done.
async fn retry_transient<F, Fut>(operation: &'static str, mut f: F) -> Result<(), SupervisorError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), etcd_client::Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match f().await {
            Ok(()) => return Ok(()),
            Err(e) if is_already_done(&e) => return Ok(()),
            Err(e) if is_transient(&e) && Instant::now() < deadline => {
                tracing::debug!(operation, error = %e, "retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(source) => {
                return Err(ClientError::Etcd {
                    operation,
                    endpoints: "voters".to_string(),
                    source,
                }
                .into())
            }
        }
    }
}
