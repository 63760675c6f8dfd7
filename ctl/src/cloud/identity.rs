//! Cluster identity: a name alone never gives a spec power over AWS resources. Every resource Ballast makes
//! carries `ballast.dev/cluster-id` (the id in the cluster's state store, `ballast_store::cluster_id`), and before
//! `update cluster` changes anything, and before each round of `delete cluster`, the cluster's resources as
//! `teardown::discover` finds them by its name (one finder for every kind) are judged here, in one place:
//!
//! - a resource carrying another id is a cluster of the same name in another state store's: the run is refused,
//!   naming each such resource and the id it carries, and nothing is changed or deleted;
//! - a resource Ballast made under this name with no id (made before ids, or by a cluster of this name in a
//!   store without one) is refused too, unless the operator asks to adopt it (`--adopt-untagged`): the adopted
//!   resources are listed, then tagged with this cluster's id (`update`) or deleted (`delete`);
//! - what Ballast does not make under the cluster's name (the cloud controller manager's load balancers, the VPC
//!   CNI's network interfaces, shared resources) is not checked: it lives in the cluster's VPC or names it, and
//!   the VPC is checked. An instance profile is bound through its role; IRSA's discovery documents through the
//!   spec's bucket, which only this store names.
//!
//! [`judge`] is pure; [`adopt`] is the only call that writes (tags).

use std::collections::BTreeMap;

use aws_sdk_ec2::types as ec2;

use super::aws::{call, CLUSTER_ID_TAG};
pub use super::error::IdentityError;
use super::error::UpdateError;
use super::kinds::deletion::{Binding, Resource, ResourceKind};
use super::Cloud;

/// How the cluster's found resources stand against its id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Judgement {
    /// Resources carrying another cluster's id, with that id: never changed or deleted.
    pub foreign: Vec<(Resource, String)>,
    /// Resources Ballast made under this name that carry no id: adopted only when asked.
    pub untagged: Vec<Resource>,
}

/// Judges `found` for the cluster whose id is `id` (`None`: a cluster made before ids, whose store has none
/// yet; then every id a resource carries is another's).
pub fn judge(found: &[Resource], id: Option<&str>) -> Judgement {
    let mut judgement = Judgement::default();
    for resource in found {
        match &resource.binding {
            Binding::Unchecked => {}
            Binding::Untagged => judgement.untagged.push(resource.clone()),
            Binding::Id(theirs) if Some(theirs.as_str()) == id => {}
            Binding::Id(theirs) => judgement.foreign.push((resource.clone(), theirs.clone())),
        }
    }
    judgement
}

/// What one run of `update` or `delete` may do with the cluster's resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub cluster: String,
    /// The id in the cluster's store (`None`: none yet, only for plans of a cluster made before ids).
    pub id: Option<String>,
    /// `--adopt-untagged`: resources made under this name without an id are this cluster's.
    pub adopt_untagged: bool,
}

impl Identity {
    /// The resources of `found` to adopt, or why the run is refused: any foreign one refuses it; untagged
    /// ones refuse it unless adopting was asked (`what` says what adopting does in this command).
    pub fn check(
        &self,
        found: &[Resource],
        what: &'static str,
    ) -> Result<Vec<Resource>, IdentityError> {
        let judgement = judge(found, self.id.as_deref());
        if !judgement.foreign.is_empty() {
            return Err(IdentityError::Foreign {
                cluster: self.cluster.clone(),
                ours: self.id.clone().unwrap_or_else(|| "none yet".to_string()),
                resources: judgement
                    .foreign
                    .iter()
                    .map(|(r, id)| format!("{} carries {CLUSTER_ID_TAG}={id}", r.label()))
                    .collect(),
            });
        }
        if !judgement.untagged.is_empty() && !self.adopt_untagged {
            return Err(IdentityError::Untagged {
                cluster: self.cluster.clone(),
                resources: judgement.untagged.iter().map(Resource::label).collect(),
                what,
            });
        }
        Ok(judgement.untagged)
    }
}

/// Tags each resource with the cluster's id `id` (an adopted resource is then this cluster's like any other).
pub async fn adopt(cloud: &Cloud, resources: &[Resource], id: &str) -> Result<(), UpdateError> {
    for r in resources {
        let label = r.label();
        let what = label.as_str();
        match r.kind {
            ResourceKind::Vpc
            | ResourceKind::Subnet
            | ResourceKind::RouteTable
            | ResourceKind::InternetGateway
            | ResourceKind::SecurityGroup
            | ResourceKind::ElasticIp
            | ResourceKind::NatGateway
            | ResourceKind::Instance
            | ResourceKind::Volume
            | ResourceKind::LaunchTemplate
            | ResourceKind::NetworkInterface => {
                call(what, "CreateTags", || {
                    cloud
                        .ec2
                        .create_tags()
                        .resources(&r.id)
                        .tags(ec2::Tag::builder().key(CLUSTER_ID_TAG).value(id).build())
                        .send()
                })
                .await?;
            }
            ResourceKind::AutoScalingGroup => {
                let tag = aws_sdk_autoscaling::types::Tag::builder()
                    .resource_id(&r.id)
                    .resource_type("auto-scaling-group")
                    .key(CLUSTER_ID_TAG)
                    .value(id)
                    .propagate_at_launch(true)
                    .build();
                call(what, "CreateOrUpdateTags", || {
                    cloud
                        .autoscaling
                        .create_or_update_tags()
                        .tags(tag.clone())
                        .send()
                })
                .await?;
            }
            ResourceKind::LoadBalancer | ResourceKind::TargetGroup => {
                call(what, "AddTags", || {
                    cloud
                        .elb
                        .add_tags()
                        .resource_arns(&r.id)
                        .tags(
                            aws_sdk_elasticloadbalancingv2::types::Tag::builder()
                                .key(CLUSTER_ID_TAG)
                                .value(id)
                                .build(),
                        )
                        .send()
                })
                .await?;
            }
            ResourceKind::IamRole => {
                let tag = iam_tag(what, id)?;
                call(what, "TagRole", || {
                    cloud
                        .iam
                        .tag_role()
                        .role_name(&r.id)
                        .tags(tag.clone())
                        .send()
                })
                .await?;
            }
            ResourceKind::OidcProvider => {
                let tag = iam_tag(what, id)?;
                call(what, "TagOpenIDConnectProvider", || {
                    cloud
                        .iam
                        .tag_open_id_connect_provider()
                        .open_id_connect_provider_arn(&r.id)
                        .tags(tag.clone())
                        .send()
                })
                .await?;
            }
            ResourceKind::EventRule => {
                let rule = call(what, "DescribeRule", || {
                    cloud.events.describe_rule().name(&r.id).send()
                })
                .await?;
                let arn = rule.arn().unwrap_or_default().to_string();
                let tag = aws_sdk_eventbridge::types::Tag::builder()
                    .key(CLUSTER_ID_TAG)
                    .value(id)
                    .build()
                    .map_err(|e| UpdateError::Missing {
                        resource: label.clone(),
                        message: format!("its id tag cannot be built: {e}"),
                    })?;
                call(what, "TagResource", || {
                    cloud
                        .events
                        .tag_resource()
                        .resource_arn(&arn)
                        .tags(tag.clone())
                        .send()
                })
                .await?;
            }
            ResourceKind::SqsQueue => {
                call(what, "TagQueue", || {
                    cloud
                        .sqs
                        .tag_queue()
                        .queue_url(&r.id)
                        .tags(CLUSTER_ID_TAG, id)
                        .send()
                })
                .await?;
            }
            // Never `Untagged` (`Binding::of` is not asked of them): bound through what they live in.
            ResourceKind::ClassicLoadBalancer
            | ResourceKind::InstanceProfile
            | ResourceKind::DiscoveryDocument
            | ResourceKind::SharedTag => {}
        }
    }
    Ok(())
}

fn iam_tag(what: &str, id: &str) -> Result<aws_sdk_iam::types::Tag, UpdateError> {
    aws_sdk_iam::types::Tag::builder()
        .key(CLUSTER_ID_TAG)
        .value(id)
        .build()
        .map_err(|e| UpdateError::Missing {
            resource: what.to_string(),
            message: format!("its id tag cannot be built: {e}"),
        })
}

/// The adopted resources, one per line, for the operator (`update`/`delete` print it before acting).
pub fn render_adopted(resources: &[Resource], cluster: &str, id: Option<&str>) -> String {
    let mut by_kind: BTreeMap<ResourceKind, Vec<String>> = BTreeMap::new();
    for r in resources {
        by_kind.entry(r.kind).or_default().push(r.label());
    }
    let mut out = format!(
        "Adopting {} AWS resource(s) made under the name {cluster} without a cluster id, as this cluster's{}:\n",
        resources.len(),
        id.map(|id| format!(" (id {id})")).unwrap_or_default()
    );
    for labels in by_kind.values() {
        for label in labels {
            out.push_str(&format!("    + {label}\n"));
        }
    }
    out
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

    const C: &str = "c.example.com";

    fn inventory() -> Vec<Resource> {
        let ours = tags(&[("ballast.dev/cluster", C), (CLUSTER_ID_TAG, "ours")]);
        let theirs = tags(&[("ballast.dev/cluster", C), (CLUSTER_ID_TAG, "theirs")]);
        let untagged = tags(&[("ballast.dev/cluster", C)]);
        let kubernetes_made = tags(&[("kubernetes.io/cluster/c.example.com", "owned")]);
        vec![
            Resource::new(ResourceKind::Vpc, "vpc-1", C).bound_by(&ours, C),
            Resource::new(ResourceKind::IamRole, "nodes.c.example.com", "n").bound_by(&theirs, C),
            Resource::new(ResourceKind::Volume, "vol-1", "etcd").bound_by(&untagged, C),
            Resource::new(ResourceKind::ClassicLoadBalancer, "a1", "a1")
                .bound_by(&kubernetes_made, C),
        ]
    }

    #[test]
    fn another_id_is_foreign_no_id_is_untagged_and_what_ballast_did_not_make_is_not_checked() {
        let j = judge(&inventory(), Some("ours"));
        assert_eq!(
            j.foreign
                .iter()
                .map(|(r, id)| (r.id.as_str(), id.as_str()))
                .collect::<Vec<_>>(),
            vec![("nodes.c.example.com", "theirs")]
        );
        assert_eq!(
            j.untagged.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            vec!["vol-1"]
        );
        // A cluster with no id yet: every id is another's.
        let none = judge(&inventory(), None);
        assert_eq!(none.foreign.len(), 2);
    }

    #[test]
    fn a_foreign_resource_refuses_even_with_adopt_and_names_the_resource_and_its_id() {
        let identity = Identity {
            cluster: C.to_string(),
            id: Some("ours".to_string()),
            adopt_untagged: true,
        };
        let err = identity
            .check(&inventory(), "tagged")
            .expect_err("foreign refuses");
        let text = err.to_string();
        assert!(
            text.contains("IamRole nodes.c.example.com (n) carries ballast.dev/cluster-id=theirs"),
            "{text}"
        );
        assert!(text.contains("another state store"), "{text}");
    }

    #[test]
    fn untagged_resources_are_refused_unless_adopted_then_listed() {
        let only_untagged: Vec<Resource> = inventory()
            .into_iter()
            .filter(|r| r.id != "nodes.c.example.com")
            .collect();
        let mut identity = Identity {
            cluster: C.to_string(),
            id: Some("ours".to_string()),
            adopt_untagged: false,
        };
        let err = identity
            .check(&only_untagged, "tagged with this cluster's id")
            .expect_err("untagged refuses");
        assert!(err.to_string().contains("--adopt-untagged"), "{err}");
        assert!(err.to_string().contains("Volume vol-1"), "{err}");
        identity.adopt_untagged = true;
        let adopted = identity.check(&only_untagged, "tagged").expect("adopted");
        assert_eq!(adopted.len(), 1);
        let listed = render_adopted(&adopted, C, Some("ours"));
        assert!(listed.contains("+ Volume vol-1 (etcd)"), "{listed}");
    }
}
