//! What a control-plane node may write of the audit trail, on the local cloud with IAM enforced (issue 44, item
//! 8; docs/audit.md, "IAM"). One cluster (a control-plane node and a worker); audit events are written to the
//! control-plane node's log as the API server writes them, and its nodeup ships them under the key its instance
//! role session's `aws:userid` names (`audit/<role-id>:<instance-id>/`). Then, with that node's own role
//! credentials (from its IMDS): another instance's chunk key, or the plain instance-id prefix, is refused
//! (AccessDenied); its own chunk, put again write-once (`If-None-Match: *`), is refused (412) and stays as it
//! was; and it cannot read a chunk back. Needs the emulator's venv; fails (never skips) without it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use aws_credential_types::provider::ProvideCredentials;
use aws_sdk_s3::error::ProvideErrorMetadata;
use ballast_e2e::localcloud::LocalCloud;
use ballast_e2e::wait::wait_until;
use ballast_state::layout::ClusterPaths;
use ballast_state::report::Phase;

const CLUSTER: &str = "audit-iam.example.com";
const BUCKET: &str = "ballast-audit-iam-e2e";

/// The control-plane instance, once its nodeup reports it configured.
async fn configured_control_plane(cloud: &LocalCloud) -> String {
    wait_until(
        Duration::from_secs(240),
        "the control-plane node configured",
        || async {
            let answer = cloud
                .ec2()
                .describe_instances()
                .send()
                .await
                .expect("DescribeInstances");
            let id = answer
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .filter(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) == Some("running"))
                .find(|i| {
                    i.tags().iter().any(|t| {
                        t.key() == Some("ballast.dev/role") && t.value() == Some("control-plane")
                    })
                })?
                .instance_id()?
                .to_string();
            let stored = cloud
                .stored_report(BUCKET, "clusters/", CLUSTER, &id)
                .await?;
            match stored.report.phase {
                Phase::Configured => Some(id),
                Phase::Failed => panic!("{id} failed to boot: {:?}", stored.report.errors),
            }
        },
    )
    .await
}

/// Keys under `prefix`, sorted.
async fn keys(cloud: &LocalCloud, prefix: &str) -> Vec<String> {
    let listed = cloud
        .s3()
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix(prefix)
        .send()
        .await
        .expect("ListObjectsV2");
    let mut keys: Vec<String> = listed
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_string))
        .collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_node_writes_only_its_own_audit_chunks_and_each_once() {
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
    let control_plane = configured_control_plane(&cloud).await;
    let record = cloud.instance(&control_plane);

    // Its aws:userid: `<role-id>:<instance-id>`.
    let role = cloud
        .iam()
        .get_role()
        .role_name(format!("control-plane.{CLUSTER}"))
        .send()
        .await
        .expect("GetRole of the control-plane role");
    let role_id = role.role().expect("the role").role_id().to_string();
    let writer = format!("{role_id}:{control_plane}");
    let paths = ClusterPaths::new(CLUSTER);

    // The API server's audit log, as it writes it (no kube-apiserver runs here): root's file, 0600.
    let dir = record.root.join("var/log/kubernetes");
    std::fs::create_dir_all(&dir).expect("the audit log's directory");
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(dir.join("audit.log"))
        .expect("the audit log");
    let mut written = Vec::new();
    for i in 0..5 {
        let line = format!(
            "{{\"kind\":\"Event\",\"apiVersion\":\"audit.k8s.io/v1\",\"level\":\"Metadata\",\
             \"auditID\":\"{control_plane}-{i:04}\",\"stage\":\"ResponseComplete\",\"verb\":\"get\"}}\n"
        );
        log.write_all(line.as_bytes()).expect("an audit event");
        written.extend_from_slice(line.as_bytes());
    }
    log.sync_all().expect("fsync the audit log");

    // Shipped by its nodeup under its writer's prefix (within the default 30 s chunk interval).
    let own_prefix = format!("clusters/{}", paths.audit_instance_prefix(&writer));
    let chunks = wait_until(
        Duration::from_secs(120),
        "the audit events shipped under the node's aws:userid",
        || async {
            let chunks = keys(&cloud, &own_prefix).await;
            let mut shipped = Vec::new();
            for key in &chunks {
                shipped.extend(cloud.s3_object(BUCKET, key).await?);
            }
            (shipped == written).then_some(chunks)
        },
    )
    .await;
    let all = keys(&cloud, &format!("clusters/{}", paths.audit_prefix())).await;
    assert!(
        all.iter().all(|k| k.starts_with(&own_prefix)),
        "chunks outside the writer's prefix: {all:?}"
    );
    let first = chunks[0].clone();
    let first_bytes = cloud.s3_object(BUCKET, &first).await.expect("the chunk");

    // The control-plane node's own role credentials.
    let imds = aws_config::imds::Client::builder()
        .endpoint(&record.imds_endpoint)
        .expect("an IMDS endpoint")
        .build();
    let creds = aws_config::imds::credentials::ImdsCredentialsProvider::builder()
        .imds_client(imds)
        .build()
        .provide_credentials()
        .await
        .expect("the control plane's role credentials from its IMDS");
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&cloud.sdk_config())
            .credentials_provider(creds)
            .force_path_style(true)
            .build(),
    );
    let put = |key: String| {
        let s3 = s3.clone();
        async move {
            s3.put_object()
                .bucket(BUCKET)
                .key(key)
                .if_none_match("*")
                .body(aws_sdk_s3::primitives::ByteStream::from_static(
                    b"{\"forged\":true}\n",
                ))
                .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
                .send()
                .await
        }
    };
    let code = |e: &aws_sdk_s3::error::SdkError<_, _>| -> Option<String> {
        match e {
            aws_sdk_s3::error::SdkError::ServiceError(s) => {
                let err: &aws_sdk_s3::operation::put_object::PutObjectError = s.err();
                err.code().map(str::to_string)
            }
            _ => None,
        }
    };

    // Another instance's trail, and the unbound instance-id prefix: refused.
    for other in [
        format!(
            "clusters/{}",
            paths.audit_chunk(&format!("{role_id}:i-0fedcba9876543210"), 0)
        ),
        format!("clusters/{}", paths.audit_chunk(&control_plane, 0)),
    ] {
        let denied = put(other.clone()).await.expect_err(&other);
        assert_eq!(
            code(&denied).as_deref(),
            Some("AccessDenied"),
            "the control plane writes {other}: {}",
            aws_sdk_s3::error::DisplayErrorContext(&denied)
        );
    }
    // Its own chunk, once written, is not written again, and stays as it was.
    let refused = put(first.clone()).await.expect_err(&first);
    assert_eq!(
        code(&refused).as_deref(),
        Some("PreconditionFailed"),
        "the control plane overwrites its own chunk {first}: {}",
        aws_sdk_s3::error::DisplayErrorContext(&refused)
    );
    assert_eq!(
        cloud.s3_object(BUCKET, &first).await.as_deref(),
        Some(first_bytes.as_slice())
    );
    // A new key of its own it may write; no chunk may it read back.
    let next = format!("clusters/{}", paths.audit_chunk(&writer, 1_000_000));
    put(next.clone())
        .await
        .unwrap_or_else(|e| panic!("{next}: {}", aws_sdk_s3::error::DisplayErrorContext(&e)));
    ballast_e2e::localcloud::assert_s3_read_denied(&s3, BUCKET, &first, "the control plane").await;
}
