//! `get secrets|keypairs` and `rotate`: the cluster's keysets (docs/keys.md). What is printed is metadata only
//! (kind, id, state, dates): no private value is ever read for output.

use ballast_state::keyset::{Keyset, KeysetName, Stage};
use ballast_state::keystore::{self, KeystoreError};
use ballast_state::registry::Registry;
use serde::Serialize;

use super::{require_cluster, Context};
use crate::cli::{GetKeysArgs, KeysetArg, OutputFormat, RotateArgs, StageArg};
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

/// `keysets` as a table, YAML documents (the keyset objects as stored) or JSON (pure).
pub fn render_keysets(keysets: &[Keyset], format: OutputFormat) -> Result<String, CommandError> {
    match format {
        OutputFormat::Table => {
            let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_string());
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
                .collect();
            Ok(output::table(
                &["NAME", "KIND", "ID", "STATE", "CREATED", "EXPIRES"],
                &rows,
            ))
        }
        OutputFormat::Yaml => output::yaml_documents(keysets),
        OutputFormat::Json => output::json(keysets),
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
    render_keysets(&keysets, args.output)
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

/// What to run when the secrets cannot be rewritten through the API from here.
pub const REWRITE_BY_HAND: &str =
    "kubectl get secrets --all-namespaces -o json | kubectl replace -f -";

pub async fn rotate(context: &Context, args: RotateArgs) -> Result<(), CommandError> {
    let name = context.cluster_name(None)?;
    let keyset = keyset_of(args.keyset);
    let stage = stage_of(args.stage);
    if keyset == KeysetName::KubernetesCa {
        // Refused rather than half done: see docs/keys.md, "Not yet".
        return Err(CommandError::Usage(
            "rotating kubernetes-ca is not built yet: workers' roles may read only the original CA \
             certificate (a new one would stop them booting) and `export kubeconfig` issues from the original \
             CA; nothing was changed (docs/keys.md)"
                .to_string(),
        ));
    }
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
            || keystore::generate(&name, keyset).map_err(KeystoreError::from),
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
        let table = render_keysets(&[keyset.clone()], OutputFormat::Table).expect("table");
        assert_eq!(
            table,
            "NAME      KIND      ID                 STATE     CREATED                EXPIRES\n\
             etcd-ca   Keypair   0123456789abcdef   primary   2026-01-01T00:00:00Z   2036-01-01T00:00:00Z\n\
             etcd-ca   Keypair   fedcba9876543210   next      -                      -\n"
        );
        let yaml = render_keysets(&[keyset], OutputFormat::Yaml).expect("yaml");
        assert!(yaml.contains("state: next"), "{yaml}");
    }
}
