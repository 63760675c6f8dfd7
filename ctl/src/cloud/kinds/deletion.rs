//! What a kind's `delete` takes and answers (`delete cluster`): the [`Resource`] the teardown found, the one
//! [`attempt`] every delete call goes through, and what its failure means ([`Outcome`], by AWS error code).
//! A leaf of `cloud`'s deletes: the kinds' deletes and the teardown (`super::super::teardown`, which finds the
//! resources and calls the deletes in rounds) both use it, and it uses neither, so the teardown depends on the
//! kinds and never the other way.

use std::fmt;
use std::future::Future;

use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use serde::{Deserialize, Serialize};

use crate::cloud::aws::{code_of, failure};
use crate::cloud::error::UpdateError;

/// A kind of resource a teardown deletes (or, for [`ResourceKind::SharedTag`], only untags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ResourceKind {
    AutoScalingGroup,
    LoadBalancer,
    /// A classic ELB: the cloud controller manager's, for a Service of type LoadBalancer (`kubernetes_made`).
    ClassicLoadBalancer,
    NatGateway,
    Instance,
    LaunchTemplate,
    TargetGroup,
    ElasticIp,
    InstanceProfile,
    IamRole,
    Volume,
    NetworkInterface,
    SecurityGroup,
    RouteTable,
    InternetGateway,
    Subnet,
    Vpc,
    /// IRSA's IAM OIDC provider (found by `teardown::irsa`, deleted by `kinds::oidc_provider`).
    OidcProvider,
    /// One of IRSA's two public discovery documents in the discovery store (found by `teardown::irsa`, deleted by
    /// `kinds::oidc_discovery`).
    DiscoveryDocument,
    /// An EventBridge rule feeding the termination queue (`kinds::termination`).
    EventRule,
    /// The termination queue (`kinds::termination`).
    SqsQueue,
    /// A resource the cluster only uses (tagged `shared`), or one it owns that another cluster's tag also
    /// claims: only the cluster's tag is removed from it, the resource stays.
    SharedTag,
}

impl ResourceKind {
    /// Every kind, in the order a teardown reports them (roughly the order they go in).
    pub const ALL: [ResourceKind; 22] = [
        ResourceKind::AutoScalingGroup,
        ResourceKind::LoadBalancer,
        ResourceKind::ClassicLoadBalancer,
        ResourceKind::NatGateway,
        ResourceKind::Instance,
        ResourceKind::LaunchTemplate,
        ResourceKind::TargetGroup,
        ResourceKind::ElasticIp,
        ResourceKind::InstanceProfile,
        ResourceKind::IamRole,
        ResourceKind::Volume,
        ResourceKind::NetworkInterface,
        ResourceKind::SecurityGroup,
        ResourceKind::RouteTable,
        ResourceKind::InternetGateway,
        ResourceKind::Subnet,
        ResourceKind::Vpc,
        ResourceKind::OidcProvider,
        ResourceKind::DiscoveryDocument,
        ResourceKind::EventRule,
        ResourceKind::SqsQueue,
        ResourceKind::SharedTag,
    ];

    /// The kind named `name` (what [`ResourceKind::as_str`] writes: a shared tag's resource names its kind so).
    pub fn named(name: &str) -> Option<ResourceKind> {
        ResourceKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::AutoScalingGroup => "AutoScalingGroup",
            ResourceKind::LoadBalancer => "LoadBalancer",
            ResourceKind::ClassicLoadBalancer => "ClassicLoadBalancer",
            ResourceKind::NatGateway => "NatGateway",
            ResourceKind::Instance => "Instance",
            ResourceKind::LaunchTemplate => "LaunchTemplate",
            ResourceKind::TargetGroup => "TargetGroup",
            ResourceKind::ElasticIp => "ElasticIp",
            ResourceKind::InstanceProfile => "InstanceProfile",
            ResourceKind::IamRole => "IamRole",
            ResourceKind::Volume => "Volume",
            ResourceKind::NetworkInterface => "NetworkInterface",
            ResourceKind::SecurityGroup => "SecurityGroup",
            ResourceKind::RouteTable => "RouteTable",
            ResourceKind::InternetGateway => "InternetGateway",
            ResourceKind::Subnet => "Subnet",
            ResourceKind::Vpc => "Vpc",
            ResourceKind::OidcProvider => "OidcProvider",
            ResourceKind::DiscoveryDocument => "DiscoveryDocument",
            ResourceKind::EventRule => "EventRule",
            ResourceKind::SqsQueue => "SqsQueue",
            ResourceKind::SharedTag => "SharedTag",
        }
    }
}

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the cluster's discovery documents are, when its spec publishes them: what the teardown deletes there.
/// (Here, with the deletes' other inputs, because IRSA's kind deletes them and no kind imports the teardown.)
#[derive(Debug, Clone)]
pub struct DiscoveryTarget {
    pub store: ballast_state::irsa::store::DiscoveryStore,
    pub s3: aws_sdk_s3::Client,
    /// The account every request names as the bucket's expected owner (the credentials' own).
    pub owner: String,
}

/// How a resource's tags relate it to the cluster. Only ownership tags decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Not the cluster's: never touched.
    None,
    /// Owned by the cluster alone: deleted.
    Owned,
    /// Used (`shared`) by the cluster, or owned by it and claimed by other clusters too (named): only the
    /// cluster's tag is removed.
    Untag { others: Vec<String> },
}

/// The cluster's claim on a resource with these tags. A resource tagged `owned` by this cluster that another
/// cluster also tags (`owned` or `shared`) is not deleted: that cluster may run in it (a VPC another cluster
/// was given by id), and deleting it would break that cluster. Only this cluster's tag goes; the operator
/// deletes the resource once no one needs it.
pub fn claim(tags: &std::collections::BTreeMap<String, String>, cluster: &str) -> Claim {
    let key = crate::cloud::aws::ownership_tag(cluster);
    let others: Vec<String> = tags
        .keys()
        .filter(|k| *k != &key)
        .filter_map(|k| k.strip_prefix("kubernetes.io/cluster/"))
        .map(str::to_string)
        .collect();
    match tags.get(&key).map(String::as_str) {
        Some("owned") if others.is_empty() => Claim::Owned,
        Some("owned") => Claim::Untag { others },
        Some(_) => Claim::Untag { others: Vec::new() },
        None => Claim::None,
    }
}

/// What binds a found resource to a cluster's identity, read from its tags (`crate::cloud::identity` judges it).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Binding {
    /// Not made by Ballast under this cluster's name (made by Kubernetes in the cluster's VPC, an instance
    /// profile bound through its role, a shared resource, a discovery document in the spec's bucket): its
    /// binding is what it lives in, and its id is not checked.
    #[default]
    Unchecked,
    /// Made by Ballast for a cluster of this name (`ballast.dev/cluster`), before resources carried the cluster's
    /// id, or by a cluster of this name in another state store that has none: adopted only when asked.
    Untagged,
    /// Carries `ballast.dev/cluster-id` with this id.
    Id(String),
}

impl Binding {
    pub fn is_unchecked(&self) -> bool {
        *self == Binding::Unchecked
    }

    /// The binding of a resource with these tags, made by Ballast for `cluster`.
    pub fn of(tags: &std::collections::BTreeMap<String, String>, cluster: &str) -> Binding {
        use crate::cloud::aws::{CLUSTER_ID_TAG, CLUSTER_TAG};
        match tags.get(CLUSTER_ID_TAG) {
            Some(id) => Binding::Id(id.clone()),
            None if tags.get(CLUSTER_TAG).map(String::as_str) == Some(cluster) => Binding::Untagged,
            None => Binding::Unchecked,
        }
    }
}

/// One resource as found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resource {
    pub kind: ResourceKind,
    /// Its id (an ARN for load balancers and target groups, the name for IAM and Auto Scaling).
    pub id: String,
    /// What an operator calls it: its `Name` tag, or the id.
    pub name: String,
    /// Its lifecycle state where it has one (`running`, `deleting`, `in-use`, `Delete in progress`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// What is detached from it before it is deleted: a route table's association ids, an internet gateway's
    /// VPCs, a role's inline policy names and attached policy ARNs, an instance profile's roles, a volume's or
    /// network interface's attachment, an Auto Scaling Group's instances. For a [`ResourceKind::SharedTag`],
    /// the other clusters that claim the resource (empty when it is only shared).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<String>,
    /// Which cluster's identity its tags bind it to.
    #[serde(default, skip_serializing_if = "Binding::is_unchecked")]
    pub binding: Binding,
}

impl Resource {
    pub fn new(kind: ResourceKind, id: &str, name: &str) -> Self {
        Resource {
            kind,
            id: id.to_string(),
            name: name.to_string(),
            state: None,
            parts: Vec::new(),
            binding: Binding::Unchecked,
        }
    }

    /// The resource bound as its tags say (a resource Ballast made for `cluster`; see [`Binding::of`]).
    pub fn bound_by(
        mut self,
        tags: &std::collections::BTreeMap<String, String>,
        cluster: &str,
    ) -> Self {
        self.binding = Binding::of(tags, cluster);
        self
    }

    pub fn with_state(mut self, state: Option<&str>) -> Self {
        self.state = state.map(str::to_string);
        self
    }

    pub fn with_parts(mut self, parts: Vec<String>) -> Self {
        self.parts = parts;
        self
    }

    /// `Vpc vpc-0a1 (demo.example.com)`: how messages name it.
    pub fn label(&self) -> String {
        if self.kind == ResourceKind::SharedTag {
            // Its name is the kind of the resource that keeps it: `Subnet subnet-0a1`.
            return format!("{} {}", self.name, self.id);
        }
        if self.name.is_empty() || self.name == self.id {
            format!("{} {}", self.kind, self.id)
        } else {
            format!("{} {} ({})", self.kind, self.id, self.name)
        }
    }
}

/// What a failed delete call means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The resource no longer exists: as good as deleted (an earlier, interrupted run got to it first).
    Gone,
    /// Something still depends on it, or AWS is busy: the next round tries again.
    NotYet,
    /// Retrying cannot help (no permission, a malformed request): the teardown stops after this round.
    Fatal,
}

/// Codes meaning "not yet": dependents still exist, a state change is in progress, or AWS throttles.
const NOT_YET: [&str; 16] = [
    "DependencyViolation",
    "ResourceInUse",
    "ResourceInUseFault",
    "ScalingActivityInProgress",
    "ResourceContention",
    "DeleteConflict",
    "IncorrectInstanceState",
    "IncorrectState",
    "VolumeInUse",
    "InvalidNetworkInterface.InUse",
    "InvalidIPAddress.InUse",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "ServiceUnavailable",
    "InternalError",
];

/// Classifies a failed delete call by its AWS error code (`None`: no answer at all, e.g. a dropped connection)
/// and message.
pub fn classify(code: Option<&str>, message: &str) -> Outcome {
    let Some(code) = code else {
        // The endpoint did not answer: a network blip is "not yet"; the teardown's deadline bounds it.
        return Outcome::NotYet;
    };
    let message = message.to_lowercase();
    if code.ends_with("NotFound")
        || code.ends_with("NotFoundException")
        || code == "NoSuchEntity"
        || (code == "ValidationError" && message.contains("not found"))
    {
        return Outcome::Gone;
    }
    // An address still associated reads as AuthFailure on EC2-Classic-era APIs; only with that message.
    if NOT_YET.contains(&code) || (code == "AuthFailure" && message.contains("in use")) {
        return Outcome::NotYet;
    }
    Outcome::Fatal
}

/// A delete call that did not succeed: whether to try again, and the error naming the resource.
#[derive(Debug)]
pub struct Failed {
    pub outcome: Outcome,
    pub error: UpdateError,
}

/// One delete call on `resource`: success or "gone already" is `Ok`; anything else is classified.
pub async fn attempt<T, E, R, F, Fut>(
    resource: &str,
    operation: &'static str,
    f: F,
) -> Result<(), Failed>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match f().await {
        Ok(_) => Ok(()),
        Err(e) => {
            let code = code_of(&e);
            let message = match &e {
                SdkError::ServiceError(s) => s.err().message().unwrap_or("").to_string(),
                _ => String::new(),
            };
            match classify(code.as_deref(), &message) {
                Outcome::Gone => Ok(()),
                outcome => Err(Failed {
                    outcome,
                    error: failure(resource, operation, e),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{classify, Outcome, ResourceKind};

    #[test]
    fn every_kind_is_found_again_by_its_name() {
        for kind in ResourceKind::ALL {
            assert_eq!(ResourceKind::named(kind.as_str()), Some(kind));
        }
        assert_eq!(ResourceKind::named("Bucket"), None);
    }

    #[test]
    fn error_codes_are_gone_not_yet_or_fatal() {
        let cases = [
            (Some("InvalidVpcID.NotFound"), "", Outcome::Gone),
            (Some("InvalidGroup.NotFound"), "", Outcome::Gone),
            (Some("NoSuchEntity"), "", Outcome::Gone),
            (Some("LoadBalancerNotFound"), "", Outcome::Gone),
            (Some("TargetGroupNotFound"), "", Outcome::Gone),
            (Some("NatGatewayNotFound"), "", Outcome::Gone),
            (
                Some("ValidationError"),
                "AutoScalingGroup name not found - x",
                Outcome::Gone,
            ),
            (Some("DependencyViolation"), "", Outcome::NotYet),
            (Some("ResourceInUse"), "", Outcome::NotYet),
            (Some("DeleteConflict"), "", Outcome::NotYet),
            (Some("ScalingActivityInProgress"), "", Outcome::NotYet),
            (Some("Throttling"), "", Outcome::NotYet),
            (Some("InvalidIPAddress.InUse"), "", Outcome::NotYet),
            (Some("AuthFailure"), "Address is in use", Outcome::NotYet),
            (None, "connection refused", Outcome::NotYet),
            (Some("AccessDenied"), "", Outcome::Fatal),
            (Some("UnauthorizedOperation"), "", Outcome::Fatal),
            (Some("AuthFailure"), "bad signature", Outcome::Fatal),
            (Some("ValidationError"), "bad name", Outcome::Fatal),
        ];
        for (code, message, want) in cases {
            assert_eq!(classify(code, message), want, "{code:?} {message:?}");
        }
    }
}
