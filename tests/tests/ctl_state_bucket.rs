//! The state bucket's posture and its KMS key, end to end: the real `ballast` against the AWS emulator (moto
//! through the project's launcher) over HTTP. moto 5.2.5 implements Get/PutPublicAccessBlock,
//! Get/PutBucketVersioning, Get/PutBucketEncryption and echoes SSE-KMS headers; it neither validates KMS key ids
//! nor checks `kms:*` permissions on S3 requests, so the KMS grant is tested as the policy document AWS receives.

use ballast_e2e::aws;
use predicates::prelude::*;

/// A key ARN: moto does not check that it exists.
const KMS_KEY: &str = "arn:aws:kms:us-west-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";

/// A bucket as `aws s3 mb` makes it: no public-access block, no versioning, no default encryption.
async fn open_bucket(hint: &str) -> String {
    let bucket = format!("ballast-open-{hint}-{}", std::process::id());
    aws::create_bucket(&aws::s3_client().await, &bucket).await;
    bucket
}

/// The `state bucket` check of `validate cluster -o json`: (ok, reason).
fn bucket_check(state: &str, name: &str) -> (bool, String) {
    let out = aws::ballast_cli(state, name)
        .args(["validate", "cluster", "-o", "json"])
        .assert()
        .code(6); // the cluster was never built: other checks fail
    let json: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).expect("json");
    let check = json["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == "state bucket")
        .unwrap_or_else(|| panic!("no state bucket check in {json}"))
        .clone();
    (
        check["ok"].as_bool().expect("ok"),
        check["reason"].as_str().expect("reason").to_string(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_open_bucket_is_warned_about_at_create_and_fails_validate_until_it_is_fixed() {
    let bucket = open_bucket("posture").await;
    let state = format!("s3://{bucket}/clusters");
    let name = "posture.example.com";
    aws::ballast_cli(&state, name)
        .args(["create", "cluster", "--zones", "us-west-2a"])
        .assert()
        .success()
        .stderr(predicate::str::contains(format!(
            "Warning: state bucket public-access block: bucket {bucket} has no public-access block"
        )))
        .stderr(predicate::str::contains(format!(
            "fix: aws s3api put-public-access-block --bucket {bucket} --public-access-block-configuration \
             BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=true"
        )))
        .stderr(predicate::str::contains(format!(
            "Warning: state bucket versioning: bucket {bucket} has versioning off"
        )))
        .stderr(predicate::str::contains(format!(
            "fix: aws s3api put-bucket-versioning --bucket {bucket} --versioning-configuration Status=Enabled"
        )))
        .stderr(predicate::str::contains(format!(
            "Warning: state bucket default encryption: bucket {bucket} has no default encryption"
        )));
    let (ok, reason) = bucket_check(&state, name);
    assert!(!ok, "{reason}");
    for setting in ["public-access block:", "versioning:", "default encryption:"] {
        assert!(reason.contains(setting), "{setting} missing from {reason}");
    }

    // A damaged object: without versioning there is no earlier copy, and the message says so.
    let s3 = aws::s3_client().await;
    damage_nodes_group(&s3, &bucket, name).await;
    aws::ballast_cli(&state, name)
        .args(["get", "clusters", name])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(format!(
            "to mend it: bucket {bucket} keeps no versions, so there is no earlier copy to restore"
        )))
        .stderr(predicate::str::contains("list-object-versions").not());

    aws::secure_bucket(&s3, &bucket).await;
    // With versioning on, the advice is to copy a good version back.
    damage_nodes_group(&s3, &bucket, name).await;
    aws::ballast_cli(&state, name)
        .args(["get", "clusters", name])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(format!(
            "to mend it: bucket {bucket} keeps versions: list the object's earlier versions with `aws s3api \
             list-object-versions --bucket {bucket} --prefix KEY`"
        )));
    let (ok, reason) = bucket_check(&state, name);
    assert!(ok, "{reason}");
    assert_eq!(
        reason,
        format!("bucket {bucket} blocks public access, keeps versions and encrypts by default")
    );
    // A secured bucket draws no warning.
    aws::ballast_cli(&state, "quiet.example.com")
        .args(["create", "cluster", "--zones", "us-west-2a"])
        .assert()
        .success()
        .stderr(predicate::str::contains("Warning: state bucket").not());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_alias_for_the_state_kms_key_is_refused_and_nothing_is_stored() {
    let bucket = aws::new_bucket("kms-alias").await;
    let state = format!("s3://{bucket}/clusters");
    aws::ballast_cli(&state, "alias.example.com")
        .args(["create", "cluster", "--zones", "us-west-2a"])
        .args(["--state-kms-key", "alias/ballast-state"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "spec.stateStore.kmsKeyId: \"alias/ballast-state\" is not a KMS key ARN",
        ))
        .stderr(predicate::str::contains(
            "aws kms describe-key --key-id alias/ballast-state --query KeyMetadata.Arn",
        ));
    let listed = aws::s3_client()
        .await
        .list_objects_v2()
        .bucket(&bucket)
        .send()
        .await
        .expect("list");
    assert_eq!(listed.key_count(), Some(0), "{:?}", listed.contents());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_state_kms_key_is_recorded_in_the_node_specs_granted_to_both_roles_and_used_for_writes()
{
    use ballast_state::layout::ClusterPaths;
    use ballast_store::store::{Precondition, StateStore, StoreOptions};

    let bucket = aws::new_bucket("kms").await;
    let state = format!("s3://{bucket}/clusters");
    let name = "kms.example.com";
    aws::ensure_image(&ballast_state::defaults::default_image(
        ballast_state::defaults::DEFAULT_KUBERNETES_VERSION,
    ))
    .await;
    aws::ballast_cli(&state, name)
        .args(["create", "cluster", "--zones", "us-west-2a", "--yes"])
        .args(["--state-kms-key", KMS_KEY])
        .assert()
        .success();

    let s3 = aws::s3_client().await;
    let paths = ClusterPaths::new(name);
    let object = |key: String| {
        let s3 = s3.clone();
        let bucket = bucket.clone();
        async move {
            let out = s3
                .get_object()
                .bucket(&bucket)
                .key(format!("clusters/{key}"))
                .send()
                .await
                .unwrap_or_else(|e| panic!("{key}: {}", aws_sdk_s3::error::DisplayErrorContext(e)));
            let sse = (
                out.server_side_encryption().map(|s| s.as_str().to_string()),
                out.ssekms_key_id().map(str::to_string),
            );
            let body = out.body.collect().await.expect("body").into_bytes();
            (String::from_utf8(body.to_vec()).expect("utf8"), sse)
        }
    };
    // Recorded in the spec as written, and written by the operator with the key.
    let (cluster_yaml, sse) = object(paths.cluster_spec()).await;
    assert!(
        cluster_yaml.contains(&format!("kmsKeyId: {KMS_KEY}")),
        "{cluster_yaml}"
    );
    assert_eq!(
        sse,
        (Some("aws:kms".to_string()), Some(KMS_KEY.to_string()))
    );
    // Carried to every node spec.
    for group in ["nodes", "control-plane-us-west-2a"] {
        let (spec, _) = object(paths.node_spec(group)).await;
        assert!(
            spec.contains(&format!("stateStoreKmsKey: {KMS_KEY}")),
            "{group}: {spec}"
        );
    }
    // Granted to both roles: exactly Decrypt and GenerateDataKey, on that key, through S3.
    let iam = aws_sdk_iam::Client::new(&aws::sdk_config().await);
    for role in [format!("nodes.{name}"), format!("control-plane.{name}")] {
        let policy = iam
            .get_role_policy()
            .role_name(&role)
            // The one inline policy Ballast gives each role (ctl/src/cloud/kinds/iam.rs).
            .policy_name("ballast")
            .send()
            .await
            .unwrap_or_else(|e| panic!("{role}: {}", aws_sdk_iam::error::DisplayErrorContext(e)));
        let document = urlencoding_decode(policy.policy_document());
        let json: serde_json::Value = serde_json::from_str(&document).expect("policy JSON");
        let kms: Vec<&serde_json::Value> = json["Statement"]
            .as_array()
            .expect("statements")
            .iter()
            .filter(|s| s.to_string().contains("kms:"))
            .collect();
        assert_eq!(kms.len(), 1, "{role}: {json}");
        assert_eq!(
            kms[0]["Action"],
            serde_json::json!(["kms:Decrypt", "kms:GenerateDataKey"])
        );
        assert_eq!(kms[0]["Resource"], serde_json::json!([KMS_KEY]));
    }
    // What nodeup does once it read its node spec: its writes (reports, etcd's objects) carry the key.
    let store = StateStore::open(&state, StoreOptions::default())
        .await
        .expect("store")
        .with_kms_key(Some(KMS_KEY.to_string()));
    store
        .put(
            &paths.report("i-0123456789abcdef0"),
            b"{}",
            &Precondition::None,
        )
        .await
        .expect("put");
    let (_, sse) = object(paths.report("i-0123456789abcdef0")).await;
    assert_eq!(
        sse,
        (Some("aws:kms".to_string()), Some(KMS_KEY.to_string()))
    );
}

/// Rewrites the cluster's `nodes` group so that it names another group: a damaged object.
async fn damage_nodes_group(s3: &aws_sdk_s3::Client, bucket: &str, cluster: &str) {
    let key = format!("clusters/{cluster}/instancegroups/nodes.yaml");
    let out = s3
        .get_object()
        .bucket(bucket)
        .key(&key)
        .send()
        .await
        .expect("read nodes.yaml");
    let text = String::from_utf8(
        out.body
            .collect()
            .await
            .expect("body")
            .into_bytes()
            .to_vec(),
    )
    .expect("utf8");
    let damaged = text.replace("name: nodes", "name: evil");
    s3.put_object()
        .bucket(bucket)
        .key(&key)
        .body(damaged.into_bytes().into())
        .send()
        .await
        .expect("write the damaged nodes.yaml");
}

/// IAM returns policy documents URL-encoded (RFC 3986), as AWS does.
fn urlencoding_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(byte) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).expect("utf8")
}

/// Another AWS account's S3: moto's AssumeRole switches accounts by the role ARN's account id (the role need not
/// exist), so this client creates buckets that account owns, as someone squatting a bucket name would.
async fn s3_of_another_account() -> aws_sdk_s3::Client {
    let config = aws::sdk_config().await;
    let assumed = aws_sdk_sts::Client::new(&config)
        .assume_role()
        .role_arn("arn:aws:iam::222222222222:role/squatter")
        .role_session_name("squatter")
        .send()
        .await
        .unwrap_or_else(|e| panic!("AssumeRole: {}", aws_sdk_sts::error::DisplayErrorContext(e)));
    let c = assumed.credentials.expect("credentials");
    let credentials = aws_credential_types::Credentials::new(
        c.access_key_id,
        c.secret_access_key,
        Some(c.session_token),
        None,
        "another-account",
    );
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&config)
            .credentials_provider(credentials)
            .force_path_style(true)
            .build(),
    );
    let me = aws_sdk_sts::Client::new(&config)
        .get_caller_identity()
        .send()
        .await
        .expect("GetCallerIdentity");
    assert_ne!(
        me.account(),
        Some("222222222222"),
        "the operator's account is another"
    );
    s3
}

/// The keys of `bucket`, as its owner lists them.
async fn keys_of(s3: &aws_sdk_s3::Client, bucket: &str) -> Vec<String> {
    s3.list_objects_v2()
        .bucket(bucket)
        .send()
        .await
        .expect("ListObjectsV2")
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_string))
        .collect()
}

/// A state bucket of the right name in another account (taken before the operator made theirs, or after it was
/// deleted, and opened to them by its policy; the emulator lets any account use any bucket, as such a policy
/// would): every request names the operator's own account as the bucket's expected owner, S3 answers 403, and
/// `create cluster` stops naming the bucket and what to check, having written nothing there, the CA keys least.
#[tokio::test(flavor = "multi_thread")]
async fn a_state_bucket_of_another_account_is_refused_and_nothing_is_written_to_it() {
    let theirs = s3_of_another_account().await;
    let bucket = format!("ballast-theirs-{}", std::process::id());
    aws::create_bucket(&theirs, &bucket).await;
    aws::ballast_cli(&format!("s3://{bucket}/clusters"), "theirs.example.com")
        .args(["create", "cluster", "--zones", "us-west-2a", "--yes"])
        .assert()
        .failure()
        .stderr(predicate::str::contains(format!("s3://{bucket}")))
        .stderr(predicate::str::contains("AccessDenied"))
        .stderr(predicate::str::contains(format!(
            "bucket {bucket} belongs to another account"
        )));
    assert_eq!(keys_of(&theirs, &bucket).await, Vec::<String>::new());
}

/// A cluster with IRSA whose discovery bucket is `discovery` (enableAWSOIDCProvider off: no IAM needed).
fn irsa_spec(name: &str, discovery: &str) -> String {
    format!(
        "apiVersion: ballast.dev/v1alpha1
kind: Cluster
metadata:
  name: {name}
spec:
  kubernetesVersion: 1.36.4
  subnets:
  - {{name: us-west-2a, zone: us-west-2a}}
  serviceAccountIssuerDiscovery:
    discoveryStore: s3://{discovery}/{name}
---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {{name: control-plane}}
spec: {{role: ControlPlane}}
"
    )
}

/// The `discovery bucket` check of `validate cluster -o json`: (ok, reason).
fn discovery_check(state: &str, name: &str) -> (bool, String) {
    let out = aws::ballast_cli(state, name)
        .args(["validate", "cluster", "-o", "json"])
        .assert()
        .code(6); // the cluster was never built: other checks fail
    let json: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).expect("json");
    let check = json["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == "discovery bucket")
        .unwrap_or_else(|| panic!("no discovery bucket check in {json}"))
        .clone();
    (
        check["ok"].as_bool().expect("ok"),
        check["reason"].as_str().expect("reason").to_string(),
    )
}

/// IRSA's discovery bucket: one in another account is refused by `update cluster` (S3's 403 to the expected
/// owner), nothing published there; the operator's own, its ACL opened to `public-read-write` (anyone could
/// replace the JWKS and assume every service-account role), draws a warning from `update cluster` and fails
/// `validate cluster`'s `discovery bucket` check, each naming the bucket and the command that closes it, until the
/// ACL is private again.
#[tokio::test(flavor = "multi_thread")]
async fn a_discovery_bucket_of_another_account_is_refused_and_an_open_one_is_warned_about() {
    use aws_sdk_s3::types::BucketCannedAcl;

    aws::ensure_image(&ballast_state::defaults::default_image(
        ballast_state::defaults::DEFAULT_KUBERNETES_VERSION,
    ))
    .await;
    let state_bucket = aws::new_bucket("irsa-owner").await;
    let state = format!("s3://{state_bucket}/clusters");
    let name = "discovery.example.com";
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cluster.yaml");

    let theirs = s3_of_another_account().await;
    let their_bucket = format!("ballast-theirs-oidc-{}", std::process::id());
    aws::create_bucket(&theirs, &their_bucket).await;
    std::fs::write(&file, irsa_spec(name, &their_bucket)).expect("spec");
    aws::ballast_cli(&state, name)
        .args(["create", "-f"])
        .arg(&file)
        .assert()
        .success();
    aws::ballast_cli(&state, name)
        .args(["update", "cluster"])
        .assert()
        .failure()
        .stderr(predicate::str::contains(format!(
            "s3://{their_bucket}/{name}/"
        )))
        .stderr(predicate::str::contains("AccessDenied"));
    assert_eq!(keys_of(&theirs, &their_bucket).await, Vec::<String>::new());

    let s3 = aws::s3_client().await;
    let ours = format!("ballast-open-oidc-{}", std::process::id());
    aws::create_bucket(&s3, &ours).await;
    std::fs::write(&file, irsa_spec(name, &ours)).expect("spec");
    aws::ballast_cli(&state, name)
        .args(["replace", "-f"])
        .arg(&file)
        .assert()
        .success();
    let (ok, reason) = discovery_check(&state, name);
    assert!(ok, "a private bucket: {reason}");
    // public-read-write, granted as AWS lists that canned ACL (one grant per permission): the pinned moto
    // keeps the canned ACL as one grant of two permissions and lists only the first.
    let all_users = "uri=http://acs.amazonaws.com/groups/global/AllUsers";
    s3.put_bucket_acl()
        .bucket(&ours)
        .grant_read(all_users)
        .grant_write(all_users)
        .send()
        .await
        .expect("PutBucketAcl");
    let fix = format!("fix: aws s3api put-bucket-acl --bucket {ours} --acl private");
    aws::ballast_cli(&state, name)
        .args(["update", "cluster"])
        .assert()
        .success()
        .stderr(predicate::str::contains(format!(
            "Warning: discovery bucket {ours}: bucket {ours}'s ACL grants anyone"
        )))
        .stderr(predicate::str::contains(format!(
            "bucket {ours}'s ACL grants anyone write: they can replace the JWKS"
        )))
        .stderr(predicate::str::contains(fix.as_str()));
    let (ok, reason) = discovery_check(&state, name);
    assert!(!ok, "an open bucket passed: {reason}");
    for part in [
        format!("bucket {ours}'s ACL grants anyone write"),
        format!("bucket {ours}'s ACL grants anyone read: they can list every object"),
        fix.clone(),
    ] {
        assert!(reason.contains(&part), "{part:?} in: {reason}");
    }
    s3.put_bucket_acl()
        .bucket(&ours)
        .acl(BucketCannedAcl::Private)
        .send()
        .await
        .expect("PutBucketAcl");
    let (ok, reason) = discovery_check(&state, name);
    assert!(ok, "closed again: {reason}");
    aws::ballast_cli(&state, name)
        .args(["update", "cluster"])
        .assert()
        .success()
        .stderr(predicate::str::contains("Warning: discovery bucket").not());
}
