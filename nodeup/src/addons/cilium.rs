//! Cilium, rendered by Ballast (pure): typed k8s-openapi objects, as kops renders Cilium with its own template
//! and no Helm. Upstream publishes Cilium as a Helm chart; these objects follow the chart of the pinned release
//! (1.17.5) with Ballast's values, which are fixed rather than options:
//!
//! - kube-proxy replacement on (`kube-proxy-replacement: "true"`), so kube-proxy is not installed
//!   (`ballast_state::components::addons::cni_replaces_kube_proxy`). With no kube-proxy there is no service
//!   network until the agent runs, so the agent and the operator reach the API server at the node spec's
//!   `apiServerEndpoint` (the address every kubelet uses), not through the `kubernetes` Service;
//! - cluster-pool IPAM from the node spec's pod CIDR, with the `operator-generic` image (no cloud IPAM);
//! - routing as the spec says (`spec.cilium.routingMode`): VXLAN tunnel (default), or native routing with
//!   `auto-direct-node-routes` (validation allows it only when every node is on one subnet);
//! - Envoy embedded in the agent (`external-envoy-proxy: "false"`), not the separate `cilium-envoy` DaemonSet
//!   (docs/addons.md says why); Hubble off (its relay and UI images are not baked);
//! - the agent unprivileged with the chart's capabilities, except the init containers the chart runs privileged
//!   (mounting the BPF filesystem with bidirectional propagation needs it);
//! - `imagePullPolicy: IfNotPresent` everywhere: the images are baked into the AMI.

use std::collections::BTreeMap;

use ballast_state::node::NodeSpec;
use ballast_state::spec::CiliumRoutingMode;
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, Deployment, DeploymentSpec,
    DeploymentStrategy, RollingUpdateDaemonSet, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapKeySelector, ConfigMapVolumeSource, Container,
    EmptyDirVolumeSource, EnvVar, EnvVarSource, ExecAction, HTTPGetAction, HTTPHeader,
    LifecycleHandler, ObjectFieldSelector, PodSpec, PodTemplateSpec, Probe, SELinuxOptions,
    SecurityContext, ServiceAccount, Toleration, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::objects::{
    app_labels, cluster_role_ref, host_path, meta, mount, one_per_control_plane_node, requests,
    rule, service_account_subject, tolerate, CONTROL_PLANE_LABEL, KUBE_SYSTEM, RBAC_GROUP,
};

const AGENT: &str = "cilium";
const OPERATOR: &str = "cilium-operator";
const CONFIG: &str = "cilium-config";
/// The agent's health endpoint (the chart's `healthPort`), probed on 127.0.0.1.
const HEALTH_PORT: i32 = 9879;
/// The operator's health endpoint, `operator-api-serve-addr`.
const OPERATOR_HEALTH_PORT: i32 = 9234;
/// How many operator replicas at most: one is the leader, the other takes over at once when its node goes.
const OPERATOR_REPLICAS: i32 = 2;
/// Each node's share of the pod CIDR (cluster-pool IPAM): /24, 254 pods, as kops and the chart default.
const POD_CIDR_MASK_SIZE: &str = "24";
/// Where the CNI configuration is written, inside the agent (the host's /etc/cni/net.d).
const CNI_CONF_DIR: &str = "/host/etc/cni/net.d";
const CGROUP_ROOT: &str = "/run/cilium/cgroupv2";
const CNI_BIN_PATH: &str = "/opt/cni/bin";

/// The images Cilium's objects run, as pinned references (`tag@sha256:...`).
#[derive(Debug, Clone)]
pub struct CiliumImages {
    pub agent: String,
    pub operator: String,
}

/// Cilium's objects, in apply order within each kind.
pub struct Cilium {
    pub service_accounts: Vec<ServiceAccount>,
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub role: Role,
    pub role_binding: RoleBinding,
    pub config: ConfigMap,
    pub daemon_set: DaemonSet,
    pub deployment: Deployment,
    pub disruption_budget: PodDisruptionBudget,
}

/// The node spec's API server endpoint as host and port: `host:port`, or a bare host on 443 (how kubelets read
/// it too).
fn api_host_port(endpoint: &str) -> (String, String) {
    match endpoint.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (host.to_string(), port.to_string())
        }
        _ => (endpoint.to_string(), "443".to_string()),
    }
}

/// How many operator replicas: two on separate control-plane nodes, but never more than there are control-plane
/// nodes (the replicas repel each other, so a third would wait forever and `validate cluster` would report it).
fn operator_replicas(spec: &NodeSpec) -> i32 {
    let control_plane_nodes = spec
        .control_plane
        .as_ref()
        .map(|c| c.etcd.members.len())
        .unwrap_or(1)
        .max(1);
    i32::try_from(control_plane_nodes)
        .unwrap_or(OPERATOR_REPLICAS)
        .min(OPERATOR_REPLICAS)
}

pub fn cilium(spec: &NodeSpec, images: &CiliumImages) -> Cilium {
    let agent_meta = |name: &str| meta(name, Some(KUBE_SYSTEM), AGENT);
    Cilium {
        service_accounts: vec![
            ServiceAccount {
                metadata: agent_meta(AGENT),
                ..Default::default()
            },
            ServiceAccount {
                metadata: meta(OPERATOR, Some(KUBE_SYSTEM), OPERATOR),
                ..Default::default()
            },
        ],
        cluster_roles: vec![agent_cluster_role(), operator_cluster_role()],
        cluster_role_bindings: vec![
            ClusterRoleBinding {
                metadata: meta(AGENT, None, AGENT),
                role_ref: cluster_role_ref(AGENT),
                subjects: Some(vec![service_account_subject(AGENT)]),
            },
            ClusterRoleBinding {
                metadata: meta(OPERATOR, None, OPERATOR),
                role_ref: cluster_role_ref(OPERATOR),
                subjects: Some(vec![service_account_subject(OPERATOR)]),
            },
        ],
        // The agent reads its configuration (and watches it for changes) in its own namespace only.
        role: Role {
            metadata: agent_meta("cilium-config-agent"),
            rules: Some(vec![rule(
                &[""],
                &["configmaps"],
                &["get", "list", "watch"],
            )]),
        },
        role_binding: RoleBinding {
            metadata: agent_meta("cilium-config-agent"),
            role_ref: RoleRef {
                api_group: RBAC_GROUP.into(),
                kind: "Role".into(),
                name: "cilium-config-agent".into(),
            },
            subjects: Some(vec![service_account_subject(AGENT)]),
        },
        config: config_map(spec),
        daemon_set: agent_daemon_set(spec, &images.agent),
        deployment: operator_deployment(spec, &images.operator),
        disruption_budget: PodDisruptionBudget {
            metadata: meta(OPERATOR, Some(KUBE_SYSTEM), OPERATOR),
            spec: Some(PodDisruptionBudgetSpec {
                // A drain may take one replica at a time: the other keeps the leader lease.
                max_unavailable: Some(IntOrString::Int(1)),
                selector: Some(operator_selector()),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

/// cilium-config: the chart's defaults for 1.17.5 where Ballast keeps them, Ballast's values where it sets them.
fn config_map(spec: &NodeSpec) -> ConfigMap {
    let native = spec.cilium_routing_mode == Some(CiliumRoutingMode::Native);
    let mut data: BTreeMap<&str, String> = [
        ("identity-allocation-mode", "crd"),
        ("identity-heartbeat-timeout", "30m0s"),
        ("identity-gc-interval", "15m0s"),
        ("cilium-endpoint-gc-interval", "5m0s"),
        ("nodes-gc-interval", "5m0s"),
        ("debug", "false"),
        ("agent-health-port", "9879"),
        ("enable-ipv4", "true"),
        ("enable-ipv6", "false"),
        ("enable-ipv4-masquerade", "true"),
        ("enable-ipv6-masquerade", "false"),
        ("enable-bpf-masquerade", "false"),
        ("install-iptables-rules", "true"),
        ("enable-l7-proxy", "true"),
        // Envoy runs inside the agent (docs/addons.md, "Cilium"): no cilium-envoy DaemonSet, no image of its own.
        ("external-envoy-proxy", "false"),
        ("enable-k8s-networkpolicy", "true"),
        ("enable-policy", "default"),
        ("kube-proxy-replacement", "true"),
        ("kube-proxy-replacement-healthz-bind-address", ""),
        ("enable-health-checking", "true"),
        ("enable-endpoint-health-checking", "true"),
        ("enable-well-known-identities", "false"),
        ("ipam", "cluster-pool"),
        ("cluster-pool-ipv4-mask-size", POD_CIDR_MASK_SIZE),
        // Cilium's own cluster name is for Cluster Mesh only; Ballast's names (dots, up to 50 characters) are
        // not valid there, so it keeps the chart's `default`.
        ("cluster-name", "default"),
        ("cluster-id", "0"),
        ("monitor-aggregation", "medium"),
        ("monitor-aggregation-interval", "5s"),
        ("monitor-aggregation-flags", "all"),
        ("bpf-map-dynamic-size-ratio", "0.0025"),
        ("bpf-policy-map-max", "16384"),
        ("bpf-lb-map-max", "65536"),
        ("bpf-lb-external-clusterip", "false"),
        ("preallocate-bpf-maps", "false"),
        ("cgroup-root", CGROUP_ROOT),
        ("operator-api-serve-addr", "127.0.0.1:9234"),
        ("enable-metrics", "true"),
        ("enable-hubble", "false"),
        (
            "write-cni-conf-when-ready",
            "/host/etc/cni/net.d/05-cilium.conflist",
        ),
        ("cni-exclusive", "true"),
        ("cni-log-file", "/var/run/cilium/cilium-cni.log"),
        ("remove-cilium-node-taints", "true"),
        ("set-cilium-node-taints", "true"),
        ("set-cilium-is-up-condition", "true"),
        ("unmanaged-pod-watcher-interval", "15"),
        ("synchronize-k8s-nodes", "true"),
        ("procfs", "/host/proc"),
        ("clean-cilium-state", "false"),
        ("clean-cilium-bpf-state", "false"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect();
    data.insert("cluster-pool-ipv4-cidr", spec.pod_cidr.clone());
    if native {
        data.insert("routing-mode", "native".into());
        // Pod addresses are routed as they are (no SNAT) within the pod CIDR, the range each node's
        // auto-direct-node-routes cover; traffic elsewhere (the VPC, the internet) is masqueraded to the node.
        data.insert("ipv4-native-routing-cidr", spec.pod_cidr.clone());
        data.insert("auto-direct-node-routes", "true".into());
        data.insert("direct-routing-skip-unreachable", "false".into());
    } else {
        data.insert("routing-mode", "tunnel".into());
        // UDP 8472 between nodes (ctl/src/cloud/cni.rs: within the security groups' TCP and UDP rules).
        data.insert("tunnel-protocol", "vxlan".into());
        data.insert("auto-direct-node-routes", "false".into());
    }
    ConfigMap {
        metadata: meta(CONFIG, Some(KUBE_SYSTEM), AGENT),
        data: Some(data.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
        ..Default::default()
    }
}

fn agent_cluster_role() -> ClusterRole {
    let cilium_resources = [
        "ciliumloadbalancerippools",
        "ciliumbgppeeringpolicies",
        "ciliumbgpnodeconfigs",
        "ciliumbgpadvertisements",
        "ciliumbgppeerconfigs",
        "ciliumclusterwideenvoyconfigs",
        "ciliumclusterwidenetworkpolicies",
        "ciliumegressgatewaypolicies",
        "ciliumendpoints",
        "ciliumendpointslices",
        "ciliumenvoyconfigs",
        "ciliumidentities",
        "ciliumlocalredirectpolicies",
        "ciliumnetworkpolicies",
        "ciliumnodes",
        "ciliumnodeconfigs",
        "ciliumcidrgroups",
        "ciliuml2announcementpolicies",
        "ciliumpodippools",
    ];
    ClusterRole {
        metadata: meta(AGENT, None, AGENT),
        // The chart's agent role for 1.17.5 with Hubble, L2 announcements and node annotations off, and secrets
        // read only from Cilium's secrets namespace (none here: no Ingress, Gateway API or TLS interception).
        rules: Some(vec![
            rule(
                &["networking.k8s.io"],
                &["networkpolicies"],
                &["get", "list", "watch"],
            ),
            rule(
                &["discovery.k8s.io"],
                &["endpointslices"],
                &["get", "list", "watch"],
            ),
            rule(
                &[""],
                &["namespaces", "services", "pods", "endpoints", "nodes"],
                &["get", "list", "watch"],
            ),
            rule(
                &["apiextensions.k8s.io"],
                &["customresourcedefinitions"],
                &["list", "watch", "get"],
            ),
            rule(&["cilium.io"], &cilium_resources, &["list", "watch"]),
            rule(
                &["cilium.io"],
                &["ciliumidentities", "ciliumendpoints", "ciliumnodes"],
                &["create"],
            ),
            rule(&["cilium.io"], &["ciliumidentities"], &["update"]),
            rule(&["cilium.io"], &["ciliumendpoints"], &["delete", "get"]),
            rule(
                &["cilium.io"],
                &["ciliumnodes", "ciliumnodes/status"],
                &["get", "update"],
            ),
            rule(
                &["cilium.io"],
                &[
                    "ciliumendpoints/status",
                    "ciliumendpoints",
                    "ciliuml2announcementpolicies/status",
                    "ciliumbgpnodeconfigs/status",
                ],
                &["patch"],
            ),
        ]),
        ..Default::default()
    }
}

fn operator_cluster_role() -> ClusterRole {
    let crd_names = [
        "ciliumloadbalancerippools.cilium.io",
        "ciliumbgppeeringpolicies.cilium.io",
        "ciliumbgpclusterconfigs.cilium.io",
        "ciliumbgppeerconfigs.cilium.io",
        "ciliumbgpadvertisements.cilium.io",
        "ciliumbgpnodeconfigs.cilium.io",
        "ciliumbgpnodeconfigoverrides.cilium.io",
        "ciliumclusterwideenvoyconfigs.cilium.io",
        "ciliumclusterwidenetworkpolicies.cilium.io",
        "ciliumegressgatewaypolicies.cilium.io",
        "ciliumendpoints.cilium.io",
        "ciliumendpointslices.cilium.io",
        "ciliumenvoyconfigs.cilium.io",
        "ciliumexternalworkloads.cilium.io",
        "ciliumidentities.cilium.io",
        "ciliumlocalredirectpolicies.cilium.io",
        "ciliumnetworkpolicies.cilium.io",
        "ciliumnodes.cilium.io",
        "ciliumnodeconfigs.cilium.io",
        "ciliumcidrgroups.cilium.io",
        "ciliuml2announcementpolicies.cilium.io",
        "ciliumpodippools.cilium.io",
    ];
    let mut update_crds = rule(
        &["apiextensions.k8s.io"],
        &["customresourcedefinitions"],
        &["update"],
    );
    update_crds.resource_names = Some(crd_names.iter().map(|s| s.to_string()).collect());
    let mut patch_config = rule(&[""], &["configmaps"], &["patch"]);
    patch_config.resource_names = Some(vec![CONFIG.to_string()]);
    ClusterRole {
        metadata: meta(OPERATOR, None, OPERATOR),
        // The chart's operator role for 1.17.5 with its defaults (node taints removed and network status set,
        // the unmanaged-pod watcher restarting pods, CiliumNode and endpoint GC) and no Ingress, Gateway API,
        // Cluster Mesh or BGP.
        rules: Some(vec![
            // `delete`: the unmanaged-pod watcher restarts pods started before Cilium managed their node.
            rule(&[""], &["pods"], &["get", "list", "watch", "delete"]),
            patch_config,
            rule(&[""], &["nodes"], &["list", "watch"]),
            rule(&[""], &["nodes", "nodes/status"], &["patch"]),
            rule(
                &["discovery.k8s.io"],
                &["endpointslices"],
                &["get", "list", "watch"],
            ),
            rule(&[""], &["services/status"], &["update", "patch"]),
            rule(&[""], &["namespaces"], &["get", "list", "watch"]),
            rule(&[""], &["services", "endpoints"], &["get", "list", "watch"]),
            rule(
                &["cilium.io"],
                &["ciliumnetworkpolicies", "ciliumclusterwidenetworkpolicies"],
                &[
                    "create",
                    "update",
                    "deletecollection",
                    "patch",
                    "get",
                    "list",
                    "watch",
                ],
            ),
            rule(
                &["cilium.io"],
                &[
                    "ciliumnetworkpolicies/status",
                    "ciliumclusterwidenetworkpolicies/status",
                ],
                &["patch", "update"],
            ),
            rule(
                &["cilium.io"],
                &["ciliumendpoints", "ciliumidentities"],
                &["delete", "list", "watch"],
            ),
            rule(&["cilium.io"], &["ciliumidentities"], &["update"]),
            rule(
                &["cilium.io"],
                &["ciliumnodes"],
                &["create", "update", "get", "list", "watch", "delete"],
            ),
            rule(&["cilium.io"], &["ciliumnodes/status"], &["update"]),
            rule(
                &["cilium.io"],
                &[
                    "ciliumendpointslices",
                    "ciliumenvoyconfigs",
                    "ciliumbgppeerconfigs",
                    "ciliumbgpadvertisements",
                    "ciliumbgpnodeconfigs",
                ],
                &[
                    "create", "update", "get", "list", "watch", "delete", "patch",
                ],
            ),
            rule(
                &["cilium.io"],
                &[
                    "ciliumbgpclusterconfigs/status",
                    "ciliumbgppeerconfigs/status",
                ],
                &["update"],
            ),
            // It installs Cilium's CRDs itself, and may update only those.
            rule(
                &["apiextensions.k8s.io"],
                &["customresourcedefinitions"],
                &["create", "get", "list", "watch"],
            ),
            update_crds,
            rule(
                &["cilium.io"],
                &[
                    "ciliumloadbalancerippools",
                    "ciliumpodippools",
                    "ciliumbgppeeringpolicies",
                    "ciliumbgpclusterconfigs",
                    "ciliumbgpnodeconfigoverrides",
                    "ciliumbgppeerconfigs",
                ],
                &["get", "list", "watch"],
            ),
            rule(&["cilium.io"], &["ciliumpodippools"], &["create"]),
            rule(
                &["cilium.io"],
                &["ciliumloadbalancerippools/status"],
                &["patch"],
            ),
            rule(
                &["coordination.k8s.io"],
                &["leases"],
                &["create", "get", "update"],
            ),
        ]),
        ..Default::default()
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: path.to_string(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn value_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        ..Default::default()
    }
}

fn config_env(name: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name: CONFIG.into(),
                key: key.to_string(),
                optional: Some(true),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The API server as the agent and operator must reach it: with kube-proxy replaced, the `kubernetes` Service
/// works only once the agent runs, so both are told the endpoint kubelets use.
fn api_env(spec: &NodeSpec) -> [EnvVar; 2] {
    let (host, port) = api_host_port(&spec.api_server_endpoint);
    [
        value_env("KUBERNETES_SERVICE_HOST", &host),
        value_env("KUBERNETES_SERVICE_PORT", &port),
    ]
}

fn propagated(name: &str, path: &str, propagation: &str) -> VolumeMount {
    VolumeMount {
        mount_propagation: Some(propagation.to_string()),
        ..mount(name, path, false)
    }
}

fn spc_t() -> SELinuxOptions {
    SELinuxOptions {
        level: Some("s0".into()),
        type_: Some("spc_t".into()),
        ..Default::default()
    }
}

/// Unprivileged, with exactly `add` (the chart's lists for each container) and every other capability dropped.
fn capabilities(add: &[&str]) -> SecurityContext {
    SecurityContext {
        se_linux_options: Some(spc_t()),
        capabilities: Some(Capabilities {
            add: Some(add.iter().map(|s| s.to_string()).collect()),
            drop: Some(vec!["ALL".into()]),
        }),
        ..Default::default()
    }
}

fn privileged() -> SecurityContext {
    SecurityContext {
        privileged: Some(true),
        ..Default::default()
    }
}

fn health_probe(port: i32, failure_threshold: i32, period_seconds: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            host: Some("127.0.0.1".into()),
            path: Some("/healthz".into()),
            port: IntOrString::Int(port),
            scheme: Some("HTTP".into()),
            http_headers: Some(vec![HTTPHeader {
                name: "brief".into(),
                value: "true".into(),
            }]),
        }),
        failure_threshold: Some(failure_threshold),
        period_seconds: Some(period_seconds),
        success_threshold: Some(1),
        ..Default::default()
    }
}

/// A container of the agent's pod running the agent image.
fn agent_image_container(name: &str, image: &str) -> Container {
    Container {
        name: name.to_string(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

fn agent_container(spec: &NodeSpec, image: &str) -> Container {
    let mut env = vec![
        field_env("K8S_NODE_NAME", "spec.nodeName"),
        field_env("CILIUM_K8S_NAMESPACE", "metadata.namespace"),
        value_env("CILIUM_CLUSTERMESH_CONFIG", "/var/lib/cilium/clustermesh/"),
    ];
    env.extend(api_env(spec));
    Container {
        command: Some(vec!["cilium-agent".into()]),
        args: Some(vec!["--config-dir=/tmp/cilium/config-map".into()]),
        startup_probe: Some(Probe {
            initial_delay_seconds: Some(5),
            ..health_probe(HEALTH_PORT, 105, 2)
        }),
        liveness_probe: Some(Probe {
            timeout_seconds: Some(5),
            ..health_probe(HEALTH_PORT, 10, 30)
        }),
        readiness_probe: Some(Probe {
            timeout_seconds: Some(5),
            ..health_probe(HEALTH_PORT, 3, 30)
        }),
        env: Some(env),
        lifecycle: Some(k8s_openapi::api::core::v1::Lifecycle {
            // Removes the CNI configuration when the agent stops, so the kubelet starts no pod without it.
            pre_stop: Some(LifecycleHandler {
                exec: Some(ExecAction {
                    command: Some(vec!["/cni-uninstall.sh".into()]),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        security_context: Some(capabilities(&[
            "CHOWN",
            "KILL",
            "NET_ADMIN",
            "NET_RAW",
            "IPC_LOCK",
            "SYS_MODULE",
            "SYS_ADMIN",
            "SYS_RESOURCE",
            "DAC_OVERRIDE",
            "FOWNER",
            "SETGID",
            "SETUID",
        ])),
        volume_mounts: Some(vec![
            // Unprivileged, it writes the host's sysctls through these.
            mount("host-proc-sys-net", "/host/proc/sys/net", false),
            mount("host-proc-sys-kernel", "/host/proc/sys/kernel", false),
            // The BPF filesystem, mounted on the host by `mount-bpf-fs`: an unprivileged container cannot
            // propagate mounts back to the host, so it only sees the host's.
            propagated("bpf-maps", "/sys/fs/bpf", "HostToContainer"),
            mount("cilium-run", "/var/run/cilium", false),
            propagated("cilium-netns", "/var/run/cilium/netns", "HostToContainer"),
            mount("etc-cni-netd", CNI_CONF_DIR, false),
            mount("clustermesh-secrets", "/var/lib/cilium/clustermesh", true),
            mount("lib-modules", "/lib/modules", true),
            mount("xtables-lock", "/run/xtables.lock", false),
            mount("tmp", "/tmp", false),
        ]),
        ..agent_image_container("cilium-agent", image)
    }
}

/// The chart's init containers, in its order: build the configuration, mount cgroup2 and fix sysctls on the host
/// (through its namespaces), mount the BPF filesystem, clean state if asked, install the CNI plugin binary.
fn agent_init_containers(spec: &NodeSpec, image: &str) -> Vec<Container> {
    let mut config_env_vars = vec![
        field_env("K8S_NODE_NAME", "spec.nodeName"),
        field_env("CILIUM_K8S_NAMESPACE", "metadata.namespace"),
    ];
    config_env_vars.extend(api_env(spec));
    let host_tools = |name: &str, script: &str, env: Vec<EnvVar>| Container {
        command: Some(vec!["sh".into(), "-ec".into(), script.to_string()]),
        env: Some(env),
        security_context: Some(capabilities(&["SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"])),
        volume_mounts: Some(vec![
            mount("hostproc", "/hostproc", false),
            mount("cni-path", "/hostbin", false),
        ]),
        ..agent_image_container(name, image)
    };
    let mut clean_env = vec![
        config_env("CILIUM_ALL_STATE", "clean-cilium-state"),
        config_env("CILIUM_BPF_STATE", "clean-cilium-bpf-state"),
        config_env("WRITE_CNI_CONF_WHEN_READY", "write-cni-conf-when-ready"),
    ];
    clean_env.extend(api_env(spec));
    vec![
        Container {
            command: Some(vec![
                "cilium-dbg".into(),
                "build-config".into(),
                "--source=config-map:cilium-config".into(),
            ]),
            env: Some(config_env_vars),
            volume_mounts: Some(vec![mount("tmp", "/tmp", false)]),
            ..agent_image_container("config", image)
        },
        host_tools(
            "mount-cgroup",
            "cp /usr/bin/cilium-mount /hostbin/cilium-mount;\n\
             nsenter --cgroup=/hostproc/1/ns/cgroup --mount=/hostproc/1/ns/mnt \"${BIN_PATH}/cilium-mount\" $CGROUP_ROOT;\n\
             rm /hostbin/cilium-mount\n",
            vec![
                value_env("CGROUP_ROOT", CGROUP_ROOT),
                value_env("BIN_PATH", CNI_BIN_PATH),
            ],
        ),
        host_tools(
            "apply-sysctl-overwrites",
            "cp /usr/bin/cilium-sysctlfix /hostbin/cilium-sysctlfix;\n\
             nsenter --mount=/hostproc/1/ns/mnt \"${BIN_PATH}/cilium-sysctlfix\";\n\
             rm /hostbin/cilium-sysctlfix\n",
            vec![value_env("BIN_PATH", CNI_BIN_PATH)],
        ),
        // Privileged: only a privileged container may mount with bidirectional propagation, which is what
        // puts the BPF filesystem on the host (and so keeps the maps across agent restarts).
        Container {
            command: Some(vec![
                "/bin/bash".into(),
                "-c".into(),
                "--".into(),
            ]),
            args: Some(vec![
                "mount | grep \"/sys/fs/bpf type bpf\" || mount -t bpf bpf /sys/fs/bpf".into(),
            ]),
            security_context: Some(privileged()),
            volume_mounts: Some(vec![propagated(
                "bpf-maps",
                "/sys/fs/bpf",
                "Bidirectional",
            )]),
            ..agent_image_container("mount-bpf-fs", image)
        },
        Container {
            command: Some(vec!["/init-container.sh".into()]),
            env: Some(clean_env),
            security_context: Some(capabilities(&[
                "NET_ADMIN",
                "SYS_MODULE",
                "SYS_ADMIN",
                "SYS_RESOURCE",
            ])),
            volume_mounts: Some(vec![
                mount("bpf-maps", "/sys/fs/bpf", false),
                propagated("cilium-cgroup", CGROUP_ROOT, "HostToContainer"),
                mount("cilium-run", "/var/run/cilium", false),
            ]),
            ..agent_image_container("clean-cilium-state", image)
        },
        // Installs the CNI plugin binary in an init container, so the agent has no writable mount of the host's
        // /opt/cni/bin.
        Container {
            command: Some(vec!["/install-plugin.sh".into()]),
            resources: Some(requests("100m", "10Mi")),
            security_context: Some(SecurityContext {
                se_linux_options: Some(spc_t()),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            volume_mounts: Some(vec![mount("cni-path", "/host/opt/cni/bin", false)]),
            ..agent_image_container("install-cni-binaries", image)
        },
    ]
}

fn agent_volumes() -> Vec<Volume> {
    vec![
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        host_path("cilium-run", "/var/run/cilium", "DirectoryOrCreate"),
        host_path("cilium-netns", "/var/run/cilium/netns", "DirectoryOrCreate"),
        host_path("bpf-maps", "/sys/fs/bpf", "DirectoryOrCreate"),
        host_path("hostproc", "/proc", "Directory"),
        host_path("cilium-cgroup", CGROUP_ROOT, "DirectoryOrCreate"),
        host_path("cni-path", CNI_BIN_PATH, "DirectoryOrCreate"),
        host_path("etc-cni-netd", "/etc/cni/net.d", "DirectoryOrCreate"),
        host_path("lib-modules", "/lib/modules", "Directory"),
        host_path("xtables-lock", "/run/xtables.lock", "FileOrCreate"),
        host_path("host-proc-sys-net", "/proc/sys/net", "Directory"),
        host_path("host-proc-sys-kernel", "/proc/sys/kernel", "Directory"),
        // Cluster Mesh's secrets, optional and absent: the agent reads the directory either way.
        Volume {
            name: "clustermesh-secrets".into(),
            projected: Some(k8s_openapi::api::core::v1::ProjectedVolumeSource {
                default_mode: Some(0o400),
                sources: Some(vec![k8s_openapi::api::core::v1::VolumeProjection {
                    secret: Some(k8s_openapi::api::core::v1::SecretProjection {
                        name: "cilium-clustermesh".into(),
                        optional: Some(true),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        },
    ]
}

fn agent_daemon_set(spec: &NodeSpec, image: &str) -> DaemonSet {
    DaemonSet {
        metadata: meta(AGENT, Some(KUBE_SYSTEM), AGENT),
        spec: Some(DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(app_labels(AGENT)),
                ..Default::default()
            },
            update_strategy: Some(DaemonSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDaemonSet {
                    max_unavailable: Some(IntOrString::Int(2)),
                    ..Default::default()
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(app_labels(AGENT)),
                    annotations: annotations(&spec.cilium_agent_pod_annotations),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![agent_container(spec, image)],
                    init_containers: Some(agent_init_containers(spec, image)),
                    host_network: Some(true),
                    priority_class_name: Some("system-node-critical".into()),
                    service_account_name: Some(AGENT.into()),
                    automount_service_account_token: Some(true),
                    // The agent only tidies up on stop; a long grace period would only delay a node's drain.
                    termination_grace_period_seconds: Some(1),
                    restart_policy: Some("Always".into()),
                    node_selector: Some(BTreeMap::from([(
                        "kubernetes.io/os".to_string(),
                        "linux".to_string(),
                    )])),
                    // Every node, whatever its taints: without the agent no pod of the node has a network.
                    tolerations: Some(vec![Toleration {
                        operator: Some("Exists".into()),
                        ..Default::default()
                    }]),
                    volumes: Some(agent_volumes()),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A pod template's annotations (`spec.cilium.*PodAnnotations`): none rather than an empty map, so a cluster
/// without them renders the objects it rendered before the field existed. A change of them changes the pod
/// template, and the DaemonSet or Deployment rolls its pods.
fn annotations(wanted: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!wanted.is_empty()).then(|| wanted.clone())
}

fn operator_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("io.cilium/app".to_string(), "operator".to_string()),
        ("name".to_string(), OPERATOR.to_string()),
    ])
}

fn operator_selector() -> LabelSelector {
    LabelSelector {
        match_labels: Some(operator_labels()),
        ..Default::default()
    }
}

/// The operator on control-plane nodes, one replica per node: it needs no cloud permissions (cluster-pool IPAM),
/// but it must run before any worker has a network (it hands out the nodes' pod ranges), and control-plane nodes
/// are there first; two replicas on two nodes keep a leader when a control-plane node is replaced.
fn operator_deployment(spec: &NodeSpec, image: &str) -> Deployment {
    let mut env = vec![
        field_env("K8S_NODE_NAME", "spec.nodeName"),
        field_env("CILIUM_K8S_NAMESPACE", "metadata.namespace"),
        config_env("CILIUM_DEBUG", "debug"),
    ];
    env.extend(api_env(spec));
    let container = Container {
        name: OPERATOR.into(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["cilium-operator-generic".into()]),
        args: Some(vec![
            "--config-dir=/tmp/cilium/config-map".into(),
            "--debug=$(CILIUM_DEBUG)".into(),
        ]),
        env: Some(env),
        liveness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                host: Some("127.0.0.1".into()),
                path: Some("/healthz".into()),
                port: IntOrString::Int(OPERATOR_HEALTH_PORT),
                scheme: Some("HTTP".into()),
                ..Default::default()
            }),
            initial_delay_seconds: Some(60),
            period_seconds: Some(10),
            timeout_seconds: Some(3),
            ..Default::default()
        }),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                host: Some("127.0.0.1".into()),
                path: Some("/healthz".into()),
                port: IntOrString::Int(OPERATOR_HEALTH_PORT),
                scheme: Some("HTTP".into()),
                ..Default::default()
            }),
            initial_delay_seconds: Some(0),
            period_seconds: Some(5),
            timeout_seconds: Some(3),
            failure_threshold: Some(5),
            ..Default::default()
        }),
        resources: Some(requests("25m", "128Mi")),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            ..Default::default()
        }),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        volume_mounts: Some(vec![mount(
            "cilium-config-path",
            "/tmp/cilium/config-map",
            true,
        )]),
        ..Default::default()
    };
    Deployment {
        metadata: meta(OPERATOR, Some(KUBE_SYSTEM), OPERATOR),
        spec: Some(DeploymentSpec {
            replicas: Some(operator_replicas(spec)),
            selector: operator_selector(),
            // Every control-plane node already runs a replica, so a surged one would have nowhere to go: replace
            // one at a time instead.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(0)),
                    max_unavailable: Some(IntOrString::Int(1)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(operator_labels()),
                    annotations: annotations(&spec.cilium_operator_pod_annotations),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    host_network: Some(true),
                    priority_class_name: Some("system-cluster-critical".into()),
                    service_account_name: Some(OPERATOR.into()),
                    automount_service_account_token: Some(true),
                    restart_policy: Some("Always".into()),
                    affinity: Some(one_per_control_plane_node(operator_selector())),
                    // The control plane's own taint, and those a node has before the CNI and the cloud
                    // controller have run: the operator is what lets the CNI start.
                    tolerations: Some(vec![
                        tolerate(CONTROL_PLANE_LABEL),
                        tolerate("node.kubernetes.io/not-ready"),
                        tolerate("node.cloudprovider.kubernetes.io/uninitialized"),
                    ]),
                    volumes: Some(vec![Volume {
                        name: "cilium-config-path".into(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: CONFIG.into(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_endpoint_splits_into_host_and_port() {
        assert_eq!(
            api_host_port("api-demo.elb.amazonaws.com"),
            ("api-demo.elb.amazonaws.com".into(), "443".into())
        );
        assert_eq!(
            api_host_port("10.0.0.5:6443"),
            ("10.0.0.5".into(), "6443".into())
        );
    }
}
