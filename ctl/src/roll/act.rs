//! A roll's writes, all through the Auto Scaling API: the group's sizes, its resume marker (a tag), and
//! terminating an instance in its group (the group launches its replacement unless told to shrink).

use aws_sdk_autoscaling::types::Tag;

use super::decide::{needs_update, GroupView, RollMarker, Sizes};
use super::MARKER_TAG;
use crate::cloud::aws::call;
use crate::cloud::error::UpdateError;
use crate::cloud::Cloud;

/// Records the roll on the group's Auto Scaling Group (not propagated to instances).
pub async fn set_marker(
    cloud: &Cloud,
    resource: &str,
    marker: &RollMarker,
) -> Result<(), UpdateError> {
    let tag = Tag::builder()
        .resource_id(resource)
        .resource_type("auto-scaling-group")
        .key(MARKER_TAG)
        .value(marker.to_tag())
        .propagate_at_launch(false)
        .build();
    call(resource, "CreateOrUpdateTags", || {
        cloud
            .autoscaling
            .create_or_update_tags()
            .tags(tag.clone())
            .send()
    })
    .await?;
    Ok(())
}

/// Removes the roll's record: the group is done and its sizes are back.
pub async fn clear_marker(cloud: &Cloud, resource: &str) -> Result<(), UpdateError> {
    let tag = Tag::builder()
        .resource_id(resource)
        .resource_type("auto-scaling-group")
        .key(MARKER_TAG)
        .build();
    call(resource, "DeleteTags", || {
        cloud.autoscaling.delete_tags().tags(tag.clone()).send()
    })
    .await?;
    Ok(())
}

/// Sets the group's min, max and desired capacity.
pub async fn resize(cloud: &Cloud, resource: &str, sizes: Sizes) -> Result<(), UpdateError> {
    call(resource, "UpdateAutoScalingGroup", || {
        cloud
            .autoscaling
            .update_auto_scaling_group()
            .auto_scaling_group_name(resource)
            .min_size(sizes.min)
            .max_size(sizes.max)
            .desired_capacity(sizes.desired)
            .send()
    })
    .await?;
    Ok(())
}

/// Instances of the roll that wait in `Terminating:Wait` on a lifecycle hook, whose action the roll completes
/// itself (`spec.terminationHandling`'s hook, docs/termination.md) rather than leave each to its heartbeat: those
/// this run terminated (and so prepared first), and, while the group's roll is recorded on it (its marker), those
/// the roll would replace: a run killed between a termination and its completion left them, and the next run
/// takes them over (it prepares them again: a drain and a stop request are both idempotent). An up-to-date
/// instance going for another reason (a spot interruption) is left to the termination handler. Pure.
pub fn awaiting_completion(
    group: &GroupView,
    terminated: &std::collections::BTreeSet<String>,
    force: Option<&str>,
) -> Vec<String> {
    group
        .instances
        .iter()
        .filter(|i| i.lifecycle == "Terminating:Wait")
        .filter(|i| {
            terminated.contains(&i.id)
                || (group.marker.is_some() && needs_update(group, i, force).is_some())
        })
        .map(|i| i.id.clone())
        .collect()
}

/// Completes the terminating lifecycle action of an instance this roll drained and terminated: `CONTINUE` on
/// Ballast's hook. An action no longer there (completed by another, or timed out) is done already: `false`.
pub async fn complete_termination(
    cloud: &Cloud,
    resource: &str,
    instance: &str,
) -> Result<bool, UpdateError> {
    let result = cloud
        .autoscaling
        .complete_lifecycle_action()
        .auto_scaling_group_name(resource)
        .lifecycle_hook_name(crate::cloud::kinds::termination::HOOK_NAME)
        .instance_id(instance)
        .lifecycle_action_result("CONTINUE")
        .send()
        .await;
    match result {
        Ok(_) => Ok(true),
        Err(e) if no_active_action(&e) => Ok(false),
        Err(e) => Err(crate::cloud::aws::failure(
            &format!("instance {instance} of {resource}"),
            "CompleteLifecycleAction",
            e,
        )),
    }
}

/// Auto Scaling's answer when the instance has no action waiting on the hook any more.
fn no_active_action<R>(
    err: &aws_sdk_autoscaling::error::SdkError<
        aws_sdk_autoscaling::operation::complete_lifecycle_action::CompleteLifecycleActionError,
        R,
    >,
) -> bool {
    use aws_sdk_autoscaling::error::ProvideErrorMetadata;
    err.as_service_error().is_some_and(|s| {
        s.code() == Some("ValidationError")
            && s.message()
                .is_some_and(|m| m.contains("No active Lifecycle Action"))
    })
}

/// How many of a batch's terminations are in flight at once. A batch is a quarter of a group by default (25 of
/// 100) but up to twice a group's size with `maxSurge` and `maxUnavailable` at 100%: all at once, a group of
/// 1000 would be 2000 calls in one burst, which Auto Scaling throttles.
pub const TERMINATE_CONCURRENCY: usize = 32;

/// Terminates a batch of a group's instances, each `(id, decrement)` as [`terminate`] does, up to
/// [`TERMINATE_CONCURRENCY`] at a time rather than one after another: a batch's calls are independent (each
/// termination and each decrement is its own atomic change to the group), so their order does not matter.
/// Returns every instance's outcome, in the order given, so a caller records each one that went even when
/// another failed.
pub async fn terminate_batch(
    cloud: &Cloud,
    resource: &str,
    batch: &[(String, bool)],
) -> Vec<(String, Result<(), UpdateError>)> {
    use futures_util::{stream, StreamExt};
    stream::iter(batch.iter().map(|(id, decrement)| async move {
        (id.clone(), terminate(cloud, resource, id, *decrement).await)
    }))
    .buffered(TERMINATE_CONCURRENCY)
    .collect()
    .await
}

/// Terminates an instance of the group; with `decrement` the group's desired capacity shrinks by one instead
/// of a replacement being launched.
pub async fn terminate(
    cloud: &Cloud,
    resource: &str,
    instance: &str,
    decrement: bool,
) -> Result<(), UpdateError> {
    call(
        &format!("instance {instance} of {resource}"),
        "TerminateInstanceInAutoScalingGroup",
        || {
            cloud
                .autoscaling
                .terminate_instance_in_auto_scaling_group()
                .instance_id(instance)
                .should_decrement_desired_capacity(decrement)
                .send()
        },
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use ballast_state::spec::Role;

    use super::*;
    use crate::roll::decide::InstanceView;

    fn instance(id: &str, lifecycle: &str) -> InstanceView {
        InstanceView {
            id: id.to_string(),
            in_service: lifecycle == "InService",
            lifecycle: lifecycle.to_string(),
            node_spec_hash: None,
            template_version: None,
            launched: None,
            configured_hash: None,
            node_name: None,
        }
    }

    #[test]
    fn only_instances_this_roll_terminated_and_that_wait_on_the_hook_are_completed() {
        let group = GroupView {
            instances: vec![
                instance("i-drained", "Terminating:Wait"),
                instance("i-someone-elses", "Terminating:Wait"),
                instance("i-going", "Terminating"),
                instance("i-new", "Pending"),
            ],
            ..test_group()
        };
        let terminated: BTreeSet<String> = ["i-drained", "i-going"].map(String::from).into();
        assert_eq!(
            awaiting_completion(&group, &terminated, None),
            vec!["i-drained"]
        );
        assert!(awaiting_completion(&group, &BTreeSet::new(), None).is_empty());
    }

    #[test]
    fn a_resumed_roll_takes_over_the_outdated_instances_a_killed_run_left_waiting() {
        let spec = |id: &str, lifecycle: &str, hash: &str| InstanceView {
            node_spec_hash: Some(hash.to_string()),
            ..instance(id, lifecycle)
        };
        let group = GroupView {
            want_hash: Some("new".to_string()),
            instances: vec![
                // Terminated by the killed run: outdated, waiting on the hook.
                spec("i-old-waiting", "Terminating:Wait", "old"),
                // Up to date and going for another reason (a spot interruption): the handler's.
                spec("i-new-waiting", "Terminating:Wait", "new"),
                spec("i-old", "InService", "old"),
            ],
            marker: Some(RollMarker::new(
                Sizes {
                    min: 1,
                    max: 2,
                    desired: 1,
                },
                "2026-12-03T00:00:00Z",
                false,
            )),
            ..test_group()
        };
        assert_eq!(
            awaiting_completion(&group, &BTreeSet::new(), None),
            vec!["i-old-waiting"]
        );
        // No roll recorded on the group: nothing of it is the roll's.
        let unmarked = GroupView {
            marker: None,
            ..group
        };
        assert!(awaiting_completion(&unmarked, &BTreeSet::new(), None).is_empty());
    }

    fn test_group() -> GroupView {
        GroupView {
            name: "nodes".to_string(),
            role: Role::Node,
            sizes: Sizes {
                min: 1,
                max: 2,
                desired: 1,
            },
            want_hash: None,
            want_template_version: None,
            instances: Vec::new(),
            marker: None,
        }
    }
}
