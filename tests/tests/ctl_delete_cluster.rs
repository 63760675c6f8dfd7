//! `ballast delete cluster` end to end on the local cloud, with IAM enforced: the real binary deletes a
//! private-topology cluster beside another one (killed with SIGKILL half way, then run again), and a cluster in
//! a shared VPC, which is first handed to Terraform (`update cluster --target terraform --yes`: its Terraform
//! written, its node specs unchanged, direct applies and the delete refused while its resources exist). After each delete a scan of every kind Ballast creates, by tag and by name, finds nothing of
//! the deleted cluster; the cluster beside it is unchanged and still validates; kept etcd backups still list.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use ballast_e2e::kubernetes_made;
use ballast_e2e::leftovers::{scan, tag_map};
use ballast_e2e::localcloud::{instance_processes, LocalCloud, Network};
use ballast_e2e::operator::{ballast_cli, STATE};
use ballast_e2e::wait::wait_until;
use sha2::{Digest, Sha256};

const DOOMED: &str = "doomed.example.com";
const NEIGHBOUR: &str = "neighbour.example.com";
const SHARED: &str = "tenant.example.com";
const ZONES: &str = "us-west-2a,us-west-2b,us-west-2c";

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The store's objects under `cluster/`, with their content.
/// The cluster's state-store objects: key -> the sha256 of the body (a digest keeps a failed comparison legible).
async fn store_objects(cloud: &LocalCloud, cluster: &str) -> BTreeMap<String, String> {
    let s3 = cloud.s3();
    let mut objects = BTreeMap::new();
    let listed = s3
        .list_objects_v2()
        .bucket("ballast-state")
        .prefix(format!("clusters/{cluster}/"))
        .send()
        .await
        .expect("list objects");
    for o in listed.contents() {
        let key = o.key().unwrap_or_default().to_string();
        let body = s3
            .get_object()
            .bucket("ballast-state")
            .key(&key)
            .send()
            .await
            .expect("get object")
            .body
            .collect()
            .await
            .expect("body")
            .into_bytes();
        objects.insert(key, hex::encode(Sha256::digest(&body)));
    }
    objects
}

/// A running cluster's nodes keep writing their reports and etcd's health, members and backups; everything else
/// in its store (spec, completed spec, node specs, keys) is the operator's: that must be byte for byte as before,
/// and nothing the nodes wrote may have gone.
fn assert_unchanged_by_operator(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) {
    let written_by_nodes = |key: &str| key.contains("/reports/") || key.contains("/etcd/");
    let operators = |objects: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        objects
            .iter()
            .filter(|(k, _)| !written_by_nodes(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    assert_eq!(
        operators(after),
        operators(before),
        "the operator's objects changed"
    );
    let gone: Vec<&String> = before
        .keys()
        .filter(|k| written_by_nodes(k) && !after.contains_key(*k))
        .collect();
    assert!(
        gone.is_empty(),
        "objects the nodes wrote are gone: {gone:?}"
    );
}

/// Runs `validate cluster -o json` until every check of the cluster's own resources passes (instance groups,
/// nodes, etcd), or panics after `timeout`. The `state bucket` check judges the state bucket's settings, not the
/// cluster, and is left out: the local cloud's bucket is not set up as a production one.
async fn wait_valid(cloud: &LocalCloud, cluster: &str, timeout: Duration) {
    let what = format!("{cluster}'s own checks to pass");
    wait_until(timeout, &what, || async move {
        let out = ballast_cli(cloud)
            .args(["validate", "cluster", cluster, "-o", "json"])
            .output()
            .expect("run validate");
        let failing: Vec<String> = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v["checks"].as_array().cloned())
            .filter(|checks| checks.iter().any(|c| c["name"] == "etcd"))
            .map(|checks| {
                checks
                    .iter()
                    .filter(|c| c["ok"] != true)
                    .filter(|c| !c["name"].as_str().unwrap_or("").starts_with("state bucket"))
                    .map(|c| format!("{}: {}", c["name"], c["reason"]))
                    .collect()
            })
            .unwrap_or_else(|| vec![String::from_utf8_lossy(&out.stderr).into_owned()]);
        if failing.is_empty() {
            Ok(())
        } else {
            Err(failing)
        }
    })
    .await
}

/// The ids `ballast etcd list-backups` lists for `cluster`.
/// The clusters the operator's report cache (`BALLAST_CACHE_DIR`, set by the harness) holds reports of, in any
/// state store.
fn cached_clusters(cloud: &LocalCloud) -> Vec<String> {
    let reports = cloud.dir().join("operator-cache/reports");
    let mut clusters: Vec<String> = std::fs::read_dir(&reports)
        .expect("the operator's report cache")
        .flat_map(|store| {
            std::fs::read_dir(store.expect("an entry").path()).expect("a store's cache")
        })
        .map(|cluster| {
            cluster
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    clusters.sort();
    clusters
}

fn backup_ids(cloud: &LocalCloud, cluster: &str) -> Vec<String> {
    let out = ballast_cli(cloud)
        .args(["etcd", "list-backups", cluster, "-o", "json"])
        .assert()
        .success();
    let listed: serde_json::Value =
        serde_json::from_slice(&out.get_output().stdout).expect("list-backups JSON");
    listed
        .as_array()
        .expect("a JSON list")
        .iter()
        .map(|b| b["id"].as_str().expect("a backup id").to_string())
        .collect()
}

/// `127.X.0.0/16` → `127.Y.0.0/16` with Y = X + `shift` kept in 100..=239: a second cluster's VPC in the same
/// cloud must not hand out the first one's private IPs (their etcd binds them).
fn other_network(cidr: &str, shift: u32) -> String {
    let x: u32 = cidr
        .split('.')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("127.X.0.0/16");
    format!("127.{}.0.0/16", 100 + (x - 100 + shift) % 140)
}

/// The processes still running for instances of `cluster`'s groups.
fn processes_of(cloud: &LocalCloud, cluster: &str) -> Vec<(String, Vec<u32>)> {
    cloud
        .instances()
        .into_iter()
        .filter(|r| {
            r.autoscaling_group
                .as_deref()
                .is_some_and(|g| g.ends_with(&format!(".{cluster}")))
        })
        .map(|r| (r.instance_id.clone(), instance_processes(&r)))
        .filter(|(_, p)| !p.is_empty())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_cluster_is_deleted_beside_another_and_a_killed_delete_completes() {
    let cloud = LocalCloud::start();
    cloud.prepare_for_ballast("ballast-state").await;
    let neighbour_cidr = other_network(&cloud.record.network_cidr, 70);
    ballast_cli(&cloud)
        .args(["create", "cluster", NEIGHBOUR, "--zones", "us-west-2a"])
        .args([
            "--node-count",
            "1",
            "--network-cidr",
            &neighbour_cidr,
            "--yes",
        ])
        .assert()
        .success();
    ballast_cli(&cloud)
        .args([
            "create",
            "cluster",
            DOOMED,
            "--zones",
            ZONES,
            "--topology",
            "private",
        ])
        .args(["--node-count", "2", "--yes"])
        .assert()
        .success();
    cloud.wait_for_booted(2 + 5, Duration::from_secs(180)).await;
    // A backup to keep: etcd must be up first.
    wait_valid(&cloud, DOOMED, Duration::from_secs(300)).await;
    ballast_cli(&cloud)
        .args(["etcd", "backup", DOOMED, "--wait", "3m"])
        .assert()
        .success();
    let backups = backup_ids(&cloud, DOOMED);
    assert!(!backups.is_empty(), "etcd backup took no backup");
    wait_valid(&cloud, NEIGHBOUR, Duration::from_secs(300)).await;
    // What each cluster makes by itself (its cloud controller manager, EBS CSI driver and VPC CNI), made here with
    // the same calls and tags: the delete must find the doomed cluster's by their tags and leave the neighbour's.
    let doomed_made = kubernetes_made::make(&cloud.sdk_config(), DOOMED).await;
    let neighbour_made = kubernetes_made::make(&cloud.sdk_config(), NEIGHBOUR).await;
    // Where the cloud controller manager may put them: public (utility) subnets for internet-facing load
    // balancers, private ones for internal ones.
    let roles = kubernetes_made::subnet_roles(&cloud.sdk_config(), DOOMED).await;
    assert_eq!(roles.len(), 6, "{roles:#?}");
    for (name, role) in &roles {
        let want = if name.starts_with("utility-") {
            "kubernetes.io/role/elb=1"
        } else {
            "kubernetes.io/role/internal-elb=1"
        };
        assert_eq!(role, &[want], "{name}");
    }
    let neighbour_before = scan(&cloud.sdk_config(), NEIGHBOUR).await;
    let neighbour_store = store_objects(&cloud, NEIGHBOUR).await;
    let doomed_before = scan(&cloud.sdk_config(), DOOMED).await;
    let doomed_store = store_objects(&cloud, DOOMED).await;
    // `validate` cached both clusters' reports on the operator's machine.
    assert_eq!(cached_clusters(&cloud), [DOOMED, NEIGHBOUR]);
    for kind in [
        "vpc ",
        "subnet ",
        "nat-gateway ",
        "elastic-ip ",
        "internet-gateway ",
        "route-table ",
        "security-group ",
        "launch-template ",
        "auto-scaling-group ",
        "instance ",
        "load-balancer ",
        "target-group ",
        "listener ",
        "iam-role ",
        "instance-profile ",
        "classic-load-balancer ",
        "volume ",
        "network-interface ",
    ] {
        assert!(
            doomed_before.iter().any(|r| r.starts_with(kind)),
            "the scan sees no {kind}of the cluster before the delete: {doomed_before:#?}"
        );
    }
    for made in [&doomed_made, &neighbour_made] {
        assert_eq!(
            kubernetes_made::still_there(&cloud.sdk_config(), made)
                .await
                .len(),
            6,
            "{made:#?}"
        );
    }

    // --unregister is refused while the cluster owns resources: exit code, message, nothing removed.
    let refused = ballast_cli(&cloud)
        .args(["delete", "cluster", DOOMED, "--unregister", "--yes"])
        .assert()
        .code(4);
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert!(stderr.contains("still owns"), "{stderr}");
    assert!(stderr.contains("AutoScalingGroup"), "{stderr}");
    assert!(
        stderr.contains(&format!("ballast delete cluster {DOOMED} --yes")),
        "{stderr}"
    );
    assert_unchanged_by_operator(&doomed_store, &store_objects(&cloud, DOOMED).await);
    assert_eq!(scan(&cloud.sdk_config(), DOOMED).await, doomed_before);

    // The preview names every kind, what is kept, and changes nothing.
    let preview = ballast_cli(&cloud)
        .args(["delete", "cluster", DOOMED])
        .assert()
        .success();
    let preview = stdout_of(preview.get_output());
    for kind in [
        "AutoScalingGroup (4)",
        "NatGateway (3)",
        "ElasticIp (3)",
        "Vpc (1)",
        "IamRole (2)",
        "ClassicLoadBalancer (1)",
        "Service default/web",
        "Service default/api",
        doomed_made.classic_security_group.as_str(),
        doomed_made.volume.as_str(),
        doomed_made.network_interface.as_str(),
    ] {
        assert!(
            preview.contains(kind),
            "no {kind} in the preview:\n{preview}"
        );
    }
    assert!(preview.contains("Would keep"), "{preview}");
    assert!(preview.contains("etcd/backups/"), "{preview}");
    assert_eq!(scan(&cloud.sdk_config(), DOOMED).await, doomed_before);

    // SIGKILL half way (once the groups are gone and instances are going), then run again.
    let mut child = std::process::Command::new(&ballast_e2e::localcloud::binaries().ballast)
        .env_clear()
        .envs(cloud.operator_env(STATE))
        .args(["delete", "cluster", DOOMED, "--yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ballast delete");
    let stderr = child.stderr.take().expect("piped stderr");
    let mut seen = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("a line of stderr");
        seen.push(line.clone());
        if line.contains("AutoScalingGroup: 4 deleted") {
            break;
        }
    }
    child.kill().expect("SIGKILL the delete");
    let status = child.wait().expect("wait");
    assert!(
        !status.success(),
        "the delete finished before it was killed: {seen:#?}"
    );
    let half_way = scan(&cloud.sdk_config(), DOOMED).await;
    assert!(
        half_way.iter().any(|r| r.starts_with("vpc ")),
        "killed too late to prove anything: {half_way:#?}"
    );
    let done = ballast_cli(&cloud)
        .args(["delete", "cluster", DOOMED, "--yes"])
        .assert()
        .success();
    let done_out = stdout_of(done.get_output());
    assert!(done_out.contains("nothing of cluster"), "{done_out}");
    assert!(done_out.contains("Kept"), "{done_out}");

    // Nothing of it is left, in AWS or as a process of the local cloud.
    assert_eq!(
        scan(&cloud.sdk_config(), DOOMED).await,
        Vec::<String>::new()
    );
    assert_eq!(
        kubernetes_made::still_there(&cloud.sdk_config(), &doomed_made).await,
        Vec::<String>::new()
    );
    let operator = &cloud;
    wait_until(
        Duration::from_secs(60),
        "no process of the deleted cluster",
        || async move {
            let left = processes_of(operator, DOOMED);
            if left.is_empty() {
                Ok(())
            } else {
                Err(left)
            }
        },
    )
    .await;

    // Only its etcd backups stay in the store, and they still list.
    let left = store_objects(&cloud, DOOMED).await;
    assert!(!left.is_empty(), "the backup was not kept");
    assert!(
        left.keys()
            .all(|k| k.starts_with(&format!("clusters/{DOOMED}/etcd/backups/"))),
        "{:#?}",
        left.keys()
    );
    assert_eq!(backup_ids(&cloud, DOOMED), backups);
    // Nor on the operator's machine: its cached reports went with it, the neighbour's stay.
    assert_eq!(cached_clusters(&cloud), [NEIGHBOUR]);

    // The neighbour: its resources and state unchanged, and it still validates.
    assert_eq!(scan(&cloud.sdk_config(), NEIGHBOUR).await, neighbour_before);
    assert_eq!(
        kubernetes_made::still_there(&cloud.sdk_config(), &neighbour_made)
            .await
            .len(),
        6,
        "{neighbour_made:#?}"
    );
    assert!(
        kubernetes_made::nodes_admit_load_balancer(&cloud.sdk_config(), &neighbour_made).await,
        "the neighbour's nodes no longer admit its load balancer's group"
    );
    assert_unchanged_by_operator(&neighbour_store, &store_objects(&cloud, NEIGHBOUR).await);
    wait_valid(&cloud, NEIGHBOUR, Duration::from_secs(180)).await;

    // Deleting again: nothing to delete but the kept backups, which go with --delete-backups.
    ballast_cli(&cloud)
        .args(["delete", "cluster", DOOMED, "--yes"])
        .assert()
        .code(5);
    ballast_cli(&cloud)
        .args(["delete", "cluster", DOOMED, "--delete-backups", "--yes"])
        .assert()
        .success();
    assert_eq!(store_objects(&cloud, DOOMED).await, BTreeMap::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_in_a_shared_vpc_leaves_the_vpc_and_subnets_without_its_tag() {
    let cloud = LocalCloud::start();
    cloud.prepare_for_ballast("ballast-state").await;
    let octet: u8 = cloud
        .record
        .network_cidr
        .split('.')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("127.X.0.0/16");
    let network = Network::create(&cloud.ec2(), octet, &["us-west-2a", "us-west-2b"]).await;
    let subnets = network.subnet_ids().join(",");
    ballast_cli(&cloud)
        .args([
            "create",
            "cluster",
            SHARED,
            "--zones",
            "us-west-2a,us-west-2b",
        ])
        .args(["--network-id", &network.vpc_id, "--subnets", &subnets])
        .args(["--node-count", "1", "--control-plane-count", "1", "--yes"])
        .assert()
        .success();
    cloud.wait_for_booted(2, Duration::from_secs(180)).await;
    let key = format!("kubernetes.io/cluster/{SHARED}");
    let vpc = cloud
        .ec2()
        .describe_vpcs()
        .vpc_ids(&network.vpc_id)
        .send()
        .await
        .expect("vpc");
    assert_eq!(
        tag_map(vpc.vpcs()[0].tags()).get(&key).map(String::as_str),
        Some("shared")
    );

    // In the shared VPC: an interface of this cluster's VPC CNI and one of another cluster's. Only the first is
    // this cluster's to delete.
    let subnet = network.subnet_ids()[0].clone();
    let ours = kubernetes_made::cni_network_interface(&cloud.sdk_config(), SHARED, &subnet).await;
    let theirs =
        kubernetes_made::cni_network_interface(&cloud.sdk_config(), NEIGHBOUR, &subnet).await;

    let preview = ballast_cli(&cloud)
        .args(["delete", "cluster", SHARED])
        .assert()
        .success();
    let preview = stdout_of(preview.get_output());
    assert!(
        preview.contains(&format!("Vpc {}: shared", network.vpc_id)),
        "{preview}"
    );
    assert!(preview.contains(&ours), "{preview}");
    assert!(!preview.contains(&theirs), "{preview}");

    // The same cluster handed to Terraform (docs/terraform.md): its Terraform is written from the load balancer
    // that exists, its node specs are the ones the direct apply wrote (none rewritten), and it is marked.
    let out = tempfile::tempdir().expect("tempdir");
    let written = ballast_cli(&cloud)
        .args([
            "update",
            "cluster",
            SHARED,
            "--target",
            "terraform",
            "--yes",
            "--out",
        ])
        .arg(out.path())
        .assert()
        .success();
    let stderr = String::from_utf8_lossy(&written.get_output().stderr).into_owned();
    assert!(stderr.contains("and 0 node spec(s)"), "{stderr}");
    let tf = std::fs::read_to_string(out.path().join("kubernetes.tf")).expect("kubernetes.tf");
    for want in [
        "resource \"aws_autoscaling_group\"",
        "resource \"aws_launch_template\"",
        &format!("resource \"aws_ec2_tag\" \"{}-shared-tag\"", network.vpc_id),
    ] {
        assert!(tf.contains(want), "{want} not in {tf}");
    }
    let marker = format!("clusters/{SHARED}/terraform-managed.json");
    assert!(store_objects(&cloud, SHARED).await.contains_key(&marker));
    // A direct apply is refused; so is the delete while the cluster's AWS resources exist.
    ballast_cli(&cloud)
        .args(["update", "cluster", SHARED, "--yes"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("is managed by Terraform"));
    let before = store_objects(&cloud, SHARED).await;
    ballast_cli(&cloud)
        .args(["delete", "cluster", SHARED, "--delete-backups", "--yes"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("terraform destroy"));
    assert!(
        scan(&cloud.sdk_config(), SHARED).await.len() > 1,
        "a refused delete deleted something"
    );
    assert_eq!(
        store_objects(&cloud, SHARED).await.get(&marker),
        before.get(&marker)
    );
    // `terraform destroy` cannot run here (no provider can be downloaded): the marker goes instead, and Ballast's
    // own delete then deletes the resources, as below.
    cloud
        .s3()
        .delete_object()
        .bucket("ballast-state")
        .key(&marker)
        .send()
        .await
        .expect("delete the marker");

    ballast_cli(&cloud)
        .args(["delete", "cluster", SHARED, "--delete-backups", "--yes"])
        .assert()
        .success();
    let ec2 = cloud.ec2();
    let vpcs = ec2
        .describe_vpcs()
        .vpc_ids(&network.vpc_id)
        .send()
        .await
        .expect("the shared VPC survives");
    assert_eq!(vpcs.vpcs().len(), 1);
    assert!(!tag_map(vpcs.vpcs()[0].tags()).contains_key(&key));
    let found = ec2
        .describe_subnets()
        .set_subnet_ids(Some(network.subnet_ids()))
        .send()
        .await
        .expect("the shared subnets survive");
    assert_eq!(found.subnets().len(), 2);
    for s in found.subnets() {
        assert!(!tag_map(s.tags()).contains_key(&key), "{s:?}");
        // Shared subnets are the operator's: Ballast never gave them the load balancers' role tags.
        assert!(
            !tag_map(s.tags())
                .keys()
                .any(|k| k.starts_with("kubernetes.io/role/")),
            "{s:?}"
        );
    }
    assert_eq!(
        scan(&cloud.sdk_config(), SHARED).await,
        Vec::<String>::new()
    );
    assert_eq!(store_objects(&cloud, SHARED).await, BTreeMap::new());
    assert_eq!(
        kubernetes_made::network_interfaces_there(&cloud.sdk_config(), &[&ours, &theirs]).await,
        vec![theirs.clone()],
        "only this cluster's CNI interface goes from the shared VPC"
    );
}
