//! Subnets: the cluster's own (found by their ownership tag and `Name`), or shared ones the spec names by id
//! (only tagged `shared`). A subnet's CIDR and zone cannot change in place.

use std::collections::BTreeMap;

use aws_sdk_ec2::types as ec2;
use serde::{Deserialize, Serialize};

use super::{tags_named, ActualState, Known, SharedTag, Target};
use crate::cloud::aws::{call, owned_filter, tag_map, tag_spec};
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{Finder, Task, Wanted};
use crate::cloud::model::{ClusterModel, SubnetModel};
use crate::cloud::plan::{Action, Change as PlanChange, Kind, Planned, Stage};
use crate::cloud::terraform::{
    reference, string_map, tf_name, value, values, RenderError, Resource as TfResource, Terraform,
};
use crate::cloud::Cloud;

/// A subnet as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Subnet {
    pub id: String,
    pub cidr: String,
    pub zone: String,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    /// Owned subnets by their `Name` tag (`<name>.<cluster>`).
    #[serde(default)]
    pub owned: BTreeMap<String, Subnet>,
    /// Shared subnets (`spec.subnets[].id`) that exist, by id.
    #[serde(default)]
    pub shared: BTreeMap<String, Subnet>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Create(SubnetModel),
    TagShared(SharedTag),
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        match self {
            Change::Create(subnet) => vec![PlanChange::new(
                Stage::Network,
                Kind::Subnet,
                &subnet.resource_name,
                Action::Create,
            )
            .field("zone", None, &subnet.zone)
            .field("cidr", None, subnet.cidr.clone().unwrap_or_default())
            .field(
                "type",
                None,
                if subnet.public { "Public" } else { "Private" },
            )],
            Change::TagShared(tag) => tag.planned(),
        }
    }
}

fn subnet_of(subnet: &ec2::Subnet) -> Subnet {
    Subnet {
        id: subnet.subnet_id().unwrap_or_default().to_string(),
        cidr: subnet.cidr_block().unwrap_or_default().to_string(),
        zone: subnet.availability_zone().unwrap_or_default().to_string(),
        tags: tag_map(subnet.tags()),
    }
}

pub async fn find(cloud: &Cloud, model: &ClusterModel) -> Result<Actual, UpdateError> {
    let ec2c = &cloud.ec2;
    let cluster = &model.cluster;
    let out = call(&format!("subnets of {cluster}"), "DescribeSubnets", || {
        ec2c.describe_subnets()
            .filters(owned_filter(cluster))
            .send()
    })
    .await?;
    let mut actual = Actual::default();
    for subnet in out.subnets() {
        if let Some(name) = tag_map(subnet.tags()).get("Name") {
            actual.owned.insert(name.clone(), subnet_of(subnet));
        }
    }
    let shared_ids: Vec<String> = model
        .subnets
        .iter()
        .filter_map(|s| s.shared_id.clone())
        .collect();
    if !shared_ids.is_empty() {
        let out = call(
            "shared subnets (spec.subnets[].id)",
            "DescribeSubnets",
            || {
                ec2c.describe_subnets()
                    .set_subnet_ids(Some(shared_ids.clone()))
                    .send()
            },
        )
        .await?;
        for subnet in out.subnets() {
            let subnet = subnet_of(subnet);
            actual.shared.insert(subnet.id.clone(), subnet);
        }
    }
    Ok(actual)
}

/// The ids of the spec's subnets that exist, by the spec's subnet name.
pub fn subnet_ids(model: &ClusterModel, actual: &Actual) -> BTreeMap<String, String> {
    model
        .subnets
        .iter()
        .filter_map(|subnet| {
            let id = match &subnet.shared_id {
                Some(id) => actual.shared.get(id).map(|s| s.id.clone()),
                None => actual
                    .owned
                    .get(&subnet.resource_name)
                    .map(|s| s.id.clone()),
            };
            Some((subnet.name.clone(), id?))
        })
        .collect()
}

pub fn diff(model: &ClusterModel, actual: &Actual) -> Result<Vec<Change>, UpdateError> {
    let mut changes = Vec::new();
    for subnet in &model.subnets {
        let resource = format!("Subnet {}", subnet.resource_name);
        if let Some(id) = &subnet.shared_id {
            let found = actual.shared.get(id).ok_or_else(|| UpdateError::Missing {
                resource: resource.clone(),
                message: format!("shared subnet {id} does not exist: check spec.subnets[].id"),
            })?;
            if found.zone != subnet.zone {
                return Err(UpdateError::Missing {
                    resource,
                    message: format!(
                        "shared subnet {id} is in {}, but the spec says {}: fix spec.subnets[].zone",
                        if found.zone.is_empty() { "?" } else { &found.zone },
                        subnet.zone
                    ),
                });
            }
            let tag = SharedTag::wanted(&resource, Kind::Subnet, id, &found.tags, &model.cluster)?;
            changes.extend(tag.map(Change::TagShared));
            continue;
        }
        let cidr = subnet.cidr.clone().unwrap_or_default();
        let Some(found) = actual.owned.get(&subnet.resource_name) else {
            changes.push(Change::Create(subnet.clone()));
            continue;
        };
        for (field, from, to) in [
            ("spec.subnets[].cidr", &found.cidr, &cidr),
            ("spec.subnets[].zone", &found.zone, &subnet.zone),
        ] {
            if from != to {
                return Err(UpdateError::Immutable {
                    resource,
                    field,
                    from: from.clone(),
                    to: to.clone(),
                });
            }
        }
    }
    Ok(changes)
}

pub async fn apply(
    target: &Target<'_>,
    changes: &[Change],
    known: &mut Known,
) -> Result<(), UpdateError> {
    let ec2c = &target.cloud.ec2;
    for change in changes {
        let subnet = match change {
            Change::TagShared(tag) => {
                tag.apply(target.cloud).await?;
                continue;
            }
            Change::Create(subnet) => subnet,
        };
        let resource = format!("Subnet {}", subnet.resource_name);
        let vpc_id = known.vpc_id.clone().unwrap_or_default();
        let cidr = subnet.cidr.clone().unwrap_or_default();
        let mut tags = target.tags_named(&subnet.resource_name);
        tags.insert(role_tag(subnet.public).into(), "1".into());
        let created = call(&resource, "CreateSubnet", || {
            ec2c.create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(&cidr)
                .availability_zone(&subnet.zone)
                .tag_specifications(tag_spec(ec2::ResourceType::Subnet, &tags))
                .send()
        })
        .await?;
        let id = created
            .subnet()
            .and_then(|s| s.subnet_id())
            .unwrap_or_default()
            .to_string();
        known.subnet_ids.insert(subnet.name.clone(), id);
    }
    Ok(())
}

/// Deletes an owned subnet (`delete cluster`); a shared one is never passed here, it only loses its tag.
pub async fn delete(
    cloud: &Cloud,
    subnet: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    super::deletion::attempt(&subnet.label(), "DeleteSubnet", || {
        cloud.ec2.delete_subnet().subnet_id(&subnet.id).send()
    })
    .await
}

/// The subnets: deleted once nothing runs in them.
impl super::task::Delete for SubnetsTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::Kinds(&[super::deletion::ResourceKind::Subnet])
    }

    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(delete(deleting.cloud, resource))
    }
}

/// The subnets as a [`Task`].
pub struct SubnetsTask;

impl Task for SubnetsTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.subnets
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.subnets = actual;
    }

    async fn find(&self, finder: &Finder<'_>, wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
        find(finder.cloud, wanted.model).await
    }

    fn learn(
        &self,
        wanted: Wanted<'_>,
        actual: &Actual,
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        known.subnet_ids = subnet_ids(wanted.model, actual);
        Ok(())
    }

    fn diff(
        &self,
        wanted: Wanted<'_>,
        _known: &Known,
        actual: &Actual,
    ) -> Result<Vec<Change>, UpdateError> {
        diff(wanted.model, actual)
    }

    async fn apply(
        &self,
        target: &Target<'_>,
        changes: &[Change],
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        apply(target, changes, known).await
    }

    fn render_terraform(
        &self,
        wanted: Wanted<'_>,
        changes: &[Change],
        known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        let model = wanted.model;
        for change in changes {
            let subnet = match change {
                Change::TagShared(tag) => {
                    tag.render_terraform(terraform)?;
                    continue;
                }
                Change::Create(subnet) => subnet,
            };
            let tf = tf_name(&subnet.resource_name);
            let mut tags = tags_named(model, &subnet.resource_name);
            tags.insert(role_tag(subnet.public).into(), "1".into());
            terraform.resource(
                "aws_subnet",
                &tf,
                TfResource::new()
                    .attr("availability_zone", subnet.zone.as_str())
                    .attr("cidr_block", subnet.cidr.clone().unwrap_or_default())
                    .attr("tags", string_map(&tags))
                    .attr("vpc_id", value(known.vpc_id.as_deref().unwrap_or_default())),
            )?;
            known
                .subnet_ids
                .insert(subnet.name.clone(), reference("aws_subnet", &tf, "id"));
        }
        // kops's outputs: every subnet's id, and each by the spec's name.
        let ids: Vec<&String> = model
            .subnets
            .iter()
            .filter_map(|s| known.subnet_ids.get(&s.name))
            .collect();
        terraform.output("subnet_ids", values(&ids));
        for subnet in &model.subnets {
            if let Some(id) = known.subnet_ids.get(&subnet.name) {
                terraform.output(&format!("subnet_{}_id", tf_name(&subnet.name)), value(id));
            }
        }
        Ok(())
    }
}

/// The tag that tells Kubernetes's load balancer controllers which subnets are for which load balancers.
fn role_tag(public: bool) -> &'static str {
    if public {
        "kubernetes.io/role/elb"
    } else {
        "kubernetes.io/role/internal-elb"
    }
}
