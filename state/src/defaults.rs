//! Every default of the spec, in one place: [`complete`] turns the spec as written into the completed spec.
//!
//! Completion never fails: where the input is invalid (a CIDR that does not parse, say), the field is left as
//! it is, and [`crate::validate`] reports it with its path. Completion keeps the order of lists, so paths in
//! validation errors are the paths of the file the operator wrote.

use std::collections::BTreeMap;

use ipnet::Ipv4Net;

use crate::spec::*;

/// The Kubernetes version used when the spec names none: the newest release two public records of its kubelet
/// and kubectl agree on (images/manifest.yaml says which).
pub const DEFAULT_KUBERNETES_VERSION: &str = "1.36.4";
/// The VPC CIDR used when the spec names none (kops's default too).
pub const DEFAULT_NETWORK_CIDR: &str = "172.20.0.0/16";
pub const DEFAULT_MACHINE_TYPE: &str = "t3.medium";
pub const DEFAULT_CONTROL_PLANE_VOLUME_GIB: u32 = 64;
pub const DEFAULT_NODE_VOLUME_GIB: u32 = 128;
/// A bastion's instance type and root volume: kops's (an SSH jump host needs little).
pub const DEFAULT_BASTION_MACHINE_TYPE: &str = "t3.micro";
pub const DEFAULT_BASTION_VOLUME_GIB: u32 = 32;
pub const DEFAULT_VOLUME_TYPE: &str = "gp3";
pub const DEFAULT_ETCD_BACKUP_INTERVAL: &str = "15m";
pub const DEFAULT_ETCD_BACKUP_RETENTION: &str = "7d";
/// How long an audit line may wait on a control-plane node before it is shipped (docs/audit.md).
pub const DEFAULT_AUDIT_CHUNK_INTERVAL: &str = "30s";
/// The terminating lifecycle hooks' heartbeat timeout when termination handling is on: kops's (300 s).
pub const DEFAULT_TERMINATION_HEARTBEAT: &str = "5m";
/// The largest audit chunk: 8 MiB, about ten thousand metadata-level events.
pub const DEFAULT_AUDIT_CHUNK_MAX_BYTES: u64 = 8 * 1024 * 1024;
/// Days audit chunks are kept in the bucket.
pub const DEFAULT_AUDIT_RETENTION_DAYS: u32 = 365;
/// Size in GiB of each etcd member's volume: etcd's own quota is 2 GiB by default, and kops uses 20.
pub const DEFAULT_ETCD_VOLUME_SIZE: u32 = 20;
/// EBS type of each etcd member's volume.
pub const DEFAULT_ETCD_VOLUME_TYPE: &str = "gp3";
pub const CONTROL_PLANE_TAINT: &str = "node-role.kubernetes.io/control-plane:NoSchedule";
/// Label put on every node, naming its instance group.
pub const INSTANCE_GROUP_LABEL: &str = "ballast.dev/instance-group";
/// Subnets are carved from the network in blocks this many bits longer than its prefix (/19s of a /16).
pub const SUBNET_EXTRA_BITS: u8 = 3;

/// The AMI name Ballast's packer template registers for a Kubernetes version: `ballast-k8s-1.36-debian-12`.
pub fn default_image(kubernetes_version: &str) -> String {
    let version = kubernetes_version.trim_start_matches('v');
    let minor: Vec<&str> = version.split('.').take(2).collect();
    format!("ballast-k8s-{}-debian-12", minor.join("."))
}

/// The region of an availability zone: `us-west-2a` -> `us-west-2`.
pub fn region_of_zone(zone: &str) -> Option<&str> {
    let region = zone.trim_end_matches(|c: char| c.is_ascii_lowercase());
    (region.len() < zone.len() && region.ends_with(|c: char| c.is_ascii_digit())).then_some(region)
}

/// The completed spec: every field that has a default is set.
pub fn complete(config: &ClusterConfig) -> ClusterConfig {
    let mut cluster = config.cluster.clone();
    complete_cluster(&mut cluster.spec, &config.instance_groups);
    let instance_groups = config
        .instance_groups
        .iter()
        .map(|ig| {
            let mut ig = ig.clone();
            complete_instance_group(&mut ig, &cluster.spec);
            ig
        })
        .collect();
    ClusterConfig {
        cluster,
        instance_groups,
    }
}

fn complete_cluster(spec: &mut ClusterSpec, instance_groups: &[InstanceGroup]) {
    crate::autoscaler::complete(spec);
    spec.kubernetes_version
        .get_or_insert_with(|| DEFAULT_KUBERNETES_VERSION.to_string());
    if spec.region.is_none() {
        spec.region = spec
            .subnets
            .iter()
            .find_map(|s| region_of_zone(&s.zone))
            .map(str::to_string);
    }
    if spec.network_cidr.is_none() && spec.network_id.is_none() {
        spec.network_cidr = Some(DEFAULT_NETWORK_CIDR.to_string());
    }
    let topology = *spec.topology.get_or_insert(Topology::Public);
    for subnet in &mut spec.subnets {
        subnet.subnet_type.get_or_insert(match topology {
            Topology::Public => SubnetType::Public,
            Topology::Private => SubnetType::Private,
        });
    }
    if let Some(network) = spec.network_cidr.as_deref().and_then(|c| c.parse().ok()) {
        assign_subnet_cidrs(network, &mut spec.subnets);
    }
    let lb = spec
        .api
        .get_or_insert_with(Default::default)
        .load_balancer
        .get_or_insert_with(Default::default);
    lb.lb_type.get_or_insert(LoadBalancerType::Public);

    let etcd = spec.etcd.get_or_insert_with(Default::default);
    if etcd.members.is_empty() {
        etcd.members = instance_groups
            .iter()
            .filter(|ig| ig.spec.role == Role::ControlPlane)
            .map(|ig| EtcdMember {
                name: ig.metadata.name.clone(),
                instance_group: ig.metadata.name.clone(),
            })
            .collect();
    }
    etcd.encrypted_volume.get_or_insert(true);
    etcd.volume_size.get_or_insert(DEFAULT_ETCD_VOLUME_SIZE);
    etcd.volume_type
        .get_or_insert_with(|| DEFAULT_ETCD_VOLUME_TYPE.to_string());
    let backup = etcd.backup.get_or_insert_with(Default::default);
    backup
        .interval
        .get_or_insert_with(|| DEFAULT_ETCD_BACKUP_INTERVAL.to_string());
    backup
        .retention
        .get_or_insert_with(|| DEFAULT_ETCD_BACKUP_RETENTION.to_string());

    // Only a cluster that turns it on gets a heartbeat: a spec without the section completes without it, and one
    // that turns it off keeps no number that would mean nothing.
    if let Some(termination) = spec
        .termination_handling
        .as_mut()
        .filter(|t| t.enabled == Some(true))
    {
        termination
            .heartbeat_timeout
            .get_or_insert_with(|| DEFAULT_TERMINATION_HEARTBEAT.to_string());
    }

    let audit = spec.audit_log.get_or_insert_with(Default::default);
    audit
        .chunk_interval
        .get_or_insert_with(|| DEFAULT_AUDIT_CHUNK_INTERVAL.to_string());
    audit
        .chunk_max_bytes
        .get_or_insert(DEFAULT_AUDIT_CHUNK_MAX_BYTES);
    // Retention is a lifecycle rule Ballast sets on the state bucket only: a bucket the spec names is its owner's.
    if audit.destination.is_none() {
        audit
            .retention_days
            .get_or_insert(DEFAULT_AUDIT_RETENTION_DAYS);
    }

    let networking = *spec.networking.get_or_insert(Networking::Cilium);
    // Cilium's settings belong to Cilium: another CNI's spec keeps what the operator wrote, so validation can
    // refuse a `cilium:` the chosen CNI would ignore.
    if networking == Networking::Cilium {
        spec.cilium
            .get_or_insert_with(Default::default)
            .routing_mode
            .get_or_insert(CiliumRoutingMode::Tunnel);
    }
    // No SSH from outside unless asked for: nodes need none to boot, and operators debug from reports.
    spec.ssh_access.get_or_insert_with(Vec::new);
    spec.kubernetes_api_access
        .get_or_insert_with(|| vec!["0.0.0.0/0".to_string()]);
    let encryption = spec.encryption_config.get_or_insert_with(Default::default);
    encryption.enabled.get_or_insert(true);
    encryption
        .provider
        .get_or_insert(EncryptionProvider::Secretbox);
    spec.iam
        .get_or_insert_with(Default::default)
        .allow_container_registry
        .get_or_insert(true);
    if let Some(discovery) = &mut spec.service_account_issuer_discovery {
        discovery.enable_aws_oidc_provider.get_or_insert(false);
    }
}

/// Gives each subnet without `cidr` or `id` the next free block of the network.
fn assign_subnet_cidrs(network: Ipv4Net, subnets: &mut [ClusterSubnet]) {
    let taken: Vec<Ipv4Net> = subnets
        .iter()
        .filter_map(|s| s.cidr.as_deref()?.parse().ok())
        .collect();
    let prefix = network
        .prefix_len()
        .saturating_add(SUBNET_EXTRA_BITS)
        .min(28);
    let Ok(mut blocks) = network.subnets(prefix) else {
        return;
    };
    for subnet in subnets
        .iter_mut()
        .filter(|s| s.cidr.is_none() && s.id.is_none())
    {
        let free = blocks
            .by_ref()
            .find(|b| !taken.iter().any(|t| t.contains(b) || b.contains(t)));
        match free {
            Some(block) => subnet.cidr = Some(block.to_string()),
            None => return,
        }
    }
}

fn complete_instance_group(ig: &mut InstanceGroup, cluster: &ClusterSpec) {
    let name = ig.metadata.name.clone();
    let spec = &mut ig.spec;
    let control_plane = spec.role == Role::ControlPlane;
    let bastion = spec.role == Role::Bastion;
    spec.machine_type.get_or_insert_with(|| {
        if bastion {
            DEFAULT_BASTION_MACHINE_TYPE
        } else {
            DEFAULT_MACHINE_TYPE
        }
        .to_string()
    });
    if spec.image.is_none() {
        spec.image = cluster.kubernetes_version.as_deref().map(default_image);
    }
    match (spec.min_size, spec.max_size) {
        (None, None) => {
            let size = if control_plane || bastion { 1 } else { 2 };
            spec.min_size = Some(size);
            spec.max_size = Some(size);
        }
        (Some(min), None) => spec.max_size = Some(min),
        (None, Some(max)) => spec.min_size = Some(max),
        (Some(_), Some(_)) => {}
    }
    if spec.subnets.is_empty() {
        // Instances go where the topology puts them: public subnets, or private ones behind NAT. A bastion is
        // reached from outside: public subnets always.
        let wanted = match cluster.topology {
            Some(Topology::Private) if !bastion => SubnetType::Private,
            _ => SubnetType::Public,
        };
        spec.subnets = cluster
            .subnets
            .iter()
            .filter(|s| s.subnet_type == Some(wanted))
            .map(|s| s.name.clone())
            .collect();
    }
    let volume = spec.root_volume.get_or_insert_with(Default::default);
    volume.size.get_or_insert(if control_plane {
        DEFAULT_CONTROL_PLANE_VOLUME_GIB
    } else if bastion {
        DEFAULT_BASTION_VOLUME_GIB
    } else {
        DEFAULT_NODE_VOLUME_GIB
    });
    volume
        .volume_type
        .get_or_insert_with(|| DEFAULT_VOLUME_TYPE.to_string());
    volume.encrypted.get_or_insert(true);
    crate::group_volumes::complete(spec);
    let metadata = spec.instance_metadata.get_or_insert_with(Default::default);
    metadata.http_tokens.get_or_insert(HttpTokens::Required);
    metadata.http_put_response_hop_limit.get_or_insert(1);
    // A bastion runs no kubelet: no labels or taints to give it.
    if bastion {
        return;
    }
    if spec.taints.is_none() {
        spec.taints = Some(if control_plane {
            vec![CONTROL_PLANE_TAINT.to_string()]
        } else {
            Vec::new()
        });
    }
    spec.node_labels
        .entry(INSTANCE_GROUP_LABEL.to_string())
        .or_insert(name);
}

/// Cloud labels of the cluster and the group merged; the group's win.
pub fn merged_cloud_labels(
    cluster: &ClusterSpec,
    ig: &InstanceGroupSpec,
) -> BTreeMap<String, String> {
    let mut labels = cluster.cloud_labels.clone();
    labels.extend(ig.cloud_labels.clone());
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_is_the_zone_without_its_letter() {
        assert_eq!(region_of_zone("us-west-2a"), Some("us-west-2"));
        assert_eq!(region_of_zone("eu-central-1c"), Some("eu-central-1"));
        assert_eq!(region_of_zone("us-west-2"), None);
        assert_eq!(region_of_zone("nonsense"), None);
    }

    #[test]
    fn default_image_names_the_minor_version() {
        assert_eq!(default_image("1.33.4"), "ballast-k8s-1.33-debian-12");
        assert_eq!(default_image("v1.32.0"), "ballast-k8s-1.32-debian-12");
    }

    #[test]
    fn subnet_cidrs_skip_blocks_already_taken() {
        let mut subnets = vec![
            ClusterSubnet {
                name: "a".into(),
                zone: "us-west-2a".into(),
                cidr: Some("172.20.0.0/19".into()),
                ..Default::default()
            },
            ClusterSubnet {
                name: "b".into(),
                zone: "us-west-2b".into(),
                ..Default::default()
            },
            ClusterSubnet {
                name: "c".into(),
                zone: "us-west-2c".into(),
                id: Some("subnet-0123456789abcdef0".into()),
                ..Default::default()
            },
        ];
        assign_subnet_cidrs("172.20.0.0/16".parse().expect("cidr"), &mut subnets);
        assert_eq!(subnets[1].cidr.as_deref(), Some("172.20.32.0/19"));
        assert_eq!(subnets[2].cidr, None, "a shared subnet keeps its own range");
    }
}
