//! The certificates a verified worker gets: each CSR proves the worker holds that key; everything a certificate
//! says comes from the [`Grant`], never from the CSR (its subject, names and extensions are ignored): exactly
//! `CN=system:node:<name>, O=system:nodes`, and
//! - the kubelet's client certificate: client authentication only, no names, for [`NODE_CERT_VALIDITY`];
//! - the kubelet's serving certificate: server authentication only, the instance's private DNS name and private
//!   IP as EC2 gives them, for [`SERVING_CERT_VALIDITY`].

use rcgen::{
    CertificateParams, CertificateSigningRequestParams, DnType, ExtendedKeyUsagePurpose, Issuer,
    KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

use super::verify::Grant;

/// How long a worker's kubelet client certificate lives, and when nodeup asks again: what the node keeps
/// (crate::cert_plan::worker_kubelet_client) and what this issues are one pair of numbers.
pub use crate::cert_plan::{NODE_CERT_RENEW_BEFORE, NODE_CERT_VALIDITY};
/// How long a worker's kubelet serving certificate lives: as every leaf certificate nodeup issues on the control
/// plane ([`crate::cert_plan::VALIDITY`]), renewed at boot when fewer than 30 days are left. The kubelet cannot
/// renew it itself (`serverTLSBootstrap` CSRs have no approver), so an instance is replaced (`rolling-update`)
/// within the year: docs/node-identity.md.
pub const SERVING_CERT_VALIDITY: Duration = crate::cert_plan::VALIDITY;
/// The group of every node's client certificate (the Node authorizer's).
pub const NODES_GROUP: &str = "system:nodes";

/// Which of a worker's two kubelet certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeCertificate {
    /// The kubelet's client certificate (to the API server).
    Client,
    /// The kubelet's serving certificate (the API server to the kubelet: logs, exec, port-forward).
    Serving,
}

/// Why a certificate could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignNodeCertError {
    /// The CSR does not parse, or its signature does not verify (the caller does not hold its key).
    #[error("the CSR is not a valid, self-signed certificate request: {0}")]
    BadCsr(#[source] rcgen::Error),
    /// The Kubernetes CA does not load.
    #[error("the Kubernetes CA is unusable: {0}")]
    BadCa(#[source] rcgen::Error),
    /// rcgen failed to sign.
    #[error("signing the node certificate: {0}")]
    Sign(#[source] rcgen::Error),
}

/// The common name of a node's client certificate.
pub fn node_common_name(node_name: &str) -> String {
    format!("system:node:{node_name}")
}

/// Signs the CSR's public key into a kubelet certificate of `which` kind for the granted node only.
pub fn sign_node_certificate(
    csr_pem: &str,
    grant: &Grant,
    which: NodeCertificate,
    ca_cert_pem: &str,
    ca_key_pem: &str,
    now: OffsetDateTime,
) -> Result<String, SignNodeCertError> {
    let csr =
        CertificateSigningRequestParams::from_pem(csr_pem).map_err(SignNodeCertError::BadCsr)?;
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(SignNodeCertError::BadCa)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).map_err(SignNodeCertError::BadCa)?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, node_common_name(&grant.node_name));
    params
        .distinguished_name
        .push(DnType::OrganizationName, NODES_GROUP);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let validity = match which {
        NodeCertificate::Client => {
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            NODE_CERT_VALIDITY
        }
        NodeCertificate::Serving => {
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            let name = grant
                .node_name
                .clone()
                .try_into()
                .map_err(SignNodeCertError::Sign)?;
            params.subject_alt_names =
                vec![SanType::DnsName(name), SanType::IpAddress(grant.private_ip)];
            SERVING_CERT_VALIDITY
        }
    };
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - Duration::minutes(5);
    params.not_after = now + validity;
    let cert = params
        .signed_by(&csr.public_key, &issuer)
        .map_err(SignNodeCertError::Sign)?;
    Ok(cert.pem())
}

/// A CSR for `node_name` with a fresh key, made on the worker: (CSR PEM, key PEM). The key stays on the node.
pub fn new_csr(node_name: &str) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, node_common_name(node_name));
    params
        .distinguished_name
        .push(DnType::OrganizationName, NODES_GROUP);
    let csr = params.serialize_request(&key)?;
    Ok((csr.pem()?, key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::certs::cert_facts;

    fn ca() -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "kubernetes-ca");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("ca");
        (cert.pem(), key.serialize_pem())
    }

    fn grant(name: &str) -> Grant {
        Grant {
            node_name: name.into(),
            private_ip: "10.0.1.10".parse().expect("an IP"),
            instance_id: "i-0abc".into(),
            instance_group: "nodes".into(),
        }
    }

    #[test]
    fn the_certificate_names_the_granted_node_whatever_the_csr_says() {
        let (ca_cert, ca_key) = ca();
        // The worker's CSR claims another node, and the masters group: both are ignored.
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(vec!["evil.example.com".to_string()]).expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, "system:node:control-plane-1");
        params
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        let csr = params
            .serialize_request(&key)
            .expect("csr")
            .pem()
            .expect("pem");
        let now = OffsetDateTime::now_utc();
        let pem = sign_node_certificate(
            &csr,
            &grant("ip-10-0-1-10"),
            NodeCertificate::Client,
            &ca_cert,
            &ca_key,
            now,
        )
        .expect("signed");
        let facts = cert_facts(pem.as_bytes()).expect("parses");
        assert_eq!(facts.common_name, "system:node:ip-10-0-1-10");
        assert_eq!(facts.organization.as_deref(), Some("system:nodes"));
        assert!(facts.dns_names.is_empty() && facts.ips.is_empty());
        assert_eq!(facts.public_key, key.public_key_raw());
        let ca_facts = cert_facts(ca_cert.as_bytes()).expect("ca parses");
        assert_eq!(facts.issuer_raw, ca_facts.subject_raw);
        let lifetime = facts.not_after - now.unix_timestamp();
        assert!(
            (NODE_CERT_VALIDITY.whole_seconds() - 5..=NODE_CERT_VALIDITY.whole_seconds())
                .contains(&lifetime),
            "{lifetime}"
        );
    }

    #[test]
    fn a_csr_whose_signature_does_not_verify_is_refused() {
        let (ca_cert, ca_key) = ca();
        let (csr, _key) = new_csr("n").expect("csr");
        // Flip a character inside the base64 body: the self-signature no longer verifies (or it no longer parses).
        let mut bytes = csr.into_bytes();
        let middle = bytes.len() / 2;
        bytes[middle] = if bytes[middle] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).expect("ascii");
        let refused = sign_node_certificate(
            &tampered,
            &grant("n"),
            NodeCertificate::Serving,
            &ca_cert,
            &ca_key,
            OffsetDateTime::now_utc(),
        );
        assert!(
            matches!(refused, Err(SignNodeCertError::BadCsr(_))),
            "{refused:?}"
        );
    }

    #[test]
    fn the_serving_certificate_names_what_ec2_says_whatever_the_csr_says() {
        let (ca_cert, ca_key) = ca();
        // The CSR asks for the API load balancer's name, another IP and client authentication: all ignored.
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(vec!["api.example.com".to_string()]).expect("params");
        params
            .subject_alt_names
            .push(SanType::IpAddress("10.0.0.1".parse().expect("ip")));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let csr = params
            .serialize_request(&key)
            .expect("csr")
            .pem()
            .expect("pem");
        let now = OffsetDateTime::now_utc();
        let node = "ip-10-0-1-10.us-west-2.compute.internal";
        let pem = sign_node_certificate(
            &csr,
            &grant(node),
            NodeCertificate::Serving,
            &ca_cert,
            &ca_key,
            now,
        )
        .expect("signed");
        let facts = cert_facts(pem.as_bytes()).expect("parses");
        assert_eq!(facts.common_name, format!("system:node:{node}"));
        assert_eq!(facts.organization.as_deref(), Some("system:nodes"));
        assert!(facts.dns_names.iter().eq([node]), "{:?}", facts.dns_names);
        assert!(
            facts
                .ips
                .iter()
                .eq(&["10.0.1.10".parse::<IpAddr>().expect("ip")]),
            "{:?}",
            facts.ips
        );
        assert_eq!(facts.public_key, key.public_key_raw());
        // What the node checks before keeping it: the plan a worker makes from its own IMDS facts.
        let plan = crate::cert_plan::kubelet_serving(node, &["10.0.1.10".parse().expect("ip")]);
        assert!(crate::certs::still_fits(
            &plan,
            &ca_cert,
            pem.as_bytes(),
            key.serialize_pem().as_bytes(),
            now
        ));
        let parsed = x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .expect("pem")
            .1;
        let cert = parsed.parse_x509().expect("x509");
        let usage = cert
            .extended_key_usage()
            .expect("extension parses")
            .expect("extended key usage present")
            .value;
        assert!(usage.server_auth && !usage.client_auth, "{usage:?}");
        let lifetime = facts.not_after - now.unix_timestamp();
        assert!(
            (SERVING_CERT_VALIDITY.whole_seconds() - 5..=SERVING_CERT_VALIDITY.whole_seconds())
                .contains(&lifetime),
            "{lifetime}"
        );
    }

    #[test]
    fn a_worker_csr_names_itself_and_keeps_its_key() {
        let (csr, key) = new_csr("ip-10-0-1-10").expect("csr");
        let parsed = CertificateSigningRequestParams::from_pem(&csr).expect("verifies");
        let key = KeyPair::from_pem(&key).expect("key");
        assert_eq!(
            rcgen::PublicKeyData::der_bytes(&parsed.public_key),
            key.public_key_raw()
        );
    }
}
