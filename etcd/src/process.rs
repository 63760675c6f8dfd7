//! The etcd child process and the local state directory it lives in.
//!
//! ```text
//! <state_dir>/data      etcd's data dir
//! <state_dir>/epoch     the epoch of that data (written before etcd starts on it)
//! <state_dir>/seeded    the last epoch this instance seeded (survives wipes: a seed never seeds twice)
//! <state_dir>/etcd.log  etcd's own log (zap, JSON lines)
//! <state_dir>/health.json  the supervisor's last health report (also published to the state store)
//! ```
//!
//! etcd is torn down with SIGKILL: it is crash-safe by design, and SIGTERM to a leader whose peers are gone
//! hangs for seconds in a leadership transfer (a graceful stop, `supervisor/stop.rs`, hands leadership over
//! first, then SIGKILLs too: etcd's own graceful stop drains its servers for a second or more).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use ballast_state::etcd_timing::EtcdTiming;

/// Where etcd's certificates are: the caller (nodeup) issues them; this crate only reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub peer_cert: PathBuf,
    pub peer_key: PathBuf,
    /// The supervisor's own client identity.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl EtcdTls {
    /// The layout nodeup writes: `ca.crt`, `server.{crt,key}`, `peer.{crt,key}`, `client.{crt,key}` in `dir`
    /// (`/etc/kubernetes/pki/etcd` on a node).
    pub fn in_dir(dir: &Path) -> Self {
        EtcdTls {
            ca_cert: dir.join("ca.crt"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
            peer_cert: dir.join("peer.crt"),
            peer_key: dir.join("peer.key"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
        }
    }
}

/// Failures of the local etcd process and data dir.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("starting {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} snapshot restore failed ({status}): {stderr}", program.display())]
    Restore {
        program: PathBuf,
        status: String,
        stderr: String,
    },
    #[error(transparent)]
    Write(#[from] ballast_common::durable::WriteError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ProcessError + '_ {
    move |source| ProcessError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How etcd joins its cluster on this start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartMode {
    /// A new one-member cluster (the seed of a bootstrap).
    New,
    /// An existing cluster, or existing local data.
    Existing,
    /// Existing local data, rewritten to a one-member cluster (`--force-new-cluster`).
    ForceNewCluster,
}

/// Everything one start of etcd needs.
#[derive(Debug, Clone)]
pub struct StartSpec {
    pub name: String,
    /// Where etcd listens (client and peer ports).
    pub ip: String,
    /// The peer URL it advertises: by name on member volumes (`hosts`), else on `ip`.
    pub peer_url: String,
    /// `name=peer-url` pairs.
    pub initial_cluster: Vec<(String, String)>,
    pub token: String,
    pub mode: StartMode,
    /// Raft's heartbeat interval and election timeout (`spec.etcd.heartbeatInterval`, `leaderElectionTimeout`).
    pub timing: EtcdTiming,
}

/// The local state directory.
#[derive(Debug, Clone)]
pub struct LocalState {
    pub dir: PathBuf,
}

impl LocalState {
    pub fn new(dir: PathBuf) -> Self {
        LocalState { dir }
    }
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }
    fn epoch_file(&self) -> PathBuf {
        self.dir.join("epoch")
    }
    fn seeded_file(&self) -> PathBuf {
        self.dir.join("seeded")
    }
    fn member_file(&self) -> PathBuf {
        self.dir.join("member")
    }

    /// The etcd member the data belongs to (hex, as etcdctl shows it), once recorded.
    pub fn member_id(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.member_file()).ok()?;
        u64::from_str_radix(text.trim(), 16).ok()
    }

    /// Records the member the data belongs to: it travels with the data (on a member's volume) to a new instance.
    pub fn set_member_id(&self, id: u64) -> Result<(), ProcessError> {
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        write_durably(&self.member_file(), format!("{id:x}\n").as_bytes())
    }

    /// etcd's data dir holds a member.
    pub fn has_member_data(&self) -> bool {
        self.data_dir().join("member").is_dir()
    }

    fn read_number(path: &Path) -> Option<u64> {
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    }

    pub fn epoch(&self) -> Option<u64> {
        Self::read_number(&self.epoch_file())
    }
    pub fn seeded_epoch(&self) -> Option<u64> {
        Self::read_number(&self.seeded_file())
    }

    fn write_number(&self, path: &Path, n: u64) -> Result<(), ProcessError> {
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        write_durably(path, format!("{n}\n").as_bytes())
    }

    pub fn set_epoch(&self, epoch: u64) -> Result<(), ProcessError> {
        self.write_number(&self.epoch_file(), epoch)
    }
    pub fn set_seeded(&self, epoch: u64) -> Result<(), ProcessError> {
        self.write_number(&self.seeded_file(), epoch)
    }

    /// The node's copy of the last health report, replaced atomically (`<state_dir>/health.json`).
    pub fn write_health(&self, report: &crate::record::HealthReport) -> Result<(), ProcessError> {
        let path = self.dir.join("health.json");
        let mut json = serde_json::to_vec_pretty(report).unwrap_or_default();
        json.push(b'\n');
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        write_durably(&path, &json)
    }

    /// Removes the data dir and its epoch (never the seeded marker). The data goes first: a crash in between
    /// leaves an epoch without data (nothing to lose), never data without its epoch.
    pub fn wipe(&self) -> Result<(), ProcessError> {
        let data = self.data_dir();
        match std::fs::remove_dir_all(&data) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&data)(e)),
        }
        let member = self.member_file();
        match std::fs::remove_file(&member) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&member)(e)),
        }
        let epoch = self.epoch_file();
        match std::fs::remove_file(&epoch) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&epoch)(e)),
        }
        // A fresh instance has no state dir yet; what follows a wipe (a restore's snapshot file, the epoch)
        // is written into it. Private: etcd's data is the cluster's secrets.
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)
                .map_err(io(&self.dir))
        }
    }

    /// Restores a snapshot file into an empty data dir as a one-member cluster ([`restore_program`]).
    pub async fn restore_snapshot(
        &self,
        etcdctl: &Path,
        snapshot: &Path,
        spec: &StartSpec,
    ) -> Result<(), ProcessError> {
        self.wipe()?;
        self.restore_snapshot_into(etcdctl, snapshot, spec, &self.data_dir())
            .await
    }

    /// A staging data dir beside the live one (restored into, then swapped in by [`Self::replace_data_dir`]).
    pub fn staging_data_dir(&self) -> PathBuf {
        self.dir.join("data.staging")
    }

    /// Replaces the data dir with `staging` (two renames): a crash leaves either the old data or the new.
    pub fn replace_data_dir(&self, staging: &Path) -> Result<(), ProcessError> {
        let data = self.data_dir();
        let old = self.dir.join("data.replaced");
        remove_dir_if_present(&old)?;
        match std::fs::rename(&data, &old) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&data)(e)),
        }
        std::fs::rename(staging, &data).map_err(io(&data))?;
        remove_dir_if_present(&old)
    }

    /// Restores a snapshot file into `data_dir` (which must not exist; it is removed first) as a one-member
    /// cluster, with [`restore_program`]`(etcdctl)`. Both programs check the sha256 etcd appends to a snapshot
    /// it streams.
    pub async fn restore_snapshot_into(
        &self,
        etcdctl: &Path,
        snapshot: &Path,
        spec: &StartSpec,
        data_dir: &Path,
    ) -> Result<(), ProcessError> {
        remove_dir_if_present(data_dir)?;
        let program = restore_program(etcdctl);
        let output = tokio::process::Command::new(&program)
            .env("ETCDCTL_API", "3")
            .args(restore_args(snapshot, spec, data_dir))
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|source| ProcessError::Spawn {
                binary: program.clone(),
                source,
            })?;
        if !output.status.success() {
            return Err(ProcessError::Restore {
                program,
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        Ok(())
    }
}

/// The program that restores a snapshot into a data dir: `etcdutl` beside `etcdctl` when it is there (etcd 3.5
/// and later ship it, and 3.6's etcdctl has no `snapshot restore`: the AMI's etcd for Kubernetes 1.34 and later),
/// else `etcdctl` itself (etcd 3.4, which has no etcdutl).
pub fn restore_program(etcdctl: &Path) -> PathBuf {
    let etcdutl = etcdctl.with_file_name("etcdutl");
    if etcdutl.is_file() {
        etcdutl
    } else {
        etcdctl.to_path_buf()
    }
}

/// `snapshot restore`'s arguments, the same for etcdctl 3.4 and etcdutl 3.5 and later.
fn restore_args(snapshot: &Path, spec: &StartSpec, data_dir: &Path) -> Vec<String> {
    vec![
        "snapshot".to_string(),
        "restore".to_string(),
        snapshot.display().to_string(),
        format!("--name={}", spec.name),
        format!("--data-dir={}", data_dir.display()),
        format!("--initial-cluster={}", initial_cluster_arg(spec)),
        format!("--initial-cluster-token={}", spec.token),
        format!("--initial-advertise-peer-urls={}", spec.peer_url),
    ]
}

/// Replaces `path` with `contents` through the workspace's one durable writer (`ballast_common::durable`), so a
/// crash or power loss leaves either the old file or the new one, never a torn or empty one. The epoch and
/// `seeded` markers decide whether local data is kept or wiped: a marker lost to a crash must not look like "no
/// data of this epoch". 0644, as etcd's data directory's other files: they hold no secret.
pub(crate) fn write_durably(path: &Path, contents: &[u8]) -> Result<(), ProcessError> {
    ballast_common::durable::write(
        path,
        contents,
        &ballast_common::durable::Options::mode(0o644),
    )?;
    Ok(())
}

fn remove_dir_if_present(dir: &Path) -> Result<(), ProcessError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(dir)(e)),
    }
}

fn initial_cluster_arg(spec: &StartSpec) -> String {
    spec.initial_cluster
        .iter()
        .map(|(n, u)| format!("{n}={u}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// etcd's command line for one start: mutual TLS on client and peer URLs, on `spec.ip` only; raft's timing
/// always given, so what runs does not depend on the etcd version's defaults; and pre-vote on, which etcd 3.4
/// (the local cloud's, Debian's) leaves off and 3.5 and 3.6 (the AMI's) turn on by default: a member that
/// comes back from a partition or a restart without hearing the leader in time first asks whether it could win
/// an election, and the others, who hear from the leader, say no; without it, it raises its term and forces the
/// whole cluster into an election, one election timeout without a leader.
pub fn etcd_args(state: &LocalState, tls: &EtcdTls, spec: &StartSpec) -> Vec<String> {
    let client = crate::decide::client_url(&spec.ip);
    let peer = crate::decide::peer_url(&spec.ip);
    let p = |path: &Path| path.display().to_string();
    let mut args = vec![
        format!("--name={}", spec.name),
        format!("--data-dir={}", state.data_dir().display()),
        "--logger=zap".to_string(),
        "--log-outputs=stderr".to_string(),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={}", spec.peer_url),
        format!("--initial-cluster={}", initial_cluster_arg(spec)),
        format!("--initial-cluster-token={}", spec.token),
        format!(
            "--initial-cluster-state={}",
            if spec.mode == StartMode::New {
                "new"
            } else {
                "existing"
            }
        ),
        format!("--heartbeat-interval={}", spec.timing.heartbeat_interval_ms),
        format!("--election-timeout={}", spec.timing.election_timeout_ms),
        "--pre-vote=true".to_string(),
        // etcd's strict reconfiguration check refuses a membership change unless every voter has been connected
        // for 5 s: each join after a promotion waited that out, 15 of the 17 to 19 s a five-member cluster took
        // to form. The supervisor makes every change under rules of its own (`decide`) at least as strong as the
        // ones that check keeps: a learner, which never votes, is added one at a time; a removal needs a quorum
        // of the remaining voters answering now; a promotion needs a healthy cluster, a quorum of voters
        // answering now, which with the learner is a quorum after the promotion too (etcd counted members ever
        // started; `decide/tests.rs` checks the arithmetic).
        "--strict-reconfig-check=false".to_string(),
        "--client-cert-auth".to_string(),
        format!("--trusted-ca-file={}", p(&tls.ca_cert)),
        format!("--cert-file={}", p(&tls.server_cert)),
        format!("--key-file={}", p(&tls.server_key)),
        "--peer-client-cert-auth".to_string(),
        format!("--peer-trusted-ca-file={}", p(&tls.ca_cert)),
        format!("--peer-cert-file={}", p(&tls.peer_cert)),
        format!("--peer-key-file={}", p(&tls.peer_key)),
    ];
    if spec.mode == StartMode::ForceNewCluster {
        args.push("--force-new-cluster".to_string());
    }
    args
}

/// A running etcd, killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct EtcdProcess {
    child: tokio::process::Child,
    pid: Option<u32>,
}

impl EtcdProcess {
    /// Starts etcd with mutual TLS on client and peer URLs, on `spec.ip` only.
    pub fn start(
        binary: &Path,
        state: &LocalState,
        tls: &EtcdTls,
        spec: &StartSpec,
    ) -> Result<Self, ProcessError> {
        std::fs::create_dir_all(&state.dir).map_err(io(&state.dir))?;
        let log_path = state.log_file();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io(&log_path))?;
        let log_err = log.try_clone().map_err(io(&log_path))?;
        let mut cmd = tokio::process::Command::new(binary);
        cmd.args(etcd_args(state, tls, spec));
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|source| ProcessError::Spawn {
            binary: binary.to_path_buf(),
            source,
        })?;
        let pid = child.id();
        tracing::info!(pid, name = %spec.name, mode = ?spec.mode, "etcd started");
        Ok(EtcdProcess { child, pid })
    }

    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Whether the process still runs (reaps it when it exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL and reap.
    pub async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        tracing::info!(pid = self.pid, "etcd stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .expect("read dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp"))
            .collect()
    }

    /// The markers are replaced whole: a reader racing many writers never sees a missing, empty or torn epoch,
    /// and no temporary file is left behind.
    #[test]
    fn markers_are_never_observed_partial_and_leave_no_temp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let local = LocalState::new(dir.path().join("state"));
        local.set_epoch(1).expect("first write");
        local.set_seeded(1).expect("first write");
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let local = local.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    assert!(local.epoch().is_some(), "epoch observed missing or partial");
                    assert!(
                        local.seeded_epoch().is_some(),
                        "seeded observed missing or partial"
                    );
                    reads += 1;
                }
                reads
            })
        };
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let local = local.clone();
                std::thread::spawn(move || {
                    for i in 0..200u64 {
                        local.set_epoch(1_000_000 * (w + 1) + i).expect("set epoch");
                        local
                            .set_seeded(1_000_000 * (w + 1) + i)
                            .expect("set seeded");
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("writer");
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().expect("reader") > 0);
        assert!(local.epoch().is_some_and(|e| e > 1_000_000));
        assert_eq!(leftovers(&local.dir), Vec::<String>::new());
    }

    /// Large contents too: every read sees one writer's whole file.
    #[test]
    fn durable_write_replaces_whole_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("marker");
        write_durably(&path, &[b'0'; 65536]).expect("first write");
        let writers: Vec<_> = (1..=3u8)
            .map(|w| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        write_durably(&path, &[b'0' + w; 65536]).expect("write");
                    }
                })
            })
            .collect();
        for _ in 0..200 {
            let data = std::fs::read(&path).expect("read");
            assert_eq!(data.len(), 65536, "a torn file was observed");
            assert!(
                data.iter().all(|&b| b == data[0]),
                "two writers' bytes mixed"
            );
        }
        for w in writers {
            w.join().expect("writer");
        }
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    fn spec(timing: EtcdTiming, mode: StartMode) -> StartSpec {
        StartSpec {
            name: "i-0abc".to_string(),
            ip: "10.0.1.5".to_string(),
            peer_url: "https://etcd-a.internal.demo.example.com:2380".to_string(),
            initial_cluster: vec![(
                "i-0abc".to_string(),
                "https://etcd-a.internal.demo.example.com:2380".to_string(),
            )],
            token: "ballast-demo.example.com-epoch-1".to_string(),
            mode,
            timing,
        }
    }

    /// The spec's timing reaches etcd's command line as its flags (milliseconds), pre-vote is always on, and the
    /// rest of the line is what it was.
    #[test]
    fn timing_and_pre_vote_reach_etcds_command_line() {
        let state = LocalState::new(PathBuf::from("/var/lib/etcd"));
        let tls = EtcdTls::in_dir(Path::new("/etc/kubernetes/pki/etcd"));
        let tight = EtcdTiming::from_spec(Some("50ms"), Some("500ms")).expect("a valid pair");
        let args = etcd_args(&state, &tls, &spec(tight, StartMode::Existing));
        let expected: Vec<String> = [
            "--name=i-0abc",
            "--data-dir=/var/lib/etcd/data",
            "--logger=zap",
            "--log-outputs=stderr",
            "--listen-client-urls=https://10.0.1.5:2379",
            "--advertise-client-urls=https://10.0.1.5:2379",
            "--listen-peer-urls=https://10.0.1.5:2380",
            "--initial-advertise-peer-urls=https://etcd-a.internal.demo.example.com:2380",
            "--initial-cluster=i-0abc=https://etcd-a.internal.demo.example.com:2380",
            "--initial-cluster-token=ballast-demo.example.com-epoch-1",
            "--initial-cluster-state=existing",
            "--heartbeat-interval=50",
            "--election-timeout=500",
            "--pre-vote=true",
            "--strict-reconfig-check=false",
            "--client-cert-auth",
            "--trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt",
            "--cert-file=/etc/kubernetes/pki/etcd/server.crt",
            "--key-file=/etc/kubernetes/pki/etcd/server.key",
            "--peer-client-cert-auth",
            "--peer-trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt",
            "--peer-cert-file=/etc/kubernetes/pki/etcd/peer.crt",
            "--peer-key-file=/etc/kubernetes/pki/etcd/peer.key",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(args, expected);

        // No timing in the spec: etcd's defaults, written out; a forced new cluster says so last.
        let args = etcd_args(
            &state,
            &tls,
            &spec(EtcdTiming::default(), StartMode::ForceNewCluster),
        );
        assert!(args.contains(&"--heartbeat-interval=100".to_string()));
        assert!(args.contains(&"--election-timeout=1000".to_string()));
        assert!(args.contains(&"--pre-vote=true".to_string()));
        assert_eq!(args.last().map(String::as_str), Some("--force-new-cluster"));
    }
}
