//! Auto Scaling Groups, one per group, launching the group's launch template's default version in its subnets,
//! with propagated ownership, role and group tags; the control plane's are in the API target group.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_autoscaling::types as asg;
use ballast_state::spec::Role;
use serde::{Deserialize, Serialize};

use super::{ActualState, Known, Target};
use crate::cloud::aws::{auto_scaling_groups, call};
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{Finder, Task, Wanted as ClusterWanted};
use crate::cloud::model::{ClusterModel, GroupModel};
use crate::cloud::plan::{
    or_known_after_apply, Action, Change as PlanChange, Kind, Planned, Stage,
};
use crate::cloud::terraform::{
    tf_name, value, values, RenderError, Resource as TfResource, Terraform,
};
use crate::cloud::Cloud;

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
                launch_template_id: g
                    .launch_template()
                    .and_then(|l| l.launch_template_id())
                    .map(str::to_string),
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
        target_groups: match group.role {
            Role::ControlPlane => vec![or_known_after_apply(known.target_group_arn.as_ref())],
            Role::Node | Role::Bastion => Vec::new(),
        },
    }
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
                            .launch_template(launch_template(wanted))
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
                tags,
                untag,
                ..
            } => {
                apply_update(target.cloud, wanted, *resize, attach, tags).await?;
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
                .launch_template(launch_template(wanted))
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
            body = body.attr("vpc_zone_identifier", values(&subnets)).block(
                "launch_template",
                TfResource::new()
                    .attr("id", value(template))
                    .attr("version", "$Default"),
            );
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
