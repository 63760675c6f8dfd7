//! Step 3 of nodeup: every file the node needs, rendered in memory. Pure: a [`NodeSpec`], the node's
//! [`NodeFacts`] and the [`Secrets`] fetched for it in, a [`Rendered`] (files and the services they belong to)
//! out. No clock, no randomness, no I/O: the golden tests (`nodeup/tests/golden.rs`) hold it to exact bytes.
//! The certificates the node needs are planned here too ([`crate::cert_plan`], pure); they are the one
//! non-deterministic output, issued separately ([`crate::certs`]).

pub mod control_plane;
mod error;
pub mod keys;
pub mod kubelet;
pub mod types;

pub use error::RenderError;

use ballast_state::node::NodeSpec;
use ballast_state::spec::Role;

use crate::cert_plan::{self, CertPlan};
// The shared types, readable from here as before (`render::NodeFacts`, `render::paths`, ...).
pub use crate::model::{
    paths, pki, ControlPlaneSecrets, NodeFacts, Owner, RenderedFile, Secrets, ServiceDef,
};

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
            keys::bundle(&secrets.kubernetes_ca_cert, &secrets.kubernetes_ca_trusted),
        ),
    ];
    files.extend(kubelet::files(spec, node)?);
    files.extend(authorized_keys(spec));
    let mut certificates = Vec::new();
    if let Some(settings) = &spec.control_plane {
        let cp = secrets
            .control_plane
            .as_ref()
            .ok_or(RenderError::MissingSecret("the control-plane secrets"))?;
        files.extend(control_plane::files(spec, settings, node, cp)?);
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

/// root's `authorized_keys`: exactly the node spec's SSH public keys under Ballast's header; no file when there
/// are none (the write step removes one nodeup wrote before, and only one with the header).
pub fn authorized_keys(spec: &NodeSpec) -> Option<RenderedFile> {
    if spec.ssh_authorized_keys.is_empty() {
        return None;
    }
    let mut text = format!(
        "{}\n# Written from the node spec of {}/{}; nodeup rewrites it at every boot. Change the keys with \
         `ballast create|delete secret sshpublickey` and a rolling update.\n",
        paths::AUTHORIZED_KEYS_HEADER,
        spec.cluster_name,
        spec.instance_group
    );
    // A line is one key: one holding a line break would be several, which the spec never gives.
    for line in spec
        .ssh_authorized_keys
        .iter()
        .filter(|l| !l.contains(['\n', '\r']))
    {
        text.push_str(line.trim());
        text.push('\n');
    }
    Some(RenderedFile::new(paths::AUTHORIZED_KEYS, 0o600, text))
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
