//! Local-cloud machines (`localcloud::machine`): the Debian 12 image booted by runc (the one built here) with
//! systemd as PID 1 in its own namespaces and cgroup over an overlay root; a graceful stop halts systemd, a power
//! cut kills every process of the machine at once, and neither leaves a process, a cgroup, runc state or a mount.
//!
//! Needs root, the Go builds (`tools/install-deps`: runc, and for the local image every component) and
//! debootstrap on a cold cache; fails, never skips.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ballast_e2e::go_builds::built;
use ballast_e2e::image::{base_rootfs_dir, require_root};
use localcloud::machine::{Machine, MachineError, MachineRuntime, MachineSpec, Stopped};

/// The machines' cgroups live under this, one directory per test process.
fn cgroup_parent() -> String {
    format!("/ballast-e2e/{}", std::process::id())
}

/// Removes the test's cgroup parent (runc makes the parents of a machine's cgroup and leaves them) from every
/// hierarchy, once its machines are gone.
struct CgroupParent;

impl Drop for CgroupParent {
    fn drop(&mut self) {
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = std::fs::remove_dir(
                hierarchy
                    .path()
                    .join(cgroup_parent().trim_start_matches('/')),
            );
            // The shared parent goes once no test process uses it.
            let _ = std::fs::remove_dir(hierarchy.path().join("ballast-e2e"));
        }
    }
}

/// Polls `condition` until it holds, naming `what` when `deadline` passes.
fn wait_for(deadline: Duration, what: &str, mut condition: impl FnMut() -> Option<String>) {
    let started = Instant::now();
    loop {
        let last = match condition() {
            None => return,
            Some(state) => state,
        };
        assert!(
            started.elapsed() < deadline,
            "{what}: not within {deadline:?} (last: {last})"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn runtime(state: &Path) -> MachineRuntime {
    let runc = built("runc").join("runc");
    MachineRuntime::new(&runc, state).unwrap_or_else(|e| panic!("{e}"))
}

fn output(runtime: &MachineRuntime, machine: &Machine, argv: &[&str]) -> String {
    let out = runtime
        .exec(machine, argv)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "{argv:?} in {}: {}",
        machine.id,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The machine's cgroup directories (one per v1 hierarchy holding it, or the v2 one).
fn cgroup_dirs(cgroup: &str) -> Vec<PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup")
        .expect("/sys/fs/cgroup")
        .flatten()
        .map(|e| e.path().join(cgroup.trim_start_matches('/')))
        .filter(|p| p.is_dir())
        .collect()
}

/// The host PIDs in the machine's cgroup (its pids hierarchy's, or the first that has one).
fn pids_of(cgroup: &str) -> Vec<i32> {
    let mut pids: Vec<i32> = cgroup_dirs(cgroup)
        .iter()
        .flat_map(|d| {
            std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn boot(runtime: &MachineRuntime, dir: &Path, id: &str, cgroup: &str) -> Machine {
    let machine = boot_image(runtime, dir, id, cgroup, base_rootfs_dir());
    wait_for(
        Duration::from_secs(60),
        "systemd running in the machine",
        || {
            let out = runtime
                .exec(&machine, &["/bin/systemctl", "is-system-running"])
                .ok()?;
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (state != "running").then_some(state)
        },
    );
    machine
}

fn boot_image(
    runtime: &MachineRuntime,
    dir: &Path,
    id: &str,
    cgroup: &str,
    image: &Path,
) -> Machine {
    let spec = MachineSpec {
        hostname: "ip-10-0-1-10",
        network: None,
        cgroup,
        binds: &[],
    };
    runtime
        .boot(id, &dir.join(id), image, &spec)
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_machine_boots_systemd_in_its_own_namespaces_and_a_power_cut_leaves_nothing() {
    require_root();
    let _parent = CgroupParent;
    let state = tempfile::tempdir().expect("runc state");
    let dirs = tempfile::tempdir().expect("machine dirs");
    let runtime = runtime(state.path());
    let cgroup = format!("{}/cut", cgroup_parent());
    let mut machine = boot(&runtime, dirs.path(), "cut", &cgroup);

    // PID 1 is systemd, the hostname is the machine's, and the machine sees its own processes only.
    assert_eq!(
        output(&runtime, &machine, &["/bin/cat", "/proc/1/comm"]),
        "systemd"
    );
    assert_eq!(
        output(&runtime, &machine, &["/bin/hostname"]),
        "ip-10-0-1-10"
    );
    // What the machine writes lands in its own layer, never in the image.
    output(
        &runtime,
        &machine,
        &["/bin/sh", "-c", "echo written > /root/marker"],
    );
    assert!(dirs.path().join("cut/upper/root/marker").is_file());
    assert!(!base_rootfs_dir().join("root/marker").exists());
    // A process that leaves its parent (as containerd's shims do) stays in the machine's cgroup.
    output(
        &runtime,
        &machine,
        &[
            "/bin/sh",
            "-c",
            "setsid /bin/sleep 1000 < /dev/null > /dev/null 2>&1 &",
        ],
    );
    let pids = pids_of(&cgroup);
    assert!(
        pids.len() >= 3,
        "systemd, journald and the sleeper: {pids:?}"
    );

    machine.power_cut().unwrap_or_else(|e| panic!("{e}"));
    for pid in &pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} of the machine outlived its power cut"
        );
    }
    assert_eq!(
        cgroup_dirs(&cgroup),
        Vec::<PathBuf>::new(),
        "the machine's cgroup is left"
    );
    assert!(!machine.is_running());
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .contains(&machine.root().display().to_string()),
        "the machine's root is still mounted"
    );
    // The root volume stays: what the machine wrote is there for a replacement.
    assert!(dirs.path().join("cut/upper/root/marker").is_file());
    let _ = std::fs::remove_dir(format!(
        "/sys/fs/cgroup/pids/ballast-e2e/{}",
        std::process::id()
    ));
}

#[test]
fn a_graceful_stop_halts_systemd_and_leaves_nothing() {
    require_root();
    let _parent = CgroupParent;
    let state = tempfile::tempdir().expect("runc state");
    let dirs = tempfile::tempdir().expect("machine dirs");
    let runtime = runtime(state.path());
    let cgroup = format!("{}/halt", cgroup_parent());
    let mut machine = boot(&runtime, dirs.path(), "halt", &cgroup);
    let pids = pids_of(&cgroup);
    assert!(!pids.is_empty());

    let stopped = machine
        .stop(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        stopped,
        Stopped::Halted,
        "{}",
        std::fs::read_to_string(machine.console()).unwrap_or_default()
    );
    for pid in &pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} outlived the stop: {:?} {}",
            std::fs::read_to_string(format!("/proc/{pid}/cmdline")),
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .unwrap_or_default()
                .lines()
                .take(8)
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    assert_eq!(cgroup_dirs(&cgroup), Vec::<PathBuf>::new());
    assert!(!machine.is_running());
}

#[test]
fn a_host_without_runc_is_named() {
    require_root();
    let state = tempfile::tempdir().expect("runc state");
    let missing = Path::new("/nonexistent/ballast/runc");
    match MachineRuntime::new(missing, state.path()) {
        Err(MachineError::HostLacks { missing: what }) => {
            assert!(what.contains("/nonexistent/ballast/runc"), "{what}");
            assert!(what.contains("tools/build-go"), "{what}");
        }
        other => panic!("expected HostLacks, got {other:?}"),
    }
}

/// The local cloud's image (the AMI recipe's bake of what was built here) boots as a machine: systemd starts the
/// image's own units, nodeup's among them, containerd finds the images the bake put in its store, and the
/// Kubernetes programs in it are the release's. (No VPC network or IMDS yet: nodeup waits for its metadata.)
#[test]
fn the_local_clouds_image_boots_and_starts_its_units() {
    require_root();
    let _parent = CgroupParent;
    let minor = ballast_state::defaults::DEFAULT_KUBERNETES_VERSION
        .rsplit_once('.')
        .map(|(minor, _)| minor)
        .expect("a minor");
    let image = ballast_e2e::local_ami::baked(minor);
    let state = tempfile::tempdir().expect("runc state");
    let dirs = tempfile::tempdir().expect("machine dirs");
    let runtime = runtime(state.path());
    let cgroup = format!("{}/image", cgroup_parent());
    let mut machine = boot_image(&runtime, dirs.path(), "image", &cgroup, &image);
    wait_for(
        Duration::from_secs(90),
        "containerd active in the machine",
        || {
            let out = runtime
                .exec(
                    &machine,
                    &["/bin/systemctl", "is-active", "containerd.service"],
                )
                .ok()?;
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (state != "active").then_some(state)
        },
    );
    // nodeup was started by the image's unit (it waits for instance metadata this machine has none of yet).
    let started = output(
        &runtime,
        &machine,
        &[
            "/bin/systemctl",
            "show",
            "--value",
            "-p",
            "ExecMainStartTimestampMonotonic",
            "nodeup.service",
        ],
    );
    assert_ne!(started, "0", "nodeup.service never started");
    // The images the bake put in the store, by tag, through the machine's own containerd.
    let listed = output(
        &runtime,
        &machine,
        &[
            "/usr/local/bin/ctr",
            "--namespace",
            "k8s.io",
            "images",
            "ls",
            "-q",
        ],
    );
    let record = std::fs::read_to_string(image.join("etc/ballast/components.yaml"))
        .expect("components.yaml");
    let version = record
        .lines()
        .find_map(|l| l.strip_prefix("kubernetes: "))
        .map(|v| v.trim_matches('"').to_string())
        .expect("components.yaml names the Kubernetes version");
    for program in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
    ] {
        let reference = format!("registry.k8s.io/{program}:v{version}");
        assert!(
            listed.lines().any(|l| l == reference),
            "{reference} is not in the machine's containerd:\n{listed}"
        );
    }
    assert!(
        listed.lines().any(|l| l == "registry.k8s.io/pause:3.10.1"),
        "{listed}"
    );
    let kubelet = output(&runtime, &machine, &["/usr/local/bin/kubelet", "--version"]);
    assert!(
        kubelet.contains(&format!("Kubernetes v{version}")),
        "{kubelet}"
    );
    machine.power_cut().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cgroup_dirs(&cgroup), Vec::<PathBuf>::new());
}
