//! Control-plane files: static pods for kube-apiserver, kube-controller-manager and kube-scheduler (from
//! k8s-openapi types), the API server's EncryptionConfiguration and audit policy, the components' kubeconfigs,
//! the keys they need on disk, and the RBAC binding that approves kubelets' renewals of their own certificates.

use std::collections::BTreeMap;

use ballast_state::irsa::IssuerSettings;
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

pub(super) const AUDIT_POLICY: &str = "\
# Written by nodeup: the API server's audit policy. The first rule that matches a request decides.
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
  # Leases: every kubelet's heartbeat (one update per node every 10 s) and the components' leader election.
  # Logged, they were most of the log on a large cluster, and retention could not last its days.
  - level: None
    resources:
      - group: \"coordination.k8s.io\"
        resources: [\"leases\"]
  # Events: written by every component, kept by the API server for an hour.
  - level: None
    resources:
      - group: \"\"
        resources: [\"events\"]
      - group: \"events.k8s.io\"
        resources: [\"events\"]
  # Endpoints and endpoint slices the control plane's own controllers keep current.
  - level: None
    users:
      - \"system:kube-controller-manager\"
      - \"system:kube-scheduler\"
      - \"system:serviceaccount:kube-system:endpoint-controller\"
      - \"system:serviceaccount:kube-system:endpointslice-controller\"
      - \"system:serviceaccount:kube-system:endpointslicemirroring-controller\"
    verbs: [\"get\", \"list\", \"update\", \"patch\"]
    resources:
      - group: \"\"
        resources: [\"endpoints\"]
      - group: \"discovery.k8s.io\"
        resources: [\"endpointslices\"]
  # Kubelets reading their own node: every few seconds per node.
  - level: None
    userGroups: [\"system:nodes\"]
    verbs: [\"get\"]
    resources:
      - group: \"\"
        resources: [\"nodes\", \"nodes/status\"]
  # Kubelets' status updates of their node and pods: who and when, not the status itself.
  - level: Metadata
    userGroups: [\"system:nodes\"]
    verbs: [\"update\", \"patch\"]
    resources:
      - group: \"\"
        resources: [\"nodes/status\", \"pods/status\"]
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
  # Every other read: who and when.
  - level: Metadata
";

/// Anonymous requests are authenticated only on the health endpoints (the kubelet's probes of this static pod
/// and load balancers call them without credentials); any other anonymous request gets 401, as with kops's
/// `anonymousAuth: false`, without breaking the probes. Needs Kubernetes 1.32+ (AnonymousAuthConfigurableEndpoints,
/// beta and on by default there); Ballast pins 1.32 to 1.34.
pub(super) const AUTHENTICATION_CONFIG: &str = "\
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

/// `--flag` of `--flag=value`.
fn flag_name(arg: &str) -> &str {
    arg.split_once('=').map_or(arg, |(name, _)| name)
}

/// The issuer flags. Without discovery, the in-cluster issuer alone (kube-apiserver's defaults do the rest).
/// With it (IRSA, `docs/irsa.md`): the published issuer first (tokens are signed as the first), the old one
/// still accepted so tokens issued before the switch work until they expire, the published JWKS's URL, and the
/// API audiences (`ballast_state::irsa::IssuerSettings`).
fn service_account_issuer_args(spec: &NodeSpec, issuer: Option<&IssuerSettings>) -> Vec<String> {
    let Some(issuer) = issuer else {
        return vec![format!(
            "--service-account-issuer=https://kubernetes.default.svc.{}",
            spec.cluster_domain
        )];
    };
    let mut args: Vec<String> = std::iter::once(&issuer.issuer)
        .chain(&issuer.previous_issuers)
        .map(|i| format!("--service-account-issuer={i}"))
        .collect();
    args.push(format!("--service-account-jwks-uri={}", issuer.jwks_uri));
    args.push(format!(
        "--api-audiences={}",
        issuer.api_audiences.join(",")
    ));
    args
}

/// What differs between the kube-apiserver of a control-plane node and of an API-server node: only where etcd
/// is (the local member, or every member by its stable name); each node's settings give the rest, alike.
pub(super) struct ApiServerShape<'a> {
    pub encryption_provider: Option<EncryptionProvider>,
    pub audit_log_path: &'a str,
    pub audit_log_max_age_days: u32,
    pub service_account_issuer: Option<&'a IssuerSettings>,
    /// `--etcd-servers`'s value: comma-separated client URLs.
    pub etcd_servers: String,
}

/// A control-plane node's API server: its own etcd member, on its private IP.
fn api_server(spec: &NodeSpec, settings: &ControlPlaneSettings, node: &NodeFacts) -> Pod {
    let shape = ApiServerShape {
        encryption_provider: settings.encryption_provider,
        audit_log_path: &settings.audit_log_path,
        audit_log_max_age_days: settings.audit_log_max_age_days,
        service_account_issuer: settings.service_account_issuer.as_ref(),
        etcd_servers: format!("https://{}:2379", node.private_ip),
    };
    api_server_pod(spec, &shape, node)
}

/// kube-apiserver's static pod, on a control-plane or an API-server node.
pub(super) fn api_server_pod(
    spec: &NodeSpec,
    settings: &ApiServerShape<'_>,
    node: &NodeFacts,
) -> Pod {
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
        format!("--etcd-servers={}", settings.etcd_servers),
        format!(
            "--kubelet-client-certificate={}.crt",
            pki::API_SERVER_KUBELET_CLIENT
        ),
        format!(
            "--kubelet-client-key={}.key",
            pki::API_SERVER_KUBELET_CLIENT
        ),
        // Kubelets serve with certificates the Kubernetes CA signed for the names EC2 gives them (issued at boot:
        // crate::cert_plan::kubelet_serving, crate::bootstrap::issue): logs, exec and port-forward verify them.
        format!(
            "--kubelet-certificate-authority={}",
            pki::KUBERNETES_CA_CERT
        ),
        "--kubelet-preferred-address-types=InternalIP,Hostname".to_string(),
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
    args.extend(service_account_issuer_args(
        spec,
        settings.service_account_issuer,
    ));
    // By flag name only, and stable: a repeated flag keeps its order, which matters for
    // --service-account-issuer (the first is the one tokens are signed as).
    args.sort_by(|a, b| flag_name(a).cmp(flag_name(b)));
    let log_dir = std::path::Path::new(settings.audit_log_path)
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/var/log/kubernetes".to_string());
    // Only the files the API server reads (never the CA's or the controller manager's keys, nor etcd's server
    // and peer keys): each its own read-only mount.
    let mut files = vec![
        pki::KUBERNETES_CA_CERT.to_string(),
        pki::cert(pki::API_SERVER),
        pki::key(pki::API_SERVER),
        pki::cert(pki::API_SERVER_KUBELET_CLIENT),
        pki::key(pki::API_SERVER_KUBELET_CLIENT),
        pki::cert(pki::API_SERVER_ETCD_CLIENT),
        pki::key(pki::API_SERVER_ETCD_CLIENT),
        pki::ETCD_CA_CERT.to_string(),
        pki::SERVICE_ACCOUNT_PUB.to_string(),
        pki::SERVICE_ACCOUNT_KEY.to_string(),
        paths::AUDIT_POLICY.to_string(),
        paths::AUTHENTICATION_CONFIG.to_string(),
    ];
    if settings.encryption_provider.is_some() {
        files.push(paths::ENCRYPTION_CONFIG.to_string());
    }
    let mut mounts = file_mounts(&files);
    mounts.push(ca_certs_mount());
    mounts.push(HostMount {
        volume: "audit-log".to_string(),
        path: log_dir,
        read_only: false,
        kind: "DirectoryOrCreate",
    });
    static_pod(
        "kube-apiserver",
        spec,
        args,
        &node.private_ip,
        API_SERVER_PORT,
        "/livez",
        "250m",
        mounts,
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
    // Its kubeconfig and client certificate, the CA it signs kubelets' certificates with, and the
    // service-account key it signs tokens with.
    let mut mounts = file_mounts(&[
        kc.to_string(),
        pki::cert(pki::CONTROLLER_MANAGER),
        pki::key(pki::CONTROLLER_MANAGER),
        pki::KUBERNETES_CA_CERT.to_string(),
        pki::KUBERNETES_CA_KEY.to_string(),
        pki::SERVICE_ACCOUNT_KEY.to_string(),
    ]);
    mounts.push(ca_certs_mount());
    static_pod(
        "kube-controller-manager",
        spec,
        args,
        &node.private_ip,
        CONTROLLER_MANAGER_PORT,
        "/healthz",
        "200m",
        mounts,
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
    // Its kubeconfig and the client certificate, key and CA certificate it names: no other key.
    let mounts = file_mounts(&[
        kc.to_string(),
        pki::cert(pki::SCHEDULER),
        pki::key(pki::SCHEDULER),
        pki::KUBERNETES_CA_CERT.to_string(),
    ]);
    static_pod(
        "kube-scheduler",
        spec,
        args,
        &node.private_ip,
        SCHEDULER_PORT,
        "/healthz",
        "100m",
        mounts,
    )
}

/// A host path a static pod mounts at the same path.
struct HostMount {
    volume: String,
    path: String,
    read_only: bool,
    /// The hostPath type: `File` (must exist), `DirectoryOrCreate`.
    kind: &'static str,
}

/// Each file its own read-only mount (hostPath type `File`), named after its path below /etc/kubernetes
/// (`pki/etcd/ca.crt` -> `pki-etcd-ca-crt`). A component sees exactly the files it reads, never the whole of
/// /etc/kubernetes with every key in it (issue 28: the scheduler saw ca.key and sa.key). A file mount is bound
/// to the file as it was when the container started: nodeup replaces files by rename, so a certificate nodeup
/// renews reaches a running component when its pod restarts (the node's reboot or its replacement), as before
/// its expiry nodeup renews it 30 days ahead.
fn file_mounts(files: &[String]) -> Vec<HostMount> {
    files
        .iter()
        .map(|path| {
            let relative = path.strip_prefix("/etc/kubernetes/").unwrap_or(path);
            let volume = relative
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_lowercase()
                    } else {
                        '-'
                    }
                })
                .collect::<String>()
                .trim_matches('-')
                .to_string();
            HostMount {
                volume,
                path: path.clone(),
                read_only: true,
                kind: "File",
            }
        })
        .collect()
}

/// The host's CA bundle (for AWS's endpoints), read-only.
fn ca_certs_mount() -> HostMount {
    HostMount {
        volume: "ca-certs".to_string(),
        path: "/etc/ssl/certs".to_string(),
        read_only: true,
        kind: "DirectoryOrCreate",
    }
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
    host_paths: Vec<HostMount>,
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
                        .map(|m| VolumeMount {
                            name: m.volume.clone(),
                            mount_path: m.path.clone(),
                            read_only: Some(m.read_only),
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
                    .map(|m| Volume {
                        name: m.volume.clone(),
                        host_path: Some(HostPathVolumeSource {
                            path: m.path.clone(),
                            type_: Some(m.kind.to_string()),
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
            resolv_conf: crate::model::RESOLVED_RESOLV_CONF.into(),
            baked_images: Default::default(),
            oom_scores_restricted: false,
        };
        let spec: NodeSpec =
            yaml_serde::from_str(include_str!("../../tests/data/control-plane/spec.yaml"))
                .expect("the golden control-plane spec");
        (spec, node)
    }

    /// The host paths a pod mounts.
    fn mounted(pod: &Pod) -> Vec<String> {
        pod.spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .map(|v| {
                v.iter()
                    .filter_map(|v| v.host_path.as_ref().map(|h| h.path.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Issue 28: every static pod mounted all of /etc/kubernetes, so the scheduler saw ca.key and sa.key.
    #[test]
    fn each_component_mounts_only_the_keys_it_uses() {
        let (spec, node) = golden();
        let settings = spec.control_plane.clone().expect("control-plane settings");
        let scheduler_mounts = mounted(&scheduler(&spec, &node));
        assert_eq!(
            scheduler_mounts,
            [
                paths::SCHEDULER_KUBECONFIG.to_string(),
                pki::cert(pki::SCHEDULER),
                pki::key(pki::SCHEDULER),
                // The CA its kubeconfig names: a real scheduler exits without it.
                pki::KUBERNETES_CA_CERT.to_string(),
            ]
        );
        let keys_of = |mounts: &[String]| -> Vec<String> {
            mounts
                .iter()
                .filter(|p| p.ends_with(".key"))
                .cloned()
                .collect()
        };
        assert_eq!(keys_of(&scheduler_mounts), [pki::key(pki::SCHEDULER)]);
        let controller_manager_mounts = mounted(&controller_manager(&spec, &node));
        assert_eq!(
            keys_of(&controller_manager_mounts),
            [
                pki::key(pki::CONTROLLER_MANAGER),
                pki::KUBERNETES_CA_KEY.to_string(),
                pki::SERVICE_ACCOUNT_KEY.to_string()
            ]
        );
        let api_server_mounts = mounted(&api_server(&spec, &settings, &node));
        assert!(!api_server_mounts.contains(&pki::KUBERNETES_CA_KEY.to_string()));
        assert!(!api_server_mounts
            .iter()
            .any(|p| p.starts_with("/etc/kubernetes/pki/etcd/") && p != pki::ETCD_CA_CERT));
        for pod in [
            &scheduler_mounts,
            &controller_manager_mounts,
            &api_server_mounts,
        ] {
            assert!(
                !pod.iter()
                    .any(|p| p == "/etc/kubernetes" || p == pki::KUBERNETES_DIR),
                "{pod:?}"
            );
        }
        // Every file a component's flags name is mounted.
        for (pod, mounts) in [
            (api_server(&spec, &settings, &node), &api_server_mounts),
            (controller_manager(&spec, &node), &controller_manager_mounts),
            (scheduler(&spec, &node), &scheduler_mounts),
        ] {
            let command = pod.spec.expect("pod spec").containers[0]
                .command
                .clone()
                .unwrap_or_default();
            for arg in command {
                let Some((_, value)) = arg.split_once('=') else {
                    continue;
                };
                if value.starts_with("/etc/kubernetes/") {
                    assert!(
                        mounts.contains(&value.to_string()),
                        "{arg} is not mounted: {mounts:?}"
                    );
                }
            }
        }
    }

    /// The level the policy gives a resource request: the first rule that matches decides (as the API server
    /// reads it).
    fn audit_level(
        user: &str,
        groups: &[&str],
        verb: &str,
        api_group: &str,
        resource: &str,
        namespace: &str,
    ) -> String {
        let policy: yaml_serde::Value =
            yaml_serde::from_str(AUDIT_POLICY).expect("the audit policy parses");
        let has = |list: &yaml_serde::Value, v: &str| {
            list.as_sequence()
                .is_none_or(|l| l.iter().any(|x| x.as_str() == Some(v)))
        };
        for rule in policy["rules"].as_sequence().expect("rules") {
            if rule.get("nonResourceURLs").is_some() {
                continue;
            }
            let groups_match = rule["userGroups"]
                .as_sequence()
                .is_none_or(|l| l.iter().any(|g| groups.contains(&g.as_str().unwrap_or(""))));
            let resource_match = rule["resources"].as_sequence().is_none_or(|l| {
                l.iter().any(|r| {
                    r["group"].as_str() == Some(api_group) && has(&r["resources"], resource)
                })
            });
            if has(&rule["users"], user)
                && groups_match
                && has(&rule["verbs"], verb)
                && has(&rule["namespaces"], namespace)
                && resource_match
            {
                return rule["level"].as_str().expect("a level").to_string();
            }
        }
        panic!("no rule matches");
    }

    /// Issue 28: every lease update was logged at Request level, so the log's retention could not last its days
    /// on a large cluster.
    #[test]
    fn the_audit_policy_drops_heartbeats_and_keeps_changes() {
        let kubelet = (
            "system:node:ip-10-0-1-10",
            &["system:nodes", "system:authenticated"][..],
        );
        let admin = ("admin", &["system:masters", "system:authenticated"][..]);
        let lease = audit_level(
            kubelet.0,
            kubelet.1,
            "update",
            "coordination.k8s.io",
            "leases",
            "kube-node-lease",
        );
        assert_eq!(lease, "None");
        let election = audit_level(
            "system:kube-scheduler",
            &[],
            "update",
            "coordination.k8s.io",
            "leases",
            "kube-system",
        );
        assert_eq!(election, "None");
        assert_eq!(
            audit_level(kubelet.0, kubelet.1, "create", "", "events", "default"),
            "None"
        );
        assert_eq!(
            audit_level(
                "system:serviceaccount:kube-system:endpointslice-controller",
                &[],
                "update",
                "discovery.k8s.io",
                "endpointslices",
                "default"
            ),
            "None"
        );
        assert_eq!(
            audit_level(kubelet.0, kubelet.1, "get", "", "nodes", ""),
            "None"
        );
        assert_eq!(
            audit_level(kubelet.0, kubelet.1, "patch", "", "nodes/status", ""),
            "Metadata"
        );
        // What an audit is for stays.
        assert_eq!(
            audit_level(admin.0, admin.1, "update", "", "secrets", "default"),
            "Metadata"
        );
        assert_eq!(
            audit_level(admin.0, admin.1, "create", "apps", "deployments", "default"),
            "Request"
        );
        assert_eq!(
            audit_level(admin.0, admin.1, "update", "", "endpoints", "default"),
            "Request"
        );
        assert_eq!(
            audit_level(admin.0, admin.1, "get", "", "pods", "default"),
            "Metadata"
        );
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
