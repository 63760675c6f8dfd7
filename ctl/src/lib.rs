//! `ballast`, the control CLI: keeps cluster specs in the state store and changes them safely.
//!
//! `main.rs` only calls [`run`]; `cli` holds the clap definitions, `commands` the work of each verb,
//! `error` the exit codes. Data goes to stdout, logs and progress to stderr.

mod cli;
pub mod cloud;
mod commands;
mod error;
pub mod import;
pub mod kubeconfig;
mod output;
pub mod progress;
mod reports;
pub mod roll;
pub mod toolbox;

use clap::{CommandFactory, Parser};
use tracing_subscriber::EnvFilter;

pub use cli::Cli;
pub use error::{exit_code, CommandError};

/// Runs the CLI with the process's arguments; returns the exit code.
pub fn run() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr (exit 2).
            let _ = e.print();
            return e.exit_code();
        }
    };
    let verbose = cli.verbose;
    init_logging(verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return exit_code::FAILURE;
        }
    };
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let code = match runtime.block_on(commands::dispatch(cli, &command_line)) {
        Ok(()) => 0,
        Err(e) => {
            // An error may quote the operator's input (a name, a key, a path): printed with its control
            // characters escaped, so it cannot drive the terminal.
            eprintln!(
                "error: {}",
                ballast_state::terminal::escape_controls_keeping_lines(&e.to_string())
            );
            if verbose > 0 {
                print_detail(&e);
            }
            e.exit_code()
        }
    };
    if let Some(path) = std::env::var_os(cloud::calls::CALL_LOG_ENV) {
        if let Err(e) =
            cloud::calls::append_process_calls(std::path::Path::new(&path), &command_line)
        {
            eprintln!(
                "warning: could not append the AWS call counts to {} ({}): {e}",
                std::path::Path::new(&path).display(),
                cloud::calls::CALL_LOG_ENV
            );
        }
    }
    code
}

/// Under `-v`, what an error's message leaves out: each cause, and the first one's own detail (the AWS SDK's
/// Debug text, for instance), which the message, in Ballast's words, does not repeat.
fn print_detail(error: &CommandError) {
    let first = std::error::Error::source(error);
    let mut cause = first;
    while let Some(e) = cause {
        eprintln!(
            "  caused by: {}",
            ballast_state::terminal::escape_controls_keeping_lines(&e.to_string())
        );
        cause = std::error::Error::source(e);
    }
    if let Some(e) = first {
        eprintln!(
            "  detail: {}",
            ballast_state::terminal::escape_controls_keeping_lines(&format!("{e:?}"))
        );
    }
}

/// Logs go to stderr. By default only Ballast's own warnings (and anyone's errors): the AWS SDK's and other
/// libraries' warnings are their detail, shown from `-v` on, with Ballast's progress (`info`). The Kubernetes
/// client logs every failed request as an error (`failed with error client error (Connect)`, each try while
/// `validate --wait` waits for the API): Ballast reports those failures itself, naming what it was doing, so the
/// client's own lines are shown only from `-v` on.
const DEFAULT_FILTER: &str =
    "error,kube_client=off,ballast=warn,ballast_store=warn,ballast_state=warn,\
                              ballast_common=warn,ballast_drain=warn";

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => DEFAULT_FILTER,
        1 => "info",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log redirected to a file or read by a program gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// The clap command, for completions and docs.
pub fn command() -> clap::Command {
    Cli::command()
}
