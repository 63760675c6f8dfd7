//! `ballast update cluster` end to end: the real binary against the AWS emulator (moto through the project's
//! launcher) over HTTP, with an S3 state store on it. Each test uses its own bucket and cluster name.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use assert_cmd::Command;
use ballast_e2e::aws;
use ballast_e2e::lifecycle::{FROM_VERSION, TO_VERSION};
use ballast_e2e::wait::wait_until;
use predicates::prelude::*;

const ZONES: &str = "us-west-2a,us-west-2b,us-west-2c";

struct Cluster {
    name: String,
    state: String,
}

impl Cluster {
    async fn new(hint: &str) -> Self {
        let bucket = aws::new_bucket(hint).await;
        ensure_default_image().await;
        Cluster {
            name: format!("{hint}.example.com"),
            state: format!("s3://{bucket}/clusters"),
        }
    }

    fn ballast(&self) -> Command {
        aws::ballast_cli(&self.state, &self.name)
    }

    fn create(&self, extra: &[&str]) {
        self.ballast()
            .args(["create", "cluster", "--zones", ZONES, "--yes"])
            .args(extra)
            .assert()
            .success();
    }

    fn plan(&self) -> String {
        let out = self
            .ballast()
            .args(["update", "cluster", "--stats"])
            .assert()
            .success();
        String::from_utf8(out.get_output().stdout.clone()).expect("utf8")
    }

    fn replace(&self, dir: &tempfile::TempDir, yaml: &str) {
        let path = dir.path().join("object.yaml");
        std::fs::write(&path, yaml).expect("write");
        self.ballast()
            .args(["replace", "-f"])
            .arg(&path)
            .assert()
            .success();
    }
}

/// The AMIs the default spec names for the default release and the one the upgrade moves to: registered once
/// per emulator, as `packer build` would.
async fn ensure_default_image() {
    for version in [FROM_VERSION, TO_VERSION] {
        aws::ensure_image(&ballast_state::defaults::default_image(version)).await;
    }
}

fn tags_of(tags: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
        .collect()
}

async fn running_instances(cluster: &str) -> Vec<aws_sdk_ec2::types::Instance> {
    let ec2 = aws_sdk_ec2::Client::new(&aws::sdk_config().await);
    let out = ec2
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:ballast.dev/cluster")
                .values(cluster)
                .build(),
        )
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("instance-state-name")
                .values("running")
                .build(),
        )
        .send()
        .await
        .expect("describe instances");
    out.reservations()
        .iter()
        .flat_map(|r| r.instances().to_vec())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn create_with_yes_builds_everything_and_the_next_update_changes_nothing() {
    let cluster = Cluster::new("build").await;
    cluster.create(&[]);

    // Every instance: in its group's zones, tagged, with its role's profile and IMDSv2 required.
    let instances = running_instances(&cluster.name).await;
    assert_eq!(instances.len(), 6, "3 control-plane instances and 3 nodes");
    let mut zones = BTreeSet::new();
    for instance in &instances {
        let tags = tags_of(instance.tags());
        assert_eq!(
            tags.get(&format!("kubernetes.io/cluster/{}", cluster.name))
                .map(String::as_str),
            Some("owned")
        );
        let group = tags.get("ballast.dev/instance-group").expect("group tag");
        let role = tags.get("ballast.dev/role").expect("role tag");
        assert_eq!(
            role == "control-plane",
            group.starts_with("control-plane-"),
            "{group} {role}"
        );
        assert_eq!(
            tags.get("ballast.dev/node-spec-hash").map(String::len),
            Some(64)
        );
        let profile = instance
            .iam_instance_profile()
            .and_then(|p| p.arn())
            .expect("profile");
        let expected = if role == "control-plane" {
            "control-plane."
        } else {
            "nodes."
        };
        assert!(
            profile.contains(&format!("instance-profile/{expected}{}", cluster.name)),
            "{profile}"
        );
        let metadata = instance.metadata_options().expect("metadata options");
        assert_eq!(metadata.http_tokens().map(|t| t.as_str()), Some("required"));
        assert_eq!(metadata.http_put_response_hop_limit(), Some(1));
        if role == "control-plane" {
            zones.insert(
                instance
                    .placement()
                    .and_then(|p| p.availability_zone())
                    .unwrap_or("")
                    .to_string(),
            );
        }
    }
    assert_eq!(
        zones.len(),
        3,
        "one control-plane instance per zone: {zones:?}"
    );

    // The node spec each group's user-data names is in the store, with that hash.
    let s3 = aws::s3_client().await;
    let (bucket, prefix) = cluster
        .state
        .trim_start_matches("s3://")
        .split_once('/')
        .expect("prefix");
    let key = format!("{prefix}/{}/nodes/nodes/spec.yaml", cluster.name);
    let object = s3
        .get_object()
        .bucket(bucket)
        .key(&key)
        .send()
        .await
        .expect("node spec stored");
    let body = object.body.collect().await.expect("body").into_bytes();
    let hash = ballast_state::digest::sha256_hex(&body);
    let node = instances
        .iter()
        .find(|i| {
            tags_of(i.tags())
                .get("ballast.dev/instance-group")
                .map(String::as_str)
                == Some("nodes")
        })
        .expect("a node");
    assert_eq!(
        tags_of(node.tags()).get("ballast.dev/node-spec-hash"),
        Some(&hash)
    );
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains("apiServerEndpoint: api-build-example-com"),
        "{text}"
    );
    assert!(
        !text.contains("key.pem"),
        "a worker's spec names no private key: {text}"
    );

    // The API load balancer forwards to the control plane.
    let elb = aws_sdk_elasticloadbalancingv2::Client::new(&aws::sdk_config().await);
    let lbs = elb
        .describe_load_balancers()
        .names(ballast::cloud::model::elb_name("api", &cluster.name))
        .send()
        .await
        .expect("lb");
    assert_eq!(lbs.load_balancers().len(), 1);

    // Apply, then plan again: nothing to do, and not one mutating call.
    let out = cluster
        .ballast()
        .args(["update", "cluster", "--stats"])
        .assert()
        .success();
    let output = out.get_output();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "No changes: the cluster's resources match its spec.\n"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("(0 mutating)"), "{stderr}");
    // Applying a no-op changes nothing either.
    cluster
        .ballast()
        .args(["update", "cluster", "--yes", "--stats"])
        .assert()
        .success()
        .stderr(predicate::str::contains("(0 mutating)"));
    let counts = aws::owned_counts(&cluster.name).await;
    assert_eq!(
        counts,
        BTreeMap::from([
            ("asg", 4),
            ("igw", 1),
            ("launch-template", 4),
            ("route-table", 1),
            ("security-group", 2),
            ("subnet", 3),
            ("vpc", 1),
        ])
    );

    let stored_before = stored_keys(&cluster).await;
    export_kubeconfig_is_read_by_kubectl(&cluster);
    assert_eq!(
        stored_keys(&cluster).await,
        stored_before,
        "export writes nothing to the state store (the admin key above all)"
    );
}

async fn stored_keys(cluster: &Cluster) -> BTreeSet<String> {
    let (bucket, prefix) = cluster
        .state
        .trim_start_matches("s3://")
        .split_once('/')
        .expect("s3://bucket/prefix");
    let s3 = aws::s3_client().await;
    let listed = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(prefix)
        .send()
        .await
        .expect("list the state store");
    listed
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_string))
        .collect()
}

/// `export kubeconfig --admin` on the cluster the test above built: kubectl (Debian's kubernetes-client, or any
/// on PATH) reads the merged file; the other user's entries survive; the admin certificate is the CA's, short
/// lived and `system:masters`; the file is 0600.
fn export_kubeconfig_is_read_by_kubectl(cluster: &Cluster) {
    use std::os::unix::fs::PermissionsExt;
    ballast_e2e::image::require_tool("kubectl", "kubernetes-client");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("config");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster: {server: 'https://other:6443'}\n\
         users:\n- name: other\n  user: {token: keep-me}\ncontexts:\n- name: other\n  context: {cluster: other, \
         user: other}\ncurrent-context: other\n",
    )
    .expect("write the existing kubeconfig");
    // Neither --admin nor --user: refused before anything is written.
    cluster
        .ballast()
        .args(["export", "kubeconfig", "--kubeconfig"])
        .arg(&file)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--admin"));
    cluster
        .ballast()
        .args(["export", "kubeconfig", "--admin=31d", "--kubeconfig"])
        .arg(&file)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot be revoked"));
    // Bad input changes nothing: a negative duration, an unknown cluster, a kubeconfig that cannot be written.
    let before = std::fs::read(&file).expect("read the kubeconfig");
    cluster
        .ballast()
        .args(["export", "kubeconfig", "--admin=-5m", "--kubeconfig"])
        .arg(&file)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--admin"));
    cluster
        .ballast()
        .env_remove("BALLAST_CLUSTER_NAME")
        .args([
            "export",
            "kubeconfig",
            "nope.example.com",
            "--admin",
            "--kubeconfig",
        ])
        .arg(&file)
        .assert()
        .code(5)
        .stderr(predicate::str::contains("nope.example.com"));
    // Its parent is a regular file: no one, root included, can create it.
    let unwritable = file.join("config");
    cluster
        .ballast()
        .args(["export", "kubeconfig", "--admin", "--kubeconfig"])
        .arg(&unwritable)
        .assert()
        .failure()
        .stderr(predicate::str::contains(unwritable.display().to_string()));
    assert_eq!(
        std::fs::read(&file).expect("read the kubeconfig"),
        before,
        "a refused export leaves the existing kubeconfig untouched"
    );
    cluster
        .ballast()
        .args(["export", "kubeconfig", "--admin=2h", "--kubeconfig"])
        .arg(&file)
        .assert()
        .success()
        .stderr(predicate::str::contains("system:masters"));
    let mode = std::fs::metadata(&file).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the kubeconfig holds a private key");

    let kubectl = |args: &[&str]| {
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&file)
            .args(args)
            .output()
            .expect("run kubectl");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf8")
    };
    assert_eq!(kubectl(&["config", "current-context"]).trim(), cluster.name);
    let contexts = kubectl(&["config", "get-contexts", "-o", "name"]);
    let contexts: BTreeSet<&str> = contexts.lines().collect();
    assert_eq!(contexts, BTreeSet::from(["other", cluster.name.as_str()]));
    let view: serde_json::Value = serde_json::from_str(&kubectl(&[
        "config", "view", "--raw", "--minify", "-o", "json",
    ]))
    .expect("kubectl prints JSON");
    let server = view["clusters"][0]["cluster"]["server"]
        .as_str()
        .expect("server");
    assert!(
        server.starts_with("https://api-build-example-com") && server.ends_with(":443"),
        "the load balancer's DNS name: {server}"
    );
    let decode = |field: &str| {
        use base64::Engine;
        let data = view["users"][0]["user"][field].as_str().expect(field);
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .expect("base64"),
        )
        .expect("PEM")
    };
    assert!(decode("client-key-data").contains("PRIVATE KEY"));
    let cert_pem = decode("client-certificate-data");
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).expect("pem");
    let cert = pem.parse_x509().expect("x509");
    assert!(cert.subject().to_string().contains("O=system:masters"));
    // The signature verifies against the cluster CA (as the API server will check it).
    let ca_pem = {
        use base64::Engine;
        let data = view["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .expect("the cluster's CA");
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("base64")
    };
    std::fs::write(dir.path().join("ca.pem"), &ca_pem).expect("write the CA");
    std::fs::write(dir.path().join("admin.pem"), &cert_pem).expect("write the certificate");
    let verified = std::process::Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(dir.path().join("ca.pem"))
        .arg(dir.path().join("admin.pem"))
        .output()
        .expect("run openssl");
    assert!(
        verified.status.success(),
        "openssl verify: {}{}",
        String::from_utf8_lossy(&verified.stdout),
        String::from_utf8_lossy(&verified.stderr)
    );
    assert!(
        cert.issuer().to_string().contains("kubernetes-ca"),
        "{}",
        cert.issuer()
    );
    let lifetime = cert.validity().not_after.timestamp() - time_now();
    assert!(
        (7_000..=7_200).contains(&lifetime),
        "--admin=2h: valid about two hours from now, not {lifetime} s"
    );
    let all = kubectl(&["config", "view", "--raw", "-o", "json"]);
    assert!(
        all.contains("keep-me"),
        "the other user's token survives: {all}"
    );
}

fn time_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_group_plans_only_its_own_launch_template() {
    let cluster = Cluster::new("change").await;
    // The default release, so that an upgrade to the next minor can follow.
    cluster.create(&["--kubernetes-version", FROM_VERSION]);
    let dir = tempfile::tempdir().expect("tempdir");
    cluster.replace(
        &dir,
        "apiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {name: nodes}\n\
         spec: {role: Node, machineType: m6i.large, minSize: 3, maxSize: 3}\n",
    );
    let plan = cluster.plan();
    assert_eq!(
        plan,
        format!(
            "  ~ LaunchTemplate nodes.{0}\n        instanceType: t3.medium -> m6i.large\n\n\
             Plan: 0 to create, 1 to update, 0 to replace, 0 shared to tag, 0 to delete.\n",
            cluster.name
        ),
        "a plan changes nothing: running it twice gives the same plan"
    );
    assert_eq!(cluster.plan(), plan);
    cluster
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
    cluster
        .ballast()
        .args(["get", "instances"])
        .assert()
        .success()
        .stdout(predicate::str::contains("NODE SPEC"))
        .stdout(predicate::str::contains("outdated").not());
    let after = cluster.plan();
    assert!(after.starts_with("No changes"), "{after}");

    // IOPS and throughput take effect: the nodes' root volume in a new launch template version (read back from
    // EC2: the next plan is empty), etcd's volumes changed in place by ModifyVolume (the same volumes).
    let ec2 = aws_sdk_ec2::Client::new(&aws::sdk_config().await);
    let etcd_volumes = || async {
        let found = ec2
            .describe_volumes()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name(format!("tag:kubernetes.io/cluster/{}", cluster.name))
                    .values("owned")
                    .build(),
            )
            .send()
            .await
            .expect("DescribeVolumes");
        let mut volumes: Vec<(String, Option<i32>, Option<i32>)> = found
            .volumes()
            .iter()
            .map(|v| {
                (
                    v.volume_id().unwrap_or_default().to_string(),
                    v.iops(),
                    v.throughput(),
                )
            })
            .collect();
        volumes.sort();
        volumes
    };
    let before = etcd_volumes().await;
    assert_eq!(before.len(), 3, "{before:?}");
    let stored = cluster
        .ballast()
        .args(["get", "clusters", "-o", "yaml"])
        .assert()
        .success();
    let yaml = String::from_utf8_lossy(&stored.get_output().stdout).to_string();
    let cluster_doc = yaml.as_str();
    let cluster_doc = if cluster_doc.contains("\n  etcd:\n") {
        cluster_doc.replacen(
            "\n  etcd:\n",
            "\n  etcd:\n    volumeIops: 4000\n    volumeThroughput: 250\n",
            1,
        )
    } else {
        cluster_doc.replacen(
            "\nspec:\n",
            "\nspec:\n  etcd:\n    volumeIops: 4000\n    volumeThroughput: 250\n",
            1,
        )
    };
    assert!(cluster_doc.contains("volumeIops: 4000"), "{yaml}");
    cluster.replace(&dir, &cluster_doc);
    cluster.replace(
        &dir,
        "apiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {name: nodes}\n\
         spec: {role: Node, machineType: m6i.large, minSize: 3, maxSize: 3, \
         rootVolume: {iops: 4000, throughput: 250}}\n",
    );
    let plan = cluster.plan();
    assert!(
        plan.contains(&format!(
            "  ~ LaunchTemplate nodes.{0}\n        rootVolume: 128 GiB gp3 encrypted on /dev/xvda -> 128 GiB gp3 \
             4000 IOPS 250 MiB/s encrypted on /dev/xvda\n",
            cluster.name
        )),
        "{plan}"
    );
    assert!(plan.contains("iops: 3000 -> 4000"), "{plan}");
    assert!(
        plan.contains("throughput: 125 MiB/s -> 250 MiB/s"),
        "{plan}"
    );
    assert!(
        !plan.contains("  + EtcdVolume"),
        "no new etcd volume: {plan}"
    );
    cluster
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
    let after = etcd_volumes().await;
    let ids = |v: &[(String, Option<i32>, Option<i32>)]| -> Vec<String> {
        v.iter().map(|(id, _, _)| id.clone()).collect()
    };
    assert_eq!(
        ids(&after),
        ids(&before),
        "the same volumes, changed in place"
    );
    assert!(
        after
            .iter()
            .all(|(_, iops, throughput)| (*iops, *throughput) == (Some(4000), Some(250))),
        "{after:?}"
    );
    let after = cluster.plan();
    assert!(after.starts_with("No changes"), "{after}");

    // A new Kubernetes version changes every group's node spec and launch template, and the running instances
    // are reported out of date.
    let stored = cluster
        .ballast()
        .args(["get", "clusters", "-o", "yaml"])
        .assert()
        .success();
    let yaml = String::from_utf8_lossy(&stored.get_output().stdout).replace(
        &format!("kubernetesVersion: {FROM_VERSION}"),
        &format!("kubernetesVersion: {TO_VERSION}"),
    );
    cluster.replace(&dir, &yaml);
    let plan = cluster.plan();
    for group in [
        "control-plane-us-west-2a",
        "control-plane-us-west-2b",
        "control-plane-us-west-2c",
        "nodes",
    ] {
        assert!(plan.contains(&format!("  ~ NodeSpec {group}\n")), "{plan}");
        assert!(
            plan.contains(&format!("  ~ LaunchTemplate {group}.{}\n", cluster.name)),
            "{plan}"
        );
    }
    assert!(plan.contains("Plan: 0 to create, 8 to update"), "{plan}");
    let applied = cluster
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&applied.get_output().stdout).to_string();
    assert!(
        stdout.contains("Out of date: 3 instance(s) of nodes"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Out of date: 1 instance(s) of control-plane-us-west-2a"),
        "{stdout}"
    );
    let listed = cluster
        .ballast()
        .args(["get", "instances", "-o", "json"])
        .assert()
        .success();
    let views: serde_json::Value =
        serde_json::from_slice(&listed.get_output().stdout).expect("json");
    let states: Vec<&str> = views
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v["nodeSpec"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, vec!["outdated"; 6], "{views}");
}

#[tokio::test(flavor = "multi_thread")]
async fn prune_removes_a_deleted_group() {
    let cluster = Cluster::new("prune").await;
    cluster.create(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    cluster
        .ballast()
        .args(["create", "-f"])
        .arg({
            let path = dir.path().join("gpu.yaml");
            std::fs::write(
                &path,
                "apiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {name: gpu}\nspec: {role: Node, minSize: 1}\n",
            )
            .expect("write");
            path
        })
        .assert()
        .success();
    let plan = cluster.plan();
    assert!(
        plan.contains(&format!("  + AutoScalingGroup gpu.{}\n", cluster.name)),
        "{plan}"
    );
    cluster
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
    assert_eq!(aws::owned_counts(&cluster.name).await["asg"], 5);

    cluster
        .ballast()
        .args(["delete", "ig", "gpu", "--yes"])
        .assert()
        .success();
    let plan = cluster.plan();
    assert!(
        plan.contains(&format!(
            "  - AutoScalingGroup gpu.{}   (only with --prune)",
            cluster.name
        )),
        "{plan}"
    );
    assert!(
        plan.contains(&format!("  - LaunchTemplate gpu.{}", cluster.name)),
        "{plan}"
    );
    cluster
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .success()
        .stderr(predicate::str::contains("add --prune"));
    assert_eq!(
        aws::owned_counts(&cluster.name).await["asg"],
        5,
        "kept without --prune"
    );
    cluster
        .ballast()
        .args(["update", "cluster", "--yes", "--prune"])
        .assert()
        .success();
    let counts = aws::owned_counts(&cluster.name).await;
    assert_eq!((counts["asg"], counts["launch-template"]), (4, 4));
    assert!(cluster.plan().starts_with("No changes"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_apply_converges_without_duplicates() {
    let cluster = Cluster::new("interrupt").await;
    cluster
        .ballast()
        .args(["create", "cluster", "--zones", ZONES])
        .assert()
        .success();
    // Kill `update --yes` at several points of its run; every re-run adopts what the killed one made.
    for delay_ms in [150u64, 400, 800] {
        let mut child = std::process::Command::new(&ballast_e2e::localcloud::binaries().ballast)
            .args(["update", "cluster", "--yes"])
            .env("BALLAST_STATE", &cluster.state)
            .env("BALLAST_CLUSTER_NAME", &cluster.name)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        let _ = child.kill();
        let _ = child.wait();
    }
    cluster
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
    assert!(cluster.plan().starts_with("No changes"));
    let counts = aws::owned_counts(&cluster.name).await;
    assert_eq!(
        counts,
        BTreeMap::from([
            ("asg", 4),
            ("igw", 1),
            ("launch-template", 4),
            ("route-table", 1),
            ("security-group", 2),
            ("subnet", 3),
            ("vpc", 1),
        ]),
        "no duplicates"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_name_the_resource_and_what_to_do() {
    let cluster = Cluster::new("errors").await;
    cluster
        .ballast()
        .args(["create", "cluster", "--zones", ZONES])
        .assert()
        .success();

    // An unreachable endpoint.
    cluster
        .ballast()
        .args(["update", "cluster"])
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .env("AWS_MAX_ATTEMPTS", "1")
        .assert()
        .code(1)
        // The first call is STS's (the account named as the state bucket's expected owner).
        .stderr(predicate::str::contains(
            "cannot tell which AWS account is in use",
        ))
        .stderr(predicate::str::contains(
            "cannot connect to http://127.0.0.1:9: check the network",
        ));

    // No credentials anywhere.
    cluster
        .ballast()
        .args(["update", "cluster"])
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("no AWS credentials"));

    // A subnet outside a shared VPC's range: AWS refuses it, and the message names the subnet.
    let ec2 = aws_sdk_ec2::Client::new(&aws::sdk_config().await);
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.99.0.0/16")
        .send()
        .await
        .expect("vpc");
    let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).expect("id").to_string();
    let shared = Cluster::new("shared").await;
    shared
        .ballast()
        .args([
            "create",
            "cluster",
            "--zones",
            "us-west-2a",
            "--network-id",
            &vpc_id,
            "--network-cidr",
            "10.98.0.0/16",
        ])
        .assert()
        .success();
    shared
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(format!(
            "Subnet us-west-2a.{}: CreateSubnet failed",
            shared.name
        )))
        .stderr(predicate::str::contains("InvalidSubnet.Range"))
        .stderr(predicate::str::contains("check spec.subnets"));
    // The shared VPC was only tagged.
    let vpcs = ec2
        .describe_vpcs()
        .vpc_ids(&vpc_id)
        .send()
        .await
        .expect("vpc");
    let tags = tags_of(vpcs.vpcs()[0].tags());
    assert_eq!(
        tags.get(&format!("kubernetes.io/cluster/{}", shared.name))
            .map(String::as_str),
        Some("shared")
    );

    // A change AWS cannot make in place is refused, naming the resource and the spec field.
    cluster
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
    let stored = cluster
        .ballast()
        .args(["get", "clusters", "-o", "yaml"])
        .assert()
        .success();
    let yaml = String::from_utf8_lossy(&stored.get_output().stdout).replace(
        "spec:\n",
        "spec:\n  api:\n    loadBalancer:\n      type: Internal\n",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    cluster.replace(&dir, &yaml);
    cluster
        .ballast()
        .args(["update", "cluster"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(format!(
            "LoadBalancer {}: spec.api.loadBalancer.type cannot be changed in place",
            ballast::cloud::model::elb_name("api", &cluster.name)
        )));

    // A file state store cannot serve nodes.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(&ballast_e2e::localcloud::binaries().ballast);
    cmd.env(
        "BALLAST_STATE",
        format!("file://{}", dir.path().join("state").display()),
    )
    .args([
        "create",
        "cluster",
        "--name",
        "f.example.com",
        "--zones",
        "us-west-2a",
        "--yes",
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains("needs an S3 state store"));
    assert!(
        std::fs::read_dir(dir.path())
            .map(|d| d.count())
            .unwrap_or(0)
            == 0,
        "nothing stored"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_topology_gets_a_nat_gateway_per_zone() {
    let cluster = Cluster::new("private").await;
    cluster.create(&["--topology", "private"]);
    let ec2 = aws_sdk_ec2::Client::new(&aws::sdk_config().await);
    let owned = aws_sdk_ec2::types::Filter::builder()
        .name(format!("tag:kubernetes.io/cluster/{}", cluster.name))
        .values("owned")
        .build();
    let gateways = ec2
        .describe_nat_gateways()
        .filter(owned.clone())
        .send()
        .await
        .expect("nat gateways");
    assert_eq!(gateways.nat_gateways().len(), 3, "one per zone");
    let tables = ec2
        .describe_route_tables()
        .filters(owned.clone())
        .send()
        .await
        .expect("route tables");
    let private_tables: Vec<_> = tables
        .route_tables()
        .iter()
        .filter(|t| {
            tags_of(t.tags())
                .get("Name")
                .is_some_and(|n| n.starts_with("private-"))
        })
        .collect();
    assert_eq!(private_tables.len(), 3);
    for table in private_tables {
        assert!(
            table.routes().iter().any(|r| r.nat_gateway_id().is_some()),
            "{table:?}"
        );
        assert_eq!(
            table
                .associations()
                .iter()
                .filter(|a| a.subnet_id().is_some())
                .count(),
            1
        );
    }
    // Instances live in the private subnets; the public ones only hold NAT gateways and the load balancer.
    let subnets = ec2
        .describe_subnets()
        .filters(owned)
        .send()
        .await
        .expect("subnets");
    let private: BTreeSet<String> = subnets
        .subnets()
        .iter()
        .filter(|s| {
            !tags_of(s.tags())
                .get("Name")
                .is_some_and(|n| n.starts_with("utility-"))
        })
        .filter_map(|s| s.subnet_id().map(str::to_string))
        .collect();
    assert_eq!(private.len(), 3);
    for instance in running_instances(&cluster.name).await {
        assert!(
            private.contains(instance.subnet_id().unwrap_or("")),
            "{:?}",
            instance.subnet_id()
        );
    }
    assert!(cluster.plan().starts_with("No changes"));
}

/// `validate cluster` against the emulator: it names what is missing (the AWS resources, then each instance's
/// nodeup report, an outdated node spec, etcd) until everything the supervisors and nodeup would publish is
/// there. The reports and etcd's health are written here as nodeup and the supervisors write them.
#[tokio::test(flavor = "multi_thread")]
async fn validate_names_what_is_missing_until_the_cluster_is_up() {
    use ballast_state::digest::sha256_hex;
    use ballast_state::etcd::health::HealthReport;
    use ballast_state::etcd::record::{ClusterRecord, Origin};
    use ballast_state::layout::ClusterPaths;
    use ballast_state::report::{NodeReport, Phase};
    use ballast_store::etcd::health::publish_health;
    use ballast_store::etcd::record::write_record;
    use ballast_store::store::{StateStore, StoreOptions};

    let cluster = Cluster::new("validate").await;
    cluster
        .ballast()
        .args(["create", "cluster", "--zones", ZONES])
        .assert()
        .success();
    // No AWS resources yet.
    cluster
        .ballast()
        .args(["validate", "cluster"])
        .assert()
        .code(6)
        .stdout(predicate::str::contains(format!(
            "instance group nodes                      fail          AutoScalingGroup nodes.{0} does not exist: run \
             `ballast update cluster {0} --yes`",
            cluster.name
        )))
        .stdout(predicate::str::contains("etcd was never bootstrapped"))
        .stdout(predicate::str::contains(
            "kubernetes API                            not checked   no control-plane instance has reported yet",
        ))
        .stderr(predicate::str::contains("is not valid: 5 of 7 checks failed"));

    // The groups are in service, but no instance reported and etcd never started.
    cluster
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
    let paths = ClusterPaths::new(&cluster.name);
    let validation = |code: i32| {
        let out = cluster
            .ballast()
            .args(["validate", "cluster", "-o", "json"])
            .assert()
            .code(code);
        let json: serde_json::Value =
            serde_json::from_slice(&out.get_output().stdout).expect("json");
        json["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or("").to_string(),
                    (
                        c["ok"].as_bool().unwrap_or(false),
                        c["reason"].as_str().unwrap_or("").to_string(),
                    ),
                )
            })
            .collect::<BTreeMap<String, (bool, String)>>()
    };
    let checks = validation(6);
    let running = running_instances(&cluster.name).await;
    let instances: Vec<(String, String)> = running
        .iter()
        .map(|i| {
            let group = tags_of(i.tags())["ballast.dev/instance-group"].clone();
            (i.instance_id().expect("id").to_string(), group)
        })
        .collect();
    // Reports count only when signed by the node EC2 names for the instance: each is signed as that node, with
    // a certificate from the cluster's CA (as nodeup would with the one it holds).
    let node_names: BTreeMap<String, String> = running
        .iter()
        .map(|i| {
            (
                i.instance_id().expect("id").to_string(),
                i.private_dns_name()
                    .expect("a private DNS name")
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(instances.len(), 6);
    for group in [
        "control-plane-us-west-2a",
        "control-plane-us-west-2b",
        "control-plane-us-west-2c",
        "nodes",
    ] {
        let (ok, reason) = &checks[&format!("instance group {group}")];
        assert!(ok, "{reason}");
    }
    for (id, group) in &instances {
        let (ok, reason) = &checks[&format!("node {id} ({group})")];
        assert!(!ok);
        assert_eq!(
            reason,
            &format!(
                "no nodeup report ({}<role-id>:{id}.json): nodeup has not finished its first run on it, or \
                 cannot reach the state store (see the instance's console output)",
                paths.reports_prefix()
            )
        );
    }
    assert!(!checks["etcd"].0, "{checks:?}");
    // 4 groups, 6 nodes, etcd, the state bucket, the Kubernetes API (not checked: no kubelet reported).
    assert_eq!(checks.len(), 4 + 6 + 1 + 1 + 1, "{checks:?}");
    assert!(checks["kubernetes API"].0, "{checks:?}");

    // Every node reports Configured, one of them with an older node spec.
    let store = StateStore::open(&cluster.state, StoreOptions::default())
        .await
        .expect("store");
    for (i, (id, group)) in instances.iter().enumerate() {
        let spec = store
            .get(&paths.node_spec(group))
            .await
            .expect("read")
            .expect("node spec");
        let mut report = NodeReport::new(id, "0.1.0", "2025-01-01T00:00:00Z");
        report.phase = Phase::Configured;
        report.instance_group = Some(group.clone());
        report.node_spec_sha256 = Some(if i == 0 {
            sha256_hex(b"an older spec")
        } else {
            sha256_hex(&spec.data)
        });
        ballast_e2e::reports::put_signed(&store, &paths, &report, &node_names[id]).await;
    }
    let checks = validation(6);
    let (first, first_group) = &instances[0];
    let (ok, reason) = &checks[&format!("node {first} ({first_group})")];
    assert!(
        !ok && reason.contains("Configured with an older node spec"),
        "{reason}"
    );
    let failing: Vec<&String> = checks
        .iter()
        .filter(|(_, (ok, _))| !ok)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(failing.len(), 2, "{failing:?}");

    // The outdated instance is replaced in the spec's stead (its report now names the current spec), and
    // etcd comes up while `validate --wait` watches.
    let spec = store
        .get(&paths.node_spec(first_group))
        .await
        .expect("read")
        .expect("node spec");
    let mut report = NodeReport::new(first, "0.1.0", "2025-01-01T00:00:00Z");
    report.phase = Phase::Configured;
    report.node_spec_sha256 = Some(sha256_hex(&spec.data));
    ballast_e2e::reports::put_signed(&store, &paths, &report, &node_names[first]).await;
    let mut waiting = std::process::Command::new(&ballast_e2e::localcloud::binaries().ballast)
        .env("BALLAST_STATE", &cluster.state)
        .env("BALLAST_CLUSTER_NAME", &cluster.name)
        .args(["validate", "cluster", "--wait", "90s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn ballast");
    // Its stderr as it comes: etcd's record and health go in only once `validate --wait` has seen etcd fail.
    let stderr_lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stderr_reader = {
        let pipe = waiting.stderr.take().expect("piped stderr");
        let lines = stderr_lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                lines.lock().expect("stderr lines").push(line);
            }
        })
    };
    let seen = &stderr_lines;
    wait_until(
        Duration::from_secs(60),
        "validate --wait to report etcd failing",
        || async move {
            let lines = seen.lock().expect("stderr lines");
            lines.iter().any(|l| l.contains("checks failing: etcd"))
        },
    )
    .await;
    let leader = instances
        .iter()
        .find(|(_, g)| g.starts_with("control-plane-"))
        .map(|(id, _)| id.clone())
        .expect("a control-plane instance");
    write_record(
        &store,
        &paths,
        &ClusterRecord {
            epoch: 1,
            origin: Origin::Bootstrap,
            seed: Some(leader.clone()),
            decided_at: "2025-01-01T00:00:00Z".to_string(),
            decided_by: format!("instance {leader}"),
        },
        None,
    )
    .await
    .expect("record");
    let voting: Vec<String> = instances
        .iter()
        .filter(|(_, g)| g.starts_with("control-plane-"))
        .map(|(id, _)| id.clone())
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs() as i64;
    publish_health(
        &store,
        &paths,
        &HealthReport {
            instance_id: leader.clone(),
            peer_url: "https://10.0.0.1:2380".to_string(),
            client_url: "https://10.0.0.1:2379".to_string(),
            updated_at: "now".to_string(),
            updated_unix: now,
            local_epoch: Some(1),
            running: true,
            member_id: Some("1".to_string()),
            is_learner: false,
            is_leader: true,
            raft_index: 10,
            cluster_healthy: true,
            voting_members: voting,
            learners: vec![],
            last_step: "steady".to_string(),
            last_error: None,
        },
    )
    .await
    .expect("health");
    let output = tokio::task::spawn_blocking(move || waiting.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    stderr_reader.join().expect("the stderr reader");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = stderr_lines.lock().expect("stderr lines").join("\n");
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("validate: 1 of 13 checks failing: etcd; checking again every 0.5s"),
        "{stderr}"
    );
    assert!(stderr.contains("is valid"), "{stderr}");
    assert!(!stdout.contains("fail"), "{stdout}");
    assert!(
        stdout.contains("healthy, 3 voting members of 3 (epoch 1)"),
        "{stdout}"
    );
}

/// Registers an image as `aws ec2 register-image` would, with `root_device` as its root device name (or none).
async fn register_image(name: &str, root_device: Option<&str>) -> String {
    let ec2 = aws_sdk_ec2::Client::new(&aws::sdk_config().await);
    ec2.register_image()
        .name(name)
        .set_root_device_name(root_device.map(str::to_string))
        .architecture(aws_sdk_ec2::types::ArchitectureValues::X8664)
        .send()
        .await
        .expect("register image")
        .image_id()
        .expect("an image id")
        .to_string()
}

/// The encrypted root volume is mapped on the image's own root device name: on an image whose root device is
/// /dev/sda1, a mapping on a hard-coded /dev/xvda would be a second, unused volume while the instance boots
/// from the image's unencrypted one. An image without a root device name is refused, naming it and the groups.
#[tokio::test(flavor = "multi_thread")]
async fn the_root_volume_is_mapped_on_the_images_root_device() {
    let cluster = Cluster::new("rootdev").await;
    let sda1 = register_image("ballast-rootdev-sda1", Some("/dev/sda1")).await;
    cluster.create(&["--image", &sda1]);
    let ec2 = aws_sdk_ec2::Client::new(&aws::sdk_config().await);
    let templates = ec2
        .describe_launch_templates()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{}", cluster.name))
                .values("owned")
                .build(),
        )
        .send()
        .await
        .expect("launch templates");
    assert_eq!(templates.launch_templates().len(), 4);
    for template in templates.launch_templates() {
        let versions = ec2
            .describe_launch_template_versions()
            .launch_template_id(template.launch_template_id().expect("an id"))
            .versions("$Default")
            .send()
            .await
            .expect("launch template versions");
        let data = versions.launch_template_versions()[0]
            .launch_template_data()
            .expect("version data");
        let mappings: Vec<(Option<&str>, Option<bool>)> = data
            .block_device_mappings()
            .iter()
            .map(|m| (m.device_name(), m.ebs().and_then(|e| e.encrypted())))
            .collect();
        assert_eq!(
            mappings,
            vec![(Some("/dev/sda1"), Some(true))],
            "{:?}",
            template.launch_template_name()
        );
    }
    assert!(cluster.plan().starts_with("No changes"));

    let bare_cluster = Cluster::new("rootnone").await;
    let bare = register_image("ballast-rootdev-none", None).await;
    bare_cluster
        .ballast()
        .args(["create", "cluster", "--zones", ZONES, "--image", &bare])
        .assert()
        .success();
    bare_cluster
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .failure()
        .stderr(predicate::str::contains(format!(
            "InstanceGroup/control-plane-us-west-2a, InstanceGroup/control-plane-us-west-2b, \
             InstanceGroup/control-plane-us-west-2c, InstanceGroup/nodes: spec.image: AMI {bare} has no root \
             device name"
        )));
}

/// `twin.example.com` and `twin-example.com` read alike once dots become hyphens (load-balancer names allow no
/// dots): the second cluster plans a load balancer, target group and listener of its own, under other names than
/// the first's, and a load balancer with its name that carries the first cluster's tag is refused, not adopted.
#[tokio::test(flavor = "multi_thread")]
async fn clusters_whose_names_read_alike_never_share_a_load_balancer() {
    use aws_sdk_elasticloadbalancingv2::types::{LoadBalancerTypeEnum, Tag};
    use ballast::cloud::model::elb_name;

    let first = Cluster::new("twin").await;
    first.create(&[]);
    let second = Cluster {
        name: "twin-example.com".to_string(),
        state: first.state.clone(),
    };
    second
        .ballast()
        .args([
            "create",
            "cluster",
            "--zones",
            ZONES,
            "--network-cidr",
            "10.42.0.0/16",
        ])
        .assert()
        .success();
    let plan = second.plan();
    for (kind, prefix) in [("LoadBalancer", "api"), ("TargetGroup", "tcp")] {
        let (ours, theirs) = (
            elb_name(prefix, &second.name),
            elb_name(prefix, &first.name),
        );
        assert_ne!(ours, theirs);
        assert!(
            plan.contains(&format!("+ {kind} {ours}")),
            "{kind}:\n{plan}"
        );
    }
    assert!(
        plan.contains(&format!(
            "+ Listener {} TCP 443",
            elb_name("api", &second.name)
        )),
        "{plan}"
    );

    // A load balancer under the second cluster's name, tagged as the first's (made by hand, or left by a
    // collision): the second's update refuses to adopt it and names its owner.
    let config = aws::sdk_config().await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let subnets: Vec<String> = ec2
        .describe_subnets()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{}", first.name))
                .values("owned")
                .build(),
        )
        .send()
        .await
        .expect("subnets")
        .subnets()
        .iter()
        .filter_map(|s| s.subnet_id().map(str::to_string))
        .take(1)
        .collect();
    let elb = aws_sdk_elasticloadbalancingv2::Client::new(&config);
    elb.create_load_balancer()
        .name(elb_name("api", &second.name))
        .r#type(LoadBalancerTypeEnum::Network)
        .set_subnets(Some(subnets))
        .tags(
            Tag::builder()
                .key(format!("kubernetes.io/cluster/{}", first.name))
                .value("owned")
                .build(),
        )
        .send()
        .await
        .expect("a load balancer under the second cluster's name");
    second
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(format!(
            "LoadBalancer {}",
            elb_name("api", &second.name)
        )))
        .stderr(predicate::str::contains(format!(
            "belongs to cluster {}",
            first.name
        )))
        .stderr(predicate::str::contains("does not adopt"));
}

/// `spec.terminationHandling` against the emulator (docs/termination.md): `update cluster --yes` makes the queue,
/// its policy, the five rules with their target and a hook on each group through the SDK, and the next plan finds
/// every one of them as the spec wants it (no change: the find, the diff and what the apply made agree); `delete
/// cluster` lists them and deletes them: the same cluster created again plans them all anew.
#[tokio::test(flavor = "multi_thread")]
async fn termination_handling_is_made_found_in_sync_and_deleted() {
    let cluster = Cluster::new("termination").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = dir.path().join("cluster.yaml");
    std::fs::write(
        &spec,
        format!(
            "apiVersion: ballast.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: {}}}\nspec:\n  subnets:\n  - {{name: us-west-2a, zone: us-west-2a}}\n  terminationHandling: {{enabled: true, heartbeatTimeout: 2m}}\n---\napiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {{name: control-plane}}\nspec: {{role: ControlPlane, subnets: [us-west-2a]}}\n---\napiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {{name: nodes}}\nspec: {{role: Node, minSize: 1, maxSize: 2, subnets: [us-west-2a]}}\n",
            cluster.name
        ),
    )
    .expect("spec file");
    let create = |what: &str| {
        cluster
            .ballast()
            .args(["create", "-f"])
            .arg(&spec)
            .assert()
            .success();
        let plan = cluster.plan();
        let queue = format!(
            "  + SqsQueue {}-termination\n",
            cluster.name.replace('.', "-")
        );
        assert!(plan.contains(&queue), "{what}: {plan}");
        for rule in [
            "ASGLifecycle",
            "SpotInterruption",
            "RebalanceRecommendation",
            "InstanceStateChange",
            "InstanceScheduledChange",
        ] {
            assert!(
                plan.contains(&format!("  + EventRule {}-{rule}\n", cluster.name)),
                "{what}: {rule}: {plan}"
            );
        }
        for group in ["control-plane", "nodes"] {
            assert!(
                plan.contains(&format!(
                    "  + LifecycleHook {group}.{}/ballast-termination\n        transition: autoscaling:EC2_INSTANCE_TERMINATING\n        heartbeatTimeout: 120s\n",
                    cluster.name
                )),
                "{what}: {group}: {plan}"
            );
        }
    };
    create("a new cluster");
    cluster
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
    let plan = cluster.plan();
    assert!(plan.starts_with("No changes"), "after the apply: {plan}");

    let preview = cluster
        .ballast()
        .args(["delete", "cluster"])
        .assert()
        .success();
    let preview = String::from_utf8(preview.get_output().stdout.clone()).expect("utf8");
    assert!(preview.contains("  SqsQueue (1)\n"), "{preview}");
    assert!(preview.contains("  EventRule (5)\n"), "{preview}");
    cluster
        .ballast()
        .args(["delete", "cluster", "--yes"])
        .assert()
        .success();
    // Nothing of it is left to be found: created again, every one is planned anew.
    create("the same cluster after its delete");
}

/// The first cluster's resources as another spec could change or delete them: the counts of what it owns, its
/// launch templates' latest versions and its instances. Equal before and after means nothing of it was touched.
async fn footprint(cluster: &str) -> (BTreeMap<&'static str, usize>, BTreeMap<String, i64>, usize) {
    let ec2 = aws_sdk_ec2::Client::new(&aws::sdk_config().await);
    let templates = ec2
        .describe_launch_templates()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{cluster}"))
                .values("owned")
                .build(),
        )
        .send()
        .await
        .expect("launch templates")
        .launch_templates()
        .iter()
        .map(|t| {
            (
                t.launch_template_name().unwrap_or_default().to_string(),
                t.latest_version_number().unwrap_or_default(),
            )
        })
        .collect();
    (
        aws::owned_counts(cluster).await,
        templates,
        running_instances(cluster).await.len(),
    )
}

/// A cluster of the same name in another state-store prefix (issue 44, High 5): its plan, apply and delete are
/// refused before anything changes, naming a resource and the first cluster's id, and nothing of the first
/// changes. Then the migration: a resource of the first that lost its id is refused until adopted with
/// `--adopt-untagged`, which lists it and tags it.
#[tokio::test(flavor = "multi_thread")]
async fn a_same_named_cluster_in_another_store_never_changes_or_deletes_the_first() {
    let first = Cluster::new("ident").await;
    first.create(&[]);
    let first_id = {
        let bucket = first
            .state
            .trim_start_matches("s3://")
            .split('/')
            .next()
            .expect("bucket")
            .to_string();
        let object = aws::s3_client()
            .await
            .get_object()
            .bucket(&bucket)
            .key(format!("clusters/{}/cluster-id", first.name))
            .send()
            .await
            .expect("the first cluster's id in its store");
        let bytes = object.body.collect().await.expect("body").into_bytes();
        String::from_utf8(bytes.to_vec())
            .expect("utf8")
            .trim()
            .to_string()
    };
    assert_eq!(first_id.len(), 36, "{first_id}");
    let before = footprint(&first.name).await;
    assert!(before.2 > 0, "the first cluster runs instances");

    let second = Cluster {
        name: first.name.clone(),
        state: first.state.replace("/clusters", "/elsewhere"),
    };
    second
        .ballast()
        .args([
            "create",
            "cluster",
            "--zones",
            ZONES,
            "--network-cidr",
            "10.43.0.0/16",
        ])
        .assert()
        .success();
    let carried = format!("carries ballast.dev/cluster-id={first_id}");
    for args in [
        &["update", "cluster"][..],
        &["update", "cluster", "--yes"],
        &["update", "cluster", "--yes", "--adopt-untagged"],
        &["delete", "cluster"],
        &["delete", "cluster", "--yes"],
        &["delete", "cluster", "--yes", "--adopt-untagged"],
    ] {
        second
            .ballast()
            .args(args)
            .assert()
            .code(4)
            .stderr(predicate::str::contains(&carried))
            .stderr(predicate::str::contains("another state store"))
            .stderr(predicate::str::contains("nothing was changed or deleted"));
    }
    assert_eq!(
        footprint(&first.name).await,
        before,
        "the first cluster changed"
    );
    assert!(first.plan().starts_with("No changes"));

    // Migration: a resource made before ids (here: the first's VPC with its id tag removed) is refused, then
    // adopted on request, listed, and tagged with the cluster's id.
    let ec2 = aws_sdk_ec2::Client::new(&aws::sdk_config().await);
    let vpc = ec2
        .describe_vpcs()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{}", first.name))
                .values("owned")
                .build(),
        )
        .send()
        .await
        .expect("vpcs")
        .vpcs()[0]
        .vpc_id()
        .expect("vpc id")
        .to_string();
    ec2.delete_tags()
        .resources(&vpc)
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("ballast.dev/cluster-id")
                .build(),
        )
        .send()
        .await
        .expect("untag");
    first
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains(format!("Vpc {vpc}")))
        .stderr(predicate::str::contains("--adopt-untagged"));
    first
        .ballast()
        .args(["update", "cluster", "--yes", "--adopt-untagged"])
        .assert()
        .success()
        .stderr(predicate::str::contains(format!("+ Vpc {vpc}")));
    let tags = tags_of(
        ec2.describe_vpcs()
            .vpc_ids(&vpc)
            .send()
            .await
            .expect("vpc")
            .vpcs()[0]
            .tags(),
    );
    assert_eq!(
        tags.get("ballast.dev/cluster-id"),
        Some(&first_id),
        "{tags:?}"
    );
    assert!(first.plan().starts_with("No changes"));
}

/// Two applies at once (issue 44, Medium 10): an apply holds the cluster's writer lock, so one that finds it held
/// is refused naming the holder, and applies once the lock is free.
#[tokio::test(flavor = "multi_thread")]
async fn an_apply_while_another_holds_the_lock_is_refused_naming_the_holder() {
    let cluster = Cluster::new("locked").await;
    cluster.create(&[]);
    let bucket = cluster
        .state
        .trim_start_matches("s3://")
        .split('/')
        .next()
        .expect("bucket")
        .to_string();
    let key = format!("clusters/{}/lock.json", cluster.name);
    let now = time_now();
    let record = serde_json::json!({
        "holder": "alice@laptop pid 4242",
        "command": "ballast update cluster --yes",
        "token": "held-by-another-apply",
        "acquiredAt": now,
        "expiresAt": now + 120,
    });
    let s3 = aws::s3_client().await;
    s3.put_object()
        .bucket(&bucket)
        .key(&key)
        .body(record.to_string().into_bytes().into())
        .send()
        .await
        .expect("another apply's lock");
    let before = footprint(&cluster.name).await;
    cluster
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("alice@laptop pid 4242"))
        .stderr(predicate::str::contains("ballast update cluster --yes"));
    assert_eq!(footprint(&cluster.name).await, before);
    // A plan changes nothing and takes no lock.
    assert!(cluster.plan().starts_with("No changes"));
    s3.delete_object()
        .bucket(&bucket)
        .key(&key)
        .send()
        .await
        .expect("released");
    cluster
        .ballast()
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
}
