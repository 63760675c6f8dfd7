//! An operator's SSH public key, checked before `ballast create secret sshpublickey` stores it (pure).
//!
//! Accepted: one OpenSSH public-key line (`TYPE BASE64 [COMMENT]`, as in `~/.ssh/id_ed25519.pub`) of type
//! `ssh-ed25519`, `ecdsa-sha2-nistp256|384|521` or `ssh-rsa` (at least 2048 bits), whose base64 decodes to a key
//! blob of that same type and shape. A private key given by mistake is refused without a word of its content.
//!
//! The line's fields and the policy (types, sizes, no options, one key) are checked here; the key blob is decoded
//! by the `ssh-key` crate.

use base64::Engine;

/// The largest file read as a public key: an RSA key of 16384 bits is about 2.8 KiB.
pub const MAX_FILE_BYTES: u64 = 16 * 1024;

/// The RSA modulus sizes accepted, in bits.
pub const MIN_RSA_BITS: usize = 2048;
pub const MAX_RSA_BITS: usize = 16384;

/// A key name (`create secret sshpublickey NAME`): the object `ssh/<NAME>.pub`.
pub const DEFAULT_NAME: &str = "admin";

/// The key types accepted.
pub const TYPES: [&str; 5] = [
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
];

/// A checked SSH public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshPublicKey {
    key_type: String,
    blob: Vec<u8>,
    comment: Option<String>,
    bits: usize,
    fingerprint: String,
}

/// Why a file is not an SSH public key Ballast accepts. The messages never quote the file's content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshKeyError {
    #[error("empty: give the public key file (e.g. ~/.ssh/id_ed25519.pub)")]
    Empty,
    #[error(
        "this is a private key, not a public one: give the .pub file beside it (e.g. ~/.ssh/id_ed25519.pub); \
         never hand a private key to Ballast"
    )]
    PrivateKey,
    #[error("holds {0} keys: give one key per name (store others under other names)")]
    SeveralKeys(usize),
    #[error(
        "not an OpenSSH public key line (TYPE BASE64 [COMMENT]) of a type Ballast accepts (ssh-ed25519, \
         ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521, ssh-rsa): {0}"
    )]
    Malformed(String),
    #[error("the key is not valid base64: {0}")]
    Base64(String),
    #[error(
        "the key's blob says it is {inner:?} but the line says {outer:?}: the file is damaged"
    )]
    TypeMismatch { outer: String, inner: String },
    #[error("the {key_type} key blob is damaged: {problem}")]
    Blob { key_type: String, problem: String },
    #[error(
        "an RSA key of {0} bits is too short: give one of at least {MIN_RSA_BITS} bits (better: \
         `ssh-keygen -t ed25519`)"
    )]
    RsaTooShort(usize),
    #[error("an RSA key of {0} bits is larger than the {MAX_RSA_BITS} bits Ballast accepts")]
    RsaTooLong(usize),
    #[error("larger than {MAX_FILE_BYTES} bytes, which no public key is")]
    TooLarge,
}

impl SshPublicKey {
    /// Checks a public key file's text.
    pub fn parse(text: &str) -> Result<SshPublicKey, SshKeyError> {
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(SshKeyError::TooLarge);
        }
        if looks_private(text) {
            return Err(SshKeyError::PrivateKey);
        }
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let line = match lines.as_slice() {
            [] => return Err(SshKeyError::Empty),
            [line] => *line,
            more => return Err(SshKeyError::SeveralKeys(more.len())),
        };
        let mut fields = line.splitn(3, [' ', '\t']);
        let key_type = fields.next().unwrap_or_default();
        if !TYPES.contains(&key_type) {
            return Err(SshKeyError::Malformed(if key_type.contains('=') {
                "authorized_keys options before the key type are not accepted".to_string()
            } else {
                "the first field is not a key type Ballast accepts".to_string()
            }));
        }
        let encoded = fields.next().unwrap_or_default().trim();
        if encoded.is_empty() {
            return Err(SshKeyError::Malformed("no key after the type".to_string()));
        }
        let comment = fields
            .next()
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string);
        if comment
            .as_deref()
            .is_some_and(|c| c.chars().any(char::is_control))
        {
            return Err(SshKeyError::Malformed(
                "the comment holds control characters".to_string(),
            ));
        }
        let blob = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|e| SshKeyError::Base64(e.to_string()))?;
        let (bits, fingerprint) = check_blob(key_type, &blob)?;
        Ok(SshPublicKey {
            key_type: key_type.to_string(),
            blob,
            comment,
            bits,
            fingerprint,
        })
    }

    pub fn key_type(&self) -> &str {
        &self.key_type
    }

    /// The key's size in bits, as `ssh-keygen -l` prints it.
    pub fn bits(&self) -> usize {
        self.bits
    }

    /// `SHA256:<base64 of the blob's sha256, unpadded>`, as `ssh-keygen -l` prints it.
    pub fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }

    /// Whether `other` is the same key (comments aside).
    pub fn same_key(&self, other: &SshPublicKey) -> bool {
        self.key_type == other.key_type && self.blob == other.blob
    }

    /// The key as one `authorized_keys` line (no newline): type, base64, comment.
    pub fn line(&self) -> String {
        let encoded = base64::engine::general_purpose::STANDARD.encode(&self.blob);
        match &self.comment {
            Some(comment) => format!("{} {encoded} {comment}", self.key_type),
            None => format!("{} {encoded}", self.key_type),
        }
    }
}

/// A name that cannot name a stored SSH key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{name:?} is not a key name: use 1 to 63 of a-z, 0-9, '-', '_', '.', starting with a letter or digit \
     (default: {DEFAULT_NAME})"
)]
pub struct SshKeyNameError {
    pub name: String,
}

/// Whether `name` may name a stored key: 1 to 63 of `a-z 0-9 - _ .`, starting with a letter or digit.
pub fn check_name(name: &str) -> Result<(), SshKeyNameError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(SshKeyNameError {
            name: name.to_string(),
        })
    }
}

fn looks_private(text: &str) -> bool {
    text.contains("PRIVATE KEY")
        || text.contains("PuTTY-User-Key-File")
        || text.contains("SSH2 ENCRYPTED PRIVATE KEY")
}

/// Decodes the blob with the `ssh-key` crate (length prefixes, the Ed25519 key's 32 bytes, the ECDSA curve name
/// and a point of its size, RSA's two integers, nothing after the key), then holds it to what Ballast accepts: the
/// line's type, an uncompressed ECDSA point (what OpenSSH writes), an odd RSA exponent above 1, an RSA modulus of
/// [`MIN_RSA_BITS`] to [`MAX_RSA_BITS`]. Returns the key's size in bits and its `SHA256:` fingerprint.
fn check_blob(key_type: &str, blob: &[u8]) -> Result<(usize, String), SshKeyError> {
    use ssh_key::public::KeyData;
    use ssh_key::EcdsaCurve;

    let damaged = |problem: String| SshKeyError::Blob {
        key_type: key_type.to_string(),
        problem,
    };
    let key = ssh_key::PublicKey::from_bytes(blob)
        .map_err(|e| damaged(format!("it does not decode as an SSH public key ({e})")))?;
    let inner = key.algorithm();
    if inner.as_str() != key_type {
        return Err(SshKeyError::TypeMismatch {
            outer: key_type.to_string(),
            inner: inner.as_str().chars().take(40).collect(),
        });
    }
    let bits = match key.key_data() {
        KeyData::Ed25519(_) => 256,
        KeyData::Rsa(rsa) => {
            let e = rsa
                .e
                .as_positive_bytes()
                .ok_or_else(|| damaged("the exponent is negative".to_string()))?;
            if mpint_bits(e) < 2 || e.last().is_none_or(|b| b % 2 == 0) {
                return Err(damaged(
                    "the exponent is not an odd number above 1".to_string(),
                ));
            }
            let n = rsa
                .n
                .as_positive_bytes()
                .ok_or_else(|| damaged("the modulus is negative".to_string()))?;
            let bits = mpint_bits(n);
            if bits < MIN_RSA_BITS {
                return Err(SshKeyError::RsaTooShort(bits));
            }
            if bits > MAX_RSA_BITS {
                return Err(SshKeyError::RsaTooLong(bits));
            }
            bits
        }
        KeyData::Ecdsa(ecdsa) => {
            let (curve, bits) = match ecdsa.curve() {
                EcdsaCurve::NistP256 => ("nistp256", 256),
                EcdsaCurve::NistP384 => ("nistp384", 384),
                EcdsaCurve::NistP521 => ("nistp521", 521),
            };
            // SEC1 also allows a compressed point and the identity; OpenSSH writes neither.
            if ecdsa.as_sec1_bytes().first() != Some(&4) {
                return Err(damaged(format!(
                    "a {curve} public point is uncompressed (SEC1 tag 4)"
                )));
            }
            bits
        }
        // The line's type is one of TYPES and the blob's equals it, so no other kind of key arrives here.
        _ => {
            return Err(SshKeyError::Malformed(
                "the first field is not a key type Ballast accepts".to_string(),
            ))
        }
    };
    let fingerprint = key.fingerprint(ssh_key::HashAlg::Sha256).to_string();
    Ok((bits, fingerprint))
}

/// The bit length of a positive big-endian integer (leading zero bytes aside).
fn mpint_bits(bytes: &[u8]) -> usize {
    let digits: &[u8] = match bytes.iter().position(|b| *b != 0) {
        Some(first) => &bytes[first..],
        None => return 0,
    };
    (digits.len() - 1) * 8 + (8 - digits[0].leading_zeros() as usize)
}

#[cfg(test)]
mod tests;
