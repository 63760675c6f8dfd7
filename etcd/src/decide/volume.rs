//! Members on their own EBS volumes: the volume is the member's identity. A replacement instance re-attaches its
//! predecessor's volume (nodeup) and finds on it the data, the epoch and the member ID (`<state_dir>/member`).
//! The member is then this instance's although the member list still names the old instance's peer URL: it is
//! moved to this instance's URL (MemberUpdate, through the healthy quorum) and restarted on its data, keeping
//! its ID; it is never removed and added again.

use std::collections::BTreeSet;

use super::{
    quorum, removal, wait, ClusterView, InstanceFate, LocalEtcd, MemberView, Observation, Step,
};

/// This instance's member in the view: the member its local data belongs to (the running etcd's ID, else the
/// recorded one), else the member with this instance's peer URL.
pub(super) fn my_member<'a>(o: &Observation, view: &'a ClusterView) -> Option<&'a MemberView> {
    let id = match o.local_etcd {
        LocalEtcd::Running(st) => Some(st.member_id),
        _ => o.local_data.member_id,
    };
    id.and_then(|id| view.members.iter().find(|m| m.id == id))
        .or_else(|| view.by_peer_url(&o.me.peer_url()))
}

/// With local data of the current epoch and a healthy cluster: when this instance's member is listed with
/// another peer URL (its volume came from another instance), the step that moves it here, or why not yet.
pub(super) fn peer_url_step(o: &Observation, view: &ClusterView) -> Option<Step> {
    let mine = my_member(o, view)?;
    let url = o.me.peer_url();
    if mine.peer_url == url {
        return None;
    }
    // Another member holds this instance's URL (an IP reused after its instance died): it goes first.
    if let Some(other) = view.by_peer_url(&url).filter(|m| m.id != mine.id) {
        let fate = o.instance_fate(other);
        if fate.is_gone() {
            return Some(removal(
                view,
                other,
                &format!("{} (and its IP is now this instance's)", fate.describe()),
            ));
        }
        return Some(wait(format!(
            "this instance's peer URL is held by member {:x}: {}",
            other.id,
            fate.describe()
        )));
    }
    // The member must not run anywhere else: answering from elsewhere, or on an instance EC2 lists alive, it is
    // not this instance's to move (a volume is attached to one instance at a time; this guards the rest).
    let answers_here = matches!(o.local_etcd, LocalEtcd::Running(st) if st.member_id == mine.id);
    if mine.status.is_some() && !answers_here {
        return Some(wait(format!(
            "member {:x}, whose data is here, answers at {}: not moving it",
            mine.id, mine.peer_url
        )));
    }
    if let InstanceFate::Listed { instance_id, state } = o.instance_fate(mine) {
        if state.is_alive() && instance_id != o.me.instance_id {
            return Some(wait(format!(
                "member {:x}, whose data is here, is listed on instance {instance_id}, which EC2 says is {}: not \
                 moving it",
                mine.id,
                state.as_str()
            )));
        }
    }
    Some(Step::UpdatePeerUrl {
        member_id: mine.id,
        from: mine.peer_url.clone(),
    })
}

/// Voters answer but elect no leader because they are listed with the peer URLs of instances that are gone: every
/// control-plane instance (or a majority) was replaced at once and their volumes re-attached. etcd 3.4 changes a
/// peer URL only through a quorum, which cannot form while the members dial each other's old addresses.
pub(super) enum StalePeers {
    /// Enough members are listed at addresses of alive instances to elect a leader: wait for the election.
    Electable,
    /// A majority is listed at old addresses but some old instance is not confirmed gone: wait, saying why.
    Wait(Step),
    /// A majority is listed at old addresses of instances EC2 says are gone: no quorum can ever form as listed,
    /// so the most up-to-date answering member carries the cluster with a forced new cluster from its data (same
    /// cluster ID and member ID; the others wipe and rejoin). `lost` names the members listed at old addresses.
    Unelectable { lost: Vec<String> },
}

/// Whether the answering voters can elect a leader as they are listed (see [`StalePeers`]).
pub(super) fn stale_peers(o: &Observation, view: &ClusterView) -> StalePeers {
    if !o.member_volume {
        return StalePeers::Electable;
    }
    let alive: BTreeSet<&str> = o
        .instances
        .iter()
        .filter(|i| i.state.is_alive())
        .map(|i| i.private_ip.as_str())
        .collect();
    let voters: Vec<&MemberView> = view.voters().collect();
    let (reachable, stale): (Vec<&MemberView>, Vec<&MemberView>) = voters
        .iter()
        .copied()
        .filter(|m| m.status.is_some())
        .partition(|m| alive.contains(o.peer_ip(&m.peer_url)));
    if stale.is_empty() || reachable.len() >= quorum(voters.len()) {
        return StalePeers::Electable;
    }
    let mut lost = Vec::new();
    for m in &stale {
        let fate = o.instance_fate(m);
        if !fate.is_gone() {
            return StalePeers::Wait(wait(format!(
                "member {:x} answers from a re-attached volume but is listed at its old peer URL {}, and {}: \
                 waiting, not forcing",
                m.id,
                m.peer_url,
                fate.describe()
            )));
        }
        lost.push(format!("{:x} ({})", m.id, m.peer_url));
    }
    StalePeers::Unelectable { lost }
}
