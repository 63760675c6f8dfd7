//! Benchmark of `update cluster` on the AWS emulator: for clusters of 1, 5 and 20 node groups, the time to apply
//! from nothing, the AWS calls that apply makes by operation, and the calls of a no-op update (which must not
//! grow with the number of instances, and makes no mutating call).
//!
//! Run: `tools/install-deps` once, then `cargo run -p ballast-e2e --bin update-bench [RUNS]`. Prints medians.

use std::time::Instant;

use ballast::cloud::engine::{update, UpdateOptions};
use ballast::cloud::model::{cluster_model, StateLocation};
use ballast::cloud::{CallLog, Cloud};
use ballast_state::generate::{generate, ClusterTemplate};
use ballast_state::pki::ClusterSecrets;
use ballast_state::spec::{InstanceGroup, InstanceGroupSpec, Role};
use ballast_store::registry::{Registry, Writer};
use ballast_store::store::{StateStore, StoreOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    let emulator = ballast_e2e::aws::shared_emulator();
    eprintln!("emulator at {}", emulator.endpoint());
    let ec2 = aws_sdk_ec2::Client::new(&ballast_e2e::aws::sdk_config().await);
    let image = ec2
        .register_image()
        .name("bench-image")
        .root_device_name("/dev/xvda")
        .send()
        .await?
        .image_id()
        .unwrap_or_default()
        .to_string();

    println!("node groups | instances | apply (median of {runs}) | apply calls | no-op calls (mutating) | no-op by operation");
    for groups in [1usize, 5, 20] {
        let mut apply_times = Vec::new();
        let mut last = None;
        for run in 0..runs {
            let bucket = ballast_e2e::aws::new_bucket(&format!("bench{groups}r{run}")).await;
            let store =
                StateStore::open(&format!("s3://{bucket}/c"), StoreOptions::default()).await?;
            let registry = Registry::new(store);
            let name = format!("bench{groups}-{run}.example.com");
            let mut config = generate(&ClusterTemplate {
                name: name.clone(),
                zones: vec![
                    "us-west-2a".into(),
                    "us-west-2b".into(),
                    "us-west-2c".into(),
                ],
                image: Some(image.clone()),
                node_count: Some(2),
                ..Default::default()
            })
            .map_err(|e| format!("{e:?}"))?;
            for i in 1..groups {
                let mut spec = InstanceGroupSpec::with_role(Role::Node);
                spec.image = Some(image.clone());
                spec.min_size = Some(2);
                config
                    .instance_groups
                    .push(InstanceGroup::new(&format!("nodes-{i}"), spec));
            }
            let completed = registry
                .create(
                    &config,
                    &ClusterSecrets::generate(&name)?,
                    &Writer::current("bench"),
                )
                .await?;
            let state = StateLocation::from_url(&registry.store().url()).ok_or("not s3")?;
            let model = cluster_model(&completed, &state);

            let apply_calls = CallLog::new();
            let cloud = Cloud::connect(&model.region, apply_calls.clone()).await;
            let start = Instant::now();
            let options = UpdateOptions {
                apply: true,
                prune: false,
            };
            update(
                &cloud,
                registry.store(),
                &model,
                &completed,
                options,
                &|_| {},
            )
            .await?;
            apply_times.push(start.elapsed());

            let noop_calls = CallLog::new();
            let cloud = Cloud::connect(&model.region, noop_calls.clone()).await;
            let report = update(
                &cloud,
                registry.store(),
                &model,
                &completed,
                UpdateOptions::default(),
                &|_| {},
            )
            .await?;
            assert!(
                report.plan.is_empty(),
                "a second update must find nothing to do:\n{}",
                report.plan
            );
            last = Some((apply_calls, noop_calls, 3 + 2 * groups));
        }
        apply_times.sort();
        let median = apply_times[apply_times.len() / 2];
        if let Some((apply_calls, noop_calls, instances)) = last {
            let by_op: Vec<String> = noop_calls
                .snapshot()
                .iter()
                .map(|(op, n)| format!("{op}={n}"))
                .collect();
            println!(
                "{groups:>11} | {instances:>9} | {:>10.2?} | {:>11} | {:>8} ({}) | {}",
                median,
                apply_calls.total(),
                noop_calls.total(),
                noop_calls.mutating().values().sum::<u64>(),
                by_op.join(", ")
            );
            println!("            apply by operation: {}", apply_calls.summary());
        }
    }
    Ok(())
}
