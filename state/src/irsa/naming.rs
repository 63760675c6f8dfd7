//! The IAM role of a service account: `<name>.<namespace>.sa.<cluster>`, kops's name, kept as it is when it fits
//! in IAM's 64 characters. A longer one is shortened to its first 37 characters, `-`, and 26 characters (130
//! bits) of the lowercase base32hex sha256 of the whole name, so that no one can make two service accounts share
//! a role on purpose. kops shortens with 6 characters of a 32-bit FNV-1a hash ([`kops_role_name`]), which anyone
//! can collide in a second: a kops cluster's shortened role names change on import (`docs/irsa.md`, "Role
//! names"). Validation refuses two entries that still share a name, whatever the cause (`super::validate`).

use sha2::{Digest, Sha256};

use crate::limits::IAM_MAX_ROLE_NAME_CHARS;

/// Characters of the hash at the end of a shortened name: 130 bits of sha256, out of reach of a collision search.
pub const HASH_CHARS: usize = 26;
/// Characters of the FNV-1a hash kops appends to a shortened name.
const KOPS_HASH_CHARS: usize = 6;

/// The role name of service account `namespace/name` in `cluster`.
pub fn service_account_role_name(name: &str, namespace: &str, cluster: &str) -> String {
    let full = full_name(name, namespace, cluster);
    if full.len() <= IAM_MAX_ROLE_NAME_CHARS {
        return full;
    }
    let hash = base32hex_lower(&Sha256::digest(full.as_bytes()));
    shortened(&full, &hash[..HASH_CHARS])
}

/// The name kops gives the same role (`truncate.TruncateString`: the first 57 characters, `-`, and 6 characters
/// of the base32hex FNV-1a hash of the whole name): what an imported kops cluster's role was called. Equal to
/// [`service_account_role_name`] when the name needs no shortening.
pub fn kops_role_name(name: &str, namespace: &str, cluster: &str) -> String {
    let full = full_name(name, namespace, cluster);
    if full.len() <= IAM_MAX_ROLE_NAME_CHARS {
        return full;
    }
    let hash = base32hex_lower(&fnv1a_32(full.as_bytes()).to_be_bytes());
    shortened(&full, &hash[..KOPS_HASH_CHARS])
}

fn full_name(name: &str, namespace: &str, cluster: &str) -> String {
    format!("{name}.{namespace}.sa.{cluster}")
}

/// The head of `full` (every part is ASCII: names are Kubernetes and DNS names), `-` and `hash`, in IAM's limit.
fn shortened(full: &str, hash: &str) -> String {
    let head_len = IAM_MAX_ROLE_NAME_CHARS - hash.len() - 1;
    let head: String = full.chars().take(head_len).collect();
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
/// lowercased; only the first characters are kept, never the padding).
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
pub(crate) mod tests {
    use super::*;

    #[test]
    fn fnv_and_base32hex_match_their_references() {
        // FNV-1a 32 of "a" is 0xe40c292c (the algorithm's published test vector).
        assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
        // RFC 4648's base32hex test vectors, lowercased and unpadded.
        assert_eq!(base32hex_lower(b"f"), "co");
        assert_eq!(base32hex_lower(b"foobar"), "cpnmuoj1e8");
    }

    /// Two service accounts whose kops role names collide: the same first 57 characters of the whole name, and
    /// the same 6 characters of FNV-1a (found by brute force over the trailing number, about 100,000 tries).
    pub(crate) const FNV_COLLIDING: [&str; 2] = [
        "a-service-account-whose-name-is-long-enough-to-be-shortened-78870",
        "a-service-account-whose-name-is-long-enough-to-be-shortened-102684",
    ];
    pub(crate) const FNV_COLLIDING_NAMESPACE: &str = "team-a";
    pub(crate) const FNV_COLLIDING_CLUSTER: &str = "demo.example.com";

    #[test]
    fn short_names_are_kept_and_long_ones_end_in_130_bits_of_sha256() {
        assert_eq!(
            service_account_role_name("app", "team-a", "demo.example.com"),
            "app.team-a.sa.demo.example.com"
        );
        assert_eq!(
            kops_role_name("app", "team-a", "demo.example.com"),
            "app.team-a.sa.demo.example.com",
            "a name that fits is kops's"
        );
        let long = service_account_role_name(
            "a-service-account-with-a-long-name",
            "a-namespace",
            "a-cluster.example.com",
        );
        assert_eq!(long.len(), IAM_MAX_ROLE_NAME_CHARS);
        // As Python's base64.b32hexencode(hashlib.sha256(whole name).digest()) gives it, lowercased, 26 characters.
        assert_eq!(
            long,
            "a-service-account-with-a-long-name.a--j52vsd0q3olre9qe5a0alglk2s"
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

    #[test]
    fn kops_names_are_kops_and_collide_where_ballasts_do_not() {
        // The hash as Python's base64.b32hexencode gives it for the FNV-1a of the whole name, lowercased.
        assert_eq!(
            kops_role_name(
                "a-service-account-with-a-long-name",
                "a-namespace",
                "a-cluster.example.com",
            ),
            "a-service-account-with-a-long-name.a-namespace.sa.a-clust-d7d247"
        );
        let [a, b] = FNV_COLLIDING;
        let kops = |name| kops_role_name(name, FNV_COLLIDING_NAMESPACE, FNV_COLLIDING_CLUSTER);
        assert_eq!(kops(a), kops(b), "kops gives the pair one role");
        let ballast =
            |name| service_account_role_name(name, FNV_COLLIDING_NAMESPACE, FNV_COLLIDING_CLUSTER);
        assert_ne!(ballast(a), ballast(b), "Ballast gives each its own");
        assert_eq!(ballast(a).len(), IAM_MAX_ROLE_NAME_CHARS);
    }
}
