//! What a control-plane node is told of IRSA: the published issuer its API server signs tokens as, and the roles
//! of Ballast's own add-ons that call AWS. Added to a rendered node spec by [`with_irsa`] (the node spec's hash
//! changes with them, so a roll carries a switch of issuer); absent, the node spec is byte for byte what it was
//! before IRSA existed.

use serde::{Deserialize, Serialize};

use crate::digest::sha256_hex;
use crate::node::{NodeSpecError, RenderedNodeSpec, CLUSTER_DOMAIN};

/// The API server's issuer settings when discovery is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IssuerSettings {
    /// The published issuer: the first `--service-account-issuer`, the one new tokens carry.
    pub issuer: String,
    /// `--service-account-jwks-uri`: where the published JWKS is.
    pub jwks_uri: String,
    /// Issuers still accepted (later `--service-account-issuer` flags): the in-cluster one, so tokens issued
    /// before the switch keep working until they expire, as kops does.
    pub previous_issuers: Vec<String>,
    /// `--api-audiences`: the audiences the API server accepts, and gives tokens that ask for none.
    pub api_audiences: Vec<String>,
}

/// Roles of Ballast's own AWS-calling add-ons, by ARN, when they run on IRSA.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonRoles {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_controller_manager: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs_csi_controller: Option<String>,
}

/// The issuer every cluster's API server had before discovery: kube-apiserver's in-cluster name.
pub fn in_cluster_issuer() -> String {
    format!("https://kubernetes.default.svc.{CLUSTER_DOMAIN}")
}

impl IssuerSettings {
    /// The settings for a published `issuer`. The API audiences are the issuers themselves, new then old, which
    /// is what kube-apiserver takes when `--api-audiences` is unset: tokens made before the switch carry the
    /// old issuer as audience and keep authenticating. `amazonaws.com` is deliberately not an API audience: a
    /// token minted for STS must not be accepted by the Kubernetes API (TokenRequest mints it whatever the API
    /// audiences are, so IRSA needs none of them).
    pub fn published(issuer: &str) -> Self {
        let old = in_cluster_issuer();
        IssuerSettings {
            issuer: issuer.to_string(),
            jwks_uri: super::discovery::jwks_uri(issuer),
            previous_issuers: vec![old.clone()],
            api_audiences: vec![issuer.to_string(), old],
        }
    }
}

/// `rendered` with IRSA's settings on a control-plane node (a worker's spec is returned as it is), rendered
/// again with its new hash.
pub fn with_irsa(
    mut rendered: RenderedNodeSpec,
    issuer: Option<&IssuerSettings>,
    roles: Option<&AddonRoles>,
) -> Result<RenderedNodeSpec, NodeSpecError> {
    let Some(control_plane) = rendered.spec.control_plane.as_mut() else {
        return Ok(rendered);
    };
    if issuer.is_none() && roles.is_none() {
        return Ok(rendered);
    }
    control_plane.service_account_issuer = issuer.cloned();
    control_plane.addon_roles = roles.filter(|r| **r != AddonRoles::default()).cloned();
    let yaml = yaml_serde::to_string(&rendered.spec).map_err(|source| NodeSpecError::Render {
        group: rendered.spec.instance_group.clone(),
        source,
    })?;
    rendered.sha256 = sha256_hex(yaml.as_bytes());
    rendered.yaml = yaml;
    Ok(rendered)
}
