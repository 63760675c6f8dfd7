//! `ballast rolling-update cluster`: replacing the instances whose configuration changed.
//!
//! - `decide` (pure): which instances need replacing and why, the order of the groups, when a control-plane
//!   member may go (etcd whole), and each step of a node group's surge; unit-tested.
//! - `observe` (reads): the groups as AWS and the state store show them now, and etcd's health as the
//!   supervisors report it.
//! - `act` (writes): Auto Scaling calls only: sizes, the resume marker tag, TerminateInstanceInAutoScalingGroup.
//! - `drain` (the Kubernetes API, through `kube`): cordon, evictions that respect PodDisruptionBudgets,
//!   node readiness.
//! - `run`: the loop of observe -> decide -> act per group, with progress on stderr.
//!
//! The roll keeps no state of its own between runs: what it needs to resume (a group's original sizes, when a
//! forced roll began) is a tag on the group's Auto Scaling Group, written before the group is changed and
//! removed when its sizes are back, so a roll killed anywhere is finished by the next.

pub mod act;
pub mod decide;
// The drain is shared with the control-plane nodes' termination handler (nodeup/src/termination/).
pub use ballast_drain as drain;
pub mod observe;
pub mod run;

use ballast_store::store::StoreError;

use crate::cloud::error::UpdateError;

/// The tag on an Auto Scaling Group holding its [`decide::RollMarker`] while a roll is in progress.
pub const MARKER_TAG: &str = "ballast.dev/rolling-update";

/// Why a roll stopped.
#[derive(Debug, thiserror::Error)]
pub enum RollError {
    #[error(transparent)]
    Aws(#[from] UpdateError),
    #[error("reading the state store: {0}")]
    Store(#[from] StoreError),
    #[error("reading etcd's health from the state store: {0}")]
    EtcdHealth(#[source] ballast_store::etcd::record::RecordError),
    #[error(transparent)]
    Drain(#[from] drain::DrainError),
    /// Drains of a node batch failed (the batch's drains run together). Those instances were not terminated;
    /// the batch's instances whose drains succeeded were (their nodes held no pods any more).
    #[error("instance group {group}: {failed} of the batch's {batch} instances could not be drained, and were not \
             terminated: {failures}. {terminated}. The roll stopped; run it again once the pods can go")]
    BatchDrain {
        group: String,
        batch: usize,
        failed: usize,
        /// Each failed drain: `i-... (node NAME): why` (the pods left on it, or the call that failed).
        failures: String,
        /// What became of the batch's other instances.
        terminated: String,
    },
    /// The roll would have to take a control-plane member down without a quorum to spare.
    #[error("refusing to roll: {reason}. Nothing was terminated; wait until `ballast validate cluster {cluster}` \
             passes (`ballast etcd status {cluster}` shows each member), then run the roll again")]
    EtcdNotWhole {
        cluster: String,
        reason: decide::EtcdGateError,
    },
    /// Node groups would run a newer configuration than the control plane.
    #[error("refusing to roll node groups before the control plane: {groups} still run an older node spec, and \
             nodes must never be newer than the control plane. Roll them first (run without --instance-group, \
             or add --instance-group for each of them); nothing was terminated")]
    ControlPlaneFirst { groups: String },
    /// A group's `rollingUpdate` cannot be resolved.
    #[error("instance group {group}: spec.rollingUpdate: {message}")]
    Pace {
        group: String,
        message: ballast_state::rolling_update::IntOrPercentError,
    },
    /// A group's Auto Scaling Group is not there.
    #[error("instance group {group}: its AutoScalingGroup {resource} does not exist: run `ballast update cluster \
             {cluster} --yes` first")]
    NoAutoScalingGroup {
        cluster: String,
        group: String,
        resource: String,
    },
    /// The marker tag on a group's Auto Scaling Group is not one this Ballast wrote.
    // `marker` is shown inside the message, so it is not also this error's source (a chain would say it twice).
    #[error("AutoScalingGroup {resource}: its {MARKER_TAG} tag {value:?} is not a roll's record ({marker}): \
             set the group's sizes by hand and delete the tag")]
    BadMarker {
        resource: String,
        value: String,
        marker: decide::RollMarkerError,
    },
    /// A wait ran out.
    #[error("instance group {group}: {what} after {waited}: {why}. The roll stopped; run it again to go on \
             (raise --validation-timeout if the cluster is just slow)")]
    TimedOut {
        group: String,
        what: &'static str,
        waited: String,
        why: String,
    },
    #[error("interrupted (Ctrl-C); run the roll again to finish it")]
    Interrupted,
}

impl RollError {
    /// Refusals and waits that ran out are "not ready" (exit 6); the rest are failures.
    pub fn not_ready(&self) -> bool {
        matches!(
            self,
            RollError::EtcdNotWhole { .. } | RollError::TimedOut { .. }
        )
    }
}
