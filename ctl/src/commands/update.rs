//! `update cluster`: plan the cluster's AWS resources from its completed spec; apply with --yes.

use ballast_store::registry::Registry;

use super::Context;
use crate::cli::{UpdateArgs, UpdateWhat};
use crate::cloud::engine::{update, UpdateOptions};
use crate::cloud::model::{cluster_model, StateLocation};
use crate::cloud::{CallLog, Cloud};
use crate::error::CommandError;

pub async fn run(context: &Context, args: UpdateArgs) -> Result<(), CommandError> {
    let UpdateWhat::Cluster(args) = args.what;
    let name = context.cluster_name(args.cluster_name.as_deref())?;
    let registry = context.registry().await?;
    update_cluster(&registry, &name, args.yes, args.prune, args.stats).await
}

/// The S3 location of the registry's store: nodes fetch their specs from S3, so clusters are built from one.
pub fn require_s3(registry: &Registry) -> Result<StateLocation, CommandError> {
    StateLocation::from_url(&registry.store().url()).ok_or_else(|| {
        CommandError::Usage(format!(
            "building a cluster needs an S3 state store (nodes fetch their specs from it), not {}: pass --state \
             s3://BUCKET/PREFIX",
            registry.store().url()
        ))
    })
}

/// Plans, and with `apply` applies, the cluster's resources; prints the plan on stdout.
pub async fn update_cluster(
    registry: &Registry,
    name: &str,
    apply: bool,
    prune: bool,
    stats: bool,
) -> Result<(), CommandError> {
    let state = require_s3(registry)?;
    let completed = registry.load_completed(name).await?;
    let model = cluster_model(&completed, &state);
    let calls = CallLog::new();
    let cloud = Cloud::connect(&model.region, calls.clone()).await;
    let result = update(
        &cloud,
        registry.store(),
        &model,
        &completed,
        UpdateOptions { apply, prune },
        &|step| eprintln!("update: {step}"),
    )
    .await;
    if stats {
        eprintln!("{}", calls.summary());
    }
    let report = result?;
    if apply {
        // The audit log's retention in the state bucket (docs/audit.md).
        crate::cloud::audit::apply_retention(registry.store(), &completed, &|step| {
            eprintln!("update: {step}")
        })
        .await?;
    }
    print!("{}", report.plan);
    for (group, instances) in &report.out_of_date {
        println!(
            "Out of date: {} instance(s) of {group} run an older node spec: {}",
            instances.len(),
            instances.join(", ")
        );
    }
    if report.plan.is_empty() {
        return Ok(());
    }
    if !apply {
        eprintln!(
            "Nothing was changed. Run `ballast update cluster {name} --yes` to apply this plan."
        );
    } else {
        eprintln!("Cluster {name:?} updated.");
        if !prune && report.plan.count(crate::cloud::plan::Action::Delete) > 0 {
            eprintln!("Resources no longer in the spec were kept: add --prune to delete them.");
        }
    }
    Ok(())
}
