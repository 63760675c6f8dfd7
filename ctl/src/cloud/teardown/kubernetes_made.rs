//! What the cluster made in AWS by itself, not through `update cluster`: found by the tags Kubernetes puts on
//! it, so that `delete cluster` leaves none of it behind (nor a VPC it would hold).
//!
//! - The cloud controller manager, for a Service of type LoadBalancer: a classic ELB, or an NLB (elbv2) with a
//!   target group per port (`k8s-<ns>-<name>-<hash>`), each tagged `kubernetes.io/cluster/NAME=owned` and
//!   `kubernetes.io/service-name=NS/NAME`; for a classic ELB also a security group `k8s-elb-<lb name>` (tagged
//!   like the cluster's own, so `discover`'s security groups find it) and an ingress rule in the nodes' group
//!   naming that group (revoked by the security groups' delete, `kinds::security_groups`).
//! - The EBS CSI driver: volumes tagged `ebs.csi.aws.com/cluster=true`, and (Ballast runs it with
//!   `--extra-tags=kubernetes.io/cluster/NAME=owned`) the ownership tag, which `discover`'s volumes find. A
//!   volume with only the CSI tag names no cluster and is never touched.
//! - The VPC CNI: network interfaces tagged `cluster.k8s.amazonaws.com/name=NAME` ([`CNI_CLUSTER_TAG`]), found
//!   here, only in the cluster's VPCs.
//!
//! Only tags decide, as for the cluster's own resources ([`claim`]): a resource tagged for another cluster is
//! never touched, one tagged `shared` for this one only loses the tag.

use std::collections::BTreeMap;

use super::inventory::{claim, Claim, Resource, ResourceKind};
use super::{attempt, Failed};
use crate::cloud::aws::{call, filter, tag_map};
use crate::cloud::cni::CNI_CLUSTER_TAG;
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{Delete, DeleteFuture, Deletes, Deleting};
use crate::cloud::Cloud;

/// The tag the cloud controller manager puts on what it makes for a Service: `NAMESPACE/NAME`.
pub const SERVICE_NAME_TAG: &str = "kubernetes.io/service-name";

/// DescribeTags takes at most 20 load balancers (classic: names; v2: ARNs) per call.
const TAGS_PER_CALL: usize = 20;

/// Everything Kubernetes made for `cluster` that `discover` does not already find by the cluster's own
/// kinds: load balancers and target groups by tag (any name), and the VPC CNI's network interfaces in `vpcs`
/// (the cluster's VPCs, owned or shared).
pub async fn discover(
    cloud: &Cloud,
    cluster: &str,
    vpcs: &[String],
) -> Result<Vec<Resource>, UpdateError> {
    let mut found = classic_load_balancers(cloud, cluster).await?;
    found.extend(load_balancers_v2(cloud, cluster).await?);
    found.extend(cni_network_interfaces(cloud, cluster, vpcs).await?);
    Ok(found)
}

/// A resource with these tags, found by tag: the cluster's (`Owned`) becomes `kind` named after the Service it
/// serves (or `name`); one it shares, or owns with another cluster, a shared tag to remove; else nothing.
fn claimed(
    kind: ResourceKind,
    id: &str,
    name: &str,
    tags: &BTreeMap<String, String>,
    cluster: &str,
) -> Option<Resource> {
    match claim(tags, cluster) {
        Claim::None => None,
        Claim::Owned => {
            let name = match tags.get(SERVICE_NAME_TAG) {
                Some(service) => format!("{name}, Service {service}"),
                None => name.to_string(),
            };
            Some(Resource::new(kind, id, &name))
        }
        Claim::Untag { others } => {
            Some(Resource::new(ResourceKind::SharedTag, id, kind.as_str()).with_parts(others))
        }
    }
}

/// Classic load balancers tagged as the cluster's. Their id is their name (classic ELBs have no ARN in the
/// API); `parts` are their security groups, for the preview.
async fn classic_load_balancers(
    cloud: &Cloud,
    cluster: &str,
) -> Result<Vec<Resource>, UpdateError> {
    let what = format!("classic load balancers of {cluster}");
    let mut lbs: Vec<(String, Vec<String>)> = Vec::new();
    let mut pages = cloud
        .elb_classic
        .describe_load_balancers()
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page =
            page.map_err(|e| crate::cloud::aws::failure(&what, "DescribeLoadBalancers", e))?;
        for lb in page.load_balancer_descriptions() {
            if let Some(name) = lb.load_balancer_name() {
                lbs.push((name.to_string(), lb.security_groups().to_vec()));
            }
        }
    }
    let mut found = Vec::new();
    for chunk in lbs.chunks(TAGS_PER_CALL) {
        let names: Vec<String> = chunk.iter().map(|(n, _)| n.clone()).collect();
        let described = call(&what, "DescribeTags", || {
            cloud
                .elb_classic
                .describe_tags()
                .set_load_balancer_names(Some(names.clone()))
                .send()
        })
        .await?;
        let tags_of: BTreeMap<String, BTreeMap<String, String>> = described
            .tag_descriptions()
            .iter()
            .map(|d| {
                let tags = d
                    .tags()
                    .iter()
                    .map(|t| (t.key().to_string(), t.value().unwrap_or("").to_string()))
                    .collect();
                (d.load_balancer_name().unwrap_or_default().to_string(), tags)
            })
            .collect();
        for (name, groups) in chunk {
            let Some(tags) = tags_of.get(name) else {
                continue;
            };
            found.extend(
                claimed(ResourceKind::ClassicLoadBalancer, name, name, tags, cluster)
                    .map(|r| r.with_parts(groups.clone())),
            );
        }
    }
    Ok(found)
}

/// Network (and application) load balancers and target groups tagged as the cluster's, whatever their names.
/// The API's own load balancer and target group are found here too; the inventory keeps one of each.
async fn load_balancers_v2(cloud: &Cloud, cluster: &str) -> Result<Vec<Resource>, UpdateError> {
    let what = format!("load balancers of {cluster}");
    let elb = &cloud.elb;
    let mut arns: Vec<(ResourceKind, String, String)> = Vec::new();
    let mut pages = elb.describe_load_balancers().into_paginator().send();
    while let Some(page) = pages.next().await {
        let page =
            page.map_err(|e| crate::cloud::aws::failure(&what, "DescribeLoadBalancers", e))?;
        for lb in page.load_balancers() {
            if let Some(arn) = lb.load_balancer_arn() {
                let name = lb.load_balancer_name().unwrap_or(arn);
                arns.push((
                    ResourceKind::LoadBalancer,
                    arn.to_string(),
                    name.to_string(),
                ));
            }
        }
    }
    let mut pages = elb.describe_target_groups().into_paginator().send();
    while let Some(page) = pages.next().await {
        let page =
            page.map_err(|e| crate::cloud::aws::failure(&what, "DescribeTargetGroups", e))?;
        for tg in page.target_groups() {
            if let Some(arn) = tg.target_group_arn() {
                let name = tg.target_group_name().unwrap_or(arn);
                arns.push((ResourceKind::TargetGroup, arn.to_string(), name.to_string()));
            }
        }
    }
    let mut found = Vec::new();
    for chunk in arns.chunks(TAGS_PER_CALL) {
        let ids: Vec<String> = chunk.iter().map(|(_, arn, _)| arn.clone()).collect();
        let described = call(&what, "DescribeTags", || {
            elb.describe_tags()
                .set_resource_arns(Some(ids.clone()))
                .send()
        })
        .await?;
        let tags_of: BTreeMap<String, BTreeMap<String, String>> = described
            .tag_descriptions()
            .iter()
            .map(|d| {
                let tags = d
                    .tags()
                    .iter()
                    .filter_map(|t| {
                        Some((t.key()?.to_string(), t.value().unwrap_or("").to_string()))
                    })
                    .collect();
                (d.resource_arn().unwrap_or_default().to_string(), tags)
            })
            .collect();
        for (kind, arn, name) in chunk {
            if let Some(tags) = tags_of.get(arn) {
                found.extend(claimed(*kind, arn, name, tags, cluster));
            }
        }
    }
    Ok(found)
}

/// Whether the VPC CNI's tag makes a network interface the cluster's, here. One that also carries a
/// `kubernetes.io/cluster/...` tag is not: our ownership tag means `discover`'s own interfaces find it (so it is
/// not found twice), another cluster's means it is never touched.
pub fn cni_claims(tags: &BTreeMap<String, String>, cluster: &str) -> bool {
    tags.get(CNI_CLUSTER_TAG).map(String::as_str) == Some(cluster)
        && !tags.keys().any(|k| k.starts_with("kubernetes.io/cluster/"))
}

/// The VPC CNI's network interfaces of `cluster`, in its VPCs only: the CNI's tag is checked again here (the
/// emulator ignores some tag filters), and an interface outside the cluster's VPCs is not the cluster's to
/// delete whatever it says.
async fn cni_network_interfaces(
    cloud: &Cloud,
    cluster: &str,
    vpcs: &[String],
) -> Result<Vec<Resource>, UpdateError> {
    if vpcs.is_empty() {
        return Ok(Vec::new());
    }
    let vpc_refs: Vec<&str> = vpcs.iter().map(String::as_str).collect();
    let mut found = Vec::new();
    let mut pages = cloud
        .ec2
        .describe_network_interfaces()
        .filters(filter(&format!("tag:{CNI_CLUSTER_TAG}"), &[cluster]))
        .filters(filter("vpc-id", &vpc_refs))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| {
            crate::cloud::aws::failure(
                &format!("the VPC CNI's network interfaces of {cluster}"),
                "DescribeNetworkInterfaces",
                e,
            )
        })?;
        for n in page.network_interfaces() {
            let tags = tag_map(n.tag_set());
            let in_vpc = n.vpc_id().is_some_and(|v| vpcs.iter().any(|w| w == v));
            if !in_vpc || !cni_claims(&tags, cluster) {
                continue;
            }
            let id = n.network_interface_id().unwrap_or_default();
            let name = n.description().filter(|d| !d.is_empty()).unwrap_or(id);
            let state = n.status().map(|s| s.as_str().to_string());
            let attachment = n
                .attachment()
                .and_then(|a| a.attachment_id())
                .map(str::to_string)
                .into_iter()
                .collect();
            found.push(
                Resource::new(ResourceKind::NetworkInterface, id, name)
                    .with_state(state.as_deref())
                    .with_parts(attachment),
            );
        }
    }
    Ok(found)
}

/// The cloud controller manager's classic load balancers (its NLBs and target groups are the load balancer
/// kind's: the same calls delete them).
pub struct ClassicLoadBalancers;

impl Delete for ClassicLoadBalancers {
    fn deletes(&self) -> Deletes {
        Deletes::Kinds(&[ResourceKind::ClassicLoadBalancer])
    }

    fn delete<'a>(&'a self, deleting: Deleting<'a>, resource: &'a Resource) -> DeleteFuture<'a> {
        Box::pin(delete_classic_load_balancer(deleting.cloud, resource))
    }

    fn untag<'a>(
        &'a self,
        deleting: Deleting<'a>,
        _kind: ResourceKind,
        resource: &'a Resource,
        key: &'a str,
    ) -> DeleteFuture<'a> {
        Box::pin(async move {
            let label = resource.label();
            remove_classic_tag(deleting.cloud, &resource.id, key, &label).await
        })
    }
}

/// Deletes a classic load balancer (its listeners go with it). AWS deletes its network interfaces a little
/// later; until then its security group and subnets answer "not yet".
pub async fn delete_classic_load_balancer(cloud: &Cloud, lb: &Resource) -> Result<(), Failed> {
    attempt(&lb.label(), "DeleteLoadBalancer", || {
        cloud
            .elb_classic
            .delete_load_balancer()
            .load_balancer_name(&lb.id)
            .send()
    })
    .await
}

/// Removes tag `key` from a classic load balancer the cluster keeps.
pub async fn remove_classic_tag(
    cloud: &Cloud,
    name: &str,
    key: &str,
    label: &str,
) -> Result<(), Failed> {
    attempt(label, "RemoveTags", || {
        cloud
            .elb_classic
            .remove_tags()
            .load_balancer_names(name)
            .tags(
                aws_sdk_elasticloadbalancing::types::TagKeyOnly::builder()
                    .key(key)
                    .build(),
            )
            .send()
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_load_balancer_is_named_after_its_service_and_only_ours_is_taken() {
        let c = "a.example.com";
        let ours = tags(&[
            ("kubernetes.io/cluster/a.example.com", "owned"),
            (SERVICE_NAME_TAG, "default/web"),
        ]);
        let r = claimed(ResourceKind::ClassicLoadBalancer, "a1b2", "a1b2", &ours, c).expect("ours");
        assert_eq!(r.kind, ResourceKind::ClassicLoadBalancer);
        assert_eq!(
            r.label(),
            "ClassicLoadBalancer a1b2 (a1b2, Service default/web)"
        );

        let theirs = tags(&[("kubernetes.io/cluster/b.example.com", "owned")]);
        assert_eq!(
            claimed(ResourceKind::LoadBalancer, "arn", "x", &theirs, c),
            None
        );
        // A name that looks like ours decides nothing.
        assert_eq!(
            claimed(
                ResourceKind::TargetGroup,
                "arn",
                "k8s-a-example",
                &tags(&[]),
                c
            ),
            None
        );

        let shared = tags(&[("kubernetes.io/cluster/a.example.com", "shared")]);
        let kept = claimed(ResourceKind::TargetGroup, "arn:tg", "k8s-x", &shared, c).expect("kept");
        assert_eq!(kept.kind, ResourceKind::SharedTag);
        assert_eq!(kept.name, "TargetGroup");
        assert!(kept.parts.is_empty());
    }

    #[test]
    fn the_cni_tag_claims_an_interface_only_for_this_cluster_and_no_other() {
        let c = "a.example.com";
        assert!(cni_claims(&tags(&[(CNI_CLUSTER_TAG, "a.example.com")]), c));
        assert!(!cni_claims(&tags(&[(CNI_CLUSTER_TAG, "b.example.com")]), c));
        assert!(!cni_claims(
            &tags(&[(CNI_CLUSTER_TAG, "xa.example.com")]),
            c
        ));
        // Tagged for another cluster as well: never touched.
        assert!(!cni_claims(
            &tags(&[
                (CNI_CLUSTER_TAG, "a.example.com"),
                ("kubernetes.io/cluster/b.example.com", "owned")
            ]),
            c
        ));
        // Carrying our ownership tag: `discover`'s own interfaces find it (once).
        assert!(!cni_claims(
            &tags(&[
                (CNI_CLUSTER_TAG, "a.example.com"),
                ("kubernetes.io/cluster/a.example.com", "owned")
            ]),
            c
        ));
        assert!(!cni_claims(&tags(&[]), c));
    }

    #[test]
    fn load_balancers_go_before_their_groups_target_groups_subnets_and_the_vpc() {
        use super::super::inventory::Inventory;
        use super::super::rounds::plan_round;
        use ResourceKind::*;
        let mut inv = Inventory::from_resources(
            [
                (ClassicLoadBalancer, "a1"),
                (LoadBalancer, "arn:lb"),
                (TargetGroup, "arn:tg"),
                (SecurityGroup, "sg-elb"),
                (SecurityGroup, "sg-nodes"),
                (NetworkInterface, "eni-cni"),
                (Volume, "vol-csi"),
                (Subnet, "subnet-1"),
                (Vpc, "vpc-1"),
            ]
            .iter()
            .map(|(k, id)| Resource::new(*k, id, id))
            .collect(),
        );
        let mut order = Vec::new();
        while !inv.is_empty() {
            let kinds: Vec<ResourceKind> =
                plan_round(&inv).delete.iter().map(|(k, _)| *k).collect();
            assert!(!kinds.is_empty(), "stuck with {:?}", inv.resources);
            inv.resources.retain(|r| !kinds.contains(&r.kind));
            order.push(kinds);
        }
        assert_eq!(
            order,
            vec![
                vec![LoadBalancer, ClassicLoadBalancer, Volume],
                // A network interface waits for the load balancers too: theirs go with them.
                vec![TargetGroup, NetworkInterface],
                vec![SecurityGroup, Subnet],
                vec![Vpc],
            ]
        );
    }
}
