//! The discovery store (`s3://bucket[/prefix]`), the issuer URL it makes, and the keys of the two documents in it.

use std::fmt;

/// Key of the OIDC discovery document under the store's prefix.
pub const OPENID_CONFIGURATION: &str = ".well-known/openid-configuration";
/// Key of the JSON Web Key Set under the store's prefix (the path kube-apiserver serves it at, too).
pub const JWKS: &str = "openid/v1/jwks";
/// The longest prefix accepted: the issuer URL goes into every token and every trust policy's condition keys,
/// and IAM caps an OIDC provider's URL at 255 characters.
pub const MAX_PREFIX_CHARS: usize = 128;

/// A parsed `discoveryStore`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryStore {
    pub bucket: String,
    /// Without leading or trailing `/`; empty for the bucket's root.
    pub prefix: String,
}

/// Why a `discoveryStore` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryStoreError {
    #[error("{0:?} is not an S3 URL: use s3://BUCKET or s3://BUCKET/PREFIX")]
    NotS3(String),
    #[error(
        "{bucket:?} is not a bucket name this can use: 3-63 lowercase letters, digits and '-', starting and \
         ending with a letter or digit, and no '.' (the issuer is https://BUCKET.s3.REGION.amazonaws.com, and a \
         dotted bucket name breaks that host's TLS certificate)"
    )]
    Bucket { bucket: String },
    #[error(
        "prefix {prefix:?}: use at most {MAX_PREFIX_CHARS} characters of letters, digits, '-', '_' and '.', in \
         '/'-separated parts that are neither empty nor '.' or '..'"
    )]
    Prefix { prefix: String },
}

impl DiscoveryStore {
    /// Parses `s3://bucket[/prefix]` (a trailing `/` is ignored).
    pub fn parse(url: &str) -> Result<Self, DiscoveryStoreError> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| DiscoveryStoreError::NotS3(url.to_string()))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let prefix = prefix.trim_end_matches('/');
        if !valid_bucket(bucket) {
            return Err(DiscoveryStoreError::Bucket {
                bucket: bucket.to_string(),
            });
        }
        if !prefix.is_empty() && !valid_prefix(prefix) {
            return Err(DiscoveryStoreError::Prefix {
                prefix: prefix.to_string(),
            });
        }
        Ok(DiscoveryStore {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// The S3 key of a document (`OPENID_CONFIGURATION` or `JWKS`).
    pub fn key(&self, document: &str) -> String {
        if self.prefix.is_empty() {
            document.to_string()
        } else {
            format!("{}/{document}", self.prefix)
        }
    }

    /// The issuer: the public URL of the store's prefix. On AWS the bucket's virtual-hosted regional URL
    /// (`https://BUCKET.s3.REGION.amazonaws.com/PREFIX`, kops's too); with a custom S3 endpoint (the local
    /// cloud's `AWS_ENDPOINT_URL`) the endpoint's path-style URL, `ENDPOINT/BUCKET/PREFIX`, as the state store's
    /// client addresses it there. No trailing `/`: the issuer is compared as a string by every verifier.
    pub fn issuer(&self, region: &str, custom_endpoint: Option<&str>) -> String {
        let base = match custom_endpoint {
            Some(endpoint) => format!("{}/{}", endpoint.trim_end_matches('/'), self.bucket),
            None => format!("https://{}.s3.{region}.amazonaws.com", self.bucket),
        };
        if self.prefix.is_empty() {
            base
        } else {
            format!("{base}/{}", self.prefix)
        }
    }

    /// Whether this store's prefix holds, or lies inside, a state store's prefix (`s3://bucket/prefix` of the
    /// state store): publishing there would put public objects among the cluster's secrets.
    pub fn overlaps_state_store(&self, state_bucket: &str, state_prefix: &str) -> bool {
        if self.bucket != state_bucket {
            return false;
        }
        let state_prefix = state_prefix.trim_matches('/');
        let inside = |outer: &str, inner: &str| {
            outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}/"))
        };
        inside(state_prefix, &self.prefix) || inside(&self.prefix, state_prefix)
    }
}

impl fmt::Display for DiscoveryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

fn valid_bucket(bucket: &str) -> bool {
    let bytes = bucket.as_bytes();
    (3..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

fn valid_prefix(prefix: &str) -> bool {
    prefix.chars().count() <= MAX_PREFIX_CHARS
        && prefix.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
}

/// The JWKS URI of an issuer (kube-apiserver's `--service-account-jwks-uri`).
pub fn jwks_uri(issuer: &str) -> String {
    format!("{issuer}/{JWKS}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issuer_is_the_public_url_of_the_prefix() {
        let store = DiscoveryStore::parse("s3://oidc-demo/clusters/demo/").expect("parses");
        assert_eq!(store.prefix, "clusters/demo");
        assert_eq!(
            store.issuer("eu-west-1", None),
            "https://oidc-demo.s3.eu-west-1.amazonaws.com/clusters/demo"
        );
        assert_eq!(
            store.issuer("eu-west-1", Some("http://127.0.0.1:4566/")),
            "http://127.0.0.1:4566/oidc-demo/clusters/demo"
        );
        assert_eq!(store.key(JWKS), "clusters/demo/openid/v1/jwks");
        let root = DiscoveryStore::parse("s3://oidc-demo").expect("parses");
        assert_eq!(
            root.issuer("us-east-1", None),
            "https://oidc-demo.s3.us-east-1.amazonaws.com"
        );
        assert_eq!(
            root.key(OPENID_CONFIGURATION),
            ".well-known/openid-configuration"
        );
    }

    #[test]
    fn bad_stores_are_refused_with_the_rule() {
        for bad in [
            "https://bucket/x",
            "s3://Bucket",
            "s3://my.bucket",
            "s3://ab",
            "s3://bucket//x",
            "s3://bucket/a/../b",
            "s3://bucket/a b",
        ] {
            assert!(
                DiscoveryStore::parse(bad).is_err(),
                "{bad} should be refused"
            );
        }
    }

    #[test]
    fn overlap_with_the_state_store_is_found_both_ways() {
        let store = DiscoveryStore::parse("s3://shared/oidc").expect("parses");
        assert!(
            store.overlaps_state_store("shared", ""),
            "state store at the bucket's root"
        );
        assert!(
            store.overlaps_state_store("shared", "oidc/state"),
            "state store inside"
        );
        assert!(store.overlaps_state_store("shared", "oidc"), "same prefix");
        assert!(
            !store.overlaps_state_store("shared", "state"),
            "a sibling prefix"
        );
        assert!(
            !store.overlaps_state_store("shared", "oidcx"),
            "a prefix that only starts alike"
        );
        assert!(!store.overlaps_state_store("other", ""), "another bucket");
        let root = DiscoveryStore::parse("s3://shared").expect("parses");
        assert!(
            root.overlaps_state_store("shared", "state"),
            "discovery at the root holds the state store"
        );
    }
}
