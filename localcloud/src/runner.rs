//! The instance runner: watches the emulated EC2 API and, for every running instance, does what EC2 and the
//! AMI's systemd unit would do: an IMDS endpoint on the instance's private IP, a root directory, and `nodeup`
//! started in its own process group with the environment a real instance has.
//!
//! When an instance stops or terminates, it shuts down as EC2 shuts an instance down: by default gracefully
//! (what systemd does to the AMI's `nodeup.service`, KillMode=mixed: SIGTERM to nodeup alone, then, once nodeup
//! exited or after [`SHUTDOWN_GRACE`], SIGKILL of the rest of its process group), and with a power cut (SIGKILL
//! of the whole group at once) when the call asked `SkipOsShutdown=true` (the emulator remembers it:
//! `GET /_ballast/power-cuts`). Shutdowns run as tasks of their own, so that a slow one never holds up the
//! polling and booting of other instances. Only once an instance is off are its volumes unmounted (a
//! replacement waits for them, as on EC2) and its IMDS endpoint closed.
//!
//! Each poll asks the emulator for a digest per instance (and one of the volume attachments) and describes only
//! the instances whose digest changed, so the steady state costs one cheap request; user-data is read once per
//! instance at boot.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{Filter, Instance, InstanceAttributeName};

use crate::imds::{CredentialIssuer, ImdsServer, InstanceMetadata, InstanceProfileRef};
use crate::machine::Ipv4Net;
use crate::machines::{MachineInstance, MachineInstanceError, Machines, Placement};
use crate::namespace;
use crate::process::{group_members, kill_group, ProcessRecord, Spawner};
use crate::state::{now_rfc3339, AccessKey, InstanceRecord, StateDir};
use crate::volumes::{self, Attached};

/// How long one poll waits for the emulator's instance digest to change by default (a change ends the wait at
/// once): the idle rhythm at which the runner reaps nodeup exits and retries boots, cheap enough to idle at.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(250);
/// A failed boot (port taken, spawn failure) is retried after this long rather than on every poll.
const BOOT_RETRY_DELAY: Duration = Duration::from_secs(5);
/// How long a graceful shutdown waits for nodeup to exit after its SIGTERM before the group is SIGKILLed. The
/// AMI's unit allows 2 minutes (TimeoutStopSec=2min); nodeup's own shutdown is bounded far below that (the etcd
/// leadership handoff within about 1 s, then etcd's stop). 10 s keeps a nodeup that hangs from holding its etcd
/// volume, and so its replacement, for minutes on the local cloud, while a healthy one never comes near it.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// After the group's SIGKILL, how long to wait for its processes to be gone before the volumes are unmounted
/// anyway (a process stuck in uninterruptible sleep; logged). SIGKILLed processes are gone within milliseconds.
const GROUP_EXIT_WAIT: Duration = Duration::from_secs(2);
/// How often a shutdown looks whether nodeup exited, and whether its group is empty.
const EXIT_POLL: Duration = Duration::from_millis(10);
/// The least time between two full looks: a burst of changes (an Auto Scaling group launching a hundred
/// instances) must not turn into back-to-back full DescribeInstances. A change after a quiet spell is looked at
/// at once.
const MIN_FULL_POLL_GAP: Duration = Duration::from_millis(100);
/// Between full looks the runner asks the emulator only for a digest per instance (see
/// [`instances_fingerprint`]) and describes the instances whose digest changed; it describes every running
/// instance this often, should a change escape the digests: at the first poll that finds nothing changed (a
/// full describe costs the emulator 1.6 s of its one core at two hundred instances; in a burst of launches it
/// only delayed them), and after [`FULL_POLL_OVERDUE`] in any case.
const FULL_POLL_AT_LEAST_EVERY: Duration = Duration::from_secs(60);
/// The longest the periodic full look waits for a quiet poll.
const FULL_POLL_OVERDUE: Duration = Duration::from_secs(240);
/// How many digest requests in a row may go unanswered before the runner describes every instance instead. One
/// unanswered request is a busy emulator (a hundred nodeups booting at once), not a missing endpoint, and a full
/// describe then (1.6 s of the emulator's one core at two hundred instances) only made it busier: the doubling
/// of the large lifecycle benchmark fell into that, and so did a control-plane replacement behind it.
const FINGERPRINT_MISSES_BEFORE_FULL_LOOK: u32 = 3;
/// How many instance ids one filtered DescribeInstances names (EC2 takes up to 200 filter values).
const IDS_PER_DESCRIBE: usize = 100;

/// What the runner needs to know.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    pub state: StateDir,
    /// The AWS emulator (`AWS_ENDPOINT_URL` of every instance).
    pub endpoint: String,
    pub region: String,
    /// The runner's own credentials (DescribeInstances, DescribeInstanceAttribute).
    pub admin: AccessKey,
    /// The EC2 service's credentials: the IMDS assumes instance roles with them.
    pub ec2_service: AccessKey,
    pub nodeup: PathBuf,
    /// Port of every instance's IMDS endpoint (on the instance's private IP).
    pub imds_port: u16,
    pub poll_interval: Duration,
    /// Instances are machines (`--instances machines`) rather than nodeup processes.
    pub machines: Option<Arc<Machines>>,
}

/// Failures of one poll; the loop logs them and carries on.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// DescribeInstances failed; the SDK's error is the source (logged with its whole chain).
    #[error("DescribeInstances failed")]
    DescribeInstances(
        #[source]
        aws_sdk_ec2::error::SdkError<
            aws_sdk_ec2::operation::describe_instances::DescribeInstancesError,
            aws_sdk_ec2::config::http::HttpResponse,
        >,
    ),
    /// DescribeVolumes failed (while reading which volumes are attached).
    #[error("DescribeVolumes failed")]
    DescribeVolumes(
        #[source]
        aws_sdk_ec2::error::SdkError<
            aws_sdk_ec2::operation::describe_volumes::DescribeVolumesError,
            aws_sdk_ec2::config::http::HttpResponse,
        >,
    ),
}

/// Failures to boot one instance; retried after [`BOOT_RETRY_DELAY`].
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// DescribeInstanceAttribute(userData) failed.
    #[error("reading the user-data of {instance_id}: {message}")]
    UserData {
        instance_id: String,
        message: String,
    },
    /// The instance's user-data is not valid base64.
    #[error("the user-data of {instance_id} is not valid base64")]
    UserDataEncoding { instance_id: String },
    /// The IMDS endpoint could not be bound.
    #[error("binding the IMDS endpoint of {instance_id} on {addr}: {source}")]
    Imds {
        instance_id: String,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The instance's directories or log could not be made.
    #[error("preparing {path} for {instance_id}: {source}")]
    Files {
        instance_id: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// nodeup could not be started.
    #[error("starting {nodeup} for {instance_id}: {source}")]
    Spawn {
        instance_id: String,
        nodeup: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The record could not be written.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// The instance's machine could not be booted.
    #[error("booting {instance_id} as a machine: {source}")]
    Machine {
        instance_id: String,
        #[source]
        source: MachineInstanceError,
    },
}

/// Shared by the boot tasks of one poll.
struct Context {
    options: RunnerOptions,
    ec2: aws_sdk_ec2::Client,
    issuer: CredentialIssuer,
    spawner: Spawner,
}

/// A booted instance.
struct Booted {
    record: InstanceRecord,
    imds: ImdsServer,
    body: Body,
    user_data: Option<Vec<u8>>,
}

/// What runs an instance.
enum Body {
    /// nodeup, leader of a process group of the host's.
    Process(Child),
    /// A machine; nodeup runs in it, started by its systemd.
    Machine(Box<MachineInstance>),
}

/// The runner's loop and the instances it booted.
pub struct Runner {
    ctx: Arc<Context>,
    booted: HashMap<String, Booted>,
    retry_after: HashMap<String, Instant>,
    /// The emulator's digests as of the last look that acted on them.
    last_fingerprint: Option<Fingerprint>,
    /// Digest requests unanswered in a row (see [`FINGERPRINT_MISSES_BEFORE_FULL_LOOK`]).
    fingerprint_misses: u32,
    /// When every running instance was last described.
    last_full_poll: Option<Instant>,
    /// False while a volume EC2 says is attached could not be mounted: the next poll tries again.
    volumes_settled: bool,
    /// Volume attachments mounted into instance roots (`volumes`), including those of instances shutting down.
    mounted: BTreeSet<Attached>,
    /// Instances shutting down, with their process group (cut at once if the local cloud goes down meanwhile).
    stopping: HashMap<String, Option<u32>>,
    /// The shutdown tasks; each returns its instance's id once the instance is off.
    shutdowns: tokio::task::JoinSet<String>,
    /// The instance of each shutdown task (a task that panicked returns no id).
    shutdown_tasks: HashMap<tokio::task::Id, String>,
}

/// How an instance goes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shutdown {
    /// EC2's default: the OS shuts down (SIGTERM to nodeup, KillMode=mixed).
    Graceful,
    /// SkipOsShutdown, an eviction, the local cloud going down: SIGKILL of the whole group at once.
    PowerCut,
}

impl Shutdown {
    fn name(self) -> &'static str {
        match self {
            Shutdown::Graceful => "graceful",
            Shutdown::PowerCut => "power cut",
        }
    }
}

impl Runner {
    pub fn new(options: RunnerOptions) -> std::io::Result<Self> {
        let admin = crate::aws::sdk_config(&options.endpoint, &options.region, &options.admin);
        let service =
            crate::aws::sdk_config(&options.endpoint, &options.region, &options.ec2_service);
        Ok(Runner {
            ctx: Arc::new(Context {
                ec2: aws_sdk_ec2::Client::new(&admin),
                issuer: CredentialIssuer::new(&service),
                spawner: Spawner::start()?,
                options,
            }),
            booted: HashMap::new(),
            retry_after: HashMap::new(),
            last_fingerprint: None,
            fingerprint_misses: 0,
            last_full_poll: None,
            volumes_settled: true,
            mounted: BTreeSet::new(),
            stopping: HashMap::new(),
            shutdowns: tokio::task::JoinSet::new(),
            shutdown_tasks: HashMap::new(),
        })
    }

    /// Polls until `shutdown` completes, then powers every instance off. Each poll waits (up to the poll
    /// interval) for the emulator's instance digest to change, so that a change is acted on at once.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let interval = self.ctx.options.poll_interval;
        loop {
            let endpoint = self.ctx.options.endpoint.clone();
            let unchanged = self.last_fingerprint.as_ref().map(|f| f.all.clone());
            let changed = async move {
                let started = Instant::now();
                let digest = instances_fingerprint(&endpoint, unchanged.as_deref(), interval).await;
                if digest.is_none() {
                    // The emulator did not answer: keep the poll interval rather than spin.
                    tokio::time::sleep(interval.saturating_sub(started.elapsed())).await;
                }
                digest
            };
            tokio::select! {
                () = &mut shutdown => break,
                Some(done) = self.shutdowns.join_next_with_id(), if !self.shutdowns.is_empty() => {
                    self.shutdown_finished(done);
                    // A replacement may be waiting for this instance's volume: mount it now rather than at the
                    // next tick.
                    match self.mount_volumes().await {
                        Ok(settled) => self.volumes_settled = settled,
                        Err(e) => {
                            self.volumes_settled = false;
                            tracing::warn!(error = %e, "mounting volumes after a shutdown failed; retrying");
                        }
                    }
                }
                fingerprint = changed => {
                    if let Err(e) = self.poll(fingerprint).await {
                        // The SDK's errors say little at the top ("service error"): log every cause.
                        tracing::warn!(error = %crate::aws::error_chain(&e), "poll failed; retrying");
                    }
                }
            }
        }
        tracing::info!(
            instances = self.booted.len(),
            shutting_down = self.stopping.len(),
            "shutting down: powering every instance off"
        );
        let ids: Vec<String> = self.booted.keys().cloned().collect();
        let all: HashSet<String> = ids.iter().cloned().collect();
        self.shut_down(
            ids,
            &HashMap::new(),
            &all,
            "local cloud stopped",
            "cloud-down",
        );
        // Graceful shutdowns still in flight are cut too: the machine they run on goes away.
        for pgid in self.stopping.values().flatten() {
            if let Err(e) = kill_group(*pgid) {
                tracing::warn!(pgid, error = %e, "killing a process group shutting down");
            }
        }
        while let Some(done) = self.shutdowns.join_next_with_id().await {
            self.shutdown_finished(done);
        }
    }

    /// A shutdown task ended: its instance is off, its volumes unmounted.
    fn shutdown_finished(
        &mut self,
        done: Result<(tokio::task::Id, String), tokio::task::JoinError>,
    ) {
        let (task, id) = match done {
            Ok((task, id)) => (task, Some(id)),
            Err(e) => {
                tracing::warn!(error = %e, "a shutdown task failed");
                (e.id(), None)
            }
        };
        let Some(id) = self.shutdown_tasks.remove(&task).or(id) else {
            return;
        };
        self.stopping.remove(&id);
        self.mounted.retain(|m| m.instance_id != id);
    }

    /// One observation of EC2 and the actions it calls for. Only the instances whose digest changed since the
    /// last look (or whose boot waits for a retry) are described; every running instance is described when the
    /// digests are not available and at least every [`FULL_POLL_AT_LEAST_EVERY`]. moto's DescribeInstances
    /// costs about 8 ms per instance it returns: at two hundred instances, describing all of them on every change
    /// kept the emulator busy for seconds. `fingerprint` is the emulator's digests just read (None when it did
    /// not answer).
    pub async fn poll(&mut self, fingerprint: Option<Fingerprint>) -> Result<(), RunnerError> {
        if fingerprint.is_some() {
            self.fingerprint_misses = 0;
        } else if self.last_fingerprint.is_some() {
            // The last digests stay: the next request compares against them, so no change is missed meanwhile.
            self.fingerprint_misses = self.fingerprint_misses.saturating_add(1);
            if self.fingerprint_misses < FINGERPRINT_MISSES_BEFORE_FULL_LOOK {
                tracing::debug!(
                    misses = self.fingerprint_misses,
                    "the emulator's digests did not come in time; asking again"
                );
                return Ok(());
            }
            tracing::info!(
                misses = self.fingerprint_misses,
                "the emulator's digests did not come in time; describing every instance"
            );
        }
        let now = Instant::now();
        let retries_due: Vec<String> = self
            .retry_after
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let partial = match next_look(
            fingerprint.as_ref(),
            self.last_fingerprint.as_ref(),
            retries_due,
            self.last_full_poll.map(|at| at.elapsed()),
            self.volumes_settled,
        ) {
            Look::Nothing => {
                self.reap();
                return Ok(());
            }
            Look::Changed { ids, volumes } => Some((ids, volumes)),
            Look::Everything => None,
        };
        // Only a full look is costly enough to space out; one of the changed instances is not.
        if let (None, Some(wait)) = (
            &partial,
            self.last_full_poll
                .and_then(|at| MIN_FULL_POLL_GAP.checked_sub(at.elapsed())),
        ) {
            tokio::time::sleep(wait).await;
        }
        let (running, looked_at) = match &partial {
            Some((ids, _)) => (self.describe_running_among(ids).await?, Some(ids)),
            None => (self.describe_running().await?, None),
        };
        // The digests from before the describe: a change during it shows as a new digest next time. Unanswered,
        // the last digests stay: compared with them, the next answer names every change since (a few more
        // instances to describe), where no digests at all would make the next look a full one too.
        if fingerprint.is_some() {
            self.last_fingerprint = fingerprint;
        }
        if looked_at.is_none() {
            self.last_full_poll = Some(Instant::now());
        }
        let running_ids: HashSet<&str> = running
            .iter()
            .filter_map(|(i, _)| i.instance_id())
            .collect();

        // Gone: not running among the instances looked at (all of them, or those whose digest changed), or no
        // longer in the emulator's digests at all.
        let known = self.last_fingerprint.as_ref();
        let gone: Vec<String> = self
            .booted
            .keys()
            .filter(|id| !running_ids.contains(id.as_str()))
            .filter(|id| {
                looked_at.is_none_or(|ids| ids.contains(id))
                    || known.is_some_and(|f| !f.instances.contains_key(id.as_str()))
            })
            .cloned()
            .collect();
        tracing::debug!(
            looked_at = ?looked_at,
            running = running_ids.len(),
            gone = ?gone,
            "poll described"
        );
        let powered_off = !gone.is_empty();
        if !gone.is_empty() {
            let (states, cuts) = self.states_and_power_cuts(&gone).await;
            self.shut_down(
                gone,
                &states,
                &cuts,
                "instance left the running state",
                "gone",
            );
        }

        let now = Instant::now();
        self.retry_after.retain(|_, t| *t > now);
        let mut boots = tokio::task::JoinSet::new();
        for (instance, owner) in &running {
            let Some(id) = instance.instance_id() else {
                continue;
            };
            if let Some(booted) = self.booted.get_mut(id) {
                // Tags and the instance profile may change while it runs.
                booted.imds.update(metadata(
                    instance,
                    owner,
                    booted.user_data.clone(),
                    &self.ctx.options.region,
                ));
                continue;
            }
            if self.retry_after.contains_key(id) {
                continue;
            }
            boots.spawn(boot(self.ctx.clone(), instance.clone(), owner.clone()));
        }
        let booted_now = !boots.is_empty();
        while let Some(joined) = boots.join_next().await {
            match joined {
                Ok(Ok(booted)) => {
                    tracing::info!(
                        instance_id = %booted.record.instance_id,
                        ip = %booted.record.private_ip,
                        az = %booted.record.availability_zone,
                        imds = %booted.record.imds_endpoint,
                        machine = matches!(booted.body, Body::Machine(_)),
                        "instance booted"
                    );
                    self.booted
                        .insert(booted.record.instance_id.clone(), booted);
                }
                Ok(Err((id, e))) => {
                    tracing::warn!(instance_id = %id, error = %e, "boot failed; retrying later");
                    self.retry_after
                        .insert(id, Instant::now() + BOOT_RETRY_DELAY);
                }
                Err(e) => tracing::warn!(error = %e, "boot task failed"),
            }
        }

        self.reap();
        // Volumes are described when their attachments changed, or an instance came or went.
        let volumes_changed = partial.as_ref().is_none_or(|(_, volumes)| *volumes);
        if volumes_changed || powered_off || booted_now || !self.volumes_settled {
            self.volumes_settled = self.mount_volumes().await?;
        }
        Ok(())
    }

    /// Mounts the volumes EC2 says are attached to instances running here and unmounts the ones no longer
    /// attached (`volumes`). A volume another instance still holds is mounted only once that one is off: one
    /// shutting down is waited for; one still running while EC2 says its volume is attached elsewhere is shut
    /// down first. On EC2 a volume moves only once its holder is off, and two etcds must never share a data dir.
    /// True when nothing is left to mount (a volume waiting for its holder, or a failed mount, is not).
    async fn mount_volumes(&mut self) -> Result<bool, RunnerError> {
        let attached = self.describe_attachments().await?;
        let running: BTreeSet<String> = self.booted.keys().cloned().collect();
        let stopping: BTreeSet<String> = self.stopping.keys().cloned().collect();
        let plan = volumes::plan_mounts(&attached, &self.mounted, &running, &stopping);
        if !plan.evict.is_empty() {
            // A holder EC2 no longer lists as running left between this poll's two looks: it shuts down like any
            // other (gracefully unless its call skipped the OS shutdown). One still running had its volume
            // attached elsewhere, which EC2 refuses (VolumeInUse) and moto allows: a power cut, the only way to
            // keep the volume's data dir to one etcd at once.
            let (states, mut cuts) = self.states_and_power_cuts(&plan.evict).await;
            let (left, still): (Vec<String>, Vec<String>) = plan
                .evict
                .iter()
                .cloned()
                .partition(|id| states.get(id).is_some_and(|s| s != "running"));
            self.shut_down(
                left,
                &states,
                &cuts,
                "instance left the running state",
                "gone",
            );
            cuts.extend(still.iter().cloned());
            self.shut_down(
                still,
                &HashMap::new(),
                &cuts,
                "its volume was attached to another instance",
                "evicted",
            );
        }
        for waiting in &plan.waiting {
            tracing::debug!(instance_id = %waiting.instance_id, volume = %waiting.volume_id, "volume waits for its previous holder to be off");
        }
        let volumes_dir = self.ctx.options.state.volumes_dir();
        let mut settled = plan.waiting.is_empty();
        for gone in &plan.unmount {
            self.mounted.remove(gone);
            // A powered-off instance had everything under its root unmounted already.
            let Some(booted) = self.booted.get_mut(&gone.instance_id) else {
                continue;
            };
            let detached = match (&mut booted.body, &self.ctx.options.machines) {
                (Body::Machine(m), Some(machines)) => machines
                    .detach_volume(m, &gone.volume_id)
                    .map_err(|e| e.to_string()),
                _ => {
                    let root = &booted.record.root;
                    let volume = volumes::volume_dir(&volumes_dir, &gone.volume_id);
                    let device = volumes::device_path(root, &gone.device);
                    volumes::unmount_attachment(root, &volume, &device).map_err(|e| e.to_string())
                }
            };
            match detached {
                Ok(()) => {
                    tracing::info!(instance_id = %gone.instance_id, volume = %gone.volume_id, "volume detached")
                }
                Err(e) => {
                    tracing::warn!(instance_id = %gone.instance_id, volume = %gone.volume_id, error = %e, "unmounting a detached volume")
                }
            }
        }
        for new in plan.mount {
            let size = match &self.ctx.options.machines {
                Some(_) => self.volume_size_gib(&new.volume_id).await,
                None => Ok(0),
            };
            let Some(booted) = self.booted.get_mut(&new.instance_id) else {
                continue;
            };
            let attached = match (&mut booted.body, &self.ctx.options.machines) {
                (Body::Machine(m), Some(machines)) => size.and_then(|size| {
                    machines
                        .attach_volume(m, &volumes_dir, &new.volume_id, size)
                        .map_err(|e| e.to_string())
                }),
                _ => {
                    let volume = volumes::volume_dir(&volumes_dir, &new.volume_id);
                    let device = volumes::device_path(&booted.record.root, &new.device);
                    volumes::mount(&volume, &device)
                        .map(|()| device.display().to_string())
                        .map_err(|e| e.to_string())
                }
            };
            match attached {
                Ok(device) => {
                    tracing::info!(instance_id = %new.instance_id, volume = %new.volume_id, %device, "volume attached");
                    self.mounted.insert(new);
                }
                Err(e) => {
                    settled = false;
                    tracing::warn!(instance_id = %new.instance_id, volume = %new.volume_id, error = %e, "mounting a volume; retrying")
                }
            }
        }
        Ok(settled)
    }

    /// The size of volume `volume_id` in GiB, for its file on a machine's loop device.
    async fn volume_size_gib(&self, volume_id: &str) -> Result<u64, String> {
        let described = self
            .ctx
            .ec2
            .describe_volumes()
            .volume_ids(volume_id)
            .send()
            .await;
        match described {
            Ok(out) => out
                .volumes()
                .first()
                .and_then(|v| v.size())
                .and_then(|size| u64::try_from(size).ok())
                .ok_or_else(|| format!("EC2 gives no size for {volume_id}")),
            Err(e) => Err(format!(
                "DescribeVolumes {volume_id}: {}",
                crate::aws::error_chain(&e)
            )),
        }
    }

    /// Every volume attachment EC2 reports as attached: from the emulator's own listing (see
    /// [`volume_attachments`]), else from DescribeVolumes.
    async fn describe_attachments(&self) -> Result<Vec<Attached>, RunnerError> {
        if let Some(attached) = volume_attachments(&self.ctx.options.endpoint).await {
            return Ok(attached);
        }
        let mut out = Vec::new();
        let mut pages = self.ctx.ec2.describe_volumes().into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(RunnerError::DescribeVolumes)?;
            for volume in page.volumes() {
                for a in volume.attachments() {
                    if a.state().map(|s| s.as_str()) != Some("attached") {
                        continue;
                    }
                    out.push(Attached {
                        volume_id: volume.volume_id().unwrap_or_default().to_owned(),
                        instance_id: a.instance_id().unwrap_or_default().to_owned(),
                        device: a.device().unwrap_or_default().to_owned(),
                    });
                }
            }
        }
        Ok(out)
    }

    /// Records nodeup's exit when it ended on its own (the instance keeps running, as EC2 would).
    fn reap(&mut self) {
        for booted in self.booted.values_mut() {
            if booted.record.nodeup_exit.is_some() {
                continue;
            }
            let ended = match &mut booted.body {
                Body::Process(child) => match child.try_wait() {
                    Ok(Some(status)) => Some(status.to_string()),
                    _ => None,
                },
                // The machine halted by itself (an instance that shuts down from inside).
                Body::Machine(m) => (!m.is_running()).then(|| "the machine halted".to_string()),
            };
            if let Some(status) = ended {
                tracing::warn!(instance_id = %booted.record.instance_id, %status, "nodeup exited");
                booted.record.nodeup_exit = Some(status);
                if let Err(e) = self.ctx.options.state.write_instance(&booted.record) {
                    tracing::warn!(error = %e, "recording nodeup's exit");
                }
            }
        }
    }

    /// Shuts `ids` down: a power cut for those in `cuts` (every SIGKILL sent here, before this returns, so that no
    /// instance outlives another one's slower teardown), gracefully for the others; the rest of each shutdown
    /// (waiting for nodeup, unmounting, closing the IMDS endpoint, the record) runs in a task of its own.
    /// `states` holds the EC2 state of each instance when known, else `default_state` is recorded.
    fn shut_down(
        &mut self,
        ids: Vec<String>,
        states: &HashMap<String, String>,
        cuts: &HashSet<String>,
        why: &str,
        default_state: &str,
    ) {
        let mut off: Vec<(Booted, Shutdown)> = ids
            .iter()
            .filter_map(|id| self.booted.remove(id))
            .map(|b| {
                let how = if cuts.contains(&b.record.instance_id) {
                    Shutdown::PowerCut
                } else {
                    Shutdown::Graceful
                };
                (b, how)
            })
            .collect();
        for (b, how) in off.iter_mut() {
            if *how != Shutdown::PowerCut {
                continue;
            }
            match &mut b.body {
                Body::Machine(m) => m.kill_all(),
                Body::Process(_) => {
                    if let Some(p) = b.record.nodeup {
                        if let Err(e) = kill_group(p.pid) {
                            tracing::warn!(instance_id = %b.record.instance_id, error = %e, "killing the process group");
                        }
                    }
                }
            }
        }
        for (mut b, how) in off {
            let id = b.record.instance_id.clone();
            let state = states
                .get(&id)
                .cloned()
                .unwrap_or_else(|| default_state.to_owned());
            tracing::info!(instance_id = %id, shutdown = how.name(), %state, why, "instance shutting down");
            // Recorded now, so that nobody takes an instance shutting down for a running one (it has no
            // `stopped_at` until it is off).
            b.record.state = state.clone();
            b.record.shutdown = Some(how.name().to_owned());
            if let Err(e) = self.ctx.options.state.write_instance(&b.record) {
                tracing::warn!(error = %e, "recording the shutdown's start");
            }
            self.stopping
                .insert(id.clone(), b.record.nodeup.map(|p| p.pid));
            let task = self.shutdowns.spawn(stop_instance(
                self.ctx.clone(),
                b,
                how,
                state,
                why.to_owned(),
            ));
            self.shutdown_tasks.insert(task.id(), id);
        }
    }

    /// Running instances with their reservation's owner (the account id).
    async fn describe_running(&self) -> Result<Vec<(Instance, String)>, RunnerError> {
        self.describe_running_where(None).await
    }

    /// The running instances among `ids`, with their reservation's owner (a filter, not InstanceIds: an id
    /// EC2 no longer knows is no error).
    async fn describe_running_among(
        &self,
        ids: &[String],
    ) -> Result<Vec<(Instance, String)>, RunnerError> {
        let mut out = Vec::new();
        for chunk in ids.chunks(IDS_PER_DESCRIBE) {
            let among = Filter::builder()
                .name("instance-id")
                .set_values(Some(chunk.to_vec()))
                .build();
            out.extend(self.describe_running_where(Some(among)).await?);
        }
        Ok(out)
    }

    /// Running instances (that `also` matches, if given) with their reservation's owner, every page of them.
    async fn describe_running_where(
        &self,
        also: Option<Filter>,
    ) -> Result<Vec<(Instance, String)>, RunnerError> {
        let running = Filter::builder()
            .name("instance-state-name")
            .values("running")
            .build();
        let mut out = Vec::new();
        let mut pages = self
            .ctx
            .ec2
            .describe_instances()
            .set_filters(Some([Some(running), also].into_iter().flatten().collect()))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(RunnerError::DescribeInstances)?;
            for reservation in page.reservations() {
                let owner = reservation.owner_id().unwrap_or("123456789012").to_owned();
                for instance in reservation.instances() {
                    out.push((instance.clone(), owner.clone()));
                }
            }
        }
        Ok(out)
    }

    /// What a shutdown of `ids` needs to know: their EC2 states (for the record: stopped or terminated) and
    /// which of them were asked to skip the OS shutdown (a power cut).
    async fn states_and_power_cuts(
        &self,
        ids: &[String],
    ) -> (HashMap<String, String>, HashSet<String>) {
        tokio::join!(
            self.describe_states(ids),
            power_cuts(&self.ctx.options.endpoint)
        )
    }

    /// The current state names of `ids` (best effort: only for the records).
    async fn describe_states(&self, ids: &[String]) -> HashMap<String, String> {
        let result = self
            .ctx
            .ec2
            .describe_instances()
            .set_instance_ids(Some(ids.to_vec()))
            .send()
            .await;
        let mut states = HashMap::new();
        match result {
            Ok(out) => {
                for instance in out.reservations().iter().flat_map(|r| r.instances()) {
                    if let (Some(id), Some(state)) = (
                        instance.instance_id(),
                        instance
                            .state()
                            .and_then(|s| s.name())
                            .map(|n| n.as_str().to_owned()),
                    ) {
                        states.insert(id.to_owned(), state);
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = %crate::aws::error_chain(&e), "describing stopped instances")
            }
        }
        states
    }
}

/// One instance's shutdown, to the end: nodeup stopped (gracefully: SIGTERM, then up to [`SHUTDOWN_GRACE`] for it
/// to exit; a power cut's SIGKILL was sent already), the rest of its process group SIGKILLed and gone, its
/// volumes unmounted, its IMDS endpoint closed, the record written. Returns the instance's id.
async fn stop_instance(
    ctx: Arc<Context>,
    booted: Booted,
    how: Shutdown,
    ec2_state: String,
    why: String,
) -> String {
    let state_dir = ctx.options.state.clone();
    let Booted {
        record, imds, body, ..
    } = booted;
    let mut child = match body {
        Body::Process(child) => child,
        Body::Machine(machine) => {
            return stop_machine(ctx, record, imds, *machine, how, ec2_state).await;
        }
    };
    let mut record = record;
    let id = record.instance_id.clone();
    let pgid = record.nodeup.map(|p| p.pid);
    // nodeup's own exit, when it came before the group's SIGKILL.
    let mut own_exit = None;
    if how == Shutdown::Graceful && record.nodeup_exit.is_none() {
        if let Some(p) = record.nodeup {
            p.signal(nix::sys::signal::Signal::SIGTERM);
        }
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    own_exit = Some(status);
                    break;
                }
                Ok(None) if Instant::now() < deadline => tokio::time::sleep(EXIT_POLL).await,
                Ok(None) => {
                    tracing::warn!(instance_id = %id, grace = ?SHUTDOWN_GRACE, "nodeup did not exit after SIGTERM; killing its group");
                    break;
                }
                Err(e) => {
                    tracing::warn!(instance_id = %id, error = %e, "waiting for nodeup after SIGTERM; killing its group");
                    break;
                }
            }
        }
    }
    // KillMode=mixed: once the main process exited (or the grace ran out), whatever remains is SIGKILLed.
    if let Some(pgid) = pgid {
        if let Err(e) = kill_group(pgid) {
            tracing::warn!(instance_id = %id, error = %e, "killing the process group");
        }
    }
    let status = match own_exit {
        Some(status) => Ok(status),
        // The group was SIGKILLed, so this returns at once.
        None => tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string()))),
    };
    // The volumes move only once nothing of the instance runs: no etcd may outlive its data dir's unmount.
    if let Some(pgid) = pgid {
        let deadline = Instant::now() + GROUP_EXIT_WAIT;
        loop {
            let left = group_members(pgid);
            if left.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                tracing::warn!(instance_id = %id, pids = ?left, "processes outlived their group's SIGKILL; unmounting anyway");
                break;
            }
            tokio::time::sleep(EXIT_POLL).await;
        }
    }
    // EC2 detaches a terminated instance's volumes once it is off.
    if let Err(e) = volumes::unmount_all_under(&record.root) {
        tracing::warn!(instance_id = %id, error = %e, "unmounting its volumes");
    }
    imds.close().await;
    record.state = ec2_state;
    record.stopped_at = Some(now_rfc3339());
    record.shutdown = Some(how.name().to_owned());
    if record.nodeup_exit.is_none() {
        record.nodeup_exit = Some(match (status, own_exit.is_some()) {
            (Ok(s), true) => s.to_string(),
            (Ok(s), false) => format!("killed ({why}): {s}"),
            (Err(e), _) => format!("killed ({why}); wait failed: {e}"),
        });
    }
    tracing::info!(instance_id = %id, state = %record.state, shutdown = how.name(), nodeup_exit = ?record.nodeup_exit, "instance off");
    if let Err(e) = state_dir.write_instance(&record) {
        tracing::warn!(error = %e, "recording the shutdown");
    }
    id
}

/// A machine's shutdown, to the end (`Machines::shut_down`): halted, or its power cut; its volumes released, its
/// namespace gone, its IMDS closed, the record written. Returns the instance's id.
async fn stop_machine(
    ctx: Arc<Context>,
    mut record: InstanceRecord,
    imds: ImdsServer,
    machine: MachineInstance,
    how: Shutdown,
    ec2_state: String,
) -> String {
    let id = record.instance_id.clone();
    let ended = match ctx.options.machines.clone() {
        Some(machines) => {
            let grace = (how == Shutdown::Graceful).then_some(SHUTDOWN_GRACE);
            let for_task = id.clone();
            tokio::task::spawn_blocking(move || machines.shut_down(&for_task, machine, grace))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
        }
        None => Err("no machines in this local cloud".to_string()),
    };
    imds.close().await;
    let how_it_ended = match &ended {
        Ok(crate::machine::Stopped::Halted) => "halted".to_string(),
        Ok(crate::machine::Stopped::PowerCut) if how == Shutdown::Graceful => {
            format!("power cut after the {SHUTDOWN_GRACE:?} grace")
        }
        Ok(crate::machine::Stopped::PowerCut) => "power cut".to_string(),
        Err(e) => {
            tracing::warn!(instance_id = %id, error = %e, "shutting a machine down");
            format!("shutdown failed: {e}")
        }
    };
    record.state = ec2_state;
    record.stopped_at = Some(now_rfc3339());
    record.shutdown = Some(how.name().to_owned());
    if record.nodeup_exit.is_none() {
        record.nodeup_exit = Some(format!("machine {how_it_ended}"));
    }
    tracing::info!(instance_id = %id, state = %record.state, shutdown = how.name(), ended = %how_it_ended, "instance off");
    if let Err(e) = ctx.options.state.write_instance(&record) {
        tracing::warn!(error = %e, "recording the shutdown");
    }
    id
}

/// Boots one instance: user-data, IMDS endpoint, root directory, nodeup.
async fn boot(
    ctx: Arc<Context>,
    instance: Instance,
    owner: String,
) -> Result<Booted, (String, BootError)> {
    let id = instance.instance_id().unwrap_or_default().to_owned();
    boot_inner(&ctx, &instance, &owner)
        .await
        .map_err(|e| (id, e))
}

async fn boot_inner(ctx: &Context, instance: &Instance, owner: &str) -> Result<Booted, BootError> {
    let options = &ctx.options;
    let id = instance.instance_id().unwrap_or_default().to_owned();
    let user_data = read_user_data(&ctx.ec2, &id).await?;
    let meta = metadata(instance, owner, user_data.clone(), &options.region);
    if let Some(machines) = &options.machines {
        return boot_machine(ctx, machines.clone(), instance, meta, user_data).await;
    }

    // A private IP inside 127.0.0.0/8 is bindable: the instance's IMDS lives there, like 169.254.169.254 lives
    // on every EC2 instance. Outside it (a VPC that is not on the local cloud's network) fall back to an
    // ephemeral port on 127.0.0.1 so the instance still boots.
    let ip: Option<Ipv4Addr> = meta.private_ip.parse().ok();
    let addr = match ip {
        Some(ip) if ip.is_loopback() => SocketAddr::new(IpAddr::V4(ip), options.imds_port),
        _ => {
            tracing::warn!(
                instance_id = %id, ip = %meta.private_ip,
                "private IP is not a loopback address (use a VPC CIDR inside 127.0.0.0/8): IMDS on 127.0.0.1"
            );
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)
        }
    };
    let imds = ImdsServer::bind(addr, meta.clone(), ctx.issuer.clone())
        .await
        .map_err(|source| BootError::Imds {
            instance_id: id.clone(),
            addr,
            source,
        })?;
    imds.prewarm_credentials().await;

    let files = |path: PathBuf| {
        let id = id.clone();
        move |source| BootError::Files {
            instance_id: id,
            path,
            source,
        }
    };
    // Instance ids are unique: a replacement instance gets a new id, hence a fresh root. A stopped and
    // started instance keeps its root, like an EBS root volume.
    let root = options.state.instance_root(&id);
    std::fs::create_dir_all(&root).map_err(files(root.clone()))?;
    namespace::prepare_instance_root(&root).map_err(files(root.clone()))?;
    let log_path = options.state.instance_log(&id);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(files(log_path.clone()))?;
    let log_err = log.try_clone().map_err(files(log_path.clone()))?;

    let mut cmd = Command::new(&options.nodeup);
    cmd.arg("--root")
        .arg(&root)
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // An instance has none of the operator's environment: in particular no AWS keys or profiles, so that the
        // SDK's default chain reaches the IMDS credentials of the instance's role.
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into()),
        )
        .env("HOME", &root)
        .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint())
        .env("AWS_ENDPOINT_URL", &options.endpoint)
        .env("AWS_REGION", &options.region);
    let hosts = namespace::hosts_file(&root);
    namespace::with_own_hosts(&mut cmd, &hosts).map_err(files(hosts))?;
    for passthrough in ["RUST_LOG", "RUST_BACKTRACE"] {
        if let Some(v) = std::env::var_os(passthrough) {
            cmd.env(passthrough, v);
        }
    }
    let child = ctx
        .spawner
        .spawn(cmd)
        .await
        .map_err(|source| BootError::Spawn {
            instance_id: id.clone(),
            nodeup: options.nodeup.clone(),
            source,
        })?;

    let record = InstanceRecord {
        instance_id: id.clone(),
        private_ip: meta.private_ip.clone(),
        availability_zone: meta.availability_zone.clone(),
        subnet_id: instance.subnet_id().map(str::to_owned),
        instance_type: Some(meta.instance_type.clone()),
        autoscaling_group: meta.tags.get("aws:autoscaling:groupName").cloned(),
        state: "running".into(),
        imds_endpoint: imds.endpoint(),
        root,
        log: log_path,
        nodeup: ProcessRecord::of(child.id()),
        nodeup_exit: None,
        shutdown: None,
        booted_at: now_rfc3339(),
        stopped_at: None,
        machine: None,
    };
    let booted = Booted {
        record,
        imds,
        body: Body::Process(child),
        user_data,
    };
    if let Err(e) = options.state.write_instance(&booted.record) {
        // Do not leave an unrecorded process group behind.
        if let Some(p) = booted.record.nodeup {
            let _ = kill_group(p.pid);
        }
        return Err(e.into());
    }
    Ok(booted)
}

/// Boots one instance as a machine (`Machines::boot`) and records it.
async fn boot_machine(
    ctx: &Context,
    machines: Arc<Machines>,
    instance: &Instance,
    meta: InstanceMetadata,
    user_data: Option<Vec<u8>>,
) -> Result<Booted, BootError> {
    let id = meta.instance_id.clone();
    let failed = |source: MachineInstanceError| BootError::Machine {
        instance_id: id.clone(),
        source,
    };
    let image = machines
        .image(&id, &meta.ami_id)
        .map_err(failed)?
        .to_path_buf();
    let placement = placement(&ctx.ec2, instance, &meta).await.map_err(failed)?;
    let issuer = ctx.issuer.clone();
    let handle = tokio::runtime::Handle::current();
    let for_boot = (machines.clone(), meta.clone());
    let (machine, imds) = tokio::task::spawn_blocking(move || {
        let (machines, meta) = for_boot;
        machines.boot(&meta, &placement, &image, issuer, &handle)
    })
    .await
    .map_err(|e| {
        failed(MachineInstanceError::Io {
            what: "the boot task".into(),
            source: std::io::Error::other(e.to_string()),
        })
    })?
    .map_err(failed)?;
    imds.prewarm_credentials().await;
    let record = InstanceRecord {
        instance_id: id.clone(),
        private_ip: meta.private_ip.clone(),
        availability_zone: meta.availability_zone.clone(),
        subnet_id: instance.subnet_id().map(str::to_owned),
        instance_type: Some(meta.instance_type.clone()),
        autoscaling_group: meta.tags.get("aws:autoscaling:groupName").cloned(),
        state: "running".into(),
        imds_endpoint: format!(
            "http://{}:{} (inside the machine)",
            crate::machine::link::IMDS_ADDRESS,
            crate::machine::link::PORT
        ),
        root: machine.machine.root(),
        log: machine.machine.console(),
        nodeup: None,
        nodeup_exit: None,
        shutdown: None,
        booted_at: now_rfc3339(),
        stopped_at: None,
        machine: Some(machine.machine.id.clone()),
    };
    if let Err(e) = ctx.options.state.write_instance(&record) {
        // Do not leave an unrecorded machine running.
        let _ = tokio::task::spawn_blocking(move || machines.shut_down(&id, machine, None)).await;
        imds.close().await;
        return Err(e.into());
    }
    Ok(Booted {
        record,
        imds,
        body: Body::Machine(Box::new(machine)),
        user_data,
    })
}

/// Where an instance is in its VPC: the subnet's and the VPC's CIDRs, from EC2.
async fn placement(
    ec2: &aws_sdk_ec2::Client,
    instance: &Instance,
    meta: &InstanceMetadata,
) -> Result<Placement, MachineInstanceError> {
    let failed = |message: String| MachineInstanceError::Subnet {
        instance_id: meta.instance_id.clone(),
        message,
    };
    let subnet_id = instance
        .subnet_id()
        .ok_or_else(|| failed("it has no subnet".into()))?;
    let subnets = ec2
        .describe_subnets()
        .subnet_ids(subnet_id)
        .send()
        .await
        .map_err(|e| failed(format!("DescribeSubnets: {}", crate::aws::error_chain(&e))))?;
    let subnet = subnets
        .subnets()
        .first()
        .ok_or_else(|| failed(format!("subnet {subnet_id} not found")))?;
    let vpc_id = subnet
        .vpc_id()
        .ok_or_else(|| failed(format!("subnet {subnet_id} has no VPC")))?;
    let vpcs = ec2
        .describe_vpcs()
        .vpc_ids(vpc_id)
        .send()
        .await
        .map_err(|e| failed(format!("DescribeVpcs: {}", crate::aws::error_chain(&e))))?;
    let vpc_cidr = vpcs
        .vpcs()
        .first()
        .and_then(|v| v.cidr_block())
        .ok_or_else(|| failed(format!("VPC {vpc_id} has no IPv4 CIDR")))?;
    let subnet_cidr = subnet
        .cidr_block()
        .ok_or_else(|| failed(format!("subnet {subnet_id} has no IPv4 CIDR")))?;
    let address: Ipv4Addr = meta
        .private_ip
        .parse()
        .map_err(|_| failed(format!("private IP {:?} is not IPv4", meta.private_ip)))?;
    Ok(Placement {
        vpc_id: vpc_id.to_string(),
        vpc_cidr: Ipv4Net::parse(vpc_cidr, &format!("VPC {vpc_id}'s CIDR"))?,
        subnet_id: subnet_id.to_string(),
        subnet_cidr: Ipv4Net::parse(subnet_cidr, &format!("subnet {subnet_id}'s CIDR"))?,
        address,
    })
}

async fn read_user_data(ec2: &aws_sdk_ec2::Client, id: &str) -> Result<Option<Vec<u8>>, BootError> {
    use base64::Engine as _;
    let out = ec2
        .describe_instance_attribute()
        .instance_id(id)
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .map_err(|e| BootError::UserData {
            instance_id: id.to_owned(),
            message: crate::aws::error_chain(&e),
        })?;
    let Some(encoded) = out
        .user_data
        .and_then(|v| v.value)
        .filter(|v| !v.is_empty())
    else {
        return Ok(None);
    };
    base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map(Some)
        .map_err(|_| BootError::UserDataEncoding {
            instance_id: id.to_owned(),
        })
}

/// What the instance's IMDS serves, from its DescribeInstances entry.
fn metadata(
    instance: &Instance,
    owner: &str,
    user_data: Option<Vec<u8>>,
    region: &str,
) -> InstanceMetadata {
    let s = |v: Option<&str>| v.unwrap_or_default().to_owned();
    let id = s(instance.instance_id());
    let private_ip = s(instance.private_ip_address());
    let nic = instance.network_interfaces().first();
    let mac = nic
        .and_then(|n| n.mac_address())
        .map(str::to_owned)
        .unwrap_or_else(|| synthetic_mac(&id));
    let local_hostname = instance
        .private_dns_name()
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| {
            format!(
                "ip-{}.{region}.compute.internal",
                private_ip.replace('.', "-")
            )
        });
    let tags: BTreeMap<String, String> = instance
        .tags()
        .iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_owned(),
                t.value().unwrap_or_default().to_owned(),
            ))
        })
        .collect();
    InstanceMetadata {
        account_id: owner.to_owned(),
        ami_id: s(instance.image_id()),
        instance_type: instance
            .instance_type()
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default(),
        private_ip,
        local_hostname,
        mac,
        availability_zone: s(instance.placement().and_then(|p| p.availability_zone())),
        region: region.to_owned(),
        subnet_id: s(instance.subnet_id()),
        vpc_id: s(instance.vpc_id()),
        architecture: instance
            .architecture()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_else(|| "x86_64".into()),
        launch_time: instance
            .launch_time()
            .and_then(|t| {
                t.fmt(aws_sdk_ec2::primitives::DateTimeFormat::DateTime)
                    .ok()
            })
            .unwrap_or_default(),
        tags,
        user_data,
        instance_profile: instance.iam_instance_profile().and_then(|p| {
            Some(InstanceProfileRef {
                arn: p.arn()?.to_owned(),
                id: p.id().unwrap_or_default().to_owned(),
            })
        }),
        instance_id: id,
    }
}

/// A stable locally administered MAC for an instance the emulator reports without a network interface.
fn synthetic_mac(id: &str) -> String {
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let b = hash.to_be_bytes();
    format!(
        "0a:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[0], b[1], b[2], b[3], b[4]
    )
}

/// What a poll describes.
#[derive(Debug, PartialEq, Eq)]
enum Look {
    /// Nothing changed and the volumes are settled.
    Nothing,
    /// These instances (new, changed, or due a boot retry), and whether the volumes changed.
    Changed { ids: Vec<String>, volumes: bool },
    /// Every running instance.
    Everything,
}

/// What to describe, given the emulator's digests now (`None`: unanswered) and at the last look, the boots due a
/// retry, the time since the last full look (`None`: never) and whether the volumes are settled. Pure.
fn next_look(
    now: Option<&Fingerprint>,
    last: Option<&Fingerprint>,
    retries_due: Vec<String>,
    since_full: Option<Duration>,
    volumes_settled: bool,
) -> Look {
    let full_due = since_full.is_none_or(|t| t >= FULL_POLL_AT_LEAST_EVERY);
    let full_overdue = since_full.is_none_or(|t| t >= FULL_POLL_OVERDUE);
    let (Some(now), Some(last)) = (now, last) else {
        return Look::Everything;
    };
    if full_overdue {
        return Look::Everything;
    }
    let mut ids = now.changed_instances(last);
    ids.extend(retries_due);
    ids.sort_unstable();
    ids.dedup();
    let volumes = now.volumes != last.volumes;
    match (ids.is_empty() && !volumes, full_due, volumes_settled) {
        // A quiet poll: the periodic full look, if due, is taken now.
        (true, true, _) => Look::Everything,
        (true, false, true) => Look::Nothing,
        _ => Look::Changed { ids, volumes },
    }
}

/// The emulator's digests (`GET /_ballast/instances-fingerprint`, served by the launcher, not an AWS API): one of
/// all the others (what a wait for a change names), one of every volume attachment, and one per instance of what
/// the runner acts on (state, tags, instance profile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    all: String,
    volumes: String,
    instances: BTreeMap<String, String>,
}

impl Fingerprint {
    /// `all <digest>`, `volumes <digest>`, then `<instance-id> <digest>` lines; None when that is not what the
    /// body holds.
    fn parse(body: &str) -> Option<Self> {
        let mut all = None;
        let mut volumes = None;
        let mut instances = BTreeMap::new();
        for line in body.lines().filter(|l| !l.trim().is_empty()) {
            let (key, digest) = line.trim().split_once(' ')?;
            match key {
                "all" => all = Some(digest.to_owned()),
                "volumes" => volumes = Some(digest.to_owned()),
                _ => {
                    instances.insert(key.to_owned(), digest.to_owned());
                }
            }
        }
        Some(Fingerprint {
            all: all?,
            volumes: volumes?,
            instances,
        })
    }

    /// The instances that are new or whose digest moved since `before`.
    fn changed_instances(&self, before: &Fingerprint) -> Vec<String> {
        self.instances
            .iter()
            .filter(|(id, digest)| before.instances.get(*id) != Some(*digest))
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// The emulator's digests; None when it does not answer, and the runner then describes every instance. With
/// `unchanged` (an `all` digest), the emulator answers once its digests differ from those, or after `wait` (it
/// caps the wait at 1.5 s).
async fn instances_fingerprint(
    endpoint: &str,
    unchanged: Option<&str>,
    wait: Duration,
) -> Option<Fingerprint> {
    let path = match unchanged {
        // A digest is hex: nothing to escape.
        Some(digest) => format!(
            "/_ballast/instances-fingerprint?unchanged={digest}&wait_ms={}",
            wait.as_millis()
        ),
        None => "/_ballast/instances-fingerprint".to_owned(),
    };
    Fingerprint::parse(&emulator_get(endpoint, &path, wait).await?)
}

/// The instances whose last TerminateInstances or StopInstances asked `SkipOsShutdown=true`
/// (`GET /_ballast/power-cuts`, served by the launcher, not an AWS API). When the emulator does not answer,
/// none: a graceful shutdown is EC2's default.
async fn power_cuts(endpoint: &str) -> HashSet<String> {
    #[derive(serde::Deserialize)]
    struct PowerCuts {
        instance_ids: Vec<String>,
    }
    let Some(body) = emulator_get(endpoint, "/_ballast/power-cuts", Duration::ZERO).await else {
        tracing::warn!(
            "the emulator did not say which terminations skip the OS shutdown: all graceful"
        );
        return HashSet::new();
    };
    match serde_json::from_str::<PowerCuts>(&body) {
        Ok(cuts) => cuts.instance_ids.into_iter().collect(),
        Err(e) => {
            tracing::warn!(error = %e, "unreadable /_ballast/power-cuts: all graceful");
            HashSet::new()
        }
    }
}

/// The attachments the emulator lists as attached (`GET /_ballast/volume-attachments`, not an AWS API): what
/// DescribeVolumes shows of them, without serializing every volume of the cloud (at two hundred instances, two
/// root volumes each, one unfiltered DescribeVolumes cost the emulator about 0.1 s of its one core, several
/// times per control-plane replacement). None when it does not answer.
async fn volume_attachments(endpoint: &str) -> Option<Vec<Attached>> {
    #[derive(serde::Deserialize)]
    struct Listed {
        attachments: Vec<Attached>,
    }
    let body = emulator_get(endpoint, "/_ballast/volume-attachments", Duration::ZERO).await?;
    match serde_json::from_str::<Listed>(&body) {
        Ok(listed) => Some(listed.attachments),
        Err(e) => {
            tracing::warn!(error = %e, "the emulator's volume attachments did not parse; describing volumes");
            None
        }
    }
}

/// The body of a 200 answer of the emulator's own endpoint `path`, which may take `wait` to answer; None on any
/// failure or after `wait` and 5 s more (a saturated emulator answered a digest request in over 2 s).
async fn emulator_get(endpoint: &str, path: &str, wait: Duration) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = endpoint.strip_prefix("http://")?.trim_end_matches('/');
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(authority).await.ok()?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let text = String::from_utf8(response).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        (head.split_whitespace().nth(1) == Some("200")).then(|| body.trim().to_string())
    };
    tokio::time::timeout(wait + Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}

#[cfg(test)]
mod fingerprint_tests {
    use std::time::Duration;

    use super::{next_look, Fingerprint, Look, FULL_POLL_AT_LEAST_EVERY, FULL_POLL_OVERDUE};

    #[test]
    fn the_periodic_full_look_waits_for_a_quiet_poll_but_not_forever() {
        let last = Fingerprint::parse("all x\nvolumes v1\ni-a 1\ni-b 2\n").expect("parses");
        let busy = Fingerprint::parse("all y\nvolumes v1\ni-a 1\ni-b 3\ni-c 4\n").expect("parses");
        let moved = Fingerprint::parse("all z\nvolumes v2\ni-a 1\ni-b 2\n").expect("parses");
        let recent = Some(Duration::from_secs(5));
        let due = Some(FULL_POLL_AT_LEAST_EVERY + Duration::from_secs(1));
        let overdue = Some(FULL_POLL_OVERDUE);
        let look = |now: Option<&Fingerprint>, retries: &[&str], since, settled| {
            let retries = retries.iter().map(|r| r.to_string()).collect();
            next_look(now, Some(&last), retries, since, settled)
        };
        let changed = |ids: &[&str], volumes| Look::Changed {
            ids: ids.iter().map(|i| i.to_string()).collect(),
            volumes,
        };
        // Between full looks: the changed instances, the retries, or nothing at all.
        assert_eq!(
            look(Some(&busy), &[], recent, true),
            changed(&["i-b", "i-c"], false)
        );
        assert_eq!(
            look(Some(&last), &["i-a"], recent, true),
            changed(&["i-a"], false)
        );
        assert_eq!(look(Some(&last), &[], recent, true), Look::Nothing);
        assert_eq!(look(Some(&last), &[], recent, false), changed(&[], false));
        assert_eq!(look(Some(&moved), &[], recent, true), changed(&[], true));
        // A full look due waits while things change, and is taken at the first quiet poll.
        assert_eq!(
            look(Some(&busy), &[], due, true),
            changed(&["i-b", "i-c"], false)
        );
        assert_eq!(look(Some(&last), &[], due, true), Look::Everything);
        // Overdue, it is taken anyway; so it is with no digests, and with none to compare with.
        assert_eq!(look(Some(&busy), &[], overdue, true), Look::Everything);
        assert_eq!(look(None, &[], recent, true), Look::Everything);
        assert_eq!(
            next_look(Some(&busy), None, Vec::new(), recent, true),
            Look::Everything
        );
        assert_eq!(look(Some(&busy), &[], None, true), Look::Everything);
    }

    #[test]
    fn only_new_and_moved_instances_are_changed() {
        let before =
            Fingerprint::parse("all x\nvolumes v1\ni-a 1\ni-b 2\ni-c 3\n").expect("parses");
        let after = Fingerprint::parse("all y\nvolumes v1\ni-a 1\ni-b 9\ni-d 4\n").expect("parses");
        assert_eq!(after.changed_instances(&before), ["i-b", "i-d"]);
        assert!(after.changed_instances(&after).is_empty());
        assert_eq!(after.volumes, before.volumes);
    }

    #[test]
    fn a_body_without_the_all_or_volumes_line_or_with_a_bare_word_is_refused() {
        assert_eq!(Fingerprint::parse("all x\ni-a 1\n"), None);
        assert_eq!(Fingerprint::parse("volumes v\ni-a 1\n"), None);
        assert_eq!(Fingerprint::parse("all x\nvolumes v\ngarbage\n"), None);
        assert!(Fingerprint::parse("all x\nvolumes v\n").is_some_and(|f| f.instances.is_empty()));
    }
}
