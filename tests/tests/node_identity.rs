//! Node identity on the local cloud (issue 16, item 1), IAM enforced: a worker holds no shared bootstrap token;
//! its nodeup proves which instance it is with an `sts:GetCallerIdentity` request signed by its instance-role
//! credentials, and the control plane's bootstrap service issues a kubelet client certificate for exactly its
//! own node name. With a worker's real role credentials (from its IMDS), this test then plays the attacker: it
//! asks for the control plane's name, replays a proof, tampers with one, sends a stale one and one signed by
//! an IAM user, and reads secrets from the store: every attempt is refused, and every refusal reads the same to
//! the caller (a request id, never a reason), the reason being in the control plane's log under that id. Then it
//! floods the control plane's bootstrap service with idle connections (issue 28, high 4): the etcd supervisor in
//! the same nodeup still reads and writes the state store, nodeup holds no more descriptors than the service's
//! caps allow, and a new worker still joins. One cluster. Needs the emulator's venv; fails (never skips) without
//! it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::Credentials;
use ballast_e2e::localcloud::{nodeup_with_env, LocalCloud, Options};
use ballast_state::etcd::health::HealthReport;
use ballast_state::layout::ClusterPaths;
use ballast_state::node_bootstrap::{NodeBootstrapService, NodeBootstrapServices};
use ballast_state::report::Phase;
use localcloud::state::InstanceRecord;
use nodeup::bootstrap::client::{post_once, Answer};
use nodeup::bootstrap::issue::new_csr;
use nodeup::bootstrap::server::{caller_answer, REFUSED_ANSWER};
use nodeup::bootstrap::sts::{sign_get_caller_identity, sts_endpoint};
use nodeup::bootstrap::wire::CertificateResponse;
use nodeup::bootstrap::wire::{request_digest, CertificateRequest, REQUEST_DIGEST_HEADER};
use nodeup::certs::cert_facts;

const CLUSTER: &str = "identity.example.com";
const BUCKET: &str = "ballast-identity-e2e";
/// The control plane's bootstrap-service republish interval in this test (`--bootstrap-republish-every`, 60 s by
/// default): the test waits for a republish to drop a stale entry, and a short interval makes that wait seconds,
/// not a minute. The drop is the same code at any interval.
const REPUBLISH_EVERY: &str = "2s";
const REPUBLISH_EVERY_SECS: u64 = 2;

/// Every running instance of the cluster, with its EC2 private DNS name and role tag.
async fn instances(cloud: &LocalCloud) -> Vec<(String, String, String)> {
    let answer = cloud
        .ec2()
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("instance-state-name")
                .values("running")
                .build(),
        )
        .send()
        .await
        .expect("DescribeInstances");
    answer
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| {
            let role = i
                .tags()
                .iter()
                .find(|t| t.key() == Some("ballast.dev/role"))
                .and_then(|t| t.value())
                .unwrap_or_default()
                .to_string();
            (
                i.instance_id().unwrap_or_default().to_string(),
                i.private_dns_name().unwrap_or_default().to_string(),
                role,
            )
        })
        .collect()
}

/// The instance role's credentials, as the worker's own IMDS hands them out (any process on the worker, a pod
/// reaching IMDS included, can get these: they must not be enough to be another node).
/// The bootstrap services' addresses as published at `key`, read with `s3`'s credentials.
async fn published_services(s3: &aws_sdk_s3::Client, key: &str) -> NodeBootstrapServices {
    let object = s3
        .get_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .expect("reads the published bootstrap services");
    let body = object.body.collect().await.expect("a body").into_bytes();
    serde_json::from_slice(&body).expect("JSON")
}

async fn role_credentials(record: &InstanceRecord) -> Credentials {
    let imds = aws_config::imds::Client::builder()
        .endpoint(&record.imds_endpoint)
        .expect("an IMDS endpoint")
        .build();
    aws_config::imds::credentials::ImdsCredentialsProvider::builder()
        .imds_client(imds)
        .build()
        .provide_credentials()
        .await
        .expect("the worker's role credentials from its IMDS")
}

struct Attacker<'a> {
    cloud: &'a LocalCloud,
    ca_pem: String,
    server: SocketAddr,
    /// The control-plane node's nodeup log: where the service says why it refused.
    log: PathBuf,
}

/// The request id in a refusal the service sent (`... (request id ID; ...)`).
fn request_id(answer: &str) -> Option<String> {
    let rest = answer.split_once("request id ")?.1;
    Some(rest.split(';').next()?.trim().to_string())
}

/// The line of `log` that names `request_id`, waiting for nodeup to write it.
async fn log_line(log: &Path, request_id: &str) -> String {
    let needle = format!("request_id={request_id} ");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains(&needle)) {
            return line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no line of {} names request {request_id}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Attacker<'_> {
    fn endpoint(&self) -> String {
        let endpoint = self.cloud.record.endpoint.clone();
        sts_endpoint(&self.cloud.record.region, |n| {
            (n == "AWS_ENDPOINT_URL").then(|| endpoint.clone())
        })
    }

    /// A request for `name` with a fresh CSR, signed at `when` by `creds`.
    fn request(&self, creds: &Credentials, name: &str, when: SystemTime) -> CertificateRequest {
        let (csr, _key) = new_csr(name).expect("csr");
        let (serving_csr, _serving_key) = new_csr(name).expect("serving csr");
        let digest = request_digest(name, &csr, &serving_csr);
        let sts_headers = sign_get_caller_identity(
            creds,
            &self.cloud.record.region,
            &self.endpoint(),
            &digest,
            when,
        )
        .expect("signs");
        CertificateRequest {
            node_name: name.to_string(),
            csr,
            serving_csr,
            sts_headers,
        }
    }

    async fn send(&self, request: &CertificateRequest) -> Result<CertificateResponse, Answer> {
        post_once(&self.ca_pem, self.server, request).await
    }

    /// Sends `request`, expects it refused with the one answer every refusal gets (issue 28, medium 9), and the
    /// reason `expect` in the control plane's log on the line with the answer's request id. Returns the answer.
    async fn refused(&self, what: &str, request: &CertificateRequest, expect: &str) -> String {
        let answer = match self.send(request).await {
            Err(Answer::Refused(answer)) => answer,
            other => panic!("{what}: expected a refusal ({expect:?} in the log), got {other:?}"),
        };
        let id = request_id(&answer)
            .unwrap_or_else(|| panic!("{what}: the refusal names no request id: {answer:?}"));
        assert_eq!(
            answer.replace(&id, "ID"),
            caller_answer(REFUSED_ANSWER, "ID"),
            "{what}: the caller was told more than the uniform refusal"
        );
        let line = log_line(&self.log, &id).await;
        assert!(
            line.contains("node certificate refused") && line.contains(expect),
            "{what}: the log's line for request {id} does not say {expect:?}: {line}"
        );
        answer
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_proves_who_it_is_and_can_be_no_one_else() {
    // The instances' nodeup starts with the descriptor limit systemd gives a service (soft 1024), as on AWS:
    // the local cloud's runner, and each nodeup it starts, inherit this process's limit.
    let hard = set_soft_nofile(SYSTEMD_SOFT_NOFILE);
    let scratch = tempfile::tempdir().expect("a temp dir for the nodeup wrapper");
    let cloud = LocalCloud::start_with(Options {
        nodeup: Some(nodeup_with_env(
            scratch.path(),
            &[("NODEUP_BOOTSTRAP_REPUBLISH_EVERY", REPUBLISH_EVERY)],
        )),
        ..Options::default()
    });
    // The flood below needs more than that here.
    set_soft_nofile(hard);
    cloud.prepare_for_ballast(BUCKET).await;
    let state = format!("s3://{BUCKET}/clusters");
    let (ok, out) = cloud.ballast(
        &state,
        &[
            "create",
            "cluster",
            "--name",
            CLUSTER,
            "--zones",
            "us-west-2a",
            "--node-count",
            "1",
            "--yes",
        ],
    );
    assert!(ok, "ballast create cluster --yes failed:\n{out}");

    // Every instance configures: the worker only once the bootstrap service issued its certificate.
    let all = instances(&cloud).await;
    let control_plane = all
        .iter()
        .find(|i| i.2 == "control-plane")
        .expect("a control-plane instance")
        .clone();
    let worker = all
        .iter()
        .find(|i| i.2 == "node")
        .expect("a worker")
        .clone();
    for (id, _, _) in [&control_plane, &worker] {
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        let report = loop {
            if let Some(r) = cloud.stored_report(BUCKET, "clusters/", CLUSTER, id).await {
                break r.report;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no final boot report for {id}; log:\n{}",
                cloud
                    .try_instance(id)
                    .and_then(|r| std::fs::read_to_string(r.log).ok())
                    .unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(
            report.phase,
            Phase::Configured,
            "{id}: {:?}\n{}",
            report.errors,
            report.log_tail.join("\n")
        );
    }

    // The worker's kubelet certificate names exactly its own node, in system:nodes, signed by the cluster CA,
    // for the key nodeup made on the worker; no token anywhere on the worker.
    let worker_record = cloud.instance(&worker.0);
    let root = &worker_record.root;
    let read = |p: &str| std::fs::read(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let cert = cert_facts(&read("var/lib/kubelet/pki/kubelet-client.crt")).expect("a certificate");
    let ca_pem = String::from_utf8(read("etc/kubernetes/pki/ca.crt")).expect("PEM");
    let ca = cert_facts(ca_pem.as_bytes()).expect("the CA");
    assert_eq!(cert.common_name, format!("system:node:{}", worker.1));
    assert_eq!(cert.organization.as_deref(), Some("system:nodes"));
    assert_eq!(cert.issuer_raw, ca.subject_raw);
    assert_eq!(cert.authority_key_id, ca.subject_key_id);
    // The key nodeup made on the worker is the certificate's, and the certificate fits what nodeup keeps.
    let plan = nodeup::cert_plan::worker_kubelet_client(&worker.1);
    assert!(nodeup::certs::still_fits(
        &plan,
        &ca_pem,
        &read("var/lib/kubelet/pki/kubelet-client.crt"),
        &read("var/lib/kubelet/pki/kubelet-client.key"),
        time::OffsetDateTime::now_utc(),
    ));
    let lifetime = cert.not_after - time::OffsetDateTime::now_utc().unix_timestamp();
    assert!(lifetime > 0 && lifetime <= 30 * 86_400, "{lifetime}");
    // Its kubelet serves with a certificate the cluster CA signed for the name and private IP EC2 gives the
    // instance (the API server verifies it: --kubelet-certificate-authority), for a key made on the worker.
    let ec2_ip = cloud.instance(&worker.0).private_ip.clone();
    let serving =
        cert_facts(&read("var/lib/kubelet/pki/kubelet-server.crt")).expect("a certificate");
    assert_eq!(serving.common_name, format!("system:node:{}", worker.1));
    assert!(
        serving.dns_names.iter().eq([&worker.1]),
        "{:?}",
        serving.dns_names
    );
    assert!(
        serving
            .ips
            .iter()
            .map(|ip| ip.to_string())
            .eq([ec2_ip.clone()]),
        "{:?} (EC2: {ec2_ip})",
        serving.ips
    );
    assert_eq!(serving.authority_key_id, ca.subject_key_id);
    let serving_plan =
        nodeup::cert_plan::kubelet_serving(&worker.1, &[ec2_ip.parse().expect("an IP")]);
    assert!(nodeup::certs::still_fits(
        &serving_plan,
        &ca_pem,
        &read("var/lib/kubelet/pki/kubelet-server.crt"),
        &read("var/lib/kubelet/pki/kubelet-server.key"),
        time::OffsetDateTime::now_utc(),
    ));
    let kubelet_config = String::from_utf8(read("var/lib/kubelet/config.yaml")).expect("text");
    assert!(
        kubelet_config.contains("tlsCertFile: /var/lib/kubelet/pki/kubelet-server.crt")
            && kubelet_config
                .contains("tlsPrivateKeyFile: /var/lib/kubelet/pki/kubelet-server.key"),
        "{kubelet_config}"
    );
    assert!(!root.join("var/lib/kubelet/bootstrap-kubeconfig").exists());
    let kubeconfig = String::from_utf8(read("var/lib/kubelet/kubeconfig")).expect("text");
    assert!(!kubeconfig.contains("token"), "{kubeconfig}");

    // Now as an attacker holding the worker's role credentials.
    let creds = role_credentials(&worker_record).await;
    let cp_record = cloud.instance(&control_plane.0);
    let attacker = Attacker {
        cloud: &cloud,
        ca_pem,
        server: SocketAddr::new(
            cp_record.private_ip.parse().expect("an IP"),
            nodeup::bootstrap::PORT,
        ),
        log: cp_record.log.clone(),
    };
    let now = SystemTime::now();

    // Its own name, once: issued. The same proof again: a replay.
    let own = attacker.request(&creds, &worker.1, now);
    let issued = attacker
        .send(&own)
        .await
        .expect("a certificate for the worker's own name");
    let serving = cert_facts(issued.serving_certificate.as_bytes()).expect("parses");
    assert!(
        serving.dns_names.iter().eq([&worker.1]),
        "{:?}",
        serving.dns_names
    );
    let issued = cert_facts(issued.certificate.as_bytes()).expect("parses");
    assert_eq!(issued.common_name, format!("system:node:{}", worker.1));
    attacker
        .refused("the same proof again", &own, "already used")
        .await;

    // Another node's name (the control plane's), properly signed by the worker: refused.
    let other = attacker.request(&creds, &control_plane.1, now);
    let wrong_name = attacker
        .refused("the control plane's name", &other, "private DNS name")
        .await;
    // The caller learns nothing of the instance: not its id, nor its name, nor that it exists.
    for secret in [&worker.0, &worker.1, &control_plane.0] {
        assert!(!wrong_name.contains(secret.as_str()), "{wrong_name}");
    }

    // A proof made for one CSR, sent with another (digest header rewritten to match): STS rejects the signature.
    let mut tampered = attacker.request(&creds, &worker.1, now);
    let (csr, _) = new_csr(&worker.1).expect("csr");
    tampered.csr = csr;
    let digest = request_digest(&tampered.node_name, &tampered.csr, &tampered.serving_csr);
    tampered
        .sts_headers
        .insert(REQUEST_DIGEST_HEADER.to_string(), digest);
    attacker
        .refused("a tampered proof", &tampered, "STS did not confirm")
        .await;
    // The same CSR swap without touching the digest: refused before STS is asked.
    let mut swapped = attacker.request(&creds, &worker.1, now);
    swapped.csr = new_csr(&worker.1).expect("csr").0;
    attacker
        .refused("another CSR", &swapped, "digest does not match")
        .await;
    // The serving CSR swapped (a key of someone else's to be named as this node's kubelet): refused alike.
    let mut swapped = attacker.request(&creds, &worker.1, now);
    swapped.serving_csr = new_csr(&worker.1).expect("csr").0;
    attacker
        .refused("another serving CSR", &swapped, "digest does not match")
        .await;

    // A proof signed ten minutes ago.
    let stale = attacker.request(&creds, &worker.1, now - Duration::from_secs(600));
    attacker
        .refused("a stale proof", &stale, "more than 300s")
        .await;

    // A proof signed by an IAM user (the operator), not an instance role: STS names no assumed role.
    let admin = Credentials::new(
        &cloud.record.admin.access_key_id,
        &cloud.record.admin.secret_access_key,
        Some("not-a-session".to_string()),
        None,
        "admin",
    );
    let user = attacker.request(&admin, &worker.1, now);
    attacker
        .refused("an IAM user's proof", &user, "STS did not confirm")
        .await;

    // The worker's credentials read no CA key, no secret, no token and no control-plane spec in the store.
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&cloud.sdk_config())
            .credentials_provider(creds.clone())
            .force_path_style(true)
            .build(),
    );
    let prefix = format!("clusters/{CLUSTER}");
    let cp_group = "control-plane-us-west-2a";
    for key in [
        "pki/kubernetes-ca/key.pem",
        "pki/etcd-ca/key.pem",
        "pki/service-account/key.pem",
        "secrets/encryption-keys.yaml",
        &format!("nodes/{cp_group}/spec.yaml"),
    ] {
        let key = format!("{prefix}/{key}");
        ballast_e2e::localcloud::assert_s3_read_denied(&s3, BUCKET, &key, "the worker's role")
            .await;
    }
    // What the worker may read, it reads: the CA certificate.
    s3.get_object()
        .bucket(BUCKET)
        .key(format!("{prefix}/pki/kubernetes-ca/cert.pem"))
        .send()
        .await
        .expect("the worker reads the CA certificate");
    // Where it found the bootstrap service: the control plane published its address, which the worker reads and
    // cannot change; the worker never had to ask EC2.
    let published_key = format!("{prefix}/control-plane/node-bootstrap.json");
    let services = published_services(&s3, &published_key).await;
    assert_eq!(
        services.services,
        [NodeBootstrapService {
            instance_id: control_plane.0.clone(),
            address: attacker.server,
        }]
    );
    let overwrite = s3
        .put_object()
        .bucket(BUCKET)
        .key(&published_key)
        .body(aws_sdk_s3::primitives::ByteStream::from_static(
            b"{\"services\":[]}",
        ))
        .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
        .send()
        .await
        .expect_err("the worker's role writes where workers find the bootstrap service");
    assert_eq!(
        overwrite
            .as_service_error()
            .and_then(aws_sdk_s3::error::ProvideErrorMetadata::code),
        Some("AccessDenied"),
        "{}",
        aws_sdk_s3::error::DisplayErrorContext(&overwrite)
    );
    // An entry of a control-plane instance gone without a replacement booting (a control-plane scale-down): the
    // control-plane node's periodic republish (every REPUBLISH_EVERY here) drops it, so workers stop trying its
    // address.
    let mut with_stale = services.clone();
    with_stale.services.push(NodeBootstrapService {
        instance_id: "i-0123456789abcdef0".to_string(),
        address: "127.0.0.99:3988".parse().expect("an address"),
    });
    cloud
        .s3()
        .put_object()
        .bucket(BUCKET)
        .key(&published_key)
        .body(serde_json::to_vec(&with_stale).expect("JSON").into())
        .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
        .send()
        .await
        .expect("an administrator writes a stale entry");
    let stale_written = Instant::now();
    // One interval, and a margin for a busy machine (the republish's EC2 listing and conditional write).
    let deadline = stale_written + Duration::from_secs(REPUBLISH_EVERY_SECS + 30);
    let republished = loop {
        let now = published_services(&s3, &published_key).await;
        if now != with_stale || Instant::now() > deadline {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(republished, services, "the stale entry stayed");
    eprintln!(
        "the stale entry was dropped {:?} after it was written (republish every {REPUBLISH_EVERY})",
        stale_written.elapsed()
    );
    let worker_log = std::fs::read_to_string(&worker_record.log).expect("the worker's log");
    assert!(
        worker_log
            .contains("kubelet client and serving certificates issued by the bootstrap service"),
        "{worker_log}"
    );
    assert!(
        !worker_log.contains("asking EC2 for the control-plane nodes"),
        "{worker_log}"
    );

    // And no shared bootstrap token exists in the store at all.
    let listed = cloud
        .s3()
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix(&prefix)
        .send()
        .await
        .expect("ListObjectsV2");
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert!(
        keys.iter()
            .any(|k| k.ends_with("pki/kubernetes-ca/key.pem")),
        "{keys:?}"
    );
    assert!(
        !keys.iter().any(|k| k.contains("bootstrap-token")),
        "{keys:?}"
    );

    forged_reports_are_not_trusted(&cloud, &s3, &control_plane, &worker, root).await;

    // An STS session naming another instance (any role can be assumed with any session name): the caller is told
    // the same as for every refusal, whether that instance exists or not.
    let nonexistent = attacker.request(&admin, &worker.1, now);
    attacker
        .refused(
            "an IAM user's proof, again",
            &nonexistent,
            "STS did not confirm",
        )
        .await;

    // The service logged each refusal with its reason, and never a signature.
    let log = std::fs::read_to_string(&cp_record.log).expect("the control plane's log");
    assert!(log.contains("node certificate refused"), "{log}");
    assert!(log.contains("already used"), "{log}");
    for request in [&own, &other, &tampered, &stale, &user] {
        let auth = &request.sts_headers["authorization"];
        let signature = auth.rsplit("Signature=").next().expect("a signature");
        assert!(!log.contains(signature), "a signature was logged");
        assert!(
            !log.contains(&request.sts_headers["x-amz-security-token"]),
            "a session token was logged"
        );
    }

    a_flood_starves_neither_etcd_nor_workers(&cloud, &control_plane, &worker, attacker.server)
        .await;
}

/// systemd's default soft RLIMIT_NOFILE for a service (`DefaultLimitNOFILE=1024:524288`).
const SYSTEMD_SOFT_NOFILE: u64 = 1024;
/// The idle connections issue 28 found enough to starve nodeup (its soft limit being 1024).
const FLOOD: usize = 1_100;
/// The flood's single source, and the first of the spread one's (127.0.0.10, ...): loopback addresses no local
/// cloud uses (their VPCs are 127.100-239.0.0/16) and not the workers' 127.0.0.1.
const FLOOD_SOURCE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const SPREAD_SOURCES: u8 = 40;
const PER_SPREAD_SOURCE: usize = 10;

/// Sets this process's soft RLIMIT_NOFILE (at most the hard one); returns the hard one.
fn set_soft_nofile(soft: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        assert_eq!(
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit),
            0,
            "getrlimit"
        );
        let hard = limit.rlim_max;
        limit.rlim_cur = soft.min(hard);
        assert_eq!(
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit),
            0,
            "setrlimit({soft})"
        );
        hard
    }
}

/// Idle TCP connections to the service from given sources, opened again once the service closed them (every
/// second), until stopped: the connections are what the service sees, the reopening keeps the pressure.
struct Flood {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<usize>,
}

impl Flood {
    fn start(target: SocketAddr, sources: Vec<(Ipv4Addr, usize)>) -> Flood {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut open: Vec<Option<tokio::net::TcpStream>> = Vec::new();
            let mut slots = Vec::new();
            for (ip, n) in &sources {
                slots.extend(std::iter::repeat_n(*ip, *n));
            }
            open.resize_with(slots.len(), || None);
            let mut opened = 0;
            loop {
                for (stream, ip) in open.iter_mut().zip(&slots) {
                    let alive = stream.as_ref().is_some_and(|s| {
                        let mut buf = [0u8; 16];
                        matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                    });
                    if !alive {
                        *stream = connect_from(*ip, target).await;
                        opened += usize::from(stream.is_some());
                    }
                }
                tokio::select! {
                    _ = stopped.changed() => return opened,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        });
        Flood { stop, task }
    }

    /// Stops, closes every connection, and says how many it opened in all.
    async fn stop(self) -> usize {
        let _ = self.stop.send(true);
        self.task.await.expect("the flood's task")
    }
}

async fn connect_from(ip: Ipv4Addr, target: SocketAddr) -> Option<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::new(IpAddr::V4(ip), 0)).ok()?;
    tokio::time::timeout(Duration::from_secs(2), socket.connect(target))
        .await
        .ok()?
        .ok()
}

/// Open descriptors of a process.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The control plane's etcd health as its supervisor last published it in the state store.
async fn published_health(cloud: &LocalCloud, instance_id: &str) -> Option<HealthReport> {
    let key = format!(
        "clusters/{}",
        ClusterPaths::new(CLUSTER).etcd_health(instance_id)
    );
    serde_json::from_slice(&cloud.s3_object(BUCKET, &key).await?).ok()
}

/// Waits until the supervisor publishes a report made after `after` (unix seconds) without an error: it read
/// the store (its epochs), reached etcd, and wrote the store.
async fn fresh_health(
    cloud: &LocalCloud,
    instance_id: &str,
    after: i64,
    what: &str,
) -> HealthReport {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let report = published_health(cloud, instance_id).await;
        if let Some(r) = report
            .as_ref()
            .filter(|r| r.updated_unix > after && r.last_error.is_none())
        {
            return r.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the etcd supervisor published no health report after {after} without an error \
             (it cannot reach the state store?); last: {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits for an instance's final boot report and says it configured.
async fn wait_configured(cloud: &LocalCloud, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(240);
    let report = loop {
        if let Some(r) = cloud.stored_report(BUCKET, "clusters/", CLUSTER, id).await {
            break r.report;
        }
        assert!(
            Instant::now() < deadline,
            "no final boot report for {id}; log:\n{}",
            cloud
                .try_instance(id)
                .and_then(|r| std::fs::read_to_string(r.log).ok())
                .unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        report.phase,
        Phase::Configured,
        "{id}: {:?}\n{}",
        report.errors,
        report.log_tail.join("\n")
    );
}

/// Issue 28, high 4: 1,100 idle connections to port 3988 used up nodeup's descriptors (soft limit 1024), and
/// the etcd supervisor in the same process could no longer read the state store. Flooded from one address and
/// from forty at once, the service holds no more than its caps, the supervisor keeps publishing its health
/// through the store; then, while the one address keeps flooding, a new worker joins.
async fn a_flood_starves_neither_etcd_nor_workers(
    cloud: &LocalCloud,
    control_plane: &(String, String, String),
    worker: &(String, String, String),
    service: SocketAddr,
) {
    use nodeup::bootstrap::server::{MAX_CONNECTIONS, MAX_CONNECTIONS_PER_PEER};
    let cp = cloud.instance(&control_plane.0);
    let pid = cp.nodeup.expect("the control plane's nodeup").pid;
    let baseline = open_fds(pid);
    let log_before = std::fs::read_to_string(&cp.log).unwrap_or_default().len();

    let started = i64::try_from(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("a clock after 1970")
            .as_secs(),
    )
    .expect("seconds fit");
    let single = Flood::start(service, vec![(FLOOD_SOURCE, FLOOD)]);
    let spread = Flood::start(
        service,
        (0..SPREAD_SOURCES)
            .map(|k| (Ipv4Addr::new(127, 0, 0, 10 + k), PER_SPREAD_SOURCE))
            .collect(),
    );
    // While both hold, nodeup's descriptors are sampled, and the supervisor must publish a report made after
    // the flood began, twice over (one round after the other).
    let sample = {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut peak = 0;
            while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(open_fds(pid));
                std::thread::sleep(Duration::from_millis(50));
            }
            peak
        });
        (stop, handle)
    };
    let first = fresh_health(cloud, &control_plane.0, started, "under both floods").await;
    fresh_health(
        cloud,
        &control_plane.0,
        first.updated_unix,
        "under both floods, again",
    )
    .await;
    sample.0.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = sample.1.join().expect("the sampler");
    let opened_spread = spread.stop().await;
    eprintln!(
        "flood: nodeup held {baseline} descriptors before, at most {peak} while {FLOOD} connections from one \
         address and {} from {SPREAD_SOURCES} others were held (reopened once closed: {opened_spread} by the \
         spread flood)",
        usize::from(SPREAD_SOURCES) * PER_SPREAD_SOURCE
    );
    // Every connection the service holds is one descriptor, and it holds no more than its cap in all, whatever
    // else nodeup has open (etcd's clients, the store's): the 16 of the one address are within the 256.
    assert!(
        peak <= baseline + MAX_CONNECTIONS + 32,
        "nodeup held {peak} descriptors under the flood ({baseline} before; the service's cap is {MAX_CONNECTIONS})"
    );
    let log = std::fs::read_to_string(&cp.log).unwrap_or_default();
    let during = &log[log_before.min(log.len())..];
    assert!(
        during.contains(&format!(
            "over its cap of {MAX_CONNECTIONS_PER_PEER} connections from one address"
        )),
        "the per-address cap was never reached: {during}"
    );
    assert!(
        during.contains(&format!(
            "over its cap of {MAX_CONNECTIONS} connections in all"
        )),
        "the cap in all was never reached: {during}"
    );
    assert!(!during.contains("Too many open files"), "{during}");

    // The one address keeps flooding; one more worker is launched and joins.
    let asg = cloud
        .autoscaling()
        .describe_auto_scaling_groups()
        .send()
        .await
        .expect("DescribeAutoScalingGroups");
    let nodes = asg
        .auto_scaling_groups()
        .iter()
        .find(|g| {
            g.instances()
                .iter()
                .any(|i| i.instance_id() == Some(worker.0.as_str()))
        })
        .and_then(|g| g.auto_scaling_group_name())
        .expect("the workers' group")
        .to_string();
    cloud
        .autoscaling()
        .set_desired_capacity()
        .auto_scaling_group_name(&nodes)
        .desired_capacity(2)
        .send()
        .await
        .expect("SetDesiredCapacity 2");
    let joined = loop {
        let new = instances(cloud)
            .await
            .into_iter()
            .find(|i| i.2 == "node" && i.0 != worker.0);
        if let Some(new) = new {
            break new;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    wait_configured(cloud, &joined.0).await;
    let root = cloud.instance(&joined.0).root;
    let cert = cert_facts(
        &std::fs::read(root.join("var/lib/kubelet/pki/kubelet-client.crt"))
            .expect("the new worker's kubelet certificate"),
    )
    .expect("a certificate");
    assert_eq!(cert.common_name, format!("system:node:{}", joined.1));
    let health = fresh_health(
        cloud,
        &control_plane.0,
        first.updated_unix,
        "under the one address's flood",
    )
    .await;
    let opened_single = single.stop().await;
    eprintln!(
        "flood: a new worker joined while one address held {FLOOD} connections (reopened once closed: \
         {opened_single} in all); etcd health published at {} during it",
        health.updated_at
    );
}

/// Boot reports are bound to their writer twice over. Every node signs its own, and the cluster validates. The
/// worker's role may write only its own report's key (`reports/<role-id>:<instance-id>.json`, its session's
/// `aws:userid`): IAM refuses it the control plane's report key, the key an older nodeup wrote
/// (`reports/<instance-id>.json`) and a key naming the control plane's instance under the worker's role, and
/// the control plane's report is as it wrote it. Then a principal that may write any key (the operator)
/// overwrites the control plane's report with a copy of its genuine content, unsigned and then signed with the
/// worker's own kubelet key: neither is trusted or counted, and both `validate cluster` and `get instances` say
/// why, naming the report.
async fn forged_reports_are_not_trusted(
    cloud: &LocalCloud,
    worker_s3: &aws_sdk_s3::Client,
    control_plane: &(String, String, String),
    worker: &(String, String, String),
    worker_root: &std::path::Path,
) {
    let state = format!("s3://{BUCKET}/clusters");
    let (ok, out) = cloud.ballast(&state, &["validate", "cluster", CLUSTER, "--wait", "3m"]);
    assert!(ok, "validate with every node's own signed report: {out}");

    let key = cloud
        .report_key(BUCKET, "clusters/", CLUSTER, &control_plane.0)
        .await
        .expect("the control plane's report");
    let worker_key = cloud
        .report_key(BUCKET, "clusters/", CLUSTER, &worker.0)
        .await
        .expect("the worker's report");
    let reports = format!("clusters/{}", ClusterPaths::new(CLUSTER).reports_prefix());
    let worker_role_id = worker_key
        .strip_prefix(&reports)
        .and_then(|w| w.split_once(':'))
        .map(|(role, _)| role.to_string())
        .unwrap_or_else(|| panic!("the worker's report key names no role: {worker_key}"));
    let genuine_bytes = cloud.s3_object(BUCKET, &key).await.expect("read");
    let genuine = ballast_e2e::reports::parse(&genuine_bytes).report;
    for target in [
        key.clone(),
        format!("{reports}{}.json", control_plane.0),
        format!("{reports}{worker_role_id}:{}.json", control_plane.0),
    ] {
        let put = worker_s3
            .put_object()
            .bucket(BUCKET)
            .key(&target)
            .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
            .body(genuine.to_json().expect("json").into())
            .send()
            .await;
        let err = put.expect_err(&format!("the worker's role wrote {target}"));
        assert_eq!(
            err.as_service_error().and_then(|e| e.meta().code()),
            Some("AccessDenied"),
            "{target}: {}",
            aws_sdk_s3::error::DisplayErrorContext(&err)
        );
    }
    assert_eq!(
        cloud.s3_object(BUCKET, &key).await.as_deref(),
        Some(genuine_bytes.as_slice()),
        "the control plane's report changed"
    );
    assert_eq!(
        cloud
            .report_key(BUCKET, "clusters/", CLUSTER, &control_plane.0)
            .await
            .as_deref(),
        Some(key.as_str()),
        "a second report of the control plane appeared"
    );

    let read = |p: &str| std::fs::read_to_string(worker_root.join(p)).expect(p);
    let worker_cert = read("var/lib/kubelet/pki/kubelet-client.crt");
    let worker_key = read("var/lib/kubelet/pki/kubelet-client.key");
    let forgeries: [(&str, Vec<u8>, String); 2] = [
        (
            "unsigned",
            genuine.to_json().expect("json"),
            "it is not signed".to_string(),
        ),
        (
            "signed with the worker's kubelet key",
            ballast_state::report_signature::sign(&genuine, &worker_key, &worker_cert)
                .expect("sign"),
            format!(
                "it is signed by node {}, but EC2 says the instance is {}",
                worker.1, control_plane.1
            ),
        ),
    ];
    for (what, body, why) in forgeries {
        cloud
            .s3()
            .put_object()
            .bucket(BUCKET)
            .key(&key)
            .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
            .body(body.into())
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "the operator writes {key} ({what}): {}",
                    aws_sdk_s3::error::DisplayErrorContext(e)
                )
            });
        let (ok, out) = cloud.ballast(&state, &["validate", "cluster", CLUSTER]);
        assert!(!ok, "validate counted a forged report ({what}): {out}");
        let line = out
            .lines()
            .find(|l| l.contains(&format!("node {}", control_plane.0)))
            .unwrap_or_else(|| panic!("no check of {}: {out}", control_plane.0));
        assert!(
            line.contains("fail")
                && line.contains(&format!(
                    "{} is not trusted, not counted",
                    key.strip_prefix("clusters/").unwrap_or(&key)
                ))
                && line.contains(&why),
            "{what}: {line}"
        );
        assert!(
            out.contains(&format!("node {} ", worker.0))
                && !out.contains(&format!("{}.json is not trusted", worker.0)),
            "the worker's own report stays trusted: {out}"
        );
        let got = std::process::Command::new(&ballast_e2e::localcloud::binaries().ballast)
            .args(["get", "instances", "--name", CLUSTER, "-o", "json"])
            .env_clear()
            .envs(cloud.operator_env(&state))
            .env("HOME", cloud.dir())
            .output()
            .expect("running ballast");
        let out = String::from_utf8_lossy(&got.stdout);
        assert!(
            got.status.success(),
            "get instances: {}",
            String::from_utf8_lossy(&got.stderr)
        );
        let views: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let view = views
            .as_array()
            .and_then(|v| {
                v.iter()
                    .find(|i| i["instanceId"] == control_plane.0.as_str())
            })
            .unwrap_or_else(|| panic!("{} not listed: {out}", control_plane.0));
        assert!(
            view["report"].is_null(),
            "an untrusted report is shown as the node's: {view}"
        );
        assert!(
            view["reportUntrusted"]
                .as_str()
                .is_some_and(|r| r.contains(&why)),
            "{what}: {view}"
        );
    }
}
