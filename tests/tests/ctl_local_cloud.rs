//! `ballast create cluster --yes` on the local cloud, with IAM enforced: the Auto Scaling Groups launch their
//! instances, and the local cloud boots each one (its nodeup reads the boot config Ballast put in user-data).

use std::collections::BTreeMap;
use std::time::Duration;

use ballast_e2e::localcloud::LocalCloud;
use ballast_e2e::operator::{ballast_cli, STATE, STATE_BUCKET};
use ballast_state::node::BootConfig;

#[tokio::test(flavor = "multi_thread")]
async fn create_cluster_yes_boots_every_instance_on_the_local_cloud() {
    let cloud = LocalCloud::start();
    cloud.prepare_for_ballast(STATE_BUCKET).await;

    ballast_cli(&cloud)
        .args([
            "create",
            "cluster",
            "--name",
            "local.example.com",
            "--zones",
            "us-west-2a,us-west-2b,us-west-2c",
            "--yes",
        ])
        .assert()
        .success();

    let booted = cloud.wait_for_booted(6, Duration::from_secs(60)).await;
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (record, identity) in &booted {
        let network = cloud.record.network_cidr.trim_end_matches(".0.0/16");
        assert!(
            record.private_ip.starts_with(&format!("{network}.")),
            "{record:?} is not in {}",
            cloud.record.network_cidr
        );
        let boot =
            BootConfig::from_user_data(&identity.user_data).expect("user-data is a boot config");
        assert_eq!(boot.cluster_name, "local.example.com");
        assert_eq!(boot.state_store, STATE);
        assert_eq!(
            record.autoscaling_group.as_deref(),
            Some(format!("{}.local.example.com", boot.instance_group).as_str())
        );
        groups
            .entry(boot.instance_group)
            .or_default()
            .push(record.availability_zone.clone());
    }
    assert_eq!(groups["nodes"].len(), 3);
    for zone in ["us-west-2a", "us-west-2b", "us-west-2c"] {
        assert_eq!(
            groups[&format!("control-plane-{zone}")],
            vec![zone.to_string()]
        );
    }

    // The instance role is the one Ballast made for the group, with real credentials from the instance's IMDS.
    for (_, identity) in &booted {
        assert!(
            identity
                .credentials
                .access_key_id
                .as_deref()
                .is_some_and(|k| k.starts_with("ASIA")),
            "{:?}",
            identity.credentials
        );
    }

    // Nothing left to do.
    let out = ballast_cli(&cloud)
        .args(["update", "cluster", "local.example.com", "--stats"])
        .assert()
        .success();
    assert_eq!(
        String::from_utf8_lossy(&out.get_output().stdout),
        "No changes: the cluster's resources match its spec.\n"
    );
}
