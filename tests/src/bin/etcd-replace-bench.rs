//! The etcd supervisor's benchmark on the local cloud: `ballast create cluster --yes` with three control-plane
//! groups, 10,000 keys written, then several replacements (EC2 TerminateInstances of one control-plane instance;
//! its Auto Scaling Group launches another; odd rounds terminate the leader, even rounds a follower). For each
//! it prints the time from the replacement's nodeup start (the runner's boot time) to three voting, healthy
//! members without the dead one, and from the termination call to the same point; then the medians and the
//! termination call's 90th percentile. It runs twice, on two clusters: with each member's data on its volume
//! (the default: the replacement re-attaches it, same member, peer URL by name) and with etcd's data on the
//! root disk (`NODEUP_ETCD_DATA=root-disk` through a wrapper: the replacement joins as a learner, as before
//! volumes), and prints the two side by side. Goal (issue 17), with volumes: termination call to three voting
//! healthy members within 1 s median and 3 s at the 90th percentile over 10 replacements.
//!
//! cargo run -p ballast-e2e --bin etcd-replace-bench [--release] [-- REPLACEMENTS [KEYS]]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use ballast_e2e::cluster_etcd::{connect, control_plane, settled_membership, wait_for_settled};
use ballast_e2e::localcloud::{bench_binaries, binaries, LocalCloud, Options};

fn main() {
    let mut args = std::env::args().skip(1);
    let replacements: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let keys: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let ballast = bench_binaries();
    let scratch = tempfile::tempdir().expect("a scratch directory");
    println!("== member volumes: the replacement re-attaches its member's volume");
    let reattach = runtime.block_on(bench(&ballast, None, replacements, keys));
    println!("== root disk: the replacement joins as a learner");
    let wrapper = root_disk_nodeup(scratch.path());
    let learner = runtime.block_on(bench(&ballast, Some(wrapper), replacements, keys));
    println!(
        "medians over {replacements} replacements with {keys} keys (nodeup start / termination call to 3 voting healthy members): re-attach {:.2} s / {:.2} s; learner join {:.2} s / {:.2} s (goal for re-attach: 1 s median from the termination call)",
        reattach.0, reattach.1, learner.0, learner.1
    );
}

/// A wrapper that runs nodeup with etcd's data on the root disk (the learner-join path).
fn root_disk_nodeup(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("nodeup-root-disk");
    let script = format!(
        "#!/bin/sh\nNODEUP_ETCD_DATA=root-disk exec '{}' \"$@\"\n",
        binaries().nodeup.display()
    );
    std::fs::write(&path, script).expect("writing the nodeup wrapper");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("making the wrapper executable");
    path
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn unix_of(rfc3339: &str) -> f64 {
    let t = time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339)
        .expect("an RFC 3339 boot time");
    t.unix_timestamp_nanos() as f64 / 1e9
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One cluster's run; returns the medians (nodeup start, termination call) to three voting healthy members.
async fn bench(
    ballast: &Path,
    nodeup: Option<PathBuf>,
    replacements: usize,
    keys: usize,
) -> (f64, f64) {
    let cloud = LocalCloud::start_with(Options {
        nodeup,
        ..Options::default()
    });
    cloud.prepare_for_ballast("etcd-bench").await;
    let out = Command::new(ballast)
        .args([
            "create",
            "cluster",
            "--name",
            "bench.example.com",
            "--zones",
            "us-west-2a,us-west-2b,us-west-2c",
            "--node-count",
            "0",
            "--yes",
        ])
        .env_clear()
        .envs(cloud.operator_env("s3://etcd-bench/clusters"))
        .output()
        .expect("ballast");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created = Instant::now();
    wait_for_settled(&cloud, 3, Duration::from_secs(180)).await;
    println!(
        "etcd formed: 3 voting members {:.2} s after create cluster returned",
        created.elapsed().as_secs_f64()
    );

    let mut client = connect(&cloud).await.expect("an etcd client");
    let value = "v".repeat(100);
    let started = Instant::now();
    for i in 0..keys {
        client
            .put(format!("bench/{i:06}"), value.as_str(), None)
            .await
            .expect("put");
    }
    println!(
        "{keys} keys of 100 bytes written in {:.2} s",
        started.elapsed().as_secs_f64()
    );

    let mut from_boot = Vec::new();
    let mut from_termination = Vec::new();
    for round in 1..=replacements {
        let live = control_plane(&cloud);
        // Odd rounds kill the leader (an election on top of the replacement), even rounds a follower.
        let leader = leader_instance(&cloud).await;
        let victim = if round % 2 == 1 {
            leader.clone().expect("a leader before each round")
        } else {
            live.iter()
                .map(|r| r.instance_id.clone())
                .find(|id| Some(id) != leader.as_ref())
                .expect("a follower")
        };
        let role = if Some(&victim) == leader.as_ref() {
            "leader"
        } else {
            "follower"
        };
        let before: Vec<String> = cloud
            .instances()
            .into_iter()
            .map(|r| r.instance_id)
            .collect();
        let terminated_at = now_unix();
        cloud
            .ec2()
            .terminate_instances()
            .instance_ids(&victim)
            .send()
            .await
            .expect("TerminateInstances");
        let deadline = Instant::now() + Duration::from_secs(180);
        let settled_at = loop {
            if let Ok(m) = settled_membership(&cloud, 3).await {
                if !m.voters.contains(&victim) {
                    break now_unix();
                }
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: no settled cluster in 180 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let replacement = cloud
            .instances()
            .into_iter()
            .find(|r| !before.contains(&r.instance_id))
            .expect("the replacement's record");
        let booted = unix_of(&replacement.booted_at);
        from_boot.push(settled_at - booted);
        from_termination.push(settled_at - terminated_at);
        println!(
            "  replacement {round} ({role}): {victim} -> {}: nodeup start to 3 voting {:.2} s, termination call to 3 voting {:.2} s",
            replacement.instance_id,
            settled_at - booted,
            settled_at - terminated_at
        );
    }
    // The first client's endpoints are all gone by now: a fresh one over the live members.
    drop(client);
    let mut client = connect(&cloud).await.expect("an etcd client");
    let count = client
        .get(
            "bench/",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .expect("count")
        .count();
    assert_eq!(count as usize, keys, "keys lost");
    let p90 = percentile(from_termination.clone(), 0.9);
    let medians = (median(from_boot), median(from_termination));
    println!(
        "median over {replacements} replacements with {keys} keys: nodeup start to 3 voting healthy members {:.2} s; termination call to the same {:.2} s (goal 1 s), p90 {p90:.2} s (goal 3 s)",
        medians.0, medians.1
    );
    medians
}

/// The nearest-rank percentile `q` (0..=1) of `v`.
fn percentile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// The instance whose etcd member leads, as the live members report it.
async fn leader_instance(cloud: &LocalCloud) -> Option<String> {
    for r in control_plane(cloud) {
        let Ok(mut client) = ballast_e2e::cluster_etcd::connect_member(&r).await else {
            continue;
        };
        let Ok(status) = client.status().await else {
            continue;
        };
        let own = status.header().map_or(0, |h| h.member_id());
        if own != 0 && own == status.leader() {
            return Some(r.instance_id);
        }
    }
    None
}
