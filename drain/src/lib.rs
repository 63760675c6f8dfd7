//! Draining a node through the Kubernetes API before its instance is terminated, as `kubectl drain` does:
//! cordon it (spec.unschedulable), then evict its pods through the Eviction API, which refuses an eviction a
//! PodDisruptionBudget forbids (HTTP 429): those are retried until the timeout. DaemonSet pods (their
//! controller would put them straight back) and mirror pods (the kubelet owns them) are left; pods that already
//! finished need no eviction. A roll's batch of nodes drains together ([`Kubernetes::drain_all`]). Also: whether
//! a node is Ready, the roll's Kubernetes validation.
//!
//! `rolling-update` takes its client from the operator's kubeconfig (`KUBECONFIG`, else `~/.kube/config`), as
//! kubectl's would; a control-plane node's termination handler (nodeup) gives one of its own.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};
use kube::Client;

/// How often evictions refused by a disruption budget are retried, and gone pods checked.
const RETRY: Duration = Duration::from_secs(2);

/// How many of a batch's drains run at once ([`Kubernetes::drain_all`]). A roll's batch is a quarter of a group
/// by default (25 of 100) but a whole group (up to 1000) with `maxSurge` and `maxUnavailable` at 100%: each drain
/// lists its node's pods every 2 s while it waits, so a batch of 1000 at once would be 500 requests a second to
/// the API server. The same bound as the batch's terminations (`roll::act::TERMINATE_CONCURRENCY`).
pub const DRAIN_CONCURRENCY: usize = 32;

/// Draining a node failed.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// No kubeconfig to reach the cluster's API with.
    #[error("cannot reach the Kubernetes API to drain nodes: {message}. Export the cluster's kubeconfig \
             (`ballast export kubeconfig --admin`), or pass --cloudonly to roll without draining or Kubernetes \
             validation")]
    NoKubeconfig { message: String },
    /// A Kubernetes API call failed.
    #[error("{operation} {what}: {source}")]
    Api {
        operation: &'static str,
        what: String,
        #[source]
        source: kube::Error,
    },
    /// Pods were still there at the timeout (a disruption budget kept refusing, or they did not stop).
    #[error("draining node {node}: after {waited:?}, pods still on it: {pods} (a PodDisruptionBudget refuses \
             their eviction, or they do not stop); raise --drain-timeout, or fix the budget")]
    Timeout {
        node: String,
        waited: Duration,
        pods: String,
    },
}

/// What a drain did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    /// The node did not exist in Kubernetes (nothing to drain).
    pub node_missing: bool,
    pub evicted: usize,
    /// Evictions refused by a disruption budget and retried.
    pub refused: usize,
}

/// Drains nodes and checks their readiness through one Kubernetes client.
#[derive(Clone)]
pub struct Kubernetes {
    client: Client,
    timeout: Duration,
}

impl Kubernetes {
    /// A client from the operator's kubeconfig; `timeout` bounds each drain. `redirect` may change where the
    /// client dials (the caller's hosts file: the server's name stays the one its certificate must carry).
    pub async fn from_kubeconfig(
        timeout: Duration,
        redirect: impl FnOnce(&mut kube::Config) -> Result<(), String>,
    ) -> Result<Self, DrainError> {
        let mut config = kube::Config::infer()
            .await
            .map_err(|e| DrainError::NoKubeconfig {
                message: e.to_string(),
            })?;
        redirect(&mut config).map_err(|message| DrainError::NoKubeconfig { message })?;
        config.default_retry = false;
        let client = Client::try_from(config).map_err(|e| DrainError::NoKubeconfig {
            message: e.to_string(),
        })?;
        Ok(Kubernetes { client, timeout })
    }

    /// A client of its own (tests: a local server). Its config must have `default_retry` off: kube's own
    /// retry of 429 (up to 15 times, backing off to minutes) would hide a disruption budget's refusal from the
    /// drain's timeout.
    pub fn with_client(client: Client, timeout: Duration) -> Self {
        Kubernetes { client, timeout }
    }

    /// Whether node `name` reports Ready=True; `Ok(false)` for a node Kubernetes does not have (yet).
    pub async fn node_ready(&self, name: &str) -> Result<bool, DrainError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = nodes
            .get_opt(name)
            .await
            .map_err(|source| DrainError::Api {
                operation: "reading",
                what: format!("node {name}"),
                source,
            })?;
        Ok(node
            .and_then(|n| n.status)
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"))
    }

    /// Cordons node `name`, then evicts its pods until none is left or the timeout passes.
    pub async fn drain(&self, name: &str) -> Result<Drained, DrainError> {
        let mut drained = Drained::default();
        let nodes: Api<Node> = Api::all(self.client.clone());
        let cordon = serde_json::json!({ "spec": { "unschedulable": true } });
        match nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&cordon))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {
                drained.node_missing = true;
                return Ok(drained);
            }
            Err(source) => {
                return Err(DrainError::Api {
                    operation: "cordoning",
                    what: format!("node {name}"),
                    source,
                })
            }
        }
        let started = tokio::time::Instant::now();
        let mut evicted: BTreeSet<(String, String)> = BTreeSet::new();
        loop {
            let pods = self.pods_to_evict(name).await?;
            if pods.is_empty() {
                return Ok(drained);
            }
            if started.elapsed() >= self.timeout {
                return Err(DrainError::Timeout {
                    node: name.to_string(),
                    waited: self.timeout,
                    pods: pods
                        .iter()
                        .map(|(ns, pod)| format!("{ns}/{pod}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            for (namespace, pod) in &pods {
                if evicted.contains(&(namespace.clone(), pod.clone())) {
                    // Evicted already, still terminating: wait for it to go.
                    continue;
                }
                let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
                match api.evict(pod, &EvictParams::default()).await {
                    Ok(_) => {
                        drained.evicted += 1;
                        evicted.insert((namespace.clone(), pod.clone()));
                    }
                    // Gone meanwhile.
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    // A disruption budget forbids it now: retried on the next round.
                    Err(kube::Error::Api(status)) if status.code == 429 => {
                        drained.refused += 1;
                        tracing::info!(node = name, namespace, pod, message = %status.message, "eviction refused by a disruption budget; retrying");
                    }
                    Err(source) => {
                        return Err(DrainError::Api {
                            operation: "evicting",
                            what: format!("pod {namespace}/{pod}"),
                            source,
                        })
                    }
                }
            }
            tokio::time::sleep(RETRY.min(self.timeout.saturating_sub(started.elapsed()))).await;
        }
    }

    /// Drains the nodes of one batch together, up to [`DRAIN_CONCURRENCY`] at a time, each as [`Self::drain`]
    /// does and with its own timeout: one after another, each waiting on its disruption budgets, a batch of 25
    /// took up to 25 timeouts. Returns every node's outcome in the order given, so a caller knows which drains
    /// succeeded when another failed: a failure does not cut the others short (stopped halfway, a node would be
    /// left cordoned with some of its pods evicted and the rest still on it).
    pub async fn drain_all(&self, names: &[String]) -> Vec<(String, Result<Drained, DrainError>)> {
        use futures_util::{stream, StreamExt};
        // Unordered, so one node held back by a budget does not keep the next from starting; put back in order
        // below.
        let mut outcomes: Vec<(usize, String, Result<Drained, DrainError>)> = stream::iter(
            names
                .iter()
                .enumerate()
                .map(|(n, name)| async move { (n, name.clone(), self.drain(name).await) }),
        )
        .buffer_unordered(DRAIN_CONCURRENCY)
        .collect()
        .await;
        outcomes.sort_by_key(|(n, _, _)| *n);
        outcomes
            .into_iter()
            .map(|(_, name, outcome)| (name, outcome))
            .collect()
    }

    /// The pods on node `name` a drain must evict: (namespace, name).
    async fn pods_to_evict(&self, name: &str) -> Result<Vec<(String, String)>, DrainError> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let list = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await
            .map_err(|source| DrainError::Api {
                operation: "listing",
                what: format!("the pods of node {name}"),
                source,
            })?;
        Ok(list
            .items
            .iter()
            .filter(|pod| must_evict(pod))
            .filter_map(|pod| Some((pod.metadata.namespace.clone()?, pod.metadata.name.clone()?)))
            .collect())
    }
}

/// Whether a drain evicts this pod: not a DaemonSet's (it would come straight back), not a mirror pod (the
/// kubelet owns it), not finished.
pub fn must_evict(pod: &Pod) -> bool {
    let daemon_set = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    !daemon_set && !mirror && !finished
}

#[cfg(test)]
mod tests;
