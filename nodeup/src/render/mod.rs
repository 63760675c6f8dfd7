//! Step 3 of nodeup: every file the node needs, rendered in memory. Pure: a [`NodeSpec`], the node's
//! [`NodeFacts`] and the [`Secrets`] fetched for it in, a [`Rendered`] (files and the services they belong to)
//! out. No clock, no randomness, no I/O: the golden tests (`nodeup/tests/golden.rs`) hold it to exact bytes.
//! Certificates are the one non-deterministic output; they are issued separately ([`crate::certs`]).

pub mod control_plane;
pub mod kubelet;
pub mod types;

use ballast_state::node::NodeSpec;
use ballast_state::pki::{BootstrapToken, EncryptionKeys};
use ballast_state::spec::Role;

use crate::certs::{self, CertPlan};

/// Where things live on a node (paths without `--root`).
pub mod paths {
    pub const CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
    pub const CONTAINERD_SOCKET: &str = "unix:///run/containerd/containerd.sock";
    pub const CONTAINERD_BIN: &str = "/usr/local/bin/containerd";
    pub const KUBELET_BIN: &str = "/usr/local/bin/kubelet";
    pub const KUBELET_UNIT: &str = "/etc/systemd/system/kubelet.service";
    pub const KUBELET_ENV: &str = "/etc/ballast/kubelet.env";
    pub const KUBELET_CONFIG: &str = "/var/lib/kubelet/config.yaml";
    pub const KUBELET_KUBECONFIG: &str = "/var/lib/kubelet/kubeconfig";
    pub const KUBELET_BOOTSTRAP_KUBECONFIG: &str = "/var/lib/kubelet/bootstrap-kubeconfig";
    pub const KUBELET_PKI_DIR: &str = "/var/lib/kubelet/pki";
    pub const KUBERNETES_CA_CERT: &str = "/etc/kubernetes/pki/ca.crt";
    pub const KUBERNETES_CA_KEY: &str = "/etc/kubernetes/pki/ca.key";
    pub const SERVICE_ACCOUNT_KEY: &str = "/etc/kubernetes/pki/sa.key";
    pub const SERVICE_ACCOUNT_PUB: &str = "/etc/kubernetes/pki/sa.pub";
    pub const ETCD_CA_CERT: &str = "/etc/kubernetes/pki/etcd/ca.crt";
    pub const MANIFESTS_DIR: &str = "/etc/kubernetes/manifests";
    pub const ENCRYPTION_CONFIG: &str = "/etc/kubernetes/encryption-config.yaml";
    pub const AUDIT_POLICY: &str = "/etc/kubernetes/audit-policy.yaml";
    pub const CONTROLLER_MANAGER_KUBECONFIG: &str = "/etc/kubernetes/controller-manager.conf";
    pub const SCHEDULER_KUBECONFIG: &str = "/etc/kubernetes/scheduler.conf";
    pub const BOOTSTRAP_DIR: &str = "/etc/kubernetes/bootstrap";
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
    fn new(path: &str, mode: u32, content: impl Into<Vec<u8>>) -> Self {
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

/// What the node knows about itself (from IMDS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub instance_id: String,
    pub private_ip: String,
    pub hostname: String,
    pub availability_zone: String,
}

/// Secrets fetched from the state store for this node. Workers get the CA certificate and the bootstrap
/// token only.
#[derive(Clone)]
pub struct Secrets {
    pub kubernetes_ca_cert: String,
    pub bootstrap_token: Option<BootstrapToken>,
    pub control_plane: Option<ControlPlaneSecrets>,
}

/// Control-plane nodes' trust material.
#[derive(Clone)]
pub struct ControlPlaneSecrets {
    pub kubernetes_ca_key: String,
    pub etcd_ca_cert: String,
    pub etcd_ca_key: String,
    pub service_account_key: String,
    pub service_account_public_key: String,
    pub encryption_keys: Option<EncryptionKeys>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("bootstrap_token", &self.bootstrap_token)
            .field("control_plane", &self.control_plane.is_some())
            .finish_non_exhaustive()
    }
}

/// Failures rendering (an inconsistent spec or a secret the spec needs but the store did not give).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A control-plane spec without control-plane settings, or the reverse.
    #[error("the node spec is inconsistent: {0}")]
    Inconsistent(String),
    /// The spec needs a secret that was not fetched.
    #[error("the node spec needs {0}, which was not fetched")]
    MissingSecret(&'static str),
    /// A taint is not `key[=value]:Effect`.
    #[error("taint {0:?} is not key[=value]:Effect")]
    BadTaint(String),
    /// Serializing a file.
    #[error("serializing {path}: {message}")]
    Serialize { path: String, message: String },
}

/// Everything rendered for one node.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// Sorted by path.
    pub files: Vec<RenderedFile>,
    pub services: Vec<ServiceDef>,
    /// The certificates this node issues for itself (issued by [`crate::certs::issue_all`]).
    pub certificates: Vec<CertPlan>,
}

/// Renders every file of the node.
pub fn render(
    spec: &NodeSpec,
    node: &NodeFacts,
    secrets: &Secrets,
) -> Result<Rendered, RenderError> {
    let control_plane = spec.role == Role::ControlPlane;
    if control_plane != spec.control_plane.is_some() {
        return Err(RenderError::Inconsistent(format!(
            "role {:?} with{} control-plane settings",
            spec.role,
            if spec.control_plane.is_some() {
                ""
            } else {
                "out"
            }
        )));
    }
    let mut files = vec![
        RenderedFile::new(paths::CONTAINERD_CONFIG, 0o644, containerd_config(spec)),
        RenderedFile::new(
            paths::KUBERNETES_CA_CERT,
            0o644,
            secrets.kubernetes_ca_cert.clone(),
        ),
    ];
    files.extend(kubelet::files(spec, node, secrets)?);
    let mut certificates = Vec::new();
    if let Some(settings) = &spec.control_plane {
        let cp = secrets
            .control_plane
            .as_ref()
            .ok_or(RenderError::MissingSecret("the control-plane secrets"))?;
        files.extend(control_plane::files(spec, settings, node, secrets, cp)?);
        certificates = certs::plan(spec, node);
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let services = vec![
        ServiceDef {
            name: "containerd".into(),
            unit: "containerd.service".into(),
            argv: vec![paths::CONTAINERD_BIN.into()],
            triggers: vec![paths::CONTAINERD_CONFIG.into()],
        },
        kubelet::service(spec, node, &certificates),
    ];
    Ok(Rendered {
        files,
        services,
        certificates,
    })
}

/// containerd 2.x (config version 3): CRI with runc and the systemd cgroup driver, the sandbox image baked
/// into the AMI, CNI from /opt/cni/bin.
fn containerd_config(spec: &NodeSpec) -> String {
    let systemd = spec.kubelet.cgroup_driver == "systemd";
    format!(
        r#"# Written by nodeup from the node spec of {cluster}/{group}. Do not edit: nodeup rewrites it.
version = 3

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{sandbox}"

[plugins.'io.containerd.cri.v1.runtime']
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = "runc"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = {systemd}

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/opt/cni/bin"]
  conf_dir = "/etc/cni/net.d"
"#,
        cluster = spec.cluster_name,
        group = spec.instance_group,
        sandbox = spec.containerd.sandbox_image,
    )
}

/// A kubeconfig for one user of one server.
pub(crate) fn kubeconfig(
    server: &str,
    user: &str,
    credentials: types::KubeconfigUser,
) -> types::Kubeconfig {
    use types::*;
    Kubeconfig {
        api_version: "v1".into(),
        kind: "Config".into(),
        clusters: vec![NamedCluster {
            name: "kubernetes".into(),
            cluster: KubeconfigCluster {
                server: server.to_string(),
                certificate_authority: paths::KUBERNETES_CA_CERT.into(),
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

pub(crate) fn to_yaml<T: serde::Serialize>(path: &str, value: &T) -> Result<String, RenderError> {
    yaml_serde::to_string(value).map_err(|e| RenderError::Serialize {
        path: path.to_string(),
        message: e.to_string(),
    })
}
