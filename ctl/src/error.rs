//! The CLI's one error type and its documented exit codes.

use std::process::ExitStatus;

use ballast_state::error::SpecErrors;
use ballast_store::etcd::backup::BackupError;
use ballast_store::registry::RegistryError;
use ballast_store::store::StoreError;

/// Exit codes, as documented in `ballast --help` and README.md.
pub mod exit_code {
    pub const FAILURE: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const INVALID_SPEC: i32 = 3;
    pub const CONFLICT: i32 = 4;
    pub const NOT_FOUND: i32 = 5;
    /// `validate cluster` found a failing check, or a `--wait` ran out.
    pub const NOT_READY: i32 = 6;
    /// `toolbox dump` wrote what it could; its index says what is missing and why.
    pub const PARTIAL: i32 = 7;
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// A flag or argument is missing or wrong.
    #[error("{0}")]
    Usage(String),
    /// The spec (from flags, a file or an edit) is invalid.
    #[error("{0}")]
    InvalidSpec(SpecErrors),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Update(#[from] crate::cloud::engine::UpdateError),
    /// Boxed: the teardown's errors are large, and every command's `Result` carries this type.
    #[error(transparent)]
    Teardown(Box<crate::cloud::teardown::TeardownError>),
    /// `delete cluster --unregister` would orphan AWS resources the cluster still owns.
    #[error(
        "cluster {cluster} still owns {} AWS resource(s): {}; nothing was removed. Run `ballast delete cluster \
         {cluster} --yes` to delete them with the cluster, or add --force to unregister anyway (they keep \
         running and billing, and its CA keys go)",
        resources.len(),
        resources.join(", ")
    )]
    ResourcesRemain {
        cluster: String,
        resources: Vec<String>,
    },
    /// Reading an input file or running the editor failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// An etcd backup or restore of `cluster` failed or was refused; `hint` says what to do.
    #[error("cluster {cluster}: {source}{hint}")]
    Etcd {
        cluster: String,
        #[source]
        source: Box<BackupError>,
        hint: String,
    },
    /// A keyset could not be read, or a rotation stage was refused (docs/keys.md).
    #[error("cluster {cluster}: {source}")]
    Keys {
        cluster: String,
        #[source]
        source: Box<ballast_store::keystore::KeystoreError>,
    },
    /// The cluster is not (yet) as asked: a failing check, or a wait that ran out.
    #[error("{0}")]
    NotReady(String),
    /// A rolling update stopped or was refused.
    #[error(transparent)]
    Roll(#[from] crate::roll::RollError),
    /// Rendering data for stdout as `format` (YAML or JSON) failed.
    #[error("rendering {format}: {source}")]
    Render {
        format: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The editor of `edit` did not exit successfully: nothing was saved.
    #[error("the editor {editor:?} exited with {status}: nothing was saved")]
    EditorFailed { editor: String, status: ExitStatus },
    /// An edited file holds no object or several: an edit changes exactly the one object it opened.
    #[error("the edited file holds {count} objects: edit exactly one ({object})")]
    EditNotOneObject { count: usize, object: String },
    /// An edit changed the kind or name of its object (`object` became `became`).
    #[error("the edit turned {object} into {became}: kind and name cannot be changed by an edit")]
    EditRenamed { object: String, became: String },
    /// A damaged object stopped the command; `advice` says how to mend it in this store.
    #[error("{source}\nto mend it: {advice}")]
    Damaged {
        #[source]
        source: Box<CommandError>,
        advice: String,
    },
    /// `toolbox dump` wrote a partial dump: these are missing (the index says why).
    #[error(
        "the dump is partial: {} missing ({}); {where_} says why, and holds the rest",
        missing.len(),
        missing.join(", ")
    )]
    PartialDump {
        missing: Vec<String>,
        where_: String,
    },
    /// `get clusters` listed every cluster it could read; these could not be (each was reported above).
    #[error(
        "{} cluster(s) in {store} could not be read: {}; each is reported above with the object that is \
         damaged",
        clusters.len(),
        clusters.join(", ")
    )]
    DamagedClusters {
        clusters: Vec<String>,
        store: String,
    },
}

impl CommandError {
    pub fn exit_code(&self) -> i32 {
        use exit_code::*;
        match self {
            CommandError::Usage(_) => USAGE,
            CommandError::InvalidSpec(_) => INVALID_SPEC,
            CommandError::Registry(e) => match e {
                RegistryError::Invalid(_) | RegistryError::Corrupt(_) => INVALID_SPEC,
                RegistryError::ClusterExists { .. }
                | RegistryError::InstanceGroupExists { .. }
                | RegistryError::Locked { .. }
                | RegistryError::Conflict(_) => CONFLICT,
                RegistryError::ClusterNotFound { .. }
                | RegistryError::InstanceGroupNotFound { .. } => NOT_FOUND,
                RegistryError::InvalidClusterName(_)
                | RegistryError::Store(StoreError::NotConfigured | StoreError::InvalidUrl { .. }) => {
                    USAGE
                }
                _ => FAILURE,
            },
            CommandError::Store(StoreError::NotConfigured | StoreError::InvalidUrl { .. }) => USAGE,
            CommandError::Store(StoreError::Conflict { .. }) => CONFLICT,
            CommandError::ResourcesRemain { .. } => CONFLICT,
            CommandError::Update(
                crate::cloud::engine::UpdateError::Immutable { .. }
                | crate::cloud::engine::UpdateError::SecurityGroups { .. },
            ) => INVALID_SPEC,
            CommandError::Update(crate::cloud::engine::UpdateError::Store(
                StoreError::Conflict { .. },
            )) => CONFLICT,
            // Resources under the cluster's name that another cluster's id binds (or none does).
            CommandError::Update(crate::cloud::engine::UpdateError::Identity(_)) => CONFLICT,
            CommandError::Teardown(e)
                if matches!(**e, crate::cloud::teardown::TeardownError::Identity(_)) =>
            {
                CONFLICT
            }
            CommandError::Etcd { source, .. } => match source.as_ref() {
                BackupError::UnknownBackup { .. } => NOT_FOUND,
                BackupError::ClusterHealthy { .. } | BackupError::Raced => CONFLICT,
                BackupError::BadDuration(_)
                | BackupError::Store(StoreError::NotConfigured | StoreError::InvalidUrl { .. }) => {
                    USAGE
                }
                BackupError::Store(StoreError::Conflict { .. }) => CONFLICT,
                // Corrupted and BadMetadata included: the backup is unusable, choose another.
                _ => FAILURE,
            },
            CommandError::Keys { source, .. } => {
                use ballast_state::keyset::StageError;
                use ballast_store::keystore::KeystoreError;
                match source.as_ref() {
                    KeystoreError::Stage(StageError::UnknownKey { .. })
                    | KeystoreError::Missing { .. }
                    | KeystoreError::SshKeyMissing { .. } => NOT_FOUND,
                    KeystoreError::SshKeyDiffers { .. } => CONFLICT,
                    KeystoreError::Stage(StageError::Damaged { .. })
                    | KeystoreError::Corrupt { .. } => FAILURE,
                    KeystoreError::Stage(_) => CONFLICT,
                    KeystoreError::Store { source, .. }
                        if matches!(source.as_ref(), StoreError::Conflict { .. }) =>
                    {
                        CONFLICT
                    }
                    KeystoreError::Store { .. } | KeystoreError::Generate(_) => FAILURE,
                }
            }
            CommandError::NotReady(_) => NOT_READY,
            CommandError::PartialDump { .. } => PARTIAL,
            CommandError::Roll(e) if e.not_ready() => NOT_READY,
            CommandError::Roll(crate::roll::RollError::ControlPlaneFirst { .. }) => USAGE,
            CommandError::Roll(_) => FAILURE,
            CommandError::Damaged { source, .. } => source.exit_code(),
            CommandError::Store(_)
            | CommandError::Update(_)
            | CommandError::Teardown(_)
            | CommandError::Io { .. }
            | CommandError::Render { .. }
            | CommandError::EditorFailed { .. }
            | CommandError::EditNotOneObject { .. }
            | CommandError::EditRenamed { .. }
            | CommandError::DamagedClusters { .. } => FAILURE,
        }
    }
}

impl From<crate::cloud::teardown::TeardownError> for CommandError {
    fn from(error: crate::cloud::teardown::TeardownError) -> Self {
        CommandError::Teardown(Box::new(error))
    }
}

pub fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CommandError {
    let what = what.into();
    move |source| CommandError::Io { what, source }
}

/// A failure to render data for stdout as YAML.
pub fn yaml_error(source: yaml_serde::Error) -> CommandError {
    CommandError::Render {
        format: "YAML",
        source: Box::new(source),
    }
}

/// A failure to render data for stdout as JSON.
pub fn json_error(source: serde_json::Error) -> CommandError {
    CommandError::Render {
        format: "JSON",
        source: Box::new(source),
    }
}
