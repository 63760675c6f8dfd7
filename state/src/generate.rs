//! The spec `ballast create cluster` writes from its flags: explicit enough that the operator sees what they
//! get (subnets and their CIDRs, one control-plane group per zone), minimal everywhere a default will do.

use std::collections::BTreeMap;

use ipnet::Ipv4Net;

use crate::defaults::{
    region_of_zone, DEFAULT_KUBERNETES_VERSION, DEFAULT_NETWORK_CIDR, SUBNET_EXTRA_BITS,
};
use crate::error::FieldError;
use crate::limits::MAX_GROUP_SIZE;
use crate::spec::*;
use crate::validate::CONTROL_PLANE_COUNTS;

/// What `create cluster`'s flags say. Empty/None means "not given".
#[derive(Debug, Clone, Default)]
pub struct ClusterTemplate {
    pub name: String,
    pub zones: Vec<String>,
    pub control_plane_zones: Vec<String>,
    pub control_plane_count: Option<u32>,
    pub node_count: Option<u32>,
    pub node_size: Option<String>,
    pub control_plane_size: Option<String>,
    pub kubernetes_version: Option<String>,
    pub network_cidr: Option<String>,
    pub network_id: Option<String>,
    /// Shared subnet ids, one per zone, in the order of `zones`.
    pub subnet_ids: Vec<String>,
    pub topology: Option<Topology>,
    pub networking: Option<Networking>,
    pub ssh_access: Vec<String>,
    pub admin_access: Vec<String>,
    pub image: Option<String>,
    pub encrypt_etcd_storage: Option<bool>,
    /// `--state-kms-key`: recorded as `spec.stateStore.kmsKeyId`, the key the nodes write with.
    pub state_kms_key: Option<String>,
}

/// The flag a template problem is about, for error messages.
const FLAGS: &str = "create cluster flags";

/// Builds the cluster and its instance groups. Problems with the flags themselves (not the spec they make)
/// are returned here; everything else is left to validation, which names the spec field.
pub fn generate(template: &ClusterTemplate) -> Result<ClusterConfig, Vec<FieldError>> {
    let mut errors = Vec::new();
    let flag_error = |flag: &str, message: String| FieldError::new(FLAGS, flag, message);
    if template.zones.is_empty() {
        errors.push(flag_error(
            "--zones",
            "is required: list the availability zones, e.g. --zones us-west-2a,us-west-2b,us-west-2c".into(),
        ));
    }
    let mut unique = Vec::new();
    for zone in &template.zones {
        if unique.contains(zone) {
            errors.push(flag_error("--zones", format!("{zone:?} is listed twice")));
        } else {
            unique.push(zone.clone());
        }
    }
    for zone in &template.control_plane_zones {
        if !template.zones.contains(zone) {
            errors.push(flag_error(
                "--control-plane-zones",
                format!("{zone:?} is not one of --zones"),
            ));
        }
    }
    // Checked here, not left to validation: one group is generated per control-plane instance, so a huge
    // count would exhaust memory before validation could refuse it.
    if let Some(count) = template.control_plane_count {
        if !CONTROL_PLANE_COUNTS.contains(&(count as usize)) {
            errors.push(flag_error(
                "--control-plane-count",
                format!("must be 1, 3 or 5 (etcd needs an odd number of members for a quorum), found {count}"),
            ));
        }
    }
    if let Some(count) = template.node_count {
        if count > MAX_GROUP_SIZE {
            errors.push(flag_error(
                "--node-count",
                format!("must be at most {MAX_GROUP_SIZE}, found {count}"),
            ));
        }
    }
    if !template.subnet_ids.is_empty() {
        if template.subnet_ids.len() != template.zones.len() {
            errors.push(flag_error(
                "--subnets",
                format!(
                    "gives {} subnet ids for {} zones: give one shared subnet id per zone, in the order of --zones",
                    template.subnet_ids.len(),
                    template.zones.len()
                ),
            ));
        }
        if template.network_id.is_none() {
            errors.push(flag_error(
                "--subnets",
                "shared subnets need their VPC: add --network-id".into(),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(build(template))
}

/// The cluster and its groups from flags [`generate`] has checked.
fn build(template: &ClusterTemplate) -> ClusterConfig {
    let topology = template.topology.unwrap_or(Topology::Public);
    let subnets = subnets_for(template, topology);
    let instance_subnet_type = match topology {
        Topology::Public => SubnetType::Public,
        Topology::Private => SubnetType::Private,
    };
    let subnet_in_zone = |zone: &str| {
        subnets
            .iter()
            .find(|s| s.zone == zone && s.subnet_type == Some(instance_subnet_type))
            .map(|s| s.name.clone())
    };

    let control_plane_zones = if template.control_plane_zones.is_empty() {
        template.zones.clone()
    } else {
        template.control_plane_zones.clone()
    };
    // Highly available by default when the zones allow it: one control-plane group per zone.
    let count = template
        .control_plane_count
        .unwrap_or(if control_plane_zones.len() >= 3 { 3 } else { 1 }) as usize;
    let mut instance_groups = Vec::new();
    for i in 0..count {
        let zone = &control_plane_zones[i % control_plane_zones.len()];
        let name = if count <= control_plane_zones.len() {
            format!("control-plane-{zone}")
        } else {
            format!("control-plane-{zone}-{}", i / control_plane_zones.len() + 1)
        };
        let mut spec = InstanceGroupSpec::with_role(Role::ControlPlane);
        spec.machine_type = template.control_plane_size.clone();
        spec.image = template.image.clone();
        spec.min_size = Some(1);
        spec.max_size = Some(1);
        spec.subnets = subnet_in_zone(zone).into_iter().collect();
        instance_groups.push(InstanceGroup::new(&name, spec));
    }
    let node_count = template.node_count.unwrap_or(template.zones.len() as u32);
    let mut nodes = InstanceGroupSpec::with_role(Role::Node);
    nodes.machine_type = template.node_size.clone();
    nodes.image = template.image.clone();
    nodes.min_size = Some(node_count);
    nodes.max_size = Some(node_count);
    nodes.subnets = template
        .zones
        .iter()
        .filter_map(|z| subnet_in_zone(z))
        .collect();
    instance_groups.push(InstanceGroup::new("nodes", nodes));

    let region = template
        .zones
        .first()
        .and_then(|z| region_of_zone(z))
        .map(str::to_string);
    let spec = ClusterSpec {
        // Pinned in the spec, so a newer Ballast with a newer default never upgrades a cluster by itself.
        kubernetes_version: Some(
            template
                .kubernetes_version
                .clone()
                .unwrap_or_else(|| DEFAULT_KUBERNETES_VERSION.to_string()),
        ),
        region,
        network_cidr: template.network_cidr.clone().or_else(|| {
            template
                .network_id
                .is_none()
                .then(|| DEFAULT_NETWORK_CIDR.to_string())
        }),
        network_id: template.network_id.clone(),
        subnets,
        topology: Some(topology),
        networking: template.networking,
        ssh_access: (!template.ssh_access.is_empty()).then(|| template.ssh_access.clone()),
        // Written even when empty: a new cluster's API is reachable from inside its VPC only until the operator
        // names who may reach it (`--admin-access`). A spec without the field completes to 0.0.0.0/0, as specs
        // written before this default did (docs/spec.md).
        kubernetes_api_access: Some(template.admin_access.clone()),
        etcd: template.encrypt_etcd_storage.map(|encrypted| EtcdSpec {
            encrypted_volume: Some(encrypted),
            ..Default::default()
        }),
        cloud_labels: BTreeMap::new(),
        audit_log: None,
        state_store: template.state_kms_key.clone().map(|key| StateStoreSpec {
            kms_key_id: Some(key),
        }),
        ..Default::default()
    };
    ClusterConfig {
        cluster: Cluster::new(&template.name, spec),
        instance_groups,
    }
}

/// One subnet per zone for instances; in a private topology also a small public "utility-" subnet per zone
/// for its NAT gateway and the API's load balancer. CIDRs are carved from the network so the spec shows them.
fn subnets_for(template: &ClusterTemplate, topology: Topology) -> Vec<ClusterSubnet> {
    let network: Option<Ipv4Net> = template
        .network_cidr
        .as_deref()
        .or(template
            .network_id
            .is_none()
            .then_some(DEFAULT_NETWORK_CIDR))
        .and_then(|c| c.parse().ok());
    let shared = !template.subnet_ids.is_empty();
    let mut blocks = network
        .filter(|_| !shared)
        .and_then(|n| {
            n.subnets(n.prefix_len().saturating_add(SUBNET_EXTRA_BITS).min(28))
                .ok()
        })
        .into_iter()
        .flatten();
    let mut subnets = Vec::new();
    for (i, zone) in template.zones.iter().enumerate() {
        subnets.push(ClusterSubnet {
            name: zone.clone(),
            zone: zone.clone(),
            cidr: blocks.next().map(|b| b.to_string()),
            id: template.subnet_ids.get(i).cloned(),
            subnet_type: Some(match topology {
                Topology::Public => SubnetType::Public,
                Topology::Private => SubnetType::Private,
            }),
        });
    }
    if topology == Topology::Private && !shared {
        // Utility subnets are small: carve them from the next block.
        let mut utility_blocks = blocks
            .next()
            .and_then(|b| b.subnets(b.prefix_len().saturating_add(3).min(28)).ok())
            .into_iter()
            .flatten();
        for zone in &template.zones {
            subnets.push(ClusterSubnet {
                name: format!("utility-{zone}"),
                zone: zone.clone(),
                cidr: utility_blocks.next().map(|b| b.to_string()),
                id: None,
                subnet_type: Some(SubnetType::Public),
            });
        }
    }
    subnets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> ClusterTemplate {
        ClusterTemplate {
            name: "demo.example.com".into(),
            zones: vec!["us-west-2a".into()],
            ..Default::default()
        }
    }

    #[test]
    fn a_huge_control_plane_count_is_refused_before_any_group_is_made() {
        // Before the check this allocated 4294967295 instance groups and ran out of memory.
        let errors = generate(&ClusterTemplate {
            control_plane_count: Some(u32::MAX),
            ..template()
        })
        .expect_err("refused");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, "--control-plane-count");
        assert!(errors[0].message.contains("4294967295"), "{}", errors[0]);
    }

    #[test]
    fn control_plane_counts_are_1_3_or_5() {
        for count in [0, 2, 4, 6] {
            assert!(generate(&ClusterTemplate {
                control_plane_count: Some(count),
                ..template()
            })
            .is_err());
        }
        let config = generate(&ClusterTemplate {
            control_plane_count: Some(5),
            ..template()
        })
        .expect("five is allowed");
        let control_planes = config
            .instance_groups
            .iter()
            .filter(|ig| ig.spec.role == Role::ControlPlane)
            .count();
        assert_eq!(control_planes, 5);
    }

    #[test]
    fn node_counts_are_bounded() {
        let errors = generate(&ClusterTemplate {
            node_count: Some(MAX_GROUP_SIZE + 1),
            ..template()
        })
        .expect_err("refused");
        assert_eq!(errors[0].path, "--node-count");
        assert!(generate(&ClusterTemplate {
            node_count: Some(MAX_GROUP_SIZE),
            ..template()
        })
        .is_ok());
    }
}
