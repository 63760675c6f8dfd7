//! `get clusters`, `get instancegroups` and `get instances`.

use std::collections::BTreeSet;

use ballast_state::defaults::complete;
use ballast_state::spec::{Cluster, ClusterConfig, InstanceGroup, Role};
use ballast_store::registry::RegistryError;

use super::Context;
use crate::cli::{GetArgs, GetObjectArgs, GetWhat, OutputFormat};
use crate::cloud::aws::{cluster_instances, tag_map, GROUP_TAG, NODE_SPEC_HASH_TAG, ROLE_TAG};
use crate::cloud::{CallLog, Cloud};
use crate::error::CommandError;
use crate::output;
use crate::reports::nodes::{read_reports, untrusted_reason, NodeSpecs, ReportRead, SpecState};

pub async fn run(context: &Context, args: GetArgs) -> Result<(), CommandError> {
    let text = match args.what {
        GetWhat::Clusters(args) => return clusters(context, args).await,
        GetWhat::Instancegroups(args) => instance_groups(context, args).await?,
        GetWhat::Instances(args) => instances(context, args).await?,
        GetWhat::Secrets(args) => super::keys::get(context, args, false).await?,
        GetWhat::Keypairs(args) => super::keys::get(context, args, true).await?,
    };
    print!("{text}");
    Ok(())
}

/// Prints the clusters asked for. A listing of every cluster prints those that can be read, warns on stderr
/// for each one whose stored objects are damaged, and then fails naming them (as `kops get clusters` does):
/// one damaged cluster does not hide the others. A cluster asked for by name fails as it is.
async fn clusters(context: &Context, args: GetObjectArgs) -> Result<(), CommandError> {
    let registry = context.registry().await?;
    let (names, listing) = match args.object.as_deref().or(context.name_filter()) {
        Some(name) => (vec![name.to_string()], false),
        None => (registry.list_clusters().await?, true),
    };
    let mut configs = Vec::new();
    let mut damaged = Vec::new();
    for name in &names {
        let stored = match registry.load(name).await {
            Ok(stored) => stored,
            Err(e @ RegistryError::Corrupt(_)) if listing => {
                eprintln!("warning: cluster {name:?} cannot be read: {e}");
                damaged.push(name.clone());
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        configs.push(if args.full {
            complete(&stored.config)
        } else {
            stored.config
        });
    }
    print!("{}", render_clusters(&configs, args.output)?);
    if damaged.is_empty() {
        Ok(())
    } else {
        Err(CommandError::DamagedClusters {
            clusters: damaged,
            store: registry.store().url(),
        })
    }
}

fn render_clusters(
    configs: &[ClusterConfig],
    output: OutputFormat,
) -> Result<String, CommandError> {
    let clusters: Vec<&Cluster> = configs.iter().map(|c| &c.cluster).collect();
    match output {
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
            Role::Bastion => "Bastion".to_string(),
            Role::ApiServer => "ApiServer".to_string(),
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

/// One instance as `get instances` shows it.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct InstanceView {
    instance_id: String,
    instance_group: String,
    role: String,
    zone: String,
    private_ip: String,
    state: String,
    /// `current`, `outdated` (its node spec changed since it booted) or `unknown`.
    node_spec: String,
    /// What its nodeup reported, if it has and the report is signed by the instance's own node.
    report: Option<ballast_state::report::NodeReport>,
    /// Why the report stored under its key is not trusted (not shown, not counted), when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    report_untrusted: Option<String>,
}

async fn instances(context: &Context, args: GetObjectArgs) -> Result<String, CommandError> {
    let name = context.cluster_name(None)?;
    let registry = context.registry().await?;
    let completed = registry.load_completed(&name).await?;
    let region = completed.cluster.spec.region.clone().unwrap_or_default();
    let cloud = Cloud::connect(&region, CallLog::new()).await;
    let found = cluster_instances(
        &cloud,
        &name,
        &["pending", "running", "stopping", "stopped"],
    )
    .await?;
    let paths = ballast_state::layout::ClusterPaths::new(&name);
    let mut node_specs = NodeSpecs::new(registry.store(), &paths);
    let wanted: Vec<(&str, Option<&str>)> = found
        .iter()
        .filter_map(|i| Some((i.instance_id()?, i.private_dns_name())))
        .filter(|(id, _)| args.object.as_deref().is_none_or(|o| o == *id))
        .collect();
    let mut reports = read_reports(registry.store(), &paths, wanted).await?;
    let mut views = Vec::new();
    for instance in &found {
        let tags = tag_map(instance.tags());
        let id = instance.instance_id().unwrap_or_default().to_string();
        if args.object.as_deref().is_some_and(|o| o != id) {
            continue;
        }
        let group = tags.get(GROUP_TAG).cloned().unwrap_or_default();
        let node_spec = SpecState::judge(
            tags.get(NODE_SPEC_HASH_TAG).map(String::as_str),
            node_specs.current(&group).await?.as_deref(),
        );
        let (report, report_untrusted) = match reports.remove(&id) {
            Some(ReportRead::Found { report, .. }) => (Some(*report), None),
            Some(ReportRead::Untrusted { why, .. }) => (None, Some(untrusted_reason(&why))),
            _ => (None, None),
        };
        views.push(InstanceView {
            instance_id: id,
            instance_group: group,
            role: tags.get(ROLE_TAG).cloned().unwrap_or_default(),
            zone: instance
                .placement()
                .and_then(|p| p.availability_zone())
                .unwrap_or_default()
                .to_string(),
            private_ip: instance
                .private_ip_address()
                .unwrap_or_default()
                .to_string(),
            state: instance
                .state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_string())
                .unwrap_or_default(),
            node_spec: node_spec.as_str().to_string(),
            report,
            report_untrusted,
        });
    }
    views.sort_by(|a, b| {
        (&a.instance_group, &a.instance_id).cmp(&(&b.instance_group, &b.instance_id))
    });
    match args.output {
        OutputFormat::Json => output::json(&views),
        OutputFormat::Yaml => output::yaml_documents(&views),
        OutputFormat::Table => {
            let rows: Vec<Vec<String>> = views
                .iter()
                .map(|v| {
                    let (phase, error) = match (&v.report, &v.report_untrusted) {
                        (Some(r), _) => (
                            format!("{:?}", r.phase),
                            r.errors.first().cloned().unwrap_or_default(),
                        ),
                        (None, Some(why)) => ("Untrusted".to_string(), why.clone()),
                        (None, None) => ("-".to_string(), String::new()),
                    };
                    vec![
                        v.instance_id.clone(),
                        v.instance_group.clone(),
                        v.zone.clone(),
                        v.private_ip.clone(),
                        v.state.clone(),
                        v.node_spec.clone(),
                        phase,
                        error,
                    ]
                })
                .collect();
            Ok(output::table(
                &[
                    "ID",
                    "GROUP",
                    "ZONE",
                    "IP",
                    "STATE",
                    "NODE SPEC",
                    "NODEUP",
                    "ERROR",
                ],
                &rows,
            ))
        }
    }
}
