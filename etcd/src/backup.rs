//! Backups of etcd: taking a snapshot through an etcd client, here; everything else about backups (metadata,
//! listing, retention, requests, verified reads, the restore decision) is store-side and lives in
//! `ballast_store::etcd` (types: `ballast_state::etcd`), re-exported below so the supervisor and tests keep one import path.

use std::time::Duration;

use ballast_state::digest::sha256_hex;
use ballast_state::layout::ClusterPaths;
use ballast_state::timestamp::now_stamp;
use ballast_store::store::StateStore;

pub use ballast_state::etcd::backup::{
    backup_id, request_key, snapshot_checksum_ok, BackupMetadata,
};
pub use ballast_state::etcd::health::EtcdHealthSummary;
pub use ballast_store::etcd::backup::{
    backup_ids, fetch_verified_snapshot, list_backups, prune_backups, request_backup, store_backup,
    wait_for_backup, BackupError,
};
pub use ballast_store::etcd::health::cluster_health;
pub use ballast_store::etcd::restore::{request_restore, request_restore_with};

/// Parses a backup interval or retention (`15m`, `7d`, `1h30m`) in Ballast's one duration grammar
/// ([`ballast_state::duration`]).
pub fn parse_duration(text: &str) -> Result<Duration, BackupError> {
    Ok(ballast_state::duration::parse_duration(text)?)
}

/// What [`snapshot_to_file`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalSnapshot {
    /// The member's revision and raft index just before the snapshot (the snapshot holds at least these).
    pub revision: i64,
    pub raft_index: u64,
    pub size: u64,
}

/// Streams a snapshot from the member behind `client` into `path` (synced to disk) and checks the sha256 etcd
/// appends to it. The maintenance API serves locally: it works on a member that has lost its quorum, and it
/// holds everything the member applied (etcd commits its backend before streaming).
pub async fn snapshot_to_file(
    client: &mut etcd_client::Client,
    path: &std::path::Path,
) -> Result<LocalSnapshot, BackupError> {
    let snap = |e: etcd_client::Error| BackupError::Snapshot {
        source: Box::new(e),
    };
    let file_err = |source: std::io::Error| BackupError::SnapshotFile {
        path: path.to_path_buf(),
        source,
    };
    let status = client.status().await.map_err(snap)?;
    let mut stream = client.snapshot().await.map_err(snap)?;
    let mut data = Vec::new();
    while let Some(chunk) = stream.message().await.map_err(snap)? {
        data.extend_from_slice(chunk.blob());
    }
    if !snapshot_checksum_ok(&data) {
        return Err(BackupError::BadSnapshot {
            problem: format!(
                "the snapshot etcd sent ({} bytes) does not carry a matching sha256",
                data.len()
            ),
        });
    }
    write_snapshot_file(path, &data).map_err(file_err)?;
    Ok(LocalSnapshot {
        revision: status.header().map_or(0, |h| h.revision()),
        raft_index: status.raft_index(),
        size: data.len() as u64,
    })
}

/// Writes an etcd snapshot to `path`, synced to disk, readable by its owner only: the file 0600 (an existing
/// file's mode is set before anything is written into it) in a directory only its owner may enter (0700, made
/// so when it exists). A snapshot holds everything in etcd, every Kubernetes secret included; issue 28 found
/// them created 0644.
pub fn write_snapshot_file(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(data)?;
    file.sync_all()
}

/// Streams a snapshot from the member behind `client` (a voter) and stores it with its metadata.
pub async fn take_backup(
    client: &mut etcd_client::Client,
    store: &StateStore,
    paths: &ClusterPaths,
    epoch: u64,
    taken_by: &str,
) -> Result<BackupMetadata, BackupError> {
    let snap = |e: etcd_client::Error| BackupError::Snapshot {
        source: Box::new(e),
    };
    let status = client.status().await.map_err(snap)?;
    let members = client.member_list().await.map_err(snap)?.members().len();
    let revision = status.header().map_or(0, |h| h.revision());
    let mut stream = client.snapshot().await.map_err(snap)?;
    let mut data = Vec::new();
    while let Some(chunk) = stream.message().await.map_err(snap)? {
        data.extend_from_slice(chunk.blob());
    }
    if data.is_empty() {
        return Err(BackupError::BadSnapshot {
            problem: "etcd sent an empty snapshot".to_string(),
        });
    }
    let now = time::OffsetDateTime::now_utc();
    let (created_at, created_unix) = now_stamp();
    let metadata = BackupMetadata {
        id: backup_id(now),
        created_at,
        created_unix,
        revision,
        sha256: sha256_hex(&data),
        size: data.len() as u64,
        member_count: members,
        epoch,
        taken_by: taken_by.to_string(),
    };
    store_backup(store, paths, &metadata, &data).await?;
    tracing::info!(id = %metadata.id, revision, size = metadata.size, "etcd backup stored");
    Ok(metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &std::path::Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o7777
    }

    /// Issue 28: snapshot files were created 0644 (umask 022), readable by every user of the node.
    #[test]
    fn snapshot_files_are_private_and_so_is_their_directory() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().expect("a temporary directory");
        // A new directory and file.
        let fresh = root.path().join("var/lib/etcd/force-new-cluster.db");
        write_snapshot_file(&fresh, b"snapshot").expect("written");
        assert_eq!(std::fs::read(&fresh).expect("read"), b"snapshot");
        assert_eq!(mode(&fresh), 0o600);
        assert_eq!(mode(fresh.parent().expect("its directory")), 0o700);
        // A directory and a leftover file that were open to everyone.
        let dir = root.path().join("state");
        std::fs::create_dir(&dir).expect("a directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let leftover = dir.join("restore.db");
        std::fs::write(&leftover, b"old").expect("a leftover");
        std::fs::set_permissions(&leftover, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        write_snapshot_file(&leftover, b"new").expect("written");
        assert_eq!(std::fs::read(&leftover).expect("read"), b"new");
        assert_eq!(mode(&leftover), 0o600);
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn settings_durations_use_the_one_grammar() {
        assert_eq!(parse_duration("15m").ok(), Some(Duration::from_secs(900)));
        assert_eq!(
            parse_duration("1h30m").ok(),
            Some(Duration::from_secs(5400))
        );
        assert!(matches!(
            parse_duration("0s"),
            Err(BackupError::BadDuration(_))
        ));
        assert!(matches!(
            parse_duration("300000000000000d"),
            Err(BackupError::BadDuration(_))
        ));
    }
}
