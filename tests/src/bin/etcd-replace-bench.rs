//! The etcd supervisor's benchmark on the local cloud: `ballast create cluster --yes` with three control-plane
//! groups, 10,000 keys written, then several replacements (EC2 TerminateInstances of one control-plane instance;
//! its Auto Scaling Group launches another). Each round is of one kind:
//! - `graceful leader` / `graceful follower`: EC2's default termination (the OS shuts down: nodeup gets SIGTERM
//!   and a leading etcd hands leadership over before it stops), alternating the leader and a follower;
//! - `power-cut leader`: `SkipOsShutdown=true` (everything SIGKILLed at once), of the leader: the followers wait
//!   for their election timeout.
//!
//! For each round it prints the time from the termination call to the old instance being off, to the
//! replacement's nodeup start (the runner's boot time), and to three voting, healthy members without the dead one;
//! then, per kind, the median and 90th percentile from the termination call. It runs twice, on two clusters:
//! with each member's data on its volume (the default: the replacement re-attaches it, same member, peer URL by
//! name) and with etcd's data on the root disk (`NODEUP_ETCD_DATA=root-disk` through a wrapper: the replacement
//! joins as a learner, as before volumes; graceful rounds only), and prints the two side by side. Goal
//! (issue 17), with volumes and default terminations: termination call to three voting healthy members within
//! 1 s median and 3 s at the 90th percentile over 10 replacements, leader rounds included.
//!
//! cargo run -p ballast-e2e --bin etcd-replace-bench [--release] [-- [--etcd-timing HEARTBEAT,ELECTION]
//! [REPLACEMENTS [KEYS [POWER_CUTS]]]]
//! (REPLACEMENTS graceful rounds, 1..=100, default 5; KEYS up to 1,000,000, default 10,000; POWER_CUTS
//! power-cut leader rounds, 0..=100, default REPLACEMENTS / 2. `--etcd-timing 50ms,500ms` sets the clusters'
//! `spec.etcd.heartbeatInterval` and `leaderElectionTimeout` before `update cluster --yes`; without it, etcd's
//! defaults, 100 ms and 1 s.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use ballast_e2e::cluster_etcd::{
    connect, control_plane, leader_instance, settled_membership, wait_for_settled,
};
use ballast_e2e::localcloud::{bench_binaries, binaries, LocalCloud, Options, Termination};

const MAX_ROUNDS: usize = 100;
const MAX_KEYS: usize = 1_000_000;

fn bounded(
    arg: Option<String>,
    name: &str,
    default: usize,
    range: std::ops::RangeInclusive<usize>,
) -> usize {
    let Some(arg) = arg else {
        return default;
    };
    match arg.parse::<usize>() {
        Ok(n) if range.contains(&n) => n,
        _ => {
            eprintln!(
                "etcd-replace-bench: {name} must be a number in {}..={}, got {arg:?}",
                range.start(),
                range.end()
            );
            std::process::exit(2);
        }
    }
}

/// One round's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    GracefulLeader,
    GracefulFollower,
    PowerCutLeader,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::GracefulLeader => "graceful leader",
            Kind::GracefulFollower => "graceful follower",
            Kind::PowerCutLeader => "power-cut leader",
        }
    }
    fn leader(self) -> bool {
        matches!(self, Kind::GracefulLeader | Kind::PowerCutLeader)
    }
    fn termination(self) -> Termination {
        match self {
            Kind::PowerCutLeader => Termination::PowerCut,
            _ => Termination::Graceful,
        }
    }
}

/// The rounds: `graceful` default terminations alternating leader and follower (leader first), with `cuts`
/// power-cut leader rounds spread among them.
fn rounds(graceful: usize, cuts: usize) -> Vec<Kind> {
    let mut out = Vec::with_capacity(graceful + cuts);
    let (mut g, mut c) = (0, 0);
    while g < graceful || c < cuts {
        if g < graceful {
            out.push(if g % 2 == 0 {
                Kind::GracefulLeader
            } else {
                Kind::GracefulFollower
            });
            g += 1;
        }
        // One power cut after every second graceful round (or whatever is left at the end).
        if c < cuts && (g % 2 == 0 || g >= graceful) {
            out.push(Kind::PowerCutLeader);
            c += 1;
        }
    }
    out
}

/// One round's timings (seconds from the termination call).
#[derive(Debug, Clone, Copy)]
struct Sample {
    kind: Kind,
    /// The termination call to three voting healthy members.
    settled: f64,
    /// The replacement's nodeup start to the same.
    from_boot: f64,
}

/// `--etcd-timing HEARTBEAT,ELECTION`, taken out of the arguments; refused (exit 2) as `ballast` would refuse it.
fn etcd_timing(args: &mut Vec<String>) -> Option<(String, String)> {
    let at = args.iter().position(|a| a == "--etcd-timing")?;
    let value = args.get(at + 1).cloned().unwrap_or_default();
    args.drain(at..(at + 2).min(args.len()));
    let refuse = |why: String| -> ! {
        eprintln!("etcd-replace-bench: --etcd-timing {value:?}: {why}");
        std::process::exit(2);
    };
    let Some((heartbeat, election)) = value.split_once(',') else {
        refuse("use HEARTBEAT,ELECTION, e.g. 50ms,500ms".into());
    };
    if let Err((field, e)) =
        ballast_state::etcd_timing::EtcdTiming::from_spec(Some(heartbeat), Some(election))
    {
        refuse(format!("{field}: {e}"));
    }
    Some((heartbeat.to_string(), election.to_string()))
}

fn main() {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    let timing = etcd_timing(&mut argv);
    let mut args = argv.into_iter();
    let replacements = bounded(args.next(), "REPLACEMENTS", 5, 1..=MAX_ROUNDS);
    let keys = bounded(args.next(), "KEYS", 10_000, 0..=MAX_KEYS);
    let cuts = bounded(args.next(), "POWER_CUTS", replacements / 2, 0..=MAX_ROUNDS);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let ballast = bench_binaries();
    let scratch = tempfile::tempdir().expect("a scratch directory");
    println!("== member volumes: the replacement re-attaches its member's volume");
    match &timing {
        Some((h, e)) => println!("etcd timing: heartbeatInterval {h}, leaderElectionTimeout {e}"),
        None => println!("etcd timing: etcd's defaults (heartbeat 100 ms, election timeout 1 s)"),
    }
    let reattach = runtime.block_on(bench(
        &ballast,
        None,
        &rounds(replacements, cuts),
        keys,
        timing.as_ref(),
    ));
    println!("== root disk: the replacement joins as a learner");
    let wrapper = root_disk_nodeup(scratch.path());
    let learner = runtime.block_on(bench(
        &ballast,
        Some(wrapper),
        &rounds(replacements, 0),
        keys,
        timing.as_ref(),
    ));
    let graceful = |samples: &[Sample]| -> (Vec<f64>, Vec<f64>) {
        samples
            .iter()
            .filter(|s| s.kind.termination() == Termination::Graceful)
            .map(|s| (s.from_boot, s.settled))
            .unzip()
    };
    let (r_boot, r_term) = graceful(&reattach);
    let (l_boot, l_term) = graceful(&learner);
    println!(
        "default terminations, medians over {replacements} replacements with {keys} keys (nodeup start / termination call to 3 voting healthy members): re-attach {:.2} s / {:.2} s (p90 {:.2} s); learner join {:.2} s / {:.2} s (p90 {:.2} s). Goal for re-attach: 1 s median, 3 s p90 from the termination call",
        median(r_boot),
        median(r_term.clone()),
        percentile(r_term, 0.9),
        median(l_boot),
        median(l_term.clone()),
        percentile(l_term, 0.9),
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

/// One cluster's run of `plan`; prints every round and, per kind, the median and 90th percentile from the
/// termination call to three voting healthy members.
async fn bench(
    ballast: &Path,
    nodeup: Option<PathBuf>,
    plan: &[Kind],
    keys: usize,
    timing: Option<&(String, String)>,
) -> Vec<Sample> {
    let cloud = LocalCloud::start_with(Options {
        nodeup,
        ..Options::default()
    });
    cloud.prepare_for_ballast("etcd-bench").await;
    let run = |args: &[&str]| -> String {
        let out = Command::new(ballast)
            .args(args)
            .env_clear()
            .envs(cloud.operator_env("s3://etcd-bench/clusters"))
            .output()
            .expect("ballast");
        assert!(
            out.status.success(),
            "ballast {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut create = vec![
        "create",
        "cluster",
        "--name",
        "bench.example.com",
        "--zones",
        "us-west-2a,us-west-2b,us-west-2c",
        "--node-count",
        "0",
    ];
    match timing {
        None => {
            create.push("--yes");
            run(&create);
        }
        // The timing is a spec field with no `create` flag: store the cluster, set it, then build it.
        Some((heartbeat, election)) => {
            run(&create);
            let spec = run(&["get", "clusters", "bench.example.com", "-o", "yaml"]);
            let timed = with_etcd_timing(&spec, heartbeat, election);
            let file = tempfile::NamedTempFile::new().expect("a spec file");
            std::fs::write(file.path(), timed).expect("writing the spec");
            run(&["replace", "-f", &file.path().display().to_string()]);
            run(&["update", "cluster", "bench.example.com", "--yes"]);
        }
    }
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

    let mut samples = Vec::with_capacity(plan.len());
    for (round, kind) in plan.iter().copied().enumerate() {
        let round = round + 1;
        let live = control_plane(&cloud);
        let leader = leader_instance(&cloud).await;
        let victim = if kind.leader() {
            leader.clone().expect("a leader before each round")
        } else {
            live.iter()
                .map(|r| r.instance_id.clone())
                .find(|id| Some(id) != leader.as_ref())
                .expect("a follower")
        };
        let before: Vec<String> = cloud
            .instances()
            .into_iter()
            .map(|r| r.instance_id)
            .collect();
        let terminated_at = now_unix();
        cloud
            .terminate(std::slice::from_ref(&victim), kind.termination())
            .await;
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
        let old = cloud.instance(&victim);
        let off = old.stopped_at.as_deref().map_or(f64::NAN, unix_of) - terminated_at;
        let booted = unix_of(&replacement.booted_at);
        let sample = Sample {
            kind,
            settled: settled_at - terminated_at,
            from_boot: settled_at - booted,
        };
        samples.push(sample);
        println!(
            "  round {round} ({}): {victim} -> {}: from the termination call: old instance off {off:.2} s (nodeup: {}), replacement's nodeup start {:.2} s, 3 voting {:.2} s",
            kind.name(),
            replacement.instance_id,
            old.nodeup_exit.as_deref().unwrap_or("?"),
            booted - terminated_at,
            sample.settled,
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
    let mut by_kind: BTreeMap<Kind, Vec<f64>> = BTreeMap::new();
    for s in &samples {
        by_kind.entry(s.kind).or_default().push(s.settled);
    }
    for (kind, v) in &by_kind {
        println!(
            "  {}: {} rounds, termination call to 3 voting healthy members: median {:.2} s, p90 {:.2} s",
            kind.name(),
            v.len(),
            median(v.clone()),
            percentile(v.clone(), 0.9)
        );
    }
    samples
}

/// The cluster's YAML with `spec.etcd.heartbeatInterval` and `leaderElectionTimeout` set: under its `etcd:` key,
/// or in a new one right under `spec:` (the stored spec of `create cluster` has none: defaults are not written).
fn with_etcd_timing(spec: &str, heartbeat: &str, election: &str) -> String {
    let fields =
        format!("    heartbeatInterval: {heartbeat}\n    leaderElectionTimeout: {election}\n");
    let has_etcd = spec.lines().any(|l| l.trim_end() == "  etcd:");
    let mut out = String::with_capacity(spec.len() + 100);
    let mut done = false;
    for line in spec.lines() {
        out.push_str(line);
        out.push('\n');
        if done {
            continue;
        }
        if has_etcd && line.trim_end() == "  etcd:" {
            out.push_str(&fields);
            done = true;
        } else if !has_etcd && line.trim_end() == "spec:" {
            out.push_str("  etcd:\n");
            out.push_str(&fields);
            done = true;
        }
    }
    assert!(done, "no spec in:\n{spec}");
    out
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
