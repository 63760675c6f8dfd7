//! Runs an update: stage by stage, each kind finds its actual state, diffs it with the model (pure), records
//! the typed changes in the plan, and with `--yes` applies them before the next kind (whose wanted state may
//! need the ids they made). The same path plans against a recorded actual state, without AWS. The stages are
//! also where `delete cluster`'s teardown finds each kind's delete ([`deleters`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use ballast_state::spec::ClusterConfig;
use ballast_store::store::StateStore;

use super::aws::{cluster_instances, tag_map, GROUP_TAG, NODE_SPEC_HASH_TAG};
use super::kinds::task::{Delete, Finder, Home, RunOptions, Task, Wanted};
use super::kinds::{
    auto_scaling_groups, iam, launch_templates, leftovers, load_balancer, network, node_specs,
    oidc_discovery, oidc_provider, routes, security_groups, service_account_roles, subnets,
    termination, volumes, ActualState, Known, Target,
};
use super::model::ClusterModel;
use super::plan::{Plan, Stage};
use super::terraform::Terraform;
use super::Cloud;

pub use super::error::UpdateError;

/// Options of one run.
#[derive(Debug, Clone, Copy, Default)]
pub struct UpdateOptions {
    /// Make the changes (`--yes`); otherwise only plan.
    pub apply: bool,
    /// Delete owned resources the spec no longer wants (`--prune`).
    pub prune: bool,
}

/// What an update did or would do.
#[derive(Debug, Clone)]
pub struct UpdateReport {
    pub plan: Plan,
    /// Per group: instances running with a node spec other than the group's current one.
    pub out_of_date: BTreeMap<String, Vec<String>>,
}

/// Where actual states come from.
enum Source<'a> {
    /// Found in AWS and the state store; changes can be applied.
    Live {
        cloud: &'a Cloud,
        store: &'a StateStore,
    },
    /// Recorded: plans only.
    Recorded(&'a ActualState),
}

/// One run's context.
pub struct Run<'a> {
    source: Source<'a>,
    model: &'a ClusterModel,
    completed: &'a ClusterConfig,
    options: UpdateOptions,
    known: Known,
    /// What was found, kind by kind.
    actual: ActualState,
    plan: Plan,
    /// `--target terraform`: AWS kinds render their changes here instead of applying them.
    terraform: Option<Terraform>,
}

/// Plans (and with `options.apply`, applies) the cluster's resources.
pub async fn update(
    cloud: &Cloud,
    store: &StateStore,
    model: &ClusterModel,
    completed: &ClusterConfig,
    options: UpdateOptions,
    progress: &dyn Fn(&str),
) -> Result<UpdateReport, UpdateError> {
    // Before any change: what the spec names that AWS would refuse only half-way through.
    super::security_group_check::check(cloud, model, completed).await?;
    let mut run = Run::new(Source::Live { cloud, store }, model, completed, options);
    for (stage, tasks) in STAGES {
        if options.apply {
            progress(&format!("reconciling {}", stage.describe()));
        }
        run.stage(tasks).await?;
    }
    let out_of_date = run.out_of_date_instances().await?;
    Ok(UpdateReport {
        plan: run.plan,
        out_of_date,
    })
}

/// The plan against a recorded actual state: what `update cluster` would print were AWS and the state store
/// in that state. Makes no call.
pub async fn plan_recorded(
    model: &ClusterModel,
    completed: &ClusterConfig,
    actual: &ActualState,
) -> Result<Plan, UpdateError> {
    let mut run = Run::new(
        Source::Recorded(actual),
        model,
        completed,
        UpdateOptions::default(),
    );
    for (_, tasks) in STAGES {
        run.stage(tasks).await?;
    }
    Ok(run.plan)
}

/// `--target terraform`, pure: the plan against `actual` (a state in which the cluster's own resources do not
/// exist yet) with every AWS kind's changes rendered as Terraform instead of applied. `known` starts with what
/// the caller knows (the API load balancer's DNS name, when it exists: node specs name it). Node specs are
/// rendered (their hashes go into the launch templates) but not written (`super::to_terraform`).
pub async fn plan_terraform(
    model: &ClusterModel,
    completed: &ClusterConfig,
    actual: &ActualState,
    known: Known,
) -> Result<(Plan, Terraform), UpdateError> {
    let mut run = Run::new(
        Source::Recorded(actual),
        model,
        completed,
        UpdateOptions::default(),
    );
    run.known = known;
    run.terraform = Some(Terraform::new(&model.region));
    for (_, tasks) in STAGES {
        run.stage(tasks).await?;
    }
    let terraform = run.terraform.take().unwrap_or_default();
    Ok((run.plan, terraform))
}

/// Every kind's delete, in stage order (the teardown looks a discovered resource's kind up here; its own kinds,
/// which `update cluster` does not make, it lists itself).
pub fn deleters() -> impl Iterator<Item = &'static dyn Delete> {
    steps().map(|step| step.as_delete())
}

/// Every kind, in the order they run.
pub fn steps() -> impl Iterator<Item = &'static dyn Step> {
    STAGES
        .into_iter()
        .flat_map(|(_, tasks)| tasks.iter().copied())
}

/// The stages and the kinds in each, in the order they run: the one place kinds are listed.
const STAGES: [(Stage, &[&dyn Step]); 9] = [
    (Stage::Vpc, &[&network::VpcTask]),
    (
        Stage::Network,
        &[&subnets::SubnetsTask, &routes::RoutesTask],
    ),
    (Stage::EtcdVolumes, &[&volumes::EtcdVolumesTask]),
    (
        Stage::SecurityAndIam,
        // Groups first: their rules refer to each other.
        &[
            &security_groups::SecurityGroupsTask,
            &security_groups::SecurityGroupRulesTask,
            &iam::IamTask,
            // IRSA: the issuer's documents, the provider trusting it, the roles trusting the provider.
            &oidc_discovery::OidcDiscoveryTask,
            &oidc_provider::OidcProviderTask,
            &service_account_roles::ServiceAccountRolesTask,
            // Termination handling: the queue, then the rules that target it.
            &termination::QueueTask,
            &termination::RulesTask,
        ],
    ),
    (Stage::LoadBalancer, &[&load_balancer::LoadBalancerTask]),
    (Stage::NodeSpecs, &[&node_specs::NodeSpecsTask]),
    (
        Stage::LaunchTemplates,
        &[&launch_templates::LaunchTemplatesTask],
    ),
    (
        Stage::AutoScalingGroups,
        // The hooks name their groups.
        &[
            &auto_scaling_groups::AutoScalingGroupsTask,
            &termination::LifecycleHooksTask,
        ],
    ),
    (Stage::Leftovers, &[&leftovers::LeftoversTask]),
];

/// A [`Task`] with its types erased, so that stages are lists of `&dyn Step`.
pub trait Step: Sync {
    /// Where its resources live.
    fn home(&self) -> Home;

    /// How its resources are deleted.
    fn as_delete(&self) -> &dyn Delete;

    /// Finds (or takes from the recording), learns, diffs, records the plan, then applies or renders.
    fn run<'a, 'r>(
        &'a self,
        run: &'a mut Run<'r>,
    ) -> Pin<Box<dyn Future<Output = Result<(), UpdateError>> + Send + 'a>>;
}

impl<T: Task> Step for T {
    fn home(&self) -> Home {
        Task::home(self)
    }

    fn as_delete(&self) -> &dyn Delete {
        self
    }
    fn run<'a, 'r>(
        &'a self,
        run: &'a mut Run<'r>,
    ) -> Pin<Box<dyn Future<Output = Result<(), UpdateError>> + Send + 'a>> {
        Box::pin(run_task(self, run))
    }
}

async fn run_task<T: Task>(task: &T, run: &mut Run<'_>) -> Result<(), UpdateError> {
    let wanted = Wanted {
        model: run.model,
        completed: run.completed,
    };
    let actual = match run.source {
        Source::Live { cloud, store } => {
            let finder = Finder {
                cloud,
                store,
                known: &run.known,
                found: &run.actual,
            };
            task.find(&finder, wanted).await?
        }
        Source::Recorded(recorded) => task.recorded(recorded).clone(),
    };
    task.keep(&mut run.actual, actual.clone());
    task.learn(wanted, &actual, &mut run.known)?;
    let changes = task.diff(wanted, &run.known, &actual)?;
    run.plan.record(&changes);
    match &mut run.terraform {
        // Every kind renders: AWS kinds as Terraform resources, state-store kinds hand over what the caller
        // writes itself (node specs).
        Some(terraform) => {
            task.render_terraform(wanted, &changes, &mut run.known, terraform)?;
        }
        _ if task.applies(run.options.into()) => {
            let target = run.target()?;
            task.apply(&target, &changes, &mut run.known).await?;
        }
        _ => {}
    }
    Ok(())
}

impl From<UpdateOptions> for RunOptions {
    fn from(options: UpdateOptions) -> Self {
        RunOptions {
            apply: options.apply,
            prune: options.prune,
        }
    }
}

impl<'a> Run<'a> {
    fn new(
        source: Source<'a>,
        model: &'a ClusterModel,
        completed: &'a ClusterConfig,
        options: UpdateOptions,
    ) -> Self {
        Run {
            source,
            model,
            completed,
            options,
            known: Known::default(),
            actual: ActualState::default(),
            plan: Plan::default(),
            terraform: None,
        }
    }

    /// What the kinds apply to; none for a recorded state.
    fn target(&self) -> Result<Target<'a>, UpdateError> {
        match self.source {
            Source::Live { cloud, store } => Ok(Target {
                cloud,
                store,
                model: self.model,
            }),
            Source::Recorded(_) => Err(UpdateError::RecordedState),
        }
    }

    /// Runs one stage's kinds, in order.
    async fn stage(&mut self, tasks: &[&dyn Step]) -> Result<(), UpdateError> {
        for task in tasks {
            task.run(self).await?;
        }
        Ok(())
    }

    /// Running instances of each group whose node-spec tag differs from the group's current node spec.
    async fn out_of_date_instances(&self) -> Result<BTreeMap<String, Vec<String>>, UpdateError> {
        let mut out_of_date: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let Source::Live { cloud, .. } = self.source else {
            return Ok(out_of_date);
        };
        if self.known.node_spec_hashes.is_empty() || self.known.vpc_id.is_none() {
            return Ok(out_of_date);
        }
        let instances =
            cluster_instances(cloud, &self.model.cluster, &["pending", "running"]).await?;
        for instance in instances {
            let tags = tag_map(instance.tags());
            let (Some(group), Some(hash)) = (tags.get(GROUP_TAG), tags.get(NODE_SPEC_HASH_TAG))
            else {
                continue;
            };
            if self
                .known
                .node_spec_hashes
                .get(group)
                .is_some_and(|want| want != hash)
            {
                out_of_date
                    .entry(group.clone())
                    .or_default()
                    .push(instance.instance_id().unwrap_or_default().to_string());
            }
        }
        Ok(out_of_date)
    }
}
