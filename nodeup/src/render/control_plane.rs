//! Control-plane files: static pods for kube-apiserver, kube-controller-manager and kube-scheduler (from
//! k8s-openapi types), the API server's EncryptionConfiguration and audit policy, the components' kubeconfigs,
//! the keys they need on disk, and the RBAC binding that approves kubelets' renewals of their own certificates.

use std::collections::BTreeMap;

use ballast_state::node::{ControlPlaneSettings, NodeSpec};
use ballast_state::spec::EncryptionProvider;
use k8s_openapi::api::core::v1::{
    Container, HTTPGetAction, HostPathVolumeSource, Pod, PodSecurityContext, PodSpec, Probe,
    ResourceRequirements, SeccompProfile, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::error::{to_yaml, RenderError};
use super::keys;
use super::types::*;
use crate::model::{paths, pki, ControlPlaneSecrets, NodeFacts, RenderedFile};

pub const API_SERVER_PORT: i32 = 443;
pub const CONTROLLER_MANAGER_PORT: i32 = 10257;
pub const SCHEDULER_PORT: i32 = 10259;

pub(super) fn files(
    spec: &NodeSpec,
    settings: &ControlPlaneSettings,
    node: &NodeFacts,
    cp: &ControlPlaneSecrets,
) -> Result<Vec<RenderedFile>, RenderError> {
    let local_api = format!("https://{}:{API_SERVER_PORT}", node.private_ip);
    let mut files = vec![
        RenderedFile::new(pki::KUBERNETES_CA_KEY, 0o600, cp.kubernetes_ca_key.clone()),
        RenderedFile::new(
            pki::SERVICE_ACCOUNT_KEY,
            0o600,
            cp.service_account_key.clone(),
        ),
        RenderedFile::new(
            pki::SERVICE_ACCOUNT_PUB,
            0o644,
            keys::bundle(
                &cp.service_account_public_key,
                &cp.service_account_verify_keys,
            ),
        ),
        RenderedFile::new(
            pki::ETCD_CA_CERT,
            0o644,
            keys::bundle(&cp.etcd_ca_cert, &cp.etcd_ca_trusted),
        ),
        RenderedFile::new(paths::AUDIT_POLICY, 0o644, AUDIT_POLICY),
        RenderedFile::new(paths::AUTHENTICATION_CONFIG, 0o644, AUTHENTICATION_CONFIG),
    ];
    for (path, user, pair) in [
        (
            paths::CONTROLLER_MANAGER_KUBECONFIG,
            "system:kube-controller-manager",
            pki::CONTROLLER_MANAGER,
        ),
        (
            paths::SCHEDULER_KUBECONFIG,
            "system:kube-scheduler",
            pki::SCHEDULER,
        ),
    ] {
        let user_creds = KubeconfigUser {
            client_certificate: Some(pki::cert(pair)),
            client_key: Some(pki::key(pair)),
            token: None,
        };
        files.push(RenderedFile::new(
            path,
            0o600,
            to_yaml(path, &kubeconfig(&local_api, user, user_creds))?,
        ));
    }
    if let Some(provider) = settings.encryption_provider {
        let keys = cp
            .encryption_keys
            .as_ref()
            .ok_or(RenderError::MissingSecret("the encryption keys"))?;
        let keys = keys::encryption_keys_in_use(keys, spec.pki.encryption_key_names.as_deref())?;
        files.push(RenderedFile::new(
            paths::ENCRYPTION_CONFIG,
            0o600,
            to_yaml(
                paths::ENCRYPTION_CONFIG,
                &encryption_configuration(provider, &keys),
            )?,
        ));
    }
    let manifests = [
        ("kube-apiserver", api_server(spec, settings, node)),
        ("kube-controller-manager", controller_manager(spec, node)),
        ("kube-scheduler", scheduler(spec, node)),
    ];
    for (name, pod) in manifests {
        let path = format!("{}/{name}.yaml", paths::MANIFESTS_DIR);
        let yaml = to_yaml(&path, &pod)?;
        files.push(RenderedFile::new(&path, 0o600, yaml));
    }
    let rbac_path = format!("{}/rbac.yaml", paths::BOOTSTRAP_DIR);
    let rbac = bootstrap_rbac(&rbac_path)?;
    files.push(RenderedFile::new(&rbac_path, 0o644, rbac));
    Ok(files)
}

/// The binding that has kubelets' renewals of their own client certificates approved (`rotateCertificates`):
/// one YAML stream of ClusterRoleBindings. There is no bootstrap token and nothing bound to
/// `system:bootstrappers`: a node's first certificate comes from the bootstrap service (crate::bootstrap), which
/// verifies which instance asks.
fn bootstrap_rbac(rbac_path: &str) -> Result<String, RenderError> {
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some("ballast:node-autoapprove-certificate-rotation".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient".into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Group".into(),
            name: "system:nodes".into(),
            namespace: None,
        }]),
    };
    Ok(format!("---\n{}", to_yaml(rbac_path, &binding)?))
}

/// The first key encrypts, every key decrypts; `identity` last, so data written before encryption was enabled
/// stays readable.
pub fn encryption_configuration(
    provider: EncryptionProvider,
    keys: &ballast_state::pki::EncryptionKeys,
) -> EncryptionConfiguration {
    let keys = KeysConfig {
        keys: keys
            .keys
            .iter()
            .map(|k| NamedKey {
                name: k.name.clone(),
                secret: k.secret.clone(),
            })
            .collect(),
    };
    let mut first = EncryptionProviderConfig::default();
    match provider {
        EncryptionProvider::Secretbox => first.secretbox = Some(keys),
        EncryptionProvider::Aescbc => first.aescbc = Some(keys),
        EncryptionProvider::Aesgcm => first.aesgcm = Some(keys),
    }
    let identity = EncryptionProviderConfig {
        identity: Some(Empty {}),
        ..Default::default()
    };
    EncryptionConfiguration {
        api_version: "apiserver.config.k8s.io/v1".into(),
        kind: "EncryptionConfiguration".into(),
        resources: vec![EncryptionResource {
            resources: vec!["secrets".into()],
            providers: vec![first, identity],
        }],
    }
}

const AUDIT_POLICY: &str = "\
# Written by nodeup: the API server's audit policy.
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
  - RequestReceived
rules:
  # Health checks and the API server's own watches: noise.
  - level: None
    nonResourceURLs: [\"/healthz*\", \"/livez*\", \"/readyz*\", \"/version\"]
  - level: None
    users: [\"system:apiserver\"]
    verbs: [\"get\", \"list\", \"watch\"]
  - level: None
    verbs: [\"watch\"]
  # Secrets, config maps and token reviews: who and when, never their content.
  - level: Metadata
    resources:
      - group: \"\"
        resources: [\"secrets\", \"configmaps\", \"serviceaccounts/token\"]
      - group: \"authentication.k8s.io\"
        resources: [\"tokenreviews\"]
  # Every other change: the request as sent.
  - level: Request
    verbs: [\"create\", \"update\", \"patch\", \"delete\", \"deletecollection\"]
  - level: Metadata
";

/// Anonymous requests are authenticated only on the health endpoints (the kubelet's probes of this static pod
/// and load balancers call them without credentials); any other anonymous request gets 401, as with kops's
/// `anonymousAuth: false`, without breaking the probes. Needs Kubernetes 1.32+ (AnonymousAuthConfigurableEndpoints,
/// beta and on by default there); Ballast pins 1.32 and 1.33.
const AUTHENTICATION_CONFIG: &str = "\
# Written by nodeup: how the API server authenticates requests.
apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
anonymous:
  enabled: true
  # Only health checks may be anonymous; every other request needs a certificate or a token.
  conditions:
    - path: /livez
    - path: /readyz
    - path: /healthz
";

fn api_server(spec: &NodeSpec, settings: &ControlPlaneSettings, node: &NodeFacts) -> Pod {
    let mut args = vec![
        format!("--advertise-address={}", node.private_ip),
        format!("--bind-address={}", node.private_ip),
        format!("--secure-port={API_SERVER_PORT}"),
        "--allow-privileged=true".to_string(),
        // Not --anonymous-auth: the two cannot be combined; the file allows anonymous health checks only.
        format!("--authentication-config={}", paths::AUTHENTICATION_CONFIG),
        "--authorization-mode=Node,RBAC".to_string(),
        format!("--client-ca-file={}", pki::KUBERNETES_CA_CERT),
        "--enable-admission-plugins=NodeRestriction".to_string(),
        format!("--etcd-cafile={}", pki::ETCD_CA_CERT),
        format!("--etcd-certfile={}.crt", pki::API_SERVER_ETCD_CLIENT),
        format!("--etcd-keyfile={}.key", pki::API_SERVER_ETCD_CLIENT),
        format!("--etcd-servers=https://{}:2379", node.private_ip),
        format!(
            "--kubelet-client-certificate={}.crt",
            pki::API_SERVER_KUBELET_CLIENT
        ),
        format!(
            "--kubelet-client-key={}.key",
            pki::API_SERVER_KUBELET_CLIENT
        ),
        "--kubelet-preferred-address-types=InternalIP,Hostname".to_string(),
        format!(
            "--service-account-issuer=https://kubernetes.default.svc.{}",
            spec.cluster_domain
        ),
        format!("--service-account-key-file={}", pki::SERVICE_ACCOUNT_PUB),
        format!(
            "--service-account-signing-key-file={}",
            pki::SERVICE_ACCOUNT_KEY
        ),
        format!("--service-cluster-ip-range={}", spec.service_cidr),
        format!("--tls-cert-file={}.crt", pki::API_SERVER),
        format!("--tls-private-key-file={}.key", pki::API_SERVER),
        "--tls-min-version=VersionTLS12".to_string(),
        format!("--audit-policy-file={}", paths::AUDIT_POLICY),
        format!("--audit-log-path={}", settings.audit_log_path),
        format!("--audit-log-maxage={}", settings.audit_log_max_age_days),
        "--audit-log-maxbackup=10".to_string(),
        "--audit-log-maxsize=100".to_string(),
    ];
    if settings.encryption_provider.is_some() {
        args.push(format!(
            "--encryption-provider-config={}",
            paths::ENCRYPTION_CONFIG
        ));
    }
    args.sort();
    let log_dir = std::path::Path::new(&settings.audit_log_path)
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/var/log/kubernetes".to_string());
    static_pod(
        "kube-apiserver",
        spec,
        args,
        &node.private_ip,
        API_SERVER_PORT,
        "/livez",
        "250m",
        vec![
            ("k8s-config", "/etc/kubernetes", true, "Directory"),
            ("ca-certs", "/etc/ssl/certs", true, "DirectoryOrCreate"),
            ("audit-log", &log_dir, false, "DirectoryOrCreate"),
        ],
    )
}

/// No `--cloud-provider` here nor on the API server: the in-tree cloud providers are gone from Kubernetes (1.31),
/// and the cloud loops (node initialization, load balancers) are the external AWS cloud controller manager's,
/// which the control plane installs as an add-on; only the kubelet says `--cloud-provider=external`.
fn controller_manager(spec: &NodeSpec, node: &NodeFacts) -> Pod {
    let kc = paths::CONTROLLER_MANAGER_KUBECONFIG;
    let mut args = vec![
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        format!("--bind-address={}", node.private_ip),
        format!("--client-ca-file={}", pki::KUBERNETES_CA_CERT),
        format!("--cluster-name={}", spec.cluster_name),
        format!("--cluster-signing-cert-file={}", pki::KUBERNETES_CA_CERT),
        format!("--cluster-signing-key-file={}", pki::KUBERNETES_CA_KEY),
        "--controllers=*".to_string(),
        format!("--kubeconfig={kc}"),
        "--leader-elect=true".to_string(),
        format!("--root-ca-file={}", pki::KUBERNETES_CA_CERT),
        format!(
            "--service-account-private-key-file={}",
            pki::SERVICE_ACCOUNT_KEY
        ),
        format!("--service-cluster-ip-range={}", spec.service_cidr),
        "--use-service-account-credentials=true".to_string(),
    ];
    if spec.networking != ballast_state::spec::Networking::AmazonVpc {
        args.push("--allocate-node-cidrs=true".to_string());
        args.push(format!("--cluster-cidr={}", spec.pod_cidr));
    }
    args.sort();
    static_pod(
        "kube-controller-manager",
        spec,
        args,
        &node.private_ip,
        CONTROLLER_MANAGER_PORT,
        "/healthz",
        "200m",
        vec![
            ("k8s-config", "/etc/kubernetes", true, "Directory"),
            ("ca-certs", "/etc/ssl/certs", true, "DirectoryOrCreate"),
        ],
    )
}

fn scheduler(spec: &NodeSpec, node: &NodeFacts) -> Pod {
    let kc = paths::SCHEDULER_KUBECONFIG;
    let args = vec![
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        format!("--bind-address={}", node.private_ip),
        format!("--kubeconfig={kc}"),
        "--leader-elect=true".to_string(),
    ];
    static_pod(
        "kube-scheduler",
        spec,
        args,
        &node.private_ip,
        SCHEDULER_PORT,
        "/healthz",
        "100m",
        vec![("k8s-config", "/etc/kubernetes", true, "Directory")],
    )
}

#[allow(clippy::too_many_arguments)]
fn static_pod(
    name: &str,
    spec: &NodeSpec,
    args: Vec<String>,
    ip: &str,
    port: i32,
    probe_path: &str,
    cpu: &str,
    host_paths: Vec<(&str, &str, bool, &str)>,
) -> Pod {
    let probe = |initial: i32, failures: i32| Probe {
        http_get: Some(HTTPGetAction {
            host: Some(ip.to_string()),
            path: Some(probe_path.to_string()),
            port: IntOrString::Int(port),
            scheme: Some("HTTPS".into()),
            ..Default::default()
        }),
        initial_delay_seconds: Some(initial),
        period_seconds: Some(10),
        timeout_seconds: Some(15),
        failure_threshold: Some(failures),
        ..Default::default()
    };
    let mut command = vec![name.to_string()];
    command.extend(args);
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("kube-system".into()),
            labels: Some(BTreeMap::from([
                ("component".to_string(), name.to_string()),
                ("tier".to_string(), "control-plane".to_string()),
            ])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: name.to_string(),
                image: Some(format!(
                    "registry.k8s.io/{name}:v{}",
                    spec.kubernetes_version
                )),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(command),
                liveness_probe: Some(probe(10, 8)),
                startup_probe: Some(probe(10, 24)),
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "cpu".to_string(),
                        Quantity(cpu.to_string()),
                    )])),
                    ..Default::default()
                }),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    ..Default::default()
                }),
                volume_mounts: Some(
                    host_paths
                        .iter()
                        .map(|(vol, path, read_only, _)| VolumeMount {
                            name: vol.to_string(),
                            mount_path: path.to_string(),
                            read_only: Some(*read_only),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }],
            host_network: Some(true),
            priority_class_name: Some("system-node-critical".into()),
            security_context: Some(PodSecurityContext {
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            volumes: Some(
                host_paths
                    .iter()
                    .map(|(vol, path, _, kind)| Volume {
                        name: vol.to_string(),
                        host_path: Some(HostPathVolumeSource {
                            path: path.to_string(),
                            type_: Some(kind.to_string()),
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden() -> (NodeSpec, NodeFacts) {
        let node = NodeFacts {
            instance_id: "i-1".into(),
            private_ip: "10.0.1.10".into(),
            hostname: "ip-10-0-1-10".into(),
            availability_zone: "us-west-2a".into(),
        };
        let spec: NodeSpec =
            yaml_serde::from_str(include_str!("../../tests/data/control-plane/spec.yaml"))
                .expect("the golden control-plane spec");
        (spec, node)
    }

    #[test]
    fn no_in_tree_cloud_provider_on_the_api_server_or_controller_manager() {
        let (spec, node) = golden();
        let settings = spec.control_plane.clone().expect("control-plane settings");
        for pod in [
            api_server(&spec, &settings, &node),
            controller_manager(&spec, &node),
        ] {
            let command = pod.spec.expect("pod spec").containers[0]
                .command
                .clone()
                .unwrap_or_default();
            assert!(
                !command.iter().any(|a| a.starts_with("--cloud-provider")),
                "{command:?}"
            );
        }
    }

    #[test]
    fn anonymous_requests_are_allowed_only_on_health_endpoints() {
        let config: yaml_serde::Value =
            yaml_serde::from_str(AUTHENTICATION_CONFIG).expect("the authentication config parses");
        assert_eq!(config["kind"].as_str(), Some("AuthenticationConfiguration"));
        let anonymous_paths: Vec<&str> = config["anonymous"]["conditions"]
            .as_sequence()
            .expect("conditions")
            .iter()
            .filter_map(|c| c["path"].as_str())
            .collect();
        assert_eq!(anonymous_paths, ["/livez", "/readyz", "/healthz"]);
        // The probes of the API server's own pod must be among them, or the kubelet would restart it forever.
        let (spec, node) = golden();
        let settings = spec.control_plane.clone().expect("control-plane settings");
        let pod = api_server(&spec, &settings, &node);
        let container = &pod.spec.expect("pod spec").containers[0];
        let command = container.command.clone().unwrap_or_default();
        assert!(
            !command.iter().any(|a| a.starts_with("--anonymous-auth")),
            "{command:?}"
        );
        assert!(command.contains(&format!(
            "--authentication-config={}",
            paths::AUTHENTICATION_CONFIG
        )));
        let probe = container
            .liveness_probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref());
        assert!(
            anonymous_paths.contains(&probe.and_then(|g| g.path.as_deref()).unwrap_or_default())
        );
    }
}
