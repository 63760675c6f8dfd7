//! What the chosen CNI (`spec.networking`) needs from AWS beyond the base model (pure), least privilege:
//!
//! - amazon-vpc: its `aws-node` DaemonSet (on every node, control plane included) gives pods addresses from the
//!   VPC by managing ENIs, so both roles get the ENI permissions of AWS's own CNI policy, held to the cluster's
//!   ENIs, subnets, security groups and instances ([`cni_iam_statements`]); the other CNIs get none of them.
//! - calico: its default pool encapsulates pod traffic in IP-in-IP (IP protocol 4), which the control plane's
//!   security group does not otherwise take from nodes (it takes TCP and UDP, not etcd's ports). Node to node
//!   and control plane to node, every protocol is already allowed.
//! - cilium: VXLAN (UDP 8472) and health checks (TCP 4240) are covered by the TCP and UDP rules already there.

use ballast_state::spec::{Networking, Role};

use super::rules::{IngressRule, Source};

/// The tag amazon-vpc puts on every ENI it creates once its `CLUSTER_NAME` is set (nodeup sets it to the cluster's
/// name), and that launch templates put on each instance's primary ENI: what its permissions are held to.
pub const CNI_CLUSTER_TAG: &str = "cluster.k8s.amazonaws.com/name";

/// The IAM statements amazon-vpc's `aws-node` needs on every instance (none for the other CNIs): the upstream
/// scope-down of AWS's CNI policy, tighter still. It may create an ENI only with the cluster's tag and in the
/// cluster's subnets and security groups, change, attach or delete only ENIs carrying that tag and attach them
/// only to the cluster's instances, and tag an ENI only as it creates it or when it is the cluster's already.
/// Without this, both roles could create, delete, attach, modify and tag any ENI in the account.
pub fn cni_iam_statements(networking: Networking, cluster: &str) -> Vec<serde_json::Value> {
    if networking != Networking::AmazonVpc {
        return Vec::new();
    }
    let eni = "arn:aws:ec2:*:*:network-interface/*";
    let request_tag = format!("aws:RequestTag/{CNI_CLUSTER_TAG}");
    let eni_tag = format!("aws:ResourceTag/{CNI_CLUSTER_TAG}");
    let ownership = format!("aws:ResourceTag/kubernetes.io/cluster/{cluster}");
    vec![
        serde_json::json!({"Sid": "AmazonVpcCniDescribe", "Effect": "Allow", "Resource": "*", "Action": [
            "ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeNetworkInterfaces",
            "ec2:DescribeSubnets", "ec2:DescribeTags"]}),
        serde_json::json!({"Sid": "AmazonVpcCniCreateEnis", "Effect": "Allow", "Action": ["ec2:CreateNetworkInterface"],
            "Resource": [eni], "Condition": {"StringEquals": {request_tag: cluster}}}),
        serde_json::json!({"Sid": "AmazonVpcCniCreateEnisIn", "Effect": "Allow", "Action": ["ec2:CreateNetworkInterface"],
            "Resource": ["arn:aws:ec2:*:*:subnet/*", "arn:aws:ec2:*:*:security-group/*"],
            "Condition": {"StringEquals": {ownership.clone(): ["owned", "shared"]}}}),
        serde_json::json!({"Sid": "AmazonVpcCniEnis", "Effect": "Allow", "Resource": [eni], "Action": [
            "ec2:AssignPrivateIpAddresses", "ec2:AttachNetworkInterface", "ec2:DeleteNetworkInterface",
            "ec2:DetachNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute", "ec2:UnassignPrivateIpAddresses"],
            "Condition": {"StringEquals": {eni_tag.clone(): cluster}}}),
        serde_json::json!({"Sid": "AmazonVpcCniInstances", "Effect": "Allow", "Resource": ["arn:aws:ec2:*:*:instance/*"],
            "Action": ["ec2:AttachNetworkInterface", "ec2:DetachNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute"],
            "Condition": {"StringEquals": {ownership.clone(): "owned"}}}),
        serde_json::json!({"Sid": "AmazonVpcCniEniSecurityGroups", "Effect": "Allow",
            "Resource": ["arn:aws:ec2:*:*:security-group/*"], "Action": ["ec2:ModifyNetworkInterfaceAttribute"],
            "Condition": {"StringEquals": {ownership: ["owned", "shared"]}}}),
        serde_json::json!({"Sid": "AmazonVpcCniTagNewEnis", "Effect": "Allow", "Action": ["ec2:CreateTags"],
            "Resource": [eni], "Condition": {"StringEquals": {"ec2:CreateAction": "CreateNetworkInterface"}}}),
        serde_json::json!({"Sid": "AmazonVpcCniTagEnis", "Effect": "Allow", "Action": ["ec2:CreateTags"],
            "Resource": [eni], "Condition": {"StringEquals": {eni_tag: cluster}}}),
    ]
}

/// Extra ingress rules of the control plane's security group for the CNI.
pub fn cni_control_plane_rules(networking: Networking) -> Vec<IngressRule> {
    match networking {
        Networking::Calico => vec![IngressRule {
            protocol: "4".to_string(),
            from_port: -1,
            to_port: -1,
            source: Source::Group(Role::Node),
        }],
        Networking::AmazonVpc | Networking::Cilium | Networking::Kubenet => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_amazon_vpc_gets_eni_permissions_and_only_on_the_clusters_enis() {
        let cluster = "cni.example.com";
        let statements = cni_iam_statements(Networking::AmazonVpc, cluster);
        assert!(!statements.is_empty());
        for statement in &statements {
            let actions: Vec<&str> = statement["Action"]
                .as_array()
                .expect("actions")
                .iter()
                .filter_map(|a| a.as_str())
                .collect();
            // Nothing that reaches beyond network interfaces: no instance, volume or security-group changes.
            for action in &actions {
                assert!(
                    action.starts_with("ec2:Describe")
                        || action.contains("NetworkInterface")
                        || action.contains("PrivateIpAddresses")
                        || *action == "ec2:CreateTags",
                    "{action}"
                );
            }
            // Every action but a describe is held to the cluster: by a condition, on named resource kinds.
            if actions.iter().all(|a| a.starts_with("ec2:Describe")) {
                continue;
            }
            assert_ne!(statement["Resource"], serde_json::json!("*"), "{statement}");
            let condition = statement["Condition"]["StringEquals"]
                .as_object()
                .unwrap_or_else(|| panic!("no condition: {statement}"));
            let held = condition.iter().any(|(key, value)| {
                key.ends_with(CNI_CLUSTER_TAG) && value == cluster
                    || key == &format!("aws:ResourceTag/kubernetes.io/cluster/{cluster}")
                    || key == "ec2:CreateAction" && value == "CreateNetworkInterface"
            });
            assert!(held, "{statement}");
        }
        // Deleting, attaching and tagging an existing ENI need the cluster's tag on it.
        let enis = statements
            .iter()
            .find(|s| s["Sid"] == "AmazonVpcCniEnis")
            .expect("the ENI statement");
        assert_eq!(
            enis["Condition"]["StringEquals"][format!("aws:ResourceTag/{CNI_CLUSTER_TAG}")],
            cluster
        );
        for other in [Networking::Cilium, Networking::Calico] {
            assert!(cni_iam_statements(other, cluster).is_empty());
        }
    }

    #[test]
    fn only_calico_opens_ip_in_ip_to_the_control_plane() {
        let rules = cni_control_plane_rules(Networking::Calico);
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].protocol, "4");
        assert_eq!(rules[0].source, Source::Group(Role::Node));
        assert!(cni_control_plane_rules(Networking::Cilium).is_empty());
        assert!(cni_control_plane_rules(Networking::AmazonVpc).is_empty());
    }

    fn model(networking: Networking) -> super::super::model::ClusterModel {
        use ballast_state::defaults::complete;
        use ballast_state::generate::{generate, ClusterTemplate};
        let config = complete(
            &generate(&ClusterTemplate {
                name: "cni.example.com".into(),
                zones: vec!["us-west-2a".into()],
                networking: Some(networking),
                ..Default::default()
            })
            .expect("template"),
        );
        let state = super::super::model::StateLocation::from_url("s3://state/c").expect("s3");
        super::super::model::cluster_model(&config, &state)
    }

    #[test]
    fn the_model_carries_the_cnis_needs_and_no_other_cnis() {
        for networking in [
            Networking::AmazonVpc,
            Networking::Cilium,
            Networking::Calico,
        ] {
            let model = model(networking);
            for role in &model.roles {
                let eni = role.policy.contains("AmazonVpcCniEnis");
                let scoped = role
                    .policy
                    .contains(&format!("aws:ResourceTag/{CNI_CLUSTER_TAG}"));
                assert_eq!(eni, scoped, "{:?}", role.role);
                assert_eq!(
                    eni,
                    networking == Networking::AmazonVpc,
                    "{networking:?} {:?}",
                    role.role
                );
            }
            let control_plane = model
                .security_groups
                .iter()
                .find(|g| g.role == Role::ControlPlane)
                .expect("control plane group");
            let ipip = control_plane.rules.iter().any(|r| r.protocol == "4");
            assert_eq!(ipip, networking == Networking::Calico, "{networking:?}");
        }
    }
}
