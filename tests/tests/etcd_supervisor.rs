//! The etcd supervisor against real etcd processes (Debian's etcd 3.4, mutual TLS) on loopback IPs, a real
//! S3 state store (the emulator), and a stand-in for EC2 (`StaticPeers`). Each test uses its own /24 of
//! loopback addresses so tests run in parallel. Tests need /usr/bin/etcd and fail, never skip, without it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_e2e::etcd_writer::{write_until_stopped, WriterControl};
use ballast_e2e::wait::wait_until;
use ballast_etcd::backup::{self, BackupError};
use ballast_etcd::client::ClientTls;
use ballast_etcd::decide::{client_url, peer_url};
use ballast_etcd::record::{read_record, Origin};
use ballast_etcd::supervisor::StopOutcome;
use ballast_etcd::testing::{test_config, RunningNode, TestCa};
use ballast_etcd::{InstanceState, StaticPeers};
use ballast_state::layout::ClusterPaths;
use ballast_store::store::{Precondition, StateStore, StoreOptions};

fn require_etcd() {
    for bin in ["/usr/bin/etcd", "/usr/bin/etcdctl"] {
        assert!(
            std::path::Path::new(bin).exists(),
            "{bin} is missing: apt-get install -y etcd-server etcd-client (tools/install-deps)"
        );
    }
}

struct TestCluster {
    name: String,
    ca: TestCa,
    root: tempfile::TempDir,
    store: StateStore,
    peers: StaticPeers,
    nodes: Vec<RunningNode>,
    subnet: u8,
    next_host: u8,
    client_tls: ClientTls,
    backup_interval: Option<Duration>,
}

impl TestCluster {
    async fn new(hint: &str, subnet: u8) -> Self {
        require_etcd();
        let bucket = ballast_e2e::aws::new_bucket(hint).await;
        let store = StateStore::open(&format!("s3://{bucket}/state"), StoreOptions::default())
            .await
            .expect("open the state store");
        let ca = TestCa::new().expect("test CA");
        let root = tempfile::tempdir().expect("tempdir");
        let tls = ca
            .issue_node(&root.path().join("operator"), "127.0.0.1")
            .expect("client cert");
        let client_tls = ClientTls::load(&tls).expect("client tls");
        TestCluster {
            name: format!("{hint}.example.com"),
            ca,
            root,
            store,
            peers: StaticPeers::new(),
            nodes: Vec::new(),
            subnet,
            next_host: 10,
            client_tls,
            backup_interval: None,
        }
    }

    fn paths(&self) -> ClusterPaths {
        ClusterPaths::new(&self.name)
    }

    /// An instance boots: the ASG launched it and nodeup starts the supervisor.
    fn launch(&mut self) -> String {
        self.next_host += 1;
        let ip = format!("127.0.{}.{}", self.subnet, self.next_host);
        let id = format!("i-{:02x}{:02x}", self.subnet, self.next_host);
        self.peers.set(&id, &ip, InstanceState::Running);
        let mut config =
            test_config(&self.ca, self.root.path(), &self.name, &id, &ip).expect("node config");
        config.backup_interval = self.backup_interval;
        let node = RunningNode::spawn(config, self.store.clone(), Arc::new(self.peers.clone()))
            .expect("spawn supervisor");
        self.nodes.push(node);
        id
    }

    /// An instance is terminated: EC2 says so, and its etcd and supervisor die at once.
    async fn terminate(&mut self, index: usize) -> String {
        let node = self.nodes.remove(index);
        let id = node.instance_id.clone();
        self.peers.terminate(&id);
        node.crash().await;
        id
    }

    /// Each node's etcd member id and the leader it follows, by node index.
    async fn statuses(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for ip in self.alive_ips() {
            let mut c = self
                .client_tls
                .connect(&[client_url(&ip)], Duration::from_secs(2))
                .await
                .expect("connect");
            let s = c.status().await.expect("status");
            out.push((s.header().map_or(0, |h| h.member_id()), s.leader()));
        }
        out
    }

    /// The etcd log of node `index`.
    fn etcd_log(&self, index: usize) -> String {
        let log = self
            .root
            .path()
            .join(&self.nodes[index].instance_id)
            .join("etcd/etcd.log");
        std::fs::read_to_string(&log).unwrap_or_default()
    }

    fn alive_ips(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.ip.clone()).collect()
    }

    async fn client(&self) -> etcd_client::Client {
        let endpoints: Vec<String> = self.alive_ips().iter().map(|ip| client_url(ip)).collect();
        self.client_tls
            .connect(&endpoints, Duration::from_secs(5))
            .await
            .expect("connect")
    }

    /// Waits until exactly the alive nodes are voting members, all answering with one leader, no learner.
    async fn wait_healthy(&self, timeout: Duration) -> Duration {
        let start = Instant::now();
        let want: BTreeSet<String> = self.alive_ips().iter().map(|ip| peer_url(ip)).collect();
        let mut last = String::new();
        while start.elapsed() < timeout {
            match self.healthy_members().await {
                Ok(members) if members == want => return start.elapsed(),
                Ok(members) => last = format!("members {members:?}, want {want:?}"),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "etcd not healthy with {want:?} after {timeout:?}: {last}\n{}",
            self.logs()
        );
    }

    async fn healthy_members(&self) -> Result<BTreeSet<String>, String> {
        let mut leaders = BTreeSet::new();
        for ip in self.alive_ips() {
            let mut c = self
                .client_tls
                .connect(&[client_url(&ip)], Duration::from_secs(1))
                .await
                .map_err(|e| e.to_string())?;
            let s = c.status().await.map_err(|e| format!("{ip}: {e}"))?;
            if s.is_learner() {
                return Err(format!("{ip} is a learner"));
            }
            leaders.insert(s.leader());
        }
        if leaders.len() != 1 || leaders.contains(&0) {
            return Err(format!("leaders {leaders:?}"));
        }
        let mut c = self.client().await;
        let list = c.member_list().await.map_err(|e| e.to_string())?;
        if let Some(l) = list.members().iter().find(|m| m.is_learner()) {
            return Err(format!("learner {:?}", l.peer_urls()));
        }
        Ok(list
            .members()
            .iter()
            .flat_map(|m| m.peer_urls().to_vec())
            .collect())
    }

    /// Waits until every member serves all `n` keys under `prefix` from its own data (serializable reads).
    async fn wait_in_sync(&self, prefix: &str, n: i64, timeout: Duration) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            let mut synced = 0;
            for ip in self.alive_ips() {
                let Ok(mut c) = self
                    .client_tls
                    .connect(&[client_url(&ip)], Duration::from_secs(1))
                    .await
                else {
                    continue;
                };
                let options = etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only()
                    .with_serializable();
                if let Ok(r) = c.get(format!("{prefix}/"), Some(options)).await {
                    if r.count() == n {
                        synced += 1;
                    }
                }
            }
            if synced == self.nodes.len() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("members not in sync after {timeout:?}");
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            let log = self.root.path().join(&n.instance_id).join("etcd/etcd.log");
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(8).collect();
            out.push_str(&format!("--- {} etcd log tail:\n", n.instance_id));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    async fn put_keys(&self, prefix: &str, n: usize) {
        let mut c = self.client().await;
        for i in 0..n {
            c.put(format!("{prefix}/{i:05}"), format!("v{i}"), None)
                .await
                .expect("put");
        }
    }

    async fn count_keys(&self, prefix: &str) -> usize {
        let mut c = self.client().await;
        let r = c
            .get(
                format!("{prefix}/"),
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            )
            .await
            .expect("get");
        r.count() as usize
    }

    async fn shutdown(self) {
        for n in self.nodes {
            n.stop().await;
        }
    }
}

/// The harness's no-lost-write writer ([`write_until_stopped`]) on a task of its own, one key every 5 ms through
/// whatever the test does to the cluster.
struct Writer {
    control: Arc<WriterControl>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Writer {
    /// Starts writing `<prefix>/<n>` keys through every live member; returns once its first writes are
    /// acknowledged (the writer is under way before the test acts).
    async fn start(c: &TestCluster, prefix: String) -> Writer {
        let endpoints: Vec<String> = c.alive_ips().iter().map(|ip| client_url(ip)).collect();
        let tls = c.client_tls.clone();
        let control = Arc::new(WriterControl::new());
        let task = {
            let control = control.clone();
            tokio::spawn(async move {
                let connect = || {
                    let (tls, endpoints) = (tls.clone(), endpoints.clone());
                    async move { tls.connect(&endpoints, Duration::from_secs(2)).await.ok() }
                };
                let prefix = format!("{prefix}/");
                write_until_stopped(&control, &prefix, Duration::from_millis(5), connect)
                    .await
                    .acknowledged
            })
        };
        control
            .wait_for_more_writes(5, Duration::from_secs(30))
            .await;
        Writer { control, task }
    }

    /// Stops writing; the keys etcd acknowledged.
    async fn stop(self) -> Vec<String> {
        self.control.stop();
        self.task.await.expect("writer")
    }
}

impl TestCluster {
    /// Every acknowledged write is readable.
    async fn assert_all_present(&self, acked: &[String]) {
        let mut client = self.client().await;
        for key in acked {
            let r = client.get(key.as_str(), None).await.expect("get");
            assert_eq!(r.kvs().len(), 1, "acknowledged write {key} lost");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_bootstraps_once_over_tls_and_heals_replacements() {
    let mut c = TestCluster::new("etcd-heal", 61).await;
    for _ in 0..3 {
        c.launch();
    }
    let formed = c.wait_healthy(Duration::from_secs(40)).await;
    eprintln!("3 voting members after {formed:?}");
    let record = read_record(&c.store, &c.paths())
        .await
        .expect("read record")
        .expect("record exists");
    assert_eq!(record.record.epoch, 1, "exactly one bootstrap decision");
    assert_eq!(record.record.origin, Origin::Bootstrap);

    // A quiet cluster does not ask EC2 every round: over 3 s of 300 ms rounds, three supervisors asking every
    // round would list the instances about 30 times; with a listing reused for 10 s while quiet, each asks at
    // most once. Both sleeps are the measurement's windows (a second to become quiet, three to count), not waits
    // for an event.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let listed_before = c.peers.listings();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let listed = c.peers.listings() - listed_before;
    assert!(
        listed <= 3,
        "a quiet cluster's supervisors listed the instances {listed} times in 3 s"
    );

    // TLS: a client without a certificate is refused.
    let plain = etcd_client::Client::connect(
        [format!("https://{}:2379", c.alive_ips()[0])],
        Some(
            etcd_client::ConnectOptions::new()
                .with_timeout(Duration::from_secs(2))
                .with_tls(etcd_client::TlsOptions::new()),
        ),
    )
    .await;
    if let Ok(mut plain) = plain {
        assert!(
            plain.get("x", None).await.is_err(),
            "etcd accepted a client without a certificate"
        );
    }

    c.put_keys("before", 200).await;
    for round in 0..4 {
        // A client writes continuously through the termination; every acknowledged write must survive.
        let writer = Writer::start(&c, format!("w{round}")).await;
        let dead = c.terminate(round % 3).await;
        let started = Instant::now();
        let new = c.launch();
        let healed = c.wait_healthy(Duration::from_secs(60)).await;
        let acked = writer.stop().await;
        eprintln!(
            "round {round}: {dead} terminated, {new} joined; 3 voting members {:?} after the replacement started ({} writes acknowledged)",
            started.elapsed().max(healed),
            acked.len()
        );
        assert_eq!(
            c.count_keys("before").await,
            200,
            "keys written before are readable"
        );
        c.assert_all_present(&acked).await;
    }
    let record = read_record(&c.store, &c.paths())
        .await
        .expect("read")
        .expect("record");
    assert_eq!(
        record.record.epoch, 1,
        "replacements never start a new cluster"
    );

    // A graceful stop (nodeup's SIGTERM) of the leader, under writes: leadership is handed to a follower first,
    // which takes over by the transfer (etcd's MsgTimeoutNow), not after an election timeout, and no
    // acknowledged write is lost.
    let statuses = c.statuses().await;
    let leader = statuses
        .iter()
        .position(|(id, leader)| id == leader)
        .expect("a leader among the nodes");
    let writer = Writer::start(&c, "graceful".to_string()).await;
    let node = c.nodes.remove(leader);
    c.peers.terminate(&node.instance_id);
    let outcome = node.stop().await;
    let Some(StopOutcome::HandedOver { to }) = outcome else {
        panic!(
            "the leader stopped without a handoff: {outcome:?}\n{}",
            c.logs()
        );
    };
    let survivors = c.statuses().await;
    let successor = survivors
        .iter()
        .position(|(id, _)| *id == to)
        .expect("the handoff went to a surviving member");
    assert!(
        survivors.iter().all(|(_, l)| *l == to),
        "the survivors follow the member leadership moved to ({to:x}): {survivors:?}"
    );
    assert!(
        c.etcd_log(successor).contains("received MsgTimeoutNow"),
        "the successor took over by the leader's transfer, not by an election timeout"
    );
    c.launch();
    c.wait_healthy(Duration::from_secs(60)).await;
    let acked = writer.stop().await;
    c.assert_all_present(&acked).await;
    eprintln!(
        "graceful leader stop: leadership to {to:x}; {} writes acknowledged",
        acked.len()
    );

    // `ballast etcd backup`: an on-demand request the leader carries out (no schedule in this test).
    let paths = c.paths();
    assert!(backup::list_backups(&c.store, &paths)
        .await
        .expect("list")
        .is_empty());
    let asked = backup::request_backup(&c.store, &paths, "test")
        .await
        .expect("request");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = backup::list_backups(&c.store, &paths).await.expect("list");
        let pending = c
            .store
            .get(&backup::request_key(&paths))
            .await
            .expect("get")
            .is_some();
        if !pending
            && list
                .iter()
                .any(|b| b.created_unix >= asked && b.member_count == 3)
        {
            break;
        }
        assert!(Instant::now() < deadline, "no on-demand backup: {list:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_survivor_carries_the_cluster_after_losing_the_majority() {
    let mut c = TestCluster::new("etcd-majority", 62).await;
    for _ in 0..3 {
        c.launch();
    }
    c.wait_healthy(Duration::from_secs(40)).await;
    c.put_keys("k", 300).await;
    // Raft acknowledges a write once a majority has it: the survivor can only carry what reached it. Let the
    // followers catch up (they do within a heartbeat) before two members die at once.
    c.wait_in_sync("k", 300, Duration::from_secs(10)).await;
    let a = c.terminate(0).await;
    let b = c.terminate(0).await;
    c.launch();
    c.launch();
    let healed = c.wait_healthy(Duration::from_secs(90)).await;
    eprintln!("{a} and {b} terminated; 3 voting members again after {healed:?}");
    assert_eq!(
        c.count_keys("k").await,
        300,
        "the survivor's data carries the cluster"
    );
    let record = read_record(&c.store, &c.paths())
        .await
        .expect("read")
        .expect("record");
    assert_eq!(record.record.epoch, 2);
    match &record.record.origin {
        Origin::ForceNewCluster { lost_members, .. } => {
            let lost: BTreeSet<&str> = lost_members.iter().map(String::as_str).collect();
            assert_eq!(
                lost,
                BTreeSet::from([a.as_str(), b.as_str()]),
                "what was done is reported"
            );
        }
        other => panic!("expected a forced new cluster, got {other:?}"),
    }
    // The leader's peers die, then it is stopped gracefully: with no quorum to take over there is no handoff
    // (etcd's own transfer would hang for seconds), and the stop returns.
    let statuses = c.statuses().await;
    let leader = statuses
        .iter()
        .position(|(id, leader)| id == leader)
        .expect("a leader among the nodes");
    let leader_id = c.nodes[leader].instance_id.clone();
    while c.nodes.len() > 1 {
        let follower = c
            .nodes
            .iter()
            .position(|n| n.instance_id != leader_id)
            .expect("a follower");
        c.terminate(follower).await;
    }
    let node = c.nodes.remove(0);
    let outcome = node.stop().await;
    assert!(
        matches!(
            outcome,
            Some(StopOutcome::NoHandoff { .. } | StopOutcome::Follower)
        ),
        "no handoff without peers: {outcome:?}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_backups_and_restore_with_refusals() {
    let mut c = TestCluster::new("etcd-backup", 63).await;
    c.backup_interval = Some(Duration::from_secs(2));
    for _ in 0..3 {
        c.launch();
    }
    c.wait_healthy(Duration::from_secs(40)).await;
    c.put_keys("kept", 150).await;
    // Wait for a scheduled backup that includes the keys.
    let paths = c.paths();
    let deadline = Instant::now() + Duration::from_secs(30);
    let backup = loop {
        let list = backup::list_backups(&c.store, &paths).await.expect("list");
        if let Some(b) = list.iter().rev().find(|b| b.revision >= 151) {
            break b.clone();
        }
        assert!(Instant::now() < deadline, "no scheduled backup: {list:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(backup.member_count, 3);
    c.put_keys("after-backup", 10).await;

    // Refusals.
    let fresh = Duration::from_secs(3);
    let err = backup::request_restore_with(&c.store, &paths, &backup.id, "test", fresh)
        .await
        .expect_err("a restore while healthy is refused");
    assert!(matches!(err, BackupError::ClusterHealthy { .. }), "{err}");
    let err = backup::request_restore_with(&c.store, &paths, "no-such-backup", "test", fresh)
        .await
        .expect_err("an unknown id is refused");
    assert!(matches!(err, BackupError::UnknownBackup { .. }), "{err}");
    assert!(
        err.to_string().contains(&backup.id),
        "lists what exists: {err}"
    );
    // A corrupted copy of the backup.
    let bad = "20000101T000000.000Z";
    let prefix = paths.etcd_backup(bad);
    let mut meta = backup.clone();
    meta.id = bad.to_string();
    c.store
        .put(
            &format!("{prefix}snapshot.db"),
            b"not a snapshot",
            &Precondition::None,
        )
        .await
        .expect("put");
    c.store
        .put(
            &format!("{prefix}metadata.json"),
            &serde_json::to_vec(&meta).expect("json"),
            &Precondition::None,
        )
        .await
        .expect("put");
    let err = backup::request_restore_with(&c.store, &paths, bad, "test", fresh)
        .await
        .expect_err("a corrupted snapshot is refused");
    assert!(matches!(err, BackupError::Corrupted { .. }), "{err}");

    // Everything dies; nothing is invented; the restore brings the backup back.
    for _ in 0..3 {
        c.terminate(0).await;
    }
    // Refused while a member's health report is fresh (under 3 s old): accepted once the dead members' reports
    // are stale, which is what is waited for.
    let (store, paths_ref, id) = (&c.store, &paths, backup.id.as_str());
    let record = wait_until(
        Duration::from_secs(30),
        "the restore to be accepted once no member reports itself healthy",
        || async move {
            match backup::request_restore_with(store, paths_ref, id, "test", fresh).await {
                Err(healthy @ BackupError::ClusterHealthy { .. }) => Err(healthy),
                other => Ok(other.expect("restore accepted")),
            }
        },
    )
    .await;
    assert_eq!(record.epoch, 2);
    for _ in 0..3 {
        c.launch();
    }
    let healed = c.wait_healthy(Duration::from_secs(60)).await;
    eprintln!("restored to 3 voting members after {healed:?}");
    assert_eq!(
        c.count_keys("kept").await,
        150,
        "the backup's keys are back"
    );
    assert_eq!(
        c.count_keys("after-backup").await,
        0,
        "nothing after the backup"
    );
    c.shutdown().await;
}
