//! The API's network load balancer, its target group (TCP 443, instances) and its listener forwarding to it.
//! Found by their deterministic names. The scheme (internet-facing or internal) cannot change in place, and
//! neither can its security groups (`spec.api.loadBalancer.additionalSecurityGroups`): AWS gives an NLB security
//! groups only if it was created with some, and never lets the last one go, so they are given at creation and a
//! change is refused, not planned as a replacement: a new load balancer has a new DNS name, which every
//! kubeconfig and node of the cluster names.

use std::collections::BTreeMap;

use aws_sdk_elasticloadbalancingv2::types as elb;
use serde::{Deserialize, Serialize};

use super::{tags_named, ActualState, Known, Target};
use crate::cloud::aws::{call, find as find_optional, ownership_tag};
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{Finder, Task, Wanted};
use crate::cloud::model::{elb_names, ClusterModel, LoadBalancerModel};
use crate::cloud::plan::{Action, Change as PlanChange, Kind, Planned, Stage};
use crate::cloud::terraform::{
    reference, string_map, tf_name, value, values, RenderError, Resource as TfResource, Terraform,
};
use crate::cloud::Cloud;

/// The load balancer as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadBalancer {
    pub arn: String,
    pub dns_name: String,
    /// `internet-facing` or `internal`.
    pub scheme: String,
    /// Its security groups' ids, sorted (none for an NLB created without them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<String>,
}

/// A listener as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Listener {
    pub arn: String,
    pub port: i32,
    /// The target groups its default actions forward to.
    #[serde(default)]
    pub forwards_to: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    #[serde(default)]
    pub load_balancer: Option<LoadBalancer>,
    /// The target group's ARN, if it exists.
    #[serde(default)]
    pub target_group: Option<String>,
    #[serde(default)]
    pub listeners: Vec<Listener>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    CreateLoadBalancer(LoadBalancerModel),
    CreateTargetGroup(LoadBalancerModel),
    /// The TCP 443 listener: created, or (with its ARN) pointed at the target group.
    Listener {
        model: LoadBalancerModel,
        arn: Option<String>,
    },
}

fn scheme(model: &LoadBalancerModel) -> elb::LoadBalancerSchemeEnum {
    if model.internal {
        elb::LoadBalancerSchemeEnum::Internal
    } else {
        elb::LoadBalancerSchemeEnum::InternetFacing
    }
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        let stage = Stage::LoadBalancer;
        let change = match self {
            Change::CreateLoadBalancer(lb) => {
                let change = PlanChange::new(stage, Kind::LoadBalancer, &lb.name, Action::Create)
                    .field("type", None, "network")
                    .field("scheme", None, scheme(lb).as_str())
                    .field("subnets", None, lb.subnets.join(", "));
                if lb.security_groups.is_empty() {
                    change
                } else {
                    change.field("security groups", None, lb.security_groups.join(", "))
                }
            }
            Change::CreateTargetGroup(lb) => PlanChange::new(
                stage,
                Kind::TargetGroup,
                &lb.target_group_name,
                Action::Create,
            )
            .field("port", None, "TCP 443"),
            Change::Listener { model, arn } => PlanChange::new(
                stage,
                Kind::Listener,
                format!("{} TCP 443", model.name),
                if arn.is_some() {
                    Action::Update
                } else {
                    Action::Create
                },
            )
            .field("forward", None, &model.target_group_name),
        };
        vec![change]
    }
}

pub async fn find(cloud: &Cloud, model: &ClusterModel) -> Result<Actual, UpdateError> {
    let client = &cloud.elb;
    let lb = &model.load_balancer;
    // Today's name first, then the one an older cluster may have (model::elb_names).
    let (mut found, mut target_group) = (None, None);
    for name in elb_names("api", &model.cluster) {
        found = find_optional(
            &format!("LoadBalancer {name}"),
            "DescribeLoadBalancers",
            &["LoadBalancerNotFound"],
            || client.describe_load_balancers().names(&name).send(),
        )
        .await?
        .and_then(|o| o.load_balancers().first().cloned());
        if found.is_some() {
            break;
        }
    }
    for name in elb_names("tcp", &model.cluster) {
        target_group = find_optional(
            &format!("TargetGroup {name}"),
            "DescribeTargetGroups",
            &["TargetGroupNotFound"],
            || client.describe_target_groups().names(&name).send(),
        )
        .await?
        .and_then(|o| o.target_groups().first().cloned());
        if target_group.is_some() {
            break;
        }
    }
    let named: Vec<(String, &str)> = [
        (
            format!(
                "LoadBalancer {}",
                found
                    .as_ref()
                    .and_then(|l| l.load_balancer_name())
                    .unwrap_or_default()
            ),
            found.as_ref().and_then(|l| l.load_balancer_arn()),
        ),
        (
            format!(
                "TargetGroup {}",
                target_group
                    .as_ref()
                    .and_then(|t| t.target_group_name())
                    .unwrap_or_default()
            ),
            target_group.as_ref().and_then(|t| t.target_group_arn()),
        ),
    ]
    .into_iter()
    .filter_map(|(resource, arn)| Some((resource, arn?)))
    .collect();
    if !named.is_empty() {
        let described = call("load balancing", "DescribeTags", || {
            client
                .describe_tags()
                .set_resource_arns(Some(named.iter().map(|(_, arn)| arn.to_string()).collect()))
                .send()
        })
        .await?;
        for (resource, arn) in &named {
            let tags = described
                .tag_descriptions()
                .iter()
                .filter(|d| d.resource_arn() == Some(*arn))
                .flat_map(|d| d.tags())
                .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
                .collect();
            check_owned(resource, &tags, &model.cluster)?;
        }
    }
    let load_balancer = found.map(|l| LoadBalancer {
        arn: l.load_balancer_arn().unwrap_or_default().to_string(),
        dns_name: l.dns_name().unwrap_or_default().to_string(),
        scheme: l
            .scheme()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
        security_groups: {
            let mut groups = l.security_groups().to_vec();
            groups.sort();
            groups
        },
    });
    let listeners = match &load_balancer {
        Some(found) => call(
            &format!("Listener {} TCP 443", lb.name),
            "DescribeListeners",
            || {
                client
                    .describe_listeners()
                    .load_balancer_arn(&found.arn)
                    .send()
            },
        )
        .await?
        .listeners()
        .iter()
        .map(|l| Listener {
            arn: l.listener_arn().unwrap_or_default().to_string(),
            port: l.port().unwrap_or_default(),
            forwards_to: l
                .default_actions()
                .iter()
                .filter_map(|a| a.target_group_arn().map(str::to_string))
                .collect(),
        })
        .collect(),
        None => Vec::new(),
    };
    Ok(Actual {
        load_balancer,
        target_group: target_group.and_then(|t| t.target_group_arn().map(str::to_string)),
        listeners,
    })
}

/// A load balancer or target group found by its name is this cluster's only when tagged as owned by it:
/// another cluster's (a name collision, or one made by hand) is never adopted, changed or deleted.
fn check_owned(
    resource: &str,
    tags: &BTreeMap<String, String>,
    cluster: &str,
) -> Result<(), UpdateError> {
    if tags.get(&ownership_tag(cluster)).map(String::as_str) == Some("owned") {
        return Ok(());
    }
    let owners: Vec<&str> = tags
        .iter()
        .filter(|(_, value)| value.as_str() == "owned")
        .filter_map(|(key, _)| key.strip_prefix("kubernetes.io/cluster/"))
        .collect();
    let whose = if owners.is_empty() {
        "is not tagged as any cluster's".to_string()
    } else {
        format!("belongs to cluster {}", owners.join(", "))
    };
    Err(UpdateError::Missing {
        resource: resource.to_string(),
        message: format!(
            "exists with this cluster's name but {whose} (no {}=owned tag): Ballast does not adopt it. Delete \
             or rename it if it is a leftover, or give this cluster another name",
            ownership_tag(cluster)
        ),
    })
}

/// The load balancer's ARN and DNS name and the target group's ARN, of those that exist.
pub fn learn(actual: &Actual, known: &mut Known) {
    if let Some(lb) = &actual.load_balancer {
        known.load_balancer_arn = Some(lb.arn.clone());
        known.load_balancer_dns = Some(lb.dns_name.clone());
    }
    known.target_group_arn = actual.target_group.clone();
}

pub fn diff(model: &ClusterModel, actual: &Actual) -> Result<Vec<Change>, UpdateError> {
    let lb = &model.load_balancer;
    let mut changes = Vec::new();
    let want_scheme = scheme(lb);
    match &actual.load_balancer {
        Some(found) if found.scheme != want_scheme.as_str() => {
            return Err(UpdateError::Immutable {
                resource: format!("LoadBalancer {}", lb.name),
                field: "spec.api.loadBalancer.type",
                from: found.scheme.clone(),
                to: want_scheme.as_str().to_string(),
            });
        }
        Some(found) if found.security_groups != lb.security_groups => {
            return Err(UpdateError::Immutable {
                resource: format!("LoadBalancer {}", lb.name),
                field: "spec.api.loadBalancer.additionalSecurityGroups",
                from: security_groups_text(&found.security_groups),
                to: security_groups_text(&lb.security_groups),
            });
        }
        Some(_) => {}
        None => changes.push(Change::CreateLoadBalancer(lb.clone())),
    }
    if actual.target_group.is_none() {
        changes.push(Change::CreateTargetGroup(lb.clone()));
    }
    let listener = actual.listeners.iter().find(|l| l.port == 443);
    let forwards = listener.is_some_and(|l| {
        actual
            .target_group
            .as_ref()
            .is_some_and(|tg| l.forwards_to.contains(tg))
    });
    if !forwards {
        changes.push(Change::Listener {
            model: lb.clone(),
            arn: listener.map(|l| l.arn.clone()),
        });
    }
    Ok(changes)
}

/// A set of security groups as the refusal names it.
fn security_groups_text(groups: &[String]) -> String {
    if groups.is_empty() {
        "none".to_string()
    } else {
        format!("[{}]", groups.join(", "))
    }
}

pub async fn apply(
    target: &Target<'_>,
    changes: &[Change],
    known: &mut Known,
) -> Result<(), UpdateError> {
    let client = &target.cloud.elb;
    for change in changes {
        match change {
            Change::CreateLoadBalancer(lb) => {
                let tags = elb_tags(target, &lb.name);
                let subnet_ids: Vec<String> = lb
                    .subnets
                    .iter()
                    .filter_map(|s| known.subnet_ids.get(s).cloned())
                    .collect();
                let created = call(
                    &format!("LoadBalancer {}", lb.name),
                    "CreateLoadBalancer",
                    || {
                        client
                            .create_load_balancer()
                            .name(&lb.name)
                            .r#type(elb::LoadBalancerTypeEnum::Network)
                            .scheme(scheme(lb))
                            .set_subnets(Some(subnet_ids.clone()))
                            // Only at creation: an NLB made without security groups can never get one.
                            .set_security_groups(
                                (!lb.security_groups.is_empty())
                                    .then(|| lb.security_groups.clone()),
                            )
                            .set_tags(Some(tags.clone()))
                            .send()
                    },
                )
                .await?;
                let made = created.load_balancers().first();
                known.load_balancer_arn =
                    made.and_then(|l| l.load_balancer_arn()).map(str::to_string);
                known.load_balancer_dns = made.and_then(|l| l.dns_name()).map(str::to_string);
            }
            Change::CreateTargetGroup(lb) => {
                // Tagged like the load balancer: they are one resource to the operator.
                let tags = elb_tags(target, &lb.name);
                let vpc = known.vpc_id.clone().unwrap_or_default();
                let created = call(
                    &format!("TargetGroup {}", lb.target_group_name),
                    "CreateTargetGroup",
                    || {
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
                    },
                )
                .await?;
                known.target_group_arn = created
                    .target_groups()
                    .first()
                    .and_then(|t| t.target_group_arn())
                    .map(str::to_string);
            }
            Change::Listener { model, arn } => {
                apply_listener(target.cloud, model, arn.as_deref(), known).await?
            }
        }
    }
    Ok(())
}

fn elb_tags(target: &Target<'_>, name: &str) -> Vec<elb::Tag> {
    target
        .tags_named(name)
        .iter()
        .map(|(k, v)| elb::Tag::builder().key(k).value(v).build())
        .collect()
}

async fn apply_listener(
    cloud: &Cloud,
    lb: &LoadBalancerModel,
    arn: Option<&str>,
    known: &Known,
) -> Result<(), UpdateError> {
    let client = &cloud.elb;
    let resource = format!("Listener {} TCP 443", lb.name);
    let forward = elb::Action::builder()
        .r#type(elb::ActionTypeEnum::Forward)
        .target_group_arn(known.target_group_arn.clone().unwrap_or_default())
        .build();
    match arn {
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
            let lb_arn = known.load_balancer_arn.clone().unwrap_or_default();
            call(&resource, "CreateListener", || {
                client
                    .create_listener()
                    .load_balancer_arn(&lb_arn)
                    .protocol(elb::ProtocolEnum::Tcp)
                    .port(443)
                    .default_actions(forward.clone())
                    .send()
            })
            .await?;
        }
    }
    Ok(())
}

/// Deletes the load balancer (`delete cluster`): its listeners first (AWS would take them with it; deleting
/// them by name keeps the emulator honest too).
pub async fn delete_load_balancer(
    cloud: &Cloud,
    lb: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    use super::deletion::attempt;
    let label = lb.label();
    let listeners = find_optional(
        &label,
        "DescribeListeners",
        &["LoadBalancerNotFound"],
        || {
            cloud
                .elb
                .describe_listeners()
                .load_balancer_arn(&lb.id)
                .send()
        },
    )
    .await
    .map_err(|error| super::deletion::Failed {
        outcome: super::deletion::Outcome::NotYet,
        error,
    })?;
    for listener in listeners.iter().flat_map(|o| o.listeners()) {
        let Some(arn) = listener.listener_arn() else {
            continue;
        };
        attempt(&label, "DeleteListener", || {
            cloud.elb.delete_listener().listener_arn(arn).send()
        })
        .await?;
    }
    attempt(&label, "DeleteLoadBalancer", || {
        cloud
            .elb
            .delete_load_balancer()
            .load_balancer_arn(&lb.id)
            .send()
    })
    .await
}

/// Deletes the target group (`delete cluster`), once no load balancer or group uses it.
pub async fn delete_target_group(
    cloud: &Cloud,
    group: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    super::deletion::attempt(&group.label(), "DeleteTargetGroup", || {
        cloud
            .elb
            .delete_target_group()
            .target_group_arn(&group.id)
            .send()
    })
    .await
}

/// Removes tag `key` from a load balancer or target group the cluster keeps.
pub async fn remove_tag(
    cloud: &Cloud,
    arn: &str,
    key: &str,
    label: &str,
) -> Result<(), super::deletion::Failed> {
    super::deletion::attempt(label, "RemoveTags", || {
        cloud
            .elb
            .remove_tags()
            .resource_arns(arn)
            .tag_keys(key)
            .send()
    })
    .await
}

/// The load balancers (the API's, and the cloud controller manager's NLBs) and their target groups, and
/// elbv2's own tags on those the cluster keeps.
impl super::task::Delete for LoadBalancerTask {
    fn deletes(&self) -> super::task::Deletes {
        use super::deletion::ResourceKind;
        super::task::Deletes::Kinds(&[ResourceKind::LoadBalancer, ResourceKind::TargetGroup])
    }

    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        use super::deletion::ResourceKind;
        match resource.kind {
            ResourceKind::LoadBalancer => Box::pin(delete_load_balancer(deleting.cloud, resource)),
            ResourceKind::TargetGroup => Box::pin(delete_target_group(deleting.cloud, resource)),
            _ => Box::pin(async move { Err(super::task::not_deleted_here(resource)) }),
        }
    }

    fn untag<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        _kind: super::deletion::ResourceKind,
        resource: &'a super::deletion::Resource,
        key: &'a str,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(async move {
            let label = resource.label();
            remove_tag(deleting.cloud, &resource.id, key, &label).await
        })
    }
}

/// The API's network load balancer, target group and listener, as a [`Task`].
pub struct LoadBalancerTask;

impl Task for LoadBalancerTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.load_balancer
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.load_balancer = actual;
    }

    async fn find(&self, finder: &Finder<'_>, wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
        find(finder.cloud, wanted.model).await
    }

    fn learn(
        &self,
        _wanted: Wanted<'_>,
        actual: &Actual,
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        learn(actual, known);
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
                Change::CreateLoadBalancer(lb) => {
                    let tf = tf_name(&lb.name);
                    let subnets: Vec<String> = lb
                        .subnets
                        .iter()
                        .filter_map(|s| known.subnet_ids.get(s).cloned())
                        .collect();
                    let mut resource = TfResource::new()
                        .attr("internal", lb.internal)
                        .attr("load_balancer_type", "network")
                        .attr("name", lb.name.as_str());
                    if !lb.security_groups.is_empty() {
                        resource = resource.attr("security_groups", values(&lb.security_groups));
                    }
                    terraform.resource(
                        "aws_lb",
                        &tf,
                        resource
                            .attr("subnets", values(&subnets))
                            .attr("tags", string_map(&tags_named(model, &lb.name))),
                    )?;
                    known.load_balancer_arn = Some(reference("aws_lb", &tf, "arn"));
                    terraform.output(
                        "api_lb_dns_name",
                        value(&reference("aws_lb", &tf, "dns_name")),
                    );
                }
                Change::CreateTargetGroup(lb) => {
                    let tf = tf_name(&lb.target_group_name);
                    terraform.resource(
                        "aws_lb_target_group",
                        &tf,
                        TfResource::new()
                            .attr("name", lb.target_group_name.as_str())
                            .attr("port", 443)
                            .attr("protocol", "TCP")
                            .attr("tags", string_map(&tags_named(model, &lb.name)))
                            .attr("target_type", "instance")
                            .attr("vpc_id", value(known.vpc_id.as_deref().unwrap_or_default()))
                            .block("health_check", TfResource::new().attr("protocol", "TCP")),
                    )?;
                    known.target_group_arn = Some(reference("aws_lb_target_group", &tf, "arn"));
                }
                Change::Listener { model: lb, arn } => {
                    if arn.is_some() {
                        return Err(RenderError::NotACreate {
                            resource: format!("Listener {} TCP 443", lb.name),
                            action: "a listener's update",
                        });
                    }
                    terraform.resource(
                        "aws_lb_listener",
                        &tf_name(&format!("{}-443", lb.name)),
                        TfResource::new()
                            .attr(
                                "load_balancer_arn",
                                value(known.load_balancer_arn.as_deref().unwrap_or_default()),
                            )
                            .attr("port", 443)
                            .attr("protocol", "TCP")
                            .block(
                                "default_action",
                                TfResource::new()
                                    .attr(
                                        "target_group_arn",
                                        value(
                                            known.target_group_arn.as_deref().unwrap_or_default(),
                                        ),
                                    )
                                    .attr("type", "forward"),
                            ),
                    )?;
                }
            }
        }
        Ok(())
    }
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

    fn lb_model(groups: &[&str]) -> LoadBalancerModel {
        LoadBalancerModel {
            name: "api-x".into(),
            target_group_name: "tcp-x".into(),
            internal: false,
            subnets: vec!["a".into()],
            security_groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn found(groups: &[&str]) -> Actual {
        Actual {
            load_balancer: Some(LoadBalancer {
                arn: "arn:lb".into(),
                dns_name: "api-x.elb.amazonaws.com".into(),
                scheme: "internet-facing".into(),
                security_groups: groups.iter().map(|g| g.to_string()).collect(),
            }),
            target_group: Some("arn:tg".into()),
            listeners: vec![Listener {
                arn: "arn:listener".into(),
                port: 443,
                forwards_to: vec!["arn:tg".into()],
            }],
        }
    }

    /// The security groups are given at creation and shown in the plan; the same set found is no change; any
    /// other set (added to an NLB made without, removed, or swapped) is refused naming the field, before
    /// anything is applied.
    #[test]
    fn security_groups_are_given_at_creation_and_a_change_is_refused() {
        let config = ballast_state::generate::generate(&ballast_state::generate::ClusterTemplate {
            name: "lb.example.com".into(),
            zones: vec!["us-west-2a".into()],
            ..Default::default()
        })
        .expect("template");
        let state = crate::cloud::model::StateLocation::from_url("s3://state/c").expect("s3");
        let mut model =
            crate::cloud::model::cluster_model(&ballast_state::defaults::complete(&config), &state);
        model.load_balancer = lb_model(&["sg-0aaaaaaa", "sg-0bbbbbbb"]);
        let created = diff(&model, &Actual::default()).expect("a plan");
        let text = format!("{:?}", created[0].planned());
        assert!(text.contains("sg-0aaaaaaa, sg-0bbbbbbb"), "{text}");
        assert!(diff(&model, &found(&["sg-0aaaaaaa", "sg-0bbbbbbb"]))
            .expect("in sync")
            .is_empty());
        for had in [
            &[][..],
            &["sg-0aaaaaaa"][..],
            &["sg-0ccccccc", "sg-0aaaaaaa"][..],
        ] {
            let refused = diff(&model, &found(had)).expect_err("a change");
            assert!(
                refused.to_string().contains(
                    "spec.api.loadBalancer.additionalSecurityGroups cannot be changed in place"
                ),
                "{refused}"
            );
        }
        model.load_balancer = lb_model(&[]);
        assert!(
            diff(&model, &found(&["sg-0aaaaaaa"])).is_err(),
            "the last one cannot go"
        );
        assert!(diff(&model, &found(&[])).expect("in sync").is_empty());
    }

    /// `--target terraform` gives the `aws_lb` its security groups (tests/data/api-security-groups-create's spec),
    /// and none when the spec has none.
    #[tokio::test]
    async fn terraform_gives_the_load_balancer_its_security_groups() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        for (case, expected) in [
            (
                "api-security-groups-create",
                Some(r#"security_groups    = ["sg-0123456789abcdef0", "sg-0aaaaaaa"]"#),
            ),
            ("create-from-nothing", None),
        ] {
            let text = std::fs::read_to_string(dir.join(case).join("spec.yaml")).expect("spec");
            let objects = ballast_state::document::parse_objects(case, &text).expect("parses");
            let config =
                ballast_state::document::config_from_objects(case, objects).expect("a cluster");
            let completed = ballast_state::defaults::complete(&config);
            let state =
                crate::cloud::model::StateLocation::from_url("s3://state/clusters").expect("s3");
            let model = crate::cloud::model::cluster_model(&completed, &state);
            let rendered = crate::cloud::to_terraform::render_terraform(
                &model,
                &completed,
                Some("api.elb.example.com"),
                &Default::default(),
            )
            .await
            .expect("renders");
            let all: String = rendered.files.iter().map(|(_, t)| t.as_str()).collect();
            let lb = all
                .split("resource \"aws_lb\" ")
                .nth(1)
                .and_then(|rest| rest.split("\n}\n").next())
                .expect("an aws_lb");
            match expected {
                Some(line) => assert!(lb.contains(line), "{case}: {lb}"),
                None => assert!(!lb.contains("security_groups"), "{case}: {lb}"),
            }
        }
    }

    #[test]
    fn only_a_load_balancer_tagged_as_owned_by_the_cluster_is_adopted() {
        let ours = tags(&[("kubernetes.io/cluster/a.b.example.com", "owned")]);
        assert!(check_owned("LoadBalancer x", &ours, "a.b.example.com").is_ok());

        let theirs = tags(&[("kubernetes.io/cluster/a-b.example.com", "owned")]);
        let refused = check_owned("LoadBalancer x", &theirs, "a.b.example.com")
            .expect_err("another cluster's load balancer")
            .to_string();
        assert!(
            refused.contains("belongs to cluster a-b.example.com"),
            "{refused}"
        );
        assert!(refused.contains("does not adopt"), "{refused}");

        let shared = tags(&[("kubernetes.io/cluster/a.b.example.com", "shared")]);
        assert!(check_owned("TargetGroup y", &shared, "a.b.example.com").is_err());
        let untagged = check_owned("TargetGroup y", &tags(&[]), "a.b.example.com")
            .expect_err("an untagged target group")
            .to_string();
        assert!(
            untagged.contains("is not tagged as any cluster's"),
            "{untagged}"
        );
    }
}
