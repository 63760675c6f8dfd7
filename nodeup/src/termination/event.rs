//! The five kinds of event the cluster's EventBridge rules put into its queue, read into typed notices (pure).
//! Shapes as EventBridge delivers them (the event's envelope: `source`, `detail-type`, `detail`): Auto Scaling's
//! `EC2 Instance-terminate Lifecycle Action`, EC2's `EC2 Spot Instance Interruption Warning`,
//! `EC2 Instance Rebalance Recommendation` and `EC2 Instance State-change Notification`, and AWS Health's
//! `AWS Health Event` of category `scheduledChange` for EC2.

use serde::Deserialize;
use serde_json::Value;

/// Longest message body read (SQS's own limit is 256 KiB; EventBridge's events are a few KiB).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// Most instances one scheduled-change event may name (AWS Health lists the affected entities).
pub const MAX_AFFECTED_INSTANCES: usize = 100;

/// An Auto Scaling lifecycle action waiting for the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleAction {
    pub group: String,
    pub hook: String,
    pub token: String,
    pub instance_id: String,
}

/// What one event tells the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// An instance of a group waits in `Terminating:Wait` for `action` to be completed.
    Terminating(LifecycleAction),
    /// Two minutes' notice that a spot instance is interrupted (`action`: terminate, stop or hibernate).
    SpotInterruption { instance_id: String, action: String },
    /// A spot instance at elevated risk of interruption.
    RebalanceRecommendation { instance_id: String },
    /// An instance changed state (`state`: pending, running, stopping, stopped, shutting-down, terminated).
    StateChange { instance_id: String, state: String },
    /// AWS Health scheduled a change (retirement, reboot, maintenance) for these instances.
    ScheduledChange {
        instance_ids: Vec<String>,
        event_type: String,
    },
    /// A lifecycle event of another transition (a launching hook), or Auto Scaling's test notification.
    OtherLifecycle { transition: String },
}

/// Why a message could not be read; the handler logs it and deletes the message (it never becomes readable).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The body is longer than [`MAX_MESSAGE_BYTES`].
    #[error("message body of {bytes} bytes is longer than {MAX_MESSAGE_BYTES}")]
    TooLarge { bytes: usize },
    /// The body is not JSON.
    #[error("message body is not JSON: {message}")]
    NotJson { message: String },
    /// A field the event's kind needs is missing or not a string.
    #[error("{kind} event: field {field} is missing or not a string")]
    Field { kind: &'static str, field: String },
    /// An event of a source and detail-type the rules never send.
    #[error("event of source {event_source:?} and detail-type {detail_type:?} is not one the cluster's rules send")]
    Unknown {
        event_source: String,
        detail_type: String,
    },
    /// A scheduled change naming more instances than [`MAX_AFFECTED_INSTANCES`].
    #[error("scheduled change names {count} instances, more than {MAX_AFFECTED_INSTANCES}")]
    TooManyInstances { count: usize },
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    source: String,
    #[serde(rename = "detail-type", default)]
    detail_type: String,
    #[serde(default)]
    detail: Value,
}

fn text(detail: &Value, kind: &'static str, field: &str) -> Result<String, EventError> {
    detail
        .get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| EventError::Field {
            kind,
            field: format!("detail.{field}"),
        })
}

/// Reads one message body.
pub fn parse(body: &str) -> Result<Notice, EventError> {
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(EventError::TooLarge { bytes: body.len() });
    }
    let envelope: Envelope = serde_json::from_str(body).map_err(|e| EventError::NotJson {
        message: e.to_string(),
    })?;
    let detail = &envelope.detail;
    match (envelope.source.as_str(), envelope.detail_type.as_str()) {
        ("aws.autoscaling", "EC2 Instance-terminate Lifecycle Action") => {
            const KIND: &str = "lifecycle action";
            let transition = text(detail, KIND, "LifecycleTransition")?;
            if transition != "autoscaling:EC2_INSTANCE_TERMINATING" {
                return Ok(Notice::OtherLifecycle { transition });
            }
            Ok(Notice::Terminating(LifecycleAction {
                group: text(detail, KIND, "AutoScalingGroupName")?,
                hook: text(detail, KIND, "LifecycleHookName")?,
                token: text(detail, KIND, "LifecycleActionToken")?,
                instance_id: text(detail, KIND, "EC2InstanceId")?,
            }))
        }
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => {
            const KIND: &str = "spot interruption";
            Ok(Notice::SpotInterruption {
                instance_id: text(detail, KIND, "instance-id")?,
                action: text(detail, KIND, "instance-action")?,
            })
        }
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => {
            Ok(Notice::RebalanceRecommendation {
                instance_id: text(detail, "rebalance recommendation", "instance-id")?,
            })
        }
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            const KIND: &str = "state change";
            Ok(Notice::StateChange {
                instance_id: text(detail, KIND, "instance-id")?,
                state: text(detail, KIND, "state")?,
            })
        }
        ("aws.health", "AWS Health Event") => {
            const KIND: &str = "scheduled change";
            let event_type = text(detail, KIND, "eventTypeCode")?;
            let entities = detail
                .get("affectedEntities")
                .and_then(Value::as_array)
                .ok_or_else(|| EventError::Field {
                    kind: KIND,
                    field: "detail.affectedEntities".into(),
                })?;
            if entities.len() > MAX_AFFECTED_INSTANCES {
                return Err(EventError::TooManyInstances {
                    count: entities.len(),
                });
            }
            let mut instance_ids = Vec::new();
            for (i, entity) in entities.iter().enumerate() {
                let id = entity
                    .get("entityValue")
                    .and_then(Value::as_str)
                    .ok_or_else(|| EventError::Field {
                        kind: KIND,
                        field: format!("detail.affectedEntities[{i}].entityValue"),
                    })?;
                // Health events also name volumes and other resources: only instances are the handler's.
                if id.starts_with("i-") {
                    instance_ids.push(id.to_string());
                }
            }
            Ok(Notice::ScheduledChange {
                instance_ids,
                event_type,
            })
        }
        (source, detail_type) => {
            // Auto Scaling's test notification, sent when a hook with a notification target is made, has no
            // envelope of EventBridge's: it is the one other message the queue may see.
            if let Some(event) = serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|v| v.get("Event").and_then(Value::as_str).map(str::to_string))
            {
                return Ok(Notice::OtherLifecycle { transition: event });
            }
            Err(EventError::Unknown {
                event_source: source.to_string(),
                detail_type: detail_type.to_string(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Samples in the shapes EventBridge documents (Amazon EC2 Auto Scaling's "EventBridge events" and EC2's and
    // AWS Health's event references), with the fields the handler reads and the ones it ignores.
    const LIFECYCLE: &str = r#"{
      "version": "0", "id": "12345678-1234-1234-1234-123456789012",
      "detail-type": "EC2 Instance-terminate Lifecycle Action", "source": "aws.autoscaling",
      "account": "123456789012", "time": "2026-12-03T00:00:00Z", "region": "us-west-2",
      "resources": ["arn:aws:autoscaling:us-west-2:123456789012:autoScalingGroup:59fe4:autoScalingGroupName/nodes.demo"],
      "detail": {
        "LifecycleActionToken": "87654321-4321-4321-4321-210987654321",
        "AutoScalingGroupName": "nodes.demo", "LifecycleHookName": "ballast-termination",
        "EC2InstanceId": "i-1234567890abcdef0", "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
        "NotificationMetadata": "", "Origin": "AutoScalingGroup", "Destination": "EC2"
      }
    }"#;
    const SPOT: &str = r#"{
      "version": "0", "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
      "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
      "account": "123456789012", "time": "2026-12-03T00:00:00Z", "region": "us-west-2",
      "resources": ["arn:aws:ec2:us-west-2a:instance/i-1234567890abcdef0"],
      "detail": {"instance-id": "i-1234567890abcdef0", "instance-action": "terminate"}
    }"#;
    const REBALANCE: &str = r#"{
      "version": "0", "id": "12345678-1234-1234-1234-123456789012",
      "detail-type": "EC2 Instance Rebalance Recommendation", "source": "aws.ec2",
      "account": "123456789012", "time": "2026-12-03T00:00:00Z", "region": "us-west-2",
      "resources": ["arn:aws:ec2:us-west-2a:instance/i-1234567890abcdef0"],
      "detail": {"instance-id": "i-1234567890abcdef0"}
    }"#;
    const STATE: &str = r#"{
      "version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602",
      "detail-type": "EC2 Instance State-change Notification", "source": "aws.ec2",
      "account": "123456789012", "time": "2026-12-03T00:00:00Z", "region": "us-west-2",
      "resources": ["arn:aws:ec2:us-west-2:123456789012:instance/i-1234567890abcdef0"],
      "detail": {"instance-id": "i-1234567890abcdef0", "state": "shutting-down"}
    }"#;
    const HEALTH: &str = r#"{
      "version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602",
      "detail-type": "AWS Health Event", "source": "aws.health",
      "account": "123456789012", "time": "2026-12-03T00:00:00Z", "region": "us-west-2",
      "resources": ["i-1234567890abcdef0"],
      "detail": {
        "eventArn": "arn:aws:health:us-west-2::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
        "service": "EC2", "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        "eventTypeCategory": "scheduledChange",
        "startTime": "Thu, 10 Dec 2026 00:00:00 GMT",
        "affectedEntities": [{"entityValue": "i-1234567890abcdef0"}, {"entityValue": "vol-0123"}]
      }
    }"#;

    #[test]
    fn the_five_shapes_read_into_notices() {
        assert_eq!(
            parse(LIFECYCLE),
            Ok(Notice::Terminating(LifecycleAction {
                group: "nodes.demo".into(),
                hook: "ballast-termination".into(),
                token: "87654321-4321-4321-4321-210987654321".into(),
                instance_id: "i-1234567890abcdef0".into(),
            }))
        );
        assert_eq!(
            parse(SPOT),
            Ok(Notice::SpotInterruption {
                instance_id: "i-1234567890abcdef0".into(),
                action: "terminate".into()
            })
        );
        assert_eq!(
            parse(REBALANCE),
            Ok(Notice::RebalanceRecommendation {
                instance_id: "i-1234567890abcdef0".into()
            })
        );
        assert_eq!(
            parse(STATE),
            Ok(Notice::StateChange {
                instance_id: "i-1234567890abcdef0".into(),
                state: "shutting-down".into()
            })
        );
        assert_eq!(
            parse(HEALTH),
            Ok(Notice::ScheduledChange {
                instance_ids: vec!["i-1234567890abcdef0".into()],
                event_type: "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED".into()
            })
        );
    }

    #[test]
    fn a_launching_action_and_the_test_notification_are_other_lifecycle_events() {
        // The rule only matches terminations; a launching transition is read, and left alone.
        let launching = LIFECYCLE.replace("EC2_INSTANCE_TERMINATING", "EC2_INSTANCE_LAUNCHING");
        assert_eq!(
            parse(&launching),
            Ok(Notice::OtherLifecycle {
                transition: "autoscaling:EC2_INSTANCE_LAUNCHING".into()
            })
        );
        let test = r#"{"AccountId":"123456789012","Service":"AWS Auto Scaling","Event":"autoscaling:TEST_NOTIFICATION","AutoScalingGroupName":"nodes.demo"}"#;
        assert_eq!(
            parse(test),
            Ok(Notice::OtherLifecycle {
                transition: "autoscaling:TEST_NOTIFICATION".into()
            })
        );
    }

    #[test]
    fn bad_messages_are_refused_naming_what_is_wrong() {
        assert!(matches!(parse("not json"), Err(EventError::NotJson { .. })));
        let no_token = LIFECYCLE.replace("\"LifecycleActionToken\"", "\"Other\"");
        assert_eq!(
            parse(&no_token),
            Err(EventError::Field {
                kind: "lifecycle action",
                field: "detail.LifecycleActionToken".into()
            })
        );
        let numeric = SPOT.replace(
            "\"instance-id\": \"i-1234567890abcdef0\"",
            "\"instance-id\": 7",
        );
        assert_eq!(
            parse(&numeric),
            Err(EventError::Field {
                kind: "spot interruption",
                field: "detail.instance-id".into()
            })
        );
        let unknown = r#"{"source":"aws.s3","detail-type":"Object Created","detail":{}}"#;
        assert!(matches!(parse(unknown), Err(EventError::Unknown { .. })));
        let huge = format!("{{\"x\":\"{}\"}}", "a".repeat(MAX_MESSAGE_BYTES));
        assert!(matches!(parse(&huge), Err(EventError::TooLarge { .. })));
        let entities: Vec<String> = (0..=MAX_AFFECTED_INSTANCES)
            .map(|i| format!("{{\"entityValue\":\"i-{i}\"}}"))
            .collect();
        let many = HEALTH.replace(
            r#"[{"entityValue": "i-1234567890abcdef0"}, {"entityValue": "vol-0123"}]"#,
            &format!("[{}]", entities.join(",")),
        );
        assert_eq!(
            parse(&many),
            Err(EventError::TooManyInstances {
                count: MAX_AFFECTED_INSTANCES + 1
            })
        );
        let bad_entity = HEALTH.replace(r#"{"entityValue": "vol-0123"}"#, r#"{"other": 1}"#);
        assert_eq!(
            parse(&bad_entity),
            Err(EventError::Field {
                kind: "scheduled change",
                field: "detail.affectedEntities[1].entityValue".into()
            })
        );
    }
}
