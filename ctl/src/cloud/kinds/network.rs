//! The VPC: the cluster's own (found by its ownership tag, created with DNS hostnames on), or a shared one named
//! by `spec.networkID` (only tagged `shared`). Its CIDR cannot change in place.

use aws_sdk_ec2::types as ec2;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::{tags_named, ActualState, Known, SharedTag, Target};
use crate::cloud::aws::{call, find as find_optional, owned_filter, tag_map, tag_spec};
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{Finder, Task, Wanted};
use crate::cloud::model::{ClusterModel, VpcModel};
use crate::cloud::plan::{Action, Change as PlanChange, Kind, Planned, Stage};
use crate::cloud::terraform::{
    reference, string_map, tf_name, value, RenderError, Resource as TfResource, Terraform,
};
use crate::cloud::Cloud;

/// A VPC as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Vpc {
    pub id: String,
    pub cidr: String,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    /// VPCs tagged as owned by the cluster (more than one is an error).
    #[serde(default)]
    pub owned: Vec<Vpc>,
    /// The VPC `spec.networkID` names, if it exists.
    #[serde(default)]
    pub shared: Option<Vpc>,
}

/// What changes about the VPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Create { name: String, cidr: String },
    TagShared(SharedTag),
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        match self {
            Change::Create { name, cidr } => {
                vec![PlanChange::new(Stage::Vpc, Kind::Vpc, name, Action::Create)
                    .field("cidr", None, cidr)]
            }
            Change::TagShared(tag) => tag.planned(),
        }
    }
}

fn vpc_of(vpc: &ec2::Vpc) -> Vpc {
    Vpc {
        id: vpc.vpc_id().unwrap_or_default().to_string(),
        cidr: vpc.cidr_block().unwrap_or_default().to_string(),
        tags: tag_map(vpc.tags()),
    }
}

fn shared_resource(id: &str) -> String {
    format!("Vpc {id} (spec.networkID)")
}

pub async fn find(cloud: &Cloud, model: &ClusterModel) -> Result<Actual, UpdateError> {
    let ec2c = &cloud.ec2;
    match &model.vpc {
        VpcModel::Shared { id } => {
            let found = find_optional(
                &shared_resource(id),
                "DescribeVpcs",
                &["InvalidVpcID.NotFound"],
                || ec2c.describe_vpcs().vpc_ids(id).send(),
            )
            .await?;
            Ok(Actual {
                owned: Vec::new(),
                shared: found.and_then(|o| o.vpcs().first().map(vpc_of)),
            })
        }
        VpcModel::Owned { .. } => {
            let out = call(&format!("Vpc {}", model.cluster), "DescribeVpcs", || {
                ec2c.describe_vpcs()
                    .filters(owned_filter(&model.cluster))
                    .send()
            })
            .await?;
            Ok(Actual {
                owned: out.vpcs().iter().map(vpc_of).collect(),
                shared: None,
            })
        }
    }
}

/// The VPC's id, if it exists.
pub fn vpc_id(model: &ClusterModel, actual: &Actual) -> Option<String> {
    match &model.vpc {
        VpcModel::Shared { id } => Some(id.clone()),
        VpcModel::Owned { .. } => actual.owned.first().map(|v| v.id.clone()),
    }
}

pub fn diff(model: &ClusterModel, actual: &Actual) -> Result<Vec<Change>, UpdateError> {
    let cluster = &model.cluster;
    match &model.vpc {
        VpcModel::Shared { id } => {
            let resource = shared_resource(id);
            let vpc = actual.shared.as_ref().ok_or_else(|| UpdateError::Missing {
                resource: resource.clone(),
                message: format!("no such VPC in {}: check spec.networkID", model.region),
            })?;
            let tag = SharedTag::wanted(&resource, Kind::Vpc, id, &vpc.tags, cluster)?;
            Ok(tag.into_iter().map(Change::TagShared).collect())
        }
        VpcModel::Owned { cidr } => {
            let resource = format!("Vpc {cluster}");
            if actual.owned.len() > 1 {
                return Err(UpdateError::Duplicate {
                    resource,
                    count: actual.owned.len(),
                    ids: actual
                        .owned
                        .iter()
                        .map(|v| v.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            match actual.owned.first() {
                Some(vpc) if &vpc.cidr != cidr => Err(UpdateError::Immutable {
                    resource,
                    field: "spec.networkCIDR",
                    from: vpc.cidr.clone(),
                    to: cidr.clone(),
                }),
                Some(_) => Ok(Vec::new()),
                None => Ok(vec![Change::Create {
                    name: cluster.clone(),
                    cidr: cidr.clone(),
                }]),
            }
        }
    }
}

pub async fn apply(
    target: &Target<'_>,
    changes: &[Change],
    known: &mut Known,
) -> Result<(), UpdateError> {
    let ec2c = &target.cloud.ec2;
    for change in changes {
        match change {
            Change::TagShared(tag) => tag.apply(target.cloud).await?,
            Change::Create { name, cidr } => {
                let resource = format!("Vpc {name}");
                let tags = target.tags_named(name);
                let created = call(&resource, "CreateVpc", || {
                    ec2c.create_vpc()
                        .cidr_block(cidr)
                        .tag_specifications(tag_spec(ec2::ResourceType::Vpc, &tags))
                        .send()
                })
                .await?;
                let id = created
                    .vpc()
                    .and_then(|v| v.vpc_id())
                    .unwrap_or_default()
                    .to_string();
                call(&resource, "ModifyVpcAttribute", || {
                    ec2c.modify_vpc_attribute()
                        .vpc_id(&id)
                        .enable_dns_hostnames(
                            ec2::AttributeBooleanValue::builder().value(true).build(),
                        )
                        .send()
                })
                .await?;
                known.vpc_id = Some(id);
            }
        }
    }
    Ok(())
}

/// Deletes an owned VPC (`delete cluster`), once everything in it is gone; a shared one only loses its tag.
pub async fn delete(
    cloud: &Cloud,
    vpc: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    super::deletion::attempt(&vpc.label(), "DeleteVpc", || {
        cloud.ec2.delete_vpc().vpc_id(&vpc.id).send()
    })
    .await
}

/// The VPC: deleted once everything in it is gone.
impl super::task::Delete for VpcTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::Kinds(&[super::deletion::ResourceKind::Vpc])
    }

    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(delete(deleting.cloud, resource))
    }
}

/// The VPC as a [`Task`].
pub struct VpcTask;

impl Task for VpcTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.network
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.network = actual;
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
        known.vpc_id = vpc_id(wanted.model, actual);
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
            match change {
                Change::TagShared(tag) => tag.render_terraform(terraform)?,
                Change::Create { name, cidr } => {
                    let tf = tf_name(name);
                    terraform.resource(
                        "aws_vpc",
                        &tf,
                        TfResource::new()
                            .attr("cidr_block", cidr.as_str())
                            .attr("enable_dns_hostnames", true)
                            .attr("enable_dns_support", true)
                            .attr("tags", string_map(&tags_named(model, name))),
                    )?;
                    known.vpc_id = Some(reference("aws_vpc", &tf, "id"));
                    terraform.output(
                        "vpc_cidr_block",
                        value(&reference("aws_vpc", &tf, "cidr_block")),
                    );
                }
            }
        }
        terraform.output("cluster_name", value(&model.cluster));
        terraform.output("region", value(&model.region));
        if let Some(id) = &known.vpc_id {
            terraform.output("vpc_id", value(id));
        }
        Ok(())
    }
}
