//! What a worker sends the bootstrap service and what it gets back (JSON over HTTPS), and the digest that binds
//! the worker's signed STS request to exactly this request. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The signed header carrying [`request_digest`]: STS checks the signature over it, so a captured identity proof
/// cannot be attached to another CSR or another node name.
pub const REQUEST_DIGEST_HEADER: &str = "x-ballast-request-sha256";

/// The largest request body the service reads (a CSR is under 1 KiB, the signed headers under 2 KiB).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// A worker asks for its kubelet's client certificate and serving certificate.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CertificateRequest {
    /// The node name the worker asks for (its private DNS name, as its kubelet registers).
    pub node_name: String,
    /// PEM certificate signing request, signed with the worker's own key (generated on the node; it never
    /// leaves it).
    pub csr: String,
    /// PEM certificate signing request for the kubelet's serving certificate, with a second key of the worker's.
    /// Its names are ignored like the client CSR's: the certificate's come from EC2.
    pub serving_csr: String,
    /// The headers of an `sts:GetCallerIdentity` request signed with the worker's instance-role credentials
    /// (SigV4): the service sends that request to STS itself and learns who signed it. The secret key is never
    /// sent; the session token is, as STS needs it with the signature.
    pub sts_headers: BTreeMap<String, String>,
}

// The signed headers are a one-time credential: Debug names them, never their values.
impl std::fmt::Debug for CertificateRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateRequest")
            .field("node_name", &self.node_name)
            .field("csr_bytes", &self.csr.len())
            .field("serving_csr_bytes", &self.serving_csr.len())
            .field("sts_headers", &self.sts_headers.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The service's answer to a verified worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CertificateResponse {
    /// PEM client certificate for `system:node:<node name>` in `system:nodes`.
    pub certificate: String,
    /// PEM serving certificate for the kubelet: the instance's private DNS name and private IP from EC2.
    pub serving_certificate: String,
}

/// The service's answer to anything else: why, in words (never a signature or key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Refusal {
    pub error: String,
}

/// sha256 (hex) of what the worker asks for: its node name and its two CSRs. The worker signs it into its STS
/// request ([`REQUEST_DIGEST_HEADER`]); the service computes it again from the request it received.
pub fn request_digest(node_name: &str, csr: &str, serving_csr: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(node_name.as_bytes());
    // A separator that appears in none, so ("ab", "c") and ("a", "bc") differ.
    hash.update([0u8]);
    hash.update(csr.as_bytes());
    hash.update([0u8]);
    hash.update(serving_csr.as_bytes());
    hex::encode(hash.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_binds_name_and_both_csrs_apart() {
        let d = request_digest("ip-10-0-1-10", "CSR", "SERVING");
        assert_eq!(d.len(), 64);
        assert_ne!(d, request_digest("ip-10-0-1-1", "0CSR", "SERVING"));
        assert_ne!(d, request_digest("ip-10-0-1-10", "CSR2", "SERVING"));
        assert_ne!(d, request_digest("ip-10-0-1-10", "CSR", "SERVING2"));
        // The two CSRs swapped: a proof for one pair is no proof for the other.
        assert_ne!(d, request_digest("ip-10-0-1-10", "SERVING", "CSR"));
        assert_eq!(d, request_digest("ip-10-0-1-10", "CSR", "SERVING"));
    }

    #[test]
    fn debug_never_shows_the_signed_headers() {
        let request = CertificateRequest {
            node_name: "n".into(),
            csr: "c".into(),
            serving_csr: "s".into(),
            sts_headers: BTreeMap::from([(
                "authorization".to_string(),
                "AWS4-HMAC-SHA256 Signature=deadbeef".to_string(),
            )]),
        };
        let shown = format!("{request:?}");
        assert!(shown.contains("authorization"), "{shown}");
        assert!(!shown.contains("deadbeef"), "{shown}");
    }
}
