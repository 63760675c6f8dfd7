//! Each resource kind: find the actual state (by the cluster's tags, or by a deterministic name), compare it
//! with the model, and record the change in the plan; with `apply`, make it. Owned resources are found before
//! anything is created, so a re-run after a failure adopts what the failed run made instead of duplicating it.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::{self as ec2, Filter};
use ballast_state::node::{render_node_spec, BootConfig};
use ballast_state::spec::Role;
use ballast_state::store::{sha256_hex, Precondition};
use base64::Engine as _;
use futures_util::future::join_all;

use super::engine::{call, find, Run, UpdateError};
use super::model::{
    ownership_tag, GroupModel, IngressRule, Source, VpcModel, CLUSTER_TAG, GROUP_TAG,
    NODE_SPEC_HASH_TAG,
};
use super::plan::{Action, Change, KNOWN_AFTER_APPLY};

const STAGE_VPC: u8 = 0;
const STAGE_SUBNETS: u8 = 1;
const STAGE_SECURITY: u8 = 2;
const STAGE_LB: u8 = 3;
const STAGE_NODE_SPECS: u8 = 4;
const STAGE_LAUNCH_TEMPLATES: u8 = 5;
const STAGE_ASGS: u8 = 6;
/// The name of every role's inline policy.
const POLICY_NAME: &str = "ballast";

fn ec2_tags(tags: &BTreeMap<String, String>) -> Vec<ec2::Tag> {
    tags.iter()
        .map(|(k, v)| ec2::Tag::builder().key(k).value(v).build())
        .collect()
}

fn tag_map(tags: &[ec2::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
        .collect()
}

fn tag_spec(resource: ec2::ResourceType, tags: &BTreeMap<String, String>) -> ec2::TagSpecification {
    ec2::TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(ec2_tags(tags)))
        .build()
}

fn filter(name: &str, value: &str) -> Filter {
    Filter::builder().name(name).values(value).build()
}

fn unknown(value: Option<&String>) -> String {
    value
        .cloned()
        .unwrap_or_else(|| KNOWN_AFTER_APPLY.to_string())
}

impl Run<'_> {
    fn cluster(&self) -> &str {
        &self.model.cluster
    }

    fn owned_filter(&self) -> Filter {
        filter(&format!("tag:{}", ownership_tag(self.cluster())), "owned")
    }

    /// The cluster's launch templates, every page of them.
    async fn owned_launch_templates(&self) -> Result<Vec<ec2::LaunchTemplate>, UpdateError> {
        let ec2c = &self.cloud.ec2;
        let mut templates = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = call(
                &format!("launch templates of {}", self.cluster()),
                "DescribeLaunchTemplates",
                || {
                    // The largest page AWS allows; the emulator also never returns a NextToken past it.
                    ec2c.describe_launch_templates()
                        .filters(self.owned_filter())
                        .max_results(200)
                        .set_next_token(token.clone())
                        .send()
                },
            )
            .await?;
            templates.extend(page.launch_templates().iter().cloned());
            token = page.next_token().map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        Ok(templates)
    }

    fn tags_named(&self, name: &str) -> BTreeMap<String, String> {
        let mut tags = self.model.tags.clone();
        tags.insert("Name".to_string(), name.to_string());
        tags
    }

    // ---- network ---------------------------------------------------------------------------------------

    pub async fn network(&mut self) -> Result<(), UpdateError> {
        self.vpc().await?;
        self.subnets().await?;
        if self.model.internet_gateway {
            self.internet_gateway_and_routes().await?;
        }
        for zone in self.model.nat_zones() {
            self.nat_gateway(&zone).await?;
        }
        Ok(())
    }

    /// A private topology's egress in one zone: an Elastic IP, a NAT gateway in the zone's public subnet, and a
    /// route table sending the zone's private subnets' default route through it.
    async fn nat_gateway(&mut self, zone: &str) -> Result<(), UpdateError> {
        let ec2c = &self.cloud.ec2;
        let cluster = self.cluster().to_string();
        let name = format!("{zone}.{cluster}");
        let resource = format!("NatGateway {name}");
        let vpc = self.known.vpc_id.clone();
        let gateways = match &vpc {
            Some(vpc) => call(&resource, "DescribeNatGateways", || {
                ec2c.describe_nat_gateways()
                    .filter(filter("vpc-id", vpc))
                    .filter(
                        Filter::builder()
                            .name("state")
                            .values("pending")
                            .values("available")
                            .build(),
                    )
                    .send()
            })
            .await?
            .nat_gateways()
            .to_vec(),
            None => Vec::new(),
        };
        // Matched by tags here, not by a tag filter: the emulator ignores tag filters on NAT gateways.
        let ours = |tags: &[ec2::Tag]| {
            let tags = tag_map(tags);
            tags.get("Name") == Some(&name)
                && tags.get(&ownership_tag(&cluster)).map(String::as_str) == Some("owned")
        };
        let mut gateway_id = gateways
            .iter()
            .find(|g| ours(g.tags()))
            .and_then(|g| g.nat_gateway_id())
            .map(str::to_string);
        if gateway_id.is_none() {
            let public_subnet = self
                .model
                .subnets
                .iter()
                .find(|s| s.public && s.zone == zone)
                .map(|s| s.name.clone())
                .unwrap_or_default();
            self.plan.push(
                Change::new(STAGE_SUBNETS, "NatGateway", &name, Action::Create)
                    .field("subnet", None, &public_subnet)
                    .field("elasticIp", None, KNOWN_AFTER_APPLY),
            );
            if self.options.apply {
                let tags = self.tags_named(&name);
                // An address left by an interrupted run is reused rather than leaked.
                let addresses = call(&resource, "DescribeAddresses", || {
                    ec2c.describe_addresses()
                        .filters(self.owned_filter())
                        .send()
                })
                .await?;
                let unused = addresses
                    .addresses()
                    .iter()
                    .find(|a| ours(a.tags()) && a.association_id().is_none());
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
                let subnet_id = self
                    .known
                    .subnet_ids
                    .get(&public_subnet)
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
                gateway_id = created
                    .nat_gateway()
                    .and_then(|g| g.nat_gateway_id())
                    .map(str::to_string);
            }
        }

        let subnets: Vec<String> = self
            .model
            .subnets
            .iter()
            .filter(|s| !s.public && s.shared_id.is_none() && s.zone == zone)
            .map(|s| s.name.clone())
            .collect();
        self.default_route_table(
            &format!("private-{zone}.{cluster}"),
            RouteTarget::Nat(gateway_id),
            subnets,
        )
        .await
    }

    async fn vpc(&mut self) -> Result<(), UpdateError> {
        let ec2c = &self.cloud.ec2;
        let cluster = self.cluster().to_string();
        match self.model.vpc.clone() {
            VpcModel::Shared { id } => {
                let resource = format!("Vpc {id} (spec.networkID)");
                let found = find(
                    &resource,
                    "DescribeVpcs",
                    &["InvalidVpcID.NotFound"],
                    || ec2c.describe_vpcs().vpc_ids(&id).send(),
                )
                .await?;
                let vpc = found
                    .and_then(|o| o.vpcs().first().cloned())
                    .ok_or_else(|| UpdateError::Missing {
                        resource: resource.clone(),
                        message: format!(
                            "no such VPC in {}: check spec.networkID",
                            self.model.region
                        ),
                    })?;
                self.tag_shared(&resource, "Vpc", &id, tag_map(vpc.tags()))
                    .await?;
                self.known.vpc_id = Some(id);
            }
            VpcModel::Owned { cidr } => {
                let resource = format!("Vpc {cluster}");
                let out = call(&resource, "DescribeVpcs", || {
                    ec2c.describe_vpcs().filters(self.owned_filter()).send()
                })
                .await?;
                let vpcs = out.vpcs();
                if vpcs.len() > 1 {
                    return Err(UpdateError::Duplicate {
                        resource,
                        count: vpcs.len(),
                        ids: vpcs
                            .iter()
                            .filter_map(|v| v.vpc_id())
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
                if let Some(vpc) = vpcs.first() {
                    let actual = vpc.cidr_block().unwrap_or("");
                    if actual != cidr {
                        return Err(UpdateError::Immutable {
                            resource,
                            field: "spec.networkCIDR",
                            from: actual.to_string(),
                            to: cidr,
                        });
                    }
                    self.known.vpc_id = vpc.vpc_id().map(str::to_string);
                    return Ok(());
                }
                self.plan.push(
                    Change::new(STAGE_VPC, "Vpc", &cluster, Action::Create)
                        .field("cidr", None, &cidr),
                );
                if self.options.apply {
                    let tags = self.tags_named(&cluster);
                    let created = call(&resource, "CreateVpc", || {
                        ec2c.create_vpc()
                            .cidr_block(&cidr)
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
                    self.known.vpc_id = Some(id);
                }
            }
        }
        Ok(())
    }

    /// Shared resources get `kubernetes.io/cluster/NAME=shared`, once; nothing else about them changes.
    async fn tag_shared(
        &mut self,
        resource: &str,
        kind: &'static str,
        id: &str,
        tags: BTreeMap<String, String>,
    ) -> Result<(), UpdateError> {
        let key = ownership_tag(self.cluster());
        if tags.get(&key).map(String::as_str) == Some("shared") {
            return Ok(());
        }
        if tags.get(&key).map(String::as_str) == Some("owned") {
            return Err(UpdateError::Missing {
                resource: resource.to_string(),
                message: "is tagged as owned by this cluster, but the spec names it as shared: Ballast would \
                          delete it with the cluster; retag it or remove it from the spec"
                    .to_string(),
            });
        }
        self.plan
            .push(Change::new(STAGE_VPC, kind, id, Action::TagShared).field(&key, None, "shared"));
        if self.options.apply {
            let ec2c = &self.cloud.ec2;
            call(resource, "CreateTags", || {
                ec2c.create_tags()
                    .resources(id)
                    .tags(ec2::Tag::builder().key(&key).value("shared").build())
                    .send()
            })
            .await?;
        }
        Ok(())
    }

    async fn subnets(&mut self) -> Result<(), UpdateError> {
        let ec2c = &self.cloud.ec2;
        let cluster = self.cluster().to_string();
        let out = call(&format!("subnets of {cluster}"), "DescribeSubnets", || {
            ec2c.describe_subnets().filters(self.owned_filter()).send()
        })
        .await?;
        let mut owned: BTreeMap<String, ec2::Subnet> = BTreeMap::new();
        for subnet in out.subnets() {
            if let Some(name) = tag_map(subnet.tags()).get("Name") {
                owned.insert(name.clone(), subnet.clone());
            }
        }
        let shared_ids: Vec<String> = self
            .model
            .subnets
            .iter()
            .filter_map(|s| s.shared_id.clone())
            .collect();
        let mut shared: BTreeMap<String, ec2::Subnet> = BTreeMap::new();
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
                shared.insert(
                    subnet.subnet_id().unwrap_or_default().to_string(),
                    subnet.clone(),
                );
            }
        }
        for subnet in self.model.subnets.clone() {
            let resource = format!("Subnet {}", subnet.resource_name);
            if let Some(id) = &subnet.shared_id {
                let actual = shared.get(id).ok_or_else(|| UpdateError::Missing {
                    resource: resource.clone(),
                    message: format!("shared subnet {id} does not exist: check spec.subnets[].id"),
                })?;
                if actual.availability_zone() != Some(subnet.zone.as_str()) {
                    return Err(UpdateError::Missing {
                        resource,
                        message: format!(
                            "shared subnet {id} is in {}, but the spec says {}: fix spec.subnets[].zone",
                            actual.availability_zone().unwrap_or("?"),
                            subnet.zone
                        ),
                    });
                }
                self.tag_shared(&resource, "Subnet", id, tag_map(actual.tags()))
                    .await?;
                self.known
                    .subnet_ids
                    .insert(subnet.name.clone(), id.clone());
                continue;
            }
            let cidr = subnet.cidr.clone().unwrap_or_default();
            if let Some(actual) = owned.get(&subnet.resource_name) {
                for (field, from, to) in [
                    ("cidr", actual.cidr_block().unwrap_or(""), cidr.as_str()),
                    (
                        "zone",
                        actual.availability_zone().unwrap_or(""),
                        subnet.zone.as_str(),
                    ),
                ] {
                    if from != to {
                        return Err(UpdateError::Immutable {
                            resource,
                            field: if field == "cidr" {
                                "spec.subnets[].cidr"
                            } else {
                                "spec.subnets[].zone"
                            },
                            from: from.to_string(),
                            to: to.to_string(),
                        });
                    }
                }
                self.known.subnet_ids.insert(
                    subnet.name.clone(),
                    actual.subnet_id().unwrap_or_default().to_string(),
                );
                continue;
            }
            self.plan.push(
                Change::new(
                    STAGE_SUBNETS,
                    "Subnet",
                    &subnet.resource_name,
                    Action::Create,
                )
                .field("zone", None, &subnet.zone)
                .field("cidr", None, &cidr)
                .field(
                    "type",
                    None,
                    if subnet.public { "Public" } else { "Private" },
                ),
            );
            if self.options.apply {
                let vpc_id = self.known.vpc_id.clone().unwrap_or_default();
                let mut tags = self.tags_named(&subnet.resource_name);
                tags.insert(
                    if subnet.public {
                        "kubernetes.io/role/elb"
                    } else {
                        "kubernetes.io/role/internal-elb"
                    }
                    .into(),
                    "1".into(),
                );
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
                self.known.subnet_ids.insert(subnet.name.clone(), id);
            }
        }
        Ok(())
    }

    async fn internet_gateway_and_routes(&mut self) -> Result<(), UpdateError> {
        let ec2c = &self.cloud.ec2;
        let cluster = self.cluster().to_string();
        let resource = format!("InternetGateway {cluster}");
        let out = call(&resource, "DescribeInternetGateways", || {
            ec2c.describe_internet_gateways()
                .filters(self.owned_filter())
                .send()
        })
        .await?;
        let vpc_id = self.known.vpc_id.clone();
        let mut gateway_id = None;
        match out.internet_gateways().first() {
            Some(gateway) => {
                let id = gateway
                    .internet_gateway_id()
                    .unwrap_or_default()
                    .to_string();
                let attached = gateway
                    .attachments()
                    .iter()
                    .any(|a| a.vpc_id() == vpc_id.as_deref());
                if !attached {
                    self.plan.push(
                        Change::new(STAGE_SUBNETS, "InternetGateway", &cluster, Action::Update)
                            .field("attachedTo", None, unknown(vpc_id.as_ref())),
                    );
                    if self.options.apply {
                        call(&resource, "AttachInternetGateway", || {
                            ec2c.attach_internet_gateway()
                                .internet_gateway_id(&id)
                                .vpc_id(vpc_id.clone().unwrap_or_default())
                                .send()
                        })
                        .await?;
                    }
                }
                gateway_id = Some(id);
            }
            None => {
                self.plan.push(Change::new(
                    STAGE_SUBNETS,
                    "InternetGateway",
                    &cluster,
                    Action::Create,
                ));
                if self.options.apply {
                    let tags = self.tags_named(&cluster);
                    let created = call(&resource, "CreateInternetGateway", || {
                        ec2c.create_internet_gateway()
                            .tag_specifications(tag_spec(ec2::ResourceType::InternetGateway, &tags))
                            .send()
                    })
                    .await?;
                    let id = created
                        .internet_gateway()
                        .and_then(|g| g.internet_gateway_id())
                        .unwrap_or_default()
                        .to_string();
                    call(&resource, "AttachInternetGateway", || {
                        ec2c.attach_internet_gateway()
                            .internet_gateway_id(&id)
                            .vpc_id(vpc_id.clone().unwrap_or_default())
                            .send()
                    })
                    .await?;
                    gateway_id = Some(id);
                }
            }
        }

        // The public route table: a default route to the gateway, associated with every owned public subnet.
        let subnets: Vec<String> = self
            .model
            .subnets
            .iter()
            .filter(|s| s.public && s.shared_id.is_none())
            .map(|s| s.name.clone())
            .collect();
        self.default_route_table(
            &format!("public.{cluster}"),
            RouteTarget::InternetGateway(gateway_id),
            subnets,
        )
        .await
    }

    /// A route table of the cluster named `table_name`: its default route to `target`, associated with
    /// `subnets` (names of the spec's subnets).
    async fn default_route_table(
        &mut self,
        table_name: &str,
        target: RouteTarget,
        subnets: Vec<String>,
    ) -> Result<(), UpdateError> {
        let ec2c = &self.cloud.ec2;
        let resource = format!("RouteTable {table_name}");
        let tables = call(&resource, "DescribeRouteTables", || {
            ec2c.describe_route_tables()
                .filters(self.owned_filter())
                .filters(filter("tag:Name", table_name))
                .send()
        })
        .await?;
        let table = tables.route_tables().first();
        let has_route = table.is_some_and(|t| {
            t.routes()
                .iter()
                .any(|r| r.destination_cidr_block() == Some("0.0.0.0/0") && target.is_route(r))
        });
        let associated: BTreeSet<String> = table
            .map(|t| {
                t.associations()
                    .iter()
                    .filter_map(|a| a.subnet_id().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let missing: Vec<String> = subnets
            .into_iter()
            .filter(|n| {
                self.known
                    .subnet_ids
                    .get(n)
                    .is_none_or(|id| !associated.contains(id))
            })
            .collect();
        if table.is_some() && has_route && missing.is_empty() {
            return Ok(());
        }
        let action = if table.is_some() {
            Action::Update
        } else {
            Action::Create
        };
        let mut change = Change::new(STAGE_SUBNETS, "RouteTable", table_name, action);
        if !has_route {
            change = change.field(
                "routes",
                None,
                format!("0.0.0.0/0 -> {}", target.describe()),
            );
        }
        if !missing.is_empty() {
            change = change.field("associations", None, format!("+ {}", missing.join(", ")));
        }
        self.plan.push(change);
        if !self.options.apply {
            return Ok(());
        }
        let table_id = match table.and_then(|t| t.route_table_id()) {
            Some(id) => id.to_string(),
            None => {
                let tags = self.tags_named(table_name);
                let vpc = self.known.vpc_id.clone().unwrap_or_default();
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
        if !has_route {
            call(&resource, "CreateRoute", || {
                let request = ec2c
                    .create_route()
                    .route_table_id(&table_id)
                    .destination_cidr_block("0.0.0.0/0");
                match &target {
                    RouteTarget::InternetGateway(id) => {
                        request.gateway_id(id.clone().unwrap_or_default())
                    }
                    RouteTarget::Nat(id) => request.nat_gateway_id(id.clone().unwrap_or_default()),
                }
                .send()
            })
            .await?;
        }
        for name in missing {
            let subnet_id = self
                .known
                .subnet_ids
                .get(&name)
                .cloned()
                .unwrap_or_default();
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

    // ---- security groups and IAM -------------------------------------------------------------------------

    pub async fn security_and_iam(&mut self) -> Result<(), UpdateError> {
        self.security_groups().await?;
        self.iam().await
    }

    async fn security_groups(&mut self) -> Result<(), UpdateError> {
        let ec2c = &self.cloud.ec2;
        let out = match &self.known.vpc_id {
            Some(vpc) => Some(
                call(
                    &format!("security groups of {}", self.cluster()),
                    "DescribeSecurityGroups",
                    || {
                        ec2c.describe_security_groups()
                            .filters(self.owned_filter())
                            .filters(filter("vpc-id", vpc))
                            .send()
                    },
                )
                .await?,
            ),
            None => None,
        };
        let mut actual: BTreeMap<String, ec2::SecurityGroup> = BTreeMap::new();
        for group in out.iter().flat_map(|o| o.security_groups()) {
            actual.insert(
                group.group_name().unwrap_or_default().to_string(),
                group.clone(),
            );
        }
        // Create the groups first: their rules refer to each other.
        for model in self.model.security_groups.clone() {
            if let Some(group) = actual.get(&model.name) {
                self.known
                    .security_group_ids
                    .insert(model.role, group.group_id().unwrap_or_default().to_string());
                continue;
            }
            self.plan.push(
                Change::new(STAGE_SECURITY, "SecurityGroup", &model.name, Action::Create).field(
                    "description",
                    None,
                    &model.description,
                ),
            );
            if self.options.apply {
                let resource = format!("SecurityGroup {}", model.name);
                let tags = self.tags_named(&model.name);
                let vpc = self.known.vpc_id.clone().unwrap_or_default();
                let created = call(&resource, "CreateSecurityGroup", || {
                    ec2c.create_security_group()
                        .group_name(&model.name)
                        .description(&model.description)
                        .vpc_id(&vpc)
                        .tag_specifications(tag_spec(ec2::ResourceType::SecurityGroup, &tags))
                        .send()
                })
                .await?;
                self.known.security_group_ids.insert(
                    model.role,
                    created.group_id().unwrap_or_default().to_string(),
                );
            }
        }
        for model in self.model.security_groups.clone() {
            let have: BTreeSet<String> = actual
                .get(&model.name)
                .map(|g| g.ip_permissions().iter().flat_map(rule_keys).collect())
                .unwrap_or_default();
            let want: BTreeMap<String, &IngressRule> =
                model.rules.iter().map(|r| (self.rule_key(r), r)).collect();
            let add: Vec<(&String, &&IngressRule)> =
                want.iter().filter(|(k, _)| !have.contains(*k)).collect();
            let remove: Vec<&String> = have.iter().filter(|k| !want.contains_key(*k)).collect();
            if add.is_empty() && remove.is_empty() {
                continue;
            }
            let action = if actual.contains_key(&model.name) {
                Action::Update
            } else {
                Action::Create
            };
            let mut change = Change::new(STAGE_SECURITY, "SecurityGroupRules", &model.name, action);
            for (key, _) in &add {
                change = change.field("ingress", None, format!("+ {key}"));
            }
            for key in &remove {
                change = change.field("ingress", None, format!("- {key}"));
            }
            self.plan.push(change);
            if !self.options.apply {
                continue;
            }
            let resource = format!("SecurityGroup {}", model.name);
            let group_id = self
                .known
                .security_group_ids
                .get(&model.role)
                .cloned()
                .unwrap_or_default();
            let permissions: Vec<ec2::IpPermission> =
                add.iter().map(|(_, r)| self.ip_permission(r)).collect();
            if !permissions.is_empty() {
                call(&resource, "AuthorizeSecurityGroupIngress", || {
                    ec2c.authorize_security_group_ingress()
                        .group_id(&group_id)
                        .set_ip_permissions(Some(permissions.clone()))
                        .send()
                })
                .await?;
            }
            if let Some(group) = actual.get(&model.name) {
                let stale: Vec<ec2::IpPermission> = group
                    .ip_permissions()
                    .iter()
                    .flat_map(split_permission)
                    .filter(|p| rule_keys(p).iter().all(|k| remove.contains(&k)))
                    .collect();
                if !stale.is_empty() {
                    call(&resource, "RevokeSecurityGroupIngress", || {
                        ec2c.revoke_security_group_ingress()
                            .group_id(&group_id)
                            .set_ip_permissions(Some(stale.clone()))
                            .send()
                    })
                    .await?;
                }
            }
        }
        Ok(())
    }

    /// `tcp 443-443 from 0.0.0.0/0`, `-1 all from sg-123`: how rules are compared and shown.
    fn rule_key(&self, rule: &IngressRule) -> String {
        let source = match &rule.source {
            Source::Cidr(cidr) => cidr.clone(),
            Source::Group(role) => unknown(self.known.security_group_ids.get(role)),
        };
        rule_key(&rule.protocol, rule.from_port, rule.to_port, &source)
    }

    fn ip_permission(&self, rule: &IngressRule) -> ec2::IpPermission {
        let mut permission = ec2::IpPermission::builder().ip_protocol(&rule.protocol);
        if rule.protocol != "-1" {
            permission = permission.from_port(rule.from_port).to_port(rule.to_port);
        }
        match &rule.source {
            Source::Cidr(cidr) if cidr.contains(':') => {
                permission =
                    permission.ipv6_ranges(ec2::Ipv6Range::builder().cidr_ipv6(cidr).build())
            }
            Source::Cidr(cidr) => {
                permission = permission.ip_ranges(ec2::IpRange::builder().cidr_ip(cidr).build())
            }
            Source::Group(role) => {
                let id = self
                    .known
                    .security_group_ids
                    .get(role)
                    .cloned()
                    .unwrap_or_default();
                permission = permission
                    .user_id_group_pairs(ec2::UserIdGroupPair::builder().group_id(id).build())
            }
        }
        permission.build()
    }

    async fn iam(&mut self) -> Result<(), UpdateError> {
        let iam = &self.cloud.iam;
        for role in self.model.roles.clone() {
            let resource = format!("IamRole {}", role.name);
            let actual = find(&resource, "GetRole", &["NoSuchEntity"], || {
                iam.get_role().role_name(&role.name).send()
            })
            .await?;
            match actual.and_then(|o| o.role().cloned()) {
                None => {
                    self.plan.push(
                        Change::new(STAGE_SECURITY, "IamRole", &role.name, Action::Create).field(
                            "trust",
                            None,
                            "ec2.amazonaws.com",
                        ),
                    );
                    if self.options.apply {
                        let mut tags: Vec<aws_sdk_iam::types::Tag> = Vec::new();
                        for (k, v) in &self.model.tags {
                            if let Ok(tag) =
                                aws_sdk_iam::types::Tag::builder().key(k).value(v).build()
                            {
                                tags.push(tag);
                            }
                        }
                        call(&resource, "CreateRole", || {
                            iam.create_role()
                                .role_name(&role.name)
                                .assume_role_policy_document(&role.assume_role_policy)
                                .set_permissions_boundary(role.permissions_boundary.clone())
                                .set_tags(Some(tags.clone()))
                                .send()
                        })
                        .await?;
                    }
                }
                Some(actual) => {
                    let trust = actual.assume_role_policy_document().map(decode_policy);
                    if trust != Some(parse_policy(&role.assume_role_policy)) {
                        self.plan.push(
                            Change::new(STAGE_SECURITY, "IamRole", &role.name, Action::Update)
                                .field("trust", None, "ec2.amazonaws.com"),
                        );
                        if self.options.apply {
                            call(&resource, "UpdateAssumeRolePolicy", || {
                                iam.update_assume_role_policy()
                                    .role_name(&role.name)
                                    .policy_document(&role.assume_role_policy)
                                    .send()
                            })
                            .await?;
                        }
                    }
                }
            }
            let policy = find(&resource, "GetRolePolicy", &["NoSuchEntity"], || {
                iam.get_role_policy()
                    .role_name(&role.name)
                    .policy_name(POLICY_NAME)
                    .send()
            })
            .await?;
            let current = policy.map(|p| decode_policy(p.policy_document()));
            if current.as_ref() != Some(&parse_policy(&role.policy)) {
                let action = if current.is_some() {
                    Action::Update
                } else {
                    Action::Create
                };
                self.plan.push(
                    Change::new(STAGE_SECURITY, "IamRolePolicy", &role.name, action).field(
                        "policy",
                        None,
                        format!("sha256 {}", &sha256_hex(role.policy.as_bytes())[..12]),
                    ),
                );
                if self.options.apply {
                    call(&resource, "PutRolePolicy", || {
                        iam.put_role_policy()
                            .role_name(&role.name)
                            .policy_name(POLICY_NAME)
                            .policy_document(&role.policy)
                            .send()
                    })
                    .await?;
                }
            }
            let resource = format!("InstanceProfile {}", role.name);
            let profile = find(&resource, "GetInstanceProfile", &["NoSuchEntity"], || {
                iam.get_instance_profile()
                    .instance_profile_name(&role.name)
                    .send()
            })
            .await?
            .and_then(|o| o.instance_profile().cloned());
            let has_role = profile
                .as_ref()
                .is_some_and(|p| p.roles().iter().any(|r| r.role_name() == role.name));
            if profile.is_none() {
                self.plan.push(
                    Change::new(
                        STAGE_SECURITY,
                        "InstanceProfile",
                        &role.name,
                        Action::Create,
                    )
                    .field("role", None, &role.name),
                );
            } else if !has_role {
                self.plan.push(
                    Change::new(
                        STAGE_SECURITY,
                        "InstanceProfile",
                        &role.name,
                        Action::Update,
                    )
                    .field("role", None, &role.name),
                );
            }
            let mut arn = profile.as_ref().map(|p| p.arn().to_string());
            if self.options.apply {
                if profile.is_none() {
                    let created = call(&resource, "CreateInstanceProfile", || {
                        iam.create_instance_profile()
                            .instance_profile_name(&role.name)
                            .send()
                    })
                    .await?;
                    arn = created.instance_profile().map(|p| p.arn().to_string());
                }
                if !has_role {
                    call(&resource, "AddRoleToInstanceProfile", || {
                        iam.add_role_to_instance_profile()
                            .instance_profile_name(&role.name)
                            .role_name(&role.name)
                            .send()
                    })
                    .await?;
                }
            }
            if let Some(arn) = arn {
                self.known.profile_arns.insert(role.role, arn);
            }
        }
        Ok(())
    }

    // ---- the API load balancer -----------------------------------------------------------------------------

    pub async fn load_balancer(&mut self) -> Result<(), UpdateError> {
        use aws_sdk_elasticloadbalancingv2::types as elb;
        let client = &self.cloud.elb;
        let lb = self.model.load_balancer.clone();
        let resource = format!("LoadBalancer {}", lb.name);
        let found = find(
            &resource,
            "DescribeLoadBalancers",
            &["LoadBalancerNotFound"],
            || client.describe_load_balancers().names(&lb.name).send(),
        )
        .await?
        .and_then(|o| o.load_balancers().first().cloned());
        let tags: Vec<elb::Tag> = self
            .tags_named(&lb.name)
            .iter()
            .map(|(k, v)| elb::Tag::builder().key(k).value(v).build())
            .collect();
        let scheme = if lb.internal {
            elb::LoadBalancerSchemeEnum::Internal
        } else {
            elb::LoadBalancerSchemeEnum::InternetFacing
        };
        let mut lb_arn = None;
        match found {
            Some(actual) => {
                if actual.scheme() != Some(&scheme) {
                    return Err(UpdateError::Immutable {
                        resource,
                        field: "spec.api.loadBalancer.type",
                        from: actual
                            .scheme()
                            .map(|s| s.as_str().to_string())
                            .unwrap_or_default(),
                        to: scheme.as_str().to_string(),
                    });
                }
                lb_arn = actual.load_balancer_arn().map(str::to_string);
                self.known.load_balancer_dns = actual.dns_name().map(str::to_string);
            }
            None => {
                self.plan.push(
                    Change::new(STAGE_LB, "LoadBalancer", &lb.name, Action::Create)
                        .field("type", None, "network")
                        .field("scheme", None, scheme.as_str())
                        .field("subnets", None, lb.subnets.join(", ")),
                );
                if self.options.apply {
                    let subnet_ids: Vec<String> = lb
                        .subnets
                        .iter()
                        .filter_map(|s| self.known.subnet_ids.get(s).cloned())
                        .collect();
                    let created = call(&resource, "CreateLoadBalancer", || {
                        client
                            .create_load_balancer()
                            .name(&lb.name)
                            .r#type(elb::LoadBalancerTypeEnum::Network)
                            .scheme(scheme.clone())
                            .set_subnets(Some(subnet_ids.clone()))
                            .set_tags(Some(tags.clone()))
                            .send()
                    })
                    .await?;
                    let made = created.load_balancers().first();
                    lb_arn = made.and_then(|l| l.load_balancer_arn()).map(str::to_string);
                    self.known.load_balancer_dns =
                        made.and_then(|l| l.dns_name()).map(str::to_string);
                }
            }
        }

        let resource = format!("TargetGroup {}", lb.target_group_name);
        let found = find(
            &resource,
            "DescribeTargetGroups",
            &["TargetGroupNotFound"],
            || {
                client
                    .describe_target_groups()
                    .names(&lb.target_group_name)
                    .send()
            },
        )
        .await?
        .and_then(|o| o.target_groups().first().cloned());
        match found {
            Some(tg) => self.known.target_group_arn = tg.target_group_arn().map(str::to_string),
            None => {
                self.plan.push(
                    Change::new(
                        STAGE_LB,
                        "TargetGroup",
                        &lb.target_group_name,
                        Action::Create,
                    )
                    .field("port", None, "TCP 443"),
                );
                if self.options.apply {
                    let vpc = self.known.vpc_id.clone().unwrap_or_default();
                    let created = call(&resource, "CreateTargetGroup", || {
                        client
                            .create_target_group()
                            .name(&lb.target_group_name)
                            .protocol(elb::ProtocolEnum::Tcp)
                            .port(443)
                            .vpc_id(&vpc)
                            .target_type(elb::TargetTypeEnum::Instance)
                            .health_check_protocol(elb::ProtocolEnum::Tcp)
                            .set_tags(Some(tags.clone()))
                            .send()
                    })
                    .await?;
                    self.known.target_group_arn = created
                        .target_groups()
                        .first()
                        .and_then(|t| t.target_group_arn())
                        .map(str::to_string);
                }
            }
        }

        let resource = format!("Listener {} TCP 443", lb.name);
        let listeners = match &lb_arn {
            Some(arn) => call(&resource, "DescribeListeners", || {
                client.describe_listeners().load_balancer_arn(arn).send()
            })
            .await?
            .listeners()
            .to_vec(),
            None => Vec::new(),
        };
        let tg = self.known.target_group_arn.clone();
        let listener = listeners.iter().find(|l| l.port() == Some(443));
        let forwards = listener.is_some_and(|l| {
            l.default_actions()
                .iter()
                .any(|a| a.target_group_arn().is_some() && a.target_group_arn() == tg.as_deref())
        });
        if !forwards {
            let action = if listener.is_some() {
                Action::Update
            } else {
                Action::Create
            };
            self.plan.push(
                Change::new(STAGE_LB, "Listener", format!("{} TCP 443", lb.name), action).field(
                    "forward",
                    None,
                    &lb.target_group_name,
                ),
            );
            if self.options.apply {
                let forward = elb::Action::builder()
                    .r#type(elb::ActionTypeEnum::Forward)
                    .target_group_arn(tg.clone().unwrap_or_default())
                    .build();
                match listener.and_then(|l| l.listener_arn()) {
                    Some(listener_arn) => {
                        call(&resource, "ModifyListener", || {
                            client
                                .modify_listener()
                                .listener_arn(listener_arn)
                                .default_actions(forward.clone())
                                .send()
                        })
                        .await?;
                    }
                    None => {
                        call(&resource, "CreateListener", || {
                            client
                                .create_listener()
                                .load_balancer_arn(lb_arn.clone().unwrap_or_default())
                                .protocol(elb::ProtocolEnum::Tcp)
                                .port(443)
                                .default_actions(forward.clone())
                                .send()
                        })
                        .await?;
                    }
                }
            }
        }
        Ok(())
    }

    // ---- node specs ---------------------------------------------------------------------------------------

    pub async fn node_specs(&mut self) -> Result<(), UpdateError> {
        let Some(dns) = self.known.load_balancer_dns.clone() else {
            // Plan of a new cluster: the specs name the load balancer, which does not exist yet.
            for group in &self.model.groups {
                self.plan.push(
                    Change::new(STAGE_NODE_SPECS, "NodeSpec", &group.name, Action::Create).field(
                        "sha256",
                        None,
                        KNOWN_AFTER_APPLY,
                    ),
                );
            }
            return Ok(());
        };
        let state_url = self.model.state.url();
        for group in self.model.groups.clone() {
            let rendered = render_node_spec(self.completed, &group.name, &state_url, &dns)
                .map_err(|e| UpdateError::Render(e.to_string()))?;
            let key =
                ballast_state::layout::ClusterPaths::new(self.cluster()).node_spec(&group.name);
            let current = self.store.get(&key).await?;
            let current_hash = current.as_ref().map(|o| sha256_hex(&o.data));
            if current_hash.as_deref() != Some(rendered.sha256.as_str()) {
                let action = if current.is_some() {
                    Action::Update
                } else {
                    Action::Create
                };
                self.plan.push(
                    Change::new(STAGE_NODE_SPECS, "NodeSpec", &group.name, action).field(
                        "sha256",
                        current_hash.map(|h| h[..12].to_string()),
                        &rendered.sha256[..12],
                    ),
                );
                if self.options.apply {
                    let precondition = match current {
                        Some(object) => Precondition::MustMatch(object.version),
                        None => Precondition::MustNotExist,
                    };
                    self.store
                        .put(&key, rendered.yaml.as_bytes(), &precondition)
                        .await?;
                }
            }
            self.known
                .node_spec_hashes
                .insert(group.name.clone(), rendered.sha256.clone());
        }
        Ok(())
    }

    // ---- launch templates ---------------------------------------------------------------------------------

    pub async fn launch_templates(&mut self) -> Result<(), UpdateError> {
        let templates = self.owned_launch_templates().await?;
        let actual: BTreeMap<String, ec2::LaunchTemplate> = templates
            .iter()
            .map(|t| {
                (
                    t.launch_template_name().unwrap_or_default().to_string(),
                    t.clone(),
                )
            })
            .collect();
        let images = self.resolve_images().await?;
        let groups = self.model.groups.clone();
        let specs: Vec<LaunchSpec> = groups
            .iter()
            .map(|g| self.launch_spec(g, &images))
            .collect();
        let run = &*self;
        let results = join_all(groups.iter().zip(specs).map(|(group, spec)| {
            run.launch_template(group, spec, actual.get(&group.resource_name))
        }))
        .await;
        for (group, result) in groups.iter().zip(results) {
            let (changes, id) = result?;
            for change in changes {
                self.plan.push(change);
            }
            if let Some(id) = id {
                self.known
                    .launch_template_ids
                    .insert(group.name.clone(), id);
            }
        }
        Ok(())
    }

    /// AMI names resolve to the newest image of that name the account can use.
    async fn resolve_images(&self) -> Result<BTreeMap<String, String>, UpdateError> {
        let ec2c = &self.cloud.ec2;
        let mut images = BTreeMap::new();
        let names: BTreeSet<&String> = self
            .model
            .groups
            .iter()
            .map(|g| &g.image)
            .filter(|i| !i.starts_with("ami-"))
            .collect();
        for name in names {
            let resource = format!("image {name:?}");
            let out = call(&resource, "DescribeImages", || {
                ec2c.describe_images().filters(filter("name", name)).send()
            })
            .await?;
            let newest = out
                .images()
                .iter()
                .max_by(|a, b| a.creation_date().cmp(&b.creation_date()))
                .and_then(|i| i.image_id());
            match newest {
                Some(id) => {
                    images.insert(name.clone(), id.to_string());
                }
                None => {
                    let groups: Vec<&str> = self
                        .model
                        .groups
                        .iter()
                        .filter(|g| &g.image == name)
                        .map(|g| g.name.as_str())
                        .collect();
                    return Err(UpdateError::Missing {
                        resource: format!("InstanceGroup/{}: spec.image", groups.join(", InstanceGroup/")),
                        message: format!(
                            "no AMI named {name:?} in {}: bake one (packer/README.md) or set spec.image to an AMI id",
                            self.model.region
                        ),
                    });
                }
            }
        }
        Ok(images)
    }

    fn launch_spec(&self, group: &GroupModel, images: &BTreeMap<String, String>) -> LaunchSpec {
        let image = if group.image.starts_with("ami-") {
            group.image.clone()
        } else {
            images.get(&group.image).cloned().unwrap_or_default()
        };
        let node_spec_hash = self.known.node_spec_hashes.get(&group.name).cloned();
        let user_data = node_spec_hash.as_ref().and_then(|hash| {
            BootConfig::for_group(
                self.cluster(),
                &group.name,
                group.role,
                &self.model.state.url(),
                hash,
            )
            .to_user_data()
            .ok()
        });
        let profile = group
            .shared_profile
            .clone()
            .or_else(|| self.known.profile_arns.get(&group.role).cloned());
        let mut instance_tags = group.tags.clone();
        if let Some(hash) = &node_spec_hash {
            instance_tags.insert(NODE_SPEC_HASH_TAG.to_string(), hash.clone());
        }
        LaunchSpec {
            image_id: image,
            instance_type: group.machine_type.clone(),
            security_group: self.known.security_group_ids.get(&group.role).cloned(),
            instance_profile: profile,
            http_tokens: if group.http_tokens_required {
                "required"
            } else {
                "optional"
            }
            .to_string(),
            hop_limit: group.hop_limit,
            volume_size: group.root_volume_size,
            volume_type: group.root_volume_type.clone(),
            encrypted: group.root_volume_encrypted,
            kms_key: group.root_volume_kms_key.clone(),
            user_data,
            node_spec_hash,
            instance_tags,
        }
    }

    /// One group's launch template: its changes and its id.
    async fn launch_template(
        &self,
        group: &GroupModel,
        spec: LaunchSpec,
        actual: Option<&ec2::LaunchTemplate>,
    ) -> Result<(Vec<Change>, Option<String>), UpdateError> {
        let ec2c = &self.cloud.ec2;
        let resource = format!("LaunchTemplate {}", group.resource_name);
        let id = actual
            .and_then(|t| t.launch_template_id())
            .map(str::to_string);
        // Compared with the default version itself (not a tag of ours), so a change made by hand is seen too.
        let previous = match &id {
            Some(id) => self.launch_template_fields(&resource, id).await?,
            None => BTreeMap::new(),
        };
        let mut change = Change::new(
            STAGE_LAUNCH_TEMPLATES,
            "LaunchTemplate",
            &group.resource_name,
            if actual.is_some() {
                Action::Update
            } else {
                Action::Create
            },
        );
        for (field, value) in spec.fields() {
            let from = previous.get(field).cloned();
            if from.as_deref() != Some(value.as_str()) {
                change = change.field(field, if actual.is_some() { from } else { None }, value);
            }
        }
        if change.fields.is_empty() && spec.is_complete() {
            return Ok((Vec::new(), id));
        }
        if !self.options.apply {
            return Ok((vec![change], id));
        }
        let mut lt_tags = self.tags_named(&group.resource_name);
        lt_tags.insert(GROUP_TAG.to_string(), group.name.clone());
        let data = spec.request_data();
        let id = match id {
            None => {
                let created = call(&resource, "CreateLaunchTemplate", || {
                    ec2c.create_launch_template()
                        .launch_template_name(&group.resource_name)
                        .launch_template_data(data.clone())
                        .tag_specifications(tag_spec(ec2::ResourceType::LaunchTemplate, &lt_tags))
                        .send()
                })
                .await?;
                created
                    .launch_template()
                    .and_then(|t| t.launch_template_id())
                    .unwrap_or_default()
                    .to_string()
            }
            Some(id) => {
                let version = call(&resource, "CreateLaunchTemplateVersion", || {
                    ec2c.create_launch_template_version()
                        .launch_template_id(&id)
                        .launch_template_data(data.clone())
                        .send()
                })
                .await?;
                let number = version
                    .launch_template_version()
                    .and_then(|v| v.version_number())
                    .unwrap_or_default();
                call(&resource, "ModifyLaunchTemplate", || {
                    ec2c.modify_launch_template()
                        .launch_template_id(&id)
                        .default_version(number.to_string())
                        .send()
                })
                .await?;
                id
            }
        };
        Ok((vec![change], Some(id)))
    }

    /// The fields of a launch template's default version, as [`LaunchSpec::fields`] names them (for the plan).
    async fn launch_template_fields(
        &self,
        resource: &str,
        id: &str,
    ) -> Result<BTreeMap<&'static str, String>, UpdateError> {
        let ec2c = &self.cloud.ec2;
        let out = call(resource, "DescribeLaunchTemplateVersions", || {
            ec2c.describe_launch_template_versions()
                .launch_template_id(id)
                .versions("$Default")
                .send()
        })
        .await?;
        let Some(data) = out
            .launch_template_versions()
            .first()
            .and_then(|v| v.launch_template_data())
        else {
            return Ok(BTreeMap::new());
        };
        let mut fields = BTreeMap::new();
        fields.insert("imageId", data.image_id().unwrap_or_default().to_string());
        fields.insert(
            "instanceType",
            data.instance_type()
                .map(|t| t.as_str().to_string())
                .unwrap_or_default(),
        );
        if let Some(group) = data.security_group_ids().first() {
            fields.insert("securityGroup", group.clone());
        }
        if let Some(profile) = data.iam_instance_profile() {
            fields.insert(
                "instanceProfile",
                profile
                    .arn()
                    .or(profile.name())
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        if let Some(metadata) = data.metadata_options() {
            fields.insert(
                "metadata",
                format!(
                    "httpTokens={} hopLimit={}",
                    metadata.http_tokens().map(|t| t.as_str()).unwrap_or(""),
                    metadata.http_put_response_hop_limit().unwrap_or(0)
                ),
            );
        }
        if let Some(ebs) = data.block_device_mappings().first().and_then(|b| b.ebs()) {
            fields.insert(
                "rootVolume",
                format!(
                    "{} GiB {}{}",
                    ebs.volume_size().unwrap_or(0),
                    ebs.volume_type().map(|t| t.as_str()).unwrap_or(""),
                    if ebs.encrypted() == Some(true) {
                        " encrypted"
                    } else {
                        ""
                    }
                ),
            );
        }
        if let Some(spec) = data
            .tag_specifications()
            .iter()
            .find(|t| t.resource_type() == Some(&ec2::ResourceType::Instance))
        {
            let tags: Vec<String> = tag_map(spec.tags())
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            fields.insert("instanceTags", tags.join(" "));
        }
        if let Some(user_data) = data.user_data() {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(user_data)
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&decoded);
            if let Ok(boot) = BootConfig::from_user_data(&text) {
                fields.insert(
                    "nodeSpecSha256",
                    boot.node_spec_sha256[..12.min(boot.node_spec_sha256.len())].to_string(),
                );
            }
        }
        Ok(fields)
    }

    // ---- auto scaling groups ------------------------------------------------------------------------------

    pub async fn auto_scaling_groups(&mut self) -> Result<(), UpdateError> {
        use aws_sdk_autoscaling::types as asg;
        let client = &self.cloud.autoscaling;
        let names: Vec<String> = self
            .model
            .groups
            .iter()
            .map(|g| g.resource_name.clone())
            .collect();
        let mut found: Vec<asg::AutoScalingGroup> = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = call(
                &format!("auto scaling groups of {}", self.cluster()),
                "DescribeAutoScalingGroups",
                || {
                    client
                        .describe_auto_scaling_groups()
                        .set_auto_scaling_group_names(Some(names.clone()))
                        .set_next_token(token.clone())
                        .send()
                },
            )
            .await?;
            found.extend(page.auto_scaling_groups().iter().cloned());
            token = page.next_token().map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        let actual: BTreeMap<String, asg::AutoScalingGroup> = found
            .iter()
            .map(|g| {
                (
                    g.auto_scaling_group_name().unwrap_or_default().to_string(),
                    g.clone(),
                )
            })
            .collect();
        for group in self.model.groups.clone() {
            let resource = format!("AutoScalingGroup {}", group.resource_name);
            let subnet_ids: Vec<String> = group
                .subnets
                .iter()
                .map(|s| unknown(self.known.subnet_ids.get(s)))
                .collect();
            let zone_identifier = subnet_ids.join(",");
            let target_groups: Vec<String> = match group.role {
                Role::ControlPlane => vec![unknown(self.known.target_group_arn.as_ref())],
                Role::Node => Vec::new(),
            };
            let lt_id = self.known.launch_template_ids.get(&group.name).cloned();
            let tags: Vec<asg::Tag> = group
                .tags
                .iter()
                .map(|(k, v)| {
                    asg::Tag::builder()
                        .key(k)
                        .value(v)
                        .propagate_at_launch(true)
                        .resource_id(&group.resource_name)
                        .resource_type("auto-scaling-group")
                        .build()
                })
                .collect();
            let Some(current) = actual.get(&group.resource_name) else {
                self.plan.push(
                    Change::new(
                        STAGE_ASGS,
                        "AutoScalingGroup",
                        &group.resource_name,
                        Action::Create,
                    )
                    .field("minSize", None, group.min_size.to_string())
                    .field("maxSize", None, group.max_size.to_string())
                    .field("subnets", None, group.subnets.join(", ")),
                );
                if self.options.apply {
                    let spec = asg::LaunchTemplateSpecification::builder()
                        .launch_template_id(lt_id.clone().unwrap_or_default())
                        .version("$Default")
                        .build();
                    call(&resource, "CreateAutoScalingGroup", || {
                        client
                            .create_auto_scaling_group()
                            .auto_scaling_group_name(&group.resource_name)
                            .launch_template(spec.clone())
                            .min_size(group.min_size)
                            .max_size(group.max_size)
                            .desired_capacity(group.min_size)
                            .vpc_zone_identifier(&zone_identifier)
                            .set_target_group_arns(
                                (!target_groups.is_empty()).then(|| target_groups.clone()),
                            )
                            .set_tags(Some(tags.clone()))
                            .send()
                    })
                    .await?;
                }
                continue;
            };
            let mut change = Change::new(
                STAGE_ASGS,
                "AutoScalingGroup",
                &group.resource_name,
                Action::Update,
            );
            let mut update = false;
            if current.min_size() != Some(group.min_size) {
                change = change.field(
                    "minSize",
                    current.min_size().map(|n| n.to_string()),
                    group.min_size.to_string(),
                );
                update = true;
            }
            if current.max_size() != Some(group.max_size) {
                change = change.field(
                    "maxSize",
                    current.max_size().map(|n| n.to_string()),
                    group.max_size.to_string(),
                );
                update = true;
            }
            let current_subnets: BTreeSet<&str> = current
                .vpc_zone_identifier()
                .unwrap_or("")
                .split(',')
                .filter(|s| !s.is_empty())
                .collect();
            let want_subnets: BTreeSet<&str> = subnet_ids.iter().map(String::as_str).collect();
            if current_subnets != want_subnets {
                change = change.field(
                    "subnets",
                    Some(current.vpc_zone_identifier().unwrap_or("").to_string()),
                    &zone_identifier,
                );
                update = true;
            }
            let current_lt = current
                .launch_template()
                .and_then(|l| l.launch_template_id());
            if current_lt != lt_id.as_deref() {
                change = change.field(
                    "launchTemplate",
                    current_lt.map(str::to_string),
                    unknown(lt_id.as_ref()),
                );
                update = true;
            }
            let current_tgs: BTreeSet<&str> = current
                .target_group_arns()
                .iter()
                .map(String::as_str)
                .collect();
            let want_tgs: BTreeSet<&str> = target_groups.iter().map(String::as_str).collect();
            let attach: Vec<String> = want_tgs
                .difference(&current_tgs)
                .map(|s| s.to_string())
                .collect();
            if !attach.is_empty() {
                change = change.field("targetGroups", None, format!("+ {}", attach.join(", ")));
            }
            let current_tags: BTreeMap<String, String> = current
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
                .collect();
            let stale_tags: Vec<asg::Tag> = tags
                .iter()
                .filter(|t| {
                    current_tags.get(t.key().unwrap_or("")).map(String::as_str) != t.value()
                })
                .cloned()
                .collect();
            if !stale_tags.is_empty() {
                let keys: Vec<&str> = stale_tags.iter().filter_map(|t| t.key()).collect();
                change = change.field("tags", None, keys.join(", "));
            }
            if change.fields.is_empty() {
                continue;
            }
            self.plan.push(change);
            if !self.options.apply {
                continue;
            }
            if update {
                // Keep the current desired capacity inside the new bounds; never fight an autoscaler.
                let desired = current
                    .desired_capacity()
                    .unwrap_or(group.min_size)
                    .clamp(group.min_size, group.max_size);
                let spec = asg::LaunchTemplateSpecification::builder()
                    .launch_template_id(lt_id.clone().unwrap_or_default())
                    .version("$Default")
                    .build();
                call(&resource, "UpdateAutoScalingGroup", || {
                    client
                        .update_auto_scaling_group()
                        .auto_scaling_group_name(&group.resource_name)
                        .launch_template(spec.clone())
                        .min_size(group.min_size)
                        .max_size(group.max_size)
                        .desired_capacity(desired)
                        .vpc_zone_identifier(&zone_identifier)
                        .send()
                })
                .await?;
            }
            if !attach.is_empty() {
                call(&resource, "AttachLoadBalancerTargetGroups", || {
                    client
                        .attach_load_balancer_target_groups()
                        .auto_scaling_group_name(&group.resource_name)
                        .set_target_group_arns(Some(attach.clone()))
                        .send()
                })
                .await?;
            }
            if !stale_tags.is_empty() {
                call(&resource, "CreateOrUpdateTags", || {
                    client
                        .create_or_update_tags()
                        .set_tags(Some(stale_tags.clone()))
                        .send()
                })
                .await?;
            }
        }
        Ok(())
    }

    // ---- leftovers: owned groups the spec no longer has ----------------------------------------------------

    pub async fn leftovers(&mut self) -> Result<(), UpdateError> {
        let ec2c = &self.cloud.ec2;
        let wanted: BTreeSet<String> = self.model.groups.iter().map(|g| g.name.clone()).collect();
        let templates = self.owned_launch_templates().await?;
        let mut stale: Vec<(String, String, Option<String>)> = Vec::new();
        for template in &templates {
            let tags = tag_map(template.tags());
            if let Some(group) = tags.get(GROUP_TAG) {
                if !wanted.contains(group) {
                    stale.push((
                        group.clone(),
                        template
                            .launch_template_name()
                            .unwrap_or_default()
                            .to_string(),
                        template.launch_template_id().map(str::to_string),
                    ));
                }
            }
        }
        let paths = ballast_state::layout::ClusterPaths::new(self.cluster());
        for (group, name, id) in stale {
            self.plan.push(Change::new(
                STAGE_ASGS + 1,
                "AutoScalingGroup",
                &name,
                Action::Delete,
            ));
            self.plan.push(Change::new(
                STAGE_ASGS + 1,
                "LaunchTemplate",
                &name,
                Action::Delete,
            ));
            self.plan.push(Change::new(
                STAGE_ASGS + 1,
                "NodeSpec",
                &group,
                Action::Delete,
            ));
            if !(self.options.apply && self.options.prune) {
                continue;
            }
            let client = &self.cloud.autoscaling;
            let resource = format!("AutoScalingGroup {name}");
            find(
                &resource,
                "UpdateAutoScalingGroup",
                &["ValidationError"],
                || {
                    client
                        .update_auto_scaling_group()
                        .auto_scaling_group_name(&name)
                        .min_size(0)
                        .max_size(0)
                        .desired_capacity(0)
                        .send()
                },
            )
            .await?;
            find(
                &resource,
                "DeleteAutoScalingGroup",
                &["ValidationError"],
                || {
                    client
                        .delete_auto_scaling_group()
                        .auto_scaling_group_name(&name)
                        .force_delete(true)
                        .send()
                },
            )
            .await?;
            if let Some(id) = id {
                call(
                    &format!("LaunchTemplate {name}"),
                    "DeleteLaunchTemplate",
                    || ec2c.delete_launch_template().launch_template_id(&id).send(),
                )
                .await?;
            }
            self.store.delete(&paths.node_spec(&group)).await?;
        }
        Ok(())
    }

    /// Running instances of each group whose node-spec tag differs from the group's current node spec.
    pub async fn out_of_date_instances(
        &self,
    ) -> Result<BTreeMap<String, Vec<String>>, UpdateError> {
        let mut out_of_date: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if self.known.node_spec_hashes.is_empty() || self.known.vpc_id.is_none() {
            return Ok(out_of_date);
        }
        let ec2c = &self.cloud.ec2;
        let mut pages = ec2c
            .describe_instances()
            .filters(filter(&format!("tag:{CLUSTER_TAG}"), self.cluster()))
            .filters(filter("instance-state-name", "pending"))
            .filters(filter("instance-state-name", "running"))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                let (message, hint) = super::engine::describe(&e);
                UpdateError::Aws {
                    resource: format!("instances of {}", self.cluster()),
                    operation: "DescribeInstances",
                    message,
                    hint,
                }
            })?;
            for instance in page.reservations().iter().flat_map(|r| r.instances()) {
                let tags = tag_map(instance.tags());
                let (Some(group), Some(hash)) = (tags.get(GROUP_TAG), tags.get(NODE_SPEC_HASH_TAG))
                else {
                    continue;
                };
                if self
                    .known
                    .node_spec_hashes
                    .get(group)
                    .is_some_and(|want| want != hash)
                {
                    out_of_date
                        .entry(group.clone())
                        .or_default()
                        .push(instance.instance_id().unwrap_or_default().to_string());
                }
            }
        }
        Ok(out_of_date)
    }
}

/// Where a route table's default route goes (the id, once it exists).
enum RouteTarget {
    InternetGateway(Option<String>),
    Nat(Option<String>),
}

impl RouteTarget {
    fn is_route(&self, route: &ec2::Route) -> bool {
        match self {
            RouteTarget::InternetGateway(id) => {
                route.gateway_id().is_some() && route.gateway_id() == id.as_deref()
            }
            RouteTarget::Nat(id) => {
                route.nat_gateway_id().is_some() && route.nat_gateway_id() == id.as_deref()
            }
        }
    }

    fn describe(&self) -> &'static str {
        match self {
            RouteTarget::InternetGateway(_) => "internet gateway",
            RouteTarget::Nat(_) => "NAT gateway",
        }
    }
}

/// Everything an instance launches with: what a launch template version holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LaunchSpec {
    image_id: String,
    instance_type: String,
    security_group: Option<String>,
    instance_profile: Option<String>,
    http_tokens: String,
    hop_limit: i32,
    volume_size: i32,
    volume_type: String,
    encrypted: bool,
    kms_key: Option<String>,
    user_data: Option<String>,
    node_spec_hash: Option<String>,
    instance_tags: BTreeMap<String, String>,
}

impl LaunchSpec {
    /// False while a value it needs only exists after apply.
    fn is_complete(&self) -> bool {
        self.security_group.is_some() && self.instance_profile.is_some() && self.user_data.is_some()
    }

    /// The fields shown in a plan, in order.
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("imageId", self.image_id.clone()),
            ("instanceType", self.instance_type.clone()),
            ("securityGroup", unknown(self.security_group.as_ref())),
            ("instanceProfile", unknown(self.instance_profile.as_ref())),
            (
                "metadata",
                format!(
                    "httpTokens={} hopLimit={}",
                    self.http_tokens, self.hop_limit
                ),
            ),
            (
                "rootVolume",
                format!(
                    "{} GiB {}{}",
                    self.volume_size,
                    self.volume_type,
                    if self.encrypted { " encrypted" } else { "" }
                ),
            ),
            (
                "instanceTags",
                self.instance_tags
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            (
                "nodeSpecSha256",
                self.node_spec_hash.as_ref().map_or_else(
                    || KNOWN_AFTER_APPLY.to_string(),
                    |h| h[..12.min(h.len())].to_string(),
                ),
            ),
        ]
    }

    fn request_data(&self) -> ec2::RequestLaunchTemplateData {
        let mut ebs = ec2::LaunchTemplateEbsBlockDeviceRequest::builder()
            .volume_size(self.volume_size)
            .volume_type(ec2::VolumeType::from(self.volume_type.as_str()))
            .encrypted(self.encrypted)
            .delete_on_termination(true);
        if let Some(key) = &self.kms_key {
            ebs = ebs.kms_key_id(key);
        }
        let profile = self.instance_profile.clone().unwrap_or_default();
        let profile_spec = if profile.starts_with("arn:") {
            ec2::LaunchTemplateIamInstanceProfileSpecificationRequest::builder().arn(profile)
        } else {
            ec2::LaunchTemplateIamInstanceProfileSpecificationRequest::builder().name(profile)
        };
        let tags = ec2_tags(&self.instance_tags);
        ec2::RequestLaunchTemplateData::builder()
            .image_id(&self.image_id)
            .instance_type(ec2::InstanceType::from(self.instance_type.as_str()))
            .security_group_ids(self.security_group.clone().unwrap_or_default())
            .iam_instance_profile(profile_spec.build())
            .metadata_options(
                ec2::LaunchTemplateInstanceMetadataOptionsRequest::builder()
                    .http_endpoint(ec2::LaunchTemplateInstanceMetadataEndpointState::Enabled)
                    .http_tokens(ec2::LaunchTemplateHttpTokensState::from(
                        self.http_tokens.as_str(),
                    ))
                    .http_put_response_hop_limit(self.hop_limit)
                    .build(),
            )
            .block_device_mappings(
                ec2::LaunchTemplateBlockDeviceMappingRequest::builder()
                    .device_name("/dev/xvda")
                    .ebs(ebs.build())
                    .build(),
            )
            .user_data(
                base64::engine::general_purpose::STANDARD
                    .encode(self.user_data.clone().unwrap_or_default()),
            )
            .tag_specifications(
                ec2::LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(ec2::ResourceType::Instance)
                    .set_tags(Some(tags.clone()))
                    .build(),
            )
            .tag_specifications(
                ec2::LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(ec2::ResourceType::Volume)
                    .set_tags(Some(tags))
                    .build(),
            )
            .build()
    }
}

fn rule_key(protocol: &str, from: i32, to: i32, source: &str) -> String {
    if protocol == "-1" {
        format!("all from {source}")
    } else {
        format!("{protocol} {from}-{to} from {source}")
    }
}

/// The comparable keys of an actual permission (one per source).
fn rule_keys(permission: &ec2::IpPermission) -> Vec<String> {
    let protocol = permission.ip_protocol().unwrap_or("-1");
    let from = permission.from_port().unwrap_or(-1);
    let to = permission.to_port().unwrap_or(-1);
    let mut keys = Vec::new();
    for range in permission.ip_ranges() {
        keys.push(rule_key(protocol, from, to, range.cidr_ip().unwrap_or("")));
    }
    for range in permission.ipv6_ranges() {
        keys.push(rule_key(
            protocol,
            from,
            to,
            range.cidr_ipv6().unwrap_or(""),
        ));
    }
    for pair in permission.user_id_group_pairs() {
        keys.push(rule_key(protocol, from, to, pair.group_id().unwrap_or("")));
    }
    keys
}

/// An actual permission split into one permission per source, so stale sources can be revoked alone.
fn split_permission(permission: &ec2::IpPermission) -> Vec<ec2::IpPermission> {
    let base = || {
        ec2::IpPermission::builder()
            .set_ip_protocol(permission.ip_protocol().map(str::to_string))
            .set_from_port(permission.from_port())
            .set_to_port(permission.to_port())
    };
    let mut out = Vec::new();
    for range in permission.ip_ranges() {
        out.push(base().ip_ranges(range.clone()).build());
    }
    for range in permission.ipv6_ranges() {
        out.push(base().ipv6_ranges(range.clone()).build());
    }
    for pair in permission.user_id_group_pairs() {
        out.push(
            base()
                .user_id_group_pairs(
                    ec2::UserIdGroupPair::builder()
                        .set_group_id(pair.group_id().map(str::to_string))
                        .build(),
                )
                .build(),
        );
    }
    out
}

/// IAM returns policy documents URL-encoded; compare them as JSON values.
fn decode_policy(document: &str) -> serde_json::Value {
    parse_policy(&percent_decode(document))
}

fn parse_policy(document: &str) -> serde_json::Value {
    serde_json::from_str(document).unwrap_or(serde_json::Value::String(document.to_string()))
}

fn percent_decode(text: &str) -> String {
    if !text.contains('%') {
        return text.to_string();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(byte) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_compare_whatever_their_encoding() {
        let plain = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"*"}]}"#;
        let encoded = "%7B%22Version%22%3A%222012-10-17%22%2C%20%22Statement%22%3A%5B%7B%22Effect%22%3A%22Allow%22%2C%22Action%22%3A%22s3%3AGetObject%22%2C%22Resource%22%3A%22%2A%22%7D%5D%7D";
        assert_eq!(decode_policy(encoded), parse_policy(plain));
        assert_eq!(decode_policy(plain), parse_policy(plain));
    }

    #[test]
    fn rules_have_one_key_per_source() {
        let permission = ec2::IpPermission::builder()
            .ip_protocol("tcp")
            .from_port(443)
            .to_port(443)
            .ip_ranges(ec2::IpRange::builder().cidr_ip("0.0.0.0/0").build())
            .user_id_group_pairs(ec2::UserIdGroupPair::builder().group_id("sg-1").build())
            .build();
        assert_eq!(
            rule_keys(&permission),
            vec!["tcp 443-443 from 0.0.0.0/0", "tcp 443-443 from sg-1"]
        );
        assert_eq!(split_permission(&permission).len(), 2);
        let all = ec2::IpPermission::builder()
            .ip_protocol("-1")
            .user_id_group_pairs(ec2::UserIdGroupPair::builder().group_id("sg-2").build())
            .build();
        assert_eq!(rule_keys(&all), vec!["all from sg-2"]);
    }
}
