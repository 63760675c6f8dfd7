//! The objects Ballast writes itself, typed with k8s-openapi: CoreDNS, kube-proxy, the AWS cloud controller
//! manager, and the RBAC binding that approves kubelets' renewals of their own client certificates. Pure.
//!
//! Each builder takes the pinned image reference (`tag@sha256:...`) from [`super::set`], so nothing here names
//! a tag a runtime could resolve to another image.

use std::collections::BTreeMap;

use ballast_state::node::NodeSpec;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource,
    HostPathVolumeSource, KeyToPath, ObjectFieldSelector, PodSpec, PodTemplateSpec,
    ResourceRequirements, SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec,
    Toleration, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub(super) const KUBE_SYSTEM: &str = "kube-system";
pub(super) const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// The label every object Ballast applies carries, so an operator can list them.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "ballast";
pub(super) const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

pub(super) fn meta(name: &str, namespace: Option<&str>, app: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(BTreeMap::from([
            ("k8s-app".to_string(), app.to_string()),
            (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        ])),
        ..Default::default()
    }
}

pub(super) fn app_labels(app: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("k8s-app".to_string(), app.to_string())])
}

pub(super) fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let owned = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(owned(groups)),
        resources: Some(owned(resources)),
        verbs: owned(verbs),
        ..Default::default()
    }
}

pub(super) fn service_account_subject(name: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: name.to_string(),
        namespace: Some(KUBE_SYSTEM.into()),
        api_group: None,
    }
}

pub(super) fn cluster_role_ref(name: &str) -> RoleRef {
    RoleRef {
        api_group: RBAC_GROUP.into(),
        kind: "ClusterRole".into(),
        name: name.to_string(),
    }
}

/// Only on control-plane nodes, and at most one replica per node (`same`: the pods of this Deployment), so losing
/// a node leaves the others: the Cilium operator's and the EBS CSI controller's placement.
pub(super) fn one_per_control_plane_node(
    same: LabelSelector,
) -> k8s_openapi::api::core::v1::Affinity {
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
        PodAffinityTerm, PodAntiAffinity,
    };
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: CONTROL_PLANE_LABEL.into(),
                        operator: "Exists".into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        pod_anti_affinity: Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: Some(same),
                topology_key: "kubernetes.io/hostname".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn tolerate(key: &str) -> Toleration {
    Toleration {
        key: Some(key.to_string()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Default::default()
    }
}

pub(super) fn requests(cpu: &str, memory: &str) -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.to_string())),
            ("memory".to_string(), Quantity(memory.to_string())),
        ])),
        ..Default::default()
    }
}

pub(super) fn host_path(name: &str, path: &str, kind: &str) -> Volume {
    Volume {
        name: name.to_string(),
        host_path: Some(HostPathVolumeSource {
            path: path.to_string(),
            type_: Some(kind.to_string()),
        }),
        ..Default::default()
    }
}

pub(super) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// A kube-system DaemonSet named and labelled `app: name`, selecting its own pods, running `pod`.
fn labelled_daemon_set(name: &str, pod: PodSpec) -> DaemonSet {
    DaemonSet {
        metadata: meta(name, Some(KUBE_SYSTEM), name),
        spec: Some(DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(app_labels(name)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(app_labels(name)),
                    ..Default::default()
                }),
                spec: Some(pod),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The node-identity design's one binding: kubelets may have renewals of their own client certificates approved
/// (`rotateCertificates`). A node's first certificate comes from the bootstrap service (docs/node-identity.md),
/// so nothing is bound to `system:bootstrappers` and no bootstrap token exists to apply. The Node authorizer and
/// NodeRestriction (API server flags) keep each kubelet to its own Node object.
pub fn certificate_rotation_binding() -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some("ballast:node-autoapprove-certificate-rotation".into()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY_LABEL.to_string(),
                MANAGED_BY.to_string(),
            )])),
            ..Default::default()
        },
        role_ref: cluster_role_ref(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        ),
        subjects: Some(vec![Subject {
            api_group: Some(RBAC_GROUP.into()),
            kind: "Group".into(),
            name: "system:nodes".into(),
            namespace: None,
        }]),
    }
}

/// CoreDNS's objects, in apply order.
pub struct CoreDns {
    pub service_account: ServiceAccount,
    pub cluster_role: ClusterRole,
    pub binding: ClusterRoleBinding,
    pub config: ConfigMap,
    pub deployment: Deployment,
    pub service: Service,
}

const COREDNS: &str = "coredns";
const KUBE_DNS: &str = "kube-dns";

fn corefile(spec: &NodeSpec) -> String {
    format!(
        ".:53 {{
    errors
    health {{
        lameduck 5s
    }}
    ready
    kubernetes {domain} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    prometheus :9153
    forward . /etc/resolv.conf {{
        max_concurrent 1000
    }}
    cache 30
    loop
    reload
    loadbalance
}}
",
        domain = spec.cluster_domain
    )
}

fn coredns_deployment(image: &str) -> Deployment {
    const NAME: &str = COREDNS;
    const APP: &str = KUBE_DNS;
    let dns_port = |name: &str, protocol: &str| ContainerPort {
        name: Some(name.to_string()),
        container_port: 53,
        protocol: Some(protocol.to_string()),
        ..Default::default()
    };
    let container = Container {
        name: NAME.into(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(vec!["-conf".into(), "/etc/coredns/Corefile".into()]),
        ports: Some(vec![
            dns_port("dns", "UDP"),
            dns_port("dns-tcp", "TCP"),
            ContainerPort {
                name: Some("metrics".into()),
                container_port: 9153,
                protocol: Some("TCP".into()),
                ..Default::default()
            },
        ]),
        resources: Some(requests("100m", "70Mi")),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            ..Default::default()
        }),
        volume_mounts: Some(vec![mount("config-volume", "/etc/coredns", true)]),
        ..Default::default()
    };
    Deployment {
        metadata: meta(NAME, Some(KUBE_SYSTEM), APP),
        spec: Some(DeploymentSpec {
            replicas: Some(2),
            selector: LabelSelector {
                match_labels: Some(app_labels(APP)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(app_labels(APP)),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    dns_policy: Some("Default".into()),
                    priority_class_name: Some("system-cluster-critical".into()),
                    service_account_name: Some(NAME.into()),
                    tolerations: Some(vec![tolerate(CONTROL_PLANE_LABEL)]),
                    volumes: Some(vec![Volume {
                        name: "config-volume".into(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: NAME.into(),
                            items: Some(vec![KeyToPath {
                                key: "Corefile".into(),
                                path: "Corefile".into(),
                                ..Default::default()
                            }]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn coredns(spec: &NodeSpec, image: &str) -> CoreDns {
    const NAME: &str = COREDNS;
    const APP: &str = KUBE_DNS;
    let service_port = |name: &str, port: i32, protocol: &str| ServicePort {
        name: Some(name.to_string()),
        port,
        protocol: Some(protocol.to_string()),
        target_port: Some(IntOrString::Int(port)),
        ..Default::default()
    };
    CoreDns {
        service_account: ServiceAccount {
            metadata: meta(NAME, Some(KUBE_SYSTEM), APP),
            ..Default::default()
        },
        cluster_role: ClusterRole {
            metadata: meta("system:coredns", None, APP),
            rules: Some(vec![
                rule(
                    &[""],
                    &["endpoints", "services", "pods", "namespaces"],
                    &["list", "watch"],
                ),
                rule(
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                    &["list", "watch"],
                ),
            ]),
            ..Default::default()
        },
        binding: ClusterRoleBinding {
            metadata: meta("system:coredns", None, APP),
            role_ref: cluster_role_ref("system:coredns"),
            subjects: Some(vec![service_account_subject(NAME)]),
        },
        config: ConfigMap {
            metadata: meta(NAME, Some(KUBE_SYSTEM), APP),
            data: Some(BTreeMap::from([("Corefile".to_string(), corefile(spec))])),
            ..Default::default()
        },
        deployment: coredns_deployment(image),
        service: Service {
            metadata: meta("kube-dns", Some(KUBE_SYSTEM), APP),
            spec: Some(ServiceSpec {
                cluster_ip: Some(spec.cluster_dns.clone()),
                selector: Some(app_labels(APP)),
                ports: Some(vec![
                    service_port("dns", 53, "UDP"),
                    service_port("dns-tcp", 53, "TCP"),
                    service_port("metrics", 9153, "TCP"),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

/// kube-proxy's objects, in apply order.
pub struct KubeProxy {
    pub service_account: ServiceAccount,
    pub binding: ClusterRoleBinding,
    pub config: ConfigMap,
    pub daemon_set: DaemonSet,
}

/// kube-proxy reaches the API through its load balancer (the service network is what it programs, so it cannot
/// use the `kubernetes` service), authenticated by its service account token.
pub fn kube_proxy(spec: &NodeSpec, image: &str) -> KubeProxy {
    const NAME: &str = "kube-proxy";
    let kubeconfig = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: default
  cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: https://{endpoint}
contexts:
- name: default
  context:
    cluster: default
    namespace: default
    user: default
current-context: default
users:
- name: default
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
",
        endpoint = spec.api_server_endpoint
    );
    let config = format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
clusterCIDR: {pods}
mode: iptables
{conntrack}",
        pods = spec.pod_cidr,
        conntrack = spec
            .kube_proxy_conntrack_max_per_core
            .map(|max| format!("conntrack:\n  maxPerCore: {max}\n"))
            .unwrap_or_default()
    );
    KubeProxy {
        service_account: ServiceAccount {
            metadata: meta(NAME, Some(KUBE_SYSTEM), NAME),
            ..Default::default()
        },
        binding: ClusterRoleBinding {
            metadata: meta("ballast:node-proxier", None, NAME),
            role_ref: cluster_role_ref("system:node-proxier"),
            subjects: Some(vec![service_account_subject(NAME)]),
        },
        config: ConfigMap {
            metadata: meta(NAME, Some(KUBE_SYSTEM), NAME),
            data: Some(BTreeMap::from([
                ("config.conf".to_string(), config),
                ("kubeconfig.conf".to_string(), kubeconfig),
            ])),
            ..Default::default()
        },
        daemon_set: kube_proxy_daemon_set(image),
    }
}

fn kube_proxy_daemon_set(image: &str) -> DaemonSet {
    const NAME: &str = "kube-proxy";
    let container = Container {
        name: NAME.into(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![
            "/usr/local/bin/kube-proxy".into(),
            "--config=/var/lib/kube-proxy/config.conf".into(),
            "--hostname-override=$(NODE_NAME)".into(),
        ]),
        env: Some(vec![EnvVar {
            name: "NODE_NAME".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "spec.nodeName".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        resources: Some(requests("100m", "50Mi")),
        // It programs the node's iptables.
        security_context: Some(SecurityContext {
            privileged: Some(true),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            mount("kube-proxy", "/var/lib/kube-proxy", true),
            mount("xtables-lock", "/run/xtables.lock", false),
            mount("lib-modules", "/lib/modules", true),
        ]),
        ..Default::default()
    };
    labelled_daemon_set(
        NAME,
        PodSpec {
            containers: vec![container],
            host_network: Some(true),
            priority_class_name: Some("system-node-critical".into()),
            service_account_name: Some(NAME.into()),
            // Every node, whatever its taints: services must work everywhere.
            tolerations: Some(vec![Toleration {
                operator: Some("Exists".into()),
                ..Default::default()
            }]),
            volumes: Some(vec![
                Volume {
                    name: "kube-proxy".into(),
                    config_map: Some(ConfigMapVolumeSource {
                        name: NAME.into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                host_path("xtables-lock", "/run/xtables.lock", "FileOrCreate"),
                host_path("lib-modules", "/lib/modules", "Directory"),
            ]),
            ..Default::default()
        },
    )
}

/// The AWS cloud controller manager's objects, in apply order.
pub struct CloudControllerManager {
    pub service_account: ServiceAccount,
    pub cluster_role: ClusterRole,
    pub binding: ClusterRoleBinding,
    pub authentication_reader: RoleBinding,
    pub daemon_set: DaemonSet,
}

/// Runs on control-plane nodes only (their instance role holds the EC2 and ELB permissions it needs), with the
/// host network so it works before the CNI does.
const CCM: &str = "aws-cloud-controller-manager";
const CCM_ACCOUNT: &str = "cloud-controller-manager";

/// Where the projected web-identity token is mounted (kops's path) and its file.
const WEB_IDENTITY_DIR: &str = "/var/run/secrets/amazonaws.com/";
const WEB_IDENTITY_FILE: &str = "token";

/// An add-on pod on its own IAM role (IRSA, `docs/irsa.md`), as kops sets up its own add-ons so they need no
/// webhook: a projected service-account token for the audience `amazonaws.com` (a day, rotated by the
/// kubelet), mounted read-only into `containers` (every container when empty), with `AWS_ROLE_ARN` and
/// `AWS_WEB_IDENTITY_TOKEN_FILE`, which the AWS SDKs' default credential chain reads. The pod's `fsGroup` is
/// kept when set (the token file is group-readable by it), else set to 10001 (kops's).
pub fn on_web_identity(pod: &mut PodSpec, containers: &[&str], role_arn: &str) {
    use k8s_openapi::api::core::v1::{
        PodSecurityContext, ProjectedVolumeSource, ServiceAccountTokenProjection, VolumeProjection,
    };
    const VOLUME: &str = "aws-iam-token";
    pod.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: VOLUME.into(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o440),
            sources: Some(vec![VolumeProjection {
                service_account_token: Some(ServiceAccountTokenProjection {
                    audience: Some(ballast_state::irsa::AWS_AUDIENCE.into()),
                    expiration_seconds: Some(86_400),
                    path: WEB_IDENTITY_FILE.into(),
                }),
                ..Default::default()
            }]),
        }),
        ..Default::default()
    });
    for container in pod
        .containers
        .iter_mut()
        .filter(|c| containers.is_empty() || containers.contains(&c.name.as_str()))
    {
        container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: VOLUME.into(),
                mount_path: WEB_IDENTITY_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            });
        let env = container.env.get_or_insert_with(Vec::new);
        for (name, value) in [
            ("AWS_ROLE_ARN", role_arn.to_string()),
            (
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                format!("{WEB_IDENTITY_DIR}{WEB_IDENTITY_FILE}"),
            ),
        ] {
            env.push(EnvVar {
                name: name.into(),
                value: Some(value),
                ..Default::default()
            });
        }
    }
    pod.security_context
        .get_or_insert_with(PodSecurityContext::default)
        .fs_group
        .get_or_insert(10_001);
}

/// The role an add-on runs on, when the node spec gives it one.
pub fn addon_role<'s>(
    spec: &'s NodeSpec,
    pick: impl Fn(&'s ballast_state::irsa::AddonRoles) -> &'s Option<String>,
) -> Option<&'s str> {
    spec.control_plane
        .as_ref()
        .and_then(|c| c.addon_roles.as_ref())
        .and_then(|roles| pick(roles).as_deref())
}

fn ccm_daemon_set(spec: &NodeSpec, image: &str) -> DaemonSet {
    const NAME: &str = CCM;
    const ACCOUNT: &str = CCM_ACCOUNT;
    let mut args = vec![
        "--v=2".to_string(),
        "--cloud-provider=aws".into(),
        format!("--cluster-name={}", spec.cluster_name),
    ];
    if spec.networking == ballast_state::spec::Networking::Kubenet {
        // kubenet's pods are reached through the VPC's routes to each node's PodCIDR (the controller manager
        // allocates them): the route controller writes them, and turns off each instance's source/destination
        // check so the instance may carry its pods' traffic.
        args.extend([
            "--configure-cloud-routes=true".to_string(),
            "--allocate-node-cidrs=true".into(),
            format!("--cluster-cidr={}", spec.pod_cidr),
        ]);
    } else {
        // Routes are the CNI's business (and amazon-vpc needs none).
        args.push("--configure-cloud-routes=false".into());
    }
    args.push("--use-service-account-credentials=true".into());
    let container = Container {
        name: NAME.into(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(args),
        resources: Some(requests("200m", "64Mi")),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut pod = PodSpec {
        containers: vec![container],
        host_network: Some(true),
        node_selector: Some(BTreeMap::from([(
            CONTROL_PLANE_LABEL.to_string(),
            String::new(),
        )])),
        priority_class_name: Some("system-node-critical".into()),
        service_account_name: Some(ACCOUNT.into()),
        tolerations: Some(vec![
            tolerate(CONTROL_PLANE_LABEL),
            tolerate("node.cloudprovider.kubernetes.io/uninitialized"),
            tolerate("node.kubernetes.io/not-ready"),
        ]),
        ..Default::default()
    };
    if let Some(role) = addon_role(spec, |r| &r.cloud_controller_manager) {
        on_web_identity(&mut pod, &[], role);
    }
    labelled_daemon_set(NAME, pod)
}

pub fn cloud_controller_manager(spec: &NodeSpec, image: &str) -> CloudControllerManager {
    const NAME: &str = CCM;
    const ACCOUNT: &str = CCM_ACCOUNT;
    CloudControllerManager {
        service_account: ServiceAccount {
            metadata: meta(ACCOUNT, Some(KUBE_SYSTEM), NAME),
            ..Default::default()
        },
        cluster_role: ClusterRole {
            metadata: meta("system:cloud-controller-manager", None, NAME),
            rules: Some(vec![
                rule(&[""], &["events"], &["create", "patch", "update"]),
                rule(&[""], &["nodes"], &["*"]),
                rule(&[""], &["nodes/status"], &["patch"]),
                rule(&[""], &["services"], &["list", "patch", "update", "watch"]),
                rule(
                    &[""],
                    &["services/status"],
                    &["list", "patch", "update", "watch"],
                ),
                rule(
                    &[""],
                    &["serviceaccounts"],
                    &["create", "get", "list", "watch"],
                ),
                rule(
                    &[""],
                    &["persistentvolumes"],
                    &["get", "list", "update", "watch"],
                ),
                rule(
                    &[""],
                    &["endpoints"],
                    &["create", "get", "list", "watch", "update"],
                ),
                rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["create", "get", "list", "watch", "update"],
                ),
                rule(&[""], &["serviceaccounts/token"], &["create"]),
            ]),
            ..Default::default()
        },
        binding: ClusterRoleBinding {
            metadata: meta("system:cloud-controller-manager", None, NAME),
            role_ref: cluster_role_ref("system:cloud-controller-manager"),
            subjects: Some(vec![service_account_subject(ACCOUNT)]),
        },
        authentication_reader: RoleBinding {
            metadata: meta(
                "cloud-controller-manager:apiserver-authentication-reader",
                Some(KUBE_SYSTEM),
                NAME,
            ),
            role_ref: RoleRef {
                api_group: RBAC_GROUP.into(),
                kind: "Role".into(),
                name: "extension-apiserver-authentication-reader".into(),
            },
            subjects: Some(vec![service_account_subject(ACCOUNT)]),
        },
        daemon_set: ccm_daemon_set(spec, image),
    }
}
