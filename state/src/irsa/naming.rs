//! The IAM role of a service account, named as kops names it: `<name>.<namespace>.sa.<cluster>`, shortened to
//! IAM's 64 characters the way kops's `truncate.TruncateString` does (the first 57 characters, `-`, and the first
//! 6 characters of the lowercase base32hex FNV-1a hash of the whole name), so an imported kops cluster's roles
//! keep their names.

use crate::limits::IAM_MAX_ROLE_NAME_CHARS;

/// Characters of the hash kops appends to a shortened name.
const HASH_CHARS: usize = 6;

/// The role name of service account `namespace/name` in `cluster`.
pub fn service_account_role_name(name: &str, namespace: &str, cluster: &str) -> String {
    truncate(
        &format!("{name}.{namespace}.sa.{cluster}"),
        IAM_MAX_ROLE_NAME_CHARS,
    )
}

/// `s` if it fits in `max` bytes, else its head, `-` and a hash of the whole (every part is ASCII: names are
/// Kubernetes and DNS names).
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let hash = base32hex_lower(&fnv1a_32(s.as_bytes()).to_be_bytes());
    let hash = &hash[..HASH_CHARS.min(hash.len())];
    let head_len = max - hash.len() - 1;
    let head: String = s.chars().take(head_len).collect();
    format!("{head}-{hash}")
}

/// FNV-1a, 32 bits (Go's `hash/fnv.New32a`).
fn fnv1a_32(bytes: &[u8]) -> u32 {
    const OFFSET_BASIS: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;
    bytes.iter().fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(PRIME)
    })
}

/// RFC 4648 base32 with the extended hex alphabet, lowercase, without padding (Go's `base32.HexEncoding`
/// lowercased; kops keeps only the first characters, never the padding).
fn base32hex_lower(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
    let mut out = String::new();
    let mut buffer: u32 = 0;
    let mut bits = 0u32;
    for byte in bytes {
        buffer = (buffer << 8) | u32::from(*byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((buffer >> bits) & 0x1f) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(
            ALPHABET[((buffer << (5 - bits)) & 0x1f) as usize],
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_and_base32hex_match_their_references() {
        // FNV-1a 32 of "a" is 0xe40c292c (the algorithm's published test vector).
        assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
        // RFC 4648's base32hex test vectors, lowercased and unpadded.
        assert_eq!(base32hex_lower(b"f"), "co");
        assert_eq!(base32hex_lower(b"foobar"), "cpnmuoj1e8");
    }

    #[test]
    fn short_names_are_kept_and_long_ones_end_in_a_hash() {
        assert_eq!(
            service_account_role_name("app", "team-a", "demo.example.com"),
            "app.team-a.sa.demo.example.com"
        );
        let long = service_account_role_name(
            "a-service-account-with-a-long-name",
            "a-namespace",
            "a-cluster.example.com",
        );
        assert_eq!(long.len(), IAM_MAX_ROLE_NAME_CHARS);
        // The hash as Python's base64.b32hexencode gives it for the FNV-1a of the whole name, lowercased.
        assert_eq!(
            long,
            "a-service-account-with-a-long-name.a-namespace.sa.a-clust-d7d247"
        );
        let other = service_account_role_name(
            "a-service-account-with-a-long-name",
            "a-namespace",
            "a-cluster.example.org",
        );
        assert_ne!(
            long, other,
            "names that share their head differ by the hash"
        );
    }
}
