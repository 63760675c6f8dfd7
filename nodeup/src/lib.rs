//! nodeup: the agent baked into every Ballast AMI, started by systemd at boot (on the local cloud, by the
//! instance runner). It takes a node from IMDS and the state store to a configured node, in five steps:
//!
//! 1. **identity** ([`identity`], [`imds`]): the instance's identity from IMDSv2 and its boot config from
//!    user-data (bounded retries inside an overall timeout), recorded in `ROOT/var/lib/nodeup/identity.json`;
//! 2. **fetch** ([`fetch`]): the node spec from the state store, refused unless its sha256 is the boot
//!    config's, and the secrets it names;
//! 3. **render** ([`render`], pure; [`certs`]): every file in memory, and the node's certificates issued (or
//!    kept when they still fit);
//! 4. **write** ([`write`]): only the files that differ, atomically, with mode and owner;
//! 5. **services** ([`services`]): start or restart, through systemd or the built-in supervisor, only the
//!    services whose files changed; a service whose binary is absent is reported absent.
//!
//! Then it writes its boot report ([`ballast_state::report::NodeReport`]) to the state store and to
//! `ROOT/var/lib/nodeup/report.json`, tells systemd `READY=1`, and stays up (supervising its children) until
//! SIGTERM, unless `--once`. On a control-plane node, staying up means running the etcd supervisor
//! ([`ballast_etcd::supervisor`], docs/etcd.md) for the life of the instance. Every failure stops before anything is written to the node, and is said in the
//! log and in the report. docs/nodeup.md is the long form.

pub mod certs;
pub mod fetch;
pub mod identity;
pub mod image;
pub mod imds;
pub mod logtail;
pub mod render;
pub mod services;
pub mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_etcd::peers::Ec2Peers;
use ballast_etcd::process::EtcdTls;
use ballast_etcd::supervisor::{Supervisor as EtcdSupervisor, SupervisorConfig};
use ballast_state::layout::ClusterPaths;
use ballast_state::node::BootConfig;
use ballast_state::report::{NodeReport, Phase, Step, StepTiming};
use ballast_state::store::{Precondition, StateStore};
use clap::Parser;

use fetch::FetchError;
use identity::{CredentialsCheck, Identity, IdentityReport, WriteReportError};
use imds::{Imds, ImdsError};
use logtail::LogTail;
use render::{NodeFacts, RenderError};
use services::{ServiceManager, ServiceMode, Supervisor, Systemd};
use write::WriteFileError;

/// Where the boot report is kept on the node, relative to `--root`.
pub const REPORT_FILE: &str = "var/lib/nodeup/report.json";

/// Ballast's node agent.
#[derive(Debug, Clone, Parser)]
#[command(name = "nodeup", version)]
pub struct Cli {
    /// The root under which nodeup writes everything (`/` on a real node); nothing outside it is touched.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// How long to keep retrying IMDS for each value (seconds).
    #[arg(long, default_value_t = 60)]
    pub imds_timeout_secs: u64,
    /// How long to keep retrying the state store, overall (seconds).
    #[arg(long, env = "NODEUP_STORE_TIMEOUT_SECS", default_value_t = 120)]
    pub store_timeout_secs: u64,
    /// How services are started: systemd, the built-in supervisor, or auto (systemd when it runs and the root
    /// is `/`).
    #[arg(long, env = "NODEUP_SERVICES", value_enum, default_value_t = ServiceMode::Auto)]
    pub services: ServiceMode,
    /// Exit once configured instead of staying up (the supervisor's children are stopped; a control-plane
    /// node's etcd supervisor does not run).
    #[arg(long)]
    pub once: bool,
    /// The etcd binary a control-plane node runs [default: /usr/local/bin/etcd, the AMI's, else
    /// /usr/bin/etcd].
    #[arg(long, env = "NODEUP_ETCD_BINARY")]
    pub etcd_binary: Option<PathBuf>,
    /// The etcdctl binary (snapshot restores) [default: next to etcd].
    #[arg(long, env = "NODEUP_ETCDCTL_BINARY")]
    pub etcdctl_binary: Option<PathBuf>,
}

impl Cli {
    /// The etcd binary: the flag, else the AMI's (`/usr/local/bin`), else Debian's (`/usr/bin`).
    fn etcd_binaries(&self) -> (PathBuf, PathBuf) {
        let etcd = self.etcd_binary.clone().unwrap_or_else(|| {
            let baked = PathBuf::from("/usr/local/bin/etcd");
            if baked.is_file() {
                baked
            } else {
                PathBuf::from("/usr/bin/etcd")
            }
        });
        let etcdctl = self
            .etcdctl_binary
            .clone()
            .unwrap_or_else(|| etcd.with_file_name("etcdctl"));
        (etcd, etcdctl)
    }
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
    /// The user-data is not a boot config.
    #[error("the user-data is not a Ballast boot config: {0}")]
    BadBootConfig(String),
    /// The identity report, or a node file, could not be written.
    #[error(transparent)]
    Write(#[from] WriteReportError),
    #[error(transparent)]
    WriteFile(#[from] WriteFileError),
    /// The node spec or its secrets could not be fetched, or were refused.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// Rendering the node's files failed.
    #[error("rendering the node's files: {0}")]
    Render(#[from] RenderError),
    /// Issuing the node's certificates failed.
    #[error("issuing the node's certificates: {0}")]
    Certs(#[from] certs::IssueCertError),
    /// Services whose binaries exist did not start.
    #[error("services failed to start: {0}")]
    Services(String),
    /// The AMI does not carry the components the node spec needs.
    #[error(transparent)]
    Image(#[from] image::ImageError),
    /// The async runtime could not start.
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The node spec's etcd settings are unusable (e.g. a backup interval that does not parse).
    #[error("the node spec's etcd settings: {0}")]
    EtcdSettings(#[source] ballast_etcd::backup::BackupError),
}

impl NodeupError {
    /// 2 IMDS, 3 no user-data, 4 writing, 5 bad boot config, 6 state store, 7 tampered node spec, 8 rendering
    /// or certificates, 9 services, 10 an AMI that does not carry the node spec's components, 1 anything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            NodeupError::Imds(_) => 2,
            NodeupError::NoUserData(_) => 3,
            NodeupError::Write(_) | NodeupError::WriteFile(_) => 4,
            NodeupError::BadBootConfig(_) => 5,
            NodeupError::Fetch(FetchError::Tampered { .. }) => 7,
            NodeupError::Fetch(_) => 6,
            NodeupError::Render(_) | NodeupError::Certs(_) => 8,
            NodeupError::Services(_) => 9,
            NodeupError::Image(_) => 10,
            NodeupError::EtcdSettings(_) => 8,
            NodeupError::Runtime(_) => 1,
        }
    }
}

/// Parses the command line, runs nodeup, returns the exit code.
pub fn main() -> i32 {
    let started = Instant::now();
    let started_at = now_rfc3339();
    let cli = Cli::parse();
    let tail = init_logging();
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(NodeupError::Runtime)
        .and_then(|rt| rt.block_on(run(&cli, &tail, started, &started_at)));
    match result {
        Ok(()) => 0,
        Err(e) => e.exit_code(),
    }
}

fn init_logging() -> LogTail {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let tail = LogTail::default();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Logs usually go to files (the runner's, each instance's): colours only on a terminal.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(tail.clone())
                .with_ansi(false)
                .with_target(false),
        )
        .try_init();
    tail
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// What a run carries from step to step, for its report.
struct Run {
    report: NodeReport,
    store: Option<StateStore>,
    cluster: Option<String>,
    manager: Option<Box<dyn ServiceManager>>,
    /// On a control-plane node: the etcd supervisor to run once configured, and the instance's region.
    etcd: Option<(SupervisorConfig, String)>,
}

/// Configures the node, reports, then waits for SIGTERM (unless `--once`).
pub async fn run(
    cli: &Cli,
    tail: &LogTail,
    started: Instant,
    started_at: &str,
) -> Result<(), NodeupError> {
    let mut state = Run {
        report: NodeReport::new("unknown", env!("CARGO_PKG_VERSION"), started_at),
        store: None,
        cluster: None,
        manager: None,
        etcd: None,
    };
    let result = configure(cli, &mut state).await;
    match &result {
        Ok(()) => {
            state.report.phase = Phase::Configured;
            tracing::info!(millis = started.elapsed().as_millis() as u64, "configured");
        }
        Err(e) => {
            state.report.phase = Phase::Failed;
            let mut chain = vec![e.to_string()];
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                let text = cause.to_string();
                if !chain.iter().any(|c| c.contains(&text)) {
                    chain.push(text);
                }
                source = cause.source();
            }
            state.report.errors = chain;
            tracing::error!("{e}");
        }
    }
    state.report.total_millis = started.elapsed().as_millis() as u64;
    state.report.finished_at = now_rfc3339();
    state.report.log_tail = tail.lines();
    publish_report(cli, &state).await;
    if result.is_ok() {
        notify_ready();
    }
    // Without --once nodeup stays up once it knows what it was asked to be, configured or not: on a failure the
    // instance keeps running (its report says why) and systemd's start timeout restarts nodeup later. Only
    // failures before that (IMDS, no user-data) exit at once.
    let stays_up = match &result {
        Ok(()) => true,
        Err(NodeupError::Imds(_) | NodeupError::NoUserData(_) | NodeupError::Runtime(_)) => false,
        Err(_) => true,
    };
    if stays_up && !cli.once {
        let supervisor = match (&result, state.etcd.take(), &state.store) {
            (Ok(()), Some((config, region)), Some(store)) => {
                start_etcd_supervisor(config, &region, store.clone()).await
            }
            _ => None,
        };
        match supervisor {
            // The supervisor stops etcd when SIGTERM comes (etcd is in nodeup's process group, so a power cut
            // takes it down too).
            Some(supervisor) => {
                supervisor
                    .run(wait_for_termination(state.manager.as_mut()))
                    .await
            }
            None => wait_for_termination(state.manager.as_mut()).await,
        }
        tracing::info!("terminating");
    }
    if let Some(manager) = state.manager.as_mut() {
        manager.shutdown();
    }
    result
}

/// Writes the report under the root and, when the store is known and reachable, to the store.
async fn publish_report(cli: &Cli, state: &Run) {
    let json = match state.report.to_json() {
        Ok(json) => json,
        Err(e) => {
            tracing::error!("serializing the boot report: {e}");
            return;
        }
    };
    let local = cli.root.join(REPORT_FILE);
    let written = local
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| {
            let tmp = local.with_extension("json.tmp");
            std::fs::write(&tmp, &json)?;
            std::fs::rename(&tmp, &local)
        });
    if let Err(e) = written {
        tracing::error!(path = %local.display(), "writing the boot report: {e}");
    }
    let (Some(store), Some(cluster)) = (&state.store, &state.cluster) else {
        tracing::warn!("the boot report stays on the node: the state store is not known");
        return;
    };
    let key = ClusterPaths::new(cluster).report(&state.report.instance_id);
    match tokio::time::timeout(
        Duration::from_secs(15),
        store.put(&key, &json, &Precondition::None),
    )
    .await
    {
        Ok(Ok(_)) => tracing::info!(key, phase = ?state.report.phase, "boot report written"),
        Ok(Err(e)) => tracing::error!(key, "writing the boot report to the state store: {e}"),
        Err(_) => tracing::error!(
            key,
            "writing the boot report to the state store: timed out after 15s"
        ),
    }
}

/// Times one step into the report.
async fn step<T, E>(
    report: &mut NodeReport,
    step: Step,
    work: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let start = Instant::now();
    let result = work.await;
    report.steps.push(StepTiming {
        step,
        millis: start.elapsed().as_millis() as u64,
        ok: result.is_ok(),
    });
    result
}

async fn configure(cli: &Cli, state: &mut Run) -> Result<(), NodeupError> {
    // 1. Identity and boot config.
    let (identity, boot) = step(&mut state.report, Step::Identity, identity_and_boot(cli)).await?;
    state.report.instance_id = identity.instance_id.clone();
    state.report.private_ip = Some(identity.local_ipv4.clone());
    state.report.availability_zone = Some(identity.availability_zone.clone());
    state.report.cluster_name = Some(boot.cluster_name.clone());
    state.report.instance_group = Some(boot.instance_group.clone());
    state.report.role = Some(boot.role);
    state.report.node_spec_sha256 = Some(boot.node_spec_sha256.clone());

    // 2. Node spec and secrets.
    let deadline = Instant::now() + Duration::from_secs(cli.store_timeout_secs);
    let store = fetch::open(&boot.state_store).await?;
    state.store = Some(store.clone());
    state.cluster = Some(boot.cluster_name.clone());
    let (spec, secrets) = step(&mut state.report, Step::Fetch, async {
        let spec = fetch::node_spec(&store, &boot, deadline).await?;
        tracing::info!(key = %boot.node_spec, sha256 = %boot.node_spec_sha256, "node spec verified");
        let secrets = fetch::secrets(&store, &spec, deadline).await?;
        Ok::<_, FetchError>((spec, secrets))
    })
    .await?;

    // The AMI must carry what this node spec runs (a node downloads nothing at boot).
    match image::check_image(&cli.root, &spec)? {
        image::ImageCheck::Matches => tracing::info!("the AMI carries the node spec's components"),
        image::ImageCheck::NoRecord(path) => tracing::warn!(
            record = %path.display(),
            "no image component record: not an AMI baked by Ballast's recipe, components not checked"
        ),
    }

    // 3. Render (pure) and certificates.
    let node = NodeFacts {
        instance_id: identity.instance_id.clone(),
        private_ip: identity.local_ipv4.clone(),
        hostname: identity.local_hostname.clone(),
        availability_zone: identity.availability_zone.clone(),
    };
    let root = cli.root.clone();
    let rendered = step(&mut state.report, Step::Render, async {
        let mut rendered = render::render(&spec, &node, &secrets)?;
        if let Some(cp) = &secrets.control_plane {
            let existing = |path: &str| std::fs::read(write::under_root(&root, path)).ok();
            let (files, outcomes) = certs::issue_all(
                &rendered.certificates,
                cp,
                &secrets.kubernetes_ca_cert,
                existing,
                time::OffsetDateTime::now_utc(),
            )?;
            let kept = outcomes.iter().filter(|o| o.kept).count();
            tracing::info!(kept, issued = outcomes.len() - kept, "certificates");
            rendered.files.extend(files);
            rendered.files.sort_by(|a, b| a.path.cmp(&b.path));
        }
        Ok::<_, NodeupError>(rendered)
    })
    .await?;

    // 4. Write what differs.
    let written = step(&mut state.report, Step::Write, async {
        write::write_files(&cli.root, &rendered.files)
    })
    .await?;
    for f in &written.written {
        tracing::info!(path = %f.path, action = ?f.action, mode = %f.mode, "wrote");
    }
    tracing::info!(
        written = written.written.len(),
        unchanged = written.unchanged,
        "files"
    );
    state.report.files_written = written.written.clone();
    state.report.files_unchanged = written.unchanged;

    // 5. Services.
    let mode = cli.services.resolve(&cli.root);
    let mut manager: Box<dyn ServiceManager> = match mode {
        ServiceMode::Systemd => Box::new(Systemd),
        _ => Box::new(Supervisor::new(&cli.root)),
    };
    let (decisions, reload) = services::decide(&rendered.services, &written);
    let reports = step(&mut state.report, Step::Services, async {
        Ok::<_, NodeupError>(manager.apply(&decisions, reload))
    })
    .await?;
    for r in &reports {
        tracing::info!(service = %r.name, state = ?r.state, detail = r.detail.as_deref().unwrap_or(""), mode = ?mode, "service");
    }
    state.report.services = reports;
    state.manager = Some(manager);
    let failed: Vec<String> = state
        .report
        .services
        .iter()
        .filter(|s| s.state == ballast_state::report::ServiceState::Failed)
        .map(|s| format!("{}: {}", s.name, s.detail.as_deref().unwrap_or("failed")))
        .collect();
    if !failed.is_empty() {
        return Err(NodeupError::Services(failed.join("; ")));
    }

    // 6. On a control-plane node, what its etcd supervisor needs (it starts once the report is out).
    if let Some(cp) = &spec.control_plane {
        let (etcd_binary, etcdctl_binary) = cli.etcd_binaries();
        let mut config = SupervisorConfig::new(
            &boot.cluster_name,
            &identity.instance_id,
            &identity.local_ipv4,
            write::under_root(&cli.root, ETCD_STATE_DIR),
            EtcdTls::in_dir(&write::under_root(&cli.root, ETCD_PKI_DIR)),
        )
        .with_settings(&cp.etcd)
        .map_err(NodeupError::EtcdSettings)?;
        config.etcd_binary = etcd_binary;
        config.etcdctl_binary = etcdctl_binary;
        state.etcd = Some((config, identity.region.clone()));
    }
    Ok(())
}

/// etcd's data dir, epoch and log on a control-plane node.
pub const ETCD_STATE_DIR: &str = "/var/lib/etcd";
/// Where nodeup writes etcd's CA certificate and the member's certificates (see [`certs::names`]).
pub const ETCD_PKI_DIR: &str = "/etc/kubernetes/pki/etcd";

/// The etcd supervisor of this control-plane instance, its peers found through the EC2 API with the instance
/// role's credentials. `None` (logged) when the certificates nodeup just wrote cannot be read.
async fn start_etcd_supervisor(
    config: SupervisorConfig,
    region: &str,
    store: StateStore,
) -> Option<EtcdSupervisor> {
    let peers = Ec2Peers::in_region(&config.cluster_name, region).await;
    tracing::info!(
        etcd = %config.etcd_binary.display(),
        state_dir = %config.state_dir.display(),
        "starting the etcd supervisor"
    );
    match EtcdSupervisor::new(config, store, Arc::new(peers)) {
        Ok(supervisor) => Some(supervisor),
        Err(e) => {
            tracing::error!("the etcd supervisor cannot start: {e}");
            None
        }
    }
}

/// Step 1: identity, user-data, the identity file, the boot config.
async fn identity_and_boot(cli: &Cli) -> Result<(Identity, BootConfig), NodeupError> {
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
        identity: identity.clone(),
        user_data: user_data.clone(),
        credentials,
        pid: std::process::id(),
    };
    let path = report.write(&cli.root)?;
    tracing::info!(path = %path.display(), "identity written");
    let boot = parse_boot_config(&user_data)?;
    Ok((identity, boot))
}

/// The boot config in user-data (`#ballast-boot-config` + YAML).
pub fn parse_boot_config(user_data: &str) -> Result<BootConfig, NodeupError> {
    if !user_data.trim_start().starts_with("#ballast-boot-config") {
        return Err(NodeupError::BadBootConfig(
            "it does not start with #ballast-boot-config".to_string(),
        ));
    }
    let boot = BootConfig::from_user_data(user_data)
        .map_err(|e| NodeupError::BadBootConfig(e.to_string()))?;
    if boot.kind != ballast_state::node::KIND_BOOT_CONFIG {
        return Err(NodeupError::BadBootConfig(format!(
            "kind {:?} is not BootConfig",
            boot.kind
        )));
    }
    Ok(boot)
}

/// Resolves credentials the way every AWS client of nodeup will: through the SDK's default chain, which on an
/// instance ends at IMDS (the environment has no keys).
///
/// Right after launch the instance profile may not be associated yet: IMDS answers 404 for the role (on AWS and
/// on the local cloud alike). That is a wait, not a failure, so the chain is asked again until
/// [`CREDENTIALS_WAIT`] has passed; only then is the last error reported.
async fn check_credentials(region: &str) -> CredentialsCheck {
    use aws_credential_types::provider::ProvideCredentials;
    let chain = aws_config::default_provider::credentials::DefaultCredentialsChain::builder()
        .region(aws_config::Region::new(region.to_owned()))
        .build()
        .await;
    let deadline = tokio::time::Instant::now() + CREDENTIALS_WAIT;
    let mut pause = Duration::from_millis(200);
    loop {
        let error = match tokio::time::timeout(Duration::from_secs(30), chain.provide_credentials())
            .await
        {
            Ok(Ok(c)) => {
                return CredentialsCheck {
                    access_key_id: Some(c.access_key_id().to_owned()),
                    error: None,
                }
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out after 30s".to_owned(),
        };
        if tokio::time::Instant::now() + pause > deadline {
            return CredentialsCheck {
                access_key_id: None,
                error: Some(error),
            };
        }
        tracing::info!(%error, retry_in = ?pause, "no AWS credentials yet (instance profile not associated?)");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// How long a booting node waits for its instance role's credentials to appear in IMDS.
const CREDENTIALS_WAIT: Duration = Duration::from_secs(60);

/// `READY=1` to systemd when it started us as `Type=notify` (`$NOTIFY_SOCKET`); nothing otherwise.
fn notify_ready() {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sock = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("sd_notify: {e}");
            return;
        }
    };
    let path = Path::new(&socket);
    let sent = match path.to_str().and_then(|s| s.strip_prefix('@')) {
        Some(abstract_name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
                .and_then(|addr| sock.send_to_addr(b"READY=1", &addr))
        }
        None => sock.send_to(b"READY=1", path),
    };
    if let Err(e) = sent {
        tracing::warn!("sd_notify READY=1: {e}");
    }
}

async fn wait_for_termination(mut manager: Option<&mut Box<dyn ServiceManager>>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = tick.tick() => {
                if let Some(m) = manager.as_mut() {
                    m.tick();
                }
            }
        }
    }
}
