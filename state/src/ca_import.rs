//! An operator's CA, checked before anything is stored (`ballast create secret keypair`, docs/keys.md). Pure: the
//! files' text and the time in, the normalized material out, or what is wrong with which file and what to do.
//!
//! Checked: the certificate file holds exactly one PEM certificate that parses; the key file holds one private
//! key that nodeup can sign with (PKCS#8, SEC1 or PKCS#1; ECDSA P-256/P-384, Ed25519 or RSA); the key is the
//! certificate's; the certificate is a CA (basicConstraints CA:true, keyUsage keyCertSign); and it is valid now and
//! for at least [`MIN_REMAINING_DAYS`] more days (the certificates it issues are valid for up to 30 days, and a
//! rotation takes three rolls). Errors never show any part of the key.

use rcgen::PublicKeyData as _;

use crate::key_material::fingerprint;
use crate::timestamp::unix_rfc3339;

/// The least validity an imported CA must have left.
pub const MIN_REMAINING_DAYS: i64 = 90;
/// How far in the future a CA's validity may start (clocks differ).
const MAX_NOT_BEFORE_SKEW_SECS: i64 = 3600;

/// A CA ready to be stored: certificate and key re-encoded as PEM (no text around them), its id and dates.
pub struct ImportedCa {
    pub cert_pem: String,
    pub key_pem: String,
    pub id: String,
    pub not_before: String,
    pub not_after: String,
    pub subject: String,
}

// Never print the key.
impl std::fmt::Debug for ImportedCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedCa")
            .field("id", &self.id)
            .field("subject", &self.subject)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// What is wrong with an operator's CA: the file at fault (as the operator named it), the problem, what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {problem}; {fix}")]
pub struct CaImportError {
    pub file: String,
    pub problem: String,
    pub fix: String,
}

fn refuse(file: &str, problem: impl Into<String>, fix: &str) -> CaImportError {
    CaImportError {
        file: file.to_string(),
        problem: problem.into(),
        fix: fix.to_string(),
    }
}

const CERT_FIX: &str = "give the CA's own certificate, PEM encoded (-----BEGIN CERTIFICATE-----)";
const KEY_FIX: &str = "give the CA's private key, unencrypted PEM (-----BEGIN PRIVATE KEY-----, EC PRIVATE KEY or RSA \
                       PRIVATE KEY; `openssl pkcs8 -topk8 -nocrypt` converts others)";

/// Checks `cert_text` (from `cert_file`) and `key_text` (from `key_file`) as a CA to import at `now_unix`.
pub fn check_ca(
    cert_file: &str,
    cert_text: &str,
    key_file: &str,
    key_text: &str,
    now_unix: i64,
) -> Result<ImportedCa, CaImportError> {
    // The certificate: exactly one PEM certificate.
    let mut certs = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(cert_text.as_bytes()) {
        let block =
            block.map_err(|e| refuse(cert_file, format!("it is not valid PEM ({e})"), CERT_FIX))?;
        if block.label.contains("PRIVATE KEY") {
            return Err(refuse(
                cert_file,
                "it holds a private key, not a certificate",
                "pass the certificate with --cert and the key with --key",
            ));
        }
        if block.label == "CERTIFICATE" {
            certs.push(block.contents);
        }
    }
    let der = match certs.as_slice() {
        [one] => one.clone(),
        [] => return Err(refuse(cert_file, "it holds no PEM certificate", CERT_FIX)),
        more => {
            return Err(refuse(
                cert_file,
                format!("it holds {} certificates", more.len()),
                "give the CA's own certificate only, not a chain or bundle",
            ))
        }
    };
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| {
        refuse(
            cert_file,
            format!("its certificate is not valid X.509 ({e})"),
            CERT_FIX,
        )
    })?;

    // A CA that may sign certificates.
    let is_ca = cert
        .basic_constraints()
        .ok()
        .flatten()
        .is_some_and(|bc| bc.value.ca);
    if !is_ca {
        return Err(refuse(
            cert_file,
            format!(
                "{} is not a CA certificate (it lacks basicConstraints CA:TRUE)",
                cert.subject()
            ),
            "give a CA certificate: one made with `openssl req -x509 ... -addext basicConstraints=critical,CA:TRUE \
             -addext keyUsage=critical,keyCertSign,cRLSign`",
        ));
    }
    let signs_certificates = cert
        .key_usage()
        .ok()
        .flatten()
        .is_some_and(|ku| ku.value.key_cert_sign());
    if !signs_certificates {
        return Err(refuse(
            cert_file,
            format!(
                "{} may not sign certificates (its keyUsage lacks keyCertSign)",
                cert.subject()
            ),
            "give a CA certificate whose keyUsage includes keyCertSign",
        ));
    }

    // Valid now, and long enough.
    let validity = cert.validity();
    let (not_before, not_after) = (
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    );
    if not_after <= now_unix {
        return Err(refuse(
            cert_file,
            format!("the certificate expired at {}", unix_rfc3339(not_after)),
            "give a CA that is still valid",
        ));
    }
    if not_before > now_unix + MAX_NOT_BEFORE_SKEW_SECS {
        return Err(refuse(
            cert_file,
            format!(
                "the certificate is not valid before {}",
                unix_rfc3339(not_before)
            ),
            "give a CA that is valid now (check the clock of the machine that made it)",
        ));
    }
    if not_after - now_unix < MIN_REMAINING_DAYS * 86_400 {
        return Err(refuse(
            cert_file,
            format!(
                "the certificate expires at {}, less than {MIN_REMAINING_DAYS} days from now",
                unix_rfc3339(not_after)
            ),
            "give a CA valid for longer: a rotation takes three rolls, and the certificates it issues are valid for \
             up to 30 days",
        ));
    }

    // The key: one the nodes can sign with, and the certificate's.
    let key = rcgen::KeyPair::from_pem(key_text).map_err(|_| {
        let problem = if key_text.contains("ENCRYPTED") {
            "the private key is encrypted"
        } else if key_text.contains("-----BEGIN CERTIFICATE-----") {
            "it holds a certificate, not a private key"
        } else {
            "it is not a private key that can sign (unencrypted PKCS#8, SEC1 or PKCS#1 PEM; ECDSA P-256/P-384, \
             Ed25519 or RSA)"
        };
        refuse(key_file, problem, KEY_FIX)
    })?;
    if key.der_bytes() != cert.public_key().subject_public_key.data.as_ref() {
        return Err(refuse(
            key_file,
            format!(
                "this private key does not match the certificate in {cert_file} ({})",
                cert.subject()
            ),
            "give the key the certificate was made for",
        ));
    }
    let subject = cert.subject().to_string();
    let cert_pem = pem_certificate(&der);
    // The issuer nodeup builds must accept the pair (rcgen reads the certificate's parameters).
    let key_pem = key.serialize_pem();
    rcgen::Issuer::from_ca_cert_pem(&cert_pem, key).map_err(|e| {
        refuse(
            cert_file,
            format!("the certificate cannot be used to issue certificates ({e})"),
            CERT_FIX,
        )
    })?;
    Ok(ImportedCa {
        id: fingerprint(cert_pem.as_bytes()),
        cert_pem,
        key_pem,
        not_before: unix_rfc3339(not_before),
        not_after: unix_rfc3339(not_after),
        subject,
    })
}

/// DER as a PEM certificate, 64 characters a line, `\n` line endings (the `pem` crate rcgen already builds; its
/// default is `\r\n`, and the certificate's id is the hash of this text).
fn pem_certificate(der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new("CERTIFICATE", der),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

#[cfg(test)]
#[path = "ca_import_tests.rs"]
mod tests;
