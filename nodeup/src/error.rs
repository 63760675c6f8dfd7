//! nodeup's one error type, [`NodeupError`], and the documented exit code each failure maps to
//! ([`ExitCode`]; docs/nodeup.md lists them per step).

use crate::certs::IssueCertError;
use crate::fetch::FetchError;
use crate::identity::WriteReportError;
use crate::image::ImageError;
use crate::imds::ImdsError;
use crate::render::RenderError;
use crate::volume::attach::VolumeError;
use crate::write::WriteFileError;

/// How nodeup exits. Without `--once`, only the failures before nodeup knows what it was asked to be (IMDS,
/// no user-data, the runtime) exit at once; the others are reported and exit with their code at SIGTERM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// The node is configured (and, without `--once`, nodeup was then asked to stop).
    Configured = 0,
    /// Anything without a code of its own: the async runtime could not start.
    Failure = 1,
    /// IMDS was unreachable, or refused nodeup.
    Imds = 2,
    /// The instance has no user-data: it was not launched from Ballast's launch template.
    NoUserData = 3,
    /// Writing under the root failed: the identity file or a node file.
    Write = 4,
    /// The user-data is not a Ballast boot config.
    BadBootConfig = 5,
    /// The state store: unreachable, an object missing, a node spec or secret that does not parse.
    StateStore = 6,
    /// The node spec's sha256 is not the boot config's: it changed after the launch template was written.
    TamperedNodeSpec = 7,
    /// Rendering the node's files, issuing its certificates, or the node spec's etcd settings.
    Render = 8,
    /// A service whose binary is present failed to start.
    Services = 9,
    /// The AMI does not carry the components the node spec needs.
    Image = 10,
    /// A control-plane node could not find, attach, format or mount its etcd member's volume.
    EtcdVolume = 11,
    /// A worker got no kubelet client certificate from the node bootstrap service (refused, or no control-plane
    /// node answered), or a control-plane node could not start that service.
    NodeIdentity = 12,
    /// One of the group's extra volumes (`spec.volumeMounts`) could not be found, formatted or mounted (a device
    /// holding another filesystem is refused, never reformatted).
    ExtraVolume = 13,
}

impl ExitCode {
    /// The process exit status.
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// A service that failed to start, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedService {
    pub name: String,
    pub detail: String,
}

impl std::fmt::Display for FailedService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.name, self.detail)
    }
}

fn joined(failed: &[FailedService]) -> String {
    failed
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why the user-data is not a boot config.
#[derive(Debug, thiserror::Error)]
pub enum BootConfigError {
    /// Not marked as one (some other user-data: a shell script, cloud-init).
    #[error("it does not start with #ballast-boot-config")]
    NotMarked,
    /// Marked, but its YAML does not parse as a boot config.
    #[error("{0}")]
    Parse(#[source] yaml_serde::Error),
    /// A YAML document of another kind.
    #[error("kind {kind:?} is not BootConfig")]
    WrongKind { kind: String },
}

/// Failures of nodeup; each maps to an [`ExitCode`].
#[derive(Debug, thiserror::Error)]
pub enum NodeupError {
    /// The system has no CA certificates: the AWS SDK cannot build its HTTPS client (it would panic).
    #[error(
        "no CA certificates on this node (none of {tried}): install the ca-certificates package in the image \
         (images/install.sh refuses to bake without it)"
    )]
    NoTrustStore { tried: String },
    /// IMDS was unreachable or refused us.
    #[error("reading the instance identity: {0}")]
    Imds(#[from] ImdsError),
    /// The instance was launched without user-data: nodeup cannot know its cluster or role.
    #[error(
        "the instance has no user-data (IMDS {endpoint} answered 404 for /latest/user-data): it must be launched \
         with Ballast's boot config (through its launch template)"
    )]
    NoUserData { endpoint: String },
    /// The user-data is not a boot config.
    #[error("the user-data is not a Ballast boot config: {0}")]
    BadBootConfig(#[source] BootConfigError),
    /// The identity report could not be written.
    #[error(transparent)]
    Write(#[from] WriteReportError),
    /// A node file could not be written.
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
    Certs(#[from] IssueCertError),
    /// Services whose binaries exist did not start.
    #[error("services failed to start: {}", joined(failed))]
    Services { failed: Vec<FailedService> },
    /// The AMI does not carry the components the node spec needs.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The async runtime could not start.
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The node spec's etcd settings are unusable (e.g. a backup interval that does not parse).
    #[error("the node spec's etcd settings: {0}")]
    EtcdSettings(#[source] ballast_etcd::supervisor::SettingsError),
    /// The node spec's audit shipping settings are unusable (a chunk interval that does not parse).
    #[error("the node spec's audit shipping settings: {0}")]
    AuditSettings(#[source] crate::audit::shipper::AuditError),
    /// A worker's kubelet client certificate (docs/node-identity.md).
    #[error("the kubelet's client certificate: {0}")]
    NodeCertificate(#[from] crate::bootstrap::client::NodeCertificateError),
    /// The node bootstrap service of a control-plane node.
    #[error("{0}")]
    BootstrapService(#[from] crate::bootstrap::server::StartServerError),
    /// etcd's volume could not be made ready; etcd is not started without it.
    #[error("etcd's volume: {0}")]
    EtcdVolume(#[from] VolumeError),
    /// An extra volume could not be made ready; the kubelet is not started without it.
    #[error("{0}")]
    ExtraVolume(#[from] crate::volume::extra::ExtraVolumeError),
}

impl NodeupError {
    /// The exit code this failure maps to.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            NodeupError::Imds(_) => ExitCode::Imds,
            NodeupError::NoUserData { .. } => ExitCode::NoUserData,
            NodeupError::Write(_) | NodeupError::WriteFile(_) => ExitCode::Write,
            NodeupError::BadBootConfig(_) => ExitCode::BadBootConfig,
            NodeupError::Fetch(FetchError::Tampered { .. }) => ExitCode::TamperedNodeSpec,
            NodeupError::Fetch(_) => ExitCode::StateStore,
            NodeupError::Render(_)
            | NodeupError::Certs(_)
            | NodeupError::EtcdSettings(_)
            | NodeupError::AuditSettings(_) => ExitCode::Render,
            NodeupError::Services { .. } => ExitCode::Services,
            NodeupError::Image(_) => ExitCode::Image,
            NodeupError::NodeCertificate(_) | NodeupError::BootstrapService(_) => {
                ExitCode::NodeIdentity
            }
            NodeupError::EtcdVolume(_) => ExitCode::EtcdVolume,
            NodeupError::ExtraVolume(_) => ExitCode::ExtraVolume,
            NodeupError::Runtime(_) => ExitCode::Failure,
            NodeupError::NoTrustStore { .. } => ExitCode::Image,
        }
    }

    /// Whether nodeup exits at once on this failure even without `--once`: it happened before nodeup knew what
    /// it was asked to be (IMDS, no user-data) or it cannot run at all. After any other failure the instance
    /// keeps running, its report saying why, and systemd's start timeout restarts nodeup later.
    pub fn exits_at_once(&self) -> bool {
        matches!(
            self,
            NodeupError::Imds(_) | NodeupError::NoUserData { .. } | NodeupError::Runtime(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes are documented (docs/nodeup.md, `nodeup.service`'s readers): they never move.
    #[test]
    fn exit_codes_keep_their_numbers() {
        let codes: Vec<i32> = [
            ExitCode::Configured,
            ExitCode::Failure,
            ExitCode::Imds,
            ExitCode::NoUserData,
            ExitCode::Write,
            ExitCode::BadBootConfig,
            ExitCode::StateStore,
            ExitCode::TamperedNodeSpec,
            ExitCode::Render,
            ExitCode::Services,
            ExitCode::Image,
            ExitCode::EtcdVolume,
            ExitCode::NodeIdentity,
            ExitCode::ExtraVolume,
        ]
        .into_iter()
        .map(ExitCode::code)
        .collect();
        assert_eq!(codes, (0..=13).collect::<Vec<_>>());
    }

    #[test]
    fn a_failed_service_is_named_with_its_detail() {
        let e = NodeupError::Services {
            failed: vec![
                FailedService {
                    name: "kubelet".into(),
                    detail: "exited 1".into(),
                },
                FailedService {
                    name: "containerd".into(),
                    detail: "failed".into(),
                },
            ],
        };
        assert_eq!(
            e.to_string(),
            "services failed to start: kubelet: exited 1; containerd: failed"
        );
        assert_eq!(e.exit_code(), ExitCode::Services);
    }

    #[test]
    fn failures_before_the_boot_config_exit_at_once() {
        let no_user_data = NodeupError::NoUserData {
            endpoint: "http://169.254.169.254".into(),
        };
        assert!(no_user_data.exits_at_once());
        assert_eq!(no_user_data.exit_code(), ExitCode::NoUserData);
        let bad = NodeupError::BadBootConfig(BootConfigError::NotMarked);
        assert!(!bad.exits_at_once());
        assert_eq!(
            bad.to_string(),
            "the user-data is not a Ballast boot config: it does not start with #ballast-boot-config"
        );
    }
}
