//! A boot report bound to the node that wrote it: nodeup signs the report with its kubelet client key, whose
//! certificate (`system:node:<name>`, group `system:nodes`) the cluster's Kubernetes CA issued to exactly that node:
//! on a worker, the control plane's bootstrap service after checking with STS and EC2 which instance asked
//! (docs/node-identity.md); on a control-plane node, nodeup itself with the CA key only the control plane reads.
//!
//! Why, although a node's role may write only its own report's key (`reports/<role-id>:<instance-id>.json`, IAM's
//! `${aws:userid}`): a file store has no IAM, and a principal given more than Ballast gives may write any key. A
//! reader (`validate cluster`, `get
//! instances`, `rolling-update cluster`) trusts a report only when its signature verifies, its certificate chains
//! to one of the cluster's trusted Kubernetes CAs (next, primary or trusted: docs/keys.md) and is valid now, and
//! the certificate's node name is the private DNS name EC2 reports for the instance the report's key names. A writer of another instance's key can sign only with its own
//! certificate, which names itself: the report is shown as untrusted and not counted.
//!
//! The stored form is versioned by its kind: `SignedNodeReport` carries the report's JSON as a string (the exact
//! bytes signed, so no canonical form is needed across versions), the certificate and the signature. A plain
//! `NodeReport` (an older nodeup, or one that failed before it had a key) still reads, as unsigned.
//!
//! Pure: signing takes the key's PEM, verifying takes the CA certificates (the keyset's trusted bundle), the node
//! name and the time.

use base64::Engine as _;
use rcgen::SigningKey as _;
use serde::{Deserialize, Serialize};
use x509_parser::asn1_rs::BitString;
use x509_parser::certificate::X509Certificate;
use x509_parser::oid_registry::OID_SIG_ECDSA_WITH_SHA256;
use x509_parser::x509::AlgorithmIdentifier;

use crate::report::NodeReport;
use crate::spec::API_VERSION;

pub const KIND_SIGNED_NODE_REPORT: &str = "SignedNodeReport";

/// Prefixed to the report's bytes before signing, so that a signature made with a kubelet key for anything else
/// is never a valid report signature.
const SIGNING_CONTEXT: &[u8] = b"ballast.dev node report v1\n";

/// The common-name prefix and organization of a node's client certificate (Kubernetes' Node authorizer).
const NODE_CN_PREFIX: &str = "system:node:";
const NODES_GROUP: &str = "system:nodes";

/// A report as stored (`reports/<role-id>:<instance-id>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SignedEnvelope {
    api_version: String,
    kind: String,
    /// The report's JSON: exactly the bytes signed (after [`SIGNING_CONTEXT`]).
    report: String,
    /// The signer's certificate (PEM).
    certificate: String,
    /// ECDSA P-256 with SHA-256, DER, base64 (standard alphabet).
    signature: String,
}

/// The signed parts of a stored report, kept for verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportSignature {
    report_json: String,
    certificate_pem: String,
    signature: Vec<u8>,
}

/// A report as read from the store: its content, and its signature when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredReport {
    pub report: NodeReport,
    pub signature: Option<ReportSignature>,
}

/// Signing a report failed (the node's key or certificate is not usable).
#[derive(Debug, thiserror::Error)]
pub enum SignReportError {
    #[error("the kubelet client key cannot be read: {0}")]
    Key(#[source] rcgen::Error),
    #[error("signing the report with the kubelet client key: {0}")]
    Sign(#[source] rcgen::Error),
    #[error("serializing the report: {0}")]
    Json(#[source] serde_json::Error),
}

/// A stored report this Ballast cannot read.
#[derive(Debug, thiserror::Error)]
pub enum ReadReportError {
    #[error("not a nodeup report: {0}")]
    Json(#[source] serde_json::Error),
    #[error("a {KIND_SIGNED_NODE_REPORT} whose report is not a nodeup report: {0}")]
    Inner(#[source] serde_json::Error),
    #[error("a {KIND_SIGNED_NODE_REPORT} whose signature is not base64")]
    SignatureEncoding,
}

/// Why a report is not trusted: each message says what is wrong; the caller names the object and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UntrustedReport {
    #[error(
        "it is not signed (written by a nodeup older than this ballast, by a node that had no kubelet certificate \
         yet, or by something else)"
    )]
    Unsigned,
    #[error("its certificate cannot be read: {0}")]
    BadCertificate(String),
    #[error("the cluster's Kubernetes CA certificate cannot be read: {0}")]
    BadCa(String),
    #[error("its certificate was not issued by the cluster's Kubernetes CA")]
    NotIssuedByCa,
    #[error("its certificate is not valid now (valid from {not_before} to {not_after})")]
    NotValidNow {
        not_before: String,
        not_after: String,
    },
    #[error("its certificate is not a node's (subject {subject})")]
    NotANode { subject: String },
    #[error("it is signed by node {signer}, but EC2 says the instance is {expected}")]
    WrongNode { signer: String, expected: String },
    #[error("EC2 gives the instance no private DNS name, so its signer cannot be checked")]
    UnknownNode,
    #[error("its signature does not match its content (changed after it was signed)")]
    BadSignature,
}

/// The stored form of `report`, signed with the node's kubelet client key (`key_pem`) and carrying its
/// certificate.
pub fn sign(
    report: &NodeReport,
    key_pem: &str,
    cert_pem: &str,
) -> Result<Vec<u8>, SignReportError> {
    let key = rcgen::KeyPair::from_pem(key_pem).map_err(SignReportError::Key)?;
    let report_json = serde_json::to_string(report).map_err(SignReportError::Json)?;
    let signature = key
        .sign(&signed_bytes(&report_json))
        .map_err(SignReportError::Sign)?;
    let envelope = SignedEnvelope {
        api_version: API_VERSION.to_string(),
        kind: KIND_SIGNED_NODE_REPORT.to_string(),
        report: report_json,
        certificate: cert_pem.to_string(),
        signature: base64::engine::general_purpose::STANDARD.encode(signature),
    };
    serde_json::to_vec_pretty(&envelope).map_err(SignReportError::Json)
}

fn signed_bytes(report_json: &str) -> Vec<u8> {
    [SIGNING_CONTEXT, report_json.as_bytes()].concat()
}

/// Reads a stored report: a `SignedNodeReport`, or a plain (unsigned) `NodeReport`.
pub fn parse_stored(data: &[u8]) -> Result<StoredReport, ReadReportError> {
    let value: serde_json::Value = serde_json::from_slice(data).map_err(ReadReportError::Json)?;
    if value.get("kind").and_then(|k| k.as_str()) != Some(KIND_SIGNED_NODE_REPORT) {
        let report = NodeReport::from_json(data).map_err(ReadReportError::Json)?;
        return Ok(StoredReport {
            report,
            signature: None,
        });
    }
    let envelope: SignedEnvelope = serde_json::from_value(value).map_err(ReadReportError::Json)?;
    let report =
        NodeReport::from_json(envelope.report.as_bytes()).map_err(ReadReportError::Inner)?;
    let signature = base64::engine::general_purpose::STANDARD
        .decode(envelope.signature.as_bytes())
        .map_err(|_| ReadReportError::SignatureEncoding)?;
    Ok(StoredReport {
        report,
        signature: Some(ReportSignature {
            report_json: envelope.report,
            certificate_pem: envelope.certificate,
            signature,
        }),
    })
}

/// Whether `stored` was written by the node EC2 names `node_name` (its private DNS name; `None` when EC2 gives
/// none), with a certificate valid at `now_unix` issued by one of the CAs in `ca_cert_pem` (a PEM bundle: the
/// Kubernetes CA keyset's trusted certificates, docs/keys.md). Returns the signer's node name.
pub fn verify(
    stored: &StoredReport,
    ca_cert_pem: &str,
    node_name: Option<&str>,
    now_unix: i64,
) -> Result<String, UntrustedReport> {
    let Some(signed) = &stored.signature else {
        return Err(UntrustedReport::Unsigned);
    };
    let ca_ders = bundle_ders(ca_cert_pem).map_err(UntrustedReport::BadCa)?;
    let mut cas = Vec::with_capacity(ca_ders.len());
    for der in &ca_ders {
        let (_, ca) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| UntrustedReport::BadCa(e.to_string()))?;
        cas.push(ca);
    }
    let cert_der = pem_der(&signed.certificate_pem).map_err(UntrustedReport::BadCertificate)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&cert_der)
        .map_err(|e| UntrustedReport::BadCertificate(e.to_string()))?;
    // During a Kubernetes CA rotation the bundle holds every CA the nodes trust: a node's certificate may be of
    // any of them (the one that was primary when it was issued).
    let issued_by_one = cas.iter().any(|ca| {
        cert.issuer() == ca.subject() && cert.verify_signature(Some(ca.public_key())).is_ok()
    });
    if !issued_by_one {
        return Err(UntrustedReport::NotIssuedByCa);
    }
    let validity = cert.validity();
    if now_unix < validity.not_before.timestamp() || now_unix > validity.not_after.timestamp() {
        return Err(UntrustedReport::NotValidNow {
            not_before: validity.not_before.to_string(),
            not_after: validity.not_after.to_string(),
        });
    }
    let signer = node_of(&cert)?;
    let expected = node_name
        .filter(|n| !n.is_empty())
        .ok_or(UntrustedReport::UnknownNode)?;
    if signer != expected {
        return Err(UntrustedReport::WrongNode {
            signer,
            expected: expected.to_string(),
        });
    }
    let algorithm = AlgorithmIdentifier::new(OID_SIG_ECDSA_WITH_SHA256, None);
    x509_parser::verify::verify_signature(
        cert.public_key(),
        &algorithm,
        &BitString::new(0, &signed.signature),
        &signed_bytes(&signed.report_json),
    )
    .map_err(|_| UntrustedReport::BadSignature)?;
    Ok(signer)
}

/// The node a client certificate is for: its common name `system:node:<name>`, in group `system:nodes`.
fn node_of(cert: &X509Certificate<'_>) -> Result<String, UntrustedReport> {
    let subject = cert.subject();
    let not_a_node = || UntrustedReport::NotANode {
        subject: subject.to_string(),
    };
    let common_names: Vec<&str> = subject
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .collect();
    let in_nodes_group = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .any(|o| o == NODES_GROUP);
    match common_names.as_slice() {
        [cn] if in_nodes_group => cn
            .strip_prefix(NODE_CN_PREFIX)
            .filter(|name| !name.is_empty())
            .map(str::to_string)
            .ok_or_else(not_a_node),
        _ => Err(not_a_node()),
    }
}

/// Every certificate of a PEM bundle (one or more `CERTIFICATE` blocks), DER; at least one.
fn bundle_ders(bundle: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut ders = Vec::new();
    for pem in x509_parser::pem::Pem::iter_from_buffer(bundle.as_bytes()) {
        let pem = pem.map_err(|e| format!("not PEM: {e}"))?;
        if pem.label == "CERTIFICATE" {
            ders.push(pem.contents);
        }
    }
    if ders.is_empty() {
        return Err("it holds no PEM certificate".to_string());
    }
    Ok(ders)
}

fn pem_der(pem: &str) -> Result<Vec<u8>, String> {
    let (_, parsed) =
        x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| format!("not PEM: {e}"))?;
    Ok(parsed.contents)
}

#[cfg(test)]
#[path = "report_signature_tests.rs"]
mod tests;
