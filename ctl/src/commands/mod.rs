//! The work of each verb. Every command that changes the state store goes through
//! `ballast_store::registry`, which validates first and writes under the cluster's lock.

mod create;
mod delete;
mod edit;
mod etcd;
mod export;
mod get;
mod import;
mod keys;
mod rewrite;
mod rolling_update;
mod toolbox;
mod update;
mod validate;
mod validate_kube;
mod validate_kube_run;

use std::path::Path;

use ballast_state::document::{parse_spec_file, SpecObject};
use ballast_state::layout::ClusterPaths;
use ballast_store::registry::{Registry, RegistryError, Writer};
use ballast_store::store::posture::{mend_advice, Versioning};
use ballast_store::store::{StateStore, StoreError, StoreOptions};

use crate::cli::{Cli, Command};
use crate::error::{io_error, CommandError};

/// Runs the parsed command.
pub async fn dispatch(cli: Cli, command_line: &str) -> Result<(), CommandError> {
    let context = Context {
        state: cli.state.clone(),
        name: cli.name.clone(),
        kms_key: cli.state_kms_key.clone(),
        lock_wait: cli.lock_wait,
        writer: Writer::current(command_line),
    };
    let result = match cli.command {
        Command::Create(args) => create::run(&context, args).await,
        Command::Replace(args) => create::replace(&context, args).await,
        Command::Get(args) => get::run(&context, args).await,
        Command::Edit(args) => edit::run(&context, args).await,
        Command::Delete(args) => delete::run(&context, args).await,
        Command::Update(args) => update::run(&context, args).await,
        Command::Etcd(args) => etcd::run(&context, args).await,
        Command::Validate(args) => validate::run(&context, args).await,
        Command::RollingUpdate(args) => rolling_update::run(&context, args).await,
        Command::Export(args) => export::run(&context, args).await,
        Command::Import(args) => import::run(&context, args).await,
        Command::Rotate(args) => keys::rotate(&context, args).await,
        Command::Toolbox(args) => toolbox::run(&context, args).await,
        Command::Completion { shell } => {
            let mut command = crate::command();
            clap_complete::generate(shell, &mut command, "ballast", &mut std::io::stdout());
            Ok(())
        }
    };
    with_mend_advice(&context, result).await
}

/// A damaged object's error, with what to do about it in this store: copy back an earlier version when the
/// bucket keeps versions, rewrite it otherwise (docs/security.md). Never a promise of versions that may not exist.
async fn with_mend_advice(
    context: &Context,
    result: Result<(), CommandError>,
) -> Result<(), CommandError> {
    let damaged = matches!(
        result,
        Err(CommandError::Registry(RegistryError::Corrupt(_))
            | CommandError::DamagedClusters { .. })
    );
    if !damaged {
        return result;
    }
    let (url, versioning) = match context.registry().await {
        Ok(registry) => {
            let versioning = match registry.store() {
                StateStore::S3(s3) => s3.versioning().await.map_err(|e| e.to_string()),
                StateStore::File(_) => Ok(Versioning::Off),
            };
            (registry.store().url(), versioning)
        }
        Err(e) => (
            context.state.clone().unwrap_or_default(),
            Err(e.to_string()),
        ),
    };
    let advice = mend_advice(&url, versioning);
    result.map_err(|source| CommandError::Damaged {
        source: Box::new(source),
        advice,
    })
}

/// What every command may need: the store, the cluster name, who is writing.
pub struct Context {
    state: Option<String>,
    name: Option<String>,
    kms_key: Option<String>,
    /// `--lock-wait`: how long a change waits for another writer's lock.
    lock_wait: std::time::Duration,
    writer: Writer,
}

impl Context {
    /// Opens the state store named by --state / BALLAST_STATE.
    pub async fn registry(&self) -> Result<Registry, CommandError> {
        let url = self.state.as_deref().ok_or(StoreError::NotConfigured)?;
        let store = StateStore::open(
            url,
            StoreOptions {
                kms_key_id: self.kms_key.clone(),
                // Counted like every other AWS call (BALLAST_AWS_CALL_LOG, the benchmarks).
                interceptor: Some(crate::cloud::CallLog::new().interceptor()),
            },
        )
        .await?;
        Ok(Registry::new(store).with_lock_wait(self.lock_wait))
    }

    /// The cluster name from a positional argument or --name / BALLAST_CLUSTER_NAME.
    pub fn cluster_name(&self, positional: Option<&str>) -> Result<String, CommandError> {
        match (positional, self.name.as_deref()) {
            (Some(a), Some(b)) if a != b => Err(CommandError::Usage(format!(
                "the cluster is named twice, differently: {a:?} and --name {b:?}"
            ))),
            // One check for every verb, before the name becomes a store prefix or an AWS name.
            (Some(n), _) | (None, Some(n)) => Ok(ClusterPaths::checked(n)
                .map_err(RegistryError::from)?
                .cluster()
                .to_string()),
            (None, None) => Err(CommandError::Usage(
                "which cluster? pass --name NAME or set BALLAST_CLUSTER_NAME".to_string(),
            )),
        }
    }
}

/// Fails with "not found" unless cluster `name` exists (its `cluster.yaml`, the commit point of a create).
pub async fn require_cluster(registry: &Registry, name: &str) -> Result<(), CommandError> {
    let store = registry.store();
    if store
        .get(&ClusterPaths::new(name).cluster_spec())
        .await?
        .is_none()
    {
        return Err(RegistryError::ClusterNotFound {
            cluster: name.to_string(),
            store: store.url(),
        }
        .into());
    }
    Ok(())
}

/// An `--out` directory, checked before any work: a directory or not there yet (made when written), never a file
/// or a device (usage error, naming the flag and the path once).
pub fn check_out_dir(dir: &Path) -> Result<(), CommandError> {
    ballast_store::local_file::check_output_dir(dir)
        .map_err(|e| CommandError::Usage(format!("--out {}: {e}", dir.display())))
}

/// Reads and parses a spec file (`-` for stdin).
pub fn read_objects(path: &Path) -> Result<Vec<SpecObject>, CommandError> {
    // Read no more than the limit (and a byte, to tell a file at the limit from a larger one): a huge file or
    // an endless stream is refused without being held in memory, and a path that is no regular file (a FIFO
    // would block, /dev/zero never ends) is refused by its type.
    use ballast_state::error::{FieldError, SpecErrors};
    use ballast_state::limits::{MAX_SPEC_FILE, MAX_SPEC_FILE_BYTES};
    use ballast_store::local_file::{read_file_bounded, FileReadError};
    let source = path.display().to_string();
    let text = if path == Path::new("-") {
        ballast_state::limits::read_bounded(std::io::stdin(), MAX_SPEC_FILE_BYTES)
            .map_err(io_error("reading stdin"))?
    } else {
        match read_file_bounded(path, MAX_SPEC_FILE) {
            Ok(bytes) => String::from_utf8(bytes).map_err(|_| {
                CommandError::Usage(format!("{source}: is not UTF-8 text, so not a spec file"))
            })?,
            Err(too_large @ FileReadError::TooLarge { .. }) => {
                return Err(CommandError::InvalidSpec(SpecErrors::new(
                    &source,
                    vec![FieldError::new(
                        &source,
                        "",
                        format!("{too_large}: a cluster's spec is a few KiB"),
                    )],
                )))
            }
            Err(FileReadError::NotAFile { kind }) => {
                return Err(CommandError::Usage(format!(
                    "{source}: is {kind}, not a regular file: give a spec file, or `-f -` to read standard input"
                )))
            }
            Err(FileReadError::Io(e)) => return Err(io_error(format!("reading {source}"))(e)),
        }
    };
    parse_spec_file(&source, &text).map_err(CommandError::InvalidSpec)
}
