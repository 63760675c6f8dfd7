//! Which process holds a cluster's writer lock, told precisely enough to see that it died on this machine: the
//! kernel's boot id and PID namespace name the process table the pid belongs to, and the process's start time
//! (in clock ticks since boot) tells it from a later process given the same pid. A lock whose holder is known
//! dead is taken over at once, instead of after its 2 minutes: an apply that failed because AWS went away (and
//! so could not release its lock) or was killed can be re-run straight away on the same machine. A holder on
//! another machine, in another PID namespace, or recorded by an older Ballast is never judged: its lock expires
//! by the store's clock as before.

use serde::{Deserialize, Serialize};

/// A process, as the lock records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HolderProcess {
    /// `/proc/sys/kernel/random/boot_id`: this boot of this kernel.
    pub boot_id: String,
    /// `/proc/self/ns/pid`'s target (`pid:[inode]`): the PID namespace the pid is in.
    pub pid_namespace: String,
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks after boot.
    pub start_ticks: u64,
}

impl HolderProcess {
    /// This process; `None` where `/proc` does not say (the lock is then judged by its age only).
    pub fn current() -> Option<Self> {
        let pid = std::process::id();
        Some(HolderProcess {
            boot_id: boot_id()?,
            pid_namespace: pid_namespace()?,
            pid,
            start_ticks: start_ticks(pid)?,
        })
    }

    /// Whether this holder is certainly gone: it ran in this boot and PID namespace, and no process with its pid
    /// and start time runs now. Anything unknown (another machine or namespace, an unreadable `/proc`) is not
    /// gone.
    pub fn is_gone(&self) -> bool {
        let (Some(boot), Some(namespace)) = (boot_id(), pid_namespace()) else {
            return false;
        };
        if boot != self.boot_id || namespace != self.pid_namespace {
            return false;
        }
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(stat) => parse_start_ticks(&stat) != Some(self.start_ticks),
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        }
    }
}

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn pid_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

fn start_ticks(pid: u32) -> Option<u64> {
    parse_start_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may hold spaces and
/// parentheses itself, so fields are counted after its last `)`.
fn parse_start_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // After the name: field 3 (state) is the first; field 22 is the 20th.
    after_name.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_read_after_a_name_holding_spaces_and_parentheses() {
        let stat =
            "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_ticks(stat), Some(987654));
        assert_eq!(parse_start_ticks("4242 (short) S 1"), None);
    }

    #[test]
    fn this_process_is_alive_and_one_that_exited_is_gone() {
        let me = HolderProcess::current().expect("this machine has /proc");
        assert!(!me.is_gone(), "{me:?}");
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        let started = start_ticks(pid);
        child.wait().expect("wait");
        let gone = HolderProcess {
            pid,
            start_ticks: started.unwrap_or(me.start_ticks),
            ..me.clone()
        };
        assert!(gone.is_gone(), "{gone:?}");
        // The same pid with another start time is another process: this one is gone too.
        let reused = HolderProcess {
            start_ticks: me.start_ticks + 1,
            ..me.clone()
        };
        assert!(reused.is_gone());
        // Another machine's holder is never judged.
        let elsewhere = HolderProcess {
            boot_id: "another-boot".into(),
            pid,
            ..me
        };
        assert!(!elsewhere.is_gone());
    }
}
