//! The reconcile loop: observe, decide one step, act, requeue. Errors are logged, published and retried with
//! backoff; they never end the loop.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_state::layout::ClusterPaths;
use ballast_state::node::EtcdSettings;
use ballast_state::store::StateStore;
use etcd_client::{Client, MemberAddOptions};

use crate::backup::{self, parse_duration, BackupError};
use crate::client::{is_already_done, is_transient, ClientError, ClientTls};
use crate::decide::{
    decide, ClusterView, LocalData, LocalEtcd, Me, MemberStatus, MemberView, Observation, Step,
};
use crate::peers::{Peers, PeersError};
use crate::process::{EtcdProcess, EtcdTls, LocalState, ProcessError, StartMode, StartSpec};
use crate::record::{
    delete_health, now_stamp, publish_health, read_health, read_record, write_record,
    ClusterRecord, HealthReport, Origin, RecordError, VersionedRecord,
};

/// How a supervisor is set up; nodeup fills it from the node spec and the instance's identity.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    pub cluster_name: String,
    pub instance_id: String,
    /// The instance's private IP: etcd listens on it only.
    pub ip: String,
    /// Local state: etcd's data dir, its epoch, its log (`/var/lib/etcd` on a node).
    pub state_dir: PathBuf,
    pub tls: EtcdTls,
    pub etcd_binary: PathBuf,
    pub etcdctl_binary: PathBuf,
    /// Scheduled backups (taken by the leader); `None` disables them.
    pub backup_interval: Option<Duration>,
    pub backup_retention: Duration,
    /// Requeue when steady.
    pub steady_interval: Duration,
    /// Health is published at least this often (and whenever the step changes).
    pub publish_interval: Duration,
    /// Timeout of one etcd request while observing.
    pub request_timeout: Duration,
}

impl SupervisorConfig {
    /// Defaults for a node: Debian's binaries, 2 s steady requeue, health every 10 s.
    pub fn new(
        cluster_name: &str,
        instance_id: &str,
        ip: &str,
        state_dir: PathBuf,
        tls: EtcdTls,
    ) -> Self {
        SupervisorConfig {
            cluster_name: cluster_name.to_string(),
            instance_id: instance_id.to_string(),
            ip: ip.to_string(),
            state_dir,
            tls,
            etcd_binary: PathBuf::from("/usr/bin/etcd"),
            etcdctl_binary: PathBuf::from("/usr/bin/etcdctl"),
            backup_interval: None,
            backup_retention: Duration::from_secs(7 * 86400),
            steady_interval: Duration::from_secs(2),
            publish_interval: Duration::from_secs(10),
            request_timeout: Duration::from_secs(2),
        }
    }

    /// Backup interval and retention from the node spec's etcd settings.
    pub fn with_settings(mut self, settings: &EtcdSettings) -> Result<Self, BackupError> {
        self.backup_interval = Some(parse_duration(&settings.backup_interval)?);
        self.backup_retention = parse_duration(&settings.backup_retention)?;
        Ok(self)
    }
}

/// Failures of one round (the loop logs them and tries again).
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Peers(#[from] PeersError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error(transparent)]
    Backup(#[from] BackupError),
    #[error("writing the restore snapshot to {path}: {source}")]
    SnapshotFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Precondition(String),
}

/// The supervisor of one control-plane instance's etcd.
pub struct Supervisor {
    config: SupervisorConfig,
    me: Me,
    store: StateStore,
    paths: ClusterPaths,
    peers: Arc<dyn Peers>,
    tls: ClientTls,
    local: LocalState,
    process: Option<EtcdProcess>,
    clients: HashMap<String, Client>,
    record: Option<VersionedRecord>,
    view: Option<ClusterView>,
    last_backup_unix: Option<i64>,
    last_published: Option<(Instant, String)>,
    last_error: Option<String>,
    force_snapshot_failures: u32,
}

/// Rounds that try to snapshot the local etcd before a forced new cluster falls back to `--force-new-cluster`.
const FORCE_SNAPSHOT_ATTEMPTS: u32 = 3;
/// One such snapshot.
const FORCE_SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(60);

impl Supervisor {
    pub fn new(
        config: SupervisorConfig,
        store: StateStore,
        peers: Arc<dyn Peers>,
    ) -> Result<Self, SupervisorError> {
        let tls = ClientTls::load(&config.tls)?;
        Ok(Supervisor {
            me: Me {
                instance_id: config.instance_id.clone(),
                ip: config.ip.clone(),
            },
            paths: ClusterPaths::new(&config.cluster_name),
            local: LocalState::new(config.state_dir.clone()),
            config,
            store,
            peers,
            tls,
            process: None,
            clients: HashMap::new(),
            record: None,
            view: None,
            last_backup_unix: None,
            last_published: None,
            last_error: None,
            force_snapshot_failures: 0,
        })
    }

    /// The local etcd's PID, while it runs.
    pub fn etcd_pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(EtcdProcess::pid)
    }

    /// Runs until `shutdown` completes, then kills etcd.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut failures = 0u32;
        loop {
            let delay = match self.reconcile().await {
                Ok((step, delay)) => {
                    failures = 0;
                    self.last_error = None;
                    tracing::debug!(step = %step.describe(), "etcd supervisor");
                    delay
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(error = %e, "etcd supervisor round failed; retrying");
                    self.last_error = Some(e.to_string());
                    self.clients.clear();
                    Duration::from_millis(200 * u64::from(failures.min(25)))
                }
            };
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(delay) => {}
            }
        }
        self.stop_etcd().await;
    }

    /// One round: observe, decide, act. Returns the step and how long to wait before the next round.
    pub async fn reconcile(&mut self) -> Result<(Step, Duration), SupervisorError> {
        let observation = self.observe().await?;
        let step = decide(&observation);
        if !matches!(step, Step::Steady) {
            tracing::info!(instance = %self.me.instance_id, step = %step.describe(), "etcd supervisor");
        }
        let result = self.act(&step).await;
        let (delay, error) = match &result {
            Ok(d) => (d.unwrap_or(step.requeue(self.config.steady_interval)), None),
            Err(e) => (Duration::ZERO, Some(e.to_string())),
        };
        if let Err(e) = self.maybe_publish(&observation, &step, error).await {
            tracing::warn!(error = %e, "publishing etcd health failed");
        }
        result?;
        Ok((step, delay))
    }

    async fn client_for(&mut self, endpoint: &str) -> Result<Client, ClientError> {
        if let Some(c) = self.clients.get(endpoint) {
            return Ok(c.clone());
        }
        let c = self
            .tls
            .connect(&[endpoint.to_string()], self.config.request_timeout)
            .await?;
        self.clients.insert(endpoint.to_string(), c.clone());
        Ok(c)
    }

    async fn observe(&mut self) -> Result<Observation, SupervisorError> {
        let (record, instances) = tokio::join!(
            read_record(&self.store, &self.paths),
            self.peers.instances()
        );
        self.record = record?;
        let instances = instances?;
        let running = self.process.as_mut().is_some_and(EtcdProcess::is_running);
        if !running {
            if let Some(p) = self.process.take() {
                tracing::warn!(pid = p.pid(), "etcd exited");
                p.kill().await;
            }
        }

        // Ask every alive control-plane instance (and ourselves while etcd runs) for its status, concurrently.
        let mut ips: Vec<String> = instances
            .iter()
            .filter(|i| {
                i.state.is_alive() && !i.private_ip.is_empty() && i.private_ip != self.me.ip
            })
            .map(|i| i.private_ip.clone())
            .collect();
        ips.sort();
        ips.dedup();
        if running {
            ips.push(self.me.ip.clone());
        }
        let mut clients = Vec::new();
        for ip in &ips {
            let endpoint = crate::decide::client_url(ip);
            clients.push((ip.clone(), self.client_for(&endpoint).await.ok()));
        }
        let timeout = self.config.request_timeout;
        let answers = futures_join(clients, timeout).await;
        let mut statuses: Vec<(String, MemberStatus)> = Vec::new();
        for (ip, status) in answers {
            match status {
                Some(s) => statuses.push((ip, s)),
                None => {
                    self.clients.remove(&crate::decide::client_url(&ip));
                }
            }
        }
        let local_etcd = if !running {
            LocalEtcd::Stopped
        } else {
            statuses
                .iter()
                .find(|(ip, _)| *ip == self.me.ip)
                .map_or(LocalEtcd::Unresponsive, |(_, s)| LocalEtcd::Running(*s))
        };
        let cluster = self.cluster_view(&statuses).await;
        self.view = cluster.clone();

        let has_member_data = self.local.has_member_data();
        if let Some(record) = &self.record {
            let seed_of_epoch = record.record.seed.as_deref() == Some(self.me.instance_id.as_str())
                && self.local.epoch() == Some(record.record.epoch)
                && (has_member_data || matches!(local_etcd, LocalEtcd::Running(_)));
            if seed_of_epoch
                && self
                    .local
                    .seeded_epoch()
                    .is_none_or(|e| e < record.record.epoch)
            {
                self.local.set_seeded(record.record.epoch)?;
            }
        }
        let local_data = LocalData {
            present: has_member_data || (running && self.local.epoch().is_some()),
            epoch: self.local.epoch(),
            seeded_epoch: self.local.seeded_epoch(),
        };
        let (_, now_unix) = now_stamp();
        let (reports, epoch_backup_revision) = if cluster.is_none() && !local_data.present {
            let epoch = self.record.as_ref().map(|r| r.record.epoch);
            let revision = backup::list_backups(&self.store, &self.paths)
                .await?
                .iter()
                .filter(|b| Some(b.epoch) == epoch)
                .map(|b| b.revision)
                .max();
            (read_health(&self.store, &self.paths).await?, revision)
        } else {
            (Vec::new(), None)
        };
        let leader =
            matches!(local_etcd, LocalEtcd::Running(s) if s.leader == s.member_id && s.leader != 0);
        let backup_due = self.backup_due(now_unix, leader).await;
        Ok(Observation {
            me: self.me.clone(),
            record: self.record.as_ref().map(|r| r.record.clone()),
            local_data,
            local_etcd,
            instances,
            cluster,
            reports,
            epoch_backup_revision,
            now_unix,
            backup_due,
        })
    }

    /// The member list of the cluster that answers best: one with a leader, the most members answering, ours
    /// on a tie.
    async fn cluster_view(&mut self, statuses: &[(String, MemberStatus)]) -> Option<ClusterView> {
        let mut groups: HashMap<u64, Vec<&(String, MemberStatus)>> = HashMap::new();
        for s in statuses {
            groups.entry(s.1.cluster_id).or_default().push(s);
        }
        let cluster_id = groups
            .iter()
            .max_by_key(|(_, g)| {
                (
                    g.iter().any(|(_, s)| s.leader != 0),
                    g.len(),
                    g.iter().any(|(ip, _)| *ip == self.me.ip),
                )
            })
            .map(|(id, _)| *id)?;
        let mut group: Vec<(String, MemberStatus)> =
            groups.remove(&cluster_id)?.into_iter().cloned().collect();
        // Ask the leader first, then voters, then anyone (3.4 serves the member list locally).
        group.sort_by_key(|(_, s)| (s.member_id != s.leader, s.is_learner));
        for (ip, _) in &group {
            let endpoint = crate::decide::client_url(ip);
            let Ok(mut client) = self.client_for(&endpoint).await else {
                continue;
            };
            let timeout = self.config.request_timeout;
            let Ok(Ok(list)) = tokio::time::timeout(timeout, client.member_list()).await else {
                self.clients.remove(&endpoint);
                continue;
            };
            let members = list
                .members()
                .iter()
                .map(|m| MemberView {
                    id: m.id(),
                    name: m.name().to_string(),
                    peer_url: m.peer_urls().first().cloned().unwrap_or_default(),
                    is_learner: m.is_learner(),
                    status: group
                        .iter()
                        .find(|(_, s)| s.member_id == m.id())
                        .map(|(_, s)| *s),
                })
                .collect();
            return Some(ClusterView {
                cluster_id,
                members,
            });
        }
        None
    }

    async fn backup_due(&mut self, now_unix: i64, leader: bool) -> bool {
        if leader
            && matches!(
                self.store.get(&backup::request_key(&self.paths)).await,
                Ok(Some(_))
            )
        {
            return true;
        }
        let Some(interval) = self.config.backup_interval else {
            return false;
        };
        if self.last_backup_unix.is_none() {
            // Once per process: the newest backup in the store.
            if let Ok(list) = backup::list_backups(&self.store, &self.paths).await {
                self.last_backup_unix = Some(list.last().map_or(0, |b| b.created_unix));
            }
        }
        self.last_backup_unix
            .is_some_and(|last| now_unix - last >= interval.as_secs() as i64)
    }

    fn current_record(&self) -> Result<&VersionedRecord, SupervisorError> {
        self.record
            .as_ref()
            .ok_or_else(|| SupervisorError::Precondition("no etcd/cluster.json".to_string()))
    }

    fn new_record(&self, epoch: u64, origin: Origin) -> ClusterRecord {
        let (decided_at, _) = now_stamp();
        ClusterRecord {
            epoch,
            origin,
            seed: Some(self.me.instance_id.clone()),
            decided_at,
            decided_by: format!("etcd supervisor on {}", self.me.instance_id),
        }
    }

    /// Writes the record; a lost race is no error (the next round reads the winner's).
    async fn claim(
        &mut self,
        record: ClusterRecord,
        previous: Option<ballast_state::store::Version>,
    ) -> Result<(), SupervisorError> {
        match write_record(&self.store, &self.paths, &record, previous.as_ref()).await {
            Ok(written) => {
                tracing::info!(epoch = record.epoch, origin = ?record.origin, "won etcd/cluster.json");
                self.record = Some(written);
                Ok(())
            }
            Err(e) if e.is_conflict() => {
                tracing::info!("another supervisor changed etcd/cluster.json first");
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn start_spec(
        &self,
        record: &ClusterRecord,
        initial_cluster: Vec<(String, String)>,
        mode: StartMode,
    ) -> StartSpec {
        StartSpec {
            name: self.me.instance_id.clone(),
            ip: self.me.ip.clone(),
            initial_cluster,
            token: record.cluster_token(&self.config.cluster_name),
            mode,
        }
    }

    fn start(&mut self, spec: &StartSpec) -> Result<(), SupervisorError> {
        let process = EtcdProcess::start(
            &self.config.etcd_binary,
            &self.local,
            &self.config.tls,
            spec,
        )?;
        self.process = Some(process);
        self.clients.remove(&self.me.client_url());
        Ok(())
    }

    async fn stop_etcd(&mut self) {
        if let Some(p) = self.process.take() {
            p.kill().await;
        }
        self.clients.remove(&self.me.client_url());
    }

    /// Snapshots the local etcd (which has lost its quorum) into `<state_dir>/force-new-cluster.db`.
    async fn snapshot_for_force(
        &mut self,
    ) -> Result<(PathBuf, backup::LocalSnapshot), SupervisorError> {
        let file = self.config.state_dir.join("force-new-cluster.db");
        let mut client = self.client_for(&self.me.client_url()).await?;
        let taken = tokio::time::timeout(
            FORCE_SNAPSHOT_TIMEOUT,
            backup::snapshot_to_file(&mut client, &file),
        )
        .await
        .map_err(|_| {
            BackupError::Snapshot(format!(
                "no snapshot from the local etcd within {FORCE_SNAPSHOT_TIMEOUT:?}"
            ))
        })??;
        tracing::info!(
            revision = taken.revision,
            raft_index = taken.raft_index,
            bytes = taken.size,
            "snapshot of the local etcd taken before forcing a new cluster"
        );
        Ok((file, taken))
    }

    /// A client over the voters that answered (never learners).
    async fn voters_client(&self, operation: &'static str) -> Result<Client, SupervisorError> {
        let endpoints = self
            .view
            .as_ref()
            .map(ClusterView::voter_endpoints)
            .unwrap_or_default();
        if endpoints.is_empty() {
            return Err(ClientError::NoEndpoints { operation }.into());
        }
        Ok(self
            .tls
            .connect(&endpoints, self.config.request_timeout)
            .await?)
    }

    /// Acts on one step. `Ok(Some(d))` overrides the requeue.
    async fn act(&mut self, step: &Step) -> Result<Option<Duration>, SupervisorError> {
        match step {
            Step::Wait { .. } | Step::Steady => Ok(None),
            Step::ClaimBootstrap => {
                let record = self.new_record(1, Origin::Bootstrap);
                self.claim(record, None).await?;
                Ok(None)
            }
            Step::ClaimSeed => {
                let current = self.current_record()?.clone();
                let mut record = current.record.clone();
                record.seed = Some(self.me.instance_id.clone());
                self.claim(record, Some(current.version)).await?;
                Ok(None)
            }
            Step::ClaimReseed { .. } => {
                let current = self.current_record()?.clone();
                let record =
                    self.new_record(current.record.epoch + 1, current.record.origin.clone());
                self.claim(record, Some(current.version)).await?;
                Ok(None)
            }
            Step::ClaimForceNewCluster {
                raft_index,
                lost_members,
            } => {
                let current = self.current_record()?.clone();
                let record = self.new_record(
                    current.record.epoch + 1,
                    Origin::ForceNewCluster {
                        raft_index: *raft_index,
                        lost_members: lost_members.clone(),
                    },
                );
                tracing::warn!(raft_index, lost = ?lost_members, "majority lost: claiming a forced new cluster from local data");
                self.claim(record, Some(current.version)).await?;
                Ok(None)
            }
            Step::Seed => {
                let record = self.current_record()?.record.clone();
                let me = vec![(self.me.instance_id.clone(), self.me.peer_url())];
                self.stop_etcd().await;
                self.local.wipe()?;
                // `seeded` is recorded once etcd has data of this epoch (see `observe`), not here: an etcd that
                // never started (a port in use, a bad flag) served no one, so no one can have joined it, and
                // seeding again is the only way forward. Once it has data, the epoch is never seeded twice here.
                match &record.origin {
                    Origin::Restore { backup_id, sha256 } => {
                        let (metadata, data) =
                            backup::fetch_verified_snapshot(&self.store, &self.paths, backup_id)
                                .await?;
                        if &metadata.sha256 != sha256 {
                            return Err(BackupError::Corrupted {
                                id: backup_id.clone(),
                                expected: sha256.clone(),
                                actual: metadata.sha256,
                            }
                            .into());
                        }
                        let file = self.config.state_dir.join("restore.db");
                        std::fs::write(&file, &data).map_err(|source| {
                            SupervisorError::SnapshotFile {
                                path: file.clone(),
                                source,
                            }
                        })?;
                        let spec = self.start_spec(&record, me, StartMode::Existing);
                        self.local
                            .restore_snapshot(&self.config.etcdctl_binary, &file, &spec)
                            .await?;
                        let _ = std::fs::remove_file(&file);
                        self.local.set_epoch(record.epoch)?;
                        tracing::warn!(backup = %backup_id, epoch = record.epoch, "restored etcd from a backup");
                        self.start(&spec)?;
                    }
                    _ => {
                        let spec = self.start_spec(&record, me, StartMode::New);
                        self.local.set_epoch(record.epoch)?;
                        self.start(&spec)?;
                    }
                }
                Ok(Some(Duration::from_millis(100)))
            }
            Step::ForceNewCluster => {
                let record = self.current_record()?.record.clone();
                let me = vec![(self.me.instance_id.clone(), self.me.peer_url())];
                // `--force-new-cluster` keeps only the WAL up to the commit index etcd last persisted, which
                // lags what it applied: a write this member applied (and acknowledged, as part of the lost
                // majority) could be dropped. A snapshot of its backend holds everything it applied, and the
                // maintenance API serves it without a quorum: rebuild the one-member cluster from that.
                let running = self.process.as_mut().is_some_and(EtcdProcess::is_running);
                let snapshot = if running {
                    match self.snapshot_for_force().await {
                        Ok(s) => Some(s),
                        Err(e) if self.force_snapshot_failures < FORCE_SNAPSHOT_ATTEMPTS => {
                            self.force_snapshot_failures += 1;
                            return Err(e);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, attempts = self.force_snapshot_failures, "no snapshot from the local etcd: falling back to --force-new-cluster on its data");
                            None
                        }
                    }
                } else {
                    None
                };
                self.force_snapshot_failures = 0;
                self.stop_etcd().await;
                self.local.set_seeded(record.epoch)?;
                match snapshot {
                    Some((file, taken)) => {
                        let spec = self.start_spec(&record, me, StartMode::Existing);
                        let staging = self.local.staging_data_dir();
                        self.local
                            .restore_snapshot_into(
                                &self.config.etcdctl_binary,
                                &file,
                                &spec,
                                &staging,
                            )
                            .await?;
                        self.local.replace_data_dir(&staging)?;
                        let _ = std::fs::remove_file(&file);
                        self.local.set_epoch(record.epoch)?;
                        tracing::warn!(
                            epoch = record.epoch,
                            revision = taken.revision,
                            raft_index = taken.raft_index,
                            "forcing a new cluster from a snapshot of the local etcd"
                        );
                        self.start(&spec)?;
                    }
                    None => {
                        self.local.set_epoch(record.epoch)?;
                        let spec = self.start_spec(&record, me, StartMode::ForceNewCluster);
                        tracing::warn!(
                            epoch = record.epoch,
                            "forcing a new cluster from local data (--force-new-cluster)"
                        );
                        self.start(&spec)?;
                    }
                }
                Ok(Some(Duration::from_millis(100)))
            }
            Step::Restart => {
                let record = self.current_record()?.record.clone();
                let me = vec![(self.me.instance_id.clone(), self.me.peer_url())];
                let spec = self.start_spec(&record, me, StartMode::Existing);
                self.start(&spec)?;
                Ok(Some(Duration::from_millis(100)))
            }
            Step::StartJoined { member_id } => {
                let record = self.current_record()?.record.clone();
                let view = self
                    .view
                    .clone()
                    .ok_or_else(|| SupervisorError::Precondition("no member list".to_string()))?;
                let initial = view
                    .members
                    .iter()
                    .map(|m| {
                        let name = if m.id == *member_id {
                            self.me.instance_id.clone()
                        } else if m.name.is_empty() {
                            format!("{:x}", m.id)
                        } else {
                            m.name.clone()
                        };
                        (name, m.peer_url.clone())
                    })
                    .collect();
                self.local.wipe()?;
                self.local.set_epoch(record.epoch)?;
                let spec = self.start_spec(&record, initial, StartMode::Existing);
                self.start(&spec)?;
                Ok(Some(Duration::from_millis(100)))
            }
            Step::Wipe { reason } => {
                tracing::warn!(%reason, "wiping etcd's data dir");
                self.stop_etcd().await;
                self.local.wipe()?;
                Ok(None)
            }
            Step::AddLearner => {
                let client = self.voters_client("member add").await?;
                let url = self.me.peer_url();
                retry_transient("member add", || {
                    let mut client = client.clone();
                    let url = url.clone();
                    async move {
                        client
                            .member_add([url], Some(MemberAddOptions::new().with_is_learner()))
                            .await
                            .map(|_| ())
                    }
                })
                .await?;
                tracing::info!(peer_url = %url, "added this instance as a learner");
                Ok(None)
            }
            Step::Promote { member_id } => {
                let mut client = self.voters_client("member promote").await?;
                match client.member_promote(*member_id).await {
                    Ok(_) => {
                        tracing::info!(
                            member = format!("{member_id:x}"),
                            "promoted to a voting member"
                        );
                        Ok(None)
                    }
                    Err(e) if is_already_done(&e) => Ok(None),
                    Err(e) if is_transient(&e) => {
                        tracing::debug!(error = %e, "learner not ready to promote yet");
                        Ok(Some(Duration::from_millis(100)))
                    }
                    Err(source) => Err(ClientError::Etcd {
                        operation: "member promote",
                        endpoints: "voters".to_string(),
                        source,
                    }
                    .into()),
                }
            }
            Step::RemoveMember {
                member_id,
                label,
                reason,
            } => {
                let client = self.voters_client("member remove").await?;
                let id = *member_id;
                retry_transient("member remove", || {
                    let mut client = client.clone();
                    async move { client.member_remove(id).await.map(|_| ()) }
                })
                .await?;
                tracing::warn!(member = %label, %reason, "removed etcd member");
                // Its health report goes with it (`ballast etcd status` shows members, not ghosts). Best effort:
                // a report left behind is only stale.
                if *label != self.me.instance_id {
                    if let Err(e) = delete_health(&self.store, &self.paths, label).await {
                        tracing::warn!(member = %label, error = %e, "deleting the removed member's health report");
                    }
                }
                Ok(None)
            }
            Step::Backup => {
                let epoch = self.current_record()?.record.epoch;
                let (_, now_unix) = now_stamp();
                self.last_backup_unix = Some(now_unix);
                let mut client = self.client_for(&self.me.client_url()).await?;
                backup::take_backup(
                    &mut client,
                    &self.store,
                    &self.paths,
                    epoch,
                    &self.me.instance_id,
                )
                .await?;
                let deleted = backup::prune_backups(
                    &self.store,
                    &self.paths,
                    self.config.backup_retention,
                    now_unix,
                )
                .await?;
                if !deleted.is_empty() {
                    tracing::info!(?deleted, "pruned old etcd backups");
                }
                self.store
                    .delete(&backup::request_key(&self.paths))
                    .await
                    .map_err(BackupError::from)?;
                Ok(None)
            }
        }
    }

    /// Kills etcd (SIGKILL) and waits for it: the supervisor's last act.
    pub async fn shutdown(mut self) {
        self.stop_etcd().await;
    }

    /// Takes a backup now through the local member (for `ballast etcd backup` through nodeup, and tests).
    pub async fn backup_now(&mut self) -> Result<backup::BackupMetadata, SupervisorError> {
        let epoch = self.current_record()?.record.epoch;
        let mut client = self.client_for(&self.me.client_url()).await?;
        Ok(backup::take_backup(
            &mut client,
            &self.store,
            &self.paths,
            epoch,
            &self.me.instance_id,
        )
        .await?)
    }

    async fn maybe_publish(
        &mut self,
        o: &Observation,
        step: &Step,
        error: Option<String>,
    ) -> Result<(), RecordError> {
        let described = step.describe();
        let error = error.or_else(|| self.last_error.clone());
        let due = match &self.last_published {
            None => true,
            Some((at, last)) => {
                *last != described
                    || at.elapsed() >= self.config.publish_interval
                    || error.is_some()
            }
        };
        if !due {
            return Ok(());
        }
        let (updated_at, updated_unix) = now_stamp();
        let (status, running) = match o.local_etcd {
            LocalEtcd::Running(s) => (Some(s), true),
            LocalEtcd::Unresponsive => (None, true),
            LocalEtcd::Stopped => (None, false),
        };
        let view = o.cluster.as_ref();
        let healthy = view.is_some_and(ClusterView::is_healthy)
            && status.is_some_and(|s| view.is_some_and(|v| v.cluster_id == s.cluster_id));
        let label = |m: &MemberView| {
            if m.name.is_empty() {
                m.peer_url.clone()
            } else {
                m.name.clone()
            }
        };
        let report = HealthReport {
            instance_id: self.me.instance_id.clone(),
            peer_url: self.me.peer_url(),
            client_url: self.me.client_url(),
            updated_at,
            updated_unix,
            local_epoch: o.local_data.present.then_some(o.local_data.epoch).flatten(),
            running,
            member_id: status.map(|s| format!("{:x}", s.member_id)),
            is_learner: status.is_some_and(|s| s.is_learner),
            is_leader: status.is_some_and(|s| s.leader == s.member_id && s.leader != 0),
            raft_index: status.map_or(0, |s| s.raft_index),
            cluster_healthy: healthy,
            voting_members: view
                .map(|v| v.voters().map(label).collect())
                .unwrap_or_default(),
            learners: view
                .map(|v| {
                    v.members
                        .iter()
                        .filter(|m| m.is_learner)
                        .map(label)
                        .collect()
                })
                .unwrap_or_default(),
            last_step: described.clone(),
            last_error: error,
        };
        // The node's own copy first (operators on the instance, and a store that cannot be reached): best effort.
        if let Err(e) = self.local.write_health(&report) {
            tracing::warn!(error = %e, "writing the local etcd health report");
        }
        publish_health(&self.store, &self.paths, &report).await?;
        self.last_published = Some((Instant::now(), described));
        Ok(())
    }
}

/// Status of every client concurrently, each bounded by `timeout`.
async fn futures_join(
    clients: Vec<(String, Option<Client>)>,
    timeout: Duration,
) -> Vec<(String, Option<MemberStatus>)> {
    let mut set = tokio::task::JoinSet::new();
    for (ip, client) in clients {
        set.spawn(async move {
            let Some(mut client) = client else {
                return (ip, None);
            };
            let status = match tokio::time::timeout(timeout, client.status()).await {
                Ok(Ok(s)) => Some(MemberStatus {
                    member_id: s.header().map_or(0, |h| h.member_id()),
                    cluster_id: s.header().map_or(0, |h| h.cluster_id()),
                    raft_index: s.raft_index(),
                    is_learner: s.is_learner(),
                    leader: s.leader(),
                }),
                _ => None,
            };
            (ip, status)
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(r) = r {
            out.push(r);
        }
    }
    out
}

/// Retries a membership change on transient refusals ("unhealthy cluster" lasts up to ~5 s after a leader
/// change or a removal) for up to 10 s; "already done" counts as done.
async fn retry_transient<F, Fut>(operation: &'static str, mut f: F) -> Result<(), SupervisorError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), etcd_client::Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match f().await {
            Ok(()) => return Ok(()),
            Err(e) if is_already_done(&e) => return Ok(()),
            Err(e) if is_transient(&e) && Instant::now() < deadline => {
                tracing::debug!(operation, error = %e, "retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(source) => {
                return Err(ClientError::Etcd {
                    operation,
                    endpoints: "voters".to_string(),
                    source,
                }
                .into())
            }
        }
    }
}
