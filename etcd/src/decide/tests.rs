//! One table row per rule of the supervisor.

use super::*;
use crate::peers::InstanceState::{Running, Terminated};
use std::collections::BTreeMap;

const ME: &str = "i-me";
const ME_IP: &str = "127.0.0.51";

fn inst(id: &str, ip: &str, state: InstanceState) -> PeerInstance {
    PeerInstance {
        instance_id: id.to_string(),
        private_ip: ip.to_string(),
        state,
    }
}

fn record(epoch: u64, seed: Option<&str>, origin: Origin) -> ClusterRecord {
    ClusterRecord {
        epoch,
        origin,
        seed: seed.map(str::to_string),
        decided_at: "2025-01-01T00:00:00Z".to_string(),
        decided_by: "test".to_string(),
    }
}

fn status(id: u64, leader: u64, index: u64) -> MemberStatus {
    MemberStatus {
        member_id: id,
        cluster_id: 77,
        raft_index: index,
        is_learner: false,
        leader,
    }
}

/// A member; `answers` with the given leader (0: does not answer).
fn member(id: u64, name: &str, ip: &str, learner: bool, answers: Option<u64>) -> MemberView {
    MemberView {
        id,
        name: name.to_string(),
        peer_url: peer_url(ip),
        client_url: String::new(),
        is_learner: learner,
        status: answers.map(|leader| MemberStatus {
            is_learner: learner,
            ..status(id, leader, 100)
        }),
    }
}

fn view(members: Vec<MemberView>) -> Option<ClusterView> {
    Some(ClusterView {
        cluster_id: 77,
        members,
    })
}

/// A joiner (no data, etcd stopped) looking at a cluster of i-a, i-b, i-c at epoch 1 seeded by i-a.
fn joiner() -> Observation {
    Observation {
        me: Me {
            instance_id: ME.to_string(),
            ip: ME_IP.to_string(),
            peer_name: None,
        },
        record: Some(record(1, Some("i-a"), Origin::Bootstrap)),
        local_data: LocalData::default(),
        local_etcd: LocalEtcd::Stopped,
        instances: vec![
            inst("i-a", "127.0.0.11", Running),
            inst("i-b", "127.0.0.12", Running),
            inst(ME, ME_IP, Running),
        ],
        unlisted: BTreeMap::new(),
        cluster: view(vec![
            member(1, "i-a", "127.0.0.11", false, Some(1)),
            member(2, "i-b", "127.0.0.12", false, Some(1)),
        ]),
        reports: vec![],
        epoch_backup_revision: None,
        now_unix: 1000,
        backup_due: false,
        member_volume: false,
        peer_hosts: BTreeMap::new(),
    }
}

/// A running voter `me` (id 3) in a healthy 3-member cluster led by `leader`.
fn member_of_three(leader: u64) -> Observation {
    let mut o = joiner();
    o.local_data = LocalData {
        present: true,
        epoch: Some(1),
        seeded_epoch: None,
        member_id: None,
    };
    o.local_etcd = LocalEtcd::Running(status(3, leader, 100));
    o.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(leader)),
        member(2, "i-b", "127.0.0.12", false, Some(leader)),
        member(3, ME, ME_IP, false, Some(leader)),
    ]);
    o
}

fn is_wait(step: &Step) -> bool {
    matches!(step, Step::Wait { .. })
}

#[test]
fn bootstrap_only_without_record_data_or_answering_peers() {
    let mut o = joiner();
    o.record = None;
    o.cluster = None;
    assert_eq!(decide(&o), Step::ClaimBootstrap);

    let mut with_data = o.clone();
    with_data.local_data.present = true;
    assert!(
        is_wait(&decide(&with_data)),
        "never bootstrap over local data"
    );

    let mut peers_answer = o.clone();
    peers_answer.cluster = joiner().cluster;
    assert!(is_wait(&decide(&peers_answer)), "never a second cluster");
}

#[test]
fn unreachable_peers_never_create_a_cluster() {
    let mut o = joiner();
    o.cluster = None;
    assert!(is_wait(&decide(&o)));
    // Even a cluster without a leader is no reason to bootstrap.
    o.cluster = view(vec![member(1, "i-a", "127.0.0.11", false, Some(0))]);
    assert!(is_wait(&decide(&o)));
}

#[test]
fn the_seed_seeds_once() {
    let mut o = joiner();
    o.record = Some(record(1, Some(ME), Origin::Bootstrap));
    o.cluster = None;
    assert_eq!(decide(&o), Step::Seed);

    let mut seeded = o.clone();
    seeded.local_data.seeded_epoch = Some(1);
    assert!(
        is_wait(&decide(&seeded)),
        "seeded before, data gone: join, never seed again"
    );

    let mut others_answer = o.clone();
    others_answer.cluster = view(vec![member(1, "i-a", "127.0.0.11", false, Some(0))]);
    assert!(is_wait(&decide(&others_answer)));

    let mut restore = o.clone();
    restore.record = Some(record(
        2,
        Some(ME),
        Origin::Restore {
            backup_id: "b".into(),
            sha256: "x".into(),
            forced: false,
        },
    ));
    assert_eq!(decide(&restore), Step::Seed);
}

#[test]
fn a_restore_without_seed_is_claimed() {
    let mut o = joiner();
    o.record = Some(record(
        2,
        None,
        Origin::Restore {
            backup_id: "b".into(),
            sha256: "x".into(),
            forced: false,
        },
    ));
    // The joiner sees the old cluster healthy: its members refuse an unforced restore, so no second cluster.
    assert!(is_wait(&decide(&o)));
    o.cluster = None;
    assert_eq!(decide(&o), Step::ClaimSeed);
    // Old data goes first.
    o.local_data = LocalData {
        present: true,
        epoch: Some(1),
        seeded_epoch: None,
        member_id: None,
    };
    assert!(matches!(decide(&o), Step::Wipe { .. }));
}

#[test]
fn join_as_learner_when_nothing_is_dead() {
    assert_eq!(decide(&joiner()), Step::AddLearner);
}

#[test]
fn remove_a_terminated_member_before_adding() {
    let mut o = joiner();
    o.instances.push(inst("i-c", "127.0.0.13", Terminated));
    o.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(1)),
        member(2, "i-b", "127.0.0.12", false, Some(1)),
        member(3, "i-c", "127.0.0.13", false, None),
    ]);
    assert!(matches!(
        decide(&o),
        Step::RemoveMember { member_id: 3, .. }
    ));
}

#[test]
fn an_unreachable_running_or_unknown_instance_is_never_removed() {
    let mut o = joiner();
    o.instances.push(inst("i-c", "127.0.0.13", Running));
    o.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(1)),
        member(2, "i-b", "127.0.0.12", false, Some(1)),
        member(3, "i-c", "127.0.0.13", false, None),
    ]);
    assert_eq!(decide(&o), Step::AddLearner);
    // Not listed by EC2 at all: unknown, not dead.
    o.instances.retain(|i| i.instance_id != "i-c");
    assert_eq!(decide(&o), Step::AddLearner);
}

#[test]
fn no_removal_without_a_healthy_quorum_of_the_rest() {
    let mut o = member_of_three(1);
    o.instances = vec![
        inst("i-a", "127.0.0.11", Running),
        inst("i-b", "127.0.0.12", Terminated),
        inst(ME, ME_IP, Running),
        inst("i-d", "127.0.0.14", Running),
    ];
    // 4 voters: a (leader), b dead, me, d unreachable: healthy (3 of 4 is not... a+me = 2 < 3), so no quorum.
    o.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(1)),
        member(2, "i-b", "127.0.0.12", false, None),
        member(3, ME, ME_IP, false, Some(1)),
        member(4, "i-d", "127.0.0.14", false, None),
    ]);
    o.local_etcd = LocalEtcd::Running(status(3, 1, 100));
    assert!(is_wait(&decide(&o)));
    // With d answering, removing b leaves a, me, d: fine — but only the leader removes.
    if let Some(c) = o.cluster.as_mut() {
        c.members[3].status = Some(status(4, 1, 100));
    }
    assert_eq!(
        decide(&o),
        Step::Steady,
        "a follower leaves removals to the leader"
    );
    o.local_etcd = LocalEtcd::Running(status(3, 3, 100));
    if let Some(c) = o.cluster.as_mut() {
        for m in c.members.iter_mut() {
            if let Some(s) = m.status.as_mut() {
                s.leader = 3;
            }
        }
    }
    assert!(matches!(
        decide(&o),
        Step::RemoveMember { member_id: 2, .. }
    ));
}

#[test]
fn quorum_after_removing_counts_answering_voters() {
    let v = ClusterView {
        cluster_id: 1,
        members: vec![
            member(1, "a", "127.0.0.1", false, Some(1)),
            member(2, "b", "127.0.0.2", false, None),
            member(3, "c", "127.0.0.3", false, None),
        ],
    };
    assert!(!v.quorum_after_removing(2), "a alone of a, c");
    assert!(!v.is_healthy());
}

#[test]
fn one_change_at_a_time() {
    let mut o = joiner();
    o.instances.push(inst("i-x", "127.0.0.19", Running));
    o.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(1)),
        member(2, "i-b", "127.0.0.12", false, Some(1)),
        member(9, "", "127.0.0.19", true, None),
    ]);
    let step = decide(&o);
    assert!(
        matches!(&step, Step::WaitForLearner { learner } if *learner == peer_url("127.0.0.19")),
        "another learner is joining: {step:?}"
    );
    assert_eq!(step.requeue(Duration::from_secs(2)), LEARNER_WAIT_POLL);
}

#[test]
fn a_leftover_learner_of_this_instance_is_started() {
    let mut o = joiner();
    o.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(1)),
        member(2, "i-b", "127.0.0.12", false, Some(1)),
        member(5, "", ME_IP, true, None),
    ]);
    assert_eq!(decide(&o), Step::StartJoined { member_id: 5 });
}

#[test]
fn this_instances_own_member_without_data_is_removed_first() {
    let mut o = joiner();
    o.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(1)),
        member(2, "i-b", "127.0.0.12", false, Some(1)),
        member(5, ME, ME_IP, false, None),
    ]);
    assert!(matches!(
        decide(&o),
        Step::RemoveMember { member_id: 5, .. }
    ));
}

#[test]
fn a_reused_ip_is_freed_only_from_a_terminated_instance() {
    let mut o = joiner();
    o.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(1)),
        member(2, "i-b", "127.0.0.12", false, Some(1)),
        member(5, "i-old", ME_IP, false, None),
    ]);
    o.instances.push(inst("i-old", ME_IP, Terminated));
    assert!(matches!(
        decide(&o),
        Step::RemoveMember { member_id: 5, .. }
    ));
    o.instances.retain(|i| i.instance_id != "i-old");
    o.instances.push(inst("i-old", ME_IP, Running));
    assert!(is_wait(&decide(&o)));
}

#[test]
fn existing_data_restarts_and_stale_data_is_wiped() {
    let mut o = member_of_three(1);
    o.local_etcd = LocalEtcd::Stopped;
    assert_eq!(decide(&o), Step::Restart);

    o.local_data.epoch = Some(0);
    assert!(matches!(decide(&o), Step::Wipe { .. }));
    o.local_data.epoch = None;
    assert!(
        is_wait(&decide(&o)),
        "an unknown epoch (a crash lost the epoch file) is never wiped"
    );
    o.local_data.epoch = Some(5);
    assert!(is_wait(&decide(&o)), "newer than the record: touch nothing");
}

#[test]
fn a_stopped_member_missing_from_the_healthy_cluster_was_removed() {
    let mut o = member_of_three(1);
    o.local_etcd = LocalEtcd::Stopped;
    if let Some(c) = o.cluster.as_mut() {
        c.members.retain(|m| m.id != 3);
    }
    assert!(matches!(decide(&o), Step::Wipe { .. }));
}

#[test]
fn running_member_checks() {
    let o = member_of_three(1);
    assert_eq!(decide(&o), Step::Steady);

    let mut learner = o.clone();
    learner.local_etcd = LocalEtcd::Running(MemberStatus {
        is_learner: true,
        ..status(3, 1, 100)
    });
    if let Some(c) = learner.cluster.as_mut() {
        c.members[2].is_learner = true;
    }
    assert_eq!(decide(&learner), Step::Promote { member_id: 3 });

    let mut removed = o.clone();
    if let Some(c) = removed.cluster.as_mut() {
        c.members.retain(|m| m.id != 3);
    }
    assert!(matches!(decide(&removed), Step::Wipe { .. }));

    let mut mismatch = o.clone();
    mismatch.local_etcd = LocalEtcd::Running(MemberStatus {
        cluster_id: 99,
        ..status(3, 1, 100)
    });
    assert!(matches!(decide(&mismatch), Step::Wipe { .. }));

    let mut unresponsive = o.clone();
    unresponsive.local_etcd = LocalEtcd::Unresponsive;
    assert!(is_wait(&decide(&unresponsive)));
}

#[test]
fn the_leader_removes_dead_members_and_takes_backups() {
    let mut o = member_of_three(3);
    o.backup_due = true;
    assert_eq!(decide(&o), Step::Backup);
    let mut follower = member_of_three(1);
    follower.backup_due = true;
    assert_eq!(decide(&follower), Step::Steady);

    o.instances[1].state = Terminated; // i-b
    if let Some(c) = o.cluster.as_mut() {
        c.members[1].status = None;
    }
    assert!(matches!(
        decide(&o),
        Step::RemoveMember { member_id: 2, .. }
    ));
}

fn lost_two() -> Observation {
    let mut o = member_of_three(0);
    o.local_etcd = LocalEtcd::Running(status(3, 0, 500));
    o.instances[0].state = Terminated;
    o.instances[1].state = Terminated;
    o.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, None),
        member(2, "i-b", "127.0.0.12", false, None),
        MemberView {
            status: Some(status(3, 0, 500)),
            ..member(3, ME, ME_IP, false, None)
        },
    ]);
    o
}

#[test]
fn lost_majority_forces_only_with_every_other_voter_terminated() {
    let o = lost_two();
    assert_eq!(
        decide(&o),
        Step::ClaimForceNewCluster {
            raft_index: 500,
            lost_members: vec!["i-a".into(), "i-b".into()]
        }
    );
    let mut one_alive = o.clone();
    one_alive.instances[1].state = Running;
    assert!(
        is_wait(&decide(&one_alive)),
        "i-b may be partitioned, not dead"
    );

    let mut unknown = o.clone();
    unknown.instances.retain(|i| i.instance_id != "i-b");
    assert!(is_wait(&decide(&unknown)), "unknown is not terminated");
}

#[test]
fn lost_majority_the_most_up_to_date_survivor_wins() {
    // 5 voters, 2 survivors: me at 500, i-d at 600; the rest terminated.
    let mut o = lost_two();
    o.instances.push(inst("i-d", "127.0.0.14", Running));
    o.instances.push(inst("i-e", "127.0.0.15", Terminated));
    if let Some(c) = o.cluster.as_mut() {
        c.members.push(MemberView {
            status: Some(status(4, 0, 600)),
            ..member(4, "i-d", "127.0.0.14", false, None)
        });
        c.members.push(member(5, "i-e", "127.0.0.15", false, None));
    }
    assert!(is_wait(&decide(&o)));
    if let Some(c) = o.cluster.as_mut() {
        c.members[3].status = Some(status(4, 0, 400));
    }
    assert!(matches!(decide(&o), Step::ClaimForceNewCluster { .. }));
}

#[test]
fn a_learner_never_carries_the_cluster() {
    let mut o = lost_two();
    o.local_etcd = LocalEtcd::Running(MemberStatus {
        is_learner: true,
        ..status(3, 0, 500)
    });
    assert!(is_wait(&decide(&o)));
}

#[test]
fn a_forced_epoch_is_carried_by_its_seed_and_wipes_the_others() {
    let mut o = lost_two();
    o.record = Some(record(
        2,
        Some(ME),
        Origin::ForceNewCluster {
            raft_index: 500,
            lost_members: vec![],
        },
    ));
    assert_eq!(decide(&o), Step::ForceNewCluster);
    o.record = Some(record(
        2,
        Some("i-d"),
        Origin::ForceNewCluster {
            raft_index: 500,
            lost_members: vec![],
        },
    ));
    assert!(matches!(decide(&o), Step::Wipe { .. }));
}

#[test]
fn a_dead_seed_is_replaced_only_when_no_one_holds_its_data() {
    let mut o = joiner();
    o.cluster = None;
    o.instances[0].state = Terminated; // the seed i-a
    let report = |id: &str, epoch: Option<u64>, at: i64| HealthReport {
        instance_id: id.to_string(),
        peer_url: String::new(),
        client_url: String::new(),
        updated_at: String::new(),
        updated_unix: at,
        local_epoch: epoch,
        running: false,
        member_id: None,
        is_learner: false,
        is_leader: false,
        raft_index: 0,
        cluster_healthy: false,
        voting_members: vec![],
        learners: vec![],
        last_step: String::new(),
        last_error: None,
    };
    assert!(is_wait(&decide(&o)), "i-b has not reported");
    o.reports = vec![report("i-b", Some(1), 995)];
    assert!(is_wait(&decide(&o)), "i-b holds the epoch's data");
    o.reports = vec![report("i-b", None, 900)];
    assert!(is_wait(&decide(&o)), "stale report");
    o.reports = vec![report("i-b", None, 995)];
    assert!(matches!(decide(&o), Step::ClaimReseed { .. }));

    // Someone joined the epoch once (here the terminated i-c; or the seed saw a second member): every member
    // is gone, and an automatic re-seed would bring back an empty etcd. Wait for a restore instead.
    o.reports = vec![report("i-b", None, 995), report("i-c", Some(1), 100)];
    assert!(is_wait(&decide(&o)), "i-c held the epoch's data once");
    let mut seed = report("i-a", Some(1), 100);
    seed.voting_members = vec!["i-a".into(), "i-c".into()];
    o.reports = vec![report("i-b", None, 995), seed.clone()];
    assert!(is_wait(&decide(&o)), "the seed had a second member");
    seed.voting_members = vec!["i-a".into()];
    o.reports = vec![report("i-b", None, 995), seed];
    assert!(
        matches!(decide(&o), Step::ClaimReseed { .. }),
        "the seed alone, never joined"
    );
    // ... unless the epoch held writes (a one-member cluster in use): its backups say so.
    o.epoch_backup_revision = Some(1);
    assert!(
        matches!(decide(&o), Step::ClaimReseed { .. }),
        "an empty backup"
    );
    o.epoch_backup_revision = Some(250);
    assert!(is_wait(&decide(&o)), "a backup with writes");
}

#[test]
fn urls() {
    assert_eq!(peer_url("10.0.0.1"), "https://10.0.0.1:2380");
    assert_eq!(url_host("https://10.0.0.1:2380"), "10.0.0.1");
    assert_eq!(quorum(3), 2);
    assert_eq!(quorum(4), 3);
    assert_eq!(quorum(1), 1);
}

fn restore_record(epoch: u64, forced: bool) -> ClusterRecord {
    record(
        epoch,
        None,
        Origin::Restore {
            backup_id: "b".into(),
            sha256: "x".into(),
            forced,
        },
    )
}

fn wait_reason(step: &Step) -> &str {
    match step {
        Step::Wait { reason } => reason,
        other => panic!("expected a wait, got {other:?}"),
    }
}

#[test]
fn data_with_an_unknown_epoch_waits_and_says_what_to_do() {
    // A one-member cluster whose epoch file a crash lost: the data is the only copy.
    let mut o = joiner();
    o.record = Some(record(1, Some(ME), Origin::Bootstrap));
    o.instances = vec![inst(ME, ME_IP, Running)];
    o.cluster = None;
    o.local_data = LocalData {
        present: true,
        epoch: None,
        seeded_epoch: Some(1),
        member_id: None,
    };
    for etcd in [
        LocalEtcd::Stopped,
        LocalEtcd::Unresponsive,
        LocalEtcd::Running(status(3, 3, 100)),
    ] {
        o.local_etcd = etcd;
        let step = decide(&o);
        assert!(wait_reason(&step).contains("epoch file"), "{step:?}");
    }
    // A member of three, and a restore or a forced epoch elsewhere: still no wipe on a guess.
    let mut m = member_of_three(1);
    m.local_data.epoch = None;
    assert!(is_wait(&decide(&m)));
    m.record = Some(restore_record(2, true));
    assert!(is_wait(&decide(&m)));
    m.record = Some(record(
        2,
        Some("i-a"),
        Origin::ForceNewCluster {
            raft_index: 1,
            lost_members: vec![],
        },
    ));
    assert!(is_wait(&decide(&m)));
}

#[test]
fn a_healthy_quorum_refuses_an_unforced_restore() {
    let mut o = member_of_three(1);
    o.record = Some(restore_record(2, false));
    let step = decide(&o);
    assert!(wait_reason(&step).contains("--force"), "{step:?}");
    // Also as the leader, and as a follower of another leader.
    let mut leader = member_of_three(3);
    leader.record = Some(restore_record(2, false));
    assert!(is_wait(&decide(&leader)));

    // Forced: the operator said so.
    o.record = Some(restore_record(2, true));
    assert!(matches!(decide(&o), Step::Wipe { .. }));

    // The cluster is not healthy any more (the others wiped, or died): the restore proceeds.
    let mut lost = member_of_three(1);
    lost.record = Some(restore_record(2, false));
    if let Some(c) = lost.cluster.as_mut() {
        for m in c.members.iter_mut().filter(|m| m.id != 3) {
            m.status = None;
        }
    }
    assert!(matches!(decide(&lost), Step::Wipe { .. }));

    // Its etcd is not running: it is no part of a live quorum.
    let mut stopped = member_of_three(1);
    stopped.record = Some(restore_record(2, false));
    stopped.local_etcd = LocalEtcd::Stopped;
    assert!(matches!(decide(&stopped), Step::Wipe { .. }));

    // Running in another cluster than the healthy one: not its quorum.
    let mut other = member_of_three(1);
    other.record = Some(restore_record(2, false));
    other.local_etcd = LocalEtcd::Running(MemberStatus {
        cluster_id: 99,
        ..status(3, 1, 100)
    });
    assert!(matches!(decide(&other), Step::Wipe { .. }));
}

/// A joiner whose IP was i-old's, a member that does not answer and whose instance EC2 no longer lists (neither
/// by tags nor by id) for `for_secs`.
fn ip_held_by_unlisted(for_secs: u64) -> Observation {
    let mut o = joiner();
    o.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(1)),
        member(2, "i-b", "127.0.0.12", false, Some(1)),
        member(5, "i-old", ME_IP, false, None),
    ]);
    o.unlisted
        .insert("i-old".to_string(), Duration::from_secs(for_secs));
    o
}

#[test]
fn an_unlisted_instance_counts_as_terminated_only_after_the_grace_period() {
    let o = ip_held_by_unlisted(60);
    let step = decide(&o);
    assert!(
        wait_reason(&step).contains("not listed by EC2 yet for 60 s (waiting for the grace period"),
        "{step:?}"
    );
    assert!(!wait_reason(&step).contains("not terminated"), "{step:?}");

    let o = ip_held_by_unlisted(UNLISTED_GRACE.as_secs());
    match decide(&o) {
        Step::RemoveMember {
            member_id: 5,
            reason,
            ..
        } => assert!(
            reason.contains("its instance i-old is no longer listed by EC2 (terminated more than"),
            "{reason}"
        ),
        other => panic!("expected the removal of i-old, got {other:?}"),
    }
}

#[test]
fn a_listed_instance_says_its_state_and_an_unknown_one_is_never_removed() {
    let mut running = ip_held_by_unlisted(3600);
    running.unlisted.clear();
    running
        .instances
        .push(inst("i-old", ME_IP, InstanceState::Stopped));
    let step = decide(&running);
    assert!(wait_reason(&step).contains("(state stopped)"), "{step:?}");

    // The lookup by id failed (an API error): not in `unlisted`, unknown, whatever the time.
    let mut unknown = ip_held_by_unlisted(3600);
    unknown.unlisted.clear();
    let step = decide(&unknown);
    assert!(wait_reason(&step).contains("EC2 does not say"), "{step:?}");

    let mut lost = lost_two();
    lost.instances.retain(|i| i.instance_id != "i-b");
    assert!(
        is_wait(&decide(&lost)),
        "unknown never forces a new cluster"
    );
}

#[test]
fn the_leader_removes_an_unlisted_member_past_the_grace_when_quorum_allows() {
    let mut o = member_of_three(3);
    o.instances.retain(|i| i.instance_id != "i-b");
    if let Some(c) = o.cluster.as_mut() {
        c.members[1].status = None;
    }
    o.unlisted
        .insert("i-b".to_string(), UNLISTED_GRACE - Duration::from_secs(1));
    assert_eq!(decide(&o), Step::Steady, "within the grace: kept");
    o.unlisted.insert("i-b".to_string(), UNLISTED_GRACE);
    assert!(matches!(
        decide(&o),
        Step::RemoveMember { member_id: 2, .. }
    ));

    // Four voters, i-d unreachable too: a and me of four are no healthy quorum, so nothing is removed.
    o.instances.push(inst("i-d", "127.0.0.14", Running));
    if let Some(c) = o.cluster.as_mut() {
        c.members.push(member(4, "i-d", "127.0.0.14", false, None));
    }
    let step = decide(&o);
    assert!(is_wait(&step), "{step:?}");
    assert!(
        wait_reason(&step).contains("not confirmed gone"),
        "i-d is running: {step:?}"
    );
}

#[test]
fn an_unlisted_member_that_answers_is_never_removed() {
    let mut o = member_of_three(3);
    o.instances.retain(|i| i.instance_id != "i-b");
    o.unlisted
        .insert("i-b".to_string(), Duration::from_secs(24 * 3600));
    assert_eq!(decide(&o), Step::Steady, "i-b answers: not gone");
    let Some(c) = o.cluster.as_ref() else {
        panic!("a cluster");
    };
    assert!(matches!(
        o.instance_fate(&c.members[1]),
        InstanceFate::UnlistedButAnswers { .. }
    ));
}

#[test]
fn lost_majority_counts_an_unlisted_voter_as_terminated_only_after_the_grace() {
    let mut o = lost_two();
    o.instances.retain(|i| i.instance_id != "i-b");
    o.unlisted
        .insert("i-b".to_string(), Duration::from_secs(10));
    let step = decide(&o);
    assert!(
        wait_reason(&step).contains("not listed by EC2 yet for 10 s"),
        "{step:?}"
    );
    o.unlisted.insert("i-b".to_string(), UNLISTED_GRACE);
    assert_eq!(
        decide(&o),
        Step::ClaimForceNewCluster {
            raft_index: 500,
            lost_members: vec!["i-a".into(), "i-b".into()]
        }
    );
}

// Members on their own volumes (decide/volume.rs).

/// `me` restarted on its predecessor's volume: data of epoch 1 of member 3, which the cluster lists at the
/// terminated predecessor's IP; the two others form a healthy quorum led by 1.
fn reattached() -> Observation {
    let mut o = member_of_three(1);
    o.member_volume = true;
    o.local_data.member_id = Some(3);
    o.local_etcd = LocalEtcd::Stopped;
    o.instances.push(inst("i-old", "127.0.0.13", Terminated));
    o.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(1)),
        member(2, "i-b", "127.0.0.12", false, Some(1)),
        member(3, "i-old", "127.0.0.13", false, None),
    ]);
    o
}

#[test]
fn a_reattached_member_moves_its_peer_url_and_keeps_its_id() {
    let o = reattached();
    assert_eq!(
        decide(&o),
        Step::UpdatePeerUrl {
            member_id: 3,
            from: peer_url("127.0.0.13")
        }
    );
    // Once moved, it restarts on its data: never a wipe, a removal or an add.
    let mut moved = o.clone();
    moved.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(1)),
        member(2, "i-b", "127.0.0.12", false, Some(1)),
        member(3, "i-old", ME_IP, false, None),
    ]);
    assert_eq!(decide(&moved), Step::Restart);
    // Running before the move (no quorum then): moved as soon as there is one.
    let mut running = o.clone();
    running.local_etcd = LocalEtcd::Running(status(3, 1, 100));
    assert!(matches!(
        decide(&running),
        Step::UpdatePeerUrl { member_id: 3, .. }
    ));
}

#[test]
fn without_its_member_id_a_reattached_member_is_taken_for_removed() {
    // Data from before the member marker: matched by peer URL as before, and not found.
    let mut o = reattached();
    o.local_data.member_id = None;
    assert!(matches!(decide(&o), Step::Wipe { .. }));
}

#[test]
fn a_member_that_answers_elsewhere_or_runs_on_a_live_instance_is_not_moved() {
    let mut answers = reattached();
    if let Some(v) = answers.cluster.as_mut() {
        v.members[2].status = Some(status(3, 1, 100));
    }
    assert!(is_wait(&decide(&answers)), "{:?}", decide(&answers));
    let mut alive = reattached();
    alive.instances.retain(|i| i.instance_id != "i-old");
    alive.instances.push(inst("i-old", "127.0.0.13", Running));
    assert!(is_wait(&decide(&alive)), "{:?}", decide(&alive));
}

#[test]
fn a_reused_ip_held_by_a_dead_member_is_freed_first() {
    let mut o = reattached();
    o.instances.push(inst("i-dead", ME_IP, Terminated));
    if let Some(v) = o.cluster.as_mut() {
        v.members.push(member(4, "i-dead", ME_IP, true, None));
    }
    assert!(matches!(
        decide(&o),
        Step::RemoveMember { member_id: 4, .. }
    ));
}

#[test]
fn with_volumes_the_leader_keeps_a_gone_members_place_for_its_volume() {
    let mut o = member_of_three(3);
    o.instances[0].state = Terminated;
    if let Some(v) = o.cluster.as_mut() {
        v.members[0].status = None;
    }
    assert!(matches!(
        decide(&o),
        Step::RemoveMember { member_id: 1, .. }
    ));
    o.member_volume = true;
    assert_eq!(decide(&o), Step::Steady);
    // A replacement whose volume is empty (a new volume) removes it before it joins.
    let mut joiner = joiner();
    joiner.member_volume = true;
    joiner.instances[0].state = Terminated;
    joiner.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, None),
        member(2, "i-b", "127.0.0.12", false, Some(2)),
        member(3, "i-c", "127.0.0.13", false, Some(2)),
    ]);
    joiner.instances.push(inst("i-c", "127.0.0.13", Running));
    assert!(matches!(
        decide(&joiner),
        Step::RemoveMember { member_id: 1, .. }
    ));
}

/// Every control-plane instance replaced at once, the three volumes re-attached: the members answer at new IPs
/// but are listed at their terminated predecessors' (`me` is member 3, at raft index `my_index`).
fn all_reattached(my_index: u64) -> Observation {
    let mut o = member_of_three(0);
    o.member_volume = true;
    o.local_data.member_id = Some(3);
    o.local_etcd = LocalEtcd::Running(status(3, 0, my_index));
    o.instances = vec![
        inst("i-a2", "127.0.0.21", Running),
        inst("i-b2", "127.0.0.22", Running),
        inst(ME, ME_IP, Running),
        inst("i-a", "127.0.0.11", Terminated),
        inst("i-b", "127.0.0.12", Terminated),
        inst("i-old", "127.0.0.13", Terminated),
    ];
    let mut mine = member(3, "i-old", "127.0.0.13", false, Some(0));
    mine.status = Some(status(3, 0, my_index));
    o.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(0)),
        member(2, "i-b", "127.0.0.12", false, Some(0)),
        mine,
    ]);
    o
}

#[test]
fn every_member_reattached_at_once_the_most_up_to_date_carries_the_cluster() {
    // The others (raft index 100) are behind: this member forces a new cluster from its data, which keeps the
    // cluster ID, its member ID and every write a majority acknowledged.
    let o = all_reattached(120);
    let Step::ClaimForceNewCluster {
        raft_index,
        lost_members,
    } = decide(&o)
    else {
        panic!("{:?}", decide(&o));
    };
    assert_eq!(raft_index, 120);
    assert_eq!(lost_members.len(), 3, "{lost_members:?}");
    // Behind the others: it waits for the one that carries it (ties go to the smallest member id).
    let behind = all_reattached(90);
    let Step::Wait { reason } = decide(&behind) else {
        panic!("{:?}", decide(&behind));
    };
    assert!(reason.contains("carries the cluster"), "{reason}");
    // A member that does not answer yet may hold newer data on its volume: never forced over, gone or not.
    let mut silent = all_reattached(120);
    if let Some(v) = silent.cluster.as_mut() {
        v.members[0].status = None;
    }
    let Step::Wait { reason } = decide(&silent) else {
        panic!("{:?}", decide(&silent));
    };
    assert!(reason.contains("its volume brings it back"), "{reason}");
    // Without volumes the members that answer are never forced over.
    let mut no_volumes = all_reattached(120);
    no_volumes.member_volume = false;
    assert!(is_wait(&decide(&no_volumes)));
}

#[test]
fn a_stale_majority_whose_old_instance_may_live_is_not_forced() {
    let mut o = all_reattached(120);
    o.instances.retain(|i| i.instance_id != "i-b");
    o.instances
        .push(inst("i-b", "127.0.0.12", InstanceState::Stopped));
    let Step::Wait { reason } = decide(&o) else {
        panic!("{:?}", decide(&o));
    };
    assert!(reason.contains("not forcing"), "{reason}");
}

#[test]
fn one_reattached_member_beside_a_reachable_majority_waits_for_the_election() {
    // Two members at alive IPs can elect a leader without the third: never force then.
    let mut o = all_reattached(120);
    o.instances.push(inst("i-a", "127.0.0.11", Running));
    o.instances.push(inst("i-b", "127.0.0.12", Running));
    o.instances
        .retain(|i| !(i.state == Terminated && (i.instance_id == "i-a" || i.instance_id == "i-b")));
    let Step::Wait { reason } = decide(&o) else {
        panic!("{:?}", decide(&o));
    };
    assert!(reason.contains("election"), "{reason}");
}

#[test]
fn every_member_reattached_at_once_with_peer_names_waits_for_its_own_election_never_forces() {
    // Peer URLs by name: the members are listed at their names, which now resolve to the replacements. The same
    // cluster elects a leader by itself; nothing is forced, nothing removed.
    let mut o = all_reattached(120);
    o.me.peer_name = Some("etcd-c.internal.x".to_string());
    let by_name = [
        ("etcd-a.internal.x", "127.0.0.21"),
        ("etcd-b.internal.x", "127.0.0.22"),
        ("etcd-c.internal.x", ME_IP),
    ];
    o.peer_hosts = by_name
        .iter()
        .map(|(n, ip)| (n.to_string(), ip.to_string()))
        .collect();
    if let Some(v) = o.cluster.as_mut() {
        for (m, (name, _)) in v.members.iter_mut().zip(by_name) {
            m.peer_url = peer_url(name);
        }
    }
    let Step::Wait { reason } = decide(&o) else {
        panic!("{:?}", decide(&o));
    };
    assert!(reason.contains("election"), "{reason}");
    // Two of them not started yet: still never forced (their volumes bring them back).
    if let Some(v) = o.cluster.as_mut() {
        v.members[0].status = None;
        v.members[1].status = None;
    }
    let Step::Wait { reason } = decide(&o) else {
        panic!("{:?}", decide(&o));
    };
    assert!(reason.contains("its volume brings it back"), "{reason}");
}

#[test]
fn a_member_by_name_is_already_where_it_belongs_and_one_by_ip_moves_to_its_name() {
    // Healthy, this member listed by its name: nothing to move.
    let mut o = member_of_three(3);
    o.member_volume = true;
    o.me.peer_name = Some("etcd-c.internal.x".to_string());
    o.peer_hosts = [("etcd-c.internal.x".to_string(), ME_IP.to_string())].into();
    o.local_data.member_id = Some(3);
    if let Some(v) = o.cluster.as_mut() {
        v.members[2].peer_url = peer_url("etcd-c.internal.x");
    }
    assert_eq!(decide(&o), Step::Steady);
    // Listed by its IP (a cluster from before peer names): moved to its name through the quorum, keeping its ID.
    if let Some(v) = o.cluster.as_mut() {
        v.members[2].peer_url = peer_url(ME_IP);
    }
    assert!(matches!(
        decide(&o),
        Step::UpdatePeerUrl { member_id: 3, .. }
    ));
}

#[test]
fn a_cluster_is_quiet_only_while_every_member_is_a_started_voter_that_answers() {
    let quiet = member_of_three(1);
    assert!(quiet.is_quiet());
    assert_eq!(decide(&quiet), Step::Steady);

    // Each of these is what an EC2 change looks like from etcd, and ends the quiet.
    let mut unanswered = member_of_three(1);
    unanswered.cluster = view(vec![
        member(1, "i-a", "127.0.0.11", false, Some(1)),
        member(2, "i-b", "127.0.0.12", false, None),
        member(3, ME, ME_IP, false, Some(1)),
    ]);
    assert!(!unanswered.is_quiet(), "a member that does not answer");
    let mut learner = member_of_three(1);
    if let Some(v) = learner.cluster.as_mut() {
        v.members
            .push(member(4, "i-d", "127.0.0.14", true, Some(1)));
    }
    assert!(!learner.is_quiet(), "a learner joining");
    let mut unstarted = member_of_three(1);
    if let Some(v) = unstarted.cluster.as_mut() {
        v.members.push(member(4, "", "127.0.0.14", false, None));
    }
    assert!(!unstarted.is_quiet(), "a member added but never started");
    let mut stopped = member_of_three(1);
    stopped.local_etcd = LocalEtcd::Stopped;
    assert!(!stopped.is_quiet(), "this member's etcd not running");
    let mut unlisted = member_of_three(1);
    unlisted
        .unlisted
        .insert("i-b".to_string(), Duration::from_secs(1));
    assert!(
        !unlisted.is_quiet(),
        "a member's instance EC2 does not list"
    );
    let mut leaderless = member_of_three(0);
    leaderless.local_etcd = LocalEtcd::Running(status(3, 0, 100));
    assert!(!leaderless.is_quiet(), "no leader");
    assert!(!joiner().is_quiet(), "a joiner");
}

/// etcd's strict reconfiguration check is off (`process::etcd_args`): a promotion is decided only on a healthy
/// view (a quorum of voters answering), and that must leave a quorum of the voters after the promotion, counting
/// the learner whose etcd runs. Every size up to the largest control plane a spec allows, and beyond.
#[test]
fn a_healthy_cluster_keeps_a_quorum_after_promoting_its_learner() {
    for voters in 1..=9u64 {
        for answering in 0..=voters {
            let mut members: Vec<MemberView> = (1..=voters)
                .map(|id| {
                    let answers = (id <= answering).then_some(1);
                    member(
                        id,
                        &format!("i-{id}"),
                        &format!("127.0.1.{id}"),
                        false,
                        answers,
                    )
                })
                .collect();
            members.push(member(99, ME, ME_IP, true, Some(1)));
            let view = view(members).expect("a view of the members");
            if !view.is_healthy() {
                continue;
            }
            let after = usize::try_from(voters + 1).expect("small");
            let answering_after = usize::try_from(answering + 1).expect("small");
            assert!(
                answering_after >= quorum(after),
                "{voters} voters, {answering} answering: a promotion would leave {answering_after} of {after}"
            );
        }
    }

    // And decide promotes a learner only in a healthy cluster: one voter of three answering is no quorum.
    let mut o = member_of_three(1);
    o.local_etcd = LocalEtcd::Running(MemberStatus {
        is_learner: true,
        ..status(3, 1, 100)
    });
    if let Some(c) = o.cluster.as_mut() {
        c.members[2].is_learner = true;
        c.members.push(member(4, "i-d", "127.0.0.14", false, None));
        c.members[1].status = None;
    }
    assert!(is_wait(&decide(&o)), "{:?}", decide(&o));
}
