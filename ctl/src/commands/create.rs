//! `create cluster`, `create -f` and `replace -f`.

use ballast_state::document::{check_unique_groups, SpecObject};
use ballast_state::generate::{generate, ClusterTemplate};
use ballast_state::pki::ClusterSecrets;
use ballast_state::spec::{ClusterConfig, InstanceGroup, Networking, Topology};
use ballast_state::validate::check_cluster_name;
use ballast_store::registry::{check, check_new, Registry, RegistryError, SpecChange};
use ballast_store::store::{Precondition, StateStore};

use super::{read_objects, Context};
use crate::cli::{
    CreateArgs, CreateClusterArgs, CreateWhat, NetworkingArg, ReplaceArgs, SpecFormat, TopologyArg,
};
use crate::error::CommandError;
use crate::output;

pub async fn run(context: &Context, args: CreateArgs) -> Result<(), CommandError> {
    match (args.file, args.what) {
        (Some(file), None) => {
            let objects = read_objects(&file)?;
            create_objects(context, &file.display().to_string(), objects).await
        }
        (None, Some(CreateWhat::Cluster(flags))) => create_cluster(context, *flags).await,
        (None, Some(CreateWhat::Secret(args))) => super::keys::create_secret(context, args).await,
        _ => Err(CommandError::Usage(
            "say what to create: `ballast create cluster --name NAME --zones ZONES` or `ballast create -f FILE`"
                .to_string(),
        )),
    }
}

async fn create_cluster(context: &Context, flags: CreateClusterArgs) -> Result<(), CommandError> {
    let name = context.cluster_name(flags.cluster_name.as_deref())?;
    check_cluster_name(&name).map_err(|m| CommandError::Usage(format!("--name: {m}")))?;
    let mut flags = flags;
    if let Some(path) = flags.shared_from.take() {
        let shared = shared_network_from(&path, &flags.zones)?;
        flags.network_id = Some(shared.vpc_id);
        flags.subnets = shared.subnet_ids;
        if flags.network_cidr.is_none() {
            flags.network_cidr = shared.vpc_cidr;
        }
    }
    let template_admin_access_empty = flags.admin_access.is_empty();
    let template = ClusterTemplate {
        name: name.clone(),
        zones: flags.zones,
        control_plane_zones: flags.control_plane_zones,
        control_plane_count: flags.control_plane_count,
        node_count: flags.node_count,
        node_size: flags.node_size,
        control_plane_size: flags.control_plane_size,
        kubernetes_version: flags.kubernetes_version,
        network_cidr: flags.network_cidr,
        network_id: flags.network_id,
        subnet_ids: flags.subnets,
        topology: flags.topology.map(|t| match t {
            TopologyArg::Public => Topology::Public,
            TopologyArg::Private => Topology::Private,
        }),
        networking: flags.networking.map(|n| match n {
            NetworkingArg::AmazonVpc => Networking::AmazonVpc,
            NetworkingArg::Cilium => Networking::Cilium,
            NetworkingArg::Calico => Networking::Calico,
            NetworkingArg::Kubenet => Networking::Kubenet,
        }),
        ssh_access: flags.ssh_access,
        admin_access: flags.admin_access,
        image: flags.image,
        encrypt_etcd_storage: flags.encrypt_etcd_storage,
        state_kms_key: context.kms_key.clone(),
    };
    let config = generate(&template).map_err(|errors| {
        CommandError::Usage(
            errors
                .iter()
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect::<Vec<_>>()
                .join("\n"),
        )
    })?;
    // Flags can still make an invalid spec (a bad CIDR, say): say so in terms of the spec's fields. A dry run
    // refuses what the creation would.
    check_new(&config)?;
    if flags.dry_run {
        let objects = spec_objects(&config);
        let text = match flags.output {
            SpecFormat::Yaml => output::yaml_documents(&objects)?,
            SpecFormat::Json => output::json(&objects)?,
        };
        print!("{text}");
        return Ok(());
    }
    if template_admin_access_empty {
        eprintln!(
            "Note: the Kubernetes API will be reachable only from inside the cluster's network \
             (spec.kubernetesApiAccess: []): pass --admin-access CIDR (your network's, or 0.0.0.0/0 for anywhere; \
             the API still requires credentials), or set the field later with `ballast edit cluster`."
        );
    }
    let registry = context.registry().await?;
    if flags.yes {
        // Fail before storing anything when the cluster could not be built from this store.
        super::update::require_s3(&registry)?;
    }
    store_new_cluster(context, &registry, &config).await?;
    if flags.yes {
        super::update::update_cluster(&registry, &name, true, false, false).await?;
    }
    Ok(())
}

pub(super) async fn store_new_cluster(
    context: &Context,
    registry: &Registry,
    config: &ClusterConfig,
) -> Result<(), CommandError> {
    warn_about_bucket_posture(context, registry).await;
    let secrets = ClusterSecrets::generate(config.name()).map_err(RegistryError::from)?;
    let completed = registry.create(config, &secrets, &context.writer).await?;
    eprintln!(
        "Cluster {:?} stored in {} with {} instance groups, its CAs and its secrets.",
        config.name(),
        registry.store().url(),
        completed.instance_groups.len()
    );
    eprintln!(
        "  list its groups:  ballast get instancegroups --name {}",
        config.name()
    );
    eprintln!(
        "  change it:        ballast edit cluster --name {}",
        config.name()
    );
    Ok(())
}

/// Warns, naming the bucket, the setting and the command that fixes it, for each setting of an S3 state bucket
/// that leaves the cluster's keys less safe than they should be (docs/security.md). A warning, not a refusal:
/// the bucket is the operator's (it may be governed by their organisation's own tooling), the cluster's own
/// objects are encrypted and private either way, and `validate cluster` keeps failing its `state bucket` check
/// until the bucket is fixed.
async fn warn_about_bucket_posture(context: &Context, registry: &Registry) {
    let StateStore::S3(s3) = registry.store() else {
        return;
    };
    match s3.posture().await {
        Ok(posture) => {
            for problem in posture.problems(context.kms_key.as_deref()) {
                eprintln!("Warning: state bucket {problem}");
            }
        }
        Err(e) => eprintln!(
            "Warning: could not check state bucket {}'s public-access block, versioning and default encryption: {e}",
            s3.bucket()
        ),
    }
}

/// Every object of a config, cluster first.
pub fn spec_objects(config: &ClusterConfig) -> Vec<SpecObject> {
    std::iter::once(SpecObject::Cluster(config.cluster.clone()))
        .chain(
            config
                .instance_groups
                .iter()
                .cloned()
                .map(SpecObject::InstanceGroup),
        )
        .collect()
}

/// The objects of a file, split into an optional cluster and instance groups, with the cluster they belong to.
fn split_objects(
    context: &Context,
    objects: Vec<SpecObject>,
) -> Result<
    (
        String,
        Option<ballast_state::spec::Cluster>,
        Vec<InstanceGroup>,
    ),
    CommandError,
> {
    let mut cluster = None;
    let mut groups = Vec::new();
    for object in objects {
        match object {
            SpecObject::Cluster(c) if cluster.is_some() => {
                return Err(CommandError::Usage(format!(
                    "the file holds more than one Cluster ({:?} and more): give one cluster per file",
                    c.metadata.name
                )))
            }
            SpecObject::Cluster(c) => cluster = Some(c),
            SpecObject::InstanceGroup(ig) => groups.push(ig),
        }
    }
    let name = match &cluster {
        Some(c) => context.cluster_name(Some(&c.metadata.name))?,
        None => context.cluster_name(None).map_err(|_| {
            CommandError::Usage(
                "the file holds instance groups but no Cluster: say which cluster they belong to with --name".into(),
            )
        })?,
    };
    Ok((name, cluster, groups))
}

async fn create_objects(
    context: &Context,
    source: &str,
    objects: Vec<SpecObject>,
) -> Result<(), CommandError> {
    let (name, cluster, groups) = split_objects(context, objects)?;
    let registry = context.registry().await?;
    match cluster {
        Some(cluster) => {
            let config = ClusterConfig {
                cluster,
                instance_groups: groups,
            };
            check_new(&config)?;
            store_new_cluster(context, &registry, &config).await
        }
        None => {
            check_unique_groups(source, &groups).map_err(CommandError::InvalidSpec)?;
            let stored = registry.load(&name).await?;
            let mut change = SpecChange::default();
            for ig in groups {
                if stored.config.instance_group(&ig.metadata.name).is_some() {
                    return Err(RegistryError::InstanceGroupExists {
                        cluster: name,
                        group: ig.metadata.name,
                    }
                    .into());
                }
                change.put_groups.push((ig, Precondition::MustNotExist));
            }
            let names: Vec<String> = change
                .put_groups
                .iter()
                .map(|(ig, _)| ig.metadata.name.clone())
                .collect();
            registry.change(&name, &change, &context.writer).await?;
            eprintln!(
                "Created instance groups {} in cluster {name:?}.",
                names.join(", ")
            );
            Ok(())
        }
    }
}

pub async fn replace(context: &Context, args: ReplaceArgs) -> Result<(), CommandError> {
    let objects = read_objects(&args.file)?;
    let (name, cluster, groups) = split_objects(context, objects)?;
    let registry = context.registry().await?;
    let (stored, cluster) = match (registry.load(&name).await, cluster) {
        (Ok(stored), cluster) => (stored, cluster),
        (Err(RegistryError::ClusterNotFound { .. }), Some(cluster)) if args.force => {
            let config = ClusterConfig {
                cluster,
                instance_groups: groups,
            };
            check(&config)?;
            return store_new_cluster(context, &registry, &config).await;
        }
        (Err(e), _) => return Err(e.into()),
    };
    check_unique_groups(&args.file.display().to_string(), &groups)
        .map_err(CommandError::InvalidSpec)?;
    let mut change = SpecChange::default();
    if let Some(cluster) = cluster {
        change.cluster = Some((
            cluster,
            Precondition::MustMatch(stored.cluster_version.clone()),
        ));
    }
    for ig in groups {
        let precondition = stored.group_precondition(&ig.metadata.name);
        if precondition == Precondition::MustNotExist && !args.force {
            return Err(RegistryError::InstanceGroupNotFound {
                cluster: name,
                group: ig.metadata.name,
            }
            .into());
        }
        change.put_groups.push((ig, precondition));
    }
    registry.change(&name, &change, &context.writer).await?;
    eprintln!(
        "Replaced {} object(s) of cluster {name:?}.",
        change.put_groups.len() + usize::from(change.cluster.is_some())
    );
    Ok(())
}

/// A shared network, as `terraform output -json` describes it.
#[derive(Debug, PartialEq, Eq)]
pub struct SharedNetwork {
    pub vpc_id: String,
    pub vpc_cidr: Option<String>,
    /// One per zone, in the order of the zones.
    pub subnet_ids: Vec<String>,
}

fn shared_network_from(
    path: &std::path::Path,
    zones: &[String],
) -> Result<SharedNetwork, CommandError> {
    let flag = format!("--shared-from {}", path.display());
    let bytes = ballast_store::local_file::read_file_bounded(
        path,
        ballast_state::limits::MAX_TERRAFORM_OUTPUTS_FILE,
    )
    .map_err(|e| CommandError::Usage(format!("{flag}: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| {
        CommandError::Usage(format!(
            "{flag}: not text, so not the JSON of `terraform output -json`"
        ))
    })?;
    parse_terraform_outputs(&text, zones)
        .map_err(|m| CommandError::Usage(format!("--shared-from {}: {m}", path.display())))
}

/// Why a `--shared-from` file is not the outputs Ballast needs; the messages say what to add or change.
#[derive(Debug, thiserror::Error)]
pub enum TerraformOutputsError {
    #[error("not the JSON of `terraform output -json`: {source}")]
    NotJson {
        #[source]
        source: serde_json::Error,
    },
    #[error("no output `vpc_id` (a string): add `output \"vpc_id\" {{ value = aws_vpc.X.id }}`")]
    NoVpcId,
    #[error("no output `subnet_ids` (a list, or a map of zone to id)")]
    NoSubnetIds,
    #[error("`subnet_ids` must hold strings")]
    SubnetNotString,
    #[error("`subnet_ids` has no subnet for zone {zone:?}")]
    NoSubnetForZone { zone: String },
    #[error("`subnet_ids` must be a list, or a map of zone to subnet id")]
    SubnetIdsShape,
}

/// Reads `{"vpc_id": {"value": ...}, "vpc_cidr": {...}, "subnet_ids": {"value": [...] or {zone: id}}}`.
pub fn parse_terraform_outputs(
    text: &str,
    zones: &[String],
) -> Result<SharedNetwork, TerraformOutputsError> {
    let outputs: serde_json::Value =
        serde_json::from_str(text).map_err(|source| TerraformOutputsError::NotJson { source })?;
    let value = |key: &str| outputs.get(key).map(|o| o.get("value").unwrap_or(o));
    let vpc_id = value("vpc_id")
        .or_else(|| value("network_id"))
        .and_then(|v| v.as_str())
        .ok_or(TerraformOutputsError::NoVpcId)?
        .to_string();
    let vpc_cidr = value("vpc_cidr")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let subnets = value("subnet_ids").ok_or(TerraformOutputsError::NoSubnetIds)?;
    let subnet_ids = match subnets {
        serde_json::Value::Array(items) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or(TerraformOutputsError::SubnetNotString)
            })
            .collect::<Result<Vec<_>, _>>()?,
        serde_json::Value::Object(by_zone) => zones
            .iter()
            .map(|zone| {
                by_zone
                    .get(zone)
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
                    .ok_or_else(|| TerraformOutputsError::NoSubnetForZone { zone: zone.clone() })
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(TerraformOutputsError::SubnetIdsShape),
    };
    Ok(SharedNetwork {
        vpc_id,
        vpc_cidr,
        subnet_ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terraform_outputs_fill_the_shared_network() {
        let zones = vec!["us-west-2a".to_string(), "us-west-2b".to_string()];
        let list = r#"{"vpc_id": {"sensitive": false, "type": "string", "value": "vpc-0123456789abcdef0"},
            "subnet_ids": {"type": ["list", "string"], "value": ["subnet-aaaaaaaa", "subnet-bbbbbbbb"]}}"#;
        assert_eq!(
            parse_terraform_outputs(list, &zones).expect("list form"),
            SharedNetwork {
                vpc_id: "vpc-0123456789abcdef0".into(),
                vpc_cidr: None,
                subnet_ids: vec!["subnet-aaaaaaaa".into(), "subnet-bbbbbbbb".into()],
            }
        );
        let map = r#"{"vpc_id": {"value": "vpc-1"}, "vpc_cidr": {"value": "10.1.0.0/16"},
            "subnet_ids": {"value": {"us-west-2b": "subnet-b", "us-west-2a": "subnet-a"}}}"#;
        let shared = parse_terraform_outputs(map, &zones).expect("map form");
        assert_eq!(shared.subnet_ids, vec!["subnet-a", "subnet-b"]);
        assert_eq!(shared.vpc_cidr.as_deref(), Some("10.1.0.0/16"));
        let missing = parse_terraform_outputs(r#"{"subnet_ids": {"value": []}}"#, &zones)
            .expect_err("no vpc")
            .to_string();
        assert!(missing.contains("vpc_id"), "{missing}");
        let zone = parse_terraform_outputs(
            r#"{"vpc_id": {"value": "vpc-1"}, "subnet_ids": {"value": {"us-west-2a": "s"}}}"#,
            &zones,
        )
        .expect_err("zone missing")
        .to_string();
        assert!(zone.contains("us-west-2b"), "{zone}");
    }
}
