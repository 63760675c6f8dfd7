//! EBS volumes of machines are block devices: a sparse file per volume (`<state>/volumes/<volume-id>.img`, as
//! large as the volume), on a loop device while it is attached, which appears in the machine as an EBS volume
//! appears on a Nitro instance: `/dev/nvme<N>n1`, with the link udev makes from the controller's serial number,
//! `/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol<id without its dash>`. The device name the attach call
//! asked for (`/dev/sdf`) appears nowhere, as on Nitro: nodeup finds its volume by the volume id.
//!
//! The one guarantee that matters for etcd: a volume's file is on at most one loop device at a time. [`attach`]
//! refuses a file some loop device still holds (a previous holder's filesystem not yet released by the kernel),
//! and the runner tries again at its next look.

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A failure to make, attach or show a volume's block device, naming the file or device.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// `losetup` failed.
    #[error("`losetup {args}` failed: {stderr}")]
    Losetup { args: String, stderr: String },
    /// The volume's file is still on a loop device (its previous attachment not released yet).
    #[error("{} is still on {}: attached once that is released", file.display(), devices.join(", "))]
    Busy { file: PathBuf, devices: Vec<String> },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DiskError {
    let what = what.into();
    move |source| DiskError::Io { what, source }
}

/// The file that holds volume `volume_id`.
pub fn volume_file(volumes_dir: &Path, volume_id: &str) -> PathBuf {
    volumes_dir.join(format!("{volume_id}.img"))
}

/// The name of the link a Nitro instance's udev rules make for an EBS volume (its NVMe serial number is the
/// volume id without the dash).
pub fn nvme_link_name(volume_id: &str) -> String {
    format!(
        "nvme-Amazon_Elastic_Block_Store_{}",
        volume_id.replacen('-', "", 1)
    )
}

/// The lowest NVMe controller number not in `used`, from 1 (`nvme0` is the root volume on Nitro).
pub fn free_index(used: &BTreeSet<u32>) -> u32 {
    (1..).find(|n| !used.contains(n)).unwrap_or(1)
}

/// Makes the volume's file, `size_gib` GiB and sparse, unless it exists (a volume keeps its data).
pub fn ensure_file(path: &Path, size_gib: u64) -> Result<(), DiskError> {
    if path.exists() {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    }
    let file = std::fs::File::create_new(path)
        .map_err(io(format!("creating volume file {}", path.display())))?;
    file.set_len(size_gib.max(1) << 30)
        .map_err(io(format!("sizing volume file {}", path.display())))
}

fn losetup(args: &[&str]) -> Result<String, DiskError> {
    let out = Command::new("losetup")
        .args(args)
        .output()
        .map_err(io("running losetup (util-linux)"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(DiskError::Losetup {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// The loop devices holding `file` now.
pub fn loops_of(file: &Path) -> Result<Vec<String>, DiskError> {
    let listed = losetup(&["--associated", &file.display().to_string()])?;
    Ok(listed
        .lines()
        .filter_map(|l| l.split(':').next())
        .filter(|d| !d.is_empty())
        .map(str::to_string)
        .collect())
}

/// Puts `file` on a free loop device and returns the device; refuses a file already on one.
pub fn attach(file: &Path) -> Result<PathBuf, DiskError> {
    let devices = loops_of(file)?;
    if !devices.is_empty() {
        return Err(DiskError::Busy {
            file: file.to_path_buf(),
            devices,
        });
    }
    losetup(&["--find", "--show", &file.display().to_string()]).map(PathBuf::from)
}

/// Takes `device` off its file (at once when nothing holds it, else as soon as its last user lets go).
pub fn detach(device: &Path) -> Result<(), DiskError> {
    losetup(&["--detach", &device.display().to_string()]).map(|_| ())
}

/// A machine's `/dev`, as the host reaches it (through its init's root).
fn machine_dev(init_pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{init_pid}/root/dev"))
}

/// Shows `device` in the machine whose init is `init_pid` as NVMe controller `index` holding `volume_id`.
/// Returns the device's path inside the machine.
pub fn expose(
    init_pid: u32,
    device: &Path,
    index: u32,
    volume_id: &str,
) -> Result<String, DiskError> {
    let meta = std::fs::metadata(device).map_err(io(format!("reading {}", device.display())))?;
    if !meta.file_type().is_block_device() {
        return Err(DiskError::Io {
            what: format!("{} is not a block device", device.display()),
            source: std::io::Error::other("not a block device"),
        });
    }
    let dev = machine_dev(init_pid);
    let name = format!("nvme{index}n1");
    let node = dev.join(&name);
    let _ = std::fs::remove_file(&node);
    nix::sys::stat::mknod(
        &node,
        nix::sys::stat::SFlag::S_IFBLK,
        nix::sys::stat::Mode::from_bits_truncate(0o660),
        meta.rdev(),
    )
    .map_err(|e| DiskError::Io {
        what: format!("making {}", node.display()),
        source: std::io::Error::from(e),
    })?;
    let by_id = dev.join("disk/by-id");
    std::fs::create_dir_all(&by_id).map_err(io(format!("creating {}", by_id.display())))?;
    let link = by_id.join(nvme_link_name(volume_id));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(format!("../../{name}"), &link)
        .map_err(io(format!("linking {}", link.display())))?;
    Ok(format!("/dev/{name}"))
}

/// Takes NVMe controller `index` and `volume_id`'s link out of the machine (a machine already gone has none).
pub fn hide(init_pid: u32, index: u32, volume_id: &str) {
    let dev = machine_dev(init_pid);
    let _ = std::fs::remove_file(dev.join("disk/by-id").join(nvme_link_name(volume_id)));
    let _ = std::fs::remove_file(dev.join(format!("nvme{index}n1")));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_shows_as_nitro_shows_it() {
        assert_eq!(
            nvme_link_name("vol-0123456789abcdef0"),
            "nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0"
        );
        assert_eq!(free_index(&BTreeSet::new()), 1);
        assert_eq!(free_index(&BTreeSet::from([1, 2, 4])), 3);
        assert_eq!(
            volume_file(Path::new("/s/volumes"), "vol-1"),
            PathBuf::from("/s/volumes/vol-1.img")
        );
    }
}
