//! The kubelet: its KubeletConfiguration, its systemd unit and flags, and its kubeconfig.
//!
//! Control-plane kubelets get a client certificate issued on the node (they hold the CA key anyway) and talk
//! to their own API server. A worker's nodeup gets its kubelet's client certificate from the control plane's
//! bootstrap service after proving which instance it is (`crate::bootstrap`, docs/node-identity.md); both
//! kubeconfigs name the certificate files. Every kubelet serves with a certificate the Kubernetes CA signed for
//! its name and private IP (issued alike: on the node, or by the bootstrap service from EC2's facts), which the
//! API server verifies. No worker holds a CA key or a shared bootstrap token.

use std::collections::BTreeMap;

use ballast_state::node::NodeSpec;
use ballast_state::spec::Role;
use k8s_openapi::api::core::v1::Taint;

use super::error::{to_yaml, RenderError};
use super::types::*;
use crate::cert_plan::CertPlan;
use crate::model::{paths, pki, NodeFacts, RenderedFile, ServiceDef};

/// The label every node gets with its instance group (not under kubernetes.io: the NodeRestriction admission
/// plugin forbids kubelets to set those).
pub const GROUP_LABEL: &str = "ballast.dev/instance-group";

/// The API server as this node's kubelet reaches it: its own on the control plane, the load balancer's name
/// elsewhere.
pub fn api_server_url(spec: &NodeSpec, node: &NodeFacts) -> String {
    match spec.role {
        // An API-server node's kubelet reaches its own API server, as a control-plane node's does.
        Role::ControlPlane | Role::ApiServer => format!("https://{}:443", node.private_ip),
        Role::Node | Role::Bastion if spec.api_server_endpoint.contains(':') => {
            format!("https://{}", spec.api_server_endpoint)
        }
        Role::Node | Role::Bastion => format!("https://{}:443", spec.api_server_endpoint),
    }
}

pub(super) fn files(spec: &NodeSpec, node: &NodeFacts) -> Result<Vec<RenderedFile>, RenderError> {
    let config = configuration(spec, node)?;
    let mut files = vec![
        RenderedFile::new(
            paths::KUBELET_CONFIG,
            0o644,
            to_yaml(paths::KUBELET_CONFIG, &config)?,
        ),
        RenderedFile::new(paths::KUBELET_UNIT, 0o644, UNIT),
        RenderedFile::new(paths::KUBELET_ENV, 0o644, env_file(&args(spec, node))),
    ];
    // Every kubelet authenticates with its own client certificate: issued on the node on the control plane,
    // by the control plane's bootstrap service for a worker that proved which instance it is
    // (crate::bootstrap); no kubelet holds a shared bootstrap token.
    let server = api_server_url(spec, node);
    let user = KubeconfigUser {
        client_certificate: Some(pki::cert(pki::KUBELET_CLIENT)),
        client_key: Some(pki::key(pki::KUBELET_CLIENT)),
        token: None,
    };
    let kc = kubeconfig(&server, "kubelet", user);
    files.push(RenderedFile::new(
        paths::KUBELET_KUBECONFIG,
        0o600,
        to_yaml(paths::KUBELET_KUBECONFIG, &kc)?,
    ));
    Ok(files)
}

/// The kubelet's service: the unit's command line, and what restarts it.
pub(super) fn service(spec: &NodeSpec, node: &NodeFacts, certificates: &[CertPlan]) -> ServiceDef {
    let mut argv = vec![paths::KUBELET_BIN.to_string()];
    argv.extend(args(spec, node));
    let mut triggers = vec![
        paths::KUBELET_UNIT.to_string(),
        paths::KUBELET_ENV.to_string(),
        paths::KUBELET_CONFIG.to_string(),
        pki::KUBERNETES_CA_CERT.to_string(),
    ];
    triggers.push(paths::KUBELET_KUBECONFIG.to_string());
    // A worker's certificates come from the bootstrap service rather than a plan; they restart the kubelet alike.
    if spec.role == Role::Node {
        triggers.extend(
            [pki::KUBELET_CLIENT, pki::KUBELET_SERVING]
                .iter()
                .flat_map(|stem| [pki::cert(stem), pki::key(stem)]),
        );
    }
    triggers.extend(
        certificates
            .iter()
            .filter(|c| c.cert_path.starts_with(pki::KUBELET_DIR))
            .flat_map(|c| [c.cert_path.clone(), c.key_path.clone()]),
    );
    ServiceDef {
        name: "kubelet".into(),
        unit: "kubelet.service".into(),
        argv,
        triggers,
    }
}

const UNIT: &str = "\
# Written by nodeup. Do not edit: nodeup rewrites it; the flags are in /etc/ballast/kubelet.env.
[Unit]
Description=Kubernetes node agent (kubelet), configured by nodeup
Documentation=https://kubernetes.io/docs/reference/command-line-tools-reference/kubelet/
Wants=containerd.service
After=containerd.service
ConditionPathExists=/etc/ballast/kubelet.env
StartLimitIntervalSec=0

[Service]
EnvironmentFile=/etc/ballast/kubelet.env
ExecStart=/usr/local/bin/kubelet $KUBELET_ARGS
Restart=always
RestartSec=2s

[Install]
WantedBy=multi-user.target
";

/// The kubelet's flags: only what KubeletConfiguration cannot say.
fn args(spec: &NodeSpec, node: &NodeFacts) -> Vec<String> {
    let mut args = vec![
        format!("--config={}", paths::KUBELET_CONFIG),
        format!("--kubeconfig={}", paths::KUBELET_KUBECONFIG),
        // Every cluster runs the AWS cloud controller manager (the control plane's add-on set installs it): the
        // kubelet registers its node tainted `node.cloudprovider.kubernetes.io/uninitialized` and leaves the
        // provider ID, zone labels and addresses to that controller, which then lifts the taint.
        "--cloud-provider=external".to_string(),
    ];
    args.push(format!("--hostname-override={}", node.hostname));
    args.push(format!("--node-ip={}", node.private_ip));
    let mut labels: BTreeMap<&str, &str> = spec
        .kubelet
        .node_labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    labels.insert(GROUP_LABEL, &spec.instance_group);
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    args.push(format!("--node-labels={}", labels.join(",")));
    args
}

/// `KUBELET_ARGS="..."`, read by the unit's `EnvironmentFile=`.
fn env_file(args: &[String]) -> String {
    format!(
        "# Written by nodeup: the kubelet's flags (see kubelet.service).\nKUBELET_ARGS=\"{}\"\n",
        args.join(" ")
    )
}

fn configuration(spec: &NodeSpec, node: &NodeFacts) -> Result<KubeletConfiguration, RenderError> {
    let control_plane = spec.role == Role::ControlPlane;
    Ok(KubeletConfiguration {
        api_version: "kubelet.config.k8s.io/v1beta1".into(),
        kind: "KubeletConfiguration".into(),
        address: "0.0.0.0".into(),
        authentication: KubeletAuthentication {
            anonymous: Enabled { enabled: false },
            webhook: KubeletWebhookAuthentication {
                enabled: true,
                cache_ttl: "2m0s".into(),
            },
            x509: KubeletX509Authentication {
                client_ca_file: pki::KUBERNETES_CA_CERT.into(),
            },
        },
        authorization: KubeletAuthorization {
            mode: "Webhook".into(),
        },
        cgroup_driver: spec.kubelet.cgroup_driver.clone(),
        cluster_dns: vec![spec.cluster_dns.clone()],
        cluster_domain: spec.cluster_domain.clone(),
        container_runtime_endpoint: paths::CONTAINERD_SOCKET.into(),
        eviction_hard: spec.kubelet.eviction_hard.clone(),
        fail_cgroup_v1: spec.kubelet.fail_cgroup_v1,
        healthz_bind_address: "127.0.0.1".into(),
        protect_kernel_defaults: true,
        read_only_port: 0,
        register_with_taints: spec
            .kubelet
            .taints
            .iter()
            .map(|t| parse_taint(t))
            .collect::<Result<_, _>>()?,
        resolv_conf: node.resolv_conf.clone(),
        rotate_certificates: true,
        // The serving certificate is issued at boot, signed by the Kubernetes CA with the names EC2 gives the
        // instance (on the node for the control plane, by the bootstrap service for a worker), so the API server
        // verifies it. Not a CSR through the API: `kubelet-serving` CSRs wait for an approver Kubernetes does not
        // ship, and one that approved them would have to check each name against EC2 anyway.
        server_tls_bootstrap: false,
        static_pod_path: control_plane.then(|| paths::MANIFESTS_DIR.to_string()),
        tls_cert_file: pki::cert(pki::KUBELET_SERVING),
        tls_min_version: "VersionTLS12".into(),
        tls_private_key_file: pki::key(pki::KUBELET_SERVING),
    })
}

/// `key[=value]:Effect`.
pub fn parse_taint(text: &str) -> Result<Taint, RenderError> {
    let bad = || RenderError::BadTaint(text.to_string());
    let (kv, effect) = text.rsplit_once(':').ok_or_else(bad)?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(bad());
    }
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (kv, None),
    };
    if key.is_empty() {
        return Err(bad());
    }
    Ok(Taint {
        key: key.to_string(),
        value,
        effect: effect.to_string(),
        time_added: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelet_leaves_node_initialization_to_the_external_cloud_controller() {
        let node = NodeFacts {
            instance_id: "i-1".into(),
            private_ip: "10.0.1.10".into(),
            hostname: "ip-10-0-1-10".into(),
            availability_zone: "us-west-2a".into(),
            resolv_conf: crate::model::RESOLVED_RESOLV_CONF.into(),
            baked_images: Default::default(),
            oom_scores_restricted: false,
        };
        for data in [
            include_str!("../../tests/data/control-plane/spec.yaml"),
            include_str!("../../tests/data/worker/spec.yaml"),
        ] {
            let spec: NodeSpec = yaml_serde::from_str(data).expect("a golden spec");
            let args = args(&spec, &node);
            assert!(
                args.contains(&"--cloud-provider=external".to_string()),
                "{args:?}"
            );
        }
    }

    /// The cluster's `spec.kubelet.failCgroupV1` reaches the kubelet's configuration; unset, the field is left
    /// out and the kubelet's own default holds.
    #[test]
    fn fail_cgroup_v1_is_the_clusters_choice() {
        let mut spec: NodeSpec =
            yaml_serde::from_str(include_str!("../../tests/data/worker/spec.yaml")).expect("spec");
        let node = NodeFacts {
            instance_id: "i-1".into(),
            private_ip: "10.0.1.10".into(),
            hostname: "ip-10-0-1-10".into(),
            availability_zone: "us-west-2a".into(),
            resolv_conf: crate::model::PLAIN_RESOLV_CONF.into(),
            baked_images: Default::default(),
            oom_scores_restricted: false,
        };
        let rendered = |spec: &NodeSpec| {
            yaml_serde::to_string(&configuration(spec, &node).expect("configuration"))
                .expect("yaml")
        };
        spec.kubelet.fail_cgroup_v1 = None;
        assert!(!rendered(&spec).contains("failCgroupV1"));
        spec.kubelet.fail_cgroup_v1 = Some(false);
        assert!(
            rendered(&spec).contains("failCgroupV1: false\n"),
            "{}",
            rendered(&spec)
        );
        spec.kubelet.fail_cgroup_v1 = Some(true);
        assert!(rendered(&spec).contains("failCgroupV1: true\n"));

        // The cluster's hard eviction thresholds replace the kubelet's defaults; none set, none written.
        assert!(!rendered(&spec).contains("evictionHard"));
        spec.kubelet.eviction_hard = ballast_state::spec::parse_eviction_hard(
            "memory.available<100Mi,nodefs.available<1%,imagefs.available<1%",
        )
        .expect("thresholds");
        assert!(
            rendered(&spec).contains(
                "evictionHard:\n  imagefs.available: 1%\n  memory.available: 100Mi\n  nodefs.available: 1%\n"
            ),
            "{}",
            rendered(&spec)
        );
    }
}
