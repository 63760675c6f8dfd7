//! The health report each supervisor publishes (to the state store, and a copy on the node) for `ballast etcd
//! status` and for peers deciding a re-seed.

use std::time::Instant;

use super::Supervisor;
use crate::decide::{ClusterView, LocalEtcd, MemberView, Observation, Step};
use crate::record::{publish_health, HealthReport, RecordError};

impl Supervisor {
    /// Publishes when the step changed, on error, or at least every `publish_interval`.
    pub(super) async fn maybe_publish(
        &mut self,
        o: &Observation,
        (updated_at, updated_unix): (String, i64),
        step: &Step,
        error: Option<String>,
    ) -> Result<(), RecordError> {
        let described = step.describe();
        let error = error.or_else(|| self.last_error.clone());
        // What a reader acts on: the step, and this member's view of the cluster. A change of either publishes
        // at once, so a member that joined (or left) shows in every report within one round, not one
        // `publish_interval`.
        let published_view = format!("{described}\n{}", view_summary(o));
        let due = match &self.last_published {
            None => true,
            Some((at, last)) => {
                *last != published_view
                    || at.elapsed() >= self.config.publish_interval
                    || error.is_some()
            }
        };
        if !due {
            return Ok(());
        }
        let (status, running) = match o.local_etcd {
            LocalEtcd::Running(s) => (Some(s), true),
            LocalEtcd::Unresponsive => (None, true),
            LocalEtcd::Stopped => (None, false),
        };
        let view = o.cluster.as_ref();
        let healthy = view.is_some_and(ClusterView::is_healthy)
            && status.is_some_and(|s| view.is_some_and(|v| v.cluster_id == s.cluster_id));
        let label = |m: &MemberView| {
            if m.name.is_empty() {
                m.peer_url.clone()
            } else {
                m.name.clone()
            }
        };
        let report = HealthReport {
            instance_id: self.me.instance_id.clone(),
            peer_url: self.me.peer_url(),
            client_url: self.me.client_url(),
            updated_at,
            updated_unix,
            local_epoch: o.local_data.present.then_some(o.local_data.epoch).flatten(),
            running,
            member_id: status.map(|s| format!("{:x}", s.member_id)),
            is_learner: status.is_some_and(|s| s.is_learner),
            is_leader: status.is_some_and(|s| s.leader == s.member_id && s.leader != 0),
            raft_index: status.map_or(0, |s| s.raft_index),
            cluster_healthy: healthy,
            voting_members: view
                .map(|v| v.voters().map(label).collect())
                .unwrap_or_default(),
            learners: view
                .map(|v| {
                    v.members
                        .iter()
                        .filter(|m| m.is_learner)
                        .map(label)
                        .collect()
                })
                .unwrap_or_default(),
            last_step: described.clone(),
            last_error: error,
        };
        // The node's own copy first (operators on the instance, and a store that cannot be reached): best effort.
        if let Err(e) = self.local.write_health(&report) {
            tracing::warn!(error = %e, "writing the local etcd health report");
        }
        publish_health(&self.store, &self.paths, &report).await?;
        self.last_published = Some((Instant::now(), published_view));
        Ok(())
    }
}

/// The parts of an observation a health report shows that change with the membership: local etcd's member
/// id, learner and leader flags, and each member as voter or learner.
fn view_summary(o: &Observation) -> String {
    let local = match o.local_etcd {
        LocalEtcd::Running(s) => format!(
            "running {:x} learner={} leader={}",
            s.member_id,
            s.is_learner,
            s.leader == s.member_id && s.leader != 0
        ),
        LocalEtcd::Unresponsive => "unresponsive".to_string(),
        LocalEtcd::Stopped => "stopped".to_string(),
    };
    let members = o.cluster.as_ref().map(|v| {
        let mut members: Vec<String> = v
            .members
            .iter()
            .map(|m| format!("{}:{}:{}", m.name, m.peer_url, m.is_learner))
            .collect();
        members.sort();
        (v.is_healthy(), members)
    });
    format!("{local} {members:?}")
}
