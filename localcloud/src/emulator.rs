//! The AWS control plane of the local cloud: moto's server, started through the project's own launcher
//! (`localcloud/emulator/launcher.py`, embedded in this binary) which patches the moto bugs that matter to
//! Ballast before it serves.
//!
//! The emulator runs from a Python venv with the pinned moto (`localcloud/emulator/requirements.lock`), made by
//! `tools/install-deps`. Its interpreter is found through `BALLAST_EMULATOR_PYTHON`, else the default venv.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The launcher script, embedded so an installed `localcloud` binary needs no source tree.
pub const LAUNCHER_PY: &str = include_str!("../emulator/launcher.py");

/// How long the emulator may take to say it is ready (measured: about 2 s).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Env var naming the Python interpreter of the emulator's venv.
pub const PYTHON_ENV: &str = "BALLAST_EMULATOR_PYTHON";

/// Env var naming a launcher script to run instead of the embedded one: for working on the launcher's patches
/// without rebuilding `localcloud`.
pub const LAUNCHER_ENV: &str = "BALLAST_EMULATOR_LAUNCHER";

/// Failures to start the emulator.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// The venv's Python is missing.
    #[error(
        "the AWS emulator's Python venv was not found at {0}: run tools/install-deps (it creates the venv with the \
         pinned moto), or point {PYTHON_ENV} at a venv's python"
    )]
    VenvMissing(PathBuf),
    /// No free loopback port.
    #[error("could not find a free loopback port for the AWS emulator: {0}")]
    NoPort(#[source] std::io::Error),
    /// I/O while preparing or spawning the launcher.
    #[error("could not start the AWS emulator ({what}): {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The launcher exited or timed out before it was ready.
    // `reason` is this crate's own sentence (what the launcher printed or failed to print), not another error.
    #[error("the AWS emulator did not become ready: {reason}")]
    NotReady { reason: String },
}

/// How to start the emulator.
#[derive(Debug, Clone, Default)]
pub struct EmulatorOptions {
    /// Port to listen on; a free one is picked when `None`.
    pub port: Option<u16>,
    /// Enforce IAM policies after this many unauthenticated requests (moto's INITIAL_NO_AUTH_ACTION_COUNT).
    pub iam_enforce_after: Option<u32>,
    /// With `iam_enforce_after`: the IAM user that plays the EC2 service, i.e. may assume roles whose trust
    /// policy names the service principal `ec2.amazonaws.com` (how the local IMDS gets role credentials).
    pub ec2_service_user: Option<String>,
    /// Where the emulator's stderr goes; inherited when `None`.
    pub log_file: Option<PathBuf>,
    /// Directory to write the launcher script into (a temp dir when `None`).
    pub work_dir: Option<PathBuf>,
    /// Tie the emulator's life to ours through its stdin (tests); `localcloud up` detaches instead.
    pub exit_with_parent: bool,
}

/// A running emulator; killed when dropped (unless detached).
#[derive(Debug)]
pub struct Emulator {
    child: Option<Child>,
    /// Held open so the launcher's `--exit-with-stdin` watch sees EOF only when we go away.
    _stdin: Option<ChildStdin>,
    endpoint: String,
    _scratch: Option<tempfile_dir::ScratchDir>,
}

mod tempfile_dir {
    use std::path::PathBuf;

    /// A directory removed on drop, without pulling a temp-file crate into the binary.
    #[derive(Debug)]
    pub struct ScratchDir(pub PathBuf);

    impl Drop for ScratchDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The Python interpreter of the emulator's venv.
pub fn python_path() -> PathBuf {
    if let Some(p) = std::env::var_os(PYTHON_ENV) {
        return PathBuf::from(p);
    }
    default_venv().join("bin/python")
}

/// The venv `tools/install-deps` creates: `$XDG_CACHE_HOME/ballast/emulator-venv` (or `~/.cache/...`).
pub fn default_venv() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"));
    cache.join("ballast/emulator-venv")
}

/// A port on 127.0.0.1 nobody listens on right now.
pub fn free_port() -> Result<u16, std::io::Error> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

impl Emulator {
    /// Starts the launcher and waits until it prints `ready URL`.
    pub fn start(options: &EmulatorOptions) -> Result<Self, EmulatorError> {
        let python = python_path();
        if !python.exists() {
            return Err(EmulatorError::VenvMissing(python));
        }
        let (work_dir, scratch) = match &options.work_dir {
            Some(dir) => (dir.clone(), None),
            None => {
                let dir = std::env::temp_dir().join(format!(
                    "ballast-emulator-{}-{}",
                    std::process::id(),
                    rand::random::<u32>()
                ));
                (dir.clone(), Some(tempfile_dir::ScratchDir(dir)))
            }
        };
        std::fs::create_dir_all(&work_dir).map_err(|source| EmulatorError::Io {
            what: "creating its work directory",
            source,
        })?;
        let launcher = match std::env::var_os(LAUNCHER_ENV) {
            Some(path) => PathBuf::from(path),
            None => {
                let launcher = work_dir.join("launcher.py");
                std::fs::write(&launcher, LAUNCHER_PY).map_err(|source| EmulatorError::Io {
                    what: "writing launcher.py",
                    source,
                })?;
                launcher
            }
        };
        let port = match options.port {
            Some(p) => p,
            None => free_port().map_err(EmulatorError::NoPort)?,
        };
        let mut child = spawn_launcher(&python, &launcher, port, options)?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or_else(|| EmulatorError::NotReady {
            reason: "the launcher's stdout was not captured".into(),
        })?;
        let mut emulator = Emulator {
            child: Some(child),
            _stdin: stdin,
            endpoint: String::new(),
            _scratch: scratch,
        };
        emulator.endpoint = wait_ready(stdout)?;
        Ok(emulator)
    }

    /// `http://127.0.0.1:PORT`, for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The launcher's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Leaves the emulator running after we exit (for `localcloud up`); returns its PID.
    pub fn detach(mut self) -> Option<u32> {
        let pid = self.pid();
        self.child = None;
        std::mem::forget(self._stdin.take());
        pid
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn_launcher(
    python: &Path,
    launcher: &Path,
    port: u16,
    options: &EmulatorOptions,
) -> Result<Child, EmulatorError> {
    let mut cmd = Command::new(python);
    cmd.arg(launcher)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .stdout(Stdio::piped());
    if options.exit_with_parent {
        cmd.arg("--exit-with-stdin").stdin(Stdio::piped());
    } else {
        cmd.stdin(Stdio::null());
    }
    if let Some(n) = options.iam_enforce_after {
        cmd.args(["--iam-enforce", "--initial-no-auth", &n.to_string()]);
        if let Some(user) = &options.ec2_service_user {
            cmd.args(["--ec2-service-user", user]);
        }
    }
    if let Some(log) = &options.log_file {
        let file = std::fs::File::create(log).map_err(|source| EmulatorError::Io {
            what: "creating its log file",
            source,
        })?;
        cmd.stderr(file);
    }
    cmd.spawn().map_err(|source| EmulatorError::Io {
        what: "spawning the launcher",
        source,
    })
}

/// Reads the launcher's stdout until `ready URL`, with a deadline; then keeps draining it in the background.
fn wait_ready(stdout: std::process::ChildStdout) -> Result<String, EmulatorError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let result = match reader.read_line(&mut line) {
            Ok(0) => Err(EmulatorError::NotReady {
                reason: "the launcher exited before it was ready (see its log)".to_string(),
            }),
            Ok(_) => match line.trim().strip_prefix("ready ") {
                Some(url) => Ok(url.to_string()),
                None => Err(EmulatorError::NotReady {
                    reason: format!("unexpected first line from the launcher: {line:?}"),
                }),
            },
            Err(source) => Err(EmulatorError::Io {
                what: "reading the launcher's output",
                source,
            }),
        };
        let _ = tx.send(result);
        // Drain whatever else it prints so it never blocks on a full pipe.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    match rx.recv_timeout(READY_TIMEOUT) {
        Ok(result) => result,
        Err(_) => Err(EmulatorError::NotReady {
            reason: format!("no ready line within {READY_TIMEOUT:?}"),
        }),
    }
}
