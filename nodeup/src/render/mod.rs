//! Step 3 of nodeup: every file the node needs, rendered in memory. Pure: a [`NodeSpec`], the node's
//! [`NodeFacts`] and the [`Secrets`] fetched for it in, a [`Rendered`] (files and the services they belong to)
//! out. No clock, no randomness, no I/O: the golden tests (`nodeup/tests/golden.rs`) hold it to exact bytes.
//! The certificates the node needs are planned here too ([`crate::cert_plan`], pure); they are the one
//! non-deterministic output, issued separately ([`crate::certs`]).

pub mod control_plane;
pub mod kubelet;
pub mod types;

use ballast_state::node::NodeSpec;
use ballast_state::spec::Role;

use crate::cert_plan::{self, CertPlan};
// The shared types, readable from here as before (`render::NodeFacts`, `render::paths`, ...).
pub use crate::model::{
    paths, pki, ControlPlaneSecrets, NodeFacts, Owner, RenderedFile, Secrets, ServiceDef,
};

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
    /// The spec needs a secret that was not fetched.
    #[error("the node spec needs {0}, which was not fetched")]
    MissingSecret(&'static str),
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
        return Err(RenderError::Inconsistent {
            role: spec.role,
            has_control_plane_settings: spec.control_plane.is_some(),
        });
    }
    let mut files = vec![
        RenderedFile::new(paths::CONTAINERD_CONFIG, 0o644, containerd_config(spec)),
        RenderedFile::new(
            pki::KUBERNETES_CA_CERT,
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
        certificates = cert_plan::plan(spec, node);
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

pub(crate) fn to_yaml<T: serde::Serialize>(path: &str, value: &T) -> Result<String, RenderError> {
    yaml_serde::to_string(value).map_err(|source| RenderError::Serialize {
        path: path.to_string(),
        source,
    })
}
