//! `update cluster`: plan the cluster's AWS resources from its completed spec; apply with --yes.

use ballast_state::spec::ClusterConfig;
use ballast_store::cluster_id;
use ballast_store::registry::{Registry, RegistryError, Writer};

use std::path::{Path, PathBuf};

use ballast_state::irsa::IrsaSettings;
use ballast_state::layout::ClusterPaths;
use ballast_store::store::Precondition;

use super::Context;
use crate::cli::{UpdateArgs, UpdateClusterArgs, UpdateTarget, UpdateWhat};
use crate::cloud::engine::{update, UpdateOptions};
use crate::cloud::identity::{adopt, render_adopted, Identity};
use crate::cloud::kinds::{load_balancer, node_specs, oidc_discovery, Target};
use crate::cloud::model::{cluster_model, ClusterModel, StateLocation};
use crate::cloud::teardown::discover;
use crate::cloud::to_terraform::{render, Inputs};
use crate::cloud::{CallLog, Cloud};
use crate::error::CommandError;

/// kops's default `--out` for `--target terraform`.
pub const DEFAULT_TERRAFORM_OUT: &str = "out/terraform";

pub async fn run(context: &Context, args: UpdateArgs) -> Result<(), CommandError> {
    let UpdateWhat::Cluster(args) = args.what;
    let name = context.cluster_name(args.cluster_name.as_deref())?;
    let registry = context.registry().await?;
    match args.target {
        UpdateTarget::Direct => {
            if args.out.is_some() {
                return Err(CommandError::Usage(
                    "--out is for --target terraform: the direct target writes no files"
                        .to_string(),
                ));
            }
            if args.yes && !args.force_direct {
                refuse_if_terraform_managed(&registry, &name).await?;
            }
            let run = Run {
                apply: args.yes,
                prune: args.prune,
                stats: args.stats,
                adopt_untagged: args.adopt_untagged,
            };
            update_cluster_unchecked(&registry, &name, run, &context.writer).await
        }
        UpdateTarget::Terraform => update_terraform(&registry, &name, &args).await,
    }
}

/// A direct apply to a cluster whose resources Terraform manages would be undone (or fought) by Terraform's
/// next apply: refused unless `--force-direct`.
async fn refuse_if_terraform_managed(registry: &Registry, name: &str) -> Result<(), CommandError> {
    let marker = ClusterPaths::new(name).terraform_managed();
    if registry.store().get(&marker).await?.is_some() {
        return Err(CommandError::Usage(format!(
            "cluster {name} is managed by Terraform (`ballast update cluster {name} --target terraform --yes` \
             wrote its resources; {}/{marker} records it): nothing was changed. Run `ballast update cluster \
             {name} --target terraform --yes` and `terraform apply`, or add --force-direct to change AWS \
             directly (Terraform's next apply may undo it)",
            registry.store().url()
        )));
    }
    Ok(())
}

/// `update cluster --target terraform`: the plan as for the direct target; with `--yes`, the Terraform written
/// to `--out`, the node specs written to the state store (once the load balancer they name exists), and the
/// cluster marked Terraform-managed.
async fn update_terraform(
    registry: &Registry,
    name: &str,
    args: &UpdateClusterArgs,
) -> Result<(), CommandError> {
    if args.prune {
        return Err(CommandError::Usage(
            "--prune is for --target direct: Terraform deletes what its files no longer declare"
                .to_string(),
        ));
    }
    if args.force_direct {
        return Err(CommandError::Usage(
            "--force-direct is for --target direct".to_string(),
        ));
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_TERRAFORM_OUT));
    // Before the store and AWS are read: a plan that cannot be written is refused at once.
    super::check_out_dir(&out)?;
    let state = require_s3(registry)?;
    let completed = registry.load_completed(name).await?;
    // Terraform's resources carry the cluster's id like the direct target's.
    let (_, model) = bound_model(registry, name, &completed, &state, args.yes).await?;
    let calls = CallLog::new();
    let cloud = Cloud::connect(&model.region, calls.clone()).await;
    // Read-only: the load balancer Terraform made, whose DNS name the node specs carry.
    let lb = load_balancer::find(&cloud, &model).await?;
    let api_dns = lb.load_balancer.as_ref().map(|l| l.dns_name.clone());
    let mut stored = node_specs::find(registry.store(), &model).await?;
    node_specs::check_api_server_etcd_client(registry.store(), &completed, &model, &mut stored)
        .await?;
    let inputs = Inputs {
        instance_profile_arn: match &api_dns {
            Some(_) => instance_profile_arn(&cloud, &model).await?,
            None => None,
        },
        service_account_keys: if IrsaSettings::of(&completed.cluster.spec).is_some() {
            oidc_discovery::service_account_public_keys(registry.store(), name).await?
        } else {
            Vec::new()
        },
        api_dns: api_dns.clone(),
        keys: stored.keys.clone(),
    };
    let rendered = render(&model, &completed, &inputs).await?;
    if args.stats {
        eprintln!("{}", calls.summary());
    }
    print!("{}", rendered.plan);
    if !args.yes {
        eprintln!(
            "Nothing was written. Run `ballast update cluster {name} --target terraform --yes` to write the \
             Terraform to {}.",
            out.display()
        );
        return Ok(());
    }
    for (file, text) in &rendered.files {
        write_file(&out.join(file), text)?;
    }
    let paths = ClusterPaths::new(name);
    let marker = serde_json::json!({"managedBy": "terraform", "out": out.display().to_string()});
    registry
        .store()
        .put(
            &paths.terraform_managed(),
            marker.to_string().as_bytes(),
            &Precondition::None,
        )
        .await?;
    match &api_dns {
        Some(_) => {
            // The specs rendered with the plan: their hashes are the launch templates'.
            let specs = rendered.terraform.node_specs().to_vec();
            let changes = node_specs::diff(&model, Some(&specs), &stored);
            let target = Target {
                cloud: &cloud,
                store: registry.store(),
                model: &model,
            };
            node_specs::apply(&target, &changes).await?;
            eprintln!(
                "Wrote {} and {} node spec(s) to the state store. Run `terraform init` and `terraform apply` in \
                 {}.",
                rendered
                    .files
                    .iter()
                    .map(|(f, _)| out.join(f).display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                changes.len(),
                out.display()
            );
        }
        None => eprintln!(
            "Wrote {}. The launch templates and Auto Scaling Groups of {} wait for the API load balancer (their \
             node specs name its DNS name): run `terraform init` and `terraform apply` in {}, then `ballast \
             update cluster {name} --target terraform --yes` again and `terraform apply` again.",
            out.join(crate::cloud::terraform::FILE_NAME).display(),
            rendered.terraform.deferred().join(", "),
            out.display()
        ),
    }
    Ok(())
}

/// The ARN of the first instance profile Terraform has made (read-only): the account and partition the node
/// specs' IRSA role ARNs are in. `None` while none exists.
async fn instance_profile_arn(
    cloud: &Cloud,
    model: &ClusterModel,
) -> Result<Option<String>, CommandError> {
    for role in &model.roles {
        let found = crate::cloud::aws::find(
            &format!("InstanceProfile {}", role.name),
            "GetInstanceProfile",
            &["NoSuchEntity"],
            || {
                cloud
                    .iam
                    .get_instance_profile()
                    .instance_profile_name(&role.name)
                    .send()
            },
        )
        .await?;
        if let Some(profile) = found.and_then(|o| o.instance_profile().cloned()) {
            return Ok(Some(profile.arn().to_string()));
        }
    }
    Ok(None)
}

/// Writes one output file (0644: Terraform files hold no secret), creating the directory.
fn write_file(path: &Path, text: &str) -> Result<(), CommandError> {
    ballast_common::durable::write(
        path,
        text.as_bytes(),
        &ballast_common::durable::Options::mode(0o644).create_parents(0o755),
    )
    .map_err(|e| CommandError::Io {
        what: format!("writing {}: {}", e.path.display(), e.step),
        source: e.source,
    })
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

/// Plans, and with `apply` applies, the cluster's resources; prints the plan on stdout. An apply to a
/// Terraform-managed cluster is refused.
pub async fn update_cluster(
    registry: &Registry,
    name: &str,
    apply: bool,
    prune: bool,
    stats: bool,
) -> Result<(), CommandError> {
    if apply {
        refuse_if_terraform_managed(registry, name).await?;
    }
    let run = Run {
        apply,
        prune,
        stats,
        adopt_untagged: false,
    };
    let writer = Writer::current("ballast update cluster --yes");
    update_cluster_unchecked(registry, name, run, &writer).await
}

/// What one `update cluster` run was asked to do.
#[derive(Debug, Clone, Copy)]
struct Run {
    apply: bool,
    prune: bool,
    stats: bool,
    /// `--adopt-untagged` (`crate::cloud::identity`).
    adopt_untagged: bool,
}

/// An apply holds the cluster's writer lock from before the cluster's id is read or written to its end (renewed
/// while it runs): two applies at once would both change AWS (two launch-template versions, a second VPC's
/// subnets), so the second is refused naming the first's holder (`--lock-wait` makes it wait instead). A plan
/// takes no lock: it changes nothing.
async fn update_cluster_unchecked(
    registry: &Registry,
    name: &str,
    run: Run,
    writer: &Writer,
) -> Result<(), CommandError> {
    if run.apply {
        registry
            .while_locked(name, writer, plan_or_apply(registry, name, run))
            .await?
    } else {
        plan_or_apply(registry, name, run).await
    }
}

/// The cluster's id and its model, the resources tagged with the id. A cluster made before ids gets its id on its
/// first apply (`write`); a plan writes nothing, so a cluster without an id plans without one.
async fn bound_model(
    registry: &Registry,
    name: &str,
    completed: &ClusterConfig,
    state: &StateLocation,
    write: bool,
) -> Result<(Option<String>, ClusterModel), CommandError> {
    let id = if write {
        Some(cluster_id::ensure(registry.store(), name).await)
    } else {
        cluster_id::read(registry.store(), name).await.transpose()
    };
    let id = id.transpose().map_err(RegistryError::from)?;
    let model = match &id {
        Some(id) => cluster_model(completed, state).bound_to(id),
        None => cluster_model(completed, state),
    };
    Ok((id, model))
}

async fn plan_or_apply(registry: &Registry, name: &str, run: Run) -> Result<(), CommandError> {
    let Run {
        apply,
        prune,
        stats,
        adopt_untagged,
    } = run;
    let state = require_s3(registry)?;
    let completed = registry.load_completed(name).await?;
    let (id, model) = bound_model(registry, name, &completed, &state, apply).await?;
    let calls = CallLog::new();
    let cloud = Cloud::connect(&model.region, calls.clone()).await;
    // Before any change: every resource found under the cluster's name must carry its id (or be adopted).
    let identity = Identity {
        cluster: name.to_string(),
        id: id.clone(),
        adopt_untagged,
    };
    let found = discover(&cloud, name, None).await?;
    let adopted = identity
        .check(&found.resources, "they are tagged with this cluster's id")
        .map_err(crate::cloud::engine::UpdateError::from)?;
    if !adopted.is_empty() {
        eprint!("{}", render_adopted(&adopted, name, id.as_deref()));
        match &id {
            Some(id) => adopt(&cloud, &adopted, id).await?,
            None => eprintln!("Nothing was tagged: run with --yes to adopt them."),
        }
    }
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
    // IRSA's discovery bucket, open to anyone's writes, makes every service-account role anyone's: said on every
    // run (validate cluster fails its check too).
    match oidc_discovery::discovery_bucket_exposure(&model.region, &completed.cluster.spec).await {
        Ok(None) => {}
        Ok(Some(exposed)) => eprintln!("Warning: {exposed}"),
        Err(e) => eprintln!("Warning: discovery bucket: cannot read its ACL: {e}"),
    }
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
