//! `delete cluster` and `delete instancegroup`: a preview without --yes, the deletion with it. (`delete secret
//! sshpublickey` is in `keys.rs`.)
//!
//! `delete cluster` deletes the cluster's AWS resources first (`cloud::teardown`), and its state-store objects
//! only once AWS holds nothing of it: the CA keys and the spec are what a half-deleted cluster's next delete
//! (or a restore) needs. etcd backups stay unless `--delete-backups`.

use ballast_state::irsa::store::DiscoveryStore;
use ballast_state::irsa::IrsaSettings;
use ballast_state::layout::ClusterPaths;
use ballast_store::registry::{Registry, RegistryError, SpecChange};

use super::Context;
use crate::cli::{DeleteArgs, DeleteClusterArgs, DeleteWhat};
use crate::cloud::identity::{render_adopted, Identity};
use crate::cloud::teardown::inventory::render_preview;
use crate::cloud::teardown::{
    discover, teardown, DiscoveryTarget, Inventory, ResourceKind, TeardownProgress,
};
use crate::cloud::{CallLog, Cloud};
use crate::error::CommandError;
use crate::progress::Progress;
use crate::reports::cache::ReportCache;

pub async fn run(context: &Context, args: DeleteArgs) -> Result<(), CommandError> {
    match args.what {
        DeleteWhat::Cluster(args) => delete_cluster(context, args).await,
        DeleteWhat::Secret(args) => super::keys::delete_secret(context, args).await,
        DeleteWhat::Instancegroup { group, yes } => {
            let name = context.cluster_name(None)?;
            let registry = context.registry().await?;
            let stored = registry.load(&name).await?;
            let Some(version) = stored.group_versions.get(&group) else {
                return Err(RegistryError::InstanceGroupNotFound {
                    cluster: name,
                    group,
                }
                .into());
            };
            let change = SpecChange {
                delete_groups: vec![(group.clone(), version.clone())],
                ..Default::default()
            };
            if !yes {
                // Validate now, so the preview already says whether the deletion would be refused.
                ballast_store::registry::check(&ballast_store::registry::merged(
                    &stored.config,
                    &change,
                ))?;
                println!("Would delete instance group {group:?} of cluster {name:?}.");
                eprintln!("Run again with --yes to delete it.");
                return Ok(());
            }
            registry.change(&name, &change, &context.writer).await?;
            eprintln!("Deleted instance group {group:?} of cluster {name:?}.");
            Ok(())
        }
    }
}

/// The cluster's objects in the store: those a delete removes, and the etcd backups it keeps.
struct StoreObjects {
    remove: Vec<String>,
    kept_backups: usize,
    backups_prefix: String,
    /// Keys prefixes `Registry::delete` must leave.
    keep: Vec<String>,
}

impl StoreObjects {
    async fn read(
        registry: &Registry,
        name: &str,
        delete_backups: bool,
    ) -> Result<Self, CommandError> {
        let backups_prefix = ClusterPaths::new(name).etcd_backups();
        let objects = registry.objects(name).await?;
        let (backups, others): (Vec<String>, Vec<String>) = objects
            .into_iter()
            .partition(|k| k.starts_with(&backups_prefix));
        let (remove, kept_backups, keep) = if delete_backups {
            ([others, backups].concat(), 0, Vec::new())
        } else {
            (others, backups.len(), vec![backups_prefix.clone()])
        };
        Ok(StoreObjects {
            remove,
            kept_backups,
            backups_prefix,
            keep,
        })
    }

    fn print_preview(&self, registry: &Registry, name: &str) {
        if !self.remove.is_empty() {
            println!(
                "Would delete {} objects of cluster {name:?} from {}:",
                self.remove.len(),
                registry.store().url()
            );
            for key in &self.remove {
                println!("  {key}");
            }
        }
        self.print_kept(registry, name, "Would keep");
    }

    fn print_kept(&self, registry: &Registry, name: &str, verb: &str) {
        if self.kept_backups > 0 {
            println!(
                "{verb} {} etcd backup objects in {}/{} (`ballast etcd list-backups {name}` lists them; \
                 `ballast delete cluster {name} --delete-backups --yes` deletes them).",
                self.kept_backups,
                registry.store().url(),
                self.backups_prefix
            );
        }
    }
}

async fn delete_cluster(context: &Context, args: DeleteClusterArgs) -> Result<(), CommandError> {
    let name = context.cluster_name(args.cluster_name.as_deref())?;
    let registry = context.registry().await?;
    let store = StoreObjects::read(&registry, &name, args.delete_backups).await?;
    let not_found = || -> CommandError {
        RegistryError::ClusterNotFound {
            cluster: name.clone(),
            store: registry.store().url(),
        }
        .into()
    };
    if args.unregister && args.force {
        // Without looking at AWS: the operator takes over whatever the cluster still owns there. The cluster's id
        // stays, so a later `delete cluster --region ... --yes` still knows those resources as this cluster's.
        if store.remove.is_empty() {
            return Err(not_found());
        }
        let id_key = ClusterPaths::new(&name).cluster_id();
        let mut store = store;
        store.remove.retain(|k| *k != id_key);
        store.keep.push(id_key);
        return unregister(&registry, &name, &store, &context.writer, args.yes).await;
    }
    let Some(region) = region(&registry, &name, args.region.as_deref(), &store).await? else {
        // Only kept backups are left of a finished delete (which emptied AWS before the store).
        if !args.delete_backups {
            return Err(not_found());
        }
        return unregister(&registry, &name, &store, &context.writer, args.yes).await;
    };
    let cloud = Cloud::connect(&region, CallLog::new()).await;
    let discovery = discovery_target(&registry, &name, &region).await?;
    let inventory = discover(&cloud, &name, discovery.as_ref()).await?;
    if inventory.is_empty() && store.remove.is_empty() {
        return Err(not_found());
    }
    refuse_while_terraform_owns(&registry, &name, &inventory).await?;
    if args.unregister {
        refuse_while_owned(&name, &inventory)?;
        return unregister(&registry, &name, &store, &context.writer, args.yes).await;
    }
    // Before the preview and before any delete: everything found under the name must carry this store's id.
    let id = ballast_store::cluster_id::read(registry.store(), &name)
        .await
        .map_err(RegistryError::from)?;
    let identity = Identity {
        cluster: name.clone(),
        id: id.clone(),
        adopt_untagged: args.adopt_untagged,
    };
    let adopted = identity
        .check(&inventory.resources, "they are deleted with the cluster")
        .map_err(crate::cloud::engine::UpdateError::from)?;
    if !adopted.is_empty() {
        eprint!("{}", render_adopted(&adopted, &name, id.as_deref()));
    }
    if !args.yes {
        print!("{}", render_preview(&inventory, &name));
        store.print_preview(&registry, &name);
        eprintln!("Nothing was changed. Run `ballast delete cluster {name} --yes` to delete.");
        return Ok(());
    }
    let progress = DeleteProgress(Progress::on_stderr(
        inventory.resources.len() as u64,
        "resources deleted",
        false,
    ));
    let report = teardown(&cloud, &name, &identity, discovery.as_ref(), &progress).await?;
    // The bar cleared before the summary goes to stdout.
    drop(progress);
    println!(
        "AWS: nothing of cluster {name} is left in {region} ({} rounds, {:.1} s):",
        report.rounds,
        report.elapsed.as_secs_f64()
    );
    print!("{}", report.summary());
    let removed = if store.remove.is_empty() {
        0
    } else {
        remove_store_objects(&registry, &name, &store, &context.writer).await?
    };
    println!(
        "State store: {removed} objects of cluster {name} removed from {}.",
        registry.store().url()
    );
    store.print_kept(&registry, &name, "Kept");
    eprintln!("Deleted cluster {name:?}.");
    Ok(())
}

/// `delete cluster`'s progress: the teardown's stage lines as `delete: ...`, and on a terminal a bar of the
/// resources deleted of those found, with the kind being deleted now.
struct DeleteProgress(Progress);

impl TeardownProgress for DeleteProgress {
    fn line(&self, line: &str) {
        self.0.line(&format!("delete: {line}"));
    }

    fn tally(&self, found: usize, left: usize) {
        self.0.set_total(found as u64);
        self.0.set_done(found.saturating_sub(left) as u64);
    }

    fn deleting(&self, kind: ResourceKind) {
        self.0.current(&format!("deleting {kind}"));
    }
}

/// The region to look in: the spec's (still in the store until AWS is empty), or `--region` when the spec is
/// gone. `None` when neither is known and nothing but kept backups is left, so there is nothing to look for.
async fn region(
    registry: &Registry,
    name: &str,
    flag: Option<&str>,
    store: &StoreObjects,
) -> Result<Option<String>, CommandError> {
    let spec = match registry.load_completed(name).await {
        Ok(completed) => completed.cluster.spec.region.clone(),
        Err(RegistryError::ClusterNotFound { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    match (spec, flag) {
        (Some(spec), Some(flag)) if spec != flag => Err(CommandError::Usage(format!(
            "--region {flag} is not cluster {name}'s region: its spec says {spec}; drop --region"
        ))),
        (Some(region), _) => Ok(Some(region)),
        (None, Some(flag)) => Ok(Some(flag.to_string())),
        (None, None)
            if store
                .remove
                .iter()
                .all(|k| k.starts_with(&store.backups_prefix)) =>
        {
            Ok(None)
        }
        (None, None) => Err(CommandError::Usage(format!(
            "cluster {name}'s spec is no longer in {}, so its region is unknown: pass --region REGION to find \
             and delete what it left in AWS",
            registry.store().url()
        ))),
    }
}

/// Where the cluster's spec publishes IRSA's discovery documents (the spec stays in the store until AWS is
/// empty), so the teardown deletes exactly those two. `None` without discovery, or with the spec gone (a
/// finished delete removed the documents before it).
async fn discovery_target(
    registry: &Registry,
    name: &str,
    region: &str,
) -> Result<Option<DiscoveryTarget>, CommandError> {
    let completed = match registry.load_completed(name).await {
        Ok(completed) => completed,
        Err(RegistryError::ClusterNotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(irsa) = IrsaSettings::of(&completed.cluster.spec) else {
        return Ok(None);
    };
    let store = DiscoveryStore::parse(&irsa.discovery.discovery_store).map_err(|e| {
        CommandError::Usage(format!(
            "cluster {name}'s spec.serviceAccountIssuerDiscovery.discoveryStore: {e}; fix it with `ballast \
             edit cluster {name}` so delete can find the discovery documents"
        ))
    })?;
    let s3 = crate::cloud::kinds::oidc_discovery::s3(region).await;
    let owner = s3.owner(&store.bucket).await?;
    Ok(Some(DiscoveryTarget {
        store,
        s3: s3.client,
        owner,
    }))
}

/// `--unregister` must not orphan running, billing resources whose CA keys it is about to delete.
fn refuse_while_owned(name: &str, inventory: &Inventory) -> Result<(), CommandError> {
    let owned = inventory.owned();
    if owned.is_empty() {
        return Ok(());
    }
    Err(CommandError::ResourcesRemain {
        cluster: name.to_string(),
        resources: owned.iter().map(|r| r.label()).collect(),
    })
}

/// Removes the cluster's objects from the store (all but kept backups), or shows which without `yes`.
async fn unregister(
    registry: &Registry,
    name: &str,
    store: &StoreObjects,
    writer: &ballast_store::registry::Writer,
    yes: bool,
) -> Result<(), CommandError> {
    if !yes {
        store.print_preview(registry, name);
        eprintln!("Run again with --yes to delete them.");
        return Ok(());
    }
    let n = remove_store_objects(registry, name, store, writer).await?;
    eprintln!(
        "Deleted cluster {name:?}: {n} objects removed from {}.",
        registry.store().url()
    );
    store.print_kept(registry, name, "Kept");
    Ok(())
}

/// Removes the cluster's objects from the store (all but kept backups), and then this operator's cache of its
/// reports (`reports::cache`): nothing of a deleted cluster stays on the operator's machine either.
async fn remove_store_objects(
    registry: &Registry,
    name: &str,
    store: &StoreObjects,
    writer: &ballast_store::registry::Writer,
) -> Result<usize, CommandError> {
    let removed = registry.delete(name, writer, &store.keep).await?;
    if let Some(cache) = ReportCache::from_env(&registry.store().url(), name) {
        cache.clear();
    }
    Ok(removed)
}

/// A Terraform-managed cluster's AWS resources are Terraform's to delete (kops: `terraform destroy` first):
/// while any exist, `delete cluster` deletes nothing and says so. Once they are gone it removes the rest (the
/// state-store objects, the marker among them).
async fn refuse_while_terraform_owns(
    registry: &Registry,
    name: &str,
    inventory: &Inventory,
) -> Result<(), CommandError> {
    let marker = ClusterPaths::new(name).terraform_managed();
    if inventory.is_empty() || registry.store().get(&marker).await?.is_none() {
        return Ok(());
    }
    Err(CommandError::Usage(format!(
        "cluster {name} is managed by Terraform and {} of its AWS resources exist: nothing was deleted. Run \
         `terraform destroy` in the directory `ballast update cluster {name} --target terraform --yes` wrote \
         (its path is in {}/{marker}), then `ballast delete cluster {name} --yes` deletes what is left",
        inventory.resources.len(),
        registry.store().url()
    )))
}
