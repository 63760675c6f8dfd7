//! etcd on its own encrypted EBS volume per member (issue 17), on the local cloud with IAM enforced, one cluster
//! of three control-plane groups for all of it, driven as an operator would (`ballast create cluster --yes`,
//! EC2 TerminateInstances, `ballast delete cluster --yes`):
//! - one volume per member: encrypted, gp3 and 20 GiB by default, tagged with the cluster, the member and the
//!   group, in the group's zone, attached to the group's instance, with etcd's data on it;
//! - the control-plane role cannot attach another cluster's volume (the emulator's IAM answers AccessDenied);
//! - the leader's instance terminated the default (graceful) way: nodeup exits by itself after handing etcd's
//!   leadership to a follower (which takes over by the transfer, not an election timeout); its replacement
//!   re-attaches the member's volume: same member ID, every key, the same peer URL (by name, now resolving to
//!   the replacement; never remove/add), the volume not formatted again;
//! - `delete cluster --yes` deletes the volumes with the cluster.
//!
//! The local cloud's volumes are directories bind-mounted into instance roots (`docs/local-cloud.md`): what is
//! checked on them here is what nodeup and etcd see, not block devices.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use aws_credential_types::provider::ProvideCredentials;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification, Volume};
use ballast_e2e::cluster_etcd::{connect, control_plane, leader_instance, wait_for_settled};
use ballast_e2e::localcloud::{LocalCloud, Termination};
use ballast_e2e::operator::{ballast_cli, create_ha_cluster};
use etcd_client::GetOptions;
use localcloud::state::InstanceRecord;

const CLUSTER: &str = "volumes.example.com";
const OTHER_CLUSTER: &str = "other.example.com";
const MEMBER_TAG: &str = "ballast.dev/etcd-member";
const GROUP_TAG: &str = "ballast.dev/instance-group";
/// Generous: a settled cluster is usually back within seconds; a busy 2-core CI machine is slower.
const SETTLE: Duration = Duration::from_secs(180);
/// Written onto the victim's volume before its instance dies: still there after the replacement mounted it, or
/// the volume was formatted (or swapped).
const SENTINEL: &str = "sentinel-written-by-the-test";

fn ownership_tag(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}

fn tags_of(v: &Volume) -> BTreeMap<String, String> {
    v.tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
        .collect()
}

/// The cluster's etcd volumes not deleted, by member. Listed without filters and matched here, so an emulator
/// that ignored a filter could not hide one.
async fn etcd_volumes(cloud: &LocalCloud) -> BTreeMap<String, Volume> {
    let out = cloud
        .ec2()
        .describe_volumes()
        .send()
        .await
        .expect("DescribeVolumes");
    let mut by_member = BTreeMap::new();
    for v in out.volumes() {
        let tags = tags_of(v);
        if tags.get(&ownership_tag(CLUSTER)).map(String::as_str) != Some("owned")
            || v.state().map(|s| s.as_str()) == Some("deleted")
        {
            continue;
        }
        let member = tags
            .get(MEMBER_TAG)
            .unwrap_or_else(|| panic!("an owned volume without {MEMBER_TAG}: {v:?}"))
            .clone();
        assert!(
            by_member.insert(member.clone(), v.clone()).is_none(),
            "two volumes for member {member}"
        );
    }
    by_member
}

fn volume_dir(cloud: &LocalCloud, volume_id: &str) -> PathBuf {
    cloud.dir().join("volumes").join(volume_id)
}

/// The instance a volume is attached to (`attached` state), if any.
fn attached_to(v: &Volume) -> Option<String> {
    v.attachments()
        .iter()
        .find(|a| a.state().map(|s| s.as_str()) == Some("attached"))
        .and_then(|a| a.instance_id().map(str::to_string))
}

/// etcd's member list: id -> (name, peer URLs).
async fn members(cloud: &LocalCloud) -> BTreeMap<u64, (String, Vec<String>)> {
    let mut c = connect(cloud).await.expect("an etcd client");
    let list = c.member_list().await.expect("member list");
    list.members()
        .iter()
        .map(|m| (m.id(), (m.name().to_string(), m.peer_urls().to_vec())))
        .collect()
}

async fn write_keys(cloud: &LocalCloud, prefix: &str, n: usize) {
    let mut c = connect(cloud).await.expect("an etcd client");
    for i in 0..n {
        c.put(format!("{prefix}/{i:05}"), format!("value-{i}"), None)
            .await
            .unwrap_or_else(|e| panic!("put {prefix}/{i}: {e}"));
    }
}

async fn keys(cloud: &LocalCloud, prefix: &str) -> BTreeSet<String> {
    let mut c = connect(cloud).await.expect("an etcd client");
    let got = c
        .get(format!("{prefix}/"), Some(GetOptions::new().with_prefix()))
        .await
        .unwrap_or_else(|e| panic!("get {prefix}/: {e}"));
    got.kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

/// An EC2 client with the credentials the instance's own IMDS hands out: its instance role's.
async fn ec2_as_instance(cloud: &LocalCloud, record: &InstanceRecord) -> aws_sdk_ec2::Client {
    let imds = aws_config::imds::Client::builder()
        .endpoint(&record.imds_endpoint)
        .expect("an IMDS endpoint")
        .build();
    let creds = aws_config::imds::credentials::ImdsCredentialsProvider::builder()
        .imds_client(imds)
        .build()
        .provide_credentials()
        .await
        .expect("the control-plane role's credentials from its IMDS");
    let config = aws_sdk_ec2::config::Builder::from(&cloud.sdk_config())
        .credentials_provider(creds)
        .build();
    aws_sdk_ec2::Client::from_conf(config)
}

fn nodeup_log(record: &InstanceRecord) -> String {
    std::fs::read_to_string(&record.log).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_member_keeps_its_data_on_its_own_encrypted_volume() {
    let cloud = LocalCloud::start();
    create_ha_cluster(&cloud, CLUSTER, 0).await;
    wait_for_settled(&cloud, 3, SETTLE).await;

    // One volume per member, as the spec's defaults say, in its group's zone, attached to its group's instance,
    // with etcd's data on it.
    let volumes = etcd_volumes(&cloud).await;
    assert_eq!(volumes.len(), 3, "{volumes:#?}");
    let live = control_plane(&cloud);
    let mut volume_of_instance = BTreeMap::new();
    for (member, v) in &volumes {
        let tags = tags_of(v);
        let group = tags.get(GROUP_TAG).expect("a group tag").clone();
        assert!(group.starts_with("control-plane-"), "{tags:?}");
        assert_eq!(
            tags.get("ballast.dev/cluster").map(String::as_str),
            Some(CLUSTER)
        );
        assert_eq!(
            tags.get("Name").map(String::as_str),
            Some(format!("{member}.etcd.{CLUSTER}").as_str())
        );
        assert_eq!(v.encrypted(), Some(true), "{member}: not encrypted");
        assert_eq!(v.volume_type().map(|t| t.as_str()), Some("gp3"));
        assert_eq!(v.size(), Some(20));
        let zone = v.availability_zone().unwrap_or_default();
        assert!(
            group.ends_with(zone),
            "{member}: group {group}, zone {zone}"
        );
        let holder = attached_to(v).unwrap_or_else(|| panic!("{member}'s volume is not attached"));
        let record = live
            .iter()
            .find(|r| r.instance_id == holder)
            .unwrap_or_else(|| {
                panic!("{member}'s volume is attached to {holder}, not a live control plane")
            });
        assert_eq!(
            record.autoscaling_group.as_deref(),
            Some(format!("{group}.{CLUSTER}").as_str())
        );
        assert_eq!(record.availability_zone, zone);
        let dir = volume_dir(&cloud, v.volume_id().unwrap_or_default());
        assert!(
            dir.join("data/member/wal").is_dir(),
            "etcd's data is not on {member}'s volume ({})",
            dir.display()
        );
        volume_of_instance.insert(holder, v.volume_id().unwrap_or_default().to_string());
    }

    // Another cluster's volume in this zone: the control-plane role may not attach it, not even to itself.
    let record = &live[0];
    let foreign = cloud
        .ec2()
        .create_volume()
        .availability_zone(&record.availability_zone)
        .size(3)
        .encrypted(true)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Volume)
                .tags(
                    Tag::builder()
                        .key(ownership_tag(OTHER_CLUSTER))
                        .value("owned")
                        .build(),
                )
                .tags(
                    Tag::builder()
                        .key("ballast.dev/cluster")
                        .value(OTHER_CLUSTER)
                        .build(),
                )
                .tags(Tag::builder().key(MEMBER_TAG).value("a").build())
                .build(),
        )
        .send()
        .await
        .expect("CreateVolume (admin)");
    let foreign_id = foreign.volume_id().expect("a volume id").to_string();
    let as_control_plane = ec2_as_instance(&cloud, record).await;
    // The role's credentials work (a read it is allowed): the refusal below is IAM's, not broken credentials.
    as_control_plane
        .describe_volumes()
        .volume_ids(&foreign_id)
        .send()
        .await
        .expect("DescribeVolumes with the control-plane role");
    let refused = as_control_plane
        .attach_volume()
        .volume_id(&foreign_id)
        .instance_id(&record.instance_id)
        .device("/dev/sdg")
        .send()
        .await
        .expect_err("the control-plane role attached another cluster's volume");
    assert_eq!(refused.code(), Some("AccessDenied"), "{refused:?}");
    let after = cloud
        .ec2()
        .describe_volumes()
        .volume_ids(&foreign_id)
        .send()
        .await
        .expect("DescribeVolumes");
    assert!(
        after.volumes().iter().all(|v| v.attachments().is_empty()),
        "{after:?}"
    );
    cloud
        .ec2()
        .delete_volume()
        .volume_id(&foreign_id)
        .send()
        .await
        .expect("DeleteVolume (admin)");

    // The leader's instance terminated, EC2's default way (a graceful OS shutdown): nodeup gets SIGTERM, hands
    // etcd's leadership to a follower and exits on its own; its replacement re-attaches the volume once the old
    // instance is off, and the member keeps its ID and data at the same peer URL, by name (no remove, no add, no
    // member update).
    write_keys(&cloud, "before", 200).await;
    let before = members(&cloud).await;
    let leader = leader_instance(&cloud).await.expect("a leader");
    let victim = live
        .iter()
        .find(|r| r.instance_id == leader)
        .expect("the leader's record")
        .clone();
    let survivors: Vec<InstanceRecord> = live
        .iter()
        .filter(|r| r.instance_id != leader)
        .cloned()
        .collect();
    // What the survivors' etcds had logged before (their logs are on their volumes).
    let etcd_logged_before: BTreeMap<String, usize> = survivors
        .iter()
        .map(|r| {
            let log = volume_dir(&cloud, &volume_of_instance[&r.instance_id]).join("etcd.log");
            (
                r.instance_id.clone(),
                std::fs::read_to_string(log).unwrap_or_default().len(),
            )
        })
        .collect();
    let victim_volume = volume_of_instance[&victim.instance_id].clone();
    let victim_member = before
        .iter()
        .find(|(_, (name, _))| *name == victim.instance_id)
        .map(|(id, _)| *id)
        .expect("the victim's member");
    // What the survivors had logged before: bootstrap joins learners; after the termination nothing may be
    // removed, added or wiped.
    let logged_before: BTreeMap<String, usize> = live
        .iter()
        .map(|r| (r.instance_id.clone(), nodeup_log(r).len()))
        .collect();
    std::fs::write(volume_dir(&cloud, &victim_volume).join(SENTINEL), "kept")
        .expect("writing the sentinel onto the victim's volume");
    let started = Instant::now();
    cloud
        .terminate(
            std::slice::from_ref(&victim.instance_id),
            Termination::Graceful,
        )
        .await;
    let settled = loop {
        let m = wait_for_settled(&cloud, 3, SETTLE).await;
        if !m.voters.contains(&victim.instance_id) {
            break m;
        }
        assert!(
            started.elapsed() < SETTLE,
            "{} still a member",
            victim.instance_id
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "the leader's instance terminated: 3 voting members again after {:?}",
        started.elapsed()
    );
    // Graceful: nodeup got SIGTERM and exited by itself (not killed), after handing leadership over; a survivor
    // took over by that transfer (etcd's MsgTimeoutNow), not after an election timeout.
    let old = cloud.instance(&victim.instance_id);
    assert_eq!(old.shutdown.as_deref(), Some("graceful"), "{old:?}");
    assert_eq!(
        old.nodeup_exit.as_deref(),
        Some("exit status: 0"),
        "{old:?}"
    );
    let log = nodeup_log(&old);
    assert!(
        log.contains("etcd leadership handed over"),
        "the leader's nodeup did not hand leadership over:\n{log}"
    );
    let transferred = survivors.iter().any(|r| {
        let path = volume_dir(&cloud, &volume_of_instance[&r.instance_id]).join("etcd.log");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.get(etcd_logged_before[&r.instance_id]..)
            .unwrap_or_default()
            .contains("received MsgTimeoutNow")
    });
    assert!(
        transferred,
        "no survivor took leadership over by the leader's transfer"
    );
    let after = members(&cloud).await;
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "member IDs changed (a remove/add): before {before:?}, after {after:?}"
    );
    let replacement = control_plane(&cloud)
        .into_iter()
        .find(|r| !before.values().any(|(name, _)| *name == r.instance_id))
        .expect("the replacement instance");
    assert!(settled.voters.contains(&replacement.instance_id));
    let (name, peer_urls) = &after[&victim_member];
    assert_eq!(name, &replacement.instance_id);
    // Peer URLs by name: the member's URL names its volume's member, never an instance, so it did not change;
    // the name now resolves (the replacement's own /etc/hosts) to the replacement.
    let victim_member_name = volumes
        .iter()
        .find(|(_, v)| v.volume_id() == Some(victim_volume.as_str()))
        .map(|(m, _)| m.clone())
        .expect("the victim volume's member");
    let peer_name = format!("etcd-{victim_member_name}.internal.{CLUSTER}");
    assert_eq!(peer_urls, &vec![format!("https://{peer_name}:2380")]);
    assert_eq!(&before[&victim_member].1, peer_urls, "the peer URL changed");
    let hosts = std::fs::read_to_string(replacement.root.join("etc/hosts"))
        .expect("the replacement's /etc/hosts");
    assert!(
        hosts
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [replacement.private_ip.as_str(), &peer_name]),
        "{peer_name} does not resolve to the replacement {} in its /etc/hosts:\n{hosts}",
        replacement.private_ip
    );
    let volumes = etcd_volumes(&cloud).await;
    let moved = volumes
        .values()
        .find(|v| v.volume_id() == Some(victim_volume.as_str()))
        .expect("the victim's volume still exists");
    assert_eq!(
        attached_to(moved).as_deref(),
        Some(replacement.instance_id.as_str())
    );
    assert_eq!(
        keys(&cloud, "before").await,
        (0..200)
            .map(|i| format!("before/{i:05}"))
            .collect::<BTreeSet<_>>()
    );
    // Not formatted: the sentinel is still there, and nodeup says so.
    assert!(
        volume_dir(&cloud, &victim_volume).join(SENTINEL).is_file(),
        "the re-attached volume lost the sentinel: formatted?"
    );
    let log = nodeup_log(&replacement);
    assert!(
        log.contains("etcd's volume is mounted") && log.contains("formatted=false"),
        "nodeup's log does not say it mounted the volume unformatted:\n{log}"
    );
    assert!(
        !log.contains(&format!("moving member {victim_member:x}")),
        "a member listed by name needs no peer URL update:\n{log}"
    );
    for r in control_plane(&cloud) {
        let log = nodeup_log(&r);
        let since = logged_before.get(&r.instance_id).copied().unwrap_or(0);
        let log = log.get(since..).unwrap_or_default();
        assert!(
            !log.contains("removing member")
                && !log.contains("adding this instance as a learner")
                && !log.contains("wiping the data dir"),
            "{}: a member was removed, added or wiped:\n{log}",
            r.instance_id
        );
    }

    // Delete: the volumes go with the cluster.
    let preview = ballast_cli(&cloud)
        .args(["delete", "cluster", CLUSTER])
        .assert()
        .success();
    let preview = String::from_utf8_lossy(&preview.get_output().stdout).into_owned();
    assert!(preview.contains("Volume (3)"), "{preview}");
    ballast_cli(&cloud)
        .args(["delete", "cluster", CLUSTER, "--yes"])
        .assert()
        .success();
    let left = etcd_volumes(&cloud).await;
    assert!(left.is_empty(), "volumes left after delete: {left:#?}");
    let all = cloud
        .ec2()
        .describe_volumes()
        .filters(Filter::builder().name("tag-key").values(MEMBER_TAG).build())
        .send()
        .await
        .expect("DescribeVolumes");
    let live_volumes: Vec<_> = all
        .volumes()
        .iter()
        .filter(|v| v.state().map(|s| s.as_str()) != Some("deleted"))
        .collect();
    assert!(live_volumes.is_empty(), "{live_volumes:#?}");
}
