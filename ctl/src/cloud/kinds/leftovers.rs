//! Owned groups the spec no longer has, found by their launch templates' group tag: their Auto Scaling Group,
//! launch template and node spec are listed in every plan, and deleted only with `--prune`.

use std::collections::BTreeSet;

use ballast_state::layout::ClusterPaths;

use super::deletion::{Resource, ResourceKind};
use super::{auto_scaling_groups, launch_templates, ActualState, Known, Target};
use crate::cloud::aws::GROUP_TAG;
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{
    not_deleted_here, Delete, DeleteFuture, Deletes, Deleting, Finder, RunOptions, Task, Wanted,
};
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

/// Deletes each group through the kinds' own deletes, as `delete cluster` would: its Auto Scaling Group
/// (emptied first; gone already is fine), its launch template, then its node spec. A delete AWS answers "not
/// yet" (a scaling activity in progress) fails the run, naming the group: the next `--prune` continues.
pub async fn apply(target: &Target<'_>, changes: &[Change]) -> Result<(), UpdateError> {
    let paths = ClusterPaths::new(&target.model.cluster);
    let deleting = Deleting {
        cloud: target.cloud,
        cluster: &target.model.cluster,
        discovery: None,
    };
    for change in changes {
        for (deleter, resource) in resources(change) {
            deleter
                .delete(deleting, &resource)
                .await
                .map_err(|failed| failed.error)?;
        }
        target.store.delete(&paths.node_spec(&change.group)).await?;
    }
    Ok(())
}

/// A leftover group's AWS resources, as a teardown would have found them, in the order they go: the Auto
/// Scaling Group (its instances are not listed: the delete empties the group first), then its launch template
/// (none when its id is unknown); each with the kind that deletes it.
fn resources(change: &Change) -> Vec<(&'static dyn Delete, Resource)> {
    let mut found: Vec<(&'static dyn Delete, Resource)> = vec![(
        &auto_scaling_groups::AutoScalingGroupsTask,
        Resource::new(ResourceKind::AutoScalingGroup, &change.name, &change.name),
    )];
    if !change.launch_template_id.is_empty() {
        found.push((
            &launch_templates::LaunchTemplatesTask,
            Resource::new(
                ResourceKind::LaunchTemplate,
                &change.launch_template_id,
                &change.name,
            ),
        ));
    }
    found
}

/// Nothing of its own: a leftover group is an Auto Scaling Group and a launch template, deleted by those kinds
/// (in a teardown, and in [`apply`]).
impl Delete for LeftoversTask {
    fn deletes(&self) -> Deletes {
        Deletes::With(&[ResourceKind::AutoScalingGroup, ResourceKind::LaunchTemplate])
    }

    fn delete<'a>(&'a self, _deleting: Deleting<'a>, resource: &'a Resource) -> DeleteFuture<'a> {
        Box::pin(async move { Err(not_deleted_here(resource)) })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leftover_group_is_deleted_as_its_group_then_its_template_by_their_kinds() {
        let change = Change {
            group: "old".into(),
            name: "old.c.example.com".into(),
            launch_template_id: "lt-1".into(),
        };
        let found = resources(&change);
        let kinds: Vec<(ResourceKind, &str)> =
            found.iter().map(|(_, r)| (r.kind, r.id.as_str())).collect();
        assert_eq!(
            kinds,
            vec![
                (ResourceKind::AutoScalingGroup, "old.c.example.com"),
                (ResourceKind::LaunchTemplate, "lt-1"),
            ]
        );
        // Each by the kind whose delete the teardown uses for it.
        for (deleter, resource) in &found {
            assert!(
                matches!(deleter.deletes(), Deletes::Kinds(kinds) if kinds.contains(&resource.kind)),
                "{resource:?}"
            );
        }
        let no_template = Change {
            launch_template_id: String::new(),
            ..change
        };
        assert_eq!(resources(&no_template).len(), 1);
    }
}
