//! What a node is told: the boot config in its user-data, and the node spec it fetches from the state store.
//!
//! The boot config stays tiny and typed: which cluster and group, where the node spec lives, and the node spec's
//! sha256, which `nodeup` checks before using it. Everything else is in the node spec, rendered here (pure) from
//! the completed cluster spec. Same completed spec, same node spec, same hash: a group's instances are out of
//! date exactly when its hash changes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::digest::sha256_hex;
use crate::keyset::{KeyLocations, NodeKeys};
use crate::layout::{pki_names, ClusterPaths, ENCRYPTION_KEYS_SECRET};
use crate::spec::*;

pub const KIND_BOOT_CONFIG: &str = "BootConfig";
pub const KIND_NODE_SPEC: &str = "NodeSpec";

/// Service network of every cluster (kops's default): the API server's service IP is its first address.
pub const SERVICE_CIDR: &str = "100.64.0.0/13";
/// Pod network, for CNIs that need one.
pub const POD_CIDR: &str = "100.96.0.0/11";
/// The cluster DNS service's IP, inside [`SERVICE_CIDR`].
pub const CLUSTER_DNS_IP: &str = "100.64.0.10";
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The sandbox image the AMIs of Kubernetes 1.32 and 1.33 bake, so pods start without a pull; a node spec names
/// its release's own ([`sandbox_image`]: 1.34 bakes pause 3.10.1).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The sandbox image the AMI of `kubernetes_version`'s release bakes (`images/manifest.yaml`, its `pause` pin):
/// nodeup refuses a node spec naming another, since every pod start would pull it. [`PAUSE_IMAGE`] for a version
/// the manifest does not pin, which validation refuses before any node spec is written.
pub fn sandbox_image(kubernetes_version: &str) -> String {
    crate::components::ComponentManifest::embedded()
        .ok()
        .and_then(|manifest| {
            manifest
                .sandbox_image(kubernetes_version)
                .map(str::to_string)
        })
        .unwrap_or_else(|| PAUSE_IMAGE.to_string())
}

/// The user-data of every instance of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootConfig {
    pub api_version: String,
    pub kind: String,
    pub cluster_name: String,
    pub instance_group: String,
    pub role: Role,
    /// The state store's root URL (`s3://bucket/prefix`).
    pub state_store: String,
    /// The node spec's key under the state store's root.
    pub node_spec: String,
    /// sha256 (hex) of the node spec's bytes; `nodeup` refuses a spec that does not match.
    pub node_spec_sha256: String,
}

/// Everything a node needs to configure itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSpec {
    pub api_version: String,
    pub kind: String,
    pub cluster_name: String,
    pub instance_group: String,
    pub role: Role,
    pub kubernetes_version: String,
    /// The state store's root URL; the paths in `pki` are keys under it.
    pub state_store: String,
    /// The KMS key (ARN) the node's writes to the state store are encrypted with; SSE-S3 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_store_kms_key: Option<String>,
    /// The API's load balancer DNS name: kubelets and clients reach the API through it, and it is in the API
    /// server certificate's names.
    pub api_server_endpoint: String,
    pub service_cidr: String,
    pub pod_cidr: String,
    pub cluster_dns: String,
    pub cluster_domain: String,
    pub networking: Networking,
    /// Cilium's routing mode, written only when it is `native` (`spec.cilium.routingMode`): absent means tunnel,
    /// so the node specs of every cluster that keeps the default hash as they did before the field existed,
    /// and no instance is replaced for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cilium_routing_mode: Option<CiliumRoutingMode>,
    /// `spec.cilium.agentPodAnnotations`, on control-plane nodes only (their add-on applier installs Cilium);
    /// absent when empty, so a cluster without them keeps its node specs' hashes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cilium_agent_pod_annotations: BTreeMap<String, String>,
    /// `spec.cilium.operatorPodAnnotations`, as `ciliumAgentPodAnnotations`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cilium_operator_pod_annotations: BTreeMap<String, String>,
    pub kubelet: KubeletSettings,
    /// The cluster's `spec.kubeProxy.conntrackMaxPerCore`; unset, kube-proxy's default. Read where the add-ons
    /// are rendered (control-plane nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_proxy_conntrack_max_per_core: Option<u32>,
    pub containerd: ContainerdSettings,
    pub pki: PkiLocations,
    /// The operator's SSH public keys (`authorized_keys` lines, `ballast create secret sshpublickey`): nodeup
    /// installs exactly these for root. Public values, so every node gets them; whether port 22 is open is
    /// `spec.sshAccess`'s job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<String>,
    /// Present on control-plane nodes only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneSettings>,
    /// Present on API-server nodes only (role `ApiServer`): what their API server needs; they host no etcd member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server: Option<ApiServerSettings>,
    /// The group's extra volumes to mount (`spec.volumeMounts`): nodeup formats a blank one, then mounts each
    /// before the kubelet starts (`docs/nodeup.md`, "Extra volumes").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
}

/// One extra volume nodeup mounts: the device EC2 attached it on (the launch template's block device mapping),
/// where, and how to format it when it is blank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeMount {
    pub device: String,
    pub path: String,
    /// `ext4` or `xfs`.
    pub filesystem: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub format_options: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_options: Vec<String>,
}

impl VolumeMount {
    /// What a node is told of a completed group's mount.
    pub fn from_spec(mount: &crate::spec::VolumeMountSpec) -> Self {
        VolumeMount {
            device: mount.device.clone(),
            path: mount.path.clone(),
            filesystem: mount
                .filesystem
                .clone()
                .unwrap_or_else(|| crate::group_volumes::DEFAULT_FILESYSTEM.to_string()),
            format_options: mount.format_options.clone(),
            mount_options: mount.mount_options.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletSettings {
    pub node_labels: BTreeMap<String, String>,
    pub taints: Vec<String>,
    pub cgroup_driver: String,
    /// The cluster's `spec.kubelet.failCgroupV1`; unset, the kubelet's default.
    #[serde(
        default,
        rename = "failCgroupV1",
        skip_serializing_if = "Option::is_none"
    )]
    pub fail_cgroup_v1: Option<bool>,
    /// The cluster's `spec.kubelet.evictionHard`, parsed; empty, the kubelet's defaults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerdSettings {
    pub sandbox_image: String,
}

/// Where the node's trust material is, as keys under the state store. Worker nodes get CA certificates only;
/// their kubelets join through TLS bootstrapping, so no worker ever holds a CA key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PkiLocations {
    pub kubernetes_ca_cert: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_ca_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_ca_cert: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_ca_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_public_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_keys: Option<String>,
    /// Key rotation (docs/keys.md): CA certificates trusted beside `kubernetesCaCert`, which issues.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubernetes_ca_trusted: Vec<String>,
    /// CA certificates trusted beside `etcdCaCert` (control plane only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd_ca_trusted: Vec<String>,
    /// Public keys verifying service-account tokens beside `serviceAccountPublicKey` (control plane only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_account_verify_keys: Vec<String>,
    /// The encryption keys (by name, from `encryptionKeys`) the API server is configured with, in order: the
    /// first encrypts, all decrypt. Absent before the encryption key was first rotated: every key, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key_names: Option<Vec<String>>,
    /// The etcd client certificate and key the API-server nodes' API servers use (API-server nodes only: they
    /// hold no etcd CA key, so `update cluster` issues this pair; `pki/etcd-client-api-server/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_client_cert: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_client_key: Option<String>,
    /// Where node specs written before node identity named a shared kubelet bootstrap token
    /// (`pki.bootstrapToken`). Read so that such a spec still loads, never written and never used: workers
    /// prove which instance they are instead (docs/node-identity.md).
    #[serde(default, rename = "bootstrapToken", skip_serializing)]
    pub legacy_bootstrap_token: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlPlaneSettings {
    /// Secrets encrypted at rest with this provider; `None` when disabled.
    pub encryption_provider: Option<EncryptionProvider>,
    pub audit_log_path: String,
    pub audit_log_max_age_days: u32,
    /// Where the node ships the audit log (docs/audit.md). Absent in node specs written before shipping existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_shipping: Option<crate::audit::AuditShipping>,
    pub etcd: EtcdSettings,
    /// The published service-account issuer (IRSA, `docs/irsa.md`); absent: the in-cluster issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_issuer: Option<crate::irsa::IssuerSettings>,
    /// Roles of Ballast's AWS-calling add-ons on IRSA; absent: they use the instance role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addon_roles: Option<crate::irsa::AddonRoles>,
    /// The Pod Identity Webhook's settings (IRSA with the IAM OIDC provider); absent: it is not installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_identity_webhook: Option<crate::irsa::PodIdentityWebhookSettings>,
    /// The cluster autoscaler's settings (`spec.clusterAutoscaler.enabled`); absent: it is not installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_autoscaler: Option<crate::autoscaler::ClusterAutoscalerSettings>,
    /// The termination handler's queue and hook (`spec.terminationHandling`, docs/termination.md); absent: no
    /// handler runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_handling: Option<crate::termination::TerminationHandlingSettings>,
}

/// What an API-server node's kube-apiserver is configured with: the control plane's settings for it, and the
/// etcd members it dials (by their stable names, `etcd-<member>.internal.<cluster>:2379`, kept current in the
/// node's hosts block from EC2's listing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiServerSettings {
    /// Secrets encrypted at rest with this provider; `None` when disabled (as on the control plane).
    pub encryption_provider: Option<EncryptionProvider>,
    pub audit_log_path: String,
    pub audit_log_max_age_days: u32,
    /// Every etcd member's name, sorted: its client URL is `https://etcd-<member>.internal.<cluster>:2379`.
    pub etcd_members: Vec<String>,
    /// The published service-account issuer (IRSA, `docs/irsa.md`), as the control plane's: tokens this API
    /// server signs must name the issuer the others accept. Absent: the in-cluster issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_issuer: Option<crate::irsa::IssuerSettings>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdSettings {
    /// This group's member name.
    pub member_name: String,
    /// Every member: name -> the control-plane group hosting it.
    pub members: BTreeMap<String, String>,
    pub backup_interval: String,
    pub backup_retention: String,
    /// etcd's `--heartbeat-interval` in ms (`spec.etcd.heartbeatInterval`); absent when the spec leaves it to
    /// etcd's default (100 ms), so a spec without it renders the node spec it always did (no roll).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_interval_ms: Option<u32>,
    /// etcd's `--election-timeout` in ms (`spec.etcd.leaderElectionTimeout`); absent: etcd's default (1 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub election_timeout_ms: Option<u32>,
}

/// Where and how a control-plane node ships its audit log, from the completed spec: the named destination, or
/// the state store; the named key, or (in the state store) the store's own key.
fn audit_shipping(
    cluster: &crate::spec::ClusterSpec,
    state_store: &str,
) -> crate::audit::AuditShipping {
    let audit = cluster.audit_log.clone().unwrap_or_default();
    let store_key = cluster
        .state_store
        .as_ref()
        .and_then(|s| s.kms_key_id.clone());
    let (destination, kms_key_id) = match audit.destination {
        Some(url) => (url.trim_end_matches('/').to_string(), audit.kms_key_id),
        None => (state_store.to_string(), audit.kms_key_id.or(store_key)),
    };
    crate::audit::AuditShipping {
        destination,
        kms_key_id,
        chunk_interval: audit
            .chunk_interval
            .unwrap_or_else(|| crate::defaults::DEFAULT_AUDIT_CHUNK_INTERVAL.to_string()),
        chunk_max_bytes: audit
            .chunk_max_bytes
            .unwrap_or(crate::defaults::DEFAULT_AUDIT_CHUNK_MAX_BYTES),
    }
}

/// The spec's etcd timing in ms (`etcd_timing`), each `None` when the spec leaves it to etcd's default.
/// Validation refuses a bad pair first; rendering checks again rather than trust it, so no node spec ever
/// carries a pair etcd would refuse to start with.
fn etcd_timing_ms(
    etcd: &crate::spec::EtcdSpec,
    group: &str,
) -> Result<(Option<u32>, Option<u32>), NodeSpecError> {
    let timing = crate::etcd_timing::EtcdTiming::from_spec(
        etcd.heartbeat_interval.as_deref(),
        etcd.leader_election_timeout.as_deref(),
    )
    .map_err(|(field, source)| NodeSpecError::EtcdTiming {
        group: group.to_string(),
        field,
        source,
    })?;
    Ok((
        etcd.heartbeat_interval
            .as_ref()
            .map(|_| timing.heartbeat_interval_ms),
        etcd.leader_election_timeout
            .as_ref()
            .map(|_| timing.election_timeout_ms),
    ))
}

/// Failures rendering what a node is told.
#[derive(Debug, thiserror::Error)]
pub enum NodeSpecError {
    #[error("instance group {group:?} is not in the completed spec")]
    UnknownGroup { group: String },
    #[error("control-plane group {group:?} hosts no etcd member")]
    NoEtcdMember { group: String },
    /// The spec's etcd timing is one etcd would refuse (validation refuses it first).
    #[error("the node spec of {group:?}: {field}: {source}")]
    EtcdTiming {
        group: String,
        field: &'static str,
        #[source]
        source: crate::etcd_timing::TimingError,
    },
    #[error("rendering the node spec of {group:?}: {source}")]
    Render {
        group: String,
        #[source]
        source: yaml_serde::Error,
    },
}

/// A group's node spec, rendered, with its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedNodeSpec {
    pub spec: NodeSpec,
    pub yaml: String,
    pub sha256: String,
}

/// Renders the node spec of `group` from a completed config, for a cluster whose keys were never rotated.
pub fn render_node_spec(
    completed: &ClusterConfig,
    group: &str,
    state_store: &str,
    api_server_endpoint: &str,
) -> Result<RenderedNodeSpec, NodeSpecError> {
    render_node_spec_with_keys(
        completed,
        group,
        state_store,
        api_server_endpoint,
        &NodeKeys::default(),
    )
}

/// Renders the node spec of `group` from a completed config and the keys its nodes must use (`keyset`).
pub fn render_node_spec_with_keys(
    completed: &ClusterConfig,
    group: &str,
    state_store: &str,
    api_server_endpoint: &str,
    keys: &NodeKeys,
) -> Result<RenderedNodeSpec, NodeSpecError> {
    let ig = completed
        .instance_group(group)
        .ok_or_else(|| NodeSpecError::UnknownGroup {
            group: group.to_string(),
        })?;
    let cluster = &completed.cluster.spec;
    let paths = ClusterPaths::new(completed.name());
    let control_plane = ig.spec.role == Role::ControlPlane;
    // An API-server node gets what its API server needs (and the Kubernetes CA's key, to issue its serving and
    // kubelet-client certificates as a control-plane node does), never the etcd CA's key: its etcd client
    // certificate is issued for it.
    let api_server = ig.spec.role == Role::ApiServer;
    let private = |key: String| control_plane.then_some(key);
    let serving = |key: String| (control_plane || api_server).then_some(key);
    let pki = PkiLocations {
        kubernetes_ca_cert: paths.pki_cert(pki_names::KUBERNETES_CA),
        kubernetes_ca_key: serving(paths.pki_key(pki_names::KUBERNETES_CA)),
        etcd_ca_cert: serving(paths.pki_cert(pki_names::ETCD_CA)),
        etcd_ca_key: private(paths.pki_key(pki_names::ETCD_CA)),
        service_account_key: serving(paths.pki_key(pki_names::SERVICE_ACCOUNT)),
        service_account_public_key: serving(paths.pki_public_key(pki_names::SERVICE_ACCOUNT)),
        encryption_keys: serving(paths.secret(ENCRYPTION_KEYS_SECRET)),
        kubernetes_ca_trusted: Vec::new(),
        etcd_ca_trusted: Vec::new(),
        service_account_verify_keys: Vec::new(),
        encryption_key_names: None,
        etcd_client_cert: api_server.then(|| paths.pki_cert(pki_names::API_SERVER_ETCD_CLIENT)),
        etcd_client_key: api_server.then(|| paths.pki_key(pki_names::API_SERVER_ETCD_CLIENT)),
        legacy_bootstrap_token: None,
    };
    let pki = with_rotated_keys(pki, keys.locations(&paths), control_plane || api_server);
    let pki = PkiLocations {
        etcd_ca_key: pki.etcd_ca_key.filter(|_| control_plane),
        ..pki
    };
    let api_server_settings = api_server.then(|| {
        let etcd = cluster.etcd.clone().unwrap_or_default();
        let encryption = cluster.encryption_config.clone().unwrap_or_default();
        let mut etcd_members: Vec<String> = etcd.members.iter().map(|m| m.name.clone()).collect();
        etcd_members.sort();
        ApiServerSettings {
            encryption_provider: encryption
                .enabled
                .unwrap_or(true)
                .then(|| encryption.provider.unwrap_or(EncryptionProvider::Secretbox)),
            audit_log_path: "/var/log/kubernetes/audit.log".to_string(),
            audit_log_max_age_days: 30,
            etcd_members,
            service_account_issuer: None,
        }
    });
    let control_plane_settings = if control_plane {
        let etcd = cluster.etcd.clone().unwrap_or_default();
        let member_name = etcd
            .members
            .iter()
            .find(|m| m.instance_group == group)
            .map(|m| m.name.clone())
            .ok_or_else(|| NodeSpecError::NoEtcdMember {
                group: group.to_string(),
            })?;
        let backup = etcd.backup.clone().unwrap_or_default();
        let (heartbeat_interval_ms, election_timeout_ms) = etcd_timing_ms(&etcd, group)?;
        let encryption = cluster.encryption_config.clone().unwrap_or_default();
        Some(ControlPlaneSettings {
            encryption_provider: encryption
                .enabled
                .unwrap_or(true)
                .then(|| encryption.provider.unwrap_or(EncryptionProvider::Secretbox)),
            audit_log_path: "/var/log/kubernetes/audit.log".to_string(),
            audit_log_max_age_days: 30,
            audit_shipping: Some(audit_shipping(cluster, state_store)),
            service_account_issuer: None,
            addon_roles: None,
            pod_identity_webhook: None,
            cluster_autoscaler: crate::autoscaler::settings(completed),
            termination_handling: crate::termination::settings(completed),
            etcd: EtcdSettings {
                member_name,
                members: etcd
                    .members
                    .iter()
                    .map(|m| (m.name.clone(), m.instance_group.clone()))
                    .collect(),
                backup_interval: backup.interval.unwrap_or_default(),
                backup_retention: backup.retention.unwrap_or_default(),
                heartbeat_interval_ms,
                election_timeout_ms,
            },
        })
    } else {
        None
    };
    let kubernetes_version = cluster
        .kubernetes_version
        .clone()
        .unwrap_or_default()
        .trim_start_matches('v')
        .to_string();
    let spec = NodeSpec {
        api_version: API_VERSION.to_string(),
        kind: KIND_NODE_SPEC.to_string(),
        cluster_name: completed.name().to_string(),
        instance_group: group.to_string(),
        role: ig.spec.role,
        containerd: ContainerdSettings {
            sandbox_image: sandbox_image(&kubernetes_version),
        },
        kubernetes_version,
        state_store: state_store.to_string(),
        state_store_kms_key: cluster
            .state_store
            .as_ref()
            .and_then(|s| s.kms_key_id.clone()),
        api_server_endpoint: api_server_endpoint.to_string(),
        service_cidr: SERVICE_CIDR.to_string(),
        pod_cidr: POD_CIDR.to_string(),
        cluster_dns: CLUSTER_DNS_IP.to_string(),
        cluster_domain: CLUSTER_DOMAIN.to_string(),
        networking: cluster.networking.unwrap_or(Networking::Cilium),
        cilium_routing_mode: cluster
            .cilium
            .as_ref()
            .and_then(|c| c.routing_mode)
            .filter(|mode| *mode == CiliumRoutingMode::Native),
        cilium_agent_pod_annotations: cluster
            .cilium
            .as_ref()
            .filter(|_| control_plane)
            .map(|c| c.agent_pod_annotations.clone())
            .unwrap_or_default(),
        cilium_operator_pod_annotations: cluster
            .cilium
            .as_ref()
            .filter(|_| control_plane)
            .map(|c| c.operator_pod_annotations.clone())
            .unwrap_or_default(),
        kube_proxy_conntrack_max_per_core: cluster
            .kube_proxy
            .as_ref()
            .and_then(|k| k.conntrack_max_per_core),
        kubelet: KubeletSettings {
            node_labels: ig.spec.node_labels.clone(),
            taints: ig.spec.taints.clone().unwrap_or_default(),
            cgroup_driver: "systemd".to_string(),
            fail_cgroup_v1: cluster.kubelet.as_ref().and_then(|k| k.fail_cgroup_v1),
            // Validated before any node spec is made; a value that does not parse gives the defaults.
            eviction_hard: cluster
                .kubelet
                .as_ref()
                .and_then(|k| k.eviction_hard.as_deref())
                .and_then(|e| crate::spec::parse_eviction_hard(e).ok())
                .unwrap_or_default(),
        },
        pki,
        ssh_authorized_keys: keys.ssh_authorized_keys.clone(),
        control_plane: control_plane_settings,
        api_server: api_server_settings,
        volume_mounts: ig
            .spec
            .volume_mounts
            .iter()
            .map(VolumeMount::from_spec)
            .collect(),
    };
    let yaml = yaml_serde::to_string(&spec).map_err(|source| NodeSpecError::Render {
        group: group.to_string(),
        source,
    })?;
    Ok(RenderedNodeSpec {
        sha256: sha256_hex(yaml.as_bytes()),
        spec,
        yaml,
    })
}

/// `pki` with the keys of rotated keysets: workers get certificates only, never a private key. `control_plane`
/// is also true for API-server nodes, whose etcd CA key the caller drops.
fn with_rotated_keys(mut pki: PkiLocations, at: KeyLocations, control_plane: bool) -> PkiLocations {
    pki.kubernetes_ca_cert = at.kubernetes_ca_cert.unwrap_or(pki.kubernetes_ca_cert);
    pki.kubernetes_ca_trusted = at.kubernetes_ca_trusted;
    if control_plane {
        let or = |new: Option<String>, old: Option<String>| new.or(old);
        pki.kubernetes_ca_key = or(at.kubernetes_ca_key, pki.kubernetes_ca_key);
        pki.etcd_ca_cert = or(at.etcd_ca_cert, pki.etcd_ca_cert);
        pki.etcd_ca_key = or(at.etcd_ca_key, pki.etcd_ca_key);
        pki.etcd_ca_trusted = at.etcd_ca_trusted;
        pki.service_account_key = or(at.service_account_key, pki.service_account_key);
        pki.service_account_public_key = or(
            at.service_account_public_key,
            pki.service_account_public_key,
        );
        pki.service_account_verify_keys = at.service_account_verify_keys;
        pki.encryption_key_names = at.encryption_key_names;
    }
    pki
}

impl BootConfig {
    /// The boot config of a group whose node spec hashes to `node_spec_sha256`.
    pub fn for_group(
        cluster: &str,
        group: &str,
        role: Role,
        state_store: &str,
        node_spec_sha256: &str,
    ) -> Self {
        BootConfig {
            api_version: API_VERSION.to_string(),
            kind: KIND_BOOT_CONFIG.to_string(),
            cluster_name: cluster.to_string(),
            instance_group: group.to_string(),
            role,
            state_store: state_store.to_string(),
            node_spec: ClusterPaths::new(cluster).node_spec(group),
            node_spec_sha256: node_spec_sha256.to_string(),
        }
    }

    /// The user-data text.
    pub fn to_user_data(&self) -> Result<String, yaml_serde::Error> {
        Ok(format!(
            "#ballast-boot-config\n{}",
            yaml_serde::to_string(self)?
        ))
    }

    /// Parses user-data written by [`BootConfig::to_user_data`].
    pub fn from_user_data(text: &str) -> Result<Self, yaml_serde::Error> {
        yaml_serde::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::complete;
    use crate::generate::{generate, ClusterTemplate};

    fn completed() -> ClusterConfig {
        complete(
            &generate(&ClusterTemplate {
                name: "demo.example.com".into(),
                zones: vec![
                    "us-west-2a".into(),
                    "us-west-2b".into(),
                    "us-west-2c".into(),
                ],
                ..Default::default()
            })
            .expect("template"),
        )
    }

    #[test]
    fn workers_never_get_ca_keys() {
        let config = completed();
        let spec = render_node_spec(&config, "nodes", "s3://b/p", "api.elb").expect("render");
        assert_eq!(spec.spec.pki.kubernetes_ca_key, None);
        assert_eq!(spec.spec.pki.etcd_ca_key, None);
        assert_eq!(spec.spec.pki.encryption_keys, None);
        assert!(spec.spec.control_plane.is_none());
        assert!(!spec.yaml.contains("key.pem"), "{}", spec.yaml);
        let cp = render_node_spec(&config, "control-plane-us-west-2a", "s3://b/p", "api.elb")
            .expect("render");
        assert_eq!(
            cp.spec.pki.etcd_ca_key.as_deref(),
            Some("demo.example.com/pki/etcd-ca/key.pem")
        );
        assert_eq!(
            cp.spec
                .control_plane
                .expect("control plane")
                .etcd
                .members
                .len(),
            3
        );
    }

    /// Nothing reads a shared bootstrap token any more, so no node spec names one; a spec written before
    /// (naming it) still loads.
    #[test]
    fn node_specs_name_no_bootstrap_token() {
        let config = completed();
        for group in ["nodes", "control-plane-us-west-2a"] {
            let spec = render_node_spec(&config, group, "s3://b/p", "api.elb").expect("render");
            assert!(!spec.yaml.contains("bootstrap"), "{group}: {}", spec.yaml);
        }
        let spec = render_node_spec(&config, "nodes", "s3://b/p", "api.elb").expect("render");
        let old = spec.yaml.replace(
            "pki:\n",
            "pki:\n  bootstrapToken: demo.example.com/secrets/bootstrap-token\n",
        );
        assert_ne!(old, spec.yaml, "the old field was inserted");
        let loaded: NodeSpec = yaml_serde::from_str(&old).expect("an old node spec loads");
        assert_eq!(
            loaded.pki.kubernetes_ca_cert,
            spec.spec.pki.kubernetes_ca_cert
        );
    }

    #[test]
    fn the_hash_follows_the_content_and_the_boot_config_round_trips() {
        let config = completed();
        let a = render_node_spec(&config, "nodes", "s3://b/p", "api.elb").expect("render");
        let again = render_node_spec(&config, "nodes", "s3://b/p", "api.elb").expect("render");
        assert_eq!(a, again, "rendering is deterministic");
        let mut changed = config.clone();
        changed.cluster.spec.kubernetes_version = Some("1.33.5".into());
        let b = render_node_spec(&changed, "nodes", "s3://b/p", "api.elb").expect("render");
        assert_ne!(a.sha256, b.sha256);
        let boot = BootConfig::for_group(config.name(), "nodes", Role::Node, "s3://b/p", &a.sha256);
        let text = boot.to_user_data().expect("user data");
        assert_eq!(BootConfig::from_user_data(&text).expect("parse"), boot);
        assert_eq!(boot.node_spec, "demo.example.com/nodes/nodes/spec.yaml");
    }

    /// The node spec names the sandbox image its release's AMI bakes: pause 3.10 up to 1.33, 3.10.1 from 1.34 (what
    /// Kubernetes 1.34 moved to), so an upgrade to 1.34 changes it (and the hash, so the roll carries it).
    #[test]
    fn the_sandbox_image_is_the_one_the_release_bakes() {
        let config = completed();
        let mut config = config;
        config.cluster.spec.kubernetes_version = Some("1.33.4".into());
        let older = render_node_spec(&config, "nodes", "s3://b/p", "api.elb").expect("render");
        assert_eq!(older.spec.kubernetes_version, "1.33.4");
        assert_eq!(older.spec.containerd.sandbox_image, PAUSE_IMAGE);
        let mut upgraded = config.clone();
        upgraded.cluster.spec.kubernetes_version = Some("v1.34.0".into());
        let newer = render_node_spec(&upgraded, "nodes", "s3://b/p", "api.elb").expect("render");
        assert_eq!(newer.spec.kubernetes_version, "1.34.0");
        assert_eq!(
            newer.spec.containerd.sandbox_image,
            "registry.k8s.io/pause:3.10.1"
        );
        assert_ne!(older.sha256, newer.sha256);
        // A version the manifest does not pin (validation refuses it first) keeps the default.
        assert_eq!(sandbox_image("1.29.1"), PAUSE_IMAGE);
    }

    /// `spec.etcd.heartbeatInterval` and `leaderElectionTimeout` reach the control-plane node specs in ms and
    /// change their hash (so `rolling-update cluster` carries a change to every member, one at a time); workers'
    /// specs are untouched; with neither set the node spec is byte for byte what it was before the fields existed.
    #[test]
    fn etcd_timing_reaches_control_plane_node_specs_only() {
        let config = completed();
        let cp = "control-plane-us-west-2a";
        let before = render_node_spec(&config, cp, "s3://b/p", "api.elb").expect("render");
        assert!(!before.yaml.contains("heartbeat"), "{}", before.yaml);
        assert!(!before.yaml.contains("electionTimeout"), "{}", before.yaml);
        let worker = render_node_spec(&config, "nodes", "s3://b/p", "api.elb").expect("render");

        let mut tight = config.clone();
        let etcd = tight.cluster.spec.etcd.get_or_insert_with(Default::default);
        etcd.heartbeat_interval = Some("50ms".into());
        etcd.leader_election_timeout = Some("0.5s".into());
        let after = render_node_spec(&tight, cp, "s3://b/p", "api.elb").expect("render");
        let settings = &after
            .spec
            .control_plane
            .as_ref()
            .expect("control plane")
            .etcd;
        assert_eq!(settings.heartbeat_interval_ms, Some(50));
        assert_eq!(settings.election_timeout_ms, Some(500));
        assert!(
            after.yaml.contains("heartbeatIntervalMs: 50"),
            "{}",
            after.yaml
        );
        assert!(
            after.yaml.contains("electionTimeoutMs: 500"),
            "{}",
            after.yaml
        );
        assert_ne!(before.sha256, after.sha256);
        let worker_after =
            render_node_spec(&tight, "nodes", "s3://b/p", "api.elb").expect("render");
        assert_eq!(worker.sha256, worker_after.sha256);

        // One alone is carried alone: the other stays etcd's default on the node.
        let mut one = config.clone();
        one.cluster
            .spec
            .etcd
            .get_or_insert_with(Default::default)
            .heartbeat_interval = Some("150ms".into());
        let rendered = render_node_spec(&one, cp, "s3://b/p", "api.elb").expect("render");
        let settings = &rendered
            .spec
            .control_plane
            .as_ref()
            .expect("control plane")
            .etcd;
        assert_eq!(settings.heartbeat_interval_ms, Some(150));
        assert_eq!(settings.election_timeout_ms, None);

        // A pair etcd would refuse never becomes a node spec, even if validation was skipped.
        let mut bad = config.clone();
        bad.cluster
            .spec
            .etcd
            .get_or_insert_with(Default::default)
            .heartbeat_interval = Some("300ms".into());
        let err = render_node_spec(&bad, cp, "s3://b/p", "api.elb").expect_err("refused");
        assert!(
            err.to_string().contains("spec.etcd.heartbeatInterval"),
            "{err}"
        );
    }

    /// The operator's SSH keys go into every node spec, workers' included, and change its hash (so a roll carries
    /// them); with none, the spec is exactly as before SSH keys existed.
    #[test]
    fn ssh_keys_are_in_every_node_spec_and_change_its_hash() {
        let config = completed();
        let keys = NodeKeys {
            ssh_authorized_keys: vec!["ssh-ed25519 AAAA op@example".into()],
            ..Default::default()
        };
        for group in ["nodes", "control-plane-us-west-2a"] {
            let without = render_node_spec(&config, group, "s3://b/p", "api.elb").expect("render");
            assert!(!without.yaml.contains("ssh"), "{group}: {}", without.yaml);
            let with = render_node_spec_with_keys(&config, group, "s3://b/p", "api.elb", &keys)
                .expect("render");
            assert_eq!(with.spec.ssh_authorized_keys, keys.ssh_authorized_keys);
            assert!(
                with.yaml
                    .contains("sshAuthorizedKeys:\n- ssh-ed25519 AAAA op@example\n"),
                "{group}: {}",
                with.yaml
            );
            assert_ne!(with.sha256, without.sha256, "{group}");
        }
    }

    /// An API-server node's spec: what its API server needs (the Kubernetes CA's key to issue its serving and
    /// kubelet-client certificates, the service-account keys, the encryption keys, the etcd CA's certificate and
    /// the etcd client pair issued for API servers), never the etcd CA's key, and no etcd member of its own.
    #[test]
    fn api_server_nodes_get_what_their_api_server_needs_and_no_etcd_ca_key() {
        let mut config = completed();
        let mut group = config
            .instance_groups
            .iter()
            .find(|ig| ig.spec.role == Role::Node)
            .expect("nodes")
            .clone();
        group.metadata.name = "apiserver".into();
        group.spec.role = Role::ApiServer;
        config.instance_groups.push(group);
        let spec = render_node_spec(&config, "apiserver", "s3://b/p", "api.elb").expect("render");
        let pki = &spec.spec.pki;
        let at = |name: &str| format!("demo.example.com/pki/{name}");
        assert_eq!(pki.kubernetes_ca_key, Some(at("kubernetes-ca/key.pem")));
        assert_eq!(pki.etcd_ca_cert, Some(at("etcd-ca/cert.pem")));
        assert_eq!(pki.etcd_ca_key, None);
        assert_eq!(
            pki.etcd_client_cert,
            Some(at("etcd-client-api-server/cert.pem"))
        );
        assert_eq!(
            pki.etcd_client_key,
            Some(at("etcd-client-api-server/key.pem"))
        );
        assert_eq!(pki.service_account_key, Some(at("service-account/key.pem")));
        assert_eq!(
            pki.encryption_keys.as_deref(),
            Some("demo.example.com/secrets/encryption-keys.yaml")
        );
        assert!(!spec.yaml.contains("etcd-ca/key.pem"), "{}", spec.yaml);
        assert!(
            spec.spec.control_plane.is_none(),
            "no etcd member, no supervisor"
        );
        let settings = spec.spec.api_server.as_ref().expect("API-server settings");
        assert_eq!(
            settings.etcd_members,
            vec![
                "control-plane-us-west-2a",
                "control-plane-us-west-2b",
                "control-plane-us-west-2c"
            ]
        );
        assert_eq!(
            settings.encryption_provider,
            Some(EncryptionProvider::Secretbox)
        );
        // With a published service-account issuer (IRSA), the API-server node's API server names it as the
        // control plane's does, so the tokens either signs are accepted by both; the hash follows.
        let issuer = crate::irsa::IssuerSettings {
            issuer: "https://oidc.example.com/demo".into(),
            jwks_uri: "https://oidc.example.com/demo/openid/v1/jwks".into(),
            previous_issuers: vec!["https://kubernetes.default.svc.cluster.local".into()],
            api_audiences: vec!["kubernetes.svc.default".into()],
        };
        let with = crate::issuer::with_irsa(spec.clone(), Some(&issuer), None, None)
            .expect("with the issuer");
        assert_eq!(
            with.spec
                .api_server
                .as_ref()
                .and_then(|a| a.service_account_issuer.as_ref()),
            Some(&issuer)
        );
        assert_ne!(with.sha256, spec.sha256);
        let cp = render_node_spec(&config, "control-plane-us-west-2a", "s3://b/p", "api.elb")
            .expect("render");
        let cp = crate::issuer::with_irsa(cp, Some(&issuer), None, None).expect("cp");
        assert_eq!(
            cp.spec
                .control_plane
                .as_ref()
                .and_then(|c| c.service_account_issuer.as_ref()),
            Some(&issuer)
        );
        // Workers and the control plane are as before: no etcd client pair, no API-server settings.
        for group in ["nodes", "control-plane-us-west-2a"] {
            let other = render_node_spec(&config, group, "s3://b/p", "api.elb").expect("render");
            assert_eq!(other.spec.pki.etcd_client_cert, None, "{group}");
            assert!(other.spec.api_server.is_none(), "{group}");
            assert!(!other.yaml.contains("apiServer:"), "{group}");
        }
    }
}
