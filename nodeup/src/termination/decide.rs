//! What the handler does about one notice (pure): which instances it needs to know of, and then, per instance,
//! drain a worker, ask a control-plane node to stop its etcd member, complete a lifecycle action, or nothing.

use ballast_state::spec::Role;

use super::event::{LifecycleAction, Notice};

/// What EC2 says of an instance a notice names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceFacts {
    pub instance_id: String,
    /// Tagged `ballast.dev/cluster` with this cluster's name.
    pub in_cluster: bool,
    /// Its `ballast.dev/role` tag.
    pub role: Option<Role>,
    /// Its Kubernetes node name (EC2's private DNS name), when it has one.
    pub node_name: Option<String>,
}

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
    /// membership kept), then complete `action`.
    StopEtcd {
        instance_id: String,
        reason: String,
        action: Option<LifecycleAction>,
    },
    /// Nothing to prepare (a bastion, a node Kubernetes never knew, an instance already gone): complete it.
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

/// What to do for `notice`, given what EC2 said of its instances (`facts`: those EC2 still lists) and the hook
/// whose actions this cluster's handler completes.
pub fn plan(notice: &Notice, hook: &str, facts: &[InstanceFacts]) -> Vec<Plan> {
    let ignore = |instance_id: &str, reason: &str| Plan::Ignore {
        instance_id: instance_id.to_string(),
        reason: reason.to_string(),
    };
    let find = |id: &str| facts.iter().find(|f| f.instance_id == id);
    match notice {
        Notice::Terminating(action) => {
            let id = &action.instance_id;
            if action.hook != hook {
                return vec![ignore(id, "a lifecycle action of another hook")];
            }
            let Some(facts) = find(id) else {
                // Gone already: completing it is harmless (no active action is treated as done).
                return vec![Plan::Complete {
                    action: action.clone(),
                }];
            };
            if !facts.in_cluster {
                return vec![ignore(id, "an instance of another cluster")];
            }
            vec![prepare(facts, "lifecycle action", Some(action.clone()))
                .unwrap_or(Plan::Complete {
                    action: action.clone(),
                })]
        }
        Notice::SpotInterruption {
            instance_id,
            action,
        } => match find(instance_id).filter(|f| f.in_cluster) {
            Some(facts) => vec![prepare(facts, &format!("spot interruption ({action})"), None)
                .unwrap_or_else(|| ignore(instance_id, "no node and no etcd member to prepare"))],
            None => vec![ignore(instance_id, "not an instance of this cluster (or gone)")],
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
            match find(instance_id).filter(|f| f.in_cluster) {
                // The node's own shutdown (nodeup's SIGTERM) hands leadership away already.
                Some(f) if f.role == Some(Role::ControlPlane) => vec![ignore(
                    instance_id,
                    "a control-plane instance already shutting down hands etcd leadership away itself",
                )],
                Some(f) => vec![prepare(f, "state change", None)
                    .unwrap_or_else(|| ignore(instance_id, "no node to drain"))],
                None => vec![ignore(instance_id, "not an instance of this cluster (or gone)")],
            }
        }
        Notice::ScheduledChange {
            instance_ids,
            event_type,
        } => instance_ids
            .iter()
            .map(|id| match find(id).filter(|f| f.in_cluster) {
                // A scheduled change can be days ahead: stopping a member now would cut etcd's redundancy for
                // that long. The operator replaces the instance (rolling-update) before the date.
                Some(f) if f.role == Some(Role::ControlPlane) => ignore(
                    id,
                    &format!("{event_type} on a control-plane instance: replace it with rolling-update before the date"),
                ),
                Some(f) => prepare(f, event_type, None)
                    .unwrap_or_else(|| ignore(id, "no node to drain")),
                None => ignore(id, "not an instance of this cluster (or gone)"),
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
    use super::*;

    fn action(id: &str, hook: &str) -> LifecycleAction {
        LifecycleAction {
            group: "nodes.demo".into(),
            hook: hook.into(),
            token: "t".into(),
            instance_id: id.into(),
        }
    }

    fn facts(id: &str, role: Role, in_cluster: bool) -> InstanceFacts {
        InstanceFacts {
            instance_id: id.into(),
            in_cluster,
            role: Some(role),
            node_name: Some(format!("{id}.internal")),
        }
    }

    #[test]
    fn a_workers_lifecycle_action_is_drained_then_completed() {
        let notice = Notice::Terminating(action("i-w", "ballast-termination"));
        assert_eq!(
            plan(
                &notice,
                "ballast-termination",
                &[facts("i-w", Role::Node, true)]
            ),
            vec![Plan::Drain {
                instance_id: "i-w".into(),
                node: "i-w.internal".into(),
                action: Some(action("i-w", "ballast-termination")),
            }]
        );
    }

    #[test]
    fn a_control_plane_lifecycle_action_stops_etcd_then_completes() {
        let notice = Notice::Terminating(action("i-c", "ballast-termination"));
        assert_eq!(
            plan(
                &notice,
                "ballast-termination",
                &[facts("i-c", Role::ControlPlane, true)]
            ),
            vec![Plan::StopEtcd {
                instance_id: "i-c".into(),
                reason: "lifecycle action".into(),
                action: Some(action("i-c", "ballast-termination")),
            }]
        );
    }

    #[test]
    fn what_is_not_the_handlers_is_left_alone_and_what_is_gone_is_completed() {
        let other_hook = Notice::Terminating(action("i-w", "someone-elses"));
        assert!(matches!(
            plan(
                &other_hook,
                "ballast-termination",
                &[facts("i-w", Role::Node, true)]
            )[..],
            [Plan::Ignore { .. }]
        ));
        let notice = Notice::Terminating(action("i-x", "ballast-termination"));
        assert!(matches!(
            plan(
                &notice,
                "ballast-termination",
                &[facts("i-x", Role::Node, false)]
            )[..],
            [Plan::Ignore { .. }]
        ));
        assert_eq!(
            plan(&notice, "ballast-termination", &[]),
            vec![Plan::Complete {
                action: action("i-x", "ballast-termination")
            }]
        );
        let bastion = Notice::Terminating(action("i-b", "ballast-termination"));
        assert_eq!(
            plan(
                &bastion,
                "ballast-termination",
                &[facts("i-b", Role::Bastion, true)]
            ),
            vec![Plan::Complete {
                action: action("i-b", "ballast-termination")
            }]
        );
    }

    #[test]
    fn warnings_without_an_action_prepare_but_complete_nothing() {
        let spot = Notice::SpotInterruption {
            instance_id: "i-w".into(),
            action: "terminate".into(),
        };
        assert!(matches!(
            &plan(&spot, "h", &[facts("i-w", Role::Node, true)])[..],
            [Plan::Drain { action: None, .. }]
        ));
        let rebalance = Notice::RebalanceRecommendation {
            instance_id: "i-w".into(),
        };
        assert!(matches!(
            &plan(&rebalance, "h", &[facts("i-w", Role::Node, true)])[..],
            [Plan::Ignore { .. }]
        ));
        let stopping = Notice::StateChange {
            instance_id: "i-c".into(),
            state: "stopping".into(),
        };
        assert!(matches!(
            &plan(&stopping, "h", &[facts("i-c", Role::ControlPlane, true)])[..],
            [Plan::Ignore { .. }]
        ));
        let running = Notice::StateChange {
            instance_id: "i-w".into(),
            state: "running".into(),
        };
        assert!(matches!(
            &plan(&running, "h", &[facts("i-w", Role::Node, true)])[..],
            [Plan::Ignore { .. }]
        ));
        let scheduled = Notice::ScheduledChange {
            instance_ids: vec!["i-w".into(), "i-c".into(), "i-gone".into()],
            event_type: "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED".into(),
        };
        let plans = plan(
            &scheduled,
            "h",
            &[
                facts("i-w", Role::Node, true),
                facts("i-c", Role::ControlPlane, true),
            ],
        );
        assert!(matches!(
            &plans[..],
            [Plan::Drain { .. }, Plan::Ignore { .. }, Plan::Ignore { .. }]
        ));
        assert_eq!(instances_of(&scheduled).len(), 3);
    }
}
