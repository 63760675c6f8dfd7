//! The security groups a spec names beside the cluster's own (an instance group's `additionalSecurityGroups`,
//! `spec.api.loadBalancer.additionalSecurityGroups`) must exist in the cluster's VPC: AWS would refuse them only
//! half-way through an apply (a launch template is accepted and every launch from it fails; a load balancer in
//! another VPC's groups is refused after the network was made), so `update cluster` checks them first, before
//! any change, and refuses naming the field and the id. [`judge`] is pure; [`check`] reads EC2.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;
use ballast_state::spec::{ClusterConfig, KIND_CLUSTER, KIND_INSTANCE_GROUP};

use super::aws::call;
use super::error::{SecurityGroupRefusal, UpdateError};
use super::kinds::network;
use super::model::{ClusterModel, VpcModel};
use super::Cloud;

/// One security group id the spec names, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// `InstanceGroup/<name>` or `Cluster/<name>`.
    pub object: String,
    /// Its path in that object (`spec.additionalSecurityGroups[0]`).
    pub field: String,
    pub id: String,
}

/// Why one named security group cannot be used.
pub type Refusal = SecurityGroupRefusal;

/// Every security group the completed spec names beside the cluster's own, in the spec's order.
pub fn named(completed: &ClusterConfig) -> Vec<Named> {
    let spec = &completed.cluster.spec;
    let api = spec
        .api
        .as_ref()
        .and_then(|a| a.load_balancer.as_ref())
        .map(|lb| lb.additional_security_groups.clone())
        .unwrap_or_default();
    let cluster = api.into_iter().enumerate().map(|(i, id)| Named {
        object: format!("{KIND_CLUSTER}/{}", completed.name()),
        field: format!("spec.api.loadBalancer.additionalSecurityGroups[{i}]"),
        id,
    });
    let groups = completed.instance_groups.iter().flat_map(|ig| {
        ig.spec
            .additional_security_groups
            .iter()
            .enumerate()
            .map(|(i, id)| Named {
                object: format!("{KIND_INSTANCE_GROUP}/{}", ig.metadata.name),
                field: format!("spec.additionalSecurityGroups[{i}]"),
                id: id.clone(),
            })
    });
    cluster.chain(groups).collect()
}

/// Each named group that is not in `vpc` (the cluster's VPC id; `None` while the cluster's own VPC does not
/// exist yet, when no group can be in it), given `found`: the named ids that exist, with their VPC.
pub fn judge(named: &[Named], vpc: Option<&str>, found: &BTreeMap<String, String>) -> Vec<Refusal> {
    named
        .iter()
        .filter_map(|n| {
            let why = match (vpc, found.get(&n.id)) {
                (Some(vpc), Some(theirs)) if theirs == vpc => return None,
                (Some(vpc), Some(theirs)) => format!(
                    "is in VPC {theirs}, not in the cluster's VPC {vpc}: name a security group of {vpc}"
                ),
                (Some(vpc), None) => format!(
                    "does not exist (not in the cluster's VPC {vpc} nor any other of this account and region)"
                ),
                (None, _) => "cannot be in the cluster's VPC, which does not exist yet: create the cluster \
                     without it, then create the group in its VPC and add it (or use a shared VPC, \
                     spec.networkID)"
                    .to_string(),
            };
            Some(Refusal {
                object: n.object.clone(),
                field: n.field.clone(),
                id: n.id.clone(),
                why,
            })
        })
        .collect()
}

/// Refuses the update when a security group the spec names is not in the cluster's VPC. Makes no call when the
/// spec names none (a cluster without them pays nothing for the check).
pub async fn check(
    cloud: &Cloud,
    model: &ClusterModel,
    completed: &ClusterConfig,
) -> Result<(), UpdateError> {
    let named = named(completed);
    if named.is_empty() {
        return Ok(());
    }
    let vpc = match &model.vpc {
        VpcModel::Shared { id } => Some(id.clone()),
        VpcModel::Owned { .. } => network::find(cloud, model)
            .await?
            .owned
            .first()
            .map(|v| v.id.clone()),
    };
    let mut ids: Vec<String> = named.iter().map(|n| n.id.clone()).collect();
    ids.sort();
    ids.dedup();
    // A filter, not GroupIds: a missing id is then absent from the answer, not an error for the whole call.
    let out = call(
        "the spec's additional security groups",
        "DescribeSecurityGroups",
        || {
            cloud
                .ec2
                .describe_security_groups()
                .filters(
                    Filter::builder()
                        .name("group-id")
                        .set_values(Some(ids.clone()))
                        .build(),
                )
                .send()
        },
    )
    .await?;
    let found: BTreeMap<String, String> = out
        .security_groups()
        .iter()
        .filter_map(|g| Some((g.group_id()?.to_string(), g.vpc_id()?.to_string())))
        .collect();
    let refusals = judge(&named, vpc.as_deref(), &found);
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(UpdateError::SecurityGroups { refusals })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(object: &str, field: &str, id: &str) -> Named {
        Named {
            object: object.into(),
            field: field.into(),
            id: id.into(),
        }
    }

    #[test]
    fn only_groups_of_the_cluster_s_vpc_pass() {
        let named = [
            named(
                "InstanceGroup/nodes",
                "spec.additionalSecurityGroups[0]",
                "sg-0aaaaaaa",
            ),
            named(
                "InstanceGroup/nodes",
                "spec.additionalSecurityGroups[1]",
                "sg-0bbbbbbb",
            ),
            named(
                "Cluster/demo.example.com",
                "spec.api.loadBalancer.additionalSecurityGroups[0]",
                "sg-0ccccccc",
            ),
        ];
        let found = BTreeMap::from([
            ("sg-0aaaaaaa".to_string(), "vpc-1".to_string()),
            ("sg-0bbbbbbb".to_string(), "vpc-2".to_string()),
        ]);
        let refusals = judge(&named, Some("vpc-1"), &found);
        let text: Vec<String> = refusals.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            text,
            [
                "InstanceGroup/nodes: spec.additionalSecurityGroups[1]: sg-0bbbbbbb is in VPC vpc-2, not in \
                 the cluster's VPC vpc-1: name a security group of vpc-1",
                "Cluster/demo.example.com: spec.api.loadBalancer.additionalSecurityGroups[0]: sg-0ccccccc does \
                 not exist (not in the cluster's VPC vpc-1 nor any other of this account and region)",
            ]
        );
    }

    #[test]
    fn no_group_can_be_in_a_vpc_not_made_yet() {
        let named = [named(
            "InstanceGroup/nodes",
            "spec.additionalSecurityGroups[0]",
            "sg-0aaaaaaa",
        )];
        let found = BTreeMap::from([("sg-0aaaaaaa".to_string(), "vpc-1".to_string())]);
        let refusals = judge(&named, None, &found);
        assert_eq!(refusals.len(), 1);
        assert!(
            refusals[0].why.contains("does not exist yet"),
            "{}",
            refusals[0]
        );
        assert!(judge(&[], None, &BTreeMap::new()).is_empty());
    }
}
