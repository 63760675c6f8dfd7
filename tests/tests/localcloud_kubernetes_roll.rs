//! An upgrade of an HA cluster that runs real Kubernetes (3 control-plane machines, one per zone, and 2 workers,
//! kubenet) from 1.36 to 1.37: the spec's `kubernetesVersion` changed, `update cluster --yes`, then
//! `rolling-update cluster --yes`, without `--cloudonly`, replaces every instance with one booted from the 1.37
//! image, cordoning and draining each node through the API (the exported admin kubeconfig, reached through the
//! API's load balancer at the address the cloud's hosts file gives it) and waiting for each replacement's node to
//! be Ready. Every node then runs the 1.37 kubelet and the API server answers as 1.37.
//!
//! Through the whole roll, a Deployment of 4 pods with a PodDisruptionBudget of `minAvailable: 3` behind a
//! ClusterIP Service keeps at least 3 ready endpoints (read every 200 ms from its EndpointSlices), and every write
//! the API acknowledged (a ConfigMap created every 200 ms, stored in etcd) is there after it. Reads and writes the
//! API did not answer while a control-plane instance was going are counted and printed, not hidden.
//!
//! Then a control-plane instance is power-cut through EC2: its replacement's node becomes Ready, etcd heals to
//! three voting members and `validate` passes, and the API answers through its load balancer afterwards; the
//! longest time it went unanswered (read every 200 ms) is printed.
//!
//! Needs root, the Go builds and the emulator (`tools/install-deps`); fails, never skips.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ballast_e2e::image::require_root;
use ballast_e2e::kube_machines::{create_kubenet_cluster, longest_gap, netexec, Kubectl};
use ballast_e2e::lifecycle::{FROM_VERSION, TO_VERSION};
use ballast_e2e::localcloud::{LocalCloud, MachineOptions, Options};
use ballast_e2e::operator::{ballast_cli_on, validate_checks, ZONES};
use ballast_e2e::wait::wait_until;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, PostParams};

const CLUSTER: &str = "roll.example.com";
/// Three control-plane machines and two workers.
const INSTANCES: usize = 5;
/// Five machines booting systemd, containerd, etcd and three control planes on two cores.
const SETTLE: Duration = Duration::from_secs(600);
/// How often the watcher reads the Service's endpoints and the writer writes.
const EVERY: Duration = Duration::from_millis(200);
/// The budget: of 4 replicas, at least this many ready at any time.
const MIN_AVAILABLE: usize = 3;

/// A client of the API like the test's kubectl: the admin kubeconfig, dialled at the load balancer's host
/// address, checking the API server's certificate against its name; short timeouts, so a read the API does not
/// answer is counted instead of waited out.
async fn client(kubectl: &Kubectl) -> kube::Client {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(&kubectl.kubeconfig).expect("the kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("a client config");
    config.cluster_url = format!("https://{}:443", kubectl.address)
        .parse()
        .expect("the load balancer's URL");
    config.tls_server_name = Some(kubectl.name.clone());
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(2));
    config.default_retry = false;
    kube::Client::try_from(config).expect("a client")
}

/// What the watcher saw: ready endpoints per answered read, and the reads the API did not answer.
#[derive(Default)]
struct Watched {
    ready: Vec<usize>,
    unanswered: Vec<String>,
}

/// What the writer did: the writes the API acknowledged, and those it did not.
#[derive(Default)]
struct Written {
    acknowledged: Vec<String>,
    failed: Vec<String>,
}

fn record_read(watched: &Mutex<Watched>, read: Result<usize, kube::Error>) {
    let mut seen = watched.lock().expect("the watcher's record");
    match read {
        Ok(ready) => seen.ready.push(ready),
        Err(e) => seen.unanswered.push(e.to_string()),
    }
}

fn record_write(written: &Mutex<Written>, name: String, result: Result<(), kube::Error>) {
    let mut record = written.lock().expect("the writer's record");
    match result {
        Ok(()) => record.acknowledged.push(name),
        Err(e) => record.failed.push(format!("{name}: {e}")),
    }
}

/// The kubelet versions the cluster's Nodes report.
fn kubelet_versions(kubectl: &Kubectl) -> BTreeSet<String> {
    kubectl.json(&["get", "nodes", "-o", "json"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["status"]["nodeInfo"]["kubeletVersion"].as_str())
        .map(String::from)
        .collect()
}

fn pdb(name: &str) -> String {
    format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: {name}\n  namespace: default\n\
         spec:\n  minAvailable: {MIN_AVAILABLE}\n  selector:\n    matchLabels: {{app: {name}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_rolls_real_nodes_with_drains_keeping_a_budgeted_service_and_every_write() {
    require_root();
    let cloud = LocalCloud::start_with(Options {
        machines: Some(MachineOptions::releases(&[FROM_VERSION, TO_VERSION])),
        ..Options::default()
    });
    let dir = tempfile::tempdir().expect("a temporary directory");
    create_kubenet_cluster(&cloud, CLUSTER, ZONES, 2, dir.path()).await;
    let kubectl = Kubectl::export(&cloud, CLUSTER, dir.path()).await;
    wait_until(SETTLE, "validate to pass", || async {
        let checks = validate_checks(&cloud, CLUSTER);
        let nodes = checks.keys().filter(|n| n.starts_with("node ")).count();
        if nodes == INSTANCES && checks.values().all(|(ok, _)| *ok) {
            Ok(())
        } else {
            Err(format!("{checks:?}"))
        }
    })
    .await;
    kubectl.apply(
        dir.path(),
        "steady.yaml",
        &format!("{}---\n{}", netexec("steady", 4, false), pdb("steady")),
    );
    kubectl.wait_pods_ready("app=steady", 4, SETTLE).await;
    assert_eq!(
        kubelet_versions(&kubectl),
        [format!("v{FROM_VERSION}")].into()
    );

    // The upgrade, as an operator makes it: the stored spec's version changed, then applied.
    let stored = ballast_cli_on(&cloud, CLUSTER)
        .args(["get", "clusters", CLUSTER, "-o", "yaml"])
        .output()
        .expect("get clusters");
    let yaml = String::from_utf8_lossy(&stored.stdout).replace(
        &format!("kubernetesVersion: {FROM_VERSION}"),
        &format!("kubernetesVersion: {TO_VERSION}"),
    );
    assert!(yaml.contains(TO_VERSION), "{yaml}");
    let spec = dir.path().join("upgraded.yaml");
    std::fs::write(&spec, yaml).expect("write the spec");
    ballast_cli_on(&cloud, CLUSTER)
        .args(["replace", "-f"])
        .arg(&spec)
        .assert()
        .success();
    ballast_cli_on(&cloud, CLUSTER)
        .args(["update", "cluster", CLUSTER, "--yes"])
        .assert()
        .success();
    let before: BTreeSet<String> = cloud
        .powered_on()
        .into_iter()
        .map(|r| r.instance_id)
        .collect();
    assert_eq!(before.len(), INSTANCES);

    let client = client(&kubectl).await;
    let stop = Arc::new(AtomicBool::new(false));
    let watched = Arc::new(Mutex::new(Watched::default()));
    let watcher = tokio::spawn({
        let (stop, watched) = (stop.clone(), watched.clone());
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
        async move {
            let params = ListParams::default().labels("kubernetes.io/service-name=steady");
            while !stop.load(Ordering::Relaxed) {
                let read = slices.list(&params).await.map(|list| {
                    list.items
                        .iter()
                        .flat_map(|s| &s.endpoints)
                        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                        .count()
                });
                record_read(&watched, read);
                tokio::time::sleep(EVERY).await;
            }
        }
    });
    let written = Arc::new(Mutex::new(Written::default()));
    let writer = tokio::spawn({
        let (stop, written) = (stop.clone(), written.clone());
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        async move {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let name = format!("write-{n:05}");
                let map: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name}, "data": {"n": n.to_string()}
                }))
                .expect("a ConfigMap");
                let result = maps.create(&PostParams::default(), &map).await;
                record_write(&written, name, result.map(drop));
                tokio::time::sleep(EVERY).await;
            }
        }
    });

    let started = Instant::now();
    let roll = ballast_cli_on(&cloud, CLUSTER)
        .env("KUBECONFIG", &kubectl.kubeconfig)
        .args(["rolling-update", "cluster", CLUSTER, "--yes"])
        .args(["--drain-timeout", "5m", "--validation-timeout", "10m"])
        .timeout(Duration::from_secs(45 * 60))
        .output()
        .expect("rolling-update");
    let rolled_in = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    watcher.await.expect("the watcher");
    writer.await.expect("the writer");
    let stderr = String::from_utf8_lossy(&roll.stderr);
    assert!(
        roll.status.success(),
        "rolling-update failed:\n{}{stderr}",
        String::from_utf8_lossy(&roll.stdout)
    );

    println!("{stderr}");

    // Every instance replaced (the last ones terminated are powered off once their systemd has halted), each
    // node drained through the API first (the workers' pods evicted).
    let after = wait_until(SETTLE, "the replaced instances powered off", || async {
        let on: BTreeSet<String> = cloud
            .powered_on()
            .into_iter()
            .map(|r| r.instance_id)
            .collect();
        if on.len() == INSTANCES {
            Ok(on)
        } else {
            Err(format!("{on:?}"))
        }
    })
    .await;
    assert!(
        after.is_disjoint(&before),
        "not replaced: {before:?} -> {after:?}"
    );
    for id in &before {
        assert!(
            stderr.contains(&format!("{id}: node ")) && stderr.contains(" drained: "),
            "{id} was not drained:\n{stderr}"
        );
    }
    let evicted: usize = stderr
        .lines()
        .filter_map(|l| l.split(" drained: ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<usize>().ok())
        .sum();
    assert!(
        evicted >= 4,
        "the workers' pods were not evicted:\n{stderr}"
    );
    kubectl.wait_nodes_ready(INSTANCES, SETTLE).await;
    kubectl.wait_pods_ready("app=steady", 4, SETTLE).await;
    // Every node runs the new release's kubelet; the API servers answer as the new release.
    assert_eq!(
        kubelet_versions(&kubectl),
        [format!("v{TO_VERSION}")].into()
    );
    let version = kubectl.json(&["version", "-o", "json"]);
    assert_eq!(
        version["serverVersion"]["gitVersion"],
        format!("v{TO_VERSION}"),
        "{version}"
    );

    // The budget held: never fewer than 3 ready endpoints in any answered read.
    let watched = std::mem::take(&mut *watched.lock().expect("the watcher's record"));
    let least = watched.ready.iter().min().copied();
    println!(
        "roll of {INSTANCES} in {:.0} s: {} endpoint reads, least ready {least:?}, {} unanswered",
        rolled_in.as_secs_f64(),
        watched.ready.len(),
        watched.unanswered.len()
    );
    assert!(watched.ready.len() > 100, "the watcher read too little");
    assert!(
        least.is_some_and(|n| n >= MIN_AVAILABLE),
        "a read saw {least:?} ready endpoints (the budget is {MIN_AVAILABLE})"
    );

    // No acknowledged write was lost.
    let written = std::mem::take(&mut *written.lock().expect("the writer's record"));
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let stored: BTreeSet<String> = maps
        .list(&ListParams::default())
        .await
        .expect("the ConfigMaps")
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    let lost: Vec<&String> = written
        .acknowledged
        .iter()
        .filter(|n| !stored.contains(*n))
        .collect();
    println!(
        "{} writes acknowledged, {} not answered",
        written.acknowledged.len(),
        written.failed.len()
    );
    assert!(
        written.acknowledged.len() > 100,
        "the writer wrote too little"
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");

    // A control-plane instance loses power: its group replaces it, the replacement's node becomes Ready and
    // etcd heals, while the API keeps answering through its load balancer (the other two API servers); how long
    // it went unanswered, if at all, is measured and printed.
    let (ready_before, _) = kubectl.ready_nodes();
    let victim = cloud
        .powered_on()
        .into_iter()
        .find(|r| {
            r.autoscaling_group
                .as_deref()
                .is_some_and(|g| g.starts_with("control-plane-"))
        })
        .expect("a control-plane instance");
    let stop = Arc::new(AtomicBool::new(false));
    let reader = tokio::spawn({
        let (stop, client) = (stop.clone(), client.clone());
        async move {
            let mut reads: Vec<(Instant, bool)> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let request = http::Request::get("/readyz")
                    .body(Vec::new())
                    .expect("a request");
                let ok = client
                    .request_text(request)
                    .await
                    .is_ok_and(|t| t.trim() == "ok");
                reads.push((Instant::now(), ok));
                tokio::time::sleep(EVERY).await;
            }
            reads
        }
    });
    let cut = Instant::now();
    cloud
        .terminate(
            std::slice::from_ref(&victim.instance_id),
            ballast_e2e::localcloud::Termination::PowerCut,
        )
        .await;
    wait_until(SETTLE, "the replacement's node Ready", || async {
        let (ready, total) = kubectl.ready_nodes();
        let new = ready.iter().filter(|n| !ready_before.contains(*n)).count();
        if new == 1 && ready.len() == INSTANCES {
            Ok(())
        } else {
            Err(format!("{} of {total} Ready, {new} new", ready.len()))
        }
    })
    .await;
    let replaced = cut.elapsed();
    let healed = wait_until(SETTLE, "etcd healed and validate passing", || async {
        let checks = validate_checks(&cloud, CLUSTER);
        if checks.values().all(|(ok, _)| *ok)
            && checks
                .get("etcd")
                .is_some_and(|(_, r)| r.contains("3 voting members of 3"))
        {
            Ok(checks)
        } else {
            Err(format!("{checks:?}"))
        }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let reads = reader.await.expect("the reader");
    let (gap, unanswered) = longest_gap(&reads);
    println!(
        "power cut of {}: its replacement's node Ready in {:.0} s; /readyz through the load balancer: {} reads, \
         {unanswered} unanswered, the longest run unanswered {:.1} s; {}",
        victim.instance_id,
        replaced.as_secs_f64(),
        reads.len(),
        gap.as_secs_f64(),
        healed["etcd"].1
    );
    assert!(
        reads.last().is_some_and(|(_, ok)| *ok),
        "the API does not answer after the power cut"
    );
}
