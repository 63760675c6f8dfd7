//! The handler's I/O: long-polls the cluster's queue, reads each message (`event`), looks its instances up in
//! EC2, decides (`decide`), acts (drain through the Kubernetes API, or a stop request to a control-plane node's own
//! supervisor, with lifecycle heartbeats while it waits), completes the lifecycle action, and only then deletes
//! the message. Every wait is bounded; a failure is logged and never ends the loop.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_autoscaling::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::Filter;
use ballast_common::retry::Policy;
use ballast_drain::Kubernetes;
use ballast_state::spec::Role;
use ballast_state::termination::TerminationHandlingSettings;
use ballast_store::store::StateStore;

use super::decide::{instances_of, plan, GroupMembership, InstanceFacts, Plan};
use super::event::{parse, LifecycleAction};

/// SQS's longest long poll.
const WAIT_SECONDS: i32 = 20;
/// Messages taken per receive (SQS's most).
const BATCH: i32 = 10;
/// How long a received message stays invisible to the other control-plane nodes: the queue's retention (300 s),
/// so exactly one node handles a message. A message whose handling failed is not seen again; its hook's
/// heartbeat then lets the termination go on.
const VISIBILITY_SECONDS: i32 = 300;
/// The longest drain: within the message's visibility, with room for the completion.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(240);
/// How long the handler waits for a control-plane node's supervisor to report its member stopped (its own stop
/// is bounded at about 1.5 s; it notices the request within its poll, [`super::stop::POLL`]). A node that does
/// not answer (gone, or its nodeup down) is not waited for further: the action is completed all the same.
pub const STOP_WAIT: Duration = Duration::from_secs(60);
/// Each AWS or store call of the handler.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Receive failures: backed off from 1 s to 30 s, forever (the queue may not exist yet: update cluster makes it).
const RECEIVE_BACKOFF: Policy = Policy::new(
    Duration::from_secs(1),
    Duration::from_secs(30),
    Duration::MAX,
);
/// CompleteLifecycleAction: three tries within 10 s.
const COMPLETE_RETRY: Policy = Policy::new(
    Duration::from_millis(500),
    Duration::from_secs(4),
    Duration::from_secs(10),
)
.with_attempts(3);

/// A fresh Kubernetes client for each drain (the control plane's client certificates are short-lived).
pub type KubeClientFuture = Pin<Box<dyn Future<Output = Result<kube::Client, String>> + Send>>;
pub type KubeClients = Arc<dyn Fn() -> KubeClientFuture + Send + Sync>;

/// What the handler of one control-plane node works with.
pub struct Handler {
    pub cluster: String,
    pub settings: TerminationHandlingSettings,
    pub sqs: aws_sdk_sqs::Client,
    pub autoscaling: aws_sdk_autoscaling::Client,
    pub ec2: aws_sdk_ec2::Client,
    pub store: StateStore,
    pub kube: KubeClients,
}

impl Handler {
    /// Until `stopped` completes: find the queue, then receive and handle its messages.
    pub async fn run(self, stopped: impl Future<Output = ()>) {
        tokio::pin!(stopped);
        let mut pauses = RECEIVE_BACKOFF.pauses();
        let mut url: Option<String> = None;
        loop {
            let round = async {
                let queue = match &url {
                    Some(u) => u.clone(),
                    None => {
                        let u = self.queue_url().await?;
                        tracing::info!(queue = %u, "termination handler: reading the cluster's queue");
                        url = Some(u.clone());
                        u
                    }
                };
                self.receive_and_handle(&queue).await
            };
            let result = tokio::select! {
                biased;
                () = &mut stopped => return,
                r = round => r,
            };
            match result {
                Ok(()) => pauses = RECEIVE_BACKOFF.pauses(),
                Err(e) => {
                    let pause = pauses.next().unwrap_or(RECEIVE_BACKOFF.max_delay);
                    tracing::warn!(error = %e, ?pause, "termination handler: the queue cannot be read; retrying");
                    url = None;
                    tokio::select! {
                        () = &mut stopped => return,
                        () = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
    }

    async fn queue_url(&self) -> Result<String, String> {
        let call = self
            .sqs
            .get_queue_url()
            .queue_name(&self.settings.queue_name)
            .send();
        let out = tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| {
                format!(
                    "GetQueueUrl {}: no answer within {CALL_TIMEOUT:?}",
                    self.settings.queue_name
                )
            })?
            .map_err(|e| {
                format!(
                    "GetQueueUrl {}: {}",
                    self.settings.queue_name,
                    aws_sdk_sqs::error::DisplayErrorContext(e)
                )
            })?;
        out.queue_url.ok_or_else(|| {
            format!(
                "GetQueueUrl {}: no URL in the answer",
                self.settings.queue_name
            )
        })
    }

    /// One long poll and the messages it brought, each deleted once handled.
    async fn receive_and_handle(&self, url: &str) -> Result<(), String> {
        let call = self
            .sqs
            .receive_message()
            .queue_url(url)
            .wait_time_seconds(WAIT_SECONDS)
            .max_number_of_messages(BATCH)
            .visibility_timeout(VISIBILITY_SECONDS)
            .send();
        let out = tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| format!("ReceiveMessage: no answer within {CALL_TIMEOUT:?}"))?
            .map_err(|e| {
                format!(
                    "ReceiveMessage: {}",
                    aws_sdk_sqs::error::DisplayErrorContext(e)
                )
            })?;
        for message in out.messages.unwrap_or_default() {
            let body = message.body.as_deref().unwrap_or("");
            self.handle(body).await;
            let Some(receipt) = message.receipt_handle.as_deref() else {
                continue;
            };
            let delete = self
                .sqs
                .delete_message()
                .queue_url(url)
                .receipt_handle(receipt)
                .send();
            match tokio::time::timeout(CALL_TIMEOUT, delete).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "termination handler: DeleteMessage failed")
                }
                Err(_) => tracing::warn!("termination handler: DeleteMessage did not answer"),
            }
        }
        Ok(())
    }

    /// Reads, decides and acts on one message; whatever happens, the message is then done.
    pub async fn handle(&self, body: &str) {
        let notice = match parse(body) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "termination handler: message not understood; dropped");
                return;
            }
        };
        let ids = instances_of(&notice);
        let facts = match self.describe(&ids).await {
            Ok(f) => f,
            Err(e) => {
                // Without EC2's answer nothing can be told apart; the hook's heartbeat still lets it go.
                tracing::warn!(error = %e, ?notice, "termination handler: instances cannot be looked up");
                return;
            }
        };
        for step in plan(&notice, &self.settings.lifecycle_hook, &facts) {
            tracing::info!(?step, "termination handler");
            match step {
                Plan::Ignore { .. } => {}
                Plan::Complete { action } => self.complete(&action).await,
                Plan::Drain { node, action, .. } => {
                    let drained = self
                        .with_heartbeats(action.as_ref(), self.drain(&node))
                        .await;
                    match drained {
                        Ok(d) => tracing::info!(
                            node,
                            evicted = d.evicted,
                            refused = d.refused,
                            missing = d.node_missing,
                            "termination handler: drained"
                        ),
                        Err(e) => {
                            tracing::warn!(node, error = %e, "termination handler: drain failed; the instance goes all the same")
                        }
                    }
                    if let Some(action) = action {
                        self.complete(&action).await;
                    }
                }
                Plan::StopEtcd {
                    instance_id,
                    reason,
                    action,
                } => {
                    let stopped = self
                        .with_heartbeats(action.as_ref(), self.stop_etcd(&instance_id, &reason))
                        .await;
                    match &stopped {
                        Ok(outcome) => {
                            tracing::info!(instance = %instance_id, outcome, "termination handler: etcd member stopped")
                        }
                        Err(e) => {
                            tracing::warn!(instance = %instance_id, error = %e, "termination handler: no stop reported; the instance goes all the same")
                        }
                    }
                    if let Some(action) = action {
                        self.complete(&action).await;
                    }
                    if let Err(e) = ballast_store::etcd::stop::withdraw(
                        &self.store,
                        &self.cluster,
                        &instance_id,
                    )
                    .await
                    {
                        tracing::warn!(error = %e, "termination handler: the stop request stays");
                    }
                }
            }
        }
    }

    /// What EC2 lists of these instances (those it no longer lists are absent), with what Auto Scaling says of
    /// each.
    async fn describe(&self, ids: &[String]) -> Result<Vec<InstanceFacts>, String> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // A filter, not InstanceIds: an id EC2 no longer knows is then absent rather than an error for all.
        let call = self
            .ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("instance-id")
                    .set_values(Some(ids.to_vec()))
                    .build(),
            )
            .send();
        let out = tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| format!("DescribeInstances: no answer within {CALL_TIMEOUT:?}"))?
            .map_err(|e| {
                format!(
                    "DescribeInstances: {}",
                    aws_sdk_ec2::error::DisplayErrorContext(e)
                )
            })?;
        let tag = |i: &aws_sdk_ec2::types::Instance, key: &str| {
            i.tags()
                .iter()
                .find(|t| t.key() == Some(key))
                .and_then(|t| t.value().map(str::to_string))
        };
        let roles = [
            Role::ControlPlane,
            Role::Node,
            Role::Bastion,
            Role::ApiServer,
        ];
        let mut facts: Vec<InstanceFacts> = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(|i| {
                Some(InstanceFacts {
                    instance_id: i.instance_id()?.to_string(),
                    in_cluster: tag(i, ballast_etcd::peers::CLUSTER_TAG).as_deref()
                        == Some(self.cluster.as_str()),
                    role: tag(i, ballast_etcd::peers::ROLE_TAG)
                        .and_then(|v| roles.into_iter().find(|r| r.tag_value() == v)),
                    node_name: i
                        .private_dns_name()
                        .filter(|n| !n.is_empty())
                        .map(str::to_string),
                    state: i
                        .state()
                        .and_then(|s| s.name())
                        .map_or_else(|| "unknown".to_string(), |n| n.as_str().to_string()),
                    spot: i.instance_lifecycle()
                        == Some(&aws_sdk_ec2::types::InstanceLifecycleType::Spot),
                    auto_scaling: None,
                })
            })
            .collect();
        // Auto Scaling is asked only about instances EC2 lists (an id from a message may be anything), at most
        // 50 at a time (its limit).
        let listed: Vec<String> = facts.iter().map(|f| f.instance_id.clone()).collect();
        for ids in listed.chunks(50) {
            let call = self
                .autoscaling
                .describe_auto_scaling_instances()
                .set_instance_ids(Some(ids.to_vec()))
                .send();
            let out = tokio::time::timeout(CALL_TIMEOUT, call)
                .await
                .map_err(|_| {
                    format!("DescribeAutoScalingInstances: no answer within {CALL_TIMEOUT:?}")
                })?
                .map_err(|e| {
                    format!(
                        "DescribeAutoScalingInstances: {}",
                        aws_sdk_autoscaling::error::DisplayErrorContext(e)
                    )
                })?;
            for member in out.auto_scaling_instances() {
                if let Some(f) = facts
                    .iter_mut()
                    .find(|f| Some(f.instance_id.as_str()) == member.instance_id())
                {
                    f.auto_scaling = Some(GroupMembership {
                        group: member
                            .auto_scaling_group_name()
                            .unwrap_or_default()
                            .to_string(),
                        lifecycle_state: member.lifecycle_state().unwrap_or_default().to_string(),
                    });
                }
            }
        }
        Ok(facts)
    }

    async fn drain(&self, node: &str) -> Result<ballast_drain::Drained, String> {
        let client = (self.kube)().await?;
        Kubernetes::with_client(client, DRAIN_TIMEOUT)
            .drain(node)
            .await
            .map_err(|e| e.to_string())
    }

    /// Asks `instance_id`'s node to stop its member and waits (at most [`STOP_WAIT`]) for its supervisor's answer
    /// (the one asking code, shared with `rolling-update`: `ballast_store::etcd::stop`).
    async fn stop_etcd(&self, instance_id: &str, reason: &str) -> Result<String, String> {
        ballast_store::etcd::stop::request_stop(
            &self.store,
            &self.cluster,
            instance_id,
            reason,
            STOP_WAIT,
        )
        .await
        .map_err(|e| e.to_string())
    }

    /// Runs `work`, recording a heartbeat of `action` every third of the hook's heartbeat timeout meanwhile.
    async fn with_heartbeats<T>(
        &self,
        action: Option<&LifecycleAction>,
        work: impl Future<Output = T>,
    ) -> T {
        let Some(action) = action else {
            return work.await;
        };
        let every = Duration::from_secs(u64::from(self.settings.heartbeat_seconds / 3).max(5));
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                () = tokio::time::sleep(every) => {
                    let call = self.autoscaling.record_lifecycle_action_heartbeat()
                        .auto_scaling_group_name(&action.group)
                        .lifecycle_hook_name(&action.hook)
                        .lifecycle_action_token(&action.token)
                        .send();
                    match tokio::time::timeout(CALL_TIMEOUT, call).await {
                        Ok(Ok(_)) => tracing::debug!(instance = %action.instance_id, "lifecycle heartbeat"),
                        Ok(Err(e)) => tracing::warn!(instance = %action.instance_id, error = %aws_sdk_autoscaling::error::DisplayErrorContext(e), "RecordLifecycleActionHeartbeat failed"),
                        Err(_) => tracing::warn!(instance = %action.instance_id, "RecordLifecycleActionHeartbeat did not answer"),
                    }
                }
            }
        }
    }

    /// CONTINUE on the action; an action no longer waiting (completed by rolling-update, or timed out) is done.
    async fn complete(&self, action: &LifecycleAction) {
        let result = COMPLETE_RETRY
            .retry(
                || async {
                    let call = self
                        .autoscaling
                        .complete_lifecycle_action()
                        .auto_scaling_group_name(&action.group)
                        .lifecycle_hook_name(&action.hook)
                        .lifecycle_action_token(&action.token)
                        .lifecycle_action_result("CONTINUE")
                        .send();
                    match tokio::time::timeout(CALL_TIMEOUT, call).await {
                        Ok(Ok(_)) => Ok(true),
                        Ok(Err(e)) => {
                            let gone = e.as_service_error().is_some_and(|s| {
                                s.code() == Some("ValidationError")
                                    && s.message().is_some_and(|m| m.contains("No active Lifecycle Action"))
                            });
                            if gone {
                                Ok(false)
                            } else {
                                Err(aws_sdk_autoscaling::error::DisplayErrorContext(e).to_string())
                            }
                        }
                        Err(_) => Err(format!("no answer within {CALL_TIMEOUT:?}")),
                    }
                },
                |_| true,
                |e, pause| tracing::warn!(error = %e, ?pause, "CompleteLifecycleAction failed; retrying"),
            )
            .await;
        match result {
            Ok(true) => {
                tracing::info!(instance = %action.instance_id, group = %action.group, "termination handler: lifecycle action completed (CONTINUE)")
            }
            Ok(false) => {
                tracing::info!(instance = %action.instance_id, "termination handler: no lifecycle action waiting any more")
            }
            Err(e) => {
                tracing::warn!(instance = %action.instance_id, error = %e, "termination handler: lifecycle action not completed; its heartbeat will let it go")
            }
        }
    }
}
