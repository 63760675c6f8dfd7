//! The AWS EBS CSI driver (pure), as kops installs it on AWS: without it no PersistentVolume can be made on
//! Kubernetes 1.27 and later (the in-tree EBS code is gone). Typed k8s-openapi objects following kops's template
//! (`aws-ebs-csi-driver.addons.k8s.io/k8s-1.17.yaml.template`) and upstream's chart:
//!
//! - the controller (a Deployment on control-plane nodes, whose instance role holds its EC2 permissions, held to
//!   the cluster's volumes: ctl/src/cloud/ebs_csi.rs) with csi-provisioner, csi-attacher, csi-resizer and
//!   liveness-probe. No csi-snapshotter: kops runs it only with the snapshot controller, which it does not
//!   install by default, and neither does Ballast;
//! - the node plugin (a DaemonSet on every node, privileged: it formats and mounts devices) with
//!   node-driver-registrar and liveness-probe;
//! - the CSIDriver, ServiceAccounts and RBAC as upstream, a PodDisruptionBudget for the controller, and the
//!   default StorageClass `gp3` (encrypted, bound when a pod is scheduled, expandable).
//!
//! The controller runs with `--k8s-tag-cluster-id=<cluster>`: every volume it creates carries
//! `kubernetes.io/cluster/<cluster>=owned` (and the driver's own `ebs.csi.aws.com/cluster=true`), the tags its
//! IAM permissions require.

use std::collections::BTreeMap;

use ballast_state::node::NodeSpec;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SecurityContext,
    ServiceAccount, Toleration, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::objects::{
    cluster_role_ref, host_path, meta, mount, one_per_control_plane_node, rule,
    service_account_subject, tolerate, CONTROL_PLANE_LABEL, KUBE_SYSTEM,
};

const APP: &str = "aws-ebs-csi-driver";
const DRIVER: &str = "ebs.csi.aws.com";
const CONTROLLER: &str = "ebs-csi-controller";
const CONTROLLER_ACCOUNT: &str = "ebs-csi-controller-sa";
const NODE: &str = "ebs-csi-node";
const NODE_ACCOUNT: &str = "ebs-csi-node-sa";
/// The default StorageClass's name. kops calls its own `kops-csi-1-21`; Ballast names it for what it gives.
pub const STORAGE_CLASS: &str = "gp3";
/// At most two controller replicas (one leads each sidecar's work, the other takes over).
const CONTROLLER_REPLICAS: i32 = 2;
const SOCKET_DIR: &str = "/var/lib/csi/sockets/pluginproxy/";
const CONTROLLER_SOCKET: &str = "/var/lib/csi/sockets/pluginproxy/csi.sock";

/// The images the driver's objects run, as pinned references (`tag@sha256:...`), keyed as in
/// `images/manifest.yaml` (`addons.aws-ebs-csi-driver.images`).
#[derive(Debug, Clone)]
pub struct EbsCsiImages {
    pub ebs_plugin: String,
    pub csi_provisioner: String,
    pub csi_attacher: String,
    pub csi_resizer: String,
    pub liveness_probe: String,
    pub node_driver_registrar: String,
}

/// The driver's objects.
pub struct EbsCsi {
    pub csi_driver: CSIDriver,
    pub storage_class: StorageClass,
    pub service_accounts: Vec<ServiceAccount>,
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub disruption_budget: PodDisruptionBudget,
    pub controller: Deployment,
    pub node: DaemonSet,
}

fn labels(component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app".to_string(), component.to_string()),
        ("app.kubernetes.io/name".to_string(), APP.to_string()),
    ])
}

fn selector(component: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(component)),
        ..Default::default()
    }
}

fn named(name: &str, namespace: Option<&str>) -> ObjectMeta {
    meta(name, namespace, APP)
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        ..Default::default()
    }
}

fn node_name_env() -> EnvVar {
    EnvVar {
        name: "CSI_NODE_NAME".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: "spec.nodeName".into(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Sidecars and the controller's plugin: no privilege, nothing written but their sockets.
fn locked_down() -> SecurityContext {
    SecurityContext {
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        ..Default::default()
    }
}

fn healthz_probe() -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz".into()),
            port: IntOrString::String("healthz".into()),
            ..Default::default()
        }),
        initial_delay_seconds: Some(10),
        timeout_seconds: Some(3),
        period_seconds: Some(10),
        failure_threshold: Some(5),
        ..Default::default()
    }
}

fn healthz_port() -> ContainerPort {
    ContainerPort {
        name: Some("healthz".into()),
        container_port: 9808,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

fn sidecar(name: &str, image: &str, args: &[&str], socket_mount: VolumeMount) -> Container {
    Container {
        name: name.to_string(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(args.iter().map(|s| s.to_string()).collect()),
        env: Some(vec![env("ADDRESS", CONTROLLER_SOCKET)]),
        security_context: Some(locked_down()),
        volume_mounts: Some(vec![socket_mount]),
        ..Default::default()
    }
}

fn controller_replicas(spec: &NodeSpec) -> i32 {
    let control_plane_nodes = spec
        .control_plane
        .as_ref()
        .map(|c| c.etcd.members.len())
        .unwrap_or(1)
        .max(1);
    i32::try_from(control_plane_nodes)
        .unwrap_or(CONTROLLER_REPLICAS)
        .min(CONTROLLER_REPLICAS)
}

fn controller(spec: &NodeSpec, images: &EbsCsiImages) -> Deployment {
    let socket = || mount("socket-dir", SOCKET_DIR, false);
    let plugin = Container {
        name: "ebs-plugin".into(),
        image: Some(images.ebs_plugin.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(vec![
            "controller".into(),
            "--endpoint=$(CSI_ENDPOINT)".into(),
            "--logtostderr".into(),
            // Tags every volume it creates `kubernetes.io/cluster/<cluster>=owned`: the tag its IAM permissions
            // require for creating, attaching, changing and deleting a volume, and by which the cluster's
            // volumes are found.
            format!("--k8s-tag-cluster-id={}", spec.cluster_name),
            "--http-endpoint=0.0.0.0:3301".into(),
            "--v=2".into(),
        ]),
        env: Some(vec![
            env("CSI_ENDPOINT", &format!("unix://{CONTROLLER_SOCKET}")),
            node_name_env(),
        ]),
        ports: Some(vec![
            healthz_port(),
            ContainerPort {
                name: Some("metrics".into()),
                container_port: 3301,
                protocol: Some("TCP".into()),
                ..Default::default()
            },
        ]),
        liveness_probe: Some(healthz_probe()),
        readiness_probe: Some(healthz_probe()),
        security_context: Some(locked_down()),
        volume_mounts: Some(vec![socket()]),
        ..Default::default()
    };
    let containers = vec![
        plugin,
        sidecar(
            "csi-provisioner",
            &images.csi_provisioner,
            &[
                "--csi-address=$(ADDRESS)",
                "--v=2",
                "--feature-gates=Topology=true",
                "--extra-create-metadata",
                "--leader-election=true",
                "--default-fstype=ext4",
            ],
            socket(),
        ),
        sidecar(
            "csi-attacher",
            &images.csi_attacher,
            &[
                "--csi-address=$(ADDRESS)",
                "--v=2",
                "--leader-election=true",
            ],
            socket(),
        ),
        sidecar(
            "csi-resizer",
            &images.csi_resizer,
            &[
                "--csi-address=$(ADDRESS)",
                "--v=2",
                "--leader-election=true",
            ],
            socket(),
        ),
        Container {
            name: "liveness-probe".into(),
            image: Some(images.liveness_probe.clone()),
            image_pull_policy: Some("IfNotPresent".into()),
            args: Some(vec!["--csi-address=/csi/csi.sock".into()]),
            security_context: Some(locked_down()),
            volume_mounts: Some(vec![mount("socket-dir", "/csi", false)]),
            ..Default::default()
        },
    ];
    let mut pod = PodSpec {
        containers,
        // On control-plane nodes: with IRSA off their instance role holds the driver's EC2 permissions, and
        // no worker's does.
        affinity: Some(one_per_control_plane_node(selector(CONTROLLER))),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(1000),
            run_as_group: Some(1000),
            fs_group: Some(1000),
            ..Default::default()
        }),
        priority_class_name: Some("system-cluster-critical".into()),
        service_account_name: Some(CONTROLLER_ACCOUNT.into()),
        tolerations: Some(vec![tolerate(CONTROL_PLANE_LABEL)]),
        volumes: Some(vec![Volume {
            name: "socket-dir".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    // With IRSA the driver (not its sidecars, which call no AWS API) runs on a role of its own.
    if let Some(role) = super::objects::addon_role(spec, |r| &r.ebs_csi_controller) {
        super::objects::on_web_identity(&mut pod, &["ebs-plugin"], role);
    }
    Deployment {
        metadata: named(CONTROLLER, Some(KUBE_SYSTEM)),
        spec: Some(DeploymentSpec {
            replicas: Some(controller_replicas(spec)),
            selector: selector(CONTROLLER),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(CONTROLLER)),
                    ..Default::default()
                }),
                spec: Some(pod),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(images: &EbsCsiImages) -> DaemonSet {
    let plugin = Container {
        name: "ebs-plugin".into(),
        image: Some(images.ebs_plugin.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(vec![
            "node".into(),
            "--endpoint=$(CSI_ENDPOINT)".into(),
            "--logtostderr".into(),
            "--v=2".into(),
        ]),
        env: Some(vec![
            env("CSI_ENDPOINT", "unix:/csi/csi.sock"),
            node_name_env(),
        ]),
        ports: Some(vec![healthz_port()]),
        liveness_probe: Some(healthz_probe()),
        // Privileged: it formats and mounts the node's block devices, and its mounts under /var/lib/kubelet
        // must reach the host (and so the pods), which only a privileged container's Bidirectional mount does.
        security_context: Some(SecurityContext {
            privileged: Some(true),
            read_only_root_filesystem: Some(true),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                mount_propagation: Some("Bidirectional".into()),
                ..mount("kubelet-dir", "/var/lib/kubelet", false)
            },
            mount("plugin-dir", "/csi", false),
            mount("device-dir", "/dev", false),
        ]),
        ..Default::default()
    };
    let registrar = Container {
        name: "node-driver-registrar".into(),
        image: Some(images.node_driver_registrar.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(vec![
            "--csi-address=$(ADDRESS)".into(),
            "--kubelet-registration-path=$(DRIVER_REG_SOCK_PATH)".into(),
            "--v=2".into(),
        ]),
        env: Some(vec![
            env("ADDRESS", "/csi/csi.sock"),
            env(
                "DRIVER_REG_SOCK_PATH",
                "/var/lib/kubelet/plugins/ebs.csi.aws.com/csi.sock",
            ),
        ]),
        security_context: Some(locked_down()),
        volume_mounts: Some(vec![
            mount("plugin-dir", "/csi", false),
            mount("registration-dir", "/registration", false),
        ]),
        ..Default::default()
    };
    let liveness = Container {
        name: "liveness-probe".into(),
        image: Some(images.liveness_probe.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(vec!["--csi-address=/csi/csi.sock".into()]),
        security_context: Some(locked_down()),
        volume_mounts: Some(vec![mount("plugin-dir", "/csi", false)]),
        ..Default::default()
    };
    DaemonSet {
        metadata: named(NODE, Some(KUBE_SYSTEM)),
        spec: Some(DaemonSetSpec {
            selector: selector(NODE),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(NODE)),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![plugin, registrar, liveness],
                    node_selector: Some(BTreeMap::from([(
                        "kubernetes.io/os".to_string(),
                        "linux".to_string(),
                    )])),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(false),
                        run_as_user: Some(0),
                        run_as_group: Some(0),
                        fs_group: Some(0),
                        ..Default::default()
                    }),
                    priority_class_name: Some("system-node-critical".into()),
                    service_account_name: Some(NODE_ACCOUNT.into()),
                    // Every node, whatever its taints: a pod with a volume may run anywhere.
                    tolerations: Some(vec![Toleration {
                        operator: Some("Exists".into()),
                        ..Default::default()
                    }]),
                    volumes: Some(vec![
                        host_path("kubelet-dir", "/var/lib/kubelet", "Directory"),
                        host_path(
                            "plugin-dir",
                            "/var/lib/kubelet/plugins/ebs.csi.aws.com/",
                            "DirectoryOrCreate",
                        ),
                        host_path(
                            "registration-dir",
                            "/var/lib/kubelet/plugins_registry/",
                            "Directory",
                        ),
                        host_path("device-dir", "/dev", "Directory"),
                    ]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn ebs_csi(spec: &NodeSpec, images: &EbsCsiImages) -> EbsCsi {
    let binding = |name: &str, role: &str, account: &str| ClusterRoleBinding {
        metadata: named(name, None),
        role_ref: cluster_role_ref(role),
        subjects: Some(vec![service_account_subject(account)]),
    };
    EbsCsi {
        csi_driver: CSIDriver {
            metadata: named(DRIVER, None),
            spec: CSIDriverSpec {
                attach_required: Some(true),
                pod_info_on_mount: Some(false),
                fs_group_policy: Some("File".into()),
                ..Default::default()
            },
        },
        storage_class: StorageClass {
            metadata: ObjectMeta {
                annotations: Some(BTreeMap::from([(
                    "storageclass.kubernetes.io/is-default-class".to_string(),
                    "true".to_string(),
                )])),
                ..named(STORAGE_CLASS, None)
            },
            provisioner: DRIVER.into(),
            parameters: Some(BTreeMap::from([
                ("type".to_string(), "gp3".to_string()),
                ("encrypted".to_string(), "true".to_string()),
            ])),
            // Made in the zone of the node the pod is scheduled to, never in a zone the pod cannot run in.
            volume_binding_mode: Some("WaitForFirstConsumer".into()),
            allow_volume_expansion: Some(true),
            reclaim_policy: Some("Delete".into()),
            ..Default::default()
        },
        service_accounts: vec![
            ServiceAccount {
                metadata: named(CONTROLLER_ACCOUNT, Some(KUBE_SYSTEM)),
                ..Default::default()
            },
            ServiceAccount {
                metadata: named(NODE_ACCOUNT, Some(KUBE_SYSTEM)),
                ..Default::default()
            },
        ],
        cluster_roles: vec![
            ClusterRole {
                metadata: named("ebs-external-attacher-role", None),
                rules: Some(vec![
                    rule(
                        &[""],
                        &["persistentvolumes"],
                        &["get", "list", "watch", "update", "patch"],
                    ),
                    rule(&[""], &["nodes"], &["get", "list", "watch"]),
                    rule(
                        &["csi.storage.k8s.io"],
                        &["csinodeinfos"],
                        &["get", "list", "watch"],
                    ),
                    rule(
                        &["storage.k8s.io"],
                        &["volumeattachments"],
                        &["get", "list", "watch", "update", "patch"],
                    ),
                    rule(
                        &["storage.k8s.io"],
                        &["volumeattachments/status"],
                        &["patch"],
                    ),
                ]),
                ..Default::default()
            },
            ClusterRole {
                metadata: named("ebs-external-provisioner-role", None),
                rules: Some(vec![
                    rule(
                        &[""],
                        &["persistentvolumes"],
                        &["get", "list", "watch", "create", "delete"],
                    ),
                    rule(
                        &[""],
                        &["persistentvolumeclaims"],
                        &["get", "list", "watch", "update"],
                    ),
                    rule(
                        &["storage.k8s.io"],
                        &["storageclasses"],
                        &["get", "list", "watch"],
                    ),
                    rule(
                        &[""],
                        &["events"],
                        &["list", "watch", "create", "update", "patch"],
                    ),
                    rule(
                        &["snapshot.storage.k8s.io"],
                        &["volumesnapshots"],
                        &["get", "list"],
                    ),
                    rule(
                        &["snapshot.storage.k8s.io"],
                        &["volumesnapshotcontents"],
                        &["get", "list"],
                    ),
                    rule(
                        &["storage.k8s.io"],
                        &["csinodes"],
                        &["get", "list", "watch"],
                    ),
                    rule(&[""], &["nodes"], &["get", "list", "watch"]),
                    rule(
                        &["coordination.k8s.io"],
                        &["leases"],
                        &["get", "watch", "list", "delete", "update", "create"],
                    ),
                    rule(
                        &["storage.k8s.io"],
                        &["volumeattachments"],
                        &["get", "list", "watch"],
                    ),
                ]),
                ..Default::default()
            },
            ClusterRole {
                metadata: named("ebs-external-resizer-role", None),
                rules: Some(vec![
                    rule(
                        &[""],
                        &["persistentvolumes"],
                        &["get", "list", "watch", "update", "patch"],
                    ),
                    rule(
                        &[""],
                        &["persistentvolumeclaims"],
                        &["get", "list", "watch"],
                    ),
                    rule(
                        &[""],
                        &["persistentvolumeclaims/status"],
                        &["update", "patch"],
                    ),
                    rule(
                        &["storage.k8s.io"],
                        &["storageclasses"],
                        &["get", "list", "watch"],
                    ),
                    rule(
                        &[""],
                        &["events"],
                        &["list", "watch", "create", "update", "patch"],
                    ),
                    rule(&[""], &["pods"], &["get", "list", "watch"]),
                    rule(
                        &["coordination.k8s.io"],
                        &["leases"],
                        &["get", "watch", "list", "delete", "update", "create"],
                    ),
                ]),
                ..Default::default()
            },
            // The node plugin reads its own Node (its zone and attach limit).
            ClusterRole {
                metadata: named("ebs-csi-node-role", None),
                rules: Some(vec![rule(&[""], &["nodes"], &["get"])]),
                ..Default::default()
            },
        ],
        cluster_role_bindings: vec![
            binding(
                "ebs-csi-attacher-binding",
                "ebs-external-attacher-role",
                CONTROLLER_ACCOUNT,
            ),
            binding(
                "ebs-csi-provisioner-binding",
                "ebs-external-provisioner-role",
                CONTROLLER_ACCOUNT,
            ),
            binding(
                "ebs-csi-resizer-binding",
                "ebs-external-resizer-role",
                CONTROLLER_ACCOUNT,
            ),
            binding(
                "ebs-csi-node-getter-binding",
                "ebs-csi-node-role",
                NODE_ACCOUNT,
            ),
        ],
        disruption_budget: PodDisruptionBudget {
            metadata: named(CONTROLLER, Some(KUBE_SYSTEM)),
            spec: Some(PodDisruptionBudgetSpec {
                max_unavailable: Some(IntOrString::Int(1)),
                selector: Some(selector(CONTROLLER)),
                ..Default::default()
            }),
            ..Default::default()
        },
        controller: controller(spec, images),
        node: node(images),
    }
}
