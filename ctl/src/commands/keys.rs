//! `get secrets|keypairs`, `rotate` and `create secret`: the cluster's keysets (docs/keys.md). What is printed is
//! metadata only (kind, id, state, dates): no private value is ever read for output.

use ballast_state::ca_import;
use ballast_state::keyset::{Keyset, KeysetName, Stage};
use ballast_state::limits::{ReadLimit, MAX_PEM_FILE, MAX_SSH_PUBLIC_KEY_FILE};
use ballast_state::ssh_key::{self, SshPublicKey};
use ballast_store::keystore::{self, KeystoreError};
use ballast_store::local_file::read_file_bounded;
use ballast_store::registry::Registry;
use serde::Serialize;

use super::{require_cluster, Context};
use crate::cli::{
    CreateKeypairArgs, CreateSecretArgs, CreateSecretWhat, CreateSshKeyArgs, DeleteSecretArgs,
    DeleteSecretWhat, GetKeysArgs, KeysetArg, OutputFormat, RotateArgs, StageArg,
};
use crate::cloud::model::StateLocation;
use crate::error::CommandError;
use crate::output;

/// One row of `get secrets`: a key's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyRow {
    pub keyset: String,
    pub kind: String,
    pub id: String,
    pub state: String,
    pub created: Option<String>,
    pub expires: Option<String>,
}

/// The rows of `keysets` (pure).
pub fn key_rows(keysets: &[Keyset]) -> Vec<KeyRow> {
    keysets
        .iter()
        .flat_map(|k| {
            k.items.iter().map(|i| KeyRow {
                keyset: k.name.to_string(),
                kind: k.name.kind().to_string(),
                id: i.id.clone(),
                state: i.state.as_str().to_string(),
                created: i.created.clone(),
                expires: i.expires.clone(),
            })
        })
        .collect()
}

/// An operator's SSH public key as listed: its name, type and fingerprint (as `ssh-keygen -l` prints it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SshKeyRow {
    pub kind: String,
    pub name: String,
    pub key_type: String,
    pub fingerprint: String,
}

impl SshKeyRow {
    pub fn new(name: &str, key: &SshPublicKey) -> Self {
        SshKeyRow {
            kind: "SSHPublicKey".to_string(),
            name: name.to_string(),
            key_type: key.key_type().to_string(),
            fingerprint: key.fingerprint(),
        }
    }
}

/// One listed object of `-o yaml|json`: a keyset as stored, or an SSH key's row.
#[derive(Serialize)]
#[serde(untagged)]
enum Listed<'a> {
    Keyset(&'a Keyset),
    Ssh(&'a SshKeyRow),
}

/// `keysets` and the SSH keys `ssh` as a table, YAML documents (the keyset objects as stored) or JSON (pure). An
/// SSH key's row shows its fingerprint only.
pub fn render_secrets(
    keysets: &[Keyset],
    ssh: &[SshKeyRow],
    format: OutputFormat,
) -> Result<String, CommandError> {
    let listed: Vec<Listed<'_>> = keysets
        .iter()
        .map(Listed::Keyset)
        .chain(ssh.iter().map(Listed::Ssh))
        .collect();
    match format {
        OutputFormat::Table => {
            let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_string());
            let ssh_rows = ssh.iter().map(|r| {
                vec![
                    r.name.clone(),
                    r.kind.clone(),
                    r.fingerprint.clone(),
                    "-".to_string(),
                    "-".to_string(),
                    "-".to_string(),
                ]
            });
            let rows: Vec<Vec<String>> = key_rows(keysets)
                .into_iter()
                .map(|r| {
                    vec![
                        r.keyset,
                        r.kind,
                        r.id,
                        r.state,
                        dash(&r.created),
                        dash(&r.expires),
                    ]
                })
                .chain(ssh_rows)
                .collect();
            Ok(output::table(
                &["NAME", "KIND", "ID", "STATE", "CREATED", "EXPIRES"],
                &rows,
            ))
        }
        OutputFormat::Yaml => output::yaml_documents(&listed),
        OutputFormat::Json => output::json(&listed),
    }
}

pub async fn get(
    context: &Context,
    args: GetKeysArgs,
    keypairs_only: bool,
) -> Result<String, CommandError> {
    let name = context.cluster_name(None)?;
    let registry = context.registry().await?;
    require_cluster(&registry, &name).await?;
    let wanted = match args.keyset.as_deref() {
        Some(text) => {
            Some(KeysetName::parse(text).map_err(|e| CommandError::Usage(e.to_string()))?)
        }
        None => None,
    };
    let mut keysets = Vec::new();
    for keyset in KeysetName::ALL {
        let skip =
            wanted.is_some_and(|w| w != keyset) || (keypairs_only && keyset.kind() != "Keypair");
        if !skip {
            keysets.push(keys_error(
                &name,
                keystore::load(registry.store(), &name, keyset).await,
            )?);
        }
    }
    if keypairs_only && wanted == Some(KeysetName::EncryptionKey) {
        return Err(CommandError::Usage(
            "encryption-key is a secret, not a key pair: `ballast get secrets encryption-key` shows it"
                .to_string(),
        ));
    }
    let keysets: Vec<Keyset> = keysets.into_iter().map(|s| s.keyset).collect();
    let ssh: Vec<SshKeyRow> = if wanted.is_none() && !keypairs_only {
        keys_error(
            &name,
            keystore::ssh_public_keys(registry.store(), &name).await,
        )?
        .iter()
        .map(|stored| SshKeyRow::new(&stored.name, &stored.key))
        .collect()
    } else {
        Vec::new()
    };
    render_secrets(&keysets, &ssh, args.output)
}

fn keys_error<T>(cluster: &str, result: Result<T, KeystoreError>) -> Result<T, CommandError> {
    result.map_err(|source| CommandError::Keys {
        cluster: cluster.to_string(),
        source: Box::new(source),
    })
}

fn keyset_of(arg: KeysetArg) -> KeysetName {
    match arg {
        KeysetArg::KubernetesCa => KeysetName::KubernetesCa,
        KeysetArg::EtcdCa => KeysetName::EtcdCa,
        KeysetArg::ServiceAccount => KeysetName::ServiceAccount,
        KeysetArg::EncryptionKey => KeysetName::EncryptionKey,
    }
}

fn stage_of(arg: StageArg) -> Stage {
    match arg {
        StageArg::Add => Stage::Add,
        StageArg::Promote => Stage::Promote,
        StageArg::Rewrite => Stage::Rewrite,
        StageArg::Drop => Stage::Drop,
    }
}

pub async fn rotate(context: &Context, args: RotateArgs) -> Result<(), CommandError> {
    let name = context.cluster_name(None)?;
    let keyset = keyset_of(args.keyset);
    let stage = stage_of(args.stage);
    if args.rewritten_by_hand && stage != Stage::Rewrite {
        return Err(CommandError::Usage(
            "--rewritten-by-hand goes with --stage rewrite only".to_string(),
        ));
    }
    let registry = context.registry().await?;
    require_cluster(&registry, &name).await?;
    if stage == Stage::Rewrite && keyset == KeysetName::EncryptionKey && !args.rewritten_by_hand {
        // Checked first so that a rewrite out of order is refused before any secret is touched.
        let stored = keys_error(&name, keystore::load(registry.store(), &name, keyset).await)?;
        keys_error(
            &name,
            stored
                .keyset
                .stage(stage, args.id.as_deref(), rewrite_adds_no_key)
                .map_err(KeystoreError::from),
        )?;
        super::rewrite::rewrite_secrets(&name).await?;
    }
    let report = keys_error(
        &name,
        keystore::run_stage(
            registry.store(),
            &name,
            keyset,
            stage,
            args.id.as_deref(),
            || ballast_state::key_material::generate(&name, keyset).map_err(KeystoreError::from),
        )
        .await,
    )?;
    eprintln!("{}", report.summary);
    if stage == Stage::Rewrite {
        eprintln!(
            "The node specs do not change at this stage: no roll is needed. Next: `ballast rotate {keyset} \
             --stage drop`."
        );
        return Ok(());
    }
    carry_to_node_specs(&registry, &name, keyset, stage).await
}

/// `create secret keypair|sshpublickey`: an operator's CA imported as a keyset's next key; an SSH public key
/// stored for nodeup to install.
pub async fn create_secret(context: &Context, args: CreateSecretArgs) -> Result<(), CommandError> {
    match args.what {
        CreateSecretWhat::Keypair(args) => import_keypair(context, args).await,
        CreateSecretWhat::SshPublicKey(args) => create_ssh_key(context, args).await,
    }
}

/// `delete secret sshpublickey NAME`.
pub async fn delete_secret(context: &Context, args: DeleteSecretArgs) -> Result<(), CommandError> {
    match args.what {
        DeleteSecretWhat::SshPublicKey { key_name } => {
            let name = context.cluster_name(None)?;
            ssh_key::check_name(&key_name).map_err(|e| CommandError::Usage(e.to_string()))?;
            let registry = context.registry().await?;
            require_cluster(&registry, &name).await?;
            let report = keys_error(
                &name,
                keystore::delete_ssh_public_key(registry.store(), &name, &key_name).await,
            )?;
            eprintln!("{}", report.summary);
            carry_ssh_keys(&registry, &name).await
        }
    }
}

/// `create secret sshpublickey [NAME] --pubkey FILE [--replace]`: the key checked whole before the store is
/// opened, then stored as `ssh/NAME.pub` and carried into every node spec.
async fn create_ssh_key(context: &Context, args: CreateSshKeyArgs) -> Result<(), CommandError> {
    let name = context.cluster_name(None)?;
    ssh_key::check_name(&args.key_name)
        .map_err(|e| CommandError::Usage(format!("{e}; nothing was stored")))?;
    let flag = format!("--pubkey {}", args.pubkey.display());
    let text = read_input("--pubkey", &args.pubkey, MAX_SSH_PUBLIC_KEY_FILE)?;
    let key = SshPublicKey::parse(&text)
        .map_err(|e| CommandError::Usage(format!("{flag}: {e}; nothing was stored")))?;
    drop(text);
    let registry = context.registry().await?;
    require_cluster(&registry, &name).await?;
    let report = keys_error(
        &name,
        keystore::put_ssh_public_key(registry.store(), &name, &args.key_name, &key, args.replace)
            .await,
    )?;
    eprintln!("{}", report.summary);
    carry_ssh_keys(&registry, &name).await
}

/// Writes the node specs (and launch templates) that list the SSH keys, as `update cluster --yes`, and says
/// what installs them and whether port 22 is open.
async fn carry_ssh_keys(registry: &Registry, name: &str) -> Result<(), CommandError> {
    let completed = registry.load_completed(name).await?;
    let ssh_access = completed
        .cluster
        .spec
        .ssh_access
        .clone()
        .unwrap_or_default();
    let keys = keys_error(
        name,
        keystore::ssh_public_keys(registry.store(), name).await,
    )?;
    if StateLocation::from_url(&registry.store().url()).is_none() {
        eprintln!(
            "This state store is not S3, so there are no node specs to write: `ballast update cluster` builds \
             clusters from an S3 state store."
        );
    } else {
        super::update::update_cluster(registry, name, true, false, false)
            .await
            .map_err(|e| {
                CommandError::NotReady(format!(
                    "the SSH public keys are stored, but the node specs were not written: {e}; run `ballast \
                     update cluster {name} --yes` (or this command again) to write them"
                ))
            })?;
        eprintln!(
            "The node specs list {} SSH public key(s). Run `ballast rolling-update cluster {name} --yes` to \
             replace the instances: nodeup writes them to /root/.ssh/authorized_keys.",
            keys.len()
        );
    }
    if !keys.is_empty() && ssh_access.is_empty() {
        eprintln!(
            "Port 22 is closed: the key will be installed, but no one can reach it until spec.sshAccess lists a \
             CIDR (`ballast edit cluster {name}`, then `ballast update cluster {name} --yes`)."
        );
    }
    Ok(())
}

/// Reads an operator's file for `create secret` (a regular file, at most `limit`), naming it (and the flag)
/// when it cannot be read.
fn read_input(
    flag: &str,
    path: &std::path::Path,
    limit: ReadLimit,
) -> Result<String, CommandError> {
    let bytes = read_file_bounded(path, limit).map_err(|e| {
        CommandError::Usage(format!(
            "{flag} {}: {e}; nothing was stored",
            path.display()
        ))
    })?;
    String::from_utf8(bytes).map_err(|_| {
        let wanted = if flag == "--pubkey" {
            "an OpenSSH public key; give the .pub file (e.g. ~/.ssh/id_ed25519.pub)"
        } else {
            "PEM; give the PEM file"
        };
        CommandError::Usage(format!(
            "{flag} {}: not text, so not {wanted}; nothing was stored",
            path.display()
        ))
    })
}

async fn import_keypair(context: &Context, args: CreateKeypairArgs) -> Result<(), CommandError> {
    let name = context.cluster_name(None)?;
    let keyset = KeysetName::parse(&args.keyset)
        .map_err(|e| CommandError::Usage(format!("{e}; nothing was stored")))?;
    if !matches!(keyset, KeysetName::KubernetesCa | KeysetName::EtcdCa) {
        return Err(CommandError::Usage(format!(
            "{keyset} cannot be imported: `create secret keypair` takes a CA (kubernetes-ca or etcd-ca); rotate \
             {keyset} with `ballast rotate {keyset} --stage add`; nothing was stored"
        )));
    }
    // Checked whole before the store is opened: a bad file stores nothing.
    let cert_text = read_input("--cert", &args.cert, MAX_PEM_FILE)?;
    let key_text = read_input("--key", &args.key, MAX_PEM_FILE)?;
    let imported = ca_import::check_ca(
        &format!("--cert {}", args.cert.display()),
        &cert_text,
        &format!("--key {}", args.key.display()),
        &key_text,
        time::OffsetDateTime::now_utc().unix_timestamp(),
    )
    .map_err(|e| CommandError::Usage(format!("{e}; nothing was stored")))?;
    drop(key_text);
    let registry = context.registry().await?;
    require_cluster(&registry, &name).await?;
    let report = keys_error(
        &name,
        keystore::import_ca(registry.store(), &name, keyset, imported).await,
    )?;
    eprintln!("{}", report.summary);
    carry_to_node_specs(&registry, &name, keyset, Stage::Add).await
}

/// Writes the node specs (and launch templates) that carry the keyset's stage, as `update cluster --yes`: run
/// whether or not the stage changed anything, so a rotation whose update failed is finished by running it again.
async fn carry_to_node_specs(
    registry: &Registry,
    name: &str,
    keyset: KeysetName,
    stage: Stage,
) -> Result<(), CommandError> {
    if StateLocation::from_url(&registry.store().url()).is_none() {
        eprintln!(
            "This state store is not S3, so there are no node specs to write: `ballast update cluster` builds \
             clusters from an S3 state store."
        );
        return Ok(());
    }
    super::update::update_cluster(registry, name, true, false, false)
        .await
        .map_err(|e| {
            CommandError::NotReady(format!(
                "the {keyset} stage {} is recorded, but the node specs were not written: {e}; run `ballast \
                 update cluster {name} --yes` (or this command again) to write them",
                stage.as_str()
            ))
        })?;
    let next = match (keyset, stage) {
        (_, Stage::Add) => "promote",
        (KeysetName::EncryptionKey, Stage::Promote) => "rewrite",
        (_, Stage::Promote) => "drop",
        _ => "add (when the next rotation is due)",
    };
    eprintln!(
        "The node specs carry the {keyset} stage {}. Run `ballast rolling-update cluster {name} --yes` to \
         replace the instances, then `ballast rotate {keyset} --stage {next}`.",
        stage.as_str()
    );
    Ok(())
}

/// The check of a rewrite stage never adds a key.
fn rewrite_adds_no_key() -> ballast_state::keyset::KeysetItem {
    ballast_state::keyset::KeysetItem {
        id: String::new(),
        created: None,
        expires: None,
        state: ballast_state::keyset::KeyState::Next,
        original: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_state::keyset::{KeyState, KeysetItem};

    #[test]
    fn the_table_lists_metadata_only() {
        let mut keyset = Keyset::new(
            KeysetName::EtcdCa,
            KeysetItem {
                id: "0123456789abcdef".into(),
                created: Some("2026-01-01T00:00:00Z".into()),
                expires: Some("2036-01-01T00:00:00Z".into()),
                state: KeyState::Primary,
                original: true,
            },
        );
        keyset.items.push(KeysetItem {
            id: "fedcba9876543210".into(),
            created: None,
            expires: None,
            state: KeyState::Next,
            original: false,
        });
        let table = render_secrets(&[keyset.clone()], &[], OutputFormat::Table).expect("table");
        assert_eq!(
            table,
            "NAME      KIND      ID                 STATE     CREATED                EXPIRES\n\
             etcd-ca   Keypair   0123456789abcdef   primary   2026-01-01T00:00:00Z   2036-01-01T00:00:00Z\n\
             etcd-ca   Keypair   fedcba9876543210   next      -                      -\n"
        );
        let yaml = render_secrets(&[keyset], &[], OutputFormat::Yaml).expect("yaml");
        assert!(yaml.contains("state: next"), "{yaml}");
    }
}
