//! Finds everything a cluster has in AWS, read-only: EC2 resources by the cluster's ownership tag
//! (`kubernetes.io/cluster/NAME`, `owned` or `shared`, checked again here because the emulator ignores tag
//! filters on some calls), Auto Scaling Groups by their tags, and the load balancer, target group, IAM roles and
//! instance profiles by their deterministic names, each kept only if its tags (or, for an instance profile, its
//! roles) say it is the cluster's.

use std::collections::BTreeMap;

use aws_sdk_ec2::types as ec2;

use super::inventory::{claim, Claim, Inventory, Resource, ResourceKind};
use super::irsa::DiscoveryTarget;
use crate::cloud::aws::{call, filter, find, owned_launch_templates, ownership_tag, tag_map};
use crate::cloud::error::UpdateError;
use crate::cloud::model::{elb_names, role_resource_name};
use crate::cloud::Cloud;
use ballast_state::spec::Role;

/// Instances in these states still exist (or may still come back: stopped ones).
const LIVE_INSTANCE_STATES: [&str; 5] =
    ["pending", "running", "shutting-down", "stopping", "stopped"];

/// Every resource of `cluster` in the clients' region, found by tags and names; with `discovery`, IRSA's two
/// documents in it (`super::irsa`).
pub async fn discover(
    cloud: &Cloud,
    cluster: &str,
    discovery: Option<&DiscoveryTarget>,
) -> Result<Inventory, UpdateError> {
    let mut found = Vec::new();
    found.extend(auto_scaling_groups(cloud, cluster).await?);
    found.extend(load_balancing(cloud, cluster).await?);
    found.extend(iam(cloud, cluster).await?);
    found.extend(super::irsa::service_account_roles(cloud, cluster).await?);
    found.extend(super::irsa::oidc_providers(cloud, cluster).await?);
    found.extend(crate::cloud::kinds::termination::discover(cloud, cluster).await?);
    if let Some(target) = discovery {
        found.extend(super::irsa::discovery_documents(target).await?);
    }
    found.extend(launch_templates(cloud, cluster).await?);
    found.extend(ec2_resources(cloud, cluster).await?);
    // The VPCs the cluster owns or shares: where the VPC CNI's network interfaces of it may be.
    let vpcs: Vec<String> = found
        .iter()
        .filter(|r| {
            r.kind == ResourceKind::Vpc
                || (r.kind == ResourceKind::SharedTag && r.name == ResourceKind::Vpc.as_str())
        })
        .map(|r| r.id.clone())
        .collect();
    found.extend(super::kubernetes_made::discover(cloud, cluster, &vpcs).await?);
    Ok(Inventory::from_resources(found))
}

/// Filters on the cluster's ownership tag, either value.
fn tagged(cluster: &str) -> ec2::Filter {
    filter(
        &format!("tag:{}", ownership_tag(cluster)),
        &["owned", "shared"],
    )
}

/// A resource the cluster owns becomes `kind`; one it only shares (or shares with another cluster) becomes a
/// shared tag to remove; anything else is left out.
fn claimed(
    kind: ResourceKind,
    id: &str,
    tags: &BTreeMap<String, String>,
    cluster: &str,
) -> Option<Resource> {
    let name = tags.get("Name").map(String::as_str).unwrap_or(id);
    match claim(tags, cluster) {
        Claim::None => None,
        Claim::Owned => Some(Resource::new(kind, id, name).bound_by(tags, cluster)),
        Claim::Untag { others } => {
            Some(Resource::new(ResourceKind::SharedTag, id, kind.as_str()).with_parts(others))
        }
    }
}

async fn ec2_resources(cloud: &Cloud, cluster: &str) -> Result<Vec<Resource>, UpdateError> {
    let ec2c = &cloud.ec2;
    let what = |kind: &str| format!("{kind} of {cluster}");
    let mut found = Vec::new();

    let vpcs = call(&what("VPCs"), "DescribeVpcs", || {
        ec2c.describe_vpcs().filters(tagged(cluster)).send()
    })
    .await?;
    for v in vpcs.vpcs() {
        let id = v.vpc_id().unwrap_or_default();
        found.extend(claimed(ResourceKind::Vpc, id, &tag_map(v.tags()), cluster));
    }

    let subnets = call(&what("subnets"), "DescribeSubnets", || {
        ec2c.describe_subnets().filters(tagged(cluster)).send()
    })
    .await?;
    for s in subnets.subnets() {
        let id = s.subnet_id().unwrap_or_default();
        found.extend(claimed(
            ResourceKind::Subnet,
            id,
            &tag_map(s.tags()),
            cluster,
        ));
    }

    let tables = call(&what("route tables"), "DescribeRouteTables", || {
        ec2c.describe_route_tables().filters(tagged(cluster)).send()
    })
    .await?;
    for t in tables.route_tables() {
        let id = t.route_table_id().unwrap_or_default();
        let associations = t
            .associations()
            .iter()
            .filter(|a| !a.main().unwrap_or(false))
            .filter_map(|a| a.route_table_association_id().map(str::to_string))
            .collect();
        found.extend(
            claimed(ResourceKind::RouteTable, id, &tag_map(t.tags()), cluster)
                .map(|r| r.with_parts(associations)),
        );
    }

    let gateways = call(
        &what("internet gateways"),
        "DescribeInternetGateways",
        || {
            ec2c.describe_internet_gateways()
                .filters(tagged(cluster))
                .send()
        },
    )
    .await?;
    for g in gateways.internet_gateways() {
        let id = g.internet_gateway_id().unwrap_or_default();
        let vpcs = g
            .attachments()
            .iter()
            .filter_map(|a| a.vpc_id().map(str::to_string))
            .collect();
        found.extend(
            claimed(
                ResourceKind::InternetGateway,
                id,
                &tag_map(g.tags()),
                cluster,
            )
            .map(|r| r.with_parts(vpcs)),
        );
    }

    let groups = call(&what("security groups"), "DescribeSecurityGroups", || {
        ec2c.describe_security_groups()
            .filters(tagged(cluster))
            .send()
    })
    .await?;
    for g in groups.security_groups() {
        let id = g.group_id().unwrap_or_default();
        let mut tags = tag_map(g.tags());
        tags.entry("Name".into())
            .or_insert_with(|| g.group_name().unwrap_or_default().to_string());
        found.extend(claimed(ResourceKind::SecurityGroup, id, &tags, cluster));
    }

    let addresses = call(&what("Elastic IPs"), "DescribeAddresses", || {
        ec2c.describe_addresses().filters(tagged(cluster)).send()
    })
    .await?;
    for a in addresses.addresses() {
        let id = a.allocation_id().unwrap_or_default();
        let association = a.association_id().map(str::to_string).into_iter().collect();
        found.extend(
            claimed(ResourceKind::ElasticIp, id, &tag_map(a.tags()), cluster)
                .map(|r| r.with_parts(association)),
        );
    }

    found.extend(nat_gateways(cloud, cluster).await?);
    found.extend(instances(cloud, cluster).await?);
    found.extend(network_interfaces(cloud, cluster).await?);
    found.extend(volumes(cloud, cluster).await?);
    Ok(found)
}

/// Every NAT gateway not yet deleted, matched by tags here: the emulator ignores tag filters on this call.
async fn nat_gateways(cloud: &Cloud, cluster: &str) -> Result<Vec<Resource>, UpdateError> {
    let mut found = Vec::new();
    let mut pages = cloud
        .ec2
        .describe_nat_gateways()
        .filter(filter(
            "state",
            &["pending", "available", "deleting", "failed"],
        ))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| {
            crate::cloud::aws::failure(
                &format!("NAT gateways of {cluster}"),
                "DescribeNatGateways",
                e,
            )
        })?;
        for g in page.nat_gateways() {
            let id = g.nat_gateway_id().unwrap_or_default();
            let state = g.state().map(|s| s.as_str().to_string());
            found.extend(
                claimed(ResourceKind::NatGateway, id, &tag_map(g.tags()), cluster)
                    .map(|r| r.with_state(state.as_deref())),
            );
        }
    }
    Ok(found)
}

async fn instances(cloud: &Cloud, cluster: &str) -> Result<Vec<Resource>, UpdateError> {
    let mut found = Vec::new();
    let mut pages = cloud
        .ec2
        .describe_instances()
        .filters(tagged(cluster))
        .filters(filter("instance-state-name", &LIVE_INSTANCE_STATES))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| {
            crate::cloud::aws::failure(&format!("instances of {cluster}"), "DescribeInstances", e)
        })?;
        for i in page.reservations().iter().flat_map(|r| r.instances()) {
            let id = i.instance_id().unwrap_or_default();
            let state = i
                .state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_string());
            if state.as_deref() == Some("terminated") {
                continue;
            }
            found.extend(
                claimed(ResourceKind::Instance, id, &tag_map(i.tags()), cluster)
                    .map(|r| r.with_state(state.as_deref())),
            );
        }
    }
    Ok(found)
}

async fn network_interfaces(cloud: &Cloud, cluster: &str) -> Result<Vec<Resource>, UpdateError> {
    let mut found = Vec::new();
    let mut pages = cloud
        .ec2
        .describe_network_interfaces()
        .filters(tagged(cluster))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| {
            crate::cloud::aws::failure(
                &format!("network interfaces of {cluster}"),
                "DescribeNetworkInterfaces",
                e,
            )
        })?;
        for n in page.network_interfaces() {
            let id = n.network_interface_id().unwrap_or_default();
            let state = n.status().map(|s| s.as_str().to_string());
            let attachment = n
                .attachment()
                .and_then(|a| a.attachment_id())
                .map(str::to_string)
                .into_iter()
                .collect();
            found.extend(
                claimed(
                    ResourceKind::NetworkInterface,
                    id,
                    &tag_map(n.tag_set()),
                    cluster,
                )
                .map(|r| r.with_state(state.as_deref()).with_parts(attachment)),
            );
        }
    }
    Ok(found)
}

async fn volumes(cloud: &Cloud, cluster: &str) -> Result<Vec<Resource>, UpdateError> {
    let mut found = Vec::new();
    let mut pages = cloud
        .ec2
        .describe_volumes()
        .filters(tagged(cluster))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| {
            crate::cloud::aws::failure(&format!("volumes of {cluster}"), "DescribeVolumes", e)
        })?;
        for v in page.volumes() {
            let id = v.volume_id().unwrap_or_default();
            let state = v.state().map(|s| s.as_str().to_string());
            if state.as_deref() == Some("deleted") {
                continue;
            }
            let attached_to = v
                .attachments()
                .iter()
                .filter_map(|a| a.instance_id().map(str::to_string))
                .collect();
            found.extend(
                claimed(ResourceKind::Volume, id, &tag_map(v.tags()), cluster)
                    .map(|r| r.with_state(state.as_deref()).with_parts(attached_to)),
            );
        }
    }
    Ok(found)
}

async fn launch_templates(cloud: &Cloud, cluster: &str) -> Result<Vec<Resource>, UpdateError> {
    Ok(owned_launch_templates(cloud, cluster)
        .await?
        .iter()
        .filter_map(|t| {
            let id = t.launch_template_id().unwrap_or_default();
            let mut tags = tag_map(t.tags());
            tags.entry("Name".into())
                .or_insert_with(|| t.launch_template_name().unwrap_or_default().to_string());
            claimed(ResourceKind::LaunchTemplate, id, &tags, cluster)
        })
        .collect())
}

/// Every Auto Scaling Group carrying the cluster's ownership tag, with its instances (matched here: the
/// emulator's tag filters on this call are not to be relied on).
async fn auto_scaling_groups(cloud: &Cloud, cluster: &str) -> Result<Vec<Resource>, UpdateError> {
    let mut found = Vec::new();
    let mut pages = cloud
        .autoscaling
        .describe_auto_scaling_groups()
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| {
            crate::cloud::aws::failure(
                &format!("auto scaling groups of {cluster}"),
                "DescribeAutoScalingGroups",
                e,
            )
        })?;
        for g in page.auto_scaling_groups() {
            let name = g.auto_scaling_group_name().unwrap_or_default();
            let tags: BTreeMap<String, String> = g
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
                .collect();
            let instances = g
                .instances()
                .iter()
                .filter_map(|i| i.instance_id().map(str::to_string))
                .collect();
            found.extend(
                claimed(ResourceKind::AutoScalingGroup, name, &tags, cluster)
                    .map(|r| r.with_state(g.status()).with_parts(instances)),
            );
        }
    }
    Ok(found)
}

/// The API's load balancer and target group, by their deterministic names, kept only when tagged as the
/// cluster's (a name can be shortened with a hash; tags cannot be mistaken).
async fn load_balancing(cloud: &Cloud, cluster: &str) -> Result<Vec<Resource>, UpdateError> {
    let elb = &cloud.elb;
    let mut arns: Vec<(ResourceKind, String, String)> = Vec::new();
    // Today's names and those of clusters made before them (model::elb_names): a delete leaves neither.
    for lb_name in elb_names("api", cluster) {
        let lbs = find(
            &format!("LoadBalancer {lb_name}"),
            "DescribeLoadBalancers",
            &["LoadBalancerNotFound"],
            || elb.describe_load_balancers().names(&lb_name).send(),
        )
        .await?;
        for lb in lbs.iter().flat_map(|o| o.load_balancers()) {
            if let Some(arn) = lb.load_balancer_arn() {
                arns.push((ResourceKind::LoadBalancer, arn.to_string(), lb_name.clone()));
            }
        }
    }
    for tg_name in elb_names("tcp", cluster) {
        let tgs = find(
            &format!("TargetGroup {tg_name}"),
            "DescribeTargetGroups",
            &["TargetGroupNotFound"],
            || elb.describe_target_groups().names(&tg_name).send(),
        )
        .await?;
        for tg in tgs.iter().flat_map(|o| o.target_groups()) {
            if let Some(arn) = tg.target_group_arn() {
                arns.push((ResourceKind::TargetGroup, arn.to_string(), tg_name.clone()));
            }
        }
    }
    if arns.is_empty() {
        return Ok(Vec::new());
    }
    let described = call(
        &format!("load balancing of {cluster}"),
        "DescribeTags",
        || {
            elb.describe_tags()
                .set_resource_arns(Some(arns.iter().map(|(_, arn, _)| arn.clone()).collect()))
                .send()
        },
    )
    .await?;
    let tags_of: BTreeMap<String, BTreeMap<String, String>> = described
        .tag_descriptions()
        .iter()
        .map(|d| {
            let tags = d
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
                .collect();
            (d.resource_arn().unwrap_or_default().to_string(), tags)
        })
        .collect();
    Ok(arns
        .into_iter()
        .filter_map(|(kind, arn, name)| {
            let mut tags = tags_of.get(&arn).cloned().unwrap_or_default();
            tags.insert("Name".into(), name);
            claimed(kind, &arn, &tags, cluster)
        })
        .collect())
}

/// The roles and instance profiles `control-plane.NAME`, `nodes.NAME`, `api-servers.NAME` and `bastions.NAME`. A role counts when its tags say it
/// is the cluster's. An instance profile carries no tags of Ballast's (it is made without), so it counts when
/// tagged as the cluster's or when every role in it is one of the cluster's own (an empty one included: its
/// name is the cluster's).
async fn iam(cloud: &Cloud, cluster: &str) -> Result<Vec<Resource>, UpdateError> {
    let iam = &cloud.iam;
    let mut found = Vec::new();
    let mut owned_roles = Vec::new();
    for role in [
        Role::ControlPlane,
        Role::Node,
        Role::ApiServer,
        Role::Bastion,
    ] {
        let name = role_resource_name(cluster, role);
        let resource = format!("IamRole {name}");
        let Some(_) = find(&resource, "GetRole", &["NoSuchEntity"], || {
            iam.get_role().role_name(&name).send()
        })
        .await?
        else {
            continue;
        };
        let tags: BTreeMap<String, String> = call(&resource, "ListRoleTags", || {
            iam.list_role_tags().role_name(&name).send()
        })
        .await?
        .tags()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect();
        let Some(found_role) = claimed(ResourceKind::IamRole, &name, &tags, cluster) else {
            continue;
        };
        if found_role.kind == ResourceKind::IamRole {
            owned_roles.push(name.clone());
            let mut parts: Vec<String> = call(&resource, "ListRolePolicies", || {
                iam.list_role_policies().role_name(&name).send()
            })
            .await?
            .policy_names()
            .to_vec();
            let attached = call(&resource, "ListAttachedRolePolicies", || {
                iam.list_attached_role_policies().role_name(&name).send()
            })
            .await?;
            parts.extend(
                attached
                    .attached_policies()
                    .iter()
                    .filter_map(|p| p.policy_arn().map(str::to_string)),
            );
            found.push(found_role.with_parts(parts));
        } else {
            found.push(found_role);
        }
    }
    for role in [
        Role::ControlPlane,
        Role::Node,
        Role::ApiServer,
        Role::Bastion,
    ] {
        let name = role_resource_name(cluster, role);
        let resource = format!("InstanceProfile {name}");
        let Some(out) = find(&resource, "GetInstanceProfile", &["NoSuchEntity"], || {
            iam.get_instance_profile()
                .instance_profile_name(&name)
                .send()
        })
        .await?
        else {
            continue;
        };
        let Some(profile) = out.instance_profile() else {
            continue;
        };
        let roles: Vec<String> = profile
            .roles()
            .iter()
            .map(|r| r.role_name().to_string())
            .collect();
        let tags: BTreeMap<String, String> = profile
            .tags()
            .iter()
            .map(|t| (t.key().to_string(), t.value().to_string()))
            .collect();
        let ours = claim(&tags, cluster) == Claim::Owned
            || (claim(&tags, cluster) == Claim::None
                && roles.iter().all(|r| owned_roles.contains(r)));
        if ours {
            found
                .push(Resource::new(ResourceKind::InstanceProfile, &name, &name).with_parts(roles));
        }
    }
    Ok(found)
}
