//! The work of each `localcloud` verb, and what several of them share: finding the nodeup binary and the
//! running cloud.

mod down;
mod env;
mod exec;
mod logs;
mod run;
mod status;
mod up;

use std::path::{Path, PathBuf};

use crate::cli::{Cli, Cmd};
use crate::error::{io_err, LocalCloudError};
use crate::state::{CloudRecord, StateDir, StateError};

/// Runs the parsed command.
pub fn dispatch(cli: Cli) -> Result<(), LocalCloudError> {
    let state = StateDir::resolve(cli.state_dir)?;
    match cli.command {
        Cmd::Up(args) => up::run(&state, &args),
        Cmd::Env => env::run(&state),
        Cmd::Status { output } => status::run(&state, output),
        Cmd::Logs { instance, follow } => logs::run(&state, &instance, follow),
        Cmd::Exec { instance, command } => exec::run(&state, &instance, &command),
        Cmd::Down => down::run(&state),
        Cmd::Run(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(io_err("starting the async runtime"))?;
            runtime.block_on(run::run(&state, &args))
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

/// The cloud recorded in `state`, if there is a record (its runner may be dead).
fn recorded_cloud(state: &StateDir) -> Result<Option<CloudRecord>, LocalCloudError> {
    match state.read_cloud() {
        Ok(record) => Ok(Some(record)),
        Err(StateError::NotUp(_)) => Ok(None),
        Err(e) => Err(e.into()),
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
