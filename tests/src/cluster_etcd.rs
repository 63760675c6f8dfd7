//! A test's view of a Ballast cluster's etcd on the local cloud: it connects the way an operator with the etcd
//! client certificate would (mutual TLS, the certificate nodeup issued on a live control-plane instance), and
//! judges membership against the instances the local cloud runs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ballast_etcd::client::ClientTls;
use ballast_etcd::process::EtcdTls;
use etcd_client::Client;
use localcloud::state::InstanceRecord;

use crate::localcloud::LocalCloud;

/// Whether a booted instance belongs to a control-plane group (Ballast names them `control-plane-*`).
pub fn is_control_plane(record: &InstanceRecord) -> bool {
    record
        .autoscaling_group
        .as_deref()
        .is_some_and(|g| g.starts_with("control-plane"))
}

/// The control-plane instances powered on now.
pub fn control_plane(cloud: &LocalCloud) -> Vec<InstanceRecord> {
    cloud
        .powered_on()
        .into_iter()
        .filter(is_control_plane)
        .collect()
}

/// etcd's membership as one healthy member sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Voting members' names (instance ids).
    pub voters: BTreeSet<String>,
    pub learners: BTreeSet<String>,
    pub cluster_id: u64,
    /// Each member's etcd member ID by name: a member wiped and joined again comes back under a new ID.
    pub member_ids: BTreeMap<String, u64>,
}

/// A client over every live control-plane instance's etcd, with the TLS identity of one of them.
pub async fn connect(cloud: &LocalCloud) -> Option<Client> {
    let live = control_plane(cloud);
    let tls = live.iter().find_map(|r| {
        ClientTls::load(&EtcdTls::in_dir(&r.root.join("etc/kubernetes/pki/etcd"))).ok()
    })?;
    let endpoints: Vec<String> = live
        .iter()
        .map(|r| format!("https://{}:2379", r.private_ip))
        .collect();
    tls.connect(&endpoints, Duration::from_secs(2)).await.ok()
}

/// A client of one control-plane instance's etcd only (reads served from its own state), with its TLS identity.
pub async fn connect_member(record: &InstanceRecord) -> Result<Client, String> {
    let dir = record.root.join("etc/kubernetes/pki/etcd");
    let tls = ClientTls::load(&EtcdTls::in_dir(&dir))
        .map_err(|e| format!("client certificates in {}: {e}", dir.display()))?;
    let endpoint = format!("https://{}:2379", record.private_ip);
    tls.connect(std::slice::from_ref(&endpoint), Duration::from_secs(2))
        .await
        .map_err(|e| format!("connecting to {endpoint}: {e}"))
}

/// The membership, when every live control-plane instance's etcd answers, is in the same cluster, and the
/// members are exactly those instances (no leftover, no duplicate), all voting.
pub async fn settled_membership(cloud: &LocalCloud, expected: usize) -> Result<Membership, String> {
    let live = control_plane(cloud);
    if live.len() != expected {
        return Err(format!(
            "{} control-plane instances powered on, expected {expected}",
            live.len()
        ));
    }
    let mut client = connect(cloud)
        .await
        .ok_or("no control-plane instance has etcd certificates yet")?;
    let list = client
        .member_list()
        .await
        .map_err(|e| format!("member list: {e}"))?;
    let cluster_id = list.header().map_or(0, |h| h.cluster_id());
    let mut voters = BTreeSet::new();
    let mut learners = BTreeSet::new();
    let mut member_ids = BTreeMap::new();
    for m in list.members() {
        if m.name().is_empty() {
            return Err(format!("member {:x} has not started yet", m.id()));
        }
        let fresh = if m.is_learner() {
            learners.insert(m.name().to_string())
        } else {
            voters.insert(m.name().to_string())
        };
        if !fresh {
            return Err(format!("member {} is listed twice", m.name()));
        }
        member_ids.insert(m.name().to_string(), m.id());
    }
    let ids: BTreeSet<String> = live.iter().map(|r| r.instance_id.clone()).collect();
    if !learners.is_empty() || voters != ids {
        return Err(format!(
            "voters {voters:?}, learners {learners:?}; live control-plane instances {ids:?}"
        ));
    }
    // Every member answers, in the same cluster, and agrees on a leader.
    let mut leaders = BTreeSet::new();
    for r in &live {
        let endpoint = format!("https://{}:2379", r.private_ip);
        let mut one =
            match ClientTls::load(&EtcdTls::in_dir(&r.root.join("etc/kubernetes/pki/etcd"))) {
                Ok(tls) => tls
                    .connect(std::slice::from_ref(&endpoint), Duration::from_secs(2))
                    .await
                    .map_err(|e| format!("{endpoint}: {e}"))?,
                Err(e) => return Err(format!("{}: {e}", r.instance_id)),
            };
        let own = one
            .status()
            .await
            .map_err(|e| format!("{endpoint} status: {e}"))?;
        let own_cluster = own.header().map_or(0, |h| h.cluster_id());
        if own_cluster != cluster_id {
            return Err(format!(
                "{endpoint} is in cluster {own_cluster:x}, the others in {cluster_id:x}"
            ));
        }
        if own.leader() == 0 {
            return Err(format!("{endpoint} has no leader"));
        }
        leaders.insert(own.leader());
    }
    if leaders.len() != 1 {
        return Err(format!("members disagree on the leader: {leaders:x?}"));
    }
    Ok(Membership {
        voters,
        learners,
        cluster_id,
        member_ids,
    })
}

/// Waits until [`settled_membership`] holds; panics after `timeout` with the last reason.
pub async fn wait_for_settled(
    cloud: &LocalCloud,
    expected: usize,
    timeout: Duration,
) -> Membership {
    let deadline = Instant::now() + timeout;
    loop {
        match settled_membership(cloud, expected).await {
            Ok(m) => return m,
            Err(why) if Instant::now() > deadline => panic!(
                "etcd did not settle on {expected} voting members in {timeout:?}: {why}\nlogs: {}",
                cloud.dir().display()
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
