//! Node identity on the local cloud (issue 16, item 1), IAM enforced: a worker holds no shared bootstrap token;
//! its nodeup proves which instance it is with an `sts:GetCallerIdentity` request signed by its instance-role
//! credentials, and the control plane's bootstrap service issues a kubelet client certificate for exactly its
//! own node name. With a worker's real role credentials (from its IMDS), this test then plays the attacker: it
//! asks for the control plane's name, replays a proof, tampers with one, sends a stale one and one signed by
//! an IAM user, and reads secrets from the store: every attempt is refused. One cluster. Needs the emulator's
//! venv; fails (never skips) without it.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::Credentials;
use ballast_e2e::localcloud::LocalCloud;
use ballast_state::layout::ClusterPaths;
use ballast_state::node_bootstrap::{NodeBootstrapService, NodeBootstrapServices};
use ballast_state::report::Phase;
use localcloud::state::InstanceRecord;
use nodeup::bootstrap::client::{post_once, Answer};
use nodeup::bootstrap::issue::new_csr;
use nodeup::bootstrap::sts::{sign_get_caller_identity, sts_endpoint};
use nodeup::bootstrap::wire::{request_digest, CertificateRequest, REQUEST_DIGEST_HEADER};
use nodeup::certs::cert_facts;

const CLUSTER: &str = "identity.example.com";
const BUCKET: &str = "ballast-identity-e2e";

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
        let digest = request_digest(name, &csr);
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
            sts_headers,
        }
    }

    async fn send(&self, request: &CertificateRequest) -> Result<String, Answer> {
        post_once(&self.ca_pem, self.server, request).await
    }

    async fn refused(&self, what: &str, request: &CertificateRequest, expect: &str) {
        match self.send(request).await {
            Err(Answer::Refused(reason)) => {
                assert!(
                    reason.contains(expect),
                    "{what}: refused, but for {reason:?} (expected {expect:?})"
                )
            }
            other => panic!("{what}: expected a refusal containing {expect:?}, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_proves_who_it_is_and_can_be_no_one_else() {
    let cloud = LocalCloud::start();
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
    let paths = ClusterPaths::new(CLUSTER);
    for (id, _, _) in [&control_plane, &worker] {
        let key = format!("clusters/{}", paths.report(id));
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        let report = loop {
            if let Some(r) = cloud.stored_report(BUCKET, &key).await {
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
    };
    let now = SystemTime::now();

    // Its own name, once: issued. The same proof again: a replay.
    let own = attacker.request(&creds, &worker.1, now);
    let issued = attacker
        .send(&own)
        .await
        .expect("a certificate for the worker's own name");
    let issued = cert_facts(issued.as_bytes()).expect("parses");
    assert_eq!(issued.common_name, format!("system:node:{}", worker.1));
    attacker
        .refused("the same proof again", &own, "already used")
        .await;

    // Another node's name (the control plane's), properly signed by the worker: refused.
    let other = attacker.request(&creds, &control_plane.1, now);
    attacker
        .refused("the control plane's name", &other, "private DNS name")
        .await;

    // A proof made for one CSR, sent with another (digest header rewritten to match): STS rejects the signature.
    let mut tampered = attacker.request(&creds, &worker.1, now);
    let (csr, _) = new_csr(&worker.1).expect("csr");
    tampered.csr = csr;
    let digest = request_digest(&tampered.node_name, &tampered.csr);
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
    // control-plane node's periodic republish (every 60 s) drops it, so workers stop trying its address.
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
    let deadline = std::time::Instant::now()
        + nodeup::bootstrap::directory::REPUBLISH_EVERY
        + std::time::Duration::from_secs(30);
    let republished = loop {
        let now = published_services(&s3, &published_key).await;
        if now != with_stale || std::time::Instant::now() > deadline {
            break now;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    };
    assert_eq!(republished, services, "the stale entry stayed");
    let worker_log = std::fs::read_to_string(&worker_record.log).expect("the worker's log");
    assert!(
        worker_log.contains("kubelet client certificate issued by the bootstrap service"),
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
}

/// Boot reports are bound to their writer: every node signs its own, and the cluster validates; then the worker's
/// role credentials (which may write any `reports/*` key) overwrite the control plane's report with a copy of its
/// genuine content, unsigned and then signed with the worker's own kubelet key. Neither is trusted or counted,
/// and both `validate cluster` and `get instances` say why, naming the report.
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

    let key = format!(
        "clusters/{}",
        ClusterPaths::new(CLUSTER).report(&control_plane.0)
    );
    let genuine = cloud
        .stored_report(BUCKET, &key)
        .await
        .expect("the control plane's report")
        .report;
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
        worker_s3
            .put_object()
            .bucket(BUCKET)
            .key(&key)
            .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
            .body(body.into())
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "the worker writes {key} ({what}): {}",
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
                    "{CLUSTER}/reports/{}.json is not trusted, not counted",
                    control_plane.0
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
