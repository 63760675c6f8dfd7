//! Benchmark of the local cloud (not a test): prints medians over several runs of
//! 1. `localcloud up` until it is ready (the command returns), then `down`;
//! 2. an ASG's desired capacity 0 -> 10 until all 10 instances' nodeup have written their identity file.
//!
//! Build both binaries first, then run it from the target directory (it finds `localcloud` and `nodeup` next to
//! itself):
//!
//! ```text
//! cargo build -p localcloud -p nodeup && $CARGO_TARGET_DIR/debug/localcloud-bench [--runs N]
//! ```

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use aws_sdk_autoscaling::types::LaunchTemplateSpecification;
use aws_sdk_ec2::types::{InstanceType, RequestLaunchTemplateData};
use base64::Engine as _;
use localcloud::state::StateDir;

/// Where nodeup writes its identity under its root (`nodeup::identity::IDENTITY_FILE`; not imported, to keep
/// nodeup out of localcloud's dependencies).
const IDENTITY_FILE: &str = "var/lib/nodeup/identity.json";
const SCALE_TIMEOUT: Duration = Duration::from_secs(120);

type BenchResult<T> = Result<T, String>;

fn main() {
    let runs = std::env::args()
        .skip_while(|a| a != "--runs")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(5usize);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("localcloud-bench: starting the async runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(bench(runs)) {
        eprintln!("localcloud-bench: {e}");
        std::process::exit(1);
    }
}

async fn bench(runs: usize) -> BenchResult<()> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this binary: {e}"))?;
    let localcloud = exe.with_file_name("localcloud");
    if !localcloud.is_file() || !exe.with_file_name("nodeup").is_file() {
        return Err(format!(
            "localcloud and nodeup must be next to {} (cargo build -p localcloud -p nodeup)",
            exe.display()
        ));
    }
    let scratch = std::env::temp_dir().join(format!("localcloud-bench-{}", std::process::id()));

    let mut up_times = Vec::new();
    for run in 0..runs {
        let dir = scratch.join(format!("up-{run}"));
        let start = Instant::now();
        cli(&localcloud, &dir, &["up"])?;
        up_times.push(start.elapsed());
        cli(&localcloud, &dir, &["down"])?;
    }
    report("localcloud up -> ready", &up_times);

    let dir = scratch.join("scale");
    cli(&localcloud, &dir, &["up"])?;
    let result = scale_runs(&dir, runs).await;
    let down = cli(&localcloud, &dir, &["down"]);
    let scale_times = result?;
    down?;
    report(
        "ASG desired 0 -> 10, all identity files written",
        &scale_times,
    );
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

fn cli(localcloud: &Path, dir: &Path, args: &[&str]) -> BenchResult<String> {
    let out = Command::new(localcloud)
        .arg("--state-dir")
        .arg(dir)
        .args(args)
        .output()
        .map_err(|e| format!("running localcloud {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "localcloud {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn scale_runs(dir: &Path, runs: usize) -> BenchResult<Vec<Duration>> {
    let state = StateDir::new(dir);
    let cloud = state.read_cloud().map_err(|e| e.to_string())?;
    let config = localcloud::aws::sdk_config(&cloud.endpoint, &cloud.region, &cloud.admin);
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let asg = aws_sdk_autoscaling::Client::new(&config);

    let vpc = ec2
        .create_vpc()
        .cidr_block("127.16.0.0/16")
        .send()
        .await
        .map_err(|e| call_err("CreateVpc", &e))?;
    let vpc_id = vpc
        .vpc()
        .and_then(|v| v.vpc_id())
        .unwrap_or_default()
        .to_owned();
    let mut subnets = Vec::new();
    for (k, az) in ["us-west-2a", "us-west-2b", "us-west-2c"]
        .iter()
        .enumerate()
    {
        let s = ec2
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(format!("127.16.{}.0/24", k + 1))
            .availability_zone(*az)
            .send()
            .await
            .map_err(|e| call_err("CreateSubnet", &e))?;
        subnets.push(
            s.subnet()
                .and_then(|s| s.subnet_id())
                .unwrap_or_default()
                .to_owned(),
        );
    }
    ec2.create_launch_template()
        .launch_template_name("bench")
        .launch_template_data(
            RequestLaunchTemplateData::builder()
                .image_id("ami-12c6146b")
                .instance_type(InstanceType::T3Micro)
                .user_data(base64::engine::general_purpose::STANDARD.encode("bench: true\n"))
                .build(),
        )
        .send()
        .await
        .map_err(|e| call_err("CreateLaunchTemplate", &e))?;
    asg.create_auto_scaling_group()
        .auto_scaling_group_name("bench")
        .launch_template(
            LaunchTemplateSpecification::builder()
                .launch_template_name("bench")
                .version("$Latest")
                .build(),
        )
        .min_size(0)
        .max_size(10)
        .desired_capacity(0)
        .vpc_zone_identifier(subnets.join(","))
        .send()
        .await
        .map_err(|e| call_err("CreateAutoScalingGroup", &e))?;

    let mut times = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        set_desired(&asg, 10).await?;
        wait(&state, "10 identity files", |records| {
            let on: Vec<_> = records.iter().filter(|r| r.stopped_at.is_none()).collect();
            on.len() == 10 && on.iter().all(|r| r.root.join(IDENTITY_FILE).is_file())
        })
        .await?;
        times.push(start.elapsed());
        set_desired(&asg, 0).await?;
        wait(&state, "every instance powered off", |records| {
            records.iter().all(|r| r.stopped_at.is_some())
        })
        .await?;
    }
    Ok(times)
}

fn call_err(what: &str, e: &(dyn std::error::Error + 'static)) -> String {
    format!("{what}: {}", localcloud::aws::error_chain(e))
}

async fn set_desired(asg: &aws_sdk_autoscaling::Client, n: i32) -> BenchResult<()> {
    asg.set_desired_capacity()
        .auto_scaling_group_name("bench")
        .desired_capacity(n)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| format!("SetDesiredCapacity: {}", localcloud::aws::error_chain(&e)))
}

async fn wait(
    state: &StateDir,
    what: &str,
    done: impl Fn(&[localcloud::state::InstanceRecord]) -> bool,
) -> BenchResult<()> {
    let deadline = Instant::now() + SCALE_TIMEOUT;
    loop {
        let records = state.read_instances().map_err(|e| e.to_string())?;
        if done(&records) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn report(what: &str, times: &[Duration]) {
    let mut sorted: Vec<Duration> = times.to_vec();
    sorted.sort();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
    let all: Vec<String> = times
        .iter()
        .map(|t| format!("{:.0}", t.as_secs_f64() * 1000.0))
        .collect();
    println!(
        "{what}: median {:.0} ms over {} runs (ms: {})",
        median.as_secs_f64() * 1000.0,
        times.len(),
        all.join(", ")
    );
}
