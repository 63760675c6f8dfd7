//! Leadership handoff before a graceful stop (pure). A leader that is stopped leaves the cluster without a leader
//! until a follower's election timeout (1 s, randomized up to 2 s) runs out; handing leadership to an up-to-date
//! voter first (etcd's MoveLeader) makes the change a matter of one round trip. It is worth trying only while a
//! quorum follows this leader: with the peers gone, a transfer cannot complete (etcd's own transfer on SIGTERM
//! hangs for seconds then), so the stop goes ahead at once.

use super::{quorum, MemberStatus};

/// One member as the stopping node sees it right before the stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandoffMember {
    pub id: u64,
    pub is_learner: bool,
    /// What it answered just now; `None` when it did not answer in time.
    pub status: Option<MemberStatus>,
}

/// What to do before stopping the local etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handoff {
    /// This member is not the leader (or does not know one): nothing to hand over.
    NotLeader,
    /// Move leadership to this voter, then stop.
    MoveTo { member_id: u64 },
    /// This member leads, but no handoff can work: stop at once.
    Skip { reason: String },
}

/// Decides the handoff: `me` is the local member's fresh status, `members` the member list with every other
/// member's fresh status. The target is the voter (never a learner: MoveLeader refuses one) that follows this
/// leader and has the highest raft index (the one that catches up fastest), lowest id on a tie.
pub fn plan_handoff(me: &MemberStatus, members: &[HandoffMember]) -> Handoff {
    if me.leader == 0 || me.leader != me.member_id || me.is_learner {
        return Handoff::NotLeader;
    }
    let voters = members.iter().filter(|m| !m.is_learner).count();
    // Voters other than me that answered and follow me.
    let mut following: Vec<(u64, u64)> = members
        .iter()
        .filter(|m| !m.is_learner && m.id != me.member_id)
        .filter_map(|m| {
            m.status
                .filter(|s| s.leader == me.member_id && s.cluster_id == me.cluster_id)
                .map(|s| (m.id, s.raft_index))
        })
        .collect();
    if following.is_empty() {
        return Handoff::Skip {
            reason: if voters <= 1 {
                "no other voter".into()
            } else {
                "no other voter answers".into()
            },
        };
    }
    // Myself plus the followers that answered: without a quorum no new leader could be elected anyway.
    if following.len() + 1 < quorum(voters) {
        return Handoff::Skip {
            reason: format!(
                "only {} of {voters} voters answer (quorum {})",
                following.len() + 1,
                quorum(voters)
            ),
        };
    }
    following.sort_by_key(|&(id, index)| (std::cmp::Reverse(index), id));
    Handoff::MoveTo {
        member_id: following[0].0,
    }
}

/// Whether the local member may stop on a stop request (not on its own shutdown: an instance that goes, goes):
/// only while the voters other than `me` that answered just now, in this cluster and following a leader, are a
/// quorum of all the voters. Otherwise stopping it leaves the cluster without a quorum of healthy voters (two
/// requests at once on three members, or one while another member is down): the request waits, and is looked at
/// again. `Err` says why, for the log.
pub fn stop_keeps_quorum(
    me: u64,
    cluster_id: u64,
    members: &[HandoffMember],
) -> Result<(), String> {
    let voters = members.iter().filter(|m| !m.is_learner).count();
    let healthy_others = members
        .iter()
        .filter(|m| !m.is_learner && m.id != me)
        .filter(|m| {
            m.status
                .is_some_and(|s| s.cluster_id == cluster_id && s.leader != 0 && !s.is_learner)
        })
        .count();
    if healthy_others >= quorum(voters) {
        Ok(())
    } else {
        Err(format!(
            "stopping this member would leave {healthy_others} healthy of {voters} voters, fewer than a quorum of {}",
            quorum(voters)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: u64 = 7;

    fn status(member_id: u64, leader: u64, raft_index: u64) -> MemberStatus {
        MemberStatus {
            member_id,
            cluster_id: CLUSTER,
            raft_index,
            is_learner: false,
            leader,
        }
    }

    fn voter(id: u64, status: Option<MemberStatus>) -> HandoffMember {
        HandoffMember {
            id,
            is_learner: false,
            status,
        }
    }

    #[test]
    fn a_follower_hands_nothing_over() {
        let me = status(2, 1, 10);
        let members = [voter(1, Some(status(1, 1, 10))), voter(2, Some(me))];
        assert_eq!(plan_handoff(&me, &members), Handoff::NotLeader);
        let lost = status(2, 0, 10);
        assert_eq!(plan_handoff(&lost, &members), Handoff::NotLeader);
    }

    #[test]
    fn a_leader_moves_to_the_most_up_to_date_follower() {
        let me = status(1, 1, 100);
        let members = [
            voter(1, Some(me)),
            voter(2, Some(status(2, 1, 98))),
            voter(3, Some(status(3, 1, 100))),
        ];
        assert_eq!(
            plan_handoff(&me, &members),
            Handoff::MoveTo { member_id: 3 }
        );
        // A tie goes to the lowest id: the choice is stable.
        let tie = [
            voter(1, Some(me)),
            voter(3, Some(status(3, 1, 100))),
            voter(2, Some(status(2, 1, 100))),
        ];
        assert_eq!(plan_handoff(&me, &tie), Handoff::MoveTo { member_id: 2 });
    }

    #[test]
    fn a_learner_or_a_member_following_someone_else_is_never_the_target() {
        let me = status(1, 1, 100);
        let members = [
            voter(1, Some(me)),
            HandoffMember {
                id: 4,
                is_learner: true,
                status: Some(MemberStatus {
                    is_learner: true,
                    ..status(4, 1, 200)
                }),
            },
            voter(2, Some(status(2, 5, 150))),
            voter(3, Some(status(3, 1, 90))),
        ];
        // Voters 1, 2, 3: me and 3 follow me, a quorum of 3.
        assert_eq!(
            plan_handoff(&me, &members),
            Handoff::MoveTo { member_id: 3 }
        );
    }

    #[test]
    fn the_handoff_is_skipped_when_the_peers_are_gone() {
        let me = status(1, 1, 100);
        let gone = [voter(1, Some(me)), voter(2, None), voter(3, None)];
        assert!(matches!(plan_handoff(&me, &gone), Handoff::Skip { .. }));
        // One of four others answering: 2 of 5 voters, below the quorum of 3.
        let minority = [
            voter(1, Some(me)),
            voter(2, Some(status(2, 1, 100))),
            voter(3, None),
            voter(4, None),
            voter(5, None),
        ];
        let Handoff::Skip { reason } = plan_handoff(&me, &minority) else {
            panic!("a minority cannot take over");
        };
        assert!(reason.contains("2 of 5"), "{reason}");
        let alone = [voter(1, Some(me))];
        assert_eq!(
            plan_handoff(&me, &alone),
            Handoff::Skip {
                reason: "no other voter".into()
            }
        );
    }

    #[test]
    fn an_answer_from_another_cluster_does_not_count() {
        let me = status(1, 1, 100);
        let members = [
            voter(1, Some(me)),
            voter(
                2,
                Some(MemberStatus {
                    cluster_id: CLUSTER + 1,
                    ..status(2, 1, 100)
                }),
            ),
            voter(3, None),
        ];
        assert!(matches!(plan_handoff(&me, &members), Handoff::Skip { .. }));
    }

    #[test]
    fn a_stop_is_granted_only_while_the_others_keep_a_quorum() {
        let cases: [(&str, Vec<HandoffMember>, bool); 6] = [
            (
                "three healthy voters: one may stop",
                vec![
                    voter(1, Some(status(1, 2, 100))),
                    voter(2, Some(status(2, 2, 100))),
                    voter(3, Some(status(3, 2, 100))),
                ],
                true,
            ),
            (
                "another member already stopped (two requests at once): this one waits",
                vec![
                    voter(1, Some(status(1, 2, 100))),
                    voter(2, Some(status(2, 2, 100))),
                    voter(3, None),
                ],
                false,
            ),
            (
                "the others answer but know no leader",
                vec![
                    voter(1, Some(status(1, 0, 100))),
                    voter(2, Some(status(2, 0, 100))),
                    voter(3, Some(status(3, 0, 100))),
                ],
                false,
            ),
            (
                "a learner does not count towards the quorum",
                vec![
                    voter(1, Some(status(1, 2, 100))),
                    voter(2, Some(status(2, 2, 100))),
                    HandoffMember {
                        id: 4,
                        is_learner: true,
                        status: Some(MemberStatus {
                            is_learner: true,
                            ..status(4, 2, 100)
                        }),
                    },
                    voter(3, None),
                ],
                false,
            ),
            (
                "five voters, one down: one more may stop",
                vec![
                    voter(1, Some(status(1, 2, 100))),
                    voter(2, Some(status(2, 2, 100))),
                    voter(3, Some(status(3, 2, 100))),
                    voter(4, Some(status(4, 2, 100))),
                    voter(5, None),
                ],
                true,
            ),
            (
                "a single member never stops on a request",
                vec![voter(1, Some(status(1, 1, 100)))],
                false,
            ),
        ];
        for (case, members, granted) in cases {
            let verdict = stop_keeps_quorum(1, CLUSTER, &members);
            assert_eq!(verdict.is_ok(), granted, "{case}: {verdict:?}");
        }
        // An answer from another cluster is no healthy voter of this one.
        let foreign = [
            voter(1, Some(status(1, 2, 100))),
            voter(
                2,
                Some(MemberStatus {
                    cluster_id: CLUSTER + 1,
                    ..status(2, 2, 100)
                }),
            ),
            voter(3, Some(status(3, 2, 100))),
        ];
        let error = stop_keeps_quorum(1, CLUSTER, &foreign).expect_err("one healthy other");
        assert!(error.contains("1 healthy of 3 voters"), "{error}");
    }
}
