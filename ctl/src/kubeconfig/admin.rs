//! The admin client certificate of `export kubeconfig --admin`: `system:masters`, signed by the cluster's
//! Kubernetes CA on the operator's machine, short-lived, and never stored anywhere but the operator's kubeconfig.

use std::time::Duration;

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};
use time::OffsetDateTime;

/// kops's default lifetime of an exported admin credential.
pub const DEFAULT_ADMIN_VALIDITY: Duration = Duration::from_secs(18 * 3600);
/// The longest `--admin=DURATION`: Kubernetes cannot revoke a client certificate (only rotating the CA does), so
/// a `system:masters` credential must run out on its own, soon.
pub const MAX_ADMIN_VALIDITY: Duration = Duration::from_secs(30 * 86_400);
/// The group that Kubernetes authorizes for everything.
pub const ADMIN_GROUP: &str = "system:masters";

/// Why the admin certificate could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum AdminCertError {
    #[error("the cluster's Kubernetes CA ({what}) cannot be used: {source}")]
    BadCa {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("issuing the admin certificate: {source}")]
    Issue {
        #[source]
        source: rcgen::Error,
    },
}

/// A client certificate and its fresh private key, PEM.
pub struct AdminCredential {
    pub cert_pem: String,
    pub key_pem: String,
}

// Never print the key.
impl std::fmt::Debug for AdminCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminCredential")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Issues a `system:masters` client certificate for `common_name` (which audit logs show: say who asked),
/// valid from an hour ago (clock skew) until `now + validity`.
pub fn issue_admin(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    common_name: &str,
    validity: Duration,
    now: OffsetDateTime,
) -> Result<AdminCredential, AdminCertError> {
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(|source| AdminCertError::BadCa {
        what: "private key",
        source,
    })?;
    let issuer =
        Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).map_err(|source| AdminCertError::BadCa {
            what: "certificate",
            source,
        })?;
    let err = |source| AdminCertError::Issue { source };
    let key = KeyPair::generate().map_err(err)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params
        .distinguished_name
        .push(DnType::OrganizationName, ADMIN_GROUP);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + validity;
    let cert = params.signed_by(&key, &issuer).map_err(err)?;
    Ok(AdminCredential {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// `--admin`'s duration refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminValidityError {
    #[error(transparent)]
    Duration(#[from] ballast_state::duration::DurationError),
    #[error(
        "{text:?} is longer than {}: an admin certificate cannot be revoked, so it must expire soon; \
         export a fresh one when it does",
        ballast_state::duration::human_duration(MAX_ADMIN_VALIDITY)
    )]
    TooLong { text: String },
}

/// `--admin`'s duration: positive, at most [`MAX_ADMIN_VALIDITY`].
pub fn parse_admin_validity(text: &str) -> Result<Duration, AdminValidityError> {
    let validity = ballast_state::duration::parse_duration(text)?;
    if validity > MAX_ADMIN_VALIDITY {
        return Err(AdminValidityError::TooLong {
            text: text.to_string(),
        });
    }
    Ok(validity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_is_a_short_lived_masters_client_signed_by_the_ca() {
        let ca =
            ballast_state::pki::generate_ca("kubernetes-ca.demo", "Kubernetes CA").expect("ca");
        let now = OffsetDateTime::now_utc();
        let admin = issue_admin(
            &ca.cert_pem,
            &ca.key_pem,
            "ballast-admin:alice",
            DEFAULT_ADMIN_VALIDITY,
            now,
        )
        .expect("issue");
        let (_, pem) = x509_parser::pem::parse_x509_pem(admin.cert_pem.as_bytes()).expect("pem");
        let cert = pem.parse_x509().expect("x509");
        let subject = cert.subject().to_string();
        assert!(subject.contains("CN=ballast-admin:alice"), "{subject}");
        assert!(subject.contains("O=system:masters"), "{subject}");
        let not_after = cert.validity().not_after.timestamp();
        assert_eq!(not_after, (now + DEFAULT_ADMIN_VALIDITY).unix_timestamp());
        let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca.cert_pem.as_bytes()).expect("ca pem");
        let ca_cert = ca_pem.parse_x509().expect("ca x509");
        assert_eq!(cert.issuer(), ca_cert.subject(), "issued by the cluster CA");
        let usage = cert
            .extended_key_usage()
            .expect("eku")
            .expect("has eku")
            .value;
        assert!(usage.client_auth && !usage.server_auth);
        assert!(!format!("{admin:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn a_wrong_ca_key_is_refused_naming_it() {
        let ca =
            ballast_state::pki::generate_ca("kubernetes-ca.demo", "Kubernetes CA").expect("ca");
        let err = issue_admin(
            &ca.cert_pem,
            "not a key",
            "x",
            DEFAULT_ADMIN_VALIDITY,
            OffsetDateTime::now_utc(),
        )
        .expect_err("refused");
        assert!(err.to_string().contains("private key"), "{err}");
    }

    #[test]
    fn validity_is_bounded() {
        assert_eq!(
            parse_admin_validity("2h").expect("2h"),
            Duration::from_secs(7200)
        );
        assert_eq!(
            parse_admin_validity("30d").expect("30d"),
            MAX_ADMIN_VALIDITY
        );
        let err = parse_admin_validity("31d").expect_err("too long");
        assert!(err.to_string().contains("cannot be revoked"), "{err}");
        assert!(parse_admin_validity("-1h").is_err());
        assert!(parse_admin_validity("0s").is_err());
    }
}
