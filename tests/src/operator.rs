//! What an operator runs against a local cloud, written once for every test: the `ballast` command with the
//! cloud's keys, endpoint and VPC CIDR, and the highly available cluster most etcd tests start from.

use assert_cmd::Command;

use crate::localcloud::LocalCloud;

/// The state bucket the tests create (`LocalCloud::prepare_for_ballast`), and the store in it.
pub const STATE_BUCKET: &str = "ballast-state";
pub const STATE: &str = "s3://ballast-state/clusters";
/// One control-plane group per zone.
pub const ZONES: &str = "us-west-2a,us-west-2b,us-west-2c";

/// `ballast` as this cloud's operator, with [`STATE`] as the state store and nothing else from the test's
/// environment. Add `.env("BALLAST_CLUSTER_NAME", ..)` or `.env("BALLAST_STATE", ..)` for another cluster or
/// store; a later `.timeout(..)` replaces the bound.
pub fn ballast_cli(cloud: &LocalCloud) -> Command {
    cloud.ballast_command(STATE)
}

/// [`ballast_cli`] acting on `cluster` (`BALLAST_CLUSTER_NAME`), for commands given no cluster name.
pub fn ballast_cli_on(cloud: &LocalCloud, cluster: &str) -> Command {
    let mut cmd = ballast_cli(cloud);
    cmd.env("BALLAST_CLUSTER_NAME", cluster);
    cmd
}

/// Prepares the cloud for Ballast ([`STATE_BUCKET`] and the release image) and creates `cluster` with `--yes`:
/// three control-plane groups, one per zone of [`ZONES`], and a node group of `nodes` instances (none when 0).
/// Panics with ballast's output when the create fails.
pub async fn create_ha_cluster(cloud: &LocalCloud, cluster: &str, nodes: u32) {
    cloud.prepare_for_ballast(STATE_BUCKET).await;
    ballast_cli(cloud)
        .args(["create", "cluster", "--name", cluster, "--zones", ZONES])
        .args(["--node-count", &nodes.to_string(), "--yes"])
        .assert()
        .success();
}

/// Turns `spec.terminationHandling` on in `cluster`'s stored spec (`replace -f` of it, the file written in `dir`):
/// `update cluster` then makes the queue, its rules, the `ballast-termination` hook on every group and the
/// handler on the control plane. Panics with ballast's output when a step fails.
pub fn enable_termination_handling(cloud: &LocalCloud, cluster: &str, dir: &std::path::Path) {
    let stored = ballast_cli_on(cloud, cluster)
        .args(["get", "clusters", cluster, "-o", "yaml"])
        .output()
        .expect("get clusters");
    let yaml = String::from_utf8_lossy(&stored.stdout).replacen(
        "\nspec:\n",
        "\nspec:\n  terminationHandling:\n    enabled: true\n",
        1,
    );
    assert!(yaml.contains("terminationHandling"), "{yaml}");
    let path = dir.join("termination-handling.yaml");
    std::fs::write(&path, yaml).expect("write the spec");
    ballast_cli_on(cloud, cluster)
        .args(["replace", "-f"])
        .arg(&path)
        .assert()
        .success();
}

/// `validate cluster CLUSTER -o json` once: each check's name -> (ok, reason). Empty when validate printed no
/// JSON (its stderr is then the story; the caller's wait names what it saw).
pub fn validate_checks(
    cloud: &LocalCloud,
    cluster: &str,
) -> std::collections::BTreeMap<String, (bool, String)> {
    let out = ballast_cli(cloud)
        .args(["validate", "cluster", cluster, "-o", "json"])
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .expect("ballast validate");
    let parsed: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    parsed["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_string(),
                (
                    c["ok"] == true,
                    c["reason"].as_str().unwrap_or_default().to_string(),
                ),
            )
        })
        .collect()
}
