//! Every rule of the spec, in one place. [`validate`] checks a completed cluster config and returns all the
//! problems it finds, each naming the object, the field's path and what to do.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use ipnet::{IpNet, Ipv4Net};
use regex::Regex;

use crate::defaults::region_of_zone;
use crate::duration::{parse_duration, DurationError};
use crate::error::FieldError;
use crate::limits::{
    AUDIT_CHUNK_INTERVAL_SECS, AUDIT_CHUNK_MAX_BYTES, AUDIT_RETENTION_DAYS, ETCD_VOLUME_SIZE_GIB,
    ETCD_VOLUME_TYPES, IAM_MAX_ROLE_NAME_CHARS, IAM_ROLE_NAME_PREFIX, MAX_API_SERVER_GROUP_SIZE,
    MAX_BASTION_SIZE, MAX_CLUSTER_NAME_CHARS, MAX_GROUP_SIZE, MAX_INSTANCE_GROUPS,
    MAX_POD_ANNOTATIONS, MAX_POD_ANNOTATION_VALUE_BYTES,
};
use crate::spec::*;

/// Control-plane group counts that give etcd a useful quorum.
pub const CONTROL_PLANE_COUNTS: [usize; 3] = [1, 3, 5];
/// AWS limits: VPC CIDR blocks are /16 to /28.
const VPC_PREFIX_RANGE: std::ops::RangeInclusive<u8> = 16..=28;

// The patterns are literals that are known to compile; `expect` documents that.
static REGION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]+$").expect("static regex")
});
static VERSION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$").expect("static regex")
});
static VPC_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^vpc-([0-9a-f]{8}|[0-9a-f]{17})$").expect("static regex"));
static SUBNET_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^subnet-([0-9a-f]{8}|[0-9a-f]{17})$").expect("static regex"));
static AMI_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^ami-([0-9a-f]{8}|[0-9a-f]{17})$").expect("static regex"));
static AMI_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9()\[\]./\-'@_* ]{3,128}$").expect("static regex"));
static MACHINE_TYPE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$").expect("static regex"));
static IAM_ARN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^arn:aws[a-z-]*:iam::[0-9]{12}:(instance-profile|policy)/[\w+=,.@/-]+$")
        .expect("static regex")
});
static DNS_LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$").expect("static regex"));
static LABEL_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
        .expect("static regex")
});
static LABEL_VALUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$").expect("static regex")
});

/// Collects errors for one object.
struct Report<'a> {
    object: String,
    errors: &'a mut Vec<FieldError>,
}

impl Report<'_> {
    fn error(&mut self, path: impl AsRef<str>, message: impl Into<String>) {
        self.errors
            .push(FieldError::new(&self.object, path.as_ref(), message));
    }
}

/// Checks a completed config (see [`crate::defaults::complete`]); returns every problem found.
pub fn validate(config: &ClusterConfig) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let cluster = &config.cluster;
    let mut report = Report {
        object: format!("{KIND_CLUSTER}/{}", cluster.metadata.name),
        errors: &mut errors,
    };
    check_dns_name(&mut report, "metadata.name", &cluster.metadata.name);
    check_metadata_labels(&mut report, &cluster.metadata.labels);
    check_cluster_spec(&mut report, &cluster.spec);
    check_instance_groups(&mut errors, config);
    check_cilium(&mut errors, config);
    check_kubenet(&mut errors, config);
    crate::irsa::validate::check(&mut errors, config);
    crate::autoscaler::check(&mut errors, config);
    crate::group_aws_rules::check(&mut errors, config);
    crate::group_volumes::check(&mut errors, config);
    errors
}

/// kubenet only with a public topology. Its routes to each node's pods are written by the AWS cloud controller
/// manager's route controller, which writes into the one route table tagged for the cluster and fails when it finds
/// more ("found multiple matching AWS route tables"): a private topology has one per zone beside the public
/// subnets'. Accepting it would render a cluster whose pods cannot reach each other across nodes.
fn check_kubenet(errors: &mut Vec<FieldError>, config: &ClusterConfig) {
    let cluster = &config.cluster;
    if cluster.spec.networking != Some(Networking::Kubenet)
        || cluster.spec.topology != Some(Topology::Private)
    {
        return;
    }
    let mut report = Report {
        object: format!("{KIND_CLUSTER}/{}", cluster.metadata.name),
        errors,
    };
    report.error(
        "spec.networking",
        "kubenet needs `topology: public`: its routes to each node's pods are written by the AWS cloud controller \
         manager into the one route table tagged for the cluster, and a private topology has one per zone, so no \
         route would be written and pods on different nodes could not reach each other; use `topology: public`, or \
         a CNI (`cilium`, `amazonvpc`) with the private topology",
    );
}

/// `spec.cilium` only with Cilium, and native routing refused for now. Native routing would need two things
/// Ballast does not do yet: EC2 drops a packet addressed to a pod unless the receiving instance's
/// source/destination check is off (a launch template cannot turn it off; only `ec2:ModifyInstanceAttribute`
/// per instance can), and Cilium's `auto-direct-node-routes` reaches only nodes on its own subnet. Accepting it
/// would render a cluster whose pods cannot reach each other across nodes, so it is refused with the way out;
/// nodeup's renderer keeps the native mode (and its golden) for when both are built.
fn check_cilium(errors: &mut Vec<FieldError>, config: &ClusterConfig) {
    let cluster = &config.cluster;
    let mut report = Report {
        object: format!("{KIND_CLUSTER}/{}", cluster.metadata.name),
        errors,
    };
    let Some(cilium) = &cluster.spec.cilium else {
        return;
    };
    if cluster.spec.networking != Some(Networking::Cilium) {
        report.error(
            "spec.cilium",
            "applies only with `networking: cilium`: remove it, or choose cilium",
        );
        return;
    }
    if cilium.routing_mode == Some(CiliumRoutingMode::Native) {
        report.error(
            "spec.cilium.routingMode",
            "native is not supported yet: on AWS it needs every instance's source/destination check turned off, \
             which Ballast does not do, so pods on different nodes could not reach each other; use `tunnel` (the \
             default)",
        );
    }
    for (field, annotations) in [
        ("agentPodAnnotations", &cilium.agent_pod_annotations),
        ("operatorPodAnnotations", &cilium.operator_pod_annotations),
    ] {
        check_pod_annotations(&mut report, &format!("spec.cilium.{field}"), annotations);
    }
}

/// Pod annotations as the API server takes them: at most [`MAX_POD_ANNOTATIONS`], each key a qualified name
/// (an optional DNS-subdomain prefix of at most 253 characters and `/`, then a name of at most 63), each value at
/// most [`MAX_POD_ANNOTATION_VALUE_BYTES`]. A key the API server would refuse fails here, not in the add-on
/// applier on a control-plane node.
fn check_pod_annotations(
    report: &mut Report<'_>,
    path: &str,
    annotations: &BTreeMap<String, String>,
) {
    if annotations.len() > MAX_POD_ANNOTATIONS {
        report.error(
            path,
            format!(
                "{} annotations, more than {MAX_POD_ANNOTATIONS}: keep the ones a tool reads",
                annotations.len()
            ),
        );
        return;
    }
    for (key, value) in annotations {
        let prefix_ok = key
            .rsplit_once('/')
            .is_none_or(|(prefix, _)| prefix.len() <= 253);
        if !LABEL_NAME.is_match(key) || !prefix_ok {
            report.error(
                format!("{path}.{key}"),
                "is not a valid annotation key: an optional DNS subdomain and `/`, then at most 63 letters, \
                 digits, `-`, `_` or `.`, starting and ending with a letter or digit",
            );
        }
        if value.len() > MAX_POD_ANNOTATION_VALUE_BYTES {
            report.error(
                format!("{path}.{key}"),
                format!(
                    "its value is {} bytes, more than {MAX_POD_ANNOTATION_VALUE_BYTES}",
                    value.len()
                ),
            );
        }
    }
}

/// Why a cluster name is refused. A cluster name names S3 prefixes, tags, IAM roles and the API's DNS record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterNameError {
    #[error("must not be empty: a cluster is named by a DNS name, e.g. demo.example.com")]
    Empty,
    /// Longer than [`MAX_CLUSTER_NAME_CHARS`]; the message quotes at most twice that much of `name`.
    #[error(
        "{:?} is {} characters, longer than {MAX_CLUSTER_NAME_CHARS}: the cluster's IAM roles are named \
         {IAM_ROLE_NAME_PREFIX}<cluster>, and IAM allows role names of at most {IAM_MAX_ROLE_NAME_CHARS} \
         characters; choose a shorter name",
        quoted_prefix(.name),
        .name.len()
    )]
    TooLong { name: String },
    #[error(
        "{name:?} is not a valid DNS name: each dot-separated part must be 1-63 lowercase letters, digits or \
         '-', not starting or ending with '-'"
    )]
    NotDns { name: String },
}

/// A name of any length is quoted, but not at any length.
fn quoted_prefix(name: &str) -> String {
    let mut shown: String = name.chars().take(2 * MAX_CLUSTER_NAME_CHARS).collect();
    if shown.len() < name.len() {
        shown.push_str("...");
    }
    shown
}

/// A cluster name must be a DNS name: it names S3 prefixes, tags and the API's DNS record.
pub fn check_cluster_name(name: &str) -> Result<(), ClusterNameError> {
    if name.is_empty() {
        return Err(ClusterNameError::Empty);
    }
    if name.len() > MAX_CLUSTER_NAME_CHARS {
        return Err(ClusterNameError::TooLong {
            name: name.to_string(),
        });
    }
    if !name.split('.').all(|label| DNS_LABEL.is_match(label)) {
        return Err(ClusterNameError::NotDns {
            name: name.to_string(),
        });
    }
    Ok(())
}

/// An instance group name that is not a DNS label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{name:?} is not a valid instance group name: use 1-63 lowercase letters, digits or '-', not starting or \
     ending with '-'"
)]
pub struct InstanceGroupNameError {
    pub name: String,
}

/// An instance group name names its ASG, launch template and state-store objects.
pub fn check_instance_group_name(name: &str) -> Result<(), InstanceGroupNameError> {
    if DNS_LABEL.is_match(name) {
        Ok(())
    } else {
        Err(InstanceGroupNameError {
            name: name.to_string(),
        })
    }
}

fn check_dns_name(report: &mut Report<'_>, path: &str, name: &str) {
    if let Err(error) = check_cluster_name(name) {
        report.error(path, error.to_string());
    }
}

fn check_cluster_spec(report: &mut Report<'_>, spec: &ClusterSpec) {
    if let Some(version) = &spec.kubernetes_version {
        check_kubernetes_version(report, version);
    }
    let region = spec.region.as_deref();
    match region {
        Some(r) if !REGION.is_match(r) => report.error(
            "spec.region",
            format!("{r:?} is not an AWS region name (e.g. us-west-2)"),
        ),
        Some(_) => {}
        None => report.error(
            "spec.region",
            "is not set and cannot be derived from the subnets' zones: set it (e.g. us-west-2)",
        ),
    }
    let network = check_network(report, spec);
    check_subnets(report, spec, network);
    for (field, list) in [
        ("spec.sshAccess", &spec.ssh_access),
        ("spec.kubernetesApiAccess", &spec.kubernetes_api_access),
    ] {
        for (i, cidr) in list.iter().flatten().enumerate() {
            if cidr.parse::<IpNet>().is_err() {
                report.error(
                    format!("{field}[{i}]"),
                    format!("{cidr:?} is not a valid CIDR (e.g. 203.0.113.0/24)"),
                );
            }
        }
    }
    if let Some(etcd) = &spec.etcd {
        check_etcd(report, etcd);
    }
    if let Some(iam) = &spec.iam {
        if let Some(arn) = &iam.permissions_boundary {
            if !IAM_ARN.is_match(arn) || !arn.contains(":policy/") {
                report.error(
                    "spec.iam.permissionsBoundary",
                    format!("{arn:?} is not an IAM policy ARN (arn:aws:iam::ACCOUNT:policy/NAME)"),
                );
            }
        }
    }
    check_cloud_labels(report, "spec.cloudLabels", &spec.cloud_labels);
    if let Some(key) = spec
        .state_store
        .as_ref()
        .and_then(|s| s.kms_key_id.as_ref())
    {
        check_state_store_kms_key(report, key);
    }
    if let Some(audit) = &spec.audit_log {
        check_audit_log(report, audit);
    }
    if let Some(termination) = &spec.termination_handling {
        check_termination_handling(report, termination);
    }
    if let Some(max) = spec
        .kube_proxy
        .as_ref()
        .and_then(|k| k.conntrack_max_per_core)
    {
        if max > crate::spec::CONNTRACK_MAX_PER_CORE {
            report.error(
                "spec.kubeProxy.conntrackMaxPerCore",
                format!(
                    "{max} is above {}: give 0 (the kernel's own) to {}",
                    crate::spec::CONNTRACK_MAX_PER_CORE,
                    crate::spec::CONNTRACK_MAX_PER_CORE
                ),
            );
        }
    }
    if let Some(eviction) = spec.kubelet.as_ref().and_then(|k| k.eviction_hard.as_ref()) {
        if let Err(problem) = crate::spec::parse_eviction_hard(eviction) {
            report.error("spec.kubelet.evictionHard", problem);
        }
    }
}

/// `spec.terminationHandling`: the heartbeat within Auto Scaling's bounds, and only where there are hooks.
fn check_termination_handling(report: &mut Report<'_>, termination: &TerminationHandlingSpec) {
    let path = "spec.terminationHandling.heartbeatTimeout";
    if termination.heartbeat_timeout.is_some() && termination.enabled != Some(true) {
        report.error(
            path,
            "there are no lifecycle hooks for it to apply to unless spec.terminationHandling.enabled is true: set \
             enabled: true, or remove heartbeatTimeout",
        );
    }
    use crate::limits::TERMINATION_HEARTBEAT_SECS;
    if let Some(secs) = check_duration(report, path, termination.heartbeat_timeout.as_deref()) {
        if !TERMINATION_HEARTBEAT_SECS.contains(&secs) {
            report.error(
                path,
                format!(
                    "{secs} s is outside {}s..{}s (Auto Scaling's bounds for a lifecycle hook's heartbeat)",
                    TERMINATION_HEARTBEAT_SECS.start(),
                    TERMINATION_HEARTBEAT_SECS.end()
                ),
            );
        }
    }
}

/// `spec.auditLog`: an S3 destination, a key ARN (the control-plane role is granted it by ARN), and every number
/// within its bound (`limits`).
fn check_audit_log(report: &mut Report<'_>, audit: &AuditLogSpec) {
    if let Some(url) = &audit.destination {
        if let Err(e) = crate::audit::AuditDestination::parse(url) {
            report.error("spec.auditLog.destination", e.to_string());
        }
    }
    if let Some(key) = &audit.kms_key_id {
        if !crate::kms::is_key_arn(key) {
            report.error(
                "spec.auditLog.kmsKeyId",
                format!(
                    "{key:?} is not {}: the control-plane role is granted the key by its ARN; find it with `aws \
                     kms describe-key --key-id {} --query KeyMetadata.Arn`",
                    crate::kms::KEY_ARN_FORM,
                    crate::kms::for_command(key)
                ),
            );
        }
    }
    let path = "spec.auditLog.chunkInterval";
    if let Some(secs) = check_duration(report, path, audit.chunk_interval.as_deref()) {
        if !AUDIT_CHUNK_INTERVAL_SECS.contains(&secs) {
            report.error(
                path,
                format!(
                    "{secs} s is outside {}s..{}s",
                    AUDIT_CHUNK_INTERVAL_SECS.start(),
                    AUDIT_CHUNK_INTERVAL_SECS.end()
                ),
            );
        }
    }
    if let Some(bytes) = audit.chunk_max_bytes {
        if !AUDIT_CHUNK_MAX_BYTES.contains(&bytes) {
            report.error(
                "spec.auditLog.chunkMaxBytes",
                format!(
                    "{bytes} is outside {}..{} bytes",
                    AUDIT_CHUNK_MAX_BYTES.start(),
                    AUDIT_CHUNK_MAX_BYTES.end()
                ),
            );
        }
    }
    if let (Some(_), Some(url)) = (audit.retention_days, &audit.destination) {
        report.error(
            "spec.auditLog.retentionDays",
            format!(
                "applies to the state bucket only: {url} is not Ballast's, so its retention is its owner's (an S3 \
                 lifecycle rule on the bucket, docs/audit.md); remove retentionDays"
            ),
        );
    }
    if let Some(days) = audit.retention_days {
        if !AUDIT_RETENTION_DAYS.contains(&days) {
            report.error(
                "spec.auditLog.retentionDays",
                format!(
                    "{days} is outside {}..{} days",
                    AUDIT_RETENTION_DAYS.start(),
                    AUDIT_RETENTION_DAYS.end()
                ),
            );
        }
    }
}

/// The nodes' IAM policies grant KMS actions on this key, and IAM grants on a key ARN only (an alias or a bare
/// id names nothing a policy can hold).
fn check_state_store_kms_key(report: &mut Report<'_>, key: &str) {
    if !crate::kms::is_key_arn(key) {
        report.error(
            "spec.stateStore.kmsKeyId",
            format!(
                "{key:?} is not {}: the nodes' IAM policies are granted the key by its ARN, which an alias or id \
                 does not give; find it with `aws kms describe-key --key-id {} --query KeyMetadata.Arn`",
                crate::kms::KEY_ARN_FORM,
                crate::kms::for_command(key)
            ),
        );
    }
}

fn check_kubernetes_version(report: &mut Report<'_>, version: &str) {
    let Some(caps) = VERSION.captures(version) else {
        report.error(
            "spec.kubernetesVersion",
            format!("{version:?} is not a version: use MAJOR.MINOR.PATCH, e.g. 1.33.4"),
        );
        return;
    };
    let major = caps.get(1).map_or("", |m| m.as_str());
    let minor = caps.get(2).map_or("", |m| m.as_str());
    // The releases this Ballast builds nodes for are the ones its embedded manifest pins (an end-of-life one
    // only for a cluster already at it: new_cluster_version_problem).
    let pinned = crate::components::ComponentManifest::embedded()
        .map(|m| m.minors())
        .unwrap_or_default();
    if major != "1" || !pinned.contains(&format!("1.{minor}")) {
        report.error(
            "spec.kubernetesVersion",
            format!(
                "{version:?} is not supported: Ballast builds nodes for Kubernetes {}",
                pinned.join(", ")
            ),
        );
    } else if let Some(problem) = unpinned_version_problem(version) {
        // Refused here rather than when a node boots without a kubelet for it.
        report.error("spec.kubernetesVersion", problem);
    }
}

fn check_network(report: &mut Report<'_>, spec: &ClusterSpec) -> Option<Ipv4Net> {
    if let Some(id) = &spec.network_id {
        if !VPC_ID.is_match(id) {
            report.error(
                "spec.networkID",
                format!("{id:?} is not a VPC id (vpc- followed by 8 or 17 hex digits)"),
            );
        }
    }
    let cidr = spec.network_cidr.as_deref()?;
    match cidr.parse::<Ipv4Net>() {
        Err(_) => {
            report.error(
                "spec.networkCIDR",
                format!("{cidr:?} is not a valid IPv4 CIDR"),
            );
            None
        }
        Ok(net) if net.network() != net.addr() => {
            report.error(
                "spec.networkCIDR",
                format!("{cidr:?} has host bits set: did you mean {}?", net.trunc()),
            );
            None
        }
        Ok(net) if !VPC_PREFIX_RANGE.contains(&net.prefix_len()) => {
            report.error(
                "spec.networkCIDR",
                format!("{cidr:?}: a VPC's CIDR must be between /16 and /28"),
            );
            None
        }
        Ok(net) => Some(net),
    }
}

fn check_subnets(report: &mut Report<'_>, spec: &ClusterSpec, network: Option<Ipv4Net>) {
    if spec.subnets.is_empty() {
        report.error(
            "spec.subnets",
            "at least one subnet is needed: list one per availability zone",
        );
        return;
    }
    let region = spec.region.as_deref().unwrap_or("");
    let mut names = BTreeSet::new();
    // The CIDRs of earlier subnets that parsed, by index, for the overlap check.
    let mut parsed: Vec<(usize, Ipv4Net)> = Vec::new();
    for (i, subnet) in spec.subnets.iter().enumerate() {
        let path = format!("spec.subnets[{i}]");
        check_subnet_name(report, &path, subnet, &mut names);
        check_subnet_zone(report, &path, subnet, region);
        check_subnet_id(report, &path, subnet, spec);
        check_subnet_cidr(report, &path, subnet, network, &parsed);
        if let Some(net) = subnet_net(subnet) {
            parsed.push((i, net));
        }
    }
    if spec.topology == Some(Topology::Private) {
        check_private_subnets_have_public_zones(report, spec);
    }
}

fn check_subnet_name<'s>(
    report: &mut Report<'_>,
    path: &str,
    subnet: &'s ClusterSubnet,
    names: &mut BTreeSet<&'s str>,
) {
    if !DNS_LABEL.is_match(&subnet.name) {
        report.error(
            format!("{path}.name"),
            format!(
                "{:?} is not a valid subnet name: use lowercase letters, digits and '-'",
                subnet.name
            ),
        );
    } else if !names.insert(subnet.name.as_str()) {
        report.error(
            format!("{path}.name"),
            format!(
                "{:?} is used by another subnet: names must be unique",
                subnet.name
            ),
        );
    }
}

fn check_subnet_zone(report: &mut Report<'_>, path: &str, subnet: &ClusterSubnet, region: &str) {
    match region_of_zone(&subnet.zone) {
        None => report.error(
            format!("{path}.zone"),
            format!(
                "{:?} is not an availability zone name (e.g. us-west-2a)",
                subnet.zone
            ),
        ),
        Some(r) if !region.is_empty() && r != region => report.error(
            format!("{path}.zone"),
            format!(
                "{:?} is not in the cluster's region {region:?}",
                subnet.zone
            ),
        ),
        Some(_) => {}
    }
}

fn check_subnet_id(
    report: &mut Report<'_>,
    path: &str,
    subnet: &ClusterSubnet,
    spec: &ClusterSpec,
) {
    if let Some(id) = &subnet.id {
        if !SUBNET_ID.is_match(id) {
            report.error(
                format!("{path}.id"),
                format!("{id:?} is not a subnet id (subnet- followed by 8 or 17 hex digits)"),
            );
        }
        if spec.network_id.is_none() {
            report.error(
                format!("{path}.id"),
                "a shared subnet needs the shared VPC it belongs to: set spec.networkID",
            );
        }
    }
}

/// A subnet's CIDR when it is set, parses and has no host bits: the ones the overlap check compares.
fn subnet_net(subnet: &ClusterSubnet) -> Option<Ipv4Net> {
    let net = subnet.cidr.as_deref()?.parse::<Ipv4Net>().ok()?;
    (net.network() == net.addr()).then_some(net)
}

/// `earlier`: the usable CIDRs of the subnets before this one, with their indexes.
fn check_subnet_cidr(
    report: &mut Report<'_>,
    path: &str,
    subnet: &ClusterSubnet,
    network: Option<Ipv4Net>,
    earlier: &[(usize, Ipv4Net)],
) {
    match (&subnet.cidr, &subnet.id) {
        (None, None) => report.error(
            format!("{path}.cidr"),
            "is not set and no free block of the network is left for it: set cidr, or id for a shared subnet",
        ),
        (Some(cidr), _) => match cidr.parse::<Ipv4Net>() {
            Err(_) => report.error(
                format!("{path}.cidr"),
                format!("{cidr:?} is not a valid CIDR"),
            ),
            Ok(net) if net.network() != net.addr() => report.error(
                format!("{path}.cidr"),
                format!("{cidr:?} has host bits set: did you mean {}?", net.trunc()),
            ),
            Ok(net) => {
                if let Some(network) = network {
                    if !network.contains(&net) {
                        report.error(
                            format!("{path}.cidr"),
                            format!("{cidr:?} is not inside the network {network}"),
                        );
                    }
                }
                if net.prefix_len() > 28 {
                    report.error(
                        format!("{path}.cidr"),
                        format!("{cidr:?} is too small: AWS subnets are /28 or larger"),
                    );
                }
                for (j, other) in earlier {
                    if other.contains(&net) || net.contains(other) {
                        report.error(
                            format!("{path}.cidr"),
                            format!("{cidr:?} overlaps spec.subnets[{j}] ({other})"),
                        );
                    }
                }
            }
        },
        (None, Some(_)) => {}
    }
}

/// In a private topology each private subnet's NAT gateway lives in a public subnet of the same zone.
fn check_private_subnets_have_public_zones(report: &mut Report<'_>, spec: &ClusterSpec) {
    let public_zones: BTreeSet<&str> = spec
        .subnets
        .iter()
        .filter(|s| s.subnet_type == Some(SubnetType::Public))
        .map(|s| s.zone.as_str())
        .collect();
    for (i, subnet) in spec.subnets.iter().enumerate() {
        if subnet.subnet_type == Some(SubnetType::Private)
            && !public_zones.contains(subnet.zone.as_str())
        {
            report.error(
                format!("spec.subnets[{i}]"),
                format!(
                    "private subnet {:?} has no public subnet in zone {:?} for its NAT gateway: add one (type: Public)",
                    subnet.name, subnet.zone
                ),
            );
        }
    }
}

fn check_etcd(report: &mut Report<'_>, etcd: &EtcdSpec) {
    let mut names = BTreeSet::new();
    for (i, member) in etcd.members.iter().enumerate() {
        if !DNS_LABEL.is_match(&member.name) {
            report.error(
                format!("spec.etcd.members[{i}].name"),
                format!(
                    "{:?} is not a valid member name: use lowercase letters, digits and '-'",
                    member.name
                ),
            );
        } else if !names.insert(member.name.as_str()) {
            report.error(
                format!("spec.etcd.members[{i}].name"),
                format!("{:?} is used by another member", member.name),
            );
        }
    }
    if let Some(key) = &etcd.kms_key_id {
        if !crate::kms::is_key(key) {
            report.error(
                "spec.etcd.kmsKeyId",
                format!("{key:?} is not {}", crate::kms::KEY_FORMS),
            );
        }
        if etcd.encrypted_volume == Some(false) {
            report.error(
                "spec.etcd.kmsKeyId",
                "is set but encryptedVolume is false: remove the key or encrypt the volumes",
            );
        }
    }
    if let Some(size) = etcd.volume_size {
        if !ETCD_VOLUME_SIZE_GIB.contains(&size) {
            report.error(
                "spec.etcd.volumeSize",
                format!(
                    "{size} GiB is outside {}..{}",
                    ETCD_VOLUME_SIZE_GIB.start(),
                    ETCD_VOLUME_SIZE_GIB.end()
                ),
            );
        }
    }
    if let Some(kind) = &etcd.volume_type {
        if !ETCD_VOLUME_TYPES.contains(&kind.as_str()) {
            report.error(
                "spec.etcd.volumeType",
                format!("{kind:?} is not an etcd volume type: use gp3 or gp2"),
            );
        }
    }
    // IOPS and throughput are judged against a type etcd may have; another type is refused above.
    let etcd_type = etcd
        .volume_type
        .as_deref()
        .filter(|t| ETCD_VOLUME_TYPES.contains(t));
    for problem in etcd_type.into_iter().flat_map(|volume_type| {
        crate::ebs::check(crate::ebs::Performance {
            volume_type,
            size_gib: etcd.volume_size.unwrap_or_default(),
            iops: etcd.volume_iops,
            throughput: etcd.volume_throughput,
        })
    }) {
        let field = match problem.field {
            "iops" => "spec.etcd.volumeIops",
            _ => "spec.etcd.volumeThroughput",
        };
        report.error(field, problem.message);
    }
    if let Err((field, problem)) = crate::etcd_timing::EtcdTiming::from_spec(
        etcd.heartbeat_interval.as_deref(),
        etcd.leader_election_timeout.as_deref(),
    ) {
        report.error(field, problem.to_string());
    }
    if let Some(backup) = &etcd.backup {
        let interval = check_duration(
            report,
            "spec.etcd.backup.interval",
            backup.interval.as_deref(),
        );
        let retention = check_duration(
            report,
            "spec.etcd.backup.retention",
            backup.retention.as_deref(),
        );
        if let (Some(interval), Some(retention)) = (interval, retention) {
            if retention < interval {
                report.error(
                    "spec.etcd.backup.retention",
                    "is shorter than the backup interval: no backup would be kept",
                );
            }
        }
    }
}

/// A duration field, in the grammar of [`crate::duration`]; its length in seconds when valid.
fn check_duration(report: &mut Report<'_>, path: &str, value: Option<&str>) -> Option<u64> {
    let value = value?;
    match parse_duration(value) {
        Ok(duration) => Some(duration.as_secs()),
        Err(DurationError::Malformed { .. }) => {
            report.error(
                path,
                format!(
                    "{value:?} is not a duration: use a number and a unit s, m, h or d (e.g. 15m)"
                ),
            );
            None
        }
        Err(too_long @ DurationError::TooLong { .. }) => {
            report.error(path, too_long.to_string());
            None
        }
    }
}

fn check_cloud_labels(report: &mut Report<'_>, path: &str, labels: &BTreeMap<String, String>) {
    for (field, message) in crate::limits::cloud_label_problems(path, labels) {
        report.error(field, message);
    }
}

fn check_instance_groups(errors: &mut Vec<FieldError>, config: &ClusterConfig) {
    let cluster = &config.cluster;
    if config.instance_groups.len() > MAX_INSTANCE_GROUPS {
        // Each group's own checks are not run: thousands of messages would bury this one.
        errors.push(FieldError::new(
            &format!("{KIND_CLUSTER}/{}", cluster.metadata.name),
            "",
            format!(
                "has {} instance groups, more than {MAX_INSTANCE_GROUPS}: each is an Auto Scaling group, a launch \
                 template and AWS calls on every update; use fewer, larger groups",
                config.instance_groups.len()
            ),
        ));
        return;
    }
    let subnet_names: BTreeSet<&str> = cluster
        .spec
        .subnets
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    let mut seen = BTreeSet::new();
    let mut control_plane_groups = BTreeSet::new();
    for ig in &config.instance_groups {
        let mut report = Report {
            object: format!("{KIND_INSTANCE_GROUP}/{}", ig.metadata.name),
            errors,
        };
        if let Err(error) = check_instance_group_name(&ig.metadata.name) {
            report.error("metadata.name", error.to_string());
        } else if !seen.insert(ig.metadata.name.as_str()) {
            report.error(
                "metadata.name",
                "another instance group has this name: names must be unique",
            );
        }
        if ig.spec.role == Role::ControlPlane {
            control_plane_groups.insert(ig.metadata.name.as_str());
        }
        check_metadata_labels(&mut report, &ig.metadata.labels);
        check_instance_group_spec(&mut report, &ig.spec, &subnet_names);
        if ig.spec.role == Role::Bastion {
            check_bastion(&mut report, &ig.spec, &cluster.spec);
        }
        if ig.spec.role == Role::ApiServer {
            check_api_server_group(&mut report, &ig.spec, config);
        }
        if let Some(message) = crate::limits::merged_cloud_labels_problem(
            &cluster.spec.cloud_labels,
            &ig.spec.cloud_labels,
        ) {
            report.error("spec.cloudLabels", message);
        }
    }
    let mut report = Report {
        object: format!("{KIND_CLUSTER}/{}", cluster.metadata.name),
        errors,
    };
    let count = control_plane_groups.len();
    if !CONTROL_PLANE_COUNTS.contains(&count) {
        report.error(
            "",
            format!(
                "has {count} control-plane instance groups: etcd needs 1, 3 or 5 (one member each) to keep a quorum"
            ),
        );
    }
    if let Some(etcd) = &cluster.spec.etcd {
        let mut used = BTreeSet::new();
        for (i, member) in etcd.members.iter().enumerate() {
            let group = member.instance_group.as_str();
            if !control_plane_groups.contains(group) {
                report.error(
                    format!("spec.etcd.members[{i}].instanceGroup"),
                    format!("{group:?} is not a control-plane instance group of this cluster"),
                );
            } else if !used.insert(group) {
                report.error(
                    format!("spec.etcd.members[{i}].instanceGroup"),
                    format!("{group:?} already hosts another member: one member per control-plane group"),
                );
            }
        }
        for group in control_plane_groups.difference(&used) {
            if !etcd.members.is_empty() {
                report.error(
                    "spec.etcd.members",
                    format!("control-plane instance group {group:?} has no etcd member: add one"),
                );
            }
        }
    }
}

fn check_instance_group_spec(
    report: &mut Report<'_>,
    spec: &InstanceGroupSpec,
    subnet_names: &BTreeSet<&str>,
) {
    check_machine_type_and_image(report, spec);
    check_group_sizes(report, spec);
    check_group_subnets(report, spec, subnet_names);
    if let Some(volume) = &spec.root_volume {
        check_root_volume(report, volume);
    }
    check_instance_metadata(report, spec);
    check_iam_profile(report, spec);
    check_node_labels_and_taints(report, spec);
    check_cloud_labels(report, "spec.cloudLabels", &spec.cloud_labels);
    check_rolling_update(report, spec);
}

/// A node group's roll pace is bounded; a control-plane group rolls one instance at a time behind etcd, so a
/// pace there would be accepted and ignored: it is refused.
fn check_rolling_update(report: &mut Report<'_>, spec: &InstanceGroupSpec) {
    let Some(rolling) = &spec.rolling_update else {
        return;
    };
    if spec.role == Role::ControlPlane {
        report.error(
            "spec.rollingUpdate",
            "control-plane groups roll one instance at a time, behind etcd's quorum: remove rollingUpdate",
        );
        return;
    }
    for (field, problem) in rolling.problems() {
        report.error(format!("spec.rollingUpdate.{field}"), problem);
    }
}

fn check_machine_type_and_image(report: &mut Report<'_>, spec: &InstanceGroupSpec) {
    if let Some(machine_type) = &spec.machine_type {
        if !MACHINE_TYPE.is_match(machine_type) {
            report.error(
                "spec.machineType",
                format!("{machine_type:?} is not an EC2 instance type (e.g. t3.medium)"),
            );
        }
    }
    if let Some(image) = &spec.image {
        if image.starts_with("ami-") && !AMI_ID.is_match(image) {
            report.error("spec.image", format!("{image:?} is not a valid AMI id"));
        } else if !image.starts_with("ami-") && !AMI_NAME.is_match(image) {
            report.error(
                "spec.image",
                format!("{image:?} is neither an AMI id (ami-...) nor a valid AMI name"),
            );
        }
    }
}

/// An API-server group serves the API from the etcd the control plane runs: it needs a control plane, and its
/// size is bounded (every API server holds connections to every etcd member).
fn check_api_server_group(
    report: &mut Report<'_>,
    spec: &InstanceGroupSpec,
    config: &ClusterConfig,
) {
    if !config
        .instance_groups
        .iter()
        .any(|ig| ig.spec.role == Role::ControlPlane)
    {
        report.error(
            "spec.role",
            "an ApiServer group needs the cluster's control plane (its etcd): add a ControlPlane group or \
             make this one a ControlPlane group",
        );
    }
    if let Some(max) = spec.max_size {
        if max > MAX_API_SERVER_GROUP_SIZE {
            report.error(
                "spec.maxSize",
                format!(
                    "{max} API servers, more than {MAX_API_SERVER_GROUP_SIZE}: each loads every etcd member; \
                     use larger instances or fewer API servers"
                ),
            );
        }
    }
}

/// A bastion is an SSH jump host into a private topology: in a public one every instance is reachable as it
/// is (kops's `create cluster --bastion` asks for a private topology too). It lives in public subnets, is small
/// and bounded, and runs no kubelet, so labels and taints would be accepted and ignored: they are refused.
fn check_bastion(report: &mut Report<'_>, spec: &InstanceGroupSpec, cluster: &ClusterSpec) {
    if cluster.topology != Some(Topology::Private) {
        report.error(
            "spec.role",
            "a Bastion group needs spec.topology Private in the cluster (with Public, instances are reached \
             directly through spec.sshAccess): change the topology or remove the group",
        );
    }
    for (i, name) in spec.subnets.iter().enumerate() {
        let subnet = cluster.subnets.iter().find(|s| &s.name == name);
        if subnet.is_some_and(|s| s.subnet_type != Some(SubnetType::Public)) {
            report.error(
                format!("spec.subnets[{i}]"),
                format!("{name:?} is a private subnet: a bastion is reached from outside, put it in public subnets"),
            );
        }
    }
    if let Some(max) = spec.max_size {
        if max > MAX_BASTION_SIZE {
            report.error(
                "spec.maxSize",
                format!("{max} bastions, more than {MAX_BASTION_SIZE}: each is a door into the VPC; use fewer"),
            );
        }
    }
    // The completed spec gives every kubelet the group label; a bastion has none to give it to.
    if spec
        .node_labels
        .keys()
        .any(|k| k != crate::defaults::INSTANCE_GROUP_LABEL)
    {
        report.error(
            "spec.nodeLabels",
            "a bastion runs no kubelet: remove nodeLabels",
        );
    }
    if spec.taints.as_ref().is_some_and(|t| !t.is_empty()) {
        report.error("spec.taints", "a bastion runs no kubelet: remove taints");
    }
}

fn check_group_sizes(report: &mut Report<'_>, spec: &InstanceGroupSpec) {
    if let (Some(min), Some(max)) = (spec.min_size, spec.max_size) {
        if min > max {
            report.error(
                "spec.minSize",
                format!("{min} is larger than maxSize {max}"),
            );
        }
        if max > MAX_GROUP_SIZE {
            report.error(
                "spec.maxSize",
                format!("{max} is larger than {MAX_GROUP_SIZE}"),
            );
        }
        if spec.role == Role::ControlPlane && (min != 1 || max != 1) {
            report.error(
                "spec.minSize",
                format!(
                    "a control-plane group runs exactly one instance (one etcd member): set minSize and maxSize to 1, \
                     found {min} and {max}; add groups for more control-plane instances"
                ),
            );
        }
    }
}

fn check_group_subnets(
    report: &mut Report<'_>,
    spec: &InstanceGroupSpec,
    subnet_names: &BTreeSet<&str>,
) {
    if spec.subnets.is_empty() {
        report.error(
            "spec.subnets",
            "no subnet of the cluster fits this group: name one of the cluster's subnets",
        );
    }
    for (i, subnet) in spec.subnets.iter().enumerate() {
        if !subnet_names.contains(subnet.as_str()) {
            let known: Vec<&str> = subnet_names.iter().copied().collect();
            report.error(
                format!("spec.subnets[{i}]"),
                format!(
                    "{subnet:?} is not a subnet of the cluster (known: {})",
                    known.join(", ")
                ),
            );
        }
    }
}

fn check_root_volume(report: &mut Report<'_>, volume: &RootVolumeSpec) {
    if let Some(size) = volume.size {
        if !(8..=16_384).contains(&size) {
            report.error(
                "spec.rootVolume.size",
                format!("{size} GiB is outside 8..16384"),
            );
        }
    }
    if let Some(kind) = &volume.volume_type {
        if !["gp2", "gp3", "io1", "io2", "standard"].contains(&kind.as_str()) {
            report.error(
                "spec.rootVolume.type",
                format!("{kind:?} cannot be a root volume: use gp3, gp2, io1, io2 or standard"),
            );
        }
    }
    for problem in crate::ebs::check(crate::ebs::Performance {
        volume_type: volume.volume_type.as_deref().unwrap_or_default(),
        size_gib: volume.size.unwrap_or_default(),
        iops: volume.iops,
        throughput: volume.throughput,
    }) {
        report.error(
            format!("spec.rootVolume.{}", problem.field),
            problem.message,
        );
    }
    if let Some(key) = &volume.kms_key_id {
        if !crate::kms::is_key(key) {
            report.error(
                "spec.rootVolume.kmsKeyId",
                format!("{key:?} is not {}", crate::kms::KEY_FORMS),
            );
        }
        if volume.encrypted == Some(false) {
            report.error(
                "spec.rootVolume.kmsKeyId",
                "is set but encrypted is false: remove the key or encrypt the volume",
            );
        }
    }
}

fn check_instance_metadata(report: &mut Report<'_>, spec: &InstanceGroupSpec) {
    if let Some(metadata) = &spec.instance_metadata {
        if let Some(hops) = metadata.http_put_response_hop_limit {
            if !(1..=64).contains(&hops) {
                report.error(
                    "spec.instanceMetadata.httpPutResponseHopLimit",
                    format!("{hops} is outside 1..64"),
                );
            }
        }
    }
}

fn check_iam_profile(report: &mut Report<'_>, spec: &InstanceGroupSpec) {
    if let Some(iam) = &spec.iam {
        if let Some(profile) = &iam.profile {
            if !IAM_ARN.is_match(profile) || !profile.contains(":instance-profile/") {
                report.error(
                    "spec.iam.profile",
                    format!("{profile:?} is not an instance profile ARN (arn:aws:iam::ACCOUNT:instance-profile/NAME)"),
                );
            }
        }
    }
}

/// An object's `metadata.labels` are Kubernetes labels: each key a label name, each value a label value. Neither
/// may hold a control character, so none reaches an operator's terminal or a tool reading the stored spec.
fn check_metadata_labels(report: &mut Report<'_>, labels: &BTreeMap<String, String>) {
    for (key, value) in labels {
        let path = format!("metadata.labels.{key}");
        if !LABEL_NAME.is_match(key) {
            report.error(
                &path,
                format!(
                    "the key {key:?} is not a Kubernetes label name (an optional DNS prefix and `/`, then 1 to 63 \
                     letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit): rename the label"
                ),
            );
        }
        if !LABEL_VALUE.is_match(value) {
            report.error(
                &path,
                format!(
                    "{value:?} is not a Kubernetes label value (at most 63 letters, digits, `-`, `_` or `.`, \
                     starting and ending with a letter or digit): change the value"
                ),
            );
        }
    }
}

fn check_node_labels_and_taints(report: &mut Report<'_>, spec: &InstanceGroupSpec) {
    for (key, value) in &spec.node_labels {
        if !LABEL_NAME.is_match(key) {
            report.error(
                format!("spec.nodeLabels.{key}"),
                "is not a valid Kubernetes label name",
            );
        }
        if !LABEL_VALUE.is_match(value) {
            report.error(
                format!("spec.nodeLabels.{key}"),
                format!("{value:?} is not a valid Kubernetes label value"),
            );
        }
    }
    for (i, taint) in spec.taints.iter().flatten().enumerate() {
        if let Err(error) = check_taint(taint) {
            report.error(format!("spec.taints[{i}]"), error.to_string());
        }
    }
}

/// A taint that is not `key[=value]:Effect` with a known effect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{taint:?} is not a taint: use key[=value]:Effect, Effect one of NoSchedule, PreferNoSchedule, NoExecute")]
struct TaintError {
    taint: String,
}

/// A taint is `key[=value]:Effect`.
fn check_taint(taint: &str) -> Result<(), TaintError> {
    let invalid = || TaintError {
        taint: taint.to_string(),
    };
    let (key_value, effect) = taint.rsplit_once(':').ok_or_else(invalid)?;
    if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
        return Err(invalid());
    }
    let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
    if !LABEL_NAME.is_match(key) || !LABEL_VALUE.is_match(value) {
        return Err(invalid());
    }
    Ok(())
}

/// Whether the embedded `images/manifest.yaml` pins exactly this Kubernetes version (the AMI carries one
/// kubelet per minor); `None` when it does. Here, not in `rolling_update`, which the spec's types use: the
/// manifest's reader (`components`) uses the spec, so `rolling_update` using it closed a circle.
/// Why a new cluster may not run `version`: its release is past its end of life, kept only to upgrade from
/// (the message names the supported releases and the default); `None` when it may, or when `version` is not
/// pinned at all ([`check_kubernetes_version`] says so).
pub fn new_cluster_version_problem(version: &str) -> Option<String> {
    let manifest = crate::components::ComponentManifest::embedded().ok()?;
    manifest
        .new_cluster_problem(version, crate::defaults::DEFAULT_KUBERNETES_VERSION)
        .map(|e| e.to_string())
}

pub fn unpinned_version_problem(version: &str) -> Option<String> {
    match crate::components::ComponentManifest::embedded() {
        // A manifest that does not parse is caught by its own tests; nothing can be judged against it here.
        Err(e) => Some(format!("cannot read the embedded manifest: {e}")),
        Ok(manifest) => manifest.release_exact(version).err().map(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kops's `evictionHard` form: every threshold read, every bad one named.
    #[test]
    fn eviction_thresholds_are_signals_below_a_percentage_or_a_quantity() {
        let parsed = crate::spec::parse_eviction_hard(
            "memory.available<100Mi, nodefs.available<10%,imagefs.available<0.5%,pid.available<1000",
        )
        .expect("thresholds");
        assert_eq!(parsed["memory.available"], "100Mi");
        assert_eq!(parsed["imagefs.available"], "0.5%");
        assert_eq!(parsed.len(), 4);
        for (text, problem) in [
            ("memory.available>100Mi", "is not SIGNAL<VALUE"),
            ("disk.available<10%", "is not an eviction signal"),
            (
                "nodefs.available<101%",
                "neither a percentage from 0% to 100%",
            ),
            ("nodefs.available<-1%", "neither a percentage"),
            ("memory.available<lots", "nor a quantity"),
            ("memory.available<100Qi", "nor a quantity"),
            ("memory.available<1Mi,memory.available<2Mi", "given twice"),
            (" , ", "names no threshold"),
        ] {
            let err = crate::spec::parse_eviction_hard(text).expect_err(text);
            assert!(err.contains(problem), "{text}: {err}");
        }
    }

    #[test]
    fn taints_need_a_known_effect() {
        assert!(check_taint("dedicated=gpu:NoSchedule").is_ok());
        assert!(check_taint("node-role.kubernetes.io/control-plane:NoSchedule").is_ok());
        assert!(check_taint("dedicated=gpu").is_err());
        assert!(check_taint("dedicated=gpu:Sometimes").is_err());
    }

    #[test]
    fn cluster_names_are_dns_names() {
        assert!(check_cluster_name("demo.example.com").is_ok());
        assert!(check_cluster_name("Demo.example.com").is_err());
        assert!(check_cluster_name("-demo.example.com").is_err());
        assert!(check_cluster_name("demo..example.com").is_err());
        assert!(check_cluster_name("").is_err());
    }

    /// IAM role names are at most 64 characters and the longest is `control-plane.<cluster>`: a 50-character
    /// name is the longest that fits, and one more is refused saying why.
    #[test]
    fn cluster_names_fit_the_iam_role_names_made_from_them() {
        let longest = format!("{}.example.com", "a".repeat(MAX_CLUSTER_NAME_CHARS - 12));
        assert_eq!(longest.len(), 50);
        assert!(check_cluster_name(&longest).is_ok());
        assert_eq!(format!("control-plane.{longest}").len(), 64);
        let too_long = format!("b{longest}");
        let message = check_cluster_name(&too_long)
            .expect_err("51 characters")
            .to_string();
        assert_eq!(
            message,
            format!(
                "{too_long:?} is 51 characters, longer than 50: the cluster's IAM roles are named \
                 control-plane.<cluster>, and IAM allows role names of at most 64 characters; choose a shorter name"
            )
        );
        // A huge name is not quoted whole.
        let huge = "a.".repeat(5_000) + "com";
        assert!(
            check_cluster_name(&huge)
                .expect_err("huge")
                .to_string()
                .len()
                < 400
        );
    }

    fn config_with_groups(count: usize) -> ClusterConfig {
        let text = include_str!("../tests/data/good/ha-public.yaml");
        let objects = crate::document::parse_spec_file("spec.yaml", text).expect("parses");
        let mut config =
            crate::document::config_from_objects("spec.yaml", objects).expect("config");
        let node = config
            .instance_groups
            .iter()
            .find(|g| g.spec.role == Role::Node)
            .expect("a node group")
            .clone();
        while config.instance_groups.len() < count {
            let mut group = node.clone();
            group.metadata.name = format!("nodes-{}", config.instance_groups.len());
            config.instance_groups.push(group);
        }
        crate::defaults::complete(&config)
    }

    #[test]
    fn the_number_of_instance_groups_is_bounded() {
        assert_eq!(validate(&config_with_groups(MAX_INSTANCE_GROUPS)), vec![]);
        let errors = validate(&config_with_groups(MAX_INSTANCE_GROUPS + 1));
        assert_eq!(
            errors,
            vec![FieldError::new(
                "Cluster/demo.example.com",
                "",
                "has 101 instance groups, more than 100: each is an Auto Scaling group, a launch template and AWS \
                 calls on every update; use fewer, larger groups"
            )]
        );
    }

    #[test]
    fn only_pinned_versions_are_accepted() {
        assert_eq!(unpinned_version_problem("1.33.4"), None);
        assert_eq!(unpinned_version_problem("1.32.8"), None);
        let unknown = unpinned_version_problem("1.34.99").expect("refused");
        assert!(unknown.contains("1.34"), "{unknown}");
        let patch = unpinned_version_problem("1.33.5").expect("refused");
        assert!(patch.contains("1.33.4"), "{patch}");
    }
}
