//! Termination the cluster sees coming (`spec.terminationHandling`, `docs/termination.md`), the part both sides
//! share: the queue's and the hook's names (`update cluster` makes them, the control-plane nodes' handler reads
//! and completes them), the control-plane node spec's settings, and the request by which the handler asks a
//! control-plane node's own etcd supervisor to hand leadership away and stop its member before the instance goes.

use serde::{Deserialize, Serialize};

use crate::digest::sha256_hex;
use crate::duration::parse_duration;
use crate::spec::{ClusterConfig, TerminationHandlingSpec};

/// The terminating lifecycle hook's name on every group (the handler completes actions of this hook only).
pub const HOOK_NAME: &str = "ballast-termination";
/// SQS's longest queue name.
const MAX_QUEUE_NAME: usize = 80;

/// `name` if it fits in `max` characters, else its first characters, `-` and 8 hex digits of its sha256: still
/// the cluster's, still unique.
pub fn fit(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let hash = &sha256_hex(name.as_bytes())[..8];
    let keep: String = name
        .chars()
        .take(max.saturating_sub(hash.len() + 1))
        .collect();
    format!("{keep}-{hash}")
}

/// The queue's name: the cluster's with `.` as `-` (SQS allows no dots), `-termination`, at most 80 characters.
pub fn queue_name(cluster: &str) -> String {
    fit(
        &format!("{}-termination", cluster.replace('.', "-")),
        MAX_QUEUE_NAME,
    )
}

/// What a control-plane node's termination handler reads from its node spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TerminationHandlingSettings {
    /// The cluster's queue, in the node's region and account.
    pub queue_name: String,
    /// The lifecycle hook whose actions the handler completes.
    pub lifecycle_hook: String,
    /// The hook's heartbeat timeout: a long drain records a heartbeat well within it.
    pub heartbeat_seconds: u32,
}

/// The hooks' heartbeat when the spec names none: kops's 300 s.
pub const DEFAULT_HEARTBEAT_SECONDS: u32 = 300;

/// The hooks' heartbeat in seconds: `heartbeatTimeout` (validated to 30s..2h), else 300.
pub fn heartbeat_seconds(spec: &TerminationHandlingSpec) -> u32 {
    spec.heartbeat_timeout
        .as_deref()
        .and_then(|d| parse_duration(d).ok())
        .map_or(DEFAULT_HEARTBEAT_SECONDS, |d| {
            u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
        })
}

/// The control-plane node spec's settings: `None` unless the spec turns the handling on.
pub fn settings(completed: &ClusterConfig) -> Option<TerminationHandlingSettings> {
    let spec = &completed.cluster.spec;
    if !TerminationHandlingSpec::enabled_in(spec) {
        return None;
    }
    Some(TerminationHandlingSettings {
        queue_name: queue_name(&completed.cluster.metadata.name),
        lifecycle_hook: HOOK_NAME.to_string(),
        heartbeat_seconds: spec
            .termination_handling
            .as_ref()
            .map_or(DEFAULT_HEARTBEAT_SECONDS, heartbeat_seconds),
    })
}

/// `etcd/stop-requests/<instance-id>.json`: the handler asks the control-plane node `instance_id` to hand its
/// etcd leadership away (when it leads) and stop its member, keeping its data and membership for the replacement.
/// Written by whichever control-plane node took the queue's message; acted on by the target's own supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdStopRequest {
    pub instance_id: String,
    /// Why (the event's kind), for the target's log.
    pub reason: String,
    /// RFC 3339, the requester's clock (shown only).
    pub requested_at: String,
    /// How long after its stop the member resumes if its instance is still running (nodeup not told to shut
    /// down): the end a stop prepares for did not come (a forged or mistaken event, an action completed with
    /// ABANDON). Absent: [`DEFAULT_RESUME_AFTER_SECONDS`]; clamped to [`MIN_RESUME_AFTER_SECONDS`]..=
    /// [`MAX_RESUME_AFTER_SECONDS`] ([`resume_after`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_after_seconds: Option<u32>,
    /// Set by the target once its member is stopped; the handler then completes the lifecycle action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<EtcdStopped>,
}

/// A stopped member resumes this long after its stop when its instance is still running: beyond a spot
/// interruption's two minutes' notice and an instance's shutdown once its lifecycle action is completed, and the
/// queue's retention (a message is handled within it or never).
pub const DEFAULT_RESUME_AFTER_SECONDS: u32 = 300;
/// The shortest bound a request may ask for: the handler's own wait for the answer and its completion fit in it.
pub const MIN_RESUME_AFTER_SECONDS: u32 = 10;
/// The longest: the hooks' longest heartbeat (2 h).
pub const MAX_RESUME_AFTER_SECONDS: u32 = 7200;

/// How long after its stop on `request` a member whose instance did not go resumes.
pub fn resume_after(request: &EtcdStopRequest) -> std::time::Duration {
    let seconds = request
        .resume_after_seconds
        .unwrap_or(DEFAULT_RESUME_AFTER_SECONDS)
        .clamp(MIN_RESUME_AFTER_SECONDS, MAX_RESUME_AFTER_SECONDS);
    std::time::Duration::from_secs(u64::from(seconds))
}

/// How the target's member stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdStopped {
    /// RFC 3339, the target's clock.
    pub at: String,
    /// `follower`, `handed-over to <member id>`, `not running`, or why a leader stopped without a handoff.
    pub outcome: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_keep_to_sqs_limits_and_stay_unique() {
        assert_eq!(
            queue_name("demo.example.com"),
            "demo-example-com-termination"
        );
        let long = format!("{}.example.com", "a".repeat(90));
        let name = queue_name(&long);
        assert_eq!(name.len(), 80);
        assert_ne!(name, queue_name(&format!("{}.example.org", "a".repeat(90))));
    }

    #[test]
    fn a_stop_request_reads_back_as_written_and_refuses_unknown_fields() {
        let request = EtcdStopRequest {
            instance_id: "i-1".into(),
            reason: "lifecycle action".into(),
            requested_at: "2026-01-01T00:00:00Z".into(),
            resume_after_seconds: Some(60),
            stopped: Some(EtcdStopped {
                at: "2026-01-01T00:00:01Z".into(),
                outcome: "follower".into(),
            }),
        };
        let text = serde_json::to_string(&request).expect("serializes");
        assert_eq!(
            serde_json::from_str::<EtcdStopRequest>(&text).expect("reads"),
            request
        );
        let error = serde_json::from_str::<EtcdStopRequest>(
            r#"{"instanceId":"i-1","reason":"r","requestedAt":"t","extra":1}"#,
        )
        .expect_err("unknown field");
        assert!(error.to_string().contains("extra"), "{error}");
    }

    #[test]
    fn a_stopped_member_resumes_within_a_bound_whatever_the_request_asks() {
        let mut request = EtcdStopRequest {
            instance_id: "i-1".into(),
            reason: "r".into(),
            requested_at: "t".into(),
            resume_after_seconds: None,
            stopped: None,
        };
        assert_eq!(resume_after(&request).as_secs(), 300);
        request.resume_after_seconds = Some(0);
        assert_eq!(resume_after(&request).as_secs(), 10);
        request.resume_after_seconds = Some(u32::MAX);
        assert_eq!(resume_after(&request).as_secs(), 7200);
        request.resume_after_seconds = Some(45);
        assert_eq!(resume_after(&request).as_secs(), 45);
    }
}
