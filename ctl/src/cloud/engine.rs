//! Runs an update: stage by stage, each kind finds its actual state, diffs it with the model (pure), records
//! the typed changes in the plan, and with `--yes` applies them before the next kind (whose wanted state may
//! need the ids they made). The same path plans against a recorded actual state, without AWS.

use std::collections::BTreeMap;

use ballast_state::spec::ClusterConfig;
use ballast_store::store::StateStore;

use super::aws::{cluster_instances, tag_map, GROUP_TAG, NODE_SPEC_HASH_TAG};
use super::kinds::{
    auto_scaling_groups, iam, launch_templates, leftovers, load_balancer, network, node_specs,
    routes, security_groups, subnets, volumes, ActualState, Known, Target,
};
use super::model::ClusterModel;
use super::plan::{Plan, Stage};
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
struct Run<'a> {
    source: Source<'a>,
    model: &'a ClusterModel,
    completed: &'a ClusterConfig,
    options: UpdateOptions,
    known: Known,
    /// What was found, kind by kind.
    actual: ActualState,
    plan: Plan,
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
    let mut run = Run::new(Source::Live { cloud, store }, model, completed, options);
    for stage in Stage::ALL {
        if options.apply {
            progress(&format!("reconciling {}", stage.describe()));
        }
        run.stage(stage).await?;
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
    for stage in Stage::ALL {
        run.stage(stage).await?;
    }
    Ok(run.plan)
}

/// A kind's actual state: found live by `$find` (which may use the AWS clients `$cloud` and the state store
/// `$store`), or taken from the recording. Kept in `run.actual` either way.
macro_rules! actual {
    ($run:ident.$field:ident, |$cloud:ident, $store:ident| $find:expr) => {{
        let found = match $run.source {
            Source::Live {
                cloud: $cloud,
                store: $store,
            } => {
                let _ = (&$cloud, &$store);
                $find.await?
            }
            Source::Recorded(recorded) => recorded.$field.clone(),
        };
        $run.actual.$field = found.clone();
        found
    }};
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

    /// The one place stages map to kinds.
    async fn stage(&mut self, stage: Stage) -> Result<(), UpdateError> {
        match stage {
            Stage::Vpc => self.vpc().await,
            Stage::Network => self.network().await,
            Stage::EtcdVolumes => self.etcd_volumes().await,
            Stage::SecurityAndIam => self.security_and_iam().await,
            Stage::LoadBalancer => self.load_balancer().await,
            Stage::NodeSpecs => self.node_specs().await,
            Stage::LaunchTemplates => self.launch_templates().await,
            Stage::AutoScalingGroups => self.auto_scaling_groups().await,
            Stage::Leftovers => self.leftovers().await,
        }
    }

    async fn vpc(&mut self) -> Result<(), UpdateError> {
        let model = self.model;
        let actual = actual!(self.network, |cloud, store| network::find(cloud, model));
        let changes = network::diff(model, &actual)?;
        self.known.vpc_id = network::vpc_id(model, &actual);
        self.plan.record(&changes);
        if self.options.apply {
            network::apply(&self.target()?, &changes, &mut self.known).await?;
        }
        Ok(())
    }

    async fn network(&mut self) -> Result<(), UpdateError> {
        let model = self.model;
        let actual = actual!(self.subnets, |cloud, store| subnets::find(cloud, model));
        let changes = subnets::diff(model, &actual)?;
        self.known.subnet_ids = subnets::subnet_ids(model, &actual);
        self.plan.record(&changes);
        if self.options.apply {
            subnets::apply(&self.target()?, &changes, &mut self.known).await?;
        }

        let vpc_id = self.known.vpc_id.clone();
        let actual = actual!(self.routes, |cloud, store| routes::find(
            cloud,
            model,
            vpc_id.as_deref()
        ));
        routes::learn(model, &actual, &mut self.known);
        let changes = routes::diff(model, &self.known, &actual);
        self.plan.record(&changes);
        if self.options.apply {
            routes::apply(&self.target()?, &changes, &mut self.known).await?;
        }
        Ok(())
    }

    async fn etcd_volumes(&mut self) -> Result<(), UpdateError> {
        let model = self.model;
        let wanted = volumes::wanted(self.completed, model)?;
        let actual = actual!(self.etcd_volumes, |cloud, store| volumes::find(
            cloud, model
        ));
        let changes = volumes::diff(&wanted, &actual)?;
        self.plan.record(&changes);
        if self.options.apply {
            volumes::apply(&self.target()?, &changes).await?;
        }
        Ok(())
    }

    async fn security_and_iam(&mut self) -> Result<(), UpdateError> {
        let model = self.model;
        let vpc_id = self.known.vpc_id.clone();
        let actual = actual!(self.security_groups, |cloud, store| {
            security_groups::find(cloud, model, vpc_id.as_deref())
        });
        security_groups::learn(model, &actual, &mut self.known);
        // Groups first: their rules refer to each other.
        let groups = security_groups::diff_groups(model, &actual);
        self.plan.record(&groups);
        if self.options.apply {
            security_groups::apply(&self.target()?, &groups, &mut self.known).await?;
        }
        let rules = security_groups::diff_rules(model, &self.known, &actual);
        self.plan.record(&rules);
        if self.options.apply {
            security_groups::apply(&self.target()?, &rules, &mut self.known).await?;
        }

        let actual = actual!(self.iam, |cloud, store| iam::find(cloud, model));
        iam::learn(model, &actual, &mut self.known);
        let changes = iam::diff(model, &actual);
        self.plan.record(&changes);
        if self.options.apply {
            iam::apply(&self.target()?, &changes, &mut self.known).await?;
        }
        Ok(())
    }

    async fn load_balancer(&mut self) -> Result<(), UpdateError> {
        let model = self.model;
        let actual = actual!(self.load_balancer, |cloud, store| load_balancer::find(
            cloud, model
        ));
        let changes = load_balancer::diff(model, &actual)?;
        load_balancer::learn(&actual, &mut self.known);
        self.plan.record(&changes);
        if self.options.apply {
            load_balancer::apply(&self.target()?, &changes, &mut self.known).await?;
        }
        Ok(())
    }

    async fn node_specs(&mut self) -> Result<(), UpdateError> {
        let model = self.model;
        // Plan of a new cluster: the specs name the load balancer, which does not exist yet.
        let Some(dns) = self.known.load_balancer_dns.clone() else {
            self.plan
                .record(&node_specs::diff(model, None, &Default::default()));
            return Ok(());
        };
        let actual = actual!(self.node_specs, |cloud, store| {
            node_specs::find(store, model)
        });
        let rendered = node_specs::render(self.completed, model, &dns, &actual.keys)?;
        let changes = node_specs::diff(model, Some(&rendered), &actual);
        node_specs::learn(model, &rendered, &mut self.known);
        self.plan.record(&changes);
        if self.options.apply {
            node_specs::apply(&self.target()?, &changes).await?;
        }
        Ok(())
    }

    async fn launch_templates(&mut self) -> Result<(), UpdateError> {
        let model = self.model;
        let actual = actual!(self.launch_templates, |cloud, store| {
            launch_templates::find(cloud, model)
        });
        launch_templates::learn(model, &actual, &mut self.known);
        let changes = launch_templates::diff(model, &self.known, &actual)?;
        self.plan.record(&changes);
        if self.options.apply {
            launch_templates::apply(&self.target()?, &changes, &mut self.known).await?;
        }
        Ok(())
    }

    async fn auto_scaling_groups(&mut self) -> Result<(), UpdateError> {
        let model = self.model;
        let actual = actual!(self.auto_scaling_groups, |cloud, store| {
            auto_scaling_groups::find(cloud, model)
        });
        let changes = auto_scaling_groups::diff(model, &self.known, &actual);
        self.plan.record(&changes);
        if self.options.apply {
            auto_scaling_groups::apply(&self.target()?, &changes).await?;
        }
        Ok(())
    }

    /// Owned groups the spec no longer has: found among the launch templates already read.
    async fn leftovers(&mut self) -> Result<(), UpdateError> {
        let changes = leftovers::diff(self.model, &self.actual.launch_templates);
        self.plan.record(&changes);
        if self.options.apply && self.options.prune {
            leftovers::apply(&self.target()?, &changes).await?;
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
