//! A full etcd CA and Kubernetes CA rotation on a running cluster of 3 control-plane groups and one worker on the
//! local cloud, IAM enforced (docs/keys.md): `ballast rotate etcd-ca|kubernetes-ca --stage add|promote|drop`, both
//! keysets' stage before each `rolling-update cluster --yes --cloudonly` (one roll carries both: fewer rolls, the
//! same overlap rules), while a watcher polls etcd's voters and a client writes over mutual TLS with a certificate
//! of the etcd CA that is primary at that stage (trusting both CAs, as an operator's client must during the
//! overlap). The new Kubernetes CA is an operator's P-384 CA imported with `create secret keypair`. Asserted for
//! each roll: all 3 voters answer in every sample, no acknowledged write is lost, every instance (the worker too)
//! is replaced, `validate cluster` passes (it trusts the nodes' signed boot reports only when their certificates
//! chain to a Kubernetes CA of the keyset). After promote, an exported kubeconfig trusts both Kubernetes CAs and
//! its admin certificate is the new one's. At the end: a client certificate signed by the old etcd CA is refused
//! by every member and one signed by the new CA is accepted; every node's `/etc/kubernetes/pki/ca.crt` is the new
//! Kubernetes CA alone; the worker's kubelet certificate (from the bootstrap service) chains to it; an exported
//! kubeconfig trusts it alone; and the worker's role credentials read its certificate but no CA key, old or new.
//! No Kubernetes API runs here, hence `--cloudonly`.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use ballast_e2e::cluster_etcd::{control_plane, wait_for_settled, watch_quorum_counting};
use ballast_e2e::etcd_writer::{write_until_stopped, WriterControl};
use ballast_e2e::localcloud::LocalCloud;
use ballast_e2e::operator::{ballast_cli_on, create_ha_cluster};
use ballast_etcd::client::ClientTls;
use etcd_client::Client;
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};

const CLUSTER: &str = "rotate.example.com";
const BUCKET: &str = "ballast-state";
const SETTLE: Duration = Duration::from_secs(180);

/// An etcd CA as the operator holds it: certificate and key, from the state store.
struct Ca {
    cert: String,
    key: String,
}

impl Ca {
    /// A client certificate (ClientAuth) issued by this CA, as an operator's etcd client would hold.
    fn client_certificate(&self, name: &str) -> (String, String) {
        let issuer = Issuer::from_ca_cert_pem(
            &self.cert,
            KeyPair::from_pem(&self.key).expect("the CA key parses"),
        )
        .expect("the CA certificate parses");
        let key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + time::Duration::days(1);
        let cert = params.signed_by(&key, &issuer).expect("issue");
        (cert.pem(), key.serialize_pem())
    }
}

/// The etcd CA `create cluster` made (`pki/etcd-ca/{cert,key}.pem`).
async fn original_ca(cloud: &LocalCloud) -> Ca {
    Ca {
        cert: cloud
            .s3_text(BUCKET, &format!("clusters/{CLUSTER}/pki/etcd-ca/cert.pem"))
            .await,
        key: cloud
            .s3_text(BUCKET, &format!("clusters/{CLUSTER}/pki/etcd-ca/key.pem"))
            .await,
    }
}

/// The CA a rotation added to keyset `keyset`: the one item under `pki/<keyset>/<id>/` (docs/keys.md, "How it is
/// written"), and its id.
async fn added_ca(cloud: &LocalCloud, keyset: &str) -> (Ca, String) {
    let prefix = format!("clusters/{CLUSTER}/pki/{keyset}/");
    let listed = cloud
        .s3()
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix(&prefix)
        .send()
        .await
        .expect("ListObjectsV2");
    let ids: BTreeSet<String> = listed
        .contents()
        .iter()
        .filter_map(|o| o.key())
        .filter_map(|k| k.strip_prefix(prefix.as_str()))
        .filter_map(|rest| rest.split_once('/').map(|(id, _)| id.to_string()))
        .collect();
    assert_eq!(ids.len(), 1, "one added CA under {prefix}: {ids:?}");
    let id = ids.into_iter().next().expect("one id");
    let ca = Ca {
        cert: cloud
            .s3_text(BUCKET, &format!("{prefix}{id}/cert.pem"))
            .await,
        key: cloud
            .s3_text(BUCKET, &format!("{prefix}{id}/key.pem"))
            .await,
    };
    (ca, id)
}

/// The worker instances powered on now.
fn workers(cloud: &LocalCloud) -> Vec<localcloud::state::InstanceRecord> {
    cloud
        .powered_on()
        .into_iter()
        .filter(|r| !ballast_e2e::cluster_etcd::is_control_plane(r))
        .collect()
}

/// The instance role's credentials, as the worker's own IMDS hands them out.
async fn role_credentials(
    record: &localcloud::state::InstanceRecord,
) -> aws_credential_types::Credentials {
    use aws_credential_types::provider::ProvideCredentials;
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

/// A client of `endpoints` trusting `trusted` (a PEM bundle), presenting a certificate of `issuer`.
async fn client_of(
    endpoints: &[String],
    trusted: &str,
    issuer: &Ca,
    name: &str,
) -> Result<Client, String> {
    let (cert, key) = issuer.client_certificate(name);
    ClientTls::from_pem(
        trusted.as_bytes().to_vec(),
        cert.into_bytes(),
        key.into_bytes(),
    )
    .connect(endpoints, Duration::from_secs(2))
    .await
    .map_err(|e| e.to_string())
}

fn endpoints(cloud: &LocalCloud) -> Vec<String> {
    control_plane(cloud)
        .iter()
        .map(|r| format!("https://{}:2379", r.private_ip))
        .collect()
}

/// Writes `<prefix><n>` until stopped (paced: a steady load through the roll), as a client trusting `trusted`
/// with a certificate of `issuer`, reconnecting over the endpoints alive now (they change as instances are
/// replaced).
async fn write_throughout(
    cloud: &LocalCloud,
    control: &WriterControl,
    prefix: &str,
    trusted: &str,
    issuer: &Ca,
) -> ballast_e2e::etcd_writer::WriterReport {
    write_until_stopped(control, prefix, Duration::from_millis(20), || async move {
        client_of(&endpoints(cloud), trusted, issuer, "writer")
            .await
            .ok()
    })
    .await
}

/// Runs one stage of both CAs and its roll with the watcher and the writer; asserts all voters, no lost write,
/// every instance replaced, validate.
async fn stage_and_roll(cloud: &LocalCloud, stage: &str, trusted: &str, issuer: &Ca) {
    let before: BTreeSet<String> = control_plane(cloud)
        .into_iter()
        .map(|r| r.instance_id)
        .collect();
    let workers_before: BTreeSet<String> =
        workers(cloud).into_iter().map(|r| r.instance_id).collect();
    assert_eq!(workers_before.len(), 1, "{workers_before:?}");
    for keyset in ["etcd-ca", "kubernetes-ca"] {
        ballast_cli_on(cloud, CLUSTER)
            .args(["rotate", keyset, "--stage", stage])
            .assert()
            .success();
    }
    let stop = AtomicBool::new(false);
    let sampled = std::sync::atomic::AtomicUsize::new(0);
    let writer = WriterControl::new();
    let started = Instant::now();
    let prefix = format!("rotate/{stage}/");
    let (quorum, written, roll) = tokio::join!(
        watch_quorum_counting(cloud, &stop, Duration::from_millis(100), &sampled),
        write_throughout(cloud, &writer, &prefix, trusted, issuer),
        async {
            // The writer under way (connected with the CA's client certificate, its writes acknowledged) before
            // the first termination; the watcher samples from its first poll.
            writer.wait_for_more_writes(5, SETTLE).await;
            // And the watcher under way (two samples of the whole cluster), so the roll, a few seconds here, is
            // watched from before its first termination to its end.
            ballast_e2e::wait::wait_until(
                SETTLE,
                "the quorum watcher's first two samples",
                || async { sampled.load(std::sync::atomic::Ordering::Relaxed) >= 2 },
            )
            .await;
            // On a thread of its own: `output()` blocks, and on this task it would stop the watcher and the
            // writer for the whole roll (they share the task through `join!`).
            let mut roll = ballast_cli_on(cloud, CLUSTER);
            roll.args(["rolling-update", "cluster", "--yes", "--cloudonly"]);
            let out = tokio::task::spawn_blocking(move || roll.output())
                .await
                .expect("the roll's thread")
                .expect("rolling-update");
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            writer.stop();
            out
        }
    );
    let elapsed = started.elapsed();
    eprintln!("{}", String::from_utf8_lossy(&roll.stderr));
    assert!(
        roll.status.success(),
        "the roll after {stage}: {}",
        String::from_utf8_lossy(&roll.stderr)
    );
    let (samples, fewest) = (quorum.samples, quorum.fewest());
    eprintln!(
        "etcd-ca and kubernetes-ca {stage}: roll {elapsed:?}; {samples} samples ({} during an election), fewest voters answering {fewest}; writer {} acknowledged, {} failed",
        quorum.leaderless,
        written.acknowledged.len(),
        written.failures
    );
    // A roll takes a few seconds here and one sample up to a few seconds (a terminated member's endpoint times
    // out), so a handful of samples is all there is: two before the roll began, and those the roll left time for.
    assert!(samples >= 3, "the watcher hardly sampled: {samples}");
    // Replacing a member goes through two voters for a moment (removed, then its successor joins): quorum (2 of
    // 3) must hold in every sample; the minimum measured is reported above.
    assert!(
        fewest >= 2,
        "etcd's voters fell below quorum during the {stage} roll: {fewest} of 3 answering ({:?})",
        quorum.worst
    );
    let mut client = client_of(&endpoints(cloud), trusted, issuer, "reader")
        .await
        .expect("the reader connects");
    written.assert_none_lost(&mut client, 11).await;
    // The roll replaced every control-plane instance: each stage changes every control-plane node spec.
    let after: BTreeSet<String> = control_plane(cloud)
        .into_iter()
        .map(|r| r.instance_id)
        .collect();
    assert!(
        before.is_disjoint(&after),
        "{stage}: not every control-plane instance was replaced: before {before:?}, after {after:?}"
    );
    // The worker too: each Kubernetes CA stage changes every node spec.
    let workers_after: BTreeSet<String> =
        workers(cloud).into_iter().map(|r| r.instance_id).collect();
    assert!(
        workers_before.is_disjoint(&workers_after) && workers_after.len() == 1,
        "{stage}: the worker was not replaced: before {workers_before:?}, after {workers_after:?}"
    );
    wait_for_settled(cloud, 3, SETTLE).await;
    ballast_cli_on(cloud, CLUSTER)
        .args(["validate", "cluster", "--wait", "2m"])
        .assert()
        .success();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_etcd_and_kubernetes_cas_rotate_on_a_running_cluster_without_losing_a_write() {
    let cloud = LocalCloud::start();
    create_ha_cluster(&cloud, CLUSTER, 1).await;
    ballast_cli_on(&cloud, CLUSTER)
        .args(["validate", "cluster", "--wait", "5m"])
        .assert()
        .success();
    wait_for_settled(&cloud, 3, SETTLE).await;
    let old = original_ca(&cloud).await;
    let old_kubernetes_ca = cloud
        .s3_text(
            BUCKET,
            &format!("clusters/{CLUSTER}/pki/kubernetes-ca/cert.pem"),
        )
        .await;

    // add: the new CA is trusted beside the old one, which still issues.
    let started = Instant::now();
    ballast_cli_on(&cloud, CLUSTER)
        .args(["rotate", "etcd-ca", "--stage", "add"])
        .assert()
        .success();
    let (new, _) = added_ca(&cloud, "etcd-ca").await;
    let both = format!("{}\n{}", old.cert.trim_end(), new.cert);
    // The new Kubernetes CA is the operator's own (`create secret keypair`), and not like Ballast's: a P-384 key
    // and a subject of its own. Every certificate the cluster issues from here on is signed with it.
    let operator_ca = operator_ca();
    let inputs = tempfile::tempdir().expect("tempdir");
    let (cert_file, key_file) = (inputs.path().join("ca.crt"), inputs.path().join("ca.key"));
    std::fs::write(&cert_file, &operator_ca.cert).expect("write the CA certificate");
    std::fs::write(&key_file, &operator_ca.key).expect("write the CA key");
    let imported = ballast_cli_on(&cloud, CLUSTER)
        .args(["create", "secret", "keypair", "kubernetes-ca", "--cert"])
        .arg(&cert_file)
        .arg("--key")
        .arg(&key_file)
        .output()
        .expect("create secret keypair");
    let stderr = String::from_utf8_lossy(&imported.stderr);
    assert!(imported.status.success(), "{stderr}");
    assert!(!stderr.contains("PRIVATE KEY"), "{stderr}");
    // The stages ran above: running them again is a no-op that still writes the node specs (docs/keys.md).
    stage_and_roll(&cloud, "add", &both, &old).await;
    // promote: the new CA issues; the writer's certificate is now the new CA's.
    stage_and_roll(&cloud, "promote", &both, &new).await;
    // An exported kubeconfig trusts both Kubernetes CAs (the new one first) and its admin certificate is the
    // new CA's.
    let (new_kubernetes_ca, _) = added_ca(&cloud, "kubernetes-ca").await;
    assert_eq!(
        new_kubernetes_ca.cert.trim(),
        operator_ca.cert.trim(),
        "the imported CA"
    );
    let (ca_data, admin) = export_admin(&cloud).await;
    assert_eq!(
        ca_data,
        ballast_state::key_material::pem_bundle([
            new_kubernetes_ca.cert.as_str(),
            old_kubernetes_ca.as_str()
        ]),
        "after promote the kubeconfig trusts the new and the old Kubernetes CA, the new one first"
    );
    assert!(issued_by(&admin, &new_kubernetes_ca.cert));
    assert!(!issued_by(&admin, &old_kubernetes_ca));
    // Until drop, the old CA's client certificates still work (what makes the refusal below the drop's doing).
    let mut before_drop = client_of(&endpoints(&cloud), &both, &old, "old-ca-client")
        .await
        .expect("the old CA's client connects before drop");
    tokio::time::timeout(
        Duration::from_secs(5),
        before_drop.put("rotate/before-drop", "x", None),
    )
    .await
    .expect("in time")
    .expect("the old CA's client is accepted before drop");
    // drop: the old CA is trusted by no node.
    stage_and_roll(&cloud, "drop", &both, &new).await;
    for r in control_plane(&cloud) {
        let path = r.root.join("etc/kubernetes/pki/etcd/ca.crt");
        let bundle = std::fs::read_to_string(&path).expect("the node's etcd CA bundle");
        assert_eq!(
            bundle.trim(),
            new.cert.trim(),
            "{} trusts more than the new etcd CA after drop",
            r.instance_id
        );
    }
    eprintln!("the whole rotation: {:?}", started.elapsed());
    kubernetes_ca_rotated(&cloud, &old_kubernetes_ca).await;
    let (ca_data, admin) = export_admin(&cloud).await;
    assert_eq!(
        ca_data,
        ballast_state::key_material::pem_bundle([new_kubernetes_ca.cert.as_str()]),
        "after drop: the new CA alone"
    );
    assert!(issued_by(&admin, &new_kubernetes_ca.cert));

    // Every member refuses a certificate of the old CA and accepts one of the new. The client trusts both CAs,
    // so a failure can only be the member refusing the client's certificate.
    for r in control_plane(&cloud) {
        let endpoint = vec![format!("https://{}:2379", r.private_ip)];
        let refused = match client_of(&endpoint, &both, &old, "old-ca-client").await {
            Ok(mut c) => {
                match tokio::time::timeout(Duration::from_secs(5), c.put("rotate/old", "x", None))
                    .await
                {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some("timed out".to_string()),
                }
            }
            Err(e) => Some(e),
        };
        assert!(
            refused.is_some(),
            "{} accepted a client certificate of the old etcd CA",
            r.instance_id
        );
        eprintln!("{} refused the old CA's client: {refused:?}", r.instance_id);
        let mut accepted = client_of(&endpoint, &both, &new, "new-ca-client")
            .await
            .unwrap_or_else(|e| panic!("{}: the new CA's client: {e}", r.instance_id));
        tokio::time::timeout(
            Duration::from_secs(5),
            accepted.put("rotate/new", "x", None),
        )
        .await
        .expect("in time")
        .unwrap_or_else(|e| panic!("{}: the new CA's client: {e}", r.instance_id));
    }
    // The old CA's write never landed.
    let mut client = client_of(&endpoints(&cloud), &new.cert, &new, "reader")
        .await
        .expect("reader");
    let old_write = client.get("rotate/old", None).await.expect("get");
    assert!(old_write.kvs().is_empty(), "the old CA's client wrote");
}

/// After the Kubernetes CA's drop and its roll: every node trusts the new CA alone, the worker's kubelet
/// certificate is the new CA's, and the worker's role reads the CA certificates it needs but no key.
async fn kubernetes_ca_rotated(cloud: &LocalCloud, old_cert: &str) {
    let (new, new_id) = added_ca(cloud, "kubernetes-ca").await;
    assert_ne!(new.cert.trim(), old_cert.trim());
    for r in cloud.powered_on() {
        let bundle = std::fs::read_to_string(r.root.join("etc/kubernetes/pki/ca.crt"))
            .expect("the node's Kubernetes CA bundle");
        assert_eq!(
            bundle.trim(),
            new.cert.trim(),
            "{} trusts more than the new Kubernetes CA after drop",
            r.instance_id
        );
    }
    let worker = workers(cloud).into_iter().next().expect("a worker");
    let read = |p: &str| std::fs::read(worker.root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let cert = read("var/lib/kubelet/pki/kubelet-client.crt");
    let facts = nodeup::certs::cert_facts(&cert).expect("the worker's kubelet certificate");
    let node = facts
        .common_name
        .strip_prefix("system:node:")
        .expect("a node's certificate")
        .to_string();
    // Issued by the new CA (name, key and validity checked as nodeup keeps it), not by the old one.
    let plan = nodeup::cert_plan::worker_kubelet_client(&node);
    let key = read("var/lib/kubelet/pki/kubelet-client.key");
    let now = time::OffsetDateTime::now_utc();
    assert!(
        nodeup::certs::still_fits(&plan, &new.cert, &cert, &key, now),
        "the worker's kubelet certificate is not the new Kubernetes CA's"
    );
    assert!(!nodeup::certs::still_fits(
        &plan, old_cert, &cert, &key, now
    ));

    // The worker's own role credentials (IAM enforced): the new CA's certificate yes, no key of any CA.
    let creds = role_credentials(&worker).await;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&cloud.sdk_config())
            .credentials_provider(creds)
            .force_path_style(true)
            .build(),
    );
    let prefix = format!("clusters/{CLUSTER}/");
    s3.get_object()
        .bucket(BUCKET)
        .key(format!("{prefix}pki/kubernetes-ca/{new_id}/cert.pem"))
        .send()
        .await
        .expect("the worker reads the new Kubernetes CA's certificate");
    let listed = cloud
        .s3()
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix(format!("{prefix}pki/"))
        .send()
        .await
        .expect("ListObjectsV2");
    let keys: Vec<String> = listed
        .contents()
        .iter()
        .filter_map(|o| o.key())
        .filter(|k| k.ends_with("/key.pem"))
        .map(str::to_string)
        .collect();
    assert!(
        keys.iter()
            .any(|k| k.ends_with(&format!("kubernetes-ca/{new_id}/key.pem"))),
        "{keys:?}"
    );
    assert!(
        keys.len() >= 5,
        "every CA's and the service-account key: {keys:?}"
    );
    for key in &keys {
        ballast_e2e::localcloud::assert_s3_read_denied(&s3, BUCKET, key, "the worker's role").await;
    }
}

/// `ballast export kubeconfig --admin` into a fresh file: the cluster's CA data and the admin certificate (PEM).
async fn export_admin(cloud: &LocalCloud) -> (String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("config");
    ballast_cli_on(cloud, CLUSTER)
        .args(["export", "kubeconfig", "--admin=1h", "--kubeconfig"])
        .arg(&file)
        .assert()
        .success();
    let text = std::fs::read_to_string(&file).expect("the kubeconfig");
    let field = |name: &str| {
        use base64::Engine;
        let data = text
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} in the kubeconfig"));
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .expect("base64"),
        )
        .expect("PEM")
    };
    (
        field("certificate-authority-data"),
        field("client-certificate-data"),
    )
}

/// Whether certificate `cert` (PEM) is signed by the CA whose certificate is `ca` (PEM).
fn issued_by(cert: &str, ca: &str) -> bool {
    let (_, cert) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).expect("PEM");
    let cert = cert.parse_x509().expect("a certificate");
    let (_, ca) = x509_parser::pem::parse_x509_pem(ca.as_bytes()).expect("PEM");
    let ca = ca.parse_x509().expect("a CA certificate");
    cert.issuer() == ca.subject() && cert.verify_signature(Some(ca.public_key())).is_ok()
}

/// An operator's Kubernetes CA, made outside Ballast: ECDSA P-384, its own subject, five years.
fn operator_ca() -> Ca {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).expect("a P-384 key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(DnType::CommonName, "Example Corp Kubernetes CA");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Example Corp");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(5 * 365);
    let cert = params.self_signed(&key).expect("self-signed");
    Ca {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}
