//! Step 2 of nodeup: the node spec from the state store named in the boot config, checked against the sha256
//! the boot config carries, and the secrets the spec names (in parallel). Store failures (unreachable,
//! throttled, credentials not there yet) are retried with a growing backoff until one overall deadline; a
//! missing object or a spec that does not match its hash is not retried.

use std::time::{Duration, Instant};

use ballast_state::digest::sha256_hex;
use ballast_state::node::{BootConfig, NodeSpec};
use ballast_state::pki::EncryptionKeys;
use ballast_state::spec::Role;
use ballast_store::store::{StateStore, StoreError, StoreOptions};

use crate::model::{ApiServerSecrets, ControlPlaneSecrets, Secrets};
use crate::retry::Failure;

/// Failures fetching what the node needs.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The boot config's state store URL is not one the store understands.
    #[error("opening the state store {url}: {source}")]
    Open {
        url: String,
        #[source]
        source: Box<StoreError>,
    },
    /// The store did not answer (or refused) before the deadline.
    #[error("the state store {url} is unreachable: reading {key} failed for {waited:?} ({attempts} attempts); last error: {last}")]
    Unreachable {
        url: String,
        key: String,
        waited: Duration,
        attempts: u32,
        #[source]
        last: ReadFailure,
    },
    /// The object does not exist.
    #[error("{key} does not exist in the state store {url}: run `ballast update cluster --yes` to write it")]
    Missing { url: String, key: String },
    /// The node spec's bytes do not hash to the boot config's sha256: it was changed after the launch template
    /// was written (tampering, or an update whose launch template never applied).
    #[error("refusing the node spec {key}: its sha256 is {actual}, but the boot config (user-data) says {expected}; the spec was changed after this instance's launch template was written")]
    Tampered {
        key: String,
        expected: String,
        actual: String,
    },
    /// The node spec does not parse, or is not this node's.
    #[error("the node spec {key} is invalid: {problem}")]
    BadSpec {
        key: String,
        #[source]
        problem: SpecProblem,
    },
    /// A secret does not parse.
    #[error("the secret {key} is invalid: {problem}")]
    BadSecret {
        key: String,
        #[source]
        problem: SecretProblem,
    },
}

/// Why one read of the state store failed (the last one, when the retries ran out).
#[derive(Debug, thiserror::Error)]
pub enum ReadFailure {
    #[error("{0}")]
    Store(#[source] Box<StoreError>),
    /// The read did not finish before the deadline.
    #[error("timed out")]
    TimedOut,
}

/// What is wrong with a node spec.
#[derive(Debug, thiserror::Error)]
pub enum SpecProblem {
    #[error("{0}")]
    NotUtf8(#[source] std::str::Utf8Error),
    #[error("{0}")]
    Yaml(#[source] yaml_serde::Error),
    /// The spec names another cluster, group or role than the boot config.
    #[error("it is for {spec} ({spec_role:?}), but this node is {node} ({node_role:?})")]
    NotThisNode {
        /// `cluster/group` of the spec.
        spec: String,
        spec_role: Role,
        /// `cluster/group` of the boot config.
        node: String,
        node_role: Role,
    },
    /// A control-plane spec leaves a secret it needs unnamed.
    #[error("a control-plane spec must name it")]
    Unnamed,
}

/// What is wrong with a secret.
#[derive(Debug, thiserror::Error)]
pub enum SecretProblem {
    #[error("{0}")]
    NotUtf8(#[source] std::string::FromUtf8Error),
    #[error("{0}")]
    Yaml(#[source] yaml_serde::Error),
}

/// Opens the boot config's state store.
pub async fn open(url: &str) -> Result<StateStore, FetchError> {
    StateStore::open(url, StoreOptions::default())
        .await
        .map_err(|source| FetchError::Open {
            url: url.to_string(),
            source: Box::new(source),
        })
}

/// Reads an object that must exist, retrying store failures until `deadline` (the policy `retry::STORE_READ`).
pub async fn get(store: &StateStore, key: &str, deadline: Instant) -> Result<Vec<u8>, FetchError> {
    let start = Instant::now();
    let attempts = std::sync::atomic::AtomicU32::new(0);
    let policy = crate::retry::Policy {
        deadline: deadline.saturating_duration_since(start),
        ..crate::retry::STORE_READ
    };
    let tries = &attempts;
    let result = policy
        .retry(
            move || async move {
                tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // Each read is cut at the deadline too: a hung connection must not outlast the boot's budget.
                let left = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left.max(Duration::from_millis(1)), store.get(key)).await {
                    Ok(Ok(Some(object))) => Ok(object.data),
                    Ok(Ok(None)) => Err(Failure::Permanent(FetchError::Missing {
                        url: store.url(),
                        key: key.to_string(),
                    })),
                    Ok(Err(e)) => Err(Failure::Transient(ReadFailure::Store(Box::new(e)))),
                    Err(_) => Err(Failure::Transient(ReadFailure::TimedOut)),
                }
            },
            Failure::is_transient,
            |e, pause| {
                if let Failure::Transient(last) = e {
                    tracing::warn!(key, attempts = tries.load(std::sync::atomic::Ordering::Relaxed), error = %last, ?pause, "state store read failed; retrying");
                }
            },
        )
        .await;
    result.map_err(|e| match e {
        Failure::Permanent(e) => e,
        Failure::Transient(last) => FetchError::Unreachable {
            url: store.url(),
            key: key.to_string(),
            waited: start.elapsed(),
            attempts: attempts.load(std::sync::atomic::Ordering::Relaxed),
            last,
        },
    })
}

/// The node spec, verified against the boot config.
pub async fn node_spec(
    store: &StateStore,
    boot: &BootConfig,
    deadline: Instant,
) -> Result<NodeSpec, FetchError> {
    let key = &boot.node_spec;
    let data = get(store, key, deadline).await?;
    let actual = sha256_hex(&data);
    if actual != boot.node_spec_sha256 {
        return Err(FetchError::Tampered {
            key: key.clone(),
            expected: boot.node_spec_sha256.clone(),
            actual,
        });
    }
    let bad = |problem: SpecProblem| FetchError::BadSpec {
        key: key.clone(),
        problem,
    };
    let text = std::str::from_utf8(&data).map_err(|e| bad(SpecProblem::NotUtf8(e)))?;
    let spec: NodeSpec = yaml_serde::from_str(text).map_err(|e| bad(SpecProblem::Yaml(e)))?;
    if spec.cluster_name != boot.cluster_name
        || spec.instance_group != boot.instance_group
        || spec.role != boot.role
    {
        return Err(bad(SpecProblem::NotThisNode {
            spec: format!("{}/{}", spec.cluster_name, spec.instance_group),
            spec_role: spec.role,
            node: format!("{}/{}", boot.cluster_name, boot.instance_group),
            node_role: boot.role,
        }));
    }
    Ok(spec)
}

fn text(key: &str, data: Vec<u8>) -> Result<String, FetchError> {
    String::from_utf8(data).map_err(|e| FetchError::BadSecret {
        key: key.to_string(),
        problem: SecretProblem::NotUtf8(e),
    })
}

/// Every secret a node needs, fetched in parallel: a worker's is the CA certificate only (its role can read
/// nothing else); a bootstrap token an older spec names is not fetched (nodes prove their identity instead).
pub async fn secrets(
    store: &StateStore,
    spec: &NodeSpec,
    deadline: Instant,
) -> Result<Secrets, FetchError> {
    let pki = &spec.pki;
    let required = |key: &Option<String>, what: &str| {
        key.clone().ok_or_else(|| FetchError::BadSpec {
            key: format!("pki.{what}"),
            problem: SpecProblem::Unnamed,
        })
    };
    let fetch = |key: String| async move {
        let data = get(store, &key, deadline).await?;
        text(&key, data)
    };
    if spec.role == Role::Bastion {
        // A bastion holds nothing of the cluster's trust: its role may read its own node spec and nothing else.
        return Ok(Secrets {
            kubernetes_ca_cert: String::new(),
            kubernetes_ca_trusted: Vec::new(),
            control_plane: None,
            api_server: None,
        });
    }
    if spec.role == Role::ApiServer {
        return api_server_secrets(store, spec, deadline).await;
    }
    if spec.role != Role::ControlPlane {
        // A worker's kubelet certificate comes from the bootstrap service (crate::bootstrap): it reads the CA
        // certificate only, even when an older node spec still names a bootstrap token.
        let (ca, trusted) = tokio::try_join!(
            fetch(pki.kubernetes_ca_cert.clone()),
            fetch_all(store, &pki.kubernetes_ca_trusted, deadline),
        )?;
        return Ok(Secrets {
            kubernetes_ca_cert: ca,
            kubernetes_ca_trusted: trusted,
            control_plane: None,
            api_server: None,
        });
    }
    let encrypted = spec
        .control_plane
        .as_ref()
        .is_some_and(|c| c.encryption_provider.is_some());
    let encryption = async {
        if !encrypted {
            return Ok(None);
        }
        let key = required(&pki.encryption_keys, "encryptionKeys")?;
        let t = fetch(key.clone()).await?;
        yaml_serde::from_str::<EncryptionKeys>(&t)
            .map(Some)
            .map_err(|e| FetchError::BadSecret {
                key,
                problem: SecretProblem::Yaml(e),
            })
    };
    let (ca, ca_key, etcd_cert, etcd_key, sa_key, sa_pub, encryption_keys) = tokio::try_join!(
        fetch(pki.kubernetes_ca_cert.clone()),
        async { fetch(required(&pki.kubernetes_ca_key, "kubernetesCaKey")?).await },
        async { fetch(required(&pki.etcd_ca_cert, "etcdCaCert")?).await },
        async { fetch(required(&pki.etcd_ca_key, "etcdCaKey")?).await },
        async { fetch(required(&pki.service_account_key, "serviceAccountKey")?).await },
        async {
            fetch(required(
                &pki.service_account_public_key,
                "serviceAccountPublicKey",
            )?)
            .await
        },
        encryption,
    )?;
    // Empty unless a key is being rotated (docs/keys.md).
    let (kubernetes_ca_trusted, etcd_ca_trusted, service_account_verify_keys) = tokio::try_join!(
        fetch_all(store, &pki.kubernetes_ca_trusted, deadline),
        fetch_all(store, &pki.etcd_ca_trusted, deadline),
        fetch_all(store, &pki.service_account_verify_keys, deadline),
    )?;
    Ok(Secrets {
        kubernetes_ca_cert: ca,
        kubernetes_ca_trusted,
        control_plane: Some(ControlPlaneSecrets {
            kubernetes_ca_key: ca_key,
            etcd_ca_cert: etcd_cert,
            etcd_ca_key: etcd_key,
            etcd_ca_trusted,
            service_account_key: sa_key,
            service_account_public_key: sa_pub,
            service_account_verify_keys,
            encryption_keys,
        }),
        api_server: None,
    })
}

/// An API-server node's secrets: what its API server reads and the Kubernetes CA's key (to issue its
/// certificates), the etcd client pair `update cluster` issued for API servers, never the etcd CA's key (its
/// role cannot read it).
async fn api_server_secrets(
    store: &StateStore,
    spec: &NodeSpec,
    deadline: Instant,
) -> Result<Secrets, FetchError> {
    let pki = &spec.pki;
    let required = |key: &Option<String>, what: &str| {
        key.clone().ok_or_else(|| FetchError::BadSpec {
            key: format!("pki.{what}"),
            problem: SpecProblem::Unnamed,
        })
    };
    let fetch = |key: String| async move {
        let data = get(store, &key, deadline).await?;
        text(&key, data)
    };
    let encrypted = spec
        .api_server
        .as_ref()
        .is_some_and(|a| a.encryption_provider.is_some());
    let encryption = async {
        if !encrypted {
            return Ok(None);
        }
        let key = required(&pki.encryption_keys, "encryptionKeys")?;
        let t = fetch(key.clone()).await?;
        yaml_serde::from_str::<EncryptionKeys>(&t)
            .map(Some)
            .map_err(|e| FetchError::BadSecret {
                key,
                problem: SecretProblem::Yaml(e),
            })
    };
    let (ca, ca_key, etcd_cert, client_cert, client_key, sa_key, sa_pub, encryption_keys) = tokio::try_join!(
        fetch(pki.kubernetes_ca_cert.clone()),
        async { fetch(required(&pki.kubernetes_ca_key, "kubernetesCaKey")?).await },
        async { fetch(required(&pki.etcd_ca_cert, "etcdCaCert")?).await },
        async { fetch(required(&pki.etcd_client_cert, "etcdClientCert")?).await },
        async { fetch(required(&pki.etcd_client_key, "etcdClientKey")?).await },
        async { fetch(required(&pki.service_account_key, "serviceAccountKey")?).await },
        async {
            fetch(required(
                &pki.service_account_public_key,
                "serviceAccountPublicKey",
            )?)
            .await
        },
        encryption,
    )?;
    let (kubernetes_ca_trusted, etcd_ca_trusted, service_account_verify_keys) = tokio::try_join!(
        fetch_all(store, &pki.kubernetes_ca_trusted, deadline),
        fetch_all(store, &pki.etcd_ca_trusted, deadline),
        fetch_all(store, &pki.service_account_verify_keys, deadline),
    )?;
    Ok(Secrets {
        kubernetes_ca_cert: ca,
        kubernetes_ca_trusted,
        control_plane: None,
        api_server: Some(ApiServerSecrets {
            kubernetes_ca_key: ca_key,
            etcd_ca_cert: etcd_cert,
            etcd_ca_trusted,
            etcd_client_cert: client_cert,
            etcd_client_key: client_key,
            service_account_key: sa_key,
            service_account_public_key: sa_pub,
            service_account_verify_keys,
            encryption_keys,
        }),
    })
}

/// Every object of `keys`, as text, in order.
async fn fetch_all(
    store: &StateStore,
    keys: &[String],
    deadline: Instant,
) -> Result<Vec<String>, FetchError> {
    let mut texts = Vec::with_capacity(keys.len());
    for key in keys {
        let data = get(store, key, deadline).await?;
        texts.push(text(key, data)?);
    }
    Ok(texts)
}
