//! `rotate encryption-key --stage rewrite`: every Secret written again unchanged, so the API server stores it
//! encrypted with the primary key. Through the API with the kubeconfig context named after the cluster (what
//! `export kubeconfig` writes); when that cannot be reached, nothing is recorded and the error says what to run
//! by hand.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;

use crate::error::CommandError;

/// What to run when the secrets cannot be rewritten through the API from here (here, not in `keys`, which
/// calls the rewrite: the rewrite using `keys` back closed an import circle).
pub const REWRITE_BY_HAND: &str =
    "kubectl get secrets --all-namespaces -o json | kubectl replace -f -";

/// Bounds every API call of the rewrite: an API server that does not answer is reported, not waited on.
const API_TIMEOUT: Duration = Duration::from_secs(30);

fn by_hand(cluster: &str, why: impl std::fmt::Display) -> CommandError {
    CommandError::NotReady(format!(
        "the secrets of cluster {cluster} could not be rewritten through its API ({why}); nothing was recorded. \
         Rewrite them by hand with `{REWRITE_BY_HAND}` (kubectl's context on cluster {cluster}), then run \
         `ballast rotate encryption-key --stage rewrite --rewritten-by-hand`"
    ))
}

/// Rewrites every Secret of `cluster`; returns how many.
pub async fn rewrite_secrets(cluster: &str) -> Result<usize, CommandError> {
    let kubeconfig = Kubeconfig::read().map_err(|e| by_hand(cluster, e))?;
    let options = KubeConfigOptions {
        context: Some(cluster.to_string()),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| by_hand(cluster, format!("no kubeconfig context {cluster}: {e}")))?;
    config.connect_timeout = Some(API_TIMEOUT);
    config.read_timeout = Some(API_TIMEOUT);
    let client = Client::try_from(config).map_err(|e| by_hand(cluster, e))?;
    let secrets = Api::<Secret>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| by_hand(cluster, e))?;
    let mut rewritten = 0;
    for secret in secrets.items {
        let (Some(namespace), Some(name)) = (
            secret.metadata.namespace.clone(),
            secret.metadata.name.clone(),
        ) else {
            continue;
        };
        // The listed resourceVersion rides along: a secret changed meanwhile is a conflict, and was written
        // (so encrypted with the primary key) by that change anyway.
        match Api::<Secret>::namespaced(client.clone(), &namespace)
            .replace(&name, &PostParams::default(), &secret)
            .await
        {
            Ok(_) => rewritten += 1,
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
                rewritten += 1
            }
            Err(e) => return Err(by_hand(cluster, format!("secret {namespace}/{name}: {e}"))),
        }
    }
    eprintln!("Rewrote {rewritten} secret(s) of cluster {cluster} with the primary key.");
    Ok(rewritten)
}
