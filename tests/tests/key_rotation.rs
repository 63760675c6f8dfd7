//! A full etcd CA rotation on a running cluster of 3 control-plane groups on the local cloud, IAM enforced
//! (docs/keys.md): `ballast rotate etcd-ca --stage add|promote|drop`, each followed by `rolling-update cluster
//! --yes --cloudonly`, while a watcher polls etcd's voters and a client writes over mutual TLS with a certificate
//! of the CA that is primary at that stage (trusting both CAs, as an operator's client must during the
//! overlap). Asserted for each roll: all 3 voters answer in every sample, no acknowledged write is lost,
//! `validate cluster` passes; at the end a client certificate signed by the old CA is refused by every member
//! and one signed by the new CA is accepted. No Kubernetes API runs here, hence `--cloudonly`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use ballast_e2e::cluster_etcd::{control_plane, wait_for_settled, watch_quorum};
use ballast_e2e::localcloud::LocalCloud;
use ballast_etcd::client::ClientTls;
use etcd_client::{Client, GetOptions};
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};

const CLUSTER: &str = "rotate.example.com";
const BUCKET: &str = "ballast-state";
const STATE: &str = "s3://ballast-state/clusters";
const SETTLE: Duration = Duration::from_secs(180);

fn ballast(cloud: &LocalCloud) -> Command {
    let mut cmd = Command::new(&ballast_e2e::localcloud::binaries().ballast);
    cmd.env_clear()
        .envs(cloud.operator_env(STATE))
        .env("BALLAST_CLUSTER_NAME", CLUSTER)
        .timeout(Duration::from_secs(600));
    cmd
}

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

/// The etcd CA a rotation added: the one item under `pki/etcd-ca/<id>/` (docs/keys.md, "How it is written").
async fn added_ca(cloud: &LocalCloud) -> Ca {
    let prefix = format!("clusters/{CLUSTER}/pki/etcd-ca/");
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
    assert_eq!(ids.len(), 1, "one added etcd CA under {prefix}: {ids:?}");
    let id = ids.into_iter().next().expect("one id");
    Ca {
        cert: cloud
            .s3_text(BUCKET, &format!("{prefix}{id}/cert.pem"))
            .await,
        key: cloud
            .s3_text(BUCKET, &format!("{prefix}{id}/key.pem"))
            .await,
    }
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

/// Writes `<prefix><n>` one after the other until told to stop, as a client trusting `trusted` with a
/// certificate of `issuer`; returns the acknowledged keys and the failures.
async fn write_throughout(
    cloud: &LocalCloud,
    stop: &AtomicBool,
    prefix: &str,
    trusted: &str,
    issuer: &Ca,
) -> (Vec<String>, usize) {
    let mut acknowledged = Vec::new();
    let mut failures = 0;
    let mut client = client_of(&endpoints(cloud), trusted, issuer, "writer")
        .await
        .expect("the writer connects");
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("{prefix}{n:06}");
        n += 1;
        match tokio::time::timeout(Duration::from_secs(5), client.put(key.clone(), "w", None)).await
        {
            Ok(Ok(_)) => acknowledged.push(key),
            _ => {
                failures += 1;
                // The endpoints change as instances are replaced.
                if let Ok(fresh) = client_of(&endpoints(cloud), trusted, issuer, "writer").await {
                    client = fresh;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (acknowledged, failures)
}

/// Runs one stage and its roll with the watcher and the writer; asserts all voters, no lost write, validate.
async fn stage_and_roll(cloud: &LocalCloud, stage: &str, trusted: &str, issuer: &Ca) {
    let before: BTreeSet<String> = control_plane(cloud)
        .into_iter()
        .map(|r| r.instance_id)
        .collect();
    ballast(cloud)
        .args(["rotate", "etcd-ca", "--stage", stage])
        .assert()
        .success();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let prefix = format!("rotate/{stage}/");
    let (quorum, (acknowledged, failures), roll) = tokio::join!(
        watch_quorum(cloud, &stop, Duration::from_millis(100)),
        write_throughout(cloud, &stop, &prefix, trusted, issuer),
        async {
            // Let the writer and the watcher start before the first termination.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let out = ballast(cloud)
                .args(["rolling-update", "cluster", "--yes", "--cloudonly"])
                .output()
                .expect("rolling-update");
            stop.store(true, Ordering::Relaxed);
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
        "etcd-ca {stage}: roll {elapsed:?}; {samples} samples ({} during an election), fewest voters answering {fewest}; writer {} acknowledged, {failures} failed",
        quorum.leaderless,
        acknowledged.len()
    );
    // A roll takes about 10 s here and one sample up to a few seconds (a terminated member's endpoint times
    // out), so a handful of samples is all there is.
    assert!(samples >= 3, "the watcher hardly sampled: {samples}");
    // Replacing a member goes through two voters for a moment (removed, then its successor joins): quorum (2 of
    // 3) must hold in every sample; the minimum measured is reported above.
    assert!(
        fewest >= 2,
        "etcd's voters fell below quorum during the {stage} roll: {fewest} of 3 answering ({:?})",
        quorum.worst
    );
    assert!(acknowledged.len() > 10, "the writer hardly wrote");
    let mut client = client_of(&endpoints(cloud), trusted, issuer, "reader")
        .await
        .expect("the reader connects");
    let stored: BTreeSet<String> = client
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .expect("get")
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect();
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|k| !stored.contains(*k))
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    // The roll replaced every control-plane instance: each stage changes every control-plane node spec.
    let after: BTreeSet<String> = control_plane(cloud)
        .into_iter()
        .map(|r| r.instance_id)
        .collect();
    assert!(
        before.is_disjoint(&after),
        "{stage}: not every control-plane instance was replaced: before {before:?}, after {after:?}"
    );
    wait_for_settled(cloud, 3, SETTLE).await;
    ballast(cloud)
        .args(["validate", "cluster", "--wait", "2m"])
        .assert()
        .success();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_etcd_ca_rotates_on_a_running_cluster_without_losing_a_write() {
    let cloud = LocalCloud::start();
    cloud.prepare_for_ballast(BUCKET).await;
    ballast(&cloud)
        .args([
            "create",
            "cluster",
            "--name",
            CLUSTER,
            "--zones",
            "us-west-2a,us-west-2b,us-west-2c",
            "--node-count",
            "0",
            "--yes",
        ])
        .assert()
        .success();
    ballast(&cloud)
        .args(["validate", "cluster", "--wait", "5m"])
        .assert()
        .success();
    wait_for_settled(&cloud, 3, SETTLE).await;
    let old = original_ca(&cloud).await;

    // add: the new CA is trusted beside the old one, which still issues.
    let started = Instant::now();
    ballast(&cloud)
        .args(["rotate", "etcd-ca", "--stage", "add"])
        .assert()
        .success();
    let new = added_ca(&cloud).await;
    let both = format!("{}\n{}", old.cert.trim_end(), new.cert);
    // The stage ran above: running it again is a no-op that still writes the node specs (docs/keys.md).
    stage_and_roll(&cloud, "add", &both, &old).await;
    // promote: the new CA issues; the writer's certificate is now the new CA's.
    stage_and_roll(&cloud, "promote", &both, &new).await;
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
