//! The I/O of `validate cluster`'s Kubernetes checks: find the API load balancer, issue a one-hour
//! `system:masters` certificate in memory from the cluster's CA (never written anywhere), read the API through
//! `kube`, and judge with [`super::validate_kube`].

use std::collections::BTreeMap;
use std::time::Duration;

use ballast_state::keyset::KeysetName;
use ballast_state::report::NodeReport;
use ballast_state::spec::ClusterConfig;
use ballast_store::store::StateStore;
use base64::Engine;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use time::OffsetDateTime;

use super::validate_kube::{api_not_expected, expected_nodes, judge_nodes, judge_pods, observe};
use crate::cloud::kinds::load_balancer;
use crate::cloud::model::{cluster_model, StateLocation};
use crate::cloud::Cloud;
use crate::kubeconfig::admin::issue_admin;

const API_TIMEOUT: Duration = Duration::from_secs(10);
/// The API check's name in the output.
pub const API_CHECK: &str = "kubernetes API";

/// What the instance checks saw, for the Kubernetes checks.
#[derive(Default)]
pub struct KubeInputs {
    /// Instance id -> (group, private IP from its report).
    pub in_service: BTreeMap<String, (String, Option<String>)>,
    /// The control-plane instances' reports.
    pub control_plane: Vec<(String, NodeReport)>,
}

/// Each check as (name, ok, reason).
/// One Kubernetes check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeOutcome {
    Ok,
    Fail,
    /// No API server can be running yet (`api_not_expected` says why): neither a pass nor a failure.
    NotChecked,
}

impl From<bool> for KubeOutcome {
    fn from(ok: bool) -> Self {
        if ok {
            Self::Ok
        } else {
            Self::Fail
        }
    }
}

pub async fn kubernetes_checks(
    cloud: &Cloud,
    store: &StateStore,
    completed: &ClusterConfig,
    inputs: &KubeInputs,
) -> Vec<(String, KubeOutcome, String)> {
    let reports: Vec<(&str, &NodeReport)> = inputs
        .control_plane
        .iter()
        .map(|(id, r)| (id.as_str(), r))
        .collect();
    if let Some(reason) = api_not_expected(&reports) {
        return vec![(API_CHECK.to_string(), KubeOutcome::NotChecked, reason)];
    }
    let (client, server) = match client(cloud, store, completed).await {
        Ok(found) => found,
        Err(reason) => return vec![(API_CHECK.to_string(), KubeOutcome::Fail, reason)],
    };
    match observe(&client, API_TIMEOUT).await {
        Err(e) => vec![(
            API_CHECK.to_string(),
            KubeOutcome::Fail,
            format!("cannot read the API at {server}: {e}"),
        )],
        Ok(facts) => {
            let (nodes_ok, nodes) = judge_nodes(&facts, &expected_nodes(&inputs.in_service));
            let (pods_ok, pods) = judge_pods(&facts);
            vec![
                (
                    API_CHECK.to_string(),
                    KubeOutcome::Ok,
                    format!("answered at {server}"),
                ),
                ("kubernetes nodes".to_string(), nodes_ok.into(), nodes),
                ("kube-system pods".to_string(), pods_ok.into(), pods),
            ]
        }
    }
}

/// A client of the API through its load balancer, and the server's URL.
async fn client(
    cloud: &Cloud,
    store: &StateStore,
    completed: &ClusterConfig,
) -> Result<(Client, String), String> {
    let name = completed.name();
    let location = StateLocation::from_url(&store.url()).ok_or_else(|| {
        format!(
            "the API load balancer is found from an S3 state store's model, not {}",
            store.url()
        )
    })?;
    let model = cluster_model(completed, &location);
    let actual = load_balancer::find(cloud, &model)
        .await
        .map_err(|e| format!("finding the API load balancer: {e}"))?;
    let (server, tls_server_name) = match actual.load_balancer {
        Some(lb) if !lb.dns_name.is_empty() => {
            crate::kubeconfig::hosts::server_for(&lb.dns_name, 443)?
        }
        _ => {
            return Err(format!(
            "the API load balancer {} does not exist: run `ballast update cluster {name} --yes`",
            model.load_balancer.name
        ))
        }
    };
    // Issued by the Kubernetes CA's primary; the API server's certificate may be of any CA the nodes trust.
    let ca = ballast_store::keystore::ca_in_use(store, name, KeysetName::KubernetesCa)
        .await
        .map_err(|e| format!("reading the Kubernetes CA: {e}"))?;
    let credential = issue_admin(
        &ca.cert_pem,
        &ca.key_pem,
        "ballast-validate",
        Duration::from_secs(3600),
        OffsetDateTime::now_utc(),
    )
    .map_err(|e| e.to_string())?;
    let ca_cert = ca.bundle_pem;
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": b64(&ca_cert),
            "tls-server-name": tls_server_name}}],
        "users": [{"name": "ballast-validate", "user": {
            "client-certificate-data": b64(&credential.cert_pem),
            "client-key-data": b64(&credential.key_pem)}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "ballast-validate"}}],
        "current-context": name,
    });
    let kubeconfig: Kubeconfig =
        serde_json::from_value(kubeconfig).map_err(|e| format!("building a kubeconfig: {e}"))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| format!("building the API client: {e}"))?;
    config.connect_timeout = Some(API_TIMEOUT);
    config.read_timeout = Some(API_TIMEOUT);
    let client = Client::try_from(config).map_err(|e| format!("building the API client: {e}"))?;
    Ok((client, server))
}
