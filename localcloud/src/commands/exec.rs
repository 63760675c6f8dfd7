//! `localcloud exec`: a command inside a running machine, through the cloud's own runc (`runc --root ... exec`),
//! so it runs in the machine's namespaces, root and cgroup and ends with it. Its stdin, stdout and stderr are
//! this command's; it exits with the command's status.

use crate::error::{io_err, LocalCloudError};
use crate::state::StateDir;

pub(super) fn run(
    state: &StateDir,
    instance: &str,
    argv: &[String],
) -> Result<(), LocalCloudError> {
    let record = state
        .read_instance(instance)
        .map_err(|e| LocalCloudError::UnknownInstance {
            instance: instance.to_owned(),
            source: std::io::Error::other(e.to_string()),
        })?;
    let Some(machine) = record.machine else {
        return Err(LocalCloudError::Usage(format!(
            "instance {instance} is a process of this host, not a machine: `exec` enters machines (`localcloud up \
             --instances machines`); see its processes with `localcloud status`"
        )));
    };
    if let Some(stopped) = record.stopped_at {
        return Err(LocalCloudError::Usage(format!(
            "instance {instance} was powered off at {stopped}: there is nothing running to enter"
        )));
    }
    let cloud = super::running_cloud(state)?.ok_or_else(|| {
        LocalCloudError::Usage(format!(
            "the local cloud at {} is not running: `localcloud up` first",
            state.root().display()
        ))
    })?;
    let Some(machines) = cloud.machines else {
        return Err(LocalCloudError::Usage(format!(
            "the local cloud at {} runs no machines, yet instance {instance} names machine {machine}: its state \
             directory is inconsistent",
            state.root().display()
        )));
    };
    let status = std::process::Command::new(&machines.runc)
        .arg("--root")
        .arg(&machines.runc_root)
        .args(["exec", &machine])
        .args(argv)
        .status()
        .map_err(io_err(format!("running {} exec", machines.runc.display())))?;
    // The command's own status, as `docker exec` gives it; a signal's death is 128 + the signal, as a shell says.
    let code = status.code().unwrap_or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        128 + status.signal().unwrap_or(0)
    });
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}
