//! `delete cluster` and `delete instancegroup`: a preview without --yes, the deletion with it.

use ballast_state::registry::{RegistryError, SpecChange};

use super::Context;
use crate::cli::{DeleteArgs, DeleteWhat};
use crate::error::CommandError;

pub async fn run(context: &Context, args: DeleteArgs) -> Result<(), CommandError> {
    match args.what {
        DeleteWhat::Cluster {
            cluster_name,
            unregister,
            yes,
        } => {
            let name = context.cluster_name(cluster_name.as_deref())?;
            if !unregister {
                return Err(CommandError::Usage(
                    "this release does not create AWS resources yet, so it cannot delete them: pass --unregister to \
                     remove the cluster from the state store only"
                        .to_string(),
                ));
            }
            let registry = context.registry().await?;
            let objects = registry.objects(&name).await?;
            if objects.is_empty() {
                return Err(RegistryError::ClusterNotFound {
                    cluster: name,
                    store: registry.store().url(),
                }
                .into());
            }
            if !yes {
                println!(
                    "Would delete {} objects of cluster {name:?} from {}:",
                    objects.len(),
                    registry.store().url()
                );
                for key in &objects {
                    println!("  {key}");
                }
                eprintln!("Run again with --yes to delete them.");
                return Ok(());
            }
            let n = registry.delete(&name, &context.writer).await?;
            eprintln!(
                "Deleted cluster {name:?}: {n} objects removed from {}.",
                registry.store().url()
            );
            Ok(())
        }
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
                ballast_state::registry::check(&ballast_state::registry::merged(
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
