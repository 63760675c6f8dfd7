//! A group's extra EBS volumes (`spec.volumes`) and where nodeup mounts them (`spec.volumeMounts`), kops-shaped:
//! their defaults, bounds and rules, each error naming its field; called by [`crate::defaults`] and
//! [`crate::validate::validate`]. What a node is told is `crate::node::VolumeMount`.
//!
//! kops's two lists are kept apart rather than folded into one: a volume without a mount is attached and left
//! to the operator (as in kops), and an imported kops group maps field for field.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use crate::error::FieldError;
use crate::spec::{
    ClusterConfig, InstanceGroupSpec, Role, VolumeMountSpec, VolumeSpec, KIND_INSTANCE_GROUP,
};

/// At most this many extra volumes a group (AWS allows more block devices; a node needs few, and each is a
/// mount nodeup waits for).
pub const MAX_VOLUMES: usize = 8;
/// At most this many mounts (one per volume at most).
pub const MAX_VOLUME_MOUNTS: usize = MAX_VOLUMES;
/// At most this many format or mount options on one mount, each at most [`MAX_OPTION_CHARS`].
pub const MAX_OPTIONS: usize = 16;
pub const MAX_OPTION_CHARS: usize = 64;
/// A mount path's length.
pub const MAX_PATH_CHARS: usize = 256;
/// The filesystems nodeup makes on a blank device.
pub const FILESYSTEMS: [&str; 2] = ["ext4", "xfs"];
pub const DEFAULT_FILESYSTEM: &str = "ext4";
pub const DEFAULT_VOLUME_TYPE: &str = "gp3";
/// The EBS types an extra volume may have, with AWS's size bounds (GiB) for each.
pub const VOLUME_TYPES: [(&str, u32, u32); 7] = [
    ("gp3", 1, 16_384),
    ("gp2", 1, 16_384),
    ("io1", 4, 16_384),
    ("io2", 4, 65_536),
    ("st1", 125, 16_384),
    ("sc1", 125, 16_384),
    ("standard", 1, 1_024),
];

/// AWS's recommended device names for EBS data volumes on Linux, `/dev/sd[f-p]` (or their Xen names
/// `/dev/xvd[f-p]`): never a root device (`/dev/sda1`, `/dev/xvda`), never an instance store (`sdb`..`sde`).
static DEVICE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^/dev/(sd|xvd)([f-p])$").expect("static regex"));
/// A mount path: absolute, plain characters, no empty, `.` or `..` component, no trailing slash.
static MOUNT_PATH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(/[A-Za-z0-9_][A-Za-z0-9_.-]*)+$").expect("static regex"));
/// A format or mount option: one argument, no spaces or shell characters (nodeup passes it as one argument).
static OPTION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_=.,:+/-]+$").expect("static regex"));

/// What the node itself needs: a mount on, under, or above one of these would hide the OS, Ballast's files,
/// etcd's or the kubelet's state, or the baked container images.
pub const SYSTEM_PATHS: [&str; 24] = [
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/tmp",
    "/usr",
    "/opt/cni",
    "/var/lib/cilium",
    "/var/lib/containerd",
    "/var/lib/etcd",
    "/var/lib/kubelet",
    "/var/lib/kube-proxy",
    "/var/lib/nodeup",
    "/var/lib/ballast",
    "/var/log",
    "/var/run",
];

/// The letter of a device name (`/dev/sdg` and `/dev/xvdg` are the same device, `g`); `None` when not one of
/// the names [`DEVICE`] allows.
pub fn device_letter(device: &str) -> Option<char> {
    DEVICE
        .captures(device)
        .and_then(|c| c.get(2))
        .and_then(|m| m.as_str().chars().next())
}

/// Fills a group's volumes' and mounts' defaults: gp3, encrypted, deleted with the instance, ext4.
pub fn complete(spec: &mut InstanceGroupSpec) {
    for volume in &mut spec.volumes {
        volume
            .volume_type
            .get_or_insert_with(|| DEFAULT_VOLUME_TYPE.to_string());
        volume.encrypted.get_or_insert(true);
        volume.delete_on_termination.get_or_insert(true);
    }
    for mount in &mut spec.volume_mounts {
        mount
            .filesystem
            .get_or_insert_with(|| DEFAULT_FILESYSTEM.to_string());
    }
}

/// Checks every group's volumes and mounts; errors name the group and the field.
pub fn check(errors: &mut Vec<FieldError>, config: &ClusterConfig) {
    for ig in &config.instance_groups {
        let object = format!("{KIND_INSTANCE_GROUP}/{}", ig.metadata.name);
        let mut error = |path: String, message: String| {
            errors.push(FieldError::new(&object, &path, message));
        };
        check_group(&mut error, &ig.spec);
    }
}

fn check_group(error: &mut impl FnMut(String, String), spec: &InstanceGroupSpec) {
    if spec.role == Role::Bastion && !(spec.volumes.is_empty() && spec.volume_mounts.is_empty()) {
        let field = if spec.volumes.is_empty() {
            "spec.volumeMounts"
        } else {
            "spec.volumes"
        };
        error(
            field.into(),
            "a bastion holds no data and nodeup mounts nothing on it: remove volumes and volumeMounts".into(),
        );
        return;
    }
    if spec.volumes.len() > MAX_VOLUMES {
        error(
            "spec.volumes".into(),
            format!("{} volumes: at most {MAX_VOLUMES}", spec.volumes.len()),
        );
    }
    if spec.volume_mounts.len() > MAX_VOLUME_MOUNTS {
        error(
            "spec.volumeMounts".into(),
            format!(
                "{} mounts: at most {MAX_VOLUME_MOUNTS}",
                spec.volume_mounts.len()
            ),
        );
    }
    // Device letter -> the first volume's index.
    let mut devices: BTreeMap<char, usize> = BTreeMap::new();
    for (i, volume) in spec.volumes.iter().enumerate().take(MAX_VOLUMES) {
        if let Some(letter) = check_volume(error, &format!("spec.volumes[{i}]"), volume, spec.role)
        {
            if let Some(first) = devices.insert(letter, i) {
                devices.insert(letter, first);
                error(
                    format!("spec.volumes[{i}].device"),
                    format!(
                        "{:?} is the device of spec.volumes[{first}] already (sdX and xvdX are one device)",
                        volume.device
                    ),
                );
            }
        }
    }
    let mut mounted: BTreeMap<char, usize> = BTreeMap::new();
    let mut paths: Vec<(usize, &str)> = Vec::new();
    for (i, mount) in spec
        .volume_mounts
        .iter()
        .enumerate()
        .take(MAX_VOLUME_MOUNTS)
    {
        let at = format!("spec.volumeMounts[{i}]");
        match device_letter(&mount.device) {
            Some(letter) if devices.contains_key(&letter) => {
                if let Some(first) = mounted.insert(letter, i) {
                    mounted.insert(letter, first);
                    error(
                        format!("{at}.device"),
                        format!(
                            "{:?} is mounted by spec.volumeMounts[{first}] already: one mount per volume",
                            mount.device
                        ),
                    );
                }
            }
            _ => {
                let known: Vec<&str> = spec.volumes.iter().map(|v| v.device.as_str()).collect();
                error(
                    format!("{at}.device"),
                    format!(
                        "{:?} is not the device of any of spec.volumes (known: {}): a mount names one of the \
                         group's volumes",
                        mount.device,
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    ),
                );
            }
        }
        if check_mount(error, &at, mount) {
            paths.push((i, mount.path.as_str()));
        }
    }
    for (a, (i, path)) in paths.iter().enumerate() {
        for (j, other) in paths.iter().take(a) {
            if path == other {
                error(
                    format!("spec.volumeMounts[{i}].path"),
                    format!("{path:?} is spec.volumeMounts[{j}]'s path already"),
                );
            } else if nested(path, other) {
                error(
                    format!("spec.volumeMounts[{i}].path"),
                    format!(
                        "{path:?} and spec.volumeMounts[{j}]'s {other:?} are nested: one would hide the other"
                    ),
                );
            }
        }
    }
}

/// Whether one path is the other or under it.
fn nested(a: &str, b: &str) -> bool {
    let under =
        |x: &str, y: &str| x == y || x.strip_prefix(y).is_some_and(|rest| rest.starts_with('/'));
    under(a, b) || under(b, a)
}

/// Checks one volume; returns its device letter when the device is valid.
fn check_volume(
    error: &mut impl FnMut(String, String),
    at: &str,
    volume: &VolumeSpec,
    role: Role,
) -> Option<char> {
    let letter = device_letter(&volume.device);
    match letter {
        None => error(
            format!("{at}.device"),
            format!(
                "{:?} is not a data volume's device name: use /dev/sdf to /dev/sdp (or /dev/xvdf to /dev/xvdp); \
                 the root device and instance stores have other names",
                volume.device
            ),
        ),
        Some(letter) if role == Role::ControlPlane && device_letter(crate::etcd_volume::ETCD_VOLUME_DEVICE) == Some(letter) => {
            error(
                format!("{at}.device"),
                format!(
                    "{:?} is where a control-plane instance attaches its etcd member's volume ({}): use another",
                    volume.device,
                    crate::etcd_volume::ETCD_VOLUME_DEVICE
                ),
            )
        }
        Some(_) => {}
    }
    let kind = volume.volume_type.as_deref().unwrap_or(DEFAULT_VOLUME_TYPE);
    let bounds = VOLUME_TYPES.iter().find(|(t, _, _)| *t == kind);
    match bounds {
        None => error(
            format!("{at}.type"),
            format!(
                "{kind:?} is not an EBS volume type: use {}",
                VOLUME_TYPES.map(|(t, _, _)| t).join(", ")
            ),
        ),
        Some((_, min, max)) => match volume.size {
            None => error(
                format!("{at}.size"),
                "is required: the volume's size in GiB".into(),
            ),
            Some(size) if !(*min..=*max).contains(&size) => error(
                format!("{at}.size"),
                format!("{size} GiB is outside {kind}'s {min}..{max}"),
            ),
            Some(_) => {}
        },
    }
    if bounds.is_some() {
        for problem in crate::ebs::check(crate::ebs::Performance {
            volume_type: kind,
            size_gib: volume.size.unwrap_or_default(),
            iops: volume.iops,
            throughput: volume.throughput,
        }) {
            error(format!("{at}.{}", problem.field), problem.message);
        }
    }
    if volume.encrypted == Some(false) {
        error(
            format!("{at}.encrypted"),
            "false is refused: Ballast's volumes are encrypted at rest (remove it, or set true)"
                .into(),
        );
    }
    if let Some(key) = &volume.key {
        if !crate::kms::is_key(key) {
            error(
                format!("{at}.key"),
                format!("{key:?} is not {}", crate::kms::KEY_FORMS),
            );
        }
    }
    letter
}

/// Checks one mount's path, filesystem and options; true when its path is valid.
fn check_mount(error: &mut impl FnMut(String, String), at: &str, mount: &VolumeMountSpec) -> bool {
    let path = mount.path.as_str();
    let mut path_ok = false;
    if path.len() > MAX_PATH_CHARS {
        error(
            format!("{at}.path"),
            format!("{} characters: at most {MAX_PATH_CHARS}", path.len()),
        );
    } else if !MOUNT_PATH.is_match(path) {
        error(
            format!("{at}.path"),
            format!(
                "{path:?} is not a plain absolute path (letters, digits, `_`, `.`, `-`; no `.` or `..` part, no \
                 trailing slash, not `/`)"
            ),
        );
    } else if let Some(system) = SYSTEM_PATHS.iter().find(|s| nested(path, s)) {
        error(
            format!("{at}.path"),
            format!(
                "{path:?} is, holds or is under {system}, which the node itself needs: mount somewhere else \
                 (e.g. /mnt/NAME or /data/NAME)"
            ),
        );
    } else {
        path_ok = true;
    }
    if let Some(fs) = &mount.filesystem {
        if !FILESYSTEMS.contains(&fs.as_str()) {
            error(
                format!("{at}.filesystem"),
                format!(
                    "{fs:?} is not one nodeup makes: use {}",
                    FILESYSTEMS.join(" or ")
                ),
            );
        }
    }
    for (field, options) in [
        ("formatOptions", &mount.format_options),
        ("mountOptions", &mount.mount_options),
    ] {
        if options.len() > MAX_OPTIONS {
            error(
                format!("{at}.{field}"),
                format!("{} options: at most {MAX_OPTIONS}", options.len()),
            );
            continue;
        }
        for (k, option) in options.iter().enumerate() {
            let bad = option.len() > MAX_OPTION_CHARS
                || !OPTION.is_match(option)
                // `mount -o` takes a list of names; a leading dash would be read as another flag.
                || (field == "mountOptions" && option.starts_with('-'));
            if bad {
                error(
                    format!("{at}.{field}[{k}]"),
                    format!(
                        "{option:?} is not one option: at most {MAX_OPTION_CHARS} letters, digits and `_=.,:+/-`{}",
                        if field == "mountOptions" { ", not starting with `-`" } else { "" }
                    ),
                );
            }
        }
    }
    path_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_device_names_only() {
        assert_eq!(device_letter("/dev/sdf"), Some('f'));
        assert_eq!(device_letter("/dev/xvdp"), Some('p'));
        for bad in [
            "/dev/sda1",
            "/dev/xvda",
            "/dev/sdb",
            "/dev/sdq",
            "/dev/nvme1n1",
            "sdg",
            "/dev/sdg1",
        ] {
            assert_eq!(device_letter(bad), None, "{bad}");
        }
    }

    #[test]
    fn nesting_is_by_component() {
        assert!(nested("/var/lib/etcd", "/var/lib/etcd"));
        assert!(nested("/var/lib/etcd/x", "/var/lib/etcd"));
        assert!(nested("/var", "/var/lib/etcd"));
        assert!(!nested("/var/lib/etcd2", "/var/lib/etcd"));
        assert!(!nested("/data/a", "/data/b"));
    }
}
