//! A roll's writes, all through the Auto Scaling API: the group's sizes, its resume marker (a tag), and
//! terminating an instance in its group (the group launches its replacement unless told to shrink).

use aws_sdk_autoscaling::types::Tag;

use super::decide::{RollMarker, Sizes};
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
