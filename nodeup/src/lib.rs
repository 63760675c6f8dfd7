//! nodeup: the agent baked into every Ballast AMI, started by systemd at boot (on the local cloud, by the
//! instance runner). It takes a node from IMDS and the state store to a configured node, in five steps
//! ([`boot`] runs them in order):
//!
//! 1. **identity** ([`identity`], [`imds`], [`credentials`]): the instance's identity from IMDSv2 and its boot
//!    config from user-data (bounded retries inside an overall timeout), recorded in
//!    `ROOT/var/lib/nodeup/identity.json`;
//! 2. **fetch** ([`fetch`]): the node spec from the state store, refused unless its sha256 is the boot
//!    config's, and the secrets it names;
//! 3. **render** ([`render`], pure, with the certificates planned by [`cert_plan`]; [`certs`] issues them):
//!    every file in memory, and the node's certificates issued (or kept when they still fit);
//! 4. **write** ([`write`]): only the files that differ, atomically, with mode and owner;
//! 5. **services** ([`services`]): start or restart, through systemd or the built-in supervisor, only the
//!    services whose files changed; a service whose binary is absent is reported absent.
//!
//! Then it writes its boot report ([`report`], [`ballast_state::report::NodeReport`]) to the state store and to
//! `ROOT/var/lib/nodeup/report.json`, tells systemd `READY=1` ([`notify`]), and stays up (supervising its
//! children) until SIGTERM, unless `--once`. On a control-plane node, staying up means running the etcd
//! supervisor ([`ballast_etcd::supervisor`], docs/etcd.md) for the life of the instance. Every failure stops
//! before anything is written to the node, is said in the log and in the report, and exits with its
//! [`ExitCode`] ([`error`]). docs/nodeup.md is the long form.
//!
//! The modules' layers: [`model`] (the shared types and paths) imports nothing from the crate; the steps depend
//! on it and never on [`boot`], which alone knows their order.

pub mod addons;
pub mod audit;
pub mod boot;
pub mod bootstrap;
pub mod cert_plan;
pub mod certs;
pub mod cli;
pub mod credentials;
pub mod error;
pub mod etcd_names;
pub mod fds;
pub mod fetch;
pub mod identity;
pub mod image;
pub mod imds;
pub mod logtail;
pub mod model;
pub mod notify;
pub mod render;
pub mod report;
pub mod retry;
pub mod services;
pub mod tail_publish;
pub mod termination;
pub mod volume;
pub mod write;

use std::time::Instant;

use clap::Parser;

pub use boot::{parse_boot_config, run};
pub use cli::Cli;
pub use error::{ExitCode, NodeupError};
pub use report::REPORT_FILE;

/// etcd's data dir, epoch and log on a control-plane node.
pub const ETCD_STATE_DIR: &str = model::paths::ETCD_STATE_DIR;
/// Where nodeup writes etcd's CA certificate and the member's certificates (see [`model::pki`]).
pub const ETCD_PKI_DIR: &str = model::pki::ETCD_DIR;

/// Parses the command line, runs nodeup, returns the exit code.
pub fn main() -> i32 {
    let started = Instant::now();
    let started_at = report::now_rfc3339();
    let cli = Cli::parse();
    let tail = logtail::init_logging();
    // Before anything opens a descriptor: the soft limit up to the hard one (crate::fds).
    fds::raise_nofile_limit();
    // Two workers: a control-plane node attaches etcd's volume in a task of its own while the main one issues
    // certificates and writes files (CPU and local disk, no await points), and the etcd supervisor, the services'
    // supervisor and the bootstrap service run beside each other once configured.
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(NodeupError::Runtime)
        .and_then(|rt| rt.block_on(run(&cli, &tail, started, &started_at)));
    match result {
        Ok(()) => ExitCode::Configured.code(),
        Err(e) => e.exit_code().code(),
    }
}
