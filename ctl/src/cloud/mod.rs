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

/// The SDK's own retry, the only retry of throttling and transient failures (5xx, timeouts, connection
/// resets): standard mode (exponential backoff with jitter, a client-side token bucket that stops retrying when
/// most calls fail), 5 attempts per call, pauses of at most 20 s. Ballast retries on top of it only what the SDK
/// cannot know is temporary: "not ready yet" answers of eventually consistent APIs (`aws::call`).
pub fn sdk_retry() -> aws_config::retry::RetryConfig {
    aws_config::retry::RetryConfig::standard()
        .with_max_attempts(5)
        .with_max_backoff(std::time::Duration::from_secs(20))
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
        let shared: SdkConfig = aws_config::from_env()
            .region(aws_config::Region::new(region.to_string()))
            .retry_config(sdk_retry())
            .load()
            .await;
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
