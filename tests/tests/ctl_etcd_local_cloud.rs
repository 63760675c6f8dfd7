//! etcd on a cluster of three control-plane groups on the local cloud, driven the way an operator would
//! (`ballast create cluster --yes`, EC2 TerminateInstances, `ballast etcd ...`), with IAM enforced: every
//! supervisor finds its peers through the EC2 API with its own instance role's credentials.
//!
//! What is checked against etcd itself (mutual TLS, with a client certificate nodeup issued): the members are
//! exactly the live control-plane instances, all voting, in one cluster with one leader; and no key written
//! (and acknowledged) before a termination is ever lost. Each member's data is on its own volume and peer URLs are
//! by name (`docs/etcd.md`): losing two, or all three, instances at once brings the same cluster back by itself;
//! `restore-backup` is for lost disks, which the second scenario simulates by emptying two volumes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ballast_e2e::cluster_etcd::{connect, control_plane, wait_for_settled};
use ballast_e2e::etcd_writer::{write_until_stopped, WriterControl};
use ballast_e2e::localcloud::{LocalCloud, Termination};
use ballast_e2e::operator::{ballast_cli, create_ha_cluster};
use ballast_e2e::wait::wait_until;
use etcd_client::{Client, GetOptions};

const CLUSTER: &str = "local.example.com";
/// Generous: a settled cluster is usually back within seconds; a busy 2-core CI machine is slower.
const SETTLE: Duration = Duration::from_secs(180);

/// A cluster of three control-plane groups (one per zone) and no workers, created with `--yes`.
async fn three_control_planes() -> LocalCloud {
    let cloud = LocalCloud::start();
    create_ha_cluster(&cloud, CLUSTER, 0).await;
    cloud
}

async fn client(cloud: &LocalCloud) -> Client {
    connect(cloud).await.expect("an etcd client")
}

/// Puts `prefix/0..n` (each acknowledged: put returns only once a majority has it).
async fn write_keys(cloud: &LocalCloud, prefix: &str, n: usize) {
    let mut c = client(cloud).await;
    for i in 0..n {
        c.put(format!("{prefix}/{i:05}"), format!("value-{i}"), None)
            .await
            .unwrap_or_else(|e| panic!("put {prefix}/{i}: {e}"));
    }
}

/// The keys under `prefix`, read linearizably.
async fn keys(cloud: &LocalCloud, prefix: &str) -> BTreeSet<String> {
    let mut c = client(cloud).await;
    let got = c
        .get(format!("{prefix}/"), Some(GetOptions::new().with_prefix()))
        .await
        .unwrap_or_else(|e| panic!("get {prefix}/: {e}"));
    got.kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

fn expected_keys(prefix: &str, n: usize) -> BTreeSet<String> {
    (0..n).map(|i| format!("{prefix}/{i:05}")).collect()
}

/// Writes `writer/<n>` as fast as etcd acknowledges, through whichever members are alive, until stopped.
async fn continuous_writer(
    cloud: &LocalCloud,
    control: &WriterControl,
) -> ballast_e2e::etcd_writer::WriterReport {
    write_until_stopped(control, "writer/", Duration::ZERO, || connect(cloud)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn etcd_forms_heals_after_replacements_and_survives_losing_two_at_once() {
    let cloud = three_control_planes().await;

    // Create: three voting members over TLS.
    let formed = wait_for_settled(&cloud, 3, SETTLE).await;
    assert_eq!(formed.voters.len(), 3);
    // Each member's supervisor also keeps its health report on the node.
    for r in control_plane(&cloud) {
        let path = r.root.join("var/lib/etcd/health.json");
        cloud
            .wait_for(
                "a healthy local health report",
                Duration::from_secs(30),
                |_| {
                    let report: serde_json::Value =
                        serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
                    (report["clusterHealthy"] == true
                        && report["votingMembers"].as_array().map(Vec::len) == Some(3))
                    .then_some(())
                },
            )
            .await;
    }
    write_keys(&cloud, "before", 200).await;

    // Ten replacements in a row, one instance at a time; during the first, a client keeps writing. Even rounds cut
    // the power (SkipOsShutdown: what crash safety is about, the first one under writes), odd rounds are EC2's
    // default graceful termination.
    let replacements: usize = std::env::var("BALLAST_E2E_REPLACEMENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let mut writer_report = None;
    for round in 0..replacements {
        let live = control_plane(&cloud);
        let victim = live[round % live.len()].instance_id.clone();
        let how = if round % 2 == 0 {
            Termination::PowerCut
        } else {
            Termination::Graceful
        };
        let started = Instant::now();
        let healed = if round == 0 {
            let writer = WriterControl::new();
            let (report, healed) = tokio::join!(continuous_writer(&cloud, &writer), async {
                // The writer under way before the termination, and writing through the healed cluster after.
                writer.wait_for_more_writes(10, SETTLE).await;
                cloud.terminate(std::slice::from_ref(&victim), how).await;
                let healed = wait_for_settled_without(&cloud, std::slice::from_ref(&victim)).await;
                writer.wait_for_more_writes(10, SETTLE).await;
                writer.stop();
                healed
            });
            writer_report = Some(report);
            healed
        } else {
            cloud.terminate(std::slice::from_ref(&victim), how).await;
            wait_for_settled_without(&cloud, std::slice::from_ref(&victim)).await
        };
        eprintln!(
            "replacement {} ({how:?}): {victim} terminated, 3 voting members again after {:?}",
            round + 1,
            started.elapsed()
        );
        assert!(!healed.voters.contains(&victim));
        assert_eq!(keys(&cloud, "before").await, expected_keys("before", 200));
    }
    let writer_report = writer_report.expect("the writer ran");
    eprintln!(
        "continuous writer: {} writes acknowledged, {} failed through the termination",
        writer_report.acknowledged.len(),
        writer_report.failures
    );
    writer_report
        .assert_none_lost(&mut client(&cloud).await, 11)
        .await;
    let acknowledged = writer_report.acknowledged;

    // Two at once, power cut: each member's data is on its volume, so the replacements re-attach them and the same
    // cluster (same epoch, same cluster ID) comes back; nothing is forced.
    write_keys(&cloud, "majority", 100).await;
    let live = control_plane(&cloud);
    let victims: Vec<String> = live[..2].iter().map(|r| r.instance_id.clone()).collect();
    let survivor = live[2].instance_id.clone();
    let started = Instant::now();
    cloud.terminate(&victims, Termination::PowerCut).await;
    let healed = wait_for_settled_without(&cloud, &victims).await;
    assert!(healed.voters.contains(&survivor), "{healed:?}");
    assert_eq!(healed.cluster_id, formed.cluster_id, "a new cluster");
    eprintln!(
        "two terminated at once: 3 voting members again after {:?}",
        started.elapsed()
    );
    assert_eq!(keys(&cloud, "before").await, expected_keys("before", 200));
    assert_eq!(
        keys(&cloud, "majority").await,
        expected_keys("majority", 100)
    );
    let stored = keys(&cloud, "writer").await;
    assert!(acknowledged.iter().all(|k| stored.contains(k)));
    let record = etcd_record(&cloud).await;
    assert_eq!(record["origin"]["kind"], "bootstrap", "{record}");
    assert_eq!(record["epoch"], 1, "{record}");
}

/// `etcd/cluster.json`.
async fn etcd_record(cloud: &LocalCloud) -> serde_json::Value {
    let record = cloud
        .s3_object(
            "ballast-state",
            &format!("clusters/{CLUSTER}/etcd/cluster.json"),
        )
        .await
        .expect("etcd/cluster.json");
    serde_json::from_slice(&record).expect("json")
}

/// Waits until three voting members are back and none of `victims` is among them.
async fn wait_for_settled_without(
    cloud: &LocalCloud,
    victims: &[String],
) -> ballast_e2e::cluster_etcd::Membership {
    wait_until(
        SETTLE,
        &format!("three voting members, none of {victims:?}"),
        || async move {
            let m = wait_for_settled(cloud, 3, SETTLE).await;
            if victims.iter().any(|v| m.voters.contains(v)) {
                Err(m)
            } else {
                Ok(m)
            }
        },
    )
    .await
}

/// The ids of the cluster's backups, oldest first (`ballast etcd list-backups -o json`).
fn backup_ids(cloud: &LocalCloud) -> Vec<String> {
    let out = ballast_cli(cloud)
        .args(["etcd", "list-backups", CLUSTER, "-o", "json"])
        .assert()
        .success();
    let list: serde_json::Value =
        serde_json::from_slice(&out.get_output().stdout).expect("list-backups -o json");
    list.as_array()
        .expect("a JSON array")
        .iter()
        .map(|b| b["id"].as_str().expect("an id").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn losing_every_instance_heals_by_itself_and_restore_backup_recovers_lost_disks() {
    let cloud = three_control_planes().await;
    let original = wait_for_settled(&cloud, 3, SETTLE).await;
    write_keys(&cloud, "kept", 100).await;

    // A backup on demand: the leader's supervisor takes it and `--wait` returns once it is stored.
    ballast_cli(&cloud)
        .args(["etcd", "backup", CLUSTER, "--wait", "2m"])
        .assert()
        .success();
    let id = backup_ids(&cloud).pop().expect("a backup");
    write_keys(&cloud, "after-backup", 10).await;

    // Refused: an unknown id (the available ones are named), and a restore over a healthy cluster.
    let unknown = ballast_cli(&cloud)
        .args([
            "etcd",
            "restore-backup",
            CLUSTER,
            "20200101T000000.000Z",
            "--yes",
        ])
        .assert()
        .code(5);
    let stderr = String::from_utf8_lossy(&unknown.get_output().stderr).into_owned();
    assert!(stderr.contains(&id), "{stderr}");
    ballast_cli(&cloud)
        .args(["etcd", "restore-backup", CLUSTER, &id, "--yes"])
        .assert()
        .code(4);

    // Every control-plane instance terminated at once with a power cut while a client writes: the replacements
    // re-attach the three volumes, the peer names resolve to them, and the same cluster comes back by itself with
    // every acknowledged write (no restore, no forced new cluster).
    let victims: Vec<String> = control_plane(&cloud)
        .into_iter()
        .map(|r| r.instance_id)
        .collect();
    let writer = WriterControl::new();
    let started = Instant::now();
    let (report, healed) = tokio::join!(continuous_writer(&cloud, &writer), async {
        // The writer under way before the power cut.
        writer.wait_for_more_writes(10, SETTLE).await;
        cloud.terminate(&victims, Termination::PowerCut).await;
        let healed = wait_for_settled_without(&cloud, &victims).await;
        // A few writes through the healed cluster too.
        writer.wait_for_more_writes(10, SETTLE).await;
        writer.stop();
        healed
    });
    eprintln!(
        "all three terminated at once: 3 voting members again after {:?}; {} writes acknowledged, {} failed",
        started.elapsed(),
        report.acknowledged.len(),
        report.failures
    );
    assert_eq!(healed.cluster_id, original.cluster_id, "a new cluster");
    report.assert_none_lost(&mut client(&cloud).await, 20).await;
    assert_eq!(keys(&cloud, "kept").await, expected_keys("kept", 100));
    assert_eq!(
        keys(&cloud, "after-backup").await,
        expected_keys("after-backup", 10)
    );
    let record = etcd_record(&cloud).await;
    assert_eq!(record["epoch"], 1, "no new epoch: {record}");
    ballast_cli(&cloud)
        .args(["validate", "cluster", CLUSTER, "--wait", "2m"])
        .assert()
        .success();

    // Restore when nothing can form a quorum: two members' disks lost (their volumes emptied while no instance
    // holds them). The one member with data restarts alone and never becomes healthy; the empty ones find no
    // cluster to join. Nothing is invented: the cluster waits for `restore-backup`.
    scale_control_plane(&cloud, 0).await;
    cloud
        .wait_for("the control plane scaled to zero", SETTLE, |c| {
            control_plane(c).is_empty().then_some(())
        })
        .await;
    let volumes = wait_for_detached_volumes(&cloud).await;
    for volume in &volumes[..2] {
        let dir = cloud.dir().join("volumes").join(volume);
        for entry in std::fs::read_dir(&dir).expect("a volume directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path).expect("emptying a volume");
            } else {
                std::fs::remove_file(&path).expect("emptying a volume");
            }
        }
    }
    scale_control_plane(&cloud, 1).await;
    cloud
        .wait_for("three control-plane instances again", SETTLE, |c| {
            (control_plane(c).len() == 3).then_some(())
        })
        .await;
    // An observation window, not a wait for something: no condition says "will never form", so the cluster is
    // given time in which it could wrongly form one.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        ballast_e2e::cluster_etcd::settled_membership(&cloud, 3)
            .await
            .is_err(),
        "a cluster formed without a restore"
    );

    // The restore: the supervisors carry it out. (Reports of the dead members stay fresh for a while: the
    // command is retried until it is accepted, as an operator would after reading its message.)
    let (operator, id) = (&cloud, id.as_str());
    wait_until(
        Duration::from_secs(90),
        "restore-backup to be accepted",
        || async move {
            let out = ballast_cli(operator)
                .args(["etcd", "restore-backup", CLUSTER, id, "--yes"])
                .output()
                .expect("ballast");
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            // Refused while the cluster may still be whole (4) is expected for a while; anything else is not.
            assert!(
                out.status.success() || out.status.code() == Some(4),
                "{stderr}"
            );
            if out.status.success() {
                Ok(())
            } else {
                Err(stderr)
            }
        },
    )
    .await;
    let restored = wait_for_settled(&cloud, 3, SETTLE).await;
    assert_ne!(restored.cluster_id, original.cluster_id, "a new cluster");
    assert_eq!(keys(&cloud, "kept").await, expected_keys("kept", 100));
    assert!(
        keys(&cloud, "after-backup").await.is_empty(),
        "writes after the backup cannot be in it"
    );
    ballast_cli(&cloud)
        .args(["validate", "cluster", CLUSTER, "--wait", "2m"])
        .assert()
        .success();
}

/// Sets min, max and desired capacity of every control-plane Auto Scaling Group to `n`.
async fn scale_control_plane(cloud: &LocalCloud, n: i32) {
    let groups = cloud
        .autoscaling()
        .describe_auto_scaling_groups()
        .send()
        .await
        .expect("DescribeAutoScalingGroups");
    let names: Vec<String> = groups
        .auto_scaling_groups()
        .iter()
        .filter_map(|g| g.auto_scaling_group_name())
        .filter(|name| name.starts_with("control-plane") && name.ends_with(CLUSTER))
        .map(str::to_string)
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    for name in names {
        cloud
            .autoscaling()
            .update_auto_scaling_group()
            .auto_scaling_group_name(&name)
            .min_size(n)
            .max_size(n)
            .desired_capacity(n)
            .send()
            .await
            .unwrap_or_else(|e| panic!("UpdateAutoScalingGroup {name}: {e:?}"));
    }
}

/// The ids of the cluster's three etcd volumes once none is attached.
async fn wait_for_detached_volumes(cloud: &LocalCloud) -> Vec<String> {
    wait_until(SETTLE, "the three etcd volumes detached", || async move {
        let out = cloud
            .ec2()
            .describe_volumes()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("tag-key")
                    .values("ballast.dev/etcd-member")
                    .build(),
            )
            .send()
            .await
            .expect("DescribeVolumes");
        let volumes: Vec<_> = out
            .volumes()
            .iter()
            .filter(|v| v.state().map(|s| s.as_str()) != Some("deleted"))
            .collect();
        let detached = volumes.iter().all(|v| {
            v.attachments()
                .iter()
                .all(|a| a.state().map(|s| s.as_str()) == Some("detached"))
        });
        if volumes.len() == 3 && detached {
            Ok(volumes
                .iter()
                .filter_map(|v| v.volume_id().map(str::to_string))
                .collect())
        } else {
            Err(format!("{volumes:?}"))
        }
    })
    .await
}
