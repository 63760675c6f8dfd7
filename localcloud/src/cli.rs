//! The `localcloud` command line: `up`, `env`, `status`, `logs`, `exec`, `down`, and the hidden `run` (the daemon `up`
//! starts in the background, and that tests run in the foreground). Clap definitions only: each verb's work is
//! in `commands`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::runner::DEFAULT_POLL_INTERVAL;

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
    /// Run a command inside a running machine (`--instances machines`), in its namespaces, root and cgroup, as
    /// `docker exec` does for a kind node: `localcloud exec i-0abc -- systemctl stop kubelet`. Exits with the
    /// command's status.
    Exec {
        /// Instance id.
        instance: String,
        /// The command and its arguments.
        #[arg(required = true, last = true)]
        command: Vec<String>,
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
    /// How instances run: `processes` (nodeup as a process group of this host, the VPC inside 127.0.0.0/8: light,
    /// for scale and fast tests) or `machines` (each instance a machine booted from a `--machine-image`, on its
    /// VPC's own network: docs/local-cloud.md).
    #[arg(long, value_enum, default_value = "processes")]
    pub instances: InstanceKind,
    /// With `--instances machines`: an image machines boot, registered as an AMI named NAME; DIR is the root
    /// filesystem `images/install.sh` baked. Repeat for more images.
    #[arg(long = "machine-image", value_name = "NAME=DIR")]
    pub machine_images: Vec<String>,
    /// With `--instances machines`: the runc that runs them [default: runc on PATH].
    #[arg(long, value_name = "PATH")]
    pub runc: Option<PathBuf>,
}

/// How a local cloud runs its instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InstanceKind {
    Processes,
    Machines,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub up: UpArgs,
    /// Stop (and power every instance off) when stdin reaches EOF: tests hold the other end of the pipe, and
    /// the kernel closes it however the test process dies.
    #[arg(long)]
    pub exit_with_stdin: bool,
    /// How long one poll of EC2 waits for a change before looking anyway, in milliseconds (10..=1500: the
    /// emulator holds a waiting poll at most 1.5 s). A change is seen at once whatever this is.
    #[arg(long, default_value_t = DEFAULT_POLL_INTERVAL.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(10..=1500))]
    pub poll_interval_ms: u64,
}
