//! The `localcloud` command: `up`, `env`, `status`, `logs`, `down`, and the hidden `run` (the daemon `up`
//! starts in the background, and that tests run in the foreground).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use nix::sys::signal::Signal;

use crate::aws::{bootstrap_iam, IamBootstrapError, BOOTSTRAP_REQUESTS, EC2_SERVICE_USER};
use crate::emulator::{Emulator, EmulatorError, EmulatorOptions};
use crate::process::{group_members, is_listening, kill_group, ProcessRecord};
use crate::runner::{Runner, RunnerOptions, DEFAULT_POLL_INTERVAL};
use crate::state::{
    now_rfc3339, CloudRecord, InstanceRecord, StateDir, StateError, DEFAULT_NETWORK_CIDR, REGION,
};

/// How long `up` waits for the runner to say it is ready (the emulator alone takes 2-5 s).
const UP_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `down` gives the runner to power instances off and stop the emulator before SIGKILL.
const DOWN_GRACE: Duration = Duration::from_secs(10);

/// Ballast's local cloud: AWS emulated on this machine, with instances that really boot nodeup.
#[derive(Debug, Parser)]
#[command(name = "localcloud", version)]
pub struct Cli {
    /// The local cloud's state directory [default: ${XDG_STATE_HOME:-~/.local/state}/ballast/localcloud].
    #[arg(long, global = true, env = crate::state::STATE_DIR_ENV)]
    pub state_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Start the emulator and the instance runner in the background; print the environment to use
    /// (`eval "$(localcloud up)"`).
    Up(UpArgs),
    /// Print the environment for AWS SDK clients and ballast: `eval "$(localcloud env)"`.
    Env,
    /// Show the local cloud, its instances and their processes.
    Status {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Print an instance's nodeup log.
    Logs {
        /// Instance id.
        instance: String,
        /// Keep printing what is appended.
        #[arg(short, long)]
        follow: bool,
    },
    /// Stop everything `up` started (by PID); idempotent.
    Down,
    /// Run the local cloud in the foreground (what `up` starts in the background).
    #[command(hide = true)]
    Run(RunArgs),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// Do not enforce IAM policies (for debugging a policy problem; least privilege is then not tested).
    #[arg(long)]
    pub no_iam: bool,
    /// The nodeup binary every instance runs [default: next to this binary].
    #[arg(long)]
    pub nodeup: Option<PathBuf>,
    /// The AWS emulator's port on 127.0.0.1 [default: a free one].
    #[arg(long)]
    pub port: Option<u16>,
    /// The port of every instance's IMDS endpoint (on the instance's private IP) [default: a free one].
    #[arg(long)]
    pub imds_port: Option<u16>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub up: UpArgs,
    /// Stop (and power every instance off) when stdin reaches EOF: tests hold the other end of the pipe, and
    /// the kernel closes it however the test process dies.
    #[arg(long)]
    pub exit_with_stdin: bool,
    /// How often to poll EC2, in milliseconds.
    #[arg(long, default_value_t = DEFAULT_POLL_INTERVAL.as_millis() as u64)]
    pub poll_interval_ms: u64,
}

/// Failures of a `localcloud` command; each maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum LocalCloudError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Emulator(#[from] EmulatorError),
    #[error(transparent)]
    Iam(#[from] IamBootstrapError),
    /// The nodeup binary does not exist.
    #[error("nodeup binary not found at {0}: build it (cargo build -p nodeup) or pass --nodeup")]
    NodeupMissing(PathBuf),
    /// `run` found another live runner on the same state directory.
    #[error(
        "a local cloud is already running from {dir} (runner PID {pid}): `localcloud down` first"
    )]
    AlreadyRunning { dir: PathBuf, pid: u32 },
    /// The background runner did not become ready.
    #[error("the local cloud did not start: {reason}\n--- last lines of {log} ---\n{tail}")]
    NotReady {
        reason: String,
        log: PathBuf,
        tail: String,
    },
    /// No such instance in the state directory.
    #[error("no instance {0} in this local cloud (see `localcloud status`)")]
    UnknownInstance(String),
    /// Something is still running or listening after `down`.
    #[error("after down, still alive: {0}")]
    Leftovers(String),
    /// Other I/O.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl LocalCloudError {
    /// Exit codes: 1 usage/state, 2 not ready, 3 emulator or IAM, 4 leftovers after down.
    pub fn exit_code(&self) -> i32 {
        match self {
            LocalCloudError::NotReady { .. } => 2,
            LocalCloudError::Emulator(_) | LocalCloudError::Iam(_) => 3,
            LocalCloudError::Leftovers(_) => 4,
            _ => 1,
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LocalCloudError {
    let what = what.into();
    move |source| LocalCloudError::Io { what, source }
}

/// Parses the command line, runs the command, returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Logs usually go to files (the runner's, each instance's): colours only on a terminal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run_command(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("localcloud: {e}");
            e.exit_code()
        }
    }
}

fn run_command(cli: Cli) -> Result<(), LocalCloudError> {
    let state = StateDir::resolve(cli.state_dir)?;
    match cli.command {
        Cmd::Up(args) => up(&state, &args),
        Cmd::Env => {
            print!("{}", env_exports(&state, &state.read_cloud()?));
            Ok(())
        }
        Cmd::Status { output } => status(&state, output),
        Cmd::Logs { instance, follow } => logs(&state, &instance, follow),
        Cmd::Down => {
            let was_up = down(&state)?;
            eprintln!(
                "localcloud: {}",
                if was_up { "down" } else { "already down" }
            );
            Ok(())
        }
        Cmd::Run(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(io_err("starting the async runtime"))?;
            runtime.block_on(run(&state, &args))
        }
    }
}

/// The nodeup binary: `--nodeup`, else `nodeup` next to this binary.
fn nodeup_path(explicit: Option<&Path>) -> Result<PathBuf, LocalCloudError> {
    let path = match explicit {
        Some(p) => std::path::absolute(p).map_err(io_err("resolving --nodeup"))?,
        None => std::env::current_exe()
            .map_err(io_err("finding the localcloud binary"))?
            .with_file_name("nodeup"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(LocalCloudError::NodeupMissing(path))
    }
}

/// Whether the cloud recorded in `state` is running (its runner is alive).
fn running_cloud(state: &StateDir) -> Result<Option<CloudRecord>, LocalCloudError> {
    match state.read_cloud() {
        Ok(record) if record.runner.is_alive() => Ok(Some(record)),
        Ok(_) | Err(StateError::NotUp(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `localcloud up`: starts `localcloud run` detached (its own session, so it survives the shell), waits for its
/// ready line, prints the environment.
fn up(state: &StateDir, args: &UpArgs) -> Result<(), LocalCloudError> {
    state.create()?;
    if let Some(record) = running_cloud(state)? {
        eprintln!("localcloud: already up (runner PID {})", record.runner.pid);
        print!("{}", env_exports(state, &record));
        return Ok(());
    }
    let nodeup = nodeup_path(args.nodeup.as_deref())?;
    if state.cloud_file().exists() || state.instances_dir().exists() {
        // A previous cloud whose runner died without cleaning up (SIGKILL, reboot): stop what it left first.
        down(state)?;
    }
    let log_path = state.runner_log();
    let log = std::fs::File::create(&log_path)
        .map_err(io_err(format!("creating {}", log_path.display())))?;
    let exe = std::env::current_exe().map_err(io_err("finding the localcloud binary"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--state-dir")
        .arg(state.root())
        .arg("run")
        .arg("--nodeup")
        .arg(&nodeup)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log);
    if args.no_iam {
        cmd.arg("--no-iam");
    }
    if let Some(port) = args.port {
        cmd.arg("--port").arg(port.to_string());
    }
    if let Some(port) = args.imds_port {
        cmd.arg("--imds-port").arg(port.to_string());
    }
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(io_err("starting the local cloud's runner"))?;
    let stdout = child.stdout.take();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        if let Some(out) = stdout {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        let _ = tx.send(line);
    });
    let not_ready = |reason: String| LocalCloudError::NotReady {
        reason,
        tail: tail(&log_path, 20),
        log: log_path.clone(),
    };
    match rx.recv_timeout(UP_TIMEOUT) {
        Ok(line) if line.starts_with("ready ") => {}
        Ok(_) => {
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            return Err(not_ready(format!("the runner exited ({status})")));
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(not_ready(format!("not ready within {UP_TIMEOUT:?}")));
        }
    }
    let record = state.read_cloud()?;
    eprintln!(
        "localcloud: up: AWS emulator {} (IAM {}), runner PID {}, state in {}",
        record.endpoint,
        if record.iam_enforced {
            "enforced"
        } else {
            "not enforced"
        },
        record.runner.pid,
        state.root().display()
    );
    print!("{}", env_exports(state, &record));
    Ok(())
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Shell-quotes a value for `eval`.
fn sh_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// The environment `localcloud env` prints: the operator's admin keys, the emulator, the region, and the
/// network CIDR Ballast should default to on the local cloud.
pub fn env_exports(state: &StateDir, record: &CloudRecord) -> String {
    let vars = [
        ("AWS_ACCESS_KEY_ID", record.admin.access_key_id.as_str()),
        (
            "AWS_SECRET_ACCESS_KEY",
            record.admin.secret_access_key.as_str(),
        ),
        ("AWS_REGION", record.region.as_str()),
        ("AWS_DEFAULT_REGION", record.region.as_str()),
        ("AWS_ENDPOINT_URL", record.endpoint.as_str()),
        ("BALLAST_NETWORK_CIDR", record.network_cidr.as_str()),
        (crate::state::STATE_DIR_ENV, &state.root().to_string_lossy()),
    ];
    let mut out = String::new();
    // Anything that would make an SDK prefer other credentials than the exported keys.
    out.push_str("unset AWS_SESSION_TOKEN AWS_PROFILE AWS_DEFAULT_PROFILE\n");
    for (name, value) in vars {
        out.push_str(&format!("export {name}={}\n", sh_quote(value)));
    }
    out
}

/// `localcloud run`: emulator, IAM bootstrap, record, ready line, then the runner until a signal (or stdin EOF).
async fn run(state: &StateDir, args: &RunArgs) -> Result<(), LocalCloudError> {
    state.create()?;
    if let Some(record) = running_cloud(state)? {
        return Err(LocalCloudError::AlreadyRunning {
            dir: state.root().to_owned(),
            pid: record.runner.pid,
        });
    }
    let nodeup = nodeup_path(args.up.nodeup.as_deref())?;
    // Instance ids start over with a fresh emulator: the previous cloud's instance directories are stale.
    state.clear_instances()?;
    let iam_enforced = !args.up.no_iam;
    let options = EmulatorOptions {
        port: args.up.port,
        iam_enforce_after: iam_enforced.then_some(BOOTSTRAP_REQUESTS),
        ec2_service_user: Some(EC2_SERVICE_USER.to_owned()),
        log_file: Some(state.emulator_log()),
        work_dir: Some(state.emulator_dir()),
        // The emulator dies with the runner, however the runner dies.
        exit_with_parent: true,
    };
    let emulator = tokio::task::block_in_place(|| Emulator::start(&options))?;
    let endpoint = emulator.endpoint().to_owned();
    let keys = bootstrap_iam(&endpoint, REGION).await?;
    let imds_port = match args.up.imds_port {
        Some(p) => p,
        None => crate::emulator::free_port().map_err(io_err("finding a free port for IMDS"))?,
    };
    let runner_record =
        ProcessRecord::of(std::process::id()).ok_or_else(|| LocalCloudError::Io {
            what: "reading our own /proc entry".into(),
            source: std::io::Error::other("missing"),
        })?;
    let record = CloudRecord {
        endpoint: endpoint.clone(),
        region: REGION.to_owned(),
        network_cidr: DEFAULT_NETWORK_CIDR.to_owned(),
        iam_enforced,
        admin: keys.admin.clone(),
        imds_port,
        runner: runner_record,
        emulator: emulator.pid().and_then(ProcessRecord::of),
        nodeup: nodeup.clone(),
        started_at: now_rfc3339(),
    };
    state.write_cloud(&record)?;
    let runner = Runner::new(RunnerOptions {
        state: state.clone(),
        endpoint: endpoint.clone(),
        region: REGION.to_owned(),
        admin: keys.admin,
        ec2_service: keys.ec2_service,
        nodeup,
        imds_port,
        poll_interval: Duration::from_millis(args.poll_interval_ms.max(10)),
    })
    .map_err(io_err("starting the instance spawner"))?;
    tracing::info!(%endpoint, imds_port, iam_enforced, "local cloud ready");
    {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "ready {endpoint}");
        let _ = stdout.flush();
    }
    let emulator_process = record.emulator;
    let stop = async move {
        tokio::select! {
            () = shutdown_signal(args.exit_with_stdin) => {}
            () = process_exit(emulator_process) => {
                tracing::error!("the AWS emulator exited (see emulator.log): stopping the local cloud");
            }
        }
    };
    runner.run(stop).await;
    // Only forget the cloud if the record is still ours (a later `up` may have replaced it after a SIGKILL).
    if matches!(state.read_cloud(), Ok(r) if r.runner == runner_record) {
        state.remove_cloud()?;
    }
    drop(emulator);
    tracing::info!("local cloud stopped");
    Ok(())
}

/// Completes when `process` is gone (never when it is `None`). Without the emulator the cloud is useless, and a
/// runner polling a dead endpoint forever would only hide that.
async fn process_exit(process: Option<ProcessRecord>) {
    let Some(process) = process else {
        return std::future::pending().await;
    };
    while process.is_alive() {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Completes on SIGTERM, SIGINT, or (with `exit_with_stdin`) EOF on stdin.
async fn shutdown_signal(exit_with_stdin: bool) {
    use tokio::signal::unix::{signal, SignalKind};
    let (eof_tx, eof_rx) = tokio::sync::oneshot::channel::<()>();
    if exit_with_stdin {
        // A plain thread: tokio's stdin is a blocking read on its blocking pool anyway.
        std::thread::spawn(move || {
            let mut sink = [0u8; 4096];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            let _ = eof_tx.send(());
        });
    }
    let eof = async {
        if exit_with_stdin {
            let _ = eof_rx.await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot listen for signals; stopping only on stdin EOF");
        eof.await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
        () = eof => tracing::info!("stdin closed"),
    }
}

/// One line of `status`.
#[derive(Debug, serde::Serialize)]
struct InstanceStatus<'a> {
    #[serde(flatten)]
    record: &'a InstanceRecord,
    nodeup_alive: bool,
    /// PIDs in the instance's process group.
    processes: Vec<u32>,
}

fn status(state: &StateDir, output: Output) -> Result<(), LocalCloudError> {
    let cloud = match state.read_cloud() {
        Ok(r) => Some(r),
        Err(StateError::NotUp(_)) => None,
        Err(e) => return Err(e.into()),
    };
    let records = state.read_instances()?;
    let instances: Vec<InstanceStatus> = records
        .iter()
        .map(|record| InstanceStatus {
            record,
            nodeup_alive: record.nodeup.is_some_and(|p| p.is_alive()),
            processes: record
                .nodeup
                .map(|p| group_members(p.pid))
                .unwrap_or_default(),
        })
        .collect();
    let runner_alive = cloud.as_ref().is_some_and(|c| c.runner.is_alive());
    match output {
        Output::Json => {
            let value = serde_json::json!({
                "state_dir": state.root(),
                "up": runner_alive,
                "endpoint": cloud.as_ref().map(|c| &c.endpoint),
                "iam_enforced": cloud.as_ref().map(|c| c.iam_enforced),
                "imds_port": cloud.as_ref().map(|c| c.imds_port),
                "runner": cloud.as_ref().map(|c| serde_json::json!({"pid": c.runner.pid, "alive": c.runner.is_alive()})),
                "emulator": cloud.as_ref().and_then(|c| c.emulator).map(|e| serde_json::json!({"pid": e.pid, "alive": e.is_alive()})),
                "instances": instances,
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&value).unwrap_or_default()
            );
        }
        Output::Table => {
            match &cloud {
                Some(c) => println!(
                    "local cloud {}: {} | emulator {} (PID {}, {}) | runner PID {} ({}) | IAM {} | IMDS port {}",
                    state.root().display(),
                    if runner_alive { "up" } else { "DOWN (runner dead: run `localcloud down`)" },
                    c.endpoint,
                    c.emulator.map(|e| e.pid.to_string()).unwrap_or_else(|| "?".into()),
                    alive(c.emulator.is_some_and(|e| e.is_alive())),
                    c.runner.pid,
                    alive(c.runner.is_alive()),
                    if c.iam_enforced { "enforced" } else { "off" },
                    c.imds_port,
                ),
                None => println!("local cloud {}: down", state.root().display()),
            }
            if instances.is_empty() {
                println!("no instances");
                return Ok(());
            }
            println!(
                "{:<21} {:<11} {:<15} {:<11} {:<28} {:<18} {:<8} {:<6} PROCESSES",
                "INSTANCE", "STATE", "PRIVATE-IP", "AZ", "IMDS", "ASG", "NODEUP", ""
            );
            for i in &instances {
                println!(
                    "{:<21} {:<11} {:<15} {:<11} {:<28} {:<18} {:<8} {:<6} {}",
                    i.record.instance_id,
                    i.record.state,
                    i.record.private_ip,
                    i.record.availability_zone,
                    i.record.imds_endpoint,
                    i.record.autoscaling_group.as_deref().unwrap_or("-"),
                    i.record
                        .nodeup
                        .map(|p| p.pid.to_string())
                        .unwrap_or_else(|| "-".into()),
                    alive(i.nodeup_alive),
                    if i.processes.is_empty() {
                        i.record
                            .nodeup_exit
                            .clone()
                            .unwrap_or_else(|| "none".into())
                    } else {
                        i.processes
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(",")
                    },
                );
            }
        }
    }
    Ok(())
}

fn alive(yes: bool) -> &'static str {
    if yes {
        "alive"
    } else {
        "dead"
    }
}

fn logs(state: &StateDir, instance: &str, follow: bool) -> Result<(), LocalCloudError> {
    let path = state.instance_log(instance);
    let mut file = std::fs::File::open(&path)
        .map_err(|_| LocalCloudError::UnknownInstance(instance.to_owned()))?;
    let mut stdout = std::io::stdout().lock();
    loop {
        std::io::copy(&mut file, &mut stdout)
            .map_err(io_err(format!("reading {}", path.display())))?;
        let _ = stdout.flush();
        if !follow {
            return Ok(());
        }
        // The file position stays where the copy stopped: the next copy prints only what was appended.
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `localcloud down`: SIGTERM to the runner (it powers instances off and its emulator exits with it), SIGKILL
/// after a grace period, then by PID anything recorded that survived; then checks nothing listens any more.
/// Returns whether there was a cloud to stop.
fn down(state: &StateDir) -> Result<bool, LocalCloudError> {
    let cloud = match state.read_cloud() {
        Ok(r) => Some(r),
        Err(StateError::NotUp(_)) => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(c) = &cloud {
        if c.runner.signal(Signal::SIGTERM) {
            let deadline = Instant::now() + DOWN_GRACE;
            while c.runner.is_alive() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if c.runner.signal(Signal::SIGKILL) {
                eprintln!("localcloud: the runner did not stop within {DOWN_GRACE:?}: killed");
            }
        }
        if let Some(e) = c.emulator {
            // It exits by itself when the runner's pipe closes; make sure.
            let deadline = Instant::now() + Duration::from_secs(3);
            while e.is_alive() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            e.signal(Signal::SIGKILL);
        }
    }
    // Instances whose processes survived a runner that was SIGKILLed (its children die with it through
    // PDEATHSIG, but not their own children).
    let records = state.read_instances()?;
    for r in &records {
        if let Some(p) = r.nodeup {
            // The leader's PID reused by another process: that group is not ours.
            let recycled =
                crate::process::proc_stat(p.pid).is_some_and(|s| s.start_ticks != p.start_ticks);
            if !recycled && !group_members(p.pid).is_empty() {
                let _ = kill_group(p.pid);
            }
        }
    }
    let mut leftovers = Vec::new();
    if let Some(c) = &cloud {
        std::thread::sleep(Duration::from_millis(100));
        if c.runner.is_alive() {
            leftovers.push(format!("runner PID {}", c.runner.pid));
        }
        if c.emulator.is_some_and(|e| e.is_alive()) {
            leftovers.push("the AWS emulator".to_owned());
        }
        if let Some(addr) = c.endpoint.strip_prefix("http://") {
            if is_listening(addr) {
                leftovers.push(format!("something listens on {addr}"));
            }
        }
    }
    for r in &records {
        if let Some(p) = r.nodeup {
            let members = group_members(p.pid);
            if !members.is_empty() {
                leftovers.push(format!("{}: processes {members:?}", r.instance_id));
            }
        }
        if r.stopped_at.is_none() {
            if let Some(addr) = r.imds_endpoint.strip_prefix("http://") {
                if is_listening(addr) {
                    leftovers.push(format!("{}: IMDS still listens on {addr}", r.instance_id));
                }
            }
        }
    }
    if !leftovers.is_empty() {
        return Err(LocalCloudError::Leftovers(leftovers.join("; ")));
    }
    state.remove_cloud()?;
    Ok(cloud.is_some())
}
