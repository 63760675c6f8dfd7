//! What the chosen CNI (`spec.networking`) needs from AWS beyond the base model (pure), least privilege:
//!
//! - amazon-vpc: its `aws-node` DaemonSet (on every node, control plane included) gives pods addresses from the
//!   VPC by managing ENIs, so both roles get the ENI permissions of AWS's own CNI policy, and nothing more; the
//!   other CNIs get none of them.
//! - calico: its default pool encapsulates pod traffic in IP-in-IP (IP protocol 4), which the control plane's
//!   security group does not otherwise take from nodes (it takes TCP and UDP, not etcd's ports). Node to node
//!   and control plane to node, every protocol is already allowed.
//! - cilium: VXLAN (UDP 8472) and health checks (TCP 4240) are covered by the TCP and UDP rules already there.

use ballast_state::spec::{Networking, Role};

use super::model::{IngressRule, Source};

/// The IAM statement amazon-vpc's `aws-node` needs on every instance (None for the other CNIs).
pub fn cni_iam_statement(networking: Networking) -> Option<serde_json::Value> {
    (networking == Networking::AmazonVpc).then(|| {
        serde_json::json!({"Sid": "AmazonVpcCniEnis", "Effect": "Allow", "Resource": "*", "Action": [
            "ec2:AssignPrivateIpAddresses", "ec2:AttachNetworkInterface", "ec2:CreateNetworkInterface",
            "ec2:DeleteNetworkInterface", "ec2:DescribeInstances", "ec2:DescribeInstanceTypes",
            "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets", "ec2:DescribeTags",
            "ec2:DetachNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute", "ec2:UnassignPrivateIpAddresses"]})
    })
}

/// The tag amazon-vpc puts on the ENIs it creates: `ec2:CreateTags` on network interfaces only.
pub fn cni_tagging_statement(networking: Networking) -> Option<serde_json::Value> {
    (networking == Networking::AmazonVpc).then(|| {
        serde_json::json!({"Sid": "AmazonVpcCniTagEnis", "Effect": "Allow", "Action": ["ec2:CreateTags"],
            "Resource": ["arn:aws:ec2:*:*:network-interface/*"]})
    })
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
        Networking::AmazonVpc | Networking::Cilium => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_amazon_vpc_gets_eni_permissions() {
        let statement = cni_iam_statement(Networking::AmazonVpc).expect("amazon-vpc");
        let actions = statement["Action"].as_array().expect("actions");
        assert!(actions
            .iter()
            .all(|a| a.as_str().is_some_and(|a| a.starts_with("ec2:"))));
        assert!(actions.contains(&serde_json::json!("ec2:AssignPrivateIpAddresses")));
        // Nothing that reaches beyond network interfaces: no instance, volume or security-group changes.
        for action in actions.iter().filter_map(|a| a.as_str()) {
            assert!(
                action.starts_with("ec2:Describe")
                    || action.contains("NetworkInterface")
                    || action.contains("PrivateIpAddresses"),
                "{action}"
            );
        }
        let tagging = cni_tagging_statement(Networking::AmazonVpc).expect("tagging");
        assert_eq!(
            tagging["Resource"],
            serde_json::json!(["arn:aws:ec2:*:*:network-interface/*"])
        );
        for other in [Networking::Cilium, Networking::Calico] {
            assert!(cni_iam_statement(other).is_none());
            assert!(cni_tagging_statement(other).is_none());
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
