//! What the audit shipper on control-plane nodes needs of IAM (pure): statements of the control-plane role's
//! policy, for where `spec.auditLog` sends the chunks (docs/audit.md).
//!
//! - `s3:PutObject` on `<destination>/<cluster>/audit/${aws:userid}/*` only: the instance role session's
//!   `aws:userid` is `<role-id>:<instance-id>`, so each control-plane instance writes its own chunks and no other
//!   instance's, though they share one role (as their log tails, `ctl/src/cloud/model.rs`); and only with
//!   `If-None-Match: *` (the `s3:if-none-match` condition key), so a chunk, once written, is never overwritten.
//! - An explicit `Deny` of reading them back (`s3:GetObject`, `s3:GetObjectVersion`): in the state store the
//!   control plane otherwise reads its cluster's whole prefix, and a node that is taken over must not read what
//!   the API server recorded of others.
//! - With a KMS key other than the state store's: `kms:GenerateDataKey` on it (what a single-part PutObject with
//!   SSE-KMS needs), no `kms:Decrypt`, only through S3 in the cluster's region.
//!
//! Workers get none of this.
//!
//! Retention ([`apply_retention`], the one piece of I/O here): with the chunks in the state bucket, `update cluster
//! --yes` keeps an S3 lifecycle rule expiring `<cluster>/audit/` after `spec.auditLog.retentionDays`, merged into
//! the bucket's other rules (`ballast_store::store::lifecycle`). A bucket the spec names is its owner's: validation
//! refuses `retentionDays` with a `destination`.

use ballast_state::audit::AuditDestination;
use ballast_state::layout::ClusterPaths;
use ballast_state::spec::ClusterConfig;
use ballast_store::store::lifecycle::{ExpirationRule, RuleOutcome};
use ballast_store::store::{StateStore, StoreError};
use serde_json::{json, Value};

/// The ARN pattern of every audit chunk of `cluster` (or, with `writer`, of one writer's: `${aws:userid}` in a
/// policy), in the destination the spec names or the state store (`state`: its bucket and prefix, as a
/// destination, so that this module does not import the model that uses it).
pub fn audit_objects_arn(
    cluster: &str,
    completed: &ClusterConfig,
    state: &AuditDestination,
    writer: Option<&str>,
) -> String {
    let named = completed
        .cluster
        .spec
        .audit_log
        .as_ref()
        .and_then(|a| a.destination.as_deref())
        .and_then(|url| AuditDestination::parse(url).ok());
    let destination = named.unwrap_or_else(|| state.clone());
    format!(
        "arn:aws:s3:::{}/{}",
        destination.bucket,
        destination.bucket_key(&match writer {
            Some(writer) => format!("{cluster}/audit/{writer}/*"),
            None => format!("{cluster}/audit/*"),
        })
    )
}

/// The control-plane role's statements for shipping the audit log.
pub fn audit_iam_statements(
    cluster: &str,
    completed: &ClusterConfig,
    state: &AuditDestination,
) -> Vec<Value> {
    let objects = audit_objects_arn(cluster, completed, state, None);
    let own = audit_objects_arn(cluster, completed, state, Some("${aws:userid}"));
    let mut statements = vec![
        // Its own chunks only, each written once: a put without `If-None-Match: *` is not allowed.
        json!({"Sid": "ShipOwnAuditLog", "Effect": "Allow", "Action": ["s3:PutObject"], "Resource": [own],
            "Condition": {"Null": {"s3:if-none-match": "false"}}}),
        json!({"Sid": "NeverReadAuditLog", "Effect": "Deny", "Action": ["s3:GetObject", "s3:GetObjectVersion"],
            "Resource": [objects]}),
    ];
    let spec = &completed.cluster.spec;
    let state_key = spec
        .state_store
        .as_ref()
        .and_then(|s| s.kms_key_id.as_deref());
    let audit_key = spec
        .audit_log
        .as_ref()
        .and_then(|a| a.kms_key_id.as_deref());
    if let Some(key) = audit_key.filter(|key| Some(*key) != state_key) {
        let region = spec.region.clone().unwrap_or_default();
        statements.push(json!({"Sid": "UseAuditLogKey", "Effect": "Allow", "Action": ["kms:GenerateDataKey"],
            "Resource": [key], "Condition": {"StringEquals": {"kms:ViaService": format!("s3.{region}.amazonaws.com")}}}));
    }
    statements
}

/// The retention rule of `cluster`'s audit chunks in the state bucket, when the spec keeps them there.
pub fn retention_rule(completed: &ClusterConfig) -> Option<ExpirationRule> {
    let audit = completed.cluster.spec.audit_log.as_ref()?;
    if audit.destination.is_some() {
        return None;
    }
    let paths = ClusterPaths::new(completed.name());
    Some(ExpirationRule {
        id: format!("ballast-audit-{}", completed.name()),
        prefix: paths.audit_prefix(),
        days: audit.retention_days?,
    })
}

/// Sets the audit chunks' retention rule on the state bucket (`update cluster --yes`); says what it did.
pub async fn apply_retention(
    store: &StateStore,
    completed: &ClusterConfig,
    say: &dyn Fn(&str),
) -> Result<(), StoreError> {
    let (Some(rule), StateStore::S3(s3)) = (retention_rule(completed), store) else {
        return Ok(());
    };
    let outcome = s3.ensure_expiration(&rule).await?;
    let what = match outcome {
        RuleOutcome::Set => "set",
        RuleOutcome::Unchanged => "unchanged",
    };
    say(&format!(
        "audit log retention: {} days on {}/{} ({what})",
        rule.days,
        store.url(),
        rule.prefix
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use ballast_state::defaults::complete;
    use ballast_state::generate::{generate, ClusterTemplate};
    use ballast_state::spec::{AuditLogSpec, Role, StateStoreSpec};

    use super::super::model::{cluster_model, StateLocation};
    use super::*;

    const KEY: &str = "arn:aws:kms:us-west-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab";

    fn config() -> ClusterConfig {
        complete(
            &generate(&ClusterTemplate {
                name: "demo.example.com".into(),
                zones: vec!["us-west-2a".into()],
                ..Default::default()
            })
            .expect("template"),
        )
    }

    /// Every statement of a role's policy that names `action`, as (effect, resources).
    fn statements(config: &ClusterConfig, role: Role, action: &str) -> Vec<(String, Vec<String>)> {
        let state = StateLocation::from_url("s3://state/clusters").expect("s3");
        let model = cluster_model(config, &state);
        let policy: Value = serde_json::from_str(
            &model
                .roles
                .iter()
                .find(|r| r.role == role)
                .expect("the role")
                .policy,
        )
        .expect("policy JSON");
        policy["Statement"]
            .as_array()
            .expect("statements")
            .iter()
            .filter(|s| s["Action"].to_string().contains(action))
            .map(|s| {
                (
                    s["Effect"].as_str().unwrap_or_default().to_string(),
                    s["Resource"]
                        .as_array()
                        .map(|r| {
                            r.iter()
                                .filter_map(|v| v.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_else(|| {
                            vec![s["Resource"].as_str().unwrap_or_default().to_string()]
                        }),
                )
            })
            .collect()
    }

    #[test]
    fn the_control_plane_writes_its_own_audit_chunks_once_and_never_reads_them() {
        let config = config();
        let chunks = "arn:aws:s3:::state/clusters/demo.example.com/audit/*".to_string();
        let own = "arn:aws:s3:::state/clusters/demo.example.com/audit/${aws:userid}/*".to_string();
        let puts = statements(&config, Role::ControlPlane, "s3:PutObject");
        assert!(puts.contains(&("Allow".to_string(), vec![own])), "{puts:?}");
        // No statement lets it put under another instance's prefix.
        assert!(
            !puts
                .iter()
                .any(|(_, resources)| resources.contains(&chunks)),
            "{puts:?}"
        );
        let all = audit_iam_statements(
            "demo.example.com",
            &config,
            &AuditDestination::parse("s3://state/clusters").expect("s3"),
        );
        let ship = all
            .iter()
            .find(|s| s["Sid"] == "ShipOwnAuditLog")
            .expect("the shipping statement");
        assert_eq!(
            ship["Condition"],
            json!({"Null": {"s3:if-none-match": "false"}}),
            "chunks are written once"
        );
        let gets = statements(&config, Role::ControlPlane, "s3:GetObject");
        assert!(
            gets.contains(&("Deny".to_string(), vec![chunks])),
            "{gets:?}"
        );
    }

    #[test]
    fn workers_get_nothing_of_the_audit_log() {
        let mut config = config();
        config.cluster.spec.audit_log = Some(AuditLogSpec {
            destination: Some("s3://demo-audit/kube".into()),
            kms_key_id: Some(KEY.into()),
            ..Default::default()
        });
        let state = StateLocation::from_url("s3://state/clusters").expect("s3");
        let model = cluster_model(&config, &state);
        let node = model
            .roles
            .iter()
            .find(|r| r.role == Role::Node)
            .expect("nodes");
        assert!(!node.policy.contains("audit"), "{}", node.policy);
        assert!(!node.policy.contains(KEY), "{}", node.policy);
    }

    #[test]
    fn a_named_bucket_and_key_are_granted_and_only_for_writing() {
        let mut config = config();
        config.cluster.spec.audit_log = Some(AuditLogSpec {
            destination: Some("s3://demo-audit/kube/".into()),
            kms_key_id: Some(KEY.into()),
            ..Default::default()
        });
        let chunks = "arn:aws:s3:::demo-audit/kube/demo.example.com/audit/*".to_string();
        let own = "arn:aws:s3:::demo-audit/kube/demo.example.com/audit/${aws:userid}/*".to_string();
        let puts = statements(&config, Role::ControlPlane, "s3:PutObject");
        assert!(puts.contains(&("Allow".to_string(), vec![own])), "{puts:?}");
        let gets = statements(&config, Role::ControlPlane, "s3:GetObject");
        assert!(
            gets.contains(&("Deny".to_string(), vec![chunks])),
            "{gets:?}"
        );
        let kms = statements(&config, Role::ControlPlane, "kms:");
        assert_eq!(kms, [("Allow".to_string(), vec![KEY.to_string()])]);
        let all = audit_iam_statements(
            "demo.example.com",
            &config,
            &AuditDestination::parse("s3://state").expect("s3"),
        );
        assert!(!serde_json::to_string(&all)
            .expect("json")
            .contains("kms:Decrypt"));
    }

    #[test]
    fn the_state_stores_own_key_is_not_granted_twice() {
        let mut config = config();
        config.cluster.spec.state_store = Some(StateStoreSpec {
            kms_key_id: Some(KEY.into()),
        });
        config.cluster.spec.audit_log = Some(AuditLogSpec {
            kms_key_id: Some(KEY.into()),
            ..Default::default()
        });
        let all = audit_iam_statements(
            "demo.example.com",
            &config,
            &AuditDestination::parse("s3://state").expect("s3"),
        );
        assert!(
            !serde_json::to_string(&all).expect("json").contains("kms:"),
            "{all:?}"
        );
    }
}
