//! EBS volumes on the local cloud: each volume is a directory, `<state>/volumes/<volume-id>`, and attaching it
//! to an instance bind-mounts that directory at the attachment's device path under the instance's root
//! (`<root>/dev/sdf`), where nodeup finds it as it would find the block device on EC2. The directory survives
//! the instance; the emulator detaches a terminated instance's volumes at once, and the runner takes the mount
//! away only once the instance is off (after its graceful shutdown, or at once on a power cut), as EC2 keeps a
//! volume attached until its instance has shut down.
//!
//! What this does not emulate (docs/local-cloud.md): block devices and filesystems (nodeup treats a directory
//! device as a directory volume: "formatting" it writes a label file), sizes and types (a directory has
//! neither), detach delays (the emulator detaches at once), and a device yanked from a running instance
//! (a volume detached by hand is unmounted lazily: open files keep working).
//!
//! The one guarantee kept exactly: a volume's directory is mounted into at most one instance at a time, and
//! never into a new one while the process group of its previous holder may still run (the runner waits for
//! that holder's shutdown to finish, or shuts it down, before it mounts the volume anywhere else).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One attachment EC2 reports: volume, instance, device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
pub struct Attached {
    pub volume_id: String,
    pub instance_id: String,
    pub device: String,
}

/// What the runner should do with the volume mounts this poll.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountPlan {
    /// Attachments to instances this runner runs that are not mounted yet, and whose volume no other instance
    /// holds.
    pub mount: Vec<Attached>,
    /// Mounts whose attachment is gone (detached, or its instance no longer runs here). Never the mounts of an
    /// instance shutting down: its shutdown unmounts them once its processes are gone.
    pub unmount: Vec<Attached>,
    /// Running instances still holding a volume EC2 now says is attached elsewhere: to be shut down before the
    /// volume is mounted into the other one.
    pub evict: Vec<String>,
    /// Attachments whose volume another instance still holds (shutting down, or to be evicted): mounted once
    /// that holder is off, as EC2 attaches a volume only once its previous holder released it.
    pub waiting: Vec<Attached>,
}

/// Plans the mounts (pure): `attached` is what EC2 says now, `mounted` what the runner has mounted, `running`
/// the instances it runs, `stopping` the instances it is shutting down (their mounts stay until they are off).
pub fn plan_mounts(
    attached: &[Attached],
    mounted: &BTreeSet<Attached>,
    running: &BTreeSet<String>,
    stopping: &BTreeSet<String>,
) -> MountPlan {
    let wanted: BTreeSet<&Attached> = attached
        .iter()
        .filter(|a| running.contains(&a.instance_id))
        .collect();
    let mut plan = MountPlan::default();
    for m in mounted {
        if !wanted.contains(m) && !stopping.contains(&m.instance_id) {
            plan.unmount.push(m.clone());
        }
    }
    for a in wanted {
        if mounted.contains(a) {
            continue;
        }
        // EC2 says the volume is attached to `a.instance_id`; an instance still holding its mount lost it, which
        // on EC2 only happens once that instance is off.
        let mut held = false;
        for holder in mounted.iter().filter(|m| m.volume_id == a.volume_id) {
            if holder.instance_id == a.instance_id {
                continue;
            }
            held = true;
            if !stopping.contains(&holder.instance_id) && !plan.evict.contains(&holder.instance_id)
            {
                plan.evict.push(holder.instance_id.clone());
            }
        }
        if held {
            plan.waiting.push(a.clone());
        } else {
            plan.mount.push(a.clone());
        }
    }
    plan
}

/// A volume's directory.
pub fn volume_dir(volumes_dir: &Path, volume_id: &str) -> PathBuf {
    volumes_dir.join(volume_id)
}

/// Where an attachment's device appears under an instance's root.
pub fn device_path(root: &Path, device: &str) -> PathBuf {
    root.join(device.trim_start_matches('/'))
}

/// Failures mounting or unmounting a volume's directory.
#[derive(Debug, thiserror::Error)]
pub enum VolumeMountError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{command} failed: {message}")]
    Command { command: String, message: String },
}

/// Bind-mounts the volume's directory (made 0700 if new) at the device path under the instance's root.
pub fn mount(volume: &Path, target: &Path) -> Result<(), VolumeMountError> {
    use std::os::unix::fs::DirBuilderExt;
    for dir in [volume, target] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| VolumeMountError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
    }
    run(Command::new("mount").arg("--bind").arg(volume).arg(target))
}

/// Every mount point at or under `dir` (this process's mount namespace), deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(&dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points.dedup();
    points
}

/// Unmounts (lazily: the instance's processes are gone or going) everything mounted at or under `dir`: the
/// volume's device mount and nodeup's mount of it at etcd's state directory.
pub fn unmount_all_under(dir: &Path) -> Result<(), VolumeMountError> {
    let mut first_error = None;
    for point in mounts_under(dir) {
        if let Err(e) = run(Command::new("umount").arg("-l").arg(&point)) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Unmounts the device mount of one attachment and any mount of the same directory elsewhere under the root
/// (nodeup's bind mount at etcd's state directory): found by the mount's source in mountinfo.
pub fn unmount_attachment(
    root: &Path,
    volume: &Path,
    device: &Path,
) -> Result<(), VolumeMountError> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return run(Command::new("umount").arg("-l").arg(device));
    };
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let volume_name = volume.file_name().map(|n| n.to_string_lossy().into_owned());
    let mut points: BTreeMap<usize, Vec<PathBuf>> = BTreeMap::new();
    for line in info.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(source_root), Some(point)) = (fields.get(3), fields.get(4)) else {
            continue;
        };
        let point = PathBuf::from(point.replace("\\040", " "));
        // A bind mount's field 4 is the path of its source inside its filesystem: it ends with the volume's id.
        let from_volume = volume_name
            .as_deref()
            .is_some_and(|name| source_root.ends_with(&format!("/{name}")));
        if point.starts_with(&root) && from_volume {
            points
                .entry(point.components().count())
                .or_default()
                .push(point);
        }
    }
    let mut first_error = None;
    for point in points.into_values().rev().flatten() {
        if let Err(e) = run(Command::new("umount").arg("-l").arg(&point)) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

fn run(command: &mut Command) -> Result<(), VolumeMountError> {
    let shown = format!("{command:?}");
    let out = command.output().map_err(|e| VolumeMountError::Command {
        command: shown.clone(),
        message: e.to_string(),
    })?;
    if out.status.success() {
        return Ok(());
    }
    Err(VolumeMountError::Command {
        command: shown,
        message: format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(volume: &str, instance: &str) -> Attached {
        Attached {
            volume_id: volume.into(),
            instance_id: instance.into(),
            device: "/dev/sdf".into(),
        }
    }

    fn set<T: Ord + Clone>(items: &[T]) -> BTreeSet<T> {
        items.iter().cloned().collect()
    }

    #[test]
    fn an_attachment_to_a_running_instance_is_mounted_once() {
        let running = set(&["i-1".to_string()]);
        let plan = plan_mounts(
            &[a("vol-1", "i-1")],
            &BTreeSet::new(),
            &running,
            &BTreeSet::new(),
        );
        assert_eq!(plan.mount, [a("vol-1", "i-1")]);
        let again = plan_mounts(
            &[a("vol-1", "i-1")],
            &set(&[a("vol-1", "i-1")]),
            &running,
            &BTreeSet::new(),
        );
        assert_eq!(again, MountPlan::default());
    }

    #[test]
    fn a_detached_volume_is_unmounted() {
        let running = set(&["i-1".to_string()]);
        let plan = plan_mounts(&[], &set(&[a("vol-1", "i-1")]), &running, &BTreeSet::new());
        assert_eq!(plan.unmount, [a("vol-1", "i-1")]);
        assert!(plan.mount.is_empty());
    }

    #[test]
    fn an_attachment_to_an_instance_not_running_here_is_not_mounted() {
        let plan = plan_mounts(
            &[a("vol-1", "i-2")],
            &BTreeSet::new(),
            &BTreeSet::new(),
            &BTreeSet::new(),
        );
        assert_eq!(plan, MountPlan::default());
    }

    #[test]
    fn a_volume_moved_to_another_instance_evicts_its_old_holder_first() {
        let running = set(&["i-1".to_string(), "i-2".to_string()]);
        let plan = plan_mounts(
            &[a("vol-1", "i-2")],
            &set(&[a("vol-1", "i-1")]),
            &running,
            &BTreeSet::new(),
        );
        assert_eq!(plan.evict, ["i-1"]);
        assert_eq!(plan.unmount, [a("vol-1", "i-1")]);
        // Not mounted in the same poll: only once the evicted holder is off.
        assert!(plan.mount.is_empty());
        assert_eq!(plan.waiting, [a("vol-1", "i-2")]);
    }

    #[test]
    fn a_volume_waits_for_its_holder_to_finish_shutting_down() {
        let running = set(&["i-2".to_string()]);
        let stopping = set(&["i-1".to_string()]);
        let mounted = set(&[a("vol-1", "i-1")]);
        let plan = plan_mounts(&[a("vol-1", "i-2")], &mounted, &running, &stopping);
        assert_eq!(
            plan,
            MountPlan {
                waiting: vec![a("vol-1", "i-2")],
                ..MountPlan::default()
            },
            "the holder shutting down keeps its mount and is not evicted again"
        );
        // Once it is off (its mounts gone), the volume is mounted into the new instance.
        let after = plan_mounts(
            &[a("vol-1", "i-2")],
            &BTreeSet::new(),
            &running,
            &BTreeSet::new(),
        );
        assert_eq!(after.mount, [a("vol-1", "i-2")]);
    }
}
