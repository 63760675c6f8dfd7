//! What the cluster autoscaler needs from AWS (pure): statements of the control-plane role's policy when
//! `spec.clusterAutoscaler.enabled` (the add-on runs on the control plane, `nodeup/src/addons/cluster_autoscaler.rs`),
//! or, when the add-ons run on IRSA, of its own service-account role (`kinds::service_account_roles`) instead,
//! and the Auto Scaling group tags it discovers groups by (`ballast_state::autoscaler::asg_tags`, set by
//! `kinds::auto_scaling_groups`).
//!
//! Least privilege, as the autoscaler's AWS provider documents it for auto-discovery:
//! - reads (`Describe*` of groups, their instances, activities and tags, launch templates, images and instance
//!   types), which AWS does not scope by resource, on `*`;
//! - the two calls that change a group, `SetDesiredCapacity` and `TerminateInstanceInAutoScalingGroup`, only on
//!   groups carrying this cluster's discovery tag `k8s.io/cluster-autoscaler/<cluster>` (`aws:ResourceTag`): the
//!   cluster's groups that autoscale, never a group with `autoscale: false`, the control plane's, or another
//!   cluster's.
//!
//! Nothing else: no launch template or group is created or changed (`update cluster` owns their shape), and no
//! instance is touched except through its group.

use serde_json::{json, Value};

/// The autoscaler's statements for `cluster`: on the control-plane role, or its own role with IRSA.
pub fn autoscaler_iam_statements(cluster: &str) -> Vec<Value> {
    let tag = format!(
        "aws:ResourceTag/{}",
        ballast_state::autoscaler::cluster_tag(cluster)
    );
    vec![
        json!({"Sid": "ClusterAutoscalerRead", "Effect": "Allow", "Resource": "*", "Action": [
            "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
            "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities",
            "autoscaling:DescribeTags", "ec2:DescribeImages", "ec2:DescribeInstanceTypes",
            "ec2:DescribeLaunchTemplateVersions", "ec2:GetInstanceTypesFromInstanceRequirements"]}),
        json!({"Sid": "ClusterAutoscalerSizeOwnGroups", "Effect": "Allow", "Resource": "*", "Action": [
            "autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
            "Condition": {"StringEquals": {tag: "owned"}}}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_state::defaults::complete;
    use ballast_state::generate::{generate, ClusterTemplate};
    use ballast_state::spec::{ClusterAutoscalerSpec, Role};

    use crate::cloud::model::{cluster_model, StateLocation};

    #[test]
    fn only_reads_are_unscoped_and_sizing_is_held_to_the_clusters_discovery_tag() {
        let statements = autoscaler_iam_statements("demo.example.com");
        assert_eq!(statements.len(), 2);
        for statement in &statements {
            let actions: Vec<&str> = statement["Action"]
                .as_array()
                .expect("actions")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let reads_only = actions.iter().all(|a| {
                let verb = a.split(':').nth(1).unwrap_or("");
                verb.starts_with("Describe") || verb.starts_with("Get")
            });
            if !reads_only {
                assert_eq!(
                    actions,
                    [
                        "autoscaling:SetDesiredCapacity",
                        "autoscaling:TerminateInstanceInAutoScalingGroup"
                    ]
                );
                assert_eq!(
                    statement["Condition"],
                    json!({"StringEquals": {
                        "aws:ResourceTag/k8s.io/cluster-autoscaler/demo.example.com": "owned"}})
                );
            }
        }
    }

    /// The control-plane role carries them exactly when the autoscaler is on, within IAM's inline policy size;
    /// nodes never do.
    #[test]
    fn the_control_plane_role_gets_them_only_with_the_autoscaler_on() {
        for enabled in [false, true] {
            let mut config = generate(&ClusterTemplate {
                name: "cas.example.com".into(),
                zones: vec![
                    "us-west-2a".into(),
                    "us-west-2b".into(),
                    "us-west-2c".into(),
                ],
                ..Default::default()
            })
            .expect("template");
            config.cluster.spec.cluster_autoscaler = Some(ClusterAutoscalerSpec {
                enabled: Some(enabled),
                ..Default::default()
            });
            let state = StateLocation::from_url("s3://state/c").expect("s3");
            let model = cluster_model(&complete(&config), &state);
            for role in &model.roles {
                let size = role.policy.chars().filter(|c| !c.is_whitespace()).count();
                assert!(size <= 10_240, "{:?} {size}", role.role);
                let has = role.policy.contains("ClusterAutoscalerSizeOwnGroups");
                assert_eq!(
                    has,
                    enabled && role.role == Role::ControlPlane,
                    "{:?}",
                    role.role
                );
            }
            // The node groups' Auto Scaling groups carry the discovery tags exactly when it is on.
            for group in &model.groups {
                let tagged = group
                    .autoscaler_tags
                    .contains_key("k8s.io/cluster-autoscaler/cas.example.com");
                assert_eq!(
                    tagged,
                    enabled && group.role == Role::Node,
                    "{}",
                    group.name
                );
                assert!(group
                    .tags
                    .keys()
                    .all(|k| !k.starts_with("k8s.io/cluster-autoscaler/")));
            }
        }
    }
}
