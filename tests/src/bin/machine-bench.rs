//! The machine mode's benchmark (`localcloud run --instances machines`): a cluster of one control-plane group
//! and a node group made with `ballast create cluster --yes`, then N worker boots, one at a time, each the node
//! group's desired capacity raised by one. For each boot it prints the time from the SetDesiredCapacity call to
//! the runner's boot of the machine (`booted_at`) and to the new instance's nodeup boot report in the state
//! store; then each machine's memory once the cluster is idle (its cgroup's `memory.usage_in_bytes` on cgroup v1,
//! `memory.current` on v2: page cache included, and the sum of its processes' RSS).
//!
//! cargo run -p ballast-e2e --bin machine-bench [--release] [-- BOOTS]   (BOOTS 1..=20, default 3; needs root
//! and the Go builds, as the machine tests do)

use std::time::{Duration, Instant};

use ballast_e2e::localcloud::{LocalCloud, MachineOptions, Options};
use ballast_e2e::operator::{ballast_cli, STATE_BUCKET};

const CLUSTER: &str = "bench.machines.example.com";
const BOOT_TIMEOUT: Duration = Duration::from_secs(300);

fn main() {
    let boots = match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        None => 3,
        Some(Ok(n)) if (1..=20).contains(&n) => n,
        Some(_) => {
            eprintln!("machine-bench: BOOTS must be a number in 1..=20");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| {
            eprintln!("machine-bench: starting the async runtime: {e}");
            std::process::exit(1);
        });
    if let Err(e) = runtime.block_on(bench(boots)) {
        eprintln!("machine-bench: {e}");
        std::process::exit(1);
    }
}

async fn bench(boots: usize) -> Result<(), String> {
    ballast_e2e::image::require_root();
    let cloud = LocalCloud::start_with(Options {
        machines: Some(MachineOptions::default_release()),
        ..Options::default()
    });
    cloud.prepare_for_ballast(STATE_BUCKET).await;
    let created = ballast_cli(&cloud)
        .args([
            "create",
            "cluster",
            "--name",
            CLUSTER,
            "--zones",
            "us-west-2a",
        ])
        .args(["--node-count", "0", "--yes"])
        .timeout(Duration::from_secs(600))
        .output()
        .map_err(|e| format!("running ballast: {e}"))?;
    if !created.status.success() {
        return Err(format!(
            "create cluster: {}",
            String::from_utf8_lossy(&created.stderr)
        ));
    }
    let group = format!("nodes.{CLUSTER}");
    println!("boot  to-booted  to-report");
    let mut to_report = Vec::new();
    for n in 1..=boots {
        let before: Vec<String> = cloud
            .instances()
            .into_iter()
            .map(|r| r.instance_id)
            .collect();
        let asked = Instant::now();
        let asked_at = time::OffsetDateTime::now_utc();
        cloud
            .autoscaling()
            .set_desired_capacity()
            .auto_scaling_group_name(&group)
            .desired_capacity(i32::try_from(n).map_err(|e| e.to_string())?)
            .send()
            .await
            .map_err(|e| format!("SetDesiredCapacity: {e:?}"))?;
        let record = loop {
            if let Some(r) = cloud.instances().into_iter().find(|r| {
                !before.contains(&r.instance_id) && r.autoscaling_group.as_deref() == Some(&group)
            }) {
                break r;
            }
            if asked.elapsed() > BOOT_TIMEOUT {
                return Err(format!("boot {n}: no instance booted in {BOOT_TIMEOUT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let booted = time::OffsetDateTime::parse(
            &record.booted_at,
            &time::format_description::well_known::Rfc3339,
        )
        .map_err(|e| format!("booted_at {}: {e}", record.booted_at))?;
        loop {
            let prefix = "clusters/";
            if cloud
                .stored_report(STATE_BUCKET, prefix, CLUSTER, &record.instance_id)
                .await
                .is_some()
            {
                break;
            }
            if asked.elapsed() > BOOT_TIMEOUT {
                return Err(format!(
                    "boot {n}: {} wrote no report in {BOOT_TIMEOUT:?}",
                    record.instance_id
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let reported = asked.elapsed();
        to_report.push(reported);
        println!(
            "{n:>4}  {:>8.2}s  {:>8.2}s",
            (booted - asked_at).as_seconds_f64(),
            reported.as_secs_f64()
        );
    }
    to_report.sort();
    println!(
        "median to report: {:.2}s over {} boots",
        to_report[to_report.len() / 2].as_secs_f64(),
        to_report.len()
    );
    // Idle: let every unit settle before reading memory.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let machines = cloud
        .record
        .machines
        .clone()
        .ok_or("the cloud has no machines record")?;
    println!("instance              group                     cgroup-memory  rss-sum");
    for r in cloud.powered_on() {
        let Some(id) = &r.machine else { continue };
        let pids = localcloud::machines::machine_processes(&machines, id);
        let rss: u64 = pids.iter().filter_map(|p| rss_kib(*p)).sum();
        println!(
            "{:<20}  {:<24}  {:>9} MiB  {:>3} MiB",
            r.instance_id,
            r.autoscaling_group
                .as_deref()
                .and_then(|g| g.split('.').next())
                .unwrap_or("-"),
            cgroup_memory(&machines.cgroup, id).map_or("?".into(), |b| (b >> 20).to_string()),
            rss >> 10
        );
    }
    Ok(())
}

/// A process's resident set in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The memory a machine's cgroup charges, page cache included (v1 `memory.usage_in_bytes`, v2 `memory.current`).
fn cgroup_memory(parent: &str, id: &str) -> Option<u64> {
    let relative = format!("{}/{id}", parent.trim_start_matches('/'));
    [
        format!("/sys/fs/cgroup/memory/{relative}/memory.usage_in_bytes"),
        format!("/sys/fs/cgroup/{relative}/memory.current"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .and_then(|v| v.trim().parse().ok())
}
