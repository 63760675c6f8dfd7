//! `ballast toolbox dump` and the nodes' published log tails on the local cloud, IAM enforced (issue 34, parts 1
//! and 2). One cluster (a control-plane node and a worker, both configured); then the worker group's node spec is
//! tampered with and the group grows by one, so the new worker's boot fails (its node spec's sha256 is not its
//! user-data's) and it publishes its log tail at once. `toolbox dump --out DIR` names the failure, carries that
//! node's tail and a fresh tail of the control-plane node (asked for by the dump), and no private key or secret
//! value of the cluster (read from the store: the CA keys, the service-account key, the encryption keys) appears
//! anywhere in it. Then, with the configured worker's own role credentials: it writes its own tail, and cannot
//! write another node's or read any (AccessDenied). Needs the emulator's venv; fails (never skips) without it.

use std::path::Path;
use std::time::Duration;

use aws_credential_types::provider::ProvideCredentials;
use ballast_e2e::localcloud::LocalCloud;
use ballast_e2e::wait::wait_until;
use ballast_state::layout::ClusterPaths;
use ballast_state::report::Phase;

const CLUSTER: &str = "toolbox.example.com";
const BUCKET: &str = "ballast-toolbox-e2e";

/// `(instance id, role tag)` of every running instance of the cluster.
async fn running(cloud: &LocalCloud) -> Vec<(String, String)> {
    let answer = cloud
        .ec2()
        .describe_instances()
        .send()
        .await
        .expect("DescribeInstances");
    answer
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) == Some("running"))
        .filter_map(|i| {
            let role = i
                .tags()
                .iter()
                .find(|t| t.key() == Some("ballast.dev/role"))?
                .value()?
                .to_string();
            Some((i.instance_id()?.to_string(), role))
        })
        .collect()
}

async fn report_phase(cloud: &LocalCloud, id: &str) -> Option<(Phase, Vec<String>)> {
    let stored = cloud
        .stored_report(BUCKET, "clusters/", CLUSTER, id)
        .await?;
    Some((stored.report.phase, stored.report.errors))
}

/// Keys under `clusters/<cluster>/logs/`.
async fn tail_keys(cloud: &LocalCloud) -> Vec<String> {
    let prefix = format!("clusters/{}", ClusterPaths::new(CLUSTER).log_tails_prefix());
    cloud
        .s3()
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix(&prefix)
        .send()
        .await
        .map(|a| {
            a.contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Every file of the dump, concatenated.
fn whole_dump(dir: &Path) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(dir).expect("the dump directory") {
        let path = entry.expect("an entry").path();
        all.push_str(&std::fs::read_to_string(&path).expect("a dump file"));
    }
    all
}

/// The secret lines of a PEM private key: its base64 body, line by line.
fn pem_body_lines(pem: &str) -> Vec<String> {
    pem.lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 16)
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dump_names_a_failed_boot_carries_its_tail_and_no_secret() {
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

    let first = wait_until(
        Duration::from_secs(240),
        "both nodes configured",
        || async {
            let all = running(&cloud).await;
            if all.len() != 2 {
                return None;
            }
            for (id, _) in &all {
                match report_phase(&cloud, id).await {
                    Some((Phase::Configured, _)) => {}
                    Some((Phase::Failed, errors)) => panic!("{id} failed to boot: {errors:?}"),
                    None => return None,
                }
            }
            Some(all)
        },
    )
    .await;
    let control_plane = first
        .iter()
        .find(|i| i.1 == "control-plane")
        .expect("a control-plane node")
        .0
        .clone();
    let worker = first
        .iter()
        .find(|i| i.1 == "node")
        .expect("a worker")
        .0
        .clone();

    // Break the worker group: its node spec no longer hashes to what its launch template's user-data says.
    let spec_key = format!("clusters/{}", ClusterPaths::new(CLUSTER).node_spec("nodes"));
    let mut spec = cloud.s3_text(BUCKET, &spec_key).await;
    spec.push_str("\n# changed after the launch template was written\n");
    cloud
        .s3()
        .put_object()
        .bucket(BUCKET)
        .key(&spec_key)
        .body(spec.into_bytes().into())
        .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
        .send()
        .await
        .expect("tampering with the node spec");
    cloud
        .autoscaling()
        .set_desired_capacity()
        .auto_scaling_group_name(format!("nodes.{CLUSTER}"))
        .desired_capacity(2)
        .send()
        .await
        .expect("growing the worker group");
    let broken = wait_until(
        Duration::from_secs(180),
        "the new worker's failed boot and its tail",
        || async {
            for (id, _) in running(&cloud).await {
                if id == worker || id == control_plane {
                    continue;
                }
                if let Some((Phase::Failed, _)) = report_phase(&cloud, &id).await {
                    if tail_keys(&cloud)
                        .await
                        .iter()
                        .any(|k| k.ends_with(&format!(":{id}.json")))
                    {
                        return Some(id);
                    }
                }
            }
            None
        },
    )
    .await;

    // The dump.
    let dir = cloud.dir().join("dump");
    let output = cloud
        .ballast_command(&state)
        .args(["toolbox", "dump", CLUSTER, "-o", "json", "--out"])
        .arg(&dir)
        .output()
        .expect("running ballast toolbox dump");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "toolbox dump: {:?}\n{stderr}",
        output.status
    );
    assert!(
        stderr.contains(
            "toolbox dump: reading the spec, AWS by the cluster's tags, the boot reports"
        ),
        "progress on stderr: {stderr}"
    );
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("the dump directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "cloud.json",
            "completed.json",
            "etcd.json",
            "index.json",
            "logs.json",
            "markers.json",
            "reports.json",
            "spec.json"
        ]
    );
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect(f);
    let index: serde_json::Value = serde_json::from_str(&read("index.json")).expect("the index");
    assert_eq!(index["partial"], false, "{index}");

    // The failure is named, in the reports and in the failed node's tail.
    let reports: serde_json::Value = serde_json::from_str(&read("reports.json")).expect("reports");
    let failed = reports["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .find(|r| r["instanceId"] == broken.as_str())
        .expect("the failed node's report");
    assert_eq!(failed["report"]["phase"], "Failed", "{failed}");
    assert!(
        failed["report"]["errors"]
            .to_string()
            .contains("refusing the node spec"),
        "{failed}"
    );
    let logs: serde_json::Value = serde_json::from_str(&read("logs.json")).expect("logs");
    let tails = logs["tails"].as_array().expect("tails");
    let tail = tails
        .iter()
        .find(|t| t["instanceId"] == broken.as_str())
        .expect("the failed node's tail");
    assert_eq!(tail["reason"], "boot-failed", "{tail}");
    assert!(
        tail["nodeup"]
            .to_string()
            .contains("refusing the node spec"),
        "{tail}"
    );
    // The control-plane node answered the dump's request: a fresh tail, with its etcd supervisor's lines.
    let cp_tail = tails
        .iter()
        .find(|t| t["instanceId"] == control_plane.as_str())
        .expect("the control plane's tail");
    assert_eq!(cp_tail["fresh"], true, "{cp_tail}");
    assert!(
        !cp_tail["etcd"].as_array().expect("etcd lines").is_empty(),
        "{cp_tail}"
    );
    // The cloud's view holds the three instances, and etcd's part its member.
    let cloud_view = read("cloud.json");
    for id in [&control_plane, &worker, &broken] {
        assert!(cloud_view.contains(id.as_str()), "{id} in cloud.json");
    }
    assert!(read("etcd.json").contains(control_plane.as_str()));

    // No private key or secret value of the cluster anywhere in the dump.
    let all = whole_dump(&dir);
    let prefix = format!("clusters/{CLUSTER}");
    let mut secrets = Vec::new();
    for key in [
        "pki/kubernetes-ca/key.pem",
        "pki/etcd-ca/key.pem",
        "pki/service-account/key.pem",
    ] {
        secrets.extend(pem_body_lines(
            &cloud.s3_text(BUCKET, &format!("{prefix}/{key}")).await,
        ));
    }
    let encryption = cloud
        .s3_text(BUCKET, &format!("{prefix}/secrets/encryption-keys.yaml"))
        .await;
    // `keys: [{name: ..., secret: ...}]`: every `secret:` value.
    for line in encryption.lines() {
        if let Some(secret) = line.trim().trim_start_matches("- ").strip_prefix("secret:") {
            secrets.push(secret.trim().trim_matches('"').to_string());
        }
    }
    assert!(secrets.len() >= 4, "{} secrets read", secrets.len());
    for secret in &secrets {
        assert!(
            !all.contains(secret.as_str()),
            "a secret of the cluster is in the dump: {secret}"
        );
    }
    assert!(
        !all.contains("PRIVATE KEY-----\n"),
        "a PEM private key is in the dump"
    );
    println!(
        "dump: {} bytes in {} files; {} secret values checked",
        all.len(),
        files.len(),
        secrets.len()
    );

    // AWS unreachable (EC2, Auto Scaling and ELB at a port nothing listens on; the state store still answers):
    // the dump is partial, says what is missing and why, writes the rest, and exits 7.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        format!("http://{}", listener.local_addr().expect("its address"))
    };
    let partial_dir = cloud.dir().join("dump-partial");
    let output = cloud
        .ballast_command(&state)
        .args(["toolbox", "dump", CLUSTER, "-o", "json", "--out"])
        .arg(&partial_dir)
        .env("AWS_ENDPOINT_URL_EC2", &dead)
        .env("AWS_ENDPOINT_URL_AUTO_SCALING", &dead)
        .env("AWS_ENDPOINT_URL_ELASTIC_LOAD_BALANCING_V2", &dead)
        .output()
        .expect("running ballast toolbox dump without AWS");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(7), "a partial dump: {stderr}");
    assert!(stderr.contains("the dump is partial"), "{stderr}");
    let read_partial = |f: &str| std::fs::read_to_string(partial_dir.join(f)).expect(f);
    let index: serde_json::Value =
        serde_json::from_str(&read_partial("index.json")).expect("the index");
    assert_eq!(index["partial"], true, "{index}");
    let missing: Vec<&str> = index["missing"]
        .as_array()
        .expect("missing")
        .iter()
        .filter_map(|m| m["what"].as_str())
        .collect();
    for part in [
        "cloud: instances",
        "cloud: groups",
        "cloud: volumes",
        "cloud: security groups",
    ] {
        assert!(missing.contains(&part), "{part} not among {missing:?}");
    }
    // The rest is there: the failed node's report and tail, read from the state store.
    assert!(read_partial("reports.json").contains(broken.as_str()));
    assert!(read_partial("logs.json").contains("refusing the node spec"));

    // The configured worker's own credentials: its tail it may write, another's not, and none may it read.
    let record = cloud.instance(&worker);
    let imds = aws_config::imds::Client::builder()
        .endpoint(&record.imds_endpoint)
        .expect("an IMDS endpoint")
        .build();
    let creds = aws_config::imds::credentials::ImdsCredentialsProvider::builder()
        .imds_client(imds)
        .build()
        .provide_credentials()
        .await
        .expect("the worker's role credentials from its IMDS");
    // Its `aws:userid` (`<role-id>:<instance-id>`, what STS answers for the instance role's session).
    let role = cloud
        .iam()
        .get_role()
        .role_name(format!("nodes.{CLUSTER}"))
        .send()
        .await
        .expect("GetRole of the workers' role");
    let user_id = format!("{}:{worker}", role.role().expect("the role").role_id());
    assert!(user_id.ends_with(&format!(":{worker}")), "{user_id}");
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&cloud.sdk_config())
            .credentials_provider(creds)
            .force_path_style(true)
            .build(),
    );
    let paths = ClusterPaths::new(CLUSTER);
    let put = |key: String| {
        let s3 = s3.clone();
        async move {
            s3.put_object()
                .bucket(BUCKET)
                .key(key)
                .body(aws_sdk_s3::primitives::ByteStream::from_static(b"{}"))
                .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
                .send()
                .await
        }
    };
    put(format!("clusters/{}", paths.log_tail(&user_id)))
        .await
        .expect("the worker writes its own log tail");
    let cp_key = tail_keys(&cloud)
        .await
        .into_iter()
        .find(|k| k.ends_with(&format!(":{control_plane}.json")))
        .expect("the control plane's tail key");
    let role_id = user_id.split(':').next().expect("a role id");
    for other in [
        cp_key.clone(),
        format!(
            "clusters/{}",
            paths.log_tail(&format!("{role_id}:{broken}"))
        ),
        format!("clusters/{}", paths.log_tail(&worker)),
    ] {
        let denied = put(other.clone()).await.expect_err(&other);
        assert_eq!(
            denied
                .as_service_error()
                .and_then(aws_sdk_s3::error::ProvideErrorMetadata::code),
            Some("AccessDenied"),
            "the worker writes {other}: {}",
            aws_sdk_s3::error::DisplayErrorContext(&denied)
        );
    }
    for key in [cp_key, format!("clusters/{}", paths.log_tail(&user_id))] {
        ballast_e2e::localcloud::assert_s3_read_denied(&s3, BUCKET, &key, "the worker").await;
    }
}
