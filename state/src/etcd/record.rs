//! `etcd/cluster.json`: the one decision every supervisor follows (the cluster's epoch, why it began, and who
//! seeds it). Changed only through conditional writes (`ballast_store::etcd::record`).

use serde::{Deserialize, Serialize};

/// Why an epoch began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Origin {
    /// A brand-new, empty cluster: the very first decision of the cluster.
    Bootstrap,
    /// The majority was lost; the survivor with the most data carries the cluster (rebuilt from a snapshot of
    /// its etcd).
    ForceNewCluster {
        /// The survivor's raft index when it won the epoch.
        raft_index: u64,
        /// The voting members whose instances EC2 confirmed terminated.
        lost_members: Vec<String>,
    },
    /// `ballast etcd restore-backup`: the cluster is rebuilt from a snapshot.
    Restore {
        backup_id: String,
        /// sha256 of the snapshot, checked again before it is restored.
        sha256: String,
        /// Requested with `--force`: the supervisors of a healthy cluster discard it too (without it, a member of a
        /// healthy quorum refuses to wipe for this epoch). Absent in records written before it existed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        forced: bool,
    },
}

/// `etcd/cluster.json`: the one decision every supervisor follows. It changes only through conditional writes, and
/// every change starts a new epoch (except a seed claiming an unseeded epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRecord {
    /// Grows by one with every new cluster (bootstrap, forced new cluster, restore).
    pub epoch: u64,
    pub origin: Origin,
    /// The instance that creates this epoch's cluster (from nothing, from its own data, or from the snapshot);
    /// `None` until a supervisor claims it (a restore is recorded without one).
    pub seed: Option<String>,
    /// RFC 3339 time of the decision.
    pub decided_at: String,
    /// Who decided, for operators (`instance i-...`, `ballast etcd restore-backup by user@host`).
    pub decided_by: String,
}

impl ClusterRecord {
    /// The `--initial-cluster-token` of this epoch: every epoch is a distinct etcd cluster.
    pub fn cluster_token(&self, cluster: &str) -> String {
        format!("ballast-{cluster}-epoch-{}", self.epoch)
    }
}
