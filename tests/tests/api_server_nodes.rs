//! An API-server node on the local cloud (IAM enforced): a cluster with one control-plane group, a group of
//! `role: ApiServer` and workers, made by `ballast create -f` and `update cluster --yes`. `update cluster` issues the
//! etcd client pair for API servers into the store; the API-server instance's nodeup, with its own role's
//! credentials, reads what its API server needs (never the etcd CA's key), renders kube-apiserver alone dialing
//! etcd by the member's name, writes that name into its hosts block from EC2 (the control-plane instance holding
//! the member's volume), and reports Configured. No kube-apiserver runs here (none can be installed): the static
//! pod is written, not run. Needs the emulator's venv; fails (never skips) without it.

use std::time::Duration;

use ballast_e2e::localcloud::LocalCloud;
use ballast_state::report::{NodeReport, Phase};
use ballast_state::spec::Role;

const NAME: &str = "apiservers.example.com";

/// The cluster, in `network` (the cloud's own CIDR inside 127.0.0.0/8, so instances can bind their private IPs).
fn spec(network: &str) -> String {
    format!(
        "apiVersion: ballast.dev/v1alpha1
kind: Cluster
metadata: {{name: {NAME}}}
spec:
  kubernetesVersion: 1.36.4
  networkCIDR: {network}
  subnets:
  - {{name: us-west-2a, zone: us-west-2a}}
---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {{name: control-plane}}
spec: {{role: ControlPlane, subnets: [us-west-2a]}}
---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {{name: apiserver}}
spec: {{role: ApiServer, subnets: [us-west-2a], minSize: 1, maxSize: 1}}
---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {{name: nodes}}
spec: {{role: Node, subnets: [us-west-2a], minSize: 1, maxSize: 1}}
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_node_configures_kube_apiserver_against_the_control_planes_etcd() {
    let cloud = LocalCloud::start();
    let bucket = "ballast-apiserver-e2e";
    cloud.prepare_for_ballast(bucket).await;
    let state = format!("s3://{bucket}/clusters");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, spec(&cloud.record.network_cidr)).expect("spec file");
    let path = file.display().to_string();
    let (ok, out) = cloud.ballast(&state, &["create", "-f", &path]);
    assert!(ok, "ballast create -f failed:\n{out}");
    let (ok, out) = cloud.ballast(&state, &["update", "cluster", NAME, "--yes"]);
    assert!(ok, "ballast update cluster --yes failed:\n{out}");
    assert!(
        out.contains("pki/etcd-client-api-server"),
        "the plan issues the API servers' etcd client pair:\n{out}"
    );
    // A second plan issues nothing again: the pair fits.
    let (ok, out) = cloud.ballast(&state, &["update", "cluster", NAME]);
    assert!(ok, "ballast update cluster failed:\n{out}");
    assert!(!out.contains("pki/etcd-client-api-server"), "{out}");
    let client = cloud
        .s3_object(
            bucket,
            &format!("clusters/{NAME}/pki/etcd-client-api-server/cert.pem"),
        )
        .await
        .expect("the etcd client pair is in the store");
    let etcd_ca = cloud
        .s3_object(bucket, &format!("clusters/{NAME}/pki/etcd-ca/cert.pem"))
        .await
        .expect("the etcd CA");
    let client_key = cloud
        .s3_object(
            bucket,
            &format!("clusters/{NAME}/pki/etcd-client-api-server/key.pem"),
        )
        .await
        .expect("its key");
    assert!(ballast::cloud::api_servers::etcd_client_pair_fits(
        &client,
        &client_key,
        &etcd_ca,
        time::OffsetDateTime::now_utc()
    ));

    // Every running instance's report, by role.
    let instances: Vec<String> = cloud
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
        .expect("DescribeInstances")
        .reservations()
        .iter()
        .flat_map(|r| r.instances().iter().filter_map(|i| i.instance_id()))
        .map(str::to_owned)
        .collect();
    assert_eq!(instances.len(), 3, "{instances:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let mut reports: Vec<NodeReport> = Vec::new();
    for id in &instances {
        let report = loop {
            if let Some(r) = cloud.stored_report(bucket, "clusters/", NAME, id).await {
                break r.report;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no boot report for {id}; instance log:\n{}",
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
            "{id} ({:?}) did not configure: {:?}\n{}",
            report.role,
            report.errors,
            report.log_tail.join("\n")
        );
        reports.push(report);
    }
    let of = |role: Role| {
        reports
            .iter()
            .find(|r| r.role == Some(role))
            .unwrap_or_else(|| panic!("no {role:?} instance reported"))
    };
    let control_plane = cloud.instance(&of(Role::ControlPlane).instance_id);
    let api = of(Role::ApiServer);
    let record = cloud.instance(&api.instance_id);
    let root = &record.root;
    let manifests: Vec<String> = std::fs::read_dir(root.join("etc/kubernetes/manifests"))
        .expect("manifests")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(manifests, ["kube-apiserver.yaml"]);
    let pod = std::fs::read_to_string(root.join("etc/kubernetes/manifests/kube-apiserver.yaml"))
        .expect("the pod");
    // The one member, by its stable name (`etcd-<member>.internal.<cluster>`).
    let servers = pod
        .lines()
        .find_map(|l| l.trim().strip_prefix("- --etcd-servers="))
        .unwrap_or_else(|| panic!("no --etcd-servers: {pod}"));
    let member_name = servers
        .strip_prefix("https://")
        .and_then(|s| s.strip_suffix(":2379"))
        .unwrap_or_else(|| panic!("one member by name: {servers}"));
    assert!(
        member_name.starts_with("etcd-") && member_name.ends_with(&format!(".internal.{NAME}")),
        "{member_name}"
    );
    // The name resolves, through the node's hosts block, to the control-plane instance holding the member's
    // volume.
    let hosts = std::fs::read_to_string(root.join("etc/hosts")).expect("hosts");
    assert!(
        hosts.contains(&format!("{}\t{member_name}", control_plane.private_ip)),
        "{hosts}"
    );
    // The pair from the store, where the API server reads it; no CA key anywhere on the node.
    assert_eq!(
        std::fs::read(root.join("etc/kubernetes/pki/apiserver-etcd-client.crt")).expect("pair"),
        client
    );
    assert!(root.join("etc/kubernetes/pki/apiserver.crt").is_file());
    assert!(!root.join("etc/kubernetes/pki/ca.key").exists());
    assert!(!root.join("etc/kubernetes/pki/etcd/ca.key").exists());
    assert!(!root.join("var/lib/etcd").join("member").exists());
    // Its API server's serving certificate: the `kubernetes` service's names and the node's own IP, as a
    // control-plane node's.
    let serving = nodeup::certs::cert_facts(
        &std::fs::read(root.join("etc/kubernetes/pki/apiserver.crt")).expect("serving cert"),
    )
    .expect("parses");
    assert!(
        serving
            .dns_names
            .iter()
            .any(|d| d == "kubernetes.default.svc.cluster.local"),
        "{serving:?}"
    );
    let ip: std::net::IpAddr = record.private_ip.parse().expect("an IP");
    assert!(serving.ips.contains(&ip), "{serving:?}");
    eprintln!(
        "API-server node {} configured in {} ms",
        api.instance_id, api.total_millis
    );
}
