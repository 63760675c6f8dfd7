//! The termination handler (`nodeup/src/termination/`) through its real loop: the emulator's SQS queue, Auto
//! Scaling groups with the `ballast-termination` hook (their instances held in `Terminating:Wait` by the
//! emulator's patch), EC2's tags, a file state store, and a local server playing the Kubernetes API for the drain.
//! The events are put into the queue as EventBridge would (the emulator has no EventBridge delivery).
//!
//! Shown: a worker's lifecycle action is completed only after its drain finished (its pod gone), and a
//! control-plane instance's only after its node answered the stop request; each message is deleted once handled.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::Router;
use ballast_e2e::aws::{sdk_config, shared_emulator};
use ballast_e2e::localcloud::{endpoint_addr, http};
use ballast_e2e::wait::wait_until;
use ballast_etcd::supervisor::StopOutcome;
use ballast_state::termination::{queue_name, TerminationHandlingSettings, HOOK_NAME};
use ballast_store::store::StateStore;
use nodeup::termination::handler::{Handler, KubeClients};
use nodeup::termination::stop::StopWatch;
use serde_json::{json, Value};

/// The fake API server's state: the worker's pods, and when each was evicted (it leaves 2 s later, as a pod
/// stopping gracefully would).
#[derive(Default)]
struct Fake {
    node: String,
    pods: BTreeMap<String, Option<Instant>>,
    log: Vec<String>,
}

type Shared = Arc<Mutex<Fake>>;
const POD_GRACE: Duration = Duration::from_secs(2);

fn reply(code: u16, body: Value) -> Response {
    (
        axum::http::StatusCode::from_u16(code).expect("status"),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn remaining(fake: &Fake) -> Vec<String> {
    fake.pods
        .iter()
        .filter(|(_, evicted)| evicted.is_none_or(|at| at.elapsed() < POD_GRACE))
        .map(|(name, _)| name.clone())
        .collect()
}

async fn patch_node(
    State(fake): State<Shared>,
    Path(name): Path<String>,
    body: String,
) -> Response {
    let mut fake = fake.lock().expect("lock");
    fake.log.push(format!("PATCH node {name} {body}"));
    reply(
        200,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                      "spec": {"unschedulable": true}}),
    )
}

async fn list_pods(State(fake): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let fake = fake.lock().expect("lock");
    let query = query
        .unwrap_or_default()
        .replace("%3D", "=")
        .replace("%3d", "=");
    let items: Vec<Value> = if query.contains(&format!("spec.nodeName={}", fake.node)) {
        remaining(&fake)
            .into_iter()
            .map(|name| {
                json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": fake.node, "containers": []}, "status": {"phase": "Running"}})
            })
            .collect()
    } else {
        Vec::new()
    };
    reply(
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}),
    )
}

async fn evict(State(fake): State<Shared>, Path((ns, name)): Path<(String, String)>) -> Response {
    let mut fake = fake.lock().expect("lock");
    fake.log.push(format!("POST eviction {ns}/{name}"));
    match fake.pods.get_mut(&name) {
        Some(evicted) => {
            evicted.get_or_insert_with(Instant::now);
            reply(
                201,
                json!({"apiVersion": "v1", "kind": "Status", "status": "Success", "metadata": {}}),
            )
        }
        None => reply(
            404,
            json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 404,
                                  "reason": "NotFound", "message": "pods not found", "metadata": {}}),
        ),
    }
}

async fn fake_api(fake: Shared) -> KubeClients {
    let app = Router::new()
        .route("/api/v1/nodes/{name}", patch(patch_node))
        .route("/api/v1/pods", get(list_pods))
        .route("/api/v1/namespaces/{ns}/pods/{name}/eviction", post(evict))
        .with_state(fake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    Arc::new(move || {
        Box::pin(async move {
            let url: http::Uri = format!("http://{addr}")
                .parse()
                .map_err(|e| format!("{e}"))?;
            let mut config = kube::Config::new(url);
            config.default_retry = false;
            kube::Client::try_from(config).map_err(|e| e.to_string())
        })
    })
}

/// The pending lifecycle actions the emulator holds: instance id -> token.
fn pending(endpoint: &str) -> BTreeMap<String, String> {
    let (code, body) = http(
        endpoint_addr(endpoint),
        "GET",
        "/_ballast/lifecycle-actions",
        &[],
    )
    .expect("lifecycle actions");
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    v["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| {
            (
                a["instance_id"].as_str().unwrap_or_default().to_string(),
                a["lifecycle_action_token"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// The event EventBridge puts into the queue for a terminating lifecycle action.
fn lifecycle_event(group: &str, instance_id: &str, token: &str) -> String {
    json!({
        "version": "0", "id": "4cf6f1b8-8b3b-4a7e-9f41-0d5b4c2e8f10",
        "detail-type": "EC2 Instance-terminate Lifecycle Action", "source": "aws.autoscaling",
        "account": "123456789012", "time": "2026-12-03T00:00:00Z", "region": "us-west-2",
        "resources": [format!("arn:aws:autoscaling:us-west-2:123456789012:autoScalingGroup:x:autoScalingGroupName/{group}")],
        "detail": {
            "LifecycleActionToken": token, "AutoScalingGroupName": group, "LifecycleHookName": HOOK_NAME,
            "EC2InstanceId": instance_id, "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
            "Origin": "AutoScalingGroup", "Destination": "EC2"
        }
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn actions_are_completed_only_after_the_drain_or_the_members_stop() {
    let emulator = shared_emulator();
    let endpoint = emulator.endpoint().to_string();
    let config = sdk_config().await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let asg = aws_sdk_autoscaling::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let cluster = format!("th{}.example.com", std::process::id());

    let vpc = ec2
        .create_vpc()
        .cidr_block("10.77.0.0/16")
        .send()
        .await
        .expect("vpc");
    let vpc_id = vpc
        .vpc()
        .and_then(|v| v.vpc_id())
        .expect("vpc id")
        .to_string();
    let subnet = ec2
        .create_subnet()
        .vpc_id(&vpc_id)
        .cidr_block("10.77.1.0/24")
        .availability_zone("us-west-2a")
        .send()
        .await
        .expect("subnet");
    let subnet_id = subnet
        .subnet()
        .and_then(|s| s.subnet_id())
        .expect("subnet id")
        .to_string();
    let images = ec2.describe_images().send().await.expect("images");
    let image = images.images()[0].image_id().expect("image").to_string();
    let template = ec2
        .create_launch_template()
        .launch_template_name(format!("th-{}", std::process::id()))
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id(&image)
                .instance_type(aws_sdk_ec2::types::InstanceType::T3Medium)
                .build(),
        )
        .send()
        .await
        .expect("template");
    let template_id = template
        .launch_template()
        .and_then(|t| t.launch_template_id())
        .expect("id")
        .to_string();

    let mut instances = BTreeMap::new();
    for (group, role) in [
        ("nodes", "node"),
        ("control-plane-us-west-2a", "control-plane"),
    ] {
        let name = format!("{group}.{cluster}");
        let tag = |k: &str, v: &str| {
            aws_sdk_autoscaling::types::Tag::builder()
                .key(k)
                .value(v)
                .propagate_at_launch(true)
                .build()
        };
        asg.create_auto_scaling_group()
            .auto_scaling_group_name(&name)
            .min_size(0)
            .max_size(2)
            .desired_capacity(1)
            .launch_template(
                aws_sdk_autoscaling::types::LaunchTemplateSpecification::builder()
                    .launch_template_id(&template_id)
                    .build(),
            )
            .vpc_zone_identifier(&subnet_id)
            .tags(tag("ballast.dev/cluster", &cluster))
            .tags(tag("ballast.dev/role", role))
            .send()
            .await
            .expect("group");
        asg.put_lifecycle_hook()
            .auto_scaling_group_name(&name)
            .lifecycle_hook_name(HOOK_NAME)
            .lifecycle_transition("autoscaling:EC2_INSTANCE_TERMINATING")
            .heartbeat_timeout(300)
            .default_result("CONTINUE")
            .send()
            .await
            .expect("hook");
        let groups = asg
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(&name)
            .send()
            .await
            .expect("groups");
        let id = groups.auto_scaling_groups()[0].instances()[0]
            .instance_id()
            .expect("instance")
            .to_string();
        instances.insert(role, (name, id));
    }
    let (worker_group, worker) = instances["node"].clone();
    let (cp_group, control_plane) = instances["control-plane"].clone();
    let described = ec2
        .describe_instances()
        .instance_ids(&worker)
        .send()
        .await
        .expect("describe");
    let node = described.reservations()[0].instances()[0]
        .private_dns_name()
        .expect("dns")
        .to_string();
    assert!(!node.is_empty(), "the worker has a private DNS name");

    let queue_url = sqs
        .create_queue()
        .queue_name(queue_name(&cluster))
        .send()
        .await
        .expect("queue")
        .queue_url()
        .expect("url")
        .to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod");
    let store = StateStore::open(
        &format!("file://{}", dir.path().display()),
        Default::default(),
    )
    .await
    .expect("store");
    let fake: Shared = Arc::new(Mutex::new(Fake {
        node: node.clone(),
        pods: BTreeMap::from([("web".to_string(), None)]),
        log: Vec::new(),
    }));
    let kube = fake_api(fake.clone()).await;

    let handler = Handler {
        cluster: cluster.clone(),
        settings: TerminationHandlingSettings {
            queue_name: queue_name(&cluster),
            lifecycle_hook: HOOK_NAME.to_string(),
            heartbeat_seconds: 30,
        },
        sqs: sqs.clone(),
        autoscaling: asg.clone(),
        ec2: ec2.clone(),
        store: store.clone(),
        kube,
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(handler.run(async {
        let _ = stop_rx.await;
    }));
    // The control-plane node's side: its watch answers the request as its supervisor would once stopped.
    let answered: Arc<Mutex<Option<Instant>>> = Arc::default();
    let watch = StopWatch::new(store.clone(), &cluster, &control_plane);
    let answered_by_node = answered.clone();
    let node_side = tokio::spawn(async move {
        let request = watch.requested().await;
        // What a follower's stop costs at most before its answer: the handler must wait for it.
        tokio::time::sleep(Duration::from_secs(2)).await;
        watch.acknowledge(request, &StopOutcome::Follower).await;
        *answered_by_node.lock().expect("lock") = Some(Instant::now());
    });

    // The worker: terminated by its group, held, announced; completed only once its pod is gone.
    asg.terminate_instance_in_auto_scaling_group()
        .instance_id(&worker)
        .should_decrement_desired_capacity(false)
        .send()
        .await
        .expect("terminate worker");
    let token = pending(&endpoint)
        .get(&worker)
        .cloned()
        .expect("the worker's action waits");
    sqs.send_message()
        .queue_url(&queue_url)
        .message_body(lifecycle_event(&worker_group, &worker, &token))
        .send()
        .await
        .expect("send");
    let started = Instant::now();
    loop {
        let waiting = pending(&endpoint).contains_key(&worker);
        let pods_left = !remaining(&fake.lock().expect("lock")).is_empty();
        assert!(
            waiting || !pods_left,
            "the worker's action was completed while its pod was still on it"
        );
        if !waiting {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the worker's action was never completed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = fake.lock().expect("lock").log.clone();
    assert!(
        log.iter()
            .any(|l| l.starts_with(&format!("PATCH node {node}"))
                && l.contains("\"unschedulable\":true")),
        "cordoned first: {log:?}"
    );
    assert!(
        log.iter().any(|l| l == "POST eviction default/web"),
        "its pod evicted: {log:?}"
    );
    let worker_state = ec2
        .describe_instances()
        .instance_ids(&worker)
        .send()
        .await
        .expect("describe");
    let state = worker_state.reservations()[0].instances()[0]
        .state()
        .and_then(|s| s.name())
        .cloned();
    assert_eq!(
        state,
        Some(aws_sdk_ec2::types::InstanceStateName::Terminated)
    );

    // The control-plane instance: completed only once its node answered the stop request.
    asg.terminate_instance_in_auto_scaling_group()
        .instance_id(&control_plane)
        .should_decrement_desired_capacity(false)
        .send()
        .await
        .expect("terminate control plane");
    let token = pending(&endpoint)
        .get(&control_plane)
        .cloned()
        .expect("the control plane's action waits");
    sqs.send_message()
        .queue_url(&queue_url)
        .message_body(lifecycle_event(&cp_group, &control_plane, &token))
        .send()
        .await
        .expect("send");
    let started = Instant::now();
    loop {
        let waiting = pending(&endpoint).contains_key(&control_plane);
        let stopped = answered.lock().expect("lock").is_some();
        assert!(
            waiting || stopped,
            "the control plane's action was completed before its member stopped"
        );
        if !waiting {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the control plane's action was never completed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    node_side.await.expect("the node's side ended");
    // The handler deletes the answered request once the action is completed.
    let key = ballast_state::layout::ClusterPaths::new(&cluster).etcd_stop_request(&control_plane);
    wait_until(
        Duration::from_secs(30),
        "the stop request deleted",
        || async { store.get(&key).await.ok().flatten().is_none() },
    )
    .await;

    // Both messages deleted once handled: none left, visible or not.
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(
            aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        )
        .send()
        .await
        .expect("attributes");
    let counts: Vec<String> = attributes
        .attributes()
        .map(|a| a.values().cloned().collect())
        .unwrap_or_default();
    assert!(
        counts.iter().all(|c| c == "0"),
        "messages left in the queue: {counts:?}"
    );
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the handler stops")
        .expect("no panic");
}
