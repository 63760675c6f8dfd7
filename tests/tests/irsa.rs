//! IAM roles for service accounts on the local cloud, IAM enforced (issue 31's Must-show): a service-account
//! token signed as the API server signs it (ES256, the kid the JWKS names, the API server's claims) verifies with
//! a real JWT library (jsonwebtoken) against the JWKS read anonymously over HTTP from the issuer's published
//! location; `AssumeRoleWithWebIdentity` through the real AWS SDK returns credentials that do what the role's
//! policy allows and get AccessDenied for the rest; a token of another service account, for another audience,
//! or signed by a key the JWKS does not hold is refused. Then a key rotation in its stages: while both keys are
//! published, a token of either assumes the role; once the old key leaves the JWKS, only the new key's do.
//!
//! What the emulator checks (the `patch_assume_role_with_web_identity` patch, docs/local-cloud.md): the JWT, its
//! issuer's IAM OIDC provider, the issuer's documents read anonymously (so they must be public), the signature
//! with the JWKS key the kid names, exp/nbf, the audience among the provider's client ids, and the role's trust
//! policy (Federated principal, StringEquals on `:sub` and `:aud`). What only AWS checks: the issuer's TLS
//! certificate and the provider's thumbprints (the local cloud serves plain HTTP), and AWS caches the JWKS.
//!
//! Three tests. `spec_driven` is the issue's scenario on one cluster: `ballast create -f` with
//! `spec.serviceAccountIssuerDiscovery` (the AWS OIDC provider on) and one `spec.iam.serviceAccountExternalPermissions`
//! entry, `ballast update cluster --yes`, tokens signed with the cluster's own service-account key from the store,
//! the role Ballast made, a second entry's role pruned once the entry leaves the spec (an operator's untagged
//! role and another cluster's tagged one beside it stay), and `ballast rotate service-account` through add,
//! promote and drop, each followed by `update cluster --yes`; beside it, `update cluster` refusing a role found under
//! an entry's name but tagged as another service account's. The other test needs no cluster: it publishes documents and creates the provider and a
//! role through the SDK, and proves the refusals the cluster test does not repeat (another namespace, a forged key
//! under the published kid, an object that is not public read anonymously). Needs the emulator's venv; fails
//! (never skips) without it.

use std::time::{SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials;
use ballast_e2e::localcloud::{endpoint_addr, http, LocalCloud};
use base64::Engine;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rcgen::{KeyPair, PublicKeyData, PKCS_ECDSA_P256_SHA256};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const REGION: &str = "us-west-2";
const DISCOVERY_BUCKET: &str = "irsa-discovery";
const PREFIX: &str = "irsa.example.com";
const DATA_BUCKET: &str = "irsa-data";
/// The audience of the tokens pods present to STS (kops's, Ballast's: `state/src/irsa/mod.rs`).
const AUDIENCE: &str = "amazonaws.com";
const NAMESPACE: &str = "team-a";
const ACCOUNT: &str = "reader";
const ROLE: &str = "reader.team-a.sa.irsa.example.com";

/// The issuer: the discovery store's public S3 URL (virtual-hosted, as on AWS; the emulator's own S3 here).
fn issuer() -> String {
    format!("https://{DISCOVERY_BUCKET}.s3.{REGION}.amazonaws.com/{PREFIX}")
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A service-account signing key, and its kid as the API server computes it: base64url (unpadded) of the
/// sha256 of the public key's DER (SubjectPublicKeyInfo).
struct SigningKey {
    pair: KeyPair,
    kid: String,
}

impl SigningKey {
    fn generate() -> Self {
        let pair = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("P-256 key");
        let kid = b64url(&Sha256::digest(pair.subject_public_key_info()));
        SigningKey { pair, kid }
    }

    /// Its public JWK, as the API server serves `/openid/v1/jwks`.
    fn jwk(&self) -> serde_json::Value {
        let raw = self.pair.public_key_raw(); // 0x04 || x || y
        serde_json::json!({
            "use": "sig", "kty": "EC", "crv": "P-256", "alg": "ES256", "kid": self.kid,
            "x": b64url(&raw[1..33]), "y": b64url(&raw[33..65]),
        })
    }
}

/// The claims of a projected service-account token, as kube-apiserver writes them.
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    aud: Vec<String>,
    exp: u64,
    iat: u64,
    nbf: u64,
    #[serde(rename = "kubernetes.io")]
    kubernetes: serde_json::Value,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// A token for `namespace/name` with `audience`, signed by `key` under `kid` (ES256).
fn token(key: &SigningKey, kid: &str, namespace: &str, name: &str, audience: &str) -> String {
    let now = now();
    let claims = Claims {
        iss: issuer(),
        sub: format!("system:serviceaccount:{namespace}:{name}"),
        aud: vec![audience.to_string()],
        exp: now + 3600,
        iat: now,
        nbf: now,
        kubernetes: serde_json::json!({
            "namespace": namespace,
            "pod": {"name": format!("{name}-0"), "uid": "4c2f7a51-0000-4000-8000-000000000001"},
            "serviceaccount": {"name": name, "uid": "4c2f7a51-0000-4000-8000-000000000002"},
        }),
    };
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.to_string());
    jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_ec_der(&key.pair.serialize_der()),
    )
    .expect("sign")
}

/// GET a published document anonymously over HTTP, as STS and anyone else read it: the issuer's S3 URL is this
/// cloud's S3 (path-style: `/<bucket>/<key>`).
fn published(cloud: &LocalCloud, key: &str) -> (u16, String) {
    let path = format!("/{DISCOVERY_BUCKET}/{PREFIX}/{key}");
    http(endpoint_addr(&cloud.record.endpoint), "GET", &path, &[]).expect("GET over HTTP")
}

/// Verifies `token` as a relying party would: the JWKS from the discovery document's `jwks_uri`, read over
/// HTTP, the key its kid names, ES256, the issuer and the audience.
fn verify_with_published_jwks(cloud: &LocalCloud, token: &str) -> Result<Claims, String> {
    let (status, discovery) = published(cloud, ".well-known/openid-configuration");
    assert_eq!(status, 200, "discovery document: {discovery}");
    let discovery: serde_json::Value = serde_json::from_str(&discovery).expect("discovery JSON");
    assert_eq!(discovery["issuer"], issuer());
    let jwks_uri = discovery["jwks_uri"].as_str().expect("jwks_uri");
    let key = jwks_uri
        .strip_prefix(&format!("{}/", issuer()))
        .expect("the JWKS lives under the issuer");
    let (status, jwks) = published(cloud, key);
    assert_eq!(status, 200, "JWKS: {jwks}");
    let jwks: JwkSet = serde_json::from_str(&jwks).expect("a JWK set");
    let header = jsonwebtoken::decode_header(token).map_err(|e| e.to_string())?;
    let kid = header.kid.ok_or("no kid")?;
    let jwk = jwks
        .find(&kid)
        .ok_or_else(|| format!("no key {kid} in the JWKS"))?;
    let mut validation = Validation::new(Algorithm::ES256);
    validation.set_audience(&[AUDIENCE]);
    validation.set_issuer(&[issuer()]);
    let key = DecodingKey::from_jwk(jwk).map_err(|e| e.to_string())?;
    jsonwebtoken::decode::<Claims>(token, &key, &validation)
        .map(|data| data.claims)
        .map_err(|e| e.to_string())
}

/// Publishes the discovery document and a JWKS of `keys`, public-read (as `update cluster` does).
async fn publish(cloud: &LocalCloud, keys: &[&SigningKey]) {
    let discovery = serde_json::json!({
        "issuer": issuer(),
        "jwks_uri": format!("{}/openid/v1/jwks", issuer()),
        "authorization_endpoint": "urn:kubernetes:programmatic_authorization",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    });
    let jwks = serde_json::json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()});
    for (key, body) in [
        (".well-known/openid-configuration", discovery),
        ("openid/v1/jwks", jwks),
    ] {
        cloud
            .s3()
            .put_object()
            .bucket(DISCOVERY_BUCKET)
            .key(format!("{PREFIX}/{key}"))
            .acl(aws_sdk_s3::types::ObjectCannedAcl::PublicRead)
            .content_type("application/json")
            .body(body.to_string().into_bytes().into())
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "publishing {key}: {}",
                    aws_sdk_s3::error::DisplayErrorContext(e)
                )
            });
    }
}

async fn create_bucket(cloud: &LocalCloud, bucket: &str) {
    cloud
        .s3()
        .create_bucket()
        .bucket(bucket)
        .create_bucket_configuration(
            aws_sdk_s3::types::CreateBucketConfiguration::builder()
                .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::UsWest2)
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "CreateBucket {bucket}: {}",
                aws_sdk_s3::error::DisplayErrorContext(e)
            )
        });
}

/// The role of `team-a/reader`, trusted exactly as Ballast's trust policies trust (`docs/irsa.md`): only
/// `sts:AssumeRoleWithWebIdentity`, only from the cluster's provider, only for that `sub` and `aud`.
async fn create_provider_and_role(cloud: &LocalCloud) -> String {
    let iam = cloud.iam();
    let provider = iam
        .create_open_id_connect_provider()
        .url(issuer())
        .client_id_list(AUDIENCE)
        .thumbprint_list("0".repeat(40))
        .send()
        .await
        .expect("CreateOpenIDConnectProvider")
        .open_id_connect_provider_arn
        .expect("provider ARN");
    let host = issuer().trim_start_matches("https://").to_string();
    let trust = serde_json::json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Federated": provider},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {
            format!("{host}:sub"): format!("system:serviceaccount:{NAMESPACE}:{ACCOUNT}"),
            format!("{host}:aud"): AUDIENCE,
        }},
    }]});
    let role = iam
        .create_role()
        .role_name(ROLE)
        .assume_role_policy_document(trust.to_string())
        .send()
        .await
        .expect("CreateRole")
        .role
        .expect("role")
        .arn;
    let policy = serde_json::json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Action": "s3:GetObject", "Resource": format!("arn:aws:s3:::{DATA_BUCKET}/allowed/*"),
    }]});
    iam.put_role_policy()
        .role_name(ROLE)
        .policy_name("read-allowed")
        .policy_document(policy.to_string())
        .send()
        .await
        .expect("PutRolePolicy");
    role
}

/// An STS client with no credentials at all: AssumeRoleWithWebIdentity is an unsigned call, the token is the
/// credential.
fn anonymous_sts(cloud: &LocalCloud) -> aws_sdk_sts::Client {
    let config = aws_sdk_sts::Config::builder()
        .behavior_version(aws_sdk_sts::config::BehaviorVersion::latest())
        .region(aws_sdk_sts::config::Region::new(REGION))
        .endpoint_url(&cloud.record.endpoint)
        .build();
    aws_sdk_sts::Client::from_conf(config)
}

/// AssumeRoleWithWebIdentity: the credentials, or the error code AWS answers with.
async fn assume(sts: &aws_sdk_sts::Client, role: &str, token: &str) -> Result<Credentials, String> {
    match sts
        .assume_role_with_web_identity()
        .role_arn(role)
        .role_session_name("pod-reader-0")
        .web_identity_token(token)
        .send()
        .await
    {
        Ok(out) => {
            let c = out.credentials.expect("credentials");
            Ok(Credentials::new(
                c.access_key_id,
                c.secret_access_key,
                Some(c.session_token),
                None,
                "web-identity",
            ))
        }
        Err(e) => Err(aws_sdk_sts::error::ProvideErrorMetadata::code(&e)
            .map(str::to_string)
            .unwrap_or_else(|| format!("{}", aws_sdk_sts::error::DisplayErrorContext(&e)))),
    }
}

fn s3_as(cloud: &LocalCloud, credentials: Credentials) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new(REGION))
        .endpoint_url(&cloud.record.endpoint)
        .force_path_style(true)
        .credentials_provider(credentials)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// The role's credentials read what its policy allows, and nothing else.
async fn assert_role_permissions(cloud: &LocalCloud, credentials: Credentials, stage: &str) {
    assert_role_permissions_in(cloud, credentials, DATA_BUCKET, stage).await
}

/// The role's credentials read `allowed/report.txt` of `bucket`, and nothing else of it.
async fn assert_role_permissions_in(
    cloud: &LocalCloud,
    credentials: Credentials,
    bucket: &str,
    stage: &str,
) {
    let s3 = s3_as(cloud, credentials);
    let allowed = s3
        .get_object()
        .bucket(bucket)
        .key("allowed/report.txt")
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{stage}: the role reads what its policy allows: {}",
                aws_sdk_s3::error::DisplayErrorContext(e)
            )
        });
    let body = allowed.body.collect().await.expect("body").into_bytes();
    assert_eq!(&body[..], b"allowed", "{stage}");
    let denied = s3
        .get_object()
        .bucket(bucket)
        .key("other/secret.txt")
        .send()
        .await
        .expect_err("a key outside the role's policy");
    assert_eq!(
        aws_sdk_s3::error::ProvideErrorMetadata::code(&denied),
        Some("AccessDenied"),
        "{stage}: {}",
        aws_sdk_s3::error::DisplayErrorContext(&denied)
    );
    let denied = s3
        .put_object()
        .bucket(bucket)
        .key("allowed/written.txt")
        .body(b"x".to_vec().into())
        .send()
        .await
        .expect_err("an action outside the role's policy");
    assert_eq!(
        aws_sdk_s3::error::ProvideErrorMetadata::code(&denied),
        Some("AccessDenied"),
        "{stage}: {}",
        aws_sdk_s3::error::DisplayErrorContext(&denied)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_assume_their_role_and_nothing_else_across_a_key_rotation() {
    let cloud = LocalCloud::start();
    create_bucket(&cloud, DISCOVERY_BUCKET).await;
    create_bucket(&cloud, DATA_BUCKET).await;
    for (key, body) in [
        ("allowed/report.txt", "allowed"),
        ("other/secret.txt", "secret"),
    ] {
        cloud
            .s3()
            .put_object()
            .bucket(DATA_BUCKET)
            .key(key)
            .body(body.as_bytes().to_vec().into())
            .send()
            .await
            .expect("PutObject");
    }
    let old = SigningKey::generate();
    publish(&cloud, &[&old]).await;
    let role = create_provider_and_role(&cloud).await;
    let sts = anonymous_sts(&cloud);

    // Only the published documents are public: the data bucket is not readable anonymously.
    let (status, _) = http(
        endpoint_addr(&cloud.record.endpoint),
        "GET",
        &format!("/{DATA_BUCKET}/allowed/report.txt"),
        &[],
    )
    .expect("GET");
    assert_eq!(
        status, 403,
        "an object that is not public, read anonymously"
    );

    // The API server's token verifies against the published JWKS, and assumes the role.
    let good = token(&old, &old.kid, NAMESPACE, ACCOUNT, AUDIENCE);
    let claims =
        verify_with_published_jwks(&cloud, &good).expect("verifies against the published JWKS");
    assert_eq!(
        claims.sub,
        format!("system:serviceaccount:{NAMESPACE}:{ACCOUNT}")
    );
    let credentials = assume(&sts, &role, &good)
        .await
        .expect("AssumeRoleWithWebIdentity");
    assert_role_permissions(&cloud, credentials, "one key").await;

    // Refused: another service account (the trust policy's sub), another audience (not a client id of the
    // provider), a key the JWKS does not hold (under the published kid, and under its own).
    let stranger = SigningKey::generate();
    let refusals = [
        (
            "another service account",
            token(&old, &old.kid, NAMESPACE, "writer", AUDIENCE),
            "AccessDenied",
        ),
        (
            "another namespace",
            token(&old, &old.kid, "team-b", ACCOUNT, AUDIENCE),
            "AccessDenied",
        ),
        (
            "another audience",
            token(&old, &old.kid, NAMESPACE, ACCOUNT, "sts.amazonaws.com"),
            "InvalidIdentityToken",
        ),
        (
            "a key not in the JWKS, published kid",
            token(&stranger, &old.kid, NAMESPACE, ACCOUNT, AUDIENCE),
            "InvalidIdentityToken",
        ),
        (
            "a key not in the JWKS, its own kid",
            token(&stranger, &stranger.kid, NAMESPACE, ACCOUNT, AUDIENCE),
            "InvalidIdentityToken",
        ),
    ];
    for (what, bad, expected) in &refusals {
        assert_eq!(
            assume(&sts, &role, bad).await.err().as_deref(),
            Some(*expected),
            "{what}"
        );
    }
    // The relying party's own check refuses the forged signature too.
    assert!(verify_with_published_jwks(&cloud, &refusals[3].1).is_err());

    // A key rotation's stages: the new key published beside the old one (tokens of both verify and assume), the
    // new key signing (still both), the old key retired (only the new key's tokens).
    let new = SigningKey::generate();
    publish(&cloud, &[&old, &new]).await;
    for (stage, signer) in [
        ("both published, old signs", &old),
        ("both published, new signs", &new),
    ] {
        let t = token(signer, &signer.kid, NAMESPACE, ACCOUNT, AUDIENCE);
        verify_with_published_jwks(&cloud, &t).unwrap_or_else(|e| panic!("{stage}: {e}"));
        let credentials = assume(&sts, &role, &t)
            .await
            .unwrap_or_else(|e| panic!("{stage}: {e}"));
        assert_role_permissions(&cloud, credentials, stage).await;
    }
    publish(&cloud, &[&new]).await;
    let t = token(&new, &new.kid, NAMESPACE, ACCOUNT, AUDIENCE);
    let credentials = assume(&sts, &role, &t)
        .await
        .expect("old key retired, new signs");
    assert_role_permissions(&cloud, credentials, "old key retired").await;
    let retired = token(&old, &old.kid, NAMESPACE, ACCOUNT, AUDIENCE);
    assert!(verify_with_published_jwks(&cloud, &retired).is_err());
    assert_eq!(
        assume(&sts, &role, &retired).await.err().as_deref(),
        Some("InvalidIdentityToken"),
        "a token of the retired key"
    );
}

/// The spec-driven flow: a cluster with `spec.serviceAccountIssuerDiscovery` (the AWS OIDC provider on) and one
/// `spec.iam.serviceAccountExternalPermissions` entry (read `allowed/*` of the data bucket). After `update cluster
/// --yes`: the published JWKS, read over HTTP from the issuer Ballast published, verifies a token signed with the
/// cluster's service-account key from the store as the API server signs it; that token assumes the role Ballast
/// made, whose credentials read what the entry allows and nothing else; another service account's, another
/// audience's and a foreign key's tokens are refused. Then `rotate service-account` through its stages, each
/// followed by `update cluster --yes`: the key that signs at that stage (the old one after `add`, the new one
/// after `promote` and `drop`) still assumes the role, and after `drop` the old key's tokens no longer do.
mod spec_driven {
    use super::*;
    use ballast_e2e::operator::{ballast_cli, ballast_cli_on, STATE_BUCKET};

    const CLUSTER: &str = "irsa.example.com";
    const OIDC_BUCKET: &str = "irsa-oidc";
    const DATA: &str = "irsa-team-data";

    /// A second entry, `team-a/gone`, with a managed and an inline policy: created, then removed from the
    /// spec, its role pruned.
    const GONE: &str = "gone";

    fn spec() -> String {
        spec_with(None)
    }

    /// The spec, with `team-a/gone` when given the ARN of its managed policy.
    fn spec_with(gone_policy: Option<&str>) -> String {
        let extra = if let Some(policy) = gone_policy {
            format!(
                "    - name: {GONE}
      namespace: {NAMESPACE}
      aws:
        policyARNs: [{policy}]
        inlinePolicy: '[{{\"Effect\": \"Allow\", \"Action\": [\"s3:GetObject\"], \"Resource\": [\"arn:aws:s3:::{DATA}/other/*\"]}}]'
"
            )
        } else {
            String::new()
        };
        format!(
            "apiVersion: ballast.dev/v1alpha1
kind: Cluster
metadata:
  name: {CLUSTER}
spec:
  kubernetesVersion: 1.36.4
  subnets:
  - {{name: us-west-2a, zone: us-west-2a}}
  serviceAccountIssuerDiscovery:
    discoveryStore: s3://{OIDC_BUCKET}/{CLUSTER}
    enableAWSOIDCProvider: true
  iam:
    serviceAccountExternalPermissions:
    - name: {ACCOUNT}
      namespace: {NAMESPACE}
      aws:
        inlinePolicy: '[{{\"Effect\": \"Allow\", \"Action\": [\"s3:GetObject\"], \"Resource\": [\"arn:aws:s3:::{DATA}/allowed/*\"]}}]'
{extra}---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {{name: control-plane}}
spec: {{role: ControlPlane}}
"
        )
    }

    /// An object of the cluster in the state store (the operator's admin keys read it).
    async fn stored(cloud: &LocalCloud, key: &str) -> String {
        cloud
            .s3_text(STATE_BUCKET, &format!("clusters/{CLUSTER}/{key}"))
            .await
    }

    /// The service-account key `pki/service-account/...` as a signing key with the API server's kid.
    async fn service_account_key(cloud: &LocalCloud, dir: &str) -> SigningKey {
        let pem = stored(cloud, &format!("{dir}/key.pem")).await;
        let pair = KeyPair::from_pem(&pem).expect("the service-account key is a PEM private key");
        let kid = b64url(&Sha256::digest(pair.subject_public_key_info()));
        SigningKey { pair, kid }
    }

    /// The rotation's new key's directory (`pki/service-account/<id>`).
    async fn added_key_dir(cloud: &LocalCloud) -> String {
        let listed = cloud
            .s3()
            .list_objects_v2()
            .bucket(STATE_BUCKET)
            .prefix(format!("clusters/{CLUSTER}/pki/service-account/"))
            .send()
            .await
            .expect("ListObjectsV2");
        let dirs: Vec<String> = listed
            .contents()
            .iter()
            .filter_map(|o| o.key())
            .filter_map(|k| k.strip_prefix(&format!("clusters/{CLUSTER}/")))
            .filter_map(|k| k.strip_suffix("/key.pem"))
            .filter(|d| *d != "pki/service-account")
            .map(str::to_string)
            .collect();
        assert_eq!(dirs.len(), 1, "one added service-account key: {dirs:?}");
        dirs[0].clone()
    }

    /// The published documents, read over HTTP as STS reads them: the discovery document at the issuer, then the
    /// JWKS its `jwks_uri` names. The issuer on the local cloud is the emulator's path-style S3 URL.
    fn published_jwks(cloud: &LocalCloud, issuer: &str) -> JwkSet {
        let addr = endpoint_addr(&cloud.record.endpoint);
        let path_of = |url: &str| {
            url.strip_prefix(&cloud.record.endpoint)
                .unwrap_or_else(|| panic!("{url} is not on the local cloud's S3"))
                .to_string()
        };
        let (status, body) = http(
            addr,
            "GET",
            &path_of(&format!("{issuer}/.well-known/openid-configuration")),
            &[],
        )
        .expect("GET");
        assert_eq!(status, 200, "discovery document: {body}");
        let discovery: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(discovery["issuer"], issuer);
        let (status, body) = http(
            addr,
            "GET",
            &path_of(discovery["jwks_uri"].as_str().expect("jwks_uri")),
            &[],
        )
        .expect("GET");
        assert_eq!(status, 200, "JWKS: {body}");
        serde_json::from_str(&body).expect("a JWK set")
    }

    /// A token as the API server signs it, for `issuer`.
    fn api_server_token(
        key: &SigningKey,
        issuer: &str,
        namespace: &str,
        name: &str,
        aud: &str,
    ) -> String {
        let now = now();
        let claims = Claims {
            iss: issuer.to_string(),
            sub: format!("system:serviceaccount:{namespace}:{name}"),
            aud: vec![aud.to_string()],
            exp: now + 3600,
            iat: now,
            nbf: now,
            kubernetes: serde_json::json!({
                "namespace": namespace,
                "pod": {"name": format!("{name}-0"), "uid": "4c2f7a51-0000-4000-8000-000000000003"},
                "serviceaccount": {"name": name, "uid": "4c2f7a51-0000-4000-8000-000000000004"},
            }),
        };
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(key.kid.clone());
        jsonwebtoken::encode(
            &header,
            &claims,
            &EncodingKey::from_ec_der(&key.pair.serialize_der()),
        )
        .expect("sign")
    }

    fn verifies(jwks: &JwkSet, token: &str, issuer: &str) -> Result<(), String> {
        let kid = jsonwebtoken::decode_header(token)
            .map_err(|e| e.to_string())?
            .kid
            .ok_or("no kid")?;
        let jwk = jwks
            .find(&kid)
            .ok_or_else(|| format!("no key {kid} in the published JWKS"))?;
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_audience(&[AUDIENCE]);
        validation.set_issuer(&[issuer]);
        let key = DecodingKey::from_jwk(jwk).map_err(|e| e.to_string())?;
        jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn update(cloud: &LocalCloud, what: &str) {
        let out = ballast_cli_on(cloud, CLUSTER)
            .args(["update", "cluster", "--yes"])
            .output()
            .expect("ballast update cluster");
        assert!(
            out.status.success(),
            "update cluster ({what}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn rotate(cloud: &LocalCloud, stage: &str) {
        let out = ballast_cli_on(cloud, CLUSTER)
            .args(["rotate", "service-account", "--stage", stage])
            .output()
            .expect("ballast rotate");
        assert!(
            out.status.success(),
            "rotate service-account --stage {stage}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The issuer Ballast published: the discovery store's path-style URL on the local cloud's S3.
    fn issuer(cloud: &LocalCloud) -> String {
        format!("{}/{OIDC_BUCKET}/{CLUSTER}", cloud.record.endpoint)
    }

    async fn role_arn(cloud: &LocalCloud) -> String {
        let name = format!("{ACCOUNT}.{NAMESPACE}.sa.{CLUSTER}");
        cloud
            .iam()
            .get_role()
            .role_name(&name)
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "GetRole {name}: {}",
                    aws_sdk_iam::error::DisplayErrorContext(e)
                )
            })
            .role
            .expect("role")
            .arn
    }

    /// A token of `signer` verifies against the published JWKS and assumes the role, whose credentials do what
    /// the entry allows and nothing else.
    async fn signer_assumes(cloud: &LocalCloud, signer: &SigningKey, stage: &str) {
        let issuer = issuer(cloud);
        let jwks = published_jwks(cloud, &issuer);
        let token = api_server_token(signer, &issuer, NAMESPACE, ACCOUNT, AUDIENCE);
        verifies(&jwks, &token, &issuer).unwrap_or_else(|e| panic!("{stage}: {e}"));
        let credentials = assume(&anonymous_sts(cloud), &role_arn(cloud).await, &token)
            .await
            .unwrap_or_else(|e| panic!("{stage}: AssumeRoleWithWebIdentity: {e}"));
        assert_role_permissions_in(cloud, credentials, DATA, stage).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn update_cluster_publishes_keys_whose_tokens_assume_the_service_accounts_role_through_a_rotation(
    ) {
        let cloud = LocalCloud::start();
        cloud.prepare_for_ballast(STATE_BUCKET).await;
        create_bucket(&cloud, OIDC_BUCKET).await;
        create_bucket(&cloud, DATA).await;
        for (key, body) in [
            ("allowed/report.txt", "allowed"),
            ("other/secret.txt", "secret"),
        ] {
            cloud
                .s3()
                .put_object()
                .bucket(DATA)
                .key(key)
                .body(body.as_bytes().to_vec().into())
                .send()
                .await
                .expect("PutObject");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("cluster.yaml");
        // The emulator holds no AWS managed policy: the second entry's is the account's own.
        let gone_policy = cloud
            .iam()
            .create_policy()
            .policy_name("irsa-gone-extra")
            .policy_document(
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:ListBucket","Resource":"*"}]}"#,
            )
            .send()
            .await
            .expect("CreatePolicy")
            .policy
            .and_then(|p| p.arn)
            .expect("the policy's ARN");
        std::fs::write(&file, spec_with(Some(&gone_policy))).expect("spec file");
        let out = ballast_cli(&cloud)
            .args(["create", "-f"])
            .arg(&file)
            .output()
            .expect("ballast create -f");
        assert!(
            out.status.success(),
            "create -f: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        update(&cloud, "create");
        prune_a_removed_service_accounts_role(&cloud, &file).await;

        let old = service_account_key(&cloud, "pki/service-account").await;
        let issuer = issuer(&cloud);
        let jwks = published_jwks(&cloud, &issuer);
        assert_eq!(jwks.keys.len(), 1, "one key before any rotation");
        assert!(
            jwks.find(&old.kid).is_some(),
            "the JWKS names the key by the API server's kid"
        );
        signer_assumes(&cloud, &old, "created").await;

        let role = role_arn(&cloud).await;
        let sts = anonymous_sts(&cloud);
        let stranger = SigningKey::generate();
        let refusals = [
            (
                "another service account",
                api_server_token(&old, &issuer, NAMESPACE, "writer", AUDIENCE),
                "AccessDenied",
            ),
            (
                "another audience",
                api_server_token(&old, &issuer, NAMESPACE, ACCOUNT, "sts.amazonaws.com"),
                "InvalidIdentityToken",
            ),
            (
                "a key not in the JWKS",
                api_server_token(&stranger, &issuer, NAMESPACE, ACCOUNT, AUDIENCE),
                "InvalidIdentityToken",
            ),
        ];
        for (what, bad, expected) in &refusals {
            assert_eq!(
                assume(&sts, &role, bad).await.err().as_deref(),
                Some(*expected),
                "{what}"
            );
        }
        assert!(
            verifies(&jwks, &refusals[2].1, &issuer).is_err(),
            "a foreign key does not verify"
        );

        rotate(&cloud, "add");
        update(&cloud, "add");
        let new = service_account_key(&cloud, &added_key_dir(&cloud).await).await;
        let jwks = published_jwks(&cloud, &issuer);
        assert!(
            jwks.find(&old.kid).is_some() && jwks.find(&new.kid).is_some(),
            "both keys published after add"
        );
        signer_assumes(&cloud, &old, "add (the old key signs)").await;

        rotate(&cloud, "promote");
        update(&cloud, "promote");
        signer_assumes(&cloud, &new, "promote (the new key signs)").await;
        signer_assumes(
            &cloud,
            &old,
            "promote (tokens of the old key, still trusted)",
        )
        .await;

        rotate(&cloud, "drop");
        update(&cloud, "drop");
        signer_assumes(&cloud, &new, "drop (the new key signs)").await;
        let jwks = published_jwks(&cloud, &issuer);
        assert!(
            jwks.find(&old.kid).is_none(),
            "the dropped key leaves the JWKS"
        );
        let retired = api_server_token(&old, &issuer, NAMESPACE, ACCOUNT, AUDIENCE);
        assert_eq!(
            assume(&sts, &role, &retired).await.err().as_deref(),
            Some("InvalidIdentityToken"),
            "a token of the dropped key"
        );

        delete_cluster_removes_irsa(&cloud).await;
    }

    /// A role already under the name of `team-a/reader`'s, tagged as this cluster's (owned) but as the role of
    /// another service account (`team-a/admin`, as a collision of names would leave it): `update cluster` refuses,
    /// preview and `--yes` alike, naming the role, the tag and what to do, and the role keeps its trust and tags
    /// (never adopted or rewritten).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn update_refuses_a_role_under_the_name_tagged_for_another_service_account() {
        let cloud = LocalCloud::start();
        cloud.prepare_for_ballast(STATE_BUCKET).await;
        create_bucket(&cloud, OIDC_BUCKET).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("cluster.yaml");
        std::fs::write(&file, spec()).expect("spec file");
        let out = ballast_cli(&cloud)
            .args(["create", "-f"])
            .arg(&file)
            .output()
            .expect("ballast create -f");
        assert!(
            out.status.success(),
            "create -f: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let name = format!("{ACCOUNT}.{NAMESPACE}.sa.{CLUSTER}");
        let owned = format!("kubernetes.io/cluster/{CLUSTER}");
        make_role(
            &cloud,
            &name,
            &[
                (owned.as_str(), "owned"),
                ("ballast.dev/service-account", "team-a/admin"),
            ],
        )
        .await;
        let before = cloud
            .iam()
            .get_role()
            .role_name(&name)
            .send()
            .await
            .expect("GetRole")
            .role
            .expect("role");
        for args in [&["update", "cluster"][..], &["update", "cluster", "--yes"]] {
            let out = ballast_cli_on(&cloud, CLUSTER)
                .args(args)
                .output()
                .expect("ballast update cluster");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(!out.status.success(), "{args:?} succeeded: {text}");
            for part in [
                format!("IamRole {name}"),
                format!("is the role of service account {NAMESPACE}/{ACCOUNT}"),
                "tagged ballast.dev/service-account=team-a/admin".to_string(),
                "neither adopts nor rewrites it".to_string(),
            ] {
                assert!(text.contains(&part), "{args:?}: {part:?} in: {text}");
            }
        }
        let after = cloud
            .iam()
            .get_role()
            .role_name(&name)
            .send()
            .await
            .expect("GetRole")
            .role
            .expect("role");
        assert_eq!(
            after.assume_role_policy_document(),
            before.assume_role_policy_document(),
            "the trust was rewritten"
        );
        assert_eq!(after.tags(), before.tags(), "the tags were rewritten");
        let attached = cloud
            .iam()
            .list_attached_role_policies()
            .role_name(&name)
            .send()
            .await
            .expect("ListAttachedRolePolicies");
        let inline = cloud
            .iam()
            .list_role_policies()
            .role_name(&name)
            .send()
            .await
            .expect("ListRolePolicies");
        assert!(
            attached.attached_policies().is_empty() && inline.policy_names().is_empty(),
            "policies put on another account's role: {attached:?} {inline:?}"
        );
    }

    async fn role_exists(cloud: &LocalCloud, name: &str) -> bool {
        cloud.iam().get_role().role_name(name).send().await.is_ok()
    }

    /// A role beside the cluster's, made by the test: tagged as a service account's (`tags`), trusting EC2.
    async fn make_role(cloud: &LocalCloud, name: &str, tags: &[(&str, &str)]) {
        let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
        let tags: Vec<aws_sdk_iam::types::Tag> = tags
            .iter()
            .map(|(k, v)| {
                aws_sdk_iam::types::Tag::builder()
                    .key(*k)
                    .value(*v)
                    .build()
                    .expect("tag")
            })
            .collect();
        cloud
            .iam()
            .create_role()
            .role_name(name)
            .assume_role_policy_document(trust)
            .set_tags(Some(tags))
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "CreateRole {name}: {}",
                    aws_sdk_iam::error::DisplayErrorContext(e)
                )
            });
    }

    /// `team-a/gone` was created with the cluster (its role with a managed and an inline policy). Beside it: an
    /// operator's untagged role and another cluster's tagged role, both named like service-account roles. With
    /// the entry removed from the spec (`replace -f`), `update cluster` plans the role's deletion and deletes
    /// nothing; `--yes` deletes it (policies first), and the entry's role, the operator's and the other
    /// cluster's stay. A second run plans nothing.
    async fn prune_a_removed_service_accounts_role(cloud: &LocalCloud, file: &std::path::Path) {
        let gone = format!("{GONE}.{NAMESPACE}.sa.{CLUSTER}");
        let kept = format!("{ACCOUNT}.{NAMESPACE}.sa.{CLUSTER}");
        let operators = format!("operator.{NAMESPACE}.sa.{CLUSTER}");
        let neighbours = format!("{GONE}.{NAMESPACE}.sa.other.example.com");
        make_role(cloud, &operators, &[]).await;
        make_role(
            cloud,
            &neighbours,
            &[
                ("kubernetes.io/cluster/other.example.com", "owned"),
                ("ballast.dev/service-account", "team-a/gone"),
            ],
        )
        .await;
        assert!(role_exists(cloud, &gone).await, "{gone} created");
        let attached = cloud
            .iam()
            .list_attached_role_policies()
            .role_name(&gone)
            .send()
            .await
            .expect("ListAttachedRolePolicies");
        assert_eq!(attached.attached_policies().len(), 1, "{attached:?}");

        std::fs::write(file, spec()).expect("spec file");
        let out = ballast_cli_on(cloud, CLUSTER)
            .args(["replace", "-f"])
            .arg(file)
            .output()
            .expect("ballast replace -f");
        assert!(
            out.status.success(),
            "replace -f: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let preview = ballast_cli_on(cloud, CLUSTER)
            .args(["update", "cluster"])
            .output()
            .expect("ballast update cluster");
        let plan = String::from_utf8_lossy(&preview.stdout).to_string();
        assert!(preview.status.success(), "preview: {plan}");
        assert!(
            plan.contains(&format!(
                "  - IamRole {gone}\n        serviceAccount: {NAMESPACE}/{GONE} -> (no longer in spec.iam.serviceAccountExternalPermissions)"
            )),
            "{plan}"
        );
        for other in [&kept, &operators, &neighbours] {
            assert!(
                !plan.contains(&format!("IamRole {other}")),
                "{other} in: {plan}"
            );
        }
        assert!(role_exists(cloud, &gone).await, "a plan deletes nothing");

        update(cloud, "the entry removed");
        assert!(!role_exists(cloud, &gone).await, "{gone} pruned");
        for other in [&kept, &operators, &neighbours] {
            assert!(role_exists(cloud, other).await, "{other} was deleted");
        }
        let again = ballast_cli_on(cloud, CLUSTER)
            .args(["update", "cluster"])
            .output()
            .expect("ballast update cluster");
        let plan = String::from_utf8_lossy(&again.stdout);
        assert!(!plan.contains("IamRole"), "a second run: {plan}");
        // The test's own roles go, so the delete below finds exactly the cluster's.
        for other in [&operators, &neighbours] {
            cloud
                .iam()
                .delete_role()
                .role_name(other)
                .send()
                .await
                .expect("DeleteRole");
        }
    }

    /// The IRSA resources of the cluster: its service-account roles (the entry's and the add-ons'), by the
    /// `.sa.<cluster>` suffix of their names, and its OIDC provider, by the issuer in its ARN.
    async fn irsa_resources(cloud: &LocalCloud) -> (Vec<String>, Vec<String>) {
        let iam = cloud.iam();
        let roles: Vec<String> = iam
            .list_roles()
            .send()
            .await
            .expect("ListRoles")
            .roles()
            .iter()
            .map(|r| r.role_name().to_string())
            .filter(|n| n.ends_with(&format!(".sa.{CLUSTER}")))
            .collect();
        let providers: Vec<String> = iam
            .list_open_id_connect_providers()
            .send()
            .await
            .expect("ListOpenIDConnectProviders")
            .open_id_connect_provider_list()
            .iter()
            .filter_map(|p| p.arn())
            .filter(|arn| arn.ends_with(&format!("/{OIDC_BUCKET}/{CLUSTER}")))
            .map(str::to_string)
            .collect();
        (roles, providers)
    }

    async fn exists(cloud: &LocalCloud, bucket: &str, key: &str) -> bool {
        cloud
            .s3()
            .head_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .is_ok()
    }

    /// `delete cluster`'s preview lists the roles, the provider and the two documents; `--yes` deletes them all
    /// (the roles with their policies) and nothing else of the two buckets; the leftovers scan finds nothing.
    async fn delete_cluster_removes_irsa(cloud: &LocalCloud) {
        let documents = [
            format!("{CLUSTER}/.well-known/openid-configuration"),
            format!("{CLUSTER}/openid/v1/jwks"),
        ];
        // Beside the documents: another object under the discovery prefix, one at the bucket's root, one in
        // the state bucket outside the cluster's prefix. All must stay.
        let kept = [
            (OIDC_BUCKET, format!("{CLUSTER}/notes/keep.txt")),
            (OIDC_BUCKET, "keep.txt".to_string()),
            (STATE_BUCKET, "unrelated/keep.txt".to_string()),
        ];
        for (bucket, key) in &kept {
            cloud
                .s3()
                .put_object()
                .bucket(*bucket)
                .key(key)
                .body(b"keep".to_vec().into())
                .send()
                .await
                .expect("PutObject");
        }
        let (roles, providers) = irsa_resources(cloud).await;
        let account_role = format!("{ACCOUNT}.{NAMESPACE}.sa.{CLUSTER}");
        assert!(roles.contains(&account_role), "roles before: {roles:?}");
        assert_eq!(providers.len(), 1, "the cluster's provider: {providers:?}");
        for key in &documents {
            assert!(exists(cloud, OIDC_BUCKET, key).await, "{key} published");
        }

        let preview = ballast_cli_on(cloud, CLUSTER)
            .args(["delete", "cluster"])
            .output()
            .expect("ballast delete cluster");
        let listed = String::from_utf8_lossy(&preview.stdout);
        assert!(preview.status.success(), "preview: {listed}");
        for role in &roles {
            assert!(
                listed.contains(&format!("IamRole {role}")),
                "{role} in: {listed}"
            );
        }
        assert!(
            listed.contains(&format!("OidcProvider {}", providers[0])),
            "{listed}"
        );
        for key in &documents {
            assert!(
                listed.contains(&format!("DiscoveryDocument s3://{OIDC_BUCKET}/{key}")),
                "{key} in: {listed}"
            );
        }
        let (roles_after_preview, _) = irsa_resources(cloud).await;
        assert_eq!(roles_after_preview, roles, "a preview deletes nothing");

        let out = ballast_cli_on(cloud, CLUSTER)
            .args(["delete", "cluster", "--yes"])
            .output()
            .expect("ballast delete cluster --yes");
        assert!(
            out.status.success(),
            "delete cluster --yes: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            irsa_resources(cloud).await,
            (Vec::new(), Vec::new()),
            "roles and provider left"
        );
        for role in &roles {
            let gone = cloud.iam().get_role().role_name(role).send().await;
            assert!(gone.is_err(), "{role} still exists");
        }
        for key in &documents {
            assert!(!exists(cloud, OIDC_BUCKET, key).await, "{key} still there");
        }
        for (bucket, key) in &kept {
            assert!(
                exists(cloud, bucket, key).await,
                "s3://{bucket}/{key} was deleted"
            );
        }
        let left = ballast_e2e::leftovers::scan(&cloud.sdk_config(), CLUSTER).await;
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}
