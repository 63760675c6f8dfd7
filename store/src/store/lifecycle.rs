//! A lifecycle rule that expires the objects under one prefix of the bucket after a number of days: the audit
//! log's retention (`spec.auditLog.retentionDays`, docs/audit.md), set by `update cluster`.
//!
//! A bucket has one lifecycle configuration, replaced whole by each write: the rule is merged into the rules the
//! bucket already has, by its id, so an operator's own rules survive ([`merged`], pure), and nothing is written
//! when the rule is already there as wanted (a no-op update makes only the read).

use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration, LifecycleRule,
    LifecycleRuleFilter,
};

use super::{S3Store, StoreError};

/// Objects under `prefix` (a key prefix of the store, below its own prefix) expire `days` after they were
/// written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpirationRule {
    /// The rule's id in the bucket's configuration (at most 255 characters).
    pub id: String,
    pub prefix: String,
    pub days: u32,
}

/// What [`S3Store::ensure_expiration`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleOutcome {
    /// The rule was already there as wanted: nothing written.
    Unchanged,
    /// The rule was added or changed.
    Set,
}

/// The rule as S3 holds it, under the full key prefix `prefix`.
fn lifecycle_rule(rule: &ExpirationRule, prefix: &str) -> Result<LifecycleRule, StoreError> {
    LifecycleRule::builder()
        .id(&rule.id)
        .filter(LifecycleRuleFilter::builder().prefix(prefix).build())
        .status(ExpirationStatus::Enabled)
        .expiration(
            LifecycleExpiration::builder()
                .days(i32::try_from(rule.days).unwrap_or(i32::MAX))
                .build(),
        )
        .build()
        .map_err(|e| StoreError::S3 {
            operation: "lifecycle rule",
            bucket: String::new(),
            key: prefix.to_string(),
            message: e.to_string(),
            source: Box::new(e),
        })
}

/// The bucket's rules with `ours` in place of any rule with its id; `None` when `ours` is already there as is.
pub fn merged(existing: &[LifecycleRule], ours: &LifecycleRule) -> Option<Vec<LifecycleRule>> {
    let same = |r: &LifecycleRule| {
        r.id() == ours.id()
            && r.status() == ours.status()
            && r.filter().and_then(|f| f.prefix()) == ours.filter().and_then(|f| f.prefix())
            && r.expiration().and_then(|e| e.days()) == ours.expiration().and_then(|e| e.days())
    };
    if existing.iter().any(same) {
        return None;
    }
    let mut rules: Vec<LifecycleRule> = existing
        .iter()
        .filter(|r| r.id() != ours.id())
        .cloned()
        .collect();
    rules.push(ours.clone());
    Some(rules)
}

impl S3Store {
    /// Makes the bucket expire the objects under `rule.prefix` after `rule.days`, keeping its other rules.
    pub async fn ensure_expiration(
        &self,
        rule: &ExpirationRule,
    ) -> Result<RuleOutcome, StoreError> {
        let prefix = self.full_key(&rule.prefix);
        let ours = lifecycle_rule(rule, &prefix)?;
        let existing = match self
            .client
            .get_bucket_lifecycle_configuration()
            .bucket(&self.bucket)
            .expected_bucket_owner(self.expected_owner().await?)
            .send()
            .await
        {
            Ok(output) => output.rules().to_vec(),
            Err(e) if code(&e) == Some("NoSuchLifecycleConfiguration") => Vec::new(),
            Err(e) => return Err(self.lifecycle_error("lifecycle configuration read", &prefix, e)),
        };
        let Some(rules) = merged(&existing, &ours) else {
            return Ok(RuleOutcome::Unchanged);
        };
        let configuration = BucketLifecycleConfiguration::builder()
            .set_rules(Some(rules))
            .build()
            .map_err(|e| StoreError::S3 {
                operation: "lifecycle configuration",
                bucket: self.bucket.clone(),
                key: prefix.clone(),
                message: e.to_string(),
                source: Box::new(e),
            })?;
        self.client
            .put_bucket_lifecycle_configuration()
            .bucket(&self.bucket)
            .expected_bucket_owner(self.expected_owner().await?)
            .lifecycle_configuration(configuration)
            .send()
            .await
            .map_err(|e| self.lifecycle_error("lifecycle configuration write", &prefix, e))?;
        Ok(RuleOutcome::Set)
    }

    fn lifecycle_error<E, R>(
        &self,
        operation: &'static str,
        prefix: &str,
        err: SdkError<E, R>,
    ) -> StoreError
    where
        E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        StoreError::S3 {
            operation,
            bucket: self.bucket.clone(),
            key: prefix.to_string(),
            message: self.describe(&err),
            source: Box::new(err),
        }
    }
}

fn code<E: aws_sdk_s3::error::ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> Option<&str> {
    err.as_service_error().and_then(|e| e.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str, prefix: &str, days: u32) -> LifecycleRule {
        lifecycle_rule(
            &ExpirationRule {
                id: id.to_string(),
                prefix: prefix.to_string(),
                days,
            },
            prefix,
        )
        .expect("a rule")
    }

    #[test]
    fn the_rule_is_added_beside_the_operators_own_and_replaced_by_its_id() {
        let theirs = rule("operator-logs", "logs/", 30);
        let ours = rule("ballast-audit-demo", "s/demo/audit/", 365);
        let added = merged(std::slice::from_ref(&theirs), &ours).expect("added");
        assert_eq!(added, vec![theirs.clone(), ours.clone()]);
        assert_eq!(
            merged(&added, &ours),
            None,
            "already there: nothing to write"
        );
        let shorter = rule("ballast-audit-demo", "s/demo/audit/", 90);
        assert_eq!(merged(&added, &shorter), Some(vec![theirs, shorter]));
    }
}
