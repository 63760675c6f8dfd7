//! Deletes for what carries the cluster's tag but is no kind of `update cluster`'s own: instances left after
//! their group (protected from scale-in, or the emulator's ASG delete leaving them) and network interfaces; and
//! removing the cluster's tag from what it only shares. (Volumes, etcd's and the EBS CSI driver's, are
//! `kinds::volumes`'.)

use super::inventory::{Resource, ResourceKind};
use super::rounds::Outcome;
use super::{attempt, Failed};
use crate::cloud::aws::ownership_tag;
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{
    untag_ec2, Delete, DeleteFuture, DeletedFuture, Deletes, Deleting,
};
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

/// Removes the cluster's ownership tag (whatever its value) from a resource the cluster keeps, through the
/// delete of the kept resource's kind (named in the shared tag's `name`, see `discover`): each service tags its
/// own way.
pub async fn remove_cluster_tag(deleting: Deleting<'_>, resource: &Resource) -> Result<(), Failed> {
    let key = ownership_tag(deleting.cluster);
    let kind = ResourceKind::named(&resource.name);
    match kind.and_then(super::deleter) {
        Some((kind, deleter)) => deleter.untag(deleting, kind, resource, &key).await,
        // A kind no delete knows is an EC2 resource: EC2 is where untyped tags live.
        None => untag_ec2(deleting, resource, &key).await,
    }
}

/// Instances left after their group (protected from scale-in, or launched by hand with the cluster's tags),
/// terminated once no group can replace them.
pub struct Instances;

impl Delete for Instances {
    fn deletes(&self) -> Deletes {
        Deletes::Kinds(&[ResourceKind::Instance])
    }

    fn delete<'a>(&'a self, deleting: Deleting<'a>, resource: &'a Resource) -> DeleteFuture<'a> {
        Box::pin(terminate_instances(
            deleting.cloud,
            std::slice::from_ref(resource),
        ))
    }

    /// One call for all of them: its failure is every instance's; the first carries the error.
    fn delete_found<'a>(
        &'a self,
        deleting: Deleting<'a>,
        resources: &'a [Resource],
    ) -> DeletedFuture<'a> {
        Box::pin(async move {
            let mut failed = terminate_instances(deleting.cloud, resources).await.err();
            resources
                .iter()
                .map(|r| {
                    let result = match failed.take() {
                        Some(f) => Err(f),
                        None => Ok(()),
                    };
                    (r.clone(), result)
                })
                .collect()
        })
    }
}

/// Network interfaces: the VPC CNI's, and any left attached to nothing the cluster deletes.
pub struct NetworkInterfaces;

impl Delete for NetworkInterfaces {
    fn deletes(&self) -> Deletes {
        Deletes::Kinds(&[ResourceKind::NetworkInterface])
    }

    fn delete<'a>(&'a self, deleting: Deleting<'a>, resource: &'a Resource) -> DeleteFuture<'a> {
        Box::pin(delete_network_interface(deleting.cloud, resource))
    }
}

/// Resources the cluster only shares (or owns with another cluster): they lose the cluster's tag, nothing else.
pub struct SharedTags;

impl Delete for SharedTags {
    fn deletes(&self) -> Deletes {
        Deletes::Kinds(&[ResourceKind::SharedTag])
    }

    fn delete<'a>(&'a self, deleting: Deleting<'a>, resource: &'a Resource) -> DeleteFuture<'a> {
        Box::pin(remove_cluster_tag(deleting, resource))
    }
}
