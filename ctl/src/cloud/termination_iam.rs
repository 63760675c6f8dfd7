//! What the control-plane role needs for the termination handler its nodes run (`nodeup/src/termination/`,
//! `docs/termination.md`), and no more: find, receive and delete the messages of this cluster's queue only, and
//! complete (and heartbeat) the lifecycle actions of this cluster's groups only, named by their ARNs (`*` for the
//! group's id and the account, which the plan does not know). Pure; beside `ccm` and `autoscaler` rather than in
//! `kinds::termination`, because the model's roles are built from it and kinds depend on the model.

use ballast_state::spec::{ClusterConfig, TerminationHandlingSpec};
use ballast_state::termination::queue_name;
use serde_json::{json, Value};

use super::aws::group_resource_name;

/// The statements, or `None` when the spec does not turn the handling on.
pub fn iam_statements(completed: &ClusterConfig) -> Option<Vec<Value>> {
    if !TerminationHandlingSpec::enabled_in(&completed.cluster.spec) {
        return None;
    }
    let cluster = &completed.cluster.metadata.name;
    let region = completed.cluster.spec.region.clone().unwrap_or_default();
    let mut groups: Vec<String> = completed
        .instance_groups
        .iter()
        .map(|g| {
            format!(
                "arn:aws:autoscaling:{region}:*:autoScalingGroup:*:autoScalingGroupName/{}",
                group_resource_name(&g.metadata.name, cluster)
            )
        })
        .collect();
    groups.sort();
    Some(vec![
        // GetQueueUrl: the node finds the queue by name (it does not know the account).
        json!({"Sid": "TerminationQueueRead", "Effect": "Allow",
            "Action": ["sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:DeleteMessage"],
            "Resource": [format!("arn:aws:sqs:{region}:*:{}", queue_name(cluster))]}),
        json!({"Sid": "TerminationLifecycleActions", "Effect": "Allow",
            "Action": ["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"],
            "Resource": groups}),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_state::defaults::complete;
    use ballast_state::generate::{generate, ClusterTemplate};

    #[test]
    fn only_the_clusters_queue_and_groups_and_only_when_on() {
        let mut config = generate(&ClusterTemplate {
            name: "demo.example.com".into(),
            zones: vec!["us-west-2a".into()],
            ..Default::default()
        })
        .expect("template");
        assert_eq!(iam_statements(&complete(&config)), None);
        config.cluster.spec.termination_handling = Some(TerminationHandlingSpec {
            enabled: Some(true),
            heartbeat_timeout: None,
        });
        let statements = iam_statements(&complete(&config)).expect("on");
        assert_eq!(statements.len(), 2);
        let region = config.cluster.spec.region.clone().unwrap_or_default();
        assert_eq!(
            statements[0]["Resource"],
            json!([format!(
                "arn:aws:sqs:{region}:*:demo-example-com-termination"
            )])
        );
        assert_eq!(
            statements[0]["Action"],
            json!(["sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:DeleteMessage"])
        );
        let groups = statements[1]["Resource"].as_array().expect("groups");
        assert_eq!(groups.len(), config.instance_groups.len());
        for (arn, group) in groups.iter().zip({
            let mut names: Vec<String> = config
                .instance_groups
                .iter()
                .map(|g| format!("{}.demo.example.com", g.metadata.name))
                .collect();
            names.sort();
            names
        }) {
            assert_eq!(
                arn.as_str(),
                Some(
                    format!("arn:aws:autoscaling:{region}:*:autoScalingGroup:*:autoScalingGroupName/{group}")
                        .as_str()
                )
            );
        }
    }
}
