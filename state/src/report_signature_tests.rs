use rcgen::{CertificateParams, DnType, Issuer, KeyPair};

use super::*;
use crate::pki::{generate_ca, CertificateAuthority};
use crate::report::Phase;

const NODE: &str = "ip-127-16-1-4.us-west-2.compute.internal";
const OTHER: &str = "ip-127-16-2-9.us-west-2.compute.internal";

/// A client certificate and key for `cn` in `org`, issued by `ca`.
fn client_cert(ca: &CertificateAuthority, cn: &str, org: Option<&str>) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(DnType::CommonName, cn);
    if let Some(org) = org {
        params
            .distinguished_name
            .push(DnType::OrganizationName, org);
    }
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(365);
    let issuer = Issuer::from_ca_cert_pem(
        &ca.cert_pem,
        KeyPair::from_pem(&ca.key_pem).expect("ca key"),
    )
    .expect("issuer");
    let cert = params.signed_by(&key, &issuer).expect("sign");
    (cert.pem(), key.serialize_pem())
}

fn node_cert(ca: &CertificateAuthority, node: &str) -> (String, String) {
    client_cert(ca, &format!("system:node:{node}"), Some("system:nodes"))
}

fn report(instance: &str) -> NodeReport {
    let mut r = NodeReport::new(instance, "0.1.0", "2025-01-01T00:00:00Z");
    r.phase = Phase::Configured;
    r.node_spec_sha256 = Some("a".into());
    r
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

fn ca() -> CertificateAuthority {
    generate_ca("kubernetes-ca", "Kubernetes CA").expect("ca")
}

#[test]
fn a_report_signed_by_its_own_node_verifies() {
    let ca = ca();
    let (cert, key) = node_cert(&ca, NODE);
    let stored = sign(&report("i-1"), &key, &cert).expect("sign");
    let text = String::from_utf8(stored.clone()).expect("utf8");
    assert!(text.contains("\"kind\": \"SignedNodeReport\""), "{text}");
    assert!(
        !text.contains("PRIVATE KEY"),
        "the key never leaves the node"
    );
    let read = parse_stored(&stored).expect("parse");
    assert_eq!(read.report, report("i-1"));
    assert_eq!(
        verify(&read, &ca.cert_pem, Some(NODE), now()),
        Ok(NODE.to_string())
    );
}

#[test]
fn another_nodes_certificate_is_refused_by_name() {
    // A worker writing another instance's key can only sign with its own certificate.
    let ca = ca();
    let (cert, key) = node_cert(&ca, OTHER);
    let read = parse_stored(&sign(&report("i-1"), &key, &cert).expect("sign")).expect("parse");
    assert_eq!(
        verify(&read, &ca.cert_pem, Some(NODE), now()),
        Err(UntrustedReport::WrongNode {
            signer: OTHER.into(),
            expected: NODE.into()
        })
    );
    assert_eq!(
        verify(&read, &ca.cert_pem, None, now()),
        Err(UntrustedReport::UnknownNode)
    );
}

#[test]
fn a_certificate_of_another_ca_or_not_a_nodes_is_refused() {
    let ca = ca();
    let (cert, key) = node_cert(&self::ca(), NODE);
    let read = parse_stored(&sign(&report("i-1"), &key, &cert).expect("sign")).expect("parse");
    assert_eq!(
        verify(&read, &ca.cert_pem, Some(NODE), now()),
        Err(UntrustedReport::NotIssuedByCa)
    );
    // An admin's certificate (system:masters) names no node.
    let (cert, key) = client_cert(&ca, "kubernetes-admin", Some("system:masters"));
    let read = parse_stored(&sign(&report("i-1"), &key, &cert).expect("sign")).expect("parse");
    assert!(matches!(
        verify(&read, &ca.cert_pem, Some(NODE), now()),
        Err(UntrustedReport::NotANode { .. })
    ));
    // The node's name without the nodes group is not a kubelet's certificate.
    let (cert, key) = client_cert(&ca, &format!("system:node:{NODE}"), None);
    let read = parse_stored(&sign(&report("i-1"), &key, &cert).expect("sign")).expect("parse");
    assert!(matches!(
        verify(&read, &ca.cert_pem, Some(NODE), now()),
        Err(UntrustedReport::NotANode { .. })
    ));
}

#[test]
fn a_report_changed_after_signing_or_with_a_swapped_certificate_is_refused() {
    let ca = ca();
    let (cert, key) = node_cert(&ca, NODE);
    let stored = sign(&report("i-1"), &key, &cert).expect("sign");
    let mut envelope: serde_json::Value = serde_json::from_slice(&stored).expect("json");
    let inner = envelope["report"].as_str().expect("report").to_string();
    envelope["report"] = inner.replace("\"Configured\"", "\"Failed\"").into();
    let tampered = parse_stored(&serde_json::to_vec(&envelope).expect("json")).expect("parse");
    assert_eq!(tampered.report.phase, Phase::Failed);
    assert_eq!(
        verify(&tampered, &ca.cert_pem, Some(NODE), now()),
        Err(UntrustedReport::BadSignature)
    );
    // The right node's certificate beside a signature made with another key.
    let (_, other_key) = node_cert(&ca, OTHER);
    let mut forged: serde_json::Value =
        serde_json::from_slice(&sign(&report("i-1"), &other_key, &cert).expect("sign"))
            .expect("json");
    forged["certificate"] = cert.clone().into();
    let forged = parse_stored(&serde_json::to_vec(&forged).expect("json")).expect("parse");
    assert_eq!(
        verify(&forged, &ca.cert_pem, Some(NODE), now()),
        Err(UntrustedReport::BadSignature)
    );
}

#[test]
fn an_expired_certificate_is_refused() {
    let ca = ca();
    let (cert, key) = node_cert(&ca, NODE);
    let read = parse_stored(&sign(&report("i-1"), &key, &cert).expect("sign")).expect("parse");
    let in_twenty_years = now() + 20 * 365 * 24 * 3600;
    assert!(matches!(
        verify(&read, &ca.cert_pem, Some(NODE), in_twenty_years),
        Err(UntrustedReport::NotValidNow { .. })
    ));
}

#[test]
fn a_plain_report_still_reads_as_unsigned() {
    let ca = ca();
    let plain = report("i-1").to_json().expect("json");
    let read = parse_stored(&plain).expect("parse");
    assert_eq!(read.report, report("i-1"));
    assert_eq!(
        verify(&read, &ca.cert_pem, Some(NODE), now()),
        Err(UntrustedReport::Unsigned)
    );
    assert!(parse_stored(b"{\"kind\": \"SignedNodeReport\"}").is_err());
    assert!(parse_stored(b"not json").is_err());
}

/// During a Kubernetes CA rotation the anchor is the keyset's bundle: a report signed with a certificate of any
/// CA in it verifies, wherever that CA is in the bundle; once the CA is dropped from the bundle, it does not.
#[test]
fn a_report_verifies_against_any_ca_of_the_trusted_bundle() {
    let old = ca();
    let new = generate_ca("kubernetes-ca-2", "Kubernetes CA").expect("ca");
    let bundle = format!("{}{}", new.cert_pem, old.cert_pem);
    for issuer in [&old, &new] {
        let (cert, key) = node_cert(issuer, NODE);
        let read = parse_stored(&sign(&report("i-1"), &key, &cert).expect("sign")).expect("parse");
        assert_eq!(
            verify(&read, &bundle, Some(NODE), now()),
            Ok(NODE.to_string())
        );
    }
    let (cert, key) = node_cert(&old, NODE);
    let read = parse_stored(&sign(&report("i-1"), &key, &cert).expect("sign")).expect("parse");
    assert_eq!(
        verify(&read, &new.cert_pem, Some(NODE), now()),
        Err(UntrustedReport::NotIssuedByCa)
    );
    assert!(matches!(
        verify(&read, "no certificate here", Some(NODE), now()),
        Err(UntrustedReport::BadCa(_))
    ));
}
