//! Ballast's local cloud: AWS emulated over HTTP (moto, patched by the project's launcher), one IMDSv2
//! endpoint per emulated instance, and an instance runner that boots `nodeup` for every running instance.
//!
//! - [`emulator`]: starts the AWS emulator.
//! - [`aws`]: SDK configuration and the IAM bootstrap (admin and EC2-service users) done before enforcement.
//! - [`imds`]: the per-instance IMDSv2 endpoint, with real role credentials from the emulator's STS.
//! - [`runner`]: polls EC2 and boots/powers off instances.
//! - [`process`]: process identity, process-group kills, spawning that cannot outlive the runner.
//! - [`state`]: the state directory and its records.
//! - [`machine`]: instances that are machines (runc, systemd as PID 1, an overlay root per instance).
//! - [`balancers`]: network load balancers that forward, from the host to their targets (machines only).
//! - [`machines`]: the runner's machine mode: booting an instance as a machine, its volumes, its shutdown.
//! - [`volumes`]: EBS volumes as directories, bind-mounted into the roots of the instances they are attached to.
//! - [`cli`] (clap only), `commands` (each verb's work) and [`error`] (exit codes): the `localcloud` command,
//!   whose `main.rs` only calls [`run`].
//!
//! See docs/local-cloud.md for how to use it and what it can and cannot emulate.

pub mod aws;
pub mod balancers;
pub mod cli;
mod commands;
pub mod emulator;
pub mod error;
pub mod imds;
pub mod machine;
pub mod machines;
pub mod namespace;
pub mod process;
pub mod runner;
pub mod state;
pub mod volumes;

use clap::Parser;

pub use error::LocalCloudError;

/// Parses the command line, runs the command, returns the process exit code.
pub fn run() -> i32 {
    let cli = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Logs usually go to files (the runner's, each instance's): colours only on a terminal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match commands::dispatch(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("localcloud: {e}");
            e.exit_code()
        }
    }
}
