//! The cluster's certificate authorities and secrets, generated once by `ballast create cluster`.
//!
//! Keys are ECDSA P-256: small, fast to generate, accepted by etcd, the API server and service-account token
//! signing. CA private keys go to `pki/<ca>/key.pem`, which only the control-plane role may read; workers get
//! certificates from the control plane's bootstrap service (docs/node-identity.md), never a CA key.

use base64::Engine;
use rand::RngCore;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use serde::{Deserialize, Serialize};
use time::{Duration, OffsetDateTime};

use crate::layout::{pki_names, ClusterPaths, ENCRYPTION_KEYS_SECRET};

/// CAs live ten years; leaf certificates are issued on the nodes and renewed there.
const CA_VALIDITY: Duration = Duration::days(3650);

/// Failures generating key material.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("generating the {what}: {source}")]
    Generate {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
}

/// A certificate and its private key, PEM encoded.
#[derive(Clone, PartialEq, Eq)]
pub struct CertificateAuthority {
    pub cert_pem: String,
    pub key_pem: String,
}

// Never print a private key, even in debug output.
impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// The keys that encrypt Kubernetes secrets at rest; the first one encrypts, all of them decrypt (rotation).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EncryptionKeys {
    pub keys: Vec<EncryptionKey>,
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EncryptionKey {
    pub name: String,
    /// 32 random bytes, base64.
    pub secret: String,
}

impl std::fmt::Debug for EncryptionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.keys.iter().map(|k| k.name.as_str()).collect();
        f.debug_struct("EncryptionKeys")
            .field("names", &names)
            .finish()
    }
}

/// The secret (under `secrets/`) where clusters made before node identity (issue 16) kept a shared kubelet
/// bootstrap token. Nothing writes or reads it any more: workers prove which instance they are to the control
/// plane's bootstrap service (docs/node-identity.md); an old cluster's object can be deleted. Node specs no longer
/// name it (an old spec's `pki.bootstrapToken` is read and ignored).
pub const BOOTSTRAP_TOKEN_SECRET: &str = "bootstrap-token";

/// Everything secret a new cluster needs.
#[derive(Clone)]
pub struct ClusterSecrets {
    pub kubernetes_ca: CertificateAuthority,
    pub etcd_ca: CertificateAuthority,
    /// Private key (PEM) signing service-account tokens, and its public key (PEM).
    pub service_account_key_pem: String,
    pub service_account_public_pem: String,
    pub encryption_keys: EncryptionKeys,
}

impl std::fmt::Debug for ClusterSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSecrets")
            .field("kubernetes_ca", &self.kubernetes_ca)
            .field("etcd_ca", &self.etcd_ca)
            .field("service_account_key_pem", &"<redacted>")
            .field(
                "service_account_public_pem",
                &self.service_account_public_pem,
            )
            .field("encryption_keys", &self.encryption_keys)
            .finish()
    }
}

/// One object to write to the store.
#[derive(Debug, Clone)]
pub struct SecretObject {
    pub key: String,
    pub data: Vec<u8>,
}

impl ClusterSecrets {
    /// Generates fresh CAs and keys for cluster `cluster_name`.
    pub fn generate(cluster_name: &str) -> Result<Self, PkiError> {
        let sa = KeyPair::generate().map_err(|source| PkiError::Generate {
            what: "service-account signing key",
            source,
        })?;
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        let now = OffsetDateTime::now_utc();
        Ok(ClusterSecrets {
            kubernetes_ca: generate_ca(&format!("kubernetes-ca.{cluster_name}"), "Kubernetes CA")?,
            etcd_ca: generate_ca(&format!("etcd-ca.{cluster_name}"), "etcd CA")?,
            service_account_key_pem: sa.serialize_pem(),
            service_account_public_pem: sa.public_key_pem(),
            encryption_keys: EncryptionKeys {
                keys: vec![EncryptionKey {
                    name: format!("key-{}", now.unix_timestamp()),
                    secret: base64::engine::general_purpose::STANDARD.encode(secret),
                }],
            },
        })
    }

    /// The objects to store, at their layout paths.
    pub fn objects(&self, paths: &ClusterPaths) -> Result<Vec<SecretObject>, yaml_serde::Error> {
        let object = |key: String, data: &str| SecretObject {
            key,
            data: data.as_bytes().to_vec(),
        };
        Ok(vec![
            object(
                paths.pki_cert(pki_names::KUBERNETES_CA),
                &self.kubernetes_ca.cert_pem,
            ),
            object(
                paths.pki_key(pki_names::KUBERNETES_CA),
                &self.kubernetes_ca.key_pem,
            ),
            object(paths.pki_cert(pki_names::ETCD_CA), &self.etcd_ca.cert_pem),
            object(paths.pki_key(pki_names::ETCD_CA), &self.etcd_ca.key_pem),
            object(
                paths.pki_key(pki_names::SERVICE_ACCOUNT),
                &self.service_account_key_pem,
            ),
            object(
                paths.pki_public_key(pki_names::SERVICE_ACCOUNT),
                &self.service_account_public_pem,
            ),
            object(
                paths.secret(ENCRYPTION_KEYS_SECRET),
                &yaml_serde::to_string(&self.encryption_keys)?,
            ),
        ])
    }
}

/// A self-signed CA certificate and key.
pub fn generate_ca(
    common_name: &str,
    what: &'static str,
) -> Result<CertificateAuthority, PkiError> {
    let err = |source| PkiError::Generate { what, source };
    let key = KeyPair::generate().map_err(err)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = OffsetDateTime::now_utc();
    // A little slack for clocks that run behind.
    params.not_before = now - Duration::hours(1);
    params.not_after = now + CA_VALIDITY;
    let cert = params.self_signed(&key).map_err(err)?;
    Ok(CertificateAuthority {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_fresh_and_parse() {
        let a = ClusterSecrets::generate("demo.example.com").expect("generate");
        let b = ClusterSecrets::generate("demo.example.com").expect("generate");
        assert_ne!(a.kubernetes_ca.key_pem, b.kubernetes_ca.key_pem);
        assert_ne!(a.kubernetes_ca.key_pem, a.etcd_ca.key_pem);
        assert!(a
            .kubernetes_ca
            .cert_pem
            .starts_with("-----BEGIN CERTIFICATE-----"));
        KeyPair::from_pem(&a.etcd_ca.key_pem).expect("etcd CA key parses");
        KeyPair::from_pem(&a.service_account_key_pem).expect("service account key parses");
        let secret = base64::engine::general_purpose::STANDARD
            .decode(&a.encryption_keys.keys[0].secret)
            .expect("base64");
        assert_eq!(secret.len(), 32);
        // A CA can issue: rcgen accepts it as an issuer.
        rcgen::Issuer::from_ca_cert_pem(
            &a.kubernetes_ca.cert_pem,
            KeyPair::from_pem(&a.kubernetes_ca.key_pem).expect("key"),
        )
        .expect("CA certificate is usable as an issuer");
    }

    #[test]
    fn debug_output_never_shows_private_keys() {
        let secrets = ClusterSecrets::generate("demo.example.com").expect("generate");
        let debug = format!("{secrets:?}");
        assert!(!debug.contains("PRIVATE KEY"), "{debug}");
        assert!(!debug.contains(&secrets.encryption_keys.keys[0].secret));
        // The service-account key is a bare String: make sure the struct's Debug does not print it.
        assert!(!debug.contains(&secrets.service_account_key_pem));
    }

    #[test]
    fn no_shared_bootstrap_token_is_made() {
        let secrets = ClusterSecrets::generate("demo.example.com").expect("generate");
        let objects = secrets
            .objects(&ClusterPaths::new("demo.example.com"))
            .expect("objects");
        assert!(
            objects
                .iter()
                .all(|o| !o.key.contains(BOOTSTRAP_TOKEN_SECRET)),
            "{:?}",
            objects.iter().map(|o| &o.key).collect::<Vec<_>>()
        );
    }
}
