//! A cluster whose instances are machines (`localcloud run --instances machines`): every instance boots the
//! local cloud's image (the AMI recipe's bake of what was built here) on its VPC's own network, nodeup is started
//! by the image's unit and finds IMDS and the AWS API on its link-local addresses, etcd's volumes are block
//! devices, and etcd forms over the VPC's addresses. A control-plane instance's power cut heals on its
//! replacement with the member's volume attached to it; after the cloud goes down nothing of it is left.
//!
//! `validate`'s Kubernetes API check is the one left failing, by design of this test: the API server is the
//! real-Kubernetes issue's (and this host's cgroup v1 stops the 1.36 kubelet: docs/local-cloud.md). What the
//! test holds of it is that `ballast` reached the API's load balancer through the cloud's hosts file (a loopback
//! address the cloud forwards into the VPC), never through DNS.
//!
//! Needs root, the Go builds and the emulator (`tools/install-deps`); fails, never skips.

use std::collections::BTreeMap;
use std::time::Duration;

use ballast_e2e::cluster_etcd::is_control_plane;
use ballast_e2e::image::require_root;
use ballast_e2e::localcloud::{LocalCloud, MachineOptions, Options, Termination};
use ballast_e2e::operator::{create_ha_cluster, validate_checks};
use ballast_e2e::wait::wait_until;

const CLUSTER: &str = "machines.example.com";
/// A machine boots in seconds; five on two cores, each with systemd, containerd and nodeup, take longer.
const SETTLE: Duration = Duration::from_secs(300);
/// The check this issue does not make pass (see the module docs).
const API_CHECK: &str = "kubernetes API";

fn machine_cloud() -> LocalCloud {
    require_root();
    LocalCloud::start_with(Options {
        machines: Some(MachineOptions::default_release()),
        ..Options::default()
    })
}

fn checks(cloud: &LocalCloud) -> BTreeMap<String, (bool, String)> {
    validate_checks(cloud, CLUSTER)
}

/// Waits until every check but the API's passes, over `instances` nodes; returns the checks.
async fn wait_valid_but_api(
    cloud: &LocalCloud,
    instances: usize,
) -> BTreeMap<String, (bool, String)> {
    wait_until(SETTLE, "every check but the API's to pass", || async move {
        let checks = checks(cloud);
        let nodes = checks.keys().filter(|n| n.starts_with("node ")).count();
        let failing: Vec<String> = checks
            .iter()
            .filter(|(name, (ok, _))| !ok && name.as_str() != API_CHECK)
            .map(|(name, (_, reason))| format!("{name}: {reason}"))
            .collect();
        if failing.is_empty() && nodes == instances && checks.contains_key("etcd") {
            Ok(checks)
        } else {
            Err(format!("{nodes} nodes; failing: {failing:?}"))
        }
    })
    .await
}

/// The etcd member volumes attached to `instance` (the `ballast.dev/etcd-member` tag), by id.
async fn member_volumes_of(cloud: &LocalCloud, instance: &str) -> Vec<String> {
    let out = cloud
        .ec2()
        .describe_volumes()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("attachment.instance-id")
                .values(instance)
                .build(),
        )
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag-key")
                .values(ballast_state::etcd_volume::ETCD_MEMBER_TAG)
                .build(),
        )
        .send()
        .await
        .expect("DescribeVolumes");
    let mut ids: Vec<String> = out
        .volumes()
        .iter()
        .filter_map(|v| v.volume_id().map(str::to_string))
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ha_cluster_of_machines_forms_etcd_and_heals_a_power_cut() {
    let mut cloud = machine_cloud();
    create_ha_cluster(&cloud, CLUSTER, 2).await;
    let formed = wait_valid_but_api(&cloud, 5).await;
    assert!(
        formed["etcd"].1.contains("3 voting members of 3"),
        "{formed:?}"
    );
    // The API's load balancer was dialed at the host address the cloud's hosts file gives its name.
    let hosts = std::fs::read_to_string(localcloud::balancers::hosts_file(&cloud.state))
        .expect("the cloud's hosts file");
    let address = hosts
        .lines()
        .find(|l| l.contains(".elb.amazonaws.com"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no load balancer in the hosts file:\n{hosts}"))
        .to_string();
    assert!(address.starts_with("127."), "{hosts}");
    let api = &formed[API_CHECK].1;
    assert!(api.contains(&format!("https://{address}:443")), "{api}");

    // Every instance is a machine on the VPC's addresses (Ballast's default CIDR: the cloud's network is its own).
    let on = cloud.powered_on();
    assert_eq!(on.len(), 5, "{on:#?}");
    for r in &on {
        assert!(r.machine.is_some(), "{} is no machine", r.instance_id);
        assert!(
            r.private_ip.starts_with("172.20."),
            "{} at {}",
            r.instance_id,
            r.private_ip
        );
    }

    // `localcloud status` shows each machine's processes and nodeup's unit; `logs` its journal.
    let (ok, status, err) = cloud.cli(&["status", "-o", "json"]);
    assert!(ok, "{err}");
    let status: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    for i in status["instances"].as_array().expect("instances") {
        assert_eq!(i["nodeup_unit"], "active", "{i}");
        assert!(
            i["processes"].as_array().is_some_and(|p| p.len() > 3),
            "a machine runs systemd, journald, containerd and more: {i}"
        );
    }
    let (ok, journal, err) = cloud.cli(&["logs", &on[0].instance_id]);
    assert!(ok, "{err}");
    assert!(journal.contains("nodeup starting"), "{journal}");
    // `exec` enters a machine: its own hostname, and a failing command's status comes back.
    let (ok, hostname, err) = cloud.cli(&["exec", &on[0].instance_id, "--", "hostname"]);
    assert!(ok, "{err}");
    assert!(
        hostname
            .trim()
            .starts_with(&format!("ip-{}", on[0].private_ip.replace('.', "-"))),
        "{} in {}: {hostname}",
        on[0].instance_id,
        on[0].private_ip
    );
    let (ok, _, _) = cloud.cli(&["exec", &on[0].instance_id, "--", "test", "-e", "/nothing"]);
    assert!(!ok, "a failing command's status is exec's");

    // A control-plane instance loses power; its group replaces it and the member comes back on its volume.
    let victim = on
        .iter()
        .find(|r| is_control_plane(r))
        .expect("a control-plane instance")
        .clone();
    let held = member_volumes_of(&cloud, &victim.instance_id).await;
    assert!(
        !held.is_empty(),
        "{} holds no member volume",
        victim.instance_id
    );
    cloud
        .terminate(
            std::slice::from_ref(&victim.instance_id),
            Termination::PowerCut,
        )
        .await;
    let replacement = cloud
        .wait_for("the victim's replacement", SETTLE, |c| {
            c.powered_on()
                .into_iter()
                .find(|r| {
                    r.autoscaling_group == victim.autoscaling_group
                        && r.instance_id != victim.instance_id
                })
                .map(|r| r.instance_id)
        })
        .await;
    let healed = wait_valid_but_api(&cloud, 5).await;
    assert!(
        healed["etcd"].1.contains("3 voting members of 3 (epoch 1)"),
        "a new epoch means the member's data was not found: {healed:?}"
    );
    assert!(
        healed.contains_key(&format!(
            "node {replacement} ({})",
            victim
                .autoscaling_group
                .as_deref()
                .and_then(|g| g.split('.').next())
                .unwrap_or_default()
        )),
        "{healed:?}"
    );
    let moved = member_volumes_of(&cloud, &replacement).await;
    for volume in &held {
        assert!(
            moved.contains(volume),
            "{volume} of {} is not attached to its replacement {replacement} ({moved:?})",
            victim.instance_id
        );
    }

    let left = cloud.shutdown();
    assert!(left.is_empty(), "left after the cloud went down: {left:?}");
    let machines = cloud.record.machines.clone().expect("a machines record");
    let left = localcloud::machines::leftovers(
        &machines,
        &cloud.state.machines_dir(),
        &cloud.state.volumes_dir(),
    );
    assert!(left.is_empty(), "left after the cloud went down: {left:?}");
}
