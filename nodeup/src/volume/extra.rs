//! A group's extra volumes (the node spec's `volumeMounts`, from the group's `spec.volumes`): EC2 attached them
//! at launch (the launch template's block device mappings), so nodeup attaches nothing. For each mount it finds
//! the device, formats it only when it is blank (`blkid` finds no signature; a device holding a filesystem of
//! another type is refused, never reformatted), and mounts it at its path, before the kubelet starts. Mounted
//! at every boot, as etcd's volume is: nodeup runs at every boot before the kubelet, so no fstab entry or mount
//! unit is needed, and a path that is already a mount point is left as it is.
//!
//! Every choice is a pure function of the parent module (`decide_format_as`, `decide_mount`,
//! `extra_device_candidates`, `volume_on`); the I/O helpers are `attach`'s. On the local cloud a device is a
//! directory volume (`docs/local-cloud.md`): formatting writes the label file, mounting is a bind mount.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use aws_sdk_ec2::error::DisplayErrorContext;
use ballast_state::node::VolumeMount;

use super::attach::{
    attached_device, contents, mount_point, run, VolumeError, DIRECTORY_LABEL_FILE,
};
use super::{decide_format_as, decide_mount, extra_device_candidates, volume_on, FormatDecision};
use crate::write::under_root;

/// How often the devices are looked for: a local stat (EC2 attached them at launch; they show within seconds).
const DEVICE_POLL: Duration = Duration::from_millis(25);

/// One extra volume, mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraMounted {
    pub device: String,
    pub path: String,
    /// Where the device was found (under the root).
    pub found: PathBuf,
    /// Formatted now (it was blank); false for a device that held a filesystem already.
    pub formatted: bool,
    /// Mounted now; false when its path was a mount point already (nodeup ran before on this boot).
    pub mounted_now: bool,
}

/// Failures of the extra volumes' step, each naming the device and its mount path.
#[derive(Debug, thiserror::Error)]
pub enum ExtraVolumeError {
    #[error(
        "extra volume {device} for {path}: no device appeared at any of {candidates:?} within {secs} s: is it in \
         the group's spec.volumes, and was this instance launched from the group's current launch template?"
    )]
    NoDevice {
        device: String,
        path: String,
        candidates: Vec<PathBuf>,
        secs: u64,
    },
    #[error("extra volume {device} for {path}: not formatting {found}: {reason}")]
    RefusedFormat {
        device: String,
        path: String,
        found: PathBuf,
        reason: String,
    },
    #[error("extra volume {device} at {path}: {source}")]
    Mount {
        device: String,
        path: String,
        // Boxed: the volume step's error is large, and this one travels in every boot's Result.
        #[source]
        source: Box<VolumeError>,
    },
}

/// The instance's block device mappings as EC2 reports them (device name -> volume id), for the NVMe names of
/// a Nitro instance. Empty (logged) when EC2 cannot be asked: the device names are then looked for alone.
pub async fn block_device_mappings(
    ec2: &aws_sdk_ec2::Client,
    instance_id: &str,
) -> BTreeMap<String, String> {
    match ec2
        .describe_instances()
        .instance_ids(instance_id)
        .send()
        .await
    {
        Ok(out) => out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .flat_map(|i| i.block_device_mappings())
            .filter_map(|m| {
                Some((
                    m.device_name()?.to_string(),
                    m.ebs()?.volume_id()?.to_string(),
                ))
            })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %DisplayErrorContext(&e), "DescribeInstances failed: looking for the extra volumes by their device names only");
            BTreeMap::new()
        }
    }
}

/// Finds, formats when blank, and mounts every extra volume, in the node spec's order.
pub async fn mount_all(
    root: &Path,
    mounts: &[VolumeMount],
    mappings: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<Vec<ExtraMounted>, ExtraVolumeError> {
    let started = Instant::now();
    let mut done = Vec::new();
    for mount in mounts {
        let found = wait_for_device(root, mount, mappings, started, timeout).await?;
        done.push(mount_one(root, mount, found)?);
    }
    Ok(done)
}

async fn wait_for_device(
    root: &Path,
    mount: &VolumeMount,
    mappings: &BTreeMap<String, String>,
    started: Instant,
    timeout: Duration,
) -> Result<PathBuf, ExtraVolumeError> {
    let candidates: Vec<PathBuf> =
        extra_device_candidates(&mount.device, volume_on(mappings, &mount.device))
            .iter()
            .map(|c| under_root(root, &c.to_string_lossy()))
            .collect();
    loop {
        if let Some(found) = candidates.iter().find(|c| attached_device(c)) {
            return Ok(found.clone());
        }
        if started.elapsed() >= timeout {
            return Err(ExtraVolumeError::NoDevice {
                device: mount.device.clone(),
                path: mount.path.clone(),
                candidates,
                secs: timeout.as_secs(),
            });
        }
        tokio::time::sleep(DEVICE_POLL).await;
    }
}

fn mount_one(
    root: &Path,
    mount: &VolumeMount,
    found: PathBuf,
) -> Result<ExtraMounted, ExtraVolumeError> {
    let failed = |source: VolumeError| ExtraVolumeError::Mount {
        device: mount.device.clone(),
        path: mount.path.clone(),
        source: Box::new(source),
    };
    let target = under_root(root, &mount.path);
    let point = mount_point(&target).map_err(failed)?;
    let wanted = decide_mount(point).map_err(|message| {
        failed(VolumeError::MountPoint {
            path: target.clone(),
            message: message.to_string(),
        })
    })?;
    if !wanted {
        // Mounted by an earlier run of nodeup on this boot: what is on it was decided then.
        return Ok(ExtraMounted {
            device: mount.device.clone(),
            path: mount.path.clone(),
            found,
            formatted: false,
            mounted_now: false,
        });
    }
    let formatted = match decide_format_as(&contents(&found), &mount.filesystem) {
        FormatDecision::Format => {
            format(&found, mount).map_err(failed)?;
            true
        }
        FormatDecision::Keep => false,
        FormatDecision::Refuse { reason } => {
            return Err(ExtraVolumeError::RefusedFormat {
                device: mount.device.clone(),
                path: mount.path.clone(),
                found,
                reason,
            })
        }
    };
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&target)
            .map_err(|source| {
                failed(VolumeError::Io {
                    path: target.clone(),
                    source,
                })
            })?;
    }
    tracing::info!(device = %found.display(), target = %target.display(), formatted, "mounting an extra volume");
    if found.is_dir() {
        // A directory volume (the local cloud's) has no filesystem to pass options to: bound as it is.
        run(Command::new("mount").arg("--bind").arg(&found).arg(&target)).map_err(failed)?;
    } else {
        let options = if mount.mount_options.is_empty() {
            "defaults".to_string()
        } else {
            mount.mount_options.join(",")
        };
        run(Command::new("mount")
            .args(["-t", &mount.filesystem, "-o", &options])
            .arg(&found)
            .arg(&target))
        .map_err(failed)?;
    }
    Ok(ExtraMounted {
        device: mount.device.clone(),
        path: mount.path.clone(),
        found,
        formatted,
        mounted_now: true,
    })
}

/// Makes the mount's filesystem on a blank device: `mkfs.<filesystem>` with its format options; on a directory
/// volume, the label file naming the filesystem.
fn format(device: &Path, mount: &VolumeMount) -> Result<(), VolumeError> {
    tracing::info!(device = %device.display(), filesystem = %mount.filesystem, "formatting a blank extra volume");
    if device.is_dir() {
        let label = device.join(DIRECTORY_LABEL_FILE);
        return std::fs::write(&label, format!("{}\n", mount.filesystem)).map_err(|source| {
            VolumeError::Io {
                path: label,
                source,
            }
        });
    }
    run(Command::new(format!("mkfs.{}", mount.filesystem))
        .arg("-q")
        .args(&mount.format_options)
        .arg(device))
}
