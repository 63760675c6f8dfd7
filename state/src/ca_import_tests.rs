use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P384_SHA384,
};

use super::*;
use crate::pki::generate_ca;

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// A certificate for `key` with the given CA-ness, key usages and validity (days from now).
fn cert(key: &KeyPair, ca: bool, usages: Vec<KeyUsagePurpose>, from: i64, to: i64) -> String {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(DnType::CommonName, "operator-ca");
    if ca {
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    }
    params.key_usages = usages;
    let today = time::OffsetDateTime::now_utc();
    params.not_before = today + time::Duration::days(from);
    params.not_after = today + time::Duration::days(to);
    params.self_signed(key).expect("self-signed").pem()
}

fn ca_usages() -> Vec<KeyUsagePurpose> {
    vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ]
}

fn check(cert_text: &str, key_text: &str) -> Result<ImportedCa, CaImportError> {
    check_ca("ca.crt", cert_text, "ca.key", key_text, now())
}

#[test]
fn a_generated_ca_is_accepted_normalized_and_keeps_its_id() {
    let ca = generate_ca("operator-ca", "Kubernetes CA").expect("ca");
    // Text around the PEM (as `openssl x509 -text` writes) is dropped.
    let with_text = format!("Certificate:\n    Data: ...\n{}", ca.cert_pem);
    let imported = check(&with_text, &ca.key_pem).expect("accepted");
    assert_eq!(imported.cert_pem.trim(), ca.cert_pem.trim());
    assert_eq!(imported.id, fingerprint(imported.cert_pem.as_bytes()));
    assert!(imported.subject.contains("operator-ca"), "{imported:?}");
    let debug = format!("{imported:?}");
    assert!(!debug.contains("PRIVATE KEY"), "{debug}");
    assert!(debug.contains("<redacted>"), "{debug}");
    // The stored key is the same key (PKCS#8 PEM).
    assert_eq!(
        KeyPair::from_pem(&imported.key_pem)
            .expect("key")
            .public_key_pem(),
        KeyPair::from_pem(&ca.key_pem)
            .expect("key")
            .public_key_pem()
    );
}

#[test]
fn a_p384_ca_is_accepted() {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).expect("key");
    let pem = cert(&key, true, ca_usages(), -1, 3650);
    check(&pem, &key.serialize_pem()).expect("accepted");
}

#[test]
fn every_bad_input_is_refused_naming_its_file() {
    let ca = generate_ca("operator-ca", "Kubernetes CA").expect("ca");
    let other = generate_ca("other-ca", "Kubernetes CA").expect("ca");
    let key = KeyPair::generate().expect("key");
    let key_pem = key.serialize_pem();
    let cases: Vec<(&str, String, String, &str, &str)> = vec![
        (
            "garbage certificate",
            "not a certificate".into(),
            ca.key_pem.clone(),
            "ca.crt",
            "no PEM certificate",
        ),
        (
            "a broken PEM certificate",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
            ca.key_pem.clone(),
            "ca.crt",
            "not valid X.509",
        ),
        (
            "a key as the certificate",
            ca.key_pem.clone(),
            ca.key_pem.clone(),
            "ca.crt",
            "holds a private key",
        ),
        (
            "a chain",
            format!("{}{}", ca.cert_pem, other.cert_pem),
            ca.key_pem.clone(),
            "ca.crt",
            "holds 2 certificates",
        ),
        (
            "garbage key",
            ca.cert_pem.clone(),
            "not a key".into(),
            "ca.key",
            "not a private key",
        ),
        (
            "a certificate as the key",
            ca.cert_pem.clone(),
            ca.cert_pem.clone(),
            "ca.key",
            "holds a certificate",
        ),
        (
            "another CA's key",
            ca.cert_pem.clone(),
            other.key_pem.clone(),
            "ca.key",
            "does not match the certificate in ca.crt",
        ),
        (
            "not a CA",
            cert(&key, false, ca_usages(), -1, 3650),
            key_pem.clone(),
            "ca.crt",
            "not a CA certificate",
        ),
        (
            "a CA that may not sign certificates",
            cert(
                &key,
                true,
                vec![KeyUsagePurpose::DigitalSignature],
                -1,
                3650,
            ),
            key_pem.clone(),
            "ca.crt",
            "lacks keyCertSign",
        ),
        (
            "expired",
            cert(&key, true, ca_usages(), -400, -1),
            key_pem.clone(),
            "ca.crt",
            "expired at",
        ),
        (
            "not valid yet",
            cert(&key, true, ca_usages(), 2, 3650),
            key_pem.clone(),
            "ca.crt",
            "not valid before",
        ),
        (
            "expiring soon",
            cert(&key, true, ca_usages(), -1, 30),
            key_pem.clone(),
            "ca.crt",
            "less than 90 days",
        ),
    ];
    for (what, cert_text, key_text, file, problem) in cases {
        let err = check(&cert_text, &key_text).expect_err(what);
        assert_eq!(err.file, file, "{what}: {err}");
        let text = err.to_string();
        assert!(text.contains(problem), "{what}: {text}");
        assert!(text.starts_with(&format!("{file}: ")), "{what}: {text}");
        assert!(!text.contains("PRIVATE KEY-----\nM"), "{what}: {text}");
    }
}
