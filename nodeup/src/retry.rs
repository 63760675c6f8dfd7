//! nodeup's retry policies, one per kind of wait, all through the workspace's one policy
//! (`ballast_common::retry`: jittered doubling, bounded attempts, a total deadline). A deadline given at run time
//! (a flag, the boot's budget) replaces the one here with `Policy { deadline, ..KIND }`.

use std::time::Duration;

pub use ballast_common::retry::{Failure, Policy};

/// IMDS on the instance itself: quick, since it answers within milliseconds once up (the deadline is the client's).
pub const IMDS: Policy = Policy::new(
    Duration::from_millis(50),
    Duration::from_secs(1),
    Duration::from_secs(30),
);

/// A state store read (S3 from a booting node: credentials may lag, S3 may throttle; the deadline is the boot's).
pub const STORE_READ: Policy = Policy::new(
    Duration::from_millis(100),
    Duration::from_secs(5),
    Duration::from_secs(300),
);

/// How long a booting node waits for its instance role's credentials to appear in IMDS, unless
/// `--credentials-wait` says otherwise.
pub const CREDENTIALS_WAIT: Duration = Duration::from_secs(60);

/// The shortest `--credentials-wait`: one try and one pause.
pub const CREDENTIALS_WAIT_MIN: Duration = Duration::from_secs(1);

/// The longest: the wait holds the boot (and a worker without a role would hold it that long for nothing).
pub const CREDENTIALS_WAIT_MAX: Duration = Duration::from_secs(10 * 60);

/// The instance role's credentials appearing in IMDS after launch.
pub const CREDENTIALS: Policy = Policy::new(
    Duration::from_millis(200),
    Duration::from_secs(5),
    CREDENTIALS_WAIT,
);

/// A worker asking the control plane's bootstrap service for its certificates (the deadline is `--wait`'s).
pub const BOOTSTRAP: Policy = Policy::new(
    Duration::from_millis(250),
    Duration::from_secs(5),
    Duration::from_secs(600),
);

/// One add-on object's server-side apply: a 409, 429 or 5xx, or the API server restarting under us.
pub const ADDON_APPLY: Policy = Policy::new(
    Duration::from_millis(200),
    Duration::from_secs(5),
    Duration::from_secs(60),
)
.with_attempts(6);

/// The add-ons runner's pauses between two probes of a silent API server, and between two rounds after a failure:
/// 2 s doubling to a minute. It never gives up (a control
/// plane's add-ons must land eventually), so only the pauses are used.
pub const ADDON_ROUNDS: Policy = Policy::new(
    Duration::from_secs(2),
    Duration::from_secs(60),
    Duration::MAX,
);
