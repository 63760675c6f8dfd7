//! `localcloud logs`: an instance's nodeup log, optionally followed; a machine's journal (every unit's, nodeup's
//! among them), read from its root volume with `journalctl`, so it is there after the machine is off too.

use std::io::Write;
use std::time::Duration;

use crate::error::{io_err, LocalCloudError};
use crate::state::StateDir;

pub(super) fn run(state: &StateDir, instance: &str, follow: bool) -> Result<(), LocalCloudError> {
    if let Ok(record) = state.read_instance(instance) {
        if record.machine.is_some() {
            return journal(state, instance, follow);
        }
    }
    let path = state.instance_log(instance);
    let mut file =
        std::fs::File::open(&path).map_err(|source| LocalCloudError::UnknownInstance {
            instance: instance.to_owned(),
            source,
        })?;
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

/// A machine's journal through the host's `journalctl --directory`.
fn journal(state: &StateDir, instance: &str, follow: bool) -> Result<(), LocalCloudError> {
    let dir = crate::machines::journal_dir(&state.machines_dir(), instance);
    let mut cmd = std::process::Command::new("journalctl");
    cmd.arg("--directory").arg(&dir).arg("--no-pager");
    if follow {
        cmd.arg("--follow");
    }
    let status = cmd.status().map_err(io_err(format!(
        "running journalctl (systemd) to read {}",
        dir.display()
    )))?;
    if status.success() {
        Ok(())
    } else {
        Err(LocalCloudError::Usage(format!(
            "journalctl could not read {}: {status}",
            dir.display()
        )))
    }
}
