//! A network partition of one local-cloud instance's etcd from its peers, made of nftables rules that really drop
//! the traffic, and removed however the test ends ([`Partition`]'s `Drop`).
//!
//! Why not rules on addresses alone: every local-cloud instance shares the host's network namespace, and its
//! outgoing connections leave from 127.0.0.1 whatever its own loopback IP (docs/local-cloud.md), so a member
//! dialing its peers cannot be told apart by source address. What tells it apart is the process: the instance's
//! processes (nodeup, its etcd supervisor and etcd) are moved into a cgroup (v2) of their own, and nftables marks
//! every connection a socket of that cgroup opens (`socket cgroupv2`, conntrack mark). Then, on `lo`:
//! - a connection the instance opens to a peer's etcd (ports 2379, 2380) is dropped from its first packet;
//! - a connection anyone else opens to the instance's etcd is dropped, both ways;
//! - the instance talking to its own etcd is left alone (a partition cuts the network, not the node).
//!
//! A socket keeps the cgroup it was created in, so connections open before the cut are destroyed (`ss -K`) once
//! the rules are in place; etcd redials, and the new connections are judged by the rules from their first packet.
//! The table and the cgroup carry this process's id and a counter, so nothing else on the machine is touched.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use localcloud::state::InstanceRecord;

/// etcd's client and peer ports: the traffic a partition drops.
const ETCD_PORTS: &str = "{ 2379, 2380 }";
/// The conntrack mark of a connection opened by the cut-off instance.
const MARK: &str = "0x16e7cd";

/// One instance cut off from its peers' etcd until dropped.
#[derive(Debug)]
pub struct Partition {
    table: String,
    cgroup: PathBuf,
    /// Where the moved processes came from (cgroup v2 path below the mount), to put them back.
    origin: PathBuf,
    mount: PathBuf,
}

impl Partition {
    /// Cuts `member` (its processes and its private IP) off from `peers`' etcd. Panics, naming what is missing,
    /// when the machine cannot do it (no nft, no cgroup v2, not root): a partition test must not pass without one.
    pub fn cut(member: &InstanceRecord, peers: &[InstanceRecord], pids: &[u32]) -> Partition {
        crate::image::require_tool("nft", "nftables");
        crate::image::require_tool("ss", "iproute2");
        assert!(
            !pids.is_empty(),
            "{} has no processes to cut off",
            member.instance_id
        );
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let unique = format!(
            "ballast-e2e-partition-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mount = cgroup2_mount();
        let cgroup = mount.join(&unique);
        std::fs::create_dir(&cgroup)
            .unwrap_or_else(|e| panic!("creating the cgroup {}: {e}", cgroup.display()));
        let origin = cgroup_of(pids[0]);
        let partition = Partition {
            table: unique.clone(),
            cgroup,
            origin,
            mount,
        };
        for pid in pids {
            partition.move_pid(*pid, &partition.cgroup.clone());
        }
        partition.add_rules(member, peers);
        // Connections opened before the cut keep their old cgroup and conntrack state: destroy them, etcd redials.
        for ip in std::iter::once(member).chain(peers).map(|r| &r.private_ip) {
            for port in [2379, 2380] {
                run(
                    "ss",
                    &["-K", "-t", "dst", &format!("{ip}:{port}")],
                    "destroying etcd connections opened before the cut",
                );
            }
        }
        partition
    }

    fn add_rules(&self, member: &InstanceRecord, peers: &[InstanceRecord]) {
        // nft names a cgroup by its path below /sys/fs/cgroup, and matches it at its depth below the cgroup v2
        // root: the cgroup is made right under the root, so at level 1.
        let cgroup = self
            .cgroup
            .strip_prefix("/sys/fs/cgroup")
            .unwrap_or_else(|_| {
                panic!(
                    "cgroup v2 is mounted at {}, outside /sys/fs/cgroup where nft looks for cgroups",
                    self.mount.display()
                )
            })
            .display()
            .to_string();
        let level = 1;
        let me = &member.private_ip;
        let peers: Vec<&str> = peers.iter().map(|p| p.private_ip.as_str()).collect();
        let peers = peers.join(", ");
        let ruleset = partition_ruleset(&self.table, &cgroup, level, me, &peers);
        let mut child = Command::new("nft")
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running nft");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("nft's stdin");
            stdin
                .write_all(ruleset.as_bytes())
                .expect("writing the ruleset to nft");
        }
        let out = child.wait_with_output().expect("waiting for nft");
        assert!(
            out.status.success(),
            "nft refused the partition's rules: {}\n{ruleset}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn move_pid(&self, pid: u32, to: &Path) {
        // A process that ended meanwhile has nothing left to move.
        if let Err(e) = std::fs::write(to.join("cgroup.procs"), pid.to_string()) {
            eprintln!("partition: moving process {pid} to {}: {e}", to.display());
        }
    }

    /// The nftables rules in force, for a test's log.
    pub fn rules(&self) -> String {
        let out = Command::new("nft")
            .args(["list", "table", "inet", &self.table])
            .output()
            .expect("running nft");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The ruleset: one table with an output chain (loopback traffic passes output and then input; output sees the
/// sending socket, which is what tells the cut-off instance's connections apart).
fn partition_ruleset(table: &str, cgroup: &str, level: usize, me: &str, peers: &str) -> String {
    format!(
        "table inet {table} {{\n\
         \tchain out {{\n\
         \t\ttype filter hook output priority 0; policy accept;\n\
         \t\toifname != \"lo\" accept\n\
         \t\tct state new socket cgroupv2 level {level} \"{cgroup}\" ct mark set {MARK}\n\
         \t\tct mark {MARK} ip daddr {{ {peers} }} tcp dport {ETCD_PORTS} drop\n\
         \t\tct mark != {MARK} ip daddr {me} tcp dport {ETCD_PORTS} drop\n\
         \t\tct mark != {MARK} ip saddr {me} tcp sport {ETCD_PORTS} drop\n\
         \t}}\n\
         }}\n"
    )
}

impl Drop for Partition {
    fn drop(&mut self) {
        let out = Command::new("nft")
            .args(["delete", "table", "inet", &self.table])
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "partition: deleting table {}: {}",
                self.table,
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("partition: running nft: {e}"),
        }
        // Every process in the cgroup now (children started during the cut included) goes back where it was.
        let back = self.mount.join(&self.origin);
        let procs = std::fs::read_to_string(self.cgroup.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            self.move_pid(pid, &back);
        }
        if let Err(e) = std::fs::remove_dir(&self.cgroup) {
            eprintln!("partition: removing {}: {e}", self.cgroup.display());
        }
    }
}

fn run(tool: &str, args: &[&str], what: &str) {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{what}: running {tool}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {tool} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where cgroup v2 is mounted (`/sys/fs/cgroup` on a pure v2 host, `/sys/fs/cgroup/unified` on a hybrid one).
fn cgroup2_mount() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/mounts").expect("reading /proc/mounts");
    mounts
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (_, at, kind) = (f.next()?, f.next()?, f.next()?);
            (kind == "cgroup2").then(|| PathBuf::from(at))
        })
        .expect("no cgroup v2 hierarchy is mounted: the partition test needs one to tell an instance's connections apart")
}

/// A process's cgroup v2 path, relative to the mount (`0::/path` in /proc/PID/cgroup).
fn cgroup_of(pid: u32) -> PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_else(|e| panic!("reading the cgroup of process {pid}: {e}"));
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("/");
    PathBuf::from(path.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ruleset_cuts_both_directions_and_spares_the_instance_itself() {
        let rules = partition_ruleset("t", "unified/c", 1, "127.5.1.4", "127.5.2.4, 127.5.3.4");
        assert!(rules.contains("socket cgroupv2 level 1 \"unified/c\" ct mark set 0x16e7cd"));
        assert!(rules.contains(
            "ct mark 0x16e7cd ip daddr { 127.5.2.4, 127.5.3.4 } tcp dport { 2379, 2380 } drop"
        ));
        assert!(
            rules.contains("ct mark != 0x16e7cd ip daddr 127.5.1.4 tcp dport { 2379, 2380 } drop")
        );
        assert!(
            rules.contains("ct mark != 0x16e7cd ip saddr 127.5.1.4 tcp sport { 2379, 2380 } drop")
        );
    }
}
