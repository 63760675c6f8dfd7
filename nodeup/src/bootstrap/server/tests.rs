//! The service against real connections on loopback: its caps, its deadlines, and a worker still served while
//! one address floods it (issue 28, high 4). Flooders connect from other loopback addresses (127.0.0.2, ...) than
//! the worker (127.0.0.1), as another host would.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use rcgen::{CertificateParams, Issuer, KeyPair, SanType};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

use super::*;
use crate::bootstrap::client::{post_once, Answer};
use crate::bootstrap::wire::CertificateRequest;

/// Long enough that nothing in a test is closed by a deadline it does not test.
const NEVER: Duration = Duration::from_secs(600);

/// How long a test waits for something the service does at once before it fails (a failsafe, not a measure).
const FAILSAFE: Duration = Duration::from_secs(30);

struct Service {
    running: Running,
    ca_pem: String,
}

async fn serve_with(limits: Limits) -> Service {
    let ca = ballast_state::pki::generate_ca("kubernetes-ca", "Kubernetes CA").expect("a CA");
    let ca_key = KeyPair::from_pem(&ca.key_pem).expect("the CA key");
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).expect("an issuer");
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
    params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let cert = params
        .signed_by(&key, &issuer)
        .expect("the serving certificate");
    let config = ServerConfig {
        bind: "127.0.0.1:0".parse().expect("an address"),
        cluster: "c1.example.com".to_string(),
        region: "us-west-2".to_string(),
        tls_cert_pem: cert.pem(),
        tls_key_pem: key.serialize_pem(),
        ca_cert_pem: ca.cert_pem.clone(),
        ca_key_pem: ca.key_pem.clone(),
        limits,
    };
    let running = start(config).await.expect("the service starts");
    Service {
        running,
        ca_pem: ca.cert_pem,
    }
}

fn limits(max_connections: usize, max_connections_per_peer: usize) -> Limits {
    Limits {
        max_connections,
        max_connections_per_peer,
        handshake_timeout: NEVER,
        header_read_timeout: NEVER,
        connection_timeout: NEVER,
    }
}

/// A TCP connection to `to` from loopback address 127.0.0.`host`.
async fn connect_from(host: u8, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, host)),
            0,
        ))
        .expect("bound to a loopback address");
    socket.connect(to).await.expect("connected")
}

/// Whether the service closed `stream`: reads until end of stream or a reset (the service never writes first).
async fn closed_by_service(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(FAILSAFE, stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Still open: nothing to read, and no end of stream.
fn still_open(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(stream.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

async fn wait_until_open(service: &Service, n: usize) {
    let deadline = Instant::now() + FAILSAFE;
    while service.running.open_connections() != n {
        assert!(
            Instant::now() < deadline,
            "the service holds {} connections, expected {n}",
            service.running.open_connections()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A request the service refuses before any AWS call (no signature at all): answered means served.
fn unsigned_request() -> CertificateRequest {
    CertificateRequest {
        node_name: "ip-127-0-0-1.us-west-2.compute.internal".to_string(),
        csr: String::new(),
        serving_csr: String::new(),
        sts_headers: BTreeMap::new(),
    }
}

/// A worker connecting from 127.0.0.1 gets an answer: the uniform refusal, with a request id.
async fn assert_served(service: &Service) {
    let answer = post_once(&service.ca_pem, service.running.addr, &unsigned_request()).await;
    match answer {
        Err(Answer::Refused(text)) => {
            assert!(text.starts_with(REFUSED_ANSWER), "{text}");
            assert!(text.contains("request id "), "{text}");
        }
        other => panic!("the worker was not served: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_either_cap_are_closed_at_once_and_the_others_held() {
    let service = serve_with(limits(6, 4)).await;
    let addr = service.running.addr;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect_from(2, addr).await);
    }
    wait_until_open(&service, 4).await;
    // A fifth from the same address: over the per-address cap.
    let mut fifth = connect_from(2, addr).await;
    assert!(
        closed_by_service(&mut fifth).await,
        "over the per-address cap, yet held"
    );
    for _ in 0..2 {
        held.push(connect_from(3, addr).await);
    }
    wait_until_open(&service, 6).await;
    // Another address, but the service holds its cap of connections in all.
    let mut seventh = connect_from(4, addr).await;
    assert!(
        closed_by_service(&mut seventh).await,
        "over the cap in all, yet held"
    );
    assert_eq!(service.running.open_connections(), 6);
    assert!(
        held.iter().all(still_open),
        "a connection within the caps was closed"
    );
    // One leaves: a worker gets its place.
    drop(held.pop());
    wait_until_open(&service, 5).await;
    assert_served(&service).await;
    service.running.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_is_served_while_one_address_floods() {
    let service = serve_with(limits(16, 4)).await;
    let addr = service.running.addr;
    let mut flood = Vec::new();
    for _ in 0..300 {
        flood.push(connect_from(2, addr).await);
    }
    // Every one but the first four is closed, and the service holds no more than its cap for that address.
    let mut closed = 0;
    for stream in flood.iter_mut().skip(4) {
        closed += usize::from(closed_by_service(stream).await);
    }
    assert_eq!(closed, 296);
    assert_eq!(service.running.open_connections(), 4);
    assert!(flood.iter().take(4).all(still_open));
    // While the flood holds its four, a worker elsewhere is served, and again.
    assert_served(&service).await;
    assert_served(&service).await;
    service.running.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_handshakes_is_closed_at_the_handshake_deadline() {
    let service = serve_with(Limits {
        handshake_timeout: Duration::from_millis(200),
        ..limits(8, 4)
    })
    .await;
    let mut silent = connect_from(2, service.running.addr).await;
    assert!(closed_by_service(&mut silent).await);
    wait_until_open(&service, 0).await;
    service.running.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_that_never_come_are_cut_off() {
    let service = serve_with(Limits {
        header_read_timeout: Duration::from_millis(200),
        ..limits(8, 4)
    })
    .await;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(service.ca_pem.as_bytes()) {
        roots.add(cert.expect("PEM")).expect("a root");
    }
    let client = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = connect_from(2, service.running.addr).await;
    let name = rustls::pki_types::ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(name, tcp)
        .await
        .expect("the handshake completes");
    // Say nothing: the service gives up on the headers and closes.
    let mut buf = [0u8; 256];
    let read = tokio::time::timeout(FAILSAFE, tls.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the connection is still open: {read:?}"
    );
    wait_until_open(&service, 0).await;
    service.running.task.abort();
}

#[test]
fn the_caps_leave_the_reserve_below_a_small_descriptor_limit() {
    assert_eq!(Limits::within_fd_limit(1_048_576), Limits::default());
    // systemd's soft 1024, were it not raised: 256 connections, 768 left.
    assert_eq!(
        Limits::within_fd_limit(1024).max_connections,
        MAX_CONNECTIONS
    );
    let small = Limits::within_fd_limit(600);
    assert_eq!(small.max_connections, 88);
    assert_eq!(small.max_connections_per_peer, MAX_CONNECTIONS_PER_PEER);
    assert_eq!(Limits::within_fd_limit(100).max_connections, 8);
    assert_eq!(Limits::within_fd_limit(100).max_connections_per_peer, 8);
}

#[test]
fn every_refusal_reads_the_same_to_the_caller() {
    let a = caller_answer(REFUSED_ANSWER, "1-1");
    let b = caller_answer(REFUSED_ANSWER, "1-2");
    assert_eq!(a.replace("1-1", "ID"), b.replace("1-2", "ID"));
}
