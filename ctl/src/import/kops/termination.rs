//! kops's `spec.nodeTerminationHandler` to Ballast's `spec.terminationHandling` (docs/kops.md, docs/termination.md).
//!
//! kops runs the AWS node termination handler either in queue mode (`enableSQSTerminationDraining`, kops's
//! default: an SQS queue, EventBridge rules and lifecycle hooks) or in IMDS mode (a DaemonSet on every node
//! polling its instance metadata for spot interruptions and scheduled events). Ballast has one way: the queue,
//! its rules and hooks (`spec.terminationHandling.enabled`). Both modes map to it: the queue hears the same
//! spot interruptions and scheduled changes EventBridge sends, plus every Auto Scaling termination, which IMDS
//! mode never sees. What kops's handler does that Ballast's does not is refused by its path.

use ballast_state::spec::{ClusterSpec, TerminationHandlingSpec};
use yaml_serde::Value;

use super::walk::Recorder;

const PATH: &str = "spec.nodeTerminationHandler";

/// Maps the field, recording every sub-field's fate.
pub fn node_termination_handler(r: &mut Recorder<'_>, v: Value, spec: &mut ClusterSpec) {
    let Some(mut f) = r.fields(PATH, v) else {
        return;
    };
    // kops's default for `enabled` is true: the field present means the handler runs.
    let enabled = match f.take("enabled") {
        Some(v) => r.boolean(&format!("{PATH}.enabled"), v),
        None => Some(true),
    };
    if enabled == Some(false) {
        r.dropped(
            PATH,
            "enabled: false: kops runs no termination handler, and Ballast's termination handling stays off",
        );
        f.drain();
        return;
    }
    if enabled.is_none() {
        // Not a boolean: already refused by its path.
        f.drain();
        return;
    }
    r.mapped(
        &format!("{PATH}.enabled"),
        "spec.terminationHandling.enabled: true",
    );
    if let Some(v) = f.take("enableSQSTerminationDraining") {
        let field = format!("{PATH}.enableSQSTerminationDraining");
        match r.boolean(&field, v) {
            Some(true) => r.mapped(&field, "spec.terminationHandling (queue, rules and hooks)"),
            Some(false) => r.mapped(
                &field,
                "spec.terminationHandling: IMDS mode becomes Ballast's queue, which hears the same spot \
                 interruptions and scheduled changes through EventBridge, and Auto Scaling terminations besides",
            ),
            None => {}
        }
    }
    // What Ballast's handling always does: true is what it does, false is refused.
    for (name, what) in [
        (
            "enableSpotInterruptionDraining",
            "a spot interruption warning",
        ),
        ("enableScheduledEventDraining", "a scheduled change"),
    ] {
        if let Some(v) = f.take(name) {
            let field = format!("{PATH}.{name}");
            match r.boolean(&field, v) {
                Some(true) => r.mapped(&field, format!("spec.terminationHandling: {what} is handled")),
                Some(false) => r.refused(
                    &field,
                    format!(
                        "false: Ballast's termination handling always acts on {what}; remove the field, or keep \
                         this cluster on kops"
                    ),
                ),
                None => {}
            }
        }
    }
    // What Ballast's handling never does: false is what it does, true is refused.
    for (name, what) in [
        (
            "enableRebalanceMonitoring",
            "taint nodes on a rebalance recommendation",
        ),
        (
            "enableRebalanceDraining",
            "drain nodes on a rebalance recommendation (a risk, not a termination)",
        ),
        ("enablePrometheusMetrics", "serve Prometheus metrics"),
    ] {
        if let Some(v) = f.take(name) {
            let field = format!("{PATH}.{name}");
            match r.boolean(&field, v) {
                Some(false) => r.dropped(&field, format!("false: Ballast does not {what} either")),
                Some(true) => r.refused(
                    &field,
                    format!(
                        "Ballast's termination handling does not {what}; remove the field, or keep this cluster on \
                         kops"
                    ),
                ),
                None => {}
            }
        }
    }
    r.finish(
        f,
        "a setting of kops's node termination handler pod; Ballast runs no such pod (its handling is the queue, \
         rules and hooks of spec.terminationHandling, docs/termination.md): remove it, or keep this cluster on \
         kops",
    );
    spec.termination_handling = Some(TerminationHandlingSpec {
        enabled: Some(true),
        heartbeat_timeout: None,
    });
}
