//! Where the API server's audit log is shipped (`spec.auditLog`, docs/audit.md), pure: the destination URL read
//! and checked, and what a control-plane node is told (`AuditShipping`, in its node spec).

use serde::{Deserialize, Serialize};

/// An S3 destination for audit chunks: `s3://bucket[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditDestination {
    pub bucket: String,
    /// Without leading or trailing slashes; may be empty.
    pub prefix: String,
}

/// Why a destination is refused (the message says what to write instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    #[error("{0:?} is not an S3 URL: write s3://BUCKET or s3://BUCKET/PREFIX")]
    NotS3(String),
    #[error(
        "{0:?} is not an S3 bucket name: 3-63 lowercase letters, digits, dots and hyphens, starting and ending \
         with a letter or digit"
    )]
    Bucket(String),
    #[error(
        "prefix {0:?} is not a key prefix Ballast writes under: use letters, digits and - _ . / only, no empty or \
         `.`/`..` parts, at most 512 characters"
    )]
    Prefix(String),
}

impl AuditDestination {
    /// Parses `s3://bucket[/prefix]`; a trailing slash is dropped.
    pub fn parse(url: &str) -> Result<Self, DestinationError> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| DestinationError::NotS3(url.to_string()))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let prefix = prefix.trim_end_matches('/');
        if !bucket_name_ok(bucket) {
            return Err(DestinationError::Bucket(bucket.to_string()));
        }
        if !prefix.is_empty() && !prefix_ok(prefix) {
            return Err(DestinationError::Prefix(prefix.to_string()));
        }
        Ok(AuditDestination {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// The destination as a store URL (`s3://bucket[/prefix]`), for `ballast_store::StateStore::open`.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    /// A key of the destination's bucket, from a key relative to the destination (`<cluster>/audit/...`).
    pub fn bucket_key(&self, relative: &str) -> String {
        if self.prefix.is_empty() {
            relative.to_string()
        } else {
            format!("{}/{relative}", self.prefix)
        }
    }
}

fn bucket_name_ok(bucket: &str) -> bool {
    let bytes = bucket.as_bytes();
    (3..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'.' || *b == b'-')
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && !bucket.contains("..")
}

fn prefix_ok(prefix: &str) -> bool {
    prefix.len() <= 512
        && prefix.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        })
}

/// What a control-plane node is told about shipping its audit log (the node spec's
/// `controlPlane.auditShipping`): every value resolved from the completed spec, nothing left to default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditShipping {
    /// The store URL chunks are written under (`s3://bucket[/prefix]`, or the state store's URL, which may be a
    /// `file://` store where no S3 is used); keys below it are `ballast_state::layout`'s `audit_chunk`.
    pub destination: String,
    /// SSE-KMS with this key; SSE-S3 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// The longest a line waits on the node, in the grammar of `ballast_state::duration`.
    pub chunk_interval: String,
    pub chunk_max_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse_and_refuse_what_is_not_a_bucket_and_prefix() {
        let d = AuditDestination::parse("s3://audit-logs/team/a/").expect("valid");
        assert_eq!(
            (d.bucket.as_str(), d.prefix.as_str()),
            ("audit-logs", "team/a")
        );
        assert_eq!(d.url(), "s3://audit-logs/team/a");
        assert_eq!(d.bucket_key("c/audit/i-1/x"), "team/a/c/audit/i-1/x");
        let bare = AuditDestination::parse("s3://audit-logs").expect("valid");
        assert_eq!(bare.bucket_key("c/audit/x"), "c/audit/x");
        assert!(matches!(
            AuditDestination::parse("https://audit-logs"),
            Err(DestinationError::NotS3(_))
        ));
        assert!(matches!(
            AuditDestination::parse("s3://Audit_Logs"),
            Err(DestinationError::Bucket(_))
        ));
        assert!(matches!(
            AuditDestination::parse("s3://ab"),
            Err(DestinationError::Bucket(_))
        ));
        assert!(matches!(
            AuditDestination::parse("s3://audit-logs/a/../b"),
            Err(DestinationError::Prefix(_))
        ));
        assert!(matches!(
            AuditDestination::parse("s3://audit-logs/a//b"),
            Err(DestinationError::Prefix(_))
        ));
    }
}
