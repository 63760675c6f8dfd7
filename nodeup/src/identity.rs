//! Phase 1 of nodeup: who this instance is (IMDS identity) and what it was asked to be (user-data, the boot
//! config), recorded under the root so that operators and tests can see what the node saw.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::imds::{Imds, ImdsError};

/// Where the identity report goes, relative to `--root`.
pub const IDENTITY_FILE: &str = "var/lib/nodeup/identity.json";

/// The instance's identity, from IMDS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub instance_id: String,
    pub region: String,
    pub availability_zone: String,
    pub local_ipv4: String,
    pub local_hostname: String,
    pub instance_type: String,
    pub ami_id: String,
    pub mac: String,
    /// The role of the instance profile, when the instance has one.
    pub iam_role: Option<String>,
}

impl Identity {
    /// Reads the identity; every field but the role must exist.
    pub async fn fetch(imds: &Imds) -> Result<Self, ImdsError> {
        let md = |p: &str| format!("/latest/meta-data/{p}");
        let iam_role = imds
            .get_optional(&md("iam/security-credentials/"))
            .await?
            .and_then(|roles| roles.lines().next().map(str::to_owned))
            .filter(|r| !r.is_empty());
        Ok(Identity {
            instance_id: imds.get(&md("instance-id")).await?,
            region: imds.get(&md("placement/region")).await?,
            availability_zone: imds.get(&md("placement/availability-zone")).await?,
            local_ipv4: imds.get(&md("local-ipv4")).await?,
            local_hostname: imds.get(&md("local-hostname")).await?,
            instance_type: imds.get(&md("instance-type")).await?,
            ami_id: imds.get(&md("ami-id")).await?,
            mac: imds.get(&md("mac")).await?,
            iam_role,
        })
    }
}

/// What the AWS SDK's default credential chain resolved to: on an instance with a profile, the role's
/// temporary credentials from IMDS (access key ids starting with `ASIA`). The secret is never recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialsCheck {
    pub access_key_id: Option<String>,
    pub error: Option<String>,
}

/// The file nodeup writes once it knows who it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityReport {
    pub identity: Identity,
    /// The user-data (boot config) as served by IMDS.
    pub user_data: String,
    pub credentials: CredentialsCheck,
    /// nodeup's PID, so a test can tell which process wrote the file.
    pub pid: u32,
}

/// Failures writing the identity report.
#[derive(Debug, thiserror::Error)]
pub enum WriteReportError {
    #[error("serializing the identity report for {path}: {source}")]
    Serialize {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Write(#[from] ballast_common::durable::WriteError),
}

impl IdentityReport {
    /// Writes `ROOT/var/lib/nodeup/identity.json` through the durable writer: a reader sees the whole report or
    /// none, and a power loss right after boot does not lose it. 0644: it holds no secret (an access key id is
    /// not one), and operators read it when a node misbehaves.
    pub fn write(&self, root: &Path) -> Result<PathBuf, WriteReportError> {
        let path = root.join(IDENTITY_FILE);
        let data =
            serde_json::to_vec_pretty(self).map_err(|source| WriteReportError::Serialize {
                path: path.clone(),
                source,
            })?;
        let options = ballast_common::durable::Options::mode(0o644).create_parents(0o755);
        ballast_common::durable::write(&path, &data, &options)?;
        Ok(path)
    }

    /// Reads a report written by [`IdentityReport::write`] under `root`; `None` when there is none yet.
    pub fn read(root: &Path) -> Option<Self> {
        let bytes = std::fs::read(root.join(IDENTITY_FILE)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_round_trips_through_the_root() {
        let dir = std::env::temp_dir().join(format!("nodeup-identity-{}", std::process::id()));
        let report = IdentityReport {
            identity: Identity {
                instance_id: "i-1".into(),
                region: "us-west-2".into(),
                availability_zone: "us-west-2a".into(),
                local_ipv4: "127.16.1.4".into(),
                local_hostname: "ip-127-16-1-4".into(),
                instance_type: "t3.micro".into(),
                ami_id: "ami-1".into(),
                mac: "0a:00:00:00:00:01".into(),
                iam_role: None,
            },
            user_data: "hello".into(),
            credentials: CredentialsCheck {
                access_key_id: None,
                error: Some("no profile".into()),
            },
            pid: 1,
        };
        let path = report.write(&dir).expect("writable temp dir");
        assert!(path.ends_with(IDENTITY_FILE));
        assert_eq!(IdentityReport::read(&dir), Some(report));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
