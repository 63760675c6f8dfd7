//! What bastion instance groups (`role: Bastion`, kops's `Bastion`) need of AWS, apart from the model so that a
//! cluster without them keeps exactly its resources: their own security group (SSH in from `spec.sshAccess`),
//! the SSH rule the control plane's and the nodes' groups gain for them in place of `spec.sshAccess`, and their
//! own IAM role's one statement. Pure.
//!
//! A bastion is an SSH jump host: nodeup on it installs the operator's SSH keys from its node spec and runs
//! nothing of Kubernetes. Its role reads its own group's node spec and nothing else of the state store: no CA
//! certificate or key, no other node spec, no secret, no write (its boot report stays on the instance;
//! docs/security.md, "Bastions").

use ballast_state::spec::{ClusterConfig, Role};

use super::model::{role_resource_name, IngressRule, SecurityGroupModel, Source, StateLocation};

/// SSH's port, the one port a bastion opens and the one it reaches on the cluster's instances.
pub const SSH_PORT: i32 = 22;

/// Whether the cluster has a bastion group: only then does any of this exist.
pub fn has_bastions(completed: &ClusterConfig) -> bool {
    completed
        .instance_groups
        .iter()
        .any(|ig| ig.spec.role == Role::Bastion)
}

fn ssh_from(source: Source) -> IngressRule {
    IngressRule {
        protocol: "tcp".to_string(),
        from_port: SSH_PORT,
        to_port: SSH_PORT,
        source,
    }
}

/// The SSH rule of the control plane's and the nodes' groups when the cluster has bastions: from the bastions'
/// group only. As kops does, `spec.sshAccess` then opens the bastions, not every instance.
pub fn ssh_to_instances() -> IngressRule {
    ssh_from(Source::Group(Role::Bastion))
}

/// The bastions' security group: SSH from each of `spec.sshAccess`'s CIDRs (IPv6 ones too, as the operator
/// wrote them), nothing else in. Empty `sshAccess` leaves it closed: no one reaches the bastion from outside.
pub fn security_group(cluster: &str, completed: &ClusterConfig) -> SecurityGroupModel {
    let mut rules: Vec<IngressRule> = completed
        .cluster
        .spec
        .ssh_access
        .iter()
        .flatten()
        .map(|cidr| ssh_from(Source::Cidr(cidr.clone())))
        .collect();
    rules.sort();
    rules.dedup();
    SecurityGroupModel {
        role: Role::Bastion,
        name: role_resource_name(cluster, Role::Bastion),
        description: format!("Bastions (SSH jump hosts) of the Kubernetes cluster {cluster}"),
        rules,
    }
}

/// The bastions' role: it reads the node specs of bastion groups (the operator's SSH public keys are in them)
/// and nothing else. No CA certificate (it talks to no API), no report, no log tail, no EC2 call: nodeup on a
/// bastion takes its identity from IMDS.
pub fn iam_statements(
    cluster: &str,
    completed: &ClusterConfig,
    state: &StateLocation,
) -> Vec<serde_json::Value> {
    let specs: Vec<String> = completed
        .instance_groups
        .iter()
        .filter(|ig| ig.spec.role == Role::Bastion)
        .map(|ig| state.object_arn(&format!("{cluster}/nodes/{}/*", ig.metadata.name)))
        .collect();
    vec![
        serde_json::json!({"Sid": "ReadBastionSpecs", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": specs}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::model::cluster_model;
    use ballast_state::defaults::complete;
    use ballast_state::spec::{InstanceGroup, InstanceGroupSpec, SubnetType, Topology};

    fn private_with_bastion() -> ClusterConfig {
        let mut config =
            ballast_state::generate::generate(&ballast_state::generate::ClusterTemplate {
                name: "demo.example.com".into(),
                zones: vec!["us-west-2a".into()],
                topology: Some(Topology::Private),
                ssh_access: vec!["203.0.113.0/24".into()],
                ..Default::default()
            })
            .expect("template");
        config.instance_groups.push(InstanceGroup::new(
            "bastion",
            InstanceGroupSpec::with_role(Role::Bastion),
        ));
        complete(&config)
    }

    #[test]
    fn ssh_access_opens_the_bastions_and_only_they_reach_the_instances() {
        let config = private_with_bastion();
        let state = StateLocation::from_url("s3://state/clusters").expect("s3");
        let model = cluster_model(&config, &state);
        let group = |role: Role| {
            model
                .security_groups
                .iter()
                .find(|g| g.role == role)
                .unwrap_or_else(|| panic!("{role:?}'s group"))
        };
        assert_eq!(
            group(Role::Bastion).rules,
            vec![ssh_from(Source::Cidr("203.0.113.0/24".into()))]
        );
        for role in [Role::ControlPlane, Role::Node] {
            let ssh: Vec<&IngressRule> = group(role)
                .rules
                .iter()
                .filter(|r| r.protocol == "tcp" && r.from_port <= 22 && r.to_port >= 22)
                .filter(|r| matches!(r.source, Source::Cidr(_)))
                .collect();
            assert!(ssh.is_empty(), "{role:?} still open to {ssh:?}");
            assert!(group(role).rules.contains(&ssh_to_instances()), "{role:?}");
        }
        // The bastion is placed in the public subnets, the others stay private.
        let bastion = model
            .groups
            .iter()
            .find(|g| g.role == Role::Bastion)
            .expect("bastion group");
        for subnet in &bastion.subnets {
            let spec = config
                .cluster
                .spec
                .subnets
                .iter()
                .find(|s| &s.name == subnet)
                .expect("subnet");
            assert_eq!(spec.subnet_type, Some(SubnetType::Public), "{subnet}");
        }
        assert!(bastion.http_tokens_required && bastion.root_volume_encrypted);
    }

    #[test]
    fn the_bastion_role_reads_its_own_spec_and_nothing_else() {
        let config = private_with_bastion();
        let state = StateLocation::from_url("s3://state/clusters").expect("s3");
        let model = cluster_model(&config, &state);
        let role = model
            .roles
            .iter()
            .find(|r| r.role == Role::Bastion)
            .expect("bastion role");
        let policy: serde_json::Value = serde_json::from_str(&role.policy).expect("JSON");
        assert_eq!(
            policy["Statement"],
            serde_json::json!([{"Sid": "ReadBastionSpecs", "Effect": "Allow", "Action": ["s3:GetObject"],
                "Resource": ["arn:aws:s3:::state/clusters/demo.example.com/nodes/bastion/*"]}])
        );
        // Without a bastion, neither the role nor the group exists.
        let mut without = config.clone();
        without
            .instance_groups
            .retain(|ig| ig.spec.role != Role::Bastion);
        let model = cluster_model(&without, &state);
        assert!(model.roles.iter().all(|r| r.role != Role::Bastion));
        assert!(model
            .security_groups
            .iter()
            .all(|g| g.role != Role::Bastion));
    }
}
