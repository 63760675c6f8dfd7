//! The `localcloud` command's one error type and its exit codes.

use std::path::PathBuf;
use std::time::Duration;

use crate::aws::IamBootstrapError;
use crate::emulator::EmulatorError;
use crate::state::StateError;

/// Failures of a `localcloud` command; each maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum LocalCloudError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Emulator(#[from] EmulatorError),
    #[error(transparent)]
    Iam(#[from] IamBootstrapError),
    /// The nodeup binary does not exist.
    #[error("nodeup binary not found at {0}: build it (cargo build -p nodeup) or pass --nodeup")]
    NodeupMissing(PathBuf),
    /// `run` found another live runner on the same state directory.
    #[error(
        "a local cloud is already running from {dir} (runner PID {pid}): `localcloud down` first"
    )]
    AlreadyRunning { dir: PathBuf, pid: u32 },
    /// The background runner did not become ready.
    #[error("the local cloud did not start: {reason}\n--- last lines of {log} ---\n{tail}")]
    NotReady {
        reason: NotReadyReason,
        log: PathBuf,
        tail: String,
    },
    /// No such instance in the state directory (its log cannot be opened).
    #[error("no instance {instance} in this local cloud (see `localcloud status`)")]
    UnknownInstance {
        instance: String,
        #[source]
        source: std::io::Error,
    },
    /// Something is still running or listening after `down`: one entry per survivor.
    #[error("after down, still alive: {}", .0.join("; "))]
    Leftovers(Vec<String>),
    /// The runner cannot read its own `/proc` entry, so it cannot record who it is for `down`.
    #[error("reading our own /proc entry: missing")]
    OwnProcessUnreadable,
    /// A command-line option that does not fit the others.
    #[error("{0}")]
    Usage(String),
    /// The machines of `--instances machines` could not be set up.
    #[error(transparent)]
    Machines(#[from] crate::machines::MachineInstanceError),
    /// An image of `--machine-image` could not be registered as an AMI.
    #[error("registering machine image {name} as an AMI: {message}")]
    RegisterImage { name: String, message: String },
    /// Other I/O.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// Why `up` gave up on the runner it started.
#[derive(Debug)]
pub enum NotReadyReason {
    /// The runner exited before its ready line; `status` is its exit status.
    RunnerExited { status: String },
    /// No ready line in time.
    Timeout(Duration),
}

impl std::fmt::Display for NotReadyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotReadyReason::RunnerExited { status } => write!(f, "the runner exited ({status})"),
            NotReadyReason::Timeout(timeout) => write!(f, "not ready within {timeout:?}"),
        }
    }
}

impl LocalCloudError {
    /// Exit codes: 1 usage/state, 2 not ready, 3 emulator or IAM, 4 leftovers after down.
    pub fn exit_code(&self) -> i32 {
        match self {
            LocalCloudError::NotReady { .. } => 2,
            LocalCloudError::Emulator(_) | LocalCloudError::Iam(_) => 3,
            LocalCloudError::Leftovers(_) => 4,
            _ => 1,
        }
    }
}

/// Wraps an I/O error with what was being done.
pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LocalCloudError {
    let what = what.into();
    move |source| LocalCloudError::Io { what, source }
}
