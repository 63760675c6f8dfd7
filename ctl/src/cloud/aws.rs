//! The AWS reads and helpers every part of the CLI shares: names and tags of Ballast's resources, tag maps and
//! filters, calls with retries and operator-readable errors, and the reads more than one command makes (the
//! cluster's instances, its Auto Scaling Groups, its launch templates). Commands call AWS only through here or
//! through the engine.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use aws_sdk_autoscaling::types::AutoScalingGroup;
use aws_sdk_ec2::types::{self as ec2, Filter};
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

use super::error::UpdateError;
use super::Cloud;

/// Tag naming the cluster a resource belongs to.
pub const CLUSTER_TAG: &str = "ballast.dev/cluster";
/// Tag binding a resource to one cluster's identity: the id in its state store (`ballast_store::cluster_id`).
/// A resource with the cluster's name tags but another id belongs to a cluster of the same name in another state
/// store, and is never changed or deleted (`super::identity`).
pub const CLUSTER_ID_TAG: &str = "ballast.dev/cluster-id";
pub const ROLE_TAG: &str = "ballast.dev/role";
pub const GROUP_TAG: &str = "ballast.dev/instance-group";
/// On instances (through the launch template's TagSpecifications): the hash of the node spec they booted with,
/// so drift is visible per instance (the emulator misreports launch template versions; this tag does not lie).
pub const NODE_SPEC_HASH_TAG: &str = "ballast.dev/node-spec-hash";

/// `kubernetes.io/cluster/NAME`: `owned` on what the cluster owns, `shared` on what it only uses.
pub fn ownership_tag(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}

/// `<group>.<cluster>`: the name of a group's launch template and Auto Scaling Group.
pub fn group_resource_name(group: &str, cluster: &str) -> String {
    format!("{group}.{cluster}")
}

/// Tags in the EC2 form.
pub fn ec2_tags(tags: &BTreeMap<String, String>) -> Vec<ec2::Tag> {
    tags.iter()
        .map(|(k, v)| ec2::Tag::builder().key(k).value(v).build())
        .collect()
}

/// EC2 tags as a map (a tag without a value maps to "").
pub fn tag_map(tags: &[ec2::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
        .collect()
}

/// Tags to set on a resource as it is created.
pub fn tag_spec(
    resource: ec2::ResourceType,
    tags: &BTreeMap<String, String>,
) -> ec2::TagSpecification {
    ec2::TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(ec2_tags(tags)))
        .build()
}

/// A filter matching any of `values`.
pub fn filter(name: &str, values: &[&str]) -> Filter {
    let mut filter = Filter::builder().name(name);
    for value in values {
        filter = filter.values(*value);
    }
    filter.build()
}

/// Resources tagged as owned by `cluster`.
pub fn owned_filter(cluster: &str) -> Filter {
    filter(&format!("tag:{}", ownership_tag(cluster)), &["owned"])
}

/// A message an operator can act on from any SDK error: the error, and a hint saying what to do (may be empty).
pub fn describe<E, R>(err: &SdkError<E, R>) -> (String, String)
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    match err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            let code = e.code().unwrap_or("UnknownError").to_string();
            let message = format!("{code}: {}", e.message().unwrap_or(""));
            let hint = match code.as_str() {
                "AuthFailure" | "InvalidClientTokenId" | "SignatureDoesNotMatch" | "UnrecognizedClientException" => {
                    ": check the AWS credentials in use (AWS_ACCESS_KEY_ID / AWS_PROFILE)"
                }
                "AccessDenied" | "UnauthorizedOperation" | "AccessDeniedException" => {
                    ": the credentials in use are not allowed this call; use an identity with the needed permissions"
                }
                "InvalidSubnet.Range" | "InvalidSubnet.Conflict" => {
                    ": check spec.subnets: each cidr must be inside spec.networkCIDR and must not overlap another"
                }
                _ => "",
            };
            (message, hint.to_string())
        }
        // Ballast's words only; the SDK's detail stays in the error's source (`ballast -v` prints it).
        other => (
            ballast_store::sdk::describe_failure(other, &super::endpoint_named()),
            String::new(),
        ),
    }
}

/// The failure of `operation` on `resource`, with the SDK error as its cause.
pub fn failure<E, R>(resource: &str, operation: &'static str, err: SdkError<E, R>) -> UpdateError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let (message, hint) = describe(&err);
    UpdateError::Aws {
        resource: resource.to_string(),
        operation,
        message,
        hint,
        source: Box::new(err),
    }
}

/// An AWS error code, if the error has one.
pub fn code_of<E, R>(err: &SdkError<E, R>) -> Option<String>
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::ServiceError(service) => service.err().code().map(str::to_string),
        _ => None,
    }
}

/// Codes meaning "not ready yet": IAM and EC2 are eventually consistent, deletes wait on dependents. Throttling
/// is not here: the SDK's standard retry (`cloud::sdk_retry`) handles it, and retrying it again here would
/// multiply the calls a throttled account makes.
const RETRYABLE: [&str; 8] = [
    "DependencyViolation",
    "ResourceInUse",
    "ResourceInUseFault",
    "ScalingActivityInProgress",
    "ResourceContention",
    "IncorrectInstanceState",
    "InvalidGroup.NotFound",
    "InvalidInstanceProfile",
];

/// "Not ready yet" answers: 200 ms doubling to 5 s (jittered), 8 tries, within 30 s.
const NOT_READY: ballast_common::retry::Policy = ballast_common::retry::Policy::new(
    Duration::from_millis(200),
    Duration::from_secs(5),
    Duration::from_secs(30),
)
.with_attempts(8);

/// Runs an AWS call, retrying "not ready yet" failures with backoff (about 30 s in all), and turns a final
/// failure into an [`UpdateError`] naming `resource`.
pub async fn call<T, E, R, F, Fut>(
    resource: &str,
    operation: &'static str,
    mut f: F,
) -> Result<T, UpdateError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let attempt = std::sync::atomic::AtomicU32::new(0);
    let tries = &attempt;
    NOT_READY
        .retry(
            move || {
                tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                f()
            },
            is_not_ready,
            |_, pause| {
                tracing::info!(
                    resource,
                    operation,
                    attempt = tries.load(std::sync::atomic::Ordering::Relaxed),
                    ?pause,
                    "not ready yet, retrying"
                );
            },
        )
        .await
        .map_err(|e| failure(resource, operation, e))
}

/// True for failures that mean "not ready yet" rather than "wrong": a new instance profile that EC2 does not
/// see yet is an invalid parameter only for a few seconds.
fn is_not_ready<E, R>(err: &SdkError<E, R>) -> bool
where
    E: ProvideErrorMetadata,
{
    let SdkError::ServiceError(service) = err else {
        return false;
    };
    let code = service.err().code().unwrap_or("");
    let message = service.err().message().unwrap_or("").to_lowercase();
    RETRYABLE.contains(&code)
        || (code.starts_with("InvalidParameter")
            && (message.contains("instance profile") || message.contains("iaminstanceprofile")))
}

/// Like [`call`] without retries, but a "not found" code is `Ok(None)`.
pub async fn find<T, E, R, F, Fut>(
    resource: &str,
    operation: &'static str,
    not_found: &[&str],
    f: F,
) -> Result<Option<T>, UpdateError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match f().await {
        Ok(v) => Ok(Some(v)),
        Err(e) if code_of(&e).is_some_and(|c| not_found.contains(&c.as_str())) => Ok(None),
        Err(e) => Err(failure(resource, operation, e)),
    }
}

/// The cluster's instances (by its cluster tag) in any of `states`, every page of them.
pub async fn cluster_instances(
    cloud: &Cloud,
    cluster: &str,
    states: &[&str],
) -> Result<Vec<ec2::Instance>, UpdateError> {
    describe_cluster_instances(cloud, cluster, filter("instance-state-name", states)).await
}

/// The cluster's instances (by its cluster tag) among `ids`, in any state EC2 still shows: one filtered
/// DescribeInstances per 100 ids (a filter, not InstanceIds, so that an id EC2 forgot is no error).
pub async fn cluster_instances_among(
    cloud: &Cloud,
    cluster: &str,
    ids: &[&str],
) -> Result<Vec<ec2::Instance>, UpdateError> {
    let mut found = Vec::new();
    for chunk in ids.chunks(100) {
        found.extend(
            describe_cluster_instances(cloud, cluster, filter("instance-id", chunk)).await?,
        );
    }
    Ok(found)
}

/// The cluster's instances (by its cluster tag) that `also` matches, every page of them.
async fn describe_cluster_instances(
    cloud: &Cloud,
    cluster: &str,
    also: Filter,
) -> Result<Vec<ec2::Instance>, UpdateError> {
    let mut found = Vec::new();
    let mut pages = cloud
        .ec2
        .describe_instances()
        .filters(filter(&format!("tag:{CLUSTER_TAG}"), &[cluster]))
        .filters(also)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page =
            page.map_err(|e| failure(&format!("instances of {cluster}"), "DescribeInstances", e))?;
        found.extend(
            page.reservations()
                .iter()
                .flat_map(|r| r.instances().iter().cloned()),
        );
    }
    Ok(found)
}

/// The Auto Scaling Groups of these names that exist, every page of them.
pub async fn auto_scaling_groups(
    cloud: &Cloud,
    cluster: &str,
    names: &[String],
) -> Result<Vec<AutoScalingGroup>, UpdateError> {
    let mut found = Vec::new();
    let mut pages = cloud
        .autoscaling
        .describe_auto_scaling_groups()
        .set_auto_scaling_group_names(Some(names.to_vec()))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| {
            failure(
                &format!("auto scaling groups of {cluster}"),
                "DescribeAutoScalingGroups",
                e,
            )
        })?;
        found.extend(page.auto_scaling_groups().iter().cloned());
    }
    Ok(found)
}

/// The cluster's launch templates (tagged as owned), every page of them.
pub async fn owned_launch_templates(
    cloud: &Cloud,
    cluster: &str,
) -> Result<Vec<ec2::LaunchTemplate>, UpdateError> {
    let mut templates = Vec::new();
    // The largest page AWS allows; the emulator also never returns a NextToken past it.
    let mut pages = cloud
        .ec2
        .describe_launch_templates()
        .filters(owned_filter(cluster))
        .max_results(200)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| {
            failure(
                &format!("launch templates of {cluster}"),
                "DescribeLaunchTemplates",
                e,
            )
        })?;
        templates.extend(page.launch_templates().iter().cloned());
    }
    Ok(templates)
}
