//! Test support (feature `testing`): a throwaway etcd CA issuing node certificates the way nodeup does, and a
//! node of a local "cluster" on a loopback IP, running a real supervisor over a real etcd.

use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ballast_store::store::StateStore;
use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::peers::Peers;
use crate::process::EtcdTls;
use crate::supervisor::{Supervisor, SupervisorConfig};

/// A test CA.
pub struct TestCa {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// Failures of the test support.
#[derive(Debug, thiserror::Error)]
pub enum TestSupportError {
    #[error("certificate: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("not an IP: {text}")]
    BadIp {
        text: String,
        #[source]
        source: std::net::AddrParseError,
    },
}

fn write(path: &Path, data: &str, mode: u32) -> Result<(), TestSupportError> {
    let io = |source| TestSupportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(mode)
        .open(path)
        .map_err(io)?;
    std::io::Write::write_all(&mut f, data.as_bytes()).map_err(io)
}

impl TestCa {
    pub fn new() -> Result<Self, TestSupportError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "ballast test etcd CA");
        let cert = params.self_signed(&key)?;
        Ok(TestCa {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Writes `ca.crt`, `server`, `peer` and `client` certificates for a member on `ip` into `dir` (keys 0600).
    /// On a loopback IP the peer certificate also names 127.0.0.1: etcd 3.4 checks peers' source addresses,
    /// and every loopback connection leaves from 127.0.0.1.
    pub fn issue_node(&self, dir: &Path, ip: &str) -> Result<EtcdTls, TestSupportError> {
        std::fs::create_dir_all(dir).map_err(|source| TestSupportError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let addr: IpAddr = ip.parse().map_err(|source| TestSupportError::BadIp {
            text: ip.to_string(),
            source,
        })?;
        let mut ips = vec![addr];
        if addr.is_loopback() && ip != "127.0.0.1" {
            ips.push(IpAddr::from([127, 0, 0, 1]));
        }
        write(&dir.join("ca.crt"), &self.cert_pem, 0o644)?;
        for (name, server, client) in [
            ("server", true, true),
            ("peer", true, true),
            ("client", false, true),
        ] {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, format!("etcd-{name}-{ip}"));
            if server {
                params.subject_alt_names = ips.iter().map(|i| SanType::IpAddress(*i)).collect();
                params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ServerAuth);
            }
            if client {
                params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ClientAuth);
            }
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            let cert = params.signed_by(&key, &self.issuer)?;
            write(&dir.join(format!("{name}.crt")), &cert.pem(), 0o644)?;
            write(
                &dir.join(format!("{name}.key")),
                &key.serialize_pem(),
                0o600,
            )?;
        }
        Ok(EtcdTls::in_dir(dir))
    }
}

/// A supervisor config for a test node under `root/<instance>`: fast requeues, Debian's binaries.
pub fn test_config(
    ca: &TestCa,
    root: &Path,
    cluster: &str,
    instance_id: &str,
    ip: &str,
) -> Result<SupervisorConfig, TestSupportError> {
    let dir = root.join(instance_id);
    let tls = ca.issue_node(&dir.join("pki"), ip)?;
    let mut config = SupervisorConfig::new(cluster, instance_id, ip, dir.join("etcd"), tls);
    config.steady_interval = std::time::Duration::from_millis(300);
    config.publish_interval = std::time::Duration::from_secs(1);
    config.request_timeout = std::time::Duration::from_millis(1500);
    Ok(config)
}

/// A supervisor running in a task, with its etcd's PID visible for killing.
pub struct RunningNode {
    pub instance_id: String,
    pub ip: String,
    task: tokio::task::JoinHandle<crate::supervisor::StopOutcome>,
    pid: Arc<std::sync::atomic::AtomicU32>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl RunningNode {
    /// Starts the supervisor loop for `config`.
    pub fn spawn(
        config: SupervisorConfig,
        store: StateStore,
        peers: Arc<dyn Peers>,
    ) -> Result<Self, crate::supervisor::SupervisorError> {
        let instance_id = config.instance_id.clone();
        let ip = config.ip.clone();
        let mut supervisor = Supervisor::new(config, store, peers)?;
        let pid = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let pid_out = pid.clone();
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            // The loop of `Supervisor::run`, exposing etcd's PID after each round.
            loop {
                let delay = match supervisor.reconcile().await {
                    Ok((_, d)) => d,
                    Err(e) => {
                        tracing::warn!(error = %e, "round failed");
                        std::time::Duration::from_millis(200)
                    }
                };
                pid_out.store(
                    supervisor.etcd_pid().unwrap_or(0),
                    std::sync::atomic::Ordering::SeqCst,
                );
                tokio::select! {
                    _ = &mut rx => break,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            supervisor.shutdown().await
        });
        Ok(RunningNode {
            instance_id,
            ip,
            task,
            pid,
            stop: Some(tx),
        })
    }

    pub fn etcd_pid(&self) -> Option<u32> {
        match self.pid.load(std::sync::atomic::Ordering::SeqCst) {
            0 => None,
            p => Some(p),
        }
    }

    /// An instance dies: SIGKILL its etcd and its supervisor, at once.
    pub async fn crash(mut self) {
        if let Some(pid) = self.etcd_pid() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        self.task.abort();
        let _ = (&mut self.task).await;
    }

    /// Stops the supervisor and its etcd as nodeup does at SIGTERM (a leader hands leadership over first),
    /// waiting for both; `None` if the supervisor's task failed.
    pub async fn stop(mut self) -> Option<crate::supervisor::StopOutcome> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await.ok()
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        if let Some(pid) = self.etcd_pid() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        self.task.abort();
    }
}
