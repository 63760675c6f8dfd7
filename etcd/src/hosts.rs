//! Peer URLs by name: member `<m>`'s peer URL is `https://etcd-<m>.internal.<cluster>:2380`, and the name
//! resolves, through a marked block of the node's `/etc/hosts`, to the private IP of whichever instance has the
//! member's volume attached. After any replacement (all three control-plane instances at once included) the
//! member list is still right and needs no quorum to change: the names just resolve to the new instances.
//!
//! The block is the only part of the file Ballast owns; everything outside its markers is kept as it was. The
//! file is rewritten in place (truncate and write, same inode) because on the local cloud it is bind-mounted over
//! the instance's `/etc/hosts` (`docs/local-cloud.md`), and a rename would leave the mount on the old file.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::peers::{MemberVolume, PeerInstance};

/// The first line of Ballast's block in `/etc/hosts`.
pub const BEGIN_MARKER: &str = "# ballast etcd peers: begin (kept current by the etcd supervisor)";
/// Its last line.
pub const END_MARKER: &str = "# ballast etcd peers: end";

/// The stable name of an etcd member: the member's (the volume's), never an instance's.
pub fn peer_name(cluster: &str, member: &str) -> String {
    format!("etcd-{member}.internal.{cluster}")
}

/// Name -> private IP for every member whose volume EC2 says is attached to an alive instance with an address;
/// this node's own member always maps to its own IP (it mounted the volume, whatever EC2 lists yet).
pub fn entries(
    cluster: &str,
    volumes: &[MemberVolume],
    instances: &[PeerInstance],
    own_member: &str,
    own_ip: &str,
) -> BTreeMap<String, String> {
    let mut out = member_entries(cluster, volumes, instances);
    out.insert(peer_name(cluster, own_member), own_ip.to_string());
    out
}

/// Name -> private IP for every member whose volume EC2 says is attached to an alive instance with an address:
/// what a node hosting no member (an API-server node, whose API server dials etcd by these names) writes.
pub fn member_entries(
    cluster: &str,
    volumes: &[MemberVolume],
    instances: &[PeerInstance],
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for v in volumes {
        let Some(holder) = v.attached_to.as_deref() else {
            continue;
        };
        let ip = instances
            .iter()
            .find(|i| i.instance_id == holder && i.state.is_alive() && !i.private_ip.is_empty())
            .map(|i| i.private_ip.clone());
        if let Some(ip) = ip {
            out.insert(peer_name(cluster, &v.member), ip);
        }
    }
    out
}

/// `existing` with Ballast's block replaced by `entries` (appended when absent); every other line is kept.
pub fn render(existing: &str, entries: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in existing.lines() {
        if line == BEGIN_MARKER {
            inside = true;
        } else if line == END_MARKER && inside {
            inside = false;
        } else if !inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(BEGIN_MARKER);
    out.push('\n');
    for (name, ip) in entries {
        out.push_str(&format!("{ip}\t{name}\n"));
    }
    out.push_str(END_MARKER);
    out.push('\n');
    out
}

/// Name -> IP as written in Ballast's block of `text` (what etcd resolves now).
pub fn parse_block(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut inside = false;
    for line in text.lines() {
        if line == BEGIN_MARKER {
            inside = true;
        } else if line == END_MARKER {
            inside = false;
        } else if inside {
            let mut fields = line.split_whitespace();
            if let (Some(ip), Some(name)) = (fields.next(), fields.next()) {
                out.insert(name.to_string(), ip.to_string());
            }
        }
    }
    out
}

/// Writing the hosts file failed.
#[derive(Debug, thiserror::Error)]
#[error("keeping the etcd peer names current in {path}: {source}")]
pub struct HostsError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Replaces Ballast's block of the hosts file at `path` with `entries`, in place, when it differs. Returns
/// whether the file changed. A missing file is created (0644: every process resolves through it).
pub fn update_file(path: &Path, entries: &BTreeMap<String, String>) -> Result<bool, HostsError> {
    let err = |source| HostsError {
        path: path.to_path_buf(),
        source,
    };
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(err(e)),
    };
    let wanted = render(&existing, entries);
    if wanted == existing {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    // One write of the whole file: a reader sees the old text, a shorter prefix for an instant, or the new one;
    // Go's resolver re-reads the file when its mtime changes, so a torn read heals on the next lookup.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(err)?;
    file.write_all(wanted.as_bytes()).map_err(err)?;
    file.sync_all().map_err(err)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::InstanceState;

    fn instance(id: &str, ip: &str, state: InstanceState) -> PeerInstance {
        PeerInstance {
            instance_id: id.to_string(),
            private_ip: ip.to_string(),
            state,
        }
    }

    fn volume(member: &str, attached_to: Option<&str>) -> MemberVolume {
        MemberVolume {
            member: member.to_string(),
            attached_to: attached_to.map(str::to_string),
        }
    }

    #[test]
    fn names_follow_the_volume_to_the_instance_holding_it_and_skip_dead_or_detached_ones() {
        let instances = [
            instance("i-new-b", "10.0.2.7", InstanceState::Running),
            instance("i-old-c", "10.0.3.9", InstanceState::Terminated),
        ];
        let volumes = [
            volume("a", Some("i-somewhere")),
            volume("b", Some("i-new-b")),
            volume("c", Some("i-old-c")),
            volume("d", None),
        ];
        let got = entries("demo.example.com", &volumes, &instances, "a", "10.0.1.5");
        let want: BTreeMap<String, String> = [
            ("etcd-a.internal.demo.example.com", "10.0.1.5"),
            ("etcd-b.internal.demo.example.com", "10.0.2.7"),
        ]
        .into_iter()
        .map(|(n, ip)| (n.to_string(), ip.to_string()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn render_replaces_only_the_block_and_keeps_every_other_line() {
        let before = format!(
            "127.0.0.1 localhost\n{BEGIN_MARKER}\n10.0.0.1\tetcd-a.internal.x\n{END_MARKER}\n10.9.9.9 other\n"
        );
        let entries: BTreeMap<String, String> =
            [("etcd-a.internal.x".to_string(), "10.0.0.2".to_string())].into();
        let after = render(&before, &entries);
        assert_eq!(
            after,
            format!(
                "127.0.0.1 localhost\n10.9.9.9 other\n{BEGIN_MARKER}\n10.0.0.2\tetcd-a.internal.x\n{END_MARKER}\n"
            )
        );
        assert_eq!(parse_block(&after), entries);
        assert_eq!(render(&after, &entries), after, "rendering is stable");
        assert!(parse_block("127.0.0.1 localhost\n").is_empty());
    }

    #[test]
    fn update_file_writes_in_place_keeping_the_inode_and_skips_unchanged_content() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("etc/hosts");
        let entries: BTreeMap<String, String> =
            [("etcd-a.internal.x".to_string(), "10.0.0.2".to_string())].into();
        assert!(update_file(&path, &entries).expect("created"));
        std::fs::write(
            &path,
            format!("127.0.0.1 localhost\n{}", render("", &entries)),
        )
        .expect("seed");
        let inode = std::fs::metadata(&path).expect("stat").ino();
        assert!(!update_file(&path, &entries).expect("unchanged"));
        let moved: BTreeMap<String, String> =
            [("etcd-a.internal.x".to_string(), "10.0.0.3".to_string())].into();
        assert!(update_file(&path, &moved).expect("changed"));
        assert_eq!(std::fs::metadata(&path).expect("stat").ino(), inode);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.starts_with("127.0.0.1 localhost\n"), "{text}");
        assert_eq!(parse_block(&text), moved);
    }
}
