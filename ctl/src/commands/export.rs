//! `export kubeconfig`: a context for the cluster in the operator's kubeconfig, with `--admin` a short-lived
//! `system:masters` certificate issued here from the cluster's CA. The merge itself is pure
//! (`crate::kubeconfig`); this module reads the store and AWS and writes the file.

use std::path::{Path, PathBuf};

use ballast_state::keyset::KeysetName;
use ballast_state::spec::{ClusterConfig, Role};
use ballast_store::keystore;
use time::OffsetDateTime;

use super::update::require_s3;
use super::Context;
use crate::cli::{ExportArgs, ExportKubeconfigArgs, ExportWhat};
use crate::cloud::aws::{cluster_instances, ROLE_TAG};
use crate::cloud::kinds::load_balancer;
use crate::cloud::model::cluster_model;
use crate::cloud::{CallLog, Cloud};
use crate::error::{io_error, CommandError};
use crate::kubeconfig::admin::{issue_admin, DEFAULT_ADMIN_VALIDITY};
use crate::kubeconfig::hosts::HOSTS_FILE_ENV;
use crate::kubeconfig::{choose_file, defines_name, merge, ClusterEntry, UserEntry};

pub async fn run(context: &Context, args: ExportArgs) -> Result<(), CommandError> {
    let ExportWhat::Kubeconfig(args) = args.what;
    kubeconfig(context, *args).await
}

async fn kubeconfig(context: &Context, args: ExportKubeconfigArgs) -> Result<(), CommandError> {
    let name = context.cluster_name(args.cluster_name.as_deref())?;
    // Refused before anything is read: a context without a user is of no use (kops refuses it too).
    // clap refuses --admin with --user.
    let user_name = match (&args.admin, &args.user) {
        (Some(_), _) => name.clone(),
        (None, Some(user)) => user.clone(),
        (None, None) => {
            return Err(CommandError::Usage(
                "export kubeconfig needs --admin (a short-lived system:masters certificate issued now) or \
                 --user NAME (a user your kubeconfig already has, e.g. an exec plugin)"
                    .to_string(),
            ))
        }
    };
    let registry = context.registry().await?;
    let completed = registry.load_completed(&name).await?;
    // The CA data is the Kubernetes CA keyset's trusted bundle (docs/keys.md): during a rotation the API
    // server's certificate may be of the old or the new CA.
    let ca_bundle = keystore::ca_bundle(registry.store(), &name, KeysetName::KubernetesCa)
        .await
        .map_err(|source| keys_error(&name, source))?;
    let (server, tls_server_name) = if args.internal {
        (internal_server(&completed).await?, None)
    } else {
        load_balancer_server(&registry, &completed).await?
    };
    let user = match args.admin {
        Some(validity) => {
            let validity = validity.unwrap_or(DEFAULT_ADMIN_VALIDITY);
            // Issued by the keyset's primary, read only for --admin.
            let ca = keystore::ca_in_use(registry.store(), &name, KeysetName::KubernetesCa)
                .await
                .map_err(|source| keys_error(&name, source))?;
            let requester = context
                .writer
                .holder
                .split(" pid")
                .next()
                .unwrap_or("unknown");
            let credential = issue_admin(
                &ca.cert_pem,
                &ca.key_pem,
                &format!("ballast-admin:{requester}"),
                validity,
                OffsetDateTime::now_utc(),
            )
            .map_err(|e| CommandError::Usage(format!("cluster {name}: {e}")))?;
            eprintln!(
                "Issued a system:masters certificate for {requester}, valid for {}.",
                ballast_state::duration::human_duration(validity)
            );
            UserEntry::Certificate {
                name: user_name,
                cert_pem: credential.cert_pem,
                key_pem: credential.key_pem,
            }
        }
        None => UserEntry::Existing { name: user_name },
    };
    let entry = ClusterEntry {
        name: name.clone(),
        server,
        tls_server_name,
        ca_pem: ca_bundle,
        user,
    };
    let file = target_file(args.kubeconfig.as_deref(), &name)?;
    write_merged(&file, &entry)?;
    let checked = match &entry.tls_server_name {
        Some(tls) => {
            format!(", as {HOSTS_FILE_ENV} gives {tls}, its certificate checked against that name")
        }
        None => String::new(),
    };
    eprintln!(
        "Wrote context {name:?} (server {}{checked}) to {} and made it current.",
        entry.server,
        file.display()
    );
    Ok(())
}

fn keys_error(cluster: &str, source: keystore::KeystoreError) -> CommandError {
    CommandError::Keys {
        cluster: cluster.to_string(),
        source: Box::new(source),
    }
}

/// The API load balancer's DNS name, as kubectl reaches it from outside; or, when the hosts file
/// (`BALLAST_HOSTS_FILE`) gives that name an address, the address, with the name the certificate must carry.
async fn load_balancer_server(
    registry: &ballast_store::registry::Registry,
    completed: &ClusterConfig,
) -> Result<(String, Option<String>), CommandError> {
    let location = require_s3(registry)?;
    let model = cluster_model(completed, &location);
    let cloud = connect(completed).await;
    let actual = load_balancer::find(&cloud, &model).await?;
    match actual.load_balancer {
        Some(lb) if !lb.dns_name.is_empty() => {
            crate::kubeconfig::hosts::server_for(&lb.dns_name, 443).map_err(CommandError::Usage)
        }
        _ => Err(CommandError::NotReady(format!(
            "cluster {}: its API load balancer {} does not exist yet: run `ballast update cluster {} --yes` \
             first",
            completed.name(),
            model.load_balancer.name,
            completed.name()
        ))),
    }
}

/// A running control-plane instance's private address (its API server's serving certificate names it), for
/// clients inside the VPC. One instance, not a balanced name: when it goes, export again.
async fn internal_server(completed: &ClusterConfig) -> Result<String, CommandError> {
    let cloud = connect(completed).await;
    let instances = cluster_instances(&cloud, completed.name(), &["running"]).await?;
    let control_plane_role = Role::ControlPlane.tag_value();
    let mut addresses: Vec<&str> = instances
        .iter()
        .filter(|i| {
            i.tags()
                .iter()
                .any(|t| t.key() == Some(ROLE_TAG) && t.value() == Some(control_plane_role))
        })
        .filter_map(|i| i.private_ip_address())
        .collect();
    addresses.sort_unstable();
    match addresses.first() {
        Some(ip) => Ok(format!("https://{ip}:443")),
        None => Err(CommandError::NotReady(format!(
            "cluster {}: no control-plane instance is running, so there is no internal API address yet",
            completed.name()
        ))),
    }
}

async fn connect(completed: &ClusterConfig) -> Cloud {
    let region = completed.cluster.spec.region.clone().unwrap_or_default();
    Cloud::connect(&region, CallLog::new()).await
}

/// `--kubeconfig`, else kubectl's choice from `KUBECONFIG`, else `~/.kube/config`.
fn target_file(flag: Option<&Path>, cluster: &str) -> Result<PathBuf, CommandError> {
    let env = std::env::var("KUBECONFIG").ok();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    choose_file(flag, env.as_deref(), home.as_deref(), |path| {
        read_kubeconfig(path)
            .ok()
            .flatten()
            .map(|text| defines_name(&text, cluster))
    })
    .ok_or_else(|| {
        CommandError::Usage(
            "where should the kubeconfig go? HOME is not set: pass --kubeconfig FILE".to_string(),
        )
    })
}

/// A kubeconfig's text (`None`: there is none yet), read as every file from outside is: a regular file, at most
/// [`MAX_KUBECONFIG_FILE`](ballast_state::limits::MAX_KUBECONFIG_FILE).
fn read_kubeconfig(path: &Path) -> Result<Option<String>, CommandError> {
    use ballast_state::limits::MAX_KUBECONFIG_FILE;
    use ballast_store::local_file::{read_file_bounded, FileReadError};
    let bytes = match read_file_bounded(path, MAX_KUBECONFIG_FILE) {
        Ok(bytes) => bytes,
        Err(FileReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(FileReadError::Io(e)) => {
            return Err(io_error(format!("reading {}", path.display()))(e))
        }
        Err(e) => {
            return Err(CommandError::Usage(format!(
                "kubeconfig {}: {e}; nothing was written (choose another with --kubeconfig FILE)",
                path.display()
            )))
        }
    };
    String::from_utf8(bytes).map(Some).map_err(|_| {
        CommandError::Usage(format!(
            "kubeconfig {}: not UTF-8 text, so not a kubeconfig; nothing was written",
            path.display()
        ))
    })
}

/// Merges into `file` and replaces it atomically with a 0600 file (a symlink's target is what is replaced).
fn write_merged(file: &Path, entry: &ClusterEntry) -> Result<(), CommandError> {
    let file = match std::fs::canonicalize(file) {
        Ok(resolved) => resolved,
        Err(_) => file.to_path_buf(),
    };
    let existing = read_kubeconfig(&file)?;
    let merged =
        merge(existing.as_deref(), entry, &file).map_err(|e| CommandError::Usage(e.to_string()))?;
    // The kubeconfig holds credentials: 0600, and a directory made for it 0700.
    let options = ballast_common::durable::Options::mode(0o600).create_parents(0o700);
    ballast_common::durable::write(&file, merged.as_bytes(), &options).map_err(|e| {
        CommandError::Io {
            what: format!("writing {}: {}", e.path.display(), e.step),
            source: e.source,
        }
    })
}
