//! Auto Scaling Groups, one per group, launching the group's launch template's default version in its subnets,
//! with propagated ownership, role and group tags; the control plane's are in the API target group.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_autoscaling::types as asg;
use ballast_state::spec::Role;
use serde::{Deserialize, Serialize};

use super::{ActualState, Known, Target};
use crate::cloud::aws::{auto_scaling_groups, call};
use crate::cloud::error::UpdateError;
use crate::cloud::group_aws::{GroupAws, MixedPolicy};
use crate::cloud::kinds::task::{Finder, Task, Wanted as ClusterWanted};
use crate::cloud::model::{ClusterModel, GroupModel};
use crate::cloud::plan::{
    or_known_after_apply, Action, Change as PlanChange, Kind, Planned, Stage,
};
use crate::cloud::terraform::{
    tf_name, value, values, RenderError, Resource as TfResource, Terraform,
};
use crate::cloud::Cloud;
use ballast_state::group_aws::SpotAllocationStrategy;

/// An Auto Scaling Group as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AutoScalingGroup {
    #[serde(default)]
    pub min_size: Option<i32>,
    #[serde(default)]
    pub max_size: Option<i32>,
    #[serde(default)]
    pub desired_capacity: Option<i32>,
    /// Subnet ids, comma-separated (AWS's `VPCZoneIdentifier`).
    #[serde(default)]
    pub subnets: String,
    #[serde(default)]
    pub launch_template_id: Option<String>,
    #[serde(default)]
    pub target_groups: Vec<String>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Its mixed instances policy as a plan shows it (`GroupAws`'s `MixedPolicy::summary`); None: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed_policy: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub protected_from_scale_in: bool,
    /// Seconds; 0: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_instance_lifetime: i32,
    /// Classic load balancers it is attached to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_balancer_names: Vec<String>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    /// By name (`<group>.<cluster>`).
    #[serde(default)]
    pub groups: BTreeMap<String, AutoScalingGroup>,
}

/// What a group's Auto Scaling Group should be, with the ids known so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub group: GroupModel,
    /// Subnet ids (or "known after apply"), comma-separated.
    pub zone_identifier: String,
    pub launch_template_id: Option<String>,
    pub target_groups: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Create(Wanted),
    Update {
        wanted: Wanted,
        /// Plan lines: (field, value found, value wanted).
        fields: Vec<(&'static str, Option<String>, String)>,
        /// Sizes, subnets or launch template differ: one UpdateAutoScalingGroup, with this desired capacity.
        resize: Option<i32>,
        /// Target groups to attach.
        attach: Vec<String>,
        /// Classic load balancers to attach (the operator's: `externalLoadBalancers`).
        attach_classic: Vec<String>,
        /// Tags to set (missing or with another value).
        tags: BTreeMap<String, String>,
        /// The cluster autoscaler's tags to take off: it must no longer find or size the group
        /// (`autoscale: false`, the autoscaler turned off, a label or taint gone).
        untag: Vec<String>,
    },
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        let change = match self {
            Change::Create(wanted) => {
                let group = &wanted.group;
                PlanChange::new(
                    Stage::AutoScalingGroups,
                    Kind::AutoScalingGroup,
                    &group.resource_name,
                    Action::Create,
                )
                .field("minSize", None, group.min_size.to_string())
                .field("maxSize", None, group.max_size.to_string())
                .field("subnets", None, group.subnets.join(", "))
                .with_fields(settings_fields(&group.aws))
            }
            Change::Update { wanted, fields, .. } => {
                let mut change = PlanChange::new(
                    Stage::AutoScalingGroups,
                    Kind::AutoScalingGroup,
                    &wanted.group.resource_name,
                    Action::Update,
                );
                for (field, from, to) in fields {
                    change = change.field(field, from.clone(), to);
                }
                change
            }
        };
        vec![change]
    }
}

pub async fn find(cloud: &Cloud, model: &ClusterModel) -> Result<Actual, UpdateError> {
    let names: Vec<String> = model
        .groups
        .iter()
        .map(|g| g.resource_name.clone())
        .collect();
    let found = auto_scaling_groups(cloud, &model.cluster, &names).await?;
    let groups = found
        .iter()
        .map(|g| {
            let group = AutoScalingGroup {
                min_size: g.min_size(),
                max_size: g.max_size(),
                desired_capacity: g.desired_capacity(),
                subnets: g.vpc_zone_identifier().unwrap_or_default().to_string(),
                // A mixed group names its template in its policy.
                launch_template_id: g
                    .launch_template()
                    .or_else(|| {
                        g.mixed_instances_policy()
                            .and_then(|p| p.launch_template())
                            .and_then(|l| l.launch_template_specification())
                    })
                    .and_then(|l| l.launch_template_id())
                    .map(str::to_string),
                mixed_policy: g.mixed_instances_policy().map(found_policy_summary),
                protected_from_scale_in: g.new_instances_protected_from_scale_in() == Some(true),
                max_instance_lifetime: g.max_instance_lifetime().unwrap_or(0),
                load_balancer_names: g.load_balancer_names().to_vec(),
                target_groups: g.target_group_arns().to_vec(),
                tags: g
                    .tags()
                    .iter()
                    .filter_map(|t| {
                        Some((t.key()?.to_string(), t.value().unwrap_or("").to_string()))
                    })
                    .collect(),
            };
            (
                g.auto_scaling_group_name().unwrap_or_default().to_string(),
                group,
            )
        })
        .collect();
    Ok(Actual { groups })
}

fn wanted(group: &GroupModel, known: &Known) -> Wanted {
    let subnet_ids: Vec<String> = group
        .subnets
        .iter()
        .map(|s| or_known_after_apply(known.subnet_ids.get(s)))
        .collect();
    Wanted {
        group: group.clone(),
        zone_identifier: subnet_ids.join(","),
        launch_template_id: known.launch_template_ids.get(&group.name).cloned(),
        // The operator's target groups, after (for control-plane groups) the cluster's own API target group.
        target_groups: [
            match group.role {
                // API-server groups serve the API behind the same load balancer as the control plane.
                Role::ControlPlane | Role::ApiServer => {
                    vec![or_known_after_apply(known.target_group_arn.as_ref())]
                }
                Role::Node | Role::Bastion => Vec::new(),
            },
            group.aws.target_group_arns.clone(),
        ]
        .concat(),
    }
}

/// Plan lines of a created group's settings.
trait WithFields {
    fn with_fields(self, fields: Vec<(&'static str, String)>) -> Self;
}

impl WithFields for PlanChange {
    fn with_fields(self, fields: Vec<(&'static str, String)>) -> Self {
        fields
            .into_iter()
            .fold(self, |change, (field, to)| change.field(field, None, to))
    }
}

/// A group's Auto Scaling settings as plan lines: only those not at their default.
fn settings_fields(aws: &GroupAws) -> Vec<(&'static str, String)> {
    let mut fields = Vec::new();
    if let Some(policy) = &aws.mixed {
        fields.push(("mixedInstancesPolicy", policy.summary()));
    }
    if aws.protect_from_scale_in {
        fields.push(("protectedFromScaleIn", "true".to_string()));
    }
    if aws.max_instance_lifetime != 0 {
        fields.push((
            "maxInstanceLifetime",
            format!("{}s", aws.max_instance_lifetime),
        ));
    }
    if !aws.load_balancer_names.is_empty() {
        fields.push(("loadBalancers", aws.load_balancer_names.join(", ")));
    }
    if !aws.target_group_arns.is_empty() {
        fields.push(("externalTargetGroups", aws.target_group_arns.join(", ")));
    }
    fields
}

/// A found policy in the form of [`MixedPolicy::summary`], so the two compare.
fn found_policy_summary(policy: &asg::MixedInstancesPolicy) -> String {
    let types: Vec<String> = policy
        .launch_template()
        .map(|l| l.overrides())
        .unwrap_or_default()
        .iter()
        .filter_map(|o| o.instance_type().map(str::to_string))
        .collect();
    let d = policy.instances_distribution();
    let strategy = d
        .and_then(|d| d.spot_allocation_strategy())
        .and_then(SpotAllocationStrategy::parse)
        .unwrap_or(SpotAllocationStrategy::LowestPrice);
    MixedPolicy {
        instance_types: types,
        on_demand_base: d.and_then(|d| d.on_demand_base_capacity()).unwrap_or(0),
        on_demand_above_base: d
            .and_then(|d| d.on_demand_percentage_above_base_capacity())
            .unwrap_or(100),
        spot_allocation_strategy: strategy,
        spot_instance_pools: if strategy == SpotAllocationStrategy::LowestPrice {
            Some(d.and_then(|d| d.spot_instance_pools()).unwrap_or(2))
        } else {
            None
        },
        spot_max_price: d
            .and_then(|d| d.spot_max_price())
            .filter(|p| !p.is_empty())
            .map(str::to_string),
    }
    .summary()
}

/// The policy to send: the group's launch template (its default version) with an override per instance type.
fn mixed_instances_policy(policy: &MixedPolicy, wanted: &Wanted) -> asg::MixedInstancesPolicy {
    let mut distribution = asg::InstancesDistribution::builder()
        .on_demand_base_capacity(policy.on_demand_base)
        .on_demand_percentage_above_base_capacity(policy.on_demand_above_base)
        .spot_allocation_strategy(policy.spot_allocation_strategy.as_str())
        .set_spot_instance_pools(policy.spot_instance_pools);
    if let Some(price) = &policy.spot_max_price {
        distribution = distribution.spot_max_price(price);
    }
    let overrides: Vec<asg::LaunchTemplateOverrides> = policy
        .instance_types
        .iter()
        .map(|t| {
            asg::LaunchTemplateOverrides::builder()
                .instance_type(t)
                .build()
        })
        .collect();
    asg::MixedInstancesPolicy::builder()
        .launch_template(
            asg::LaunchTemplate::builder()
                .launch_template_specification(launch_template(wanted))
                .set_overrides(Some(overrides))
                .build(),
        )
        .instances_distribution(distribution.build())
        .build()
}

pub fn diff(model: &ClusterModel, known: &Known, actual: &Actual) -> Vec<Change> {
    let mut changes = Vec::new();
    for group in &model.groups {
        let wanted = wanted(group, known);
        let Some(current) = actual.groups.get(&group.resource_name) else {
            changes.push(Change::Create(wanted));
            continue;
        };
        if let Some(change) = diff_one(wanted, current) {
            changes.push(change);
        }
    }
    changes
}

fn diff_one(wanted: Wanted, current: &AutoScalingGroup) -> Option<Change> {
    let group = &wanted.group;
    let mut fields = Vec::new();
    let mut resize = false;
    let mut compare = |field, from: Option<i32>, to: i32| {
        if from != Some(to) {
            fields.push((field, from.map(|n| n.to_string()), to.to_string()));
            true
        } else {
            false
        }
    };
    resize |= compare("minSize", current.min_size, group.min_size);
    resize |= compare("maxSize", current.max_size, group.max_size);
    let current_subnets: BTreeSet<&str> = current
        .subnets
        .split(',')
        .filter(|s| !s.is_empty())
        .collect();
    let want_subnets: BTreeSet<&str> = wanted
        .zone_identifier
        .split(',')
        .filter(|s| !s.is_empty())
        .collect();
    if current_subnets != want_subnets {
        fields.push((
            "subnets",
            Some(current.subnets.clone()),
            wanted.zone_identifier.clone(),
        ));
        resize = true;
    }
    if current.launch_template_id != wanted.launch_template_id {
        fields.push((
            "launchTemplate",
            current.launch_template_id.clone(),
            or_known_after_apply(wanted.launch_template_id.as_ref()),
        ));
        resize = true;
    }
    let aws = &group.aws;
    let want_policy = aws.mixed.as_ref().map(MixedPolicy::summary);
    if current.mixed_policy != want_policy {
        fields.push((
            "mixedInstancesPolicy",
            current.mixed_policy.clone(),
            want_policy.unwrap_or_else(|| "(none)".to_string()),
        ));
        resize = true;
    }
    if current.protected_from_scale_in != aws.protect_from_scale_in {
        fields.push((
            "protectedFromScaleIn",
            Some(current.protected_from_scale_in.to_string()),
            aws.protect_from_scale_in.to_string(),
        ));
        resize = true;
    }
    if current.max_instance_lifetime != aws.max_instance_lifetime {
        fields.push((
            "maxInstanceLifetime",
            Some(format!("{}s", current.max_instance_lifetime)),
            format!("{}s", aws.max_instance_lifetime),
        ));
        resize = true;
    }
    let current_classic: BTreeSet<&String> = current.load_balancer_names.iter().collect();
    let attach_classic: Vec<String> = aws
        .load_balancer_names
        .iter()
        .filter(|n| !current_classic.contains(n))
        .cloned()
        .collect();
    if !attach_classic.is_empty() {
        fields.push((
            "loadBalancers",
            None,
            format!("+ {}", attach_classic.join(", ")),
        ));
    }
    let current_tgs: BTreeSet<&String> = current.target_groups.iter().collect();
    let attach: Vec<String> = wanted
        .target_groups
        .iter()
        .collect::<BTreeSet<_>>()
        .difference(&current_tgs)
        .map(|s| s.to_string())
        .collect();
    if !attach.is_empty() {
        fields.push(("targetGroups", None, format!("+ {}", attach.join(", "))));
    }
    let wanted_tags = group.asg_tags();
    let tags: BTreeMap<String, String> = wanted_tags
        .iter()
        .filter(|(k, v)| current.tags.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !tags.is_empty() {
        let keys: Vec<&str> = tags.keys().map(String::as_str).collect();
        fields.push(("tags", None, keys.join(", ")));
    }
    // Only the autoscaler's tags are ever taken off: any other tag on the group may be the operator's.
    let untag: Vec<String> = current
        .tags
        .keys()
        .filter(|k| {
            k.starts_with(ballast_state::autoscaler::TAG_PREFIX) && !wanted_tags.contains_key(*k)
        })
        .cloned()
        .collect();
    if !untag.is_empty() {
        fields.push(("tags", None, format!("- {}", untag.join(", "))));
    }
    if fields.is_empty() {
        return None;
    }
    // Keep the current desired capacity inside the new bounds; never fight an autoscaler.
    let desired = current
        .desired_capacity
        .unwrap_or(group.min_size)
        .clamp(group.min_size, group.max_size);
    Some(Change::Update {
        wanted,
        fields,
        resize: resize.then_some(desired),
        attach,
        attach_classic,
        tags,
        untag,
    })
}

fn asg_tags(group: &GroupModel, tags: &BTreeMap<String, String>) -> Vec<asg::Tag> {
    tags.iter()
        .map(|(k, v)| {
            asg::Tag::builder()
                .key(k)
                .value(v)
                .propagate_at_launch(true)
                .resource_id(&group.resource_name)
                .resource_type("auto-scaling-group")
                .build()
        })
        .collect()
}

fn launch_template(wanted: &Wanted) -> asg::LaunchTemplateSpecification {
    asg::LaunchTemplateSpecification::builder()
        .launch_template_id(wanted.launch_template_id.clone().unwrap_or_default())
        .version("$Default")
        .build()
}

pub async fn apply(target: &Target<'_>, changes: &[Change]) -> Result<(), UpdateError> {
    let client = &target.cloud.autoscaling;
    for change in changes {
        match change {
            Change::Create(wanted) => {
                let group = &wanted.group;
                let tags = asg_tags(group, &group.asg_tags());
                let target_groups =
                    (!wanted.target_groups.is_empty()).then(|| wanted.target_groups.clone());
                call(
                    &format!("AutoScalingGroup {}", group.resource_name),
                    "CreateAutoScalingGroup",
                    || {
                        client
                            .create_auto_scaling_group()
                            .auto_scaling_group_name(&group.resource_name)
                            .set_launch_template(
                                group.aws.mixed.is_none().then(|| launch_template(wanted)),
                            )
                            .set_mixed_instances_policy(
                                group
                                    .aws
                                    .mixed
                                    .as_ref()
                                    .map(|p| mixed_instances_policy(p, wanted)),
                            )
                            .new_instances_protected_from_scale_in(group.aws.protect_from_scale_in)
                            .set_max_instance_lifetime(
                                (group.aws.max_instance_lifetime != 0)
                                    .then_some(group.aws.max_instance_lifetime),
                            )
                            .set_load_balancer_names(
                                (!group.aws.load_balancer_names.is_empty())
                                    .then(|| group.aws.load_balancer_names.clone()),
                            )
                            .min_size(group.min_size)
                            .max_size(group.max_size)
                            .desired_capacity(group.min_size)
                            .vpc_zone_identifier(&wanted.zone_identifier)
                            .set_target_group_arns(target_groups.clone())
                            .set_tags(Some(tags.clone()))
                            .send()
                    },
                )
                .await?;
            }
            Change::Update {
                wanted,
                resize,
                attach,
                attach_classic,
                tags,
                untag,
                ..
            } => {
                apply_update(target.cloud, wanted, *resize, attach, tags).await?;
                if !attach_classic.is_empty() {
                    let resource = format!("AutoScalingGroup {}", wanted.group.resource_name);
                    call(&resource, "AttachLoadBalancers", || {
                        client
                            .attach_load_balancers()
                            .auto_scaling_group_name(&wanted.group.resource_name)
                            .set_load_balancer_names(Some(attach_classic.clone()))
                            .send()
                    })
                    .await?;
                }
                if !untag.is_empty() {
                    let resource = format!("AutoScalingGroup {}", wanted.group.resource_name);
                    let keys: Vec<asg::Tag> = untag
                        .iter()
                        .map(|key| {
                            asg::Tag::builder()
                                .key(key)
                                .resource_id(&wanted.group.resource_name)
                                .resource_type("auto-scaling-group")
                                .build()
                        })
                        .collect();
                    call(&resource, "DeleteTags", || {
                        client.delete_tags().set_tags(Some(keys.clone())).send()
                    })
                    .await?;
                }
            }
        }
    }
    Ok(())
}

async fn apply_update(
    cloud: &Cloud,
    wanted: &Wanted,
    resize: Option<i32>,
    attach: &[String],
    tags: &BTreeMap<String, String>,
) -> Result<(), UpdateError> {
    let client = &cloud.autoscaling;
    let group = &wanted.group;
    let resource = format!("AutoScalingGroup {}", group.resource_name);
    if let Some(desired) = resize {
        call(&resource, "UpdateAutoScalingGroup", || {
            client
                .update_auto_scaling_group()
                .auto_scaling_group_name(&group.resource_name)
                // Sending the launch template alone takes a mixed instances policy away; sending a policy
                // makes the group mixed.
                .set_launch_template(group.aws.mixed.is_none().then(|| launch_template(wanted)))
                .set_mixed_instances_policy(
                    group
                        .aws
                        .mixed
                        .as_ref()
                        .map(|p| mixed_instances_policy(p, wanted)),
                )
                .new_instances_protected_from_scale_in(group.aws.protect_from_scale_in)
                .max_instance_lifetime(group.aws.max_instance_lifetime)
                .min_size(group.min_size)
                .max_size(group.max_size)
                .desired_capacity(desired)
                .vpc_zone_identifier(&wanted.zone_identifier)
                .send()
        })
        .await?;
    }
    if !attach.is_empty() {
        call(&resource, "AttachLoadBalancerTargetGroups", || {
            client
                .attach_load_balancer_target_groups()
                .auto_scaling_group_name(&group.resource_name)
                .set_target_group_arns(Some(attach.to_vec()))
                .send()
        })
        .await?;
    }
    if !tags.is_empty() {
        let tags = asg_tags(group, tags);
        call(&resource, "CreateOrUpdateTags", || {
            client
                .create_or_update_tags()
                .set_tags(Some(tags.clone()))
                .send()
        })
        .await?;
    }
    Ok(())
}

/// Deletes a group and its instances (`delete cluster`): protection from scale-in removed and the group scaled
/// to zero first, because the pinned emulator ignores ForceDelete (instances it leaves are terminated by the
/// teardown's instance sweep once no group can replace them); ForceDelete still asks AWS for the same.
pub async fn delete(
    cloud: &Cloud,
    group: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    use super::deletion::attempt;
    let client = &cloud.autoscaling;
    let name = &group.id;
    let label = group.label();
    // AWS takes at most 50 instances per SetInstanceProtection call.
    for chunk in group.parts.chunks(50) {
        attempt(&label, "SetInstanceProtection", || {
            client
                .set_instance_protection()
                .auto_scaling_group_name(name)
                .set_instance_ids(Some(chunk.to_vec()))
                .protected_from_scale_in(false)
                .send()
        })
        .await?;
    }
    attempt(&label, "UpdateAutoScalingGroup", || {
        client
            .update_auto_scaling_group()
            .auto_scaling_group_name(name)
            .min_size(0)
            .max_size(0)
            .desired_capacity(0)
            .send()
    })
    .await?;
    attempt(&label, "DeleteAutoScalingGroup", || {
        client
            .delete_auto_scaling_group()
            .auto_scaling_group_name(name)
            .force_delete(true)
            .send()
    })
    .await
}

/// Removes tag `key` from group `name` (a group the cluster keeps).
pub async fn remove_tag(
    cloud: &Cloud,
    name: &str,
    key: &str,
    label: &str,
) -> Result<(), super::deletion::Failed> {
    use aws_sdk_autoscaling::types::Tag;
    super::deletion::attempt(label, "DeleteTags", || {
        cloud
            .autoscaling
            .delete_tags()
            .tags(
                Tag::builder()
                    .resource_id(name)
                    .resource_type("auto-scaling-group")
                    .key(key)
                    .build(),
            )
            .send()
    })
    .await
}

/// The groups (their instances go with them; hooks too), and Auto Scaling's own tags on one the cluster keeps.
impl super::task::Delete for AutoScalingGroupsTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::Kinds(&[super::deletion::ResourceKind::AutoScalingGroup])
    }

    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(delete(deleting.cloud, resource))
    }

    fn untag<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        _kind: super::deletion::ResourceKind,
        resource: &'a super::deletion::Resource,
        key: &'a str,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(async move {
            let label = resource.label();
            remove_tag(deleting.cloud, &resource.id, key, &label).await
        })
    }
}

/// `aws_autoscaling_group`'s `mixed_instances_policy` block, as kops writes it.
fn terraform_policy(policy: &MixedPolicy, template: &str) -> TfResource {
    let mut distribution = TfResource::new()
        .attr("on_demand_base_capacity", i64::from(policy.on_demand_base))
        .attr(
            "on_demand_percentage_above_base_capacity",
            i64::from(policy.on_demand_above_base),
        )
        .attr(
            "spot_allocation_strategy",
            policy.spot_allocation_strategy.as_str(),
        );
    if let Some(pools) = policy.spot_instance_pools {
        distribution = distribution.attr("spot_instance_pools", i64::from(pools));
    }
    if let Some(price) = &policy.spot_max_price {
        distribution = distribution.attr("spot_max_price", price.as_str());
    }
    let mut launch = TfResource::new().block(
        "launch_template_specification",
        TfResource::new()
            .attr("launch_template_id", value(template))
            .attr("version", "$Default"),
    );
    for instance_type in &policy.instance_types {
        launch = launch.block(
            "override",
            TfResource::new().attr("instance_type", instance_type.as_str()),
        );
    }
    TfResource::new()
        .block("instances_distribution", distribution)
        .block("launch_template", launch)
}

/// The groups' Auto Scaling Groups, as a [`Task`].
pub struct AutoScalingGroupsTask;

impl Task for AutoScalingGroupsTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.auto_scaling_groups
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.auto_scaling_groups = actual;
    }

    async fn find(
        &self,
        finder: &Finder<'_>,
        wanted: ClusterWanted<'_>,
    ) -> Result<Actual, UpdateError> {
        find(finder.cloud, wanted.model).await
    }

    fn diff(
        &self,
        wanted: ClusterWanted<'_>,
        known: &Known,
        actual: &Actual,
    ) -> Result<Vec<Change>, UpdateError> {
        Ok(diff(wanted.model, known, actual))
    }

    async fn apply(
        &self,
        target: &Target<'_>,
        changes: &[Change],
        _known: &mut Known,
    ) -> Result<(), UpdateError> {
        apply(target, changes).await
    }

    fn render_terraform(
        &self,
        _wanted: ClusterWanted<'_>,
        changes: &[Change],
        known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        for change in changes {
            let wanted = match change {
                Change::Create(wanted) => wanted,
                Change::Update { wanted, .. } => {
                    return Err(RenderError::NotACreate {
                        resource: format!("AutoScalingGroup {}", wanted.group.resource_name),
                        action: "an update",
                    })
                }
            };
            let group = &wanted.group;
            // Its launch template waits for the load balancer (LaunchTemplatesTask): so does the group.
            let Some(template) = &wanted.launch_template_id else {
                continue;
            };
            let subnets: Vec<String> = group
                .subnets
                .iter()
                .filter_map(|s| known.subnet_ids.get(s).cloned())
                .collect();
            let mut body = TfResource::new()
                .attr("desired_capacity", i64::from(group.min_size))
                .attr("max_size", i64::from(group.max_size))
                .attr("min_size", i64::from(group.min_size))
                .attr("name", group.resource_name.as_str());
            if !wanted.target_groups.is_empty() {
                body = body.attr("target_group_arns", values(&wanted.target_groups));
            }
            let aws = &group.aws;
            if !aws.load_balancer_names.is_empty() {
                body = body.attr("load_balancers", values(&aws.load_balancer_names));
            }
            if aws.max_instance_lifetime != 0 {
                body = body.attr(
                    "max_instance_lifetime",
                    i64::from(aws.max_instance_lifetime),
                );
            }
            if aws.protect_from_scale_in {
                body = body.attr("protect_from_scale_in", true);
            }
            body = body.attr("vpc_zone_identifier", values(&subnets));
            let template_block = TfResource::new()
                .attr("id", value(template))
                .attr("version", "$Default");
            body = match &aws.mixed {
                None => body.block("launch_template", template_block),
                Some(policy) => {
                    body.block("mixed_instances_policy", terraform_policy(policy, template))
                }
            };
            for (key, tag_value) in &group.asg_tags() {
                body = body.block(
                    "tag",
                    TfResource::new()
                        .attr("key", key.as_str())
                        .attr("propagate_at_launch", true)
                        .attr("value", tag_value.as_str()),
                );
            }
            terraform.resource(
                "aws_autoscaling_group",
                &tf_name(&group.resource_name),
                body,
            )?;
        }
        // kops's output: the node groups' subnets.
        let mut node_subnets: Vec<&String> = Vec::new();
        for change in changes {
            if let Change::Create(wanted) = change {
                if wanted.group.role == Role::Node {
                    for subnet in &wanted.group.subnets {
                        if let Some(id) = known.subnet_ids.get(subnet) {
                            if !node_subnets.contains(&id) {
                                node_subnets.push(id);
                            }
                        }
                    }
                }
            }
        }
        if !node_subnets.is_empty() {
            terraform.output("node_subnet_ids", values(&node_subnets));
        }
        Ok(())
    }
}
