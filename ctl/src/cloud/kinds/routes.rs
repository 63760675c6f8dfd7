//! Routes out of the VPC: the internet gateway and the public route table (when the cluster owns its VPC and
//! has public subnets), and for a private topology, per zone, an Elastic IP, a NAT gateway in the zone's public
//! subnet and a route table sending the zone's private subnets' default route through it.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types as ec2;
use serde::{Deserialize, Serialize};

use super::{tags_named, ActualState, Known, Target};
use crate::cloud::aws::{call, filter, owned_filter, ownership_tag, tag_map, tag_spec};
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{Finder, Task, Wanted};
use crate::cloud::model::ClusterModel;
use crate::cloud::plan::{
    or_known_after_apply, Action, Change as PlanChange, Kind, Planned, Stage, KNOWN_AFTER_APPLY,
};
use crate::cloud::terraform::{
    reference, string_map, tf_name, value, RenderError, Resource as TfResource, Terraform,
};
use crate::cloud::Cloud;

/// An internet gateway as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InternetGateway {
    pub id: String,
    /// The VPCs it is attached to.
    #[serde(default)]
    pub attached_to: Vec<String>,
}

/// A NAT gateway of the VPC (pending or available) as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NatGateway {
    pub id: String,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// One route of a route table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Route {
    pub destination: String,
    #[serde(default)]
    pub gateway_id: Option<String>,
    #[serde(default)]
    pub nat_gateway_id: Option<String>,
}

/// A route table as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteTable {
    pub id: String,
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Ids of the subnets associated with it.
    #[serde(default)]
    pub associated_subnets: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    /// The cluster's internet gateways (the first is used).
    #[serde(default)]
    pub internet_gateways: Vec<InternetGateway>,
    /// The NAT gateways in the VPC, whoever's (they are matched by tags here: the emulator ignores tag filters
    /// on NAT gateways).
    #[serde(default)]
    pub nat_gateways: Vec<NatGateway>,
    /// The cluster's route tables by their `Name` tag (`public.<cluster>`, `private-<zone>.<cluster>`).
    #[serde(default)]
    pub route_tables: BTreeMap<String, RouteTable>,
}

/// Where a route table's default route goes (the gateway's id, once it exists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteTarget {
    InternetGateway(Option<String>),
    Nat { zone: String, id: Option<String> },
}

impl RouteTarget {
    fn is_route(&self, route: &Route) -> bool {
        match self {
            RouteTarget::InternetGateway(id) => {
                route.gateway_id.is_some() && route.gateway_id == *id
            }
            RouteTarget::Nat { id, .. } => {
                route.nat_gateway_id.is_some() && route.nat_gateway_id == *id
            }
        }
    }

    fn describe(&self) -> &'static str {
        match self {
            RouteTarget::InternetGateway(_) => "internet gateway",
            RouteTarget::Nat { .. } => "NAT gateway",
        }
    }

    /// The gateway's id: as found, or as made by this run.
    fn resolve(&self, known: &Known) -> String {
        match self {
            RouteTarget::InternetGateway(id) => id.clone().or(known.internet_gateway_id.clone()),
            RouteTarget::Nat { zone, id } => id
                .clone()
                .or_else(|| known.nat_gateway_ids.get(zone).cloned()),
        }
        .unwrap_or_default()
    }
}

/// What a route table lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTableChange {
    pub name: String,
    /// `None`: the table does not exist yet.
    pub id: Option<String>,
    pub target: RouteTarget,
    pub add_default_route: bool,
    /// Spec subnet names to associate.
    pub associate: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    CreateInternetGateway {
        name: String,
    },
    AttachInternetGateway {
        name: String,
        id: String,
        vpc_id: Option<String>,
    },
    CreateNatGateway {
        zone: String,
        name: String,
        /// The spec name of the zone's public subnet it lives in.
        public_subnet: String,
    },
    RouteTable(RouteTableChange),
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        let change =
            match self {
                Change::CreateInternetGateway { name } => {
                    PlanChange::new(Stage::Network, Kind::InternetGateway, name, Action::Create)
                }
                Change::AttachInternetGateway { name, vpc_id, .. } => {
                    PlanChange::new(Stage::Network, Kind::InternetGateway, name, Action::Update)
                        .field("attachedTo", None, or_known_after_apply(vpc_id.as_ref()))
                }
                Change::CreateNatGateway {
                    name,
                    public_subnet,
                    ..
                } => PlanChange::new(Stage::Network, Kind::NatGateway, name, Action::Create)
                    .field("subnet", None, public_subnet)
                    .field("elasticIp", None, KNOWN_AFTER_APPLY),
                Change::RouteTable(table) => {
                    let action = if table.id.is_some() {
                        Action::Update
                    } else {
                        Action::Create
                    };
                    let mut change =
                        PlanChange::new(Stage::Network, Kind::RouteTable, &table.name, action);
                    if table.add_default_route {
                        change = change.field(
                            "routes",
                            None,
                            format!("0.0.0.0/0 -> {}", table.target.describe()),
                        );
                    }
                    if !table.associate.is_empty() {
                        change = change.field(
                            "associations",
                            None,
                            format!("+ {}", table.associate.join(", ")),
                        );
                    }
                    change
                }
            };
        vec![change]
    }
}

/// Reads the gateways and route tables; `vpc_id` is the VPC's, if it exists.
pub async fn find(
    cloud: &Cloud,
    model: &ClusterModel,
    vpc_id: Option<&str>,
) -> Result<Actual, UpdateError> {
    let ec2c = &cloud.ec2;
    let cluster = &model.cluster;
    let nat_zones = model.nat_zones();
    let mut actual = Actual::default();
    if !model.internet_gateway && nat_zones.is_empty() {
        return Ok(actual);
    }
    if model.internet_gateway {
        let out = call(
            &format!("InternetGateway {cluster}"),
            "DescribeInternetGateways",
            || {
                ec2c.describe_internet_gateways()
                    .filters(owned_filter(cluster))
                    .send()
            },
        )
        .await?;
        actual.internet_gateways = out
            .internet_gateways()
            .iter()
            .map(|g| InternetGateway {
                id: g.internet_gateway_id().unwrap_or_default().to_string(),
                attached_to: g
                    .attachments()
                    .iter()
                    .filter_map(|a| a.vpc_id().map(str::to_string))
                    .collect(),
            })
            .collect();
    }
    if let (Some(vpc), false) = (vpc_id, nat_zones.is_empty()) {
        let out = call(
            &format!("NAT gateways of {cluster}"),
            "DescribeNatGateways",
            || {
                ec2c.describe_nat_gateways()
                    .filter(filter("vpc-id", &[vpc]))
                    .filter(filter("state", &["pending", "available"]))
                    .send()
            },
        )
        .await?;
        actual.nat_gateways = out
            .nat_gateways()
            .iter()
            .map(|g| NatGateway {
                id: g.nat_gateway_id().unwrap_or_default().to_string(),
                tags: tag_map(g.tags()),
            })
            .collect();
    }
    let out = call(
        &format!("route tables of {cluster}"),
        "DescribeRouteTables",
        || {
            ec2c.describe_route_tables()
                .filters(owned_filter(cluster))
                .send()
        },
    )
    .await?;
    for table in out.route_tables() {
        let Some(name) = tag_map(table.tags()).remove("Name") else {
            continue;
        };
        actual
            .route_tables
            .entry(name)
            .or_insert_with(|| RouteTable {
                id: table.route_table_id().unwrap_or_default().to_string(),
                routes: table
                    .routes()
                    .iter()
                    .map(|r| Route {
                        destination: r.destination_cidr_block().unwrap_or_default().to_string(),
                        gateway_id: r.gateway_id().map(str::to_string),
                        nat_gateway_id: r.nat_gateway_id().map(str::to_string),
                    })
                    .collect(),
                associated_subnets: table
                    .associations()
                    .iter()
                    .filter_map(|a| a.subnet_id().map(str::to_string))
                    .collect(),
            });
    }
    Ok(actual)
}

/// The cluster's NAT gateway of `zone`, found by its `Name` and ownership tags.
fn nat_gateway<'a>(model: &ClusterModel, actual: &'a Actual, zone: &str) -> Option<&'a NatGateway> {
    let name = format!("{zone}.{}", model.cluster);
    let owner = ownership_tag(&model.cluster);
    actual.nat_gateways.iter().find(|g| {
        g.tags.get("Name") == Some(&name) && g.tags.get(&owner).map(String::as_str) == Some("owned")
    })
}

/// Ids of the gateways that exist.
pub fn learn(model: &ClusterModel, actual: &Actual, known: &mut Known) {
    if model.internet_gateway {
        known.internet_gateway_id = actual.internet_gateways.first().map(|g| g.id.clone());
    }
    for zone in model.nat_zones() {
        if let Some(gateway) = nat_gateway(model, actual, &zone) {
            known.nat_gateway_ids.insert(zone, gateway.id.clone());
        }
    }
}

pub fn diff(model: &ClusterModel, known: &Known, actual: &Actual) -> Vec<Change> {
    let cluster = &model.cluster;
    let mut changes = Vec::new();
    if model.internet_gateway {
        let gateway_id = match actual.internet_gateways.first() {
            Some(gateway) => {
                let attached = gateway
                    .attached_to
                    .iter()
                    .any(|vpc| Some(vpc) == known.vpc_id.as_ref());
                if !attached {
                    changes.push(Change::AttachInternetGateway {
                        name: cluster.clone(),
                        id: gateway.id.clone(),
                        vpc_id: known.vpc_id.clone(),
                    });
                }
                Some(gateway.id.clone())
            }
            None => {
                changes.push(Change::CreateInternetGateway {
                    name: cluster.clone(),
                });
                None
            }
        };
        // The public route table: a default route to the gateway, associated with every owned public subnet.
        let subnets = model
            .subnets
            .iter()
            .filter(|s| s.public && s.shared_id.is_none())
            .map(|s| s.name.clone())
            .collect();
        changes.extend(route_table(
            &format!("public.{cluster}"),
            RouteTarget::InternetGateway(gateway_id),
            subnets,
            known,
            actual,
        ));
    }
    for zone in model.nat_zones() {
        let name = format!("{zone}.{cluster}");
        let gateway_id = nat_gateway(model, actual, &zone).map(|g| g.id.clone());
        if gateway_id.is_none() {
            let public_subnet = model
                .subnets
                .iter()
                .find(|s| s.public && s.zone == zone)
                .map(|s| s.name.clone())
                .unwrap_or_default();
            changes.push(Change::CreateNatGateway {
                zone: zone.clone(),
                name,
                public_subnet,
            });
        }
        let subnets = model
            .subnets
            .iter()
            .filter(|s| !s.public && s.shared_id.is_none() && s.zone == zone)
            .map(|s| s.name.clone())
            .collect();
        changes.extend(route_table(
            &format!("private-{zone}.{cluster}"),
            RouteTarget::Nat {
                zone: zone.clone(),
                id: gateway_id,
            },
            subnets,
            known,
            actual,
        ));
    }
    changes
}

/// A route table named `name`: its default route to `target`, associated with `subnets` (spec names).
fn route_table(
    name: &str,
    target: RouteTarget,
    subnets: Vec<String>,
    known: &Known,
    actual: &Actual,
) -> Option<Change> {
    let table = actual.route_tables.get(name);
    let has_route = table.is_some_and(|t| {
        t.routes
            .iter()
            .any(|r| r.destination == "0.0.0.0/0" && target.is_route(r))
    });
    let associated: BTreeSet<&String> = table
        .map(|t| t.associated_subnets.iter().collect())
        .unwrap_or_default();
    let associate: Vec<String> = subnets
        .into_iter()
        .filter(|n| {
            known
                .subnet_ids
                .get(n)
                .is_none_or(|id| !associated.contains(id))
        })
        .collect();
    if table.is_some() && has_route && associate.is_empty() {
        return None;
    }
    Some(Change::RouteTable(RouteTableChange {
        name: name.to_string(),
        id: table.map(|t| t.id.clone()),
        target,
        add_default_route: !has_route,
        associate,
    }))
}

pub async fn apply(
    target: &Target<'_>,
    changes: &[Change],
    known: &mut Known,
) -> Result<(), UpdateError> {
    for change in changes {
        match change {
            Change::CreateInternetGateway { name } => {
                let id = create_internet_gateway(target, name, known).await?;
                known.internet_gateway_id = Some(id);
            }
            Change::AttachInternetGateway { name, id, .. } => {
                attach_internet_gateway(target.cloud, name, id, known).await?;
            }
            Change::CreateNatGateway {
                zone,
                name,
                public_subnet,
            } => {
                let id = create_nat_gateway(target, name, public_subnet, known).await?;
                if let Some(id) = id {
                    known.nat_gateway_ids.insert(zone.clone(), id);
                }
            }
            Change::RouteTable(table) => apply_route_table(target, table, known).await?,
        }
    }
    Ok(())
}

async fn create_internet_gateway(
    target: &Target<'_>,
    name: &str,
    known: &Known,
) -> Result<String, UpdateError> {
    let tags = target.tags_named(name);
    let created = call(
        &format!("InternetGateway {name}"),
        "CreateInternetGateway",
        || {
            target
                .cloud
                .ec2
                .create_internet_gateway()
                .tag_specifications(tag_spec(ec2::ResourceType::InternetGateway, &tags))
                .send()
        },
    )
    .await?;
    let id = created
        .internet_gateway()
        .and_then(|g| g.internet_gateway_id())
        .unwrap_or_default()
        .to_string();
    attach_internet_gateway(target.cloud, name, &id, known).await?;
    Ok(id)
}

async fn attach_internet_gateway(
    cloud: &Cloud,
    name: &str,
    id: &str,
    known: &Known,
) -> Result<(), UpdateError> {
    let vpc_id = known.vpc_id.clone().unwrap_or_default();
    call(
        &format!("InternetGateway {name}"),
        "AttachInternetGateway",
        || {
            cloud
                .ec2
                .attach_internet_gateway()
                .internet_gateway_id(id)
                .vpc_id(&vpc_id)
                .send()
        },
    )
    .await?;
    Ok(())
}

/// Creates a zone's NAT gateway with an Elastic IP: one left by an interrupted run is reused rather than leaked.
async fn create_nat_gateway(
    target: &Target<'_>,
    name: &str,
    public_subnet: &str,
    known: &Known,
) -> Result<Option<String>, UpdateError> {
    let ec2c = &target.cloud.ec2;
    let cluster = &target.model.cluster;
    let resource = format!("NatGateway {name}");
    let tags = target.tags_named(name);
    let addresses = call(&resource, "DescribeAddresses", || {
        ec2c.describe_addresses()
            .filters(owned_filter(cluster))
            .send()
    })
    .await?;
    let owner = ownership_tag(cluster);
    let unused = addresses.addresses().iter().find(|a| {
        let tags = tag_map(a.tags());
        tags.get("Name").map(String::as_str) == Some(name)
            && tags.get(&owner).map(String::as_str) == Some("owned")
            && a.association_id().is_none()
    });
    let allocation = match unused.and_then(|a| a.allocation_id()) {
        Some(id) => id.to_string(),
        None => call(&resource, "AllocateAddress", || {
            ec2c.allocate_address()
                .domain(ec2::DomainType::Vpc)
                .tag_specifications(tag_spec(ec2::ResourceType::ElasticIp, &tags))
                .send()
        })
        .await?
        .allocation_id()
        .unwrap_or_default()
        .to_string(),
    };
    let subnet_id = known
        .subnet_ids
        .get(public_subnet)
        .cloned()
        .unwrap_or_default();
    let created = call(&resource, "CreateNatGateway", || {
        ec2c.create_nat_gateway()
            .subnet_id(&subnet_id)
            .allocation_id(&allocation)
            .tag_specifications(tag_spec(ec2::ResourceType::Natgateway, &tags))
            .send()
    })
    .await?;
    Ok(created
        .nat_gateway()
        .and_then(|g| g.nat_gateway_id())
        .map(str::to_string))
}

async fn apply_route_table(
    target: &Target<'_>,
    table: &RouteTableChange,
    known: &Known,
) -> Result<(), UpdateError> {
    let ec2c = &target.cloud.ec2;
    let resource = format!("RouteTable {}", table.name);
    let table_id = match &table.id {
        Some(id) => id.clone(),
        None => {
            let tags = target.tags_named(&table.name);
            let vpc = known.vpc_id.clone().unwrap_or_default();
            call(&resource, "CreateRouteTable", || {
                ec2c.create_route_table()
                    .vpc_id(&vpc)
                    .tag_specifications(tag_spec(ec2::ResourceType::RouteTable, &tags))
                    .send()
            })
            .await?
            .route_table()
            .and_then(|t| t.route_table_id())
            .unwrap_or_default()
            .to_string()
        }
    };
    if table.add_default_route {
        let gateway = table.target.resolve(known);
        call(&resource, "CreateRoute", || {
            let request = ec2c
                .create_route()
                .route_table_id(&table_id)
                .destination_cidr_block("0.0.0.0/0");
            match &table.target {
                RouteTarget::InternetGateway(_) => request.gateway_id(&gateway),
                RouteTarget::Nat { .. } => request.nat_gateway_id(&gateway),
            }
            .send()
        })
        .await?;
    }
    for name in &table.associate {
        let subnet_id = known.subnet_ids.get(name).cloned().unwrap_or_default();
        call(&resource, "AssociateRouteTable", || {
            ec2c.associate_route_table()
                .route_table_id(&table_id)
                .subnet_id(&subnet_id)
                .send()
        })
        .await?;
    }
    Ok(())
}

/// Deletes a NAT gateway (`delete cluster`); AWS takes about a minute, which the teardown waits for before
/// releasing its Elastic IP.
pub async fn delete_nat_gateway(
    cloud: &Cloud,
    gateway: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    super::deletion::attempt(&gateway.label(), "DeleteNatGateway", || {
        cloud
            .ec2
            .delete_nat_gateway()
            .nat_gateway_id(&gateway.id)
            .send()
    })
    .await
}

/// Releases an Elastic IP (`delete cluster`), once the NAT gateway or instance that used it is gone; an
/// association that outlived it (its `parts`) is removed first.
pub async fn release_address(
    cloud: &Cloud,
    address: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    use super::deletion::attempt;
    for association in &address.parts {
        attempt(&address.label(), "DisassociateAddress", || {
            cloud
                .ec2
                .disassociate_address()
                .association_id(association)
                .send()
        })
        .await?;
    }
    attempt(&address.label(), "ReleaseAddress", || {
        cloud
            .ec2
            .release_address()
            .allocation_id(&address.id)
            .send()
    })
    .await
}

/// Deletes a route table (`delete cluster`): its subnet associations first.
pub async fn delete_route_table(
    cloud: &Cloud,
    table: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    use super::deletion::attempt;
    let label = table.label();
    for association in &table.parts {
        attempt(&label, "DisassociateRouteTable", || {
            cloud
                .ec2
                .disassociate_route_table()
                .association_id(association)
                .send()
        })
        .await?;
    }
    attempt(&label, "DeleteRouteTable", || {
        cloud
            .ec2
            .delete_route_table()
            .route_table_id(&table.id)
            .send()
    })
    .await
}

/// Deletes an internet gateway (`delete cluster`): detached from its VPCs first.
pub async fn delete_internet_gateway(
    cloud: &Cloud,
    gateway: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    use super::deletion::attempt;
    let label = gateway.label();
    for vpc in &gateway.parts {
        attempt(&label, "DetachInternetGateway", || {
            cloud
                .ec2
                .detach_internet_gateway()
                .internet_gateway_id(&gateway.id)
                .vpc_id(vpc)
                .send()
        })
        .await?;
    }
    attempt(&label, "DeleteInternetGateway", || {
        cloud
            .ec2
            .delete_internet_gateway()
            .internet_gateway_id(&gateway.id)
            .send()
    })
    .await
}

/// What routes the subnets: NAT gateways, their addresses, route tables, the internet gateway.
impl super::task::Delete for RoutesTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::Kinds(&[
            super::deletion::ResourceKind::NatGateway,
            super::deletion::ResourceKind::ElasticIp,
            super::deletion::ResourceKind::RouteTable,
            super::deletion::ResourceKind::InternetGateway,
        ])
    }

    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(async move {
            match resource.kind {
                super::deletion::ResourceKind::NatGateway => {
                    delete_nat_gateway(deleting.cloud, resource).await
                }
                super::deletion::ResourceKind::ElasticIp => {
                    release_address(deleting.cloud, resource).await
                }
                super::deletion::ResourceKind::RouteTable => {
                    delete_route_table(deleting.cloud, resource).await
                }
                super::deletion::ResourceKind::InternetGateway => {
                    delete_internet_gateway(deleting.cloud, resource).await
                }
                _ => Err(super::task::not_deleted_here(resource)),
            }
        })
    }
}

/// The internet gateway, NAT gateways and route tables as a [`Task`].
pub struct RoutesTask;

impl Task for RoutesTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.routes
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.routes = actual;
    }

    async fn find(&self, finder: &Finder<'_>, wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
        find(finder.cloud, wanted.model, finder.known.vpc_id.as_deref()).await
    }

    fn learn(
        &self,
        wanted: Wanted<'_>,
        actual: &Actual,
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        learn(wanted.model, actual, known);
        Ok(())
    }

    fn diff(
        &self,
        wanted: Wanted<'_>,
        known: &Known,
        actual: &Actual,
    ) -> Result<Vec<Change>, UpdateError> {
        Ok(diff(wanted.model, known, actual))
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
        let vpc = known.vpc_id.clone().unwrap_or_default();
        for change in changes {
            match change {
                Change::CreateInternetGateway { name } => {
                    let tf = tf_name(name);
                    terraform.resource(
                        "aws_internet_gateway",
                        &tf,
                        TfResource::new()
                            .attr("tags", string_map(&tags_named(model, name)))
                            .attr("vpc_id", value(&vpc)),
                    )?;
                    known.internet_gateway_id = Some(reference("aws_internet_gateway", &tf, "id"));
                }
                Change::AttachInternetGateway { name, id, .. } => {
                    terraform.resource(
                        "aws_internet_gateway_attachment",
                        &tf_name(name),
                        TfResource::new()
                            .attr("internet_gateway_id", id.as_str())
                            .attr("vpc_id", value(&vpc)),
                    )?;
                }
                Change::CreateNatGateway {
                    zone,
                    name,
                    public_subnet,
                } => {
                    let tf = tf_name(name);
                    let tags = string_map(&tags_named(model, name));
                    terraform.resource(
                        "aws_eip",
                        &tf,
                        TfResource::new()
                            .attr("domain", "vpc")
                            .attr("tags", tags.clone()),
                    )?;
                    let subnet = known
                        .subnet_ids
                        .get(public_subnet)
                        .cloned()
                        .unwrap_or_default();
                    terraform.resource(
                        "aws_nat_gateway",
                        &tf,
                        TfResource::new()
                            .attr("allocation_id", value(&reference("aws_eip", &tf, "id")))
                            .attr("subnet_id", value(&subnet))
                            .attr("tags", tags),
                    )?;
                    known
                        .nat_gateway_ids
                        .insert(zone.clone(), reference("aws_nat_gateway", &tf, "id"));
                }
                Change::RouteTable(table) => {
                    render_route_table(model, table, known, &vpc, terraform)?
                }
            }
        }
        Ok(())
    }
}

/// A route table, its default route and its subnets' associations, as kops writes them.
fn render_route_table(
    model: &ClusterModel,
    table: &RouteTableChange,
    known: &Known,
    vpc: &str,
    terraform: &mut Terraform,
) -> Result<(), RenderError> {
    let tf = tf_name(&table.name);
    let table_id = match &table.id {
        Some(id) => id.clone(),
        None => {
            terraform.resource(
                "aws_route_table",
                &tf,
                TfResource::new()
                    .attr("tags", string_map(&tags_named(model, &table.name)))
                    .attr("vpc_id", value(vpc)),
            )?;
            if matches!(table.target, RouteTarget::InternetGateway(_)) {
                terraform.output(
                    "route_table_public_id",
                    value(&reference("aws_route_table", &tf, "id")),
                );
            }
            reference("aws_route_table", &tf, "id")
        }
    };
    if table.add_default_route {
        let gateway = table.target.resolve(known);
        let via = match table.target {
            RouteTarget::InternetGateway(_) => "gateway_id",
            RouteTarget::Nat { .. } => "nat_gateway_id",
        };
        terraform.resource(
            "aws_route",
            &tf_name(&format!("route-{}-0-0-0-0--0", table.name)),
            TfResource::new()
                .attr("destination_cidr_block", "0.0.0.0/0")
                .attr(via, value(&gateway))
                .attr("route_table_id", value(&table_id)),
        )?;
    }
    for name in &table.associate {
        let resource_name = model
            .subnets
            .iter()
            .find(|s| &s.name == name)
            .map_or_else(|| name.clone(), |s| s.resource_name.clone());
        let subnet = known.subnet_ids.get(name).cloned().unwrap_or_default();
        terraform.resource(
            "aws_route_table_association",
            &tf_name(&resource_name),
            TfResource::new()
                .attr("route_table_id", value(&table_id))
                .attr("subnet_id", value(&subnet)),
        )?;
    }
    Ok(())
}
