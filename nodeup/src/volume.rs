//! etcd's volume on a control-plane node: before etcd starts, nodeup finds its member's EBS volume by tags in
//! its zone, waits for a previous holder to release it, attaches it, waits for the device, formats it only when
//! it has never been formatted, and mounts it at etcd's state directory (`/var/lib/etcd`). The volume is the
//! member's identity: its data, its epoch marker and its member ID travel with it to a replacement instance.
//!
//! This module holds the decisions, pure and table-tested; `attach` does the I/O (EC2, the device, mounting).
//!
//! The local cloud has no block devices: it attaches a volume by bind-mounting the volume's directory at the
//! device path under the instance's root (`docs/local-cloud.md`). A device path that is a directory is therefore
//! a *directory volume*: "formatted" means it holds anything (or the label file nodeup writes when it formats
//! one), and mounting it is a bind mount. Every decision below is the same for both kinds.

pub mod attach;
pub mod extra;

use std::path::PathBuf;

/// One attachment of a volume, as EC2 reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub instance_id: String,
    /// `attaching`, `attached`, `detaching`, `detached`, `busy`.
    pub state: String,
    pub device: String,
}

/// A volume found by the member's tags in this instance's zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundVolume {
    pub id: String,
    /// `creating`, `available`, `in-use`, `deleting`, `deleted`, `error`.
    pub state: String,
    pub attachments: Vec<Attachment>,
}

/// What to do about the member's volume next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachStep {
    /// Attached to this instance: wait for its device.
    Attached { volume_id: String, device: String },
    /// Free: attach it.
    Attach { volume_id: String },
    /// Not usable yet (being created, attached or detached, or held by another instance); look again.
    Wait { reason: String },
    /// No volume has the member's tags in this zone: `update cluster` makes them before the groups.
    Missing,
    /// More than one volume claims to be the member's: attaching either could split its data.
    Ambiguous { volume_ids: Vec<String> },
}

/// The one next step for the member's volume (pure).
pub fn decide_attach(found: &[FoundVolume], instance_id: &str) -> AttachStep {
    let live: Vec<&FoundVolume> = found
        .iter()
        .filter(|v| !matches!(v.state.as_str(), "deleting" | "deleted"))
        .collect();
    let volume = match live.as_slice() {
        [] => return AttachStep::Missing,
        [one] => *one,
        more => {
            return AttachStep::Ambiguous {
                volume_ids: more.iter().map(|v| v.id.clone()).collect(),
            }
        }
    };
    let current: Vec<&Attachment> = volume
        .attachments
        .iter()
        .filter(|a| a.state != "detached")
        .collect();
    if let Some(mine) = current.iter().find(|a| a.instance_id == instance_id) {
        return match mine.state.as_str() {
            "attached" => AttachStep::Attached {
                volume_id: volume.id.clone(),
                device: mine.device.clone(),
            },
            state => AttachStep::Wait {
                reason: format!("volume {} is {state} to this instance", volume.id),
            },
        };
    }
    if let Some(other) = current.first() {
        // Never detached from another instance by force: that instance may still run etcd on it. EC2 detaches it
        // when the instance terminates.
        return AttachStep::Wait {
            reason: format!(
                "volume {} is {} to instance {}: waiting for it to be released (EC2 detaches it when that instance \
                 terminates)",
                volume.id, other.state, other.instance_id
            ),
        };
    }
    match volume.state.as_str() {
        "available" => AttachStep::Attach {
            volume_id: volume.id.clone(),
        },
        state => AttachStep::Wait {
            reason: format!("volume {} is {state}", volume.id),
        },
    }
}

/// Where the kernel may show an EBS volume attached as `device`: the name asked for, its Xen name
/// (`/dev/sdf` -> `/dev/xvdf`), and on Nitro instances the NVMe link carrying the volume id (without its dash).
pub fn device_candidates(volume_id: &str, device: &str) -> Vec<PathBuf> {
    let mut candidates = vec![PathBuf::from(device)];
    if let Some(letter) = device.strip_prefix("/dev/sd") {
        candidates.push(PathBuf::from(format!("/dev/xvd{letter}")));
    }
    candidates.push(PathBuf::from(format!(
        "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_{}",
        volume_id.replace('-', "")
    )));
    candidates
}

/// What is on a volume's device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Contents {
    /// Never formatted: no filesystem signature (a block device), nothing at all (a directory volume).
    Blank,
    /// A filesystem (its type), or a directory volume holding something.
    Formatted { kind: String },
    /// Looking failed: not known to be blank.
    Unknown { reason: String },
}

/// Whether to format before mounting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatDecision {
    Format,
    Keep,
    /// Neither: what is on it is not known, and formatting could destroy a member's data.
    Refuse {
        reason: String,
    },
}

/// A volume is formatted only when it is known to be blank: a volume with data is never formatted (pure).
pub fn decide_format(contents: &Contents) -> FormatDecision {
    match contents {
        Contents::Blank => FormatDecision::Format,
        Contents::Formatted { .. } => FormatDecision::Keep,
        Contents::Unknown { reason } => FormatDecision::Refuse {
            reason: reason.clone(),
        },
    }
}

/// Whether to format a group's extra volume before mounting it as `filesystem` (pure): only a blank one. One that
/// holds another filesystem is never reformatted (its data may be an operator's, or the device not the one
/// meant): refused, naming both. A directory volume (the local cloud's) has no filesystem type: holding
/// anything, it is kept.
pub fn decide_format_as(contents: &Contents, filesystem: &str) -> FormatDecision {
    match contents {
        Contents::Formatted { kind } if kind != filesystem && kind != "directory" => {
            FormatDecision::Refuse {
                reason: format!(
                    "it holds a {kind} filesystem, not {filesystem}: nodeup never reformats a device that has                      one; set the mount's filesystem to {kind}, or wipe the device yourself"
                ),
            }
        }
        other => decide_format(other),
    }
}

/// Where the kernel may show an extra volume the launch template mapped on `device`: that name, its other name
/// (`/dev/sdg` and `/dev/xvdg`), and, when EC2 says which volume it is, the NVMe link of a Nitro instance.
pub fn extra_device_candidates(device: &str, volume_id: Option<&str>) -> Vec<PathBuf> {
    let mut candidates = vec![PathBuf::from(device)];
    if let Some(letter) = device.strip_prefix("/dev/sd") {
        candidates.push(PathBuf::from(format!("/dev/xvd{letter}")));
    } else if let Some(letter) = device.strip_prefix("/dev/xvd") {
        candidates.push(PathBuf::from(format!("/dev/sd{letter}")));
    }
    if let Some(id) = volume_id {
        candidates.push(PathBuf::from(format!(
            "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_{}",
            id.replace('-', "")
        )));
    }
    candidates
}

/// The volume EC2 attached on a mount's device, from the instance's block device mappings (device -> volume
/// id): by its name, else by its other name (pure).
pub fn volume_on<'a>(
    mappings: &'a std::collections::BTreeMap<String, String>,
    device: &str,
) -> Option<&'a str> {
    if let Some(id) = mappings.get(device) {
        return Some(id);
    }
    let letter = ballast_state::group_volumes::device_letter(device)?;
    mappings
        .iter()
        .find(|(name, _)| ballast_state::group_volumes::device_letter(name) == Some(letter))
        .map(|(_, id)| id.as_str())
}

/// What etcd's state directory is before the volume goes on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountPoint {
    /// Already a mount point (nodeup ran before on this instance): the volume is there.
    Mounted,
    /// Missing or empty: mount the volume on it.
    Empty,
    /// Holds files but is not a mount point: mounting would hide them.
    HoldsFiles,
}

/// Whether to mount (pure). Files already in the state directory are never hidden under the volume: they may be
/// a member's data from before volumes, which an operator must move onto the volume or aside.
pub fn decide_mount(point: MountPoint) -> Result<bool, &'static str> {
    match point {
        MountPoint::Mounted => Ok(false),
        MountPoint::Empty => Ok(true),
        MountPoint::HoldsFiles => Err(
            "holds files but is not a mount point: mounting the volume would hide them (etcd data from before \
             volumes?); move them onto the volume or aside, then restart nodeup",
        ),
    }
}

#[cfg(test)]
mod tests;
