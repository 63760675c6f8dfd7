//! The supervisor's snapshot restore (`LocalState::restore_snapshot_into`, used to restore a backup and to
//! rebuild from a snapshot after quorum loss) with each etcd the project meets: Debian's 3.4, the local cloud's,
//! whose etcdctl restores; and 3.6.14 built here (`tools/build-go`), what the AMI carries for Kubernetes 1.34 and
//! later, whose etcdctl has no `snapshot restore` (etcdutl has it). Each test starts etcd on loopback (plain
//! HTTP: what is tested is the restore, not TLS), writes a key, saves a snapshot with etcdctl, restores it with
//! the supervisor's code, starts etcd on the restored data and reads the key back.
//!
//! Needs /usr/bin/etcd (apt) and the etcd built by tools/build-go (tools/install-deps makes both); fails, never
//! skips, without them.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ballast_etcd::process::{restore_program, LocalState, StartMode, StartSpec};
use ballast_state::etcd_timing::EtcdTiming;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// An etcd process, killed and reaped when dropped.
struct Etcd {
    child: Child,
    client: String,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// etcd of `bin` as one member `name` on `data`, answering on loopback.
fn start(bin: &Path, name: &str, data: &Path, peer: &str, log: &Path) -> Etcd {
    let client = format!("http://127.0.0.1:{}", free_port());
    let child = Command::new(bin.join("etcd"))
        .arg(format!("--name={name}"))
        .arg(format!("--data-dir={}", data.display()))
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster={name}={peer}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("etcd's log"))
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}/etcd: {e}", bin.display()));
    let etcd = Etcd { child, client };
    let started = Instant::now();
    while !etcdctl(bin, &etcd, &["endpoint", "health"])
        .status
        .success()
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "etcd did not answer in 60 s: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    etcd
}

fn etcdctl(bin: &Path, etcd: &Etcd, args: &[&str]) -> Output {
    Command::new(bin.join("etcdctl"))
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", etcd.client))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running etcdctl")
}

/// Snapshot, restore with the supervisor's code, start on the restored data, read the key back.
async fn restores(bin: &Path, program: &str) {
    for tool in ["etcd", "etcdctl"] {
        assert!(
            bin.join(tool).is_file(),
            "{} is missing: run tools/install-deps",
            bin.join(tool).display()
        );
    }
    assert_eq!(
        restore_program(&bin.join("etcdctl")),
        bin.join(program),
        "the program that restores with {}",
        bin.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshot = dir.path().join("snapshot.db");
    {
        let peer = format!("http://127.0.0.1:{}", free_port());
        let etcd = start(
            bin,
            "first",
            &dir.path().join("first"),
            &peer,
            &dir.path().join("first.log"),
        );
        let put = etcdctl(bin, &etcd, &["put", "ballast/restored", "yes"]);
        assert!(
            put.status.success(),
            "{}",
            String::from_utf8_lossy(&put.stderr)
        );
        let save = etcdctl(
            bin,
            &etcd,
            &["snapshot", "save", &snapshot.display().to_string()],
        );
        assert!(
            save.status.success(),
            "{}",
            String::from_utf8_lossy(&save.stderr)
        );
    }

    let peer = format!("http://127.0.0.1:{}", free_port());
    let spec = StartSpec {
        name: "restored".into(),
        ip: "127.0.0.1".into(),
        peer_url: peer.clone(),
        initial_cluster: vec![("restored".into(), peer.clone())],
        token: "ballast-restore-test".into(),
        mode: StartMode::Existing,
        timing: EtcdTiming::default(),
    };
    let state = LocalState::new(dir.path().join("state"));
    let data = dir.path().join("restored");
    state
        .restore_snapshot_into(&bin.join("etcdctl"), &snapshot, &spec, &data)
        .await
        .unwrap_or_else(|e| panic!("restoring with {}: {e}", bin.display()));
    let etcd = start(
        bin,
        "restored",
        &data,
        &peer,
        &dir.path().join("restored.log"),
    );
    let get = etcdctl(
        bin,
        &etcd,
        &["get", "ballast/restored", "--print-value-only"],
    );
    assert_eq!(
        String::from_utf8_lossy(&get.stdout).trim(),
        "yes",
        "{}",
        String::from_utf8_lossy(&get.stderr)
    );
}

#[tokio::test]
async fn debian_etcd_3_4_restores_a_snapshot_with_etcdctl() {
    restores(Path::new("/usr/bin"), "etcdctl").await;
}

#[tokio::test]
async fn the_amis_etcd_3_6_restores_a_snapshot_with_etcdutl() {
    let bin = ballast_e2e::go_builds::built("etcd");
    let out = Command::new(bin.join("etcd"))
        .arg("--version")
        .output()
        .expect("etcd --version");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("etcd Version: 3.6."),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    restores(&bin, "etcdutl").await;
}
