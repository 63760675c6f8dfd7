//! Members whose instances EC2 no longer lists: which ids to look up by id, and since when each has been absent
//! without a break. EC2 forgets a terminated instance about an hour after terminating it; `decide` treats an
//! instance absent for [`UNLISTED_GRACE`](crate::decide::UNLISTED_GRACE) like a terminated one, so the timing
//! here is a safety rule: an absence counts only while every round sees it.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::decide::{ClusterView, Me};
use crate::peers::PeerInstance;

/// The members' instance ids (their names) that the cluster's listing does not show, to be looked up by id.
/// None when the listing does not show this instance itself: that listing is not of this cluster's account and
/// region (or not complete yet), and its absences prove nothing.
pub(super) fn ids_to_look_up(
    me: &Me,
    listed: &[PeerInstance],
    view: Option<&ClusterView>,
) -> Vec<String> {
    let is_listed = |id: &str| listed.iter().any(|i| i.instance_id == id);
    if !is_listed(&me.instance_id) {
        return Vec::new();
    }
    let Some(view) = view else {
        return Vec::new();
    };
    let mut ids: Vec<String> = view
        .members
        .iter()
        .map(|m| m.name.clone())
        .filter(|name| !name.is_empty() && *name != me.instance_id && !is_listed(name))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Since when each looked-up id has been absent, after this round's lookup of `asked`. `found` is what the
/// lookup answered (`None`: it failed, so nothing is known). An id found, not asked this round, or whose lookup
/// failed drops out: its absence starts over, since an unbroken absence is what counts.
pub(super) fn track_absence(
    previous: &HashMap<String, Instant>,
    asked: &[String],
    found: Option<&[PeerInstance]>,
    now: Instant,
) -> HashMap<String, Instant> {
    let Some(found) = found else {
        return HashMap::new();
    };
    asked
        .iter()
        .filter(|id| !found.iter().any(|i| i.instance_id == **id))
        .map(|id| (id.clone(), previous.get(id).copied().unwrap_or(now)))
        .collect()
}

/// How long each id has been absent, as `decide` reads it.
pub(super) fn absent_for(
    since: &HashMap<String, Instant>,
    now: Instant,
) -> BTreeMap<String, Duration> {
    since
        .iter()
        .map(|(id, t)| (id.clone(), now.saturating_duration_since(*t)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{peer_url, MemberView};
    use crate::peers::InstanceState;

    fn inst(id: &str) -> PeerInstance {
        PeerInstance {
            instance_id: id.to_string(),
            private_ip: String::new(),
            state: InstanceState::Running,
        }
    }

    fn me() -> Me {
        Me {
            instance_id: "i-me".to_string(),
            ip: "10.0.0.1".to_string(),
            peer_name: None,
        }
    }

    fn view(names: &[&str]) -> ClusterView {
        ClusterView {
            cluster_id: 1,
            members: names
                .iter()
                .enumerate()
                .map(|(n, name)| MemberView {
                    id: n as u64 + 1,
                    name: name.to_string(),
                    peer_url: peer_url(&format!("10.0.0.{}", n + 10)),
                    client_url: String::new(),
                    is_learner: false,
                    status: None,
                })
                .collect(),
        }
    }

    #[test]
    fn only_named_members_missing_from_a_listing_that_shows_this_instance_are_looked_up() {
        let v = view(&["i-me", "i-a", "i-old", ""]);
        let listed = vec![inst("i-me"), inst("i-a")];
        assert_eq!(ids_to_look_up(&me(), &listed, Some(&v)), vec!["i-old"]);
        assert!(
            ids_to_look_up(&me(), &[inst("i-a")], Some(&v)).is_empty(),
            "a listing without this instance proves no absence"
        );
        assert!(ids_to_look_up(&me(), &listed, None).is_empty());
    }

    #[test]
    fn an_absence_counts_from_its_first_round_and_only_while_unbroken() {
        let t0 = Instant::now();
        let asked = vec!["i-old".to_string()];
        let first = track_absence(&HashMap::new(), &asked, Some(&[]), t0);
        assert_eq!(first.get("i-old"), Some(&t0));
        let t1 = t0 + Duration::from_secs(200);
        let second = track_absence(&first, &asked, Some(&[]), t1);
        assert_eq!(second.get("i-old"), Some(&t0), "kept from the first round");
        assert_eq!(
            absent_for(&second, t1).get("i-old"),
            Some(&Duration::from_secs(200))
        );

        let failed = track_absence(&second, &asked, None, t1);
        assert!(
            failed.is_empty(),
            "an API error is unknown: the absence starts over"
        );
        let found = track_absence(&second, &asked, Some(&[inst("i-old")]), t1);
        assert!(found.is_empty(), "listed again: not absent");
        let not_asked = track_absence(&second, &[], Some(&[]), t1);
        assert!(
            not_asked.is_empty(),
            "not looked up this round: not seen absent"
        );
    }
}
