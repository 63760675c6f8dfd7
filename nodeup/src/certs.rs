//! Issuing the certificates [`crate::cert_plan`] plans, with rcgen and the clock, from the CA keys only
//! control-plane roles may read.
//!
//! [`issue_all`] keeps a certificate already on the node when it still says exactly what its plan says (same
//! names, same issuer, matching key, valid for [`CertPlan::renew_before`] more) and issues a new one otherwise:
//! an unchanged node rewrites no certificate and restarts nothing.

use std::collections::BTreeSet;
use std::net::IpAddr;

use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

use crate::model::{ApiServerSecrets, ControlPlaneSecrets, RenderedFile};

// The plan is made in `cert_plan` (pure); these names stay readable from here, where certificates are issued.
pub use crate::cert_plan::{first_service_ip, plan, CertPlan, Signer, RENEW_BEFORE, VALIDITY};
/// Path stems (`<stem>.crt`, `<stem>.key`) of the certificates: the node's one PKI list.
pub use crate::model::pki as names;

/// Failures issuing certificates.
#[derive(Debug, thiserror::Error)]
pub enum IssueCertError {
    /// A CA certificate or key from the state store does not parse.
    #[error("the {ca} from the state store is unusable: {source}")]
    BadCa {
        ca: &'static str,
        #[source]
        source: rcgen::Error,
    },
    /// A plan needs a CA whose key this node does not hold (an API-server node has no etcd CA key).
    #[error("issuing {path} needs the {ca}'s key, which this node does not hold")]
    NoSigner { path: String, ca: &'static str },
    /// rcgen failed to make a key or a certificate.
    #[error("issuing {path}: {source}")]
    Issue {
        path: String,
        #[source]
        source: rcgen::Error,
    },
}

/// What was done for one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertOutcome {
    pub cert_path: String,
    /// The certificate on the node still fits: kept as is.
    pub kept: bool,
}

/// Issues (or keeps) every planned certificate. `existing(path)` returns a file currently on the node.
/// Returns the certificate (0644) and key (0600) files, to be written like every other file.
pub fn issue_all(
    plans: &[CertPlan],
    secrets: &ControlPlaneSecrets,
    kubernetes_ca_cert: &str,
    existing: impl Fn(&str) -> Option<Vec<u8>>,
    now: OffsetDateTime,
) -> Result<(Vec<RenderedFile>, Vec<CertOutcome>), IssueCertError> {
    issue_with(
        plans,
        (kubernetes_ca_cert, &secrets.kubernetes_ca_key),
        Some((&secrets.etcd_ca_cert, &secrets.etcd_ca_key)),
        existing,
        now,
    )
}

/// As [`issue_all`], on an API-server node: the Kubernetes CA signs everything; it holds no etcd CA key, so a
/// plan signed by etcd's is refused ([`IssueCertError::NoSigner`]) rather than issued.
pub fn issue_api_server_node(
    plans: &[CertPlan],
    secrets: &ApiServerSecrets,
    kubernetes_ca_cert: &str,
    existing: impl Fn(&str) -> Option<Vec<u8>>,
    now: OffsetDateTime,
) -> Result<(Vec<RenderedFile>, Vec<CertOutcome>), IssueCertError> {
    issue_with(
        plans,
        (kubernetes_ca_cert, &secrets.kubernetes_ca_key),
        None,
        existing,
        now,
    )
}

/// `kubernetes` and `etcd` are each a CA's certificate and key (PEM).
fn issue_with(
    plans: &[CertPlan],
    kubernetes: (&str, &str),
    etcd: Option<(&str, &str)>,
    existing: impl Fn(&str) -> Option<Vec<u8>>,
    now: OffsetDateTime,
) -> Result<(Vec<RenderedFile>, Vec<CertOutcome>), IssueCertError> {
    let issuer = |ca: &'static str, cert: &str, key: &str| {
        let key = KeyPair::from_pem(key).map_err(|source| IssueCertError::BadCa { ca, source })?;
        Issuer::from_ca_cert_pem(cert, key).map_err(|source| IssueCertError::BadCa { ca, source })
    };
    let kubernetes_ca_cert = kubernetes.0;
    let kubernetes = issuer("Kubernetes CA", kubernetes.0, kubernetes.1)?;
    let etcd = etcd
        .map(|(cert, key)| issuer("etcd CA", cert, key).map(|i| (i, cert)))
        .transpose()?;
    let mut files = Vec::new();
    let mut outcomes = Vec::new();
    for plan in plans {
        let (issuer, ca_pem) = match (plan.signer, &etcd) {
            (Signer::Kubernetes, _) => (&kubernetes, kubernetes_ca_cert),
            (Signer::Etcd, Some((etcd, cert))) => (etcd, *cert),
            (Signer::Etcd, None) => {
                return Err(IssueCertError::NoSigner {
                    path: plan.cert_path.clone(),
                    ca: "etcd CA",
                })
            }
        };
        let current = existing(&plan.cert_path).zip(existing(&plan.key_path));
        let kept = current
            .as_ref()
            .is_some_and(|(cert, key)| still_fits(plan, ca_pem, cert, key, now));
        let (cert_pem, key_pem) = match current {
            Some((cert, key)) if kept => (cert, key),
            _ => {
                let (cert, key) = issue(plan, issuer, now)?;
                (cert.into_bytes(), key.into_bytes())
            }
        };
        files.push(RenderedFile::new(&plan.cert_path, 0o644, cert_pem));
        files.push(RenderedFile::new(&plan.key_path, 0o600, key_pem));
        outcomes.push(CertOutcome {
            cert_path: plan.cert_path.clone(),
            kept,
        });
    }
    Ok((files, outcomes))
}

fn issue(
    plan: &CertPlan,
    issuer: &Issuer<'_, KeyPair>,
    now: OffsetDateTime,
) -> Result<(String, String), IssueCertError> {
    let err = |source| IssueCertError::Issue {
        path: plan.cert_path.clone(),
        source,
    };
    let key = KeyPair::generate().map_err(err)?;
    let mut params = CertificateParams::new(plan.dns_names.clone()).map_err(err)?;
    params
        .subject_alt_names
        .extend(plan.ips.iter().map(|ip| SanType::IpAddress(*ip)));
    params
        .distinguished_name
        .push(DnType::CommonName, plan.common_name.as_str());
    if let Some(org) = &plan.organization {
        params
            .distinguished_name
            .push(DnType::OrganizationName, org.as_str());
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    if plan.server {
        params
            .extended_key_usages
            .push(ExtendedKeyUsagePurpose::ServerAuth);
    }
    if plan.client {
        params
            .extended_key_usages
            .push(ExtendedKeyUsagePurpose::ClientAuth);
    }
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - Duration::hours(1);
    params.not_after = now + plan.validity;
    let cert = params.signed_by(&key, issuer).map_err(err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// What a certificate on the node says, as far as [`still_fits`] cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    pub common_name: String,
    pub organization: Option<String>,
    pub dns_names: BTreeSet<String>,
    pub ips: BTreeSet<IpAddr>,
    /// DER of the issuer's name.
    pub issuer_raw: Vec<u8>,
    pub subject_raw: Vec<u8>,
    pub public_key: Vec<u8>,
    pub not_after: i64,
    /// The issuer's key identifier (authority key identifier extension).
    pub authority_key_id: Option<Vec<u8>>,
    /// This certificate's key identifier (subject key identifier extension).
    pub subject_key_id: Option<Vec<u8>>,
}

/// Reads a PEM certificate; `None` when it does not parse.
pub fn cert_facts(pem: &[u8]) -> Option<CertFacts> {
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let cert = pem.parse_x509().ok()?;
    let first = |attrs: Vec<&x509_parser::x509::AttributeTypeAndValue>| {
        attrs
            .first()
            .and_then(|a| a.as_str().ok())
            .map(str::to_string)
    };
    let mut dns_names = BTreeSet::new();
    let mut ips = BTreeSet::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => {
                    dns_names.insert(d.to_string());
                }
                GeneralName::IPAddress(bytes) => match bytes.len() {
                    4 => {
                        let b: [u8; 4] = (*bytes).try_into().ok()?;
                        ips.insert(IpAddr::from(b));
                    }
                    16 => {
                        let b: [u8; 16] = (*bytes).try_into().ok()?;
                        ips.insert(IpAddr::from(b));
                    }
                    _ => return None,
                },
                _ => {}
            }
        }
    }
    let mut authority_key_id = None;
    let mut subject_key_id = None;
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(aki) => {
                authority_key_id = aki.key_identifier.as_ref().map(|k| k.0.to_vec());
            }
            ParsedExtension::SubjectKeyIdentifier(ski) => subject_key_id = Some(ski.0.to_vec()),
            _ => {}
        }
    }
    Some(CertFacts {
        authority_key_id,
        subject_key_id,
        common_name: first(cert.subject().iter_common_name().collect())?,
        organization: first(cert.subject().iter_organization().collect()),
        dns_names,
        ips,
        issuer_raw: cert.issuer().as_raw().to_vec(),
        subject_raw: cert.subject().as_raw().to_vec(),
        public_key: cert.public_key().subject_public_key.data.to_vec(),
        not_after: cert.validity().not_after.timestamp(),
    })
}

/// A certificate on the node still fits its plan: same subject and names, issued by this CA, for this key, and
/// valid for at least its [`CertPlan::renew_before`] more.
pub fn still_fits(
    plan: &CertPlan,
    ca_pem: &str,
    cert: &[u8],
    key: &[u8],
    now: OffsetDateTime,
) -> bool {
    let (Some(facts), Some(ca)) = (cert_facts(cert), cert_facts(ca_pem.as_bytes())) else {
        return false;
    };
    let Ok(key) = std::str::from_utf8(key)
        .map_err(|_| ())
        .and_then(|k| KeyPair::from_pem(k).map_err(|_| ()))
    else {
        return false;
    };
    facts.common_name == plan.common_name
        && facts.organization == plan.organization
        && facts.dns_names.iter().eq(plan.dns_names.iter())
        && facts.ips.iter().eq(plan.ips.iter())
        && facts.issuer_raw == ca.subject_raw
        // Same name is not same CA (a re-created cluster's CA has the same name): the key identifiers must match.
        && facts.authority_key_id.is_some()
        && facts.authority_key_id == ca.subject_key_id
        && facts.public_key == key.public_key_raw()
        && facts.not_after > (now + plan.renew_before).unix_timestamp()
}
