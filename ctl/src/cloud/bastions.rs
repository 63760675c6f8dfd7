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

use super::rules::{IngressRule, Source};

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

/// The rules of the bastions' security group (`bastions.<cluster>`): SSH from each of `spec.sshAccess`'s CIDRs
/// (IPv6 ones too, as the operator wrote them), nothing else in. Empty `sshAccess` leaves it closed: no one
/// reaches the bastion from outside.
pub fn security_group_rules(completed: &ClusterConfig) -> Vec<IngressRule> {
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
    rules
}

/// The bastions' role: it reads the node specs of bastion groups (the operator's SSH public keys are in them)
/// and nothing else. No CA certificate (it talks to no API), no report, no log tail, no EC2 call: nodeup on a
/// bastion takes its identity from IMDS.
pub fn iam_statements(
    completed: &ClusterConfig,
    object_arn: impl Fn(&str) -> String,
) -> Vec<serde_json::Value> {
    let specs: Vec<String> = completed
        .instance_groups
        .iter()
        .filter(|ig| ig.spec.role == Role::Bastion)
        .map(|ig| object_arn(&format!("nodes/{}/*", ig.metadata.name)))
        .collect();
    vec![
        serde_json::json!({"Sid": "ReadBastionSpecs", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": specs}),
    ]
}
