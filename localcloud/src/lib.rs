//! Ballast's local cloud: AWS emulated over HTTP (moto, patched by the project's launcher), one IMDSv2
//! endpoint per emulated instance, and an instance runner that boots `nodeup` for every running instance.
//!
//! - [`emulator`]: starts the AWS emulator.
//! - [`aws`]: SDK configuration and the IAM bootstrap (admin and EC2-service users) done before enforcement.
//! - [`imds`]: the per-instance IMDSv2 endpoint, with real role credentials from the emulator's STS.
//! - [`runner`]: polls EC2 and boots/powers off instances.
//! - [`process`]: process identity, process-group kills, spawning that cannot outlive the runner.
//! - [`state`]: the state directory and its records.
//! - [`cli`]: the `localcloud` command.
//!
//! See docs/local-cloud.md for how to use it and what it can and cannot emulate.

pub mod aws;
pub mod cli;
pub mod emulator;
pub mod imds;
pub mod process;
pub mod runner;
pub mod state;
