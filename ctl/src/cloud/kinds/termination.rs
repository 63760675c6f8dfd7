//! Termination the cluster sees coming (`spec.terminationHandling`, `docs/termination.md`): the cluster's SQS
//! queue, the EventBridge rules that put AWS's warnings into it, and a terminating lifecycle hook on every Auto
//! Scaling group, as kops renders them for its node termination handler in queue mode.
//!
//! - The queue (`<cluster with dashes>-termination`): SSE with SQS's own keys, messages kept 300 s (kops's
//!   figure: a warning older than that is about an instance already gone), and a queue policy that lets only
//!   EventBridge and SQS send, and only from this cluster's rules (`aws:SourceArn`).
//! - Five rules (`<cluster>-<Rule>`), each with the queue as its one target: an Auto Scaling group's terminating
//!   lifecycle action (only this cluster's groups, by name), a spot interruption warning, a rebalance
//!   recommendation, an instance state change and an AWS Health scheduled change for EC2.
//! - A hook named [`HOOK_NAME`] on every group: `autoscaling:EC2_INSTANCE_TERMINATING`, the spec's heartbeat,
//!   default result CONTINUE (an instance whose action nobody completes still goes, after the heartbeat).
//!
//! Nothing here is read or called when the spec does not turn the handling on, so clusters without it make no
//! extra AWS call; turning it off after it was on leaves the three in place (not built yet: `docs/termination.md`
//! says what to delete by hand). `delete cluster` deletes the queue and rules (`crate::cloud::teardown`); the
//! hooks go with their groups.

use std::collections::BTreeMap;

use aws_sdk_autoscaling::types::LifecycleHook;
use ballast_state::spec::{ClusterConfig, TerminationHandlingSpec};
// The names are shared with the control-plane nodes' handler (ballast_state::termination).
use ballast_state::termination::fit;
pub use ballast_state::termination::queue_name;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::deletion::{attempt, Failed, Resource, ResourceKind};
use super::task::{Finder, Task, Wanted};
use super::{ActualState, Known, Target};
use crate::cloud::aws::{call, find as find_call, ownership_tag};
use crate::cloud::error::UpdateError;
use crate::cloud::model::ClusterModel;
use crate::cloud::plan::{
    or_known_after_apply, Action, Change as PlanChange, Kind, Planned, Stage,
};
use crate::cloud::terraform::{
    jsonencode, reference, string_map, tf_name, value, RenderError, Resource as TfResource,
    Terraform,
};

/// The terminating lifecycle hook's name on every group (the handler completes actions of this hook only).
pub use ballast_state::termination::HOOK_NAME;
/// How long the queue keeps a message: kops's 300 s.
pub const MESSAGE_RETENTION_SECS: u32 = 300;
/// EventBridge's longest rule name.
const MAX_RULE_NAME: usize = 64;
/// The rules' target id (one target per rule: the queue).
pub const TARGET_ID: &str = "termination-queue";

/// What AWS warns of, one rule each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Warning {
    /// An Auto Scaling group's terminating lifecycle action (scale-in, a roll, AZ rebalancing, a replaced unhealthy
    /// instance): the event the hooks make.
    AsgLifecycle,
    /// Two minutes' notice that a spot instance is taken back.
    SpotInterruption,
    /// A spot instance at elevated risk of interruption.
    RebalanceRecommendation,
    /// An instance stopping or terminated (by anyone: the console, the API).
    InstanceStateChange,
    /// AWS Health's scheduled change of an instance (retirement, maintenance).
    InstanceScheduledChange,
}

impl Warning {
    pub const ALL: [Warning; 5] = [
        Warning::AsgLifecycle,
        Warning::SpotInterruption,
        Warning::RebalanceRecommendation,
        Warning::InstanceStateChange,
        Warning::InstanceScheduledChange,
    ];

    /// The rule's name suffix, kops's where kops has the rule.
    pub fn suffix(self) -> &'static str {
        match self {
            Warning::AsgLifecycle => "ASGLifecycle",
            Warning::SpotInterruption => "SpotInterruption",
            Warning::RebalanceRecommendation => "RebalanceRecommendation",
            Warning::InstanceStateChange => "InstanceStateChange",
            Warning::InstanceScheduledChange => "InstanceScheduledChange",
        }
    }

    /// The rule's event pattern. The lifecycle rule names this cluster's groups, so the queue hears no other
    /// cluster's scale-ins; EC2's warnings carry no group, and the handler drops those of instances that are not
    /// the cluster's.
    pub fn pattern(self, group_names: &[String]) -> Value {
        match self {
            Warning::AsgLifecycle => json!({
                "source": ["aws.autoscaling"],
                "detail-type": ["EC2 Instance-terminate Lifecycle Action"],
                "detail": {"AutoScalingGroupName": group_names},
            }),
            Warning::SpotInterruption => json!({
                "source": ["aws.ec2"],
                "detail-type": ["EC2 Spot Instance Interruption Warning"],
            }),
            Warning::RebalanceRecommendation => json!({
                "source": ["aws.ec2"],
                "detail-type": ["EC2 Instance Rebalance Recommendation"],
            }),
            Warning::InstanceStateChange => json!({
                "source": ["aws.ec2"],
                "detail-type": ["EC2 Instance State-change Notification"],
            }),
            Warning::InstanceScheduledChange => json!({
                "source": ["aws.health"],
                "detail-type": ["AWS Health Event"],
                "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
            }),
        }
    }
}

/// A rule's name: `<cluster>-<Rule>`, at most 64 characters.
pub fn rule_name(cluster: &str, warning: Warning) -> String {
    fit(&format!("{cluster}-{}", warning.suffix()), MAX_RULE_NAME)
}

/// A rule's ARN in the queue's account, region and partition (`arn:P:sqs:R:A:NAME` gives `arn:P:events:R:A:`).
pub fn rule_arn(queue_arn: &str, rule: &str) -> Option<String> {
    let mut parts = queue_arn.splitn(6, ':');
    let (Some("arn"), Some(partition), Some("sqs"), Some(region), Some(account)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    Some(format!(
        "arn:{partition}:events:{region}:{account}:rule/{rule}"
    ))
}

/// The queue's policy: EventBridge (and SQS, as kops allows) may send, and only from these rules; no one else
/// may send at all (the handler's role receives and deletes through its own policy, never this one).
pub fn queue_policy(queue_arn: &str, rule_arns: &[String]) -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "TheClusterRulesSendWarnings",
            "Effect": "Allow",
            "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
            "Action": "sqs:SendMessage",
            "Resource": queue_arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": rule_arns}},
        }],
    })
}

/// Whether the spec turns the handling on, and its hooks' heartbeat in seconds.
fn settings(completed: &ClusterConfig) -> Option<i32> {
    let spec = &completed.cluster.spec;
    if !TerminationHandlingSpec::enabled_in(spec) {
        return None;
    }
    // One reading of heartbeatTimeout for the hooks and the handler's heartbeats (ballast_state::termination).
    let heartbeat = spec.termination_handling.as_ref().map_or(
        ballast_state::termination::DEFAULT_HEARTBEAT_SECONDS,
        ballast_state::termination::heartbeat_seconds,
    );
    Some(i32::try_from(heartbeat).unwrap_or(i32::MAX))
}

fn group_names(model: &ClusterModel) -> Vec<String> {
    let mut names: Vec<String> = model
        .groups
        .iter()
        .map(|g| g.resource_name.clone())
        .collect();
    names.sort();
    names
}

// ------------------------------------------------------------------------------------------------------------
// The queue
// ------------------------------------------------------------------------------------------------------------

/// The queue as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FoundQueue {
    pub url: String,
    pub arn: String,
    /// Its policy, as JSON text (none: no policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    pub sse: bool,
    pub retention_secs: u32,
    /// Whether it carries this cluster's ownership tag: a queue of that name without it is not Ballast's.
    pub owned: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueActual {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<FoundQueue>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueChange {
    Create {
        name: String,
    },
    /// Its attributes (policy, encryption, retention) set to what the cluster wants.
    Attributes {
        name: String,
        url: String,
        arn: String,
        fields: Vec<(&'static str, Option<String>, String)>,
    },
}

impl Planned for QueueChange {
    fn planned(&self) -> Vec<PlanChange> {
        let change = match self {
            QueueChange::Create { name } => {
                PlanChange::new(Stage::SecurityAndIam, Kind::SqsQueue, name, Action::Create)
                    .field("encryption", None, "SQS-managed (SSE-SQS)")
                    .field("messageRetention", None, format!("{MESSAGE_RETENTION_SECS}s"))
                    .field(
                        "policy",
                        None,
                        "SendMessage by events.amazonaws.com/sqs.amazonaws.com from the cluster's rules only",
                    )
            }
            QueueChange::Attributes { name, fields, .. } => {
                let mut change =
                    PlanChange::new(Stage::SecurityAndIam, Kind::SqsQueue, name, Action::Update);
                for (field, from, to) in fields {
                    change = change.field(field, from.clone(), to.clone());
                }
                change
            }
        };
        vec![change]
    }
}

/// The rule ARNs the policy names, for a queue of this ARN.
fn wanted_policy(cluster: &str, queue_arn: &str) -> Value {
    let arns: Vec<String> = Warning::ALL
        .iter()
        .filter_map(|w| rule_arn(queue_arn, &rule_name(cluster, *w)))
        .collect();
    queue_policy(queue_arn, &arns)
}

async fn find_queue(
    cloud: &crate::cloud::Cloud,
    cluster: &str,
) -> Result<Option<FoundQueue>, UpdateError> {
    let name = queue_name(cluster);
    let resource = format!("SqsQueue {name}");
    let Some(got) = find_call(
        &resource,
        "GetQueueUrl",
        &[
            "AWS.SimpleQueueService.NonExistentQueue",
            "QueueDoesNotExist",
        ],
        || cloud.sqs.get_queue_url().queue_name(&name).send(),
    )
    .await?
    else {
        return Ok(None);
    };
    let Some(url) = got.queue_url().map(str::to_string) else {
        return Ok(None);
    };
    let attributes = call(&resource, "GetQueueAttributes", || {
        cloud
            .sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
            .send()
    })
    .await?;
    let attr = |key: &str| {
        attributes.attributes().and_then(|a| {
            a.iter()
                .find(|(k, _)| k.as_str() == key)
                .map(|(_, v)| v.clone())
        })
    };
    let tags = call(&resource, "ListQueueTags", || {
        cloud.sqs.list_queue_tags().queue_url(&url).send()
    })
    .await?;
    let owned = tags
        .tags()
        .and_then(|t| t.get(&ownership_tag(cluster)))
        .is_some_and(|v| v == "owned");
    Ok(Some(FoundQueue {
        arn: attr("QueueArn").unwrap_or_default(),
        policy: attr("Policy").filter(|p| !p.is_empty()),
        sse: attr("SqsManagedSseEnabled").is_some_and(|v| v == "true")
            || attr("KmsMasterKeyId").is_some_and(|v| !v.is_empty()),
        retention_secs: attr("MessageRetentionPeriod")
            .and_then(|v| v.parse().ok())
            .unwrap_or_default(),
        owned,
        url,
    }))
}

fn diff_queue(cluster: &str, actual: &QueueActual) -> Result<Vec<QueueChange>, UpdateError> {
    let name = queue_name(cluster);
    let Some(found) = &actual.queue else {
        return Ok(vec![QueueChange::Create { name }]);
    };
    if !found.owned {
        return Err(UpdateError::Refused {
            resource: format!("SqsQueue {name}"),
            field: "spec.terminationHandling.enabled",
            message: "exists without this cluster's ownership tag: it is not Ballast's to change; delete or \
                      rename it, or turn termination handling off"
                .to_string(),
        });
    }
    let mut fields = Vec::new();
    let wanted = wanted_policy(cluster, &found.arn);
    let found_policy: Option<Value> = found
        .policy
        .as_deref()
        .and_then(|p| serde_json::from_str(p).ok());
    if found_policy.as_ref() != Some(&wanted) {
        fields.push((
            "policy",
            Some(
                if found_policy.is_some() {
                    "another policy"
                } else {
                    "none"
                }
                .to_string(),
            ),
            "SendMessage from the cluster's rules only".to_string(),
        ));
    }
    if !found.sse {
        fields.push((
            "encryption",
            Some("none".to_string()),
            "SSE-SQS".to_string(),
        ));
    }
    if found.retention_secs != MESSAGE_RETENTION_SECS {
        fields.push((
            "messageRetention",
            Some(format!("{}s", found.retention_secs)),
            format!("{MESSAGE_RETENTION_SECS}s"),
        ));
    }
    if fields.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![QueueChange::Attributes {
        name,
        url: found.url.clone(),
        arn: found.arn.clone(),
        fields,
    }])
}

async fn set_policy(
    target: &Target<'_>,
    resource: &str,
    url: &str,
    arn: &str,
) -> Result<(), UpdateError> {
    let policy = wanted_policy(&target.model.cluster, arn).to_string();
    call(resource, "SetQueueAttributes", || {
        target
            .cloud
            .sqs
            .set_queue_attributes()
            .queue_url(url)
            .attributes(aws_sdk_sqs::types::QueueAttributeName::Policy, &policy)
            .attributes(
                aws_sdk_sqs::types::QueueAttributeName::SqsManagedSseEnabled,
                "true",
            )
            .attributes(
                aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod,
                MESSAGE_RETENTION_SECS.to_string(),
            )
            .send()
    })
    .await?;
    Ok(())
}

async fn apply_queue(
    target: &Target<'_>,
    changes: &[QueueChange],
    known: &mut Known,
) -> Result<(), UpdateError> {
    for change in changes {
        match change {
            QueueChange::Create { name } => {
                let resource = format!("SqsQueue {name}");
                let tags: BTreeMap<String, String> = target.tags_named(name);
                let made = call(&resource, "CreateQueue", || {
                    target
                        .cloud
                        .sqs
                        .create_queue()
                        .queue_name(name)
                        .attributes(
                            aws_sdk_sqs::types::QueueAttributeName::SqsManagedSseEnabled,
                            "true",
                        )
                        .attributes(
                            aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod,
                            MESSAGE_RETENTION_SECS.to_string(),
                        )
                        .set_tags(Some(tags.clone().into_iter().collect()))
                        .send()
                })
                .await?;
                let url = made.queue_url().unwrap_or_default().to_string();
                let attributes = call(&resource, "GetQueueAttributes", || {
                    target
                        .cloud
                        .sqs
                        .get_queue_attributes()
                        .queue_url(&url)
                        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                        .send()
                })
                .await?;
                let arn = attributes
                    .attributes()
                    .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
                    .cloned()
                    .unwrap_or_default();
                set_policy(target, &resource, &url, &arn).await?;
                known.termination_queue_arn = Some(arn);
                known.termination_queue_url = Some(url);
            }
            QueueChange::Attributes { name, url, arn, .. } => {
                set_policy(target, &format!("SqsQueue {name}"), url, arn).await?;
            }
        }
    }
    Ok(())
}

/// The cluster's termination queue as a [`Task`].
pub struct QueueTask;

impl Task for QueueTask {
    type Actual = QueueActual;
    type Change = QueueChange;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s QueueActual {
        &state.termination_queue
    }

    fn keep(&self, state: &mut ActualState, actual: QueueActual) {
        state.termination_queue = actual;
    }

    async fn find(
        &self,
        finder: &Finder<'_>,
        wanted: Wanted<'_>,
    ) -> Result<QueueActual, UpdateError> {
        if settings(wanted.completed).is_none() {
            return Ok(QueueActual::default());
        }
        Ok(QueueActual {
            queue: find_queue(finder.cloud, &wanted.model.cluster).await?,
        })
    }

    fn learn(
        &self,
        _wanted: Wanted<'_>,
        actual: &QueueActual,
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        if let Some(queue) = &actual.queue {
            known.termination_queue_arn = Some(queue.arn.clone());
            known.termination_queue_url = Some(queue.url.clone());
        }
        Ok(())
    }

    fn diff(
        &self,
        wanted: Wanted<'_>,
        _known: &Known,
        actual: &QueueActual,
    ) -> Result<Vec<QueueChange>, UpdateError> {
        if settings(wanted.completed).is_none() {
            return Ok(Vec::new());
        }
        diff_queue(&wanted.model.cluster, actual)
    }

    async fn apply(
        &self,
        target: &Target<'_>,
        changes: &[QueueChange],
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        apply_queue(target, changes, known).await
    }

    fn render_terraform(
        &self,
        wanted: Wanted<'_>,
        changes: &[QueueChange],
        known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        for change in changes {
            let QueueChange::Create { name } = change else {
                return Err(RenderError::NotACreate {
                    resource: format!("SqsQueue {}", queue_name(&wanted.model.cluster)),
                    action: "an update",
                });
            };
            let tf = tf_name(name);
            let tags = super::tags_named(wanted.model, name);
            terraform.resource(
                "aws_sqs_queue",
                &tf,
                TfResource::new()
                    .attr(
                        "message_retention_seconds",
                        i64::from(MESSAGE_RETENTION_SECS),
                    )
                    .attr("name", name.as_str())
                    .attr("sqs_managed_sse_enabled", true)
                    .attr("tags", string_map(&tags)),
            )?;
            let queue_arn = reference("aws_sqs_queue", &tf, "arn");
            let rule_arns: Vec<String> = Warning::ALL
                .iter()
                .map(|w| {
                    reference(
                        "aws_cloudwatch_event_rule",
                        &tf_name(&rule_name(&wanted.model.cluster, *w)),
                        "arn",
                    )
                })
                .collect();
            // The policy names the queue's and the rules' ARNs, known only once they exist: written as
            // `jsonencode({...})` with those as references Terraform resolves (in a plain string they would be
            // escaped, and the policy would name the text `${...}`).
            let policy = jsonencode(&queue_policy(&queue_arn, &rule_arns));
            terraform.resource(
                "aws_sqs_queue_policy",
                &tf,
                TfResource::new()
                    .attr("policy", policy)
                    .attr("queue_url", value(&reference("aws_sqs_queue", &tf, "id"))),
            )?;
            known.termination_queue_arn = Some(queue_arn);
            known.termination_queue_url = Some(reference("aws_sqs_queue", &tf, "id"));
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------------------
// The rules
// ------------------------------------------------------------------------------------------------------------

/// A rule as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FoundRule {
    pub arn: String,
    /// Its event pattern, as JSON text.
    pub pattern: String,
    /// The ARNs of its targets.
    #[serde(default)]
    pub targets: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RulesActual {
    /// By name.
    #[serde(default)]
    pub rules: BTreeMap<String, FoundRule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleChange {
    pub name: String,
    pub warning: Warning,
    /// The pattern the rule gets (JSON text).
    pub pattern: String,
    pub action: Action,
    /// Whether its target must be (re)set: a new rule, or one not targeting the queue.
    pub target: bool,
}

impl Planned for RuleChange {
    fn planned(&self) -> Vec<PlanChange> {
        let mut change = PlanChange::new(
            Stage::SecurityAndIam,
            Kind::EventRule,
            &self.name,
            self.action,
        );
        if self.action == Action::Create {
            change = change.field("pattern", None, &self.pattern);
        } else if !self.pattern.is_empty() {
            change = change.field(
                "pattern",
                Some("another pattern".to_string()),
                &self.pattern,
            );
        }
        if self.target {
            change = change.field("target", None, "the cluster's termination queue");
        }
        vec![change]
    }
}

fn diff_rules(model: &ClusterModel, known: &Known, actual: &RulesActual) -> Vec<RuleChange> {
    let groups = group_names(model);
    let mut changes = Vec::new();
    for warning in Warning::ALL {
        let name = rule_name(&model.cluster, warning);
        let pattern = warning.pattern(&groups);
        let text = pattern.to_string();
        match actual.rules.get(&name) {
            None => changes.push(RuleChange {
                name,
                warning,
                pattern: text,
                action: Action::Create,
                target: true,
            }),
            Some(found) => {
                let same_pattern =
                    serde_json::from_str::<Value>(&found.pattern).ok().as_ref() == Some(&pattern);
                let targeted = known
                    .termination_queue_arn
                    .as_ref()
                    .is_some_and(|arn| found.targets.len() == 1 && found.targets[0] == *arn);
                if !same_pattern || !targeted {
                    changes.push(RuleChange {
                        name,
                        warning,
                        pattern: if same_pattern { String::new() } else { text },
                        action: Action::Update,
                        target: !targeted,
                    });
                }
            }
        }
    }
    changes
}

async fn find_rules(
    cloud: &crate::cloud::Cloud,
    cluster: &str,
) -> Result<RulesActual, UpdateError> {
    let mut rules = BTreeMap::new();
    for warning in Warning::ALL {
        let name = rule_name(cluster, warning);
        let resource = format!("EventRule {name}");
        let Some(rule) = find_call(
            &resource,
            "DescribeRule",
            &["ResourceNotFoundException"],
            || cloud.events.describe_rule().name(&name).send(),
        )
        .await?
        else {
            continue;
        };
        let targets = call(&resource, "ListTargetsByRule", || {
            cloud.events.list_targets_by_rule().rule(&name).send()
        })
        .await?;
        rules.insert(
            name,
            FoundRule {
                arn: rule.arn().unwrap_or_default().to_string(),
                pattern: rule.event_pattern().unwrap_or_default().to_string(),
                targets: targets
                    .targets()
                    .iter()
                    .map(|t| t.arn().to_string())
                    .collect(),
            },
        );
    }
    Ok(RulesActual { rules })
}

async fn apply_rules(
    target: &Target<'_>,
    changes: &[RuleChange],
    known: &Known,
) -> Result<(), UpdateError> {
    let events = &target.cloud.events;
    for change in changes {
        let resource = format!("EventRule {}", change.name);
        let pattern = change
            .warning
            .pattern(&group_names(target.model))
            .to_string();
        let tags: Vec<aws_sdk_eventbridge::types::Tag> = target
            .tags_named(&change.name)
            .into_iter()
            .filter_map(|(k, v)| {
                aws_sdk_eventbridge::types::Tag::builder()
                    .key(k)
                    .value(v)
                    .build()
                    .ok()
            })
            .collect();
        // PutRule creates or updates; tags are only taken at creation.
        call(&resource, "PutRule", || {
            let put = events
                .put_rule()
                .name(&change.name)
                .event_pattern(&pattern)
                .state(aws_sdk_eventbridge::types::RuleState::Enabled)
                .description(format!(
                    "Ballast: {} warnings for cluster {} (docs/termination.md)",
                    change.warning.suffix(),
                    target.model.cluster
                ));
            let put = if change.action == Action::Create {
                put.set_tags(Some(tags.clone()))
            } else {
                put
            };
            put.send()
        })
        .await?;
        if change.target {
            let Some(queue_arn) = &known.termination_queue_arn else {
                return Err(UpdateError::Missing {
                    resource,
                    message: "its target, the cluster's termination queue, does not exist yet; run update cluster \
                              --yes again"
                        .to_string(),
                });
            };
            let target_spec = aws_sdk_eventbridge::types::Target::builder()
                .id(TARGET_ID)
                .arn(queue_arn)
                .build()
                .map_err(|e| UpdateError::Missing {
                    resource: resource.clone(),
                    message: e.to_string(),
                })?;
            let put = call(&resource, "PutTargets", || {
                events
                    .put_targets()
                    .rule(&change.name)
                    .targets(target_spec.clone())
                    .send()
            })
            .await?;
            if put.failed_entry_count() > 0 {
                return Err(UpdateError::Missing {
                    resource,
                    message: format!(
                        "PutTargets failed: {}",
                        put.failed_entries()
                            .iter()
                            .filter_map(|e| e.error_message())
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The queue, once the rules feeding it are gone (they would only refill it).
impl super::task::Delete for QueueTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::Kinds(&[ResourceKind::SqsQueue])
    }

    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(delete_queue(deleting.cloud, resource))
    }
}

/// The cluster's EventBridge rules (and each one's target, the queue) as a [`Task`].
pub struct RulesTask;

impl Task for RulesTask {
    type Actual = RulesActual;
    type Change = RuleChange;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s RulesActual {
        &state.termination_rules
    }

    fn keep(&self, state: &mut ActualState, actual: RulesActual) {
        state.termination_rules = actual;
    }

    async fn find(
        &self,
        finder: &Finder<'_>,
        wanted: Wanted<'_>,
    ) -> Result<RulesActual, UpdateError> {
        if settings(wanted.completed).is_none() {
            return Ok(RulesActual::default());
        }
        find_rules(finder.cloud, &wanted.model.cluster).await
    }

    fn diff(
        &self,
        wanted: Wanted<'_>,
        known: &Known,
        actual: &RulesActual,
    ) -> Result<Vec<RuleChange>, UpdateError> {
        if settings(wanted.completed).is_none() {
            return Ok(Vec::new());
        }
        Ok(diff_rules(wanted.model, known, actual))
    }

    async fn apply(
        &self,
        target: &Target<'_>,
        changes: &[RuleChange],
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        apply_rules(target, changes, known).await
    }

    fn render_terraform(
        &self,
        wanted: Wanted<'_>,
        changes: &[RuleChange],
        known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        let groups = group_names(wanted.model);
        for change in changes {
            if change.action != Action::Create {
                return Err(RenderError::NotACreate {
                    resource: format!("EventRule {}", change.name),
                    action: "an update",
                });
            }
            let tf = tf_name(&change.name);
            let pattern =
                serde_json::to_string_pretty(&change.warning.pattern(&groups)).unwrap_or_default();
            terraform.resource(
                "aws_cloudwatch_event_rule",
                &tf,
                TfResource::new()
                    .attr("event_pattern", pattern.as_str())
                    .attr("name", change.name.as_str())
                    .attr(
                        "tags",
                        string_map(&super::tags_named(wanted.model, &change.name)),
                    ),
            )?;
            let queue_arn = known
                .termination_queue_arn
                .clone()
                .unwrap_or_else(|| or_known_after_apply(None));
            terraform.resource(
                "aws_cloudwatch_event_target",
                &format!("{tf}-Target"),
                TfResource::new()
                    .attr("arn", value(&queue_arn))
                    .attr(
                        "rule",
                        value(&reference("aws_cloudwatch_event_rule", &tf, "id")),
                    )
                    .attr("target_id", TARGET_ID),
            )?;
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------------------
// The lifecycle hooks
// ------------------------------------------------------------------------------------------------------------

/// A group's terminating hook as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FoundHook {
    pub transition: String,
    pub heartbeat_secs: i32,
    pub default_result: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HooksActual {
    /// [`HOOK_NAME`] by group (`<group>.<cluster>`), where the group has it.
    #[serde(default)]
    pub hooks: BTreeMap<String, FoundHook>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookChange {
    /// The Auto Scaling group (`<group>.<cluster>`).
    pub group: String,
    pub heartbeat_secs: i32,
    pub action: Action,
    /// For an update: the heartbeat it had.
    pub from: Option<FoundHook>,
}

impl Planned for HookChange {
    fn planned(&self) -> Vec<PlanChange> {
        let name = format!("{}/{HOOK_NAME}", self.group);
        let change = match self.action {
            Action::Create => PlanChange::new(
                Stage::AutoScalingGroups,
                Kind::LifecycleHook,
                name,
                Action::Create,
            )
            .field("transition", None, "autoscaling:EC2_INSTANCE_TERMINATING")
            .field(
                "heartbeatTimeout",
                None,
                format!("{}s", self.heartbeat_secs),
            )
            .field("defaultResult", None, "CONTINUE"),
            action => {
                let mut change =
                    PlanChange::new(Stage::AutoScalingGroups, Kind::LifecycleHook, name, action);
                if let Some(from) = &self.from {
                    if action == Action::Update {
                        change = change.field(
                            "heartbeatTimeout",
                            Some(format!("{}s", from.heartbeat_secs)),
                            format!("{}s", self.heartbeat_secs),
                        );
                    }
                }
                change
            }
        };
        vec![change]
    }
}

fn found_hook(hook: &LifecycleHook) -> FoundHook {
    FoundHook {
        transition: hook.lifecycle_transition().unwrap_or_default().to_string(),
        heartbeat_secs: hook.heartbeat_timeout().unwrap_or_default(),
        default_result: hook.default_result().unwrap_or_default().to_string(),
    }
}

async fn find_hooks(
    cloud: &crate::cloud::Cloud,
    groups: &[String],
) -> Result<HooksActual, UpdateError> {
    let mut hooks = BTreeMap::new();
    for group in groups {
        let described = call(
            &format!("AutoScalingGroup {group}"),
            "DescribeLifecycleHooks",
            || {
                cloud
                    .autoscaling
                    .describe_lifecycle_hooks()
                    .auto_scaling_group_name(group)
                    .lifecycle_hook_names(HOOK_NAME)
                    .send()
            },
        )
        .await?;
        if let Some(hook) = described
            .lifecycle_hooks()
            .iter()
            .find(|h| h.lifecycle_hook_name() == Some(HOOK_NAME))
        {
            hooks.insert(group.clone(), found_hook(hook));
        }
    }
    Ok(HooksActual { hooks })
}

fn diff_hooks(model: &ClusterModel, heartbeat_secs: i32, actual: &HooksActual) -> Vec<HookChange> {
    let mut changes = Vec::new();
    for group in group_names(model) {
        match actual.hooks.get(&group) {
            None => changes.push(HookChange {
                group,
                heartbeat_secs,
                action: Action::Create,
                from: None,
            }),
            Some(found)
                if found.heartbeat_secs != heartbeat_secs
                    || found.default_result != "CONTINUE"
                    || found.transition != "autoscaling:EC2_INSTANCE_TERMINATING" =>
            {
                changes.push(HookChange {
                    group,
                    heartbeat_secs,
                    action: Action::Update,
                    from: Some(found.clone()),
                })
            }
            Some(_) => {}
        }
    }
    changes
}

async fn put_hook(target: &Target<'_>, change: &HookChange) -> Result<(), UpdateError> {
    call(
        &format!("LifecycleHook {}/{HOOK_NAME}", change.group),
        "PutLifecycleHook",
        || {
            target
                .cloud
                .autoscaling
                .put_lifecycle_hook()
                .auto_scaling_group_name(&change.group)
                .lifecycle_hook_name(HOOK_NAME)
                .lifecycle_transition("autoscaling:EC2_INSTANCE_TERMINATING")
                .heartbeat_timeout(change.heartbeat_secs)
                .default_result("CONTINUE")
                .send()
        },
    )
    .await?;
    Ok(())
}

/// Nothing of their own: a hook goes with its Auto Scaling Group.
impl super::task::Delete for LifecycleHooksTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::With(&[super::deletion::ResourceKind::AutoScalingGroup])
    }

    fn delete<'a>(
        &'a self,
        _deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(async move { Err(super::task::not_deleted_here(resource)) })
    }
}

/// The rules, their target first.
impl super::task::Delete for RulesTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::Kinds(&[ResourceKind::EventRule])
    }

    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(delete_rule(deleting.cloud, resource))
    }
}

/// The groups' terminating lifecycle hooks as a [`Task`] (after the groups: a hook names its group).
pub struct LifecycleHooksTask;

impl Task for LifecycleHooksTask {
    type Actual = HooksActual;
    type Change = HookChange;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s HooksActual {
        &state.lifecycle_hooks
    }

    fn keep(&self, state: &mut ActualState, actual: HooksActual) {
        state.lifecycle_hooks = actual;
    }

    async fn find(
        &self,
        finder: &Finder<'_>,
        wanted: Wanted<'_>,
    ) -> Result<HooksActual, UpdateError> {
        if settings(wanted.completed).is_none() {
            return Ok(HooksActual::default());
        }
        // Only groups that exist can hold a hook; one this run makes has none yet.
        let groups: Vec<String> = group_names(wanted.model)
            .into_iter()
            .filter(|g| finder.found.auto_scaling_groups.groups.contains_key(g))
            .collect();
        find_hooks(finder.cloud, &groups).await
    }

    fn diff(
        &self,
        wanted: Wanted<'_>,
        _known: &Known,
        actual: &HooksActual,
    ) -> Result<Vec<HookChange>, UpdateError> {
        let Some(heartbeat) = settings(wanted.completed) else {
            return Ok(Vec::new());
        };
        Ok(diff_hooks(wanted.model, heartbeat, actual))
    }

    async fn apply(
        &self,
        target: &Target<'_>,
        changes: &[HookChange],
        _known: &mut Known,
    ) -> Result<(), UpdateError> {
        for change in changes {
            put_hook(target, change).await?;
        }
        Ok(())
    }

    fn render_terraform(
        &self,
        _wanted: Wanted<'_>,
        changes: &[HookChange],
        _known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        for change in changes {
            if change.action != Action::Create {
                return Err(RenderError::NotACreate {
                    resource: format!("LifecycleHook {}/{HOOK_NAME}", change.group),
                    action: "an update",
                });
            }
            let group_tf = tf_name(&change.group);
            terraform.resource(
                "aws_autoscaling_lifecycle_hook",
                &tf_name(&format!("{}-{HOOK_NAME}", change.group)),
                TfResource::new()
                    .attr(
                        "autoscaling_group_name",
                        value(&reference("aws_autoscaling_group", &group_tf, "id")),
                    )
                    .attr("default_result", "CONTINUE")
                    .attr("heartbeat_timeout", i64::from(change.heartbeat_secs))
                    .attr(
                        "lifecycle_transition",
                        "autoscaling:EC2_INSTANCE_TERMINATING",
                    )
                    .attr("name", HOOK_NAME),
            )?;
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------------------
// delete cluster
// ------------------------------------------------------------------------------------------------------------

/// The cluster's queue and rules, found by their deterministic names and kept only when tagged `owned` by the
/// cluster (a queue or rule of that name without the tag is someone else's). Six calls, whatever the spec.
pub async fn discover(
    cloud: &crate::cloud::Cloud,
    cluster: &str,
) -> Result<Vec<Resource>, UpdateError> {
    let mut found = Vec::new();
    if let Some(queue) = find_queue(cloud, cluster).await? {
        if queue.owned {
            found.push(Resource::new(
                ResourceKind::SqsQueue,
                &queue.url,
                &queue_name(cluster),
            ));
        }
    }
    let key = ownership_tag(cluster);
    for warning in Warning::ALL {
        let name = rule_name(cluster, warning);
        let resource = format!("EventRule {name}");
        let Some(rule) = find_call(
            &resource,
            "DescribeRule",
            &["ResourceNotFoundException"],
            || cloud.events.describe_rule().name(&name).send(),
        )
        .await?
        else {
            continue;
        };
        let Some(arn) = rule.arn() else {
            continue;
        };
        let tags = call(&resource, "ListTagsForResource", || {
            cloud
                .events
                .list_tags_for_resource()
                .resource_arn(arn)
                .send()
        })
        .await?;
        let tags: BTreeMap<String, String> = tags
            .tags()
            .iter()
            .map(|t| (t.key().to_string(), t.value().to_string()))
            .collect();
        if tags.get(&key).map(String::as_str) == Some("owned") {
            found.push(
                Resource::new(ResourceKind::EventRule, &name, &name).bound_by(&tags, cluster),
            );
        }
    }
    Ok(found)
}

/// Deletes the queue (its id is its URL).
pub async fn delete_queue(cloud: &crate::cloud::Cloud, queue: &Resource) -> Result<(), Failed> {
    attempt(&queue.label(), "DeleteQueue", || {
        cloud.sqs.delete_queue().queue_url(&queue.id).send()
    })
    .await
}

/// Deletes a rule: its target first (EventBridge refuses to delete a rule that has one).
pub async fn delete_rule(cloud: &crate::cloud::Cloud, rule: &Resource) -> Result<(), Failed> {
    attempt(&rule.label(), "RemoveTargets", || {
        cloud
            .events
            .remove_targets()
            .rule(&rule.id)
            .ids(TARGET_ID)
            .send()
    })
    .await?;
    attempt(&rule.label(), "DeleteRule", || {
        cloud.events.delete_rule().name(&rule.id).send()
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_aws_limits_and_stay_the_cluster_s() {
        assert_eq!(
            queue_name("demo.example.com"),
            "demo-example-com-termination"
        );
        assert_eq!(
            rule_name("demo.example.com", Warning::SpotInterruption),
            "demo.example.com-SpotInterruption"
        );
        let long = "nthimdsprocessor.longclustername.example.com";
        let rule = rule_name(long, Warning::InstanceScheduledChange);
        assert_eq!(rule.len(), 64, "{rule}");
        assert!(rule.starts_with("nthimdsprocessor.longclustername.example.com-Instance"));
        // Two long names that differ only past the cut stay apart.
        assert_ne!(
            rule,
            rule_name(long, Warning::InstanceStateChange),
            "the hash tells them apart"
        );
        let very_long = format!("{}.example.com", "a".repeat(90));
        assert_eq!(queue_name(&very_long).len(), 80);
    }

    #[test]
    fn the_queue_policy_lets_only_the_cluster_s_rules_send() {
        let queue = "arn:aws:sqs:us-west-2:111122223333:demo-example-com-termination";
        assert_eq!(
            rule_arn(queue, "demo.example.com-SpotInterruption").as_deref(),
            Some("arn:aws:events:us-west-2:111122223333:rule/demo.example.com-SpotInterruption")
        );
        assert_eq!(rule_arn("not-an-arn", "x"), None);
        let policy = wanted_policy("demo.example.com", queue);
        let statement = &policy["Statement"][0];
        assert_eq!(statement["Action"], "sqs:SendMessage");
        assert_eq!(statement["Resource"], queue);
        assert_eq!(
            statement["Principal"]["Service"],
            json!(["events.amazonaws.com", "sqs.amazonaws.com"])
        );
        let sources = statement["Condition"]["ArnEquals"]["aws:SourceArn"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(sources.len(), Warning::ALL.len());
        assert!(sources.iter().all(|s| s.as_str().is_some_and(
            |s| s.starts_with("arn:aws:events:us-west-2:111122223333:rule/demo.example.com-")
        )));
    }

    #[test]
    fn the_lifecycle_rule_hears_only_the_cluster_s_groups() {
        let groups = vec!["nodes.demo.example.com".to_string()];
        let pattern = Warning::AsgLifecycle.pattern(&groups);
        assert_eq!(pattern["detail"]["AutoScalingGroupName"], json!(groups));
        assert_eq!(
            pattern["detail-type"],
            json!(["EC2 Instance-terminate Lifecycle Action"])
        );
    }
}
