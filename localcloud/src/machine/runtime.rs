//! Booting, entering, stopping and power-cutting machines: runc over an overlay root per machine.
//!
//! A machine's directory holds its bundle: `config.json` (its runtime spec, [`super::spec`]), `rootfs/` (an overlay
//! of the image, read-only below, and the machine's own `upper/` and `work/` above: an EBS root volume made from a
//! snapshot), `var/` (the image's `/var`, copied at the first boot and bound over the overlay's: overlayfs takes no
//! upper layer on an overlay, so containerd's snapshots need a `/var` of the host's own filesystem, as kind gives
//! its nodes a `/var` volume), `modules/` (an empty `/lib/modules` for a host without one), and `console.log` (what systemd and anything else writes to the machine's stdout and stderr). Its
//! runc state lives under the runtime's own `--root`, never the host's default, so two local clouds never see each
//! other's machines.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::spec::{capabilities_of, runtime_spec, MachineBind, MachineSpec};

/// Where the kernel's modules are, on the host and in a machine.
const KERNEL_MODULES: &str = "/lib/modules";
/// SIGRTMIN+3: systemd's "halt" signal (`systemd(1)`): stop every unit, then exit.
const SIGNAL_HALT: &str = "37";
/// How often a start or stop polls the machine's state.
const POLL: Duration = Duration::from_millis(100);
/// How long runc may take to start a machine's init.
const START: Duration = Duration::from_secs(30);

/// A failure to boot, enter or stop a machine, naming what failed and what to do.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// The host lacks something every machine needs.
    #[error("this host cannot run local-cloud machines: {missing}")]
    HostLacks { missing: String },
    /// runc refused or failed.
    #[error("runc {action} of machine {machine} failed: {stderr}")]
    Runc {
        action: &'static str,
        machine: String,
        stderr: String,
    },
    /// The machine's root could not be mounted.
    #[error("mounting machine {machine}'s root at {root}: {source}")]
    Root {
        machine: String,
        root: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Other I/O, naming what.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> MachineError {
    let what = what.into();
    move |source| MachineError::Io { what, source }
}

/// How a machine ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// systemd halted within the grace period.
    Halted,
    /// The grace period passed: the machine's cgroup was killed.
    PowerCut,
}

/// Runs machines with one runc, keeping their runc state under `state`.
#[derive(Debug, Clone)]
pub struct MachineRuntime {
    runc: PathBuf,
    state: PathBuf,
    capabilities: Vec<String>,
}

/// A booted machine: its id (the runc container's) and its directory. Its `runc run` is this process's child
/// (runc reaps the machine's init, so no machine leaves a zombie behind); dropping a machine that still runs
/// cuts its power, so none outlives its owner.
#[derive(Debug)]
pub struct Machine {
    pub id: String,
    pub dir: PathBuf,
    runc: Option<std::process::Child>,
    runtime: MachineRuntime,
}

impl Machine {
    /// The machine's root as the host sees it (the mounted overlay).
    pub fn root(&self) -> PathBuf {
        self.dir.join("rootfs")
    }

    /// What the machine wrote to its stdout and stderr.
    pub fn console(&self) -> PathBuf {
        self.dir.join("console.log")
    }

    /// Whether the machine still runs (its `runc run` has not exited).
    pub fn is_running(&mut self) -> bool {
        match &mut self.runc {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Waits up to `limit` for the machine to end; true when it has.
    fn ended_within(&mut self, limit: Duration) -> bool {
        let started = Instant::now();
        loop {
            if !self.is_running() {
                return true;
            }
            if started.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(POLL);
        }
    }

    /// A graceful stop: systemd is told to halt (every unit stopped in order, as `shutdown -h`); after `grace`
    /// the machine's power is cut. Either way nothing of it is left: its processes, its runc state, its root's
    /// mount. Its directory (the upper layer: the root volume) stays.
    pub fn stop(&mut self, grace: Duration) -> Result<Stopped, MachineError> {
        if self.is_running() {
            // The machine may have just ended: a failed kill is judged by whether it ends.
            let _ = self
                .runtime
                .runc_ok("kill", &self.id, &["kill", &self.id, SIGNAL_HALT]);
            if self.ended_within(grace) {
                self.remove()?;
                return Ok(Stopped::Halted);
            }
        }
        self.power_cut()?;
        Ok(Stopped::PowerCut)
    }

    /// The PID (on the host) of the machine's init, while it runs.
    pub fn init_pid(&self) -> Option<u32> {
        let out = self
            .runtime
            .runc()
            .args(["state", &self.id])
            .output()
            .ok()?;
        let state: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        state["pid"]
            .as_u64()
            .and_then(|pid| u32::try_from(pid).ok())
            .filter(|pid| *pid != 0)
    }

    /// SIGKILL to every process of the machine at once, without waiting: the first half of a power cut, for
    /// cutting several machines at the same moment ([`Machine::power_cut`] then finishes each).
    pub fn kill_all(&mut self) {
        if self.is_running() {
            let _ = self
                .runtime
                .runc_ok("kill", &self.id, &["kill", "--all", &self.id, "KILL"]);
        }
    }

    /// A power cut: every process of the machine killed at once (SIGKILL to its whole cgroup, shims and whatever
    /// else it started included), then its runc state and its root's mount removed.
    pub fn power_cut(&mut self) -> Result<(), MachineError> {
        if self.is_running() {
            let _ = self
                .runtime
                .runc_ok("kill", &self.id, &["kill", "--all", &self.id, "KILL"]);
        }
        self.remove()
    }

    fn remove(&mut self) -> Result<(), MachineError> {
        if let Some(mut child) = self.runc.take() {
            // Killed above, or halted: runc exits once the machine's init has.
            child
                .wait()
                .map_err(io(format!("waiting for machine {}'s runc", self.id)))?;
        }
        // `delete --force` kills whatever is left in the cgroup and removes it; runc run usually did already.
        let out = self
            .runtime
            .runc()
            .args(["delete", "--force", &self.id])
            .output()
            .map_err(io(format!(
                "running {} delete",
                self.runtime.runc.display()
            )))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && !stderr.contains("does not exist") {
            return Err(MachineError::Runc {
                action: "delete",
                machine: self.id.clone(),
                stderr: stderr.trim().to_string(),
            });
        }
        unmount(&self.root())
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if self.runc.is_some() {
            if let Err(e) = self.power_cut() {
                tracing::warn!(machine = %self.id, "cutting the power of a dropped machine: {e}");
            }
        }
    }
}

impl MachineRuntime {
    /// A runtime running `runc`, its state under `state`. Fails, naming what is missing, when this host cannot
    /// run machines: not root, no such runc, no overlay filesystem, no cgroup hierarchy.
    pub fn new(runc: &Path, state: &Path) -> Result<MachineRuntime, MachineError> {
        let lacks = |missing: String| Err(MachineError::HostLacks { missing });
        if !nix::unistd::geteuid().is_root() {
            return lacks(
                "root: machines mount their roots and make namespaces (run as root)".into(),
            );
        }
        if !runc.is_file() {
            return lacks(format!(
                "runc at {}: build it with tools/build-go (go/runc) or install Debian's runc",
                runc.display()
            ));
        }
        let filesystems = std::fs::read_to_string("/proc/filesystems")
            .map_err(io("reading /proc/filesystems"))?;
        if !filesystems
            .lines()
            .any(|l| l.split_whitespace().last() == Some("overlay"))
        {
            return lacks("the overlay filesystem (modprobe overlay): a machine's root is an overlay of the image".into());
        }
        if !Path::new("/sys/fs/cgroup").is_dir()
            || std::fs::read_dir("/sys/fs/cgroup").map_or(true, |mut d| d.next().is_none())
        {
            return lacks("a cgroup hierarchy at /sys/fs/cgroup: every process of a machine lives in its cgroup".into());
        }
        let status = std::fs::read_to_string("/proc/self/status")
            .map_err(io("reading /proc/self/status"))?;
        let capabilities = status
            .lines()
            .find_map(|l| l.strip_prefix("CapBnd:"))
            .and_then(capabilities_of)
            .ok_or_else(|| MachineError::HostLacks {
                missing: "a readable capability bounding set (CapBnd in /proc/self/status)".into(),
            })?;
        std::fs::create_dir_all(state).map_err(io(format!("creating {}", state.display())))?;
        Ok(MachineRuntime {
            runc: runc.to_path_buf(),
            state: state.to_path_buf(),
            capabilities,
        })
    }

    fn runc(&self) -> Command {
        let mut command = Command::new(&self.runc);
        command.arg("--root").arg(&self.state).stdin(Stdio::null());
        command
    }

    fn runc_ok(
        &self,
        action: &'static str,
        machine: &str,
        args: &[&str],
    ) -> Result<Output, MachineError> {
        let out = self
            .runc()
            .args(args)
            .output()
            .map_err(io(format!("running {} {action}", self.runc.display())))?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(MachineError::Runc {
                action,
                machine: machine.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }

    /// Boots machine `id` in `dir` from the image root `image` (never written: the machine writes to its own
    /// upper layer). A machine gets every capability this host grants.
    pub fn boot(
        &self,
        id: &str,
        dir: &Path,
        image: &Path,
        spec: &MachineSpec<'_>,
    ) -> Result<Machine, MachineError> {
        let root = dir.join("rootfs");
        for sub in ["upper", "work", "rootfs"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(io(format!("creating {}", dir.join(sub).display())))?;
        }
        let var = first_boot_var(dir, image)?;
        let mut binds = spec.binds.to_vec();
        binds.push(MachineBind {
            host: var,
            inside: "/var".into(),
            read_only: false,
        });
        // The running kernel's modules, read-only, as kind's nodes see them (kube-proxy mounts the directory):
        // the host's, or an empty directory on a host whose kernel has its modules built in.
        let modules = if Path::new(KERNEL_MODULES).is_dir() {
            PathBuf::from(KERNEL_MODULES)
        } else {
            let empty = dir.join("modules");
            std::fs::create_dir_all(&empty).map_err(io(format!("creating {}", empty.display())))?;
            empty
        };
        binds.push(MachineBind {
            host: modules,
            inside: KERNEL_MODULES.into(),
            read_only: true,
        });
        let spec = &MachineSpec {
            binds: &binds,
            ..spec.clone()
        };
        if !is_mount_point(&root) {
            let options = format!(
                "lowerdir={},upperdir={},workdir={}",
                image.display(),
                dir.join("upper").display(),
                dir.join("work").display()
            );
            nix::mount::mount(
                Some("overlay"),
                &root,
                Some("overlay"),
                nix::mount::MsFlags::empty(),
                Some(options.as_str()),
            )
            .map_err(|e| MachineError::Root {
                machine: id.to_string(),
                root: root.clone(),
                source: std::io::Error::from(e),
            })?;
        }
        // Nothing may stay mounted when the machine does not start.
        let prepared = (|| -> Result<(File, File), MachineError> {
            // As cloud-init does on an instance's first boot: the machine's name, which systemd sets at boot.
            std::fs::write(root.join("etc/hostname"), format!("{}\n", spec.hostname))
                .map_err(io(format!("writing machine {id}'s /etc/hostname")))?;
            let config = serde_json::to_vec_pretty(&runtime_spec(spec, &self.capabilities))
                .map_err(|e| MachineError::Io {
                    what: "rendering the runtime spec".into(),
                    source: std::io::Error::other(e),
                })?;
            std::fs::write(dir.join("config.json"), config).map_err(io("writing config.json"))?;
            let console = File::options()
                .create(true)
                .append(true)
                .open(dir.join("console.log"))
                .map_err(io(format!("opening {}", dir.join("console.log").display())))?;
            let console_err = console.try_clone().map_err(io("duplicating the console"))?;
            Ok((console, console_err))
        })();
        let (console, console_err) = match prepared {
            Ok(console) => console,
            Err(e) => {
                let _ = unmount(&root);
                return Err(e);
            }
        };
        // Not detached: runc stays this process's child and reaps the machine's init when it ends.
        let child = self
            .runc()
            .args(["run", "--bundle"])
            .arg(dir)
            .arg(id)
            .stdout(console)
            .stderr(console_err)
            .spawn()
            .map_err(|source| {
                let _ = unmount(&root);
                MachineError::Io {
                    what: format!("running {} run", self.runc.display()),
                    source,
                }
            })?;
        let mut machine = Machine {
            id: id.to_string(),
            dir: dir.to_path_buf(),
            runc: Some(child),
            runtime: self.clone(),
        };
        // Running once runc knows it as running (or it ended: its console says why).
        let started = Instant::now();
        loop {
            if !machine.is_running() {
                let tail = std::fs::read_to_string(machine.console()).unwrap_or_default();
                let _ = machine.remove();
                return Err(MachineError::Runc {
                    action: "run",
                    machine: id.to_string(),
                    stderr: tail.lines().rev().take(5).collect::<Vec<_>>().join(" | "),
                });
            }
            let state = self.runc().args(["state", id]).output();
            if let Ok(out) = state {
                let state: serde_json::Value =
                    serde_json::from_slice(&out.stdout).unwrap_or_default();
                if state["status"].as_str() == Some("running") {
                    return Ok(machine);
                }
            }
            if started.elapsed() > START {
                machine.power_cut()?;
                return Err(MachineError::Runc {
                    action: "run",
                    machine: id.to_string(),
                    stderr: format!("not running within {START:?}"),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Runs `argv` in the machine, as `runc exec` (its namespaces, root and cgroup), and returns its output.
    pub fn exec(&self, machine: &Machine, argv: &[&str]) -> Result<Output, MachineError> {
        self.runc()
            .args(["exec", &machine.id])
            .args(argv)
            .output()
            .map_err(io(format!("running {} exec", self.runc.display())))
    }
}

/// Whether `path` is a mount point (`/proc/self/mountinfo` lists it).
fn is_mount_point(path: &Path) -> bool {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    crate::volumes::mounts_under(&path).contains(&path)
}

fn unmount(root: &Path) -> Result<(), MachineError> {
    if !is_mount_point(root) {
        return Ok(());
    }
    nix::mount::umount2(root, nix::mount::MntFlags::MNT_DETACH).map_err(|e| MachineError::Io {
        what: format!("unmounting {}", root.display()),
        source: std::io::Error::from(e),
    })
}

/// The machine's `/var` (`dir/var`): on its first boot a copy of the image's (`cp -a`, reflinked where the
/// filesystem can), made under another name and renamed, so a boot cut short leaves no half copy behind; kept
/// from then on, as the root volume is.
fn first_boot_var(dir: &Path, image: &Path) -> Result<PathBuf, MachineError> {
    let var = dir.join("var");
    if var.is_dir() {
        return Ok(var);
    }
    let partial = dir.join("var.partial");
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(io(format!("removing {}", partial.display())))?;
    }
    let from = image.join("var");
    let out = Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(&from)
        .arg(&partial)
        .output()
        .map_err(io("running cp"))?;
    if !out.status.success() {
        return Err(MachineError::Io {
            what: format!("copying {} to {}", from.display(), partial.display()),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        });
    }
    std::fs::rename(&partial, &var).map_err(io(format!("renaming {}", partial.display())))?;
    Ok(var)
}
