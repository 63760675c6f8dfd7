//! `localcloud run`: emulator, IAM bootstrap, record, ready line, then the runner until a signal (or stdin EOF).
//! What `up` starts in the background, and what tests run in the foreground.

use std::io::{Read, Write};
use std::time::Duration;

use super::{nodeup_path, running_cloud};
use crate::aws::{bootstrap_iam, BOOTSTRAP_REQUESTS, EC2_SERVICE_USER};
use crate::cli::RunArgs;
use crate::emulator::{free_port, Emulator, EmulatorOptions};
use crate::error::{io_err, LocalCloudError};
use crate::process::ProcessRecord;
use crate::runner::{Runner, RunnerOptions};
use crate::state::{now_rfc3339, CloudRecord, StateDir, DEFAULT_NETWORK_CIDR, REGION};

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
    let runner_record =
        ProcessRecord::of(std::process::id()).ok_or(LocalCloudError::OwnProcessUnreadable)?;
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
