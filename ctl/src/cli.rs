//! The command line: clap definitions only. Each command's work is in `commands`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Ballast: production Kubernetes clusters on AWS.
///
/// Exit codes: 0 success; 1 failure (state store or AWS); 2 usage error (bad flag or argument);
/// 3 invalid spec (nothing was changed); 4 conflict (a concurrent change, or the object already exists);
/// 5 not found.
#[derive(Debug, Parser)]
#[command(name = "ballast", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// The state store: s3://BUCKET/PREFIX or file:///PATH.
    #[arg(long, global = true, env = "BALLAST_STATE", value_name = "URL")]
    pub state: Option<String>,

    /// The cluster to act on.
    #[arg(long, global = true, env = "BALLAST_CLUSTER_NAME", value_name = "NAME")]
    pub name: Option<String>,

    /// KMS key for SSE-KMS encryption of an S3 state store (SSE-S3 when unset).
    #[arg(long, global = true, env = "BALLAST_STATE_KMS_KEY", value_name = "KEY")]
    pub state_kms_key: Option<String>,

    /// More logging on stderr (-v info, -vv debug). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a cluster from flags, or objects from a file (-f).
    Create(CreateArgs),
    /// Replace objects with the ones in a file.
    Replace(ReplaceArgs),
    /// Show clusters or instance groups.
    Get(GetArgs),
    /// Edit a cluster or instance group in $EDITOR; the result is validated before it is saved.
    Edit(EditArgs),
    /// Plan the cluster's AWS resources from its spec; apply them with --yes.
    Update(UpdateArgs),
    /// Delete a cluster or an instance group.
    Delete(DeleteArgs),
    /// Print a shell completion script.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CreateArgs {
    /// A YAML file of Cluster and InstanceGroup objects.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[command(subcommand)]
    pub what: Option<CreateWhat>,
}

#[derive(Debug, Subcommand)]
pub enum CreateWhat {
    /// Create a cluster spec (a Cluster and its InstanceGroups) and its PKI in the state store.
    Cluster(Box<CreateClusterArgs>),
}

#[derive(Debug, Args)]
pub struct CreateClusterArgs {
    /// The cluster's name, a DNS name (or --name).
    #[arg(value_name = "NAME")]
    pub cluster_name: Option<String>,
    /// Availability zones for the cluster's subnets, comma separated.
    #[arg(long, value_delimiter = ',')]
    pub zones: Vec<String>,
    /// Zones for the control plane (default: --zones).
    #[arg(long, value_delimiter = ',')]
    pub control_plane_zones: Vec<String>,
    /// Control-plane instances, one instance group each: 1, 3 or 5 (default 3 with three or more zones, else 1).
    #[arg(long)]
    pub control_plane_count: Option<u32>,
    /// Worker nodes (default: one per zone).
    #[arg(long)]
    pub node_count: Option<u32>,
    /// Instance type of the worker nodes.
    #[arg(long)]
    pub node_size: Option<String>,
    /// Instance type of the control plane.
    #[arg(long)]
    pub control_plane_size: Option<String>,
    #[arg(long)]
    pub kubernetes_version: Option<String>,
    /// The new VPC's CIDR (default 172.20.0.0/16).
    #[arg(long, env = "BALLAST_NETWORK_CIDR")]
    pub network_cidr: Option<String>,
    /// Use this existing (shared) VPC.
    #[arg(long)]
    pub network_id: Option<String>,
    /// Existing (shared) subnet ids, one per zone in the order of --zones.
    #[arg(long, value_delimiter = ',')]
    pub subnets: Vec<String>,
    /// Fill --network-id, --network-cidr and --subnets from `terraform output -json` (outputs `vpc_id`,
    /// `vpc_cidr`, and `subnet_ids`: a list in the order of --zones, or a map of zone to subnet id).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["network_id", "subnets"])]
    pub shared_from: Option<PathBuf>,
    #[arg(long, value_enum)]
    pub topology: Option<TopologyArg>,
    #[arg(long, value_enum)]
    pub networking: Option<NetworkingArg>,
    /// CIDRs allowed to SSH to the instances (default: none).
    #[arg(long, value_delimiter = ',')]
    pub ssh_access: Vec<String>,
    /// CIDRs allowed to reach the Kubernetes API (default: 0.0.0.0/0).
    #[arg(long, value_delimiter = ',')]
    pub admin_access: Vec<String>,
    /// AMI id or name for every instance group.
    #[arg(long)]
    pub image: Option<String>,
    /// Encrypt etcd's volumes (default true).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub encrypt_etcd_storage: Option<bool>,
    /// Print the spec instead of storing it.
    #[arg(long, conflicts_with = "yes")]
    pub dry_run: bool,
    /// Also build the cluster's AWS resources (as `update cluster --yes`).
    #[arg(long)]
    pub yes: bool,
    /// Output format of --dry-run.
    #[arg(short, long, value_enum, default_value = "yaml")]
    pub output: SpecFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TopologyArg {
    Public,
    Private,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum NetworkingArg {
    AmazonVpc,
    Cilium,
    Calico,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SpecFormat {
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub struct ReplaceArgs {
    /// A YAML file of Cluster and InstanceGroup objects.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub file: PathBuf,
    /// Create the objects that do not exist yet.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(subcommand)]
    pub what: GetWhat,
}

#[derive(Debug, Subcommand)]
pub enum GetWhat {
    /// Clusters in the state store (or one, by name).
    #[command(visible_aliases = ["cluster"])]
    Clusters(GetObjectArgs),
    /// The cluster's instance groups (or one, by name).
    #[command(visible_aliases = ["instancegroup", "ig", "igs"])]
    Instancegroups(GetObjectArgs),
    /// The cluster's instances: from EC2, with whether each runs its group's current node spec and what its
    /// nodeup reported (phase, first error).
    #[command(visible_aliases = ["instance"])]
    Instances(GetObjectArgs),
}

#[derive(Debug, Args)]
pub struct GetObjectArgs {
    /// Only this object.
    #[arg(value_name = "NAME")]
    pub object: Option<String>,
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: OutputFormat,
    /// Show the completed spec (every default filled) instead of the spec as written.
    #[arg(long)]
    pub full: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub struct EditArgs {
    #[command(subcommand)]
    pub what: EditWhat,
}

#[derive(Debug, Subcommand)]
pub enum EditWhat {
    /// The Cluster object.
    Cluster {
        #[arg(value_name = "NAME")]
        cluster_name: Option<String>,
    },
    /// One InstanceGroup.
    #[command(visible_aliases = ["ig"])]
    Instancegroup {
        #[arg(value_name = "GROUP")]
        group: String,
    },
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[command(subcommand)]
    pub what: DeleteWhat,
}

#[derive(Debug, Subcommand)]
pub enum DeleteWhat {
    /// Delete a cluster. Without --yes, only shows what would be deleted.
    Cluster {
        #[arg(value_name = "NAME")]
        cluster_name: Option<String>,
        /// Remove the cluster from the state store only, leaving any AWS resources alone.
        #[arg(long)]
        unregister: bool,
        /// Really delete.
        #[arg(long)]
        yes: bool,
    },
    /// Delete an instance group from the spec. Without --yes, only shows what would be deleted.
    #[command(visible_aliases = ["ig"])]
    Instancegroup {
        #[arg(value_name = "GROUP")]
        group: String,
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    #[command(subcommand)]
    pub what: UpdateWhat,
}

#[derive(Debug, Subcommand)]
pub enum UpdateWhat {
    /// Plan (and with --yes, apply) every AWS resource of the cluster. Without --yes nothing changes.
    Cluster(UpdateClusterArgs),
}

#[derive(Debug, Args)]
pub struct UpdateClusterArgs {
    #[arg(value_name = "NAME")]
    pub cluster_name: Option<String>,
    /// Apply the plan.
    #[arg(long)]
    pub yes: bool,
    /// Also delete owned resources the spec no longer wants (listed in the plan otherwise).
    #[arg(long)]
    pub prune: bool,
    /// Print the AWS calls made, by operation, on stderr.
    #[arg(long)]
    pub stats: bool,
}
