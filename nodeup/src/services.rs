//! Step 5 of nodeup: start or restart the services whose files changed, through one seam.
//!
//! [`ServiceManager`] has two implementations: [`Systemd`] on a real instance (`systemctl daemon-reload`,
//! `enable`, `start` or `restart`) and [`Supervisor`], which runs the same command lines as child processes
//! (the local cloud has no systemd). Which services to touch is decided once, purely ([`decide`]): a service
//! restarts when one of its files was written, starts when it is not running, and is left alone otherwise. A
//! service whose binary is not on the host is reported `Absent`, never started or pretended to run.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ballast_state::report::{ServiceReport, ServiceState};

use crate::model::ServiceDef;
use crate::write::WriteOutcome;

/// How services are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServiceMode {
    /// systemd when it is running and `--root` is `/`, else the built-in supervisor.
    Auto,
    Systemd,
    Supervisor,
}

impl ServiceMode {
    /// Resolves `Auto` the way `sd_booted()` does (`/run/systemd/system` exists).
    pub fn resolve(self, root: &Path) -> ServiceMode {
        match self {
            ServiceMode::Auto
                if root == Path::new("/") && Path::new("/run/systemd/system").is_dir() =>
            {
                ServiceMode::Systemd
            }
            ServiceMode::Auto => ServiceMode::Supervisor,
            other => other,
        }
    }
}

/// What to do with one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub service: ServiceDef,
    /// One of its files was written by this run.
    pub changed: bool,
}

/// Pure: which services changed, and whether systemd must reload its units.
pub fn decide(services: &[ServiceDef], written: &WriteOutcome) -> (Vec<Decision>, bool) {
    let decisions = services
        .iter()
        .map(|s| Decision {
            service: s.clone(),
            changed: s.triggers.iter().any(|t| written.changed(t)),
        })
        .collect();
    let reload = written
        .written
        .iter()
        .any(|f| f.path.starts_with("/etc/systemd/system/"));
    (decisions, reload)
}

/// Whether a service's binary is on this host (an executable file).
pub fn binary_present(argv: &[String]) -> bool {
    argv.first()
        .and_then(|b| std::fs::metadata(b).ok())
        .is_some_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The seam: systemd or the supervisor.
pub trait ServiceManager {
    /// Applies the decisions, in order; never fails as a whole: each service says how it went.
    fn apply(&mut self, decisions: &[Decision], reload: bool) -> Vec<ServiceReport>;
    /// Stops what this manager started itself (the supervisor's children); systemd's services stay.
    fn shutdown(&mut self);
    /// Called periodically while nodeup stays up: restarts children that died (like `Restart=always`).
    fn tick(&mut self) {}
}

fn report(name: &str, state: ServiceState, detail: Option<String>) -> ServiceReport {
    ServiceReport {
        name: name.to_string(),
        state,
        detail,
    }
}

fn absent(s: &ServiceDef) -> ServiceReport {
    report(
        &s.name,
        ServiceState::Absent,
        Some(format!(
            "{} is not on this host",
            s.argv.first().map(String::as_str).unwrap_or("?")
        )),
    )
}

/// systemd, through `systemctl`.
#[derive(Debug, Default)]
pub struct Systemd;

impl Systemd {
    fn systemctl(args: &[&str]) -> Result<String, String> {
        let out = Command::new("systemctl")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running systemctl {}: {e}", args.join(" ")))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(format!(
                "systemctl {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

impl ServiceManager for Systemd {
    fn apply(&mut self, decisions: &[Decision], reload: bool) -> Vec<ServiceReport> {
        let reloaded = if reload {
            Self::systemctl(&["daemon-reload"]).map(|_| ())
        } else {
            Ok(())
        };
        decisions
            .iter()
            .map(|d| {
                let s = &d.service;
                if !binary_present(&s.argv) {
                    return absent(s);
                }
                if let Err(e) = &reloaded {
                    return report(&s.name, ServiceState::Failed, Some(e.clone()));
                }
                let active = Self::systemctl(&["is-active", "--quiet", &s.unit]).is_ok();
                let result =
                    Self::systemctl(&["enable", "--quiet", &s.unit]).and_then(|_| {
                        match (d.changed, active) {
                            (true, true) => Self::systemctl(&["restart", &s.unit])
                                .map(|_| ServiceState::Restarted),
                            (_, false) => {
                                Self::systemctl(&["start", &s.unit]).map(|_| ServiceState::Started)
                            }
                            (false, true) => Ok(ServiceState::Unchanged),
                        }
                    });
                match result {
                    Ok(state) => report(&s.name, state, None),
                    Err(e) => report(&s.name, ServiceState::Failed, Some(e)),
                }
            })
            .collect()
    }

    fn shutdown(&mut self) {}
}

/// The built-in supervisor: each service's command line as a child process of nodeup, its output appended to
/// `ROOT/var/log/nodeup/<name>.log`.
#[derive(Debug)]
pub struct Supervisor {
    log_dir: PathBuf,
    children: BTreeMap<String, Supervised>,
}

#[derive(Debug)]
struct Supervised {
    argv: Vec<String>,
    child: Option<Child>,
    last_start: Instant,
}

impl Supervisor {
    pub fn new(root: &Path) -> Self {
        Supervisor {
            log_dir: crate::write::under_root(root, "/var/log/nodeup"),
            children: BTreeMap::new(),
        }
    }

    fn spawn(&self, name: &str, argv: &[String]) -> Result<Child, String> {
        std::fs::create_dir_all(&self.log_dir)
            .map_err(|e| format!("creating {}: {e}", self.log_dir.display()))?;
        let log_path = self.log_dir.join(format!("{name}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("opening {}: {e}", log_path.display()))?;
        let err_log = log
            .try_clone()
            .map_err(|e| format!("opening {}: {e}", log_path.display()))?;
        let (bin, args) = argv.split_first().ok_or("an empty command line")?;
        Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", argv.join(" ")))
    }

    /// PIDs of the running children, by service name.
    pub fn pids(&mut self) -> BTreeMap<String, u32> {
        self.children
            .iter_mut()
            .filter_map(|(name, s)| {
                let child = s.child.as_mut()?;
                matches!(child.try_wait(), Ok(None)).then(|| (name.clone(), child.id()))
            })
            .collect()
    }
}

/// SIGTERM, up to 5 s, then SIGKILL; reaps the child.
fn stop(child: &mut Child) {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl ServiceManager for Supervisor {
    fn apply(&mut self, decisions: &[Decision], _reload: bool) -> Vec<ServiceReport> {
        decisions
            .iter()
            .map(|d| {
                let s = &d.service;
                if !binary_present(&s.argv) {
                    if let Some(mut old) = self.children.remove(&s.name) {
                        if let Some(c) = old.child.as_mut() {
                            stop(c);
                        }
                    }
                    return absent(s);
                }
                let running = self
                    .children
                    .get_mut(&s.name)
                    .and_then(|c| c.child.as_mut())
                    .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
                let same_argv = self.children.get(&s.name).is_some_and(|c| c.argv == s.argv);
                if running && !d.changed && same_argv {
                    return report(&s.name, ServiceState::Unchanged, None);
                }
                if let Some(mut old) = self.children.remove(&s.name) {
                    if let Some(c) = old.child.as_mut() {
                        stop(c);
                    }
                }
                match self.spawn(&s.name, &s.argv) {
                    Ok(child) => {
                        self.children.insert(
                            s.name.clone(),
                            Supervised {
                                argv: s.argv.clone(),
                                child: Some(child),
                                last_start: Instant::now(),
                            },
                        );
                        let state = if running {
                            ServiceState::Restarted
                        } else {
                            ServiceState::Started
                        };
                        report(&s.name, state, None)
                    }
                    Err(e) => report(&s.name, ServiceState::Failed, Some(e)),
                }
            })
            .collect()
    }

    fn shutdown(&mut self) {
        for (name, s) in self.children.iter_mut() {
            if let Some(c) = s.child.as_mut() {
                tracing::info!(service = %name, pid = c.id(), "stopping");
                stop(c);
            }
        }
        self.children.clear();
    }

    fn tick(&mut self) {
        let names: Vec<String> = self.children.keys().cloned().collect();
        for name in names {
            let Some(s) = self.children.get_mut(&name) else {
                continue;
            };
            let exited = match s.child.as_mut().map(Child::try_wait) {
                Some(Ok(Some(status))) => Some(status.to_string()),
                None => Some("not running".to_string()),
                _ => None,
            };
            // Like Restart=always with RestartSec=2s.
            if let Some(status) = exited {
                if s.last_start.elapsed() < Duration::from_secs(2) {
                    continue;
                }
                let argv = s.argv.clone();
                tracing::warn!(service = %name, %status, "service exited; restarting");
                let child = self.spawn(&name, &argv);
                if let Some(s) = self.children.get_mut(&name) {
                    s.last_start = Instant::now();
                    s.child = child
                        .map_err(|e| tracing::error!(service = %name, "{e}"))
                        .ok();
                }
            }
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_state::report::{FileAction, FileWritten};

    fn svc(name: &str, argv: &[&str], triggers: &[&str]) -> ServiceDef {
        ServiceDef {
            name: name.into(),
            unit: format!("{name}.service"),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            triggers: triggers.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn written(paths: &[&str]) -> WriteOutcome {
        WriteOutcome {
            written: paths
                .iter()
                .map(|p| FileWritten {
                    path: p.to_string(),
                    action: FileAction::Updated,
                    mode: "0644".into(),
                })
                .collect(),
            unchanged: 0,
        }
    }

    #[test]
    fn only_services_whose_files_changed_restart() {
        let services = [
            svc("a", &["/bin/sleep"], &["/etc/a.conf"]),
            svc(
                "b",
                &["/bin/sleep"],
                &["/etc/systemd/system/b.service", "/etc/b.conf"],
            ),
        ];
        let (d, reload) = decide(&services, &written(&["/etc/b.conf"]));
        assert_eq!(
            d.iter().map(|d| d.changed).collect::<Vec<_>>(),
            [false, true]
        );
        assert!(!reload);
        let (_, reload) = decide(&services, &written(&["/etc/systemd/system/b.service"]));
        assert!(reload);
        let (d, _) = decide(&services, &written(&[]));
        assert!(d.iter().all(|d| !d.changed));
    }

    #[test]
    fn the_supervisor_starts_keeps_restarts_and_reports_absent_binaries() {
        let root = tempfile::tempdir().expect("tempdir");
        let mut sup = Supervisor::new(root.path());
        let services = [
            svc("sleeper", &["/bin/sleep", "30"], &["/etc/s.conf"]),
            svc("ghost", &["/nonexistent/kubelet", "--config=x"], &[]),
        ];
        let states = |r: Vec<ServiceReport>| r.into_iter().map(|r| r.state).collect::<Vec<_>>();
        let (d, _) = decide(&services, &written(&["/etc/s.conf"]));
        assert_eq!(
            states(sup.apply(&d, false)),
            [ServiceState::Started, ServiceState::Absent]
        );
        let first = sup.pids()["sleeper"];
        let (d, _) = decide(&services, &written(&[]));
        assert_eq!(
            states(sup.apply(&d, false)),
            [ServiceState::Unchanged, ServiceState::Absent]
        );
        assert_eq!(sup.pids()["sleeper"], first);
        let (d, _) = decide(&services, &written(&["/etc/s.conf"]));
        assert_eq!(
            states(sup.apply(&d, false)),
            [ServiceState::Restarted, ServiceState::Absent]
        );
        let second = sup.pids()["sleeper"];
        assert_ne!(second, first);
        assert!(!sup.pids().contains_key("ghost"));
        sup.shutdown();
        assert!(sup.pids().is_empty());
        assert!(
            !Path::new(&format!("/proc/{second}/cmdline")).exists() || {
                // Reaped: a reused PID would not be our sleep.
                std::fs::read_to_string(format!("/proc/{second}/cmdline"))
                    .is_ok_and(|c| !c.contains("sleep\u{0}30"))
            }
        );
    }
}
