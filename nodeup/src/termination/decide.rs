//! What the handler does about one notice (pure): which instances it needs to know of, and then, per instance,
//! drain a worker, ask a control-plane node to stop its etcd member, complete a lifecycle action, or nothing.

use ballast_state::spec::Role;

use super::event::{LifecycleAction, Notice};

/// What EC2 and Auto Scaling say of an instance a notice names, asked by the handler itself: a message in the
/// queue is anyone's with `sqs:SendMessage` (the queue policy admits EventBridge's rules only, but an identity of
/// the account with that permission in its own policy can send too), so a notice is acted on only when these
/// agree with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceFacts {
    pub instance_id: String,
    /// Tagged `ballast.dev/cluster` with this cluster's name.
    pub in_cluster: bool,
    /// Its `ballast.dev/role` tag.
    pub role: Option<Role>,
    /// Its Kubernetes node name (EC2's private DNS name), when it has one.
    pub node_name: Option<String>,
    /// EC2's state name: `pending`, `running`, `stopping`, `stopped`, `shutting-down` or `terminated`.
    pub state: String,
    /// EC2's `InstanceLifecycle` is `spot`.
    pub spot: bool,
    /// Its Auto Scaling group and lifecycle state (`InService`, `Terminating:Wait`, ...), as
    /// `DescribeAutoScalingInstances` says; `None` when no group lists it.
    pub auto_scaling: Option<GroupMembership>,
}

/// An instance's place in its Auto Scaling group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMembership {
    pub group: String,
    pub lifecycle_state: String,
}

/// Auto Scaling's lifecycle state of an instance held by a terminating hook.
pub const TERMINATING_WAIT: &str = "Terminating:Wait";

/// One thing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Nothing: the message is deleted.
    Ignore { instance_id: String, reason: String },
    /// Cordon and drain the node, then complete `action` (if the notice carried one).
    Drain {
        instance_id: String,
        node: String,
        action: Option<LifecycleAction>,
    },
    /// Ask the control-plane node's own supervisor to hand leadership away and stop its member (volume and
    /// membership kept), then complete `action`. The supervisor grants the stop only while the other voters keep
    /// a quorum (`ballast_etcd::decide::stop_keeps_quorum`), and resumes the member if the instance is still
    /// running after the request's bound.
    StopEtcd {
        instance_id: String,
        reason: String,
        action: Option<LifecycleAction>,
    },
    /// Nothing to prepare (a bastion, a node Kubernetes never knew): complete the action.
    Complete { action: LifecycleAction },
}

/// The instances a notice names, to look up in EC2.
pub fn instances_of(notice: &Notice) -> Vec<String> {
    match notice {
        Notice::Terminating(action) => vec![action.instance_id.clone()],
        Notice::SpotInterruption { instance_id, .. }
        | Notice::RebalanceRecommendation { instance_id }
        | Notice::StateChange { instance_id, .. } => vec![instance_id.clone()],
        Notice::ScheduledChange { instance_ids, .. } => instance_ids.clone(),
        Notice::OtherLifecycle { .. } => Vec::new(),
    }
}

/// Whether EC2 says the instance still runs (or is starting): what a warning of an end to come is about.
fn up(facts: &InstanceFacts) -> bool {
    facts.state == "running" || facts.state == "pending"
}

/// What to do for `notice`, given what EC2 and Auto Scaling said of its instances (`facts`: those EC2 still
/// lists) and the hook whose actions this cluster's handler completes. A notice is acted on only when they
/// agree with it: a lifecycle action only for an instance of this cluster that its group (the one the action
/// names) holds in `Terminating:Wait`; a spot interruption only for a spot instance that runs; a state change only
/// when EC2 reports that state. Anything else (forged, replayed for an instance already gone, another cluster's
/// group or instance) is left alone.
pub fn plan(notice: &Notice, hook: &str, facts: &[InstanceFacts]) -> Vec<Plan> {
    let ignore = |instance_id: &str, reason: &str| Plan::Ignore {
        instance_id: instance_id.to_string(),
        reason: reason.to_string(),
    };
    let find = |id: &str| facts.iter().find(|f| f.instance_id == id);
    let ours = |id: &str| find(id).filter(|f| f.in_cluster);
    const NOT_OURS: &str = "not an instance of this cluster (or gone)";
    match notice {
        Notice::Terminating(action) => {
            let id = &action.instance_id;
            if action.hook != hook {
                return vec![ignore(id, "a lifecycle action of another hook")];
            }
            let Some(facts) = ours(id) else {
                // An instance waiting on a hook still runs: one EC2 no longer lists waits for nothing.
                return vec![ignore(id, NOT_OURS)];
            };
            match &facts.auto_scaling {
                Some(m) if m.group != action.group => {
                    return vec![ignore(
                        id,
                        &format!(
                            "the action names group {}, Auto Scaling has the instance in {}",
                            action.group, m.group
                        ),
                    )]
                }
                Some(m) if m.lifecycle_state != TERMINATING_WAIT => {
                    return vec![ignore(
                        id,
                        &format!(
                            "Auto Scaling says {}: no termination waits (a replayed or forged action)",
                            m.lifecycle_state
                        ),
                    )]
                }
                Some(_) => {}
                None => return vec![ignore(id, "in no Auto Scaling group: no action waits")],
            }
            vec![prepare(facts, "lifecycle action", Some(action.clone()))
                .unwrap_or(Plan::Complete {
                    action: action.clone(),
                })]
        }
        Notice::SpotInterruption {
            instance_id,
            action,
        } => match ours(instance_id) {
            Some(f) if !f.spot => vec![ignore(
                instance_id,
                "EC2 says the instance is not a spot instance: no spot interruption (forged)",
            )],
            Some(f) if !up(f) => vec![ignore(
                instance_id,
                &format!("EC2 says {}: gone or going already (a replayed warning)", f.state),
            )],
            Some(f) => vec![prepare(f, &format!("spot interruption ({action})"), None)
                .unwrap_or_else(|| ignore(instance_id, "no node and no etcd member to prepare"))],
            None => vec![ignore(instance_id, NOT_OURS)],
        },
        Notice::RebalanceRecommendation { instance_id } => vec![ignore(
            instance_id,
            "a rebalance recommendation is a risk, not a termination (kops's handler drains on it only when \
             asked); the interruption warning or the lifecycle action follows if it comes",
        )],
        Notice::StateChange { instance_id, state } => {
            if state != "stopping" && state != "shutting-down" {
                return vec![ignore(instance_id, &format!("state {state}: nothing to prepare"))];
            }
            match ours(instance_id) {
                Some(f) if f.state != "stopping" && f.state != "shutting-down" => vec![ignore(
                    instance_id,
                    &format!(
                        "the event says {state}, EC2 says {}: forged, or replayed after the end",
                        f.state
                    ),
                )],
                // The node's own shutdown (nodeup's SIGTERM) hands leadership away already.
                Some(f) if f.role == Some(Role::ControlPlane) => vec![ignore(
                    instance_id,
                    "a control-plane instance already shutting down hands etcd leadership away itself",
                )],
                Some(f) => vec![prepare(f, "state change", None)
                    .unwrap_or_else(|| ignore(instance_id, "no node to drain"))],
                None => vec![ignore(instance_id, NOT_OURS)],
            }
        }
        Notice::ScheduledChange {
            instance_ids,
            event_type,
        } => instance_ids
            .iter()
            .map(|id| match ours(id) {
                Some(f) if !up(f) => ignore(id, &format!("EC2 says {}: nothing to prepare", f.state)),
                // A scheduled change can be days ahead: stopping a member now would cut etcd's redundancy for
                // that long. The operator replaces the instance (rolling-update) before the date.
                Some(f) if f.role == Some(Role::ControlPlane) => ignore(
                    id,
                    &format!("{event_type} on a control-plane instance: replace it with rolling-update before the date"),
                ),
                Some(f) => prepare(f, event_type, None)
                    .unwrap_or_else(|| ignore(id, "no node to drain")),
                None => ignore(id, NOT_OURS),
            })
            .collect(),
        Notice::OtherLifecycle { transition } => {
            vec![ignore("-", &format!("{transition}: not a termination"))]
        }
    }
}

/// How an instance of the cluster is prepared for its end: `None` when there is nothing to prepare.
fn prepare(facts: &InstanceFacts, reason: &str, action: Option<LifecycleAction>) -> Option<Plan> {
    match facts.role {
        Some(Role::ControlPlane) => Some(Plan::StopEtcd {
            instance_id: facts.instance_id.clone(),
            reason: reason.to_string(),
            action,
        }),
        Some(Role::Bastion) => None,
        // Workers and API-server nodes run pods: drained.
        Some(Role::Node) | Some(Role::ApiServer) | None => {
            facts.node_name.as_ref().map(|node| Plan::Drain {
                instance_id: facts.instance_id.clone(),
                node: node.clone(),
                action,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use ballast_etcd::decide::{stop_keeps_quorum, HandoffMember, MemberStatus};

    use super::*;

    const HOOK: &str = "ballast-termination";

    fn action(id: &str, group: &str) -> LifecycleAction {
        LifecycleAction {
            group: group.into(),
            hook: HOOK.into(),
            token: "t".into(),
            instance_id: id.into(),
        }
    }

    /// An instance of the cluster as EC2 and Auto Scaling describe it.
    fn instance(
        id: &str,
        role: Role,
        state: &str,
        spot: bool,
        group: Option<(&str, &str)>,
    ) -> InstanceFacts {
        InstanceFacts {
            instance_id: id.into(),
            in_cluster: true,
            role: Some(role),
            node_name: Some(format!("{id}.internal")),
            state: state.into(),
            spot,
            auto_scaling: group.map(|(group, lifecycle_state)| GroupMembership {
                group: group.into(),
                lifecycle_state: lifecycle_state.into(),
            }),
        }
    }

    fn spot(id: &str) -> Notice {
        Notice::SpotInterruption {
            instance_id: id.into(),
            action: "terminate".into(),
        }
    }

    fn state_change(id: &str, state: &str) -> Notice {
        Notice::StateChange {
            instance_id: id.into(),
            state: state.into(),
        }
    }

    /// What a plan does, for the table.
    #[derive(Debug, PartialEq, Eq)]
    enum Does {
        Nothing,
        Drain { completes: bool },
        StopEtcd { completes: bool },
        Complete,
    }

    fn does(plans: &[Plan]) -> Vec<Does> {
        plans
            .iter()
            .map(|p| match p {
                Plan::Ignore { .. } => Does::Nothing,
                Plan::Drain { action, .. } => Does::Drain {
                    completes: action.is_some(),
                },
                Plan::StopEtcd { action, .. } => Does::StopEtcd {
                    completes: action.is_some(),
                },
                Plan::Complete { .. } => Does::Complete,
            })
            .collect()
    }

    #[test]
    fn genuine_forged_replayed_and_foreign_events_against_what_ec2_and_auto_scaling_say() {
        let cp = "control-plane-us-west-2a.demo";
        let nodes = "nodes.demo";
        let waiting_cp = instance(
            "i-c",
            Role::ControlPlane,
            "running",
            false,
            Some((cp, TERMINATING_WAIT)),
        );
        let serving_cp = instance(
            "i-c",
            Role::ControlPlane,
            "running",
            false,
            Some((cp, "InService")),
        );
        let waiting_worker = instance(
            "i-w",
            Role::Node,
            "running",
            false,
            Some((nodes, TERMINATING_WAIT)),
        );
        let running_worker = instance(
            "i-w",
            Role::Node,
            "running",
            false,
            Some((nodes, "InService")),
        );
        let spot_worker = instance(
            "i-w",
            Role::Node,
            "running",
            true,
            Some((nodes, "InService")),
        );
        let spot_cp = instance(
            "i-c",
            Role::ControlPlane,
            "running",
            true,
            Some((cp, "InService")),
        );
        let gone_worker = instance("i-w", Role::Node, "terminated", true, None);
        let gone_cp = instance("i-c", Role::ControlPlane, "terminated", false, None);
        let stopping_worker = instance(
            "i-w",
            Role::Node,
            "stopping",
            false,
            Some((nodes, "InService")),
        );
        let foreign = InstanceFacts {
            in_cluster: false,
            ..waiting_worker.clone()
        };
        let bastion = instance(
            "i-b",
            Role::Bastion,
            "running",
            false,
            Some(("bastions.demo", TERMINATING_WAIT)),
        );
        let other_hook = Notice::Terminating(LifecycleAction {
            hook: "someone-elses".into(),
            ..action("i-w", nodes)
        });
        let scheduled = Notice::ScheduledChange {
            instance_ids: vec!["i-w".into(), "i-c".into(), "i-gone".into()],
            event_type: "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED".into(),
        };
        let table: Vec<(&str, Notice, Vec<InstanceFacts>, Vec<Does>)> = vec![
            // Genuine: what EC2 and Auto Scaling say agrees with the event.
            (
                "a worker's lifecycle action",
                Notice::Terminating(action("i-w", nodes)),
                vec![waiting_worker.clone()],
                vec![Does::Drain { completes: true }],
            ),
            (
                "a control-plane lifecycle action",
                Notice::Terminating(action("i-c", cp)),
                vec![waiting_cp.clone()],
                vec![Does::StopEtcd { completes: true }],
            ),
            (
                "a bastion's lifecycle action",
                Notice::Terminating(action("i-b", "bastions.demo")),
                vec![bastion],
                vec![Does::Complete],
            ),
            (
                "a spot worker's interruption",
                spot("i-w"),
                vec![spot_worker.clone()],
                vec![Does::Drain { completes: false }],
            ),
            (
                "a spot control-plane instance's interruption",
                spot("i-c"),
                vec![spot_cp.clone()],
                vec![Does::StopEtcd { completes: false }],
            ),
            (
                "a worker stopping",
                state_change("i-w", "stopping"),
                vec![stopping_worker],
                vec![Does::Drain { completes: false }],
            ),
            (
                "a scheduled change",
                scheduled.clone(),
                vec![running_worker.clone(), serving_cp.clone()],
                vec![
                    Does::Drain { completes: false },
                    Does::Nothing,
                    Does::Nothing,
                ],
            ),
            // Forged: the event says what EC2 or Auto Scaling do not.
            (
                "a spot interruption for an on-demand control-plane instance",
                spot("i-c"),
                vec![serving_cp.clone()],
                vec![Does::Nothing],
            ),
            (
                "a spot interruption for an on-demand worker",
                spot("i-w"),
                vec![running_worker.clone()],
                vec![Does::Nothing],
            ),
            (
                "a stopping event for a running worker",
                state_change("i-w", "stopping"),
                vec![running_worker.clone()],
                vec![Does::Nothing],
            ),
            (
                "a shutting-down event for a running worker",
                state_change("i-w", "shutting-down"),
                vec![spot_worker.clone()],
                vec![Does::Nothing],
            ),
            (
                "a lifecycle action for an instance in service",
                Notice::Terminating(action("i-c", cp)),
                vec![serving_cp.clone()],
                vec![Does::Nothing],
            ),
            (
                "a lifecycle action for an instance in no group",
                Notice::Terminating(action("i-c", cp)),
                vec![InstanceFacts {
                    auto_scaling: None,
                    ..waiting_cp.clone()
                }],
                vec![Does::Nothing],
            ),
            (
                "a lifecycle action of another hook",
                other_hook,
                vec![waiting_worker.clone()],
                vec![Does::Nothing],
            ),
            (
                "a rebalance recommendation",
                Notice::RebalanceRecommendation {
                    instance_id: "i-w".into(),
                },
                vec![spot_worker.clone()],
                vec![Does::Nothing],
            ),
            // Replayed: the instance is gone already (EC2 lists a terminated instance for about an hour).
            (
                "a lifecycle action for a terminated instance",
                Notice::Terminating(action("i-c", cp)),
                vec![gone_cp.clone()],
                vec![Does::Nothing],
            ),
            (
                "a lifecycle action already completed",
                Notice::Terminating(action("i-c", cp)),
                vec![InstanceFacts {
                    auto_scaling: Some(GroupMembership {
                        group: cp.into(),
                        lifecycle_state: "Terminating:Proceed".into(),
                    }),
                    ..waiting_cp.clone()
                }],
                vec![Does::Nothing],
            ),
            (
                "a spot interruption for a terminated instance",
                spot("i-w"),
                vec![gone_worker.clone()],
                vec![Does::Nothing],
            ),
            (
                "a shutting-down event for a terminated instance",
                state_change("i-w", "shutting-down"),
                vec![gone_worker.clone()],
                vec![Does::Nothing],
            ),
            (
                "a scheduled change for a terminated instance",
                Notice::ScheduledChange {
                    instance_ids: vec!["i-w".into()],
                    event_type: "AWS_EC2_INSTANCE_STOP_SCHEDULED".into(),
                },
                vec![gone_worker],
                vec![Does::Nothing],
            ),
            (
                "an instance EC2 no longer lists",
                Notice::Terminating(action("i-x", nodes)),
                vec![],
                vec![Does::Nothing],
            ),
            // Foreign: another cluster's group or instance.
            (
                "a lifecycle action naming another cluster's group",
                Notice::Terminating(action("i-w", "nodes.other.example.com")),
                vec![waiting_worker.clone()],
                vec![Does::Nothing],
            ),
            (
                "a lifecycle action for another cluster's instance",
                Notice::Terminating(action("i-w", nodes)),
                vec![foreign.clone()],
                vec![Does::Nothing],
            ),
            (
                "a spot interruption for another cluster's instance",
                spot("i-w"),
                vec![InstanceFacts {
                    spot: true,
                    ..foreign
                }],
                vec![Does::Nothing],
            ),
        ];
        for (case, notice, facts, expected) in table {
            assert_eq!(does(&plan(&notice, HOOK, &facts)), expected, "{case}");
        }
        assert_eq!(instances_of(&scheduled).len(), 3);
    }

    /// Two interruptions at once for two of three spot control-plane instances, each matching what EC2 says (as
    /// genuine ones would, or ones forged by someone who looked): the handler plans both stops; the members'
    /// supervisors grant them one at a time, each only while the others keep a quorum, so the second waits.
    #[test]
    fn simultaneous_stops_are_granted_only_while_a_quorum_stays() {
        let facts = [
            instance(
                "i-1",
                Role::ControlPlane,
                "running",
                true,
                Some(("cp-a.demo", "InService")),
            ),
            instance(
                "i-2",
                Role::ControlPlane,
                "running",
                true,
                Some(("cp-b.demo", "InService")),
            ),
        ];
        let healthy = |id: u64| MemberStatus {
            member_id: id,
            cluster_id: 7,
            raft_index: 100,
            is_learner: false,
            leader: 3,
        };
        // Members 1, 2, 3 (instances i-1, i-2, i-3), all healthy; a granted stop takes its member's answer away.
        let mut members: Vec<HandoffMember> = (1..=3)
            .map(|id| HandoffMember {
                id,
                is_learner: false,
                status: Some(healthy(id)),
            })
            .collect();
        let mut granted = Vec::new();
        for (member, notice) in [(1u64, spot("i-1")), (2, spot("i-2"))] {
            assert_eq!(
                does(&plan(&notice, HOOK, &facts)),
                vec![Does::StopEtcd { completes: false }]
            );
            if stop_keeps_quorum(member, 7, &members).is_ok() {
                granted.push(member);
                members[usize::try_from(member - 1).expect("small")].status = None;
            }
        }
        assert_eq!(
            granted,
            vec![1],
            "the second stop would leave 1 of 3 voters"
        );
    }
}
