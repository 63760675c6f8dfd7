//! An operator's SSH public key, checked before `ballast create secret sshpublickey` stores it (pure).
//!
//! Accepted: one OpenSSH public-key line (`TYPE BASE64 [COMMENT]`, as in `~/.ssh/id_ed25519.pub`) of type
//! `ssh-ed25519`, `ecdsa-sha2-nistp256|384|521` or `ssh-rsa` (at least 2048 bits), whose base64 decodes to a key
//! blob of that same type and shape. A private key given by mistake is refused without a word of its content.

use base64::Engine;
use sha2::{Digest, Sha256};

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
        let bits = check_blob(key_type, &blob)?;
        Ok(SshPublicKey {
            key_type: key_type.to_string(),
            blob,
            comment,
            bits,
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
        let digest = Sha256::digest(&self.blob);
        format!(
            "SHA256:{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
        )
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

/// Whether `name` may name a stored key: 1 to 63 of `a-z 0-9 - _ .`, starting with a letter or digit.
pub fn check_name(name: &str) -> Result<(), String> {
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
        Err(format!(
            "{name:?} is not a key name: use 1 to 63 of a-z, 0-9, '-', '_', '.', starting with a letter or digit \
             (default: {DEFAULT_NAME})"
        ))
    }
}

fn looks_private(text: &str) -> bool {
    text.contains("PRIVATE KEY")
        || text.contains("PuTTY-User-Key-File")
        || text.contains("SSH2 ENCRYPTED PRIVATE KEY")
}

/// A reader of the SSH wire format's length-prefixed strings.
struct Wire<'a> {
    rest: &'a [u8],
}

impl<'a> Wire<'a> {
    fn string(&mut self) -> Option<&'a [u8]> {
        let (len, rest) = self.rest.split_first_chunk::<4>()?;
        let len = u32::from_be_bytes(*len) as usize;
        if rest.len() < len {
            return None;
        }
        let (value, rest) = rest.split_at(len);
        self.rest = rest;
        Some(value)
    }
}

/// Checks the blob's inner type and shape; returns the key's size in bits.
fn check_blob(key_type: &str, blob: &[u8]) -> Result<usize, SshKeyError> {
    let damaged = |problem: &str| SshKeyError::Blob {
        key_type: key_type.to_string(),
        problem: problem.to_string(),
    };
    let mut wire = Wire { rest: blob };
    let inner = wire
        .string()
        .ok_or_else(|| damaged("it is too short to hold its type"))?;
    if inner != key_type.as_bytes() {
        return Err(SshKeyError::TypeMismatch {
            outer: key_type.to_string(),
            inner: String::from_utf8_lossy(inner).chars().take(40).collect(),
        });
    }
    let bits = match key_type {
        "ssh-ed25519" => {
            let key = wire.string().ok_or_else(|| damaged("no public key"))?;
            if key.len() != 32 {
                return Err(damaged("an Ed25519 public key is 32 bytes"));
            }
            256
        }
        "ssh-rsa" => {
            let e = wire.string().ok_or_else(|| damaged("no exponent"))?;
            let n = wire.string().ok_or_else(|| damaged("no modulus"))?;
            let e_bits = mpint_bits(e);
            if e_bits < 2 || e.last().is_none_or(|b| b % 2 == 0) {
                return Err(damaged("the exponent is not an odd number above 1"));
            }
            let bits = mpint_bits(n);
            if bits < MIN_RSA_BITS {
                return Err(SshKeyError::RsaTooShort(bits));
            }
            if bits > MAX_RSA_BITS {
                return Err(SshKeyError::RsaTooLong(bits));
            }
            bits
        }
        ecdsa => {
            let (curve, bits, point_len) = match ecdsa {
                "ecdsa-sha2-nistp256" => ("nistp256", 256, 65),
                "ecdsa-sha2-nistp384" => ("nistp384", 384, 97),
                _ => ("nistp521", 521, 133),
            };
            let named = wire.string().ok_or_else(|| damaged("no curve name"))?;
            if named != curve.as_bytes() {
                return Err(damaged(&format!("its curve is not {curve}")));
            }
            let point = wire.string().ok_or_else(|| damaged("no public point"))?;
            if point.len() != point_len || point.first() != Some(&4) {
                return Err(damaged(&format!(
                    "a {curve} public point is {point_len} bytes, uncompressed"
                )));
            }
            bits
        }
    };
    if !wire.rest.is_empty() {
        return Err(damaged("bytes follow the key"));
    }
    Ok(bits)
}

/// The bit length of an SSH mpint (big-endian, a leading zero byte for a positive number's high bit).
fn mpint_bits(bytes: &[u8]) -> usize {
    let digits: &[u8] = match bytes.iter().position(|b| *b != 0) {
        Some(first) => &bytes[first..],
        None => return 0,
    };
    (digits.len() - 1) * 8 + (8 - digits[0].leading_zeros() as usize)
}

#[cfg(test)]
mod tests;
