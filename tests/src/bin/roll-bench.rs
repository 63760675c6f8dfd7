//! The rolling update's benchmark on the local cloud (IAM enforced): 3 control-plane groups and 10 nodes at
//! the default Kubernetes release, upgraded to the next minor (`replace`, `update cluster --yes`), then timed:
//! `ballast rolling-update cluster --yes --cloudonly`. Prints the roll's wall time, the control plane's and
//! the nodes' parts (from the roll's own summary), and per instance. Goal: under 60 s (kops took about 8 min on
//! AWS for the same roll, most of it instance boot, which the local cloud does not have).
//!
//! cargo run -p ballast-e2e --bin roll-bench [--release]

use std::process::Command;
use std::time::Instant;

use ballast_e2e::lifecycle::{FROM_VERSION, TO_VERSION};
use ballast_e2e::localcloud::{bench_binaries, LocalCloud};

const NAME: &str = "roll-bench.example.com";
const STATE: &str = "s3://roll-bench/clusters";

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(bench());
}

fn ballast(cloud: &LocalCloud, args: &[&str]) -> String {
    let out = Command::new(bench_binaries())
        .args(args)
        .env_clear()
        .envs(cloud.operator_env(STATE))
        .env("BALLAST_CLUSTER_NAME", NAME)
        .output()
        .expect("running ballast");
    assert!(
        out.status.success(),
        "ballast {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn bench() {
    let cloud = LocalCloud::start();
    cloud.prepare_for_ballast("roll-bench").await;
    cloud.register_upgrade_release_image(TO_VERSION).await;
    let zones = "us-west-2a,us-west-2b,us-west-2c";
    ballast(
        &cloud,
        &[
            "create",
            "cluster",
            "--name",
            NAME,
            "--zones",
            zones,
            "--node-count",
            "10",
            "--kubernetes-version",
            FROM_VERSION,
            "--yes",
        ],
    );
    ballast(&cloud, &["validate", "cluster", "--wait", "10m"]);
    let spec = ballast(&cloud, &["get", "clusters", NAME, "-o", "yaml"]).replace(
        &format!("kubernetesVersion: {FROM_VERSION}"),
        &format!("kubernetesVersion: {TO_VERSION}"),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cluster.yaml");
    std::fs::write(&path, spec).expect("write the spec");
    ballast(&cloud, &["replace", "-f", &path.display().to_string()]);
    ballast(&cloud, &["update", "cluster", "--yes"]);

    let started = Instant::now();
    let summary = ballast(
        &cloud,
        &["rolling-update", "cluster", "--yes", "--cloudonly"],
    );
    let wall = started.elapsed();
    // The roll's summary: ROLLED ROLE REPLACED SECONDS PER-INSTANCE.
    let (mut control_plane, mut nodes) = ((0usize, 0.0f64), (0usize, 0.0f64));
    for line in summary.lines() {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let [_, role, replaced, seconds, _] = cells.as_slice() else {
            continue;
        };
        let (Ok(replaced), Ok(seconds)) = (replaced.parse::<usize>(), seconds.parse::<f64>())
        else {
            continue;
        };
        let part = if *role == "ControlPlane" {
            &mut control_plane
        } else {
            &mut nodes
        };
        part.0 += replaced;
        part.1 += seconds;
    }
    assert_eq!(
        control_plane.0 + nodes.0,
        13,
        "every instance replaced:\n{summary}"
    );
    ballast(&cloud, &["validate", "cluster", "--wait", "2m"]);
    println!("{summary}");
    println!(
        "rolling update of 3 control-plane + 10 node instances ({FROM_VERSION} -> {TO_VERSION}), local cloud, --cloudonly:"
    );
    println!(
        "  wall time      {:>7.1} s (goal: under 60 s)",
        wall.as_secs_f64()
    );
    println!(
        "  control plane  {:>7.1} s for {} instances ({:.1} s each)",
        control_plane.1,
        control_plane.0,
        control_plane.1 / control_plane.0.max(1) as f64
    );
    println!(
        "  nodes          {:>7.1} s for {} instances ({:.1} s each)",
        nodes.1,
        nodes.0,
        nodes.1 / nodes.0.max(1) as f64
    );
    println!(
        "  per instance   {:>7.1} s (wall time / 13)",
        wall.as_secs_f64() / 13.0
    );
}
