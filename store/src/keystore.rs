//! Keysets in the state store (`keysets/<name>.yaml`) and their keys' material, read and written with
//! conditional writes. A cluster whose keyset object does not exist yet (every cluster until its first rotation)
//! has a keyset of one primary key, the one `create cluster` made, read from its original objects.
//!
//! A stage writes the new key's material first (objects that did not exist, so nothing is overwritten) and the
//! keyset last, with `MustMatch` on the version it read: the keyset object is the commit point, a lost race
//! changes nothing that a node could use, and a stage that failed half way is simply run again.

use crate::store::{Precondition, StateStore, StoreError, Version};
use ballast_state::ca_import::ImportedCa;
use ballast_state::key_material::{certificate_dates, fingerprint, pem_bundle, NewKey};
use ballast_state::keyset::{
    cert_path, key_path, public_key_path, KeyState, Keyset, KeysetItem, KeysetName, NodeKeys,
    Stage, StageError, StageOutcome,
};
use ballast_state::layout::{ClusterPaths, ENCRYPTION_KEYS_SECRET};
use ballast_state::pki::{EncryptionKeys, PkiError};
use ballast_state::ssh_key::{self, SshPublicKey};
use ballast_state::timestamp::unix_rfc3339;

/// Failures reading or changing a keyset.
#[derive(Debug, thiserror::Error)]
pub enum KeystoreError {
    #[error("{what}: {source}")]
    Store {
        what: String,
        #[source]
        source: Box<StoreError>,
    },
    /// An object the keyset needs is not in the store.
    #[error(
        "{key} is not in the state store: was cluster {cluster} made by `ballast create cluster`?"
    )]
    Missing { cluster: String, key: String },
    /// An object does not parse.
    #[error("{key} is damaged: {problem}; restore it from an earlier version of the bucket")]
    Corrupt { key: String, problem: String },
    #[error(transparent)]
    Stage(#[from] StageError),
    #[error(transparent)]
    Generate(#[from] PkiError),
    /// `create secret sshpublickey NAME` with a key other than the one stored under NAME.
    #[error(
        "SSH public key {name} is already stored with another key ({stored}); nothing was stored. Add --replace \
         to replace it, or store this key under another name"
    )]
    SshKeyDiffers { name: String, stored: String },
    /// `delete secret sshpublickey NAME` of a name with no key.
    #[error("no SSH public key {name} is stored (`ballast get secrets` lists them)")]
    SshKeyMissing { name: String },
}

/// A keyset as read, with the version a change must match (`None`: not stored yet, synthesized).
#[derive(Debug, Clone)]
pub struct StoredKeyset {
    pub keyset: Keyset,
    pub version: Option<Version>,
}

fn store_err(what: impl Into<String>) -> impl FnOnce(StoreError) -> KeystoreError {
    let what = what.into();
    move |source| KeystoreError::Store {
        what,
        source: Box::new(source),
    }
}

async fn read(store: &StateStore, key: &str) -> Result<Option<(Vec<u8>, Version)>, KeystoreError> {
    Ok(store
        .get(key)
        .await
        .map_err(store_err(format!("reading {key}")))?
        .map(|o| (o.data, o.version)))
}

async fn read_required(
    store: &StateStore,
    cluster: &str,
    key: &str,
) -> Result<(Vec<u8>, Version), KeystoreError> {
    read(store, key)
        .await?
        .ok_or_else(|| KeystoreError::Missing {
            cluster: cluster.to_string(),
            key: key.to_string(),
        })
}

fn corrupt(key: &str, problem: impl std::fmt::Display) -> KeystoreError {
    KeystoreError::Corrupt {
        key: key.to_string(),
        problem: problem.to_string(),
    }
}

/// Reads keyset `name` of `cluster`: the stored one, or the one key `create cluster` made.
pub async fn load(
    store: &StateStore,
    cluster: &str,
    name: KeysetName,
) -> Result<StoredKeyset, KeystoreError> {
    let paths = ClusterPaths::new(cluster);
    let key = paths.keyset(name.as_str());
    if let Some((data, version)) = read(store, &key).await? {
        let keyset: Keyset = std::str::from_utf8(&data)
            .map_err(|e| corrupt(&key, e))
            .and_then(|t| yaml_serde::from_str(t).map_err(|e| corrupt(&key, e)))?;
        if keyset.name != name {
            return Err(corrupt(&key, format!("it is the keyset {}", keyset.name)));
        }
        keyset.check()?;
        return Ok(StoredKeyset {
            keyset,
            version: Some(version),
        });
    }
    Ok(StoredKeyset {
        keyset: original_keyset(store, cluster, name).await?,
        version: None,
    })
}

/// The keyset of a cluster never rotated: the key `create cluster` made, primary.
async fn original_keyset(
    store: &StateStore,
    cluster: &str,
    name: KeysetName,
) -> Result<Keyset, KeystoreError> {
    let paths = ClusterPaths::new(cluster);
    let original = |id: String, created: Option<String>, expires: Option<String>| KeysetItem {
        id,
        created,
        expires,
        state: KeyState::Primary,
        original: true,
    };
    let item = match name {
        KeysetName::KubernetesCa | KeysetName::EtcdCa => {
            let key = paths.pki_cert(name.as_str());
            let (data, _) = read_required(store, cluster, &key).await?;
            let pem = String::from_utf8(data).map_err(|e| corrupt(&key, e))?;
            let (created, expires) = certificate_dates(&pem).map_err(|e| corrupt(&key, e))?;
            original(fingerprint(pem.as_bytes()), Some(created), Some(expires))
        }
        KeysetName::ServiceAccount => {
            let key = paths.pki_public_key(name.as_str());
            let (data, _) = read_required(store, cluster, &key).await?;
            let created = store
                .modified_unix(&key)
                .await
                .map_err(store_err(format!("reading {key}")))?
                .map(unix_rfc3339);
            original(fingerprint(&data), created, None)
        }
        KeysetName::EncryptionKey => {
            let key = paths.secret(ENCRYPTION_KEYS_SECRET);
            let (keys, _) = read_encryption_keys(store, cluster).await?;
            let first = keys
                .keys
                .first()
                .ok_or_else(|| corrupt(&key, "it lists no key"))?;
            let created = first
                .name
                .strip_prefix("key-")
                .and_then(|s| s.parse::<i64>().ok())
                .map(unix_rfc3339);
            original(first.name.clone(), created, None)
        }
    };
    Ok(Keyset::new(name, item))
}

async fn read_encryption_keys(
    store: &StateStore,
    cluster: &str,
) -> Result<(EncryptionKeys, Version), KeystoreError> {
    let key = ClusterPaths::new(cluster).secret(ENCRYPTION_KEYS_SECRET);
    let (data, version) = read_required(store, cluster, &key).await?;
    let keys = std::str::from_utf8(&data)
        .map_err(|e| corrupt(&key, e))
        .and_then(|t| yaml_serde::from_str(t).map_err(|e| corrupt(&key, e)))?;
    Ok((keys, version))
}

/// Every keyset of a cluster, in [`KeysetName::ALL`]'s order.
pub async fn load_all(store: &StateStore, cluster: &str) -> Result<Vec<Keyset>, KeystoreError> {
    let mut all = Vec::new();
    for name in KeysetName::ALL {
        all.push(load(store, cluster, name).await?.keyset);
    }
    Ok(all)
}

/// What the node specs must carry: the keysets that were rotated (stored); the others stay as they were. One
/// listing, and a read per rotated keyset only (`update cluster` runs this on every plan).
pub async fn node_keys(store: &StateStore, cluster: &str) -> Result<NodeKeys, KeystoreError> {
    let paths = ClusterPaths::new(cluster);
    let listed = store
        .list(&paths.keysets_prefix())
        .await
        .map_err(store_err(format!("listing {}", paths.keysets_prefix())))?;
    let mut keys = NodeKeys::default();
    for name in KeysetName::ALL {
        if listed.contains(&paths.keyset(name.as_str())) {
            keys.set(name, load(store, cluster, name).await?.keyset.key_use()?);
        }
    }
    keys.ssh_authorized_keys = ssh_public_keys(store, cluster)
        .await?
        .into_iter()
        .map(|stored| stored.key.line())
        .collect();
    Ok(keys)
}

/// An operator's SSH public key as stored (`ssh/<name>.pub`).
#[derive(Debug, Clone)]
pub struct StoredSshKey {
    pub name: String,
    pub key: SshPublicKey,
    pub version: Version,
}

/// Every SSH public key stored for the cluster, by name.
pub async fn ssh_public_keys(
    store: &StateStore,
    cluster: &str,
) -> Result<Vec<StoredSshKey>, KeystoreError> {
    let paths = ClusterPaths::new(cluster);
    let prefix = paths.ssh_prefix();
    let mut listed = store
        .list(&prefix)
        .await
        .map_err(store_err(format!("listing {prefix}")))?;
    listed.sort();
    let mut keys = Vec::new();
    for key in listed {
        let Some(name) = key
            .strip_prefix(&prefix)
            .and_then(|n| n.strip_suffix(".pub"))
            .filter(|n| ssh_key::check_name(n).is_ok())
        else {
            continue;
        };
        if let Some(stored) = ssh_public_key(store, cluster, name).await? {
            keys.push(stored);
        }
    }
    Ok(keys)
}

/// The SSH public key stored as `name`, if any.
pub async fn ssh_public_key(
    store: &StateStore,
    cluster: &str,
    name: &str,
) -> Result<Option<StoredSshKey>, KeystoreError> {
    let key = ClusterPaths::new(cluster).ssh_public_key(name);
    let Some((data, version)) = read(store, &key).await? else {
        return Ok(None);
    };
    let text = String::from_utf8(data).map_err(|e| corrupt(&key, e))?;
    let parsed = SshPublicKey::parse(&text).map_err(|e| corrupt(&key, e))?;
    Ok(Some(StoredSshKey {
        name: name.to_string(),
        key: parsed,
        version,
    }))
}

/// Stores `key` as `name` (a conditional write: created only if absent, replaced only if unchanged since read).
/// The same key again changes nothing (`changed: false`); another key is refused unless `replace`.
pub async fn put_ssh_public_key(
    store: &StateStore,
    cluster: &str,
    name: &str,
    key: &SshPublicKey,
    replace: bool,
) -> Result<StageReport, KeystoreError> {
    let object = ClusterPaths::new(cluster).ssh_public_key(name);
    let existing = ssh_public_key(store, cluster, name).await?;
    let precondition = match &existing {
        Some(stored) if stored.key.same_key(key) => {
            return Ok(StageReport {
                summary: format!(
                    "SSH public key {name} ({}) is already stored: nothing changed.",
                    key.fingerprint()
                ),
                changed: false,
            })
        }
        Some(stored) if !replace => {
            return Err(KeystoreError::SshKeyDiffers {
                name: name.to_string(),
                stored: stored.key.fingerprint(),
            })
        }
        Some(stored) => Precondition::MustMatch(stored.version.clone()),
        None => Precondition::MustNotExist,
    };
    let line = format!("{}\n", key.line());
    store
        .put(&object, line.as_bytes(), &precondition)
        .await
        .map_err(store_err(format!("writing {object}")))?;
    let summary = match existing {
        Some(stored) => format!(
            "SSH public key {name} replaced: {} (was {}).",
            key.fingerprint(),
            stored.key.fingerprint()
        ),
        None => format!(
            "SSH public key {name} stored: {} {} ({} bits).",
            key.key_type(),
            key.fingerprint(),
            key.bits()
        ),
    };
    Ok(StageReport {
        summary,
        changed: true,
    })
}

/// Removes the SSH public key stored as `name`.
pub async fn delete_ssh_public_key(
    store: &StateStore,
    cluster: &str,
    name: &str,
) -> Result<StageReport, KeystoreError> {
    let object = ClusterPaths::new(cluster).ssh_public_key(name);
    let existing = ssh_public_key(store, cluster, name).await?.ok_or_else(|| {
        KeystoreError::SshKeyMissing {
            name: name.to_string(),
        }
    })?;
    store
        .delete(&object)
        .await
        .map_err(store_err(format!("deleting {object}")))?;
    Ok(StageReport {
        summary: format!(
            "SSH public key {name} ({}) deleted.",
            existing.key.fingerprint()
        ),
        changed: true,
    })
}

/// A CA keyset as the operator's side uses it (`export kubeconfig --admin`, `validate cluster`, boot-report
/// checks): the primary issues; `bundle` is what a client trusts, the primary's certificate first, then every
/// other key the nodes still trust (next, trusted), exactly as the nodes' `ca.crt`.
pub struct CaInUse {
    pub cert_pem: String,
    pub key_pem: String,
    pub bundle_pem: String,
}

impl std::fmt::Debug for CaInUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaInUse")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .field("bundle_pem", &self.bundle_pem)
            .finish()
    }
}

async fn read_text(store: &StateStore, cluster: &str, key: &str) -> Result<String, KeystoreError> {
    let (data, _) = read_required(store, cluster, key).await?;
    String::from_utf8(data).map_err(|e| corrupt(key, e))
}

/// The certificates every node trusts of CA keyset `name` (primary, next, trusted; never distrusted), as one PEM
/// bundle, the primary first. No private key is read.
pub async fn ca_bundle(
    store: &StateStore,
    cluster: &str,
    name: KeysetName,
) -> Result<String, KeystoreError> {
    let paths = ClusterPaths::new(cluster);
    let key_use = load(store, cluster, name).await?.keyset.key_use()?;
    let mut certs = Vec::new();
    for item in std::iter::once(&key_use.primary).chain(&key_use.also_trusted) {
        certs.push(read_text(store, cluster, &cert_path(&paths, name, item)).await?);
    }
    Ok(pem_bundle(certs.iter().map(String::as_str)))
}

/// CA keyset `name`'s primary certificate and key (which issue) and its trusted bundle.
pub async fn ca_in_use(
    store: &StateStore,
    cluster: &str,
    name: KeysetName,
) -> Result<CaInUse, KeystoreError> {
    let paths = ClusterPaths::new(cluster);
    let key_use = load(store, cluster, name).await?.keyset.key_use()?;
    let cert_pem = read_text(store, cluster, &cert_path(&paths, name, &key_use.primary)).await?;
    let key_pem = read_text(store, cluster, &key_path(&paths, name, &key_use.primary)).await?;
    let mut others = Vec::new();
    for item in &key_use.also_trusted {
        others.push(read_text(store, cluster, &cert_path(&paths, name, item)).await?);
    }
    let bundle_pem =
        pem_bundle(std::iter::once(cert_pem.as_str()).chain(others.iter().map(String::as_str)));
    Ok(CaInUse {
        cert_pem,
        key_pem,
        bundle_pem,
    })
}

/// Stages an operator's CA (checked by `ca_import::check_ca`) as the `next` key of CA keyset `name`, exactly as
/// `--stage add` stages a fresh one: its material first, the keyset last with a conditional write. Refused, with
/// nothing written, when another key is staged, a rotation is in progress or the CA is already in the keyset; a
/// no-op when it is already the staged key.
pub async fn import_ca(
    store: &StateStore,
    cluster: &str,
    name: KeysetName,
    ca: ImportedCa,
) -> Result<StageReport, KeystoreError> {
    let stored = load(store, cluster, name).await?;
    if let Some(summary) = stored.keyset.check_import(&ca.id)? {
        return Ok(StageReport {
            summary,
            changed: false,
        });
    }
    let item = KeysetItem {
        id: ca.id.clone(),
        created: Some(ca.not_before.clone()),
        expires: Some(ca.not_after.clone()),
        state: KeyState::Next,
        original: false,
    };
    let subject = ca.subject.clone();
    let report = run_stage(store, cluster, name, Stage::Add, None, move || {
        Ok((
            NewKey::Ca {
                cert_pem: ca.cert_pem,
                key_pem: ca.key_pem,
            },
            item,
        ))
    })
    .await?;
    Ok(StageReport {
        summary: format!("{} (imported: {subject})", report.summary),
        changed: report.changed,
    })
}

/// What running a stage did: the summary, and whether anything changed (a roll is needed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageReport {
    pub summary: String,
    pub changed: bool,
}

/// Runs `stage` of keyset `name`: refused (nothing written) when out of order, a no-op when already done.
/// `new_key` is called for `add` only, to make the key to stage (a fresh one, or an operator's import).
pub async fn run_stage(
    store: &StateStore,
    cluster: &str,
    name: KeysetName,
    stage: Stage,
    id: Option<&str>,
    new_key: impl FnOnce() -> Result<(NewKey, KeysetItem), KeystoreError>,
) -> Result<StageReport, KeystoreError> {
    let stored = load(store, cluster, name).await?;
    // Made before the stage is decided (a stage must be pure), used only when it adds a key.
    let mut made = None;
    if stage == Stage::Add {
        made = Some(new_key()?);
    }
    let new_item = made.as_ref().map(|(_, item)| item.clone());
    let outcome = stored.keyset.stage(stage, id, || {
        new_item.unwrap_or_else(|| KeysetItem {
            id: String::new(),
            created: None,
            expires: None,
            state: KeyState::Next,
            original: false,
        })
    })?;
    let (keyset, summary) = match outcome {
        StageOutcome::AlreadyDone { summary } => {
            return Ok(StageReport {
                summary,
                changed: false,
            })
        }
        StageOutcome::Changed { keyset, summary } => (keyset, summary),
    };
    if let Some((material, item)) = made.filter(|(_, item)| keyset.items.contains(item)) {
        write_material(store, cluster, name, &item, material).await?;
    }
    let key = ClusterPaths::new(cluster).keyset(name.as_str());
    let yaml = yaml_serde::to_string(&keyset).map_err(|e| corrupt(&key, e))?;
    let precondition = match stored.version {
        Some(version) => Precondition::MustMatch(version),
        None => Precondition::MustNotExist,
    };
    store
        .put(&key, yaml.as_bytes(), &precondition)
        .await
        .map_err(store_err(format!("writing {key}")))?;
    Ok(StageReport {
        summary,
        changed: true,
    })
}

async fn write_material(
    store: &StateStore,
    cluster: &str,
    name: KeysetName,
    item: &KeysetItem,
    material: NewKey,
) -> Result<(), KeystoreError> {
    let paths = ClusterPaths::new(cluster);
    let put_new = |key: String, data: String| async move {
        store
            .put(&key, data.as_bytes(), &Precondition::MustNotExist)
            .await
            .map_err(store_err(format!("writing {key}")))
            .map(|_| ())
    };
    match material {
        NewKey::Ca { cert_pem, key_pem } => {
            put_new(key_path(&paths, name, item), key_pem).await?;
            put_new(cert_path(&paths, name, item), cert_pem).await?;
        }
        NewKey::ServiceAccount {
            key_pem,
            public_pem,
        } => {
            put_new(key_path(&paths, name, item), key_pem).await?;
            put_new(public_key_path(&paths, name, item), public_pem).await?;
        }
        NewKey::Encryption(new) => {
            // Every encryption key lives in the one secret nodes already read; the node spec names the ones
            // in use. A key is appended, never removed (a dropped key is only no longer named).
            let (mut keys, version) = read_encryption_keys(store, cluster).await?;
            if keys.keys.iter().any(|k| k.name == new.name) {
                return Err(corrupt(
                    &paths.secret(ENCRYPTION_KEYS_SECRET),
                    format!(
                        "it already holds a key named {}; run the stage again in a second",
                        new.name
                    ),
                ));
            }
            keys.keys.push(new);
            let key = paths.secret(ENCRYPTION_KEYS_SECRET);
            let yaml = yaml_serde::to_string(&keys).map_err(|e| corrupt(&key, e))?;
            store
                .put(&key, yaml.as_bytes(), &Precondition::MustMatch(version))
                .await
                .map_err(store_err(format!("writing {key}")))?;
        }
    }
    Ok(())
}
