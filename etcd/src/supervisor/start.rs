//! Steps that (re)start the local etcd: seeding an epoch (empty, or from a backup), forcing a new cluster after
//! the majority is lost, restarting on existing data, starting as a member just added, and wiping.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Supervisor, SupervisorError};
use crate::backup::{self, BackupError, LocalSnapshot};
use crate::process::{EtcdProcess, StartMode};
use crate::record::{ClusterRecord, Origin};

/// Rounds that try to snapshot the local etcd before a forced new cluster falls back to `--force-new-cluster`.
const FORCE_SNAPSHOT_ATTEMPTS: u32 = 3;
/// One such snapshot.
const FORCE_SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(60);

impl Supervisor {
    /// This instance seeds the record's epoch: a one-member cluster, empty (bootstrap) or from a backup.
    pub(super) async fn seed(&mut self) -> Result<(), SupervisorError> {
        let record = self.current_record("seed the cluster")?.record.clone();
        self.stop_etcd().await;
        self.local.wipe()?;
        // `seeded` is recorded once etcd has data of this epoch (see `observe`), not here: an etcd that never
        // started (a port in use, a bad flag) served no one, so no one can have joined it, and seeding again is
        // the only way forward. Once it has data, the epoch is never seeded twice here.
        match &record.origin {
            Origin::Restore {
                backup_id, sha256, ..
            } => self.seed_from_backup(&record, backup_id, sha256).await,
            _ => {
                let spec = self.start_spec(&record, self.only_me(), StartMode::New);
                self.local.set_epoch(record.epoch)?;
                self.start(&spec)
            }
        }
    }

    /// Restores the backup the record names (checked against the record's sha256) into the data dir, then
    /// starts etcd on it.
    async fn seed_from_backup(
        &mut self,
        record: &ClusterRecord,
        backup_id: &str,
        sha256: &str,
    ) -> Result<(), SupervisorError> {
        let (metadata, data) =
            backup::fetch_verified_snapshot(&self.store, &self.paths, backup_id).await?;
        if metadata.sha256 != sha256 {
            return Err(BackupError::Corrupted {
                id: backup_id.to_string(),
                expected: sha256.to_string(),
                actual: metadata.sha256,
            }
            .into());
        }
        let file = self.config.state_dir.join("restore.db");
        backup::write_snapshot_file(&file, &data).map_err(|source| {
            SupervisorError::SnapshotFile {
                path: file.clone(),
                source,
            }
        })?;
        let spec = self.start_spec(record, self.only_me(), StartMode::Existing);
        // Restored beside the data dir, the epoch written, then swapped in: data without its epoch is never
        // wiped (`decide` waits for an operator), so a crash must not leave the restored data unlabelled.
        let staging = self.local.staging_data_dir();
        self.local
            .restore_snapshot_into(&self.config.etcdctl_binary, &file, &spec, &staging)
            .await?;
        self.local.set_epoch(record.epoch)?;
        self.local.replace_data_dir(&staging)?;
        // The snapshot is in the data dir now; a leftover copy is only disk space.
        let _ = std::fs::remove_file(&file);
        tracing::warn!(backup = %backup_id, epoch = record.epoch, "restored etcd from a backup");
        self.start(&spec)
    }

    /// This instance seeds a forced epoch: a one-member cluster rebuilt from a snapshot of its own etcd, or
    /// from its data dir with `--force-new-cluster` when that etcd does not run or gives no snapshot.
    pub(super) async fn force_new_cluster(&mut self) -> Result<(), SupervisorError> {
        let record = self.current_record("force a new cluster")?.record.clone();
        // `--force-new-cluster` keeps only the WAL up to the commit index etcd last persisted, which lags what it
        // applied: a write this member applied (and acknowledged, as part of the lost majority) could be
        // dropped. A snapshot of its backend holds everything it applied, and the maintenance API serves it
        // without a quorum: rebuild the one-member cluster from that.
        let running = self.process.as_mut().is_some_and(EtcdProcess::is_running);
        let snapshot = if running {
            match self.snapshot_for_force().await {
                Ok(s) => Some(s),
                Err(e) if self.force_snapshot_failures < FORCE_SNAPSHOT_ATTEMPTS => {
                    self.force_snapshot_failures += 1;
                    return Err(e);
                }
                Err(e) => {
                    tracing::warn!(error = %e, attempts = self.force_snapshot_failures, "no snapshot from the local etcd: falling back to --force-new-cluster on its data");
                    None
                }
            }
        } else {
            None
        };
        self.force_snapshot_failures = 0;
        self.stop_etcd().await;
        self.local.set_seeded(record.epoch)?;
        match snapshot {
            Some((file, taken)) => self.force_from_snapshot(&record, &file, &taken).await,
            None => {
                self.local.set_epoch(record.epoch)?;
                let spec = self.start_spec(&record, self.only_me(), StartMode::ForceNewCluster);
                tracing::warn!(
                    epoch = record.epoch,
                    "forcing a new cluster from local data (--force-new-cluster)"
                );
                self.start(&spec)
            }
        }
    }

    /// Rebuilds the data dir from the local snapshot (in a staging dir, swapped in whole) and starts etcd on it.
    async fn force_from_snapshot(
        &mut self,
        record: &ClusterRecord,
        file: &Path,
        taken: &LocalSnapshot,
    ) -> Result<(), SupervisorError> {
        let spec = self.start_spec(record, self.only_me(), StartMode::Existing);
        let staging = self.local.staging_data_dir();
        self.local
            .restore_snapshot_into(&self.config.etcdctl_binary, file, &spec, &staging)
            .await?;
        self.local.replace_data_dir(&staging)?;
        // The snapshot is in the data dir now; a leftover copy is only disk space.
        let _ = std::fs::remove_file(file);
        self.local.set_epoch(record.epoch)?;
        tracing::warn!(
            epoch = record.epoch,
            revision = taken.revision,
            raft_index = taken.raft_index,
            "forcing a new cluster from a snapshot of the local etcd"
        );
        self.start(&spec)
    }

    /// Snapshots the local etcd (which has lost its quorum) into `<state_dir>/force-new-cluster.db`.
    async fn snapshot_for_force(&mut self) -> Result<(PathBuf, LocalSnapshot), SupervisorError> {
        let file = self.config.state_dir.join("force-new-cluster.db");
        let mut client = self.client_for(&self.me.client_url()).await?;
        let taken = tokio::time::timeout(
            FORCE_SNAPSHOT_TIMEOUT,
            backup::snapshot_to_file(&mut client, &file),
        )
        .await
        .map_err(|_| SupervisorError::ForceSnapshotTimeout {
            timeout: FORCE_SNAPSHOT_TIMEOUT,
        })??;
        tracing::info!(
            revision = taken.revision,
            raft_index = taken.raft_index,
            bytes = taken.size,
            "snapshot of the local etcd taken before forcing a new cluster"
        );
        Ok((file, taken))
    }

    /// Local data of the current epoch, etcd not running: start it on that data.
    pub(super) fn restart(&mut self) -> Result<(), SupervisorError> {
        let record = self.current_record("restart etcd")?.record.clone();
        let spec = self.start_spec(&record, self.only_me(), StartMode::Existing);
        self.start(&spec)
    }

    /// This member was added (as a learner) but not started: start etcd against the existing cluster, with the
    /// member list as it answered (this member under this instance's name).
    pub(super) fn start_joined(&mut self, member_id: u64) -> Result<(), SupervisorError> {
        let record = self
            .current_record("start as a joined member")?
            .record
            .clone();
        let view = self
            .view
            .clone()
            .ok_or(SupervisorError::MissingMemberList { member_id })?;
        let initial = view
            .members
            .iter()
            .map(|m| {
                let name = if m.id == member_id {
                    self.me.instance_id.clone()
                } else if m.name.is_empty() {
                    format!("{:x}", m.id)
                } else {
                    m.name.clone()
                };
                (name, m.peer_url.clone())
            })
            .collect();
        self.local.wipe()?;
        self.local.set_epoch(record.epoch)?;
        let spec = self.start_spec(&record, initial, StartMode::Existing);
        self.start(&spec)
    }

    /// Stops etcd (if running) and wipes the data dir.
    pub(super) async fn wipe(&mut self, reason: &str) -> Result<(), SupervisorError> {
        tracing::warn!(%reason, "wiping etcd's data dir");
        self.stop_etcd().await;
        self.local.wipe()?;
        Ok(())
    }

    /// The initial cluster of a one-member cluster: this instance.
    fn only_me(&self) -> Vec<(String, String)> {
        vec![(self.me.instance_id.clone(), self.me.peer_url())]
    }
}
