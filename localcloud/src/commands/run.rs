//! `localcloud run`: emulator, IAM bootstrap, record, ready line, then the runner until a signal (or stdin EOF).
//! What `up` starts in the background, and what tests run in the foreground.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{nodeup_path, running_cloud};
use crate::aws::{bootstrap_iam, BOOTSTRAP_REQUESTS, EC2_SERVICE_USER};
use crate::cli::{InstanceKind, RunArgs, UpArgs};
use crate::emulator::{free_port, Emulator, EmulatorOptions};
use crate::error::{io_err, LocalCloudError};
use crate::machines::{Machines, MachinesRecord};
use crate::process::ProcessRecord;
use crate::runner::{Runner, RunnerOptions};
use crate::state::{now_rfc3339, AccessKey, CloudRecord, StateDir, DEFAULT_NETWORK_CIDR, REGION};

/// `localcloud run`: emulator, IAM bootstrap, record, ready line, then the runner until a signal (or stdin EOF).
pub(super) async fn run(state: &StateDir, args: &RunArgs) -> Result<(), LocalCloudError> {
    state.create()?;
    if let Some(record) = running_cloud(state)? {
        return Err(LocalCloudError::AlreadyRunning {
            dir: state.root().to_owned(),
            pid: record.runner.pid,
        });
    }
    let nodeup = nodeup_path(args.up.nodeup.as_deref())?;
    let machine_args = machine_args(&args.up)?;
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
        None => free_port().map_err(io_err("finding a free port for IMDS"))?,
    };
    let machines = match machine_args {
        Some((images, runc)) => {
            Some(start_machines(state, images, runc, &endpoint, &keys.admin).await?)
        }
        None => None,
    };
    let runner_record =
        ProcessRecord::of(std::process::id()).ok_or(LocalCloudError::OwnProcessUnreadable)?;
    let record = CloudRecord {
        endpoint: endpoint.clone(),
        region: REGION.to_owned(),
        // Machines have networks of their own: Ballast's default VPC CIDR works as on AWS.
        network_cidr: match &machines {
            Some(_) => ballast_state::defaults::DEFAULT_NETWORK_CIDR.to_owned(),
            None => DEFAULT_NETWORK_CIDR.to_owned(),
        },
        iam_enforced,
        admin: keys.admin.clone(),
        imds_port,
        runner: runner_record,
        emulator: emulator.pid().and_then(ProcessRecord::of),
        nodeup: nodeup.clone(),
        started_at: now_rfc3339(),
        machines: machines.as_ref().map(|m| m.record().clone()),
    };
    state.write_cloud(&record)?;
    let names = machines.as_ref().map(|m| m.names());
    let runner = Runner::new(RunnerOptions {
        state: state.clone(),
        endpoint: endpoint.clone(),
        region: REGION.to_owned(),
        admin: keys.admin,
        ec2_service: keys.ec2_service,
        nodeup,
        imds_port,
        poll_interval: Duration::from_millis(args.poll_interval_ms.max(10)),
        machines,
    })
    .map_err(io_err("starting the instance spawner"))?;
    // Machines' load balancers forward (process-mode instances are reached on their loopback addresses).
    let _balancers = record.machines.as_ref().zip(names).map(|(m, names)| {
        let octet = 240 + u8::try_from(std::process::id() % 15).unwrap_or(0);
        crate::balancers::Balancers::start(
            state.clone(),
            &endpoint,
            REGION,
            &record.admin,
            m.namespace.clone(),
            octet,
            names,
        )
    });
    // Machines' VPCs route to instances as their route tables say (kubenet's routes to each node's pods).
    let _routes = record.machines.as_ref().map(|m| {
        crate::machine::routes::VpcRoutes::start(
            state.clone(),
            &endpoint,
            REGION,
            &record.admin,
            m.namespace.clone(),
        )
    });
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

/// What `--instances machines` runs: the images (AMI name -> baked root) and runc.
type MachineArgs = (BTreeMap<String, PathBuf>, PathBuf);

/// The images and runc of `--instances machines`, checked before anything starts; `None` for processes (which
/// take neither).
fn machine_args(args: &UpArgs) -> Result<Option<MachineArgs>, LocalCloudError> {
    if args.instances == InstanceKind::Processes {
        if !args.machine_images.is_empty() || args.runc.is_some() {
            return Err(LocalCloudError::Usage(
                "--machine-image and --runc take effect only with --instances machines".into(),
            ));
        }
        return Ok(None);
    }
    if args.machine_images.is_empty() {
        return Err(LocalCloudError::Usage(
            "--instances machines needs at least one --machine-image NAME=DIR (a root images/install.sh baked)"
                .into(),
        ));
    }
    let mut images = BTreeMap::new();
    for given in &args.machine_images {
        let Some((name, dir)) = given
            .split_once('=')
            .filter(|(n, d)| !n.is_empty() && !d.is_empty())
        else {
            return Err(LocalCloudError::Usage(format!(
                "--machine-image {given:?}: expected NAME=DIR"
            )));
        };
        let dir = std::path::absolute(dir).map_err(io_err(format!("resolving {dir}")))?;
        if !dir.is_dir() {
            return Err(LocalCloudError::Usage(format!(
                "--machine-image {name}: {} is not a directory (bake one with images/install.sh)",
                dir.display()
            )));
        }
        if images.insert(name.to_string(), dir).is_some() {
            return Err(LocalCloudError::Usage(format!(
                "--machine-image {name} is given twice"
            )));
        }
    }
    let runc = match &args.runc {
        Some(path) => std::path::absolute(path).map_err(io_err("resolving --runc"))?,
        None => on_path("runc").ok_or_else(|| {
            LocalCloudError::Usage(
                "--instances machines needs runc: none on PATH (pass --runc; tools/build-go builds one)"
                    .into(),
            )
        })?,
    };
    Ok(Some((images, runc)))
}

/// `program` in a directory of `PATH`.
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}

/// Registers each machine image as an AMI and makes the machines' runtime and router namespace.
async fn start_machines(
    state: &StateDir,
    images: BTreeMap<String, PathBuf>,
    runc: PathBuf,
    endpoint: &str,
    admin: &AccessKey,
) -> Result<Arc<Machines>, LocalCloudError> {
    let ec2 = aws_sdk_ec2::Client::new(&crate::aws::sdk_config(endpoint, REGION, admin));
    let mut by_ami = BTreeMap::new();
    for (name, dir) in images {
        let registered = ec2
            .register_image()
            .name(&name)
            .description(format!(
                "Ballast local cloud machine image {}",
                dir.display()
            ))
            .root_device_name("/dev/xvda")
            .send()
            .await
            .map_err(|e| LocalCloudError::RegisterImage {
                name: name.clone(),
                message: crate::aws::error_chain(&e),
            })?;
        let ami = registered
            .image_id()
            .ok_or_else(|| LocalCloudError::RegisterImage {
                name: name.clone(),
                message: "RegisterImage returned no image id".into(),
            })?
            .to_string();
        tracing::info!(%ami, %name, image = %dir.display(), "machine image registered");
        by_ami.insert(ami, dir);
    }
    let pid = std::process::id();
    let record = MachinesRecord {
        namespace: format!("ballast-{pid}"),
        cgroup: format!("/ballast-localcloud/{pid}"),
        runc_root: state.root().join("runc"),
        runc,
        images: by_ami,
    };
    let emulator = endpoint
        .strip_prefix("http://")
        .and_then(|addr| addr.parse().ok())
        .ok_or_else(|| {
            LocalCloudError::Usage(format!(
                "the emulator's endpoint {endpoint} is not http://IP:PORT"
            ))
        })?;
    let machines =
        tokio::task::block_in_place(|| Machines::new(record, state.machines_dir(), emulator))?;
    Ok(Arc::new(machines))
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
