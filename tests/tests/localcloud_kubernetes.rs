//! Real Kubernetes on a cluster of machines: on the control-plane machine the kubelet built here runs
//! kube-apiserver, the controller manager and the scheduler as static pods from the images built here, the API
//! answers through the API's network load balancer from the operator's host, and a worker joins through the same
//! load balancer by its DNS name, which the VPC's resolver answers inside the VPC.
//!
//! What it holds, on a 1 + 2 kubenet cluster with this host's needs in its spec (`kubelet.failCgroupV1: false`:
//! the host is cgroup v1; `kubelet.evictionHard` at 1% for the disks: the host's disk is shared and nearly full;
//! `kubeProxy.conntrackMaxPerCore: 0`: a machine may not set the kernel's connection-tracking limit):
//! - `validate cluster`'s API check answers through the load balancer;
//! - `export kubeconfig --admin` gives a kubectl (the one built here) that reads `/readyz` through it and finds
//!   the control plane's static pods running;
//! - the add-on applier applied the release's add-ons with the images the AMI holds, by the digests its store
//!   holds them under (CoreDNS's, which upstream publishes no pin for, built here);
//! - every node registered, under EC2's private DNS names, at their VPC addresses, running the kubelet and
//!   containerd built here, and Ready: kubenet's bridge from the PodCIDR the controller manager gave each;
//! - the cloud controller manager (scheduled on the control-plane node, which nodeup labels so) initializes all
//!   nodes through the AWS endpoint its node was given, and its route controller writes a route per node's
//!   PodCIDR into the cluster's route table;
//! - CoreDNS becomes available;
//! - a workload (agnhost's netexec, the image the AMI holds, one pod per worker) runs: a pod reaches the other
//!   worker's pod by its pod IP (through the VPC's routes), resolves a Service's name and `kubernetes.default`
//!   through CoreDNS, and reaches them through kube-proxy;
//! - `validate` passes every check; with one worker's kubelet stopped (`localcloud exec`) it fails naming that
//!   node, and passes again when the kubelet runs.
//!
//! Needs root, the Go builds and the emulator (`tools/install-deps`); fails, never skips.

use std::time::Duration;

use ballast_e2e::image::require_root;
use ballast_e2e::kube_machines::{baked_image, create_kubenet_cluster, netexec, Kubectl};
use ballast_e2e::localcloud::{LocalCloud, MachineOptions, Options};
use ballast_e2e::operator::{validate_checks, ZONES};
use ballast_e2e::wait::wait_until;

const CLUSTER: &str = "kube.example.com";
/// One control-plane node and two workers.
const NODES: usize = 3;
/// Three machines booting systemd, containerd, etcd and a control plane on two cores.
const SETTLE: Duration = Duration::from_secs(300);

fn checks(cloud: &LocalCloud) -> std::collections::BTreeMap<String, (bool, String)> {
    validate_checks(cloud, CLUSTER)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_of_machines_runs_the_kubernetes_control_plane() {
    require_root();
    let cloud = LocalCloud::start_with(Options {
        machines: Some(MachineOptions::default_release()),
        ..Options::default()
    });
    let zone = ZONES.split(',').next().expect("a zone");
    let dir = tempfile::tempdir().expect("a temporary directory");
    create_kubenet_cluster(&cloud, CLUSTER, zone, 2, dir.path()).await;

    // The API answers through its load balancer.
    let valid = wait_until(SETTLE, "the API through its load balancer", || async {
        let checks = checks(&cloud);
        let ok = |name: &str| checks.get(name).is_some_and(|(ok, _)| *ok);
        if ok("kubernetes API") && ok("etcd") {
            Ok(checks)
        } else {
            Err(format!("{checks:?}"))
        }
    })
    .await;
    // The host reached it at the address the cloud's hosts file gives its name; so does the exported kubeconfig.
    let kubectl = Kubectl::export(&cloud, CLUSTER, dir.path()).await;
    let address = kubectl.address.clone();
    assert!(
        valid["kubernetes API"]
            .1
            .contains(&format!("https://{address}:443")),
        "{valid:?}"
    );

    // Ready once its post-start hooks (the bootstrap roles and priority classes) are done.
    let ready = wait_until(SETTLE, "the API server ready", || async {
        kubectl.try_run(&["get", "--raw", "/readyz"])
    })
    .await;
    assert_eq!(ready.trim(), "ok");
    wait_until(
        SETTLE,
        "the control plane's static pods running",
        || async {
            let pods = kubectl.json(&["get", "pods", "-n", "kube-system", "-o", "json"]);
            let missing: Vec<&str> = [
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
            ]
            .into_iter()
            .filter(|component| {
                !pods["items"].as_array().into_iter().flatten().any(|p| {
                    p["metadata"]["labels"]["component"] == *component
                        && p["status"]["phase"] == "Running"
                })
            })
            .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("not running: {missing:?}"))
            }
        },
    )
    .await;
    let coredns = wait_until(SETTLE, "the add-ons applied", || async {
        kubectl
            .try_run(&[
                "get",
                "deployment",
                "coredns",
                "-n",
                "kube-system",
                "-o",
                "jsonpath={.spec.template.spec.containers[0].image}",
            ])
            .and_then(|image| {
                if image.is_empty() {
                    Err("no image yet".to_string())
                } else {
                    Ok(image)
                }
            })
    })
    .await;
    let (reference, digest) = baked_image("/coredns/");
    assert_eq!(coredns, format!("{reference}@{digest}"));

    // Every node registered (the workers through the load balancer's name, resolved inside the VPC) and Ready:
    // kubenet's bridge from the PodCIDR the controller manager gave each.
    let nodes = kubectl.wait_nodes_ready(NODES, SETTLE).await;
    let instances = cloud.powered_on();
    for node in nodes["items"].as_array().expect("nodes") {
        let node_name = node["metadata"]["name"].as_str().expect("a name");
        let address = node["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == "InternalIP")
            .and_then(|a| a["address"].as_str())
            .expect("an internal address");
        let instance = instances
            .iter()
            .find(|r| r.private_ip == address)
            .unwrap_or_else(|| panic!("{node_name} at {address} is no instance: {instances:#?}"));
        assert!(
            node_name.starts_with(&format!("ip-{}.", address.replace('.', "-"))),
            "{node_name} is not {}'s private DNS name",
            instance.instance_id
        );
        let info = &node["status"]["nodeInfo"];
        assert_eq!(
            info["kubeletVersion"],
            format!("v{}", ballast_state::defaults::DEFAULT_KUBERNETES_VERSION)
        );
        assert!(
            info["containerRuntimeVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("containerd://2.")),
            "{info}"
        );
        assert!(
            node["spec"]["podCIDR"]
                .as_str()
                .is_some_and(|c| c.starts_with("100.")),
            "{node_name} has no PodCIDR from the cluster's: {node}"
        );
    }

    // The cloud controller manager (on the control-plane node, which nodeup labelled so) initialized every
    // node through the AWS endpoint its node was given: provider IDs, and the uninitialized taint gone.
    wait_until(
        SETTLE,
        "the nodes initialized by the cloud controller",
        || async {
            let nodes = kubectl.json(&["get", "nodes", "-o", "json"]);
            let waiting: Vec<String> = nodes["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|n| {
                    !n["spec"]["providerID"]
                        .as_str()
                        .is_some_and(|p| p.starts_with("aws:///us-west-2a/i-"))
                        || n["spec"]["taints"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|t| t["key"] == "node.cloudprovider.kubernetes.io/uninitialized")
                })
                .map(|n| n["metadata"]["name"].to_string())
                .collect();
            if waiting.is_empty() {
                Ok(())
            } else {
                Err(format!("not initialized: {waiting:?}"))
            }
        },
    )
    .await;

    // Its route controller wrote a route per node's PodCIDR into the cluster's route table.
    let routes = wait_until(SETTLE, "the routes to the nodes' pods", || async {
        let tables = cloud
            .ec2()
            .describe_route_tables()
            .send()
            .await
            .map_err(|e| aws_sdk_ec2::error::DisplayErrorContext(e).to_string())?;
        let routes: Vec<(String, String)> = tables
            .route_tables()
            .iter()
            .flat_map(|t| t.routes())
            .filter_map(|r| {
                Some((
                    r.destination_cidr_block()?.to_string(),
                    r.instance_id()?.to_string(),
                ))
            })
            .collect();
        if routes.len() >= NODES {
            Ok(routes)
        } else {
            Err(format!("routes to instances: {routes:?}"))
        }
    })
    .await;
    for (destination, instance) in &routes {
        assert!(
            destination.starts_with("100.96."),
            "{destination} -> {instance}"
        );
    }

    // CoreDNS runs, its pods on kubenet's bridge.
    wait_until(SETTLE, "CoreDNS available", || async {
        let available = kubectl.try_run(&[
            "get",
            "deployment",
            "coredns",
            "-n",
            "kube-system",
            "-o",
            "jsonpath={.status.availableReplicas}",
        ])?;
        if available.trim().parse::<u32>().is_ok_and(|n| n >= 1) {
            Ok(())
        } else {
            Err(format!("available: {available:?}"))
        }
    })
    .await;

    // A workload: one netexec pod on each worker, behind a Service.
    kubectl.apply(dir.path(), "web.yaml", &netexec("web", 2, true));
    let pods = kubectl.wait_pods_ready("app=web", 2, SETTLE).await;
    let ((a, a_node, a_ip), (b, b_node, b_ip)) = (&pods[0], &pods[1]);
    assert_ne!(a_node, b_node, "the pods share a node");
    assert_ne!(a_ip, b_ip);

    // From the host, through the API server on the control-plane node (whose kubenet routes reach the workers'
    // pods), pod a dials pod b by its pod IP, across nodes: b answers with its own name.
    let dial = |host: &str, port: u16| {
        format!(
            "/api/v1/namespaces/default/pods/{a}:8080/proxy/dial?request=hostname&host={host}&port={port}\
             &protocol=http&tries=1"
        )
    };
    let answer = kubectl.json(&["get", "--raw", &dial(b_ip, 8080)]);
    assert_eq!(answer["responses"], serde_json::json!([b]), "{answer}");
    // A Service's name resolves from a pod (CoreDNS, through the pod's resolv.conf and its search domains), and
    // kube-proxy carries its ClusterIP to one of the pods, once it has programmed the new Service (until then the
    // ClusterIP refuses).
    let answer = wait_until(SETTLE, "the Service answering from a pod", || async {
        let answer = kubectl.json(&["get", "--raw", &dial("web", 80)]);
        if answer["responses"].is_array() {
            Ok(answer)
        } else {
            Err(answer.to_string())
        }
    })
    .await;
    let responses = answer["responses"].as_array().cloned().unwrap_or_default();
    assert!(
        responses.len() == 1 && (responses[0] == a.as_str() || responses[0] == b.as_str()),
        "{answer}"
    );
    // CoreDNS answers `kubernetes.default` in a pod, and the API's ClusterIP takes a connection.
    let connected = kubectl.run(&[
        "exec",
        b,
        "--",
        "/agnhost",
        "connect",
        "--timeout=5s",
        "kubernetes.default:443",
    ]);
    assert_eq!(
        connected.trim(),
        "",
        "connect says nothing when it connects"
    );

    // `validate` passes every check, the Kubernetes ones among them: every node Ready, every kube-system pod.
    let all = wait_until(SETTLE, "validate to pass", || async {
        let checks = checks(&cloud);
        if !checks.is_empty() && checks.values().all(|(ok, _)| *ok) {
            Ok(checks)
        } else {
            Err(format!("{checks:?}"))
        }
    })
    .await;
    assert!(
        all.contains_key("kubernetes nodes") && all.contains_key("kube-system pods"),
        "{all:?}"
    );

    // A worker's kubelet stops: `validate` fails, naming its node; it runs again, and `validate` passes.
    let worker = instances
        .iter()
        .find(|r| a_node.starts_with(&format!("ip-{}.", r.private_ip.replace('.', "-"))))
        .expect("pod a's instance");
    let (ok, _, err) = cloud.cli(&[
        "exec",
        &worker.instance_id,
        "--",
        "systemctl",
        "stop",
        "kubelet",
    ]);
    assert!(ok, "{err}");
    let failed = wait_until(
        SETTLE,
        "validate to fail on the stopped kubelet",
        || async {
            let checks = checks(&cloud);
            match checks.get("kubernetes nodes") {
                Some((false, reason)) => Ok(reason.clone()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        failed.contains(&format!(
            "Node {a_node} ({}) is not Ready",
            worker.instance_id
        )),
        "{failed}"
    );
    let (ok, _, err) = cloud.cli(&[
        "exec",
        &worker.instance_id,
        "--",
        "systemctl",
        "start",
        "kubelet",
    ]);
    assert!(ok, "{err}");
    wait_until(SETTLE, "validate to pass again", || async {
        let checks = checks(&cloud);
        if !checks.is_empty() && checks.values().all(|(ok, _)| *ok) {
            Ok(())
        } else {
            Err(format!("{checks:?}"))
        }
    })
    .await;
}
