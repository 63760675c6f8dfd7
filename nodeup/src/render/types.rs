//! Minimal serde mirrors of the Kubernetes configuration files k8s-openapi has no types for: the kubelet's
//! `KubeletConfiguration` (kubelet.config.k8s.io/v1beta1), the API server's `EncryptionConfiguration`
//! (apiserver.config.k8s.io/v1) and a kubeconfig (`Config`, v1). Field names are those of the published
//! schemas; `deny_unknown_fields` makes a misspelt field fail the parse-back tests instead of being ignored by
//! the component at run time.

use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Serialize};

use crate::model::pki;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletConfiguration {
    pub api_version: String,
    pub kind: String,
    pub address: String,
    pub authentication: KubeletAuthentication,
    pub authorization: KubeletAuthorization,
    pub cgroup_driver: String,
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    pub container_runtime_endpoint: String,
    /// The cluster's hard eviction thresholds; left out (the kubelet's defaults) when it sets none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub eviction_hard: std::collections::BTreeMap<String, String>,
    #[serde(
        default,
        rename = "failCgroupV1",
        skip_serializing_if = "Option::is_none"
    )]
    pub fail_cgroup_v1: Option<bool>,
    pub healthz_bind_address: String,
    pub protect_kernel_defaults: bool,
    pub read_only_port: u16,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub register_with_taints: Vec<Taint>,
    pub resolv_conf: String,
    pub rotate_certificates: bool,
    #[serde(rename = "serverTLSBootstrap")]
    pub server_tls_bootstrap: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_pod_path: Option<String>,
    pub tls_cert_file: String,
    pub tls_min_version: String,
    pub tls_private_key_file: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletAuthentication {
    pub anonymous: Enabled,
    pub webhook: KubeletWebhookAuthentication,
    pub x509: KubeletX509Authentication,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Enabled {
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletWebhookAuthentication {
    pub enabled: bool,
    #[serde(rename = "cacheTTL")]
    pub cache_ttl: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletX509Authentication {
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletAuthorization {
    pub mode: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EncryptionConfiguration {
    pub api_version: String,
    pub kind: String,
    pub resources: Vec<EncryptionResource>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EncryptionResource {
    pub resources: Vec<String>,
    pub providers: Vec<EncryptionProviderConfig>,
}

/// One provider: exactly one of the fields is set, as the schema requires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EncryptionProviderConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secretbox: Option<KeysConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aescbc: Option<KeysConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aesgcm: Option<KeysConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Empty>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeysConfig {
    pub keys: Vec<NamedKey>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamedKey {
    pub name: String,
    pub secret: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// A kubeconfig (`apiVersion: v1`, `kind: Config`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Kubeconfig {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub clusters: Vec<NamedCluster>,
    pub users: Vec<NamedUser>,
    pub contexts: Vec<NamedContext>,
    pub current_context: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedCluster {
    pub name: String,
    pub cluster: KubeconfigCluster,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KubeconfigCluster {
    pub server: String,
    pub certificate_authority: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedUser {
    pub name: String,
    pub user: KubeconfigUser,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KubeconfigUser {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedContext {
    pub name: String,
    pub context: KubeconfigContext,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeconfigContext {
    pub cluster: String,
    pub user: String,
}

/// A kubeconfig for one user of one server.
pub fn kubeconfig(server: &str, user: &str, credentials: KubeconfigUser) -> Kubeconfig {
    Kubeconfig {
        api_version: "v1".into(),
        kind: "Config".into(),
        clusters: vec![NamedCluster {
            name: "kubernetes".into(),
            cluster: KubeconfigCluster {
                server: server.to_string(),
                certificate_authority: pki::KUBERNETES_CA_CERT.into(),
            },
        }],
        users: vec![NamedUser {
            name: user.to_string(),
            user: credentials,
        }],
        contexts: vec![NamedContext {
            name: "default".into(),
            context: KubeconfigContext {
                cluster: "kubernetes".into(),
                user: user.to_string(),
            },
        }],
        current_context: "default".into(),
    }
}
