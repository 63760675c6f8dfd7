//! Runs an update: stage by stage, find the actual state, compare it with the model, and plan or apply.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use ballast_state::spec::{ClusterConfig, Role};
use ballast_state::store::{StateStore, StoreError};

use super::model::ClusterModel;
use super::plan::Plan;
use super::Cloud;

/// Failures of `update cluster`, each naming the resource and saying what to do.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// An AWS call failed.
    #[error("{resource}: {operation} failed: {message}{hint}")]
    Aws {
        resource: String,
        operation: &'static str,
        message: String,
        hint: String,
    },
    /// The spec asks to change something AWS cannot change in place.
    #[error(
        "{resource}: {field} cannot be changed in place ({from} -> {to}): revert the spec, or delete the resource \
         (and what depends on it) so it is created again"
    )]
    Immutable {
        resource: String,
        field: &'static str,
        from: String,
        to: String,
    },
    /// Something the spec names does not exist.
    #[error("{resource}: {message}")]
    Missing { resource: String, message: String },
    /// More than one resource claims to be the same one.
    #[error("{resource}: {count} resources are tagged as this one ({ids}): delete the extra ones")]
    Duplicate {
        resource: String,
        count: usize,
        ids: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Render(String),
}

/// Options of one run.
#[derive(Debug, Clone, Copy, Default)]
pub struct UpdateOptions {
    /// Make the changes (`--yes`); otherwise only plan.
    pub apply: bool,
    /// Delete owned resources the spec no longer wants (`--prune`).
    pub prune: bool,
}

/// Values that exist only once resources do: found, or made by this run.
#[derive(Debug, Clone, Default)]
pub struct Known {
    pub vpc_id: Option<String>,
    pub subnet_ids: BTreeMap<String, String>,
    pub security_group_ids: BTreeMap<Role, String>,
    pub profile_arns: BTreeMap<Role, String>,
    pub load_balancer_dns: Option<String>,
    pub target_group_arn: Option<String>,
    pub node_spec_hashes: BTreeMap<String, String>,
    pub launch_template_ids: BTreeMap<String, String>,
}

/// One run's context.
pub struct Run<'a> {
    pub cloud: &'a Cloud,
    pub store: &'a StateStore,
    pub model: &'a ClusterModel,
    pub completed: &'a ClusterConfig,
    pub options: UpdateOptions,
    pub known: Known,
    pub plan: Plan,
}

/// What an update did or would do.
#[derive(Debug, Clone)]
pub struct UpdateReport {
    pub plan: Plan,
    /// Per group: instances running with a node spec other than the group's current one.
    pub out_of_date: BTreeMap<String, Vec<String>>,
}

/// Plans (and with `options.apply`, applies) the cluster's resources.
pub async fn update(
    cloud: &Cloud,
    store: &StateStore,
    model: &ClusterModel,
    completed: &ClusterConfig,
    options: UpdateOptions,
    progress: &dyn Fn(&str),
) -> Result<UpdateReport, UpdateError> {
    let mut run = Run {
        cloud,
        store,
        model,
        completed,
        options,
        known: Known::default(),
        plan: Plan::default(),
    };
    let stages: [(&str, u8); 7] = [
        ("network", 0),
        ("security groups and IAM", 2),
        ("API load balancer", 3),
        ("node specs", 4),
        ("launch templates", 5),
        ("auto scaling groups", 6),
        ("leftovers", 7),
    ];
    for (name, stage) in stages {
        if options.apply {
            progress(&format!("reconciling {name}"));
        }
        match stage {
            0 => run.network().await?,
            2 => run.security_and_iam().await?,
            3 => run.load_balancer().await?,
            4 => run.node_specs().await?,
            5 => run.launch_templates().await?,
            6 => run.auto_scaling_groups().await?,
            _ => run.leftovers().await?,
        }
    }
    let out_of_date = run.out_of_date_instances().await?;
    Ok(UpdateReport {
        plan: run.plan,
        out_of_date,
    })
}

/// A message an operator can act on from any SDK error.
pub fn describe<E, R>(err: &SdkError<E, R>) -> (String, String)
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
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
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => {
            let context = aws_smithy_types::error::display::DisplayErrorContext(err).to_string();
            let hint = if context.to_lowercase().contains("credentials") {
                ": no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
            } else {
                ": cannot reach the AWS endpoint: check the network, AWS_REGION and AWS_ENDPOINT_URL"
            };
            (context, hint.to_string())
        }
        other => (
            aws_smithy_types::error::display::DisplayErrorContext(other).to_string(),
            String::new(),
        ),
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

/// Codes meaning "not ready yet": IAM and EC2 are eventually consistent, deletes wait on dependents.
const RETRYABLE: [&str; 10] = [
    "DependencyViolation",
    "ResourceInUse",
    "ResourceInUseFault",
    "ScalingActivityInProgress",
    "ResourceContention",
    "IncorrectInstanceState",
    "InvalidGroup.NotFound",
    "InvalidInstanceProfile",
    "Throttling",
    "RequestLimitExceeded",
];

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
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let mut delay = Duration::from_millis(200);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                let retryable = is_not_ready(&e);
                if retryable && attempt < 8 {
                    tracing::info!(resource, operation, attempt, "not ready yet, retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                    continue;
                }
                let (message, hint) = describe(&e);
                return Err(UpdateError::Aws {
                    resource: resource.to_string(),
                    operation,
                    message,
                    hint,
                });
            }
        }
    }
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

/// Like [`call`], but a "not found" code is `Ok(None)`.
pub async fn find<T, E, R, F, Fut>(
    resource: &str,
    operation: &'static str,
    not_found: &[&str],
    f: F,
) -> Result<Option<T>, UpdateError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match f().await {
        Ok(v) => Ok(Some(v)),
        Err(e) if code_of(&e).is_some_and(|c| not_found.contains(&c.as_str())) => Ok(None),
        Err(e) => {
            let (message, hint) = describe(&e);
            Err(UpdateError::Aws {
                resource: resource.to_string(),
                operation,
                message,
                hint,
            })
        }
    }
}
