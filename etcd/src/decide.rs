//! The supervisor's brain: one pure function from what was observed to the one next step.
//!
//! Everything that keeps etcd safe is decided here, and every rule is a table test below:
//! - a new cluster only after winning `etcd/cluster.json` (the caller's conditional write), never because peers
//!   are unreachable;
//! - a member is removed only when its instance is confirmed terminated (or EC2 has stopped listing it for
//!   [`UNLISTED_GRACE`] and it does not answer), only while a healthy quorum of the rest remains, one change at a
//!   time, remove before add;
//! - a joiner adds itself as a learner, starts against the existing cluster, and is promoted once in sync;
//! - a removed member, or one of another cluster or an older epoch, wipes its data and rejoins;
//! - after losing the majority, the most up-to-date survivor forces a new cluster from its data, and only when
//!   every other voting member's instance is confirmed terminated.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::peers::{InstanceState, PeerInstance};
use crate::record::{ClusterRecord, HealthReport, Origin};

/// The client port of every member.
pub const CLIENT_PORT: u16 = 2379;
/// The peer port of every member.
pub const PEER_PORT: u16 = 2380;

/// A member's peer URL from its IP: members are matched by it.
pub fn peer_url(ip: &str) -> String {
    format!("https://{ip}:{PEER_PORT}")
}

/// A member's client URL from its IP.
pub fn client_url(ip: &str) -> String {
    format!("https://{ip}:{CLIENT_PORT}")
}

/// The host part of `https://HOST:PORT`.
pub fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.rsplit_once(':').map_or(rest, |(h, _)| h)
}

/// Votes needed for a majority of `voters`.
pub fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

/// This node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Me {
    pub instance_id: String,
    pub ip: String,
    /// The member's stable peer name (`etcd-<member>.internal.<cluster>`, `hosts`) when its data lives on the
    /// member's volume: the peer URL is then by name, so it survives the instance. `None`: by IP.
    pub peer_name: Option<String>,
}

impl Me {
    /// The peer URL this instance's member advertises: by name when it has one, else by IP.
    pub fn peer_url(&self) -> String {
        peer_url(self.peer_name.as_deref().unwrap_or(&self.ip))
    }
    pub fn client_url(&self) -> String {
        client_url(&self.ip)
    }
}

/// What one etcd member says about itself (the Status RPC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemberStatus {
    pub member_id: u64,
    pub cluster_id: u64,
    pub raft_index: u64,
    pub is_learner: bool,
    /// The leader it follows; 0 when it knows none.
    pub leader: u64,
}

/// The local etcd process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalEtcd {
    /// Not running (never started, exited, or stopped).
    Stopped,
    /// Running but not answering yet.
    Unresponsive,
    Running(MemberStatus),
}

/// The local data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LocalData {
    /// etcd's data dir holds a member.
    pub present: bool,
    /// The epoch that data belongs to (`None` when unknown: treated as stale).
    pub epoch: Option<u64>,
    /// The last epoch this instance seeded (kept across wipes): a seed never seeds twice.
    pub seeded_epoch: Option<u64>,
    /// The etcd member the data belongs to (`<state_dir>/member`, written once etcd answered on it): on a volume
    /// re-attached to a new instance, how the member is recognised although its peer URL names the old one.
    pub member_id: Option<u64>,
}

/// One member in the member list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    pub id: u64,
    /// The instance id of a started member; empty for a member added but never started.
    pub name: String,
    pub peer_url: String,
    /// Its first client URL (empty for a member never started): always an IP, so clients need no name.
    pub client_url: String,
    pub is_learner: bool,
    /// What it answered, when it answered.
    pub status: Option<MemberStatus>,
}

/// The cluster as the control plane's etcd members report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterView {
    pub cluster_id: u64,
    pub members: Vec<MemberView>,
}

impl ClusterView {
    pub fn voters(&self) -> impl Iterator<Item = &MemberView> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    /// The leader every answering voter agrees on, if it is a member.
    pub fn leader(&self) -> Option<u64> {
        let leader = self
            .voters()
            .filter_map(|m| m.status)
            .map(|s| s.leader)
            .find(|&l| l != 0)?;
        self.members
            .iter()
            .any(|m| m.id == leader)
            .then_some(leader)
    }

    /// A leader, and a majority of voters answering.
    pub fn is_healthy(&self) -> bool {
        let voters = self.voters().count();
        let answering = self.voters().filter(|m| m.status.is_some()).count();
        voters > 0 && answering >= quorum(voters) && self.leader().is_some()
    }

    /// Whether removing `id` leaves a healthy quorum of the remaining voters.
    pub fn quorum_after_removing(&self, id: u64) -> bool {
        let rest: Vec<&MemberView> = self.voters().filter(|m| m.id != id).collect();
        let answering = rest.iter().filter(|m| m.status.is_some()).count();
        !rest.is_empty() && answering >= quorum(rest.len())
    }

    pub fn by_peer_url(&self, url: &str) -> Option<&MemberView> {
        self.members.iter().find(|m| m.peer_url == url)
    }

    /// Client endpoints safe for requests: voters that answered (never learners).
    pub fn voter_endpoints(&self) -> Vec<String> {
        self.voters()
            .filter(|m| m.status.is_some())
            .map(|m| {
                if m.client_url.is_empty() {
                    client_url(url_host(&m.peer_url))
                } else {
                    m.client_url.clone()
                }
            })
            .collect()
    }
}

/// Everything one round of the loop knows.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub me: Me,
    pub record: Option<ClusterRecord>,
    pub local_data: LocalData,
    pub local_etcd: LocalEtcd,
    /// The control-plane instances (terminated ones included while EC2 lists them), and the instances of members
    /// that listing missed but a lookup by id found.
    pub instances: Vec<PeerInstance>,
    /// Members' instances (by id) that EC2 lists neither by the cluster's tags nor by id, and for how long the
    /// supervisor has seen them absent without a break. An instance whose lookup failed is not here: unknown is
    /// never absent.
    pub unlisted: BTreeMap<String, Duration>,
    /// The cluster seen through the members that answered (`None`: none answered).
    pub cluster: Option<ClusterView>,
    /// Other members' published health (for re-seeding a cluster whose seed died before forming it).
    pub reports: Vec<HealthReport>,
    /// The highest etcd revision among the backups of the current epoch (read with `reports`, only when no
    /// cluster answers and there is no local data): above 1, the epoch held writes.
    pub epoch_backup_revision: Option<i64>,
    pub now_unix: i64,
    /// A scheduled backup is due (the leader takes it).
    pub backup_due: bool,
    /// Each member's data lives on its own EBS volume, which a replacement instance re-attaches: a member whose
    /// instance is gone comes back with its data, so the leader does not remove it (`decide/volume.rs`).
    pub member_volume: bool,
    /// Peer names and the private IPs they resolve to on this node now (`hosts`); empty when peer URLs are IPs.
    pub peer_hosts: BTreeMap<String, String>,
}

/// A published report older than this is not trusted to say "no data here".
pub const REPORT_FRESHNESS_SECS: i64 = 30;

/// How long EC2 must go on listing a member's instance neither by the cluster's tags nor by its id before the
/// instance counts as terminated. EC2 lists a terminated instance for about an hour and then forgets it, so the
/// instance of a member whose cluster was down longer (or whose removal was missed) is never listed as
/// terminated; but EC2 is also eventually consistent right after a launch, when a new instance may not be
/// listed yet, so one absence proves nothing: the absence must last this long, seen in every round.
pub const UNLISTED_GRACE: Duration = Duration::from_secs(300);

/// How soon a joiner waiting for another learner looks again (see [`Step::WaitForLearner`]); the supervisor
/// reuses its EC2 listing meanwhile (`LEARNER_WAIT_LISTING`), so the faster rounds ask only etcd and the store.
pub const LEARNER_WAIT_POLL: Duration = Duration::from_millis(150);

impl Observation {
    /// Nothing to act on and nothing EC2 could add: this member's etcd runs as a voter, and every member is a
    /// started voter that answered, with no member's instance missing from EC2's listing. A supervisor whose
    /// last round was steady and quiet reuses its last EC2 listing for a while (see
    /// `SupervisorConfig::quiet_peer_refresh`): any change EC2 would show (an instance terminated, a volume moved,
    /// an instance added that joins as a learner) first shows in etcd as a member that stops answering or a
    /// learner, which ends the quiet.
    pub fn is_quiet(&self) -> bool {
        let local_voter = matches!(self.local_etcd, LocalEtcd::Running(s) if !s.is_learner);
        let members_answer = self.cluster.as_ref().is_some_and(|v| {
            v.is_healthy()
                && v.members
                    .iter()
                    .all(|m| !m.is_learner && !m.name.is_empty() && m.status.is_some())
        });
        local_voter && members_answer && self.unlisted.is_empty()
    }

    /// The IP a peer URL reaches from here: its host, or for a peer name the address it resolves to now.
    pub fn peer_ip<'a>(&'a self, url: &'a str) -> &'a str {
        let host = url_host(url);
        self.peer_hosts.get(host).map_or(host, String::as_str)
    }

    /// The instance behind a member: by name (instance id) when started, else by its peer URL's IP (an alive
    /// instance first).
    pub fn instance_of(&self, member: &MemberView) -> Option<&PeerInstance> {
        if !member.name.is_empty() {
            if let Some(i) = self.instances.iter().find(|i| i.instance_id == member.name) {
                return Some(i);
            }
        }
        let ip = self.peer_ip(&member.peer_url);
        let mut matching: Vec<&PeerInstance> = self
            .instances
            .iter()
            .filter(|i| i.private_ip == ip)
            .collect();
        matching.sort_by_key(|i| !i.state.is_alive());
        if member.name.is_empty() {
            matching.first().copied()
        } else {
            None
        }
    }

    /// What EC2 says about the member's instance. Gone only when EC2 lists it terminated, or has listed it
    /// neither by tags nor by id for [`UNLISTED_GRACE`] while the member does not answer; an unknown instance
    /// is *not* gone.
    pub fn instance_fate(&self, member: &MemberView) -> InstanceFate {
        if let Some(i) = self.instance_of(member) {
            return if i.state.is_terminated() {
                InstanceFate::Terminated {
                    instance_id: i.instance_id.clone(),
                }
            } else {
                InstanceFate::Listed {
                    instance_id: i.instance_id.clone(),
                    state: i.state,
                }
            };
        }
        let Some(&unlisted_for) = self
            .unlisted
            .get(&member.name)
            .filter(|_| !member.name.is_empty())
        else {
            return InstanceFate::Unknown {
                label: Self::label(member),
            };
        };
        let instance_id = member.name.clone();
        if member.status.is_some() {
            InstanceFate::UnlistedButAnswers { instance_id }
        } else if unlisted_for >= UNLISTED_GRACE {
            InstanceFate::Unlisted {
                instance_id,
                unlisted_for,
            }
        } else {
            InstanceFate::UnlistedWithinGrace {
                instance_id,
                unlisted_for,
            }
        }
    }

    /// EC2 confirms the member's instance is gone for good (see [`Observation::instance_fate`]).
    pub fn confirmed_gone(&self, member: &MemberView) -> bool {
        self.instance_fate(member).is_gone()
    }

    fn instance_state(&self, id: &str) -> Option<InstanceState> {
        self.instances
            .iter()
            .find(|i| i.instance_id == id)
            .map(|i| i.state)
    }

    fn label(member: &MemberView) -> String {
        if member.name.is_empty() {
            member.peer_url.clone()
        } else {
            member.name.clone()
        }
    }
}

/// The one next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do now; look again soon.
    Wait { reason: String },
    /// Wait while another instance's learner joins (one membership change at a time). Looked at again soon
    /// ([`LEARNER_WAIT_POLL`]): at a cluster's first boot every member but the seed joins in turn, and a wait of
    /// a whole [`Step::Wait`] round after each promotion added up to seconds.
    WaitForLearner { learner: String },
    /// Healthy and nothing to change.
    Steady,
    /// No cluster was ever decided: try to win `etcd/cluster.json` (must not exist) as the bootstrap seed.
    ClaimBootstrap,
    /// The record names no seed (a restore): try to become it (must match the record read).
    ClaimSeed,
    /// The seed died before anyone got its data: a new epoch of the same origin, seeded here.
    ClaimReseed { reason: String },
    /// The majority is lost and this member has the most data: win a new epoch that forces a new cluster here.
    ClaimForceNewCluster {
        raft_index: u64,
        lost_members: Vec<String>,
    },
    /// This instance seeds the record's epoch: a one-member cluster, empty (bootstrap) or from a snapshot.
    Seed,
    /// This instance seeds a forced epoch: rebuild a one-member cluster from a snapshot of its own etcd (from its
    /// data dir with `--force-new-cluster` only when that etcd does not run or gives no snapshot).
    ForceNewCluster,
    /// Local data of the current epoch, etcd not running: start it.
    Restart,
    /// This member was added (as a learner) but not started: start etcd against the existing cluster.
    StartJoined { member_id: u64 },
    /// Stop etcd (if running) and wipe the data dir.
    Wipe { reason: String },
    /// Add this instance as a learner.
    AddLearner,
    /// Promote this learner to a voting member.
    Promote { member_id: u64 },
    /// Remove a member (its instance is terminated, or it is this instance's own member with lost data).
    RemoveMember {
        member_id: u64,
        label: String,
        reason: String,
    },
    /// Take a scheduled backup.
    Backup,
    /// This instance's member (its data re-attached on a volume) is listed with the peer URL of the instance it
    /// ran on before: point the member at this instance (MemberUpdate), keeping its ID and data.
    UpdatePeerUrl { member_id: u64, from: String },
}

impl Step {
    /// How long to wait before the next round after this step succeeded.
    pub fn requeue(&self, steady: Duration) -> Duration {
        match self {
            Step::Steady | Step::Backup => steady,
            Step::Wait { .. } => Duration::from_millis(500),
            Step::WaitForLearner { .. } => LEARNER_WAIT_POLL,
            _ => Duration::ZERO,
        }
    }

    /// The step in words, for logs and health reports.
    pub fn describe(&self) -> String {
        match self {
            Step::Wait { reason } => format!("waiting: {reason}"),
            Step::WaitForLearner { learner } => {
                format!("waiting: learner {learner} is joining: one membership change at a time")
            }
            Step::Steady => "steady".to_string(),
            Step::ClaimBootstrap => "claiming the bootstrap of a new cluster".to_string(),
            Step::ClaimSeed => "claiming the seed of the recorded epoch".to_string(),
            Step::ClaimReseed { reason } => format!("claiming a re-seed: {reason}"),
            Step::ClaimForceNewCluster { raft_index, lost_members } => format!(
                "claiming a forced new cluster from local data at raft index {raft_index} (lost: {})",
                lost_members.join(", ")
            ),
            Step::Seed => "seeding the cluster".to_string(),
            Step::ForceNewCluster => "forcing a new cluster from local data".to_string(),
            Step::Restart => "restarting etcd on existing data".to_string(),
            Step::StartJoined { member_id } => format!("starting etcd as member {member_id:x}"),
            Step::Wipe { reason } => format!("wiping the data dir: {reason}"),
            Step::AddLearner => "adding this instance as a learner".to_string(),
            Step::Promote { member_id } => format!("promoting learner {member_id:x}"),
            Step::RemoveMember {
                member_id,
                label,
                reason,
            } => format!("removing member {member_id:x} ({label}): {reason}"),
            Step::Backup => "taking a scheduled backup".to_string(),
            Step::UpdatePeerUrl { member_id, from } => format!(
                "moving member {member_id:x} (its data re-attached here) from peer URL {from} to this instance's"
            ),
        }
    }
}

fn wait(reason: impl Into<String>) -> Step {
    Step::Wait {
        reason: reason.into(),
    }
}

/// Decides the one next step. Pure: no I/O, no clock.
pub fn decide(o: &Observation) -> Step {
    let me = &o.me;
    let Some(record) = &o.record else {
        if o.local_data.present {
            return wait("local etcd data but no etcd/cluster.json in the state store: not bootstrapping over it (restore the record, or restore a backup)");
        }
        if o.cluster.is_some() {
            return wait("etcd answers on other control-plane instances but etcd/cluster.json is missing: not bootstrapping a second cluster");
        }
        return Step::ClaimBootstrap;
    };
    let epoch = record.epoch;
    let i_am_seed = record.seed.as_deref() == Some(me.instance_id.as_str());

    // Data of another epoch: the cluster moved on without it (or it carries the new one).
    if o.local_data.present && o.local_data.epoch != Some(epoch) {
        if o.local_data.epoch.is_some_and(|e| e > epoch) {
            return wait(format!(
                "local data is of epoch {:?}, newer than etcd/cluster.json's {epoch}: the state store went back in time; not touching anything",
                o.local_data.epoch
            ));
        }
        if i_am_seed && matches!(record.origin, Origin::ForceNewCluster { .. }) {
            // It rebuilds from its own data, never wipes it.
            return Step::ForceNewCluster;
        }
        let Some(local_epoch) = o.local_data.epoch else {
            return wait(UNKNOWN_EPOCH);
        };
        if let Some(step) = refuse_unagreed_restore(o, record, local_epoch) {
            return step;
        }
        return Step::Wipe {
            reason: format!(
                "local data is of epoch {:?}, the cluster is at epoch {epoch}",
                o.local_data.epoch
            ),
        };
    }

    // A restore waits for a seed.
    let Some(seed) = record.seed.as_deref() else {
        if let Some(step) = restore_refused_by_healthy_cluster(o, record) {
            return step;
        }
        return Step::ClaimSeed;
    };

    let healthy = o.cluster.as_ref().filter(|c| c.is_healthy());

    if i_am_seed && !o.local_data.present {
        if o.local_data.seeded_epoch.is_some_and(|e| e >= epoch) {
            // Seeded once and lost the data since: never seed twice; join like anyone else (`join`).
        } else if matches!(record.origin, Origin::ForceNewCluster { .. }) {
            return wait("this instance won a forced new cluster but its data is gone: waiting for ballast etcd restore-backup");
        } else if o.cluster.is_some() {
            return wait("etcd answers elsewhere although this instance is the epoch's seed and has not seeded it: not seeding a second cluster");
        } else {
            return Step::Seed;
        }
    }

    if o.local_data.present {
        with_current_data(o, healthy)
    } else {
        join(o, record, seed, healthy)
    }
}

/// Data present, its epoch unknown: the epoch file was lost or torn by a crash. The data may be the only copy
/// (a one-member cluster, or the survivor of a lost majority), so it is never wiped on a guess.
pub const UNKNOWN_EPOCH: &str = "local etcd data is present but its epoch file (<state_dir>/epoch, \
/var/lib/etcd/epoch on a node) is missing or unreadable, likely after a crash: not wiping what may be the only \
copy. An operator: if this data belongs to the epoch in etcd/cluster.json (ballast etcd status), write that \
number to the epoch file and the supervisor restarts etcd on it; if the cluster is healthy without this member, \
move <state_dir>/data aside and it rejoins empty";

/// A restore epoch is recorded while this member runs in a healthy cluster (a quorum of voters answers and
/// has a leader) and belongs to it: the restore was judged safe on reports that did not see this cluster (a
/// clock skew, supervisors that could not reach the store). Wiping would discard the live cluster's data for
/// an older backup, so a member of a healthy quorum wipes for a restore only when the operator asked for it
/// with `--force`; otherwise it keeps serving and says why. Once the cluster is not healthy (members wiped
/// for a forced restore, or every member gone) the restore proceeds as before.
fn refuse_unagreed_restore(
    o: &Observation,
    record: &ClusterRecord,
    local_epoch: u64,
) -> Option<Step> {
    let Origin::Restore {
        backup_id, forced, ..
    } = &record.origin
    else {
        return None;
    };
    if *forced || local_epoch >= record.epoch {
        return None;
    }
    let LocalEtcd::Running(st) = o.local_etcd else {
        return None;
    };
    let view = o.cluster.as_ref().filter(|c| c.is_healthy())?;
    let voter_of_it = st.cluster_id == view.cluster_id
        && view
            .voters()
            .any(|m| m.id == st.member_id && m.status.is_some());
    if !voter_of_it {
        return None;
    }
    Some(wait(format!(
        "etcd/cluster.json records a restore of backup {backup_id} (epoch {}) while this member is a voter of a \
         healthy cluster at epoch {local_epoch}: not discarding live data for it. To restore anyway run \
         `ballast etcd restore-backup CLUSTER {backup_id} --yes --force`",
        record.epoch
    )))
}

/// An unseeded restore epoch while a healthy cluster answers: its members refuse to wipe for it (see
/// [`refuse_unagreed_restore`]), so seeding it here would start a second cluster beside the live one.
fn restore_refused_by_healthy_cluster(o: &Observation, record: &ClusterRecord) -> Option<Step> {
    let Origin::Restore { forced: false, .. } = &record.origin else {
        return None;
    };
    o.cluster.as_ref().filter(|c| c.is_healthy())?;
    Some(wait(format!(
        "etcd/cluster.json records a restore (epoch {}) but a healthy etcd cluster still answers: not seeding a \
         second cluster beside it (a restore over a healthy cluster needs `ballast etcd restore-backup --force`)",
        record.epoch
    )))
}

/// Local data of the current epoch: keep it in the healthy cluster, or leave it if the cluster dropped it;
/// restart it, promote it, or (as leader) remove the dead and take backups.
fn with_current_data(o: &Observation, healthy: Option<&ClusterView>) -> Step {
    if let Some(view) = healthy {
        let mine = volume::my_member(o, view);
        if let LocalEtcd::Running(st) = o.local_etcd {
            if st.cluster_id != view.cluster_id {
                return Step::Wipe {
                    reason: format!(
                        "cluster ID mismatch: local etcd is in cluster {:x}, the healthy cluster is {:x}",
                        st.cluster_id, view.cluster_id
                    ),
                };
            }
            if !view.members.iter().any(|m| m.id == st.member_id) {
                return Step::Wipe {
                    reason: "this member was removed from the cluster".to_string(),
                };
            }
        } else if mine.is_none() {
            return Step::Wipe {
                reason: "this member is not in the cluster's member list (removed)".to_string(),
            };
        }
        if let Some(step) = volume::peer_url_step(o, view) {
            return step;
        }
    }
    let st = match o.local_etcd {
        LocalEtcd::Stopped => return Step::Restart,
        LocalEtcd::Unresponsive => return wait("local etcd is starting"),
        LocalEtcd::Running(st) => st,
    };
    let Some(view) = healthy else {
        return lost_majority(o, st);
    };
    if st.is_learner {
        return Step::Promote {
            member_id: st.member_id,
        };
    }
    if view.leader() == Some(st.member_id) {
        // With volumes a member whose instance is gone comes back on its replacement: not removed here (a
        // replacement with an empty volume removes it before it joins, `join`).
        if let Some(step) = remove_dead(o, view).filter(|_| !o.member_volume) {
            return step;
        }
        if o.backup_due {
            return Step::Backup;
        }
    }
    Step::Steady
}

/// No local data of the current epoch, and no seeding to do here: join the healthy cluster (as a
/// learner, after any removal it needs), or re-seed when no one has the seed's data.
fn join(
    o: &Observation,
    record: &ClusterRecord,
    seed: &str,
    healthy: Option<&ClusterView>,
) -> Step {
    let me = &o.me;
    let running = !matches!(o.local_etcd, LocalEtcd::Stopped);
    if running {
        return Step::Wipe {
            reason: "etcd runs without data of the current epoch".to_string(),
        };
    }
    let Some(view) = healthy else {
        if let Some(step) = reseed(o, record, seed) {
            return step;
        }
        return wait("no healthy cluster to join yet");
    };
    if let Some(m) = view.by_peer_url(&me.peer_url()) {
        if m.name.is_empty() {
            return Step::StartJoined { member_id: m.id };
        }
        if m.name == me.instance_id {
            return removal(
                view,
                m,
                "this instance's own member, whose data is gone: remove before re-adding",
            );
        }
        let fate = o.instance_fate(m);
        if fate.is_gone() {
            return removal(
                view,
                m,
                &format!("{} (and its IP is now this instance's)", fate.describe()),
            );
        }
        return wait(format!(
            "this instance's peer URL is held by member {}: {}",
            m.name,
            fate.describe()
        ));
    }
    if let Some(step) = remove_dead(o, view) {
        return step;
    }
    if let Some(l) = view.members.iter().find(|m| m.is_learner) {
        return Step::WaitForLearner {
            learner: Observation::label(l),
        };
    }
    Step::AddLearner
}

fn removal(view: &ClusterView, m: &MemberView, reason: &str) -> Step {
    if view.quorum_after_removing(m.id) {
        Step::RemoveMember {
            member_id: m.id,
            label: Observation::label(m),
            reason: reason.to_string(),
        }
    } else {
        wait(format!(
            "member {} should go ({reason}) but removing it would leave no healthy quorum",
            Observation::label(m)
        ))
    }
}

/// The first member whose instance EC2 confirms gone (learners first: they cost no quorum).
fn remove_dead(o: &Observation, view: &ClusterView) -> Option<Step> {
    let mut dead: Vec<(&MemberView, InstanceFate)> = view
        .members
        .iter()
        .filter(|m| m.peer_url != o.me.peer_url())
        .map(|m| (m, o.instance_fate(m)))
        .filter(|(_, fate)| fate.is_gone())
        .collect();
    dead.sort_by_key(|(m, _)| (!m.is_learner, m.id));
    dead.first()
        .map(|(m, fate)| removal(view, m, &fate.describe()))
}

/// Running, with data of the current epoch, and no healthy cluster.
fn lost_majority(o: &Observation, st: MemberStatus) -> Step {
    let Some(view) = o.cluster.as_ref() else {
        return wait("local etcd answers but no member list yet");
    };
    if st.is_learner {
        return wait("no healthy cluster; a learner never carries it");
    }
    let voters: Vec<&MemberView> = view.voters().collect();
    let survivors: Vec<&MemberView> = voters
        .iter()
        .copied()
        .filter(|m| m.status.is_some())
        .collect();
    let mut lost = Vec::new();
    if survivors.len() >= quorum(voters.len()) {
        match volume::stale_peers(o, view) {
            volume::StalePeers::Electable => {
                return wait("a majority answers but no leader yet (election)")
            }
            volume::StalePeers::Wait(step) => return step,
            volume::StalePeers::Unelectable { lost: stale } => lost = stale,
        }
    }
    for m in voters.iter().filter(|m| m.status.is_none()) {
        let fate = o.instance_fate(m);
        // On volumes a member whose instance is gone comes back with its replacement, with its data, which may be
        // newer than any survivor's: never forced over.
        if o.member_volume {
            return wait(format!(
                "no quorum, and member {} does not answer ({}): its volume brings it back with its replacement;                  waiting, not forcing",
                Observation::label(m),
                fate.describe()
            ));
        }
        if !fate.is_gone() {
            return wait(format!(
                "no quorum, and member {} does not answer but is not confirmed gone ({}): waiting, not forcing",
                Observation::label(m),
                fate.describe()
            ));
        }
        lost.push(Observation::label(m));
    }
    // The most up-to-date survivor carries the cluster; ties go to the smallest member id.
    let best = survivors.iter().max_by(|a, b| {
        let (ia, ib) = (
            a.status.map_or(0, |s| s.raft_index),
            b.status.map_or(0, |s| s.raft_index),
        );
        ia.cmp(&ib).then(b.id.cmp(&a.id))
    });
    match best {
        Some(b) if b.id == st.member_id => Step::ClaimForceNewCluster {
            raft_index: st.raft_index,
            lost_members: lost,
        },
        Some(b) => wait(format!(
            "majority lost; survivor {} has the most data and carries the cluster",
            Observation::label(b)
        )),
        None => wait("majority lost; no survivor answers"),
    }
}

/// The seed died before its cluster was joined by anyone: a new epoch seeded elsewhere.
///
/// Only then: a cluster that had members besides its seed and lost them all waits for `ballast etcd
/// restore-backup`.
fn reseed(o: &Observation, record: &ClusterRecord, seed: &str) -> Option<Step> {
    if matches!(record.origin, Origin::ForceNewCluster { .. }) || o.cluster.is_some() {
        return None;
    }
    if !o.instance_state(seed).is_some_and(|s| s.is_terminated()) {
        return None;
    }
    // Once anyone joined the epoch, its data may matter (every member terminated at once, say): no automatic
    // re-seed then, which would bring back an empty etcd; an operator restores a backup instead. Reports of
    // terminated instances count too: they are the only trace left of who held the data.
    let joined = o.reports.iter().any(|r| {
        r.local_epoch == Some(record.epoch)
            && (r.instance_id != seed || r.voting_members.len() + r.learners.len() > 1)
    });
    // A one-member cluster (one control-plane group) never has a second member: a backup with writes in it
    // says the epoch was in use.
    let written = o.epoch_backup_revision.is_some_and(|r| r > 1);
    if joined || written {
        return None;
    }
    // Every other alive instance must have said, recently, that it holds no data of this epoch.
    for i in o
        .instances
        .iter()
        .filter(|i| i.state.is_alive() && i.instance_id != o.me.instance_id)
    {
        let report = o.reports.iter().find(|r| r.instance_id == i.instance_id)?;
        if o.now_unix - report.updated_unix > REPORT_FRESHNESS_SECS
            || report.local_epoch == Some(record.epoch)
        {
            return None;
        }
    }
    Some(Step::ClaimReseed {
        reason: format!(
            "seed {seed} of epoch {} is terminated and no instance holds data of that epoch",
            record.epoch
        ),
    })
}

mod fate;
mod handoff;
mod volume;

pub use fate::InstanceFate;
pub use handoff::{plan_handoff, stop_keeps_quorum, Handoff, HandoffMember};

#[cfg(test)]
mod tests;
