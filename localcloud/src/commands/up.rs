//! `localcloud up`: starts `localcloud run` detached (its own session, so it survives the shell), waits for its
//! ready line, prints the environment.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::env::env_exports;
use super::{down, nodeup_path, running_cloud};
use crate::cli::UpArgs;
use crate::error::{io_err, LocalCloudError, NotReadyReason};
use crate::state::StateDir;

/// How long `up` waits for the runner to say it is ready (the emulator alone takes 2-5 s).
const UP_TIMEOUT: Duration = Duration::from_secs(120);

pub(super) fn run(state: &StateDir, args: &UpArgs) -> Result<(), LocalCloudError> {
    state.create()?;
    if let Some(record) = running_cloud(state)? {
        eprintln!("localcloud: already up (runner PID {})", record.runner.pid);
        print!("{}", env_exports(state, &record));
        return Ok(());
    }
    let nodeup = nodeup_path(args.nodeup.as_deref())?;
    if state.cloud_file().exists() || state.instances_dir().exists() {
        // A previous cloud whose runner died without cleaning up (SIGKILL, reboot): stop what it left first.
        down::stop(state)?;
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
    if args.instances == crate::cli::InstanceKind::Machines {
        cmd.arg("--instances").arg("machines");
    }
    for image in &args.machine_images {
        cmd.arg("--machine-image").arg(image);
    }
    if let Some(runc) = &args.runc {
        cmd.arg("--runc").arg(runc);
    }
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    let child = cmd
        .spawn()
        .map_err(io_err("starting the local cloud's runner"))?;
    wait_ready(child).map_err(|reason| LocalCloudError::NotReady {
        reason,
        tail: tail(&log_path, 20),
        log: log_path.clone(),
    })?;
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

/// Waits for the runner's ready line on its stdout; kills it if none comes in time.
fn wait_ready(mut child: Child) -> Result<(), NotReadyReason> {
    let stdout = child.stdout.take();
    let (tx, rx) = std::sync::mpsc::channel();
    // A thread, because a pipe read has no timeout of its own.
    std::thread::spawn(move || {
        let mut line = String::new();
        if let Some(out) = stdout {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        let _ = tx.send(line);
    });
    match rx.recv_timeout(UP_TIMEOUT) {
        Ok(line) if line.starts_with("ready ") => Ok(()),
        Ok(_) => {
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            Err(NotReadyReason::RunnerExited { status })
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(NotReadyReason::Timeout(UP_TIMEOUT))
        }
    }
}

/// The last `lines` lines of a log, for an error message.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
