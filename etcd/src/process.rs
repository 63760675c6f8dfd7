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
//! hangs for seconds in a leadership transfer.

use std::path::{Path, PathBuf};
use std::process::Stdio;

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
    #[error("etcdctl snapshot restore failed ({status}): {stderr}")]
    Restore { status: String, stderr: String },
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
    pub ip: String,
    /// `name=peer-url` pairs.
    pub initial_cluster: Vec<(String, String)>,
    pub token: String,
    pub mode: StartMode,
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
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{n}\n")).map_err(io(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io(path))
    }

    pub fn set_epoch(&self, epoch: u64) -> Result<(), ProcessError> {
        self.write_number(&self.epoch_file(), epoch)
    }
    pub fn set_seeded(&self, epoch: u64) -> Result<(), ProcessError> {
        self.write_number(&self.seeded_file(), epoch)
    }

    /// Removes the data dir and its epoch (never the seeded marker).
    /// The node's copy of the last health report, replaced atomically (`<state_dir>/health.json`).
    pub fn write_health(&self, report: &crate::record::HealthReport) -> Result<(), ProcessError> {
        let path = self.dir.join("health.json");
        let tmp = self.dir.join("health.json.tmp");
        let mut json = serde_json::to_vec_pretty(report).unwrap_or_default();
        json.push(b'\n');
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        std::fs::write(&tmp, &json).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))
    }

    pub fn wipe(&self) -> Result<(), ProcessError> {
        let data = self.data_dir();
        match std::fs::remove_dir_all(&data) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&data)(e)),
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

    /// Restores a snapshot file into an empty data dir as a one-member cluster (`etcdctl snapshot restore`;
    /// etcd 3.4 has no etcdutl).
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
    /// cluster. `etcdctl snapshot restore` checks the sha256 etcd appends to a snapshot it streams.
    pub async fn restore_snapshot_into(
        &self,
        etcdctl: &Path,
        snapshot: &Path,
        spec: &StartSpec,
        data_dir: &Path,
    ) -> Result<(), ProcessError> {
        remove_dir_if_present(data_dir)?;
        let output = tokio::process::Command::new(etcdctl)
            .env("ETCDCTL_API", "3")
            .arg("snapshot")
            .arg("restore")
            .arg(snapshot)
            .arg(format!("--name={}", spec.name))
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--initial-cluster={}", initial_cluster_arg(spec)))
            .arg(format!("--initial-cluster-token={}", spec.token))
            .arg(format!(
                "--initial-advertise-peer-urls={}",
                crate::decide::peer_url(&spec.ip)
            ))
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|source| ProcessError::Spawn {
                binary: etcdctl.to_path_buf(),
                source,
            })?;
        if !output.status.success() {
            return Err(ProcessError::Restore {
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        Ok(())
    }
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
        let client = crate::decide::client_url(&spec.ip);
        let peer = crate::decide::peer_url(&spec.ip);
        let p = |path: &Path| path.display().to_string();
        let mut cmd = tokio::process::Command::new(binary);
        cmd.arg(format!("--name={}", spec.name))
            .arg(format!("--data-dir={}", state.data_dir().display()))
            .arg("--logger=zap")
            .arg("--log-outputs=stderr")
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={}", initial_cluster_arg(spec)))
            .arg(format!("--initial-cluster-token={}", spec.token))
            .arg(format!(
                "--initial-cluster-state={}",
                if spec.mode == StartMode::New {
                    "new"
                } else {
                    "existing"
                }
            ))
            .arg("--client-cert-auth")
            .arg(format!("--trusted-ca-file={}", p(&tls.ca_cert)))
            .arg(format!("--cert-file={}", p(&tls.server_cert)))
            .arg(format!("--key-file={}", p(&tls.server_key)))
            .arg("--peer-client-cert-auth")
            .arg(format!("--peer-trusted-ca-file={}", p(&tls.ca_cert)))
            .arg(format!("--peer-cert-file={}", p(&tls.peer_cert)))
            .arg(format!("--peer-key-file={}", p(&tls.peer_key)));
        if spec.mode == StartMode::ForceNewCluster {
            cmd.arg("--force-new-cluster");
        }
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
