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

/// The control-plane instances running now (powered on and not shutting down).
pub fn control_plane(cloud: &LocalCloud) -> Vec<InstanceRecord> {
    cloud
        .powered_on()
        .into_iter()
        .filter(|r| is_control_plane(r) && r.shutdown.is_none())
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

/// One look at etcd's quorum while control-plane instances come and go (a watcher's sample during a roll).
#[derive(Debug, Clone)]
pub struct QuorumSample {
    /// Voting members, by member ID, as the member that knows best lists them (the leader when one answers).
    pub voters: usize,
    /// Live control-plane instances whose etcd answered a status request as one of those voters.
    pub answering: usize,
    /// Whether any answering member knew a leader (none does during an election).
    pub leader_known: bool,
    /// The highest raft term any answering member reported, and the leader (member ID) that member knew, 0 for
    /// none: a candidate's term rises before anyone knows a leader of it, so an election shows here even when no
    /// sample catches the cluster leaderless.
    pub term: u64,
    pub leader: u64,
    /// Each live instance's answer, for a failure message.
    pub detail: String,
}

/// Asks every live control-plane instance's etcd for its status, and the leader (else any member with a leader,
/// else any member) for the membership; counts the instances that answered as voting members.
///
/// Members are matched by member ID, not by name: a member whose instance was replaced keeps its ID (its volume)
/// but answers under its new instance's name only once it publishes it through raft, and a member just restarted
/// replays its log from the start, so for a moment it lists the names the cluster was created with.
/// Matching names made a healthy cluster look like none of its voters answered.
pub async fn sample_quorum(cloud: &LocalCloud) -> Option<QuorumSample> {
    // In parallel: a terminated member's endpoint takes its whole timeout to fail.
    let mut asks = tokio::task::JoinSet::new();
    for r in control_plane(cloud) {
        asks.spawn(async move {
            let answer = match connect_member(&r).await {
                Ok(mut client) => {
                    match tokio::time::timeout(Duration::from_secs(2), client.status()).await {
                        Ok(Ok(status)) => {
                            let id = status.header().map_or(0, |h| h.member_id());
                            Ok((client, id, status.leader(), status.raft_term()))
                        }
                        Ok(Err(e)) => Err(format!("status: {e}")),
                        Err(_) => Err("status timed out after 2s".to_string()),
                    }
                }
                Err(e) => Err(e),
            };
            (r.instance_id, answer)
        });
    }
    let mut answers = Vec::new();
    let mut detail = Vec::new();
    let mut terms = Vec::new();
    for (instance, answer) in asks.join_all().await {
        match answer {
            Ok((client, id, leader, term)) => {
                detail.push(format!(
                    "{instance}: member {id:x}, leader {leader:x}, term {term}"
                ));
                answers.push((client, id, leader));
                terms.push((term, leader));
            }
            Err(e) => detail.push(format!("{instance}: {e}")),
        }
    }
    let leader_known = answers.iter().any(|(_, _, leader)| *leader != 0);
    // The highest term, and among its reporters the leader one of them knows.
    let (term, leader) = terms
        .iter()
        .max_by_key(|(term, leader)| (*term, *leader != 0))
        .copied()
        .unwrap_or((0, 0));
    let best = answers
        .iter()
        .position(|(_, id, leader)| *leader != 0 && id == leader)
        .or_else(|| answers.iter().position(|(_, _, leader)| *leader != 0))
        .or(if answers.is_empty() { None } else { Some(0) })?;
    let (client, best_id, _) = &mut answers[best];
    let best_id = *best_id;
    let list = tokio::time::timeout(Duration::from_secs(2), client.member_list())
        .await
        .ok()?
        .ok()?;
    let voters: BTreeSet<u64> = list
        .members()
        .iter()
        .filter(|m| !m.is_learner())
        .map(|m| m.id())
        .collect();
    let answering = answers
        .iter()
        .filter(|(_, id, _)| voters.contains(id))
        .count();
    detail.push(format!(
        "voters as member {best_id:x} lists them: {voters:x?}"
    ));
    Some(QuorumSample {
        voters: voters.len(),
        answering,
        leader_known,
        term,
        leader,
        detail: detail.join("; "),
    })
}

/// Samples [`sample_quorum`] every `interval` until `stop` is set.
#[derive(Debug, Clone, Default)]
pub struct QuorumWatch {
    pub samples: usize,
    /// Samples taken while no answering member knew a leader (elections: the roll terminated the leader).
    pub leaderless: usize,
    /// The sample with the fewest voters answering.
    pub worst: Option<QuorumSample>,
    /// Each (term, leader) seen, in order, when it differs from the one seen before: a handoff shows as the term
    /// one higher with the new leader; an election as a term with no leader, or more than one higher.
    pub leadership: Vec<(u64, u64)>,
}

impl QuorumWatch {
    /// The fewest voters answering in any sample (`usize::MAX` when there was none).
    pub fn fewest(&self) -> usize {
        self.worst.as_ref().map_or(usize::MAX, |s| s.answering)
    }
}

/// Watches quorum until told to stop.
pub async fn watch_quorum(
    cloud: &LocalCloud,
    stop: &std::sync::atomic::AtomicBool,
    interval: Duration,
) -> QuorumWatch {
    watch_quorum_counting(
        cloud,
        stop,
        interval,
        &std::sync::atomic::AtomicUsize::new(0),
    )
    .await
}

/// [`watch_quorum`], counting its samples into `taken` as it goes, so a test can wait for the watcher to be under
/// way before it acts.
pub async fn watch_quorum_counting(
    cloud: &LocalCloud,
    stop: &std::sync::atomic::AtomicBool,
    interval: Duration,
    taken: &std::sync::atomic::AtomicUsize,
) -> QuorumWatch {
    let mut watch = QuorumWatch::default();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if let Some(sample) = sample_quorum(cloud).await {
            watch.samples += 1;
            taken.store(watch.samples, std::sync::atomic::Ordering::Relaxed);
            if !sample.leader_known {
                watch.leaderless += 1;
            }
            if watch.leadership.last() != Some(&(sample.term, sample.leader)) {
                watch.leadership.push((sample.term, sample.leader));
            }
            if sample.answering < watch.fewest() {
                watch.worst = Some(sample);
            }
        }
        tokio::time::sleep(interval).await;
    }
    watch
}

/// The control-plane instance whose etcd member leads, as its own etcd says.
pub async fn leader_instance(cloud: &LocalCloud) -> Option<String> {
    for r in control_plane(cloud) {
        let Ok(mut client) = connect_member(&r).await else {
            continue;
        };
        let Ok(status) = client.status().await else {
            continue;
        };
        let own = status.header().map_or(0, |h| h.member_id());
        if own != 0 && own == status.leader() {
            return Some(r.instance_id);
        }
    }
    None
}
