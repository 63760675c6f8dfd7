//! Security groups, one per role, and their ingress rules. The groups are made first (their rules refer to each
//! other), so the engine diffs and applies them in two steps: [`diff_groups`], then [`diff_rules`].

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types as ec2;
use ballast_state::spec::Role;
use serde::{Deserialize, Serialize};

use super::deletion::{attempt, claim, Claim};
use super::{tags_named, ActualState, Known, Target};
use crate::cloud::aws::{call, filter, owned_filter, ownership_tag, tag_map, tag_spec};
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{Finder, Task, Wanted};
use crate::cloud::model::{ClusterModel, IngressRule, SecurityGroupModel, Source};
use crate::cloud::plan::{
    or_known_after_apply, Action, Change as PlanChange, Kind, Planned, Stage,
};
use crate::cloud::terraform::{
    reference, string_map, tf_name, value, values, RenderError, Resource as TfResource, Terraform,
};
use crate::cloud::Cloud;

/// One source of one ingress permission, as found (AWS groups sources; they are compared one by one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    /// `tcp`, `udp` or `-1` (all).
    pub protocol: String,
    #[serde(default)]
    pub from_port: Option<i32>,
    #[serde(default)]
    pub to_port: Option<i32>,
    /// An IPv4 or IPv6 CIDR, or a security group id.
    #[serde(default)]
    pub cidr: Option<String>,
    #[serde(default)]
    pub group: Option<String>,
}

impl Rule {
    /// How rules are compared and shown: `tcp 443-443 from 0.0.0.0/0`, `all from sg-123`.
    pub fn key(&self) -> String {
        let source = self.cidr.as_deref().or(self.group.as_deref()).unwrap_or("");
        rule_key(
            &self.protocol,
            self.from_port.unwrap_or(-1),
            self.to_port.unwrap_or(-1),
            source,
        )
    }

    /// The permission that revokes exactly this rule.
    fn permission(&self) -> ec2::IpPermission {
        let mut permission = ec2::IpPermission::builder()
            .ip_protocol(&self.protocol)
            .set_from_port(self.from_port)
            .set_to_port(self.to_port);
        if let Some(cidr) = &self.cidr {
            permission = if cidr.contains(':') {
                permission.ipv6_ranges(ec2::Ipv6Range::builder().cidr_ipv6(cidr).build())
            } else {
                permission.ip_ranges(ec2::IpRange::builder().cidr_ip(cidr).build())
            };
        }
        if let Some(group) = &self.group {
            permission = permission
                .user_id_group_pairs(ec2::UserIdGroupPair::builder().group_id(group).build());
        }
        permission.build()
    }
}

fn rule_key(protocol: &str, from: i32, to: i32, source: &str) -> String {
    if protocol == "-1" {
        format!("all from {source}")
    } else if carries_ports(protocol) {
        format!("{protocol} {from}-{to} from {source}")
    } else {
        // IP-in-IP (4) and the like: EC2 ignores ports for them and reports none.
        format!("protocol {protocol} from {source}")
    }
}

/// Whether a rule of this protocol has a port range (or ICMP type range) that EC2 keeps.
fn carries_ports(protocol: &str) -> bool {
    matches!(
        protocol,
        "tcp" | "udp" | "icmp" | "icmpv6" | "6" | "17" | "1" | "58"
    )
}

/// An actual permission split into one rule per source.
fn rules_of(permission: &ec2::IpPermission) -> Vec<Rule> {
    let base = || Rule {
        protocol: permission.ip_protocol().unwrap_or("-1").to_string(),
        from_port: permission.from_port(),
        to_port: permission.to_port(),
        cidr: None,
        group: None,
    };
    let mut rules = Vec::new();
    for range in permission.ip_ranges() {
        rules.push(Rule {
            cidr: Some(range.cidr_ip().unwrap_or_default().to_string()),
            ..base()
        });
    }
    for range in permission.ipv6_ranges() {
        rules.push(Rule {
            cidr: Some(range.cidr_ipv6().unwrap_or_default().to_string()),
            ..base()
        });
    }
    for pair in permission.user_id_group_pairs() {
        rules.push(Rule {
            group: Some(pair.group_id().unwrap_or_default().to_string()),
            ..base()
        });
    }
    rules
}

/// A security group as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecurityGroup {
    pub id: String,
    #[serde(default)]
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    /// The cluster's security groups in its VPC, by group name.
    #[serde(default)]
    pub groups: BTreeMap<String, SecurityGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    CreateGroup(SecurityGroupModel),
    Rules {
        role: Role,
        name: String,
        /// False while the group itself is being created.
        group_exists: bool,
        /// Rules to authorize, with their keys.
        add: Vec<(String, IngressRule)>,
        /// Rules to revoke, as found.
        remove: Vec<Rule>,
    },
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        let change = match self {
            Change::CreateGroup(group) => PlanChange::new(
                Stage::SecurityAndIam,
                Kind::SecurityGroup,
                &group.name,
                Action::Create,
            )
            .field("description", None, &group.description),
            Change::Rules {
                name,
                group_exists,
                add,
                remove,
                ..
            } => {
                let action = if *group_exists {
                    Action::Update
                } else {
                    Action::Create
                };
                let mut change = PlanChange::new(
                    Stage::SecurityAndIam,
                    Kind::SecurityGroupRules,
                    name,
                    action,
                );
                for (key, _) in add {
                    change = change.field("ingress", None, format!("+ {key}"));
                }
                let stale: BTreeSet<String> = remove.iter().map(Rule::key).collect();
                for key in stale {
                    change = change.field("ingress", None, format!("- {key}"));
                }
                change
            }
        };
        vec![change]
    }
}

/// Reads the cluster's groups in the VPC (none while there is no VPC).
pub async fn find(
    cloud: &Cloud,
    model: &ClusterModel,
    vpc_id: Option<&str>,
) -> Result<Actual, UpdateError> {
    let Some(vpc) = vpc_id else {
        return Ok(Actual::default());
    };
    let out = call(
        &format!("security groups of {}", model.cluster),
        "DescribeSecurityGroups",
        || {
            cloud
                .ec2
                .describe_security_groups()
                .filters(owned_filter(&model.cluster))
                .filters(filter("vpc-id", &[vpc]))
                .send()
        },
    )
    .await?;
    let groups = out
        .security_groups()
        .iter()
        .map(|g| {
            let group = SecurityGroup {
                id: g.group_id().unwrap_or_default().to_string(),
                rules: g.ip_permissions().iter().flat_map(rules_of).collect(),
            };
            (g.group_name().unwrap_or_default().to_string(), group)
        })
        .collect();
    Ok(Actual { groups })
}

/// Ids of the groups that exist, by role.
pub fn learn(model: &ClusterModel, actual: &Actual, known: &mut Known) {
    for group in &model.security_groups {
        if let Some(found) = actual.groups.get(&group.name) {
            known
                .security_group_ids
                .insert(group.role, found.id.clone());
        }
    }
}

/// The groups to create.
pub fn diff_groups(model: &ClusterModel, actual: &Actual) -> Vec<Change> {
    model
        .security_groups
        .iter()
        .filter(|g| !actual.groups.contains_key(&g.name))
        .map(|g| Change::CreateGroup(g.clone()))
        .collect()
}

/// The rules to authorize and revoke, group by group; `known` has the groups' ids (rules name each other).
pub fn diff_rules(model: &ClusterModel, known: &Known, actual: &Actual) -> Vec<Change> {
    let mut changes = Vec::new();
    for group in &model.security_groups {
        let found = actual.groups.get(&group.name);
        let have: BTreeMap<String, &Rule> = found
            .map(|g| g.rules.iter().map(|r| (r.key(), r)).collect())
            .unwrap_or_default();
        let want: BTreeMap<String, &IngressRule> = group
            .rules
            .iter()
            .map(|r| (wanted_key(r, known), r))
            .collect();
        let add: Vec<(String, IngressRule)> = want
            .iter()
            .filter(|(k, _)| !have.contains_key(*k))
            .map(|(k, r)| (k.clone(), (*r).clone()))
            .collect();
        let remove_keys: BTreeSet<&String> =
            have.keys().filter(|k| !want.contains_key(*k)).collect();
        // Every source found under a stale key (a key may appear more than once: AWS does not merge them).
        let remove: Vec<Rule> = found
            .map(|g| {
                g.rules
                    .iter()
                    .filter(|r| remove_keys.contains(&r.key()))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if add.is_empty() && remove.is_empty() {
            continue;
        }
        changes.push(Change::Rules {
            role: group.role,
            name: group.name.clone(),
            group_exists: found.is_some(),
            add,
            remove,
        });
    }
    changes
}

/// A wanted rule's key; a group source is the group's id, once it exists.
fn wanted_key(rule: &IngressRule, known: &Known) -> String {
    let source = match &rule.source {
        Source::Cidr(cidr) => cidr.clone(),
        Source::Group(role) => or_known_after_apply(known.security_group_ids.get(role)),
    };
    rule_key(&rule.protocol, rule.from_port, rule.to_port, &source)
}

/// The permission that authorizes a wanted rule.
fn permission(rule: &IngressRule, known: &Known) -> ec2::IpPermission {
    let mut permission = ec2::IpPermission::builder().ip_protocol(&rule.protocol);
    if carries_ports(&rule.protocol) {
        permission = permission.from_port(rule.from_port).to_port(rule.to_port);
    }
    match &rule.source {
        Source::Cidr(cidr) if cidr.contains(':') => {
            permission = permission.ipv6_ranges(ec2::Ipv6Range::builder().cidr_ipv6(cidr).build())
        }
        Source::Cidr(cidr) => {
            permission = permission.ip_ranges(ec2::IpRange::builder().cidr_ip(cidr).build())
        }
        Source::Group(role) => {
            let id = known
                .security_group_ids
                .get(role)
                .cloned()
                .unwrap_or_default();
            permission =
                permission.user_id_group_pairs(ec2::UserIdGroupPair::builder().group_id(id).build())
        }
    }
    permission.build()
}

pub async fn apply(
    target: &Target<'_>,
    changes: &[Change],
    known: &mut Known,
) -> Result<(), UpdateError> {
    let ec2c = &target.cloud.ec2;
    for change in changes {
        match change {
            Change::CreateGroup(group) => {
                let resource = format!("SecurityGroup {}", group.name);
                let tags = target.tags_named(&group.name);
                let vpc = known.vpc_id.clone().unwrap_or_default();
                let created = call(&resource, "CreateSecurityGroup", || {
                    ec2c.create_security_group()
                        .group_name(&group.name)
                        .description(&group.description)
                        .vpc_id(&vpc)
                        .tag_specifications(tag_spec(ec2::ResourceType::SecurityGroup, &tags))
                        .send()
                })
                .await?;
                known.security_group_ids.insert(
                    group.role,
                    created.group_id().unwrap_or_default().to_string(),
                );
            }
            Change::Rules {
                role,
                name,
                add,
                remove,
                ..
            } => {
                let resource = format!("SecurityGroup {name}");
                let group_id = known
                    .security_group_ids
                    .get(role)
                    .cloned()
                    .unwrap_or_default();
                let permissions: Vec<ec2::IpPermission> =
                    add.iter().map(|(_, r)| permission(r, known)).collect();
                if !permissions.is_empty() {
                    call(&resource, "AuthorizeSecurityGroupIngress", || {
                        ec2c.authorize_security_group_ingress()
                            .group_id(&group_id)
                            .set_ip_permissions(Some(permissions.clone()))
                            .send()
                    })
                    .await?;
                }
                let stale: Vec<ec2::IpPermission> = remove.iter().map(Rule::permission).collect();
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
    }
    Ok(())
}

/// Deletes security groups (`delete cluster`): first every rule of theirs that names a group (they refer to
/// each other, and a group named by another's rule cannot be deleted), then each group.
pub async fn delete_all(
    cloud: &Cloud,
    groups: &[super::deletion::Resource],
) -> Vec<(
    super::deletion::Resource,
    Result<(), super::deletion::Failed>,
)> {
    let ids: Vec<String> = groups.iter().map(|g| g.id.clone()).collect();
    let described = attempt_describe(cloud, &ids).await;
    let mut results = Vec::new();
    for group in groups {
        let label = group.label();
        let referring: Vec<ec2::IpPermission> = described
            .iter()
            .filter(|g| g.group_id() == Some(group.id.as_str()))
            .flat_map(|g| g.ip_permissions().iter())
            .filter(|p| !p.user_id_group_pairs().is_empty())
            .cloned()
            .collect();
        let revoked = if referring.is_empty() {
            Ok(())
        } else {
            attempt(&label, "RevokeSecurityGroupIngress", || {
                cloud
                    .ec2
                    .revoke_security_group_ingress()
                    .group_id(&group.id)
                    .set_ip_permissions(Some(referring.clone()))
                    .send()
            })
            .await
        };
        results.push((group.clone(), revoked));
    }
    for (group, result) in results.iter_mut() {
        if result.is_err() {
            continue;
        }
        *result = attempt(&group.label(), "DeleteSecurityGroup", || {
            cloud.ec2.delete_security_group().group_id(&group.id).send()
        })
        .await;
    }
    results
}

/// The groups' rules as they are now; none when they cannot be read (the deletes then say why).
async fn attempt_describe(cloud: &Cloud, ids: &[String]) -> Vec<ec2::SecurityGroup> {
    match cloud
        .ec2
        .describe_security_groups()
        .set_group_ids(Some(ids.to_vec()))
        .send()
        .await
    {
        Ok(out) => out.security_groups().to_vec(),
        Err(e) => {
            tracing::info!(
                error = %aws_smithy_types::error::display::DisplayErrorContext(e),
                "reading security group rules"
            );
            Vec::new()
        }
    }
}

/// The rules of `group` that name one of `deleting` (ingress, then egress), each reduced to those group
/// references: what must be revoked before the named groups can be deleted. Pure.
pub fn references_to(
    group: &ec2::SecurityGroup,
    deleting: &BTreeSet<String>,
) -> (Vec<ec2::IpPermission>, Vec<ec2::IpPermission>) {
    let reduce = |permissions: &[ec2::IpPermission]| -> Vec<ec2::IpPermission> {
        permissions
            .iter()
            .filter_map(|p| {
                let pairs: Vec<ec2::UserIdGroupPair> = p
                    .user_id_group_pairs()
                    .iter()
                    .filter(|pair| pair.group_id().is_some_and(|id| deleting.contains(id)))
                    .cloned()
                    .collect();
                if pairs.is_empty() {
                    return None;
                }
                Some(
                    ec2::IpPermission::builder()
                        .set_ip_protocol(p.ip_protocol().map(str::to_string))
                        .set_from_port(p.from_port())
                        .set_to_port(p.to_port())
                        .set_user_id_group_pairs(Some(pairs))
                        .build(),
                )
            })
            .collect()
    };
    (
        reduce(group.ip_permissions()),
        reduce(group.ip_permissions_egress()),
    )
}

/// Revokes the rules that name a group about to be deleted in the cluster's other security groups: those it
/// keeps (tagged `shared`, or claimed by another cluster too) and, in the same round, none of the groups being
/// deleted (their own rules go in [`delete_all`]). The cloud controller manager adds such a rule
/// (the nodes' group admitting its load balancer's group); AWS refuses to delete a group any rule still names.
/// A group carrying no tag of this cluster is never changed: its rule keeps our group, and the teardown names
/// it when it stops.
pub async fn revoke_references(
    cloud: &Cloud,
    cluster: &str,
    deleting: &[super::deletion::Resource],
) -> Result<(), super::deletion::Failed> {
    let ids: BTreeSet<String> = deleting.iter().map(|r| r.id.clone()).collect();
    let label = format!("security groups of {cluster}");
    let groups = attempt_read(cloud, cluster, &label).await?;
    for group in groups {
        let Some(id) = group.group_id() else {
            continue;
        };
        if ids.contains(id) || claim(&tag_map(group.tags()), cluster) == Claim::None {
            continue;
        }
        let (ingress, egress) = references_to(&group, &ids);
        let group_label = format!("SecurityGroup {id}");
        if !ingress.is_empty() {
            attempt(&group_label, "RevokeSecurityGroupIngress", || {
                cloud
                    .ec2
                    .revoke_security_group_ingress()
                    .group_id(id)
                    .set_ip_permissions(Some(ingress.clone()))
                    .send()
            })
            .await?;
        }
        if !egress.is_empty() {
            attempt(&group_label, "RevokeSecurityGroupEgress", || {
                cloud
                    .ec2
                    .revoke_security_group_egress()
                    .group_id(id)
                    .set_ip_permissions(Some(egress.clone()))
                    .send()
            })
            .await?;
        }
    }
    Ok(())
}

/// The security groups carrying the cluster's tag (either value), as a delete reads them: a failure is a
/// [`Failed`] the round classifies.
async fn attempt_read(
    cloud: &Cloud,
    cluster: &str,
    label: &str,
) -> Result<Vec<ec2::SecurityGroup>, super::deletion::Failed> {
    let mut groups = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut page = None;
        attempt(label, "DescribeSecurityGroups", || async {
            let out = cloud
                .ec2
                .describe_security_groups()
                .filters(filter(
                    &format!("tag:{}", ownership_tag(cluster)),
                    &["owned", "shared"],
                ))
                .set_next_token(token.clone())
                .send()
                .await;
            if let Ok(o) = &out {
                page = Some(o.clone());
            }
            out
        })
        .await?;
        let Some(page) = page else {
            // "Not found" on a describe: nothing to read.
            return Ok(groups);
        };
        groups.extend(page.security_groups().iter().cloned());
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            return Ok(groups);
        }
    }
}

/// The security groups: their rules that name a group go first (the cluster's groups name each other, and the
/// cloud controller manager's rules in the groups the cluster keeps name its groups), then the groups.
impl super::task::Delete for SecurityGroupsTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::Kinds(&[super::deletion::ResourceKind::SecurityGroup])
    }

    /// One group alone (`--prune` has none to delete): the references to it, then it.
    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(async move {
            let mut results = self
                .delete_found(deleting, std::slice::from_ref(resource))
                .await;
            results.pop().map_or(Ok(()), |(_, result)| result)
        })
    }

    /// All of a round's groups at once: a group named by another's rule cannot be deleted, so every group's
    /// rules go before any group; a failure to revoke in a kept group holds them all for a later round.
    fn delete_found<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resources: &'a [super::deletion::Resource],
    ) -> super::task::DeletedFuture<'a> {
        Box::pin(async move {
            if let (Err(failed), Some(first)) = (
                revoke_references(deleting.cloud, deleting.cluster, resources).await,
                resources.first(),
            ) {
                return vec![(first.clone(), Err(failed))];
            }
            delete_all(deleting.cloud, resources).await
        })
    }
}

/// The security groups themselves, as a [`Task`]: made before their rules, which name each other.
pub struct SecurityGroupsTask;

impl Task for SecurityGroupsTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.security_groups
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.security_groups = actual;
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
        _known: &Known,
        actual: &Actual,
    ) -> Result<Vec<Change>, UpdateError> {
        Ok(diff_groups(wanted.model, actual))
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
        for change in changes {
            let Change::CreateGroup(group) = change else {
                return Err(RenderError::NotACreate {
                    resource: "security group rules".to_string(),
                    action: "rules in the groups' step",
                });
            };
            let tf = tf_name(&group.name);
            terraform.resource(
                "aws_security_group",
                &tf,
                TfResource::new()
                    .attr("description", group.description.as_str())
                    .attr("name", group.name.as_str())
                    .attr("tags", string_map(&tags_named(wanted.model, &group.name)))
                    .attr("vpc_id", value(known.vpc_id.as_deref().unwrap_or_default())),
            )?;
            let id = reference("aws_security_group", &tf, "id");
            // EC2 gives a new group an egress rule allowing everything; Terraform removes it unless it is
            // declared, so it is declared (as kops does): the same group as the direct apply's.
            terraform.resource(
                "aws_security_group_rule",
                &tf_name(&format!("{}-egress-all-0to0-0-0-0-0--0", group.name)),
                TfResource::new()
                    .attr("cidr_blocks", values(&["0.0.0.0/0"]))
                    .attr(
                        "description",
                        "all outbound traffic, as EC2 gives every new group",
                    )
                    .attr("from_port", 0)
                    .attr("protocol", "-1")
                    .attr("security_group_id", value(&id))
                    .attr("to_port", 0)
                    .attr("type", "egress"),
            )?;
            let output = match group.role {
                Role::ControlPlane => "master_security_group_ids",
                Role::Node => "node_security_group_ids",
                Role::Bastion => "bastion_security_group_ids",
                Role::ApiServer => "apiserver_security_group_ids",
            };
            terraform.output(output, values(&[&id]));
            known.security_group_ids.insert(group.role, id);
        }
        Ok(())
    }
}

/// Nothing of their own: the rules go with their groups.
impl super::task::Delete for SecurityGroupRulesTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::With(&[super::deletion::ResourceKind::SecurityGroup])
    }

    fn delete<'a>(
        &'a self,
        _deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(async move { Err(super::task::not_deleted_here(resource)) })
    }
}

/// The security groups' ingress rules, as a [`Task`]: diffed once every group's id is known. Reads what
/// [`SecurityGroupsTask`] found.
pub struct SecurityGroupRulesTask;

impl Task for SecurityGroupRulesTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.security_groups
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.security_groups = actual;
    }

    async fn find(&self, finder: &Finder<'_>, _wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
        Ok(finder.found.security_groups.clone())
    }

    fn diff(
        &self,
        wanted: Wanted<'_>,
        known: &Known,
        actual: &Actual,
    ) -> Result<Vec<Change>, UpdateError> {
        Ok(diff_rules(wanted.model, known, actual))
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
        _wanted: Wanted<'_>,
        changes: &[Change],
        known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        for change in changes {
            let Change::Rules {
                role,
                name,
                add,
                remove,
                ..
            } = change
            else {
                return Err(RenderError::NotACreate {
                    resource: "security groups".to_string(),
                    action: "groups in the rules' step",
                });
            };
            if !remove.is_empty() {
                return Err(RenderError::NotACreate {
                    resource: format!("SecurityGroup {name}"),
                    action: "a rule's removal",
                });
            }
            let group_id = known
                .security_group_ids
                .get(role)
                .cloned()
                .unwrap_or_default();
            for (_, rule) in add {
                let ports = carries_ports(&rule.protocol);
                let (from, to) = if ports {
                    (rule.from_port, rule.to_port)
                } else {
                    (0, 0)
                };
                let (source_name, source_attr, source) = match &rule.source {
                    Source::Cidr(cidr) if cidr.contains(':') => {
                        (cidr.clone(), "ipv6_cidr_blocks", values(&[cidr]))
                    }
                    Source::Cidr(cidr) => (cidr.clone(), "cidr_blocks", values(&[cidr])),
                    Source::Group(from_role) => (
                        role_resource_name_of(from_role),
                        "source_security_group_id",
                        value(
                            known
                                .security_group_ids
                                .get(from_role)
                                .map_or("", String::as_str),
                        ),
                    ),
                };
                let protocol = if rule.protocol == "-1" {
                    "all"
                } else {
                    rule.protocol.as_str()
                };
                let rule_name = tf_name(&format!(
                    "from-{source_name}-ingress-{protocol}-{from}to{to}-{name}"
                ));
                terraform.resource(
                    "aws_security_group_rule",
                    &rule_name,
                    TfResource::new()
                        .attr(source_attr, source)
                        .attr(
                            "description",
                            format!("{protocol} {from}-{to} from {source_name}"),
                        )
                        .attr("from_port", i64::from(from))
                        .attr("protocol", rule.protocol.as_str())
                        .attr("security_group_id", value(&group_id))
                        .attr("to_port", i64::from(to))
                        .attr("type", "ingress"),
                )?;
            }
        }
        Ok(())
    }
}

/// How a rule's Terraform name calls a role's group.
fn role_resource_name_of(role: &Role) -> String {
    match role {
        Role::ControlPlane => "control-plane".to_string(),
        Role::Node => "nodes".to_string(),
        Role::Bastion => "bastions".to_string(),
        Role::ApiServer => "api-servers".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_have_one_key_per_source() {
        let permission = ec2::IpPermission::builder()
            .ip_protocol("tcp")
            .from_port(443)
            .to_port(443)
            .ip_ranges(ec2::IpRange::builder().cidr_ip("0.0.0.0/0").build())
            .user_id_group_pairs(ec2::UserIdGroupPair::builder().group_id("sg-1").build())
            .build();
        let rules = rules_of(&permission);
        assert_eq!(
            rules.iter().map(Rule::key).collect::<Vec<_>>(),
            vec!["tcp 443-443 from 0.0.0.0/0", "tcp 443-443 from sg-1"]
        );
        let all = ec2::IpPermission::builder()
            .ip_protocol("-1")
            .user_id_group_pairs(ec2::UserIdGroupPair::builder().group_id("sg-2").build())
            .build();
        assert_eq!(
            rules_of(&all).iter().map(Rule::key).collect::<Vec<_>>(),
            vec!["all from sg-2"]
        );
    }

    fn pair(group: &str) -> ec2::UserIdGroupPair {
        ec2::UserIdGroupPair::builder().group_id(group).build()
    }

    #[test]
    fn only_the_references_to_deleted_groups_are_revoked() {
        let nodes = ec2::SecurityGroup::builder()
            .group_id("sg-nodes")
            .ip_permissions(
                ec2::IpPermission::builder()
                    .ip_protocol("-1")
                    .user_id_group_pairs(pair("sg-elb"))
                    .user_id_group_pairs(pair("sg-control-plane"))
                    .ip_ranges(ec2::IpRange::builder().cidr_ip("10.0.0.0/8").build())
                    .build(),
            )
            .ip_permissions(
                ec2::IpPermission::builder()
                    .ip_protocol("tcp")
                    .from_port(22)
                    .to_port(22)
                    .ip_ranges(ec2::IpRange::builder().cidr_ip("0.0.0.0/0").build())
                    .build(),
            )
            .ip_permissions_egress(
                ec2::IpPermission::builder()
                    .ip_protocol("tcp")
                    .from_port(80)
                    .to_port(80)
                    .user_id_group_pairs(pair("sg-elb"))
                    .build(),
            )
            .build();
        let deleting: BTreeSet<String> = ["sg-elb".to_string()].into();
        let (ingress, egress) = references_to(&nodes, &deleting);
        assert_eq!(ingress.len(), 1);
        assert_eq!(ingress[0].ip_protocol(), Some("-1"));
        let groups: Vec<&str> = ingress[0]
            .user_id_group_pairs()
            .iter()
            .filter_map(|p| p.group_id())
            .collect();
        assert_eq!(groups, vec!["sg-elb"]);
        assert!(
            ingress[0].ip_ranges().is_empty(),
            "CIDR rules are not ours to revoke"
        );
        assert_eq!(egress.len(), 1);
        assert_eq!(egress[0].from_port(), Some(80));

        let none: BTreeSet<String> = ["sg-other".to_string()].into();
        assert_eq!(references_to(&nodes, &none), (vec![], vec![]));
    }
}
