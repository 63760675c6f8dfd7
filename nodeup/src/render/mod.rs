//! Step 3 of nodeup: every file the node needs, rendered in memory. Pure: a [`NodeSpec`], the node's
//! [`NodeFacts`] and the [`Secrets`] fetched for it in, a [`Rendered`] (files and the services they belong to)
//! out. No clock, no randomness, no I/O: the golden tests (`nodeup/tests/golden.rs`) hold it to exact bytes.
//! The certificates the node needs are planned here too ([`crate::cert_plan`], pure); they are the one
//! non-deterministic output, issued separately ([`crate::certs`]).

pub mod api_server;
pub mod control_plane;
mod error;
pub mod keys;
pub mod kubelet;
pub mod types;

pub use error::RenderError;

use std::collections::BTreeMap;

use ballast_state::components::addons::PAUSE;
use ballast_state::components::ComponentManifest;
use ballast_state::node::NodeSpec;
use ballast_state::spec::{Networking, Role};

use crate::cert_plan::{self, CertPlan};
// The shared types, readable from here as before (`render::NodeFacts`, `render::paths`, ...).
pub use crate::model::{
    paths, pki, ApiServerSecrets, ControlPlaneSecrets, NodeFacts, Owner, RenderedFile, Secrets,
    ServiceDef,
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
    if (spec.role == Role::ApiServer) != spec.api_server.is_some() {
        return Err(RenderError::InconsistentApiServer {
            role: spec.role,
            has_api_server_settings: spec.api_server.is_some(),
        });
    }
    let control_plane = spec.role == Role::ControlPlane;
    if control_plane != spec.control_plane.is_some() {
        return Err(RenderError::Inconsistent {
            role: spec.role,
            has_control_plane_settings: spec.control_plane.is_some(),
        });
    }
    // A bastion is an SSH jump host: the operator's keys and nothing of Kubernetes (no containerd, no kubelet,
    // no certificate; docs/nodeup.md, "Bastions").
    if spec.role == Role::Bastion {
        return Ok(Rendered {
            files: authorized_keys(spec).into_iter().collect(),
            services: Vec::new(),
            certificates: Vec::new(),
        });
    }
    let mut files = vec![
        RenderedFile::new(
            paths::CONTAINERD_CONFIG,
            0o644,
            containerd_config(spec, node)?,
        ),
        RenderedFile::new(
            pki::KUBERNETES_CA_CERT,
            0o644,
            keys::bundle(&secrets.kubernetes_ca_cert, &secrets.kubernetes_ca_trusted),
        ),
    ];
    if spec.networking == Networking::Kubenet {
        files.push(RenderedFile::new(
            paths::KUBENET_CNI_TEMPLATE,
            0o644,
            KUBENET_CNI.to_string(),
        ));
    }
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
    // An API-server node: kube-apiserver alone, dialing the control plane's etcd (docs/nodeup.md, "API-server
    // nodes"); its certificates are the Kubernetes CA's, issued on the node.
    if let Some(settings) = &spec.api_server {
        let secrets = secrets
            .api_server
            .as_ref()
            .ok_or(RenderError::MissingSecret("the API-server secrets"))?;
        files.extend(api_server::files(spec, settings, node, secrets)?);
        certificates = cert_plan::plan(spec, node);
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let services = vec![
        ServiceDef {
            name: "containerd".into(),
            unit: "containerd.service".into(),
            argv: vec![paths::CONTAINERD_BIN.into()],
            triggers: vec![
                paths::CONTAINERD_CONFIG.into(),
                paths::KUBENET_CNI_TEMPLATE.into(),
            ],
        },
        kubelet::service(spec, node, &certificates),
    ];
    Ok(Rendered {
        files,
        services,
        certificates,
    })
}

/// kubenet (kops's): the node's pods on bridge `cbr0`, the node their gateway, addressed by host-local from the
/// node's PodCIDR, which the kubelet hands containerd once the controller manager has allocated it (containerd
/// then writes this, filled in, to `/etc/cni/net.d`: until then the node is NotReady, as it should be). Traffic
/// leaving the node's pod range is masqueraded to the node's address (the bridge's `ipMasq`): pods reach the VPC
/// and, through its NAT or internet gateway, the world; a pod on another node sees the node's address as its
/// peer. Pods of other nodes are reached through the VPC's routes to each node's PodCIDR, which the cloud
/// controller manager's route controller writes.
const KUBENET_CNI: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "kubenet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cbr0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "{{.PodCIDR}}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
"#;

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

/// The sandbox image containerd names, and which configuration format the AMI's containerd reads, from the
/// release the node spec's Kubernetes version pins (the manifest nodeup was built with, as the AMI was).
struct ContainerdRelease {
    /// containerd's major version: 1 (1.7) reads configuration version 2, 2 reads version 3.
    major: u64,
    /// `registry.k8s.io/pause:3.10@sha256:...`: the baked sandbox image, by tag and digest. containerd finds it
    /// in its store under the digest (the tag is dropped when both are given), so it never pulls it, and a
    /// store without it could only be filled with exactly those bytes.
    sandbox: String,
}

fn containerd_release(
    spec: &NodeSpec,
    baked: &BTreeMap<String, String>,
) -> Result<ContainerdRelease, RenderError> {
    let wrong = |reason: String| RenderError::ContainerdRelease {
        kubernetes: spec.kubernetes_version.clone(),
        reason,
    };
    let manifest = ComponentManifest::embedded().map_err(|e| wrong(e.to_string()))?;
    let (_, release) = manifest
        .release_for_minor(&spec.kubernetes_version)
        .map_err(|e| wrong(e.to_string()))?;
    // By the digest the AMI's store holds each image under: the pin's on an AMI baked from upstream (install.sh
    // checks they are one), the build's on the local cloud's image of images built here.
    let release = &release.as_baked(baked);
    let version = &release
        .components
        .get("containerd")
        .ok_or_else(|| wrong("it pins no containerd".into()))?
        .version;
    let major = version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u64>().ok())
        .ok_or_else(|| {
            wrong(format!(
                "containerd's version {version:?} has no major number"
            ))
        })?;
    let pause = release
        .addons
        .get(PAUSE)
        .and_then(|a| a.images.get(PAUSE))
        .ok_or_else(|| wrong("it pins no sandbox (pause) image".into()))?;
    // The node spec names the sandbox image by tag; it must be the one the AMI bakes, or every pod start would
    // pull another.
    if pause.reference != spec.containerd.sandbox_image {
        return Err(wrong(format!(
            "the node spec's sandbox image {} is not the one the AMI bakes ({}): a node would have to pull it",
            spec.containerd.sandbox_image, pause.reference
        )));
    }
    let sandbox = pause.pinned_reference().ok_or_else(|| {
        wrong(format!(
            "its sandbox image {} is unpinned, so the AMI cannot carry it",
            pause.reference
        ))
    })?;
    Ok(ContainerdRelease { major, sandbox })
}

/// containerd's configuration for the AMI's containerd: CRI with runc and the systemd cgroup driver, the
/// sandbox image baked into the AMI (by digest), CNI from /opt/cni/bin. containerd 2.x reads configuration
/// version 3 (`io.containerd.cri.v1.*`, the sandbox in `pinned_images`); 1.7 reads version 2 (the one CRI
/// plugin `io.containerd.grpc.v1.cri`, the sandbox as `sandbox_image`) and refuses version 3.
fn containerd_config(spec: &NodeSpec, node: &NodeFacts) -> Result<String, RenderError> {
    let release = containerd_release(spec, &node.baked_images)?;
    // On a host whose processes may not lower OOM scores, containerd keeps each pod's at or above its own rather
    // than failing every pod that asks for a lower one (the critical ones do). Never on an EC2 instance.
    let restrict_oom = if node.oom_scores_restricted {
        "  restrict_oom_score_adj = true\n"
    } else {
        ""
    };
    // kubenet: containerd writes the CNI configuration from the node's PodCIDR (no CNI add-on does).
    let conf_template = if spec.networking == Networking::Kubenet {
        format!("  conf_template = \"{}\"\n", paths::KUBENET_CNI_TEMPLATE)
    } else {
        String::new()
    };
    let systemd = spec.kubelet.cgroup_driver == "systemd";
    let cluster = &spec.cluster_name;
    let group = &spec.instance_group;
    let sandbox = &release.sandbox;
    if release.major < 2 {
        return Ok(format!(
            r#"# Written by nodeup from the node spec of {cluster}/{group}. Do not edit: nodeup rewrites it.
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
{restrict_oom}
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = {systemd}

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/opt/cni/bin"
  conf_dir = "/etc/cni/net.d"
{conf_template}"#
        ));
    }
    Ok(format!(
        r#"# Written by nodeup from the node spec of {cluster}/{group}. Do not edit: nodeup rewrites it.
version = 3

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{sandbox}"

[plugins.'io.containerd.cri.v1.runtime']
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
{restrict_oom}
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = "runc"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = {systemd}

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/opt/cni/bin"]
  conf_dir = "/etc/cni/net.d"
{conf_template}"#
    ))
}

#[cfg(test)]
mod containerd_tests {
    use super::*;

    fn spec(kubernetes: &str) -> NodeSpec {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/worker/spec.yaml"),
        )
        .expect("the worker golden spec");
        let mut spec: NodeSpec = yaml_serde::from_str(&text).expect("a node spec");
        spec.kubernetes_version = kubernetes.to_string();
        spec
    }

    /// An API-server role without its settings (or its settings without the role) is refused naming what is
    /// missing, and a spec with them but no API-server secrets fetched is refused naming those.
    #[test]
    fn an_inconsistent_api_server_spec_or_missing_secrets_are_refused() {
        let mut spec = spec("1.33.4");
        spec.role = Role::ApiServer;
        let node = NodeFacts {
            instance_id: "i-1".into(),
            private_ip: "10.0.1.10".into(),
            hostname: "ip-10-0-1-10".into(),
            availability_zone: "us-west-2a".into(),
            resolv_conf: crate::model::RESOLVED_RESOLV_CONF.into(),
            baked_images: Default::default(),
            oom_scores_restricted: false,
        };
        let secrets = Secrets {
            kubernetes_ca_cert: String::new(),
            kubernetes_ca_trusted: Vec::new(),
            control_plane: None,
            api_server: None,
        };
        let err = render(&spec, &node, &secrets).expect_err("refused");
        assert!(
            matches!(err, RenderError::InconsistentApiServer { .. }),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("role ApiServer without apiServer settings"),
            "{err}"
        );
        spec.api_server = Some(ballast_state::node::ApiServerSettings {
            encryption_provider: None,
            audit_log_path: "/var/log/kubernetes/audit.log".into(),
            audit_log_max_age_days: 30,
            etcd_members: vec!["a".into()],
            service_account_issuer: None,
        });
        let err = render(&spec, &node, &secrets).expect_err("no secrets");
        assert!(err.to_string().contains("the API-server secrets"), "{err}");
        spec.role = Role::Node;
        let err = render(&spec, &node, &secrets).expect_err("settings on a worker");
        assert!(
            err.to_string()
                .contains("role Node with apiServer settings"),
            "{err}"
        );
    }

    #[test]
    fn containerd_1_7_gets_configuration_version_2_with_the_baked_sandbox() {
        // 1.32 pins containerd 1.7, which refuses version 3: its CRI plugin names the sandbox `sandbox_image`.
        let text = containerd_config(&spec("1.32.8"), &facts()).expect("rendered");
        let manifest = ComponentManifest::embedded().expect("manifest");
        let pause = manifest.releases["1.32"].addons[PAUSE].images[PAUSE]
            .pinned_reference()
            .expect("pinned");
        assert!(text.contains("\nversion = 2\n"), "{text}");
        assert!(
            text.contains(&format!(
                "[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"{pause}\"\n"
            )),
            "{text}"
        );
        assert!(!text.contains("io.containerd.cri.v1"), "{text}");
        assert!(text.contains("  bin_dir = \"/opt/cni/bin\"\n"), "{text}");
    }

    #[test]
    fn containerd_2_gets_configuration_version_3_with_the_baked_sandbox() {
        let text = containerd_config(&spec("1.33.4"), &facts()).expect("rendered");
        assert!(text.contains("\nversion = 3\n"), "{text}");
        assert!(
            text.contains(&format!(
                "  sandbox = \"{}@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a\"\n",
                ballast_state::node::PAUSE_IMAGE
            )),
            "{text}"
        );
    }

    /// An AMI whose record lists the sandbox image under another digest (the local cloud's, built here) gets it
    /// by that digest: the one its store holds.
    #[test]
    fn the_sandbox_is_named_by_the_digest_the_ami_holds() {
        let built = format!("sha256:{}", "7".repeat(64));
        let node = NodeFacts {
            baked_images: BTreeMap::from([(
                ballast_state::node::PAUSE_IMAGE.to_string(),
                built.clone(),
            )]),
            ..facts()
        };
        let text = containerd_config(&spec("1.33.4"), &node).expect("rendered");
        assert!(
            text.contains(&format!(
                "  sandbox = \"{}@{built}\"\n",
                ballast_state::node::PAUSE_IMAGE
            )),
            "{text}"
        );
    }

    fn facts() -> NodeFacts {
        NodeFacts {
            instance_id: "i-1".into(),
            private_ip: "10.0.1.10".into(),
            hostname: "ip-10-0-1-10".into(),
            availability_zone: "us-west-2a".into(),
            resolv_conf: crate::model::PLAIN_RESOLV_CONF.into(),
            baked_images: BTreeMap::new(),
            oom_scores_restricted: false,
        }
    }

    /// A node that may not lower OOM scores has containerd keep pods' at or above its own; any other node's
    /// containerd sets them as the kubelet asks.
    #[test]
    fn containerd_restricts_oom_scores_only_where_the_host_cannot_lower_them() {
        for version in ["1.32.8", "1.33.4"] {
            let free = containerd_config(&spec(version), &facts()).expect("rendered");
            assert!(!free.contains("restrict_oom_score_adj"), "{free}");
            let node = NodeFacts {
                oom_scores_restricted: true,
                ..facts()
            };
            let restricted = containerd_config(&spec(version), &node).expect("rendered");
            assert!(
                restricted.contains(
                    "  enable_unprivileged_icmp = true\n  restrict_oom_score_adj = true\n"
                ),
                "{restricted}"
            );
        }
        let status = |caps: &str| format!("Name:\tnodeup\nCapInh:\t0\nCapEff:\t{caps}\n");
        assert!(!crate::model::oom_scores_restricted(&status(
            "000001ffffffffff"
        )));
        assert!(crate::model::oom_scores_restricted(&status(
            "000001fffeffffff"
        )));
        assert!(!crate::model::oom_scores_restricted("no capabilities here"));
    }

    #[test]
    fn a_sandbox_image_the_ami_does_not_bake_is_refused() {
        let mut spec = spec("1.33.4");
        spec.containerd.sandbox_image = "registry.k8s.io/pause:3.9".into();
        let err = containerd_config(&spec, &facts()).expect_err("not baked");
        let text = err.to_string();
        assert!(
            text.contains("sandbox image registry.k8s.io/pause:3.9 is not the one the AMI bakes"),
            "{text}"
        );
        let err = containerd_config(&self::spec("1.29.1"), &facts()).expect_err("no release");
        assert!(err.to_string().contains("Kubernetes 1.29.1"), "{err}");
    }
}
