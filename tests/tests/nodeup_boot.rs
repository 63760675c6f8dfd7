//! nodeup against a fake IMDS (a few lines of HTTP on loopback) and a `file://` state store: idempotence, and
//! the bad inputs (tampered node spec, missing user-data, unreachable state store), each with a clear error in
//! the log and in the boot report, and nothing half-written under the root. No emulator needed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use ballast_e2e::localcloud::binaries;
use ballast_state::layout::ClusterPaths;
use ballast_state::node::{render_node_spec, BootConfig};
use ballast_state::pki::ClusterSecrets;
use ballast_state::report::{NodeReport, Phase};
use ballast_state::spec::{ClusterConfig, Role};
use ballast_store::store::{FileStore, Precondition, StateStore};

const CLUSTER: &str = "boot.example.com";

/// A fake IMDSv2: any token, fixed metadata, user-data when set.
struct FakeImds {
    endpoint: String,
    user_data: Arc<Mutex<Option<String>>>,
}

impl FakeImds {
    fn start(ip: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let user_data: Arc<Mutex<Option<String>>> = Arc::default();
        let md: BTreeMap<String, String> = [
            ("instance-id", "i-0b00700000000001"),
            ("placement/region", "us-west-2"),
            ("placement/availability-zone", "us-west-2a"),
            ("local-ipv4", ip),
            ("local-hostname", "ip-127-77-1-4.us-west-2.compute.internal"),
            ("instance-type", "t3.medium"),
            ("ami-id", "ami-0123"),
            ("mac", "0a:00:00:00:00:01"),
        ]
        .into_iter()
        .map(|(k, v)| (format!("/latest/meta-data/{k}"), v.to_string()))
        .collect();
        let ud = user_data.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut first = String::new();
                let _ = reader.read_line(&mut first);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).map_or(true, |n| n == 0) || line == "\r\n" {
                        break;
                    }
                }
                let mut parts = first.split_whitespace();
                let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                let body = match (method, path) {
                    ("PUT", "/latest/api/token") => Some("token".to_string()),
                    ("GET", "/latest/user-data") => ud.lock().expect("lock").clone(),
                    ("GET", p) => md.get(p).cloned(),
                    _ => None,
                };
                let response = match body {
                    Some(b) => format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nx-aws-ec2-metadata-token-ttl-seconds: 21600\r\nConnection: close\r\n\r\n{b}",
                        b.len()
                    ),
                    None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
                };
                let _ = stream.write_all(response.as_bytes());
            }
        });
        FakeImds {
            endpoint,
            user_data,
        }
    }

    fn set_user_data(&self, text: Option<String>) {
        *self.user_data.lock().expect("lock") = text;
    }
}

fn config() -> ClusterConfig {
    use ballast_state::{defaults, generate};
    defaults::complete(
        &generate::generate(&generate::ClusterTemplate {
            name: CLUSTER.into(),
            zones: vec!["us-west-2a".into()],
            ..Default::default()
        })
        .expect("template"),
    )
}

struct Setup {
    _dir: tempfile::TempDir,
    store_dir: PathBuf,
    root: PathBuf,
    imds: FakeImds,
}

impl Setup {
    async fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store_dir = dir.path().join("store");
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).expect("root");
        let store = StateStore::File(FileStore::new(store_dir.clone()));
        let secrets = ClusterSecrets::generate(CLUSTER).expect("secrets");
        for object in secrets
            .objects(&ClusterPaths::new(CLUSTER))
            .expect("objects")
        {
            store
                .put(&object.key, &object.data, &Precondition::None)
                .await
                .expect("put");
        }
        Setup {
            _dir: dir,
            store_dir,
            root,
            imds: FakeImds::start("127.77.1.4"),
        }
    }

    fn url(&self) -> String {
        format!("file://{}", self.store_dir.display())
    }

    fn store(&self) -> StateStore {
        StateStore::File(FileStore::new(self.store_dir.clone()))
    }

    /// Publishes the group's node spec (as `update cluster` does) and points user-data at it.
    async fn publish(&self, config: &ClusterConfig, group: &str, role: Role) -> String {
        let spec =
            render_node_spec(config, group, &self.url(), "api.boot.example.com").expect("spec");
        let key = ClusterPaths::new(CLUSTER).node_spec(group);
        self.store()
            .put(&key, spec.yaml.as_bytes(), &Precondition::None)
            .await
            .expect("put spec");
        let boot = BootConfig::for_group(CLUSTER, group, role, &self.url(), &spec.sha256);
        self.imds
            .set_user_data(Some(boot.to_user_data().expect("user-data")));
        spec.yaml
    }

    /// Runs `nodeup --once`: (exit code, stderr).
    fn nodeup(&self, extra_env: &[(&str, &str)]) -> (i32, String) {
        let out = Command::new(&binaries().nodeup)
            .arg("--root")
            .arg(&self.root)
            .args([
                "--once",
                "--imds-timeout-secs",
                "3",
                "--store-timeout-secs",
                "2",
                // No EC2 here (a fake IMDS, no emulator): etcd's data stays on the root disk.
                "--etcd-data",
                "root-disk",
            ])
            .env_clear()
            .env("HOME", &self.root)
            .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", &self.imds.endpoint)
            .env("AWS_ACCESS_KEY_ID", "AKIAFAKE")
            .env("AWS_SECRET_ACCESS_KEY", "fake")
            .env("AWS_REGION", "us-west-2")
            .envs(extra_env.iter().copied())
            .output()
            .expect("running nodeup");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn local_report(&self) -> NodeReport {
        NodeReport::from_json(
            &std::fs::read(self.root.join(nodeup::REPORT_FILE)).expect("a local report"),
        )
        .expect("parses")
    }

    async fn stored_report(&self) -> Option<NodeReport> {
        let key = ClusterPaths::new(CLUSTER).report("i-0b00700000000001");
        let object = self.store().get(&key).await.expect("store")?;
        Some(ballast_e2e::reports::parse(&object.data).report)
    }

    /// Every file under the root but nodeup's own records.
    fn node_files(&self) -> Vec<String> {
        fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(base, &p, out);
                } else {
                    out.push(p.strip_prefix(base).expect("base").display().to_string());
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &self.root, &mut out);
        out.retain(|p| !p.starts_with("var/lib/nodeup/"));
        out.sort();
        out
    }
}

#[tokio::test]
async fn a_second_run_changes_nothing_and_a_new_spec_changes_only_what_differs() {
    let s = Setup::new().await;
    let mut config = config();
    s.publish(&config, "control-plane-us-west-2a", Role::ControlPlane)
        .await;
    let (code, log) = s.nodeup(&[]);
    assert_eq!(code, 0, "{log}");
    let first = s.local_report();
    assert_eq!(first.phase, Phase::Configured);
    assert!(first.files_written.len() > 30, "{:?}", first.files_written);
    assert_eq!(
        s.stored_report().await.expect("stored").phase,
        Phase::Configured
    );
    // Private keys are 0600 under the root; the etcd CA key is never written to disk.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &str| {
        std::fs::metadata(s.root.join(p))
            .expect(p)
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("etc/kubernetes/pki/apiserver.key"), 0o600);
    assert_eq!(mode("etc/kubernetes/encryption-config.yaml"), 0o600);
    assert!(!s
        .node_files()
        .iter()
        .any(|p| p.contains("etcd-ca") || p.ends_with("etcd/ca.key")));
    assert!(!log.contains("PRIVATE KEY"), "a private key was logged");

    let (code, log) = s.nodeup(&[]);
    assert_eq!(code, 0, "{log}");
    let second = s.local_report();
    assert!(
        second.files_written.is_empty(),
        "second run wrote {:?}",
        second.files_written
    );
    assert_eq!(second.files_unchanged, first.files_written.len());
    assert!(second
        .services_in(ballast_state::report::ServiceState::Restarted)
        .is_empty());

    // A new taint: only the kubelet's configuration changes (certificates are kept).
    let ig = config
        .instance_groups
        .iter_mut()
        .find(|g| g.metadata.name == "control-plane-us-west-2a")
        .expect("group");
    ig.spec
        .taints
        .get_or_insert_with(Vec::new)
        .push("example.com/maintenance:NoExecute".into());
    s.publish(&config, "control-plane-us-west-2a", Role::ControlPlane)
        .await;
    let (code, log) = s.nodeup(&[]);
    assert_eq!(code, 0, "{log}");
    let third = s.local_report();
    let paths: Vec<&str> = third
        .files_written
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(paths, ["/var/lib/kubelet/config.yaml"], "{log}");
}

#[tokio::test]
async fn a_tampered_node_spec_is_refused_and_nothing_is_written() {
    let s = Setup::new().await;
    let yaml = s.publish(&config(), "nodes", Role::Node).await;
    // Someone changes the spec in the store after the launch template was written.
    let key = ClusterPaths::new(CLUSTER).node_spec("nodes");
    let tampered = yaml.replace("cgroupDriver: systemd", "cgroupDriver: cgroupfs");
    s.store()
        .put(&key, tampered.as_bytes(), &Precondition::None)
        .await
        .expect("put");
    let (code, log) = s.nodeup(&[]);
    assert_eq!(code, 7, "{log}");
    assert!(log.contains("refusing the node spec"), "{log}");
    assert!(log.contains("sha256"), "{log}");
    for report in [
        s.local_report(),
        s.stored_report().await.expect("a report in the store"),
    ] {
        assert_eq!(report.phase, Phase::Failed);
        assert!(
            report.errors[0].contains("refusing the node spec"),
            "{:?}",
            report.errors
        );
        assert!(report
            .log_tail
            .iter()
            .any(|l| l.contains("refusing the node spec")));
        assert!(report.files_written.is_empty());
    }
    assert_eq!(s.node_files(), Vec::<String>::new());
}

#[tokio::test]
async fn missing_user_data_is_said_and_nothing_is_written() {
    let s = Setup::new().await;
    s.imds.set_user_data(None);
    let (code, log) = s.nodeup(&[]);
    assert_eq!(code, 3, "{log}");
    assert!(log.contains("has no user-data"), "{log}");
    let report = s.local_report();
    assert_eq!(report.phase, Phase::Failed);
    assert_eq!(report.instance_id, "unknown");
    assert!(
        report.errors[0].contains("has no user-data"),
        "{:?}",
        report.errors
    );
    assert_eq!(s.node_files(), Vec::<String>::new());
    // The store is not known without a boot config: no report there.
    assert!(s.stored_report().await.is_none());
}

#[tokio::test]
async fn an_unreachable_state_store_is_said_and_nothing_is_written() {
    let s = Setup::new().await;
    let spec = render_node_spec(
        &config(),
        "nodes",
        "s3://ballast-nowhere/state",
        "api.example.com",
    )
    .expect("spec");
    let boot = BootConfig::for_group(
        CLUSTER,
        "nodes",
        Role::Node,
        "s3://ballast-nowhere/state",
        &spec.sha256,
    );
    s.imds
        .set_user_data(Some(boot.to_user_data().expect("user-data")));
    // Nothing listens on port 9 of loopback: every S3 request is refused. nodeup gives up at its store deadline
    // (--store-timeout-secs 2), and says so; how long the whole run takes is not asserted (STS's retries for the
    // report's and log tail's writes come after), only that it ends.
    let (code, log) = s.nodeup(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:9")]);
    assert_eq!(code, 6, "{log}");
    assert!(
        log.contains("state store s3://ballast-nowhere/state is unreachable: reading ")
            && log.contains(" failed for "),
        "{log}"
    );
    let report = s.local_report();
    assert_eq!(report.phase, Phase::Failed);
    assert!(
        report.errors[0].contains("unreachable"),
        "{:?}",
        report.errors
    );
    assert!(report.log_tail.iter().any(|l| l.contains("unreachable")));
    assert_eq!(s.node_files(), Vec::<String>::new());
}

#[tokio::test]
async fn an_ami_without_the_spec_s_components_is_refused_with_every_difference() {
    use ballast_state::components::{
        ComponentManifest, ImageComponents, InstalledComponent, InstalledFile,
    };
    let s = Setup::new().await;
    s.publish(&config(), "nodes", Role::Node).await;
    // The image record an AMI baked for the right minor, but with another kubelet and without crictl.
    let manifest = ComponentManifest::embedded().expect("manifest");
    let (minor, release) = manifest.release_for_minor("1.33.4").expect("1.33");
    let mut components = BTreeMap::new();
    for (name, component) in &release.components {
        let version = if name == "kubelet" {
            "1.33.1".to_string()
        } else {
            component.version.clone()
        };
        if name != "crictl" {
            components.insert(
                name.clone(),
                InstalledComponent {
                    version,
                    sha256: "0".repeat(64),
                    built_by: None,
                    files: BTreeMap::new(),
                },
            );
        }
    }
    let record = ImageComponents {
        api_version: "ballast.dev/v1alpha1".into(),
        kind: "ImageComponents".into(),
        kubernetes_minor: minor.to_string(),
        kubernetes: release.kubernetes.clone(),
        manifest_sha256: "0".repeat(64),
        baked_at: "2026-11-30T00:00:00Z".into(),
        nodeup: InstalledFile {
            path: "/usr/local/bin/nodeup".into(),
            sha256: "0".repeat(64),
        },
        components,
        images: BTreeMap::new(),
    };
    let path = s.root.join("etc/ballast/components.yaml");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, serde_json::to_string_pretty(&record).expect("json"))
        .expect("write record");

    let (code, log) = s.nodeup(&[]);
    assert_eq!(code, 10, "{log}");
    let report = s.stored_report().await.expect("a report in the store");
    assert_eq!(report.phase, Phase::Failed);
    let error = &report.errors[0];
    assert!(
        error.contains("the AMI does not carry what the node spec needs"),
        "{error}"
    );
    assert!(
        error.contains("kubelet") && error.contains("1.33.1"),
        "{error}"
    );
    assert!(error.contains("crictl"), "{error}");
    assert!(report.files_written.is_empty());
}
