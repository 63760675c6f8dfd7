//! The cluster's desired AWS resources, built purely from the completed spec: names, tags, rules and policies.
//! Nothing here talks to AWS; ids that only exist once something is created are resolved by the engine.

use std::collections::BTreeMap;

use ballast_state::digest::sha256_hex;
use ballast_state::spec::{
    ClusterConfig, HttpTokens, InstanceGroup, LoadBalancerType, Networking, Role, SubnetType,
    Topology,
};

pub use super::aws::{
    group_resource_name, ownership_tag, CLUSTER_ID_TAG, CLUSTER_TAG, GROUP_TAG, NODE_SPEC_HASH_TAG,
    ROLE_TAG,
};

/// Where the state store is, for IAM policies and boot configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateLocation {
    pub bucket: String,
    /// Without leading or trailing slashes; may be empty.
    pub prefix: String,
}

impl StateLocation {
    /// Parses `s3://bucket[/prefix]`; `None` for any other store (nodes can only read S3).
    pub fn from_url(url: &str) -> Option<Self> {
        let rest = url.strip_prefix("s3://")?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        (!bucket.is_empty()).then(|| StateLocation {
            bucket: bucket.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
        })
    }

    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    /// `arn:aws:s3:::bucket/prefix/key`
    pub(crate) fn object_arn(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            format!("arn:aws:s3:::{}/{key}", self.bucket)
        } else {
            format!("arn:aws:s3:::{}/{}/{key}", self.bucket, self.prefix)
        }
    }

    fn key_prefix(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        }
    }
}

/// Everything `update cluster` wants to exist.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterModel {
    pub cluster: String,
    pub region: String,
    pub state: StateLocation,
    /// Tags of every owned resource (ownership tags, the cluster id once bound, cloudLabels); kinds add `Name`
    /// and their own.
    pub tags: BTreeMap<String, String>,
    /// The cluster's id from its state store, once [`ClusterModel::bound_to`] it: in `tags` and every group's.
    pub cluster_id: Option<String>,
    pub vpc: VpcModel,
    pub subnets: Vec<SubnetModel>,
    /// An internet gateway and a public route table, when the cluster owns its VPC and has public subnets.
    pub internet_gateway: bool,
    pub security_groups: Vec<SecurityGroupModel>,
    pub roles: Vec<IamRoleModel>,
    pub load_balancer: LoadBalancerModel,
    pub groups: Vec<GroupModel>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VpcModel {
    Owned { cidr: String },
    Shared { id: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetModel {
    /// The spec's subnet name.
    pub name: String,
    /// The AWS Name tag: `<name>.<cluster>`.
    pub resource_name: String,
    pub zone: String,
    pub cidr: Option<String>,
    pub shared_id: Option<String>,
    pub public: bool,
}

pub use super::rules::{IngressRule, Source};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityGroupModel {
    pub role: Role,
    pub name: String,
    pub description: String,
    pub rules: Vec<IngressRule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IamRoleModel {
    pub role: Role,
    /// Name of the role, its inline policy and its instance profile.
    pub name: String,
    pub assume_role_policy: String,
    pub policy: String,
    pub permissions_boundary: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancerModel {
    pub name: String,
    pub target_group_name: String,
    pub internal: bool,
    /// Names of the subnets it lives in (one per zone).
    pub subnets: Vec<String>,
    /// `spec.api.loadBalancer.additionalSecurityGroups`, sorted: given at creation only.
    pub security_groups: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupModel {
    pub name: String,
    /// Name of its launch template and Auto Scaling Group: `<group>.<cluster>`.
    pub resource_name: String,
    pub role: Role,
    pub machine_type: String,
    /// An AMI id, or a name to look up.
    pub image: String,
    pub min_size: i32,
    pub max_size: i32,
    pub subnets: Vec<String>,
    pub root_volume_size: i32,
    pub root_volume_type: String,
    pub root_volume_encrypted: bool,
    pub root_volume_kms_key: Option<String>,
    /// The root volume's provisioned IOPS and throughput (MiB/s) as the spec sets them; unset: the type's own
    /// (gp3's baseline), left to AWS.
    pub root_volume_iops: Option<i32>,
    pub root_volume_throughput: Option<i32>,
    pub http_tokens_required: bool,
    pub hop_limit: i32,
    /// An existing instance profile to use instead of the role's own.
    pub shared_profile: Option<String>,
    pub tags: BTreeMap<String, String>,
    /// Tags of each instance's primary network interface, set at launch: the group's tags, and with amazon-vpc
    /// the CNI's cluster tag, which its permissions are held to (`super::cni`).
    pub network_interface_tags: BTreeMap<String, String>,
    /// Mixed instances and spot, protection, lifetime, extra security groups, external load balancers, public IP.
    pub aws: super::group_aws::GroupAws,
    /// Extra EBS volumes (`spec.volumes`, completed): block device mappings of the launch template after the
    /// root volume's.
    pub volumes: Vec<ballast_state::spec::VolumeSpec>,
    /// Tags of the Auto Scaling group alone, for the cluster autoscaler (`ballast_state::autoscaler::asg_tags`:
    /// discovery and node template): not on the launch template, so turning the autoscaler on or off, or a
    /// group's `autoscale`, replaces no instance.
    pub autoscaler_tags: BTreeMap<String, String>,
}

impl GroupModel {
    /// Every tag of its Auto Scaling group: the group's, and the autoscaler's.
    pub fn asg_tags(&self) -> BTreeMap<String, String> {
        let mut tags = self.tags.clone();
        tags.extend(self.autoscaler_tags.clone());
        tags
    }
}

/// The groups with the cluster autoscaler's tags (`super::autoscaler`).
fn with_autoscaler_tags(
    mut groups: Vec<GroupModel>,
    cluster: &str,
    completed: &ClusterConfig,
) -> Vec<GroupModel> {
    for group in &mut groups {
        if let Some(ig) = completed.instance_group(&group.name) {
            group.autoscaler_tags =
                ballast_state::autoscaler::asg_tags(cluster, &completed.cluster.spec, ig);
        }
    }
    groups
}

/// Builds the model. `state` must be an S3 location: nodes fetch their specs from S3.
pub fn cluster_model(completed: &ClusterConfig, state: &StateLocation) -> ClusterModel {
    let name = completed.name().to_string();
    let spec = &completed.cluster.spec;
    let mut tags = spec.cloud_labels.clone();
    tags.insert(ownership_tag(&name), "owned".to_string());
    tags.insert(CLUSTER_TAG.to_string(), name.clone());

    let vpc = match (&spec.network_id, &spec.network_cidr) {
        (Some(id), _) => VpcModel::Shared { id: id.clone() },
        (None, cidr) => VpcModel::Owned {
            cidr: cidr.clone().unwrap_or_default(),
        },
    };
    let subnets: Vec<SubnetModel> = spec
        .subnets
        .iter()
        .map(|s| SubnetModel {
            name: s.name.clone(),
            resource_name: format!("{}.{name}", s.name),
            zone: s.zone.clone(),
            cidr: s.cidr.clone(),
            shared_id: s.id.clone(),
            public: s.subnet_type == Some(SubnetType::Public),
        })
        .collect();
    let internet_gateway = matches!(vpc, VpcModel::Owned { .. })
        && subnets.iter().any(|s| s.public && s.shared_id.is_none());

    let network_cidr = spec.network_cidr.clone().unwrap_or_default();
    let security_groups = security_groups(&name, completed, &network_cidr);
    let roles = iam_roles(&name, completed, state);
    let load_balancer = load_balancer(&name, completed, &subnets);
    let groups = completed
        .instance_groups
        .iter()
        .map(|ig| GroupModel {
            aws: super::group_aws::group_aws(completed, &ig.spec),
            ..group_model(&name, ig, &tags, spec.networking)
        })
        .collect();
    let groups = with_autoscaler_tags(groups, &name, completed);
    ClusterModel {
        cluster: name,
        region: spec.region.clone().unwrap_or_default(),
        state: state.clone(),
        tags,
        cluster_id: None,
        vpc,
        subnets,
        internet_gateway,
        security_groups,
        roles,
        load_balancer,
        groups,
    }
}

impl ClusterModel {
    /// The model of the cluster whose state store holds id `id`: every tag map resources get from the model (the
    /// cluster's, each group's and its network interfaces') carries `ballast.dev/cluster-id=<id>`, so each
    /// resource Ballast makes, and each one Terraform makes from `--target terraform`, is bound to this store's
    /// cluster. The one place the id joins the tags.
    pub fn bound_to(mut self, id: &str) -> Self {
        let tag = (CLUSTER_ID_TAG.to_string(), id.to_string());
        self.tags.insert(tag.0.clone(), tag.1.clone());
        for group in &mut self.groups {
            group.tags.insert(tag.0.clone(), tag.1.clone());
            group
                .network_interface_tags
                .insert(tag.0.clone(), tag.1.clone());
        }
        self.cluster_id = Some(id.to_string());
        self
    }

    /// Zones whose owned private subnets need a NAT gateway (only in a VPC the cluster owns: a shared VPC's
    /// routing is its owner's).
    pub fn nat_zones(&self) -> Vec<String> {
        if !matches!(self.vpc, VpcModel::Owned { .. }) {
            return Vec::new();
        }
        let mut zones: Vec<String> = self
            .subnets
            .iter()
            .filter(|s| !s.public && s.shared_id.is_none())
            .map(|s| s.zone.clone())
            .collect();
        zones.sort();
        zones.dedup();
        zones
    }
}

/// `control-plane.demo.example.com`, `nodes.demo.example.com`: names of per-role resources.
pub fn role_resource_name(cluster: &str, role: Role) -> String {
    match role {
        Role::ControlPlane => format!("control-plane.{cluster}"),
        Role::Node => format!("nodes.{cluster}"),
        Role::Bastion => format!("bastions.{cluster}"),
        Role::ApiServer => format!("api-servers.{cluster}"),
    }
}

fn rule(protocol: &str, from_port: i32, to_port: i32, source: Source) -> IngressRule {
    IngressRule {
        protocol: protocol.to_string(),
        from_port,
        to_port,
        source,
    }
}

fn security_groups(
    cluster: &str,
    completed: &ClusterConfig,
    network_cidr: &str,
) -> Vec<SecurityGroupModel> {
    let spec = &completed.cluster.spec;
    // With bastions (super::bastions), sshAccess opens them, and the instances take SSH from them only.
    let bastions = super::bastions::has_bastions(completed);
    let ssh: Vec<IngressRule> = if bastions {
        vec![super::bastions::ssh_to_instances()]
    } else {
        spec.ssh_access
            .iter()
            .flatten()
            .map(|cidr| rule("tcp", 22, 22, Source::Cidr(cidr.clone())))
            .collect()
    };
    let mut control_plane = vec![
        // etcd (2379-2380), the API and everything else between control-plane members.
        rule("-1", -1, -1, Source::Group(Role::ControlPlane)),
        // Nodes reach everything on the control plane but etcd.
        rule("tcp", 1, 2378, Source::Group(Role::Node)),
        rule("tcp", 2381, 65535, Source::Group(Role::Node)),
        rule("udp", 1, 65535, Source::Group(Role::Node)),
    ];
    // The network load balancer keeps clients' addresses, and health-checks from inside the VPC.
    for cidr in spec.kubernetes_api_access.iter().flatten() {
        control_plane.push(rule("tcp", 443, 443, Source::Cidr(cidr.clone())));
    }
    if !network_cidr.is_empty() {
        control_plane.push(rule(
            "tcp",
            443,
            443,
            Source::Cidr(network_cidr.to_string()),
        ));
    }
    control_plane.extend(ssh.iter().cloned());
    if let Some(networking) = spec.networking {
        control_plane.extend(super::cni::cni_control_plane_rules(networking));
    }
    let mut nodes = vec![
        rule("-1", -1, -1, Source::Group(Role::Node)),
        rule("-1", -1, -1, Source::Group(Role::ControlPlane)),
    ];
    nodes.extend(ssh.iter().cloned());
    // API-server groups (super::api_servers): etcd's client port on the control plane, all of the nodes.
    let api_servers = super::api_servers::has_api_servers(completed);
    if api_servers {
        let cni = control_plane.clone();
        control_plane.extend(super::api_servers::control_plane_rules(&cni));
        nodes.extend(super::api_servers::node_rules());
    }
    for rules in [&mut control_plane, &mut nodes] {
        rules.sort();
        rules.dedup();
    }
    let mut groups = vec![
        SecurityGroupModel {
            role: Role::ControlPlane,
            name: role_resource_name(cluster, Role::ControlPlane),
            description: format!("Control plane of the Kubernetes cluster {cluster}"),
            rules: control_plane,
        },
        SecurityGroupModel {
            role: Role::Node,
            name: role_resource_name(cluster, Role::Node),
            description: format!("Nodes of the Kubernetes cluster {cluster}"),
            rules: nodes,
        },
    ];
    if api_servers {
        groups.push(SecurityGroupModel {
            role: Role::ApiServer,
            name: role_resource_name(cluster, Role::ApiServer),
            description: format!("API servers of the Kubernetes cluster {cluster}"),
            rules: super::api_servers::security_group_rules(completed, network_cidr, &ssh),
        });
    }
    if bastions {
        groups.push(SecurityGroupModel {
            role: Role::Bastion,
            name: role_resource_name(cluster, Role::Bastion),
            description: format!("Bastions (SSH jump hosts) of the Kubernetes cluster {cluster}"),
            rules: super::bastions::security_group_rules(completed),
        });
    }
    groups
}

const EC2_TRUST_POLICY: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

/// What every node writes of its own and nothing of another's, its boot report (ballast_state::report) and log
/// tail (ballast_state::log_tail): `${aws:userid}` is `<role-id>:<instance-id>` for an instance role's session
/// (IAM's policy variables; EC2 names the session by the instance id, and the roles trust only EC2), so the one
/// key of each prefix a node may write names its instance. No node reads a tail or another's report.
fn own_keys_statement(object: &dyn Fn(&str) -> String) -> serde_json::Value {
    serde_json::json!({"Sid": "WriteOwnReportAndLogTail", "Effect": "Allow", "Action": ["s3:PutObject"],
        "Resource": [object("reports/${aws:userid}.json"), object("logs/${aws:userid}.json")]})
}

/// Least privilege: the control plane reads its cluster's state and writes its reports and etcd data; nodes read
/// only the node specs of node groups and the Kubernetes CA certificates (the original and any a rotation added;
/// no key, no secret, no token), and write their reports. The control plane also holds what the cloud controller
/// manager it runs needs (super::ccm).
fn iam_roles(cluster: &str, completed: &ClusterConfig, state: &StateLocation) -> Vec<IamRoleModel> {
    let spec = &completed.cluster.spec;
    let iam = spec.iam.clone().unwrap_or_default();
    let object = |key: &str| state.object_arn(&format!("{cluster}/{key}"));
    let own_keys = own_keys_statement(&object);
    let control_plane = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ReadClusterState", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [object("*")]},
            // etcd's objects, and where workers find the node bootstrap service (ballast_state::node_bootstrap;
            // workers may read it, not write it).
            {"Sid": "WriteEtcd", "Effect": "Allow", "Action": ["s3:PutObject", "s3:DeleteObject"],
             "Resource": [object("etcd/*"), object("control-plane/node-bootstrap.json")]},
            // Its own boot report and log tail only: the keys are the role session's aws:userid.
            own_keys.clone(),
            {"Sid": "ListClusterState", "Effect": "Allow", "Action": ["s3:ListBucket"],
             "Resource": [format!("arn:aws:s3:::{}", state.bucket)],
             "Condition": {"StringLike": {"s3:prefix": [state.key_prefix(&format!("{cluster}/*"))]}}},
            {"Sid": "DiscoverPeers", "Effect": "Allow", "Resource": "*", "Action": [
                "ec2:DescribeInstances", "ec2:DescribeTags", "autoscaling:DescribeAutoScalingGroups",
                "autoscaling:DescribeAutoScalingInstances", "elasticloadbalancing:DescribeLoadBalancers",
                "elasticloadbalancing:DescribeTargetGroups", "elasticloadbalancing:DescribeTargetHealth"]},
            // The node bootstrap service checks that a worker's STS role is its instance profile's
            // (docs/node-identity.md). Read-only; "*" because the profile is the one EC2 names on the instance.
            {"Sid": "VerifyNodeProfiles", "Effect": "Allow", "Action": ["iam:GetInstanceProfile"], "Resource": "*"},
            {"Sid": "FindEtcdVolumes", "Effect": "Allow", "Action": ["ec2:DescribeVolumes"], "Resource": "*"},
            // A control-plane instance attaches its etcd member's volume: only volumes the cluster owns, and only
            // to the cluster's control-plane instances (AWS checks each resource of AttachVolume on its own).
            {"Sid": "AttachOwnEtcdVolumes", "Effect": "Allow", "Action": ["ec2:AttachVolume", "ec2:DetachVolume"],
             "Resource": ["arn:aws:ec2:*:*:volume/*"],
             "Condition": {"StringEquals": {format!("ec2:ResourceTag/{}", ownership_tag(cluster)): "owned"}}},
            {"Sid": "AttachToOwnControlPlane", "Effect": "Allow", "Action": ["ec2:AttachVolume", "ec2:DetachVolume"],
             "Resource": ["arn:aws:ec2:*:*:instance/*"],
             "Condition": {"StringEquals": {
                 format!("ec2:ResourceTag/{}", ownership_tag(cluster)): "owned",
                 format!("ec2:ResourceTag/{ROLE_TAG}"): Role::ControlPlane.tag_value()}}},
        ]
    });
    let node_specs: Vec<String> = completed
        .instance_groups
        .iter()
        .filter(|ig| ig.spec.role == Role::Node)
        .map(|ig| object(&format!("nodes/{}/*", ig.metadata.name)))
        // The CA certificates, and no secret: a worker's kubelet certificate comes from the control plane's
        // bootstrap service once the worker proved which instance it is (docs/node-identity.md). The original CA
        // and those a rotation added (`pki/kubernetes-ca/<id>/cert.pem`, docs/keys.md): the pattern ends in
        // `/cert.pem`, so it matches no key (`key.pem`).
        // And where the control-plane nodes' bootstrap services are (addresses only).
        .chain([
            object("pki/kubernetes-ca/cert.pem"),
            object("pki/kubernetes-ca/*/cert.pem"),
            object("control-plane/node-bootstrap.json"),
        ])
        .collect();
    let mut node_statements = vec![
        serde_json::json!({"Sid": "ReadNodeSpecs", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": node_specs}),
        own_keys.clone(),
        serde_json::json!({"Sid": "DescribeSelf", "Effect": "Allow", "Action": ["ec2:DescribeInstances"], "Resource": "*"}),
    ];
    if iam.allow_container_registry.unwrap_or(true) {
        node_statements.push(serde_json::json!({"Sid": "PullFromContainerRegistry", "Effect": "Allow", "Resource": "*", "Action": [
            "ecr:GetAuthorizationToken", "ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"]}));
    }
    let nodes = serde_json::json!({"Version": "2012-10-17", "Statement": node_statements});
    let kms = state_kms_statement(completed);
    // What the CNI needs on every instance (super::cni): nothing unless it is amazon-vpc, and nothing when its
    // aws-node runs on a role of its own with IRSA (kinds::service_account_roles).
    let cni: Vec<serde_json::Value> = spec
        .networking
        .into_iter()
        .filter(|_| !ballast_state::irsa::aws_node_on_irsa(spec))
        .flat_map(|n| super::cni::cni_iam_statements(n, cluster))
        .collect();
    let mut roles = vec![(Role::ControlPlane, control_plane), (Role::Node, nodes)];
    if super::api_servers::has_api_servers(completed) {
        let statements = super::api_servers::iam_statements(completed, object, own_keys);
        roles.push((
            Role::ApiServer,
            serde_json::json!({"Version": "2012-10-17", "Statement": statements}),
        ));
    }
    if super::bastions::has_bastions(completed) {
        let statements = super::bastions::iam_statements(completed, object);
        roles.push((
            Role::Bastion,
            serde_json::json!({"Version": "2012-10-17", "Statement": statements}),
        ));
    }
    roles
        .into_iter()
        .map(|(role, mut policy)| {
            if let Some(statements) = policy["Statement"].as_array_mut() {
                statements.extend(kms.iter().cloned());
                // A bastion runs no pod network (super::bastions).
                if role != Role::Bastion {
                    statements.extend(cni.iter().cloned());
                }
                // The cloud controller manager and the EBS CSI driver's controller run on control-plane nodes
                // only (super::ccm, super::ebs_csi).
                if role == Role::ControlPlane {
                    // With IRSA they run on roles of their own (kinds::service_account_roles), and their
                    // statements leave the instance role.
                    // So does the cluster autoscaler's (super::autoscaler) when it is on.
                    if !ballast_state::irsa::addons_on_irsa(spec) {
                        statements.extend(super::ccm::ccm_iam_statements(
                            cluster,
                            spec.networking == Some(Networking::Kubenet),
                        ));
                        statements.extend(super::ebs_csi::ebs_csi_iam_statements(cluster));
                        if ballast_state::autoscaler::enabled(spec) {
                            statements
                                .extend(super::autoscaler::autoscaler_iam_statements(cluster));
                        }
                    }
                    // The termination handler (super::termination_iam, docs/termination.md).
                    if let Some(termination) = super::termination_iam::iam_statements(completed) {
                        statements.extend(termination);
                    }
                    // The audit shipper (super::audit).
                    let state_bucket = ballast_state::audit::AuditDestination {
                        bucket: state.bucket.clone(),
                        prefix: state.prefix.clone(),
                    };
                    statements.extend(super::audit::audit_iam_statements(
                        cluster,
                        completed,
                        &state_bucket,
                    ));
                }
            }
            (role, policy)
        })
        .map(|(role, policy)| IamRoleModel {
            role,
            name: role_resource_name(cluster, role),
            assume_role_policy: EC2_TRUST_POLICY.to_string(),
            policy: policy.to_string(),
            permissions_boundary: iam.permissions_boundary.clone(),
        })
        .collect()
}

/// With an SSE-KMS state store (`spec.stateStore.kmsKeyId`), what every node needs of its key, and no more:
/// `kms:Decrypt` to read its objects and `kms:GenerateDataKey` to write (single-part PutObject), on that key
/// only, and only through S3 in the cluster's region.
fn state_kms_statement(completed: &ClusterConfig) -> Option<serde_json::Value> {
    let spec = &completed.cluster.spec;
    let key = spec.state_store.as_ref()?.kms_key_id.as_ref()?;
    let region = spec.region.clone().unwrap_or_default();
    Some(
        serde_json::json!({"Sid": "UseStateStoreKey", "Effect": "Allow",
        "Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Resource": [key],
        "Condition": {"StringEquals": {"kms:ViaService": format!("s3.{region}.amazonaws.com")}}}),
    )
}

/// NLB and target group names: at most 32 letters, digits and hyphens, unique per cluster name. Dots become
/// hyphens, so `a-b.example.com` and `a.b.example.com` would read alike: a hash of the cluster's name always ends
/// the name, which keeps such clusters apart (and their resources are checked for the cluster's tag as well).
pub fn elb_name(prefix: &str, cluster: &str) -> String {
    let hash = &sha256_hex(cluster.as_bytes())[..8];
    let base = format!("{prefix}-{}", cluster.replace('.', "-"));
    let head: String = base.chars().take(32 - 9).collect();
    format!("{}-{hash}", head.trim_end_matches('-'))
}

/// The names a cluster's load balancer or target group may have, to look for in this order: [`elb_name`], then
/// the name clusters created before the hash was always added were given (hashed only past 32 characters). An
/// old cluster's load balancer is found and kept under its old name (its DNS name is in every certificate and
/// kubeconfig), and deleted with the cluster; either is adopted only when tagged as the cluster's.
pub fn elb_names(prefix: &str, cluster: &str) -> Vec<String> {
    let base = format!("{prefix}-{}", cluster.replace('.', "-"));
    let before = if base.len() <= 32 {
        base
    } else {
        let hash = &sha256_hex(cluster.as_bytes())[..8];
        let head: String = base.chars().take(32 - 9).collect();
        format!("{}-{hash}", head.trim_end_matches('-'))
    };
    let now = elb_name(prefix, cluster);
    if before == now {
        vec![now]
    } else {
        vec![now, before]
    }
}

fn load_balancer(
    cluster: &str,
    completed: &ClusterConfig,
    subnets: &[SubnetModel],
) -> LoadBalancerModel {
    let spec = &completed.cluster.spec;
    let internal = spec
        .api
        .as_ref()
        .and_then(|a| a.load_balancer.as_ref())
        .and_then(|lb| lb.lb_type)
        == Some(LoadBalancerType::Internal);
    // A public load balancer needs public subnets; an internal one lives where the instances do.
    let want_public = !internal || spec.topology != Some(Topology::Private);
    let mut zones_seen = Vec::new();
    let mut chosen = Vec::new();
    for subnet in subnets.iter().filter(|s| s.public == want_public) {
        if !zones_seen.contains(&subnet.zone) {
            zones_seen.push(subnet.zone.clone());
            chosen.push(subnet.name.clone());
        }
    }
    let mut security_groups = spec
        .api
        .as_ref()
        .and_then(|a| a.load_balancer.as_ref())
        .map(|lb| lb.additional_security_groups.clone())
        .unwrap_or_default();
    // AWS reports them in no promised order: compared as sets.
    security_groups.sort();
    LoadBalancerModel {
        name: elb_name("api", cluster),
        target_group_name: elb_name("tcp", cluster),
        internal,
        subnets: chosen,
        security_groups,
    }
}

fn group_model(
    cluster: &str,
    ig: &InstanceGroup,
    cluster_tags: &BTreeMap<String, String>,
    networking: Option<Networking>,
) -> GroupModel {
    let spec = &ig.spec;
    let volume = spec.root_volume.clone().unwrap_or_default();
    let metadata = spec.instance_metadata.clone().unwrap_or_default();
    let resource_name = group_resource_name(&ig.metadata.name, cluster);
    let mut tags = cluster_tags.clone();
    tags.extend(spec.cloud_labels.clone());
    tags.insert(ROLE_TAG.to_string(), spec.role.tag_value().to_string());
    tags.insert(GROUP_TAG.to_string(), ig.metadata.name.clone());
    tags.insert("Name".to_string(), resource_name.clone());
    let mut network_interface_tags = tags.clone();
    if networking == Some(Networking::AmazonVpc) {
        network_interface_tags.insert(super::cni::CNI_CLUSTER_TAG.to_string(), cluster.to_string());
    }
    GroupModel {
        name: ig.metadata.name.clone(),
        resource_name,
        role: spec.role,
        machine_type: spec.machine_type.clone().unwrap_or_default(),
        image: spec.image.clone().unwrap_or_default(),
        min_size: spec.min_size.unwrap_or(0) as i32,
        max_size: spec.max_size.unwrap_or(0) as i32,
        subnets: spec.subnets.clone(),
        root_volume_size: volume.size.unwrap_or(0) as i32,
        root_volume_type: volume.volume_type.unwrap_or_default(),
        root_volume_encrypted: volume.encrypted.unwrap_or(true),
        root_volume_kms_key: volume.kms_key_id,
        root_volume_iops: volume.iops.map(|v| i32::try_from(v).unwrap_or(i32::MAX)),
        root_volume_throughput: volume
            .throughput
            .map(|v| i32::try_from(v).unwrap_or(i32::MAX)),
        http_tokens_required: metadata.http_tokens != Some(HttpTokens::Optional),
        hop_limit: metadata.http_put_response_hop_limit.unwrap_or(1) as i32,
        shared_profile: spec.iam.as_ref().and_then(|i| i.profile.clone()),
        tags,
        network_interface_tags,
        aws: Default::default(),
        volumes: spec.volumes.clone(),
        autoscaler_tags: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_state::defaults::complete;
    use ballast_state::generate::{generate, ClusterTemplate};

    fn model() -> ClusterModel {
        let config = complete(
            &generate(&ClusterTemplate {
                name: "demo.example.com".into(),
                zones: vec![
                    "us-west-2a".into(),
                    "us-west-2b".into(),
                    "us-west-2c".into(),
                ],
                ssh_access: vec!["203.0.113.0/24".into()],
                ..Default::default()
            })
            .expect("template"),
        );
        cluster_model(
            &config,
            &StateLocation::from_url("s3://state/clusters").expect("s3"),
        )
    }

    #[test]
    fn both_roles_may_use_the_state_store_key_and_only_it() {
        let policies = |config: &ClusterConfig| -> Vec<serde_json::Value> {
            let state = StateLocation::from_url("s3://state").expect("s3");
            cluster_model(config, &state)
                .roles
                .iter()
                .map(|r| serde_json::from_str(&r.policy).expect("policy JSON"))
                .collect()
        };
        let mut config = complete(
            &generate(&ClusterTemplate {
                name: "demo.example.com".into(),
                zones: vec!["us-west-2a".into()],
                ..Default::default()
            })
            .expect("template"),
        );
        for policy in policies(&config) {
            assert!(!policy.to_string().contains("kms:"), "{policy}");
        }
        let key = "arn:aws:kms:us-west-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab";
        config.cluster.spec.state_store = Some(ballast_state::spec::StateStoreSpec {
            kms_key_id: Some(key.into()),
        });
        for policy in policies(&config) {
            let kms: Vec<&serde_json::Value> = policy["Statement"]
                .as_array()
                .expect("statements")
                .iter()
                .filter(|s| s.to_string().contains("kms:"))
                .collect();
            assert_eq!(kms.len(), 1, "{policy}");
            assert_eq!(
                kms[0]["Action"],
                serde_json::json!(["kms:Decrypt", "kms:GenerateDataKey"])
            );
            assert_eq!(kms[0]["Resource"], serde_json::json!([key]));
            assert_eq!(
                kms[0]["Condition"]["StringEquals"]["kms:ViaService"],
                "s3.us-west-2.amazonaws.com"
            );
        }
    }

    #[test]
    fn the_control_plane_attaches_only_its_clusters_volumes_to_its_control_plane() {
        let model = model();
        let role = |r: Role| {
            let policy = &model
                .roles
                .iter()
                .find(|m| m.role == r)
                .expect("role")
                .policy;
            serde_json::from_str::<serde_json::Value>(policy).expect("policy JSON")
        };
        let cp = role(Role::ControlPlane);
        let statements = cp["Statement"].as_array().expect("statements");
        // etcd's volumes; the EBS CSI driver's statements (super::ebs_csi, tested there) are held to volumes that
        // also carry the driver's tag, which etcd's do not.
        let attach: Vec<&serde_json::Value> = statements
            .iter()
            .filter(|s| s["Action"].to_string().contains("ec2:AttachVolume"))
            .filter(|s| !s["Sid"].as_str().unwrap_or("").starts_with("EbsCsi"))
            .collect();
        assert_eq!(attach.len(), 2, "{cp}");
        for statement in &attach {
            assert_eq!(
                statement["Condition"]["StringEquals"]
                    ["ec2:ResourceTag/kubernetes.io/cluster/demo.example.com"],
                "owned",
                "{statement}"
            );
            assert_ne!(statement["Resource"], "*", "{statement}");
        }
        let instance = attach
            .iter()
            .find(|s| s["Resource"].to_string().contains(":instance/"))
            .expect("the instance statement");
        assert_eq!(
            instance["Condition"]["StringEquals"]["ec2:ResourceTag/ballast.dev/role"],
            "control-plane"
        );
        let nodes = role(Role::Node).to_string();
        assert!(!nodes.contains("AttachVolume"), "{nodes}");
    }

    #[test]
    fn elb_names_fit_aws_limits_and_never_collide() {
        let name = elb_name("api", "demo.example.com");
        assert!(name.starts_with("api-demo-example-com-"), "{name}");
        let long = elb_name("api", "a-very-long-cluster-name.k8s.example.com");
        assert!(long.len() <= 32, "{long}");
        assert!(long.starts_with("api-a-very-long"), "{long}");
        assert_ne!(
            long,
            elb_name("api", "a-very-long-cluster-name.k8s.example.org")
        );
        // A cluster made before the hash: its old names are looked for after the new ones.
        assert_eq!(
            elb_names("api", "demo.example.com"),
            vec![
                elb_name("api", "demo.example.com"),
                "api-demo-example-com".to_string()
            ]
        );
        // A name too long for the old scheme was hashed the same way then: one name to look for.
        assert_eq!(
            elb_names("tcp", "a-very-long-cluster-name.k8s.example.com"),
            vec![elb_name("tcp", "a-very-long-cluster-name.k8s.example.com")]
        );
        // Names that differ only in '.' and '-' map to the same letters: the hash keeps them apart.
        for prefix in ["api", "tcp"] {
            assert_ne!(
                elb_name(prefix, "a-b.example.com"),
                elb_name(prefix, "a.b.example.com")
            );
            assert_ne!(
                elb_name(prefix, "a.b-c.example.com"),
                elb_name(prefix, "a-b.c.example.com")
            );
        }
    }

    #[test]
    fn nodes_may_read_only_node_specs_the_ca_certificate_and_the_bootstrap_services() {
        let model = model();
        let nodes = model
            .roles
            .iter()
            .find(|r| r.role == Role::Node)
            .expect("nodes role");
        assert!(nodes
            .policy
            .contains("arn:aws:s3:::state/clusters/demo.example.com/nodes/nodes/*"));
        assert!(nodes.policy.contains("pki/kubernetes-ca/cert.pem"));
        assert!(nodes.policy.contains("pki/kubernetes-ca/*/cert.pem"));
        assert!(!nodes.policy.contains("key.pem"), "{}", nodes.policy);
        // Every S3 resource a node may read ends in a node spec's prefix or in `/cert.pem` (never a key), and no
        // other CA's certificate is among them.
        let policy: serde_json::Value = serde_json::from_str(&nodes.policy).expect("json");
        // The resources of every statement whose actions name `action`.
        let resources_of = |action: &str| -> Vec<&str> {
            policy["Statement"]
                .as_array()
                .expect("statements")
                .iter()
                .filter(|s| s["Action"].to_string().contains(action))
                .flat_map(|s| s["Resource"].as_array().expect("resources"))
                .filter_map(|r| r.as_str())
                .collect()
        };
        for resource in resources_of("s3:GetObject") {
            assert!(
                resource.ends_with("/cert.pem") && resource.contains("/pki/kubernetes-ca/")
                    || resource.contains("/nodes/nodes/")
                    || resource.ends_with("/demo.example.com/control-plane/node-bootstrap.json"),
                "{resource}"
            );
        }
        // A node writes its own report and its own log tail, nothing else: not where workers find the bootstrap
        // service, not another node's report or tail.
        let own = [
            "arn:aws:s3:::state/clusters/demo.example.com/reports/${aws:userid}.json",
            "arn:aws:s3:::state/clusters/demo.example.com/logs/${aws:userid}.json",
        ];
        assert_eq!(resources_of("s3:Put"), own);
        assert!(
            !nodes.policy.contains("nodes/control-plane"),
            "{}",
            nodes.policy
        );
        let cp = model
            .roles
            .iter()
            .find(|r| r.role == Role::ControlPlane)
            .expect("cp role");
        assert!(cp
            .policy
            .contains("arn:aws:s3:::state/clusters/demo.example.com/*"));
        // Nor does the control plane write any report but its own.
        let cp_policy: serde_json::Value = serde_json::from_str(&cp.policy).expect("json");
        let cp_writes: Vec<&str> = cp_policy["Statement"]
            .as_array()
            .expect("statements")
            .iter()
            .filter(|s| s["Action"].to_string().contains("s3:Put"))
            .flat_map(|s| s["Resource"].as_array().expect("resources"))
            .filter_map(|r| r.as_str())
            .filter(|r| r.contains("/reports/"))
            .collect();
        assert_eq!(cp_writes, own[..1]);
    }

    #[test]
    fn the_model_names_and_tags_everything() {
        let model = model();
        assert_eq!(model.subnets.len(), 3);
        assert!(model.internet_gateway);
        assert_eq!(
            model.load_balancer.subnets,
            vec!["us-west-2a", "us-west-2b", "us-west-2c"]
        );
        let nodes = model
            .groups
            .iter()
            .find(|g| g.name == "nodes")
            .expect("nodes");
        assert_eq!(nodes.resource_name, "nodes.demo.example.com");
        assert_eq!(
            nodes
                .tags
                .get("kubernetes.io/cluster/demo.example.com")
                .map(String::as_str),
            Some("owned")
        );
        assert_eq!(nodes.tags.get(ROLE_TAG).map(String::as_str), Some("node"));
        assert!(nodes.http_tokens_required && nodes.hop_limit == 1 && nodes.root_volume_encrypted);
        // Without --admin-access, the API is reachable from the cluster's own network only.
        let api_sources: Vec<&Source> = model.security_groups[0]
            .rules
            .iter()
            .filter(|r| r.from_port == 443)
            .map(|r| &r.source)
            .collect();
        assert_eq!(api_sources, [&Source::Cidr("172.20.0.0/16".into())]);
        let cp_sg = &model.security_groups[0];
        assert!(cp_sg
            .rules
            .contains(&rule("tcp", 22, 22, Source::Cidr("203.0.113.0/24".into()))));
        assert!(
            !cp_sg
                .rules
                .iter()
                .any(|r| r.source == Source::Group(Role::Node)
                    && r.protocol != "udp"
                    && r.from_port <= 2379
                    && r.to_port >= 2379),
            "nodes must not reach etcd"
        );
    }
}

/// What the tests of each role-policy contributor (`super::ccm`, `super::ebs_csi`) check alike: every role's
/// policy of a cluster named `name`, for every networking choice, each policy within IAM's inline limit.
#[cfg(test)]
pub(crate) mod role_policies {
    use ballast_state::defaults::complete;
    use ballast_state::generate::{generate, ClusterTemplate};
    use ballast_state::spec::{Networking, Role};
    use serde_json::Value;

    /// (role, its policy text, the Sids of its statements that start with `sid_prefix`), for each role of each
    /// networking choice.
    pub(crate) fn with_sids(name: &str, sid_prefix: &str) -> Vec<(Role, String, Vec<String>)> {
        let mut found = Vec::new();
        for networking in [
            Networking::AmazonVpc,
            Networking::Cilium,
            Networking::Calico,
        ] {
            let config = complete(
                &generate(&ClusterTemplate {
                    name: name.into(),
                    zones: vec!["us-west-2a".into()],
                    networking: Some(networking),
                    ..Default::default()
                })
                .expect("template"),
            );
            let state = super::StateLocation::from_url("s3://state/c").expect("s3");
            for role in super::cluster_model(&config, &state).roles {
                // IAM refuses an inline role policy over 10,240 characters (whitespace not counted).
                let size = role.policy.chars().filter(|c| !c.is_whitespace()).count();
                assert!(size <= 10_240, "{:?} {size}", role.role);
                let policy: Value = serde_json::from_str(&role.policy).expect("policy JSON");
                let sids = policy["Statement"]
                    .as_array()
                    .expect("statements")
                    .iter()
                    .filter_map(|s| s["Sid"].as_str())
                    .filter(|s| s.starts_with(sid_prefix))
                    .map(str::to_string)
                    .collect();
                found.push((role.role, role.policy, sids));
            }
        }
        found
    }
}
