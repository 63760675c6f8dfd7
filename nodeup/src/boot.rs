//! The boot, step by step: identity, fetch, render (and certificates), write, services, each timed into the
//! boot report; then the report, `READY=1`, and what runs until SIGTERM (the services' supervisor, and on a
//! control-plane node the etcd supervisor). Every failure stops before anything is written to the node.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_etcd::peers::Ec2Peers;
use ballast_etcd::process::EtcdTls;
use ballast_etcd::supervisor::{PeerNames, Supervisor as EtcdSupervisor, SupervisorConfig};
use ballast_state::addon_report::AddonsReport;
use ballast_state::audit::AuditShipping;
use ballast_state::log_tail::TailReason;
use ballast_state::node::{BootConfig, ControlPlaneSettings, NodeSpec};
use ballast_state::node_bootstrap::NodeBootstrapService;
use ballast_state::report::{NodeReport, Phase, ServiceState, Step};
use ballast_state::spec::Role;
use ballast_state::termination::TerminationHandlingSettings;
use ballast_store::store::StateStore;

use crate::addons::runner::AddonJob;
use crate::audit::shipper::{Shipper, ShipperConfig};
use crate::cli::{Cli, EtcdData};
use crate::credentials::check_credentials;
use crate::error::{BootConfigError, FailedService, NodeupError};
use crate::etcd_names::EtcdNames;
use crate::fetch::{self, FetchError};
use crate::identity::{Identity, IdentityReport};
use crate::image::{self, ImageCheck};
use crate::imds::Imds;
use crate::logtail::LogTail;
use crate::model::{paths, pki, ControlPlaneSecrets, NodeFacts, RenderedFile, Secrets};
use crate::render::{self, Rendered};
use crate::report::{self, step, ReportDestination};
use crate::services::{self, ServiceManager, ServiceMode, Supervisor, Systemd};
use crate::tail_publish::TailPublisher;
use crate::termination::handler::{Handler, KubeClients};
use crate::termination::stop::StopWatch;
use crate::volume::attach::{attach_and_mount, VolumeError, VolumeRequest};
use crate::write::{self, WriteOutcome};
use crate::{bootstrap, cert_plan, certs, notify};

/// What a run carries from step to step, for its report and for what runs after.
struct Run {
    report: NodeReport,
    store: Option<StateStore>,
    cluster: Option<String>,
    /// Who this node writes as in the store (`crate::tail_publish::writer_for`), once the store is known: its
    /// report's and log tail's keys are named by it.
    writer: Option<String>,
    manager: Option<Box<dyn ServiceManager>>,
    /// On a control-plane node: the etcd supervisor to run once configured, and the instance's region.
    etcd: Option<(SupervisorConfig, String)>,
    /// On a control-plane node: the node bootstrap service, serving until nodeup ends.
    bootstrap_service: Option<tokio::task::JoinHandle<()>>,
    /// On a control-plane node: what keeps the service's address published (bootstrap::directory).
    bootstrap_publisher: Option<tokio::task::JoinHandle<()>>,
    /// On a control-plane node: the add-on applier, started once configured (crate::addons).
    addons: Option<AddonJob>,
    /// On a control-plane node: the audit log's shipper and where it ships (crate::audit).
    audit: Option<(ShipperConfig, AuditShipping)>,
    /// On an API-server node: what keeps the etcd members' names current in /etc/hosts (crate::etcd_names).
    etcd_names: Option<tokio::task::JoinHandle<()>>,
    /// On a control-plane node of a cluster with termination handling: the handler's settings, the region and
    /// this instance's id (crate::termination).
    termination: Option<(TerminationHandlingSettings, String, String)>,
}

impl Run {
    fn report_destination(&self) -> Option<ReportDestination<'_>> {
        match (&self.store, &self.cluster, &self.writer) {
            (Some(store), Some(cluster), Some(writer)) => Some(ReportDestination {
                store,
                cluster,
                writer,
            }),
            _ => None,
        }
    }
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
        writer: None,
        manager: None,
        etcd: None,
        termination: None,
        bootstrap_service: None,
        bootstrap_publisher: None,
        addons: None,
        audit: None,
        etcd_names: None,
    };
    let result = configure(cli, &mut state).await;
    match &result {
        Ok(()) => {
            state.report.phase = Phase::Configured;
            tracing::info!(millis = started.elapsed().as_millis() as u64, "configured");
        }
        Err(e) => {
            state.report.phase = Phase::Failed;
            state.report.errors = report::error_lines(e);
            tracing::error!("{e}");
        }
    }
    state.report.total_millis = started.elapsed().as_millis() as u64;
    state.report.finished_at = report::now_rfc3339();
    state.report.log_tail = tail.lines();
    report::publish(&cli.root, &state.report, state.report_destination()).await;
    // The log tail (crate::tail_publish): a failed boot's at once; a configured control-plane node's kept
    // published by a task of its own. Both write as the report did (asked of STS beside the spec's fetch).
    let instance_id = state.report.instance_id.clone();
    let tail_keeper = match (&result, state.store.clone(), state.cluster.clone()) {
        (Err(_), Some(store), Some(cluster)) => {
            tail_publisher(store, &cluster, &instance_id, state.writer.clone())
                .await
                .publish(tail, TailReason::BootFailed)
                .await;
            None
        }
        (Ok(()), Some(store), Some(cluster)) if state.etcd.is_some() => {
            let tail = tail.clone();
            let writer = state.writer.clone();
            Some(tokio::spawn(async move {
                tail_publisher(store, &cluster, &instance_id, writer)
                    .await
                    .keep_published(tail)
                    .await
            }))
        }
        _ => None,
    };
    if result.is_ok() {
        notify::notify_ready();
    }
    // Without --once nodeup stays up once it knows what it was asked to be, configured or not: on a failure the
    // instance keeps running (its report says why) and systemd's start timeout restarts nodeup later. Only
    // failures before that (IMDS, no user-data) exit at once.
    let stays_up = result
        .as_ref()
        .map_or_else(|e| !e.exits_at_once(), |()| true);
    if stays_up && !cli.once {
        stay_up(&mut state, result.is_ok(), &cli.root).await;
        tracing::info!("terminating");
    }
    if let Some(manager) = state.manager.as_mut() {
        manager.shutdown();
    }
    if let Some(service) = state.bootstrap_service.take() {
        service.abort();
    }
    if let Some(publisher) = state.bootstrap_publisher.take() {
        publisher.abort();
    }
    if let Some(names) = state.etcd_names.take() {
        names.abort();
    }
    if let Some(keeper) = tail_keeper {
        keeper.abort();
    }
    result
}

/// Until SIGTERM: the services' supervisor ticks, and a configured control-plane node runs its etcd supervisor.
async fn stay_up(state: &mut Run, configured: bool, root: &Path) {
    // The termination handler drains with the add-on applier's kind of client (a clone of its job).
    let mut kube_job = None;
    let addons = match (configured, state.addons.take()) {
        (true, Some(job)) => {
            kube_job = Some(job.clone());
            Some(start_addon_applier(job, root, state))
        }
        _ => None,
    };
    // The handlers go in before anything else runs: a SIGTERM during the supervisor's first round would otherwise
    // meet the default action and kill nodeup outright, leaving etcd to the group's SIGKILL without a handoff.
    let signals = TerminationSignals::register();
    // The audit shipper runs beside the etcd supervisor and flushes its last chunk when SIGTERM comes
    // (crate::audit); nodeup waits for that flush before it exits.
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    let audit = match (configured, state.audit.take()) {
        (true, Some((config, shipping))) => {
            // The node's aws:userid, learnt at boot from the S3 state store's credentials: the same instance
            // role writes the audit chunks, so an S3 destination need not ask STS again.
            let known = state
                .store
                .as_ref()
                .filter(|store| matches!(store, StateStore::S3(_)))
                .and(state.writer.clone());
            start_audit_shipper(config, &shipping, known, stopped).await
        }
        _ => None,
    };
    let termination = async {
        wait_for_termination(signals, state.manager.as_mut()).await;
        let _ = stopping.send(true);
    };
    let supervisor = match (configured, state.etcd.take(), &state.store) {
        (true, Some((config, region)), Some(store)) => {
            start_etcd_supervisor(config, &region, store.clone()).await
        }
        _ => None,
    };
    let (handler, stop_watch) = match (
        configured,
        state.termination.take(),
        state.store.clone(),
        state.cluster.clone(),
        kube_job,
    ) {
        (true, Some((settings, region, instance_id)), Some(store), Some(cluster), Some(job)) => {
            let watch = StopWatch::new(store.clone(), &cluster, &instance_id);
            let handler = start_termination_handler(settings, &region, store, cluster, job).await;
            (Some(handler), Some(watch))
        }
        _ => (None, None),
    };
    match supervisor {
        // The supervisor stops etcd when SIGTERM comes (etcd is in nodeup's process group, so a power cut
        // takes it down too), or when a termination handler asks this instance to (then nodeup stays up, etcd
        // stopped, until the instance's own end).
        Some(supervisor) => run_etcd_supervisor(supervisor, termination, stop_watch).await,
        None => termination.await,
    }
    if let Some(task) = handler {
        task.abort();
    }
    if let Some(task) = audit {
        // The shipper bounds its own flush (crate::audit::shipper::FLUSH_DEADLINE).
        if let Err(e) = task.await {
            tracing::error!(error = %e, "the audit shipper ended abnormally");
        }
    }
    if let Some(task) = addons {
        task.abort();
    }
}

/// The etcd supervisor until `termination` (SIGTERM). A stop request for this instance
/// (crate::termination::stop) stops its member only when the supervisor grants it (one node at a time, and only
/// while the other voters keep a quorum: `ballast_etcd::supervisor::Supervisor::grant_stop`); a request not granted
/// waits and is looked at again. Once stopped, the outcome is written back for the asker, and nodeup waits for
/// SIGTERM with etcd stopped (its data and membership kept for the replacement), but no longer than the request's
/// bound (`ballast_state::termination::resume_after`): an instance still running then was not going, and its
/// member resumes.
async fn run_etcd_supervisor(
    mut supervisor: EtcdSupervisor,
    termination: impl std::future::Future<Output = ()>,
    watch: Option<StopWatch>,
) {
    tokio::pin!(termination);
    let Some(watch) = watch else {
        supervisor.run(termination).await;
        return;
    };
    let mut look_again_after = Duration::ZERO;
    loop {
        let mut seen = None;
        supervisor
            .run_until(async {
                let request = async {
                    tokio::time::sleep(look_again_after).await;
                    watch.requested().await
                };
                tokio::select! {
                    () = &mut termination => {}
                    request = request => seen = Some(request),
                }
            })
            .await;
        let Some(request) = seen else {
            // SIGTERM: the shutdown's own stop, with its bounded handoff.
            supervisor.stop_gracefully().await;
            return;
        };
        if let Err(why) = supervisor.grant_stop().await {
            tracing::warn!(reason = %request.reason, why = %why, "etcd stop requested and not granted; the request waits");
            look_again_after = crate::termination::stop::POLL;
            continue;
        }
        let outcome = supervisor.stop_gracefully().await;
        let bound = ballast_state::termination::resume_after(&request);
        // The reason says who asked: the termination handler (the event's kind) or `rolling-update`.
        tracing::info!(
            outcome = %crate::termination::stop::describe(&outcome),
            reason = %request.reason,
            resume_after = ?bound,
            "etcd stopped on a stop request; waiting for this instance's end"
        );
        watch.acknowledge(request, &outcome).await;
        tokio::select! {
            () = &mut termination => return,
            () = tokio::time::sleep(bound) => {}
        }
        tracing::warn!(
            after = ?bound,
            "this instance did not go after its etcd stop; resuming its etcd member"
        );
        watch.withdraw().await;
        look_again_after = Duration::ZERO;
    }
}

/// The termination handler of this control-plane node (crate::termination::handler), until aborted.
async fn start_termination_handler(
    settings: TerminationHandlingSettings,
    region: &str,
    store: StateStore,
    cluster: String,
    job: AddonJob,
) -> tokio::task::JoinHandle<()> {
    let aws = ballast_store::sdk::load(Some(region)).await;
    let job = Arc::new(job);
    let kube: KubeClients = Arc::new(move || {
        let job = job.clone();
        Box::pin(async move { job.client().await.map_err(|e| e.to_string()) })
    });
    tracing::info!(queue = %settings.queue_name, "starting the termination handler");
    let handler = Handler {
        cluster,
        settings,
        sqs: aws_sdk_sqs::Client::new(&aws),
        autoscaling: aws_sdk_autoscaling::Client::new(&aws),
        ec2: aws_sdk_ec2::Client::new(&aws),
        store,
        kube,
    };
    tokio::spawn(handler.run(std::future::pending()))
}

/// The audit shipper of this control-plane node, until `stopped` turns true; `None` (logged) when its
/// destination or position cannot be opened: the node runs on, and its log stays on disk for the next start.
async fn start_audit_shipper(
    config: ShipperConfig,
    shipping: &AuditShipping,
    known_writer: Option<String>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let started = match crate::audit::shipper::open_destination(shipping).await {
        Ok(store) => {
            // The chunks' keys are bound to the node's IAM identity (its aws:userid), as its log tail's: the one
            // the boot learnt when both stores are S3, else asked for this destination.
            let writer = match (&store, known_writer) {
                (StateStore::S3(_), Some(writer)) => writer,
                _ => crate::tail_publish::writer_for(&store, &config.instance_id).await,
            };
            Shipper::new(ShipperConfig { writer, ..config }, store)
        }
        Err(e) => Err(e),
    };
    match started {
        Ok(shipper) => {
            tracing::info!(
                destination = %shipping.destination,
                interval = %shipping.chunk_interval,
                next_sequence = shipper.position().next_sequence,
                "shipping the audit log"
            );
            Some(tokio::spawn(async move {
                let stop = async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                };
                shipper.run(stop).await;
            }))
        }
        Err(e) => {
            tracing::error!(error = %ballast_common::error_chain(&e), "the audit log cannot be shipped");
            None
        }
    }
}

/// The node's log-tail publisher, writing as `writer` when the boot learnt it, else asking STS now.
async fn tail_publisher(
    store: StateStore,
    cluster: &str,
    instance_id: &str,
    writer: Option<String>,
) -> TailPublisher {
    match writer {
        Some(writer) => TailPublisher::as_writer(store, cluster, instance_id, writer),
        None => TailPublisher::new(store, cluster, instance_id).await,
    }
}

/// The add-on applier in the background: it republishes the report with each new `addons` section.
fn start_addon_applier(job: AddonJob, root: &Path, state: &Run) -> tokio::task::JoinHandle<()> {
    let root = root.to_path_buf();
    let report = state.report.clone();
    let destination = state
        .store
        .clone()
        .zip(state.cluster.clone())
        .zip(state.writer.clone());
    tokio::spawn(job.run(move |section| {
        let report = crate::addons::runner::with_addons(&report, section);
        let root = root.clone();
        let destination = destination.clone();
        async move {
            let remote = destination
                .as_ref()
                .map(|((store, cluster), writer)| ReportDestination {
                    store,
                    cluster,
                    writer,
                });
            report::publish(&root, &report, remote).await;
        }
    }))
}

async fn configure(cli: &Cli, state: &mut Run) -> Result<(), NodeupError> {
    // 1. Identity and boot config.
    let (identity, boot) = step(&mut state.report, Step::Identity, identity_and_boot(cli)).await?;
    report::record_identity(&mut state.report, &identity, &boot);

    // 2. Node spec and secrets.
    let (spec, secrets, store) = fetch_spec_and_secrets(cli, state, &boot).await?;
    let bastion = spec.role == Role::Bastion;
    if bastion {
        // A bastion's role may write nothing to the state store: its report stays on the node
        // (ROOT/var/lib/nodeup/report.json and the journal; docs/nodeup.md, "Bastions").
        state.cluster = None;
    }

    // The AMI must carry what this node spec runs (a node downloads nothing at boot).
    let baked_images = match image::check_image(&cli.root, &spec)? {
        ImageCheck::Matches(images) => {
            tracing::info!(
                images = images.len(),
                "the AMI carries the node spec's components"
            );
            images
        }
        ImageCheck::NoRecord(path) => {
            tracing::warn!(
                record = %path.display(),
                "no image component record: not an AMI baked by Ballast's recipe, components not checked"
            );
            BTreeMap::new()
        }
    };

    // 6. On a control-plane node, its etcd member's volume at etcd's state directory: found, attached and
    // mounted by a task of its own while steps 3 to 5 run (their certificates and writes are CPU and local
    // disk; waiting for EC2 and the device is most of a replacement's boot). Nothing those steps write is under
    // etcd's state directory. Dropped (a step failed), the task is aborted.
    let volume = match (&spec.control_plane, cli.etcd_data) {
        (Some(cp), EtcdData::Volume) => {
            let (cli, boot, identity, cp) =
                (cli.clone(), boot.clone(), identity.clone(), cp.clone());
            Some(AbortOnDrop(tokio::spawn(async move {
                mount_etcd_volume(&cli, &boot, &identity, &cp).await
            })))
        }
        (Some(_), EtcdData::RootDisk) => {
            tracing::warn!(
                "--etcd-data root-disk: etcd's data is on the root disk and dies with the instance"
            );
            None
        }
        (None, _) => None,
    };

    // The group's extra volumes (spec.volumeMounts): EC2 attached them at launch; each is formatted when blank
    // and mounted before anything is written or started (a kubelet must never start on the bare directory).
    if !spec.volume_mounts.is_empty() {
        mount_extra_volumes(cli, &identity, &spec.volume_mounts).await?;
    }

    // 3. Render (pure) and certificates.
    let node = NodeFacts {
        instance_id: identity.instance_id.clone(),
        private_ip: identity.local_ipv4.clone(),
        hostname: identity.local_hostname.clone(),
        availability_zone: identity.availability_zone.clone(),
        resolv_conf: crate::model::resolv_conf(&cli.root),
        baked_images,
        oom_scores_restricted: std::fs::read_to_string("/proc/self/status")
            .is_ok_and(|s| crate::model::oom_scores_restricted(&s)),
    };
    let mut rendered = step(&mut state.report, Step::Render, async {
        render_with_certificates(&cli.root, &spec, &node, &secrets)
    })
    .await?;
    // A worker's kubelet client certificate: kept while it fits, else from the control plane's bootstrap
    // service after proving which instance this is (crate::bootstrap).
    if spec.control_plane.is_none() && spec.api_server.is_none() && !bastion {
        let files = worker_certificate(cli, &boot, &identity, &secrets, &store).await?;
        rendered.files.extend(files);
        rendered.files.sort_by(|a, b| a.path.cmp(&b.path));
    }

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

    // On an API-server node, the etcd members' names its API server dials, resolved before it starts and kept
    // current after (crate::etcd_names).
    if spec.api_server.is_some() {
        let mut names = EtcdNames {
            peers: Ec2Peers::in_region(&boot.cluster_name, &identity.region).await,
            cluster: boot.cluster_name.clone(),
            hosts_file: write::under_root(&cli.root, "/etc/hosts"),
            written: Default::default(),
        };
        if let Err(e) = names.update_once().await {
            tracing::warn!(error = %e, "the etcd members' names are not resolved yet; trying again");
        }
        state.etcd_names = Some(tokio::spawn(names.keep_current()));
    }

    // 5. Services.
    start_services(cli, state, &rendered, &written).await?;

    // The node bootstrap service, on a control-plane node: workers get their kubelet certificates from it.
    if let Some(cp) = &secrets.control_plane {
        let (service, address) =
            start_bootstrap_service(cli, &boot, &identity, &secrets, cp).await?;
        state.bootstrap_service = Some(service);
        // Where workers find it: published beside the boot, which does not wait for the store and EC2, after
        // etcd's supervisor had its first round (bootstrap::directory::PUBLISH_AFTER), then kept current.
        let own = NodeBootstrapService {
            instance_id: identity.instance_id.clone(),
            address,
        };
        state.bootstrap_publisher = Some(tokio::spawn(bootstrap::directory::keep_published(
            store.clone(),
            boot.cluster_name.clone(),
            identity.region.clone(),
            own,
            cli.bootstrap_republish_every,
        )));
    }
    if let Some(mut volume) = volume {
        match (&mut volume.0).await {
            Ok(mounted) => mounted?,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => {
                return Err(VolumeError::Interrupted {
                    member: spec
                        .control_plane
                        .as_ref()
                        .map(|cp| cp.etcd.member_name.clone())
                        .unwrap_or_default(),
                    reason: e.to_string(),
                }
                .into())
            }
        }
    }
    // What the etcd supervisor needs (it starts once the report is out).
    if let Some(cp) = &spec.control_plane {
        let config = etcd_supervisor_config(cli, &boot, &identity, cp)?;
        state.etcd = Some((config, identity.region.clone()));
        // And the termination handler (crate::termination), when the cluster turns it on.
        if let Some(settings) = &cp.termination_handling {
            state.termination = Some((
                settings.clone(),
                identity.region.clone(),
                identity.instance_id.clone(),
            ));
        }
        // And the audit shipper (crate::audit), beside it.
        if let Some(shipping) = &cp.audit_shipping {
            let config = ShipperConfig::from_node_spec(
                &cli.root,
                &cp.audit_log_path,
                shipping,
                &boot.cluster_name,
                &identity.instance_id,
            )
            .map_err(NodeupError::AuditSettings)?;
            state.audit = Some((config, shipping.clone()));
        }
    }

    // 7. On a control-plane node, the add-on applier (it starts once the report is out, and waits for the API).
    if let Some(cp) = &secrets.control_plane {
        let job = AddonJob::new(
            &cli.root,
            spec.clone(),
            &identity.local_ipv4,
            &secrets.kubernetes_ca_cert,
            &cp.kubernetes_ca_key,
            node.baked_images.clone(),
            &node.hostname,
        );
        state.report.addons = Some(AddonsReport::waiting(
            &job.api_server,
            &report::now_rfc3339(),
        ));
        state.addons = Some(job);
    }
    Ok(())
}

/// Step 2: the node spec, verified against the boot config, the secrets it names, and the store (writing with
/// the cluster's state-store KMS key, if any).
async fn fetch_spec_and_secrets(
    cli: &Cli,
    state: &mut Run,
    boot: &BootConfig,
) -> Result<(NodeSpec, Secrets, StateStore), NodeupError> {
    let deadline = Instant::now() + Duration::from_secs(cli.store_timeout_secs);
    let store = fetch::open(&boot.state_store).await?;
    state.store = Some(store.clone());
    state.cluster = Some(boot.cluster_name.clone());
    // Who the node writes as (its report's key) is asked of STS while the spec is fetched, not after.
    let instance_id = state.report.instance_id.clone();
    let (writer, fetched) = tokio::join!(
        crate::tail_publish::writer_for(&store, &instance_id),
        step(&mut state.report, Step::Fetch, async {
            let spec = fetch::node_spec(&store, boot, deadline).await?;
            tracing::info!(key = %boot.node_spec, sha256 = %boot.node_spec_sha256, "node spec verified");
            let secrets = fetch::secrets(&store, &spec, deadline).await?;
            Ok::<_, FetchError>((spec, secrets))
        })
    );
    state.writer = Some(writer);
    let fetched = fetched?;
    // From here on, reports and etcd's objects are written with the cluster's state-store KMS key, if any.
    let store = store.with_kms_key(fetched.0.state_store_kms_key.clone());
    state.store = Some(store.clone());
    let (spec, secrets) = fetched;
    Ok((spec, secrets, store))
}

/// Step 3: every file (pure), and on a control-plane node its certificates, issued or kept, among them.
fn render_with_certificates(
    root: &Path,
    spec: &NodeSpec,
    node: &NodeFacts,
    secrets: &Secrets,
) -> Result<Rendered, NodeupError> {
    let mut rendered = render::render(spec, node, secrets)?;
    // An API-server node: the Kubernetes CA signs all it issues (it holds no etcd CA key).
    if let Some(api) = &secrets.api_server {
        let existing = |path: &str| std::fs::read(write::under_root(root, path)).ok();
        let (files, outcomes) = certs::issue_api_server_node(
            &rendered.certificates,
            api,
            &secrets.kubernetes_ca_cert,
            existing,
            time::OffsetDateTime::now_utc(),
        )?;
        let kept = outcomes.iter().filter(|o| o.kept).count();
        tracing::info!(kept, issued = outcomes.len() - kept, "certificates");
        rendered.files.extend(files);
        rendered.files.sort_by(|a, b| a.path.cmp(&b.path));
    }
    if let Some(cp) = &secrets.control_plane {
        let existing = |path: &str| std::fs::read(write::under_root(root, path)).ok();
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
    Ok(rendered)
}

/// Step 5: start or restart, through systemd or the built-in supervisor, the services whose files changed.
async fn start_services(
    cli: &Cli,
    state: &mut Run,
    rendered: &Rendered,
    written: &WriteOutcome,
) -> Result<(), NodeupError> {
    let mode = cli.services.resolve(&cli.root);
    let mut manager: Box<dyn ServiceManager> = match mode {
        ServiceMode::Systemd => Box::new(Systemd),
        _ => Box::new(Supervisor::new(&cli.root)),
    };
    let (decisions, reload) = services::decide(&rendered.services, written);
    let reports = step(&mut state.report, Step::Services, async {
        Ok::<_, NodeupError>(manager.apply(&decisions, reload))
    })
    .await?;
    for r in &reports {
        tracing::info!(service = %r.name, state = ?r.state, detail = r.detail.as_deref().unwrap_or(""), mode = ?mode, "service");
    }
    state.report.services = reports;
    state.manager = Some(manager);
    let failed: Vec<FailedService> = state
        .report
        .services
        .iter()
        .filter(|s| s.state == ServiceState::Failed)
        .map(|s| FailedService {
            name: s.name.clone(),
            detail: s.detail.clone().unwrap_or_else(|| "failed".to_string()),
        })
        .collect();
    if !failed.is_empty() {
        return Err(NodeupError::Services { failed });
    }
    Ok(())
}

/// A worker's kubelet client and serving certificates and keys (0644, 0600): the ones on the node while both
/// still fit (this node's name and private IP, this CA, enough time left), else both anew from the bootstrap
/// service (one identity proof gets both).
async fn worker_certificate(
    cli: &Cli,
    boot: &BootConfig,
    identity: &Identity,
    secrets: &Secrets,
    store: &StateStore,
) -> Result<Vec<RenderedFile>, NodeupError> {
    let client = cert_plan::worker_kubelet_client(&identity.local_hostname);
    let own_ips: Vec<std::net::IpAddr> = identity.local_ipv4.parse().into_iter().collect();
    let serving = cert_plan::kubelet_serving(&identity.local_hostname, &own_ips);
    let read = |path: &str| std::fs::read(write::under_root(&cli.root, path)).ok();
    let now = time::OffsetDateTime::now_utc();
    let fits = |plan: &cert_plan::CertPlan| {
        read(&plan.cert_path)
            .zip(read(&plan.key_path))
            .filter(|(cert, key)| {
                certs::still_fits(plan, &secrets.kubernetes_ca_cert, cert, key, now)
            })
    };
    let (client_pair, serving_pair) = match (fits(&client), fits(&serving)) {
        (Some(client_pair), Some(serving_pair)) => {
            tracing::info!(node = %identity.local_hostname, "kubelet client and serving certificates kept");
            (client_pair, serving_pair)
        }
        _ => {
            // During a Kubernetes CA rotation the service's certificate may be of either CA: trust both.
            let trusted =
                render::keys::bundle(&secrets.kubernetes_ca_cert, &secrets.kubernetes_ca_trusted);
            let ask = bootstrap::client::Ask {
                cluster: &boot.cluster_name,
                region: &identity.region,
                node_name: &identity.local_hostname,
                ca_cert_pem: &trusted,
                store,
            };
            let issued = bootstrap::client::obtain(&ask).await?;
            (
                (
                    issued.client_cert.into_bytes(),
                    issued.client_key.into_bytes(),
                ),
                (
                    issued.serving_cert.into_bytes(),
                    issued.serving_key.into_bytes(),
                ),
            )
        }
    };
    Ok(vec![
        RenderedFile::new(&client.cert_path, 0o644, client_pair.0),
        RenderedFile::new(&client.key_path, 0o600, client_pair.1),
        RenderedFile::new(&serving.cert_path, 0o644, serving_pair.0),
        RenderedFile::new(&serving.key_path, 0o600, serving_pair.1),
    ])
}

/// Starts the node bootstrap service on this control-plane node's private IP, with the serving certificate
/// nodeup just wrote and the Kubernetes CA it signs with; returns its task and address.
async fn start_bootstrap_service(
    cli: &Cli,
    boot: &BootConfig,
    identity: &Identity,
    secrets: &Secrets,
    cp: &ControlPlaneSecrets,
) -> Result<(tokio::task::JoinHandle<()>, std::net::SocketAddr), NodeupError> {
    let read = |path: String| {
        std::fs::read_to_string(write::under_root(&cli.root, &path))
            .map_err(|e| bootstrap::server::StartServerError::Tls(format!("reading {path}: {e}")))
    };
    let ip: std::net::IpAddr = identity.local_ipv4.parse().map_err(|_| {
        bootstrap::server::StartServerError::Tls(format!(
            "the private IP {:?} is not an IP address",
            identity.local_ipv4
        ))
    })?;
    let bind = std::net::SocketAddr::new(ip, bootstrap::PORT);
    let config = bootstrap::server::ServerConfig {
        bind,
        cluster: boot.cluster_name.clone(),
        region: identity.region.clone(),
        tls_cert_pem: read(pki::cert(pki::NODE_BOOTSTRAP))?,
        tls_key_pem: read(pki::key(pki::NODE_BOOTSTRAP))?,
        ca_cert_pem: secrets.kubernetes_ca_cert.clone(),
        ca_key_pem: cp.kubernetes_ca_key.clone(),
        // The caps fitted to the descriptor limit nodeup runs with (raised at start, crate::fds), so the etcd
        // supervisor always keeps descriptors.
        limits: crate::fds::soft_nofile_limit()
            .map(bootstrap::server::Limits::within_fd_limit)
            .unwrap_or_default(),
    };
    let running = bootstrap::server::start(config).await?;
    Ok((running.task, running.addr))
}

/// A task aborted when dropped: the volume attach, when a configuration step fails before it is awaited.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long a control-plane node waits for its etcd volume: a previous holder's release (EC2 detaches a
/// terminated instance's volumes within about a minute) and the device.
const ETCD_VOLUME_TIMEOUT: Duration = Duration::from_secs(600);

/// Finds, attaches and mounts this member's volume at etcd's state directory (`docs/etcd.md`, "Volumes"), with
/// the instance role's credentials.
async fn mount_etcd_volume(
    cli: &Cli,
    boot: &BootConfig,
    identity: &Identity,
    cp: &ControlPlaneSettings,
) -> Result<(), NodeupError> {
    let aws = ballast_store::sdk::load(Some(identity.region.as_str())).await;
    let ec2 = aws_sdk_ec2::Client::new(&aws);
    let request = VolumeRequest {
        cluster: &boot.cluster_name,
        member: &cp.etcd.member_name,
        zone: &identity.availability_zone,
        instance_id: &identity.instance_id,
        root: &cli.root,
        state_dir: paths::ETCD_STATE_DIR,
        timeout: ETCD_VOLUME_TIMEOUT,
    };
    let mounted = attach_and_mount(&ec2, &request).await?;
    tracing::info!(
        volume = %mounted.volume_id,
        device = %mounted.device.display(),
        formatted = mounted.formatted,
        state_dir = paths::ETCD_STATE_DIR,
        "etcd's volume is mounted"
    );
    Ok(())
}

/// How long a node waits for its extra volumes' devices: EC2 attached them at launch, so they show within
/// seconds; a minute covers a slow attach, and a missing one fails the boot by name.
const EXTRA_VOLUME_TIMEOUT: Duration = Duration::from_secs(60);

/// Formats (when blank) and mounts the group's extra volumes (`docs/nodeup.md`, "Extra volumes").
async fn mount_extra_volumes(
    cli: &Cli,
    identity: &Identity,
    mounts: &[ballast_state::node::VolumeMount],
) -> Result<(), NodeupError> {
    let aws = ballast_store::sdk::load(Some(identity.region.as_str())).await;
    let ec2 = aws_sdk_ec2::Client::new(&aws);
    let mappings = crate::volume::extra::block_device_mappings(&ec2, &identity.instance_id).await;
    let mounted =
        crate::volume::extra::mount_all(&cli.root, mounts, &mappings, EXTRA_VOLUME_TIMEOUT).await?;
    for m in &mounted {
        tracing::info!(
            device = %m.device,
            found = %m.found.display(),
            path = %m.path,
            formatted = m.formatted,
            mounted_now = m.mounted_now,
            "extra volume mounted"
        );
    }
    Ok(())
}

/// What the etcd supervisor of this control-plane node needs: its identity, its state dir, the certificates
/// nodeup issued, the binaries and the node spec's etcd settings.
fn etcd_supervisor_config(
    cli: &Cli,
    boot: &BootConfig,
    identity: &Identity,
    cp: &ControlPlaneSettings,
) -> Result<SupervisorConfig, NodeupError> {
    let (etcd_binary, etcdctl_binary) = cli.etcd_binaries();
    let mut config = SupervisorConfig::new(
        &boot.cluster_name,
        &identity.instance_id,
        &identity.local_ipv4,
        write::under_root(&cli.root, paths::ETCD_STATE_DIR),
        etcd_tls(&cli.root),
    )
    .with_settings(&cp.etcd)
    .map_err(NodeupError::EtcdSettings)?;
    config.etcd_binary = etcd_binary;
    config.etcdctl_binary = etcdctl_binary;
    config.member_volume = cli.etcd_data == EtcdData::Volume;
    // On its volume the member is the volume's, not the instance's: its peer URL is its stable name, resolved
    // through `<root>/etc/hosts`, which the supervisor keeps current from EC2 (`ballast_etcd::hosts`).
    if config.member_volume {
        config.peer_names = Some(PeerNames {
            member: cp.etcd.member_name.clone(),
            hosts_file: write::under_root(&cli.root, "/etc/hosts"),
        });
    }
    Ok(config)
}

/// The etcd certificates nodeup writes, under the root, named from the node's one PKI list.
fn etcd_tls(root: &Path) -> EtcdTls {
    let at = |node_path: &str| write::under_root(root, node_path);
    EtcdTls {
        ca_cert: at(pki::ETCD_CA_CERT),
        server_cert: at(&pki::cert(pki::ETCD_SERVER)),
        server_key: at(&pki::key(pki::ETCD_SERVER)),
        peer_cert: at(&pki::cert(pki::ETCD_PEER)),
        peer_key: at(&pki::key(pki::ETCD_PEER)),
        client_cert: at(&pki::cert(pki::ETCD_CLIENT)),
        client_key: at(&pki::key(pki::ETCD_CLIENT)),
    }
}

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

/// Where a system keeps its CA certificates (Debian and Ubuntu, Amazon Linux and Fedora, others), as the SDK's
/// TLS stack looks for them; `SSL_CERT_FILE` first when set.
const TRUST_STORES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Fails, naming what was looked for, when no trust store exists: the AWS SDK would otherwise panic while
/// building its first client.
fn require_trust_store() -> Result<(), NodeupError> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
    let candidates: Vec<std::path::PathBuf> = from_env
        .into_iter()
        .chain(TRUST_STORES.iter().map(std::path::PathBuf::from))
        .collect();
    if candidates
        .iter()
        .any(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
    {
        return Ok(());
    }
    Err(NodeupError::NoTrustStore {
        tried: candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Step 1: identity, user-data, the identity file, the boot config.
async fn identity_and_boot(cli: &Cli) -> Result<(Identity, BootConfig), NodeupError> {
    require_trust_store()?;
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
        .ok_or_else(|| NodeupError::NoUserData {
            endpoint: imds.endpoint().to_owned(),
        })?;
    tracing::info!(
        bytes = user_data.len(),
        "user-data (boot config):\n{user_data}"
    );
    let credentials = check_credentials(&identity.region, cli.credentials_wait).await;
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
        return Err(NodeupError::BadBootConfig(BootConfigError::NotMarked));
    }
    let boot = BootConfig::from_user_data(user_data)
        .map_err(|e| NodeupError::BadBootConfig(BootConfigError::Parse(e)))?;
    if boot.kind != ballast_state::node::KIND_BOOT_CONFIG {
        return Err(NodeupError::BadBootConfig(BootConfigError::WrongKind {
            kind: boot.kind,
        }));
    }
    Ok(boot)
}

/// SIGTERM and SIGINT, caught from the moment they are registered (tokio keeps a signal that arrives before
/// anyone waits for it).
struct TerminationSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl TerminationSignals {
    /// `None` if the handlers cannot be installed (then nodeup stays up until killed, as before).
    fn register() -> Option<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Some(TerminationSignals { term, int }),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "installing the SIGTERM/SIGINT handlers");
                None
            }
        }
    }
}

/// Until SIGTERM or SIGINT, ticking the service manager every second (the supervisor restarts children that
/// exited).
async fn wait_for_termination(
    signals: Option<TerminationSignals>,
    mut manager: Option<&mut Box<dyn ServiceManager>>,
) {
    let Some(TerminationSignals { mut term, mut int }) = signals else {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The etcd supervisor reads exactly the files nodeup issues, where `EtcdTls::in_dir` expects them.
    #[test]
    fn etcd_certificates_are_where_the_supervisor_looks() {
        let root = Path::new("/tmp/node-root");
        assert_eq!(
            etcd_tls(root),
            EtcdTls::in_dir(&write::under_root(root, pki::ETCD_DIR))
        );
    }

    #[test]
    fn a_boot_config_is_marked_and_of_its_kind() {
        let unmarked = parse_boot_config("#!/bin/sh\necho hi\n").expect_err("not marked");
        assert!(matches!(
            unmarked,
            NodeupError::BadBootConfig(BootConfigError::NotMarked)
        ));
        let unparsable = parse_boot_config("#ballast-boot-config\n: : :\n").expect_err("not YAML");
        assert!(matches!(
            unparsable,
            NodeupError::BadBootConfig(BootConfigError::Parse(_))
        ));
        assert!(std::error::Error::source(&unparsable).is_some());
    }
}
