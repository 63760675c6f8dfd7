//! The drain against a local HTTP server playing the Kubernetes API (on 127.0.0.1, through kube's real client
//! and its HTTP stack): cordon, evictions a disruption budget refuses and then allows, pods a drain leaves.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::Router;
use serde_json::{json, Value};

use super::*;

#[derive(Default)]
struct Fake {
    /// Node name -> cordoned.
    nodes: BTreeMap<String, bool>,
    /// (namespace, name) -> the pod's JSON.
    pods: BTreeMap<(String, String), Value>,
    /// Evictions of a pod still to refuse with 429.
    refuse: BTreeMap<String, usize>,
    /// Every request, `METHOD path`.
    log: Vec<String>,
}

type Shared = Arc<Mutex<Fake>>;

fn reply(code: StatusCode, body: Value) -> Response {
    (
        code,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": if code < 300 { "Success" } else { "Failure" },
           "code": code, "reason": reason, "message": message, "metadata": {}})
}

fn node_json(name: &str, cordoned: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "spec": {"unschedulable": cordoned},
           "status": {"conditions": [{"type": "Ready", "status": if name == "sick" { "False" } else { "True" }}]}})
}

async fn patch_node(
    State(fake): State<Shared>,
    Path(name): Path<String>,
    body: String,
) -> Response {
    let mut fake = fake.lock().expect("lock");
    fake.log.push(format!("PATCH node {name} {body}"));
    match fake.nodes.get_mut(&name) {
        None => reply(
            StatusCode::NOT_FOUND,
            status(404, "NotFound", "nodes not found"),
        ),
        Some(cordoned) => {
            *cordoned = body.contains("\"unschedulable\":true");
            let c = *cordoned;
            reply(StatusCode::OK, node_json(&name, c))
        }
    }
}

async fn get_node(State(fake): State<Shared>, Path(name): Path<String>) -> Response {
    let fake = fake.lock().expect("lock");
    match fake.nodes.get(&name) {
        None => reply(
            StatusCode::NOT_FOUND,
            status(404, "NotFound", "nodes not found"),
        ),
        Some(c) => reply(StatusCode::OK, node_json(&name, *c)),
    }
}

async fn list_pods(State(fake): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let mut fake = fake.lock().expect("lock");
    let query = query.unwrap_or_default();
    fake.log.push(format!("GET pods {query}"));
    let wanted = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("fieldSelector="))
        .map(|v| v.replace("%3D", "=").replace("%3d", "="))
        .and_then(|v| v.strip_prefix("spec.nodeName=").map(str::to_string));
    let items: Vec<Value> = fake
        .pods
        .values()
        .filter(|p| wanted.as_deref().is_none_or(|n| p["spec"]["nodeName"] == n))
        .cloned()
        .collect();
    reply(
        StatusCode::OK,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}),
    )
}

async fn evict(State(fake): State<Shared>, Path((ns, name)): Path<(String, String)>) -> Response {
    let mut fake = fake.lock().expect("lock");
    fake.log.push(format!("POST eviction {ns}/{name}"));
    if let Some(left) = fake.refuse.get_mut(&name) {
        if *left > 0 {
            *left -= 1;
            return reply(
                StatusCode::TOO_MANY_REQUESTS,
                status(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                ),
            );
        }
    }
    match fake.pods.remove(&(ns, name)) {
        None => reply(
            StatusCode::NOT_FOUND,
            status(404, "NotFound", "pods not found"),
        ),
        Some(_) => reply(StatusCode::CREATED, status(201, "", "")),
    }
}

fn pod(ns: &str, name: &str, node: &str, extra: Value) -> ((String, String), Value) {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns}, "spec": {"nodeName": node, "containers": []},
        "status": {"phase": "Running"}});
    if let (Some(target), Some(extra)) = (pod.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            match (target.get_mut(k), v) {
                (Some(Value::Object(t)), Value::Object(v)) => {
                    t.extend(v.clone());
                }
                _ => {
                    target.insert(k.clone(), v.clone());
                }
            }
        }
    }
    ((ns.to_string(), name.to_string()), pod)
}

/// A fake API server on 127.0.0.1 and a kube client of it.
async fn serve(fake: Fake, timeout: Duration) -> (Kubernetes, Shared) {
    let shared: Shared = Arc::new(Mutex::new(fake));
    let app = Router::new()
        .route("/api/v1/nodes/{name}", patch(patch_node).get(get_node))
        .route("/api/v1/pods", get(list_pods))
        .route("/api/v1/namespaces/{ns}/pods/{name}/eviction", post(evict))
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let url: http::Uri = format!("http://{addr}").parse().expect("url");
    let mut config = kube::Config::new(url);
    config.default_retry = false;
    let client = Client::try_from(config).expect("client");
    (Kubernetes::with_client(client, timeout), shared)
}

fn cluster() -> Fake {
    let mut fake = Fake::default();
    fake.nodes.insert("node-a".into(), false);
    fake.nodes.insert("node-b".into(), false);
    fake.nodes.insert("sick".into(), false);
    let daemon = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
        "name": "cni", "uid": "u1", "controller": true}]}});
    let mirror = json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "abc"}}});
    let done = json!({"status": {"phase": "Succeeded"}});
    for (k, v) in [
        pod("default", "web-1", "node-a", json!({})),
        pod("default", "db-0", "node-a", json!({})),
        pod("kube-system", "cni-x", "node-a", daemon),
        pod("kube-system", "static-x", "node-a", mirror),
        pod("default", "job-x", "node-a", done),
        pod("default", "web-2", "node-b", json!({})),
    ] {
        fake.pods.insert(k, v);
    }
    fake
}

#[tokio::test]
async fn a_drain_cordons_then_evicts_retrying_what_a_budget_refuses() {
    let mut fake = cluster();
    fake.refuse.insert("db-0".into(), 2);
    let (kube, shared) = serve(fake, Duration::from_secs(60)).await;
    let drained = kube.drain("node-a").await.expect("drained");
    assert_eq!(
        drained,
        Drained {
            node_missing: false,
            evicted: 2,
            refused: 2
        }
    );
    let fake = shared.lock().expect("lock");
    assert_eq!(fake.nodes.get("node-a"), Some(&true), "cordoned");
    assert_eq!(fake.nodes.get("node-b"), Some(&false), "only this node");
    // The cordon comes first; the DaemonSet's, the mirror and the finished pod stay; the other node's pod stays.
    assert!(
        fake.log[0].starts_with("PATCH node node-a"),
        "{:?}",
        fake.log
    );
    let left: Vec<&str> = fake.pods.keys().map(|(_, n)| n.as_str()).collect();
    assert_eq!(left, ["job-x", "web-2", "cni-x", "static-x"]);
    let db_evictions = fake
        .log
        .iter()
        .filter(|l| *l == "POST eviction default/db-0")
        .count();
    assert_eq!(db_evictions, 3, "{:?}", fake.log);
}

#[tokio::test]
async fn a_budget_that_never_allows_times_out_naming_the_pod() {
    let mut fake = cluster();
    fake.refuse.insert("db-0".into(), usize::MAX);
    let (kube, shared) = serve(fake, Duration::from_millis(300)).await;
    let error = kube.drain("node-a").await.expect_err("times out");
    let message = error.to_string();
    assert!(matches!(error, DrainError::Timeout { .. }), "{message}");
    assert!(message.contains("default/db-0"), "{message}");
    assert!(!message.contains("web-1"), "{message}");
    // Nothing but the stubborn pod is left to evict.
    assert!(shared
        .lock()
        .expect("lock")
        .pods
        .contains_key(&("default".into(), "db-0".into())));
}

#[tokio::test]
async fn a_batch_drains_its_nodes_together_and_names_the_one_that_fails() {
    let mut fake = cluster();
    // node-a's db-0 is refused once by its budget, so node-a's drain waits one retry (2 s) for it.
    fake.refuse.insert("db-0".into(), 1);
    // node-c's only pod is one a budget never lets go.
    fake.nodes.insert("node-c".into(), false);
    let (key, value) = pod("default", "stuck-0", "node-c", json!({}));
    fake.pods.insert(key, value);
    fake.refuse.insert("stuck-0".into(), usize::MAX);
    let (kube, shared) = serve(fake, Duration::from_secs(3)).await;
    let names = ["node-a", "node-b", "node-c"].map(String::from);
    let outcomes = kube.drain_all(&names).await;

    // Every node answered, in the order given.
    let order: Vec<&str> = outcomes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(order, names);
    let a = outcomes[0].1.as_ref().expect("node-a drained");
    assert_eq!((a.evicted, a.refused), (2, 1));
    let b = outcomes[1].1.as_ref().expect("node-b drained");
    assert_eq!((b.evicted, b.refused), (1, 0));
    // The failure names its node and the pod left on it.
    let error = outcomes[2].1.as_ref().expect_err("node-c times out");
    let message = error.to_string();
    assert!(matches!(error, DrainError::Timeout { .. }), "{message}");
    assert!(
        message.contains("draining node node-c") && message.contains("default/stuck-0"),
        "{message}"
    );

    let fake = shared.lock().expect("lock");
    // All three cordoned; every pod a drain evicts gone but the stubborn one.
    for node in ["node-a", "node-b", "node-c"] {
        assert_eq!(fake.nodes.get(node), Some(&true), "{node} cordoned");
    }
    assert_eq!(
        fake.nodes.get("sick"),
        Some(&false),
        "only the batch's nodes"
    );
    let left: Vec<&str> = fake.pods.keys().map(|(_, n)| n.as_str()).collect();
    assert_eq!(left, ["job-x", "stuck-0", "cni-x", "static-x"]);
    // They overlapped: node-b was cordoned and drained, and node-c cordoned and first refused, while node-a's
    // drain still waited on its budget (its second eviction of db-0 comes one retry, 2 s, after the first).
    // One after another, node-a's drain would have ended before node-b's began.
    let at = |line: &str| {
        fake.log
            .iter()
            .position(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no {line:?} in {:?}", fake.log))
    };
    let db_retried = fake
        .log
        .iter()
        .rposition(|l| l == "POST eviction default/db-0")
        .expect("db-0 evicted");
    assert!(
        at("POST eviction default/db-0") < db_retried,
        "{:?}",
        fake.log
    );
    for other in [
        "PATCH node node-b",
        "POST eviction default/web-2",
        "PATCH node node-c",
        "POST eviction default/stuck-0",
    ] {
        assert!(
            at(other) < db_retried,
            "{other} before node-a's drain ended: {:?}",
            fake.log
        );
    }
}

#[tokio::test]
async fn a_node_kubernetes_does_not_have_needs_no_drain_and_readiness_is_read() {
    let (kube, shared) = serve(cluster(), Duration::from_secs(5)).await;
    let drained = kube.drain("ip-127-0-0-9").await.expect("no node");
    assert!(drained.node_missing);
    assert_eq!(drained.evicted, 0);
    assert_eq!(shared.lock().expect("lock").pods.len(), 6);
    assert!(kube.node_ready("node-b").await.expect("read"));
    assert!(!kube.node_ready("sick").await.expect("read"));
    assert!(!kube.node_ready("absent").await.expect("read"));
}

#[test]
fn which_pods_a_drain_evicts() {
    let (_, plain) = pod("d", "p", "n", json!({}));
    let plain: Pod = serde_json::from_value(plain).expect("pod");
    assert!(must_evict(&plain));
    let (_, owned) = pod(
        "d",
        "p",
        "n",
        json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r",
            "uid": "u", "controller": true}]}}),
    );
    let owned: Pod = serde_json::from_value(owned).expect("pod");
    assert!(must_evict(&owned), "a ReplicaSet's pod is evicted");
    let (_, failed) = pod("d", "p", "n", json!({"status": {"phase": "Failed"}}));
    let failed: Pod = serde_json::from_value(failed).expect("pod");
    assert!(!must_evict(&failed));
}
