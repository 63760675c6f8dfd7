//! The local cloud's state directory: what `up` started (so `down` and `status` can find exactly it), the
//! credentials `env` prints, and one directory per emulated instance.
//!
//! ```text
//! STATE/
//!   localcloud.json           CloudRecord (mode 0600: holds the admin keys)
//!   localcloud.log            the runner's log
//!   emulator.log              the AWS emulator's log
//!   emulator/                 the emulator's work directory (its launcher script)
//!   instances/<id>/
//!     instance.json           InstanceRecord: IP, AZ, IMDS endpoint, nodeup's PID, state
//!     nodeup.log              the instance's output (stdout and stderr of nodeup)
//!     root/                   the instance's root directory (`nodeup --root`)
//! ```

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// Now, RFC 3339 (UTC): Ballast's one timestamp writer, for the records here and their callers.
pub use ballast_state::timestamp::now_rfc3339;
use serde::{Deserialize, Serialize};

use crate::process::ProcessRecord;

/// The region the local cloud serves (its subnets are us-west-2a..d).
pub const REGION: &str = "us-west-2";
/// The VPC CIDR `localcloud env` suggests to Ballast (`BALLAST_NETWORK_CIDR`): inside 127.0.0.0/8 so instances'
/// private IPs are bindable loopback addresses.
pub const DEFAULT_NETWORK_CIDR: &str = "127.16.0.0/16";
/// Env var naming the state directory (overridden by `--state-dir`).
pub const STATE_DIR_ENV: &str = "BALLAST_LOCALCLOUD_DIR";

/// Failures reading or writing the state directory.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Neither `--state-dir`, `BALLAST_LOCALCLOUD_DIR`, `XDG_STATE_HOME` nor `HOME` is set.
    #[error(
        "no state directory: pass --state-dir or set {STATE_DIR_ENV} (HOME is not set either)"
    )]
    NoStateDir,
    /// No local cloud was started with this state directory.
    #[error("no local cloud in {0} (run `localcloud up` first)")]
    NotUp(PathBuf),
    /// A file could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A record is not valid JSON of the expected shape.
    #[error("{path} is not a valid record: {source}")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A record could not be replaced (the error names the file and the step).
    #[error(transparent)]
    Write(#[from] ballast_common::durable::WriteError),
}

/// An access key pair.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccessKey {
    pub access_key_id: String,
    pub secret_access_key: String,
}

/// What `localcloud up` (the runner, precisely) started: written once it is ready.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CloudRecord {
    /// `AWS_ENDPOINT_URL`: the AWS emulator.
    pub endpoint: String,
    pub region: String,
    /// The default VPC CIDR for Ballast (`BALLAST_NETWORK_CIDR`).
    pub network_cidr: String,
    /// Whether the emulator enforces IAM policies.
    pub iam_enforced: bool,
    /// The operator's keys: an IAM user with an allow-everything policy.
    pub admin: AccessKey,
    /// The port every instance's IMDS listens on (on the instance's private IP).
    pub imds_port: u16,
    /// The runner daemon (`localcloud run`).
    pub runner: ProcessRecord,
    /// The AWS emulator (moto, through the launcher); a child of the runner.
    pub emulator: Option<ProcessRecord>,
    /// The nodeup binary every instance runs.
    pub nodeup: PathBuf,
    /// RFC 3339 time the cloud became ready.
    pub started_at: String,
    /// Where the machines are, when instances are machines (`--instances machines`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machines: Option<MachinesRecord>,
}

/// Where a cloud's machines are, recorded in the cloud's record so that `down` finds them even when the runner
/// died without powering them off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachinesRecord {
    /// The router namespace (`/run/netns/<namespace>`); each machine's is `<namespace>-<instance id>`.
    pub namespace: String,
    /// The cgroup every machine's cgroup is under.
    pub cgroup: String,
    /// runc's state directory (`runc --root`).
    pub runc_root: PathBuf,
    pub runc: PathBuf,
    /// The images machines boot, by AMI id.
    pub images: BTreeMap<String, PathBuf>,
}

/// One emulated instance as the runner last saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceRecord {
    pub instance_id: String,
    pub private_ip: String,
    pub availability_zone: String,
    pub subnet_id: Option<String>,
    pub instance_type: Option<String>,
    /// The Auto Scaling group that launched it (its `aws:autoscaling:groupName` tag).
    pub autoscaling_group: Option<String>,
    /// EC2 state as last seen: `running`, then `stopped`, `terminated`, ... once the runner starts shutting it
    /// down.
    pub state: String,
    /// `AWS_EC2_METADATA_SERVICE_ENDPOINT` of the instance.
    pub imds_endpoint: String,
    /// The instance's root directory (`nodeup --root`).
    pub root: PathBuf,
    /// nodeup's output.
    pub log: PathBuf,
    /// nodeup, leader of the instance's process group (its PID is the group id).
    pub nodeup: Option<ProcessRecord>,
    /// How nodeup ended, once it did (`exit status: 0`, `killed (instance terminated)`, ...).
    pub nodeup_exit: Option<String>,
    /// How the instance is (or was) shut down, from the moment it starts: `graceful` (SIGTERM to nodeup, as
    /// systemd stops the AMI's unit) or `power cut` (SIGKILL of everything at once: SkipOsShutdown, an eviction,
    /// the local cloud going down). Set without `stopped_at`: shutting down, not off yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown: Option<String>,
    /// RFC 3339 time the runner booted the instance.
    pub booted_at: String,
    /// RFC 3339 time the runner powered it off.
    pub stopped_at: Option<String>,
    /// The machine that runs it (its runc container's id), when instances are machines: then `root` is the
    /// machine's root as the host sees it while it runs, `log` its console, and `nodeup` empty (nodeup is a
    /// process of the machine's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

/// The state directory of one local cloud.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// `explicit` (from `--state-dir` or `BALLAST_LOCALCLOUD_DIR`), else
    /// `${XDG_STATE_HOME:-~/.local/state}/ballast/localcloud`.
    pub fn resolve(explicit: Option<PathBuf>) -> Result<Self, StateError> {
        if let Some(root) = explicit {
            return Ok(StateDir::new(root));
        }
        let base = std::env::var_os("XDG_STATE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
            .ok_or(StateError::NoStateDir)?;
        Ok(StateDir::new(base.join("ballast/localcloud")))
    }

    /// A state directory at `root`; the path is made absolute so that recorded paths stay valid from any cwd.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let root = std::path::absolute(&root).unwrap_or(root);
        StateDir { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn cloud_file(&self) -> PathBuf {
        self.root.join("localcloud.json")
    }
    pub fn runner_log(&self) -> PathBuf {
        self.root.join("localcloud.log")
    }
    pub fn emulator_log(&self) -> PathBuf {
        self.root.join("emulator.log")
    }
    pub fn emulator_dir(&self) -> PathBuf {
        self.root.join("emulator")
    }
    pub fn instances_dir(&self) -> PathBuf {
        self.root.join("instances")
    }
    pub fn instance_dir(&self, instance_id: &str) -> PathBuf {
        self.instances_dir().join(instance_id)
    }
    pub fn instance_record_file(&self, instance_id: &str) -> PathBuf {
        self.instance_dir(instance_id).join("instance.json")
    }
    /// EBS volumes, one directory each (`crate::volumes`).
    /// One directory per machine (`--instances machines`): its root volume's upper layer, runc bundle, console.
    pub fn machines_dir(&self) -> PathBuf {
        self.root.join("machines")
    }
    pub fn volumes_dir(&self) -> PathBuf {
        self.root.join("volumes")
    }
    pub fn instance_root(&self, instance_id: &str) -> PathBuf {
        self.instance_dir(instance_id).join("root")
    }
    pub fn instance_log(&self, instance_id: &str) -> PathBuf {
        self.instance_dir(instance_id).join("nodeup.log")
    }

    /// Creates the directory (and parents), readable by its owner only: it holds the admin keys.
    pub fn create(&self) -> Result<(), StateError> {
        use std::os::unix::fs::PermissionsExt;
        let err = |source| StateError::Io {
            what: "creating the state directory",
            path: self.root.clone(),
            source,
        };
        std::fs::create_dir_all(&self.root).map_err(err)?;
        std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700)).map_err(err)
    }

    /// The record of the running (or last) local cloud.
    pub fn read_cloud(&self) -> Result<CloudRecord, StateError> {
        let path = self.cloud_file();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|source| StateError::Corrupt { path, source }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(StateError::NotUp(self.root.clone()))
            }
            Err(source) => Err(StateError::Io {
                what: "reading",
                path,
                source,
            }),
        }
    }

    pub fn write_cloud(&self, record: &CloudRecord) -> Result<(), StateError> {
        write_json(&self.cloud_file(), record, true)
    }

    /// Forgets the cloud (after `down`); the instances' logs stay until the next `up`.
    pub fn remove_cloud(&self) -> Result<(), StateError> {
        let path = self.cloud_file();
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StateError::Io {
                what: "removing",
                path,
                source,
            }),
        }
    }

    pub fn write_instance(&self, record: &InstanceRecord) -> Result<(), StateError> {
        let dir = self.instance_dir(&record.instance_id);
        std::fs::create_dir_all(&dir).map_err(|source| StateError::Io {
            what: "creating",
            path: dir,
            source,
        })?;
        write_json(
            &self.instance_record_file(&record.instance_id),
            record,
            false,
        )
    }

    pub fn read_instance(&self, instance_id: &str) -> Result<InstanceRecord, StateError> {
        let path = self.instance_record_file(instance_id);
        let bytes = std::fs::read(&path).map_err(|source| StateError::Io {
            what: "reading",
            path: path.clone(),
            source,
        })?;
        serde_json::from_slice(&bytes).map_err(|source| StateError::Corrupt { path, source })
    }

    /// Every instance the runner ever booted in this cloud, oldest first.
    pub fn read_instances(&self) -> Result<Vec<InstanceRecord>, StateError> {
        let dir = self.instances_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(StateError::Io {
                    what: "listing",
                    path: dir,
                    source,
                })
            }
        };
        let mut records = Vec::new();
        for entry in entries.flatten() {
            let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            // A directory whose record is not written yet (boot in progress) is skipped, not an error.
            if self.instance_record_file(&id).exists() {
                records.push(self.read_instance(&id)?);
            }
        }
        records.sort_by(|a, b| (&a.booted_at, &a.instance_id).cmp(&(&b.booted_at, &b.instance_id)));
        Ok(records)
    }

    /// Removes the instance and volume directories of a previous cloud: instance and volume ids start over with a
    /// fresh emulator. Volume mounts a runner that died left behind are taken away first, so that nothing is
    /// removed through them.
    pub fn clear_instances(&self) -> Result<(), StateError> {
        let instances = self.instances_dir();
        if let Err(e) = crate::volumes::unmount_all_under(&instances) {
            return Err(StateError::Io {
                what: "unmounting the volumes under",
                path: instances,
                source: io::Error::other(e.to_string()),
            });
        }
        for dir in [instances, self.volumes_dir()] {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(StateError::Io {
                        what: "removing",
                        path: dir,
                        source,
                    })
                }
            }
        }
        Ok(())
    }
}

/// Writes JSON through the workspace's durable writer, so a reader never sees half a record and a crash never
/// leaves an empty one; `private` files get mode 0600 (they hold credentials).
fn write_json<T: Serialize>(path: &Path, value: &T, private: bool) -> Result<(), StateError> {
    let data = serde_json::to_vec_pretty(value).map_err(|e| StateError::Io {
        what: "serializing",
        path: path.to_owned(),
        source: io::Error::other(e),
    })?;
    let mode = if private { 0o600 } else { 0o644 };
    ballast_common::durable::write(path, &data, &ballast_common::durable::Options::mode(mode))?;
    Ok(())
}
