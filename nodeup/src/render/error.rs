//! How rendering fails: a spec that contradicts itself, a secret it needs but was not given, or a value that
//! does not serialize.

use ballast_state::spec::Role;

/// Failures rendering (an inconsistent spec or a secret the spec needs but the store did not give).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A control-plane spec without control-plane settings, or the reverse.
    #[error(
        "the node spec is inconsistent: role {role:?} with{} control-plane settings",
        if *has_control_plane_settings { "" } else { "out" }
    )]
    Inconsistent {
        role: Role,
        has_control_plane_settings: bool,
    },
    /// An API-server spec (role `ApiServer`) without API-server settings, or such settings on another role.
    #[error(
        "the node spec is inconsistent: role {role:?} with{} apiServer settings",
        if *has_api_server_settings { "" } else { "out" }
    )]
    InconsistentApiServer {
        role: Role,
        has_api_server_settings: bool,
    },
    /// An API-server node's spec names no etcd member to dial.
    #[error(
        "the node spec's apiServer.etcdMembers is empty: the API server would have no etcd to dial"
    )]
    NoEtcdMembers,
    /// The spec needs a secret that was not fetched.
    #[error("the node spec needs {0}, which was not fetched")]
    MissingSecret(&'static str),
    /// The node spec names an encryption key the stored keys do not have.
    #[error("the node spec names encryption key {0:?}, which the state store's encryption keys do not hold; run `ballast update cluster --yes` again")]
    UnknownEncryptionKey(String),
    /// The release the node spec's Kubernetes version names does not say how to configure containerd: no such
    /// release in the manifest nodeup was built with, no containerd or sandbox image pinned in it, or a sandbox
    /// image other than the one the AMI bakes.
    #[error("containerd's configuration for Kubernetes {kubernetes}: {reason}")]
    ContainerdRelease { kubernetes: String, reason: String },
    /// A taint is not `key[=value]:Effect`.
    #[error("taint {0:?} is not key[=value]:Effect")]
    BadTaint(String),
    /// Serializing a file.
    #[error("serializing {path}: {source}")]
    Serialize {
        path: String,
        #[source]
        source: yaml_serde::Error,
    },
}

/// A value as YAML, a failure named by the file it was for.
pub fn to_yaml<T: serde::Serialize>(path: &str, value: &T) -> Result<String, RenderError> {
    yaml_serde::to_string(value).map_err(|source| RenderError::Serialize {
        path: path.to_string(),
        source,
    })
}
