//! Claims on `etcd/cluster.json`: the one bootstrap, the seed of a restored epoch, a re-seed, a forced new
//! cluster. Each is a conditional write; the supervisor that loses the race reads the winner's record next round.

use ballast_store::store::Version;

use super::{Supervisor, SupervisorError};
use crate::record::{now_stamp, write_record, ClusterRecord, Origin};

impl Supervisor {
    /// No cluster was ever decided: the record must not exist yet.
    pub(super) async fn claim_bootstrap(&mut self) -> Result<(), SupervisorError> {
        let record = self.new_record(1, Origin::Bootstrap);
        self.claim(record, None).await
    }

    /// The record names no seed (a restore): name this instance, keeping the epoch.
    pub(super) async fn claim_seed(&mut self) -> Result<(), SupervisorError> {
        let current = self.current_record("claim the seed")?.clone();
        let mut record = current.record.clone();
        record.seed = Some(self.me.instance_id.clone());
        self.claim(record, Some(current.version)).await
    }

    /// The seed died before anyone got its data: a new epoch of the same origin, seeded here.
    pub(super) async fn claim_reseed(&mut self) -> Result<(), SupervisorError> {
        let current = self.current_record("claim a re-seed")?.clone();
        let record = self.new_record(current.record.epoch + 1, current.record.origin.clone());
        self.claim(record, Some(current.version)).await
    }

    /// The majority is lost and this member has the most data: a new epoch that forces a new cluster here.
    pub(super) async fn claim_force_new_cluster(
        &mut self,
        raft_index: u64,
        lost_members: &[String],
    ) -> Result<(), SupervisorError> {
        let current = self.current_record("claim a forced new cluster")?.clone();
        let record = self.new_record(
            current.record.epoch + 1,
            Origin::ForceNewCluster {
                raft_index,
                lost_members: lost_members.to_vec(),
            },
        );
        tracing::warn!(raft_index, lost = ?lost_members, "majority lost: claiming a forced new cluster from local data");
        self.claim(record, Some(current.version)).await
    }

    fn new_record(&self, epoch: u64, origin: Origin) -> ClusterRecord {
        let (decided_at, _) = now_stamp();
        ClusterRecord {
            epoch,
            origin,
            seed: Some(self.me.instance_id.clone()),
            decided_at,
            decided_by: format!("etcd supervisor on {}", self.me.instance_id),
        }
    }

    /// Writes the record; a lost race is no error (the next round reads the winner's).
    async fn claim(
        &mut self,
        record: ClusterRecord,
        previous: Option<Version>,
    ) -> Result<(), SupervisorError> {
        match write_record(&self.store, &self.paths, &record, previous.as_ref()).await {
            Ok(written) => {
                tracing::info!(epoch = record.epoch, origin = ?record.origin, "won etcd/cluster.json");
                self.record = Some(written);
                Ok(())
            }
            Err(e) if e.is_conflict() => {
                tracing::info!("another supervisor changed etcd/cluster.json first");
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}
