//! TLS clients to etcd members, with the retries membership changes need.

use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use crate::process::EtcdTls;

/// The client side of mutual TLS, read once.
#[derive(Clone)]
pub struct ClientTls {
    ca_pem: Vec<u8>,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

// Never print the private key.
impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Failures talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading {path}: {source}")]
    ReadTls {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("etcd {operation} via {endpoints}: {source}")]
    Etcd {
        operation: &'static str,
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },
    #[error("etcd {operation}: no voting member answers")]
    NoEndpoints { operation: &'static str },
}

impl ClientTls {
    pub fn from_pem(ca_pem: Vec<u8>, cert_pem: Vec<u8>, key_pem: Vec<u8>) -> Self {
        ClientTls {
            ca_pem,
            cert_pem,
            key_pem,
        }
    }

    /// Reads the supervisor's client identity and the CA.
    pub fn load(tls: &EtcdTls) -> Result<Self, ClientError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| ClientError::ReadTls {
                path: path.to_path_buf(),
                source,
            })
        };
        Ok(ClientTls {
            ca_pem: read(&tls.ca_cert)?,
            cert_pem: read(&tls.client_cert)?,
            key_pem: read(&tls.client_key)?,
        })
    }

    fn options(&self, timeout: Duration) -> ConnectOptions {
        ConnectOptions::new()
            .with_tls(
                TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(&self.ca_pem))
                    .identity(Identity::from_pem(&self.cert_pem, &self.key_pem)),
            )
            .with_connect_timeout(Duration::from_millis(800).min(timeout))
            .with_timeout(timeout)
    }

    /// A client over `endpoints` (voters only: learners refuse linearizable requests).
    pub async fn connect(
        &self,
        endpoints: &[String],
        timeout: Duration,
    ) -> Result<Client, ClientError> {
        Client::connect(endpoints, Some(self.options(timeout)))
            .await
            .map_err(|source| ClientError::Etcd {
                operation: "connect",
                endpoints: endpoints.join(","),
                source,
            })
    }
}

/// Whether an etcd error is worth retrying right away: the strict reconfiguration check ("unhealthy cluster"),
/// a learner not yet in sync, leader changes and timeouts.
pub fn is_transient(e: &etcd_client::Error) -> bool {
    let text = e.to_string();
    [
        "unhealthy cluster",
        "not enough started members",
        "in sync with leader",
        "leader changed",
        "no leader",
        "timed out",
        "deadline",
        "request timed out",
        "transport",
        "Unavailable",
    ]
    .iter()
    .any(|t| text.contains(t))
}

/// "Peer URLs already exists", "member not found", "not a learner": the change already happened.
pub fn is_already_done(e: &etcd_client::Error) -> bool {
    let text = e.to_string();
    [
        "already exists",
        "member not found",
        "not a learner",
        "ID removed",
    ]
    .iter()
    .any(|t| text.contains(t))
}
