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
//! This test publishes the discovery documents and creates the provider and the role through the SDK, as
//! `update cluster` would: it proves the emulator and the trust-policy shape (`docs/irsa.md`); the spec-driven
//! flow (`ballast update cluster` and `ballast rotate service-account`) is not in this test yet. One cloud.
//! Needs the emulator's venv; fails (never skips) without it.

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
    let s3 = s3_as(cloud, credentials);
    let allowed = s3
        .get_object()
        .bucket(DATA_BUCKET)
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
        .bucket(DATA_BUCKET)
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
        .bucket(DATA_BUCKET)
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
