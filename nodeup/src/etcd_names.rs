//! On an API-server node: the etcd members' stable names (`etcd-<member>.internal.<cluster>`, which its API
//! server's `--etcd-servers` names) kept current in the node's `/etc/hosts`, from EC2 as a control-plane node's
//! etcd supervisor keeps them (`ballast_etcd::hosts`): each name is the private IP of the alive control-plane
//! instance EC2 says holds that member's volume. The instance role may call `ec2:DescribeInstances` and
//! `ec2:DescribeVolumes` for exactly this (ctl's `api_servers.rs`, `FindEtcdMembers`).
//!
//! A failed listing keeps the addresses written last (logged), never an empty block: etcd's members stay
//! reachable through a transient EC2 error.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ballast_etcd::hosts::{member_entries, update_file, HostsError};
use ballast_etcd::peers::{Peers, PeersError};

/// How often EC2 is asked again: a replaced control-plane instance is dialed by its new address within this.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// One round failed.
#[derive(Debug, thiserror::Error)]
pub enum EtcdNamesError {
    /// EC2 could not list the control plane's instances or the etcd volumes.
    #[error("finding the etcd members' addresses: {0}")]
    Peers(#[from] PeersError),
    /// The hosts file could not be written.
    #[error("writing the etcd members' names: {0}")]
    Hosts(#[from] HostsError),
}

/// What keeps the names current on one node.
pub struct EtcdNames<P> {
    pub peers: P,
    pub cluster: String,
    /// `<root>/etc/hosts`.
    pub hosts_file: PathBuf,
    /// The block written last (empty before the first round).
    pub written: BTreeMap<String, String>,
}

impl<P: Peers> EtcdNames<P> {
    /// One round: lists the instances and the volumes, writes the block when it differs (or nothing was written
    /// yet). Returns whether the file changed.
    pub async fn update_once(&mut self) -> Result<bool, EtcdNamesError> {
        let instances = self.peers.instances().await?;
        let volumes = self.peers.member_volumes().await?;
        let wanted = member_entries(&self.cluster, &volumes, &instances);
        if wanted == self.written && !self.written.is_empty() {
            return Ok(false);
        }
        let changed = update_file(&self.hosts_file, &wanted)?;
        if changed {
            tracing::info!(hosts = ?wanted, file = %self.hosts_file.display(), "etcd member names updated");
        }
        self.written = wanted;
        Ok(changed)
    }

    /// Rounds every [`INTERVAL`] until the task is aborted; a failed round is logged and the last block kept.
    pub async fn keep_current(mut self) {
        loop {
            if let Err(e) = self.update_once().await {
                tracing::warn!(error = %e, "keeping the etcd members' names; the last addresses stay");
            }
            tokio::time::sleep(INTERVAL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_etcd::hosts::{BEGIN_MARKER, END_MARKER};
    use ballast_etcd::peers::{InstanceState, StaticPeers};

    /// The names follow the volumes: each member's name is the address of the instance holding its volume, a
    /// replacement moves it, and the lines outside Ballast's block stay as they were.
    #[tokio::test]
    async fn the_members_names_follow_their_volumes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hosts = dir.path().join("hosts");
        std::fs::write(&hosts, "127.0.0.1 localhost\n").expect("hosts");
        let peers = StaticPeers::new();
        peers.set("i-a", "10.0.1.10", InstanceState::Running);
        peers.set("i-b", "10.0.2.10", InstanceState::Running);
        peers.attach("a", Some("i-a"));
        peers.attach("b", Some("i-b"));
        peers.attach("c", None);
        let mut names = EtcdNames {
            peers: peers.clone(),
            cluster: "demo.example.com".into(),
            hosts_file: hosts.clone(),
            written: BTreeMap::new(),
        };
        assert!(names.update_once().await.expect("first round"));
        let text = std::fs::read_to_string(&hosts).expect("read");
        assert_eq!(
            text,
            format!(
                "127.0.0.1 localhost\n{BEGIN_MARKER}\n10.0.1.10\tetcd-a.internal.demo.example.com\n\
                 10.0.2.10\tetcd-b.internal.demo.example.com\n{END_MARKER}\n"
            )
        );
        assert!(!names.update_once().await.expect("unchanged"));
        // Member a's instance is replaced: its name moves to the new instance.
        peers.terminate("i-a");
        peers.set("i-a2", "10.0.1.11", InstanceState::Running);
        peers.attach("a", Some("i-a2"));
        assert!(names.update_once().await.expect("replaced"));
        let text = std::fs::read_to_string(&hosts).expect("read");
        assert!(
            text.contains("10.0.1.11\tetcd-a.internal.demo.example.com\n"),
            "{text}"
        );
        assert!(!text.contains("10.0.1.10"), "{text}");
        assert!(text.starts_with("127.0.0.1 localhost\n"), "{text}");
    }
}
