//! Benchmark of `delete cluster` on the local cloud (IAM enforced): a private-topology cluster of 3
//! control-plane groups and 10 worker nodes, every instance booted, then deleted by the same teardown
//! `ballast delete cluster --yes` runs. Prints, per kind, how many were deleted, when the teardown first asked
//! and when the last was gone (seconds since it began), the rounds and AWS calls it took, and the total.
//!
//! Run: `tools/install-deps` once, then `cargo run -p ballast-e2e --bin delete-bench`.

use std::process::Command;
use std::time::{Duration, Instant};

use ballast::cloud::identity::Identity;
use ballast::cloud::kinds::deletion::Binding;
use ballast::cloud::teardown::{discover, teardown};
use ballast::cloud::{CallLog, Cloud};
use ballast_e2e::localcloud::{bench_binaries, LocalCloud};

const CLUSTER: &str = "bench.example.com";
const STATE: &str = "s3://ballast-state/clusters";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ballast = bench_binaries();
    let cloud = LocalCloud::start();
    cloud.prepare_for_ballast("ballast-state").await;
    let env = cloud.operator_env(STATE);

    let created = Instant::now();
    let status = Command::new(&ballast)
        .env_clear()
        .envs(env.clone())
        .args([
            "create",
            "cluster",
            CLUSTER,
            "--zones",
            "us-west-2a,us-west-2b,us-west-2c",
        ])
        .args(["--topology", "private", "--node-count", "10", "--yes"])
        .status()?;
    if !status.success() {
        return Err(format!("create cluster failed: {status}").into());
    }
    cloud.wait_for_booted(13, Duration::from_secs(300)).await;
    eprintln!(
        "created and booted 13 instances in {:.1} s",
        created.elapsed().as_secs_f64()
    );

    // The teardown in this process, with the operator's environment, so its per-kind timings can be printed.
    for (key, value) in &env {
        std::env::set_var(key, value);
    }
    let calls = CallLog::new();
    let aws = Cloud::connect(&cloud.record.region, calls.clone()).await;
    let found = discover(&aws, CLUSTER, None).await?;
    // The only cluster in this cloud: its id is the one its resources carry.
    let id = found.resources.iter().find_map(|r| match &r.binding {
        Binding::Id(id) => Some(id.clone()),
        _ => None,
    });
    let identity = Identity {
        cluster: CLUSTER.to_string(),
        id,
        adopt_untagged: false,
    };
    let report = teardown(&aws, CLUSTER, &identity, None, &|line: &str| {
        eprintln!("delete: {line}")
    })
    .await?;
    let left = discover(&aws, CLUSTER, None).await?;
    if !left.is_empty() {
        return Err(format!("left after the teardown: {:?}", left.resources).into());
    }

    println!(
        "delete cluster: 3 control-plane + 10 nodes, private topology, {} resources on the local cloud",
        found.resources.len()
    );
    println!("kind | deleted | first delete (s) | all gone (s)");
    for (kind, timing) in &report.kinds {
        let secs =
            |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{:.2}", d.as_secs_f64()));
        println!(
            "{kind} | {} | {} | {}",
            timing.count,
            secs(timing.started),
            secs(timing.done)
        );
    }
    println!(
        "total: {:.2} s in {} rounds; {}",
        report.elapsed.as_secs_f64(),
        report.rounds,
        calls.summary()
    );
    Ok(())
}
