//! Failures of `update cluster`, each naming the resource and saying what to do.

use ballast_state::node::NodeSpecError;
use ballast_store::store::StoreError;

/// An AWS SDK error, kept as the cause of the failure it led to.
pub type SdkFailure = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Failures of `update cluster`, each naming the resource and saying what to do.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// An AWS call failed. `message` and `hint` are what an operator reads; `source` is the SDK's error.
    #[error("{resource}: {operation} failed: {message}{hint}")]
    Aws {
        resource: String,
        operation: &'static str,
        message: String,
        hint: String,
        #[source]
        source: SdkFailure,
    },
    /// The spec asks to change something AWS cannot change in place.
    #[error(
        "{resource}: {field} cannot be changed in place ({from} -> {to}): revert the spec, or delete the resource \
         (and what depends on it) so it is created again"
    )]
    Immutable {
        resource: String,
        field: &'static str,
        from: String,
        to: String,
    },
    /// The spec asks for something that cannot work, named by its field.
    #[error("{resource}: {field}: {message}")]
    Refused {
        resource: String,
        field: &'static str,
        message: String,
    },
    /// A change to an etcd member's volume that would need a new volume: refused, since the volume holds the
    /// member's data and Ballast never replaces it.
    #[error(
        "{resource}: {field} cannot change ({from} -> {to}): {why}, and the volume holds an etcd member's data, \
         which Ballast never replaces: revert {field}"
    )]
    VolumeRefused {
        resource: String,
        field: &'static str,
        from: String,
        to: String,
        why: &'static str,
    },
    /// The changes could not be written as Terraform (`--target terraform`).
    #[error("rendering Terraform: {0}")]
    Terraform(#[from] super::terraform::RenderError),
    /// Security groups the spec names beside the cluster's own are not in the cluster's VPC (checked before any
    /// change: `super::security_group_check`); each refusal names its object, field and id.
    #[error("{}", refusals.iter().map(|r| r.to_string()).collect::<Vec<_>>().join("; "))]
    SecurityGroups { refusals: Vec<SecurityGroupRefusal> },
    /// Something the spec names does not exist.
    #[error("{resource}: {message}")]
    Missing { resource: String, message: String },
    /// More than one resource claims to be the same one.
    #[error("{resource}: {count} resources are tagged as this one ({ids}): delete the extra ones")]
    Duplicate {
        resource: String,
        count: usize,
        ids: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A group's node spec could not be rendered from the completed spec.
    #[error("{source}")]
    NodeSpec {
        group: String,
        #[source]
        source: NodeSpecError,
    },
    /// The cluster's keysets (what the node specs must name) could not be read.
    #[error("reading the keysets of cluster {cluster}: {source}")]
    Keys {
        cluster: String,
        #[source]
        source: Box<ballast_store::keystore::KeystoreError>,
    },
    /// Resources found by the cluster's name are not bound to its id (`super::identity`): nothing was changed.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// A plan made from a recorded state cannot be applied: there is nothing to apply it to.
    #[error("a plan made from a recorded actual state cannot be applied")]
    RecordedState,
}

/// Why one security group the spec names cannot be used (`super::security_group_check`). Here, beside the error
/// that carries it, so the check imports the error and not the other way round.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {field}: {id} {why}")]
pub struct SecurityGroupRefusal {
    /// `InstanceGroup/<name>` or `Cluster/<name>`.
    pub object: String,
    /// Its path in that object (`spec.additionalSecurityGroups[0]`).
    pub field: String,
    pub id: String,
    pub why: String,
}

/// A run refused (`super::identity`) because resources found by the cluster's name are not bound to its id.
/// Here, beside the error that carries it, so `identity` imports the error and not the other way round (the tag
/// is spelled out: `super::aws::CLUSTER_ID_TAG` is the same text, and `aws` imports this module).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Resources of a cluster of the same name in another state store.
    #[error(
        "cluster {cluster} (id {ours}) found {} AWS resource(s) under its name that carry another cluster id: {}; \
         they belong to a cluster of the same name in another state store (bucket or prefix), so nothing was \
         changed or deleted. Run this command against the state store whose `{cluster}/cluster-id` holds that id, \
         or give this cluster another name",
        resources.len(),
        resources.join(", ")
    )]
    Foreign {
        cluster: String,
        /// This cluster's id, or "none yet".
        ours: String,
        /// `Vpc vpc-1 (c.example.com) carries ballast.dev/cluster-id=...`.
        resources: Vec<String>,
    },
    /// Resources Ballast made under this name that carry no id.
    #[error(
        "cluster {cluster} found {} AWS resource(s) Ballast made under its name that carry no cluster id ({tag}): \
         {}; nothing was changed or deleted. They were made before Ballast bound resources to a cluster id, or by \
         a cluster of this name in another state store: if they are this cluster's, run the command again with \
         --adopt-untagged ({what}); if they are another store's, run this command from that store or rename this \
         cluster",
        resources.len(),
        resources.join(", "),
        tag = "ballast.dev/cluster-id"
    )]
    Untagged {
        cluster: String,
        resources: Vec<String>,
        /// What adopting does in this command.
        what: &'static str,
    },
}
