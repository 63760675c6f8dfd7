//! `rolling-update cluster`: without --yes, the groups and instances that need replacing, why, and the order a
//! roll would take (nothing changes); with --yes, the roll (`crate::roll`), then a summary on stdout.

use ballast_state::spec::{ClusterConfig, Role};
use tokio::time::Instant;

use super::{require_cluster, Context};
use crate::cli::{RoleArg, RollingUpdateArgs, RollingUpdateClusterArgs, RollingUpdateWhat};
use crate::cloud::{CallLog, Cloud};
use crate::error::CommandError;
use crate::output;
use crate::progress::Progress;
use crate::roll::decide::{control_plane_gate, order, outdated, GroupView};
use crate::roll::drain::Kubernetes;
use crate::roll::run::{GroupOutcome, Roller, Settings};
use crate::roll::{observe, RollError};

pub async fn run(context: &Context, args: RollingUpdateArgs) -> Result<(), CommandError> {
    let RollingUpdateWhat::Cluster(args) = args.what;
    let name = context.cluster_name(args.cluster_name.as_deref())?;
    let registry = context.registry().await?;
    require_cluster(&registry, &name).await?;
    let completed = registry.load_completed(&name).await?;
    let roles: Vec<Role> = args
        .roles
        .iter()
        .map(|r| match r {
            RoleArg::ControlPlane => Role::ControlPlane,
            RoleArg::Node => Role::Node,
            RoleArg::Bastion => Role::Bastion,
            RoleArg::ApiServer => Role::ApiServer,
        })
        .collect();
    let known: Vec<(String, Role)> = completed
        .instance_groups
        .iter()
        .map(|ig| (ig.metadata.name.clone(), ig.spec.role))
        .collect();
    let chosen = order(&known, &args.instance_groups, &roles)
        .map_err(|e| CommandError::Usage(format!("--instance-group: {e}")))?;
    // Reach Kubernetes before anything changes: a roll that cannot drain must not begin.
    let kubernetes = if args.yes && !args.cloudonly {
        Some(
            Kubernetes::from_kubeconfig(args.drain_timeout, crate::kubeconfig::hosts::redirect)
                .await
                .map_err(RollError::from)?,
        )
    } else {
        None
    };
    let region = completed.cluster.spec.region.clone().unwrap_or_default();
    let cloud = Cloud::connect(&region, CallLog::new()).await;
    let store = registry.store();
    let settings = Settings {
        force: args.force,
        surge: args.surge,
        validation_timeout: args.validation_timeout,
        fail_on_validate_error: args.fail_on_validate_error,
        kubernetes,
    };
    let roller = Roller::new(&cloud, store, &completed, settings);
    let groups = observe::groups(&cloud, store, &completed, &mut Default::default()).await?;
    let work: Vec<&GroupView> = chosen
        .iter()
        .filter_map(|n| groups.iter().find(|g| &g.name == n))
        .filter(|g| g.marker.is_some() || !outdated(g, roller.force_since(g).as_deref()).is_empty())
        .collect();
    print!("{}", plan_tables(&roller, &groups, &chosen, &args));
    if work.is_empty() {
        eprintln!("No rolling update is needed.");
        return Ok(());
    }
    let order_text: Vec<&str> = work.iter().map(|g| g.name.as_str()).collect();
    if !args.yes {
        eprintln!(
            "A roll would replace them in this order: {}.\nMust specify --yes to roll the cluster.",
            order_text.join(", ")
        );
        return Ok(());
    }
    refuse_unsafe(&name, &completed, &groups, &work, store).await?;
    // The bar counts what needs replacing now; a resumed roll's surged instances are not in it twice.
    let total: usize = work
        .iter()
        .map(|g| outdated(g, roller.force_since(g).as_deref()).len())
        .sum();
    let mut roller = roller.with_progress(Progress::on_stderr(
        total as u64,
        "instances replaced",
        false,
    ));
    let started = Instant::now();
    let mut outcomes: Vec<GroupOutcome> = Vec::new();
    for group in &work {
        match roller.roll_group(&group.name, group.role).await {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => {
                roller.finish_progress();
                print!("{}", summary(&outcomes));
                return Err(e.into());
            }
        }
    }
    roller.finish_progress();
    print!("{}", summary(&outcomes));
    let replaced: usize = outcomes.iter().map(|o| o.replaced.len()).sum();
    eprintln!(
        "Rolled cluster {name}: {replaced} instance(s) replaced in {:.1}s.",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Refuses a roll that could cost etcd its quorum or put nodes ahead of the control plane, before anything
/// changes. A control-plane group that records a roll in progress is a resumed roll: its member may be
/// joining, so the roll waits for etcd instead of refusing.
async fn refuse_unsafe(
    name: &str,
    completed: &ClusterConfig,
    groups: &[GroupView],
    work: &[&GroupView],
    store: &ballast_store::store::StateStore,
) -> Result<(), RollError> {
    let lagging: Vec<&str> = groups
        .iter()
        .filter(|g| g.role == Role::ControlPlane)
        .filter(|g| !work.iter().any(|w| w.name == g.name))
        // Not in this roll, so --force does not apply to them: only a changed spec (or a roll begun) counts.
        .filter(|g| !outdated(g, None).is_empty() || g.marker.is_some())
        .map(|g| g.name.as_str())
        .collect();
    if work.iter().any(|g| g.role == Role::Node) && !lagging.is_empty() {
        return Err(RollError::ControlPlaneFirst {
            groups: lagging.join(", "),
        });
    }
    let resuming = groups
        .iter()
        .any(|g| g.role == Role::ControlPlane && g.marker.is_some());
    if !resuming {
        let etcd = observe::etcd(store, completed, groups).await?;
        if let Err(reason) = control_plane_gate(&etcd) {
            return Err(RollError::EtcdNotWhole {
                cluster: name.to_string(),
                reason,
            });
        }
    }
    Ok(())
}

/// The groups (all chosen ones) and the instances that need replacing, with why.
fn plan_tables(
    roller: &Roller<'_>,
    groups: &[GroupView],
    chosen: &[String],
    args: &RollingUpdateClusterArgs,
) -> String {
    let mut group_rows = Vec::new();
    let mut instance_rows = Vec::new();
    for name in chosen {
        let Some(group) = groups.iter().find(|g| &g.name == name) else {
            continue;
        };
        let force = roller.force_since(group);
        let stale = outdated(group, force.as_deref());
        let in_service = group.instances.iter().filter(|i| i.in_service).count();
        let status = match (&group.marker, stale.is_empty()) {
            (Some(_), _) => "InProgress",
            (None, false) => "NeedsUpdate",
            (None, true) => "Ready",
        };
        group_rows.push(vec![
            group.name.clone(),
            format!("{:?}", group.role),
            status.to_string(),
            stale.len().to_string(),
            in_service.to_string(),
            group.sizes.min.to_string(),
            group.sizes.desired.to_string(),
            group.sizes.max.to_string(),
        ]);
        for (instance, reason) in stale {
            instance_rows.push(vec![
                instance.id,
                group.name.clone(),
                instance.lifecycle,
                reason.to_string(),
            ]);
        }
    }
    let mut text = output::table(
        &[
            "GROUP",
            "ROLE",
            "STATUS",
            "NEEDUPDATE",
            "INSERVICE",
            "MIN",
            "DESIRED",
            "MAX",
        ],
        &group_rows,
    );
    if !instance_rows.is_empty() {
        text.push('\n');
        text.push_str(&output::table(
            &["INSTANCE", "GROUP", "STATE", "REASON"],
            &instance_rows,
        ));
    }
    if args.force && !args.yes {
        text.push_str("(--force: every instance is listed)\n");
    }
    text
}

/// What the roll did, per group: for benchmarks and operators alike.
fn summary(outcomes: &[GroupOutcome]) -> String {
    if outcomes.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|o| {
            let per = if o.replaced.is_empty() {
                "-".to_string()
            } else {
                let total: f64 = o.replaced.iter().map(|(_, d)| d.as_secs_f64()).sum();
                format!("{:.1}", total / o.replaced.len() as f64)
            };
            vec![
                o.group.clone(),
                format!("{:?}", o.role),
                o.replaced.len().to_string(),
                format!("{:.1}", o.elapsed.as_secs_f64()),
                per,
            ]
        })
        .collect();
    format!(
        "\n{}",
        output::table(
            &["ROLLED", "ROLE", "REPLACED", "SECONDS", "PER-INSTANCE"],
            &rows
        )
    )
}
