//! An IMDSv2 endpoint per emulated instance, bound on the instance's private IP and backed by the emulated EC2
//! API (the runner refreshes its [`InstanceMetadata`] from DescribeInstances).
//!
//! As on EC2 with `HttpTokens=required`: `PUT /latest/api/token` with `X-aws-ec2-metadata-token-ttl-seconds`
//! (1..=21600, else 400) returns a session token; every other request needs a valid
//! `X-aws-ec2-metadata-token` (else 401); any request carrying `X-Forwarded-For` is refused with 403 (IMDS
//! rejects proxied requests). Role credentials are real: `sts:AssumeRole` of the role behind the instance's
//! instance profile, made by the emulator's EC2-service identity, cached until five minutes before they expire.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

const TOKEN_HEADER: &str = "x-aws-ec2-metadata-token";
const TTL_HEADER: &str = "x-aws-ec2-metadata-token-ttl-seconds";
const MAX_TOKEN_TTL: u64 = 21600;
/// Credentials are refreshed when they have less than this left, like EC2 does well before expiry.
const CREDENTIALS_REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// Tokens a single endpoint keeps at most; expired ones are pruned first (a misbehaving client cannot grow the
/// map without bound).
const MAX_TOKENS: usize = 4096;

/// What an instance's IMDS serves, from DescribeInstances (and DescribeInstanceAttribute for user-data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceMetadata {
    pub instance_id: String,
    pub account_id: String,
    pub ami_id: String,
    pub instance_type: String,
    pub private_ip: String,
    pub local_hostname: String,
    pub mac: String,
    pub availability_zone: String,
    pub region: String,
    pub subnet_id: String,
    pub vpc_id: String,
    pub architecture: String,
    /// RFC 3339.
    pub launch_time: String,
    pub tags: BTreeMap<String, String>,
    /// Decoded user-data; `None` when the instance has none (then `/latest/user-data` is 404).
    pub user_data: Option<Vec<u8>>,
    pub instance_profile: Option<InstanceProfileRef>,
}

/// The instance profile attached to an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceProfileRef {
    pub arn: String,
    pub id: String,
}

impl InstanceProfileRef {
    /// The profile's name: the last segment of its ARN (`...:instance-profile/path/NAME`).
    pub fn name(&self) -> &str {
        self.arn.rsplit('/').next().unwrap_or(&self.arn)
    }
}

/// Temporary credentials as IMDS serves them.
#[derive(Debug, Clone)]
pub struct RoleCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
    pub expiration: SystemTime,
}

/// Failures to produce role credentials (answered with 500 and logged).
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// GetInstanceProfile failed.
    #[error("reading instance profile {profile}: {message}")]
    Profile { profile: String, message: String },
    /// The instance profile holds no role.
    #[error("instance profile {profile_arn} has no role")]
    NoRole { profile_arn: String },
    /// AssumeRole failed (e.g. the role's trust policy does not name ec2.amazonaws.com).
    #[error("assuming role {role}: {message}")]
    AssumeRole { role: String, message: String },
    /// STS answered without credentials.
    #[error("AssumeRole of {role_arn} returned no credentials")]
    Empty { role_arn: String },
}

/// Where role credentials come from: the emulated IAM and STS, called as the EC2 service.
#[derive(Debug, Clone)]
pub struct CredentialIssuer {
    iam: aws_sdk_iam::Client,
    sts: aws_sdk_sts::Client,
}

impl CredentialIssuer {
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        CredentialIssuer {
            iam: aws_sdk_iam::Client::new(config),
            sts: aws_sdk_sts::Client::new(config),
        }
    }

    /// The role (name, ARN) in an instance profile.
    async fn role_of(
        &self,
        profile: &InstanceProfileRef,
    ) -> Result<(String, String), CredentialsError> {
        let out = self
            .iam
            .get_instance_profile()
            .instance_profile_name(profile.name())
            .send()
            .await
            .map_err(|e| CredentialsError::Profile {
                profile: profile.arn.clone(),
                message: crate::aws::error_chain(&e),
            })?;
        let role = out
            .instance_profile
            .and_then(|p| p.roles.into_iter().next())
            .ok_or_else(|| CredentialsError::NoRole {
                profile_arn: profile.arn.clone(),
            })?;
        Ok((role.role_name, role.arn))
    }

    async fn assume(
        &self,
        role_arn: &str,
        session: &str,
    ) -> Result<RoleCredentials, CredentialsError> {
        let out = self
            .sts
            .assume_role()
            .role_arn(role_arn)
            .role_session_name(session)
            .duration_seconds(3600)
            .send()
            .await
            .map_err(|e| CredentialsError::AssumeRole {
                role: role_arn.to_owned(),
                message: crate::aws::error_chain(&e),
            })?;
        let c = out.credentials.ok_or_else(|| CredentialsError::Empty {
            role_arn: role_arn.to_owned(),
        })?;
        let expiration = SystemTime::try_from(c.expiration).unwrap_or_else(|_| SystemTime::now());
        Ok(RoleCredentials {
            access_key_id: c.access_key_id,
            secret_access_key: c.secret_access_key,
            session_token: c.session_token,
            expiration,
        })
    }
}

/// Per-endpoint state shared by its handlers.
struct Shared {
    meta: RwLock<InstanceMetadata>,
    tokens: Mutex<HashMap<String, Instant>>,
    issuer: CredentialIssuer,
    /// (profile ARN it was resolved for, role name, role ARN).
    role: tokio::sync::Mutex<Option<(String, String, String)>>,
    /// (role ARN, credentials).
    credentials: tokio::sync::Mutex<Option<(String, RoleCredentials)>>,
    /// When the credentials were last fetched (IMDS's `LastUpdated`).
    credentials_updated: Mutex<Option<SystemTime>>,
}

/// A running IMDS endpoint; [`ImdsServer::close`] (or drop) stops it.
pub struct ImdsServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for ImdsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImdsServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ImdsServer {
    /// Binds `addr` and serves `meta`.
    pub async fn bind(
        addr: SocketAddr,
        meta: InstanceMetadata,
        issuer: CredentialIssuer,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        Self::serve(listener, meta, issuer)
    }

    /// Serves `meta` on a listener made elsewhere (a machine's link-local address, bound inside its network
    /// namespace: `machine::link`).
    pub fn serve(
        listener: tokio::net::TcpListener,
        meta: InstanceMetadata,
        issuer: CredentialIssuer,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            meta: RwLock::new(meta),
            tokens: Mutex::new(HashMap::new()),
            issuer,
            role: tokio::sync::Mutex::new(None),
            credentials: tokio::sync::Mutex::new(None),
            credentials_updated: Mutex::new(None),
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = rx.await;
            });
            if let Err(e) = serve.await {
                tracing::warn!(%addr, error = %e, "IMDS endpoint failed");
            }
        });
        Ok(ImdsServer {
            addr,
            shared,
            shutdown: Some(tx),
            task: Some(task),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://IP:PORT`, for `AWS_EC2_METADATA_SERVICE_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Fetches the instance role's credentials before anyone asks, as EC2 has them ready when an instance boots:
    /// nodeup's first request is then answered from the cache instead of waiting on the emulator (the SDK gives
    /// IMDS one second, and a hundred instances booting at once each asking the emulator to assume a role made
    /// every first request time out and back off). A failure is only logged: the first request tries again.
    pub async fn prewarm_credentials(&self) {
        let meta = match self.shared.meta.read() {
            Ok(meta) => meta.clone(),
            Err(_) => return,
        };
        let Some(profile) = meta.instance_profile.as_ref() else {
            return;
        };
        let warmed = async {
            let (_, role_arn) = role_of(&self.shared, profile).await?;
            credentials(&self.shared, &role_arn, &meta.instance_id).await
        }
        .await;
        if let Err(e) = warmed {
            tracing::warn!(instance_id = %meta.instance_id, error = %e, "prefetching role credentials failed; IMDS retries on request");
        }
    }

    /// Replaces what the endpoint serves (tags change while an instance runs).
    pub fn update(&self, meta: InstanceMetadata) {
        if let Ok(mut current) = self.shared.meta.write() {
            if *current != meta {
                *current = meta;
            }
        }
    }

    /// Stops answering: no new connections, and open ones are cut after a short grace.
    pub async fn close(mut self) {
        self.stop();
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_millis(500), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }

    fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for ImdsServer {
    fn drop(&mut self) {
        self.stop();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, [("content-type", "text/plain")], body.into()).into_response()
}

fn status_only(status: StatusCode) -> Response {
    // IMDS answers errors with a small HTML page; clients only look at the status.
    text(status, status.canonical_reason().unwrap_or("error"))
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if headers.contains_key("x-forwarded-for") {
        return status_only(StatusCode::FORBIDDEN);
    }
    let path = uri.path();
    if path == "/latest/api/token" {
        return if method == Method::PUT {
            issue_token(&shared, &headers)
        } else {
            status_only(StatusCode::METHOD_NOT_ALLOWED)
        };
    }
    if !valid_token(&shared, &headers) {
        return status_only(StatusCode::UNAUTHORIZED);
    }
    if method != Method::GET && method != Method::HEAD {
        return status_only(StatusCode::METHOD_NOT_ALLOWED);
    }
    serve_get(&shared, path).await
}

fn issue_token(shared: &Shared, headers: &HeaderMap) -> Response {
    let ttl = headers
        .get(TTL_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let Some(ttl) = ttl.filter(|t| (1..=MAX_TOKEN_TTL).contains(t)) else {
        return status_only(StatusCode::BAD_REQUEST);
    };
    let token = random_token();
    let now = Instant::now();
    if let Ok(mut tokens) = shared.tokens.lock() {
        if tokens.len() >= MAX_TOKENS {
            tokens.retain(|_, expiry| *expiry > now);
        }
        if tokens.len() >= MAX_TOKENS {
            return status_only(StatusCode::TOO_MANY_REQUESTS);
        }
        tokens.insert(token.clone(), now + Duration::from_secs(ttl));
    }
    (
        StatusCode::OK,
        [
            ("content-type", "text/plain"),
            (TTL_HEADER, &ttl.to_string()),
        ],
        token,
    )
        .into_response()
}

fn random_token() -> String {
    use base64::Engine as _;
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn valid_token(shared: &Shared, headers: &HeaderMap) -> bool {
    let Some(token) = headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let Ok(tokens) = shared.tokens.lock() else {
        return false;
    };
    tokens
        .get(token)
        .is_some_and(|expiry| *expiry > Instant::now())
}

async fn serve_get(shared: &Shared, path: &str) -> Response {
    let meta = match shared.meta.read() {
        Ok(meta) => meta.clone(),
        Err(_) => return status_only(StatusCode::INTERNAL_SERVER_ERROR),
    };
    match path {
        "/latest/user-data" | "/latest/user-data/" => {
            return match meta.user_data {
                Some(data) => (
                    StatusCode::OK,
                    [("content-type", "application/octet-stream")],
                    Body::from(data),
                )
                    .into_response(),
                None => status_only(StatusCode::NOT_FOUND),
            }
        }
        "/latest/dynamic/instance-identity/document" => return json(&identity_document(&meta)),
        "/latest" | "/latest/" => return text(StatusCode::OK, "dynamic\nmeta-data\nuser-data"),
        _ => {}
    }
    let Some(rest) = path.strip_prefix("/latest/meta-data") else {
        return status_only(StatusCode::NOT_FOUND);
    };
    let rest = rest.trim_start_matches('/');
    if let Some(key) = rest
        .strip_prefix("iam")
        .filter(|k| k.is_empty() || k.starts_with('/'))
    {
        if let Some(response) = serve_iam(shared, &meta, key.trim_start_matches('/')).await {
            return response;
        }
    }
    let tree = metadata_tree(&meta);
    lookup(&tree, rest.trim_end_matches('/'))
}

/// IMDS's JSON responses are pretty-printed, as on EC2.
fn json<T: Serialize>(value: &T) -> Response {
    match serde_json::to_string_pretty(value) {
        Ok(body) => text(StatusCode::OK, body),
        Err(_) => status_only(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

/// The static part of `/latest/meta-data/`: leaf path -> value.
fn metadata_tree(meta: &InstanceMetadata) -> BTreeMap<String, String> {
    let mut tree = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        tree.insert(k.to_owned(), v.to_owned());
    };
    put("ami-id", &meta.ami_id);
    put("instance-id", &meta.instance_id);
    put("instance-type", &meta.instance_type);
    put("local-ipv4", &meta.private_ip);
    put("local-hostname", &meta.local_hostname);
    put("hostname", &meta.local_hostname);
    put("mac", &meta.mac);
    put("placement/availability-zone", &meta.availability_zone);
    put("placement/region", &meta.region);
    put("services/domain", "amazonaws.com");
    put("services/partition", "aws");
    let nic = format!("network/interfaces/macs/{}", meta.mac);
    put(&format!("{nic}/device-number"), "0");
    put(&format!("{nic}/local-ipv4s"), &meta.private_ip);
    put(&format!("{nic}/mac"), &meta.mac);
    put(&format!("{nic}/subnet-id"), &meta.subnet_id);
    put(&format!("{nic}/vpc-id"), &meta.vpc_id);
    if meta.instance_profile.is_some() {
        // Only for listings: `iam/...` is answered by `serve_iam`.
        put("iam/info", "");
    }
    if meta.tags.contains_key("aws:autoscaling:groupName") {
        put("autoscaling/target-lifecycle-state", "InService");
    }
    for (key, value) in &meta.tags {
        // A tag key with '/' would make a path IMDS cannot serve; EC2 skips such keys too.
        if !key.contains('/') {
            put(&format!("tags/instance/{key}"), value);
        }
    }
    tree
}

/// A leaf's value, or a directory's listing (sub-directories end with '/'), else 404.
fn lookup(tree: &BTreeMap<String, String>, path: &str) -> Response {
    if let Some(value) = tree.get(path) {
        return text(StatusCode::OK, value.clone());
    }
    let prefix = if path.is_empty() {
        String::new()
    } else {
        format!("{path}/")
    };
    let mut children: Vec<String> = Vec::new();
    for key in tree.keys().filter(|k| k.starts_with(&prefix)) {
        let rest = &key[prefix.len()..];
        let child = match rest.split_once('/') {
            Some((dir, _)) => format!("{dir}/"),
            None => rest.to_owned(),
        };
        if children.last() != Some(&child) {
            children.push(child);
        }
    }
    if children.is_empty() {
        return status_only(StatusCode::NOT_FOUND);
    }
    children.dedup();
    text(StatusCode::OK, children.join("\n"))
}

/// `iam/...` paths; `None` leaves the path to the static tree (which has no `iam/` entries: 404).
async fn serve_iam(shared: &Shared, meta: &InstanceMetadata, key: &str) -> Option<Response> {
    let profile = meta.instance_profile.as_ref()?;
    let key = key.trim_end_matches('/');
    let response = match key {
        "" => text(StatusCode::OK, "info\nsecurity-credentials/"),
        "info" => json(&IamInfo {
            code: "Success",
            last_updated: rfc3339(
                shared
                    .credentials_updated
                    .lock()
                    .ok()
                    .and_then(|u| *u)
                    .unwrap_or_else(SystemTime::now),
            ),
            instance_profile_arn: &profile.arn,
            instance_profile_id: &profile.id,
        }),
        "security-credentials" => match role_of(shared, profile).await {
            Ok((name, _)) => text(StatusCode::OK, name),
            Err(e) => internal_error(&meta.instance_id, &e),
        },
        _ => {
            let requested = key.strip_prefix("security-credentials/")?;
            let (name, arn) = match role_of(shared, profile).await {
                Ok(role) => role,
                Err(e) => return Some(internal_error(&meta.instance_id, &e)),
            };
            if requested != name {
                return Some(status_only(StatusCode::NOT_FOUND));
            }
            match credentials(shared, &arn, &meta.instance_id).await {
                Ok((c, updated)) => json(&CredentialsDocument {
                    code: "Success",
                    last_updated: rfc3339(updated),
                    kind: "AWS-HMAC",
                    access_key_id: &c.access_key_id,
                    secret_access_key: &c.secret_access_key,
                    token: &c.session_token,
                    expiration: rfc3339(c.expiration),
                }),
                Err(e) => internal_error(&meta.instance_id, &e),
            }
        }
    };
    Some(response)
}

fn internal_error(instance_id: &str, e: &CredentialsError) -> Response {
    tracing::warn!(instance_id, error = %e, "IMDS could not serve role credentials");
    status_only(StatusCode::INTERNAL_SERVER_ERROR)
}

async fn role_of(
    shared: &Shared,
    profile: &InstanceProfileRef,
) -> Result<(String, String), CredentialsError> {
    let mut cached = shared.role.lock().await;
    if let Some((arn, name, role_arn)) = cached.as_ref() {
        if *arn == profile.arn {
            return Ok((name.clone(), role_arn.clone()));
        }
    }
    let (name, role_arn) = shared.issuer.role_of(profile).await?;
    *cached = Some((profile.arn.clone(), name.clone(), role_arn.clone()));
    Ok((name, role_arn))
}

async fn credentials(
    shared: &Shared,
    role_arn: &str,
    instance_id: &str,
) -> Result<(RoleCredentials, SystemTime), CredentialsError> {
    let mut cached = shared.credentials.lock().await;
    if let Some((arn, creds)) = cached.as_ref() {
        let fresh = creds
            .expiration
            .duration_since(SystemTime::now())
            .is_ok_and(|left| left > CREDENTIALS_REFRESH_MARGIN);
        if arn == role_arn && fresh {
            let updated = shared
                .credentials_updated
                .lock()
                .ok()
                .and_then(|u| *u)
                .unwrap_or_else(SystemTime::now);
            return Ok((creds.clone(), updated));
        }
    }
    // EC2 names the session after the instance, so CloudTrail (and policies) can tell instances apart.
    let creds = shared.issuer.assume(role_arn, instance_id).await?;
    let now = SystemTime::now();
    if let Ok(mut updated) = shared.credentials_updated.lock() {
        *updated = Some(now);
    }
    *cached = Some((role_arn.to_owned(), creds.clone()));
    Ok((creds, now))
}

fn rfc3339(t: SystemTime) -> String {
    // IMDS uses whole seconds with a `Z` suffix.
    ballast_state::timestamp::unix_rfc3339(time::OffsetDateTime::from(t).unix_timestamp())
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct IamInfo<'a> {
    code: &'static str,
    last_updated: String,
    instance_profile_arn: &'a str,
    instance_profile_id: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct CredentialsDocument<'a> {
    code: &'static str,
    last_updated: String,
    #[serde(rename = "Type")]
    kind: &'static str,
    access_key_id: &'a str,
    secret_access_key: &'a str,
    token: &'a str,
    expiration: String,
}

/// `/latest/dynamic/instance-identity/document`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct IdentityDocument<'a> {
    account_id: &'a str,
    architecture: &'a str,
    availability_zone: &'a str,
    billing_products: Option<()>,
    devpay_product_codes: Option<()>,
    marketplace_product_codes: Option<()>,
    image_id: &'a str,
    instance_id: &'a str,
    instance_type: &'a str,
    kernel_id: Option<()>,
    pending_time: &'a str,
    private_ip: &'a str,
    ramdisk_id: Option<()>,
    region: &'a str,
    version: &'static str,
}

fn identity_document(meta: &InstanceMetadata) -> IdentityDocument<'_> {
    IdentityDocument {
        account_id: &meta.account_id,
        architecture: &meta.architecture,
        availability_zone: &meta.availability_zone,
        billing_products: None,
        devpay_product_codes: None,
        marketplace_product_codes: None,
        image_id: &meta.ami_id,
        instance_id: &meta.instance_id,
        instance_type: &meta.instance_type,
        kernel_id: None,
        pending_time: &meta.launch_time,
        private_ip: &meta.private_ip,
        ramdisk_id: None,
        region: &meta.region,
        version: "2017-09-30",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> InstanceMetadata {
        InstanceMetadata {
            instance_id: "i-1".into(),
            account_id: "123456789012".into(),
            ami_id: "ami-1".into(),
            instance_type: "t3.micro".into(),
            private_ip: "127.16.1.4".into(),
            local_hostname: "ip-127-16-1-4.us-west-2.compute.internal".into(),
            mac: "0a:00:00:00:00:01".into(),
            availability_zone: "us-west-2a".into(),
            region: "us-west-2".into(),
            subnet_id: "subnet-1".into(),
            vpc_id: "vpc-1".into(),
            architecture: "x86_64".into(),
            launch_time: "2025-01-01T00:00:00Z".into(),
            tags: BTreeMap::from([("Name".into(), "n1".into()), ("a/b".into(), "x".into())]),
            user_data: None,
            instance_profile: None,
        }
    }

    async fn body(r: Response) -> (StatusCode, String) {
        let status = r.status();
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn tree_serves_leaves_and_listings() {
        let tree = metadata_tree(&meta());
        assert_eq!(
            body(lookup(&tree, "instance-id")).await,
            (StatusCode::OK, "i-1".into())
        );
        assert_eq!(
            body(lookup(&tree, "placement")).await,
            (StatusCode::OK, "availability-zone\nregion".into())
        );
        assert_eq!(
            body(lookup(&tree, "tags/instance")).await,
            (StatusCode::OK, "Name".into())
        );
        let (status, listing) = body(lookup(&tree, "")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(listing.lines().any(|l| l == "network/"), "{listing}");
        assert_eq!(body(lookup(&tree, "nope")).await.0, StatusCode::NOT_FOUND);
        assert_eq!(
            body(lookup(
                &tree,
                "network/interfaces/macs/0a:00:00:00:00:01/subnet-id"
            ))
            .await,
            (StatusCode::OK, "subnet-1".into())
        );
    }

    #[test]
    fn profile_name_is_the_last_arn_segment() {
        let p = InstanceProfileRef {
            arn: "arn:aws:iam::123456789012:instance-profile/ballast/nodes.c1".into(),
            id: "AIPA".into(),
        };
        assert_eq!(p.name(), "nodes.c1");
    }

    #[test]
    fn rfc3339_has_whole_seconds() {
        assert_eq!(
            rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(1500)),
            "1970-01-01T00:00:01Z"
        );
    }
}
