//! Real Kubernetes on the local cloud's machines, as the tests drive it: a kubenet cluster created with this
//! host's needs in its spec, the admin kubeconfig exported, and the kubectl built here pointed at the API's load
//! balancer through the cloud's hosts file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::go_builds::built;
use crate::localcloud::{LocalCloud, MachineOptions};
use crate::operator::{ballast_cli, ballast_cli_on, STATE_BUCKET};
use crate::wait::wait_until;

/// What this host needs of the kubelet and kube-proxy, as any cgroup v1 host with a nearly full shared disk, whose
/// nodes may not set the kernel's connection-tracking limit, would: `kubelet.failCgroupV1: false` (the kubelet
/// refuses cgroup v1 from 1.35), `kubelet.evictionHard` at 1% for the disks (under the kubelet's 10% and 15%
/// defaults), `kubeProxy.conntrackMaxPerCore: 0`.
pub const HOST_SETTINGS: &str = "  kubelet:\n    failCgroupV1: false\n    \
                       evictionHard: memory.available<100Mi,nodefs.available<1%,imagefs.available<1%\n  \
                       kubeProxy:\n    conntrackMaxPerCore: 0\n";

/// Creates `cluster` (`--networking kubenet`, `nodes` workers, a control-plane group per zone of `zones`), adds
/// [`HOST_SETTINGS`] to its stored spec as an operator would (`replace -f` of the spec, written in `dir`), and
/// applies it (`update cluster --yes`). Panics with ballast's output when a step fails.
pub async fn create_kubenet_cluster(
    cloud: &LocalCloud,
    cluster: &str,
    zones: &str,
    nodes: u32,
    dir: &Path,
) {
    cloud.prepare_for_ballast(STATE_BUCKET).await;
    ballast_cli(cloud)
        .args(["create", "cluster", "--name", cluster, "--zones", zones])
        .args([
            "--node-count",
            &nodes.to_string(),
            "--admin-access",
            "0.0.0.0/0",
        ])
        .args(["--networking", "kubenet"])
        .assert()
        .success();
    let stored = ballast_cli_on(cloud, cluster)
        .args(["get", "clusters", cluster, "-o", "yaml"])
        .output()
        .expect("get clusters");
    let yaml = format!("{}{HOST_SETTINGS}", String::from_utf8_lossy(&stored.stdout));
    let spec = dir.join("cluster.yaml");
    std::fs::write(&spec, yaml).expect("write the spec");
    ballast_cli_on(cloud, cluster)
        .args(["replace", "-f"])
        .arg(&spec)
        .assert()
        .success();
    ballast_cli_on(cloud, cluster)
        .args(["update", "cluster", cluster, "--yes"])
        .assert()
        .success();
}

/// The API's load balancer as the host reaches it: its address in the cloud's hosts file, and its DNS name.
/// Waits for the cloud to have started it (the runner starts a load balancer soon after it is created).
pub async fn api_balancer(cloud: &LocalCloud) -> (String, String) {
    let path = localcloud::balancers::hosts_file(&cloud.state);
    wait_until(
        Duration::from_secs(60),
        "the API's load balancer in the hosts file",
        || async {
            let hosts = std::fs::read_to_string(&path).unwrap_or_default();
            hosts
                .lines()
                .filter(|l| !l.starts_with('#'))
                .find_map(|l| l.split_once(' '))
                .map(|(a, n)| (a.to_string(), n.trim().to_string()))
                .ok_or_else(|| format!("no load balancer in {}:\n{hosts}", path.display()))
        },
    )
    .await
}

/// kubectl (built here) against the cluster through the load balancer's host address, as the exported
/// kubeconfig names it (the host resolves the cloud's names from its hosts file, which kubectl does not read).
pub struct Kubectl {
    pub kubeconfig: PathBuf,
    /// The load balancer's address on the host, and its DNS name (the API server's certificate names it).
    pub address: String,
    pub name: String,
}

impl Kubectl {
    /// `export kubeconfig --admin` of `cluster` into `dir/kubeconfig`, read through the API's load balancer.
    pub async fn export(cloud: &LocalCloud, cluster: &str, dir: &Path) -> Kubectl {
        let kubeconfig = dir.join("kubeconfig");
        ballast_cli_on(cloud, cluster)
            .args([
                "export",
                "kubeconfig",
                cluster,
                "--admin=2h",
                "--kubeconfig",
            ])
            .arg(&kubeconfig)
            .assert()
            .success();
        let (address, name) = api_balancer(cloud).await;
        Kubectl {
            kubeconfig,
            address,
            name,
        }
    }

    /// What `kubectl args` writes; it must succeed.
    pub fn run(&self, args: &[&str]) -> String {
        self.try_run(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Kubectl::run`] parsed as JSON.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let text = self.run(args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("kubectl {args:?}: {e}: {text}"))
    }

    /// [`Kubectl::run`], its failure returned (its output) rather than panicking.
    pub fn try_run(&self, args: &[&str]) -> Result<String, String> {
        let out = std::process::Command::new(kubectl_program())
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--server=https://{}:443", self.address))
            .arg(format!("--tls-server-name={}", self.name))
            .arg("--request-timeout=20s")
            .args(args)
            .output()
            .expect("kubectl");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Applies `manifest` (YAML), written as `dir/name`.
    pub fn apply(&self, dir: &Path, name: &str, manifest: &str) {
        let path = dir.join(name);
        std::fs::write(&path, manifest).expect("write the manifest");
        self.run(&["apply", "-f", &path.display().to_string()]);
    }

    /// The Ready nodes' names, and how many nodes there are.
    pub fn ready_nodes(&self) -> (std::collections::BTreeSet<String>, usize) {
        let nodes = self.json(&["get", "nodes", "-o", "json"]);
        let items = nodes["items"].as_array().cloned().unwrap_or_default();
        let ready = items
            .iter()
            .filter(|n| is_ready(n))
            .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
            .collect();
        (ready, items.len())
    }

    /// Waits until `count` Nodes exist and all are Ready; returns them (`kubectl get nodes -o json`).
    pub async fn wait_nodes_ready(&self, count: usize, limit: Duration) -> serde_json::Value {
        wait_until(limit, "every node registered and Ready", || async {
            let nodes = self.json(&["get", "nodes", "-o", "json"]);
            let items = nodes["items"].as_array().cloned().unwrap_or_default();
            let ready = items.iter().filter(|n| is_ready(n)).count();
            if items.len() == count && ready == count {
                Ok(nodes)
            } else {
                Err(format!("{} nodes, {ready} Ready", items.len()))
            }
        })
        .await
    }

    /// Waits until `count` pods labelled `selector` in `default` are Ready; returns each one's name, node and
    /// pod IP.
    pub async fn wait_pods_ready(
        &self,
        selector: &str,
        count: usize,
        limit: Duration,
    ) -> Vec<(String, String, String)> {
        wait_until(limit, "the workload's pods ready", || async {
            let pods = self.json(&["get", "pods", "-l", selector, "-o", "json"]);
            let items = pods["items"].as_array().cloned().unwrap_or_default();
            let ready: Vec<(String, String, String)> = items
                .iter()
                .filter(|p| is_ready(p))
                .filter_map(|p| {
                    Some((
                        p["metadata"]["name"].as_str()?.to_string(),
                        p["spec"]["nodeName"].as_str()?.to_string(),
                        p["status"]["podIP"].as_str()?.to_string(),
                    ))
                })
                .collect();
            if ready.len() == count {
                Ok(ready)
            } else {
                Err(format!("{} of {count} ready: {pods}", ready.len()))
            }
        })
        .await
    }
}

/// Of reads made one after another (when, answered), the longest time from an unanswered read to the next
/// answered one, and how many went unanswered.
pub fn longest_gap(reads: &[(std::time::Instant, bool)]) -> (Duration, usize) {
    let mut longest = Duration::ZERO;
    let mut since: Option<std::time::Instant> = None;
    for (at, ok) in reads {
        match (ok, since) {
            (false, None) => since = Some(*at),
            (true, Some(from)) => {
                longest = longest.max(at.duration_since(from));
                since = None;
            }
            _ => {}
        }
    }
    (longest, reads.iter().filter(|(_, ok)| !ok).count())
}

/// The kubectl built here for the cluster's release (`go/kube/<minor>`).
pub fn kubectl_program() -> PathBuf {
    let version = ballast_state::defaults::DEFAULT_KUBERNETES_VERSION;
    let minor = version.rsplit_once('.').map_or(version, |(minor, _)| minor);
    built(minor).join("kubectl")
}

/// Whether a Node or Pod's `Ready` condition is True.
pub fn is_ready(object: &serde_json::Value) -> bool {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The image the local cloud's image holds for the reference containing `part` (`/agnhost:`), as
/// `(reference, digest)` from its record.
pub fn baked_image(part: &str) -> (String, String) {
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
    record
        .images
        .iter()
        .find(|(r, _)| r.contains(part))
        .map(|(r, d)| (r.clone(), d.clone()))
        .unwrap_or_else(|| panic!("the image holds no {part}: {:?}", record.images))
}

/// agnhost's netexec (an HTTP server that also dials others on request) as a Deployment `name` of `replicas`
/// pods behind a ClusterIP Service of the same name (port 80). `spread`: no two pods on one node (required), else
/// the scheduler's default spreading. The image is the one the AMI holds: the local cloud has no registry, so it
/// is never pulled.
pub fn netexec(name: &str, replicas: u32, spread: bool) -> String {
    let (image, _) = baked_image("/agnhost:");
    let affinity = if spread {
        format!(
            "      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n\
             \x20         - labelSelector:\n              matchLabels: {{app: {name}}}\n\
             \x20           topologyKey: kubernetes.io/hostname\n"
        )
    } else {
        String::new()
    };
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: default
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
{affinity}      terminationGracePeriodSeconds: 5
      containers:
      - name: netexec
        image: {image}
        imagePullPolicy: Never
        args: ["netexec", "--http-port=8080"]
        ports:
        - containerPort: 8080
        readinessProbe:
          httpGet: {{path: /readyz, port: 8080}}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: default
spec:
  selector: {{app: {name}}}
  ports:
  - port: 80
    targetPort: 8080
"#
    )
}
