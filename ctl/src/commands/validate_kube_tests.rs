//! The Kubernetes checks' judgement (pure), and `observe` against a local HTTP server playing the API (on
//! 127.0.0.1, through kube's real client), as the drain's tests do.

use axum::routing::get;
use axum::Router;
use ballast_state::report::{ServiceReport, ServiceState};
use serde_json::json;

use super::*;

fn report(kubelet: ServiceState) -> NodeReport {
    let mut report = NodeReport::new("i-1", "0.1.0", "2026-01-01T00:00:00Z");
    report.services.push(ServiceReport {
        name: "kubelet".into(),
        state: kubelet,
        detail: None,
    });
    report
}

#[test]
fn the_api_is_expected_once_a_control_plane_kubelet_runs() {
    let absent = report(ServiceState::Absent);
    let started = report(ServiceState::Started);
    let reason = api_not_expected(&[("i-1", &absent), ("i-2", &absent)]).expect("not expected");
    assert!(
        reason.contains("no control-plane instance reports a running kubelet (i-1, i-2)"),
        "{reason}"
    );
    assert_eq!(
        api_not_expected(&[("i-1", &absent), ("i-2", &started)]),
        None
    );
    assert_eq!(
        api_not_expected(&[("i-1", &report(ServiceState::Unchanged))]),
        None
    );
    // A report without services (nodeup failed before them) shows no kubelet either.
    let bare = NodeReport::new("i-3", "0.1.0", "2026-01-01T00:00:00Z");
    assert!(api_not_expected(&[("i-3", &bare)]).is_some());
    let none = api_not_expected(&[]).expect("nothing reported");
    assert!(
        none.contains("no control-plane instance has reported yet"),
        "{none}"
    );
}

fn node(name: &str, ready: bool, id: Option<&str>, ip: &str) -> NodeSeen {
    NodeSeen {
        name: name.into(),
        ready,
        provider_id: id.map(|id| format!("aws:///us-west-2a/{id}")),
        internal_ips: vec![ip.into()],
    }
}

fn instance(id: &str, ip: &str) -> ExpectedNode {
    ExpectedNode {
        instance_id: id.into(),
        group: "nodes".into(),
        private_ip: Some(ip.into()),
    }
}

#[test]
fn nodes_must_be_ready_and_match_the_instances() {
    let expected = [instance("i-a", "10.0.0.1"), instance("i-b", "10.0.0.2")];
    let facts = KubeFacts {
        nodes: vec![
            node("a", true, Some("i-a"), "10.9.9.9"),
            // No providerID yet (the cloud controller has not run): matched by its address.
            node("b", true, None, "10.0.0.2"),
        ],
        kube_system_pods: vec![],
    };
    assert_eq!(
        judge_nodes(&facts, &expected),
        (
            true,
            "2 of 2 instances in service are Ready Nodes".to_string()
        )
    );
    let facts = KubeFacts {
        nodes: vec![
            node("a", false, Some("i-a"), "10.0.0.1"),
            node("old", true, Some("i-gone"), "10.0.0.7"),
        ],
        kube_system_pods: vec![],
    };
    let (ok, reason) = judge_nodes(&facts, &expected);
    assert!(!ok);
    assert_eq!(
        reason,
        "Node a (i-a) is not Ready; i-b (nodes) has no Node: its kubelet has not registered; Node old matches no \
         instance in service (a terminated instance's Node, or not this cluster's)"
    );
}

#[test]
fn kube_system_pods_must_run_ready() {
    let pod = |name: &str, phase: &str, ready: bool| PodSeen {
        name: name.into(),
        phase: phase.into(),
        ready,
    };
    let (ok, reason) = judge_pods(&KubeFacts::default());
    assert!(!ok && reason.contains("no pod in kube-system"), "{reason}");
    let facts = KubeFacts {
        nodes: vec![],
        kube_system_pods: vec![
            pod("coredns-1", "Running", true),
            pod("job-1", "Succeeded", false),
        ],
    };
    assert_eq!(
        judge_pods(&facts),
        (true, "2 kube-system pods running".to_string())
    );
    let facts = KubeFacts {
        nodes: vec![],
        kube_system_pods: vec![
            pod("coredns-1", "Running", false),
            pod("calico-node-x", "Pending", false),
            pod("kube-proxy-y", "Running", true),
        ],
    };
    assert_eq!(
        judge_pods(&facts),
        (
            false,
            "not running: coredns-1 (Running, not ready), calico-node-x (Pending, not ready)"
                .to_string()
        )
    );
}

async fn fake_api() -> Client {
    let nodes = json!({"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": [
        {"metadata": {"name": "ip-10-0-0-1"}, "spec": {"providerID": "aws:///us-west-2a/i-a"},
         "status": {"conditions": [{"type": "Ready", "status": "True"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}},
        {"metadata": {"name": "ip-10-0-0-2"}, "spec": {},
         "status": {"conditions": [{"type": "Ready", "status": "False"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}}]});
    let pods = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
        {"metadata": {"name": "coredns-1", "namespace": "kube-system"},
         "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
        {"metadata": {"name": "kube-proxy-1", "namespace": "kube-system"}, "status": {"phase": "Pending"}}]});
    let app = Router::new()
        .route(
            "/api/v1/nodes",
            get(move || {
                let nodes = nodes.clone();
                async move { json_response(nodes) }
            }),
        )
        .route(
            "/api/v1/namespaces/kube-system/pods",
            get(move || {
                let pods = pods.clone();
                async move { json_response(pods) }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
    config.default_retry = false;
    Client::try_from(config).expect("client")
}

#[tokio::test]
async fn observe_reads_nodes_and_pods_through_the_api() {
    let client = fake_api().await;
    let facts = observe(&client, Duration::from_secs(5))
        .await
        .expect("observed");
    assert_eq!(
        facts.nodes,
        vec![
            node("ip-10-0-0-1", true, Some("i-a"), "10.0.0.1"),
            NodeSeen {
                name: "ip-10-0-0-2".into(),
                ready: false,
                provider_id: None,
                internal_ips: vec!["10.0.0.2".into()],
            }
        ]
    );
    let (ok, reason) = judge_nodes(
        &facts,
        &[instance("i-a", "10.0.0.1"), instance("i-b", "10.0.0.2")],
    );
    assert!(!ok);
    assert_eq!(reason, "Node ip-10-0-0-2 (i-b) is not Ready");
    let (ok, reason) = judge_pods(&facts);
    assert!(!ok);
    assert_eq!(reason, "not running: kube-proxy-1 (Pending, not ready)");
}

#[tokio::test]
async fn an_unreachable_api_is_an_error_naming_what_failed() {
    // A port nothing listens on: bind one, then close it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let mut config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
    config.default_retry = false;
    let client = Client::try_from(config).expect("client");
    let err = observe(&client, Duration::from_secs(5))
        .await
        .expect_err("unreachable")
        .to_string();
    assert!(err.starts_with("listing Nodes: "), "{err}");
}

/// A JSON body (axum's `Json` is not built in this workspace).
fn json_response(body: serde_json::Value) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
