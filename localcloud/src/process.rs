//! Processes of the local cloud: identifying them across `localcloud` invocations (PID plus start time, so a
//! recycled PID is never mistaken for ours), killing whole process groups at once (an instance's power cut), and
//! spawning instance processes so that they cannot outlive the runner.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// A process as recorded in the state directory: its PID and the kernel's start time of that PID, so that
/// `down` and `status` do not act on an unrelated process that reuses the number later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat` (clock ticks after boot).
    pub start_ticks: u64,
}

/// The fields of `/proc/PID/stat` the local cloud uses.
#[derive(Debug, Clone, Copy)]
pub struct ProcStat {
    /// One-letter state (`R`, `S`, `Z`, ...).
    pub state: char,
    pub pgrp: u32,
    pub start_ticks: u64,
}

/// Reads `/proc/PID/stat`; `None` when the process does not exist (or cannot be parsed).
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces: parse after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 (state): field N is at index N - 3.
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

impl ProcessRecord {
    /// The record of a live process.
    pub fn of(pid: u32) -> Option<Self> {
        proc_stat(pid).map(|stat| ProcessRecord {
            pid,
            start_ticks: stat.start_ticks,
        })
    }

    /// True while this very process (same PID and start time) exists and is not a zombie.
    pub fn is_alive(&self) -> bool {
        matches!(proc_stat(self.pid), Some(stat) if stat.start_ticks == self.start_ticks && stat.state != 'Z')
    }

    /// Sends `signal` if the process is still this one; returns whether it was sent.
    pub fn signal(&self, signal: Signal) -> bool {
        self.is_alive() && kill(pid_of(self.pid), signal).is_ok()
    }
}

fn pid_of(pid: u32) -> Pid {
    // PIDs fit in i32 on Linux (pid_max <= 2^22).
    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}

/// PIDs of the live (non-zombie) processes in process group `pgid`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| matches!(proc_stat(*pid), Some(s) if s.pgrp == pgid && s.state != 'Z'))
        .collect()
}

/// SIGKILLs every process of group `pgid` at once: the instance's power cut. A group with no member left is not
/// an error. (The kernel never hands out a PID that is still some group's id, so the number cannot have been
/// recycled into an unrelated group while any member of ours lives.)
pub fn kill_group(pgid: u32) -> io::Result<()> {
    match killpg(pid_of(pgid), Signal::SIGKILL) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(errno) => Err(io::Error::from(errno)),
    }
}

/// Spawns instance processes from one dedicated thread that lives as long as the runner.
///
/// Each child is put in its own process group (so its whole tree can be killed at once) and gets
/// `PR_SET_PDEATHSIG=SIGKILL`, so that it dies with the runner even when the runner itself is SIGKILLed. The death
/// signal fires when the *thread* that forked the child exits, not the process: spawning from tokio's worker or
/// blocking threads (which come and go) would kill instances at random, hence this thread. Grandchildren do not
/// inherit the death signal: `down` and the test harness also kill the recorded groups.
#[derive(Debug)]
pub struct Spawner {
    requests: mpsc::Sender<SpawnRequest>,
}

type SpawnRequest = (Command, tokio::sync::oneshot::Sender<io::Result<Child>>);

impl Spawner {
    /// Starts the spawning thread. It exits (and the death signal kills the children it spawned) when the
    /// `Spawner` is dropped.
    pub fn start() -> io::Result<Self> {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("instance-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })?;
        Ok(Spawner { requests: tx })
    }

    /// Spawns `cmd` in a new process group, to be killed if the runner dies.
    pub async fn spawn(&self, mut cmd: Command) -> io::Result<Child> {
        let parent = nix::unistd::getpid();
        cmd.process_group(0);
        // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system calls
        // (prctl, getppid); it allocates nothing on success.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
                // The parent may have died before prctl took effect: then nobody would ever kill us. (No
                // allocation here: after fork only async-signal-safe calls are allowed.)
                if nix::unistd::getppid() != parent {
                    return Err(io::Error::from(nix::errno::Errno::ESRCH));
                }
                Ok(())
            });
        }
        let (reply_tx, reply_rx) = tokio::sync::oneshot::channel();
        self.requests
            .send((cmd, reply_tx))
            .map_err(|_| io::Error::other("the instance spawner thread is gone"))?;
        reply_rx
            .await
            .map_err(|_| io::Error::other("the instance spawner thread dropped the request"))?
    }
}

/// Whether something accepts TCP connections at `addr` (used to check that `down` left nothing listening).
pub fn is_listening(addr: &str) -> bool {
    addr.parse::<std::net::SocketAddr>().is_ok_and(|a| {
        std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_millis(300)).is_ok()
    })
}
