//! `get clusters` and `get instancegroups`.

use std::collections::BTreeSet;

use ballast_state::defaults::complete;
use ballast_state::registry::RegistryError;
use ballast_state::spec::{Cluster, ClusterConfig, InstanceGroup, Role};

use super::Context;
use crate::cli::{GetArgs, GetObjectArgs, GetWhat, OutputFormat};
use crate::error::CommandError;
use crate::output;

pub async fn run(context: &Context, args: GetArgs) -> Result<(), CommandError> {
    let text = match args.what {
        GetWhat::Clusters(args) => clusters(context, args).await?,
        GetWhat::Instancegroups(args) => instance_groups(context, args).await?,
    };
    print!("{text}");
    Ok(())
}

async fn clusters(context: &Context, args: GetObjectArgs) -> Result<String, CommandError> {
    let registry = context.registry().await?;
    let names = match args.object.as_deref().or(context.name_filter()) {
        Some(name) => vec![name.to_string()],
        None => registry.list_clusters().await?,
    };
    let mut configs = Vec::new();
    for name in &names {
        let stored = registry.load(name).await?;
        configs.push(if args.full {
            complete(&stored.config)
        } else {
            stored.config
        });
    }
    let clusters: Vec<&Cluster> = configs.iter().map(|c| &c.cluster).collect();
    match args.output {
        OutputFormat::Yaml => output::yaml_documents(&clusters),
        OutputFormat::Json => output::json(&clusters),
        OutputFormat::Table => {
            let rows: Vec<Vec<String>> =
                configs.iter().map(|c| cluster_row(&complete(c))).collect();
            Ok(output::table(
                &[
                    "NAME",
                    "KUBERNETES",
                    "REGION",
                    "ZONES",
                    "CONTROL PLANE",
                    "GROUPS",
                ],
                &rows,
            ))
        }
    }
}

fn cluster_row(config: &ClusterConfig) -> Vec<String> {
    let spec = &config.cluster.spec;
    let zones: BTreeSet<&str> = spec.subnets.iter().map(|s| s.zone.as_str()).collect();
    let control_plane = config
        .instance_groups
        .iter()
        .filter(|ig| ig.spec.role == Role::ControlPlane)
        .count();
    vec![
        config.name().to_string(),
        spec.kubernetes_version.clone().unwrap_or_default(),
        spec.region.clone().unwrap_or_default(),
        zones.into_iter().collect::<Vec<_>>().join(","),
        control_plane.to_string(),
        config.instance_groups.len().to_string(),
    ]
}

async fn instance_groups(context: &Context, args: GetObjectArgs) -> Result<String, CommandError> {
    let name = context.cluster_name(None)?;
    let registry = context.registry().await?;
    let stored = registry.load(&name).await?;
    let config = if args.full {
        complete(&stored.config)
    } else {
        stored.config
    };
    let completed = complete(&config);
    let selected: Vec<&InstanceGroup> = match &args.object {
        Some(group) => {
            let ig = config.instance_group(group).ok_or_else(|| {
                RegistryError::InstanceGroupNotFound {
                    cluster: name.clone(),
                    group: group.clone(),
                }
            })?;
            vec![ig]
        }
        None => config.instance_groups.iter().collect(),
    };
    match args.output {
        OutputFormat::Yaml => output::yaml_documents(&selected),
        OutputFormat::Json => output::json(&selected),
        OutputFormat::Table => {
            let rows: Vec<Vec<String>> = selected
                .iter()
                .filter_map(|ig| completed.instance_group(&ig.metadata.name))
                .map(|ig| group_row(&completed, ig))
                .collect();
            Ok(output::table(
                &["NAME", "ROLE", "MACHINETYPE", "MIN", "MAX", "ZONES"],
                &rows,
            ))
        }
    }
}

fn group_row(config: &ClusterConfig, ig: &InstanceGroup) -> Vec<String> {
    let zones: BTreeSet<&str> = ig
        .spec
        .subnets
        .iter()
        .filter_map(|name| config.cluster.spec.subnets.iter().find(|s| &s.name == name))
        .map(|s| s.zone.as_str())
        .collect();
    let size = |n: Option<u32>| n.map_or_else(String::new, |n| n.to_string());
    vec![
        ig.metadata.name.clone(),
        match ig.spec.role {
            Role::ControlPlane => "ControlPlane".to_string(),
            Role::Node => "Node".to_string(),
        },
        ig.spec.machine_type.clone().unwrap_or_default(),
        size(ig.spec.min_size),
        size(ig.spec.max_size),
        zones.into_iter().collect::<Vec<_>>().join(","),
    ]
}

impl Context {
    /// `get clusters` lists all clusters unless --name narrows it to one.
    fn name_filter(&self) -> Option<&str> {
        self.name.as_deref()
    }
}
