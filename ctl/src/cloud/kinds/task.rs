//! The one interface every kind of resource implements, in the shape of kops's tasks: `find` its actual state,
//! `diff` it with the wanted state (pure), then one rendering per target: `apply` (AWS, or the state store),
//! and `render_terraform` (HCL). (`delete cluster`'s teardown deletes what it finds by tags, through each kind
//! module's `delete` functions: `crate::cloud::teardown`.) A new target is one more method here
//! and one more rendering per kind, never a second engine: the engine (`crate::cloud::engine`) walks stages of `&dyn Step` (every
//! [`Task`] is one) without knowing any kind by name.

use std::future::Future;

use ballast_state::spec::ClusterConfig;
use ballast_store::store::StateStore;

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

/// One kind of resource (or, for the security groups, one step of a kind: their groups, then their rules).
pub trait Task: Sync {
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
    /// that stand for the ids `apply` would have recorded. State-store kinds write nothing.
    fn render_terraform(
        &self,
        wanted: Wanted<'_>,
        changes: &[Self::Change],
        known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError>;
}
