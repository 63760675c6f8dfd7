//! nodeup: the agent baked into every Ballast AMI, started by systemd at boot (on the local cloud, by the
//! instance runner).
//!
//! For now it does phase 1 only: it reads the instance's identity and its user-data (the boot config) from
//! IMDSv2, checks that the AWS SDK's default credential chain reaches the instance role's credentials, logs all
//! that, writes it to `ROOT/var/lib/nodeup/identity.json`, and then stays up until SIGTERM as the agent will
//! (unless `--once`). Rendering, writing, starting services and the etcd supervisor come later.

pub mod identity;
pub mod imds;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use identity::{CredentialsCheck, Identity, IdentityReport, WriteReportError};
use imds::{Imds, ImdsError};

/// Ballast's node agent.
#[derive(Debug, Parser)]
#[command(name = "nodeup", version)]
pub struct Cli {
    /// The root under which nodeup reads and writes everything (`/` on a real node).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// How long to keep retrying IMDS for each value (seconds).
    #[arg(long, default_value_t = 60)]
    pub imds_timeout_secs: u64,
    /// Exit after writing the identity instead of staying up.
    #[arg(long)]
    pub once: bool,
}

/// Failures of nodeup; each maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum NodeupError {
    /// IMDS was unreachable or refused us.
    #[error("reading the instance identity: {0}")]
    Imds(#[from] ImdsError),
    /// The instance was launched without user-data: nodeup cannot know its cluster or role.
    #[error(
        "the instance has no user-data (IMDS {0} answered 404 for /latest/user-data): it must be launched with \
         Ballast's boot config (through its launch template)"
    )]
    NoUserData(String),
    /// The identity report could not be written.
    #[error(transparent)]
    Write(#[from] WriteReportError),
    /// The async runtime could not start.
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl NodeupError {
    /// 2: IMDS, 3: no user-data, 4: writing, 1: anything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            NodeupError::Imds(_) => 2,
            NodeupError::NoUserData(_) => 3,
            NodeupError::Write(_) => 4,
            NodeupError::Runtime(_) => 1,
        }
    }
}

/// Parses the command line, runs nodeup, returns the exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Logs usually go to files (the runner's, each instance's): colours only on a terminal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(NodeupError::Runtime)
        .and_then(|rt| rt.block_on(run(&cli)));
    match result {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("{e}");
            e.exit_code()
        }
    }
}

/// Phase 1, then wait for SIGTERM (unless `--once`).
pub async fn run(cli: &Cli) -> Result<(), NodeupError> {
    let imds = Imds::from_env(Duration::from_secs(cli.imds_timeout_secs))?;
    tracing::info!(endpoint = imds.endpoint(), root = %cli.root.display(), "nodeup starting: reading identity");
    let identity = Identity::fetch(&imds).await?;
    tracing::info!(
        instance_id = %identity.instance_id,
        availability_zone = %identity.availability_zone,
        local_ipv4 = %identity.local_ipv4,
        instance_type = %identity.instance_type,
        ami_id = %identity.ami_id,
        iam_role = identity.iam_role.as_deref().unwrap_or("-"),
        "identity"
    );
    let user_data = imds
        .get_optional("/latest/user-data")
        .await?
        .ok_or_else(|| NodeupError::NoUserData(imds.endpoint().to_owned()))?;
    tracing::info!(
        bytes = user_data.len(),
        "user-data (boot config):\n{user_data}"
    );
    let credentials = check_credentials(&identity.region).await;
    match (&credentials.access_key_id, &credentials.error) {
        (Some(key), _) => {
            tracing::info!(access_key_id = %key, "AWS credentials from the default chain")
        }
        (None, Some(e)) => tracing::warn!(error = %e, "no AWS credentials from the default chain"),
        (None, None) => {}
    }
    let report = IdentityReport {
        identity,
        user_data,
        credentials,
        pid: std::process::id(),
    };
    let path = report.write(&cli.root)?;
    tracing::info!(path = %path.display(), "identity written");
    if cli.once {
        return Ok(());
    }
    // The later phases (render, write, start, report, etcd supervisor) will run here.
    wait_for_termination().await;
    tracing::info!("terminating");
    Ok(())
}

/// Resolves credentials the way every AWS client of nodeup will: through the SDK's default chain, which on an
/// instance ends at IMDS (the environment has no keys).
async fn check_credentials(region: &str) -> CredentialsCheck {
    use aws_credential_types::provider::ProvideCredentials;
    let chain = aws_config::default_provider::credentials::DefaultCredentialsChain::builder()
        .region(aws_config::Region::new(region.to_owned()))
        .build()
        .await;
    match tokio::time::timeout(Duration::from_secs(30), chain.provide_credentials()).await {
        Ok(Ok(c)) => CredentialsCheck {
            access_key_id: Some(c.access_key_id().to_owned()),
            error: None,
        },
        Ok(Err(e)) => CredentialsCheck {
            access_key_id: None,
            error: Some(e.to_string()),
        },
        Err(_) => CredentialsCheck {
            access_key_id: None,
            error: Some("timed out after 30s".into()),
        },
    }
}

async fn wait_for_termination() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}
