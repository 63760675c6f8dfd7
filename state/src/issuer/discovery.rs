//! The two documents a service-account issuer publishes, rendered (pure): `/.well-known/openid-configuration`
//! and the JSON Web Key Set at `/openid/v1/jwks`, shaped as kube-apiserver serves them at the same paths.
//!
//! The JWKS holds every service-account public key the API servers verify with: the primary, and every key
//! still trusted (`keyset::Keyset::key_use`: `next` from rotation stage `add`, before it signs anything; the old
//! key, `trusted`, until stage `drop`), so a rotation never publishes a key set that would refuse a token in
//! flight. Each key's `kid` is the one kube-apiserver puts in the tokens it signs: the unpadded base64url of
//! the sha256 of the public key's DER (PKIX SubjectPublicKeyInfo) encoding (`keyIDFromPublicKey` in
//! Kubernetes's `pkg/serviceaccount/jwt.go`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Serialize;
use sha2::{Digest, Sha256};
use x509_parser::prelude::FromDer;
use x509_parser::public_key::PublicKey;
use x509_parser::x509::SubjectPublicKeyInfo;

use crate::keyset::{public_key_path, KeyUse, KeysetName};
use crate::layout::{pki_names, ClusterPaths};

/// OID of prime256v1 (P-256), the named curve of an `id-ecPublicKey`.
const P256_OID: &str = "1.2.840.10045.3.1.7";

/// The OIDC discovery document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenIdConfiguration {
    pub issuer: String,
    pub jwks_uri: String,
    pub response_types_supported: Vec<String>,
    pub subject_types_supported: Vec<String>,
    pub id_token_signing_alg_values_supported: Vec<String>,
}

/// A JSON Web Key Set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Jwks {
    pub keys: Vec<Jwk>,
}

/// One public key (RFC 7517), with the fields kube-apiserver publishes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Jwk {
    #[serde(rename = "use")]
    pub key_use: String,
    pub kty: String,
    pub kid: String,
    pub alg: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crv: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e: Option<String>,
}

/// Why a public key cannot be published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwkError {
    #[error("public key {index}: not a PEM PUBLIC KEY ({problem})")]
    Pem { index: usize, problem: String },
    #[error("public key {index}: not a DER SubjectPublicKeyInfo ({problem})")]
    Der { index: usize, problem: String },
    #[error(
        "public key {index}: {kind} keys are not published; service-account keys are ECDSA P-256 (or RSA)"
    )]
    Unsupported { index: usize, kind: String },
}

pub use crate::irsa::store::jwks_uri;

/// The discovery document of `issuer`, naming the algorithms of the keys in `jwks`.
pub fn openid_configuration(issuer: &str, jwks: &Jwks) -> OpenIdConfiguration {
    let mut algorithms: Vec<String> = jwks.keys.iter().map(|k| k.alg.clone()).collect();
    algorithms.sort();
    algorithms.dedup();
    if algorithms.is_empty() {
        algorithms.push("ES256".to_string());
    }
    OpenIdConfiguration {
        issuer: issuer.to_string(),
        jwks_uri: jwks_uri(issuer),
        response_types_supported: vec!["id_token".to_string()],
        subject_types_supported: vec!["public".to_string()],
        id_token_signing_alg_values_supported: algorithms,
    }
}

/// The JWKS of these PEM public keys (`-----BEGIN PUBLIC KEY-----`), in order, a key given twice once.
pub fn jwks(public_keys_pem: &[String]) -> Result<Jwks, JwkError> {
    let mut keys: Vec<Jwk> = Vec::new();
    for (index, text) in public_keys_pem.iter().enumerate() {
        let key = jwk(index, text)?;
        if !keys.iter().any(|k| k.kid == key.kid) {
            keys.push(key);
        }
    }
    Ok(Jwks { keys })
}

/// A document as published: pretty JSON with a final newline (the same bytes for the same keys, so a second
/// `update cluster` finds nothing to change).
pub fn to_json<T: Serialize>(document: &T) -> String {
    let mut text = serde_json::to_string_pretty(document).unwrap_or_default();
    text.push('\n');
    text
}

/// The kid kube-apiserver gives a public key: base64url (unpadded) of sha256 of its DER SubjectPublicKeyInfo.
pub fn key_id(spki_der: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(spki_der))
}

fn jwk(index: usize, text: &str) -> Result<Jwk, JwkError> {
    let block = pem::parse(text).map_err(|e| JwkError::Pem {
        index,
        problem: e.to_string(),
    })?;
    if block.tag() != "PUBLIC KEY" {
        return Err(JwkError::Pem {
            index,
            problem: format!("a {} block", block.tag()),
        });
    }
    let der = block.contents();
    let (_, spki) = SubjectPublicKeyInfo::from_der(der).map_err(|e| JwkError::Der {
        index,
        problem: e.to_string(),
    })?;
    let kid = key_id(der);
    let parsed = spki.parsed().map_err(|e| JwkError::Der {
        index,
        problem: e.to_string(),
    })?;
    let unsupported = |kind: &str| JwkError::Unsupported {
        index,
        kind: kind.to_string(),
    };
    match parsed {
        PublicKey::EC(point) => {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok())
                .map(|oid| oid.to_id_string());
            if curve.as_deref() != Some(P256_OID) {
                return Err(unsupported("EC keys of curves other than P-256"));
            }
            let bytes = point.data();
            // An uncompressed point: 0x04, then X and Y of 32 bytes each.
            if bytes.len() != 65 || bytes[0] != 4 {
                return Err(unsupported("compressed or malformed EC"));
            }
            Ok(Jwk {
                key_use: "sig".to_string(),
                kty: "EC".to_string(),
                kid,
                alg: "ES256".to_string(),
                crv: Some("P-256".to_string()),
                x: Some(URL_SAFE_NO_PAD.encode(&bytes[1..33])),
                y: Some(URL_SAFE_NO_PAD.encode(&bytes[33..65])),
                n: None,
                e: None,
            })
        }
        PublicKey::RSA(rsa) => Ok(Jwk {
            key_use: "sig".to_string(),
            kty: "RSA".to_string(),
            kid,
            alg: "RS256".to_string(),
            crv: None,
            x: None,
            y: None,
            n: Some(URL_SAFE_NO_PAD.encode(strip_leading_zeros(rsa.modulus))),
            e: Some(URL_SAFE_NO_PAD.encode(strip_leading_zeros(rsa.exponent))),
        }),
        _ => Err(unsupported("this algorithm's")),
    }
}

fn strip_leading_zeros(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    &bytes[start..]
}

/// The store keys of the service-account public keys the JWKS publishes, primary first: the keyset's key use
/// (`None` for a keyset never rotated: the original key only). A key staged `next` is in it from stage `add`,
/// and the old key, `trusted` after `promote`, until `drop` distrusts it.
pub fn published_public_keys(paths: &ClusterPaths, keys: Option<&KeyUse>) -> Vec<String> {
    match keys {
        None => vec![paths.pki_public_key(pki_names::SERVICE_ACCOUNT)],
        Some(key_use) => std::iter::once(&key_use.primary)
            .chain(&key_use.also_trusted)
            .map(|item| public_key_path(paths, KeysetName::ServiceAccount, item))
            .collect(),
    }
}
