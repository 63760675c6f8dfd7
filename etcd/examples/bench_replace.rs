//! Benchmark: replacing a control-plane instance, with 10,000 keys in etcd.
//!
//! Runs three real supervisors over real etcd processes (mutual TLS) on loopback IPs (127.0.70.x), a file
//! state store and a stand-in for EC2. Each round terminates one member (SIGKILL of its etcd and supervisor,
//! EC2 says terminated) and launches a replacement on a fresh IP with an empty data dir at once, then prints:
//! - from the replacement's start (nodeup's) to 3 voting, healthy members;
//! - from the termination call to the same point.
//!
//! `cargo run --release -p ballast-etcd --features testing --example bench_replace [ROUNDS]`

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_etcd::client::ClientTls;
use ballast_etcd::decide::{client_url, peer_url};
use ballast_etcd::testing::{test_config, RunningNode, TestCa};
use ballast_etcd::{InstanceState, StaticPeers};
use ballast_store::store::{StateStore, StoreOptions};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Bench {
    ca: TestCa,
    root: tempfile::TempDir,
    store: StateStore,
    peers: StaticPeers,
    nodes: Vec<RunningNode>,
    next: u8,
    tls: ClientTls,
}

impl Bench {
    fn launch(&mut self) -> Result<(), BoxError> {
        self.next += 1;
        let ip = format!("127.0.70.{}", self.next);
        let id = format!("i-bench{:03}", self.next);
        self.peers.set(&id, &ip, InstanceState::Running);
        let config = test_config(&self.ca, self.root.path(), "bench.example.com", &id, &ip)?;
        self.nodes.push(RunningNode::spawn(
            config,
            self.store.clone(),
            Arc::new(self.peers.clone()),
        )?);
        Ok(())
    }

    async fn healthy(&self) -> bool {
        let want: BTreeSet<String> = self.nodes.iter().map(|n| peer_url(&n.ip)).collect();
        let mut leaders = BTreeSet::new();
        for n in &self.nodes {
            let Ok(mut c) = self
                .tls
                .connect(&[client_url(&n.ip)], Duration::from_millis(500))
                .await
            else {
                return false;
            };
            match c.status().await {
                Ok(s) if !s.is_learner() => {
                    leaders.insert(s.leader());
                }
                _ => return false,
            }
        }
        if leaders.len() != 1 || leaders.contains(&0) {
            return false;
        }
        let endpoints: Vec<String> = self.nodes.iter().map(|n| client_url(&n.ip)).collect();
        let Ok(mut c) = self
            .tls
            .connect(&endpoints, Duration::from_millis(500))
            .await
        else {
            return false;
        };
        let Ok(list) = c.member_list().await else {
            return false;
        };
        let got: BTreeSet<String> = list
            .members()
            .iter()
            .filter(|m| !m.is_learner())
            .flat_map(|m| m.peer_urls().to_vec())
            .collect();
        got == want && list.members().len() == want.len()
    }

    async fn wait_healthy(&self, timeout: Duration) -> Result<(), BoxError> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.healthy().await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(format!("not healthy after {timeout:?}").into())
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Result<(), BoxError> {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let root = tempfile::tempdir()?;
    let store_dir = root.path().join("state");
    let store = StateStore::open(
        &format!("file://{}", store_dir.display()),
        StoreOptions::default(),
    )
    .await?;
    let ca = TestCa::new()?;
    let tls = ClientTls::load(&ca.issue_node(&root.path().join("operator"), "127.0.0.1")?)?;
    let mut b = Bench {
        ca,
        root,
        store,
        peers: StaticPeers::new(),
        nodes: Vec::new(),
        next: 10,
        tls,
    };
    let start = Instant::now();
    for _ in 0..3 {
        b.launch()?;
    }
    b.wait_healthy(Duration::from_secs(60)).await?;
    eprintln!("bootstrap: 3 voting members in {:?}", start.elapsed());

    let endpoints: Vec<String> = b.nodes.iter().map(|n| client_url(&n.ip)).collect();
    let mut c = b.tls.connect(&endpoints, Duration::from_secs(5)).await?;
    for i in 0..10_000 {
        c.put(
            format!("bench/{i:05}"),
            format!("value-{i:05}-{}", "x".repeat(64)),
            None,
        )
        .await?;
    }
    eprintln!("wrote 10000 keys");

    let (mut from_start, mut from_termination) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Let the strict reconfiguration check settle as it would between real terminations.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let t0 = Instant::now();
        let victim = b.nodes.remove(round % 3);
        b.peers.terminate(&victim.instance_id);
        victim.crash().await;
        let t1 = Instant::now();
        b.launch()?;
        b.wait_healthy(Duration::from_secs(60)).await?;
        let (s, t) = (t1.elapsed(), t0.elapsed());
        println!("round {round}: replacement start -> 3 voting healthy: {s:?}; termination -> same: {t:?}");
        from_start.push(s);
        from_termination.push(t);
    }
    let mut check = b
        .tls
        .connect(
            &b.nodes
                .iter()
                .map(|n| client_url(&n.ip))
                .collect::<Vec<_>>(),
            Duration::from_secs(5),
        )
        .await?;
    let count = check
        .get(
            "bench/",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await?
        .count();
    println!(
        "median over {rounds} replacements with {count} keys: replacement start -> 3 voting healthy {:?}; termination -> same {:?}",
        median(&mut from_start),
        median(&mut from_termination)
    );
    for n in b.nodes.drain(..) {
        n.stop().await;
    }
    Ok(())
}
