//! The one interface every kind of resource implements, in the shape of kops's tasks: `find` its actual state,
//! `diff` it with the wanted state (pure), then one rendering per target: `apply` (AWS, or the state store),
//! `delete` (`delete cluster`'s teardown, and `--prune`: [`Delete`]) and `render_terraform` (HCL). A new target
//! is one more method here and one more rendering per kind, never a second engine: the engine
//! (`crate::cloud::engine`) walks stages of `&dyn Step` (every [`Task`] is one) without knowing any kind by name,
//! and the teardown (`crate::cloud::teardown`) reaches each kind's [`Delete`] through the same stages.
//!
//! `delete` is a companion trait ([`Delete`], a supertrait of [`Task`]) rather than one more method of `Task`
//! because it is called on what discovery found by tags, not on a plan: it has no `Actual` or `Change` to be
//! typed over, so it stays object-safe (`&dyn Delete`), and the teardown's own kinds (instances, network
//! interfaces, Kubernetes' load balancers, shared tags), which no `Task` makes, implement it too.

use std::future::Future;
use std::pin::Pin;

use futures_util::future::join_all;

use ballast_state::spec::ClusterConfig;
use ballast_store::store::StateStore;

use super::deletion::{DiscoveryTarget, Failed, Outcome, Resource, ResourceKind};
use super::{ActualState, Known, Target};
use crate::cloud::error::UpdateError;
use crate::cloud::model::ClusterModel;
use crate::cloud::plan::Planned;
use crate::cloud::terraform::{RenderError, Terraform};
use crate::cloud::Cloud;

/// What the cluster wants: the model and the completed spec it was built from (pure).
#[derive(Clone, Copy)]
pub struct Wanted<'a> {
    pub model: &'a ClusterModel,
    pub completed: &'a ClusterConfig,
}

/// What a live `find` reads: AWS, the state store, the ids known so far, and what earlier kinds found.
pub struct Finder<'a> {
    pub cloud: &'a Cloud,
    pub store: &'a StateStore,
    pub known: &'a Known,
    pub found: &'a ActualState,
}

/// Where a kind's resources live. AWS resources are made by `apply` (`--target direct`) or written as
/// Terraform (`--target terraform`); state-store objects (node specs) are Ballast's to write whatever the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Home {
    Aws,
    StateStore,
}

/// Options of one run that a kind's apply depends on.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// Make the changes (`--yes`).
    pub apply: bool,
    /// Delete owned resources the spec no longer wants (`--prune`).
    pub prune: bool,
}

/// What one delete call answers: done (or gone already), or a [`Failed`] saying whether to try again.
pub type DeleteFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Failed>> + Send + 'a>>;

/// What deleting a round's resources of one kind answers: each resource with its delete's answer.
pub type DeletedFuture<'a> =
    Pin<Box<dyn Future<Output = Vec<(Resource, Result<(), Failed>)>> + Send + 'a>>;

/// What a delete needs besides the resource: the clients, the cluster (whose tag a shared resource loses), and
/// where IRSA's discovery documents are, when the cluster publishes them.
#[derive(Clone, Copy)]
pub struct Deleting<'a> {
    pub cloud: &'a Cloud,
    pub cluster: &'a str,
    pub discovery: Option<&'a DiscoveryTarget>,
}

/// Which discovered resources a kind deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletes {
    /// Resources of these kinds, one at a time ([`Delete::delete`]).
    Kinds(&'static [ResourceKind]),
    /// Nothing of its own: what it makes is found and deleted as these kinds, by the kind that lists them in
    /// its [`Deletes::Kinds`] (security group rules go with their groups, lifecycle hooks with their Auto
    /// Scaling Group, service-account roles are IAM roles, a leftover group is an Auto Scaling Group and a
    /// launch template).
    With(&'static [ResourceKind]),
    /// Nothing in AWS: state-store objects, which `delete cluster` removes with the cluster's state once AWS is
    /// empty.
    StateStore,
}

/// How a kind's resources are deleted, one discovered [`Resource`] at a time: `delete cluster`'s teardown
/// calls it in rounds (a "not yet" is tried again next round), `--prune` once per leftover.
pub trait Delete: Sync {
    /// What this deletes.
    fn deletes(&self) -> Deletes;

    /// Deletes one resource of a kind in [`Deletes::Kinds`]: `Ok` when it is gone or was gone already.
    fn delete<'a>(&'a self, deleting: Deleting<'a>, resource: &'a Resource) -> DeleteFuture<'a>;

    /// Deletes the resources of one kind a teardown round found, concurrently: they do not depend on each
    /// other. A kind whose resources do (security groups' rules name each other) or that go in one call
    /// (instances) deletes them its own way.
    fn delete_found<'a>(
        &'a self,
        deleting: Deleting<'a>,
        resources: &'a [Resource],
    ) -> DeletedFuture<'a> {
        Box::pin(join_all(resources.iter().map(|r| async move {
            (r.clone(), self.delete(deleting, r).await)
        })))
    }

    /// Removes tag `key` from a resource of its kind `kind` that the cluster keeps (shared, or claimed by
    /// another cluster too): EC2's tags unless the kind's service tags its own way.
    fn untag<'a>(
        &'a self,
        deleting: Deleting<'a>,
        _kind: ResourceKind,
        resource: &'a Resource,
        key: &'a str,
    ) -> DeleteFuture<'a> {
        Box::pin(untag_ec2(deleting, resource, key))
    }
}

/// Removes tag `key` from an EC2 resource (VPC, subnet, route table, security group, ...).
pub async fn untag_ec2(
    deleting: Deleting<'_>,
    resource: &Resource,
    key: &str,
) -> Result<(), Failed> {
    super::deletion::attempt(&resource.label(), "DeleteTags", || {
        deleting
            .cloud
            .ec2
            .delete_tags()
            .resources(&resource.id)
            .tags(aws_sdk_ec2::types::Tag::builder().key(key).build())
            .send()
    })
    .await
}

/// The answer of a [`Delete`] handed a resource of a kind it does not delete: a bug in the teardown's lookup,
/// never retried.
pub fn not_deleted_here(resource: &Resource) -> Failed {
    Failed {
        outcome: Outcome::Fatal,
        error: UpdateError::Missing {
            resource: resource.label(),
            message: "has no delete of its kind here".to_string(),
        },
    }
}

/// One kind of resource (or, for the security groups, one step of a kind: their groups, then their rules).
/// Every kind says how its resources are deleted ([`Delete`]), so none can be added without.
pub trait Task: Delete + Sync {
    /// What `find` returns: plain data, serializable into a recorded actual state ([`ActualState`]).
    type Actual: Clone + Send + Sync;
    /// One typed change: what `apply` performs and `render_terraform` writes, shown in a plan.
    type Change: Planned + Send + Sync;

    fn home(&self) -> Home {
        Home::Aws
    }

    /// Its slot in a recorded actual state.
    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Self::Actual;

    /// Keeps what was found in the run's actual state (later kinds may read it).
    fn keep(&self, state: &mut ActualState, actual: Self::Actual);

    /// Reads the kind's actual state (read-only I/O).
    fn find(
        &self,
        finder: &Finder<'_>,
        wanted: Wanted<'_>,
    ) -> impl Future<Output = Result<Self::Actual, UpdateError>> + Send;

    /// Records in `known` the ids of what exists (later kinds' wanted state names them). Before `diff`.
    fn learn(
        &self,
        _wanted: Wanted<'_>,
        _actual: &Self::Actual,
        _known: &mut Known,
    ) -> Result<(), UpdateError> {
        Ok(())
    }

    /// The typed changes from `actual` to what the cluster wants (pure), or a refusal of a change AWS cannot
    /// make in place.
    fn diff(
        &self,
        wanted: Wanted<'_>,
        known: &Known,
        actual: &Self::Actual,
    ) -> Result<Vec<Self::Change>, UpdateError>;

    /// Whether `apply` runs in a run with these options (leftovers: only with `--prune`).
    fn applies(&self, options: RunOptions) -> bool {
        options.apply
    }

    /// Makes the changes, recording the ids it made in `known`.
    fn apply(
        &self,
        target: &Target<'_>,
        changes: &[Self::Change],
        known: &mut Known,
    ) -> impl Future<Output = Result<(), UpdateError>> + Send;

    /// Writes the changes as Terraform resources, recording in `known` the Terraform references (`${...}`)
    /// that stand for the ids `apply` would have recorded. State-store kinds write no resource (node specs hand
    /// theirs over for the caller to write: [`Terraform::node_specs`]).
    fn render_terraform(
        &self,
        wanted: Wanted<'_>,
        changes: &[Self::Change],
        known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError>;
}
