//! Deletes for what carries the cluster's tag but is no kind of `update cluster`'s own: instances left after
//! their group (protected from scale-in, or the emulator's ASG delete leaving them), network interfaces and
//! volumes (an etcd member's, once its instance is gone); and removing the cluster's tag from what it only
//! shares.

use aws_sdk_ec2::types as ec2;

use super::inventory::{Resource, ResourceKind};
use super::rounds::Outcome;
use super::{attempt, Failed};
use crate::cloud::aws::ownership_tag;
use crate::cloud::error::UpdateError;
use crate::cloud::Cloud;

/// Terminates instances (one call for all of them): what the next rounds wait for before deleting what they
/// run in.
pub async fn terminate_instances(cloud: &Cloud, instances: &[Resource]) -> Result<(), Failed> {
    let ids: Vec<String> = instances.iter().map(|r| r.id.clone()).collect();
    for chunk in ids.chunks(500) {
        let label = format!("Instance {}", chunk.join(", "));
        attempt(&label, "TerminateInstances", || {
            cloud
                .ec2
                .terminate_instances()
                .set_instance_ids(Some(chunk.to_vec()))
                .send()
        })
        .await?;
    }
    Ok(())
}

/// A "not yet" of our own making: the resource is being detached, the next round deletes it.
fn detaching(resource: &Resource) -> Failed {
    Failed {
        outcome: Outcome::NotYet,
        error: UpdateError::Missing {
            resource: resource.label(),
            message: "is being detached; deleted in a later round".to_string(),
        },
    }
}

/// Deletes a volume; one still attached (its instance is gone by now: volumes wait for instances) is detached
/// first, and deleted in a later round.
pub async fn delete_volume(cloud: &Cloud, volume: &Resource) -> Result<(), Failed> {
    let label = volume.label();
    match volume.state.as_deref() {
        Some("in-use") => {
            attempt(&label, "DetachVolume", || {
                cloud
                    .ec2
                    .detach_volume()
                    .volume_id(&volume.id)
                    .force(true)
                    .send()
            })
            .await?;
            Err(detaching(volume))
        }
        Some("detaching" | "creating") => Err(detaching(volume)),
        _ => {
            attempt(&label, "DeleteVolume", || {
                cloud.ec2.delete_volume().volume_id(&volume.id).send()
            })
            .await
        }
    }
}

/// Deletes a network interface, detaching it first when it is still attached.
pub async fn delete_network_interface(cloud: &Cloud, eni: &Resource) -> Result<(), Failed> {
    let label = eni.label();
    if eni.state.as_deref() == Some("in-use") {
        if let Some(attachment) = eni.parts.first() {
            attempt(&label, "DetachNetworkInterface", || {
                cloud
                    .ec2
                    .detach_network_interface()
                    .attachment_id(attachment)
                    .force(true)
                    .send()
            })
            .await?;
        }
        return Err(detaching(eni));
    }
    attempt(&label, "DeleteNetworkInterface", || {
        cloud
            .ec2
            .delete_network_interface()
            .network_interface_id(&eni.id)
            .send()
    })
    .await
}

/// Removes the cluster's ownership tag (whatever its value) from a resource the cluster keeps; the resource's
/// kind is in its `name` (see `discover`).
pub async fn remove_cluster_tag(
    cloud: &Cloud,
    cluster: &str,
    resource: &Resource,
) -> Result<(), Failed> {
    let key = ownership_tag(cluster);
    let label = resource.label();
    let id = &resource.id;
    match resource.name.as_str() {
        n if n == ResourceKind::AutoScalingGroup.as_str() => {
            crate::cloud::kinds::auto_scaling_groups::remove_tag(cloud, id, &key, &label).await
        }
        n if n == ResourceKind::LoadBalancer.as_str()
            || n == ResourceKind::TargetGroup.as_str() =>
        {
            crate::cloud::kinds::load_balancer::remove_tag(cloud, id, &key, &label).await
        }
        n if n == ResourceKind::ClassicLoadBalancer.as_str() => {
            super::kubernetes_made::remove_classic_tag(cloud, id, &key, &label).await
        }
        n if n == ResourceKind::IamRole.as_str() => {
            crate::cloud::kinds::iam::remove_role_tag(cloud, id, &key, &label).await
        }
        _ => {
            attempt(&label, "DeleteTags", || {
                cloud
                    .ec2
                    .delete_tags()
                    .resources(id)
                    .tags(ec2::Tag::builder().key(&key).build())
                    .send()
            })
            .await
        }
    }
}
