//! A worker asks the bootstrap service for its kubelet client certificate (I/O): it makes a key and CSR on the
//! node, signs an `sts:GetCallerIdentity` request with its instance role's credentials (from IMDS, through the
//! SDK's default chain) carrying the digest of its request, and posts both to a control-plane node's service
//! over HTTPS, trusting only the cluster's CA. Control-plane nodes are found where they publish themselves in the
//! state store, or through EC2 ([`super::directory`]); each attempt is signed anew, since the service takes each
//! signature once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::provider::ProvideCredentials;
use ballast_store::store::StateStore;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use super::directory::ServiceFinder;
use super::issue::new_csr;
use super::sts::{sign_get_caller_identity, sts_endpoint};
use super::wire::{request_digest, CertificateRequest, CertificateResponse, Refusal};

/// How long a worker waits for a control-plane node to answer (they may boot after it).
pub const WAIT_FOR_SERVICE: Duration = Duration::from_secs(10 * 60);

/// How long a worker waits for a TCP connection to a control-plane node's service (same VPC: milliseconds when
/// it is there).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a worker has no certificate.
#[derive(Debug, thiserror::Error)]
pub enum NodeCertificateError {
    /// The service verified the worker and said no: retrying changes nothing.
    #[error("the bootstrap service at {server} refused node {node_name:?}: {reason}")]
    Refused {
        server: SocketAddr,
        node_name: String,
        reason: String,
    },
    /// No control-plane node answered in time.
    #[error("no node bootstrap service answered within {}s; last problem: {last}", WAIT_FOR_SERVICE.as_secs())]
    Unreachable { last: String },
    /// The cluster's CA certificate does not load, or a key or CSR could not be made.
    #[error("preparing the certificate request: {0}")]
    Prepare(String),
}

/// What the worker knows to ask with.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    pub cluster: &'a str,
    pub region: &'a str,
    /// Its private DNS name (its kubelet's `--hostname-override`).
    pub node_name: &'a str,
    pub ca_cert_pem: &'a str,
    /// The state store, where control-plane nodes publish their services' addresses.
    pub store: &'a StateStore,
}

/// A worker's two kubelet certificates and their keys (PEM), from the bootstrap service. The keys were made on
/// this node and never left it.
pub struct WorkerCertificates {
    pub client_cert: String,
    pub client_key: String,
    pub serving_cert: String,
    pub serving_key: String,
}

// The keys never reach a log.
impl std::fmt::Debug for WorkerCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerCertificates").finish_non_exhaustive()
    }
}

/// The certificates for `system:node:<node_name>`: its kubelet's client and serving certificates and keys.
pub async fn obtain(ask: &Ask<'_>) -> Result<WorkerCertificates, NodeCertificateError> {
    obtain_from(ask, None, WAIT_FOR_SERVICE).await
}

/// As [`obtain`], from `servers` when given (tests), else the cluster's control-plane nodes.
pub async fn obtain_from(
    ask: &Ask<'_>,
    servers: Option<Vec<SocketAddr>>,
    wait: Duration,
) -> Result<WorkerCertificates, NodeCertificateError> {
    let prepare = |e: &dyn std::fmt::Display| NodeCertificateError::Prepare(e.to_string());
    let (csr, key) = new_csr(ask.node_name).map_err(|e| prepare(&e))?;
    let (serving_csr, serving_key) = new_csr(ask.node_name).map_err(|e| prepare(&e))?;
    let digest = request_digest(ask.node_name, &csr, &serving_csr);
    let client = https_client(ask.ca_cert_pem)?;
    let aws = ballast_store::sdk::load(Some(ask.region)).await;
    let credentials = aws
        .credentials_provider()
        .ok_or_else(|| NodeCertificateError::Prepare("no AWS credentials provider".into()))?;
    let endpoint = sts_endpoint(ask.region, |n| std::env::var(n).ok());
    let mut finder = ServiceFinder::new(ask.store, ask.cluster, &aws);
    let deadline = Instant::now() + wait;
    // Rounds over every known server, paced by the one retry policy; the deadline is `wait`.
    let mut pauses = crate::retry::BOOTSTRAP.pauses();
    let mut last = "no control-plane node found".to_string();
    loop {
        let targets = match &servers {
            Some(s) => s.clone(),
            None => finder.addresses(&mut last).await,
        };
        for server in targets {
            let creds = match credentials.provide_credentials().await {
                Ok(c) => c,
                Err(e) => {
                    last = format!("the instance role's credentials: {e}");
                    continue;
                }
            };
            let sts_headers =
                sign_get_caller_identity(&creds, ask.region, &endpoint, &digest, SystemTime::now())
                    .map_err(|e| prepare(&e))?;
            let request = CertificateRequest {
                node_name: ask.node_name.to_string(),
                csr: csr.clone(),
                serving_csr: serving_csr.clone(),
                sts_headers,
            };
            match post(&client, server, &request).await {
                Ok(issued) => {
                    tracing::info!(%server, node = ask.node_name, "kubelet client and serving certificates issued by the bootstrap service");
                    return Ok(WorkerCertificates {
                        client_cert: issued.certificate,
                        client_key: key,
                        serving_cert: issued.serving_certificate,
                        serving_key,
                    });
                }
                Err(Answer::Refused(reason)) => {
                    return Err(NodeCertificateError::Refused {
                        server,
                        node_name: ask.node_name.to_string(),
                        reason,
                    })
                }
                Err(Answer::Retry(why)) => {
                    tracing::info!(%server, problem = %why, "node bootstrap service not ready");
                    last = format!("{server}: {why}");
                }
            }
        }
        let pause = pauses.next().unwrap_or(crate::retry::BOOTSTRAP.max_delay);
        if Instant::now() + pause > deadline {
            return Err(NodeCertificateError::Unreachable { last });
        }
        tokio::time::sleep(pause).await;
    }
}

type Https = HttpClient<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// An HTTPS client that trusts the cluster's CA only.
fn https_client(ca_cert_pem: &str) -> Result<Https, NodeCertificateError> {
    let bad = |e: &dyn std::fmt::Display| {
        NodeCertificateError::Prepare(format!("the cluster's CA certificate: {e}"))
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_cert_pem.as_bytes()) {
        roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| bad(&e))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    // A stale published address (a control-plane node gone) may answer nothing at all: give up on it after a
    // few seconds and try the next, rather than wait out the request's whole timeout.
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    Ok(HttpClient::builder(TokioExecutor::new()).build(https))
}

/// Why one request got no certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The service refused (403/400), with its reason.
    Refused(String),
    /// Not decided (unreachable, 503, ...): worth another attempt, signed anew.
    Retry(String),
}

/// One request to the service at `server`, trusting only `ca_cert_pem`: the certificate, or why not. What
/// [`obtain`] does per attempt; tests use it to send requests a worker would not.
pub async fn post_once(
    ca_cert_pem: &str,
    server: SocketAddr,
    request: &CertificateRequest,
) -> Result<CertificateResponse, Answer> {
    let client = https_client(ca_cert_pem).map_err(|e| Answer::Retry(e.to_string()))?;
    post(&client, server, request).await
}

/// Posts one request; the certificates, or a refusal, or a reason to try again.
async fn post(
    client: &Https,
    server: SocketAddr,
    request: &CertificateRequest,
) -> Result<CertificateResponse, Answer> {
    let body = serde_json::to_vec(request).map_err(|e| Answer::Retry(e.to_string()))?;
    let http = Request::post(format!("https://{server}{}", super::PATH))
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| Answer::Retry(e.to_string()))?;
    let response = tokio::time::timeout(Duration::from_secs(30), client.request(http))
        .await
        .map_err(|_| Answer::Retry("no answer within 30s".into()))?
        .map_err(|e| Answer::Retry(super::error_chain(&e)))?;
    let status = response.status();
    let bytes = Limited::new(response.into_body(), 256 * 1024)
        .collect()
        .await
        .map_err(|e| Answer::Retry(format!("reading the answer: {e}")))?
        .to_bytes();
    answer_of(status, &bytes)
}

/// What an answer means: the certificate (200), a final refusal (403, 400: the service decided), or anything else
/// (503 when the service cannot decide now: AWS failed or throttled, its replay guard is full; 5xx, 429, ...) a
/// reason to try again, which [`obtain`] does with a fresh signature after a backoff (250 ms doubling to 5 s,
/// within [`WAIT_FOR_SERVICE`]).
fn answer_of(status: StatusCode, bytes: &[u8]) -> Result<CertificateResponse, Answer> {
    match status {
        StatusCode::OK => serde_json::from_slice::<CertificateResponse>(bytes)
            .map_err(|e| Answer::Retry(format!("an answer that is not a certificate: {e}"))),
        StatusCode::FORBIDDEN | StatusCode::BAD_REQUEST => Err(Answer::Refused(
            serde_json::from_slice::<Refusal>(bytes)
                .map(|r| r.error)
                .unwrap_or_else(|_| format!("HTTP {status}")),
        )),
        _ => Err(Answer::Retry(
            serde_json::from_slice::<Refusal>(bytes)
                .map(|r| format!("HTTP {status}: {}", r.error))
                .unwrap_or_else(|_| format!("HTTP {status}")),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A loopback listener that never accepts, its one-connection queue already full: Linux drops further SYNs,
    /// so a connect to it hangs as one to a vanished host does.
    async fn hanging_listener() -> (tokio::net::TcpListener, std::net::TcpStream) {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind("127.0.0.1:0".parse().expect("an address"))
            .expect("bound");
        let listener = socket.listen(0).expect("listening");
        let address = listener.local_addr().expect("its address");
        // A backlog of 0 queues one connection; this one fills it.
        let filler = std::net::TcpStream::connect(address).expect("the queued connection");
        (listener, filler)
    }

    /// A 503 (the service's replay guard full, STS throttling) is tried again; a 403 is final.
    #[test]
    fn busy_answers_are_retried_and_refusals_are_final() {
        let body = |error: &str| {
            serde_json::to_vec(&Refusal {
                error: error.into(),
            })
            .expect("JSON")
        };
        assert_eq!(
            answer_of(StatusCode::SERVICE_UNAVAILABLE, &body("try again")),
            Err(Answer::Retry(
                "HTTP 503 Service Unavailable: try again".into()
            ))
        );
        assert!(matches!(
            answer_of(StatusCode::TOO_MANY_REQUESTS, b""),
            Err(Answer::Retry(_))
        ));
        assert_eq!(
            answer_of(StatusCode::FORBIDDEN, &body("refused")),
            Err(Answer::Refused("refused".into()))
        );
    }

    #[tokio::test]
    async fn a_service_address_where_nothing_answers_is_given_up_at_the_connect_timeout() {
        let (listener, _filler) = hanging_listener().await;
        let server = listener.local_addr().expect("its address");
        let ca = ballast_state::pki::generate_ca("kubernetes-ca", "Kubernetes CA").expect("a CA");
        let request = CertificateRequest {
            node_name: "ip-127-0-0-9".to_string(),
            csr: String::new(),
            serving_csr: String::new(),
            sts_headers: BTreeMap::new(),
        };
        let started = Instant::now();
        let answer = post_once(&ca.cert_pem, server, &request).await;
        let Err(Answer::Retry(why)) = answer else {
            panic!("a hanging connect is retried elsewhere, got {answer:?}");
        };
        // The connector's own timeout (hyper-util: "tcp connect error: deadline has elapsed"), not the request's
        // 30 s one.
        assert!(why.contains("tcp connect error"), "{why}");
        assert!(why.contains("deadline has elapsed"), "{why}");
        assert!(!why.contains("within 30s"), "{why}");
        assert!(started.elapsed() >= CONNECT_TIMEOUT, "{why}");
    }
}
