//! `update cluster`: from the completed spec to the cluster's AWS resources.
//!
//! The engine in the spirit of kops's tasks: each resource kind finds its actual state (by tags or by its
//! deterministic name), compares it with the desired state (built purely in [`model`]), refuses changes to
//! immutable fields, and either reports the change (a plan) or makes it (an apply). The same code path serves
//! both, so what a plan shows is what an apply does. Resources are reconciled in stages (the levels of their
//! dependency graph: network, security groups and IAM, load balancer, node specs, launch templates, Auto Scaling
//! Groups), independent resources of a stage in parallel, and calls that fail because something is not ready
//! yet are retried.

pub mod calls;
pub mod engine;
pub mod model;
pub mod plan;
mod resources;

use aws_config::SdkConfig;

pub use calls::CallLog;

/// The AWS clients of one run, all counting their calls into one [`CallLog`].
#[derive(Debug, Clone)]
pub struct Cloud {
    pub ec2: aws_sdk_ec2::Client,
    pub autoscaling: aws_sdk_autoscaling::Client,
    pub elb: aws_sdk_elasticloadbalancingv2::Client,
    pub iam: aws_sdk_iam::Client,
    pub calls: CallLog,
}

impl Cloud {
    /// Clients from the standard AWS configuration (environment, profile, IMDS), in `region`.
    pub async fn connect(region: &str, calls: CallLog) -> Self {
        let shared: SdkConfig = aws_config::from_env()
            .region(aws_config::Region::new(region.to_string()))
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
            iam: aws_sdk_iam::Client::from_conf(
                aws_sdk_iam::config::Builder::from(&shared)
                    .interceptor(interceptor)
                    .build(),
            ),
            calls,
        }
    }
}
