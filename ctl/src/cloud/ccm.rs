//! What the AWS cloud controller manager needs from AWS (pure): statements of the control-plane role's policy.
//!
//! Every cluster runs it: the control plane's nodeup installs it in every add-on set (`nodeup/src/addons/set.rs`,
//! a DaemonSet on control-plane nodes), and the kubelets run with `--cloud-provider=external`, so a cluster
//! without it would keep its nodes tainted `node.cloudprovider.kubernetes.io/uninitialized`. Nodes get none of
//! this: the controller runs on control-plane nodes only.
//!
//! Least privilege, as kops and cloud-provider-aws scope it:
//! - reads (`Describe*`, which AWS does not scope by resource) on `*`;
//! - what it creates (security groups and load balancers for `type: LoadBalancer` Services) only when the
//!   request carries the cluster's ownership tag `kubernetes.io/cluster/<name>=owned` (`aws:RequestTag`), which
//!   the controller puts on everything it creates once it has found that tag on its own instance;
//! - what it changes or deletes only when the resource already carries that tag (`aws:ResourceTag`): the
//!   cluster's own security groups and load balancers, never another cluster's or the account's;
//! - the Elastic Load Balancing service-linked role, which the first load balancer of an account needs.
//!
//! Routes and instance attributes only with kubenet (`routes`): there its route controller writes a route per
//! node's PodCIDR into the cluster's route tables (`ec2:CreateRoute`, `ec2:DeleteRoute`, on route tables carrying
//! the ownership tag) and turns off the source/destination check of the cluster's instances
//! (`ec2:ModifyInstanceAttribute`, on instances carrying it); with any other network it runs with
//! `--configure-cloud-routes=false` and gets neither. No volumes: the in-tree EBS volume code is gone from the
//! external controller.

use serde_json::{json, Value};

use super::aws::ownership_tag;

/// The cloud controller manager's statements for the control-plane role of `cluster`; `routes` (kubenet) adds its
/// route controller's.
pub fn ccm_iam_statements(cluster: &str, routes: bool) -> Vec<Value> {
    let owned = ownership_tag(cluster);
    let request_tag = format!("aws:RequestTag/{owned}");
    let resource_tag = format!("aws:ResourceTag/{owned}");
    let mut statements = base_statements(&request_tag, &resource_tag);
    if routes {
        statements.push(json!({"Sid": "CloudControllerRoutes", "Effect": "Allow",
            "Action": ["ec2:CreateRoute", "ec2:DeleteRoute"], "Resource": ["arn:aws:ec2:*:*:route-table/*"],
            "Condition": {"StringEquals": {resource_tag.clone(): "owned"}}}));
        statements.push(
            json!({"Sid": "CloudControllerSourceDestCheck", "Effect": "Allow",
            "Action": ["ec2:ModifyInstanceAttribute"], "Resource": ["arn:aws:ec2:*:*:instance/*"],
            "Condition": {"StringEquals": {resource_tag: "owned"}}}),
        );
    }
    statements
}

fn base_statements(request_tag: &str, resource_tag: &str) -> Vec<Value> {
    vec![
        // It reads instances, subnets, route tables (to tell public subnets from private ones), security
        // groups, the VPC's CIDR (load balancer health checks) and its load balancers.
        json!({"Sid": "CloudControllerRead", "Effect": "Allow", "Resource": "*", "Action": [
            "ec2:DescribeAvailabilityZones", "ec2:DescribeInstances", "ec2:DescribeRegions",
            "ec2:DescribeRouteTables", "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets",
            "ec2:DescribeVolumes", "ec2:DescribeVpcs", "elasticloadbalancing:Describe*"]}),
        // A security group is created in a VPC: the VPC is a resource of the call and carries no request tag.
        json!({"Sid": "CloudControllerCreateSecurityGroupInVpc", "Effect": "Allow",
            "Action": ["ec2:CreateSecurityGroup"], "Resource": ["arn:aws:ec2:*:*:vpc/*"]}),
        json!({"Sid": "CloudControllerCreateOwnedSecurityGroups", "Effect": "Allow",
            "Action": ["ec2:CreateSecurityGroup"], "Resource": ["arn:aws:ec2:*:*:security-group/*"],
            "Condition": {"StringEquals": {request_tag: "owned"}}}),
        // Tags only as part of creating a security group it owns: it cannot tag (and so claim) anything else.
        json!({"Sid": "CloudControllerTagNewSecurityGroups", "Effect": "Allow",
            "Action": ["ec2:CreateTags"], "Resource": ["arn:aws:ec2:*:*:security-group/*"],
            "Condition": {"StringEquals": {request_tag: "owned",
                "ec2:CreateAction": ["CreateSecurityGroup"]}}}),
        json!({"Sid": "CloudControllerCreateOwnedLoadBalancers", "Effect": "Allow", "Resource": "*", "Action": [
            "elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup"],
            "Condition": {"StringEquals": {request_tag: "owned"}}}),
        // Creating a tagged load balancer or target group is also an AddTags on it.
        json!({"Sid": "CloudControllerTagNewLoadBalancers", "Effect": "Allow", "Resource": "*",
            "Action": ["elasticloadbalancing:AddTags"],
            "Condition": {"StringEquals": {request_tag: "owned",
                "elasticloadbalancing:CreateAction": ["CreateLoadBalancer", "CreateTargetGroup"]}}}),
        // Changes only to what the cluster owns: the security groups and load balancers it created, and the
        // cluster's own groups (the instances' group takes the load balancer's traffic).
        json!({"Sid": "CloudControllerManageOwned", "Effect": "Allow", "Resource": "*", "Action": [
            "ec2:AuthorizeSecurityGroupIngress", "ec2:DeleteSecurityGroup", "ec2:RevokeSecurityGroupIngress",
            "elasticloadbalancing:AddTags", "elasticloadbalancing:ApplySecurityGroupsToLoadBalancer",
            "elasticloadbalancing:AttachLoadBalancerToSubnets", "elasticloadbalancing:ConfigureHealthCheck",
            "elasticloadbalancing:CreateListener", "elasticloadbalancing:CreateLoadBalancerListeners",
            "elasticloadbalancing:CreateLoadBalancerPolicy", "elasticloadbalancing:DeleteListener",
            "elasticloadbalancing:DeleteLoadBalancer", "elasticloadbalancing:DeleteLoadBalancerListeners",
            "elasticloadbalancing:DeleteTargetGroup", "elasticloadbalancing:DeregisterInstancesFromLoadBalancer",
            "elasticloadbalancing:DeregisterTargets", "elasticloadbalancing:DetachLoadBalancerFromSubnets",
            "elasticloadbalancing:ModifyListener", "elasticloadbalancing:ModifyLoadBalancerAttributes",
            "elasticloadbalancing:ModifyTargetGroup", "elasticloadbalancing:RegisterInstancesWithLoadBalancer",
            "elasticloadbalancing:RegisterTargets", "elasticloadbalancing:SetLoadBalancerPoliciesForBackendServer",
            "elasticloadbalancing:SetLoadBalancerPoliciesOfListener"],
            "Condition": {"StringEquals": {resource_tag: "owned"}}}),
        json!({"Sid": "CloudControllerElbServiceLinkedRole", "Effect": "Allow",
            "Action": ["iam:CreateServiceLinkedRole"],
            "Resource": ["arn:aws:iam::*:role/aws-service-role/elasticloadbalancing.amazonaws.com/*"],
            "Condition": {"StringEquals": {"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"}}}),
    ]
}

#[cfg(test)]
mod tests {
    use ballast_state::spec::Role;

    use super::*;

    fn actions(statement: &Value) -> Vec<&str> {
        statement["Action"]
            .as_array()
            .expect("actions")
            .iter()
            .filter_map(Value::as_str)
            .collect()
    }

    #[test]
    fn every_mutating_action_is_scoped_by_the_clusters_tag_or_resource() {
        let tag = "kubernetes.io/cluster/demo.example.com";
        for statement in ccm_iam_statements("demo.example.com", false) {
            let mutating: Vec<&str> = actions(&statement)
                .into_iter()
                .filter(|a| {
                    !a.split(':')
                        .nth(1)
                        .is_some_and(|v| v.starts_with("Describe"))
                })
                .collect();
            if mutating.is_empty() {
                continue;
            }
            let condition = &statement["Condition"]["StringEquals"];
            let by_tag = [
                format!("aws:RequestTag/{tag}"),
                format!("aws:ResourceTag/{tag}"),
            ]
            .iter()
            .any(|key| condition[key] == "owned");
            let by_service =
                condition["iam:AWSServiceName"] == "elasticloadbalancing.amazonaws.com";
            // CreateSecurityGroup on a VPC: the group itself is held to the request tag by another statement.
            let in_vpc = statement["Resource"] == json!(["arn:aws:ec2:*:*:vpc/*"])
                && mutating == ["ec2:CreateSecurityGroup"];
            assert!(by_tag || by_service || in_vpc, "{statement}");
            assert!(
                statement["Resource"] != "*" || by_tag,
                "mutating on * without the tag: {statement}"
            );
        }
    }

    #[test]
    fn creating_tags_is_limited_to_new_security_groups() {
        let statements = ccm_iam_statements("demo.example.com", false);
        let tagging: Vec<&Value> = statements
            .iter()
            .filter(|s| actions(s).contains(&"ec2:CreateTags"))
            .collect();
        assert_eq!(tagging.len(), 1);
        assert_eq!(
            tagging[0]["Condition"]["StringEquals"]["ec2:CreateAction"],
            json!(["CreateSecurityGroup"])
        );
    }

    /// With kubenet the route controller writes routes into the cluster's own route tables and turns off the
    /// source/destination check of the cluster's own instances: nothing else's.
    #[test]
    fn kubenet_routes_only_the_clusters_tables_and_instances() {
        let without = ccm_iam_statements("demo.example.com", false);
        let with = ccm_iam_statements("demo.example.com", true);
        assert_eq!(&with[..without.len()], &without[..]);
        let added = &with[without.len()..];
        assert_eq!(added.len(), 2, "{added:?}");
        for (statement, actions_of, resource) in [
            (
                &added[0],
                vec!["ec2:CreateRoute", "ec2:DeleteRoute"],
                "arn:aws:ec2:*:*:route-table/*",
            ),
            (
                &added[1],
                vec!["ec2:ModifyInstanceAttribute"],
                "arn:aws:ec2:*:*:instance/*",
            ),
        ] {
            assert_eq!(actions(statement), actions_of);
            assert_eq!(statement["Resource"], json!([resource]));
            assert_eq!(
                statement["Condition"]["StringEquals"]
                    ["aws:ResourceTag/kubernetes.io/cluster/demo.example.com"],
                "owned"
            );
        }
    }

    #[test]
    fn no_routes_no_instance_changes_no_volumes() {
        let all: Vec<String> = ccm_iam_statements("demo.example.com", false)
            .iter()
            .flat_map(|s| {
                actions(s)
                    .into_iter()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        for refused in [
            "ec2:CreateRoute",
            "ec2:DeleteRoute",
            "ec2:ModifyInstanceAttribute",
            "ec2:CreateVolume",
            "ec2:DeleteVolume",
        ] {
            assert!(!all.iter().any(|a| a == refused), "{refused}");
        }
    }

    #[test]
    fn only_the_control_plane_role_gets_them_within_the_inline_policy_limit() {
        for (role, policy, sids) in
            super::super::model::role_policies::with_sids("ccm.example.com", "CloudController")
        {
            if role == Role::ControlPlane {
                assert_eq!(sids.len(), ccm_iam_statements("x", false).len(), "{sids:?}");
                assert!(
                    policy.contains("aws:ResourceTag/kubernetes.io/cluster/ccm.example.com"),
                    "{policy}"
                );
            } else {
                assert!(sids.is_empty(), "{sids:?}");
            }
        }
    }
}
