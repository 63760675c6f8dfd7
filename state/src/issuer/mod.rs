//! What publishing the service-account issuer needs of the keysets and the node spec (IRSA, `docs/irsa.md`):
//! the discovery documents rendered from the trusted keys ([`discovery`]) and the node spec with the issuer
//! and the add-ons' roles ([`with_irsa`]). Apart from `crate::irsa` so that validation, which uses that, does
//! not reach the keysets and node specs through it.

use crate::digest::sha256_hex;
use crate::irsa::{AddonRoles, IssuerSettings, PodIdentityWebhookSettings};
use crate::node::{NodeSpecError, RenderedNodeSpec};

pub mod discovery;

/// `rendered` with IRSA's settings on a control-plane node (a worker's spec is returned as it is): the issuer,
/// the add-ons' roles and the Pod Identity Webhook's settings, rendered again with its new hash. An API-server
/// node gets the issuer alone (it runs no add-on).
pub fn with_irsa(
    mut rendered: RenderedNodeSpec,
    issuer: Option<&IssuerSettings>,
    roles: Option<&AddonRoles>,
    webhook: Option<&PodIdentityWebhookSettings>,
) -> Result<RenderedNodeSpec, NodeSpecError> {
    // An API-server node's API server signs and accepts tokens as the control plane's does: the same issuer.
    if let Some(api_server) = rendered.spec.api_server.as_mut() {
        if issuer.is_none() {
            return Ok(rendered);
        }
        api_server.service_account_issuer = issuer.cloned();
        return reserialized(rendered);
    }
    let Some(control_plane) = rendered.spec.control_plane.as_mut() else {
        return Ok(rendered);
    };
    if issuer.is_none() && roles.is_none() && webhook.is_none() {
        return Ok(rendered);
    }
    control_plane.service_account_issuer = issuer.cloned();
    control_plane.addon_roles = roles.filter(|r| **r != AddonRoles::default()).cloned();
    control_plane.pod_identity_webhook = webhook.cloned();
    reserialized(rendered)
}

/// `rendered` with its YAML and hash made from its (changed) spec again.
fn reserialized(mut rendered: RenderedNodeSpec) -> Result<RenderedNodeSpec, NodeSpecError> {
    let yaml = yaml_serde::to_string(&rendered.spec).map_err(|source| NodeSpecError::Render {
        group: rendered.spec.instance_group.clone(),
        source,
    })?;
    rendered.sha256 = sha256_hex(yaml.as_bytes());
    rendered.yaml = yaml;
    Ok(rendered)
}
