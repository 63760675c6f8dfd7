//! An API-server node's files (role `ApiServer`, kops's `APIServer`): kube-apiserver's static pod with the
//! flags, audit policy, authentication and encryption configuration a control-plane node's has, dialing etcd
//! on the control plane by each member's stable name (`https://etcd-<member>.internal.<cluster>:2379`, the
//! names `ballast_etcd::hosts` keeps in the node's `/etc/hosts`), and the keys it reads. No etcd member, no
//! controller manager, scheduler or add-ons, no CA key on disk: the etcd client pair comes issued from the
//! state store, and the certificates the node issues itself ([`crate::cert_plan::api_server_node_plan`]) are
//! added after rendering.

use ballast_etcd::hosts::peer_name;
use ballast_state::node::{ApiServerSettings, NodeSpec};

use super::control_plane::{
    api_server_pod, encryption_configuration, ApiServerShape, AUDIT_POLICY, AUTHENTICATION_CONFIG,
};
use super::error::{to_yaml, RenderError};
use super::keys;
use crate::model::{paths, pki, ApiServerSecrets, NodeFacts, RenderedFile};

/// etcd's client port on the control plane.
pub const ETCD_CLIENT_PORT: u16 = 2379;

/// `--etcd-servers`: every member by its stable name, in the node spec's (sorted) order. None is an error: an
/// API server without etcd serves nothing.
pub fn etcd_servers(spec: &NodeSpec, settings: &ApiServerSettings) -> Result<String, RenderError> {
    if settings.etcd_members.is_empty() {
        return Err(RenderError::NoEtcdMembers);
    }
    Ok(settings
        .etcd_members
        .iter()
        .map(|m| {
            format!(
                "https://{}:{ETCD_CLIENT_PORT}",
                peer_name(&spec.cluster_name, m)
            )
        })
        .collect::<Vec<_>>()
        .join(","))
}

pub(super) fn files(
    spec: &NodeSpec,
    settings: &ApiServerSettings,
    node: &NodeFacts,
    secrets: &ApiServerSecrets,
) -> Result<Vec<RenderedFile>, RenderError> {
    let mut files = vec![
        RenderedFile::new(
            pki::SERVICE_ACCOUNT_KEY,
            0o600,
            secrets.service_account_key.clone(),
        ),
        RenderedFile::new(
            pki::SERVICE_ACCOUNT_PUB,
            0o644,
            keys::bundle(
                &secrets.service_account_public_key,
                &secrets.service_account_verify_keys,
            ),
        ),
        RenderedFile::new(
            pki::ETCD_CA_CERT,
            0o644,
            keys::bundle(&secrets.etcd_ca_cert, &secrets.etcd_ca_trusted),
        ),
        // The pair `update cluster` issued for API servers (pki/etcd-client-api-server/), where a control-plane
        // node's API server finds the one it issues itself.
        RenderedFile::new(
            &pki::cert(pki::API_SERVER_ETCD_CLIENT),
            0o644,
            secrets.etcd_client_cert.clone(),
        ),
        RenderedFile::new(
            &pki::key(pki::API_SERVER_ETCD_CLIENT),
            0o600,
            secrets.etcd_client_key.clone(),
        ),
        RenderedFile::new(paths::AUDIT_POLICY, 0o644, AUDIT_POLICY),
        RenderedFile::new(paths::AUTHENTICATION_CONFIG, 0o644, AUTHENTICATION_CONFIG),
    ];
    if let Some(provider) = settings.encryption_provider {
        let stored = secrets
            .encryption_keys
            .as_ref()
            .ok_or(RenderError::MissingSecret("the encryption keys"))?;
        let keys = keys::encryption_keys_in_use(stored, spec.pki.encryption_key_names.as_deref())?;
        files.push(RenderedFile::new(
            paths::ENCRYPTION_CONFIG,
            0o600,
            to_yaml(
                paths::ENCRYPTION_CONFIG,
                &encryption_configuration(provider, &keys),
            )?,
        ));
    }
    let shape = ApiServerShape {
        encryption_provider: settings.encryption_provider,
        audit_log_path: &settings.audit_log_path,
        audit_log_max_age_days: settings.audit_log_max_age_days,
        service_account_issuer: settings.service_account_issuer.as_ref(),
        etcd_servers: etcd_servers(spec, settings)?,
    };
    let path = format!("{}/kube-apiserver.yaml", paths::MANIFESTS_DIR);
    let yaml = to_yaml(&path, &api_server_pod(spec, &shape, node))?;
    files.push(RenderedFile::new(&path, 0o600, yaml));
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(members: &[&str]) -> ApiServerSettings {
        ApiServerSettings {
            encryption_provider: None,
            audit_log_path: "/var/log/kubernetes/audit.log".into(),
            audit_log_max_age_days: 30,
            etcd_members: members.iter().map(|m| m.to_string()).collect(),
            service_account_issuer: None,
        }
    }

    fn spec() -> NodeSpec {
        yaml_serde::from_str(include_str!("../../tests/data/api-server/spec.yaml"))
            .expect("the golden API-server spec")
    }

    #[test]
    fn etcd_is_dialed_by_each_members_stable_name() {
        let spec = spec();
        assert_eq!(
            etcd_servers(&spec, &settings(&["a", "b"])).expect("members"),
            format!(
                "https://etcd-a.internal.{0}:2379,https://etcd-b.internal.{0}:2379",
                spec.cluster_name
            )
        );
        let err = etcd_servers(&spec, &settings(&[])).expect_err("no member");
        assert!(matches!(err, RenderError::NoEtcdMembers), "{err}");
        assert!(err.to_string().contains("apiServer.etcdMembers"), "{err}");
    }
}
