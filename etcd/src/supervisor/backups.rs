//! Backups taken through the local member: the scheduled (or requested) one the leader takes, and one on
//! demand.

use super::{Supervisor, SupervisorError};
use crate::backup::{self, BackupError, BackupMetadata};
use crate::record::now_stamp;

impl Supervisor {
    /// A scheduled or requested backup: take it, prune what is past retention, and clear the request.
    pub(super) async fn scheduled_backup(&mut self) -> Result<(), SupervisorError> {
        let epoch = self.current_record("take a backup")?.record.epoch;
        let (_, now_unix) = now_stamp();
        // Recorded before the attempt: a failing scheduled backup is tried again after an interval, not every round.
        self.last_backup_unix = Some(now_unix);
        let mut client = self.client_for(&self.me.client_url()).await?;
        backup::take_backup(
            &mut client,
            &self.store,
            &self.paths,
            epoch,
            &self.me.instance_id,
        )
        .await?;
        let deleted = backup::prune_backups(
            &self.store,
            &self.paths,
            self.config.backup_retention,
            now_unix,
        )
        .await?;
        if !deleted.is_empty() {
            tracing::info!(?deleted, "pruned old etcd backups");
        }
        self.store
            .delete(&backup::request_key(&self.paths))
            .await
            .map_err(BackupError::from)?;
        Ok(())
    }

    /// Takes a backup now through the local member (for `ballast etcd backup` through nodeup, and tests).
    pub async fn backup_now(&mut self) -> Result<BackupMetadata, SupervisorError> {
        let epoch = self.current_record("take a backup")?.record.epoch;
        let mut client = self.client_for(&self.me.client_url()).await?;
        Ok(backup::take_backup(
            &mut client,
            &self.store,
            &self.paths,
            epoch,
            &self.me.instance_id,
        )
        .await?)
    }
}
