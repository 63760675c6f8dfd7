//! The I/O of the volume step: EC2 (DescribeVolumes, AttachVolume, with the instance role), the device, `blkid`,
//! `mkfs.ext4`, `mount`. Every choice is made by the pure functions of the parent module.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_ec2::types::Filter;
use ballast_state::etcd_volume::{ETCD_MEMBER_TAG, ETCD_VOLUME_DEVICE, ETCD_VOLUME_LABEL};

use super::{
    decide_attach, decide_format, decide_mount, device_candidates, AttachStep, Attachment,
    Contents, FormatDecision, FoundVolume, MountPoint,
};
use crate::write::under_root;

/// How often EC2 is asked while waiting for the volume (a previous holder's release, the attachment).
const POLL: Duration = Duration::from_millis(250);
/// How often the device is looked for once attached: a local stat, so often (EC2 shows it within seconds).
const DEVICE_POLL: Duration = Duration::from_millis(25);
/// Written into a directory volume (the local cloud's) when nodeup formats it: the directory's "filesystem".
pub const DIRECTORY_LABEL_FILE: &str = ".ballast-volume";

/// Whose volume, where, and for how long to wait for it.
#[derive(Debug, Clone)]
pub struct VolumeRequest<'a> {
    pub cluster: &'a str,
    pub member: &'a str,
    pub zone: &'a str,
    pub instance_id: &'a str,
    /// The node's root (`/` on a real instance; the instance's directory on the local cloud).
    pub root: &'a Path,
    /// Where etcd's state goes, as a node path (`/var/lib/etcd`).
    pub state_dir: &'a str,
    /// Waiting for a previous holder to release the volume, and for its device, ends after this long.
    pub timeout: Duration,
}

/// The member's volume, mounted at etcd's state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedVolume {
    pub volume_id: String,
    pub device: PathBuf,
    /// Formatted now (a new volume); false for a volume that held a filesystem already.
    pub formatted: bool,
}

/// Failures of the volume step, each naming the volume or path and what to do.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("attaching etcd member {member:?}'s volume stopped before it finished: {reason}")]
    Interrupted { member: String, reason: String },
    #[error(
        "finding etcd member {member:?}'s volume in {zone}: DescribeVolumes failed: {message}"
    )]
    Describe {
        member: String,
        zone: String,
        message: String,
    },
    #[error("attaching volume {volume_id} to {instance_id}: AttachVolume failed: {message}")]
    Attach {
        volume_id: String,
        instance_id: String,
        message: String,
    },
    #[error(
        "no volume tagged {ETCD_MEMBER_TAG}={member} for cluster {cluster} in {zone} after {secs} s: run `ballast \
         update cluster {cluster} --yes`, which creates one per etcd member in its group's zone"
    )]
    Missing {
        cluster: String,
        member: String,
        zone: String,
        secs: u64,
    },
    #[error("volumes {volume_ids:?} are all tagged as etcd member {member:?}'s: keep one (the one with its data), delete or retag the others")]
    Ambiguous {
        member: String,
        volume_ids: Vec<String>,
    },
    #[error("etcd member {member:?}'s volume is not usable after {secs} s: {reason}")]
    TimedOut {
        member: String,
        secs: u64,
        reason: String,
    },
    #[error("volume {volume_id}: no device appeared at any of {candidates:?} within {secs} s of attaching it")]
    NoDevice {
        volume_id: String,
        candidates: Vec<PathBuf>,
        secs: u64,
    },
    #[error("volume {volume_id} on {device}: not formatting it: {reason}")]
    RefusedFormat {
        volume_id: String,
        device: PathBuf,
        reason: String,
    },
    #[error("{path}: {message}")]
    MountPoint { path: PathBuf, message: String },
    #[error("{command} failed: {message}")]
    Command { command: String, message: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Finds, attaches, formats if blank, and mounts the member's volume at etcd's state directory.
pub async fn attach_and_mount(
    ec2: &aws_sdk_ec2::Client,
    request: &VolumeRequest<'_>,
) -> Result<MountedVolume, VolumeError> {
    let started = Instant::now();
    let (volume_id, device) = attach(ec2, request, started).await?;
    let device = wait_for_device(request, &volume_id, &device, started).await?;
    let formatted = match decide_format(&contents(&device)) {
        FormatDecision::Format => {
            format(&device)?;
            true
        }
        FormatDecision::Keep => false,
        FormatDecision::Refuse { reason } => {
            return Err(VolumeError::RefusedFormat {
                volume_id,
                device,
                reason,
            })
        }
    };
    let target = under_root(request.root, request.state_dir);
    let point = mount_point(&target)?;
    if decide_mount(point).map_err(|message| VolumeError::MountPoint {
        path: target.clone(),
        message: message.to_string(),
    })? {
        mount(&device, &target)?;
    }
    Ok(MountedVolume {
        volume_id,
        device,
        formatted,
    })
}

/// Until the volume is attached here: returns its id and the device EC2 names.
async fn attach(
    ec2: &aws_sdk_ec2::Client,
    request: &VolumeRequest<'_>,
    started: Instant,
) -> Result<(String, String), VolumeError> {
    let mut last_wait = String::new();
    let mut looked_again = false;
    loop {
        let found = describe(ec2, request).await?;
        match decide_attach(&found, request.instance_id) {
            AttachStep::Attached { volume_id, device } => return Ok((volume_id, device)),
            AttachStep::Attach { volume_id } => {
                tracing::info!(volume = %volume_id, device = ETCD_VOLUME_DEVICE, "attaching etcd's volume");
                let attached = ec2
                    .attach_volume()
                    .volume_id(&volume_id)
                    .instance_id(request.instance_id)
                    .device(ETCD_VOLUME_DEVICE)
                    .send()
                    .await;
                match attached {
                    // Look again at once rather than after POLL (once: EC2's reads are eventually consistent,
                    // and a volume that still looks free must not be attached in a tight loop): the attachment
                    // shows in DescribeVolumes as soon as EC2 took it, and the 250 ms here were paid by every
                    // re-attach.
                    Ok(_) if !looked_again => {
                        looked_again = true;
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        // Lost a race for it (another holder got it first) shows as a wait next round; being
                        // refused does not get better by retrying.
                        let code = e.code().unwrap_or_default().to_string();
                        if code.contains("AccessDenied") || code.contains("Unauthorized") {
                            return Err(VolumeError::Attach {
                                volume_id,
                                instance_id: request.instance_id.to_string(),
                                message: DisplayErrorContext(&e).to_string(),
                            });
                        }
                        tracing::warn!(volume = %volume_id, error = %DisplayErrorContext(&e), "AttachVolume failed; looking again");
                    }
                }
            }
            AttachStep::Wait { reason } => {
                if reason != last_wait {
                    tracing::info!("{reason}");
                    last_wait = reason;
                }
            }
            AttachStep::Missing => {
                last_wait = "missing".to_string();
            }
            AttachStep::Ambiguous { volume_ids } => {
                return Err(VolumeError::Ambiguous {
                    member: request.member.to_string(),
                    volume_ids,
                })
            }
        }
        if started.elapsed() >= request.timeout {
            let secs = request.timeout.as_secs();
            if last_wait == "missing" {
                return Err(VolumeError::Missing {
                    cluster: request.cluster.to_string(),
                    member: request.member.to_string(),
                    zone: request.zone.to_string(),
                    secs,
                });
            }
            return Err(VolumeError::TimedOut {
                member: request.member.to_string(),
                secs,
                reason: last_wait,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The cluster's volumes tagged with the member, in this instance's zone.
async fn describe(
    ec2: &aws_sdk_ec2::Client,
    request: &VolumeRequest<'_>,
) -> Result<Vec<FoundVolume>, VolumeError> {
    let filter = |name: String, value: &str| Filter::builder().name(name).values(value).build();
    let out = ec2
        .describe_volumes()
        .filters(filter(
            format!("tag:kubernetes.io/cluster/{}", request.cluster),
            "owned",
        ))
        .filters(filter(format!("tag:{ETCD_MEMBER_TAG}"), request.member))
        .filters(filter("availability-zone".to_string(), request.zone))
        .send()
        .await
        .map_err(|e| VolumeError::Describe {
            member: request.member.to_string(),
            zone: request.zone.to_string(),
            message: DisplayErrorContext(&e).to_string(),
        })?;
    Ok(out
        .volumes()
        .iter()
        .map(|v| FoundVolume {
            id: v.volume_id().unwrap_or_default().to_string(),
            state: v
                .state()
                .map(|s| s.as_str().to_string())
                .unwrap_or_default(),
            attachments: v
                .attachments()
                .iter()
                .map(|a| Attachment {
                    instance_id: a.instance_id().unwrap_or_default().to_string(),
                    state: a
                        .state()
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_default(),
                    device: a.device().unwrap_or_default().to_string(),
                })
                .collect(),
        })
        .collect())
}

/// The first of the device's possible names to appear under the root.
async fn wait_for_device(
    request: &VolumeRequest<'_>,
    volume_id: &str,
    device: &str,
    started: Instant,
) -> Result<PathBuf, VolumeError> {
    let candidates: Vec<PathBuf> = device_candidates(volume_id, device)
        .iter()
        .map(|c| under_root(request.root, &c.to_string_lossy()))
        .collect();
    loop {
        if let Some(found) = candidates.iter().find(|c| attached_device(c)) {
            return Ok(found.clone());
        }
        if started.elapsed() >= request.timeout {
            return Err(VolumeError::NoDevice {
                volume_id: volume_id.to_string(),
                candidates,
                secs: request.timeout.as_secs(),
            });
        }
        tokio::time::sleep(DEVICE_POLL).await;
    }
}

/// A block device, or (the local cloud's) a directory that is a mount point: an empty directory that is not
/// mounted yet is where the device will appear, not the device.
pub(super) fn attached_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_block_device() => true,
        Ok(m) if m.is_dir() => is_mount_point(path),
        _ => false,
    }
}

/// What is on the device: `blkid` for a block device; for a directory volume, anything in it.
pub(super) fn contents(device: &Path) -> Contents {
    if device.is_dir() {
        return match std::fs::read_dir(device) {
            Ok(mut entries) => match entries.next() {
                None => Contents::Blank,
                Some(_) => Contents::Formatted {
                    kind: "directory".to_string(),
                },
            },
            Err(e) => Contents::Unknown {
                reason: format!("reading {}: {e}", device.display()),
            },
        };
    }
    let out = Command::new("blkid")
        .args(["-p", "-o", "value", "-s", "TYPE"])
        .arg(device)
        .output();
    match out {
        Ok(out) if out.status.success() => Contents::Formatted {
            kind: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        },
        // blkid's documented exit status when it finds no signature at all.
        Ok(out) if out.status.code() == Some(2) => Contents::Blank,
        Ok(out) => Contents::Unknown {
            reason: format!(
                "blkid exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        },
        Err(e) => Contents::Unknown {
            reason: format!("running blkid: {e}"),
        },
    }
}

fn format(device: &Path) -> Result<(), VolumeError> {
    tracing::info!(device = %device.display(), "formatting etcd's new volume");
    if device.is_dir() {
        let label = device.join(DIRECTORY_LABEL_FILE);
        return std::fs::write(&label, format!("{ETCD_VOLUME_LABEL}\n")).map_err(|source| {
            VolumeError::Io {
                path: label,
                source,
            }
        });
    }
    run(Command::new("mkfs.ext4")
        .args(["-q", "-L", ETCD_VOLUME_LABEL])
        .arg(device))
}

/// Whether etcd's state directory is already a mount point, empty (or missing), or holds files.
pub(super) fn mount_point(target: &Path) -> Result<MountPoint, VolumeError> {
    if is_mount_point(target) {
        return Ok(MountPoint::Mounted);
    }
    match std::fs::read_dir(target) {
        Ok(mut entries) => Ok(if entries.next().is_none() {
            MountPoint::Empty
        } else {
            MountPoint::HoldsFiles
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(MountPoint::Empty),
        Err(source) => Err(VolumeError::Io {
            path: target.to_path_buf(),
            source,
        }),
    }
}

fn mount(device: &Path, target: &Path) -> Result<(), VolumeError> {
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(target)
            .map_err(|source| VolumeError::Io {
                path: target.to_path_buf(),
                source,
            })?;
    }
    tracing::info!(device = %device.display(), target = %target.display(), "mounting etcd's volume");
    if device.is_dir() {
        return run(Command::new("mount").arg("--bind").arg(device).arg(target));
    }
    run(Command::new("mount")
        .args(["-o", "noatime"])
        .arg(device)
        .arg(target))?;
    // A volume grown by `update cluster` (ModifyVolume) gets its filesystem grown here; a failure leaves the old
    // size, which etcd runs on.
    if let Err(e) = run(Command::new("resize2fs").arg(device)) {
        tracing::warn!("growing the filesystem of etcd's volume: {e}");
    }
    Ok(())
}

/// Whether `path` is a mount point of this process's mount namespace (`/proc/self/mountinfo`).
pub fn is_mount_point(path: &Path) -> bool {
    let Ok(canonical) = std::fs::canonicalize(path) else {
        return false;
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = canonical.to_string_lossy().replace(' ', "\\040");
    info.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|point| point == wanted)
}

pub(super) fn run(command: &mut Command) -> Result<(), VolumeError> {
    let shown = format!("{command:?}");
    let out = command.output().map_err(|e| VolumeError::Command {
        command: shown.clone(),
        message: e.to_string(),
    })?;
    if out.status.success() {
        return Ok(());
    }
    Err(VolumeError::Command {
        command: shown,
        message: format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    })
}
