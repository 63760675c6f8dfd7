//! Key material made and described without the store: a key's id (its fingerprint), a CA certificate's dates,
//! a PEM bundle, and a fresh key for a keyset's next stage. Storing them is `ballast_store::keystore`'s.

use base64::Engine;
use rand::RngCore;
use time::OffsetDateTime;

use crate::digest::sha256_hex;
use crate::keyset::{KeyState, KeysetItem, KeysetName};
use crate::pki::{generate_ca, EncryptionKey, PkiError};
use crate::timestamp::{rfc3339, unix_rfc3339};

/// A key's id: the start of the sha256 of its public part, so the same key always has the same id.
pub fn fingerprint(public: &[u8]) -> String {
    sha256_hex(public)[..16].to_string()
}

/// Why a stored CA certificate's dates could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CertificateDatesError {
    #[error("not a PEM certificate: {source}")]
    NotPem {
        #[source]
        source: x509_parser::nom::Err<x509_parser::error::PEMError>,
    },
    #[error("not an X.509 certificate: {source}")]
    NotX509 {
        #[source]
        source: x509_parser::nom::Err<x509_parser::error::X509Error>,
    },
}

/// When a CA certificate starts and stops being valid, as RFC 3339.
pub fn certificate_dates(pem: &str) -> Result<(String, String), CertificateDatesError> {
    let (_, parsed) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|source| CertificateDatesError::NotPem { source })?;
    let cert = parsed
        .parse_x509()
        .map_err(|source| CertificateDatesError::NotX509 { source })?;
    let validity = cert.validity();
    Ok((
        unix_rfc3339(validity.not_before.timestamp()),
        unix_rfc3339(validity.not_after.timestamp()),
    ))
}

/// `pems` one after the other, each ending with a newline (the primary first).
pub fn pem_bundle<'a>(pems: impl IntoIterator<Item = &'a str>) -> String {
    let mut text = String::new();
    for pem in pems {
        text.push_str(pem);
        if !pem.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}

/// New key material, made before anything is written; its Debug output shows no private value.
pub enum NewKey {
    Ca { cert_pem: String, key_pem: String },
    ServiceAccount { key_pem: String, public_pem: String },
    Encryption(EncryptionKey),
}

impl std::fmt::Debug for NewKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NewKey::Ca { .. } => "NewKey::Ca(<redacted>)",
            NewKey::ServiceAccount { .. } => "NewKey::ServiceAccount(<redacted>)",
            NewKey::Encryption(_) => "NewKey::Encryption(<redacted>)",
        })
    }
}

/// Makes a fresh key for keyset `name` of `cluster`, and its item (state `next`).
pub fn generate(cluster: &str, name: KeysetName) -> Result<(NewKey, KeysetItem), PkiError> {
    let now = OffsetDateTime::now_utc();
    let item = |id: String, expires: Option<String>| KeysetItem {
        id,
        created: Some(rfc3339(now)),
        expires,
        state: KeyState::Next,
        original: false,
    };
    Ok(match name {
        KeysetName::KubernetesCa | KeysetName::EtcdCa => {
            // A subject of its own (the time it was made), so the old and new CAs are never confused by name.
            let common_name = format!("{}-{}.{cluster}", name.as_str(), now.unix_timestamp());
            let what = match name {
                KeysetName::EtcdCa => "etcd CA",
                _ => "Kubernetes CA",
            };
            let ca = generate_ca(&common_name, what)?;
            let (_, expires) = certificate_dates(&ca.cert_pem).unwrap_or_default();
            let id = fingerprint(ca.cert_pem.as_bytes());
            (
                NewKey::Ca {
                    cert_pem: ca.cert_pem,
                    key_pem: ca.key_pem,
                },
                item(id, Some(expires)),
            )
        }
        KeysetName::ServiceAccount => {
            let pair = rcgen::KeyPair::generate().map_err(|source| PkiError::Generate {
                what: "service-account signing key",
                source,
            })?;
            let public_pem = pair.public_key_pem();
            (
                NewKey::ServiceAccount {
                    key_pem: pair.serialize_pem(),
                    public_pem: public_pem.clone(),
                },
                item(fingerprint(public_pem.as_bytes()), None),
            )
        }
        KeysetName::EncryptionKey => {
            let mut secret = [0u8; 32];
            rand::rng().fill_bytes(&mut secret);
            // The time it was made, and a random part: two keys made in one second never share a name.
            let id = format!(
                "key-{}-{:04x}",
                now.unix_timestamp(),
                rand::rng().next_u32() & 0xffff
            );
            (
                NewKey::Encryption(EncryptionKey {
                    name: id.clone(),
                    secret: base64::engine::general_purpose::STANDARD.encode(secret),
                }),
                item(id, None),
            )
        }
    })
}
