//! What a roll decides from, read fresh each time: every group's Auto Scaling Group and instances (with their
//! node-spec tags, launch template versions and nodeup reports), and etcd's health as the supervisors publish it.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_autoscaling::types::LifecycleState;
use ballast_state::layout::ClusterPaths;
use ballast_state::report::Phase;
use ballast_state::spec::{ClusterConfig, Role};
use ballast_state::timestamp::unix_rfc3339;
use ballast_store::etcd::health::cluster_health;
use ballast_store::store::StateStore;

use super::decide::{EtcdView, GroupView, InstanceView, RollMarker, Sizes};
use super::{RollError, MARKER_TAG};
use crate::cloud::aws::{
    auto_scaling_groups, cluster_instances_among, group_resource_name, owned_launch_templates,
    tag_map, NODE_SPEC_HASH_TAG,
};
use crate::cloud::Cloud;
use crate::reports::expected_members;
use crate::reports::nodes::{read_reports, NodeSpecs, ReportRead};

/// What a roll keeps between its looks, each part something that never changes once seen.
#[derive(Debug, Default)]
pub struct Kept {
    /// The node-spec hash each instance reported itself Configured with. An instance is configured once per
    /// boot from the node spec its launch named, so once seen the answer never changes: the roll reads only the
    /// reports it does not know yet (re-reading every report twice a second made a roll of 100 instances the
    /// emulator's busiest client).
    configured: BTreeMap<String, String>,
    /// Each group member as EC2 described it: what a look uses of it (its launch tags, launch time and private
    /// DNS name) is fixed at launch, so only members not seen yet are described (describing every instance
    /// twice a second made a roll's cost grow with the square of the cluster's size).
    instances: BTreeMap<String, aws_sdk_ec2::types::Instance>,
}

/// Every group of the cluster, in the spec's order. `kept` is read first and filled with what is new.
pub async fn groups(
    cloud: &Cloud,
    store: &StateStore,
    completed: &ClusterConfig,
    kept: &mut Kept,
) -> Result<Vec<GroupView>, RollError> {
    let cluster = completed.name();
    let paths = ClusterPaths::new(cluster);
    let resources: Vec<String> = completed
        .instance_groups
        .iter()
        .map(|ig| group_resource_name(&ig.metadata.name, cluster))
        .collect();
    let asgs = auto_scaling_groups(cloud, cluster, &resources).await?;
    let members: BTreeSet<&str> = asgs
        .iter()
        .flat_map(|g| g.instances())
        .filter_map(|m| m.instance_id())
        .collect();
    kept.instances.retain(|id, _| members.contains(id.as_str()));
    let unseen: Vec<&str> = members
        .iter()
        .copied()
        .filter(|id| !kept.instances.contains_key(*id))
        .collect();
    if !unseen.is_empty() {
        for instance in cluster_instances_among(cloud, cluster, &unseen).await? {
            if let Some(id) = instance.instance_id() {
                kept.instances.insert(id.to_string(), instance);
            }
        }
    }
    let instances = &kept.instances;
    let known = &mut kept.configured;
    let template_versions: BTreeMap<String, String> = owned_launch_templates(cloud, cluster)
        .await?
        .iter()
        .filter_map(|t| {
            Some((
                t.launch_template_name()?.to_string(),
                t.default_version_number()?.to_string(),
            ))
        })
        .collect();
    let mut node_specs = NodeSpecs::new(store, &paths);
    let mut views = Vec::new();
    for (ig, resource) in completed.instance_groups.iter().zip(&resources) {
        let group = &ig.metadata.name;
        let asg = asgs
            .iter()
            .find(|g| g.auto_scaling_group_name() == Some(resource.as_str()))
            .ok_or_else(|| RollError::NoAutoScalingGroup {
                cluster: cluster.to_string(),
                group: group.clone(),
                resource: resource.clone(),
            })?;
        let marker = match asg
            .tags()
            .iter()
            .find(|t| t.key() == Some(MARKER_TAG))
            .and_then(|t| t.value())
        {
            None => None,
            Some(value) => {
                Some(
                    RollMarker::from_tag(value).map_err(|marker| RollError::BadMarker {
                        resource: resource.clone(),
                        value: value.to_string(),
                        marker,
                    })?,
                )
            }
        };
        let want_hash = node_specs.current(group).await?;
        // Only a report its own node signed counts (`ReportRead::Found`): a forged one never marks an instance
        // as configured.
        let unknown: Vec<(&str, Option<&str>)> = asg
            .instances()
            .iter()
            .filter_map(|m| m.instance_id())
            .filter(|id| !known.contains_key(*id))
            .map(|id| (id, instances.get(id).and_then(|i| i.private_dns_name())))
            .collect();
        for (id, read) in read_reports(store, &paths, unknown).await? {
            if let ReportRead::Found { report, .. } = read {
                if let (Phase::Configured, Some(hash)) = (&report.phase, &report.node_spec_sha256) {
                    known.insert(id, hash.clone());
                }
            }
        }
        let mut members = Vec::new();
        for member in asg.instances() {
            let Some(id) = member.instance_id() else {
                continue;
            };
            let ec2 = instances.get(id);
            let tags = ec2.map(|i| tag_map(i.tags())).unwrap_or_default();
            let configured_hash = known.get(id).cloned();
            members.push(InstanceView {
                id: id.to_string(),
                in_service: member.lifecycle_state() == Some(&LifecycleState::InService),
                lifecycle: member
                    .lifecycle_state()
                    .map_or("Unknown", |s| s.as_str())
                    .to_string(),
                node_spec_hash: tags.get(NODE_SPEC_HASH_TAG).cloned(),
                template_version: member
                    .launch_template()
                    .and_then(|t| t.version())
                    .filter(|v| !v.starts_with('$'))
                    .map(str::to_string),
                launched: ec2
                    .and_then(|i| i.launch_time())
                    .map(|t| unix_rfc3339(t.secs())),
                configured_hash,
                node_name: ec2
                    .and_then(|i| i.private_dns_name())
                    .filter(|n| !n.is_empty())
                    .map(str::to_string),
            });
        }
        views.push(GroupView {
            name: group.clone(),
            role: ig.spec.role,
            sizes: Sizes {
                min: asg.min_size().unwrap_or(0),
                max: asg.max_size().unwrap_or(0),
                desired: asg.desired_capacity().unwrap_or(0),
            },
            want_hash,
            want_template_version: template_versions.get(resource).cloned(),
            instances: members,
            marker,
        });
    }
    Ok(views)
}

/// etcd's health from the supervisors' reports, with the control-plane instances in service now.
pub async fn etcd(
    store: &StateStore,
    completed: &ClusterConfig,
    groups: &[GroupView],
) -> Result<EtcdView, RollError> {
    let paths = ClusterPaths::new(completed.name());
    let expected = expected_members(completed);
    let summary = cluster_health(store, &paths, expected)
        .await
        .map_err(RollError::EtcdHealth)?;
    let in_service: BTreeSet<String> = groups
        .iter()
        .filter(|g| g.role == Role::ControlPlane)
        .flat_map(|g| g.instances.iter())
        .filter(|i| i.in_service)
        .map(|i| i.id.clone())
        .collect();
    Ok(EtcdView {
        healthy: summary.healthy,
        voters: summary.voting_members.into_iter().collect(),
        expected,
        in_service,
        problems: summary.problems,
    })
}
