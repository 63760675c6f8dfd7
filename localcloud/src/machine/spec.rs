//! A machine's OCI runtime spec (runc's `config.json`), rendered from what the machine is: pure, so its shape is
//! held by a golden file (`localcloud/tests/golden/machine-config.json`).
//!
//! A machine is what kind's node containers are: privileged (every capability the host grants, every device
//! allowed and the kernel log's node made, nothing masked or read-only), systemd as PID 1, its own PID, IPC, UTS,
//! mount, cgroup and network namespaces, `/sys/fs/cgroup` writable so systemd manages its own units' cgroups,
//! `/run` and `/tmp` on tmpfs as systemd expects, `/var` a bind of a directory of the host's own filesystem (as
//! kind's `/var` volume: containerd's overlay snapshotter cannot put its layers on the overlay root), and
//! `container=` set so systemd knows it runs in one. Its resource limits are the runner's (no `rlimits`: raising
//! one needs CAP_SYS_RESOURCE, which a host such as this project's CI may not grant).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// The init the baked image starts: systemd (Debian 12's path; the image recipe installs systemd).
pub const INIT: &str = "/lib/systemd/systemd";
/// What `container=` says to systemd and to anything reading PID 1's environment.
pub const CONTAINER: &str = "ballast-localcloud";
/// A host path bind-mounted into the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineBind {
    pub host: PathBuf,
    /// Absolute path inside the machine.
    pub inside: String,
    pub read_only: bool,
}

/// What a machine is, for its runtime spec.
#[derive(Debug, Clone)]
pub struct MachineSpec<'a> {
    /// Its hostname (an EC2 instance's `ip-10-0-1-10`).
    pub hostname: &'a str,
    /// The network namespace it joins (`/run/netns/...`), or `None` for a new one holding only loopback.
    pub network: Option<&'a Path>,
    /// Its cgroup, relative to each hierarchy's root (`/ballast/<cloud>/<instance>`): every process of the
    /// machine is in it, so a power cut kills them all.
    pub cgroup: &'a str,
    pub binds: &'a [MachineBind],
}

/// The OCI runtime spec of `spec`, its root the bundle's `rootfs`, granted `capabilities` (every one the host's
/// bounding set holds: a privileged machine).
pub fn runtime_spec(spec: &MachineSpec<'_>, capabilities: &[String]) -> Value {
    let mut namespaces = vec![
        json!({"type": "pid"}),
        json!({"type": "ipc"}),
        json!({"type": "uts"}),
        json!({"type": "mount"}),
        json!({"type": "cgroup"}),
    ];
    namespaces.push(match spec.network {
        Some(path) => json!({"type": "network", "path": path.display().to_string()}),
        None => json!({"type": "network"}),
    });
    let mut mounts = vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        mount(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", "rw"],
        ),
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", "rw"],
        ),
        mount("/run", "tmpfs", "tmpfs", &["nosuid", "nodev", "mode=755"]),
        mount("/tmp", "tmpfs", "tmpfs", &["nosuid", "nodev"]),
    ];
    for bind in spec.binds {
        let mut options = vec!["rbind", "rprivate"];
        if bind.read_only {
            options.push("ro");
        }
        mounts.push(json!({
            "destination": bind.inside,
            "type": "bind",
            "source": bind.host.display().to_string(),
            "options": options,
        }));
    }
    json!({
        "ociVersion": "1.2.0",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": [INIT],
            "env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                format!("container={CONTAINER}"),
            ],
            "cwd": "/",
            "capabilities": {
                "bounding": capabilities,
                "effective": capabilities,
                "permitted": capabilities,
            },
            "noNewPrivileges": false,
        },
        "root": {"path": "rootfs", "readonly": false},
        "hostname": spec.hostname,
        "mounts": mounts,
        "linux": {
            "namespaces": namespaces,
            "cgroupsPath": spec.cgroup,
            "resources": {"devices": [{"allow": true, "access": "rwm"}]},
            "devices": DEVICES.iter().map(|d| json!({
                "path": d.path, "type": "c", "major": d.major, "minor": d.minor,
                "fileMode": d.mode, "uid": 0, "gid": 0,
            })).collect::<Vec<_>>(),
        },
    })
}

/// A character device of the host's that a machine also has (runc makes `/dev/null` and the other defaults).
struct Device {
    path: &'static str,
    major: u32,
    minor: u32,
    mode: u32,
}

/// The devices a node's programs open beyond runc's defaults: the kernel log, which the kubelet's OOM watcher
/// reads and refuses to start without (kind's nodes have it as every privileged container does).
const DEVICES: [Device; 1] = [Device {
    path: "/dev/kmsg",
    major: 1,
    minor: 11,
    mode: 0o644,
}];

fn mount(destination: &str, kind: &str, source: &str, options: &[&str]) -> Value {
    json!({"destination": destination, "type": kind, "source": source, "options": options})
}

/// Linux's capability names by number (`capability.h`), for reading the host's bounding set.
pub const CAPABILITIES: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The capability names of a `CapBnd:` mask (hex, as `/proc/self/status` writes it); bits Linux has no name for
/// here are left out. `None` when it is not hex.
pub fn capabilities_of(mask_hex: &str) -> Option<Vec<String>> {
    let mask = u64::from_str_radix(mask_hex.trim(), 16).ok()?;
    Some(
        CAPABILITIES
            .iter()
            .enumerate()
            .filter(|(bit, _)| mask & (1u64 << bit) != 0)
            .map(|(_, name)| (*name).to_string())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounding_set_is_read_by_bit() {
        // This machine's: every capability but CAP_SYS_RESOURCE (bit 24).
        let caps = capabilities_of("000001fffeffffff").expect("hex");
        assert_eq!(caps.len(), 40);
        assert!(!caps.iter().any(|c| c == "CAP_SYS_RESOURCE"));
        assert!(caps.iter().any(|c| c == "CAP_SYS_ADMIN"));
        assert_eq!(capabilities_of("0").expect("hex"), Vec::<String>::new());
        assert_eq!(capabilities_of("zz"), None);
    }

    #[test]
    fn a_network_namespace_path_is_joined_and_binds_follow_the_base_mounts() {
        let caps = vec!["CAP_SYS_ADMIN".to_string()];
        let binds = [MachineBind {
            host: PathBuf::from("/var/lib/localcloud/volumes/vol-1"),
            inside: "/mnt/vol-1".into(),
            read_only: true,
        }];
        let spec = MachineSpec {
            hostname: "ip-10-0-1-10",
            network: Some(Path::new("/run/netns/m1")),
            cgroup: "/ballast/c1/i-1",
            binds: &binds,
        };
        let value = runtime_spec(&spec, &caps);
        let namespaces = value["linux"]["namespaces"].as_array().expect("namespaces");
        assert_eq!(
            namespaces.last(),
            Some(&json!({"type": "network", "path": "/run/netns/m1"}))
        );
        let mounts = value["mounts"].as_array().expect("mounts");
        assert_eq!(
            mounts.last().map(|m| &m["options"]),
            Some(&json!(["rbind", "rprivate", "ro"]))
        );
        assert_eq!(
            value["process"]["capabilities"]["bounding"],
            json!(["CAP_SYS_ADMIN"])
        );
    }
}
