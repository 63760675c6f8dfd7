//! `update cluster`: from the completed spec to the cluster's AWS resources.
//!
//! The engine in the spirit of kops's tasks and Terraform's plans. [`model`] builds (purely) what the cluster
//! wants; each kind of resource in [`kinds`] finds its actual state (by tags or by its deterministic name),
//! diffs it with the wanted state (pure: typed changes, or a refusal of a change AWS cannot make in place), and
//! applies those changes. [`engine`] runs the kinds in [`plan::Stage`] order (the levels of their dependency
//! graph), records every change in the [`plan::Plan`], and applies only with `--yes`, so what a plan shows is
//! what an apply does. [`teardown`] is `delete cluster`: every resource of the cluster found by its tags and
//! deleted in rounds, each kind's `delete` beside its `apply`. [`aws`] holds the AWS reads and helpers the
//! engine and the commands share; [`calls`] counts the calls.

pub mod api_servers;
pub mod audit;
pub mod autoscaler;
pub mod aws;
pub mod bastions;
pub mod calls;
pub mod ccm;
pub mod cni;
pub mod ebs_csi;
pub mod engine;
pub mod error;
pub mod group_aws;
pub mod identity;
pub mod kinds;
pub mod model;
pub mod plan;
pub mod rules;
pub mod security_group_check;
pub mod teardown;
pub mod termination_iam;
pub mod terraform;
pub mod to_terraform;

use aws_config::SdkConfig;

pub use calls::CallLog;

/// The SDK's own retry (`ballast_store::sdk::retry`, where every client's configuration is built): the only
/// retry of throttling and transient failures. Ballast retries on top of it only what the SDK cannot know is
/// temporary: "not ready yet" answers of eventually consistent APIs (`aws::call`).
pub use ballast_store::sdk::retry as sdk_retry;

/// The region the run's clients call, for an error that AWS did not answer to name its endpoint
/// (`aws::describe`): one region per run.
static REGION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The endpoint the run's AWS clients call, for errors to name: `AWS_ENDPOINT_URL` when set (the local cloud, a
/// VPC endpoint), else AWS's own in the run's region.
pub fn endpoint_named() -> String {
    match std::env::var("AWS_ENDPOINT_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => match REGION.get() {
            Some(region) => {
                format!("AWS's endpoints in {region} (https://SERVICE.{region}.amazonaws.com)")
            }
            None => "AWS's endpoints".to_string(),
        },
    }
}

/// The AWS clients of one run, all counting their calls into one [`CallLog`].
#[derive(Debug, Clone)]
pub struct Cloud {
    pub ec2: aws_sdk_ec2::Client,
    pub autoscaling: aws_sdk_autoscaling::Client,
    pub elb: aws_sdk_elasticloadbalancingv2::Client,
    /// Classic load balancers: Ballast makes none, the cloud controller manager does (`delete cluster` finds them).
    pub elb_classic: aws_sdk_elasticloadbalancing::Client,
    pub iam: aws_sdk_iam::Client,
    /// The termination queue (`kinds/termination.rs`).
    pub sqs: aws_sdk_sqs::Client,
    /// The EventBridge rules feeding it.
    pub events: aws_sdk_eventbridge::Client,
    pub calls: CallLog,
}

impl Cloud {
    /// Clients from the standard AWS configuration (environment, profile, IMDS), in `region`.
    pub async fn connect(region: &str, calls: CallLog) -> Self {
        let _ = REGION.set(region.to_string());
        let shared: SdkConfig = ballast_store::sdk::load(Some(region)).await;
        let interceptor = calls.interceptor();
        Cloud {
            ec2: aws_sdk_ec2::Client::from_conf(
                aws_sdk_ec2::config::Builder::from(&shared)
                    .interceptor(interceptor.clone())
                    .build(),
            ),
            autoscaling: aws_sdk_autoscaling::Client::from_conf(
                aws_sdk_autoscaling::config::Builder::from(&shared)
                    .interceptor(interceptor.clone())
                    .build(),
            ),
            elb: aws_sdk_elasticloadbalancingv2::Client::from_conf(
                aws_sdk_elasticloadbalancingv2::config::Builder::from(&shared)
                    .interceptor(interceptor.clone())
                    .build(),
            ),
            elb_classic: aws_sdk_elasticloadbalancing::Client::from_conf(
                aws_sdk_elasticloadbalancing::config::Builder::from(&shared)
                    .interceptor(interceptor.clone())
                    .build(),
            ),
            iam: aws_sdk_iam::Client::from_conf(
                aws_sdk_iam::config::Builder::from(&shared)
                    .interceptor(interceptor.clone())
                    .build(),
            ),
            sqs: aws_sdk_sqs::Client::from_conf(
                aws_sdk_sqs::config::Builder::from(&shared)
                    .interceptor(interceptor.clone())
                    .build(),
            ),
            events: aws_sdk_eventbridge::Client::from_conf(
                aws_sdk_eventbridge::config::Builder::from(&shared)
                    .interceptor(interceptor)
                    .build(),
            ),
            calls,
        }
    }
}
