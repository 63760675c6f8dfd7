//! Real Kubernetes on a cluster of machines: on the control-plane machine the kubelet built here runs
//! kube-apiserver, the controller manager and the scheduler as static pods from the images built here, the API
//! answers through the API's network load balancer from the operator's host, and a worker joins through the same
//! load balancer by its DNS name, which the VPC's resolver answers inside the VPC.
//!
//! What it holds, on a 1 + 1 kubenet cluster with this host's needs in its spec (`kubelet.failCgroupV1: false`:
//! the host is cgroup v1; `kubelet.evictionHard` at 1% for the disks: the host's disk is shared and nearly full;
//! `kubeProxy.conntrackMaxPerCore: 0`: a machine may not set the kernel's connection-tracking limit):
//! - `validate cluster`'s API check answers through the load balancer;
//! - `export kubeconfig --admin` gives a kubectl (the one built here) that reads `/readyz` through it and finds
//!   the control plane's static pods running;
//! - the add-on applier applied the release's add-ons with the images the AMI holds, by the digests its store
//!   holds them under (CoreDNS's, which upstream publishes no pin for, built here);
//! - both nodes registered, under EC2's private DNS names, at their VPC addresses, running the kubelet and
//!   containerd built here, and Ready: kubenet's bridge from the PodCIDR the controller manager gave each;
//! - the cloud controller manager (scheduled on the control-plane node, which nodeup labels so) initializes both
//!   nodes through the AWS endpoint its node was given, and its route controller writes a route per node's
//!   PodCIDR into the cluster's route table;
//! - CoreDNS becomes available.
//!
//! Needs root, the Go builds and the emulator (`tools/install-deps`); fails, never skips.

use std::time::Duration;

use ballast_e2e::go_builds::built;
use ballast_e2e::image::require_root;
use ballast_e2e::localcloud::{LocalCloud, MachineOptions, Options};
use ballast_e2e::operator::{ballast_cli, ballast_cli_on, validate_checks, STATE_BUCKET, ZONES};
use ballast_e2e::wait::wait_until;

const CLUSTER: &str = "kube.example.com";
/// Two machines booting systemd, containerd, etcd and a control plane on two cores.
const SETTLE: Duration = Duration::from_secs(300);
/// What this host needs of the kubelet and kube-proxy, as any cgroup v1 host with a nearly full shared disk, whose
/// nodes may not set the kernel's connection-tracking limit, would.
const HOST_SETTINGS: &str = "  kubelet:\n    failCgroupV1: false\n    \
                       evictionHard: memory.available<100Mi,nodefs.available<1%,imagefs.available<1%\n  \
                       kubeProxy:\n    conntrackMaxPerCore: 0\n";

fn checks(cloud: &LocalCloud) -> std::collections::BTreeMap<String, (bool, String)> {
    validate_checks(cloud, CLUSTER)
}

/// kubectl (built here) against the cluster through the load balancer's host address, as the exported
/// kubeconfig names it (the host resolves the cloud's names from its hosts file, which kubectl does not read).
fn kubectl(kubeconfig: &std::path::Path, address: &str, name: &str, args: &[&str]) -> String {
    try_kubectl(kubeconfig, address, name, args).unwrap_or_else(|e| panic!("{e}"))
}

/// [`kubectl`], its failure returned (stderr) rather than panicking.
fn try_kubectl(
    kubeconfig: &std::path::Path,
    address: &str,
    name: &str,
    args: &[&str],
) -> Result<String, String> {
    let out = std::process::Command::new(kubectl_program())
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--server=https://{address}:443"))
        .arg(format!("--tls-server-name={name}"))
        .arg("--request-timeout=20s")
        .args(args)
        .output()
        .expect("kubectl");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The kubectl built here for the cluster's release (`go/kube/<minor>`).
fn kubectl_program() -> std::path::PathBuf {
    let version = ballast_state::defaults::DEFAULT_KUBERNETES_VERSION;
    let minor = version.rsplit_once('.').map_or(version, |(minor, _)| minor);
    built(minor).join("kubectl")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_of_machines_runs_the_kubernetes_control_plane() {
    require_root();
    let cloud = LocalCloud::start_with(Options {
        machines: Some(MachineOptions::default_release()),
        ..Options::default()
    });
    cloud.prepare_for_ballast(STATE_BUCKET).await;
    let zone = ZONES.split(',').next().expect("a zone");
    ballast_cli(&cloud)
        .args(["create", "cluster", "--name", CLUSTER, "--zones", zone])
        .args(["--node-count", "1", "--admin-access", "0.0.0.0/0"])
        .args(["--networking", "kubenet"])
        .assert()
        .success();
    // The host's kubelet settings, as an operator edits them: the stored spec, replaced, then applied.
    let stored = ballast_cli_on(&cloud, CLUSTER)
        .args(["get", "clusters", CLUSTER, "-o", "yaml"])
        .output()
        .expect("get clusters");
    let yaml = format!("{}{HOST_SETTINGS}", String::from_utf8_lossy(&stored.stdout));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let spec = dir.path().join("cluster.yaml");
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
    let hosts = std::fs::read_to_string(localcloud::balancers::hosts_file(&cloud.state))
        .expect("the cloud's hosts file");
    let (address, name) = hosts
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.split_once(' '))
        .map(|(a, n)| (a.to_string(), n.trim().to_string()))
        .unwrap_or_else(|| panic!("no load balancer in the hosts file:\n{hosts}"));
    assert!(
        valid["kubernetes API"]
            .1
            .contains(&format!("https://{address}:443")),
        "{valid:?}"
    );

    // An admin kubeconfig from `export kubeconfig`, read by the kubectl built here.
    let kubeconfig = dir.path().join("kubeconfig");
    ballast_cli_on(&cloud, CLUSTER)
        .args([
            "export",
            "kubeconfig",
            CLUSTER,
            "--admin=1h",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .assert()
        .success();
    // Ready once its post-start hooks (the bootstrap roles and priority classes) are done.
    let ready = wait_until(SETTLE, "the API server ready", || async {
        try_kubectl(&kubeconfig, &address, &name, &["get", "--raw", "/readyz"])
    })
    .await;
    assert_eq!(ready.trim(), "ok");
    wait_until(
        SETTLE,
        "the control plane's static pods running",
        || async {
            let pods: serde_json::Value = serde_json::from_str(&kubectl(
                &kubeconfig,
                &address,
                &name,
                &["get", "pods", "-n", "kube-system", "-o", "json"],
            ))
            .expect("pods as JSON");
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
        try_kubectl(
            &kubeconfig,
            &address,
            &name,
            &[
                "get",
                "deployment",
                "coredns",
                "-n",
                "kube-system",
                "-o",
                "jsonpath={.spec.template.spec.containers[0].image}",
            ],
        )
        .and_then(|image| {
            if image.is_empty() {
                Err("no image yet".to_string())
            } else {
                Ok(image)
            }
        })
    })
    .await;
    let record = ballast_state::components::ImageComponents::parse(
        &std::fs::read_to_string(
            MachineOptions::default_release().images[0]
                .1
                .join("etc/ballast/components.yaml"),
        )
        .expect("the image's record"),
        "the image's record",
    )
    .expect("a readable record");
    let (reference, digest) = record
        .images
        .iter()
        .find(|(r, _)| r.contains("/coredns/"))
        .expect("the image holds CoreDNS");
    assert_eq!(coredns, format!("{reference}@{digest}"));

    // Both nodes registered (the worker through the load balancer's name, resolved inside the VPC) and Ready:
    // kubenet's bridge from the PodCIDR the controller manager gave each.
    let nodes = wait_until(SETTLE, "both nodes registered and Ready", || async {
        let nodes: serde_json::Value = serde_json::from_str(&kubectl(
            &kubeconfig,
            &address,
            &name,
            &["get", "nodes", "-o", "json"],
        ))
        .expect("nodes as JSON");
        let items = nodes["items"].as_array().cloned().unwrap_or_default();
        let ready = items
            .iter()
            .filter(|n| {
                n["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .count();
        if items.len() == 2 && ready == 2 {
            Ok(nodes)
        } else {
            Err(format!("{} nodes, {ready} Ready: {nodes}", items.len()))
        }
    })
    .await;
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

    // The cloud controller manager (on the control-plane node, which nodeup labelled so) initialized both
    // nodes through the AWS endpoint its node was given: provider IDs, and the uninitialized taint gone.
    wait_until(
        SETTLE,
        "the nodes initialized by the cloud controller",
        || async {
            let nodes: serde_json::Value = serde_json::from_str(&kubectl(
                &kubeconfig,
                &address,
                &name,
                &["get", "nodes", "-o", "json"],
            ))
            .expect("nodes as JSON");
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
        if routes.len() >= 2 {
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

    // CoreDNS runs, on the worker (the control plane is tainted), with its pods on kubenet's bridge.
    wait_until(SETTLE, "CoreDNS available", || async {
        let available = try_kubectl(
            &kubeconfig,
            &address,
            &name,
            &[
                "get",
                "deployment",
                "coredns",
                "-n",
                "kube-system",
                "-o",
                "jsonpath={.status.availableReplicas}",
            ],
        )?;
        if available.trim().parse::<u32>().is_ok_and(|n| n >= 1) {
            Ok(())
        } else {
            Err(format!("available: {available:?}"))
        }
    })
    .await;
}
