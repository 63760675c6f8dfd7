//! The bootstrap service on control-plane nodes (I/O): HTTPS on [`super::PORT`] of the node's private IP, one
//! route ([`super::PATH`]). Each request goes through the pure checks of [`super::verify`], then STS (the
//! worker's signed GetCallerIdentity, sent to this node's own STS endpoint), EC2 (the instance the session
//! names) and IAM (its instance profile's role), and only then is a certificate signed ([`super::issue`]).
//! Refusals are logged with their reason and the instance when known; signed headers, keys and certificates
//! never are.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::issue::sign_node_certificate;
use super::sts::{
    parse_caller_identity, sts_endpoint, AssumedRole, CallerIdentity, GET_CALLER_IDENTITY_BODY,
};
use super::verify::{check_signed_request, decide, InstanceFacts, Refused, ReplayGuard};
use super::wire::{
    request_digest, CertificateRequest, CertificateResponse, Refusal, MAX_REQUEST_BYTES,
};

/// A TLS handshake and request must finish within this.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest node name (a DNS name) and CSR accepted.
const MAX_NODE_NAME: usize = 253;

/// What the service needs.
#[derive(Clone)]
pub struct ServerConfig {
    pub bind: SocketAddr,
    pub cluster: String,
    pub region: String,
    /// The service's serving certificate and key (PEM), issued by the Kubernetes CA on this node.
    pub tls_cert_pem: String,
    pub tls_key_pem: String,
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
}

// The CA key is in here: Debug shows where the service listens, nothing else.
impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("bind", &self.bind)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

/// The service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartServerError {
    /// Its certificate or key does not load.
    #[error("the bootstrap service's TLS certificate: {0}")]
    Tls(String),
    /// The port is taken or the address is not this node's.
    #[error("the bootstrap service cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

type StsClient = HttpClient<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// What every request shares.
struct Verifier {
    config: ServerConfig,
    sts_endpoint: String,
    sts: StsClient,
    ec2: aws_sdk_ec2::Client,
    iam: aws_sdk_iam::Client,
    replay: Mutex<ReplayGuard>,
}

/// A request's failure: refused (403, the worker's fault) or unavailable (503, an AWS call failed; try later).
enum Failure {
    Refused(Refused),
    Unavailable(String),
}

impl From<Refused> for Failure {
    fn from(r: Refused) -> Self {
        Failure::Refused(r)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Binds, then serves until the returned task is aborted (nodeup's end).
pub async fn start(config: ServerConfig) -> Result<tokio::task::JoinHandle<()>, StartServerError> {
    let tls = tls_acceptor(&config)?;
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .map_err(|source| StartServerError::Bind {
            addr: config.bind,
            source,
        })?;
    let aws = aws_config::from_env()
        .region(aws_config::Region::new(config.region.clone()))
        .load()
        .await;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider())
        .map_err(|e| StartServerError::Tls(format!("the system's root certificates: {e}")))?
        .https_or_http()
        .enable_http1()
        .build();
    let verifier = Arc::new(Verifier {
        sts_endpoint: sts_endpoint(&config.region, |n| std::env::var(n).ok()),
        sts: HttpClient::builder(TokioExecutor::new()).build(https),
        ec2: aws_sdk_ec2::Client::new(&aws),
        iam: aws_sdk_iam::Client::new(&aws),
        replay: Mutex::new(ReplayGuard::default()),
        config,
    });
    tracing::info!(addr = %verifier.config.bind, "node bootstrap service listening");
    Ok(tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "node bootstrap service: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (tls, verifier) = (tls.clone(), verifier.clone());
            tokio::spawn(async move {
                let served =
                    tokio::time::timeout(CONNECTION_TIMEOUT, async {
                        let stream = tls.accept(stream).await?;
                        let service = hyper::service::service_fn(move |req| {
                            let verifier = verifier.clone();
                            async move {
                                Ok::<_, std::convert::Infallible>(verifier.route(req, peer).await)
                            }
                        });
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await
                            .map_err(std::io::Error::other)
                    })
                    .await;
                if let Ok(Err(e)) = served {
                    tracing::debug!(%peer, error = %e, "node bootstrap connection ended");
                }
            });
        }
    }))
}

fn tls_acceptor(config: &ServerConfig) -> Result<tokio_rustls::TlsAcceptor, StartServerError> {
    let bad = |e: &dyn std::fmt::Display| StartServerError::Tls(e.to_string());
    let certs = CertificateDer::pem_slice_iter(config.tls_cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    let key = PrivateKeyDer::from_pem_slice(config.tls_key_pem.as_bytes()).map_err(|e| bad(&e))?;
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(&e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad(&e))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(server)))
}

fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

impl Verifier {
    async fn route(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
        if req.method() != Method::POST || req.uri().path() != super::PATH {
            let error = format!("only POST {} is served here", super::PATH);
            return json_response(StatusCode::NOT_FOUND, &Refusal { error });
        }
        let body = match Limited::new(req.into_body(), MAX_REQUEST_BYTES)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                let refused = Refused::Malformed(format!(
                    "the body (at most {MAX_REQUEST_BYTES} bytes): {e}"
                ));
                tracing::warn!(%peer, reason = %refused, "node certificate refused");
                let error = refused.to_string();
                return json_response(StatusCode::BAD_REQUEST, &Refusal { error });
            }
        };
        match self.verify_and_sign(&body, peer).await {
            Ok(certificate) => json_response(StatusCode::OK, &CertificateResponse { certificate }),
            Err(Failure::Refused(refused)) => {
                tracing::warn!(%peer, reason = %refused, "node certificate refused");
                let error = refused.to_string();
                json_response(StatusCode::FORBIDDEN, &Refusal { error })
            }
            Err(Failure::Unavailable(why)) => {
                tracing::warn!(%peer, reason = %why, "node certificate not decided: an AWS call failed");
                let error = format!("the service cannot verify now: {why}; try again");
                json_response(StatusCode::SERVICE_UNAVAILABLE, &Refusal { error })
            }
        }
    }

    async fn verify_and_sign(&self, body: &[u8], peer: SocketAddr) -> Result<String, Failure> {
        let request: CertificateRequest = serde_json::from_slice(body)
            .map_err(|e| Refused::Malformed(format!("not a certificate request: {e}")))?;
        if request.node_name.is_empty() || request.node_name.len() > MAX_NODE_NAME {
            return Err(Refused::Malformed(format!(
                "nodeName must be 1..={MAX_NODE_NAME} characters"
            ))
            .into());
        }
        let now = SystemTime::now();
        let digest = request_digest(&request.node_name, &request.csr);
        let signed = check_signed_request(&request.sts_headers, &digest, &self.config.region, now)?;
        self.replay
            .lock()
            .map_err(|_| Failure::Unavailable("the replay guard is poisoned".into()))?
            .admit(&signed, now)?;
        let identity = self.ask_sts(&request).await?;
        let caller =
            AssumedRole::parse(&identity.arn).map_err(|e| Refused::NotConfirmed(e.to_string()))?;
        if caller.account != identity.account {
            return Err(Refused::NotConfirmed(format!(
                "the ARN's account is not STS's account {}",
                identity.account
            ))
            .into());
        }
        let instance = self.instance(&caller.session).await?;
        let grant = decide(&self.config.cluster, &caller, &instance, &request.node_name)?;
        let certificate = sign_node_certificate(
            &request.csr,
            &grant,
            &self.config.ca_cert_pem,
            &self.config.ca_key_pem,
            time::OffsetDateTime::now_utc(),
        )
        .map_err(|e| match e {
            super::issue::SignNodeCertError::BadCsr(_) => {
                Failure::Refused(Refused::Malformed(e.to_string()))
            }
            other => Failure::Unavailable(other.to_string()),
        })?;
        tracing::info!(
            %peer,
            instance_id = %grant.instance_id,
            instance_group = %grant.instance_group,
            node = %grant.node_name,
            "node certificate issued"
        );
        Ok(certificate)
    }

    /// Sends the worker's signed GetCallerIdentity to this node's STS endpoint, with the fixed body.
    async fn ask_sts(&self, request: &CertificateRequest) -> Result<CallerIdentity, Failure> {
        let mut builder = Request::post(format!("{}/", self.sts_endpoint));
        for (name, value) in &request.sts_headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let sts_request = builder
            .body(Full::new(Bytes::from_static(
                GET_CALLER_IDENTITY_BODY.as_bytes(),
            )))
            .map_err(|e| {
                Refused::Malformed(format!("the signed headers are not valid HTTP: {e}"))
            })?;
        let response = tokio::time::timeout(Duration::from_secs(20), self.sts.request(sts_request))
            .await
            .map_err(|_| Failure::Unavailable("STS did not answer within 20s".into()))?
            .map_err(|e| {
                Failure::Unavailable(format!("calling STS at {}: {e}", self.sts_endpoint))
            })?;
        let status = response.status();
        let body = Limited::new(response.into_body(), 64 * 1024)
            .collect()
            .await
            .map_err(|e| Failure::Unavailable(format!("reading STS's answer: {e}")))?
            .to_bytes();
        let text = String::from_utf8_lossy(&body);
        if !status.is_success() {
            let code = text
                .split_once("<Code>")
                .and_then(|(_, rest)| rest.split_once("</Code>"))
                .map(|(code, _)| code.to_string())
                .unwrap_or_default();
            let refused = Refused::NotConfirmed(format!("STS answered {status} {code}"));
            return Err(if status.is_server_error() {
                Failure::Unavailable(refused.to_string())
            } else {
                Failure::Refused(refused)
            });
        }
        parse_caller_identity(&text)
            .map_err(|e| Failure::Refused(Refused::NotConfirmed(e.to_string())))
    }

    /// What EC2 and IAM say about the instance a session names.
    async fn instance(&self, instance_id: &str) -> Result<InstanceFacts, Failure> {
        let unavailable = |what: &str, e: &(dyn std::error::Error + 'static)| {
            Failure::Unavailable(format!("{what}: {}", super::error_chain(e)))
        };
        let filter = aws_sdk_ec2::types::Filter::builder()
            .name("instance-id")
            .values(instance_id)
            .build();
        let answer = self
            .ec2
            .describe_instances()
            .filters(filter)
            .send()
            .await
            .map_err(|e| unavailable("ec2:DescribeInstances", &e))?;
        let mut found = answer.reservations().iter().flat_map(|r| r.instances());
        let (Some(instance), None) = (found.next(), found.next()) else {
            return Err(Refused::Instance {
                instance_id: instance_id.to_string(),
                problem: "EC2 does not list it (exactly once)".into(),
            }
            .into());
        };
        let profile_roles = match instance.iam_instance_profile().and_then(|p| p.arn()) {
            Some(arn) => self.profile_roles(arn).await?,
            None => Vec::new(),
        };
        Ok(InstanceFacts {
            instance_id: instance.instance_id().unwrap_or_default().to_string(),
            state: instance
                .state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_string())
                .unwrap_or_default(),
            private_dns_name: instance.private_dns_name().unwrap_or_default().to_string(),
            tags: instance
                .tags()
                .iter()
                .filter_map(|t| {
                    Some((
                        t.key()?.to_string(),
                        t.value().unwrap_or_default().to_string(),
                    ))
                })
                .collect(),
            profile_roles,
        })
    }

    async fn profile_roles(&self, profile_arn: &str) -> Result<Vec<String>, Failure> {
        let name = profile_arn.rsplit('/').next().unwrap_or(profile_arn);
        let profile = self
            .iam
            .get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
            .map_err(|e| {
                Failure::Unavailable(format!(
                    "iam:GetInstanceProfile {name}: {}",
                    super::error_chain(&e)
                ))
            })?;
        Ok(profile
            .instance_profile()
            .map(|p| p.roles().iter().map(|r| r.arn().to_string()).collect())
            .unwrap_or_default())
    }
}
