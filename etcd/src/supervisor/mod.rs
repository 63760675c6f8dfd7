//! The reconcile loop: observe, decide one step, act, requeue. Errors are logged, published and retried with
//! backoff; they never end the loop.
//!
//! `act` only dispatches: each step is a method of its own, grouped by what it touches:
//! - `observe`: one round's [`Observation`](crate::decide::Observation);
//! - `claims`: conditional writes of `etcd/cluster.json`;
//! - `start`: (re)starting the local etcd (seed, restore, forced new cluster, restart, join) and wiping it;
//! - `membership`: learners added and promoted, members removed, through the voters;
//! - `backups`: scheduled and on-demand backups;
//! - `health`: the published health report;
//! - `unlisted`: since when EC2 has not listed members' instances (they count as terminated after a grace).

mod backups;
mod claims;
mod health;
mod membership;
mod observe;
mod start;
mod stop;
mod unlisted;

pub use stop::StopOutcome;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_state::etcd_timing::EtcdTiming;
use ballast_state::layout::ClusterPaths;
use ballast_state::node::EtcdSettings;
use ballast_store::store::StateStore;
use etcd_client::Client;

use crate::backup::{parse_duration, BackupError};
use crate::client::{ClientError, ClientTls};
use crate::decide::{decide, ClusterView, Me, Step};
use crate::peers::{PeerInstance, Peers, PeersError};
use crate::process::{EtcdProcess, EtcdTls, LocalState, ProcessError, StartMode, StartSpec};
use crate::record::{now_stamp, ClusterRecord, RecordError, VersionedRecord};

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
    /// While rounds are steady and the cluster quiet ([`Observation::is_quiet`]), the EC2 listing of the
    /// control-plane instances and etcd's volumes is reused for up to this long instead of asked for every
    /// round: five supervisors asking twice per round every 2 s made 5 EC2 calls a second per cluster, for
    /// nothing while etcd is healthy (and EC2 throttles its Describe calls per account).
    pub quiet_peer_refresh: Duration,
    /// Timeout of one etcd request while observing.
    pub request_timeout: Duration,
    /// The state dir is this member's own EBS volume, re-attached by a replacement instance: gone members are
    /// not removed by the leader, and a member keeps its ID across instances (`decide/volume.rs`).
    pub member_volume: bool,
    /// Peer URLs by name (`hosts`): this member's name and the hosts file that makes every member's name resolve.
    /// `None`: peer URLs by IP.
    pub peer_names: Option<PeerNames>,
    /// etcd's heartbeat interval and election timeout (the node spec's; etcd's defaults when it has none).
    pub timing: EtcdTiming,
}

/// Peer URLs by name: this node's member and the hosts file the supervisor keeps current (`/etc/hosts` under
/// nodeup's root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerNames {
    /// This instance's etcd member (the `ballast.dev/etcd-member` tag of the volume it mounted).
    pub member: String,
    pub hosts_file: PathBuf,
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
            publish_interval: ballast_state::etcd::health::PUBLISH_INTERVAL,
            quiet_peer_refresh: Duration::from_secs(10),
            request_timeout: Duration::from_secs(2),
            member_volume: false,
            peer_names: None,
            timing: EtcdTiming::default(),
        }
    }

    /// Backup interval and retention, and raft's timing, from the node spec's etcd settings.
    pub fn with_settings(mut self, settings: &EtcdSettings) -> Result<Self, SettingsError> {
        self.backup_interval = Some(parse_duration(&settings.backup_interval)?);
        self.backup_retention = parse_duration(&settings.backup_retention)?;
        // Held to etcd's bounds again here: a node spec edited by hand must not start an etcd that refuses to run.
        self.timing = EtcdTiming::from_millis(
            settings.heartbeat_interval_ms.map(u64::from),
            settings.election_timeout_ms.map(u64::from),
        )
        .map_err(|(field, source)| SettingsError::Timing { field, source })?;
        Ok(self)
    }
}

/// The node spec's etcd settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A backup interval or retention that does not parse.
    #[error(transparent)]
    Backup(#[from] BackupError),
    /// A heartbeat interval or election timeout etcd would refuse; `field` is the spec's field it came from.
    #[error("{field}: {source}")]
    Timing {
        field: &'static str,
        #[source]
        source: ballast_state::etcd_timing::TimingError,
    },
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
    #[error(transparent)]
    Hosts(#[from] crate::hosts::HostsError),
    #[error("writing the restore snapshot to {path}: {source}")]
    SnapshotFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A step needs the record, and this round read none (it was deleted after `decide` saw it).
    #[error("no etcd/cluster.json (needed to {step})")]
    MissingRecord { step: &'static str },
    /// Starting as a joined member needs the member list, and no member answered with one this round.
    #[error("no member list to start etcd as member {member_id:x}")]
    MissingMemberList { member_id: u64 },
    /// The local etcd gave no snapshot in time before a forced new cluster.
    #[error("no snapshot from the local etcd within {timeout:?}")]
    ForceSnapshotTimeout { timeout: Duration },
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
    /// Members' instance ids EC2 lists neither by tags nor by id, and since when without a break
    /// (see `unlisted`).
    unlisted_since: HashMap<String, Instant>,
    /// The peer names as last written to the hosts file (`observe`).
    peer_hosts: BTreeMap<String, String>,
    /// The last EC2 listing of the control-plane instances, and when it was asked for.
    listed: Option<(Instant, Vec<PeerInstance>)>,
    /// How old a listing the next round may reuse instead of asking EC2: `quiet_peer_refresh` after a steady
    /// round of a quiet cluster, [`LEARNER_WAIT_LISTING`] while waiting for another learner; `None` otherwise.
    reuse_listing: Option<Duration>,
}

/// The requeue after etcd was (re)started, or a learner is not ready to promote: its next state comes quickly.
const LOOK_AGAIN_SOON: Duration = Duration::from_millis(100);

/// How old an EC2 listing a joiner waiting for another learner may reuse: its rounds come every
/// `decide::LEARNER_WAIT_POLL` and ask etcd for the member list each time (what ends the wait); an instance
/// terminated meanwhile is seen at most this much later.
const LEARNER_WAIT_LISTING: Duration = Duration::from_secs(2);

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
                peer_name: config
                    .peer_names
                    .as_ref()
                    .map(|n| crate::hosts::peer_name(&config.cluster_name, &n.member)),
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
            unlisted_since: HashMap::new(),
            peer_hosts: BTreeMap::new(),
            listed: None,
            reuse_listing: None,
        })
    }

    /// The local etcd's PID, while it runs.
    pub fn etcd_pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(EtcdProcess::pid)
    }

    /// Runs until `shutdown` completes, then stops etcd in order ([`Self::stop_gracefully`]) and says how. The
    /// shutdown is nodeup's SIGTERM, or a termination handler's stop request for this instance
    /// (`nodeup/src/termination/stop.rs`): either way the member stays in the cluster with its data.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> StopOutcome {
        self.run_until(shutdown).await;
        self.stop_gracefully().await
    }

    /// Runs rounds until `shutdown` completes, leaving etcd as it is. After a [`Self::stop_gracefully`], running
    /// again starts the member again from its data (as after a crash of etcd): how a member stopped on a request
    /// whose instance did not go resumes.
    pub async fn run_until(&mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut failures = 0u32;
        loop {
            // A shutdown does not wait for the round in progress (its EC2 and S3 calls took up to 0.2 s on a busy
            // local cloud, paid by the stop and so by the replacement waiting for this node's volume): a round
            // cut short at an await is what a power cut does at the same point, which every step survives.
            let round = tokio::select! {
                biased;
                _ = &mut shutdown => break,
                round = self.reconcile() => round,
            };
            let delay = match round {
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
    }

    /// One round: observe, decide, act. Returns the step and how long to wait before the next round.
    pub async fn reconcile(&mut self) -> Result<(Step, Duration), SupervisorError> {
        // The report says when its view was taken, not when it was published: a round's act (starting etcd, a
        // member change) can outlast a peer's whole round, whose newer view must win (`trusted_report`).
        let observed_at = now_stamp();
        // A round that fails asks EC2 afresh next time.
        let reuse_listing = self.reuse_listing.take();
        let observation = self.observe(reuse_listing).await?;
        let step = decide(&observation);
        self.reuse_listing = match step {
            Step::Steady | Step::Backup if observation.is_quiet() => {
                Some(self.config.quiet_peer_refresh)
            }
            Step::WaitForLearner { .. } => Some(LEARNER_WAIT_LISTING),
            _ => None,
        };
        if !matches!(step, Step::Steady) {
            tracing::info!(instance = %self.me.instance_id, step = %step.describe(), "etcd supervisor");
        }
        let result = self.act(&step).await;
        let (delay, error) = match &result {
            Ok(d) => (d.unwrap_or(step.requeue(self.config.steady_interval)), None),
            Err(e) => (Duration::ZERO, Some(e.to_string())),
        };
        if let Err(e) = self
            .maybe_publish(&observation, observed_at, &step, error)
            .await
        {
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

    /// The record read this round; `step` says what needs it.
    fn current_record(&self, step: &'static str) -> Result<&VersionedRecord, SupervisorError> {
        self.record
            .as_ref()
            .ok_or(SupervisorError::MissingRecord { step })
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
            peer_url: self.me.peer_url(),
            initial_cluster,
            token: record.cluster_token(&self.config.cluster_name),
            mode,
            timing: self.config.timing,
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
            Step::Wait { .. } | Step::WaitForLearner { .. } | Step::Steady => Ok(None),
            Step::ClaimBootstrap => self.claim_bootstrap().await.map(|()| None),
            Step::ClaimSeed => self.claim_seed().await.map(|()| None),
            Step::ClaimReseed { .. } => self.claim_reseed().await.map(|()| None),
            Step::ClaimForceNewCluster {
                raft_index,
                lost_members,
            } => self
                .claim_force_new_cluster(*raft_index, lost_members)
                .await
                .map(|()| None),
            Step::Seed => self.seed().await.map(|()| Some(LOOK_AGAIN_SOON)),
            Step::ForceNewCluster => self
                .force_new_cluster()
                .await
                .map(|()| Some(LOOK_AGAIN_SOON)),
            Step::Restart => self.restart().map(|()| Some(LOOK_AGAIN_SOON)),
            Step::StartJoined { member_id } => self
                .start_joined(*member_id)
                .map(|()| Some(LOOK_AGAIN_SOON)),
            Step::Wipe { reason } => self.wipe(reason).await.map(|()| None),
            Step::AddLearner => self.add_learner().await.map(|()| None),
            Step::Promote { member_id } => self.promote(*member_id).await,
            Step::RemoveMember {
                member_id,
                label,
                reason,
            } => self
                .remove_member(*member_id, label, reason)
                .await
                .map(|()| None),
            Step::Backup => self.scheduled_backup().await.map(|()| None),
            Step::UpdatePeerUrl { member_id, .. } => {
                self.update_peer_url(*member_id).await.map(|()| None)
            }
        }
    }

    /// Stops etcd in order (a leader hands over first, see [`Self::stop_gracefully`]) and waits for it: the
    /// supervisor's last act.
    pub async fn shutdown(mut self) -> StopOutcome {
        self.stop_gracefully().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(heartbeat: Option<u32>, election: Option<u32>) -> EtcdSettings {
        EtcdSettings {
            member_name: "a".into(),
            members: BTreeMap::from([("a".to_string(), "control-plane-a".to_string())]),
            backup_interval: "1h".into(),
            backup_retention: "7d".into(),
            heartbeat_interval_ms: heartbeat,
            election_timeout_ms: election,
        }
    }

    fn config() -> SupervisorConfig {
        SupervisorConfig::new(
            "demo.example.com",
            "i-0abc",
            "10.0.1.5",
            PathBuf::from("/var/lib/etcd"),
            EtcdTls::in_dir(std::path::Path::new("/etc/kubernetes/pki/etcd")),
        )
    }

    /// The node spec's timing becomes the supervisor's (what `etcd_args` passes to etcd); none: etcd's defaults.
    #[test]
    fn the_node_specs_timing_is_the_supervisors() {
        let c = config()
            .with_settings(&settings(Some(50), Some(500)))
            .expect("valid settings");
        assert_eq!(
            c.timing,
            EtcdTiming {
                heartbeat_interval_ms: 50,
                election_timeout_ms: 500
            }
        );
        let c = config()
            .with_settings(&settings(None, None))
            .expect("valid settings");
        assert_eq!(c.timing, EtcdTiming::default());
    }

    /// A node spec edited by hand with a pair etcd would refuse is an error naming the spec's field, not an etcd
    /// that fails to start on every round.
    #[test]
    fn a_pair_etcd_refuses_is_an_error_naming_its_field() {
        for (heartbeat, election, field) in [
            (Some(0), None, "spec.etcd.heartbeatInterval"),
            (Some(300), None, "spec.etcd.heartbeatInterval"),
            (Some(100), Some(400), "spec.etcd.leaderElectionTimeout"),
            (None, Some(60_000), "spec.etcd.leaderElectionTimeout"),
        ] {
            let err = config()
                .with_settings(&settings(heartbeat, election))
                .expect_err("refused");
            assert!(
                matches!(&err, SettingsError::Timing { field: f, .. } if *f == field),
                "{heartbeat:?}/{election:?}: {err}"
            );
            assert!(err.to_string().starts_with(field), "{err}");
        }
    }
}
