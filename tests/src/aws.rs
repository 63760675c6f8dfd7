//! One AWS emulator per test binary, shared by its tests (each test uses its own bucket or resources).
//!
//! The emulator is started on first use through the project's launcher and lives as long as the test process:
//! it watches its stdin, which closes when the process exits, however it exits.

use std::sync::OnceLock;

use localcloud::emulator::{Emulator, EmulatorOptions};

static EMULATOR: OnceLock<Emulator> = OnceLock::new();

/// The region the tests' emulator state lives in.
pub const REGION: &str = "us-west-2";

/// Starts the shared emulator (once) and points this process's AWS environment at it.
///
/// Panics with what to do when the emulator cannot start (the venv is missing, say): tests that need it must
/// fail loudly, never skip.
pub fn shared_emulator() -> &'static Emulator {
    EMULATOR.get_or_init(|| {
        // Its request log would drown the test output: it goes to a file, named when something fails.
        let log =
            std::env::temp_dir().join(format!("ballast-test-emulator-{}.log", std::process::id()));
        let emulator = Emulator::start(&EmulatorOptions {
            exit_with_parent: true,
            log_file: Some(log.clone()),
            ..Default::default()
        })
        .unwrap_or_else(|e| {
            panic!(
                "cannot start the AWS emulator for this test: {e} (its log: {})",
                log.display()
            )
        });
        // Set once, before any SDK client exists in this process.
        std::env::set_var("AWS_ENDPOINT_URL", emulator.endpoint());
        std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
        std::env::set_var("AWS_REGION", REGION);
        std::env::remove_var("AWS_PROFILE");
        std::env::remove_var("AWS_SESSION_TOKEN");
        emulator
    })
}

/// `ballast` against the shared emulator (this process's AWS environment), with `state` as its state store and
/// `cluster` as the cluster it acts on; the test runner's own network CIDR and KMS key are not passed on. A bound
/// only a hang reaches: a run against a dead endpoint fails within seconds.
pub fn ballast_cli(state: &str, cluster: &str) -> assert_cmd::Command {
    shared_emulator();
    let mut cmd = assert_cmd::Command::new(&crate::binaries::binaries().ballast);
    cmd.env("BALLAST_STATE", state)
        .env("BALLAST_CLUSTER_NAME", cluster)
        .env_remove("BALLAST_NETWORK_CIDR")
        .env_remove("BALLAST_STATE_KMS_KEY")
        .timeout(std::time::Duration::from_secs(300));
    cmd
}

/// An S3 client against the shared emulator.
pub async fn s3_client() -> aws_sdk_s3::Client {
    shared_emulator();
    let shared = aws_config::load_from_env().await;
    let config = aws_sdk_s3::config::Builder::from(&shared)
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// Creates `bucket` in the tests' region, as `aws s3 mb` does (no public-access block, versioning or default
/// encryption): panics with the emulator's answer when it cannot.
pub async fn create_bucket(client: &aws_sdk_s3::Client, bucket: &str) {
    client
        .create_bucket()
        .bucket(bucket)
        .create_bucket_configuration(
            aws_sdk_s3::types::CreateBucketConfiguration::builder()
                .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::UsWest2)
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "creating bucket {bucket}: {}",
                aws_sdk_s3::error::DisplayErrorContext(e)
            )
        });
}

/// Creates a bucket with a unique name, secured as docs/security.md asks, and returns it.
pub async fn new_bucket(hint: &str) -> String {
    let client = s3_client().await;
    let bucket = format!("ballast-test-{hint}-{:08x}", rand_suffix());
    create_bucket(&client, &bucket).await;
    secure_bucket(&client, &bucket).await;
    bucket
}

/// What docs/security.md asks of a state bucket, as an operator would set it: every public-access block
/// setting on, versioning, default encryption (SSE-S3). `validate cluster` fails its `state bucket` check
/// without them.
pub async fn secure_bucket(client: &aws_sdk_s3::Client, bucket: &str) {
    use aws_sdk_s3::types::{
        BucketVersioningStatus, PublicAccessBlockConfiguration, ServerSideEncryption,
        ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration, ServerSideEncryptionRule,
        VersioningConfiguration,
    };
    let fail = |what: &str, e: String| -> ! { panic!("{what} of bucket {bucket}: {e}") };
    client
        .put_public_access_block()
        .bucket(bucket)
        .public_access_block_configuration(
            PublicAccessBlockConfiguration::builder()
                .block_public_acls(true)
                .ignore_public_acls(true)
                .block_public_policy(true)
                .restrict_public_buckets(true)
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| {
            fail(
                "PutPublicAccessBlock",
                aws_sdk_s3::error::DisplayErrorContext(e).to_string(),
            )
        });
    client
        .put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| {
            fail(
                "PutBucketVersioning",
                aws_sdk_s3::error::DisplayErrorContext(e).to_string(),
            )
        });
    let by_default = ServerSideEncryptionByDefault::builder()
        .sse_algorithm(ServerSideEncryption::Aes256)
        .build()
        .unwrap_or_else(|e| fail("the default encryption rule", e.to_string()));
    let configuration = ServerSideEncryptionConfiguration::builder()
        .rules(
            ServerSideEncryptionRule::builder()
                .apply_server_side_encryption_by_default(by_default)
                .build(),
        )
        .build()
        .unwrap_or_else(|e| fail("the default encryption configuration", e.to_string()));
    client
        .put_bucket_encryption()
        .bucket(bucket)
        .server_side_encryption_configuration(configuration)
        .send()
        .await
        .unwrap_or_else(|e| {
            fail(
                "PutBucketEncryption",
                aws_sdk_s3::error::DisplayErrorContext(e).to_string(),
            )
        });
}

fn rand_suffix() -> u32 {
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    nanos ^ (std::process::id() << 16) ^ COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// An SDK configuration for the shared emulator, for clients of any service.
pub async fn sdk_config() -> aws_config::SdkConfig {
    shared_emulator();
    aws_config::load_from_env().await
}

/// Counts of the cluster's owned resources by kind: duplicates show up here.
pub async fn owned_counts(cluster: &str) -> std::collections::BTreeMap<&'static str, usize> {
    let config = sdk_config().await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let owned = || {
        aws_sdk_ec2::types::Filter::builder()
            .name(format!("tag:kubernetes.io/cluster/{cluster}"))
            .values("owned")
            .build()
    };
    let mut counts = std::collections::BTreeMap::new();
    counts.insert(
        "vpc",
        ec2.describe_vpcs()
            .filters(owned())
            .send()
            .await
            .expect("vpcs")
            .vpcs()
            .len(),
    );
    counts.insert(
        "subnet",
        ec2.describe_subnets()
            .filters(owned())
            .send()
            .await
            .expect("subnets")
            .subnets()
            .len(),
    );
    counts.insert(
        "igw",
        ec2.describe_internet_gateways()
            .filters(owned())
            .send()
            .await
            .expect("igw")
            .internet_gateways()
            .len(),
    );
    counts.insert(
        "route-table",
        ec2.describe_route_tables()
            .filters(owned())
            .send()
            .await
            .expect("rt")
            .route_tables()
            .len(),
    );
    counts.insert(
        "security-group",
        ec2.describe_security_groups()
            .filters(owned())
            .send()
            .await
            .expect("sg")
            .security_groups()
            .len(),
    );
    counts.insert(
        "launch-template",
        ec2.describe_launch_templates()
            .filters(owned())
            .send()
            .await
            .expect("lt")
            .launch_templates()
            .len(),
    );
    let asg = aws_sdk_autoscaling::Client::new(&config);
    let groups = asg
        .describe_auto_scaling_groups()
        .send()
        .await
        .expect("asgs");
    counts.insert(
        "asg",
        groups
            .auto_scaling_groups()
            .iter()
            .filter(|g| {
                g.auto_scaling_group_name()
                    .is_some_and(|n| n.ends_with(&format!(".{cluster}")))
            })
            .count(),
    );
    counts
}

/// Registers the image `name` on the shared emulator (root device `/dev/xvda`, x86_64) unless it is there, as
/// `packer build` would: Ballast's default spec names such an image by its release.
pub async fn ensure_image(name: &str) {
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config().await);
    let found = ec2
        .describe_images()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("name")
                .values(name)
                .build(),
        )
        .send()
        .await
        .expect("DescribeImages");
    if found.images().is_empty() {
        ec2.register_image()
            .name(name)
            .root_device_name("/dev/xvda")
            .architecture(aws_sdk_ec2::types::ArchitectureValues::X8664)
            .send()
            .await
            .expect("RegisterImage");
    }
}
