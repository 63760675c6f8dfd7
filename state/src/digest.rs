//! The one digest the state names things by.

use sha2::{Digest, Sha256};

/// The sha256 of `data`, hex: the file store's version, a node spec's hash in user-data, a key's fingerprint.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}
