//! The command line: clap definitions only. Each command's work is in `commands`.

use std::path::PathBuf;
use std::time::Duration;

use ballast_state::limits::MAX_GROUP_SIZE;
use ballast_state::validate::CONTROL_PLANE_COUNTS;
use clap::{Args, Parser, Subcommand, ValueEnum};

/// Ballast: production Kubernetes clusters on AWS.
///
/// Exit codes: 0 success; 1 failure (state store or AWS); 2 usage error (bad flag or argument);
/// 3 invalid spec (nothing was changed); 4 conflict (a concurrent change, the object already exists, a refused
/// etcd restore, or a `delete cluster --unregister` refused while AWS resources remain); 5 not found; 6 not ready
/// (`validate cluster` found a failing check, or a --wait ran out); 7 partial (`toolbox dump` wrote what it could).
#[derive(Debug, Parser)]
#[command(name = "ballast", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// The state store: s3://BUCKET/PREFIX or file:///PATH.
    #[arg(long, global = true, env = "BALLAST_STATE", value_name = "URL")]
    pub state: Option<String>,

    /// The cluster to act on.
    #[arg(long, global = true, env = "BALLAST_CLUSTER_NAME", value_name = "NAME")]
    pub name: Option<String>,

    /// KMS key for SSE-KMS encryption of an S3 state store (SSE-S3 when unset): a key id, key ARN, alias or
    /// alias ARN (`create cluster` records it as `spec.stateStore.kmsKeyId`, which must be the key's ARN).
    #[arg(
        long,
        global = true,
        env = "BALLAST_STATE_KMS_KEY",
        value_name = "KEY",
        value_parser = parse_kms_key
    )]
    pub state_kms_key: Option<String>,

    /// How long a change waits for another writer's lock on the cluster before failing (naming the holder):
    /// 0s to 10m.
    #[arg(
        long,
        global = true,
        env = "BALLAST_LOCK_WAIT",
        value_name = "DURATION",
        default_value = "30s",
        value_parser = parse_lock_wait
    )]
    pub lock_wait: Duration,

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
    /// etcd's backups and restores, and its health as the supervisors publish it.
    Etcd(EtcdArgs),
    /// Check that a cluster is up: its instances, their nodeup reports, and etcd.
    Validate(ValidateArgs),
    /// Replace the instances whose configuration changed: control plane first behind etcd, nodes with surge.
    #[command(name = "rolling-update")]
    RollingUpdate(RollingUpdateArgs),
    /// Write a cluster's context into your kubeconfig (with --admin, a short-lived admin certificate).
    Export(ExportArgs),
    /// Import a cluster from another tool's spec (kops): every field mapped, dropped (why) or refused (why).
    Import(ImportArgs),
    /// Rotate a key in stages (docs/keys.md): add a new key, promote it, for the encryption key rewrite the
    /// secrets, then drop the old key.
    ///
    /// Each stage changes the cluster's keyset, then writes the node specs and launch templates that carry it
    /// (as `update cluster --yes`); `rolling-update cluster --yes` then replaces the instances. Run the next
    /// stage only after that roll. A stage out of order is refused with the reason (exit 4) and changes
    /// nothing; a stage already done changes nothing and says so.
    Rotate(RotateArgs),
    /// Diagnostics without SSH: `toolbox dump` gathers a cluster's spec (secrets redacted), the cloud's view,
    /// boot reports, etcd's health, markers and the nodes' log tails (docs/toolbox.md).
    Toolbox(ToolboxArgs),
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
    /// Store operator-supplied key material, checked before anything is stored (docs/keys.md).
    Secret(CreateSecretArgs),
}

#[derive(Debug, Args)]
pub struct CreateSecretArgs {
    #[command(subcommand)]
    pub what: CreateSecretWhat,
}

#[derive(Debug, Subcommand)]
pub enum CreateSecretWhat {
    /// Import an existing CA (kubernetes-ca or etcd-ca) as the keyset's next key, as `rotate KEYSET --stage add`
    /// stages a fresh one; `rotate KEYSET --stage promote` continues from it.
    ///
    /// The certificate must be one PEM certificate of a CA (basicConstraints CA:TRUE, keyUsage keyCertSign), valid
    /// now and for at least 90 more days; the key an unencrypted PEM private key matching it. Anything else is
    /// refused naming the file, and nothing is stored.
    Keypair(CreateKeypairArgs),
    /// Store an SSH public key that nodeup installs in root's authorized_keys on every instance (docs/keys.md).
    ///
    /// The file must hold one OpenSSH public key (ssh-ed25519, ecdsa-sha2-nistp256/384/521, or ssh-rsa of at
    /// least 2048 bits); anything else, a private key above all, is refused and nothing is stored. The key goes
    /// into every node spec: `rolling-update cluster --yes` installs it. Port 22 is opened by spec.sshAccess only.
    #[command(name = "sshpublickey")]
    SshPublicKey(CreateSshKeyArgs),
}

#[derive(Debug, Args)]
pub struct CreateKeypairArgs {
    /// The keyset: kubernetes-ca or etcd-ca.
    #[arg(value_name = "KEYSET")]
    pub keyset: String,
    /// The CA's certificate (PEM).
    #[arg(long, value_name = "FILE")]
    pub cert: PathBuf,
    /// The CA's private key (unencrypted PEM).
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
}

#[derive(Debug, Args)]
pub struct CreateSshKeyArgs {
    /// The key's name in the state store (`ssh/NAME.pub`): a-z, 0-9, '-', '_', '.'.
    #[arg(value_name = "NAME", default_value = ballast_state::ssh_key::DEFAULT_NAME)]
    pub key_name: String,
    /// The public key (OpenSSH format, e.g. ~/.ssh/id_ed25519.pub).
    #[arg(long, value_name = "FILE")]
    pub pubkey: PathBuf,
    /// Replace a different key already stored under NAME (without it, that is refused).
    #[arg(long)]
    pub replace: bool,
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
    // Negative numbers are read as values, so that `-1` is refused naming this flag rather than as a stray one.
    #[arg(long, value_parser = parse_control_plane_count, allow_negative_numbers = true)]
    pub control_plane_count: Option<u32>,
    /// Worker nodes, 0 to 1000 (default: one per zone).
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_GROUP_SIZE)))]
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
    /// CIDRs allowed to reach the Kubernetes API (spec.kubernetesApiAccess). Default: none, the API is reachable
    /// from inside the cluster's network only; 0.0.0.0/0 opens it to anywhere (it still requires credentials).
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

#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(subcommand)]
    pub from: ImportFrom,
}

#[derive(Debug, Subcommand)]
pub enum ImportFrom {
    /// Import what `kops get cluster -o yaml` and `kops get ig -o yaml` print (kops.k8s.io/v1alpha2): the
    /// equivalent Ballast cluster is stored as `create -f` stores one, with new CAs and secrets. A refused field
    /// (Ballast cannot do what it says) stores nothing; docs/kops.md lists every field's fate.
    Kops(ImportKopsArgs),
}

#[derive(Debug, Args)]
pub struct ImportKopsArgs {
    /// kops YAML files (one multi-document stream, or several files); `-` reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Print the Ballast spec and the table of every field's fate; store nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The pod network Ballast installs where kops's `networking: {cni: {}}` left it to you.
    #[arg(long, value_enum)]
    pub networking: Option<NetworkingArg>,
    /// Use Ballast's image for the cluster's version in place of every group's kops image.
    #[arg(long)]
    pub ballast_images: bool,
    /// Give no public IP to groups kops gives one (in public subnets): `associatePublicIp: false` on each.
    #[arg(long)]
    pub no_public_ips: bool,
    /// Output of --dry-run (and of the fate table otherwise: table).
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: ImportFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportFormat {
    Table,
    Yaml,
    Json,
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
    Kubenet,
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
    ///
    /// Listing every cluster prints those that can be read and warns on stderr for each damaged one (naming
    /// it and the object at fault), then exits 1 if any was damaged. A cluster asked for by name that is
    /// damaged fails with its error (exit 3).
    #[command(visible_aliases = ["cluster"])]
    Clusters(GetObjectArgs),
    /// The cluster's instance groups (or one, by name).
    #[command(visible_aliases = ["instancegroup", "ig", "igs"])]
    Instancegroups(GetObjectArgs),
    /// The cluster's instances: from EC2, with whether each runs its group's current node spec and what its
    /// nodeup reported (phase, first error).
    #[command(visible_aliases = ["instance"])]
    Instances(GetObjectArgs),
    /// The cluster's keys and secrets (kubernetes-ca, etcd-ca, service-account, encryption-key): kind, id,
    /// state (next, primary, trusted, distrusted), created, expires. Never a private value.
    #[command(visible_aliases = ["secret"])]
    Secrets(GetKeysArgs),
    /// The cluster's key pairs only (the CAs and the service-account key), as `get secrets`.
    #[command(visible_aliases = ["keypair"])]
    Keypairs(GetKeysArgs),
}

#[derive(Debug, Args)]
pub struct GetKeysArgs {
    /// Only this keyset: kubernetes-ca, etcd-ca, service-account or encryption-key.
    #[arg(value_name = "NAME")]
    pub keyset: Option<String>,
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct RotateArgs {
    /// The key to rotate.
    #[arg(value_enum)]
    pub keyset: KeysetArg,
    /// add: a new key every node trusts, not yet used; promote: the new key signs (or encrypts), the old one
    /// is still trusted; rewrite (encryption-key only): every secret written again with the new key; drop: the
    /// old key is distrusted (kept in the state store, given to no node).
    #[arg(long, value_enum)]
    pub stage: StageArg,
    /// The key the stage must act on (the key to promote, the old key to drop): refused when it is another.
    #[arg(long, value_name = "ID", value_parser = parse_key_id)]
    pub id: Option<String>,
    /// With --stage rewrite: the secrets were rewritten by hand with the command this prints when the API
    /// cannot be reached; record it so the old key can be dropped.
    #[arg(long)]
    pub rewritten_by_hand: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KeysetArg {
    KubernetesCa,
    EtcdCa,
    ServiceAccount,
    EncryptionKey,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StageArg {
    Add,
    Promote,
    Rewrite,
    Drop,
}

/// Key ids are 16 hex digits (key pairs) or `key-<unix seconds>[-<hex>]` (encryption keys): at most 64 characters of
/// letters, digits and '-'.
fn parse_key_id(text: &str) -> Result<String, ArgError> {
    if text.is_empty()
        || text.len() > 64
        || !text.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(ArgError::KeyId);
    }
    Ok(text.to_string())
}

/// `--state-kms-key`: one of AWS's forms of a KMS key (`ballast_state::kms`), never passed on otherwise.
fn parse_kms_key(text: &str) -> Result<String, ArgError> {
    if ballast_state::kms::is_key(text) {
        Ok(text.to_string())
    } else {
        Err(ArgError::KmsKey)
    }
}

/// A command-line value refused by one of the parsers clap calls (clap names the flag before the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    #[error("a key id is 1 to 64 letters, digits or '-' (`ballast get secrets` lists them)")]
    KeyId,
    #[error(transparent)]
    Duration(#[from] ballast_state::duration::DurationError),
    /// A duration of the grammar, outside the flag's bounds.
    #[error("{text:?} is out of range: use {range}")]
    OutOfRange { text: String, range: &'static str },
    #[error("must be 1, 3 or 5 (etcd needs an odd number of members for a quorum)")]
    ControlPlaneCount,
    #[error("is not {}", ballast_state::kms::KEY_FORMS)]
    KmsKey,
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
    /// Delete a cluster: every AWS resource it owns (found by its `kubernetes.io/cluster/NAME=owned` tag and its
    /// resources' names), then its objects in the state store. Without --yes, only shows what would be deleted
    /// and what is kept.
    ///
    /// Resources go in reverse dependency order, in rounds: Auto Scaling Groups with their instances, launch
    /// templates, the load balancer with its listeners and target group, NAT gateways then their Elastic IPs,
    /// instance profiles, roles with their policies, network interfaces and volumes, security groups, route
    /// tables, the internet gateway, subnets, the VPC. "Not yet" failures are retried; interrupted, it continues
    /// when run again. Shared resources (a VPC or subnets given by id) and resources another cluster also tags
    /// only lose this cluster's tag. etcd backups are kept (the output says where) unless --delete-backups.
    Cluster(DeleteClusterArgs),
    /// Delete an instance group from the spec. Without --yes, only shows what would be deleted.
    #[command(visible_aliases = ["ig"])]
    Instancegroup {
        #[arg(value_name = "GROUP")]
        group: String,
        #[arg(long)]
        yes: bool,
    },
    /// Delete operator-supplied material (docs/keys.md).
    Secret(DeleteSecretArgs),
}

#[derive(Debug, Args)]
pub struct DeleteSecretArgs {
    #[command(subcommand)]
    pub what: DeleteSecretWhat,
}

#[derive(Debug, Subcommand)]
pub enum DeleteSecretWhat {
    /// Delete a stored SSH public key: the node specs stop listing it and `rolling-update cluster --yes` removes
    /// it from the instances.
    #[command(name = "sshpublickey")]
    SshPublicKey {
        /// The key's name (`ballast get secrets` lists them).
        #[arg(value_name = "NAME")]
        key_name: String,
    },
}

#[derive(Debug, Args)]
pub struct DeleteClusterArgs {
    #[arg(value_name = "NAME")]
    pub cluster_name: Option<String>,
    /// Remove the cluster from the state store only. Refused while AWS resources it owns exist (they are named),
    /// unless --force.
    #[arg(long)]
    pub unregister: bool,
    /// With --unregister: unregister without looking at AWS, leaving whatever the cluster owns running.
    #[arg(long, requires = "unregister")]
    pub force: bool,
    /// Also delete the cluster's etcd backups (kept by default, under <cluster>/etcd/backups/ in the store).
    #[arg(long)]
    pub delete_backups: bool,
    /// The cluster's AWS region, needed only when its spec is no longer in the state store; refused when it
    /// differs from the spec's.
    #[arg(long)]
    pub region: Option<String>,
    /// Also delete the AWS resources Ballast made under this cluster's name that carry no cluster id (made
    /// before ids): they are listed first. Without it they are refused. A resource carrying another cluster's
    /// id is never deleted.
    #[arg(long)]
    pub adopt_untagged: bool,
    /// Really delete.
    #[arg(long)]
    pub yes: bool,
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
    /// Adopt the AWS resources Ballast made under this cluster's name that carry no cluster id (made before
    /// ids): they are listed, then tagged with this cluster's id. Without it they are refused. A resource
    /// carrying another cluster's id is refused whatever the flags.
    #[arg(long)]
    pub adopt_untagged: bool,
    /// Also delete owned resources the spec no longer wants (listed in the plan otherwise).
    #[arg(long)]
    pub prune: bool,
    /// Print the AWS calls made, by operation, on stderr.
    #[arg(long)]
    pub stats: bool,
    /// Where the resources go: `direct` (made in AWS with --yes) or `terraform` (written as HCL to --out with
    /// --yes; node specs still go to the state store, and the cluster is marked Terraform-managed).
    #[arg(long, value_enum, default_value_t = UpdateTarget::Direct)]
    pub target: UpdateTarget,
    /// With --target terraform: the directory written (default out/terraform).
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    /// With --yes: apply directly to a cluster whose resources Terraform manages (Terraform's next apply
    /// may undo what this one does).
    #[arg(long)]
    pub force_direct: bool,
}

/// `update cluster --target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UpdateTarget {
    Direct,
    Terraform,
}

#[derive(Debug, Args)]
pub struct ToolboxArgs {
    #[command(subcommand)]
    pub what: ToolboxWhat,
}

#[derive(Debug, Subcommand)]
pub enum ToolboxWhat {
    /// Everything needed to diagnose a cluster, in one run and bounded in size (docs/toolbox.md): with --out,
    /// files by kind and an index; without, one document on stdout. Progress on stderr. Exit 7 when the dump is
    /// partial (AWS unreachable, a node silent): what is missing and why is in the index, and the rest is
    /// written.
    Dump(ToolboxDumpArgs),
}

#[derive(Debug, Args)]
pub struct ToolboxDumpArgs {
    #[arg(value_name = "CLUSTER")]
    pub cluster_name: Option<String>,
    /// Write files by kind and an index into this directory (created 0700; it must be new or empty).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[arg(short, long, value_enum, default_value = "yaml")]
    pub output: SpecFormat,
    /// How long to wait for the control-plane nodes to publish fresh log tails after the dump asks: 0s to 5m.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = parse_log_wait)]
    pub log_wait: Duration,
}

/// `toolbox dump --log-wait`: the duration grammar, at most 5 minutes.
pub fn parse_log_wait(text: &str) -> Result<Duration, ArgError> {
    let wait = parse_wait(text)?;
    if wait > Duration::from_secs(300) {
        return Err(ArgError::OutOfRange {
            text: text.to_string(),
            range: "0s to 5m",
        });
    }
    Ok(wait)
}

#[derive(Debug, Args)]
pub struct EtcdArgs {
    #[command(subcommand)]
    pub what: EtcdWhat,
}

#[derive(Debug, Subcommand)]
pub enum EtcdWhat {
    /// Ask the cluster's etcd supervisors for a backup now (the leader's takes it), and wait for it.
    Backup(EtcdBackupArgs),
    /// The cluster's etcd backups in the state store, oldest first.
    #[command(visible_aliases = ["backups"])]
    ListBackups(EtcdListArgs),
    /// Rebuild etcd from a backup, for a cluster that lost all its etcd members. Without --yes, only verifies
    /// the backup and shows what would be done.
    ///
    /// Refused (exit 4) while any member reports a healthy etcd: a restore discards the running cluster's
    /// data. An unknown backup is exit 5, a corrupted one (sha256 mismatch, missing snapshot) exit 1.
    RestoreBackup(EtcdRestoreArgs),
    /// The etcd record (epoch, origin, seed) and each member's published health.
    Status(EtcdListArgs),
}

#[derive(Debug, Args)]
pub struct EtcdBackupArgs {
    #[arg(value_name = "CLUSTER")]
    pub cluster_name: Option<String>,
    /// How long to wait for the backup, e.g. 30s, 2m, 1h30m; 0 only asks for it.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_wait)]
    pub wait: Duration,
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct EtcdListArgs {
    #[arg(value_name = "CLUSTER")]
    pub cluster_name: Option<String>,
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct EtcdRestoreArgs {
    /// The cluster, always named here: a restore discards data, so it never takes the cluster from
    /// BALLAST_CLUSTER_NAME alone (a different --name is an error).
    #[arg(value_name = "CLUSTER")]
    pub cluster_name: String,
    /// The backup's id, as `ballast etcd list-backups` shows it.
    #[arg(value_name = "ID")]
    pub backup_id: String,
    /// Record the restore (the supervisors carry it out).
    #[arg(long)]
    pub yes: bool,
    /// Restore even if a member reported etcd healthy in the last 30 s (by the state store's clock), and have
    /// the members of a healthy cluster discard its data for the backup (they refuse an unforced restore).
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(subcommand)]
    pub what: ValidateWhat,
}

#[derive(Debug, Subcommand)]
pub enum ValidateWhat {
    /// Check every instance group's Auto Scaling Group has its minSize in service, every such instance's
    /// nodeup report says Configured with its group's current node spec, and etcd is healthy with every
    /// member voting; once a control-plane report shows a running kubelet, also that the Kubernetes API
    /// answers, every instance is a Ready Node and kube-system's pods run (otherwise `kubernetes API` says
    /// why it was not checked). Exit 0 when all pass, 6 when one fails (a check that cannot be made, AWS
    /// unreachable say, fails with the reason).
    Cluster(ValidateClusterArgs),
}

#[derive(Debug, Args)]
pub struct ValidateClusterArgs {
    #[arg(value_name = "NAME")]
    pub cluster_name: Option<String>,
    /// Check again every 2 s until every check passes or this long has passed, e.g. 5m.
    #[arg(long, value_name = "DURATION", value_parser = parse_wait)]
    pub wait: Option<Duration>,
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct RollingUpdateArgs {
    #[command(subcommand)]
    pub what: RollingUpdateWhat,
}

#[derive(Debug, Subcommand)]
pub enum RollingUpdateWhat {
    /// List the instances that need replacing and why, and the order of the roll; with --yes, replace them:
    /// control-plane groups first, one instance at a time, each only while etcd has every member voting, then
    /// node groups with surge (the group's spec.rollingUpdate), draining each node through the Kubernetes API.
    /// Interrupted and run again, it finishes what it began: no instance is replaced twice, and a surged group
    /// gets its sizes back (they are recorded on the Auto Scaling Group as the ballast.dev/rolling-update tag).
    Cluster(Box<RollingUpdateClusterArgs>),
}

#[derive(Debug, Args)]
pub struct RollingUpdateClusterArgs {
    #[arg(value_name = "NAME")]
    pub cluster_name: Option<String>,
    /// Replace the instances; without it nothing changes.
    #[arg(long)]
    pub yes: bool,
    /// Roll only this group (repeatable), e.g. one node group first as a canary.
    #[arg(long = "instance-group", value_name = "NAME")]
    pub instance_groups: Vec<String>,
    /// Roll only groups of these roles (repeatable or comma-separated).
    #[arg(
        long = "instance-group-roles",
        value_enum,
        value_delimiter = ',',
        value_name = "ROLE"
    )]
    pub roles: Vec<RoleArg>,
    /// Replace every instance, whether its configuration changed or not.
    #[arg(long)]
    pub force: bool,
    /// Do not drain nodes or check them through the Kubernetes API (AWS, the nodeup reports and etcd only).
    #[arg(long)]
    pub cloudonly: bool,
    /// How long to wait for a replacement to be configured (and etcd whole again) before failing, e.g. 15m.
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = parse_roll_duration)]
    pub validation_timeout: Duration,
    /// How long a node's drain may take (evictions a PodDisruptionBudget refuses are retried until then).
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = parse_roll_duration)]
    pub drain_timeout: Duration,
    /// Stop the roll when a wait runs out (false: warn and go on; never for etcd's quorum).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub fail_on_validate_error: bool,
    /// Surge node groups (launch new instances before draining old ones); false: replace in place,
    /// maxUnavailable at a time (at least one).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub surge: bool,
}

/// An instance group role on the command line, spelled as in the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    #[value(name = "ControlPlane", alias = "control-plane")]
    ControlPlane,
    #[value(name = "Node", alias = "node")]
    Node,
    #[value(name = "Bastion", alias = "bastion")]
    Bastion,
    #[value(name = "ApiServer", alias = "api-server")]
    ApiServer,
}

/// A roll's timeout: at least 1s, at most a day (a roll that waits longer is stuck, not slow).
pub fn parse_roll_duration(text: &str) -> Result<Duration, ArgError> {
    let duration = ballast_state::duration::parse_duration(text.trim())?;
    if duration < Duration::from_secs(1) || duration > Duration::from_secs(24 * 3600) {
        return Err(ArgError::OutOfRange {
            text: text.to_string(),
            range: "1s to 24h",
        });
    }
    Ok(duration)
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(subcommand)]
    pub what: ExportWhat,
}

#[derive(Debug, Subcommand)]
pub enum ExportWhat {
    /// Merge a context for the cluster into your kubeconfig and make it current, as kubectl would: --kubeconfig
    /// FILE, else the KUBECONFIG list (the file that already has the cluster, else the first that exists, else
    /// the last), else ~/.kube/config. Other entries are kept; the file is written 0600. The server is the API
    /// load balancer's DNS name (--internal: a control-plane instance's private address).
    Kubeconfig(Box<ExportKubeconfigArgs>),
}

#[derive(Debug, Args)]
pub struct ExportKubeconfigArgs {
    #[arg(value_name = "NAME")]
    pub cluster_name: Option<String>,
    /// Issue a system:masters client certificate from the cluster's CA, valid this long (default 18h, at most
    /// 30d: it cannot be revoked). It is written only to your kubeconfig, never to the state store.
    #[arg(
        long,
        value_name = "DURATION",
        num_args = 0..=1,
        require_equals = true,
        value_parser = crate::kubeconfig::admin::parse_admin_validity,
        conflicts_with = "user"
    )]
    pub admin: Option<Option<Duration>>,
    /// Name an existing user of your kubeconfig (e.g. an exec plugin) in the context instead of --admin.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// The kubeconfig file to write.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Use a control-plane instance's private address (reachable inside the VPC) instead of the load balancer.
    #[arg(long)]
    pub internal: bool,
}

/// `--control-plane-count`: etcd keeps a quorum with 1, 3 or 5 members, one per control-plane group. Checked
/// by clap so a huge count is refused before anything is generated from it.
pub fn parse_control_plane_count(text: &str) -> Result<u32, ArgError> {
    let count: u32 = text
        .trim()
        .parse()
        .map_err(|_| ArgError::ControlPlaneCount)?;
    if CONTROL_PLANE_COUNTS.contains(&(count as usize)) {
        Ok(count)
    } else {
        Err(ArgError::ControlPlaneCount)
    }
}

/// A `--wait` duration: `30s`, `2m`, `1h30m` (Ballast's one duration grammar, at most 3650d), or `0` / `0s` (do
/// not wait). A unit needs its number (`0hms` is refused, not read as 0). clap names the flag in the error.
pub fn parse_wait(text: &str) -> Result<Duration, ArgError> {
    Ok(ballast_state::duration::parse_duration_or_zero(
        text.trim(),
    )?)
}

/// `--lock-wait`: 0s to 10m (a lock expires after 2 minutes, so a longer wait only outlives dead writers).
pub fn parse_lock_wait(text: &str) -> Result<Duration, ArgError> {
    let wait = parse_wait(text)?;
    if wait > ballast_store::registry::MAX_LOCK_WAIT {
        return Err(ArgError::OutOfRange {
            text: text.to_string(),
            range: "0s to 10m",
        });
    }
    Ok(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn numeric_flags_are_bounded() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(
                ["ballast", "create", "cluster", "demo.example.com"]
                    .iter()
                    .chain(args),
            )
        };
        for count in ["1", "3", "5"] {
            assert!(parse(&["--control-plane-count", count]).is_ok(), "{count}");
        }
        for count in ["0", "2", "4", "6", "4294967295", "-1", "three"] {
            let error = parse(&["--control-plane-count", count]).expect_err(count);
            assert!(
                error.to_string().contains("--control-plane-count"),
                "{error}"
            );
        }
        assert!(parse(&["--node-count", "0"]).is_ok());
        assert!(parse(&["--node-count", "1000"]).is_ok());
        for count in ["1001", "4294967295", "-1"] {
            let error = parse(&["--node-count", count]).expect_err(count);
            assert!(error.to_string().contains("--node-count"), "{error}");
        }
    }

    /// `--lock-wait 0hms` was read as 0: a unit without a number is refused, naming the flag.
    #[test]
    fn a_wait_with_a_unit_and_no_number_is_refused() {
        for text in ["0hms", "0smhd", "0h m"] {
            assert!(parse_wait(text).is_err(), "{text}");
            let cli = Cli::try_parse_from(["ballast", "--lock-wait", text, "get", "clusters"]);
            let error = cli.expect_err(text).to_string();
            assert!(error.contains("--lock-wait"), "{error}");
            assert!(error.contains("is not a duration"), "{error}");
        }
        assert_eq!(parse_lock_wait("0m0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn the_lock_wait_is_bounded() {
        assert_eq!(parse_lock_wait("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_lock_wait("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(
            parse_lock_wait("11m").map_err(|e| e.to_string()),
            Err("\"11m\" is out of range: use 0s to 10m".to_string())
        );
        let cli = Cli::try_parse_from(["ballast", "--lock-wait", "1h", "get", "clusters"]);
        let error = cli.expect_err("over the bound");
        assert!(error.to_string().contains("--lock-wait"), "{error}");
    }

    #[test]
    fn waits() {
        assert_eq!(parse_wait("0"), Ok(Duration::ZERO));
        assert_eq!(parse_wait("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_wait("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_wait("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_wait("2").is_err());
        assert!(parse_wait("soon").is_err());
        assert!(parse_wait("").is_err());
        assert_eq!(
            parse_wait("300000000000000d").map_err(|e| e.to_string()),
            Err(
                "\"300000000000000d\" is longer than the longest duration, 3650d (10 years)"
                    .to_string()
            )
        );
    }
}
