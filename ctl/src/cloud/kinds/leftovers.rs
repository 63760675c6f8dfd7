//! Owned groups the spec no longer has, found by their launch templates' group tag: their Auto Scaling Group,
//! launch template and node spec are listed in every plan, and deleted only with `--prune`.

use std::collections::BTreeSet;

use ballast_state::layout::ClusterPaths;

use super::{launch_templates, ActualState, Known, Target};
use crate::cloud::aws::{call, find as find_optional, GROUP_TAG};
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{Finder, RunOptions, Task, Wanted};
use crate::cloud::model::ClusterModel;
use crate::cloud::plan::{Action, Change as PlanChange, Kind, Planned, Stage};
use crate::cloud::terraform::{RenderError, Terraform};

/// A group to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub group: String,
    /// Its launch template's and Auto Scaling Group's name.
    pub name: String,
    pub launch_template_id: String,
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        let delete =
            |kind, name: &str| PlanChange::new(Stage::Leftovers, kind, name, Action::Delete);
        vec![
            delete(Kind::AutoScalingGroup, &self.name),
            delete(Kind::LaunchTemplate, &self.name),
            delete(Kind::NodeSpec, &self.group),
        ]
    }
}

/// The groups whose launch templates remain though the spec no longer has them.
pub fn diff(model: &ClusterModel, templates: &launch_templates::Actual) -> Vec<Change> {
    let wanted: BTreeSet<&String> = model.groups.iter().map(|g| &g.name).collect();
    templates
        .templates
        .iter()
        .filter_map(|(name, template)| {
            let group = template.tags.get(GROUP_TAG)?;
            (!wanted.contains(group)).then(|| Change {
                group: group.clone(),
                name: name.clone(),
                launch_template_id: template.id.clone(),
            })
        })
        .collect()
}

/// Deletes each group: its Auto Scaling Group (emptied first; gone already is fine), launch template and node
/// spec.
pub async fn apply(target: &Target<'_>, changes: &[Change]) -> Result<(), UpdateError> {
    let client = &target.cloud.autoscaling;
    let paths = ClusterPaths::new(&target.model.cluster);
    for change in changes {
        let name = &change.name;
        let resource = format!("AutoScalingGroup {name}");
        find_optional(
            &resource,
            "UpdateAutoScalingGroup",
            &["ValidationError"],
            || {
                client
                    .update_auto_scaling_group()
                    .auto_scaling_group_name(name)
                    .min_size(0)
                    .max_size(0)
                    .desired_capacity(0)
                    .send()
            },
        )
        .await?;
        find_optional(
            &resource,
            "DeleteAutoScalingGroup",
            &["ValidationError"],
            || {
                client
                    .delete_auto_scaling_group()
                    .auto_scaling_group_name(name)
                    .force_delete(true)
                    .send()
            },
        )
        .await?;
        if !change.launch_template_id.is_empty() {
            call(
                &format!("LaunchTemplate {name}"),
                "DeleteLaunchTemplate",
                || {
                    target
                        .cloud
                        .ec2
                        .delete_launch_template()
                        .launch_template_id(&change.launch_template_id)
                        .send()
                },
            )
            .await?;
        }
        target.store.delete(&paths.node_spec(&change.group)).await?;
    }
    Ok(())
}

/// Owned groups the spec no longer has, as a [`Task`]: found among the launch templates already read, deleted
/// only with `--prune`.
pub struct LeftoversTask;

impl Task for LeftoversTask {
    type Actual = launch_templates::Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s launch_templates::Actual {
        &state.launch_templates
    }

    fn keep(&self, _state: &mut ActualState, _actual: launch_templates::Actual) {
        // Read from the launch templates' slot, which already holds it.
    }

    async fn find(
        &self,
        finder: &Finder<'_>,
        _wanted: Wanted<'_>,
    ) -> Result<launch_templates::Actual, UpdateError> {
        Ok(finder.found.launch_templates.clone())
    }

    fn diff(
        &self,
        wanted: Wanted<'_>,
        _known: &Known,
        actual: &launch_templates::Actual,
    ) -> Result<Vec<Change>, UpdateError> {
        Ok(diff(wanted.model, actual))
    }

    fn applies(&self, options: RunOptions) -> bool {
        options.apply && options.prune
    }

    async fn apply(
        &self,
        target: &Target<'_>,
        changes: &[Change],
        _known: &mut Known,
    ) -> Result<(), UpdateError> {
        apply(target, changes).await
    }

    /// Terraform deletes what its configuration no longer declares: a leftover is never written.
    fn render_terraform(
        &self,
        _wanted: Wanted<'_>,
        changes: &[Change],
        _known: &mut Known,
        _terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        match changes.first() {
            Some(change) => Err(RenderError::NotACreate {
                resource: format!("AutoScalingGroup {}", change.name),
                action: "a leftover group's deletion",
            }),
            None => Ok(()),
        }
    }
}
