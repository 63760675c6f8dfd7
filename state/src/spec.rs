//! The cluster spec: the `Cluster` and `InstanceGroup` kinds of `ballast.dev/v1alpha1`.
//!
//! Fields are optional where a default exists: the operator's file keeps only what they wrote, and
//! [`crate::defaults::complete`] fills the rest (the completed spec, from which plans are made). Unknown
//! fields are rejected everywhere (`deny_unknown_fields`). Values that need semantic checks (names, CIDRs,
//! versions, durations) are kept as strings so that [`crate::validate`] can report every problem at once, each
//! with its path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The one API version this release reads and writes.
pub const API_VERSION: &str = "ballast.dev/v1alpha1";
/// `kind` of a cluster document.
pub const KIND_CLUSTER: &str = "Cluster";
/// `kind` of an instance group document.
pub const KIND_INSTANCE_GROUP: &str = "InstanceGroup";

/// Name and labels of an object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectMeta {
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// A Kubernetes cluster on AWS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cluster {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: ClusterSpec,
}

/// What the operator declares about a cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    /// Kubernetes version, `MAJOR.MINOR.PATCH` (a leading `v` is accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// AWS region, e.g. `us-west-2`; derived from the subnets' zones when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The VPC's CIDR. For a new VPC it defaults to `172.20.0.0/16`; with `networkID` it is the shared VPC's.
    #[serde(
        default,
        rename = "networkCIDR",
        skip_serializing_if = "Option::is_none"
    )]
    pub network_cidr: Option<String>,
    /// An existing (shared) VPC to use instead of creating one. Ballast never modifies or deletes it.
    #[serde(default, rename = "networkID", skip_serializing_if = "Option::is_none")]
    pub network_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<ClusterSubnet>,
    /// Where instances live: `Public` subnets, or `Private` ones behind NAT gateways.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<ApiSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<EtcdSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networking: Option<Networking>,
    /// Cilium's settings; only with `networking: cilium` (completion fills them in then, and only then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cilium: Option<CiliumSpec>,
    /// Settings of every node's kubelet (`spec.kubelet`, as kops names them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletSpec>,
    /// Settings of kube-proxy (`spec.kubeProxy`, as kops names them); not used with cilium, which replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_proxy: Option<KubeProxySpec>,
    /// CIDRs allowed to SSH to instances. Empty means no SSH from outside the VPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_access: Option<Vec<String>>,
    /// CIDRs allowed to reach the Kubernetes API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_api_access: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_config: Option<EncryptionConfigSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam: Option<ClusterIamSpec>,
    /// Publish the service-account issuer's OIDC discovery documents and make it the API server's issuer
    /// (IAM roles for service accounts; `docs/irsa.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_issuer_discovery: Option<Box<ServiceAccountIssuerDiscovery>>,
    /// Tags added to every AWS resource the cluster owns.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cloud_labels: BTreeMap<String, String>,
    /// How the S3 state store is used by the cluster's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_store: Option<StateStoreSpec>,
    /// Where control-plane nodes ship the API server's audit log (docs/audit.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_log: Option<AuditLogSpec>,
    /// The cluster autoscaler add-on (`crate::autoscaler`, docs/addons.md): it sizes the node groups that
    /// autoscale between their minSize and maxSize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_autoscaler: Option<ClusterAutoscalerSpec>,
    /// Termination the cluster sees coming (docs/termination.md): an SQS queue, the EventBridge rules that feed
    /// it, and a terminating lifecycle hook on every Auto Scaling group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_handling: Option<TerminationHandlingSpec>,
}

/// `spec.terminationHandling` (docs/termination.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TerminationHandlingSpec {
    /// Make the queue, the rules and the hooks. Off when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How long a terminating instance waits in `Terminating:Wait` for its lifecycle action to be completed
    /// before Auto Scaling continues the termination by itself (the hooks' heartbeat timeout), e.g. `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout: Option<String>,
}

impl TerminationHandlingSpec {
    /// Whether the cluster's spec turns termination handling on.
    pub fn enabled_in(spec: &ClusterSpec) -> bool {
        spec.termination_handling
            .as_ref()
            .and_then(|t| t.enabled)
            .unwrap_or(false)
    }
}

/// `spec.clusterAutoscaler`: the cluster autoscaler, run on the control plane, finds the node groups that
/// autoscale by their Auto Scaling group tags and sets their desired capacity (docs/addons.md). Each option is
/// one of the autoscaler's flags; completion fills kops's defaults when it is enabled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterAutoscalerSpec {
    /// Install the autoscaler and tag the node groups for it. Off when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How it picks the group to grow (`--expander`); default `random`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expander: Option<AutoscalerExpander>,
    /// Keep similar groups the same size (`--balance-similar-node-groups`); default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance_similar_node_groups: Option<bool>,
    /// Never remove a node with a pod using local storage (`--skip-nodes-with-local-storage`); default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_nodes_with_local_storage: Option<bool>,
    /// Never remove a node running kube-system pods other than DaemonSets' (`--skip-nodes-with-system-pods`);
    /// default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_nodes_with_system_pods: Option<bool>,
    /// How long after a scale-up scale-down is considered again (`--scale-down-delay-after-add`); default `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_after_add: Option<String>,
    /// How long a node must be unneeded before it is removed (`--scale-down-unneeded-time`); default `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_unneeded_time: Option<String>,
    /// How long a new instance may take to register before the scale-up counts as failed
    /// (`--max-node-provision-time`); default `15m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_node_provision_time: Option<String>,
}

/// The cluster autoscaler's `--expander`: which group grows when several could.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AutoscalerExpander {
    /// Any of them.
    Random,
    /// The one that schedules the most pending pods.
    MostPods,
    /// The one that leaves the least CPU (then memory) idle.
    LeastWaste,
    /// The one of the highest `autoscalePriority` (its groups listed in the priority expander's ConfigMap).
    Priority,
}

impl AutoscalerExpander {
    /// The flag's value.
    pub fn flag_value(self) -> &'static str {
        match self {
            AutoscalerExpander::Random => "random",
            AutoscalerExpander::MostPods => "most-pods",
            AutoscalerExpander::LeastWaste => "least-waste",
            AutoscalerExpander::Priority => "priority",
        }
    }
}

/// The API server's audit log, shipped off each control-plane node to S3 in chunks (docs/audit.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditLogSpec {
    /// `s3://bucket[/prefix]`: where chunks go (under `<prefix>/<cluster>/audit/<instance-id>/`). The state store
    /// (its bucket and prefix) when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// The ARN of the KMS key chunks are written with (SSE-KMS). Unset: the state store's key when the chunks go
    /// to the state store, else SSE-S3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// The longest a written line waits on the node before it is shipped, e.g. `30s`: what a power cut can lose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_interval: Option<String>,
    /// The most bytes one chunk holds; a chunk is cut at a line's end before it would exceed this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_max_bytes: Option<u64>,
    /// Days a chunk is kept: an S3 lifecycle rule on the cluster's audit prefix, set by `update cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_days: Option<u32>,
}

/// The state store as the cluster's nodes write to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateStoreSpec {
    /// The ARN of the KMS key the state store's objects are encrypted with (SSE-KMS; `--state-kms-key` at
    /// `create cluster`): nodes write their reports and etcd's objects with it, and their roles may use it.
    /// SSE-S3 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
}

/// One subnet of the cluster: created from `cidr`, or shared when `id` names an existing one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSubnet {
    pub name: String,
    pub zone: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub subnet_type: Option<SubnetType>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SubnetType {
    /// Routed to an internet gateway; instances may get public IPs. Load balancers and NAT gateways live here.
    Public,
    /// Routed through a NAT gateway in a public subnet of the same zone.
    Private,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Topology {
    Public,
    Private,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancerSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadBalancerSpec {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub lb_type: Option<LoadBalancerType>,
    /// Security groups (ids) the API's network load balancer carries, which then filter what reaches it (kops's
    /// `spec.api.loadBalancer.additionalSecurityGroups`). Given when the load balancer is created: AWS cannot add
    /// the first security group to an NLB made without one, nor take the last one away, so a change is refused
    /// (`ctl/src/cloud/kinds/load_balancer.rs`). At most [`crate::group_aws::MAX_API_SECURITY_GROUPS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_security_groups: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoadBalancerType {
    /// Internet-facing network load balancer.
    Public,
    /// Reachable from inside the VPC only.
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdSpec {
    /// One member per control-plane instance group; defaults to every control-plane group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<EtcdMember>,
    /// Encrypt etcd's data volumes (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_volume: Option<bool>,
    /// KMS key for the volumes; the account's default EBS key when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// Size in GiB of each member's EBS volume (default 20; it can grow in place, never shrink).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<u32>,
    /// EBS type of each member's volume: `gp3` (the default) or `gp2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
    /// Provisioned IOPS of each member's volume (gp3 only; gp3's baseline, 3000, when unset). A change is made
    /// in place (ModifyVolume): the member's data stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_iops: Option<u32>,
    /// Throughput in MiB/s of each member's volume (gp3 only; gp3's baseline, 125, when unset). Changed in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_throughput: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<EtcdBackupSpec>,
    /// etcd's `--heartbeat-interval`, as kops's `etcdClusters[].heartbeatInterval`: a Go duration of whole
    /// milliseconds (`50ms`), 1 ms..10 s; absent: etcd's default, 100 ms (`etcd_timing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_interval: Option<String>,
    /// etcd's `--election-timeout`, as kops's `etcdClusters[].leaderElectionTimeout`: at least five heartbeats,
    /// at most 50 s; absent: etcd's default, 1 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_election_timeout: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdMember {
    pub name: String,
    pub instance_group: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdBackupSpec {
    /// How often to snapshot etcd to the state store, e.g. `15m` (units s, m, h, d).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// How long to keep snapshots, e.g. `7d`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<String>,
}

/// The pod network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Networking {
    AmazonVpc,
    Cilium,
    Calico,
    /// kops's kubenet: each node's pods on a Linux bridge, addressed from the node's PodCIDR (the controller
    /// manager allocates them), reached across nodes by the routes the cloud controller manager's route
    /// controller writes into the VPC's route tables (at most 50 per table by default: 50 nodes). No add-on.
    Kubenet,
}

/// Settings of every node's kubelet (`spec.kubelet`): kops's field names and shapes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletSpec {
    /// Whether the kubelet refuses to start on a cgroup v1 host (`failCgroupV1` of its configuration). Unset,
    /// the kubelet's own default holds: refuse from Kubernetes 1.35 on. Set `false` only for hosts that have
    /// cgroup v1 alone (cgroup v1 support is in maintenance upstream); Ballast's AMIs are cgroup v2.
    #[serde(
        default,
        rename = "failCgroupV1",
        skip_serializing_if = "Option::is_none"
    )]
    pub fail_cgroup_v1: Option<bool>,
    /// The kubelet's hard eviction thresholds (`evictionHard` of its configuration), in kops's form: comma
    /// separated `SIGNAL<VALUE`, e.g. `memory.available<100Mi,nodefs.available<10%`. Unset, the kubelet's
    /// defaults hold (memory 100Mi; nodefs 10%, imagefs 15%, inodes 5%). Set, these thresholds replace them:
    /// a signal left out has no hard threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_hard: Option<String>,
}

/// kube-proxy's settings (`spec.kubeProxy`): kops's field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeProxySpec {
    /// Connection-tracking entries to allow per CPU (`conntrack.maxPerCore`), 0 to 1048576: kube-proxy raises
    /// the kernel's `nf_conntrack_max` to this times the CPUs (at least 131072). 0 leaves the kernel's value, as
    /// a node that may not set it needs (a node that is a container: kind sets 0). Unset, kube-proxy's 32768.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conntrack_max_per_core: Option<u32>,
}

/// The largest `spec.kubeProxy.conntrackMaxPerCore` accepted.
pub const CONNTRACK_MAX_PER_CORE: u32 = 1 << 20;

/// The signals a kubelet evicts on (`pkg/kubelet/eviction/api`).
pub const EVICTION_SIGNALS: [&str; 8] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
];

/// Parses kops's `evictionHard` form into signal -> threshold (`10%`, `100Mi`, `0`). Every problem is named: an
/// unknown signal, a signal given twice, an operator other than `<`, a percentage above 100, a value that is
/// not a quantity.
pub fn parse_eviction_hard(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((signal, value)) = entry.split_once('<') else {
            return Err(format!(
                "{entry:?} is not SIGNAL<VALUE (hard thresholds are always `<`)"
            ));
        };
        let (signal, value) = (signal.trim(), value.trim());
        if !EVICTION_SIGNALS.contains(&signal) {
            return Err(format!(
                "{signal:?} is not an eviction signal (one of {})",
                EVICTION_SIGNALS.join(", ")
            ));
        }
        let valid = match value.strip_suffix('%') {
            Some(percent) => percent
                .parse::<f64>()
                .is_ok_and(|p| (0.0..=100.0).contains(&p)),
            None => {
                let digits = value.trim_end_matches(|c: char| c.is_ascii_alphabetic());
                let unit = &value[digits.len()..];
                !digits.is_empty()
                    && digits.chars().all(|c| c.is_ascii_digit())
                    && digits.len() <= 18
                    && ["", "Ki", "Mi", "Gi", "Ti", "k", "M", "G", "T"].contains(&unit)
            }
        };
        if !valid {
            return Err(format!(
                "{signal}: {value:?} is neither a percentage from 0% to 100% nor a quantity (e.g. 100Mi)"
            ));
        }
        if out.insert(signal.to_string(), value.to_string()).is_some() {
            return Err(format!("{signal} is given twice"));
        }
    }
    if out.is_empty() {
        return Err("names no threshold: leave the field out for the kubelet's defaults".into());
    }
    Ok(out)
}

/// Cilium's settings (`spec.cilium`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CiliumSpec {
    /// How pod traffic crosses between nodes; default `tunnel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_mode: Option<CiliumRoutingMode>,
    /// Annotations on the Cilium agent's pods (its DaemonSet's pod template; kops's `agentPodAnnotations`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agent_pod_annotations: BTreeMap<String, String>,
    /// Annotations on the Cilium operator's pods (its Deployment's pod template; kops's
    /// `operatorPodAnnotations`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub operator_pod_annotations: BTreeMap<String, String>,
}

/// Cilium's `routing-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CiliumRoutingMode {
    /// Pod traffic between nodes is encapsulated in VXLAN (UDP 8472): works across subnets and zones with no
    /// route for pod addresses anywhere in the VPC.
    Tunnel,
    /// Pod packets travel unencapsulated; each node routes the others' pod ranges to them (Cilium's
    /// `auto-direct-node-routes`), which needs every node on one subnet (docs/addons.md, "Cilium").
    Native,
}

/// Encryption of Kubernetes secrets at rest in etcd (the API server's EncryptionConfiguration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EncryptionConfigSpec {
    /// Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<EncryptionProvider>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncryptionProvider {
    Secretbox,
    Aescbc,
    Aesgcm,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterIamSpec {
    /// Let nodes pull from the account's container registries (ECR read-only). Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_container_registry: Option<bool>,
    /// A permissions boundary ARN set on every role Ballast creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions_boundary: Option<String>,
    /// One IAM role per service account, assumable only with that service account's tokens (IRSA; needs
    /// `serviceAccountIssuerDiscovery` with `enableAWSOIDCProvider`; `docs/irsa.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_account_external_permissions: Vec<ServiceAccountExternalPermission>,
}

/// `spec.serviceAccountIssuerDiscovery`: publish the service-account issuer's OIDC discovery documents, and
/// make the API server's issuer their public location.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceAccountIssuerDiscovery {
    /// `s3://bucket[/prefix]`: where `/.well-known/openid-configuration` and `/openid/v1/jwks` are published
    /// (public-read, those two objects only).
    pub discovery_store: String,
    /// Create the IAM OIDC provider trusting the issuer (default false, as in kops). Needed for
    /// `spec.iam.serviceAccountExternalPermissions`.
    #[serde(
        default,
        rename = "enableAWSOIDCProvider",
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_aws_oidc_provider: Option<bool>,
    /// Client ids the OIDC provider lists besides [`AWS_AUDIENCE`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_audiences: Vec<String>,
}

/// One entry of `spec.iam.serviceAccountExternalPermissions`: the AWS permissions of one service account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceAccountExternalPermission {
    /// The service account's name.
    pub name: String,
    /// The service account's namespace.
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsPermission>,
}

/// What a service account may do in AWS: managed policies attached to its role, and/or an inline policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsPermission {
    /// Managed policies attached to the role, by ARN.
    #[serde(default, rename = "policyARNs", skip_serializing_if = "Vec::is_empty")]
    pub policy_arns: Vec<String>,
    /// IAM policy statements as JSON: an array of statements (kops's shape) or one statement object. Put on
    /// the role as its inline policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_policy: Option<String>,
}

/// A group of identical instances: one launch template and one Auto Scaling Group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceGroup {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: InstanceGroupSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceGroupSpec {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_type: Option<String>,
    /// An AMI id (`ami-...`), or an AMI name (the newest image of that name is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<u32>,
    /// Names of the cluster's subnets the group's instances go in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<RootVolumeSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_metadata: Option<InstanceMetadataSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam: Option<InstanceGroupIamSpec>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// Taints as `key[=value]:Effect`, Effect one of NoSchedule, PreferNoSchedule, NoExecute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cloud_labels: BTreeMap<String, String>,
    /// Whether the cluster autoscaler may size this node group (default true when
    /// `spec.clusterAutoscaler.enabled`): false leaves its Auto Scaling group untagged for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<bool>,
    /// The group's tier for the priority expander (`spec.clusterAutoscaler.expander: priority`): higher is tried
    /// first; default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale_priority: Option<u32>,
    /// The pace of `ballast rolling-update cluster` for this group (node groups only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<crate::rolling_update::RollingUpdateSpec>,
    /// Several instance types and spot instances: the Auto Scaling group's mixed instances policy (node groups
    /// only; `crate::group_aws`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed_instances_policy: Option<crate::group_aws::MixedInstancesPolicySpec>,
    /// The most to pay for a spot instance, US dollars an hour: with a mixed instances policy its spot max
    /// price, else the group runs spot instances only (the launch template's market options).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price: Option<String>,
    /// New instances are protected from scale-in (Auto Scaling's NewInstancesProtectedFromScaleIn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_protection: Option<bool>,
    /// Auto Scaling replaces an instance this old (`7d`; `0` or unset: never). 1d to 365d.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instance_lifetime: Option<String>,
    /// Security group ids (`sg-...`) of the cluster's VPC the instances have besides the cluster's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_security_groups: Vec<String>,
    /// Classic load balancers and target groups the operator owns that the group's instances join.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external_load_balancers: Vec<crate::group_aws::ExternalLoadBalancer>,
    /// A public IP on each instance (default: true when every subnet of the group is public, as kops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub associate_public_ip: Option<bool>,
    /// Extra EBS volumes every instance launches with (kops's `volumes`): block device mappings of the launch
    /// template. Rules in `crate::group_volumes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeSpec>,
    /// Where nodeup mounts extra volumes (kops's `volumeMounts`): each names a device of `volumes`; nodeup
    /// formats it only when it is blank, then mounts it before the kubelet starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMountSpec>,
}

/// An extra EBS volume of a group's instances, kops-shaped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeSpec {
    /// The device name it is mapped on (`/dev/sdg`, or its Xen name `/dev/xvdg`).
    #[serde(default)]
    pub device: String,
    /// Size in GiB (required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u32>,
    /// EBS type (default gp3).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
    /// Provisioned IOPS: gp3 (its baseline, 3000, when unset), io1 and io2 (required there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<u32>,
    /// Throughput in MiB/s, gp3 only (its baseline, 125, when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<u32>,
    /// Default true; false is refused (volumes are encrypted at rest, docs/spec.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// A KMS key (id, ARN or alias) to encrypt with; unset: the account's default EBS key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Deleted with its instance (default true, as kops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
}

/// Where nodeup mounts an extra volume, kops-shaped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeMountSpec {
    /// The device of one of the group's `volumes`.
    #[serde(default)]
    pub device: String,
    /// An absolute path, not a system path.
    #[serde(default)]
    pub path: String,
    /// `ext4` (default) or `xfs`: what nodeup makes on a blank device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<String>,
    /// Passed to mkfs when the device is formatted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub format_options: Vec<String>,
    /// Passed to mount (`-o`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_options: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Role {
    ControlPlane,
    Node,
    /// An SSH jump host in the public (utility) subnets of a private topology: nothing of Kubernetes runs on it,
    /// and it holds none of the cluster's secrets (docs/spec.md, "Bastions").
    Bastion,
    /// Runs kube-apiserver (and a kubelet) behind the API load balancer, and no etcd member: API capacity that
    /// scales apart from etcd (kops's `APIServer`; docs/spec.md, "API-server groups").
    ApiServer,
}

impl Role {
    /// The value of the `ballast.dev/role` tag.
    pub fn tag_value(self) -> &'static str {
        match self {
            Role::ControlPlane => "control-plane",
            Role::Node => "node",
            Role::Bastion => "bastion",
            Role::ApiServer => "api-server",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RootVolumeSpec {
    /// Size in GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u32>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
    /// Provisioned IOPS: gp3 (AWS's baseline, 3000, when unset), io1 and io2 (required there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<u32>,
    /// Throughput in MiB/s, gp3 only (AWS's baseline, 125, when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<u32>,
    /// Default true; Ballast refuses unencrypted root volumes only by default, not by force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceMetadataSpec {
    /// `required` (IMDSv2 only, the default) or `optional`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_tokens: Option<HttpTokens>,
    /// Default 1: containers cannot reach the node's IMDS through the extra network hop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_put_response_hop_limit: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpTokens {
    Required,
    Optional,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceGroupIamSpec {
    /// An existing instance profile ARN to use (shared: never modified or deleted) instead of one Ballast makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// A cluster and its instance groups: the unit that is validated, completed and stored together.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    pub cluster: Cluster,
    pub instance_groups: Vec<InstanceGroup>,
}

impl ClusterConfig {
    pub fn name(&self) -> &str {
        &self.cluster.metadata.name
    }

    pub fn instance_group(&self, name: &str) -> Option<&InstanceGroup> {
        self.instance_groups
            .iter()
            .find(|ig| ig.metadata.name == name)
    }
}

impl Cluster {
    /// A cluster document with this name and spec.
    pub fn new(name: &str, spec: ClusterSpec) -> Self {
        Cluster {
            api_version: API_VERSION.to_string(),
            kind: KIND_CLUSTER.to_string(),
            metadata: ObjectMeta {
                name: name.to_string(),
                labels: BTreeMap::new(),
            },
            spec,
        }
    }
}

impl InstanceGroup {
    /// An instance group document with this name and spec.
    pub fn new(name: &str, spec: InstanceGroupSpec) -> Self {
        InstanceGroup {
            api_version: API_VERSION.to_string(),
            kind: KIND_INSTANCE_GROUP.to_string(),
            metadata: ObjectMeta {
                name: name.to_string(),
                labels: BTreeMap::new(),
            },
            spec,
        }
    }
}

impl InstanceGroupSpec {
    /// An empty spec of this role: everything else defaulted.
    pub fn with_role(role: Role) -> Self {
        InstanceGroupSpec {
            role,
            machine_type: None,
            image: None,
            min_size: None,
            max_size: None,
            subnets: Vec::new(),
            root_volume: None,
            instance_metadata: None,
            iam: None,
            rolling_update: None,
            autoscale: None,
            autoscale_priority: None,
            mixed_instances_policy: None,
            max_price: None,
            instance_protection: None,
            max_instance_lifetime: None,
            additional_security_groups: Vec::new(),
            external_load_balancers: Vec::new(),
            associate_public_ip: None,
            volumes: Vec::new(),
            volume_mounts: Vec::new(),
            node_labels: BTreeMap::new(),
            taints: None,
            cloud_labels: BTreeMap::new(),
        }
    }
}
