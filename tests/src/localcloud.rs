//! A whole local cloud per test: `localcloud run --exit-with-stdin` in a temporary state directory, on free
//! ports, with its own emulator, runner and instances.
//!
//! Teardown is layered so that nothing outlives a test, however it ends:
//! - [`LocalCloud`]'s `Drop` closes the runner's stdin (it powers every instance off and stops its emulator),
//!   waits, then SIGKILLs the runner and any recorded instance process group that is left;
//! - if the test process dies without unwinding (SIGKILL, abort), the kernel closes that stdin pipe: the runner
//!   sees EOF and does the same; its nodeup children also carry PDEATHSIG=SIGKILL and the emulator watches its own
//!   stdin, held by the runner.
//!
//! A failing test keeps its state directory (logs of the runner, emulator and every instance) and prints where;
//! `BALLAST_KEEP_CLOUD=1` keeps it after any run.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use localcloud::process::{group_members, kill_group, ProcessRecord};
use localcloud::state::{CloudRecord, InstanceRecord, StateDir};
use nodeup::identity::IdentityReport;

/// A bound only a hang reaches: the slowest command the tests run (`validate cluster --wait 5m`, a roll) ends well
/// within it.
pub const BALLAST_COMMAND_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a local cloud may take to be ready (the emulator alone: 2-5 s on a busy 2-core machine).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

pub use crate::binaries::{bench_binaries, binaries, Binaries, SHARED_BUILD_ARGS};

/// Options of a test's local cloud.
#[derive(Debug, Clone)]
pub struct Options {
    /// Turn IAM enforcement off.
    pub no_iam: bool,
    /// Run this instead of nodeup on every instance (e.g. a wrapper script that adds child processes).
    pub nodeup: Option<PathBuf>,
    pub poll_interval_ms: u64,
    /// Run instances as machines (`--instances machines`) booting these images, by AMI name, with this runc.
    pub machines: Option<MachineOptions>,
}

/// What `--instances machines` takes.
#[derive(Debug, Clone)]
pub struct MachineOptions {
    /// (AMI name, baked root) pairs: `--machine-image NAME=DIR`.
    pub images: Vec<(String, PathBuf)>,
    pub runc: PathBuf,
}

impl MachineOptions {
    /// The local cloud's image of the default release ([`crate::local_ami::baked`]) under the AMI name the
    /// default spec asks for, run by the runc built here.
    pub fn default_release() -> Self {
        Self::releases(&[ballast_state::defaults::DEFAULT_KUBERNETES_VERSION])
    }

    /// The local cloud's images of each release of `versions` (`1.36.4`), each under the AMI name a spec of that
    /// version asks for, run by the runc built here: an upgrade's two releases.
    pub fn releases(versions: &[&str]) -> Self {
        let images = versions
            .iter()
            .map(|version| {
                let minor = version
                    .rsplit_once('.')
                    .map(|(minor, _)| minor)
                    .expect("a minor version");
                (
                    ballast_state::defaults::default_image(version),
                    crate::local_ami::baked(minor),
                )
            })
            .collect();
        MachineOptions {
            images,
            runc: crate::go_builds::built("runc").join("runc"),
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            no_iam: false,
            nodeup: None,
            poll_interval_ms: 100,
            machines: None,
        }
    }
}

/// Writes `dir/nodeup-env`, a stand-in for nodeup that runs the real one with `env` added to its environment, for
/// [`Options::nodeup`]: how a test gives every instance's nodeup a setting it reads from its environment (the
/// runner starts instances with a cleared one). `dir` must outlive the cloud.
pub fn nodeup_with_env(dir: &Path, env: &[(&str, &str)]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let mut script = String::from("#!/bin/sh\n");
    for (name, value) in env {
        assert!(
            name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b)),
            "{name}={value}: only plain names and values go into the wrapper's shell line"
        );
        script.push_str(&format!("export {name}={value}\n"));
    }
    script.push_str(&format!("exec '{}' \"$@\"\n", binaries().nodeup.display()));
    let path = dir.join("nodeup-env");
    std::fs::write(&path, script).expect("writing the nodeup wrapper");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("making the nodeup wrapper executable");
    path
}

/// How a test terminates an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// EC2's default: a graceful OS shutdown (the runner SIGTERMs nodeup and waits for it).
    Graceful,
    /// `SkipOsShutdown=true`: the instance's processes are SIGKILLed at once.
    PowerCut,
}

/// A running local cloud, stopped when dropped.
pub struct LocalCloud {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    pub state: StateDir,
    pub record: CloudRecord,
    dir: Option<tempfile::TempDir>,
    /// Holds this cloud's VPC CIDR against other clouds on the machine ([`reserve_network_cidr`]); released
    /// after the teardown, when the instances that used its addresses are gone.
    network_lock: Option<std::fs::File>,
}

impl std::fmt::Debug for LocalCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCloud")
            .field("state", &self.state.root())
            .finish()
    }
}

/// A VPC CIDR of its own for each running local cloud on this machine (`127.X.0.0/16`, X in 100..=239), handed
/// to `ballast` as `BALLAST_NETWORK_CIDR`: clouds that run at the same time must not hand out the same private
/// IPs, or their instances' etcd (which binds `IP:2379` and `IP:2380`) and bootstrap service (`IP:3988`) collide.
/// Clouds of other test processes count too (test binaries run side by side, or two suites on one machine): each
/// X is held by an exclusive `flock` on `$TMPDIR/ballast-e2e-cidrs/127.X`, kept open in the [`LocalCloud`] and
/// released when it is dropped or its process dies. The search starts at a per-process offset so that most
/// first tries succeed.
fn reserve_network_cidr() -> (String, std::fs::File) {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FIRST: u32 = 100;
    const COUNT: u32 = 140;
    let dir = std::env::temp_dir().join("ballast-e2e-cidrs");
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("creating {} for the CIDR locks: {e}", dir.display()));
    let start = NEXT.fetch_add(1, Ordering::Relaxed) + std::process::id();
    for k in 0..COUNT {
        let x = FIRST + (start + k) % COUNT;
        let path = dir.join(format!("127.{x}"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("opening the CIDR lock {}: {e}", path.display()));
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if locked {
            return (format!("127.{x}.0.0/16"), file);
        }
    }
    panic!(
        "all {COUNT} local-cloud VPC CIDRs (127.{FIRST}-{}.0.0/16) are held by running clouds (locks in {})",
        FIRST + COUNT - 1,
        dir.display()
    );
}

/// Panics unless the emulator's venv exists: tests that need it fail loudly, never skip.
pub fn require_emulator_venv() {
    let python = localcloud::emulator::python_path();
    assert!(
        python.exists(),
        "the AWS emulator's venv is missing ({} does not exist): run tools/install-deps, or set {} to a venv's \
         python with moto[server]==5.2.5",
        python.display(),
        localcloud::emulator::PYTHON_ENV
    );
}

impl LocalCloud {
    pub fn start() -> Self {
        Self::start_with(Options::default())
    }

    pub fn start_with(options: Options) -> Self {
        require_emulator_venv();
        let bins = binaries();
        let dir = tempfile::Builder::new()
            .prefix("ballast-localcloud-")
            .tempdir()
            .expect("a temporary state directory");
        let state = StateDir::new(dir.path());
        let log = std::fs::File::create(state.runner_log()).expect("creating the runner's log");
        let mut cmd = Command::new(&bins.localcloud);
        cmd.arg("--state-dir")
            .arg(state.root())
            .arg("run")
            .arg("--exit-with-stdin")
            .arg("--poll-interval-ms")
            .arg(options.poll_interval_ms.to_string())
            .arg("--nodeup")
            .arg(options.nodeup.as_ref().unwrap_or(&bins.nodeup))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log);
        if options.no_iam {
            cmd.arg("--no-iam");
        }
        if let Some(machines) = &options.machines {
            cmd.args(["--instances", "machines", "--runc"])
                .arg(&machines.runc);
            for (name, dir) in &machines.images {
                cmd.arg("--machine-image")
                    .arg(format!("{name}={}", dir.display()));
            }
        }
        let mut child = cmd.spawn().expect("spawning localcloud run");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let mut cloud = LocalCloud {
            child: Some(child),
            stdin,
            state: state.clone(),
            record: placeholder_record(),
            dir: Some(dir),
            network_lock: None,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        match rx.recv_timeout(READY_TIMEOUT) {
            Ok(line) if line.starts_with("ready ") => {}
            other => panic!(
                "the local cloud did not start ({other:?}); runner log:\n{}\nemulator log tail:\n{}",
                std::fs::read_to_string(state.runner_log()).unwrap_or_default(),
                tail(&state.emulator_log(), 30),
            ),
        }
        cloud.record = state.read_cloud().expect("the runner's record after ready");
        // Machines have networks of their own (the record's CIDR is Ballast's default, in every cloud); processes
        // share the host's loopback, so each cloud takes a CIDR no other running cloud holds.
        if cloud.record.machines.is_none() {
            let (cidr, lock) = reserve_network_cidr();
            cloud.record.network_cidr = cidr;
            cloud.network_lock = Some(lock);
        }
        cloud
    }

    /// The environment an operator's `ballast` runs with on this cloud (admin keys, the emulator's endpoint, no
    /// IMDS), with `state` as its state store. Apply it after `env_clear()`.
    pub fn operator_env(&self, state: &str) -> Vec<(&'static str, String)> {
        vec![
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("AWS_ACCESS_KEY_ID", self.record.admin.access_key_id.clone()),
            (
                "AWS_SECRET_ACCESS_KEY",
                self.record.admin.secret_access_key.clone(),
            ),
            ("AWS_REGION", self.record.region.clone()),
            ("AWS_ENDPOINT_URL", self.record.endpoint.clone()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
            ("BALLAST_NETWORK_CIDR", self.record.network_cidr.clone()),
            ("BALLAST_STATE", state.to_string()),
            // A cloud of machines names its load balancers' host addresses here (empty: none).
            (
                "BALLAST_HOSTS_FILE",
                self.record
                    .machines
                    .as_ref()
                    .map(|_| {
                        localcloud::balancers::hosts_file(&self.state)
                            .display()
                            .to_string()
                    })
                    .unwrap_or_default(),
            ),
            // The operator's report cache (README, `validate cluster`), kept with the cloud and gone with it.
            (
                "BALLAST_CACHE_DIR",
                self.dir().join("operator-cache").display().to_string(),
            ),
        ]
    }

    /// `ballast` as this cloud's operator with `state` as its state store, and nothing else from the test's
    /// environment (`crate::operator::ballast_cli` is this with the tests' store), bounded by
    /// [`BALLAST_COMMAND_TIMEOUT`].
    pub fn ballast_command(&self, state: &str) -> assert_cmd::Command {
        let mut cmd = assert_cmd::Command::new(&binaries().ballast);
        cmd.env_clear()
            .envs(self.operator_env(state))
            .timeout(BALLAST_COMMAND_TIMEOUT);
        cmd
    }

    /// Runs `ballast ARGS` as the operator of this cloud (its keys, endpoint and VPC CIDR; `state` as the state
    /// store): whether it succeeded, and its stdout then stderr.
    pub fn ballast(&self, state: &str, args: &[&str]) -> (bool, String) {
        let out = self
            .ballast_command(state)
            .args(args)
            .env("HOME", self.dir())
            .output()
            .expect("running ballast");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// The bytes of `bucket/key`, or None when it cannot be read (not written yet).
    pub async fn s3_object(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        let out = self
            .s3()
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .ok()?;
        Some(out.body.collect().await.ok()?.into_bytes().to_vec())
    }

    /// The text of `bucket/key`; panics with AWS's error when it cannot be read.
    pub async fn s3_text(&self, bucket: &str, key: &str) -> String {
        let object = self
            .s3()
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "GetObject {bucket}/{key}: {}",
                    aws_sdk_s3::error::DisplayErrorContext(e)
                )
            });
        let bytes = object
            .body
            .collect()
            .await
            .expect("object body")
            .into_bytes();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The boot report instance `id` stored for `cluster` in the state store `s3://<bucket>/<prefix>` (signed by
    /// its node, or plain), or None when it has written none yet: found by listing, as `ballast` finds it, since
    /// its key is named by its writer (`reports/<role-id>:<id>.json`, `ballast_state::layout::ClusterPaths::report`).
    pub async fn stored_report(
        &self,
        bucket: &str,
        prefix: &str,
        cluster: &str,
        id: &str,
    ) -> Option<ballast_state::report_signature::StoredReport> {
        let key = self.report_key(bucket, prefix, cluster, id).await?;
        Some(crate::reports::parse(&self.s3_object(bucket, &key).await?))
    }

    /// The key of instance `id`'s boot report (as [`LocalCloud::stored_report`] finds it): of several (its role
    /// was replaced while it ran), the last written.
    pub async fn report_key(
        &self,
        bucket: &str,
        prefix: &str,
        cluster: &str,
        id: &str,
    ) -> Option<String> {
        use ballast_state::layout::{instance_of_writer, writer_of_key, ClusterPaths};
        let reports = format!("{prefix}{}", ClusterPaths::new(cluster).reports_prefix());
        let listed = self
            .s3()
            .list_objects_v2()
            .bucket(bucket)
            .prefix(&reports)
            .send()
            .await
            .ok()?;
        listed
            .contents()
            .iter()
            .filter(|o| {
                o.key()
                    .and_then(|k| writer_of_key(k, &reports))
                    .is_some_and(|w| instance_of_writer(w) == id)
            })
            .max_by_key(|o| o.last_modified().map(|t| (t.secs(), t.subsec_nanos())))
            .and_then(|o| o.key().map(str::to_owned))
    }

    /// SDK configuration with the operator's (admin) keys.
    pub fn sdk_config(&self) -> aws_config::SdkConfig {
        localcloud::aws::sdk_config(
            &self.record.endpoint,
            &self.record.region,
            &self.record.admin,
        )
    }

    /// Terminates `ids` in one TerminateInstances call: gracefully (EC2's default: the OS shuts down, nodeup
    /// gets SIGTERM) or with a power cut (`SkipOsShutdown=true`: everything SIGKILLed at once).
    pub async fn terminate(&self, ids: &[String], how: Termination) {
        self.ec2()
            .terminate_instances()
            .set_instance_ids(Some(ids.to_vec()))
            .skip_os_shutdown(how == Termination::PowerCut)
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "TerminateInstances {ids:?} ({how:?}): {}",
                    aws_sdk_ec2::error::DisplayErrorContext(e)
                )
            });
    }

    pub fn ec2(&self) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::new(&self.sdk_config())
    }

    pub fn autoscaling(&self) -> aws_sdk_autoscaling::Client {
        aws_sdk_autoscaling::Client::new(&self.sdk_config())
    }

    pub fn iam(&self) -> aws_sdk_iam::Client {
        aws_sdk_iam::Client::new(&self.sdk_config())
    }

    /// S3 with the operator's keys (path-style: bucket subdomains of a loopback address do not resolve).
    pub fn s3(&self) -> aws_sdk_s3::Client {
        let config = aws_sdk_s3::config::Builder::from(&self.sdk_config())
            .force_path_style(true)
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }

    /// What an operator does on AWS before `ballast create cluster`: a state bucket named `bucket`, and the AMI
    /// the default spec names (`ballast-k8s-1.36-debian-12`), registered as the Packer template would.
    pub async fn prepare_for_ballast(&self, bucket: &str) {
        crate::aws::create_bucket(&self.s3(), bucket).await;
        crate::aws::secure_bucket(&self.s3(), bucket).await;
        self.register_release_image(ballast_state::defaults::DEFAULT_KUBERNETES_VERSION)
            .await;
    }

    /// Registers the image of Kubernetes `version`, the release an upgrade moves to (the default release's is
    /// `prepare_for_ballast`'s), for clusters created at the default and upgraded.
    pub async fn register_upgrade_release_image(&self, version: &str) {
        self.register_release_image(version).await;
    }

    /// Registers the image a group of Kubernetes `version` defaults to (`ballast-k8s-<minor>-debian-12`).
    async fn register_release_image(&self, version: &str) {
        let name = ballast_state::defaults::default_image(version);
        // A cloud of machines registered its images itself (`--machine-image`).
        let registered = self
            .ec2()
            .describe_images()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("name")
                    .values(&name)
                    .build(),
            )
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "DescribeImages {name}: {}",
                    aws_sdk_ec2::error::DisplayErrorContext(e)
                )
            });
        if !registered.images().is_empty() {
            return;
        }
        self.ec2()
            .register_image()
            .name(&name)
            .root_device_name("/dev/xvda")
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "RegisterImage {name}: {}",
                    aws_sdk_ec2::error::DisplayErrorContext(e)
                )
            });
    }

    /// Every instance the runner booted, oldest first.
    pub fn instances(&self) -> Vec<InstanceRecord> {
        self.state
            .read_instances()
            .expect("reading instance records")
    }

    /// Instances the runner has booted and not powered off.
    pub fn powered_on(&self) -> Vec<InstanceRecord> {
        self.instances()
            .into_iter()
            .filter(|r| r.stopped_at.is_none())
            .collect()
    }

    /// The record of an instance, once the runner booted it.
    pub fn try_instance(&self, id: &str) -> Option<InstanceRecord> {
        self.state.read_instance(id).ok()
    }

    /// The record of an instance the runner booted.
    pub fn instance(&self, id: &str) -> InstanceRecord {
        self.state.read_instance(id).expect("an instance record")
    }

    /// What nodeup wrote under the instance's root, once it has.
    pub fn identity(&self, record: &InstanceRecord) -> Option<IdentityReport> {
        IdentityReport::read(&record.root)
    }

    /// Polls `check` every 50 ms until it returns `Some`, or panics after `timeout` with `what` and the state.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&Self) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = check(self) {
                return v;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what}; instances:\n{:#?}",
                    self.instances()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until exactly `n` instances are powered on and every one's nodeup has written its identity.
    pub async fn wait_for_booted(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Vec<(InstanceRecord, IdentityReport)> {
        self.wait_for(
            &format!("{n} booted instances with an identity file"),
            timeout,
            |c| {
                let on = c.powered_on();
                if on.len() != n {
                    return None;
                }
                on.into_iter()
                    .map(|r| c.identity(&r).map(|i| (r, i)))
                    .collect::<Option<Vec<_>>>()
            },
        )
        .await
    }

    /// Runs `localcloud ARGS --state-dir DIR` and returns (success, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String, String) {
        run_cli(self.state.root(), args)
    }

    /// Stops the cloud now; returns what survived (empty when the teardown was clean).
    pub fn shutdown(&mut self) -> Vec<String> {
        let mut leftovers = Vec::new();
        // EOF on its stdin: the runner powers instances off, its emulator exits with it.
        drop(self.stdin.take());
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        leftovers.push(format!("runner {} ignored stdin EOF: killed", child.id()));
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
        if let Some(emulator) = self.record.emulator {
            let deadline = Instant::now() + Duration::from_secs(5);
            while emulator.is_alive() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if emulator.signal(nix::sys::signal::Signal::SIGKILL) {
                leftovers.push(format!(
                    "emulator {} outlived the runner: killed",
                    emulator.pid
                ));
            }
        }
        if let Some(machines) = &self.record.machines {
            let left = localcloud::machines::leftovers(
                machines,
                &self.state.machines_dir(),
                &self.state.volumes_dir(),
            );
            if !left.is_empty() {
                leftovers.push(format!(
                    "machines outlived the runner: {}; cleaned up",
                    left.join(", ")
                ));
                localcloud::machines::clean_up(
                    machines,
                    &self.state.machines_dir(),
                    &self.state.volumes_dir(),
                );
            }
        }
        for record in self.state.read_instances().unwrap_or_default() {
            if let Some(p) = record.nodeup {
                let members = group_members(p.pid);
                if !members.is_empty() {
                    leftovers.push(format!(
                        "{}: processes {members:?} outlived the runner: killed",
                        record.instance_id
                    ));
                    let _ = kill_group(p.pid);
                }
            }
        }
        leftovers
    }

    /// The state directory (kept after the test when it failed).
    pub fn dir(&self) -> &Path {
        self.state.root()
    }
}

impl Drop for LocalCloud {
    fn drop(&mut self) {
        let leftovers = self.shutdown();
        if !leftovers.is_empty() {
            eprintln!("local cloud teardown: {}", leftovers.join("; "));
        }
        // BALLAST_KEEP_CLOUD=1 keeps it after a passing run too (benchmarks: read the instances' logs).
        let asked = std::env::var_os("BALLAST_KEEP_CLOUD").is_some_and(|v| v == "1");
        if std::thread::panicking() || asked {
            if let Some(dir) = self.dir.take() {
                let kept = dir.keep();
                eprintln!("local cloud state (logs) kept in {}", kept.display());
            }
        }
    }
}

fn placeholder_record() -> CloudRecord {
    CloudRecord {
        endpoint: String::new(),
        region: String::new(),
        network_cidr: String::new(),
        iam_enforced: false,
        admin: localcloud::state::AccessKey {
            access_key_id: String::new(),
            secret_access_key: String::new(),
        },
        imds_port: 0,
        runner: ProcessRecord {
            pid: 0,
            start_ticks: 0,
        },
        emulator: None,
        nodeup: PathBuf::new(),
        started_at: String::new(),
        machines: None,
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs the `localcloud` binary with `--state-dir DIR ARGS`: (success, stdout, stderr).
pub fn run_cli(state_dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(&binaries().localcloud)
        .arg("--state-dir")
        .arg(state_dir)
        .args(args)
        .env_remove("BALLAST_LOCALCLOUD_DIR")
        .output()
        .expect("running localcloud");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A raw HTTP/1.1 exchange (no client library: the tests need to send exactly the headers IMDS judges).
/// Returns (status, body), or the connection error.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n"
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {text:?}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// `ip:port` of an `http://ip:port` endpoint.
pub fn endpoint_addr(endpoint: &str) -> SocketAddr {
    endpoint
        .trim_start_matches("http://")
        .parse()
        .unwrap_or_else(|e| panic!("{endpoint} is not http://IP:PORT: {e}"))
}

/// A network for one test: a VPC `127.N.0.0/16` with one subnet per AZ (`127.N.K.0/24`, K = 1..).
/// Each test uses its own N, so parallel tests' instances never share a private IP.
#[derive(Debug, Clone)]
pub struct Network {
    pub vpc_id: String,
    /// (subnet id, AZ), in AZ order.
    pub subnets: Vec<(String, String)>,
}

impl Network {
    pub async fn create(ec2: &aws_sdk_ec2::Client, second_octet: u8, azs: &[&str]) -> Self {
        let vpc_id = ec2
            .create_vpc()
            .cidr_block(format!("127.{second_octet}.0.0/16"))
            .send()
            .await
            .expect("CreateVpc")
            .vpc
            .and_then(|v| v.vpc_id)
            .expect("a VPC id");
        let mut subnets = Vec::new();
        for (k, az) in azs.iter().enumerate() {
            let id = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(format!("127.{second_octet}.{}.0/24", k + 1))
                .availability_zone(*az)
                .send()
                .await
                .expect("CreateSubnet")
                .subnet
                .and_then(|s| s.subnet_id)
                .expect("a subnet id");
            subnets.push((id, (*az).to_owned()));
        }
        Network { vpc_id, subnets }
    }

    pub fn subnet_ids(&self) -> Vec<String> {
        self.subnets.iter().map(|(id, _)| id.clone()).collect()
    }
}

/// Creates a role that EC2 may assume (trust: `ec2.amazonaws.com`, as Ballast's node roles), with one inline
/// policy, and an instance profile of the same name holding it. Returns the profile's name.
pub async fn create_instance_role(iam: &aws_sdk_iam::Client, name: &str, policy: &str) -> String {
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    iam.create_role()
        .role_name(name)
        .assume_role_policy_document(trust)
        .send()
        .await
        .expect("CreateRole");
    iam.put_role_policy()
        .role_name(name)
        .policy_name(name)
        .policy_document(policy)
        .send()
        .await
        .expect("PutRolePolicy");
    iam.create_instance_profile()
        .instance_profile_name(name)
        .send()
        .await
        .expect("CreateInstanceProfile");
    iam.add_role_to_instance_profile()
        .instance_profile_name(name)
        .role_name(name)
        .send()
        .await
        .expect("AddRoleToInstanceProfile");
    name.to_owned()
}

/// PIDs of the live processes in an instance's process group.
pub fn instance_processes(record: &InstanceRecord) -> Vec<u32> {
    record
        .nodeup
        .map(|p| group_members(p.pid))
        .unwrap_or_default()
}

/// Asserts that reading `bucket/key` with `s3` (a role's credentials) is refused by the emulator's IAM with
/// AccessDenied; `who` names the reader in the failure.
pub async fn assert_s3_read_denied(s3: &aws_sdk_s3::Client, bucket: &str, key: &str, who: &str) {
    let err = s3
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .expect_err(key);
    let code = err
        .as_service_error()
        .and_then(aws_sdk_s3::error::ProvideErrorMetadata::code);
    assert_eq!(
        code,
        Some("AccessDenied"),
        "{who} reads {key}: {}",
        aws_sdk_s3::error::DisplayErrorContext(&err)
    );
}

/// The terminating lifecycle actions waiting now, as the emulator lists them (`GET /_ballast/lifecycle-actions`,
/// not an AWS API): (instance id, token) each. `None` when the emulator does not answer.
pub fn lifecycle_actions(endpoint: &str) -> Option<Vec<(String, String)>> {
    let (code, body) = http(
        endpoint_addr(endpoint),
        "GET",
        "/_ballast/lifecycle-actions",
        &[],
    )
    .ok()?;
    if code != 200 {
        return None;
    }
    let listed: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(
        listed["actions"]
            .as_array()?
            .iter()
            .filter_map(|a| {
                Some((
                    a["instance_id"].as_str()?.to_string(),
                    a["lifecycle_action_token"].as_str()?.to_string(),
                ))
            })
            .collect(),
    )
}
