//! nodeup's benchmark on the local cloud: `ballast create cluster --yes` (one zone: one control-plane node and
//! the workers), then, for each instance, nodeup's own time from its start to configured (from its boot report)
//! and its peak RSS (VmHWM of the still-running nodeup). Target: under 0.5 s and under 30 MB.
//!
//! cargo run -p ballast-e2e --bin nodeup-bench [--release]

use std::process::Command;
use std::time::{Duration, Instant};

use ballast_e2e::localcloud::{bench_binaries, binaries, LocalCloud};

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(bench());
}

async fn bench() {
    let ballast = bench_binaries();
    let cloud = LocalCloud::start();
    cloud.prepare_for_ballast("nodeup-bench").await;
    let name = "bench.example.com";
    let out = Command::new(&ballast)
        .args([
            "create",
            "cluster",
            "--name",
            name,
            "--zones",
            "us-west-2a",
            "--yes",
        ])
        .env_clear()
        .envs(cloud.operator_env("s3://nodeup-bench/clusters"))
        .output()
        .expect("ballast");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut done = std::collections::BTreeSet::new();
    println!(
        "nodeup ({}), start to configured and peak RSS, per instance:",
        binaries().nodeup.display()
    );
    loop {
        let instances = cloud.powered_on();
        for record in &instances {
            if done.contains(&record.instance_id) {
                continue;
            }
            // Found by listing: its key is named by its writer (`<role-id>:<instance-id>`).
            let Some(stored) = cloud
                .stored_report("nodeup-bench", "clusters/", name, &record.instance_id)
                .await
            else {
                continue;
            };
            let report = stored.report;
            let hwm = record
                .nodeup
                .and_then(|p| std::fs::read_to_string(format!("/proc/{}/status", p.pid)).ok())
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("VmHWM:"))
                        .map(|v| v.trim().to_string())
                })
                .unwrap_or_else(|| "?".into());
            println!(
                "  {:<14} {:<24} {:?}: {} ms to configured, peak RSS {hwm}; steps {:?}",
                format!("{:?}", report.role.expect("role")),
                report.instance_group.clone().unwrap_or_default(),
                report.phase,
                report.total_millis,
                report
                    .steps
                    .iter()
                    .map(|s| (s.step, s.millis))
                    .collect::<Vec<_>>()
            );
            done.insert(record.instance_id.clone());
        }
        if !instances.is_empty() && done.len() == instances.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every instance reported within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
