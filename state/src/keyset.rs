//! Keysets: every key of a cluster over its life (pure; the store side is `keystore`).
//!
//! Like kops's keysets, each of the four keys a cluster has (the Kubernetes CA, the etcd CA, the service-account
//! signing key, the key encrypting secrets at rest) is a keyset of items, each with an id, when it was made, when
//! it expires, and a state:
//!
//! - `next`: staged by `rotate --stage add`: every node trusts it (verifies, decrypts) but nothing signs with it;
//! - `primary`: the one that signs, issues or encrypts; always exactly one;
//! - `trusted`: a former primary still trusted (verifies, decrypts) until `--stage drop`;
//! - `distrusted`: no node is given it any more. It stays in the store: nothing is destroyed on a guess.
//!
//! A rotation is `add` (roll), `promote` (roll), for the encryption key `rewrite` (every secret written again
//! with the new key), then `drop` (roll). Each stage is one function here from a keyset to the next keyset, or
//! the reason it is refused; each stage run twice is a no-op the second time. What the nodes must use follows
//! from the states ([`KeyUse`]) and goes into their node specs, so a stage changes the node specs' hashes and
//! `rolling-update cluster` carries it to the instances.

use serde::{Deserialize, Serialize};

use crate::layout::ClusterPaths;

pub const KIND_KEYSET: &str = "Keyset";

/// The keysets of a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeysetName {
    KubernetesCa,
    EtcdCa,
    ServiceAccount,
    EncryptionKey,
}

impl KeysetName {
    pub const ALL: [KeysetName; 4] = [
        KeysetName::KubernetesCa,
        KeysetName::EtcdCa,
        KeysetName::ServiceAccount,
        KeysetName::EncryptionKey,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            KeysetName::KubernetesCa => "kubernetes-ca",
            KeysetName::EtcdCa => "etcd-ca",
            KeysetName::ServiceAccount => "service-account",
            KeysetName::EncryptionKey => "encryption-key",
        }
    }

    /// `Keypair` (a private key with a certificate or public key) or `Secret` (a symmetric key).
    pub fn kind(self) -> &'static str {
        match self {
            KeysetName::EncryptionKey => "Secret",
            _ => "Keypair",
        }
    }

    /// Parses a keyset name as the CLI takes it; the error lists the names.
    pub fn parse(text: &str) -> Result<Self, UnknownKeyset> {
        KeysetName::ALL
            .into_iter()
            .find(|n| n.as_str() == text)
            .ok_or_else(|| UnknownKeyset(text.to_string()))
    }
}

impl std::fmt::Display for KeysetName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A keyset name that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("there is no keyset {0:?}: the keysets are kubernetes-ca, etcd-ca, service-account and encryption-key")]
pub struct UnknownKeyset(pub String);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyState {
    Next,
    Primary,
    Trusted,
    Distrusted,
}

impl KeyState {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Next => "next",
            KeyState::Primary => "primary",
            KeyState::Trusted => "trusted",
            KeyState::Distrusted => "distrusted",
        }
    }
}

/// One key of a keyset: metadata only; its material is in the store at `keystore::ItemPaths`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeysetItem {
    pub id: String,
    /// RFC 3339; absent when not known (a service-account key made before keysets existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// RFC 3339; absent for keys that do not expire (service-account and encryption keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    pub state: KeyState,
    /// The key `create cluster` made: its material is at the keyset's original paths (`pki/<ca>/cert.pem`, ...),
    /// not under its id.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub original: bool,
}

/// A keyset as stored at `keysets/<name>.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Keyset {
    pub api_version: String,
    pub kind: String,
    pub name: KeysetName,
    pub items: Vec<KeysetItem>,
    /// Encryption key only: the primary key every secret was rewritten with (`--stage rewrite`); the old key may
    /// be dropped only once this is the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewritten_with: Option<String>,
}

/// The stages of a rotation, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Add,
    Promote,
    Rewrite,
    Drop,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Add => "add",
            Stage::Promote => "promote",
            Stage::Rewrite => "rewrite",
            Stage::Drop => "drop",
        }
    }
}

/// Why a stage is refused. Each message names the keyset and says what to run instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StageError {
    #[error("{keyset}: a rotation is still in progress: key {trusted} is still trusted beside primary {primary}; finish it with `ballast rotate {keyset} --stage drop` before adding a key")]
    RotationInProgress {
        keyset: KeysetName,
        trusted: String,
        primary: String,
    },
    #[error("{keyset}: no key is staged to promote; run `ballast rotate {keyset} --stage add` first (and roll it out)")]
    NothingStaged { keyset: KeysetName },
    #[error("{keyset}: key {next} is staged but not primary yet; run `ballast rotate {keyset} --stage promote` first (and roll it out)")]
    NotPromoted { keyset: KeysetName, next: String },
    #[error("{keyset}: the secrets have not been rewritten with primary key {primary}; run `ballast rotate {keyset} --stage rewrite` before dropping key {old}")]
    NotRewritten {
        keyset: KeysetName,
        primary: String,
        old: String,
    },
    #[error("{keyset}: there is no old key to rewrite away from (the primary is the only key in use); a rotation starts with `ballast rotate {keyset} --stage add`")]
    NothingToRewrite { keyset: KeysetName },
    #[error("{keyset}: --stage rewrite is for the encryption key only (it rewrites Kubernetes secrets); the stages of {keyset} are add, promote and drop")]
    RewriteNotApplicable { keyset: KeysetName },
    #[error(
        "{keyset}: there is no key {id} (keys: {known}); `ballast get secrets {keyset}` lists them"
    )]
    UnknownKey {
        keyset: KeysetName,
        id: String,
        known: String,
    },
    #[error("{keyset}: --id {id} names key {id}, but this stage acts on key {acts_on} ({state}); nothing was changed")]
    WrongKey {
        keyset: KeysetName,
        id: String,
        acts_on: String,
        state: &'static str,
    },
    #[error("{keyset}: key {next} is already staged as next, so another CA cannot be imported now; finish that rotation (`ballast rotate {keyset} --stage promote`, then `--stage drop`) and import after it")]
    AlreadyStaged { keyset: KeysetName, next: String },
    #[error("{keyset}: this CA is already key {id} of the keyset ({state}); nothing was changed")]
    AlreadyInKeyset {
        keyset: KeysetName,
        id: String,
        state: &'static str,
    },
    #[error("{keyset}: only a CA can be imported (kubernetes-ca or etcd-ca); nothing was changed")]
    NotImportable { keyset: KeysetName },
    #[error("{keyset}: the stored keyset is damaged: {problem}; restore keysets/{keyset}.yaml from an earlier version of the bucket")]
    Damaged { keyset: KeysetName, problem: String },
}

/// What a stage did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageOutcome {
    /// The keyset changed: store it (and, for `add`, the new key's material first).
    Changed { keyset: Keyset, summary: String },
    /// The stage had already been done: nothing to store.
    AlreadyDone { summary: String },
}

impl Keyset {
    /// A keyset of one primary key.
    pub fn new(name: KeysetName, primary: KeysetItem) -> Self {
        Keyset {
            api_version: crate::spec::API_VERSION.to_string(),
            kind: KIND_KEYSET.to_string(),
            name,
            items: vec![primary],
            rewritten_with: None,
        }
    }

    fn ids_in(&self, state: KeyState) -> Vec<&str> {
        self.items
            .iter()
            .filter(|i| i.state == state)
            .map(|i| i.id.as_str())
            .collect()
    }

    /// The one primary key; a keyset without exactly one is damaged.
    pub fn primary(&self) -> Result<&KeysetItem, StageError> {
        let mut primaries = self.items.iter().filter(|i| i.state == KeyState::Primary);
        match (primaries.next(), primaries.next()) {
            (Some(p), None) => Ok(p),
            (None, _) => Err(self.damaged("it has no primary key")),
            (Some(_), Some(_)) => Err(self.damaged("it has more than one primary key")),
        }
    }

    fn damaged(&self, problem: &str) -> StageError {
        StageError::Damaged {
            keyset: self.name,
            problem: problem.to_string(),
        }
    }

    /// Checks the invariants a stored keyset must hold: one primary, at most one next, unique ids.
    pub fn check(&self) -> Result<(), StageError> {
        self.primary()?;
        if self.ids_in(KeyState::Next).len() > 1 {
            return Err(self.damaged("it has more than one next key"));
        }
        let mut ids: Vec<&str> = self.items.iter().map(|i| i.id.as_str()).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(self.damaged("two keys have the same id"));
        }
        Ok(())
    }

    /// An item by id, or the error naming the ids there are.
    pub fn item(&self, id: &str) -> Result<&KeysetItem, StageError> {
        self.items
            .iter()
            .find(|i| i.id == id)
            .ok_or_else(|| StageError::UnknownKey {
                keyset: self.name,
                id: id.to_string(),
                known: self
                    .items
                    .iter()
                    .map(|i| i.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// What the nodes use: the primary, and every other key they must still trust, in order.
    pub fn key_use(&self) -> Result<KeyUse, StageError> {
        self.check()?;
        let primary = self.primary()?;
        // Next before trusted: the encryption config's order (primary encrypts; the others decrypt).
        let also_trusted = self
            .ids_in(KeyState::Next)
            .into_iter()
            .chain(self.ids_in(KeyState::Trusted))
            .map(|id| self.items.iter().find(|i| i.id == id).cloned())
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default();
        Ok(KeyUse {
            primary: primary.clone(),
            also_trusted,
        })
    }

    /// Whether an operator's CA with id `id` may be imported as `next` (`create secret keypair`): `Ok(None)` when it
    /// may (then `add` with it), `Ok(Some(summary))` when it is already the staged key (nothing to do), or why not:
    /// another key is already staged, a rotation is in progress, or the CA is already a key of the keyset.
    pub fn check_import(&self, id: &str) -> Result<Option<String>, StageError> {
        self.check()?;
        let name = self.name;
        if !matches!(name, KeysetName::KubernetesCa | KeysetName::EtcdCa) {
            return Err(StageError::NotImportable { keyset: name });
        }
        if let Some(item) = self.items.iter().find(|i| i.id == id) {
            if item.state == KeyState::Next {
                return Ok(Some(format!(
                    "{name}: this CA is already staged as next (key {id})"
                )));
            }
            return Err(StageError::AlreadyInKeyset {
                keyset: name,
                id: id.to_string(),
                state: item.state.as_str(),
            });
        }
        if let Some(next) = self.ids_in(KeyState::Next).first() {
            return Err(StageError::AlreadyStaged {
                keyset: name,
                next: next.to_string(),
            });
        }
        if let Some(old) = self.ids_in(KeyState::Trusted).first() {
            return Err(StageError::RotationInProgress {
                keyset: name,
                trusted: old.to_string(),
                primary: self.primary()?.id.clone(),
            });
        }
        Ok(None)
    }

    /// Runs `stage`. `new_key` makes the item `add` stages (called only when a key is added); `id`, when given,
    /// must name the key the stage acts on.
    pub fn stage(
        &self,
        stage: Stage,
        id: Option<&str>,
        new_key: impl FnOnce() -> KeysetItem,
    ) -> Result<StageOutcome, StageError> {
        self.check()?;
        if let Some(id) = id {
            self.item(id)?;
        }
        let primary = self.primary()?.id.clone();
        let next = self.ids_in(KeyState::Next).first().map(|s| s.to_string());
        let trusted: Vec<String> = self
            .ids_in(KeyState::Trusted)
            .into_iter()
            .map(str::to_string)
            .collect();
        let name = self.name;
        let expect = |acts_on: &str, state: &'static str| match id {
            Some(id) if id != acts_on => Err(StageError::WrongKey {
                keyset: name,
                id: id.to_string(),
                acts_on: acts_on.to_string(),
                state,
            }),
            _ => Ok(()),
        };
        let mut changed = self.clone();
        match stage {
            Stage::Add => {
                if let Some(next) = next {
                    expect(&next, "next")?;
                    return Ok(StageOutcome::AlreadyDone {
                        summary: format!("{name}: key {next} is already staged as next"),
                    });
                }
                if let Some(old) = trusted.first() {
                    return Err(StageError::RotationInProgress {
                        keyset: name,
                        trusted: old.clone(),
                        primary,
                    });
                }
                let mut item = new_key();
                item.state = KeyState::Next;
                let summary = format!(
                    "{name}: key {} added as next: every node will trust it; {primary} stays primary",
                    item.id
                );
                expect(&item.id, "next")?;
                changed.items.push(item);
                Ok(StageOutcome::Changed {
                    keyset: changed,
                    summary,
                })
            }
            Stage::Promote => match next {
                Some(next) => {
                    expect(&next, "next")?;
                    for item in &mut changed.items {
                        if item.id == next {
                            item.state = KeyState::Primary;
                        } else if item.id == primary {
                            item.state = KeyState::Trusted;
                        }
                    }
                    Ok(StageOutcome::Changed {
                        keyset: changed,
                        summary: format!(
                            "{name}: key {next} is primary; the former primary {primary} stays trusted"
                        ),
                    })
                }
                None if !trusted.is_empty() => {
                    expect(&primary, "primary")?;
                    Ok(StageOutcome::AlreadyDone {
                        summary: format!("{name}: key {primary} is already primary"),
                    })
                }
                None => Err(StageError::NothingStaged { keyset: name }),
            },
            Stage::Rewrite => {
                if name != KeysetName::EncryptionKey {
                    return Err(StageError::RewriteNotApplicable { keyset: name });
                }
                if let Some(next) = next {
                    return Err(StageError::NotPromoted { keyset: name, next });
                }
                expect(&primary, "primary")?;
                if self.rewritten_with.as_deref() == Some(primary.as_str()) {
                    return Ok(StageOutcome::AlreadyDone {
                        summary: format!(
                            "{name}: the secrets were already rewritten with key {primary}"
                        ),
                    });
                }
                if trusted.is_empty() {
                    return Err(StageError::NothingToRewrite { keyset: name });
                }
                changed.rewritten_with = Some(primary.clone());
                Ok(StageOutcome::Changed {
                    keyset: changed,
                    summary: format!("{name}: every secret is encrypted with key {primary}"),
                })
            }
            Stage::Drop => {
                if let Some(next) = next {
                    return Err(StageError::NotPromoted { keyset: name, next });
                }
                let Some(old) = trusted.first() else {
                    return Ok(StageOutcome::AlreadyDone {
                        summary: format!(
                            "{name}: no old key is trusted any more; {primary} is the only key in use"
                        ),
                    });
                };
                expect(old, "trusted")?;
                if name == KeysetName::EncryptionKey
                    && self.rewritten_with.as_deref() != Some(primary.as_str())
                {
                    return Err(StageError::NotRewritten {
                        keyset: name,
                        primary,
                        old: old.clone(),
                    });
                }
                for item in &mut changed.items {
                    if item.state == KeyState::Trusted {
                        item.state = KeyState::Distrusted;
                    }
                }
                Ok(StageOutcome::Changed {
                    keyset: changed,
                    summary: format!(
                        "{name}: key(s) {} distrusted (kept in the state store, given to no node); {primary} is the only key in use",
                        trusted.join(", ")
                    ),
                })
            }
        }
    }
}

/// What the nodes use of one keyset: the primary signs, issues or encrypts; every key in `also_trusted` is
/// trusted too (verifies, decrypts), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyUse {
    pub primary: KeysetItem,
    pub also_trusted: Vec<KeysetItem>,
}

/// What every node spec carries of the cluster's keysets: `None` for a keyset never rotated (its original key at
/// its original paths, the node spec exactly as before keysets existed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeKeys {
    pub kubernetes_ca: Option<KeyUse>,
    pub etcd_ca: Option<KeyUse>,
    pub service_account: Option<KeyUse>,
    pub encryption_key: Option<KeyUse>,
    /// The operator's SSH public keys (`authorized_keys` lines, by key name), installed for root by nodeup.
    pub ssh_authorized_keys: Vec<String>,
}

impl NodeKeys {
    pub fn set(&mut self, name: KeysetName, key_use: KeyUse) {
        let slot = match name {
            KeysetName::KubernetesCa => &mut self.kubernetes_ca,
            KeysetName::EtcdCa => &mut self.etcd_ca,
            KeysetName::ServiceAccount => &mut self.service_account,
            KeysetName::EncryptionKey => &mut self.encryption_key,
        };
        *slot = Some(key_use);
    }
}

#[cfg(test)]
mod tests;

/// Where a node finds one item's certificate (CAs).
pub fn cert_path(paths: &ClusterPaths, name: KeysetName, item: &KeysetItem) -> String {
    if item.original {
        paths.pki_cert(name.as_str())
    } else {
        paths.pki_item_cert(name.as_str(), &item.id)
    }
}

/// Where one item's private key is (CAs and the service-account key).
pub fn key_path(paths: &ClusterPaths, name: KeysetName, item: &KeysetItem) -> String {
    if item.original {
        paths.pki_key(name.as_str())
    } else {
        paths.pki_item_key(name.as_str(), &item.id)
    }
}

/// Where one service-account item's public key is.
pub fn public_key_path(paths: &ClusterPaths, name: KeysetName, item: &KeysetItem) -> String {
    if item.original {
        paths.pki_public_key(name.as_str())
    } else {
        paths.pki_item_public_key(name.as_str(), &item.id)
    }
}

/// The node spec's `pki` entries that follow from the rotated keysets (store keys); `None` or empty where a
/// keyset was never rotated, so that a node spec stays as it was before keysets existed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyLocations {
    pub kubernetes_ca_cert: Option<String>,
    pub kubernetes_ca_key: Option<String>,
    pub kubernetes_ca_trusted: Vec<String>,
    pub etcd_ca_cert: Option<String>,
    pub etcd_ca_key: Option<String>,
    pub etcd_ca_trusted: Vec<String>,
    pub service_account_key: Option<String>,
    pub service_account_public_key: Option<String>,
    pub service_account_verify_keys: Vec<String>,
    pub encryption_key_names: Option<Vec<String>>,
}

impl NodeKeys {
    pub fn locations(&self, paths: &ClusterPaths) -> KeyLocations {
        let mut at = KeyLocations::default();
        let ca = |use_: &KeyUse, name| {
            (
                cert_path(paths, name, &use_.primary),
                key_path(paths, name, &use_.primary),
                use_.also_trusted
                    .iter()
                    .map(|i| cert_path(paths, name, i))
                    .collect::<Vec<_>>(),
            )
        };
        if let Some(use_) = &self.kubernetes_ca {
            let (cert, key, trusted) = ca(use_, KeysetName::KubernetesCa);
            at.kubernetes_ca_cert = Some(cert);
            at.kubernetes_ca_key = Some(key);
            at.kubernetes_ca_trusted = trusted;
        }
        if let Some(use_) = &self.etcd_ca {
            let (cert, key, trusted) = ca(use_, KeysetName::EtcdCa);
            at.etcd_ca_cert = Some(cert);
            at.etcd_ca_key = Some(key);
            at.etcd_ca_trusted = trusted;
        }
        if let Some(use_) = &self.service_account {
            let name = KeysetName::ServiceAccount;
            at.service_account_key = Some(key_path(paths, name, &use_.primary));
            at.service_account_public_key = Some(public_key_path(paths, name, &use_.primary));
            at.service_account_verify_keys = use_
                .also_trusted
                .iter()
                .map(|i| public_key_path(paths, name, i))
                .collect();
        }
        if let Some(use_) = &self.encryption_key {
            at.encryption_key_names = Some(
                std::iter::once(&use_.primary)
                    .chain(&use_.also_trusted)
                    .map(|i| i.id.clone())
                    .collect(),
            );
        }
        at
    }
}
