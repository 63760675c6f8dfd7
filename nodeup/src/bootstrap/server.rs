//! The bootstrap service on control-plane nodes (I/O): HTTPS on [`super::PORT`] of the node's private IP, one
//! route ([`super::PATH`]). Each request goes through the pure checks of [`super::verify`], then STS (the
//! worker's signed GetCallerIdentity, sent to this node's own STS endpoint), EC2 (the instance the session
//! names) and IAM (its instance profile's role), and only then is a certificate signed ([`super::issue`]).
//! Refusals are logged with their reason, the instance when known and a request id; the caller gets the same
//! answer for every refusal, with that id and nothing else (issue 28, medium 9: the reasons told anyone with AWS
//! credentials whether an instance id exists, its state and its tags). Signed headers, keys and certificates are
//! never logged.
//!
//! The service must never starve the rest of nodeup (issue 28, high 4: 1,100 idle connections used up nodeup's
//! descriptors, and the etcd supervisor in the same process could no longer read the state store): connections
//! are capped in all and per address ([`Limits`]), a connection over a cap is accepted and closed at once (so
//! the kernel's backlog does not hold it either), the TLS handshake and the request's headers each have a short
//! deadline, and the caps are kept well under nodeup's descriptor limit ([`Limits::within_fd_limit`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::issue::{sign_node_certificate, NodeCertificate};
use super::sts::{
    error_code, parse_caller_identity, sts_endpoint, sts_error_is_retryable, AssumedRole,
    CallerIdentity, GET_CALLER_IDENTITY_BODY,
};
use super::verify::{
    check_signed_request, decide, InstanceFacts, NotAdmitted, Refused, ReplayGuard, SignedRequest,
};
use super::wire::{
    request_digest, CertificateRequest, CertificateResponse, Refusal, MAX_REQUEST_BYTES,
};

/// Connections open at once, from everyone. Threat: idle or slow connections from many addresses using up
/// nodeup's file descriptors, which the etcd supervisor in the same process needs to reach the state store and
/// etcd. A boot storm of a few hundred workers needs far fewer: each holds one connection for about a second.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections open at once from one address. Threat: one host (a compromised pod or worker; the security group
/// lets only the cluster's nodes in) taking the whole [`MAX_CONNECTIONS`] so that no other worker is served. A
/// worker's nodeup holds one at a time.
pub const MAX_CONNECTIONS_PER_PEER: usize = 16;
/// Descriptors kept out of the service's reach whatever nodeup's limit: the etcd supervisor, etcd's clients, the
/// state store and AWS clients, the services' pipes and logs. [`Limits::within_fd_limit`] lowers the caps
/// below a small limit so that this many always remain.
pub const FD_RESERVE: u64 = 512;
/// A TLS handshake must finish within this. Threat: connections that open and then say nothing (or dribble a
/// ClientHello) holding a slot for the whole [`CONNECTION_TIMEOUT`]. A worker in the same VPC handshakes in
/// milliseconds.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The request's headers must arrive within this after the handshake. Threat: slowloris, a request whose headers
/// never end.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection's whole life (handshake, request, the STS, EC2 and IAM calls, answer): its upper bound whatever
/// the peer does. The service's own STS call may take 20 s.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections refused over a cap are logged (warn) at most once per this, with how many there were since.
/// Threat: a flood turning into a flood of log lines (disk, and the boot report's log tail).
const OVER_CAP_LOG_EVERY: Duration = Duration::from_secs(10);
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
    /// Connection caps and timeouts ([`Limits::default`], or [`Limits::within_fd_limit`]).
    pub limits: Limits,
}

/// The service's caps and deadlines; each constant says the threat it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    pub handshake_timeout: Duration,
    pub header_read_timeout: Duration,
    pub connection_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: MAX_CONNECTIONS,
            max_connections_per_peer: MAX_CONNECTIONS_PER_PEER,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            header_read_timeout: HEADER_READ_TIMEOUT,
            connection_timeout: CONNECTION_TIMEOUT,
        }
    }
}

impl Limits {
    /// The default limits, with the connection caps lowered when nodeup's descriptor limit (`soft_limit`,
    /// RLIMIT_NOFILE) would not leave [`FD_RESERVE`] descriptors beside them; never below 8 connections.
    pub fn within_fd_limit(soft_limit: u64) -> Self {
        let room = usize::try_from(soft_limit.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX);
        let max_connections = MAX_CONNECTIONS.min(room).max(8);
        Limits {
            max_connections,
            max_connections_per_peer: MAX_CONNECTIONS_PER_PEER.min(max_connections),
            ..Limits::default()
        }
    }
}

// The CA key is in here: Debug shows where the service listens, nothing else.
impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("bind", &self.bind)
            .field("cluster", &self.cluster)
            .field("limits", &self.limits)
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
    /// Request ids: the service's start (unix seconds) and a counter.
    started: u64,
    requests: AtomicU64,
}

/// A request's failure: refused (403, the worker's fault) or unavailable (503: an AWS call failed, STS
/// throttled, the replay guard is full; the worker tries again).
enum Failure {
    Refused(Refused),
    Unavailable(String),
}

/// What the caller is told of any refusal: the same words whatever the reason, so that the answer tells nothing
/// of an instance (whether it exists, its state, its tags, its name). The reason is in the control-plane node's
/// log, on the line with the same request id.
pub const REFUSED_ANSWER: &str = "refused: not a node of this cluster";
/// What the caller is told when the service cannot decide now (503): retry.
pub const UNAVAILABLE_ANSWER: &str = "the service cannot decide now; try again";

/// `REFUSED_ANSWER` or `UNAVAILABLE_ANSWER` with the request id: the whole text a caller gets.
pub fn caller_answer(text: &str, request_id: &str) -> String {
    format!("{text} (request id {request_id}; the control-plane node's log has the reason)")
}

/// The service's connections: how many are open, in all and per address, against the caps.
#[derive(Debug)]
pub struct Connections {
    limits: Limits,
    open: Mutex<ConnectionCounts>,
    /// Per cap: [`OverCap::All`], [`OverCap::Peer`].
    over_cap: Mutex<[OverCapLog; 2]>,
}

#[derive(Debug, Default)]
struct ConnectionCounts {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
}

#[derive(Debug, Default)]
struct OverCapLog {
    last: Option<Instant>,
    since_last: u64,
}

/// Which cap a connection was over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverCap {
    All,
    Peer,
}

/// A connection's place under the caps, given back when dropped.
struct Slot {
    connections: Arc<Connections>,
    peer: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut open) = self.connections.open.lock() {
            open.total = open.total.saturating_sub(1);
            if let Some(n) = open.per_peer.get_mut(&self.peer) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    open.per_peer.remove(&self.peer);
                }
            }
        }
    }
}

impl Connections {
    fn new(limits: Limits) -> Self {
        Connections {
            limits,
            open: Mutex::new(ConnectionCounts::default()),
            over_cap: Mutex::new(Default::default()),
        }
    }

    /// A slot for a connection from `peer`, or which cap it is over.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, OverCap> {
        let mut open = self.open.lock().map_err(|_| OverCap::All)?;
        if open.total >= self.limits.max_connections {
            return Err(OverCap::All);
        }
        let from_peer = open.per_peer.entry(peer).or_default();
        if *from_peer >= self.limits.max_connections_per_peer {
            return Err(OverCap::Peer);
        }
        *from_peer += 1;
        open.total += 1;
        Ok(Slot {
            connections: self.clone(),
            peer,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().map(|o| o.total).unwrap_or_default()
    }

    /// Logs a connection closed over a cap: the first at once, then at most one line per
    /// [`OVER_CAP_LOG_EVERY`] and cap, counting those in between; every one at debug.
    fn log_over_cap(&self, peer: IpAddr, cap: OverCap) {
        let (limit, which, index) = match cap {
            OverCap::All => (self.limits.max_connections, "connections in all", 0),
            OverCap::Peer => (
                self.limits.max_connections_per_peer,
                "connections from one address",
                1,
            ),
        };
        tracing::debug!(%peer, limit, "node bootstrap service: over its cap of {which}; closed");
        let Ok(mut logs) = self.over_cap.lock() else {
            return;
        };
        let log = &mut logs[index];
        log.since_last += 1;
        let now = Instant::now();
        if log
            .last
            .is_some_and(|last| now.duration_since(last) < OVER_CAP_LOG_EVERY)
        {
            return;
        }
        tracing::warn!(
            %peer,
            limit,
            closed = log.since_last,
            "node bootstrap service: a connection over its cap of {limit} {which} was closed at once \
             ({} closed over a cap since the last such line; more are logged at most every {}s)",
            log.since_last,
            OVER_CAP_LOG_EVERY.as_secs()
        );
        log.last = Some(now);
        log.since_last = 0;
    }
}

/// The running service.
pub struct Running {
    /// Serves until aborted (nodeup's end).
    pub task: tokio::task::JoinHandle<()>,
    /// Where it listens (the bound address: a port 0 in the config is the port the system chose).
    pub addr: SocketAddr,
    connections: Arc<Connections>,
}

impl Running {
    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.connections.open()
    }
}

/// A proof pending in the replay guard while STS checks it; released when dropped unless recorded (so a request
/// that fails, or whose connection is cut, never leaves it behind).
struct Pending<'a> {
    guard: &'a Mutex<ReplayGuard>,
    request: SignedRequest,
    done: bool,
}

impl Pending<'_> {
    /// STS accepted the proof: remember it as used.
    fn record(mut self, now: SystemTime) -> Result<(), Failure> {
        self.done = true;
        let mut guard = self
            .guard
            .lock()
            .map_err(|_| Failure::Unavailable("the replay guard is poisoned".into()))?;
        guard
            .record(&self.request, now)
            .map_err(|busy| Failure::Unavailable(busy.to_string()))
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            if let Ok(mut guard) = self.guard.lock() {
                guard.release(&self.request.signature);
            }
        }
    }
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
pub async fn start(config: ServerConfig) -> Result<Running, StartServerError> {
    let tls = tls_acceptor(&config)?;
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .map_err(|source| StartServerError::Bind {
            addr: config.bind,
            source,
        })?;
    let addr = listener
        .local_addr()
        .map_err(|source| StartServerError::Bind {
            addr: config.bind,
            source,
        })?;
    let aws = ballast_store::sdk::load(Some(config.region.as_str())).await;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider())
        .map_err(|e| StartServerError::Tls(format!("the system's root certificates: {e}")))?
        .https_or_http()
        .enable_http1()
        .build();
    let limits = config.limits;
    let connections = Arc::new(Connections::new(limits));
    let verifier = Arc::new(Verifier {
        sts_endpoint: sts_endpoint(&config.region, |n| std::env::var(n).ok()),
        sts: HttpClient::builder(TokioExecutor::new()).build(https),
        ec2: aws_sdk_ec2::Client::new(&aws),
        iam: aws_sdk_iam::Client::new(&aws),
        replay: Mutex::new(ReplayGuard::default()),
        started: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default(),
        requests: AtomicU64::new(0),
        config,
    });
    tracing::info!(
        %addr,
        max_connections = limits.max_connections,
        max_connections_per_peer = limits.max_connections_per_peer,
        handshake_timeout_secs = limits.handshake_timeout.as_secs_f64(),
        header_read_timeout_secs = limits.header_read_timeout.as_secs_f64(),
        "node bootstrap service listening"
    );
    let task = tokio::spawn(serve(listener, tls, verifier, connections.clone()));
    Ok(Running {
        task,
        addr,
        connections,
    })
}

/// Accepts for ever: a connection within the caps is served in a task of its own, one over a cap is closed at
/// once.
async fn serve(
    listener: tokio::net::TcpListener,
    tls: tokio_rustls::TlsAcceptor,
    verifier: Arc<Verifier>,
    connections: Arc<Connections>,
) {
    let limits = connections.limits;
    let mut accept_failures = OverCapLog::default();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors (EMFILE) or the like: wait a little rather than spin, and say so at most
                // every OVER_CAP_LOG_EVERY.
                accept_failures.since_last += 1;
                let now = Instant::now();
                if accept_failures
                    .last
                    .is_none_or(|last| now.duration_since(last) >= OVER_CAP_LOG_EVERY)
                {
                    tracing::warn!(error = %e, failures = accept_failures.since_last, "node bootstrap service: accept failed");
                    accept_failures.last = Some(now);
                    accept_failures.since_last = 0;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let ip = peer.ip().to_canonical();
        let slot = match connections.admit(ip) {
            Ok(slot) => slot,
            Err(cap) => {
                drop(stream);
                connections.log_over_cap(ip, cap);
                continue;
            }
        };
        let (tls, verifier) = (tls.clone(), verifier.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let stream = match tokio::time::timeout(limits.handshake_timeout, tls.accept(stream))
                .await
            {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "node bootstrap connection: TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "node bootstrap connection: no TLS handshake within {:?}; closed", limits.handshake_timeout);
                    return;
                }
            };
            let service = hyper::service::service_fn(move |req| {
                let verifier = verifier.clone();
                async move { Ok::<_, std::convert::Infallible>(verifier.route(req, peer).await) }
            });
            // One request per connection (a worker sends one): no idle keep-alive connection holds a slot.
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .keep_alive(false);
            let served = tokio::time::timeout(
                limits.connection_timeout,
                http.serve_connection(TokioIo::new(stream), service),
            )
            .await;
            match served {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "node bootstrap connection ended"),
                Err(_) => {
                    tracing::debug!(%peer, "node bootstrap connection: not done within {:?}; closed", limits.connection_timeout)
                }
            }
        });
    }
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
    fn request_id(&self) -> String {
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        format!("{:x}-{n}", self.started)
    }

    async fn route(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
        if req.method() != Method::POST || req.uri().path() != super::PATH {
            let error = format!("only POST {} is served here", super::PATH);
            return json_response(StatusCode::NOT_FOUND, &Refusal { error });
        }
        let request_id = self.request_id();
        let body = match Limited::new(req.into_body(), MAX_REQUEST_BYTES)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                let refused = Refused::Malformed(format!(
                    "the body (at most {MAX_REQUEST_BYTES} bytes): {e}"
                ));
                tracing::warn!(%peer, %request_id, reason = %refused, "node certificate refused");
                let error = caller_answer(REFUSED_ANSWER, &request_id);
                return json_response(StatusCode::BAD_REQUEST, &Refusal { error });
            }
        };
        match self.verify_and_sign(&body, peer, &request_id).await {
            Ok(issued) => json_response(StatusCode::OK, &issued),
            Err(Failure::Refused(refused)) => {
                tracing::warn!(%peer, %request_id, reason = %refused, "node certificate refused");
                let error = caller_answer(REFUSED_ANSWER, &request_id);
                json_response(StatusCode::FORBIDDEN, &Refusal { error })
            }
            Err(Failure::Unavailable(why)) => {
                tracing::warn!(%peer, %request_id, reason = %why, "node certificate not decided: try again");
                let error = caller_answer(UNAVAILABLE_ANSWER, &request_id);
                json_response(StatusCode::SERVICE_UNAVAILABLE, &Refusal { error })
            }
        }
    }

    async fn verify_and_sign(
        &self,
        body: &[u8],
        peer: SocketAddr,
        request_id: &str,
    ) -> Result<CertificateResponse, Failure> {
        let request: CertificateRequest = serde_json::from_slice(body)
            .map_err(|e| Refused::Malformed(format!("not a certificate request: {e}")))?;
        if request.node_name.is_empty() || request.node_name.len() > MAX_NODE_NAME {
            return Err(Refused::Malformed(format!(
                "nodeName must be 1..={MAX_NODE_NAME} characters"
            ))
            .into());
        }
        let now = SystemTime::now();
        let digest = request_digest(&request.node_name, &request.csr, &request.serving_csr);
        let signed = check_signed_request(&request.sts_headers, &digest, &self.config.region, now)?;
        // Pending while STS checks it (a concurrent copy is refused), remembered as used only once STS accepted
        // it: forged proofs never fill the guard (issue 28, medium 5).
        self.replay
            .lock()
            .map_err(|_| Failure::Unavailable("the replay guard is poisoned".into()))?
            .begin(&signed, peer.ip().to_canonical())
            .map_err(|e| match e {
                NotAdmitted::Replayed => Failure::Refused(Refused::Replayed),
                NotAdmitted::Busy(busy) => Failure::Unavailable(busy.to_string()),
            })?;
        let pending = Pending {
            guard: &self.replay,
            request: signed,
            done: false,
        };
        let identity = self.ask_sts(&request).await?;
        pending.record(SystemTime::now())?;
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
        let now = time::OffsetDateTime::now_utc();
        let sign = |csr: &str, which: NodeCertificate| {
            sign_node_certificate(
                csr,
                &grant,
                which,
                &self.config.ca_cert_pem,
                &self.config.ca_key_pem,
                now,
            )
            .map_err(|e| match e {
                super::issue::SignNodeCertError::BadCsr(_) => {
                    Failure::Refused(Refused::Malformed(format!("{which:?} CSR: {e}")))
                }
                other => Failure::Unavailable(other.to_string()),
            })
        };
        let issued = CertificateResponse {
            certificate: sign(&request.csr, NodeCertificate::Client)?,
            serving_certificate: sign(&request.serving_csr, NodeCertificate::Serving)?,
        };
        tracing::info!(
            %peer,
            %request_id,
            instance_id = %grant.instance_id,
            instance_group = %grant.instance_group,
            node = %grant.node_name,
            private_ip = %grant.private_ip,
            "node certificates issued (kubelet client and serving)"
        );
        Ok(issued)
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
            let code = error_code(&text);
            let refused = Refused::NotConfirmed(format!("STS answered {status} {code}"));
            // Throttling (a 400 `Throttling` from STS, or a 429) and STS's own failures say "not now", not "no"
            // (issue 28, medium 5): the worker retries them.
            return Err(if sts_error_is_retryable(status.as_u16(), &code) {
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
            private_ip: instance
                .private_ip_address()
                .unwrap_or_default()
                .to_string(),
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

#[cfg(test)]
mod tests;
