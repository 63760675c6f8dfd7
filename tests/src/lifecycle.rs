//! The phases of a cluster's life as the published kops benchmark timed them, run through the real `ballast`
//! binary on a local cloud with IAM enforced: create until validated, double the node group until validated, a
//! Kubernetes upgrade rolled until validated, and a control-plane instance terminated until validated again.
//! `lifecycle-bench` prints them beside the published figures; `tests/lifecycle_small.rs` runs the small size's
//! first two phases so CI proves this still works.
//!
//! Each phase records its wall time, the AWS calls of the `ballast` runs that changed something (counted by
//! `ballast` itself through `BALLAST_AWS_CALL_LOG`), the calls of one `validate cluster` run, the local cloud's
//! peak memory (runner + emulator), and the peak RSS of any nodeup and of any `ballast` run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::localcloud::{LocalCloud, Termination};
use ballast_state::etcd::health::HealthReport;
use ballast_state::layout::ClusterPaths;
use localcloud::state::InstanceRecord;

/// The state store the phases use.
const BUCKET: &str = "ballast-lifecycle";
const STATE: &str = "s3://ballast-lifecycle/clusters";
/// The create uses the default release; the roll upgrades to the next minor the manifest pins.
pub const FROM_VERSION: &str = ballast_state::defaults::DEFAULT_KUBERNETES_VERSION;
pub const TO_VERSION: &str = "1.37.1";
/// How long any phase may take before the benchmark gives up (the large size takes minutes on 2 cores).
const PHASE_TIMEOUT: Duration = Duration::from_secs(1800);

/// A cluster size of the published benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    Small,
    Medium,
    Large,
}

impl Size {
    pub fn parse(text: &str) -> Option<Size> {
        match text {
            "small" => Some(Size::Small),
            "medium" => Some(Size::Medium),
            "large" => Some(Size::Large),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Size::Small => "small",
            Size::Medium => "medium",
            Size::Large => "large",
        }
    }

    /// (control-plane instances, nodes).
    pub fn instances(self) -> (u32, u32) {
        match self {
            Size::Small => (3, 10),
            Size::Medium => (3, 50),
            Size::Large => (5, 100),
        }
    }

    /// The published kops figures on AWS us-west-2: create, rolling upgrade, node group doubled, recovery.
    pub fn published(self) -> [&'static str; 4] {
        match self {
            Size::Small => ["3 min 28 s", "8 min 15 s", "4 min 50 s", "< 90 s"],
            Size::Medium => ["7 min 52 s", "15 min 30 s", "12 min 10 s", "< 90 s"],
            Size::Large => ["14 min 05 s", "22 min 45 s", "18 min 20 s", "< 90 s"],
        }
    }
}

/// What one phase measured.
#[derive(Debug, Clone, Default)]
pub struct PhaseReport {
    pub name: &'static str,
    pub wall: Duration,
    /// For the recovery: from the replacement's nodeup start until validated.
    pub from_replacement_boot: Option<Duration>,
    /// AWS calls of the phase's changing `ballast` runs (create, replace, update, rolling-update): total, mutating.
    pub calls: (u64, u64),
    /// The changing runs' calls by operation.
    pub operations: BTreeMap<String, u64>,
    /// AWS calls of the phase's `validate cluster --wait` run, all its checks together.
    pub validate_calls: u64,
    /// How many checks that run made until the cluster was valid (one DescribeAutoScalingGroups each).
    pub validate_checks: u64,
    /// Each of those checks as `validate -v` logged it: its number, seconds, outcome.
    pub check_log: Vec<String>,
    /// The local cloud's peak memory (runner + emulator), MiB.
    pub cloud_peak_mib: f64,
    /// The peak RSS of any nodeup, MiB.
    pub nodeup_peak_mib: f64,
    /// The peak RSS of any `ballast` run, MiB.
    pub ballast_peak_mib: f64,
    /// CPU seconds (user + system) of the phase's `ballast` runs: the changing ones, and the `validate` runs.
    pub ballast_cpu_s: (f64, f64),
    /// When things happened, in seconds from the phase's start: each `ballast` run's end, and the first and last
    /// nodeup start of the instances the phase launched.
    pub timeline: Vec<(String, f64)>,
    /// For the recovery: every etcd health report the supervisors published during it, oldest first (what
    /// `validate`'s etcd check judged).
    pub etcd_reports: Vec<String>,
    /// What the emulator served during the phase, by `service:Action` (S3 by method), most CPU first.
    /// Everything's calls: `ballast`, nodeup, etcd supervisors, the local cloud's runner and IMDS.
    pub emulator: Vec<(String, Served)>,
}

/// One `ballast` run's end: its output, and what it used.
struct Ran {
    success: bool,
    stdout: String,
    stderr: String,
    peak_rss_mib: f64,
    /// User + system CPU seconds.
    cpu_s: f64,
}

/// A cluster on a local cloud and the phases run on it.
pub struct Lifecycle {
    pub cloud: LocalCloud,
    pub size: Size,
    pub cluster: String,
    ballast: PathBuf,
    work: tempfile::TempDir,
    sampler: Sampler,
    ballast_peak_mib: f64,
    /// CPU seconds of the current phase's changing `ballast` runs and of its `validate` runs.
    ballast_cpu_s: (f64, f64),
    /// The last `validate cluster --wait` run's checks, as it logged them (each one's time and outcome).
    checks: Vec<String>,
    /// The current phase's start, and its timeline so far (see [`PhaseReport::timeline`]).
    phase_start: Instant,
    timeline: Vec<(String, f64)>,
}

impl Lifecycle {
    /// A fresh local cloud (IAM enforced) with the state bucket and both releases' images.
    pub async fn start(size: Size, ballast: PathBuf) -> Lifecycle {
        let cloud = LocalCloud::start();
        cloud.prepare_for_ballast(BUCKET).await;
        cloud.register_upgrade_release_image(TO_VERSION).await;
        let sampler = Sampler::start(&cloud);
        Lifecycle {
            cloud,
            size,
            cluster: format!("{}.lifecycle.example.com", size.name()),
            ballast,
            work: tempfile::tempdir().expect("a work directory"),
            sampler,
            ballast_peak_mib: 0.0,
            ballast_cpu_s: (0.0, 0.0),
            checks: Vec::new(),
            phase_start: Instant::now(),
            timeline: Vec::new(),
        }
    }

    fn call_log(&self) -> PathBuf {
        self.work.path().join("aws-calls.jsonl")
    }

    /// Runs `ballast ARGS`, waiting for it with wait4 to read its peak RSS.
    fn run(&mut self, args: &[&str]) -> Ran {
        let child = Command::new(&self.ballast)
            .args(args)
            .env_clear()
            .envs(self.cloud.operator_env(STATE))
            .env("BALLAST_CLUSTER_NAME", &self.cluster)
            .env("BALLAST_AWS_CALL_LOG", self.call_log())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning ballast");
        let ran = wait_with_rusage(child);
        let command: Vec<&str> = args.iter().take(2).copied().collect();
        self.timeline.push((
            format!("`{}` ended", command.join(" ")),
            self.phase_start.elapsed().as_secs_f64(),
        ));
        self.ballast_peak_mib = self.ballast_peak_mib.max(ran.peak_rss_mib);
        if args.first() == Some(&"validate") {
            self.ballast_cpu_s.1 += ran.cpu_s;
        } else {
            self.ballast_cpu_s.0 += ran.cpu_s;
        }
        ran
    }

    /// Runs `ballast ARGS` and panics with its stderr when it fails.
    fn must(&mut self, args: &[&str]) -> String {
        let ran = self.run(args);
        assert!(
            ran.success,
            "ballast {} failed:\n{}",
            args.join(" "),
            ran.stderr
        );
        ran.stdout
    }

    /// The call-log lines written so far.
    fn logged_calls(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.call_log())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// `validate cluster --wait` until it passes, as an operator waits: one run, whose checks after the first
    /// read only what changed.
    fn validated(&mut self) {
        let wait = format!("{}s", PHASE_TIMEOUT.as_secs());
        // -v: each check's time and outcome, on stderr.
        let ran = self.run(&["validate", "cluster", "--wait", &wait, "-v"]);
        assert!(
            ran.success,
            "{} did not validate within {PHASE_TIMEOUT:?}:\n{}{}",
            self.cluster, ran.stdout, ran.stderr
        );
        self.checks = ran
            .stderr
            .lines()
            .filter_map(|l| l.split("validate: check made").nth(1))
            .map(|l| l.trim().to_string())
            .collect();
    }

    /// Starts a phase: resets the peaks and remembers where the call log and the emulator's counts stand.
    fn begin(&mut self) -> Begun {
        self.sampler.reset();
        self.ballast_peak_mib = 0.0;
        self.ballast_cpu_s = (0.0, 0.0);
        self.phase_start = Instant::now();
        self.timeline.clear();
        Begun {
            at: self.phase_start,
            started_utc: time::OffsetDateTime::now_utc(),
            instances: self
                .cloud
                .instances()
                .into_iter()
                .map(|r| r.instance_id)
                .collect(),
            call_log_lines: self.logged_calls().len(),
            emulator: emulator_stats(&self.cloud),
        }
    }

    /// Ends a phase: sums the calls of its changing runs (not `validate`), reads the peaks.
    fn finish(&mut self, name: &'static str, begun: Begun) -> PhaseReport {
        let wall = begun.at.elapsed();
        let first_line = begun.call_log_lines;
        let lines = self.logged_calls();
        let mut report = PhaseReport {
            name,
            wall,
            check_log: std::mem::take(&mut self.checks),
            timeline: std::mem::take(&mut self.timeline),
            ..PhaseReport::default()
        };
        let boots: Vec<f64> = self
            .cloud
            .instances()
            .into_iter()
            .filter(|r| !begun.instances.contains(&r.instance_id))
            .filter_map(|r| booted_at(&r))
            .map(|booted| (booted - begun.started_utc).as_seconds_f64())
            .collect();
        if let (Some(first), Some(last)) = (
            boots.iter().copied().reduce(f64::min),
            boots.iter().copied().reduce(f64::max),
        ) {
            report
                .timeline
                .push((format!("first of {} nodeups started", boots.len()), first));
            report
                .timeline
                .push(("last nodeup started".to_string(), last));
            report.timeline.sort_by(|a, b| a.1.total_cmp(&b.1));
        }
        for line in &lines[first_line..] {
            let command = line["command"].as_str().unwrap_or_default();
            let total = line["total"].as_u64().unwrap_or_default();
            if command.contains(" validate ") {
                report.validate_calls += total;
                report.validate_checks += line["operations"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(op, _)| op.ends_with(":DescribeAutoScalingGroups"))
                    .filter_map(|(_, n)| n.as_u64())
                    .sum::<u64>();
                continue;
            }
            report.calls.0 += total;
            report.calls.1 += line["mutating"].as_u64().unwrap_or_default();
            for (op, n) in line["operations"].as_object().into_iter().flatten() {
                *report.operations.entry(op.clone()).or_default() += n.as_u64().unwrap_or_default();
            }
        }
        let (cloud, nodeup) = self.sampler.peaks();
        report.cloud_peak_mib = cloud;
        report.nodeup_peak_mib = nodeup;
        report.ballast_peak_mib = self.ballast_peak_mib;
        report.ballast_cpu_s = self.ballast_cpu_s;
        let mut served: Vec<(String, Served)> = emulator_stats(&self.cloud)
            .into_iter()
            .map(|(call, now)| {
                let before = begun.emulator.get(&call).copied().unwrap_or_default();
                (call, now.since(before))
            })
            .filter(|(_, served)| served.count > 0)
            .collect();
        served.sort_by(|a, b| b.1.cpu_s.total_cmp(&a.1.cpu_s));
        report.emulator = served;
        report
    }

    /// `create cluster --yes` at the size, then `validate cluster` until it passes.
    pub fn create(&mut self) -> PhaseReport {
        let phase = self.begin();
        let (control_plane, nodes) = self.size.instances();
        let cluster = self.cluster.clone();
        self.must(&[
            "create",
            "cluster",
            "--name",
            &cluster,
            "--zones",
            "us-west-2a,us-west-2b,us-west-2c",
            "--control-plane-count",
            &control_plane.to_string(),
            "--node-count",
            &nodes.to_string(),
            "--kubernetes-version",
            FROM_VERSION,
            "--yes",
        ]);
        self.validated();
        self.finish("create", phase)
    }

    /// The node group's sizes doubled (`replace -f`, `update cluster --yes`), then validated.
    pub fn double_nodes(&mut self) -> PhaseReport {
        let phase = self.begin();
        let (_, nodes) = self.size.instances();
        let group = self.must(&["get", "instancegroups", "nodes", "-o", "yaml"]);
        let doubled = group
            .replace(
                &format!("minSize: {nodes}\n"),
                &format!("minSize: {}\n", nodes * 2),
            )
            .replace(
                &format!("maxSize: {nodes}\n"),
                &format!("maxSize: {}\n", nodes * 2),
            );
        assert_ne!(
            doubled, group,
            "the node group's sizes were not found in:\n{group}"
        );
        self.replace_with(&doubled);
        self.must(&["update", "cluster", "--yes"]);
        self.validated();
        self.finish("node group doubled", phase)
    }

    /// The Kubernetes version moved to the newer pinned release, `update cluster --yes`, `rolling-update cluster
    /// --yes --cloudonly` (no Kubernetes API runs here), then validated.
    pub fn upgrade(&mut self) -> PhaseReport {
        let phase = self.begin();
        let cluster = self.cluster.clone();
        let spec = self.must(&["get", "clusters", &cluster, "-o", "yaml"]);
        let upgraded = spec.replace(
            &format!("kubernetesVersion: {FROM_VERSION}"),
            &format!("kubernetesVersion: {TO_VERSION}"),
        );
        assert_ne!(
            upgraded, spec,
            "no kubernetesVersion {FROM_VERSION} in:\n{spec}"
        );
        self.replace_with(&upgraded);
        self.must(&["update", "cluster", "--yes"]);
        self.must(&["rolling-update", "cluster", "--yes", "--cloudonly"]);
        self.validated();
        self.finish("rolling upgrade", phase)
    }

    /// One control-plane instance terminated through EC2 (as from the console), then validated again: the Auto
    /// Scaling Group replaces it and etcd takes the new member in.
    pub async fn recover_control_plane(&mut self) -> PhaseReport {
        let victim = self
            .cloud
            .powered_on()
            .into_iter()
            .find(|r| {
                r.autoscaling_group
                    .as_deref()
                    .is_some_and(|g| g.starts_with("control-plane"))
            })
            .expect("a running control-plane instance");
        let before: Vec<String> = self
            .cloud
            .instances()
            .into_iter()
            .map(|r| r.instance_id)
            .collect();
        let phase = self.begin();
        self.cloud
            .terminate(
                std::slice::from_ref(&victim.instance_id),
                Termination::Graceful,
            )
            .await;
        // Validation passes again only once the replacement is configured and etcd has it voting.
        self.validated_after(&victim.instance_id);
        let validated_at = time::OffsetDateTime::now_utc();
        let mut report = self.finish("control-plane recovery", phase);
        let replacement = self
            .cloud
            .instances()
            .into_iter()
            .find(|r| {
                !before.contains(&r.instance_id) && r.autoscaling_group == victim.autoscaling_group
            })
            .expect("the replacement's record");
        let booted = booted_at(&replacement).expect("an RFC 3339 boot time");
        let since_boot = validated_at - booted;
        report.from_replacement_boot = Some(Duration::from_secs_f64(
            since_boot.as_seconds_f64().max(0.0),
        ));
        report.etcd_reports = self
            .etcd_reports_since(booted - time::Duration::seconds(5))
            .await;
        report
    }

    /// The etcd health reports published since `since` (every version the versioned bucket keeps), oldest
    /// first, each as a line: when, whose, its view (voters, learners), its step.
    async fn etcd_reports_since(&self, since: time::OffsetDateTime) -> Vec<String> {
        let s3 = self.cloud.s3();
        let state_prefix = STATE.trim_start_matches(&format!("s3://{BUCKET}/"));
        let prefix = format!(
            "{state_prefix}/{}",
            ClusterPaths::new(&self.cluster).etcd_health_prefix()
        );
        let mut versions = Vec::new();
        let (mut key_marker, mut version_marker) = (None, None);
        loop {
            let page = s3
                .list_object_versions()
                .bucket(BUCKET)
                .prefix(&prefix)
                .set_key_marker(key_marker.take())
                .set_version_id_marker(version_marker.take())
                .send()
                .await
                .expect("ListObjectVersions of the etcd health reports");
            versions.extend(page.versions().iter().cloned());
            if page.is_truncated() != Some(true) {
                break;
            }
            key_marker = page.next_key_marker().map(str::to_string);
            version_marker = page.next_version_id_marker().map(str::to_string);
        }
        let mut lines = Vec::new();
        for version in versions {
            let modified = version.last_modified().map_or(0, |t| t.secs());
            let (Some(key), Some(id), true) = (
                version.key(),
                version.version_id(),
                modified >= since.unix_timestamp(),
            ) else {
                continue;
            };
            let Ok(object) = s3
                .get_object()
                .bucket(BUCKET)
                .key(key)
                .version_id(id)
                .send()
                .await
            else {
                continue;
            };
            let Ok(bytes) = object.body.collect().await.map(|b| b.into_bytes()) else {
                continue;
            };
            let Ok(r) = serde_json::from_slice::<HealthReport>(&bytes) else {
                continue;
            };
            lines.push(format!(
                "{} {}{} healthy={} voters=[{}] learners=[{}] step={:?}",
                r.updated_at,
                r.instance_id,
                if r.is_leader { " (leader)" } else { "" },
                r.cluster_healthy,
                r.voting_members.join(" "),
                r.learners.join(" "),
                r.last_step,
            ));
        }
        lines.sort();
        lines
    }

    /// Like [`Self::validated`], but the wait starts only once the victim is no longer running: right after
    /// TerminateInstances, AWS may still list it.
    fn validated_after(&mut self, victim: &str) {
        let deadline = Instant::now() + PHASE_TIMEOUT;
        while self
            .cloud
            .try_instance(victim)
            .is_some_and(|r| r.stopped_at.is_none())
        {
            assert!(Instant::now() < deadline, "{victim} was never powered off");
            std::thread::sleep(Duration::from_millis(50));
        }
        self.validated();
    }

    fn replace_with(&mut self, yaml: &str) {
        let path = self.work.path().join("replace.yaml");
        std::fs::write(&path, yaml).expect("writing the spec to replace");
        let path = path.display().to_string();
        self.must(&["replace", "-f", &path]);
    }

    /// The instances powered on now.
    pub fn running_instances(&self) -> usize {
        self.cloud.powered_on().len()
    }
}

/// When the runner started an instance's nodeup (its record's `booted_at`).
fn booted_at(record: &InstanceRecord) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(
        &record.booted_at,
        &time::format_description::well_known::Rfc3339,
    )
    .ok()
}

/// Where a phase began.
struct Begun {
    at: Instant,
    /// The phase's start by the wall clock (instance records carry RFC 3339 times), and the instances before it.
    started_utc: time::OffsetDateTime,
    instances: std::collections::BTreeSet<String>,
    call_log_lines: usize,
    emulator: BTreeMap<String, Served>,
}

/// What the emulator spent on one kind of call: how many, their wall time summed over its serving threads
/// (waits for Python's GIL included), and the serving threads' own CPU time (the emulator runs on one core, so
/// CPU time is what a call costs everyone else).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Deserialize)]
#[serde(from = "(u64, f64, f64)")]
pub struct Served {
    pub count: u64,
    pub wall_s: f64,
    pub cpu_s: f64,
}

impl From<(u64, f64, f64)> for Served {
    fn from((count, wall_s, cpu_s): (u64, f64, f64)) -> Self {
        Served {
            count,
            wall_s,
            cpu_s,
        }
    }
}

impl Served {
    fn since(self, before: Served) -> Served {
        Served {
            count: self.count.saturating_sub(before.count),
            wall_s: self.wall_s - before.wall_s,
            cpu_s: self.cpu_s - before.cpu_s,
        }
    }
}

/// The emulator's request counts so far (`GET /_ballast/stats` of the launcher), by call. Empty when it does
/// not answer in time (the phase's table then shows no emulator line).
fn emulator_stats(cloud: &LocalCloud) -> BTreeMap<String, Served> {
    let addr = crate::localcloud::endpoint_addr(&cloud.record.endpoint);
    let Ok((200, body)) = crate::localcloud::http(addr, "GET", "/_ballast/stats", &[]) else {
        return BTreeMap::new();
    };
    serde_json::from_str::<BTreeMap<String, Served>>(&body).unwrap_or_default()
}

/// Waits for `child` with wait4 (std's wait does not give the rusage), collecting its output.
fn wait_with_rusage(mut child: std::process::Child) -> Ran {
    use std::io::Read;
    // Drain the pipes on threads so that a chatty child never blocks on a full pipe.
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: plain zeroed C struct filled by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our own un-waited child; status and usage point at live locals.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(
        waited,
        pid,
        "wait4 on ballast: {}",
        std::io::Error::last_os_error()
    );
    Ran {
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        // ru_maxrss is in KiB on Linux.
        peak_rss_mib: usage.ru_maxrss as f64 / 1024.0,
        cpu_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
    }
}

fn seconds(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// Samples memory on a thread: the local cloud's runner + emulator RSS, and every nodeup's peak RSS (VmHWM).
struct Sampler {
    peaks: Arc<Mutex<(f64, f64)>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(cloud: &LocalCloud) -> Sampler {
        let peaks = Arc::new(Mutex::new((0.0f64, 0.0f64)));
        let stop = Arc::new(AtomicBool::new(false));
        let cloud_pids: Vec<u32> = std::iter::once(cloud.record.runner.pid)
            .chain(cloud.record.emulator.as_ref().map(|e| e.pid))
            .collect();
        let state = cloud.state.clone();
        let thread = {
            let (peaks, stop) = (peaks.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut nodeups: Vec<u32> = Vec::new();
                let mut listed = Instant::now() - Duration::from_secs(10);
                while !stop.load(Ordering::Relaxed) {
                    if listed.elapsed() > Duration::from_secs(1) {
                        nodeups = state
                            .read_instances()
                            .unwrap_or_default()
                            .into_iter()
                            .filter(|r| r.stopped_at.is_none())
                            .filter_map(|r| r.nodeup.map(|p| p.pid))
                            .collect();
                        listed = Instant::now();
                    }
                    let cloud_mib: f64 = cloud_pids
                        .iter()
                        .filter_map(|pid| status_kib(*pid, "VmRSS:"))
                        .sum::<f64>()
                        / 1024.0;
                    let nodeup_mib = nodeups
                        .iter()
                        .filter_map(|pid| status_kib(*pid, "VmHWM:"))
                        .fold(0.0, f64::max)
                        / 1024.0;
                    if let Ok(mut p) = peaks.lock() {
                        p.0 = p.0.max(cloud_mib);
                        p.1 = p.1.max(nodeup_mib);
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
        };
        Sampler {
            peaks,
            stop,
            thread: Some(thread),
        }
    }

    fn reset(&self) {
        if let Ok(mut p) = self.peaks.lock() {
            *p = (0.0, 0.0);
        }
        // Let one sample land so that a phase's peak is never the zero of the reset.
        std::thread::sleep(Duration::from_millis(250));
    }

    fn peaks(&self) -> (f64, f64) {
        self.peaks.lock().map(|p| *p).unwrap_or((0.0, 0.0))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A `/proc/PID/status` field in KiB (`VmRSS:`, `VmHWM:`); None once the process is gone.
fn status_kib(pid: u32, field: &str) -> Option<f64> {
    let status =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// `3 min 05 s` / `42.1 s`.
pub fn human(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs >= 60.0 {
        format!("{} min {:04.1} s", (secs / 60.0).floor(), secs % 60.0)
    } else {
        format!("{secs:.1} s")
    }
}
