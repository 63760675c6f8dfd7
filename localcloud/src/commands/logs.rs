//! `localcloud logs`: an instance's nodeup log, optionally followed.

use std::io::Write;
use std::time::Duration;

use crate::error::{io_err, LocalCloudError};
use crate::state::StateDir;

pub(super) fn run(state: &StateDir, instance: &str, follow: bool) -> Result<(), LocalCloudError> {
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
