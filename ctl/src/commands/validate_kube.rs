//! `validate cluster`'s Kubernetes checks: through the API load balancer, every control-plane and node instance
//! in service has a Node that is Ready (matched by instance id in its providerID, or by private IP), no Node is
//! left without an instance, and every kube-system pod is running with its containers ready.
//!
//! When is the API expected to answer? When some control-plane instance's nodeup report shows its kubelet
//! running (the kubelet runs the API server's static pod). Where none does (the local cloud, whose hosts have no
//! kubelet binary, or before any control-plane instance reported), no API server can be running: the `kubernetes
//! API` check says so, naming why, and does not fail (the instance checks already fail for a missing report).
//! Otherwise an API that cannot be reached fails validation, as kops does. The judgement is pure; [`observe`]
//! is the one read.

use std::collections::BTreeMap;
use std::time::Duration;

use ballast_state::report::{NodeReport, ServiceState};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, Client};

/// `Some(reason)` when no API server can be running: no control-plane instance's report shows a running
/// kubelet (started, restarted or left running), which runs the API server's static pod.
pub fn api_not_expected(control_plane_reports: &[(&str, &NodeReport)]) -> Option<String> {
    let running = control_plane_reports.iter().any(|(_, report)| {
        report.services.iter().any(|s| {
            s.name == "kubelet"
                && matches!(
                    s.state,
                    ServiceState::Started | ServiceState::Restarted | ServiceState::Unchanged
                )
        })
    });
    if running {
        return None;
    }
    let ids: Vec<&str> = control_plane_reports.iter().map(|(id, _)| *id).collect();
    Some(if ids.is_empty() {
        "no control-plane instance has reported yet, so no API server is known to run".to_string()
    } else {
        format!(
            "no control-plane instance reports a running kubelet ({}), so no API server can run \
             (the local cloud has no kubelet binary); once one does, the API must answer",
            ids.join(", ")
        )
    })
}

/// What the API shows, reduced to what is judged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeFacts {
    pub nodes: Vec<NodeSeen>,
    pub kube_system_pods: Vec<PodSeen>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSeen {
    pub name: String,
    pub ready: bool,
    /// `aws:///us-west-2a/i-0abc`: the cloud controller sets it.
    pub provider_id: Option<String>,
    pub internal_ips: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSeen {
    pub name: String,
    pub phase: String,
    pub ready: bool,
}

/// An instance in service that should be a Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedNode {
    pub instance_id: String,
    pub group: String,
    pub private_ip: Option<String>,
}

impl NodeSeen {
    fn is(&self, instance: &ExpectedNode) -> bool {
        let by_id = self
            .provider_id
            .as_deref()
            .is_some_and(|p| p.rsplit('/').next() == Some(instance.instance_id.as_str()));
        let by_ip = instance
            .private_ip
            .as_ref()
            .is_some_and(|ip| self.internal_ips.contains(ip));
        by_id || by_ip
    }
}

/// `(ok, reason)` for the nodes: each instance a Ready Node, each Node an instance.
pub fn judge_nodes(facts: &KubeFacts, expected: &[ExpectedNode]) -> (bool, String) {
    let mut problems = Vec::new();
    let mut ready = 0;
    for instance in expected {
        match facts.nodes.iter().find(|n| n.is(instance)) {
            None => problems.push(format!(
                "{} ({}) has no Node: its kubelet has not registered",
                instance.instance_id, instance.group
            )),
            Some(node) if !node.ready => problems.push(format!(
                "Node {} ({}) is not Ready",
                node.name, instance.instance_id
            )),
            Some(_) => ready += 1,
        }
    }
    for node in &facts.nodes {
        if !expected.iter().any(|i| node.is(i)) {
            problems.push(format!(
                "Node {} matches no instance in service (a terminated instance's Node, or not this cluster's)",
                node.name
            ));
        }
    }
    if problems.is_empty() {
        (
            true,
            format!(
                "{ready} of {} instances in service are Ready Nodes",
                expected.len()
            ),
        )
    } else {
        (false, problems.join("; "))
    }
}

/// `(ok, reason)` for kube-system's pods: each Running (or Succeeded) with its containers ready.
pub fn judge_pods(facts: &KubeFacts) -> (bool, String) {
    let failing: Vec<String> = facts
        .kube_system_pods
        .iter()
        .filter(|p| !(p.phase == "Succeeded" || (p.phase == "Running" && p.ready)))
        .map(|p| {
            format!(
                "{} ({}{})",
                p.name,
                p.phase,
                if p.ready { "" } else { ", not ready" }
            )
        })
        .collect();
    if facts.kube_system_pods.is_empty() {
        (
            false,
            "no pod in kube-system: the add-ons are not applied yet (see the control-plane nodes' add-ons)"
                .to_string(),
        )
    } else if failing.is_empty() {
        (
            true,
            format!("{} kube-system pods running", facts.kube_system_pods.len()),
        )
    } else {
        (false, format!("not running: {}", failing.join(", ")))
    }
}

/// Why the API could not be read: which list, and whether it timed out or failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeObserveError {
    /// The list did not answer within the timeout given to [`observe`].
    #[error("listing {what} timed out after {}s", .after.as_secs())]
    TimedOut { what: &'static str, after: Duration },
    /// The API answered with an error, or could not be reached.
    #[error("listing {what}: {source}")]
    List {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// Reads the Nodes and kube-system's pods, each list within `timeout`.
pub async fn observe(client: &Client, timeout: Duration) -> Result<KubeFacts, KubeObserveError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let params = ListParams::default();
    const NODES: &str = "Nodes";
    const PODS: &str = "kube-system pods";
    let nodes = tokio::time::timeout(timeout, nodes.list(&params))
        .await
        .map_err(|_| KubeObserveError::TimedOut {
            what: NODES,
            after: timeout,
        })?
        .map_err(|source| KubeObserveError::List {
            what: NODES,
            source,
        })?;
    let pods = tokio::time::timeout(timeout, pods.list(&params))
        .await
        .map_err(|_| KubeObserveError::TimedOut {
            what: PODS,
            after: timeout,
        })?
        .map_err(|source| KubeObserveError::List { what: PODS, source })?;
    Ok(KubeFacts {
        nodes: nodes.items.iter().map(node_seen).collect(),
        kube_system_pods: pods.items.iter().map(pod_seen).collect(),
    })
}

fn node_seen(node: &Node) -> NodeSeen {
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let internal_ips = status
        .and_then(|s| s.addresses.as_ref())
        .map(|a| {
            a.iter()
                .filter(|a| a.type_ == "InternalIP")
                .map(|a| a.address.clone())
                .collect()
        })
        .unwrap_or_default();
    NodeSeen {
        name: node.metadata.name.clone().unwrap_or_default(),
        ready,
        provider_id: node.spec.as_ref().and_then(|s| s.provider_id.clone()),
        internal_ips,
    }
}

fn pod_seen(pod: &Pod) -> PodSeen {
    let status = pod.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    PodSeen {
        name: pod.metadata.name.clone().unwrap_or_default(),
        phase: status
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".to_string()),
        ready,
    }
}

/// The instances of `reports` as expected Nodes.
pub fn expected_nodes(
    in_service: &BTreeMap<String, (String, Option<String>)>,
) -> Vec<ExpectedNode> {
    in_service
        .iter()
        .map(|(id, (group, ip))| ExpectedNode {
            instance_id: id.clone(),
            group: group.clone(),
            private_ip: ip.clone(),
        })
        .collect()
}

#[cfg(test)]
#[path = "validate_kube_tests.rs"]
mod tests;
