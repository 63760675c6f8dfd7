//! The types every step of nodeup shares: what the node knows about itself ([`NodeFacts`]), the trust material
//! fetched for it ([`Secrets`]), a file as it must be on the node ([`RenderedFile`], [`Owner`]), a service and
//! the files that restart it ([`ServiceDef`]), and where things live on a node ([`paths`], and every PKI file in
//! one list, [`pki`]).
//!
//! A leaf: it imports nothing else from this crate, so that rendering ([`crate::render`]), certificate planning
//! ([`crate::cert_plan`]), issuing ([`crate::certs`]), fetching and writing all depend on it and not on each
//! other.

use std::collections::BTreeMap;

use ballast_state::pki::EncryptionKeys;

/// Where things live on a node (paths without `--root`). The PKI files are in [`pki`].
pub mod paths {
    /// root's SSH directory (0700) and the `authorized_keys` nodeup writes there when the node spec lists keys.
    pub const ROOT_SSH_DIR: &str = "/root/.ssh";
    pub const AUTHORIZED_KEYS: &str = "/root/.ssh/authorized_keys";
    /// The first line of the `authorized_keys` nodeup writes: only a file starting with it is ever removed.
    pub const AUTHORIZED_KEYS_HEADER: &str =
        "# Managed by Ballast's nodeup: the SSH public keys of `ballast create secret sshpublickey`.";
    pub const CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
    /// kubenet's CNI configuration as a template containerd fills with the node's PodCIDR (`conf_template`).
    pub const KUBENET_CNI_TEMPLATE: &str = "/etc/containerd/kubenet.conflist.tmpl";
    pub const CONTAINERD_SOCKET: &str = "unix:///run/containerd/containerd.sock";
    pub const CONTAINERD_BIN: &str = "/usr/local/bin/containerd";
    pub const KUBELET_BIN: &str = "/usr/local/bin/kubelet";
    pub const KUBELET_UNIT: &str = "/etc/systemd/system/kubelet.service";
    pub const KUBELET_ENV: &str = "/etc/ballast/kubelet.env";
    pub const KUBELET_CONFIG: &str = "/var/lib/kubelet/config.yaml";
    pub const KUBELET_KUBECONFIG: &str = "/var/lib/kubelet/kubeconfig";
    pub const MANIFESTS_DIR: &str = "/etc/kubernetes/manifests";
    pub const ENCRYPTION_CONFIG: &str = "/etc/kubernetes/encryption-config.yaml";
    pub const AUDIT_POLICY: &str = "/etc/kubernetes/audit-policy.yaml";
    pub const AUTHENTICATION_CONFIG: &str = "/etc/kubernetes/authentication-config.yaml";
    pub const CONTROLLER_MANAGER_KUBECONFIG: &str = "/etc/kubernetes/controller-manager.conf";
    pub const SCHEDULER_KUBECONFIG: &str = "/etc/kubernetes/scheduler.conf";
    pub const BOOTSTRAP_DIR: &str = "/etc/kubernetes/bootstrap";
    /// etcd's data dir, epoch and log on a control-plane node.
    pub const ETCD_STATE_DIR: &str = "/var/lib/etcd";
}

/// Every PKI file on a node, in one list: the trust material copied from the state store, and the path stems
/// (`<stem>.crt`, `<stem>.key`) of the certificates a control-plane node issues for itself.
pub mod pki {
    /// The Kubernetes PKI directory.
    pub const KUBERNETES_DIR: &str = "/etc/kubernetes/pki";
    /// etcd's CA certificate and the member's certificates, as the etcd supervisor reads them.
    pub const ETCD_DIR: &str = "/etc/kubernetes/pki/etcd";
    /// The kubelet's own certificates.
    pub const KUBELET_DIR: &str = "/var/lib/kubelet/pki";

    // From the state store.
    pub const KUBERNETES_CA_CERT: &str = "/etc/kubernetes/pki/ca.crt";
    pub const KUBERNETES_CA_KEY: &str = "/etc/kubernetes/pki/ca.key";
    pub const SERVICE_ACCOUNT_KEY: &str = "/etc/kubernetes/pki/sa.key";
    pub const SERVICE_ACCOUNT_PUB: &str = "/etc/kubernetes/pki/sa.pub";
    pub const ETCD_CA_CERT: &str = "/etc/kubernetes/pki/etcd/ca.crt";

    // Issued on the node: path stems.
    pub const API_SERVER: &str = "/etc/kubernetes/pki/apiserver";
    pub const API_SERVER_KUBELET_CLIENT: &str = "/etc/kubernetes/pki/apiserver-kubelet-client";
    pub const API_SERVER_ETCD_CLIENT: &str = "/etc/kubernetes/pki/apiserver-etcd-client";
    pub const CONTROLLER_MANAGER: &str = "/etc/kubernetes/pki/controller-manager";
    pub const SCHEDULER: &str = "/etc/kubernetes/pki/scheduler";
    pub const ETCD_SERVER: &str = "/etc/kubernetes/pki/etcd/server";
    pub const ETCD_PEER: &str = "/etc/kubernetes/pki/etcd/peer";
    pub const ETCD_CLIENT: &str = "/etc/kubernetes/pki/etcd/client";
    pub const KUBELET_CLIENT: &str = "/var/lib/kubelet/pki/kubelet-client";
    /// The kubelet's serving certificate, signed by the Kubernetes CA (the API server verifies it with
    /// `--kubelet-certificate-authority`): issued on a control-plane node, by the bootstrap service for a worker.
    pub const KUBELET_SERVING: &str = "/var/lib/kubelet/pki/kubelet-server";
    /// The node bootstrap service's serving certificate (control plane; crate::bootstrap).
    pub const NODE_BOOTSTRAP: &str = "/etc/kubernetes/pki/node-bootstrap";
    /// The Pod Identity Webhook's serving certificate, `tls.crt` and `tls.key` (control plane, with IAM roles for
    /// service accounts): a directory of its own, the only host path the webhook's pods mount.
    pub const POD_IDENTITY_WEBHOOK_DIR: &str = "/etc/kubernetes/pki/pod-identity-webhook";
    /// The Pod Identity Webhook's name: its Service's, so its serving certificate's names. Here, in the leaf,
    /// because both the add-on (`crate::addons::pod_identity_webhook`) and the certificate plan need it.
    pub const POD_IDENTITY_WEBHOOK_NAME: &str = "pod-identity-webhook";

    /// A stem's certificate path.
    pub fn cert(stem: &str) -> String {
        format!("{stem}.crt")
    }

    /// A stem's key path.
    pub fn key(stem: &str) -> String {
        format!("{stem}.key")
    }
}

/// What the node knows about itself (from IMDS and its own image).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub instance_id: String,
    pub private_ip: String,
    pub hostname: String,
    pub availability_zone: String,
    /// The resolver configuration pods inherit ([`resolv_conf`]).
    pub resolv_conf: String,
    /// The images the AMI holds in containerd's store, reference -> digest (its record's `images`; empty for an
    /// AMI whose record lists none).
    pub baked_images: BTreeMap<String, String>,
    /// This host's processes may not lower an OOM score (no CAP_SYS_RESOURCE: a node that is itself a
    /// container, as the local cloud's machines are on a host that withholds it). containerd then keeps pods'
    /// scores at or above its own ([`oom_scores_restricted`]).
    pub oom_scores_restricted: bool,
}

/// CAP_SYS_RESOURCE's bit: needed to lower `oom_score_adj` below the lowest value a process had.
const CAP_SYS_RESOURCE: u32 = 24;

/// Whether the process described by `/proc/self/status` text `status` lacks CAP_SYS_RESOURCE in its effective
/// set. Text without a readable `CapEff:` line counts as restricted only when it says so: never.
pub fn oom_scores_restricted(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) == 0)
}

/// systemd-resolved's own upstream list, where it runs: the kubelet must not hand pods its stub at 127.0.0.53.
pub const RESOLVED_RESOLV_CONF: &str = "/run/systemd/resolve/resolv.conf";
/// The resolver file of a host without systemd-resolved (Debian 12's cloud images: DHCP writes it).
pub const PLAIN_RESOLV_CONF: &str = "/etc/resolv.conf";

/// The resolver file pods should inherit on the host at `root`: systemd-resolved's when it is there, else
/// `/etc/resolv.conf`.
pub fn resolv_conf(root: &std::path::Path) -> String {
    if root
        .join(RESOLVED_RESOLV_CONF.trim_start_matches('/'))
        .is_file()
    {
        RESOLVED_RESOLV_CONF.to_string()
    } else {
        PLAIN_RESOLV_CONF.to_string()
    }
}

/// Secrets fetched from the state store for this node. Workers get the CA certificate only.
#[derive(Clone)]
pub struct Secrets {
    /// The CA certificate that issues (its key signs on the control plane).
    pub kubernetes_ca_cert: String,
    /// CA certificates trusted beside it while the Kubernetes CA is rotated (docs/keys.md).
    pub kubernetes_ca_trusted: Vec<String>,
    pub control_plane: Option<ControlPlaneSecrets>,
    /// An API-server node's (role `ApiServer`); `None` on every other node.
    pub api_server: Option<ApiServerSecrets>,
}

/// Control-plane nodes' trust material.
#[derive(Clone)]
pub struct ControlPlaneSecrets {
    pub kubernetes_ca_key: String,
    pub etcd_ca_cert: String,
    pub etcd_ca_key: String,
    /// etcd CA certificates trusted beside `etcd_ca_cert` while the etcd CA is rotated.
    pub etcd_ca_trusted: Vec<String>,
    pub service_account_key: String,
    pub service_account_public_key: String,
    /// Public keys verifying service-account tokens beside `service_account_public_key` during a rotation.
    pub service_account_verify_keys: Vec<String>,
    pub encryption_keys: Option<EncryptionKeys>,
}

/// An API-server node's trust material: what its API server reads, and the Kubernetes CA's key, which nodeup
/// holds in memory only to issue this node's certificates (never written to the node's disk: no controller
/// manager runs there). No etcd CA key: its etcd client pair comes issued from the state store.
#[derive(Clone)]
pub struct ApiServerSecrets {
    pub kubernetes_ca_key: String,
    pub etcd_ca_cert: String,
    pub etcd_ca_trusted: Vec<String>,
    /// `pki/etcd-client-api-server/`, issued by `ballast update cluster` with the etcd CA.
    pub etcd_client_cert: String,
    pub etcd_client_key: String,
    pub service_account_key: String,
    pub service_account_public_key: String,
    pub service_account_verify_keys: Vec<String>,
    pub encryption_keys: Option<EncryptionKeys>,
}

// Secrets stay out of logs: Debug says which kinds are present, never their content.
impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("control_plane", &self.control_plane.is_some())
            .field("api_server", &self.api_server.is_some())
            .finish_non_exhaustive()
    }
}

/// Owner of a file, numeric (nodeup runs before any service user exists; everything is root's today).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    pub const ROOT: Owner = Owner { uid: 0, gid: 0 };
}

/// One file, as it must be on the node.
#[derive(Clone, PartialEq, Eq)]
pub struct RenderedFile {
    /// Absolute path on the node (nodeup prefixes `--root`).
    pub path: String,
    pub mode: u32,
    pub owner: Owner,
    pub content: Vec<u8>,
}

impl RenderedFile {
    /// A file owned by root.
    pub fn new(path: &str, mode: u32, content: impl Into<Vec<u8>>) -> Self {
        RenderedFile {
            path: path.to_string(),
            mode,
            owner: Owner::ROOT,
            content: content.into(),
        }
    }

    /// Private files (keys, tokens, encryption keys) are 0600 and never shown.
    pub fn is_private(&self) -> bool {
        self.mode & 0o077 == 0
    }
}

// File contents may be secret: Debug shows path, mode and size only.
impl std::fmt::Debug for RenderedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenderedFile")
            .field("path", &self.path)
            .field("mode", &format_args!("{:04o}", self.mode))
            .field("owner", &self.owner)
            .field("bytes", &self.content.len())
            .finish()
    }
}

/// A service nodeup starts, and the files whose change restarts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceDef {
    pub name: String,
    /// The systemd unit (`kubelet.service`).
    pub unit: String,
    /// The command line: the unit's `ExecStart` with its environment file expanded. The supervisor runs
    /// exactly this.
    pub argv: Vec<String>,
    /// Paths (on the node) whose change restarts the service.
    pub triggers: Vec<String>,
}
