//! The state bucket's posture: whether the S3 bucket that holds every cluster's CA keys is private, keeps
//! earlier versions of its objects and encrypts by default. Ballast does not create the bucket (the operator
//! does, as with kops), so `create cluster` warns and `validate cluster` fails a check for each setting that is
//! off, naming the bucket, the setting and the `aws s3api` command that turns it on.
//!
//! Reading is I/O ([`S3Store::posture`]); judging ([`BucketPosture::problems`]) and the advice on mending a
//! damaged object ([`mend_advice`]) are pure.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::types::BucketVersioningStatus;

use super::{S3Store, StoreError};

/// The four settings of an S3 public-access block, as read from the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PublicAccessBlock {
    pub block_public_acls: bool,
    pub ignore_public_acls: bool,
    pub block_public_policy: bool,
    pub restrict_public_buckets: bool,
}

impl PublicAccessBlock {
    /// The names of the settings that are off, as the S3 API spells them.
    fn off(&self) -> Vec<&'static str> {
        [
            (self.block_public_acls, "BlockPublicAcls"),
            (self.ignore_public_acls, "IgnorePublicAcls"),
            (self.block_public_policy, "BlockPublicPolicy"),
            (self.restrict_public_buckets, "RestrictPublicBuckets"),
        ]
        .into_iter()
        .filter(|(on, _)| !on)
        .map(|(_, name)| name)
        .collect()
    }
}

/// Whether the bucket keeps earlier versions of its objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Versioning {
    Enabled,
    /// Versioning was on once and is suspended: versions made before remain, new writes make none.
    Suspended,
    /// Never turned on.
    Off,
}

/// What was read of the bucket's settings. `None`: the bucket has no such configuration at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketPosture {
    pub bucket: String,
    pub public_access_block: Option<PublicAccessBlock>,
    pub versioning: Versioning,
    /// The default encryption's algorithm (`AES256`, `aws:kms`, `aws:kms:dsse`).
    pub default_encryption: Option<String>,
}

/// One setting of the bucket that is not as it should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostureProblem {
    /// `public-access block`, `versioning`, `default encryption`.
    pub setting: &'static str,
    /// What is wrong, in words.
    pub found: String,
    /// The command that turns it on.
    pub fix: String,
}

impl std::fmt::Display for PostureProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}; fix: {}", self.setting, self.found, self.fix)
    }
}

impl BucketPosture {
    /// Every setting that is off, with the command that fixes it (`kms_key`: the state store's KMS key, used as
    /// the bucket's default in the fix when set). Empty when the bucket is private, versioned and encrypted.
    pub fn problems(&self, kms_key: Option<&str>) -> Vec<PostureProblem> {
        let bucket = &self.bucket;
        let mut problems = Vec::new();
        let off = self
            .public_access_block
            .map_or_else(|| PublicAccessBlock::default().off(), |b| b.off());
        if !off.is_empty() {
            let found = if self.public_access_block.is_none() {
                format!("bucket {bucket} has no public-access block: a bucket policy or ACL could make its CA keys public")
            } else {
                format!(
                    "bucket {bucket}'s public-access block has {} off",
                    off.join(", ")
                )
            };
            problems.push(PostureProblem {
                setting: "public-access block",
                found,
                fix: format!(
                    "aws s3api put-public-access-block --bucket {bucket} --public-access-block-configuration \
                     BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=true"
                ),
            });
        }
        if self.versioning != Versioning::Enabled {
            let state = match self.versioning {
                Versioning::Suspended => "suspended",
                _ => "off",
            };
            problems.push(PostureProblem {
                setting: "versioning",
                found: format!(
                    "bucket {bucket} has versioning {state}: an overwritten or deleted spec, key or backup cannot be \
                     recovered"
                ),
                fix: format!(
                    "aws s3api put-bucket-versioning --bucket {bucket} --versioning-configuration Status=Enabled"
                ),
            });
        }
        if self.default_encryption.is_none() {
            let rule = match kms_key {
                Some(key) => format!(
                    r#"{{"SSEAlgorithm":"aws:kms","KMSMasterKeyID":"{key}"}},"BucketKeyEnabled":true"#
                ),
                None => r#"{"SSEAlgorithm":"AES256"}"#.to_string(),
            };
            problems.push(PostureProblem {
                setting: "default encryption",
                found: format!(
                    "bucket {bucket} has no default encryption: objects written by other tools are stored unencrypted"
                ),
                fix: format!(
                    "aws s3api put-bucket-encryption --bucket {bucket} --server-side-encryption-configuration \
                     '{{\"Rules\":[{{\"ApplyServerSideEncryptionByDefault\":{rule}}}]}}'"
                ),
            });
        }
        problems
    }
}

/// What an operator can do about a damaged object in the store at `store_url`, by whether its bucket keeps
/// versions (`versioning`: `Err` when that could not be read, with the reason; ignored for a file store).
pub fn mend_advice(store_url: &str, versioning: Result<Versioning, String>) -> String {
    let Some(rest) = store_url.strip_prefix("s3://") else {
        return format!(
            "a file store keeps no earlier versions: restore the object from a backup of {store_url}, or write it \
             again from the spec file you created the cluster from"
        );
    };
    let bucket = rest.split('/').next().unwrap_or(rest);
    match versioning {
        Ok(Versioning::Enabled) | Ok(Versioning::Suspended) => format!(
            "bucket {bucket} keeps versions: list the object's earlier versions with `aws s3api list-object-versions \
             --bucket {bucket} --prefix KEY` and copy a good one back with `aws s3api copy-object --bucket {bucket} \
             --key KEY --copy-source '{bucket}/KEY?versionId=VERSION'` (KEY: the object named above)"
        ),
        Ok(Versioning::Off) => format!(
            "bucket {bucket} keeps no versions, so there is no earlier copy to restore: write the object again from \
             the spec file you created the cluster from (`aws s3 cp FILE s3://{bucket}/KEY`), and turn versioning \
             on for next time: `aws s3api put-bucket-versioning --bucket {bucket} --versioning-configuration \
             Status=Enabled`"
        ),
        Err(reason) => format!(
            "put a good copy back in its place: an earlier version if bucket {bucket} keeps versions (whether it \
             does could not be read: {reason})"
        ),
    }
}

impl S3Store {
    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Reads the bucket's public-access block, versioning and default encryption.
    pub async fn posture(&self) -> Result<BucketPosture, StoreError> {
        Ok(BucketPosture {
            bucket: self.bucket.clone(),
            public_access_block: self.public_access_block().await?,
            versioning: self.versioning().await?,
            default_encryption: self.default_encryption().await?,
        })
    }

    async fn public_access_block(&self) -> Result<Option<PublicAccessBlock>, StoreError> {
        let result = self
            .client
            .get_public_access_block()
            .bucket(&self.bucket)
            .expected_bucket_owner(self.expected_owner().await?)
            .send()
            .await;
        match result {
            Ok(output) => {
                Ok(output
                    .public_access_block_configuration()
                    .map(|c| PublicAccessBlock {
                        block_public_acls: c.block_public_acls().unwrap_or(false),
                        ignore_public_acls: c.ignore_public_acls().unwrap_or(false),
                        block_public_policy: c.block_public_policy().unwrap_or(false),
                        restrict_public_buckets: c.restrict_public_buckets().unwrap_or(false),
                    }))
            }
            Err(e) if service_code(&e) == Some("NoSuchPublicAccessBlockConfiguration") => Ok(None),
            Err(e) => Err(self.bucket_error("public-access block read", e)),
        }
    }

    /// Whether the bucket keeps versions.
    pub async fn versioning(&self) -> Result<Versioning, StoreError> {
        let output = self
            .client
            .get_bucket_versioning()
            .bucket(&self.bucket)
            .expected_bucket_owner(self.expected_owner().await?)
            .send()
            .await
            .map_err(|e| self.bucket_error("versioning read", e))?;
        Ok(match output.status() {
            Some(BucketVersioningStatus::Enabled) => Versioning::Enabled,
            Some(BucketVersioningStatus::Suspended) => Versioning::Suspended,
            _ => Versioning::Off,
        })
    }

    async fn default_encryption(&self) -> Result<Option<String>, StoreError> {
        let result = self
            .client
            .get_bucket_encryption()
            .bucket(&self.bucket)
            .expected_bucket_owner(self.expected_owner().await?)
            .send()
            .await;
        match result {
            Ok(output) => Ok(output
                .server_side_encryption_configuration()
                .and_then(|c| c.rules().first())
                .and_then(|r| r.apply_server_side_encryption_by_default())
                .map(|d| d.sse_algorithm())
                .map(|a| a.as_str().to_string())),
            Err(e)
                if service_code(&e) == Some("ServerSideEncryptionConfigurationNotFoundError") =>
            {
                Ok(None)
            }
            Err(e) => Err(self.bucket_error("default encryption read", e)),
        }
    }

    fn bucket_error<E, R>(&self, operation: &'static str, err: SdkError<E, R>) -> StoreError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        StoreError::S3 {
            operation,
            bucket: self.bucket.clone(),
            key: String::new(),
            message: self.describe(&err),
            source: Box::new(err),
        }
    }
}

fn service_code<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> Option<&str> {
    match err {
        SdkError::ServiceError(service) => service.err().code(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posture() -> BucketPosture {
        BucketPosture {
            bucket: "state".into(),
            public_access_block: Some(PublicAccessBlock {
                block_public_acls: true,
                ignore_public_acls: true,
                block_public_policy: true,
                restrict_public_buckets: true,
            }),
            versioning: Versioning::Enabled,
            default_encryption: Some("AES256".into()),
        }
    }

    #[test]
    fn a_private_versioned_encrypted_bucket_has_no_problems() {
        assert_eq!(posture().problems(None), vec![]);
    }

    #[test]
    fn each_setting_that_is_off_is_named_with_its_fix() {
        let mut open = posture();
        open.public_access_block = Some(PublicAccessBlock {
            block_public_policy: false,
            ..open.public_access_block.expect("set above")
        });
        open.versioning = Versioning::Suspended;
        open.default_encryption = None;
        let problems = open.problems(Some("arn:aws:kms:us-west-2:111122223333:key/k"));
        let settings: Vec<&str> = problems.iter().map(|p| p.setting).collect();
        assert_eq!(
            settings,
            ["public-access block", "versioning", "default encryption"]
        );
        assert_eq!(
            problems[0].found,
            "bucket state's public-access block has BlockPublicPolicy off"
        );
        assert!(problems[0]
            .fix
            .starts_with("aws s3api put-public-access-block --bucket state "));
        assert!(
            problems[1].found.contains("versioning suspended"),
            "{}",
            problems[1].found
        );
        assert!(problems[1]
            .fix
            .ends_with("--versioning-configuration Status=Enabled"));
        assert!(
            problems[2]
                .fix
                .contains(r#""KMSMasterKeyID":"arn:aws:kms:us-west-2:111122223333:key/k""#),
            "{}",
            problems[2].fix
        );
        let mut none = posture();
        none.public_access_block = None;
        let problems = none.problems(None);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].found.contains("has no public-access block"),
            "{}",
            problems[0].found
        );
    }

    #[test]
    fn mending_advice_depends_on_versioning() {
        let file = mend_advice("file:///srv/ballast", Ok(Versioning::Enabled));
        assert!(
            file.starts_with("a file store keeps no earlier versions"),
            "{file}"
        );
        let kept = mend_advice("s3://state/clusters", Ok(Versioning::Enabled));
        assert!(kept.starts_with("bucket state keeps versions: "), "{kept}");
        assert!(
            kept.contains("list-object-versions --bucket state"),
            "{kept}"
        );
        let none = mend_advice("s3://state", Ok(Versioning::Off));
        assert!(
            none.starts_with("bucket state keeps no versions, so there is no earlier copy"),
            "{none}"
        );
        assert!(!none.contains("list-object-versions"), "{none}");
        let unknown = mend_advice("s3://state", Err("AccessDenied".into()));
        assert!(
            unknown.contains("could not be read: AccessDenied"),
            "{unknown}"
        );
    }
}
