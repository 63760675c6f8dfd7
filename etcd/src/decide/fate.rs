//! What EC2 says about the instance behind a member, in the words removals and waits are decided (and said) in.

use std::time::Duration;

use super::UNLISTED_GRACE;
use crate::peers::InstanceState;

/// What EC2 says about the instance behind a member, as far as removing the member goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceFate {
    /// Listed terminated (or shutting down): gone for good.
    Terminated { instance_id: String },
    /// Listed by neither the cluster's tags nor its id for at least [`UNLISTED_GRACE`], and the member does not
    /// answer: EC2 forgot it, long after terminating it.
    Unlisted {
        instance_id: String,
        unlisted_for: Duration,
    },
    /// Listed in another state: it may come back (an unreachable one may be partitioned).
    Listed {
        instance_id: String,
        state: InstanceState,
    },
    /// Not listed, but not for [`UNLISTED_GRACE`] yet.
    UnlistedWithinGrace {
        instance_id: String,
        unlisted_for: Duration,
    },
    /// Not listed, but its member answers: an instance whose member answers is not gone.
    UnlistedButAnswers { instance_id: String },
    /// EC2 could not say: the member was never started and no listed instance has its IP, or the lookup by id
    /// failed (an API error), or was not made this round.
    Unknown { label: String },
}

impl InstanceFate {
    /// Whether the member can never come back, so removing it (or forcing a new cluster without it) is safe.
    pub fn is_gone(&self) -> bool {
        matches!(
            self,
            InstanceFate::Terminated { .. } | InstanceFate::Unlisted { .. }
        )
    }

    /// Why the member goes (a removal's reason) or why it stays (a wait's).
    pub fn describe(&self) -> String {
        match self {
            InstanceFate::Terminated { instance_id } => {
                format!("its instance {instance_id} is terminated")
            }
            InstanceFate::Unlisted {
                instance_id,
                unlisted_for,
            } => format!(
                "its instance {instance_id} is no longer listed by EC2 (terminated more than an hour ago: EC2 \
                 lists a terminated instance for about an hour; not listed for {} s)",
                unlisted_for.as_secs()
            ),
            InstanceFate::Listed { instance_id, state } => format!(
                "EC2 lists its instance {instance_id} as not terminated (state {})",
                state.as_str()
            ),
            InstanceFate::UnlistedWithinGrace {
                instance_id,
                unlisted_for,
            } => format!(
                "its instance {instance_id} is not listed by EC2 yet for {} s (waiting for the grace period of \
                 {} s: right after a launch EC2 may not list an instance yet)",
                unlisted_for.as_secs(),
                UNLISTED_GRACE.as_secs()
            ),
            InstanceFate::UnlistedButAnswers { instance_id } => format!(
                "its instance {instance_id} is not listed by EC2 but its member answers: not gone"
            ),
            InstanceFate::Unknown { label } => format!(
                "EC2 does not say what became of the instance behind it ({label}): not listed, and not looked \
                 up by id successfully; unknown is not terminated"
            ),
        }
    }
}
